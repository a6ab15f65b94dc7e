"""Learning-rate schedules with linear warm-up: cosine decay or constant."""

from __future__ import annotations

import math


def lr_at(
    step: int,
    *,
    base_lr: float,
    total_steps: int,
    warmup_steps: int,
    kind: str = "cosine",
    min_ratio: float = 0.1,
    progress: float | None = None,
) -> float:
    """Learning rate for optimizer step ``step`` (0-based).

    Warm-up rises linearly from ``base_lr / warmup_steps`` to ``base_lr`` over ``warmup_steps``;
    then ``cosine`` decays to ``min_ratio * base_lr`` at ``total_steps``, ``constant`` stays.
    ``progress`` in [0, 1], when given, is the position in the decay instead of the one
    ``step`` gives (a schedule over a time budget: the share of the budget after warm-up).

    Examples
    --------
    >>> lr_at(0, base_lr=1.0, total_steps=10, warmup_steps=2)
    0.5
    >>> lr_at(9, base_lr=1.0, total_steps=10, warmup_steps=0, kind="constant")
    1.0
    >>> lr_at(5, base_lr=1.0, total_steps=10, warmup_steps=2, progress=1.0)
    0.1
    """
    if kind not in ("cosine", "constant"):
        raise ValueError(f"unknown schedule {kind!r}: use 'cosine' or 'constant'")
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if kind == "constant":
        return base_lr
    if progress is None:
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    progress = min(1.0, max(0.0, progress))
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
