"""The snapshot-plus-outbox runtime of the discover stage (one instance, every partition).

Delivery: the stage's whole state and the input offsets it covers are written to one
JSON file (atomically: temp, fsync, rename) *before* a batch's outputs are produced,
together with those outputs (the outbox). After a crash the runner restores the file,
re-sends an outbox that was not confirmed sent (same keys, same ids: idempotent
downstream) and resumes reading at the saved offsets. A crash before the file is
written loses nothing either: the batch is re-read and re-processed from the previous
snapshot, and none of its outputs had left. So no document is lost and no job is ever
issued twice under two ids.

Experts: the runner also follows ``worx.experts``; a registration adds its expert id to
its domain's row (a new version on ``worx.domains``, through the same outbox), so
``worx domains`` lists a domain's experts and a drift job of that domain branches from
its latest expert (``TrainJob.parent_expert_id``). Registrations are replayed from the
beginning on every start; an expert already in its row changes nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from queue import Empty, Queue
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from router.discover import DiscoverStage
from router.records import DomainRecord
from topology.composition.kafka_clients import (
    carries_record,
    make_consumer,
    make_producer,
    to_message,
)
from topology.composition.topics import Topics
from topology.runtimes.expert_registrations import ExpertRegistrations
from topology.runtimes.publisher import Publisher
from topology.runtimes.stage_runner import apply_stage, check_followers, reject
from topology.runtimes.table_follower import TableFollower, is_conflict
from worx.atomic import atomic_write_bytes, atomic_write_json
from worx.records import RecordError
from worx.stage import Emit, Message

log = logging.getLogger(__name__)


class DiscoverRunner:
    """Feed ``<prefix>.routed`` to a :class:`DiscoverStage` with outbox snapshots."""

    def __init__(
        self,
        stage: DiscoverStage,
        conf: dict,
        topics: Topics,
        snapshot_path: Path,
        batch_size: int = 200,
        snapshot_every_s: float = 5.0,
    ) -> None:
        self.stage = stage
        self.conf = conf
        self.topics = topics
        self.path = Path(snapshot_path)
        self.sent_path = self.path.with_name(self.path.name + ".sent")
        self.batch_size = batch_size
        self.snapshot_every_s = snapshot_every_s
        self.publisher = Publisher(make_producer(conf), topics)
        self.outbox_id = 0
        self.processed = 0
        self.external: Queue = Queue()  # domain rows written by others (expert ids)
        self.registrations: ExpertRegistrations | None = None  # follows worx.experts
        self.follower: TableFollower | None = None  # follows worx.domains

    # ---------------------------------------------------------------- state file
    def _write(self, outbox: list[dict[str, Any]]) -> None:
        self.outbox_id += 1
        body = {"state": self.stage.snapshot(), "outbox": outbox, "outbox_id": self.outbox_id}
        atomic_write_bytes(self.path, json.dumps(body, separators=(",", ":")).encode())

    def _mark_sent(self) -> None:
        atomic_write_json(self.sent_path, {"outbox_id": self.outbox_id})

    def recover(self) -> None:
        """Restore the snapshot (if any) and re-send its outbox if it was not confirmed."""
        if not self.path.exists():
            log.info("discover: no snapshot at %s, starting empty", self.path)
            return
        body = json.loads(self.path.read_text())
        self.stage.restore(body["state"])
        self.outbox_id = int(body["outbox_id"])
        sent = -1
        if self.sent_path.exists():
            sent = int(json.loads(self.sent_path.read_text())["outbox_id"])
        if body["outbox"] and sent != self.outbox_id:
            log.warning(
                "discover: re-sending %d outputs of an unconfirmed batch", len(body["outbox"])
            )
            self._send(body["outbox"])
            self._mark_sent()
        log.info(
            "discover: restored %s (%d decisions seen, %d domains, offsets %s)",
            self.path,
            self.stage.seen,
            len(self.stage.table),
            self.stage.offsets,
        )

    def _send(self, outbox: list[dict[str, Any]]) -> None:
        for item in outbox:
            self.publisher.send_bytes(
                self.topics.name(item["topic"]), item["value"].encode(), item["key"]
            )
        self.publisher.flush()

    # ---------------------------------------------------------------- loop
    def run(self, stop: threading.Event | None = None, idle_timeout_s: float | None = None) -> None:
        stop = stop or threading.Event()
        self.recover()
        self.follower = TableFollower(
            self.conf,
            self.topics.domains,
            lambda row: self.external.put((row, self.follower.current)),
            name="discover-domains",
        )
        self.follower.start()
        self.registrations = ExpertRegistrations(self.conf, self.topics.experts).start()
        followers = [self.follower, self.registrations]
        consumer = make_consumer(
            self.conf, f"{self.topics.prefix}-discover", **{"enable.auto.commit": False}
        )  # offsets live in the snapshot
        routed = self.topics.routed
        info = consumer.list_topics(routed, timeout=10).topics[routed]
        assignment = []
        for partition in sorted(info.partitions):
            offset = self.stage.offsets.get(f"{routed}:{partition}", OFFSET_BEGINNING)
            assignment.append(TopicPartition(routed, partition, offset))
        consumer.assign(assignment)
        log.info(
            "discover: reading %s from %s", routed, {tp.partition: tp.offset for tp in assignment}
        )
        last_data = last_snapshot = time.monotonic()
        try:
            while not stop.is_set():
                check_followers(followers)  # a dead follower: exit, to be restarted
                outbox = self._apply_external()
                batch = consumer.consume(self.batch_size, timeout=0.5)
                handled = 0
                for msg in batch:
                    if not carries_record(msg):
                        continue
                    emits = apply_stage(self.stage, to_message(msg), "discover")
                    if any(e.topic == "dlq" for e in emits):
                        # the stage did not see it: cover its offset all the same
                        key = f"{msg.topic()}:{msg.partition()}"
                        self.stage.offsets[key] = msg.offset() + 1
                    outbox.extend(_outbox_item(e) for e in emits)
                    handled += 1
                now = time.monotonic()
                if handled:
                    last_data = now
                    self.processed += handled
                if outbox or (handled and now - last_snapshot > self.snapshot_every_s):
                    self._write(outbox)  # state + offsets + outputs, before anything leaves
                    last_snapshot = now
                    if outbox:
                        self._send(outbox)
                        self._mark_sent()
                idle = not handled and not outbox
                if idle and idle_timeout_s is not None and now - last_data > idle_timeout_s:
                    break
        finally:
            if self.processed:
                self._write([])
            self.follower.stop()
            self.registrations.stop()
            consumer.close()
            self.publisher.close()

    def _apply_external(self) -> list[dict[str, Any]]:
        """Apply rows and registrations from the followers; the domain rows to re-emit (and
        the dead letters of rows the table refused)."""
        emits: list[Emit] = []
        while True:
            try:
                row, message = self.external.get_nowait()
            except Empty:
                break
            emits += apply_domain_row(self.stage, row, message)
        emits += self.registrations.apply(self.stage)
        return [_outbox_item(e) for e in emits]


def apply_domain_row(stage: DiscoverStage, row: DomainRecord, message: Message) -> list[Emit]:
    """Merge one row of ``worx.domains`` into ``stage``; a refused one is dead-lettered."""
    held = stage.table.get(row.domain_id)
    try:
        stage.apply_domain(row)
    except (RecordError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, RecordError) else "table_refused"
        return reject(message, reason, f"{type(exc).__name__}: {exc}", "discover")
    if is_conflict(held, row) and row.expert_ids == held.expert_ids:
        detail = f"a second, different row for {row.domain_id} at version {row.version}"
        return reject(message, "conflicting_duplicate", detail, "discover")
    return []


def _outbox_item(emit: Emit) -> dict[str, Any]:
    return {"topic": emit.topic, "key": emit.key, "value": emit.record.to_json().decode()}
