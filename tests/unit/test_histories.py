"""History readers (streams/histories): formats, round trips, bad lines, bounded memory."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streams.histories import (
    Capture,
    Change,
    HistoryError,
    Page,
    ReadReport,
    guess_format,
    read_history,
)
from streams.histories.captures import DigestMemory
from streams.histories.changelog import parse_change_line
from streams.histories.sample import simulated_history
from streams.histories.write import write_cdx, write_changes, write_kolobov, write_warc

DAY_S = 86400.0
T0_S = 1_700_000_000.0
SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "changes.json"


def captures_by_url(records: list[Page | Change | Capture]
                    ) -> dict[str, list[tuple[float, bool | None]]]:
    out: dict[str, list[tuple[float, bool | None]]] = {}
    for r in records:
        if isinstance(r, Capture):
            out.setdefault(r.url, []).append((r.time_s, r.changed))
    return out


@pytest.mark.parametrize("fmt", ["cdx", "cdxj", "warc", "warc.gz", "kolobov"])
def test_a_simulated_history_round_trips_through_each_capture_format(
        tmp_path: Path, fmt: str) -> None:
    obs, _ = simulated_history()
    flags = [c for o in obs.values() for _, c in o[1:]]
    assert sum(flags) > 20 and flags.count(False) > 20  # changes seen, and quiet crawls
    if fmt == "kolobov":
        path = tmp_path / "kolobov"
        write_kolobov(path, obs, {u: 1.0 + k for k, u in enumerate(obs)})
    elif fmt.startswith("warc"):
        path = tmp_path / f"x.{fmt}"
        write_warc(path, obs)
    else:
        path = tmp_path / f"x.{fmt}"
        write_cdx(path, obs, cdxj=fmt == "cdxj")
    rep = ReadReport()
    records = list(read_history(path, report=rep))
    got = captures_by_url(records)
    assert rep.bad == 0 and rep.lines > 0
    assert set(got) == set(obs)
    for url, o in obs.items():
        g = got[url]
        if fmt == "kolobov":  # days as decimal floats: times to the millisecond
            assert [c for _, c in g] == [c for _, c in o]
            np.testing.assert_allclose([t for t, _ in g], [t for t, _ in o], atol=1e-3)
        else:
            assert g == o, url
    if fmt == "kolobov":
        pages = [r for r in records if isinstance(r, Page)]
        assert [p.importance for p in pages] == [1.0 + k for k in range(len(obs))]


def test_the_change_log_round_trips_pages_importance_and_changes(tmp_path: Path) -> None:
    _, truth = simulated_history()
    imp = {u: 0.5 + k for k, u in enumerate(truth)}
    path = tmp_path / "h.jsonl"
    write_changes(path, truth, imp)
    recs = list(read_history(path))
    pages = {r.url: r.importance for r in recs if isinstance(r, Page)}
    changes: dict[str, list[float]] = {}
    for r in recs:
        if isinstance(r, Change):
            changes.setdefault(r.url, []).append(r.time_s)
    assert pages == imp
    assert {u: v for u, v in changes.items()} == {u: v for u, v in truth.items() if v}


def test_change_log_bad_lines_are_counted_with_their_numbers(tmp_path: Path) -> None:
    lines = [
        '{"url": "a", "page": true}',
        '{"url": "a", "time": 5}',
        "not json",
        '{"url": "a", "time": "yesterday"}',
        "",
        '{"url": "b", "page": true, "importance": 0}',
        '[1, 2]',
        '{"url": "c"}',
        '{"url": "a", "time": 7, "tme": 1}',
        '{"url": "a", "time": 9.5}',
    ]
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rep = ReadReport()
    recs = list(read_history(path, report=rep))
    assert recs == [Page("a"), Change("a", 5.0), Change("a", 9.5)]
    assert rep.lines == 10 and rep.bad == 6
    assert [b.line for b in rep.first_bad] == [3, 4, 6, 7, 8, 9]
    assert "not JSON" in rep.first_bad[0].reason
    assert "line 3" in rep.summary()
    with pytest.raises(HistoryError, match=r"h\.jsonl:3: not JSON"):
        list(read_history(path, strict=True))


def test_cdx_bad_lines_skips_and_order(tmp_path: Path) -> None:
    lines = [
        " CDX N b a m s k r M S V g",
        "k 20240101000000 https://a/ text/html 200 D1 - - 0 0 f",
        "k 20240102000000 https://a/ text/html 200 D1 - - 0 0 f",
        "k 20240103000000 https://a/ text/html 404 D9 - - 0 0 f",  # skipped
        "k 2024x1030000 https://a/ text/html 200 D2 - - 0 0 f",  # bad time
        "k 20240104000000 https://a/ text/html 200",  # too few fields
        "k 20240105000000 https://a/ warc/revisit - D1 - - 0 0 f",
        "k 20240106000000 https://a/ text/html 200 D2 - - 0 0 f",
        "k 20240101000000 https://a/ text/html 200 D2 - - 0 0 f",  # out of order
        'k 20240107000000 {"url": "https://a/", "digest": "D2"}',
        'k 20240108000000 {"url": "https://a/"}',  # no digest
    ]
    path = tmp_path / "x.cdx"
    path.write_text("\n".join(lines) + "\n")
    rep = ReadReport()
    got = [(r.time_s, r.changed) for r in read_history(path, report=rep)
           if isinstance(r, Capture)]
    day = 86400.0
    t0 = 1704067200.0  # 2024-01-01 00:00:00 UTC
    assert got == [(t0, None), (t0 + day, False), (t0 + 4 * day, False), (t0 + 5 * day, True),
                   (t0 + 6 * day, False)]
    assert rep.skipped == 1
    assert [b.line for b in rep.first_bad] == [5, 6, 9, 11]
    assert "precedes" in rep.first_bad[2].reason


def test_warc_records_without_uri_or_date_are_bad_and_garbage_ends_the_read(
        tmp_path: Path) -> None:
    from io import BytesIO

    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    path = tmp_path / "x.warc"
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=False)
        for url, date, body in [("https://a/", "2024-01-01T00:00:00Z", b"x"),
                                ("https://a/", "yesterday", b"y"),
                                ("https://a/", "2024-01-03T00:00:00Z", b"y"),
                                ("https://a/", "2024-01-04T00:00:00Z", b"y")]:
            http = StatusAndHeaders("200 OK", [("Content-Length", str(len(body)))],
                                    protocol="HTTP/1.1")
            w.write_record(w.create_warc_record(url, "response", payload=BytesIO(body),
                                                http_headers=http,
                                                warc_headers_dict={"WARC-Date": date}))
        f.write(b"this is not a WARC record\r\n\r\n")
    rep = ReadReport()
    got = [(r.time_s, r.changed) for r in read_history(path, report=rep)
           if isinstance(r, Capture)]
    t0 = 1704067200.0
    assert got == [(t0, None), (t0 + 2 * 86400, True), (t0 + 3 * 86400, False)]
    assert [b.line for b in rep.first_bad] == [2, 5]
    assert "WARC-Date" in rep.first_bad[0].reason and "byte" in rep.first_bad[0].reason
    with pytest.raises(HistoryError, match=r"x\.warc:2:"):
        list(read_history(path, strict=True))


def test_kolobov_bad_and_unordered_lines(tmp_path: Path) -> None:
    (tmp_path / "url_urlid_hostid.txt").write_text("https://a/\t1\t0\nhttps://b/\t2\t0\n")
    (tmp_path / "urlid_imp.txt").write_text("1\t3.5\n2\t-1\n")
    (tmp_path / "urlid_offset_history.txt").write_text(
        "1\t0.5\t[[1.0, 0], [0.5, 1]]\n"
        "2\t0.25\t[[1.0, 2]]\n"
        "1\t0.5\t[]\n"
        "3\t0.5\t[]\n")
    rep = ReadReport()
    recs = list(read_history(tmp_path, report=rep))
    assert recs == [Page("https://a/", 3.5), Capture("https://a/", 0.5 * DAY_S, None),
                    Capture("https://a/", 1.5 * DAY_S, False),
                    Capture("https://a/", 2.0 * DAY_S, True)]
    why = {b.line: b.reason for b in rep.first_bad}  # read ahead: not in line order
    assert sorted(why) == [2, 3, 4]
    assert "[1.0, 2]" in why[2]
    assert "IDs must ascend" in why[3]
    assert "not in url_urlid_hostid.txt" in why[4]


def test_format_is_guessed_from_the_name(tmp_path: Path) -> None:
    assert guess_format("a.jsonl") == "changes"
    assert guess_format("a.jsonl.gz") == "changes"
    assert guess_format("a.cdx") == "cdx"
    assert guess_format("a.cdxj.gz") == "cdx"
    assert guess_format("a.warc.gz") == "warc"
    (tmp_path / "url_urlid_hostid.txt").write_text("")
    assert guess_format(tmp_path) == "kolobov"
    with pytest.raises(HistoryError, match="cannot tell"):
        guess_format("a.txt")
    gz = tmp_path / "h.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write('{"url": "a", "time": 1}\n')
    assert list(read_history(gz)) == [Change("a", 1.0)]


def test_the_published_schema_names_what_the_reader_accepts() -> None:
    schema = json.loads(SCHEMA.read_text())
    page, change = schema["oneOf"]
    assert set(page["required"]) == {"url", "page"}
    assert set(page["properties"]) == {"url", "page", "importance"}
    assert set(change["required"]) == {"url", "time"}
    assert set(change["properties"]) == {"url", "time"}
    ok_page = {"url": "u", "page": True, "importance": 2}
    assert parse_change_line(json.dumps(ok_page)) == Page("u", 2.0)
    # a key the schema does not allow is refused, as additionalProperties: false says
    assert isinstance(parse_change_line(json.dumps({**ok_page, "x": 1})), str)


def _peak_bytes(path: Path) -> int:
    tracemalloc.start()
    try:
        n = sum(1 for _ in read_history(path))
        assert n > 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_lines(tmp_path: Path) -> None:
    """Ten times the lines of the same URLs: the peak stays put (streamed)."""
    peaks = {}
    for n in (4_000, 40_000):
        log = tmp_path / f"h{n}.jsonl"
        with open(log, "w") as f:
            for k in range(n):
                f.write(f'{{"url": "https://a/{k % 100}", "time": {k}}}\n')
        cdx = tmp_path / f"h{n}.cdx"
        with open(cdx, "w") as f:
            for k in range(n):
                f.write(f"k {20240101000000 + k % 60 + 100 * (k // 60 % 60) + 10000 * (k // 3600)}"
                        f" https://a/{k % 50} text/html 200 D{k % 3} - - 0 0 f\n")
        peaks[n] = (_peak_bytes(log), _peak_bytes(cdx))
    assert peaks[40_000][0] < 2 * peaks[4_000][0] + 50_000
    assert peaks[40_000][1] < 2 * peaks[4_000][1] + 50_000


def test_digest_memory_is_one_entry_per_url() -> None:
    mem = DigestMemory()
    for k in range(1000):
        got = mem.observe(f"https://a/{k % 10}", float(k), "d" * 200 + str(k % 20 // 10))
        assert got is (None if k < 10 else True), k
    assert len(mem) == 10


def test_captures_in_any_format_make_the_same_trace(tmp_path: Path) -> None:
    """A change is placed at the capture that found it, whatever the archive format."""
    from streams.histories.trace import load_trace

    obs, _ = simulated_history(m=12, days=20.0)
    write_cdx(tmp_path / "a.cdx", obs)
    write_warc(tmp_path / "a.warc.gz", obs)
    write_kolobov(tmp_path / "k", obs)
    traces = [load_trace(p) for p in (tmp_path / "a.cdx", tmp_path / "a.warc.gz")]
    kol = load_trace(tmp_path / "k")
    found = sum(bool(c) for o in obs.values() for _, c in o[1:])

    def by_url(lt: Any) -> dict[str, list[float]]:
        tr = lt.trace
        return {u: (tr.start_s / 86400 + tr.changes_of(k)).round(6).tolist()
                for k, u in enumerate(lt.urls)}

    want = by_url(traces[0])
    assert set(want) == set(obs)
    for lt in (*traces, kol):
        assert lt.changes_read == found
        assert by_url(lt) == want
