"""The domain table kept in a file, so a finished run routes with no broker.

``worx demo`` (in its run directory) and ``worx up`` (in ``data_dir``) follow
``<prefix>.domains`` and write every accepted row to ``domains.json``: a JSON list of
:class:`DomainRecord` objects, exactly as they travel on the topic, rewritten atomically
on every change. ``worx serve --run``, ``worx explain --run`` and ``worx domains --run``
load it; a row is checked as the topic's rows are (``DomainRecord.from_dict``, then the
table's own checks), and a file that is missing or not such a list is a
:class:`TableFileError` whose message says which file and what to do.

Example
-------
>>> import tempfile
>>> from pathlib import Path
>>> path = Path(tempfile.mkdtemp()) / FILE
>>> saved = SavedTable(path)
>>> saved.apply(DomainRecord("dom-a", [1.0, 0.0], 0.5, 10, 0.8))
True
>>> [row.domain_id for row in load_table(path).rows()]
['dom-a']
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from router.records import DomainRecord
from router.table import DomainTable
from worx.atomic import atomic_write_json
from worx.records import RecordError

FILE = "domains.json"


class TableFileError(ValueError):
    """A domain table file that cannot be used, with the file and the fix in the message."""


def read_rows(path: str | Path) -> list[DomainRecord]:
    """The checked rows of the table file at ``path``.

    Raises:
        TableFileError: no such file, unreadable, not a list of domain records.
    """
    path = Path(path)
    if not path.is_file():
        where = "no such file" if not path.exists() else "not a file"
        raise TableFileError(
            f"no domain table at {path} ({where}); `worx demo` and `worx up` write it into "
            "the run directory (data_dir)"
        )
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TableFileError(f"{path} is not readable JSON ({_first_line(exc)})") from None
    if not isinstance(body, list) or not all(isinstance(r, dict) for r in body):
        raise TableFileError(f"{path} is not a list of domain records (as on worx.domains)")
    rows = []
    for index, raw in enumerate(body):
        try:
            rows.append(DomainRecord.from_dict(raw, strict=False))
        except (RecordError, TypeError) as exc:
            detail = _first_line(exc)
            raise TableFileError(f"{path}: row {index} is not a domain record ({detail})") from None
    return rows


def load_table(path: str | Path, dim: int | None = None) -> DomainTable:
    """A :class:`DomainTable` of the file's rows (``dim``: the embedder's dimension).

    Raises:
        TableFileError: see :func:`read_rows`; also a row the table refuses (another
            embedder's dimension, a second row of one domain at the same version).
    """
    table = DomainTable(dim=dim)
    for row in read_rows(path):
        try:
            table.apply(row)
        except RecordError as exc:
            raise TableFileError(
                f"{path}: domain {row.domain_id} refused ({_first_line(exc)})"
            ) from None
    return table


def write_table(path: str | Path, table: DomainTable) -> None:
    """Write every row of ``table`` to ``path`` atomically (readers see old or new, never half)."""
    atomic_write_json(path, [row.to_dict() for row in table.rows()])


class SavedTable:
    """A :class:`DomainTable` (``table``) written to ``path`` after every accepted row.

    ``apply`` has the table's contract (raises on an invalid row, returns whether the row
    was newer), so it can be handed to a table follower as is.
    """

    def __init__(self, path: str | Path, table: DomainTable | None = None) -> None:
        self.path = Path(path)
        self.table = table if table is not None else DomainTable()
        self._lock = threading.Lock()

    def apply(self, row: DomainRecord) -> bool:
        with self._lock:
            accepted = self.table.apply(row)
            if accepted:
                write_table(self.path, self.table)
        return accepted


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]
