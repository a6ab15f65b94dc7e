"""Held-out loss of a causal LM on a list of texts: per document and token-weighted overall."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

# (input_ids (B, T), attention_mask (B, T), weights per sequence) -> (losses, mask), (B, T-1)
TokenLossFn = Callable[
    [torch.Tensor, torch.Tensor, list[dict[str, float]]], tuple[torch.Tensor, torch.Tensor]
]


@dataclass(frozen=True)
class Scores:
    """Per-document mean losses and token counts, and their token-weighted mean."""

    doc_loss: list[float]  # mean nats/token of each document
    doc_tokens: list[int]  # predicted tokens of each document

    @property
    def mean(self) -> float:
        """Mean loss per token over all documents (nats/token)."""
        total = sum(self.doc_tokens)
        if total == 0:
            raise ValueError("no predicted tokens: every held-out text is shorter than 2 tokens")
        return sum(loss * n for loss, n in zip(self.doc_loss, self.doc_tokens, strict=True)) / total


@torch.no_grad()
def score_texts(
    token_losses: TokenLossFn,
    tokenizer,
    texts: list[str],
    weights: list[dict[str, float]] | None = None,
    max_tokens: int = 128,
    batch_size: int = 8,
    device: torch.device | str = "cpu",
) -> Scores:
    """Mean next-token loss of each text (first ``max_tokens`` tokens), in batches.

    Parameters
    ----------
    token_losses
        ``Mixture.token_losses``, or a plain LM's losses
        (``trainer.recipes.dense.sequence_losses``).
    weights
        Routing of each text (``{}`` = trunk only); default: trunk only for all.
    """
    weights = [{} for _ in texts] if weights is None else weights
    if len(weights) != len(texts):
        raise ValueError(f"{len(weights)} routings for {len(texts)} texts")
    doc_loss: list[float] = []
    doc_tokens: list[int] = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        enc = tokenizer(
            chunk, return_tensors="pt", padding=True, truncation=True, max_length=max_tokens
        )
        ids = enc["input_ids"].to(device)  # (B, T)
        mask = enc["attention_mask"].to(device)  # (B, T)
        losses, used = token_losses(ids, mask, weights[start : start + batch_size])  # (B, T-1)
        counts = used.sum(dim=1)  # (B,)
        means = losses.sum(dim=1) / counts.clamp_min(1.0)  # (B,)
        doc_loss.extend(float(v) for v in means)
        doc_tokens.extend(int(v) for v in counts)
    return Scores(doc_loss, doc_tokens)
