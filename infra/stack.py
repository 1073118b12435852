"""Kafka and Redis together: ``up``, ``status``, ``down``.

``up`` writes ``<home>/stack.json`` (pids, ports, addresses) so that ``status`` and ``down``
work from another process (``recrawl infra status``).  ``up`` is idempotent: a healthy
running stack is reused.  Every service runs in its own process group and ``down`` stops
the whole group.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from infra import kafka, redis
from infra.proc import pid_alive, port_open, stop_group

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_home() -> Path:
    """Where data and logs go: ``$RECRAWL_HOME`` or ``<repo>/var`` (git-ignored)."""
    return Path(os.environ.get("RECRAWL_HOME", REPO_ROOT / "var"))


def default_cache() -> Path:
    """Where fetched jars go: ``$RECRAWL_CACHE`` or ``<repo>/.cache`` (git-ignored)."""
    return Path(os.environ.get("RECRAWL_CACHE", REPO_ROOT / ".cache"))


@dataclass
class StackInfo:
    home: str
    kafka_bootstrap: str
    kafka_pid: int
    redis_url: str
    redis_pid: int
    topics: list[str]
    partitions: int

    @property
    def kafka_port(self) -> int:
        return int(self.kafka_bootstrap.rsplit(":", 1)[1])

    @property
    def redis_port(self) -> int:
        return int(self.redis_url.rsplit(":", 1)[1].split("/")[0])


def _state_file(home: Path) -> Path:
    return home / "stack.json"


def read_state(home: Path) -> StackInfo | None:
    try:
        return StackInfo(**json.loads(_state_file(home).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _healthy(info: StackInfo) -> dict[str, bool]:
    return {
        "kafka": pid_alive(info.kafka_pid) and port_open("127.0.0.1", info.kafka_port),
        "redis": pid_alive(info.redis_pid) and redis.ping(info.redis_port),
    }


def up(
    topics: list[str],
    partitions: int,
    *,
    home: Path | None = None,
    cache: Path | None = None,
    kafka_port: int | None = None,
    redis_port: int | None = None,
    tie_to_parent: bool = False,
) -> StackInfo:
    """Start Kafka and Redis (or reuse a healthy running pair) and create ``topics``."""
    home = home or default_home()
    cache = cache or default_cache()
    current = read_state(home)
    if current is not None:
        health = _healthy(current)
        if all(health.values()):
            asyncio.run(kafka.create_topics(current.kafka_bootstrap, topics, partitions))
            return current
        down(home)
    home.mkdir(parents=True, exist_ok=True)
    rproc, rcfg = redis.start(home / "redis", port=redis_port, tie_to_parent=tie_to_parent)
    try:
        kproc, kcfg = kafka.start(
            cache, home / "kafka", port=kafka_port, tie_to_parent=tie_to_parent
        )
    except BaseException:
        stop_group(rproc.pid)
        raise
    info = StackInfo(
        home=str(home),
        kafka_bootstrap=kcfg.bootstrap,
        kafka_pid=kproc.pid,
        redis_url=rcfg.url,
        redis_pid=rproc.pid,
        topics=topics,
        partitions=partitions,
    )
    _state_file(home).write_text(json.dumps(asdict(info), indent=2))
    try:
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
    stop_group(info.redis_pid)
    _state_file(home).unlink(missing_ok=True)
    return True


def up_for_session(topics: list[str], partitions: int, home: Path) -> StackInfo:
    """Start a private stack for this process; it is stopped at exit and if this process dies."""
    info = up(topics, partitions, home=home, tie_to_parent=True)
    atexit.register(down, home)
    return info
