"""`worx up` against a cluster it did not start (here: a broker the test owns), from worx.toml."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from topology.topics import ensure_topics

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_up_reads_company_topic_routes_it_and_stops_cleanly(tmp_path, kafka_conf, processes_with):
    prefix = f"up{uuid.uuid4().hex[:6]}"
    company = f"{prefix}-company-tickets"
    ensure_topics(kafka_conf, prefix=prefix, partitions=2, extra={company: 2})
    producer = Producer(kafka_conf)
    for i in range(30):
        body = {"ticket": f"T{i}", "body": f"printer {i} on floor {i % 3} is jammed again"}
        producer.produce(company, json.dumps(body).encode())
    producer.produce(company, b"not json at all")
    assert producer.flush(10) == 0
    (tmp_path / "worx.toml").write_text(
        f'data_dir = "{tmp_path / "state"}"\n'
        f'[kafka]\nbootstrap_servers = "{kafka_conf["bootstrap.servers"]}"\n'
        f'topic_prefix = "{prefix}"\npartitions = 2\n'
        f'[ingest]\nsource_topics = ["{company}"]\ntext_field = "body"\nid_field = "ticket"\n'
    )
    marker = f"worx-up-{uuid.uuid4().hex}"
    up = subprocess.Popen(
        [sys.executable, "-m", "topology.cli", "--config", "worx.toml", "up", "--no-serve"],
        cwd=tmp_path,
        env={**os.environ, "WORX_E2E_MARKER": marker, "WORX_MONITOR__BASELINE": "false"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    consumer = Consumer(
        {**kafka_conf, "group.id": f"check-{prefix}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([f"{prefix}.routed", f"{prefix}.dlq"])
    routed, dead = set(), 0
    deadline = time.monotonic() + 120
    try:
        while (len(routed) < 30 or dead < 1) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            if msg.topic().endswith(".routed"):
                routed.add(json.loads(msg.value())["doc_id"])
            else:
                dead += 1
    finally:
        consumer.close()
        up.send_signal(signal.SIGTERM)
        _, err = up.communicate(timeout=60)
    assert routed == {f"T{i}" for i in range(30)}, err.decode()[-2000:]
    assert dead == 1
    assert up.returncode == 0, err.decode()[-2000:]
    assert processes_with(marker) == []
