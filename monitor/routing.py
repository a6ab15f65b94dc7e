"""Route held-out documents exactly as the server does: the embedder, then the gate."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from router.gate import CentroidIndex, Gate


class GateRouter:
    """``route(texts, centroids) -> [{expert_id: weight}]`` with the serving gate's rule.

    Parameters
    ----------
    embedder
        Anything with ``embed(texts) -> (N, dim)`` L2-normalised float32 (the router's
        default embedder in production).
    gate
        The serving :class:`router.gate.Gate` (same ``top_k``, temperature and threshold).
    cache_size
        Embeddings kept by text hash (held-out documents are embedded once, not per step).
    """

    def __init__(self, embedder: Any, gate: Gate, cache_size: int = 10_000) -> None:
        self.embedder = embedder
        self.gate = gate
        self.cache_size = cache_size
        self._cache: dict[str, np.ndarray] = {}

    def _embed(self, texts: list[str]) -> np.ndarray:
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        todo = [i for i, k in enumerate(keys) if k not in self._cache]
        if todo:
            fresh = self.embedder.embed([texts[i] for i in todo])  # (len(todo), dim)
            if len(self._cache) + len(todo) > self.cache_size:
                self._cache.clear()
            for i, vec in zip(todo, fresh, strict=True):
                self._cache[keys[i]] = vec
        return np.stack([self._cache[k] for k in keys])  # (N, dim)

    def route(
        self, texts: list[str], centroids: Mapping[str, list[float]]
    ) -> list[dict[str, float]]:
        if not texts:
            return []
        if not centroids:
            return [{} for _ in texts]
        return self.gate.route_many(self._embed(texts), CentroidIndex.from_mapping(centroids))
