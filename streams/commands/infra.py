"""``recrawl infra up|status|down``: the local Kafka and Redis.

``up`` prints the addresses and the ``export`` lines that point other shells (or other
machines' users of this one) at them; commands run by the same user find a running stack
without them, through ``<home>/stack.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from infra import InfraError, stack
from streams.commands._settings import add_settings_args, settings_from_args

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("infra", help="start, check or stop the local Kafka and Redis")
    p.add_argument("action", choices=["up", "status", "down"])
    p.add_argument("--home", type=Path,
                   help="data and logs (default $RECRAWL_HOME, else the per-user state folder: "
                        f"{stack.default_home()}); Kafka's jars are cached in $RECRAWL_CACHE "
                        f"or {stack.default_cache()}")
    p.add_argument("--kafka-port", type=int, help="broker port (default: a free port)")
    p.add_argument("--redis-port", type=int,
                   help="redis port (default: a free port); with --redis-cluster the first "
                        "master's, the others follow")
    p.add_argument("--redis-cluster", type=_masters, default=None, metavar="N",
                   help="run Redis as a local Redis Cluster of N masters (default: one node, "
                        "or whatever the running stack has)")
    add_settings_args(p, ("topic_prefix", "partitions"), title="topics")
    p.set_defaults(func=run)


def _masters(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"a Redis Cluster needs at least 1 master, got {n}")
    return n


def run(args: argparse.Namespace) -> int:
    home = (args.home or stack.default_home()).absolute()
    try:
        if args.action == "up":
            settings = settings_from_args(args)
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
            print(f"home   {home}")
            print("# commands of this user find this stack through "
                  f"{home / 'stack.json'}; elsewhere:")
            print(f"export RECRAWL_KAFKA_BOOTSTRAP={info.kafka_bootstrap}")
            print(f"export RECRAWL_REDIS_URL={info.redis_url}")
            print(f"export RECRAWL_PARTITIONS={info.partitions}")
            if args.home is not None:
                print(f"export RECRAWL_HOME={home}")
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
