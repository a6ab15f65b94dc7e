"""Two runs' domains compared document by document (bench/chaos.py's domain invariant)."""

from __future__ import annotations

from pathlib import Path

from router.embedders import default_embedder
from router.records import DomainRecord
from router.table_file import SavedTable
from topology.chaos.agreement import assignments_nmi

CODE = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i)\n"]
PROSE = ["It was a bright cold day in April.", "She walked to the village in the rain."]


def table(path: Path, rows: dict[str, list[str]]) -> Path:
    saved = SavedTable(path)
    embedder = default_embedder()
    for domain_id, texts in rows.items():
        centroid = embedder.embed(texts).mean(axis=0)
        centroid /= max(float((centroid**2).sum()) ** 0.5, 1e-9)
        saved.apply(DomainRecord(domain_id, centroid.tolist(), 0.1, len(texts), 0.5))
    return path


def test_the_same_partition_under_other_ids_agrees_and_a_merged_one_does_not(tmp_path):
    ours = table(tmp_path / "a.json", {"dom-code": CODE, "dom-prose": PROSE})
    renamed = table(tmp_path / "b.json", {"dom-x": PROSE, "dom-y": CODE})
    merged = table(tmp_path / "c.json", {"dom-all": CODE + PROSE})
    texts = CODE + PROSE
    assert assignments_nmi(texts, ours, renamed) == 1.0
    assert assignments_nmi(texts, ours, merged) < 0.5
    assert assignments_nmi(texts, ours, tmp_path / "missing.json") is None
