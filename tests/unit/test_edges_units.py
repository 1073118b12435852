"""Unit tests of single functions of the edges (no network, no services)."""

from __future__ import annotations

import gzip
import math

import pytest

from streams.edges.indexnow import Rejection, key_scope, validate_submission
from streams.edges.pings import Ping, parse_ping_line
from streams.edges.sitemaps import SitemapRefused, gunzip_capped, parse_sitemap
from streams.edges.timeparse import format_w3c_datetime, parse_w3c_datetime
from streams.fetcher.client import FetchResult
from streams.fetcher.egress import EgressPolicy, RefusedTarget, parse_overrides
from streams.fetcher.service import outcome_for
from streams.testweb.server import BILLION_LAUGHS, XXE
from streams.testweb.truth import Truth
from streams.testweb.world import generate_world

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


# ---------------------------------------------------------------- times
@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("1970-01-01", 0.0),
        ("1970-01-02T00:00Z", 86400.0),
        ("1970-01-01T01:00:00+01:00", 0.0),
        ("1970-01-01T00:00:01.25Z", 1.25),
        ("2000", 946684800.0),
    ],
)
def test_w3c_datetimes(text: str, epoch: float) -> None:
    assert parse_w3c_datetime(text) == pytest.approx(epoch)


def test_w3c_round_trip_keeps_microseconds() -> None:
    t = 1_700_000_000.123456
    assert parse_w3c_datetime(format_w3c_datetime(t)) == pytest.approx(t, abs=1e-6)


@pytest.mark.parametrize("bad", ["yesterday", "2024-13", "2024-01-01T25", ""])
def test_w3c_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_w3c_datetime(bad)


# ---------------------------------------------------------------- pings
def test_ping_encodes_host_key_and_json() -> None:
    ping = Ping("https://Example.org/a", source="cdn", changed_at=5.0, received_at=6.0)
    key, value = ping.encode()
    assert key == b"example.org"
    assert value == (
        b'{"url":"https://example.org/a","source":"cdn","changed_at":5.0,'
        b'"received_at":6.0,"id":null}'
    )


@pytest.mark.parametrize(
    "kwargs", [{"url": "ftp://x.org/"}, {"url": "https://x.org/", "source": "rss"},
               {"url": "https://x.org/", "changed_at": math.nan}],
)  # fmt: skip
def test_ping_refuses_bad_fields(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Ping(**kwargs)


def test_batch_lines() -> None:
    p = parse_ping_line("https://a.org/x 1970-01-01T00:01:00Z", now_s=10.0)
    assert (p.url, p.changed_at, p.received_at) == ("https://a.org/x", 60.0, 10.0)
    assert p.source == "other"
    q = parse_ping_line('{"url": "https://a.org/y", "source": "websub"}', now_s=3.0)
    assert (q.source, q.changed_at, q.received_at) == ("websub", None, 3.0)
    with pytest.raises(ValueError):
        parse_ping_line("a b c")


# ---------------------------------------------------------------- sitemaps
def _urlset(n: int) -> bytes:
    rows = "".join(
        f"<url><loc>http://a.test/{k}</loc><lastmod>1970-01-01T00:00:0{k % 10}Z</lastmod></url>"
        for k in range(n)
    )
    return f'<?xml version="1.0"?><urlset xmlns="{NS}">{rows}</urlset>'.encode()


def test_parse_urlset_plain_and_gzip() -> None:
    for data in (_urlset(3), gzip.compress(_urlset(3))):
        parsed = parse_sitemap(data)
        assert parsed.kind == "urlset"
        assert [(e.loc, e.lastmod) for e in parsed.entries] == [
            ("http://a.test/0", 0.0), ("http://a.test/1", 1.0), ("http://a.test/2", 2.0),
        ]  # fmt: skip


@pytest.mark.parametrize("doc", [BILLION_LAUGHS, XXE])
def test_entities_and_dtds_are_refused(doc: bytes) -> None:
    with pytest.raises(SitemapRefused, match="unsafe"):
        parse_sitemap(doc)


def test_count_and_size_limits() -> None:
    with pytest.raises(SitemapRefused, match="more than 5 entries"):
        parse_sitemap(_urlset(6), max_urls=5)
    assert len(parse_sitemap(_urlset(5), max_urls=5).entries) == 5
    with pytest.raises(SitemapRefused, match="size"):
        parse_sitemap(_urlset(50), max_bytes=1000)


def test_gzip_bomb_stops_at_the_cap() -> None:
    bomb = gzip.compress(b" " * 10_000_000)
    with pytest.raises(SitemapRefused, match="uncompressed size"):
        gunzip_capped(bomb, 1_000_000)
    assert len(gunzip_capped(bomb, 10_000_000)) == 10_000_000


def test_wrong_root_and_malformed_xml() -> None:
    with pytest.raises(SitemapRefused, match="root element"):
        parse_sitemap(b"<html><body/></html>")
    with pytest.raises(SitemapRefused, match="malformed"):
        parse_sitemap(b"<urlset><url>")


# ---------------------------------------------------------------- egress policy
@pytest.mark.parametrize(
    ("addr", "reason"),
    [("10.1.2.3", "private"), ("192.168.0.1", "private"), ("172.16.0.1", "private"),
     ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("127.0.0.1", "loopback"),
     ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"), ("0.0.0.0", "unicast"),
     ("fd00::1", "private"), ("224.0.0.1", "unicast"),
     ("100.64.0.1", "not a global"), ("100.100.100.200", "not a global"),
     ("2002:7f00:1::1", "loopback"), ("2002:a00:1::1", "private"), ("fec0::1", "not a global"),
     ("64:ff9b::a9fe:a9fe", "link-local"), ("192.0.0.1", "private"),
     ("198.18.0.1", "private")],
)  # fmt: skip
def test_default_policy_refuses_internal_addresses(addr: str, reason: str) -> None:
    with pytest.raises(RefusedTarget, match=reason):
        EgressPolicy().check_address(addr)


def test_policy_switches() -> None:
    EgressPolicy(allow_loopback=True).check_address("127.0.0.2")
    EgressPolicy(allow_private=True).check_address("10.0.0.1")
    EgressPolicy().check_address("93.184.216.34")
    EgressPolicy().check_address("2606:2800:220:1:248:1893:25c8:1946")  # global IPv6
    EgressPolicy().check_address("2002:5db8:d822::1")  # 6to4 of a global IPv4
    with pytest.raises(RefusedTarget, match="not a global"):
        EgressPolicy(allow_private=True).check_address("100.100.100.200")
    with pytest.raises(RefusedTarget, match="loopback-only"):
        EgressPolicy(loopback_only=True).check_address("93.184.216.34")
    with pytest.raises(RefusedTarget, match="link-local"):
        EgressPolicy(allow_private=True).check_address("169.254.1.1")


def test_overrides_and_url_checks() -> None:
    pol = EgressPolicy(loopback_only=True, overrides=parse_overrides([".test=127.0.0.1"]))
    assert pol.override_for("h1.test") == "127.0.0.1"
    assert pol.override_for("h1.test.evil.org") is None
    with pytest.raises(RefusedTarget, match="scheme"):
        pol.check_url("file:///etc/passwd")
    with pytest.raises(RefusedTarget, match="loopback-only"):
        pol.check_url("http://10.0.0.1/")
    with pytest.raises(ValueError):
        parse_overrides([".test=not-an-ip"])


# ---------------------------------------------------------------- fetcher outcome
def _res(status: int | None, digest: str | None, error: str | None = None) -> FetchResult:
    return FetchResult("http://a.test/", "http://a.test/", 7.0, status, digest, error)


def test_outcome_changed_comes_from_the_digest_only() -> None:
    assert outcome_for(_res(200, "d1"), None, "o1")["changed"] is None
    assert outcome_for(_res(200, "d1"), "d1", "o1")["changed"] is False
    assert outcome_for(_res(200, "d2"), "d1", "o1")["changed"] is True
    failed = outcome_for(_res(None, None, "refused: x"), "d1", "o2")
    assert failed == {
        "url": "http://a.test/", "order_id": "o2", "fetched_at": 7.0, "status": None,
        "error": "refused: x", "changed": None, "digest": None,
    }  # fmt: skip
    assert outcome_for(_res(404, "d3", "http status 404"), "d1", None)["changed"] is None


# ---------------------------------------------------------------- IndexNow validation
KEY = "0123456789abcdef"


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (("a.org", KEY, None, "http://a.org/x"), 400),
        ((None, KEY, None, ["http://a.org/x"]), 400),
        (("a.org", KEY, None, []), 400),
        (("a.org", KEY, None, ["http://a.org/"] * 10_001), 400),
        (("a.org", KEY, None, ["javascript:alert(1)"]), 400),
        (("a.org", KEY, 5, ["http://a.org/"]), 400),
        (("a.org", "short", None, ["http://a.org/"]), 422),
        (("a.org", "bad key!bad key", None, ["http://a.org/"]), 422),
        (("a.org", KEY, None, ["http://b.org/"]), 422),
        (("a.org", KEY, "http://b.org/k.txt", ["http://a.org/"]), 422),
        (("a.org", KEY, "http://a.org/cat/k.txt", ["http://a.org/other/1"]), 422),
    ],
)
def test_submission_status(args: tuple, status: int) -> None:
    with pytest.raises(Rejection) as info:
        validate_submission(*args)
    assert info.value.status == status


def test_submission_ok_and_deduplicated() -> None:
    s = validate_submission(
        "A.org", KEY, "http://a.org/cat/k.txt", ["http://a.org/cat/1", "http://a.org/cat/1"]
    )
    assert (s.host, s.urls) == ("a.org", ("http://a.org/cat/1",))
    assert key_scope("http://a.org/cat/k.txt") == "http://a.org/cat/"
    # the key file's scheme, host and port count, at the root too (port 8080 != 80)
    assert key_scope("http://a.org/k.txt") == "http://a.org/"
    assert key_scope("http://a.org:8080/~bob/k.txt") == "http://a.org:8080/~bob/"
    assert key_scope(None) == ""
    assert len(validate_submission("a.org", KEY, None, ["http://a.org/"] * 10_000).urls) == 1


def test_submission_scope_is_canonical_and_counts_scheme_and_port() -> None:
    """``/blog/../admin`` is not under ``/blog/``; a key file on another
    port or scheme covers nothing of this one; spellings of one URL are one URL."""
    loc = "http://a.org/blog/k.txt"
    with pytest.raises(Rejection) as info:
        validate_submission("a.org", KEY, loc, ["http://a.org/blog/../admin"])
    assert info.value.status == 422
    for other in ("http://a.org:8080/k.txt", "https://a.org/k.txt"):
        with pytest.raises(Rejection) as info:
            validate_submission("a.org", KEY, other, ["http://a.org/x"])
        assert info.value.status == 422 and "outside" in info.value.message
    s = validate_submission("A.ORG.", KEY, "http://a.org:80/blog/./k.txt",
                            ["http://a.org/blog/%61", "HTTP://a.org/blog/a#x"])
    assert (s.host, s.urls) == ("a.org", ("http://a.org/blog/a",))
    with pytest.raises(Rejection) as info:
        validate_submission("a b", KEY, None, ["http://a.org/x"])
    assert info.value.status == 400


# ---------------------------------------------------------------- truth
def test_accuracy_is_importance_weighted_fresh_time() -> None:
    t = Truth(window_start=0.0)
    t.add_page("a", 3.0, 0.0)
    t.add_page("b", 1.0, 0.0)
    t.served("a", 0, 0.0)  # a fresh from 0
    t.changed("a", 4.0)  # stale from 4
    t.served("b", 0, 2.0)  # b fresh from 2
    t.served("b", 0, 3.0)  # no effect
    # at 10: a fresh 4 s, b fresh 8 s -> (3*4 + 1*8) / (4 * 10)
    assert t.accuracy(10.0) == pytest.approx(20 / 40)
    t.served("a", 0, 5.0)  # an old copy served? no: served version 0 != current 1
    assert not t.pages["a"].fresh
    t.served("a", 1, 6.0)
    assert t.pages["a"].fresh
    t.start_window(10.0)
    assert t.accuracy(20.0) == pytest.approx(1.0)


def test_world_is_reproducible_and_in_range() -> None:
    w1 = generate_world(3, n_hosts=4, pages_per_host=5)
    w2 = generate_world(3, n_hosts=4, pages_per_host=5)
    assert w1 == w2
    a = w1.arrays()
    assert len(w1.pages) == 20 and w1.hosts == ["h0.test", "h1.test", "h2.test", "h3.test"]
    assert ((a["recall"] >= 0) & (a["recall"] <= 1)).all()
    assert (a["change_rate_per_s"] > 0).all() and (a["change_rate_per_s"] <= 0.1).all()
    assert {p.channel for p in w1.pages} == {"sitemap", "indexnow"}
    assert type(w1).from_json(w1.to_json()) == w1


def test_a_sitemap_full_of_unknown_elements_is_parsed_in_little_memory() -> None:
    """20 MB of elements the protocol does not know (extensions, junk) around 1,000 entries:
    the parser keeps one top-level element at a time (it kept them all: ~23x the input)."""
    import tracemalloc

    junk = "<x:junk xmlns:x='urn:j'>" + "<x:a>" + "z" * 200 + "</x:a>" * 1 + "</x:junk>"
    rows = []
    for i in range(1000):
        rows.append(f"<url><loc>https://a.org/{i}</loc><lastmod>2024-01-01</lastmod>"
                    f"<x:ext xmlns:x='urn:e'>{'y' * 100}</x:ext></url>")
        rows.append(junk * 90)
    doc = ("<?xml version='1.0'?><urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
           + "".join(rows) + "</urlset>").encode()
    assert len(doc) > 20_000_000
    tracemalloc.start()
    try:
        parsed = parse_sitemap(doc)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(parsed.entries) == 1000 and parsed.entries[7].loc == "https://a.org/7"
    assert peak < 5_000_000, peak  # far below the 20 MB input (entries and parser buffers)
