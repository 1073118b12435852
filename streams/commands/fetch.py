"""``recrawl fetch``: the reference fetcher (orders in, outcomes out)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from streams.commands._settings import CLIENT_SETTINGS, add_settings_args, settings_from_args
from streams.commands._signals import on_stop_signals

__all__ = ["add_egress_args", "policy_from_args", "register", "run"]


def add_egress_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-loopback", action="store_true", help="allow 127.0.0.0/8 and ::1")
    p.add_argument("--allow-private", action="store_true", help="allow RFC 1918 / ULA addresses")
    p.add_argument(
        "--loopback-only", action="store_true", help="refuse everything but loopback (demo, tests)"
    )
    p.add_argument(
        "--resolve",
        action="append",
        metavar="SUFFIX=ADDR",
        help="resolve hosts ending in SUFFIX to ADDR without DNS (.test=127.0.0.1); repeatable",
    )


def policy_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from streams.fetcher.egress import EgressPolicy, parse_overrides

    return EgressPolicy(
        allow_loopback=args.allow_loopback,
        allow_private=args.allow_private,
        loopback_only=args.loopback_only,
        overrides=parse_overrides(args.resolve),
    )


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("fetch", help="run the reference fetcher: consume orders, publish outcomes")
    add_egress_args(p)
    p.add_argument("--group", help="consumer group (default <app_id>-fetcher)")
    p.add_argument("--per-host", type=int, default=1, help="fetches in flight per host")
    p.add_argument("--max-in-flight", type=int, default=64)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per fetch, all hops")
    p.add_argument("--max-redirects", type=int, default=5)
    p.add_argument("--max-body-bytes", type=int, default=5 * 1024 * 1024)
    p.add_argument("--ignore-robots", action="store_true",
                   help="do not obey robots.txt (only for sites you run yourself)")
    p.add_argument("--robots-min-ttl", type=float, default=60.0, metavar="S",
                   help="keep a robots.txt at least S seconds whatever its max-age (at most "
                        "24 h: RFC 9309)")
    p.add_argument("--robots-error-ttl", type=float, default=60.0, metavar="S",
                   help="an unreachable robots.txt disallows everything for S seconds")
    p.add_argument("--pushback-decrease", type=float, default=0.5,
                   help="429/503 push-back: the host's rate is multiplied by this")
    p.add_argument("--pushback-increase", type=float, default=0.1,
                   help="push-back recovery: + this fraction of the rate before it per step")
    p.add_argument("--pushback-interval", type=float, default=1.0, metavar="S",
                   help="push-back recovery: one step every S seconds")
    add_settings_args(p, CLIENT_SETTINGS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.fetcher.client import FetchLimits
    from streams.fetcher.pushback import PushbackPolicy
    from streams.fetcher.robots import RobotsPolicy
    from streams.fetcher.service import FetcherService

    try:
        policy = policy_from_args(args)
        pushback = PushbackPolicy(decrease=args.pushback_decrease,
                                  increase_fraction=args.pushback_increase,
                                  increase_interval_s=args.pushback_interval)
    except ValueError as exc:
        print(f"recrawl fetch: {exc}", file=sys.stderr)
        return 2
    limits = FetchLimits(
        total_timeout_s=args.timeout,
        max_redirects=args.max_redirects,
        max_body_bytes=args.max_body_bytes,
        per_host_concurrency=args.per_host,
        max_in_flight=args.max_in_flight,
    )
    service = FetcherService(
        settings_from_args(args), policy, limits, group_id=args.group,
        obey_robots=not args.ignore_robots,
        robots=RobotsPolicy(min_ttl_s=args.robots_min_ttl, error_ttl_s=args.robots_error_ttl),
        pushback=pushback,
    )

    async def main() -> None:
        on_stop_signals(service.stop)
        await service.run()

    asyncio.run(main())
    st = service.stats
    print(f"fetched {st.fetched_ok} ok, {st.failed} failed, {st.bad_orders} unreadable orders, "
          f"{st.disallowed} disallowed by robots.txt, {st.pushbacks} push-back answers")
    return 0
