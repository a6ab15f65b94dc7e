"""Configuration of the training worker and its recipe (section ``[trainer]``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from experts.shape import ExpertConfig

# the expert's settings before they were [trainer.expert]: refused, naming the new key
_MOVED_TO_EXPERT = (
    "kind",
    "layers",
    "rank",
    "output_rank",
    "token_rank",
    "token_layer",
    "token_site",
    "logit_bias",
)


@dataclass(frozen=True)
class TrainerConfig:
    # settings that moved (old name -> new dotted name below [trainer]): the loader refuses
    # the old name in a file or the environment, naming the new one
    MOVED: ClassVar[dict[str, str]] = {
        f"expert_{name}": f"expert.{name}" for name in _MOVED_TO_EXPERT
    }

    # --- the recipe -------------------------------------------------------------------
    max_steps: int = 200  # optimizer steps per job at most
    seq_len: int = 128  # tokens per packed training row
    micro_batch_size: int = 8  # rows per forward/backward
    grad_accum_steps: int = 4  # micro-batches per optimizer step (effective batch = both)
    lr: float = 1e-2  # peak learning rate of the expert (swept: docs/trainer.md)
    schedule: str = "cosine"  # "cosine" (to min_lr_ratio * lr) or "constant", after warm-up
    warmup_steps: int = 10  # linear warm-up steps
    min_lr_ratio: float = 0.1  # final LR of the cosine schedule, as a fraction of lr
    weight_decay: float = 0.0  # AdamW decoupled weight decay
    # the shape of the expert each job trains: [trainer.expert] (experts/shape.py; its
    # settings' table: docs/trainer.md)
    expert: ExpertConfig = field(default_factory=ExpertConfig)
    start_candidates: int = 8  # a new domain's expert may start as a copy of the best of the
    # newest N stored experts on its held-out documents (DEMix); 0: always from zero
    candidate_eval_rows: int = 16  # held-out rows the candidates are compared on (0: all)
    # growth of a start from an existing expert (experts/growth.py, docs/trainer.md "Growth"):
    grow_to_configured: bool = True  # a branch/DEMix start takes the configured expert shape
    # where that is larger (function-preserving); False: it keeps its parent's shape
    growth_fit_ratio: float = 2.0  # grow the parent further when its held-out ppl on the job's
    # documents is >= this multiple of its own at registration (the data outgrew it); 0: off
    growth_rank_factor: int = 2  # ... by this factor on every rank (adapter, output, token)
    growth_max_rank: int = 512  # ... up to this rank
    growth_all_layers: bool = True  # ... and with an adapter in every block of the trunk
    seed: int = 0  # data order and initialisation
    eval_every: int = 20  # steps between held-out evaluations (early stopping)
    patience: int = 3  # evaluations without improvement before stopping early
    max_eval_rows: int = 64  # packed held-out rows evaluated at most
    gate_margin: float = 0.03  # register only if held-out ppl < (1 - margin) * current mixture's
    max_loss: float = 1e4  # a loss above this (or not finite) marks the job "diverged"
    # --- memory savers (each switchable; measured by bench/train.py) --------------------
    optimizer: str = "adamw8bit"  # "adamw8bit" (bitsandbytes 8-bit states) or "adamw" (fp32)
    activation_checkpointing: bool = True  # recompute trunk activations in backward
    fused_frozen_mlp: bool = True  # frozen GPT-2 MLPs: fused GELU, input-gradient-only backward
    mmap_trunk: bool = True  # trunk weights memory-mapped from safetensors (CPU)
    chunked_loss: bool = True  # cross-entropy in row chunks, never the full (B, T, V) logits
    loss_chunk: int = 256  # rows (tokens) per chunk of the chunked loss
    offload_optimizer: bool = True  # on a GPU: optimizer state + master weights in host memory
    bf16: bool = True  # on a GPU: bf16 autocast (CPU runs stay fp32)
    stream_trunk: bool = False  # CPU: trunk weights mapped in the file's dtype, copied to fp32
    # one tensor at a time as each module runs, their pages dropped after (trainer/stream_trunk.py)
    stream_read_ahead: int = 2  # with stream_trunk: blocks read ahead into the page cache
    device: str = "auto"  # "auto" (cuda if available), "cpu", "cuda", "cuda:1"...
    # --- the worker --------------------------------------------------------------------
    jobs_dir: str = ""  # job checkpoints; empty: <data_dir>/trainer/jobs
    store_dir: str = ""  # expert store root; empty: <data_dir>/experts
    checkpoint_every: int = 20  # steps between checkpoints
    ended_jobs_keep: int = 1000  # ended jobs' directories kept (newest first); 0: no limit
    ended_jobs_max_age_days: float = 30.0  # older ended jobs' directories removed; 0: never
    status_every: int = 10  # steps between "step" events on worx.train.status
    fetch_timeout_s: float = 15.0  # wait this long for a job's referenced offsets
    group_id: str = "worx-trainer"  # consumer group on worx.train
    max_poll_interval_ms: int = 86_400_000  # a job may run this long between polls
    progress: bool = True  # progress bar on the terminal

    def validate(self) -> None:
        positive = (
            "max_steps",
            "seq_len",
            "micro_batch_size",
            "grad_accum_steps",
            "eval_every",
            "patience",
            "max_eval_rows",
            "checkpoint_every",
            "status_every",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"trainer.{name} must be >= 1")
        if self.seq_len < 2:
            raise ValueError("trainer.seq_len must be >= 2")
        if self.ended_jobs_keep < 0 or self.ended_jobs_max_age_days < 0:
            raise ValueError(
                "trainer.ended_jobs_keep and trainer.ended_jobs_max_age_days must be >= 0 "
                "(0: no limit)"
            )
        if self.schedule not in ("cosine", "constant"):
            raise ValueError(f"trainer.schedule {self.schedule!r}: use 'cosine' or 'constant'")
        if self.optimizer not in ("adamw8bit", "adamw"):
            raise ValueError(f"trainer.optimizer {self.optimizer!r}: use 'adamw8bit' or 'adamw'")
        if not 0 <= self.gate_margin < 1:
            raise ValueError("trainer.gate_margin must be in [0, 1)")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError("trainer.min_lr_ratio must be in [0, 1]")
        if (
            self.lr <= 0
            or self.warmup_steps < 0
            or self.weight_decay < 0
            or self.fetch_timeout_s <= 0
        ):
            raise ValueError(
                "trainer.lr and fetch_timeout_s must be > 0; warmup_steps, weight_decay >= 0"
            )
        if self.stream_read_ahead < 0:
            raise ValueError("trainer.stream_read_ahead must be >= 0 (0: no read-ahead)")
        if self.start_candidates < 0:
            raise ValueError("trainer.start_candidates must be >= 0")
        if self.candidate_eval_rows < 0:
            raise ValueError("trainer.candidate_eval_rows must be >= 0 (0: every held-out row)")
        if self.growth_fit_ratio < 0 or self.growth_rank_factor < 1 or self.growth_max_rank < 1:
            raise ValueError(
                "trainer.growth_fit_ratio must be >= 0 (0: off), growth_rank_factor and "
                "growth_max_rank >= 1"
            )
