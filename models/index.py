"""Exact argmax of crawl values without a full scan (Algorithm 1 and App. F of paper 004).

Algorithm 1 of Busa-Fekete et al. (paper 004) crawls, at every slot ``t = j/R``, the page
with the largest crawl value ``V(tau_eff(t))``.  Evaluating every page at every slot costs
``m`` values per crawl.  App. F of the paper keeps pages in value *tiers* and recomputes
the values of the upper tiers more often; this module does the same thing **exactly**:

* A page's state is one number, its *origin*: ``tau_eff(t) = t - origin`` with
  ``origin = last_crawl - sum_s beta_s n_s`` (a noiseless ping, ``beta = inf``, gives
  ``origin = -inf`` and the value ``mu / Delta``).  Between re-keys the value only grows
  (Lemma 2: V is increasing), so the page reaches a value level ``L`` at the fixed time
  ``origin + iota(L)`` with ``iota = V^{-1}`` (``models.time_to_value``).
* The index keeps a *working level* ``L`` (a tier of a geometric grid).  Pages whose key
  ``origin + iota(L)`` has passed are *hot* (value ``>= L``); all others sit in a heap
  ordered by that key and are known to be below ``L`` without computing anything.
* ``best(now)`` moves the due pages from the heap to the hot set and computes exact
  values only for the hot set (one vectorised call).  If the ``k``-th best eligible hot
  value is ``>= L`` it is the exact answer: every other page is below ``L``.  Otherwise
  the level is lowered (a full scan, rare), and when the hot set grows large the level
  is raised.  Either way every page is re-keyed at the new level in one batched
  inversion (compiled: ``models._kernel``), cached per level for later visits.

``iota`` depends only on a page's parameters, not on its origin, so crawls and pings
re-key a page in ``O(log m)`` without any root finding; ``iota`` is recomputed (in
batches) only when parameters change or a new level is first used.

Everything here is pure: no clock, no I/O; time is the ``now`` argument.

Over 600 lines on purpose: the storage (``models._index_store``) and the simulator's
planning (``models._index_plan``) are already apart; what is left is the levels, the hot
set and the due heap of one structure, which read and write each other's state.

References
----------
R. Busa-Fekete, J. Zimmert, A. György et al., "A Scalable Crawling Algorithm Utilizing
Noisy Change-Indicating Signals" (paper 004): Algorithm 1, Sec. 5.2, Lemma 2, App. F.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Sequence
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from models._index_plan import _PlannedIndex
from models._index_store import (
    DEFAULT_LEVELS,
    FloatArray,
    IndexStats,
    checked_columns,
    new_slots,
)

__all__ = ["DEFAULT_LEVELS", "CrawlIndex", "IndexStats"]

# A raise keeps only the top hot_target // _RAISE_HEADROOM pages hot, so the hot set
# has room to grow before the next raise (each raise re-keys every page).
_RAISE_HEADROOM = 4
# The level is raised when the hot set exceeds _RAISE_FACTOR * hot_target pages.
_RAISE_FACTOR = 4


class CrawlIndex(_PlannedIndex):
    """Exact argmax of crawl values over pages without a full scan (paper 004 App. F tiers, exact).

    Parameters
    ----------
    levels : sequence of float, optional
        Increasing grid of value levels (the tiers of App. F).  The working level is
        always one of them.  Default :data:`DEFAULT_LEVELS` (geometric, ratio 2**(1/32)).
    terms : int, optional
        Approx-J: rank pages by the value truncated to ``J`` terms (App. A.1).
    hot_target : int
        Number of pages the hot set is sized for when a level is chosen; the level is
        raised when the hot set exceeds ``4 * hot_target``.
    dense : bool
        Keep each page's key in an array and find the due pages with one vectorised
        comparison per query instead of a heap (no per-page heap pushes and pops).
        Better when many pages are re-keyed between queries (batched steps, many pings)
        or ``m`` is small; a query costs ``O(m)`` array work.  Results are identical.
    value_fn, inverse_fn : callable, optional
        ``crawl_value`` and ``time_to_value`` (default: :mod:`models.values`).  The
        inverse is only used without ``terms``; with ``terms`` the index inverts
        ``value_fn`` by bisection (V_J is increasing).

    Notes
    -----
    Ties between exactly equal values are broken by insertion order (the page
    upserted first wins), so the sequence of choices is deterministic.
    """

    #: :meth:`set_origins` of at most this many pages goes page by page (:meth:`_set_few`)
    _few_max = 8

    # ------------------------------------------------------------------ updates
    def upsert(
        self,
        page_id: Hashable,
        *,
        origin: float,
        alpha: float,
        beta: float,
        gamma: float,
        mu: float,
        host: Hashable | None = None,
    ) -> None:
        """Insert or re-key a page.

        ``tau_eff(t) = t - origin`` with ``origin = last_crawl - sum_s beta_s n_s``
        (``-inf`` after a noiseless signal).  Changing only ``origin`` (a crawl or a
        ping) costs ``O(log m)``; changing parameters also recomputes ``iota`` at the
        working level (batched with other changes at the next query).  ``host``
        (optional) groups pages for the ``eligible_host`` filter of :meth:`best`; a
        page keeps its host when ``host`` is omitted on a later upsert.
        """
        if math.isnan(origin) or origin == math.inf:
            raise ValueError(f"origin must be a number or -inf, got {origin!r}")
        for name, v in (("alpha", alpha), ("beta", beta), ("gamma", gamma), ("mu", mu)):
            if math.isnan(v) or v < 0 or (v == math.inf and name != "beta"):
                raise ValueError(f"{name} must be finite and >= 0, got {v!r}")
        s = self._slot.get(page_id)
        if s is None:
            s = self._new_slot(page_id)
            changed = True
        else:
            changed = (
                self._alpha[s] != alpha
                or self._beta[s] != beta
                or self._gamma[s] != gamma
                or self._mu[s] != mu
            )
        self._alpha[s] = alpha
        self._beta[s] = beta
        self._gamma[s] = gamma
        self._mu[s] = mu
        if host is not None:
            code = self._host_code.get(host)
            if code is None:
                code = len(self._host_names)
                self._host_code[host] = code
                self._host_names.append(host)
            self._host[s] = code
        if changed:
            self._iota_level[s] = -1
            for arr in self._iota_cache.values():
                arr[s] = np.nan
        self._set_origin_slot(s, float(origin))

    def upsert_many(
        self,
        page_ids: Sequence[Hashable],
        hosts: Sequence[Hashable] | None,
        origin: npt.ArrayLike,
        alpha: npt.ArrayLike,
        beta: npt.ArrayLike,
        gamma: npt.ArrayLike,
        mu: npt.ArrayLike,
    ) -> None:
        """:meth:`upsert` of many pages, in order (a shard's rebuild).  The same state as
        one call each: pages new to the index (the rebuild's case) get their slots,
        parameters and hosts on arrays and wait for their keys in the pending set, as
        :meth:`upsert` leaves a new page; otherwise (a page already here, one given
        twice, free slots to reuse) it is :meth:`upsert` page by page."""
        o, cols, n = checked_columns(page_ids, hosts, origin, alpha, beta, gamma, mu)
        sl = new_slots(self, page_ids, hosts, o, cols)
        if sl is None:
            return
        start = int(sl[0]) if n else len(self._ids)
        ids_are_slots = all(type(p) is int and p == s
                            for p, s in zip(page_ids, range(start, start + n), strict=True))
        if self._identity and not ids_are_slots:
            self._identity = False
        self._alive[sl] = True
        self._seq[sl] = self._counter + np.arange(n, dtype=np.int64)
        self._counter += n
        self._alpha[sl], self._beta[sl], self._gamma[sl], self._mu[sl] = cols
        if hosts is not None:
            codes = self._host_code
            names = self._host_names

            def code(h: Hashable) -> int:
                c = codes.get(h)
                if c is None:
                    c = codes[h] = len(names)
                    names.append(h)
                return c

            self._host[sl] = np.fromiter((code(h) for h in hosts), dtype=np.int64, count=n)
        self._iota_level[sl] = -1  # new parameters: iota to compute
        for arr in self._iota_cache.values():
            arr[sl] = np.nan
        self._origin[sl] = o
        self._version[sl] += 1
        self._keys[sl] = np.inf
        if self._level_idx >= 0:  # keyed at the next query, as _rekey does for each
            self._pending.update(sl.tolist())

    def set_origin(self, page_id: Hashable, origin: float) -> None:
        """Re-key a page whose parameters are unchanged (a crawl or a ping)."""
        if math.isnan(origin) or origin == math.inf:
            raise ValueError(f"origin must be a number or -inf, got {origin!r}")
        self._set_origin_slot(self._slot[page_id], float(origin))

    def set_origins(
        self, page_ids: Sequence[Hashable] | npt.NDArray[np.int64], origins: npt.ArrayLike
    ) -> None:
        """Re-key several pages at once (e.g. the pings since the last query).

        Same result as :meth:`set_origin` for each page (a page given twice takes its
        last origin); a candidate (hot) page whose origin moves back (a ping: its value
        only grows) stays a candidate.
        """
        o = np.asarray(origins, dtype=np.float64).ravel()
        if o.size != len(page_ids):
            raise ValueError("page_ids and origins differ in length")
        if np.isnan(o).any() or (o == math.inf).any():
            raise ValueError("origins must be numbers or -inf")
        if (self._identity and isinstance(page_ids, np.ndarray)
                and page_ids.dtype.kind in "iu"):
            # ids 0..n-1 upserted in order and never removed: an id is its slot
            slots = page_ids.astype(np.int64, copy=False)
            if slots.size and (slots.min() < 0 or slots.max() >= len(self._ids)):
                raise KeyError(int(slots.min() if slots.min() < 0 else slots.max()))
        else:
            slots = np.fromiter((self._slot[p] for p in page_ids), dtype=np.int64,
                                count=o.size)
        if (o.size <= self._few_max and self._level_idx >= 0
                and self._set_few(slots.tolist(), o.tolist())):
            return
        keep_hot = self._hot_flag[slots] & (o <= self._origin[slots])
        self._origin[slots] = o
        self._version[slots] += 1
        self._keys[slots] = np.inf
        rest = slots[~keep_hot]
        if self._level_idx < 0 or not rest.size:
            for s in rest.tolist():
                self._rekey(s)
            return
        hot = rest[self._hot_flag[rest]]
        for s in hot.tolist():
            self._hot.discard(s)
        self._hot_flag[hot] = False
        lvl = self._iota_level[rest]
        ready = (lvl >= 0) & (lvl <= self._level_idx)
        for s in rest[~ready].tolist():
            self._pending.add(s)
        push = rest[ready]
        it = self._iota[push]
        org = self._origin[push]
        with np.errstate(invalid="ignore"):  # as _key: iota = inf first, then origin = -inf
            keys = np.where(it == math.inf, math.inf,
                            np.where(np.isneginf(org), -math.inf, org + it))
        fin = keys != math.inf
        pf = push[fin]
        if self._dense:
            self._keys[pf] = keys[fin]
            return
        heap = self._heap
        heappush = heapq.heappush
        for e in zip(keys[fin].tolist(), self._seq[pf].tolist(), pf.tolist(),
                     self._version[pf].tolist(), strict=True):
            heappush(heap, e)
        self._maybe_compact()

    def _set_few(self, slots: list[int], origins: list[float]) -> bool:
        """:meth:`set_origins` of a few distinct pages, one at a time (the array path's
        fixed cost is most of a slot's pings); False, nothing done, if a page is twice."""
        if len(set(slots)) != len(slots):
            return False
        hot_flag, origin, version, keys = self._hot_flag, self._origin, self._version, self._keys
        iota, iota_level, level = self._iota, self._iota_level, self._level_idx
        pushed = False
        for s, x in zip(slots, origins, strict=True):
            keep = bool(hot_flag[s]) and x <= origin[s]  # a hot page moved back stays hot
            origin[s] = x
            version[s] += 1
            keys[s] = math.inf
            if keep:
                continue
            if hot_flag[s]:
                self._hot.discard(s)
                hot_flag[s] = False
            if not 0 <= iota_level[s] <= level:
                self._pending.add(s)
                continue
            it = float(iota[s])  # as _key: iota = inf first, then origin = -inf
            key = math.inf if it == math.inf else (-math.inf if x == -math.inf else x + it)
            if key == math.inf:
                continue
            if self._dense:
                keys[s] = key
            else:
                heapq.heappush(self._heap, (key, int(self._seq[s]), s, int(version[s])))
                pushed = True
        if pushed:
            self._maybe_compact()
        return True

    def _set_origin_slot(self, s: int, origin: float) -> None:
        self._origin[s] = origin
        self._version[s] += 1
        self._keys[s] = math.inf
        self._rekey(s)

    def _rekey(self, s: int) -> None:
        """Put a page whose origin changed back into the heap (or the pending set)."""
        if self._hot_flag[s]:
            self._hot_flag[s] = False
            self._hot.discard(s)
        if self._level_idx < 0:
            return
        if 0 <= self._iota_level[s] <= self._level_idx:
            # iota at a lower level gives an early key (iota grows with the level); it is
            # corrected lazily when it comes due (_drain)
            self._push(s)
        else:
            self._pending.add(s)

    def remove(self, page_id: Hashable) -> None:
        """Forget a page (its heap entries become stale)."""
        s = self._slot.pop(page_id)
        self._identity = False
        self._alive[s] = False
        self._version[s] += 1
        self._keys[s] = math.inf
        self._hot_flag[s] = False
        self._hot.discard(s)
        self._pending.discard(s)
        self._iota_level[s] = -1
        self._host[s] = -1
        for arr in self._iota_cache.values():
            arr[s] = np.nan
        self._ids[s] = None
        self._free.append(s)

    # ------------------------------------------------------------------ keys
    def _key(self, s: int) -> float:
        o = self._origin[s]
        it = self._iota[s]
        if it == math.inf:
            return math.inf
        if o == -math.inf:
            return -math.inf
        return float(o + it)

    def _push(self, s: int) -> None:
        k = self._key(s)
        if self._dense:
            self._keys[s] = k
            return
        if k != math.inf:
            heapq.heappush(self._heap, (k, int(self._seq[s]), s, int(self._version[s])))
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        if len(self._heap) > 4 * len(self._slot) + 1024:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        entries = []
        for s in self._slot.values():
            if self._hot_flag[s] or s in self._pending:
                continue
            k = self._key(s)
            if k != math.inf:
                entries.append((k, int(self._seq[s]), s, int(self._version[s])))
        heapq.heapify(entries)
        self._heap = entries


    def _flush_pending(self) -> None:
        if not self._pending:
            return
        todo = [s for s in self._pending if self._iota_level[s] != self._level_idx]
        self._compute_iota(todo)
        for s in self._pending:
            self._push(s)
        self._pending.clear()


    def threshold(self) -> float:
        """The working level: every page outside the candidate (hot) set is below it.

        After ``best``, the chosen page beat every other page; this level is a cheap
        lower bound of the value any crawled page had ("the threshold it beat" in the
        tier sense of App. F).  ``nan`` before the first query.
        """
        return float(self._levels[self._level_idx]) if self._level_idx >= 0 else math.nan

    @property
    def hot_size(self) -> int:
        """Number of candidate pages currently above the working level."""
        return len(self._hot)

    # ------------------------------------------------------------------ queries
    def _choose_level(self, values_desc: FloatArray, rank: int) -> int:
        """Largest grid index whose level is <= the value of rank ``rank`` (0-based)."""
        if values_desc.size == 0:
            return 0
        v = float(values_desc[min(rank, values_desc.size - 1)])
        idx = int(np.searchsorted(self._levels, v, side="right")) - 1
        return max(idx, 0)

    def _set_level(self, idx: int, now: float) -> None:
        """Make ``idx`` the working level: recompute iota and keys of all pages."""
        self.stats.level_changes += 1
        self._level_idx = idx
        slots = np.fromiter(self._slot.values(), dtype=np.int64, count=len(self._slot))
        self._compute_iota(slots.tolist())
        self._pending.clear()
        self._hot.clear()
        self._hot_flag[:] = False
        with np.errstate(invalid="ignore"):
            keys = np.where(
                np.isinf(self._iota[slots]),
                np.inf,
                np.where(np.isneginf(self._origin[slots]), -np.inf,
                         self._origin[slots] + self._iota[slots]),
            )
        hot = keys <= now
        hs = slots[hot]
        self._hot.update(hs.tolist())
        self._hot_flag[hs] = True
        if self._dense:
            self._keys[slots] = np.where(hot, np.inf, keys)
            return
        rest = slots[~hot & np.isfinite(keys)]
        entries = [
            (float(k), int(self._seq[s]), int(s), int(self._version[s]))
            for k, s in zip(keys[~hot & np.isfinite(keys)].tolist(), rest.tolist(), strict=True)
        ]
        heapq.heapify(entries)
        self._heap = entries

    def _drain(self, now: float) -> None:
        """Move every page whose key has passed into the hot set."""
        if self._dense:
            self._drain_dense(now)
            return
        heap = self._heap
        while True:
            stale: list[int] = []
            while heap and heap[0][0] <= now:
                _, _, s, ver = heapq.heappop(heap)
                if ver != self._version[s] or not self._alive[s] or self._hot_flag[s]:
                    continue
                if self._iota_level[s] != self._level_idx:
                    stale.append(s)
                    continue
                self._hot.add(s)
                self._hot_flag[s] = True
            if not stale:
                return
            # keys computed at another level (a page re-keyed while its parameters'
            # iota at the working level was unknown): invert them and push again
            self._compute_iota(stale)
            for s in stale:
                self._push(s)

    def _drain_dense(self, now: float) -> None:
        """:meth:`_drain` over the key array (keys of hot, pending and removed pages are
        inf, so every page found is due and current)."""
        keys = self._keys
        while True:
            due = np.flatnonzero(keys <= now)
            if not due.size:
                return
            keys[due] = np.inf
            cur = self._iota_level[due] == self._level_idx
            good = due[cur]
            self._hot.update(good.tolist())
            self._hot_flag[good] = True
            stale = due[~cur]
            if not stale.size:
                return
            # keys computed at another level: invert at the working level, key again
            self._compute_iota(stale.tolist())
            it = self._iota[stale]
            org = self._origin[stale]
            with np.errstate(invalid="ignore"):  # as _key
                keys[stale] = np.where(it == math.inf, math.inf,
                                       np.where(np.isneginf(org), -math.inf, org + it))

    def _host_ok(
        self, eligible_host: Callable[[Hashable], bool] | None
    ) -> Callable[[int], bool] | None:
        """Per-query memo of ``eligible_host`` by host code (pages without a host pass)."""
        if eligible_host is None:
            return None
        memo: dict[int, bool] = {}
        names = self._host_names
        host = self._host

        def ok(s: int) -> bool:
            code = int(host[s])
            if code < 0:
                return True
            r = memo.get(code)
            if r is None:
                r = bool(eligible_host(names[code]))
                memo[code] = r
            return r

        return ok

    def _host_mask(
        self, slots: npt.NDArray[np.int64], eligible_host: Callable[[Hashable], bool]
    ) -> npt.NDArray[np.bool_]:
        """Pages whose host is eligible, one ``eligible_host`` call per host."""
        codes = self._host[slots]
        present = np.unique(codes[codes >= 0])
        ok_code = np.zeros(len(self._host_names) + 1, dtype=bool)
        ok_code[-1] = True  # code -1: no host
        for c in present.tolist():
            ok_code[c] = bool(eligible_host(self._host_names[c]))
        return ok_code[codes]

    def _scan(
        self,
        now: float,
        eligible: Callable[[Hashable], bool] | None,
        eligible_host: Callable[[Hashable], bool] | None,
        k: int,
        *,
        relevel: bool,
    ) -> list[tuple[Hashable, float]]:
        """Brute force over all pages (of eligible hosts); with ``relevel`` also
        re-chooses the working level (needs every page's value)."""
        slots = np.fromiter(self._slot.values(), dtype=np.int64, count=len(self._slot))
        if eligible_host is not None and not relevel:
            slots = slots[self._host_mask(slots, eligible_host)]
        else:
            self.stats.full_scans += 1
        vals = self._values(slots, now)
        order = np.lexsort((self._seq[slots], -vals))
        host_ok = self._host_ok(eligible_host) if relevel else None
        out: list[tuple[Hashable, float]] = []
        last_rank = 0
        for rank, j in enumerate(order.tolist()):
            s = int(slots[j])
            pid = self._ids[s]
            if (host_ok is None or host_ok(s)) and (eligible is None or eligible(pid)):
                out.append((pid, float(vals[j])))
                last_rank = rank
                if len(out) == k:
                    break
        if relevel:
            vals_desc = vals[order]
            idx = self._choose_level(vals_desc, max(self._sizes(k)[0], 2 * (last_rank + 1)))
            self._set_level(idx, now)
        return out

    def _full_scan(
        self, now: float, eligible: Callable[[Hashable], bool] | None, k: int,
        eligible_host: Callable[[Hashable], bool] | None = None,
    ) -> list[tuple[Hashable, float]]:
        """Brute force over all pages; also re-chooses the working level."""
        return self._scan(now, eligible, eligible_host, k, relevel=True)

    def best(
        self,
        now: float,
        *,
        eligible: Callable[[Hashable], bool] | None = None,
        eligible_host: Callable[[Hashable], bool] | None = None,
        k: int = 1,
    ) -> list[tuple[Hashable, float]]:
        """The ``k`` eligible pages with the highest exact crawl value at ``now``.

        Returns ``[(page_id, value), ...]`` highest first (ties: earlier insertion
        first); fewer than ``k`` if fewer pages are eligible.  Exact: equal to the
        brute-force argmax of ``crawl_value`` over all pages (Algorithm 1).

        ``eligible(page_id)`` and ``eligible_host(host)`` (hosts given to
        :meth:`upsert`; pages without a host pass) must both hold.  ``eligible_host``
        is called at most once per host per query, and when the candidates above the
        working level are all ineligible only the pages of eligible hosts are
        evaluated (no full scan, the level is kept).
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k!r}")
        self.stats.queries += 1
        if not self._slot:
            return []
        if self._level_idx < 0:
            return self._full_scan(now, eligible, k, eligible_host)
        self._flush_pending()
        self._drain(now)
        level = float(self._levels[self._level_idx])
        hot = np.fromiter(self._hot, dtype=np.int64, count=len(self._hot))
        p = self._plan_index(now) if hot.size and eligible_host is None else -1
        if p >= 0:
            got = self._best_bounded(hot, p, now, level, eligible, k)
            if got is not None:
                _, trigger, keep = self._sizes(k)
                if hot.size > trigger:
                    vals = self._values(hot, now)
                    self._raise_level(np.sort(vals)[::-1], keep, now)
                return got
        vals = self._hot_values(hot, now)
        order = np.lexsort((self._seq[hot], -vals))
        host_ok = self._host_ok(eligible_host)
        out: list[tuple[Hashable, float]] = []
        above = 0
        for j in order.tolist():
            if vals[j] < level:
                break
            above += 1
            s = int(hot[j])
            pid = self._ids[s]
            if (host_ok is None or host_ok(s)) and (eligible is None or eligible(pid)):
                out.append((pid, float(vals[j])))
                if len(out) == k:
                    break
        if len(out) < k:
            if above >= k and eligible_host is not None:
                # the level is right; only eligibility failed: scan eligible hosts only
                return self._scan(now, eligible, eligible_host, k, relevel=False)
            # not enough certified candidates above the level: lower it (full scan)
            return self._full_scan(now, eligible, k, eligible_host)
        _, trigger, keep = self._sizes(k)
        if hot.size > trigger:
            self._raise_level(vals[order], keep, now)
        return out


    def best_capped(self, now: float, k: int, room: Callable[[Hashable], int], *,
                    park: Callable[[Hashable], None] | None = None,
                    eligible: Callable[[Hashable], bool] | None = None
                    ) -> list[tuple[Hashable, float]]:
        """The greedy top ``k`` under per-host caps (value decreasing, ties by rank; a
        page taken while its host has room left), pages with a positive value only: what
        :func:`models.decision.core.choose` asks of a shard book's index (the same
        contract as :meth:`models.decision.hostindex.HostIndex.best_capped`).

        ``room(host)`` is called at most once per host (pages without a host have room
        ``k``).  The uncapped top ``k`` is tried first: when every host in it has room for
        its pages it is the answer (no host in the way; the simulator's common case keeps
        :meth:`best`'s planned path).  Otherwise the pages of hosts with room are taken in
        value order, ``k``, ``2k``, ``4k``, ... at a time, until ``k`` fit the caps or none are
        left.  This index never parks a host: ``park`` is accepted and not called, so a
        host without room stays a candidate of the next query."""
        del park  # the host index's option; here every host is looked at each query
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k!r}")
        first = self.best(now, k=k, eligible=eligible)
        n_pos = len(first)
        while n_pos and not first[n_pos - 1][1] > 0.0:  # values decrease: the positive head
            n_pos -= 1
        pos = first if n_pos == len(first) else first[:n_pos]
        names, host, slot = self._host_names, self._host, self._slot
        if not names:
            return pos  # no page has a host
        rooms: dict[int, int] = {}
        if len(names) == 1:  # one host (the simulator's usual world)
            rooms[0] = room(names[0])
            if n_pos <= rooms[0]:
                return pos  # room for them all

        def room_of(code: int) -> int:
            r = rooms.get(code)
            if r is None:
                r = rooms[code] = k if code < 0 else room(names[code])
            return r

        def greedy(got: list[tuple[Hashable, float]]) -> tuple[list[tuple[Hashable, float]],
                                                                bool]:
            """``got``'s greedy under the caps, and whether a cap left a page out."""
            out: list[tuple[Hashable, float]] = []
            used: dict[int, int] = {}
            capped = False
            for pid, v in got:
                if not v > 0.0 or len(out) == k:
                    break
                code = int(host[slot[pid]])
                u = used.get(code, 0)
                if u < room_of(code):
                    used[code] = u + 1
                    out.append((pid, v))
                else:
                    capped = True
            return out, capped

        if n_pos > 16:  # a batched step: is any host over its room? (one array pass)
            codes = host[np.fromiter(map(slot.__getitem__, map(itemgetter(0), pos)),
                                     dtype=np.int64, count=n_pos)]
            seen, counts = np.unique(codes, return_counts=True)
            if all(n <= room_of(c) for c, n in zip(seen.tolist(), counts.tolist(),
                                                   strict=True)):
                return pos
        out, capped = greedy(first)
        if not capped or len(out) == k:
            return out
        n = len(self._slot)

        def has_room(h: Hashable) -> bool:
            return room_of(self._host_code[h]) >= 1

        want = k
        while True:  # the top of the hosts with room, until k fit or all were seen
            got = self.best(now, k=min(want, n), eligible=eligible, eligible_host=has_room)
            out, _ = greedy(got)
            if len(out) == k or len(got) < min(want, n) or want >= n:
                return out
            want *= 2

    def unpark(self, host: Hashable) -> None:
        """A host's room came back (:func:`models.decision.core.choose` tells every shard
        book's index): nothing to do, :meth:`best_capped` parks no host."""

    def forget(self, page_id: Hashable) -> None:
        """Remove a page for good; unknown pages are ignored (a shard book's removal)."""
        if page_id in self._slot:
            self.remove(page_id)

    def _sizes(self, k: int) -> tuple[int, int, int]:
        """``(rank a lowered level is set at, hot size that raises it, rank kept)``.

        For single picks: ``hot_target``, ``4 hot_target``, ``hot_target // 4``.  For
        ``k > 1`` (a batched step) the hot set must outlive a step: ``1.5 k`` pages above
        a lowered level, raised back to ``1.5 k`` once it holds ``3 k`` (fig8's 5000-page
        steps over 10^5 pages: 11.1k exact values per step over 100 steps vs 25.0k with
        ``3 k``, no full scan after the first either way; the picks are the same).
        """
        if k == 1:
            return (self._hot_target, int(_RAISE_FACTOR * self._hot_target),
                    max(1, self._hot_target // _RAISE_HEADROOM))
        base = max(self._hot_target, (3 * k + 1) // 2)
        return base, 2 * base, base

    def _raise_level(self, vals_desc: FloatArray, keep: int, now: float) -> None:
        """Shrink the hot set: re-key every page at a higher level (one batched inversion)."""
        idx = self._choose_level(vals_desc, keep)
        if idx <= self._level_idx:
            return
        self._set_level(idx, now)
