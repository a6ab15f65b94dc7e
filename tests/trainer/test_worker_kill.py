"""`worx trainer` as a real process, SIGKILLed mid-job on the real embedded broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from experts.records import ExpertRegistration
from experts.store import ExpertStore
from tests.support.kafka import produce_docs, publish, read_records
from tests.support.trainer import corpus_texts, make_job
from trainer.records import TrainStatus
from trainer.worker import expert_id_for

REPO = Path(__file__).resolve().parents[2]


def _start_worker(config: Path, log: Path, **overrides: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORX_")}
    env["WORX_CONFIG"] = str(config)
    env.update(overrides)
    handle = log.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "topology.commands", "trainer", "--no-progress"],
        cwd=REPO,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )


def test_sigkill_mid_job_resumes_from_checkpoint_and_registers_one_expert(
    broker, kafka_conf, topics, trunk_dir, trunk, tmp_path
):
    placed = produce_docs(kafka_conf, topics.docs, corpus_texts("biomedical", 40), "bio")
    job = make_job(topics.docs, placed, "job-kill", heldout=6)
    config = tmp_path / "worx.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n'
        f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n'
        f'topic_prefix = "{topics.prefix}"\n'
        "session_timeout_ms = 6000\npartitions = 2\n"
        f'[experts]\ntrunk_dir = "{trunk_dir}"\n'
        "[trainer]\nmax_steps = 100000\nseq_len = 32\nmicro_batch_size = 4\ngrad_accum_steps = 1\n"
        "lr = 0.003\ncheckpoint_every = 5\nstatus_every = 5\neval_every = 100\npatience = 10\n"
        f'fetch_timeout_s = 10\ngroup_id = "trainer-{topics.prefix}"\n'
    )
    log = tmp_path / "worker.log"
    publish(kafka_conf, topics.train, job.job_id, job.to_json())

    first = _start_worker(config, log)
    try:
        # wait for proof of a checkpoint (step events follow the checkpoint of the same step)
        read_records(
            kafka_conf,
            topics.train_status,
            TrainStatus,
            lambda rs: any(r.state == "step" and r.step >= 10 for r in rs),
            timeout_s=120,
        )
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    jobs_dir = tmp_path / "data" / "trainer" / "jobs" / "job-kill"
    assert not (jobs_dir / "outcome.json").exists()
    checkpointed = json.loads((jobs_dir / "latest.json").read_text())["step"]
    assert checkpointed >= 10

    # the first run could never finish (100000 steps); the restarted one stops 20 steps later
    total = checkpointed + 20
    second = _start_worker(config, log, WORX_TRAINER__MAX_STEPS=str(total))
    try:
        statuses = read_records(
            kafka_conf,
            topics.train_status,
            TrainStatus,
            lambda rs: any(r.state == "finished" for r in rs),
            timeout_s=150,
        )
        starts = [s for s in statuses if s.state == "started"]
        assert len(starts) == 2, log.read_text()[-3000:]
        assert starts[0].figures["resumed_from_step"] == 0
        resumed_from = starts[1].figures["resumed_from_step"]
        assert resumed_from == checkpointed  # resumed from its checkpoint, not from scratch
        finished = [s for s in statuses if s.state == "finished"]
        assert len(finished) == 1 and finished[0].expert_id == expert_id_for("job-kill")

        # replaying the job (at-least-once delivery) creates no second expert
        publish(kafka_conf, topics.train, job.job_id, job.to_json())
        statuses = read_records(
            kafka_conf,
            topics.train_status,
            TrainStatus,
            lambda rs: any(r.state == "skipped" for r in rs),
            timeout_s=60,
        )
        skipped = next(s for s in statuses if s.state == "skipped")
        assert (
            skipped.expert_id == expert_id_for("job-kill") and skipped.reason == "already finished"
        )
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0, log.read_text()[-3000:]

    store = ExpertStore(tmp_path / "data" / "experts", trunk.fingerprint)
    assert store.ids() == [expert_id_for("job-kill")]
    manifest = store.manifest(expert_id_for("job-kill"))
    assert manifest.summary["resumed_from_step"] == resumed_from
    assert manifest.summary["steps"] == total
    assert manifest.summary["tokens_seen"] == total * 4 * 32  # no step counted twice or lost
    registrations = read_records(
        kafka_conf, topics.experts, ExpertRegistration, lambda rs: len(rs) >= 1
    )
    assert [r.expert_id for r in registrations] == [expert_id_for("job-kill")]
    assert registrations[0].sha256 == manifest.sha256
    assert not (jobs_dir / "latest.json").exists()  # checkpoints are cleared once the job ended
