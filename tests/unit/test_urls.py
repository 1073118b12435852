"""URL canonicalisation (streams.events.urls): one page, one key, whatever the spelling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from streams.events.records import HostEvent, PageEvent, PingEvent, host_of
from streams.events.urls import canonical_host, canonical_url, host_of_canonical, in_scope

SAME_PAGE = [
    "http://example.com/a",
    "http://Example.COM:80/a#f",
    "HTTP://example.com/./a",
    "http://example.com/b/../a",
    "http://example.com/%61",
    "http://example.com./a",
    "http://user:pw@example.com/a",
    "http://EXAMPLE.com.:80/x/./../a#frag",
]


@pytest.mark.parametrize("url", SAME_PAGE)
def test_spellings_of_one_url_are_one_page(url: str) -> None:
    assert canonical_url(url) == "http://example.com/a"
    assert host_of(url) == "example.com"


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("http://bücher.de/x", "http://xn--bcher-kva.de/x"),  # IDN and punycode: one host
        ("http://xn--bcher-kva.de/x", "http://xn--bcher-kva.de/x"),
        ("https://example.com:443", "https://example.com/"),  # default port, empty path
        ("https://example.com:8443/", "https://example.com:8443/"),  # other ports stay
        ("http://example.com:443/", "http://example.com:443/"),  # 443 is not http's default
        ("http://example.com/a?b=1&a=2&b=3", "http://example.com/a?b=1&a=2&b=3"),  # as given
        ("http://example.com/%7euser/%e2%82%ac", "http://example.com/~user/%E2%82%AC"),
        ("http://example.com/a%2Fb", "http://example.com/a%2Fb"),  # an encoded / stays
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
        ("http://[::1]:80/x", "http://[::1]/x"),
    ],
)
def test_canonical_forms(url: str, want: str) -> None:
    assert canonical_url(url) == want


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "http://", "http:///a", "example.com/a", "http://a b/",
            "http://example.com/a b", "http://" + "a" * 2100 + ".com/"],
)
def test_not_urls_are_refused_with_a_reason(url: str) -> None:
    with pytest.raises(ValueError, match=r"\w"):
        canonical_url(url)


_segment = st.lists(
    st.sampled_from([*"abcAB0-._~%2F3xé:;=+!*'()$,", "%41", "%7e", "..", ".", "/", "%2f"]),
    max_size=8,
).map("".join)


@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "hTTps"]),
    host=st.sampled_from(["example.com", "EXAMPLE.com.", "bücher.de", "127.0.0.1", "[::1]",
                          "a-b.c_d.org"]),
    port=st.sampled_from(["", ":80", ":443", ":8080"]),
    segments=st.lists(_segment, max_size=5),
    query=st.sampled_from(["", "?", "?a=1&b=%41", "?b=2&a=1", "?x=%zz"]),
    frag=st.sampled_from(["", "#", "#top", "#a/../b"]),
    userinfo=st.sampled_from(["", "u@", "u:p@"]),
)
def test_canonical_url_is_idempotent_and_keeps_the_host(
    scheme: str, host: str, port: str, segments: list[str], query: str, frag: str,
    userinfo: str,
) -> None:
    url = f"{scheme}://{userinfo}{host}{port}/{'/'.join(segments)}{query}{frag}"
    try:
        c = canonical_url(url)
    except ValueError:
        return  # refused with a reason (e.g. a malformed percent-escape in the host)
    assert canonical_url(c) == c
    assert host_of(c) == host_of(url) == canonical_host(host) == host_of_canonical(c)
    assert "#" not in c and "@" not in c.split("/", 3)[2]
    assert c.startswith(("http://", "https://"))


def test_in_scope_compares_canonical_scheme_host_port_and_folder() -> None:
    scope = "http://h.org/blog/"
    assert in_scope("http://H.org:80/blog/post", scope)
    assert not in_scope("http://h.org/blog/../admin", scope)  # dot segments resolved first
    assert not in_scope("http://h.org/blogger", scope)
    assert not in_scope("https://h.org/blog/post", scope)
    assert not in_scope("http://h.org:8080/blog/post", scope)
    assert not in_scope("not a url", scope)


def test_events_carry_the_canonical_url_and_host() -> None:
    page = PageEvent.model_validate({"url": "http://User:pw@Example.COM:80/./a#f",
                                     "host": "EXAMPLE.com."})
    assert (page.url, page.host) == ("http://example.com/a", "example.com")
    ping = PingEvent.model_validate({"url": "http://example.com/%61", "source": "cdn",
                                     "received_at": 1.0})
    assert ping.url == page.url
    assert HostEvent.model_validate({"host": "Bücher.DE.", "max_crawls_per_s": 1.0}).host == (
        "xn--bcher-kva.de")
    assert HostEvent.model_validate({"host": "[::1]", "max_crawls_per_s": 1.0}).host == "::1"
    for bad in ("example.com:8080", "a b", ""):  # capacity is per host name: no port
        with pytest.raises(ValidationError):
            HostEvent.model_validate({"host": bad, "max_crawls_per_s": 1.0})
    with pytest.raises(ValidationError, match="does not match"):
        PageEvent.model_validate({"url": "http://example.com/a", "host": "other.com"})


_LABELS = st.text("abz019-", min_size=1, max_size=66) | st.sampled_from(
    ["xn--bcher-kva", "xn--zz", "0x7f", "127", "a", "www", "-a", "a-", "co"])
_SEGMENTS = st.text("aZ09._~-", max_size=6) | st.sampled_from([".", "..", "", "~u", "a.b"])


@given(scheme=st.sampled_from(["http", "https"]),
       labels=st.lists(_LABELS, min_size=1, max_size=5),
       segments=st.lists(_SEGMENTS, min_size=1, max_size=5),
       query=st.none() | st.text("aZ09._~=&-", max_size=8))
def test_urls_taken_as_canonical_without_parsing_are_what_yarl_makes_of_them(
        scheme: str, labels: list[str], segments: list[str], query: str | None) -> None:
    """The fast path (streams.events.urls.simple_canonical) answers only for URLs that
    yarl's parsing leaves unchanged, with the same host; it declines the rest."""
    from streams.events.urls import parse_canonical, simple_canonical

    url = f"{scheme}://{'.'.join(labels)}/{'/'.join(segments)}"
    if query is not None:
        url += f"?{query}"
    fast = simple_canonical(url)
    if fast is not None:
        assert parse_canonical(url) == fast == (url, fast[1])
        assert host_of_canonical(url) == fast[1]


def test_the_fast_path_takes_the_usual_urls_and_declines_the_others() -> None:
    from streams.events.urls import simple_canonical

    assert simple_canonical("https://host-12.example/page/0001?x=1&y=2") == (
        "https://host-12.example/page/0001?x=1&y=2", "host-12.example")
    for url in ("https://Host.example/a", "https://a.example", "https://a.example:443/",
                "https://a.example/./b", "https://a.example//b", "https://a.example/b/..",
                "https://127.0.0.1/a", "https://xn--bcher-kva.de/a", "https://a.example/%41",
                "https://a.example/a?", "https://a.example/a#f", "https://u@a.example/a"):
        assert simple_canonical(url) is None, url


def test_a_host_name_is_at_most_253_characters_in_its_ascii_form() -> None:
    """RFC 1035 Sec. 2.3.4: a name of 253 characters is a host, one of 254 is not, whether
    it is a Kafka key or a URL's host; a Unicode name is measured once encoded."""
    name = ".".join(["a" * 63] * 3 + ["b" * 61])  # 253 characters
    assert len(name) == 253
    assert canonical_host(name) == name
    assert canonical_url(f"https://{name}/x") == f"https://{name}/x"
    for longer in ("c" + name, name + ".c"):
        with pytest.raises(ValueError, match="longer than 253"):
            canonical_host(longer)
        with pytest.raises(ValueError, match="longer than 253"):
            canonical_url(f"https://{longer}/x")
    # 229 characters, over 253 once IDNA-encoded (each label gains "xn--" and the
    # punycode of its three accents)
    unicode_name = ".".join(["é" * 3 + "a" * 42] * 5)
    assert len(unicode_name) < 253
    with pytest.raises(ValueError, match="longer than 253"):
        canonical_host(unicode_name)
    with pytest.raises(ValueError, match="longer than 253"):
        canonical_url(f"https://{unicode_name}/x")
    # a megabyte-long key is refused by its length, without encoding it
    with pytest.raises(ValueError, match="longer than 253"):
        canonical_host("é." * 500_000)
