"""A fused forward and an input-gradient-only backward for the frozen trunk's GPT-2 MLPs.

The expert recipe never trains a trunk weight, so the backward pass through a trunk MLP
needs only ``dL/dx``. Autograd, running the MLP as written, keeps what a trainable MLP would
need and, for GPT-2's ``gelu_new`` (written out in Python: ``0.5 x (1 + tanh(...))``), every
intermediate of that formula: about five ``(B, T, 4d)`` tensors per block, and as many
elementwise kernels each way. :class:`_FrozenGeluMLP` computes the same function with one
fused GELU kernel (PyTorch's ``gelu(approximate="tanh")`` is the same formula; results
differ from the Python one only by float rounding, ~1e-7 relative) and keeps ONE tensor per
block, the pre-activation ``(B*T, 4d)``; its backward is
``((g W_proj^T) * gelu'(u)) W_fc^T``.

Only blocks whose MLP is a GPT-2 MLP in eval mode (dropout off) with frozen weights and a
GELU activation this module knows are replaced; any other MLP (Llama's gated SiLU MLP, an
unknown activation) is left as it is, so the recipe is correct on every trunk and faster on
these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# activation class name -> PyTorch's fused GELU variant computing the same function
_GELU_VARIANTS = {
    "NewGELUActivation": "tanh",
    "FastGELUActivation": "tanh",
    "GELUTanh": "tanh",
    "PytorchGELUTanh": "tanh",
}


class _FrozenGeluMLP(torch.autograd.Function):
    """``c_proj(gelu(c_fc(x)))`` with frozen weights: saves the pre-activation only."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(
        ctx: Any,
        x: torch.Tensor,
        w_fc: torch.Tensor,
        b_fc: torch.Tensor,
        w_proj: torch.Tensor,
        b_proj: torch.Tensor,
        approximate: str,
    ) -> torch.Tensor:
        # x (..., d); Conv1D weights are (in, out): w_fc (d, f), w_proj (f, d); biases (f,), (d,)
        flat = x.reshape(-1, x.shape[-1])  # (N, d)
        pre = torch.addmm(b_fc, flat, w_fc)  # (N, f)
        out = torch.addmm(b_proj, F.gelu(pre, approximate=approximate), w_proj)  # (N, d)
        ctx.save_for_backward(pre, w_fc, w_proj)
        ctx.approximate = approximate
        ctx.shape = x.shape
        return out.view(*x.shape[:-1], w_proj.shape[1])

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")  # backward under the forward's autocast
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple:
        pre, w_fc, w_proj = ctx.saved_tensors
        grad_act = grad_out.reshape(-1, grad_out.shape[-1]) @ w_proj.t()  # (N, f)
        grad_pre = torch.ops.aten.gelu_backward(grad_act, pre, approximate=ctx.approximate)
        grad_x = (grad_pre @ w_fc.t()).view(ctx.shape)  # (..., d)
        return grad_x, None, None, None, None, None


def _gpt2_variant(mlp: nn.Module) -> str | None:
    """The fused GELU variant for ``mlp`` when it can be replaced, else None."""
    parts = [getattr(mlp, name, None) for name in ("c_fc", "c_proj", "act", "dropout")]
    if any(part is None for part in parts) or mlp.training:
        return None
    c_fc, c_proj, act, _ = parts
    variant = _GELU_VARIANTS.get(type(act).__name__)
    if type(act).__name__ == "GELUActivation" and getattr(act, "act", None) is F.gelu:
        variant = "none"  # exact erf GELU through PyTorch's own kernel
    frozen = all(
        isinstance(p, torch.Tensor) and not p.requires_grad
        for p in (c_fc.weight, c_fc.bias, c_proj.weight, c_proj.bias)
    )
    return variant if frozen else None


@contextlib.contextmanager
def frozen_mlp_kernels(mlps: Sequence[nn.Module], enabled: bool = True) -> Iterator[int]:
    """Inside the block, every replaceable MLP of ``mlps`` runs :class:`_FrozenGeluMLP`.

    Yields the number of MLPs replaced. Forward hooks on the MLPs (the mixture's adapters)
    still run: only ``forward`` is shadowed, and restored on exit.
    """
    replaced: list[nn.Module] = []
    try:
        for mlp in mlps if enabled else ():
            variant = _gpt2_variant(mlp)
            if variant is None:
                continue

            def forward(hidden: torch.Tensor, _mlp=mlp, _variant=variant) -> torch.Tensor:
                c_fc, c_proj = _mlp.c_fc, _mlp.c_proj
                return _FrozenGeluMLP.apply(
                    hidden, c_fc.weight, c_fc.bias, c_proj.weight, c_proj.bias, _variant
                )

            mlp.forward = forward  # instance attribute shadows the class method
            replaced.append(mlp)
        yield len(replaced)
    finally:
        for mlp in replaced:
            del mlp.forward
