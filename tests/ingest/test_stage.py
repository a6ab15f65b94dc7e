"""The ingest stage without a broker: every dead-letter class, mapping, dedup, split."""

from __future__ import annotations

import base64
import json

import pytest

from ingest.config import IngestConfig
from ingest.normalise import normalise_text, split_text
from ingest.records import DeadLetter, Doc
from ingest.stage import NormaliseStage
from worx.stage import Message


def run_one(value: bytes | None, stage: NormaliseStage | None = None, **config):
    stage = stage or NormaliseStage(IngestConfig(**config))
    return stage.process(Message(value, topic="company.raw", partition=3, offset=41))


def dead(value: bytes | None, **config) -> DeadLetter:
    [emit] = run_one(value, **config)
    assert emit.topic == "dlq" and isinstance(emit.record, DeadLetter)
    return emit.record


BAD_INPUTS = [
    (b"{not json", {}, "not_json"),
    (b"[1, 2, 3]", {}, "not_object"),
    (b'"just a string"', {}, "not_object"),
    (b'{"id": "x"}', {}, "missing_text"),
    (b'{"id": "x", "text": null}', {}, "missing_text"),
    (b'{"id": "x", "text": 42}', {}, "text_not_string"),
    (b'{"id": "x", "text": ["a"]}', {}, "text_not_string"),
    (b'{"id": "x", "text": "   \\n\\t  "}', {}, "empty_text"),
    (b'{"id": "x", "text": "\\u0000\\u0007"}', {}, "empty_text"),
    (b'{"id": "x", "text": "caf\xe9"}', {}, "invalid_utf8"),
    (b'{"id": "x", "text": "' + b"a" * 101 + b'"}', {"max_doc_chars": 100}, "oversize"),
    (b'{"schema_version": 7, "id": "x", "text": "hi"}', {}, "unknown_schema_version"),
    (b'{"id": "x", "text": "hi", "extra": 1}', {"strict": True}, "unknown_fields"),
    (b'{"id": "x", "text": "bad \\ud800 surrogate"}', {}, "invalid_unicode"),
    (b'{"id": {"a": 1}, "text": "hi"}', {}, "bad_id"),
    (b'{"id": "a\\u0000b", "text": "hi"}', {}, "bad_id"),
    (b'{"id": "' + b"i" * 300 + b'", "text": "hi"}', {}, "bad_id"),
    (b'{"id": "x", "text": "hi", "d": 3}', {"domain_field": "d"}, "bad_label"),
    (b'{"id": "x", "text": "hi", "d": "../etc"}', {"domain_field": "d"}, "bad_label"),
    (b"", {}, "empty_message"),
    (None, {}, "empty_message"),
    (b'{"text": "' + b"a" * 200 + b'"}', {"max_message_bytes": 100}, "too_large"),
    (
        b"[" * 100_000 + b"]" * 100_000,
        {"max_message_bytes": 10**6, "dlq_original_bytes": 10**6},
        "not_json",
    ),
]


@pytest.fixture(params=["orjson", "stdlib"])
def codec(request, monkeypatch):
    """Run with the optional orjson fast path and without it (as where it is not installed)."""
    import ingest.stage
    import worx.record_decode_plain
    import worx.records

    if request.param == "stdlib":
        monkeypatch.setattr(ingest.stage, "orjson", None)
        monkeypatch.setattr(worx.records, "orjson", None)  # the records' encoder
        monkeypatch.setattr(worx.record_decode_plain, "orjson", None)  # and plain decoder
    elif ingest.stage.orjson is None:
        pytest.skip("orjson is not installed")
    return request.param


@pytest.mark.parametrize(("value", "config", "reason"), BAD_INPUTS)
def test_every_bad_input_is_dead_lettered_with_its_reason_and_provenance(
    value, config, reason, codec
):
    letter = dead(value, **config)
    assert letter.reason == reason
    assert letter.detail
    assert letter.original() == (value or b"")
    assert letter.original_size == len(value or b"")
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (
        "company.raw",
        3,
        41,
    )
    assert letter.stage == "ingest"
    # the dead letter itself survives its own serde (what goes on the wire)
    assert DeadLetter.from_json(letter.to_json()) == letter


def test_non_strict_accepts_unknown_fields_and_strict_allows_mapped_ones():
    value = b'{"id": "x", "text": "hi", "extra": 1}'
    [emit] = run_one(value)
    assert emit.topic == "docs"
    stage = NormaliseStage(IngestConfig(strict=True, domain_field="d", meta_fields=("extra",)))
    [emit] = stage.process(Message(b'{"id": "x", "text": "hi", "extra": 1, "d": "news"}'))
    assert emit.record.label == "news"
    assert emit.record.meta == {"extra": "1"}


def test_dead_letter_original_is_cut_to_the_configured_size():
    value = b'{"id": 1, "text": 5, "pad": "' + b"x" * 5000 + b'"}'
    letter = dead(value, dlq_original_bytes=100)
    assert letter.original() == value[:100]
    assert letter.original_size == len(value)
    assert "cut" in letter.detail


def test_doc_fields_mapping_ids_and_serde(codec):
    stage = NormaliseStage(
        IngestConfig(text_field="body.content", id_field="uid", domain_field="kind")
    )
    value = json.dumps({"uid": 17, "kind": "legal", "body": {"content": "A\u0301  b"}}).encode()
    [emit] = stage.process(Message(value, topic="src", timestamp_ms=1234))
    doc = emit.record
    assert isinstance(doc, Doc)
    assert (emit.key, doc.doc_id, doc.text, doc.label) == ("17", "17", "\u00c1 b", "legal")
    assert (doc.source, doc.created_ms, doc.part) == ("kafka:src", 1234, 0)
    assert Doc.from_json(doc.to_json()) == doc


def test_missing_id_uses_a_stable_content_hash():
    a = run_one(b'{"text": "same  text"}')[0].record
    b = run_one(b'{"text": "same text", "id": ""}')[0].record
    assert a.doc_id == b.doc_id and a.doc_id.startswith("h")
    assert run_one(b'{"text": "other"}')[0].record.doc_id != a.doc_id


def test_duplicates_within_the_window_are_dropped_and_counted():
    stage = NormaliseStage(IngestConfig(dedup_window=2))
    ids = ["a", "b", "a", "c", "d", "a"]  # the last "a" has left the 2-id window
    out = [stage.process(Message(json.dumps({"id": i, "text": "t"}).encode())) for i in ids]
    assert [len(o) for o in out] == [1, 1, 0, 1, 1, 1]
    assert stage.counters["duplicates"] == 1
    restored = NormaliseStage(IngestConfig(dedup_window=2))
    restored.restore(json.loads(json.dumps(stage.snapshot())))
    assert restored.process(Message(b'{"id": "a", "text": "t"}')) == []
    assert restored.counters["duplicates"] == 2


def test_oversize_split_mode_emits_numbered_parts():
    stage = NormaliseStage(IngestConfig(max_doc_chars=10, oversize="split"))
    [*emits] = stage.process(Message(b'{"id": "big", "text": "aaaa bbbb\\n\\ncccc dddd eeee"}'))
    assert [e.key for e in emits] == ["big#0", "big#1", "big#2"]
    assert [e.record.part for e in emits] == [0, 1, 2]
    assert all(len(e.record.text) <= 10 for e in emits)
    assert stage.counters["parts"] == 2


def test_text_format_uses_the_key_as_id():
    stage = NormaliseStage(IngestConfig(), source_format="text")
    [emit] = stage.process(Message(b"plain  text body", key=b"k-1", topic="logs"))
    assert (emit.key, emit.record.text) == ("k-1", "plain text body")
    [bad] = stage.process(Message(b"\xff\xfe", topic="logs"))
    assert bad.record.reason == "invalid_utf8"


def test_normalise_keeps_code_and_collapses_prose():
    text = "Title\u00a0\u00a0here \r\n\r\n\r\n\r\ndef f(x):\n    if  x:\n\treturn  [x,   1]\n"
    assert normalise_text(text) == "Title here\n\ndef f(x):\n    if  x:\n\treturn  [x,   1]"
    fenced = "see:\n```\na  =  1\n```\nend  of  it"
    assert normalise_text(fenced) == "see:\n```\na  =  1\n```\nend of it"
    assert normalise_text("e\u0301\x1b[0m\x00") == "\u00e9[0m"


def test_split_text_respects_limit_and_keeps_all_words():
    text = " ".join(f"w{i}" for i in range(500))
    pieces = split_text(text, 37)
    assert all(len(p) <= 37 for p in pieces)
    assert " ".join(pieces).split() == text.split()
    assert split_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_stage_never_raises_on_arbitrary_bytes():
    import random

    rng = random.Random(0)
    stage = NormaliseStage(IngestConfig(max_doc_chars=50))
    for _ in range(2000):
        value = bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
        out = stage.process(Message(value))
        assert len(out) <= 1
    assert base64.b64decode(dead(b"\x00").original_b64) == b"\x00"


def test_fast_ascii_path_equals_the_line_by_line_path():
    import random
    import re

    from ingest.normalise import _collapse_lines, collapse_whitespace

    rng = random.Random(1)
    pieces = ["a", "b", " ", "  ", "\t", "\n", " \t", "\n\n\n", "x\n  y"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 40)))
        slow = re.sub(r"\n{3,}", "\n\n", _collapse_lines(text)).strip("\n")
        assert collapse_whitespace(text) == slow, repr(text)
    assert normalise_text("a\x01b\x7f c\r\nd") == "ab c\nd"
