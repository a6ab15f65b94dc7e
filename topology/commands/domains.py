"""`worx domains`: list the domain table (compacted worx.domains) with sizes and experts."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "domains",
        help="list known domains: name, size, cohesion, thresholds, experts",
        description="Print the latest row of every domain: from a finished run (--run DIR: "
        "its domains.json, no broker), from a domains.json file (--domains FILE), or from "
        "the compacted <prefix>.domains topic read from the beginning until nothing new "
        "arrives for --wait seconds (the embedded broker cannot report end offsets "
        "reliably).",
    )
    from topology.commands._domain_source import add_arguments

    add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per domain")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from router.naming import display_name
    from topology.commands._domain_source import domain_table
    from topology.composition.worx_config import load_config

    config = load_config(args.config)
    table, source = domain_table(args, config)
    rows = table.rows()
    if args.json:
        for row in rows:
            body = row.to_dict()
            body.pop("centroid")
            print(json.dumps(body))
        return 0
    out = Table(title=f"{len(rows)} domain(s) in {source}")
    parents = any(row.parent_domain_id for row in rows)
    for column in (
        "domain",
        "name",
        "status",
        "size",
        "cohesion",
        "threshold",
        "core thr.",
        "version",
        "experts",
        *(("parent",) if parents else ()),
    ):
        out.add_column(column, overflow="fold")  # a long id wraps, never loses its end
    for row in rows:
        out.add_row(
            row.domain_id,
            display_name(row),
            row.status,
            str(row.size),
            f"{row.cohesion:.3f}",
            f"{row.threshold:.3f}",
            f"{row.core_threshold:.3f}",
            str(row.version),
            ", ".join(row.expert_ids) or "-",
            *((row.parent_domain_id or "",) if parents else ()),
        )
    console = Console()
    if not console.is_terminal:  # piped: as wide as the rows, not 80 columns
        console = Console(width=200)
    console.print(out)
    return 0
