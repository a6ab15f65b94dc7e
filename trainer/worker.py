"""The training node's job runner: one job to its end, with its records in order.

No Kafka here: the runner is handed a sink (``send``/``flush``, :class:`worx.sink.Sink`)
for its records and a fetch function for a job's documents; the runtime that consumes
``worx.train`` one job at a time and commits a job's offset only after :meth:`JobRunner.handle`
returned is :class:`topology.runtimes.train_worker.TrainWorker`.

Delivery is at least once, effects are idempotent:

* a job's expert id is derived from its job id (:func:`expert_id_for`), and the store is
  write-once, so a job id produces at most one expert whatever is replayed or restarted;
* a job's outcome is recorded in order: the registration on ``experts`` is flushed before
  ``outcome.json`` is written in the job directory, then the status on ``train.status``;
  status records (``started``, ``step``) go out while it trains; a worker killed mid-job
  gets the job again and resumes it from its last checkpoint;
* a replayed job that already ended is acknowledged with a ``skipped`` status, and a job
  whose expert is stored but was never announced (a kill between the two) is announced.

A job that fails for a reason that will not go away (bad references, no usable documents,
a diverged loss, an invalid record) is marked ``failed`` with the reason and the runner goes
on with the next job. Broker and disk errors are not job failures: they propagate (the
runtime names its broker's exception types in ``broker_errors``), which stops the worker;
it resumes the job when restarted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experts.expert import Expert, ExpertConfigError
from experts.store import ExpertRefused, ExpertStore
from experts.trunk import Trunk
from ingest.dead_letters import dead_letter
from router.records import TrainJob
from trainer.checkpoint import clear_checkpoints
from trainer.config import TrainerConfig
from trainer.expert_setup import prepare_trunk
from trainer.fetch import JobDataError, JobDocs
from trainer.job_retention import prune_ended_jobs
from trainer.recipes.expert import TrainingFailed, TrainingInterrupted, train_expert
from trainer.records import TrainStatus
from trainer.starts import nearest_starts
from worx.atomic import atomic_write_json
from worx.ids import UnsafeIdError, content_hash, validate_id
from worx.records import Record, RecordError
from worx.sink import Sink
from worx.stage import Message

log = logging.getLogger(__name__)

OUTCOME = "outcome.json"


def expert_id_for(job_id: str) -> str:
    """The one expert id a job can produce (deterministic, safe as a directory name).

    >>> expert_id_for("job-1") == expert_id_for("job-1")
    True
    """
    return content_hash(job_id, prefix="exp-", length=20)


def _now_ms() -> int:
    return int(time.time() * 1000)


class JobRunner:
    """Run training jobs; experts go to ``store``, records to ``sink``.

    Parameters
    ----------
    trunk : the frozen trunk every expert is trained on.
    store : the expert store (opened with ``trunk.fingerprint``).
    config : the ``[trainer]`` section.
    jobs_dir : job checkpoints and outcomes (``<jobs_dir>/<job_id>/``).
    sink : where ``experts``, ``train.status`` and ``dlq`` records go; ``flush`` raises if
        they were not delivered.
    fetch : a job's documents (raises :class:`~trainer.fetch.JobDataError` when unusable).
    broker_errors : exception types of the transport; like ``OSError`` they stop the
        worker instead of failing the job.
    """

    def __init__(
        self,
        trunk: Trunk,
        store: ExpertStore,
        config: TrainerConfig,
        jobs_dir: Path,
        sink: Sink,
        fetch: Callable[[TrainJob], JobDocs],
        broker_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.trunk = trunk
        self.store = store
        self.config = config
        self.jobs_dir = Path(jobs_dir)
        self.sink = sink
        self.fetch = fetch
        self.fatal: tuple[type[BaseException], ...] = (OSError, *broker_errors)
        self.outcomes: list[tuple[str, str]] = []  # (job_id, state) handled by this process
        prepare_trunk(trunk, config, cache_dir=self.jobs_dir.parent / "trunk-cache")
        self._prune_ended_jobs()

    def handle_message(self, message: Message, stop: threading.Event) -> str:
        """Decode one ``worx.train`` message and handle the job; returns the job's state."""
        try:
            job = TrainJob.from_json(message.value or b"", strict=False)
        except RecordError as exc:
            letter = dead_letter(message, exc.reason, str(exc), "trainer")
            self._send("dlq", None, letter)
            self._flush()
            return "dead_letter"
        return self.handle(job, stop)

    # ---- one job ----------------------------------------------------------------------

    def handle(self, job: TrainJob, stop: threading.Event | None = None) -> str:
        """Run ``job`` to its end (or interruption); returns the state reached."""
        stop = stop or threading.Event()
        try:
            validate_id(job.job_id, kind="job_id")
            validate_id(job.domain_id, kind="domain_id")
        except UnsafeIdError as exc:
            return self._fail(job, "bad_job", str(exc), job_dir=None)
        expert_id = expert_id_for(job.job_id)
        job_dir = self.jobs_dir / job.job_id
        done = self._read_outcome(job_dir)
        if done is not None:
            log.info("job %s already ended (%s): skipping", job.job_id, done["state"])
            self._status(
                job,
                "skipped",
                expert_id=done.get("expert_id"),
                reason=f"already {done['state']}",
                figures=done.get("figures", {}),
            )
            self._flush()
            return "skipped"
        if expert_id in self.store:
            # stored but never recorded as done (killed in between): announce it now
            manifest = self.store.manifest(expert_id)
            return self._register(job, job_dir, manifest, dict(manifest.summary))
        self._status(job, "taken")  # before the setup, which can take longer than training
        self._flush()
        try:
            docs = self.fetch(job)
            parent, parent_id = self._parent(job)
            candidates = self._candidates(job.centroid) if parent is None else None
            result = train_expert(
                self.trunk,
                docs.train,
                docs.heldout,
                self.config,
                job_dir=job_dir,
                parent=parent,
                candidates=candidates,
                parent_id=parent_id,
                own_ppl=self._own_ppl([parent_id] if parent_id else list(candidates or {})),
                on_event=lambda state, fields: self._progress(job, state, fields),
                stop=stop,
            )
        except TrainingInterrupted:
            self._flush()
            return "interrupted"
        except (JobDataError, TrainingFailed) as exc:
            return self._fail(job, exc.reason, str(exc), job_dir)
        except (ExpertConfigError, RecordError, ValueError) as exc:
            return self._fail(job, "bad_job", f"{type(exc).__name__}: {exc}", job_dir)
        except self.fatal:
            raise  # the broker or the disk, not the job: stop; the job resumes on restart
        except Exception as exc:  # noqa: BLE001 - a job that breaks the recipe fails alone
            log.exception("job %s broke the recipe", job.job_id)
            reason = "out_of_memory" if "OutOfMemoryError" in type(exc).__name__ else "error"
            return self._fail(job, reason, f"{type(exc).__name__}: {exc}", job_dir)
        parent_id = parent_id or result.summary.get("started_from_expert_id")
        summary = {
            **result.summary,
            "missing_doc_ids": len(docs.missing_ids),
            "parent_expert_id": parent_id,
        }
        if result.outcome != "finished":
            figures = result.figures
            reason = (
                f"held-out perplexity {figures['heldout_ppl_after']:.4g} does not beat the current "
                f"mixture's {figures['heldout_ppl_current']:.4g} by {self.config.gate_margin:.0%}"
            )
            log.info("job %s not worth an expert: %s", job.job_id, reason)
            self._record(job_dir, {"state": "not_worth_it", "figures": figures, "reason": reason})
            self._status(
                job, "not_worth_it", step=result.figures["steps"], reason=reason, figures=figures
            )
            self._flush()
            clear_checkpoints(job_dir)
            self.outcomes.append((job.job_id, "not_worth_it"))
            return "not_worth_it"
        try:
            manifest = self.store.put(
                expert_id,
                result.expert,
                job.domain_id,
                job.centroid,
                parent_expert_id=parent_id,
                summary=summary,
                job_id=job.job_id,
            )
        except ExpertRefused as exc:
            won = self._stored_by_another_worker(job, expert_id, exc)
            if won is not None:  # announced again: same id and sha256, a no-op downstream
                return self._register(job, job_dir, won, dict(won.summary))
            return self._fail(job, f"store_{exc.reason}", str(exc), job_dir)
        return self._register(job, job_dir, manifest, summary)

    def _stored_by_another_worker(self, job: TrainJob, expert_id: str, exc: ExpertRefused):
        """The manifest, if a parallel trainer stored this job's expert while this one
        trained it (a partition moved mid-job): the job is done, whoever won the write."""
        if exc.reason != "duplicate_id":
            return None
        deadline = time.monotonic() + 30.0  # the other writer's manifest follows its weights
        while True:
            try:
                manifest = self.store.manifest(expert_id)
                break
            except ExpertRefused as refused:
                if refused.reason != "missing" or time.monotonic() > deadline:
                    return None
                time.sleep(0.5)
        if manifest.job_id != job.job_id:
            return None
        log.warning("job %s: its expert was stored by another worker first", job.job_id)
        return manifest

    def _register(
        self, job: TrainJob, job_dir: Path, manifest: Any, summary: dict[str, Any]
    ) -> str:
        figures = {
            k: summary[k]
            for k in (
                "heldout_ppl_trunk",
                "heldout_ppl_current",
                "heldout_ppl_after",
                "tokens_seen",
                "steps",
            )
            if k in summary
        }
        self._send("experts", manifest.expert_id, manifest.registration())
        self._flush()  # the registration is out before the job is recorded as done
        self._record(
            job_dir, {"state": "finished", "expert_id": manifest.expert_id, "figures": figures}
        )
        self._status(
            job,
            "finished",
            step=int(summary.get("steps", 0)),
            expert_id=manifest.expert_id,
            figures=figures,
        )
        self._flush()
        clear_checkpoints(job_dir)
        self.outcomes.append((job.job_id, "finished"))
        log.info("job %s registered expert %s", job.job_id, manifest.expert_id)
        return "finished"

    def _candidates(self, centroid: list[float]) -> dict[str, Expert]:
        """The usable experts of the ``config.start_candidates`` stored domains nearest the
        job's ``centroid`` (DEMix starts, :func:`trainer.starts.nearest_starts`)."""
        limit = self.config.start_candidates
        if limit == 0:
            return {}
        manifests = []
        for expert_id in self.store.ids():
            try:
                manifests.append(self.store.manifest(expert_id))
            except ExpertRefused as exc:
                log.warning("expert %s is not a start candidate: %s", expert_id, exc)
        out = {}
        for manifest in nearest_starts(manifests, centroid, limit):
            try:
                out[manifest.expert_id] = self.store.get(manifest.expert_id)
            except ExpertRefused as exc:
                log.warning("expert %s is not a start candidate: %s", manifest.expert_id, exc)
        return out

    def _own_ppl(self, expert_ids: list[str]) -> dict[str, float]:
        """Each expert's held-out ppl on its own documents at registration (growth rule)."""
        out = {}
        for expert_id in expert_ids:
            with contextlib.suppress(ExpertRefused, KeyError, TypeError, ValueError):
                out[expert_id] = float(self.store.manifest(expert_id).summary["heldout_ppl_after"])
        return out

    def _parent(self, job: TrainJob) -> tuple[Expert | None, str | None]:
        if job.parent_expert_id is None:
            return None, None
        try:
            return self.store.get(job.parent_expert_id), job.parent_expert_id
        except ExpertRefused as exc:
            log.warning("job %s: parent expert unusable (%s); starting from zero", job.job_id, exc)
            return None, None

    def _fail(self, job: TrainJob, reason: str, detail: str, job_dir: Path | None) -> str:
        log.error("job %s failed [%s]: %s", job.job_id, reason, detail)
        if job_dir is not None:
            self._record(job_dir, {"state": "failed", "reason": reason, "detail": detail})
            clear_checkpoints(job_dir)
        self._status(job, "failed", reason=f"{reason}: {detail}", figures={})
        self._flush()
        self.outcomes.append((job.job_id, "failed"))
        return "failed"

    # ---- events and records -----------------------------------------------------------

    def _progress(self, job: TrainJob, state: str, fields: dict[str, Any]) -> None:
        if state == "started":
            figures = {k: v for k, v in fields.items() if k != "total_steps"}
            self._status(
                job,
                "started",
                step=int(fields["resumed_from_step"]),
                total_steps=int(fields["total_steps"]),
                figures=figures,
            )
            self._flush()
        else:
            self._status(
                job,
                "step",
                step=int(fields["step"]),
                total_steps=int(fields["total_steps"]),
                loss=float(fields["loss"]),
                tokens_per_s=float(fields["tokens_per_s"]),
            )

    def _status(
        self,
        job: TrainJob,
        state: str,
        *,
        step: int = 0,
        total_steps: int | None = None,
        loss: float | None = None,
        tokens_per_s: float | None = None,
        expert_id: str | None = None,
        reason: str = "",
        figures: dict | None = None,
    ) -> None:
        status = TrainStatus(
            job_id=job.job_id,
            domain_id=job.domain_id,
            state=state,
            step=step,
            total_steps=self.config.max_steps if total_steps is None else total_steps,
            loss=loss,
            tokens_per_s=tokens_per_s,
            expert_id=expert_id,
            reason=reason,
            figures=figures or {},
            created_ms=_now_ms(),
        )
        self._send("train.status", job.job_id, status)

    def _send(self, suffix: str, key: str | None, record: Record) -> None:
        self.sink.send(suffix, key, record)

    def _flush(self) -> None:
        self.sink.flush()

    def _record(self, job_dir: Path, outcome: dict[str, Any]) -> None:
        atomic_write_json(job_dir / OUTCOME, {**outcome, "recorded_ms": _now_ms()})
        self._prune_ended_jobs()

    def _prune_ended_jobs(self) -> None:
        days = self.config.ended_jobs_max_age_days
        prune_ended_jobs(self.jobs_dir, self.config.ended_jobs_keep, days * 86400)

    @staticmethod
    def _read_outcome(job_dir: Path) -> dict[str, Any] | None:
        path = job_dir / OUTCOME
        if not path.exists():
            return None
        return json.loads(path.read_text())
