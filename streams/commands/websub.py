"""``recrawl websub serve|subscribe|unsubscribe|list``: the WebSub subscriber.

``serve`` runs the callback endpoint (verification of intent, signed content distribution,
renewals); ``subscribe`` asks a hub for a topic's updates at a callback served by ``serve``
(the intent is recorded in Redis, so ``serve`` can verify it from another process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from streams.commands._settings import CLIENT_SETTINGS, add_settings_args, settings_from_args
from streams.commands._signals import stop_event

__all__ = ["manage", "register", "serve"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("websub", help="WebSub subscriber (signed content distribution -> pings)")
    acts = p.add_subparsers(dest="action", required=True)
    s = acts.add_parser("serve", help="serve the callback GET/POST /websub/<host>/<token>")
    s.add_argument("--bind", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8091)
    s.add_argument("--public-url", help="base URL the hubs reach (default http://BIND:PORT)")
    s.add_argument("--renew-every", type=float, default=60.0, help="seconds between renewals")
    s.add_argument("--renew-margin", type=float, default=3600.0,
                   help="renew a lease this many seconds (at most half the lease) before "
                   "it ends")  # fmt: skip
    add_settings_args(s, CLIENT_SETTINGS)
    s.set_defaults(func=serve)
    a = acts.add_parser("subscribe", help="ask a hub for a topic's updates")
    a.add_argument("hub")
    a.add_argument("topic")
    a.add_argument("--public-url", required=True, help="base URL of 'recrawl websub serve'")
    a.add_argument("--lease", type=int, help="hub.lease_seconds to ask for")
    g = a.add_mutually_exclusive_group()
    g.add_argument("--secret", help="hub.secret (default: a random one)")
    g.add_argument("--no-secret", action="store_true", help="send no hub.secret (unsigned)")
    add_settings_args(a, CLIENT_SETTINGS)
    a.set_defaults(func=manage)
    u = acts.add_parser("unsubscribe", help="ask the hub to end a subscription")
    u.add_argument("ref", help="HOST/TOKEN as printed by subscribe and list")
    add_settings_args(u, CLIENT_SETTINGS)
    u.set_defaults(func=manage)
    ls = acts.add_parser("list", help="active subscriptions")
    add_settings_args(ls, CLIENT_SETTINGS)
    ls.set_defaults(func=manage)


def manage(args: argparse.Namespace) -> int:
    from streams.edges.websub import WebSubError, WebSubSubscriber
    from streams.store.redis_conn import connect as connect_redis

    s = settings_from_args(args)

    async def main() -> int:
        client = connect_redis(s.redis_url)
        try:
            sub = WebSubSubscriber(None, client, s.key_prefix,
                                   getattr(args, "public_url", None))  # fmt: skip
            if args.action == "subscribe":
                secret: str | bool = False if args.no_secret else (args.secret or True)
                got = await sub.subscribe(args.hub, args.topic, secret=secret,
                                          lease_seconds=args.lease)  # fmt: skip
                print(json.dumps(got.to_json()))
            elif args.action == "unsubscribe":
                print(json.dumps((await sub.unsubscribe(args.ref)).to_json()))
            else:
                for x in await sub.active():
                    print(json.dumps(x.to_json()))
            return 0
        finally:
            await client.aclose()

    try:
        return asyncio.run(main())
    except WebSubError as exc:
        print(f"recrawl websub: {exc}", file=sys.stderr)
        return 1


def serve(args: argparse.Namespace) -> int:
    from streams.edges.pings import PingProducer
    from streams.edges.websub import WebSubSubscriber, renew_loop, start_subscriber
    from streams.store.redis_conn import connect as connect_redis

    s = settings_from_args(args)

    async def main() -> None:
        stop = stop_event()
        client = connect_redis(s.redis_url)
        async with PingProducer(s) as producer:
            sub = WebSubSubscriber(producer, client, s.key_prefix, args.public_url)
            runner, _port = await start_subscriber(sub, args.bind, args.port)
            print(f"WebSub callbacks under {sub.public_url}/websub/", flush=True)
            renewals = asyncio.create_task(
                renew_loop(sub, stop, args.renew_every, args.renew_margin)
            )
            await stop.wait()
            await renewals
            await runner.cleanup()
            print(json.dumps(dict(sub.stats)), flush=True)
        await client.aclose()

    asyncio.run(main())
    return 0
