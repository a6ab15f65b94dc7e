"""Configuration of the forgetting monitor and dashboard (section ``[monitor]``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MonitorConfig:
    host: str = "127.0.0.1"
    port: int = 8765

    def validate(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"monitor.port must be in 0..65535, got {self.port}")
