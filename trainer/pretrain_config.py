"""Settings of the trunk pretraining recipe (:mod:`trainer.recipes.pretrain_trunk`).

Example
-------
>>> cfg = PretrainConfig(out_dir="trunk", steps=400)
>>> cfg.validate(); cfg.n_heads, warmup_steps(cfg)
(4, 40)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.trunk_growth import plan_growth

# Weights larger than this in float32 are saved in float16 (the committed trunk's limit).
DEFAULT_MAX_WEIGHT_BYTES = 20 * 1024 * 1024
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class PretrainConfig:
    out_dir: str  # where the model directory is written
    corpus_dir: str = ""  # folder of <domain>.jsonl.gz; empty: the bundled data/corpus
    train_domains: tuple[str, ...] = ("fiction_austen", "news")  # model training text
    holdout_fraction: float = 0.05  # share of each domain's documents held out (by id hash)
    max_docs_per_domain: int = 0  # cap per domain after the split (0: all); for tests
    # model (GPT-2 architecture, tied input/output embeddings)
    layers: int = 4  # transformer blocks
    width: int = 256  # hidden size d_model
    heads: int = 0  # attention heads; 0: width // 64 (at least 1)
    vocab_size: int = 8192  # BPE vocabulary target (trained on all domains)
    context: int = 256  # tokens per training sequence and max positions
    dropout: float = 0.0  # residual/embedding/attention dropout
    reversible: bool = False  # a reversible trunk (experts/reversible.py; needs dropout 0)
    # grow mid-training, "STEP:LAYERSxWIDTH" each (trainer/trunk_growth.py); layers and
    # width above are the starting shape
    grow_at: tuple[str, ...] = ()
    # optimisation
    steps: int = 0  # total optimizer steps (schedule length); 0: from `minutes`
    minutes: float = 0.0  # training time budget; 0: no budget (needs `steps`)
    stop_step: int = 0  # stop after this many steps of the schedule (0: run it all)
    batch_size: int = 16  # sequences per step
    lr: float = 1e-3  # peak AdamW learning rate
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 0  # linear warm-up steps; 0: a tenth of `steps`, at most 100
    weight_decay: float = 0.1  # AdamW decay on matrices only
    grad_clip: float = 1.0  # max global gradient norm (0: off)
    # runtime
    device: str = "cpu"  # cpu | cuda | cuda:N; cuda uses bf16 autocast
    threads: int = 0  # CPU threads for torch (0: torch default)
    seed: int = 0  # seeds the model init, the tokenizer-independent batch order
    eval_tokens: int = 65_536  # held-out tokens evaluated per domain at most
    save_dtype: str = "auto"  # auto | float32 | float16 | bfloat16
    max_weight_bytes: int = DEFAULT_MAX_WEIGHT_BYTES  # `auto` saves float16 above this
    force: bool = False  # replace an existing trunk directory at out_dir
    progress: bool = True  # show a progress bar
    command: str = ""  # the command line that launched this run (for the card)

    def validate(self) -> None:
        """Raise ValueError with the fix when a field is out of range."""
        if self.steps <= 0 and self.minutes <= 0:
            raise ValueError("give a step count (--steps N) or a time budget (--minutes M)")
        if self.steps < 0 or self.minutes < 0 or self.stop_step < 0:
            raise ValueError("steps, minutes and stop_step must be >= 0")
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ValueError("holdout_fraction must be in (0, 1), e.g. 0.05")
        if not self.train_domains:
            raise ValueError("train_domains is empty: name at least one domain to train on")
        if self.layers < 1 or self.width < 1 or self.context < 2 or self.batch_size < 1:
            raise ValueError("layers, width, batch_size must be >= 1 and context >= 2")
        if self.warmup_steps < 0:
            raise ValueError("warmup_steps must be >= 0 (0: automatic)")
        if self.steps and self.warmup_steps and self.warmup_steps >= self.steps:
            raise ValueError(
                f"warmup_steps {self.warmup_steps} must be below steps {self.steps}; "
                "lower --warmup-steps"
            )
        if self.width % self.n_heads:
            raise ValueError(f"width {self.width} is not divisible by heads {self.n_heads}")
        if self.vocab_size < 257:
            raise ValueError("vocab_size must be >= 257 (256 bytes + <|endoftext|>)")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("dropout must be in [0, 1)")
        if self.reversible and self.dropout:
            raise ValueError(
                "--reversible needs --dropout 0: its backward recomputes every block and "
                "must meet the same function"
            )
        plan_growth(self.grow_at, self.layers, self.width, self.steps)  # GrowthError: how
        if self.save_dtype not in DTYPES and self.save_dtype != "auto":
            raise ValueError(f"save_dtype must be auto or one of {sorted(DTYPES)}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device {self.device!r}: use cpu, cuda or cuda:N")

    @property
    def n_heads(self) -> int:
        return self.heads or max(1, self.width // 64)


def warmup_steps(cfg: PretrainConfig) -> int:
    """The configured warm-up, or (0) a tenth of ``steps`` capped at 100 (100 for budgets)."""
    if cfg.warmup_steps:
        return cfg.warmup_steps
    return max(1, min(100, cfg.steps // 10)) if cfg.steps else 100
