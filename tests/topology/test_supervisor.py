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
