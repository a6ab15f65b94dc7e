"""The monitor on a real broker: jobs' held-out docs in, a registration in, rows out."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Producer

from ingest.records import DeadLetter, Doc
from monitor.baseline import DenseBaseline
from monitor.live import LiveState
from monitor.records import EvalRow
from monitor.stage import MonitorStage
from router.records import DomainRecord, DriftEvent, TrainJob
from tests.support.kafka import leave_mid_join, produce, read_values
from tests.support.smallrun import DENSE, SmallRun, corpus_docs, train_expert
from topology.composition.topics import Topics
from topology.runtimes.range_reader import kafka_fetch
from topology.runtimes.stage_runner import StageRunner
from trainer.records import TrainStatus
from worx.stage import Message

pytestmark = pytest.mark.broker


def produce_docs(conf: dict, topic: str, docs: list[tuple[str, str]]) -> list[int]:
    """Produce Docs to partition 0; return their offsets (from the delivery reports)."""
    records = (Doc(doc_id=doc_id, text=text, label="news") for doc_id, text in docs)
    return [p["offset"] for p in produce(conf, topic, records)]


def read_until(conf: dict, topic: str, done, timeout_s: float = 120.0) -> list[bytes]:
    """Read ``topic`` from the start until ``done(values)`` holds (or fail after timeout)."""
    return read_values(conf, topic, done, timeout_s=timeout_s)


def test_monitor_stage_on_a_real_broker(
    run_copy: SmallRun, small_run: SmallRun, kafka_conf: dict, topics: Topics
) -> None:
    shutil.copytree(small_run.root / "baseline", run_copy.root / "baseline")
    baseline = DenseBaseline(
        small_run.trunk.path,
        run_copy.heldout,
        run_copy.history,
        run_copy.root / "baseline",
        DENSE,
        max_tokens=64,
    )
    live = LiveState(run_copy.root / "monitor" / "live.json")
    stage = MonitorStage(
        topics.prefix,
        run_copy.history,
        run_copy.heldout,
        live,
        run_copy.evaluator,
        baseline,
        kafka_fetch(kafka_conf),
        run_copy.store,
        run_copy.trunk.fingerprint,
        run_copy.root / "monitor",
    )

    # a training job for "news": its documents on worx.docs, referenced by offsets
    news = corpus_docs("news", 60)[40:60]  # not the ones already held out
    offsets = produce_docs(kafka_conf, topics.docs, news)
    heldout_ids = [d for d, _ in news[:8]]
    job = TrainJob(
        job_id="job-news",
        domain_id="news",
        reason="new_domain",
        refs=[{"topic": topics.docs, "partition": 0, "start": offsets[0], "end": offsets[-1] + 1}],
        train_doc_ids=[d for d, _ in news[8:]],
        heldout_doc_ids=heldout_ids,
        centroid=[1.0],
    )
    producer = Producer(kafka_conf)
    producer.produce(topics.train, job.to_json(), key=job.job_id)
    producer.produce(
        topics.train_status,
        TrainStatus(
            job_id="job-news", domain_id="news", state="step", step=5, total_steps=10, loss=4.2
        ).to_json(),
    )
    producer.produce(
        topics.drift,
        DriftEvent(
            event_id="ev1",
            detector="novelty_rate",
            kind="new_domain",
            domain_id=None,
            statistics={"rate": 0.4},
            window_start_offset=0,
            window_end_offset=9,
        ).to_json(),
    )
    producer.produce(topics.experts, b"{not json", key="bad")
    assert producer.flush(15) == 0

    job_seen = threading.Event()
    original = stage.process

    def process(message: Message, record=None):
        out = original(message, record)
        if "job-news" in stage.jobs:
            job_seen.set()
        return out

    stage.process = process  # type: ignore[method-assign]
    stop = threading.Event()
    runner = StageRunner(
        stage,
        kafka_conf,
        topics,
        [topics.name(s) for s in ("docs", "dlq", "drift", "train", "train.status", "experts")],
        "monitor-test",
        "monitor",
        session_timeout_ms=6000,
    )
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert job_seen.wait(120), "the monitor never processed the training job"
        # the expert trained for that job is registered
        texts = [t for _, t in news[8:]]
        expert = train_expert(run_copy.trunk, texts, seed=5, steps=5)
        centroid = np.full(128, 128**-0.5).tolist()
        manifest = run_copy.store.put("news-e1", expert, "news", centroid, job_id="job-news")
        from experts.records import ExpertRegistration

        reg = ExpertRegistration(
            expert_id="news-e1",
            domain_id="news",
            sha256=manifest.sha256,
            trunk_fingerprint=run_copy.trunk.fingerprint,
            centroid=centroid,
            job_id="job-news",
        )
        producer.produce(topics.experts, reg.to_json(), key="news-e1")
        assert producer.flush(15) == 0

        def both_runs_at_step_4(values: list[bytes]) -> bool:
            rows = [EvalRow.from_json(v) for v in values]
            return {(r.run, r.step) for r in rows} >= {("ours", 4), ("dense_baseline", 4)}

        rows = [
            EvalRow.from_json(v)
            for v in read_until(kafka_conf, topics.metrics, both_runs_at_step_4)
        ]
    finally:
        stop.set()
        thread.join(30)

    ours = [r for r in rows if r.run == "ours" and r.step == 4][-1]
    assert ours.arrived_expert == "news-e1" and ours.weight_changes == []
    assert ours.heldout_size["news"] == 6  # capacity: the bounded sample kept 6 of 6 + 8
    # the news held-out set changed, so the earlier rows of its column were re-evaluated
    assert {r.step for r in rows if r.run == "ours"} == {0, 1, 2, 3, 4}
    held = {d.doc_id for d in run_copy.heldout.docs("news")}
    assert held & set(heldout_ids)  # the job's held-out docs entered the sample...
    assert not held & set(job.train_doc_ids)  # ...and never its training docs
    dense = [r for r in rows if r.run == "dense_baseline" and r.step == 4][-1]
    assert dense.arrived_domain == "news"
    # dead letter for the undecodable registration, with the reason and the monitor's name
    letters = [
        DeadLetter.from_json(v) for v in read_until(kafka_conf, topics.dlq, lambda v: len(v) >= 1)
    ]
    assert letters[0].reason == "not_json" and letters[0].stage == "monitor"
    assert letters[0].original() == b"{not json"
    snap = live.snapshot()
    assert snap["jobs"]["job-news"]["state"] == "step" and snap["drift"][0]["event_id"] == "ev1"
    assert (
        snap["totals"]["docs"] == len(news) and snap["registrations"][0]["expert_id"] == "news-e1"
    )
    assert (run_copy.root / "monitor" / "jobs.json").exists()
    assert Path(run_copy.root / "monitor" / "live.json").exists()


def test_stage_contract_without_a_broker(run_copy: SmallRun) -> None:
    """Snapshot/restore round trip, replayed registration, wrong trunk dead-lettered."""
    from experts.records import ExpertRegistration

    live = LiveState()
    stage = MonitorStage(
        "p",
        run_copy.history,
        run_copy.heldout,
        live,
        run_copy.evaluator,
        trunk_fingerprint=run_copy.trunk.fingerprint,
    )
    _, domain, centroid = run_copy.experts["legal-e1"]
    reg = ExpertRegistration(
        expert_id="legal-e1",
        domain_id=domain,
        sha256="0" * 64,
        trunk_fingerprint=run_copy.trunk.fingerprint,
        centroid=centroid,
    )
    replayed = stage.process(Message(reg.to_json(), topic="p.experts"))  # already evaluated:
    step = [r.arrived_expert for r in run_copy.history.rows("ours")].index("legal-e1")
    assert [e.key for e in replayed] == [f"ours:{s}" for s in range(step + 1)]  # rows again
    other = ExpertRegistration(
        expert_id="z-e1",
        domain_id="z",
        sha256="0" * 64,
        trunk_fingerprint="f" * 64,
        centroid=centroid,
    )
    [emit] = stage.process(Message(other.to_json(), topic="p.experts", offset=7))
    assert emit.topic == "dlq" and emit.record.reason == "wrong_trunk"
    assert stage.process(Message(b"\xff", topic="p.dlq")) == []  # never dead-letter the dlq
    stage.process(
        Message(
            TrainStatus(job_id="j", domain_id="d", state="started").to_json(),
            topic="p.train.status",
        )
    )
    again = MonitorStage("p", run_copy.history, run_copy.heldout, LiveState())
    again.restore(json.loads(json.dumps(stage.snapshot())))
    assert again.snapshot()["live"]["jobs"] == stage.snapshot()["live"]["jobs"]
    assert again.snapshot()["live"]["dead_letters"] == {"undecodable_dead_letter": 1}


def test_worx_monitor_command_follows_the_stream(
    small_run: SmallRun, kafka_conf: dict, topics: Topics, tmp_path: Path
) -> None:
    """The real command: a registration on the topic becomes rows on worx.metrics and /metrics."""
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    from experts.records import ExpertRegistration
    from router.embed import default_embedder

    shutil.copytree(small_run.root / "heldout", tmp_path / "heldout")
    shutil.copytree(small_run.root / "store", tmp_path / "store")
    env = {
        **os.environ,
        "WORX_KAFKA__BOOTSTRAP_SERVERS": kafka_conf["bootstrap.servers"],
        "WORX_KAFKA__TOPIC_PREFIX": topics.prefix,
        "WORX_KAFKA__SESSION_TIMEOUT_MS": "6000",
        "WORX_MONITOR__HELDOUT_SEED": "1",
        "WORX_MONITOR__HELDOUT_PER_DOMAIN": "6",
        "WORX_MONITOR__MAX_TOKENS": "64",
    }
    cmd = [
        sys.executable,
        "-m",
        "topology.commands",
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
    # another deployment's monitor on this cluster stopped during its group join (as `worx
    # up`'s is in tests/e2e/test_up.py), in the group every monitor shared before groups
    # followed the topic prefix: this one must not wait for it
    leave_mid_join(kafka_conf, "worx-monitor", [topics.docs])
    log = tmp_path / "monitor.log"  # a file, not a pipe: nobody drains a pipe meanwhile
    with log.open("w") as stderr:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("dashboard on http://127.0.0.1:"), line
        url = line.split()[2]
        texts = small_run.train_texts["legal"]
        centroid = default_embedder().embed(texts).mean(axis=0)
        centroid = (centroid / np.linalg.norm(centroid)).tolist()
        reg = ExpertRegistration(
            expert_id="legal-e1",
            domain_id="legal",
            sha256=small_run.store.manifest("legal-e1").sha256,
            trunk_fingerprint=small_run.trunk.fingerprint,
            centroid=centroid,
        )
        producer = Producer(kafka_conf)
        domain = DomainRecord(
            domain_id="legal",
            centroid=centroid,
            threshold=0.5,
            size=6,
            cohesion=0.8,
            label_hint="Court rulings",
        )
        producer.produce(topics.domains, domain.to_json(), key="legal")
        producer.produce(topics.experts, reg.to_json(), key="legal-e1")
        assert producer.flush(15) == 0

        def has_step_1(values: list[bytes]) -> bool:
            return any(EvalRow.from_json(v).step == 1 for v in values)

        rows = [EvalRow.from_json(v) for v in read_until(kafka_conf, topics.metrics, has_step_1)]
        assert [r.step for r in rows if r.run == "ours"][:2] == [0, 1]
        with urllib.request.urlopen(url + "metrics", timeout=10) as res:
            text = res.read().decode()
        assert 'worx_eval_steps{run="ours"} 2.0' in text
        assert 'worx_stream_messages_total{topic="experts"} 1.0' in text
        # the domain table's label names the column (the follower thread may lag the rows)
        deadline = time.monotonic() + 60
        while True:
            with urllib.request.urlopen(url + "api/state", timeout=10) as res:
                ours = json.loads(res.read())["runs"]["ours"]
            if "Court rulings" in ours["domain_names"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # polling the HTTP API: the follower has no event to await
        assert ours["domain_names"][ours["domains"].index("legal")] == "Court rulings"
        assert json.loads((tmp_path / "domain_labels.json").read_text()) == {
            "legal": "Court rulings"
        }
    except BaseException as exc:
        exc.add_note(f"worx monitor's stderr (last 4000 characters):\n{log.read_text()[-4000:]}")
        raise
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-4000:]
