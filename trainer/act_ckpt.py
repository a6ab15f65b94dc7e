"""Activation checkpointing of the trunk blocks the gradient must pass through.

The expert sits in layers ``L``; the loss's gradient flows back from the top of the trunk to
the lowest expert layer ``min(L)``. Blocks below it need no backward at all (nothing there
requires grad, so autograd records nothing); blocks from ``min(L)`` up are wrapped so that
their activations are recomputed in backward instead of kept (non-reentrant checkpoint,
which also recomputes the expert's adapters through the mixture hooks: the mixture's routing
plan must stay active across backward, see ``Mixture.routing``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence

from torch import nn
from torch.utils.checkpoint import checkpoint


@contextlib.contextmanager
def checkpointed_blocks(
    blocks: Sequence[nn.Module], first: int, enabled: bool = True
) -> Iterator[int]:
    """Inside the block, ``blocks[first:]`` recompute their activations in backward.

    Yields the number of blocks wrapped. The blocks' original ``forward`` is restored on exit.
    """
    if not enabled:
        yield 0
        return
    wrapped: list[nn.Module] = []
    try:
        for block in blocks[first:]:
            original = block.forward

            @functools.wraps(original)
            def forward(*args, _original=original, **kwargs):
                return checkpoint(_original, *args, use_reentrant=False, **kwargs)

            block.forward = forward  # instance attribute shadows the class method
            wrapped.append(block)
        yield len(wrapped)
    finally:
        for block in wrapped:
            del block.forward
