"""Configuration of the training worker and its recipe (section ``[trainer]``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from experts.shape import ExpertConfig
from worx.settings import setting

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
    max_steps: int = setting(200, help="optimizer steps per job at most", range=">= 1")
    seq_len: int = setting(128, help="tokens per packed training row", unit="tokens", range=">= 2")
    micro_batch_size: int = setting(8, help="rows per forward/backward", unit="rows", range=">= 1")
    grad_accum_steps: int = setting(
        4,
        help="micro-batches per optimizer step (effective batch = both)",
        range=">= 1",
    )
    lr: float = setting(
        1e-2, help="peak learning rate of the expert (swept: docs/trainer.md)", range="> 0"
    )
    schedule: str = setting(
        "cosine",
        help='after warm-up: "cosine" (to min_lr_ratio * lr) or "constant"',
        choices=("cosine", "constant"),
    )
    warmup_steps: int = setting(10, help="linear warm-up steps", range=">= 0")
    min_lr_ratio: float = setting(
        0.1, help="final LR of the cosine schedule, as a fraction of lr", range="[0, 1]"
    )
    weight_decay: float = setting(0.0, help="AdamW decoupled weight decay", range=">= 0")
    expert: ExpertConfig = setting(
        default_factory=ExpertConfig,
        help="the shape of the expert each job trains: the sub-table [trainer.expert] "
        "(experts/shape.py)",
    )
    start_candidates: int = setting(
        8,
        help="a new domain's expert may start as a copy of the best, on its held-out "
        "documents, of the experts of the N stored domains nearest its centroid (DEMix; "
        "trainer/starts.py); 0: always from zero",
        range=">= 0",
    )
    candidate_eval_rows: int = setting(
        16,
        help="held-out rows the candidates are compared on (0: all)",
        unit="rows",
        range=">= 0",
    )
    grow_to_configured: bool = setting(
        True,
        help="growth of a start from an existing expert (experts/growth.py, docs/trainer.md "
        '"Growth"): a branch/DEMix start takes the configured expert shape where that is '
        "larger (function-preserving); False: it keeps its parent's shape",
    )
    growth_fit_ratio: float = setting(
        2.0,
        help="grow the parent further when its held-out ppl on the job's documents is >= "
        "this multiple of its own at registration (the data outgrew it); 0: off",
        range=">= 0",
    )
    growth_rank_factor: int = setting(
        2, help="... by this factor on every rank (adapter, output, token)", range=">= 1"
    )
    growth_max_rank: int = setting(512, help="... up to this rank", range=">= 1")
    growth_all_layers: bool = setting(
        True, help="... and with an adapter in every block of the trunk"
    )
    growth_max_trunk_share: float = setting(
        1.0,
        help="... unless the grown expert would hold more than this share of the trunk's "
        "parameters (0: no bound): each new domain's DEMix start grows from another's, so "
        "without a bound sizes ratchet along the chain to the rank cap",
        range=">= 0",
    )
    seed: int = setting(0, help="data order and initialisation")
    eval_every: int = setting(
        20, help="steps between held-out evaluations (early stopping)", unit="steps", range=">= 1"
    )
    patience: int = setting(
        3,
        help="evaluations without improvement before stopping early",
        unit="evaluations",
        range=">= 1",
    )
    max_eval_rows: int = setting(
        64, help="packed held-out rows evaluated at most", unit="rows", range=">= 1"
    )
    gate_margin: float = setting(
        0.03,
        help="register only if held-out ppl < (1 - margin) * current mixture's",
        range="[0, 1)",
    )
    max_loss: float = setting(
        1e4, help='a loss above this (or not finite) marks the job "diverged"'
    )
    # --- memory savers (each switchable; measured by bench/train.py) --------------------
    optimizer: str = setting(
        "adamw8bit",
        help='"adamw8bit" (bitsandbytes 8-bit states) or "adamw" (fp32)',
        choices=("adamw8bit", "adamw"),
    )
    activation_checkpointing: bool = setting(True, help="recompute trunk activations in backward")
    fused_frozen_mlp: bool = setting(
        True, help="frozen GPT-2 MLPs: fused GELU, input-gradient-only backward"
    )
    mmap_trunk: bool = setting(True, help="trunk weights memory-mapped from safetensors (CPU)")
    chunked_loss: bool = setting(
        True, help="cross-entropy in row chunks, never the full (B, T, V) logits"
    )
    loss_chunk: int = setting(
        256, help="rows (tokens) per chunk of the chunked loss", unit="tokens"
    )
    offload_optimizer: bool = setting(
        True, help="on a GPU: optimizer state + master weights in host memory"
    )
    bf16: bool = setting(True, help="on a GPU: bf16 autocast (CPU runs stay fp32)")
    stream_trunk: bool = setting(
        False,
        help="CPU: trunk weights mapped in the file's dtype, copied to fp32 one tensor at a "
        "time as each module runs, their pages dropped after (trainer/stream_trunk.py)",
    )
    stream_read_ahead: int = setting(
        2,
        help="with stream_trunk: blocks read ahead into the page cache (0: no read-ahead)",
        unit="blocks",
        range=">= 0",
    )
    device: str = setting("auto", help='"auto" (cuda if available), "cpu", "cuda", "cuda:1"...')
    # --- the worker --------------------------------------------------------------------
    jobs_dir: str = setting("", help="job checkpoints; empty: <data_dir>/trainer/jobs")
    store_dir: str = setting(
        "",
        help="expert store root, used when experts.store_dir is not set (so the trainer "
        "writes where serve and the monitor read); empty: <data_dir>/experts",
    )
    checkpoint_every: int = setting(
        20, help="steps between checkpoints", unit="steps", range=">= 1"
    )
    ended_jobs_keep: int = setting(
        1000,
        help="ended jobs' directories kept (newest first); 0: no limit",
        unit="jobs",
        range=">= 0",
    )
    ended_jobs_max_age_days: float = setting(
        30.0, help="older ended jobs' directories removed; 0: never", unit="days", range=">= 0"
    )
    status_every: int = setting(
        10,
        help='steps between "step" events on worx.train.status',
        unit="steps",
        range=">= 1",
    )
    fetch_timeout_s: float = setting(
        15.0, help="wait this long for a job's referenced offsets", unit="s", range="> 0"
    )
    group_id: str = setting("worx-trainer", help="consumer group on worx.train")
    max_poll_interval_ms: int = setting(
        86_400_000, help="a job may run this long between polls", unit="ms"
    )
    progress: bool = setting(True, help="progress bar on the terminal")

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
        if (
            self.growth_fit_ratio < 0
            or self.growth_rank_factor < 1
            or self.growth_max_rank < 1
            or self.growth_max_trunk_share < 0
        ):
            raise ValueError(
                "trainer.growth_fit_ratio and growth_max_trunk_share must be >= 0 (0: off), "
                "growth_rank_factor and growth_max_rank >= 1"
            )
