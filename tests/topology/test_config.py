import pytest

from topology.config import ConfigError, load_config


def test_defaults_without_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(env={})
    assert config.kafka.bootstrap_servers == ""
    assert config.ingest.max_doc_chars > 0


def test_file_and_env_overrides(tmp_path):
    path = tmp_path / "worx.toml"
    path.write_text(
        '[kafka]\nbootstrap_servers = "k1:9092"\n[kafka.client]\n"security.protocol" = "SASL_SSL"\n'
        "[ingest]\nmax_doc_chars = 100\n"
    )
    env = {
        "WORX_INGEST__STRICT": "true",
        "WORX_INGEST__MAX_DOC_CHARS": "50",
        "WORX_KAFKA_CLIENT__SASL_MECHANISM": "PLAIN",
        "WORX_INGEST__SOURCE_TOPICS": "a,b",
    }
    config = load_config(path, env=env)
    assert config.kafka.bootstrap_servers == "k1:9092"
    assert config.kafka.client == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    assert config.ingest.strict is True
    assert config.ingest.max_doc_chars == 50
    assert config.ingest.source_topics == ("a", "b")


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("[ingest]\nmax_doc_chars = 'many'\n", "ingest.max_doc_chars should be int"),
        ("[ingest]\nmaxdocchars = 3\n", "unknown setting(s) ['maxdocchars'] in [ingest]"),
        ("[ingest]\noversize = 'drop'\n", "ingest.oversize must be 'dlq' or 'split'"),
        ("[nosuch]\nx = 1\n", "unknown setting(s) ['nosuch']"),
        ("[ingest\n", "is not valid TOML"),
    ],
)
def test_invalid_config_says_what_is_wrong(tmp_path, body, fragment):
    path = tmp_path / "worx.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert fragment in str(info.value)


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", env={})
