"""One place that turns a Redis address into a client: one node or a Redis Cluster.

``redis://``, ``rediss://``, ``unix://`` are one Redis node (``redis.asyncio.Redis``).
``redis+cluster://host:port[,host:port...]`` (``rediss+cluster://`` with TLS) is a Redis
Cluster: the listed nodes are seeds, redis-py's cluster client
(``redis.asyncio.cluster.RedisCluster``) discovers the others and routes every command to
the master of its key's slot.  ``recrawl infra up --redis-cluster N`` writes such an address
into ``<home>/stack.json`` (``recrawl infra status`` shows it); set ``RECRAWL_REDIS_URL``
to one for a cluster of your own.

What holds on both (and why the state works on a cluster):

- every key names its host (or partition) in a hash tag ``{...}``
  (:mod:`streams.store.redis_store`), so each Lua script's keys share one slot;
- a ``pipeline(transaction=False)`` is split per node by the cluster client and its
  results come back in the order queued;
- ``SCRIPT LOAD`` goes to every master, so a NOSCRIPT reply (a node restarted or a slot
  moved to a node that never saw the script) is cured by loading the scripts again.

There is one database on a cluster (0); a ``/N`` path is refused.

A one-node client packs its commands with hiredis's C packer (:class:`HiredisPacking`:
the same bytes as redis-py's Python packer, which took 14-21% of the agents' samples), and
:func:`run_commands` reads a batch's replies straight off the connection's hiredis reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import hiredis
import redis
import redis.asyncio as aioredis
from redis._parsers.hiredis import NOT_ENOUGH_DATA, _AsyncHiredisParser
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import ClusterNode, RedisCluster

__all__ = [
    "CLUSTER_SCHEMES",
    "AsyncRedis",
    "HiredisPacking",
    "SyncRedis",
    "cluster_nodes",
    "connect",
    "connect_sync",
    "is_cluster_url",
    "run_commands",
]

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

#: either client; both offer the commands, pipelines and scripts recrawl uses
AsyncRedis = aioredis.Redis | AsyncRedisCluster
SyncRedis = redis.Redis | RedisCluster


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def cluster_nodes(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """Seed nodes and client options of a cluster address; ``ValueError`` names what is
    wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in CLUSTER_SCHEMES:
        raise ValueError(f"not a Redis Cluster address (redis+cluster://host:port,...): {url!r}")
    netloc, _, tail = rest.partition("/")
    path, _, query = tail.partition("?")
    if path not in ("", "0"):
        raise ValueError(f"a Redis Cluster has database 0 only, the address names /{path}: {url!r}")
    opts: dict[str, Any] = {"ssl": CLUSTER_SCHEMES[scheme.lower()] == "rediss"}
    creds, at, hosts = netloc.rpartition("@")
    if at:
        user, colon, password = creds.partition(":")
        opts["username"] = unquote(user) or None
        opts["password"] = unquote(password) if colon else None
    nodes = []
    for hp in hosts.split(","):
        parts = urlsplit(f"//{hp}")
        if not parts.hostname:
            raise ValueError(f"a node without a host in {url!r}")
        nodes.append((parts.hostname, parts.port or 6379))
    for k, v in parse_qsl(query):
        opts[k] = v
    return nodes, opts


class HiredisPacking:
    """A connection mixin: ``pack_command`` by ``hiredis.pack_command`` (C), the bytes
    redis-py's own packer makes (``tests/unit/test_redis_conn.py``).  A ``str`` that hiredis
    cannot encode (a binary record decoded with ``surrogateescape``) is turned into its bytes
    as the client's encoder would, then packed by hiredis (through redis-py's packer, 18%
    of the outcomes' time in process under cProfile: the outcome script's estimator
    record).  The rest of what hiredis refuses goes to redis-py's packer: a command name
    of several words (``CONFIG GET``), a value redis-py refuses (None)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str) and " " not in args[0]:
            try:
                return [hiredis.pack_command(args)]
            except UnicodeEncodeError:
                # a binary record as text: its bytes, as the client's encoder makes them
                # (``str.encode(encoding, encoding_errors)``), then hiredis again
                enc = self.encoder  # type: ignore[attr-defined]
                raw: Any = tuple(a.encode(enc.encoding, enc.encoding_errors)
                                 if isinstance(a, str) else a for a in args)
                try:
                    return [hiredis.pack_command(raw)]
                except (UnicodeEncodeError, TypeError):
                    pass
            except TypeError:
                pass
        packed: list[bytes] = super().pack_command(*args)  # type: ignore[misc]
        return packed


def with_hiredis_packing(client: aioredis.Redis) -> aioredis.Redis:
    """``client`` with its pool's new connections packing through :class:`HiredisPacking`
    (its connection class kept: TCP, TLS or a Unix socket)."""
    pool = client.connection_pool
    cls = pool.connection_class
    if not issubclass(cls, HiredisPacking):
        pool.connection_class = type(f"Hiredis{cls.__name__}", (HiredisPacking, cls), {})
    return client


#: hiredis's type of a RESP3 push message (hiredis >= 3.2)
_PUSH: Any = getattr(hiredis, "PushNotification", None)


async def run_commands(client: AsyncRedis, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """The replies to ``commands`` sent in one write, an error reply as its exception object
    in its place (as ``pipeline(transaction=False).execute(raise_on_error=False)``; a
    connection-level error reply such as ``LOADING`` raises, as there).

    On one node whose connection parses with hiredis (RESP2 or RESP3) the commands are
    packed by the connection (:class:`HiredisPacking`), written at once, and the replies
    taken straight from its ``hiredis.Reader``, as they come (no response callbacks: the
    callers send scripts and ``SADD``, whose replies have none).  redis-py's pipeline does
    the same I/O with more Python per command: staging, its HIMPORT preflight, three layers
    of response parsing (about 10 against 3.5 us of client CPU per ``SET`` in batches of
    500: ``benchmarks/bench_run_commands.py``, docs/benchmarks.md).  An error or a
    cancellation while the replies are read drops the connection (no reply is left on it
    for the next user), as redis-py does.  A cluster
    client, or a connection without hiredis: a redis-py pipeline (it routes by slot)."""
    if isinstance(client, aioredis.Redis):
        pool = client.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            parser = conn._parser
            if isinstance(parser, _AsyncHiredisParser) and parser._reader is not None:
                return await _send_and_read(conn, parser, commands)
        finally:
            await pool.release(conn)
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return list(await pipe.execute(raise_on_error=False))


async def _send_and_read(conn: Any, parser: _AsyncHiredisParser,
                         commands: Sequence[Sequence[Any]]) -> list[Any]:
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        reader: Any = parser._reader
        out: list[Any] = []
        n = len(commands)
        while len(out) < n:
            reply = reader.gets()
            if reply is NOT_ENOUGH_DATA:
                await parser.read_from_socket()  # type: ignore[no-untyped-call]
                continue
            if isinstance(reply, redis.ConnectionError):
                raise reply
            if _PUSH is not None and isinstance(reply, _PUSH):
                continue  # RESP3 out-of-band data (none is asked for here): not a reply
            out.append(reply)
        return out
    except BaseException:
        await conn.disconnect(nowait=True)
        raise


def connect(url: str, **kwargs: Any) -> AsyncRedis:
    """An asyncio client for ``url`` (one node or a cluster); ``kwargs`` as redis-py's
    (``decode_responses=True`` ...)."""
    if not is_cluster_url(url):
        return with_hiredis_packing(aioredis.from_url(url, **kwargs))
    nodes, opts = cluster_nodes(url)
    return AsyncRedisCluster(
        startup_nodes=[AsyncClusterNode(h, p) for h, p in nodes], **{**opts, **kwargs}
    )


def connect_sync(url: str, **kwargs: Any) -> SyncRedis:
    """The blocking client for ``url`` (tests, benchmarks, tools)."""
    if not is_cluster_url(url):
        return redis.Redis.from_url(url, **kwargs)
    nodes, opts = cluster_nodes(url)
    seeds = [ClusterNode(h, p) for h, p in nodes]  # type: ignore[no-untyped-call]
    return RedisCluster(startup_nodes=seeds, **{**opts, **kwargs})
