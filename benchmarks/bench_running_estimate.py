"""The stream estimator's running estimate: the model's rule against the stream's.

docs/benchmarks.md, "bench_estimation.py, bench_estimators.py, bench_running_estimate.py":
``python benchmarks/bench_running_estimate.py [--pages 200] [--intervals 200]``

Each page's crawl intervals are drawn by :func:`models.simulate_estimation.simulate_page_intervals`
(Poisson changes and crawls, three disjoint ping sources, one per source group, with false
signals), then estimated three ways with the stream's ring of ``STREAM_RING`` changed
intervals:

* ``model``: ``SignalEstimator.update`` per interval (the running estimate ``theta``
  refreshed by a Newton step when a changed interval leaves the ring, the model's own
  rule);
* ``stream``: :meth:`streams.estimates.estimation.Estimation.observe` per interval (the
  posterior mode solved at every update kept as the running estimate);
* ``full``: :func:`models.estimators.fit_signal_mle`, every interval kept (the full-data
  MAP the streaming state approximates, paper 004 App. E).

It prints, per rule and per the sources' recall, how far ``alpha`` and the change rate
land from the full-data MAP: the mean and largest gap of ``alpha`` in units of the full
fit's standard error, and of the change rate in percent.  A report, not a test.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from models.estimators import CrawlInterval, fit_signal_mle
from models.simulate_estimation import simulate_page_intervals
from streams.estimates.estimation import (
    STREAM_RING,
    Estimation,
    Observation,
    estimates_of,
    group_counts,
)
from streams.events.records import SOURCES

HOUR_S = 3600.0
#: the simulated sources' positions in SOURCES: one per group (sitemap, indexnow, cdn)
_SOURCE_AT = (SOURCES.index("sitemap"), SOURCES.index("indexnow"), SOURCES.index("cdn"))


def gaps(pages: int, intervals: int, recall: tuple[float, ...], seed: int
         ) -> dict[str, tuple[list[float], list[float]]]:
    """Per rule: the gaps of ``alpha`` (in full-fit standard errors) and of the change rate
    (relative) to the full-data MAP, one per page."""
    rng = np.random.default_rng(seed)
    out: dict[str, tuple[list[float], list[float]]] = {"model": ([], []), "stream": ([], [])}
    for _ in range(pages):
        sim = simulate_page_intervals(
            rng, change_rate_per_s=1 / (10 * HOUR_S), crawl_rate_per_s=1 / (5 * HOUR_S),
            n_intervals=intervals, recall=recall, precision=(0.9, 0.7, 0.5))
        full = fit_signal_mle(sim.interval_s, sim.n_signals, sim.changed)
        stream = Estimation(ring_capacity=STREAM_RING)
        st = stream.estimator.init()
        record: str | None = None
        t = 1e9
        for tau, changed, sig in zip(sim.interval_s.tolist(), sim.changed.tolist(),
                                     sim.n_signals.tolist(), strict=True):
            t += tau
            signals = [0] * len(SOURCES)
            for at, n in zip(_SOURCE_AT, sig, strict=True):
                signals[at] = int(n)
            st = stream.estimator.update(st, CrawlInterval(tau, bool(changed),
                                                           group_counts(signals), end_s=t))
            (record,) = stream.observe([Observation(record, tau, tuple(signals), bool(changed),
                                                    t)])
        (model,) = stream.results([st])
        new = estimates_of(record or "")
        assert new is not None
        for name, e in (("model", model), ("stream", new)):
            out[name][0].append((e.alpha_per_s - full.alpha_per_s) / full.alpha_se_per_s)
            out[name][1].append(e.change_rate_per_s / full.change_rate_per_s - 1.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--intervals", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(f"{args.pages} pages x {args.intervals} intervals, ring {STREAM_RING}; gaps to the "
          "full-data MAP")
    print("recall          | rule   | alpha gap / se: mean |abs|, max |abs| | "
          "change rate gap: mean, mean |abs|, max |abs|")
    for recall in ((0.0, 0.0, 0.0), (0.5, 0.3, 0.1)):
        res = gaps(args.pages, args.intervals, recall, args.seed)
        for name, (a, r) in res.items():
            aa, rr = np.abs(a), np.abs(r)
            print(f"{recall!s:15} | {name:6} | {aa.mean():.3f}, {aa.max():.3f} | "
                  f"{100 * np.mean(r):+.2f}%, {100 * rr.mean():.2f}%, {100 * rr.max():.2f}%")
        assert all(math.isfinite(x) for x in res["stream"][0])


if __name__ == "__main__":
    main()
