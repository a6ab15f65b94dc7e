"""configs/*.toml are real files: every value loads, and the demo's is what the demo sets."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from topology.commands.demo import demo_stage_defaults
from topology.composition.worx_config import WorxConfig, load_config, load_config_with_sources

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", ["demo.toml", "company.toml"])
def test_every_value_of_the_example_is_a_valid_setting_the_loader_reads(name):
    config, sources = load_config_with_sources(CONFIGS / name, env={})
    file_keys = _leaves(tomllib.loads((CONFIGS / name).read_text()))
    assert sorted(sources.file_keys) == sorted(file_keys) and file_keys
    defaults = WorxConfig()
    for dotted in file_keys:  # each value the file gives is in force, and is not the default
        assert sources.of(dotted) == ("file", str(CONFIGS / name))
        assert _value(config, dotted) != _value(defaults, dotted), dotted


def test_the_demo_gives_its_stages_what_configs_demo_toml_says(tmp_path):
    empty = tmp_path / "worx.toml"
    empty.write_text("")
    env = demo_stage_defaults()
    assert env["WORX_TRAINER__MAX_STEPS"] == "30"
    given = load_config(empty, env=env)
    assert load_config(CONFIGS / "demo.toml", env={}) == given != WorxConfig()


def test_demo_settings_refuse_a_nested_table(tmp_path):
    from worx.errors import UserError

    bad = tmp_path / "demo.toml"
    bad.write_text("[trainer.expert]\nrank = 8\n")
    with pytest.raises(UserError, match="only flat settings"):
        demo_stage_defaults(bad)


def test_the_company_example_keeps_its_secrets_out():
    text = (CONFIGS / "company.toml").read_text()
    config = load_config(CONFIGS / "company.toml", env={})
    assert config.serve.api_token == "" and config.monitor.api_token == ""
    assert "sasl.password" not in config.kafka.client and "password =" not in text


def _leaves(raw: dict, where: str = "") -> list[str]:
    found = []
    for key, value in raw.items():
        dotted = f"{where}.{key}" if where else key
        found += _leaves(value, dotted) if isinstance(value, dict) else [dotted]
    return found


def _value(config, dotted: str):
    section, _, rest = dotted.partition(".")
    obj = getattr(config, section)
    while rest:
        if isinstance(obj, dict):  # a librdkafka table: its key holds dots
            return obj.get(rest)
        name, _, rest = rest.partition(".")
        obj = getattr(obj, name)
    return obj
