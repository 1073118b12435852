"""The store contract's cases (``tests/store_contract_cases.py``) on the in-memory backend
(:class:`streams.store.MemoryStore`): no service; the same cases run on Redis under
``tests/integration/test_store_contract.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from store_contract_cases import *  # noqa: F403 (the shared cases, collected here)

from streams.store import AdminStore, MemoryStore


@pytest.fixture
async def store() -> AsyncIterator[AdminStore]:
    s: AdminStore = MemoryStore()
    assert isinstance(s, AdminStore)
    yield s
    await s.delete_all()
    await s.close()
