"""The ingest stage object: raw input in, normalised ``Doc`` or ``DeadLetter`` out.

Knows nothing of Kafka or files: a runtime (``topology.runtimes.stage_runner.StageRunner``,
the Faust agent, the file ingestor) hands it a :class:`worx.stage.Message` with the raw
bytes, or an already parsed object (a CSV row), and produces what it returns.

Dead-letter reasons (stable codes, ``DeadLetter.reason``):

================== =============================================================
``empty_message``  no value at all (a Kafka tombstone) or zero bytes
``too_large``      raw input over ``max_message_bytes``: refused before decoding
``invalid_utf8``   the bytes are not UTF-8
``not_json``       JSON format, but the value does not parse as JSON
``not_object``     valid JSON, but not an object (array, string, number...)
``unknown_schema_version`` the object carries a ``schema_version`` this build does not read
``unknown_fields`` strict mode: the object has fields the mapping does not name
``missing_text``   the text field is absent (or null)
``text_not_string`` the text field is a number, list, object or boolean
``invalid_unicode`` the text holds lone surrogates (``"\\ud800"`` escapes)
``empty_text``     nothing but whitespace/control characters after normalisation
``oversize``       longer than ``max_doc_chars`` after normalisation (``oversize="dlq"``)
``bad_id``         the id field is not a string/integer, is longer than 256 characters
                   or holds control characters
``bad_label``      the domain field is not a string, or not a safe name
``bad_csv_row``    a CSV row whose number of cells differs from the header
================== =============================================================

Duplicates (an id seen among the last ``dedup_window`` ids) are dropped and counted,
not dead-lettered: a replay after a crash is expected, not an error.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, OrderedDict
from typing import Any, ClassVar

from ingest.config import IngestConfig
from ingest.dead_letters import dead_letter
from ingest.normalise import InvalidUnicode, normalise_text, split_text
from ingest.records import Doc
from worx.ids import UnsafeIdError, content_hash, validate_id
from worx.records import Record
from worx.stage import Emit, Message

try:  # optional: a faster JSON codec for the ingest hot path
    import orjson
except ImportError:  # pragma: no cover - the standard library does the same, slower
    orjson = None

log = logging.getLogger(__name__)

MAX_ID_CHARS = 256
STAGE_NAME = "ingest"


class Rejected(Exception):
    """Internal: an input that becomes a dead letter with ``reason``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class NormaliseStage:
    """Validate, normalise, deduplicate and size-limit raw input into ``Doc`` records.

    Parameters
    ----------
    config:
        The ``[ingest]`` section: field mapping, limits, strict mode, dedup window.
    source_format:
        ``"json"``: each value is a JSON object mapped through the field names;
        ``"text"``: each value is the text itself (the message key, if any, is the id).
    source:
        Overrides ``Doc.source``; default ``"kafka:<topic>"`` from the message.

    Examples
    --------
    >>> stage = NormaliseStage(IngestConfig())
    >>> [out] = stage.process(Message(b'{"id": "a1", "text": "Hello   world"}', topic="t"))
    >>> out.topic, out.key, out.record.text
    ('docs', 'a1', 'Hello world')
    >>> [bad] = stage.process(Message(b'[1, 2]', topic="t", offset=7))
    >>> bad.topic, bad.record.reason, bad.record.source_offset
    ('dlq', 'not_object', 7)
    >>> stage.process(Message(b'{"id": "a1", "text": "again"}', topic="t"))
    []
    >>> stage.counters["duplicates"]
    1
    """

    input_record: ClassVar[type[Record] | None] = None  # the stage parses raw bytes itself

    def __init__(
        self, config: IngestConfig, source_format: str | None = None, source: str | None = None
    ) -> None:
        self.config = config
        self.source_format = source_format or config.source_format
        if self.source_format not in ("json", "text"):
            raise ValueError(f"source_format must be 'json' or 'text', got {self.source_format!r}")
        self.source = source
        self._allowed = {
            f.split(".", 1)[0]
            for f in (config.text_field, config.id_field, config.domain_field, *config.meta_fields)
            if f
        } | {"schema_version"}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.counters: Counter[str] = Counter()  # docs, parts, duplicates, dlq, dlq:<reason>

    # -- the Stage protocol ------------------------------------------------------------

    def process(self, message: Message, record: Record | None = None) -> list[Emit]:
        """Turn one raw message into ``Doc`` emits (several if split) or one dead letter."""
        if self.source_format == "text":
            return self.process_text(message)
        try:
            obj = _parse_json(self._check_bytes(message.value))
            return self._from_object(message, obj)
        except Rejected as exc:
            return [self.dead_letter(message, exc.reason, exc.detail)]

    def process_text(self, message: Message) -> list[Emit]:
        """Like :meth:`process` for a value that is the text itself (plain-text input)."""
        try:
            value = self._check_bytes(message.value)
            return self._accept(message, _decode(value), given_id=_key_id(message.key))
        except Rejected as exc:
            return [self.dead_letter(message, exc.reason, exc.detail)]

    def process_object(self, message: Message, obj: Any) -> list[Emit]:
        """Like :meth:`process` for an input already parsed (a CSV row as a dict)."""
        try:
            return self._from_object(message, obj)
        except Rejected as exc:
            return [self.dead_letter(message, exc.reason, exc.detail)]

    def snapshot(self) -> dict[str, Any]:
        return {"seen": list(self._seen), "counters": dict(self.counters)}

    def restore(self, state: dict[str, Any]) -> None:
        window = self.config.dedup_window
        seen = state.get("seen", [])[-window:] if window else []
        self._seen = OrderedDict.fromkeys(seen)
        self.counters = Counter(state.get("counters", {}))

    # -- helpers -----------------------------------------------------------------------

    def dead_letter(self, message: Message, reason: str, detail: str) -> Emit:
        """A ``DeadLetter`` emit for ``message`` (original bytes cut at ``dlq_original_bytes``)."""
        self.counters["dlq"] += 1
        self.counters[f"dlq:{reason}"] += 1
        keep = self.config.dlq_original_bytes
        record = dead_letter(message, reason, detail, STAGE_NAME, keep_bytes=keep)
        return Emit("dlq", None, record)

    def _check_bytes(self, value: bytes | None) -> bytes:
        if not value:
            raise Rejected("empty_message", "the message has no value (tombstone or 0 bytes)")
        if len(value) > self.config.max_message_bytes:
            raise Rejected(
                "too_large",
                f"{len(value)} bytes is over ingest.max_message_bytes="
                f"{self.config.max_message_bytes}; raise it or split the input upstream",
            )
        return value

    def _from_object(self, message: Message, obj: Any) -> list[Emit]:
        config = self.config
        if not isinstance(obj, dict):
            raise Rejected("not_object", f"expected a JSON object, got {_json_type(obj)}")
        if "schema_version" in obj and obj["schema_version"] != Doc.SCHEMA_VERSION:
            raise Rejected(
                "unknown_schema_version",
                f"schema_version {obj['schema_version']!r} is not supported (this build reads "
                f"{Doc.SCHEMA_VERSION}); upgrade worx or re-emit the record",
            )
        if config.strict:
            unknown = sorted(set(obj) - self._allowed)
            if unknown:
                raise Rejected(
                    "unknown_fields",
                    f"unknown fields {unknown} in strict mode; map them with "
                    "ingest.meta_fields or turn ingest.strict off",
                )
        text = _lookup(obj, config.text_field)
        if text is None:
            raise Rejected(
                "missing_text",
                f"no text field {config.text_field!r}; fields present: {sorted(obj)[:20]}; "
                "set --text-field / ingest.text_field",
            )
        if not isinstance(text, str):
            raise Rejected(
                "text_not_string",
                f"field {config.text_field!r} is {_json_type(text)}, not a string",
            )
        given_id = _given_id(_lookup(obj, config.id_field)) if config.id_field else None
        label = _label(_lookup(obj, config.domain_field)) if config.domain_field else None
        meta = {}
        for name in config.meta_fields:
            value = _lookup(obj, name)
            if value is not None:
                meta[name] = value if isinstance(value, str) else json.dumps(value)
        return self._accept(message, text, given_id, label, meta)

    def _accept(
        self,
        message: Message,
        text: str,
        given_id: str | None,
        label: str | None = None,
        meta: dict[str, str] | None = None,
    ) -> list[Emit]:
        try:
            text = normalise_text(text)
        except InvalidUnicode as exc:
            raise Rejected("invalid_unicode", str(exc)) from exc
        if not text or text.isspace():
            raise Rejected("empty_text", "the text is empty or whitespace only after normalisation")
        limit = self.config.max_doc_chars
        if len(text) > limit:
            if self.config.oversize != "split":
                raise Rejected(
                    "oversize",
                    f"{len(text)} characters is over ingest.max_doc_chars={limit}; raise it "
                    'or set ingest.oversize="split"',
                )
            pieces = split_text(text, limit)
        else:
            pieces = [text]
        doc_id = given_id or content_hash(text, prefix="h")
        if self._is_duplicate(doc_id):
            self.counters["duplicates"] += 1
            return []
        source = self.source or f"kafka:{message.topic}"
        created = message.timestamp_ms if message.timestamp_ms > 0 else int(time.time() * 1000)
        emits = []
        for part, piece in enumerate(pieces):
            piece_id = doc_id if len(pieces) == 1 else f"{doc_id}#{part}"
            # (positional: doc_id, text, source, label, part, created_ms, meta; the hot path)
            doc = Doc(piece_id, piece, source, label, part, created, meta or {})
            emits.append(Emit("docs", piece_id, doc))
        self.counters["docs"] += len(emits)
        self.counters["parts"] += len(emits) - 1
        return emits

    def _is_duplicate(self, doc_id: str) -> bool:
        window = self.config.dedup_window
        if window == 0:
            return False
        if doc_id in self._seen:
            self._seen.move_to_end(doc_id)
            return True
        self._seen[doc_id] = None
        if len(self._seen) > window:
            self._seen.popitem(last=False)
        return False


def _decode(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected("invalid_utf8", f"not UTF-8: {exc}") from exc


def _parse_json(value: bytes) -> Any:
    if orjson is not None:  # fast path; on any error the standard path below classifies it
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            pass
    text = _decode(value)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise Rejected("not_json", f"not JSON: {exc}") from exc


def _lookup(obj: dict[str, Any], field: str) -> Any:
    """``obj[field]``; a dotted name (``payload.body``) walks nested objects."""
    if field in obj:
        return obj[field]
    if "." not in field:
        return None
    current: Any = obj
    for part in field.split("."):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current


def _given_id(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Rejected("bad_id", f"the id is {_json_type(value)}; use a string or an integer")
    text = value.strip() if isinstance(value, str) else str(value)
    if len(text) > MAX_ID_CHARS:
        raise Rejected("bad_id", f"the id has {len(text)} characters; at most {MAX_ID_CHARS}")
    if not text.isprintable():
        raise Rejected("bad_id", f"the id {text[:40]!r} holds control or non-printable characters")
    return text or None


def _key_id(key: bytes | None) -> str | None:
    if not key:
        return None
    try:
        return _given_id(key.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Rejected("bad_id", "the message key (used as id) is not UTF-8") from exc


def _label(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Rejected("bad_label", f"the domain label is {_json_type(value)}, not a string")
    try:
        return validate_id(value, kind="domain label")
    except UnsafeIdError as exc:
        raise Rejected("bad_label", str(exc)) from exc


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
