"""The domain table applies a row only after the table it makes is built and checked: a
hostile row changes no decision, and later good rows still apply."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from experts.records import ExpertRegistration
from monitor.domains import KnownDomains
from monitor.heldout import HeldoutSets
from monitor.history import MatrixHistory
from monitor.live import LiveState
from monitor.stage import MonitorStage
from router.records import DomainRecord
from router.table import DomainTable
from worx.records import RecordError

DIM = 8


def _unit(v: np.ndarray) -> list[float]:
    return (v / np.linalg.norm(v)).astype(np.float64).tolist()


def _axis(i: int) -> list[float]:
    v = np.zeros(DIM)
    v[i] = 1.0
    return v.tolist()


def _row(domain_id: str, centroid: list[float], version: int = 1, **kw) -> DomainRecord:
    return DomainRecord(
        domain_id, centroid, kw.pop("threshold", 0.5), 10, 0.8, version=version, **kw
    )


@pytest.fixture
def vectors() -> np.ndarray:
    rng = np.random.default_rng(7)
    raw = rng.normal(size=(300, DIM)).astype(np.float32)
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)  # (300, DIM)


@pytest.fixture
def table() -> DomainTable:
    table = DomainTable()
    for i, name in enumerate(("dom-a", "dom-b", "dom-c")):
        assert table.apply(_row(name, _axis(i), threshold=0.3, core_threshold=0.6))
    return table


def _decisions(table: DomainTable, vectors: np.ndarray) -> list[tuple]:
    return [table.decide(v) for v in vectors]


def _hostile_rows() -> list[tuple[str, object]]:
    huge = [1e6] + [0.0] * (DIM - 1)  # would win every dot product near its axis
    rows: list[tuple[str, object]] = [
        ("nan centroid (new domain)", _row("dom-x", [math.nan] * DIM)),
        ("nan centroid (newer version of dom-a)", _row("dom-a", [math.nan] * DIM, version=2)),
        ("inf centroid", _row("dom-x", [math.inf] + [0.0] * (DIM - 1))),
        ("null centroid", _row("dom-x", [None] * DIM)),
        ("string centroid", _row("dom-x", ["x"] * DIM)),
        ("string centroid (newer dom-b)", _row("dom-b", ["x", "y"] + [0.0] * (DIM - 2), 2)),
        ("wrong dimension", _row("dom-x", _axis(0)[:4])),
        ("wrong dimension (newer dom-c)", _row("dom-c", [1.0], version=5)),
        ("empty centroid", _row("dom-x", [])),
        ("huge norm", _row("dom-x", huge)),
        ("zero centroid", _row("dom-x", [0.0] * DIM)),
        ("nan threshold", _row("dom-x", _axis(3), threshold=math.nan)),
        ("threshold far out", _row("dom-x", _axis(3), threshold=-1e9)),
        ("unsafe id", _row("../dom-x", _axis(3))),
        ("trailing newline id", _row("dom-a\n", _axis(3), version=9)),
        ("unknown status", dataclasses.replace(_row("dom-a", _axis(0), 3), status="hijack")),
        ("nested centroid", _row("dom-x", [[1.0]] * DIM)),
        ("not a domain row", ExpertRegistration("e1", "dom-a", "0" * 64, "f" * 64, _axis(0))),
        ("a dict", {"domain_id": "dom-x", "centroid": _axis(0)}),
    ]
    return rows


HOSTILE = _hostile_rows()


@pytest.mark.parametrize("row", [r for _, r in HOSTILE], ids=[n for n, _ in HOSTILE])
def test_a_hostile_row_changes_no_decision(table: DomainTable, vectors: np.ndarray, row) -> None:
    before, version, rows = _decisions(table, vectors), table.version, table.rows()
    with pytest.raises(RecordError):
        table.apply(row)  # type: ignore[arg-type]
    assert _decisions(table, vectors) == before
    assert table.version == version and table.rows() == rows
    # later good rows still apply: a new domain takes the documents nearest it
    assert table.apply(_row("dom-d", _axis(3), threshold=0.3))
    assert table.apply(_row("dom-a", _axis(0), version=2, threshold=0.9))
    after = _decisions(table, vectors)
    assert any(d[0] == "dom-d" for d in after)
    assert all(d[0] != "dom-a" or d[1] >= 0.9 for d in after)


def test_hostile_rows_off_the_wire_are_refused_before_the_table(
    table: DomainTable, vectors: np.ndarray
) -> None:
    good = _row("dom-x", _axis(4)).to_json()
    before = _decisions(table, vectors)
    for raw in (
        good.replace(b"[0.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0]", b"[NaN,0,0,0,1,0,0,0]"),
        good.replace(b"[0.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0]", b'["x","y"]'),
        good.replace(b"[0.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0]", b"[null,null]"),
        good.replace(b'"schema_version":1', b'"schema_version":2'),
        b"[" * 10_000,
        None,  # a tombstone: never reaches the table (domain rows are retired by status)
    ):
        with pytest.raises(RecordError):
            table.apply(DomainRecord.from_json(raw, strict=False))
    assert _decisions(table, vectors) == before
    assert table.apply(DomainRecord.from_json(good))  # the good one still applies


def test_a_duplicate_with_changed_content_keeps_the_first(
    table: DomainTable, vectors: np.ndarray
) -> None:
    before, version = _decisions(table, vectors), table.version
    changed = _row("dom-a", _axis(5), threshold=0.3, core_threshold=0.6)  # same version 1
    assert not table.apply(changed)
    assert not table.apply(_row("dom-a", _axis(0), threshold=0.3, core_threshold=0.6))  # replay
    assert _decisions(table, vectors) == before and table.version == version
    assert table.get("dom-a").centroid == _axis(0)


def test_a_table_told_the_embedders_dimension_refuses_other_ones() -> None:
    table = DomainTable(dim=DIM)
    with pytest.raises(RecordError) as info:
        table.apply(_row("dom-a", [0.6, 0.8]))
    assert info.value.reason == "wrong_dimension" and len(table) == 0
    assert table.apply(_row("dom-a", _axis(0)))


def test_the_monitors_tables_keep_nothing_of_a_hostile_row(tmp_path: Path) -> None:
    history, heldout = MatrixHistory(tmp_path / "monitor"), HeldoutSets(tmp_path / "heldout", 4, 0)
    stage = MonitorStage("p", history, heldout, LiveState(), state_dir=tmp_path)
    known, labels = stage.domains, stage.labels
    good = _row("dom-a", _axis(0), label_hint="Alpha")
    stage.apply_domain(good)
    saved = (tmp_path / "domains.json").read_text(), (tmp_path / "domain_labels.json").read_text()
    for _, row in HOSTILE[:12]:
        with pytest.raises(RecordError):
            known.apply(row)  # type: ignore[arg-type]
        with pytest.raises(RecordError):
            stage.apply_domain(dataclasses.replace(row, label_hint="Hijacked"))  # type: ignore
    now = (tmp_path / "domains.json").read_text(), (tmp_path / "domain_labels.json").read_text()
    assert now == saved
    assert labels.snapshot() == {"dom-a": "Alpha"}
    assert known.table.rows() == [good]
    assert [r.domain_id for r in KnownDomains(tmp_path).table.rows()] == ["dom-a"]
    assert json.loads(saved[1]) == {"dom-a": "Alpha"}
