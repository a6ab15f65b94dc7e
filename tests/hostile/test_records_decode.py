"""Every record type a stage decodes from a topic, against 12 classes of hostile input.

Each case is a byte string offered to ``Record.from_json(raw, strict=False)`` (the way
every consumer decodes): it must raise :class:`RecordError` with the expected ``reason``
and nothing else; the good sample of every type must still round-trip.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest

from experts.records import ExpertRegistration
from ingest.records import DeadLetter, Doc
from monitor.records import EvalRow
from router.records import DocRef, DomainRecord, DriftEvent, RoutedDoc, TrainJob
from trainer.records import TrainStatus
from worx.checks import MAX_DIM
from worx.records import MAX_ITEMS, MAX_STRING_CHARS, Record, RecordError

REF = DocRef("worx.docs", 0, 0, 10)
GOOD: dict[type[Record], Record] = {
    Doc: Doc("doc-1", "hello world", "file:a.txt", "legal", 0, 1, {"k": "v"}),
    DeadLetter: DeadLetter("not_json", "bad", "eA==", "t", 0, 1, "ingest", 1, 1),
    RoutedDoc: RoutedDoc("doc-1", "dom-a", 0.5, "worx.docs", 0, 3, "t", "legal", 1, False, 1),
    DomainRecord: DomainRecord(
        "dom-a",
        [0.6, 0.8],
        0.5,
        10,
        0.8,
        expert_ids=["e1"],
        embedder="tfidf-abc",
        label_hint="Court rulings",
        core_threshold=0.6,
        distance_mean=0.2,
        distance_std=0.1,
        created_ms=1,
    ),
    DocRef: REF,
    DriftEvent: DriftEvent("ev-1", "novelty_rate", "new_domain", None, {"rate": 0.4}, 0, 9, 1),
    TrainJob: TrainJob(
        "job-1", "dom-a", "new_domain", [REF.to_dict()], ["d1", "d2"], ["d3"], [0.6, 0.8]
    ),
    TrainStatus: TrainStatus(
        "job-1", "dom-a", "step", 5, 10, 4.2, 100.0, None, "", {"ppl": 3.0}, 1
    ),
    ExpertRegistration: ExpertRegistration(
        "exp-1", "dom-a", "0" * 64, "f" * 64, [0.6, 0.8], None, "job-1", 10, {"loss": 1.0}, 1
    ),
    EvalRow: EvalRow(
        "ours",
        1,
        ["e1"],
        {"dom-a": 1.0},
        {"dom-a": 2.7},
        routing_changed={"dom-a": 0.0},
        heldout_size={"dom-a": 5},
        arrived_expert="e1",
        arrived_domain="dom-a",
        summary={"forgetting": [None, 0.0]},
    ),
}
TYPES = list(GOOD)

# fields that name something: (field, refused values); an id is a path name, a doc id
# is printable text, a topic a Kafka name, a code a short printable name
UNSAFE_IDS = ["a\n", "../x", "a/b", "", ".hidden", "a..b", "x" * 129, "a b"]
UNSAFE_DOC_IDS = ["", "a\n", "x\ty", "x" * 321]
UNSAFE_TOPICS = ["", "a\n", "../x", "a/b", "x" * 250]
NAMED: dict[type[Record], list[tuple[str, list[str]]]] = {
    Doc: [("doc_id", UNSAFE_DOC_IDS), ("label", UNSAFE_IDS)],
    DeadLetter: [("reason", ["a\n", "x" * 257]), ("stage", ["a\n", "x" * 257])],
    RoutedDoc: [
        ("doc_id", UNSAFE_DOC_IDS),
        ("domain_id", UNSAFE_IDS),
        ("docs_topic", UNSAFE_TOPICS),
    ],
    DomainRecord: [("domain_id", UNSAFE_IDS), ("parent_domain_id", UNSAFE_IDS)],
    DocRef: [("topic", UNSAFE_TOPICS)],
    DriftEvent: [("event_id", UNSAFE_IDS), ("domain_id", UNSAFE_IDS)],
    TrainJob: [("job_id", UNSAFE_IDS), ("domain_id", UNSAFE_IDS), ("parent_expert_id", UNSAFE_IDS)],
    TrainStatus: [("job_id", UNSAFE_IDS), ("domain_id", UNSAFE_IDS), ("expert_id", UNSAFE_IDS)],
    ExpertRegistration: [
        ("expert_id", UNSAFE_IDS),
        ("domain_id", UNSAFE_IDS),
        ("job_id", UNSAFE_IDS),
        ("trunk_fingerprint", UNSAFE_IDS),
    ],
    EvalRow: [("arrived_expert", UNSAFE_IDS), ("arrived_domain", UNSAFE_IDS)],
}
# list-of-id fields: one unsafe item refuses the record
ID_LISTS = {
    DomainRecord: "expert_ids",
    TrainJob: "train_doc_ids",
    EvalRow: "expert_ids",
}
# (field, value) outside the field's range, per type
OUT_OF_RANGE: dict[type[Record], list[tuple[str, Any]]] = {
    Doc: [("part", -1), ("created_ms", -1)],
    DeadLetter: [("source_offset", -2), ("created_ms", -5)],
    RoutedDoc: [("docs_offset", -1), ("docs_partition", -1), ("similarity", 7.5)],
    DomainRecord: [("size", -1), ("threshold", 1e300), ("cohesion", -3.0), ("version", -1)],
    DocRef: [("start", -1), ("end", -1), ("partition", 2**40)],
    DriftEvent: [("window_start_offset", -1), ("window_end_offset", -1)],
    TrainJob: [("created_ms", -1), ("refs", [{**REF.to_dict(), "end": 10**12}])],
    TrainStatus: [("step", -1), ("total_steps", -1), ("tokens_per_s", -1.0)],
    ExpertRegistration: [("num_params", -1), ("created_ms", -1)],
    EvalRow: [("step", -1), ("perplexity", {"dom-a": -1.0}), ("routing_changed", {"dom-a": 2.0})],
}


def _body(cls: type[Record]) -> dict[str, Any]:
    return GOOD[cls].to_dict()


def _raw(body: Any) -> bytes:
    return json.dumps(body).encode()


def _hints(cls: type[Record]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _kind(hint: Any) -> str:
    """A hint's JSON kind: int, float, str, bool, list, dict (Optional unwrapped)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = args[0]
    origin = typing.get_origin(hint) or hint
    return {int: "int", float: "float", str: "str", bool: "bool", list: "list", dict: "dict"}[
        origin
    ]


def _vector_fields(cls: type[Record]) -> list[str]:
    return [n for n, h in _hints(cls).items() if h == list[float]]


def _number_fields(cls: type[Record]) -> list[str]:
    return [n for n, h in _hints(cls).items() if _kind(h) in ("int", "float")]


def _replace_raw(cls: type[Record], field: str, literal: str) -> bytes:
    """The good body's JSON with ``field``'s value replaced by a raw JSON ``literal``."""
    body = _body(cls)
    body[field] = "__HOLE__"
    return _raw(body).replace(b'"__HOLE__"', literal.encode())


def _cases() -> Iterator[tuple[type[Record], str, bytes, set[str]]]:
    """(record type, hostile class, raw bytes, accepted reasons)."""
    for cls in TYPES:
        body = _body(cls)
        first = next(iter(body))
        # 1. deep nesting: the parser's limit, and a nested value within it
        yield cls, "deep_nesting", b"[" * 100_000, {"too_deep"}
        yield cls, "deep_nesting", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, {"too_deep"}
        nested = json.dumps({**body, first: "__HOLE__"}).encode()
        yield (
            cls,
            "deep_nesting",
            nested.replace(b'"__HOLE__"', b"[" * 500 + b"]" * 500),
            {"wrong_type", "too_deep", "wrong_dimension"},
        )
        for free in [n for n, h in _hints(cls).items() if h in (dict, dict[str, Any])]:
            deep: Any = 1
            for _ in range(40):
                deep = {"k": deep}
            yield cls, "deep_nesting", _raw({**body, free: deep}), {"too_deep"}
        # 2. NaN / Infinity, as literals and as an overflowing number
        for field in _number_fields(cls):
            for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
                reasons = {"not_finite"} if literal != "1e999" else {"not_finite", "wrong_type"}
                yield cls, "nan_infinity", _replace_raw(cls, field, literal), reasons
        # 3. nulls and strings in vectors (in a list field, or for a number, as the number)
        for field in _vector_fields(cls):
            dim = len(body[field])
            for items in ([None] * dim, ["x"] * dim, [0.6, None], [True, False], [[0.6], [0.8]]):
                yield cls, "null_string_vector", _raw({**body, field: items}), {"wrong_type"}
        for name, hint in _hints(cls).items():
            if hint in (list[str], dict[str, float], dict[str, int], dict[str, str]):
                bad: Any = [None] if hint == list[str] else {"dom-a": None}
                yield cls, "null_string_vector", _raw({**body, name: bad}), {"wrong_type"}
        for field in _number_fields(cls)[:2]:
            yield cls, "null_string_vector", _raw({**body, field: "1"}), {"wrong_type"}
        # 4. wrong dimension: empty, too long, or a scalar / a list swapped
        for field in _vector_fields(cls):
            for items in ([], [1.0 / math.sqrt(MAX_DIM + 1)] * (MAX_DIM + 1)):
                yield cls, "wrong_dimension", _raw({**body, field: items}), {"wrong_dimension"}
        for name, hint in _hints(cls).items():
            kind = _kind(hint)
            if kind in ("int", "float", "str"):
                yield cls, "wrong_dimension", _raw({**body, name: [body[name]]}), {"wrong_type"}
                break
        # 5. huge and negative numbers
        for field, value in OUT_OF_RANGE[cls]:
            yield cls, "huge_negative", _raw({**body, field: value}), {"out_of_range"}
        for field in [n for n, h in _hints(cls).items() if _kind(h) == "int"][:2]:
            yield cls, "huge_negative", _raw({**body, field: 2**64}), {"out_of_range"}
            yield cls, "huge_negative", _replace_raw(cls, field, "9" * 5000), {"out_of_range"}
            yield cls, "huge_negative", _raw({**body, field: -(2**70)}), {"out_of_range"}
        # 6. unknown schema version (newer, older, wrong type, missing)
        for version in (2, 99, 0, -1, "1", True, None, 1.0, [1]):
            reasons = {"unknown_schema_version"}
            yield cls, "schema_version", _raw({**body, "schema_version": version}), reasons
        yield (
            cls,
            "schema_version",
            _raw({k: v for k, v in body.items() if k != "schema_version"}),
            {"unknown_schema_version"},
        )
        # 7. wrong types, field by field, and a body that is not an object
        swaps = {"int": ["1", 1.5, True, None], "float": ["0.5", True, [0.5]], "str": [1, True, {}]}
        swaps |= {"bool": ["yes", 1, None], "list": [{}, "a", 1], "dict": [[], "a", 1]}
        for name, hint in _hints(cls).items():
            optional = type(None) in typing.get_args(hint)
            for value in swaps[_kind(hint)]:
                if value is None and optional:
                    continue
                if (
                    _kind(hint) == "float"
                    and isinstance(value, int)
                    and not isinstance(value, bool)
                ):
                    continue
                yield cls, "wrong_types", _raw({**body, name: value}), {"wrong_type"}
        for value in ([], "x", 1, None, [body]):
            yield cls, "wrong_types", _raw(value), {"invalid_record"}
        # 8. unsafe ids: trailing newline, "..", slashes, empty, too long
        for field, values in NAMED[cls]:
            for value in values:
                reasons = {"unsafe_id", "bad_doc_id", "bad_name", "bad_topic"}
                yield cls, "unsafe_ids", _raw({**body, field: value}), reasons
        if cls in ID_LISTS:
            field = ID_LISTS[cls]
            for value in ("a\n", ""):
                reasons = {"unsafe_id", "bad_doc_id"}
                yield cls, "unsafe_ids", _raw({**body, field: [*body[field], value]}), reasons
        if cls is EvalRow:
            yield cls, "unsafe_ids", _raw({**body, "loss": {"../x": 1.0}}), {"unsafe_id"}
        # 9. oversize values: a name past its cap, a list past MAX_ITEMS
        for field, _ in NAMED[cls][:1]:
            yield (
                cls,
                "oversize",
                _raw({**body, field: "a" * 100_000}),
                {
                    "unsafe_id",
                    "bad_doc_id",
                    "bad_name",
                    "bad_topic",
                },
            )
        lists = [n for n, h in _hints(cls).items() if _kind(h) == "list" and h != list[float]]
        for field in lists[:1]:
            yield cls, "oversize", _raw({**body, field: ["a"] * (MAX_ITEMS + 1)}), {"too_large"}
        # 10. valid JSON of another record type
        for other in TYPES:
            if other is not cls:
                reasons = {"missing_field", "wrong_record_type"}
                yield cls, "wrong_record_type", GOOD[other].to_json(), reasons
        # 11. missing fields, one by one
        for name, field in {f.name: f for f in dataclasses.fields(cls)}.items():
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                without = {k: v for k, v in body.items() if k != name}
                yield cls, "missing_fields", _raw(without), {"missing_field"}
        # 12. empty body, tombstone, blanks
        yield cls, "empty_tombstone", b"", {"empty"}
        yield cls, "empty_tombstone", None, {"empty"}  # type: ignore[misc]
        yield cls, "empty_tombstone", b"   ", {"not_json"}
        yield cls, "empty_tombstone", b"{}", {"unknown_schema_version"}
        yield cls, "empty_tombstone", b"null", {"invalid_record"}
        yield cls, "empty_tombstone", b"\xff\xfe\x00", {"not_json"}


CASES = list(_cases())
CLASSES = sorted({c[1] for c in CASES})


def _id(case: tuple) -> str:
    cls, kind, raw, _ = case
    return f"{cls.__name__}-{kind}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_a_hostile_record_is_refused_with_its_reason(case) -> None:
    cls, _, raw, reasons = case
    with pytest.raises(RecordError) as info:
        cls.from_json(raw, strict=False)
    assert info.value.reason in reasons, (info.value.reason, str(info.value)[:300])
    assert len(str(info.value)) < 2000  # a short reason, never the whole input


def test_every_type_meets_every_hostile_class() -> None:
    assert len(CLASSES) == 12
    for cls in TYPES:
        assert {c[1] for c in CASES if c[0] is cls} == set(CLASSES), cls.__name__


@pytest.mark.parametrize("cls", TYPES, ids=[t.__name__ for t in TYPES])
def test_good_records_round_trip(cls: type[Record]) -> None:
    good = GOOD[cls]
    assert cls.from_json(good.to_json(), strict=False) == good
    assert cls.from_json(good.to_json()) == good
    assert cls.from_dict(good.to_dict()) == good.validated()


def test_an_oversize_text_is_refused() -> None:
    body = {**_body(Doc), "text": "a" * (MAX_STRING_CHARS + 1)}
    with pytest.raises(RecordError) as info:
        Doc.from_json(_raw(body))
    assert info.value.reason == "too_large"
