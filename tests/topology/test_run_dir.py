"""A finished run's files: the domain table kept on disk, and the read-only commands'
answers to a missing or broken run (one line, exit 2, nothing created)."""

from __future__ import annotations

import json
import os

import pytest

from router.records import DomainRecord
from router.table_file import SavedTable, load_table
from topology.commands import main
from topology.composition.run_dir import open_run, write_run_file


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in [k for k in os.environ if k.startswith("WORX_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def row(domain_id: str, version: int = 1, centroid=(1.0, 0.0)) -> DomainRecord:
    return DomainRecord(domain_id, list(centroid), 0.5, 10, 0.8, version=version, name="Alpha")


def test_the_saved_table_follows_every_accepted_row_and_loads_back(tmp_path):
    saved = SavedTable(tmp_path / "domains.json")
    assert saved.apply(row("dom-a"))
    assert saved.apply(row("dom-b", centroid=(0.0, 1.0)))
    assert not saved.apply(row("dom-a"))  # a replay changes nothing
    assert saved.apply(row("dom-a", version=2, centroid=(0.6, 0.8)))
    loaded = load_table(tmp_path / "domains.json")
    assert [(r.domain_id, r.version, r.name) for r in loaded.rows()] == [
        ("dom-a", 2, "Alpha"),
        ("dom-b", 1, "Alpha"),
    ]
    body = json.loads((tmp_path / "domains.json").read_text())
    assert body == [r.to_dict() for r in loaded.rows()]  # the topic's records, as a list
    assert not list(tmp_path.glob(".domains.json.*"))  # no temporary file left behind


def test_run_json_names_the_parts_and_open_run_reads_them(tmp_path):
    run = tmp_path / "run"
    write_run_file(run, tmp_path / "trunk", tmp_path / "store", run / "monitor")
    SavedTable(run / "domains.json").apply(row("dom-a"))
    opened = open_run(run)
    assert (opened.trunk_dir, opened.store_dir) == (tmp_path / "trunk", tmp_path / "store")
    assert opened.domains_file == run / "domains.json"


def run_worx(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def test_a_missing_or_broken_run_is_one_line_exit_2_and_creates_nothing(tmp_path, capsys):
    missing = tmp_path / "no-such-run"
    empty = tmp_path / "empty-run"
    empty.mkdir()
    corrupt = tmp_path / "corrupt-run"
    corrupt.mkdir()
    (corrupt / "domains.json").write_text('[{"domain_id": "dom-a"')
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps([{"schema_version": 1, "domain_id": "../etc"}]))
    listed = tmp_path / "not-a-list.json"
    listed.write_text('{"dom-a": 1}')
    cases = [
        (("serve", "--run", str(missing)), "no run at"),
        (("explain", "some text", "--run", str(missing)), "no run at"),
        (("route", "--explain", "some text", "--run", str(missing)), "no run at"),
        (("domains", "--run", str(missing)), "no run at"),
        (("domains", "--run", str(empty)), "has no domain table"),
        (("domains", "--run", str(corrupt)), "is not readable JSON"),
        (("domains", "--domains", str(listed)), "is not a list of domain records"),
        (("explain", "some text", "--domains", str(foreign)), "row 0 is not a domain record"),
        (("serve", "--run", str(empty), "--bootstrap-servers", "127.0.0.1:1"), "follows no"),
        (("domains", "--run", str(empty), "--bootstrap-servers", "127.0.0.1:1"), "pass one"),
        (("explain", "   ", "--run", str(corrupt)), "the text to explain is empty"),
        (("explain", "some text"), "no domain table to read"),
    ]
    for args, message in cases:
        code, output = run_worx(capsys, *args)
        lines = output.strip().splitlines()
        assert code == 2, (args, output)
        assert "Traceback" not in output, args
        assert len(lines) == 1 and lines[0].startswith("worx: ") and message in lines[0], (
            args,
            output,
        )
    assert not missing.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["corrupt-run", "empty-run", "foreign.json", "not-a-list.json"]
    )
    assert list(empty.iterdir()) == [] and [p.name for p in corrupt.iterdir()] == ["domains.json"]


def test_a_run_without_its_table_says_how_to_restore_it_from_the_monitors_copy(tmp_path, capsys):
    run = tmp_path / "old-run"
    SavedTable(run / "monitor" / "domains.json").apply(row("dom-a"))
    code, output = run_worx(capsys, "domains", "--run", str(run))
    assert code == 2 and f"cp {run / 'monitor' / 'domains.json'} {run / 'domains.json'}" in output
