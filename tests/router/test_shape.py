"""The embedder's form block (text shape) and discover's separation test for cores."""

from __future__ import annotations

import numpy as np
import pytest

from router.cluster import Candidate
from router.config import RouterConfig
from router.discover import DiscoverStage
from router.embed import HashedTfidfEmbedder, hashed_tfidf_embedder
from router.features import shape_hashes, shape_text
from router.idf import IdfTable, fit_idf
from router.records import DomainRecord


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        ("    def f(x):\n\treturn x1 + 22", " a a(a):\n a a0 + 0"),  # indentation survives
        ("Hello World, HTTP 404!", "Aa Aa, A 0!"),  # case classes, runs collapse
        ("Ünïcode “quoted” — dash", "üaïa “a” — a"),  # diacritics stay, lower; punctuation too
        ("Año de la canción, São", "Aña a a aóa, Aãa"),  # a text written with diacritics
        ("Привет, мир 東京", "a, a a"),  # letters of other scripts: "a"
        ("para one.\n\npara two.", "a a.\n\na a."),  # line breaks are never collapsed
        ("", ""),
    ],
)
def test_shape_text(text: str, shape: str) -> None:
    assert shape_text(text, 4000) == shape


def test_a_few_diacritics_in_a_long_text_are_names_not_its_writing() -> None:
    sentence = "The above notice shall be included in all copies of the software. "
    text = "Permission is granted by Société. " + sentence * 10  # 2 of 560 letters
    assert "é" not in shape_text(text, 4000)
    assert shape_text(text, 4000).startswith("Aa a a a Aa.")
    assert "é" in shape_text("Permission is granted by Société. " + sentence, 4000)


def test_shape_respects_max_chars_and_is_deterministic() -> None:
    assert shape_text("abc DEF 123", 3) == "a"
    first = shape_hashes("    x = f(1)\n", 4000, (2, 3))
    assert first.dtype == np.uint64 and first.size == (10 - 1) + (10 - 2)  # " a = a(0)\n": 10 codes
    assert np.array_equal(first, shape_hashes("    y = g(7)\n", 4000, (2, 3)))  # same form
    assert not np.array_equal(first, shape_hashes("y = g(7)\n", 4000, (2, 3)))


def test_form_block_pulls_texts_of_one_layout_together() -> None:
    """Two glossaries with no word in common, and prose: the form block makes the
    glossaries closer to each other than without it, and not the prose to them."""
    glossary_a = "\n".join(f"alpha term {i}: The reaction that binds kinase {i}." for i in range(8))
    glossary_b = "\n".join(f"zeta item {i}: Any wooden chair of style {i}." for i in range(8))
    prose = "It was a cold morning, and she walked slowly to the harbour, thinking of him. " * 3
    plain = HashedTfidfEmbedder(dim=1024, shape_weight=0.0).embed([glossary_a, glossary_b, prose])
    formed = HashedTfidfEmbedder(dim=1024, shape_weight=1.5).embed([glossary_a, glossary_b, prose])
    assert formed[0] @ formed[1] > plain[0] @ plain[1] + 0.05
    assert formed[0] @ formed[1] > formed[0] @ formed[2]
    assert formed[1] @ formed[1] == pytest.approx(1.0, abs=1e-5)


def test_shape_settings_are_part_of_the_fingerprint() -> None:
    default = hashed_tfidf_embedder(RouterConfig())
    assert default.shape_weight == RouterConfig().embed_shape_weight > 0
    off = hashed_tfidf_embedder(RouterConfig(embed_shape_weight=0.0))
    assert off.fingerprint != default.fingerprint
    assert not np.array_equal(off.embed(["x = 1\n"]), default.embed(["x = 1\n"]))
    with pytest.raises(ValueError, match="embed_shape_weight"):
        RouterConfig(embed_shape_weight=-1.0).validate()
    with pytest.raises(ValueError, match="belong_separation"):
        RouterConfig(belong_separation=-0.5).validate()


def test_idf_table_damps_common_forms_and_round_trips() -> None:
    texts = [f"Word number {i} is here, and more words follow." for i in range(50)]
    texts += [f"    x{i} = call({i})\n" for i in range(5)]
    table = fit_idf(texts, min_df=0.1)
    assert table.shape_ngrams == (2, 3, 4, 5)
    prose_form = np.unique(shape_hashes(texts[0], 4000, table.shape_ngrams))
    code_form = np.unique(shape_hashes(texts[-1], 4000, table.shape_ngrams))
    assert table.lookup(prose_form).max() < 0.5 < table.lookup(code_form).mean()  # damped
    again = IdfTable.from_json(table.to_json())
    assert again.shape_ngrams == table.shape_ngrams and again.sha256 == table.sha256


def _stage_with_domain(separation: float) -> tuple[DiscoverStage, np.ndarray]:
    """A discover stage that knows one domain, centred on the first axis."""
    config = RouterConfig(embed_dim=64, belong_separation=separation)
    stage = DiscoverStage(config, embedder=HashedTfidfEmbedder(dim=64))
    axis = np.zeros(64, dtype=np.float32)
    axis[0] = 1.0
    stage.apply_domain(
        DomainRecord(
            domain_id="dom-known",
            centroid=axis.tolist(),
            threshold=0.6,
            size=50,
            cohesion=0.8,
            embedder=stage.embedder.fingerprint,
            core_threshold=0.8,
        )
    )
    return stage, axis


def _core(stage: DiscoverStage, toward_known: float, spread: float) -> Candidate:
    """A core whose centroid has cosine ``toward_known`` to the known domain and whose
    members sit at cosine ``1 - spread``-ish from their centroid (cohesion)."""
    rng = np.random.default_rng(0)
    centre = np.zeros(64, dtype=np.float32)
    centre[0], centre[1] = toward_known, np.sqrt(1 - toward_known**2)
    for k in range(1000):  # the stream they arrived in: one document in 25 is theirs
        stage.timeline.add((k, k))
    for i in range(40):
        noise = rng.normal(size=64).astype(np.float32)
        noise[:2] = 0
        vector = centre + spread * noise / np.linalg.norm(noise)
        item = {"doc_id": f"d{i}", "seq": i, "entered": [25 * i, 25 * i]}
        stage.clusterer.add(vector / np.linalg.norm(vector), item)
    members = list(range(40))
    vectors = stage.clusterer.vectors[members]
    centroid = vectors.mean(axis=0)
    centroid /= np.linalg.norm(centroid)
    sims = vectors @ centroid
    return Candidate(members, centroid, float(sims.mean()), sims, stable=2)


def test_a_loose_core_near_a_known_domain_belongs_to_it() -> None:
    stage, axis = _stage_with_domain(separation=1.5)
    loose = _core(stage, toward_known=0.6, spread=4.0)
    toward = float(loose.centroid @ axis)
    assert 1.5 * loose.cohesion <= toward < stage.config.merge_similarity
    assert stage._belongs("dom-known", toward, loose)
    # members far below the domain's threshold: only the separation test says so
    off, _ = _stage_with_domain(separation=0.0)
    loose_again = _core(off, toward_known=0.6, spread=4.0)
    assert not off._belongs("dom-known", float(loose_again.centroid @ axis), loose_again)


def test_a_tight_core_near_a_known_domain_stays_new() -> None:
    stage, axis = _stage_with_domain(separation=1.5)
    tight = _core(stage, toward_known=0.6, spread=0.5)  # cohesion ~0.9: stands apart
    toward = float(tight.centroid @ axis)
    assert 1.5 * tight.cohesion > toward
    assert not stage._belongs("dom-known", toward, tight)
