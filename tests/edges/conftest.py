"""Fixtures of the edges' integration tests: a small test web, a Redis client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from streams.redis_conn import connect as connect_redis
from streams.settings import Settings
from streams.testweb.server import TestWeb
from streams.testweb.world import generate_world


@pytest.fixture
async def testweb() -> AsyncIterator[TestWeb]:
    """A small test web with no change process (tests drive changes themselves)."""
    web = TestWeb(generate_world(7, n_hosts=4, pages_per_host=6, time_unit_s=1.0), simulate=False)
    await web.start()
    yield web
    await web.stop()


@pytest.fixture
async def rclient(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    client = connect_redis(settings.redis_url)
    yield client
    await client.aclose()
