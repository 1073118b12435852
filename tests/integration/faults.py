"""The fault campaign's machinery: a private Kafka and Redis that a test may kill, pause and
restart, a steady stream of pings, orders and outcomes, and the checks of what a fault did.

``tests/integration/test_faults.py`` drives it; docs/reliability.md has its figures.

The stream is built so that a clean replay of the same input must give the very same state:
pings go to pages of *ping hosts* (a capacity of one crawl per ~30 years: each is ordered
at most once, and that order is never answered), outcomes to pages of *crawl hosts* (no
pings).  A page's state then depends only on its own events in their partition's order,
never on how two topics interleaved, which differs from run to run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from infra import kafka, redis
from infra.proc import stop_group
from streams.estimates.estimation import EstimatorRecord
from streams.events.records import SOURCES
from streams.settings import Settings
from streams.store.page_record import PageState, estimator_part
from streams.store.redis_conn import connect_sync as connect_redis_sync
from streams.store.redis_store import page_url

INPUT = ("pages", "pings", "outcomes", "hosts", "control")


class PrivateStack:
    """One Kafka broker and one Redis (append-only, ``appendfsync everysec``) for one test
    module, so that restarting them disturbs no other test.  Both are tied to this process."""

    def __init__(self, home: Path, cache: Path) -> None:
        self.home = home
        self.cache = cache
        self.rproc, self.rcfg = redis.start(home / "redis", tie_to_parent=True)
        self.kproc, self.kcfg = kafka.start(cache, home / "kafka", tie_to_parent=True)
        redis.wait_ready(self.rproc, self.rcfg)
        kafka.wait_ready(self.kproc, self.kcfg)

    @property
    def bootstrap(self) -> str:
        return self.kcfg.bootstrap

    @property
    def redis_url(self) -> str:
        return self.rcfg.url

    def crash_redis(self) -> None:
        """SIGKILL redis-server (no shutdown, no final AOF rewrite)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.rproc.pid, signal.SIGKILL)
        self.rproc.wait(timeout=10)

    def start_redis(self) -> None:
        """Start Redis again on the same port and folder: it loads its append-only file."""
        self.rproc, self.rcfg = redis.start(
            self.rcfg.data_dir, port=self.rcfg.port, tie_to_parent=True)
        redis.wait_ready(self.rproc, self.rcfg)

    def wipe_redis(self) -> None:
        """Delete a stopped Redis's append-only file and snapshot: it starts again empty."""
        for path in self.rcfg.data_dir.iterdir():
            if path.name.startswith("appendonly") or path.suffix == ".rdb":
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()

    def pause_redis(self) -> None:
        os.kill(self.rproc.pid, signal.SIGSTOP)

    def resume_redis(self) -> None:
        os.kill(self.rproc.pid, signal.SIGCONT)

    def pause_kafka(self) -> None:
        os.kill(self.kproc.pid, signal.SIGSTOP)

    def resume_kafka(self) -> None:
        os.kill(self.kproc.pid, signal.SIGCONT)

    def stop_kafka(self) -> None:
        """SIGTERM the broker (a controlled shutdown) and wait for it."""
        stop_group(self.kproc, timeout_s=60)

    def start_kafka(self) -> None:
        self.kproc, self.kcfg = kafka.start(
            self.cache, self.kcfg.data_dir, port=self.kcfg.port,
            controller_port=self.kcfg.controller_port, tie_to_parent=True)
        kafka.wait_ready(self.kproc, self.kcfg)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.rproc.pid, signal.SIGCONT)
        with contextlib.suppress(OSError):
            os.kill(self.kproc.pid, signal.SIGCONT)
        stop_group(self.kproc, timeout_s=30)
        stop_group(self.rproc)


# -- the world ---------------------------------------------------------------------------
CRAWL_HOSTS = [f"c{i}.org" for i in range(8)]
PING_HOSTS = [f"p{i}.org" for i in range(6)]
PAGES_PER_HOST = 12


def urls_of(host: str) -> list[str]:
    return [f"https://{host}/page/{j}" for j in range(PAGES_PER_HOST)]


def catalogue() -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, dict[str, Any]]]]:
    """Pages of every host (a prior rate so that crawled pages come round often), and the
    ping hosts' tiny capacity."""
    pages = [(h, {"url": u, "importance": 1.0 + j % 3, "change_rate_per_s": 0.05})
             for h in CRAWL_HOSTS + PING_HOSTS for j, u in enumerate(urls_of(h))]
    hosts = [(h, {"host": h, "max_crawls_per_s": 1e-9}) for h in PING_HOSTS]
    return pages, hosts


# -- the stream ------------------------------------------------------------------------
@dataclass
class Outcome:
    url: str
    order_id: str
    fetched_at: float
    sent_at: float  # when the driver started sending it (the worker cannot see it earlier)


@dataclass
class Traffic:
    """A steady stream in a thread: pings at ``ping_rate_per_s`` (each with its own id) and a
    fetcher that answers every order of a crawl host at once with an outcome.  Sends are
    retried until the broker acknowledges them (acks=all): what is acknowledged
    is in the topic, and is what the worker must apply exactly once (a record written twice
    by a retry is still one ping, one outcome)."""

    s: Settings
    ping_rate_per_s: float = 40.0
    pings: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    orders: list[tuple[float, dict[str, Any]]] = field(default_factory=list)  # (received, order)
    #: where each order was read: (partition, offset, order_id), to tell an order written
    #: twice to the topic from one record this fetcher read twice
    order_positions: list[tuple[int, int, str]] = field(default_factory=list)
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # order_id -> outcome
    send_errors: int = 0

    def __post_init__(self) -> None:
        self._stop_pings = threading.Event()
        self._stop = threading.Event()
        self._answer = threading.Event()
        self._answer.set()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop_pings(self) -> None:
        self._stop_pings.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        if self.error is not None:
            raise self.error

    async def _main(self) -> None:
        try:
            # as the project's fetcher (streams/fetcher/service.py): acks=all, retries, not
            # idempotent, so a send retried across a broker restart may be written twice
            producer = AIOKafkaProducer(
                bootstrap_servers=self.s.kafka_bootstrap, acks="all", linger_ms=5,
                request_timeout_ms=5000, retry_backoff_ms=200)
            await producer.start()
            try:
                await asyncio.gather(self._pings(producer), self._fetcher(producer))
            finally:
                await producer.stop()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    async def _send(self, producer: AIOKafkaProducer, topic: str, key: str,
                    value: dict[str, Any]) -> None:
        data = json.dumps(value).encode()
        while True:
            try:
                await producer.send_and_wait(self.s.topic(topic), data, key=key.encode())
                return
            except Exception:
                self.send_errors += 1
                if self._stop.is_set():
                    raise
                await asyncio.sleep(0.3)

    async def _pings(self, producer: AIOKafkaProducer) -> None:
        targets = [(h, u) for h in PING_HOSTS for u in urls_of(h)]
        n = 0
        next_at = time.monotonic()
        while not (self._stop.is_set() or self._stop_pings.is_set()):
            host, url = targets[n % len(targets)]
            pid = f"f{n}"
            await self._send(producer, "pings", host, {
                "url": url, "source": SOURCES[n % len(SOURCES)], "received_at": time.time(),
                "id": pid})
            self.pings[url].add(pid)
            n += 1
            next_at += 1.0 / self.ping_rate_per_s
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def _fetcher(self, producer: AIOKafkaProducer) -> None:
        consumer = AIOKafkaConsumer(
            self.s.topic("orders"), bootstrap_servers=self.s.kafka_bootstrap,
            auto_offset_reset="earliest", request_timeout_ms=5000)
        await consumer.start()
        try:
            while not self._stop.is_set():
                try:
                    batch = await consumer.getmany(timeout_ms=200)
                except Exception:
                    self.send_errors += 1
                    await asyncio.sleep(0.3)
                    continue
                for records in batch.values():
                    for r in records:
                        order = json.loads(r.value)
                        self.orders.append((time.time(), order))
                        self.order_positions.append((r.partition, r.offset, order["order_id"]))
                        if order["host"] in CRAWL_HOSTS and self._answer.is_set():
                            await self._answer_order(producer, order)
        finally:
            await consumer.stop()

    async def _answer_order(self, producer: AIOKafkaProducer, order: dict[str, Any]) -> None:
        sent_at = time.time()
        oid = order["order_id"]
        changed = None if not any(o.url == order["url"] for o in self.outcomes.values()) \
            else (hash(oid) % 2 == 0)
        out = Outcome(order["url"], oid, round(sent_at, 3), sent_at)
        await self._send(producer, "outcomes", order["host"], {
            "url": out.url, "order_id": oid, "fetched_at": out.fetched_at, "status": 200,
            "changed": changed})
        self.outcomes[oid] = out


# -- checks ----------------------------------------------------------------------------
async def _end_offsets(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        return dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


def partitions(s: Settings, topics: tuple[str, ...]) -> list[TopicPartition]:
    return [TopicPartition(s.topic(t), p) for t in topics for p in range(s.partitions)]


async def _committed(bootstrap: str, group: str) -> dict[TopicPartition, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        got = await admin.list_consumer_group_offsets(group)
        return {tp: om.offset for tp, om in got.items()}
    finally:
        await admin.close()


def lag(s: Settings, topics: tuple[str, ...] = INPUT) -> dict[str, int]:
    """Events in ``topics`` that the worker group has not committed, per topic."""
    ends = asyncio.run(_end_offsets(s.kafka_bootstrap, partitions(s, topics)))
    done = asyncio.run(_committed(s.kafka_bootstrap, s.app_id))
    out: dict[str, int] = defaultdict(int)
    for tp, end in ends.items():
        out[tp.topic.rsplit(".", 1)[1]] += max(0, end - max(0, done.get(tp, 0)))
    return dict(out)


def committed_and_ends(s: Settings) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    return (asyncio.run(_committed(s.kafka_bootstrap, s.app_id)),
            asyncio.run(_end_offsets(s.kafka_bootstrap, partitions(s, INPUT))))


def applied_offsets(s: Settings) -> dict[str, int]:
    """``topic:partition`` -> the highest offset applied, from the hosts' offsets in Redis."""
    r = connect_redis_sync(s.redis_url, decode_responses=True)
    out: dict[str, int] = {}
    for key in r.scan_iter(f"{s.key_prefix}:{{*}}:offsets", count=1000):
        for f, v in r.hgetall(key).items():
            out[f] = max(out.get(f, -1), int(v))
    return out


def wait_caught_up(s: Settings, timeout_s: float,
                   topics: tuple[str, ...] = ("pages", "hosts", "pings", "outcomes")) -> float:
    """Wait until the last event of every partition of ``topics`` is applied in Redis (each
    event's script records its offset; a partition's events are applied in order)."""
    t0 = time.monotonic()
    ends = asyncio.run(_end_offsets(s.kafka_bootstrap, partitions(s, topics)))
    want = {f"{tp.topic}:{tp.partition}": end - 1 for tp, end in ends.items() if end}
    deadline = t0 + timeout_s
    behind: dict[str, tuple[int, int]] = {}
    while time.monotonic() < deadline:
        got = applied_offsets(s)
        behind = {k: (got.get(k, -1), v) for k, v in want.items() if got.get(k, -1) < v}
        if not behind:
            return time.monotonic() - t0
        time.sleep(0.2)
    raise AssertionError(f"worker group {s.app_id} not caught up after {timeout_s}s: {behind}")


async def _copy(src: Settings, dst: Settings, topics: tuple[str, ...]) -> int:
    """Copy ``topics`` of ``src`` to those of ``dst``, partition by partition, in order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=src.kafka_bootstrap, enable_auto_commit=False)
    producer = AIOKafkaProducer(bootstrap_servers=dst.kafka_bootstrap, enable_idempotence=True,
                                acks="all", linger_ms=5)
    await consumer.start()
    await producer.start()
    n = 0
    try:
        for t in topics:
            tps = partitions(src, (t,))
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                if not ends[tp]:
                    continue
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                futs = []
                while await consumer.position(tp) < ends[tp]:
                    for r in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                        if r.offset < ends[tp]:
                            futs.append(await producer.send(
                                dst.topic(t), r.value, key=r.key, partition=tp.partition,
                                headers=list(r.headers or ())))
                await asyncio.gather(*futs)
                n += len(futs)
    finally:
        await producer.stop()
        await consumer.stop()
    return n


async def _read_all(s: Settings, topic: str) -> list[dict[str, Any]]:
    tps = partitions(s, (topic,))
    consumer = AIOKafkaConsumer(bootstrap_servers=s.kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    out: list[dict[str, Any]] = []
    try:
        ends = await consumer.end_offsets(tps)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out.extend(json.loads(r.value) for r in records)
    finally:
        await consumer.stop()
    return out


def read_all(s: Settings, topic: str) -> list[dict[str, Any]]:
    """Every value of ``topic``, from the start to its end now."""
    return asyncio.run(_read_all(s, topic))


def copy_inputs(src: Settings, dst: Settings, topics: tuple[str, ...]) -> int:
    """Copy the input a replay reads (pages and hosts first, then pings and outcomes; never
    control: the replay worker's budget stays 0, so it orders nothing)."""
    return asyncio.run(_copy(src, dst, topics))


def page_state(s: Settings) -> dict[str, dict[str, dict[str, str]]]:
    """kind -> url -> value for every page of the world (``pages``: the stored value,
    ``est``: the estimator record in it, ``inflight``)."""
    # binary records: decoded with surrogateescape, as streams.store.redis_store.Store reads them
    r = connect_redis_sync(s.redis_url, decode_responses=True, encoding_errors="surrogateescape")
    out: dict[str, dict[str, str]] = {"pages": {}, "est": {}, "inflight": {}}
    for h in CRAWL_HOSTS + PING_HOSTS:
        for kind in ("pages", "inflight"):
            got = r.hgetall(f"{s.key_prefix}:{{{h}}}:{kind}")
            if kind == "pages":  # fields are urls without https://<host> (page_url maps back)
                got = {page_url(h, f): v for f, v in got.items()}
            out[kind].update(got)
    for u, v in out["pages"].items():
        e = estimator_part(v)
        if e:
            out["est"][u] = e
    return {k: v for k, v in out.items()}  # type: ignore[misc]


@dataclass
class Report:
    fault: str
    pings: int = 0
    outcomes: int = 0
    orders: int = 0
    lost: int = 0
    twice: int = 0
    orders_duplicated: int = 0
    orders_lost: int = 0
    outage_s: float = 0.0
    no_orders_s: float = 0.0
    resume_s: float | None = None
    replay_equal: bool = False
    replay_diff: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    def row(self) -> str:
        resume = "-" if self.resume_s is None else f"{self.resume_s:.1f}"
        return (f"| {self.fault} | {self.pings} / {self.outcomes} / {self.orders} | {self.lost} "
                f"| {self.twice} | {self.orders_duplicated} | {self.orders_lost} "
                f"| {self.outage_s:.1f} | {self.no_orders_s:.1f} | {resume} "
                f"| {'yes' if self.replay_equal else 'NO'} |")


HEADER = ("| fault | pings / outcomes / orders | events lost | applied twice | orders duplicated "
          "| orders lost | fault lasted (s) | longest gap without orders (s) "
          "| orders resume after recovery (s) | state = clean replay |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def account(t: Traffic, s: Settings, rep: Report, fault_at: float, recovered_at: float) -> None:
    """Fill ``rep`` from what the stream sent and what Redis holds."""
    st = page_state(s)
    rep.outage_s = recovered_at - fault_at
    rep.pings = sum(len(v) for v in t.pings.values())
    rep.outcomes = len(t.outcomes)
    rep.orders = len(t.orders)
    # pings: a ping page is never crawled, so its signal counts are its applied pings
    for h in PING_HOSTS:
        for u in urls_of(h):
            v = st["pages"].get(u)
            got = sum(PageState.decode(v).signals) if v else 0
            want = len(t.pings.get(u, ()))
            rep.lost += max(0, want - got)
            rep.twice += max(0, got - want)
    # outcomes: the last crawl is the newest fetch, and every fetch after the first is one
    # interval of the page's estimator
    by_url: dict[str, list[Outcome]] = defaultdict(list)
    for o in t.outcomes.values():
        by_url[o.url].append(o)
    for h in CRAWL_HOSTS:
        for u in urls_of(h):
            outs = by_url.get(u, [])
            v = st["pages"].get(u)
            last = PageState.decode(v).last_crawl_s if v else 0.0
            newest = max((o.fetched_at for o in outs), default=0.0)
            e = st["est"].get(u)
            n = EstimatorRecord.decode(e, last).state.n_intervals if e else 0
            want = max(0, len(outs) - 1)
            if abs(last - newest) > 1e-6:
                rep.lost += 1
            rep.lost += max(0, want - n)
            rep.twice += max(0, n - want)
    # orders: an order id twice, or a page ordered again before its outcome was sent
    seen: set[str] = set()
    prev: dict[str, dict[str, Any]] = {}
    for _recv, o in sorted(t.orders, key=lambda x: x[1]["issued_at"]):
        if o["order_id"] in seen:
            rep.orders_duplicated += 1
            continue
        seen.add(o["order_id"])
        p = prev.get(o["url"])
        if p is not None:
            out = t.outcomes.get(p["order_id"])
            if out is None or out.sent_at > o["issued_at"]:
                rep.orders_duplicated += 1
        prev[o["url"]] = o
    if rep.orders_duplicated:  # which: written twice, or one record read twice?
        at: dict[str, set[tuple[int, int]]] = defaultdict(set)
        reads: Counter[tuple[int, int]] = Counter()
        for p, off, oid in t.order_positions:
            at[oid].add((p, off))
            reads[p, off] += 1
        rep.notes["orders_at_two_offsets"] = sorted(o for o, w in at.items() if len(w) > 1)
        rep.notes["records_read_twice"] = sorted(k for k, n in reads.items() if n > 1)
    # an order marked in flight in Redis that never reached the orders topic (the page
    # waits for the order time-out, 600 s by default)
    on_topic = {o["order_id"] for o in read_all(s, "orders")}
    lost_orders = [float(fl.split("|")[1]) - fault_at for fl in st["inflight"].values()
                   if fl.split("|")[0] not in on_topic]
    rep.orders_lost = len(lost_orders)
    if lost_orders:
        rep.notes["orders_lost_issued_s_after_fault"] = [round(x, 3) for x in lost_orders]
    issued = sorted(o["issued_at"] for _r, o in t.orders)
    around = [x for x in issued if fault_at - 5 <= x]
    gaps = [b - a for a, b in itertools.pairwise(around) if a <= recovered_at + 60]
    rep.no_orders_s = max(gaps, default=0.0)
    after = [x for x in issued if x > recovered_at]
    rep.resume_s = (after[0] - recovered_at) if after else None


def compare(a: Settings, b: Settings) -> list[str]:
    """Per-page differences between two key prefixes (page values and estimator records;
    the in-flight marks depend on when orders left, so they are not compared).

    An estimator record's ``host`` field (the page's contribution to its host's prior,
    streams/estimates/record.py) is left out: it is computed under the host's sums as read
    before the outcome's chunk, so it depends on how the outcomes of the host's pages were
    batched (the incremental EM is order dependent), and a replay in other batches gives
    other contributions.  Every other byte of the page value must be equal."""
    sa, sb = page_state(a), page_state(b)
    diffs = []
    for kind in ("pages", "est"):
        for u in sorted(set(sa[kind]) | set(sb[kind])):
            va = _without_host(sa[kind].get(u), kind)
            vb = _without_host(sb[kind].get(u), kind)
            if va != vb:
                diffs.append(f"{kind} {u}: {va!r} != {vb!r}")
    return diffs


def _without_host(value: str | None, kind: str) -> str | None:
    """A page value (``kind`` "pages") or an estimator record ("est") with the record's
    ``host`` field zeroed."""
    if not value:
        return value
    est = estimator_part(value) if kind == "pages" else value
    if not est:
        return value
    rec = EstimatorRecord.decode(est)
    return value[: len(value) - len(est)] + replace(rec, host=(0.0, 0.0)).encode()
