"""Function-preserving growth of an expert: more rank, more layers, more vocabulary parts.

:func:`grow` returns a new expert of a larger shape (``target``) that computes exactly the
parent's function: every part the parent has is copied into the grown one, and every new
part (extra bottleneck units, an adapter in a new layer, extra rank of a vocabulary delta, a
logit bias) is exactly zero where it meets the trunk, as a fresh expert's parts are. So the
grown expert's outputs are bit-identical to the parent's at step 0, and training continues
from the parent instead of restarting. The parent is never modified.

What grows (each ``>=`` the parent's; equal is allowed):

* adapters: ``rank`` (extra units of ``down`` freshly initialised, their columns of ``up``
  zero) and ``layers`` (a superset: new layers get zero-initialised adapters);
* ``output_rank`` (extra rows of ``down`` fresh, extra columns of ``up`` zero),
  ``logit_bias`` (added as zeros), ``token_rank`` (extra columns of ``embed`` fresh, extra
  rows of ``proj`` zero; a token delta added from nothing sits where ``target`` says);
* ``kind``: to a kind whose parts are a superset (``adapter`` or ``vocab`` to
  ``vocab_adapter``).

Refused with :class:`~experts.expert.ExpertConfigError`: any shrinking (a smaller rank,
dropped layers or parts), a kind that is not a superset, another activation, another
vocabulary size, or moving an existing token delta to another block or site.

:func:`union_config` is the shape a start from ``parent`` takes when a job is configured for
``configured``: the larger of the two in every dimension.

Example
-------
>>> import torch
>>> parent = Expert(ExpertConfig(kind="adapter", layers=(1,), rank=2), hidden_size=8)
>>> grown = grow(parent, ExpertConfig(kind="adapter", layers=(0, 1), rank=4))
>>> grown.config.rank, sorted(grown.adapters)
(4, ['0', '1'])
>>> x = torch.randn(1, 3, 8)
>>> bool(torch.equal(grown.adapter(1)(x), parent.adapter(1)(x)))
True
"""

from __future__ import annotations

import dataclasses

import torch

from experts.expert import Expert, ExpertConfig, ExpertConfigError

# kind -> the kinds whose parts are a superset of its own
_SUPERSETS = {
    "adapter": ("adapter", "vocab_adapter"),
    "vocab": ("vocab", "vocab_adapter"),
    "vocab_adapter": ("vocab_adapter",),
}


def check_growable(parent: ExpertConfig, target: ExpertConfig) -> None:
    """Raise :class:`ExpertConfigError` unless ``target`` is ``parent`` grown (never shrunk)."""
    if target.kind not in _SUPERSETS[parent.kind]:
        raise ExpertConfigError(
            f"cannot grow an expert of kind {parent.kind!r} into kind {target.kind!r}: "
            f"its parts are not a superset (growable into {list(_SUPERSETS[parent.kind])})"
        )
    if parent.layers:
        if target.activation != parent.activation:
            raise ExpertConfigError(
                f"cannot grow an expert with activation {parent.activation!r} into "
                f"{target.activation!r}: the existing adapters would compute another function"
            )
        dropped = sorted(set(parent.layers) - set(target.layers))
        if dropped:
            raise ExpertConfigError(f"cannot grow an expert by dropping its layers {dropped}")
        if target.rank < parent.rank:
            raise ExpertConfigError(
                f"cannot shrink an expert's adapter rank from {parent.rank} to {target.rank}"
            )
    if parent.kind == "adapter":
        return
    if target.vocab_size != parent.vocab_size:
        raise ExpertConfigError(
            f"cannot grow an expert of vocabulary size {parent.vocab_size} into "
            f"{target.vocab_size}: it belongs to another trunk"
        )
    for name in ("output_rank", "token_rank"):
        if getattr(target, name) < getattr(parent, name):
            raise ExpertConfigError(
                f"cannot shrink an expert's {name} from {getattr(parent, name)} to "
                f"{getattr(target, name)}"
            )
    if parent.logit_bias and not target.logit_bias:
        raise ExpertConfigError("cannot grow an expert by dropping its logit bias")
    moved = (target.token_layer, target.token_site) != (parent.token_layer, parent.token_site)
    if parent.token_rank and moved:
        raise ExpertConfigError(
            f"cannot move an expert's token delta from block {parent.token_layer} "
            f"({parent.token_site}) to block {target.token_layer} ({target.token_site})"
        )


def union_config(parent: ExpertConfig, configured: ExpertConfig) -> ExpertConfig:
    """The larger of ``parent`` and ``configured`` in every dimension (``parent`` grown).

    The parent's activation, vocabulary size and token-delta site are kept (growth cannot
    change them); where ``configured`` is smaller, the parent's shape stays.
    """
    kind = parent.kind if parent.kind == configured.kind else "vocab_adapter"
    has_adapters = kind != "vocab"
    layers = tuple(sorted(set(parent.layers) | set(configured.layers))) if has_adapters else ()
    rank = max(parent.rank, configured.rank) if has_adapters else 0
    activation = parent.activation if parent.layers else configured.activation
    if kind == "adapter":
        return ExpertConfig(kind="adapter", layers=layers, rank=rank, activation=activation)
    vocab_from = parent if parent.kind != "adapter" else configured
    token_from = parent if parent.token_rank else configured
    return ExpertConfig(
        layers=layers,
        rank=rank,
        activation=activation,
        kind=kind,
        vocab_size=vocab_from.vocab_size,
        output_rank=max(parent.output_rank, configured.output_rank),
        token_rank=max(parent.token_rank, configured.token_rank),
        token_layer=token_from.token_layer,
        token_site=token_from.token_site,
        logit_bias=parent.logit_bias or configured.logit_bias,
    )


def scaled_config(parent: ExpertConfig, factor: int, max_rank: int) -> ExpertConfig:
    """``parent`` with every rank it has multiplied by ``factor`` (each capped at ``max_rank``,
    never below the parent's own)."""
    if factor < 1:
        raise ExpertConfigError(f"a growth factor must be >= 1, got {factor}")

    def scaled(rank: int) -> int:
        return max(rank, min(rank * factor, max_rank)) if rank else 0

    return dataclasses.replace(
        parent,
        rank=scaled(parent.rank),
        output_rank=scaled(parent.output_rank),
        token_rank=scaled(parent.token_rank),
    )


def growth_record(parent: ExpertConfig, grown: ExpertConfig) -> dict:
    """What changed from ``parent`` to ``grown`` (for the manifest/summary): {} if nothing."""
    before, after = parent.to_dict(), grown.to_dict()
    changed = {k: [before.get(k), after[k]] for k in after if before.get(k) != after[k]}
    return changed


@torch.no_grad()
def grow(expert: Expert, target: ExpertConfig) -> Expert:
    """A new expert of shape ``target`` computing exactly ``expert``'s function.

    The result is trainable (``requires_grad``) and on ``expert``'s device and dtype;
    ``expert`` is not modified.

    Raises
    ------
    ExpertConfigError
        If ``target`` is not ``expert``'s shape grown (see :func:`check_growable`).
    """
    parent = expert.config
    check_growable(parent, target)
    params = list(expert.parameters())
    device = params[0].device if params else torch.device("cpu")
    dtype = params[0].dtype if params else torch.float32
    grown = Expert(target, expert.hidden_size).to(device=device, dtype=dtype)
    for layer in parent.layers:
        old, new = expert.adapter(layer), grown.adapter(layer)
        r = parent.rank
        new.down.weight[:r].copy_(old.down.weight)  # (R, d): the first r units are the parent's
        new.down.bias[:r].copy_(old.down.bias)
        new.up.weight.zero_()
        new.up.weight[:, :r].copy_(old.up.weight)  # (d, R): new units' columns stay 0
        new.up.bias.copy_(old.up.bias)
    # adapters of new layers are zero where they meet the trunk already (Adapter.__init__)
    if expert.output is not None:
        old, new = expert.output, grown.output
        r = old.rank
        if r:
            new.down.weight[:r].copy_(old.down.weight)  # (R, d)
            new.up.weight.zero_()
            new.up.weight[:, :r].copy_(old.up.weight)  # (V, R): new rank columns stay 0
        if new.bias is not None:
            new.bias.zero_()
            if old.bias is not None:
                new.bias.copy_(old.bias)
    if expert.tokens is not None:
        old, new = expert.tokens, grown.tokens
        r = parent.token_rank
        new.embed[:, :r].copy_(old.embed)  # (V, R)
        new.proj.zero_()
        new.proj[:r].copy_(old.proj)  # (R, d): new rank rows stay 0
    return grown.requires_grad_(True)
