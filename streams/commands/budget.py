"""``recrawl budget set N | show | pause | resume``: the global crawl budget R."""

from __future__ import annotations

import argparse
import asyncio
import json

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("budget", help="set or show the global crawl budget R (orders/s)")
    p.add_argument("action", choices=["set", "show", "pause", "resume"])
    p.add_argument("value", nargs="?", type=float, help="orders per second (for set)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.settings import load_settings

    settings = load_settings()
    if args.action == "show":
        return asyncio.run(_show(settings))
    if args.action == "set":
        if args.value is None or not args.value >= 0:
            print("recrawl budget set: give a number of orders per second >= 0")
            return 2
        body: dict[str, object] = {"budget_per_s": args.value}
    else:
        body = {"paused": args.action == "pause"}
    asyncio.run(_send(settings, body))
    print(f"sent {json.dumps(body)} to {settings.topic('control')}")
    return 0


async def _send(settings: object, body: dict[str, object]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)  # type: ignore[attr-defined]
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.topic("control"), json.dumps(body).encode(), key=b"control"  # type: ignore[attr-defined]
        )
    finally:
        await producer.stop()


async def _show(settings: object) -> int:
    from streams.store.redis_store import Store

    store = Store.from_url(settings.redis_url, settings.key_prefix)  # type: ignore[attr-defined]
    try:
        control = await store.get_control()
        shards = await store.get_shards()
    finally:
        await store.close()
    print(json.dumps({"control": control, "shards": shards}, indent=2, sort_keys=True))
    return 0
