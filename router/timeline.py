"""When documents entered the system, independent of the order discover consumes them.

Discover reads every partition of ``worx.routed``; batches of the partitions interleave,
and route workers lag differently, so the order it consumes decisions in is not the order
the documents entered. Rules about arrival (did a core come as a burst?) are therefore
measured on each document's *entry key*: ``(created_ms, offset)``, the source document's
timestamp (``Doc.created_ms``, carried in ``RoutedDoc.doc_created_ms``) with its
``worx.docs`` offset to break ties (exact order within one partition). Lengths of the
stream are counted in documents, not milliseconds: :meth:`Timeline.between` is how many
decisions entered between two keys, so a share of the stream means the same at any ingest
rate.

Example
-------
>>> line = Timeline(horizon=100)
>>> for key in [(5, 0), (1, 0), (3, 0), (2, 0), (4, 0)]:  # consumed out of order
...     line.add(key)
>>> line.between((2, 0), (4, 0))
3
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any

Key = tuple[int, int]  # (created_ms, offset in worx.docs)


class Timeline:
    """Entry keys of the last ``horizon`` decisions consumed, kept sorted.

    Bounded by consumption (not by key), so a lagging partition's documents still count
    when they are finally consumed.
    """

    def __init__(self, horizon: int) -> None:
        if horizon < 1:
            raise ValueError("timeline horizon must be >= 1")
        self.horizon = horizon
        self._sorted: list[Key] = []
        self._consumed: deque[Key] = deque()

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, key: Key) -> None:
        bisect.insort(self._sorted, key)
        self._consumed.append(key)
        if len(self._consumed) > self.horizon:
            old = self._consumed.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def between(self, low: Key, high: Key) -> int:
        """Decisions whose key lies in ``[low, high]`` (inclusive)."""
        return bisect.bisect_right(self._sorted, high) - bisect.bisect_left(self._sorted, low)

    def snapshot(self) -> dict[str, Any]:
        return {"consumed": [list(k) for k in self._consumed]}  # consumption order

    def restore(self, state: dict[str, Any]) -> None:
        self._consumed = deque(entry_key(k) for k in state["consumed"])
        self._sorted = sorted(self._consumed)


def entry_key(value: Any) -> Key:
    """A key from its JSON form ``[created_ms, offset]``."""
    created_ms, offset = value
    return int(created_ms), int(offset)


def window(keys: list[Key], low_q: float, high_q: float) -> tuple[Key, Key]:
    """The keys at quantiles ``low_q`` and ``high_q`` of ``keys`` (nearest rank)."""
    ordered = sorted(keys)
    last = len(ordered) - 1
    return ordered[round(low_q * last)], ordered[round(high_q * last)]
