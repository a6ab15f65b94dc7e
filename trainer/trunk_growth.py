"""Function-preserving growth of a trunk in mid-pretraining: deeper, wider, or both.

* **Depth** (LLaMA Pro's block expansion): after every group of existing blocks a copy of
  the group's last block is inserted with its two output projections (``attn.c_proj`` and
  ``mlp.c_proj``, weights and biases) set to zero, so it adds exactly 0 to the residual
  stream (both streams of a reversible block) and the grown model computes the same
  function. The existing blocks stay the same tensors, so their optimizer state carries
  over exactly; the inserted blocks start with fresh (zero) state.
* **Width** by an integer factor ``k`` (Net2Net / bert2BERT's function-preserving
  widening): every residual-stream, head and MLP unit is copied ``k`` times (the heads
  keep their size, so there are ``k`` times as many); a weight reading copied units is
  split between the copies by random fractions that sum to 1 per weight (so the copies
  receive different gradients and drift apart instead of staying copies). LayerNorm over
  ``k`` identical copies has the same mean and variance, so it stays exact; the final
  norm's gain and bias are divided by ``k`` because the tied output layer sums over the
  ``k`` copies. Only integer factors are exact, so others are refused. Every tensor
  changes shape, so the optimizer state starts fresh. Exact up to float rounding (the
  split sums in another order): tests/trainer/test_trunk_growth.py measures it.

A growth step is written ``STEP:LAYERSxWIDTH`` (``--grow-at 200:8x256``): before optimizer
step ``STEP`` the trunk becomes ``LAYERS`` blocks of width ``WIDTH``.

Example
-------
>>> parse_growth("200:8x256")
Growth(step=200, layers=8, width=256)
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

_SPEC = re.compile(r"^(\d+):(\d+)x(\d+)$")
GROWTH_HINT = "write STEP:LAYERSxWIDTH, e.g. --grow-at 200:8x256 (grow before step 200)"


class GrowthError(ValueError):
    """A growth step that cannot be done function-preservingly, with what to change."""


@dataclass(frozen=True)
class Growth:
    step: int  # grow before this optimizer step (>= 1)
    layers: int  # blocks after growth
    width: int  # hidden size after growth


def parse_growth(text: str) -> Growth:
    """``"STEP:LAYERSxWIDTH"`` as a :class:`Growth` (GrowthError saying how to write it)."""
    match = _SPEC.match(text.strip())
    if not match:
        raise GrowthError(f"growth step {text!r} is not STEP:LAYERSxWIDTH; {GROWTH_HINT}")
    step, layers, width = (int(g) for g in match.groups())
    if step < 1 or layers < 1 or width < 1:
        raise GrowthError(f"growth step {text!r}: step, layers and width must be >= 1")
    return Growth(step, layers, width)


def plan_growth(specs: Sequence[str], layers: int, width: int, steps: int) -> list[Growth]:
    """The growth steps of ``specs`` from a trunk of ``layers`` x ``width``, checked: steps
    increasing and within ``steps`` (0: unknown), every step larger and never smaller in
    either dimension, each width an integer multiple of the one before."""
    plan = [parse_growth(s) for s in specs]
    last_step = 0
    for growth in plan:
        if growth.step <= last_step:
            raise GrowthError(
                f"growth at step {growth.step} must come after step {last_step}: "
                "list the growth steps in order"
            )
        if steps and growth.step >= steps:
            raise GrowthError(f"growth at step {growth.step} is not before the last step {steps}")
        if growth.layers < layers or growth.width < width:
            raise GrowthError(
                f"growth at step {growth.step} to {growth.layers}x{growth.width} would shrink "
                f"the {layers}x{width} trunk: layers and width can only grow"
            )
        if (growth.layers, growth.width) == (layers, width):
            raise GrowthError(f"growth at step {growth.step} keeps the shape {layers}x{width}")
        if growth.width % width:
            raise GrowthError(
                f"growth at step {growth.step}: width {growth.width} is not a multiple of "
                f"{width}; only integer widening factors keep LayerNorm exact"
            )
        layers, width, last_step = growth.layers, growth.width, growth.step
    return plan


# ---- depth ---------------------------------------------------------------------------


def _blocks(model: nn.Module) -> nn.ModuleList:
    return model.transformer.h


def grow_depth(model: nn.Module, layers: int) -> list[int]:
    """Insert zero-output blocks in place until ``model`` has ``layers`` blocks; returns the
    indices of the inserted blocks (in the grown stack)."""
    old = list(_blocks(model))
    extra = layers - len(old)
    if extra <= 0:
        return []
    # after the last block of each of `extra` near-equal groups of the existing blocks
    after = [max(0, (g + 1) * len(old) // extra - 1) for g in range(extra)]
    stack: list[nn.Module] = []
    inserted: list[int] = []
    for index, block in enumerate(old):
        stack.append(block)
        for _ in range(after.count(index)):
            stack.append(_zero_output_copy(block))
            inserted.append(len(stack) - 1)
    model.transformer.h = nn.ModuleList(stack)
    for index, block in enumerate(stack):
        if hasattr(block.attn, "layer_idx"):
            block.attn.layer_idx = index  # GPT-2's key/value cache slot
    model.config.n_layer = layers
    return inserted


def _zero_output_copy(block: nn.Module) -> nn.Module:
    new = copy.deepcopy(block)
    with torch.no_grad():
        for proj in (new.attn.c_proj, new.mlp.c_proj):
            proj.weight.zero_()
            proj.bias.zero_()
    return new


# ---- width ---------------------------------------------------------------------------


def _tile(t: torch.Tensor, k: int, dim: int) -> torch.Tensor:
    """``k`` copies of ``t`` side by side along ``dim`` (copy j at ``[j*n, (j+1)*n)``)."""
    return torch.cat([t] * k, dim=dim)


def _split(t: torch.Tensor, k: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    """``t`` (which reads ``k`` copies along ``dim``) as ``k`` parts along ``dim`` whose sum
    is ``t``: random fractions in [1/(2k), 3/(2k)]-ish per weight, the last part the rest."""
    u = torch.rand((k, *t.shape), generator=generator, dtype=torch.float64) + 0.5  # (k, ...)
    frac = (u / u.sum(0)).to(t.dtype)
    parts = [t * frac[j] for j in range(k - 1)]
    parts.append(t - sum(parts) if parts else t)
    return torch.cat(parts, dim=dim)


def _qkv(t: torch.Tensor, k: int) -> torch.Tensor:
    """c_attn's output axis (last: q | k | v, each heads-major) with every head copied."""
    return torch.cat([_tile(z, k, -1) for z in t.chunk(3, dim=-1)], dim=-1)


def widen_state(state: dict[str, torch.Tensor], k: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """The state dict of the ``k``-times wider trunk that computes what ``state``'s does.

    Conv1D weights are ``(in, out)``: ``y = x @ W + b``."""
    generator = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        leaf = name.rsplit(".", 2)
        kind = ".".join(leaf[-2:])
        if name.endswith(("wte.weight", "wpe.weight", "lm_head.weight")):
            new = _tile(t, k, 1)  # (V or P, k d)
        elif name.endswith("ln_f.weight") or name.endswith("ln_f.bias"):
            new = _tile(t, k, 0) / k  # the tied output layer sums over the k copies
        elif kind in ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias"):
            new = _tile(t, k, 0)
        elif name.endswith("attn.c_attn.weight"):
            new = _qkv(_split(t, k, 0, generator), k)  # (k d, 3 k d)
        elif name.endswith("attn.c_attn.bias"):
            new = _qkv(t, k)
        elif name.endswith(("attn.c_proj.weight", "mlp.c_proj.weight", "mlp.c_fc.weight")):
            new = _tile(_split(t, k, 0, generator), k, 1)  # reads copies, writes copies
        elif name.endswith(("attn.c_proj.bias", "mlp.c_proj.bias", "mlp.c_fc.bias")):
            new = _tile(t, k, 0)
        elif name.endswith(("attn.bias", "attn.masked_bias")):
            new = t  # buffers of older GPT-2 modules, width-free
        else:
            raise GrowthError(f"no widening rule for tensor {name!r} of shape {tuple(t.shape)}")
        out[name] = new.contiguous()
    return out


def grow_width(model: nn.Module, width: int, seed: int = 0) -> nn.Module:
    """A new model of hidden size ``width`` (a multiple of the current) computing the same
    function as ``model`` (tied embeddings required)."""
    config = model.config
    d = config.n_embd
    k = width // d
    if k * d != width:
        raise GrowthError(f"width {width} is not a multiple of {d}")
    if not getattr(config, "tie_word_embeddings", True):
        raise GrowthError("widening needs tied input and output embeddings")
    new_config = copy.deepcopy(config)
    new_config.n_embd = width
    new_config.n_head = config.n_head * k  # heads keep their size
    if getattr(config, "n_inner", None):
        new_config.n_inner = config.n_inner * k
    param = next(model.parameters())
    with torch.device(param.device):
        grown = type(model)(new_config).to(param.dtype)
    missing, unexpected = grown.load_state_dict(
        widen_state(model.state_dict(), k, seed), strict=False
    )
    if unexpected or [m for m in missing if not m.endswith(("attn.bias", "attn.masked_bias"))]:
        raise GrowthError(f"widened state does not fit: missing {missing}, unexpected {unexpected}")
    grown.train(model.training)
    return grown


# ---- the recipe's step ----------------------------------------------------------------


def grow(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    growth: Growth,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    seed: int = 0,
) -> tuple[nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    """``model`` grown to ``growth``'s shape (depth, then width) and a new optimizer over it
    carrying the old state of every parameter that is still the same tensor."""
    before = {"layers": len(_blocks(model)), "width": model.config.n_embd}
    inserted = grow_depth(model, growth.layers)
    if growth.width != model.config.n_embd:
        model = grow_width(model, growth.width, seed)
    new_optimizer = make_optimizer(model)
    carried = 0
    for group in new_optimizer.param_groups:
        for param in group["params"]:
            if param in optimizer.state:
                new_optimizer.state[param] = optimizer.state[param]
                carried += 1
    fresh = sum(len(g["params"]) for g in new_optimizer.param_groups) - carried
    return (
        model,
        new_optimizer,
        {
            "step": growth.step,
            "from": before,
            "to": {"layers": growth.layers, "width": growth.width},
            "inserted_blocks": inserted,
            "optimizer_tensors_carried": carried,
            "optimizer_tensors_fresh": fresh,
            "parameters": sum(p.numel() for p in model.parameters()),
        },
    )
