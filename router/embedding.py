"""What every embedder is: the :class:`Embedder` protocol, its fingerprint, its batching.

An embedder turns texts into L2-normalised float32 vectors, identical in every process.
Each kind lives in its own module (:mod:`router.embed_tfidf`, :mod:`router.embed_trunk`,
:mod:`router.embed_sentence`) and builds on the two helpers here: :func:`config_fingerprint`
(a hash of everything that determines its vectors) and :func:`embed_in_batches` (the one
loop that skips empty texts and fills the output rows batch by batch). Pick one by name
with :func:`router.embedders.make_embedder`.

This module imports nothing of the embedders, so they can all import it.

Example
-------
>>> import numpy as np
>>> config_fingerprint({"name": "demo", "dim": 2})
'demo-41411d0789b7'
>>> embed_in_batches(["ab", "", "c"], 2, 2, lambda batch: np.ones((len(batch), 2), np.float32))
array([[1., 1.],
       [0., 0.],
       [1., 1.]], dtype=float32)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """What routing, discovery and the inference gate need from an embedder.

    ``embed`` returns shape ``(N, dim)`` float32 rows of unit L2 norm (an empty text gives
    a zero row, the only exception). ``fingerprint`` changes whenever the vectors would.
    """

    name: str
    dim: int

    @property
    def fingerprint(self) -> str: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


def config_fingerprint(config: dict) -> str:
    """``<config["name"]>-<12 hex>``: a hash of an embedder's ``config`` (everything that
    determines its vectors), shared by every embedder."""
    blob = json.dumps(config, sort_keys=True).encode()
    return f"{config['name']}-{hashlib.sha256(blob).hexdigest()[:12]}"


def embed_in_batches(
    texts: list[str],
    dim: int,
    batch_size: int,
    encode: Callable[[list[str]], np.ndarray],
) -> np.ndarray:
    """Embed ``texts`` with ``encode`` (a batch of non-empty texts -> ``(b, dim)`` rows).

    Returns ``(len(texts), dim)`` float32; empty or whitespace-only texts give zero rows
    and are never passed to ``encode``.

    Raises
    ------
    TypeError
        If ``texts`` is one string rather than a list of them.
    """
    if isinstance(texts, str):
        raise TypeError("embed() takes a list of texts, not one string; wrap it: [text]")
    out = np.zeros((len(texts), dim), dtype=np.float32)  # (N, dim)
    keep = [i for i, text in enumerate(texts) if text.strip()]
    for start in range(0, len(keep), batch_size):
        rows = keep[start : start + batch_size]
        out[rows] = encode([texts[i] for i in rows])  # (b, dim)
    return out
