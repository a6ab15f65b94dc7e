"""The baseline: a dense fine-tune of the whole trunk (every weight trainable, torch AdamW).

Used by ``bench/train.py`` (cost and quality against the expert recipe on the same tokens)
and by the forgetting monitor (:func:`sequential_dense_finetune` fine-tunes one trunk on
domain after domain, the classic setting in which earlier domains are forgotten).

Example
-------
>>> model, tok = load_trainable(trunk_dir)  # doctest: +SKIP
>>> def report(domain, model, tok):  # evaluate every domain after each one
...     print(domain, perplexity(model, tok, heldout["legal"]))  # doctest: +SKIP
>>> sequential_dense_finetune(model, tok, [("legal", texts), ("news", texts2)],
...                           DenseConfig(steps=50), after_domain=report)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from experts.mixture import next_token_losses
from trainer.data import BatchStream, eos_id, pack, tokenize
from trainer.optim import state_bytes
from trainer.precision import autocast_for
from trainer.progress import StepProgress
from trainer.schedule import lr_at


@dataclass(frozen=True)
class DenseConfig:
    steps: int = 100  # optimizer steps per domain
    seq_len: int = 128  # tokens per packed row
    micro_batch_size: int = 8  # rows per forward/backward
    grad_accum_steps: int = 4  # micro-batches per optimizer step
    lr: float = 3e-4  # peak learning rate
    warmup_steps: int = 10  # linear warm-up steps
    schedule: str = "cosine"  # "cosine" or "constant"
    min_lr_ratio: float = 0.1  # final LR of the cosine schedule, as a fraction of lr
    weight_decay: float = 0.0  # AdamW weight decay
    seed: int = 0  # data order
    dropout: bool = False  # the trunk's dropout while training (off, like the expert recipe)
    bf16: bool = True  # bf16 autocast on a GPU (CPU runs stay fp32)
    progress: bool = True  # progress bar


@dataclass
class DenseResult:
    steps: int
    tokens: int
    elapsed_s: float  # wall seconds in training steps
    cpu_s: float = 0.0  # process CPU seconds in training steps (all threads)
    losses: list[float] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)  # wall seconds of each step
    optimizer_state_bytes: int = 0
    trainable_params: int = 0


def load_trainable(
    trunk_dir: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> tuple[nn.Module, Any]:
    """A trainable copy of the trunk (every parameter requires grad) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(
        str(trunk_dir), dtype=dtype, local_files_only=True, use_safetensors=True
    )
    model.to(device)
    model.requires_grad_(True)
    model.train()
    tokenizer = AutoTokenizer.from_pretrained(str(trunk_dir), local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def sequence_losses(
    model: nn.Module, ids: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token losses ``(B, T-1)`` (masked) and the mask ``(B, T-1)`` of a plain causal LM."""
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits  # (B, T, V)
    return next_token_losses(logits, ids, mask)


def dense_finetune(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    config: DenseConfig,
    on_step: Callable[[int, float], None] | None = None,
) -> DenseResult:
    """Fine-tune every weight of ``model`` on ``texts`` for ``config.steps`` optimizer steps."""
    device = next(model.parameters()).device
    ids, mask = pack(tokenize(tokenizer, texts), config.seq_len, eos_id(tokenizer), pad_last=False)
    if len(ids) == 0:
        raise ValueError("no tokens to fine-tune on")
    stream = BatchStream(ids, mask, config.micro_batch_size, seed=config.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    autocast = autocast_for(device, config.bf16)
    model.train(config.dropout)  # eval mode: dropout off, as for the frozen trunk of an expert
    result = DenseResult(
        steps=0, tokens=0, elapsed_s=0.0, trainable_params=sum(p.numel() for p in params)
    )
    progress = StepProgress(config.steps, enabled=config.progress, desc="dense")
    start = time.perf_counter()
    cpu_start = time.process_time()
    try:
        for step in range(config.steps):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(
                    step,
                    base_lr=config.lr,
                    total_steps=config.steps,
                    warmup_steps=config.warmup_steps,
                    kind=config.schedule,
                    min_ratio=config.min_lr_ratio,
                )
            step_loss = 0.0
            step_started = time.perf_counter()
            for _ in range(config.grad_accum_steps):
                batch, batch_mask = stream.next()  # (B, T), (B, T)
                batch, batch_mask = batch.to(device), batch_mask.to(device)
                with autocast:
                    losses, valid = sequence_losses(model, batch, batch_mask)
                    loss = (
                        losses.sum(1) / valid.sum(1).clamp_min(1)
                    ).mean() / config.grad_accum_steps
                loss.backward()
                step_loss += float(loss.detach())
                result.tokens += int(batch_mask.sum())
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            result.steps += 1
            result.step_times.append(time.perf_counter() - step_started)
            result.losses.append(step_loss)
            elapsed = time.perf_counter() - start
            progress.update(step + 1, step_loss, result.tokens / max(elapsed, 1e-9))
            if on_step is not None:
                on_step(step + 1, step_loss)
    finally:
        progress.close()
    result.elapsed_s = time.perf_counter() - start
    result.cpu_s = time.process_time() - cpu_start
    result.optimizer_state_bytes = state_bytes(optimizer)
    model.eval()
    return result


@torch.no_grad()
def perplexity(
    model: nn.Module, tokenizer: Any, texts: Sequence[str], seq_len: int = 128, batch: int = 8
) -> float:
    """Held-out perplexity of a plain causal LM on ``texts`` (packed like training)."""
    device = next(model.parameters()).device
    ids, mask = pack(tokenize(tokenizer, texts), seq_len, eos_id(tokenizer), pad_last=True)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0.0
    for start in range(0, len(ids), batch):
        losses, valid = sequence_losses(
            model, ids[start : start + batch].to(device), mask[start : start + batch].to(device)
        )
        total += float(losses.sum())
        count += float(valid.sum())
    model.train(was_training)
    return math.exp(total / max(count, 1.0))


def sequential_dense_finetune(
    model: nn.Module,
    tokenizer: Any,
    domains: Sequence[tuple[str, Sequence[str]]],
    config: DenseConfig,
    after_domain: Callable[[str, nn.Module, Any], None] | None = None,
) -> list[DenseResult]:
    """Fine-tune ``model`` densely on each ``(domain, texts)`` in order.

    ``after_domain(domain, model, tokenizer)`` is called after each domain (e.g. to evaluate
    every domain seen so far: the forgetting of the dense baseline).
    """
    results = []
    for domain, texts in domains:
        results.append(dense_finetune(model, tokenizer, texts, config))
        if after_domain is not None:
            after_domain(domain, model, tokenizer)
    return results
