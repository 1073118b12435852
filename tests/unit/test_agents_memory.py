"""The agents' logic through ``agent.test_context()`` on the in-memory store: no broker,
no Redis (the same cases run on Redis in ``tests/integration/test_agents_redis.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agents_harness import CASES, Harness

from streams.store import MemoryStore


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
async def test_agents_on_memory(case: Callable[[Any], Awaitable[None]]) -> None:
    await case(lambda **kw: Harness(MemoryStore(), **kw))
