"""How well discovered domains agree with the stream's given labels: normalised mutual
information (arithmetic-mean normalisation) and purity, from the joint counts of
(label, cluster) pairs. The demo's summary and bench/discovery.py score with it."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence


def nmi_purity_of_counts(joint: Mapping[tuple[str, str], int]) -> tuple[float, float]:
    """NMI and purity of a contingency table ``{(label, cluster): documents}``.

    NMI is ``2 I(L; C) / (H(L) + H(C))``, 1.0 when both entropies are 0 (one label, one
    cluster); purity is the share of documents in their cluster's majority label.

    Raises
    ------
    ValueError
        The table counts no document.
    """
    n = sum(joint.values())
    if n <= 0:
        raise ValueError("nmi of no documents")
    lab: Counter = Counter()
    clu: Counter = Counter()
    for (label, cluster), count in joint.items():
        lab[label] += count
        clu[cluster] += count
    mi = sum(c / n * math.log(c * n / (lab[a] * clu[b])) for (a, b), c in joint.items() if c > 0)
    h_lab = -sum(c / n * math.log(c / n) for c in lab.values() if c > 0)
    h_clu = -sum(c / n * math.log(c / n) for c in clu.values() if c > 0)
    nmi = 2 * mi / (h_lab + h_clu) if h_lab + h_clu > 0 else 1.0
    best: dict[str, int] = {}
    for (_label, cluster), count in joint.items():
        best[cluster] = max(best.get(cluster, 0), count)
    return nmi, sum(best.values()) / n


def nmi_purity(labels: Sequence[str], clusters: Sequence[str]) -> tuple[float, float]:
    """:func:`nmi_purity_of_counts` of two aligned lists: document i has ``labels[i]`` and
    was put in ``clusters[i]``."""
    return nmi_purity_of_counts(Counter(zip(labels, clusters, strict=True)))
