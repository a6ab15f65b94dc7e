"""The batch path of the default embedder (router.embed_hashing) against embed_one.

Bit for bit: the float32 rows are compared as bytes, so even a 0.0 / -0.0 difference
fails. ``embed_one`` is the code path the route stage ran before the batch path.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from ingest.records import Doc
from router.config import RouterConfig
from router.embed import HashedTfidfEmbedder, default_embedder
from router.embed_hashing import _idf_index, _word_bytes, embed_batch, normalise_texts
from router.features import _WORD, normalise_text
from router.idf import IdfTable
from router.records import DomainRecord
from router.route import RouteStage
from topology.runtimes.stage_runner import apply_stage, apply_stage_batch
from worx.scenario import Scenario
from worx.stage import Message

HOSTILE = [
    "",
    "   \n\t  ",
    "x",
    "hello world",
    "a" * 10_000,  # one huge token, longer than max_chars
    "pneumonoultramicroscopic" * 40 + " tail",
    " ".join(f"word{i:03d}" * 6 for i in range(120)),  # many long words at once
    "nul\x00byte\x00\x00 inside\x00",
    "\x00" * 50,
    "Die Würde des Menschen ist unantastbar. Ærøskøbing — «quoted» “curly” …",
    "汉字混合 English テキスト 한국어 😀👍🏽 مرحبا بالعالم",
    "e\u0301 combining, \u200b zero width, \u00a0nbsp, \u2028line sep, \u3000ideographic",
    "İSTANBUL ǅemal ß ﬁ ＦＵＬＬＷＩＤＴＨ",  # lower() changes lengths
    "\x1c\x1d\x1e\x1f separators \x85 next line \x0b\x0c",
    "def f(x):\n    return x  # code\n\tif x:\n\t\tpass\n",
    "!!!???... --- ::: ;;; ((()))",
    "12345 67890 3.14159 2026-12-01",
    "y" * 3999 + " z",  # max_chars falls on a word boundary
    "word " * 3000,  # the same feature thousands of times (tf_cap)
]


@pytest.fixture(scope="module")
def embedder() -> HashedTfidfEmbedder:
    return default_embedder(RouterConfig())


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _one_by_one(embedder: HashedTfidfEmbedder, texts: list[str]) -> np.ndarray:
    return np.stack([embedder.embed_one(text) for text in texts])


@pytest.mark.slow
def test_every_bundled_document_embeds_bit_for_bit_as_embed_one(embedder):
    texts = [d.text for docs in Scenario.from_directory().domains.values() for d in docs]
    assert len(texts) > 8000
    fast = embedder.embed(texts)
    slow = _one_by_one(embedder, texts)
    different = np.flatnonzero((fast.view(np.uint32) != slow.view(np.uint32)).any(axis=1))
    assert different.size == 0, f"{different.size} rows differ, first {different[:5]}"
    assert _same_bits(fast, slow)


@pytest.mark.parametrize(
    "settings",
    [
        {},  # the pipeline's embedder (form block on)
        {"dim": 100},  # not a power of two: buckets by modulo
        {"dim": 8, "shape_weight": 1.5},  # few buckets: many features share one
        {"shape_weight": 0.0, "word_weight": 0.0},
        {"char_ngrams": (1, 2), "shape_ngrams": (), "shape_weight": 1.0},
        {"char_ngrams": (5, 3, 3), "shape_ngrams": (7, 2), "shape_weight": 0.5, "tf_cap": 1.0},
        {"idf": "empty", "max_chars": 50, "shape_weight": 2.0},
    ],
    ids=lambda s: ",".join(s) or "default",
)
def test_hostile_texts_in_one_batch_embed_as_one_by_one(settings):
    settings = dict(settings)
    if settings.get("idf") == "empty":
        settings["idf"] = IdfTable.empty()
    base = {"dim": 1024, "shape_weight": 1.5}
    embedder = HashedTfidfEmbedder(**{**base, **settings})
    slow = _one_by_one(embedder, HOSTILE)
    assert _same_bits(embed_batch(embedder, HOSTILE), slow)
    assert _same_bits(embedder.embed(HOSTILE), slow)
    for i, text in enumerate(HOSTILE):  # alone, and at the end of a batch
        assert _same_bits(embed_batch(embedder, [text])[0], slow[i])
        assert _same_bits(embed_batch(embedder, [HOSTILE[3], text])[1], slow[i])
    assert not slow[0].any() and not slow[1].any()  # empty texts: zero rows


def test_a_lone_surrogate_is_refused_by_both_paths(embedder):
    bad = ["fine text", "broken \ud800 text"]
    with pytest.raises(UnicodeEncodeError):
        embedder.embed_one(bad[1])
    with pytest.raises(UnicodeEncodeError):
        embed_batch(embedder, bad)


def test_whitespace_splits_as_the_regex_does_for_every_code_point():
    every = "a".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    for text in (every, every.upper(), " " + every + "\t"):
        fast = normalise_texts([text], len(text))[0]
        assert fast == re.sub(r"\s+", " ", text.lower()).strip()
    assert normalise_texts(HOSTILE, 4000) == [normalise_text(t, 4000) for t in HOSTILE]


@pytest.mark.slow
def test_word_bytes_are_the_regex_s_for_every_code_point():
    every = " ".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    data = np.frombuffer(every.encode(), dtype=np.uint8)
    word = np.array([bool(_WORD.fullmatch(ch)) for ch in every])  # (chars,)
    width = np.array([len(ch.encode()) for ch in every])  # UTF-8 bytes of each
    assert np.array_equal(_word_bytes([every], data), np.repeat(word, width))


def test_the_idf_index_finds_what_the_sorted_table_finds(embedder):
    table = embedder.idf
    rng = np.random.default_rng(3)
    near = table.hashes ^ np.uint64(1)  # misses right beside every entry
    queries = np.concatenate([table.hashes, near, rng.integers(0, 2**63, 50_000, np.uint64) * 2])
    rng.shuffle(queries)
    assert np.array_equal(_idf_index(table).lookup(queries), table.lookup(queries))
    empty = IdfTable.empty()
    assert np.array_equal(_idf_index(empty).lookup(queries[:10]), empty.lookup(queries[:10]))


def _route_stage(embedder: HashedTfidfEmbedder) -> RouteStage:
    scenario = Scenario.from_directory()
    stage = RouteStage(RouterConfig(), embedder=embedder)
    for label in ("legal", "news"):
        vectors = embedder.embed([d.text for d in scenario.domains[label][:30]])
        centroid = vectors.mean(axis=0)
        centroid /= np.linalg.norm(centroid)
        stage.table.apply(
            DomainRecord(f"dom-{label}", centroid.tolist(), 0.15, 30, 0.4, core_threshold=0.3)
        )
    return stage


@pytest.mark.slow
def test_process_batch_gives_what_process_gives_one_by_one(embedder):
    scenario = Scenario.from_directory()
    docs = [Doc(doc_id=d.doc_id, text=d.text, label=d.domain) for d in scenario.mixture(60)]
    docs += [Doc(doc_id=f"h{i}", text=t) for i, t in enumerate(HOSTILE) if t.strip()]
    messages = [Message(b"", topic="t.docs", partition=1, offset=i) for i in range(len(docs))]
    single, batched = _route_stage(embedder), _route_stage(embedder)
    one_by_one = [single.process(m, d) for m, d in zip(messages, docs, strict=True)]
    assert batched.process_batch(messages, docs) == one_by_one
    assert (batched.routed, batched.novel) == (single.routed, single.novel)
    assert {e.record.domain_id for [e] in one_by_one} >= {"dom-legal", "dom-news", None}
    with pytest.raises(TypeError, match="expects a Doc"):
        batched.process_batch(messages[:2], [docs[0], None])
    assert batched.routed == single.routed  # all or nothing: nothing counted


def test_the_runner_batch_dead_letters_only_the_bad_messages(embedder):
    stage = _route_stage(embedder)
    good = [Doc(doc_id=f"g{i}", text=t) for i, t in enumerate(HOSTILE) if t.strip()]
    raws = [d.to_json() for d in good]
    raws[3:3] = [b"not json", b'{"schema_version": 9}', Doc(doc_id="e", text="x").to_json()[:-9]]
    messages = [Message(raw, topic="t.docs", offset=i) for i, raw in enumerate(raws)]
    one_by_one = _route_stage(embedder)
    expected = [apply_stage(one_by_one, m, "route") for m in messages]
    got = apply_stage_batch(stage, messages, "route")
    assert [_timeless(out) for out in got] == [_timeless(out) for out in expected]
    assert [out[0].topic for out in got].count("dlq") == 3


def _timeless(emits: list) -> list:
    """``emits`` with a dead letter's own creation time zeroed (it is the clock's)."""
    return [
        e._replace(record=dataclasses.replace(e.record, created_ms=0)) if e.topic == "dlq" else e
        for e in emits
    ]
