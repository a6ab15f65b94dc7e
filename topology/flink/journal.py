"""The discover stage's state for Flink managed state: its JSON snapshot plus a journal.

PyFlink's Python functions get no hook when a checkpoint is taken, and the stage's whole
snapshot is too large to write on every record. So the Flink function keeps two pieces of
keyed state: the last snapshot (a JSON string, the stage's own format) and the journal of
every input applied since (one JSON string each, appended per record: cheap). Every
``compact_every`` inputs the snapshot is rewritten and the journal cleared. Whatever
checkpoint Flink takes, snapshot + journal is the state after exactly the inputs before
its barrier; a restore replays the journal into the restored stage (its outputs left
before the checkpoint, so the replay's are dropped) and Flink re-delivers the rest.

The inputs, one per journal entry (``{"kind": ..., ...}``):

- ``routed``: a RoutedDoc from the route operator (its JSON and the time it was routed);
- ``domain``: a row of ``worx.domains`` (ours come back too, others add expert ids);
- ``expert``: a registration from ``worx.experts`` (waits until its domain row is known).

Example
-------
>>> from router.discover import DiscoverStage
>>> journal = DiscoverJournal(DiscoverStage(), "worx", compact_every=2)
>>> journal.restore(None, [])
>>> journal.apply({"kind": "domain", "value": None})  # a tombstone changes nothing
[]
>>> journal.due
False
"""

from __future__ import annotations

import json
import logging
from typing import Any

from experts.records import ExpertRegistration
from router.discover import DiscoverStage
from router.records import DomainRecord
from topology.runtimes.discover_runner import apply_domain_row
from topology.runtimes.stage_runner import apply_stage, reject
from worx.records import RecordError
from worx.stage import Emit, Message

log = logging.getLogger(__name__)

FORMAT = 1
MAX_WAITING = (
    10_000  # registrations waiting for their domain row (as topology.runtimes.expert_registrations)
)


class DiscoverJournal:
    """Apply inputs to ``stage``; say when a new snapshot is due (see the module doc)."""

    def __init__(self, stage: DiscoverStage, topic_prefix: str, compact_every: int = 500) -> None:
        self.stage = stage
        self.prefix = topic_prefix
        self.compact_every = compact_every
        self.pending = 0  # journal entries since the last snapshot
        self.waiting: dict[str, dict[str, Any]] = {}  # expert id -> registration (JSON body)

    # ------------------------------------------------------------------ state
    def snapshot(self) -> str:
        """The state as one JSON string (the stage's snapshot and the waiting registrations)."""
        self.pending = 0
        body = {"format": FORMAT, "stage": self.stage.snapshot(), "waiting": self.waiting}
        return json.dumps(body, separators=(",", ":"))

    def restore(self, snapshot: str | None, journal: list[str]) -> None:
        """Restore ``snapshot`` (None: start empty) and replay ``journal`` (its outputs are
        dropped: they left before the checkpoint that holds this state)."""
        if snapshot is not None:
            body = json.loads(snapshot)
            if body.get("format") != FORMAT:
                raise ValueError(
                    f"Flink discover state format {body.get('format')!r} is not {FORMAT}; "
                    "start the job without restoring (a new checkpoint directory)"
                )
            self.stage.restore(body["stage"])
            self.waiting = dict(body["waiting"])
        for entry in journal:
            self.apply(json.loads(entry))
        self.pending = len(journal)
        log.info(
            "flink discover: restored %d decisions, %d domains, replayed %d journal entries",
            self.stage.seen,
            len(self.stage.table),
            len(journal),
        )

    @property
    def due(self) -> bool:
        return self.pending >= self.compact_every

    # ------------------------------------------------------------------ inputs
    @staticmethod
    def entry(kind: str, value: bytes | None, time_ms: int = 0) -> dict[str, Any]:
        """The journal entry of one input (JSON-able; ``value`` is UTF-8 JSON or None)."""
        text = None if value is None else value.decode("utf-8", "replace")
        return {"kind": kind, "value": text, "time_ms": int(time_ms)}

    def apply(self, entry: dict[str, Any]) -> list[Emit]:
        """Apply one journal entry; the outputs to send."""
        self.pending += 1
        kind, value = entry["kind"], entry["value"]
        if value is None:  # a tombstone of a table topic: discover keeps its history
            return []
        raw = value.encode()
        if kind == "routed":
            message = Message(raw, topic=f"{self.prefix}.routed", timestamp_ms=entry["time_ms"])
            return apply_stage(self.stage, message, "discover")
        if kind == "domain":
            message = Message(raw, topic=f"{self.prefix}.domains")
            try:
                row = DomainRecord.from_json(raw, strict=False)
            except RecordError as exc:
                return reject(message, exc.reason, str(exc), "discover")
            return apply_domain_row(self.stage, row, message) + self.retry_waiting()
        if kind == "expert":
            return self._register(raw)
        raise ValueError(f"unknown journal entry kind {kind!r}")

    def _register(self, raw: bytes) -> list[Emit]:
        message = Message(raw, topic=f"{self.prefix}.experts")
        try:
            registration = ExpertRegistration.from_json(raw, strict=False)
        except RecordError as exc:
            return reject(message, exc.reason, str(exc), "discover")
        self.waiting[registration.expert_id] = json.loads(raw)
        emits: list[Emit] = []
        while len(self.waiting) > MAX_WAITING:
            old_id = next(iter(self.waiting))
            old = self.waiting.pop(old_id)
            detail = f"expert {old_id}: its domain {old.get('domain_id')} did not arrive"
            emits += reject(message, "unknown_domain", detail, "discover")
        return emits + self.retry_waiting()

    def retry_waiting(self) -> list[Emit]:
        """Registrations whose domain arrived since: the rows to emit."""
        if not self.waiting:
            return []
        emits: list[Emit] = []
        for expert_id, body in list(self.waiting.items()):
            try:
                emits.extend(self.stage.add_expert(body["domain_id"], expert_id))
            except KeyError:
                continue
            except (RecordError, ValueError) as exc:
                reason = exc.reason if isinstance(exc, RecordError) else "table_refused"
                detail = f"{type(exc).__name__}: {exc}"
                message = Message(json.dumps(body).encode(), topic=f"{self.prefix}.experts")
                emits += reject(message, reason, detail, "discover")
            del self.waiting[expert_id]
        return emits
