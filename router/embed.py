"""Document embedders, the names most callers import: text -> unit float32 vectors.

Where each lives (import from here or from there, it is the same object):

- :class:`Embedder`, :func:`config_fingerprint`: the protocol, in :mod:`router.embedding`;
- :class:`HashedTfidfEmbedder`: the model-free default, in :mod:`router.embed_tfidf`
  (the optional ones: :mod:`router.embed_trunk`, :mod:`router.embed_sentence`);
- :func:`default_embedder`, :func:`hashed_tfidf_embedder`, :func:`make_embedder`: the
  factory, in :mod:`router.embedders`.

Example
-------
>>> default_embedder().fingerprint.startswith("hashed-tfidf-")
True
"""

from __future__ import annotations

from router.embed_tfidf import HashedTfidfEmbedder
from router.embedders import default_embedder, hashed_tfidf_embedder, make_embedder
from router.embedding import Embedder, config_fingerprint

__all__ = [
    "Embedder",
    "HashedTfidfEmbedder",
    "config_fingerprint",
    "default_embedder",
    "hashed_tfidf_embedder",
    "make_embedder",
]
