"""The ingest path against Apache Kafka (KRaft, apache/kafka image) through testcontainers.

Runs where a Docker engine answers; skipped with the reason where none does (CI, this
machine). The embedded-broker tests cover the same paths everywhere.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from topology.composition.topics import Topics, ensure_topics

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGE = "apache/kafka:3.9.0"


def docker_unavailable_reason() -> str | None:
    """None if a Docker engine answers a ping, else why not (never raises)."""
    try:
        import docker
    except ImportError:
        return "the 'docker' package is not installed (pip install -e '.[dev]')"
    try:
        client = docker.from_env(timeout=5)
        client.ping()
        client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine here"
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return f"no Docker engine reachable ({first}); start Docker to run the Apache Kafka test"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def apache_kafka() -> Iterator[str]:
    reason = docker_unavailable_reason()
    if reason:
        pytest.skip(reason)
    from confluent_kafka.admin import AdminClient
    from testcontainers.core.container import DockerContainer

    port = _free_port()
    container = (
        DockerContainer(IMAGE)
        .with_bind_ports(9092, port)
        .with_env("KAFKA_NODE_ID", "1")
        .with_env("KAFKA_PROCESS_ROLES", "broker,controller")
        .with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9093")
        .with_env("KAFKA_LISTENERS", "PLAINTEXT://:9092,CONTROLLER://:9093")
        .with_env("KAFKA_ADVERTISED_LISTENERS", f"PLAINTEXT://127.0.0.1:{port}")
        .with_env(
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        )
        .with_env("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
        .with_env("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        .with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
        .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
    )
    with container:
        servers = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": servers})
        deadline = time.monotonic() + 120
        while True:  # ready when the broker answers a metadata request
            try:
                admin.list_topics(timeout=2)
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    raise
        yield servers


def test_file_ingest_and_connector_on_apache_kafka(apache_kafka, tmp_path):
    import dataclasses
    import threading

    from ingest.config import IngestConfig
    from ingest.files import FileIngestor
    from ingest.records import DeadLetter, Doc
    from tests.support.ingest_testdata import MIXED_CONFIG, write_mixed_file
    from tests.support.kafka import drain
    from topology.commands.connect import build_connector
    from topology.composition.kafka_clients import make_producer
    from topology.composition.worx_config import WorxConfig
    from topology.runtimes.publisher import publisher

    conf = {"bootstrap.servers": apache_kafka}
    topics = Topics("apache")
    ensure_topics(conf, prefix="apache", partitions=3, extra={"apache.company": 2})
    path = tmp_path / "mixed.jsonl"
    good, expected = write_mixed_file(path, good=500, bad=100)
    FileIngestor(IngestConfig(**MIXED_CONFIG), publisher(conf, topics)).run([path])
    docs = [Doc.from_json(v) for _, v in drain(conf, topics.docs)]
    letters = [DeadLetter.from_json(v) for _, v in drain(conf, topics.dlq)]
    assert {d.doc_id for d in docs} == good and len(docs) == 500
    assert {x.source_offset: x.reason for x in letters} == expected

    producer = make_producer(conf)
    for i in range(50):
        producer.produce("apache.company", f"company event {i}".encode(), key=f"e{i}".encode())
    assert producer.flush(10) == 0
    config = WorxConfig()
    config = dataclasses.replace(
        config, kafka=dataclasses.replace(config.kafka, topic_prefix="apache")
    )
    section = dataclasses.replace(
        config.ingest, source_topics=("apache.company",), source_format="text", source_group="ak"
    )
    stop = threading.Event()
    runner = build_connector(config, section, apache_kafka)
    runner.on_batch = lambda *_: stop.set() if runner.consumed >= 50 else None
    runner.run(stop, idle_timeout_s=60)
    ids = {Doc.from_json(v).doc_id for _, v in drain(conf, topics.docs)}
    assert {f"e{i}" for i in range(50)} <= ids
