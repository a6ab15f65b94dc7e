"""The demo's end-of-stream comparison with the dense baseline."""

from __future__ import annotations

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
