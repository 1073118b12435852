"""``recrawl explain URL``: why a page was or wasn't crawled (reads Redis, like GET /pages)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("explain", help="explain a page: state, value, threshold, decisions")
    p.add_argument("url")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.explain import explain
    from streams.settings import load_settings
    from streams.state import Store

    settings = load_settings()

    async def go() -> dict[str, object]:
        store = Store.from_url(settings.redis_url, settings.key_prefix)
        try:
            return await explain(store, settings, args.url, time.time())
        finally:
            await store.close()

    out = asyncio.run(go())
    print(json.dumps(out, indent=2, sort_keys=True, default=str))
    return 0 if out.get("known") else 1
