"""Likelihood re-ranking with real (tiny, briefly trained) experts: a short in-domain prompt
the embedding rule leaves on the trunk or sends wrongly gets its domain; a prompt no expert
explains stays on the trunk; texts the route stage assigns are re-ranked only when another
domain claims them too."""

from __future__ import annotations

import pytest

from experts.config import ExpertsConfig
from experts.likelihood_routing import (
    LikelihoodRouter,
    choose,
    choose_keeping,
    likelihood_router,
    mixed_weights,
    tied,
)
from experts.serving import ExpertServer
from experts.store import ExpertStore
from experts.trunk import load_trunk
from router.embed import default_embedder
from router.gate import Gate
from tests.support.experts import domain_table, domain_texts
from trainer.config import TrainerConfig
from trainer.recipes.expert import train_expert

DOMAINS = ("python_code", "legal")
JUNK = "zqxj vbkw 0x7f 9913 ##@@ ~~ qqq \u0391\u0392\u0393 \u6771\u4eac \u2603\u2603"


@pytest.fixture(scope="module")
def trained(trunk_dirs, tmp_path_factory: pytest.TempPathFactory):
    """A server on its own tiny GPT-2 trunk with one expert per domain, each trained with
    the trainer's default recipe for a few steps on that domain's documents (not the
    prompts below, which come from later documents)."""
    trunk = load_trunk(trunk_dirs["gpt2"])  # its own copy: the recipe maps the weights
    store = ExpertStore(tmp_path_factory.mktemp("store"), trunk.fingerprint)
    embedder = default_embedder()
    table = domain_table(embedder, DOMAINS)
    config = TrainerConfig(
        max_steps=40, grad_accum_steps=1, progress=False, device="cpu", eval_every=20
    )
    server = ExpertServer(
        trunk,
        store,
        embedder,
        Gate(top_k=1),
        table,
        likelihood=LikelihoodRouter(2, margin=0.25, separation=0.1),
    )
    for domain in DOMAINS:
        result = train_expert(trunk, domain_texts(domain, 60), [], config)
        assert result.outcome == "finished", result.figures
        centroid = table.get(domain).centroid
        server.register(store.put(domain, result.expert, domain, centroid).registration())
    return server


def _embedding_decision(server: ExpertServer, text: str):
    vector = server.embedder.embed([text])[0]
    return server.gate.decide(vector, server.domains, server.table.by_domain, chars=len(text))


@pytest.mark.slow
def test_short_prompts_the_embedding_rule_misses_get_their_domain(trained) -> None:
    prompts = [doc[:40] for doc in domain_texts("legal", 100, skip=200)]
    vectors = trained.embedder.embed(prompts)
    missed = [  # unsure (the route stage's rule does not assign them), and not given legal
        p
        for p, v in zip(prompts, vectors, strict=True)
        if trained.domains.decide(v)[0] is None
        and _embedding_decision(trained, p).domain_id != "legal"
    ]
    assert len(missed) >= 5, "the embedding rule should leave some 40-char prompts unsure"
    served = [trained.score(p) for p in missed]
    own = [s for s in served if s["domain"] == "legal"]
    assert len(own) >= 0.6 * len(missed), [(s["domain"], s.get("likelihood")) for s in served]
    assert all(s["experts"] == {"legal": 1.0} and s["likelihood"]["changed"] for s in own)
    assert sum(s["domain"] == "python_code" for s in served) <= 1


@pytest.mark.slow
def test_a_prompt_no_expert_explains_stays_on_the_trunk(trained) -> None:
    assert _embedding_decision(trained, JUNK).domain_id is None
    result = trained.score(JUNK)
    assert result["likelihood"] is not None, "the step should have scored the candidates"
    assert result["domain"] is None and result["experts"] == {}
    losses = result["likelihood"]["losses"]
    assert min(losses.values()) > result["likelihood"]["trunk_loss"] - 0.25, result


@pytest.mark.slow
def test_a_text_the_route_stage_assigns_is_never_re_ranked(trained) -> None:
    whole = domain_texts("python_code", 1, skip=300)[0]
    vector = trained.embedder.embed([whole])[0]
    assert trained.domains.decide(vector)[0] == "python_code"
    result = trained.score(whole)
    assert result["domain"] == "python_code" and "likelihood" not in result


@pytest.mark.slow
def test_the_monitor_routes_held_out_texts_as_the_server_does(trained) -> None:
    from experts.mixture import Mixture
    from monitor.routing import GateRouter

    texts = [doc[:40] for doc in domain_texts("legal", 40, skip=200)] + [JUNK]
    texts += domain_texts("python_code", 2, skip=300)
    router = GateRouter(trained.embedder, trained.gate, trained.domains)
    table = trained.table
    gate_alone = router.route(texts, table.by_domain)
    router.use_likelihood(
        trained.likelihood, Mixture(trained.trunk, table), trained.trunk.tokenizer
    )
    monitored = router.route(texts, table.by_domain)
    served = [trained.route(t, table).weights for t in texts]
    assert monitored == served
    assert monitored != gate_alone  # the likelihood step decided some of these


@pytest.mark.slow
def test_off_means_the_gate_alone(trained, monkeypatch) -> None:
    monkeypatch.setattr(trained, "likelihood", None)
    prompt = domain_texts("legal", 1, skip=200)[0][:60]
    assert trained.route(prompt, trained.table) == _embedding_decision(trained, prompt)
    assert likelihood_router(ExpertsConfig(gate_likelihood_candidates=0)) is None
    assert likelihood_router(ExpertsConfig()) == LikelihoodRouter()  # the same defaults


def test_choose_keeps_the_embedding_decision_unless_an_expert_is_clearly_better() -> None:
    assert choose(None, 6.0, {}, 0.5) is None
    assert choose(None, 6.0, {"a": 5.6}, 0.5) is None  # not clearly below the trunk
    assert choose(None, 6.0, {"a": 5.4, "b": 5.0}, 0.5) == "b"
    assert choose("a", 6.0, {"a": 5.2, "b": 5.0}, 0.5) == "a"  # the embedding's pick stands
    assert choose("a", 6.0, {"a": 5.8, "b": 5.0}, 0.5) == "b"
    assert choose("c", 6.0, {"b": 5.0}, 0.5) == "b"  # c has no expert: the trunk stands for it
    assert choose(None, 6.0, {"a": 5.0, "b": 4.8}, 0.5, separation=0.6) is None  # too close
    assert choose(None, 6.0, {"a": 5.0, "b": 4.3}, 0.5, separation=0.6) == "b"
    with pytest.raises(ValueError, match="margin"):
        LikelihoodRouter(margin=-1.0)


def test_a_newer_expert_takes_a_text_only_by_winning_it_outright() -> None:
    """Incumbency: python (older) explains a text that legal (newer) explains about as
    well; all at once the tie sends it back to the trunk, with incumbency python keeps it."""
    tie = {"python": 5.0, "legal": 4.8}
    assert choose(None, 6.0, tie, 0.5, separation=0.6) is None
    assert choose_keeping(None, 6.0, tie, 0.5, 0.6, ["python", "legal"]) == "python"
    assert choose_keeping(None, 6.0, tie, 0.5, 0.6, ["legal", "python"]) == "legal"
    clear = {"python": 5.0, "legal": 4.3}
    assert choose_keeping(None, 6.0, clear, 0.5, 0.6, ["python", "legal"]) == "legal"
    weak = {"python": 5.8, "legal": 5.7}  # neither clearly below the trunk
    assert choose_keeping(None, 6.0, weak, 0.5, 0.6, ["python", "legal"]) is None
    assert choose_keeping("a", 6.0, {"a": 5.2, "b": 5.0}, 0.5, 0.0, ["a", "b"]) == "a"


def test_adding_the_newest_candidate_changes_a_decision_only_to_the_newcomer() -> None:
    """The guarantee behind incumbency, on random losses: with one candidate more (the
    newest), the decision is the one before or the newcomer, never a fallback."""
    import numpy as np

    rng = np.random.default_rng(0)
    changed = 0
    for _ in range(3000):
        k = int(rng.integers(1, 6))
        order = [f"d{i}" for i in range(k)]
        losses = {d: float(rng.uniform(3.0, 6.5)) for d in order}
        embedding = rng.choice([None, "d0", f"d{k - 1}", "x"])
        margin, separation = float(rng.uniform(0, 1)), float(rng.uniform(0, 1))
        before = choose_keeping(embedding, 6.0, losses, margin, separation, order[:-1])
        after = choose_keeping(embedding, 6.0, losses, margin, separation, order)
        assert after in (before, order[-1]), (embedding, losses, margin, separation)
        changed += after != before
        if k == 1:
            assert after == choose(embedding, 6.0, losses, margin, separation)
    assert changed > 100  # newcomers do win texts outright


def test_the_router_orders_candidates_by_their_first_experts_registration() -> None:
    """Age is the expert's, not the domain's: legal's domain was promoted first but its
    expert arrived after python's, so python's expert keeps a tied text (the many-domain
    demo lost half of an old domain's documents to a domain promoted early whose expert
    came late, when the domain's promotion time decided)."""
    from router.gate import DomainExperts, GateExpert

    experts = DomainExperts(
        [
            GateExpert("python-e1", "python", [1.0, 0.0], created_ms=2_000),
            GateExpert("legal-e1", "legal", [0.0, 1.0], created_ms=3_000),
            GateExpert("legal-e2", "legal", [0.0, 1.0], created_ms=1_500),  # a drift expert
        ]
    )
    assert experts.since("legal") == 1_500 and experts.since("python") == 2_000
    tie = {"legal": 4.8, "python": 5.0}
    assert LikelihoodRouter().choose(None, 6.0, tie, experts) == "legal"
    late = DomainExperts(
        [
            GateExpert("python-e1", "python", [1.0, 0.0], created_ms=2_000),
            GateExpert("legal-e1", "legal", [0.0, 1.0], created_ms=3_000),
        ]
    )
    assert LikelihoodRouter().choose(None, 6.0, tie, late) == "python"
    assert LikelihoodRouter(incumbent=False).choose(None, 6.0, tie, late) is None
    assert likelihood_router(ExpertsConfig(gate_likelihood_incumbent=False)).incumbent is False


def test_tied_candidates_are_mixed_only_when_each_clearly_beats_the_trunk() -> None:
    assert tied(10.0, {"a": 6.0, "b": 6.5}, mix_margin=3.0, separation=0.6) == ["a", "b"]
    assert tied(10.0, {"a": 6.0, "b": 7.5}, mix_margin=3.0, separation=0.6) == []  # b too weak
    assert tied(10.0, {"a": 6.0, "b": 6.7}, mix_margin=3.0, separation=0.6) == []  # not tied
    assert tied(10.0, {"a": 6.0}, mix_margin=3.0, separation=0.6) == []  # one: no mix
    assert tied(10.0, {"a": 6.0, "b": 6.1, "c": 6.2}, 3.0, 0.6) == ["a", "b"]  # mix_top 2
    assert tied(10.0, {"a": 6.0, "b": 6.1, "c": 6.2}, 3.0, 0.6, mix_top=3) == ["a", "b", "c"]
    assert tied(10.0, {"a": 6.0, "b": 6.1}, float("inf"), 0.6) == []  # off
    weights = mixed_weights({"a": {"a1": 0.75, "a2": 0.25}, "b": {"b1": 1.0}}, ["a", "b"])
    assert weights == {"a1": 0.375, "a2": 0.125, "b1": 0.5}


@pytest.mark.slow
def test_a_novel_prompt_two_experts_explain_alike_gets_their_mix(trained, monkeypatch) -> None:
    """Everything counts as tied here (separation 100), and mixing needs only that each
    expert beats the trunk (mix_margin 0), candidates all at once (no incumbency): the
    prompts the step leaves novel are mixed exactly when both experts are below the
    trunk's loss, and never with mixing off."""
    prompts = [doc[:40] for doc in domain_texts("legal", 60, skip=200)]
    # without incumbency: with it, the older expert keeps a text both explain alike
    mixing = LikelihoodRouter(2, 0.25, separation=100.0, mix_margin=0.0, incumbent=False)
    monkeypatch.setattr(trained, "likelihood", mixing)
    novel = [p for p in prompts if _embedding_decision(trained, p).domain_id is None]
    served = [trained.score(p) for p in novel]
    both = [
        s
        for s in served
        if max(s["likelihood"]["losses"].values()) <= s["likelihood"]["trunk_loss"]
    ]
    assert both, "some novel legal prompts should be explained better by both experts"
    mixed = 0
    for result in served:
        if result in both and min(result["likelihood"]["losses"].values()) <= (
            result["likelihood"]["trunk_loss"] - 0.25
        ):
            assert result["domain"] is None
            assert result["experts"] == {"legal": 0.5, "python_code": 0.5}, result
            assert sorted(result["likelihood"]["mixed"]) == ["legal", "python_code"]
            if not mixed:  # the explanation says so
                why = trained.score(novel[served.index(result)], explain=True)["explain"]
                assert "mixed by the likelihood step" in why["served_why"], why
                assert why["experts"] == result["experts"]
            mixed += 1
        else:
            assert len(result["experts"]) <= 1 and "mixed" not in result["likelihood"]
    assert mixed >= 1, "at least one prompt should have been mixed"
    monkeypatch.setattr(trained, "likelihood", LikelihoodRouter(2, 0.25, 100.0, 64, float("inf")))
    assert all(len(trained.score(p)["experts"]) <= 1 for p in novel)


def test_config_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match="gate_likelihood"):
        ExpertsConfig(gate_likelihood_candidates=-1).validate()
    with pytest.raises(ValueError, match="mix_margin"):
        ExpertsConfig(gate_likelihood_mix_margin=-1.0).validate()
    ExpertsConfig().validate()


def _contest_table():
    import numpy as np

    from router.records import DomainRecord
    from router.table import DomainTable

    table = DomainTable()
    for name, centroid in (("old", [1.0, 0.0, 0.0]), ("new", [0.8, 0.6, 0.0])):
        table.apply(DomainRecord(name, centroid, 0.7, 50, 0.9))
    table.apply(DomainRecord("far", [0.0, 0.0, 1.0], 0.7, 50, 0.9))
    text = np.array([0.9, 0.43, 0.0], np.float32)
    return table, text / np.linalg.norm(text)  # cos: old 0.90, new 0.98, far 0


def test_an_assigned_text_is_contested_only_by_a_rival_that_reaches_its_own_threshold():
    from router.gate import DomainExperts, GateExpert

    table, text = _contest_table()
    both = DomainExperts(GateExpert(f"{d}-e1", d, table.get(d).centroid) for d in ("old", "new"))
    decision = Gate().decide(text, table, both)
    assert decision.domain_id == "new"  # the newcomer is nearest

    def candidates(gap, experts=both):
        return LikelihoodRouter(contest_gap=gap).candidates_of(text, table, experts, decision)

    assert candidates(0.0) == ([], False)  # off: the route stage's decision stands
    assert candidates(0.05) == ([], False)  # old is 0.08 below the nearest
    assert candidates(0.1) == (["new", "old"], True)
    assert candidates(float("inf")) == (["new", "old"], True)
    only_old = DomainExperts([GateExpert("old-e1", "old", table.get("old").centroid)])
    assert candidates(0.1, only_old) == (["old"], True)  # the newcomer has no expert yet
    only_new = DomainExperts([GateExpert("new-e1", "new", table.get("new").centroid)])
    assert candidates(0.1, only_new) == ([], False)  # no rival with an expert
    with pytest.raises(ValueError, match="contest_gap"):
        LikelihoodRouter(contest_gap=-0.1)


def test_a_text_of_a_domain_waiting_for_its_expert_is_re_ranked_as_a_novel_one():
    """The text is nearest to 'new', whose expert has not come yet (the trunk would serve
    it): with contest_waiting, the nearest domains with an expert are scored as for a novel
    text, whether or not the text reaches their thresholds: 'old' at cosine 0.90 below its
    threshold 0.95 (an old domain's document a newcomer's threshold took), and 'far'."""
    from router.gate import DomainExperts, GateExpert
    from router.records import DomainRecord

    table, text = _contest_table()
    table.apply(DomainRecord("old", table.get("old").centroid, 0.95, 50, 0.97, version=2))
    experts = DomainExperts(GateExpert(f"{d}-e1", d, table.get(d).centroid) for d in ("old", "far"))
    decision = Gate().decide(text, table, experts)
    assert decision.domain_id == "new" and decision.weights == {}  # the trunk serves it

    def candidates(**kw):
        return LikelihoodRouter(**kw).candidates_of(text, table, experts, decision)

    assert candidates(contest_waiting=False) == ([], False)
    off = {"contest_waiting": False, "contest_gap": float("inf")}
    assert candidates(**off) == ([], False)  # old is below its threshold
    assert candidates() == (["old", "far"], True)  # the default
    assert candidates(candidates=2) == (["old"], True)  # 'new' counts
    every = DomainExperts(
        GateExpert(f"{d}-e1", d, table.get(d).centroid) for d in ("old", "new", "far")
    )
    served = Gate().decide(text, table, every)
    step = LikelihoodRouter()
    assert step.candidates_of(text, table, every, served) == ([], False)  # it has one now


def test_a_waiting_domain_takes_no_text_an_experts_domain_held() -> None:
    """'new' (no expert yet) is nearest; without it the text would be 'old''s (it reaches
    old's threshold): 'old' keeps it unless another expert wins it outright, even when
    old's expert does not beat the trunk by margin on the text's head; a text no domain
    with an expert held stays with the waiting domain (the trunk)."""
    from router.gate import DomainExperts, GateExpert
    from router.records import DomainRecord

    table, text = _contest_table()
    experts = DomainExperts(GateExpert(f"{d}-e1", d, table.get(d).centroid) for d in ("old", "far"))
    step = LikelihoodRouter()
    assert step.keeper_of(text, table, experts) == "old"  # cosine 0.90 >= 0.7
    unsure = {"old": 5.8, "far": 9.0}  # old beats the trunk (6.0) by 0.2 < margin
    assert step.choose("old", 6.0, unsure, experts) == "old"
    assert step.choose("new", 6.0, unsure, experts) == "new"  # what held it before: the trunk
    assert step.choose("old", 6.0, {"old": 5.8, "far": 4.0}, experts) == "far"  # won outright
    table.apply(DomainRecord("old", table.get("old").centroid, 0.95, 50, 0.97, version=2))
    assert step.keeper_of(text, table, experts) is None  # below old's own threshold
    assert step.keeper_of(text, table, DomainExperts([])) is None


@pytest.mark.slow
def test_a_newcomer_does_not_take_a_document_an_older_expert_explains_better(trained) -> None:
    """A new domain centred on one python file, served by the legal expert (as when a
    neighbour's centroid comes nearer to an old domain's documents): the gate alone hands
    the file to the newcomer; contested, the python expert keeps it."""
    from router.records import DomainRecord
    from router.table import DomainTable

    whole = domain_texts("python_code", 1, skip=300)[0]
    vector = trained.embedder.embed([whole])[0]
    python = trained.domains.get("python_code")
    table = DomainTable()
    for domain in DOMAINS:
        table.apply(trained.domains.get(domain))
    rival = [round(float(x), 7) for x in vector]
    table.apply(DomainRecord("rival", rival, python.threshold, 1, 1.0, label_hint="rival"))
    store = trained.store
    store.put("rival", store.get("legal"), "rival", rival)

    def served(contest_gap: float) -> dict:
        step = LikelihoodRouter(2, margin=0.25, separation=0.1, contest_gap=contest_gap)
        server = ExpertServer(
            trained.trunk, store, trained.embedder, Gate(top_k=1), table, likelihood=step
        )
        for expert_id in (*DOMAINS, "rival"):
            outcome = server.register(store.manifest(expert_id).registration())
            assert outcome.status == "registered", outcome
        return server.score(whole, explain=True)

    alone = served(0.0)
    assert alone["domain"] == "rival" and alone["experts"] == {"rival": 1.0}
    kept = served(float("inf"))
    assert kept["domain"] == "python_code" and kept["experts"] == {"python_code": 1.0}, kept
    assert kept["likelihood"]["contested"] and kept["likelihood"]["changed"]
    assert "another domain claimed it too" in kept["explain"]["likelihood"]["why"]
