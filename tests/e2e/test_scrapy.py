"""The Scrapy adapter end to end: a real worker process orders the test web's pages, a real
Scrapy crawl (``python -m streams.integrations.scrapy``, a ``CrawlerProcess`` in a
subprocess) fetches them and publishes outcomes, and the worker applies them: every page's
last crawl is set in Redis, ``changed`` is null on the first fetch, true after the page
changed and false otherwise, and robots.txt is obeyed (``ROBOTSTXT_OBEY``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from edges_helpers import gzip_bomb, produce, rss_kib
from test_politeness import Tap
from worker_process import REPO, settings_env

from infra.proc import spawn
from streams.events.records import host_of
from streams.integrations.scrapy import MAX_BODY_BYTES, ROBOTS_ERROR, outcome
from streams.settings import Settings
from streams.store.page_record import PageState
from streams.store.redis_conn import connect as connect_redis
from streams.store.redis_store import page_field
from streams.testweb.server import TestWeb

pytestmark = pytest.mark.integration

DEADLINE_S = 45.0


async def _until(what: str, cond: Callable[[], Awaitable[bool] | bool], log: Path,
                 timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got if isinstance(got, bool) else await got:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {timeout_s:g}s: {what}\n{log.read_text()[-4000:]}")


def _scrapy(s: Settings, log: Path) -> subprocess.Popen[bytes]:
    """``python -m streams.integrations.scrapy`` as a user runs it (``.test`` names resolve
    to the test web's address)."""
    return spawn(
        [sys.executable, "-m", "streams.integrations.scrapy",
         "-s", "TWISTED_DNS_RESOLVER=streams.integrations.scrapy.OverrideResolver",
         "-s", 'RECRAWL_RESOLVE={".test": "127.0.0.1"}',
         "-s", "LOG_LEVEL=INFO", "-s", "CLOSESPIDER_TIMEOUT=85"],
        log, env={**settings_env(s), "PYTHONPATH": str(REPO)}, cwd=REPO, tie_to_parent=True)


async def _stop(proc: subprocess.Popen[bytes]) -> int:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    return await asyncio.to_thread(proc.wait, 30)


def test_outcome_changed_is_null_true_false() -> None:
    args = ("http://h.test/", "o1", 1.0, 200, None)
    assert outcome(*args, "d1", None)["changed"] is None  # first fetch: nothing to compare
    assert outcome(*args, "d1", "d1")["changed"] is False
    assert outcome(*args, "d2", "d1")["changed"] is True
    failed = outcome("http://h.test/", "o1", 1.0, None, "timeout", None, "d1")
    assert failed["changed"] is None and failed["digest"] is None


async def test_scrapy_fetches_orders_and_the_worker_applies_outcomes(
    settings: Settings, start_worker, testweb: TestWeb, tmp_path: Path
) -> None:
    s = settings.model_copy(update={"budget_per_s": 20.0, "default_host_crawls_per_s": 5.0,
                                    "t_delay_s": 0.0})
    start_worker(s)
    urls = testweb.urls()
    host0 = testweb.world.hosts[0]
    forbidden = sorted(u for u in urls if host_of(u) == host0)[0]
    first_robots = f"User-agent: *\nDisallow: {forbidden.split(str(testweb.port))[1]}$\n"
    testweb.robots[host0] = first_robots
    allowed = [u for u in urls if u != forbidden]
    log = tmp_path / "scrapy.log"
    outcomes = Tap(s, "outcomes")
    await outcomes.start()
    # binary records: decoded with surrogateescape, as streams.store.redis_store.Store reads them
    r = connect_redis(s.redis_url, decode_responses=True, encoding_errors="surrogateescape")
    proc = _scrapy(s, log)

    async def last_crawl(url: str) -> float:
        value = await r.hget(f"{s.key_prefix}:{{{host_of(url)}}}:pages",
                            page_field(host_of(url), url))
        return 0.0 if value is None else PageState.decode(value).last_crawl_s

    def seen(url: str, **want: object) -> bool:
        return any(v["url"] == url and all(v.get(k) == w for k, w in want.items())
                   for v in outcomes.items)

    try:
        await produce(s, "pages", [(host_of(u).encode(), {"url": u, "change_rate_per_s": 0.5})
                                   for u in urls])
        await _until("a first outcome of every allowed page",
                     lambda: all(seen(u, status=200, changed=None) for u in allowed), log)

        async def all_crawled() -> bool:
            return all([await last_crawl(u) > 0 for u in allowed])

        await _until("every allowed page's last crawl in Redis", all_crawled, log)
        changing = allowed[1]
        testweb.truth.changed(changing, time.time())  # its body follows its version
        await _until("an outcome with changed true for the changed page",
                     lambda: seen(changing, status=200, changed=True), log)
        await _until("an outcome with changed false for an unchanged page",
                     lambda: any(seen(u, status=200, changed=False) for u in allowed
                                 if u != changing), log)
        changed_at = max(v["fetched_at"] for v in outcomes.items
                         if v["url"] == changing and v["changed"] is True)

        async def applied() -> bool:
            return await last_crawl(changing) >= changed_at - 1e-3

        await _until("the worker applied the changed page's outcome", applied, log)
        await _until("robots.txt obeyed: the disallowed page's outcome",
                     lambda: seen(forbidden, error=ROBOTS_ERROR, disallowed=True), log)

        async def blocked() -> bool:
            return forbidden in await r.smembers(f"{s.key_prefix}:{{{host0}}}:blocked")

        await _until("the worker blocked the disallowed page", blocked, log)
        robots_digest = await r.hget(f"{s.key_prefix}:{{{host0}}}:host", "robots")
        rc = await _stop(proc)
        text = log.read_text()
        n_forbidden = sum(v["url"] == forbidden for v in outcomes.items)
        fetched_while_disallowed = testweb.truth.pages[forbidden].fetches
        # robots.txt now allows everything: Scrapy reads it again when it starts again,
        # announces the new digest, and the worker orders the page again
        testweb.robots[host0] = "User-agent: *\nAllow: /\n"
        log2 = tmp_path / "scrapy-2.log"
        proc = _scrapy(s, log2)
        await _until("the formerly disallowed page fetched after the restart",
                     lambda: seen(forbidden, status=200), log2)
        rc2 = await _stop(proc)
        robots_after = await r.hget(f"{s.key_prefix}:{{{host0}}}:host", "robots")
    finally:
        await _stop(proc)
        await outcomes.stop()
        await r.aclose()
    assert rc2 == 0, log2.read_text()[-3000:]
    print(text[-3000:])
    assert rc == 0, text[-3000:]
    assert fetched_while_disallowed == 0  # Scrapy never fetched it while disallowed
    assert testweb.truth.pages[forbidden].fetches >= 1  # after the restart
    assert robots_after == hashlib.sha256(testweb.robots[host0].encode()).hexdigest()
    assert all(testweb.truth.pages[u].fetches >= 1 for u in allowed)
    # the robots.txt announced on recrawl.hosts is the one the outcome names
    assert robots_digest == hashlib.sha256(first_robots.encode()).hexdigest()
    assert {v["robots_digest"] for v in outcomes.items
            if v["url"] == forbidden and v.get("disallowed")} == {robots_digest}
    # blocked: not ordered again and again (one outcome per order issued before the block)
    assert n_forbidden <= 3
    # Scrapy's closing stats count the outcomes it published
    stats = {k: int(n) for k, n in re.findall(r"'(recrawl/[a-z_/]+)': (\d+)", text)}
    assert stats["recrawl/outcomes/changed"] >= 1 and stats["recrawl/outcomes/unchanged"] >= 1
    assert stats["recrawl/outcomes/first_seen"] >= len(allowed)
    # one robots.txt per host (h0's digest, the other hosts' "unavailable-404")
    assert stats["recrawl/robots_announced"] == len(testweb.world.hosts)


async def test_scrapy_caps_bodies_and_keeps_a_redirected_robots_txt_for_its_host(
    settings: Settings, tmp_path: Path
) -> None:
    """One loopback server: ``a.test``'s robots.txt redirects to ``b.test``'s (Disallow
    /private, Crawl-delay 2); a page of ``a.test`` is 510 kB of gzip inflating to 512 MiB.
    The disallowed page's outcome carries ``disallowed`` and the digest of the robots.txt
    read; the robots.txt is announced for ``a.test`` (Crawl-delay 2: 0.5/s), not ``b.test``;
    the bomb's outcome names the cap and Scrapy's memory stays far below the 512 MiB."""
    bomb = gzip_bomb(512 << 20)
    rules = "User-agent: *\nDisallow: /private\nCrawl-delay: 2\n"

    async def robots(request: web.Request) -> web.Response:
        if request.host.startswith("a.test"):
            raise web.HTTPMovedPermanently(f"http://b.test:{port}/robots.txt")
        return web.Response(text=rules)

    async def page(request: web.Request) -> web.Response:
        if request.path == "/bomb":
            return web.Response(body=bomb, headers={"Content-Encoding": "gzip",
                                                    "Content-Type": "text/html"})
        return web.Response(text=f"page {request.path}", content_type="text/html")

    app = web.Application()
    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/{name}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = int(runner.addresses[0][1])
    base = f"http://a.test:{port}"
    orders = {name: f"{base}/{name}" for name in ("private", "public", "bomb")}
    log = tmp_path / "scrapy.log"
    outcomes, hosts = Tap(settings, "outcomes"), Tap(settings, "hosts")
    await outcomes.start()
    await hosts.start()
    proc = _scrapy(settings, log)
    peak_mib = 0.0
    try:
        await produce(settings, "orders", [
            (b"a.test", {"order_id": name, "url": url, "host": "a.test", "issued_at": 0.0})
            for name, url in orders.items()])

        def got(name: str) -> dict[str, object] | None:
            return next((v for v in outcomes.items if v["order_id"] == name), None)

        while proc.poll() is None and not all(got(n) for n in orders):
            peak_mib = max(peak_mib, rss_kib("VmHWM", proc.pid) / 1024)
            await asyncio.sleep(0.2)
        await _until("an outcome of every order", lambda: all(got(n) for n in orders), log)
        peak_mib = max(peak_mib, rss_kib("VmHWM", proc.pid) / 1024)
        await _until("the robots.txt announced", lambda: bool(hosts.items), log)
    finally:
        await _stop(proc)
        await outcomes.stop()
        await hosts.stop()
        await runner.cleanup()
    print(f"Scrapy peak RSS {peak_mib:.0f} MiB; bomb outcome: {got('bomb')}")
    digest = hashlib.sha256(rules.encode()).hexdigest()
    private, public, bombed = got("private"), got("public"), got("bomb")
    assert private is not None and public is not None and bombed is not None
    assert (private["error"], private["disallowed"], private["robots_digest"]) == (
        ROBOTS_ERROR, True, digest)
    assert public["status"] == 200 and public["error"] is None
    assert bombed["error"] == f"body larger than {MAX_BODY_BYTES} bytes (Scrapy DOWNLOAD_MAXSIZE)"
    assert bombed["digest"] is None
    assert [(h["host"], h["robots_digest"], h["max_crawls_per_s"]) for h in hosts.items] == [
        ("a.test", digest, 0.5)]
    assert peak_mib < 400, log.read_text()[-2000:]
