"""`worx route` + `worx discover` + `worx domains` as processes, and the Faust agents."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from experts.records import ExpertRegistration
from ingest.records import Doc
from router.records import DomainRecord, RoutedDoc, TrainJob
from tests.support.kafka import TopicReader, publish_with_partitions
from tests.support.processes import REPO
from topology.composition.worx_config import WorxConfig
from topology.faust.app import create_app
from worx.scenario import Scenario

pytestmark = pytest.mark.broker


def _env(kafka_conf: dict, topics, tmp_path: Path) -> dict:
    return {
        **os.environ,
        "WORX_KAFKA__BOOTSTRAP_SERVERS": kafka_conf["bootstrap.servers"],
        "WORX_KAFKA__TOPIC_PREFIX": topics.prefix,
        "WORX_KAFKA__SESSION_TIMEOUT_MS": "6000",
        "WORX_ROUTER__JOB_DOCS": "60",
        "WORX_DATA_DIR": str(tmp_path / "data"),
    }


def _phased_docs() -> list[Doc]:
    stream = Scenario.from_directory().phased(["scripture", "python_code"], per_domain=160, seed=6)
    return [Doc(doc_id=d.doc_id, text=d.text, label=d.domain) for d in stream]


def _spawn(command: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=REPO, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )


def _stop(process: subprocess.Popen) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    return err


def test_route_and_discover_commands_find_both_domains(kafka_conf, topics, tmp_path):
    env = _env(kafka_conf, topics, tmp_path)
    docs = _phased_docs()
    publish_with_partitions(kafka_conf, topics.docs, [(d.doc_id, d.to_json(), 0) for d in docs])
    cli = [sys.executable, "-m", "topology.commands"]
    route, discover = (_spawn([*cli, command], env) for command in ("route", "discover"))
    jobs = TopicReader(kafka_conf, topics.train, TrainJob)
    try:
        found = jobs.until(lambda records: len({r.domain_id for r in records}) >= 2, timeout=150)
    finally:
        jobs.close()
        route_err, discover_err = _stop(route), _stop(discover)
    assert route.returncode == 0, route_err[-2000:]
    assert discover.returncode == 0, discover_err[-2000:]
    assert "promotion" in discover_err
    labels = {d.doc_id: d.label for d in docs}
    majority = sorted(
        Counter(labels[i] for i in job.train_doc_ids).most_common(1)[0][0] for job in found
    )
    assert majority == ["python_code", "scripture"]
    assert (tmp_path / "data" / "discover" / "state.json").exists()
    listing = subprocess.run(
        [*cli, "domains", "--json", "--wait", "2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listing.returncode == 0, listing.stderr[-2000:]
    rows = [json.loads(line) for line in listing.stdout.splitlines()]
    assert sorted(r["label_hint"] for r in rows) == ["python_code", "scripture"]
    assert all(r["size"] >= 40 and 0 < r["threshold"] < r["cohesion"] for r in rows)


def test_faust_agents_register_and_route(kafka_conf, topics, tmp_path):
    config = WorxConfig(data_dir=str(tmp_path / "data"))
    app = create_app(config, "127.0.0.1:1", ["route", "discover"])
    assert sorted(a.name for a in app.agents.values()) == ["discover", "route"]

    env = _env(kafka_conf, topics, tmp_path)
    docs = _phased_docs()
    publish_with_partitions(
        kafka_conf, topics.docs, [(d.doc_id, d.to_json(), i % 2) for i, d in enumerate(docs)]
    )
    command = [sys.executable, "-m", "topology.commands", "stream", "--agents", "route,discover"]
    stream = subprocess.Popen(
        command,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    routed = TopicReader(kafka_conf, topics.routed, RoutedDoc, partitions=2)
    jobs = TopicReader(kafka_conf, topics.train, TrainJob)
    domains = TopicReader(kafka_conf, topics.domains, DomainRecord)
    try:
        routed.until(lambda records: len({r.doc_id for r in records}) >= len(docs), timeout=150)
        found = jobs.until(lambda records: len({r.domain_id for r in records}) >= 1, timeout=120)
        # an expert registered for that domain reaches its row with the next routed events
        expert = ExpertRegistration(
            expert_id="e-faust",
            domain_id=found[0].domain_id,
            sha256="0" * 64,
            trunk_fingerprint="t",
            centroid=[1.0],
        )
        publish_with_partitions(
            kafka_conf, topics.experts, [(expert.expert_id, expert.to_json(), 0)]
        )
        publish_with_partitions(
            kafka_conf, topics.docs, [(d.doc_id, d.to_json(), 0) for d in docs[:20]]
        )
        domains.until(lambda rows: any(r.expert_ids == ["e-faust"] for r in rows), timeout=120)
    finally:
        routed.close()
        jobs.close()
        domains.close()
        err = _stop(stream)
    assert stream.returncode == 0, err[-3000:]
    assert found and all(job.train_doc_ids for job in found)
    [row] = [r for r in domains.records if r.expert_ids == ["e-faust"]]
    assert row.domain_id == found[0].domain_id
