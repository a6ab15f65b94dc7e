"""A stage's own subprocesses (a Flink client's JVM and Python workers) end with it: stopping
waits for the stage's whole process group and SIGKILLs what outlives the stop timeout."""

import signal
import sys
import time

import pytest

from tests.support.processes import gone as _gone
from topology.loop.supervisor import ChildSpec, Supervisor

pytestmark = pytest.mark.slow  # every test starts processes

# The stage: starts a grandchild in its process group, then on SIGTERM notes it and exits
# without stopping the grandchild (as a client whose JVM does not follow it at once).
STAGE = """
import pathlib, signal, subprocess, sys, time
out = pathlib.Path(sys.argv[1])
grandchild = subprocess.Popen([sys.executable, "-c", sys.argv[2], str(out)])
(out / "grandchild.pid").write_text(str(grandchild.pid))
def stop(*_):
    (out / "stage-term").write_text("")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
time.sleep(600)
"""
# The grandchild notes a SIGTERM and then goes on (it ignores it); only SIGKILL ends it.
GRANDCHILD = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: (out / "grandchild-term").write_text(""))
(out / "grandchild-ready").write_text("")
time.sleep(600)
"""


def _start(sup: Supervisor, tmp_path, **spec) -> int:
    sup.start(ChildSpec("stage", [sys.executable, "-c", STAGE, str(tmp_path), GRANDCHILD], **spec))
    deadline = time.monotonic() + 30
    while not (tmp_path / "grandchild-ready").exists():
        assert time.monotonic() < deadline, "the grandchild never started"
        time.sleep(0.05)
    return int((tmp_path / "grandchild.pid").read_text())


def test_sigterm_to_the_group_then_sigkill_to_what_outlives_the_stage(tmp_path):
    sup = Supervisor(tmp_path / "logs")
    grandchild = _start(sup, tmp_path, stop_timeout_s=1.0)
    sup.stop_all(timeout_s=1.0)
    assert (tmp_path / "stage-term").exists() and (tmp_path / "grandchild-term").exists()
    assert _gone(grandchild), "the stage's subprocess outlived the stop"


def test_term_leader_only_signals_the_stage_alone_and_still_ends_its_group(tmp_path):
    sup = Supervisor(tmp_path / "logs")
    grandchild = _start(sup, tmp_path, term_leader_only=True, stop_timeout_s=1.0)
    sup.stop("stage", timeout_s=1.0)
    assert (tmp_path / "stage-term").exists()
    assert not (tmp_path / "grandchild-term").exists()  # left to the stage to stop
    assert _gone(grandchild), "the stage's subprocess outlived the stop"
    assert sup.children["stage"].process.returncode == 0


def test_a_group_that_ends_with_its_stage_is_not_waited_for(tmp_path):
    sup = Supervisor(tmp_path / "logs")
    sup.start(ChildSpec("quick", [sys.executable, "-c", "import time; time.sleep(600)"]))
    started = time.monotonic()
    sup.stop_all(timeout_s=30.0)
    assert sup.children["quick"].process.returncode == -signal.SIGTERM
    assert time.monotonic() - started < 25.0  # liveness bound: not the whole stop timeout
