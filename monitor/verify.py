"""Weight verification on a schedule: what the monitor re-hashes, and when.

At every step the trunk is re-hashed in memory (its tensors are what every cached loss
rests on) and the step's new expert is hashed as stored on disk and as loaded, after the
store has verified its sha256 (the first hashes seen are the references of
:class:`monitor.weights.WeightWatch`). Every expert of the step is re-verified the same way
(evicted from the store's cache and loaded again, so the store re-checks its sha256; a
refusal is reported and the expert dropped from what the mixture serves) at the first step
of a process, every ``every`` registrations, at the first registration ``every_s`` seconds
after the last full check, on demand and at the end of a run. Re-verifying every expert at
every registration (``every = 1``) was the monitor's cost growing with the library.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from monitor.weights import WeightWatch, hash_module, hash_safetensors

log = logging.getLogger(__name__)


class ExpertShas(dict[str, str]):
    """``expert_id -> sha256`` of the weights as the store verified them (set at each
    check); an expert not checked yet in this process is read from its manifest."""

    def __init__(self, store: Any) -> None:
        super().__init__()
        self.store = store

    def __missing__(self, expert_id: str) -> str:
        sha = str(self.store.manifest(expert_id).sha256)
        self[expert_id] = sha
        return sha


class WeightVerifier:
    """Hashes the trunk and experts against ``reference`` (the history's tensor hashes).

    Parameters
    ----------
    loaded
        The ids the mixture may serve (``add``/``discard``): a refused expert leaves it.
    every, every_s
        A full check every ``every`` steps (1: every step), and at the first step
        ``every_s`` seconds after the last one (0: no time limit).
    """

    def __init__(
        self,
        trunk: Any,
        store: Any,
        loaded: Any,
        reference: dict[str, str],
        every: int = 10,
        every_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every < 1 or every_s < 0:
            raise ValueError(f"verify every >= 1 steps and >= 0 s, got {every}, {every_s}")
        self.trunk = trunk
        self.store = store
        self.loaded = loaded
        self.watch = WeightWatch(reference)
        self.every = every
        self.every_s = every_s
        self.clock = clock
        self.shas = ExpertShas(store)
        self.last_full_at: float | None = None  # clock() of the last full check (None: none)
        self.steps_since_full = 0
        # problems of the last full check and found since: every step reports them until a
        # full check no longer finds them (an expert gone stays reported, as it stays gone)
        self.open: list[str] = []

    def due(self) -> bool:
        """Whether the next step checks every expert (the first one of a process does)."""
        if self.last_full_at is None or self.steps_since_full + 1 >= self.every:
            return True
        return self.every_s > 0 and self.clock() - self.last_full_at >= self.every_s

    def step(self, expert_ids: list[str], new: Iterable[str], full: bool) -> tuple[list[str], int]:
        """The checks of one step: the trunk, then ``new`` or, when ``full``, every expert.

        Returns the problems (sorted; empty: no weight forgetting): those found now, and
        after a partial check also those still open from earlier; and how many experts
        were checked."""
        wanted = set(new)
        checked = list(expert_ids) if full else [e for e in expert_ids if e in wanted]
        problems = self.check(checked)
        if full:
            self.last_full_at = self.clock()
            self.steps_since_full = 0
            self.open = problems
        else:
            self.steps_since_full += 1
            self.open = problems = sorted(set(self.open) | set(problems))
        return problems, len(checked)

    def found(self, problem: str) -> None:
        """A problem found outside a check (a refusal while scoring): open until the next
        full check."""
        self.open = sorted(set(self.open) | {problem})

    def check(self, expert_ids: list[str]) -> list[str]:
        """Re-hash the trunk (memory) and ``expert_ids`` (disk and memory, each loaded again
        through the store, which re-verifies its sha256). Returns the problems found."""
        current = hash_module("trunk", self.trunk.model)
        problems: list[str] = []
        for eid in expert_ids:
            try:  # first the bytes on disk, before a refusal moves the entry aside
                path = self.store.weights_path(eid)
                current.update(hash_safetensors(f"file/{eid}", path))
            except Exception as exc:
                problems.append(f"file/{eid}: unreadable ({type(exc).__name__}: {exc})")
            self.store.evict(eid)
            try:
                expert = self.store.get(eid)
                self.shas[eid]  # noqa: B018 - read from the manifest the store checked, once
            except Exception as exc:  # the store refusing an expert is the finding itself
                problems.append(f"store/{eid}: refused ({type(exc).__name__}: {exc})")
                expert = None
                self.loaded.discard(eid)  # the server cannot load it either
                self.shas.pop(eid, None)
            if expert is not None:
                self.loaded.add(eid)
                current.update(hash_module(f"expert/{eid}", expert))
        prefixes = ["trunk"] + [p for e in expert_ids for p in (f"expert/{e}", f"file/{e}")]
        problems += self.watch.check(current, prefixes)
        for eid in expert_ids:  # a problem: its sha256 is read again when next needed
            mine = (f"file/{eid}/", f"file/{eid}:", f"expert/{eid}/", f"store/{eid}:")
            if any(p.startswith(mine) for p in problems):
                self.shas.pop(eid, None)
        if problems:
            log.error("WEIGHT FORGETTING: %d problems: %s", len(problems), problems[:5])
        return sorted(problems)
