"""The recipe that trains one expert on a frozen trunk: setup -> train -> save -> cleanup.

The trunk never changes: it is frozen, in eval mode, and (on the CPU) memory-mapped from its
safetensors files. One expert is trainable: zero-initialised (function-preserving: step 0 is
exactly the trunk) or branched from the expert of the drifted domain. Documents are packed
into fixed-length rows; gradients are accumulated over micro-batches; the learning rate warms
up and then follows a cosine or constant schedule; held-out perplexity is evaluated every
``eval_every`` steps and training stops early when it stops improving. The best expert is
kept, and a quality gate decides whether it is worth registering.

Example
-------
>>> result = train_expert(trunk, train_texts, heldout_texts, TrainerConfig())  # doctest: +SKIP
>>> result.outcome, result.summary["heldout_ppl_after"]  # doctest: +SKIP
('finished', 41.7)

(Over 400 lines on purpose: one recipe read top to bottom, setup -> train -> save ->
cleanup, as torchtune's recipes are; what it is built from lives in trainer/expert_setup.py.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from experts.expert import Expert, ExpertConfig
from experts.growth import check_growable, grow, growth_record, scaled_config, union_config
from experts.mixture import Mixture
from experts.trunk import Trunk
from trainer.act_ckpt import checkpointed_blocks
from trainer.checkpoint import load_latest, save_checkpoint
from trainer.config import TrainerConfig
from trainer.data import BatchStream, eos_id, pack, tokenize
from trainer.expert_setup import expert_config_for, prepare_trunk, resolve_device
from trainer.frozen_mlp import frozen_mlp_kernels
from trainer.fused_loss import (
    chunked_sequence_loss,
    chunked_token_nll,
    mixture_hidden,
    output_layer,
)
from trainer.optim import FlatOptimizer, set_lr, state_breakdown, state_bytes
from trainer.precision import autocast_for
from trainer.progress import StepProgress
from trainer.schedule import lr_at
from trainer.stream_trunk import streamed_weights

log = logging.getLogger(__name__)

TRAINING_ID = "training"  # the trainable expert's id inside the recipe's mixture
EventFn = Callable[[str, dict[str, Any]], None]


class TrainingFailed(RuntimeError):
    """A job failure that retrying will not fix; ``reason`` is a stable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class TrainingInterrupted(RuntimeError):
    """Training stopped on request after checkpointing; the job can resume later."""


@dataclass
class TrainResult:
    outcome: str  # "finished" (worth registering) | "not_worth_it"
    expert: Expert  # the best expert found (CPU, frozen)
    summary: dict[str, Any]
    figures: dict[str, float] = field(default_factory=dict)  # ppl before/current/after, margin


def _output_part(mixture: Mixture, weights: dict[str, float]) -> torch.nn.Module | None:
    """The output part the chunked loss adds for ``weights``: that of its one expert."""
    used = [expert_id for expert_id, w in weights.items() if w != 0.0]
    if not used:
        return None  # the trunk alone
    if len(used) > 1 or weights[used[0]] != 1.0:
        raise ValueError("the chunked loss evaluates one expert at weight 1.0 at a time")
    return mixture.experts[used[0]].output


# the recipe's state saved with every checkpoint and restored on resume (name -> type; None:
# kept as stored, a JSON list)
_RESUMED: dict[str, type | None] = {
    "tokens": int,
    "losses": None,
    "evals": None,
    "bad_evals": int,
    "best_ppl": float,
    "best_step": int,
    "ppl_trunk": float,
    "ppl_current": float,
    "elapsed": float,
    "cpu_elapsed": float,
    "started_from": None,
}
_OPTIONAL = {"cpu_elapsed", "started_from"}


class ExpertRecipe:
    """Train one expert; ``setup`` -> ``train`` -> ``save`` -> ``cleanup``.

    Parameters
    ----------
    trunk : the frozen trunk (never modified).
    config : the recipe's settings.
    job_dir : where checkpoints go (and are resumed from); None: no checkpoints.
    parent : the expert to branch from (copied, never modified); None: zero-initialised.
    candidates : with no parent, the experts a DEMix start may copy.
    parent_id, own_ppl : the parent's id and each known expert's held-out ppl on its own
        documents at registration (the growth rule's reference; absent: the rule is off).
    on_event : called with ("started" | "step", fields) for progress events.
    stop : when set, training checkpoints and raises :class:`TrainingInterrupted`.
    """

    def __init__(
        self,
        trunk: Trunk,
        config: TrainerConfig,
        *,
        job_dir: Path | None = None,
        parent: Expert | None = None,
        candidates: Mapping[str, Expert] | None = None,
        parent_id: str | None = None,
        own_ppl: Mapping[str, float] | None = None,
        on_event: EventFn | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.trunk = trunk
        self.config = config
        self.job_dir = job_dir
        self.parent = parent
        self.candidates = dict(candidates or {})
        self.parent_id = parent_id
        self.own_ppl = dict(own_ppl or {})  # expert id -> its held-out ppl at registration
        self.growth: dict[str, Any] | None = None  # how the start grew (experts/growth.py)
        self.started_from: str | None = None  # the candidate the expert starts as a copy of
        self.candidate_ppl: dict[str, float] = {}
        self.candidate_trunk_ppl: float | None = None  # the trunk alone, when candidates ran
        self.on_event = on_event or (lambda state, fields: None)
        self.stop = stop or threading.Event()
        self.device = resolve_device(config)
        self._exit = contextlib.ExitStack()

    # ---- setup ------------------------------------------------------------------------

    def setup(self, train_texts: Sequence[str], heldout_texts: Sequence[str]) -> None:
        """Tokenise and pack the data, build the expert and optimizer, resume if checkpointed.

        Raises
        ------
        TrainingFailed
            ``no_usable_docs`` when the documents hold no tokens, ``no_heldout_docs`` when
            nothing is left to evaluate on.
        """
        cfg = self.config
        here = self.trunk.device
        if here.type != self.device.type or self.device.index not in (None, here.index):
            raise ValueError(
                f"the trunk is on {self.trunk.device} but trainer.device resolves to {self.device}"
            )
        prepare_trunk(self.trunk, cfg)
        if cfg.stream_trunk and self.device.type == "cpu":
            self._exit.enter_context(streamed_weights(self.trunk, cfg.stream_read_ahead))
        heldout_from_train = False
        train_texts = [t for t in train_texts if t.strip()]
        heldout_texts = [t for t in heldout_texts if t.strip()]
        if not heldout_texts:
            if len(train_texts) < 2:
                raise TrainingFailed(
                    "no_heldout_docs",
                    "no held-out documents to evaluate on, and too few "
                    "training documents to set some aside",
                )
            cut = max(1, len(train_texts) // 10)
            train_texts, heldout_texts, heldout_from_train = (
                train_texts[:-cut],
                train_texts[-cut:],
                True,
            )
        eos = eos_id(self.trunk.tokenizer)
        train_ids, train_mask = pack(
            tokenize(self.trunk.tokenizer, train_texts), cfg.seq_len, eos, pad_last=False
        )
        held_ids, held_mask = pack(
            tokenize(self.trunk.tokenizer, heldout_texts), cfg.seq_len, eos, pad_last=True
        )
        if len(train_ids) == 0:
            raise TrainingFailed("no_usable_docs", "the training documents contain no tokens")
        if len(held_ids) == 0:
            raise TrainingFailed("no_heldout_docs", "the held-out documents contain no tokens")
        self.held_ids, self.held_mask = (
            held_ids[: cfg.max_eval_rows],
            held_mask[: cfg.max_eval_rows],
        )  # (N, T)
        self.stream = BatchStream(train_ids, train_mask, cfg.micro_batch_size, seed=cfg.seed)

        torch.manual_seed(cfg.seed)
        mlps = [self.trunk.mlp(layer) for layer in range(self.trunk.num_layers)]
        self._exit.enter_context(frozen_mlp_kernels(mlps, cfg.fused_frozen_mlp))
        self.head = output_layer(self.trunk.model)
        if self.parent is None and self.candidates:
            self._start_from_best_candidate()
        configured = expert_config_for(self.trunk, cfg)
        configured.validate(self.trunk.num_layers)
        if self.parent is not None:
            self.growth = self._growth_plan(configured)
            target = ExpertConfig.from_dict(self.growth["to"]) if self.growth else None
            # grown or not, step 0 computes exactly the parent's function
            if target is None:
                self.expert = Expert.branch(self.parent)
            else:
                self.expert = grow(self.parent, target)
        else:
            self.expert = Expert(configured, self.trunk.hidden_size)
        self.expert.to(self.device).train()
        self.expert.requires_grad_(True)
        self.mixture = Mixture(self.trunk, {TRAINING_ID: self.expert})
        self.head = output_layer(self.trunk.model)
        offload = cfg.offload_optimizer and self.device.type == "cuda"
        self.optimizer = FlatOptimizer(
            self.expert.parameters(),
            cfg.optimizer,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            host_offload=offload,
        )
        # the gradient flows down to the expert's lowest block (an output part alone: none)
        first = self.expert.config.lowest_layer
        first = self.trunk.num_layers if first is None else first
        self._exit.enter_context(
            checkpointed_blocks(self.trunk.blocks(), first, cfg.activation_checkpointing)
        )

        self.step = 0
        self.tokens = 0
        self.losses: list[list[float]] = []  # [step, loss] per optimizer step
        self.evals: list[list[float]] = []  # [step, held-out ppl]
        self.bad_evals = 0
        self.best: dict[str, torch.Tensor] | None = None
        self.best_ppl = math.inf
        self.best_step = 0
        self.resumed_from = 0
        self.elapsed = 0.0  # wall seconds in training steps (evaluation excluded)
        self.cpu_elapsed = 0.0  # process CPU seconds in training steps (all threads)
        self.step_times: list[float] = []  # wall seconds of each step of this run
        self.info = {
            "train_docs": len(train_texts),
            "heldout_docs": len(heldout_texts),
            "heldout_from_train": heldout_from_train,
            "train_rows": len(train_ids),
            "heldout_rows": len(self.held_ids),
            "expert_config": self.expert.config.to_dict(),
            "branched": self.parent is not None,
            "started_from_expert_id": self.started_from,
            "growth": self.growth,
            "start_candidates_ppl": {k: round(v, 4) for k, v in self.candidate_ppl.items()},
            "savers": {
                "optimizer": cfg.optimizer,
                "activation_checkpointing": cfg.activation_checkpointing,
                "mmap_trunk": bool(self.trunk.model.__dict__.get("_worx_mmapped", False)),
                "stream_trunk": cfg.stream_trunk and self.device.type == "cpu",
                "offload_optimizer": offload,
                "chunked_loss": cfg.chunked_loss,
                "bf16": self._autocast_enabled(),
            },
        }
        if not self._resume():
            # scoring start candidates already measured the trunk alone on these rows
            scored = self.candidate_trunk_ppl
            self.ppl_trunk = self.evaluate({}) if scored is None else scored
            # at step 0 a zero-initialised expert adds exactly 0 (the trunk's figure), and a
            # branched one is an exact copy of its parent (the parent's figure)
            fresh = self.parent is None
            self.best_ppl = self.ppl_trunk if fresh else self.evaluate({TRAINING_ID: 1.0})
            self.ppl_current = min(self.ppl_trunk, self.best_ppl)  # what serves the domain now
            self.best = self._weights()
            self.evals.append([0, self.best_ppl])
        self.on_event(
            "started",
            {
                "resumed_from_step": self.resumed_from,
                "total_steps": cfg.max_steps,
                "heldout_ppl_trunk": self.ppl_trunk,
                "heldout_ppl_current": self.ppl_current,
            },
        )

    @torch.no_grad()
    def _start_from_best_candidate(self) -> None:
        """DEMix: start as a copy of the existing expert that fits the held-out set best,
        if any beats the trunk alone (the candidates themselves are never modified)."""
        self.head = output_layer(self.trunk.model)
        on_device = {
            expert_id: Expert.branch(expert).requires_grad_(False).to(self.device)
            for expert_id, expert in self.candidates.items()
        }  # copies: evaluating never touches the stored experts, wherever they live
        mixture = Mixture(self.trunk, on_device)
        rows = self.config.candidate_eval_rows or len(self.held_ids)  # 0: every held-out row
        trunk_ppl = self._perplexity(mixture, {}, rows)
        if rows >= len(self.held_ids):  # the trunk's figure on every row: reused in setup
            self.candidate_trunk_ppl = trunk_ppl
        for expert_id in sorted(self.candidates):
            self.candidate_ppl[expert_id] = self._perplexity(mixture, {expert_id: 1.0}, rows)
        best = min(self.candidate_ppl, key=self.candidate_ppl.__getitem__)
        if self.candidate_ppl[best] < trunk_ppl:
            self.parent, self.started_from = self.candidates[best], best
            log.info(
                "starting from expert %s (held-out ppl %.4g; trunk %.4g)",
                best,
                self.candidate_ppl[best],
                trunk_ppl,
            )

    @torch.no_grad()
    def _growth_plan(self, configured: ExpertConfig) -> dict[str, Any] | None:
        """How a start from ``self.parent`` grows (None: it keeps the parent's shape).

        It takes the configured shape where that is larger (``grow_to_configured``), and
        its ranks grow by ``growth_rank_factor`` (and it gets an adapter in every block with
        ``growth_all_layers``) when the parent explains the job's held-out documents
        ``growth_fit_ratio`` times worse than its own at registration.
        """
        cfg, parent = self.config, self.parent.config
        target, reasons = parent, []
        fit = self._parent_fit_ratio()
        if cfg.growth_fit_ratio and fit is not None and fit >= cfg.growth_fit_ratio:
            target = scaled_config(parent, cfg.growth_rank_factor, cfg.growth_max_rank)
            if cfg.growth_all_layers and parent.layers:
                target = dataclasses.replace(target, layers=tuple(range(self.trunk.num_layers)))
            reasons.append("outgrown")
        if cfg.grow_to_configured:
            target = union_config(target, configured)
            if union_config(parent, configured) != parent:
                reasons.append("configured_shape")
        if target == parent:
            return None
        check_growable(parent, target)
        return {
            "reasons": reasons,
            "parent_fit_ratio": None if fit is None else round(fit, 4),
            "from": parent.to_dict(),
            "to": target.to_dict(),
            "changed": growth_record(parent, target),
            "params_before": self.parent.num_params(),
        }

    def _parent_fit_ratio(self) -> float | None:
        """The parent's held-out ppl on the job's documents over its own at registration."""
        own = self.own_ppl.get(self.parent_id or self.started_from or "")
        if not own or not self.config.growth_fit_ratio:
            return None
        if self.started_from is not None:
            here = self.candidate_ppl[self.started_from]
        else:
            copy = Expert.branch(self.parent).requires_grad_(False).to(self.device)
            rows = self.config.candidate_eval_rows or len(self.held_ids)
            here = self._perplexity(Mixture(self.trunk, {"parent": copy}), {"parent": 1.0}, rows)
        return here / own

    def _resume(self) -> bool:
        if self.job_dir is None:
            return False
        ckpt = load_latest(self.job_dir)
        if ckpt is None:
            return False
        extra = ckpt.extra
        if extra.get("expert_config") != self.expert.config.to_dict():
            log.warning(
                "checkpoint in %s is for another expert config; starting over", self.job_dir
            )
            return False
        current = {k: v for k, v in ckpt.weights.items() if not k.startswith("best.")}
        self.expert.load_state_dict(current)
        self.best = {k[len("best.") :]: v for k, v in ckpt.weights.items() if k.startswith("best.")}
        self.optimizer.sync_from_params()
        self.optimizer.load_state_dict(ckpt.optimizer)
        self.stream.seek(ckpt.data_position)
        self.step = self.resumed_from = ckpt.step
        for name, kind in _RESUMED.items():
            if name in _OPTIONAL and name not in extra:  # absent in older checkpoints
                continue
            setattr(self, name, kind(extra[name]) if kind else extra[name])
        log.info("resumed job from %s at step %d", self.job_dir, self.step)
        return True

    # ---- train ------------------------------------------------------------------------

    def train(self) -> None:
        """Run optimizer steps until ``max_steps`` or early stopping.

        Raises
        ------
        TrainingFailed
            ``diverged`` when the loss is not finite or above ``max_loss``.
        TrainingInterrupted
            When ``stop`` was set (after a checkpoint).
        """
        cfg = self.config
        weights = [{TRAINING_ID: 1.0}] * cfg.micro_batch_size
        progress = StepProgress(cfg.max_steps, self.step, enabled=cfg.progress)
        tokens_before = self.tokens
        train_time = 0.0  # seconds in training steps this run (evaluation and checkpoints excluded)
        try:
            while self.step < cfg.max_steps:
                step_started = time.perf_counter()
                cpu_started = time.process_time()
                set_lr(
                    self.optimizer,
                    lr_at(
                        self.step,
                        base_lr=cfg.lr,
                        total_steps=cfg.max_steps,
                        warmup_steps=cfg.warmup_steps,
                        kind=cfg.schedule,
                        min_ratio=cfg.min_lr_ratio,
                    ),
                )
                step_loss = 0.0
                for _ in range(cfg.grad_accum_steps):
                    ids, mask = self.stream.next()  # (B, T), (B, T)
                    ids, mask = ids.to(self.device), mask.to(self.device)
                    # plan active through backward: checkpointed blocks recompute the adapters
                    with self.mixture.routing(weights), self._autocast():
                        loss = self._loss(ids, mask, weights) / cfg.grad_accum_steps  # ()
                        loss.backward()
                    step_loss += float(loss.detach())
                    self.tokens += int(mask.sum())
                if not math.isfinite(step_loss) or step_loss > cfg.max_loss:
                    raise TrainingFailed(
                        "diverged",
                        f"loss {step_loss} at step {self.step} (max_loss {cfg.max_loss})",
                    )
                torch.nn.utils.clip_grad_norm_(self.expert.parameters(), 1.0)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.step += 1
                self.losses.append([self.step, round(step_loss, 5)])
                step_time = time.perf_counter() - step_started
                self.step_times.append(step_time)
                self.cpu_elapsed += time.process_time() - cpu_started
                self.elapsed += step_time
                train_time += step_time
                rate = (self.tokens - tokens_before) / max(1e-9, train_time)
                progress.update(self.step, step_loss, rate)
                stop_early = False
                if self.step % cfg.eval_every == 0 or self.step == cfg.max_steps:
                    stop_early = self._eval_step()
                if self.step % cfg.checkpoint_every == 0 and self.step < cfg.max_steps:
                    self.checkpoint()  # before the event: a "step" event implies its checkpoint
                if self.step % cfg.status_every == 0:
                    self.on_event(
                        "step",
                        {
                            "step": self.step,
                            "loss": step_loss,
                            "tokens_per_s": rate,
                            "total_steps": cfg.max_steps,
                        },
                    )
                if stop_early:
                    log.info(
                        "early stop at step %d (best %d, ppl %.3f)",
                        self.step,
                        self.best_step,
                        self.best_ppl,
                    )
                    break
                if self.stop.is_set():
                    self.checkpoint()
                    raise TrainingInterrupted(f"stopped at step {self.step} (checkpointed)")
        finally:
            progress.close()
        self.stopped_early = self.step < cfg.max_steps

    def _eval_step(self) -> bool:
        ppl = self.evaluate({TRAINING_ID: 1.0})
        self.evals.append([self.step, ppl])
        if ppl < self.best_ppl:
            self.best_ppl, self.best_step, self.bad_evals = ppl, self.step, 0
            self.best = self._weights()
        else:
            self.bad_evals += 1
        return self.bad_evals >= self.config.patience

    def checkpoint(self) -> None:
        if self.job_dir is None:
            return
        weights = self._weights()
        weights.update({f"best.{k}": v for k, v in (self.best or {}).items()})
        extra = {"expert_config": self.expert.config.to_dict()}
        extra.update({name: getattr(self, name) for name in _RESUMED})
        save_checkpoint(
            self.job_dir,
            self.step,
            weights,
            self.optimizer.state_dict(),
            self.stream.position(),
            extra,
        )

    # ---- evaluation -------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, weights: dict[str, float]) -> float:
        """Held-out perplexity of the trunk with ``weights`` ({} = trunk only)."""
        return self._perplexity(self.mixture, weights)

    def _perplexity(
        self, mixture: Mixture, weights: dict[str, float], rows: int | None = None
    ) -> float:
        """Held-out perplexity of ``weights`` on the first ``rows`` rows (None: all of them)."""
        expert = getattr(self, "expert", None)  # None: candidates are evaluated before it exists
        was_training = expert is not None and expert.training
        if expert is not None:
            expert.eval()
        total, count = 0.0, 0.0
        batch = self.config.micro_batch_size
        end = len(self.held_ids) if rows is None else min(rows, len(self.held_ids))
        for start in range(0, end, batch):
            ids = self.held_ids[start : min(start + batch, end)].to(self.device)  # (b, T)
            mask = self.held_mask[start : min(start + batch, end)].to(self.device)  # (b, T)
            with self._autocast():
                if self.config.chunked_loss:
                    hidden = mixture_hidden(mixture, ids, mask, [weights] * len(ids))  # (b, T, d)
                    output = _output_part(mixture, weights)
                    nll, valid = chunked_token_nll(
                        hidden, self.head, ids, mask, self.config.loss_chunk, output
                    )
                else:
                    losses, mask_ = mixture.token_losses(
                        ids, mask, [weights] * len(ids)
                    )  # (b, T-1)
                    nll, valid = float(losses.sum()), float(mask_.sum())
            total += nll
            count += valid
        if expert is not None:
            expert.train(was_training)
        return math.exp(total / max(count, 1.0))

    # ---- save -------------------------------------------------------------------------

    def save(self) -> TrainResult:
        """The best expert, its training summary, and the quality gate's verdict."""
        cfg = self.config
        best = Expert(self.expert.config, self.expert.hidden_size)
        best.load_state_dict(self.best or self._weights())
        best.requires_grad_(False).eval()
        threshold = (1 - cfg.gate_margin) * self.ppl_current
        outcome = "finished" if self.best_ppl < threshold else "not_worth_it"
        figures = {
            "heldout_ppl_trunk": round(self.ppl_trunk, 4),
            "heldout_ppl_current": round(self.ppl_current, 4),
            "heldout_ppl_after": round(self.best_ppl, 4),
            "gate_margin": cfg.gate_margin,
            "gate_threshold_ppl": round(threshold, 4),
            "tokens_seen": self.tokens,
            "steps": self.step,
        }
        stride = max(1, len(self.losses) // 100)
        summary = {
            **self.info,
            **figures,
            "heldout_ppl_before": round(self.ppl_trunk, 4),
            "best_step": self.best_step,
            "stopped_early": self.stopped_early,
            "resumed_from_step": self.resumed_from,
            "loss_curve": self.losses[::stride],
            "eval_curve": self.evals,
            "elapsed_s": round(self.elapsed, 3),
            "cpu_s": round(self.cpu_elapsed, 3),
            "median_step_s": round(statistics.median(self.step_times), 5)
            if self.step_times
            else None,
            "tokens_per_s": round(self.tokens / max(self.elapsed, 1e-9), 1),
            "optimizer_state_bytes": state_bytes(self.optimizer),
            "optimizer_state_breakdown": state_breakdown(self.optimizer),
            "trainable_params": self.expert.num_params(),
        }
        return TrainResult(outcome=outcome, expert=best, summary=summary, figures=figures)

    def cleanup(self) -> None:
        """Restore the trunk's blocks (no checkpoint wrappers) and free the optimizer."""
        self._exit.close()
        self.optimizer = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- helpers ----------------------------------------------------------------------

    def _loss(self, ids: torch.Tensor, mask: torch.Tensor, weights: list) -> torch.Tensor:
        """Mean over the micro-batch of each sequence's mean next-token loss, ``()``."""
        if self.config.chunked_loss:
            hidden = mixture_hidden(self.mixture, ids, mask, weights)  # (B, T, d)
            return chunked_sequence_loss(
                hidden, self.head, ids, mask, self.config.loss_chunk, self.expert.output
            )
        return self.mixture.loss(ids, mask, weights).mean()

    def _weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().to("cpu", copy=True) for k, v in self.expert.state_dict().items()}

    def _autocast_enabled(self) -> bool:
        return self.config.bf16 and self.device.type == "cuda"

    def _autocast(self) -> contextlib.AbstractContextManager:
        return autocast_for(self.device, self.config.bf16)


def train_expert(
    trunk: Trunk,
    train_texts: Sequence[str],
    heldout_texts: Sequence[str],
    config: TrainerConfig,
    *,
    job_dir: Path | None = None,
    parent: Expert | None = None,
    candidates: Mapping[str, Expert] | None = None,
    parent_id: str | None = None,
    own_ppl: Mapping[str, float] | None = None,
    on_event: EventFn | None = None,
    stop: threading.Event | None = None,
) -> TrainResult:
    """Run the whole recipe once (setup -> train -> save -> cleanup) and return its result.

    ``parent``: branch from it. ``candidates``: with no parent, start as a copy of the one
    that fits the held-out documents best, if it beats the trunk (DEMix). Either start may
    grow (:meth:`ExpertRecipe._growth_plan`; ``own_ppl`` by expert id, ``parent_id``).
    """
    recipe = ExpertRecipe(
        trunk,
        config,
        job_dir=job_dir,
        parent=parent,
        candidates=candidates,
        parent_id=parent_id,
        own_ppl=own_ppl,
        on_event=on_event,
        stop=stop,
    )
    try:
        recipe.setup(train_texts, heldout_texts)
        recipe.train()
        return recipe.save()
    finally:
        recipe.cleanup()
