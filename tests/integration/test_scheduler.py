"""The streaming scheduler end to end: real broker, real Redis, real ``recrawl worker``s."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from typing import Any

import pytest
from kafka_io import consume, produce_json, wait_for
from worker_process import settings_env

from streams.settings import Settings
from streams.store.page_record import PageState
from streams.store.redis_conn import connect_sync as connect_redis_sync
from streams.store.redis_store import page_field

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        body = r.read().decode()
        return json.loads(body) if r.headers.get_content_type() == "application/json" else body


def page_value(s: Settings, host: str, url: str) -> str | None:
    # binary records: decoded with surrogateescape, as streams.store.redis_store.Store reads them
    r = connect_redis_sync(s.redis_url, decode_responses=True, encoding_errors="surrogateescape")
    v = r.hget(f"{s.key_prefix}:{{{host}}}:pages", page_field(host, url))
    return str(v) if v is not None else None


def signals_of(s: Settings, host: str, url: str) -> tuple[int, ...]:
    v = page_value(s, host, url)
    assert v is not None, url
    return PageState.decode(v).signals


def test_pings_raise_value_order_sooner_budget_change_and_explain(
    settings: Settings, start_worker
) -> None:
    port = free_port()
    start_worker(settings, {
        "RECRAWL_BUDGET_PER_S": "0", "RECRAWL_T_DELAY_S": "5", "RECRAWL_WEB_ENABLED": "true",
        "RECRAWL_WEB_PORT": str(port), "RECRAWL_DEFAULT_HOST_CRAWLS_PER_S": "50",
    })
    now = time.time()
    urls = [f"https://h{i}.org/p" for i in range(10)]
    produce_json(settings, "pages", [(f"h{i}.org", {"url": u}) for i, u in enumerate(urls)])
    # pages and outcomes are separate topics: an outcome for a page not yet known is not
    # applied, so publish the outcomes once the pages exist.
    wait_for(lambda: all(page_value(settings, f"h{i}.org", u) for i, u in enumerate(urls)), 30,
             "pages applied")
    produce_json(settings, "outcomes", [
        (f"h{i}.org", {"url": u, "fetched_at": now - 100, "changed": False, "status": 200})
        for i, u in enumerate(urls)
    ])
    def crawled(host: str, url: str) -> bool:
        value = page_value(settings, host, url)  # None until the page event is applied
        return value is not None and PageState.decode(value).crawled

    wait_for(lambda: all(crawled(f"h{i}.org", u) for i, u in enumerate(urls)), 30,
             "outcomes applied")
    target = urls[7]
    produce_json(settings, "pings", [
        ("h7.org", {"url": target, "source": "sitemap", "received_at": now - 1, "id": "x1"}),
        ("h7.org", {"url": target, "source": "indexnow", "received_at": now - 1}),
        ("h3.org", {"url": urls[3], "source": "cdn", "received_at": now - 99}),  # T_DELAY
    ])
    wait_for(lambda: sum(signals_of(settings, "h7.org", target)) == 2, 30, "pings applied")

    explained = get(port, f"/pages/?url={target}")
    other = get(port, f"/pages/?url={urls[3]}")
    assert explained["state"]["signals_since_crawl"]["sitemap"] == 1
    assert explained["tau_eff_s"] > other["tau_eff_s"] + 1000
    assert explained["crawl_value"] > other["crawl_value"]
    assert any("T_DELAY" in d for d in other["decisions"])

    # a budget change reaches the scheduler within a second; the pinged page goes first
    t_set = time.time()
    produce_json(settings, "control", [("control", {"budget_per_s": 4})])
    orders = consume(settings, "orders", 3, timeout_s=20)
    assert orders[0]["url"] == target and orders[0]["policy"] == "greedy"
    assert orders[0]["issued_at"] - t_set < 1.5
    assert orders[0]["crawl_value"] >= orders[0]["threshold"]
    assert set(orders[0]) == {"order_id", "url", "host", "issued_at", "crawl_value",
                              "threshold", "tau_eff", "policy"}

    explained = get(port, f"/pages/?url={target}")
    assert explained["in_flight"]["order_id"] == orders[0]["order_id"]
    assert any(orders[0]["order_id"] in d for d in explained["decisions"])
    # `recrawl explain` reads Redis and asks the shard's worker for its decisions
    cli = subprocess.run([sys.executable, "-m", "streams.cli", "explain", target],
                         env=settings_env(settings), capture_output=True, text=True,
                         timeout=60, check=True)
    from_cli = json.loads(cli.stdout)
    assert from_cli["decisions_from"].startswith("http://127.0.0.1:")
    assert any(orders[0]["order_id"] in d for d in from_cli["decisions"])
    assert from_cli["in_flight"]["order_id"] == orders[0]["order_id"]
    host = get(port, "/hosts/h7.org/")
    assert host["pages"] == 1 and target in host["in_flight"]
    stats = get(port, "/stats/")
    assert stats["budget_per_s"] == 4
    assert sum(s["share_per_s"] for s in stats["shards"].values()) == pytest.approx(4)
    assert stats["counters"]["pings.within-delay"] == 1
    # the worker refroze the garbage collector once its shards were loaded (GcPauses)
    assert stats["gc"]["refreezes"]["count"] >= 1 and stats["gc"]["frozen_objects"] > 0
    metrics = get(port, "/metrics/")
    assert "recrawl_orders_total" in metrics and "recrawl_budget_per_s 4.0" in metrics


def test_host_capacity_and_max_in_flight_bound_orders(settings: Settings, start_worker) -> None:
    start_worker(settings, {"RECRAWL_BUDGET_PER_S": "40",
                            "RECRAWL_DEFAULT_HOST_CRAWLS_PER_S": "1000"})
    produce_json(settings, "hosts", [
        ("slow.org", {"host": "slow.org", "max_crawls_per_s": 2}),
        ("capped.org", {"host": "capped.org", "max_crawls_per_s": 100, "max_in_flight": 3}),
    ])
    time.sleep(1)
    pages = [("slow.org", f"https://slow.org/{i}", 5.0) for i in range(100)]
    pages += [("capped.org", f"https://capped.org/{i}", 5.0) for i in range(50)]
    pages += [(f"f{i % 20}.org", f"https://f{i % 20}.org/{i}", 1.0) for i in range(400)]
    produce_json(settings, "pages", [(h, {"url": u, "importance": imp}) for h, u, imp in pages])
    orders = consume(settings, "orders", None, timeout_s=8)
    by_host = Counter(o["host"] for o in orders)
    assert by_host["capped.org"] == 3  # no outcomes: never more than 3 in flight
    slow = sorted(o["issued_at"] for o in orders if o["host"] == "slow.org")
    assert len(slow) >= 4
    for i, t in enumerate(slow):  # burst 1 + 2 per second
        window = [x for x in slow[i:] if x - t <= 2.0]
        assert len(window) <= 1 + 2 * 2.0 + 1e-9
    assert len(slow) <= 1 + 2 * (slow[-1] - slow[0]) + 1
    # fast hosts take the rest of the budget; no page twice in flight
    assert sum(n for h, n in by_host.items() if h.startswith("f")) > 100
    assert len({o["url"] for o in orders}) == len(orders)


def test_floor_orders_pages_whose_value_never_reaches_the_threshold(
    settings: Settings, start_worker
) -> None:
    start_worker(settings, {"RECRAWL_BUDGET_PER_S": "20", "RECRAWL_MAX_INTERVAL_S": "3",
                            "RECRAWL_DEFAULT_HOST_CRAWLS_PER_S": "100"})
    produce_json(settings, "pages", [("z.org", {"url": "https://z.org/worthless", "importance": 0}),
                                     ("y.org", {"url": "https://y.org/a", "importance": 1})])
    t0 = time.time()
    orders = consume(settings, "orders", 2, timeout_s=15)
    by_url = {o["url"]: o for o in orders}
    assert by_url["https://y.org/a"]["policy"] == "greedy"
    z = by_url["https://z.org/worthless"]
    assert z["policy"] == "floor" and z["crawl_value"] == 0.0
    assert 2.0 <= z["issued_at"] - t0 <= 6.0
    fetched = time.time()
    produce_json(settings, "outcomes", [("z.org", {"url": z["url"], "order_id": z["order_id"],
                                                   "fetched_at": fetched, "changed": True})])
    again = wait_for(lambda: [o for o in consume(settings, "orders", None, 1.0)
                              if o["url"] == z["url"] and o["order_id"] != z["order_id"]],
                     15, "second floor order")
    assert again[0]["policy"] == "floor"
    assert 2.5 <= again[0]["issued_at"] - fetched <= 6.0


def test_bad_input_of_every_kind_lands_in_rejects(settings: Settings, start_worker) -> None:
    start_worker(settings, {"RECRAWL_BUDGET_PER_S": "0"})
    now = time.time()
    long_url = "https://a.org/" + "x" * 2100
    bad: dict[str, list[tuple[str, Any]]] = {
        "pages": [
            ("a.org", "{not json"),
            ("a.org", {"importance": 1}),
            ("a.org", {"url": "https://a.org/", "importance": "high"}),
            ("a.org", {"url": "ftp://a.org/f"}),
            ("a.org", {"url": long_url}),
            ("a.org", {"url": "https://a.org/", "host": "b.org"}),
            ("a.org", '{"url": "https://a.org/", "importance": NaN}'),
            ("a.org", {"url": "https://a.org/", "importance": -1}),
            ("b.org", {"url": "https://a.org/"}),
        ],
        "pings": [
            ("a.org", {"url": "https://a.org/", "source": "rumour", "received_at": now}),
            ("a.org", {"url": "https://a.org/", "source": "sitemap", "received_at": now + 1e6}),
            ("a.org", {"url": "https://a.org/", "source": "sitemap"}),
        ],
        "outcomes": [
            ("a.org", {"url": "https://a.org/", "fetched_at": -5, "changed": True}),
            ("a.org", {"url": "https://a.org/", "fetched_at": now, "changed": "yes"}),
        ],
        "hosts": [("a.org", {"host": "a.org", "max_crawls_per_s": -1})],
        "control": [("c", {"budget_per_s": "lots"}), ("c", {})],
    }
    for topic, items in bad.items():
        produce_json(settings, topic, [(k, v) for k, v in items if not isinstance(v, str)])
        raw = [(k, v) for k, v in items if isinstance(v, str)]
        if raw:
            import asyncio

            from kafka_io import produce
            asyncio.run(produce(settings, topic, [(k.encode(), v.encode()) for k, v in raw]))
    produce_json(settings, "pages", [("a.org", {"url": "https://a.org/fine"})])
    expected = sum(len(v) for v in bad.values())
    rejects = consume(settings, "rejects", expected, timeout_s=30)
    assert len(rejects) == expected
    by_topic = Counter(r["topic"].rsplit(".", 1)[1] for r in rejects)
    assert by_topic == {t: len(v) for t, v in bad.items()}
    reasons = " | ".join(r["reason"] for r in rejects)
    for needle in ("json", "url: Field required", "valid number", "scheme", "2048 bytes",
                   "does not match", "finite", "greater than or equal to 0", "key 'b.org'",
                   "sitemap", "in the future", "received_at: Field required",
                   "valid boolean", "greater than 0", "no setting given"):
        assert needle.lower() in reasons.lower(), needle
    assert all({"raw", "topic", "partition", "offset", "reason"} <= set(r) for r in rejects)
    wait_for(lambda: page_value(settings, "a.org", "https://a.org/fine"), 20, "good page")


def test_outcomes_with_changes_move_the_estimates_away_from_the_prior(
    settings: Settings, start_worker
) -> None:
    port = free_port()
    start_worker(settings, {"RECRAWL_BUDGET_PER_S": "0", "RECRAWL_WEB_ENABLED": "true",
                            "RECRAWL_WEB_PORT": str(port)})
    url, host = "https://est.org/news", "est.org"
    now = time.time()
    produce_json(settings, "pages", [(host, {"url": url})])
    wait_for(lambda: page_value(settings, host, url), 30, "page loaded")
    before = get(port, f"/pages/?url={url}")
    assert before["parameters"]["from"] == "prior" and before["estimates"] is None
    # crawled every hour for 12 hours, changed at 9 of them; a websub ping before each change
    hours = range(12, -1, -1)
    for i, h in enumerate(hours):
        t = now - h * 3600.0
        if i and i % 4:
            produce_json(settings, "pings", [(host, {"url": url, "source": "websub", "id": str(i),
                                                     "received_at": t - 1800.0})])
            wait_for(lambda: sum(signals_of(settings, host, url)) == 1, 30, "ping applied")
        produce_json(settings, "outcomes", [(host, {"url": url, "fetched_at": t,
                                                    "changed": bool(i and i % 4),
                                                    "status": 200})])
        wait_for(lambda t=t: PageState.decode(page_value(settings, host, url) or ""
                                             ).last_crawl_s >= t - 0.01,
                 30, "outcome applied")
    after = get(port, f"/pages/?url={url}")
    est = after["estimates"]
    assert after["parameters"]["from"] == "estimator"
    assert est["intervals_observed"] == 12
    prior_rate = before["parameters"]["change_rate_per_s"]
    assert est["change_rate_per_s"] > 3 * prior_rate
    assert est["change_rate_se_per_s"] > 0
    assert est["sources"]["push"]["precision"] > 0.5
    assert est["sources"]["push"]["gamma_per_s"] > 0
    assert after["parameters"]["change_rate_per_s"] == pytest.approx(est["change_rate_per_s"])
