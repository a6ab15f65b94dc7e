import os
import signal
import subprocess
import sys
import textwrap

import pytest
from confluent_kafka.admin import AdminClient

from topology.composition.embedded_broker import EmbeddedBroker
from topology.composition.kafka_clients import partition_count
from topology.composition.topics import TOPICS, Topics, ensure_topics

pytestmark = [pytest.mark.broker, pytest.mark.slow]  # every test starts a broker


def test_embedded_broker_starts_answers_and_stops():
    with EmbeddedBroker() as broker:
        process = broker.process
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert admin.list_topics(timeout=5).brokers
    assert process.poll() is not None


def test_topics_are_created_once_with_their_policies(kafka_conf):
    created = ensure_topics(kafka_conf, prefix="cfgtest", partitions=3)
    assert sorted(created) == sorted(Topics("cfgtest").all())
    assert ensure_topics(kafka_conf, prefix="cfgtest", partitions=3) == []
    metadata = AdminClient(kafka_conf).list_topics(timeout=5)
    for spec in TOPICS:
        expected = 3 if spec.partitioned else 1
        assert len(metadata.topics[f"cfgtest.{spec.suffix}"].partitions) == expected
    assert partition_count(kafka_conf, "cfgtest.docs") == 3  # what Flink's discover merges
    assert partition_count(kafka_conf, "cfgtest.no-such-topic", timeout_s=5) is None


def test_broker_dies_with_its_parent(tmp_path):
    script = textwrap.dedent(
        """
        import sys, time
        from topology.composition.embedded_broker import EmbeddedBroker
        b = EmbeddedBroker().start()
        print(b.process.pid, flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    broker_pid = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    # the kernel delivers PDEATHSIG; wait for the broker to be reaped or gone
    for _ in range(200):
        try:
            os.kill(broker_pid, 0)
            with open(f"/proc/{broker_pid}/stat") as stat:
                if stat.read().split()[2] == "Z":
                    break
        except (ProcessLookupError, FileNotFoundError):
            break
        import time

        time.sleep(0.05)
    else:
        os.kill(broker_pid, signal.SIGKILL)
        raise AssertionError("embedded broker outlived its parent")
