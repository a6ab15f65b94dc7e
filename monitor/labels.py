"""Domain id -> the name a person reads (:func:`router.naming.display_name` of the domain
table's row, without the id fallback: its ``name``, else its ``label_hint``), on disk.

The monitor follows the compacted ``<prefix>.domains`` topic (see
:class:`topology.runtimes.table_follower.TableFollower`) into :class:`DomainLabels`, which keeps
``<state_dir>/domain_labels.json`` (a JSON object ``{domain_id: label}``, written
atomically) so that ``worx report`` and ``worx monitor --once``, which read only the
state directory, show the same names.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from router.naming import display_name
from router.records import DomainRecord
from worx.atomic import atomic_write_json

log = logging.getLogger(__name__)

FILE = "domain_labels.json"


def load_labels(root: str | Path) -> dict[str, str]:
    """``<root>/domain_labels.json`` as a dict; ``{}`` when absent.

    Raises
    ------
    ValueError
        The file is not a JSON object of strings (it names the file and the fix).
    """
    path = Path(root) / FILE
    if not path.exists():
        return {}
    try:
        body = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"{path} is unreadable ({exc}); delete it, the monitor rebuilds it from the "
            "domains topic"
        ) from exc
    if not isinstance(body, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in body.items()
    ):
        raise ValueError(
            f"{path} is not an object of domain id -> label strings; delete it, the monitor "
            "rebuilds it from the domains topic"
        )
    return body


class DomainLabels:
    """Thread-safe domain id -> label table (the follower thread writes, requests read).

    Parameters
    ----------
    root
        State directory holding ``domain_labels.json`` (loaded at start, saved on every
        change); None: memory only.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.path = Path(root) / FILE if root else None
        self._lock = threading.Lock()
        self._labels: dict[str, str] = load_labels(root) if root else {}

    def apply(self, row: DomainRecord) -> None:
        """Take the row's name (none forgets the label); save when it changed.

        Raises:
            RecordError: the row is invalid (nothing changes).
        """
        row.validated()
        name = display_name(row)
        name = None if name == row.domain_id else name
        with self._lock:
            if self._labels.get(row.domain_id) == name:
                return
            if name:
                self._labels[row.domain_id] = name
            else:
                self._labels.pop(row.domain_id, None)
            if self.path:
                atomic_write_json(self.path, self._labels)
        log.info("domain %s is named %r", row.domain_id, name)

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return dict(self._labels)
