"""Topic readers and producers for the broker tests (confluent-kafka, plain loops)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition

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
    publish_many(conf, topic, [(key, value)])


def publish_many(
    conf: dict, topic: str, messages: Iterable[tuple[str | None, bytes | None]]
) -> None:
    """Produce ``(key, value)`` pairs in order (a None value is a tombstone) and wait until
    every one is delivered."""
    producer = Producer(conf)
    for key, value in messages:
        producer.produce(topic, value, key=key)
    assert producer.flush(15) == 0


def read_messages(
    conf: dict,
    topics: str | Sequence[str],
    until: Callable[[list[Message]], bool],
    timeout_s: float = 60.0,
    partitions: Sequence[int] | None = None,
    raise_on_timeout: bool = True,
) -> list[Message]:
    """Read ``topics`` from the start until ``until(messages read so far)`` is true.

    Every partition of each topic is assigned (or only ``partitions``), so no group is
    joined and nothing is committed. ``until`` is called before the first poll and after
    every poll (each adds at most one message). On timeout (an upper bound only: it returns
    as soon as the condition holds) it raises AssertionError with what was read, or, with
    ``raise_on_timeout=False``, returns what was read for the caller's own assertions.
    """
    names = [topics] if isinstance(topics, str) else list(topics)
    consumer = Consumer(
        {**conf, "group.id": f"reader-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    messages: list[Message] = []
    try:
        assigned = []
        for name in names:
            if partitions is None:
                found = consumer.list_topics(name, timeout=10).topics[name].partitions
                assigned += [TopicPartition(name, p, OFFSET_BEGINNING) for p in sorted(found)]
            else:
                assigned += [TopicPartition(name, p, OFFSET_BEGINNING) for p in partitions]
        consumer.assign(assigned)
        deadline = time.monotonic() + timeout_s
        while not until(messages):
            if time.monotonic() > deadline:
                if not raise_on_timeout:
                    break
                shown = [m.value() for m in messages[:20]]
                raise AssertionError(
                    f"condition not met on {', '.join(names)} within {timeout_s}s; read "
                    f"{len(messages)} messages: {shown}{' ...' if len(messages) > 20 else ''}"
                )
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            messages.append(msg)
    finally:
        consumer.close()
    return messages


def read_values(
    conf: dict,
    topic: str,
    until: Callable[[list], bool],
    decode: Callable[[bytes], Any] = lambda value: value,
    timeout_s: float = 60.0,
    partitions: Sequence[int] | None = (0,),
) -> list:
    """Read ``topic`` (partition 0, or ``partitions``; None: every one) from the start until
    ``until(decoded values)`` is true, called as by :func:`read_messages`.

    Raises AssertionError with what was read if the condition is not met within ``timeout_s``
    (an upper bound only: it returns as soon as the values are there).
    """
    values: list = []

    def done(messages: list[Message]) -> bool:
        values.extend(decode(m.value()) for m in messages[len(values) :])
        return until(values)

    read_messages(conf, topic, done, timeout_s, partitions)
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


def leave_mid_join(conf: dict, group: str, topics: list[str], timeout_s: float = 10.0) -> None:
    """Join ``group`` on ``topics`` and leave while the broker still holds the JoinGroup
    request (librdkafka's ``cgrp.join_state`` is ``wait-join``), as a stage stopped during
    its group join does. The embedded broker then keeps the group waiting for the member
    that left: a later member of that group gets no partitions.
    """
    join_state: list[str] = []

    def on_stats(raw: str) -> None:
        join_state.append(json.loads(raw).get("cgrp", {}).get("join_state", ""))

    consumer = Consumer(
        {
            **conf,
            "group.id": group,
            "session.timeout.ms": 10_000,
            "max.poll.interval.ms": 86_400_000,  # as the monitor's
            "enable.auto.commit": False,
            "statistics.interval.ms": 100,
            "stats_cb": on_stats,
        }
    )
    try:
        consumer.subscribe(topics)
        deadline = time.monotonic() + timeout_s
        while "wait-join" not in join_state:
            assert time.monotonic() < deadline, f"{group}: no JoinGroup sent in {timeout_s}s"
            consumer.poll(0.1)
    finally:
        consumer.close()


class TopicReader:
    """Reads a topic from the beginning (assign, no group), decoding ``kind`` records."""

    def __init__(self, conf: dict, topic: str, kind: type, partitions: int = 1) -> None:
        self.kind = kind
        self.consumer = Consumer(
            {
                **conf,
                "group.id": f"reader-{topic}-{time.monotonic_ns()}",
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        self.records: list = []

    def until(self, predicate, timeout: float = 90.0) -> list:
        deadline = time.monotonic() + timeout
        while not predicate(self.records):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out with {len(self.records)} records")
            msg = self.consumer.poll(0.5)
            if msg is not None and not msg.error():
                self.records.append(self.kind.from_json(msg.value(), strict=False))
        return self.records

    def close(self) -> None:
        self.consumer.close()


def publish_with_partitions(
    conf: dict, topic: str, items: list[tuple[str, bytes, int | None]]
) -> None:
    """Produce ``(key, value, partition)`` items in order (partition None: the partitioner's
    choice) and wait until every one is delivered."""
    producer = Producer(conf)
    for key, value, partition in items:
        if partition is None:
            producer.produce(topic, value=value, key=key)
        else:
            producer.produce(topic, value=value, key=key, partition=partition)
    assert producer.flush(30) == 0
