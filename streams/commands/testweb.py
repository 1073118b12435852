"""``recrawl testweb``: serve a live test web with known ground truth."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time

from streams.commands._signals import stop_event

__all__ = ["add_world_args", "register", "run", "world_from_args"]


def add_world_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", type=int, default=20, help="virtual hosts (h0.test, ...)")
    p.add_argument("--pages-per-host", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--time-unit", type=float, default=10.0,
        help="real seconds per time unit of the paper's world (change rates ~ Unif(0,1)/unit)",
    )  # fmt: skip
    p.add_argument("--sitemap-share", type=float, default=0.5, help="hosts announcing by sitemap")
    p.add_argument("--world", help="load the world from this JSON file instead of drawing it")


def world_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from streams.testweb.server import world_from_file
    from streams.testweb.world import generate_world

    if args.world:
        return world_from_file(args.world)
    return generate_world(
        args.seed, n_hosts=args.hosts, pages_per_host=args.pages_per_host,
        time_unit_s=args.time_unit, sitemap_share=args.sitemap_share,
    )  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("testweb", help="serve a test web whose pages change as Poisson processes")
    add_world_args(p)
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--indexnow", help="the IndexNow endpoint to POST announcements to")
    p.add_argument("--world-out", help="write the world (JSON) here")
    p.add_argument("--robots", action="append", metavar="HOST=FILE",
                   help="serve FILE as HOST's robots.txt, read at every request (edit it to "
                        "change robots.txt live); other hosts answer 404; repeatable")
    p.add_argument("--robots-max-age", type=int, metavar="S",
                   help="Cache-Control: max-age of the robots.txt files")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.testweb.server import TestWeb

    world = world_from_args(args)
    if args.world_out:
        with open(args.world_out, "w", encoding="utf-8") as f:
            f.write(world.dumps())

    async def main() -> None:
        stop = stop_event()
        web = TestWeb(world, port=args.port, indexnow_endpoint=args.indexnow)
        for item in args.robots or []:
            host, _, path = item.partition("=")
            web.robots_files[host.lower()] = path
        web.robots_max_age_s = args.robots_max_age
        await web.start()
        print(
            f"test web on 127.0.0.1:{web.port}: {len(world.pages)} pages on "
            f"{len(world.hosts)} hosts (e.g. {web.url(0)}); truth at "
            f"http://127.0.0.1:{web.port}/truth",
            flush=True,
        )
        started = time.time()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 10)
            print(json.dumps({"t_s": round(time.time() - started, 1), **web.summary()}), flush=True)
        await web.stop()

    asyncio.run(main())
    return 0
