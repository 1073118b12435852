"""The test web's past (``past_changes``) and its history file (``write_history``,
``history_crawls``): deterministic, and read back to what was drawn; the simulator's mirror
warm-started from it holds each page's estimator of exactly those crawls."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from streams.estimates.estimation import Estimation, Observation, full_estimates
from streams.estimates.record import EstimatorRecord
from streams.events.records import SOURCES
from streams.histories.observations import ms
from streams.settings import Settings
from streams.testweb.expected import WorkerMirror
from streams.testweb.history import history_crawls, history_name, write_history
from streams.testweb.world import generate_world, past_changes, past_pings

T0 = 1.7e9


def _world():  # type: ignore[no-untyped-def]
    return generate_world(3, n_hosts=3, pages_per_host=4, time_unit_s=5.0)


def _urls(world) -> list[str]:  # type: ignore[no-untyped-def]
    return [p.url(8080) for p in world.pages]


def test_the_past_is_deterministic_and_drawn_at_each_pages_rate() -> None:
    world = _world()
    a, b = past_changes(world, 600.0), past_changes(world, 600.0)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    other = past_changes(world, 600.0, seed=world.seed + 1)
    assert not all(np.array_equal(x, y) for x, y in zip(a, other, strict=True))
    for c in a:
        assert np.all(np.diff(c) >= 0) and (c.size == 0 or (c[0] >= -600.0 and c[-1] < 0.0))
    # the counts are Poisson at each page's rate: their sum within 4 sd of its mean
    long = past_changes(world, 2e5)
    mean = sum(p.change_rate_per_s for p in world.pages) * 2e5
    assert abs(sum(c.size for c in long) - mean) < 4 * math.sqrt(mean)
    with pytest.raises(ValueError):
        past_changes(world, -1.0)


def test_a_change_log_reads_back_to_every_change(tmp_path: Path) -> None:
    world = _world()
    urls = _urls(world)
    past = past_changes(world, 300.0)
    path = tmp_path / history_name("changes")
    write_history(path, world, urls, past, T0, 300.0, fmt="changes")
    crawls = history_crawls(path, urls)
    assert [c[1] for c in crawls] == sorted(c[1] for c in crawls)
    assert all(c[3] is None for c in crawls)  # no ping log: no interval's pings recorded
    start = min(T0 + c[0] for c in past if c.size)
    for i, c in enumerate(past):
        mine = [(t, ch) for p, t, ch, _ in crawls if p == i]
        assert mine[0] == (ms(start), None)  # every page starts with the window
        changed = [t for t, ch in mine if ch]
        assert changed == [ms(T0 + x) for x in c if ms(T0 + x) > ms(start)]
        assert all(t < T0 for t, _ in mine)


def test_a_cdx_reads_back_to_round_robin_captures_and_their_changes(tmp_path: Path) -> None:
    world = _world()
    urls = _urls(world)
    past = past_changes(world, 300.0)
    path = tmp_path / history_name("cdx")
    write_history(path, world, urls, past, T0, 300.0, fmt="cdx", crawls_per_s=0.5)
    crawls = history_crawls(path, urls)
    period = len(urls) / 0.5
    for i, c in enumerate(past):
        mine = [(t, ch) for p, t, ch, _ in crawls if p == i]
        times = [t for t, _ in mine]
        assert mine[0][1] is None and len(times) == math.ceil((300.0 - i / 0.5) / period)
        assert np.allclose(np.diff(times), period, atol=1.0) and times[-1] < T0
        truth = [bool(((T0 + c > a) & (T0 + c <= b)).any()) for a, b in itertools.pairwise(times)]
        assert [ch for _, ch in mine[1:]] == truth


@pytest.mark.parametrize("pinged", [False, True])
def test_the_warm_mirror_holds_the_estimator_of_exactly_the_imported_crawls(
    tmp_path: Path, pinged: bool
) -> None:
    world = _world()
    urls = _urls(world)
    path = tmp_path / history_name("changes")
    past = past_changes(world, 300.0)
    log = tmp_path / "pings.jsonl" if pinged else None
    write_history(path, world, urls, past, T0, 300.0,
                  pings=past_pings(world, past, 300.0) if pinged else None, ping_log=log)
    crawls = history_crawls(path, urls, log)
    mirror = WorkerMirror(world, Settings(), T0, np.full(len(urls), 5.0), 2.0,
                          give_rates=False)
    mirror.warm_start(crawls)
    est = Estimation()
    n = len(SOURCES)
    for i in range(len(urls)):
        record, last = None, None
        for p, t, changed, sig in crawls:
            if p != i:
                continue
            if last is not None and changed is not None:
                (record,) = est.observe([Observation(
                    record, t - last, (0,) * n if sig is None else sig, changed, t,
                    signals_known=sig is not None)])
            last = t
        want, got = full_estimates(record), full_estimates(mirror.records[i])
        assert want is not None and got is not None
        assert got.n_intervals == want.n_intervals > 0
        assert got.change_rate_per_s == pytest.approx(want.change_rate_per_s, rel=1e-9)
        assert got.kappa == pytest.approx(want.kappa, rel=1e-9)
        state = EstimatorRecord.decode(mirror.records[i] or "").state
        assert state.unknown == EstimatorRecord.decode(record or "").state.unknown
        if pinged:
            # each interval with its pings, under the page's host's channel
            assert state.unknown[0] == 0.0
            group = 0 if world.pages[i].channel == "sitemap" else 1
            inside = sum(sig[SOURCES.index(world.pages[i].channel)]
                         for p, _t, ch, sig in crawls if p == i and ch is not None and sig)
            assert state.totals[1 + group] == inside
            assert sum(state.totals[1:]) == inside
        else:
            # every interval's signals unknown, as the importer's outcomes say
            assert state.unknown[0] == pytest.approx(state.totals[0], rel=1e-6)
            assert state.unknown[0] > 0.0
        # then the run's first crawl, which observes nothing
        assert mirror.states[i].last_crawl_s == T0 + 5.0
        assert mirror.states[i].signals == (0,) * n
    if pinged:
        assert sum(c[3] is not None and sum(c[3]) > 0 for c in crawls) > len(urls)
        return
    # a live crawl after the import: its interval's ping counts, its time is known
    before = EstimatorRecord.decode(mirror.records[0] or "").state
    mirror.on_ping(0, 10.0, 9.0)
    mirror.on_crawl(0, 20.0, True, 0.0)
    after = EstimatorRecord.decode(mirror.records[0] or "").state
    assert after.unknown == before.unknown and sum(after.totals[1:]) == sum(before.totals[1:]) + 1
    assert after.totals[0] == pytest.approx(before.totals[0] + 15.0, rel=1e-6)
    # what the worker's code makes of the imported pages: their change rates, and no
    # signal rate yet (no time with signals recorded), so no recall and no false pings
    true = world.arrays()
    est_means = WorkerMirror(world, Settings(), T0, np.full(len(urls), 5.0), 2.0,
                             give_rates=False)
    est_means.warm_start(crawls)
    got_means = est_means.estimated()
    assert 0.5 < got_means["change_rate_per_s"] / np.mean(true["change_rate_per_s"]) < 2.0
    assert got_means["recall"] == 0.0 == got_means["false_rate_per_s"]
    late = WorkerMirror(world, Settings(), T0, np.full(len(urls), -1000.0), 2.0)
    with pytest.raises(ValueError, match="not before"):
        late.warm_start(crawls)


def test_the_measuring_command_scores_the_window_it_is_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    from streams.testweb.history import main

    with pytest.raises(SystemExit) as bad:
        main(["--duration", "20", "--warmup", "20"])
    assert bad.value.code == 2
    assert "--warmup must be" in capsys.readouterr().err

    def scores(warmup: str) -> list[float]:
        assert main(["--history", "0", "--runs", "1", "--duration", "20",
                     "--warmup", warmup]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [x.split(":")[0] for x in lines] == ["oracle", "mirror, history 0 s -"]
        return [float(x.split(": ")[1].split()[0]) for x in lines]

    early, late = scores("2"), scores("15")
    assert all(0.0 < x < 1.0 for x in early + late)
    # the same draw scored over another window: a different time average
    assert early != late


def test_the_past_pings_are_the_live_webs_for_the_past_changes() -> None:
    world = _world()
    past = past_changes(world, 20_000.0)
    a, b = past_pings(world, past, 20_000.0), past_pings(world, past, 20_000.0)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    other = past_pings(world, past, 20_000.0, seed=world.seed + 1)
    assert any(not np.array_equal(x, y) for x, y in zip(a, other, strict=True))
    assert all(x.size == 0 or (x.min() >= -20_000.0 and x.max() <= 0.0
                               and np.all(np.diff(x) >= 0)) for x in a)
    # an IndexNow page's pings: its announced changes and its false pings (flushes merge
    # a few); a page that never announces has only false ones
    t = world.arrays()
    push = [i for i, p in enumerate(world.pages) if p.channel == "indexnow"]
    want = sum(t["recall"][i] * past[i].size + t["false_rate_per_s"][i] * 20_000.0
               for i in push)
    got = sum(a[i].size for i in push)
    assert 0.9 * want < got <= want * 1.05, (got, want)
    with pytest.raises(ValueError):
        past_pings(world, past[:-1], 20_000.0)
