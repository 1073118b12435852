"""The in-memory backend of :class:`streams.store.StateStore`: the operations of the Lua
scripts of ``streams/store/lua/`` over dictionaries, for the agents' unit tests
(``agent.test_context()``, no Redis) and tools that need no shared state.  Their rules are
not written again here: a ping's verdict is :func:`models.decision.pings.ping_verdict`, a
host's bucket :func:`models.decision.hosts.refill` and :func:`~models.decision.hosts.admit`,
its rate :func:`~models.decision.hosts.binding_rate`
(the scripts' twins of those rules are checked against them in
``tests/integration/test_lua_rules.py`` and ``test_ping_rule_lua.py``).

It stores exactly what the Redis backend stores (the same page records, byte for byte, the
same host fields as strings) and gives the same replies:
``tests/integration/test_store_contract.py`` runs one
suite on both and compares them operation by operation.  One process only: nothing is
shared between workers, nothing survives a restart.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from models.decision.hosts import NO_TOKEN, admit, binding_rate, refill
from models.decision.pings import APPLIED, VERDICTS, ping_verdict
from streams.events.records import SOURCES
from streams.store.host_prior import Sums, swapped
from streams.store.page_record import (
    N_SEEN,
    PageState,
    estimator_part,
    ping_fingerprint,
    record_bytes,
)
from streams.store.protocol import (
    ControlOp,
    HostDump,
    HostInfo,
    HostOp,
    IssueBatch,
    OutcomeOp,
    PageOp,
    PingBatch,
    _host_info,
    _in_flight,
)

__all__ = ["MemoryStore"]

_RATE_SOURCES = ("operator", "robots", "pushback")


def _value(state: PageState, rest: str | None) -> str:
    """A page value as the scripts' ``dump`` writes it, as the Redis backend reads it
    (``surrogateescape`` text)."""
    return state.encode(rest or None).decode("utf-8", "surrogateescape")


def _g14(x: float) -> str:
    """A number as Lua's ``tostring`` writes it (``%.14g``)."""
    return f"{x:.14g}"


def _num(s: str | None) -> float | None:
    """Lua's ``tonumber``: None when absent or not a number."""
    if s is None:
        return None
    try:
        return float(s)
    except ValueError:
        return None


def _each(fn: Callable[..., Any], items: Sequence[Any], *args: Any) -> list[Any]:
    """One reply per item; an item that raises gets its exception in its place (as a Lua
    script's error is that call's reply in a pipeline; what it wrote before stays)."""
    out: list[Any] = []
    for item in items:
        try:
            out.append(fn(item, *args))
        except Exception as exc:  # the reply, as Redis gives it
            out.append(exc)
    return out


class MemoryStore:
    """Every key of the Redis layout (:mod:`streams.store.redis_store`) as a dictionary."""

    def __init__(self, prefix: str = "recrawl", clock: Callable[[], float] = time.time) -> None:
        self.prefix = prefix
        self.clock = clock
        self.epoch_of: Callable[[str, int], int] = lambda _topic, _partition: 0
        self.pages: dict[str, dict[str, str]] = {}
        self.inflight: dict[str, dict[str, str]] = {}
        self.hosts: dict[str, dict[str, str]] = {}
        #: per host the prior sums ``(n, mean, log)`` (``P:{host}:prior``)
        self.priors: dict[str, tuple[float, float, float]] = {}
        self.blocked: dict[str, set[str]] = {}
        self.offsets: dict[str, dict[str, str]] = {}
        self.shards: dict[int, set[str]] = {}
        self.control: dict[str, str] = {}
        self.control_offsets: dict[str, str] = {}
        self.sched_shards: dict[int, str] = {}
        self.truth: dict[str, Any] | None = None

    @property
    def shards_key(self) -> str:
        return f"{self.prefix}:sched:shards"

    # -- helpers ---------------------------------------------------------------------------
    def offset_field(self, topic: str, partition: int) -> str:
        e = self.epoch_of(topic, partition)
        return f"{topic}:{partition}" if e == 0 else f"{topic}:{partition}~{e}"

    @staticmethod
    def _applied(offsets: dict[str, str], field: str, offset: int) -> bool:
        """lib.lua's ``applied``: the stored offset is at or past this one."""
        last = offsets.get(field)
        return last is not None and float(last) >= offset

    def _guard(self, offsets: dict[str, str], topic: str, partition: int, offset: int) -> bool:
        """True when already applied; else records the offset (the scripts' first step)."""
        field = self.offset_field(topic, partition)
        if self._applied(offsets, field, offset):
            return True
        offsets[field] = str(offset)
        return False

    @staticmethod
    def _of(table: dict[Any, Any], key: Any, kind: type) -> Any:
        got = table.get(key)
        if got is None:
            got = table[key] = kind()
        return got

    # -- mutations -------------------------------------------------------------------------
    async def apply_pages(self, ops: Sequence[PageOp]) -> list[Any]:
        return _each(self._page, ops)

    def _page(self, op: PageOp) -> Any:  # apply_page.lua
        pages = self._of(self.pages, op.host, dict)
        offsets = self._of(self.offsets, op.host, dict)
        self._of(self.shards, op.partition, set).add(op.host)
        if self._guard(offsets, op.topic, op.partition, op.offset):
            return ("dup-offset", pages.get(op.url, ""))
        if op.deleted:
            gone = pages.get(op.url)
            if gone:
                self._swap_prior(op.host, estimator_part(gone), None)
            for table in (self.pages, self.inflight):
                table.get(op.host, {}).pop(op.url, None)
            return ("deleted", "")
        cur = pages.get(op.url)
        st = PageState.decode(cur) if cur else PageState()
        st = replace(st, importance=float(op.importance),
                     prior_change_rate_per_s=(st.prior_change_rate_per_s if op.prior is None
                                              else float(op.prior)))
        v = pages[op.url] = _value(st, estimator_part(cur))
        return ("updated" if cur else "added", v)

    async def apply_pings(self, batches: Sequence[PingBatch], *, t_delay_s: float
                          ) -> list[Any]:
        return _each(self._pings, batches, t_delay_s)

    def _pings(self, b: PingBatch, t_delay: float) -> list[tuple[str, str]]:  # apply_pings.lua
        pages = self._of(self.pages, b.host, dict)
        offsets = self._of(self.offsets, b.host, dict)
        field = self.offset_field(b.topic, b.partition)
        done = _num(offsets.get(field))
        done = -1 if done is None else done
        top: int | None = None
        out: list[tuple[str, str]] = []
        for offset, url, source, changed_at, received_at, fingerprint in b.pings:
            cur = pages.get(url)
            if offset <= done:
                out.append(("dup-offset", cur or ""))
                continue
            if top is None or offset > top:
                top = offset
            if not cur:
                out.append(("unknown", ""))
                continue
            st = PageState.decode(cur)
            fp = ping_fingerprint(fingerprint)
            if fp in st.seen:
                out.append(("duplicate", cur))
                continue
            seen = (fp, *st.seen[: N_SEEN - 1])
            last = st.last_crawl_s  # stored 0: never crawled
            verdict = ping_verdict("live", t_delay, last if last > 0 else -math.inf,
                                   received_at, math.nan if changed_at is None else changed_at)
            code, signals = VERDICTS[verdict], st.signals
            if verdict == APPLIED:
                n = SOURCES.index(source)
                signals = tuple(c + (k == n) for k, c in enumerate(st.signals))
            v = pages[url] = _value(replace(st, signals=signals, seen=seen), estimator_part(cur))
            out.append((code, v))
        if top is not None and top > done:
            offsets[field] = str(top)
        return out

    async def read_pages(self, items: Sequence[tuple[str, str]]) -> list[str | None]:
        return [self.pages.get(h, {}).get(u) or None for h, u in items]

    def _swap_prior(self, host: str, old: str | None, new: str | None) -> None:  # lib.lua
        sums = swapped(self.priors.get(host, (0.0, 0.0, 0.0)), old, new)
        if sums is not None:
            self.priors[host] = sums

    async def read_outcome_inputs(self, items: Sequence[tuple[str, str]]
                                  ) -> tuple[list[str | None], dict[str, Sums]]:
        return (await self.read_pages(items),
                {h: self.priors.get(h, (0.0, 0.0, 0.0)) for h, _u in items})

    async def apply_outcomes(self, ops: Sequence[OutcomeOp]) -> list[Any]:
        return _each(self._outcome, ops)

    def _outcome(self, op: OutcomeOp) -> Any:  # apply_outcome.lua
        pages = self._of(self.pages, op.host, dict)
        offsets = self._of(self.offsets, op.host, dict)
        field = self.offset_field(op.topic, op.partition)
        if self._applied(offsets, field, op.offset):
            return ("dup-offset", pages.get(op.url, ""), 0)
        cur = pages.get(op.url)
        if op.expect is not None and (cur or "") != op.expect:
            return ("conflict", cur or "", 0)
        offsets[field] = str(op.offset)
        if not cur:
            return ("unknown", "", 0)
        st = PageState.decode(cur)
        code, v = "stale", cur
        fetched = float(f"{op.fetched_at:.3f}")
        if op.disallowed:
            robots = self.hosts.get(op.host, {}).get("robots")
            if robots is None or robots == (op.robots_digest or ""):
                self._of(self.blocked, op.host, set).add(op.url)
                code = "blocked"
            else:
                code = "stale-robots"
        elif fetched > st.last_crawl_s:
            code = "applied"
            rest = old = estimator_part(cur)
            if op.new_estimator:
                rest = op.new_estimator
            v = pages[op.url] = _value(st.after_crawl(fetched), rest)
            if op.new_estimator:
                self._swap_prior(op.host, old, op.new_estimator)
        cleared = 0
        flights = self.inflight.get(op.host, {})
        fl = flights.get(op.url)
        if fl is not None and (not op.order_id or ("|" in fl
                                                   and fl.partition("|")[0] == op.order_id)):
            del flights[op.url]
            cleared = 1
        return (code, v, cleared)

    async def apply_hosts(self, ops: Sequence[HostOp]) -> list[Any]:
        return _each(self._host, ops)

    def _host(self, op: HostOp) -> Any:  # apply_host.lua
        h = self._of(self.hosts, op.host, dict)
        offsets = self._of(self.offsets, op.host, dict)
        self._of(self.shards, op.partition, set).add(op.host)
        if self._guard(offsets, op.topic, op.partition, op.offset):
            return ("dup-offset", h.get("rate", ""), 0)
        if "rate" in h and not any(f"rate_{s}" in h for s in _RATE_SOURCES):
            h["rate_operator"] = h["rate"]  # written before sources existed
        src = op.source
        if op.rate_per_s is None:
            h.pop(f"rate_{src}", None)
            h.pop(f"reason_{src}", None)
        else:
            h[f"rate_{src}"] = repr(float(op.rate_per_s))
            if op.reason:
                h[f"reason_{src}"] = op.reason
            else:
                h.pop(f"reason_{src}", None)
        if src == "operator":
            if op.max_in_flight is None:
                h.pop("mif", None)
            else:
                h["mif"] = str(op.max_in_flight)
        texts = [h.get(f"rate_{s}") for s in _RATE_SOURCES]
        which = binding_rate([_num(t) for t in texts], float(op.default_rate_per_s))
        best_s = None if which is None else texts[which]
        if best_s is not None:
            h["rate"] = best_s
        else:
            h.pop("rate", None)
        cleared = 0
        if op.robots_digest and h.get("robots") != op.robots_digest:
            h["robots"] = op.robots_digest
            self.blocked.pop(op.host, None)
            cleared = 1
        return ("applied", best_s or "", cleared)

    async def apply_control(self, ops: Sequence[ControlOp]) -> list[Any]:
        out = []
        for op in ops:  # apply_control.lua
            if self._guard(self.control_offsets, op.topic, op.partition, op.offset):
                out.append("dup-offset")
                continue
            self.control.update(op.fields)
            out.append("applied")
        return out

    async def issue(self, batches: Sequence[IssueBatch], *, now_s: float, default_rate: float,
                    default_mif: int, burst: float) -> list[Any]:
        return _each(self._issue, batches, now_s, default_rate, default_mif, burst)

    def _issue(self, b: IssueBatch, now: float, default_rate: float, default_mif: int,
               burst: float) -> list[tuple[str, str]]:  # issue.lua
        h = self.hosts.get(b.host, {})
        pages = self.pages.get(b.host, {})
        flights = self._of(self.inflight, b.host, dict)
        blocked = self.blocked.get(b.host, set())
        rate = _num(h.get("rate"))
        rate = default_rate if rate is None else rate
        mif = _num(h.get("mif"))
        mif = default_mif if mif is None else mif
        tokens = refill(_num(h.get("tokens")), _num(h.get("ts")), now, rate, burst)
        nfl = len(flights)
        out: list[tuple[str, str]] = []
        took = False
        for url, oid in b.orders:
            page = pages.get(url)
            fl = flights.get(url) if page else None
            if not page:
                out.append(("gone", ""))
            elif fl is not None:
                out.append(("in-flight", fl))
            elif url in blocked:
                out.append(("blocked", ""))
            elif (why := admit(tokens, nfl, int(mif))) == NO_TOKEN:
                out.append((why, _g14((1 - tokens) / rate) if rate else "inf"))
            elif why is not None:
                out.append((why, ""))
            else:
                tokens, nfl, took = tokens - 1, nfl + 1, True
                flights[url] = f"{oid}|{now!r}"
                out.append(("ok", page))
        if took:
            hw = self._of(self.hosts, b.host, dict)
            hw["tokens"], hw["ts"] = _g14(tokens), repr(now)
        return out

    async def expire(self, orders: Sequence[tuple[str, str, str]]) -> list[Any]:
        out = []
        for url, host, oid in orders:  # expire.lua
            flights = self.inflight.get(host, {})
            fl = flights.get(url)
            if fl is None or "|" not in fl or fl.partition("|")[0] != oid:
                out.append(0)
                continue
            del flights[url]
            out.append(1)
        return out

    # -- reads -----------------------------------------------------------------------------
    async def get_page(self, host: str, url: str) -> PageState | None:
        v = self.pages.get(host, {}).get(url)
        return PageState.decode(v) if v else None

    async def get_page_raw(self, host: str, url: str) -> str | None:
        return self.pages.get(host, {}).get(url) or None

    async def get_pages(self, host: str, urls: Sequence[str]
                        ) -> dict[str, tuple[str | None, ...]]:
        pages, fl = (t.get(host, {}) for t in (self.pages, self.inflight))
        return {u: (pages.get(u), fl.get(u), estimator_part(pages.get(u))) for u in urls}

    async def explain_data(self, host: str, url: str) -> dict[str, Any]:
        page = self.pages.get(host, {}).get(url)
        fl = self.inflight.get(host, {}).get(url)
        return {
            "page": PageState.decode(page) if page else None,
            "in_flight": _in_flight(fl) if fl else None,
            "estimator": estimator_part(page),
            "host": _host_info(self.hosts.get(host, {})),
            "blocked": url in self.blocked.get(host, set()),
            "host_prior": self.priors.get(host, (0.0, 0.0, 0.0)),
        }

    async def get_host(self, host: str) -> HostInfo:
        return _host_info(self.hosts.get(host, {}))

    async def host_stats(self, host: str) -> dict[str, Any]:
        return {"info": _host_info(self.hosts.get(host, {})),
                "pages": len(self.pages.get(host, {})),
                "in_flight": dict(self.inflight.get(host, {})),
                "blocked": len(self.blocked.get(host, set()))}

    async def shard_hosts(self, partition: int) -> list[str]:
        return sorted(self.shards.get(partition, set()))

    async def dump_hosts(self, hosts: Sequence[str]) -> list[HostDump]:
        """As the Redis backend's raw client reads them: page values as bytes."""
        return [HostDump(
            h, {u: record_bytes(v) for u, v in self.pages.get(h, {}).items()},
            {u: _in_flight(v) for u, v in self.inflight.get(h, {}).items()},
            _host_info(self.hosts.get(h, {})),
            set(self.blocked.get(h, set()))) for h in hosts]

    async def blocked_among(self, host: str, urls: Sequence[str]) -> set[str]:
        b = self.blocked.get(host, set())
        return {u for u in urls if u in b}

    async def get_control(self) -> dict[str, str]:
        return dict(self.control)

    async def get_shards(self) -> dict[int, dict[str, Any]]:
        return {k: json.loads(v) for k, v in self.sched_shards.items()}

    async def put_shards(self, entries: dict[int, dict[str, Any]]) -> None:
        self.sched_shards.update({k: json.dumps(v) for k, v in entries.items()})

    async def get_truth(self) -> dict[str, Any] | None:
        return None if self.truth is None else dict(self.truth)

    async def put_truth(self, truth: dict[str, Any]) -> None:
        """What :func:`streams.store.redis_store.put_truth` writes to Redis (no expiry here)."""
        self.truth = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                      for k, v in truth.items()}

    async def server_time(self) -> float:
        return self.clock()

    async def load_scripts(self) -> None:
        """Nothing to load."""

    async def delete_all(self) -> int:
        tables: list[dict[Any, Any]] = [self.pages, self.inflight, self.hosts,
                                        self.blocked, self.offsets, self.shards, self.priors]
        n = sum(len(t) for t in tables)
        self.__init__(self.prefix, self.clock)  # type: ignore[misc]
        return n

    async def close(self) -> None:
        """Nothing to close."""

