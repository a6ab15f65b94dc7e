"""The immutable expert table: a tombstone for an unknown key, a replay and a duplicate id
with other weights leave the table (and its version) as it was."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from experts.expert import Expert, ExpertConfig
from experts.store import ExpertStore
from experts.table import ExpertTable
from tests.support.experts import randomize
from worx.records import RecordError


@pytest.fixture
def table(tmp_path: Path) -> ExpertTable:
    store = ExpertStore(tmp_path / "store", "f" * 64)
    for i, (expert_id, domain) in enumerate((("legal-e1", "legal"), ("code-e1", "code"))):
        expert = randomize(
            Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=4), hidden_size=32), seed=i
        )
        store.put(expert_id, expert, domain, [0.6, 0.8] if i else [0.8, 0.6])
    return ExpertTable({m: store.manifest(m) for m in store.ids()}, store.get, version=2)


def test_a_tombstone_for_an_unknown_key_changes_nothing(table: ExpertTable) -> None:
    for key in ("nobody-e1", "../legal-e1", "legal-e1\n", ""):
        assert table.without(key) is table
    assert table.version == 2 and sorted(table) == ["code-e1", "legal-e1"]
    smaller = table.without("legal-e1")  # a known key: a new table, this one unchanged
    assert list(smaller) == ["code-e1"] and smaller.version == 3 and len(table) == 2


def test_a_replay_or_a_duplicate_id_with_other_weights_changes_nothing(
    table: ExpertTable,
) -> None:
    held = table.manifests["legal-e1"]
    assert table.with_manifest(held) is table  # a replay
    forged = dataclasses.replace(held, sha256="1" * 64)
    with pytest.raises(RecordError) as info:
        table.with_manifest(forged)
    assert info.value.reason == "duplicate_id"
    assert table.manifests["legal-e1"] == held and table.version == 2
    assert table.by_domain.expert_domain == {"legal-e1": "legal", "code-e1": "code"}
