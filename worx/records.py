"""Versioned, frozen record dataclasses and their JSON serde.

Every stage owns the records it emits (``<stage>/records.py``); they subclass
:class:`Record`, hold only primitives, lists and dicts, and declare the
``SCHEMA_VERSION`` they write. Decoding is strict about the version: a record with
an unknown ``schema_version`` is refused, never guessed at, so the caller can
dead-letter it.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, ClassVar, Self


class RecordError(ValueError):
    """A byte string or dict that is not a valid record of the expected type."""

    reason: str = "invalid_record"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class UnknownSchemaVersion(RecordError):
    reason = "unknown_schema_version"


@dataclasses.dataclass(frozen=True)
class Record:
    """Base of every record on a topic. Subclasses are frozen dataclasses."""

    SCHEMA_VERSION: ClassVar[int] = 1

    def to_dict(self) -> dict[str, Any]:
        body = dataclasses.asdict(self)
        body["schema_version"] = self.SCHEMA_VERSION
        return body

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":")).encode()

    @classmethod
    def from_dict(cls, body: Any, *, strict: bool = True) -> Self:
        """Build the record from a decoded JSON object.

        Raises:
            UnknownSchemaVersion: the ``schema_version`` is missing or not this class's.
            RecordError: a required field is missing, a field has the wrong type, or
                (with ``strict``) there are fields this version does not know.
        """
        name = cls.__name__
        if not isinstance(body, dict):
            raise RecordError(f"{name}: expected a JSON object, got {type(body).__name__}")
        version = body.get("schema_version")
        if version != cls.SCHEMA_VERSION:
            raise UnknownSchemaVersion(
                f"{name}: schema_version {version!r} is not supported (this build reads "
                f"{cls.SCHEMA_VERSION}); upgrade the reader or re-emit the record"
            )
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(body) - set(fields) - {"schema_version"}
        if strict and unknown:
            raise RecordError(f"{name}: unknown fields {sorted(unknown)}", reason="unknown_fields")
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for field_name, field in fields.items():
            if field_name not in body:
                has_default = (
                    field.default is not dataclasses.MISSING
                    or field.default_factory is not dataclasses.MISSING
                )
                if has_default:
                    continue
                raise RecordError(f"{name}: missing field {field_name!r}", reason="missing_field")
            value = body[field_name]
            if not _matches(value, hints[field_name]):
                raise RecordError(
                    f"{name}: field {field_name!r} should be {hints[field_name]}, "
                    f"got {type(value).__name__}",
                    reason="wrong_type",
                )
            values[field_name] = value
        return cls(**values)

    @classmethod
    def from_json(cls, raw: bytes | str, *, strict: bool = True) -> Self:
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RecordError(f"{cls.__name__}: not JSON ({exc})", reason="not_json") from exc
        return cls.from_dict(body, strict=strict)


def _matches(value: Any, hint: Any) -> bool:
    """Shallow structural type check of a decoded JSON value against a type hint."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        return isinstance(value, list | tuple)
    if origin is dict:
        return isinstance(value, dict)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True
