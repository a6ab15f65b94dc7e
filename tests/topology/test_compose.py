"""docker/compose.yaml names every service and topic setting the code expects."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ingest.config import IngestConfig
from topology.commands import build_parser
from topology.composition.worx_config import load_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
WORX_SERVICES = {
    "ingest": "ingest",
    "connect": "connect",
    "stream": "stream",
    "trainer": "trainer",
    "serve": "serve",
    "monitor": "monitor",
}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def worx_command(service: dict) -> str:
    command = service["command"]
    if service.get("entrypoint") == ["sh", "-c"]:
        words = command[0].split()
        assert words[0] == "worx", f"shell command should start with worx: {command}"
        return words[1]
    return command[0]


def test_every_service_is_there(compose):
    services = compose["services"]
    assert {"kafka", "prometheus", *WORX_SERVICES} <= set(services)
    assert not any("zookeeper" in name for name in services), "KRaft: no ZooKeeper"


def test_worx_services_share_the_image_broker_and_a_valid_config(compose):
    kafka = compose["services"]["kafka"]["environment"]
    advertised = dict(
        item.split("://", 1) for item in kafka["KAFKA_ADVERTISED_LISTENERS"].split(",")
    )
    inside = advertised[kafka["KAFKA_INTER_BROKER_LISTENER_NAME"]]
    for name in WORX_SERVICES:
        service = compose["services"][name]
        assert service["image"] == "trainingworx:latest"
        assert (
            ROOT / "docker" / service["build"]["context"] / service["build"]["dockerfile"]
        ).exists()
        env = {k: str(v) for k, v in service["environment"].items()}
        assert env["WORX_KAFKA__BOOTSTRAP_SERVERS"] == inside
        # every WORX_ variable must be a real setting with a valid value
        config = load_config(env=env)
        assert config.kafka.replication_factor <= 1, "one Kafka node: replication factor 1"
        assert config.kafka.partitions >= 1 and config.kafka.topic_prefix == "worx"
        assert "kafka" in service["depends_on"]
        assert any(v.endswith(":/data") for v in service["volumes"])
        assert env["WORX_DATA_DIR"] == "/data"


def test_worx_services_run_real_subcommands(compose):
    subcommands = set(build_parser()._subparsers._group_actions[0].choices)
    missing = []
    for name, expected in WORX_SERVICES.items():
        command = worx_command(compose["services"][name])
        assert command == expected
        if command not in subcommands:
            missing.append(command)
    for core in ("ingest", "connect", "stream"):
        assert core in subcommands
    if missing:
        pytest.skip(f"worx subcommands not built yet in this tree: {missing}")


def test_kafka_is_single_node_kraft_and_fits_worx_records(compose):
    env = {k: str(v) for k, v in compose["services"]["kafka"]["environment"].items()}
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(env["KAFKA_NODE_ID"] + "@")
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[key] == "1", key
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"  # topics are created explicitly
    ingest = IngestConfig()
    largest_doc = ingest.max_doc_chars * 6 + 4096  # worst case: every char a \\uXXXX escape
    largest_letter = ingest.dlq_original_bytes * 4 // 3 + 4096
    assert int(env["KAFKA_MESSAGE_MAX_BYTES"]) >= max(largest_doc, largest_letter)
    for port in compose["services"]["kafka"]["ports"]:
        assert port.startswith("127.0.0.1:"), "publish on loopback only"


def test_published_ports_match_the_configured_ones(compose):
    services = compose["services"]
    serve_env = services["serve"]["environment"]
    assert f"127.0.0.1:{serve_env['WORX_EXPERTS__SERVE_PORT']}:" in services["serve"]["ports"][0]
    monitor_port = services["monitor"]["environment"]["WORX_MONITOR__PORT"]
    assert services["monitor"]["ports"][0].endswith(f":{monitor_port}")
    prometheus = yaml.safe_load((COMPOSE.parent / "prometheus.yml").read_text())
    targets = prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == [f"monitor:{monitor_port}"]


def test_dockerfile_copies_every_package():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    include = re.search(r"include = \[(.*?)\]", pyproject).group(1)
    packages = [p.strip().strip('"').rstrip("*") for p in include.split(",")]
    for package in packages:
        assert f"COPY {package} ./{package}" in dockerfile, package
    assert "COPY data/corpus" in dockerfile
