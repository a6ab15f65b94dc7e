"""What the discover stage tracks per domain: documents for its jobs and a drift detector.

Example
-------
>>> from router.config import RouterConfig
>>> state = DomainState(RouterConfig())
>>> state.recent.append({"doc_id": "a"})
>>> twin = DomainState(RouterConfig())
>>> twin.restore(state.snapshot()); twin.snapshot() == state.snapshot()
True
"""

from __future__ import annotations

from collections import deque
from typing import Any

from router.config import RouterConfig
from router.detectors import Detector, make_detector
from router.jobs import split_key


class DomainState:
    """What discover tracks per domain: documents for its job, recent documents, detector."""

    def __init__(self, config: RouterConfig) -> None:
        self.collected: list[dict] = []  # docs gathered for the first job
        self._texts: set[str] = set()  # their distinct texts (split keys): what a job holds
        self.job_id: str | None = None
        self.recent: deque[dict] = deque(maxlen=config.job_docs)  # for drift jobs
        self.detector: Detector = make_detector(
            "page-hinkley",
            delta=config.distance_delta,
            threshold=config.distance_threshold,
            min_instances=config.detector_min_docs,
        )
        self.drift_jobs: list[str] = []

    def collect(self, doc: dict) -> int:
        """Gather ``doc`` for the first job unless its text is gathered already (a job
        keeps one id per text: a text repeated under many ids counts once, and a domain of
        a few repeated texts waits, holding at most one document per text); returns the
        distinct texts gathered."""
        key = split_key(doc)
        if key not in self._texts:
            self._texts.add(key)
            self.collected.append(doc)
        return len(self._texts)

    def clear_collected(self) -> None:
        self.collected = []
        self._texts = set()

    def snapshot(self) -> dict[str, Any]:
        return {
            "collected": self.collected,
            "job_id": self.job_id,
            "recent": list(self.recent),
            "detector": self.detector.snapshot(),
            "drift_jobs": self.drift_jobs,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.collected = list(state["collected"])
        self._texts = {split_key(doc) for doc in self.collected}
        self.job_id = state["job_id"]
        self.recent.clear()
        self.recent.extend(state["recent"])
        self.detector.restore(state["detector"])
        self.drift_jobs = list(state["drift_jobs"])
