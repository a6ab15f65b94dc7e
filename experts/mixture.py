"""The mixture: ``mlp(x) + sum_k w_k * expert_k(x)`` in every chosen layer of a frozen trunk.

Weights are per sequence (``weights[b]`` maps ``expert_id -> w``; ``{}`` is "trunk only"), so
one batch may mix sequences routed to different experts. Each expert runs only on the rows
routed to it, so the cost of top-1 routing is the trunk's plus one small expert.

An expert's parts meet the trunk at three kinds of site, each scaled by the row's weight:

* ``("mlp", l)``: an adapter's output is added to the output of block ``l``'s MLP;
* ``("tokens", l)``: a token-embedding delta (of the forward's input ids) is added to the
  hidden states entering block ``l`` (``l = 0``: to the embeddings);
* ``("mlp_tokens", l)``: a token-embedding delta is added to block ``l``'s MLP output;
* ``("output", -1)``: an output delta is added to the logits.

Where two or more experts have adapters at one layer, the plan also holds them stacked
(``("mlp_stack", l)``, :mod:`experts.adapter_stack`): a forward of one token per row (a
decode step of the running batch) applies them with one pair of products instead of one
pair per expert. The stack is built by the first such forward, never by a forward of several
tokens per row (scoring, prefill, training), which does not use it.

Mechanics: hooks on every trunk MLP, block and on the output layer (installed once per
trunk, shared by every :class:`Mixture` on it) read the routing *plan* of the forward in
progress; a hook on the input embedding records the forward's input ids for the token
sites. An inference forward (no autograd) keeps its plan and ids in its own thread, so
concurrent requests never see each other's plan and run side by side; a forward with
autograd keeps them on the trunk under a per-trunk re-entrant lock, which serialises
those. :meth:`Mixture.routing` keeps a plan
active across a ``forward`` + ``backward`` (needed when the trainer recomputes activations
in backward). With no plan active the hooks change nothing, so ``trunk.model`` used
directly is the trunk.

Example
-------
>>> mixture = Mixture(trunk, {"a": expert_a})  # doctest: +SKIP
>>> logits = mixture.forward(ids, weights=[{"a": 1.0}, {}])  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from experts.adapter_stack import PendingStack, apply_stack, stackable
from experts.expert import Expert
from experts.trunk import Trunk

log = logging.getLogger(__name__)

Weights = list[dict[str, float]]


IGNORED = -100  # F.cross_entropy's ignore_index: a position whose loss is 0
LOSS_CHUNK_ROWS = 256  # (row, position) pairs through the output layer at once, chunked

Site = tuple[str, int]  # ("mlp" | "mlp_stack" | "tokens" | "mlp_tokens", layer) | ("output", -1)
OUTPUT: Site = ("output", -1)


@dataclass(frozen=True)
class _Route:
    module: nn.Module  # the expert's part at this site
    rows: torch.Tensor | None  # (n,) batch rows using this expert; None: every row
    scale: torch.Tensor | None  # (n, 1, 1) weights of those rows; None: all exactly 1.0


def _apply(routes: list[_Route], source: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out`` plus each route's part applied to its rows of ``source`` (both ``(B, T, ...)``).

    Inference adds in place into ``out`` (a fresh tensor the caller owns); with autograd on,
    out of place, so no saved tensor is ever modified.
    """
    inplace = not torch.is_grad_enabled()
    for route in routes:
        xs = source if route.rows is None else source.index_select(0, route.rows)  # (n, T, .)
        if xs.is_floating_point():
            xs = xs.to(next(route.module.parameters()).dtype)
        delta = route.module(xs).to(out.dtype)  # (n, T, d) or (n, T, V)
        if route.scale is not None:
            delta = delta * route.scale
        if route.rows is None:
            out = out.add_(delta) if inplace else out + delta
        else:
            add = out.index_add_ if inplace else out.index_add
            out = add(0, route.rows, delta)
    return out


Plan = dict[Site, list[_Route] | PendingStack]


class _ThreadPlan(threading.local):
    """One thread's own plan, active while ``own`` (its inference forwards)."""

    own = False
    plan: Plan | None = None
    input_ids: torch.Tensor | None = None  # (B, T) of its forward in progress


class _TrunkHooks:
    """Hooks on every MLP and block of one trunk and on its output layer; the active plan.

    A forward without autograd runs on its own thread's plan, so inference forwards on one
    trunk run side by side. A forward with autograd runs on the shared plan, under the
    lock: its backward may recompute it on another thread (a GPU's autograd thread).
    """

    def __init__(self, trunk: Trunk) -> None:
        self.lock = threading.RLock()
        self.shared_plan: Plan | None = None  # None: trunk only
        self.shared_ids: torch.Tensor | None = None  # (B, T) of the forward in progress
        self.thread = _ThreadPlan()
        model = trunk.model
        self.handles = [
            model.get_input_embeddings().register_forward_hook(self._record_ids),
            model.get_output_embeddings().register_forward_hook(self._output_hook),
        ]
        for layer, block in enumerate(trunk.blocks()):
            self.handles.append(trunk.mlp(layer).register_forward_hook(self._mlp_hook(layer)))
            self.handles.append(
                block.register_forward_pre_hook(self._tokens_hook(layer), with_kwargs=True)
            )

    @property
    def plan(self) -> Plan | None:
        return self.thread.plan if self.thread.own else self.shared_plan

    def _ids(self) -> torch.Tensor:
        ids = self.thread.input_ids if self.thread.own else self.shared_ids
        if ids is None:
            raise RuntimeError("a token-embedding delta needs the forward's input ids")
        return ids  # (B, T)

    def _record_ids(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if not self.plan:
            return
        if self.thread.own:
            self.thread.input_ids = inputs[0]
        else:
            self.shared_ids = inputs[0]

    def _output_hook(self, module: nn.Module, inputs: tuple, output: torch.Tensor):
        plan = self.plan
        if not plan or OUTPUT not in plan:
            return None
        return _apply(plan[OUTPUT], inputs[0], output)  # (B, T, d) -> logits (B, T, V)

    def _mlp_hook(self, layer: int):
        def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor | None:
            plan = self.plan
            if not plan:
                return None
            adapters, tokens = plan.get(("mlp", layer)), plan.get(("mlp_tokens", layer))
            pending = plan.get(("mlp_stack", layer))
            stacked = None
            if pending is not None and inputs[0].shape[1] == 1:  # one token per row: built now
                stacked = pending.rows()
            if stacked is not None:
                delta = apply_stack(stacked, inputs[0])  # (B, 1, d)
                delta = delta.to(output.dtype)
                output = output.add_(delta) if not torch.is_grad_enabled() else output + delta
            elif adapters:
                output = _apply(adapters, inputs[0], output)  # (B, T, d)
            if tokens:
                output = _apply(tokens, self._ids(), output)  # (B, T, d)
            return output if adapters or tokens else None

        return hook

    def _tokens_hook(self, layer: int):
        def hook(module: nn.Module, args: tuple, kwargs: dict):
            plan = self.plan
            if not plan or ("tokens", layer) not in plan:
                return None
            ids = self._ids()
            if args:
                hidden = args[0]  # (B, T, d) entering the block
            else:
                hidden = kwargs["hidden_states"]
            # never in place: the block keeps its input as the residual
            hidden = _apply_out_of_place(plan[("tokens", layer)], ids, hidden)
            if args:
                return (hidden, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": hidden}

        return hook


def _apply_out_of_place(
    routes: list[_Route], ids: torch.Tensor, hidden: torch.Tensor
) -> torch.Tensor:
    """``hidden + sum`` of each route's token delta of its rows' ``ids`` (a new tensor)."""
    out = hidden.clone() if not torch.is_grad_enabled() else hidden
    return _apply(routes, ids, out)


_HOOKS_LOCK = threading.Lock()


def _hooks(trunk: Trunk) -> _TrunkHooks:
    """The trunk's hooks, installed on first use (kept on the model object itself)."""
    with _HOOKS_LOCK:
        hooks = trunk.model.__dict__.get("_worx_hooks")
        if hooks is None:
            hooks = _TrunkHooks(trunk)
            trunk.model.__dict__["_worx_hooks"] = hooks
        return hooks


def expert_sites(expert: Expert) -> list[tuple[Site, nn.Module]]:
    """Where each part of ``expert`` meets the trunk."""
    sites: list[tuple[Site, nn.Module]] = [
        (("mlp", layer), expert.adapter(layer)) for layer in expert.config.layers
    ]
    if expert.tokens is not None:
        sites.append((expert.config.token_site_key, expert.tokens))
    if expert.output is not None:
        sites.append((OUTPUT, expert.output))
    return sites


class Mixture:
    """A frozen trunk composed with experts keyed by ``expert_id``.

    Parameters
    ----------
    trunk : Trunk
        The frozen trunk (never modified, except for the forward hooks described above).
    experts : Mapping[str, Expert]
        ``expert_id -> Expert`` (a dict, or an immutable serving table that loads lazily).
        Looked up only for the ids a forward's weights name.
    """

    def __init__(self, trunk: Trunk, experts: Mapping[str, Expert]) -> None:
        self.trunk = trunk
        self.experts = experts
        self._hooks = _hooks(trunk)

    def plan(
        self, weights: Weights, batch: int, device: torch.device
    ) -> dict[Site, list[_Route] | PendingStack]:
        """Turn per-sequence weights into per-site routes (experts in sorted id order).

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
        plan: dict[Site, list[_Route]] = {}
        for expert_id in sorted(rows):
            if expert_id not in self.experts:
                raise KeyError(f"expert {expert_id!r} is not in this mixture")
            expert = self.experts[expert_id]
            try:
                expert.config.validate(self.trunk.num_layers)
            except ValueError as exc:
                raise ValueError(f"expert {expert_id!r} reaches beyond the trunk: {exc}") from exc
            used = rows[expert_id]
            index = None
            if len(used) != batch:
                index = torch.tensor([b for b, _ in used], dtype=torch.long, device=device)  # (n,)
            scale = None
            if any(w != 1.0 for _, w in used):
                scale = torch.tensor(
                    [w for _, w in used], dtype=self.trunk.dtype, device=device
                ).view(-1, 1, 1)
            for site, part in expert_sites(expert):
                plan.setdefault(site, []).append(_Route(part, index, scale))
        self._stack(plan, sorted(rows), weights, device)
        return plan

    def _stack(
        self, plan: dict, expert_ids: list[str], weights: Weights, device: torch.device
    ) -> None:
        """Add each layer's stacked adapters to ``plan`` where two or more experts have one
        there (the experts in ``expert_ids`` order, as their routes are); the stack itself is
        built only by a one-token forward (:class:`experts.adapter_stack.PendingStack`)."""
        if len(expert_ids) < 2:
            return
        for layer in range(self.trunk.num_layers):
            users = [e for e in expert_ids if layer in self.experts[e].config.layers]
            adapters = [self.experts[e].adapter(layer) for e in users]
            if not stackable(tuple(adapters)):
                continue
            row_weights = [[float(mapping.get(e, 0.0)) for e in users] for mapping in weights]
            plan[("mlp_stack", layer)] = PendingStack(adapters, row_weights, device)

    @contextlib.contextmanager
    def routing(
        self, weights: Weights, batch: int | None = None, plan: Plan | None = None
    ) -> Iterator[None]:
        """Keep ``weights`` active inside the block: in this thread alone when autograd is
        off, else on the trunk, locked. ``plan``: ``self.plan(weights, ...)`` made before
        (a running batch reuses its rows' plan, and its stacks, while the rows stay).

        Wrap ``forward`` + ``backward`` in it when activations are recomputed in backward
        (activation checkpointing); :meth:`forward` alone activates the plan for its call.
        """
        if plan is None:
            plan = self.plan(weights, len(weights) if batch is None else batch, self.trunk.device)
        hooks = self._hooks
        if not torch.is_grad_enabled():
            mine = hooks.thread
            before = (mine.own, mine.plan, mine.input_ids)
            mine.own, mine.plan = True, plan
            try:
                yield
            finally:
                mine.own, mine.plan, mine.input_ids = before
            return
        with hooks.lock:
            previous, was_own = hooks.shared_plan, hooks.thread.own
            hooks.shared_plan, hooks.thread.own = plan, False  # inside an inference block too
            try:
                yield
            finally:
                hooks.shared_plan, hooks.thread.own = previous, was_own
                # a nested block (the trainer's forward inside its forward + backward) leaves
                # the ids of its forward for the recomputation in backward; every forward
                # records its own ids before any block reads them
                if previous is None:
                    hooks.shared_ids = None

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
        return next_token_losses(logits, input_ids, attention_mask)

    def hidden(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        weights: Weights | None = None,
    ) -> torch.Tensor:
        """Final hidden states ``(B, T, d)`` (after the final norm: the output layer's
        input) of the trunk with each sequence's experts mixed in."""
        batch = input_ids.shape[0]
        weights = [{} for _ in range(batch)] if weights is None else weights
        with self.routing(weights, batch):
            return self._body(input_ids, attention_mask)

    def _body(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        body = self.trunk.model.base_model  # GPT-2: .transformer, Llama: .model
        out = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return out.last_hidden_state  # (B, T, d)

    def token_losses_chunked(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        weights: Weights,
        keep_logits: Sequence[int] = (),
        chunk: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`token_losses`' losses ``(B, T-1)`` (0 at padding) without the whole
        ``(B, T, V)`` logits: the output layer runs ``chunk`` positions at a time (of every
        row, so the output parts' rows stay those of the batch; by default
        ``LOSS_CHUNK_ROWS // B``: a few MiB of logits, where a batch's whole logits, 134 MB
        at 16 rows of the bundled trunk, made scoring memory-bound); the logits of the rows
        ``keep_logits`` are kept, ``(k, T, V)`` (None when none are asked for)."""
        batch, length = input_ids.shape
        chunk = chunk or max(1, LOSS_CHUNK_ROWS // batch)
        head = self.trunk.model.get_output_embeddings()
        targets = _next_tokens(input_ids)  # (B, T)
        losses = torch.empty((batch, length), dtype=torch.float32, device=input_ids.device)
        kept = None
        keep = torch.tensor(list(keep_logits), dtype=torch.long, device=input_ids.device)
        with self.routing(weights, batch):
            hidden = self._body(input_ids, attention_mask)  # (B, T, d)
            for start in range(0, length, chunk):
                end = min(length, start + chunk)
                logits = head(hidden[:, start:end])  # (B, c, V)
                losses[:, start:end] = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]).float(),
                    targets[:, start:end].reshape(-1),
                    reduction="none",
                ).view(batch, end - start)
                if keep.numel():
                    if kept is None:
                        kept = logits.new_empty((keep.numel(), length, logits.shape[-1]))
                    kept[:, start:end] = logits.index_select(0, keep)
        losses = losses[:, :-1]  # (B, T-1)
        if attention_mask is not None:
            losses = losses * _predicted(attention_mask, losses.dtype)
        return losses, kept

    def loss(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        weights: Weights | None = None,
    ) -> torch.Tensor:
        """Mean next-token loss of each sequence, ``(B,)`` (padding excluded)."""
        losses, mask = self.token_losses(input_ids, attention_mask, weights)
        return losses.sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)  # (B,)


def next_token_losses(
    logits: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token cross-entropy of ``logits (B, T, V)`` against ``input_ids (B, T)``:
    ``(B, T-1)`` losses (0 at padding) and ``(B, T-1)`` mask."""
    batch, length, vocab = logits.shape
    # on the logits' own (B*T, V) rows: cross_entropy over a (B, V, T-1) view or a copy of
    # the first T-1 positions was 2-3x slower on a CPU (memory-bound over V)
    losses = F.cross_entropy(
        logits.reshape(batch * length, vocab).float(),
        _next_tokens(input_ids).view(-1),
        reduction="none",
    ).view(batch, length)[:, :-1]  # (B, T-1)
    if attention_mask is None:
        mask = torch.ones_like(losses)
    else:
        mask = _predicted(attention_mask, losses.dtype)
    return losses * mask, mask


def _next_tokens(input_ids: torch.Tensor) -> torch.Tensor:
    """``(B, T)``: each position's next token, the last position's ``IGNORED`` (none)."""
    targets = input_ids.new_full(input_ids.shape, IGNORED)
    targets[:, :-1] = input_ids[:, 1:]
    return targets


def _predicted(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(B, T-1)``: 1 where a real token predicts a real next token, else 0."""
    return (attention_mask[:, 1:] * attention_mask[:, :-1]).to(dtype)
