"""The layer contract of pyproject.toml ([tool.importlinter]) holds, and would catch a break.

By hand: ``lint-imports`` at the repository root. To see it fail, add ``import topology``
to any module under ingest/, router/, experts/, trainer/ or monitor/ and run it again;
:func:`test_a_stage_that_imports_a_runtime_breaks_the_contract` does exactly that in a
copy of the packages.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test starts a process

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("worx", "ingest", "router", "experts", "trainer", "monitor", "topology", "bench")

pytest.importorskip("importlinter", reason="import-linter is in the dev extra")


def _lint(root: Path) -> subprocess.CompletedProcess:
    """Run the contracts of ``root``/pyproject.toml on the packages under ``root``."""
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"
    )
    # the packages of ``root`` first on sys.path (cwd), before the editable install's finder
    return subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300
    )


def test_the_layer_contract_holds():
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_stage_that_imports_a_runtime_breaks_the_contract(tmp_path):
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "trainer" / "bad_shortcut.py").write_text(
        '"""A deliberate break: a stage reaching into the runtime."""\n\n'
        "from confluent_kafka import Consumer  # noqa: F401\n"
        "from topology.composition.kafka_clients import make_consumer  # noqa: F401\n"
    )
    result = _lint(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "2 broken" in result.stdout
    assert "trainer.bad_shortcut -> topology.composition.kafka_clients" in result.stdout
    assert "trainer.bad_shortcut -> confluent_kafka" in result.stdout
