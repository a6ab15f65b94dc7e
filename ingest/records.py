"""Records emitted by ingest: normalised documents and dead letters."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, fields
from typing import Any

from worx.checks import check_doc_id, check_id, check_name, check_range, check_text
from worx.records import Record, fast_json


@dataclass(frozen=True)
class Doc(Record):
    """One normalised document on ``worx.docs`` (keyed by ``doc_id``)."""

    SCHEMA_VERSION = 1

    doc_id: str
    text: str
    source: str = ""  # where it came from: "file:<name>" or "kafka:<topic>"
    label: str | None = None  # given domain label (labelled data, evaluation only)
    part: int = 0  # index of this piece when an oversize text was split
    created_ms: int = 0
    meta: dict[str, str] = field(default_factory=dict)

    def check(self) -> Doc:
        check_doc_id("doc_id", self.doc_id)
        check_text("text", self.text)
        check_name("source", self.source, max_chars=4096, printable=False)
        check_id("label", self.label, optional=True)
        check_range("part", self.part, 0)
        check_range("created_ms", self.created_ms, 0)
        return self

    def to_dict(self) -> dict[str, Any]:
        # the hot path of ingest: a shallow copy (every field is a primitive or a
        # dict[str, str]) instead of dataclasses.asdict's deep recursion
        body = {name: getattr(self, name) for name in _DOC_FIELDS}
        body["meta"] = dict(self.meta)
        body["schema_version"] = self.SCHEMA_VERSION
        return body

    def to_json(self) -> bytes:
        fast = fast_json(self)
        if fast is not None:
            return fast
        # ASCII escapes: the same JSON value, encoded about twice as fast by the C encoder
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()


_DOC_FIELDS = tuple(f.name for f in fields(Doc))


@dataclass(frozen=True)
class DeadLetter(Record):
    """A rejected input on ``worx.dlq``: why, where from, and its original bytes."""

    SCHEMA_VERSION = 1

    reason: str  # a stable code: "not_json", "missing_text", "oversize", ...
    detail: str  # a human-readable explanation of what was wrong
    original_b64: str
    source_topic: str = ""
    source_partition: int = -1
    source_offset: int = -1
    stage: str = ""
    created_ms: int = 0
    original_size: int = -1  # byte length of the original; original_b64 may hold only a prefix

    def check(self) -> DeadLetter:
        check_name("reason", self.reason)
        check_name("source_topic", self.source_topic, max_chars=4096, printable=False)
        check_name("stage", self.stage)
        for name in ("source_partition", "source_offset", "original_size"):
            check_range(name, getattr(self, name), -1)
        check_range("created_ms", self.created_ms, 0)
        return self

    def original(self) -> bytes:
        return base64.b64decode(self.original_b64)
