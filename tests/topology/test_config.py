import pytest

from topology.composition.worx_config import ConfigError, load_config


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


def test_the_expert_shape_is_the_trainer_sub_table(tmp_path, monkeypatch):
    """[trainer.expert] is an ExpertConfig, set from the file and WORX_TRAINER__EXPERT__<FIELD>;
    its defaults are what a job trains."""
    from experts.shape import ExpertConfig

    monkeypatch.chdir(tmp_path)  # no ./worx.toml

    defaults = load_config(None, env={}).trainer.expert
    assert defaults == ExpertConfig()
    assert (defaults.kind, defaults.token_site, defaults.logit_bias) == (
        "vocab_adapter",
        "mlp",
        True,
    )
    path = tmp_path / "worx.toml"
    path.write_text("[trainer.expert]\nkind = 'adapter'\nlayers = [1, 2]\nrank = 16\n")
    env = {"WORX_TRAINER__EXPERT__RANK": "32", "WORX_TRAINER__EXPERT__ACTIVATION": "relu"}
    shape = load_config(path, env=env).trainer.expert
    assert shape == ExpertConfig(kind="adapter", layers=(1, 2), rank=32, activation="relu")
    path.write_text("[trainer.expert]\nrank = 0\n")
    with pytest.raises(ConfigError, match=r"\[trainer.expert\] expert rank must be >= 1"):
        load_config(path, env={})


# the expert's eight settings that were flat trainer.expert_* keys before [trainer.expert]
OLD_EXPERT_KEYS = (
    "kind layers rank output_rank token_rank token_layer token_site logit_bias".split()
)


@pytest.mark.parametrize("name", OLD_EXPERT_KEYS)
def test_an_old_flat_expert_key_in_the_file_is_refused_naming_the_new_one(tmp_path, name):
    path = tmp_path / "worx.toml"
    path.write_text(f"[trainer]\nexpert_{name} = 1\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path, env={})
    assert str(refused.value) == f"trainer.expert_{name} moved: use [trainer.expert] {name}"


@pytest.mark.parametrize("name", OLD_EXPERT_KEYS)
def test_an_old_flat_expert_variable_is_refused_naming_the_new_one(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    variable = f"WORX_TRAINER__EXPERT_{name.upper()}"
    with pytest.raises(ConfigError) as refused:
        load_config(None, env={variable: "1"})
    assert str(refused.value) == (
        f"trainer.expert_{name} moved: use WORX_TRAINER__EXPERT__{name.upper()} "
        f"([trainer.expert] {name}) instead of {variable}"
    )


def test_a_mistyped_expert_variable_gets_the_nearest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as refused:
        load_config(None, env={"WORX_TRAINER__EXPERT__RNAK": "8"})
    assert "did you mean WORX_TRAINER__EXPERT__RANK?" in str(refused.value)


def test_the_trainer_settings_mirror_no_expert_field():
    """One definition of the expert's shape: no ``expert_*`` field in trainer/config.py."""
    import dataclasses
    import re
    from pathlib import Path

    import trainer.config
    from trainer.config import TrainerConfig

    source = Path(trainer.config.__file__).read_text()
    assert re.findall(r"expert_[a-z_]*:", source) == []
    assert [f.name for f in dataclasses.fields(TrainerConfig) if "expert" in f.name] == ["expert"]
