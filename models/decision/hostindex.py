"""Exact greedy pick of crawled pages under per-host room: a host x page index.

Algorithm 1 of Busa-Fekete et al. (paper 004) orders the page of largest crawl value
``V(tau_eff(t))``; the service orders at most ``room(h)`` pages of host ``h`` per tick (its
token bucket, :mod:`models.decision.hosts`).  The greedy under those caps (pages in value
order, a page taken while its host has room left) equals the top ``k`` of the union of each
host's own top ``min(room(h), k)`` pages, so the index works host by host:

* **Per host, pages sorted by an upper bound.**  ``V`` increases with ``tau_eff`` (Lemma 2
  of paper 004), so a page's value at a time ``T_h`` bounds its value at every ``t <= T_h``
  while its origin and parameters are unchanged.  A host's *refresh* computes its pages'
  values at ``T_h = now + window`` (one vectorised call) and sorts them; its exact top at
  ``now <= T_h`` is then found by evaluating pages in bound order until the ``c``-th exact
  value beats the next bound (usually one or two pages: the values move little within a
  window).  A page re-keyed since (a crawl ends, a ping moves its origin back, new
  parameters) goes to the host's *extras* with its own bound at ``T_h``; a page ordered (in
  flight) or removed is skipped (its bound stays valid: an overestimate).
* **Hosts in a heap by their bound.**  Only hosts with room are in it: a host found without
  room is *parked* (the caller's timer heap, :meth:`models.decision.hosts.HostBuckets.park`)
  and comes back by :meth:`HostIndex.unpark`.  A query pops hosts in decreasing bound order
  and stops when the next bound is below the ``k``-th exact value found.  Bounds expire at
  ``T_h``; the expired hosts (in a timer heap) are refreshed before the query, each at its
  own time (a per-host jitter of the window spreads them), so no tick re-evaluates every page.

A tick costs ``O(sum over examined hosts of the pages evaluated + k log H)`` plus the
refreshes that fall due; per-page state is in numpy arrays.  In a
:class:`models.decision.core.ShardBook` the index is bound to the book's page table
(:meth:`HostIndex.bind`): it keeps its pages by the table's slots and reads the table's
parameter columns, so a page costs the index ~29 bytes of its own arrays (tie rank,
version, host code, active flag) and its host's order entries.  Ties between exactly equal
values go to the page (re)inserted first, as in :class:`models.index.CrawlIndex`.

Pure: no clock, no I/O; time is the ``now`` argument.

Over 600 lines on purpose: :class:`HostIndex` is one data structure whose refresh, host
heap, parking and walk all read and write the same per-page and per-host arrays; split
into modules they would share private state across them.

References
----------
R. Busa-Fekete, J. Zimmert, A. György et al., "A Scalable Crawling Algorithm Utilizing
Noisy Change-Indicating Signals" (paper 004): Algorithm 1, Lemma 2 (V increasing).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from models._index_store import checked_columns, new_slot, new_slots, upsert_each

__all__ = ["HostIndex", "HostIndexStats"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
#: a block of a host's order: slots as a list (a few) or an array (more than 16)
_Block = list[int] | IntArray

_NO_HOST: Hashable = ("__no_host__",)
# extras beyond this many pages (or half the host's pages) trigger a refresh of the host
_MAX_EXTRAS = 32


class _ParamColumns(Protocol):
    """A page's crawl-value parameters by slot."""

    origin: FloatArray
    alpha: FloatArray
    beta: FloatArray
    gamma: FloatArray
    mu: FloatArray


class _BoundTable(_ParamColumns, Protocol):
    """What :meth:`HostIndex.bind` shares of a page table: the columns, slots and ids."""

    slot: dict[Hashable, int]
    ids: list[Hashable | None]


class _Columns:
    """A host index's own parameter columns (an index not bound to a page table)."""

    __slots__ = ("alpha", "beta", "gamma", "mu", "origin")

    def __init__(self, cap: int) -> None:
        self.origin = np.zeros(cap)
        self.alpha = np.zeros(cap)
        self.beta = np.zeros(cap)
        self.gamma = np.zeros(cap)
        self.mu = np.zeros(cap)

    def grow(self, n: int) -> None:
        for name in self.__slots__:
            old = getattr(self, name)
            new = np.zeros(n)
            new[: old.size] = old
            setattr(self, name, new)


class HostIndexStats:
    """Work counters (benchmarks and tests)."""

    __slots__ = ("hosts_examined", "queries", "refreshes", "values_computed")

    def __init__(self) -> None:
        self.queries = 0
        self.values_computed = 0
        self.refreshes = 0
        self.hosts_examined = 0

    def as_dict(self) -> dict[str, int]:
        return {k: int(getattr(self, k)) for k in self.__slots__}


class HostIndex:
    """Exact top ``k`` of crawl values under per-host room (module docstring).

    Parameters
    ----------
    window_s : float
        Bounds are computed at ``now + window_s * (1 + j_h)`` with a per-host jitter
        ``j_h`` in ``[0, 1)``: longer windows refresh less often, shorter ones give tighter
        bounds (fewer pages evaluated per pick).
    terms : int, optional
        Approx-J: rank by the value truncated to ``J`` terms (App. A.1 of paper 004).
    """

    def __init__(self, *, window_s: float = 5.0, terms: int | None = None) -> None:
        if not (window_s > 0.0 and math.isfinite(window_s)):
            raise ValueError(f"window_s must be finite and > 0, got {window_s!r}")
        self.window_s = float(window_s)
        self._terms = terms
        self.stats = HostIndexStats()
        cap = 64
        # the pages' parameters: the index's own, or its page table's once bound (:meth:`bind`)
        self._cols: _ParamColumns = _Columns(cap)
        self._table: _BoundTable | None = None
        self._seq = np.zeros(cap, dtype=np.int64)
        self._version = np.zeros(cap, dtype=np.int64)
        self._host = np.full(cap, -1, dtype=np.int64)
        self._active = np.zeros(cap, dtype=bool)
        self._ids: list[Hashable | None] = []
        self._slot: dict[Hashable, int] = {}
        self._free: list[int] = []
        self._n_active = 0
        self._counter = 0
        # hosts (by code)
        self._host_code: dict[Hashable, int] = {}
        self._host_names: list[Hashable] = []
        # slots ever placed on the host (lazy: pages gone are dropped at its refresh), as
        # int32 arrays (a list of Python ints took ~41 B per page) and a list of the slots
        # added one by one since its last refresh; hosts given slots since (duplicates?)
        self._members: list[npt.NDArray[np.int32]] = []
        self._members_new: list[list[int]] = []
        self._grown: set[int] = set()
        self._order: list[IntArray | None] = []  # slots by bound, decreasing
        self._order_ub: list[FloatArray | None] = []
        self._order_ver: list[IntArray | None] = []
        # where each entry's run of identical pages ends (None: no two alike; below)
        self._order_run: list[npt.NDArray[np.int32] | None] = []
        self._ptr: list[int] = []  # first entry of _order that may still be valid
        self._extras: list[dict[int, float]] = []  # slot -> bound at T_h
        hcap = 16
        self._T = np.full(hcap, -math.inf)  # bounds valid while now <= T
        self._ub = np.full(hcap, -math.inf)  # the host's bound (max over its pages)
        self._hver = np.zeros(hcap, dtype=np.int64)  # heap entry version
        self._parked = np.zeros(hcap, dtype=bool)
        self._dirty = np.zeros(hcap, dtype=bool)  # refresh before its bound is used
        self._jitter = np.zeros(hcap)
        self._heap: list[tuple[float, int, int]] = []  # (-ub, host, hver)
        self._expiry: list[tuple[float, int]] = []  # (T, host)
        self._dirty_hosts: set[int] = set()
        self._pending: set[int] = set()  # slots re-keyed since the last query
        self._threshold = math.nan

    # ------------------------------------------------------------------ storage
    # the parameter columns, read through these (a bound table replaces its arrays as it grows)
    @property
    def _origin(self) -> FloatArray:
        return self._cols.origin

    @property
    def _alpha(self) -> FloatArray:
        return self._cols.alpha

    @property
    def _beta(self) -> FloatArray:
        return self._cols.beta

    @property
    def _gamma(self) -> FloatArray:
        return self._cols.gamma

    @property
    def _mu(self) -> FloatArray:
        return self._cols.mu

    def bind(self, table: _BoundTable) -> None:
        """Keep the pages by ``table``'s slots (a :class:`models.decision.table.PageTable`,
        as :class:`models.decision.core.ShardBook` does): its page -> slot dictionary, page
        ids and parameter columns are the index's, instead of copies of them (113 B per
        page at 10^6 pages, traced by ``bench_book_memory.py``: the dictionary 63 B, the
        ids 9 B, the five float64 columns 42 B).  The table adds and frees the slots: a
        page must be in it before :meth:`upsert`, and :meth:`forget` must come before the
        table frees its slot.  The
        table's columns must hold the parameters given to the index whenever it is queried
        (the book writes both)."""
        if self._ids or self._slot:
            raise ValueError("bind an empty host index")
        self._table = table
        self._cols = table
        self._slot = table.slot
        self._ids = table.ids
        self._fit()

    def uses(self, table: object) -> bool:
        return self._table is table

    def _fit(self) -> None:
        """The index's own per-slot arrays as long as its bound table's (which grows alone)."""
        n = self._cols.origin.size
        if self._active.size < n:
            self._grow_own(n)

    def _grow(self) -> None:
        n = self._origin.size * 2
        if isinstance(self._cols, _Columns):
            self._cols.grow(n)
        self._grow_own(n)

    def _grow_own(self, n: int) -> None:
        for name, fill in (("_seq", 0), ("_version", 0), ("_host", -1)):
            old = getattr(self, name)
            new_i = np.full(n, fill, dtype=np.int64)
            new_i[: old.size] = old
            setattr(self, name, new_i)
        act = np.zeros(n, dtype=bool)
        act[: self._active.size] = self._active
        self._active = act

    def _grow_hosts(self) -> None:
        n = self._T.size * 2
        for name, fill, dt in (("_T", -math.inf, np.float64), ("_ub", -math.inf, np.float64),
                               ("_hver", 0, np.int64), ("_parked", False, np.bool_),
                               ("_dirty", False, np.bool_), ("_jitter", 0.0, np.float64)):
            old = getattr(self, name)
            new = np.full(n, fill, dtype=dt)
            new[: old.size] = old
            setattr(self, name, new)

    def _code(self, host: Hashable | None) -> int:
        key = _NO_HOST if host is None else host
        c = self._host_code.get(key)
        if c is None:
            c = len(self._host_names)
            if c >= self._T.size:
                self._grow_hosts()
            self._host_code[key] = c
            self._host_names.append(key)
            self._members.append(np.zeros(0, dtype=np.int32))
            self._members_new.append([])
            self._order.append(None)
            self._order_ub.append(None)
            self._order_ver.append(None)
            self._order_run.append(None)
            self._ptr.append(0)
            self._extras.append({})
            self._jitter[c] = (c * 0.6180339887498949) % 1.0  # golden-ratio spread
            self._dirty[c] = True
            self._dirty_hosts.add(c)
        return c

    def __len__(self) -> int:
        return self._n_active

    def __contains__(self, page_id: object) -> bool:
        s = self._slot.get(page_id)  # a bound table's slot may be past the arrays: not here
        return s is not None and s < self._active.size and bool(self._active[s])

    def __iter__(self) -> Iterator[Hashable]:
        n, act = self._active.size, self._active
        return iter([p for p, s in self._slot.items() if s < n and act[s]])

    def _slot_of(self, page_id: Hashable) -> int:
        """The page's slot; a bound table's page the index has never seen: KeyError."""
        s = self._slot[page_id]
        if s >= self._active.size:
            raise KeyError(page_id)
        return s

    # ------------------------------------------------------------------ updates
    @staticmethod
    def _check(origin: float, alpha: float, beta: float, gamma: float, mu: float) -> None:
        if math.isnan(origin) or origin == math.inf:
            raise ValueError(f"origin must be a number or -inf, got {origin!r}")
        for name, v in (("alpha", alpha), ("beta", beta), ("gamma", gamma), ("mu", mu)):
            if math.isnan(v) or v < 0 or (v == math.inf and name != "beta"):
                raise ValueError(f"{name} must be finite and >= 0, got {v!r}")

    def upsert(self, page_id: Hashable, *, origin: float, alpha: float, beta: float,
               gamma: float, mu: float, host: Hashable | None = None) -> None:
        """Insert, re-activate or re-key a page (``tau_eff(t) = t - origin``).  A page keeps
        its host when ``host`` is omitted later; a page (re)activated gets a new tie rank."""
        self._check(origin, alpha, beta, gamma, mu)
        s = self._slot.get(page_id)
        if s is None:
            if self._table is not None:
                raise KeyError(f"page {page_id!r} is not in the bound page table")
            s = new_slot(self, page_id)
            self._host[s] = -1
        elif s >= self._active.size:
            self._fit()
        old = int(self._host[s])
        code = self._code(host) if host is not None else (old if old >= 0 else self._code(None))
        if not self._active[s]:
            self._active[s] = True
            self._n_active += 1
            self._seq[s] = self._counter
            self._counter += 1
        if code != old:
            self._host[s] = code
            self._members_new[code].append(s)
            self._grown.add(code)
            if old >= 0:
                self._mark_dirty(old)
        self._origin[s] = origin
        self._alpha[s], self._beta[s], self._gamma[s], self._mu[s] = alpha, beta, gamma, mu
        self._version[s] += 1
        self._pending.add(s)

    def upsert_many(self, page_ids: Sequence[Hashable], hosts: Sequence[Hashable] | None,
                    origin: npt.ArrayLike, alpha: npt.ArrayLike, beta: npt.ArrayLike,
                    gamma: npt.ArrayLike, mu: npt.ArrayLike, *,
                    slots: npt.ArrayLike | None = None) -> None:
        """:meth:`upsert` of many pages in order (a shard's rebuild, or a batch of events).
        ``slots``: a bound index's pages' slots in its table, when the caller has them
        (:meth:`models.decision.core.ShardBook.set_pages`: not looked up again)."""
        o, cols, n = checked_columns(page_ids, hosts, origin, alpha, beta, gamma, mu)
        known: IntArray | None = None
        if self._table is not None:
            self._fit()
            known = self._table_slots(page_ids) if slots is None else np.asarray(
                slots, dtype=np.int64).ravel()
            if known.size != n:
                raise ValueError("page_ids and slots differ in length")
        elif slots is not None:
            raise ValueError("slots are a bound index's (bind)")
        if n and self._rekey_many(page_ids, hosts, o, cols, known):
            return
        if known is None:
            sl = new_slots(self, page_ids, hosts, o, cols)
        else:
            sl = self._unplaced_slots(page_ids, hosts, o, cols, known)
        if sl is None:
            return
        hs = hosts if hosts is not None else [None] * n
        code = {h: self._code(h) for h in dict.fromkeys(hs)}  # once per host
        codes = np.fromiter(map(code.__getitem__, hs), dtype=np.int64, count=n)
        self._host[sl] = codes
        members = self._members
        # each host's new slots in page order (a stable sort by host), one append per host
        order = np.argsort(codes, kind="stable")
        by_host = codes[order]
        cuts = np.flatnonzero(by_host[1:] != by_host[:-1]) + 1
        for part in np.split(order, cuts):
            if part.size:
                c = int(codes[part[0]])
                members[c] = np.concatenate((members[c], sl[part].astype(np.int32)))
                self._grown.add(c)
                self._mark_dirty(c)
        self._active[sl] = True
        self._n_active += n
        self._seq[sl] = self._counter + np.arange(n, dtype=np.int64)
        self._counter += n
        self._origin[sl] = o
        self._alpha[sl], self._beta[sl], self._gamma[sl], self._mu[sl] = cols
        self._version[sl] += 1

    def _lookup(self, page_ids: Sequence[Hashable]) -> IntArray:
        """The pages' slots (-1: not there)."""
        get = self._slot.get
        return np.fromiter((-1 if (s := get(p)) is None else s for p in page_ids),
                           dtype=np.int64, count=len(page_ids))

    def _table_slots(self, page_ids: Sequence[Hashable]) -> IntArray:
        """A bound index's pages' slots in its table; KeyError if one is not there."""
        sl = self._lookup(page_ids)
        if (sl < 0).any():
            raise KeyError("pages not in the bound page table")
        return sl

    def _unplaced_slots(self, page_ids: Sequence[Hashable], hosts: Sequence[Hashable] | None,
                        o: FloatArray, cols: list[FloatArray], sl: IntArray
                        ) -> IntArray | None:
        """:func:`models._index_store.new_slots` of a bound index: the pages' table slots
        ``sl`` when the index has none of them placed (never upserted, or forgotten: a
        rebuild) and each is given once, for the bulk path; otherwise one :meth:`upsert`
        each, in order, and None."""
        if (self._host[sl] == -1).all():
            seen = np.zeros(self._active.size, dtype=bool)  # each once? (np.unique: 7x slower)
            seen[sl] = True
            if int(np.count_nonzero(seen)) == sl.size:
                return sl
        upsert_each(self, page_ids, hosts, o, cols)
        return None

    def _rekey_many(self, page_ids: Sequence[Hashable], hosts: Sequence[Hashable] | None,
                    o: npt.NDArray[np.float64], cols: list[npt.NDArray[np.float64]],
                    sl: IntArray | None = None) -> bool:
        """:meth:`upsert_many` of distinct pages that are all in the index, active, on the
        same host as given (a batch of pings or outcomes): what :meth:`upsert` does to each
        (new parameters, version, re-keyed at the next query), on arrays.  False, with
        nothing changed, when any page is not such a page.  ``sl``: their slots, if known."""
        if sl is None:
            sl = self._lookup(page_ids)
        if (sl < 0).any() or not self._active[sl].all() or np.unique(sl).size != sl.size:
            return False
        if hosts is not None:
            code = self._host_code.get
            want = np.fromiter((code(_NO_HOST if h is None else h, -2) for h in hosts),
                               dtype=np.int64, count=len(hosts))
            if (want != self._host[sl]).any():
                return False
        self._origin[sl] = o
        self._alpha[sl], self._beta[sl], self._gamma[sl], self._mu[sl] = cols
        self._version[sl] += 1
        self._pending.update(sl.tolist())
        return True

    def set_origin(self, page_id: Hashable, origin: float) -> None:
        """Re-key an active page whose parameters are unchanged (a crawl or a ping)."""
        if math.isnan(origin) or origin == math.inf:
            raise ValueError(f"origin must be a number or -inf, got {origin!r}")
        s = self._slot_of(page_id)
        if not self._active[s]:
            raise KeyError(page_id)
        self._origin[s] = origin
        self._version[s] += 1
        self._pending.add(s)

    def remove(self, page_id: Hashable) -> None:
        """Take a page out (an order in flight, or gone).  Its slot is kept for its
        return; the host's bound stays valid (an overestimate)."""
        s = self._slot_of(page_id)
        if not self._active[s]:
            raise KeyError(page_id)
        self._active[s] = False
        self._n_active -= 1
        self._version[s] += 1
        self._pending.discard(s)

    def forget(self, page_id: Hashable) -> None:
        """Remove a page for good (its slot is reused); unknown pages are ignored.  A
        bound index leaves the slot to its table (:meth:`bind`: call this first)."""
        if self._table is not None:
            s = self._slot.get(page_id)
            if s is None or s >= self._active.size:
                return
        else:
            s = self._slot.pop(page_id, None)
            if s is None:
                return
        if self._active[s]:
            self._active[s] = False
            self._n_active -= 1
        self._version[s] += 1
        self._pending.discard(s)
        code = int(self._host[s])
        self._host[s] = -1
        if self._table is None:
            self._ids[s] = None
            self._free.append(s)
        if code >= 0:
            self._mark_dirty(code)

    def _mark_dirty(self, code: int) -> None:
        if not self._dirty[code]:
            self._dirty[code] = True
            self._dirty_hosts.add(code)

    # ------------------------------------------------------------------ values
    def _values(self, slots: IntArray, now: float) -> FloatArray:
        self.stats.values_computed += int(slots.size)
        if not slots.size:
            return np.zeros(0)
        from models.values import _values_at

        return _values_at(np.ascontiguousarray(slots, dtype=np.int64), now, self._origin,
                          self._alpha, self._beta, self._gamma, self._mu, self._terms)

    def _values_each(self, slots: IntArray, times: FloatArray) -> FloatArray:
        """Values of ``slots`` each at its own time."""
        self.stats.values_computed += int(slots.size)
        if not slots.size:
            return np.zeros(0)
        from models.values import _crawl_value_unchecked

        tau = np.maximum(times - self._origin[slots], 0.0)
        return _crawl_value_unchecked(tau, self._alpha[slots], self._beta[slots],
                                      self._gamma[slots], self._mu[slots], self._terms)

    def value(self, page_id: Hashable, now: float) -> float:
        """Exact crawl value of one page at ``now``."""
        return float(self._values(np.array([self._slot_of(page_id)], dtype=np.int64), now)[0])

    def values(self, page_ids: Sequence[Hashable], now: float) -> FloatArray:
        slots = np.fromiter((self._slot_of(p) for p in page_ids), dtype=np.int64)
        return self._values(slots, now)

    def origin(self, page_id: Hashable) -> float:
        return float(self._origin[self._slot_of(page_id)])

    def threshold(self) -> float:
        """The lowest value the last query returned (``nan`` before one): every page it
        returned beat it."""
        return self._threshold

    # ------------------------------------------------------------------ bounds
    def _refresh(self, c: int, now: float) -> None:
        self._refresh_many([c], now)

    def _refresh_many(self, codes: list[int], now: float) -> None:
        """Recompute the hosts' pages' bounds at ``T_h = now + window (1 + jitter_h)``:
        one vectorised value call and one sort for all of them."""
        if not codes:
            return
        self.stats.refreshes += len(codes)
        parts = []
        grown = self._grown
        for c in codes:
            arr = self._members[c]
            new = self._members_new[c]
            if new:
                arr = np.concatenate((arr, np.asarray(new, dtype=np.int32)))
                new.clear()
            if arr.size:
                keep = self._host[arr] == c
                if c in grown:  # slots given since: one may be there twice (a reused slot)
                    arr = np.unique(arr[keep])
                    grown.discard(c)
                elif not keep.all():  # pages that left the host or were forgotten
                    arr = arr[keep]
            self._members[c] = arr
            parts.append(arr)
        cs = np.asarray(codes, dtype=np.int64)
        T = now + self.window_s * (1.0 + self._jitter[cs])
        sizes = np.fromiter((a.size for a in parts), dtype=np.int64, count=len(parts))
        allsl = np.concatenate(parts).astype(np.int64)
        owner = np.repeat(np.arange(len(codes)), sizes)
        act = self._active[allsl]
        allsl, owner = allsl[act], owner[act]
        ub = self._values_each(allsl, T[owner])
        order = np.lexsort((self._seq[allsl], -ub, owner))
        allsl, ub, owner = allsl[order], ub[order], owner[order]
        ver = self._version[allsl]
        bounds = np.searchsorted(owner, np.arange(len(codes) + 1))
        run_end, alike = self._runs(allsl, owner, bounds)
        for j, c in enumerate(codes):
            lo, hi = int(bounds[j]), int(bounds[j + 1])
            self._order[c] = allsl[lo:hi]
            self._order_ub[c] = ub[lo:hi]
            self._order_ver[c] = ver[lo:hi]
            self._order_run[c] = (run_end[lo:hi] - lo).astype(np.int32) if alike[j] else None
            self._ptr[c] = 0
            self._extras[c] = {}
            Tc = float(T[j])
            self._T[c] = Tc
            self._dirty[c] = False
            self._ub[c] = float(ub[lo]) if hi > lo else -math.inf
            heapq.heappush(self._expiry, (Tc, c))
            self._push(c)

    def _runs(self, allsl: IntArray, owner: IntArray, bounds: IntArray
              ) -> tuple[IntArray, npt.NDArray[np.bool_]]:
        """Runs of *identical* pages in the hosts' orders (``allsl`` sorted by owner, bound,
        rank): adjacent entries of one host with the same origin and parameters have the
        same value at every time, so within a run the rank decides, and only a run's first
        ``left`` valid entries can be among its host's next ``left`` picks (the walk skips
        the rest: pages crawled or imported together, e.g. day-granular last-modified
        dates, otherwise make it evaluate every page of their host).  Returns, for each
        entry, the index after its run, and for each host whether any run is longer than
        one entry."""
        n = allsl.size
        if not n:
            return np.zeros(0, dtype=np.int64), np.zeros(bounds.size - 1, dtype=bool)
        same = np.zeros(n, dtype=bool)
        if n > 1:
            same[1:] = owner[1:] == owner[:-1]
            for col in (self._origin, self._alpha, self._beta, self._gamma, self._mu):
                v = col[allsl]
                same[1:] &= v[1:] == v[:-1]
        starts = np.flatnonzero(~same)
        ends = np.append(starts[1:], n)
        run_end = np.repeat(ends, np.diff(np.append(starts, n)))
        runs_per_host = np.diff(np.searchsorted(starts, bounds))
        alike = runs_per_host < np.diff(bounds)
        return run_end, alike

    def _push(self, c: int) -> None:
        self._hver[c] += 1
        if not self._parked[c] and self._ub[c] > 0.0:
            heapq.heappush(self._heap, (-float(self._ub[c]), c, int(self._hver[c])))

    def _flush(self, now: float) -> None:
        """Bring every unparked host's bound up to date for a query at ``now``."""
        if self._pending:
            sl = np.fromiter(self._pending, dtype=np.int64, count=len(self._pending))
            self._pending.clear()
            sl = sl[self._active[sl]]
            codes = self._host[sl]
            ok = ~self._dirty[codes] & (self._T[codes] >= now)
            # hosts whose bound expired or is dirty are refreshed whole below
            for c in np.unique(codes[~ok]).tolist():
                self._mark_dirty(c)
            sl, codes = sl[ok], codes[ok]
            if sl.size:
                ub = self._values_each(sl, self._T[codes])
                raised: set[int] = set()
                extras = self._extras
                for s, c, u in zip(sl.tolist(), codes.tolist(), ub.tolist(), strict=True):
                    ex = extras[c]
                    ex[s] = u
                    if u > self._ub[c]:
                        self._ub[c] = u
                        raised.add(c)
                    if len(ex) > _MAX_EXTRAS and 2 * len(ex) > (
                            self._members[c].size + len(self._members_new[c])):
                        self._mark_dirty(c)
                for c in raised:
                    if not self._dirty[c]:
                        self._push(c)
        exp = self._expiry
        while exp and exp[0][0] < now:
            T, c = heapq.heappop(exp)
            if self._T[c] == T and not self._parked[c]:
                self._mark_dirty(c)
        if self._dirty_hosts:
            todo = [c for c in self._dirty_hosts if self._dirty[c] and not self._parked[c]]
            self._dirty_hosts.difference_update(todo)
            self._refresh_many(todo, now)

    def unpark(self, host: Hashable) -> None:
        """A parked host has room again: its pages are candidates again."""
        c = self._host_code.get(host)
        if c is None or not self._parked[c]:
            return
        self._parked[c] = False
        if self._dirty[c]:
            self._dirty_hosts.add(c)
        else:
            self._push(c)  # an expired bound is refreshed by the next query's flush
            if self._T[c] < math.inf:
                heapq.heappush(self._expiry, (float(self._T[c]), c))

    def park(self, host: Hashable) -> None:
        c = self._host_code.get(host)
        if c is not None:
            self._parked[c] = True
            self._hver[c] += 1

    def is_parked(self, host: Hashable) -> bool:
        c = self._host_code.get(host)
        return c is not None and bool(self._parked[c])

    # ------------------------------------------------------------------ queries
    def _first_block(self, c: int, step: int, left: int | None) -> tuple[_Block, int]:
        """Host ``c``'s extras and the valid entries among the next ``step`` of its order
        (the leading invalid ones are skipped for good: that tightens its bound).  A
        list for a block of up to 16 pages (plain Python, where numpy's per-call cost
        dominates), an array past that (:meth:`_next_block`)."""
        order, over = self._order[c], self._order_ver[c]
        assert order is not None and over is not None
        ver, act = self._version, self._active
        n = order.size
        i = self._ptr[c]
        while i < n and (ver[order[i]] != over[i] or not act[order[i]]):
            i += 1
        self._ptr[c] = i
        sl, j = self._next_block(c, i, step, left)
        ex = self._extras[c]
        if ex:
            sl = [s for s in ex if act[s]] + list(sl)
        return sl, j

    def _next_block(self, c: int, i: int, step: int, left: int | None) -> tuple[_Block, int]:
        """The valid entries among ``order[i:i + step]`` and the index after the block.
        ``left``: the host gives at most that many more pages, so of a run of identical
        pages (:meth:`_runs`) only the first ``left`` valid entries are kept, and a run
        that reaches them is skipped to its end (None: keep every entry)."""
        order, over = self._order[c], self._order_ver[c]
        assert order is not None and over is not None
        n = order.size
        j = min(n, i + step)
        ver, act = self._version, self._active
        rend = self._order_run[c] if left is not None else None
        if j - i > 16:  # an array (the walk concatenates the blocks' slots)
            sl = order[i:j]
            ok = (ver[sl] == over[i:j]) & act[sl]
            if rend is None:
                return sl[ok], j
            assert left is not None
            re = rend[i:j]
            cs = np.cumsum(ok)
            start = np.flatnonzero(np.r_[True, re[1:] != re[:-1]])
            base = (cs - ok)[start]  # valid entries before each run's first in the block
            rank = cs - np.repeat(base, np.diff(np.append(start, j - i)))
            if int(re[-1]) > j and int(rank[-1]) >= left:
                j = int(re[-1])  # the last run had its ``left``: skip the rest of it
            return sl[ok & (rank <= left)], j
        out = []
        if rend is None:
            for t in range(i, j):
                s = int(order[t])
                if ver[s] == over[t] and act[s]:
                    out.append(s)
            return out, j
        assert left is not None
        t, end, got = i, -1, 0
        while t < j:
            if t >= end:
                end, got = int(rend[t]), 0
            s = int(order[t])
            if ver[s] == over[t] and act[s]:
                out.append(s)
                got += 1
                if got >= left:  # the run had its ``left``: skip the rest of it
                    t = end
                    continue
            t += 1
        return out, t  # j, or past it when the last run was skipped to its end

    def _tighten(self, c: int) -> None:
        """The host's bound from its first valid entry and its extras (still bounds)."""
        oub = self._order_ub[c]
        assert oub is not None
        p = self._ptr[c]
        ub = float(oub[p]) if p < oub.size else -math.inf
        act = self._active
        for s, u in self._extras[c].items():
            if u > ub and act[s]:
                ub = u
        if ub < self._ub[c]:
            self._ub[c] = ub

    def _walk(self, now: float, k: int, room: Callable[[Hashable], int],
              park: Callable[[Hashable], None] | None,
              eligible: Callable[[Hashable], bool] | None,
              hosts_desc: list[tuple[float, int, int]] | None
              ) -> list[tuple[Hashable, float]]:
        """Best first over hosts' bounds and pages' exact values: an exact value is taken
        only when no bound left is above it (bounds first on ties), so the picks are the
        greedy order; bounds at the top are evaluated together (one vectorised call)."""
        src = self._heap if hosts_desc is None else hosts_desc
        check = hosts_desc is None
        hver, parked, order_ub = self._hver, self._parked, self._order_ub
        names, ids, seq = self._host_names, self._ids, self._seq
        qe: list[tuple[float, int, int, int]] = []  # exact: (-value, seq, slot, host)
        qb: list[tuple[float, int, int, int]] = []  # bounds: (-bound, host, index, step)
        used: dict[int, int] = {}
        rooms: dict[int, int] = {}
        touched: list[int] = []
        out: list[tuple[Hashable, float]] = []
        heappop, heappush = heapq.heappop, heapq.heappush
        inf = math.inf
        while len(out) < k:
            if check:
                while src and (src[0][2] != hver[src[0][1]] or parked[src[0][1]]):
                    heappop(src)
            top_b = min(src[0][0] if src else inf, qb[0][0] if qb else inf)
            if qe and qe[0][0] < top_b:
                nv, _sq, slot, c = heappop(qe)  # an exact value above every bound left
                if used.get(c, 0) >= rooms[c]:
                    continue
                if eligible is not None and not eligible(ids[slot]):
                    continue
                used[c] = used.get(c, 0) + 1
                out.append((ids[slot], -nv))
                continue
            if top_b == inf:
                break
            # the best bounds left (bounds first on ties): evaluate a batch of their
            # blocks in one call (more than needed is harmless: exact values wait in qe)
            want = k - len(out)
            cap = min(256, max(8, 2 * want))
            blocks: list[tuple[int, _Block, int, int]] = []
            while len(blocks) < cap:
                if check:
                    while src and (src[0][2] != hver[src[0][1]] or parked[src[0][1]]):
                        heappop(src)
                if src and (not qb or src[0][0] <= qb[0][0]):
                    _nb, c, _hv = heappop(src)
                    self.stats.hosts_examined += 1
                    name = names[c]
                    r = room(None if name == _NO_HOST else name)
                    if r <= 0:
                        if park is not None and name != _NO_HOST:
                            parked[c] = True
                            hver[c] += 1
                            park(name)
                        elif check:  # not parked: back in the heap for the next query
                            touched.append(c)
                        continue
                    if check:
                        touched.append(c)
                    rooms[c] = r
                    step = max(2, min(r, want) + 1)
                    # each next block of the host 4x the last (2x made a deep walk, e.g.
                    # among alike pages, 6-7 blocks of mostly Python work per host of 100;
                    # bench_pick.py --alike 9.3k -> 12.2k picks/s, varied pages 16.9k ->
                    # 17.1-17.8k)
                    sl, j = self._first_block(c, step, r if eligible is None else None)
                    blocks.append((c, sl, j, 4 * step))
                elif qb:
                    _nb, c, i, step = heappop(qb)
                    if used.get(c, 0) >= rooms[c]:
                        continue
                    sl, j = self._next_block(c, i, step, rooms[c] - used.get(c, 0)
                                             if eligible is None else None)
                    blocks.append((c, sl, j, 4 * step))
                else:
                    break
            if not blocks:
                continue
            flat = np.concatenate([np.asarray(b[1], dtype=np.int64) for b in blocks])
            vals_np = self._values(flat, now)
            vals = vals_np.tolist()
            pos = 0
            for c, sl, j, step in blocks:
                m = len(sl)
                # only a block's best ``left`` can be picked: the host gives at most
                # ``left`` more, and any other entry of the block has ``left`` of its own
                # host before it (a deep walk among pages of equal values pushes a few
                # entries per block, not every page; with ``eligible`` every one, since
                # entries before it may be left out)
                left = m if eligible is not None else rooms[c] - used.get(c, 0)
                if m > left and m > 16:  # numpy: the block's best ``left``
                    v = vals_np[pos:pos + m]
                    bs = flat[pos:pos + m]
                    for t in np.lexsort((seq[bs], -v))[:left].tolist():
                        if vals[pos + t] > 0.0:
                            heappush(qe, (-vals[pos + t], int(seq[bs[t]]), int(bs[t]), c))
                elif m > left:
                    cand = sorted((-v, int(seq[s]), s, c) for s, v in zip(
                        sl, vals[pos:pos + m], strict=True) if v > 0.0)
                    for e in cand[:left]:
                        heappush(qe, e)
                else:
                    for s, v in zip(sl, vals[pos:pos + m], strict=True):
                        if v > 0.0:
                            heappush(qe, (-v, int(seq[s]), s, c))
                pos += m
                oub = order_ub[c]
                assert oub is not None
                if j < oub.size:
                    heappush(qb, (-float(oub[j]), c, j, step))
        for c in touched:
            self._tighten(c)
            self._push(c)
        if out:
            self._threshold = out[-1][1]
        return out

    def best_capped(self, now: float, k: int, room: Callable[[Hashable], int], *,
                    park: Callable[[Hashable], None] | None = None,
                    eligible: Callable[[Hashable], bool] | None = None
                    ) -> list[tuple[Hashable, float]]:
        """The greedy top ``k`` (value decreasing, ties by rank) under per-host caps
        ``room(host)`` (called at most once per host; no side effects expected), pages
        with a positive value only.  A host found without room is parked (``park(host)``
        told) when ``park`` is given, and left out until :meth:`unpark`; without ``park``
        it stays a candidate of the next query."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k!r}")
        self.stats.queries += 1
        if not self._n_active:
            return []
        self._flush(now)
        return self._walk(now, k, room, park, eligible, None)

    def best(self, now: float, *, eligible: Callable[[Hashable], bool] | None = None,
             eligible_host: Callable[[Hashable], bool] | None = None,
             k: int = 1) -> list[tuple[Hashable, float]]:
        """The ``k`` pages of highest value at ``now`` whatever their hosts' room, parked
        hosts included (positive values only; ``eligible`` and ``eligible_host`` filter).
        Costs a pass over the hosts: for stats, not for every tick."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k!r}")
        self.stats.queries += 1
        if not self._n_active:
            return []
        self._flush(now)
        H = len(self._host_names)
        codes = np.arange(H)
        stale = self._parked[:H] & (self._dirty[:H] | (self._T[:H] < now))
        todo = np.flatnonzero(stale).tolist()
        self._dirty_hosts.difference_update(todo)
        self._refresh_many(todo, now)
        ub = self._ub[:H]
        order = codes[ub > 0.0]
        hosts_desc = [(-float(ub[c]), int(c), 0) for c in order.tolist()]
        heapq.heapify(hosts_desc)

        def room(host: Hashable) -> int:
            return k if eligible_host is None or host is None or eligible_host(host) else 0

        return self._walk(now, k, room, None, eligible, hosts_desc)

