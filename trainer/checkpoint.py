"""Job checkpoints: expert weights, optimizer state, step, data position and RNG, never pickled.

Layout of a job directory::

    <jobs_dir>/<job_id>/
        ckpt-00000040-<rand>/expert.safetensors   trainable tensors
        ckpt-00000040-<rand>/optim.safetensors    optimizer state tensors
        ckpt-00000040-<rand>/state.json           step, data position, RNG, optimizer skeleton
        latest.json                               {"name": "ckpt-00000040-<rand>", "step": 40}
        outcome.json                              written once the job ended

A checkpoint directory is written under a temporary name, fsynced and renamed to a name of
its own (a step saved twice, after a resume, gets a second directory); ``latest.json`` is
replaced atomically after it; only then are older checkpoints removed. So a kill at any
moment leaves the checkpoint ``latest.json`` names in place.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from trainer.optim import flatten_state, unflatten_state
from worx.atomic import atomic_write_json, fsync_dir

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
_NAME = re.compile(r"^ckpt-(\d{8})(?:-[0-9a-f]+)?$")


@dataclass
class Checkpoint:
    step: int
    weights: dict[str, torch.Tensor]  # trainable tensors by parameter name
    optimizer: dict[str, Any]  # an optimizer state_dict
    data_position: dict[str, int]
    extra: dict[str, Any]  # history, best eval, ... (JSON)


def save_checkpoint(
    job_dir: Path,
    step: int,
    weights: dict[str, torch.Tensor],
    optimizer_state: dict[str, Any],
    data_position: dict[str, int],
    extra: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write checkpoint ``step`` atomically and point ``latest.json`` at it; keep ``keep``."""
    job_dir.mkdir(parents=True, exist_ok=True)
    name = f"ckpt-{step:08d}-{uuid.uuid4().hex[:8]}"
    final = job_dir / name
    tmp = job_dir / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    tensors: dict[str, torch.Tensor] = {}
    skeleton = flatten_state(optimizer_state, tensors)
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in weights.items()},
        str(tmp / "expert.safetensors"),
    )
    save_file(tensors or {"_empty": torch.zeros(0)}, str(tmp / "optim.safetensors"))
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng.update({f"cuda{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
    save_file(rng, str(tmp / "rng.safetensors"))
    state = {
        "version": CHECKPOINT_VERSION,
        "step": step,
        "data_position": data_position,
        "optimizer": skeleton,
        "python_random": _random_state_to_json(random.getstate()),
        "extra": extra,
    }
    (tmp / "state.json").write_text(json.dumps(state))
    for file in tmp.iterdir():
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())
    fsync_dir(tmp)
    os.replace(tmp, final)  # a new name: nothing the pointer names is touched
    fsync_dir(job_dir)
    atomic_write_json(job_dir / "latest.json", {"name": name, "step": step})
    for old in _older_than_the_newest(job_dir, name, keep):
        shutil.rmtree(old, ignore_errors=True)
    return final


def _older_than_the_newest(job_dir: Path, current: str, keep: int) -> list[Path]:
    """Checkpoint directories beyond the newest ``keep`` (``current`` counts as newest)."""
    found = []
    for path in job_dir.glob("ckpt-*"):
        match = _NAME.match(path.name)
        if match and path.name != current:
            found.append((int(match.group(1)), path.stat().st_mtime, path))
    found.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [path for _, _, path in found[max(keep - 1, 0) :]]


def load_latest(job_dir: Path) -> Checkpoint | None:
    """The last complete checkpoint of the job, or None. Restores the RNG states too."""
    pointer = job_dir / "latest.json"
    if not pointer.exists():
        return None
    name = json.loads(pointer.read_text())["name"]
    folder = job_dir / name
    state = json.loads((folder / "state.json").read_text())
    if state.get("version") != CHECKPOINT_VERSION:
        raise ValueError(
            f"{folder}: checkpoint version {state.get('version')} is not {CHECKPOINT_VERSION}"
        )
    weights = load_file(str(folder / "expert.safetensors"))
    optim_tensors = load_file(str(folder / "optim.safetensors"))
    rng = load_file(str(folder / "rng.safetensors"))
    torch.set_rng_state(rng["torch"])
    if torch.cuda.is_available():
        states = [rng[f"cuda{i}"] for i in range(torch.cuda.device_count()) if f"cuda{i}" in rng]
        if states:
            torch.cuda.set_rng_state_all(states)
    random.setstate(_random_state_from_json(state["python_random"]))
    return Checkpoint(
        step=int(state["step"]),
        weights=weights,
        optimizer=unflatten_state(state["optimizer"], optim_tensors),
        data_position=state["data_position"],
        extra=state["extra"],
    )


def clear_checkpoints(job_dir: Path) -> None:
    """Remove the job's checkpoints (after it ended); keeps outcome.json."""
    for path in list(job_dir.glob("ckpt-*")) + list(job_dir.glob(".ckpt-*")):
        shutil.rmtree(path, ignore_errors=True)
    (job_dir / "latest.json").unlink(missing_ok=True)


def _random_state_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _random_state_from_json(raw: list) -> tuple:
    version, internal, gauss = raw
    return (version, tuple(internal), gauss)
