"""Topic readers and producers for the broker tests (confluent-kafka, plain loops)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from ingest.records import Doc

END = b"__drain_end__"


def produce(conf: dict, topic: str, docs: Iterable[Doc], partition: int = 0) -> list[dict]:
    """Produce ``docs`` to one partition, keyed by id; return
    ``{"doc_id", "offset", "partition"}`` of each, in offset order."""
    producer = Producer(conf)
    placed: list[dict] = []

    def delivered(err, msg):
        assert err is None, err
        placed.append(
            {"doc_id": msg.key().decode(), "offset": msg.offset(), "partition": msg.partition()}
        )

    for doc in docs:
        producer.produce(
            topic, doc.to_json(), key=doc.doc_id, partition=partition, on_delivery=delivered
        )
    assert producer.flush(15) == 0
    return sorted(placed, key=lambda p: p["offset"])


def produce_docs(
    conf: dict, topic: str, texts: list[str], prefix: str, partition: int = 0
) -> list[dict]:
    """Produce Doc records to one partition; return ``{"doc_id", "offset", "partition"}`` each."""
    docs = (Doc(doc_id=f"{prefix}-{i}", text=text, source="test") for i, text in enumerate(texts))
    return produce(conf, topic, docs, partition)


def publish(conf: dict, topic: str, key: str, value: bytes) -> None:
    """Produce one message and wait for it."""
    producer = Producer(conf)
    producer.produce(topic, value, key=key)
    assert producer.flush(15) == 0


def read_values(
    conf: dict,
    topic: str,
    until: Callable[[list], bool],
    decode: Callable[[bytes], Any] = lambda value: value,
    timeout_s: float = 60.0,
) -> list:
    """Read ``topic`` (partition 0) from the start until ``until(decoded values)`` is true.

    Raises AssertionError with what was read if the condition is not met within ``timeout_s``
    (an upper bound only: it returns as soon as the values are there).
    """
    consumer = Consumer(
        {**conf, "group.id": f"reader-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # one partition: no group join
    values: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while not until(values):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"condition not met on {topic} within {timeout_s}s; read {values}"
                )
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            values.append(decode(msg.value()))
    finally:
        consumer.close()
    return values


def read_records(conf: dict, topic: str, record_type: type, until, timeout_s: float = 60.0) -> list:
    """:func:`read_values` decoding each value as ``record_type`` (a worx record)."""
    return read_values(conf, topic, until, record_type.from_json, timeout_s)


def drain(
    kafka_conf: dict, topic: str, timeout_s: float = 60.0
) -> list[tuple[bytes | None, bytes]]:
    """Every (key, value) on ``topic`` produced before this call, in partition order.

    The embedded broker's end offsets are unreliable, so an end marker is produced to
    every partition first; reading stops when each partition's marker has been seen.
    """
    consumer = Consumer(
        {**kafka_conf, "group.id": f"drain-{uuid.uuid4()}", "enable.auto.commit": False}
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        producer = Producer(kafka_conf)
        for partition in partitions:
            producer.produce(topic, value=END, partition=partition)
        assert producer.flush(10) == 0
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        out: list[tuple[bytes | None, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while pending:
            assert time.monotonic() < deadline, f"{topic}: no end marker on {sorted(pending)}"
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if msg.value() == END:
                pending.discard(msg.partition())
            else:
                out.append((msg.key(), msg.value()))
        return out
    finally:
        consumer.close()
