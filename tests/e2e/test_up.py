"""`worx up` against a cluster it did not start (here: a broker the test owns), from worx.toml."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

from tests.support.kafka import publish_many, read_messages
from topology.composition.topics import ensure_topics

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_up_reads_company_topic_routes_it_and_stops_cleanly(tmp_path, kafka_conf, processes_with):
    prefix = f"up{uuid.uuid4().hex[:6]}"
    company = f"{prefix}-company-tickets"
    ensure_topics(kafka_conf, prefix=prefix, partitions=2, extra={company: 2})
    bodies = [
        json.dumps({"ticket": f"T{i}", "body": f"printer {i} on floor {i % 3} is jammed again"})
        for i in range(30)
    ]
    values = [body.encode() for body in bodies] + [b"not json at all"]
    publish_many(kafka_conf, company, ((None, value) for value in values))
    (tmp_path / "worx.toml").write_text(
        f'data_dir = "{tmp_path / "state"}"\n'
        f'[kafka]\nbootstrap_servers = "{kafka_conf["bootstrap.servers"]}"\n'
        f'topic_prefix = "{prefix}"\npartitions = 2\n'
        f'[ingest]\nsource_topics = ["{company}"]\ntext_field = "body"\nid_field = "ticket"\n'
    )
    marker = f"worx-up-{uuid.uuid4().hex}"
    up = subprocess.Popen(
        [sys.executable, "-m", "topology.commands", "--config", "worx.toml", "up", "--no-serve"],
        cwd=tmp_path,
        env={**os.environ, "WORX_E2E_MARKER": marker, "WORX_MONITOR__BASELINE": "false"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def routed_ids(messages) -> set[str]:
        return {json.loads(m.value())["doc_id"] for m in messages if m.topic().endswith(".routed")}

    def dead_count(messages) -> int:
        return sum(m.topic().endswith(".dlq") for m in messages)

    try:
        messages = read_messages(
            kafka_conf,
            [f"{prefix}.routed", f"{prefix}.dlq"],
            lambda ms: len(routed_ids(ms)) >= 30 and dead_count(ms) >= 1,
            timeout_s=120,
            raise_on_timeout=False,  # the assertions below say what was missing, with up's log
        )
    finally:
        up.send_signal(signal.SIGTERM)
        _, err = up.communicate(timeout=60)
    routed, dead = routed_ids(messages), dead_count(messages)
    assert routed == {f"T{i}" for i in range(30)}, err.decode()[-2000:]
    assert dead == 1
    assert up.returncode == 0, err.decode()[-2000:]
    assert processes_with(marker) == []
    # data_dir is a run directory: `worx serve --run <data_dir>` finds its parts there
    recorded = json.loads((tmp_path / "state" / "run.json").read_text())
    assert recorded["store_dir"] == str((tmp_path / "state" / "experts").resolve())
