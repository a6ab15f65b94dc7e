"""Per-domain held-out sets: bounded, seeded, order-independent samples kept on disk.

Each domain keeps at most ``capacity`` documents: the ones whose seeded hash
``stable_fraction(doc_id, salt=seed)`` is smallest (a bottom-k sample, i.e. a uniform
random sample of everything offered, whatever the arrival order). Offering the same
document twice is a no-op, so at-least-once redelivery cannot skew the sample, and the
whole state is the set itself: one JSON file per domain, written atomically, so a
restarted monitor sees exactly the sets it had.

Examples
--------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as d:
...     sets = HeldoutSets(d, capacity=2, seed=7)
...     for i in range(5):
...         _ = sets.offer("legal", f"doc-{i}", f"text {i}")
...     again = HeldoutSets(d, capacity=2, seed=7)
...     again.docs("legal") == sets.docs("legal"), len(again.docs("legal"))
(True, 2)
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from worx.atomic import atomic_write_json
from worx.ids import stable_fraction, validate_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeldoutDoc:
    doc_id: str
    text: str
    rank: float  # seeded hash in [0, 1): the smallest ``capacity`` ranks are kept


class HeldoutSets:
    """Bounded held-out documents per domain under ``root`` (``<root>/<domain_id>.json``).

    Parameters
    ----------
    root
        Directory of the per-domain files (created if missing).
    capacity
        Documents kept per domain at most.
    seed
        Salt of the hash that ranks documents; another seed draws another sample.
    """

    def __init__(self, root: str | Path, capacity: int = 64, seed: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"held-out capacity must be >= 1, got {capacity}")
        self.root = Path(root)
        self.capacity = capacity
        self.seed = seed
        self._sets: dict[str, dict[str, HeldoutDoc]] = {}
        self.root.mkdir(parents=True, exist_ok=True)
        for file in sorted(self.root.glob("*.json")):
            self._load(file)

    def _load(self, file: Path) -> None:
        body = json.loads(file.read_text())
        if body.get("seed") != self.seed:
            raise ValueError(
                f"{file} was sampled with seed {body.get('seed')}, not {self.seed}: use the "
                "same monitor.heldout_seed, or move the old held-out sets away"
            )
        domain = validate_id(body["domain_id"], kind="domain_id")
        docs = {d["doc_id"]: HeldoutDoc(d["doc_id"], d["text"], d["rank"]) for d in body["docs"]}
        self._sets[domain] = self._trim(docs)

    def _trim(self, docs: dict[str, HeldoutDoc]) -> dict[str, HeldoutDoc]:
        kept = sorted(docs.values(), key=lambda d: (d.rank, d.doc_id))[: self.capacity]
        return {d.doc_id: d for d in kept}

    def offer(self, domain_id: str, doc_id: str, text: str) -> bool:
        """Offer one held-out document; return True if the domain's set changed."""
        validate_id(domain_id, kind="domain_id")
        if not text.strip():
            raise ValueError(f"held-out document {doc_id!r} of {domain_id!r} has no text")
        current = self._sets.setdefault(domain_id, {})
        if doc_id in current:
            return False
        rank = stable_fraction(doc_id, salt=f"heldout:{self.seed}:")
        if len(current) >= self.capacity and rank >= max(d.rank for d in current.values()):
            return False
        current[doc_id] = HeldoutDoc(doc_id, text, rank)
        self._sets[domain_id] = self._trim(current)
        self._save(domain_id)
        return True

    def offer_many(self, domain_id: str, docs: list[tuple[str, str]]) -> bool:
        """Offer ``(doc_id, text)`` pairs, writing the file once; True if the set changed."""
        before = self.digest(domain_id)
        validate_id(domain_id, kind="domain_id")
        current = self._sets.setdefault(domain_id, {})
        for doc_id, text in docs:
            if doc_id not in current and text.strip():
                rank = stable_fraction(doc_id, salt=f"heldout:{self.seed}:")
                current[doc_id] = HeldoutDoc(doc_id, text, rank)
        self._sets[domain_id] = self._trim(current)
        changed = self.digest(domain_id) != before
        if changed:
            self._save(domain_id)
        return changed

    def _save(self, domain_id: str) -> None:
        docs = sorted(self._sets[domain_id].values(), key=lambda d: (d.rank, d.doc_id))
        atomic_write_json(
            self.root / f"{domain_id}.json",
            {
                "domain_id": domain_id,
                "seed": self.seed,
                "capacity": self.capacity,
                "docs": [{"doc_id": d.doc_id, "text": d.text, "rank": d.rank} for d in docs],
            },
        )

    def domains(self) -> list[str]:
        """Domains with at least one held-out document, sorted."""
        return sorted(d for d, docs in self._sets.items() if docs)

    def docs(self, domain_id: str) -> list[HeldoutDoc]:
        """The domain's documents in a stable order (by rank)."""
        return sorted(self._sets.get(domain_id, {}).values(), key=lambda d: (d.rank, d.doc_id))

    def digest(self, domain_id: str) -> str:
        """Short hash of the domain's doc ids: a column computed on another digest is stale."""
        ids = "\n".join(d.doc_id for d in self.docs(domain_id))
        return hashlib.sha256(ids.encode()).hexdigest()[:16]
