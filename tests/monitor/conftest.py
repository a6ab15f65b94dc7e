"""Fixtures of the monitor tests: one small real run shared by the read-only tests."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tests.monitor.smallrun import SmallRun, build_small_run  # noqa: E402


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SmallRun]:
    """Tiny trunk, three trained experts registered, four domains (one never gets one)."""
    torch.set_num_threads(1)
    yield build_small_run(tmp_path_factory.mktemp("small-run"))


@pytest.fixture
def run_copy(small_run: SmallRun, tmp_path: Path) -> SmallRun:
    """A private copy of the small run's files, reopened by fresh objects (as after a restart)."""
    from experts.store import ExpertStore
    from monitor.evaluator import Evaluator
    from monitor.heldout import HeldoutSets
    from monitor.history import MatrixHistory

    for part in ("store", "heldout", "monitor"):
        shutil.copytree(small_run.root / part, tmp_path / part)
    store = ExpertStore(tmp_path / "store", small_run.trunk.fingerprint)
    heldout = HeldoutSets(tmp_path / "heldout", capacity=small_run.heldout.capacity, seed=1)
    history = MatrixHistory(tmp_path / "monitor")
    evaluator = Evaluator(
        small_run.trunk, store, heldout, history, small_run.evaluator.router, max_tokens=64
    )
    trunk, experts, texts = small_run.trunk, small_run.experts, small_run.train_texts
    return SmallRun(tmp_path, trunk, store, heldout, history, evaluator, experts, texts)
