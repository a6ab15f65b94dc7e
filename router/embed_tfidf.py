"""The default embedder, :class:`HashedTfidfEmbedder`: hashed TF-IDF, no model.

Words and byte n-grams of the lower-cased text are hashed with a fixed,
process-independent hash (never ``hash()``, which changes with ``PYTHONHASHSEED``),
weighted by sublinear term frequency times a *fixed* inverse document frequency, and
hashed into ``dim`` signed buckets. Signed feature hashing is a sparse random projection
of the huge TF-IDF vector, so cosine similarities of the small vectors approximate those
of the full ones.

A third kind of feature describes a text's *form* rather than its words
(:func:`router.features.shape_codes`: letters, digits and space runs reduced to classes,
indentation and punctuation kept; n-grams of that, IDF-weighted like the rest). Without
it, two layouts of one domain (a module of code and a codec table; Gene Ontology process
and enzyme-activity definitions) share almost no words and split into two domains, while
prose domains that share their common words look alike; with it the nearest labelled
centroid cosine between different bundled domains falls from 0.68 to 0.45 and those
domains stay whole (docs/discovery.md has the figures).

Why a fixed IDF table (``router/idf_table.json``) rather than none or a fitted-online one:
without IDF every English text shares the same heavy function words and n-grams ("the",
" th", "ing"), domain centroids sit at cosine ~0.65 from each other and a new domain hides
inside an old one's threshold; with IDF they fall to ~0.2-0.3. An IDF fitted online would be
state that every route worker, the discover stage and the inference gate must share
and version. The table is fitted once, offline (``python -m router.idf``), keeps only
features that occur in at least ``min_df`` of the documents (function words, common
n-grams: what IDF exists to damp), and every rarer feature gets the maximum weight. It
was checked to generalise: fitted on four of the bundled domains it separates the other
three as well as a table fitted on them. The table's sha256 is part of the
:attr:`fingerprint`; a centroid is only comparable with vectors of the same fingerprint.

Example
-------
>>> emb = HashedTfidfEmbedder(dim=64)
>>> x = emb.embed(["def f(x):\\n    return x", "The court held that the licence applies."])
>>> x.shape, x.dtype
((2, 64), dtype('float32'))
>>> bool(abs(float((x[0] ** 2).sum()) - 1.0) < 1e-5)
True
>>> bool((emb.embed(["def f(x):\\n    return x"]) == x[:1]).all())
True
"""

from __future__ import annotations

import logging

import numpy as np

from router.embed_hashing import embed_batch
from router.embedding import config_fingerprint, embed_in_batches
from router.features import SHAPE_NGRAMS, feature_blocks, normalise_text, shape_hashes
from router.idf import IdfTable, load_default_table

log = logging.getLogger(__name__)

# Texts per call of router.embed_hashing.embed_batch: the vectors do not depend on it; 32-64
# was the fastest here (fewer texts: more calls; more: arrays that leave the CPU caches).
_BATCH = 64
# Below this many texts the per-call cost of the batch path outweighs what it saves: one
# text (RouteStage.process) goes through embed_one, which gives the same vector
_FEWEST_FOR_BATCH = 3


class HashedTfidfEmbedder:
    """Hashed TF-IDF embedding of words and byte n-grams, with a fixed IDF table.

    Parameters
    ----------
    dim : int
        Output dimension (number of signed hash buckets).
    char_ngrams : tuple of int
        Orders of the byte n-grams taken over the lower-cased, whitespace-collapsed text.
    word_weight : float
        Weight of the word block relative to each n-gram block (every block is unit norm
        before weighting).
    tf_cap : float
        Upper bound of ``1 + log(tf)``: a feature repeated hundreds of times cannot
        dominate a document.
    max_chars : int
        Only the first ``max_chars`` characters are embedded (bounds the cost per document).
    shape_weight : float
        Weight of the form block (n-grams of orders ``shape_ngrams`` of
        :func:`router.features.shape_codes`, weighted by the same fixed IDF table) relative
        to each content block; 0 turns it off.
    shape_ngrams : tuple of int
        Orders of the form block's n-grams (all orders in one block).
    idf : IdfTable or None
        Fixed IDF weights; ``None`` loads the bundled table; :meth:`IdfTable.empty` turns
        IDF off (every feature weight 1).
    legacy : bool
        Embed text by text with :meth:`embed_one` (the code path before
        :mod:`router.embed_hashing`, ~3x the CPU per text; the same vectors bit for bit);
        kept so that ``bench/stream.py`` can measure both in one run.
    """

    VERSION = 4  # bump when the algorithm changes: it is part of the fingerprint

    def __init__(
        self,
        dim: int = 256,
        char_ngrams: tuple[int, ...] = (3, 4, 5),
        word_weight: float = 1.0,
        tf_cap: float = 4.0,
        max_chars: int = 4000,
        idf: IdfTable | None = None,
        shape_weight: float = 0.0,
        shape_ngrams: tuple[int, ...] = SHAPE_NGRAMS,
        legacy: bool = False,
    ) -> None:
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim}")
        if not char_ngrams or any(n < 1 for n in char_ngrams):
            raise ValueError(f"char_ngrams must be positive n-gram orders, got {char_ngrams}")
        self.name = "hashed-tfidf"
        self.dim = int(dim)
        self.char_ngrams = tuple(int(n) for n in char_ngrams)
        self.word_weight = float(word_weight)
        self.tf_cap = float(tf_cap)
        self.max_chars = int(max_chars)
        self.shape_weight = float(shape_weight)
        self.shape_ngrams = tuple(int(n) for n in shape_ngrams)
        self.idf = idf if idf is not None else load_default_table()
        self.legacy = bool(legacy)
        if tuple(self.idf.char_ngrams) and tuple(self.idf.char_ngrams) != self.char_ngrams:
            log.warning(
                "IDF table was fitted for n-grams %s, embedding uses %s: orders without "
                "a fitted table get weight idf_max",
                self.idf.char_ngrams,
                self.char_ngrams,
            )
        self._fingerprint = config_fingerprint(self.config)

    @property
    def config(self) -> dict:
        return {
            "name": self.name,
            "version": self.VERSION,
            "dim": self.dim,
            "char_ngrams": list(self.char_ngrams),
            "word_weight": self.word_weight,
            "tf_cap": self.tf_cap,
            "max_chars": self.max_chars,
            "idf_sha256": self.idf.sha256,
            "shape_weight": self.shape_weight,
            "shape_ngrams": list(self.shape_ngrams),
        }

    @property
    def fingerprint(self) -> str:
        """``hashed-tfidf-<12 hex>``: a hash of everything that determines the vectors."""
        return self._fingerprint

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``; returns ``(len(texts), dim)`` float32, rows of unit norm."""
        return embed_in_batches(texts, self.dim, _BATCH, self._embed_batch)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        if not self.legacy and len(texts) >= _FEWEST_FOR_BATCH:
            return embed_batch(self, texts)  # (b, dim)
        return np.stack([self.embed_one(text) for text in texts])  # (b, dim)

    def embed_one(self, text: str) -> np.ndarray:
        """Embed one text; returns ``(dim,)`` float32 of unit norm (zeros for empty text)."""
        content = normalise_text(text, self.max_chars)
        if not content:
            return np.zeros(self.dim, dtype=np.float32)
        vec = np.zeros(self.dim, dtype=np.float64)  # (dim,)
        weights = [self.word_weight] + [1.0] * len(self.char_ngrams)
        for weight, hashes in zip(weights, feature_blocks(content, self.char_ngrams), strict=True):
            if weight > 0 and hashes.size:
                vec += weight * self._project(hashes)
        if self.shape_weight > 0:
            form = shape_hashes(text, self.max_chars, self.shape_ngrams)
            if form.size:
                vec += self.shape_weight * self._project(form)
        norm = np.linalg.norm(vec)
        if norm == 0:
            return np.zeros(self.dim, dtype=np.float32)
        return (vec / norm).astype(np.float32)

    def _project(self, hashes: np.ndarray) -> np.ndarray:
        """TF-IDF weights of one block's features, signed-hashed into ``dim``, unit norm."""
        uniq, counts = np.unique(hashes, return_counts=True)  # (F,), (F,)
        weights = np.minimum(1.0 + np.log(counts), self.tf_cap) * self.idf.lookup(uniq)  # (F,)
        buckets = (uniq % np.uint64(self.dim)).astype(np.int64)  # (F,)
        signs = np.where((uniq >> np.uint64(63)) == 0, 1.0, -1.0)  # top bit: not the bucket's
        out = np.bincount(buckets, weights=weights * signs, minlength=self.dim)  # (dim,)
        norm = np.linalg.norm(out)
        return out / norm if norm > 0 else out
