"""Tokens per second from model FLOPs at a stated utilisation, and the I/O bounds of the
placements that move bytes every step (a streamed trunk, an offloaded dense optimizer).

Model FLOPs count no recomputation (PaLM's accounting, as bench/train_gpu.py): a forward
pass is ``2`` FLOPs per matmul weight and token plus ``4 T d`` per block for attention;
dense training is three forward passes; the expert's is one forward, the input-gradient
pass from the top down to its lowest block, and ``6`` FLOPs per expert parameter.

Example
-------
>>> from trainer.plan.shapes import TrunkShape
>>> round(forward_flops_per_token(TrunkShape.named("llama-7b"), 128) / 1e9, 2)
13.28
"""

from __future__ import annotations

from trainer.plan.expert_spec import ExpertSpec
from trainer.plan.shapes import TrunkShape


def _layer_flops(trunk: TrunkShape, seq_len: int) -> float:
    matmul = trunk.layer_params - (2 * trunk.hidden if trunk.family == "llama" else 0)
    return 2.0 * matmul + 4.0 * seq_len * trunk.hidden


def _head_flops(trunk: TrunkShape) -> float:
    return 2.0 * trunk.vocab * trunk.hidden


def forward_flops_per_token(trunk: TrunkShape, seq_len: int) -> float:
    return trunk.layers * _layer_flops(trunk, seq_len) + _head_flops(trunk)


def dense_flops_per_token(trunk: TrunkShape, seq_len: int, extra_params: int = 0) -> float:
    """``extra_params``: trainable weights active per token beyond the trunk (experts)."""
    return 3.0 * (forward_flops_per_token(trunk, seq_len) + 2.0 * extra_params)


def expert_flops_per_token(trunk: TrunkShape, expert: ExpertSpec, seq_len: int) -> float:
    lowest = expert.grad_layers_from
    below = trunk.layers if lowest is None else lowest
    backward = (trunk.layers - below) * _layer_flops(trunk, seq_len) + _head_flops(trunk)
    return forward_flops_per_token(trunk, seq_len) + backward + 6.0 * expert.params


def compute_tokens_per_s(flops_per_token: float, peak_flops: float, mfu: float) -> float:
    return peak_flops * mfu / flops_per_token
