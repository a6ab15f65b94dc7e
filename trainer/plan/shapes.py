"""The shape of a trunk, read from a Hugging Face ``config.json`` or named: no weights needed.

:class:`TrunkShape` counts parameters exactly as the Hugging Face module of its family
allocates them (Llama: untied or tied unembedding, grouped-query attention, no biases;
GPT-2: learnt positions, biases, tied unembedding), so a plan for a 7B trunk needs nothing
but its config.

Example
-------
>>> TrunkShape.named("llama-7b").params
6738415616
>>> TrunkShape.named("gpt2").params
124439808
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAMILIES = ("llama", "gpt2")
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# Published configurations (Hugging Face config.json fields of each model).
NAMED: dict[str, dict[str, Any]] = {
    "llama-7b": {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    },
    "llama-13b": {
        "model_type": "llama",
        "hidden_size": 5120,
        "intermediate_size": 13824,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 40,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    },
    "gpt2": {
        "model_type": "gpt2",
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_positions": 1024,
        "vocab_size": 50257,
        "torch_dtype": "float32",
    },
    "gpt2-xl": {
        "model_type": "gpt2",
        "n_embd": 1600,
        "n_layer": 48,
        "n_head": 25,
        "n_positions": 1024,
        "vocab_size": 50257,
        "torch_dtype": "float32",
    },
}


class ShapeError(ValueError):
    pass


@dataclass(frozen=True)
class TrunkShape:
    family: str  # one of FAMILIES
    layers: int  # transformer blocks
    hidden: int  # width d
    ffn: int  # MLP inner width f
    heads: int  # attention heads
    kv_heads: int  # key/value heads (grouped-query attention; = heads without it)
    vocab: int  # vocabulary V (rows of the unembedding)
    tied: bool  # unembedding shares the token embedding
    positions: int = 0  # learnt position embeddings (GPT-2); 0: rotary (Llama)
    stored_dtype: str = "float32"  # dtype of the weights on disk
    name: str = ""  # where the shape came from
    # two residual streams, inputs reconstructed in backward (experts/reversible.py): GPT-2
    # weights, activations held flat in depth when the blocks train
    reversible: bool = False

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ShapeError(f"trunk family {self.family!r} is not one of {FAMILIES}")
        for field in ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab"):
            if getattr(self, field) < 1:
                raise ShapeError(f"trunk {field} must be >= 1, got {getattr(self, field)}")
        if self.hidden % self.heads:
            raise ShapeError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.reversible and self.family != "gpt2":
            raise ShapeError("a reversible trunk has the GPT-2 layout (family gpt2)")
        if self.stored_dtype not in _DTYPE_BYTES:
            raise ShapeError(
                f"stored dtype {self.stored_dtype!r} is not one of {list(_DTYPE_BYTES)}"
            )

    # ---- parameter counts (what the HF module allocates) --------------------------------

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        """Parameters of one block."""
        d, f = self.hidden, self.ffn
        if self.family == "llama":
            kv = self.kv_heads * self.head_dim
            return 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d  # q,o; k,v; gate,up,down; 2 norms
        # GPT-2: c_attn (d, 3d)+3d, c_proj (d, d)+d, c_fc (d, f)+f, mlp c_proj (f, d)+d, 2 LN
        return 4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d

    @property
    def embedding_params(self) -> int:
        """Token (and position) embeddings."""
        return self.vocab * self.hidden + self.positions * self.hidden

    @property
    def head_params(self) -> int:
        """The final norm and, untied, the unembedding."""
        norm = self.hidden if self.family == "llama" else 2 * self.hidden
        return norm + (0 if self.tied else self.vocab * self.hidden)

    @property
    def params(self) -> int:
        return self.embedding_params + self.layers * self.layer_params + self.head_params

    @property
    def param_tensors(self) -> int:
        """Parameter tensors (tied ones once): the optimizer keeps one step counter each."""
        per_layer = 9 if self.family == "llama" else 12
        embeddings = 1 if self.family == "llama" else 2
        head = (1 if self.family == "llama" else 2) + (0 if self.tied else 1)
        return embeddings + self.layers * per_layer + head

    @property
    def largest_tensor_params(self) -> int:
        """The biggest single parameter tensor (an optimizer's per-tensor temporaries)."""
        d, f = self.hidden, self.ffn
        return max(self.vocab * d, d * f, 3 * d * d if self.family == "gpt2" else d * d)

    # ---- construction ----------------------------------------------------------------

    @classmethod
    def from_config(cls, config: dict[str, Any], name: str = "") -> TrunkShape:
        """From the fields of a Hugging Face ``config.json`` (Llama or GPT-2 layout)."""
        kind = config.get("model_type")
        dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32")
        try:
            if kind in ("llama", "mistral", "qwen2"):
                heads = int(config["num_attention_heads"])
                return cls(
                    family="llama",
                    layers=int(config["num_hidden_layers"]),
                    hidden=int(config["hidden_size"]),
                    ffn=int(config["intermediate_size"]),
                    heads=heads,
                    kv_heads=int(config.get("num_key_value_heads") or heads),
                    vocab=int(config["vocab_size"]),
                    tied=bool(config.get("tie_word_embeddings", False)),
                    stored_dtype=dtype,
                    name=name,
                )
            if kind in ("gpt2", "worx_reversible"):
                d = int(config["n_embd"])
                return cls(
                    family="gpt2",
                    layers=int(config["n_layer"]),
                    hidden=d,
                    ffn=int(config.get("n_inner") or 4 * d),
                    heads=int(config["n_head"]),
                    kv_heads=int(config["n_head"]),
                    vocab=int(config["vocab_size"]),
                    tied=bool(config.get("tie_word_embeddings", True)),
                    positions=int(config["n_positions"]),
                    stored_dtype=dtype,
                    name=name,
                    reversible=kind == "worx_reversible",
                )
        except (KeyError, TypeError, ValueError) as exc:
            raise ShapeError(f"config {name or '(given)'} lacks a usable field: {exc}") from exc
        raise ShapeError(
            f"model_type {kind!r} in {name or 'the config'} is not a Llama or GPT-2 layout "
            "(or our reversible one, worx_reversible)"
        )

    @classmethod
    def named(cls, name: str) -> TrunkShape:
        if name == "bundled":
            from worx.bundled import trunk_dir

            return cls.from_path(trunk_dir())
        if name not in NAMED:
            raise ShapeError(
                f"unknown trunk shape {name!r}: name one of {sorted(NAMED) + ['bundled']}, "
                "or give a model directory or a config.json"
            )
        return cls.from_config(NAMED[name], name=name)

    @classmethod
    def from_path(cls, path: str | Path) -> TrunkShape:
        """From a model directory (its ``config.json``) or a ``config.json`` file."""
        path = Path(path)
        file = path / "config.json" if path.is_dir() else path
        try:
            config = json.loads(file.read_text())
        except FileNotFoundError as exc:
            raise ShapeError(f"no config.json at {file}") from exc
        except (OSError, json.JSONDecodeError) as exc:
            raise ShapeError(f"cannot read {file} as JSON: {exc}") from exc
        if not isinstance(config, dict):
            raise ShapeError(f"{file} is not a JSON object")
        return cls.from_config(config, name=str(path))

    @classmethod
    def resolve(cls, spec: str) -> TrunkShape:
        """A named shape, or a model directory / config.json path."""
        if spec in NAMED or spec == "bundled":
            return cls.named(spec)
        if Path(spec).exists():
            return cls.from_path(spec)
        return cls.named(spec)  # raises with the list of names

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "layers": self.layers,
            "hidden": self.hidden,
            "ffn": self.ffn,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "vocab": self.vocab,
            "tied": self.tied,
            "positions": self.positions,
            "stored_dtype": self.stored_dtype,
            "reversible": self.reversible,
            "params": self.params,
        }


def dtype_bytes(dtype: str) -> int:
    if dtype not in _DTYPE_BYTES:
        raise ShapeError(f"dtype {dtype!r} is not one of {list(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[dtype]
