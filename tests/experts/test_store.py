"""The write-once store: round trip, idempotent put, every refusal class, quarantine, LRU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from experts.expert import Expert, ExpertConfig
from experts.store import MANIFEST, QUARANTINE, WEIGHTS, ExpertRefused, ExpertStore
from tests.experts.conftest import randomize

FP = "f" * 64
CENTROID = [0.6, 0.8]


def _expert(seed: int, rank: int = 4, width: int = 32) -> Expert:
    return randomize(Expert(ExpertConfig(layers=(0, 1), rank=rank), hidden_size=width), seed=seed)


def _store(tmp_path: Path, **kwargs) -> ExpertStore:
    return ExpertStore(tmp_path / "store", FP, **kwargs)


def test_put_get_round_trip_is_verified_and_memory_mapped(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expert = _expert(1)
    manifest = store.put(
        "legal-1", expert, "legal", CENTROID, summary={"loss": 1.5}, job_id="job-1"
    )
    assert (tmp_path / "store" / "legal-1" / WEIGHTS).is_file()
    on_disk = json.loads((tmp_path / "store" / "legal-1" / MANIFEST).read_text())
    assert on_disk["sha256"] == manifest.sha256 and on_disk["schema_version"] == 1
    assert on_disk["trunk_fingerprint"] == FP and on_disk["num_params"] == expert.num_params()
    loaded = ExpertStore(tmp_path / "store", FP).get("legal-1")
    for name, tensor in expert.tensors().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert store.ids() == ["legal-1"]
    registration = manifest.registration()
    assert registration.expert_id == "legal-1" and registration.sha256 == manifest.sha256
    assert registration.job_id == "job-1" and registration.centroid == CENTROID


def test_put_is_write_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = store.put("a", _expert(1), "d", CENTROID)
    again = store.put("a", _expert(1), "d", CENTROID)  # same bytes: a no-op
    assert again == first
    with pytest.raises(ExpertRefused) as info:
        store.put("a", _expert(2), "d", CENTROID)
    assert info.value.reason == "duplicate_id"
    assert "already stored" in str(info.value)
    assert store.get("a") is not None and store.manifest("a").sha256 == first.sha256
    assert not list((tmp_path / "store").glob(".tmp-*"))


def _refused(store: ExpertStore, expert_id: str) -> ExpertRefused:
    with pytest.raises(ExpertRefused) as info:
        store.get(expert_id)
    return info.value


def _flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "reason", "detail"),
    [
        ("flip", "corrupt", "sha256 of weights.safetensors is"),
        ("truncate", "truncated", "the manifest says"),
        ("extend", "corrupt", "more than the manifest"),
        ("delete_weights", "truncated", "is missing"),
        ("manifest_json", "bad_manifest", "not JSON"),
        ("manifest_sha", "bad_manifest", "64 lower-case hex"),
        ("manifest_version", "bad_manifest", "schema_version"),
        ("manifest_id", "bad_manifest", "sits in directory"),
        ("manifest_config", "bad_manifest", "wrong shape"),
    ],
)
def test_damaged_entries_are_refused_with_reason_and_quarantined(
    tmp_path: Path, damage, reason, detail
) -> None:
    store = _store(tmp_path)
    store.put("good", _expert(1), "d", CENTROID)
    store.put("bad", _expert(2), "d", CENTROID)
    entry = tmp_path / "store" / "bad"
    weights, manifest_path = entry / WEIGHTS, entry / MANIFEST
    body = json.loads(manifest_path.read_text())
    if damage == "flip":
        _flip_byte(weights, weights.stat().st_size - 3)
    elif damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:-10])
    elif damage == "extend":
        weights.write_bytes(weights.read_bytes() + b"\0")
    elif damage == "delete_weights":
        weights.unlink()
    elif damage == "manifest_json":
        manifest_path.write_text("{not json")
    elif damage == "manifest_sha":
        manifest_path.write_text(json.dumps({**body, "sha256": "xyz"}))
    elif damage == "manifest_version":
        manifest_path.write_text(json.dumps({**body, "schema_version": 0}))
    elif damage == "manifest_id":
        manifest_path.write_text(json.dumps({**body, "expert_id": "other"}))
    elif damage == "manifest_config":
        manifest_path.write_text(json.dumps({**body, "config": {**body["config"], "rank": 5}}))
    refused = _refused(store, "bad")
    assert refused.reason == reason
    assert detail in refused.detail
    assert refused.quarantined is not None and refused.quarantined.parent.name == QUARANTINE
    assert not entry.exists()
    recorded = json.loads((refused.quarantined / "reason.json").read_text())
    assert recorded["reason"] == reason and recorded["expert_id"] == "bad"
    assert [q["reason"] for q in store.quarantined()] == [reason]
    assert store.ids() == ["good"]
    assert store.get("good") is not None  # the rest of the store keeps working


def test_wrong_trunk_is_refused_and_left_in_place(tmp_path: Path) -> None:
    ExpertStore(tmp_path / "store", "e" * 64).put("elsewhere", _expert(1), "d", CENTROID)
    store = _store(tmp_path)
    store.put("mine", _expert(2), "d", CENTROID)
    refused = _refused(store, "elsewhere")
    assert refused.reason == "wrong_trunk"
    assert "only loads onto its own trunk" in refused.detail
    assert refused.quarantined is None and store.quarantined() == []
    assert store.ids() == ["elsewhere", "mine"]
    assert [s["expert_id"] for s in store.skipped()] == ["elsewhere"]


def test_unsafe_ids_are_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for bad in ("../escape", "a/b", "", ".hidden", "x" * 200):
        with pytest.raises(ExpertRefused) as info:
            store.put(bad, _expert(1), "d", CENTROID)
        assert info.value.reason == "unsafe_id"
        with pytest.raises(ExpertRefused) as info:
            store.get(bad)
        assert info.value.reason == "unsafe_id"
    assert not (tmp_path / "escape").exists()
    odd = tmp_path / "store" / "has space"  # an unsafe directory name found in the store
    odd.mkdir()
    refused = _refused(store, "has space")
    assert refused.reason == "unsafe_id" and refused.quarantined is not None
    with pytest.raises(ExpertRefused) as info:
        store.put("ok", _expert(1), "bad/domain", CENTROID)
    assert info.value.reason == "bad_manifest"


def test_missing_expert(tmp_path: Path) -> None:
    refused = _refused(_store(tmp_path), "nobody")
    assert refused.reason == "missing" and refused.quarantined is None


def test_lru_keeps_loaded_bytes_within_budget(tmp_path: Path) -> None:
    writer = _store(tmp_path)
    sizes = [writer.put(f"e{i}", _expert(i), "d", CENTROID).size_bytes for i in range(5)]
    store = ExpertStore(tmp_path / "store", FP, lru_budget_bytes=2 * max(sizes))
    for i in range(5):
        store.get(f"e{i}")
    info = store.cache_info()
    assert info["cached_experts"] == 2 and info["cached_bytes"] <= 2 * max(sizes)
    assert info["loads"] == 5
    store.get("e4")
    assert store.cache_info()["hits"] == 1
    store.get("e0")  # evicted earlier: loaded (and verified) again
    assert store.cache_info()["loads"] == 6


def test_verify_reports_every_entry(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.put("a", _expert(1), "d", CENTROID)
    store.put("b", _expert(2), "d", CENTROID)
    weights = tmp_path / "store" / "b" / WEIGHTS
    _flip_byte(weights, weights.stat().st_size - 1)
    report = store.verify(quarantine=False)
    assert report.ok == ["a"] and [r["reason"] for r in report.refused] == ["corrupt"]
    assert store.ids() == ["a", "b"]  # report only
    report = store.verify(quarantine=True)
    assert store.ids() == ["a"] and report.refused[0]["quarantined"]


def test_a_reader_creates_no_store_and_sees_it_once_written(tmp_path: Path) -> None:
    reader = ExpertStore(tmp_path / "store", FP, create=False)
    assert not (tmp_path / "store").exists()
    assert reader.ids() == [] and reader.quarantined() == [] and reader.verify().checked == 0
    assert _refused(reader, "a").reason == "missing"
    assert not (tmp_path / "store").exists()
    ExpertStore(tmp_path / "elsewhere", FP, create=False).put("a", _expert(1), "d", CENTROID)
    assert (tmp_path / "elsewhere" / "a" / WEIGHTS).is_file()  # a write makes the root
    _store(tmp_path).put("b", _expert(2), "d", CENTROID)  # the trainer, in another process
    assert reader.ids() == ["b"] and reader.get("b") is not None
