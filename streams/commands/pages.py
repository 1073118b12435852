"""``recrawl pages load FILE``: publish a page catalogue (CSV or JSONL) to ``recrawl.pages``.

CSV (a file ending ``.csv``) has a header line; ``url`` is required, ``importance``,
``change_rate_per_s`` and ``deleted`` (1/true/yes) are optional, other columns ignored.
Any other file is JSONL: one page event per line (``docs/schemas/``).  Each line is
validated with the worker's model; bad lines are reported with their line number and
skipped, the rest is sent (exit 1 when any was skipped).  Format: ``docs/operating.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streams.commands._settings import CLIENT_SETTINGS, add_settings_args, settings_from_args

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("pages", help="load a page catalogue into recrawl.pages")
    p.add_argument("action", choices=["load"])
    p.add_argument("file", type=Path, help="CSV (header with url) or JSONL")
    add_settings_args(p, CLIENT_SETTINGS)
    p.set_defaults(func=run)


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open(newline="") as fh:
        if path.suffix.lower() == ".csv":
            for i, row in enumerate(csv.DictReader(fh), start=2):
                out: dict[str, Any] = {"url": row.get("url", "")}
                for name in ("importance", "change_rate_per_s"):
                    if row.get(name):
                        try:
                            out[name] = float(row[name])
                        except ValueError:
                            out[name] = row[name]
                if row.get("deleted"):
                    out["deleted"] = row["deleted"].strip().lower() in ("1", "true", "yes")
                yield i, out
        else:
            for i, line in enumerate(fh, start=1):
                if line.strip():
                    try:
                        yield i, json.loads(line)
                    except json.JSONDecodeError as exc:
                        yield i, exc


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if not args.file.exists():
        print(f"recrawl pages load: no such file {args.file}", file=sys.stderr)
        return 2
    return asyncio.run(_load(settings, args.file))


async def _load(settings: Any, path: Path) -> int:
    from pydantic import ValidationError
    from rich.progress import Progress

    from streams.events.records import PageEvent, validation_reason
    from streams.reach import started_producer

    total = sum(1 for _ in _rows(path))
    sent = bad = 0
    async with started_producer(settings.kafka_bootstrap, settings.connect_timeout_s,
                                linger_ms=20) as producer:
        with Progress() as progress:
            task = progress.add_task(f"loading {path.name}", total=total)
            pending = []
            for line, row in _rows(path):
                progress.advance(task)
                try:
                    if isinstance(row, Exception):
                        raise ValueError(str(row))
                    page = PageEvent.model_validate(row)
                except (ValidationError, ValueError) as exc:
                    reason = validation_reason(exc) if isinstance(exc, ValidationError) else exc
                    progress.console.print(f"line {line}: skipped: {reason}")
                    bad += 1
                    continue
                body = page.model_dump_json(by_alias=True, exclude_none=True)
                pending.append(await producer.send(
                    settings.topic("pages"), body.encode(), key=page.host.encode()))
                sent += 1
                if len(pending) >= 5000:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
    print(f"{sent} pages sent to {settings.topic('pages')}, {bad} skipped")
    return 0 if bad == 0 else 1
