"""``recrawl worker``: the Faust worker (agents, scheduler, HTTP views)."""

from __future__ import annotations

import argparse

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("worker", help="run a Faust worker against the configured Kafka and Redis")
    p.add_argument("--web-port", type=int, help="HTTP port of the worker (0 = disabled)")
    p.add_argument("--loglevel", default=None)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import faust

    from streams.settings import load_settings
    from streams.worker.app import create_app

    overrides = {}
    if args.web_port is not None:
        overrides = {"web_port": args.web_port, "web_enabled": args.web_port != 0}
    settings = load_settings(**overrides)
    app = create_app(settings)
    worker = faust.Worker(app, loglevel=args.loglevel or settings.log_level)
    worker.execute_from_commandline()
    return 0
