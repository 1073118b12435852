"""``recrawl ping URL [--source S] [--changed-at T]`` or ``recrawl ping --file PATH``."""

from __future__ import annotations

import argparse
import asyncio
import sys

from streams.edges.pings import PING_SOURCES, Ping, parse_ping_line, parse_time, publish_pings

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "ping",
        help="publish change pings to recrawl.pings",
        description="Publish one ping, or a batch from a file (one 'URL [CHANGED_AT]' or one "
        "JSON ping object per line; '-' reads stdin; blank lines and '#' comments skipped).",
    )
    p.add_argument("url", nargs="?", help="the page that changed")
    p.add_argument("--source", default="other", choices=PING_SOURCES)
    p.add_argument("--changed-at", help="when it changed: epoch seconds or ISO 8601")
    p.add_argument("--file", help="batch: a file of pings ('-' for stdin)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.settings import load_settings

    if (args.url is None) == (args.file is None):
        print("recrawl ping: give either a URL or --file", file=sys.stderr)
        return 2
    pings: list[Ping] = []
    try:
        if args.url is not None:
            changed = parse_time(args.changed_at) if args.changed_at else None
            pings.append(Ping(url=args.url, source=args.source, changed_at=changed))
        else:
            stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
            with stream:
                for n, line in enumerate(stream, 1):
                    if not line.strip() or line.lstrip().startswith("#"):
                        continue
                    try:
                        pings.append(parse_ping_line(line, default_source=args.source))
                    except ValueError as exc:
                        print(f"recrawl ping: {args.file}:{n}: {exc}", file=sys.stderr)
                        return 2
    except (ValueError, OSError) as exc:
        print(f"recrawl ping: {exc}", file=sys.stderr)
        return 2
    n = asyncio.run(publish_pings(load_settings(), pings))
    print(f"published {n} ping{'s' if n != 1 else ''} to {load_settings().topic('pings')}")
    return 0
