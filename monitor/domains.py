"""The domain table the monitor routes held-out documents by, kept on disk.

The monitor follows the compacted ``<prefix>.domains`` topic (as the server does) into a
:class:`router.table.DomainTable`; every accepted row is also written to
``<state_dir>/domains.json`` (a JSON list of ``DomainRecord`` objects, written
atomically), so that ``worx monitor --once --evaluate`` and a restarted monitor route the
same way before the topic is read again.
"""

from __future__ import annotations

import logging
from pathlib import Path

from router.records import DomainRecord
from router.table import DomainTable
from router.table_file import SavedTable, TableFileError, read_rows

log = logging.getLogger(__name__)

FILE = "domains.json"


class KnownDomains:
    """A :class:`DomainTable` (``table``) that saves itself under ``root`` on every change
    (:class:`router.table_file.SavedTable`: the file format of a run's ``domains.json``).

    Parameters
    ----------
    root
        State directory holding ``domains.json`` (loaded at start); None: memory only.

    Raises
    ------
    ValueError
        ``domains.json`` is unreadable or not a list of domain records (names the fix).
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.path = Path(root) / FILE if root else None
        self.table = DomainTable()
        self._saved = SavedTable(self.path, self.table) if self.path is not None else None
        if self.path is not None and self.path.exists():
            for row in self._load(self.path):
                self.table.apply(row)

    @staticmethod
    def _load(path: Path) -> list[DomainRecord]:
        try:
            return read_rows(path)
        except TableFileError as exc:
            raise ValueError(
                f"unreadable domain table: {exc}; delete it, the monitor rebuilds it from the "
                "domains topic"
            ) from None

    def apply(self, row: DomainRecord) -> bool:
        """Apply ``row`` to the table; save when it was accepted (newer than what was held)."""
        accepted = self._saved.apply(row) if self._saved is not None else self.table.apply(row)
        if accepted:
            log.info("domain %s v%d (%s)", row.domain_id, row.version, row.status)
        return accepted
