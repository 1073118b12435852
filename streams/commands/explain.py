"""``recrawl explain URL``: why a page was or wasn't crawled.

Reads Redis, like ``GET /pages``; the recent decisions about the page live in the memory of
the worker that runs its shard (no decision text in Redis), so they are asked from that
worker's ``GET /pages`` (its address is in the shard's entry); when no worker answers
within 2 s, the answer says so and has no decisions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.request
from typing import Any
from urllib.parse import urlencode

from streams.commands._settings import CLIENT_SETTINGS, add_settings_args, settings_from_args

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("explain", help="explain a page: state, value, threshold, decisions")
    p.add_argument("url", help="the page's full URL (http:// or https://)")
    add_settings_args(p, CLIENT_SETTINGS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.events.records import check_url
    from streams.reach import check_redis
    from streams.scheduler import SHARD_ALIVE_S
    from streams.store.redis_store import Store
    from streams.worker.explain import explain
    from streams.worker.plan import steady_threshold

    try:
        check_url(args.url)
    except ValueError as exc:
        hint = (f" (did you mean https://{args.url} ?)" if "://" not in args.url else "")
        print(f"recrawl explain: {args.url!r} is not a page URL recrawl schedules: {exc}{hint}",
              file=sys.stderr)
        return 2
    settings = settings_from_args(args)

    async def go() -> dict[str, Any]:
        await check_redis(settings.redis_url, settings.connect_timeout_s)
        store = Store.from_url(settings.redis_url, settings.key_prefix)
        try:
            out = await explain(store, settings, args.url, time.time(),
                                steady=lambda: steady_threshold(store, settings))
            entry = (await store.get_shards()).get(out.get("shard", -1), {})
            redis_now = await store.server_time()  # shard entries carry Redis's time
        finally:
            await store.close()
        web = entry.get("web")
        if not web or redis_now - float(entry.get("ts", 0)) > SHARD_ALIVE_S:
            out["decisions_from"] = "no live worker runs this shard"
            return out
        try:
            answer = await asyncio.to_thread(_get_json, f"{web}/pages/?" + urlencode(
                {"url": args.url}))
            out["decisions"] = answer.get("decisions", [])
            out["decisions_from"] = web
        except (OSError, ValueError) as exc:
            out["decisions_from"] = f"worker at {web} did not answer: {exc}"
        return out

    out = asyncio.run(go())
    print(json.dumps(out, indent=2, sort_keys=True, default=str))
    return 0 if out.get("known") else 1


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=2.0) as resp:
        data = json.loads(resp.read())
    return data if isinstance(data, dict) else {}
