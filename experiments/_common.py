"""Shared plumbing of the simulator experiments: options, parallel repetitions, outputs.

Every experiment writes ``NAME.md`` (a markdown table), ``NAME.png`` (matplotlib, Agg)
and, with ``--json PATH``, machine-readable rows
``{"experiment": NAME, "rows": [{"m", "policy", "accuracy", "stderr", ...}]}``.
Repetitions run in at most two worker processes (``--jobs``).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

Row = dict[str, Any]
Job = dict[str, Any]


def help_text(doc: str) -> str:
    """A module docstring as ``--help`` text: its lines kept as written (the experiments
    table stays a table), without reST markup (table rules, double backquotes)."""
    lines = [ln for ln in doc.strip("\n").splitlines()
             if not (ln.strip() and set(ln.strip()) <= {"=", " "})]
    text = "\n".join(lines).rstrip().replace("``", "")
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)  # :mod:`x` -> x


def parser(name: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"recrawl experiments {name}",
                                description=help_text(description),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small version (seconds)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=None, help="repetitions (default per mode)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (max 2)")
    p.add_argument("--out", type=Path, default=Path("var/experiments"),
                   help="directory for NAME.md and NAME.png")
    p.add_argument("--json", type=Path, default=None, help="write rows as JSON here")
    p.add_argument("--no-progress", action="store_true")
    return p


def run_jobs(fn: Callable[[Job], list[Row]], jobs: Sequence[Job], *, processes: int,
             progress: bool, label: str) -> list[Row]:
    """Run ``fn`` on every job (in ``<= 2`` processes) with a rich progress bar."""
    processes = max(1, min(2, processes, len(jobs)))
    rows: list[Row] = []
    bar = None
    task = None
    if progress:
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
        task = bar.add_task(label, total=len(jobs))
    try:
        if processes == 1:
            for job in jobs:
                rows.extend(fn(job))
                if bar is not None and task is not None:
                    bar.advance(task)
        else:
            ctx = mp.get_context("spawn")
            with ctx.Pool(processes) as pool:
                for out in pool.imap_unordered(fn, jobs):
                    rows.extend(out)
                    if bar is not None and task is not None:
                        bar.advance(task)
    finally:
        if bar is not None:
            bar.stop()
    return rows


def aggregate(rows: Sequence[Row], keys: Sequence[str] = ("m", "policy"),
              value: str = "accuracy") -> list[Row]:
    """Mean and standard error over repetitions, grouped by ``keys``."""
    groups: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    extra: dict[tuple[Any, ...], Row] = {}
    for r in rows:
        k = tuple(r[x] for x in keys)
        groups[k].append(float(r[value]))
        extra.setdefault(k, {x: r[x] for x in r if x not in (value, "rep", "seconds")})
    out = []
    for k, v in groups.items():
        a = np.asarray(v)
        se = float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0
        out.append({**extra[k], value: float(a.mean()), "stderr": se, "reps": int(a.size)})
    out.sort(key=lambda r: tuple(str(r[x]) if not isinstance(r[x], int | float) else r[x]
                                 for x in keys))
    return out


def add_paired(rows: list[Row], raw: Sequence[Row], keys: Sequence[str],
               ref: Callable[[Row], dict[str, Any]],
               metrics: Sequence[tuple[str, str]] = (("accuracy", "d_acc"),)) -> None:
    """Paired differences to a reference run on the same world and events.

    For each raw row, the reference is the raw row of the same repetition whose group keys
    are the row's with ``ref(row)``'s overrides.  For each ``(metric, column)``, the
    aggregated row gets ``column`` and ``column_se``: the mean and standard error over
    repetitions of ``metric - reference metric`` (more sensitive than comparing the means,
    whose spread is mostly the worlds').
    """
    full = (*keys, "rep")
    by = {tuple(r[k] for k in full): r for r in raw}
    diffs: dict[tuple[Any, ...], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for r in raw:
        target = {**{k: r[k] for k in full}, **ref(r)}
        base = by.get(tuple(target[k] for k in full))
        if base is None:
            continue
        for metric, _ in metrics:
            diffs[tuple(r[k] for k in keys)][metric].append(r[metric] - base[metric])
    for row in rows:
        d = diffs.get(tuple(row[k] for k in keys))
        if d is None:
            continue
        for metric, col in metrics:
            a = np.asarray(d[metric])
            row[col] = float(a.mean())
            row[f"{col}_se"] = float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0


def markdown_table(rows: Sequence[Row], columns: Sequence[str]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4f}"
        return str(v)

    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "".join("| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |\n"
                          for r in rows)


@contextmanager
def figure(path: Path, figsize: tuple[float, float], *, ncols: int = 1,
           suptitle: str | None = None) -> Iterator[Any]:
    """A figure of ``ncols`` panels in one row (matplotlib's Agg backend, no display): the
    caller draws on the axes (one, or an array of ``ncols``); on leaving, the optional
    title, a tight layout and ``path`` (its folder made if missing, 110 dpi).  The figure
    is closed either way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=figsize)
    try:
        yield axes
        if suptitle is not None:
            fig.suptitle(suptitle, fontsize=9)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def rng(seed: int, *parts: int) -> np.random.Generator:
    """The generator of one job: ``seed`` and the job's coordinates, independent streams."""
    return np.random.default_rng([seed, *parts])


def plot_lines(rows: Sequence[Row], path: Path, *, x: str, title: str, ylabel: str = "accuracy",
               logx: bool = True) -> None:
    """One line (with standard-error bars) per policy."""
    with figure(path, (6.4, 4.2)) as ax:
        by: dict[str, list[Row]] = defaultdict(list)
        for r in rows:
            by[str(r["policy"])].append(r)
        for pol, rs in by.items():
            rs = sorted(rs, key=lambda r: r[x])
            ax.errorbar([r[x] for r in rs], [r["accuracy"] for r in rs],
                        yerr=[r.get("stderr", 0.0) for r in rs], marker="o", ms=3, capsize=2,
                        label=pol)
        if logx:
            ax.set_xscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)


def write_outputs(name: str, args: argparse.Namespace, rows: list[Row], table: str,
                  raw: list[Row] | None = None) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.md").write_text(table)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"experiment": name, "rows": rows}, indent=1))
    print(table)
