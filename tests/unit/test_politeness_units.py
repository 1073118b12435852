"""Politeness logic without I/O: Retry-After, AIMD, robots.txt cache lifetimes and rules,
the hosts topic's schema."""

from __future__ import annotations

from email.utils import formatdate

import pytest
from protego import Protego
from pydantic import ValidationError

from streams.events.records import HostEvent
from streams.fetcher.pushback import HostThrottle, PushbackPolicy, parse_retry_after, pushback_of
from streams.fetcher.robots import MAX_TTL_S, RobotsRules, origin_of, product_token, ttl_of

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.mark.parametrize(("value", "expected"), [
    ("120", 120.0),
    ("0", 0.0),
    (" 7 ", 7.0),
    (formatdate(NOW + 30, usegmt=True), 30.0),  # IMF-fixdate
    ("Fri, 15 Jan 2027 08:01:00 GMT", 60.0),
    ("Friday, 15-Jan-27 08:01:00 GMT", 60.0),  # obsolete RFC 850 form
    ("Fri Jan 15 08:01:00 2027", 60.0),  # obsolete asctime form (UTC)
    ("Fri, 15 Jan 2027 07:00:00 GMT", 0.0),  # in the past: now
    ("999999999", 86400.0),  # capped
    (None, None), ("", None), ("soon", None), ("-5", None), ("1.5", None), ("1e3", None),
])  # fmt: skip
def test_retry_after_seconds_or_http_date(value: str | None, expected: float | None) -> None:
    """RFC 9110 Sec. 10.2.3: Retry-After = HTTP-date / delay-seconds (1*DIGIT); the dates
    of Sec. 5.6.7 (IMF-fixdate and the two obsolete forms)."""
    got = parse_retry_after(value, NOW)
    assert got == (None if expected is None else pytest.approx(expected))


def test_which_answers_are_push_back() -> None:
    assert pushback_of(429, None, NOW) == (True, None)
    assert pushback_of(429, "3", NOW) == (True, 3.0)
    assert pushback_of(503, "3", NOW) == (True, 3.0)
    assert pushback_of(503, None, NOW) == (False, None)  # a failure, not push-back
    assert pushback_of(200, "3", NOW) == (False, None)
    assert pushback_of(None, None, NOW) == (False, None)


def test_aimd_decreases_once_per_hold_and_recovers_additively() -> None:
    th = HostThrottle(PushbackPolicy(decrease=0.5, increase_fraction=0.25,
                                     increase_interval_s=1.0))
    ch = th.on_pushback(0.0, 8.0, 429, None)
    assert ch is not None and ch.rate_per_s == 4.0 and th.hold_until_s == 0.25
    assert th.on_pushback(0.1, 8.0, 429, None) is None  # within the hold: the same episode
    ch = th.on_pushback(0.3, 99.0, 429, None)  # the baseline stays the first capacity
    assert ch is not None and ch.rate_per_s == 2.0 and th.baseline_per_s == 8.0
    assert th.tick(0.6) is None  # held until 0.3 + 1/2
    rates = []
    for t in (0.8, 1.0, 1.8, 2.8, 3.8, 4.8, 5.8, 6.8):
        ch = th.tick(t)
        if ch is not None:
            rates.append(ch.rate_per_s)
    # +0.25 x 8 = +2/s per second from 2/s: 4, 6, then 8 reaches the baseline: lifted
    assert rates == [4.0, 6.0, None]
    assert not th.limited and th.tick(10.0) is None


def test_aimd_retry_after_bounds_the_rate_and_the_hold() -> None:
    p = PushbackPolicy(min_rate_per_s=0.01, max_retry_after_s=600.0)
    th = HostThrottle(p)
    ch = th.on_pushback(100.0, 5.0, 503, 20.0)
    assert ch is not None and ch.rate_per_s == pytest.approx(1 / 20)  # < 5 x 0.5
    assert th.hold_until_s == pytest.approx(120.0)  # come back in 20 s, not before
    assert ch.reason == "HTTP 503, Retry-After 20s: x0.5"
    assert th.tick(119.0) is None
    th2 = HostThrottle(p)
    ch = th2.on_pushback(0.0, 5.0, 429, 1e9)  # capped at 600 s, floored at min rate
    assert ch is not None and ch.rate_per_s == pytest.approx(max(0.01, 1 / 600))
    assert th2.hold_until_s == pytest.approx(600.0)


@pytest.mark.parametrize("kw", [{"decrease": 1.0}, {"decrease": 0.0},
                                {"increase_fraction": 0.0}, {"increase_interval_s": -1.0},
                                {"min_rate_per_s": 0.0}])
def test_pushback_policy_refuses_bad_settings(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kw))):
        PushbackPolicy(**kw)


def test_robots_ttl_max_age_capped_at_24_hours() -> None:
    """RFC 9309 Sec. 2.4 (at most 24 h), RFC 9111 Sec. 5.2.2.1 (max-age)."""
    assert ttl_of({}, 60.0) == MAX_TTL_S == 86400.0
    assert ttl_of({"Cache-Control": "public, max-age=3600"}, 60.0) == 3600.0
    assert ttl_of({"Cache-Control": 'max-age="120"'}, 60.0) == 120.0
    assert ttl_of({"Cache-Control": "max-age=0"}, 60.0) == 60.0
    assert ttl_of({"Cache-Control": "max-age=9999999"}, 60.0) == 86400.0
    assert ttl_of({"Cache-Control": "s-maxage=10"}, 60.0) == 86400.0


def test_product_token_and_origin() -> None:
    assert product_token("recrawl-fetcher/0.1 (+https://github.com/recrawl)") == (
        "recrawl-fetcher")
    assert origin_of("HTTP://Example.ORG/a?b") == "http://example.org:80"
    assert origin_of("https://example.org:8443/") == "https://example.org:8443"
    assert origin_of("http://[::1]:81/x") == "http://[::1]:81"


def test_robots_rules_for_our_token() -> None:
    text = ("User-agent: *\nDisallow: /\n\nUser-agent: recrawl-fetcher\nDisallow: /private\n"
            "Allow: /private/ok\nCrawl-delay: 2\n")
    rules = RobotsRules("http://a.org:80", "rules", 200, "d", 0.0, 1.0, Protego.parse(text))
    tok = "recrawl-fetcher"
    assert rules.allows("http://a.org/public", tok)
    assert not rules.allows("http://a.org/private/x", tok)
    assert rules.allows("http://a.org/private/ok", tok)  # the longest match wins
    assert not rules.allows("http://a.org/public", "otherbot")
    assert rules.crawl_delay_s(tok) == 2.0 and rules.why_not() == "robots.txt disallows"
    unavailable = RobotsRules("http://a.org:80", "unavailable", 404, "unavailable-404", 0, 1)
    unreachable = RobotsRules("http://a.org:80", "unreachable", 503, "", 0, 1,
                              error="http status 503")
    assert unavailable.allows("http://a.org/x", tok) and unavailable.crawl_delay_s(tok) is None
    assert not unreachable.allows("http://a.org/x", tok)
    assert unreachable.why_not() == "robots.txt unreachable (http status 503): disallow all"


def test_host_events_old_and_new() -> None:
    old = HostEvent.model_validate({"host": "a.org", "max_crawls_per_s": 2.0})
    assert (old.source, old.max_crawls_per_s, old.robots_digest) == ("operator", 2.0, None)
    lift = HostEvent.model_validate({"host": "a.org", "source": "pushback"})
    assert lift.max_crawls_per_s is None
    with pytest.raises(ValidationError, match="required"):
        HostEvent.model_validate({"host": "a.org"})
    with pytest.raises(ValidationError, match="greater than 0"):
        HostEvent.model_validate({"host": "a.org", "source": "robots", "max_crawls_per_s": 0})
    slow = HostEvent.model_validate(
        {"host": "a.org", "source": "robots", "max_crawls_per_s": 1 / 86400})  # Crawl-delay 1 d
    assert slow.max_crawls_per_s == pytest.approx(1 / 86400)
