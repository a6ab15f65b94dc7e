"""`ExpertStore.put` in a real process, SIGKILLed at chosen points of its write.

The writer blocks at the point (a wrapper around one step of ``put``, in the child only)
and says so on stdout; the test waits for that line, checks that a store opened meanwhile
leaves the live writer's files alone, then kills it. Afterwards: no partial expert is
visible, the next open removes what the writer left, a re-put succeeds, nothing twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from experts.store import ExpertRefused, ExpertStore
from tests.support.experts import FP, tiny_expert

pytestmark = pytest.mark.slow  # every test starts a process

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, sys
import experts.store_files as store_module  # the directory backend writes the files
from experts.store import ExpertStore, WEIGHTS
from tests.support.experts import FP, tiny_expert

point = sys.argv[2]

def block():
    print("blocked", flush=True)
    sys.stdin.read()  # until killed

real_write, real_rename = store_module._write_synced, os.rename

def write(path, data):
    if point == "mid_weights" and path.name == WEIGHTS:
        with path.open("wb") as handle:
            handle.write(data[: len(data) // 2])
            handle.flush()
            os.fsync(handle.fileno())
        block()
    real_write(path, data)

def rename(src, dst):
    if point == "before_rename":
        block()
    real_rename(src, dst)
    if point == "after_rename":
        block()

store_module._write_synced = write
store_module.os.rename = rename
ExpertStore(sys.argv[1], FP).put("victim", tiny_expert(3), "d", [1.0, 0.0])
"""


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".tmp-"))


@pytest.mark.parametrize("point", ["mid_weights", "after_rename"])
def test_sigkilled_writer_leaves_no_partial_expert(tmp_path: Path, point: str) -> None:
    root = tmp_path / "store"
    ExpertStore(root, FP).put("bystander", tiny_expert(1), "d", [0.0, 1.0])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), point],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert child.stdout.readline() == b"blocked\n"  # the event: it sits at the point
        left = _leftovers(root)
        assert left, "a writer at work has a lock file"
        ExpertStore(root, FP)  # another process opening the store meanwhile
        assert _leftovers(root) == left  # a live writer's files are never touched
        child.send_signal(signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    visible = ExpertStore(root, FP)  # the next open cleans up after the dead writer
    assert _leftovers(root) == []
    if point == "after_rename":  # the rename is the commit point: the expert is whole
        assert visible.ids() == ["bystander", "victim"]
        assert visible.get("victim") is not None
    else:
        assert visible.ids() == ["bystander"]
        with pytest.raises(ExpertRefused) as info:
            visible.manifest("victim")
        assert info.value.reason == "missing"
    again = visible.put("victim", tiny_expert(3), "d", [1.0, 0.0])
    assert visible.ids() == ["bystander", "victim"]  # once, whatever the point
    assert visible.manifest("victim").sha256 == again.sha256
    assert visible.verify().ok == ["bystander", "victim"] and visible.quarantined() == []
    assert _leftovers(root) == []
