"""`worx flink run` / `worx flink submit`: route and discover as one PyFlink job
(:mod:`topology.flink.job`), on a local mini-cluster or an existing Flink cluster."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "flink",
        help="run route + discover as a PyFlink job (mini-cluster or a Flink cluster)",
        description="Route and discover as one Apache Flink job: route at --parallelism "
        "with the domain table as broadcast state, discover as one instance with its state "
        "in Flink managed state, Kafka in and out at least once, checkpointed. Needs the "
        'Flink venv (README "Flink").',
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    run = verbs.add_parser(
        "run",
        help="run the job on a local mini-cluster until Ctrl-C or SIGTERM",
        description="Run the job in this process's Flink mini-cluster against "
        "--bootstrap-servers (default kafka.bootstrap_servers; empty: a temporary embedded "
        "broker). Restores the newest completed checkpoint under --checkpoint-dir unless "
        "--restore says otherwise.",
    )
    _job_arguments(run)
    run.set_defaults(func=run_local)
    submit = verbs.add_parser(
        "submit",
        help="submit the job to a running Flink cluster (its JobManager's REST address)",
        description="Build the job here and submit it to the Flink cluster at --jobmanager; "
        "the TaskManagers run the stages with --python, which must have trainingworx "
        "installed (docker/ builds such an image). Returns once submitted; prints the job "
        "id. The cluster's own `flink run -py topology/flink/job.py` works too "
        "(docs/deployment.md).",
    )
    _job_arguments(submit)
    submit.add_argument("--jobmanager", required=True, metavar="HOST:PORT")
    submit.add_argument(
        "--python", default="python3", help="the Python of the TaskManagers (default python3)"
    )
    submit.set_defaults(func=run_submit)


def _job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", help="Kafka cluster (default: the configured one)")
    parser.add_argument("--parallelism", type=int, default=1, help="route instances (default 1)")
    parser.add_argument(
        "--checkpoint-dir",
        help="any Flink filesystem URI or a directory (default <data_dir>/flink/checkpoints)",
    )
    parser.add_argument("--checkpoint-interval-ms", type=int, default=5_000)
    parser.add_argument(
        "--restore",
        default="latest",
        help="'latest' (the newest completed chk-N under --checkpoint-dir, if any), 'none', "
        "or the path of a chk-N or savepoint",
    )
    parser.add_argument(
        "--compact-every",
        type=int,
        default=500,
        help="discover inputs journalled between two snapshots of its state (default 500)",
    )
    parser.add_argument(
        "--order-idle-ms",
        type=int,
        default=5_000,
        help="discover stops waiting for a worx.docs partition that has been silent this "
        "long (default 5000; docs/deployment.md 'Parallelism does not change the result')",
    )


def _options(args: argparse.Namespace, config, servers: str):
    from topology.flink.checkpoints import as_uri, latest_checkpoint
    from topology.flink.job import FlinkJobOptions

    if (
        args.parallelism < 1
        or args.checkpoint_interval_ms < 100
        or args.compact_every < 1
        or args.order_idle_ms < 0
    ):
        from worx.errors import UserError

        raise UserError(
            "--parallelism and --compact-every must be >= 1, --checkpoint-interval-ms >= 100, "
            "--order-idle-ms >= 0",
            "pass valid values",
        )
    checkpoints = as_uri(args.checkpoint_dir or Path(config.data_dir) / "flink" / "checkpoints")
    restore = None
    if args.restore == "latest":
        restore = latest_checkpoint(checkpoints)
    elif args.restore != "none":
        restore = as_uri(args.restore)
    return FlinkJobOptions(
        bootstrap_servers=servers,
        checkpoint_dir=checkpoints,
        topic_prefix=config.kafka.topic_prefix,
        parallelism=args.parallelism,
        checkpoint_interval_ms=args.checkpoint_interval_ms,
        restore=restore,
        compact_every=args.compact_every,
        order_idle_ms=args.order_idle_ms,
        client=dict(config.kafka.client),
    )


def _contain_temp_files(data_dir: str) -> None:
    """Point the JVM's and Python's temporary files, and the JVM's log, into the run (not
    /tmp, nor pyflink's own folder in the venv, where every run would overwrite it)."""
    flink = Path(data_dir).resolve() / "flink"
    tmp = flink / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    (flink / "log").mkdir(exist_ok=True)
    os.environ.setdefault("FLINK_LOG_DIR", str(flink / "log"))
    os.environ["TMPDIR"] = str(tmp)
    os.environ["JVM_ARGS"] = f"{os.environ.get('JVM_ARGS', '')} -Djava.io.tmpdir={tmp}".strip()


def run_local(args: argparse.Namespace) -> int:
    from topology.commands._shared import destination
    from topology.composition.worx_config import load_config
    from topology.flink import require_pyflink

    require_pyflink()
    config = load_config(args.config)
    _contain_temp_files(config.data_dir)
    from topology.flink.job import start

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with destination(config, args.bootstrap_servers) as (servers, embedded):
        if embedded:
            print(f"worx flink: temporary embedded broker at {servers}", flush=True)
        options = _options(args, config, servers)
        client = start(options, config.router)
        restored = f", restored from {options.restore}" if options.restore else ""
        print(
            f"worx flink: job {client.get_job_id()} on {servers}, route parallelism "
            f"{options.parallelism}, checkpoints in {options.checkpoint_dir}{restored} "
            "(Ctrl-C stops)",
            flush=True,
        )
        try:
            while not stop.wait(1.0):
                status = str(client.get_job_status().result())
                if status in ("FAILED", "CANCELED", "FINISHED"):
                    print(f"worx flink: job ended {status}", flush=True)
                    return 1 if status == "FAILED" else 0
        except KeyboardInterrupt:
            pass
        client.cancel().result()
        print(f"worx flink: job {client.get_job_id()} cancelled", flush=True)
    return 0


def run_submit(args: argparse.Namespace) -> int:
    from topology.composition.worx_config import load_config
    from topology.flink import require_pyflink

    require_pyflink()
    config = load_config(args.config)
    _contain_temp_files(config.data_dir)
    from topology.flink.job import start

    servers = args.bootstrap_servers or config.kafka.bootstrap_servers
    if not servers:
        from topology.composition.worx_config import ConfigError

        raise ConfigError(
            "a Flink cluster needs a Kafka cluster it can reach",
            "set kafka.bootstrap_servers or pass --bootstrap-servers",
        )
    options = _options(args, config, servers)
    options.remote = args.jobmanager
    options.python_executable = args.python
    client = start(options, config.router)
    print(f"worx flink: submitted job {client.get_job_id()} to {args.jobmanager}", flush=True)
    return 0
