"""The domain table the monitor routes held-out documents by, kept on disk.

The monitor follows the compacted ``<prefix>.domains`` topic (as the server does) into a
:class:`router.table.DomainTable`; every accepted row is also written to
``<state_dir>/domains.json`` (a JSON list of ``DomainRecord`` objects, written
atomically), so that ``worx monitor --once --evaluate`` and a restarted monitor route the
same way before the topic is read again.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from router.records import DomainRecord
from router.table import DomainTable
from worx.atomic import atomic_write_json
from worx.records import RecordError

log = logging.getLogger(__name__)

FILE = "domains.json"


class KnownDomains:
    """A :class:`DomainTable` (``table``) that saves itself under ``root`` on every change.

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
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():
            for row in self._load(self.path):
                self.table.apply(row)

    @staticmethod
    def _load(path: Path) -> list[DomainRecord]:
        fix = "delete it, the monitor rebuilds it from the domains topic"
        try:
            body = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} is unreadable ({exc}); {fix}") from exc
        if not isinstance(body, list) or not all(isinstance(r, dict) for r in body):
            raise ValueError(f"{path} is not a list of domain records; {fix}")
        try:
            return [DomainRecord.from_dict(r, strict=False) for r in body]
        except (RecordError, TypeError) as exc:
            raise ValueError(f"{path} holds a bad domain record ({exc}); {fix}") from exc

    def apply(self, row: DomainRecord) -> bool:
        """Apply ``row`` to the table; save when it was accepted (newer than what was held)."""
        with self._lock:
            accepted = self.table.apply(row)
            if accepted and self.path is not None:
                atomic_write_json(self.path, [r.to_dict() for r in self.table.rows()])
        if accepted:
            log.info("domain %s v%d (%s)", row.domain_id, row.version, row.status)
        return accepted
