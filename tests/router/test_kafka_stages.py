"""Route and discover on the real embedded broker: agreement across workers, SIGKILL restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ingest.records import Doc
from router.config import RouterConfig
from router.embed import default_embedder
from router.records import DomainRecord, RoutedDoc, TrainJob
from router.route import RouteStage
from router.table import DomainTable
from tests.support.kafka import TopicReader, publish_with_partitions
from tests.support.processes import REPO
from tests.support.route_discover import Loop
from topology.composition.topics import Topics
from topology.runtimes.stage_runner import StageRunner
from topology.runtimes.table_follower import TableFollower
from worx.scenario import Scenario
from worx.stage import Message

pytestmark = pytest.mark.broker


def test_two_route_workers_agree_after_a_domain_is_added(kafka_conf: dict, topics: Topics):
    config = RouterConfig()
    embedder = default_embedder(config)
    scenario = Scenario.from_directory()
    legal = scenario.domains["legal"][:60]
    centroid = embedder.embed([d.text for d in legal]).mean(axis=0)
    centroid /= np.linalg.norm(centroid)
    row = DomainRecord("dom-legal", centroid.tolist(), 0.15, 60, 0.4, core_threshold=0.3)
    publish_with_partitions(kafka_conf, topics.domains, [(row.domain_id, row.to_json(), None)])

    workers, followers, threads = [], [], []
    stop = threading.Event()
    for _ in range(2):
        stage = RouteStage(config, embedder=embedder)
        followers.append(TableFollower(kafka_conf, topics.domains, stage.table.apply).start())
        runner = StageRunner(
            stage,
            kafka_conf,
            topics,
            [topics.docs],
            f"{topics.prefix}-route",
            "route",
            batch_size=20,
            session_timeout_ms=6000,
        )
        workers.append(runner)
        threads.append(threading.Thread(target=runner.run, args=(stop,), daemon=True))
    for runner in workers:
        assert runner.stage.table.wait_for(lambda t: t.version >= 1, timeout=30)
    for thread in threads:
        thread.start()

    reference = DomainTable()
    reference.apply(row)
    mixed = scenario.mixture(400, ["legal", "news", "scripture"], seed=3)
    docs = [Doc(doc_id=d.doc_id, text=d.text, label=d.domain) for d in mixed]
    reader = TopicReader(kafka_conf, topics.routed, RoutedDoc, partitions=2)
    try:
        sent = 0
        # keep feeding both partitions until each worker has done part of the work
        while sent < len(docs) and (sent == 0 or min(w.consumed for w in workers) == 0):
            chunk = docs[sent : sent + 40]
            publish_with_partitions(
                kafka_conf,
                topics.docs,
                [(d.doc_id, d.to_json(), i % 2) for i, d in enumerate(chunk)],
            )
            sent += len(chunk)
            reader.until(lambda records, n=sent: len({r.doc_id for r in records}) >= n)
        assert min(w.consumed for w in workers) > 0, "one worker never got a partition"
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        for follower in followers:
            follower.stop()
        reader.close()
    by_id = {d.doc_id: d for d in docs[:sent]}
    decided = {r.doc_id: r for r in reader.records}
    assert set(decided) == set(by_id)
    assert Counter(r.docs_partition for r in decided.values()).keys() == {0, 1}
    for doc_id, routed in decided.items():
        assert routed.domain_version == 1
        expected, _ = reference.route(embedder.embed([by_id[doc_id].text])[0])
        assert routed.domain_id == expected, doc_id
    assert sum(r.domain_id == "dom-legal" for r in decided.values()) > 0
    assert sum(r.domain_id is None for r in decided.values()) > 0


def _discover_process(kafka_conf: dict, topics: Topics, snapshot: Path, env: dict):
    command = [
        sys.executable,
        "-m",
        "topology.commands",
        "discover",
        "--bootstrap-servers",
        kafka_conf["bootstrap.servers"],
        "--snapshot",
        str(snapshot),
        "--batch-size",
        "25",
    ]
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def test_discover_restart_after_sigkill_loses_nothing_duplicates_nothing(
    kafka_conf: dict, topics: Topics, tmp_path: Path
):
    config = RouterConfig(job_docs=80)
    scenario = Scenario.from_directory()
    stream = list(scenario.phased(["legal", "biomedical", "scripture"], per_domain=170, seed=4))
    # what an uninterrupted discover makes of this stream, in-process
    reference = Loop(config, follow=False)  # as below: routed by a worker that knows nothing
    for doc in stream:
        reference.feed(doc)
    expected_jobs = {j.job_id for j in reference.jobs()}
    assert len(expected_jobs) == 3

    # the same routing decisions, on the real topic (one partition: a fixed order)
    route = RouteStage(config)
    routed = []
    for offset, doc in enumerate(stream):
        msg = Message(b"", topic="t.docs", partition=0, offset=offset)
        [emit] = route.process(msg, Doc(doc_id=doc.doc_id, text=doc.text, label=doc.domain))
        routed.append((doc.doc_id, emit.record.to_json(), 0))
    env = {
        **os.environ,
        "WORX_KAFKA__TOPIC_PREFIX": topics.prefix,
        "WORX_ROUTER__JOB_DOCS": "80",
        "PYTHONPATH": str(REPO),
    }
    snapshot = tmp_path / "discover.json"
    jobs = TopicReader(kafka_conf, topics.train, TrainJob)
    half = 260  # past the first domain's job, before the second's
    publish_with_partitions(kafka_conf, topics.routed, routed[:half])
    first = _discover_process(kafka_conf, topics, snapshot, env)
    try:
        jobs.until(lambda records: len(records) >= 1, timeout=120)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        assert snapshot.exists()
        publish_with_partitions(kafka_conf, topics.routed, routed[half:])
        second = _discover_process(kafka_conf, topics, snapshot, {**env})
        try:
            jobs.until(lambda records: {r.job_id for r in records} >= expected_jobs, timeout=180)
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
        jobs.close()
    seen = {r.job_id for r in jobs.records}
    assert seen == expected_jobs  # nothing lost (the jobs cover the same documents)
    by_domain = Counter(r.domain_id for r in {r.job_id: r for r in jobs.records}.values())
    assert set(by_domain.values()) == {1}  # no domain got a second job under another id
