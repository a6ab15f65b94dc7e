"""The shape of an expert, :class:`ExpertConfig`: its one definition (torch-free).

The trainer's settings hold one as the sub-table ``[trainer.expert]``
(``WORX_TRAINER__EXPERT__<FIELD>``), and its defaults are what a job trains; a stored
expert's manifest holds one as :meth:`ExpertConfig.to_dict` wrote it. (Torch-free so that
reading the settings does not import torch; :mod:`experts.expert` builds the modules.)

Kinds (``kind``; stored in the manifest, an unknown kind is refused):

* ``adapter``: bottleneck feed-forward adapters beside the trunk's MLP in chosen layers.
  Each maps the MLP's input ``x`` (width ``d``) through ``d -> r -> d``. Experts stored
  before kinds existed are this kind, bit for bit.
* ``vocab``: the vocabulary parts alone (:mod:`experts.vocab`): a low-rank delta on the
  unembedding, a logit bias and a low-rank token-embedding delta.
* ``vocab_adapter``: adapters and the vocabulary parts (the default).

The parts a kind does not have are set to their zero values when a config is made (kind
``adapter``: no vocabulary parts; kind ``vocab``: no adapters, ``layers`` empty and ``rank``
0), so a setting of kind ``adapter`` leaves the default vocabulary ranks without effect and
one shape has one config (and one manifest).

As a setting, three fields may leave their value to the trunk; :meth:`ExpertConfig.for_trunk`
fills them in: ``layers`` empty (the upper half of the trunk's blocks), ``token_layer``
negative (counted from the top: -1 is the last block) and ``vocab_size`` 0 (the trunk's).
An expert is built from, and a manifest stores, a resolved config (nothing left to the
trunk: :meth:`ExpertConfig.check_resolved`).

Example
-------
>>> ExpertConfig().for_trunk(num_layers=4, vocab_size=100)  # doctest: +NORMALIZE_WHITESPACE
ExpertConfig(layers=(2, 3), rank=128, activation='gelu', kind='vocab_adapter',
             vocab_size=100, output_rank=32, token_rank=32, token_layer=3, token_site='mlp',
             logit_bias=True)
>>> ExpertConfig(kind="adapter", layers=(0, 1), rank=4).to_dict()
{'layers': [0, 1], 'rank': 4, 'activation': 'gelu'}
>>> ExpertConfig(kind="vocab").for_trunk(num_layers=4, vocab_size=100).layers
()
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from worx.settings import setting


class ExpertConfigError(ValueError):
    pass


KINDS = ("adapter", "vocab", "vocab_adapter")
# an adapter's activation: name -> the torch.nn module class (experts.expert builds it)
ACTIVATIONS = {"gelu": "GELU", "relu": "ReLU", "silu": "SiLU", "tanh": "Tanh"}
# where a token-embedding delta joins the residual stream: entering its block (the gradient
# then passes through that block's attention), or beside the block's MLP (it does not)
TOKEN_SITES = ("input", "mlp")

_ADAPTER_KEYS = {"layers", "rank", "activation"}  # the whole stored config of kind "adapter"
_VOCAB_KEYS = {
    "kind",
    "vocab_size",
    "output_rank",
    "token_rank",
    "token_layer",
    "token_site",
    "logit_bias",
}
# the vocabulary parts' values in a kind without them (and in a manifest that omits them)
_NO_VOCABULARY: dict[str, Any] = {
    "vocab_size": 0,
    "output_rank": 0,
    "token_rank": 0,
    "token_layer": 0,
    "token_site": "input",
    "logit_bias": False,
}


@dataclass(frozen=True)
class ExpertConfig:
    layers: tuple[int, ...] = setting(
        (),
        help="trunk blocks with an adapter beside their MLP; empty: the upper half of the "
        'trunk\'s blocks (kind "vocab": none)',
        range="distinct, >= 0",
    )
    rank: int = setting(
        128,
        help='bottleneck width r of every adapter (d -> r -> d); kind "vocab": 0',
        range=">= 1",
    )
    activation: str = setting("gelu", help="the adapters' activation", choices=tuple(ACTIVATIONS))
    kind: str = setting(
        "vocab_adapter",
        help='"adapter": bottleneck adapters beside the trunk\'s MLP; "vocab": the vocabulary '
        "parts alone (unembedding delta, logit bias, token-embedding delta); "
        '"vocab_adapter": both (experts/shape.py)',
        choices=KINDS,
    )
    vocab_size: int = setting(
        0, help="the trunk's vocabulary size (vocabulary kinds); 0: the trunk's", range=">= 0"
    )
    output_rank: int = setting(
        32, help="rank of the delta on the unembedding (vocabulary kinds; 0: none)", range=">= 0"
    )
    token_rank: int = setting(
        32, help="rank of the token-embedding delta (vocabulary kinds; 0: none)", range=">= 0"
    )
    token_layer: int = setting(
        -1, help="the block of the token delta (negative: from the top; -1: last)"
    )
    token_site: str = setting(
        "mlp",
        help='"mlp": beside the block\'s MLP; "input": entering the block',
        choices=TOKEN_SITES,
    )
    logit_bias: bool = setting(True, help="a per-token bias on the logits (vocabulary kinds)")

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(int(layer) for layer in self.layers))
        if self.kind == "adapter":
            for name, value in _NO_VOCABULARY.items():
                object.__setattr__(self, name, value)
        elif self.kind == "vocab":
            object.__setattr__(self, "layers", ())
            object.__setattr__(self, "rank", 0)
        self.validate()

    def validate(self, num_layers: int | None = None) -> None:
        """Raise :class:`ExpertConfigError` if unusable (on a trunk of ``num_layers`` layers).

        What is left to the trunk (see the module docstring) is no error here; an expert
        needs :meth:`check_resolved` too.
        """
        if self.kind not in KINDS:
            raise ExpertConfigError(
                f"unknown expert kind {self.kind!r}: this version of worx knows {list(KINDS)}; "
                "upgrade worx to load experts of a newer kind"
            )
        if self.kind != "vocab":
            self._validate_adapters(num_layers)
        if self.kind == "adapter":
            return
        if self.vocab_size < 0:
            raise ExpertConfigError(
                f"vocab_size must be >= 0 (0: the trunk's), got {self.vocab_size}"
            )
        if self.output_rank < 0 or self.token_rank < 0:
            raise ExpertConfigError("output_rank and token_rank must be >= 0")
        if self.token_site not in TOKEN_SITES:
            raise ExpertConfigError(
                f"token_site {self.token_site!r} is not one of {list(TOKEN_SITES)}"
            )
        if num_layers is not None and not -num_layers <= self.token_layer < num_layers:
            raise ExpertConfigError(
                f"token_layer {self.token_layer} is not a block of the trunk (0..{num_layers - 1})"
            )
        if not (self.output_rank or self.token_rank or self.logit_bias):
            raise ExpertConfigError(
                f"kind {self.kind!r} needs at least one vocabulary part: "
                "output_rank >= 1, token_rank >= 1 or logit_bias"
            )

    def _validate_adapters(self, num_layers: int | None) -> None:
        if len(set(self.layers)) != len(self.layers) or any(layer < 0 for layer in self.layers):
            raise ExpertConfigError(
                f"expert layers {self.layers} must be distinct, non-negative indices"
            )
        if num_layers is not None and self.layers and max(self.layers) >= num_layers:
            raise ExpertConfigError(
                f"expert layers {self.layers} do not exist in a trunk of {num_layers} layers"
            )
        if self.rank < 1:
            raise ExpertConfigError(f"expert rank must be >= 1, got {self.rank}")
        if self.activation not in ACTIVATIONS:
            raise ExpertConfigError(
                f"unknown activation {self.activation!r}; choose one of {sorted(ACTIVATIONS)}"
            )

    def check_resolved(self) -> None:
        """Raise :class:`ExpertConfigError` if anything is left to the trunk (an expert is
        built from, and a manifest stores, a resolved config: :meth:`for_trunk` makes one)."""
        if self.kind != "vocab" and not self.layers:
            raise ExpertConfigError("expert layers must name at least one trunk layer")
        if self.kind == "adapter":
            return
        if self.vocab_size < 1:
            raise ExpertConfigError(f"kind {self.kind!r} needs the trunk's vocab_size (>= 1)")
        if self.token_layer < 0:
            raise ExpertConfigError(f"token_layer {self.token_layer} is not a block of the trunk")

    def for_trunk(self, num_layers: int, vocab_size: int) -> ExpertConfig:
        """This shape on a trunk of ``num_layers`` blocks and ``vocab_size`` tokens: what was
        left to the trunk filled in (the upper half of its blocks, a token layer counted from
        its top, its vocabulary size), checked against the trunk.

        Raises
        ------
        ExpertConfigError
            If the shape does not fit the trunk (a layer it does not have, another
            vocabulary size).
        """
        self.validate(num_layers)
        if self.kind != "adapter" and self.vocab_size not in (0, vocab_size):
            raise ExpertConfigError(
                f"vocab_size {self.vocab_size} is not the trunk's ({vocab_size}); "
                "leave it 0 (the trunk's)"
            )
        resolved = dataclasses.replace(
            self,
            layers=self.layers or upper_half(num_layers),
            vocab_size=vocab_size,
            token_layer=self.token_layer + num_layers if self.token_layer < 0 else self.token_layer,
        )
        resolved.validate(num_layers)
        resolved.check_resolved()
        return resolved

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
        """The config a manifest stores (:meth:`to_dict`): resolved, every key checked; a key
        it omits is the part's absence (not the settings' default)."""
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
        if kind == "vocab" and (layers or rank):
            raise ExpertConfigError(
                "an expert of kind 'vocab' has no adapters: layers must be empty and rank 0"
            )
        activation = body.get("activation", "gelu")
        if not isinstance(activation, str):
            raise ExpertConfigError(
                f"expert config 'activation' must be a string, got {activation!r}"
            )
        extra: dict[str, Any] = {}
        for name in ("vocab_size", "output_rank", "token_rank", "token_layer"):
            value = body.get(name, _NO_VOCABULARY[name])
            if not _is_int(value):
                raise ExpertConfigError(f"expert config {name!r} must be an int, got {value!r}")
            extra[name] = value
        site = body.get("token_site", _NO_VOCABULARY["token_site"])
        if not isinstance(site, str):
            raise ExpertConfigError(f"expert config 'token_site' must be a string, got {site!r}")
        bias = body.get("logit_bias", _NO_VOCABULARY["logit_bias"])
        if not isinstance(bias, bool):
            raise ExpertConfigError(f"expert config 'logit_bias' must be a bool, got {bias!r}")
        config = cls(
            layers=tuple(layers),
            rank=rank,
            activation=activation,
            kind=kind,
            logit_bias=bias,
            token_site=site,
            **extra,
        )
        config.check_resolved()
        return config


def upper_half(num_layers: int) -> tuple[int, ...]:
    """The blocks an expert whose ``layers`` are left to the trunk gets adapters in."""
    return tuple(range(num_layers // 2, num_layers))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
