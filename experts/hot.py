"""Hot registration: follow the compacted ``worx.experts`` topic and register into a server.

Every serving process reads the whole topic from the beginning (partitions assigned, no
consumer group join, no committed offsets): the topic plus the store *is* the table, so a
restarted server rebuilds it the same way. Replayed registrations are no-ops (same id, same
sha256); a tombstone (null value) removes the expert from the table; a record that does
not decode is reported as a refusal and skipped. A bad event never stops the consumer.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from experts.records import ExpertRegistration
from experts.serving import ExpertServer, RegisterOutcome
from topology.kafka import make_consumer
from worx.records import RecordError

log = logging.getLogger(__name__)


class RegistrationFollower:
    """Consume ``topic`` into ``server.register`` on a background thread.

    Parameters
    ----------
    server : ExpertServer
        Receives every registration.
    conf : dict
        librdkafka settings (``bootstrap.servers`` and any security settings).
    topic : str
        The experts topic (``Topics(prefix).experts``).
    on_outcome : callable, optional
        Called with every :class:`RegisterOutcome` (tests and benches await on it).
    """

    def __init__(
        self,
        server: ExpertServer,
        conf: dict,
        topic: str,
        on_outcome: Callable[[RegisterOutcome], None] | None = None,
    ) -> None:
        self.server = server
        self.topic = topic
        self.on_outcome = on_outcome
        self.consumer = make_consumer(
            conf, f"worx-serve-{uuid.uuid4().hex[:12]}", **{"enable.auto.commit": False}
        )
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.seen = 0
        self.outcomes: list[RegisterOutcome] = []

    def start(self) -> RegistrationFollower:
        metadata = self.consumer.list_topics(self.topic, timeout=15)
        partitions = sorted(metadata.topics[self.topic].partitions)
        if not partitions:
            raise KafkaException(f"topic {self.topic} has no partitions; create the topics first")
        self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
        self.thread = threading.Thread(target=self._run, name="expert-registrations", daemon=True)
        self.thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout_s)

    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                msg = self.consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    if msg.error().fatal():
                        log.error("fatal consumer error on %s: %s", self.topic, msg.error())
                        return
                    log.warning("consumer error on %s: %s", self.topic, msg.error())
                    continue
                self.seen += 1
                self.handle(msg.key(), msg.value())
        finally:
            self.consumer.close()

    def handle(self, key: bytes | None, value: bytes | None) -> RegisterOutcome | None:
        """Apply one event of the topic; returns the outcome (None for an undecodable one)."""
        if value is None:
            if key is None:
                return None
            outcome = self.server.unregister(key.decode("utf-8", "replace"))
        else:
            try:
                registration = ExpertRegistration.from_json(value, strict=False)
            except RecordError as exc:
                who = key.decode("utf-8", "replace") if key else "?"
                self.server.refusals.append(
                    {"expert_id": who, "reason": "bad_registration", "detail": str(exc)}
                )
                log.warning("undecodable registration for %s: %s", who, exc)
                return None
            outcome = self.server.register(registration)
        self.outcomes.append(outcome)
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome
