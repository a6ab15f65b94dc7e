"""Configuration of the training worker and its recipe (section ``[trainer]``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainerConfig:
    max_steps: int = 200  # optimizer steps per job at most

    def validate(self) -> None:
        if self.max_steps < 1:
            raise ValueError("trainer.max_steps must be >= 1")
