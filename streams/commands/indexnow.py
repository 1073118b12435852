"""``recrawl indexnow serve|add-key|remove-key``: the IndexNow receiver and its key registry."""

from __future__ import annotations

import argparse
import asyncio
import sys

from streams.commands._settings import CLIENT_SETTINGS, add_settings_args, settings_from_args
from streams.commands._signals import stop_event
from streams.commands.fetch import add_egress_args, policy_from_args

__all__ = ["keys", "register", "serve"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("indexnow", help="IndexNow receiver (publishes pings) and its keys")
    acts = p.add_subparsers(dest="action", required=True)
    s = acts.add_parser("serve", help="serve GET/POST /indexnow")
    s.add_argument("--bind", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8090)
    s.add_argument(
        "--verify-keys", action="store_true",
        help="verify unknown keys by fetching the key file (answers 202 meanwhile)",
    )  # fmt: skip
    s.add_argument("--rate", type=float, default=20.0, help="requests per second per host")
    s.add_argument("--dedup-window", type=float, default=60.0, metavar="S",
                   help="a URL is published at most once per host in this many seconds "
                        "(0: every submission)")
    add_egress_args(s)
    add_settings_args(s, CLIENT_SETTINGS)
    s.set_defaults(func=serve)
    for name in ("add-key", "remove-key"):
        k = acts.add_parser(name, help=f"{name.split('-')[0]} a verified key for a host")
        k.add_argument("host")
        k.add_argument("key")
        if name == "add-key":
            k.add_argument("--scope", default="", help="URL prefix the key may submit")
        add_settings_args(k, CLIENT_SETTINGS)
        k.set_defaults(func=keys)


def keys(args: argparse.Namespace) -> int:
    from streams.edges.indexnow import KeyRegistry
    from streams.store.redis_conn import connect as connect_redis

    s = settings_from_args(args)

    async def main() -> int:
        client = connect_redis(s.redis_url)
        try:
            reg = KeyRegistry(client, s.key_prefix)
            if args.action == "add-key":
                await reg.add(args.host, args.key, args.scope)
                print(f"key registered for {args.host}")
                return 0
            removed = await reg.remove(args.host, args.key)
            print("removed" if removed else "no such key")
            return 0 if removed else 1
        finally:
            await client.aclose()

    try:
        return asyncio.run(main())
    except ValueError as exc:
        print(f"recrawl indexnow: {exc}", file=sys.stderr)
        return 2


def serve(args: argparse.Namespace) -> int:
    from streams.edges.indexnow import IndexNowReceiver, KeyRegistry, start_receiver
    from streams.edges.pings import PingProducer
    from streams.fetcher.client import FetchLimits, SafeClient
    from streams.store.redis_conn import connect as connect_redis

    s = settings_from_args(args)
    policy = policy_from_args(args)

    async def main() -> None:
        stop = stop_event()
        client = connect_redis(s.redis_url)
        async with PingProducer(s) as producer, SafeClient(
            policy, FetchLimits(total_timeout_s=10)
        ) as verifier:
            receiver = IndexNowReceiver(
                producer, KeyRegistry(client, s.key_prefix),
                verifier=verifier if args.verify_keys else None,
                rate_per_s=args.rate, burst=2 * args.rate, dedup_window_s=args.dedup_window,
            )  # fmt: skip
            runner, port = await start_receiver(receiver, args.bind, args.port)
            print(f"IndexNow receiver on http://{args.bind}:{port}/indexnow", flush=True)
            await stop.wait()
            await runner.cleanup()
        await client.aclose()

    asyncio.run(main())
    return 0
