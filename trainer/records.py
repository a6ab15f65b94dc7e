"""Records emitted by the training worker."""

from __future__ import annotations

from dataclasses import dataclass, field

from worx.checks import check_choice, check_id, check_range
from worx.records import Record

ACTIVE_STATES = ("taken", "started", "step")  # a trainer holds the job
TERMINAL_STATES = ("finished", "not_worth_it", "failed", "skipped")
STATES = ACTIVE_STATES + TERMINAL_STATES


@dataclass(frozen=True)
class TrainStatus(Record):
    """Progress and outcome of a job on ``worx.train.status`` (keyed by job_id)."""

    SCHEMA_VERSION = 1

    job_id: str
    domain_id: str
    state: str  # "taken" | "started" | "step" | "finished" | "not_worth_it" | "failed" | "skipped"
    step: int = 0
    total_steps: int = 0
    loss: float | None = None
    tokens_per_s: float | None = None
    expert_id: str | None = None
    reason: str = ""  # why it failed / was not worth it / was skipped
    figures: dict = field(default_factory=dict)  # e.g. ppl before/after, tokens seen
    created_ms: int = 0

    def check(self) -> TrainStatus:
        check_id("job_id", self.job_id)
        check_id("domain_id", self.domain_id)
        check_choice("state", self.state, STATES)
        check_range("step", self.step, 0)
        check_range("total_steps", self.total_steps, 0)
        if self.tokens_per_s is not None:
            check_range("tokens_per_s", self.tokens_per_s, 0)
        check_id("expert_id", self.expert_id, optional=True)
        check_range("created_ms", self.created_ms, 0)
        return self
