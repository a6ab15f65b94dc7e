"""How alike two runs' discovered domains are, document by document.

Domain ids differ between runs, and which documents form a domain depends on the order
discover read them in; so each run's final table assigns the same documents (the stream's
texts, embedded once), each to its nearest domain as the serving gate would, and the two
assignments are compared by NMI (1.0: the same partition of the stream, whatever the
domains are called). By label, each domain is replaced by its label hint first: two runs
that split one kind into a different number of domains still agree there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from monitor.cluster_agreement import nmi_purity
from router.embedders import default_embedder
from router.table_file import load_table

BATCH = 512  # texts embedded at a time


def agreement(texts: Sequence[str], ours: Path, theirs: Path) -> dict[str, float | None]:
    """``domains_nmi`` and ``labels_nmi`` of the nearest-domain assignments of ``texts``
    under two table files (``domains.json``); None when either table is missing or empty."""
    embedder = default_embedder()
    try:
        tables = [load_table(path, dim=embedder.dim) for path in (ours, theirs)]
    except ValueError:
        return {"domains_nmi": None, "labels_nmi": None}
    if not texts or not all(len(table) for table in tables):
        return {"domains_nmi": None, "labels_nmi": None}
    nearest: list[list[str]] = [[], []]
    for start in range(0, len(texts), BATCH):
        vectors = embedder.embed(list(texts[start : start + BATCH]))  # (n, dim)
        for side, table in enumerate(tables):
            nearest[side] += [table.nearest(v)[0] or "" for v in vectors]
    hints = [{row.domain_id: row.label_hint or row.domain_id for row in t.rows()} for t in tables]
    by_label = [[hint.get(d, d) for d in side] for hint, side in zip(hints, nearest, strict=True)]
    return {
        "domains_nmi": nmi_purity(nearest[0], nearest[1])[0],
        "labels_nmi": nmi_purity(by_label[0], by_label[1])[0],
    }


def stream_texts(path: Path) -> list[str]:
    """The texts of a run's stream file (``stream.jsonl``; its malformed lines skipped)."""
    texts = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            try:
                body = json.loads(line)
            except ValueError:
                continue
            if isinstance(body, dict) and isinstance(body.get("text"), str):
                texts.append(body["text"])
    return texts
