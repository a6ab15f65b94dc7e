"""Optimizers for the expert: fp32 AdamW or 8-bit AdamW (bitsandbytes), optionally offloaded.

8-bit states: ``bitsandbytes.optim.AdamW8bit`` keeps both Adam moments as blockwise-quantised
uint8 (about 2 bytes of state per parameter instead of 8), and runs on the CPU.

:class:`FlatOptimizer` steps all trainable tensors as one flat buffer (one optimizer call per
step) and, with ``host_offload``, keeps fp32 master weights and the optimizer state in host
memory: after backward it copies the (device) gradients to the host, steps there, and copies
the new weights back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch

log = logging.getLogger(__name__)

OPTIMIZERS = ("adamw8bit", "adamw")


def make_optimizer(
    params: Iterable[torch.nn.Parameter],
    kind: str,
    *,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
) -> torch.optim.Optimizer:
    """Build ``adamw8bit`` (bitsandbytes, all states 8-bit) or ``adamw`` (torch, fp32)."""
    params = list(params)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas)
    if kind == "adamw8bit":
        import bitsandbytes as bnb

        # min_8bit_size=0: quantise every state, even of the small adapter matrices
        return bnb.optim.AdamW8bit(
            params, lr=lr, weight_decay=weight_decay, betas=betas, min_8bit_size=0
        )
    raise ValueError(f"unknown optimizer {kind!r}: use one of {OPTIMIZERS}")


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes held in optimizer state tensors (moments, quantisation maps, step counters)."""
    seen: set[int] = set()
    total = 0
    for state in _inner(optimizer).state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.data_ptr() not in seen:
                seen.add(value.data_ptr())
                total += value.numel() * value.element_size()
    return total


def state_breakdown(optimizer: Any) -> dict[str, int]:
    """Bytes of optimizer state by kind of tensor (state name), shared tensors counted once."""
    seen: set[int] = set()
    out: dict[str, int] = {}
    for state in _inner(optimizer).state.values():
        for name, value in state.items():
            if isinstance(value, torch.Tensor) and value.data_ptr() not in seen:
                seen.add(value.data_ptr())
                out[name] = out.get(name, 0) + value.numel() * value.element_size()
    return out


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    return optimizer.inner if isinstance(optimizer, FlatOptimizer) else optimizer


def set_lr(optimizer: Any, lr: float) -> None:
    for group in _inner(optimizer).param_groups:
        group["lr"] = lr


class FlatOptimizer:
    """One optimizer over all trainable tensors flattened into a single fp32 buffer.

    Stepping one flat tensor instead of dozens of small adapter matrices removes the
    per-tensor overhead of the optimizer (large for bitsandbytes' 8-bit kernels on the CPU).

    With ``host_offload`` (for parameters on a GPU) the flat master weights and the optimizer
    state live in host memory: after backward the gradients are copied to the host, the step
    runs there, and the new weights are copied back. Without it the parameters become views
    of the flat buffer and are updated in place.

    Parameters
    ----------
    params : the trainable parameters (e.g. an expert's), in a fixed order.
    kind, lr, weight_decay : as for :func:`make_optimizer`.
    host_offload : keep master weights and state on the host (the parameters stay where they are).
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        kind: str,
        *,
        lr: float,
        weight_decay: float = 0.0,
        host_offload: bool = False,
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("no trainable parameters to optimize")
        self.host_offload = host_offload
        device = torch.device("cpu") if host_offload else self.params[0].device
        self.sizes = [p.numel() for p in self.params]
        flat = torch.cat([p.detach().reshape(-1).to(device, torch.float32) for p in self.params])
        if host_offload and torch.cuda.is_available():
            flat = flat.pin_memory()
        self.flat = torch.nn.Parameter(flat)  # (P,) master weights
        if not host_offload:
            for p, view in zip(self.params, self._views(self.flat.data), strict=True):
                if p.dtype != torch.float32:
                    raise ValueError("in-place flat optimization needs float32 parameters")
                p.data = view.view_as(p)  # the parameter is now a view of the flat buffer
        self.inner = make_optimizer([self.flat], kind, lr=lr, weight_decay=weight_decay)

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.split(flat, self.sizes))

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
        self.flat.grad = None

    @torch.no_grad()
    def step(self) -> None:
        grads = [
            torch.zeros_like(p).reshape(-1) if p.grad is None else p.grad.reshape(-1)
            for p in self.params
        ]
        self.flat.grad = torch.cat(grads).to(self.flat.device, torch.float32)  # (P,)
        del grads
        for p in self.params:
            p.grad = None  # held once, in the flat gradient, while the step's temporaries live
        self.inner.step()
        if self.host_offload:
            for p, view in zip(self.params, self._views(self.flat.data), strict=True):
                p.copy_(view.view_as(p).to(p.device, p.dtype, non_blocking=True))

    @torch.no_grad()
    def sync_from_params(self) -> None:
        """Copy the parameters into the flat master (after loading weights into them)."""
        if self.host_offload:
            for p, view in zip(self.params, self._views(self.flat.data), strict=True):
                view.copy_(p.reshape(-1).to(view.device, torch.float32))

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


# ---- state dict <-> (tensors, JSON) without pickle -------------------------------------


def flatten_state(value: Any, tensors: dict[str, torch.Tensor], path: str = "s") -> Any:
    """Replace every tensor in a nested state dict by ``{"__tensor__": key}`` and collect it.

    The result is JSON-able; ``tensors`` can be saved with safetensors.
    """
    if isinstance(value, torch.Tensor):
        key = path
        tensors[key] = value.detach().cpu().clone()  # own storage: states may share tensors
        return {"__tensor__": key}
    if isinstance(value, dict):
        return {
            "__dict__": [
                [_json_key(k), flatten_state(v, tensors, f"{path}.{k}")] for k, v in value.items()
            ]
        }
    if isinstance(value, tuple):
        return {
            "__tuple__": [flatten_state(v, tensors, f"{path}.{i}") for i, v in enumerate(value)]
        }
    if isinstance(value, list):
        return [flatten_state(v, tensors, f"{path}.{i}") for i, v in enumerate(value)]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(
        f"cannot checkpoint optimizer state value of type {type(value).__name__} at {path}"
    )


def unflatten_state(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`flatten_state`."""
    if isinstance(value, dict):
        if "__tensor__" in value:
            return tensors[value["__tensor__"]]
        if "__tuple__" in value:
            return tuple(unflatten_state(v, tensors) for v in value["__tuple__"])
        if "__dict__" in value:
            return {_from_json_key(k): unflatten_state(v, tensors) for k, v in value["__dict__"]}
        raise ValueError(f"malformed flattened optimizer state: {sorted(value)}")
    if isinstance(value, list):
        return [unflatten_state(v, tensors) for v in value]
    return value


def _json_key(key: Any) -> list[Any]:
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise TypeError(f"cannot checkpoint optimizer state key {key!r}")
    return ["i", key] if isinstance(key, int) else ["s", key]


def _from_json_key(key: list[Any]) -> Any:
    kind, raw = key
    return int(raw) if kind == "i" else str(raw)
