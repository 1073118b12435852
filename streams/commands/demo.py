"""``recrawl demo``: the whole loop with a live view; see :mod:`streams.demo`."""

from __future__ import annotations

import argparse

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "demo",
        help="run stack, worker, fetcher, test web and producers; compare live accuracy "
        "with the simulator's",
    )
    p.add_argument("--duration", type=float, default=120.0, help="seconds to run (default 120)")
    p.add_argument("--warmup", type=float, help="seconds before measuring (default duration/2)")
    p.add_argument("--budget", type=float, default=10.0, help="crawls per second (default 10)")
    p.add_argument("--hosts", type=int, default=20)
    p.add_argument("--pages-per-host", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--web-seed", type=int, default=None, metavar="N",
                   help="seed of the test web's changes and pings, live and past (default: "
                   "the world's: every run of one --seed replays the same ones)")
    p.add_argument("--time-unit", type=float, default=10.0, help="real seconds per world unit")
    p.add_argument("--sitemap-share", type=float, default=0.5)
    p.add_argument("--poll-interval", type=float, default=1.0, help="sitemap poll period (s)")
    p.add_argument(
        "--true-rates", action="store_true",
        help="give the worker the true change rates as priors (default: it learns them)",
    )  # fmt: skip
    p.add_argument(
        "--t-delay", type=float, default=2.0,
        help="the worker's ping delay window in seconds (App. C), scaled to the demo",
    )  # fmt: skip
    p.add_argument(
        "--sim-runs", type=int, default=4,
        help="fresh draws of the world simulated for expected_accuracy_draws (0: none)",
    )  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no live view")
    p.add_argument("--workers", type=int, default=1,
                   help="recrawl worker processes sharing the partitions (default 1)")
    p.add_argument("--kill-at", type=float, metavar="SECONDS",
                   help="SIGKILL the last worker this many seconds in, then start it again")
    p.add_argument("--restart-after", type=float, default=10.0, metavar="SECONDS",
                   help="seconds between the kill and the restart (default 10)")
    p.add_argument(
        "--history", type=float, default=600.0, metavar="SECONDS",
        help="warm start: import this many seconds of the test web's past (a change log) "
        "into the worker before the run (default 600)",
    )  # fmt: skip
    p.add_argument("--history-format", choices=("changes", "cdx"), default="changes",
                   help="the past as a change log (complete, default) or as an earlier "
                   "crawler's CDX captures (round robin at the budget)")
    p.add_argument("--no-ping-log", action="store_true",
                   help="import the history without the ping log of its past pings (the "
                   "worker then learns each page's ping quality from live crawls only)")
    p.add_argument("--cold", action="store_true",
                   help="no history: the worker starts from its priors (same as --history 0)")
    p.add_argument("--json", help="write the summary here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.demo import DemoConfig, run_demo

    cfg = DemoConfig(
        duration_s=args.duration, warmup_s=args.warmup, budget_per_s=args.budget,
        hosts=args.hosts, pages_per_host=args.pages_per_host, seed=args.seed,
        time_unit_s=args.time_unit, sitemap_share=args.sitemap_share,
        poll_interval_s=args.poll_interval, give_rates=args.true_rates, live=not args.quiet,
        t_delay_s=args.t_delay, sim_runs=args.sim_runs, workers=args.workers,
        kill_at_s=args.kill_at, restart_after_s=args.restart_after,
        history_s=0.0 if args.cold else args.history, history_format=args.history_format,
        web_seed=args.web_seed, history_pings=not args.no_ping_log,
    )  # fmt: skip
    if not cfg.history_s >= 0 or cfg.history_s == float("inf"):
        print("recrawl demo: --history must be a number of seconds >= 0")
        return 2
    if cfg.workers < 1:
        print("recrawl demo: --workers must be at least 1")
        return 2
    run_demo(cfg, args.json)
    return 0
