"""Faults applied to a running loop: signals to the supervisor's children, found by stage
name through the supervisor's own process handles, and to the broker's process.

Signals go through :meth:`subprocess.Popen.send_signal`, which does nothing once the
process was reaped, so a late SIGCONT can never reach a recycled pid. Every applied fault
is recorded with the stage's phase at that moment (``phase_of``); a fault whose target was
not running (a finished feed, a stage between death and restart) is recorded as skipped.
"""

from __future__ import annotations

import logging
import signal
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from topology.chaos.schedule import BROKER, Fault
from topology.loop.supervisor import Supervisor

log = logging.getLogger(__name__)


@dataclass
class Applied:
    """One signal of a fault (a fault of two targets, or a kill and its second, is two)."""

    fault: int  # the fault's place in the order applied
    at_s: float  # exact: an outage is matched to the fault by it (to_dict rounds it)
    kind: str
    target: str
    phase: str
    skipped: str | None = None  # why nothing was signalled

    def to_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if v is not None} | {
            "at_s": round(self.at_s, 1)
        }


@dataclass
class _Paused:
    process: subprocess.Popen
    resume_at_s: float
    target: str


@dataclass
class _KillAgain:
    fault: int
    target: str
    killed_pid: int
    delay_s: float
    restarted_at_s: float | None = None


@dataclass
class Injector:
    supervisor: Supervisor
    broker: subprocess.Popen | None
    phase_of: Callable[[str], str] = lambda name: ""
    applied: list[Applied] = field(default_factory=list)
    _paused: list[_Paused] = field(default_factory=list)
    _again: list[_KillAgain] = field(default_factory=list)
    _faults: int = 0

    def apply(self, fault: Fault, now_s: float) -> None:
        self._faults += 1
        if fault.kind == "pause_broker":
            self._pause(BROKER, self.broker, fault, now_s)
            return
        for target in fault.targets:
            process = self._running(target)
            if process is None:
                self._record(now_s, fault.kind, target, skipped="not running")
            elif fault.kind == "pause":
                self._pause(target, process, fault, now_s)
            else:
                self._kill(now_s, fault.kind, target, process)
                if fault.kind == "kill_again":
                    again = _KillAgain(self._faults, target, process.pid, fault.hold_s)
                    self._again.append(again)

    def tick(self, now_s: float) -> None:
        """Resume the pauses that are due; kill again the restarted stages that are due."""
        for paused in [p for p in self._paused if p.resume_at_s <= now_s]:
            self._paused.remove(paused)
            paused.process.send_signal(signal.SIGCONT)
            log.info("chaos: resumed %s", paused.target)
        for again in list(self._again):
            process = self._running(again.target)
            if process is None or process.pid == again.killed_pid:
                continue  # not restarted yet
            if again.restarted_at_s is None:
                again.restarted_at_s = now_s
            if now_s - again.restarted_at_s >= again.delay_s:
                self._again.remove(again)
                self._kill(now_s, "kill_again", again.target, process, "recovering", again.fault)

    def busy(self) -> bool:
        """A pause or a second kill is still to come."""
        return bool(self._paused or self._again)

    def resume_all(self) -> None:
        """SIGCONT everything still paused (before the loop is stopped, and on any error)."""
        for paused in self._paused:
            paused.process.send_signal(signal.SIGCONT)
        self._paused.clear()
        self._again.clear()

    def injected(self) -> list[Applied]:
        """The signals sent (skipped ones left out)."""
        return [a for a in self.applied if a.skipped is None]

    def faults_injected(self) -> int:
        """Faults of which at least one signal was sent."""
        return len({a.fault for a in self.injected()})

    def by_kind(self) -> dict[str, int]:
        """Faults injected, by kind."""
        return dict(Counter(kind for _, kind in {(a.fault, a.kind) for a in self.injected()}))

    def _running(self, name: str) -> subprocess.Popen | None:
        child = self.supervisor.children.get(name)
        if child is None or child.process.poll() is not None:
            return None
        return child.process

    def _kill(
        self,
        now_s: float,
        kind: str,
        target: str,
        process: subprocess.Popen,
        phase: str = "",
        fault: int | None = None,
    ) -> None:
        phase = phase or self.phase_of(target)
        process.send_signal(signal.SIGKILL)
        log.info("chaos: %s %s (pid %d, %s) at %.1fs", kind, target, process.pid, phase, now_s)
        self._record(now_s, kind, target, phase, fault=fault)

    def _pause(
        self, target: str, process: subprocess.Popen | None, fault: Fault, now_s: float
    ) -> None:
        if process is None or process.poll() is not None:
            self._record(now_s, fault.kind, target, skipped="not running")
            return
        if any(p.process is process for p in self._paused):
            self._record(now_s, fault.kind, target, skipped="already paused")
            return
        process.send_signal(signal.SIGSTOP)
        self._paused.append(_Paused(process, now_s + fault.hold_s, target))
        log.info("chaos: paused %s for %.1fs at %.1fs", target, fault.hold_s, now_s)
        self._record(now_s, fault.kind, target, self.phase_of(target))

    def _record(
        self,
        now_s: float,
        kind: str,
        target: str,
        phase: str = "",
        skipped: str | None = None,
        fault: int | None = None,
    ) -> None:
        fault = self._faults if fault is None else fault
        self.applied.append(Applied(fault, now_s, kind, target, phase, skipped))
