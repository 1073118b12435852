"""The demo's summary table and its JSON form.

Part of :mod:`streams.demo` (split by concern), which re-exports every name.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["jsonable", "print_summary"]


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}"


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="recrawl demo: summary")
    t.add_column("what")
    t.add_column("value", justify="right")
    acc = summary["accuracy"]
    s, w = summary, summary["world"]
    rows = [
        ("live accuracy", "-" if acc is None else f"{acc:.3f}"),
        ("expected accuracy", f"{summary['expected_accuracy']:.3f} ({summary['expected_source']})"),
        ("difference", "-" if acc is None else f"{100 * summary['difference']:+.1f} points"),
        ("expected, true parameters (oracle)", _num(summary.get("expected_accuracy_oracle"))),
        ("expected over fresh draws (sd)",
         f"{_num(summary.get('expected_accuracy_draws'))} "
         f"({_num(summary.get('expected_accuracy_draws_sd'))})"),
        ("oracle over fresh draws (sd)",
         f"{_num(summary.get('expected_accuracy_oracle_draws'))} "
         f"({_num(summary.get('expected_accuracy_oracle_draws_sd'))})"),
        ("continuous optimum (true parameters)", _num(summary.get("continuous_optimum"))),
        ("orders", f"{s['orders']} ({s['orders_per_s']:.2f}/s, budget {s['budget_per_s']:g}/s)"),
        ("outcomes ok / failed", f"{summary['outcomes_ok']} / {summary['outcomes_failed']}"),
        ("changed / unchanged / first",
         f"{s['changed']} / {s['unchanged']} / {s['first_fetches']}"),
        ("pings (indexnow + sitemap)",
         f"{s['pings']} ({s['pings_indexnow']} + {s['pings_sitemap']})"),
        ("world",
         f"{w['pages']} pages, {w['hosts']} hosts, {w['changes_per_s']:.1f} changes/s"),
        ("measured over", f"{summary['window_s']:.0f} s after {summary['warmup_s']:.0f} s warm-up"),
    ]  # fmt: skip
    h = summary.get("history")
    rows.append(("warm start (imported history)", "none (cold)" if not h else
                 f"{h['history_s']:.0f} s of {h['format']}: {h['pages']} pages, "
                 f"{h['intervals']} intervals ({h['changes']} changes"
                 + ("" if h.get("pings") is None else f", {h['pings']} pings")
                 + f") in {h['import_s']:.0f} s"))
    rows.append(("workers", str(summary.get("workers", 1))))
    for kill in summary.get("worker_kills", []):
        again = kill.get("ready_again_at_s")
        rows.append((f"worker {kill['worker']:.0f} killed",
                     f"at {kill['killed_at_s']:.0f} s, ready again at "
                     + ("-" if again is None else f"{again:.0f} s")))
    for k, v in summary["worker_pings"].items():
        rows.append((f"worker {k}", f"{v:g}"))
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


def jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, np.generic):
        return obj.item()
    return obj
