"""Records emitted by ingest: normalised documents and dead letters."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field

from worx.records import Record
from worx.stage import Message


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

    @classmethod
    def of(cls, message: Message, reason: str, detail: str, stage: str) -> DeadLetter:
        return cls(
            reason=reason,
            detail=detail,
            original_b64=base64.b64encode(message.value or b"").decode("ascii"),
            source_topic=message.topic,
            source_partition=message.partition,
            source_offset=message.offset,
            stage=stage,
            created_ms=int(time.time() * 1000),
        )

    def original(self) -> bytes:
        return base64.b64decode(self.original_b64)
