"""Optional embedder: mean-pooled hidden states of the frozen trunk.

A document is embedded by running the trunk (any local Hugging Face causal LM, loaded with
:func:`experts.trunk.load_trunk`) over its first ``max_tokens`` tokens and averaging one
layer's hidden states over the real tokens (padding is masked out), then L2-normalising.
The :attr:`TrunkEmbedder.fingerprint` hashes the trunk's fingerprint (config + weight
bytes) with the settings, so centroids made with another trunk, layer or length are
never compared with these vectors.

It needs only what the trunk already needs (torch, transformers); it is an *option*: the
default embedder (:func:`router.embedders.default_embedder`) needs no model. Whichever is
chosen, route, discover and the inference gate must all use the same one.

Example
-------
>>> from worx.bundled import trunk_dir
>>> emb = TrunkEmbedder(trunk_dir(), layer=-1, max_tokens=256)  # the bundled trunk
>>> x = emb.embed(["def f(x):\\n    return x", ""])
>>> x.shape, float(abs(x[0]).sum()) > 0, float(abs(x[1]).sum())
((2, 256), True, 0.0)
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from router.embedding import config_fingerprint, embed_in_batches

try:
    import torch
    import transformers  # noqa: F401 - load_trunk needs it; fail here, with the fix
except ImportError as exc:  # pragma: no cover - both are core dependencies
    raise ImportError(
        "the trunk embedder needs torch and transformers: "
        "pip install 'trainingworx[embedders]' (or: pip install torch transformers)"
    ) from exc

log = logging.getLogger(__name__)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``hidden`` ``(B, T, H)`` over positions where ``mask`` ``(B, T)`` is 1.

    Rows with no real token give zeros (never NaN).
    """
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    total = (hidden * weights).sum(dim=1)  # (B, H)
    count = weights.sum(dim=1).clamp(min=1.0)  # (B, 1)
    return total / count  # (B, H)


class TrunkEmbedder:
    """Mean-pooled (attention-mask aware) hidden states of a frozen causal LM, unit norm.

    Parameters
    ----------
    trunk_dir : str or Path
        A local Hugging Face model directory with safetensors weights (see
        :func:`experts.trunk.load_trunk`).
    layer : int
        Index into the model's ``hidden_states``: ``0`` is the token embeddings, ``i`` the
        output of block ``i``, ``-1`` the last (after the final norm where the model applies
        one). Must lie in ``[-(L+1), L]`` for a trunk of ``L`` blocks.
    max_tokens : int
        Only the first ``max_tokens`` tokens of a document are embedded.
    batch_size : int
        Documents per forward pass.
    device : str
        Torch device of the trunk (``"cpu"``, ``"cuda"``...); not part of the fingerprint.

    Raises
    ------
    ValueError
        For a bad ``layer``, ``max_tokens`` or ``batch_size``.
    experts.trunk.TrunkError
        If ``trunk_dir`` is not a loadable trunk.
    """

    VERSION = 1  # bump when the pooling changes: it is part of the fingerprint

    def __init__(
        self,
        trunk_dir: str | Path,
        layer: int = -1,
        max_tokens: int = 256,
        batch_size: int = 8,
        device: str = "cpu",
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        from experts.trunk import load_trunk

        self.trunk = load_trunk(trunk_dir, device=device)
        n_states = self.trunk.num_layers + 1  # embeddings + one per block
        if not -n_states <= layer < n_states:
            raise ValueError(
                f"layer {layer} out of range: the trunk has {self.trunk.num_layers} blocks, "
                f"so layer must lie in [{-n_states}, {n_states - 1}]"
            )
        self.name = "trunk"
        self.layer = int(layer) % n_states  # canonical, so -1 and L fingerprint alike
        self.max_tokens = int(max_tokens)
        self.batch_size = int(batch_size)
        self.dim = int(self.trunk.hidden_size)
        self._fingerprint = config_fingerprint(self.config)
        log.info("trunk embedder %s: layer %d, dim %d", self._fingerprint, self.layer, self.dim)

    @property
    def config(self) -> dict:
        return {
            "name": self.name,
            "version": self.VERSION,
            "trunk": self.trunk.fingerprint,
            "layer": self.layer,
            "max_tokens": self.max_tokens,
            "dim": self.dim,
        }

    @property
    def fingerprint(self) -> str:
        """``trunk-<12 hex>``: a hash of the trunk fingerprint, layer and token limit."""
        return self._fingerprint

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``; returns ``(len(texts), dim)`` float32, rows of unit norm.

        Empty (or whitespace-only) texts give zero rows, as with the default embedder.
        """
        return embed_in_batches(texts, self.dim, self.batch_size, self._embed_batch)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """``(b, dim)`` unit rows for ``b`` non-empty texts: one forward pass."""
        batch = self.trunk.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.max_tokens,
            return_tensors="pt",
            padding_side="right",  # real tokens never attend to pads (causal mask)
        )
        ids = batch["input_ids"].to(self.trunk.device)  # (B, T)
        mask = batch["attention_mask"].to(self.trunk.device)  # (B, T)
        base = self.trunk.model.base_model  # the decoder without the LM head: no logits
        with torch.inference_mode():
            states = base(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            hidden = states.hidden_states[self.layer].float()  # (B, T, H)
            pooled = torch.nn.functional.normalize(mean_pool(hidden, mask), dim=-1)  # (B, H)
        return pooled.cpu().numpy()
