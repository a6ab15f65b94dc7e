"""The Kafka-to-Kafka connector on the real embedded broker (plain confluent runtime)."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ingest.records import DeadLetter, Doc
from topology.commands.connect import build_connector
from topology.composition.kafka_clients import DeliveryTracker
from topology.composition.worx_config import WorxConfig

pytestmark = pytest.mark.broker


def _config(topics) -> WorxConfig:
    """The defaults, on this test's topic prefix, with a short session timeout."""
    config = WorxConfig()
    kafka = dataclasses.replace(config.kafka, topic_prefix=topics.prefix, session_timeout_ms=6000)
    return dataclasses.replace(config, kafka=kafka)


def make_source(kafka_conf: dict, name: str, values: list[tuple[bytes | None, bytes]]) -> None:
    admin = AdminClient(kafka_conf)
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])[name].result(10)
    producer = Producer(kafka_conf)
    tracker = DeliveryTracker()
    for key, value in values:
        producer.produce(name, value=value, key=key, on_delivery=tracker)
    assert producer.flush(10) == 0
    tracker.check()


def run_until(runner, total: int) -> None:
    stop = threading.Event()
    inner = runner.on_batch

    def on_batch(consumed: int, emitted: int) -> None:
        if inner:
            inner(consumed, emitted)
        if runner.consumed >= total:
            stop.set()

    runner.on_batch = on_batch
    worker = threading.Thread(target=runner.run, args=(stop,), kwargs={"idle_timeout_s": 60})
    worker.start()
    worker.join(90)
    assert not worker.is_alive()
    assert runner.consumed == total


@pytest.mark.parametrize("source_format", ["json", "text"])
def test_connector_moves_company_topic_to_docs_and_dlq(
    kafka_conf, topics, drain_topic, source_format
):
    source = f"{topics.prefix}.company.{source_format}"
    if source_format == "json":
        good = [
            (None, json.dumps({"body": f"event  {i}", "uid": f"u{i}"}).encode()) for i in range(300)
        ]
        bad = [(None, b"{oops"), (None, b"[]"), (None, b'{"uid": "x"}'), (None, b'{"body": 1}')]
        expected_bad = {"not_json", "not_object", "missing_text", "text_not_string"}
    else:
        good = [(f"u{i}".encode(), f"event  {i}".encode()) for i in range(300)]
        bad = [(b"k1", b"\xff\xfe\xfd"), (b"k2", b"   "), (b"k3", b"")]
        expected_bad = {"invalid_utf8", "empty_text", "empty_message"}
    make_source(kafka_conf, source, good + bad)
    config = _config(topics)
    section = dataclasses.replace(
        config.ingest,
        source_topics=(source,),
        source_format=source_format,
        text_field="body",
        id_field="uid",
        source_group=f"{topics.prefix}-connect",
        batch_size=64,
    )
    runner = build_connector(config, section, kafka_conf["bootstrap.servers"])
    run_until(runner, len(good) + len(bad))

    docs = [Doc.from_json(v) for _, v in drain_topic(topics.docs)]
    letters = [DeadLetter.from_json(v) for _, v in drain_topic(topics.dlq)]
    assert sorted(d.doc_id for d in docs) == sorted(f"u{i}" for i in range(300))
    assert {d.text for d in docs} == {f"event {i}" for i in range(300)}
    assert all(d.source == f"kafka:{source}" for d in docs)
    assert {letter.reason for letter in letters} == expected_bad and len(letters) == len(bad)
    for letter in letters:
        assert letter.source_topic == source and letter.source_partition in (0, 1)
        assert letter.source_offset >= 0
    assert {letter.original() for letter in letters} == {v for _, v in bad}


def test_connector_without_source_topics_is_a_clear_error():
    with pytest.raises(ValueError, match="source topics"):
        build_connector(WorxConfig(), WorxConfig().ingest, "127.0.0.1:1")


def test_two_connector_processes_share_the_partitions(kafka_conf, topics):
    import multiprocessing
    import time
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from topology.commands.connect import run_workers

    source = f"{topics.prefix}.company.par"
    make_source(kafka_conf, source, [(f"p{i}".encode(), f"text {i}".encode()) for i in range(400)])
    config = _config(topics)
    section = dataclasses.replace(
        config.ingest,
        source_topics=(source,),
        source_format="text",
        source_group=f"g-{uuid.uuid4()}",
    )
    stop = multiprocessing.get_context("spawn").Event()
    result: list[int] = []
    worker = threading.Thread(
        target=lambda: result.append(
            run_workers(config, section, kafka_conf["bootstrap.servers"], 2, stop)
        )
    )
    worker.start()
    consumer = Consumer({**kafka_conf, "group.id": f"c-{uuid.uuid4()}"})
    consumer.assign([TopicPartition(topics.docs, p, OFFSET_BEGINNING) for p in (0, 1)])
    ids: set[str] = set()
    deadline = time.monotonic() + 120
    try:
        while len(ids) < 400 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                ids.add(msg.key().decode())
    finally:
        consumer.close()
        stop.set()
        worker.join(90)
    assert not worker.is_alive()
    assert ids == {f"p{i}" for i in range(400)}
    assert result and result[0] >= 400  # both processes' counts, at least once


def test_idle_timeout_counts_from_the_assignment_not_the_group_join(kafka_conf, topics):
    source = f"{topics.prefix}.company.idle"
    make_source(kafka_conf, source, [(None, b'{"text": "one"}'), (None, b'{"text": "two"}')])
    config = _config(topics)
    section = dataclasses.replace(config.ingest, source_topics=(source,), source_group="idle")
    runner = build_connector(config, section, kafka_conf["bootstrap.servers"])
    runner.run(idle_timeout_s=1.0)  # the join alone takes longer than that
    assert runner.consumed == 2
