"""The frozen trunk: any local Hugging Face causal LM (GPT-2 and Llama families at least),
or our own reversible trunk (:mod:`experts.reversible`, GPT-2's layout where experts meet it).

The trunk is loaded once, frozen (``requires_grad_(False)``, eval mode) and identified by a
fingerprint: a sha256 over its configuration and the bytes of every weight tensor as stored
on disk, so the same directory gives the same fingerprint whatever dtype it is loaded in,
and an expert trained on one trunk can never be loaded onto another.

Tests and benches build tiny trunks from configs with
:func:`experts.testing.build_tiny_trunk` (random weights, a freshly trained byte-level BPE
tokenizer); nothing is ever downloaded.

Example
-------
>>> from worx.bundled import trunk_dir
>>> trunk = load_trunk(trunk_dir())  # the bundled default trunk
>>> trunk.family, trunk.num_layers, trunk.hidden_size
('gpt2', 4, 256)
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

# moved to experts.testing; bench/train.py still imports build_tiny_trunk from here
from experts.testing import build_tiny_trunk, corpus_sample  # noqa: F401
from worx.errors import UserError

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


TRUNK_HINT = (
    "give the directory of a Hugging Face causal LM (config.json, *.safetensors, tokenizer) "
    "with --trunk or experts.trunk_dir (WORX_EXPERTS__TRUNK_DIR), or leave both unset for "
    "the bundled trunk"
)


class TrunkError(UserError, ValueError):
    """A trunk directory that cannot be loaded (missing files, unknown architecture)."""

    def __init__(self, message: str, hint: str = TRUNK_HINT) -> None:
        super().__init__(message, hint)


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

    def num_params(self) -> int:
        return sum(param.numel() for param in self.model.parameters())

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
        "(transformer.h[i].mlp) or a Llama layout (model.layers[i].mlp)",
        "",
    )


def _block_list(model: nn.Module, family: str) -> nn.ModuleList:
    return model.transformer.h if family == "gpt2" else model.model.layers


def check_trunk_dir(path: str | Path) -> list[Path]:
    """The ``*.safetensors`` files of trunk directory ``path``, once it is one (a directory
    with ``config.json`` and safetensors weights); else :class:`TrunkError` saying which of
    those it is not. Cheap: nothing is hashed or loaded."""
    root = Path(path)
    if not root.exists():
        raise TrunkError(f"trunk directory {root} does not exist")
    if not root.is_dir():
        raise TrunkError(f"trunk {root} is a file, not a model directory")
    if not (root / "config.json").is_file():
        raise TrunkError(f"trunk {root} has no config.json: not a Hugging Face model directory")
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise TrunkError(
            f"trunk {root} has no *.safetensors weights",
            "re-save the model with save_pretrained(..., safe_serialization=True) "
            "(pickled .bin weights are refused)",
        )
    return files


def trunk_fingerprint(path: str | Path) -> str:
    """sha256 over the canonical config and every stored tensor (name, dtype, shape, bytes).

    Independent of sharding and of the dtype the model is later loaded in; changes when any
    weight bit or any computation-relevant config value changes.
    """
    root = Path(path)
    files = check_trunk_dir(root)
    config = json.loads((root / "config.json").read_text(encoding="utf-8"))
    for key in _VOLATILE_CONFIG_KEYS:
        config.pop(key, None)
    digest = hashlib.sha256()
    digest.update(json.dumps(config, sort_keys=True).encode())
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


def use_fused_gelu(model: nn.Module) -> int:
    """Swap GPT-2's Python ``gelu_new`` for PyTorch's fused kernel of the same formula
    (``gelu(approximate="tanh")``; float rounding apart, the same function: bench/train.py's
    ``dense_fused_gelu`` reaches the same perplexity to 4 decimals, faster and in less
    memory; a 16-row decode step of the bundled trunk 9.8 -> 8.5 ms). Every frozen trunk
    gets it (:func:`frozen_trunk`). Returns the number of activations swapped; other
    activations are left."""
    from transformers.activations import GELUTanh, NewGELUActivation

    swapped = 0
    for module in model.modules():
        if isinstance(getattr(module, "act", None), NewGELUActivation):
            module.act = GELUTanh()
            swapped += 1
    return swapped


def frozen_trunk(model: nn.Module, root: Path, fingerprint: str) -> Trunk:
    """``model`` (loaded from the directory ``root``) frozen and in eval mode, with the
    directory's tokenizer, as a :class:`Trunk`. Raises :class:`TrunkError` for an
    architecture with neither the GPT-2 nor the Llama block layout."""
    from transformers import AutoTokenizer

    model.requires_grad_(False)
    model.eval()
    use_fused_gelu(model)
    tokenizer = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    family = _family_of(model)
    return Trunk(
        model=model,
        tokenizer=tokenizer,
        fingerprint=fingerprint,
        hidden_size=int(model.config.hidden_size),
        num_layers=len(_block_list(model, family)),
        family=family,
        path=root,
    )


def load_trunk(path: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Trunk:
    """Load a local Hugging Face causal LM frozen, with its tokenizer and fingerprint.

    Raises
    ------
    TrunkError
        If ``path`` is not a model directory with safetensors weights, or the architecture
        has neither the GPT-2 nor the Llama block layout.
    """
    from transformers import AutoModelForCausalLM

    import experts.reversible  # noqa: F401 - registers our own model type "worx_reversible"

    root = Path(path)
    fingerprint = trunk_fingerprint(root)
    model = AutoModelForCausalLM.from_pretrained(
        str(root), dtype=dtype, local_files_only=True, use_safetensors=True
    )
    model.to(device)
    trunk = frozen_trunk(model, root, fingerprint)
    log.info(
        "loaded %s trunk %s: %d layers, width %d, %s, fingerprint %s",
        trunk.family,
        root,
        trunk.num_layers,
        trunk.hidden_size,
        dtype,
        fingerprint[:12],
    )
    return trunk
