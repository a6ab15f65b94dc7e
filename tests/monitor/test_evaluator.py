"""The evaluator on a real tiny trunk and a real expert store (three experts, four domains)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from tests.support.smallrun import ALL_DOMAINS, EXPERT_DOMAINS, SmallRun, corpus_docs, train_expert


def test_three_experts_full_matrix_and_zero_weight_forgetting(small_run: SmallRun) -> None:
    rows = small_run.history.rows("ours")
    assert [r.step for r in rows] == [0, 1, 2, 3]
    assert [r.arrived_domain for r in rows] == [None, *EXPERT_DOMAINS]
    assert rows[-1].expert_ids == [f"{d}-e1" for d in EXPERT_DOMAINS]
    m = small_run.history.matrix("ours")
    assert m["domains"] == [*EXPERT_DOMAINS, "news"]  # arrival order, then the rest
    assert m["arrivals"] == [1, 2, 3, None]
    for row in m["loss"]:  # full: every domain at every step, finite
        assert all(v is not None and math.isfinite(v) for v in row)
    for row in rows:
        assert row.weight_changes == []
        assert row.heldout_size == {d: 6 for d in ALL_DOMAINS}
        assert row.perplexity["legal"] == math.exp(row.loss["legal"])
    # each expert improves its own domain over the trunk alone, on held-out documents
    for j in range(len(EXPERT_DOMAINS)):
        assert m["loss"][j + 1][j] < m["loss"][0][j]
    # summaries of the metrics travel with the row
    last = rows[-1].summary
    assert last["step"] == 3 and last["domains"] == m["domains"]
    assert last["forgetting"][3] is not None  # news: never given an expert, still tracked


def test_replay_of_a_registration_evaluates_nothing_and_returns_its_rows(
    run_copy: SmallRun,
) -> None:
    eid = "legal-e1"
    _, domain, centroid = run_copy.experts[eid]
    before = run_copy.history.rows("ours")
    step = [r.arrived_expert for r in before].index(eid)
    assert run_copy.evaluator.on_registration(eid, domain, centroid) == before[: step + 1]
    assert run_copy.history.rows("ours") == before


def test_flipped_byte_of_an_earlier_expert_is_weight_forgetting(run_copy: SmallRun) -> None:
    victim = run_copy.root / "store" / "python_code-e1" / "weights.safetensors"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01  # last byte of the last tensor's data
    victim.write_bytes(bytes(data))

    # the next step: a fourth expert is registered
    news = [t for _, t in corpus_docs("news", 40)[6:]]
    expert = train_expert(run_copy.trunk, news, seed=9, steps=5)
    centroid = np.full(128, 128**-0.5).tolist()
    run_copy.store.put("news-e1", expert, "news", centroid)
    rows = run_copy.evaluator.on_registration("news-e1", "news", centroid)

    row = rows[-1]
    assert row.step == 4
    changed = [c for c in row.weight_changes if c.startswith("file/python_code-e1/")]
    assert changed and all(c.endswith(": changed") for c in changed)
    refused = [c for c in row.weight_changes if c.startswith("store/python_code-e1: refused")]
    assert refused and "corrupt" in refused[0]
    # nothing else was touched: the other experts and the trunk are bit-identical
    assert not [c for c in row.weight_changes if "legal" in c or "scripture" in c or "trunk" in c]
    # and the store itself refuses it (quarantined, never served again)
    assert [q["expert_id"] for q in run_copy.store.quarantined()] == ["python_code-e1"]
    assert all(r.weight_changes == [] for r in run_copy.history.rows("ours")[:4])


def test_a_changed_trunk_tensor_in_memory_is_reported(run_copy: SmallRun) -> None:
    param = next(run_copy.trunk.model.parameters())
    original = param.detach().clone()
    try:
        with torch.no_grad():
            param.view(-1)[0] += 1.0
        rows = run_copy.evaluator.evaluate_now()
    finally:
        with torch.no_grad():
            param.copy_(original)
    assert any(c.startswith("trunk/") and c.endswith(": changed") for c in rows[-1].weight_changes)
    assert rows[-1].step == 3  # on demand: the latest step re-evaluated in place


def test_restart_keeps_history_and_held_out_sets(run_copy: SmallRun, small_run: SmallRun) -> None:
    assert run_copy.history.rows("ours") == small_run.history.rows("ours")
    for domain in ALL_DOMAINS:
        assert run_copy.heldout.docs(domain) == small_run.heldout.docs(domain)


def test_failed_evaluation_is_retried_on_redelivery(run_copy: SmallRun, monkeypatch) -> None:
    news = [t for _, t in corpus_docs("news", 40)[6:]]
    centroid = np.full(128, 128**-0.5).tolist()
    run_copy.store.put(
        "news-e1", train_expert(run_copy.trunk, news, seed=3, steps=3), "news", centroid
    )
    with pytest.raises(ValueError, match="same embedder"):  # a foreign centroid, said plainly
        run_copy.evaluator.on_registration("news-e1", "news", [1.0, 0.0, 0.0])

    def broken(texts, centroids):
        raise RuntimeError("embedder down")

    monkeypatch.setattr(run_copy.evaluator.router, "decide", broken)
    with pytest.raises(RuntimeError, match="embedder down"):
        run_copy.evaluator.on_registration("news-e1", "news", centroid)
    assert len(run_copy.history.rows("ours")) == 4
    monkeypatch.undo()
    rows = run_copy.evaluator.on_registration("news-e1", "news", centroid)  # the redelivery
    assert rows[-1].step == 4 and rows[-1].weight_changes == []


def test_a_trunk_served_domain_shows_no_routing_forgetting(small_run: SmallRun) -> None:
    """news never gets an expert; its documents are nearest to legal's expert centroid, so
    the old gate (nearest expert centroid) moved them all there. Through the domain table
    they stay on the trunk, and the monitor's figures for news do not move at all."""
    from monitor.run_summary import max_old_domain_loss_rise
    from router.gate import CentroidIndex

    router = small_run.evaluator.router
    texts = [d.text for d in small_run.heldout.docs("news")]
    index = CentroidIndex(list(small_run.experts), [c for _, _, c in small_run.experts.values()])
    sims = router.embedder.embed(texts) @ index.matrix.T  # (6, 3)
    assert all(row.max() >= 0.05 for row in sims)  # the old rule routed every one...
    assert {index.ids[int(np.argmax(row))] for row in sims} == {"legal-e1"}  # ...to legal

    rows = small_run.history.rows("ours")
    assert len({r.loss["news"] for r in rows}) == 1  # bit-identical at every step
    assert all(r.routing_changed["news"] == 0.0 for r in rows[1:])
    detail = small_run.history.data["detail"]["ours"]["news"]
    assert [v["routing"] for v in detail.values()] == [{}] * 6
    news_only = [dataclasses.replace(r, loss={"news": r.loss["news"]}) for r in rows]
    assert max_old_domain_loss_rise(news_only) == 0.0
    # the experts still serve their own domains: each improved its column
    m = small_run.history.matrix("ours")
    assert all(m["loss"][j + 1][j] < m["loss"][0][j] for j in range(len(EXPERT_DOMAINS)))


def test_the_monitor_routes_and_scores_as_the_server_serves(small_run: SmallRun) -> None:
    """Same domain table, same experts: every held-out document gets from the server the
    experts (and the loss) the monitor's latest row recorded for it."""
    from experts.serving import ExpertServer

    router = small_run.evaluator.router
    server = ExpertServer(
        small_run.trunk,
        small_run.store,
        router.embedder,
        router.gate,
        router.domains,
        max_tokens=64,
    )
    for eid in small_run.history.rows("ours")[-1].expert_ids:
        server.register(small_run.store.manifest(eid).registration())
    detail = small_run.history.data["detail"]["ours"]
    routed = set()
    for domain in ALL_DOMAINS:
        for doc in small_run.heldout.docs(domain):
            served = server.score(doc.text)
            recorded = detail[domain][doc.doc_id]
            assert served["experts"] == recorded["routing"], (domain, doc.doc_id)
            assert served["mean_loss"] == pytest.approx(recorded["loss"], rel=1e-4, abs=1e-4)
            routed.update(served["experts"])
    assert routed == set(small_run.experts)
