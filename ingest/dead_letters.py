"""The one way to build a :class:`~ingest.records.DeadLetter`: capped in size, reason classed.

Every stage that rejects a message (ingest, route, discover, the trainer, the monitor,
the table followers) builds its dead letter here, so no dead letter can outgrow the
broker's message limit (librdkafka's default is 1 MB): the original bytes are kept up to
``keep_bytes`` (base64), with the original's length and sha256 in ``original_size`` and
the detail, and the detail itself is cut to ``MAX_DETAIL_CHARS``.

Reasons are stable codes; :func:`reason_class` maps any reason to one of the fixed
vocabulary :data:`REASONS` (else ``"other"``), so a metric labelled by reason has a
bounded set of series whatever a producer writes.

Example
-------
>>> from worx.stage import Message
>>> letter = dead_letter(Message(b"x" * 100, topic="t.docs", offset=3), "not_json",
...                      "no JSON", "route", keep_bytes=10)
>>> letter.original(), letter.original_size, letter.source_offset
(b'xxxxxxxxxx', 100, 3)
>>> reason_class("not_json"), reason_class("made up by a producer")
('not_json', 'other')
"""

from __future__ import annotations

import base64
import hashlib
import time

from ingest.records import DeadLetter
from worx.stage import Message

KEEP_BYTES = 64 * 1024  # original bytes carried by a dead letter (ingest.dlq_original_bytes)
MAX_DETAIL_CHARS = 2000

REASONS: frozenset[str] = frozenset(
    {
        # ingest (see ingest.stage)
        "empty_message", "too_large", "invalid_utf8", "not_json", "not_object",
        "unknown_schema_version", "unknown_fields", "missing_text", "text_not_string",
        "invalid_unicode", "empty_text", "oversize", "bad_id", "bad_label", "bad_csv_row",
        # record decoding (worx.records.RecordError.reason)
        "invalid_record", "empty", "too_deep", "not_finite", "wrong_type", "missing_field",
        "unsafe_id", "out_of_range", "wrong_dimension", "wrong_record_type", "foreign_topic",
        "not_normalised", "bad_doc_id", "bad_name", "bad_topic", "bad_sha256",
        "unknown_value", "wrong_embedder", "domain_mismatch",
        # a registration the serving store refuses (experts.store.ExpertRefused)
        "missing", "duplicate_id", "bad_manifest", "newer_schema", "corrupt", "truncated",
        # consumers
        "stage_error", "table_refused", "unknown_domain", "unknown_expert", "wrong_trunk",
        "bad_registration", "unknown_key", "conflicting_duplicate",
        "undecodable_dead_letter",
    }
)  # fmt: skip


def reason_class(reason: str) -> str:
    """``reason`` if it is in :data:`REASONS`, else ``"other"`` (bounded label sets)."""
    return reason if reason in REASONS else "other"


def dead_letter(
    message: Message, reason: str, detail: str, stage: str, keep_bytes: int = KEEP_BYTES
) -> DeadLetter:
    """A dead letter for ``message``: its first ``keep_bytes`` bytes, length and sha256."""
    raw = message.value or b""
    kept = raw[:keep_bytes]
    detail = detail[:MAX_DETAIL_CHARS]
    if len(kept) < len(raw):
        detail = (
            f"{detail} (original cut to its first {len(kept)} of {len(raw)} bytes; "
            f"sha256 {hashlib.sha256(raw).hexdigest()})"
        )
    return DeadLetter(
        reason=reason,
        detail=detail,
        original_b64=base64.b64encode(kept).decode("ascii"),
        source_topic=message.topic,
        source_partition=message.partition,
        source_offset=message.offset,
        stage=stage,
        created_ms=int(time.time() * 1000),
        original_size=len(raw),
    )
