"""What the monitor sees on the stream, besides the matrix: rates, dead letters, training
progress, drift events and expert registrations. Bounded, thread-safe, saved to disk.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from ingest.dead_letters import reason_class
from worx.atomic import atomic_write_json

RATE_WINDOW_S = 60.0  # messages per second are averaged over this window


class LiveState:
    """Counters and recent events; ``snapshot()`` is JSON-able (the dashboard reads it).

    Parameters
    ----------
    path
        File the state is saved to (``save()``) and restored from at start; None: memory.
    max_events
        Drift events and registrations kept (oldest dropped).
    max_jobs
        Jobs whose progress is kept (the least recently updated dropped).

    Dead letters are counted by :func:`ingest.dead_letters.reason_class`, a fixed
    vocabulary, so no producer can grow the counters (or the metrics' label set).
    """

    def __init__(
        self, path: str | Path | None = None, max_events: int = 500, max_jobs: int = 1000
    ) -> None:
        self.max_jobs = max_jobs
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self.totals: dict[str, int] = {}  # topic suffix -> messages seen
        self._recent: dict[str, deque[float]] = {}  # topic suffix -> arrival times (monotonic)
        self.dead_letters: dict[str, int] = {}  # reason -> count
        self.jobs: dict[str, dict[str, Any]] = {}  # job_id -> latest TrainStatus fields
        self.drift: deque[dict[str, Any]] = deque(maxlen=max_events)
        self.registrations: deque[dict[str, Any]] = deque(maxlen=max_events)
        self.started_ms = int(time.time() * 1000)
        self._start_mono = time.monotonic()
        if self.path and self.path.exists():
            self.restore(json.loads(self.path.read_text()))

    def seen(self, topic: str, count: int = 1) -> None:
        now = time.monotonic()
        with self._lock:
            self.totals[topic] = self.totals.get(topic, 0) + count
            recent = self._recent.setdefault(topic, deque(maxlen=100_000))
            recent.extend([now] * count)

    def dead_letter(self, reason: str) -> None:
        with self._lock:
            reason = reason_class(reason)
            self.dead_letters[reason] = self.dead_letters.get(reason, 0) + 1

    def train_status(self, status: dict[str, Any]) -> None:
        with self._lock:
            job = self.jobs.pop(status["job_id"], None) or {"first_ms": status.get("created_ms", 0)}
            job.update({k: v for k, v in status.items() if k != "schema_version"})
            job["updated_ms"] = status.get("created_ms") or int(time.time() * 1000)
            self.jobs[status["job_id"]] = job  # (last: the dict is in update order)
            while len(self.jobs) > self.max_jobs:
                self.jobs.pop(next(iter(self.jobs)))

    def drift_event(self, event: dict[str, Any]) -> None:
        with self._lock:
            if all(e.get("event_id") != event.get("event_id") for e in self.drift):
                self.drift.append({k: v for k, v in event.items() if k != "schema_version"})

    def registration(self, reg: dict[str, Any]) -> None:
        with self._lock:
            if all(r["expert_id"] != reg["expert_id"] for r in self.registrations):
                keep = ("expert_id", "domain_id", "job_id", "num_params", "created_ms", "sha256")
                self.registrations.append({k: reg.get(k) for k in keep})

    def rates(self) -> dict[str, float]:
        """Messages per second over the last :data:`RATE_WINDOW_S` seconds, per topic."""
        now = time.monotonic()
        window = min(RATE_WINDOW_S, max(1.0, now - self._start_mono))
        with self._lock:
            out = {}
            for topic, times in self._recent.items():
                while times and times[0] < now - RATE_WINDOW_S:
                    times.popleft()
                out[topic] = len(times) / window
            return out

    def snapshot(self) -> dict[str, Any]:
        rates = self.rates()
        with self._lock:
            return {
                "totals": dict(self.totals),
                "rates": rates,
                "dead_letters": dict(self.dead_letters),
                "jobs": {k: dict(v) for k, v in self.jobs.items()},
                "drift": list(self.drift),
                "registrations": list(self.registrations),
                "started_ms": self.started_ms,
            }

    def restore(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.totals = dict(state.get("totals", {}))
            self.dead_letters = {}
            for reason, count in state.get("dead_letters", {}).items():
                reason = reason_class(reason)
                self.dead_letters[reason] = self.dead_letters.get(reason, 0) + int(count)
            self.jobs = dict(list(state.get("jobs", {}).items())[-self.max_jobs :])
            self.drift.extend(state.get("drift", []))
            self.registrations.extend(state.get("registrations", []))

    def save(self) -> None:
        if self.path:
            atomic_write_json(self.path, self.snapshot())
