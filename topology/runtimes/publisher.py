"""The one publish step of every runtime: produce, flush, raise if undelivered, check.

confluent's producer discipline (``poll(0)`` per message, ``BufferError`` waited out,
a delivery callback that remembers failures) behind the two verbs of
:class:`worx.sink.Sink`, so stages and job runners that are handed a publisher never
import Kafka. :meth:`Publisher.flush` is the at-least-once point: a caller stores an
offset, writes a checkpoint or an outcome only after it returned.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaException, Producer

from topology.composition.kafka_clients import DeliveryTracker, produce
from topology.composition.topics import Topics
from worx.records import Record

log = logging.getLogger(__name__)


class Publisher:
    """Send records to ``topics`` through ``producer``; ``flush`` confirms every delivery.

    Parameters
    ----------
    producer : a confluent-kafka producer
        (:func:`topology.composition.kafka_clients.make_producer`).
    topics : resolves a record's topic suffix ("docs", "train.status") to a topic name.
    flush_timeout_s : how long :meth:`flush` waits for the deliveries.
    """

    def __init__(self, producer: Producer, topics: Topics, flush_timeout_s: float = 30.0) -> None:
        self.producer = producer
        self.topics = topics
        self.flush_timeout_s = flush_timeout_s
        self.tracker = DeliveryTracker()
        self.sent = 0

    def send(self, topic: str, key: str | None, record: Record) -> None:
        """Queue ``record`` for the topic of suffix ``topic``."""
        self.send_bytes(self.topics.name(topic), record.to_json(), key)

    def send_bytes(self, topic_name: str, value: bytes, key: str | bytes | None) -> None:
        """Queue an already encoded value for the topic named ``topic_name``."""
        produce(self.producer, topic_name, value, key, self.tracker)
        self.sent += 1

    def flush(self) -> None:
        """Wait for every queued message to be delivered.

        Raises:
            KafkaException: some were not delivered in time, or a delivery failed; the
                caller must not record its input as done.
        """
        remaining = self.producer.flush(self.flush_timeout_s)
        if remaining:
            raise KafkaException(
                f"{remaining} messages not delivered within {self.flush_timeout_s:g} s"
            )
        self.tracker.check()

    def close(self) -> None:
        """Best-effort flush on shutdown (what a crash would have lost is replayed anyway)."""
        remaining = self.producer.flush(self.flush_timeout_s)
        if remaining:
            log.warning("%d messages still undelivered at shutdown", remaining)


def publisher(conf: dict[str, Any], topics: Topics, flush_timeout_s: float = 30.0) -> Publisher:
    """A publisher with its own producer on the cluster of ``conf``."""
    from topology.composition.kafka_clients import make_producer

    return Publisher(make_producer(conf), topics, flush_timeout_s)
