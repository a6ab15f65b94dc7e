"""The same guarantees on a CUDA trunk (skipped where no GPU is present)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from experts.expert import Expert, ExpertConfig
from experts.mixture import Mixture
from experts.serving import ExpertServer
from experts.store import ExpertStore
from experts.trunk import load_trunk
from router.embed import default_embedder
from router.gate import Gate
from tests.support.experts import domain_table, domain_texts, make_domain_expert, randomize

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_mixture_and_serving(trunk_dirs, tmp_path: Path, dtype) -> None:
    trunk = load_trunk(trunk_dirs["llama"], dtype=dtype, device="cuda")
    enc = trunk.tokenizer(
        ["The court held that", "def f(x): return x"], return_tensors="pt", padding=True
    )
    ids, mask = enc["input_ids"].cuda(), enc["attention_mask"].cuda()
    zero = Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=8), trunk.hidden_size).to(
        "cuda", dtype
    )
    trained = randomize(
        Expert(ExpertConfig(kind="adapter", layers=(1,), rank=8), trunk.hidden_size), 3
    )
    mixture = Mixture(trunk, {"zero": zero, "t": trained.to("cuda", dtype)})
    with torch.no_grad():
        base = trunk.model(input_ids=ids, attention_mask=mask).logits
        same = mixture.forward(ids, mask, [{"zero": 1.0}, {"zero": 0.5}])
        mixed = mixture.forward(ids, mask, [{"t": 1.0}, {}])
    assert torch.equal(same, base)
    assert torch.equal(mixed[1], base[1]) and not torch.equal(mixed[0], base[0])

    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    embedder = default_embedder()
    domains = domain_table(embedder, ["python_code", "legal"])
    server = ExpertServer(trunk, store, embedder, Gate(top_k=1), domains)
    manifest = make_domain_expert(store, trunk, server.embedder, "code", "python_code", 1)
    assert server.register(manifest.registration()).status == "registered"
    result = server.score(domain_texts("python_code", 1, skip=30)[0])
    assert result["experts"] == {"code": 1.0}
    assert next(server.table["code"].parameters()).device.type == "cuda"
