"""Addresses to clients: ``redis+cluster://`` is a Redis Cluster, the rest one node."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from streams.store.redis_conn import cluster_nodes, connect, is_cluster_url


def test_cluster_addresses_are_parsed_into_seed_nodes_and_options() -> None:
    assert is_cluster_url("redis+cluster://127.0.0.1:7000")
    assert is_cluster_url("REDISS+CLUSTER://h:1")
    assert not is_cluster_url("redis://127.0.0.1:6379/0")
    nodes, opts = cluster_nodes("redis+cluster://127.0.0.1:7000,127.0.0.1:7001,localhost")
    assert nodes == [("127.0.0.1", 7000), ("127.0.0.1", 7001), ("localhost", 6379)]
    assert opts == {"ssl": False}
    nodes, opts = cluster_nodes("rediss+cluster://u:p%40ss@127.0.0.1:7000/0?socket_timeout=2")
    assert nodes == [("127.0.0.1", 7000)]
    assert opts == {"ssl": True, "username": "u", "password": "p@ss", "socket_timeout": "2"}


@pytest.mark.parametrize("url, part", [
    ("redis+cluster://127.0.0.1:7000/1", "database 0 only"),
    ("redis+cluster://:7000", "without a host"),
    ("redis://127.0.0.1:6379", "not a Redis Cluster address"),
])
def test_bad_cluster_addresses_say_what_is_wrong(url: str, part: str) -> None:
    with pytest.raises(ValueError, match=part):
        cluster_nodes(url)


async def test_the_address_picks_the_client() -> None:
    one = connect("redis://127.0.0.1:1/0")
    many = connect("redis+cluster://127.0.0.1:1,127.0.0.1:2", decode_responses=True)
    assert isinstance(one, Redis) and not isinstance(one, RedisCluster)
    assert isinstance(many, RedisCluster)
    await one.aclose()
    await many.aclose()


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "rediss://127.0.0.1:1/0",
                                 "unix:///tmp/none.sock"])
def test_one_node_clients_pack_with_hiredis_and_keep_their_connection_class(url: str) -> None:
    from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection

    from streams.store.redis_conn import HiredisPacking

    client = connect(url, decode_responses=True, encoding_errors="surrogateescape")
    cls = client.connection_pool.connection_class
    base = {"redis": Connection, "rediss": SSLConnection, "unix": UnixDomainSocketConnection}[
        url.split(":")[0]]
    assert issubclass(cls, HiredisPacking) and issubclass(cls, base)


def test_hiredis_packing_makes_the_bytes_of_redis_pys_packer() -> None:
    """Every kind of argument the store sends, and what hiredis refuses (surrogate escapes:
    binary records as text; a command of two words; None) through redis-py's own packer."""
    from redis.asyncio.connection import Connection
    from redis.exceptions import DataError

    from streams.store.redis_conn import HiredisPacking

    class Fast(HiredisPacking, Connection):
        pass

    kw = {"decode_responses": True, "encoding_errors": "surrogateescape"}
    fast, ref = Fast(**kw), Connection(**kw)
    record = bytes(range(256)).decode("utf-8", "surrogateescape")
    for args in [
        ("EVALSHA", "0123abcd", 2, "P:{a.example}:pages", "k2", 1.5, -7, 0.1, 1e20, "",
         "https://a.example/é?x=1", b"\x00\xff\r\n"),
        ("HSET", "k", "f", record),
        ("CONFIG GET", "maxmemory"),
        ("SET", "k", "x" * 100_000),
    ]:
        assert b"".join(fast.pack_command(*args)) == b"".join(ref.pack_command(*args)), args
    assert fast.pack_commands([("GET", "a"), ("HGET", "b", record)]) == ref.pack_commands(
        [("GET", "a"), ("HGET", "b", record)])
    with pytest.raises(DataError):
        fast.pack_command("SET", "k", None)


def test_binary_records_are_packed_by_hiredis(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record decoded with ``surrogateescape`` (the outcome script's estimator record)
    does not fall back to redis-py's Python packer, and makes the same bytes."""
    from redis.asyncio.connection import Connection

    from streams.store.redis_conn import HiredisPacking

    class Fast(HiredisPacking, Connection):
        pass

    kw = {"decode_responses": True, "encoding_errors": "surrogateescape"}
    fast, ref = Fast(**kw), Connection(**kw)
    record = bytes(range(256)).decode("utf-8", "surrogateescape")
    args = ("EVALSHA", "0123abcd", 1, "P:{a.example}:pages", record, 1.5, 7, "é")
    want = b"".join(ref.pack_command(*args))

    def python_packer(self: Connection, *a: object) -> list[bytes]:
        raise AssertionError(f"redis-py's packer called for {a!r}")

    monkeypatch.setattr(Connection, "pack_command", python_packer)
    assert b"".join(fast.pack_command(*args)) == want
