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


def test_time_to_expert_splits_each_wait_into_detection_queue_and_training() -> None:
    first_doc_ms = {"legal": 10_000, "news": 20_000, "code": 30_000, "bio": 40_000}
    registrations = {
        "exp-1": ("dom-legal", 70_000, "job-legal"),  # legal: 60 s, but not the first
        "exp-2": ("dom-legal-2", 50_000, "job-legal-2"),  # a second domain of legal: 40 s
        "exp-3": ("dom-code", 130_000, "job-code"),  # code: 100 s
        "exp-4": ("dom-bio", 60_000, "job-bio-gone"),  # bio: 20 s, its job's records gone
    }
    labels = {"dom-legal": "legal", "dom-legal-2": "legal", "dom-code": "code", "dom-bio": "bio"}
    job_created_ms = {"job-legal": 30_000, "job-legal-2": 25_000, "job-code": 40_000}
    job_started_ms = {"job-legal": 31_000, "job-legal-2": 27_000, "job-code": 70_000}
    out = run_summary.time_to_expert(
        first_doc_ms,
        registrations,
        labels,
        ["legal", "code", "news", "bio"],
        job_created_ms,
        job_started_ms,
    )
    assert out["per_label"]["legal"] == {
        "total_s": 40.0,
        "detect_s": 15.0,  # 10 s -> the job of the domain that served it first, at 25 s
        "queue_s": 2.0,
        "train_s": 23.0,
        "job_id": "job-legal-2",
    }
    code = out["per_label"]["code"]
    assert (code["detect_s"], code["queue_s"], code["train_s"]) == (10.0, 30.0, 60.0)
    assert code["detect_s"] + code["queue_s"] + code["train_s"] == code["total_s"] == 100.0
    bio = out["per_label"]["bio"]
    assert bio["total_s"] == 20.0 and bio["detect_s"] is bio["queue_s"] is bio["train_s"] is None
    assert out["per_label"]["news"] is None and out["never"] == ["news"]
    # nearest rank over the labels that have the figure: totals 20, 40, 100
    assert out["p50_s"] == {"total_s": 40.0, "detect_s": 10.0, "queue_s": 2.0, "train_s": 23.0}
    assert out["p95_s"] == {"total_s": 100.0, "detect_s": 15.0, "queue_s": 30.0, "train_s": 60.0}


def test_no_new_kind_served_has_no_percentiles() -> None:
    out = run_summary.time_to_expert({"legal": 1_000}, {}, {}, ["legal"], {}, {})
    assert out["per_label"] == {"legal": None} and out["never"] == ["legal"]
    assert set(out["p50_s"].values()) == set(out["p95_s"].values()) == {None}


def test_nearest_rank_is_always_one_of_the_values() -> None:
    twenty = [float(v) for v in range(1, 21)]
    assert run_summary.nearest_rank(twenty, 95) == 19.0  # rank ceil(19.0) = 19
    assert run_summary.nearest_rank(twenty, 50) == 10.0
    assert run_summary.nearest_rank(twenty[:19], 95) == 19.0  # below 20 values: the largest
    assert run_summary.nearest_rank([3.0, 1.0, 2.0, 4.0], 50) == 2.0  # not the median's 2.5
    assert run_summary.nearest_rank([5.0], 0) == run_summary.nearest_rank([5.0], 100) == 5.0
    assert run_summary.nearest_rank([], 50) is None


def test_the_worst_old_domain_loss_rise_says_where_the_documents_went() -> None:
    rows = [
        _row("ours", 0, {"a": 100.0, "b": 50.0}),
        dataclasses.replace(_row("ours", 1, {"a": 20.0, "b": 50.0}), arrived_domain="a"),
        dataclasses.replace(
            _row("ours", 2, {"a": 30.0, "b": 48.0}),
            arrived_domain="c",
            heldout_size={"a": 16, "b": 16},
            routing_moves={"a": {"d/trunk": [3, 0.2], "c": [1, 0.05]}},
        ),
        dataclasses.replace(
            _row("ours", 3, {"a": 25.0, "b": 48.0}),
            arrived_domain="d",
            routing_moves={"a": {"d": [3, -0.1]}},
        ),
    ]
    labels = {"a": "legal", "b": "news", "c": "code", "d": "bibtex"}
    got = run_summary.worst_old_domain_loss_rise(rows, labels)
    rise = (math.log(30.0) - math.log(20.0)) / math.log(20.0)
    assert got == {
        "domain": "legal",
        "rise": round(rise, 4),
        "step": 2,
        "from_step": 1,
        "arrived": "code",
        "heldout_docs": 16,
        "moved": {"bibtex/trunk": 3, "code": 1},
    }
    assert run_summary.max_old_domain_loss_rise(rows) == pytest.approx(rise)
    flat = [_row("ours", 0, {"a": 9.0}), _row("ours", 1, {"a": 8.0})]
    assert run_summary.worst_old_domain_loss_rise(flat, {}) is None
