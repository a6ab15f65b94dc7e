"""Versioned, frozen record dataclasses and their JSON serde.

Every stage owns the records it emits (``<stage>/records.py``); they subclass
:class:`Record`, hold only primitives, lists and dicts, and declare the
``SCHEMA_VERSION`` they write. Decoding is strict about the version: a record with
an unknown ``schema_version`` is refused, never guessed at, so the caller can
dead-letter it.

Decoding (:meth:`Record.from_json`, :meth:`Record.from_dict`) checks in depth and raises
only :class:`RecordError`, whose ``reason`` is a short stable code for a dead letter:

* the JSON itself: ``empty`` (no bytes: a tombstone is the caller's to handle),
  ``not_json``, ``too_deep`` (nesting past :data:`MAX_DEPTH` or the parser's limit),
  ``too_large``, ``not_finite`` (NaN/Infinity, as literals or overflowing numbers);
* the shape, against the type hints, element by element: ``wrong_type``,
  ``missing_field``, ``unknown_fields`` (with ``strict``), ``out_of_range`` (an int
  outside int64), ``too_large`` (more than :data:`MAX_ITEMS` items, a string over
  :data:`MAX_STRING_CHARS`), ``wrong_record_type`` (the body is another record type's);
* the meaning, by each record's :meth:`Record.check` (ids, ranges, vectors:
  ``unsafe_id``, ``out_of_range``, ``wrong_dimension``, ``not_normalised``, ...).

Any other exception raised while decoding is turned into ``RecordError`` too
(``invalid_record``), so no input can escape a consumer's ``except RecordError``.

This module holds :class:`Record` and its encoders; the decoders are modules of their own,
a plain fast one (:mod:`worx.record_decode_plain`) and the general one
(:mod:`worx.record_decode_full`), with the field checks they share in
:mod:`worx.record_fields` and :class:`RecordError` in :mod:`worx.record_errors`.

Example
-------
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Point(Record):
...     x: float
>>> Point.from_json(b'{"x": 1.5, "schema_version": 1}')
Point(x=1.5)
>>> for raw in (b'{"x": NaN, "schema_version": 1}', b"[" * 5000, b""):
...     try:
...         Point.from_json(raw)
...     except RecordError as exc:
...         print(exc.reason)
not_finite
too_deep
empty
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, ClassVar, Self

from worx import record_decode_full
from worx.record_decode_full import RECORD_TYPES
from worx.record_decode_plain import plain_decode
from worx.record_errors import RecordError, UnknownSchemaVersion
from worx.record_fields import (
    MAX_DEPTH,
    MAX_INT,
    MAX_ITEMS,
    MAX_JSON_BYTES,
    MAX_STRING_CHARS,
    check_value,
    fields,
    hints,
)

try:  # optional: the fast encoder (json writes the same for anything else)
    import orjson
except ImportError:  # pragma: no cover - the standard library encodes the same, slower
    orjson = None

__all__ = [
    "MAX_DEPTH",
    "MAX_INT",
    "MAX_ITEMS",
    "MAX_JSON_BYTES",
    "MAX_STRING_CHARS",
    "Record",
    "RecordError",
    "UnknownSchemaVersion",
    "check_value",
    "fast_json",
]

_PROJECT_PACKAGES = {"worx", "ingest", "router", "experts", "trainer", "monitor"}


@dataclasses.dataclass(frozen=True)
class Record:
    """Base of every record on a topic. Subclasses are frozen dataclasses."""

    SCHEMA_VERSION: ClassVar[int] = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__.split(".")[0] in _PROJECT_PACKAGES:
            RECORD_TYPES.append(cls)

    def check(self) -> Self:
        """Validate the record's meaning beyond its types (ids, ranges, vectors).

        Subclasses extend it; raises :class:`RecordError`. Called by every decode.
        """
        return self

    def validated(self) -> Self:
        """This record, checked as a decode checks it (types, then :meth:`check`): for a
        record built in code that a table is about to hold. Raises :class:`RecordError`."""
        name = type(self).__name__
        try:
            types = hints(type(self))
            for field_name in fields(type(self)):
                check_value(getattr(self, field_name), types[field_name], f"{name}.{field_name}")
            self.check()
            return self
        except RecordError:
            raise
        except Exception as exc:
            raise RecordError(f"{name}: invalid ({type(exc).__name__}: {str(exc)[:200]})") from exc

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the record; a non-finite float is None (JSON has no NaN)."""
        body = {name: getattr(self, name) for name in fields(type(self))}
        if not all(type(value) in _SCALARS for value in body.values()):
            body = dataclasses.asdict(self)  # copies of nested lists, dicts and records
        if _has_non_finite(body):
            body = _finite_or_none(body)
        body["schema_version"] = self.SCHEMA_VERSION
        return body

    def to_json(self) -> bytes:
        body = self.to_dict()
        try:
            text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except ValueError:  # JSON has no NaN/Infinity: written as null, refused where typed
            body = _finite_or_none(body)
            text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        try:
            return text.encode()
        except UnicodeEncodeError:  # a lone surrogate (JSON lets one in): ASCII escapes
            return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()

    @classmethod
    def from_dict(cls, body: Any, *, strict: bool = True) -> Self:
        """Build the record from a decoded JSON object and check it in depth.

        Raises:
            UnknownSchemaVersion: the ``schema_version`` is missing or not this class's.
            RecordError: anything else wrong (see the module docstring for the reasons).
        """
        return record_decode_full.from_dict(cls, body, strict)

    @classmethod
    def from_json(cls, raw: bytes | str | None, *, strict: bool = True) -> Self:
        """Decode one record from JSON bytes; raises only :class:`RecordError`."""
        plain = plain_decode(cls, raw)
        if plain is not None:
            return plain
        return cls.from_dict(record_decode_full.parse_json(cls, raw), strict=strict)


def fast_json(record: Record) -> bytes | None:
    """``record``'s JSON by orjson: its fields in order, then ``schema_version`` (a
    non-finite float as null, as :meth:`Record.to_json` writes it); None where orjson
    cannot write it (a lone surrogate, an int past 64 bits) or is absent: then the json
    path. For records whose :meth:`Record.to_dict` is their plain fields (the hot ones:
    ``Doc``, ``RoutedDoc``)."""
    if orjson is None:
        return None
    try:
        return orjson.dumps(record)[:-1] + b',"schema_version":%d}' % record.SCHEMA_VERSION
    except TypeError:
        return None


_SCALARS = frozenset({str, int, float, bool, type(None)})  # immutable: asdict would not copy


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_none(v) for v in value]
    return value
