"""``run_commands``: a batch of commands on one connection, the replies read straight off
its hiredis reader (``streams/store/redis_conn.py``), against the real Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import NoScriptError, ResponseError

from streams.store.redis_conn import connect, run_commands


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    """The store's batch client: decoded replies, surrogate escapes for binary values."""
    c = connect(redis_url, decode_responses=True, encoding_errors="surrogateescape",
                socket_timeout=None)
    assert isinstance(c, Redis)
    yield c
    await c.aclose()


async def test_replies_are_a_pipelines_with_errors_in_their_place(client: Redis) -> None:
    k = f"rc:{uuid.uuid4().hex}"
    binary = bytes(range(256)).decode("utf-8", "surrogateescape")
    commands = [
        ("SET", f"{k}:s", binary),
        ("GET", f"{k}:s"),
        ("SADD", f"{k}:set", "a", "b", "a"),
        ("EVAL", "return {KEYS[1], ARGV[1], 7, redis.call('INCR', KEYS[1])}", 1, f"{k}:n",
         "arg"),
        ("EVALSHA", "0" * 40, 0),  # NOSCRIPT
        ("INCR", f"{k}:set"),  # WRONGTYPE
        ("GET", f"{k}:none"),
    ]
    got = await run_commands(client, commands)
    await client.delete(f"{k}:n")
    pipe = client.pipeline(transaction=False)
    for c in commands:
        pipe.execute_command(*c)
    want = await pipe.execute(raise_on_error=False)
    assert len(got) == len(want) == len(commands)
    assert got[1] == want[1] == binary  # byte for byte through surrogateescape
    assert got[2] == 2 and want[2] == 0  # the second SADD adds nothing
    assert got[3] == [f"{k}:n", "arg", 7, 1] and want[3] == [f"{k}:n", "arg", 7, 1]
    for i, cls in ((4, NoScriptError), (5, ResponseError)):
        assert type(got[i]) is type(want[i]) and isinstance(got[i], cls)
        assert str(got[i]) == str(want[i])
    assert got[6] is None and want[6] is None
    await client.delete(f"{k}:s", f"{k}:set", f"{k}:n")


async def test_replies_longer_than_one_socket_read(client: Redis) -> None:
    k = f"rc:{uuid.uuid4().hex}"
    values = [f"{i:06d}" * 200 for i in range(2000)]  # 2.4 MB of replies
    assert await run_commands(client, [("SET", f"{k}:{i}", v) for i, v in enumerate(values)]
                              ) == ["OK"] * 2000
    assert await run_commands(client, [("GET", f"{k}:{i}") for i in range(2000)]) == values
    await client.delete(*(f"{k}:{i}" for i in range(2000)))


async def test_a_cancelled_read_leaves_no_reply_for_the_next_batch(client: Redis,
                                                                   redis_url: str) -> None:
    """A batch cut short (the store's time-out) drops its connection: a reply that comes
    later is not read as the next batch's."""
    k = f"rc:{uuid.uuid4().hex}"
    await client.set(f"{k}:v", "value")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await run_commands(client, [("BLPOP", f"{k}:list", 2)])
    other = connect(redis_url, decode_responses=True)
    await other.rpush(f"{k}:list", "late")  # what the cut BLPOP would now answer
    await other.aclose()
    await asyncio.sleep(0.1)
    assert await run_commands(client, [("GET", f"{k}:v"), ("GET", f"{k}:v")]) == ["value"] * 2
    await client.delete(f"{k}:v", f"{k}:list")
