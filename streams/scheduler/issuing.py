"""Orders: issued in Redis, produced to Kafka, taken back when unsent or timed out
(:class:`OrderIssuer`, a part :class:`streams.scheduler.Scheduler` owns)."""

from __future__ import annotations

import asyncio
import collections
import heapq
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic_core import to_json
from redis.exceptions import NoScriptError

from streams.retry import Backoff, retry
from streams.scheduler.loading import ShardLoader
from streams.scheduler.shard import Shard
from streams.scheduler.state import SchedulerState
from streams.store import IssueBatch

__all__ = ["BatchSink", "Delivery", "OrderIssuer", "OrderSink", "one_by_one"]

log = logging.getLogger(__name__)

#: the waits between attempts to clear in-flight marks
EXPIRE_BACKOFF = Backoff(0.1, 2.0)


#: one order out: Kafka key and value; returns once the producer holds it (its
#: :data:`Delivery` if it returns an asyncio future, as aiokafka's ``send``)
OrderSink = Callable[[bytes, bytes], Awaitable[Any]]
#: a group of orders' delivery, done once settled: failed (its exception) when the producer
#: gave them all up after taking them (e.g. no leader past its request time-out), else its
#: result: the positions in the group of the orders given up, if a list (an aiokafka record
#: future's result, a RecordMetadata: none)
Delivery = asyncio.Future[Any]
#: a tick's orders out (Kafka key and value each): yields ``(indices, error, delivery)`` as
#: groups of them are handed to the producer (``error`` None; ``delivery`` their
#: :data:`Delivery`, or None when it cannot be watched) or fail (the error), every index
#: once, in the order they were sent; after a failure the later groups are not tried (they
#: come back with the same error)
BatchSink = Callable[[list[tuple[bytes, bytes]]],
                     AsyncIterator[tuple[list[int], Exception | None, Delivery | None]]]


def one_by_one(send: OrderSink) -> BatchSink:
    """A :data:`BatchSink` that hands the orders to ``send`` one at a time."""
    async def sink(records: list[tuple[bytes, bytes]]
                   ) -> AsyncIterator[tuple[list[int], Exception | None, Delivery | None]]:
        error: Exception | None = None
        for i, (key, value) in enumerate(records):
            delivery = None
            if error is None:
                try:
                    got = await send(key, value)
                except Exception as exc:  # e.g. the producer stopping: the rest stay unsent
                    error = exc
                else:
                    delivery = got if isinstance(got, asyncio.Future) else None
            yield [i], error, delivery
    return sink


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


class OrderIssuer:
    """Orders issued in Redis (one script per host per tick), sent, and taken back when
    they could not be sent or time out: the part of the scheduler that talks to Kafka.
    Each order sent is reported to ``on_sent`` (shard, policy, value) as the producer takes
    it, before the next one: the scheduler's credit and threshold follow the orders out."""

    def __init__(self, state: SchedulerState, loader: ShardLoader, send_orders: BatchSink,
                 *, worker_id: str, on_sent: Callable[[Shard, str, float], None]) -> None:
        self.state = state
        #: the books' writer: pages not ordered, blocked or gone, and in-flight marks
        self.loader = loader
        #: where the orders go: a batch at a time (the worker's producer), or one by one
        self.send_orders = send_orders
        #: the prefix of this worker's order ids
        self.worker_id = worker_id
        self.on_sent = on_sent
        self._seq = 0
        #: tasks ending the marks of orders whose delivery failed (:meth:`_undelivered`)
        self._undelivery: set[asyncio.Task[None]] = set()

    async def issue(
        self, plans: list[tuple[Shard, list[tuple[str, str, float]]]], now: float
    ) -> int:
        """Issue a tick's picks: one script call per host (its keys share one slot), all in
        one pipeline (one round trip); the orders that Redis accepted go to the producer."""
        st = self.state.settings
        groups: dict[tuple[int, str], list[tuple[str, str, float, str]]] = {}
        owner: dict[int, Shard] = {}
        for shard, picks in plans:
            owner[shard.partition] = shard
            for url, policy, value in picks:
                if not math.isfinite(value):
                    # an order's JSON holds finite numbers only (the threshold always is:
                    # level_of): refused before Redis marks the page in flight (a page of such
                    # parameters is never put in a book: ShardLoader; this is the last
                    # guard), and left out as unusable
                    log.warning("page %s not ordered: its value %r is not finite", url, value)
                    self.state.metrics.tally["pages.unusable"] += 1
                    self.loader.forget(shard, url)
                    continue
                self._seq += 1
                oid = f"{self.worker_id}-{shard.partition}-{self._seq:x}"
                groups.setdefault((shard.partition, shard.host(url)), []).append(
                    (url, policy, value, oid))
        batches = [IssueBatch(host, [(url, oid) for url, _pol, _v, oid in items])
                   for (_p, host), items in groups.items()]
        try:
            results = await self.state.store.issue(
                batches, now_s=now, default_rate=st.default_host_crawls_per_s,
                default_mif=st.default_host_max_in_flight, burst=st.host_burst)
        except Exception as exc:
            # no reply (a timeout, a dropped connection, Redis paused): the scripts may have
            # run and marked the pages in flight, and no order was sent; clear those marks
            await self._unsend([(owner[p], url, host, oid) for (p, host), items in groups.items()
                                for url, _pol, _v, oid in items], exc)
            return 0
        issued_at = round(now, 6)
        #: accepted by Redis, to send: (shard, url, host, oid, policy, value, crawled, tau)
        accepted: list[tuple[Shard, str, str, str, str, float, bool, float]] = []
        records: list[tuple[bytes, bytes]] = []
        for ((partition, host), items), res in zip(groups.items(), results, strict=True):
            shard = owner[partition]
            if isinstance(res, Exception):
                if not isinstance(res, NoScriptError):  # (the store loaded them again)
                    log.warning("issue failed: %r", res)
                for url, *_ in items:
                    self.restore(shard, url)
                continue
            hosts, table, level = shard.hosts, shard.table, shard.level
            key = host.encode()
            for k, (url, policy, value, oid) in enumerate(items):
                code, payload = res[k]
                if code == "ok":
                    slot = table.slot[url]
                    crawled = bool(table.crawled[slot])
                    tau = max(0.0, now - float(table.origin[slot]))
                    tau_eff = tau if crawled and math.isfinite(tau) else None
                    # the Order record's fields (streams/events/records.py), built as a plain dict
                    order = {
                        "order_id": oid, "url": url, "host": host, "issued_at": issued_at,
                        "crawl_value": float(value), "threshold": level, "tau_eff": tau_eff,
                        "policy": policy,
                    }
                    accepted.append((shard, url, host, oid, policy, value, crawled, tau))
                    # pydantic-core's serialiser: ~0.7 us an order against ~4.7 us for
                    # json.dumps(allow_nan=False) (7.5% of a py-spy profile of the orders)
                    records.append((key, to_json(order)))
                    continue
                if code == "no-token":
                    hosts.empty(host, now)
                elif code == "in-flight":
                    foid, _, at = _s(payload).partition("|")
                    self.loader.set_flight(shard, url, host, (foid, float(at or now)))
                elif code == "max-in-flight":
                    b = hosts.bucket(host)
                    b.in_flight = max(b.in_flight, hosts.max_in_flight(host))
                elif code == "gone":
                    self.loader.forget(shard, url)
                    continue
                elif code == "blocked":  # its robots.txt disallows it (another worker knew)
                    self.loader.on_blocked(partition, host, url)
                    continue
                if code != "in-flight":
                    self.restore(shard, url)  # not ordered: back among the candidates
        sent = 0
        send_error: Exception | None = None
        unsent: list[tuple[Shard, str, str, str]] = []
        done = bytearray(len(accepted))
        counted: collections.Counter[tuple[int, str]] = collections.Counter()
        set_flight, on_sent, decisions = self.loader.set_flight, self.on_sent, self.state.decisions
        try:
            if records:
                # each group of orders is handed to the producer, then recorded before the next
                # await (so an outcome can never come back for an order not yet in flight here)
                async for indices, error, delivery in self.send_orders(records):
                    if error is None and delivery is not None:
                        self._watch(delivery, [accepted[i][:4] for i in indices], now)
                    for i in indices:
                        done[i] = 1
                        shard, url, host, oid, policy, value, crawled, tau = accepted[i]
                        if error is not None:
                            send_error = error
                            unsent.append((shard, url, host, oid))
                            continue
                        shard.hosts.take(host, now)
                        set_flight(shard, url, host, (oid, now))
                        counted[shard.partition, policy] += 1
                        on_sent(shard, policy, value)
                        sent += 1
                        level = shard.level
                        decisions.add(url, (
                            f"{now:.3f} ordered {oid} ({policy}): value {value:.4g}"
                            f" {'>=' if value >= level else '<'} threshold {level:.4g}"
                            + (f", tau_eff {tau:.0f}s" if crawled else ", never crawled")))
        except Exception as exc:  # a sink that broke its contract and raised
            send_error = exc
        for (partition, policy), n in counted.items():  # once per tick, not per order
            self.state.metrics.order(partition, policy, n)
        missing = [i for i in range(len(accepted)) if not done[i]]
        if missing:  # not answered (a sink that raised or stopped short): taken as unsent,
            # their in-flight marks cleared (an order that did reach Kafka may then go twice)
            send_error = send_error or RuntimeError("the order sink left orders unanswered")
            unsent.extend(accepted[i][:4] for i in missing)
        if unsent:
            await self._unsend(unsent, send_error)
        return sent

    async def _unsend(self, unsent: list[tuple[Shard, str, str, str]],
                      error: Exception | None) -> None:
        """Orders marked in flight in Redis that never reached the producer: clear the mark
        (only if it is still theirs) and put the pages back, so that none waits for a
        time-out with no order out."""
        log.warning("%d orders not sent (%r): taken out of flight again", len(unsent), error)
        await self._take_out_of_flight([(url, host, oid) for _s, url, host, oid in unsent])
        for shard, url, _host, _oid in unsent:
            self.restore(shard, url)
        self.state.metrics.tally["orders.unsent"] += len(unsent)

    def _watch(self, delivery: Delivery, orders: list[tuple[Shard, str, str, str]],
               now: float) -> None:
        """Watch a group of sent orders' delivery: if the producer gives them up after
        taking them (the broker unreachable past its request time-out), their in-flight
        marks are ended as :meth:`_unsend` ends those it never took (:meth:`_undelivered`),
        instead of holding their pages until the order time-out with no order out."""
        def done(fut: Delivery) -> None:
            error = (asyncio.CancelledError() if fut.cancelled() else fut.exception())
            lost = orders
            if error is None:
                given_up = fut.result()
                if not isinstance(given_up, list) or not given_up:
                    return
                lost = [orders[i] for i in given_up]
                error = RuntimeError(f"{len(lost)} of {len(orders)} orders given up")
            task = asyncio.get_running_loop().create_task(
                self._undelivered(lost, error, now))
            self._undelivery.add(task)
            task.add_done_callback(self._undelivery.discard)
        delivery.add_done_callback(done)

    async def _undelivered(self, orders: list[tuple[Shard, str, str, str]],
                           error: BaseException, issued: float) -> None:
        """Orders the producer took and then failed to deliver: their in-flight marks are
        cleared in Redis (only where still theirs: idempotent, and a later order of the page
        keeps its mark) and their pages re-read (:meth:`ShardLoader.reload`), so they are ordered
        again.  A group the broker wrote but whose acknowledgement was lost is ordered
        twice (at most once more per failed delivery)."""
        log.warning("%d orders issued at %.3f not delivered (%r): taken out of flight again",
                    len(orders), issued, error)
        await self._take_out_of_flight([(url, host, oid) for _s, url, host, oid in orders])
        self.state.metrics.tally["orders.undelivered"] += len(orders)
        by_host: dict[tuple[int, str], tuple[Shard, list[str]]] = {}
        for shard, url, host, oid in orders:
            if self.state.shards.get(shard.partition) is not shard:
                continue  # (handed over since: its new owner reads Redis)
            fl = shard.in_flight.get(url)
            if fl is None or fl[0] != oid:
                continue
            self.state.decisions.add(
                url, f"{issued:.3f} order {oid} not delivered ({error!r}); eligible again")
            by_host.setdefault((shard.partition, host), (shard, []))[1].append(url)
        for (_p, host), (shard, urls) in by_host.items():
            try:
                await self.loader.reload(shard, host, urls)
            except Exception as exc:  # Redis unreachable: the marks are cleared already
                log.warning("re-reading %d undelivered pages of %s failed (%r)",
                            len(urls), host, exc)

    async def _take_out_of_flight(self, orders: list[tuple[str, str, str]]) -> None:
        """Clear the in-flight marks of ``(url, host, order_id)`` that are still theirs, in
        one pipeline, until Redis answers (a mark left behind holds its page until the
        order time-out).  A master without the scripts (a restart; a Redis Cluster
        pipeline cannot check first) answers NOSCRIPT: load them and run again (the script
        is id-guarded)."""
        try:
            # (a call Redis answered NOSCRIPT runs again in the store, scripts loaded)
            results = await retry(lambda: self.state.store.expire(orders),
                                  what="clearing in-flight marks", backoff=EXPIRE_BACKOFF,
                                  retryable=lambda _exc: not self.state.stopping, logger=log)
        except Exception as exc:  # given up: stopping
            log.warning("stopping: %d orders stay in flight (%r)", len(orders), exc)
            return
        if any(isinstance(r, Exception) for r in results):
            log.warning("clearing in-flight marks: %r", results)

    def restore(self, shard: Shard, url: str) -> None:
        """Put a chosen page that was not ordered back in its book (a never-crawled page
        left the fresh pages when it was chosen)."""
        t = shard.table
        slot = t.get(url)
        if slot is None or url in shard.in_flight:
            return
        shard.book.set_page(
            url, shard.host(url), crawled=bool(t.crawled[slot]), origin=float(t.origin[slot]),
            alpha=float(t.alpha[slot]), beta=float(t.beta[slot]), gamma=float(t.gamma[slot]),
            mu=float(t.mu[slot]), max_value=float(t.max_value[slot]),
            floor_due_s=shard.book.floor.due_of(url), first_seen_s=float(t.first_seen[slot]),
            last_crawl_s=float(t.last_crawl[slot]), delta=float(t.delta[slot]),
            estimated=bool(t.estimated[slot]))

    async def expire(self, shard: Shard, now: float) -> None:
        """End the shard's orders past their time-out (at most 200 a call): their marks
        cleared in Redis where still theirs, their pages re-read and eligible again."""
        due: list[tuple[str, str]] = []
        while shard.timeouts and shard.timeouts[0][0] <= now and len(due) < 200:
            _, url, oid = heapq.heappop(shard.timeouts)
            fl = shard.in_flight.get(url)
            if fl is not None and fl[0] == oid:
                due.append((url, oid))
        if not due:
            return
        await self._take_out_of_flight([(url, shard.host(url), oid) for url, oid in due])
        for url, oid in due:
            self.state.decisions.add(
                url, f"{now:.3f} order {oid} timed out: no outcome within "
                     f"{self.state.control.order_timeout_s:g}s; eligible again")
        by_host: dict[str, list[str]] = {}
        for url, _ in due:
            self.state.metrics.order_timeouts.inc()
            self.state.metrics.tally["orders.timed_out"] += 1
            by_host.setdefault(shard.host(url), []).append(url)
        for host, urls in by_host.items():
            await self.loader.reload(shard, host, urls)
