"""In-process wiring of route + discover for tests (the table fed as worx.domains would)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest.records import Doc
from ingest.scenario import LabelledDoc
from router.config import RouterConfig
from router.discover import DiscoverStage
from router.records import DomainRecord, DriftEvent, TrainJob
from router.route import RouteStage
from worx.stage import Emit, Message


@dataclass
class Loop:
    config: RouterConfig
    route: RouteStage = field(init=False)
    discover: DiscoverStage = field(init=False)
    follow: bool = True  # False: route never learns a domain (all decisions novel)
    emits: list[tuple[int, Emit]] = field(default_factory=list)
    seq: int = 0

    def __post_init__(self) -> None:
        self.route = RouteStage(self.config)
        self.discover = DiscoverStage(self.config, embedder=self.route.embedder)

    def feed(self, doc: LabelledDoc) -> None:
        msg = Message(b"", topic="t.docs", partition=0, offset=self.seq, timestamp_ms=self.seq)
        [routed] = self.route.process(msg, Doc(doc_id=doc.doc_id, text=doc.text, label=doc.domain))
        rmsg = Message(b"", topic="t.routed", partition=0, offset=self.seq, timestamp_ms=self.seq)
        for emit in self.discover.process(rmsg, routed.record):
            if isinstance(emit.record, DomainRecord) and self.follow:
                self.route.table.apply(emit.record)
            self.emits.append((self.seq, emit))
        self.seq += 1

    def records(self, kind: type) -> list:
        return [e.record for _, e in self.emits if isinstance(e.record, kind)]

    def jobs(self) -> list[TrainJob]:
        return self.records(TrainJob)

    def events(self) -> list[DriftEvent]:
        return self.records(DriftEvent)
