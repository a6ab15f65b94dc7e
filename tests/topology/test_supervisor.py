import sys

import pytest

from tests.support.processes import gone as _gone
from topology.loop.supervisor import ChildSpec, Supervisor

pytestmark = pytest.mark.slow  # every test starts processes


def test_crashed_child_is_restarted_alone_and_all_stop(tmp_path):
    marker = tmp_path / "runs"
    crash_once = (
        "import pathlib,sys,time\n"
        f"p=pathlib.Path({str(marker)!r}); n=int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n+1))\n"
        "sys.exit(3) if n == 0 else time.sleep(600)\n"
    )
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(ChildSpec("crashy", [sys.executable, "-c", crash_once]))
        sup.start(ChildSpec("steady", [sys.executable, "-c", "import time; time.sleep(600)"]))
        steady_pid = sup.children["steady"].process.pid
        first = sup.children["crashy"].process
        first.wait(timeout=30)
        assert sup.poll() == []
        assert sup.children["crashy"].restarts == 1
        assert sup.children["steady"].process.pid == steady_pid
        pids = sup.pids()
    assert all(_gone(pid) for pid in pids)


def test_oneshot_child_reports_its_end(tmp_path):
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(ChildSpec("once", [sys.executable, "-c", "print('hi')"], oneshot=True))
        sup.children["once"].process.wait(timeout=30)
        assert sup.poll() == ["once"]
        assert (tmp_path / "logs" / "once.log").read_text().strip() == "hi"


def test_the_restart_budget_is_per_window_so_crashes_far_apart_never_use_it_up(tmp_path):
    # found sizing the chaos run (docs/chaos.md): the budget was per life, so a loop's
    # fourth crash of one stage, however many days after the third, stopped the whole loop
    now = [0.0]
    crash = [sys.executable, "-c", "raise SystemExit(3)"]
    spec = ChildSpec("flaky", crash, max_restarts=2, restart_window_s=100.0)
    with Supervisor(tmp_path / "logs", clock=lambda: now[0]) as sup:
        sup.start(spec)
        for _ in range(5):  # a crash a minute: never two restarts within 100 s before this one
            sup.children["flaky"].process.wait(timeout=30)
            assert sup.poll() == []
            now[0] += 60.0
        assert sup.children["flaky"].restarts == 5

        now[0] += 100.0  # the window is clear again
        for _ in range(2):  # a crash loop: the third crash within the window ends it
            sup.children["flaky"].process.wait(timeout=30)
            assert sup.poll() == []
        sup.children["flaky"].process.wait(timeout=30)
        assert sup.poll() == ["flaky"]
