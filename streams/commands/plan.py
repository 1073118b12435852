"""``recrawl plan --budget 10 100 1000``: what each budget buys, from the current estimates
(:mod:`streams.worker.plan`: Algorithm 1 simulated in worlds drawn from their posterior, next
to the continuous optimum); ``--png PATH`` plots it, ``--json PATH`` writes it."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from streams.commands._settings import CLIENT_SETTINGS, add_settings_args, settings_from_args

__all__ = ["DEFAULT_BUDGETS", "plot", "print_table", "register", "run"]

DEFAULT_BUDGETS = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "plan",
        help="expected accuracy per crawl budget from the current estimates in Redis "
        "(Algorithm 1 simulated with the host limits in worlds drawn from the estimates' "
        "posterior; the continuous optimum of paper 004 next to it)",
    )
    p.add_argument("--budget", type=float, nargs="+", metavar="R",
                   help="budgets in orders per second (default: "
                   + " ".join(f"{b:g}" for b in DEFAULT_BUDGETS) + ")")
    p.add_argument("--png", type=Path, help="plot accuracy against budget to this PNG")
    p.add_argument("--json", type=Path, help="write the plan as JSON here")
    add_settings_args(p, CLIENT_SETTINGS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.reach import check_redis
    from streams.store.redis_store import Store
    from streams.worker.plan import plan_from_store

    budgets = args.budget or list(DEFAULT_BUDGETS)
    bad = [b for b in budgets if not b > 0]
    if bad:
        print(f"recrawl plan: budgets must be > 0 orders/s, got {bad}", file=sys.stderr)
        return 2
    settings = settings_from_args(args)

    async def go() -> dict[str, Any]:
        await check_redis(settings.redis_url, settings.connect_timeout_s)
        store = Store.from_url(settings.redis_url, settings.key_prefix)
        try:
            return await plan_from_store(store, settings, budgets)
        finally:
            await store.close()

    out = asyncio.run(go())
    print_table(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    if not out["pages"]:
        if args.png:
            print(f"no plot written to {args.png}: nothing to plot")
        return 1
    if args.png:
        plot(out, args.png)
        print(f"plot written to {args.png}")
    return 0


def print_table(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not out["pages"]:
        console.print("no pages in Redis: nothing to plan (is the catalogue loaded, "
                      "and RECRAWL_KEY_PREFIX right?)")
        return
    t = Table(title="recrawl plan: expected accuracy by budget")
    for name in ("budget (orders/s)", "accuracy", "optimum", "threshold Lambda",
                 "pages crawled", "mean interval (s)"):
        t.add_column(name, justify="right")
    t.add_column("", no_wrap=True)
    for r in out["rows"]:
        t.add_row(
            f"{r['budget_per_s']:g}", _f(r["accuracy"], ".3f"),
            _f(r["optimum_accuracy"], ".3f"), _f(r["multiplier"], ".4g"),
            f"{r['pages_crawled']} / {out['pages']}", _f(r["mean_interval_s"], ".4g"),
            "<- current" + (" (paused)" if out["paused"] else "") if r["current"] else "",
            style="bold" if r["current"] else None,
        )
    console.print(t)
    console.print(f"Current budget {out['budget_per_s']:g} orders/s, from "
                  f"{out['budget_source']}.", highlight=False)
    console.print(f"{out['pages']} pages ({out['pages_estimated']} with estimates, the rest "
                  f"from priors; {out['pages_unusable']} unusable left out; "
                  f"{out['pages_simulated']} simulated). accuracy: Algorithm 1 on the "
                  f"worker's engine with its host limits and t_delay {out['t_delay_s']:g} s, "
                  "ranking by the point "
                  f"estimates, in {out['draws']} worlds drawn from their posterior (mean); "
                  "optimum: the continuous optimum on the point estimates (eq. 4/5 of "
                  "paper 004), an upper bound. Not modelled: the longest-interval floor, "
                  "ping delays, fetch lags.", highlight=False)


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def plot(out: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in out["rows"] if r["accuracy"] is not None]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot([r["budget_per_s"] for r in rows], [r["accuracy"] for r in rows], "o-",
            label="Algorithm 1 simulated, posterior worlds")
    ax.plot([r["budget_per_s"] for r in rows], [r["optimum_accuracy"] for r in rows], "s--",
            color="grey", label="continuous optimum on the estimates (eq. 4/5, paper 004)")
    cur = out["current"]
    if cur is not None and cur["accuracy"] is not None:
        ax.plot([cur["budget_per_s"]], [cur["accuracy"]], "r*", markersize=14,
                label=f"current budget {cur['budget_per_s']:g}/s: {cur['accuracy']:.3f}")
    ax.set_xscale("log")
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("crawl budget R (orders/s)")
    ax.set_ylabel("expected accuracy")
    ax.set_title(f"recrawl plan: {out['pages']} pages, current estimates")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
