"""The plain record decode: orjson and flat checks, for a body that is plainly valid; None
for anything else, which the general decode (:mod:`worx.record_decode_full`) then refuses
with its reason. Where both decode a body, they give the same record
(``tests/test_records_plain.py``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from worx.record_fields import MAX_JSON_BYTES, fields, hints, plain_check, required

try:  # optional: without it every body takes the general decode
    import orjson
except ImportError:  # pragma: no cover - the standard library decodes the same, slower
    orjson = None


def plain_decode(cls: type, raw: bytes | str | None) -> Any:
    """The record of ``raw`` when it is plainly valid, else None (then the full decode
    says what is wrong, and why). Plainly valid: orjson parses it (stricter than json: no
    NaN, lone surrogate or integer past 64 bits), it holds this class's version and only
    fields the class declares, each a flat value its hint accepts
    (:func:`~worx.record_fields.plain_check`: what
    :func:`~worx.record_fields.check_value` accepts, without nesting), and
    :meth:`~worx.records.Record.check` passes. Such a body decodes to the same record by
    either path; a few times faster this way."""
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
    checks, needed = plan
    values = {}
    for field_name, plain in checks.items():
        if field_name in body:
            value = body[field_name]
            if not plain(value):
                return None
            values[field_name] = value
        elif field_name in needed:
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
    """Each field's :func:`~worx.record_fields.plain_check` and the required fields; None
    if a hint has none."""
    types = hints(cls)
    checks = {name: plain_check(types[name]) for name in fields(cls)}
    if any(check is None for check in checks.values()):
        return None
    return checks, required(cls)  # type: ignore[return-value]
