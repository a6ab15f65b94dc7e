"""Configuration never shows a secret, and every cluster's credentials have an env route."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from topology.composition.worx_config import ConfigError, load_config
from topology.faust.app import _credentials

SECRET = "hunter2-do-not-print"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"WORX_KAFKA__CLIENT": f"sasl.password={SECRET}"}, "WORX_KAFKA__CLIENT"),
        ({"WORX_KAFKA__SASL_PASSWORD": SECRET}, "WORX_KAFKA__SASL_PASSWORD"),
        ({"WORX_INGEST__SOURCE_CLIENT": SECRET}, "WORX_INGEST__SOURCE_CLIENT"),
        ({"WORX_MONITOR__API_TOKEN_FILE": SECRET}, "WORX_MONITOR__API_TOKEN_FILE"),
    ],
)
def test_a_mistyped_secret_is_named_never_shown(tmp_path: Path, env: dict, named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(_empty(tmp_path), env=env)
    message = str(refused.value)
    assert SECRET not in message and named in message


def test_a_secret_in_the_file_is_not_shown_either(tmp_path: Path) -> None:
    config = tmp_path / "worx.toml"
    config.write_text(f'[kafka]\nclient = "{SECRET}"\n')
    with pytest.raises(ConfigError) as refused:
        load_config(config, env={})
    assert SECRET not in str(refused.value) and "kafka.client" in str(refused.value)


def _empty(tmp_path: Path) -> Path:
    config = tmp_path / "worx.toml"
    config.write_text("")
    return config


def test_an_ordinary_bad_value_is_still_quoted_with_its_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(_empty(tmp_path), env={"WORX_INGEST__MAX_DOC_CHARS": "lots"})
    assert "'lots'" in str(refused.value) and "WORX_INGEST__MAX_DOC_CHARS" in str(refused.value)
    with pytest.raises(ConfigError) as refused:  # a count of tokens is no secret
        load_config(_empty(tmp_path), env={"WORX_EXPERTS__MAX_TOKENS": "many"})
    assert "'many'" in str(refused.value)


def test_the_source_cluster_credentials_come_from_the_environment(tmp_path: Path) -> None:
    env = {
        "WORX_INGEST_SOURCE_CLIENT__SASL_PASSWORD": SECRET,
        "WORX_INGEST_SOURCE_CLIENT__SECURITY_PROTOCOL": "SASL_SSL",
        "WORX_KAFKA_CLIENT__SASL_USERNAME": "main-user",
    }
    config = load_config(_empty(tmp_path), env=env)
    assert config.ingest.source_client == {
        "sasl.password": SECRET,
        "security.protocol": "SASL_SSL",
    }
    assert config.kafka.client == {"sasl.username": "main-user"}  # each cluster its own


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_faust_reads_an_encrypted_client_key_with_ssl_key_password(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=worx-test",
            "-passout",
            "pass:key-pass",
        ],
        check=True,
        capture_output=True,
    )
    assert b"ENCRYPTED" in key.read_bytes()
    client = {
        "security.protocol": "SSL",
        "ssl.certificate.location": str(cert),
        "ssl.key.location": str(key),
        "ssl.key.password": "key-pass",
    }
    assert _credentials(client) is not None
    with pytest.raises(ssl.SSLError):
        _credentials({**client, "ssl.key.password": "wrong"})
