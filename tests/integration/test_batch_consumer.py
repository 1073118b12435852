"""Both ways the worker takes its input from Kafka (``RECRAWL_BATCH_CONSUMER``: a fetch at a
time through :class:`streams.worker.consumer.BatchConsumer`, the default; or one message at
a time through Faust's streams) apply every event once, in its partition's order, send the
bad ones to the rejects with their reason, and commit the offsets of everything.  A real
worker process, a real broker and Redis; the events are published by aiokafka's producer."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest
from faults import lag
from kafka_io import consume, produce, wait_for

from infra.proc import free_port
from streams.settings import Settings
from streams.store.page_record import PageState
from streams.store.redis_conn import connect_sync as connect_redis_sync
from streams.store.redis_store import page_url

pytestmark = pytest.mark.integration

HOSTS = [f"h{i}.batch.test" for i in range(4)]
PER_HOST = 40


def _pages(s: Settings) -> dict[str, PageState]:
    r = connect_redis_sync(s.redis_url)
    out: dict[str, PageState] = {}
    for h in HOSTS:
        for f, v in r.hgetall(f"{s.key_prefix}:{{{h}}}:pages").items():
            out[page_url(h, f.decode())] = PageState.decode(v)
    return out


@pytest.mark.parametrize("batch", ["1", "0"], ids=["batch-consumer", "faust-streams"])
def test_each_event_applied_once_in_order_bad_ones_rejected_offsets_committed(
        settings: Settings, start_worker, batch: str) -> None:
    settings = settings.model_copy(update={"web_enabled": True, "web_port": free_port()})
    w = start_worker(settings, {"RECRAWL_BATCH_CONSUMER": batch})
    urls = [f"https://{h}/p{i}" for h in HOSTS for i in range(PER_HOST)]
    # every page twice: the second event (importance 3) must win, as in its partition's order
    pages = [(u.split("/")[2].encode(), json.dumps({"url": u, "importance": imp}).encode())
             for imp in (2.0, 3.0) for u in urls]
    bad_pages = [(b"h0.batch.test", b"{not json"),
                 (b"h1.batch.test", json.dumps({"importance": 1.0}).encode())]
    asyncio.run(produce(settings, "pages", pages[:len(urls)] + bad_pages + pages[len(urls):]))
    wait_for(lambda: len(got := _pages(settings)) == len(urls) and all(
        p.importance == 3.0 for p in got.values()), 60, "every page at its last importance")

    # two pings per page, distinct ids (not duplicates of each other): each counted once
    now = time.time()
    pings = [(u.split("/")[2].encode(), json.dumps({
        "url": u, "source": "sitemap", "received_at": now, "id": f"{k}-{u}"}).encode())
        for k in range(2) for u in urls]
    bad_ping = (b"h2.batch.test", json.dumps({"url": 7, "source": "sitemap"}).encode())
    asyncio.run(produce(settings, "pings", [*pings[:50], bad_ping, *pings[50:]]))
    sitemap = 0  # SOURCES order: sitemap first
    wait_for(lambda: all(p.signals[sitemap] == 2 for p in _pages(settings).values()), 60,
             "two sitemap pings counted on every page")

    rejects = consume(settings, "rejects", 3, 30)
    assert sorted(r["topic"].rsplit(".", 1)[1] for r in rejects) == ["pages", "pages", "pings"]
    assert all(r["reason"] for r in rejects)
    # everything acked and committed (Faust commits every 2 s)
    wait_for(lambda: not any(lag(settings, ("pages", "pings")).values()), 30,
             "no lag on pages and pings")
    # /stats: the seconds spent waiting for Kafka (the batch consumer's) and in each handler
    with urllib.request.urlopen(f"http://127.0.0.1:{settings.web_port}/stats/",
                                timeout=10) as resp:
        seconds = json.loads(resp.read())["consumer"]
    assert seconds["handle.pages"] > 0.0 and seconds["handle.pings"] > 0.0
    assert (seconds["wait"] > 0.0) if batch == "1" else ("wait" not in seconds)
    w.stop()
    assert w.proc.returncode == 0, w.log()[-3000:]
    # nothing was applied twice (the counts above still hold after the stop)
    assert all(p.signals[sitemap] == 2 for p in _pages(settings).values())


def test_the_fetch_size_reaches_aiokafka(settings: Settings) -> None:
    """The app's options (``streams.worker.app.app_options``) as Faust reads them: the fetch
    size per partition is its ``consumer_max_fetch_size``, which Faust's aiokafka driver
    passes as aiokafka's ``max_partition_fetch_bytes``."""
    import faust

    from streams.worker.app import app_options

    s = settings.model_copy(update={"fetch_partition_bytes": 3 * 1024**2})
    app = faust.App(s.app_id, **app_options(s))
    assert app.conf.consumer_max_fetch_size == 3 * 1024**2
