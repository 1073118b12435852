"""A batch's pages, pings and outcomes handled in groups of hosts at once, slice by slice
(``Agents._pipelined``, ``deal_hosts`` and ``all_of`` in ``streams/worker/agents.py``: a
slice's groups run while the next slice is validated) end where the whole batch handled as
one group in one slice ends, against the real Redis: every stored page, every count, every
reject."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import pytest
from agents_harness import Harness, js

import streams.worker.agents as agents_module
from streams.estimates.estimation import estimates_of
from streams.store.page_record import estimator_part

pytestmark = pytest.mark.integration


@dataclass
class Msg:
    value: bytes
    key: bytes
    topic: str
    partition: int
    offset: int
    timestamp: float = 1_800_000_000.0


@dataclass
class Ev:
    message: Msg


def events(topic: str, bodies: list[tuple[str, bytes]], start: int) -> list[Ev]:
    return [Ev(Msg(body, host.encode(), topic, 0, start + i))
            for i, (host, body) in enumerate(bodies)]


HOSTS = [f"h{i}.example" for i in range(37)]
URLS = [(h, f"https://{h}/p/{k}") for h in HOSTS for k in range(6)]


def batches() -> dict[str, list[tuple[str, bytes]]]:
    """Pages, then crawls, then a batch of pings and one of outcomes on all hosts: the same
    page pinged several times (a re-sent ping id among them), pings of unknown pages and of
    bad ones, two outcomes of one page in one batch."""
    rng = random.Random(5)
    now = time.time()
    pages = [(h, js(url=u, importance=1 + rng.random())) for h, u in URLS]
    crawls = [(h, js(url=u, fetched_at=now - 5000, changed=None)) for h, u in URLS]
    pings: list[tuple[str, bytes]] = []
    for _ in range(700):
        h, u = rng.choice(URLS)
        pid = f"id{rng.randrange(400)}"  # some ids twice: duplicates
        pings.append((h, js(url=u, source=rng.choice(["sitemap", "indexnow", "cdn"]),
                            received_at=now - rng.choice([6000, 3000, 100]), id=pid)))
    pings += [(h, js(url=f"https://{h}/unknown", source="sitemap", received_at=now - 10))
              for h in HOSTS[:9]]
    pings.insert(50, ("h1.example", b'{"url": 5}'))
    outcomes = [(h, js(url=u, fetched_at=now - 10 + rng.random(), changed=rng.random() < 0.5))
                for h, u in rng.sample(URLS, 150)]
    h, u = URLS[3]
    outcomes += [(h, js(url=u, fetched_at=now - 4, changed=True)),
                 (h, js(url=u, fetched_at=now - 2, changed=False))]
    return {"pages": pages, "outcomes0": crawls, "pings": pings, "outcomes": outcomes}


async def run(redis_url: str, groups: int, least: int, slice_: int,
              data: dict[str, list[tuple[str, bytes]]]) -> tuple[Harness, list[int]]:
    h = Harness(redis_url)
    sizes: list[int] = []
    real = agents_module.group_count

    def spy(n: int, g: int | None = None, m: int | None = None) -> int:
        out = real(n, g, m)
        sizes.append(out)
        return out

    saved = (agents_module.HOST_GROUPS, agents_module.HOST_GROUP_MIN,
             agents_module.VALIDATE_SLICE)
    agents_module.group_count = spy  # type: ignore[assignment]
    agents_module.HOST_GROUPS, agents_module.HOST_GROUP_MIN = groups, least
    agents_module.VALIDATE_SLICE = slice_
    try:
        offset = 0
        for name, bodies in data.items():
            topic = "outcomes" if name.startswith("outcomes") else name
            handler = getattr(h.logic, f"on_{topic}")
            await handler(events(f"unit.{topic}", bodies, offset))
            offset += len(bodies)
    finally:
        agents_module.group_count = real  # type: ignore[assignment]
        (agents_module.HOST_GROUPS, agents_module.HOST_GROUP_MIN,
         agents_module.VALIDATE_SLICE) = saved
    return h, sizes


async def test_groups_of_hosts_end_where_one_group_ends(redis_url: str) -> None:
    """Four groups, slices of 64 events (a host's events in several slices, chained) against
    one group and one slice."""
    data = batches()
    one, one_sizes = await run(redis_url, 1, 1, 10**9, data)
    many, many_sizes = await run(redis_url, 4, 8, 64, data)
    assert one_sizes == [1] * 4 and many_sizes == [4] * 4  # pages, crawls, pings, outcomes
    assert many.rejects == one.rejects and len(one.rejects) == 1
    assert dict(many.metrics.tally) == dict(one.metrics.tally)
    for name in ("pings.applied", "pings.duplicate", "pings.unknown", "outcomes.applied"):
        assert one.metrics.tally[name] > 0, name
    # every valid ping of the batch (more than one validation slice) got a verdict
    verdicts = ("applied", "duplicate", "unknown", "dup-offset", "before-crawl", "within-delay")
    assert len(data["pings"]) > 64 and len(data["outcomes"]) > 64
    assert sum(one.metrics.tally[f"pings.{v}"] for v in verdicts) == len(data["pings"]) - 1
    for host, url in URLS:
        a = await one.store.get_page_raw(host, url)
        b = await many.store.get_page_raw(host, url)
        assert a is not None and b is not None
        ra, rb = a.encode("utf-8", "surrogateescape"), b.encode("utf-8", "surrogateescape")
        assert ra[:43] == rb[:43], url  # the page record: byte for byte
        ea, eb = estimates_of(estimator_part(a)), estimates_of(estimator_part(b))
        assert (ea is None) == (eb is None), url
        if ea is not None and eb is not None:  # vectorised over other rows: the same numbers
            assert eb.alpha_per_s == pytest.approx(ea.alpha_per_s, rel=1e-9)
            assert eb.kappa == pytest.approx(ea.kappa, rel=1e-9)
            assert eb.n_intervals == ea.n_intervals
    for h in (one, many):
        await h.store.delete_all()
        await h.store.close()


async def test_all_of_runs_the_groups_at_once_and_raises_after_all_end() -> None:
    started: list[int] = []
    ended: list[int] = []

    async def group(i: int, fail: bool) -> None:
        started.append(i)
        await asyncio.sleep(0.05 * (3 - i))
        ended.append(i)
        if fail:
            raise ValueError(f"group {i}")

    with pytest.raises(ValueError, match="group 0"):
        await agents_module.all_of([group(0, True), group(1, False), group(2, True)])
    assert started == [0, 1, 2] and sorted(ended) == [0, 1, 2]


def test_deal_hosts_keeps_hosts_whole_and_in_order_across_slices() -> None:
    @dataclass
    class Rec:
        host: str

    @dataclass
    class J:
        record: Rec
        n: int

    rng = random.Random(2)
    jobs = [J(Rec(f"h{rng.randrange(30)}"), n) for n in range(400)]
    k = agents_module.group_count(len(jobs), 4, 64)
    assert k == 4
    hosts: dict[str, int] = {}
    groups: list[list[Any]] = [[] for _ in range(k)]
    for i in range(0, 400, 64):  # slice by slice, one dict: as one deal of the whole
        for g, part in enumerate(agents_module.deal_hosts(jobs[i:i + 64], k, hosts)):  # type: ignore[arg-type]
            groups[g] += part
    assert groups == agents_module.deal_hosts(jobs, k, {})  # type: ignore[arg-type]
    assert sorted(j.n for g in groups for j in g) == list(range(400))
    for g in groups:
        assert g and [j.n for j in g] == sorted(j.n for j in g)
    owner = {j.record.host: i for i, g in enumerate(groups) for j in g}
    assert all(owner[j.record.host] == i for i, g in enumerate(groups) for j in g)
    assert agents_module.group_count(100, 4, 64) == 1
    assert agents_module.group_count(0, 4, 64) == 1
    assert agents_module.deal_hosts(jobs[:100], 1, {}) == [jobs[:100]]  # type: ignore[arg-type]


async def test_a_slice_waits_for_its_group_in_the_slice_before() -> None:
    """``_after``: the next call of a group starts only once the last has ended, even when
    that one failed; cancelled before it starts, the call is closed, never run."""
    log: list[str] = []

    async def call(name: str, delay: float, fail: bool = False) -> None:
        log.append(f"start {name}")
        await asyncio.sleep(delay)
        log.append(f"end {name}")
        if fail:
            raise ValueError(name)

    first = asyncio.ensure_future(agents_module._after(None, call("a", 0.05, fail=True)))
    second = asyncio.ensure_future(agents_module._after(first, call("b", 0.0)))
    with pytest.raises(ValueError, match="a"):
        await agents_module.all_of([first, second])
    assert log == ["start a", "end a", "start b", "end b"]
    log.clear()
    slow = asyncio.ensure_future(call("c", 0.05))
    later = asyncio.ensure_future(agents_module._after(slow, call("d", 0.0)))
    await asyncio.sleep(0.01)
    later.cancel()
    await asyncio.gather(slow, later, return_exceptions=True)
    assert log == ["start c", "end c"]


async def test_pipelined_handles_each_host_in_order_when_an_early_slice_is_slow() -> None:
    """``Agents._pipelined`` with a handler slower for earlier slices (as a Redis call that
    takes longer): every host's events are still handled in the batch's order, because a
    slice's group waits for the same group of the slice before."""
    @dataclass
    class Rec:
        host: str

    @dataclass
    class J:
        record: Rec
        n: int

    rng = random.Random(4)
    batch = [J(Rec(f"h{rng.randrange(12)}"), n) for n in range(600)]
    agents: Any = object.__new__(agents_module.Agents)

    async def checked(evs: list[J], _model: Any) -> list[J]:
        return list(evs)

    handled: list[int] = []

    async def handle(part: list[J]) -> None:
        await asyncio.sleep(0.002 * (10 - part[0].n // 64))  # the first slices slowest
        handled.extend(j.n for j in part)

    agents._checked = checked
    saved = agents_module.VALIDATE_SLICE, agents_module.HOST_GROUP_MIN
    agents_module.VALIDATE_SLICE, agents_module.HOST_GROUP_MIN = 64, 8
    try:
        await agents_module.Agents._pipelined(agents, batch, None, handle)
    finally:
        agents_module.VALIDATE_SLICE, agents_module.HOST_GROUP_MIN = saved
    assert sorted(handled) == list(range(600))
    for host in {j.record.host for j in batch}:
        mine = [n for n in handled if batch[n].record.host == host]
        assert mine == sorted(mine), host
    assert handled != sorted(handled)  # the groups did run at once
