"""The expert a plan trains: the trainer's own :class:`ExpertConfig`, its parameters counted
by building the module on the meta device (no memory), so the plan's bytes are the trainer's.

Example
-------
>>> from trainer.plan.shapes import TrunkShape
>>> trunk = TrunkShape.named("llama-7b")
>>> spec = ExpertSpec.sized(trunk, "adapter", 150_000_000)
>>> spec.config.rank, round(spec.params / 1e6, 1)
(1144, 150.0)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from experts.expert import KINDS, Expert, ExpertConfig
from trainer.config import TrainerConfig
from trainer.plan.shapes import TrunkShape


@dataclass(frozen=True)
class ExpertSpec:
    config: ExpertConfig  # exactly what the trainer builds
    hidden: int  # the trunk's width the expert is built for
    params: int  # trainable parameters of one expert
    tensors: int  # parameter tensors of one expert
    count: int = 1  # experts the mixture holds (one trains per job; the rest are stored)

    @classmethod
    def from_config(cls, config: ExpertConfig, hidden_size: int, count: int = 1) -> ExpertSpec:
        if count < 1:
            raise ValueError(f"expert count must be >= 1, got {count}")
        with torch.device("meta"):
            expert = Expert(config, hidden_size)
        params = list(expert.parameters())
        return cls(
            config=config,
            hidden=int(hidden_size),
            params=sum(p.numel() for p in params),
            tensors=len(params),
            count=count,
        )

    @classmethod
    def from_trainer_config(
        cls, trunk: TrunkShape, config: TrainerConfig, count: int = 1
    ) -> ExpertSpec:
        """The expert a job of ``config`` trains on ``trunk`` (trainer.expert_setup's rule)."""
        from trainer.expert_setup import expert_config_for

        expert_config = expert_config_for(_StandIn(trunk), config)  # checked against the trunk
        return cls.from_config(expert_config, trunk.hidden, count)

    @classmethod
    def sized(
        cls,
        trunk: TrunkShape,
        kind: str,
        params: int,
        config: TrainerConfig | None = None,
        count: int = 1,
    ) -> ExpertSpec:
        """The expert of ``kind`` whose rank brings it closest to ``params`` parameters.

        Adapter kinds scale the adapters' ``rank``; kind ``vocab`` scales both vocabulary ranks.
        """
        if kind not in KINDS:
            raise ValueError(f"expert kind {kind!r}: use one of {KINDS}")
        if params < 1:
            raise ValueError(f"expert size must be >= 1 parameter, got {params}")
        base = config or TrainerConfig()

        def build(rank: int) -> ExpertSpec:
            ranks = {"output_rank": rank, "token_rank": rank} if kind == "vocab" else {"rank": rank}
            shape = dataclasses.replace(base.expert, kind=kind, **ranks)
            return cls.from_trainer_config(trunk, dataclasses.replace(base, expert=shape), count)

        low, high = 1, 1
        while build(high).params < params and high < 1 << 24:
            low, high = high, high * 2
        while high - low > 1:  # params grow with the rank: bisect
            mid = (low + high) // 2
            if build(mid).params < params:
                low = mid
            else:
                high = mid
        return min((build(low), build(high)), key=lambda s: abs(s.params - params))

    @property
    def grad_layers_from(self) -> int | None:
        """The lowest block the gradient must reach (None: the output part alone)."""
        return self.config.lowest_layer

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "params": self.params,
            "tensors": self.tensors,
            "count": self.count,
        }


class _StandIn:
    """What :func:`trainer.expert_setup.expert_config_for` reads of a trunk, from a shape."""

    def __init__(self, shape: TrunkShape) -> None:
        self.num_layers = shape.layers
        with torch.device("meta"):
            head = nn.Linear(shape.hidden, shape.vocab, bias=False)
        self.model = SimpleNamespace(get_output_embeddings=lambda: head)
