"""The injector's faults on real processes under a real supervisor: SIGKILL by stage name,
a second kill of the restarted process, a pause resumed when due, a target not running."""

from __future__ import annotations

import sys
import time

import pytest

from tests.support.processes import gone
from topology.chaos.injector import Injector
from topology.chaos.schedule import Fault
from topology.loop.supervisor import ChildSpec, Supervisor

pytestmark = pytest.mark.slow  # starts processes

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2]


def wait_until(condition, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)  # polling a process table: no event to wait on


def test_a_kill_hits_the_named_stage_and_a_second_kill_its_restarted_process(tmp_path):
    with Supervisor(tmp_path / "logs") as sup:
        for name in ("route", "trainer"):
            sup.start(ChildSpec(name, SLEEPER, max_restarts=5))
        injector = Injector(sup, broker=None, phase_of=lambda name: f"{name}-phase")
        route, trainer = sup.children["route"].process, sup.children["trainer"].process

        injector.apply(Fault(1.0, "kill_again", ("route",), hold_s=0.0), now_s=1.0)
        route.wait(timeout=10)
        assert route.returncode == -9 and trainer.poll() is None
        assert injector.busy()  # the second kill waits for the restart
        injector.tick(now_s=2.0)
        assert len(injector.injected()) == 1  # not restarted yet: nothing to kill
        sup.poll()
        restarted = sup.children["route"].process
        assert restarted.pid != route.pid
        injector.tick(now_s=3.0)
        restarted.wait(timeout=10)
        assert restarted.returncode == -9 and not injector.busy()
        assert [(a.kind, a.target, a.phase) for a in injector.injected()] == [
            ("kill_again", "route", "route-phase"),
            ("kill_again", "route", "recovering"),
        ]
        assert injector.by_kind() == {"kill_again": 1} and injector.faults_injected() == 1


def test_a_pause_stops_the_stage_until_it_is_due_and_a_finished_stage_is_skipped(tmp_path):
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(ChildSpec("monitor", SLEEPER))
        sup.start(ChildSpec("ingest", [sys.executable, "-c", "pass"], oneshot=True))
        sup.children["ingest"].process.wait(timeout=30)
        injector = Injector(sup, broker=None)
        monitor = sup.children["monitor"].process

        injector.apply(Fault(5.0, "pause", ("monitor",), hold_s=12.0), now_s=5.0)
        wait_until(lambda: state_of(monitor.pid) == "T")
        injector.tick(now_s=16.9)
        assert state_of(monitor.pid) == "T"
        injector.tick(now_s=17.0)
        wait_until(lambda: state_of(monitor.pid) in "SR")

        injector.apply(Fault(20.0, "kill", ("ingest",)), now_s=20.04)
        # kept exact: rounded up, a fault at 67.86 s would follow the failed probe at 67.88 s
        # that it caused, and serve's own outage would count as one after another fault
        assert injector.applied[-1].at_s == 20.04
        assert [a.to_dict() for a in injector.applied][-1] == {
            "fault": 2,
            "at_s": 20.0,
            "kind": "kill",
            "target": "ingest",
            "phase": "",
            "skipped": "not running",
        }
        assert injector.by_kind() == {"pause": 1}


def test_resume_all_lets_every_paused_process_go_before_the_loop_stops(tmp_path):
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(ChildSpec("serve", SLEEPER))
        serve = sup.children["serve"].process
        injector = Injector(sup, broker=None)
        injector.apply(Fault(1.0, "pause", ("serve",), hold_s=60.0), now_s=1.0)
        wait_until(lambda: state_of(serve.pid) == "T")
        injector.resume_all()
        wait_until(lambda: state_of(serve.pid) in "SR")
        assert not injector.busy()
        pid = serve.pid
    assert gone(pid)


def test_two_stages_killed_at_once_are_one_fault_of_two_signals(tmp_path):
    with Supervisor(tmp_path / "logs") as sup:
        for name in ("discover", "serve", "monitor"):
            sup.start(ChildSpec(name, SLEEPER))
        injector = Injector(sup, broker=None)
        injector.apply(Fault(1.0, "kill_two", ("discover", "serve")), now_s=1.0)
        for name in ("discover", "serve"):
            assert sup.children[name].process.wait(timeout=10) == -9
        assert sup.children["monitor"].process.poll() is None
        assert injector.faults_injected() == 1 and injector.by_kind() == {"kill_two": 1}
        assert [a.target for a in injector.injected()] == ["discover", "serve"]
