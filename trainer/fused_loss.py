"""Cross-entropy through the frozen output layer, in chunks, without keeping the logits.

The full logits of a micro-batch, ``(B, T, V)`` in float32, are the largest activation of a
small-width trunk with a large vocabulary (8 x 128 x 8192 x 4 bytes = 32 MiB, several times
over for softmax and its gradient). Here the loss is computed ``chunk`` rows at a time, and
the gradient with respect to the hidden states is computed in the same pass (the output
layer is frozen, so that is the only gradient needed): ``dL/dh = (softmax - onehot) W``.
Only one chunk of logits exists at any moment; nothing is recomputed.

:meth:`experts.mixture.Mixture.hidden` gives the input to the output layer (the final hidden
states, with the mixture's experts active).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def output_layer(model: nn.Module) -> nn.Linear:
    head = model.get_output_embeddings()
    if not isinstance(head, nn.Linear):
        raise TypeError(f"the trunk's output layer is {type(head).__name__}, expected nn.Linear")
    return head


class _LinearCrossEntropy(torch.autograd.Function):
    """``sum_i w_i * CE(logits_i, y_i)``, every gradient computed chunk by chunk in forward.

    ``logits = h W^T + b`` from the frozen output layer, plus, when the expert has an output
    part, ``low up^T + extra_bias`` (``low = down(h)``, computed by autograd outside),
    accumulated in place into the one ``(c, V)`` buffer of the chunk (each extra ``(c, V)``
    tensor costs memory and, freshly mapped, page faults).
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        low: torch.Tensor | None,
        up: torch.Tensor | None,
        extra_bias: torch.Tensor | None,
        targets: torch.Tensor,
        token_weights: torch.Tensor,
        chunk: int,
    ) -> torch.Tensor:
        # hidden (N, d), weight (V, d), bias (V,) | None, low (N, r) | None, up (V, r) | None,
        # extra_bias (V,) | None, targets (N,), token_weights (N,)
        need = ctx.needs_input_grad
        offset = None
        if bias is not None or extra_bias is not None:
            offset = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device)
            for b in (bias, extra_bias):
                if b is not None:
                    offset += b.float()  # (V,)
        grad_h = torch.empty_like(hidden) if need[0] else None
        grad_low = torch.empty_like(low) if low is not None and need[3] else None
        grad_up = torch.zeros_like(up, dtype=torch.float32) if up is not None and need[4] else None
        grad_eb = (
            torch.zeros_like(extra_bias, dtype=torch.float32)
            if extra_bias is not None and need[5]
            else None
        )
        up32 = None if up is None else up.float()  # (V, r)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, hidden.shape[0], chunk):
                h = hidden[start : start + chunk].to(weight.dtype)  # (c, d)
                if offset is not None and weight.dtype == torch.float32:
                    logits = torch.addmm(offset, h, weight.t())  # (c, V)
                else:
                    logits = (h @ weight.t()).float()  # (c, V)
                    if offset is not None:
                        logits += offset
                lo = None
                if low is not None:
                    lo = low[start : start + chunk].float()  # (c, r)
                    logits.addmm_(lo, up32.t())  # in place: no second (c, V) buffer
                y = targets[start : start + chunk]  # (c,)
                w = token_weights[start : start + chunk].float()  # (c,)
                picked = logits.gather(1, y[:, None]).squeeze(1)  # (c,)
                top = logits.max(dim=-1, keepdim=True).values  # (c, 1)
                probs = logits.sub_(top).exp_()  # (c, V) unnormalised softmax, in place
                norm = probs.sum(dim=-1, keepdim=True)  # (c, 1)
                lse = (top + norm.log()).squeeze(1)  # (c,) logsumexp
                total = total + ((lse - picked) * w).sum()
                if grad_h is None and grad_low is None and grad_up is None and grad_eb is None:
                    continue
                probs.div_(norm)  # softmax
                probs[torch.arange(len(y), device=y.device), y] -= 1.0
                probs.mul_(w[:, None])  # (c, V) dL/dlogits
                if grad_h is not None:
                    grad_h[start : start + chunk] = (probs.to(weight.dtype) @ weight).to(
                        hidden.dtype
                    )
                if grad_low is not None:
                    grad_low[start : start + chunk] = (probs @ up32).to(low.dtype)  # (c, r)
                if grad_up is not None:
                    grad_up.addmm_(probs.t(), lo)  # (V, r)
                if grad_eb is not None:
                    grad_eb += probs.sum(0)  # (V,)
        ctx.grads = (grad_h, grad_low, grad_up, grad_eb)
        ctx.dtypes = (
            None if up is None else up.dtype,
            None if extra_bias is None else extra_bias.dtype,
        )
        return total

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple:
        grad_h, grad_low, grad_up, grad_eb = ctx.grads
        ctx.grads = None

        def scaled(grad: torch.Tensor | None, dtype: torch.dtype | None = None):
            if grad is None:
                return None
            return (grad * grad_output.to(grad.dtype)).to(dtype or grad.dtype)

        up_dtype, eb_dtype = ctx.dtypes
        return (
            scaled(grad_h),
            None,
            None,
            scaled(grad_low),
            scaled(grad_up, up_dtype),
            scaled(grad_eb, eb_dtype),
            None,
            None,
            None,
        )


def _output_terms(
    output: nn.Module | None, h: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """``(down(h), up weight, bias)`` of an expert's output part (Nones for what it lacks)."""
    if output is None:
        return None, None, None
    low = output.low_rank(h)
    up = output.up.weight if low is not None else None
    return low, up, output.bias


def chunked_sequence_loss(
    hidden: torch.Tensor,
    head: nn.Linear,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    chunk: int = 256,
    output: nn.Module | None = None,
) -> torch.Tensor:
    """Mean over sequences of each sequence's mean next-token loss (padding excluded).

    The same value as ``Mixture.loss(...).mean()``; the output layer gets no gradient.
    ``output`` is the trained expert's output part (:class:`experts.vocab.OutputDelta`), if
    it has one: its delta is added to the logits and it gets its gradient.
    """
    batch, length, width = hidden.shape
    valid = (attention_mask[:, 1:] * attention_mask[:, :-1]).float()  # (B, T-1)
    per_token = valid / valid.sum(dim=1, keepdim=True).clamp_min(1.0) / batch  # (B, T-1)
    h = hidden[:, :-1].reshape(-1, width)  # (B*(T-1), d)
    targets = input_ids[:, 1:].reshape(-1)  # (B*(T-1),)
    low, up, extra_bias = _output_terms(output, h)
    return _LinearCrossEntropy.apply(
        h, head.weight, head.bias, low, up, extra_bias, targets, per_token.reshape(-1), chunk
    )


@torch.no_grad()
def chunked_token_nll(
    hidden: torch.Tensor,
    head: nn.Linear,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    chunk: int = 256,
    output: nn.Module | None = None,
) -> tuple[float, float]:
    """Summed next-token negative log-likelihood and the number of predicted tokens."""
    valid = (attention_mask[:, 1:] * attention_mask[:, :-1]).float()  # (B, T-1)
    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])  # (B*(T-1), d)
    low, up, extra_bias = _output_terms(output, h)
    total = _LinearCrossEntropy.apply(
        h,
        head.weight,
        head.bias,
        low,
        up,
        extra_bias,
        input_ids[:, 1:].reshape(-1),
        valid.reshape(-1),
        chunk,
    )
    return float(total), float(valid.sum())
