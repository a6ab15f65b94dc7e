"""Stable string ids: validation against path traversal, content hashes."""

from __future__ import annotations

import hashlib
import re

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # whole string (fullmatch)


class UnsafeIdError(ValueError):
    pass


def validate_id(value: object, *, kind: str = "id") -> str:
    """Return ``value`` if it is a safe id, else raise :class:`UnsafeIdError`.

    A safe id is 1-128 characters of ``[A-Za-z0-9._-]``, starts with a letter or digit
    and holds no ``..``, so it can name a directory without escaping its parent. The
    whole string must match: a trailing newline, a slash or an empty string is refused.

    >>> validate_id("dom-1a.b_c")
    'dom-1a.b_c'
    >>> for bad in ("dom-1" + chr(10), "a/b", "a..b", ""):
    ...     try:
    ...         validate_id(bad)
    ...     except UnsafeIdError:
    ...         print("refused", repr(bad))
    refused 'dom-1\\n'
    refused 'a/b'
    refused 'a..b'
    refused ''
    """
    if not isinstance(value, str) or not _SAFE_ID.fullmatch(value) or ".." in value:
        raise UnsafeIdError(
            f"{kind} {value!r} is not a safe name: use 1-128 characters of letters, digits, "
            "'.', '_' or '-', starting with a letter or digit, with no '..'"
        )
    return value


def content_hash(text: str, *, prefix: str = "", length: int = 24) -> str:
    """Deterministic id from content: ``prefix`` + first ``length`` hex chars of sha256."""
    return prefix + hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def stable_fraction(key: str, *, salt: str = "") -> float:
    """Map ``key`` to a deterministic number in [0, 1) (used for hash-based splits)."""
    digest = hashlib.sha256((salt + key).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
