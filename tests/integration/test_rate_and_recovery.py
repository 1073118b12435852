"""Rate R within 1% over 30 s with no spikes; SIGKILL + restart + a second worker lose and
duplicate nothing."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from kafka_io import consume, produce_json, wait_for

from infra.proc import free_port
from streams.settings import Settings
from streams.store.page_record import PageState
from streams.store.redis_conn import connect_sync as connect_redis_sync
from streams.store.redis_store import page_field

pytestmark = pytest.mark.integration

RATE = 200.0
TICK = 0.04  # R * tick = 8 orders: loop jitter up to ~30 ms costs nothing


def test_emitted_rate_matches_budget_within_1pct_and_never_spikes(
    settings: Settings, start_worker
) -> None:
    pages = [(f"r{i % 200}.org", {"url": f"https://r{i % 200}.org/{i}", "importance": 1 + i % 7})
             for i in range(9000)]
    port = free_port()
    settings = settings.model_copy(update={"web_enabled": True, "web_port": port})
    start_worker(settings, {"RECRAWL_BUDGET_PER_S": "0", "RECRAWL_TICK_S": str(TICK),
                            "RECRAWL_DEFAULT_HOST_CRAWLS_PER_S": "1000"})
    produce_json(settings, "pages", pages)
    r = connect_redis_sync(settings.redis_url, decode_responses=True)
    wait_for(lambda: sum(r.hlen(f"{settings.key_prefix}:{{r{i}.org}}:pages") for i in range(200))
             == len(pages), 60, "catalogue loaded")
    produce_json(settings, "control", [("control", {"budget_per_s": RATE})])
    orders = consume(settings, "orders", None, timeout_s=36)
    times = sorted(o["issued_at"] for o in orders)
    assert len({o["url"] for o in orders}) == len(orders)  # never a page twice in flight
    # skip the first second (shares settling), then a 30 s window
    t0 = times[0] + 1.0
    in_window = [t for t in times if t0 <= t < t0 + 30.0]
    # The pacer emits every credit it is not forced to drop.  A loop that wakes more than a
    # tick late (a loaded machine) loses credit to the cap by design (catching up would
    # break the no-spike bound below); the worker counts it (/stats credit_clipped, over
    # the whole run, which contains the window), so the rate is checked against R less that.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats/", timeout=10) as resp:
        clipped = json.load(resp)["credit_clipped"]
    assert clipped <= 0.1 * RATE * 36, clipped  # a loop mostly on time
    assert len(in_window) <= 1.01 * RATE * 30.0, len(in_window)
    assert len(in_window) >= 0.99 * RATE * 30.0 - clipped, (len(in_window), clipped)
    # no spikes: in any window of L seconds at most R * (L + tick) orders
    for length in (0.05, 0.2, 1.0, 5.0):
        bound = RATE * (length + TICK) + 1e-9
        j = 0
        worst = 0
        for i in range(len(times)):
            while times[i] - times[j] > length:
                j += 1
            worst = max(worst, i - j + 1)
        assert worst <= bound, (length, worst, bound)


def test_sigkill_restart_and_a_second_worker_lose_and_duplicate_nothing(
    settings: Settings, start_worker
) -> None:
    env = {"RECRAWL_BUDGET_PER_S": "0", "RECRAWL_T_DELAY_S": "0",
           "RECRAWL_DEFAULT_HOST_CRAWLS_PER_S": "1000", "RECRAWL_BATCH_SIZE": "50"}
    urls = [(f"k{i % 40}.org", f"https://k{i % 40}.org/{i}") for i in range(400)]
    produce_json(settings, "pages", [(h, {"url": u}) for h, u in urls])
    w1 = start_worker(settings, env)
    now = time.time()
    pings = [(h, {"url": u, "source": "sitemap", "received_at": now - 1 - r, "id": f"{u}#{r}"})
             for r in range(8) for h, u in urls]
    # half of them before the kill, the rest after it: a fast worker may apply every ping
    # sent before the kill (a CI run did: 3,200 of 3,200), so the kill is mid-stream by
    # construction, not by timing
    first = len(pings) // 2
    produce_json(settings, "pings", pings[:first])
    r = connect_redis_sync(settings.redis_url)  # bytes: binary page records

    def signal_total() -> int:
        total = 0
        for h, u in urls:
            v = r.hget(f"{settings.key_prefix}:{{{h}}}:pages", page_field(h, u))
            total += sum(PageState.decode(v).signals) if v else 0
        return total

    wait_for(lambda: signal_total() > 200, 30, "some pings applied")
    w1.kill()  # SIGKILL, mid-stream: offsets of the last seconds were not committed
    partial = signal_total()
    produce_json(settings, "pings", pings[first:])
    produce_json(settings, "pings", pings[:500])  # duplicates (same ids) arrive as well
    start_worker(settings, env)
    start_worker(settings, env)  # a second worker joins: the partitions are split
    wait_for(lambda: signal_total() == 8 * len(urls), 60, "all pings applied exactly once")
    assert 200 < partial <= first  # applied before the kill, never twice
    time.sleep(2)
    assert signal_total() == 8 * len(urls)

    # both workers schedule their shards; every page is ordered exactly once (no outcomes)
    produce_json(settings, "control", [("control", {"budget_per_s": 150})])
    orders = wait_for(
        lambda: (o := consume(settings, "orders", None, 2.0)) and len(o) >= len(urls) and o,
        40, "every page ordered")
    time.sleep(2)
    orders = consume(settings, "orders", None, 3.0)
    assert sorted(o["url"] for o in orders) == sorted(u for _, u in urls)
    workers = {o["order_id"].split("-")[0] for o in orders}
    assert len(workers) == 2
