"""`worx experts list | show | verify` against a real store."""

from __future__ import annotations

import json
from pathlib import Path

from experts.store import WEIGHTS, ExpertStore
from experts.trunk import trunk_fingerprint
from router.embed import default_embedder
from tests.support.experts import make_domain_expert
from topology.commands import main


class _Trunk:
    hidden_size = 32


def test_list_show_verify(trunk_dirs, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    fingerprint = trunk_fingerprint(trunk_dirs["gpt2"])
    store = ExpertStore(tmp_path / "store", fingerprint)
    embedder = default_embedder()
    for i, (name, domain) in enumerate((("code", "python_code"), ("legal", "legal"))):
        make_domain_expert(store, _Trunk(), embedder, name, domain, seed=i)
    base = ["experts", "--store", str(store.root)]

    assert main([*base, "list", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["expert_id"] for r in rows] == ["code", "legal"]
    assert rows[0]["domain_id"] == "python_code" and "centroid" not in rows[0]

    assert main([*base, "show", "legal"]) == 0
    assert json.loads(capsys.readouterr().out)["sha256"] == store.manifest("legal").sha256
    assert main([*base, "show", "nobody"]) == 1
    assert "[missing]" in capsys.readouterr().out

    trunk_args = ["--trunk", str(trunk_dirs["gpt2"])]
    assert main([*base, "verify", *trunk_args]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "checked": 2,
        "ok": ["code", "legal"],
        "refused": [],
    }

    weights = store.root / "code" / WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x01")
    assert main([*base, "verify"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] == ["legal"] and report["refused"][0]["reason"] == "corrupt"
    assert (store.root / "code").is_dir()  # report only
    assert main([*base, "verify", "--trunk", str(trunk_dirs["llama"]), "--quarantine"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {r["reason"] for r in report["refused"]} == {"wrong_trunk"}
    assert store.ids() == ["code", "legal"]  # another trunk's experts are never moved


def test_list_names_each_expert_s_domain_from_the_run_s_table(
    trunk_dirs, tmp_path: Path, capsys
) -> None:
    from router.records import DomainRecord
    from router.table import DomainTable
    from router.table_file import write_table

    store = ExpertStore(tmp_path / "store", trunk_fingerprint(trunk_dirs["gpt2"]))
    embedder = default_embedder()
    for i, (name, domain) in enumerate((("code", "python_code"), ("legal", "legal"))):
        make_domain_expert(store, _Trunk(), embedder, name, domain, seed=i)
    table = DomainTable()
    table.apply(DomainRecord("python_code", [1.0, 0.0], 0.5, 10, 0.8, name="self·def·import"))
    write_table(tmp_path / "domains.json", table)  # a run keeps it beside its store
    base = ["experts", "--store", str(store.root), "list"]
    assert main([*base, "--json"]) == 0
    rows = {r["expert_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["code"]["domain_name"] == "self·def·import"
    assert rows["legal"]["domain_name"] is None  # not in the table: shown by id only
    assert main(base) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "name" in lines[0].split()
    assert "self·def·import" in next(line for line in lines if line.startswith("code "))
