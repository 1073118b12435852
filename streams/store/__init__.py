"""The state behind the agents and the scheduler: :class:`StateStore` (and
:class:`AdminStore`, the commands', dashboard's and demo's calls besides) and its backends,
Redis (:class:`streams.store.redis_store.Store`, production) and memory (:class:`MemoryStore`,
tests)."""

from streams.store.memory import MemoryStore
from streams.store.protocol import (
    AdminStore,
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
    "AdminStore",
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
