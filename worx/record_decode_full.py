"""The general record decode: JSON by the standard library, then the body checked in depth
against the record class (:func:`~worx.record_fields.check_value` on every field, unknown
and missing fields, another record type's body, :meth:`~worx.records.Record.check`).
Raises only :class:`~worx.record_errors.RecordError`, with its reason."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from worx.record_errors import RecordError, UnknownSchemaVersion
from worx.record_fields import MAX_JSON_BYTES, check_value, fields, hints, required

RECORD_TYPES: list[type] = []  # the project's record types (wrong-type detection)


def parse_json(cls: type, raw: bytes | str | None) -> Any:
    """The JSON value of ``raw``, for a record of ``cls``; raises :class:`RecordError`."""
    name = cls.__name__
    if not raw:
        raise RecordError(f"{name}: empty value (a tombstone?)", reason="empty")
    if len(raw) > MAX_JSON_BYTES:
        raise RecordError(f"{name}: {len(raw)} bytes is over {MAX_JSON_BYTES}", reason="too_large")
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except RecordError:
        raise
    except RecursionError as exc:
        raise RecordError(f"{name}: JSON nested too deeply", reason="too_deep") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{name}: not JSON ({exc})", reason="not_json") from exc
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise RecordError(f"{name}: {str(exc)[:200]}", reason="out_of_range") from exc
    except Exception as exc:
        raise RecordError(f"{name}: not JSON ({type(exc).__name__})", reason="not_json") from exc


def from_dict(cls: type, body: Any, strict: bool) -> Any:
    """:meth:`worx.records.Record.from_dict`."""
    try:
        return _from_dict(cls, body, strict)
    except RecordError:
        raise
    except (RecursionError, MemoryError) as exc:
        raise RecordError(f"{cls.__name__}: too large or deep", reason="too_large") from exc
    except Exception as exc:  # a decode must never let an input escape as another error
        raise RecordError(
            f"{cls.__name__}: invalid ({type(exc).__name__}: {str(exc)[:200]})"
        ) from exc


def _from_dict(cls: type, body: Any, strict: bool) -> Any:
    name = cls.__name__
    if not isinstance(body, dict):
        raise RecordError(f"{name}: expected a JSON object, got {type(body).__name__}")
    version = body.get("schema_version")
    if type(version) is not int or version != cls.SCHEMA_VERSION:
        raise UnknownSchemaVersion(
            f"{name}: schema_version {str(version)[:40]!r} is not supported (this build "
            f"reads {cls.SCHEMA_VERSION}); upgrade the reader or re-emit the record"
        )
    declared = fields(cls)
    unknown = set(body) - set(declared) - {"schema_version"}
    if unknown:
        if strict:
            shown = sorted(str(k)[:40] for k in unknown)[:10]
            raise RecordError(f"{name}: unknown fields {shown}", reason="unknown_fields")
        _refuse_other_record_type(cls, body)
    types = hints(cls)
    values: dict[str, Any] = {}
    for field_name, field in declared.items():
        if field_name not in body:
            has_default = (
                field.default is not dataclasses.MISSING
                or field.default_factory is not dataclasses.MISSING
            )
            if has_default:
                continue
            raise RecordError(f"{name}: missing field {field_name!r}", reason="missing_field")
        value = body[field_name]
        check_value(value, types[field_name], f"{name}.{field_name}")
        values[field_name] = value
    record = cls(**values)
    record.check()
    return record


def _refuse_other_record_type(cls: type, body: dict) -> None:
    """A body that carries every required field of another record type, beyond this
    type's own fields, is that record: e.g. a ``RoutedDoc`` offered as a ``Doc``."""
    own = set(fields(cls))
    for other in RECORD_TYPES:
        if other is cls or issubclass(cls, other) or not _is_module_level(other):
            continue
        needed = required(other)
        if needed - own and needed <= body.keys():
            raise RecordError(
                f"{cls.__name__}: the body is a {other.__name__} (it has every field "
                f"{other.__name__} requires); is the producer writing to the wrong topic?",
                reason="wrong_record_type",
            )


def _is_module_level(cls: type) -> bool:
    """A record type its module defines by name (not one made in a function or doctest)."""
    return getattr(sys.modules.get(cls.__module__), cls.__qualname__, None) is cls


def _refuse_constant(literal: str) -> Any:
    raise RecordError(
        f"{literal} is not a finite number (JSON has no {literal})", reason="not_finite"
    )
