"""The inference-time gate: document embedding -> ``{expert_id: weight}`` (c-BTM style).

Cosine similarity of the document's embedding to each expert's domain centroid; the
``top_k`` most similar experts whose similarity reaches ``min_similarity`` get weights
``softmax(similarity / temperature)``; none close enough gives ``{}`` ("trunk only").
Experts are keyed by id, never by position: the index sorts ids, and ties are broken by
id, so adding an unrelated expert cannot change the weights of a document whose top-k
it does not enter.

Example
-------
>>> import numpy as np
>>> index = CentroidIndex(["code", "legal"], np.array([[1.0, 0.0], [0.0, 1.0]]))
>>> Gate(top_k=1).route(np.array([0.9, 0.1]), index)
{'code': 1.0}
>>> Gate(top_k=1, min_similarity=0.95).route(np.array([0.7, 0.7]), index)
{}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


class CentroidIndex:
    """Experts' unit-norm centroids as one ``(E, dim)`` float32 matrix, rows in sorted id order.

    Parameters
    ----------
    ids : sequence of str
        Expert ids (unique).
    centroids : array-like, shape (E, dim)
        One centroid per id (normalised here; a zero row never matches anything).
    """

    def __init__(
        self, ids: Sequence[str], centroids: np.ndarray | Sequence[Sequence[float]]
    ) -> None:
        matrix = np.asarray(centroids, dtype=np.float32)
        matrix = matrix.reshape(len(ids), matrix.shape[-1] if matrix.size else 0)  # (E, dim)
        if len(set(ids)) != len(ids):
            raise ValueError("expert ids in a centroid index must be unique")
        order = sorted(range(len(ids)), key=lambda i: ids[i])
        self.ids: list[str] = [ids[i] for i in order]
        matrix = matrix[order]  # (E, dim)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)  # (E, 1)
        self.matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
        self.dim = matrix.shape[1] if len(ids) else 0

    @classmethod
    def from_mapping(cls, centroids: Mapping[str, Sequence[float]]) -> CentroidIndex:
        ids = list(centroids)
        return cls(ids, [list(centroids[i]) for i in ids])

    def __len__(self) -> int:
        return len(self.ids)


class Gate:
    """Top-k cosine gate with temperature and a "trunk only" threshold.

    Parameters
    ----------
    top_k : int
        Largest number of experts mixed for one document.
    temperature : float
        Softmax temperature over the chosen experts' similarities (small: near one-hot).
    min_similarity : float
        Experts less similar than this are never chosen; nothing above it: ``{}``.
    """

    def __init__(
        self, top_k: int = 1, temperature: float = 0.1, min_similarity: float = 0.0
    ) -> None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if not -1.0 <= min_similarity <= 1.0:
            raise ValueError(f"min_similarity must be in [-1, 1], got {min_similarity}")
        self.top_k = int(top_k)
        self.temperature = float(temperature)
        self.min_similarity = float(min_similarity)

    def similarities(self, embeddings: np.ndarray, index: CentroidIndex) -> np.ndarray:
        """Cosine similarities ``(N, E)`` of unit-norm ``embeddings (N, dim)`` to the index."""
        x = np.asarray(embeddings, dtype=np.float32)
        if x.ndim == 1:
            x = x[None, :]  # (1, dim)
        if len(index) and x.shape[1] != index.dim:
            raise ValueError(
                f"embedding dimension {x.shape[1]} != centroid dimension {index.dim}: the gate and "
                "the experts' centroids must use the same embedder"
            )
        return x @ index.matrix.T  # (N, E)

    def route(self, embedding: np.ndarray, index: CentroidIndex) -> dict[str, float]:
        """Weights for one document embedding ``(dim,)``."""
        return self.route_many(np.asarray(embedding)[None, :], index)[0]

    def route_many(self, embeddings: np.ndarray, index: CentroidIndex) -> list[dict[str, float]]:
        """Weights for each row of ``embeddings (N, dim)``."""
        if len(index) == 0:
            return [{} for _ in range(len(embeddings))]
        sims = self.similarities(embeddings, index)  # (N, E)
        k = min(self.top_k, sims.shape[1])
        out = []
        for row in sims:
            kth = np.partition(row, row.shape[0] - k)[row.shape[0] - k]  # k-th largest similarity
            candidates = np.nonzero(row >= max(kth, self.min_similarity))[0]  # ties all kept
            # Stable order: by similarity, then by id (indices are in sorted id order).
            chosen = sorted((int(i) for i in candidates), key=lambda i: (-row[i], i))[:k]
            if not chosen:
                out.append({})
                continue
            logits = np.array([row[i] for i in chosen], dtype=np.float64) / self.temperature
            probs = np.exp(logits - logits.max())
            probs /= probs.sum()
            out.append({index.ids[i]: float(p) for i, p in zip(chosen, probs, strict=True)})
        return out

    def weights(
        self, embedding: np.ndarray, centroids: Mapping[str, Sequence[float]]
    ) -> dict[str, float]:
        """Convenience: weights for one embedding against ``{expert_id: centroid}``."""
        return self.route(embedding, CentroidIndex.from_mapping(centroids))
