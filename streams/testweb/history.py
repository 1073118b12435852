"""The test web's past as a history file, and the crawl observations an import of it gives.

:func:`write_history` writes each page's past changes (:func:`streams.testweb.world.past_changes`,
anchored at the run's start ``t0``) in one of two forms ``recrawl import`` reads:

* ``changes`` - a change log (``history.jsonl``): every change, a complete history (a CMS's
  revision log), with each page's importance;
* ``cdx`` - a CDX index (``history.cdx``) of an earlier crawler's captures: round robin over
  the pages at ``crawls_per_s`` across the history, each capture ``changed`` when a change
  fell since the page's previous capture (an incomplete history; whole seconds, as CDX keeps
  them).

:func:`history_crawls` reads a written file back into the crawls the importer sends
(:func:`~streams.histories.observations.crawls_of`, the change log's window from its
earliest to its latest change), with the ping log written beside it (``pings.jsonl``:
:func:`streams.testweb.world.past_pings`, the pings the test web sent for its past
changes, as ``recrawl import --ping-log`` reads it), as ``(page, time_s, changed,
signals)`` in time order: what the simulator's mirror of the worker is fed before the run
(:class:`streams.testweb.expected.WorkerMirror`), so that it starts from the observations
the worker imported (without a ping log, intervals whose signals are unknown: the
importer's outcomes then say ``signals_known: false``).

``python -m streams.testweb.history --history 0 600 --formats changes cdx`` measures what a
warm start buys in the simulator: the mirror's and the oracle's accuracy on fresh draws of
the demo's default world (``recrawl demo``'s settings) for each history length and form
(``--estimates``: with the mirror's mean estimated change rate, ping recall and false-ping
rate at the end of the draws; ``--duration`` and ``--warmup``: longer draws, scored after a
longer warm-up, to see how the mirror's gap to the oracle closes as it learns from more live
crawls; ``--no-ping-log``: the history without its ping log).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from streams.histories import read_history
from streams.histories.observations import crawls_of, in_time_order
from streams.histories.write import write_cdx, write_changes, write_ping_log
from streams.testweb.world import World

__all__ = ["HISTORY_FORMATS", "PING_LOG", "history_crawls", "history_name", "write_history"]

HISTORY_FORMATS = ("changes", "cdx")
#: the history's ping log's name in the run's folder
PING_LOG = "pings.jsonl"


def history_name(fmt: str) -> str:
    """The history file's name in the run's folder (its suffix tells the importer the
    format)."""
    if fmt not in HISTORY_FORMATS:
        raise ValueError(f"history format must be one of {HISTORY_FORMATS}, not {fmt!r}")
    return "history.jsonl" if fmt == "changes" else "history.cdx"


def write_history(path: Path, world: World, urls: Sequence[str], past: Sequence[np.ndarray],
                  t0: float, history_s: float, *, fmt: str = "changes",
                  crawls_per_s: float = 10.0, pings: Sequence[np.ndarray] | None = None,
                  ping_log: Path | None = None) -> None:
    """Write the pages' ``past`` changes (seconds relative to ``t0``, the run's start) as a
    change log or an earlier crawler's CDX (module docstring); with ``pings`` (each page's
    past ping arrivals, relative to ``t0``: :func:`streams.testweb.world.past_pings`) also
    their ping log at ``ping_log``, each ping under its host's channel."""
    history_name(fmt)
    if pings is not None:
        if ping_log is None:
            raise ValueError("pings need a ping_log path")
        write_ping_log(ping_log, {u: (t0 + np.asarray(p)).tolist()
                                  for u, p in zip(urls, pings, strict=True)},
                       source={u: p.channel for u, p in zip(urls, world.pages, strict=True)})
    if fmt == "changes":
        write_changes(path, {u: (t0 + np.asarray(c)).tolist() for u, c in zip(urls, past,
                                                                              strict=True)},
                      importance={u: p.importance for u, p in zip(urls, world.pages,
                                                                   strict=True)})
        return
    m = len(urls)
    if crawls_per_s <= 0:
        raise ValueError(f"crawls_per_s must be > 0, not {crawls_per_s}")
    period = m / crawls_per_s
    obs: dict[str, list[tuple[float, bool | None]]] = {}
    for i, (url, ch) in enumerate(zip(urls, past, strict=True)):
        start = t0 - history_s + i / crawls_per_s
        k = max(0, math.ceil((t0 - start) / period))
        times = sorted({float(round(start + j * period)) for j in range(k)})
        times = [t for t in times if t < t0]
        absolute = t0 + np.asarray(ch)
        o: list[tuple[float, bool | None]] = [(times[0], None)] if times else []
        for a, b in itertools.pairwise(times):
            o.append((b, bool(((absolute > a) & (absolute <= b)).any())))
        obs[url] = o
    write_cdx(path, obs)


def history_crawls(path: Path, urls: Sequence[str], ping_log: Path | None = None
                   ) -> list[tuple[int, float, bool | None, tuple[int, ...] | None]]:
    """The crawls an import of ``path`` (with ``ping_log``, as ``recrawl import
    --ping-log``) sends, as ``(page, unix time, changed, signals)`` in time order
    (``page``: the index of its URL in ``urls``; a URL not there is an error; ``signals``:
    the interval's pings per source, None without a ping log: the outcomes' ``signals_known:
    false``)."""
    from streams.commands.importing import read_pages, read_ping_log

    plan = read_pages(path, None, strict=True)  # the importer's first pass
    if ping_log is not None:
        read_ping_log(plan, ping_log, strict=True)
    index = {u: i for i, u in enumerate(urls)}
    crawls = crawls_of(read_history(path, strict=True), plan.window, pings=plan.pings,
                       changes_per_url=plan.changes_after_start())
    out = [(index[c.url], c.time_s, c.changed, c.signals) for c in in_time_order(crawls)]
    out.sort(key=lambda x: x[1])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from streams.demo.config import DemoConfig, host_limit_of
    from streams.settings import load_settings
    from streams.testweb.expected import Loop, fresh_draws
    from streams.testweb.world import generate_world

    p = argparse.ArgumentParser(prog="python -m streams.testweb.history",
                                description="warm start in the simulator: mirror and oracle "
                                "on fresh draws of the demo's world")
    p.add_argument("--history", type=float, nargs="+", default=[0.0, 600.0])
    p.add_argument("--formats", nargs="+", choices=HISTORY_FORMATS, default=["changes"])
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="seconds of each draw (default: the demo's, 120)")
    p.add_argument("--warmup", type=float, default=None, metavar="S",
                   help="seconds not scored at the start of each draw (default: half the "
                   "duration, as the demo)")
    p.add_argument("--estimates", action="store_true",
                   help="also the mirror's mean estimated change rate, ping recall and "
                   "false-ping rate at the end of the draws, and the world's true means")
    p.add_argument("--no-ping-log", action="store_true",
                   help="import the history without its ping log (each interval's signals "
                   "unknown)")
    a = p.parse_args(argv)
    cfg = DemoConfig(seed=a.seed)
    duration = cfg.duration_s if a.duration is None else a.duration
    warmup = duration / 2 if a.warmup is None else a.warmup
    if not 0.0 <= warmup < duration:
        p.error(f"--warmup must be at least 0 and under the duration ({duration:g} s)")
    world = generate_world(cfg.seed, n_hosts=cfg.hosts, pages_per_host=cfg.pages_per_host,
                           time_unit_s=cfg.time_unit_s, sitemap_share=cfg.sitemap_share)
    settings = load_settings().model_copy(update={"t_delay_s": cfg.t_delay_s})
    loop = Loop(budget_per_s=cfg.budget_per_s, duration_s=duration,
                warmup_s=warmup, t_delay_s=cfg.t_delay_s,
                poll_interval_s=cfg.poll_interval_s, host_rate_per_s=host_limit_of(cfg, world),
                host_burst=settings.host_burst, host_max_in_flight=0, give_rates=False)
    om, osd = fresh_draws(world, settings, loop, kind="oracle", runs=a.runs, seed=a.seed)
    print(f"oracle: {om:.4f} (sd {osd:.4f})", flush=True)
    if a.estimates:
        t = world.arrays()
        print(f"true means: change rate {np.mean(t['change_rate_per_s']):.4f}/s, recall "
              f"{np.mean(t['recall']):.3f}, false-ping rate "
              f"{np.mean(t['false_rate_per_s']):.4f}/s", flush=True)
    for h in a.history:
        for fmt in a.formats if h > 0 else ["-"]:
            mirrors: list[Any] = []
            m, sd = fresh_draws(world, settings, loop, runs=a.runs, seed=a.seed, history_s=h,
                                history_format=fmt if h > 0 else "changes",
                                history_pings=not a.no_ping_log, mirrors=mirrors)
            line = f"mirror, history {h:g} s {fmt}: {m:.4f} (sd {sd:.4f})"
            if a.estimates:
                e = [x.estimated() for x in mirrors]
                line += (f"; estimated change rate "
                         f"{np.mean([x['change_rate_per_s'] for x in e]):.4f}/s, recall "
                         f"{np.mean([x['recall'] for x in e]):.3f}, false-ping rate "
                         f"{np.mean([x['false_rate_per_s'] for x in e]):.4f}/s")
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
