"""Follow a compacted table topic (``worx.domains``, ``worx.experts``) from a thread.

Every reader of a table reads the *whole* table, not a share of it, so a follower does
not join a consumer group: it assigns every partition of the topic from the beginning and
never commits; the topic (plus, for experts, the store) *is* the table, so a restarted
process rebuilds it the same way. It never asks for end offsets (the embedded broker
answers them wrongly): a caller waits for a version instead (``DomainTable.wait_for``).

One policy for every table:

* a record is decoded as ``record_type`` and handed to ``apply``;
* a tombstone (null value) goes to ``on_tombstone(key)``; without one it is skipped
  (domain rows are retired by status, never deleted);
* an undecodable record, or one ``apply`` refuses with ``ValueError``/``RecordError``,
  goes to ``on_bad(key, value, error)`` (default: logged) and is skipped;
* a transient consumer error is logged and the follower goes on (librdkafka retries);
* a *fatal* consumer error stops the follower: the client cannot go on, so logging it
  forever would only hide it. It is logged, kept in :attr:`TableFollower.error`, and
  :attr:`TableFollower.alive` turns False for a health check to report.
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


class TableFollower:
    """Apply every record of the compacted ``topic`` to ``apply`` on a background thread.

    Parameters
    ----------
    conf : librdkafka settings (``bootstrap.servers`` and any security settings).
    topic : the table topic.
    apply : called with each decoded record (e.g. ``DomainTable.apply``).
    record_type : the records of the topic (default: :class:`DomainRecord`).
    on_tombstone : called with the key of each tombstone (default: tombstones are skipped).
    on_bad : called with ``(key, value, error)`` for a record that cannot be applied.
    """

    def __init__(
        self,
        conf: dict,
        topic: str,
        apply: Callable[[Any], object],
        record_type: type[Record] = DomainRecord,
        on_tombstone: Callable[[bytes | None], object] | None = None,
        on_bad: Callable[[bytes | None, bytes, Exception], object] | None = None,
    ) -> None:
        self.topic = topic
        self.apply = apply
        self.record_type = record_type
        self.on_tombstone = on_tombstone
        self.on_bad = on_bad
        self.applied = 0  # records applied
        self.seen = 0  # events read (records, tombstones, bad ones)
        self.error: KafkaError | None = None  # the fatal error that stopped the follower
        self._at = (-1, -1)  # (partition, offset) of the event being handled, for the log
        self._stop = threading.Event()
        settings = {
            **conf,
            "group.id": f"worx-table-follower-{uuid.uuid4().hex[:12]}",  # never commits
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
        self._consumer = Consumer(settings)
        self._thread = threading.Thread(target=self._run, name=f"follow-{topic}", daemon=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> TableFollower:
        """Assign every partition of the topic from the beginning and start the thread.

        Raises:
            RuntimeError: the topic does not exist (create the topics first).
        """
        metadata = self._consumer.list_topics(self.topic, timeout=15)
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

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                msg = self._consumer.poll(0.2)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    if error.fatal():
                        log.error("%s follower stopped by a fatal error: %s", self.topic, error)
                        self.error = error
                        return
                    log.warning("%s follower: %s", self.topic, error)
                    continue
                self.seen += 1
                self._at = (msg.partition(), msg.offset())
                self.handle(msg.key(), msg.value())
        finally:
            self._consumer.close()

    def handle(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one event of the topic by the policy of the module docstring."""
        if value is None:
            if self.on_tombstone is not None:
                self.on_tombstone(key)
            return
        try:
            row = self.record_type.from_json(value, strict=False)
            self.apply(row)
        except (RecordError, ValueError) as exc:
            if self.on_bad is not None:
                self.on_bad(key, value, exc)
            else:
                partition, offset = self._at
                log.error("%s follower: skipped [%d]@%d: %s", self.topic, partition, offset, exc)
            return
        self.applied += 1
