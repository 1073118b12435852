"""The ``recrawl`` command.

Each command group lives in its own module with a ``register(subparsers)`` function that
adds its parser and sets ``func`` (``args -> int``); :data:`COMMAND_MODULES` lists them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

COMMAND_MODULES = [
    "streams.commands.infra",
    "streams.commands.worker",
    "streams.commands.budget",
    "streams.commands.explain",
    "streams.commands.plan",
    "streams.commands.pages",
    "streams.commands.experiments",
    "streams.commands.ping",
    "streams.commands.fetch",
    "streams.commands.indexnow",
    "streams.commands.websub",
    "streams.commands.sitemaps",
    "streams.commands.testweb",
    "streams.commands.demo",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recrawl", description="Re-crawl scheduler: which page to fetch next, and why."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
