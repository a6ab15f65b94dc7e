"""Routing forgetting: a domain the trunk serves is never re-routed by a later expert.

The bug this pins down (measured in `worx demo --quick`): fiction_austen had no expert of
its own; when the scripture expert arrived, the old gate (nearest *expert* centroid above
a global floor) sent most of fiction's documents to it and fiction's loss rose. Here, with
the bundled trunk, real store files and the router's embedder, the same happens with the
old rule (checked directly below) and not with the gate, which goes through the domain
table.
"""

from __future__ import annotations

import numpy as np
import pytest

from experts.default_trunk import default_trunk_dir
from experts.serving import ExpertServer
from experts.store import ExpertStore
from experts.trunk import load_trunk
from router.embed import default_embedder
from router.gate import CentroidIndex, Gate
from tests.support.experts import domain_table, domain_texts, make_domain_expert

DOMAINS = ("fiction_austen", "news", "legal", "scripture")  # the demo --quick order


@pytest.mark.slow
def test_trunk_served_domain_keeps_its_routing_and_loss_when_experts_arrive(tmp_path) -> None:
    trunk = load_trunk(default_trunk_dir())
    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    embedder = default_embedder()
    domains = domain_table(embedder, DOMAINS)
    server = ExpertServer(trunk, store, embedder, Gate(top_k=1), domains)
    fiction = domain_texts("fiction_austen", 24, skip=200)  # held out from the centroid
    before = [server.score(t) for t in fiction]
    assert all(b["experts"] == {} for b in before)
    decided = [b["domain"] for b in before]  # a few are novel or news-like: trunk too
    assert decided.count("fiction_austen") >= 18 and not {"legal", "scripture"} & set(decided)

    manifests = [
        make_domain_expert(store, trunk, embedder, eid, domain, seed)
        for seed, (eid, domain) in enumerate((("legal-e1", "legal"), ("scripture-e1", "scripture")))
    ]
    for manifest in manifests:
        assert server.register(manifest.registration()).status == "registered"

    # the old rule would have moved them: nearest expert centroid, above its 0.05 floor
    index = CentroidIndex([m.expert_id for m in manifests], [m.centroid for m in manifests])
    sims = embedder.embed(fiction) @ index.matrix.T  # (24, 2)
    old_rule = [index.ids[int(np.argmax(row))] for row in sims if row.max() >= 0.05]
    assert len(old_rule) >= 12  # at least half of fiction would go to another domain's expert

    after = [server.score(t) for t in fiction]
    assert [a["experts"] for a in after] == [b["experts"] for b in before]
    assert [a["domain"] for a in after] == [b["domain"] for b in before]
    assert [a["token_losses"] for a in after] == [b["token_losses"] for b in before]
    # and the new experts do serve their own domains
    scripture = domain_texts("scripture", 1, skip=200)[0]
    assert server.score(scripture)["experts"] == {"scripture-e1": 1.0}
