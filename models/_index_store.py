"""Storage of :class:`models.index.CrawlIndex`: per-page arrays, the level grid, the
time-to-level inversion ``iota = V^{-1}`` with its per-level cache, and exact values.

Split out of ``models/index.py`` (one concern per module); the queries, keys
and levels are in :mod:`models.index`, the planned-times cache of the simulator in
:mod:`models._index_plan`.  See :mod:`models.index` for the method (paper 004 App. F).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Default tier grid: ``2**(k/32)`` for ``k = -1600..640`` (about 1e-15 to 1e6), ratio
#: 1.022.  A fine grid keeps the candidate set small when many pages have nearly the
#: top value (fig6's m = 10^4: ratio 1.09 left ~100 candidates per slot, 1.022 ~60).
DEFAULT_LEVELS: tuple[float, ...] = tuple(2.0 ** (k / 32.0) for k in range(-1600, 641))

# A computed ``iota`` is shrunk by this relative margin so that the key can only be early:
# a page outside the hot set then has a value strictly below the level even if the root
# finder is off by ~1e-12 relative.  Hot pages whose value is a hair below the level are
# harmless: their exact values are computed.
_IOTA_MARGIN = 1e-9


def checked_columns(page_ids: Sequence[Hashable], hosts: Sequence[Hashable] | None,
                    origin: npt.ArrayLike, alpha: npt.ArrayLike, beta: npt.ArrayLike,
                    gamma: npt.ArrayLike, mu: npt.ArrayLike
                    ) -> tuple[FloatArray, list[FloatArray], int]:
    """The bulk upserts' arguments checked (``CrawlIndex.upsert_many``,
    ``HostIndex.upsert_many``): ``origin``, ``[alpha, beta, gamma, mu]`` as flat float64
    arrays of one length ``n``; origin a number or -inf, the others >= 0 and finite (beta
    may be +inf: a source that never signals)."""
    o = np.asarray(origin, dtype=np.float64).ravel()
    cols = [np.asarray(x, dtype=np.float64).ravel() for x in (alpha, beta, gamma, mu)]
    n = len(page_ids)
    if o.size != n or any(c.size != n for c in cols) or (
            hosts is not None and len(hosts) != n):
        raise ValueError("page_ids, hosts and the parameters differ in length")
    if np.isnan(o).any() or (o == math.inf).any():
        raise ValueError("origin must be a number or -inf")
    for name, v in zip(("alpha", "beta", "gamma", "mu"), cols, strict=True):
        if (np.isnan(v) | (v < 0)).any() or (name != "beta" and np.isinf(v).any()):
            raise ValueError(f"{name} must be finite and >= 0")
    return o, cols, n


class _SlotTable(Protocol):
    """What :func:`new_slot` needs of an index: its slot table."""

    _free: list[int]
    _slot: dict[Hashable, int]
    _ids: list[Hashable | None]

    @property
    def _origin(self) -> FloatArray: ...

    def _grow(self) -> None: ...


class _BulkTable(_SlotTable, Protocol):
    """What :func:`new_slots` needs of an index: its slot table and :meth:`upsert`."""

    def upsert(self, page_id: Hashable, *, origin: float, alpha: float, beta: float,
               gamma: float, mu: float, host: Hashable | None = None) -> None: ...


def new_slot(table: _SlotTable, page_id: Hashable) -> int:
    """A slot for a page new to ``table``: a freed one if any, else the next (grown as
    needed); the page's id and slot recorded."""
    if table._free:
        s = table._free.pop()
        table._ids[s] = page_id
    else:
        s = len(table._ids)
        if s >= table._origin.size:
            table._grow()
        table._ids.append(page_id)
    table._slot[page_id] = s
    return s


def upsert_each(table: _BulkTable, page_ids: Sequence[Hashable],
                hosts: Sequence[Hashable] | None, o: FloatArray, cols: list[FloatArray]) -> None:
    """A bulk upsert's pages one ``table.upsert`` each, in order (what a bulk path falls
    back to when the pages are not all new)."""
    for i, p in enumerate(page_ids):
        table.upsert(p, origin=float(o[i]), alpha=float(cols[0][i]), beta=float(cols[1][i]),
                     gamma=float(cols[2][i]), mu=float(cols[3][i]),
                     host=None if hosts is None else hosts[i])


def new_slots(table: _BulkTable, page_ids: Sequence[Hashable], hosts: Sequence[Hashable] | None,
              o: FloatArray, cols: list[FloatArray]) -> npt.NDArray[np.int64] | None:
    """The bulk upserts' common first step (``CrawlIndex.upsert_many``,
    ``HostIndex.upsert_many``): pages all new to ``table`` (a rebuild) get the next ``n``
    slots, grown as needed, and their ids; the slots are returned for the caller to fill.
    Otherwise (a page already there, one given twice, free slots to reuse) every page goes
    through ``table.upsert`` in order, the same state as one call each, and None comes back."""
    n = len(page_ids)
    slot = table._slot
    if table._free or len(set(page_ids)) != n or not slot.keys().isdisjoint(page_ids):
        upsert_each(table, page_ids, hosts, o, cols)
        return None
    start = len(table._ids)
    while start + n > table._origin.size:
        table._grow()
    sl = np.arange(start, start + n, dtype=np.int64)
    table._ids.extend(page_ids)
    slot.update(zip(page_ids, sl.tolist(), strict=True))
    return sl


class _ValueFn(Protocol):
    def __call__(
        self,
        tau_eff: npt.ArrayLike,
        alpha: npt.ArrayLike,
        beta: npt.ArrayLike,
        gamma: npt.ArrayLike,
        mu: npt.ArrayLike = 1.0,
        *,
        terms: int | None = None,
    ) -> FloatArray: ...


class _InverseFn(Protocol):
    def __call__(
        self,
        level: npt.ArrayLike,
        alpha: npt.ArrayLike,
        beta: npt.ArrayLike,
        gamma: npt.ArrayLike,
        mu: npt.ArrayLike = 1.0,
    ) -> FloatArray: ...


class IndexStats:
    """Work counters of a :class:`CrawlIndex` (for benchmarks and tests)."""

    __slots__ = ("full_scans", "iota_computed", "level_changes", "queries", "values_computed")

    def __init__(self) -> None:
        self.queries = 0
        self.values_computed = 0
        self.iota_computed = 0
        self.full_scans = 0
        self.level_changes = 0

    def as_dict(self) -> dict[str, int]:
        return {k: int(getattr(self, k)) for k in self.__slots__}


def _default_value_fn() -> _ValueFn:
    from models.values import crawl_value

    return crawl_value


def _default_inverse_fn() -> _InverseFn:
    from models.values import time_to_value

    return time_to_value


# Working levels whose iota arrays are kept (a level is revisited after a full scan).
_IOTA_CACHE_LEVELS = 48


class _IndexStore:
    """Per-page arrays and values of a crawl index (parameters: :class:`CrawlIndex`)."""

    def __init__(
        self,
        levels: Sequence[float] | None = None,
        *,
        terms: int | None = None,
        hot_target: int = 24,
        value_fn: _ValueFn | None = None,
        inverse_fn: _InverseFn | None = None,
        dense: bool = False,
    ) -> None:
        grid = np.asarray(DEFAULT_LEVELS if levels is None else list(levels), dtype=np.float64)
        if grid.ndim != 1 or grid.size == 0:
            raise ValueError("levels must be a non-empty sequence of floats")
        if not np.all(np.isfinite(grid)) or (grid <= 0).any() or (np.diff(grid) <= 0).any():
            raise ValueError("levels must be finite, > 0 and strictly increasing")
        if hot_target < 1:
            raise ValueError(f"hot_target must be >= 1, got {hot_target!r}")
        self._levels = grid
        self._terms = terms
        self._hot_target = int(hot_target)
        self._value_fn: _ValueFn = value_fn if value_fn is not None else _default_value_fn()
        self._inverse_fn: _InverseFn | None = inverse_fn
        # the default functions are called through their unchecked internal fast paths:
        # upsert validates every parameter once
        self._fast_values = value_fn is None
        self._fast_inverse = inverse_fn is None and terms is None
        self.stats = IndexStats()
        cap = 64
        self._ids: list[Hashable | None] = []
        self._slot: dict[Hashable, int] = {}
        # every page id so far is the int equal to its slot (fast path of set_origins)
        self._identity = True
        self._free: list[int] = []
        self._origin = np.zeros(cap)
        self._alpha = np.zeros(cap)
        self._beta = np.zeros(cap)
        self._gamma = np.zeros(cap)
        self._mu = np.zeros(cap)
        self._seq = np.zeros(cap, dtype=np.int64)
        self._version = np.zeros(cap, dtype=np.int64)
        self._alive = np.zeros(cap, dtype=bool)
        self._hot_flag = np.zeros(cap, dtype=bool)
        # iota at the current working level (nan: not computed for the current params)
        self._iota = np.full(cap, np.nan)
        # level index at which _iota was computed (-1: none)
        self._iota_level = np.full(cap, -1, dtype=np.int64)
        # iota per working level (nan: not computed for the current params), LRU order
        self._iota_cache: dict[int, FloatArray] = {}
        # host of each page (code; -1: none) for host-level eligibility
        self._host = np.full(cap, -1, dtype=np.int64)
        self._host_code: dict[Hashable, int] = {}
        self._host_names: list[Hashable] = []
        # planned query times (plan()) and each page's values at a window of them
        self._plan: FloatArray | None = None
        self._window = 16
        self._cv = np.zeros((cap, self._window))
        self._cv_start = np.full(cap, -1, dtype=np.int64)
        self._cv_len = np.zeros(cap, dtype=np.int64)
        self._cv_ver = np.full(cap, -1, dtype=np.int64)
        # upper bounds for planned queries: the value at the end of a window of planned
        # times (V grows with time for a fixed origin, Lemma 2), valid for its version
        self._ub_val = np.zeros(cap)
        self._ub_end = np.full(cap, -1, dtype=np.int64)
        self._ub_ver = np.full(cap, -1, dtype=np.int64)
        self._counter = 0
        self._level_idx = -1  # -1: no level chosen yet (first query scans)
        self._heap: list[tuple[float, int, int, int]] = []
        # dense mode: each page's current key in an array (inf: hot, pending, removed or
        # never due) instead of heap entries; a query compares all keys at once
        self._dense = bool(dense)
        self._keys = np.full(cap, np.inf)
        self._hot: set[int] = set()
        self._pending: set[int] = set()  # slots whose key must be (re)computed

    # ------------------------------------------------------------------ storage
    def _grow(self) -> None:
        n = self._origin.size * 2
        for name in ("_origin", "_alpha", "_beta", "_gamma", "_mu", "_ub_val"):
            old = getattr(self, name)
            new = np.zeros(n)
            new[: old.size] = old
            setattr(self, name, new)
        keys = np.full(n, np.inf)
        keys[: self._keys.size] = self._keys
        self._keys = keys
        for name, fill, dt in (
            ("_seq", 0, np.int64),
            ("_version", 0, np.int64),
            ("_iota_level", -1, np.int64),
            ("_host", -1, np.int64),
            ("_cv_start", -1, np.int64),
            ("_cv_len", 0, np.int64),
            ("_cv_ver", -1, np.int64),
            ("_ub_end", -1, np.int64),
            ("_ub_ver", -1, np.int64),
        ):
            old = getattr(self, name)
            new_i = np.full(n, fill, dtype=dt)
            new_i[: old.size] = old
            setattr(self, name, new_i)
        for name in ("_alive", "_hot_flag"):
            old = getattr(self, name)
            new_b = np.zeros(n, dtype=bool)
            new_b[: old.size] = old
            setattr(self, name, new_b)
        iota = np.full(n, np.nan)
        iota[: self._iota.size] = self._iota
        self._iota = iota
        cv = np.zeros((n, self._window))
        cv[: self._cv.shape[0]] = self._cv
        self._cv = cv
        for lv, arr in list(self._iota_cache.items()):
            grown = np.full(n, np.nan)
            grown[: arr.size] = arr
            self._iota_cache[lv] = grown

    def _new_slot(self, page_id: Hashable) -> int:
        s = new_slot(self, page_id)
        if self._identity and not (type(page_id) is int and page_id == s):
            self._identity = False
        self._alive[s] = True
        self._seq[s] = self._counter
        self._counter += 1
        return s

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, page_id: object) -> bool:
        return page_id in self._slot

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._slot))

    @property
    def levels(self) -> FloatArray:
        """The tier grid (read-only copy)."""
        return self._levels.copy()


    def _inverse(
        self, level: float, slots: npt.NDArray[np.int64], start: FloatArray | None = None
    ) -> FloatArray:
        """``iota`` with ``V(iota) = level`` for the given slots (inf if never reached).

        ``start``: optional first Newton iterates (the root at a lower level).
        """
        self.stats.iota_computed += int(slots.size)
        a, b, g, m = (
            self._alpha[slots], self._beta[slots], self._gamma[slots], self._mu[slots],
        )
        if self._fast_inverse:
            from models.values import _time_to_value_unchecked

            out = _time_to_value_unchecked(level, a, b, g, m, start)
        elif self._terms is None:
            inv = self._inverse_fn if self._inverse_fn is not None else _default_inverse_fn()
            out = np.asarray(inv(level, a, b, g, m), dtype=np.float64)
        else:
            out = self._bisect(level, a, b, g, m)
        return np.where(np.isfinite(out), out * (1.0 - _IOTA_MARGIN), out)

    def _bisect(
        self, level: float, a: FloatArray, b: FloatArray, g: FloatArray, m: FloatArray
    ) -> FloatArray:
        """Invert the (increasing) Approx-J value by bracketing and bisection."""
        cap = self._value_fn(np.full(a.size, np.inf), a, b, g, m, terms=self._terms)
        out = np.full(a.size, np.inf)
        out[level <= 0] = 0.0
        todo = np.nonzero((level > 0) & (cap > level))[0]
        if not todo.size:
            return out
        a, b, g, m = a[todo], b[todo], g[todo], m[todo]
        hi = np.ones(todo.size)
        for _ in range(200):
            v = self._value_fn(hi, a, b, g, m, terms=self._terms)
            low = v < level
            if not low.any():
                break
            hi = np.where(low, hi * 4.0, hi)
        lo = np.zeros(todo.size)
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            v = self._value_fn(mid, a, b, g, m, terms=self._terms)
            below = v < level
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
            if (hi - lo <= 1e-13 * hi).all():
                break
        out[todo] = lo
        return out

    def _compute_iota(self, slots: Sequence[int]) -> None:
        """iota at the working level for ``slots``, from the per-level cache if known."""
        if not len(slots):
            return
        arr = np.fromiter(slots, dtype=np.int64, count=len(slots))
        lv = self._level_idx
        cache = self._iota_cache.pop(lv, None)
        if cache is None:
            cache = np.full(self._iota.size, np.nan)
            if len(self._iota_cache) >= _IOTA_CACHE_LEVELS:
                del self._iota_cache[next(iter(self._iota_cache))]
        self._iota_cache[lv] = cache  # most recently used last
        got = cache[arr]
        miss = np.isnan(got)
        if miss.any():
            todo = arr[miss]
            # warm start: the root at the page's previous (lower) level
            prev = (self._iota_level[todo] >= 0) & (self._iota_level[todo] < lv)
            start = np.where(prev, self._iota[todo] / (1.0 - _IOTA_MARGIN), np.nan)
            got[miss] = self._inverse(float(self._levels[lv]), todo, start)
            cache[todo] = got[miss]
        self._iota[arr] = got
        self._iota_level[arr] = lv


    # ------------------------------------------------------------------ values
    def _values(self, slots: npt.NDArray[np.int64], now: float) -> FloatArray:
        self.stats.values_computed += int(slots.size)
        if not slots.size:
            return np.zeros(0)
        if self._fast_values:
            from models.values import _values_at

            return _values_at(np.ascontiguousarray(slots, dtype=np.int64), now,
                              self._origin, self._alpha, self._beta, self._gamma, self._mu,
                              self._terms)
        tau = now - self._origin[slots]
        tau = np.maximum(tau, 0.0)
        return self._value_arrays(
            tau, self._alpha[slots], self._beta[slots], self._gamma[slots], self._mu[slots]
        )

    def _value_arrays(
        self, tau: FloatArray, a: FloatArray, b: FloatArray, g: FloatArray, m: FloatArray
    ) -> FloatArray:
        if self._fast_values:
            from models.values import _crawl_value_unchecked

            return _crawl_value_unchecked(tau, a, b, g, m, self._terms)
        return np.asarray(self._value_fn(tau, a, b, g, m, terms=self._terms), dtype=np.float64)


    def value(self, page_id: Hashable, now: float) -> float:
        """Exact crawl value of one page at time ``now``."""
        s = self._slot[page_id]
        return float(self._values(np.array([s], dtype=np.int64), now)[0])

    def values(self, page_ids: Sequence[Hashable], now: float) -> FloatArray:
        """Exact crawl values of several pages at time ``now`` (one vectorised call)."""
        slots = np.fromiter((self._slot[p] for p in page_ids), dtype=np.int64)
        return self._values(slots, now)

    def origin(self, page_id: Hashable) -> float:
        """The page's origin (``tau_eff(t) = t - origin``)."""
        return float(self._origin[self._slot[page_id]])

    def time_to_reach(self, page_id: Hashable, level: float) -> float:
        """Absolute time at which the page's value reaches ``level`` (inf if never).

        ``origin + iota(level)``; ``-inf`` for a page with ``origin = -inf`` whose
        ``mu/Delta`` is at least ``level``.
        """
        s = self._slot[page_id]
        it = float(
            self._inverse(float(level), np.array([s], dtype=np.int64))[0] / (1.0 - _IOTA_MARGIN)
        )
        if it == math.inf:
            return math.inf
        o = float(self._origin[s])
        return -math.inf if o == -math.inf else o + it

