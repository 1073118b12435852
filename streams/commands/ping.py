"""``recrawl ping URL [--source S] [--changed-at T]`` or ``recrawl ping --file PATH``.

Every ping is checked as the worker checks it (:func:`streams.commands._send.worker_reason`)
before anything is sent: a ping the worker would reject (a change time in the future, a URL
that is not http(s)) is refused with the worker's reason.  A batch file is all or nothing:
its first bad line stops the command (exit 2, nothing sent) with the line's number.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from streams.commands._settings import CLIENT_SETTINGS, add_settings_args, settings_from_args
from streams.edges.pings import PING_SOURCES, Ping, parse_ping_line, parse_time

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "ping",
        help="publish change pings to recrawl.pings",
        description="Publish one ping, or a batch from a file (one 'URL [CHANGED_AT]' or one "
        "JSON ping object per line; '-' reads stdin; blank lines and '#' comments skipped). "
        "A batch is sent only when every line is valid. Format: docs/operating.md.",
    )
    p.add_argument("url", nargs="?", help="the page that changed")
    p.add_argument("--source", default="other", choices=PING_SOURCES)
    p.add_argument("--changed-at", help="when it changed: epoch seconds or ISO 8601")
    p.add_argument("--file", help="batch: a file of pings ('-' for stdin)")
    add_settings_args(p, (*CLIENT_SETTINGS, "max_future_s"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.commands._send import worker_reason
    from streams.events.records import PingEvent

    if (args.url is None) == (args.file is None):
        print("recrawl ping: give either a URL or --file", file=sys.stderr)
        return 2
    settings = settings_from_args(args)
    pings: list[tuple[str, Ping]] = []  # (where, ping)
    try:
        if args.url is not None:
            changed = parse_time(args.changed_at) if args.changed_at else None
            pings.append(("", Ping(url=args.url, source=args.source, changed_at=changed)))
        else:
            stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
            with stream:
                for n, line in enumerate(stream, 1):
                    if not line.strip() or line.lstrip().startswith("#"):
                        continue
                    try:
                        pings.append((f"{args.file}:{n}: ",
                                      parse_ping_line(line, default_source=args.source)))
                    except ValueError as exc:
                        print(f"recrawl ping: {args.file}:{n}: {exc} (nothing sent)",
                              file=sys.stderr)
                        return 2
    except (ValueError, OSError) as exc:
        print(f"recrawl ping: {exc}", file=sys.stderr)
        return 2
    for where, ping in pings:
        reason = worker_reason(PingEvent, ping.encode()[1], settings)
        if reason is not None:
            print(f"recrawl ping: {where}not sent, the worker would reject it: {reason}",
                  file=sys.stderr)
            return 2
    n = asyncio.run(_publish(settings, [p for _, p in pings]))
    topic = f"{settings.topic('pings')} at {settings.kafka_bootstrap}"
    if n == 1:
        print(f"sent {json.dumps(pings[0][1].to_json())} to {topic}")
    else:
        print(f"sent {n} pings to {topic}")
    return 0


async def _publish(settings: object, pings: list[Ping]) -> int:
    from streams.reach import started_producer

    timeout_s = settings.connect_timeout_s  # type: ignore[attr-defined]
    async with started_producer(settings.kafka_bootstrap, timeout_s,  # type: ignore[attr-defined]
                                linger_ms=5, acks="all") as producer:
        topic = settings.topic("pings")  # type: ignore[attr-defined]
        for p in pings:
            key, value = p.encode()
            await producer.send(topic, value, key=key)
        await asyncio.wait_for(producer.flush(), timeout_s + 0.1 * len(pings))
    return len(pings)
