"""Memory-map a frozen trunk's weights from its safetensors files.

After :func:`mmap_trunk_weights` every trunk parameter stored in the model directory is a
view of a private, read-only-in-practice mapping of the file (``torch.from_file``, MAP_PRIVATE):
pages come from the page cache on first touch, are shared by every process that maps the same
file, and are never copied into anonymous process memory. The loaded copies are released.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from experts.store import SAFETENSORS_DTYPES as _DTYPES

log = logging.getLogger(__name__)


@dataclass
class MmapReport:
    mapped: list[str] = field(default_factory=list)  # parameter/buffer names now file-backed
    skipped: dict[str, str] = field(default_factory=dict)  # name -> why it stayed in memory
    mapped_bytes: int = 0


def read_header(file: Path) -> tuple[int, dict]:
    """The safetensors header of ``file`` and the byte offset where tensor data starts."""
    with open(file, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return 8 + length, header


def mmap_trunk_weights(
    model: nn.Module, model_dir: str | Path, cache_file: str | Path | None = None
) -> MmapReport:
    """Rebind ``model``'s parameters to memory-mapped views of ``model_dir/*.safetensors``.

    Only tensors whose name, shape and dtype match the file are mapped (a model on a GPU
    keeps its own copies). Tied parameters are mapped once. When the model was loaded in
    another dtype than stored (e.g. float16 on disk, float32 in memory) and ``cache_file`` is
    given, the loaded tensors are written there once (safetensors) and mapped from it.
    """
    files = sorted(Path(model_dir).glob("*.safetensors"))
    report = _map_files(model, files)
    mismatched = [
        name
        for name, why in report.skipped.items()
        if why.startswith("model holds") and "cpu" in why
    ]
    if mismatched and cache_file is not None:
        cache = Path(cache_file)
        if not cache.exists():
            params = dict(model.named_parameters())  # tied weights once
            params.update(dict(model.named_buffers()))
            wanted = {
                name: params[name].detach().contiguous() for name in mismatched if name in params
            }
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")  # one per writer process
            save_file(wanted, str(tmp))
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, cache)  # atomic: a reader maps the whole file or none
        again = _map_files(model, [cache])
        for name in again.mapped:
            report.skipped.pop(name, None)
        report.mapped += again.mapped
        report.mapped_bytes += again.mapped_bytes
    log.info(
        "memory-mapped %d trunk tensors (%.1f MB); %d kept in memory",
        len(report.mapped),
        report.mapped_bytes / 1e6,
        len(report.skipped),
    )
    return report


def _map_files(model: nn.Module, files: list[Path]) -> MmapReport:
    report = MmapReport()
    tensors = dict(model.named_parameters(remove_duplicate=False))
    tensors.update(dict(model.named_buffers(remove_duplicate=False)))
    for file in files:
        data_start, header = read_header(file)
        size = file.stat().st_size
        base = torch.from_file(
            str(file), shared=False, size=size, dtype=torch.uint8
        )  # (size,) mapped
        for name, info in header.items():
            if name == "__metadata__":
                continue
            target = tensors.get(name)
            if target is None:
                report.skipped[name] = "not a tensor of the model"
                continue
            dtype = _DTYPES.get(info["dtype"])
            begin, end = (data_start + offset for offset in info["data_offsets"])
            if dtype is None or dtype != target.dtype or target.device.type != "cpu":
                report.skipped[name] = (
                    f"model holds {target.dtype} on {target.device}, file {info['dtype']}"
                )
                continue
            if tuple(info["shape"]) != tuple(target.shape):
                report.skipped[name] = (
                    f"shape {tuple(target.shape)} in the model, {info['shape']} in the file"
                )
                continue
            itemsize = torch.empty(0, dtype=dtype).element_size()
            if begin % itemsize:
                report.skipped[name] = "unaligned in the file"
                continue
            view = base[begin:end].view(dtype).view(info["shape"])  # file-backed, no copy
            target.data = view
            report.mapped.append(name)
            report.mapped_bytes += end - begin
    return report
