"""The expert store's LRU cache of loaded experts, bounded in bytes (the most recently used
expert is always kept, even if alone it is larger)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from experts.expert import Expert


class ExpertCache:
    """Loaded experts by id, least recently used first, with hit and load counts."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = int(budget_bytes)
        self._cache: OrderedDict[str, tuple[Expert, int]] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()
        self.loads = 0  # verified loads (cache misses)
        self.hits = 0

    def get(self, expert_id: str) -> Expert | None:
        """The cached expert (now the most recently used), or None."""
        with self._lock:
            cached = self._cache.get(expert_id)
            if cached is None:
                return None
            self._cache.move_to_end(expert_id)
            self.hits += 1
            return cached[0]

    def add(self, expert_id: str, expert: Expert, nbytes: int) -> Expert:
        """Keep ``expert`` (unless another thread loaded it first: that one is kept and
        returned), then evict the least recently used beyond the budget."""
        with self._lock:
            if expert_id not in self._cache:
                self._cache[expert_id] = (expert, nbytes)
                self._cached_bytes += nbytes
                self.loads += 1
            self._cache.move_to_end(expert_id)
            while self._cached_bytes > self.budget_bytes and len(self._cache) > 1:
                _, (_, evicted) = self._cache.popitem(last=False)
                self._cached_bytes -= evicted
            return self._cache[expert_id][0]

    def evict(self, expert_id: str) -> None:
        with self._lock:
            cached = self._cache.pop(expert_id, None)
            if cached is not None:
                self._cached_bytes -= cached[1]

    def ids(self) -> list[str]:
        """Ids held, least recently used first."""
        with self._lock:
            return list(self._cache)

    def info(self) -> dict[str, int]:
        with self._lock:
            return {
                "cached_experts": len(self._cache),
                "cached_bytes": self._cached_bytes,
                "budget_bytes": self.budget_bytes,
                "loads": self.loads,
                "hits": self.hits,
            }
