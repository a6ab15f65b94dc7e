"""`worx trainer`: the training node (consumes worx.train, registers experts on worx.experts)."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "trainer",
        help="run the training worker: one expert per job from worx.train",
        description="Consume TrainJob records from <prefix>.train one at a time, fetch each "
        "job's documents by reference from <prefix>.docs, train one expert on the frozen trunk, "
        "write it to the expert store and announce it on <prefix>.experts; progress and "
        "outcomes go to <prefix>.train.status. Jobs are checkpointed (a killed worker resumes "
        "them) and idempotent (a job id yields at most one expert). Needs only the broker and "
        "the expert store, so it can run on another machine than the stream. SIGTERM or "
        "Ctrl-C checkpoints the running job and exits.",
    )
    parser.add_argument(
        "--bootstrap-servers", help="Kafka cluster (default: kafka.bootstrap_servers)"
    )
    parser.add_argument(
        "--trunk", help="trunk model directory (default: experts.trunk_dir or the bundled trunk)"
    )
    parser.add_argument(
        "--store",
        help="expert store directory (default: experts.store_dir, else trainer.store_dir, "
        "else <data_dir>/experts: where serve and monitor read); with experts.store_url "
        "set, this command's local cache of that bucket",
    )
    parser.add_argument(
        "--jobs-dir", help="job checkpoints (default: trainer.jobs_dir or <data_dir>/trainer/jobs)"
    )
    parser.add_argument("--device", help="cpu, cuda, cuda:N (default: trainer.device, auto)")
    parser.add_argument("--max-jobs", type=int, help="exit after this many jobs")
    parser.add_argument(
        "--idle-exit", type=float, metavar="SECONDS", help="exit when no job came for this long"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from topology.composition.assemble import trainer_from_config
    from topology.composition.embedded_broker import bootstrap
    from topology.composition.kafka_clients import client_conf
    from topology.composition.topics import Topics, ensure_configured_topics
    from topology.composition.worx_config import load_config
    from topology.runtimes.train_worker import TrainWorker

    config = load_config(args.config)
    parts = trainer_from_config(
        config,
        trunk_dir=args.trunk,
        store_dir=args.store,
        jobs_dir=args.jobs_dir,
        device=args.device,
        progress=False if args.no_progress else None,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with bootstrap(args.bootstrap_servers or config.kafka.bootstrap_servers) as servers:
        conf = client_conf(config.kafka, servers)
        ensure_configured_topics(conf, config.kafka)
        worker = TrainWorker(
            conf,
            Topics(config.kafka.topic_prefix),
            parts.trunk,
            parts.store,
            parts.config,
            parts.jobs_dir,
            session_timeout_ms=config.kafka.session_timeout_ms,
        )
        log.info(
            "trainer ready: trunk %s (%s), store %s, jobs %s",
            parts.trunk_dir,
            parts.trunk.fingerprint[:12],
            parts.store.where,
            parts.jobs_dir,
        )
        try:
            worker.run(stop, idle_timeout_s=args.idle_exit, max_jobs=args.max_jobs)
        except KeyboardInterrupt:
            stop.set()
    return 0
