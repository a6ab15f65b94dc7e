"""docker/compose.yaml's Flink pair: the services, their shared checkpoints, a real command."""

from __future__ import annotations

from pathlib import Path

import yaml

from topology.commands import build_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())


def test_jobmanager_taskmanager_and_submit_share_the_flink_image_and_checkpoints():
    services = COMPOSE["services"]
    flink = [services[name] for name in ("jobmanager", "taskmanager", "flink-job")]
    for service in flink:
        assert service["image"] == "trainingworx-flink:latest"
        assert service["profiles"] == ["flink"]  # the plain deployment starts none of them
        build = service["build"]
        assert (ROOT / "docker" / build["context"] / build["dockerfile"]).is_file()
        assert "flink-checkpoints:/checkpoints" in service["volumes"]
        props = dict(
            line.split(": ", 1) for line in service["environment"]["FLINK_PROPERTIES"].splitlines()
        )
        assert props["jobmanager.rpc.address"] == "jobmanager"
        assert props["execution.checkpointing.dir"] == "file:///checkpoints"
    assert services["jobmanager"]["command"] == ["jobmanager.sh", "start-foreground"]
    assert services["taskmanager"]["command"] == ["taskmanager.sh", "start-foreground"]
    for port in services["jobmanager"]["ports"]:
        assert port.startswith("127.0.0.1:"), "publish on loopback only"


def test_the_submit_service_runs_a_real_worx_flink_submit():
    command = COMPOSE["services"]["flink-job"]["command"]
    assert command[:3] == ["worx", "flink", "submit"]
    args = build_parser().parse_args(command[1:])
    assert args.jobmanager == "jobmanager:8081" and args.parallelism == 2
    assert args.checkpoint_dir == "file:///checkpoints"
    dockerfile = (ROOT / "docker" / "Dockerfile.flink").read_text()
    assert "-c constraints-flink.txt" in dockerfile and '".[flink]"' in dockerfile
