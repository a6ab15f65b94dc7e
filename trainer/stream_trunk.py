"""Stream a memory-mapped trunk through the process one weight at a time (``trainer.stream_trunk``).

Inside :func:`streamed_weights`, every trunk parameter is read through a parametrization
(``torch.nn.utils.parametrize``): ``module.weight`` is a fresh copy of the mapped tensor in
the compute dtype (float32: the CPU's bf16 matrix products are slow without AVX-512 BF16,
and a bf16 file loaded as float32 would double its size), made when the module runs, and
the mapped pages it was read from are dropped from the process right after
(:meth:`~trainer.mapped_trunk.MappedWeights.drop`). The next ``read_ahead`` blocks, in the
direction the pass is going (up in forward, down in backward), are read into the page cache
meanwhile. So the process holds the file pages of one tensor, the float32 copy each module
uses while it runs and, for the blocks the gradient passes through, the copies autograd
keeps for backward: with activation checkpointing, one block's at a time (recomputation goes
through the parametrizations too). The weights on disk and in the mapping never change.

Example (a trunk opened by :func:`trainer.mapped_trunk.load_mapped_trunk`)::

    with streamed_weights(trunk, read_ahead=2):
        loss = mixture.loss(ids, mask, weights).mean()
        loss.backward()
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn.utils import parametrize

from experts.trunk import Trunk
from trainer.mapped_trunk import MappedWeights

log = logging.getLogger(__name__)


class _Streamer:
    """Which block is running, and the page advice that follows from it."""

    def __init__(self, mapped: MappedWeights, blocks: list[list[torch.Tensor]], ahead: int) -> None:
        self.mapped = mapped
        self.blocks = blocks  # each block's mapped tensors
        self.ahead = ahead
        self.last: int | None = None
        self.copied_bytes = 0  # stored bytes read into compute copies

    def enter(self, layer: int | None) -> None:
        if layer is None or layer == self.last:
            return
        step = 1 if self.last is None or layer > self.last else -1
        self.last = layer
        for other in range(layer + step, layer + step * (self.ahead + 1), step):
            if 0 <= other < len(self.blocks):
                for tensor in self.blocks[other]:
                    self.mapped.read_ahead(tensor)


class _ComputeCopy(nn.Module):
    """``stored -> stored.to(dtype)`` (a copy), then the stored pages leave the process."""

    def __init__(self, streamer: _Streamer, layer: int | None, dtype: torch.dtype) -> None:
        super().__init__()
        self.streamer, self.layer, self.dtype = streamer, layer, dtype

    def forward(self, stored: torch.Tensor) -> torch.Tensor:
        self.streamer.enter(self.layer)
        copy = stored.to(self.dtype, copy=True)
        self.streamer.mapped.drop(stored)
        self.streamer.copied_bytes += stored.numel() * stored.element_size()
        return copy


@contextlib.contextmanager
def streamed_weights(
    trunk: Trunk, read_ahead: int = 2, dtype: torch.dtype = torch.float32
) -> Iterator[_Streamer]:
    """Inside the block, ``trunk``'s mapped weights stream through the process (see above).

    ``trunk`` must be mapped by :func:`trainer.mapped_trunk.map_stored_weights` (its model
    carries the :class:`MappedWeights`). The parametrizations are removed on exit; the
    parameters are then the mapped tensors again.

    Raises
    ------
    ValueError
        If the trunk's weights are not mapped by this project's mapper.
    """
    mapped = trunk.model.__dict__.get("_worx_mapped")
    if not isinstance(mapped, MappedWeights):
        raise ValueError(
            "streaming needs a trunk mapped by trainer.mapped_trunk "
            "(load_mapped_trunk, or prepare_trunk with trainer.stream_trunk on)"
        )
    layer_of = {id(m): i for i, block in enumerate(trunk.blocks()) for m in block.modules()}
    blocks: list[list[torch.Tensor]] = [[] for _ in range(trunk.num_layers)]
    streamer = _Streamer(mapped, blocks, read_ahead)
    installed: list[tuple[nn.Module, str]] = []
    seen: set[int] = set()
    try:
        for module in list(trunk.model.modules()):
            for name, param in list(module._parameters.items()):
                if param is None or not param.is_floating_point():
                    continue
                layer = layer_of.get(id(module))
                if layer is not None and id(param) not in seen:  # tied: read ahead once
                    blocks[layer].append(param)
                seen.add(id(param))
                copy = _ComputeCopy(streamer, layer, dtype)
                parametrize.register_parametrization(module, name, copy, unsafe=True)
                installed.append((module, name))
        yield streamer
    finally:
        for module, name in reversed(installed):
            parametrize.remove_parametrizations(module, name, leave_parametrized=False)
        log.info("streamed %.2f GB of trunk weights", streamer.copied_bytes / 1e9)
