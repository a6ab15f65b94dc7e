"""`worx domains`: list the domain table (compacted worx.domains) with sizes and experts."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "domains",
        help="list known domains: size, cohesion, thresholds, experts",
        description="Read the compacted <prefix>.domains topic from the beginning and print "
        "the latest row of every domain. The topic is read until nothing new arrives for "
        "--wait seconds (the embedded broker cannot report end offsets reliably).",
    )
    parser.add_argument(
        "--bootstrap-servers", help="Kafka cluster (default: kafka.bootstrap_servers)"
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=3.0,
        help="stop reading after this many quiet seconds (default 3)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per domain")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import threading

    from rich.console import Console
    from rich.table import Table

    from router.table import DomainTable
    from topology.cli_common import servers_of
    from topology.config import load_config
    from topology.kafka import client_conf
    from topology.table_follower import TableFollower
    from topology.topics import Topics

    config = load_config(args.config)
    conf = client_conf(config.kafka, servers_of(config, args))
    table = DomainTable()
    arrived = threading.Event()

    def apply(row):
        table.apply(row)
        arrived.set()

    domains = Topics(config.kafka.topic_prefix).domains
    # a listing writes nothing: the stages dead-letter the rows they refuse
    follower = TableFollower(conf, domains, apply, dead_letters=False).start()
    try:
        while arrived.wait(args.wait):
            arrived.clear()
    finally:
        follower.stop()
    rows = table.rows()
    if args.json:
        for row in rows:
            body = row.to_dict()
            body.pop("centroid")
            print(json.dumps(body))
        return 0
    out = Table(title=f"{len(rows)} domain(s) on {Topics(config.kafka.topic_prefix).domains}")
    for column in (
        "domain",
        "status",
        "label hint",
        "size",
        "cohesion",
        "threshold",
        "core thr.",
        "version",
        "experts",
        "parent",
    ):
        out.add_column(column)
    for row in rows:
        out.add_row(
            row.domain_id,
            row.status,
            row.label_hint or "",
            str(row.size),
            f"{row.cohesion:.3f}",
            f"{row.threshold:.3f}",
            f"{row.core_threshold:.3f}",
            str(row.version),
            ", ".join(row.expert_ids) or "-",
            row.parent_domain_id or "",
        )
    Console().print(out)
    return 0
