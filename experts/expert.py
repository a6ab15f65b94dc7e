"""An expert: a small module of a declared kind, beside a frozen trunk.

Kinds (``ExpertConfig.kind``; stored in the manifest, an unknown kind is refused):

* ``adapter``: bottleneck feed-forward adapters beside the trunk's MLP in chosen layers.
  Each maps the MLP's input ``x`` (width ``d``) through ``d -> r -> d``. Experts stored
  before kinds existed are this kind, bit for bit.
* ``vocab``: the vocabulary parts alone (:mod:`experts.vocab`): a low-rank delta on the
  unembedding, a logit bias and a low-rank token-embedding delta.
* ``vocab_adapter``: adapters and the vocabulary parts.

Every part starts at exactly zero where it meets the trunk, so an untrained expert adds
exactly ``0`` everywhere and the trunk's function is preserved (function-preserving
growth). Adapters are kept in a ``ModuleDict`` keyed by the layer index as a string.

Example
-------
>>> import torch
>>> expert = Expert(ExpertConfig(layers=(0, 1), rank=4), hidden_size=8)
>>> expert.num_params()
152
>>> bool((expert.adapter(0)(torch.randn(2, 3, 8)) == 0).all())
True
>>> config = ExpertConfig(layers=(1,), rank=4, kind="vocab_adapter", vocab_size=20,
...                       output_rank=2, token_rank=2, token_layer=0, logit_bias=True)
>>> sorted({name.split(".")[0] for name in Expert(config, hidden_size=8).tensors()})
['adapters', 'output', 'tokens']
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from experts.vocab import OutputDelta, TokenDelta

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "gelu": nn.GELU,
    "relu": nn.ReLU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
}


class ExpertConfigError(ValueError):
    pass


KINDS = ("adapter", "vocab", "vocab_adapter")
_ADAPTER_KEYS = {"layers", "rank", "activation"}  # the whole config of kind "adapter"
_VOCAB_KEYS = {
    "kind",
    "vocab_size",
    "output_rank",
    "token_rank",
    "token_layer",
    "token_site",
    "logit_bias",
}
# where a token-embedding delta joins the residual stream: entering its block (the gradient
# then passes through that block's attention), or beside the block's MLP (it does not)
TOKEN_SITES = ("input", "mlp")


@dataclass(frozen=True)
class ExpertConfig:
    layers: tuple[int, ...]  # trunk blocks that get an adapter beside their MLP
    rank: int  # bottleneck width r of every adapter (d -> r -> d); kind "vocab": 0
    activation: str = "gelu"  # one of ACTIVATIONS
    kind: str = "adapter"  # one of KINDS
    vocab_size: int = 0  # the trunk's vocabulary size (vocabulary kinds)
    output_rank: int = 0  # rank of the delta on the unembedding (0: none)
    token_rank: int = 0  # rank of the token-embedding delta (0: none)
    token_layer: int = 0  # the block whose input (or MLP output) gets the token delta
    token_site: str = "input"  # "input": entering block token_layer; "mlp": beside its MLP
    logit_bias: bool = False  # a per-token bias on the logits

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(int(layer) for layer in self.layers))
        self.validate()

    def validate(self, num_layers: int | None = None) -> None:
        """Raise :class:`ExpertConfigError` if unusable (on a trunk of ``num_layers`` layers)."""
        if self.kind not in KINDS:
            raise ExpertConfigError(
                f"unknown expert kind {self.kind!r}: this version of worx knows {list(KINDS)}; "
                "upgrade worx to load experts of a newer kind"
            )
        if self.kind == "vocab":
            if self.layers or self.rank:
                raise ExpertConfigError(
                    "an expert of kind 'vocab' has no adapters: layers must be empty and rank 0"
                )
        else:
            self._validate_adapters(num_layers)
        if self.kind == "adapter":
            vocab_parts = (
                self.output_rank
                or self.token_rank
                or self.token_layer
                or self.token_site != "input"
            )
            if self.vocab_size or vocab_parts or self.logit_bias:
                raise ExpertConfigError(
                    "an expert of kind 'adapter' has no vocabulary parts; use kind "
                    "'vocab_adapter' for output_rank, token_rank or logit_bias"
                )
            return
        if self.vocab_size < 1:
            raise ExpertConfigError(f"kind {self.kind!r} needs the trunk's vocab_size (>= 1)")
        if self.output_rank < 0 or self.token_rank < 0:
            raise ExpertConfigError("output_rank and token_rank must be >= 0")
        if self.token_site not in TOKEN_SITES:
            raise ExpertConfigError(
                f"token_site {self.token_site!r} is not one of {list(TOKEN_SITES)}"
            )
        if self.token_layer < 0 or (num_layers is not None and self.token_layer >= num_layers):
            raise ExpertConfigError(
                f"token_layer {self.token_layer} is not a block of the trunk"
                + (f" (0..{num_layers - 1})" if num_layers is not None else "")
            )
        if not (self.output_rank or self.token_rank or self.logit_bias):
            raise ExpertConfigError(
                f"kind {self.kind!r} needs at least one vocabulary part: "
                "output_rank >= 1, token_rank >= 1 or logit_bias"
            )

    def _validate_adapters(self, num_layers: int | None) -> None:
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

    @property
    def lowest_layer(self) -> int | None:
        """The lowest block any part acts in (the gradient flows down to it); None: the output."""
        layers = list(self.layers) + ([self.token_layer] if self.token_rank else [])
        return min(layers, default=None)

    @property
    def token_site_key(self) -> tuple[str, int]:
        """The mixture site of the token delta: ``("tokens", l)`` or ``("mlp_tokens", l)``."""
        return ("tokens" if self.token_site == "input" else "mlp_tokens", self.token_layer)

    def to_dict(self) -> dict[str, Any]:
        # kind "adapter" keeps the three keys it had before kinds existed, so its manifests
        # and weight files are byte-identical to those written then
        body: dict[str, Any] = {
            "layers": list(self.layers),
            "rank": self.rank,
            "activation": self.activation,
        }
        if self.kind != "adapter":
            body.update(
                kind=self.kind,
                vocab_size=self.vocab_size,
                output_rank=self.output_rank,
                token_rank=self.token_rank,
                token_layer=self.token_layer,
                token_site=self.token_site,
                logit_bias=self.logit_bias,
            )
        return body

    @classmethod
    def from_dict(cls, body: Any) -> ExpertConfig:
        if not isinstance(body, dict):
            raise ExpertConfigError(f"expert config must be an object, got {body!r}")
        kind = body.get("kind", "adapter")  # configs from before kinds existed are adapters
        if not isinstance(kind, str):
            raise ExpertConfigError(f"expert config 'kind' must be a string, got {kind!r}")
        if kind not in KINDS:
            raise ExpertConfigError(
                f"unknown expert kind {kind!r}: this version of worx knows {list(KINDS)}; "
                "upgrade worx to load experts of a newer kind"
            )
        allowed = _ADAPTER_KEYS if kind == "adapter" else _ADAPTER_KEYS | _VOCAB_KEYS
        if set(body) - allowed - {"kind"}:
            raise ExpertConfigError(
                f"expert config of kind {kind!r} has unknown keys "
                f"{sorted(set(body) - allowed - {'kind'})}; expected {sorted(allowed)}"
            )
        layers, rank = body.get("layers"), body.get("rank")
        if not isinstance(layers, list | tuple) or not all(_is_int(x) for x in layers):
            raise ExpertConfigError(
                f"expert config 'layers' must be a list of ints, got {layers!r}"
            )
        if not _is_int(rank):
            raise ExpertConfigError(f"expert config 'rank' must be an int, got {rank!r}")
        activation = body.get("activation", "gelu")
        if not isinstance(activation, str):
            raise ExpertConfigError(
                f"expert config 'activation' must be a string, got {activation!r}"
            )
        extra: dict[str, Any] = {}
        for name in ("vocab_size", "output_rank", "token_rank", "token_layer"):
            value = body.get(name, 0)
            if not _is_int(value):
                raise ExpertConfigError(f"expert config {name!r} must be an int, got {value!r}")
            extra[name] = value
        site = body.get("token_site", "input")
        if not isinstance(site, str):
            raise ExpertConfigError(f"expert config 'token_site' must be a string, got {site!r}")
        bias = body.get("logit_bias", False)
        if not isinstance(bias, bool):
            raise ExpertConfigError(f"expert config 'logit_bias' must be a bool, got {bias!r}")
        return cls(
            layers=tuple(layers),
            rank=rank,
            activation=activation,
            kind=kind,
            logit_bias=bias,
            token_site=site,
            **extra,
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    """The parts of ``config``'s kind, on a trunk of width ``hidden_size``.

    ``adapters`` (layer -> :class:`Adapter`, may be empty), ``tokens``
    (:class:`~experts.vocab.TokenDelta` or None) and ``output``
    (:class:`~experts.vocab.OutputDelta` or None).
    """

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
