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
import functools
import json
import math
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Self

try:  # optional: the fast codec paths (json does the same for anything else)
    import orjson
except ImportError:  # pragma: no cover - the standard library decodes the same, slower
    orjson = None

MAX_INT = 2**63 - 1  # every int in a record fits int64 (Kafka offsets, timestamps)
MAX_ITEMS = 1_000_000  # items of one list or dict
MAX_STRING_CHARS = 16 * 1024 * 1024
MAX_DEPTH = 16  # nesting of free-form values (fields typed ``dict`` or ``Any``)
MAX_JSON_BYTES = 64 * 1024 * 1024
_PROJECT_PACKAGES = {"worx", "ingest", "router", "experts", "trainer", "monitor"}


class RecordError(ValueError):
    """A byte string or dict that is not a valid record of the expected type.

    ``reason`` is a short stable code (for a dead letter's ``reason``); ``str(error)``
    says what was wrong.
    """

    reason: str = "invalid_record"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class UnknownSchemaVersion(RecordError):
    reason = "unknown_schema_version"


_RECORD_TYPES: list[type[Record]] = []  # the project's record types (wrong-type detection)


@dataclasses.dataclass(frozen=True)
class Record:
    """Base of every record on a topic. Subclasses are frozen dataclasses."""

    SCHEMA_VERSION: ClassVar[int] = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__.split(".")[0] in _PROJECT_PACKAGES:
            _RECORD_TYPES.append(cls)

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
            hints = _hints(type(self))
            for field_name in _fields(type(self)):
                check_value(getattr(self, field_name), hints[field_name], f"{name}.{field_name}")
            self.check()
            return self
        except RecordError:
            raise
        except Exception as exc:
            raise RecordError(f"{name}: invalid ({type(exc).__name__}: {str(exc)[:200]})") from exc

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the record; a non-finite float is None (JSON has no NaN)."""
        body = {name: getattr(self, name) for name in _fields(type(self))}
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
        try:
            return cls._from_dict(body, strict)
        except RecordError:
            raise
        except (RecursionError, MemoryError) as exc:
            raise RecordError(f"{cls.__name__}: too large or deep", reason="too_large") from exc
        except Exception as exc:  # a decode must never let an input escape as another error
            raise RecordError(
                f"{cls.__name__}: invalid ({type(exc).__name__}: {str(exc)[:200]})"
            ) from exc

    @classmethod
    def from_json(cls, raw: bytes | str | None, *, strict: bool = True) -> Self:
        """Decode one record from JSON bytes; raises only :class:`RecordError`."""
        plain = _plain_decode(cls, raw)
        if plain is not None:
            return plain
        name = cls.__name__
        if not raw:
            raise RecordError(f"{name}: empty value (a tombstone?)", reason="empty")
        if len(raw) > MAX_JSON_BYTES:
            raise RecordError(
                f"{name}: {len(raw)} bytes is over {MAX_JSON_BYTES}", reason="too_large"
            )
        try:
            body = json.loads(raw, parse_constant=_refuse_constant)
        except RecordError:
            raise
        except RecursionError as exc:
            raise RecordError(f"{name}: JSON nested too deeply", reason="too_deep") from exc
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RecordError(f"{name}: not JSON ({exc})", reason="not_json") from exc
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise RecordError(f"{name}: {str(exc)[:200]}", reason="out_of_range") from exc
        except Exception as exc:
            raise RecordError(
                f"{name}: not JSON ({type(exc).__name__})", reason="not_json"
            ) from exc
        return cls.from_dict(body, strict=strict)

    @classmethod
    def _from_dict(cls, body: Any, strict: bool) -> Self:
        name = cls.__name__
        if not isinstance(body, dict):
            raise RecordError(f"{name}: expected a JSON object, got {type(body).__name__}")
        version = body.get("schema_version")
        if type(version) is not int or version != cls.SCHEMA_VERSION:
            raise UnknownSchemaVersion(
                f"{name}: schema_version {str(version)[:40]!r} is not supported (this build "
                f"reads {cls.SCHEMA_VERSION}); upgrade the reader or re-emit the record"
            )
        fields = _fields(cls)
        unknown = set(body) - set(fields) - {"schema_version"}
        if unknown:
            if strict:
                shown = sorted(str(k)[:40] for k in unknown)[:10]
                raise RecordError(f"{name}: unknown fields {shown}", reason="unknown_fields")
            _refuse_other_record_type(cls, body)
        hints = _hints(cls)
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
            check_value(value, hints[field_name], f"{name}.{field_name}")
            values[field_name] = value
        record = cls(**values)
        record.check()
        return record


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


def _plain_decode(cls: type[Record], raw: bytes | str | None) -> Any:
    """The record of ``raw`` when it is plainly valid, else None (then the full decode
    says what is wrong, and why). Plainly valid: orjson parses it (stricter than json: no
    NaN, lone surrogate or integer past 64 bits), it holds this class's version and only
    fields the class declares, each a flat value its hint accepts (:func:`_plain_check`:
    what :func:`check_value` accepts, without nesting), and :meth:`Record.check` passes.
    Such a body decodes to the same record by either path; a few times faster this way."""
    if orjson is None or not raw or len(raw) > MAX_JSON_BYTES:
        return None
    plan = _plain_plan(cls)
    if plan is None:
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(body) is not dict:
        return None
    version = body.get("schema_version")
    if type(version) is not int or version != cls.SCHEMA_VERSION:
        return None
    fields, required = plan
    values = {}
    for field_name, plain in fields.items():
        if field_name in body:
            value = body[field_name]
            if not plain(value):
                return None
            values[field_name] = value
        elif field_name in required:
            return None
    if len(values) + 1 != len(body):  # a field this class does not declare
        return None
    try:
        record = cls(**values)
        record.check()
    except Exception:  # the full decode raises it with its reason
        return None
    return record


@functools.cache
def _plain_plan(cls: type) -> tuple[dict[str, Callable[[Any], bool]], frozenset[str]] | None:
    """Each field's :func:`_plain_check` and the required fields; None if a hint has none."""
    hints = _hints(cls)
    checks = {name: _plain_check(hints[name]) for name in _fields(cls)}
    if any(check is None for check in checks.values()):
        return None
    return checks, _required(cls)  # type: ignore[return-value]


def _plain_int(value: Any) -> bool:
    return type(value) is int and -MAX_INT - 1 <= value <= MAX_INT


def _plain_float(value: Any) -> bool:
    return (type(value) is float and math.isfinite(value)) or _plain_int(value)


def _plain_str(value: Any) -> bool:
    return type(value) is str and len(value) <= MAX_STRING_CHARS


def _plain_check(hint: Any) -> Callable[[Any], bool] | None:
    """A predicate for ``hint`` that is True only where :func:`check_value` passes: for
    str, int, float, bool, optional ones and lists or str-keyed dicts of them; else None."""
    scalar = {str: _plain_str, int: _plain_int, float: _plain_float}.get(hint)
    if scalar is not None:
        return scalar
    if hint is bool:
        return lambda value: type(value) is bool
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        concrete = [a for a in args if a is not type(None)]
        inner = _plain_check(concrete[0]) if len(concrete) == 1 else None
        if inner is None or len(args) != 2:
            return None
        return lambda value: value is None or inner(value)
    if origin is list and len(args) == 1:
        item = _plain_check(args[0])
        if item is None or typing.get_origin(args[0]) is not None:
            return None
        return lambda value: (
            type(value) is list and len(value) <= MAX_ITEMS and all(map(item, value))
        )
    if origin is dict and len(args) == 2 and args[0] is str:
        item = _plain_check(args[1])
        if item is None or typing.get_origin(args[1]) is not None:
            return None
        return lambda value: (
            type(value) is dict
            and len(value) <= MAX_ITEMS
            and all(map(_plain_str, value))
            and all(map(item, value.values()))
        )
    return None


_SCALARS = frozenset({str, int, float, bool, type(None)})  # immutable: asdict would not copy


@functools.cache
def _fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _required(cls: type) -> frozenset[str]:
    return frozenset(
        name
        for name, f in _fields(cls).items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


def _refuse_other_record_type(cls: type[Record], body: dict) -> None:
    """A body that carries every required field of another record type, beyond this
    type's own fields, is that record: e.g. a ``RoutedDoc`` offered as a ``Doc``."""
    own = set(_fields(cls))
    for other in _RECORD_TYPES:
        if other is cls or issubclass(cls, other) or not _is_module_level(other):
            continue
        required = _required(other)
        if required - own and required <= body.keys():
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


def check_value(value: Any, hint: Any, where: str) -> None:
    """Check a decoded JSON ``value`` against a type hint, element by element.

    Numbers must be finite (floats) and fit int64 (ints); lists and dicts hold at most
    :data:`MAX_ITEMS` items, strings :data:`MAX_STRING_CHARS` characters; a value typed
    ``dict``/``list``/``Any`` without parameters is free-form JSON, nested at most
    :data:`MAX_DEPTH` deep. Raises :class:`RecordError`.
    """
    if hint is Any:
        _check_free_form(value, where)
        return
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return
        concrete = [a for a in args if a is not type(None)]
        if len(concrete) == 1:
            check_value(value, concrete[0], where)
            return
        errors = []
        for arg in concrete:
            try:
                check_value(value, arg, where)
                return
            except RecordError as exc:
                errors.append(exc)
        raise errors[0]
    if hint is type(None):
        if value is not None:
            raise _wrong(where, hint, value)
    elif hint is float:
        _check_number(value, where, hint)
    elif hint is int:
        if type(value) is not int:
            raise _wrong(where, hint, value)
        _check_number(value, where, hint)
    elif hint is bool:
        if type(value) is not bool:
            raise _wrong(where, hint, value)
    elif hint is str:
        if not isinstance(value, str):
            raise _wrong(where, hint, value)
        _check_string(value, where)
    elif hint in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise _wrong(where, hint, value)
        _check_size(value, where)
        args = typing.get_args(hint)
        if not args or args[0] is Any:
            _check_free_form(value, where)
        else:
            for i, item in enumerate(value):
                check_value(item, args[0], f"{where}[{i}]")
    elif hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise _wrong(where, hint, value)
        _check_size(value, where)
        args = typing.get_args(hint)
        if not args or args == (str, Any):
            _check_free_form(value, where)
        else:
            for key, item in value.items():
                check_value(key, args[0], f"{where} key")
                check_value(item, args[1], f"{where}[{str(key)[:40]!r}]")
    elif isinstance(hint, type) and not isinstance(value, hint):
        raise _wrong(where, hint, value)


def _check_number(value: Any, where: str, hint: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong(where, hint, value)
    if isinstance(value, float) and not math.isfinite(value):
        raise RecordError(f"{where}: {value} is not a finite number", reason="not_finite")
    if isinstance(value, int) and not -MAX_INT - 1 <= value <= MAX_INT:
        raise RecordError(f"{where}: the integer does not fit 64 bits", reason="out_of_range")


def _check_string(value: str, where: str) -> None:
    if len(value) > MAX_STRING_CHARS:
        raise RecordError(f"{where}: {len(value)} characters is too long", reason="too_large")


def _check_size(value: Any, where: str) -> None:
    if len(value) > MAX_ITEMS:
        raise RecordError(f"{where}: {len(value)} items is over {MAX_ITEMS}", reason="too_large")


def _check_free_form(value: Any, where: str) -> None:
    """Free-form JSON (a summary, figures): finite numbers, bounded size and depth."""
    stack = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_ITEMS:
            raise RecordError(f"{where}: more than {MAX_ITEMS} values", reason="too_large")
        if isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise RecordError(f"{where}: nested deeper than {MAX_DEPTH}", reason="too_deep")
            if isinstance(item, dict):
                for key in item:
                    if not isinstance(key, str):
                        raise _wrong(where, str, key)
                    _check_string(key, where)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, str):
            _check_string(item, where)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            _check_number(item, where, float)
        elif item is not None and not isinstance(item, bool):
            raise _wrong(where, "JSON", item)


def _wrong(where: str, hint: Any, value: Any) -> RecordError:
    shown = getattr(hint, "__name__", None) or str(hint)
    return RecordError(
        f"{where} should be {shown}, got {type(value).__name__}", reason="wrong_type"
    )
