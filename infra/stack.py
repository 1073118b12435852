"""Kafka and Redis together: ``up``, ``status``, ``down``.

``up`` writes ``<home>/stack.json`` (pids, ports, addresses) so that ``status`` and ``down``
work from another process (``recrawl infra status``).  ``up`` is idempotent: a healthy
running stack is reused.  Every service runs in its own process group and ``down`` stops
the whole group.  ``up(redis_cluster=N)`` runs Redis as a local Redis Cluster of N masters
instead of one node (:func:`infra.redis.start_cluster`); its address is a
``redis+cluster://`` URL that :mod:`streams.store.redis_conn` turns into a cluster client.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from platformdirs import user_cache_path, user_state_path

from infra import kafka, redis
from infra.errors import ServiceStartError
from infra.proc import pid_alive, port_open, stop_group

REPO_ROOT = Path(__file__).resolve().parent.parent
#: the folder name under the per-user folders (platformdirs: XDG on Linux)
APP_NAME = "recrawl"


def default_home() -> Path:
    """Where the stack's data and logs and the worker's data go: ``$RECRAWL_HOME``, else the
    per-user state folder (``$XDG_STATE_HOME/recrawl``, ``~/.local/state/recrawl`` on Linux).
    Never a folder of the installed package: the same for every current folder."""
    env = os.environ.get("RECRAWL_HOME")
    return Path(env).expanduser().absolute() if env else user_state_path(APP_NAME)


def default_cache() -> Path:
    """Where fetched jars go (Kafka's, ~46 MB): ``$RECRAWL_CACHE``, else the per-user cache
    folder (``$XDG_CACHE_HOME/recrawl``, ``~/.cache/recrawl`` on Linux)."""
    env = os.environ.get("RECRAWL_CACHE")
    return Path(env).expanduser().absolute() if env else user_cache_path(APP_NAME)


@dataclass
class StackInfo:
    home: str
    kafka_bootstrap: str
    kafka_pid: int
    redis_url: str
    redis_pid: int
    topics: list[str]
    partitions: int
    #: a Redis Cluster's nodes (empty for one node): pid and port of each master
    redis_cluster_pids: list[int] = field(default_factory=list)
    redis_cluster_ports: list[int] = field(default_factory=list)

    @property
    def kafka_port(self) -> int:
        return int(self.kafka_bootstrap.rsplit(":", 1)[1])

    @property
    def redis_port(self) -> int:
        if self.redis_cluster_ports:
            return self.redis_cluster_ports[0]
        return int(self.redis_url.rsplit(":", 1)[1].split("/")[0])

    @property
    def redis_masters(self) -> int:
        """Masters of the Redis Cluster; 0 for a single Redis node."""
        return len(self.redis_cluster_ports)


def _state_file(home: Path) -> Path:
    return home / "stack.json"


def read_state(home: Path) -> StackInfo | None:
    try:
        return StackInfo(**json.loads(_state_file(home).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _healthy(info: StackInfo) -> dict[str, bool]:
    if info.redis_cluster_ports:
        redis_ok = all(pid_alive(p) for p in info.redis_cluster_pids) and redis.cluster_ok(
            info.redis_cluster_ports
        )
    else:
        redis_ok = pid_alive(info.redis_pid) and redis.ping(info.redis_port)
    return {
        "kafka": pid_alive(info.kafka_pid) and port_open("127.0.0.1", info.kafka_port),
        "redis": redis_ok,
    }


def _redis_pids(info: StackInfo) -> list[int]:
    return list(info.redis_cluster_pids) or [info.redis_pid]


def up(
    topics: list[str],
    partitions: int,
    *,
    home: Path | None = None,
    cache: Path | None = None,
    kafka_port: int | None = None,
    redis_port: int | None = None,
    redis_cluster: int | None = None,
    tie_to_parent: bool = False,
) -> StackInfo:
    """Start Kafka and Redis (or reuse a healthy running pair) and create ``topics``.

    ``redis_cluster``: None reuses whatever Redis runs and starts one node when none does;
    0 asks for one node; N > 0 for a local Redis Cluster of N masters (ports from
    ``redis_port`` on, when given).  A running stack whose Redis is not the kind asked for
    is not reused but an error: stopping it would stop whatever works on it."""
    home = home or default_home()
    cache = cache or default_cache()
    if redis_cluster is not None and redis_cluster < 0:
        raise ValueError(f"redis_cluster must be 0 (one node) or a count of masters, got "
                         f"{redis_cluster}")
    current = read_state(home)
    if current is not None:
        health = _healthy(current)
        if all(health.values()):
            if redis_cluster is not None and current.redis_masters != redis_cluster:
                have = (f"a Redis Cluster of {current.redis_masters} masters"
                        if current.redis_masters else "one Redis node")
                raise ServiceStartError(
                    f"the stack in {home} runs {have}; stop it first (`recrawl infra down`)"
                )
            asyncio.run(kafka.create_topics(current.kafka_bootstrap, topics, partitions))
            return current
        down(home)
    home.mkdir(parents=True, exist_ok=True)
    redis_cluster = redis_cluster or 0
    cluster_procs: list[subprocess.Popen[bytes]] = []
    if redis_cluster:
        cluster_procs, ccfg = redis.start_cluster(
            home / "redis-cluster", redis_cluster, base_port=redis_port,
            tie_to_parent=tie_to_parent,
        )
        rproc, redis_url = cluster_procs[0], ccfg.url
    else:
        rproc, rcfg = redis.start(home / "redis", port=redis_port, tie_to_parent=tie_to_parent)
        redis_url = rcfg.url
    try:
        kproc, kcfg = kafka.start(
            cache, home / "kafka", port=kafka_port, tie_to_parent=tie_to_parent
        )
    except BaseException:
        for p in cluster_procs or [rproc]:
            stop_group(p)
        raise
    info = StackInfo(
        home=str(home),
        kafka_bootstrap=kcfg.bootstrap,
        kafka_pid=kproc.pid,
        redis_url=redis_url,
        redis_pid=rproc.pid,
        topics=topics,
        partitions=partitions,
        redis_cluster_pids=[p.pid for p in cluster_procs],
        redis_cluster_ports=list(ccfg.ports) if redis_cluster else [],
    )
    _state_file(home).write_text(json.dumps(asdict(info), indent=2))
    try:
        if redis_cluster:
            redis.wait_cluster_ready(cluster_procs, ccfg)
        else:
            redis.wait_ready(rproc, rcfg)
        kafka.wait_ready(kproc, kcfg)
        asyncio.run(kafka.create_topics(kcfg.bootstrap, topics, partitions))
    except BaseException:
        down(home)
        raise
    return info


def status(home: Path | None = None) -> dict[str, object]:
    home = home or default_home()
    info = read_state(home)
    if info is None:
        return {"running": False, "home": str(home)}
    health = _healthy(info)
    return {"running": all(health.values()), **health, **asdict(info)}


def down(home: Path | None = None) -> bool:
    """Stop both services (whole process groups). Returns whether anything was recorded."""
    home = home or default_home()
    info = read_state(home)
    if info is None:
        return False
    stop_group(info.kafka_pid, timeout_s=30)
    for pid in _redis_pids(info):
        stop_group(pid)
    _state_file(home).unlink(missing_ok=True)
    return True


def up_for_session(
    topics: list[str], partitions: int, home: Path, *, redis_cluster: int | None = None
) -> StackInfo:
    """Start a private stack for this process; it is stopped at exit and if this process dies."""
    info = up(topics, partitions, home=home, redis_cluster=redis_cluster, tie_to_parent=True)
    atexit.register(down, home)
    return info
