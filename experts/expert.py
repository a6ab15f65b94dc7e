"""An expert: a small module of a declared kind, beside a frozen trunk.

Its shape (:class:`~experts.shape.ExpertConfig`: the kind, the adapters' layers and rank, the
vocabulary parts) is defined in :mod:`experts.shape` and re-exported here. Kinds:
``adapter`` (bottleneck feed-forward adapters beside the trunk's MLP in chosen layers, each
mapping the MLP's input ``x`` of width ``d`` through ``d -> r -> d``; experts stored before
kinds existed are this kind, bit for bit), ``vocab`` (the vocabulary parts alone,
:mod:`experts.vocab`: a low-rank delta on the unembedding, a logit bias and a low-rank
token-embedding delta) and ``vocab_adapter`` (both).

Every part starts at exactly zero where it meets the trunk, so an untrained expert adds
exactly ``0`` everywhere and the trunk's function is preserved (function-preserving
growth). Adapters are kept in a ``ModuleDict`` keyed by the layer index as a string.

Example
-------
>>> import torch
>>> expert = Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=4), hidden_size=8)
>>> expert.num_params()
152
>>> bool((expert.adapter(0)(torch.randn(2, 3, 8)) == 0).all())
True
>>> config = ExpertConfig(layers=(1,), rank=4, kind="vocab_adapter", vocab_size=20,
...                       output_rank=2, token_rank=2, token_layer=0, token_site="input",
...                       logit_bias=True)
>>> sorted({name.split(".")[0] for name in Expert(config, hidden_size=8).tensors()})
['adapters', 'output', 'tokens']
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from experts.shape import (  # re-exported: the shape's one definition is experts/shape.py
    ACTIVATIONS,
    KINDS,
    TOKEN_SITES,
    ExpertConfig,
    ExpertConfigError,
)
from experts.vocab import OutputDelta, TokenDelta

__all__ = [
    "ACTIVATIONS",
    "KINDS",
    "TOKEN_SITES",
    "Adapter",
    "Expert",
    "ExpertConfig",
    "ExpertConfigError",
]


class Adapter(nn.Module):
    """``x -> up(act(down(x)))``, ``(B, T, d) -> (B, T, d)``; ``up`` is zero-initialised."""

    def __init__(self, hidden_size: int, rank: int, activation: str = "gelu") -> None:
        super().__init__()
        self.down = nn.Linear(hidden_size, rank)
        self.act = getattr(nn, ACTIVATIONS[activation])()
        self.up = nn.Linear(rank, hidden_size)
        nn.init.zeros_(self.up.weight)  # function-preserving: the adapter outputs exactly 0
        nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.act(self.down(x)))  # (B, T, d) -> (B, T, r) -> (B, T, d)


class Expert(nn.Module):
    """The parts of ``config``'s kind, on a trunk of width ``hidden_size``.

    ``adapters`` (layer -> :class:`Adapter`, may be empty), ``tokens``
    (:class:`~experts.vocab.TokenDelta` or None) and ``output``
    (:class:`~experts.vocab.OutputDelta` or None).
    """

    def __init__(self, config: ExpertConfig, hidden_size: int) -> None:
        super().__init__()
        if hidden_size < 1:
            raise ExpertConfigError(f"hidden_size must be >= 1, got {hidden_size}")
        config.check_resolved()  # nothing left to the trunk (ExpertConfig.for_trunk)
        self.config = config
        self.hidden_size = int(hidden_size)
        self.adapters = nn.ModuleDict(
            {
                str(layer): Adapter(hidden_size, config.rank, config.activation)
                for layer in config.layers
            }
        )
        self.tokens = (
            TokenDelta(config.vocab_size, hidden_size, config.token_rank)
            if config.token_rank
            else None
        )
        has_output = config.output_rank > 0 or config.logit_bias
        self.output = (
            OutputDelta(hidden_size, config.vocab_size, config.output_rank, config.logit_bias)
            if has_output
            else None
        )

    def adapter(self, layer: int) -> Adapter:
        return self.adapters[str(layer)]

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @classmethod
    def branch(cls, source: Expert) -> Expert:
        """A new expert starting as an exact copy of ``source`` (which is never modified)."""
        clone = copy.deepcopy(source)
        for param in clone.parameters():
            param.requires_grad_(True)
        return clone

    @classmethod
    def from_tensors(
        cls, config: ExpertConfig, hidden_size: int, tensors: dict[str, torch.Tensor]
    ) -> Expert:
        """Build an expert whose parameters *are* ``tensors`` (no copy: memory-mapped stays mapped).

        Raises
        ------
        ExpertConfigError
            If the names or shapes of ``tensors`` do not match ``config`` and ``hidden_size``.
        """
        with torch.device("meta"):
            expert = cls(config, hidden_size)
        expected = {name: tuple(p.shape) for name, p in expert.named_parameters()}
        got = {name: tuple(t.shape) for name, t in tensors.items()}
        if expected != got:
            missing = sorted(set(expected) - set(got))
            extra = sorted(set(got) - set(expected))
            wrong = sorted(n for n in set(expected) & set(got) if expected[n] != got[n])
            raise ExpertConfigError(
                f"tensors do not match the expert config: missing {missing}, unexpected {extra}, "
                f"wrong shape {wrong}"
            )
        expert.load_state_dict(tensors, assign=True)
        expert.requires_grad_(False)
        return expert

    def tensors(self) -> dict[str, torch.Tensor]:
        """Contiguous detached copies of every parameter, by name (what the store writes)."""
        return {name: p.detach().contiguous().clone() for name, p in self.named_parameters()}
