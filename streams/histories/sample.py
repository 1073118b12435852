"""Sample history files from a simulated crawl: a change log and the captures a crawler
would have archived, in every format (for examples, tests and docs/results.md)::

    python -m streams.histories.sample var/sample --pages 300 --days 60

A Poisson world (paper 004 Sec. 6.1, one time unit = one day, rates log-normal around
0.3/day) is crawled by Nutch's adaptive schedule (:class:`models.sim.NutchAdaptive`) at
``--crawls-per-day``; every page is captured at the start and at each crawl.  Writes
``changes.jsonl`` (the complete history), ``captures.cdx``, ``captures.warc.gz`` and the
Kolobov et al. folder ``kolobov/``, all of the same captures.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from models.sim import Budget, NutchAdaptive, World, run, simulate_events
from streams.histories.write import write_cdx, write_changes, write_kolobov, write_warc

__all__ = ["Observations", "main", "simulated_history"]

DAY_S = 86400.0
T0_S = 1_700_000_000.0
Observations = dict[str, list[tuple[float, bool | None]]]


def simulated_history(m: int = 25, days: float = 30.0, seed: int = 3, *,
                      crawls_per_day: float = 5.0, median_rate: float = 0.3
                      ) -> tuple[Observations, dict[str, list[float]]]:
    """Captures (whole seconds) of a Nutch crawl of a Poisson world, and the true changes.

    ``changed`` is whether a change fell in ``(previous capture, capture]``.
    """
    rng = np.random.default_rng(seed)
    delta = np.exp(rng.normal(np.log(median_rate), 1.0, m))
    z = np.zeros(m)
    w = World(np.ones(m), delta, z, z.copy(), np.zeros(m, dtype=np.int64), np.array([np.inf]),
              np.zeros(m, dtype=bool))
    ev = simulate_events(w, days, rng)
    pol = NutchAdaptive(m, initial_interval=m / crawls_per_day,
                        min_interval=1 / crawls_per_day, max_interval=days, rng=rng)
    res = run(w, ev, pol, Budget(crawls_per_day))
    obs: Observations = {}
    truth: dict[str, list[float]] = {}
    for i in range(m):
        url = f"https://h{i % 3}.example/p{i}"
        ch = T0_S + ev.changes_of(i) * DAY_S
        crawl = np.unique(np.round(T0_S + res.crawl_time[res.crawl_page == i] * DAY_S))
        times = [T0_S, *crawl.tolist()]
        o: list[tuple[float, bool | None]] = [(T0_S, None)]
        for a, b in itertools.pairwise(times):
            o.append((b, bool(((ch > a) & (ch <= b)).any())))
        obs[url] = o
        truth[url] = ch.tolist()
    return obs, truth


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streams.histories.sample",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("out", type=Path)
    p.add_argument("--pages", type=int, default=300)
    p.add_argument("--days", type=float, default=60.0)
    p.add_argument("--crawls-per-day", type=float, default=100.0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    obs, truth = simulated_history(a.pages, a.days, a.seed, crawls_per_day=a.crawls_per_day)
    write_changes(a.out / "changes.jsonl", truth)
    write_cdx(a.out / "captures.cdx", obs)
    write_warc(a.out / "captures.warc.gz", obs)
    write_kolobov(a.out / "kolobov", obs)
    n = sum(len(o) for o in obs.values())
    print(f"{a.out}: {a.pages} pages, {sum(map(len, truth.values()))} changes, {n} captures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
