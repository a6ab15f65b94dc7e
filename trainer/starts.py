"""Which stored experts a new domain's expert may start from (DEMix starts).

With a handful of experts every one is a candidate; in a library of fifty, the newest few
are an arbitrary handful of kinds, and the expert that fits a new domain best is its
nearest neighbour's (C for C++, Spanish for Portuguese), which may be old. So the
candidates are the experts of the domains nearest the job's own: by the cosine of their
domains' centroids (each manifest keeps its domain's centroid at registration) to the
job's, one expert per domain (its newest: a drifted domain's latest version is the one
that serves it). An expert whose centroid is of another embedder's space (another
dimension) cannot be compared: it comes after every comparable one, newest first.

Example
-------
>>> from types import SimpleNamespace as M
>>> store = [M(expert_id="a", domain_id="d1", centroid=[1.0, 0.0], created_ms=1),
...          M(expert_id="b", domain_id="d2", centroid=[0.0, 1.0], created_ms=2),
...          M(expert_id="c", domain_id="d1", centroid=[1.0, 0.0], created_ms=3)]
>>> [m.expert_id for m in nearest_starts(store, [0.9, 0.1], limit=2)]
['c', 'b']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np


class _Stored(Protocol):
    expert_id: str
    domain_id: str
    centroid: list[float]
    created_ms: int


def nearest_starts(manifests: Iterable[_Stored], centroid: Sequence[float], limit: int) -> list:
    """The newest expert of each of the ``limit`` domains nearest ``centroid``, nearest
    first (ties: the newer first)."""
    if limit <= 0:
        return []
    newest: dict[str, _Stored] = {}
    for manifest in sorted(manifests, key=lambda m: (m.created_ms, m.expert_id)):
        newest[manifest.domain_id] = manifest  # the later one replaces the earlier
    target = np.asarray(centroid, dtype=np.float64)  # (dim,)
    norm = float(np.linalg.norm(target))

    def nearness(manifest: _Stored) -> float:
        own = np.asarray(manifest.centroid, dtype=np.float64)  # (dim',)
        if own.shape != target.shape or norm == 0.0:
            return -np.inf
        return float(own @ target) / max(norm * float(np.linalg.norm(own)), 1e-12)

    ranked = sorted(newest.values(), key=lambda m: (-nearness(m), -m.created_ms, m.expert_id))
    return ranked[:limit]
