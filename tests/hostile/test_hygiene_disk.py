"""Disk and memory that must not only grow, and a checkpoint swap that never loses one."""

from __future__ import annotations

import gc
import os
import sys
import time
import weakref
from pathlib import Path

import pytest
import torch

import trainer.checkpoint as checkpoint
from experts.expert import Expert, ExpertConfig
from experts.store import ExpertStore
from experts.trunk import load_trunk
from monitor.evaluator import Evaluator
from monitor.heldout import HeldoutSets
from monitor.history import MatrixHistory
from tests.support.experts import randomize, trunk_dirs  # noqa: F401 - a shared fixture
from topology.loop.supervisor import ChildSpec, Supervisor, rotate_log
from trainer.config import TrainerConfig
from trainer.job_retention import prune_ended_jobs


def _wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


@pytest.mark.slow
def test_supervisor_logs_rotate_by_size_and_the_child_keeps_writing(tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        "sys.stdout.write('x' * 1500); sys.stdout.flush()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "print('after')\n"
    )
    with Supervisor(tmp_path / "logs", log_max_bytes=1000, log_keep=2) as sup:
        child = sup.start(ChildSpec("chatty", [sys.executable, "-c", script], oneshot=True))
        _wait_for(lambda: child.log_path.stat().st_size >= 1500)
        sup.poll()  # rotates: the child is still running, its descriptor still open
        go.touch()
        child.process.wait(30)
    logs = tmp_path / "logs"
    assert (logs / "chatty.log.1").read_text() == "x" * 1500
    assert (logs / "chatty.log").read_text() == "after\n"  # appended at the new end, no hole
    for _ in range(3):
        (logs / "chatty.log").write_text("y" * 2000)
        assert rotate_log(logs / "chatty.log", 1000, keep=2)
    assert sorted(p.name for p in logs.iterdir()) == ["chatty.log", "chatty.log.1", "chatty.log.2"]


def _save(job_dir: Path, step: int, value: float) -> Path:
    weights = {"w": torch.full((4,), value)}
    return checkpoint.save_checkpoint(
        job_dir, step, weights, {"state": {}, "param_groups": []}, {"epoch": 0}, {}, keep=2
    )


def test_a_checkpoint_swap_killed_midway_leaves_the_named_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job"
    _save(job, 10, 1.0)

    def killed(src, dst):  # the process dies at the rename of the new checkpoint
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(checkpoint.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        _save(job, 10, 2.0)  # the same step again, as after a resume
    monkeypatch.undo()
    survivor = checkpoint.load_latest(job)
    assert survivor is not None and survivor.step == 10
    assert torch.equal(survivor.weights["w"], torch.full((4,), 1.0))
    for step in (20, 30, 40):
        _save(job, step, float(step))
    assert checkpoint.load_latest(job).step == 40
    assert sorted(p.name[:13] for p in job.glob("ckpt-*")) == ["ckpt-00000030", "ckpt-00000040"]


def test_ended_job_directories_are_kept_by_count_and_age(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    now = time.time()
    for i in range(5):
        (jobs / f"job-{i}").mkdir(parents=True)
        outcome = jobs / f"job-{i}" / "outcome.json"
        outcome.write_text("{}")
        os.utime(outcome, (now - (5 - i) * 86400, now - (5 - i) * 86400))  # job-4 newest
    (jobs / "running").mkdir()  # no outcome: never touched, however old
    os.utime(jobs / "running", (now - 1e8, now - 1e8))
    assert sorted(prune_ended_jobs(jobs, keep=3, max_age_s=0, now=now)) == ["job-0", "job-1"]
    assert prune_ended_jobs(jobs, keep=0, max_age_s=2.5 * 86400, now=now) == ["job-2"]
    assert sorted(p.name for p in jobs.iterdir()) == ["job-3", "job-4", "running"]
    with pytest.raises(ValueError, match="ended_jobs_keep"):
        TrainerConfig(ended_jobs_keep=-1).validate()


def test_the_evaluator_holds_experts_only_through_the_store_budget(
    trunk_dirs,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    trunk = load_trunk(trunk_dirs["gpt2"])
    writer = ExpertStore(tmp_path / "store", trunk.fingerprint)
    ids = [f"e{i}" for i in range(4)]
    sizes = []
    for i, eid in enumerate(ids):
        expert = randomize(
            Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=4), trunk.hidden_size), i
        )
        sizes.append(writer.put(eid, expert, "d", [1.0, 0.0]).size_bytes)
    store = ExpertStore(tmp_path / "store", trunk.fingerprint, lru_budget_bytes=max(sizes))
    loaded: list[weakref.ref] = []
    real_get = store.get

    def get(expert_id: str) -> Expert:  # the real get; remember what it handed out
        expert = real_get(expert_id)
        loaded.append(weakref.ref(expert))
        return expert

    store.get = get
    evaluator = Evaluator(
        trunk, store, HeldoutSets(tmp_path / "heldout", 4, 0), MatrixHistory(tmp_path), None
    )
    assert evaluator.check_weights(ids) == []
    assert sorted(evaluator.loaded) == ids  # all servable...
    gc.collect()
    alive = {id(ref()) for ref in loaded if ref() is not None}
    assert len(alive) == 1  # ...but only what the store's budget holds is in memory
    assert evaluator.loaded["e0"] is not None  # an evicted one loads again when used


class _Kept:
    """A sink that keeps what it is sent (the worker's records are not under test here)."""

    def __init__(self) -> None:
        self.sent: list = []

    def send(self, topic, key, record) -> None:
        self.sent.append((topic, record))

    def flush(self) -> None:
        pass


def test_the_trainer_prunes_ended_jobs_at_start_and_after_each_job(
    trunk_dirs,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    from router.records import TrainJob
    from trainer.fetch import JobDataError
    from trainer.worker import JobRunner

    jobs = tmp_path / "jobs"
    for i in range(3):
        (jobs / f"old-{i}").mkdir(parents=True)
        (jobs / f"old-{i}" / "outcome.json").write_text("{}")
        os.utime(jobs / f"old-{i}" / "outcome.json", (1e9 + i, 1e9 + i))  # old-2 newest
    trunk = load_trunk(trunk_dirs["gpt2"])
    config = TrainerConfig(ended_jobs_keep=2, ended_jobs_max_age_days=0, progress=False)

    def no_documents(job):
        raise JobDataError("missing_offsets", "the job's offsets are gone")

    runner = JobRunner(
        trunk,
        ExpertStore(tmp_path / "store", trunk.fingerprint),
        config,
        jobs,
        _Kept(),
        no_documents,
    )
    assert sorted(p.name for p in jobs.iterdir()) == ["old-1", "old-2"]
    job = TrainJob(
        job_id="new-job",
        domain_id="d",
        reason="new_domain",
        train_doc_ids=["a"],
        heldout_doc_ids=["b"],
        centroid=[1.0, 0.0],
        refs=[{"topic": "worx.docs", "partition": 0, "start": 0, "end": 2}],
    )
    assert runner.handle(job) == "failed"
    assert sorted(p.name for p in jobs.iterdir() if p.is_dir()) == ["new-job", "old-2"]
