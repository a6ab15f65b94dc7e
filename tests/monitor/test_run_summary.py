"""The demo's end-of-stream comparison with the dense baseline."""

from __future__ import annotations

import dataclasses
import math

import pytest

from monitor import run_summary
from monitor.records import EvalRow


def _row(run: str, step: int, ppl: dict[str, float]) -> EvalRow:
    return EvalRow(
        run=run,
        step=step,
        expert_ids=[],
        loss={d: math.log(v) for d, v in ppl.items()},
        perplexity=ppl,
    )


def test_the_last_rows_are_compared_domain_by_domain_by_label() -> None:
    ours = [_row("ours", 0, {"a": 900.0, "b": 40.0}), _row("ours", 1, {"a": 100.0, "b": 40.0})]
    dense = [
        _row("dense_baseline", 0, {"a": 900.0, "b": 40.0}),
        _row("dense_baseline", 1, {"a": 50.0, "b": 160.0, "c": 7.0}),  # c: only dense has it
    ]
    out = run_summary.final_against_baseline(ours, dense, {"a": "legal", "b": "news"})
    assert out["ppl_geomean_final"] == pytest.approx(math.sqrt(100.0 * 40.0))
    assert out["baseline_ppl_geomean_final"] == pytest.approx(math.sqrt(50.0 * 160.0))
    assert out["domains_dense_better"] == ["legal"]
    assert out["ppl_final_by_domain"]["news"] == {"ours": 40.0, "dense": 160.0}


def test_without_a_baseline_the_comparison_is_empty() -> None:
    out = run_summary.final_against_baseline([_row("ours", 0, {"a": 9.0})], [], {})
    assert out["domains_dense_better"] is None and out["ppl_geomean_final"] is None


def test_monitor_cpu_per_registration_first_and_last_ten() -> None:
    rows = [_row("ours", 0, {"a": 9.0})] + [
        dataclasses.replace(_row("ours", i, {"a": 9.0}), arrived_expert=f"e{i}", cpu_s=float(i))
        for i in range(1, 26)
    ]
    out = run_summary.cpu_per_registration(rows)
    assert out["registrations"] == 25  # row 0 (the trunk alone) is no registration
    assert out["first_ten"] == [float(i) for i in range(1, 11)]
    assert out["last_ten"] == [float(i) for i in range(16, 26)]
    assert out["first_ten_mean"] == 5.5 and out["last_ten_mean"] == 20.5
    assert out["last_over_first"] == pytest.approx(20.5 / 5.5, abs=1e-3)
    assert run_summary.cpu_per_registration(rows[:1]) is None
    old = [dataclasses.replace(r, cpu_s=0.0) for r in rows]  # a history from before cpu_s
    assert run_summary.cpu_per_registration(old) is None


def test_time_to_expert_runs_from_a_kind_s_first_document_to_its_first_expert() -> None:
    first_doc_ms = {"legal": 10_000, "news": 20_000, "code": 30_000}
    registrations = {
        "exp-1": ("dom-legal", 70_000),  # legal: 60 s
        "exp-2": ("dom-legal-2", 50_000),  # a second domain of legal served it first: 40 s
        "exp-3": ("dom-code", 130_000),  # code: 100 s
    }
    labels = {"dom-legal": "legal", "dom-legal-2": "legal", "dom-code": "code"}
    out = run_summary.time_to_expert(first_doc_ms, registrations, labels, ["legal", "code", "news"])
    assert out["per_label"] == {"legal": 40.0, "code": 100.0, "news": None}
    assert out["median_s"] == 70.0 and out["max_s"] == 100.0
    assert out["never"] == ["news"]
