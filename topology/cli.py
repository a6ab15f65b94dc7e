"""The `worx` command line. Each subcommand lives in its own module under topology/commands/
and exposes ``register(subparsers)``; modules are discovered, so adding one touches no other.
Heavy imports (torch, faust) happen inside the command functions, to keep --help instant.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

import topology.commands
from topology.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="worx",
        description="TrainingWorx: streaming continual learning with lifelong expert spawning.",
    )
    parser.add_argument("--config", help="path of worx.toml (default: $WORX_CONFIG or ./worx.toml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = sorted(m.name for m in pkgutil.iter_modules(topology.commands.__path__))
    for name in names:
        importlib.import_module(f"topology.commands.{name}").register(subparsers)
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
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"worx: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
