"""A terminal progress bar for training: steps, loss, tokens/s (tqdm, on stderr)."""

from __future__ import annotations

from tqdm import tqdm


class StepProgress:
    """``update(step, loss, tokens_per_s)`` after each optimizer step; ``close()`` at the end."""

    def __init__(
        self, total: int, initial: int = 0, *, enabled: bool = True, desc: str = "train"
    ) -> None:
        self.bar = tqdm(
            total=total, initial=initial, desc=desc, unit="step", disable=not enabled, leave=False
        )
        self.last = initial

    def update(self, step: int, loss: float, tokens_per_s: float) -> None:
        self.bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_s:,.0f}", refresh=False)
        self.bar.update(step - self.last)
        self.last = step

    def close(self) -> None:
        self.bar.close()
