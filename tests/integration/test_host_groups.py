"""A batch's pages, pings and outcomes handled in groups of hosts at once (``by_host_groups`` and
``all_of`` in ``streams/worker/agents.py``) end where the whole batch handled as one group
ends, against the real Redis: every stored page, every count, every reject."""

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


async def run(redis_url: str, groups: int, least: int,
              data: dict[str, list[tuple[str, bytes]]]) -> tuple[Harness, list[int]]:
    h = Harness(redis_url)
    sizes: list[int] = []
    real = agents_module.by_host_groups

    def spy(jobs: list[Any], g: int = groups, m: int = least) -> list[list[Any]]:
        out = real(jobs, g, m)
        sizes.append(len(out))
        return out

    agents_module.by_host_groups = spy  # type: ignore[assignment]
    try:
        offset = 0
        for name, bodies in data.items():
            topic = "outcomes" if name.startswith("outcomes") else name
            handler = getattr(h.logic, f"on_{topic}")
            await handler(events(f"unit.{topic}", bodies, offset))
            offset += len(bodies)
    finally:
        agents_module.by_host_groups = real  # type: ignore[assignment]
    return h, sizes


async def test_groups_of_hosts_end_where_one_group_ends(redis_url: str) -> None:
    data = batches()
    one, one_sizes = await run(redis_url, 1, 1, data)
    many, many_sizes = await run(redis_url, 4, 8, data)
    assert one_sizes == [1] * 4 and many_sizes == [4] * 4  # pages, crawls, pings, outcomes
    assert many.rejects == one.rejects and len(one.rejects) == 1
    assert dict(many.metrics.tally) == dict(one.metrics.tally)
    for name in ("pings.applied", "pings.duplicate", "pings.unknown", "outcomes.applied"):
        assert one.metrics.tally[name] > 0, name
    # every valid ping of the batch (more than one validation slice) got a verdict
    verdicts = ("applied", "duplicate", "unknown", "dup-offset", "before-crawl", "within-delay")
    assert len(data["pings"]) > agents_module.VALIDATE_SLICE
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


def test_by_host_groups_keeps_hosts_whole_and_in_order() -> None:
    @dataclass
    class Rec:
        host: str

    @dataclass
    class J:
        record: Rec
        n: int

    rng = random.Random(2)
    jobs = [J(Rec(f"h{rng.randrange(30)}"), n) for n in range(400)]
    groups = agents_module.by_host_groups(jobs, 4, 64)  # type: ignore[arg-type]
    assert len(groups) == 4
    assert sorted(j.n for g in groups for j in g) == list(range(400))
    for g in groups:
        assert [j.n for j in g] == sorted(j.n for j in g)
    owner = {j.record.host: i for i, g in enumerate(groups) for j in g}
    assert all(owner[j.record.host] == i for i, g in enumerate(groups) for j in g)
    assert agents_module.by_host_groups(jobs[:100], 4, 64) == [jobs[:100]]  # type: ignore[arg-type]
    assert agents_module.by_host_groups([], 4, 64) == []
