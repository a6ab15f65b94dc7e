"""Expert registrations (``worx.experts``) applied to the discover stage's domain rows.

Both discover runtimes (``worx discover`` and the Faust agent) use this: a follower thread
reads every registration from the beginning, and :meth:`ExpertRegistrations.apply`, called
from the stage's own loop, adds each expert to its domain's row and returns the rows to
emit. A registration whose domain row the stage does not know yet waits for it.
"""

from __future__ import annotations

from queue import Empty, Queue

from experts.records import ExpertRegistration
from router.discover import DiscoverStage
from topology.table_follower import TableFollower
from worx.stage import Emit


class ExpertRegistrations:
    """Follow ``topic`` (``<prefix>.experts``) for a :class:`DiscoverStage`."""

    def __init__(self, conf: dict, topic: str) -> None:
        self.arrived: Queue[ExpertRegistration] = Queue()  # filled by the follower thread
        self.waiting: dict[str, ExpertRegistration] = {}  # by expert id: row not here yet
        self.follower = TableFollower(conf, topic, self.arrived.put, ExpertRegistration)

    def start(self) -> ExpertRegistrations:
        self.follower.start()
        return self

    def stop(self) -> None:
        self.follower.stop()

    def apply(self, stage: DiscoverStage) -> list[Emit]:
        """Add the registrations that arrived to ``stage``; the domain rows to emit."""
        while True:
            try:
                registration = self.arrived.get_nowait()
            except Empty:
                break
            self.waiting[registration.expert_id] = registration
        emits: list[Emit] = []
        for registration in list(self.waiting.values()):
            try:
                emits.extend(stage.add_expert(registration.domain_id, registration.expert_id))
            except KeyError:
                continue  # its domain row has not arrived yet: it waits
            del self.waiting[registration.expert_id]
        return emits
