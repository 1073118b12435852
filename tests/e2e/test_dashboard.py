"""The live dashboard: a real headless Chromium loads ``/dashboard/`` of a real
worker (Kafka, Redis, ``recrawl worker``), runs its JS (virtual time: it polls several
times) and the numbers it shows are checked against ``/stats/``.

The page keeps the ``/stats/`` answer it rendered last (``#raw``) and every number it shows
carries the value it came from (``data-value``) and where (``data-stat``, a path in the
answer).  Checked: each shown text is that value (4 significant digits), each value is the
answer's at that path, and the answer is the worker's own: the same worker and budget as a
``/stats/`` fetched before and after, and its counters between those two fetches.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import subprocess
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from kafka_io import produce_json, wait_for

from infra import InfraError
from infra.chromium import ensure_chromium
from streams.settings import Settings
from streams.store.redis_conn import connect as connect_redis

pytestmark = pytest.mark.integration

HOSTS = {"a.test": (2.0, 3), "b.test": (5.0, None), "c.test": (1.0, 1)}
PAGES_PER_HOST = 4


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


class _Dom(HTMLParser):
    """Elements with an id or a data-stat, with their attributes and text."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[dict[str, Any]] = []
        self.found: list[dict[str, Any]] = []
        self.body: dict[str, str | None] = {}
        self.polylines = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if tag == "polyline":
            self.polylines += 1
        if tag in ("meta", "br", "polyline", "line", "input", "img"):
            return
        node = {"tag": tag, "attrs": a, "text": ""}
        self.stack.append(node)
        if "id" in a or "data-stat" in a:
            self.found.append(node)

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()["tag"] == tag:
                break

    def handle_data(self, data: str) -> None:
        for node in self.stack:
            node["text"] += data

    def by_id(self, ident: str) -> dict[str, Any]:
        return next(n for n in self.found if n["attrs"].get("id") == ident)


def _chromium_dom(chromium: str, url: str, tmp: Path, budget_ms: int = 6000) -> _Dom:
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", f"--user-data-dir={tmp}", f"--virtual-time-budget={budget_ms}",
         "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    return dom


def _at(obj: Any, path: str) -> Any:
    for k in path.split("."):
        if isinstance(obj, list):
            obj = obj[int(k)]
        elif isinstance(obj, dict):
            obj = obj.get(k)
        else:
            return None
    return obj


def _check_shown(dom: _Dom, shown: dict[str, Any]) -> int:
    """Every number on the page is the rendered answer's; returns how many were checked."""
    n = 0
    for node in dom.found:
        a = node["attrs"]
        if "data-stat" not in a or "data-value" not in a:
            continue
        value = json.loads(a["data-value"])
        assert value == _at(shown, a["data-stat"]), (a, node["text"])
        text = node["text"].strip()
        if value is None:
            assert text == "–", (a, text)
        else:
            assert math.isclose(float(text), value, rel_tol=5e-4, abs_tol=1e-12), (a, text)
        n += 1
    return n


def test_dashboard_in_chromium_shows_the_workers_stats(
    settings: Settings, start_worker, tmp_path: Path
) -> None:
    from infra.proc import free_port
    from streams.store.redis_store import put_truth

    try:
        chromium = ensure_chromium()
    except InfraError as exc:
        pytest.fail(f"no chromium for the dashboard test: {exc}", pytrace=False)
    port = free_port()
    s = settings.model_copy(update={"web_enabled": True, "web_port": port})
    base = f"http://127.0.0.1:{port}"
    # no fetcher: every page is ordered once and stays in flight (order timeout 600 s), so
    # hosts hold orders in flight up to their caps
    produce_json(s, "hosts", [(h, {"host": h, "max_crawls_per_s": r, "max_in_flight": m})
                              for h, (r, m) in HOSTS.items()])
    pages = [(h, {"url": f"https://{h}/p{i}", "importance": 1.0 + i})
             for h in HOSTS for i in range(PAGES_PER_HOST)]
    produce_json(s, "pages", pages)
    start_worker(s)
    produce_json(s, "control", [("control", {"budget_per_s": 4.0})])
    # the pings after the catalogue is in (as a crawler's pings follow its pages): "Worker
    # ready" is not "pages applied", and a ping of a page not yet known is "unknown" (the
    # first run of a CI session, Redis without the scripts yet, met that once)
    wait_for(lambda: _get(f"{base}/stats/").get("counters", {}).get("pages.added", 0)
             == len(HOSTS) * PAGES_PER_HOST, 60, "every page added")
    now = time.time()
    pings = [(h, {"url": f"https://{h}/p{i}", "source": src, "received_at": now,
                  "changed_at": now - 1, "id": f"{src}-{h}-{i}"})
             for h in HOSTS for i in range(PAGES_PER_HOST) for src in ("sitemap", "indexnow")
             if src == "sitemap" or i % 2 == 0]
    produce_json(s, "pings", pings)

    def ready() -> Any:
        st = _get(f"{base}/stats/?hosts=15")
        p = st["pings_by_source"]
        done = (st["orders_total"] > 0 and st["threshold"] is not None
                and p.get("sitemap", {}).get("total") == len(HOSTS) * PAGES_PER_HOST
                and p.get("indexnow", {}).get("total") == len(HOSTS) * PAGES_PER_HOST // 2)
        return st if done else None

    wait_for(ready, 60, "orders, a threshold and every ping counted in /stats")

    # the page: self-contained (no outside address, nothing loaded from elsewhere)
    with urllib.request.urlopen(f"{base}/dashboard/", timeout=5) as resp:
        html = resp.read().decode()
        assert resp.headers["Content-Type"].startswith("text/html")
    assert not re.search(r"\b(src|href)\s*=\s*[\"']", html)
    assert not re.search(r"https?://", html)
    with urllib.request.urlopen(f"{base}/dashboard", timeout=5) as resp:
        assert resp.read().decode() == html  # without the slash too
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(f"{base}/stats/?hosts=many", timeout=5)
    assert bad.value.code == 400

    # 1. no test web publishes the truth: the accuracy is not shown
    before = _get(f"{base}/stats/?hosts=15")
    assert before["truth"] is None
    dom = _chromium_dom(chromium, f"{base}/dashboard/?interval_ms=500", tmp_path / "c1")
    after = _get(f"{base}/stats/?hosts=15")
    assert int(dom.body.get("data-polls") or 0) >= 3, dom.body  # it kept polling
    shown = json.loads(dom.by_id("raw")["text"])
    assert shown["worker"] == before["worker"] == after["worker"]
    assert shown["budget_per_s"] == 4.0
    assert before["orders_total"] <= shown["orders_total"] <= after["orders_total"]
    for src in ("sitemap", "indexnow"):
        assert shown["pings_by_source"][src] == before["pings_by_source"][src]
    checked = _check_shown(dom, shown)
    assert checked >= 20, checked
    # the hosts, ordered by orders in flight (capped by each host's max in flight)
    top = shown["hosts"]["top"]
    assert {h["host"] for h in top} == set(HOSTS) and shown["hosts"]["count"] == len(HOSTS)
    for h in top:
        rate, mif = HOSTS[h["host"]]
        assert h["max_crawls_per_s"] == rate and h["max_in_flight"] == (mif or 0)
        assert h["in_flight"] <= (mif or PAGES_PER_HOST)
    assert [h["in_flight"] for h in top] == sorted((h["in_flight"] for h in top), reverse=True)
    shown_hosts = [n["text"].strip() for n in dom.found
                   if n["attrs"].get("data-stat", "").endswith(".shard")]
    assert len(shown_hosts) == len(HOSTS)
    assert "applied" in dom.by_id("pings")["text"]
    assert dom.by_id("budget")["text"].strip() == "4"
    assert dom.polylines >= 2  # threshold line(s) and the rate lines
    assert "hidden" in dom.by_id("truth-known")["attrs"]
    assert "hidden" not in dom.by_id("truth-unknown")["attrs"]

    # 2. the demo's test web publishes its truth: the accuracy is shown, as /stats has it
    async def publish() -> None:

        client = connect_redis(s.redis_url)
        try:
            await put_truth(client, s.key_prefix, {
                "accuracy": 0.8125, "fresh_now": 0.75, "t_s": 30.0, "measuring": True,
                "warmup_s": 10.0, "window_start_s": time.time() - 20, "source": "a test"},
                ttl_s=120)  # fmt: skip
        finally:
            await client.aclose()

    asyncio.run(publish())
    truth = _get(f"{base}/stats/")["truth"]
    assert truth["accuracy"] == 0.8125
    dom = _chromium_dom(chromium, f"{base}/dashboard/?interval_ms=500", tmp_path / "c2")
    shown = json.loads(dom.by_id("raw")["text"])
    assert shown["truth"] == truth
    assert "hidden" not in dom.by_id("truth-known")["attrs"]
    assert "hidden" in dom.by_id("truth-unknown")["attrs"]
    assert dom.by_id("accuracy")["text"].strip() == "0.8125"
    assert dom.by_id("fresh-now")["text"].strip() == "0.75"
    _check_shown(dom, shown)

    # 3. the docs' screenshot command (DevTools protocol, real-time wait) makes a PNG of it
    from infra.chromium import screenshot

    png = tmp_path / "dashboard.png"
    screenshot(f"{base}/dashboard/", png, wait_s=2.0, width=1000, height=800)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
