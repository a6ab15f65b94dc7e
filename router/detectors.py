"""Drift detectors with JSON snapshots: river's Page-Hinkley, state saved field by field.

Build one by name with :func:`make_detector` (as :func:`router.embedders.make_embedder`
builds embedders); ``page-hinkley`` (:class:`Detector`) is the one there is.

river's detectors are the algorithm; this wrapper only adds a snapshot that is plain
JSON (no pickle), so the discover stage can save and restore them with its offsets.
Page-Hinkley was chosen over ADWIN and KSWIN by the figures in ``docs/discovery.md``: it
detects a one-sided rise (``mode="up"``), its state is five numbers (ADWIN's lives in a
compiled helper that cannot be saved without pickle), and its false-alarm rate on a
stationary stream is controlled by ``delta`` (the change ignored) and ``threshold``.

Example
-------
>>> det = Detector(delta=0.05, threshold=10.0)
>>> any(det.update(0.0) for _ in range(200))
False
>>> fired_at = next(i for i in range(200) if det.update(1.0))
>>> 0 < fired_at < 30
True
>>> twin = Detector(delta=0.05, threshold=10.0)
>>> twin.restore(det.snapshot()); twin.snapshot() == det.snapshot()
True
>>> make_detector("page-hinkley", delta=0.05, threshold=10.0).snapshot() == Detector(
...     0.05, 10.0).snapshot()
True
"""

from __future__ import annotations

from typing import Any

from river import drift

DETECTORS = ("page-hinkley",)
_FIELDS = ("_sum_increase", "_sum_decrease", "_min_increase", "_max_decrease")


class Detector:
    """One-sided (rising mean) Page-Hinkley test on a stream of floats."""

    def __init__(self, delta: float, threshold: float, min_instances: int = 30) -> None:
        self.delta = delta
        self.threshold = threshold
        self.min_instances = min_instances
        self.count = 0  # values since the last reset
        self._ph = self._new()

    def _new(self) -> drift.PageHinkley:
        return drift.PageHinkley(
            min_instances=self.min_instances,
            delta=self.delta,
            threshold=self.threshold,
            alpha=1.0,  # no forgetting: the mean is of everything since the last reset
            mode="up",
        )

    @property
    def mean(self) -> float:
        return float(self._ph._x_mean.get())

    @property
    def statistic(self) -> float:
        """Page-Hinkley statistic (fires when it exceeds ``threshold``)."""
        return float(self._ph._sum_increase - self._ph._min_increase)

    def update(self, value: float) -> bool:
        """Feed one value; True when a rise is detected (the detector then resets itself)."""
        self.count += 1
        self._ph.update(float(value))
        if self._ph.drift_detected:
            self.reset()
            return True
        return False

    def reset(self) -> None:
        self._ph = self._new()
        self.count = 0

    def snapshot(self) -> dict[str, Any]:
        # +-inf (the initial extremes) become None: strict JSON has no Infinity
        state: dict[str, Any] = {}
        for name in _FIELDS:
            value = float(getattr(self._ph, name))
            state[name] = value if abs(value) != float("inf") else None
        state["mean_n"] = float(self._ph._x_mean.n)
        state["mean"] = float(self._ph._x_mean._mean)
        state["count"] = self.count
        return state

    def restore(self, state: dict[str, Any]) -> None:
        self._ph = self._new()
        for name in _FIELDS:
            if state[name] is not None:
                setattr(self._ph, name, float(state[name]))
        self._ph._x_mean.n = float(state["mean_n"])
        self._ph._x_mean._mean = float(state["mean"])
        self.count = int(state["count"])


def make_detector(name: str, **kwargs: Any) -> Detector:
    """Build the drift detector called ``name`` with its keyword arguments.

    Parameters
    ----------
    name : {"page-hinkley"}
        ``page-hinkley``: :class:`Detector` (``delta``, ``threshold``, ``min_instances``).
    **kwargs
        The detector's constructor arguments, under their own names.

    Raises
    ------
    ValueError
        For an unknown ``name``.
    TypeError
        For an argument the detector does not take.
    """
    key = name.strip().lower() if isinstance(name, str) else name
    if key == "page-hinkley":
        return Detector(**kwargs)
    raise ValueError(f"unknown detector {name!r}; choose one of {', '.join(DETECTORS)}")
