"""Two runs' domains compared document by document (bench/chaos.py's domain invariant)."""

from __future__ import annotations

from pathlib import Path

from router.embedders import default_embedder
from router.records import DomainRecord
from router.table_file import SavedTable
from topology.chaos.agreement import agreement

CODE = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i)\n"]
PROSE = ["It was a bright cold day in April.", "She walked to the village in the rain."]


def table(path: Path, rows: dict[str, tuple[str, list[str]]]) -> Path:
    """A table file of one domain per ``{id: (label, texts)}``, centred on its texts."""
    saved = SavedTable(path)
    embedder = default_embedder()
    for domain_id, (label, texts) in rows.items():
        centroid = embedder.embed(texts).mean(axis=0)
        centroid /= max(float((centroid**2).sum()) ** 0.5, 1e-9)
        row = DomainRecord(domain_id, centroid.tolist(), 0.1, len(texts), 0.5, label_hint=label)
        saved.apply(row)
    return path


def test_the_same_partition_under_other_ids_agrees_and_a_merged_one_does_not(tmp_path):
    ours = table(tmp_path / "a.json", {"dom-code": ("code", CODE), "dom-prose": ("prose", PROSE)})
    renamed = table(tmp_path / "b.json", {"dom-x": ("prose", PROSE), "dom-y": ("code", CODE)})
    merged = table(tmp_path / "c.json", {"dom-all": ("code", CODE + PROSE)})
    texts = CODE + PROSE
    assert agreement(texts, ours, renamed) == {"domains_nmi": 1.0, "labels_nmi": 1.0}
    assert agreement(texts, ours, merged)["domains_nmi"] < 0.5
    missing = agreement(texts, ours, tmp_path / "missing.json")
    assert missing == {"domains_nmi": None, "labels_nmi": None}


def test_one_kind_split_in_two_domains_agrees_by_label(tmp_path):
    """Two runs that gave one kind a different number of domains (discover's order-dependent
    splits) differ by domain but not by label."""
    tmp = tmp_path
    whole = table(tmp / "a.json", {"dom-code": ("code", CODE), "dom-prose": ("prose", PROSE)})
    split = table(
        tmp / "b.json",
        {"dom-1": ("code", CODE[:1]), "dom-2": ("code", CODE[1:]), "dom-p": ("prose", PROSE)},
    )
    found = agreement(CODE + PROSE, whole, split)
    assert found["labels_nmi"] == 1.0 and found["domains_nmi"] < 1.0
