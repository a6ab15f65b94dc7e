"""`worx discover`: the discover stage (one instance), with crash-safe snapshots.

Delivery: the stage's whole state and the input offsets it covers are written to one
JSON file (atomically: temp, fsync, rename) *before* a batch's outputs are produced,
together with those outputs (the outbox). After a crash the process restores the file,
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

import argparse
import json
import logging
import threading
import time
from pathlib import Path
from queue import Empty, Queue
from typing import TYPE_CHECKING, Any

from worx.stage import Emit

if TYPE_CHECKING:
    from topology.expert_registrations import ExpertRegistrations

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    from topology.commands.route import add_kafka_arguments

    parser = subparsers.add_parser(
        "discover",
        help="run the discover stage: worx.routed -> new domains, drift events, train jobs",
        description="Read every routing decision on <prefix>.routed (one instance reads all "
        "partitions), cluster the novel documents online, promote new domains to "
        "<prefix>.domains, report drift on <prefix>.drift and issue training jobs on "
        "<prefix>.train. State is snapshotted with its input offsets to --snapshot (JSON) "
        "before any output leaves, so a restart after a crash resumes with nothing lost "
        "and no job issued twice. Runs until Ctrl-C or SIGTERM (or --idle-timeout).",
    )
    add_kafka_arguments(parser)
    parser.add_argument(
        "--snapshot",
        type=Path,
        default=None,
        help="state file (default: <data_dir>/discover/state.json)",
    )
    parser.set_defaults(func=run)


class DiscoverRunner:
    """Feed ``<prefix>.routed`` to a :class:`DiscoverStage` with outbox snapshots."""

    def __init__(
        self,
        stage,
        conf: dict,
        topics,
        snapshot_path: Path,
        batch_size: int = 200,
        snapshot_every_s: float = 5.0,
    ) -> None:
        from topology.kafka import DeliveryTracker, make_producer

        self.stage = stage
        self.conf = conf
        self.topics = topics
        self.path = Path(snapshot_path)
        self.sent_path = self.path.with_name(self.path.name + ".sent")
        self.batch_size = batch_size
        self.snapshot_every_s = snapshot_every_s
        self.producer = make_producer(conf)
        self.tracker = DeliveryTracker()
        self.outbox_id = 0
        self.processed = 0
        self.external: Queue = Queue()  # domain rows written by others (expert ids)
        self.registrations: ExpertRegistrations | None = None  # follows worx.experts

    # ---------------------------------------------------------------- state file
    def _write(self, outbox: list[dict[str, Any]]) -> None:
        from worx.atomic import atomic_write_bytes

        self.outbox_id += 1
        body = {"state": self.stage.snapshot(), "outbox": outbox, "outbox_id": self.outbox_id}
        atomic_write_bytes(self.path, json.dumps(body, separators=(",", ":")).encode())

    def _mark_sent(self) -> None:
        from worx.atomic import atomic_write_json

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
        from confluent_kafka import KafkaException

        from topology.kafka import produce

        for item in outbox:
            produce(
                self.producer,
                self.topics.name(item["topic"]),
                item["value"].encode(),
                item["key"],
                self.tracker,
            )
        remaining = self.producer.flush(30)
        if remaining:
            raise KafkaException(f"{remaining} outputs not delivered within 30 s")
        self.tracker.check()

    # ---------------------------------------------------------------- loop
    def run(self, stop: threading.Event | None = None, idle_timeout_s: float | None = None) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        from topology.domain_follower import DomainFollower
        from topology.expert_registrations import ExpertRegistrations
        from topology.kafka import carries_record, make_consumer, to_message
        from topology.runner import apply_stage

        stop = stop or threading.Event()
        self.recover()
        follower = DomainFollower(self.conf, self.topics.domains, self.external.put).start()
        self.registrations = ExpertRegistrations(self.conf, self.topics.experts).start()
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
            follower.stop()
            self.registrations.stop()
            consumer.close()
            self.producer.flush(30)

    def _apply_external(self) -> list[dict[str, Any]]:
        """Apply rows and registrations from the followers; the domain rows to re-emit."""
        while True:
            try:
                self.stage.apply_domain(self.external.get_nowait())
            except Empty:
                break
        return [_outbox_item(e) for e in self.registrations.apply(self.stage)]


def _outbox_item(emit: Emit) -> dict[str, Any]:
    return {"topic": emit.topic, "key": emit.key, "value": emit.record.to_json().decode()}


def run(args: argparse.Namespace) -> int:
    from router.discover import DiscoverStage
    from topology.commands.ingest import stop_on_sigterm
    from topology.commands.route import servers_of
    from topology.config import load_config
    from topology.kafka import client_conf
    from topology.topics import Topics, ensure_configured_topics

    config = load_config(args.config)
    conf = client_conf(config.kafka, servers_of(config, args))
    prefix = config.kafka.topic_prefix
    ensure_configured_topics(conf, config.kafka)
    snapshot = args.snapshot or Path(config.data_dir) / "discover" / "state.json"
    runner = DiscoverRunner(
        DiscoverStage(config.router),
        conf,
        Topics(prefix),
        snapshot,
        batch_size=args.batch_size,
        snapshot_every_s=config.router.snapshot_every_s,
    )
    stop_on_sigterm()
    try:
        runner.run(idle_timeout_s=args.idle_timeout)
    except KeyboardInterrupt:
        pass
    log.info("discover done: %d decisions, %d domains", runner.stage.seen, len(runner.stage.table))
    return 0
