"""The PyFlink job (`worx flink run`) on the embedded broker, against the plain runtime.

One stream (the bundled corpus, phased: legal, then biomedical, then scripture) runs
three ways: through the stage objects in-process as the plain runtime feeds them (the
reference), through `worx flink run` at parallelism 1, and at parallelism 2 with the job
SIGKILLed (every process: the JVM and its Python workers) after its first training job
and restarted from its newest completed checkpoint. Each job start costs 12-15 s before
its first output, so the module runs the two jobs once and each test asserts on them.

Runs in the Flink venv (README "Flink"); skipped where apache-flink is not installed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyflink", reason='apache-flink is not installed (README "Flink" venv)')

from ingest.records import DeadLetter, Doc  # noqa: E402
from monitor.cluster_agreement import nmi_purity  # noqa: E402
from router.config import RouterConfig  # noqa: E402
from router.records import DomainRecord, RoutedDoc, TrainJob  # noqa: E402
from tests.support.kafka import produce, publish_many, read_messages  # noqa: E402
from tests.support.route_discover import Loop  # noqa: E402
from topology.composition.topics import Topics, ensure_topics  # noqa: E402
from topology.flink.checkpoints import latest_checkpoint  # noqa: E402
from worx.scenario import Scenario  # noqa: E402

pytestmark = [pytest.mark.broker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
JOB_DOCS = 80
PER_DOMAIN = 150
ORDER = ["legal", "biomedical", "scripture"]
# values no runtime may route: each must come out as one dead letter, the stream going on
HOSTILE = [
    b"not json",
    b"",
    b"[1, 2]",
    b'{"doc_id": 5, "text": "an id that is not a string"}',
    b'{"doc_id": "h-no-text"}',
    b"\xff\xfe\x00 not utf-8",
    b'{"doc_id": "h-deep", "text": ' + b"[" * 2000 + b"]" * 2000 + b"}",
]


class FlinkRun:
    """`worx flink run` as a subprocess in its own process group (JVM and workers too)."""

    def __init__(self, servers: str, prefix: str, workdir: Path, parallelism: int) -> None:
        self.command = [
            sys.executable, "-m", "topology.commands", "flink", "run",
            "--bootstrap-servers", servers,
            "--parallelism", str(parallelism),
            "--checkpoint-dir", str(workdir / "checkpoints"),
            "--checkpoint-interval-ms", "2000",
            "--compact-every", "100",
        ]  # fmt: skip
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "WORX_KAFKA__TOPIC_PREFIX": prefix,
            "WORX_DATA_DIR": str(workdir),
            "WORX_ROUTER__JOB_DOCS": str(JOB_DOCS),
        }
        self.workdir = workdir
        self.starts = 0
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.starts += 1
        log = open(self.workdir / f"run-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL every process of the job (the CLI, the JVM, the Python workers)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _group_alive(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _group_alive(self.proc.pid), "a process of the killed job survived"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None and _group_alive(self.proc.pid):
                os.killpg(self.proc.pid, signal.SIGKILL)
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        if _group_alive(self.proc.pid):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def log_tail(self) -> str:
        path = self.workdir / f"run-{self.starts}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _docs(stream) -> list[Doc]:
    """Stamped as the reference's Loop stamps them (its entry order: created_ms = i + 1)."""
    return [
        Doc(doc_id=d.doc_id, text=d.text, label=d.domain, created_ms=i + 1)
        for i, d in enumerate(stream)
    ]


def _spread(conf: dict, topic: str, docs: list[Doc]) -> None:
    """Produce ``docs`` alternately to partitions 0 and 1 (both route instances work)."""
    produce(conf, topic, docs[0::2], partition=0)
    produce(conf, topic, docs[1::2], partition=1)


def _read(conf: dict, topics: Topics, until, timeout_s: float = 240.0, dead=None):
    """(routed doc ids, jobs by id, latest domain rows) once ``until(ids, jobs, rows)``;
    the dead letters read go into ``dead`` (a list) when given."""
    state: dict = {"ids": set(), "jobs": {}, "domains": {}, "n": 0}
    dead = [] if dead is None else dead

    def done(messages) -> bool:
        for msg in messages[state["n"] :]:
            if msg.topic() == topics.routed:
                state["ids"].add(RoutedDoc.from_json(msg.value(), strict=False).doc_id)
            elif msg.topic() == topics.train:
                job = TrainJob.from_json(msg.value(), strict=False)
                state["jobs"].setdefault(job.job_id, []).append(job)
            elif msg.topic() == topics.domains and msg.value() is not None:
                row = DomainRecord.from_json(msg.value(), strict=False)
                held = state["domains"].get(row.domain_id)
                if held is None or row.version >= held.version:
                    state["domains"][row.domain_id] = row
            elif msg.topic() == topics.dlq:
                dead.append(DeadLetter.from_json(msg.value(), strict=False))
        state["n"] = len(messages)
        return until(state["ids"], state["jobs"], state["domains"])

    read_messages(conf, [topics.routed, topics.train, topics.domains, topics.dlq], done, timeout_s)
    return state["ids"], state["jobs"], state["domains"]


def _assignment(rows: dict, vectors: np.ndarray) -> list:
    """Each document's nearest domain centroid (cosine), as bench/discovery.py's ``nmi``:
    the domains found, without the thresholds (whose rows may be a version apart)."""
    ids = sorted(rows)
    centroids = np.array([rows[d].centroid for d in ids])  # (domains, dim)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)  # (docs, dim)
    return [ids[i] for i in np.argmax(unit @ centroids.T, axis=1)]


@pytest.fixture(scope="module")
def runs(broker, tmp_path_factory) -> dict:
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    config = RouterConfig(job_docs=JOB_DOCS)
    stream = list(Scenario.from_directory().phased(ORDER, per_domain=PER_DOMAIN, seed=4))
    docs = _docs(stream)
    ids = {d.doc_id for d in docs}
    reference = Loop(config)  # the stage objects, fed as the plain runtime feeds them
    for doc in stream:
        reference.feed(doc)
    ref_jobs = {j.job_id: j for j in reference.jobs()}
    ref_rows = {r.domain_id: r for r in reference.records(DomainRecord)}
    vectors = reference.route.embedder.embed([d.text for d in docs])
    out: dict = {"ids": ids, "ref_jobs": ref_jobs, "labels": [d.label for d in docs]}
    out["reference"] = _assignment(ref_rows, vectors)

    def complete(seen: set, jobs: dict, rows: dict) -> bool:
        """Every document routed, as many jobs as the reference, each job's row read."""
        found = {copies[0].domain_id for copies in jobs.values()}
        return seen >= ids and len(jobs) >= len(ref_jobs) and found <= set(rows)

    # parallelism 1: one route instance reads both partitions
    topics = Topics("flink-p1")
    ensure_topics(conf, prefix=topics.prefix, partitions=2)
    job = FlinkRun(broker.bootstrap_servers, topics.prefix, tmp_path_factory.mktemp("p1"), 1)
    publish_many(conf, topics.docs, [(f"h{i}", value) for i, value in enumerate(HOSTILE)])
    _spread(conf, topics.docs, docs)
    job.start()
    dead: list[DeadLetter] = []
    try:
        seen, jobs, rows = _read(
            conf, topics, lambda s, j, r: complete(s, j, r) and len(dead) >= len(HOSTILE),
            dead=dead,
        )  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- worx flink run:\n{job.log_tail()}") from None
    finally:
        job.stop()
    out["p1"] = {"ids": seen, "jobs": jobs, "assignment": _assignment(rows, vectors)}
    out["dead"] = dead

    # parallelism 2: both partitions; SIGKILL after the first job, restart from a checkpoint
    topics = Topics("flink-p2")
    ensure_topics(conf, prefix=topics.prefix, partitions=2)
    workdir = tmp_path_factory.mktemp("p2")
    job = FlinkRun(broker.bootstrap_servers, topics.prefix, workdir, 2)
    half = PER_DOMAIN + PER_DOMAIN // 2  # into the second domain
    _spread(conf, topics.docs, docs[:half])
    job.start()
    try:
        _, first_jobs, _ = _read(conf, topics, lambda s, j, r: len(j) >= 1)
        seen_at = time.time()
        # a checkpoint completed after the first job left: the restart must not redo it
        deadline = time.monotonic() + 60
        chk = None
        while time.monotonic() < deadline:
            chk = latest_checkpoint((workdir / "checkpoints").as_uri())
            if chk and (Path(chk[len("file://") :]) / "_metadata").stat().st_mtime > seen_at:
                break
            time.sleep(0.5)
        job.kill()
        out["killed_after_jobs"] = len(first_jobs)
        out["restored_from"] = latest_checkpoint((workdir / "checkpoints").as_uri())
        _spread(conf, topics.docs, docs[half:])
        job.start()
        seen, jobs, rows = _read(conf, topics, complete)
        out["restart_log"] = (workdir / "run-2.log").read_text(errors="replace")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- worx flink run:\n{job.log_tail()}") from None
    finally:
        job.stop()
    out["p2"] = {"ids": seen, "jobs": jobs, "assignment": _assignment(rows, vectors)}
    return out


def _one_job_per_domain(jobs: dict) -> Counter:
    return Counter(copies[0].domain_id for copies in jobs.values())


def test_flink_finds_the_plain_runtimes_domains_and_loses_no_document(runs):
    p1 = runs["p1"]
    assert p1["ids"] >= runs["ids"]  # every document routed at least once
    assert nmi_purity(runs["reference"], p1["assignment"])[0] >= 0.99
    assert set(p1["jobs"]) == set(runs["ref_jobs"])  # the same jobs, under the same ids
    per_domain = _one_job_per_domain(p1["jobs"])
    assert len(per_domain) == len(ORDER) and set(per_domain.values()) == {1}


def test_flink_dead_letters_what_it_cannot_route_and_goes_on(runs):
    dead = runs["dead"]
    assert len(dead) == len(HOSTILE)  # one each: none lost, none twice
    assert {d.source_topic for d in dead} == {"flink-p1.docs"}
    assert {d.stage for d in dead} == {"route"}
    assert all(d.reason and d.detail for d in dead)
    originals = sorted(d.original() for d in dead)
    assert originals == sorted(HOSTILE)  # each with its own bytes
    assert runs["p1"]["ids"] >= runs["ids"]  # the documents around them all routed


def test_flink_killed_mid_stream_restarts_from_its_checkpoint(runs):
    assert runs["killed_after_jobs"] >= 1 and runs["restored_from"], "no checkpoint to restore"
    assert "restored from" in runs["restart_log"]
    p2 = runs["p2"]
    assert p2["ids"] >= runs["ids"]  # nothing lost across the kill
    per_domain = _one_job_per_domain(p2["jobs"])
    assert len(per_domain) == len(ORDER)
    assert set(per_domain.values()) == {1}  # no domain got a second job under another id


def test_parallelism_two_assigns_as_parallelism_one(runs):
    """Discover merges the partitions by document (topology.flink.ordering), so two route
    instances, and a SIGKILL with a restore between, give it the order one gives it."""
    one, two = runs["p1"]["assignment"], runs["p2"]["assignment"]
    assert len(set(one)) == len(ORDER)
    assert two == one  # every document in the same domain, under the same domain id
    assert set(runs["p2"]["jobs"]) == set(runs["p1"]["jobs"])  # the same jobs, same ids
