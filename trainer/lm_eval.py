"""Held-out loss of a causal LM over token streams (the trunk recipe's evaluation).

Example
-------
>>> import torch
>>> from transformers import GPT2Config, GPT2LMHeadModel
>>> _ = torch.manual_seed(0)
>>> config = GPT2Config(vocab_size=50, n_positions=16, n_embd=8, n_layer=1, n_head=2,
...                     bos_token_id=0, eos_token_id=0)
>>> model = GPT2LMHeadModel(config)
>>> loss, tokens = evaluate(model, torch.arange(40) % 50, 16, 4, torch.device("cpu"), 64)
>>> tokens, 3.0 < loss < 5.0
(30, True)
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainer.precision import autocast_for


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    stream: torch.Tensor,
    context: int,
    batch_size: int,
    device: torch.device,
    max_tokens: int,
) -> tuple[float, int]:
    """Mean next-token loss over non-overlapping windows of ``stream``; (loss, tokens)."""
    model.eval()
    n_windows = min(stream.numel() // context, max(1, max_tokens // context))
    if n_windows == 0:  # a stream shorter than one window: evaluate it whole
        windows = stream[None, :]  # (1, N)
    else:
        windows = stream[: n_windows * context].view(n_windows, context)  # (W, T)
    total_loss, total_tokens = 0.0, 0
    for start in range(0, windows.shape[0], batch_size):
        x = windows[start : start + batch_size].to(device)  # (b, T)
        with autocast_for(device):
            logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits  # (b, T, V)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]),  # (b*(T-1), V)
            x[:, 1:].reshape(-1),  # (b*(T-1),)
            reduction="sum",
        )
        total_loss += float(loss)
        total_tokens += x[:, 1:].numel()
    model.train()
    return total_loss / max(1, total_tokens), total_tokens


def evaluate_domains(
    model: torch.nn.Module,
    heldout: dict[str, torch.Tensor],
    context: int,
    batch_size: int,
    device: torch.device,
    max_tokens: int,
) -> dict[str, dict[str, Any]]:
    """``{"loss", "ppl", "tokens"}`` of every domain's held-out stream, domains sorted."""
    per_domain = {}
    for domain, stream in sorted(heldout.items()):
        loss, n_tok = evaluate(model, stream, context, batch_size, device, max_tokens)
        per_domain[domain] = {
            "loss": round(loss, 4),
            "ppl": round(math.exp(loss), 2),
            "tokens": n_tok,
        }
    return per_domain
