"""Configuration of the trunk, experts, mixture and expert store (section ``[experts]``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExpertsConfig:
    trunk_dir: str = ""  # Hugging Face model directory; empty: the bundled default trunk

    def validate(self) -> None:
        pass
