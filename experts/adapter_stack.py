"""Several experts' adapters at one site as one pair of matrix products.

A decode step of the running batch carries one token per row, and its rows are routed to
many experts: applying each expert to its own rows costs two small products and a gather
and a scatter per expert and layer, which at ten experts took more of a step than the
trunk. For one token per row it is cheaper to run every row through all the experts of
the step at once, ``x (B, 1, d) -> (B, 1, E*r)``, zero each row's hidden units of the
experts it does not use (the row's weight for the ones it does), and map back with one
product ``(B, 1, E*r) -> (B, 1, d)``. For a prompt of many tokens that would be ``E``
times the adapters' work, so the mixture uses it for one-token forwards only.

The stacked weights of a set of adapters are built once and kept (the most recently used
sets, up to ``KEPT_BYTES``), keyed by the adapters' ids without holding them: an expert
the store's LRU evicted is freed (a key holding its adapters kept it, and its file's
mapping, alive outside the LRU's budget), and its sets are dropped at the next lookup, so
an id is never reused for another.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from experts.expert import Adapter

KEPT_BYTES = 256 * 2**20  # stacked weights kept, in all (the least recently used go first)


@dataclass(frozen=True)
class AdapterStack:
    """The adapters of ``E`` experts, rank ``r`` each, stacked (their own dtype)."""

    down_weight: torch.Tensor  # (E*r, d)
    down_bias: torch.Tensor  # (E*r,)
    up_weight: torch.Tensor  # (d, E*r)
    up_bias: torch.Tensor  # (E, d)
    act: nn.Module
    rank: int

    @property
    def nbytes(self) -> int:
        parts = (self.down_weight, self.down_bias, self.up_weight, self.up_bias)
        return sum(t.numel() * t.element_size() for t in parts)


_kept: OrderedDict[tuple[int, ...], AdapterStack | None] = OrderedDict()  # by id(adapter)
_kept_lock = threading.Lock()
_watched: set[int] = set()  # ids of the adapters in some key, each with a finalizer
# ids of adapters freed since the last lookup (a finalizer only appends: it may run in any
# thread, inside any allocation, even while _kept is being read)
_freed: deque[int] = deque()


def stackable(adapters: tuple[nn.Module, ...]) -> bool:
    """Can ``adapters`` run as one stack (two or more of one shape, activation and dtype)?"""
    if len(adapters) < 2 or not all(type(a) is Adapter for a in adapters):
        return False
    first = adapters[0]
    return all(
        a.down.out_features == first.down.out_features
        and a.down.in_features == first.down.in_features
        and type(a.act) is type(first.act)
        and a.down.weight.dtype == first.down.weight.dtype
        for a in adapters
    )


def stack_of(adapters: list[nn.Module]) -> AdapterStack | None:
    """The stacked weights of ``adapters``, built once per set; None when they cannot be
    stacked (fewer than two, or of different shapes, activations or dtypes)."""
    key = tuple(id(a) for a in adapters)
    with _kept_lock:
        _drop_freed()
        if key in _kept:
            _kept.move_to_end(key)
            return _kept[key]
    members = tuple(adapters)
    stack = _stacked(members) if stackable(members) else None
    with _kept_lock:
        for adapter in members:
            if id(adapter) not in _watched:
                _watched.add(id(adapter))
                weakref.finalize(adapter, _freed.append, id(adapter))
        _kept[key] = stack
        while len(_kept) > 1 and sum(s.nbytes for s in _kept.values() if s) > KEPT_BYTES:
            _kept.popitem(last=False)
    return stack


def _drop_freed() -> None:
    """Forget the sets of adapters freed since the last lookup (caller holds the lock)."""
    gone = set()
    while _freed:
        gone.add(_freed.popleft())
    if gone:
        for key in [k for k in _kept if gone.intersection(k)]:
            del _kept[key]
        _watched.difference_update(gone)


def _stacked(adapters: tuple[Adapter, ...]) -> AdapterStack:
    with torch.no_grad():
        return AdapterStack(
            down_weight=torch.cat([a.down.weight for a in adapters]),
            down_bias=torch.cat([a.down.bias for a in adapters]),
            up_weight=torch.cat([a.up.weight for a in adapters], dim=1),
            up_bias=torch.stack([a.up.bias for a in adapters]),
            act=adapters[0].act,
            rank=adapters[0].down.out_features,
        )


@dataclass(frozen=True)
class StackedRows:
    """One forward's rows over a stack: what each row takes of each expert."""

    stack: AdapterStack
    gate: torch.Tensor  # (B, 1, E*r) each row's weight of each expert, per hidden unit
    bias: torch.Tensor  # (B, 1, d) the rows' weighted sums of the experts' output biases


def rows_of(stack: AdapterStack, row_weights: torch.Tensor) -> StackedRows:
    """``row_weights (B, E)`` (0 where a row does not use an expert) over ``stack``."""
    weights = row_weights.to(stack.up_weight.dtype)
    gate = weights.repeat_interleave(stack.rank, dim=1)[:, None, :]  # (B, 1, E*r)
    return StackedRows(stack, gate, (weights @ stack.up_bias)[:, None, :])


class PendingStack:
    """A layer's stack of one plan, built (:func:`stack_of`) at the first one-token forward
    that asks for it, never for a forward of several tokens per row (prefill, scoring,
    training), which takes each expert's own route: those forwards built stacks they never
    used, and a process that only scores (the monitor) held up to ``KEPT_BYTES`` of them
    and fragmented its heap with their churn."""

    def __init__(
        self, adapters: list[nn.Module], row_weights: list[list[float]], device: torch.device
    ) -> None:
        self.adapters = adapters
        self.row_weights = row_weights  # (B, E) as lists: a tensor only if it is built
        self.device = device
        self._rows: StackedRows | None = None
        self._built = False

    def rows(self) -> StackedRows | None:
        """The plan's rows over the stack; None when the adapters cannot be stacked."""
        if not self._built:
            stack = stack_of(self.adapters)
            if stack is not None:
                weights = torch.tensor(self.row_weights, device=self.device)  # (B, E)
                self._rows = rows_of(stack, weights)
            self._built = True
        return self._rows


def apply_stack(rows: StackedRows, x: torch.Tensor) -> torch.Tensor:
    """``sum_e row_weights[b, e] * adapter_e(x[b])``: ``x (B, T, d)`` -> ``(B, T, d)``."""
    stack = rows.stack
    xs = x.to(stack.down_weight.dtype)
    hidden = stack.act(F.linear(xs, stack.down_weight, stack.down_bias))  # (B, T, E*r)
    return F.linear(hidden * rows.gate, stack.up_weight) + rows.bias  # (B, T, d)
