"""The domain table: the latest :class:`DomainRecord` per ``domain_id``, and routing by it.

Every route worker, the discover stage and the inference gate hold one, fed from the
compacted ``worx.domains`` topic. Applying a record is idempotent and order-tolerant per
domain (a row only replaces one with a lower ``version``), so replays and duplicates
cannot move the table backwards. Routing is a pure function of the table and the
vector, so two workers at the same :attr:`version` make the same decision.

A row is applied only after the table it makes has been built and checked: an invalid
row (a centroid that is not a finite unit vector, of another dimension than the table's
or the embedder's, a threshold out of range...) raises
:class:`worx.records.RecordError` and changes nothing, so no single row can hijack
routing (a NaN centroid wins every ``argmax``) or freeze the table. A row of the same
``version`` with changed content is ignored like an older one (the first wins; it is
logged): discover is the one writer and bumps the version on every change, so such a row
is a producer's bug or forged, and bumping the version is the only way to change a row.

Example
-------
>>> import numpy as np
>>> from router.records import DomainRecord
>>> table = DomainTable()
>>> table.apply(DomainRecord("dom-a", [1.0, 0.0], 0.5, 10, 0.8))
True
>>> domain, sim = table.route(np.array([0.9, 0.1], dtype=np.float32))
>>> domain, round(sim, 3)
('dom-a', 0.9)
>>> table.route(np.array([0.1, 0.9], dtype=np.float32))[0] is None
True
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from router.records import DomainRecord
from worx.records import RecordError

log = logging.getLogger(__name__)


class DomainTable:
    """See the module docstring.

    Parameters
    ----------
    dim : int, optional
        The embedder's dimension: every centroid must have it (else the first row sets it).
    """

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim
        self._rows: dict[str, DomainRecord] = {}
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        # (ids, centroids (K, dim), thresholds (K,), core thresholds (K,), version,
        # cohesions (K,)): swapped as one object, so a reader never sees half an update
        self._index: tuple[list[str], np.ndarray, np.ndarray, np.ndarray, int, np.ndarray] = (
            [],
            np.zeros((0, 0)),
            np.zeros(0),
            np.zeros(0),
            0,
            np.zeros(0),
        )

    @property
    def version(self) -> int:
        """Sum of the row versions: grows with every accepted update (the decisions' stamp)."""
        return self._index[4]

    def rows(self) -> list[DomainRecord]:
        with self._lock:
            return sorted(self._rows.values(), key=lambda r: r.domain_id)

    def get(self, domain_id: str) -> DomainRecord | None:
        return self._rows.get(domain_id)

    def __len__(self) -> int:
        return len(self._rows)

    def apply(self, row: DomainRecord) -> bool:
        """Accept ``row`` if it is newer than what the table holds; returns whether it was.

        Raises:
            RecordError: the row is invalid; the table is unchanged.
        """
        if not isinstance(row, DomainRecord):
            raise RecordError(
                f"a domain table row must be a DomainRecord, got {type(row).__name__}",
                reason="wrong_record_type",
            )
        row.validated()
        with self._changed:
            old = self._rows.get(row.domain_id)
            if old is not None and old.version >= row.version:
                if old.version == row.version and old != row:
                    log.warning(
                        "domain %s: another row of version %d ignored (the first wins; a "
                        "change must bump the version)",
                        row.domain_id,
                        row.version,
                    )
                return False
            dim = self.dim if self.dim is not None else self._dim()
            if dim is not None:
                row.check_dim(dim)
            rows = {**self._rows, row.domain_id: row}
            index = _build_index(rows)
            self._rows, self._index = rows, index
            self._changed.notify_all()
            return True

    def _dim(self) -> int | None:
        """The dimension of the rows held (every row has it), None when empty."""
        for held in self._rows.values():
            return len(held.centroid)
        return None

    def route(self, vector: np.ndarray) -> tuple[str | None, float]:
        """``(domain_id, similarity)`` of the nearest active domain, or ``(None, similarity)``
        when it is below that domain's threshold (``(None, 0.0)`` with no domain)."""
        domain_id, sim, _, _ = self.decide(vector)
        return domain_id, sim

    def decide(self, vector: np.ndarray) -> tuple[str | None, float, bool, int]:
        """``(domain_id, similarity, uncertain, version)`` in one consistent read.

        ``uncertain``: novel, or assigned below the domain's core threshold.
        """
        ids, centroids, thresholds, cores, version, _ = self._index
        if not ids:
            return None, 0.0, True, version
        sims = centroids @ vector  # (K,)
        best = int(np.argmax(sims))
        sim = float(sims[best])
        if sim < thresholds[best]:
            return None, sim, True, version
        return ids[best], sim, bool(sim < cores[best]), version

    def scores(
        self, vector: np.ndarray
    ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, int]:
        """``(ids, similarities (K,), thresholds (K,), cohesions (K,), version)`` of every
        active domain, in one consistent read (for rules other than :meth:`decide`'s, such
        as the inference gate's rule for short texts)."""
        ids, centroids, thresholds, _, version, cohesions = self._index
        if not ids:
            return [], np.zeros(0, np.float32), thresholds, cohesions, version
        return list(ids), centroids @ vector, thresholds, cohesions, version  # sims: (K,)

    def nearest(self, vector: np.ndarray) -> tuple[str | None, float]:
        """The nearest active domain regardless of thresholds."""
        ids, centroids = self._index[0], self._index[1]
        if not ids:
            return None, 0.0
        sims = centroids @ vector  # (K,)
        best = int(np.argmax(sims))
        return ids[best], float(sims[best])

    def wait_for(self, predicate, timeout: float | None = None) -> bool:
        """Block until ``predicate(self)`` holds after some apply (or now); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout=timeout)


def _build_index(
    rows: dict[str, DomainRecord],
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
    """The routing index of ``rows``, checked: finite numbers, one dimension."""
    active = sorted((r for r in rows.values() if r.status == "active"), key=lambda r: r.domain_id)
    ids = [r.domain_id for r in active]
    if active:
        centroids = np.asarray([r.centroid for r in active], dtype=np.float32)  # (K, dim)
        thresholds = np.asarray([r.threshold for r in active], dtype=np.float32)  # (K,)
        cores = np.asarray([r.core_threshold for r in active], dtype=np.float32)  # (K,)
        cohesions = np.asarray([r.cohesion for r in active], dtype=np.float32)  # (K,)
    else:
        centroids = np.zeros((0, 0), np.float32)
        thresholds = cores = cohesions = np.zeros(0, np.float32)
    parts = (centroids, thresholds, cores, cohesions)
    if centroids.ndim != 2 or not all(np.isfinite(a).all() for a in parts):
        raise RecordError("the domain table would hold a non-finite or ragged centroid")
    version = sum(row.version for row in rows.values())
    return ids, centroids, thresholds, cores, version, cohesions
