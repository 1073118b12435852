"""The budget split's controller in a closed loop: simulated workers whose shards hold
pages with growing crawl values (models.sim.scaleout.simulate_split with books), the
service's own rule (models.decision.budget) and the real credit pacer.  The shares settle
without a swing; a dead worker's share moves to the live ones within about a second; a
worker that is loading keeps its place in the split."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.decision import budget
from models.sim.scaleout import Pages, SimResult, Worker, simulate_split

RESPLIT_S = 0.25
ALIVE_S = 0.8


def _books(pages: dict[int, int], seed: int) -> dict[int, Pages]:
    """Pages of importance ~ lognormal(0, 1) changing every 1 min to 1 h (log-uniform):
    never crawled at the start, so the first pass crawls pages worth ``mu / delta``."""
    rng = np.random.default_rng(seed)
    return {p: Pages(rng.lognormal(0.0, 1.0, n),
                     np.exp(rng.uniform(math.log(1 / 3600), math.log(1 / 60), n)))
            for p, n in pages.items()}


def _run(shards: list[dict[int, int]], rate: float, duration_s: float, *, seed: int = 1,
         fixed_turnover_s: float | None = None, **kw: object) -> SimResult:
    ws = [Worker(i, {p: 0.0 for p in s}, resplit_phase_s=0.07 * i, beat_phase_s=0.03 * i)
          for i, s in enumerate(shards)]
    for w, extra in zip(ws, kw.pop("workers", [{}] * len(ws)), strict=True):  # type: ignore[call-overload]
        for k, v in extra.items():
            setattr(w, k, v)
    books = _books({p: n for s in shards for p, n in s.items()}, seed)
    return simulate_split(ws, rate, duration_s, resplit_s=RESPLIT_S, alive_s=ALIVE_S,
                          books=books, fixed_turnover_s=fixed_turnover_s, **kw)  # type: ignore[arg-type]


def _fractions(r: SimResult, worker: int, a: float, b: float) -> list[float]:
    return [s[worker] / sum(s.values()) for t, s, _ in r.split if a <= t < b]


CASES = [
    # (pages per worker's shards, R): turnover pages / R + 2.25 s
    ([{0: 200}, {1: 200}], 40.0),            # 12 s
    ([{0: 100}, {1: 300}], 10.0),            # 42 s
    ([{0: 100}, {1: 100}, {2: 200}], 20.0),  # 22 s, three workers
]


@pytest.mark.parametrize(("shards", "rate"), CASES)
def test_the_split_settles_without_a_swing(shards: list[dict[int, int]],
                                           rate: float) -> None:
    """Over 240 s from a cold start: every worker's share of R settles within 3 turnovers
    of the books (then stays within +-20% of where it ends), never overshoots by more than
    a factor 2 beyond the way from its first resplits to there, and the thresholds end
    within 2x of each other.  With a gain fixed per second (0.5/s, as if the turnover
    were 1 s) the same loop swings: some worker's share moves by more than 3x over the
    last 120 s."""
    duration = 240.0
    pages = sum(n for s in shards for n in s.values())
    turnover = budget.turnover_s(pages, rate, 2.0 + RESPLIT_S)
    r = _run(shards, rate, duration)
    assert r.rate(5.0, duration) == pytest.approx(rate, rel=0.01)
    settled = []
    for w in range(len(shards)):
        end = float(np.mean(_fractions(r, w, duration - 60.0, duration)))
        series = [(t, s[w] / sum(s.values())) for t, s, _ in r.split]
        outside = [t for t, f in series if not 0.8 * end <= f <= 1.2 * end]
        settled_at = max(outside, default=0.0) + RESPLIT_S
        settled.append(settled_at)
        assert settled_at <= 3 * turnover, (w, settled_at, turnover, end)
        # overshoot: never beyond a factor 2 outside the way from where it was after the
        # first resplits to where it ends
        late = [f for t, f in series if t >= 2.0]
        lo, hi = min(late[0], end) / 2.0, max(late[0], end) * 2.0
        assert lo <= min(late) and max(late) <= hi, (w, late[0], end, min(late), max(late))
    gaps = [max(th.values()) - min(th.values()) for t, _, th in r.split
            if t >= duration - 60.0 and len(th) == len(shards)]
    assert gaps and max(gaps) < math.log(2.0), [math.exp(g) for g in gaps]

    fixed = _run(shards, rate, duration, fixed_turnover_s=1.0)
    swings = []
    for w in range(len(shards)):
        f = _fractions(fixed, w, duration - 120.0, duration)
        swings.append(max(f) / min(f))
    swing = [max(f) / min(f) for f in (_fractions(r, w, duration - 120.0, duration)
                                         for w in range(len(shards)))]
    print(f"\n{[sum(s.values()) for s in shards]} pages, R = {rate:g}, turnover "
          f"{turnover:.1f} s: settled within 20% after {max(settled):.1f} s, last 120 s "
          f"max/min share {max(swing):.2f}, thresholds {math.exp(max(gaps)):.2f}x apart; "
          f"fixed 0.5/s: max/min share {max(swings):.1f}")
    assert max(swings) > 3.0, swings


def test_a_dead_workers_share_moves_within_a_second() -> None:
    """Three workers settled on their split; one dies at 100 s (loop and heartbeat at
    once): the two others spend all of R from ALIVE_S + one resplit later, and keep the
    ratio of their shares (the controller does not jump when the live set changes).
    Its partition moves after the session timeout (10 s), rebuilds, and the split
    settles again with it."""
    shards = [{0: 100}, {1: 100}, {2: 200}]
    kill = 100.0
    r = _run(shards, 20.0, 160.0, workers=[{}, {}, {"dead_at": kill}])
    before = {w: s[w] for t, s, _ in r.split if kill - 1.0 <= t < kill for w in (0, 1, 2)}
    took = min(t for t, s, _ in r.split
               if t >= kill and s[0] + s[1] == pytest.approx(20.0, rel=1e-3))
    assert took - kill <= ALIVE_S + 2 * RESPLIT_S, took - kill
    after = next(s for t, s, _ in r.split if t >= took)
    assert after[0] / after[1] == pytest.approx(before[0] / before[1], rel=0.05)
    # R is spent through the kill: what is lost is the dead worker's share for about as
    # long as its death takes to be seen (1.3 s), plus an order of each pacer's credit
    lost = 20.0 * 25.0 - r.rate(kill - 5.0, kill + 20.0) * 25.0
    assert lost <= before[2] * (ALIVE_S + 2 * RESPLIT_S) + 3, (lost, before[2])
    # the moved partition is spent again and the split settles with it
    assert r.rate(kill + 15.0, 160.0) == pytest.approx(20.0, rel=0.01)


def test_a_loading_worker_keeps_its_place_in_the_split() -> None:
    """Worker 1's shard is loading from 0 to 8 s with its loop stalled by the rebuild (its
    heartbeat keeps it alive): worker 0 spends all of R meanwhile; when the shard is ready
    worker 1 spends its share at once (its weight was not cut while it loaded: no
    threshold, no step), and the split settles as without the load."""
    shards = [{0: 200}, {1: 200}]
    r = _run(shards, 40.0, 120.0, workers=[{}, {"shards": {1: 8.0}, "stalls": [(0.0, 8.0)]}])
    during = [s[0] for t, s, _ in r.split if 1.0 <= t < 8.0]
    assert during and all(v == pytest.approx(40.0) for v in during), during
    back = [s[1] / 40.0 for t, s, _ in r.split if 8.0 + 2 * RESPLIT_S <= t < 10.0]
    assert back and min(back) > 0.4, back
    end = _fractions(r, 1, 60.0, 120.0)
    assert min(end) > 0.4 and max(end) < 0.6, (min(end), max(end))


def test_the_turnover_sets_the_gain() -> None:
    """One step moves a log-weight by gain / T * gap * dt (gap clipped to 2); no budget or
    no threshold: no move; a starved shard decays whatever the turnover."""
    t = budget.turnover_s(400, 10.0, 2.25)
    assert t == pytest.approx(42.25)
    w = budget.update_weight(1.0, 1.0, 0.0, gain=0.5, turnover_s=t, dt_s=0.25)
    assert math.log(w) == pytest.approx(0.5 / t * 1.0 * 0.25)
    w = budget.update_weight(1.0, 9.0, 0.0, gain=0.5, turnover_s=t, dt_s=0.25)
    assert math.log(w) == pytest.approx(0.5 / t * 2.0 * 0.25)
    assert budget.turnover_s(400, 0.0, 2.25) == math.inf
    assert budget.update_weight(2.0, 1.0, 0.0, gain=0.5, turnover_s=math.inf,
                                dt_s=0.25) == 2.0
    assert budget.update_weight(2.0, None, 0.0, gain=0.5, turnover_s=t, dt_s=0.25) == 2.0
    starved = budget.update_weight(1.0, 1.0, 0.0, gain=0.5, turnover_s=1e9, dt_s=0.25,
                                   starved=True)
    assert math.log(starved) == pytest.approx(-budget.STARVED_DECAY_PER_S * 0.25)


def test_the_threshold_average() -> None:
    """The first value sets it; then each order moves it by 1 / (share * average_s) of the
    log-gap; values that are not positive and finite leave it."""
    lt = budget.observe_value(None, math.e, 10.0, 2.0)
    assert lt == pytest.approx(1.0)
    lt = budget.observe_value(lt, math.e ** 3, 10.0, 2.0)
    assert lt == pytest.approx(1.0 + 2.0 / 20.0)
    assert budget.observe_value(lt, 0.0, 10.0, 2.0) == lt
    assert budget.observe_value(lt, math.inf, 10.0, 2.0) == lt
    assert budget.observe_value(None, math.nan, 10.0, 2.0) is None


def test_the_schedulers_resplit_paces_its_step_by_all_live_books_and_holds_when_paused(
) -> None:
    """``Scheduler.resplit`` (no Redis: a store holding the shard table in memory) moves
    its shard's weight by gain / T * gap * dt with T the turnover of every live shard's
    book (its own pages and the other workers' ``pages`` entries) over R, plus the
    threshold's lag; a dead worker's entry (older than SHARD_ALIVE_S) counts for
    nothing; while the budget is paused the weight does not move."""
    import asyncio
    import time

    from streams.scheduler import SHARD_ALIVE_S, Scheduler
    from streams.scheduler.core import EWMA_S
    from streams.scheduler.heartbeat import RESPLIT_S as SERVICE_RESPLIT_S
    from streams.settings import Settings
    from streams.telemetry.metrics import Metrics

    now = time.time()

    class TableStore:
        async def get_shards(self) -> dict[int, dict[str, object]]:
            return {
                # another worker, alive, crawling at e^0 with 1,000 pages
                7: {"weight": 1.0, "log_threshold": 0.0, "pages": 1000, "ts": now},
                # a dead worker's entry: its 10^6 pages are no one's now
                8: {"weight": 1.0, "log_threshold": 0.0, "pages": 10**6,
                    "ts": now - SHARD_ALIVE_S - 1.0},
            }

        async def put_shards(self, own: dict[int, dict[str, object]]) -> None:
            return None

        async def server_time(self) -> float:
            return now

    async def sink(k: bytes, v: bytes) -> None:
        return None

    st = Settings(web_enabled=False, budget_per_s=20.0, resplit_gain=0.5)
    sch = Scheduler(st, store=TableStore(), metrics=Metrics(),  # type: ignore[arg-type]
                    send_order=sink)
    shard = sch.new_shard(0)
    shard.ready = True
    for i in range(200):
        shard.book.set_page(f"u{i}", "a.org", crawled=False, origin=0.0, alpha=1.0,
                            beta=0.0, gamma=0.0, mu=1.0, max_value=1.0)
    sch.shards[0] = shard
    sch.log_threshold = 1.0  # e^1 here against e^0 there: gap +1, mean 0.5
    sch.wanted = sch.emitted = 1  # it ordered in the interval: no best-value lookup
    asyncio.run(sch.resplit(0.25))
    turnover = (200 + 1000) / 20.0 + EWMA_S + SERVICE_RESPLIT_S
    assert math.log(shard.weight) == pytest.approx(0.5 / turnover * 0.5 * 0.25)
    # paused: nothing is ordered, the gap is stale: the weight stays (for any length of
    # pause), and moves again once resumed
    sch.control.paused = True
    held = shard.weight
    for _ in range(40):
        sch.wanted = sch.emitted = 0
        asyncio.run(sch.resplit(60.0))
    assert shard.weight == held
    sch.control.paused = False
    sch.wanted = sch.emitted = 1
    asyncio.run(sch.resplit(0.25))
    assert shard.weight > held
