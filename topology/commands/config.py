"""`worx config show` (the effective settings and where each came from), `worx config docs`."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "config",
        help="the effective settings and their sources; the settings reference",
        description="`worx config show` prints every setting, section by section, as TOML, "
        "each value followed by where it came from (default, the file, or the environment "
        "variable); secrets show as ***. `worx config docs` prints docs/settings.md, the "
        "reference generated from the settings' own help.",
    )
    actions = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="the effective settings and where each came from")
    show.add_argument(
        "--config",
        dest="show_config",
        metavar="PATH",
        help="path of worx.toml (default: worx --config, $WORX_CONFIG or ./worx.toml)",
    )
    show.add_argument("--json", action="store_true", help="one JSON object, for a script")
    show.set_defaults(func=run_show)
    docs = actions.add_parser("docs", help="print docs/settings.md (generated from the code)")
    docs.set_defaults(func=run_docs)


def run_show(args: argparse.Namespace) -> int:
    import os

    from topology.composition.config_report import config_rows, render_json, render_text

    path = args.show_config or args.config
    file, rows = config_rows(path)
    chosen_by = "--config" if path else "WORX_CONFIG" if os.environ.get("WORX_CONFIG") else None
    render = render_json if args.json else render_text
    print(render(file, rows, chosen_by), end="")
    return 0


def run_docs(args: argparse.Namespace) -> int:
    from topology.composition.settings_doc import settings_markdown

    print(settings_markdown(), end="")
    return 0
