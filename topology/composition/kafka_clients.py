"""confluent-kafka clients with the at-least-once discipline of confluent's examples.

Settings from ``[kafka.client]`` pass through to librdkafka untouched (SASL, TLS...).
Consumers never auto-store offsets: an offset is stored only after every output of its
message has been produced and flushed. :func:`require_reachable` checks a cluster answers
before any client of a command starts, so an unreachable one is one line, not a flood of
librdkafka's reconnect logs.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from topology.composition.worx_config import KafkaConfig
from worx.errors import UserError
from worx.stage import Message

log = logging.getLogger(__name__)


def client_conf(kafka: KafkaConfig, bootstrap_servers: str) -> dict[str, Any]:
    conf: dict[str, Any] = dict(kafka.client)
    conf["bootstrap.servers"] = bootstrap_servers
    return conf


class ClusterUnreachable(UserError):
    """The cluster did not answer a metadata request in time (the message says why)."""


def require_reachable(
    conf: dict[str, Any],
    timeout_s: float = 10.0,
    setting: str = "kafka.bootstrap_servers",
    flag: str = "--bootstrap-servers",
) -> None:
    """Return once the cluster of ``conf`` answers a metadata request; raise
    :class:`ClusterUnreachable` naming the address, librdkafka's errors summarised, and
    ``setting`` (dotted: section.field) to change, if it does not within ``timeout_s``.
    librdkafka's own log lines are silenced for the probe."""
    errors: list[KafkaError] = []
    probe = {**conf, "log_level": 0, "error_cb": errors.append}
    admin = AdminClient(probe)
    try:
        admin.list_topics(timeout=timeout_s)
        return
    except KafkaException as exc:
        admin.poll(0)  # serves the error callbacks queued meanwhile
        errors = errors or [exc.args[0]]
    section, field = setting.split(".", 1)
    raise ClusterUnreachable(
        f"cannot reach the Kafka cluster at {conf.get('bootstrap.servers')} within "
        f"{timeout_s:g} s ({summarise_errors(errors)})",
        f"start it or point [{section}] {field} / WORX_{section.upper()}__{field.upper()} "
        f"(or {flag}) at a running one; [kafka] connect_timeout_s sets the wait",
    )


def partition_count(conf: dict[str, Any], topic: str, timeout_s: float = 10.0) -> int | None:
    """How many partitions ``topic`` has (None: it does not exist or did not answer).
    Asks for every topic: a request naming one makes a broker that auto-creates topics
    create it."""
    admin = AdminClient({**conf, "log_level": 0})
    try:
        meta = admin.list_topics(timeout=timeout_s).topics.get(topic)
    except KafkaException:
        return None
    if meta is None or meta.error is not None or not meta.partitions:
        return None
    return len(meta.partitions)


def summarise_errors(errors: list[KafkaError]) -> str:
    """librdkafka's client errors as one phrase: the most frequent, with its count."""
    counts: dict[str, int] = {}
    for error in errors:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            continue
        text = re.sub(r"^\S+/(bootstrap|\d+): ", "", error.str())  # the broker's name
        text = re.sub(r" \(after \d+ms in state \w+\)$", "", text)
        counts[text] = counts.get(text, 0) + 1
    if not counts:
        return "no answer"
    text, count = max(counts.items(), key=lambda item: item[1])
    return f"{text}; {count} attempts" if count > 1 else text


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


def commit_offsets(consumer: Any, offsets: list[TopicPartition], what: str) -> bool:
    """Store and commit ``offsets`` once their outputs are flushed; False, logged, if the
    commit failed (a rebalance or a group eviction took the partition meanwhile: ``what``
    is then replayed, at least once, which the stages' keyed effects make safe)."""
    try:
        consumer.store_offsets(offsets=offsets)
        consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        log.warning("offset store/commit failed (%s); %s may be replayed", exc, what)
        return False
    return True


def to_message(msg: Any) -> Message:
    """The stage-facing view of a consumed confluent-kafka message (bytes untouched)."""
    return Message(
        msg.value(), msg.key(), msg.topic(), msg.partition(), msg.offset(), msg.timestamp()[1]
    )
