"""File readers: JSON-lines, plain text and CSV, optionally gzip-compressed.

Each reader yields :class:`RawInput` items in a deterministic order, so a resumed
ingest can skip the first ``n`` items of a file, and reports how many bytes of the
file (compressed bytes for ``.gz``) it has read, for progress bars.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

FORMATS = ("jsonl", "text", "csv", "tsv")
_SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
}


@dataclass(frozen=True)
class RawInput:
    """One input item of a file."""

    line: int  # 1-based line where the item starts (the DeadLetter's source_offset)
    value: bytes  # the original bytes of the item
    obj: Any = None  # the parsed object, for CSV rows (a dict); None: parse ``value``
    error: tuple[str, str] | None = None  # (reason, detail): the reader already rejected it


def detect_format(path: str | os.PathLike[str]) -> str:
    """``jsonl`` / ``csv`` / ``tsv`` from the suffix (``.gz`` ignored); else ``text``."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return _SUFFIXES.get(Path(name).suffix, "text")


class FileReader:
    """Iterate the items of one file; ``position`` is the bytes read so far.

    Parameters
    ----------
    path: the file; ``.gz`` files are decompressed on the fly.
    fmt: ``jsonl`` (one JSON value per line; blank lines skipped), ``text`` (see
        ``text_unit``), ``csv``/``tsv`` (first row is the header; each row becomes an
        object keyed by the header), or None to detect it from the suffix.
    text_unit: for ``text``: ``file`` (the whole file is one document), ``paragraph``
        (blocks separated by blank lines) or ``line``.
    """

    def __init__(
        self, path: str | os.PathLike[str], fmt: str | None = None, text_unit: str = "paragraph"
    ) -> None:
        self.path = Path(path)
        self.fmt = fmt or detect_format(path)
        if self.fmt not in FORMATS:
            raise ValueError(f"unknown file format {self.fmt!r}; use one of {FORMATS}")
        if text_unit not in ("file", "paragraph", "line"):
            raise ValueError(f"text_unit must be file, paragraph or line, got {text_unit!r}")
        self.text_unit = text_unit
        self.size = self.path.stat().st_size
        self._raw: IO[bytes] | None = None

    @property
    def position(self) -> int:
        if self._raw is None or self._raw.closed:
            return self.size
        return self._raw.tell()

    def __iter__(self) -> Iterator[RawInput]:
        with open(self.path, "rb") as raw:
            self._raw = raw
            stream: IO[bytes] = gzip.GzipFile(fileobj=raw) if _is_gzip(raw) else raw
            if self.fmt == "jsonl":
                yield from _jsonl(stream)
            elif self.fmt == "text":
                yield from _text(stream, self.text_unit)
            else:
                yield from _csv(stream, "\t" if self.fmt == "tsv" else ",")


def _is_gzip(raw: IO[bytes]) -> bool:
    magic = raw.read(2)
    raw.seek(0)
    return magic == b"\x1f\x8b"


def _jsonl(stream: IO[bytes]) -> Iterator[RawInput]:
    for number, line in enumerate(stream, start=1):
        value = line.rstrip(b"\r\n")
        if value.strip():
            yield RawInput(number, value)


def _text(stream: IO[bytes], unit: str) -> Iterator[RawInput]:
    if unit == "file":
        value = stream.read()
        if value.strip():
            yield RawInput(1, value)
        return
    block: list[bytes] = []
    start = 1
    for number, line in enumerate(stream, start=1):
        if unit == "line":
            if line.strip():
                yield RawInput(number, line.rstrip(b"\r\n"))
            continue
        if line.strip():
            if not block:
                start = number
            block.append(line)
        elif block:
            yield RawInput(start, b"".join(block).rstrip(b"\r\n"))
            block = []
    if block:
        yield RawInput(start, b"".join(block).rstrip(b"\r\n"))


def _csv(stream: IO[bytes], delimiter: str) -> Iterator[RawInput]:
    # surrogateescape keeps undecodable bytes recoverable, so one bad row is
    # dead-lettered with its original bytes instead of failing the whole file
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape", newline="")
    reader = csv.reader(text, delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        return
    if header and header[0].startswith("\ufeff"):
        header[0] = header[0][1:]
    start = reader.line_num + 1
    for row in reader:
        line, start = start, reader.line_num + 1
        if not any(cell.strip() for cell in row):
            continue
        value = _row_bytes(row, delimiter)
        if any(_has_surrogate(cell) for cell in row):
            yield RawInput(
                line, value, error=("invalid_utf8", "the row holds bytes that are not UTF-8")
            )
        elif len(row) != len(header):
            detail = f"the row has {len(row)} cells, the header {len(header)}"
            yield RawInput(line, value, error=("bad_csv_row", detail))
        else:
            yield RawInput(line, value, obj=dict(zip(header, row, strict=True)))


def _row_bytes(row: list[str], delimiter: str) -> bytes:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="").writerow(row)
    return out.getvalue().encode("utf-8", errors="surrogateescape")


def _has_surrogate(cell: str) -> bool:
    return any("\udc80" <= ch <= "\udcff" for ch in cell)
