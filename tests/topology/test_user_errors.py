"""Every user error is one line on stderr, exit code 2, no traceback; read-only commands
create nothing they were pointed at. In process through ``topology.commands.main`` where no
librdkafka client runs; as a subprocess where one does (its logs go to the real stderr)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest

import topology.commands.experts
from topology.commands import main
from worx.errors import UserError

WORX = [sys.executable, "-m", "topology.commands"]
STORE_HINT = (
    "pass --store DIR of an existing expert store (`worx trainer` writes one), or set "
    "experts.store_dir / data_dir (WORX_EXPERTS__STORE_DIR, WORX_DATA_DIR)"
)
TRUNK_HINT = (
    "give the directory of a Hugging Face causal LM (config.json, *.safetensors, tokenizer) "
    "with --trunk or experts.trunk_dir (WORX_EXPERTS__TRUNK_DIR), or leave both unset for "
    "the bundled trunk"
)


@pytest.fixture(autouse=True)
def _no_worx_environment(monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("WORX_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def one_line_error(capsys, argv: list[str]) -> str:
    """Run ``worx argv`` in process; assert exit 2, one stderr line, no traceback."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_missing_trunk_says_it_does_not_exist(capsys, tmp_path):
    missing = tmp_path / "no-trunk"
    line = one_line_error(capsys, ["serve", "--trunk", str(missing)])
    assert line == f"worx: trunk directory {missing} does not exist; {TRUNK_HINT}"
    assert not missing.exists()


def test_a_directory_that_is_not_a_model_says_so(capsys, tmp_path):
    (tmp_path / "weights").mkdir()
    line = one_line_error(capsys, ["serve", "--trunk", str(tmp_path / "weights")])
    assert line == (
        f"worx: trunk {tmp_path / 'weights'} has no config.json: not a Hugging Face model "
        f"directory; {TRUNK_HINT}"
    )


def test_demo_and_up_refuse_a_wrong_trunk_before_starting_anything(capsys, monkeypatch, tmp_path):
    line = one_line_error(capsys, ["demo", "--trunk", "no-trunk", "--out", "runs"])
    assert line == f"worx: trunk directory no-trunk does not exist; {TRUNK_HINT}"
    monkeypatch.setenv("WORX_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:9")
    monkeypatch.setenv("WORX_EXPERTS__TRUNK_DIR", str(tmp_path))
    line = one_line_error(capsys, ["up", "--no-connect"])
    assert line == (
        f"worx: trunk {tmp_path} has no config.json: not a Hugging Face model directory; "
        f"{TRUNK_HINT}"
    )
    assert list(tmp_path.iterdir()) == []  # no run directory, no data_dir


def test_report_on_a_missing_state_dir_creates_nothing(capsys, tmp_path):
    line = one_line_error(capsys, ["report", "--state-dir", "nostate", "--out", "out"])
    assert line.startswith("worx: monitor state directory nostate does not exist; ")
    assert list(tmp_path.iterdir()) == []


def test_serve_on_a_missing_store_creates_nothing(capsys, tmp_path):
    missing = tmp_path / "nonexistent-store"
    line = one_line_error(capsys, ["serve", "--store", str(missing)])
    assert line == f"worx: expert store {missing} does not exist; {STORE_HINT}"
    assert not missing.exists()


@pytest.mark.parametrize("action", [["list"], ["show", "x"], ["quarantined"], ["verify"]])
def test_experts_on_a_missing_store_create_nothing(capsys, tmp_path, action):
    line = one_line_error(capsys, ["experts", "--store", "typo-store", *action])
    assert line == f"worx: expert store typo-store does not exist; {STORE_HINT}"
    assert not (tmp_path / "typo-store").exists()


def test_bare_experts_list_does_not_create_the_default_store(capsys, tmp_path):
    line = one_line_error(capsys, ["experts", "list"])
    assert line == f"worx: expert store worx-data/experts does not exist; {STORE_HINT}"
    assert list(tmp_path.iterdir()) == []


def test_monitor_once_on_a_missing_state_dir_creates_nothing(capsys, tmp_path):
    line = one_line_error(capsys, ["monitor", "--once", "--state-dir", "nostate"])
    assert line == (
        "worx: monitor state directory nostate does not exist; pass --state-dir DIR of a "
        "`worx monitor` state directory, or set monitor.state_dir / data_dir "
        "(WORX_MONITOR__STATE_DIR, WORX_DATA_DIR)"
    )
    assert list(tmp_path.iterdir()) == []


def test_nothing_quarantined_is_said(capsys, tmp_path):
    (tmp_path / "store").mkdir()
    assert main(["experts", "--store", "store", "quarantined"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == "nothing quarantined in store\n"


def test_unknown_demo_domain_lists_the_valid_ones_and_the_nearest(capsys, tmp_path):
    line = one_line_error(capsys, ["demo", "--new-domains", "legl", "--out", "runs"])
    assert line == (
        "worx: unknown domain(s) 'legl' (did you mean 'legal'?); this corpus has biomedical, "
        "fiction_austen, legal, news, python_code, scripture, tech_docs"
    )
    assert not (tmp_path / "runs").exists()  # no empty run directory left behind


def test_csv_without_the_text_column_lists_the_columns(capsys, tmp_path):
    (tmp_path / "a.csv").write_text("title,body\nt,a body of text long enough\nu,more\n")
    line = one_line_error(capsys, ["ingest", "a.csv"])
    assert line == (
        "worx: a.csv: no column 'text' (the text) in the header; columns found: title, body; "
        "pass --text-field body (or set ingest.text_field)"
    )


def test_jsonl_without_the_text_field_lists_the_fields(capsys, tmp_path):
    rows = [{"id": 1, "title": "t", "body": "the text of one"}, {"id": 2, "body": "two"}]
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = one_line_error(capsys, ["ingest", "b.jsonl", "--text-field", "content"])
    assert line == (
        "worx: b.jsonl: no field 'content' (the text) in the first 2 objects; fields found: "
        "id, title, body; pass --text-field body (or set ingest.text_field)"
    )


def test_a_directory_given_to_ingest_is_called_one(capsys, tmp_path):
    (tmp_path / "exports").mkdir()
    line = one_line_error(capsys, ["ingest", "exports"])
    assert line == (
        "worx: exports is a directory; worx ingest reads files (it has no recursive option); "
        "name the files, e.g. `worx ingest exports/*.jsonl` (your shell expands the pattern)"
    )


@pytest.mark.parametrize(
    "variable, nearest",
    [
        ("WORX_KAFKA_BOOTSTRAP_SERVERS", "WORX_KAFKA__BOOTSTRAP_SERVERS"),
        ("WORX_KAFKA__BOOTSTRAP_SERVER", "WORX_KAFKA__BOOTSTRAP_SERVERS"),
        ("WORX_KAFAK__BOOTSTRAP_SERVERS", "WORX_KAFKA__BOOTSTRAP_SERVERS"),
        ("WORX_DATADIR", "WORX_DATA_DIR"),
    ],
)
def test_a_mistyped_variable_is_named_with_the_nearest(capsys, monkeypatch, variable, nearest):
    monkeypatch.setenv(variable, "x")
    line = one_line_error(capsys, ["experts", "list"])
    assert line == (
        f"worx: configuration error: environment variable {variable} names no worx setting; "
        f"did you mean {nearest}? (rename or unset {variable})"
    )


def test_an_old_expert_variable_is_one_line_naming_the_new_key(capsys, monkeypatch):
    monkeypatch.setenv("WORX_TRAINER__EXPERT_RANK", "64")
    line = one_line_error(capsys, ["experts", "list"])
    assert line == (
        "worx: configuration error: trainer.expert_rank moved: use WORX_TRAINER__EXPERT__RANK "
        "([trainer.expert] rank) instead of WORX_TRAINER__EXPERT_RANK"
    )


def test_a_variable_of_another_tool_is_left_alone(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("WORX_E2E_MARKER", "x")
    (tmp_path / "store").mkdir()
    assert main(["experts", "--store", "store", "list", "--json"]) == 0


def test_a_taken_port_is_one_line(capsys, tmp_path):
    (tmp_path / "state").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["monitor", "--no-stream", "--state-dir", "state", "--port", str(port)]
        line = one_line_error(capsys, argv)
    assert re.fullmatch(
        rf"worx: dashboard cannot listen on 127\.0\.0\.1:{port} \(.*address already in use\); "
        r"choose another --port \(0 picks a free one\) or --host",
        line,
    ), line


def test_a_port_out_of_range_is_one_line(capsys, tmp_path):
    (tmp_path / "state").mkdir()
    argv = ["monitor", "--no-stream", "--state-dir", "state", "--port", "99999"]
    assert one_line_error(capsys, argv) == (
        "worx: dashboard cannot listen on 127.0.0.1:99999 (bind(): port must be 0-65535.); "
        "choose another --port (0 picks a free one) or --host"
    )


def test_trunk_info_and_verify_say_what_the_trunk_path_is(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    assert one_line_error(capsys, ["trunk", "info", "notes.txt"]) == (
        f"worx: trunk notes.txt is a file, not a model directory; {TRUNK_HINT}"
    )
    (tmp_path / "store").mkdir()
    argv = ["experts", "--store", "store", "verify", "--trunk", "no-trunk"]
    assert one_line_error(capsys, argv) == (
        f"worx: trunk directory no-trunk does not exist; {TRUNK_HINT}"
    )


def test_debug_shows_the_traceback(capsys, monkeypatch):
    with pytest.raises(UserError, match="does not exist"):
        main(["--debug", "experts", "--store", "typo-store", "list"])
    monkeypatch.setenv("WORX_DEBUG", "1")
    with pytest.raises(UserError, match="does not exist"):
        main(["experts", "--store", "typo-store", "list"])


def test_a_bug_keeps_its_traceback_and_says_it_is_one(capsys, monkeypatch):
    def broken(args):
        raise KeyError("no such thing")

    monkeypatch.setattr(topology.commands.experts, "run_list", broken)
    assert main(["experts", "list"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'no such thing'" in err
    assert err.strip().splitlines()[-1] == (
        "worx: unexpected error in `worx experts`: this is a bug, not a mistake of yours; "
        "please report it with the traceback above"
    )


UNREACHABLE = (
    r"worx: cannot reach the Kafka cluster at 127\.0\.0\.1:9 within 2 s \(Connect to "
    r"ipv4#127\.0\.0\.1:9 failed: Connection refused; \d+ attempts\); start it or point "
    r"\[kafka\] bootstrap_servers / WORX_KAFKA__BOOTSTRAP_SERVERS \(or --bootstrap-servers\) "
    r"at a running one; \[kafka\] connect_timeout_s sets the wait"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["ingest", "docs.jsonl", "--bootstrap-servers", "127.0.0.1:9", "--no-progress"],
        ["up", "--no-connect"],
        ["serve", "--bootstrap-servers", "127.0.0.1:9", "--port", "0"],
        ["domains", "--bootstrap-servers", "127.0.0.1:9"],
    ],
    ids=["ingest", "up", "serve", "domains"],
)
def test_an_unreachable_cluster_is_one_line_not_a_flood(tmp_path, argv):
    (tmp_path / "docs.jsonl").write_text('{"id": "a", "text": "hello there"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORX_")}
    env["WORX_KAFKA__CONNECT_TIMEOUT_S"] = "2"
    env["WORX_KAFKA__BOOTSTRAP_SERVERS"] = "127.0.0.1:9"
    out = subprocess.run(
        [*WORX, *argv], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert not [line for line in lines if line.startswith("%")], out.stderr  # librdkafka's
    assert len(lines) <= 6, out.stderr  # the error; serve's trunk-load log lines before it
    assert re.fullmatch(UNREACHABLE, lines[-1]), lines[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl"]
