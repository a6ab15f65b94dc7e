"""Bytes of each part of a training step, for the expert recipe and the dense fine-tune.

Every figure is what the project's code allocates (trainer/recipes/expert.py with
:class:`~trainer.optim.FlatOptimizer`, trainer/recipes/dense.py with torch AdamW, the
Hugging Face Llama / GPT-2 modules), not a textbook estimate:

* weights, gradients and optimizer states are exact (tests/trainer/test_plan.py compares
  them with the tensors a real model, expert and optimizer hold after one step);
* saved activations per token and block are the bytes autograd saves, counted with
  ``torch.autograd.graph.saved_tensors_hooks`` on the HF modules (torch 2.13, transformers
  5.17, SDPA attention: no ``T x T`` score matrix is kept) and written below in units of
  the width ``d``, the MLP width ``f`` and the heads ``h``;
* transients (optimizer step temporaries, loss buffers, backward work) are measured
  once and stated where they are defined.

Example
-------
>>> optimizer_state_bytes("adamw8bit", 680_704, tensors=1)
1384728
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.plan.expert_spec import ExpertSpec
from trainer.plan.run import RunShape
from trainer.plan.shapes import TrunkShape, dtype_bytes

# A fresh `python` with torch 2.13 (CPU), transformers 5.17 (+ its Llama and GPT-2 modules
# and tokenizers), bitsandbytes 0.50 and the trainer's recipes imported: VmHWM 427,656 kB
# (bench/plan_check.py reports the figure it measures in each run beside this constant).
PROCESS_OVERHEAD_BYTES = 427_656 * 1024
# What a training step touches beyond the imports whatever the model's size (kernels' code
# pages, thread pools, the tokenizer, autograd's engine): peak RSS less the RSS after the
# imports of a 2-layer, width-32 Llama (57k parameters; every modelled part < 5 MiB) trained
# as bench/plan_check.py trains: 36.6 MiB (expert recipe), 34.2 MiB (dense).
TRAINING_RUNTIME_BYTES = 34 * 2**20
# A CUDA context and cuBLAS workspace on each GPU: an assumption (no GPU to measure here).
GPU_CONTEXT_BYTES = 512 * 2**20
# bitsandbytes' blockwise 8-bit Adam: one float32 absmax per 256 values of each moment, and
# two 256-entry float32 quantisation maps shared by every parameter.
_BNB_BLOCK = 256
_BNB_QMAPS = 2 * 256 * 4
# fp32 buffers of the trainable size that a FlatOptimizer step holds above the gradients
# (the flat gradient and the optimizer's temporaries): VmHWM during step 2 minus the RSS
# before it, over 4 bytes x params, 20M parameters on this CPU (bnb dequantises both moments).
STEP_COPIES = {"adamw8bit": 6, "adamw": 3}
# torch AdamW on the CPU steps tensor by tensor (no foreach there): two temporaries of the
# largest tensor; on a GPU the foreach path holds one temporary of every state (sqrt).
DENSE_CPU_STEP_COPIES = 2
DENSE_GPU_STEP_COPIES = 1


def optimizer_state_bytes(kind: str, params: int, tensors: int) -> int:
    """Adam state of ``params`` parameters in ``tensors`` tensors (after the first step)."""
    if kind == "adamw":
        return 8 * params + 4 * tensors  # exp_avg, exp_avg_sq (fp32) and a float32 step each
    if kind == "adamw8bit":
        # FlatOptimizer steps one flat tensor: two uint8 moments, their absmax blocks, the maps
        return 2 * params + 2 * 4 * math.ceil(params / _BNB_BLOCK) + _BNB_QMAPS
    raise ValueError(f"unknown optimizer {kind!r}")


def _layer_floats(trunk: TrunkShape, trainable: bool, fused_mlp: bool) -> int:
    """Values autograd saves per token in one block (saved_tensors_hooks, see above)."""
    d, f, h = trunk.hidden, trunk.ffn, trunk.heads
    if trunk.family == "llama":
        # trainable: 10d + 4f + h + 2; frozen weights (only input gradients): 6d + 3f + h + 2
        return (10 * d + 4 * f if trainable else 6 * d + 3 * f) + h + 2
    if trainable:
        return 12 * d + 4 * f
    return 6 * d + (f if fused_mlp else 4 * f)  # the fused frozen MLP keeps its pre-activation


@dataclass(frozen=True)
class StepBytes:
    """The parts of one training step, in bytes (which device holds each: placement.py)."""

    weights: int  # the trained weights (fp32 masters for dense)
    grads: int  # their gradients
    optimizer: int  # optimizer state after the first step
    step_work: int  # temporaries of the optimizer step above the gradients
    saved: int  # activations kept for backward (with the run's checkpointing)
    saved_without_checkpointing: int  # the same without activation checkpointing
    recompute: int  # one block's activations recomputed in backward (checkpointing)
    backward_work: int  # gradient temporaries while one block runs backward
    loss: int  # loss buffers (chunks of logits, or the full logits and their gradient)
    loss_unchunked: int  # the full-logits loss for comparison
    grads_in_backward: int  # gradients already allocated at the peak of backward
    autocast_copies: int = 0  # bf16 copies of fp32 weights autocast keeps (dense on a GPU)

    @property
    def forward_backward(self) -> int:
        """Live at the peak of forward/backward, above weights and optimizer state."""
        return self.saved + self.recompute + self.backward_work + self.loss

    @property
    def working(self) -> int:
        """The larger of the backward and the optimizer step working sets."""
        return max(self.forward_backward + self.grads_in_backward, self.grads + self.step_work)


def expert_step(trunk: TrunkShape, expert: ExpertSpec, run: RunShape, act_bytes: int) -> StepBytes:
    """The expert recipe: a frozen trunk, one expert, FlatOptimizer."""
    n = run.tokens
    p = expert.params
    lowest = expert.grad_layers_from
    grad_layers = trunk.layers - (trunk.layers if lowest is None else lowest)
    d, f, v = trunk.hidden, trunk.ffn, trunk.vocab
    cfg = expert.config
    adapter = (d + 2 * cfg.rank) * len(cfg.layers)  # each adapter: its input, two r-wide values
    tokens = 2 * cfg.token_rank  # the token delta's rows and its product
    frozen = _layer_floats(trunk, trainable=False, fused_mlp=run.fused_frozen_mlp)
    final = d + 1  # the final norm
    full = n * act_bytes * (grad_layers * frozen + adapter + tokens + final)
    if run.activation_checkpointing and grad_layers:
        saved = n * act_bytes * (grad_layers * d + tokens + final)  # each block's input
        recompute = n * act_bytes * (frozen + adapter // max(1, len(cfg.layers)))
    else:
        saved, recompute = full, 0
    backward = n * act_bytes * (3 * d + 2 * f) if grad_layers else 0
    chunk = min(run.loss_chunk, n)
    out_rank = cfg.output_rank
    # the loss: the (N, d) input copy and its gradient, the low-rank output values; then
    # one (chunk, V) float32 buffer and its max/sum
    chunked = n * (2 * d * 4 + 2 * out_rank * 4) + chunk * v * 4 * 2
    unchunked = 3 * n * v * 4 + n * d * 4
    return StepBytes(
        weights=4 * p,
        grads=4 * p,
        optimizer=optimizer_state_bytes(run.optimizer, p, 1),
        step_work=STEP_COPIES[run.optimizer] * 4 * p,
        saved=saved,
        saved_without_checkpointing=full,
        recompute=recompute,
        backward_work=backward,
        loss=chunked if run.chunked_loss else unchunked,
        loss_unchunked=unchunked,
        grads_in_backward=4 * p,  # small, and all allocated by the expert's lowest block
    )


def dense_step(
    trunk: TrunkShape, run: RunShape, act_bytes: int, on_gpu: bool, params: int | None = None
) -> StepBytes:
    """The dense baseline: every weight trainable in fp32, torch AdamW, full logits.

    ``params`` overrides the trunk's count (a mixture fine-tuned whole)."""
    n, d, f, v = run.tokens, trunk.hidden, trunk.ffn, trunk.vocab
    total = trunk.params if params is None else params
    layer = _layer_floats(trunk, trainable=True, fused_mlp=False)
    saved = n * act_bytes * (trunk.layers * layer + 2 * d + 1)
    recompute = 0
    if trunk.reversible:
        # the stack keeps only its two output streams; backward reconstructs each block's
        # inputs and recomputes that one block (measured: 27.1 d of the 12 d + 4 f here)
        saved = n * act_bytes * (2 * d + 2 * d + 1)
        recompute = n * act_bytes * layer
    # at the loss's backward: the saved log-softmax output, its gradient and the logits'
    # gradient, (N, V) float32 each
    loss = 3 * n * v * 4
    if on_gpu:
        step_work = DENSE_GPU_STEP_COPIES * 8 * total // 2  # one fp32 temporary per state
    else:
        step_work = DENSE_CPU_STEP_COPIES * 4 * trunk.largest_tensor_params
    return StepBytes(
        weights=4 * total,
        grads=4 * total,
        optimizer=optimizer_state_bytes("adamw", total, trunk.param_tensors),
        step_work=step_work,
        saved=saved,
        saved_without_checkpointing=saved,
        recompute=recompute,
        backward_work=n * act_bytes * (3 * d + 2 * f),
        loss=loss,
        loss_unchunked=loss,
        # the peak of backward is at its start (activations freed as gradients grow; all
        # gradients at once are the step phase)
        grads_in_backward=0,
        autocast_copies=2 * total if on_gpu and run.bf16_autocast else 0,
    )


def trunk_bytes(trunk: TrunkShape, dtype: str) -> int:
    return trunk.params * dtype_bytes(dtype)


def streamed_held_bytes(trunk: TrunkShape, stored_dtype: str) -> int:
    """Process memory of trainer.stream_trunk while one module runs (its peak: the backward
    of one checkpointed block): the block's weights as fp32 copies plus one tensor's file
    pages, or the embedding / output layer in fp32 plus its pages, whichever is larger.
    (Proposed from bench/train_7b.py's measurement: 7B predicted 1.57 GiB, measured 1.59.)"""
    size = dtype_bytes(stored_dtype)
    d, f = trunk.hidden, trunk.ffn
    largest_block_tensor = max(d * f, 3 * d * d if trunk.family == "gpt2" else d * d)
    block = 4 * trunk.layer_params + size * largest_block_tensor
    edge = (4 + size) * max(trunk.embedding_params, trunk.head_params)
    return max(block, edge)


def streamed_trunk_bytes(trunk: TrunkShape, dtype: str, layers_held: int) -> int:
    """Trunk bytes in memory when only ``layers_held`` blocks are resident at once (the
    embeddings and the output layer stay: every step needs them)."""
    size = dtype_bytes(dtype)
    held = min(layers_held, trunk.layers) * trunk.layer_params
    return size * (held + trunk.embedding_params + trunk.head_params)
