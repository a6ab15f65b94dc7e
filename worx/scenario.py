"""Seeded stream scenarios over a labelled corpus: phases, mixtures, interleavings.

A corpus is a directory of JSON-lines files (``*.jsonl`` or ``*.jsonl.gz``), one object
per line with ``text`` and, optionally, ``id``, ``domain`` (the label; default: the file
name without extension) and ``source`` -- the format of the bundled ``data/corpus``.
Every scenario is a pure function of the corpus and its ``seed``: the same arguments
give the same stream, in any process. Files are read with :func:`worx.bundled.read_lines`.

Example
-------
>>> sc = Scenario.from_directory()  # the bundled seven-domain corpus
>>> stream = list(sc.phased(["legal", "news"], per_domain=3, seed=1))
>>> [d.domain for d in stream]
['legal', 'legal', 'legal', 'news', 'news', 'news']
>>> stream == list(sc.phased(["legal", "news"], per_domain=3, seed=1))
True
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from worx.bundled import CorpusError, corpus_dir, read_lines
from worx.company_stream import CompanyShape, company_schedule
from worx.errors import did_you_mean

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class LabelledDoc:
    doc_id: str  # safe and unique within a stream (a repeat gets a ".r<n>" suffix)
    domain: str  # the label
    text: str
    source: str = ""

    def to_json_line(self) -> str:
        """The corpus line format, as ingest's file connector reads it."""
        return json.dumps(
            {"id": self.doc_id, "domain": self.domain, "source": self.source, "text": self.text},
            ensure_ascii=False,
        )


def safe_doc_id(raw: str) -> str:
    """Map a corpus id ("news/ca04/0") to a safe id ("news_ca04_0") for worx.ids.validate_id."""
    cleaned = _UNSAFE.sub("_", raw).strip("._-")[:128]
    return cleaned or "doc"


def read_corpus(directory: str | Path | None = None) -> dict[str, list[LabelledDoc]]:
    """Read every ``*.jsonl[.gz]`` of ``directory`` (default: the bundled corpus; a preset
    name such as ``many`` reads its parts, see :func:`worx.bundled.corpus_parts`):
    domain -> documents in file order.

    Raises
    ------
    CorpusError
        For a directory without corpus files or a line without a ``text``.
    """
    domains: dict[str, list[LabelledDoc]] = {}
    seen: set[str] = set()
    for line in read_lines(directory):
        body, default_domain = line.body, line.domain
        domain = str(body.get("domain") or default_domain)
        doc_id = safe_doc_id(str(body.get("id") or f"{default_domain}-{line.number}"))
        if doc_id in seen:
            doc_id = safe_doc_id(f"{doc_id}-{line.path.stem}-{line.number}")
        seen.add(doc_id)
        source = str(body.get("source", ""))
        domains.setdefault(domain, []).append(LabelledDoc(doc_id, domain, line.text, source))
    root = directory if directory is not None else corpus_dir()
    log.info("corpus %s: %s", root, {d: len(v) for d, v in domains.items()})
    return domains


class Scenario:
    """Streams over one corpus. Every method takes a ``seed`` and is deterministic in it."""

    def __init__(self, domains: dict[str, list[LabelledDoc]]) -> None:
        if not domains:
            raise CorpusError("a scenario needs at least one domain")
        self.domains = domains

    @classmethod
    def from_directory(cls, directory: str | Path | None = None) -> Scenario:
        return cls(read_corpus(directory))

    @property
    def names(self) -> list[str]:
        return sorted(self.domains)

    def _check(self, names: Sequence[str] | None) -> list[str]:
        chosen = list(names) if names is not None else self.names
        unknown = [n for n in chosen if n not in self.domains]
        if unknown:
            named = ", ".join(f"{n!r}{did_you_mean(n, self.names)}" for n in unknown)
            raise CorpusError(
                f"unknown domain(s) {named}", f"this corpus has {', '.join(self.names)}"
            )
        return chosen

    def _shuffled(self, name: str, rng: random.Random) -> list[LabelledDoc]:
        docs = list(self.domains[name])
        rng.shuffle(docs)
        return docs

    def phased(
        self, order: Sequence[str] | None = None, per_domain: int | None = None, seed: int = 0
    ) -> Iterator[LabelledDoc]:
        """All of domain A (shuffled), then all of B, ...; ``per_domain`` caps each phase."""
        rng = random.Random(seed)
        for name in self._check(order):
            yield from self._shuffled(name, rng)[:per_domain]

    def mixture(
        self,
        n: int,
        domains: Sequence[str] | None = None,
        weights: Sequence[float] | None = None,
        seed: int = 0,
    ) -> Iterator[LabelledDoc]:
        """``n`` documents drawn i.i.d. from a fixed mixture (a stationary stream).

        Each domain is walked in its own shuffled order; when a domain runs out, it starts
        again (reshuffled) and the repeats get ids ``<id>.r<round>`` so ids stay unique.
        ``weights`` default to the domains' sizes (the corpus's own proportions).
        """
        names = self._check(domains)
        rng = random.Random(seed)
        if weights is None:
            weights = [len(self.domains[name]) for name in names]
        if len(weights) != len(names) or any(w < 0 for w in weights) or sum(weights) <= 0:
            raise CorpusError("weights must be one non-negative number per domain, not all 0")
        walk = _Walk(self, names, rng)
        for _ in range(n):
            yield walk.next(rng.choices(names, weights=weights)[0])

    def company(
        self,
        n: int,
        seed: int = 0,
        shape: CompanyShape | None = None,
        domains: Sequence[str] | None = None,
    ) -> Iterator[LabelledDoc]:
        """``n`` documents of a company-shaped stream over ``domains`` (default: every
        domain; their order does not matter): Zipf-like frequencies, many kinds from the
        first document, others joining later, some fading and coming back
        (:mod:`worx.company_stream`). Repeats as in :meth:`mixture`."""
        names = sorted(set(self._check(domains)))
        plan = company_schedule(names, n, seed, shape)
        walk = _Walk(self, names, random.Random(f"company-walk:{seed}"))
        for name in plan:
            yield walk.next(name)

    def interleaved(
        self,
        domains: Sequence[str] | None = None,
        block: int = 50,
        per_domain: int | None = None,
        seed: int = 0,
    ) -> Iterator[LabelledDoc]:
        """Round-robin blocks of ``block`` documents from each domain until all run out."""
        rng = random.Random(seed)
        queues = [self._shuffled(name, rng)[:per_domain] for name in self._check(domains)]
        start = 0
        while any(start < len(q) for q in queues):
            for q in queues:
                yield from q[start : start + block]
            start += block

    def phases_then_mixture(
        self,
        order: Sequence[str] | None = None,
        per_domain: int | None = None,
        mixture_docs: int = 0,
        seed: int = 0,
    ) -> Iterator[LabelledDoc]:
        """:meth:`phased`, then ``mixture_docs`` of a mixture over the same domains.

        The mixture re-uses documents already seen in the phases (ids ``<id>.m``), so it
        measures stable routing of known domains, not discovery.
        """
        names = self._check(order)
        yield from self.phased(names, per_domain, seed)
        for doc in self.mixture(mixture_docs, names, seed=seed + 1):
            yield LabelledDoc(f"{doc.doc_id}.m", doc.domain, doc.text, doc.source)


class _Walk:
    """Each domain walked in its own shuffled order, reshuffled when it runs out; repeats
    get ids ``<id>.r<round>``."""

    def __init__(self, scenario: Scenario, names: Sequence[str], rng: random.Random) -> None:
        self.rng = rng
        self.queues = {name: scenario._shuffled(name, rng) for name in names}
        self.position = dict.fromkeys(names, 0)

    def next(self, name: str) -> LabelledDoc:
        docs = self.queues[name]
        i = self.position[name]
        self.position[name] += 1
        rnd, j = divmod(i, len(docs))
        if j == 0 and rnd > 0:
            self.rng.shuffle(docs)
        doc = docs[j]
        if rnd:
            doc = LabelledDoc(f"{doc.doc_id}.r{rnd}", doc.domain, doc.text, doc.source)
        return doc
