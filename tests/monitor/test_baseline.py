"""The dense baseline: restart-safe, replay-safe, and it forgets (the reason it is there)."""

from __future__ import annotations

import shutil

import pytest

from monitor.baseline import RUN, DenseBaseline
from tests.support.smallrun import DENSE, EXPERT_DOMAINS, SmallRun


def test_same_domains_same_order_and_replay_is_a_no_op(small_run: SmallRun) -> None:
    rows = small_run.history.rows(RUN)
    assert [r.arrived_domain for r in rows] == [None, *EXPERT_DOMAINS]
    # same trunk, same scoring; the dense copy runs gelu_new as PyTorch's fused kernel
    # (experts.trunk.use_fused_gelu): the same function, equal to ~1e-8 nats
    ours = small_run.history.rows("ours")[0].loss
    assert rows[0].loss == pytest.approx(ours, rel=1e-6, abs=1e-6)
    baseline = DenseBaseline(
        small_run.trunk.path,
        small_run.heldout,
        small_run.history,
        small_run.root / "baseline",
        DENSE,
        max_tokens=64,
    )
    replayed = baseline.step("legal-e1", "legal", ["text"])  # nothing trained: rows again
    assert replayed == rows[: [r.arrived_expert for r in rows].index("legal-e1") + 1]


def test_restart_between_save_and_row_evaluates_without_retraining(
    run_copy: SmallRun, small_run: SmallRun
) -> None:
    shutil.copytree(small_run.root / "baseline", run_copy.root / "baseline")
    lost = run_copy.history.rows(RUN)[-1]
    run_copy.history.data["runs"][RUN].pop()  # the crash: model saved, row not written
    run_copy.history.save()
    baseline = DenseBaseline(
        small_run.trunk.path,
        run_copy.heldout,
        run_copy.history,
        run_copy.root / "baseline",
        DENSE,
        max_tokens=64,
    )
    [row] = baseline.step(lost.arrived_expert, lost.arrived_domain, ["unused: not retrained"])
    assert row.step == lost.step and row.loss == lost.loss  # bit-identical: the same model


def test_dense_forgets_where_experts_do_not(small_run: SmallRun) -> None:
    ours = small_run.history.summaries("ours")[-1]
    dense = small_run.history.summaries(RUN)[-1]
    assert dense["forgetting_avg"] > 0.1  # dense fine-tuning lost the earlier domains...
    assert abs(ours["forgetting_avg"]) < 0.05 * dense["forgetting_avg"]  # ...the experts did not
    assert dense["backward_transfer"] < ours["backward_transfer"]
