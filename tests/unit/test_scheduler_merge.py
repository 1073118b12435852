"""The scheduler's choice of one tick over several local shards (no Redis, no Kafka): the
local shards are one scheduler (one credit, one merged pick by value), whatever their
shares, and the credit never exceeds ``sum(shares) * tick + 1`` (models.decision.pacer).
Time is passed in (``mono``): nothing here depends on the wall clock."""

from __future__ import annotations

import math
import time

from models.decision import budget
from streams.scheduler import Scheduler, Shard
from streams.settings import Settings
from streams.telemetry.metrics import Metrics


def _shard(sch: Scheduler, p: int, pages: dict[str, tuple[str, float]],
           share: float) -> Shard:
    s = sch.new_shard(p)
    s.ready = True
    s.share_per_s = share
    for url, (host, value) in pages.items():
        s.book.set_page(url, host, crawled=False, origin=0.0, alpha=1.0, beta=0.0,
                        gamma=0.0, mu=value, max_value=value)
    return s


def _scheduler(tick_s: float = 0.5) -> Scheduler:
    st = Settings(web_enabled=False, tick_s=tick_s, default_host_crawls_per_s=100.0,
                  host_burst=100.0, budget_per_s=10.0)

    async def sink(k: bytes, v: bytes) -> None:
        return None

    return Scheduler(st, store=None, metrics=Metrics(), send_order=sink)  # type: ignore[arg-type]


def test_one_merged_pick_over_local_shards_whatever_their_shares() -> None:
    sch = _scheduler()
    # shard 0 has a tiny share but the best pages; shard 1 most of the share, worse pages
    a = _shard(sch, 0, {f"a{i}": ("a.org", 10.0 + i) for i in range(5)}, share=0.5)
    b = _shard(sch, 1, {f"b{i}": (f"b{i % 3}.org", 1.0 + i) for i in range(9)}, share=9.5)
    sch._choose([a, b], now=1000.0, mono=0.0)
    plans = sch._choose([a, b], now=1000.0, mono=10.0)  # a long gap: credit at the cap
    assert sch.pacer.credit == 6.0  # cap = (0.5 + 9.5) * 0.5 + 1
    picked = {s.partition: [u for u, _, _ in picks] for s, picks in plans}
    assert picked == {0: ["a4", "a3", "a2", "a1", "a0"], 1: ["b8"]}
    # the pages not chosen are still there for the next tick
    assert len(b.fresh) == 8 and len(a.fresh) == 0
    values = [v for _, picks in plans for _, _, v in picks]
    assert values == sorted(values, reverse=True)


def test_merged_pick_takes_the_top_values_across_shards() -> None:
    sch = _scheduler()
    a = _shard(sch, 0, {"a0": ("a.org", 5.0), "a1": ("a.org", 3.0), "a2": ("a.org", 1.0)},
               1.0)
    b = _shard(sch, 1, {"b0": ("b.org", 4.0), "b1": ("b.org", 2.0), "b2": ("b.org", 0.5)},
               6.0)
    sch._choose([a, b], now=1000.0, mono=0.0)
    plans = sch._choose([a, b], now=1000.0, mono=10.0)  # cap = 7 * 0.5 + 1 = 4.5
    got = sorted((v, u) for _, picks in plans for u, _, v in picks)
    assert [u for _, u in got] == ["b1", "a1", "b0", "a0"]
    assert set(a.fresh.key) == {"a2"} and set(b.fresh.key) == {"b2"}


def test_credit_accrues_at_the_sum_of_the_shares_and_is_capped() -> None:
    sch = _scheduler(tick_s=0.1)
    a = _shard(sch, 0, {f"a{i}": ("a.org", 1.0) for i in range(50)}, 3.0)
    b = _shard(sch, 1, {f"b{i}": ("b.org", 1.0) for i in range(50)}, 1.0)
    assert sch._choose([a, b], now=1.0, mono=0.0) == []
    assert sch._choose([a, b], now=1.0, mono=0.2) == []  # credit 0.8: none yet
    assert sch.pacer.credit == 0.8
    plans = sch._choose([a, b], now=1.0, mono=5.2)
    assert sum(len(p) for _, p in plans) == 1  # never more than the cap 1.4 in one tick
    sch.control.paused = True
    assert sch._choose([a, b], now=1.0, mono=6.0) == [] and sch.pacer.credit == 0.0


def test_host_without_room_is_skipped_in_the_merge() -> None:
    sch = _scheduler(tick_s=1.0)
    sch.settings = sch.settings.model_copy(update={"host_burst": 1.0})
    a = _shard(sch, 0, {"a0": ("a.org", 9.0), "a1": ("a.org", 8.0)}, 1.0)
    b = _shard(sch, 1, {"b0": ("b.org", 1.0), "b1": ("c.org", 0.5)}, 1.0)
    sch._choose([a, b], now=1000.0, mono=0.0)
    plans = sch._choose([a, b], now=1000.0, mono=10.0)  # cap 3 orders; a.org has 1 token
    got = {s.partition: [u for u, _, _ in p] for s, p in plans}
    assert got == {0: ["a0"], 1: ["b0", "b1"]}
    assert set(a.fresh.key) == {"a1"}


def test_split_sums_to_the_budget_and_local_shards_move_together() -> None:
    w = {0: 1.0, 1: 1.0, 2: 2.0}
    shares = budget.split(8.0, w)
    assert abs(sum(shares.values()) - 8.0) < 1e-12
    # same threshold for the shards of one worker: their weights move by the same factor
    w0 = budget.update_weight(1.0, 1.0, 0.0, gain=0.5, turnover_s=10.0, dt_s=0.5)
    w1 = budget.update_weight(2.0, 1.0, 0.0, gain=0.5, turnover_s=10.0, dt_s=0.5)
    assert abs(w1 / w0 - 2.0) < 1e-12


def test_fresh_best_value_skips_removed_pages() -> None:
    from models.decision.fresh import FreshPages

    f = FreshPages()
    assert f.best_value() == 0.0
    f.add("u1", "h1", 3.0)
    f.add("u2", "h2", 5.0)
    f.add("u3", "h2", 4.0)
    assert f.best_value() == 5.0
    f.remove("u2")
    assert f.best_value() == 4.0
    f.remove("u3")
    assert f.best_value() == 3.0 and len(f) == 1


def test_a_worker_without_credit_raises_its_threshold_to_its_best_value() -> None:
    import asyncio
    import math

    class FakeStore:
        def __init__(self) -> None:
            self.put: dict[int, dict[str, object]] = {}

        async def get_shards(self) -> dict[int, dict[str, object]]:
            # another worker's shard, crawling at value e^0 = 1 with weight 1
            return {9: {"weight": 1.0, "log_threshold": 0.0, "ts": time.time()}}

        async def put_shards(self, own: dict[int, dict[str, object]]) -> None:
            self.put.update(own)

        async def server_time(self) -> float:
            return time.time()

    sch = _scheduler()
    sch.store = FakeStore()  # type: ignore[assignment]
    a = _shard(sch, 0, {"a0": ("a.org", 20.0)}, 0.0)
    sch.shards[0] = a
    sch.log_threshold = math.log(0.1)  # stale: from when it last crawled
    before = a.weight
    mono = [100.0]
    sch.monotonic = lambda: mono[0]
    asyncio.run(sch.resplit(0.5))
    assert sch.log_threshold == math.log(20.0)
    assert a.weight > before  # its share grows again
    # the lookup is not repeated at every resplit (it refreshes every expired bound): a
    # better page is seen at the first resplit BEST_VALUE_EVERY_S after the last lookup
    from streams.scheduler.core import BEST_VALUE_EVERY_S

    a.book.set_page("a1", "a.org", crawled=False, origin=0.0, alpha=1.0, beta=0.0,
                    gamma=0.0, mu=50.0, max_value=50.0)
    mono[0] += 0.5 * BEST_VALUE_EVERY_S
    asyncio.run(sch.resplit(0.5))
    assert sch.log_threshold == math.log(20.0)
    mono[0] += 0.5 * BEST_VALUE_EVERY_S
    asyncio.run(sch.resplit(0.5))
    assert sch.log_threshold == math.log(50.0)


def test_a_ping_reuses_the_tables_estimate_exactly() -> None:
    """A page event or ping without estimator: the scheduler's parameters from its table
    equal page_params with the page's estimator (no estimator object kept per page)."""
    import asyncio
    import random

    from streams.estimates.estimation import Estimation, Observation, estimates_of
    from streams.estimates.params import page_params
    from streams.scheduler import NOT_IN_FLIGHT
    from streams.store.page_record import PageState

    est = Estimation()
    record = None
    rng = random.Random(3)
    t = 1_000_000.0
    for _ in range(30):
        t += 3600.0
        record = est.observe([Observation(record, 3600.0, (rng.randint(0, 2), rng.randint(0, 1),
                                                            0, rng.randint(0, 1), 0),
                                          rng.random() < 0.5, t)])[0]
    sch = _scheduler()
    sh = _shard(sch, 0, {}, 1.0)
    sh.ready = True
    sch.shards[0] = sh
    state = PageState(2.0, 1e-5, t, (0, 0, 0, 0, 0))
    sch.loader.apply(sh, "h.org", "u", state, record, NOT_IN_FLIGHT)
    pinged = PageState(3.0, 1e-5, t, (1, 2, 0, 1, 0))
    asyncio.run(sch.on_page(0, "h.org", "u", pinged))
    want = page_params(pinged, estimates_of(record), sch.settings)
    slot = sh.table.slot["u"]
    assert want.estimated and bool(sh.table.estimated[slot])
    assert float(sh.table.origin[slot]) == want.origin_s
    assert float(sh.table.mu[slot]) == want.mu == 3.0
    assert (float(sh.table.alpha[slot]), float(sh.table.beta[slot]),
            float(sh.table.gamma[slot])) == (want.alpha_per_s, want.beta_s, want.gamma_per_s)
    assert sh.index.value("u", t + 7200.0) > 0.0


def test_a_block_from_before_a_robots_change_is_not_applied() -> None:
    """The outcomes agent writes 'blocked' to Redis, the hosts agent then empties the host's
    blocked set for a new robots.txt and its in-memory step runs first: the late
    on_blocked must not block the page in memory (it is not blocked in Redis)."""
    import asyncio

    sch = _scheduler()
    a = _shard(sch, 0, {"a0": ("a.org", 5.0), "a1": ("a.org", 4.0)}, 1.0)
    sch.shards[0] = a
    before = sch.robots_epoch(0, "a.org")
    asyncio.run(sch.on_robots_changed(0, "a.org"))  # nothing blocked yet: no reload
    sch.on_blocked(0, "a.org", "a0", epoch=before)  # the outcome's late in-memory step
    assert "a0" in a.book and "a0" not in a.blocked.get("a.org", set())
    sch.on_blocked(0, "a.org", "a1", epoch=sch.robots_epoch(0, "a.org"))
    assert "a1" not in a.book and a.blocked["a.org"] == {"a1"}


def test_a_pick_without_a_finite_value_is_left_out_before_redis() -> None:
    """An order's JSON holds finite numbers only: a pick whose value is not finite is left
    out (counted unusable, out of its book) before Redis marks anything in flight, and the
    tick's other orders go out."""
    import asyncio
    import json

    sent: list[bytes] = []

    async def sink(k: bytes, v: bytes) -> None:
        sent.append(v)

    class FakeStore:
        def __init__(self) -> None:
            self.asked: list[list[str]] = []

        async def issue(self, batches: list, **kw: object) -> list[list[tuple[str, str]]]:
            self.asked.append([u for b in batches for u, _ in b.orders])
            return [[("ok", "")] * len(b.orders) for b in batches]

    st = Settings(web_enabled=False, tick_s=0.5, default_host_crawls_per_s=100.0,
                  host_burst=100.0, budget_per_s=10.0)
    store = FakeStore()
    sch = Scheduler(st, store=store, metrics=Metrics(), send_order=sink)  # type: ignore[arg-type]
    a = _shard(sch, 0, {"a0": ("a.org", 5.0), "a1": ("a.org", 3.0), "b0": ("b.org", 1.0)}, 1.0)
    sch.shards[0] = a
    n = asyncio.run(sch.issuer.issue([(a, [("a0", "value", math.inf), ("a1", "value", 3.0),
                                     ("b0", "value", math.nan)])], 1000.0))
    assert store.asked == [["a1"]]
    assert n == 1 and [json.loads(v)["url"] for v in sent] == ["a1"]
    assert sch.metrics.tally["pages.unusable"] == 2
    assert "a0" not in a.table and "b0" not in a.table and "a1" in a.in_flight
