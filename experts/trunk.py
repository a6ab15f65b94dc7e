"""The frozen trunk: any local Hugging Face causal LM (GPT-2 and Llama families at least).

The trunk is loaded once, frozen (``requires_grad_(False)``, eval mode) and identified by a
fingerprint: a sha256 over its configuration and the bytes of every weight tensor as stored
on disk, so the same directory gives the same fingerprint whatever dtype it is loaded in,
and an expert trained on one trunk can never be loaded onto another.

Tests and benches build tiny trunks from configs with :func:`build_tiny_trunk` (random
weights, a freshly trained byte-level BPE tokenizer); nothing is ever downloaded.

Example
-------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as d:  # doctest: +SKIP
...     trunk = load_trunk(build_tiny_trunk(d, family="llama", layers=2, width=32))
...     trunk.num_layers, trunk.hidden_size
(2, 32)
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

log = logging.getLogger(__name__)

FAMILIES = ("gpt2", "llama")
# Config keys that do not change what the model computes (written by whichever
# transformers version saved the directory, or by the loader).
_VOLATILE_CONFIG_KEYS = {
    "transformers_version",
    "_name_or_path",
    "torch_dtype",
    "dtype",
    "use_cache",
}
_CORPUS_DIR = Path(__file__).resolve().parent.parent / "data" / "corpus"


class TrunkError(ValueError):
    """A trunk directory that cannot be loaded (missing files, unknown architecture)."""


@dataclass
class Trunk:
    """A frozen causal LM with its tokenizer and fingerprint.

    Attributes
    ----------
    model : nn.Module
        The Hugging Face causal LM, eval mode, every parameter ``requires_grad=False``.
    tokenizer : Any
        Its tokenizer (a ``PreTrainedTokenizerFast`` for tiny trunks), with a pad token.
    fingerprint : str
        ``sha256`` hex of the config and weights (see :func:`trunk_fingerprint`).
    hidden_size, num_layers : int
        Width of the residual stream and number of transformer blocks.
    family : str
        ``"gpt2"`` or ``"llama"`` (Llama-like: Mistral, Qwen2... share the layout).
    path : Path
        The directory it was loaded from.
    """

    model: nn.Module
    tokenizer: Any
    fingerprint: str
    hidden_size: int
    num_layers: int
    family: str
    path: Path

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def blocks(self) -> list[nn.Module]:
        """The transformer blocks, in order."""
        return list(_block_list(self.model, self.family))

    def mlp(self, layer: int) -> nn.Module:
        """The MLP submodule of block ``layer`` (GPT-2: ``transformer.h[i].mlp``, Llama:
        ``model.layers[i].mlp``)."""
        if not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer} out of range: the trunk has {self.num_layers} layers")
        return self.blocks()[layer].mlp


def _family_of(model: nn.Module) -> str:
    if hasattr(model, "transformer") and hasattr(model.transformer, "h"):
        return "gpt2"
    if hasattr(model, "model") and hasattr(model.model, "layers"):
        return "llama"
    raise TrunkError(
        f"unsupported architecture {type(model).__name__}: expected a GPT-2 layout "
        "(transformer.h[i].mlp) or a Llama layout (model.layers[i].mlp)"
    )


def _block_list(model: nn.Module, family: str) -> nn.ModuleList:
    return model.transformer.h if family == "gpt2" else model.model.layers


def trunk_fingerprint(path: str | Path) -> str:
    """sha256 over the canonical config and every stored tensor (name, dtype, shape, bytes).

    Independent of sharding and of the dtype the model is later loaded in; changes when any
    weight bit or any computation-relevant config value changes.
    """
    root = Path(path)
    config_file = root / "config.json"
    if not config_file.is_file():
        raise TrunkError(f"{root} has no config.json: not a Hugging Face model directory")
    config = json.loads(config_file.read_text(encoding="utf-8"))
    for key in _VOLATILE_CONFIG_KEYS:
        config.pop(key, None)
    digest = hashlib.sha256()
    digest.update(json.dumps(config, sort_keys=True).encode())
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise TrunkError(
            f"{root} has no *.safetensors weights; re-save the model with "
            "save_pretrained(..., safe_serialization=True) (pickled .bin weights are refused)"
        )
    names: dict[str, Path] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a dict
                names[name] = file
    for name in sorted(names):
        with safe_open(str(names[name]), framework="pt") as handle:
            tensor = handle.get_tensor(name)
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def load_trunk(path: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Trunk:
    """Load a local Hugging Face causal LM frozen, with its tokenizer and fingerprint.

    Raises
    ------
    TrunkError
        If ``path`` is not a model directory with safetensors weights, or the architecture
        has neither the GPT-2 nor the Llama block layout.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = Path(path)
    fingerprint = trunk_fingerprint(root)
    model = AutoModelForCausalLM.from_pretrained(
        str(root), dtype=dtype, local_files_only=True, use_safetensors=True
    )
    model.requires_grad_(False)
    model.eval()
    model.to(device)
    tokenizer = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    family = _family_of(model)
    trunk = Trunk(
        model=model,
        tokenizer=tokenizer,
        fingerprint=fingerprint,
        hidden_size=int(model.config.hidden_size),
        num_layers=len(_block_list(model, family)),
        family=family,
        path=root,
    )
    log.info(
        "loaded %s trunk %s: %d layers, width %d, %s, fingerprint %s",
        family,
        root,
        trunk.num_layers,
        trunk.hidden_size,
        dtype,
        fingerprint[:12],
    )
    return trunk


def corpus_sample(per_domain: int = 40) -> list[str]:
    """A few documents of every bundled corpus domain (to train a tiny trunk's tokenizer)."""
    texts: list[str] = []
    for file in sorted(_CORPUS_DIR.glob("*.jsonl.gz")):
        with gzip.open(file, "rt", encoding="utf-8") as handle:
            for i, line in enumerate(handle):
                if i >= per_domain:
                    break
                texts.append(json.loads(line)["text"])
    return texts


def build_tiny_trunk(
    out_dir: str | Path,
    family: str = "gpt2",
    layers: int = 2,
    width: int = 32,
    vocab_size: int = 512,
    seed: int = 0,
    texts: Iterable[str] | None = None,
    heads: int = 2,
    max_positions: int = 512,
) -> Path:
    """Write a randomly initialised HF causal LM (safetensors) and a BPE tokenizer to ``out_dir``.

    Parameters
    ----------
    family : {"gpt2", "llama"}
        Architecture.
    layers, width, heads : int
        Blocks, hidden size, attention heads (``width`` divisible by ``heads``).
    vocab_size : int
        Target vocabulary of the tokenizer; the model's vocabulary is the tokenizer's.
    seed : int
        Seed of the weight initialisation (same seed, same weights, same fingerprint).
    texts : iterable of str, optional
        Tokenizer training text; default: a sample of the bundled corpus.

    Returns
    -------
    Path
        ``out_dir``, loadable with :func:`load_trunk`.
    """
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    from experts.tokenizer import train_bpe_tokenizer

    if family not in FAMILIES:
        raise ValueError(f"family {family!r} is not supported; choose one of {FAMILIES}")
    if width % heads:
        raise ValueError(f"width {width} must be divisible by heads {heads}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_bpe_tokenizer(corpus_sample() if texts is None else texts, vocab_size, out)
    vocab = len(tokenizer)
    eos = tokenizer.eos_token_id
    if family == "gpt2":
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=max_positions,
            n_embd=width,
            n_layer=layers,
            n_head=heads,
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
        )
    else:
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=width,
            intermediate_size=width * 4 // 3 * 2,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=max_positions,
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
            tie_word_embeddings=False,
        )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(str(out), safe_serialization=True)
    log.info(
        "built tiny %s trunk (%d layers, width %d, vocab %d) in %s",
        family,
        layers,
        width,
        vocab,
        out,
    )
    return out
