"""Figures, report, tables and /metrics on a hand-made history with gaps (no model needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from rich.console import Console

from monitor.figures import build_state
from monitor.history import MatrixHistory
from monitor.prom import make_registry
from monitor.report import write_report
from monitor.terminal_tables import render
from tests.support.histories import eval_row, history_with_gaps


def test_state_of_a_history_with_gaps(tmp_path: Path) -> None:
    state = build_state(history_with_gaps(tmp_path))
    ours, dense = state["runs"]["ours"], state["runs"]["dense_baseline"]
    assert ours["domains"] == ["a", "b", "c"] and ours["arrivals"] == [1, 2, None]
    assert dense["loss"][0] == [3.0, None, 3.0]  # a gap, not a guess
    assert dense["forgetting_avg"][2] == 2.6 - 1.8  # only "a" is learned before step 2
    assert ours["forgetting_avg"][2] == 0.0
    assert state["headline"]["baseline_forgetting_avg"] == dense["forgetting_avg"][2]
    assert dense["forgetting_matrix"][2][1] is None  # "b" seen once in the baseline


def test_report_tables_and_metrics_survive_gaps(tmp_path: Path) -> None:
    state = build_state(history_with_gaps(tmp_path / "h"))
    written = write_report(state, tmp_path / "out")
    assert sorted(written) == sorted(
        [
            "heatmap.png",
            "perplexity.png",
            "forgetting.png",
            "timeline.png",
            "figures.json",
            "report.html",
        ]
    )
    console = Console(record=True, width=160)
    console.print(render(state))
    text = console.export_text()
    assert "trunk alone" in text and "–" in text  # the gap is shown as a gap
    metrics = generate_latest(make_registry(lambda: state)).decode()
    assert 'worx_domain_loss{domain="b",name="b",run="dense_baseline"} 1.4' in metrics
    assert 'worx_forgetting_avg{run="dense_baseline"}' in metrics


def test_empty_history_is_handled(tmp_path: Path) -> None:
    state = build_state(MatrixHistory(tmp_path))
    assert state["runs"]["ours"] is None and state["headline"]["experts"] == 0
    console = Console(record=True, width=120)
    console.print(render(state))
    assert "no evaluation yet" in console.export_text()
    assert b"worx_experts 0.0" in generate_latest(make_registry(lambda: state))
    with pytest.raises(ValueError, match="no evaluation yet"):
        write_report(state, tmp_path / "out")


def test_history_refuses_a_step_out_of_order(tmp_path: Path) -> None:
    h = MatrixHistory(tmp_path)
    with pytest.raises(ValueError, match="next step is 0"):
        h.append(eval_row("ours", 1, {"a": 1.0}))


def test_labels_name_the_domains_in_state_and_tables(tmp_path: Path) -> None:
    """Domain ids mean nothing to a person: the labels head the columns, ids stay the keys."""
    labels = {"a": "legal", "b": "fiction [austen]"}  # "c" has no label: shown by its id
    history = history_with_gaps(tmp_path)
    state = build_state(history, labels=labels)
    ours = state["runs"]["ours"]
    assert ours["domains"] == ["a", "b", "c"]
    assert ours["domain_names"] == ["legal", "fiction [austen]", "c"]
    assert ours["step_labels"] == ["trunk", "+legal", "+fiction [austen]"]
    assert state["runs"]["dense_baseline"]["domain_names"] == ["legal", "fiction [austen]", "c"]
    console = Console(record=True, width=200)
    console.print(render(state))
    text = console.export_text()
    assert "legal" in text and "fiction [austen]" in text  # escaped, not eaten as markup
    # two domains with one label stay distinguishable
    same = build_state(history, labels={"a": "news", "b": "news"})
    assert same["runs"]["ours"]["domain_names"] == ["news (a)", "news (b)", "c"]
