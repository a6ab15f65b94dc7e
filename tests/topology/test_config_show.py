"""`worx config show`: every setting's value and where it came from, secrets masked."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from topology.commands import main
from topology.composition.worx_config import load_config

SECRET = "hunter2-do-not-print"
FILE = """\
data_dir = "/srv/worx"

[kafka]
bootstrap_servers = "broker1:9093"

[kafka.client]
"security.protocol" = "SASL_SSL"

[ingest]
max_doc_chars = 100
source_topics = ["support.tickets", "wiki.pages"]

[trainer.expert]
rank = 64
"""


@pytest.fixture
def company(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A worx.toml, the secrets and one override in real environment variables."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("WORX_")]:
        monkeypatch.delenv(name)
    path = tmp_path / "company.toml"
    path.write_text(FILE)
    monkeypatch.setenv("WORX_KAFKA_CLIENT__SASL_PASSWORD", SECRET)
    monkeypatch.setenv("WORX_SERVE__API_TOKEN", SECRET)
    monkeypatch.setenv("WORX_INGEST__MAX_DOC_CHARS", "50")  # over the file's 100
    return path


def _show(capsys: pytest.CaptureFixture, *argv: str) -> str:
    assert main(["config", "show", *argv]) == 0
    return capsys.readouterr().out


def test_each_setting_says_whether_it_came_from_default_file_or_environment(company, capsys):
    body = json.loads(_show(capsys, "--config", str(company), "--json"))
    rows = {row["setting"]: row for row in body["settings"]}
    assert body["file"] == str(company) and body["file_named_by"] == "--config"

    def source(setting: str) -> tuple:
        return rows[setting]["source"], rows[setting]["origin"], rows[setting]["value"]

    assert source("data_dir") == ("file", str(company), "/srv/worx")
    assert source("kafka.bootstrap_servers") == ("file", str(company), "broker1:9093")
    assert source("ingest.source_topics") == (
        "file",
        str(company),
        ["support.tickets", "wiki.pages"],
    )
    assert source("trainer.expert.rank") == ("file", str(company), 64)
    assert source("ingest.max_doc_chars") == ("env", "WORX_INGEST__MAX_DOC_CHARS", 50)
    assert source("trainer.max_steps") == ("default", None, 200)
    assert source("serve.api_token") == ("env", "WORX_SERVE__API_TOKEN", "***")
    assert source("kafka.client.sasl.password") == (
        "env",
        "WORX_KAFKA_CLIENT__SASL_PASSWORD",
        "***",
    )
    # every librdkafka value is masked: a key such as ssl.key.pem holds a private key
    assert source("kafka.client.security.protocol") == ("file", str(company), "***")
    assert source("monitor.api_token") == ("default", None, "")  # unset: shown as unset
    assert source("serve.chars_per_token") == ("default", None, 32)  # a count, not a secret
    assert SECRET not in json.dumps(body)


def test_the_text_is_toml_with_its_sources_and_no_secret(company, capsys):
    text = _show(capsys, "--config", str(company))
    assert SECRET not in text
    lines = text.splitlines()
    assert f"# the effective settings; file: {company} (named by --config)" == lines[0]
    assert "max_doc_chars = 50  # env WORX_INGEST__MAX_DOC_CHARS" in lines
    assert f'bootstrap_servers = "broker1:9093"  # file {company}' in lines
    assert 'api_token = "***"  # env WORX_SERVE__API_TOKEN' in lines
    assert lines.index("[trainer.expert]") > lines.index("[trainer]")
    parsed = tomllib.loads(text)
    assert parsed["kafka"]["client"]["sasl.password"] == "***"
    assert parsed["trainer"]["expert"]["rank"] == 64


def test_the_text_loads_back_into_the_same_settings(tmp_path, monkeypatch, capsys):
    """Without secrets, the printout is a config file that gives what was shown."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("WORX_")]:
        monkeypatch.delenv(name)
    (tmp_path / "worx.toml").write_text(FILE.replace('"security.protocol" = "SASL_SSL"', ""))
    monkeypatch.setenv("WORX_ROUTER__EMBED_CHAR_NGRAMS", "3,5")
    shown = tmp_path / "shown.toml"
    shown.write_text(_show(capsys))  # ./worx.toml, found by default
    assert load_config(shown, env={}) == load_config()
    assert load_config(shown, env={}).router.embed_char_ngrams == (3, 5)


def test_the_file_named_by_worx_config_is_said_so(company, monkeypatch, capsys):
    monkeypatch.setenv("WORX_CONFIG", str(company))
    body = json.loads(_show(capsys, "--json"))
    assert body["file"] == str(company) and body["file_named_by"] == "WORX_CONFIG"
    assert {r["setting"]: r["source"] for r in body["settings"]}["data_dir"] == "file"


def test_a_mistyped_variable_is_refused_as_everywhere(company, monkeypatch, capsys):
    monkeypatch.setenv("WORX_TRAINER__MAX_STEP", "7")
    assert main(["config", "show", "--config", str(company)]) == 2
    assert "did you mean WORX_TRAINER__MAX_STEPS" in capsys.readouterr().err
