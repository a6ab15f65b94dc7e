"""What a run of the expert recipe ends with: a :class:`TrainResult`, or
:class:`TrainingFailed` (a stable reason code; retrying will not help) or
:class:`TrainingInterrupted` (stopped on request after a checkpoint; the job resumes later).

Example
-------
>>> failed = TrainingFailed("no_usable_docs", "the training documents contain no tokens")
>>> failed.reason, str(failed)
('no_usable_docs', 'the training documents contain no tokens')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from experts.expert import Expert


class TrainingFailed(RuntimeError):
    """A job failure that retrying will not fix; ``reason`` is a stable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class TrainingInterrupted(RuntimeError):
    """Training stopped on request after checkpointing; the job can resume later."""


@dataclass
class TrainResult:
    outcome: str  # "finished" (worth registering) | "not_worth_it"
    expert: Expert  # the best expert found (CPU, frozen)
    summary: dict[str, Any]
    figures: dict[str, float] = field(default_factory=dict)  # ppl before/current/after, margin
