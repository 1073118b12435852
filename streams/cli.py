"""The ``recrawl`` command.

Each command group lives in its own module with a ``register(subparsers)`` function that
adds its parser and sets ``func`` (``args -> int``); :data:`COMMAND_MODULES` lists them.

Exit status: 0 done, 1 done but something failed (the output says what), 2 bad arguments or
settings (one line naming the setting), 3 Kafka or Redis not reachable within
``connect_timeout_s`` (one line naming the address), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

__all__ = ["COMMAND_MODULES", "build_parser", "main", "version"]

COMMAND_MODULES = [
    "streams.commands.infra",
    "streams.commands.worker",
    "streams.commands.budget",
    "streams.commands.explain",
    "streams.commands.plan",
    "streams.commands.pages",
    "streams.commands.importing",
    "streams.commands.experiments",
    "streams.commands.ping",
    "streams.commands.fetch",
    "streams.commands.indexnow",
    "streams.commands.websub",
    "streams.commands.sitemaps",
    "streams.commands.testweb",
    "streams.commands.demo",
]


def version() -> str:
    """The installed distribution's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("recrawl")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recrawl", description="Re-crawl scheduler: which page to fetch next, and why."
    )
    parser.add_argument("--version", action="version", version=f"recrawl {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _reader_gone() -> int:
    """The reader of the output went away (``recrawl explain URL | head``): stop quietly, as
    Unix tools do.  stdout goes to devnull so that the interpreter's own flush at exit does
    not fail again (Python docs, :mod:`signal`, "Note on SIGPIPE")."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1


def main(argv: list[str] | None = None) -> int:
    from streams.reach import Unreachable
    from streams.settings import SettingsError

    try:
        args = build_parser().parse_args(argv)  # --help: printed here
    except BrokenPipeError:
        return _reader_gone()
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        return _reader_gone()
    except SettingsError as exc:
        print(f"recrawl {args.command}: {exc}", file=sys.stderr)
        return 2
    except Unreachable as exc:
        print(f"recrawl {args.command}: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
