"""How alike two runs' discovered domains are, document by document.

Domain ids differ between runs, and which documents form a domain depends on the order
discover read them in; so each run's final table assigns the same documents (the stream's
texts, embedded once), each to its nearest domain as the serving gate would, and the two
assignments are compared by NMI (1.0: the same partition of the stream, whatever the
domains are called).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from monitor.cluster_agreement import nmi_purity
from router.embedders import default_embedder
from router.table_file import load_table

BATCH = 512  # texts embedded at a time


def assignments_nmi(texts: Sequence[str], ours: Path, theirs: Path) -> float | None:
    """NMI between the nearest-domain assignments of ``texts`` under two table files
    (``domains.json``); None when either table is missing or empty."""
    embedder = default_embedder()
    try:
        tables = [load_table(path, dim=embedder.dim) for path in (ours, theirs)]
    except ValueError:
        return None
    if not texts or not all(len(table) for table in tables):
        return None
    nearest: list[list[str]] = [[], []]
    for start in range(0, len(texts), BATCH):
        vectors = embedder.embed(list(texts[start : start + BATCH]))  # (n, dim)
        for side, table in enumerate(tables):
            nearest[side] += [table.nearest(v)[0] or "" for v in vectors]
    return nmi_purity(nearest[0], nearest[1])[0]
