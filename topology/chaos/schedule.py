"""The fault schedule of a chaos run: a pure function of its seed, printed as JSON at the
start of a run so that a failing run can be replayed (``--seed`` again, or ``--schedule``
with the printed list).

Kinds:

- ``kill``: SIGKILL one stage;
- ``kill_two``: SIGKILL two stages at the same moment;
- ``kill_again``: SIGKILL a stage, then its restarted process ``hold_s`` after the
  supervisor started it, while it is still recovering;
- ``pause``: SIGSTOP a stage for ``hold_s`` (longer than the consumer session timeout,
  so its group evicts it), then SIGCONT;
- ``pause_broker``: SIGSTOP the broker for ``hold_s``, then SIGCONT (the broker is never
  killed: it keeps topics in memory only).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

KINDS = ("kill", "kill_two", "kill_again", "pause", "pause_broker")
KIND_WEIGHTS = (0.5, 0.14, 0.14, 0.14, 0.08)
STAGES = ("route", "discover", "trainer", "serve", "monitor", "ingest")
BROKER = "broker"


def stage_names(serve_replicas: int = 1) -> tuple[str, ...]:
    """The stages a schedule may hit: :data:`STAGES` and every serve replica past the first
    (``serve-2``, ...; see ``orchestrate.serve_children``)."""
    return STAGES + tuple(f"serve-{k}" for k in range(2, serve_replicas + 1))


def stage_kind(name: str) -> str:
    """What a supervised process is: ``serve-2`` and ``serve`` are both ``serve``.

    >>> stage_kind("serve-2"), stage_kind("trainer"), stage_kind("ingest")
    ('serve', 'trainer', 'ingest')
    """
    base, _, k = name.rpartition("-")
    return base if base and k.isdigit() else name


@dataclass(frozen=True)
class Fault:
    at_s: float  # seconds after the run started
    kind: str  # one of KINDS
    targets: tuple[str, ...]  # stage names (BROKER for pause_broker)
    hold_s: float = 0.0  # pause: how long stopped; kill_again: delay after the restart

    def to_dict(self) -> dict:
        return {**asdict(self), "targets": list(self.targets)}

    @classmethod
    def from_dict(cls, body: dict) -> Fault:
        if body.get("kind") not in KINDS:
            raise ValueError(f"unknown fault kind {body.get('kind')!r}: one of {KINDS}")
        return cls(float(body["at_s"]), body["kind"], tuple(body["targets"]), body["hold_s"])


@dataclass(frozen=True)
class ScheduleShape:
    duration_s: float  # no fault starts later
    per_minute: float  # mean faults per minute
    min_gap_s: float = 3.0
    max_gap_s: float = 60.0
    start_s: float = 20.0  # the stages load their models first
    session_timeout_s: float = 10.0  # the stages' consumer session timeout
    broker_pause_max_s: float = 60.0
    stages: tuple[str, ...] = STAGES


def chaos_schedule(seed: int, shape: ScheduleShape) -> list[Fault]:
    """Faults at gaps drawn around ``60 / per_minute`` seconds (within the shape's bounds),
    each of a kind drawn by :data:`KIND_WEIGHTS` on stages drawn uniformly.

    >>> shape = ScheduleShape(duration_s=120, per_minute=6)
    >>> chaos_schedule(1, shape) == chaos_schedule(1, shape)
    True
    >>> all(20 <= f.at_s <= 120 for f in chaos_schedule(1, shape))
    True
    """
    if shape.per_minute <= 0:
        return []
    rng = random.Random(f"chaos:{seed}")
    mean_gap = 60.0 / shape.per_minute
    faults, at = [], shape.start_s
    while True:
        at += min(shape.max_gap_s, max(shape.min_gap_s, rng.expovariate(1 / mean_gap)))
        if at > shape.duration_s:
            return faults
        kind = rng.choices(KINDS, weights=KIND_WEIGHTS)[0]
        faults.append(_fault(rng, round(at, 1), kind, shape))


def _fault(rng: random.Random, at: float, kind: str, shape: ScheduleShape) -> Fault:
    if kind == "pause_broker":
        low = min(5.0, shape.broker_pause_max_s)
        return Fault(at, kind, (BROKER,), round(rng.uniform(low, shape.broker_pause_max_s), 1))
    if kind == "kill_two":
        return Fault(at, kind, tuple(rng.sample(shape.stages, 2)))
    target = (rng.choice(shape.stages),)
    if kind == "pause":
        timeout = shape.session_timeout_s
        return Fault(at, kind, target, round(rng.uniform(timeout + 2, 2 * timeout + 5), 1))
    if kind == "kill_again":
        return Fault(at, kind, target, round(rng.uniform(0.5, 5.0), 1))
    return Fault(at, kind, target)


def schedule_json(faults: Sequence[Fault]) -> str:
    """One line: the schedule as a JSON list (what ``read_schedule`` reads back)."""
    return json.dumps([fault.to_dict() for fault in faults])


def read_schedule(text: str) -> list[Fault]:
    """A schedule printed by :func:`schedule_json`, for a replay."""
    return sorted((Fault.from_dict(body) for body in json.loads(text)), key=lambda f: f.at_s)
