"""Which decisions discover already applied: a route worker's replays are skipped.

Route runs at least once: a worker that crashes (or loses its partitions while paused)
between producing a batch's decisions and committing the batch routes the batch again,
so ``worx.routed`` holds a second decision for each of its documents. Discover must apply
each document once, or a replayed batch counts twice in the novelty rate, the drift
detectors and the clustering schedule (a 30-minute chaos run fed discover 10,736
decisions for 7,261 documents). A replay comes within a batch or so of the first
decision, so the ids of the last ``capacity`` decisions are enough: kept as 64-bit hashes
(a collision in a window of 10,000 has odds of about 1 in 10^11).

Example
-------
>>> seen = DecidedIds(capacity=2)
>>> [seen.replayed(d) for d in ("a", "b", "a", "c", "a")]
[False, False, True, False, False]
"""

from __future__ import annotations

import base64
import hashlib
from collections import deque
from typing import Any

import numpy as np


def _key(doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "little")


class DecidedIds:
    """The doc ids of the last ``capacity`` decisions applied (0: remember none)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._order: deque[int] = deque()
        self._keys: set[int] = set()

    def replayed(self, doc_id: str) -> bool:
        """Was a decision for ``doc_id`` applied within the window? If not, remember it."""
        if self.capacity <= 0:
            return False
        key = _key(doc_id)
        if key in self._keys:
            return True
        self._order.append(key)
        self._keys.add(key)
        if len(self._order) > self.capacity:
            self._keys.discard(self._order.popleft())
        return False

    def snapshot(self) -> dict[str, Any]:
        keys = np.fromiter(self._order, dtype="<u8", count=len(self._order))
        return {"u64le_b64": base64.b64encode(keys.tobytes()).decode("ascii")}

    def restore(self, state: dict[str, Any]) -> None:
        keys = np.frombuffer(base64.b64decode(state["u64le_b64"]), dtype="<u8").tolist()
        keys = keys[max(0, len(keys) - self.capacity) :]  # a smaller window keeps the latest
        self._order = deque(keys)
        self._keys = set(keys)
