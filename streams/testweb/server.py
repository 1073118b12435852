"""The test web's HTTP server and its change/ping processes (real time, asyncio).

One aiohttp server on 127.0.0.1 serves every virtual host: the ``Host`` header picks the
host (``h17.test:PORT``), so the fetcher reaches ``http://h17.test:PORT/p/3`` through a
``.test -> 127.0.0.1`` resolver override.  Per host:

- ``/p/<n>`` — a page; its body depends on its current version only;
- ``/sitemap.xml`` — a urlset with ``lastmod`` (ETag and Last-Modified, conditional GET);
- ``/sitemap_index.xml[.gz]`` and ``/sitemaps/<k>.xml.gz`` — the same, as a gzip index;
- ``/<key>.txt`` — the host's IndexNow key file;
- ``/robots.txt`` — the host's robots.txt if the test set one (``TestWeb.robots``), else
  404; a host in ``TestWeb.pushback`` answers its next page requests with 429/503 and a
  ``Retry-After``; ``/status/<code>?retry_after=`` answers any status;
- ``/bad/...``, ``/redirect/...``, ``/slow``, ``/big`` — hostile inputs for tests;
- ``/truth``, ``/stats`` — ground truth and counters (for accuracy measurement and tests;
  nothing in the pipeline reads them).

Each page changes as a Poisson process (rate ``change_rate_per_s``); each change is
announced with probability ``recall`` after ``Exp(delay_s)``; false announcements arrive as
a Poisson process of rate ``false_rate_per_s``.  Announcements go through the host's
channel: IndexNow POSTs to the receiver, or the sitemap's ``lastmod``.  The processes draw
from one generator seeded with ``world.seed + 1`` (or ``seed``) and run in event-time
order, so every run of one world makes the same changes and announcements at the same
offsets from its start, however late the event loop handles them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import heapq
import json
import logging
import random
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape

import aiohttp
import numpy as np
from aiohttp import web

from streams.edges.timeparse import format_w3c_datetime, http_date, parse_http_date
from streams.testweb.truth import Truth
from streams.testweb.world import PageSpec, World, key_for_host

__all__ = ["TestWeb", "world_from_file"]

log = logging.getLogger(__name__)

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>&lol9;</loc></url></urlset>
"""

XXE = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>&xxe;</loc></url></urlset>
"""


def _host_of_request(request: web.Request) -> str:
    return (request.host or "").rsplit(":", 1)[0].lower() if request.host else ""


class TestWeb:
    """``web = TestWeb(world, indexnow_endpoint=...); await web.start(); ...; await web.stop()``."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        world: World,
        *,
        bind: str = "127.0.0.1",
        port: int = 0,
        indexnow_endpoint: str | None = None,
        seed: int | None = None,
        sitemap_chunk: int = 10,
        flush_interval_s: float = 0.2,
        simulate: bool = True,
        past: Sequence[np.ndarray] | None = None,
    ) -> None:
        self.world = world
        #: each page's changes before the start, in seconds relative to it (negative,
        #: sorted; :func:`streams.testweb.world.past_changes`): a page starts at the version
        #: they leave it at, its sitemap ``lastmod`` at the last of them
        self.past = past
        self.bind = bind
        self.port = port
        self.indexnow_endpoint = indexnow_endpoint
        self.rng = random.Random(world.seed + 1 if seed is None else seed)
        self.sitemap_chunk = sitemap_chunk
        self.flush_interval_s = flush_interval_s
        self.simulate = simulate
        self.t0 = 0.0
        self.truth = Truth(window_start=0.0)
        self.stats: Counter[str] = Counter()
        self._by_host_path: dict[tuple[str, str], int] = {
            (p.host, p.path): i for i, p in enumerate(world.pages)
        }
        self._host_pages: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(world.pages):
            self._host_pages[p.host].append(i)
        self._lastmod: list[float] = []
        #: every change of every page (epoch seconds), for replaying the run in the simulator
        self.change_log: list[list[float]] = [[] for _ in world.pages]
        self._pending: dict[str, list[str]] = defaultdict(list)
        self._heap: list[tuple[float, int, str, int, float]] = []
        self._seq = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._bomb_gz: bytes | None = None
        #: host -> its robots.txt (absent: 404, every page allowed); served with
        #: ``Cache-Control: max-age=robots_max_age_s`` when that is set
        self.robots: dict[str, str] = {}
        #: host -> a file read at every request (edit it to change robots.txt live)
        self.robots_files: dict[str, str] = {}
        self.robots_max_age_s: int | None = None
        self.robots_fetches: Counter[str] = Counter()
        #: host -> (status, Retry-After or None, how many more page requests get it):
        #: the host pushes back (429/503) instead of serving its pages
        self.pushback: dict[str, tuple[int, str | None, int]] = {}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/truth", self._truth)
        app.router.add_post("/truth/window", self._truth_window)
        app.router.add_get("/stats", self._stats)
        app.router.add_get("/p/{n}", self._page)
        app.router.add_get("/sitemap.xml", self._sitemap)
        app.router.add_get("/sitemap_index.xml", self._sitemap_index)
        app.router.add_get("/sitemap_index.xml.gz", self._sitemap_index)
        app.router.add_get("/sitemaps/{k}.xml.gz", self._sitemap_part)
        app.router.add_get("/bad/bomb.xml", self._const(BILLION_LAUGHS))
        app.router.add_get("/bad/xxe.xml", self._const(XXE))
        app.router.add_get("/bad/huge.xml", self._huge)
        app.router.add_get("/bad/bomb.xml.gz", self._gzip_bomb)
        app.router.add_get("/bad/many.xml", self._many)
        app.router.add_get("/redirect/loop", self._redirect_loop)
        app.router.add_get("/redirect/to", self._redirect_to)
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/big", self._big)
        app.router.add_get("/status/{code}", self._status)
        app.router.add_get("/robots.txt", self._robots)
        app.router.add_get("/{name}.txt", self._keyfile)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.bind, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        now = time.time()
        self.t0 = now
        self.truth = Truth(window_start=now)
        for p in self.world.pages:
            self.truth.add_page(p.url(self.port), p.importance, now)
        self._lastmod = [now] * len(self.world.pages)
        for i, changes in enumerate(self.past or ()):
            if len(changes):
                page = self.truth.pages[self.url(i)]
                page.version = len(changes)
                page.last_change_at = self._lastmod[i] = now + float(changes[-1])
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        if self.simulate:
            for i in range(len(self.world.pages)):
                self._schedule_change(i, now)
                self._schedule_false(i, now)
            self._tasks.append(asyncio.create_task(self._run_events()))
            self._tasks.append(asyncio.create_task(self._run_flush()))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------------ addressing
    def url(self, i: int) -> str:
        return self.world.pages[i].url(self.port)

    def urls(self) -> list[str]:
        return [self.url(i) for i in range(len(self.world.pages))]

    def base(self, host: str) -> str:
        return f"http://{host}:{self.port}"

    def key(self, host: str) -> str:
        return key_for_host(self.world.seed, host)

    def key_location(self, host: str) -> str:
        return f"{self.base(host)}/{self.key(host)}.txt"

    def sitemap_urls(self) -> list[str]:
        """What a poller should watch: each sitemap host's sitemap (every other one as a
        gzip sitemap index, to exercise both)."""
        out = []
        hosts = [h for h in self.world.hosts if self.world.host_channel(h) == "sitemap"]
        for k, host in enumerate(hosts):
            path = "/sitemap.xml" if k % 2 == 0 else "/sitemap_index.xml.gz"
            out.append(self.base(host) + path)
        return out

    # ------------------------------------------------------------------ processes
    def _push(self, t: float, kind: str, i: int, payload: float = 0.0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, i, payload))

    def _schedule_change(self, i: int, now: float) -> None:
        rate = self.world.pages[i].change_rate_per_s
        if rate > 0:
            self._push(now + self.rng.expovariate(rate), "change", i)

    def _schedule_false(self, i: int, now: float) -> None:
        rate = self.world.pages[i].false_rate_per_s
        if rate > 0:
            self._push(now + self.rng.expovariate(rate), "false", i)

    async def _run_events(self) -> None:
        while self._heap:
            t = self._heap[0][0]
            delay = t - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.time()
            while self._heap and self._heap[0][0] <= now:
                t, _, kind, i, payload = heapq.heappop(self._heap)
                self._event(kind, i, t, payload)

    def _event(self, kind: str, i: int, t: float, payload: float) -> None:
        page = self.world.pages[i]
        if kind == "change":
            self.truth.changed(page.url(self.port), t)
            self.change_log[i].append(t)
            self.stats["changes"] += 1
            if self.rng.random() < page.recall:
                delay = self.rng.expovariate(1.0 / page.delay_s) if page.delay_s > 0 else 0.0
                self._push(t + delay, "signal", i, t)
            self._schedule_change(i, t)
        elif kind == "false":
            self.stats["signals_false"] += 1
            self._announce(page, i, changed_at=t)
            self._schedule_false(i, t)
        elif kind == "signal":
            self.stats["signals_true"] += 1
            self._announce(page, i, changed_at=payload)

    def _announce(self, page: PageSpec, i: int, *, changed_at: float) -> None:
        if page.channel == "sitemap":
            self._lastmod[i] = max(self._lastmod[i], changed_at)
            self.stats["sitemap_updates"] += 1
        else:
            self._pending[page.host].append(page.url(self.port))

    async def _run_flush(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            await self.flush_indexnow()

    async def flush_indexnow(self) -> None:
        """POST the pending announcements, one request per host (the IndexNow JSON form)."""
        pending, self._pending = self._pending, defaultdict(list)
        if not self.indexnow_endpoint or self._session is None:
            self.stats["indexnow_unsent"] += sum(len(v) for v in pending.values())
            return
        for host, urls in pending.items():
            body = {
                "host": host,
                "key": self.key(host),
                "keyLocation": self.key_location(host),
                "urlList": sorted(set(urls)),
            }
            try:
                async with self._session.post(self.indexnow_endpoint, json=body) as resp:
                    self.stats[f"indexnow_{resp.status}"] += 1
                    self.stats["indexnow_urls"] += len(body["urlList"])
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.stats["indexnow_errors"] += 1
                log.warning("IndexNow POST failed: %r", exc)

    # ------------------------------------------------------------------ handlers
    def _page_index(self, request: web.Request, path: str) -> int | None:
        return self._by_host_path.get((_host_of_request(request), path))

    async def _page(self, request: web.Request) -> web.Response:
        i = self._page_index(request, request.path)
        if i is None:
            raise web.HTTPNotFound()
        host = _host_of_request(request)
        if host in self.pushback:
            status, retry_after, left = self.pushback[host]
            if left <= 1:
                del self.pushback[host]
            else:
                self.pushback[host] = (status, retry_after, left - 1)
            self.stats["pushbacks"] += 1
            headers = {} if retry_after is None else {"Retry-After": retry_after}
            return web.Response(status=status, text="slow down", headers=headers)
        url = self.url(i)
        version = self.truth.pages[url].version
        token = hashlib.sha256(f"{self.world.seed}:{url}:{version}".encode()).hexdigest()
        body = (
            f"<!doctype html><html><head><title>{escape(url)}</title></head><body>"
            f"<h1>{escape(url)}</h1><p>revision {version}</p><p>{token}</p></body></html>"
        )
        self.truth.served(url, version, time.time())
        self.stats["page_fetches"] += 1
        return web.Response(text=body, content_type="text/html")

    def _urlset(self, idx: list[int]) -> bytes:
        rows = [
            f"<url><loc>{escape(self.url(i))}</loc>"
            f"<lastmod>{format_w3c_datetime(self._lastmod[i])}</lastmod></url>"
            for i in idx
        ]
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}">'
            + "".join(rows)
            + "</urlset>\n"
        ).encode()

    def _conditional(
        self, request: web.Request, body: bytes, last_modified: float, content_type: str
    ) -> web.Response:
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        headers = {"ETag": etag, "Last-Modified": http_date(last_modified)}
        inm = request.headers.get("If-None-Match")
        if inm is not None:
            if etag in [t.strip() for t in inm.split(",")] or inm.strip() == "*":
                self.stats["sitemap_304"] += 1
                return web.Response(status=304, headers=headers)
        else:
            ims = parse_http_date(request.headers.get("If-Modified-Since", ""))
            if ims is not None and int(last_modified) <= ims:
                self.stats["sitemap_304"] += 1
                return web.Response(status=304, headers=headers)
        self.stats["sitemap_200"] += 1
        return web.Response(body=body, headers=headers, content_type=content_type)

    def _host_idx(self, request: web.Request) -> list[int]:
        idx = self._host_pages.get(_host_of_request(request))
        if not idx:
            raise web.HTTPNotFound()
        return idx

    async def _sitemap(self, request: web.Request) -> web.Response:
        idx = self._host_idx(request)
        last = max(self._lastmod[i] for i in idx)
        return self._conditional(request, self._urlset(idx), last, "application/xml")

    def _chunks(self, idx: list[int]) -> list[list[int]]:
        return [idx[k : k + self.sitemap_chunk] for k in range(0, len(idx), self.sitemap_chunk)]

    async def _sitemap_index(self, request: web.Request) -> web.Response:
        idx = self._host_idx(request)
        host = _host_of_request(request)
        rows = []
        for k, chunk in enumerate(self._chunks(idx)):
            lm = max(self._lastmod[i] for i in chunk)
            rows.append(
                f"<sitemap><loc>{self.base(host)}/sitemaps/{k}.xml.gz</loc>"
                f"<lastmod>{format_w3c_datetime(lm)}</lastmod></sitemap>"
            )
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{SITEMAP_NS}">'
            + "".join(rows)
            + "</sitemapindex>\n"
        ).encode()
        last = max(self._lastmod[i] for i in idx)
        if request.path.endswith(".gz"):
            return self._conditional(
                request, gzip.compress(body, mtime=0), last, "application/gzip"
            )
        return self._conditional(request, body, last, "application/xml")

    async def _sitemap_part(self, request: web.Request) -> web.Response:
        idx = self._host_idx(request)
        try:
            chunk = self._chunks(idx)[int(request.match_info["k"])]
        except (ValueError, IndexError):
            raise web.HTTPNotFound() from None
        body = gzip.compress(self._urlset(chunk), mtime=0)
        last = max(self._lastmod[i] for i in chunk)
        return self._conditional(request, body, last, "application/gzip")

    async def _keyfile(self, request: web.Request) -> web.Response:
        host = _host_of_request(request)
        if host not in self._host_pages or request.match_info["name"] != self.key(host):
            raise web.HTTPNotFound()
        return web.Response(text=self.key(host) + "\n", content_type="text/plain")

    @staticmethod
    def _const(body: bytes) -> Any:
        async def handler(request: web.Request) -> web.Response:
            return web.Response(body=body, content_type="application/xml")

        return handler

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        """A well-formed-looking urlset of ``mb`` megabytes (default 51), streamed."""
        mb = min(float(request.query.get("mb", "51")), 200.0)
        resp = web.StreamResponse(headers={"Content-Type": "application/xml"})
        await resp.prepare(request)
        await resp.write(f'<?xml version="1.0"?><urlset xmlns="{SITEMAP_NS}">'.encode())
        row = b"<url><loc>http://huge.test/" + b"x" * 980 + b"</loc></url>"
        block = row * 1024
        sent = 0
        try:
            while sent < mb * 1024 * 1024:
                await resp.write(block)
                sent += len(block)
            await resp.write(b"</urlset>")
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            return resp
        return resp

    async def _gzip_bomb(self, request: web.Request) -> web.Response:
        if self._bomb_gz is None:
            head = f'<?xml version="1.0"?><urlset xmlns="{SITEMAP_NS}">'.encode()
            self._bomb_gz = gzip.compress(head + b" " * (64 * 1024 * 1024) + b"</urlset>", 9)
        return web.Response(body=self._bomb_gz, content_type="application/gzip")

    async def _many(self, request: web.Request) -> web.Response:
        n = min(int(request.query.get("n", "50001")), 200_000)
        host = _host_of_request(request) or "many.test"
        rows = "".join(f"<url><loc>http://{host}/m/{k}</loc></url>" for k in range(n))
        body = f'<?xml version="1.0"?><urlset xmlns="{SITEMAP_NS}">{rows}</urlset>'
        return web.Response(text=body, content_type="application/xml")

    async def _redirect_loop(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/redirect/loop")

    async def _redirect_to(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query.get("url", "/"))

    async def _slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(min(float(request.query.get("s", "5")), 60.0))
        return web.Response(text="slow")

    async def _robots(self, request: web.Request) -> web.Response:
        host = _host_of_request(request)
        self.stats["robots_fetches"] += 1
        self.robots_fetches[host] += 1
        text = self.robots.get(host)
        if text is None and host in self.robots_files:
            with contextlib.suppress(OSError), open(self.robots_files[host],
                                                    encoding="utf-8") as f:
                text = f.read()
        if text is None:
            raise web.HTTPNotFound()
        headers = ({} if self.robots_max_age_s is None
                   else {"Cache-Control": f"max-age={self.robots_max_age_s}"})
        return web.Response(text=text, content_type="text/plain", headers=headers)

    async def _status(self, request: web.Request) -> web.Response:
        """Any status, with ``?retry_after=`` as its Retry-After (429/503 push-back)."""
        try:
            code = int(request.match_info["code"])
        except ValueError:
            raise web.HTTPNotFound() from None
        if not 200 <= code <= 599:
            raise web.HTTPNotFound()
        ra = request.query.get("retry_after")
        return web.Response(status=code, text=f"status {code}",
                            headers={} if ra is None else {"Retry-After": ra})

    async def _big(self, request: web.Request) -> web.Response:
        n = min(int(request.query.get("bytes", "1000000")), 100_000_000)
        return web.Response(body=b"x" * n, content_type="application/octet-stream")

    async def _truth(self, request: web.Request) -> web.Response:
        now = time.time()
        want = request.query.get("url")
        pages = {}
        for url, p in self.truth.pages.items():
            if want is not None and url != want:
                continue
            pages[url] = {
                "version": p.version,
                "changes": p.changes,
                "last_change_at": p.last_change_at,
                "copy_version": p.copy_version,
                "copy_at": p.copy_at,
                "fetches": p.fetches,
                "fresh": p.fresh,
                "fresh_s": self.truth.fresh_time(url, now),
                "importance": p.importance,
            }
        body = {
            "now": now,
            "window_start": self.truth.window_start,
            "accuracy": self.truth.accuracy(now),
            "fresh_now": self.truth.fresh_now(),
            "pages": pages,
        }
        return web.json_response(body)

    async def _truth_window(self, request: web.Request) -> web.Response:
        now = time.time()
        self.truth.start_window(now)
        return web.json_response({"window_start": now})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self.stats))

    def summary(self) -> dict[str, Any]:
        now = time.time()
        return {
            "accuracy": self.truth.accuracy(now),
            "fresh_now": self.truth.fresh_now(),
            "window_s": now - self.truth.window_start,
            **dict(self.stats),
        }


def world_from_file(path: str) -> World:
    with open(path, encoding="utf-8") as f:
        return World.from_json(json.load(f))
