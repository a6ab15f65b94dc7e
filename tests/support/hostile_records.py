"""The shared catalogue of hostile records, per topic, and the broker plumbing to send them.

:func:`catalogue` builds, from one *good* record of a topic, at least 12 classes of bad
input an attacker or a buggy producer could write there (deep nesting, NaN, Infinity,
nulls and strings in vectors, wrong dimension, huge and negative numbers, an unknown
schema version, wrong types, unsafe ids with a trailing newline or ``..``, oversize
values, valid JSON of another record type, a tombstone for an unknown key, a duplicate
with changed content, bytes that are not UTF-8 or not JSON). Each :class:`Hostile`
says what the stage must do with it: ``"dlq"`` (dead-lettered with a reason and its
source coordinates) or ``"accepted"`` (valid data the stage cannot tell from a good
record, e.g. a changed duplicate of a document on a stateless stage).
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from ingest.records import DeadLetter, Doc
from router.records import DriftEvent
from tests.support.kafka import read_messages
from worx.records import Record

OVERSIZE = 750_000  # bytes: under the broker's 1 MB, over any field's sane size


@dataclass(frozen=True)
class Hostile:
    kind: str  # the class of hostile input ("deep_nesting", "nan", ...)
    key: str | None
    value: bytes | None  # None: a tombstone
    expect: str = "dlq"  # "dlq" | "accepted"


@dataclass(frozen=True)
class Shape:
    """Where the hostile values go in a record of one topic."""

    id_field: str  # the record's key field
    int_field: str  # an integer field with a lower bound of 0
    number_field: str | None = None  # a float field (NaN/Infinity go here)
    vector_field: str | None = None  # a unit vector of ``dim`` floats
    dim: int = 0
    path_safe_id: bool = True  # False: ids are free text, never a path (doc ids): ".." is valid


def _dumps(body: dict) -> bytes:
    return json.dumps(body, allow_nan=True).encode()  # NaN/Infinity as JSON extensions


def _with(good: dict, **changes: Any) -> bytes:
    return _dumps({**good, **changes})


def catalogue(
    good: Record,
    shape: Shape,
    changed: Record | None = None,
    changed_expect: str = "dlq",
    other: Record | None = None,
) -> list[Hostile]:
    """Hostile variants of ``good``; ``changed``: a different record under the same key
    (the changed duplicate; ``changed_expect`` what the stage must do with it); ``other``:
    a record of another type (default: a drift event, or a document for drift events)."""
    body = good.to_dict()
    key = str(body[shape.id_field])
    out = [
        Hostile("deep_nesting", key, b"[" * 100_000),
        Hostile("not_utf8", key, b"\xff\xfe\xfd"),
        Hostile("not_json", key, b"{not json"),
        Hostile("unknown_schema_version", key, _with(body, schema_version=99)),
        Hostile("wrong_type_id", key, _with(body, **{shape.id_field: {"x": 1}})),
        Hostile("wrong_type_number", key, _with(body, **{shape.int_field: "12"})),
        Hostile("null_id", key, _with(body, **{shape.id_field: None})),
        Hostile("unsafe_id_newline", key, _with(body, **{shape.id_field: f"{key}\n"})),
        Hostile(
            "unsafe_id_dotdot",
            "..",
            _with(body, **{shape.id_field: "../../etc"}),
            "dlq" if shape.path_safe_id else "accepted",
        ),
        Hostile("negative_number", key, _with(body, **{shape.int_field: -5})),
        Hostile("huge_number", key, _with(body, **{shape.int_field: 10**30})),
        Hostile("oversize_value", key, _with(body, **{shape.id_field: "a" * OVERSIZE})),
        Hostile("oversize_malformed", key, b'{"a": "' + b"x" * OVERSIZE),
        Hostile("tombstone_unknown_key", "no-such-key-0", None),
    ]
    if shape.vector_field:
        vector = list(body[shape.vector_field])
        nan, inf = list(vector), list(vector)
        nan[0], inf[0] = math.nan, math.inf
        longer = [x / math.sqrt(2) for x in vector] + [1 / math.sqrt(2)]  # unit, dim + 1
        nulls, strings = [None] * shape.dim, ["x"] * shape.dim
        out += [
            Hostile("nan_in_vector", key, _with(body, **{shape.vector_field: nan})),
            Hostile("infinity_in_vector", key, _with(body, **{shape.vector_field: inf})),
            Hostile("nulls_in_vector", key, _with(body, **{shape.vector_field: nulls})),
            Hostile("strings_in_vector", key, _with(body, **{shape.vector_field: strings})),
            # under a key of its own: the table's dimension check, not its version check
            Hostile(
                "wrong_dimension",
                f"{key}-dim",
                _with(body, **{shape.id_field: f"{key}-dim", shape.vector_field: longer}),
            ),
        ]
    if shape.number_field:
        out += [
            Hostile("nan", key, _with(body, **{shape.number_field: math.nan})),
            Hostile("infinity", key, _with(body, **{shape.number_field: math.inf})),
        ]
    else:
        out += [Hostile("nan", key, _with(body, **{shape.int_field: math.nan}))]
    if other is None:
        other = DriftEvent("ev-0", "novelty_rate", "new_domain", None, {}, 0, 1)
        if isinstance(good, DriftEvent):
            other = Doc(doc_id="d-other", text="a document where a drift event belongs")
    out.append(Hostile("wrong_record_type", key, other.to_json()))
    if changed is not None:
        out.append(Hostile("duplicate_changed", key, changed.to_json(), changed_expect))
    return out


def interleave(good: Sequence[tuple[str | None, bytes | None]], bad: Sequence[Hostile]) -> list:
    """Good ``(key, value)`` pairs with one hostile record after every ``len(good)//len(bad)``."""
    step = max(1, len(good) // max(1, len(bad)))
    out: list = []
    pending = list(bad)
    for i, item in enumerate(good):
        out.append(item)
        if pending and (i + 1) % step == 0:
            out.append(pending.pop(0))
    return out + pending


def send(conf: dict, topic: str, items: Sequence[Any], partition: int = 0) -> list[tuple[Any, int]]:
    """Produce ``items`` (``Hostile`` or ``(key, value)``) in order to one partition; returns
    ``(item, offset)`` for each."""
    producer = Producer({**conf, "message.max.bytes": 2_000_000, "linger.ms": 5})
    offsets: dict[int, int] = {}

    def delivered(index: int) -> Callable[[Any, Any], None]:
        def callback(err: Any, msg: Any) -> None:
            assert err is None, err
            offsets[index] = msg.offset()

        return callback

    for index, item in enumerate(items):
        key, value = (item.key, item.value) if isinstance(item, Hostile) else item
        producer.produce(topic, value, key=key, partition=partition, on_delivery=delivered(index))
        producer.poll(0)
    assert producer.flush(30) == 0
    return [(item, offsets[i]) for i, item in enumerate(items)]


def dead_letters(
    conf: dict, dlq_topic: str, expected: Sequence[tuple[str, int]], timeout_s: float = 90.0
) -> dict[tuple[str, int], list[DeadLetter]]:
    """Read ``dlq_topic`` until every ``(source_topic, source_offset)`` in ``expected`` has a
    dead letter; returns every dead letter by its source. Each must be capped in size."""
    wanted = set(expected)
    found: dict[tuple[str, int], list[DeadLetter]] = {}
    seen = 0

    def done(messages: list) -> bool:
        nonlocal seen
        for msg in messages[seen:]:
            try:  # (a test may have written hostile records to the topic itself)
                letter = DeadLetter.from_json(msg.value(), strict=False)
            except ValueError:
                continue
            assert len(msg.value()) < 100_000, f"an uncapped dead letter: {len(msg.value())} bytes"
            found.setdefault((letter.source_topic, letter.source_offset), []).append(letter)
        seen = len(messages)
        return wanted <= set(found)

    read_messages(conf, dlq_topic, done, timeout_s, raise_on_timeout=False)
    missing = sorted(wanted - set(found))
    assert not missing, f"no dead letter within {timeout_s} s for {missing}"
    return found


def check_dead_letters(
    found: dict[tuple[str, int], list[DeadLetter]], sent: Sequence[tuple[Any, int]], topic: str
) -> None:
    """Every hostile record of ``sent`` expected on the DLQ is there with a reason, the
    source coordinates and (a prefix of) its original bytes; no good record is."""
    for item, offset in sent:
        letters = found.get((topic, offset), [])
        if isinstance(item, Hostile) and item.expect == "dlq":
            assert letters, f"{item.kind} at {topic}@{offset} is not on the dead-letter topic"
            for letter in letters:
                assert letter.reason and letter.stage, letter
                assert letter.source_partition == 0
                original = item.value or b""
                assert letter.original_size == len(original), item.kind
                assert original.startswith(base64.b64decode(letter.original_b64)), item.kind
        else:
            kind = item.kind if isinstance(item, Hostile) else "good"
            assert not letters, f"{kind} record {topic}@{offset} was dead-lettered: {letters}"


def until(predicate: Callable[[], bool], timeout_s: float, what: str = "condition") -> None:
    """Poll ``predicate`` until it holds; AssertionError after ``timeout_s`` (a liveness bound)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout_s} s"
        time.sleep(0.05)


def reasons_by_kind(
    found: dict[tuple[str, int], list[DeadLetter]], sent: Sequence[tuple[Any, int]], topic: str
) -> dict[str, str]:
    """The reason of each hostile record's (first) dead letter, by the record's kind."""
    return {
        item.kind: found[(topic, offset)][0].reason
        for item, offset in sent
        if isinstance(item, Hostile) and (topic, offset) in found
    }
