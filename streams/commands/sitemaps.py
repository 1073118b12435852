"""``recrawl sitemaps URL...``: poll sitemaps; changed ``lastmod`` values become pings."""

from __future__ import annotations

import argparse
import asyncio
import json

from streams.commands._settings import CLIENT_SETTINGS, add_settings_args, settings_from_args
from streams.commands._signals import stop_event
from streams.commands.fetch import add_egress_args, policy_from_args

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("sitemaps", help="poll sitemaps and publish pings for changed lastmod")
    p.add_argument("urls", nargs="+", metavar="URL", help="sitemaps or sitemap indexes")
    p.add_argument("--interval", type=float, default=300.0, help="seconds between rounds")
    p.add_argument("--once", action="store_true", help="one round, then exit")
    p.add_argument("--ping-new", action="store_true", help="ping URLs seen for the first time")
    add_egress_args(p)
    add_settings_args(p, CLIENT_SETTINGS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.edges.pings import PingProducer
    from streams.edges.sitemaps import MAX_BYTES, SitemapPoller
    from streams.fetcher.client import FetchLimits, SafeClient
    from streams.store.redis_conn import connect as connect_redis

    s = settings_from_args(args)
    policy = policy_from_args(args)

    async def main() -> int:
        client = connect_redis(s.redis_url)
        failed = 0
        async with PingProducer(s) as producer, SafeClient(
            policy, FetchLimits(total_timeout_s=120, max_body_bytes=MAX_BYTES)
        ) as http:
            poller = SitemapPoller(http, client, s.key_prefix, producer, ping_new=args.ping_new)
            if args.once:
                for u in args.urls:
                    r = await poller.poll(u)
                    failed += r.status in ("refused", "error")
                    print(json.dumps(r.__dict__))
            else:
                stop = stop_event()
                await poller.run(args.urls, args.interval, stop)
                print(json.dumps(dict(poller.stats)))
        await client.aclose()
        return 1 if failed else 0

    return asyncio.run(main())
