"""``recrawl import FILE``: warm-start a running worker's estimators from a history file.

The file is any format :func:`streams.histories.read_history` reads (change log, CDX,
WARC, Kolobov et al. folder; ``--format``, else from the name).  Its observations reach the
worker the way live crawls do, as crawl outcomes on ``recrawl.outcomes``
(:mod:`streams.histories.observations`): the worker's outcomes agent adds each interval
to the page's estimator, so the import needs no path of its own in the worker and gets
the outcome path's guards:

* a redelivered outcome is recognised by its offset and never counted twice;
* an outcome not after the page's last crawl is ``stale`` and changes nothing, so a
  re-run, or a history older than what the worker already saw of a page, leaves the
  page as it is;
* an imported outcome carries an order id no order has (``import-<file digest>``), so it
  never takes a live order of the page out of flight.

An outcome of a page the worker does not have is dropped, and pages and outcomes are two
topics read by two agents, so the import runs in two passes over the file: the first reads
every page (and a change log's window) and sends a page event for each
(``recrawl.pages``, importance from the file, 1 where it gives none), then waits until the
worker's consumer group (``app_id``) has committed past them; the second sends the
outcomes, in time order per URL.

Progress: a Redis hash ``<key_prefix>:import:<digest of the file's bytes>`` (with the
worker's state, so a store started afresh imports afresh) holds whether the pages were
sent and how many outcomes the broker acknowledged; an interrupted run (or one stopped by
``--limit``) resumes after them, a finished file sends nothing.  Outcomes acknowledged
after the last progress write are sent again on resume and are ``stale`` at the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streams.commands._settings import CLIENT_SETTINGS, add_settings_args, settings_from_args
from streams.histories import FORMATS, Capture, Change, HistoryError, Page, ReadReport

if TYPE_CHECKING:
    from streams.histories.observations import Window
    from streams.histories.pings import PingIndex

__all__ = ["ImportPlan", "ImportResult", "file_digest", "import_file", "read_pages", "register",
           "run"]

#: outcomes sent between two progress writes (and awaited together)
BATCH = 2000
#: refused URLs kept with their reason for the summary (the rest are only counted)
FIRST_REFUSED = 20


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "import",
        help="warm-start a running worker's estimators from a change history",
        description="Send a change history (change log, CDX, WARC or Kolobov et al. folder) "
        "to a running worker as crawl outcomes, so it orders by learned change rates from "
        "its first second. Idempotent and resumable: progress is kept in Redis, and a "
        "re-run sends nothing. Format and behaviour: docs/operating.md.",
    )
    p.add_argument("file", type=Path, help="history file (or Kolobov et al. folder)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="the file's format (default: from its name)")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first bad line (exit 1, nothing sent)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="send at most N outcomes in this run, then stop (the next run "
                   "continues)")
    p.add_argument("--again", action="store_true",
                   help="forget the progress record and send everything again (the worker "
                   "keeps what it has: every outcome is then stale)")
    p.add_argument("--start", type=float, default=None, metavar="UNIX_S",
                   help="Kolobov et al. folder: when the collection started (default: so "
                   "that its last crawl is at the first run's time)")
    p.add_argument("--ping-log", type=Path, default=None, metavar="PINGS",
                   help="the pings the history's pages received (JSON Lines, one "
                   '{"url", "time", "source"} per ping): each interval is sent with its '
                   "pings, so the worker learns each page's ping quality too")
    p.add_argument("--wait-s", type=float, default=300.0, metavar="S",
                   help="how long to wait for the worker to consume the page events "
                   "(default 300)")
    add_settings_args(p, (*CLIENT_SETTINGS, "app_id", "max_future_s"))
    p.set_defaults(func=run)


def file_digest(path: Path, fmt: str) -> str:
    """BLAKE2b (16 bytes, hex) of the format and the bytes of the file (a Kolobov et al.
    folder: of its three files, in a fixed order), not of its name: the import's identity."""
    from streams.histories.kolobov import HISTORY, IMPORTANCE, URLS

    h = blake2b(digest_size=16)
    h.update(fmt.encode())
    parts = [path / n for n in (URLS, IMPORTANCE, HISTORY)] if fmt == "kolobov" else [path]
    for part in parts:
        size = part.stat().st_size if part.exists() else -1
        h.update(b"\0%d\0" % size)  # where one part ends and the next begins
        if size > 0:
            with open(part, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
    return h.hexdigest()


@dataclass
class ImportPlan:
    """What the first pass found: each URL's page (canonical URL, host, importance) or why
    the worker would refuse it, a change log's window, and the records read."""

    pages: dict[str, tuple[str, str, float] | None] = field(default_factory=dict)
    refused: int = 0
    first_refused: list[tuple[str, str]] = field(default_factory=list)
    records: int = 0
    changes: bool = False
    first_s: float = math.inf
    last_s: float = -math.inf
    report: ReadReport = field(default_factory=ReadReport)
    #: a change log's changes per URL, and those in the millisecond of the earliest change
    changes_per_url: dict[str, int] = field(default_factory=dict)
    _at_first: dict[str, int] = field(default_factory=dict)
    #: the ping log's pings of the file's pages (``--ping-log``), and what reading it found
    pings: PingIndex | None = None
    ping_report: ReadReport | None = None

    def changes_after_start(self) -> dict[str, int]:
        """Each URL's changes after the window's start (the grid of
        :func:`streams.histories.observations.crawls_of` with a ping log)."""
        return {u: n - self._at_first.get(u, 0) for u, n in self.changes_per_url.items()}

    @property
    def window(self) -> Window | None:
        """The window a change log's crawls are made over, from its earliest to its latest
        change; None for captures."""
        from streams.histories.observations import Window

        return Window(self.first_s, self.last_s) if self.changes else None


def read_pages(path: Path, fmt: str | None, *, strict: bool, start_s: float = 0.0,
               on_record: Any = None) -> ImportPlan:
    """The first pass (:class:`ImportPlan`); pages are checked with the worker's model."""
    from pydantic import ValidationError

    from streams.events.records import PageEvent, validation_reason
    from streams.histories import read_history

    plan = ImportPlan()
    importance: dict[str, float] = {}
    for rec in read_history(path, fmt, strict=strict, report=plan.report, start_s=start_s):
        plan.records += 1
        if on_record is not None and plan.records % 4096 == 0:
            on_record(4096)
        if type(rec) is Page:
            importance[rec.url] = rec.importance
            continue
        assert isinstance(rec, Change | Capture)
        importance.setdefault(rec.url, 1.0)
        if type(rec) is Change:
            plan.changes = True
            plan.changes_per_url[rec.url] = plan.changes_per_url.get(rec.url, 0) + 1
            c, first = round(rec.time_s, 3), round(plan.first_s, 3)
            if c < first:
                plan._at_first = {rec.url: 1}
            elif c == first:
                plan._at_first[rec.url] = plan._at_first.get(rec.url, 0) + 1
        plan.first_s = min(plan.first_s, rec.time_s)
        plan.last_s = max(plan.last_s, rec.time_s)
    seen: dict[str, str] = {}
    for url, imp in importance.items():
        try:
            ev = PageEvent.model_validate({"url": url, "importance": imp})
        except ValidationError as exc:
            _refuse(plan, url, validation_reason(exc))
            continue
        other = seen.get(ev.url)
        if other is not None:
            _refuse(plan, url, f"the same page as {other} (canonical {ev.url})")
            continue
        seen[ev.url] = url
        plan.pages[url] = (ev.url, ev.host, imp)
    return plan


def read_ping_log(plan: ImportPlan, path: Path, *, strict: bool) -> None:
    """The ping log's pings of the plan's pages into ``plan.pings``."""
    from streams.histories.pings import PingIndex

    plan.ping_report = ReadReport(str(path))
    plan.pings = PingIndex.read(path, {u for u, p in plan.pages.items() if p is not None},
                                plan.ping_report, strict=strict)


def _refuse(plan: ImportPlan, url: str, reason: str) -> None:
    plan.pages[url] = None
    plan.refused += 1
    if len(plan.first_refused) < FIRST_REFUSED:
        plan.first_refused.append((url, reason))


@dataclass
class ImportResult:
    """What one import did: its exit status (``recrawl import``'s), the pages and records
    read, the outcomes sent in this run, whether it sent all of them (``finished``) and
    whether the worker applied them within the wait (``applied``)."""

    code: int
    pages: int = 0
    records: int = 0
    sent: int = 0
    finished: bool = False
    applied: bool = False


async def import_file(settings: Any, path: Path, fmt: str | None = None, *,
                      wait_s: float = 300.0, strict: bool = False,
                      ping_log: Path | None = None) -> ImportResult:
    """``recrawl import PATH`` from code (the same steps and output), against the worker
    that ``settings`` address: returns once the worker's consumer group has committed every
    outcome sent (``applied``) or ``wait_s`` has passed."""
    from streams.histories import guess_format

    fmt = fmt or guess_format(path)
    args = argparse.Namespace(file=path, format=fmt, strict=strict, limit=None, again=False,
                              start=None, wait_s=wait_s, ping_log=ping_log)
    return await _import(settings, args, path, fmt)


def run(args: argparse.Namespace) -> int:
    from streams.histories import guess_format

    path: Path = args.file
    if not path.exists():
        print(f"recrawl import: no such file {path}", file=sys.stderr)
        return 2
    if args.ping_log is not None and not args.ping_log.is_file():
        print(f"recrawl import: no such ping log {args.ping_log}", file=sys.stderr)
        return 2
    if args.limit is not None and args.limit < 0:
        print("recrawl import: --limit must be >= 0", file=sys.stderr)
        return 2
    try:
        fmt = args.format or guess_format(path)
    except HistoryError as exc:
        print(f"recrawl import: {exc}", file=sys.stderr)
        return 2
    settings = settings_from_args(args)
    return asyncio.run(_import(settings, args, path, fmt)).code


def _progress_bar() -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), transient=False)


async def _import(settings: Any, args: argparse.Namespace, path: Path, fmt: str
                  ) -> ImportResult:
    from streams.reach import check_redis, started_producer
    from streams.store.redis_conn import connect

    timeout = settings.connect_timeout_s
    await check_redis(settings.redis_url, timeout)
    digest = file_digest(path, fmt) + ("" if args.start is None else f"@{args.start!r}")
    if args.ping_log is not None:  # the same history with its pings is another import
        digest += "+" + file_digest(args.ping_log, "ping-log")
    key = f"{settings.key_prefix}:import:{digest}"
    redis = connect(settings.redis_url, decode_responses=True, socket_timeout=timeout)
    try:
        if args.again:
            await redis.delete(key)
        record = {str(k): str(v) for k, v in (await redis.hgetall(key)).items()}
        if record.get("done") == "1":
            print(f"{path}: already imported ({record.get('sent', '0')} outcomes sent); "
                  "nothing to send (--again sends it all again)")
            return ImportResult(0, finished=True, applied=True)
        start_s = 0.0
        if fmt == "kolobov":
            start_s = (args.start if args.start is not None
                       else float(record["start_s"]) if "start_s" in record else math.nan)
        with _progress_bar() as bar:
            task = bar.add_task(f"reading {path.name}", total=None)
            try:
                plan = await asyncio.to_thread(
                    read_pages, path, fmt, strict=args.strict,
                    start_s=0.0 if math.isnan(start_s) else start_s,
                    on_record=lambda n: bar.advance(task, n))
            except HistoryError as exc:
                bar.stop()
                print(f"recrawl import: {exc} (--strict: nothing sent)", file=sys.stderr)
                return ImportResult(1)
            bar.update(task, total=plan.records, completed=plan.records)
            if args.ping_log is not None:
                task = bar.add_task(f"reading {args.ping_log.name}", total=None)
                try:
                    await asyncio.to_thread(read_ping_log, plan, args.ping_log,
                                            strict=args.strict)
                except HistoryError as exc:
                    bar.stop()
                    print(f"recrawl import: {exc} (--strict: nothing sent)", file=sys.stderr)
                    return ImportResult(1)
                got = plan.pings.pings if plan.pings is not None else 0
                bar.update(task, total=got, completed=got)
        if math.isnan(start_s):  # the collection ends now: its last crawl is this run's time
            start_s = float(math.floor(time.time() - max(plan.last_s, 0.0)))
            await redis.hset(key, "start_s", repr(start_s))
            plan.first_s += start_s
            plan.last_s += start_s
        async with started_producer(settings.kafka_bootstrap, timeout,
                                    linger_ms=20) as producer:
            if record.get("pages") != "1":
                ends = await _send_pages(producer, settings, plan)
                if not await _consumed(settings, settings.topic("pages"), ends, args.wait_s):
                    print(f"recrawl import: the worker (consumer group {settings.app_id}) did "
                          f"not consume the page events within {args.wait_s:g} s: is `recrawl "
                          "worker` running with these settings? Run the import again to "
                          "continue.", file=sys.stderr)
                    return ImportResult(1, records=plan.records)
                await redis.hset(key, "pages", "1")
            done_before = int(record.get("sent", "0"))
            sent, finished, sent_to, counts = await _send_outcomes(
                producer, settings, args, path, fmt, plan, start_s, digest, redis, key,
                done_before)
        if finished:
            await redis.hset(key, mapping={"done": "1", "total": str(done_before + sent)})
        with _progress_bar() as bar:
            task = bar.add_task("applied by the worker", total=sent)
            applied = await _consumed(
                settings, settings.topic("outcomes"), {p: o for p, (o, _n) in sent_to.items()},
                args.wait_s, lambda got: bar.update(task, completed=sum(
                    min(n, max(0, got.get(p, 0) - (o + 1 - n)))
                    for p, (o, n) in sent_to.items())))
    finally:
        await redis.aclose()
    code = _summary(path, plan, counts, done_before, sent, finished, applied, settings)
    return ImportResult(code, sum(1 for p in plan.pages.values() if p is not None),
                        plan.records, sent, finished, applied)


async def _send_pages(producer: Any, settings: Any, plan: ImportPlan) -> dict[int, int]:
    """A page event per page; the last offset sent to each partition."""
    topic = settings.topic("pages")
    pending = []
    for page in plan.pages.values():
        if page is None:
            continue
        url, host, imp = page
        body = json.dumps({"url": url, "importance": imp}).encode()
        pending.append(await producer.send(topic, body, key=host.encode()))
    ends: dict[int, int] = {}
    for meta in await asyncio.gather(*pending):
        ends[meta.partition] = max(ends.get(meta.partition, -1), meta.offset)
    return ends


def _outcome_bodies(crawls: Iterator[Any], plan: ImportPlan, order_id: str,
                    latest_s: float) -> Iterator[tuple[bytes, bytes] | str]:
    """``(key, value)`` of each crawl's outcome, or why the worker would refuse it."""
    from streams.events.records import SOURCES

    for c in crawls:
        page = plan.pages.get(c.url)
        if page is None:
            yield ""  # a refused URL: counted once, in the first pass
            continue
        if c.time_s <= 0:
            yield f"{c.url}: time {c.time_s!r} is not a unix time after 1970"
            continue
        if c.time_s > latest_s:
            yield f"{c.url}: time {c.time_s:.3f} is in the future"
            continue
        value: dict[str, Any] = {"url": page[0], "fetched_at": c.time_s,
                                 "changed": c.changed, "order_id": order_id}
        if c.signals is None:  # no ping log: the interval teaches the change rate only
            value["signals_known"] = False
        else:
            value["signals"] = {SOURCES[k]: n for k, n in enumerate(c.signals) if n}
        yield page[1].encode(), json.dumps(value).encode()


@dataclass
class _Refused:
    count: int = 0
    first: list[str] = field(default_factory=list)


async def _send_outcomes(producer: Any, settings: Any, args: argparse.Namespace, path: Path,
                         fmt: str, plan: ImportPlan, start_s: float, digest: str, redis: Any,
                         key: str, done_before: int
                         ) -> tuple[int, bool, dict[int, tuple[int, int]], tuple[Any, _Refused]]:
    """The second pass; ``(sent in this run, finished, last offset and number sent per
    partition, skip counts)``."""
    from streams.histories import read_history
    from streams.histories.observations import ImportCounts, crawls_of, in_time_order

    counts = ImportCounts()
    bad = _Refused()
    records = read_history(path, fmt, strict=False, report=ReadReport(), start_s=start_s)
    latest = time.time() + settings.max_future_s
    crawls = crawls_of(records, plan.window, counts, pings=plan.pings,
                       changes_per_url=plan.changes_after_start())
    bodies = _outcome_bodies(in_time_order(crawls), plan,
                             f"import-{digest[:16]}", latest)
    topic = settings.topic("outcomes")
    ends: dict[int, int] = {}
    per_partition: dict[int, int] = {}
    sent = position = 0
    pending: list[Any] = []
    limit = args.limit
    finished = True

    async def flush() -> None:
        for meta in await asyncio.gather(*pending):
            ends[meta.partition] = max(ends.get(meta.partition, -1), meta.offset)
            per_partition[meta.partition] = per_partition.get(meta.partition, 0) + 1
        pending.clear()
        await redis.hset(key, "sent", str(done_before + sent))

    with _progress_bar() as bar:
        task = bar.add_task(f"sending {path.name}", total=None)
        for body in bodies:
            if isinstance(body, str):
                if body:
                    bad.count += 1
                    if len(bad.first) < FIRST_REFUSED:
                        bad.first.append(body)
                continue
            position += 1
            if position <= done_before:
                continue
            if limit is not None and sent >= limit:
                finished = False
                break
            pending.append(await producer.send(topic, body[1], key=body[0]))
            sent += 1
            if len(pending) >= BATCH:
                await flush()
                bar.update(task, completed=done_before + sent)
        await flush()
        bar.update(task, total=done_before + sent, completed=done_before + sent)
    return (sent, finished, {p: (o, per_partition[p]) for p, o in ends.items()},
            (counts, bad))


async def _consumed(settings: Any, topic: str, ends: dict[int, int], wait_s: float,
                    seen: Any = None) -> bool:
    """Whether the worker's consumer group (``app_id``) committed past ``ends`` (partition
    -> last offset sent) of ``topic`` within ``wait_s``: the worker acks a record once its
    handler has applied it, and commits acked offsets every few seconds.  ``seen`` is
    called with the committed offsets (partition -> offset) at each look."""
    if not ends:
        return True
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.structs import TopicPartition

    from streams.reach import Unreachable

    ms = max(1000, int(settings.connect_timeout_s * 1000))
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap,
                                request_timeout_ms=ms)
    try:
        await asyncio.wait_for(admin.start(), settings.connect_timeout_s)
    except Exception as exc:
        raise Unreachable(f"cannot reach Kafka at {settings.kafka_bootstrap} (tried to start "
                          f"an admin client for {settings.connect_timeout_s:g} s: "
                          f"{exc!r})") from None
    tps = [TopicPartition(topic, p) for p in sorted(ends)]
    deadline = time.monotonic() + wait_s
    try:
        while True:
            got = await admin.list_consumer_group_offsets(settings.app_id, partitions=tps)
            if seen is not None:
                seen({tp.partition: m.offset for tp, m in got.items() if m is not None})
            if all(got.get(tp) is not None and got[tp].offset > ends[tp.partition]
                   for tp in tps):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.5)
    finally:
        await admin.close()


def _summary(path: Path, plan: ImportPlan, counts: tuple[Any, _Refused], done_before: int,
             sent: int, finished: bool, applied: bool, settings: Any) -> int:
    skips, bad = counts
    print(plan.report.summary())
    if plan.ping_report is not None and plan.pings is not None:
        print(plan.ping_report.summary())
        print(f"{plan.pings.pings} pings of the history's pages"
              + (f", {plan.pings.skipped} of other URLs skipped" if plan.pings.skipped else ""))
    pages = sum(1 for p in plan.pages.values() if p is not None)
    print(f"{pages} pages, {plan.records} records read; {sent} outcomes sent to "
          f"{settings.topic('outcomes')}" + (f" after {done_before} sent before" if done_before
                                              else ""))
    if plan.refused:
        print(f"{plan.refused} URLs refused (as the worker would):")
        for url, reason in plan.first_refused:
            print(f"  {url}: {reason}")
    for line in skips.summary():
        print(line)
    if bad.count:
        print(f"{bad.count} observations refused:")
        for text in bad.first:
            print(f"  {text}")
    if not finished:
        print("stopped by --limit: run the same command again to continue")
    elif not applied:
        print("the worker has not applied every outcome yet (it goes on: the import is "
              "done, and a re-run sends nothing)")
    trouble = (plan.report.bad or plan.refused or skips.out_of_order or bad.count
               or (plan.ping_report is not None and plan.ping_report.bad))
    return 1 if trouble else 0
