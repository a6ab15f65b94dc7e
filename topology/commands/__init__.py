"""The `worx` command line (:func:`main`; ``python -m topology.commands``).

Each subcommand is the module of its name in this folder (``serve.py`` is `worx serve`) and
exposes ``register(subparsers)``; modules are discovered, so adding one touches no other.
A module whose name starts with ``_`` is not a command (Django's rule): it holds helpers
several commands share, and no command imports another:

- ``_shared``: argument groups (Kafka, runtime, mapping) and helpers (stop on SIGTERM);
- ``_domain_source``: where a read-only command gets the domain table (run, file, topic);
- ``_explain_text``: `worx explain` and `worx route --explain`: why a text gets its experts.

Heavy imports (torch, faust) happen inside the command functions, to keep --help instant.
A :class:`worx.errors.UserError` (a :class:`topology.composition.worx_config.ConfigError`
is one) ends the command with one line on stderr, ``worx: <what is wrong>; <how to fix
it>``, and exit code 2; ``--debug`` or ``WORX_DEBUG=1`` re-raises it, with its traceback.
Any other exception is a bug: its traceback is printed, followed by one line saying so.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
import traceback

from topology.composition.worx_config import ConfigError
from worx.errors import UserError

DEBUG_ENV = "WORX_DEBUG"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="worx",
        description="TrainingWorx: streaming continual learning with lifelong expert spawning.",
    )
    parser.add_argument("--config", help="path of worx.toml (default: $WORX_CONFIG or ./worx.toml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of a user error too (or set {DEBUG_ENV}=1)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    # a module whose name starts with "_" holds helpers shared by commands (Django's rule)
    modules = pkgutil.iter_modules(__path__)
    names = sorted(m.name for m in modules if not m.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    debug = args.debug or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes", "on")
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        if debug:
            raise
        kind = "configuration error: " if isinstance(exc, ConfigError) else ""
        print(f"worx: {kind}{exc.one_line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception:
        traceback.print_exc()
        print(
            f"worx: unexpected error in `worx {args.command}`: this is a bug, not a mistake of "
            "yours; please report it with the traceback above",
            file=sys.stderr,
        )
        return 1
