"""An expert: bottleneck feed-forward adapters beside the trunk's MLP in chosen layers.

Each adapter maps the MLP's input ``x`` (width ``d``) through ``d -> r -> d``; its output
projection starts at exactly zero, so an untrained expert adds exactly ``0`` to every MLP
output and the trunk's function is preserved (function-preserving growth). Adapters are
kept in a ``ModuleDict`` keyed by the layer index as a string.

Example
-------
>>> import torch
>>> expert = Expert(ExpertConfig(layers=(0, 1), rank=4), hidden_size=8)
>>> expert.num_params()
152
>>> bool((expert.adapter(0)(torch.randn(2, 3, 8)) == 0).all())
True
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "gelu": nn.GELU,
    "relu": nn.ReLU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
}


class ExpertConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ExpertConfig:
    layers: tuple[int, ...]  # trunk blocks that get an adapter beside their MLP
    rank: int  # bottleneck width r of every adapter (d -> r -> d)
    activation: str = "gelu"  # one of ACTIVATIONS

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(int(layer) for layer in self.layers))
        self.validate()

    def validate(self, num_layers: int | None = None) -> None:
        """Raise :class:`ExpertConfigError` if unusable (on a trunk of ``num_layers`` layers)."""
        if not self.layers:
            raise ExpertConfigError("expert layers must name at least one trunk layer")
        if len(set(self.layers)) != len(self.layers) or any(layer < 0 for layer in self.layers):
            raise ExpertConfigError(
                f"expert layers {self.layers} must be distinct, non-negative indices"
            )
        if num_layers is not None and max(self.layers) >= num_layers:
            raise ExpertConfigError(
                f"expert layers {self.layers} do not exist in a trunk of {num_layers} layers"
            )
        if self.rank < 1:
            raise ExpertConfigError(f"expert rank must be >= 1, got {self.rank}")
        if self.activation not in ACTIVATIONS:
            raise ExpertConfigError(
                f"unknown activation {self.activation!r}; choose one of {sorted(ACTIVATIONS)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {"layers": list(self.layers), "rank": self.rank, "activation": self.activation}

    @classmethod
    def from_dict(cls, body: Any) -> ExpertConfig:
        if not isinstance(body, dict) or set(body) - {"layers", "rank", "activation"}:
            raise ExpertConfigError(
                f"expert config must be {{layers, rank, activation}}, got {body!r}"
            )
        layers, rank = body.get("layers"), body.get("rank")
        if not isinstance(layers, list | tuple) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in layers
        ):
            raise ExpertConfigError(
                f"expert config 'layers' must be a list of ints, got {layers!r}"
            )
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise ExpertConfigError(f"expert config 'rank' must be an int, got {rank!r}")
        activation = body.get("activation", "gelu")
        if not isinstance(activation, str):
            raise ExpertConfigError(
                f"expert config 'activation' must be a string, got {activation!r}"
            )
        return cls(layers=tuple(layers), rank=rank, activation=activation)


class Adapter(nn.Module):
    """``x -> up(act(down(x)))``, ``(B, T, d) -> (B, T, d)``; ``up`` is zero-initialised."""

    def __init__(self, hidden_size: int, rank: int, activation: str = "gelu") -> None:
        super().__init__()
        self.down = nn.Linear(hidden_size, rank)
        self.act = ACTIVATIONS[activation]()
        self.up = nn.Linear(rank, hidden_size)
        nn.init.zeros_(self.up.weight)  # function-preserving: the adapter outputs exactly 0
        nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.act(self.down(x)))  # (B, T, d) -> (B, T, r) -> (B, T, d)


class Expert(nn.Module):
    """Bottleneck adapters for the layers of ``config``, on a trunk of width ``hidden_size``."""

    def __init__(self, config: ExpertConfig, hidden_size: int) -> None:
        super().__init__()
        if hidden_size < 1:
            raise ExpertConfigError(f"hidden_size must be >= 1, got {hidden_size}")
        self.config = config
        self.hidden_size = int(hidden_size)
        self.adapters = nn.ModuleDict(
            {
                str(layer): Adapter(hidden_size, config.rank, config.activation)
                for layer in config.layers
            }
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
