"""The state behind the agents and the scheduler: :class:`StateStore` and its backends,
Redis (:class:`streams.store.redis_store.Store`, production) and memory (:class:`MemoryStore`,
tests)."""

from streams.store.memory import MemoryStore
from streams.store.protocol import (
    ControlOp,
    HostOp,
    IssueBatch,
    OutcomeOp,
    PageOp,
    PingBatch,
    PingItem,
    StateStore,
    StoreUnavailable,
)

__all__ = [
    "ControlOp",
    "HostOp",
    "IssueBatch",
    "MemoryStore",
    "OutcomeOp",
    "PageOp",
    "PingBatch",
    "PingItem",
    "StateStore",
    "StoreUnavailable",
]
