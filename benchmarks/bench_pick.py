"""The decision core's pick alone (no Redis, no Kafka): ticks of
:func:`models.decision.core.choose` over one :class:`~models.decision.core.ShardBook` of
crawled pages, every host limited by its token bucket, orders coming back crawled after a
fixed latency.  Same-run reference: the previous crawl index
(:class:`models.index.CrawlIndex` with the per-page and per-host eligibility filters the
core used before the host x page index), on the same pages and ticks.

    .venv/bin/python benchmarks/bench_pick.py --pages 1000000 --hosts 10000 --host-rate 1

Reports picks per second of the ticks (wall and process CPU time: the machine is shared),
the worst and 99th-percentile tick, the first tick (the
index builds its per-host bounds), the values computed per pick, and the process RSS.
Pages have the service's prior parameters (``alpha = Delta``, ``gamma = 0``: Greedy) or,
with ``--estimated``, half of them estimates with ping signals (exact NCIS values,
paper 004 Thm. 1).
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from collections import deque
from collections.abc import Callable, Hashable

import numpy as np

from models.decision.core import ShardBook, choose
from models.decision.hostindex import HostIndex
from models.decision.hosts import HostBuckets
from models.index import CrawlIndex


class LegacyIndex(CrawlIndex):
    """The crawl index as the core used it before the host x page index: ``best`` with a
    per-page counter (``eligible``) and a host pre-filter (``eligible_host``)."""

    def best_capped(self, now: float, k: int, room: Callable[[Hashable], int], *,
                    park: Callable[[Hashable], None] | None = None,
                    eligible: Callable[[Hashable], bool] | None = None
                    ) -> list[tuple[Hashable, float]]:
        used: dict[Hashable, int] = {}
        accepted: set[Hashable] = set()
        host_of = self._host
        names = self._host_names

        def ok(page: Hashable) -> bool:
            if page in accepted:
                return True
            if eligible is not None and not eligible(page):
                return False
            host = names[int(host_of[self._slot[page]])]
            u = used.get(host, 0)
            if room(host) - u < 1:
                return False
            used[host] = u + 1
            accepted.add(page)
            return True

        got = self.best(now, eligible=ok, eligible_host=lambda h: room(h) >= 1, k=k)
        return [(p, v) for p, v in got if v > 0.0]

    def unpark(self, host: Hashable) -> None:
        return None

    def forget(self, page: Hashable) -> None:
        if page in self:
            self.remove(page)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def build(kind: str, args: argparse.Namespace) -> ShardBook:
    rng = np.random.default_rng(args.seed)
    n, H = args.pages, args.hosts
    index = HostIndex(window_s=args.window) if kind == "host" else LegacyIndex()
    book = ShardBook(HostBuckets(args.host_rate, burst=1.0), index=index)
    delta = rng.uniform(0.5, 2.0, n) / 86400.0
    alpha, gamma = delta.copy(), np.zeros(n)
    beta = math.log(2.0) / alpha  # the service's default source precision 0.5
    if args.estimated:  # half with estimates: a ping source of rate nu, lambda = 0.5
        est = rng.random(n) < 0.5
        nu = delta * 0.5
        alpha = np.where(est, 0.5 * delta, alpha)
        gamma = np.where(est, 0.5 * delta + nu, 0.0)
        beta = np.where(est, np.log(np.maximum(gamma, 1e-300) / nu) / alpha, beta)
    mu = 1.0 + rng.integers(0, 5, n).astype(np.float64)
    origin = -rng.uniform(10.0, 86400.0, n)
    if args.alike:  # every page of a host with its host's parameters (bench_e2e's pages)
        first = np.arange(n) % H
        delta, alpha, gamma, beta, mu, origin = (a[first] for a in (
            delta, alpha, gamma, beta, mu, origin))
    pages = list(range(n))
    hosts = [f"host{i % H}.example" for i in range(n)]
    book.set_pages(pages, hosts, crawled=np.ones(n, dtype=bool), origin=origin, alpha=alpha,
                   beta=beta, gamma=gamma, mu=mu, max_value=mu / delta, first_seen_s=0.0,
                   last_crawl_s=origin, delta=delta, estimated=np.zeros(n, dtype=bool),
                   src_beta=beta[:, None])
    return book


def warm_up() -> None:
    """Compile the value kernel (numba) before anything is timed."""
    from models.values import _values_at

    one = np.ones(4)
    _values_at(np.arange(4), 1.0, -one, one, one, one * 0.5, one, None)
    _values_at(np.arange(4), 1.0, -one, one, one, one * 0.0, one, None)


def run(kind: str, args: argparse.Namespace) -> dict[str, float]:
    warm_up()
    t0 = time.perf_counter()
    book = build(kind, args)
    load_s = time.perf_counter() - t0
    per_tick = max(1, round(args.rate * args.tick))
    now = 1.0
    flights: deque[tuple[float, list[tuple[int, str]]]] = deque()
    t = book.table
    ticks: list[float] = []
    cpu = 0.0
    picks_total = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        now += args.tick
        while flights and flights[0][0] <= now - args.latency:  # outcomes: crawled
            _, done = flights.popleft()
            for page, host in done:
                book.end_flight(page)
                s = t.slot[page]
                book.set_page(page, host, crawled=True, origin=now, alpha=float(t.alpha[s]),
                              beta=float(t.beta[s]), gamma=float(t.gamma[s]),
                              mu=float(t.mu[s]), max_value=float(t.max_value[s]))
        a, ac = time.perf_counter(), time.process_time()
        picks = choose([book], per_tick, now, floor=False)
        for p in picks:
            book.hosts.take(p.host, now)
            book.start_flight(p.page, ("o", now))
        ticks.append(time.perf_counter() - a)
        cpu += time.process_time() - ac
        picks_total += len(picks)
        flights.append((now, [(int(p.page), str(p.host)) for p in picks]))  # type: ignore[call-overload]
    wall = time.perf_counter() - start
    arr = np.array(ticks)
    st = book.index.stats.as_dict()
    return {"load_s": load_s, "ticks": float(arr.size), "picks": float(picks_total),
            "sim_s": float(arr.size * args.tick),
            "picks_per_sim_s": picks_total / (arr.size * args.tick),
            "picks_per_wall_s": picks_total / float(arr.sum()),
            "picks_per_cpu_s": picks_total / cpu,
            "loop_picks_per_wall_s": picks_total / wall,
            "first_tick_ms": float(arr[0] * 1e3), "worst_later_tick_ms":
            float(arr[1:].max() * 1e3) if arr.size > 1 else math.nan,
            "p99_tick_ms": float(np.percentile(arr, 99) * 1e3),
            "values_per_pick": st["values_computed"] / max(1, picks_total),
            "rss_mib": rss_mib()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--host-rate", type=float, default=1.0, help="crawls/s per host")
    ap.add_argument("--rate", type=float, default=20_000.0, help="orders/s wanted")
    ap.add_argument("--tick", type=float, default=0.01, help="simulated seconds per tick")
    ap.add_argument("--latency", type=float, default=0.05, help="order -> outcome, s")
    ap.add_argument("--seconds", type=float, default=10.0, help="wall seconds per index")
    ap.add_argument("--window", type=float, default=5.0, help="HostIndex window_s")
    ap.add_argument("--estimated", action="store_true")
    ap.add_argument("--alike", action="store_true",
                    help="every page of a host alike (its host's parameters and last crawl: "
                         "value ties within each host, as bench_e2e's pages)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", choices=["host", "legacy"], default=None)
    args = ap.parse_args()
    for kind in ("host", "legacy") if args.only is None else (args.only,):
        r = run(kind, args)
        print(kind, " ".join(f"{k}={v:,.3f}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
