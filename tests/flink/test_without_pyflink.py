"""Without apache-flink (the core venv), the Flink commands say how to install it, in one line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("pyflink") is not None, reason="apache-flink is installed here"
    ),
    pytest.mark.slow,  # each test starts `worx` as a process
]


@pytest.mark.parametrize(
    "argv",
    [
        ["flink", "run"],
        ["flink", "submit", "--jobmanager", "h:8081"],
        ["demo", "--runtime", "flink"],
        ["up", "--runtime", "flink"],  # before the missing kafka.bootstrap_servers
    ],
)
def test_flink_commands_without_pyflink_give_the_install_command(argv, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "topology.commands", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "WORX_DATA_DIR": str(tmp_path), "PYTHONPATH": ROOT},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert 'pip install torch==2.13.0 -e ".[flink,dev]" -c constraints-flink.txt' in lines[0]
    assert not (tmp_path / "worx-demo").exists()  # refused before a run directory is made
