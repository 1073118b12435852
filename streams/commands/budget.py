"""``recrawl budget set N | show | pause | resume``: the global crawl budget R.

``set``, ``pause`` and ``resume`` send one record to ``<topic_prefix>.control``, checked
first as the worker checks it (a budget the worker would reject is refused here with the
worker's reason, nothing sent); ``show`` reads what the workers use from Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from streams.commands._settings import CLIENT_SETTINGS, add_settings_args, settings_from_args

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("budget", help="set or show the global crawl budget R (orders/s)")
    p.add_argument("action", choices=["set", "show", "pause", "resume"])
    p.add_argument("value", nargs="?", type=float,
                   help="orders per second (for set): 0 to 1e9")
    add_settings_args(p, (*CLIENT_SETTINGS, "max_future_s"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.commands._send import worker_reason
    from streams.events.records import ControlEvent

    settings = settings_from_args(args)
    if args.action == "show":
        return asyncio.run(_show(settings))
    if args.action == "set":
        if args.value is None:
            print("recrawl budget set: give a number of orders per second", file=sys.stderr)
            return 2
        body: dict[str, object] = {"budget_per_s": args.value}
    else:
        body = {"paused": args.action == "pause"}
    value = json.dumps(body).encode()
    reason = worker_reason(ControlEvent, value, settings)
    if reason is not None:
        print(f"recrawl budget: not sent, the worker would reject {value.decode()}: {reason}",
              file=sys.stderr)
        return 2
    asyncio.run(_send(settings, value))
    print(f"sent {value.decode()} to {settings.topic('control')} at {settings.kafka_bootstrap}")
    return 0


async def _send(settings: Any, value: bytes) -> None:
    from streams.reach import started_producer

    async with started_producer(settings.kafka_bootstrap, settings.connect_timeout_s,
                                acks="all") as producer:
        await asyncio.wait_for(producer.send_and_wait(settings.topic("control"), value,
                                                      key=b"control"),
                               settings.connect_timeout_s)


async def _show(settings: Any) -> int:
    from streams.reach import check_redis
    from streams.store.redis_store import Store

    await check_redis(settings.redis_url, settings.connect_timeout_s)
    store = Store.from_url(settings.redis_url, settings.key_prefix)
    try:
        control = await store.get_control()
        shards = await store.get_shards()
    finally:
        await store.close()
    print(json.dumps({"control": control, "shards": shards}, indent=2, sort_keys=True))
    return 0
