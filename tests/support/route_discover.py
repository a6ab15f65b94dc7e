"""In-process wiring of route + discover for tests (the table fed as worx.domains would)."""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

from ingest.records import Doc
from router.config import RouterConfig
from router.discover import DiscoverStage
from router.records import DomainRecord, DriftEvent, RoutedDoc, TrainJob
from router.route import RouteStage
from worx.scenario import LabelledDoc
from worx.stage import Emit, Message


@dataclass
class Loop:
    config: RouterConfig
    route: RouteStage = field(init=False)
    discover: DiscoverStage = field(init=False)
    follow: bool = True  # False: route never learns a domain (all decisions novel)
    # > 0: worx.routed has two partitions (by doc id) and discover reads the second this
    # many documents behind the first (its route worker lags), as `worx discover` may
    lag: int = 0
    emits: list[tuple[int, Emit]] = field(default_factory=list)
    seq: int = 0
    lagging: deque = field(default_factory=deque)  # (due seq, routed doc) of partition 1

    def __post_init__(self) -> None:
        self.route = RouteStage(self.config)
        self.discover = DiscoverStage(self.config, embedder=self.route.embedder)

    def feed(self, doc: LabelledDoc) -> None:
        msg = Message(b"", topic="t.docs", partition=0, offset=self.seq, timestamp_ms=self.seq)
        entered = Doc(doc_id=doc.doc_id, text=doc.text, label=doc.domain, created_ms=self.seq + 1)
        [routed] = self.route.process(msg, entered)
        if self.lag and zlib.crc32(doc.doc_id.encode()) % 2:
            self.lagging.append((self.seq + self.lag, routed.record))
        else:
            self._discover(routed.record)
        self.seq += 1
        while self.lagging and self.lagging[0][0] <= self.seq:
            self._discover(self.lagging.popleft()[1])

    def flush(self) -> None:
        """Deliver the decisions of the lagging partition not yet delivered."""
        while self.lagging:
            self._discover(self.lagging.popleft()[1])

    def _discover(self, record: RoutedDoc) -> None:
        rmsg = Message(b"", topic="t.routed", partition=0, offset=self.seq, timestamp_ms=self.seq)
        for emit in self.discover.process(rmsg, record):
            if isinstance(emit.record, DomainRecord) and self.follow:
                self.route.table.apply(emit.record)
            self.emits.append((self.seq, emit))

    def records(self, kind: type) -> list:
        return [e.record for _, e in self.emits if isinstance(e.record, kind)]

    def jobs(self) -> list[TrainJob]:
        return self.records(TrainJob)

    def events(self) -> list[DriftEvent]:
        return self.records(DriftEvent)
