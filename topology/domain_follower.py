"""Follow the compacted ``worx.domains`` topic into a domain table, from a thread.

Every route worker (and the discover stage) reads the *whole* table, not a share of it,
so the follower does not join the workers' consumer group: it assigns every partition
of the topic from the beginning and never commits. The same follower reads any other
compacted table topic given its record type (``worx discover`` follows ``worx.experts``
with it, to list each domain's experts). It never asks for end offsets (the
embedded broker answers them wrongly); :meth:`DomainTable.wait_for` lets a caller wait
for a version instead.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from router.records import DomainRecord
from worx.records import Record, RecordError

log = logging.getLogger(__name__)


class DomainFollower:
    """Apply every :class:`DomainRecord` of ``topic`` to ``apply`` (e.g. ``table.apply``);
    with ``record_type``, every record of that type instead."""

    def __init__(
        self,
        conf: dict,
        topic: str,
        apply: Callable[[Any], object],
        record_type: type[Record] = DomainRecord,
    ) -> None:
        self.topic = topic
        self.apply = apply
        self.record_type = record_type
        self.applied = 0
        self._stop = threading.Event()
        settings = {
            **conf,
            "group.id": f"worx-domains-follower-{uuid.uuid4().hex[:12]}",  # never commits
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
        self._consumer = Consumer(settings)
        self._thread = threading.Thread(target=self._run, name="domain-follower", daemon=True)

    def start(self) -> DomainFollower:
        metadata = self._consumer.list_topics(self.topic, timeout=10)
        info = metadata.topics.get(self.topic)
        if info is None or info.error is not None or not info.partitions:
            raise RuntimeError(
                f"topic {self.topic} does not exist; create topics first "
                "(worx broker / ensure_topics)"
            )
        self._consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(info.partitions)]
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                msg = self._consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        log.warning("%s follower: %s", self.topic, msg.error())
                    continue
                if msg.value() is None:
                    continue  # a tombstone: rows are retired by status, never deleted
                try:
                    row = self.record_type.from_json(msg.value(), strict=False)
                    self.apply(row)
                    self.applied += 1
                except (RecordError, ValueError) as exc:
                    log.error(
                        "%s follower: skipped [%d]@%d: %s",
                        msg.topic(),
                        msg.partition(),
                        msg.offset(),
                        exc,
                    )
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
