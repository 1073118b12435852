"""A history as the crawl observations ``recrawl import`` sends (pure: no service)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from models.sim.trace import complete_history_intervals
from streams.commands.importing import _outcome_bodies, file_digest, read_pages
from streams.events.records import OutcomeEvent, validation_reason
from streams.histories import Capture, Change, Page, read_history
from streams.histories.observations import (
    EPS_S,
    Crawl,
    ImportCounts,
    Window,
    crawls_of,
    in_time_order,
)
from streams.histories.write import write_cdx, write_changes

T0_S = 1_700_000_000.0


def intervals(crawls: list[Crawl]) -> dict[str, list[tuple[float, bool]]]:
    """Per URL, the intervals a worker adds: time since the URL's previous crawl, changed."""
    last: dict[str, float] = {}
    out: dict[str, list[tuple[float, bool]]] = {}
    for c in crawls:
        prev = last.get(c.url)
        if prev is None:
            assert c.changed is None, c  # the first crawl starts the page's first interval
            out[c.url] = []
        else:
            assert c.time_s > prev and c.changed is not None, c
            out[c.url].append((c.time_s - prev, c.changed))
        last[c.url] = c.time_s
    return out


def test_a_change_log_gives_the_intervals_the_trace_experiment_learns_from() -> None:
    rng = random.Random(5)
    changes = {f"https://a.example/{i}": sorted({T0_S + rng.randrange(0, 40 * 86400)
                                                 for _ in range(rng.randrange(0, 30))})
               for i in range(40)}
    records: list[Page | Change | Capture] = [Page(u, 1.0) for u in changes]
    mixed = [Change(u, t) for u, ts in changes.items() for t in ts]
    rng.shuffle(mixed)  # URLs interleave; each URL's changes stay in time order
    mixed.sort(key=lambda c: c.time_s)
    records += mixed
    times = [t for ts in changes.values() for t in ts]
    window = Window(min(times), max(times))
    got = intervals(list(crawls_of(records, window)))
    assert set(got) == set(changes)
    for url, ts in changes.items():
        want = complete_history_intervals(np.asarray(ts), window.start_s, window.stop_s, EPS_S)
        assert [c for _, c in got[url]] == [c for _, c in want], url
        np.testing.assert_allclose([t for t, _ in got[url]], [t for t, _ in want],
                                   rtol=0, atol=2e-3)


def test_changes_closer_than_eps_keep_their_order_at_the_millisecond() -> None:
    u = "https://a.example/close"
    records: list[Page | Change | Capture] = [
        Change(u, T0_S + t) for t in (10, 10.001, 11, 12.5)]
    got = intervals(list(crawls_of(records, Window(T0_S, T0_S + 20))))[u]
    # a gap of 1 ms leaves no room for an unchanged crawl; eps shrinks to half a gap
    want = [(9, False), (1, True), (0.001, True), (0.5, False), (0.5, True), (0.75, False),
            (0.75, True), (7.5, False)]
    assert [c for _, c in got] == [c for _, c in want]
    np.testing.assert_allclose([t for t, _ in got], [t for t, _ in want], rtol=0, atol=1.1e-3)


def test_a_change_in_the_previous_changes_millisecond_is_that_change() -> None:
    url = "https://c.example/x"
    records: list[Page | Change | Capture] = [
        Change(url, T0_S), Change(url, T0_S + 10.0), Change(url, T0_S + 10.0004),
        Change(url, T0_S + 20.0),
    ]
    counts = ImportCounts()
    got = list(crawls_of(records, Window(T0_S, T0_S + 20.0), counts))
    once = list(crawls_of([r for i, r in enumerate(records) if i != 2],
                          Window(T0_S, T0_S + 20.0)))
    assert got == once
    assert sum(1 for c in got if c.changed) == 2
    assert counts.same_instant == 1 and counts.out_of_order == 0
    assert counts.summary() == [
        "1 changes in the same millisecond as their URL's previous change: one change each"]
    # before the previous change's millisecond: out of order, skipped, an error
    late = ImportCounts()
    list(crawls_of([*records, Change(url, T0_S + 15.0)], Window(T0_S, T0_S + 20.0), late))
    assert late.same_instant == 1 and late.out_of_order == 1


def test_captures_are_crawls_and_out_of_order_ones_are_counted() -> None:
    records: list[Page | Change | Capture] = [
        Page("https://b.example/x", 2.0),
        Capture("https://b.example/x", T0_S, True),  # first: nothing to compare with
        Capture("https://b.example/y", T0_S + 5, None),
        Capture("https://b.example/x", T0_S + 60, False),
        Capture("https://b.example/x", T0_S + 30, True),  # before the previous one
        Capture("https://b.example/x", T0_S + 60.0004, True),  # the same millisecond
        Capture("https://b.example/y", T0_S + 65, True),
    ]
    counts = ImportCounts()
    got = list(crawls_of(records, None, counts))
    assert got == [Crawl("https://b.example/x", T0_S, None),
                   Crawl("https://b.example/y", T0_S + 5, None),
                   Crawl("https://b.example/x", T0_S + 60, False),
                   Crawl("https://b.example/y", T0_S + 65, True)]
    assert counts.out_of_order == 2
    assert [u for u, *_ in counts.first_skipped] == ["https://b.example/x"] * 2
    assert "2 observations not after" in counts.summary()[0]


def test_a_declared_page_without_changes_is_one_unchanged_interval() -> None:
    records: list[Page | Change | Capture] = [Page("https://c.example/q", 1.0),
                                               Change("https://c.example/r", T0_S + 100)]
    got = list(crawls_of(records, Window(T0_S, T0_S + 500)))
    assert intervals(got)["https://c.example/q"] == [(500.0, False)]
    assert intervals(got)["https://c.example/r"] == [(99.0, False), (1.0, True), (400.0, False)]


def test_changes_need_the_window() -> None:
    with pytest.raises(ValueError, match="window"):
        list(crawls_of([Change("https://c.example/r", T0_S)]))


def test_the_first_pass_refuses_what_the_worker_refuses_and_merges_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    write_changes(path, {"https://d.example/a": [T0_S + 1, T0_S + 2],
                         "ftp://d.example/b": [T0_S + 3],
                         "https://D.example/a": [T0_S + 4]},
                  importance={"https://d.example/a": 3.0})
    with open(path, "a") as fh:
        fh.write("not json\n")
    plan = read_pages(path, "changes", strict=False)
    assert plan.pages["https://d.example/a"] == ("https://d.example/a", "d.example", 3.0)
    assert plan.pages["ftp://d.example/b"] is None
    assert plan.pages["https://D.example/a"] is None  # the same page under another spelling
    assert plan.refused == 2 and plan.changes
    assert (plan.first_s, plan.last_s) == (T0_S + 1, T0_S + 4)
    assert plan.report.bad == 1 and plan.report.first_bad[0].line == plan.report.lines


def test_every_imported_outcome_says_its_signals_are_unknown(tmp_path: Path) -> None:
    """A history records no pings: each outcome the import sends says so, and the worker's
    model of an outcome reads it as a valid event with ``signals_known`` false."""
    path = tmp_path / "h.jsonl"
    write_changes(path, {"https://s.example/a": [T0_S + 10, T0_S + 50],
                         "https://s.example/b": [T0_S + 30],
                         "ftp://s.example/c": [T0_S + 40]})
    plan = read_pages(path, "changes", strict=True)
    crawls = crawls_of(read_history(path, "changes"), Window(plan.first_s, plan.last_s))
    bodies = list(_outcome_bodies(in_time_order(crawls), plan, "import-x", T0_S + 3600))
    sent = [b for b in bodies if not isinstance(b, str)]
    refused = [b for b in bodies if isinstance(b, str)]
    assert len(sent) >= 4 and refused and set(refused) == {""}  # ftp: refused
    for key, value in sent:
        body = json.loads(value)
        assert body["signals_known"] is False and key == b"s.example", body
        event = OutcomeEvent.model_validate_json(value)
        assert event.signals_known is False and event.order_id == "import-x"
    # an outcome that does not say (a fetcher's) has its signals known
    assert OutcomeEvent.model_validate({"url": "https://s.example/a", "fetched_at": 1.0,
                                        "changed": True}).signals_known is True


@pytest.mark.parametrize("value", ["false", 0, None, [False]])
def test_an_outcome_whose_signals_known_is_not_a_boolean_is_malformed(value: object) -> None:
    with pytest.raises(ValidationError) as err:
        OutcomeEvent.model_validate_json(json.dumps(
            {"url": "https://s.example/a", "fetched_at": 1.0, "changed": True,
             "signals_known": value}))
    assert "signals_known" in validation_reason(err.value)


def test_the_digest_is_the_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.cdx", tmp_path / "b.cdx"
    obs = {"https://e.example/": [(T0_S, None), (T0_S + 9, True)]}
    write_cdx(a, obs)
    write_cdx(b, obs)
    assert file_digest(a, "cdx") == file_digest(b, "cdx") != file_digest(a, "changes")
    b.write_text(b.read_text() + "\n")
    assert file_digest(a, "cdx") != file_digest(b, "cdx")


def test_time_order_interleaves_urls_and_keeps_each_urls_order() -> None:
    # a URL-sorted file (as a CDX index): every URL's captures together
    crawls = [Crawl(f"https://f.example/{u}", T0_S + 10 * k + u, k > 0 or None)
              for u in range(7) for k in range(9)]
    got = list(in_time_order(crawls, spread=25))
    assert sorted(got, key=repr) == sorted(crawls, key=repr)
    for u in range(7):
        mine = [c for c in got if c.url == f"https://f.example/{u}"]
        assert mine == [c for c in crawls if c.url == f"https://f.example/{u}"]
    # within a run of 25 the URLs interleave: no URL twice in a row there
    first = got[:25]
    assert all(a.url != b.url for a, b in itertools.pairwise(first))
    assert [c.time_s for c in first] == sorted(c.time_s for c in first)
