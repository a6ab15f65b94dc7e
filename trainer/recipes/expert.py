"""The recipe that trains one expert on a frozen trunk: setup -> train -> save -> cleanup.

(~490 lines: the recipe's four phases over one shared state; the pieces they call live
beside it: expert_start, expert_progress, expert_outcome, job_rows and heldout.)

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

One recipe read top to bottom, as torchtune's are; setup is one method per responsibility
(``_setup_trunk``, ``_setup_data``, ``_setup_model``, ``_setup_optimizer``,
``_setup_progress``), each built from its module beside it: trainer/expert_setup.py,
trainer/recipes/job_rows.py (the packed rows), expert_start.py (where the expert starts),
heldout.py (held-out perplexity), expert_progress.py (where training stands, checkpoints)
and expert_outcome.py (the result and the two exceptions). (Near 500 lines on purpose:
what is left is the recipe itself, setup -> the training loop -> save -> cleanup.)
"""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from experts.expert import Expert
from experts.mixture import Mixture
from experts.trunk import Trunk
from trainer.act_ckpt import checkpointed_blocks
from trainer.config import TrainerConfig
from trainer.data import BatchStream
from trainer.expert_setup import expert_config_for, prepare_trunk, resolve_device, savers_on
from trainer.frozen_mlp import frozen_mlp_kernels
from trainer.fused_loss import chunked_sequence_loss, output_layer
from trainer.optim import FlatOptimizer, set_lr, state_breakdown, state_bytes
from trainer.precision import autocast_for
from trainer.progress import StepProgress
from trainer.recipes.expert_outcome import (  # the recipe's results, imported from here
    TrainingFailed,
    TrainingInterrupted,
    TrainResult,
)
from trainer.recipes.expert_progress import (
    Progress,
    expert_weights,
    resume_progress,
    save_progress,
)
from trainer.recipes.expert_start import Start, plan_start
from trainer.recipes.heldout import HeldOutRows
from trainer.recipes.job_rows import pack_job
from trainer.schedule import lr_at
from trainer.stream_trunk import streamed_weights

log = logging.getLogger(__name__)

TRAINING_ID = "training"  # the trainable expert's id inside the recipe's mixture
EventFn = Callable[[str, dict[str, Any]], None]


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

    # what setup builds, one method each
    head: torch.nn.Linear  # the trunk's output layer (_setup_trunk)
    heldout: HeldOutRows  # the packed held-out rows (_setup_data)
    stream: BatchStream  # the packed training rows, in a seeded order (_setup_data)
    start: Start  # where the expert starts (_setup_model)
    expert: Expert  # the trainable expert (_setup_model)
    mixture: Mixture  # the trunk with the expert (_setup_model)
    optimizer: FlatOptimizer | None  # (_setup_optimizer; None after cleanup)
    info: dict[str, Any]  # how the job was set up: the summary's first keys (setup)
    progress: Progress  # where training stands: step 0 or resumed (_setup_progress)
    resumed_from: int  # the step a checkpoint resumed at; 0: none (_setup_progress)
    step_times: list[float]  # wall seconds of each step of this run (_setup_progress)
    stopped_early: bool  # (train)

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
        self._setup_trunk()
        data = self._setup_data(train_texts, heldout_texts)
        self._setup_model()
        self._setup_optimizer()
        self.info = {**data, **self._setup_summary()}
        self._setup_progress()
        self.on_event(
            "started",
            {
                "resumed_from_step": self.resumed_from,
                "total_steps": self.config.max_steps,
                "heldout_ppl_trunk": self.progress.ppl_trunk,
                "heldout_ppl_current": self.progress.ppl_current,
            },
        )

    def _setup_trunk(self) -> None:
        """The trunk on the configured device, prepared (mapped or streamed) as configured."""
        here = self.trunk.device
        if here.type != self.device.type or self.device.index not in (None, here.index):
            raise ValueError(
                f"the trunk is on {self.trunk.device} but trainer.device resolves to {self.device}"
            )
        prepare_trunk(self.trunk, self.config)
        if self.config.stream_trunk and self.device.type == "cpu":
            self._exit.enter_context(streamed_weights(self.trunk, self.config.stream_read_ahead))
        self.head = output_layer(self.trunk.model)

    def _setup_data(
        self, train_texts: Sequence[str], heldout_texts: Sequence[str]
    ) -> dict[str, Any]:
        """The training stream and held-out rows (trainer/recipes/job_rows.py); returns
        their counts (the summary's)."""
        cfg = self.config
        rows = pack_job(
            self.trunk.tokenizer, train_texts, heldout_texts, cfg.seq_len, cfg.max_eval_rows
        )
        self.heldout = HeldOutRows(
            rows.held_ids,
            rows.held_mask,
            batch_size=cfg.micro_batch_size,
            head=self.head,
            chunk=cfg.loss_chunk if cfg.chunked_loss else None,
            device=self.device,
            bf16=cfg.bf16,
        )
        self.stream = BatchStream(
            rows.train_ids, rows.train_mask, cfg.micro_batch_size, seed=cfg.seed
        )
        return rows.counts

    def _setup_model(self) -> None:
        """The trainable expert, started as :func:`~trainer.recipes.expert_start.plan_start`
        says, in a mixture with the trunk; the trunk's frozen-MLP kernels and activation
        checkpointing down to the expert's lowest block."""
        cfg = self.config
        torch.manual_seed(cfg.seed)
        mlps = [self.trunk.mlp(layer) for layer in range(self.trunk.num_layers)]
        self._exit.enter_context(frozen_mlp_kernels(mlps, cfg.fused_frozen_mlp))
        configured = expert_config_for(self.trunk, cfg)  # checked against the trunk
        self.start = plan_start(
            self.trunk,
            cfg,
            self.heldout,
            configured,
            parent=self.parent,
            candidates=self.candidates,
            parent_id=self.parent_id,
            own_ppl=self.own_ppl,
        )
        self.expert = self.start.expert(configured, self.trunk.hidden_size)
        self.expert.to(self.device).train()
        self.expert.requires_grad_(True)
        self.mixture = Mixture(self.trunk, {TRAINING_ID: self.expert})
        # the gradient flows down to the expert's lowest block (an output part alone: none)
        first = self.expert.config.lowest_layer
        first = self.trunk.num_layers if first is None else first
        self._exit.enter_context(
            checkpointed_blocks(self.trunk.blocks(), first, cfg.activation_checkpointing)
        )

    def _setup_optimizer(self) -> None:
        """One flat optimizer over the expert (on a GPU, its state in host memory if set)."""
        cfg = self.config
        self.optimizer = FlatOptimizer(
            self.expert.parameters(),
            cfg.optimizer,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            host_offload=cfg.offload_optimizer and self.device.type == "cuda",
        )

    def _setup_summary(self) -> dict[str, Any]:
        """How the expert starts and which savers are on (the summary reports them)."""
        cfg = self.config
        return {
            "expert_config": self.expert.config.to_dict(),
            "branched": self.start.parent is not None,
            "started_from_expert_id": self.start.started_from,
            "growth": self.start.growth,
            "start_candidates_ppl": {k: round(v, 4) for k, v in self.start.candidate_ppl.items()},
            "savers": savers_on(self.trunk, cfg, self.device, self.optimizer.host_offload),
        }

    def _setup_progress(self) -> None:
        """Where training stands: the job's checkpoint of this expert, resumed
        (trainer/recipes/expert_progress.py), else step 0 with the start evaluated."""
        resumed = None
        if self.job_dir is not None:
            resumed = resume_progress(
                self.job_dir, self.expert, self.optimizer, self.stream, self.start.started_from
            )
        self.progress = self._step_zero() if resumed is None else resumed
        self.resumed_from = 0 if resumed is None else resumed.step
        self.step_times = []

    def _step_zero(self) -> Progress:
        # scoring start candidates already measured the trunk alone on these rows
        scored = self.start.candidate_trunk_ppl
        ppl_trunk = self.evaluate({}) if scored is None else scored
        # at step 0 a zero-initialised expert adds exactly 0 (the trunk's figure), and a
        # copy is exactly its parent (the parent's figure)
        fresh = self.start.parent is None
        best_ppl = ppl_trunk if fresh else self.evaluate({TRAINING_ID: 1.0})
        return Progress(
            best=expert_weights(self.expert),
            evals=[[0, best_ppl]],
            best_ppl=best_ppl,
            ppl_trunk=ppl_trunk,
            ppl_current=min(ppl_trunk, best_ppl),
            started_from=self.start.started_from,
        )

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
        cfg, p = self.config, self.progress
        weights = [{TRAINING_ID: 1.0}] * cfg.micro_batch_size
        bar = StepProgress(cfg.max_steps, p.step, enabled=cfg.progress)
        tokens_before = p.tokens
        train_time = 0.0  # seconds in training steps this run (evaluation and checkpoints excluded)
        try:
            while p.step < cfg.max_steps:
                step_started = time.perf_counter()
                cpu_started = time.process_time()
                set_lr(
                    self.optimizer,
                    lr_at(
                        p.step,
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
                    p.tokens += int(mask.sum())
                if not math.isfinite(step_loss) or step_loss > cfg.max_loss:
                    raise TrainingFailed(
                        "diverged",
                        f"loss {step_loss} at step {p.step} (max_loss {cfg.max_loss})",
                    )
                torch.nn.utils.clip_grad_norm_(self.expert.parameters(), 1.0)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                p.step += 1
                p.losses.append([p.step, round(step_loss, 5)])
                step_time = time.perf_counter() - step_started
                self.step_times.append(step_time)
                p.cpu_elapsed += time.process_time() - cpu_started
                p.elapsed += step_time
                train_time += step_time
                rate = (p.tokens - tokens_before) / max(1e-9, train_time)
                bar.update(p.step, step_loss, rate)
                stop_early = False
                if p.step % cfg.eval_every == 0 or p.step == cfg.max_steps:
                    stop_early = self._eval_step()
                if p.step % cfg.checkpoint_every == 0 and p.step < cfg.max_steps:
                    self.checkpoint()  # before the event: a "step" event implies its checkpoint
                if p.step % cfg.status_every == 0:
                    self.on_event(
                        "step",
                        {
                            "step": p.step,
                            "loss": step_loss,
                            "tokens_per_s": rate,
                            "total_steps": cfg.max_steps,
                        },
                    )
                if stop_early:
                    log.info(
                        "early stop at step %d (best %d, ppl %.3f)",
                        p.step,
                        p.best_step,
                        p.best_ppl,
                    )
                    break
                if self.stop.is_set():
                    self.checkpoint()
                    raise TrainingInterrupted(f"stopped at step {p.step} (checkpointed)")
        finally:
            bar.close()
        self.stopped_early = p.step < cfg.max_steps

    def _eval_step(self) -> bool:
        p = self.progress
        ppl = self.evaluate({TRAINING_ID: 1.0})
        p.evals.append([p.step, ppl])
        if ppl < p.best_ppl:
            p.best_ppl, p.best_step, p.bad_evals = ppl, p.step, 0
            p.best = expert_weights(self.expert)
        else:
            p.bad_evals += 1
        return p.bad_evals >= self.config.patience

    def checkpoint(self) -> None:
        if self.job_dir is not None:
            save_progress(self.job_dir, self.progress, self.expert, self.optimizer, self.stream)

    # ---- evaluation -------------------------------------------------------------------

    def evaluate(self, weights: dict[str, float]) -> float:
        """Held-out perplexity of the trunk with ``weights`` ({} = trunk only)."""
        was_training = self.expert.training
        self.expert.eval()
        ppl = self.heldout.perplexity(self.mixture, weights)
        self.expert.train(was_training)
        return ppl

    # ---- save -------------------------------------------------------------------------

    def save(self) -> TrainResult:
        """The best expert, its training summary, and the quality gate's verdict."""
        cfg, p = self.config, self.progress
        best = Expert(self.expert.config, self.expert.hidden_size)
        best.load_state_dict(p.best or expert_weights(self.expert))
        best.requires_grad_(False).eval()
        threshold = (1 - cfg.gate_margin) * p.ppl_current
        outcome = "finished" if p.best_ppl < threshold else "not_worth_it"
        figures = {
            "heldout_ppl_trunk": round(p.ppl_trunk, 4),
            "heldout_ppl_current": round(p.ppl_current, 4),
            "heldout_ppl_after": round(p.best_ppl, 4),
            "gate_margin": cfg.gate_margin,
            "gate_threshold_ppl": round(threshold, 4),
            "tokens_seen": p.tokens,
            "steps": p.step,
        }
        stride = max(1, len(p.losses) // 100)
        summary = {
            **self.info,
            **figures,
            "heldout_ppl_before": round(p.ppl_trunk, 4),
            "best_step": p.best_step,
            "stopped_early": self.stopped_early,
            "resumed_from_step": self.resumed_from,
            "loss_curve": p.losses[::stride],
            "eval_curve": p.evals,
            "elapsed_s": round(p.elapsed, 3),
            "cpu_s": round(p.cpu_elapsed, 3),
            "median_step_s": round(statistics.median(self.step_times), 5)
            if self.step_times
            else None,
            "tokens_per_s": round(p.tokens / max(p.elapsed, 1e-9), 1),
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
            hidden = self.mixture.hidden(ids, mask, weights)  # (B, T, d)
            return chunked_sequence_loss(
                hidden, self.head, ids, mask, self.config.loss_chunk, self.expert.output
            )
        return self.mixture.loss(ids, mask, weights).mean()

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
    grow (:func:`trainer.recipes.expert_start.growth_plan`; ``own_ppl`` by expert id,
    ``parent_id``).
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
