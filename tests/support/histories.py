"""Hand-made evaluation histories for the monitor's figure, table and metric tests."""

from __future__ import annotations

import math
from pathlib import Path

from monitor.history import MatrixHistory
from monitor.records import EvalRow


def eval_row(run: str, step: int, loss: dict[str, float], arrived: str | None = None) -> EvalRow:
    """An evaluation row of ``run`` at ``step`` (perplexity from the loss; ``arrived``: the
    domain whose expert arrived at this step)."""
    return EvalRow(
        run=run,
        step=step,
        expert_ids=[],
        loss=loss,
        perplexity={d: math.exp(v) for d, v in loss.items()},
        arrived_expert=f"{arrived}-e" if arrived else None,
        arrived_domain=arrived,
    )


def history_with_gaps(root: Path) -> MatrixHistory:
    """Two runs of three domains; the baseline meets "b" late and "c" never gets an expert."""
    h = MatrixHistory(root)
    # "b" appears only at step 2 in the baseline (no back-fill there); "c" never gets an expert
    h.append(eval_row("ours", 0, {"a": 3.0, "b": 3.0, "c": 3.0}))
    h.append(eval_row("ours", 1, {"a": 2.0, "b": 3.0, "c": 3.1}, "a"))
    h.append(eval_row("ours", 2, {"a": 2.0, "b": 1.5, "c": 3.1}, "b"))
    h.append(eval_row("dense_baseline", 0, {"a": 3.0, "c": 3.0}))
    h.append(eval_row("dense_baseline", 1, {"a": 1.8, "c": 2.9}, "a"))
    h.append(eval_row("dense_baseline", 2, {"a": 2.6, "b": 1.4, "c": 3.2}, "b"))
    return h
