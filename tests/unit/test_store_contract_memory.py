"""The store contract's cases (``tests/store_contract_cases.py``) on the in-memory backend
(:class:`streams.store.MemoryStore`): no service; the same cases run on Redis under
``tests/integration/test_store_contract.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from store_contract_cases import (
    test_a_host_of_many_pages,
    test_control_fields_once_per_offset,
    test_host_rate_is_the_operators_lowered_by_the_others,
    test_issue_tokens_flight_and_expire,
    test_outcome_codes_and_flight,
    test_pages_added_updated_deleted_and_redelivered,
    test_ping_codes,
)

from streams.store import MemoryStore, StateStore

__all__ = [
    "test_a_host_of_many_pages",
    "test_control_fields_once_per_offset",
    "test_host_rate_is_the_operators_lowered_by_the_others",
    "test_issue_tokens_flight_and_expire",
    "test_outcome_codes_and_flight",
    "test_pages_added_updated_deleted_and_redelivered",
    "test_ping_codes",
]


@pytest.fixture
async def store() -> AsyncIterator[StateStore]:
    s: StateStore = MemoryStore()
    assert isinstance(s, StateStore)
    yield s
    await s.delete_all()
    await s.close()
