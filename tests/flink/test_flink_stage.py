"""`worx flink run` as the loop supervises it (`worx up`/`worx demo --runtime flink`): it
routes, its temporary files, checkpoints and JVM log are in the run, and stopping it cancels the
job cleanly and leaves none of its processes (the client, the JVM, the Python workers).

Runs in the Flink venv (README "Flink"); skipped where apache-flink is not installed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("pyflink", reason='apache-flink is not installed (README "Flink" venv)')

from ingest.records import Doc  # noqa: E402
from router.records import RoutedDoc  # noqa: E402
from tests.support.kafka import produce, read_messages  # noqa: E402
from topology.composition.topics import Topics, ensure_topics  # noqa: E402
from topology.loop.orchestrate import route_and_discover  # noqa: E402
from topology.loop.supervisor import Supervisor  # noqa: E402
from worx.scenario import Scenario  # noqa: E402

pytestmark = [pytest.mark.broker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _group(pgid: int) -> list[str]:
    """The command lines of the processes in process group ``pgid``."""
    found = subprocess.run(["pgrep", "-a", "-g", str(pgid)], capture_output=True, text=True)
    return found.stdout.splitlines()


def test_the_supervised_flink_stage_routes_and_stops_with_nothing_left(broker, tmp_path):
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    topics = Topics("flink-stage")
    ensure_topics(conf, prefix=topics.prefix, partitions=2)
    stream = Scenario.from_directory().phased(["legal"], per_domain=12, seed=1)
    docs = [Doc(doc_id=d.doc_id, text=d.text, created_ms=i + 1) for i, d in enumerate(stream)]
    produce(conf, topics.docs, docs)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WORX_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "WORX_KAFKA__TOPIC_PREFIX": topics.prefix,
        "WORX_DATA_DIR": str(tmp_path),
    }
    (spec,) = route_and_discover("flink")
    supervisor = Supervisor(tmp_path / "logs", base_env=env)
    stage = supervisor.start(spec)
    try:
        routed: set[str] = set()

        def all_routed(messages) -> bool:
            routed.update(RoutedDoc.from_json(m.value(), strict=False).doc_id for m in messages)
            return routed >= {d.doc_id for d in docs}

        try:
            read_messages(conf, topics.routed, all_routed, timeout_s=180)
        except AssertionError as exc:
            log = stage.log_path.read_text(errors="replace")[-3000:]
            raise AssertionError(f"{exc}\n--- worx flink run:\n{log}") from None
        processes = _group(stage.process.pid)
        assert any(" org.apache.flink" in line for line in processes), processes  # the JVM
        assert list((tmp_path / "flink" / "tmp").glob("python-dist-*"))  # the workers' files
    finally:
        supervisor.stop_all()
    assert _group(stage.process.pid) == [], "a process of the Flink stage outlived it"
    log = stage.log_path.read_text(errors="replace")
    assert stage.process.returncode == 0 and "Traceback" not in log, log[-3000:]
    assert " cancelled" in log.splitlines()[-1], log[-3000:]  # by the client, JVM still up
    assert list((tmp_path / "flink" / "checkpoints").glob("*/shared"))  # the job's directory
    (jvm_log,) = (tmp_path / "flink" / "log").glob("flink-*.log")  # not in pyflink's folder
    assert "Job " in jvm_log.read_text(errors="replace")
