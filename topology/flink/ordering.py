"""Discover's input in one order whatever the job's parallelism: a merge of the partitions.

At parallelism N the route instances each read some partitions of ``worx.docs`` and hand
their decisions to the one discover instance as they finish them, so the order discover
sees depends on how fast each instance ran, and clustering is order-dependent (a core is
promoted when it is in the buffer, a job takes the documents gathered by then). This
merge takes the decisions of each partition (a *lane*: FIFO through the job, offsets
rising) and releases them as a k-way merge by ``(doc_created_ms, partition, offset)``:
the lowest head goes first, and only while every lane has a head, so the order depends
on the documents, not on the parallelism or on which instance was faster.

A lane that stays empty for ``idle_ms`` (a partition with no new documents: the end of a
burst, an unused partition) stops being waited for until it delivers again, and more than
``max_held`` held decisions release the lowest head anyway (one lagging partition must not
hold the others' memory without bound). Either can reorder only documents that arrived
``idle_ms`` apart. A decision at or below its lane's last released offset, or below one
held, is a replay (Flink re-delivers what followed the restored checkpoint): it is
dropped, so discover applies each document once.

Example
-------
>>> merge = LaneMerge(["t:0", "t:1"], idle_ms=1_000, now_ms=0)
>>> merge.add(Held("t:0", 0, (5, 0, 0), {"n": "a"}), now_ms=10)
True
>>> merge.ready(now_ms=10)  # t:1 may still bring an earlier document
[]
>>> merge.add(Held("t:1", 0, (3, 1, 0), {"n": "b"}), now_ms=20)
True
>>> [h.entry["n"] for h in merge.ready(now_ms=20)]  # t:1 is empty again: waits
['b']
>>> [h.entry["n"] for h in merge.ready(now_ms=2_000)]  # t:1 idle for 1 s: not waited for
['a']
>>> merge.add(Held("t:0", 0, (5, 0, 0), {"n": "a"}), now_ms=2_000)  # a replay
False
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Iterable
from typing import Any

Key = tuple[int, int, int]  # (doc_created_ms, docs partition, docs offset)


@dataclasses.dataclass
class Held:
    lane: str  # "<docs topic>:<partition>"
    offset: int  # in worx.docs
    key: Key
    entry: dict[str, Any]  # the discover journal entry (topology.flink.journal)

    @classmethod
    def of(cls, entry: dict[str, Any]) -> Held | None:
        """The held form of a ``routed`` journal entry; None when its RoutedDoc does not
        say where it came from (discover takes it at once and dead-letters what is bad)."""
        try:
            body = json.loads(entry["value"])
            partition, offset = int(body["docs_partition"]), int(body["docs_offset"])
            created = int(body.get("doc_created_ms") or 0)
            lane = f"{body['docs_topic']}:{partition}"
        except (TypeError, ValueError, KeyError):
            return None
        return cls(lane, offset, (created, partition, offset), entry)

    def to_json(self) -> str:
        return json.dumps(
            {"lane": self.lane, "offset": self.offset, "key": self.key, "entry": self.entry},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> Held:
        body = json.loads(text)
        created, partition, offset = body["key"]
        return cls(body["lane"], int(body["offset"]), (created, partition, offset), body["entry"])


class LaneMerge:
    """Hold decisions per lane and release them in merge order (see the module doc)."""

    def __init__(
        self, lanes: Iterable[str], idle_ms: int, now_ms: int, max_held: int = 20_000
    ) -> None:
        if idle_ms < 0 or max_held < 1:
            raise ValueError("idle_ms must be >= 0 and max_held >= 1")
        self.idle_ms = idle_ms
        self.max_held = max_held
        self.queues: dict[str, deque[Held]] = {lane: deque() for lane in lanes}
        self.last_seen: dict[str, int] = dict.fromkeys(self.queues, now_ms)
        self.released: dict[str, int] = {}  # lane -> offset of its last released decision
        self.held = 0

    def add(self, held: Held, now_ms: int) -> bool:
        """Hold one decision; False (and not held) when it is a replay."""
        queue = self.queues.setdefault(held.lane, deque())
        self.last_seen[held.lane] = now_ms
        if held.offset <= self.released.get(held.lane, -1):
            return False
        if queue and held.offset <= queue[-1].offset:
            return False
        queue.append(held)
        self.held += 1
        return True

    def ready(self, now_ms: int) -> list[Held]:
        """The decisions that can go now, in merge order (removed from the merge)."""
        out: list[Held] = []
        while self.held:
            if self.held <= self.max_held and self._waiting_for_a_lane(now_ms):
                break
            out.append(self._pop_lowest())
        return out

    def holding(self) -> list[Held]:
        return [held for queue in self.queues.values() for held in queue]

    def restore(self, held: Iterable[Held], released: dict[str, int], now_ms: int) -> None:
        """Refill from checkpointed state (``held`` in any order)."""
        self.released = dict(released)
        for item in sorted(held, key=lambda h: (h.lane, h.offset)):
            self.queues.setdefault(item.lane, deque()).append(item)
            self.held += 1
        self.last_seen = dict.fromkeys(self.queues, now_ms)

    def _waiting_for_a_lane(self, now_ms: int) -> bool:
        return any(
            not queue and now_ms - self.last_seen[lane] < self.idle_ms
            for lane, queue in self.queues.items()
        )

    def _pop_lowest(self) -> Held:
        lane = min((q[0].key, lane) for lane, q in self.queues.items() if q)[1]
        item = self.queues[lane].popleft()
        self.released[lane] = item.offset
        self.held -= 1
        return item
