"""The monitor as a stage object: every topic in, evaluation rows out (no Kafka inside).

Input (by topic): ``docs``/``routed`` are counted (stream rates); ``dlq`` dead letters are
counted by reason; ``drift`` events, ``train.status`` progress and ``experts``
registrations are kept for the dashboard; a ``train`` job's held-out documents enter the
held-out sets (fetched by reference, never trained on); each new registration triggers an
evaluation of the serving mixture and a step of the dense baseline, whose rows are emitted
on ``metrics``. The domain table (``domains``, followed from the start by a
:class:`topology.runtimes.table_follower.TableFollower` into :meth:`MonitorStage.apply_domain`,
not the runner) feeds ``labels`` (the names the dashboard shows instead of domain ids)
and ``domains``, the table the evaluator routes held-out documents by, as the server
does. Undecodable input is dead-lettered with the reason (except on ``dlq`` itself, which
would loop).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from experts.records import ExpertRegistration
from ingest.dead_letters import dead_letter
from ingest.records import DeadLetter
from monitor.domains import KnownDomains
from monitor.figures import build_state
from monitor.heldout import HeldoutSets
from monitor.history import MatrixHistory
from monitor.labels import DomainLabels
from monitor.live import LiveState
from monitor.records import EvalRow
from router.records import DomainRecord, DriftEvent, TrainJob
from trainer.records import TrainStatus
from worx.atomic import atomic_write_json
from worx.ids import content_hash
from worx.records import Record, RecordError
from worx.stage import Emit, Message

log = logging.getLogger(__name__)

# job -> (held-out (doc_id, text) pairs, training texts)
FetchFn = Callable[[TrainJob], tuple[list[tuple[str, str]], list[str]]]


class MonitorStage:
    """See the module docstring. ``evaluator``/``baseline`` may be None (dashboard only)."""

    input_record: ClassVar[type[Record] | None] = None
    MAX_JOBS = 1000

    def __init__(
        self,
        prefix: str,
        history: MatrixHistory,
        heldout: HeldoutSets,
        live: LiveState,
        evaluator: Any = None,
        baseline: Any = None,
        fetch: FetchFn | None = None,
        store: Any = None,
        trunk_fingerprint: str | None = None,
        state_dir: str | Path | None = None,
        labels: DomainLabels | None = None,
        domains: KnownDomains | None = None,
        heap_keep_bytes: int | None = None,
    ) -> None:
        self.prefix = prefix
        # free heap kept after a registration's evaluation (None: never trimmed)
        self.heap_keep_bytes = heap_keep_bytes
        self.history = history
        self.heldout = heldout
        self.live = live
        self.evaluator = evaluator
        self.baseline = baseline
        self.fetch = fetch
        self.store = store
        self.trunk_fingerprint = trunk_fingerprint
        self.labels = labels if labels is not None else DomainLabels(state_dir)
        self.domains = domains if domains is not None else KnownDomains(state_dir)
        self.jobs_path = Path(state_dir) / "jobs.json" if state_dir else None
        self.jobs: dict[str, dict] = {}
        if self.jobs_path and self.jobs_path.exists():
            self.jobs = json.loads(self.jobs_path.read_text())

    # --- the Stage protocol -----------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {"live": self.live.snapshot(), "jobs": dict(self.jobs)}

    def restore(self, state: dict[str, Any]) -> None:
        self.live.restore(state.get("live", {}))
        self.jobs = dict(state.get("jobs", {}))

    def process(self, message: Message, record: Record | None = None) -> list[Emit]:
        suffix = (
            message.topic[len(self.prefix) + 1 :]
            if message.topic.startswith(self.prefix + ".")
            else message.topic
        )
        self.live.seen(suffix)
        handler = {
            "dlq": self._dead_letter,
            "drift": self._drift,
            "train": self._job,
            "train.status": self._status,
            "experts": self._registration,
        }.get(suffix)
        if handler is None:
            return []
        try:
            return handler(message)
        except RecordError as exc:
            if suffix == "dlq":
                self.live.dead_letter("undecodable_dead_letter")
                return []
            return [Emit("dlq", None, dead_letter(message, exc.reason, str(exc), "monitor"))]

    def apply_domain(self, row: DomainRecord) -> None:
        """One row of ``worx.domains``: the routing table (the server's), then its label if
        the table holds the row (an invalid row raises RecordError first; a stale one is
        no label change)."""
        held = self.domains.table.get(row.domain_id)
        accepted = self.domains.apply(row)
        if accepted or held == row:
            self.labels.apply(row)
        elif held is not None and held.version == row.version:
            raise RecordError(
                f"a second, different row for {row.domain_id} at version {row.version}: "
                "the table keeps the first",
                reason="conflicting_duplicate",
            )

    # --- handlers ---------------------------------------------------------------------
    def _dead_letter(self, message: Message) -> list[Emit]:
        letter = DeadLetter.from_json(message.value or b"", strict=False)
        self.live.dead_letter(letter.reason)
        return []

    def _drift(self, message: Message) -> list[Emit]:
        self.live.drift_event(DriftEvent.from_json(message.value or b"", strict=False).to_dict())
        return []

    def _status(self, message: Message) -> list[Emit]:
        self.live.train_status(TrainStatus.from_json(message.value or b"", strict=False).to_dict())
        return []

    def _job(self, message: Message) -> list[Emit]:
        job = TrainJob.from_json(message.value or b"", strict=False)
        job.check_docs_topic(f"{self.prefix}.docs")  # held-out docs only from our own docs
        self.jobs[job.job_id] = job.to_dict()
        while len(self.jobs) > self.MAX_JOBS:
            self.jobs.pop(next(iter(self.jobs)))
        if self.jobs_path:
            atomic_write_json(self.jobs_path, self.jobs)
        if self.fetch is not None and job.heldout_doc_ids:
            heldout, _ = self.fetch(job)
            if self.heldout.offer_many(job.domain_id, heldout):
                log.info(
                    "held-out set of %s now %d docs",
                    job.domain_id,
                    len(self.heldout.docs(job.domain_id)),
                )
        return []

    def _registration(self, message: Message) -> list[Emit]:
        reg = ExpertRegistration.from_json(message.value or b"", strict=False)
        if self.trunk_fingerprint and reg.trunk_fingerprint != self.trunk_fingerprint:
            raise RecordError(
                f"expert {reg.expert_id} was built on trunk {reg.trunk_fingerprint[:12]}..., "
                f"the monitor evaluates trunk {self.trunk_fingerprint[:12]}...",
                reason="wrong_trunk",
            )
        rows: list[EvalRow] = []
        if self.evaluator is not None:  # raises for an expert the store does not hold
            rows += self.evaluator.on_registration(
                reg.expert_id, reg.domain_id, reg.centroid, reg.sha256, reg.created_ms
            )
        self.live.registration(reg.to_dict())  # (only a registration the evaluator took)
        if self.baseline is not None and rows:
            texts = self._train_texts(reg)
            if texts:
                rows += self.baseline.step(reg.expert_id, reg.domain_id, texts)
            else:
                log.warning(
                    "no training data known for %s (job %s): dense baseline skips it",
                    reg.expert_id,
                    reg.job_id,
                )
        self.live.save()
        if self.heap_keep_bytes is not None and rows:
            from router.allocator import release_freed_memory

            release_freed_memory(self.heap_keep_bytes)
        return [Emit("metrics", f"{r.run}:{r.step}", r) for r in rows]

    def _train_texts(self, reg: ExpertRegistration) -> list[str]:
        job = self.jobs.get(reg.job_id or "")
        if job is None or self.fetch is None:
            return []
        _, train = self.fetch(TrainJob.from_dict(job, strict=False))
        return train

    # --- on demand and for the dashboard ---------------------------------------------
    def evaluate_now(self) -> list[EvalRow]:
        if self.evaluator is None:
            raise RuntimeError("this monitor has no trunk/store to evaluate with")
        return self.evaluator.evaluate_now()

    def finish(self) -> list[str]:
        """The end of a run: re-verify the trunk and every expert once more (the problems
        found are added to the latest row's ``weight_changes`` in the history)."""
        return self.evaluator.verify_all() if self.evaluator is not None else []

    def store_info(self) -> dict[str, Any]:
        if self.store is None:
            return {}
        root = Path(self.store.root)
        ids = self.store.ids()
        size = sum(
            (root / i / "weights.safetensors").stat().st_size
            for i in ids
            if (root / i / "weights.safetensors").exists()
        )
        return {"experts": len(ids), "bytes": size, "quarantined": len(self.store.quarantined())}

    def state(self) -> dict[str, Any]:
        return build_state(
            self.history,
            self.live.snapshot(),
            self.store_info(),
            self.labels.snapshot(),
            jobs=dict(self.jobs),
        )


def heldout_fetch(read: Callable[[TrainJob], Any]) -> FetchFn:
    """A :data:`FetchFn` from a reader of a job's documents (``read(job)`` returns a
    :class:`trainer.fetch.JobDocs`; the runtime injects one that reads ``worx.docs``)."""

    def fetch(job: TrainJob) -> tuple[list[tuple[str, str]], list[str]]:
        docs = read(job)
        if len(docs.heldout) == len(job.heldout_doc_ids):
            ids = list(job.heldout_doc_ids)
        else:  # some were not found: name the found texts by content (stable)
            ids = [content_hash(t, prefix="h-") for t in docs.heldout]
        return list(zip(ids, docs.heldout, strict=True)), docs.train

    return fetch
