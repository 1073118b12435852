"""CrawlIndex == brute-force argmax of crawl_value (Algorithm 1 of paper 004, App. F tiers).

Over 600 lines on purpose: every operation of the one data structure against the same
brute-force reference and generators.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.index import CrawlIndex
from models.values import crawl_value, signal_params


class BruteForce:
    """Reference: evaluate every page, argmax with ties by insertion order."""

    def __init__(self, terms: int | None = None) -> None:
        self.pages: dict[int, list[float]] = {}
        self.seq: dict[int, int] = {}
        self.terms = terms
        self._n = 0

    def upsert(self, pid: int, origin: float, a: float, b: float, g: float, mu: float) -> None:
        if pid not in self.pages:
            self.seq[pid] = self._n
            self._n += 1
        self.pages[pid] = [origin, a, b, g, mu]

    def remove(self, pid: int) -> None:
        del self.pages[pid]
        del self.seq[pid]

    def best(self, now: float, eligible=None, k: int = 1) -> list[tuple[int, float]]:
        ids = list(self.pages)
        arr = np.array([self.pages[i] for i in ids])
        tau = np.maximum(now - arr[:, 0], 0.0)
        v = crawl_value(tau, arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], terms=self.terms)
        order = sorted(range(len(ids)), key=lambda j: (-v[j], self.seq[ids[j]]))
        out = [(ids[j], float(v[j])) for j in order if eligible is None or eligible(ids[j])]
        return out[:k]


def _random_params(rng: np.random.Generator, m: int) -> np.ndarray:
    delta = rng.uniform(0.01, 1.0, m)
    mu = rng.uniform(0.01, 1.0, m)
    lam = rng.beta(0.25, 0.25, m)
    nu = rng.uniform(0.1, 0.6, m)
    kind = rng.integers(0, 3, m)  # 0: NCIS, 1: no signals (Greedy), 2: noiseless (CIS)
    nu = np.where(kind == 2, 0.0, nu)
    lam = np.where(kind == 1, 0.0, lam)
    a, b, g = signal_params(delta, lam, np.where(kind == 1, 0.0, nu))
    return np.column_stack([a, b, g, mu])


def _run(seed: int, *, m: int, slots: int, terms: int | None, levels=None, k: int = 1,
         with_eligible: bool = False, hosts: int = 0,
         both: bool = False, planned: int = 0,
         batch_pings: bool = False, dense: bool = False) -> tuple[CrawlIndex, int]:
    rng = np.random.default_rng(seed)
    R = 10.0
    params = _random_params(rng, m)
    idx = CrawlIndex(levels, terms=terms, hot_target=4, dense=dense)
    ref = BruteForce(terms)
    origin = {i: -rng.uniform(0, 5) for i in range(m)}
    for i in range(m):
        a, b, g, mu = params[i]
        idx.upsert(i, origin=origin[i], alpha=a, beta=b, gamma=g, mu=mu,
                   host=(i % hosts) if hosts else None)
        ref.upsert(i, origin[i], a, b, g, mu)
    if planned:
        idx.plan(np.arange(1, slots + 1) / R, window=planned)
    next_id = m
    live = set(range(m))
    checks = 0
    for j in range(1, slots + 1):
        t = j / R
        # pings: each live page with prob 0.05 per slot
        pinged: list[int] = []
        for p in sorted(live):
            if rng.random() < 0.05:
                a, b, g, mu = ref.pages[p][1:]
                if g == 0:
                    continue
                o = -math.inf if b == math.inf else ref.pages[p][0] - b
                if batch_pings:
                    pinged.append(p)
                else:
                    idx.set_origin(p, o)
                ref.pages[p][0] = o
        if pinged:  # all of the slot's pings in one call
            idx.set_origins(pinged, [ref.pages[p][0] for p in pinged])
        # occasional parameter change, removal, insertion
        u = rng.random()
        if u < 0.05:
            p = int(rng.choice(sorted(live)))
            a, b, g, mu = _random_params(rng, 1)[0]
            o = ref.pages[p][0]
            idx.upsert(p, origin=o, alpha=a, beta=b, gamma=g, mu=mu)
            ref.upsert(p, o, a, b, g, mu)
        elif u < 0.08 and len(live) > 5:
            p = int(rng.choice(sorted(live)))
            idx.remove(p)
            ref.remove(p)
            live.discard(p)
        elif u < 0.11:
            a, b, g, mu = _random_params(rng, 1)[0]
            idx.upsert(next_id, origin=t, alpha=a, beta=b, gamma=g, mu=mu,
                       host=(next_id % hosts) if hosts else None)
            ref.upsert(next_id, t, a, b, g, mu)
            live.add(next_id)
            next_id += 1
        if planned and j % 7 == 0:
            # a query between planned times evaluates directly (nothing crawled)
            off = t - 0.5 / R
            got_off = idx.best(off, k=k)
            want_off = ref.best(off, k=k)
            assert [p for p, _ in got_off] == [p for p, _ in want_off], (seed, j)
        elig = None
        if with_eligible:
            salt = int(rng.integers(0, 1 << 30))
            elig = lambda p, salt=salt: (hash((p, salt)) % 3) != 0  # noqa: E731
        if hosts:
            # a random subset of hosts has a token; the index filters by host
            ok_hosts = {h for h in range(hosts) if rng.random() < 0.4}
            elig_page = elig
            got = idx.best(t, eligible=elig_page if both else None,
                           eligible_host=lambda h, ok=ok_hosts: h in ok, k=k)

            def elig(p: int, ok=ok_hosts, inner=elig_page) -> bool:
                return p % hosts in ok and (not both or inner is None or inner(p))

            want = ref.best(t, eligible=elig, k=k)
        else:
            got = idx.best(t, eligible=elig, k=k)
            want = ref.best(t, eligible=elig, k=k)
        assert [p for p, _ in got] == [p for p, _ in want], (seed, j)
        np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-12)
        checks += 1
        for p, _ in got[:1]:  # crawl the best page
            idx.set_origin(p, t)
            ref.pages[p][0] = t
    return idx, checks


@pytest.mark.parametrize("seed", range(4))
def test_best_matches_brute_force_exact_ncis(seed: int) -> None:
    idx, checks = _run(seed, m=25, slots=250, terms=None)
    assert checks == 250
    # the index did not degenerate into a scan per query
    assert idx.stats.full_scans < 0.3 * idx.stats.queries


@pytest.mark.parametrize(
    "kw",
    [dict(seed=400, m=25, slots=250, terms=None),
     dict(seed=401, m=40, slots=200, terms=None, batch_pings=True),
     dict(seed=402, m=20, slots=150, terms=2),
     dict(seed=403, m=25, slots=150, terms=None, k=3, with_eligible=True),
     dict(seed=404, m=30, slots=200, terms=None, hosts=6),
     dict(seed=405, m=30, slots=150, terms=None, k=2, with_eligible=True, hosts=5,
          both=True),
     dict(seed=406, m=30, slots=200, terms=None, planned=5),
     dict(seed=407, m=60, slots=150, terms=None, batch_pings=True, planned=4),
     dict(seed=408, m=25, slots=150, terms=None, levels=[0.05, 0.2, 0.5, 1.0, 2.0])],
)
def test_dense_keys_match_brute_force(kw: dict) -> None:
    """dense=True (keys in an array, no heap) gives the brute-force picks, with pings,
    removals, insertions, parameter changes, hosts, planned times and level changes."""
    idx, checks = _run(dense=True, **kw)
    assert checks == kw["slots"]
    assert not idx._heap  # nothing went through the heap
    assert idx.stats.full_scans < 0.5 * idx.stats.queries


@pytest.mark.parametrize("terms", [1, 2])
def test_best_matches_brute_force_approx(terms: int) -> None:
    _run(10 + terms, m=20, slots=150, terms=terms)


def test_best_with_eligible_filter_and_k() -> None:
    _run(21, m=25, slots=150, terms=None, k=3, with_eligible=True)


def test_coarse_levels_force_level_changes() -> None:
    idx, _ = _run(31, m=25, slots=150, terms=None, levels=[1e-3, 1e-2, 0.1, 1.0, 10.0])
    assert idx.stats.level_changes >= 1


def test_ties_broken_by_insertion_order() -> None:
    idx = CrawlIndex()
    for p in ["b", "a", "c"]:
        idx.upsert(p, origin=0.0, alpha=0.5, beta=0.0, gamma=0.0, mu=1.0)
    assert [p for p, _ in idx.best(3.0, k=3)] == ["b", "a", "c"]
    idx.set_origin("b", 1.0)
    assert [p for p, _ in idx.best(3.0, k=2)] == ["a", "c"]


def test_noiseless_ping_gives_value_at_infinity() -> None:
    idx = CrawlIndex()
    a, b, g = signal_params(0.5, 0.6, 0.0)
    idx.upsert("p", origin=0.0, alpha=float(a), beta=float(b), gamma=float(g), mu=2.0)
    idx.upsert("q", origin=0.0, alpha=0.5, beta=0.0, gamma=0.0, mu=1.0)
    idx.set_origin("p", -math.inf)
    (pid, v), = idx.best(0.1)
    assert pid == "p"
    assert v == pytest.approx(2.0 / 0.5, rel=1e-12)
    assert idx.time_to_reach("p", 1.0) == -math.inf


def test_time_to_reach_inverts_value() -> None:
    idx = CrawlIndex()
    a, b, g = signal_params(0.7, 0.4, 0.3)
    idx.upsert(7, origin=2.0, alpha=float(a), beta=float(b), gamma=float(g), mu=1.5)
    t = idx.time_to_reach(7, 0.5)
    assert idx.value(7, t) == pytest.approx(0.5, rel=1e-9)
    assert idx.time_to_reach(7, 1.5 / 0.7 + 1e-9) == math.inf


def test_remove_and_contains() -> None:
    idx = CrawlIndex()
    idx.upsert(1, origin=0.0, alpha=1.0, beta=0.0, gamma=0.0, mu=1.0)
    idx.upsert(2, origin=0.0, alpha=0.1, beta=0.0, gamma=0.0, mu=1.0)
    assert idx.best(5.0)[0][0] == 1
    idx.remove(1)
    assert 1 not in idx and 2 in idx and len(idx) == 1
    assert idx.best(6.0)[0][0] == 2
    assert idx.best(6.0, eligible=lambda p: False) == []


def test_bad_arguments() -> None:
    idx = CrawlIndex()
    with pytest.raises(ValueError, match="alpha"):
        idx.upsert(1, origin=0.0, alpha=-1.0, beta=0.0, gamma=0.0, mu=1.0)
    with pytest.raises(ValueError, match="origin"):
        idx.upsert(1, origin=math.nan, alpha=1.0, beta=0.0, gamma=0.0, mu=1.0)
    with pytest.raises(ValueError, match="levels"):
        CrawlIndex([1.0, 0.5])


@pytest.mark.parametrize("seed", range(3))
def test_best_with_host_eligibility_matches_brute_force(seed: int) -> None:
    idx, checks = _run(40 + seed, m=30, slots=200, terms=None, hosts=6)
    assert checks == 200
    # an ineligible host costs a scan of the eligible hosts, not a full scan + re-level
    assert idx.stats.full_scans < 0.3 * idx.stats.queries


def test_best_with_host_and_page_eligibility_and_k() -> None:
    _run(50, m=30, slots=150, terms=None, k=2, with_eligible=True, hosts=5, both=True)


def test_best_with_host_eligibility_approx() -> None:
    _run(51, m=20, slots=120, terms=1, hosts=4)


def test_iota_cache_reused_when_a_level_is_revisited() -> None:
    """Revisiting a working level reuses its cached inverses (no new root finding)."""
    idx, _ = _run(60, m=25, slots=50, terms=None)
    lv = idx._level_idx
    idx._set_level(max(lv - 3, 0), 5.0)
    before = idx.stats.iota_computed
    idx._set_level(lv, 5.0)
    idx._set_level(max(lv - 3, 0), 5.0)
    assert idx.stats.iota_computed == before
    got = idx.best(5.0)
    ref = [(p, idx.value(p, 5.0)) for p in idx]
    assert got[0][1] == max(v for _, v in ref)


@pytest.mark.parametrize(("seed", "window"), [(70, 16), (71, 5), (72, 1)])
def test_planned_times_match_brute_force(seed: int, window: int) -> None:
    """Values cached over a window of planned slot times give the same picks and values."""
    _, checks = _run(seed, m=30, slots=200, terms=None, planned=window)
    assert checks == 200


def test_planned_times_with_hosts_and_approx() -> None:
    _run(73, m=25, slots=150, terms=2, hosts=4, planned=8)


def test_plan_rejects_bad_times() -> None:
    idx = CrawlIndex()
    with pytest.raises(ValueError):
        idx.plan([1.0, 1.0])
    with pytest.raises(ValueError):
        idx.plan([1.0, 2.0], window=0)


@pytest.mark.parametrize("seed", range(3))
def test_batch_pings_match_brute_force(seed: int) -> None:
    # set_origins (one call per slot) keeps pinged candidates hot: same picks
    _, checks = _run(300 + seed, m=60, slots=150, terms=None, batch_pings=True,
                     planned=4 if seed else 0)
    assert checks == 150


@pytest.mark.parametrize("dense", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_set_origins_page_by_page_equals_the_array_path(seed: int, dense: bool) -> None:
    """A few pages re-keyed one at a time (``_set_few``) leave the index exactly as the
    array path does: the same origins, keys, hot and pending sets, and the same picks."""
    rng = np.random.default_rng(seed)
    m = 200
    params = _random_params(rng, m)
    few, arr = CrawlIndex(dense=dense), CrawlIndex(dense=dense)
    arr._few_max = 0  # every call through the array path
    for idx in (few, arr):
        for i, (a, b, g, mu) in enumerate(params):
            idx.upsert(i, origin=0.0, alpha=a, beta=b, gamma=g, mu=mu)
    origin = np.zeros(m)
    for step in range(300):
        t = 0.05 * (step + 1)
        n = int(rng.integers(1, 9))
        pages = rng.choice(m, size=n, replace=False)
        moved = []
        for p in pages.tolist():
            b = params[p][1]
            if rng.random() < 0.2:  # a crawl: the origin moves forward
                origin[p] = t
            else:  # a ping: back by beta (-inf for a noiseless one)
                origin[p] = -math.inf if b == math.inf else origin[p] - b
            moved.append(p)
        for idx in (few, arr):
            idx.set_origins(np.array(moved), origin[moved])
        if step % 3 == 0:
            k = int(rng.integers(1, 6))
            got_few, got_arr = few.best(t, k=k), arr.best(t, k=k)
            assert got_few == got_arr, step
        assert np.array_equal(few._origin, arr._origin)
        assert np.array_equal(few._keys, arr._keys)
        assert few._hot == arr._hot and few._pending == arr._pending, step
        assert sorted(few._heap) == sorted(arr._heap)


def test_set_origins_rejects_bad_input() -> None:
    idx = CrawlIndex()
    idx.upsert("a", origin=0.0, alpha=0.5, beta=1.0, gamma=0.5, mu=1.0)
    idx.upsert("b", origin=0.0, alpha=0.5, beta=1.0, gamma=0.5, mu=1.0)
    with pytest.raises(ValueError, match="length"):
        idx.set_origins(["a", "b"], [0.0])
    idx.set_origins(["a", "a"], [0.0, -1.0])  # a page given twice: the last origin
    assert idx.origin("a") == -1.0
    with pytest.raises(ValueError, match="-inf"):
        idx.set_origins(["a"], [math.nan])
    with pytest.raises(KeyError):
        idx.set_origins(["zz"], [0.0])


def test_set_origins_with_int_ids_takes_the_array_fast_path() -> None:
    # ids 0..n-1 in order: an int array of ids is used as slots; a missing id still fails
    a = CrawlIndex()
    b = CrawlIndex()
    for idx in (a, b):
        for i in range(5):
            idx.upsert(i, origin=0.0, alpha=0.3 + 0.1 * i, beta=1.0, gamma=0.5, mu=1.0)
    a.set_origins(np.array([3, 1]), [-2.0, -4.0])
    b.set_origins([3, 1], [-2.0, -4.0])
    assert [a.origin(i) for i in range(5)] == [b.origin(i) for i in range(5)]
    assert a.best(1.0, k=5) == b.best(1.0, k=5)
    with pytest.raises(KeyError):
        a.set_origins(np.array([7]), [0.0])
    a.remove(4)  # removal ends the fast path: ids are looked up again
    with pytest.raises(KeyError):
        a.set_origins(np.array([4]), [0.0])


@pytest.mark.parametrize("dense", [False, True])
def test_upsert_many_equals_upsert_one_at_a_time(dense: bool) -> None:
    """A rebuild's bulk insert: the same answers as one upsert per page, for new pages
    before and after the index has a working level, and for pages already there."""
    rng = np.random.default_rng(5)
    n = 400
    delta = rng.uniform(0.01, 1.0, n)
    alpha, gamma = delta * 0.6, delta * 0.4 + 0.05
    beta = np.log(gamma / 0.05) / alpha
    beta[::17] = np.inf  # noiseless sources
    mu = rng.uniform(0.1, 2.0, n)
    origin = rng.uniform(-50, 0, n)
    origin[::23] = -np.inf
    hosts = [f"h{int(h)}" for h in rng.integers(0, 20, n)]
    one, bulk = CrawlIndex(dense=dense), CrawlIndex(dense=dense)

    def load(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            one.upsert(f"p{i}", origin=float(origin[i]), alpha=float(alpha[i]),
                       beta=float(beta[i]), gamma=float(gamma[i]), mu=float(mu[i]),
                       host=hosts[i])
        bulk.upsert_many([f"p{i}" for i in range(lo, hi)], hosts[lo:hi], origin[lo:hi],
                         alpha[lo:hi], beta[lo:hi], gamma[lo:hi], mu[lo:hi])

    def same(now: float) -> None:
        for k in (1, 7):
            assert one.best(now, k=k) == bulk.best(now, k=k)
        ok = {f"h{i}" for i in range(0, 20, 3)}
        assert (one.best(now, k=5, eligible_host=ok.__contains__)
                == bulk.best(now, k=5, eligible_host=ok.__contains__))

    load(0, 200)  # no level yet
    same(10.0)
    load(200, 350)  # new pages after the first query: pending for their keys
    same(20.0)
    origin[:50] += 5.0  # pages already there: the page-by-page path
    load(0, 50)
    load(350, 400)
    for now in (30.0, 60.0, 500.0):
        same(now)
    assert len(one) == len(bulk) == n
    with pytest.raises(ValueError, match="alpha"):
        bulk.upsert_many(["x"], None, [0.0], [np.nan], [1.0], [0.0], [1.0])


# -- the host x page index (models.decision.hostindex) ---------------------------------------

def _capped_brute(pages: dict[int, list[float]], host: dict[int, str], rank: dict[int, int],
                  now: float, k: int, room: dict[str, int]) -> list[tuple[int, float]]:
    """Greedy top k under per-host caps over all pages, evaluated one by one."""
    ids = list(pages)
    arr = np.array([pages[i] for i in ids])
    v = crawl_value(np.maximum(now - arr[:, 0], 0.0), arr[:, 1], arr[:, 2], arr[:, 3],
                    arr[:, 4])
    order = sorted(range(len(ids)), key=lambda j: (-v[j], rank[ids[j]]))
    used: dict[str, int] = {}
    out = []
    for j in order:
        p = ids[j]
        h = host[p]
        if v[j] > 0.0 and used.get(h, 0) < room.get(h, 0) and len(out) < k:
            used[h] = used.get(h, 0) + 1
            out.append((p, float(v[j])))
    return out


def _orders_leave_and_come_back(rng: np.random.Generator, idx, got, pages: dict,
                                out_pages: dict, rank: dict, n_rank: int, now: float) -> int:
    """Some of a query's picks leave (orders out); about half of the pages out come back
    crawled at ``now`` (an outcome), inserted again with a new rank.  The next rank."""
    for p, _ in got[: int(rng.integers(0, len(got) + 1))]:
        idx.remove(p)
        out_pages[p] = pages.pop(p)[1:]
    for p in list(out_pages):
        if rng.random() < 0.5:
            a, b, g, mu = out_pages.pop(p)
            idx.upsert(p, origin=now, alpha=a, beta=b, gamma=g, mu=mu)
            pages[p] = [now, a, b, g, mu]
            rank[p] = n_rank
            n_rank += 1
    return n_rank


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("window_s", [0.05, 3.0])
def test_host_index_capped_pick_matches_brute_force(seed: int, window_s: float) -> None:
    """Many hosts, tight caps (0-2), pages taken (in flight) and back with a new origin,
    pings moving origins back, parameter changes, parked hosts coming back, time running
    past the bounds' windows: every query equals the brute-force greedy."""
    from models.decision.hostindex import HostIndex

    rng = np.random.default_rng(100 + seed)
    m, H = 300, 40
    params = _random_params(rng, m)
    idx = HostIndex(window_s=window_s)
    pages: dict[int, list[float]] = {}
    host = {i: f"h{int(rng.integers(0, H))}" for i in range(m)}
    rank: dict[int, int] = {}
    n_rank = 0
    out_pages: dict[int, list[float]] = {}  # in flight: their parameters
    for i in range(m):
        o = float(rng.uniform(-30, 0))
        idx.upsert(i, origin=o, alpha=params[i, 0], beta=params[i, 1], gamma=params[i, 2],
                   mu=params[i, 3], host=host[i])
        pages[i] = [o, *params[i]]
        rank[i] = n_rank
        n_rank += 1
    parked: set[str] = set()
    now = 0.0
    for step in range(60):
        now += float(rng.choice([0.01, 0.2, 1.0, 7.0]))
        room = {h: int(rng.integers(0, 3)) for h in sorted(set(host.values()))}
        for h in list(parked):  # a parked host comes back when it has room again
            if room[h] > 0:
                idx.unpark(h)
                parked.discard(h)
        k = int(rng.choice([1, 3, 10, 50]))
        newly: list[str] = []

        def park(h: object, newly: list[str] = newly) -> None:
            newly.append(str(h))

        got = idx.best_capped(now, k, lambda h, room=room: room.get(str(h), 0), park=park)
        live = {p: v for p, v in pages.items() if host[p] not in parked}
        want = _capped_brute(live, host, rank, now, k, room)
        assert [p for p, _ in got] == [p for p, _ in want], step
        np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-12)
        parked.update(newly)
        assert all(room[h] == 0 for h in newly)
        n_rank = _orders_leave_and_come_back(rng, idx, got, pages, out_pages, rank, n_rank,
                                             now)
        for p in rng.choice(list(pages), size=min(len(pages), 8), replace=False).tolist():
            if rng.random() < 0.7:  # a ping: the origin moves back
                o = pages[p][0] - float(rng.uniform(0, 20))
                idx.set_origin(p, o)
                pages[p][0] = o
            else:  # new estimates
                a, b, g, mu = _random_params(rng, 1)[0]
                idx.upsert(p, origin=pages[p][0], alpha=a, beta=b, gamma=g, mu=mu)
                pages[p] = [pages[p][0], a, b, g, mu]
        if step % 20 == 7:  # a page gone for good, a new page on a new host
            p = int(rng.choice(list(pages)))
            idx.forget(p)
            del pages[p]
            q = m + step
            host[q] = f"new{step}"
            idx.upsert(q, origin=now - 5.0, alpha=0.5, beta=1.0, gamma=0.3, mu=1.0,
                       host=host[q])
            pages[q] = [now - 5.0, 0.5, 1.0, 0.3, 1.0]
            rank[q] = n_rank
            n_rank += 1
        assert len(idx) == len(pages)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n_classes, max_room", [((1, 4), 4), ((8, 30), 12)])
def test_host_index_capped_pick_among_alike_pages_matches_brute_force(
        seed: int, n_classes: tuple[int, int], max_room: int) -> None:
    """Hosts of many pages that share parameter sets and last crawls (runs of identical
    pages: the tie goes to the page inserted first, and the walk keeps only a run's first
    ``room`` entries), so a query walks deep into each host's order in blocks of more
    than 16 pages (with many sets, blocks holding several runs), with rooms of
    0-``max_room`` and pages leaving and coming back: every query equals the brute-force
    greedy."""
    from models.decision.hostindex import HostIndex

    rng = np.random.default_rng(300 + seed)
    H, per_host = 12, 80
    idx = HostIndex(window_s=float(rng.choice([0.05, 3.0])))
    pages: dict[int, list[float]] = {}
    host: dict[int, str] = {}
    rank: dict[int, int] = {}
    n_rank = 0
    for h in range(H):
        classes = _random_params(rng, int(rng.integers(*n_classes)))
        origins = -rng.uniform(1.0, 30.0, len(classes))
        for i in range(h * per_host, (h + 1) * per_host):
            c = int(rng.integers(0, len(classes)))
            o = float(origins[c])
            a, b, g, mu = classes[c]
            host[i] = f"h{h}"
            idx.upsert(i, origin=o, alpha=a, beta=b, gamma=g, mu=mu, host=host[i])
            pages[i] = [o, a, b, g, mu]
            rank[i] = n_rank
            n_rank += 1
    out_pages: dict[int, list[float]] = {}
    now = 0.0
    for step in range(25):
        now += float(rng.choice([0.01, 0.5, 4.0]))
        room = {f"h{h}": int(rng.integers(0, max_room + 1)) for h in range(H)}
        k = int(rng.choice([1, 5, 20, 200]))
        got = idx.best_capped(now, k, lambda h, room=room: room.get(str(h), 0))
        want = _capped_brute(pages, host, rank, now, k, room)
        assert [p for p, _ in got] == [p for p, _ in want], step
        np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-12)
        n_rank = _orders_leave_and_come_back(rng, idx, got, pages, out_pages, rank, n_rank,
                                             now)


def test_host_index_run_of_alike_pages_across_a_block_end_is_not_skipped() -> None:
    """Three runs of identical pages on one host, in bound order B, C, A while the exact
    values at ``now`` are A > B > C (their curves cross inside the window): the walk's
    second block (an array) holds all of C and only the first 8 of A, fewer than the
    host's room of 12, so A must not be skipped past the block's end.  The picks are the
    first 12 of A, as the brute force says."""
    from models.decision.hostindex import HostIndex

    window = 100.0
    idx = HostIndex(window_s=window)
    runs = {"B": (16, 0.01, 1.0), "C": (44, 0.01, 0.5), "A": (30, 1.0, 5.0)}
    pages: dict[int, list[float]] = {}
    rank: dict[int, int] = {}
    for count, a, mu in runs.values():
        for _ in range(count):
            p = len(pages)
            idx.upsert(p, origin=-10.0, alpha=a, beta=1.0, gamma=0.0, mu=mu, host="h")
            pages[p] = [-10.0, a, 1.0, 0.0, mu]
            rank[p] = p
    first = {name: next(p for p in pages if pages[p][1:] == [a, 1.0, 0.0, mu])
             for name, (_, a, mu) in runs.items()}

    def v(name: str, t: float) -> float:
        o, a, b, g, mu = pages[first[name]]
        return float(crawl_value(np.array([t - o]), np.array([a]), np.array([b]),
                                 np.array([g]), np.array([mu]))[0])

    # the set-up this test is about: bounds (at now + window) B > C > A, values A > B > C
    assert v("B", window) > v("C", window) > v("A", window)
    assert v("A", 0.0) > v("B", 0.0) > v("C", 0.0)
    got = idx.best_capped(0.0, 12, lambda h: 12)
    want = _capped_brute(pages, dict.fromkeys(pages, "h"), rank, 0.0, 12, {"h": 12})
    assert [p for p, _ in got] == [p for p, _ in want] == list(range(60, 72))


@pytest.mark.parametrize("bulk", [False, True])
def test_host_index_slot_back_on_its_host_is_one_page(bulk: bool) -> None:
    """A page forgotten, its slot reused by a new page on the same host, and a page moved
    to another host and back: each is still one candidate (never picked twice), with or
    without a refresh in between, one by one or in bulk."""
    from models.decision.hostindex import HostIndex

    idx = HostIndex(window_s=1.0)

    def put(pages: list[str], host: str, origin: float) -> None:
        if bulk:
            m = len(pages)
            idx.upsert_many(pages, [host] * m, [origin] * m, [0.5] * m, [1.0] * m,
                            [0.0] * m, [1.0] * m)
        else:
            for p in pages:
                idx.upsert(p, origin=origin, alpha=0.5, beta=1.0, gamma=0.0, mu=1.0,
                           host=host)

    put(["a", "b", "c"], "h", -10.0)
    assert [p for p, _ in idx.best_capped(0.0, 10, lambda h: 10)] == ["a", "b", "c"]
    idx.forget("b")
    put(["d"], "h", -20.0)  # b's slot, again on h
    put(["c"], "g", -10.0)  # c to another host ...
    assert sorted(p for p, _ in idx.best_capped(1.0, 10, lambda h: 10)) == ["a", "c", "d"]
    put(["c"], "h", -30.0)  # ... and back
    got = [p for p, _ in idx.best_capped(2.0, 10, lambda h: 10)]
    assert got == ["c", "d", "a"]


@pytest.mark.parametrize("seed", range(3))
def test_host_index_upsert_many_of_pages_there_equals_upsert_one_at_a_time(seed: int) -> None:
    """A batch of events re-keys pages already in the index (the arrays' path of
    ``upsert_many``), or mixes in pages back from flight and new pages (one upsert each):
    the same picks as one upsert per page, and as the brute-force greedy."""
    from models.decision.hostindex import HostIndex

    rng = np.random.default_rng(300 + seed)
    m, H = 240, 30
    params = _random_params(rng, m)
    one, bulk = HostIndex(window_s=1.0), HostIndex(window_s=1.0)
    pages: dict[int, list[float]] = {}
    host = {i: f"h{int(rng.integers(0, H))}" for i in range(m)}
    rank: dict[int, int] = {}
    for i in range(m):
        o = float(rng.uniform(-30, 0))
        for idx in (one, bulk):
            idx.upsert(i, origin=o, alpha=params[i, 0], beta=params[i, 1],
                       gamma=params[i, 2], mu=params[i, 3], host=host[i])
        pages[i] = [o, *params[i]]
        rank[i] = i
    n_rank, out = m, set()
    now = 0.0
    for step in range(30):
        now += float(rng.choice([0.05, 0.5, 3.0]))
        mixed = step % 2 == 1
        batch = [int(p) for p in rng.choice(sorted(pages), size=25, replace=False)]
        if mixed:
            batch += sorted(out)[:3]  # pages back from flight
            q = m + step
            host[q] = f"h{step % H}"
            batch.append(q)  # a new page
        new = _random_params(rng, len(batch))
        origin = [pages[p][0] if p in pages else now for p in batch]
        origin = [o - float(rng.uniform(0, 5)) for o in origin]
        for p, o, (a, b, g, mu) in zip(batch, origin, new, strict=True):
            one.upsert(p, origin=o, alpha=a, beta=b, gamma=g, mu=mu, host=host[p])
        bulk.upsert_many(batch, [host[p] for p in batch], origin, new[:, 0], new[:, 1],
                         new[:, 2], new[:, 3])
        for p, o, row in zip(batch, origin, new, strict=True):
            if p not in pages:
                rank[p] = n_rank
                n_rank += 1
            pages[p] = [o, *row]
            out.discard(p)
        room = {h: int(rng.integers(0, 3)) for h in sorted(set(host.values()))}
        k = int(rng.choice([1, 5, 40]))
        got = bulk.best_capped(now, k, lambda h, room=room: room.get(str(h), 0),
                               park=lambda h: None)
        ref = one.best_capped(now, k, lambda h, room=room: room.get(str(h), 0),
                              park=lambda h: None)
        want = _capped_brute(pages, host, rank, now, k, room)
        assert got == ref, step
        assert [p for p, _ in got] == [p for p, _ in want], step
        for p, _ in got[:2]:  # orders leave
            one.remove(p)
            bulk.remove(p)
            del pages[p]
            out.add(p)
        for h in sorted(set(host.values())):  # the parked hosts have room again
            for idx in (one, bulk):
                idx.unpark(h)
    assert len(one) == len(bulk) == len(pages)


def test_host_index_best_includes_parked_hosts_and_filters() -> None:
    from models.decision.hostindex import HostIndex

    rng = np.random.default_rng(5)
    m = 200
    params = _random_params(rng, m)
    idx = HostIndex(window_s=1.0)
    bf = BruteForce()
    for i in range(m):
        o = float(rng.uniform(-20, 0))
        idx.upsert(i, origin=o, alpha=params[i, 0], beta=params[i, 1], gamma=params[i, 2],
                   mu=params[i, 3], host=f"h{i % 17}")
        bf.upsert(i, o, *params[i])
    # every host parked by a query that finds no room anywhere
    assert idx.best_capped(1.0, 5, lambda h: 0, park=lambda h: None) == []
    assert all(idx.is_parked(f"h{j}") for j in range(17))
    for now in (1.0, 4.0, 30.0):
        for k in (1, 7):
            got = idx.best(now, k=k)
            want = [(p, v) for p, v in bf.best(now, k=k) if v > 0]
            assert [p for p, _ in got] == [p for p, _ in want]
        ev = idx.best(now, k=5, eligible=lambda p: p % 2 == 0,
                      eligible_host=lambda h: h != "h3")
        want = [(p, v) for p, v in bf.best(now, k=m) if v > 0 and p % 2 == 0
                and p % 17 != 3][:5]
        assert [p for p, _ in ev] == [p for p, _ in want]


def test_host_index_rejects_bad_input() -> None:
    from models.decision.hostindex import HostIndex

    idx = HostIndex()
    with pytest.raises(ValueError, match="origin"):
        idx.upsert(1, origin=math.nan, alpha=1, beta=1, gamma=1, mu=1, host="h")
    with pytest.raises(ValueError, match="alpha"):
        idx.upsert(1, origin=0.0, alpha=-1, beta=1, gamma=1, mu=1, host="h")
    with pytest.raises(ValueError, match="window_s"):
        HostIndex(window_s=0.0)
    with pytest.raises(ValueError, match="k must be"):
        idx.best_capped(0.0, 0, lambda h: 1)
    idx.upsert(1, origin=0.0, alpha=1, beta=1, gamma=1, mu=1, host="h")
    idx.remove(1)
    assert 1 not in idx and len(idx) == 0
    with pytest.raises(KeyError):
        idx.remove(1)
    idx.forget(1)
    idx.forget(1)  # unknown: ignored
