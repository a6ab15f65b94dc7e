"""Serving: routing, scoring, hot registration into immutable tables, refusals, restart, HTTP."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from experts.serving import ExpertServer
from experts.store import WEIGHTS, ExpertStore
from router.embed import default_embedder
from router.gate import Gate
from tests.support.experts import domain_table, domain_texts, make_domain_expert
from tests.support.kafka import publish_many
from topology.serve.http_api import make_http_server
from topology.serve.registration_follower import RegistrationFollower

CODE = domain_texts("python_code", 1, skip=30)[0]
LEGAL = domain_texts("legal", 1, skip=30)[0]
BIO = domain_texts("biomedical", 1, skip=30)[0]
DOMAINS = ("python_code", "legal", "biomedical")


def _server(trunk, store: ExpertStore) -> ExpertServer:
    """A server whose domain table knows the three domains (as worx.domains would say)."""
    embedder = default_embedder()
    return ExpertServer(trunk, store, embedder, Gate(top_k=1), domain_table(embedder, DOMAINS))


@pytest.fixture
def server(gpt2_trunk, tmp_path: Path) -> ExpertServer:
    return _server(gpt2_trunk, ExpertStore(tmp_path / "store", gpt2_trunk.fingerprint))


def _put(server: ExpertServer, expert_id: str, domain: str, seed: int):
    return make_domain_expert(
        server.store, server.trunk, server.embedder, expert_id, domain, seed=seed
    )


def test_score_routes_to_the_domain_expert_and_reports_per_token_losses(server) -> None:
    trunk_only = server.score(CODE)
    assert trunk_only["experts"] == {} and trunk_only["table_version"] == 0
    for expert_id, domain, seed in (("code", "python_code", 1), ("legal", "legal", 2)):
        outcome = server.register(_put(server, expert_id, domain, seed).registration())
        assert outcome.status == "registered"
    result = server.score(CODE)
    assert result["experts"] == {"code": 1.0}
    assert server.score(LEGAL)["experts"] == {"legal": 1.0}
    assert len(result["token_losses"]) == len(result["tokens"]) > 5
    assert result["perplexity"] == pytest.approx(math.exp(result["mean_loss"]))
    assert result["mean_loss"] != pytest.approx(trunk_only["mean_loss"])
    forced = server.score(CODE, expert_weights={})
    assert forced["mean_loss"] == pytest.approx(trunk_only["mean_loss"], abs=1e-6)
    long = server.score(CODE * 40)  # longer than the trunk's 512 positions: cut, not failed
    assert long["truncated"] and len(long["token_losses"]) == server.max_tokens - 1 == 511
    generated = server.generate(CODE, max_new_tokens=5)
    assert generated["experts"] == {"code": 1.0} and generated["new_tokens"] == 5
    assert server.generate(CODE * 40, max_new_tokens=3)["truncated"]


def test_registration_swaps_a_new_table_and_in_flight_tables_are_untouched(server) -> None:
    server.register(_put(server, "code", "python_code", 1).registration())
    in_flight = server.table
    outcome = server.register(_put(server, "legal", "legal", 2).registration())
    assert outcome.table_version == in_flight.version + 1
    assert "legal" not in in_flight and list(in_flight) == ["code"]
    assert list(server.table) == ["code", "legal"]
    assert server.store.cache_info()["cached_experts"] == 2  # loaded before the swap
    again = server.register(server.store.manifest("legal").registration())
    assert again.status == "unchanged" and again.table_version == outcome.table_version


def _corrupt(store: ExpertStore, expert_id: str, how: str) -> None:
    entry = store.root / expert_id
    if how == "flip":
        data = bytearray((entry / WEIGHTS).read_bytes())
        data[-2] ^= 0xFF
        (entry / WEIGHTS).write_bytes(bytes(data))
    elif how == "truncate":
        (entry / WEIGHTS).write_bytes((entry / WEIGHTS).read_bytes()[:-7])
    elif how == "manifest":
        body = json.loads((entry / "manifest.json").read_text())
        body["num_params"] = "many"
        (entry / "manifest.json").write_text(json.dumps(body))


def test_every_refusal_class_is_reported_and_serving_continues(server, tmp_path) -> None:
    good = _put(server, "code", "python_code", 1)
    regs = {}
    for expert_id, how in (("corrupt", "flip"), ("short", "truncate"), ("badman", "manifest")):
        regs[expert_id] = _put(server, expert_id, "legal", 3).registration()
        _corrupt(server.store, expert_id, how)
    other = ExpertStore(server.store.root, "0" * 64)
    regs["foreign"] = make_domain_expert(
        other, server.trunk, server.embedder, "foreign", "legal", 4
    ).registration()
    regs["unsafe"] = dataclasses.replace(good.registration(), expert_id="../../etc")
    regs["dup"] = dataclasses.replace(good.registration(), sha256="1" * 64)
    regs["othertrunk"] = dataclasses.replace(good.registration(), trunk_fingerprint="2" * 64)
    expected = {
        "corrupt": ("corrupt", "sha256 of weights.safetensors"),
        "short": ("truncated", "the manifest says"),
        "badman": ("bad_manifest", "num_params"),
        "foreign": ("wrong_trunk", "only loads onto its own trunk"),
        "unsafe": ("unsafe_id", "not a safe name"),
        "dup": ("duplicate_id", "ids are write-once"),
        "othertrunk": ("wrong_trunk", "this server runs"),
    }
    assert server.register(good.registration()).status == "registered"
    stop = threading.Event()
    answers: list[dict] = []

    def stream() -> None:  # requests keep flowing while the refusals happen
        while not stop.is_set():
            answers.append(server.score(CODE))

    thread = threading.Thread(target=stream)
    thread.start()
    try:
        for name, (reason, detail) in expected.items():
            outcome = server.register(regs[name])
            assert outcome.status == "refused", name
            assert outcome.refusal["reason"] == reason, name
            assert detail in outcome.refusal["detail"], name
    finally:
        stop.set()
        thread.join()
    for name in ("corrupt", "short", "badman"):
        assert name not in server.store.ids()  # quarantined
    assert {q["expert_id"] for q in server.store.quarantined()} == {"corrupt", "short", "badman"}
    assert "foreign" in server.store.ids()  # another trunk's expert: skipped, never moved
    assert list(server.table) == ["code"]
    assert answers and all(a["experts"] == {"code": 1.0} for a in answers)
    assert server.failed_requests == 0
    assert [r["reason"] for r in server.health()["refusals"]] == [e[0] for e in expected.values()]


def test_expert_damaged_after_registration_is_dropped_and_the_request_served(server) -> None:
    server.register(_put(server, "code", "python_code", 1).registration())
    server.register(_put(server, "legal", "legal", 2).registration())
    server.store.evict("code")
    _corrupt(server.store, "code", "flip")
    result = server.score(CODE)  # re-verification fails: dropped, served without it
    assert "code" not in result["experts"]
    assert list(server.table) == ["legal"]
    assert server.refusals[-1]["reason"] == "corrupt"
    assert server.score(LEGAL)["experts"] == {"legal": 1.0}
    assert server.failed_requests == 0


def test_restart_rebuilds_the_table_from_the_store(server, gpt2_trunk) -> None:
    for expert_id, domain, seed in (("code", "python_code", 1), ("bio", "biomedical", 2)):
        server.register(_put(server, expert_id, domain, seed).registration())
    before = server.score(BIO)
    restarted = _server(gpt2_trunk, ExpertStore(server.store.root, gpt2_trunk.fingerprint))
    assert list(restarted.rebuild_from_store()) == ["bio", "code"]
    after = restarted.score(BIO)
    assert after["experts"] == before["experts"] == {"bio": 1.0}
    assert after["token_losses"] == before["token_losses"]


def _http(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_api(server) -> None:
    server.register(_put(server, "code", "python_code", 1).registration())
    httpd = make_http_server(server, "127.0.0.1", 0).start()
    assert httpd.server_address[0] == "127.0.0.1"
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        status, health = _http(f"{base}/health")
        assert status == 200 and health["experts"] == 1 and health["status"] == "ok"
        status, listing = _http(f"{base}/experts")
        assert [e["expert_id"] for e in listing["experts"]] == ["code"]
        assert _http(f"{base}/experts/code")[1]["sha256"] == server.table.manifests["code"].sha256
        assert _http(f"{base}/experts/nope")[0] == 404
        status, scored = _http(f"{base}/score", {"text": CODE})
        assert status == 200 and scored["experts"] == {"code": 1.0}
        status, forced = _http(f"{base}/score", {"text": CODE, "experts": {}})
        assert status == 200 and forced["experts"] == {}
        status, gen = _http(f"{base}/generate", {"text": "def f(x):", "max_new_tokens": 4})
        assert status == 200 and gen["new_tokens"] == 4
        assert _http(f"{base}/score", {"text": ""})[0] == 400
        assert _http(f"{base}/score", {"text": CODE, "experts": {"ghost": 1.0}})[0] == 400
        assert _http(f"{base}/generate", {"text": "x y", "max_new_tokens": 10_000})[0] == 400
        assert _http(f"{base}/nowhere")[0] == 404
    finally:
        httpd.stop()


def test_follower_applies_topic_events_from_the_real_broker(server, kafka_conf, topics) -> None:
    done = threading.Condition()
    outcomes = []

    def on_outcome(outcome) -> None:
        with done:
            outcomes.append(outcome)
            done.notify_all()

    follower = RegistrationFollower(server, kafka_conf, topics.experts, on_outcome).start()
    try:
        code = _put(server, "code", "python_code", 1).registration()
        events = [
            ("junk", b"{not a record"),
            ("code", code.to_json()),
            ("code", code.to_json()),  # replay: no-op
            ("code", None),  # tombstone
        ]
        publish_many(kafka_conf, topics.experts, events)
        with done:
            assert done.wait_for(lambda: len(outcomes) >= 3, timeout=30)
        assert [o.status for o in outcomes] == ["registered", "unchanged", "removed"]
        assert server.refusals[0]["reason"] == "bad_registration"
        assert list(server.table) == []
    finally:
        follower.stop()


def test_a_bfloat16_trunk_gets_expert_copies_in_its_dtype(trunk_dirs, tmp_path) -> None:
    from experts.trunk import load_trunk

    trunk = load_trunk(trunk_dirs["llama"], dtype=torch.bfloat16)
    store = ExpertStore(tmp_path / "store", trunk.fingerprint)
    server = _server(trunk, store)
    assert server.register(_put(server, "code", "python_code", 1).registration()).status == (
        "registered"
    )
    result = server.score(CODE)
    assert result["experts"] == {"code": 1.0} and math.isfinite(result["mean_loss"])
    served = server.table["code"]
    assert next(served.parameters()).dtype == torch.bfloat16
    assert next(store.get("code").parameters()).dtype == torch.float32  # the stored one


def test_restart_rebuilds_from_store_and_topic(server, gpt2_trunk, kafka_conf, topics) -> None:
    code = _put(server, "code", "python_code", 1).registration()
    legal = _put(server, "legal", "legal", 2).registration()
    _put(server, "bio", "biomedical", 3)  # stored, never announced (killed in between)
    events = [(r.expert_id, r.to_json()) for r in (code, legal)]
    events.append(("legal", None))  # later withdrawn
    publish_many(kafka_conf, topics.experts, events)

    restarted = _server(gpt2_trunk, ExpertStore(server.store.root, gpt2_trunk.fingerprint))
    assert list(restarted.rebuild_from_store()) == ["bio", "code", "legal"]
    done = threading.Event()
    outcomes = []

    def on_outcome(outcome) -> None:
        outcomes.append(outcome)
        if len(outcomes) == 3:
            done.set()

    follower = RegistrationFollower(restarted, kafka_conf, topics.experts, on_outcome).start()
    try:
        assert done.wait(30)
    finally:
        follower.stop()
    assert [(o.expert_id, o.status) for o in outcomes] == [
        ("code", "unchanged"),
        ("legal", "unchanged"),
        ("legal", "removed"),
    ]
    assert list(restarted.table) == ["bio", "code"]
    assert restarted.score(CODE)["experts"] == {"code": 1.0}


def test_an_expert_is_served_only_through_its_domain_row(server) -> None:
    """The gate reaches an expert through its domain's row of the table, nothing else."""
    server.register(_put(server, "code", "python_code", 1).registration())
    server.register(_put(server, "tech", "tech_docs", 2).registration())  # domain unknown
    tech = domain_texts("tech_docs", 1, skip=30)[0]
    scored = server.score(tech)
    assert "tech" not in scored["experts"] and scored["routed_by"] == "gate"
    assert server.health()["experts_without_domain"] == ["tech"]
    code = server.score(CODE)
    assert code["experts"] == {"code": 1.0} and code["domain"] == "python_code"
    assert code["domain_version"] == server.domains.version == 3
    # once the domain is announced, its documents reach its expert
    from tests.support.experts import domain_record

    server.domains.apply(domain_record(server.embedder, "tech_docs"))
    assert server.score(tech)["experts"] == {"tech": 1.0}
    assert server.health()["experts_without_domain"] == []
    assert server.score(CODE, expert_weights={"tech": 1.0})["routed_by"] == "request"


def test_a_short_prompt_gets_its_domain_expert_where_the_table_rule_gave_none(
    gpt2_trunk, tmp_path
) -> None:
    """Prompt-length texts of a known domain: the route stage's rule (whole-document
    thresholds) calls most of them novel; the server passes each text's length, so the
    gate's length-aware rule serves them with their domain's expert."""
    from router.table import DomainTable
    from tests.support.domains import promoted_row
    from worx import bundled

    embedder = default_embedder()
    table = DomainTable()
    for domain in DOMAINS:
        table.apply(promoted_row(embedder, domain))  # rows as discover promotes them
    store = ExpertStore(tmp_path / "store", gpt2_trunk.fingerprint)
    server = ExpertServer(gpt2_trunk, store, embedder, Gate(top_k=1), table)
    for expert_id, domain, seed in (("code", "python_code", 1), ("legal", "legal", 2)):
        server.register(_put(server, expert_id, domain, seed).registration())
    prompts = [doc[:80] for doc in bundled.domain_texts("legal", 25, skip=200)]
    by_table_rule = [
        server.gate.decide(v, server.domains, server.table.by_domain).domain_id
        for v in embedder.embed(prompts)
    ]
    novel = [p for p, domain in zip(prompts, by_table_rule, strict=True) if domain is None]
    assert len(novel) >= 20, by_table_rule  # the old rule leaves prompts on the trunk
    served = [server.score(p) for p in novel]
    own = [s for s in served if s["domain"] == "legal"]
    assert len(own) >= 0.6 * len(novel), [s["domain"] for s in served]
    assert all(s["experts"] == {"legal": 1.0} for s in own)
    assert sum(s["domain"] not in ("legal", None) for s in served) <= 1
