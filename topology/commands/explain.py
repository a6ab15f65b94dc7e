"""`worx explain`: which domain and experts a text gets, and why (logic in
topology/commands/_explain_text.py and experts/serving/explain.py)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from topology.commands import _explain_text

    parser = subparsers.add_parser(
        "explain",
        help="why a text gets its domain and experts: cosines, thresholds, rule, perplexity",
        description="Embed the text as the route stage does and show the nearest domains "
        "(cosine, threshold, core threshold, cohesion, the floor the length-aware rule asks "
        "of a text this long), the rule that decided (threshold, length rule, below "
        "threshold, between two domains, no domains) and why, the likelihood step if the "
        "decision was unsure and it ran, the experts and weights chosen (or why the trunk "
        "serves it alone), and the perplexity with those experts and with the trunk alone. "
        'The same answer as POST /score with "explain": true. On a finished run: '
        "--run DIR (no broker); else the live table of --bootstrap-servers, or --domains FILE.",
    )
    parser.add_argument("text", metavar="TEXT|-|FILE", help="the text, - for stdin, or a file")
    _explain_text.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from topology.commands import _explain_text

    return _explain_text.run(args, args.text)
