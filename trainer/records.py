"""Records emitted by the training worker."""

from __future__ import annotations

from dataclasses import dataclass, field

from worx.records import Record


@dataclass(frozen=True)
class TrainStatus(Record):
    """Progress and outcome of a job on ``worx.train.status`` (keyed by job_id)."""

    SCHEMA_VERSION = 1

    job_id: str
    domain_id: str
    state: str  # "started" | "step" | "finished" | "not_worth_it" | "failed" | "skipped"
    step: int = 0
    total_steps: int = 0
    loss: float | None = None
    tokens_per_s: float | None = None
    expert_id: str | None = None
    reason: str = ""  # why it failed / was not worth it / was skipped
    figures: dict = field(default_factory=dict)  # e.g. ppl before/after, tokens seen
    created_ms: int = 0
