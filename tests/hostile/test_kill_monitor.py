"""`worx monitor` SIGKILLed after its history was saved and before its rows were flushed.

The killed process evaluates a registration, saves the history, queues the rows and dies
before they reach ``worx.metrics``. The restarted one gets the registration again (its
offset was never committed), evaluates nothing again and re-emits the saved rows; the
next registration continues the matrix. Every row is on the topic exactly once here
(at-least-once in general: rows are keyed ``<run>:<step>``).
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import numpy as np

from experts.records import ExpertRegistration
from monitor.records import EvalRow
from router.embed import default_embedder
from router.records import DomainRecord
from tests.support.kafka import publish, read_messages
from tests.support.processes import read_line, start_worx
from tests.support.smallrun import small_run  # noqa: F401 - the shared fixture

# the child's publisher drops every worx.metrics record and blocks at the flush after one
SWALLOW_METRICS = r"""
def install(block):
    import topology.runtimes.publisher as publisher
    send = publisher.Publisher.send
    flush = publisher.Publisher.flush
    held = []
    def swallowing_send(self, topic, key, record):
        if topic == "metrics":
            held.append(key)
            return
        send(self, topic, key, record)
    def blocking_flush(self):
        if held:
            block()
        flush(self)
    publisher.Publisher.send = swallowing_send
    publisher.Publisher.flush = blocking_flush
"""


def _registration(run, embedder, domain: str) -> tuple[DomainRecord, ExpertRegistration]:
    centroid = embedder.embed(run.train_texts[domain]).mean(axis=0)
    centroid = (centroid / np.linalg.norm(centroid)).tolist()
    eid = f"{domain}-e1"
    row = DomainRecord(domain_id=domain, centroid=centroid, threshold=0.5, size=6, cohesion=0.8)
    reg = ExpertRegistration(
        expert_id=eid,
        domain_id=domain,
        sha256=run.store.manifest(eid).sha256,
        trunk_fingerprint=run.trunk.fingerprint,
        centroid=centroid,
    )
    return row, reg


def test_sigkill_between_history_save_and_flush_loses_no_row(
    small_run,  # noqa: F811 - the fixture imported above
    kafka_conf,
    topics,
    tmp_path: Path,
) -> None:
    for part in ("heldout", "store"):
        shutil.copytree(small_run.root / part, tmp_path / part)
    env = {
        "WORX_KAFKA__BOOTSTRAP_SERVERS": kafka_conf["bootstrap.servers"],
        "WORX_KAFKA__TOPIC_PREFIX": topics.prefix,
        "WORX_KAFKA__SESSION_TIMEOUT_MS": "6000",
        "WORX_MONITOR__HELDOUT_SEED": "1",
        "WORX_MONITOR__HELDOUT_PER_DOMAIN": "6",
        "WORX_MONITOR__MAX_TOKENS": "64",
    }
    args = [
        "monitor",
        "--port",
        "0",
        "--no-baseline",
        "--state-dir",
        str(tmp_path),
        "--trunk",
        str(small_run.trunk.path),
        "--store",
        str(tmp_path / "store"),
    ]
    embedder = default_embedder()
    first_row, first = _registration(small_run, embedder, "legal")
    second_row, second = _registration(small_run, embedder, "python_code")
    for row in (first_row, second_row):
        publish(kafka_conf, topics.domains, row.domain_id, row.to_json())
    publish(kafka_conf, topics.experts, first.expert_id, first.to_json())
    log = tmp_path / "monitor.log"

    killed = start_worx(args, env, log, block_at=SWALLOW_METRICS)
    try:
        read_line(killed, "blocked", 180, log)  # rows queued, history saved, nothing flushed
        saved = json.loads((tmp_path / "history.json").read_text())["runs"]["ours"]
        assert [r["arrived_expert"] for r in saved] == [None, "legal-e1"]
        killed.send_signal(signal.SIGKILL)
        assert killed.wait(30) == -signal.SIGKILL
    finally:
        if killed.poll() is None:
            killed.kill()

    restarted = start_worx(args, env, log)
    try:
        read_line(restarted, "dashboard on", 120, log)
        publish(kafka_conf, topics.experts, second.expert_id, second.to_json())

        def ours(messages) -> list[EvalRow]:
            rows = [EvalRow.from_json(m.value()) for m in messages]
            return [r for r in rows if r.run == "ours"]

        messages = read_messages(
            kafka_conf,
            topics.metrics,
            lambda ms: any(r.step == 2 for r in ours(ms)),
            180,
            partitions=None,
        )
        keys = sorted(m.key().decode() for m in messages)
        assert keys == ["ours:0", "ours:1", "ours:2"], log.read_text()[-3000:]
        rows = {r.step: r for r in ours(messages)}
        assert [rows[s].arrived_expert for s in (0, 1, 2)] == [None, "legal-e1", "python_code-e1"]
        saved = json.loads((tmp_path / "history.json").read_text())["runs"]["ours"]
        assert len(saved) == 3  # the redelivered registration was not evaluated twice
    finally:
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(60) == 0, log.read_text()[-3000:]
