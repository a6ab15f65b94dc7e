"""The store under hostile files: only integrity failures are moved; nothing else escapes.

A reader of another trunk or an older build skips intact entries and leaves them in
place (a shared store survives a mismatched `worx serve`); any exception the weights'
bytes can raise is ``corrupt`` and quarantined; a header over 1 MiB is never parsed.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

from experts.expert import Expert, ExpertConfig
from experts.records import ExpertRegistration
from experts.serving import ExpertServer
from experts.store import MANIFEST, WEIGHTS, ExpertRefused, ExpertStore
from experts.trunk import load_trunk
from router.gate import Gate
from tests.support.experts import randomize, trunk_dirs  # noqa: F401 - a shared fixture

FP = "f" * 64
CENTROID = [0.6, 0.8]


def _expert(seed: int, width: int = 32) -> Expert:
    return randomize(
        Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=4), hidden_size=width), seed=seed
    )


class _NoEmbedder:
    def embed(self, texts):  # registration and rebuild never embed
        raise AssertionError("not used")


def test_a_reader_of_another_trunk_leaves_a_shared_store_in_place(
    trunk_dirs,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    right, wrong = (load_trunk(trunk_dirs[family]) for family in ("gpt2", "llama"))
    assert right.fingerprint != wrong.fingerprint
    root = tmp_path / "store"
    owner = ExpertStore(root, right.fingerprint)
    stored = [owner.put(f"e{i}", _expert(i), "d", CENTROID) for i in range(3)]
    before = owner.ids()

    # `worx serve` with the other trunk on the same store: rebuild, then every registration
    intruder = ExpertServer(wrong, ExpertStore(root, wrong.fingerprint), _NoEmbedder(), Gate())
    assert len(intruder.rebuild_from_store()) == 0
    for manifest in stored:
        outcome = intruder.register(manifest.registration())
        assert outcome.status == "refused" and outcome.refusal["reason"] == "wrong_trunk"
    assert intruder.store.verify(quarantine=True).ok == []
    skipped = intruder.store.skipped()
    assert [s["expert_id"] for s in skipped] == before
    assert {s["reason"] for s in skipped} == {"wrong_trunk"}

    assert owner.ids() == before and owner.quarantined() == []
    assert ExpertStore(root, right.fingerprint).verify().ok == before


def test_a_newer_manifest_schema_is_skipped_not_moved(tmp_path: Path) -> None:
    store = ExpertStore(tmp_path / "store", FP)
    store.put("future", _expert(1), "d", CENTROID)
    path = tmp_path / "store" / "future" / MANIFEST
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 2, "new": 1}))
    with pytest.raises(ExpertRefused) as info:
        store.get("future")
    assert info.value.reason == "newer_schema" and "upgrade worx" in info.value.detail
    assert info.value.quarantined is None
    assert store.ids() == ["future"] and store.quarantined() == []
    assert store.skipped()[0]["reason"] == "newer_schema"


def _forge(store: ExpertStore, expert_id: str, weights: bytes) -> None:
    """Store ``weights`` under a manifest that vouches for them (sha256 and size match):
    only the bytes' structure can betray them."""
    store.put(expert_id, _expert(7), "d", CENTROID)
    entry = store.root / expert_id
    (entry / WEIGHTS).write_bytes(weights)
    body = json.loads((entry / MANIFEST).read_text())
    body.update(sha256=hashlib.sha256(weights).hexdigest(), size_bytes=len(weights))
    (entry / MANIFEST).write_text(json.dumps(body))


def _safetensors(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


HOSTILE_WEIGHTS = {
    "deep_nesting": _safetensors(b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}"),
    "negative_dims": _safetensors(
        json.dumps({"w": {"dtype": "F32", "shape": [-1, -4], "data_offsets": [0, 16]}}).encode(),
        b"\0" * 16,
    ),
    "header_over_1mib": _safetensors(b" " * ((1 << 20) + 1)),
    "length_past_eof": struct.pack("<Q", 1 << 62) + b"{}",
    "not_json": _safetensors(b"\xff\xfe{"),
    "header_is_a_list": _safetensors(b"[1, 2]"),
    "unknown_dtype": _safetensors(
        json.dumps({"w": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}).encode(),
        b"\0" * 16,
    ),
    "offsets_out_of_bounds": _safetensors(
        json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}).encode(),
        b"\0" * 16,
    ),
    "huge_shape": _safetensors(
        json.dumps(
            {"w": {"dtype": "F32", "shape": [1 << 62, 4], "data_offsets": [0, 16]}}
        ).encode(),
        b"\0" * 16,
    ),
    "wrong_tensors": _safetensors(
        json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode(),
        b"\0" * 16,
    ),
    "seven_bytes": b"\x01" * 7,
}


def test_any_exception_of_hostile_weights_is_corrupt_and_quarantined(tmp_path: Path) -> None:
    store = ExpertStore(tmp_path / "store", FP)
    store.put("good", _expert(1), "d", CENTROID)
    for name, weights in HOSTILE_WEIGHTS.items():
        _forge(store, name, weights)
    for name in HOSTILE_WEIGHTS:
        with pytest.raises(ExpertRefused) as info:
            store.get(name)
        assert info.value.reason in ("corrupt", "bad_manifest"), name
        assert info.value.quarantined is not None, name
    assert store.ids() == ["good"] and store.get("good") is not None
    reasons = {q["expert_id"]: q["reason"] for q in store.quarantined()}
    assert set(reasons) == set(HOSTILE_WEIGHTS)
    assert reasons["wrong_tensors"] == "bad_manifest"  # tensors the manifest's config lacks
    details = {q["expert_id"]: q["detail"] for q in store.quarantined()}
    assert reasons["deep_nesting"] == reasons["negative_dims"] == "corrupt"
    assert "RecursionError" in details["deep_nesting"]
    assert "RuntimeError" in details["negative_dims"]
    assert "at most 1048576 bytes of header" in details["header_over_1mib"]


def test_hostile_manifests_are_bad_manifest_and_quarantined(tmp_path: Path) -> None:
    store = ExpertStore(tmp_path / "store", FP)
    bodies = {
        "deep": b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        "huge": b'{"pad":"' + b"x" * (2 << 20) + b'"}',
        "nan": None,  # filled below: a NaN centroid
        "list": b"[]",
        "version_text": None,
    }
    for name in bodies:
        store.put(name, _expert(1), "d", CENTROID)
    path = store.root / "nan" / MANIFEST
    bodies["nan"] = path.read_bytes().replace(b"0.6", b"NaN", 1)
    body = json.loads(path.read_text())
    bodies["version_text"] = json.dumps({**body, "schema_version": "2"}).encode()
    for name, raw in bodies.items():
        (store.root / name / MANIFEST).write_bytes(raw)
        with pytest.raises(ExpertRefused) as info:
            store.manifest(name)
        assert info.value.reason == "bad_manifest" and info.value.quarantined, name
    assert store.ids() == []


def test_a_forged_registration_never_fails_the_server(
    trunk_dirs,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    trunk = load_trunk(trunk_dirs["gpt2"])
    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    server = ExpertServer(trunk, store, _NoEmbedder(), Gate())
    _forge(store, "nested", HOSTILE_WEIGHTS["deep_nesting"])
    registration = ExpertRegistration.from_dict(
        {**store.manifest("nested").registration().to_dict()}
    )
    outcome = server.register(registration)
    assert outcome.status == "refused" and outcome.refusal["reason"] == "corrupt"
    assert "RecursionError" in outcome.refusal["detail"]
    assert store.ids() == [] and list(server.table) == []


def test_the_monitor_never_hands_a_huge_header_to_safetensors(tmp_path: Path) -> None:
    from monitor.weights import hash_safetensors

    path = tmp_path / WEIGHTS
    path.write_bytes(_safetensors(b"{" + b" " * (4 << 20) + b"}"))
    with pytest.raises(ValueError, match="at most 1048576 bytes of header"):
        hash_safetensors("file/x", path)
