"""Planned query times of :class:`models.index.CrawlIndex` (used by the simulator, whose
crawl slots are known in advance): each page's values at a window of the planned times,
and upper bounds that let a query evaluate only the pages that could win (Lemma 2 of
paper 004: ``V`` grows with time for a fixed origin).  Split out of ``models/index.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable

import numpy as np
import numpy.typing as npt

from models._index_store import FloatArray, _IndexStore


class _PlannedIndex(_IndexStore):
    """:class:`_IndexStore` with the planned-times value cache."""

    def plan(self, times: npt.ArrayLike, *, window: int = 16) -> None:
        """Announce the times of the coming queries (e.g. the crawl slots).

        ``best`` at one of these times (exactly equal floats) then takes the candidates'
        values from a cache filled by one vectorised call per ``window`` planned times:
        a page's value at the next ``window`` planned times is computed when it is first
        needed, and stays valid until the page is re-keyed (a crawl, a ping, a parameter
        change).  Results are unchanged; queries at other times evaluate directly.
        """
        arr = np.asarray(times, dtype=np.float64).ravel()
        if arr.size and (not np.all(np.isfinite(arr)) or (np.diff(arr) <= 0).any()):
            raise ValueError("planned times must be finite and strictly increasing")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window!r}")
        self._plan = arr
        if window != self._window:
            self._window = int(window)
            self._cv = np.zeros((self._origin.size, self._window))
        self._cv_start[:] = -1
        self._cv_len[:] = 0
        self._ub_end[:] = -1

    def _plan_index(self, now: float) -> int:
        plan = self._plan
        if plan is None or not plan.size:
            return -1
        p = int(np.searchsorted(plan, now))
        return p if p < plan.size and plan[p] == now else -1

    def _hot_values(self, hot: npt.NDArray[np.int64], now: float) -> FloatArray:
        """Exact values of ``hot`` at ``now``, from the planned-time cache when possible."""
        p = self._plan_index(now) if hot.size else -1
        if p < 0:
            return self._values(hot, now)
        assert self._plan is not None
        start = self._cv_start[hot]
        rel = p - start
        valid = (start >= 0) & (rel >= 0) & (rel < self._cv_len[hot]) & (
            self._cv_ver[hot] == self._version[hot]
        )
        if not valid.all():
            inv = hot[~valid]
            times = self._plan[p : p + self._window]
            w = times.size
            self.stats.values_computed += int(inv.size * w)
            tau = np.maximum(times[None, :] - self._origin[inv][:, None], 0.0).ravel()
            rp = np.repeat
            vals = self._value_arrays(
                tau, rp(self._alpha[inv], w), rp(self._beta[inv], w), rp(self._gamma[inv], w),
                rp(self._mu[inv], w),
            ).reshape(inv.size, w)
            self._cv[inv, :w] = vals
            self._cv_start[inv] = p
            self._cv_len[inv] = w
            self._cv_ver[inv] = self._version[inv]
            rel = p - self._cv_start[hot]
        out: FloatArray = self._cv[hot, rel]
        return out


    def _upper_bounds(self, hot: npt.NDArray[np.int64], p: int) -> FloatArray:
        """Upper bounds of the hot pages' values at planned time ``p``: each page's value
        at the last planned time of a window (``window`` planned times) starting at or
        before ``p``; recomputed (one vectorised call) when a page was re-keyed or its
        window has passed."""
        assert self._plan is not None
        stale = (self._ub_ver[hot] != self._version[hot]) | (self._ub_end[hot] < p)
        if stale.any():
            todo = hot[stale]
            end = min(p + self._window - 1, self._plan.size - 1)
            self._ub_val[todo] = self._values(todo, float(self._plan[end]))
            self._ub_end[todo] = end
            self._ub_ver[todo] = self._version[todo]
        out: FloatArray = self._ub_val[hot]
        return out

    def _best_bounded(
        self, hot: npt.NDArray[np.int64], p: int, now: float, level: float,
        eligible: Callable[[Hashable], bool] | None, k: int,
    ) -> list[tuple[Hashable, float]] | None:
        """Exact top ``k`` of the hot set at planned time ``p``, evaluating only the pages
        whose upper bound could still beat the ``k``-th exact value found (pages in
        decreasing bound order, a few per vectorised call).  ``None``: fewer than ``k``
        eligible pages reach the level (the caller's full path decides)."""
        ub = self._upper_bounds(hot, p)
        order = np.lexsort((self._seq[hot], -ub))
        seq = self._seq
        ids = self._ids
        n = hot.size
        step = max(4, k + 3)
        done: list[tuple[float, int, int]] = []  # (-value, seq, slot): exact so far
        ok: dict[int, bool] = {}
        i = 0
        while i < n:
            chunk = hot[order[i : i + step]]
            i += chunk.size
            vals = self._values(chunk, now)
            done.extend(zip((-vals).tolist(), seq[chunk].tolist(), chunk.tolist(),
                            strict=True))
            done.sort()
            out: list[tuple[Hashable, float]] = []
            for nv, _, s in done:
                if -nv < level:
                    break
                e = ok.get(s)
                if e is None:
                    e = ok[s] = eligible is None or bool(eligible(ids[s]))
                if e:
                    out.append((ids[s], -nv))
                    if len(out) == k:
                        break
            nxt = float(ub[order[i]]) if i < n else -math.inf
            if len(out) == k:
                if out[-1][1] > nxt:  # no page left can reach (or tie) the k-th value
                    return out
            elif nxt < level:
                return None
        return None

