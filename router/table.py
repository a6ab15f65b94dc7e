"""The domain table: the latest :class:`DomainRecord` per ``domain_id``, and routing by it.

Every route worker, the discover stage and the inference gate hold one, fed from the
compacted ``worx.domains`` topic. Applying a record is idempotent and order-tolerant per
domain (a row only replaces one with a lower ``version``), so replays and duplicates
cannot move the table backwards. Routing is a pure function of the table and the
vector, so two workers at the same :attr:`version` make the same decision.

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

log = logging.getLogger(__name__)


class DomainTable:
    def __init__(self) -> None:
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
        """Accept ``row`` if it is newer than what the table holds; returns whether it was."""
        with self._changed:
            old = self._rows.get(row.domain_id)
            if old is not None and old.version >= row.version:
                return False
            if self._index[1].size and len(row.centroid) != self._index[1].shape[1]:
                raise ValueError(
                    f"domain {row.domain_id}: centroid has {len(row.centroid)} dimensions, the "
                    f"table {self._index[1].shape[1]}; all domains must use one embedder"
                )
            self._rows[row.domain_id] = row
            self._rebuild()
            self._changed.notify_all()
            return True

    def _rebuild(self) -> None:
        active = sorted(
            (r for r in self._rows.values() if r.status == "active"), key=lambda r: r.domain_id
        )
        ids = [r.domain_id for r in active]
        if active:
            centroids = np.asarray([r.centroid for r in active], dtype=np.float32)  # (K, dim)
            thresholds = np.asarray([r.threshold for r in active], dtype=np.float32)  # (K,)
            cores = np.asarray([r.core_threshold for r in active], dtype=np.float32)  # (K,)
            cohesions = np.asarray([r.cohesion for r in active], dtype=np.float32)  # (K,)
        else:
            centroids = np.zeros((0, 0), np.float32)
            thresholds = cores = cohesions = np.zeros(0, np.float32)
        version = sum(row.version for row in self._rows.values())
        self._index = (ids, centroids, thresholds, cores, version, cohesions)

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
