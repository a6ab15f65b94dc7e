"""Adding experts never touches earlier ones: tensors and routed outputs stay bit-identical."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from experts.expert import Expert, ExpertConfig
from experts.mixture import Mixture
from experts.store import WEIGHTS, ExpertStore
from tests.support.experts import randomize


def _tensor_hashes(module: torch.nn.Module) -> dict[str, str]:
    return {
        name: hashlib.sha256(
            t.detach().contiguous().view(torch.uint8).numpy().tobytes()
        ).hexdigest()
        for name, t in module.state_dict().items()
    }


def test_registering_b_c_d_leaves_a_and_the_trunk_bit_identical(trunk, tmp_path: Path) -> None:
    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    config = ExpertConfig(kind="adapter", layers=(0, 1), rank=8)
    store.put("A", randomize(Expert(config, trunk.hidden_size), seed=10), "dom-a", [1.0, 0.0])
    table: dict[str, Expert] = {"A": store.get("A")}
    enc = trunk.tokenizer(
        ["The court held that", "def f(x): return x"], return_tensors="pt", padding=True
    )
    ids, mask = enc["input_ids"], enc["attention_mask"]
    weights = [{"A": 1.0}, {"A": 0.6}]

    a_hashes = _tensor_hashes(table["A"])
    a_file = hashlib.sha256((tmp_path / "store" / "A" / WEIGHTS).read_bytes()).hexdigest()
    trunk_hashes = _tensor_hashes(trunk.model)
    with torch.no_grad():
        before = Mixture(trunk, table).forward(ids, mask, weights)

    for seed, expert_id in enumerate(("B", "C", "D"), start=11):
        parent = "A" if expert_id == "C" else None  # C branches from A: a copy, A untouched
        expert = Expert.branch(table["A"]) if parent else Expert(config, trunk.hidden_size)
        randomize(expert, seed=seed)
        store.put(expert_id, expert, f"dom-{expert_id}", [0.0, 1.0], parent_expert_id=parent)
        table = {**table, expert_id: store.get(expert_id)}

    assert _tensor_hashes(table["A"]) == a_hashes
    assert _tensor_hashes(store.get("A")) == a_hashes
    assert hashlib.sha256((tmp_path / "store" / "A" / WEIGHTS).read_bytes()).hexdigest() == a_file
    assert store.manifest("A").sha256 == a_file
    assert _tensor_hashes(trunk.model) == trunk_hashes
    with torch.no_grad():
        after = Mixture(trunk, table).forward(ids, mask, weights)
        others = Mixture(trunk, table).forward(ids, mask, [{"B": 1.0}, {"C": 0.5, "D": 0.5}])
    assert after.dtype == before.dtype
    assert torch.equal(after, before)
    assert not torch.allclose(others, before)  # the new experts do compute something else
