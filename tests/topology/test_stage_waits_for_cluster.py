"""A stage the loop restarts while the broker does not answer waits for it, as long as the
loop's stages are told to (``STAGE_CONNECT_TIMEOUT_S``), instead of exiting after the
one-line error's 10 s and crash-looping through its restart budget.

Found by bench/chaos.py (docs/chaos.md): the broker SIGSTOPped for 50 s, serve SIGKILLed
5 s later; each restarted serve exited 2 ("cannot reach the Kafka cluster within 10 s")
until the broker came back, and route's flush gave up after 30 s and crashed too: with
the default budget (3 restarts within 10 minutes) a minute-long broker outage stopped
`worx up` altogether.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest
from confluent_kafka.admin import AdminClient

from experts.default_trunk import default_trunk_dir
from tests.support.processes import start_worx
from topology.composition.embedded_broker import EmbeddedBroker
from topology.composition.kafka_clients import require_reachable
from topology.loop.orchestrate import STAGE_CONNECT_TIMEOUT_S, LoopOptions, stage_env

pytestmark = [pytest.mark.broker, pytest.mark.slow]

OLD_WAIT_S = 10.0  # kafka.connect_timeout_s's default: a one-line error after it


def connected_to(pid: int, port: int) -> bool:
    try:
        return any(c.raddr and c.raddr.port == port for c in psutil.Process(pid).net_connections())
    except psutil.Error:
        return False


def test_the_loop_gives_its_stages_a_long_wait_for_the_cluster_and_yours_wins(monkeypatch):
    options = LoopOptions("127.0.0.1:1", Path("run"), Path("trunk"))
    monkeypatch.delenv("WORX_KAFKA__CONNECT_TIMEOUT_S", raising=False)
    assert stage_env(options)["WORX_KAFKA__CONNECT_TIMEOUT_S"] == str(STAGE_CONNECT_TIMEOUT_S)
    assert STAGE_CONNECT_TIMEOUT_S >= 120  # a broker paused for a minute, twice over
    monkeypatch.setenv("WORX_KAFKA__CONNECT_TIMEOUT_S", "7")
    assert stage_env(options)["WORX_KAFKA__CONNECT_TIMEOUT_S"] == "7"


def test_a_stage_started_while_the_broker_is_paused_waits_and_goes_on(tmp_path):
    with EmbeddedBroker() as broker:
        options = LoopOptions(broker.bootstrap_servers, tmp_path / "run", default_trunk_dir())
        env = {k: v for k, v in stage_env(options).items() if k.startswith("WORX_")}
        broker.process.send_signal(signal.SIGSTOP)
        try:
            route = start_worx(["route"], env, tmp_path / "route.log")
            deadline = time.monotonic() + 120
            while not connected_to(route.pid, broker.port):  # its reachability check began
                assert route.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)  # no event tells when another process connects
            time.sleep(OLD_WAIT_S + 2)  # the outage outlasts the old wait
            assert route.poll() is None, (tmp_path / "route.log").read_text()[-2000:]
        finally:
            broker.process.send_signal(signal.SIGCONT)
        conf = {"bootstrap.servers": broker.bootstrap_servers}
        require_reachable(conf, timeout_s=30)
        deadline = time.monotonic() + 60
        while "worx.routed" not in AdminClient(conf).list_topics(timeout=10).topics:
            assert route.poll() is None, (tmp_path / "route.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "route never created its topics"
            time.sleep(0.2)  # topics appear on the broker; nothing notifies a client
        route.terminate()
        route.wait(timeout=30)
