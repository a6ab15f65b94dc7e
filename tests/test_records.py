import pytest

from ingest.records import Doc
from worx.records import RecordError, UnknownSchemaVersion


def test_round_trip():
    doc = Doc(doc_id="a", text="hello", label="x", meta={"k": "v"})
    assert Doc.from_json(doc.to_json()) == doc


@pytest.mark.parametrize(
    "raw, exc, reason",
    [
        (b"{", RecordError, "not_json"),
        (b"[1]", RecordError, "invalid_record"),
        (
            b'{"doc_id":"a","text":"x","schema_version":99}',
            UnknownSchemaVersion,
            "unknown_schema_version",
        ),
        (b'{"doc_id":"a","text":"x"}', UnknownSchemaVersion, "unknown_schema_version"),
        (b'{"doc_id":"a","schema_version":1}', RecordError, "missing_field"),
        (b'{"doc_id":"a","text":3,"schema_version":1}', RecordError, "wrong_type"),
        (b'{"doc_id":"a","text":"x","zz":1,"schema_version":1}', RecordError, "unknown_fields"),
    ],
)
def test_bad_records_are_refused_with_a_reason(raw, exc, reason):
    with pytest.raises(exc) as info:
        Doc.from_json(raw)
    assert info.value.reason == reason


def test_dead_letter_keeps_original_bytes():
    from ingest.dead_letters import dead_letter
    from worx.stage import Message

    letter = dead_letter(
        Message(value=b"\xff\x00", topic="t", partition=1, offset=7), "x", "y", "s"
    )
    assert letter.original() == b"\xff\x00"
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("t", 1, 7)
