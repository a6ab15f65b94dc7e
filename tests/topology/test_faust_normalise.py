"""The Faust runtime: app creation, the agent contract, and `worx stream` on the real broker."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys

import pytest

from ingest.records import DeadLetter, Doc
from tests.support.kafka import publish_many, read_values
from topology.composition.topics import ensure_topics
from topology.composition.worx_config import WorxConfig
from topology.faust.agents import AgentNotConfigured, available
from topology.faust.app import create_app


def _stream_env(broker, topics, source: str, tmp_path) -> dict:
    """Environment of a `worx stream --agents normalise` worker reading ``source``."""
    return {
        **os.environ,
        "WORX_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "WORX_KAFKA__TOPIC_PREFIX": topics.prefix,
        "WORX_KAFKA__SESSION_TIMEOUT_MS": "6000",
        "WORX_INGEST__SOURCE_TOPICS": source,
        "WORX_DATA_DIR": str(tmp_path / "data"),
    }


def config_with(tmp_path, **ingest) -> WorxConfig:
    config = WorxConfig(data_dir=str(tmp_path / "data"))
    return dataclasses.replace(config, ingest=dataclasses.replace(config.ingest, **ingest))


def test_create_app_registers_the_requested_agents(tmp_path):
    config = config_with(tmp_path, source_topics=("company.a", "company.b"))
    app = create_app(config, "127.0.0.1:1,127.0.0.1:2", ["normalise"])
    assert [agent.name for agent in app.agents.values()] == ["normalise"]
    assert app.conf.processing_guarantee.value == "at_least_once"
    assert app.conf.broker_session_timeout == 10.0
    assert app.conf.topic_allow_declare is False and app.conf.topic_disable_leader is True
    assert [str(url) for url in app.conf.broker] == ["kafka://127.0.0.1:1", "kafka://127.0.0.1:2"]
    assert "normalise" in available()


def test_agents_that_cannot_run_say_why(tmp_path):
    with pytest.raises(AgentNotConfigured, match="source_topics"):
        create_app(config_with(tmp_path), "127.0.0.1:1", ["normalise"])
    with pytest.raises(AgentNotConfigured, match="no Faust agent 'nope'"):
        create_app(config_with(tmp_path), "127.0.0.1:1", ["nope"])


def stop_worker(worker: subprocess.Popen) -> str:
    """SIGTERM, then SIGKILL if it has not stopped in 60 s: never leave a worker behind."""
    worker.send_signal(signal.SIGTERM)
    try:
        _, stderr = worker.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        worker.kill()
        _, stderr = worker.communicate()
    return stderr or ""


def collect(kafka_conf: dict, topic: str, count: int, timeout_s: float = 90) -> list[bytes]:
    """Read ``topic`` (every partition) from the start until ``count`` messages arrived."""
    return read_values(
        kafka_conf, topic, lambda values: len(values) >= count, timeout_s=timeout_s, partitions=None
    )


@pytest.mark.broker
def test_worx_stream_runs_normalise_at_least_once_and_dead_letters(
    tmp_path, broker, kafka_conf, topics
):
    source = f"{topics.prefix}.company"
    ensure_topics(kafka_conf, prefix=topics.prefix, partitions=2, extra={source: 2})
    good = [json.dumps({"id": f"f{i}", "text": f"faust  {i}"}).encode() for i in range(200)]
    bad = [b"not json", b"[]", b'{"id": "x"}', b'{"text": 7}', b'{"text": "  "}', b"\xff\xfe"]
    publish_many(kafka_conf, source, ((None, value) for value in good + bad))

    env = _stream_env(broker, topics, source, tmp_path)
    cmd = [sys.executable, "-m", "topology.commands", "stream", "--agents", "normalise"]
    worker = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        docs = [Doc.from_json(v) for v in collect(kafka_conf, topics.docs, 200)]
        letters = [DeadLetter.from_json(v) for v in collect(kafka_conf, topics.dlq, len(bad))]
    finally:
        stderr = stop_worker(worker)
    assert worker.returncode == 0, stderr[-3000:]
    assert {d.doc_id for d in docs} == {f"f{i}" for i in range(200)}
    assert {d.text for d in docs} == {f"faust {i}" for i in range(200)}
    assert sorted(letter.reason for letter in letters) == sorted(
        ["not_json", "not_object", "missing_text", "text_not_string", "empty_text", "invalid_utf8"]
    )
    assert all(letter.source_topic == source and letter.source_offset >= 0 for letter in letters)
    assert {letter.original() for letter in letters} == set(bad)


@pytest.mark.broker
def test_worx_stream_killed_with_sigkill_then_restarted_loses_nothing(
    tmp_path, broker, kafka_conf, topics
):
    source = f"{topics.prefix}.company"
    ensure_topics(kafka_conf, prefix=topics.prefix, partitions=2, extra={source: 2})
    total = 5000
    values = (json.dumps({"id": f"k{i}", "text": f"kill test {i}"}).encode() for i in range(total))
    publish_many(kafka_conf, source, ((None, value) for value in values))
    env = _stream_env(broker, topics, source, tmp_path)
    cmd = [sys.executable, "-m", "topology.commands", "stream", "--agents", "normalise"]
    first = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.DEVNULL)
    try:
        collect(kafka_conf, topics.docs, 300)  # it is working: kill it mid-stream
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    second = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.DEVNULL)
    try:
        ids: set[str] = set()

        def every_id(docs: list[Doc]) -> bool:
            ids.update(doc.doc_id for doc in docs[-1:])  # called after every poll
            return len(ids) >= total

        docs = read_values(kafka_conf, topics.docs, every_id, Doc.from_json, 120, partitions=None)
        seen = len(docs)
    finally:
        stop_worker(second)
    assert ids == {f"k{i}" for i in range(total)}
    assert seen >= total  # duplicates are allowed (at least once), losses are not


@pytest.mark.slow
def test_worx_stream_explains_a_missing_source_topic(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORX_")}
    env["WORX_KAFKA__BOOTSTRAP_SERVERS"] = "127.0.0.1:9"  # never contacted
    out = subprocess.run(
        [sys.executable, "-m", "topology.commands", "stream", "--agents", "normalise"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2
    assert "WORX_INGEST__SOURCE_TOPICS" in out.stderr
