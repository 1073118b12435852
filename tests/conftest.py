"""Session fixtures for the real Kafka broker and Redis.

``kafka_bootstrap`` and ``redis_url`` are resolved in this order:

1. the environment: ``KAFKA_BOOTSTRAP`` and ``REDIS_URL`` pointing at running services;
2. testcontainers, when a Docker engine answers;
3. the project's own launcher (:mod:`infra.stack`): a private Kafka and Redis for this
   session, in a temporary folder, stopped at the end and tied to this process so that an
   interrupted run leaves nothing behind.

With ``CI=true`` a service that cannot be reached fails the run; it never skips.
Each test that asks for ``settings`` gets its own topics, consumer group and key prefix.

``REDIS_CLUSTER=1``: the launcher's Redis is a local Redis Cluster of three masters
(``recrawl infra up --redis-cluster 3``), so the whole suite runs against a cluster
(``REDIS_CLUSTER=1 make test``).  ``redis_cluster_url`` is a Redis Cluster in every session
(that one, or a private one started on first use) for the tests that always need one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from hypothesis import settings as hypothesis_settings
from kinds import UNIT_FILES_CHECKED, kind_of, misplaced_unit_items
from worker_process import IN_CI, Worker, settings_env  # noqa: F401 (re-exported)

from streams.settings import Settings
from streams.store.redis_conn import connect as connect_redis
from streams.testweb.server import TestWeb
from streams.testweb.world import generate_world

#: run the session's Redis as a Redis Cluster of CLUSTER_MASTERS masters
REDIS_CLUSTER = os.environ.get("REDIS_CLUSTER", "").lower() in ("1", "true", "yes")
CLUSTER_MASTERS = 3

# CI runs the same hypothesis examples every time (a red CI is then reproducible);
# local runs keep exploring new ones.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if IN_CI:
    hypothesis_settings.load_profile("ci")
REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests by kind (``tests/kinds.py``): mark each item ``unit``, ``integration`` or ``e2e``
    after its folder, and refuse a run in which a test under tests/unit/ needs a service."""
    bad = misplaced_unit_items(items)
    if bad:
        raise pytest.UsageError(
            "tests/unit/ is for tests without Kafka, Redis or a subprocess; move these to "
            "tests/integration/ (or drop the service):\n  " + "\n  ".join(bad)
        )
    for item in items:
        kind = kind_of(item.path)
        if kind is not None:
            item.add_marker(kind)
    config.stash[UNIT_FILES_CHECKED] = frozenset(
        item.path.resolve() for item in items if kind_of(item.path) == "unit")


@dataclass
class Services:
    kafka_bootstrap: str
    redis_url: str
    how: str


def _reachable(hostport: str) -> bool:
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2):
            return True
    except (OSError, ValueError):
        return False


def _redis_hostport(url: str) -> str:
    from urllib.parse import urlsplit

    from streams.store.redis_conn import cluster_nodes, is_cluster_url

    if is_cluster_url(url):  # the first seed node
        host, port = cluster_nodes(url)[0][0]
        return f"{host}:{port}"
    parts = urlsplit(url)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true and the services are unavailable: {reason}", pytrace=False)
    pytest.skip(f"services unavailable: {reason}")


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    env_kafka, env_redis = os.environ.get("KAFKA_BOOTSTRAP"), os.environ.get("REDIS_URL")
    if env_kafka and env_redis:
        for name, hp in (("KAFKA_BOOTSTRAP", env_kafka), ("REDIS_URL", _redis_hostport(env_redis))):
            if not _reachable(hp):
                _unavailable(f"{name}={hp} does not answer")
        yield Services(env_kafka, env_redis, "environment")
        return
    if not REDIS_CLUSTER and _docker_answers():
        from testcontainers.community.kafka import KafkaContainer
        from testcontainers.community.redis import RedisContainer

        # testcontainers' KafkaContainer drives Confluent's image; cp-kafka 7.9 is Kafka 3.9.
        with KafkaContainer("confluentinc/cp-kafka:7.9.0").with_kraft() as k, RedisContainer(
            "redis:7"
        ) as r:
            url = f"redis://{r.get_container_host_ip()}:{r.get_exposed_port(6379)}/0"
            yield Services(k.get_bootstrap_server(), url, "testcontainers")
        return
    from infra import InfraError
    from infra.stack import down, up_for_session

    home = tmp_path_factory.mktemp("stack")
    try:
        info = up_for_session([], 1, home, redis_cluster=CLUSTER_MASTERS if REDIS_CLUSTER else 0)
    except InfraError as exc:
        _unavailable(f"the infra launcher failed: {exc}")
        raise
    try:
        yield Services(info.kafka_bootstrap, info.redis_url, f"infra launcher ({home})")
    finally:
        # the session's Kafka is killed, not stopped: its logs are thrown away with the
        # folder, and a clean shutdown of a broker holding every test's topics takes seconds
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(info.kafka_pid), signal.SIGKILL)
        down(home)


@pytest.fixture(scope="session")
def redis_cluster_url(services: Services, tmp_path_factory: pytest.TempPathFactory
                      ) -> Iterator[str]:
    """A real local Redis Cluster of CLUSTER_MASTERS masters: the session's Redis when it is
    one (``REDIS_CLUSTER=1`` or a ``redis+cluster://`` REDIS_URL), else a private one
    started by the infra code (:func:`infra.redis.start_cluster`) and stopped at the end."""
    from infra import InfraError
    from infra import redis as infra_redis
    from infra.proc import stop_group
    from streams.store.redis_conn import is_cluster_url

    if is_cluster_url(services.redis_url):
        yield services.redis_url
        return
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs, cfg = infra_redis.start_cluster(
            tmp_path_factory.mktemp("redis-cluster"), CLUSTER_MASTERS, tie_to_parent=True)
        infra_redis.wait_cluster_ready(procs, cfg)
    except InfraError as exc:
        for proc in procs:
            stop_group(proc)
        _unavailable(f"the Redis Cluster launcher failed: {exc}")
        raise
    try:
        yield cfg.url
    finally:
        for proc in procs:
            stop_group(proc)


@pytest.fixture(scope="session")
def kafka_bootstrap(services: Services) -> str:
    return services.kafka_bootstrap


@pytest.fixture(scope="session")
def redis_url(services: Services) -> str:
    return services.redis_url


@pytest.fixture
def settings(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> Settings:
    """Settings private to one test: own topics (created), consumer group and key prefix."""
    from infra.kafka import create_topics

    tag = uuid.uuid4().hex[:10]
    s = Settings(
        kafka_bootstrap=kafka_bootstrap,
        redis_url=redis_url,
        topic_prefix=f"t{tag}",
        app_id=f"app{tag}",
        key_prefix=f"k{tag}",
        partitions=2,
        web_enabled=False,
        data_dir=tmp_path / "worker",
    )
    asyncio.run(create_topics(kafka_bootstrap, s.topic_names(), s.partitions))
    return s


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[object]:
    """``start_worker(settings, **env) -> Worker``; every worker still running after the test
    is killed (SIGKILL: its topics, consumer group and keys belong to the test alone, and a
    graceful stop waits about a second per worker; a test that checks a graceful stop calls
    ``Worker.stop`` itself)."""
    started: list[Worker] = []

    def _start(s: Settings, extra_env: dict[str, str] | None = None) -> Worker:
        w = Worker(s, tmp_path / f"worker-{len(started)}.log", extra_env)
        started.append(w)
        w.wait_ready()
        return w

    yield _start
    for w in started:
        if w.proc.poll() is None:
            w.kill()


@pytest.fixture
async def testweb() -> AsyncIterator[TestWeb]:
    """A small test web with no change process (tests drive changes themselves)."""
    web = TestWeb(generate_world(7, n_hosts=4, pages_per_host=6, time_unit_s=1.0), simulate=False)
    await web.start()
    yield web
    await web.stop()


@pytest.fixture
async def rclient(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """A Redis client on the session's Redis (closed after the test)."""
    client = connect_redis(settings.redis_url)
    yield client
    await client.aclose()
