"""What the agents and the scheduler need of the state, whatever holds it
(:class:`StateStore`), and what the commands, the dashboard and the demo read and do besides
(:class:`AdminStore`).

Two backends implement both: :class:`streams.store.redis_store.Store` (Redis; every
mutation one Lua script of ``streams/store/lua/``, the source of truth in production) and
:class:`streams.store.memory.MemoryStore` (plain dictionaries in this process: the agents'
unit tests, with ``agent.test_context()``).  ``tests/integration/test_store_contract.py``
runs one suite on both (the same operations give the same replies and the same stored
records, byte for byte).

Every mutation takes a batch (the Redis backend sends it in one pipeline) and returns one
reply per item, in order; an item that failed on its own (a bug, a corrupt record) is an
``Exception`` in its place.  A failure of the whole batch that a retry gets past (Redis
down, out of memory, failing over) raises :class:`StoreUnavailable` or a connection error;
every mutation except :meth:`StateStore.issue` is guarded by its event's offset (or its
order id), so the caller runs the whole batch again and nothing is applied twice.

The replies (codes are the Lua scripts' and the tests' vocabulary):

- pages: ``(code, value)``: ``added``, ``updated``, ``deleted``, ``dup-offset``; the page
  value as stored now ('' = none).
- pings: per batch a list of ``(code, value)``, one per ping: ``applied``, ``duplicate``,
  ``before-crawl``, ``within-delay``, ``unknown``, ``dup-offset``.
- outcomes: ``(code, value, cleared)``: ``applied``, ``stale``, ``blocked``,
  ``stale-robots``, ``unknown``, ``conflict``, ``dup-offset``; ``cleared`` 1 when the
  order left flight.
- hosts: ``(code, rate, cleared)``: ``applied``/``dup-offset``, the rate now ('' = the
  default), 1 when the host's blocked set was emptied (another robots.txt).
- control: ``applied`` or ``dup-offset``.
- issue: per host a list of ``(code, payload)``: ``ok`` page value, ``gone``,
  ``in-flight`` "oid|at", ``blocked``, ``no-token`` seconds to the next token,
  ``max-in-flight``.
- expire: 1 if the in-flight mark was the order's and is gone, else 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from streams.errors import RecrawlError
from streams.events.records import MAX_IN_FLIGHT, MAX_RATE_PER_S
from streams.store.host_prior import Sums
from streams.store.page_record import PageState, estimator_part

__all__ = [
    "AdminStore",
    "ControlOp",
    "HostDump",
    "HostInfo",
    "HostOp",
    "IssueBatch",
    "OutcomeOp",
    "PageOp",
    "PingBatch",
    "PingItem",
    "StateStore",
    "StoreUnavailable",
]

#: one ping: offset, url, source, changed_at, received_at, fingerprint (the event's
#: identity, digested by the store: :func:`streams.store.page_record.ping_fingerprint`)
PingItem = tuple[int, str, str, float | None, float, str]


class StoreUnavailable(RecrawlError):
    """The store cannot apply a batch now but will (run the whole batch again)."""


@dataclass(frozen=True, slots=True)
class PageOp:
    """A page event: added or updated (importance, prior change rate), or deleted; its
    host is recorded as one of ``partition``'s (:meth:`StateStore.shard_hosts`)."""

    url: str
    host: str
    importance: float
    prior: float | None
    deleted: bool
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class PingBatch:
    """One host's pings from one (topic, partition), in offset order."""

    host: str
    topic: str
    partition: int
    pings: Sequence[PingItem]


@dataclass(frozen=True, slots=True)
class OutcomeOp:
    """A crawl outcome.  ``new_estimator``: the page's estimator record after this crawl
    ('' or None: keep).  ``expect``: the page value (page record and estimator record) it
    was computed from: nothing is written unless it is still stored (``conflict``).
    ``disallowed``: robots.txt forbade the fetch (``robots_digest``: which one)."""

    url: str
    host: str
    order_id: str | None
    fetched_at: float
    new_estimator: str | None
    topic: str
    partition: int
    offset: int
    expect: str | None = None
    disallowed: bool = False
    robots_digest: str | None = None


@dataclass(frozen=True, slots=True)
class HostOp:
    """A host's capacity from one source (operator, robots, pushback): rate None lifts
    that source's limit; the host's rate is the operator's (else ``default_rate_per_s``)
    lowered by the others'.  A new ``robots_digest`` empties the blocked set."""

    host: str
    rate_per_s: float | None
    max_in_flight: int | None
    topic: str
    partition: int
    offset: int
    source: str = "operator"
    reason: str | None = None
    robots_digest: str | None = None
    default_rate_per_s: float = 1.0


@dataclass(frozen=True, slots=True)
class ControlOp:
    """Global settings (``ControlEvent.fields``) as stored strings."""

    fields: Mapping[str, str]
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class IssueBatch:
    """A tick's ``(url, order_id)`` of one host."""

    host: str
    orders: Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class HostInfo:
    rate_per_s: float | None = None
    max_in_flight: int | None = None
    tokens: float | None = None
    updated_s: float | None = None
    #: source (operator, robots, pushback) -> (rate, reason) as stored
    limits: dict[str, tuple[float | None, str | None]] | None = None
    robots_digest: str | None = None


@dataclass(slots=True)
class HostDump:
    """Everything about one host that a shard needs to schedule it."""

    host: str
    #: url -> stored value (page record, then its estimator record), decoded by the caller
    #: (bytes when read through :attr:`Store.raw`)
    pages: dict[str, str | bytes]
    in_flight: dict[str, tuple[str, float]]
    info: HostInfo
    #: urls its robots.txt disallows
    blocked: set[str] = field(default_factory=set)

    def estimator(self, url: str) -> str | None:
        """The page's estimator record (its value's tail)."""
        return estimator_part(self.pages.get(url))


def _host_info(raw: dict[str, str]) -> HostInfo:
    """A host's stored capacity and bucket; a stored value outside the schema's bounds (or
    unreadable: written before the bounds existed) is read as the nearest bound or unset,
    so that a host can never stop its shard from loading."""
    def f(k: str, hi: float = math.inf) -> float | None:
        try:
            x = float(raw[k]) if k in raw else None
        except ValueError:
            return None
        return None if x is None or math.isnan(x) else max(-hi, min(hi, x))

    rate, mif = f("rate", MAX_RATE_PER_S), f("mif", MAX_IN_FLIGHT)
    limits = {src: (f(f"rate_{src}", MAX_RATE_PER_S), raw.get(f"reason_{src}"))
              for src in ("operator", "robots", "pushback") if f"rate_{src}" in raw}
    return HostInfo(rate if rate is None or rate > 0 else None,
                    None if mif is None else max(0, int(mif)), f("tokens", 1e18), f("ts", 1e18),
                    limits, raw.get("robots"))


def _in_flight(value: str) -> tuple[str, float]:
    oid, _, at = value.partition("|")
    return oid, float(at or 0.0)



@runtime_checkable
class StateStore(Protocol):
    """The state the agents write and the scheduler reads and issues from (module doc)."""

    prefix: str

    @property
    def shards_key(self) -> str:
        """Where the shards' shares and heartbeats live (:mod:`streams.scheduler.heartbeat`
        writes it in Redis)."""
        ...

    #: the epoch of an input partition's log (streams.store.logs.LogEpochs sets it)
    epoch_of: Callable[[str, int], int]

    # -- mutations -------------------------------------------------------------------------
    async def apply_pages(self, ops: Sequence[PageOp]) -> list[Any]: ...

    async def apply_pings(self, batches: Sequence[PingBatch], *, t_delay_s: float
                          ) -> list[Any]: ...

    async def read_pages(self, items: Sequence[tuple[str, str]]) -> list[str | None]:
        """The page value of each ``(host, url)``: what an outcome's compare-and-set
        compares."""
        ...

    async def read_outcome_inputs(self, items: Sequence[tuple[str, str]]
                                  ) -> tuple[list[str | None], dict[str, Sums]]:
        """What the outcomes agent reads before it updates estimators, in one round trip:
        :meth:`read_pages` of ``items``, and each of their hosts' prior sums ``(n, sum
        E[lambda], sum E[log lambda])`` as they are now (:mod:`streams.store.host_prior`;
        ``(0, 0, 0)``: none)."""
        ...

    async def apply_outcomes(self, ops: Sequence[OutcomeOp]) -> list[Any]: ...

    async def apply_hosts(self, ops: Sequence[HostOp]) -> list[Any]: ...

    async def apply_control(self, ops: Sequence[ControlOp]) -> list[Any]: ...

    async def issue(self, batches: Sequence[IssueBatch], *, now_s: float, default_rate: float,
                    default_mif: int, burst: float) -> list[Any]:
        """Not offset-guarded: an exception means the orders' fate is unknown (the caller
        takes them out of flight again with :meth:`expire`)."""
        ...

    async def expire(self, orders: Sequence[tuple[str, str, str]]) -> list[Any]:
        """Clear the in-flight marks of ``(url, host, order_id)`` still theirs."""
        ...

    # -- reads -----------------------------------------------------------------------------
    async def get_pages(self, host: str, urls: Sequence[str]
                        ) -> dict[str, tuple[str | None, ...]]: ...

    async def shard_hosts(self, partition: int) -> list[str]: ...

    async def dump_hosts(self, hosts: Sequence[str]) -> list[HostDump]: ...

    async def blocked_among(self, host: str, urls: Sequence[str]) -> set[str]: ...

    async def get_control(self) -> dict[str, str]: ...

    async def get_shards(self) -> dict[int, dict[str, Any]]: ...

    async def put_shards(self, entries: dict[int, dict[str, Any]]) -> None: ...

    async def server_time(self) -> float: ...

    async def load_scripts(self) -> None:
        """Make the store ready again after it lost its scripts (a no-op where none): the
        scheduler's loop starts with it, e.g. after Redis restarted."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class AdminStore(StateStore, Protocol):
    """:class:`StateStore` and what the operator's commands, the dashboard and the demo read
    and do besides (no agent or scheduler calls these): one page's stored state, a host's
    capacity and counts, the demo's ground truth, deleting every key of the prefix."""

    async def get_page(self, host: str, url: str) -> PageState | None: ...

    async def get_page_raw(self, host: str, url: str) -> str | None: ...

    async def explain_data(self, host: str, url: str) -> dict[str, Any]:
        """What ``recrawl explain`` and ``GET /explain`` show of a page: its stored state,
        estimator record, order in flight, host, and the host's prior sums (``host_prior``,
        as :meth:`read_outcome_inputs` gives them)."""
        ...

    async def get_host(self, host: str) -> HostInfo: ...

    async def host_stats(self, host: str) -> dict[str, Any]: ...

    async def get_truth(self) -> dict[str, Any] | None:
        """The demo's ground truth, if one was stored."""
        ...

    async def delete_all(self) -> int:
        """Delete every key of the store's prefix; the number deleted."""
        ...
