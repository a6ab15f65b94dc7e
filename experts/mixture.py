"""The mixture: ``mlp(x) + sum_k w_k * expert_k(x)`` in every chosen layer of a frozen trunk.

Weights are per sequence (``weights[b]`` maps ``expert_id -> w``; ``{}`` is "trunk only"), so
one batch may mix sequences routed to different experts. Each expert runs only on the rows
routed to it, so the cost of top-1 routing is the trunk's plus one small adapter per
chosen layer.

Mechanics: one forward hook per trunk MLP (installed once per trunk, shared by every
:class:`Mixture` on it) reads the routing *plan* of the forward in progress from a slot on
the trunk. A per-trunk re-entrant lock serialises forwards so concurrent requests cannot
see each other's plan. :meth:`Mixture.routing` keeps a plan active across a
``forward`` + ``backward`` (needed when the trainer recomputes activations in backward).
With no plan active the hooks change nothing, so ``trunk.model`` used directly is the trunk.

Example
-------
>>> mixture = Mixture(trunk, {"a": expert_a})  # doctest: +SKIP
>>> logits = mixture.forward(ids, weights=[{"a": 1.0}, {}])  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from experts.expert import Expert
from experts.trunk import Trunk

log = logging.getLogger(__name__)

Weights = list[dict[str, float]]


@dataclass(frozen=True)
class _Route:
    adapter: nn.Module
    rows: torch.Tensor | None  # (n,) batch rows using this expert; None: every row
    scale: torch.Tensor | None  # (n, 1, 1) weights of those rows; None: all exactly 1.0


class _TrunkHooks:
    """Hooks on every MLP of one trunk, and the slot holding the active plan."""

    def __init__(self, trunk: Trunk) -> None:
        self.lock = threading.RLock()
        self.plan: dict[int, list[_Route]] | None = None  # layer -> routes; None: trunk only
        self.handles = [
            trunk.mlp(layer).register_forward_hook(self._hook_for(layer))
            for layer in range(trunk.num_layers)
        ]

    def _hook_for(self, layer: int):
        def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor | None:
            plan = self.plan
            if not plan or layer not in plan:
                return None
            x = inputs[0]  # (B, T, d) the MLP's input
            out = output  # (B, T, d) the MLP's output
            # Inference: add in place into the MLP's fresh output tensor (read by nothing
            # else); with autograd on, out of place, so no saved tensor is ever modified.
            inplace = not torch.is_grad_enabled()
            for route in plan[layer]:
                xs = x if route.rows is None else x.index_select(0, route.rows)  # (n, T, d)
                param = next(route.adapter.parameters())
                delta = route.adapter(xs.to(param.dtype)).to(out.dtype)  # (n, T, d)
                if route.scale is not None:
                    delta = delta * route.scale
                if route.rows is None:
                    out = out.add_(delta) if inplace else out + delta
                else:
                    add = out.index_add_ if inplace else out.index_add
                    out = add(0, route.rows, delta)
            return out

        return hook


_HOOKS_LOCK = threading.Lock()


def _hooks(trunk: Trunk) -> _TrunkHooks:
    """The trunk's hooks, installed on first use (kept on the model object itself)."""
    with _HOOKS_LOCK:
        hooks = trunk.model.__dict__.get("_worx_hooks")
        if hooks is None:
            hooks = _TrunkHooks(trunk)
            trunk.model.__dict__["_worx_hooks"] = hooks
        return hooks


class Mixture:
    """A frozen trunk composed with experts keyed by ``expert_id``.

    Parameters
    ----------
    trunk : Trunk
        The frozen trunk (never modified, except for the forward hooks on its MLPs).
    experts : Mapping[str, Expert]
        ``expert_id -> Expert`` (a dict, or an immutable serving table that loads lazily).
        Looked up only for the ids a forward's weights name.
    """

    def __init__(self, trunk: Trunk, experts: Mapping[str, Expert]) -> None:
        self.trunk = trunk
        self.experts = experts
        self._hooks = _hooks(trunk)

    def plan(self, weights: Weights, batch: int, device: torch.device) -> dict[int, list[_Route]]:
        """Turn per-sequence weights into per-layer routes (experts in sorted id order).

        Raises
        ------
        KeyError
            If a weight names an expert that is not in this mixture.
        ValueError
            If ``len(weights) != batch`` or an expert's layers do not exist in the trunk.
        """
        if len(weights) != batch:
            raise ValueError(f"weights has {len(weights)} entries for a batch of {batch} sequences")
        rows: dict[str, list[tuple[int, float]]] = {}
        for b, mapping in enumerate(weights):
            for expert_id, w in mapping.items():
                if w != 0.0:
                    rows.setdefault(expert_id, []).append((b, float(w)))
        plan: dict[int, list[_Route]] = {}
        for expert_id in sorted(rows):
            if expert_id not in self.experts:
                raise KeyError(f"expert {expert_id!r} is not in this mixture")
            expert = self.experts[expert_id]
            if max(expert.config.layers) >= self.trunk.num_layers:
                raise ValueError(
                    f"expert {expert_id!r} has layers {expert.config.layers} beyond the trunk"
                )
            used = rows[expert_id]
            index = None
            if len(used) != batch:
                index = torch.tensor([b for b, _ in used], dtype=torch.long, device=device)  # (n,)
            scale = None
            if any(w != 1.0 for _, w in used):
                scale = torch.tensor(
                    [w for _, w in used], dtype=self.trunk.dtype, device=device
                ).view(-1, 1, 1)
            for layer in expert.config.layers:
                plan.setdefault(layer, []).append(_Route(expert.adapter(layer), index, scale))
        return plan

    @contextlib.contextmanager
    def routing(self, weights: Weights, batch: int | None = None) -> Iterator[None]:
        """Keep ``weights`` active on the trunk (and the trunk locked) inside the block.

        Wrap ``forward`` + ``backward`` in it when activations are recomputed in backward
        (activation checkpointing); :meth:`forward` alone activates the plan for its call.
        """
        plan = self.plan(weights, len(weights) if batch is None else batch, self.trunk.device)
        with self._hooks.lock:
            previous = self._hooks.plan
            self._hooks.plan = plan
            try:
                yield
            finally:
                self._hooks.plan = previous

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        weights: Weights | None = None,
    ) -> torch.Tensor:
        """Logits ``(B, T, V)`` of the trunk with each sequence's experts mixed in.

        ``weights=None`` means trunk only for every sequence.
        """
        batch = input_ids.shape[0]
        weights = [{} for _ in range(batch)] if weights is None else weights
        with self.routing(weights, batch):
            out = self.trunk.model(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            )
        return out.logits

    __call__ = forward

    def token_losses(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        weights: Weights | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Next-token cross-entropy of every position: ``(B, T-1)`` losses and ``(B, T-1)`` mask."""
        logits = self.forward(input_ids, attention_mask, weights)  # (B, T, V)
        targets = input_ids[:, 1:]  # (B, T-1)
        losses = F.cross_entropy(
            logits[:, :-1].transpose(1, 2).float(), targets, reduction="none"
        )  # (B, T-1)
        if attention_mask is None:
            mask = torch.ones_like(targets, dtype=losses.dtype)
        else:
            mask = (attention_mask[:, 1:] * attention_mask[:, :-1]).to(losses.dtype)  # (B, T-1)
        return losses * mask, mask

    def loss(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        weights: Weights | None = None,
    ) -> torch.Tensor:
        """Mean next-token loss of each sequence, ``(B,)`` (padding excluded)."""
        losses, mask = self.token_losses(input_ids, attention_mask, weights)
        return losses.sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)  # (B,)
