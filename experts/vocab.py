"""Vocabulary parts of an expert: a domain's own view of the trunk's token embeddings.

A trunk's tied embedding/unembedding was learnt on its pretraining text; a new domain's
tokens (gene names, identifiers, archaic words) are where it is weakest, and adapters beside
the MLP cannot change which tokens the output layer prefers. Two small modules can:

* :class:`OutputDelta` adds ``up(down(h)) + bias`` to the logits: a rank-``r`` delta on the
  unembedding (``W + up @ down``, ``(V, d)``) and a per-token logit bias.
* :class:`TokenDelta` adds ``embed[ids] @ proj`` to the residual stream at the input of a
  chosen block: a rank-``r`` delta on the input embedding (block 0), or injected higher up,
  where no backward through the blocks below is needed.

Both start at exactly zero where they meet the trunk (``up``, ``bias`` and ``proj`` are
zero-initialised), so an untrained part changes no output.

Example
-------
>>> import torch
>>> out = OutputDelta(hidden_size=8, vocab_size=20, rank=2, bias=True)
>>> bool((out(torch.randn(3, 5, 8)) == 0).all())
True
>>> tokens = TokenDelta(vocab_size=20, hidden_size=8, rank=2)
>>> tokens(torch.tensor([[1, 2, 3]])).shape
torch.Size([1, 3, 8])
"""

from __future__ import annotations

import math

import torch
from torch import nn


class OutputDelta(nn.Module):
    """``h -> up(down(h)) + bias``, ``(B, T, d) -> (B, T, V)``; zero at insertion."""

    def __init__(self, hidden_size: int, vocab_size: int, rank: int, bias: bool) -> None:
        super().__init__()
        self.rank = int(rank)
        if rank > 0:
            self.down = nn.Linear(hidden_size, rank, bias=False)
            nn.init.normal_(self.down.weight, std=1.0 / math.sqrt(hidden_size))
            self.up = nn.Linear(rank, vocab_size, bias=False)
            nn.init.zeros_(self.up.weight)  # function-preserving
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if bias else None

    def low_rank(self, h: torch.Tensor) -> torch.Tensor | None:
        """``down(h)``, ``(..., d) -> (..., r)``; None when the part has no low-rank delta."""
        return self.down(h) if self.rank > 0 else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        delta = None
        if self.rank > 0:
            delta = self.up(self.down(h))  # (B, T, d) -> (B, T, r) -> (B, T, V)
        if self.bias is not None:
            delta = self.bias if delta is None else delta + self.bias
            if delta.dim() == 1:  # bias alone: broadcast to (B, T, V)
                delta = delta.expand(*h.shape[:-1], -1)
        return delta


class TokenDelta(nn.Module):
    """``ids -> embed[ids] @ proj``, ``(B, T) -> (B, T, d)``; zero at insertion."""

    def __init__(self, vocab_size: int, hidden_size: int, rank: int) -> None:
        super().__init__()
        # embed[ids] @ proj then has the scale of GPT-2-style embeddings (init range 0.02)
        # once proj has unit-sized entries
        self.embed = nn.Parameter(
            torch.randn(vocab_size, rank) * (0.02 * math.sqrt(hidden_size / rank))
        )
        self.proj = nn.Parameter(torch.zeros(rank, hidden_size))  # function-preserving

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed[ids] @ self.proj  # (B, T) -> (B, T, r) -> (B, T, d)
