"""The demo's ``nmi``: a finished run's domain table against the labels of the stream it was
fed, every document embedded as the stages embed it and put in its nearest domain
(:func:`monitor.run_summary.nearest_domain_nmi`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from ingest.normalise import InvalidUnicode, normalise_text
from ingest.scenario import LabelledDoc
from monitor.run_summary import nearest_domain_nmi
from router.embed import default_embedder
from router.table_file import FILE as DOMAINS_FILE
from router.table_file import load_table
from topology.composition.worx_config import load_config

log = logging.getLogger(__name__)


def final_domains_nmi(
    run_dir: Path, documents: Sequence[LabelledDoc], stage_env: Mapping[str, str]
) -> float | None:
    """NMI of ``documents`` (their text normalised as ingest does) in their nearest domain of
    ``<run_dir>/domains.json`` against their labels, with the embedder the stages built
    from ``stage_env`` (their environment). None when the table was made by another
    embedder (its rows name one) or no document has a text."""
    embedder = default_embedder(load_config(env=stage_env).router)
    table = load_table(run_dir / DOMAINS_FILE, embedder.dim)
    others = {row.embedder for row in table.rows() if row.embedder} - {embedder.fingerprint}
    if others:
        log.warning("nmi left out: the domains were embedded by %s, not %s", others, embedder)
        return None
    labels, texts = [], []
    for doc in documents:
        try:
            text = normalise_text(doc.text)
        except InvalidUnicode:  # ingest dead-letters it: never routed
            continue
        if text.strip():
            labels.append(doc.domain)
            texts.append(text)
    return nearest_domain_nmi(labels, embedder.embed(texts), table)
