"""Where an expert job's training stands (:class:`Progress`): saved with every checkpoint of
the job, and resumed from its latest one when the job runs again for the same expert config
(a worker stopped or killed mid-job resumes it: docs/trainer.md "Delivery and recovery").

A checkpoint (trainer/checkpoint.py) holds the expert's weights (the current ones, and the
best so far as ``best.<name>``), the optimizer's state, the data stream's position and, as
its JSON ``extra``, the expert's config and every field of :class:`Progress` but ``step``
and ``best``.

Example
-------
>>> progress = Progress(best_ppl=40.0, ppl_trunk=40.0, ppl_current=40.0, evals=[[0, 40.0]])
>>> list(progress.saved())[:4]
['tokens', 'losses', 'evals', 'bad_evals']
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from experts.expert import Expert
from trainer.checkpoint import load_latest, save_checkpoint
from trainer.data import BatchStream
from trainer.optim import FlatOptimizer

log = logging.getLogger(__name__)


@dataclass
class Progress:
    step: int = 0  # optimizer steps done
    best: dict[str, torch.Tensor] = field(default_factory=dict)  # the best weights (CPU)
    tokens: int = 0  # training tokens seen
    losses: list[list[float]] = field(default_factory=list)  # [step, loss] per optimizer step
    evals: list[list[float]] = field(default_factory=list)  # [step, held-out ppl]
    bad_evals: int = 0  # evaluations in a row without improvement
    best_ppl: float = math.inf  # held-out ppl of the best weights
    best_step: int = 0
    ppl_trunk: float = math.inf  # the trunk alone on the held-out rows
    ppl_current: float = math.inf  # what serves the domain now (the trunk, or the start copied)
    elapsed: float = 0.0  # wall seconds in training steps (evaluation excluded)
    cpu_elapsed: float = 0.0  # process CPU seconds in training steps (all threads)
    started_from: str | None = None  # the candidate the expert started as a copy of

    def saved(self) -> dict[str, Any]:
        """The checkpoint's ``extra`` part: every field but ``step`` and ``best`` (JSON)."""
        return {name: getattr(self, name) for name in _SAVED}


_SAVED = [f.name for f in dataclasses.fields(Progress) if f.name not in ("step", "best")]
# how a saved field is read back (absent: kept as stored, a JSON list, an id or None)
_READ: dict[str, Callable[[Any], Any]] = {
    "tokens": int,
    "bad_evals": int,
    "best_ppl": float,
    "best_step": int,
    "ppl_trunk": float,
    "ppl_current": float,
    "elapsed": float,
    "cpu_elapsed": float,
}
_OPTIONAL = {"cpu_elapsed", "started_from"}  # absent in older checkpoints: a fresh job's value


def expert_weights(expert: Expert) -> dict[str, torch.Tensor]:
    """Detached CPU copies of ``expert``'s state, by name."""
    return {k: v.detach().to("cpu", copy=True) for k, v in expert.state_dict().items()}


def save_progress(
    job_dir: Path,
    progress: Progress,
    expert: Expert,
    optimizer: FlatOptimizer,
    stream: BatchStream,
) -> None:
    """Checkpoint the job at ``progress.step``."""
    weights = expert_weights(expert)
    weights.update({f"best.{k}": v for k, v in progress.best.items()})
    extra = {"expert_config": expert.config.to_dict(), **progress.saved()}
    save_checkpoint(
        job_dir, progress.step, weights, optimizer.state_dict(), stream.position(), extra
    )


def resume_progress(
    job_dir: Path,
    expert: Expert,
    optimizer: FlatOptimizer,
    stream: BatchStream,
    started_from: str | None,
) -> Progress | None:
    """The progress of ``job_dir``'s latest checkpoint, ``expert``, ``optimizer`` and
    ``stream`` put back as it saved them; None (nothing touched) when the job has no
    checkpoint or its checkpoint is of another expert config. ``started_from``: the value
    of a checkpoint older than that field."""
    ckpt = load_latest(job_dir)
    if ckpt is None:
        return None
    extra = ckpt.extra
    if extra.get("expert_config") != expert.config.to_dict():
        log.warning("checkpoint in %s is for another expert config; starting over", job_dir)
        return None
    current = {k: v for k, v in ckpt.weights.items() if not k.startswith("best.")}
    expert.load_state_dict(current)
    optimizer.sync_from_params()
    optimizer.load_state_dict(ckpt.optimizer)
    stream.seek(ckpt.data_position)
    saved: dict[str, Any] = {"started_from": started_from}
    for name in _SAVED:
        if name in _OPTIONAL and name not in extra:
            continue
        saved[name] = _READ.get(name, _kept)(extra[name])
    best = {k[len("best.") :]: v for k, v in ckpt.weights.items() if k.startswith("best.")}
    log.info("resumed job from %s at step %d", job_dir, ckpt.step)
    return Progress(step=ckpt.step, best=best, **saved)


def _kept(value: Any) -> Any:
    return value
