"""Parallel trainers: `worx trainer` processes in one consumer group on the real embedded
broker, sharing only the broker and an S3 bucket (moto's server on 127.0.0.1), each with
its own data directory as on its own machine, ``worx.train`` made with two partitions.

Two workers split the partitions of ``worx.train`` and train at the same time; one is
SIGKILLed mid-job and the other finishes that job too. Every job yields exactly one
expert and one registration. And when a partition moves while its job is still being
trained, the write-once store decides: the slower worker announces the winner's expert
instead of failing the job.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from experts.records import ExpertRegistration
from experts.store import ExpertStore
from experts.store_open import open_store
from tests.support.experts import randomize
from tests.support.kafka import drain, produce_docs, read_records
from tests.support.s3 import S3Server
from tests.support.trainer import corpus_texts, make_job
from topology.composition.topics import Topics, ensure_topics
from topology.runtimes.train_worker import TrainWorker
from trainer.config import TrainerConfig
from trainer.records import TrainStatus
from trainer.worker import expert_id_for

REPO = Path(__file__).resolve().parents[2]
ASSIGNED = re.compile(r"assigned partitions \[([0-9, ]*)\]")


def _start_worker(config: Path, data_dir: Path, s3: S3Server, **overrides: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORX_", "AWS_"))}
    env.update(s3.env, WORX_CONFIG=str(config), WORX_DATA_DIR=str(data_dir), **overrides)
    data_dir.mkdir(parents=True, exist_ok=True)
    log = (data_dir / "worker.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "topology.commands", "trainer", "--no-progress"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return process


def _assigned(data_dir: Path) -> list[int] | None:
    """The partitions the worker's log last said it owns."""
    found = ASSIGNED.findall((data_dir / "worker.log").read_text(errors="replace"))
    return [int(p) for p in found[-1].split(",") if p.strip()] if found else None


def _split(a: list[int] | None, b: list[int] | None) -> tuple[list[int], list[int]] | None:
    return (a, b) if a and b and len(a) == len(b) == 1 and a != b else None


def _wait_for(condition, timeout_s: float, what: str, logs: list[Path]):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    tails = "\n".join(p.read_text(errors="replace")[-2000:] for p in logs if p.exists())
    raise AssertionError(f"timed out waiting for {what}:\n{tails}")


def _jobs(data_dir: Path, name: str) -> set[str]:
    """Job ids with ``name`` (``latest.json``: a checkpoint, ``outcome.json``: ended)."""
    root = data_dir / "trainer" / "jobs"
    return {p.parent.name for p in root.glob(f"*/{name}")} if root.is_dir() else set()


def _topics_with_two_train_partitions(conf: dict) -> Topics:
    """Parallel trainers need ``worx.train`` created with a partition per trainer
    (``kafka.train_partitions``, one by default: docs/deployment.md)."""
    prefix = f"par-{uuid.uuid4().hex[:8]}"
    ensure_topics(conf, prefix=prefix, partitions=2, train_partitions=2)
    return Topics(prefix)


def test_two_trainers_split_the_jobs_and_one_finishes_the_job_of_the_other_killed_mid_job(
    broker, kafka_conf, trunk_dir, trunk, tmp_path, monkeypatch
):
    topics = _topics_with_two_train_partitions(kafka_conf)
    placed = produce_docs(kafka_conf, topics.docs, corpus_texts("biomedical", 24), "bio")
    jobs = [make_job(topics.docs, placed, f"job-par-{i}", heldout=4) for i in range(3)]
    with S3Server() as s3:
        for name, value in s3.env.items():  # this process reads the bucket at the end
            monkeypatch.setenv(name, value)
        url = f"s3://{s3.new_bucket()}/experts"
        config = tmp_path / "worx.toml"
        config.write_text(
            f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n'
            f'topic_prefix = "{topics.prefix}"\nsession_timeout_ms = 6000\npartitions = 2\n'
            f'[experts]\ntrunk_dir = "{trunk_dir}"\nstore_url = "{url}"\n'
            "[trainer]\nmax_steps = 8\nseq_len = 32\nmicro_batch_size = 4\n"
            "grad_accum_steps = 1\nlr = 0.01\ncheckpoint_every = 2\nstatus_every = 2\n"
            "eval_every = 100\npatience = 10\ngate_margin = 0.0\nstart_candidates = 0\n"
            f'fetch_timeout_s = 10\ngroup_id = "trainer-{topics.prefix}"\n'
        )
        doomed_dir, survivor_dir = tmp_path / "machine-a", tmp_path / "machine-b"
        logs = [doomed_dir / "worker.log", survivor_dir / "worker.log"]
        # the doomed worker's first job can never end, so it is surely killed mid-job
        doomed = _start_worker(config, doomed_dir, s3, WORX_TRAINER__MAX_STEPS="100000")
        survivor = _start_worker(config, survivor_dir, s3)
        try:
            # both members joined and split the two partitions before any job exists
            owned = _wait_for(
                lambda: _split(_assigned(doomed_dir), _assigned(survivor_dir)),
                90,
                "one partition each",
                logs,
            )
            producer = Producer(kafka_conf)
            for index, job in enumerate(jobs):
                producer.produce(topics.train, job.to_json(), key=job.job_id, partition=index % 2)
            assert producer.flush(15) == 0
            doomed_jobs = {j.job_id for i, j in enumerate(jobs) if i % 2 == owned[0][0]}
            # at the same time: the doomed worker checkpointed its first job while the
            # survivor ended one of its own
            _wait_for(
                lambda: _jobs(doomed_dir, "latest.json") and _jobs(survivor_dir, "outcome.json"),
                180,
                "both workers training",
                logs,
            )
            (killed_job,) = _jobs(doomed_dir, "latest.json")
            assert killed_job in doomed_jobs and not _jobs(doomed_dir, "outcome.json")
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)

            statuses = read_records(
                kafka_conf,
                topics.train_status,
                TrainStatus,
                lambda rs: (
                    {r.job_id for r in rs if r.state == "finished"} >= {j.job_id for j in jobs}
                ),
                timeout_s=240,
            )
        finally:
            for process in (doomed, survivor):
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            assert survivor.wait(30) == 0, logs[1].read_text()[-3000:]
            if doomed.poll() is None:
                doomed.kill()
        store = open_store(url, tmp_path / "inspect-cache", trunk.fingerprint)
        manifests = {e: store.manifest(e) for e in store.ids()}
    finished = collections.Counter(s.job_id for s in statuses if s.state == "finished")
    assert finished == {j.job_id: 1 for j in jobs}
    assert _jobs(survivor_dir, "outcome.json") == {j.job_id for j in jobs}  # the killed job too
    assert sorted(manifests) == sorted(expert_id_for(j.job_id) for j in jobs)
    assert {m.job_id for m in manifests.values()} == {j.job_id for j in jobs}
    registrations = [
        ExpertRegistration.from_json(value) for _, value in drain(kafka_conf, topics.experts)
    ]
    assert collections.Counter(r.expert_id for r in registrations) == {e: 1 for e in manifests}
    assert all(r.sha256 == manifests[r.expert_id].sha256 for r in registrations)
    killed_starts = [s for s in statuses if s.job_id == killed_job and s.state == "started"]
    assert len(killed_starts) == 2  # begun by the killed worker, begun again by the survivor


CFG = TrainerConfig(
    max_steps=6,
    seq_len=32,
    micro_batch_size=4,
    grad_accum_steps=1,
    lr=1e-2,
    eval_every=6,
    checkpoint_every=6,
    status_every=3,
    gate_margin=0.0,
    fetch_timeout_s=5.0,
    progress=False,
)


def test_a_job_whose_expert_another_worker_stored_meanwhile_ends_with_that_expert(
    kafka_conf, topics, trunk, tmp_path
):
    """The partition moved while this worker trained: the other worker stored the job's
    expert first. This worker's put is refused (other bytes); it announces the stored expert
    (same id and sha256 as the winner's registration: a no-op downstream) and ends the job."""
    placed = produce_docs(kafka_conf, topics.docs, corpus_texts("biomedical", 24), "race")
    job = make_job(topics.docs, placed, "job-raced", heldout=4)
    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    worker = TrainWorker(
        kafka_conf, topics, trunk, store, dataclasses.replace(CFG), tmp_path / "jobs", 6000
    )
    fetch = worker.jobs.fetch

    def fetch_while_the_other_worker_finishes(job_to_fetch):
        docs = fetch(job_to_fetch)
        from experts.expert import Expert, ExpertConfig

        other = Expert(
            ExpertConfig(kind="adapter", layers=(0,), rank=2), hidden_size=trunk.hidden_size
        )
        other_store = ExpertStore(tmp_path / "store", trunk.fingerprint)  # the other process
        other_store.put(
            expert_id_for(job.job_id), randomize(other, 7), job.domain_id, job.centroid,
            job_id=job.job_id,
        )  # fmt: skip
        return docs

    worker.jobs.fetch = fetch_while_the_other_worker_finishes
    try:
        assert worker.handle(job) == "finished"
    finally:
        worker.publisher.close()
    stored = store.manifest(expert_id_for(job.job_id))
    statuses = read_records(
        kafka_conf,
        topics.train_status,
        TrainStatus,
        lambda rs: any(r.state == "finished" for r in rs),
    )
    assert [s.state for s in statuses if s.state in ("finished", "failed")] == ["finished"]
    registrations = read_records(
        kafka_conf, topics.experts, ExpertRegistration, lambda rs: len(rs) >= 1
    )
    assert [(r.expert_id, r.sha256) for r in registrations] == [(stored.expert_id, stored.sha256)]
