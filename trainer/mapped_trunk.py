"""A trunk whose weights are its files': memory-mapped in the stored dtype, never loaded.

:func:`map_stored_weights` rebinds every tensor of a model that its directory's safetensors
files hold to a view of a private mapping of that file (``mmap``, ``MAP_PRIVATE``), in the
file's dtype: a bf16 file stays bf16 (no float32 copy), and the loaded copies are released.
Unlike :func:`trainer.mmap_weights.mmap_trunk_weights`, the mappings are kept in a
:class:`MappedWeights`, which can read a tensor's pages ahead (``MADV_WILLNEED``) and drop
them from the process once read (``MADV_DONTNEED``: clean file pages, re-read from the page
cache or the disk on the next touch); only ranges inside its own file mappings are ever
advised. :func:`load_mapped_trunk` builds the model with empty parameters (no weight is
ever allocated) and maps it, so a 13.5 GB trunk opens in a few hundred MB.

Example
-------
>>> import tempfile
>>> from experts.random_trunk import LlamaShape, write_random_llama
>>> with tempfile.TemporaryDirectory() as d:
...     trunk = load_mapped_trunk(write_random_llama(d + "/t", LlamaShape(2, 32, 2, 64, 8192),
...                                                  progress=False))
...     trunk.dtype, trunk.num_layers, len(trunk.model.__dict__["_worx_mapped"].files)
(torch.bfloat16, 2, 1)
"""

from __future__ import annotations

import contextlib
import logging
import mmap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from experts.store import SAFETENSORS_DTYPES
from experts.trunk import Trunk, TrunkError, frozen_trunk, trunk_fingerprint
from trainer.mmap_weights import read_header

log = logging.getLogger(__name__)


@dataclass
class _Mapping:
    file: Path
    view: mmap.mmap
    base: torch.Tensor  # (size,) uint8 over the whole file, no copy
    start: int = field(init=False)  # address of the mapping

    def __post_init__(self) -> None:
        self.start = self.base.data_ptr()


class MappedWeights:
    """The private file mappings a model's weights are views of, and page advice on them."""

    def __init__(self) -> None:
        self.files: list[_Mapping] = []
        self.mapped_bytes = 0

    def map(self, file: Path) -> torch.Tensor:
        with open(file, "rb") as handle:  # the mapping outlives the descriptor
            view = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        mapping = _Mapping(file, view, torch.frombuffer(view, dtype=torch.uint8))
        self.files.append(mapping)
        return mapping.base

    def _range(self, tensor: torch.Tensor) -> tuple[mmap.mmap, int, int] | None:
        """``(mapping, page-aligned offset, length)`` of ``tensor``'s bytes, or None if they are
        not (wholly) in one of these mappings."""
        begin = tensor.data_ptr()
        end = begin + tensor.numel() * tensor.element_size()
        for mapping in self.files:
            if mapping.start <= begin and end <= mapping.start + len(mapping.view):
                offset = begin - mapping.start
                aligned = offset - offset % mmap.PAGESIZE
                return mapping.view, aligned, end - mapping.start - aligned
        return None

    def read_ahead(self, tensor: torch.Tensor) -> None:
        """Ask the kernel to read ``tensor``'s pages into the page cache (asynchronously)."""
        found = self._range(tensor)
        if found is not None:
            view, offset, length = found
            view.madvise(mmap.MADV_WILLNEED, offset, length)

    def drop(self, tensor: torch.Tensor) -> None:
        """Unmap ``tensor``'s pages from the process (they stay valid: a touch re-reads them)."""
        found = self._range(tensor)
        if found is not None:
            view, offset, length = found
            view.madvise(mmap.MADV_DONTNEED, offset, length)


def _owners(model: nn.Module) -> dict[int, list[tuple[nn.Module, str, bool]]]:
    """Every (module, attribute, is_parameter) holding each tensor (tied tensors: several)."""
    owners: dict[int, list[tuple[nn.Module, str, bool]]] = {}
    for module in model.modules():
        for store, is_param in ((module._parameters, True), (module._buffers, False)):
            for attr, tensor in store.items():
                if tensor is not None:
                    owners.setdefault(id(tensor), []).append((module, attr, is_param))
    return owners


def map_stored_weights(model: nn.Module, model_dir: str | Path) -> MappedWeights:
    """Rebind every tensor of ``model`` stored in ``model_dir/*.safetensors`` to a view of its
    file, in the file's dtype (the copies the model held are released).

    Raises
    ------
    TrunkError
        If a stored tensor's shape differs from the model's, a tensor is not aligned to its
        dtype in the file, or a parameter of the model is in no file.
    """
    files = sorted(Path(model_dir).glob("*.safetensors"))
    named = dict(model.named_parameters(remove_duplicate=False))
    named.update(dict(model.named_buffers(remove_duplicate=False)))
    owners = _owners(model)
    mapped = MappedWeights()
    done: set[str] = set()
    for file in files:
        data_start, header = read_header(file)
        base = mapped.map(file)
        for name, info in header.items():
            target = named.get(name)
            if name == "__metadata__" or target is None:
                continue
            dtype = SAFETENSORS_DTYPES[info["dtype"]]
            begin, end = (data_start + offset for offset in info["data_offsets"])
            if tuple(info["shape"]) != tuple(target.shape):
                raise TrunkError(
                    f"{file.name}: {name} has shape {info['shape']}, the model "
                    f"{tuple(target.shape)}: the config does not match the weights"
                )
            if begin % torch.empty(0, dtype=dtype).element_size():
                raise TrunkError(f"{file.name}: {name} is not aligned to its dtype in the file")
            view = base[begin:end].view(dtype).view(info["shape"])  # file-backed, no copy
            holders = owners[id(target)]
            replacement = nn.Parameter(view, requires_grad=False) if holders[0][2] else view
            for module, attr, is_param in holders:
                (module._parameters if is_param else module._buffers)[attr] = replacement
            done.update(n for n, t in named.items() if t is target)
            mapped.mapped_bytes += end - begin
    missing = sorted(
        name for name, p in model.named_parameters(remove_duplicate=False) if name not in done
    )
    if missing:
        raise TrunkError(f"{model_dir} holds no weights for {missing[:5]} ({len(missing)} in all)")
    log.info("mapped %.2f GB of trunk weights from %d files", mapped.mapped_bytes / 1e9, len(files))
    return mapped


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Modules built inside get meta parameters (no memory); buffers stay real."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None:
            module._parameters[name] = nn.Parameter(param.to("meta"), param.requires_grad)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def load_mapped_trunk(path: str | Path) -> Trunk:
    """Open the trunk in ``path`` on the CPU with every weight a view of its file.

    The model is built with empty parameters and mapped (:func:`map_stored_weights`): its
    weights have the stored dtype and cost no process memory until touched. Raises
    :class:`~experts.trunk.TrunkError` as :func:`experts.trunk.load_trunk` does.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    root = Path(path)
    fingerprint = trunk_fingerprint(root)
    config = AutoConfig.from_pretrained(str(root), local_files_only=True)
    with _parameters_on_meta():
        model = AutoModelForCausalLM.from_config(config)
    model.__dict__["_worx_mapped"] = map_stored_weights(model, root)
    model.__dict__["_worx_mmapped"] = True
    return frozen_trunk(model, root, fingerprint)
