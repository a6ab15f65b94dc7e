"""The servers' tokens and allowed hosts come from the environment; the token is never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from topology.composition.worx_config import ConfigError, load_config


def test_tokens_and_allowed_hosts_have_environment_routes(tmp_path: Path) -> None:
    empty = tmp_path / "worx.toml"
    empty.write_text("")
    env = {
        "WORX_SERVE__API_TOKEN": "serve-secret",
        "WORX_MONITOR__API_TOKEN": "monitor-secret",
        "WORX_MONITOR__ALLOWED_HOSTS": "monitor, dash.internal",
        "WORX_SERVE__WORKERS": "3",
    }
    config = load_config(empty, env)
    assert config.serve.api_token == "serve-secret" and config.serve.workers == 3
    assert config.monitor.api_token == "monitor-secret"
    assert config.monitor.allowed_hosts == ("monitor", "dash.internal")
    defaults = load_config(empty, {})
    assert defaults.serve.api_token == "" and defaults.monitor.api_token == ""  # off
    assert defaults.experts.serve_host == defaults.monitor.host == "127.0.0.1"


def test_a_bad_serve_setting_is_refused_without_showing_the_token(tmp_path: Path) -> None:
    empty = tmp_path / "worx.toml"
    empty.write_text("")
    env = {"WORX_SERVE__API_TOKEN": "serve-secret", "WORX_SERVE__QUEUE": "-1"}
    with pytest.raises(ConfigError) as refused:
        load_config(empty, env)
    assert "serve.queue" in str(refused.value) and "serve-secret" not in str(refused.value)


def test_forward_threads_come_from_the_environment_and_a_negative_count_is_refused(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "worx.toml"
    empty.write_text("")
    assert load_config(empty, {}).serve.batch_forward_threads == 0  # one per torch thread
    two = load_config(empty, {"WORX_SERVE__BATCH_FORWARD_THREADS": "2"})
    assert two.serve.batch_forward_threads == 2
    with pytest.raises(ConfigError) as refused:
        load_config(empty, {"WORX_SERVE__BATCH_FORWARD_THREADS": "-1"})
    assert "serve.batch_forward_threads" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        load_config(empty, {"WORX_SERVE__BATCH_MAX_TOKENS": "-5"})
    assert "serve.batch_max_tokens" in str(refused.value)
