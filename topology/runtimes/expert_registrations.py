"""Expert registrations (``worx.experts``) applied to the discover stage's domain rows.

Both discover runtimes (``worx discover`` and the Faust agent) use this: a follower thread
reads every registration from the beginning, and :meth:`ExpertRegistrations.apply`, called
from the stage's own loop, adds each expert to its domain's row and returns the rows to
emit. A registration whose domain row the stage does not know yet waits for it; at most
``max_waiting`` wait (the oldest is dead-lettered ``unknown_domain`` to make room), and
one the stage refuses is dead-lettered with the reason. Those dead letters are among the
emits :meth:`~ExpertRegistrations.apply` returns, so they leave with the stage's outputs.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from queue import Empty, Queue

from experts.records import ExpertRegistration
from router.discover import DiscoverStage
from topology.runtimes.stage_runner import reject
from topology.runtimes.table_follower import TableFollower
from worx.records import RecordError
from worx.stage import Emit, Message

log = logging.getLogger(__name__)

MAX_WAITING = 10_000  # registrations waiting for their domain row
MAX_KNOWN = 100_000  # expert ids remembered to tell a tombstone of a known expert


class ExpertRegistrations:
    """Follow ``topic`` (``<prefix>.experts``) for a :class:`DiscoverStage`."""

    def __init__(self, conf: dict, topic: str, max_waiting: int = MAX_WAITING) -> None:
        self.max_waiting = max_waiting
        # filled by the follower thread: each registration with the event it came in
        self.arrived: Queue[tuple[ExpertRegistration, Message]] = Queue()
        self.waiting: OrderedDict[str, tuple[ExpertRegistration, Message]] = OrderedDict()
        # expert id -> (domain id, sha256) of its registration (follower thread only)
        self.known: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self.follower = TableFollower(
            conf,
            topic,
            self._arrive,
            ExpertRegistration,
            on_tombstone=self._tombstone,
            name="discover-experts",
        )

    def start(self) -> ExpertRegistrations:
        self.follower.start()
        return self

    def stop(self) -> None:
        self.follower.stop()

    def healthy(self) -> bool:
        return self.follower.healthy()

    def describe(self) -> str:
        return self.follower.describe()

    def _arrive(self, registration: ExpertRegistration) -> None:
        seen = (registration.domain_id, registration.sha256)
        held = self.known.get(registration.expert_id)
        if held is not None and held != seen:
            raise RecordError(
                f"expert {registration.expert_id} registered again with another domain or "
                f"sha256 ({held[0]}, {held[1][:12]} then {seen[0]}, {seen[1][:12]})",
                reason="conflicting_duplicate",
            )
        self.known[registration.expert_id] = seen
        self.known.move_to_end(registration.expert_id)
        while len(self.known) > MAX_KNOWN:
            self.known.popitem(last=False)
        self.arrived.put((registration, self.follower.current))

    def _tombstone(self, key: bytes | None) -> bool:
        # discover keeps a removed expert in its domain's history: nothing to undo
        return (key or b"").decode("utf-8", "replace") in self.known

    def apply(self, stage: DiscoverStage) -> list[Emit]:
        """Add the registrations that arrived to ``stage``; the rows (and dead letters) to emit."""
        emits: list[Emit] = []
        while True:
            try:
                registration, message = self.arrived.get_nowait()
            except Empty:
                break
            self.waiting[registration.expert_id] = (registration, message)
            self.waiting.move_to_end(registration.expert_id)
            while len(self.waiting) > self.max_waiting:
                _, (old, old_message) = self.waiting.popitem(last=False)
                detail = (
                    f"expert {old.expert_id}: its domain {old.domain_id} did not arrive while "
                    f"{self.max_waiting} registrations waited"
                )
                emits += reject(old_message, "unknown_domain", detail, "discover")
        for expert_id, (registration, message) in list(self.waiting.items()):
            try:
                emits.extend(stage.add_expert(registration.domain_id, registration.expert_id))
            except KeyError:
                continue  # its domain row has not arrived yet: it waits
            except (RecordError, ValueError) as exc:
                reason = exc.reason if isinstance(exc, RecordError) else "table_refused"
                emits += reject(message, reason, f"{type(exc).__name__}: {exc}", "discover")
            del self.waiting[expert_id]
        return emits
