"""Field checks for :meth:`worx.records.Record.check`: ids, ranges, names, vectors.

Each raises :class:`worx.records.RecordError` with a stable ``reason`` and a message
naming the field (``where``), so a dead letter says what was wrong.

>>> check_unit_vector("centroid", [0.6, 0.8])
>>> try:
...     check_unit_vector("centroid", [3.0, 4.0])
... except RecordError as exc:
...     print(exc.reason)
not_normalised
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable
from typing import Any

from worx.ids import UnsafeIdError, validate_id
from worx.records import RecordError

MAX_DIM = 65_536  # dimensions of an embedding vector
MAX_DOC_ID_CHARS = 320  # a given id (ingest allows 256) plus "#<part>"
NORM_TOLERANCE = 1e-3  # |norm - 1| allowed for an L2-normalised vector (rounding, float32)
COSINE = (-1.0 - 1e-3, 1.0 + 1e-3)  # a cosine similarity, with float32 rounding
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")  # Kafka's legal topic names


def check_id(where: str, value: Any, *, optional: bool = False) -> None:
    """A safe id (:func:`worx.ids.validate_id`), or None when ``optional``."""
    if value is None and optional:
        return
    try:
        validate_id(value, kind=where)
    except UnsafeIdError as exc:
        raise RecordError(str(exc)[:300], reason="unsafe_id") from exc


def check_ids(where: str, values: Iterable[Any]) -> None:
    for value in values:
        check_id(where, value)


def check_doc_id(where: str, value: Any) -> None:
    """A document id: ingest keeps given ids (printable, at most 256 characters), so it is
    not a safe path name; it must be non-empty, printable and bounded."""
    if not isinstance(value, str) or not value or len(value) > MAX_DOC_ID_CHARS:
        raise RecordError(f"{where} must be 1-{MAX_DOC_ID_CHARS} characters", reason="bad_doc_id")
    if not value.isprintable():
        raise RecordError(f"{where} {value[:40]!r} holds control characters", reason="bad_doc_id")


def check_doc_ids(where: str, values: Iterable[Any]) -> None:
    for value in values:
        check_doc_id(where, value)


def check_text(where: str, value: str) -> None:
    """A text to embed or train on: non-empty and valid Unicode (JSON lets a lone
    surrogate through, which tokenizers and UTF-8 writers refuse)."""
    if not value or value.isspace():
        raise RecordError(f"{where} is empty or whitespace only", reason="empty_text")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RecordError(
                f"{where} is not valid Unicode ({exc.reason})", reason="invalid_unicode"
            ) from exc


def check_name(
    where: str,
    value: Any,
    *,
    max_chars: int = 256,
    optional: bool = False,
    printable: bool = True,
) -> None:
    """A short text (a label, a code, an embedder's name), printable unless told."""
    if value is None and optional:
        return
    if (
        not isinstance(value, str)
        or len(value) > max_chars
        or (printable and not value.isprintable())
    ):
        kind = "printable text" if printable else "text"
        raise RecordError(
            f"{where} must be {kind} of at most {max_chars} characters", reason="bad_name"
        )


def check_topic(where: str, value: Any) -> None:
    if not isinstance(value, str) or not _TOPIC.fullmatch(value):
        raise RecordError(
            f"{where} {str(value)[:60]!r} is not a Kafka topic name", reason="bad_topic"
        )


def check_choice(where: str, value: Any, choices: Collection[Any]) -> None:
    if value not in choices:
        raise RecordError(
            f"{where} is {str(value)[:40]!r}, expected one of {sorted(choices)}",
            reason="unknown_value",
        )


def check_range(
    where: str, value: float, low: float | None = None, high: float | None = None
) -> None:
    """``low <= value <= high`` (either bound may be None)."""
    if (low is not None and value < low) or (high is not None and value > high):
        raise RecordError(f"{where} is {value!r}, outside [{low}, {high}]", reason="out_of_range")


def check_hex64(where: str, value: Any) -> None:
    """A sha256 in lower-case hex."""
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise RecordError(
            f"{where} {str(value)[:70]!r} is not 64 lower-case hex digits", reason="bad_sha256"
        )


def check_vector(where: str, values: list[float]) -> None:
    """A non-empty vector of at most :data:`MAX_DIM` numbers (types checked by decode)."""
    if not values or len(values) > MAX_DIM:
        raise RecordError(
            f"{where} has {len(values)} dimensions; expected 1 to {MAX_DIM}",
            reason="wrong_dimension",
        )


def check_unit_vector(where: str, values: list[float]) -> None:
    """An L2-normalised vector: routing is a dot product, so a longer centroid would win
    every document near its direction (and a zero one none)."""
    check_vector(where, values)
    norm = math.sqrt(math.fsum(float(v) * float(v) for v in values))
    if not math.isfinite(norm) or abs(norm - 1.0) > NORM_TOLERANCE:
        raise RecordError(
            f"{where} has L2 norm {norm:.6g}; a centroid must be L2-normalised",
            reason="not_normalised",
        )


def check_dim(where: str, values: list[float], dim: int) -> None:
    """``values`` has exactly ``dim`` dimensions (the consumer's embedder's)."""
    if len(values) != dim:
        raise RecordError(
            f"{where} has {len(values)} dimensions, the embedder makes {dim}: it was made "
            "with another embedder",
            reason="wrong_dimension",
        )
