"""The write-once store: round trip, idempotent put, every refusal class, quarantine, LRU,
concurrent writers: each test runs on the directory store and on the S3 store (a real
S3-protocol server, moto's, on 127.0.0.1), then the S3 store's own cases (its local cache,
a missing bucket, a write its writer never committed)."""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path

import pytest
import torch

from experts.config import ExpertsConfig
from experts.expert import Expert, ExpertConfig
from experts.object_store import ObjectStoreError
from experts.store import MANIFEST, QUARANTINE, WEIGHTS, ExpertRefused, ExpertStore
from experts.store_open import open_store
from tests.support.experts import randomize
from tests.support.s3 import S3Server

FP = "f" * 64
CENTROID = [0.6, 0.8]


def _expert(seed: int, rank: int = 4, width: int = 32) -> Expert:
    return randomize(
        Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=rank), hidden_size=width), seed=seed
    )


class DirLayout:
    """The directory store and raw access to its files."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "store"

    def open(self, fingerprint: str | None = FP, **kwargs) -> ExpertStore:
        kwargs.pop("cache", None)
        return ExpertStore(self.root, fingerprint, **kwargs)

    def read(self, name: str, file: str) -> bytes:
        return (self.root / name / file).read_bytes()

    def write(self, name: str, file: str, data: bytes) -> None:
        (self.root / name).mkdir(parents=True, exist_ok=True)
        (self.root / name / file).write_bytes(data)

    def delete(self, name: str, file: str) -> None:
        (self.root / name / file).unlink()

    def entry_exists(self, name: str) -> bool:
        return (self.root / name).exists()

    def leftovers(self) -> list[str]:
        return [p.name for p in self.root.glob(".tmp-*")]

    def add_unsafe_entry(self, name: str) -> None:
        (self.root / name).mkdir()


class S3Layout:
    """The S3 store (its own prefix of a shared bucket) and raw access to its objects."""

    def __init__(self, server: S3Server, bucket: str, tmp_path: Path) -> None:
        self.client = server.client()
        self.bucket = bucket
        self.prefix = f"t-{uuid.uuid4().hex[:8]}/experts"
        self.url = f"s3://{bucket}/{self.prefix}"
        self.cache = tmp_path / "cache"

    def open(self, fingerprint: str | None = FP, cache: Path | None = None, **kwargs):
        return open_store(self.url, cache or self.cache, fingerprint, **kwargs)

    def key(self, name: str, file: str) -> str:
        return f"{self.prefix}/{name}/{file}"

    def read(self, name: str, file: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=self.key(name, file))["Body"].read()

    def write(self, name: str, file: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.key(name, file), Body=data)

    def delete(self, name: str, file: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.key(name, file))

    def _objects(self, under: str) -> list[str]:
        page = self.client.list_objects_v2(Bucket=self.bucket, Prefix=under)
        return [item["Key"] for item in page.get("Contents", [])]

    def entry_exists(self, name: str) -> bool:
        return bool(self._objects(f"{self.prefix}/{name}/"))

    def leftovers(self) -> list[str]:
        """Weights objects no manifest committed."""
        keys = set(self._objects(f"{self.prefix}/"))
        return [
            k
            for k in keys
            if k.endswith(f"/{WEIGHTS}") and k[: -len(WEIGHTS)] + MANIFEST not in keys
        ]

    def add_unsafe_entry(self, name: str) -> None:
        self.write(name, MANIFEST, b"{}")


@pytest.fixture(scope="module")
def s3_server():
    """One moto server for the module; boto3 finds it through the environment, as deployed."""
    with S3Server() as server, pytest.MonkeyPatch.context() as patch:
        for name, value in server.env.items():
            patch.setenv(name, value)
        yield server


@pytest.fixture(scope="module")
def s3_bucket(s3_server: S3Server) -> str:
    return s3_server.new_bucket()


@pytest.fixture(params=["dir", "s3"])
def layout(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "dir":
        return DirLayout(tmp_path)
    return S3Layout(
        request.getfixturevalue("s3_server"), request.getfixturevalue("s3_bucket"), tmp_path
    )


@pytest.fixture
def s3(s3_server: S3Server, s3_bucket: str, tmp_path: Path) -> S3Layout:
    return S3Layout(s3_server, s3_bucket, tmp_path)


def test_put_get_round_trip_is_verified_and_memory_mapped(layout, tmp_path: Path) -> None:
    store = layout.open()
    expert = _expert(1)
    manifest = store.put(
        "legal-1", expert, "legal", CENTROID, summary={"loss": 1.5}, job_id="job-1"
    )
    assert layout.read("legal-1", WEIGHTS)
    on_disk = json.loads(layout.read("legal-1", MANIFEST))
    assert on_disk["sha256"] == manifest.sha256 and on_disk["schema_version"] == 1
    assert on_disk["trunk_fingerprint"] == FP and on_disk["num_params"] == expert.num_params()
    loaded = layout.open(cache=tmp_path / "another-machine").get("legal-1")
    for name, tensor in expert.tensors().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert store.ids() == ["legal-1"]
    registration = manifest.registration()
    assert registration.expert_id == "legal-1" and registration.sha256 == manifest.sha256
    assert registration.job_id == "job-1" and registration.centroid == CENTROID


def test_put_is_write_once(layout) -> None:
    store = layout.open()
    first = store.put("a", _expert(1), "d", CENTROID)
    again = store.put("a", _expert(1), "d", CENTROID)  # same bytes: a no-op
    assert again == first
    with pytest.raises(ExpertRefused) as info:
        store.put("a", _expert(2), "d", CENTROID)
    assert info.value.reason == "duplicate_id"
    assert "already stored" in str(info.value)
    assert store.get("a") is not None and store.manifest("a").sha256 == first.sha256
    assert layout.leftovers() == []


def test_concurrent_writers_of_one_id_exactly_one_wins(layout) -> None:
    """Four writers (own store objects, as four processes would have) race on one id with
    different bytes: one stores it, three are refused; twins with the same bytes all agree."""
    stores = [layout.open() for _ in range(4)]
    start = threading.Barrier(len(stores))
    outcomes: dict[int, object] = {}

    def write(index: int, expert_id: str, seed: int) -> None:
        start.wait()
        try:
            outcomes[index] = stores[index].put(expert_id, _expert(seed), "d", CENTROID)
        except ExpertRefused as exc:
            outcomes[index] = exc

    for seeds, expert_id in (([1, 2, 3, 4], "raced"), ([5, 5, 5, 5], "twins")):
        outcomes.clear()
        threads = [
            threading.Thread(target=write, args=(i, expert_id, s)) for i, s in enumerate(seeds)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        won = [o for o in outcomes.values() if not isinstance(o, ExpertRefused)]
        lost = [o for o in outcomes.values() if isinstance(o, ExpertRefused)]
        if expert_id == "raced":
            assert len(won) == 1 and len(lost) == 3, outcomes
            assert {o.reason for o in lost} == {"duplicate_id"}
        else:
            assert len(won) == 4 and len({m.sha256 for m in won}) == 1, outcomes
        stored = layout.open().manifest(expert_id)
        assert stored.sha256 == won[0].sha256
        assert layout.open().get(expert_id) is not None  # the winner's bytes, complete
    assert layout.open().ids() == ["raced", "twins"]
    assert layout.leftovers() == []


def _refused(store: ExpertStore, expert_id: str) -> ExpertRefused:
    with pytest.raises(ExpertRefused) as info:
        store.get(expert_id)
    return info.value


def _flipped(data: bytes, at: int) -> bytes:
    changed = bytearray(data)
    changed[at] ^= 0xFF
    return bytes(changed)


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
    layout, damage, reason, detail
) -> None:
    store = layout.open()
    store.put("good", _expert(1), "d", CENTROID)
    store.put("bad", _expert(2), "d", CENTROID)
    weights = layout.read("bad", WEIGHTS)
    body = json.loads(layout.read("bad", MANIFEST))
    if damage == "flip":
        layout.write("bad", WEIGHTS, _flipped(weights, len(weights) - 3))
    elif damage == "truncate":
        layout.write("bad", WEIGHTS, weights[:-10])
    elif damage == "extend":
        layout.write("bad", WEIGHTS, weights + b"\0")
    elif damage == "delete_weights":
        layout.delete("bad", WEIGHTS)
    elif damage == "manifest_json":
        layout.write("bad", MANIFEST, b"{not json")
    elif damage == "manifest_sha":
        layout.write("bad", MANIFEST, json.dumps({**body, "sha256": "xyz"}).encode())
    elif damage == "manifest_version":
        layout.write("bad", MANIFEST, json.dumps({**body, "schema_version": 0}).encode())
    elif damage == "manifest_id":
        layout.write("bad", MANIFEST, json.dumps({**body, "expert_id": "other"}).encode())
    elif damage == "manifest_config":
        config = {**body["config"], "rank": 5}
        layout.write("bad", MANIFEST, json.dumps({**body, "config": config}).encode())
    refused = _refused(store, "bad")
    assert refused.reason == reason
    assert detail in refused.detail
    assert refused.quarantined is not None and f"/{QUARANTINE}/bad-" in str(refused.quarantined)
    assert not layout.entry_exists("bad")
    recorded = store.quarantined()
    assert [(q["reason"], q["expert_id"]) for q in recorded] == [(reason, "bad")]
    assert recorded[0]["quarantined"] == str(refused.quarantined)
    assert store.ids() == ["good"]
    assert store.get("good") is not None  # the rest of the store keeps working


def test_the_quarantine_keeps_its_newest_entries(layout) -> None:
    store = layout.open(quarantine_keep=1)
    for name in ("a", "b"):
        store.put(name, _expert(1), "d", CENTROID)
    for name in ("a", "b"):
        layout.write(name, WEIGHTS, b"not these bytes")
        assert _refused(store, name).reason == "truncated"
    assert [q["expert_id"] for q in store.quarantined()] == ["b"]
    assert layout.open().quarantined() == store.quarantined()


def test_wrong_trunk_is_refused_and_left_in_place(layout) -> None:
    layout.open("e" * 64).put("elsewhere", _expert(1), "d", CENTROID)
    store = layout.open()
    store.put("mine", _expert(2), "d", CENTROID)
    refused = _refused(store, "elsewhere")
    assert refused.reason == "wrong_trunk"
    assert "only loads onto its own trunk" in refused.detail
    assert refused.quarantined is None and store.quarantined() == []
    assert store.ids() == ["elsewhere", "mine"]
    assert [s["expert_id"] for s in store.skipped()] == ["elsewhere"]


def test_unsafe_ids_are_refused(layout, tmp_path: Path) -> None:
    store = layout.open()
    for bad in ("../escape", "a/b", "", ".hidden", "x" * 200):
        with pytest.raises(ExpertRefused) as info:
            store.put(bad, _expert(1), "d", CENTROID)
        assert info.value.reason == "unsafe_id"
        with pytest.raises(ExpertRefused) as info:
            store.get(bad)
        assert info.value.reason == "unsafe_id"
    assert not (tmp_path / "escape").exists() and store.ids() == []
    layout.add_unsafe_entry("has space")  # an unsafe entry name found in the store
    refused = _refused(store, "has space")
    assert refused.reason == "unsafe_id" and refused.quarantined is not None
    with pytest.raises(ExpertRefused) as info:
        store.put("ok", _expert(1), "bad/domain", CENTROID)
    assert info.value.reason == "bad_manifest"


def test_missing_expert(layout) -> None:
    refused = _refused(layout.open(), "nobody")
    assert refused.reason == "missing" and refused.quarantined is None


def test_lru_keeps_loaded_bytes_within_budget(layout) -> None:
    writer = layout.open()
    sizes = [writer.put(f"e{i}", _expert(i), "d", CENTROID).size_bytes for i in range(5)]
    store = layout.open(lru_budget_bytes=2 * max(sizes))
    for i in range(5):
        store.get(f"e{i}")
    info = store.cache_info()
    assert info["cached_experts"] == 2 and info["cached_bytes"] <= 2 * max(sizes)
    assert info["loads"] == 5
    store.get("e4")
    assert store.cache_info()["hits"] == 1
    store.get("e0")  # evicted earlier: loaded (and verified) again
    assert store.cache_info()["loads"] == 6


def test_verify_reports_every_entry(layout) -> None:
    store = layout.open()
    store.put("a", _expert(1), "d", CENTROID)
    store.put("b", _expert(2), "d", CENTROID)
    store.get("b")  # a local copy (S3), verified now: verify must look at the store's bytes
    weights = layout.read("b", WEIGHTS)
    layout.write("b", WEIGHTS, _flipped(weights, len(weights) - 1))
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
    ExpertStore(tmp_path / "store", FP).put("b", _expert(2), "d", CENTROID)  # another process
    assert reader.ids() == ["b"] and reader.get("b") is not None


# ---- the S3 store's own cases -----------------------------------------------------------
def test_s3_a_damaged_local_copy_is_fetched_again_not_trusted(s3: S3Layout) -> None:
    s3.open().put("a", _expert(1), "d", CENTROID)
    store = s3.open()
    expected = {k: v.clone() for k, v in store.get("a").state_dict().items()}
    copy = s3.cache / "a" / WEIGHTS
    assert copy.read_bytes() == s3.read("a", WEIGHTS)  # lazily fetched into the cache
    for damage in (
        lambda data: _flipped(data, len(data) - 2),
        lambda data: data[:-7],
        lambda data: data + b"junk",
    ):
        copy.write_bytes(damage(copy.read_bytes()))
        store.evict("a")
        loaded = store.get("a")
        assert all(torch.equal(loaded.state_dict()[k], v) for k, v in expected.items())
        assert copy.read_bytes() == s3.read("a", WEIGHTS)  # replaced by the bucket's bytes
    copy.unlink()
    store.evict("a")
    assert store.get("a") is not None and copy.is_file()
    assert store.cache_info()["refetches"] == 3
    assert store.quarantined() == [] and store.ids() == ["a"]  # the bucket was never at fault


def test_s3_a_missing_bucket_is_a_clear_error(s3_server: S3Server, tmp_path: Path) -> None:
    with pytest.raises(ObjectStoreError) as info:
        open_store(f"s3://no-such-{uuid.uuid4().hex[:8]}/experts", tmp_path, FP)
    assert "does not exist" in str(info.value) and "aws s3 mb" in str(info.value)
    assert isinstance(info.value, OSError)  # a trainer stops instead of failing its job
    for bad in ("http://host/bucket", "s3://", "s3://bucket/../up"):
        with pytest.raises(ValueError, match="s3://bucket/prefix"):
            ExpertsConfig(store_url=bad).validate()


def test_s3_an_uncommitted_write_holds_its_id_until_stale(s3: S3Layout) -> None:
    """A writer that died between its weights and its manifest: the id is not listed, other
    bytes are refused while that write may still be under way, and reclaimed once stale."""
    s3.write("w", WEIGHTS, b"half of another writer's work")
    store = s3.open()
    assert store.ids() == [] and "w" not in store
    with pytest.raises(ExpertRefused) as info:
        store.put("w", _expert(1), "d", CENTROID)
    assert info.value.reason == "duplicate_id" and "being written" in info.value.detail
    stale = s3.open(stale_tmp_after_s=0)  # opening cleans the stale object up
    assert s3.leftovers() == []
    manifest = stale.put("w", _expert(1), "d", CENTROID)
    assert stale.get("w") is not None and s3.open().manifest("w").sha256 == manifest.sha256
    assert os.listdir(s3.cache) == ["w"]  # only what was read was fetched
