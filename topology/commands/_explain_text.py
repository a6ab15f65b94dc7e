"""`worx explain TEXT|-|FILE` (and `worx route --explain`): which domain and experts a text
gets, and why, on a finished run or a live table. The reasons come from
:meth:`experts.serving.ExpertServer.explain` (the same the server's /score gives with
``"explain": true``); this module reads the text, builds the server and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from topology.commands import _domain_source
from worx.errors import UserError


def add_arguments(parser: argparse.ArgumentParser, servers: bool = True) -> None:
    """The options of the table source (--run / --domains / --bootstrap-servers) and more."""
    _domain_source.add_arguments(parser, servers)
    parser.add_argument("--trunk", help="trunk directory (default: the run's, else the config's)")
    parser.add_argument("--store", help="expert store (default: the run's, else the config's)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of tables")


def read_text(source: str) -> str:
    """``-``: standard input; the path of a file: its text; anything else: the text itself."""
    if source == "-":
        return sys.stdin.read()
    if "\n" in source or "\0" in source:
        return source  # no file is named that
    path = Path(source)
    try:
        is_file = path.is_file()
    except OSError:  # a text longer than a file name may be
        return source
    if is_file:
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror}", "pass a readable file") from None
    return source


def run(args: argparse.Namespace, source: str) -> int:
    from topology.composition.run_dir import open_run, run_server
    from topology.composition.worx_config import load_config

    text = read_text(source)
    if not text.strip():
        raise UserError("the text to explain is empty", "pass TEXT, a FILE, or - to read stdin")
    config = load_config(args.config)
    # the table first: a missing run or table fails before the trunk is loaded
    run_dir = open_run(args.run) if args.run else None
    table = None
    if args.domains or run_dir is None or args.bootstrap_servers:
        table = _domain_source.domain_table(args, config)[0]
    from experts.serving import RequestError  # torch: after the table was found
    from topology.composition.assemble import server_from_config

    if run_dir is not None:
        server = run_server(config, run_dir, args.trunk, args.store)
    else:
        server = server_from_config(config, args.trunk, args.store)
        server.rebuild_from_store()
    if table is not None:
        dim = getattr(server.embedder, "dim", None)
        for row in table.rows():
            if dim is not None and len(row.centroid) != dim:
                raise UserError(
                    f"domain {row.domain_id} has a {len(row.centroid)}-dimensional centroid, "
                    f"the configured embedder makes {dim}",
                    "use the [router] settings of the run that made the table",
                )
        server.domains = table
    budget = server.max_tokens * config.serve.chars_per_token  # as POST /score cuts it
    try:
        why = server.explain(text[:budget])
    except RequestError as exc:
        raise UserError(str(exc), "give a longer text") from None
    # "chars": what the gate saw (the text cut to the budget, as the server cuts it)
    why = {**why, "truncated": why["truncated"] or len(text) > budget}
    if args.json:
        print(json.dumps(why, sort_keys=True))
    else:
        render(why)
    return 0


def render(why: dict[str, Any]) -> None:
    """The explanation as a table of the nearest domains and a few labelled lines."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # piped: as wide as the rows, not 80 columns
        console = Console(width=160)
    chosen = why["decision"]["domain_id"]
    table = Table(
        title=f"nearest domains of the text ({why['chars']} characters, "
        f"domain table v{why['domain_version']})"
    )
    for column in ("domain", "cosine", "threshold", "core thr.", "cohesion", "length floor"):
        table.add_column(column, justify="left" if column == "domain" else "right")
    table.add_column("experts", overflow="fold")
    for row in why["nearest"]:
        name = f"{row['name']} ({row['domain_id']})" if row["name"] else row["domain_id"]
        floor = row["length_floor"]
        table.add_row(
            ("> " if row["domain_id"] == chosen else "  ") + name,
            f"{row['cosine']:.3f}",
            f"{row['threshold']:.3f}",
            f"{row['core_threshold']:.3f}" if row["core_threshold"] is not None else "",
            f"{row['cohesion']:.3f}",
            f"{floor:.3f}" if floor is not None else "",
            ", ".join(row["experts"]) or "-",
        )
    console.print(table)
    decision = why["decision"]
    if chosen is None:
        domain = "novel"
    elif decision["name"]:
        domain = f"{decision['name']} ({chosen})"
    else:
        domain = chosen
    lines = [("domain", f"{domain}, rule {decision['rule']}: {why['why']}")]
    if "likelihood" in why:
        lines.append(("likelihood", why["likelihood"]["why"]))
    experts = ", ".join(f"{e} (weight {w:.2f})" for e, w in why["experts"].items())
    lines.append(("served by", f"{experts or 'the trunk alone'}: {why['served_why']}"))
    if why.get("overridden"):
        lines.append(("note", "the request named its experts: the gate's choice above is unused"))
    ppl = why.get("perplexity")
    if ppl:
        lines.append(
            (
                "perplexity",
                f"{ppl['with_experts']:.1f} with these experts, {ppl['trunk_alone']:.1f} with "
                f"the trunk alone ({ppl['tokens']} tokens"
                + (" scored: the text's head)" if why.get("truncated") else ")"),
            )
        )
    for label, value in lines:
        console.print(f"[bold]{label:>10}[/]  {value}", soft_wrap=not console.is_terminal)
