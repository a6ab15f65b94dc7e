"""`ExpertServer.explain` and POST /score with "explain": why a text gets its experts."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from experts.serving import ExpertServer
from experts.store import ExpertStore
from router.embed import default_embedder
from router.gate import Gate
from tests.support.experts import domain_table, domain_texts, make_domain_expert
from topology.serve.http_api import make_http_server

CODE = domain_texts("python_code", 1, skip=30)[0]
BIO = domain_texts("biomedical", 1, skip=30)[0]


@pytest.fixture
def server(gpt2_trunk, tmp_path: Path) -> ExpertServer:
    embedder = default_embedder()
    table = domain_table(embedder, ("python_code", "legal", "biomedical"))
    store = ExpertStore(tmp_path / "store", gpt2_trunk.fingerprint)
    server = ExpertServer(gpt2_trunk, store, embedder, Gate(top_k=1), table)
    manifest = make_domain_expert(store, gpt2_trunk, embedder, "code", "python_code", seed=1)
    assert server.register(manifest.registration()).status == "registered"
    return server


def test_explain_names_the_domain_its_cosine_threshold_experts_and_both_perplexities(server):
    why = server.explain(CODE)
    top = why["nearest"][0]
    # the table's ids here are the labels themselves: a name equal to the id is not repeated
    assert top["domain_id"] == "python_code" and top["name"] is None
    assert top["cosine"] >= top["threshold"] and top["experts"] == ["code"]
    assert [d["cosine"] for d in why["nearest"]] == sorted(
        (d["cosine"] for d in why["nearest"]), reverse=True
    )
    assert why["decision"]["domain_id"] == "python_code"
    assert why["decision"]["rule"] == "threshold"
    assert f"{top['cosine']:.3f}" in why["why"] and f"{top['threshold']:.3f}" in why["why"]
    assert why["experts"] == {"code": 1.0} and why["served_by"] == "experts"
    ppl = why["perplexity"]
    assert ppl["with_experts"] != pytest.approx(ppl["trunk_alone"])
    assert ppl["with_experts"] == pytest.approx(server.score(CODE)["perplexity"], rel=1e-4)
    assert ppl["trunk_alone"] == pytest.approx(
        server.score(CODE, expert_weights={})["perplexity"], rel=1e-4
    )


def test_a_domain_without_expert_and_a_novel_text_are_trunk_served_and_say_why(server):
    bio = server.explain(BIO)
    assert bio["decision"]["domain_id"] == "biomedical" and bio["served_by"] == "trunk"
    assert "has no expert" in bio["served_why"]
    assert bio["perplexity"]["with_experts"] == bio["perplexity"]["trunk_alone"]
    novel = server.explain("zq xv 0x77 kkkk ~~~ qqq " * 4)
    assert novel["decision"]["domain_id"] is None and novel["served_by"] == "trunk"
    assert novel["decision"]["rule"] in ("below_threshold", "between_domains")
    assert novel["why"].startswith("novel:")


def test_score_with_explain_over_http(server):
    httpd = make_http_server(server, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        plain = _post(f"{base}/score", {"text": CODE})
        explained = _post(f"{base}/score", {"text": CODE, "explain": True})
        assert "explain" not in plain
        assert explained["experts"] == plain["experts"] == explained["explain"]["experts"]
        assert explained["explain"]["nearest"][0]["domain_id"] == "python_code"
        forced = _post(f"{base}/score", {"text": CODE, "experts": {}, "explain": True})
        why = forced["explain"]
        assert why["overridden"] and why["requested"] == {} and why["experts"] == {"code": 1.0}
        assert why["perplexity"]["with_experts"] == why["perplexity"]["trunk_alone"]
        with pytest.raises(urllib.error.HTTPError) as bad:
            _post(f"{base}/score", {"text": CODE, "explain": "yes"})
        assert bad.value.code == 400
    finally:
        httpd.stop()


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_a_run_that_stored_no_expert_is_explained_with_the_trunk_alone(
    trunk_dirs, tmp_path, monkeypatch, capsys
):
    from router.records import DomainRecord
    from router.table_file import SavedTable
    from topology.commands import main
    from topology.composition.run_dir import write_run_file

    for name in [k for k in os.environ if k.startswith("WORX_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "young-run"
    write_run_file(run, trunk_dirs["gpt2"], run / "experts", run / "monitor")
    text = domain_texts("legal", 1, skip=30)[0]
    centroid = [round(float(x), 7) for x in default_embedder().embed([text])[0]]
    SavedTable(run / "domains.json").apply(
        DomainRecord("dom-legal", centroid, 0.5, 10, 0.8, name="legal")
    )
    assert main(["explain", text, "--run", str(run), "--json"]) == 0
    why = json.loads(capsys.readouterr().out)
    assert why["decision"]["domain_id"] == "dom-legal" and why["decision"]["name"] == "legal"
    assert why["served_by"] == "trunk" and "has no expert" in why["served_why"]
    assert not (run / "experts").exists()  # read-only: the missing store is not made
