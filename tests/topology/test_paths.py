"""One resolution of the trunk, store, jobs and state directories for every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from topology.composition import paths
from topology.composition.worx_config import ConfigError, load_config


def _config(tmp_path: Path, body: str):
    path = tmp_path / "worx.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n{body}')
    return load_config(path, env={})


def test_every_directory_has_one_rule(tmp_path):
    bare = _config(tmp_path, "")
    data = tmp_path / "data"
    assert paths.store_dir(bare) == data / "experts"
    assert paths.jobs_dir(bare) == data / "trainer" / "jobs"
    assert paths.monitor_state_dir(bare) == data / "monitor"
    assert paths.discover_snapshot(bare) == data / "discover" / "state.json"
    assert paths.trunk_dir(bare).name == "trunk"  # the bundled one
    both = _config(
        tmp_path, '[experts]\nstore_dir = "/e"\ntrunk_dir = "/t"\n[trainer]\nstore_dir = "/t2"\n'
    )
    assert paths.store_dir(both) == Path("/e")  # experts.store_dir first, for every command
    assert paths.store_dir(both, "/cli") == Path("/cli")
    assert paths.trunk_dir(both) == Path("/t")
    only_trainer = _config(tmp_path, '[trainer]\nstore_dir = "/t2"\njobs_dir = "/j"\n')
    assert paths.store_dir(only_trainer) == Path("/t2")
    assert paths.jobs_dir(only_trainer) == Path("/j")


@pytest.mark.slow
def test_trainer_writes_where_serve_and_monitor_read_with_only_experts_store_dir(tmp_path):
    """Regression: `worx trainer` ignored experts.store_dir (serve and monitor honour it),
    so with only that setting the trainer wrote experts where nobody looked."""
    from experts.trunk import build_tiny_trunk
    from topology.composition.assemble import build_monitor, server_from_config, trainer_from_config

    trunk = build_tiny_trunk(tmp_path / "trunk", family="gpt2", layers=1, width=16)
    shared = tmp_path / "shared-store"
    config = _config(
        tmp_path,
        f'[experts]\ntrunk_dir = "{trunk}"\nstore_dir = "{shared}"\n'
        '[trainer]\ndevice = "cpu"\n[monitor]\nbaseline = false\n',
    )
    trainer = trainer_from_config(config, progress=False)
    server = server_from_config(config)
    monitor = build_monitor(config, paths.monitor_state_dir(config))
    assert trainer.store_dir == shared
    assert Path(trainer.store.root) == Path(server.store.root) == Path(monitor.store.root)
    assert Path(server.store.root) == shared


def test_the_monitor_hands_free_heap_back_past_its_setting(tmp_path):
    """Regression (bench/chaos.py's soak, 6 December): the monitor kept every registration's
    freed temporaries resident, 70-100 MB per expert with the bundled trunk; it trims the
    heap past [monitor] heap_keep_mb after each registration (-1: never)."""
    from experts.trunk import build_tiny_trunk
    from topology.composition.assemble import build_monitor

    trunk = build_tiny_trunk(tmp_path / "trunk", family="gpt2", layers=1, width=16)
    for body, kept in (
        ("", 64 << 20),
        ("heap_keep_mb = 8\n", 8 << 20),
        ("heap_keep_mb = -1\n", None),
    ):
        config = _config(
            tmp_path, f'[experts]\ntrunk_dir = "{trunk}"\n[monitor]\nbaseline = false\n{body}'
        )
        assert build_monitor(config, paths.monitor_state_dir(config)).heap_keep_bytes == kept
    with pytest.raises(ConfigError, match="heap_keep_mb"):
        _config(tmp_path, "[monitor]\nheap_keep_mb = -2\n")
