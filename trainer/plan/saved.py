"""The peak bytes of activations autograd holds, counted exactly (no allocator, no timing).

:class:`SavedBytes` is a ``torch.autograd.graph.saved_tensors_hooks`` pair: every tensor
autograd saves for backward is counted once per storage (a tensor saved twice costs its
memory once), parameters excluded, and released when the graph lets go of it (a weak
finaliser on the packed handle), so ``peak`` is the most activation memory alive at once,
in forward and in backward (recomputations included), independent of the machine's load.
Use it around forward *and* backward.

Example
-------
>>> import torch
>>> layer = torch.nn.Linear(8, 8)
>>> counter = SavedBytes(layer)
>>> with counter:
...     layer(torch.randn(4, 8, requires_grad=True)).relu().sum().backward()
>>> counter.peak, counter.live  # the input (4 x 8) and the relu output, float32
(256, 0)
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn


class _Packed:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class SavedBytes:
    """Live and peak bytes of the tensors autograd saves (parameters of ``model`` excluded)."""

    def __init__(self, model: nn.Module) -> None:
        self._own = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._refs: dict[int, list[int]] = {}  # storage address -> [bytes, handles alive]
        self.live = 0
        self.peak = 0
        self._hooks: Any = None

    def _pack(self, tensor: torch.Tensor) -> Any:
        storage = tensor.untyped_storage()
        address = storage.data_ptr()
        if address in self._own:
            return tensor
        entry = self._refs.get(address)
        if entry is None:
            self._refs[address] = [storage.nbytes(), 1]
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
        else:
            entry[1] += 1
        packed = _Packed(tensor)
        weakref.finalize(packed, self._release, address)
        return packed

    def _release(self, address: int) -> None:
        entry = self._refs[address]
        entry[1] -= 1
        if entry[1] == 0:
            self.live -= entry[0]
            del self._refs[address]

    @staticmethod
    def _unpack(packed: Any) -> torch.Tensor:
        return packed.tensor if isinstance(packed, _Packed) else packed

    def __enter__(self) -> SavedBytes:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
