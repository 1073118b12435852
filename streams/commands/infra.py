"""``recrawl infra up|status|down``: the local Kafka and Redis."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from infra import InfraError, stack

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("infra", help="start, check or stop the local Kafka and Redis")
    p.add_argument("action", choices=["up", "status", "down"])
    p.add_argument("--home", type=Path, help="data and logs (default $RECRAWL_HOME or ./var)")
    p.add_argument("--kafka-port", type=int, help="broker port (default: a free port)")
    p.add_argument("--redis-port", type=int,
                   help="redis port (default: a free port); with --redis-cluster the first "
                        "master's, the others follow")
    p.add_argument("--redis-cluster", type=_masters, default=None, metavar="N",
                   help="run Redis as a local Redis Cluster of N masters (default: one node, "
                        "or whatever the running stack has)")
    p.set_defaults(func=run)


def _masters(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"a Redis Cluster needs at least 1 master, got {n}")
    return n


def run(args: argparse.Namespace) -> int:
    from streams.settings import Settings

    home = args.home or stack.default_home()
    try:
        if args.action == "up":
            settings = Settings()
            info = stack.up(
                settings.topic_names(),
                settings.partitions,
                home=home,
                kafka_port=args.kafka_port,
                redis_port=args.redis_port,
                redis_cluster=args.redis_cluster,
            )
            print(f"kafka  {info.kafka_bootstrap}  (pid {info.kafka_pid}, logs {home}/kafka/logs)")
            if info.redis_masters:
                pids = ", ".join(map(str, info.redis_cluster_pids))
                print(f"redis  {info.redis_url}  (cluster of {info.redis_masters} masters, "
                      f"pids {pids}, logs {home}/redis-cluster/<port>)")
            else:
                print(f"redis  {info.redis_url}  (pid {info.redis_pid}, logs {home}/redis)")
            print(f"topics {', '.join(info.topics)} ({info.partitions} partitions each)")
            return 0
        if args.action == "status":
            st = stack.status(home)
            print(json.dumps(st, indent=2))
            return 0 if st["running"] else 1
        print("stopped" if stack.down(home) else "nothing was running")
        return 0
    except InfraError as exc:
        print(f"recrawl infra {args.action}: {exc}")
        return 2
