"""Domain rows built from real documents, as discover promotes them."""

from __future__ import annotations

import numpy as np

from router.records import DomainRecord
from worx.bundled import domain_texts


def _unit(v) -> np.ndarray:
    x = np.asarray(v, dtype=np.float32)
    return x / np.linalg.norm(x)


def promoted_row(embedder, domain: str, count: int = 100, core: int = 70) -> DomainRecord:
    """A row as discover promotes one: a dense core (the ``core`` of ``count`` whole
    documents nearest their mean), threshold = min(2 % quantile, mean - 3 std) of the core's
    cosines to its centroid, cohesion = their mean (router/discover.py's rule)."""
    vectors = embedder.embed(domain_texts(domain, count))  # (count, dim)
    nearest = np.argsort(-(vectors @ _unit(vectors.mean(axis=0))))[:core]
    centroid = _unit(vectors[nearest].mean(axis=0))
    sims = (vectors[nearest] @ centroid).astype(np.float64)  # (core,)
    threshold = min(float(np.quantile(sims, 0.02)), float(sims.mean() - 3 * sims.std()))
    return DomainRecord(domain, centroid.tolist(), threshold, core, float(sims.mean()))
