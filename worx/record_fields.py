"""The field checks both record decoders share: the limits, a record class's fields and
hints, :func:`check_value` (the general decode's check of a value against its hint), and
:func:`plain_check` (the plain decode's flat predicates, True only where
:func:`check_value` passes)."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable
from typing import Any

from worx.record_errors import RecordError

MAX_INT = 2**63 - 1  # every int in a record fits int64 (Kafka offsets, timestamps)
MAX_ITEMS = 1_000_000  # items of one list or dict
MAX_STRING_CHARS = 16 * 1024 * 1024
MAX_DEPTH = 16  # nesting of free-form values (fields typed ``dict`` or ``Any``)
MAX_JSON_BYTES = 64 * 1024 * 1024


@functools.cache
def fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def required(cls: type) -> frozenset[str]:
    return frozenset(
        name
        for name, f in fields(cls).items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


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


def _plain_int(value: Any) -> bool:
    return type(value) is int and -MAX_INT - 1 <= value <= MAX_INT


def _plain_float(value: Any) -> bool:
    return (type(value) is float and math.isfinite(value)) or _plain_int(value)


def _plain_str(value: Any) -> bool:
    return type(value) is str and len(value) <= MAX_STRING_CHARS


def plain_check(hint: Any) -> Callable[[Any], bool] | None:
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
        inner = plain_check(concrete[0]) if len(concrete) == 1 else None
        if inner is None or len(args) != 2:
            return None
        return lambda value: value is None or inner(value)
    if origin is list and len(args) == 1:
        item = plain_check(args[0])
        if item is None or typing.get_origin(args[0]) is not None:
            return None
        return lambda value: (
            type(value) is list and len(value) <= MAX_ITEMS and all(map(item, value))
        )
    if origin is dict and len(args) == 2 and args[0] is str:
        item = plain_check(args[1])
        if item is None or typing.get_origin(args[1]) is not None:
            return None
        return lambda value: (
            type(value) is dict
            and len(value) <= MAX_ITEMS
            and all(map(_plain_str, value))
            and all(map(item, value.values()))
        )
    return None
