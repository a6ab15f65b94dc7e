"""The monitor's copy of the domain table: followed rows kept on disk, reloaded on restart."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from monitor.domains import KnownDomains
from monitor.live import LiveState
from monitor.stage import MonitorStage
from router.records import DomainRecord


def _row(domain_id: str, centroid: list[float], version: int = 1) -> DomainRecord:
    return DomainRecord(domain_id, centroid, 0.5, 10, 0.8, version=version, label_hint=domain_id)


def test_rows_are_saved_and_a_restart_routes_the_same(tmp_path: Path) -> None:
    known = KnownDomains(tmp_path)
    assert known.apply(_row("a", [1.0, 0.0])) and known.apply(_row("b", [0.0, 1.0]))
    assert not known.apply(_row("a", [0.0, 1.0]))  # not newer: ignored, not saved
    again = KnownDomains(tmp_path)
    assert again.table.version == known.table.version == 2
    doc = np.array([0.9, 0.1], np.float32)
    assert again.table.decide(doc) == known.table.decide(doc)
    assert again.table.get("a").centroid == [1.0, 0.0]


def test_the_stage_applies_a_domain_row_to_labels_and_routing(tmp_path: Path) -> None:
    stage = MonitorStage("p", *_files(tmp_path), state_dir=tmp_path)
    stage.apply_domain(_row("a", [1.0, 0.0]))
    stage.apply_domain(dataclasses.replace(_row("a", [1.0, 0.0], 2), label_hint="Alpha"))
    assert stage.labels.snapshot() == {"a": "Alpha"}
    assert stage.domains.table.get("a").version == 2
    assert KnownDomains(tmp_path).table.get("a").label_hint == "Alpha"


def test_an_unreadable_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "domains.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="delete it"):
        KnownDomains(tmp_path)
    (tmp_path / "domains.json").write_text("[{")
    with pytest.raises(ValueError, match="unreadable"):
        KnownDomains(tmp_path)


def _files(root: Path):
    from monitor.heldout import HeldoutSets
    from monitor.history import MatrixHistory

    return MatrixHistory(root / "monitor"), HeldoutSets(root / "heldout", 4, 0), LiveState()
