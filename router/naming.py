"""Human names for domains: the majority given label, else the cluster's distinctive terms.

A domain's ``name`` is set by discover when it promotes a core and refreshed when the
domain drifts. Where the stream carries labels (``Doc.label``, passed on in
``RoutedDoc.label``), the name is the majority label of the members. Otherwise it is the
cluster's most distinctive words, c-BTM style: each novel document keeps its few top
TF-IDF words (IDF: the default embedder's fixed table, whatever the embedder), and a
cluster is named by the words that are frequent among its members and rare among the
other buffered documents, e.g. ``"plaintiff·statute·court"``.

:func:`display_name` is what every view shows: the name, else the label, else the id.

Example
-------
>>> members = [{"terms": ["plaintiff", "court", "appeal"]},
...            {"terms": ["court", "plaintiff", "statute"]},
...            {"terms": ["statute", "court", "plaintiff"]}]
>>> others = [{"terms": ["protein", "cell", "court"]}, {"terms": ["cell", "gene"]}]
>>> domain_name(members, others)
'plaintiff·statute·court'
>>> domain_name([{"label": "legal", "terms": ["court"]}] * 3, others)
'legal'
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from router.features import feature_blocks
from router.idf import load_default_table

SEPARATOR = "·"
TERMS_PER_DOC = 8  # distinctive words a buffered document keeps for naming
NAME_TERMS = 3  # words in a term name
MAX_CHARS = 4000  # characters of a document read for its terms
_WORD = re.compile(r"\w+", re.UNICODE)


def display_name(record: Any) -> str:
    """What a person reads for a domain: its ``name``, else its ``label_hint``, else its id.

    ``record`` is a :class:`router.records.DomainRecord`, a mapping of its fields (a row
    read from JSON), or None (``""``); a record without a name (written before names
    existed) falls back, never fails.

    >>> display_name({"domain_id": "dom-1", "label_hint": "legal"})
    'legal'
    >>> display_name({"domain_id": "dom-1"})
    'dom-1'
    """
    if record is None:
        return ""
    get = record.get if isinstance(record, Mapping) else lambda k: getattr(record, k, None)
    for key in ("name", "label_hint", "domain_id"):
        value = get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def doc_terms(text: str, k: int = TERMS_PER_DOC) -> list[str]:
    """The ``k`` words of ``text`` with the highest TF-IDF (sublinear TF; IDF from the
    fixed table).

    Words are lower-cased; numbers, one- and two-letter words are skipped.

    >>> doc_terms("The court held that the plaintiff's appeal fails; the court ruled.", k=2)
    ['court', 'appeal']
    """
    text = text[:MAX_CHARS].lower()
    words = _WORD.findall(text)
    if not words:
        return []
    hashes = feature_blocks(text, ())[0]  # (words,) the IDF table's keys, in order
    idf = load_default_table().lookup(hashes)  # (words,)
    tf: Counter = Counter()
    weight: dict[str, float] = {}
    for word, w in zip(words, idf.tolist(), strict=True):
        if len(word) < 3 or word.isdigit() or word.startswith("_"):
            continue
        tf[word] += 1
        weight[word] = w
    score = {word: (1.0 + math.log(count)) * weight[word] for word, count in tf.items()}
    ranked = sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))
    return [word for word, _ in ranked[:k]]


def majority_label(docs: Iterable[Mapping[str, Any]]) -> str | None:
    """The most common given ``label`` of ``docs`` (ties: the first seen), None without."""
    labels = Counter(d["label"] for d in docs if d.get("label"))
    return labels.most_common(1)[0][0] if labels else None


def term_name(
    members: list[Mapping[str, Any]],
    others: list[Mapping[str, Any]],
    n: int = NAME_TERMS,
) -> str | None:
    """The ``n`` words most distinctive of ``members`` against ``others`` (their ``terms``),
    joined by ``·``; None when no word is shared by two members.

    A word scores its share among the members times the log-ratio of that share to its
    (smoothed) share among the others: frequent here, rare elsewhere.
    """
    inside = Counter(t for d in members for t in set(d.get("terms") or ()))
    outside = Counter(t for d in others for t in set(d.get("terms") or ()))
    n_in, n_out = max(len(members), 1), len(others)
    scored = []
    for term, count in inside.items():
        if count < 2:
            continue
        p_in = count / n_in
        p_out = (outside.get(term, 0) + 0.5) / (n_out + 1.0)
        scored.append((p_in * math.log(max(p_in / p_out, 1e-9)), count, term))
    scored.sort(key=lambda s: (-s[0], -s[1], s[2]))
    chosen = [term for score, _, term in scored if score > 0][:n]
    return SEPARATOR.join(chosen) if chosen else None


def domain_name(members: list[Mapping[str, Any]], others: list[Mapping[str, Any]]) -> str | None:
    """The name of a domain made of ``members`` (buffer items: ``label``, ``terms``):
    their majority label where they carry labels, else :func:`term_name` against
    ``others``; None when neither says anything."""
    return majority_label(members) or term_name(members, others)
