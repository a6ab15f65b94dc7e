"""confluent-kafka clients with the at-least-once discipline of confluent's examples.

Settings from ``[kafka.client]`` pass through to librdkafka untouched (SASL, TLS...).
Consumers never auto-store offsets: an offset is stored only after every output of its
message has been produced and flushed.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from topology.config import KafkaConfig
from worx.stage import Message

log = logging.getLogger(__name__)


def client_conf(kafka: KafkaConfig, bootstrap_servers: str) -> dict[str, Any]:
    conf: dict[str, Any] = dict(kafka.client)
    conf["bootstrap.servers"] = bootstrap_servers
    return conf


def make_producer(conf: dict[str, Any], **overrides: Any) -> Producer:
    settings = {"linger.ms": 5, "enable.idempotence": False, **conf, **overrides}
    return Producer(settings)


def make_consumer(
    conf: dict[str, Any], group_id: str, session_timeout_ms: int = 10_000, **overrides: Any
) -> Consumer:
    settings = {
        "auto.offset.reset": "earliest",
        "enable.auto.offset.store": False,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": max(500, session_timeout_ms // 5),
        **conf,
        "group.id": group_id,
        **overrides,
    }
    return Consumer(settings)


class DeliveryTracker:
    """Delivery callback that remembers failures; ``check()`` raises if any delivery failed."""

    def __init__(self) -> None:
        self.delivered = 0
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}: {err}")
        else:
            self.delivered += 1

    def check(self) -> None:
        if self.errors:
            first = self.errors[0]
            count = len(self.errors)
            self.errors.clear()
            raise KafkaException(f"{count} deliveries failed, first: {first}")


def produce(
    producer: Producer, topic: str, value: bytes, key: str | bytes | None, on_delivery: Any
) -> None:
    """Produce one message, waiting for queue space instead of failing on BufferError."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
            break
        except BufferError:
            producer.poll(0.1)
    producer.poll(0)


def carries_record(msg: Any) -> bool:
    """Triage a consumed message: True if it carries a record; False for the end of a
    partition and for transient errors (logged).

    Raises:
        KafkaException: the consumer hit a fatal error; it cannot go on.
    """
    error = msg.error()
    if error is None:
        return True
    if error.code() == KafkaError._PARTITION_EOF:
        return False
    if error.fatal():
        raise KafkaException(error)
    log.warning("consumer error: %s", error)
    return False


def to_message(msg: Any) -> Message:
    """The stage-facing view of a consumed confluent-kafka message (bytes untouched)."""
    return Message(
        msg.value(), msg.key(), msg.topic(), msg.partition(), msg.offset(), msg.timestamp()[1]
    )
