"""A real ``recrawl worker`` on a real three-master Redis Cluster (always, in every
``make test``): pages, host capacities, the control budget, orders, outcomes and pings go
through Kafka and the worker into state spread over the cluster's masters; the scripts
survive masters that lost them (NOSCRIPT is reloaded on every master)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka_io import consume, produce_json, wait_for

from streams.settings import Settings
from streams.store.page_record import PageState
from streams.store.redis_conn import connect_sync
from streams.store.redis_store import page_field

pytestmark = pytest.mark.integration

HOSTS = [f"c{i}.example" for i in range(12)]
URLS = {h: [f"https://{h}/{k}" for k in range(3)] for h in HOSTS}


@pytest.fixture
def cluster_settings(settings: Settings, redis_cluster_url: str) -> Settings:
    """The test's own topics and key prefix, state on the Redis Cluster."""
    return settings.model_copy(update={"redis_url": redis_cluster_url})


def _state(v: str | None) -> PageState:
    assert v is not None
    return PageState.decode(v)


def test_worker_on_a_redis_cluster_orders_and_applies_outcomes_and_pings(
    cluster_settings: Settings, start_worker: Any
) -> None:
    s = cluster_settings
    # binary page records: decoded with surrogateescape, as
    # streams.store.redis_store.Store reads them
    r: Any = connect_sync(s.redis_url, decode_responses=True, encoding_errors="surrogateescape")
    p = s.key_prefix
    # the hosts' keys are spread over the masters (else this would prove little)
    masters = {r.get_node_from_key(f"{p}:{{{h}}}:pages").name for h in HOSTS}
    assert len(masters) >= 2, masters
    assert len(r.get_primaries()) == 3

    worker = start_worker(s, {"RECRAWL_BUDGET_PER_S": "0", "RECRAWL_T_DELAY_S": "0",
                              "RECRAWL_DEFAULT_HOST_CRAWLS_PER_S": "50"})
    produce_json(s, "hosts", [(HOSTS[0], {"host": HOSTS[0], "max_crawls_per_s": 40,
                                          "max_in_flight": 2})])
    produce_json(s, "pages", [(h, {"url": u, "importance": 1.0})
                              for h in HOSTS for u in URLS[h]])
    wait_for(lambda: all(r.hlen(f"{p}:{{{h}}}:pages") == 3 for h in HOSTS), 30,
             "pages applied on the cluster")
    wait_for(lambda: r.hget(f"{p}:{{{HOSTS[0]}}}:host", "mif") == "2", 30, "host applied")
    assert consume(s, "orders", 1, timeout_s=2) == []  # budget 0: nothing yet

    # the control script's two keys share one slot (CROSSSLOT before the hash tag)
    produce_json(s, "control", [("control", {"budget_per_s": 30})])
    wait_for(lambda: r.hget(f"{p}:control:{{ctl}}", "budget_per_s"), 30, "control applied")
    orders = consume(s, "orders", 20, timeout_s=30)
    assert len(orders) == 20
    known = {u for h in HOSTS for u in URLS[h]}
    assert {o["url"] for o in orders} <= known
    assert len({o["order_id"] for o in orders}) == 20
    # host 0: at most two in flight (no outcome yet)
    assert sum(o["host"] == HOSTS[0] for o in orders) <= 2
    first = {}
    for o in orders:
        first.setdefault(o["url"], o)
    for o in first.values():
        fl = r.hget(f"{p}:{{{o['host']}}}:inflight", o["url"])
        assert fl is not None  # this order or a later one for the page

    # outcomes of the first orders: last crawl set, the order leaves flight
    fetched = time.time() - 100
    done = list(first.values())[:8]
    produce_json(s, "outcomes", [(o["host"], {"url": o["url"], "order_id": o["order_id"],
                                              "fetched_at": fetched, "changed": True,
                                              "status": 200}) for o in done])

    def crawled(o: dict[str, Any]) -> bool:
        v = r.hget(f"{p}:{{{o['host']}}}:pages", page_field(o["host"], o["url"]))
        return v is not None and _state(v).last_crawl_s == pytest.approx(fetched, abs=1e-3)

    wait_for(lambda: all(crawled(o) for o in done), 30, "outcomes applied on the cluster")
    for o in done:
        fl = r.hget(f"{p}:{{{o['host']}}}:inflight", o["url"])
        assert fl is None or not fl.startswith(o["order_id"] + "|")

    # every master forgets the scripts (as after a restart): pings still apply
    assert r.script_flush()  # sent to every master by the cluster client
    pinged = done[:4]
    produce_json(s, "pings", [(o["host"], {"url": o["url"], "source": "sitemap",
                                           "received_at": fetched + 50, "id": f"x{k}"})
                              for k, o in enumerate(pinged)])

    def signals(o: dict[str, Any]) -> int:
        v = r.hget(f"{p}:{{{o['host']}}}:pages", page_field(o["host"], o["url"]))
        return sum(_state(v).signals)

    wait_for(lambda: all(signals(o) == 1 for o in pinged), 30, "pings applied after NOSCRIPT")
    # orders continue after the scheduler reloaded its scripts too
    more = consume(s, "orders", 40, timeout_s=30)
    assert len(more) == 40
    assert consume(s, "rejects", 1, timeout_s=2) == []
    log = worker.log()
    assert "CROSSSLOT" not in log and "same key slot" not in log
    assert "batch failed" not in log
    r.close()
