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


def _ping_index(tmp_path: Path, pings: dict[str, list[tuple[float, str]]]):
    from streams.histories.pings import PingIndex
    from streams.histories.records import ReadReport

    path = tmp_path / "pings.jsonl"
    with open(path, "w") as fh:
        for url, ps in pings.items():
            for t, src in ps:
                fh.write(json.dumps({"url": url, "time": t, "source": src}) + "\n")
    return PingIndex.read(path, set(pings), ReadReport(), strict=True)


def test_a_change_log_with_pings_gives_the_crawls_the_trace_experiment_learns_from(
        tmp_path: Path) -> None:
    """Per URL, the crawls equal :func:`models.sim.trace.ping_history_crawls` of its
    changes and pings (times to the ms, changed flags, ping counts), whatever the order in
    which the file interleaves the URLs."""
    from models.sim.trace import ping_history_crawls
    from streams.events.records import SOURCES

    rng = np.random.default_rng(11)
    changes: dict[str, list[float]] = {}
    pings: dict[str, list[tuple[float, str]]] = {}
    for i in range(30):
        url = f"https://p.example/{i}"
        n = int(rng.integers(0, 25))
        changes[url] = sorted({round(T0_S + float(x), 3) for x in rng.uniform(0, 5000, n)})
        k = int(rng.integers(0, 30))
        pings[url] = sorted((round(T0_S + float(x), 3), SOURCES[int(s)]) for x, s in
                            zip(rng.uniform(-100, 5100, k), rng.integers(0, 2, k), strict=True))
    records: list[Page | Change | Capture] = [Page(u, 1.0) for u in changes]
    mixed = sorted((Change(u, t) for u, ts in changes.items() for t in ts),
                   key=lambda c: c.time_s)
    records += mixed
    times = [t for ts in changes.values() for t in ts]
    window = Window(min(times), max(times))
    per_url = {u: sum(1 for t in ts if t > window.start_s) for u, ts in changes.items()}
    got = list(crawls_of(records, window, pings=_ping_index(tmp_path, pings),
                         changes_per_url=per_url))
    assert intervals(got)  # every URL's crawls come in time order, the first unchanged
    for url in changes:
        mine = [c for c in got if c.url == url]
        assert mine[0].time_s == round(window.start_s, 3) and mine[0].signals is None
        pt = np.array([t for t, _ in pings[url]])
        want_t, want_c, want_n = ping_history_crawls(np.array(changes[url]), pt,
                                                 window.start_s, window.stop_s)
        np.testing.assert_allclose([c.time_s for c in mine[1:]], want_t, atol=1e-3, rtol=0)
        assert [c.changed for c in mine[1:]] == want_c.tolist()
        assert [sum(c.signals or ()) for c in mine[1:]] == want_n.tolist()
        # per source: each ping counted once, under its own source
        for s in range(2):
            inside = sum(1 for t, src in pings[url]
                         if window.start_s < t <= window.stop_s and src == SOURCES[s])
            assert sum((c.signals or (0,) * 5)[s] for c in mine[1:]) == inside


def test_captures_with_pings_count_each_intervals_pings_per_source(tmp_path: Path) -> None:
    url = "https://q.example/a"
    index = _ping_index(tmp_path, {url: [(T0_S + 1, "indexnow"), (T0_S + 5, "indexnow"),
                                         (T0_S + 5.5, "sitemap"), (T0_S + 20, "cdn"),
                                         (T0_S + 31, "indexnow")]})
    caps = [Capture(url, T0_S + 2, None), Capture(url, T0_S + 10, True),
            Capture(url, T0_S + 20, False), Capture(url, T0_S + 30, True)]
    got = list(crawls_of(caps, pings=index))
    assert [c.changed for c in got] == [None, True, False, True]
    assert got[0].signals is None
    assert [c.signals for c in got[1:]] == [(1, 1, 0, 0, 0), (0, 0, 0, 1, 0), (0, 0, 0, 0, 0)]


def test_the_ping_log_reader_reports_bad_lines_with_their_numbers(tmp_path: Path) -> None:
    from streams.histories import HistoryError
    from streams.histories.pings import Ping, parse_ping_line, read_pings
    from streams.histories.records import ReadReport

    path = tmp_path / "p.jsonl"
    path.write_text('{"url": "https://r.example/", "time": 5}\n'
                    '\n'
                    '{"url": "https://r.example/", "time": "5"}\n'
                    '{"url": "https://r.example/", "time": 6, "source": "rss"}\n'
                    '{"url": "https://r.example/", "time": 7, "source": "websub", "x": 1}\n'
                    '{"url": "https://r.example/", "time": 8.5, "source": "websub"}\n')
    report = ReadReport()
    got = list(read_pings(path, report, strict=False))
    assert got == [Ping("https://r.example/", 5.0, 4), Ping("https://r.example/", 8.5, 2)]
    assert report.bad == 3 and [b.line for b in report.first_bad] == [3, 4, 5]
    assert "source" in report.first_bad[1].reason and "x" in report.first_bad[2].reason
    with pytest.raises(HistoryError, match=":3:"):
        list(read_pings(path, ReadReport(), strict=True))
    # the published schema names the same keys, and only those
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schemas"
                         / "ping-log.json").read_text())
    assert set(schema["required"]) == {"url", "time"}
    assert set(schema["properties"]) == {"url", "time", "source"}
    assert schema["properties"]["source"]["enum"] == ["sitemap", "indexnow", "websub", "cdn",
                                                      "other"]
    assert parse_ping_line('{"url": "u", "time": 1}') == Ping("u", 1.0, 4)


def test_an_outcome_carries_its_intervals_recorded_pings() -> None:
    base = {"url": "https://s.example/a", "fetched_at": 1.0, "changed": True}
    ev = OutcomeEvent.model_validate({**base, "signals": {"indexnow": 2, "cdn": 1}})
    assert ev.interval_signals((9, 9, 9, 9, 9)) == (0, 2, 0, 1, 0)
    assert OutcomeEvent.model_validate(base).interval_signals((1, 0, 0, 0, 3)) == (1, 0, 0, 0, 3)
    for bad, field_name in (({"signals": {"rss": 1}}, "signals"),
                            ({"signals": {"cdn": -1}}, "signals"),
                            ({"signals": {"cdn": 70000}}, "signals"),
                            ({"signals": {"cdn": 1.5}}, "signals"),
                            ({"signals": {"cdn": 1}, "signals_known": False}, "signals")):
        with pytest.raises(ValidationError) as err:
            OutcomeEvent.model_validate_json(json.dumps({**base, **bad}))
        assert field_name in validation_reason(err.value), bad


def test_an_import_with_a_ping_log_sends_each_intervals_pings(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    write_changes(path, {"https://s.example/a": [T0_S + 10, T0_S + 50],
                         "https://s.example/b": [T0_S + 30]})
    plan = read_pages(path, "changes", strict=True)
    plan.pings = _ping_index(tmp_path, {"https://s.example/a": [(T0_S + 12, "indexnow")]})
    assert plan.changes_after_start() == {"https://s.example/a": 1, "https://s.example/b": 1}
    crawls = crawls_of(read_history(path, "changes"), plan.window, pings=plan.pings,
                       changes_per_url=plan.changes_after_start())
    bodies = [json.loads(b[1]) for b in _outcome_bodies(in_time_order(crawls), plan,
                                                         "import-x", T0_S + 3600)
              if not isinstance(b, str)]
    ends = [b for b in bodies if b["changed"] is not None]
    assert all("signals_known" not in b and isinstance(b["signals"], dict) for b in ends)
    assert [b["signals"] for b in ends if b["signals"]] == [{"indexnow": 1}]
    for b in ends:
        assert OutcomeEvent.model_validate(b).signals_known is True
