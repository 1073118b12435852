"""What the scheduler's parts share: one small object, handed to each part when the
:class:`streams.scheduler.Scheduler` builds them (the :class:`ShardLoader` that writes the
books, the :class:`OrderIssuer` that sends the orders), instead of attributes inherited
from one another."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, cast, overload

from streams.reach import OutageReport
from streams.scheduler.shard import Control, Shard
from streams.settings import Settings
from streams.store import StateStore
from streams.telemetry.decisions import DecisionRing
from streams.telemetry.metrics import Metrics

__all__ = ["SchedulerState", "Shared"]

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class SchedulerState:
    """The state the scheduler's parts read and write: the local shards, the store, the
    settings and the budget switches (``control``, re-read from Redis by the scheduler),
    the telemetry, the clock and the stop flag."""

    settings: Settings
    store: StateStore
    metrics: Metrics
    #: the decisions ring (``recrawl explain``)
    decisions: DecisionRing
    #: the wall clock (seconds since the epoch): orders' ``issued_at``, time-outs, ages
    clock: Callable[[], float]
    control: Control
    #: Redis outages, reported with the address every ``outage_report_s``
    outage: OutageReport
    #: partition -> its shard, for the partitions this worker owns
    shards: dict[int, Shard] = field(default_factory=dict)
    #: set when the worker stops: retries of in-flight clears give up
    stopping: bool = False


class Shared(Generic[T]):
    """An attribute of the :class:`streams.scheduler.Scheduler` kept in its
    :class:`SchedulerState` (``scheduler.control`` reads and sets ``scheduler.state.control``),
    so that the scheduler and its parts see one value."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Shared[T]: ...
    @overload
    def __get__(self, obj: HasState, objtype: type | None = None) -> T: ...
    def __get__(self, obj: HasState | None, objtype: type | None = None) -> T | Shared[T]:
        if obj is None:
            return self
        return cast(T, getattr(obj.state, self.name))

    def __set__(self, obj: HasState, value: T) -> None:
        setattr(obj.state, self.name, value)


class HasState(Protocol):
    state: SchedulerState
