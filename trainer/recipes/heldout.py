"""Held-out perplexity on packed rows: what the expert recipe evaluates (early stopping, the
quality gate) and compares the start candidates on (trainer/recipes/expert_start.py).

Example
-------
>>> import dataclasses
>>> from experts.trunk import load_trunk
>>> from trainer.fused_loss import output_layer
>>> from worx.bundled import trunk_dir
>>> trunk = load_trunk(trunk_dir())
>>> ids = trunk.tokenizer(["The court held that the contract was void."], return_tensors="pt")
>>> ids = ids["input_ids"]  # (1, T)
>>> rows = HeldOutRows(ids, torch.ones_like(ids), batch_size=8, head=output_layer(trunk.model),
...                    chunk=4, device=torch.device("cpu"))
>>> chunked = rows.perplexity(Mixture(trunk, {}), {})  # the trunk alone, 4 tokens at a time
>>> full = dataclasses.replace(rows, chunk=None).perplexity(Mixture(trunk, {}), {})
>>> abs(chunked - full) / full < 1e-4
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from experts.mixture import Mixture
from trainer.fused_loss import chunked_token_nll
from trainer.precision import autocast_for


@dataclass(frozen=True)
class HeldOutRows:
    ids: torch.Tensor  # (N, T) packed held-out rows
    mask: torch.Tensor  # (N, T)
    batch_size: int  # rows per forward
    head: nn.Linear  # the trunk's output layer (the chunked loss multiplies by it)
    chunk: int | None  # tokens per chunk of the chunked loss; None: the mixture's full logits
    device: torch.device  # where the rows are evaluated
    bf16: bool = False  # bf16 autocast on a CUDA device

    def __len__(self) -> int:
        return len(self.ids)

    @torch.no_grad()
    def perplexity(
        self, mixture: Mixture, weights: dict[str, float], rows: int | None = None
    ) -> float:
        """Perplexity of ``mixture`` with ``weights`` ({}: the trunk alone) on the first
        ``rows`` rows (None: all of them)."""
        total, count = 0.0, 0.0
        end = len(self.ids) if rows is None else min(rows, len(self.ids))
        for start in range(0, end, self.batch_size):
            ids = self.ids[start : min(start + self.batch_size, end)].to(self.device)  # (b, T)
            mask = self.mask[start : min(start + self.batch_size, end)].to(self.device)  # (b, T)
            with autocast_for(self.device, self.bf16):
                if self.chunk is not None:
                    hidden = mixture.hidden(ids, mask, [weights] * len(ids))  # (b, T, d)
                    output = output_part(mixture, weights)
                    nll, valid = chunked_token_nll(hidden, self.head, ids, mask, self.chunk, output)
                else:
                    losses, mask_ = mixture.token_losses(
                        ids, mask, [weights] * len(ids)
                    )  # (b, T-1)
                    nll, valid = float(losses.sum()), float(mask_.sum())
            total += nll
            count += valid
        return math.exp(total / max(count, 1.0))


def output_part(mixture: Mixture, weights: dict[str, float]) -> nn.Module | None:
    """The output part the chunked loss adds for ``weights``: that of its one expert."""
    used = [expert_id for expert_id, w in weights.items() if w != 0.0]
    if not used:
        return None  # the trunk alone
    if len(used) > 1 or weights[used[0]] != 1.0:
        raise ValueError("the chunked loss evaluates one expert at weight 1.0 at a time")
    return mixture.experts[used[0]].output
