"""A host's page buckets as read back (``Store.dump_hosts``' parsing, without Redis): the
fields are paths (``/...``) or, written before the short fields, whole urls."""

from __future__ import annotations

import pytest

from streams.store.redis_store import _hash_dict, _hash_pairs, _url_keys


@pytest.mark.parametrize("as_bytes", [True, False])
def test_path_fields_become_urls_in_order(as_bytes: bool) -> None:
    fields = ["/a", "/", "/b?x=1", "/caf\udcc3"]  # the last one: a byte that is not UTF-8
    values = [b"1", b"2", b"3", b"4"]
    got_fields = [f.encode("utf-8", "surrogateescape") for f in fields] if as_bytes else fields
    got = _url_keys("h.org", got_fields, values)
    assert list(got.items()) == [("https://h.org/a", b"1"), ("https://h.org/", b"2"),
                                 ("https://h.org/b?x=1", b"3"), ("https://h.org/caf\udcc3", b"4")]


@pytest.mark.parametrize("fields, urls", [
    # whole urls (written before the short fields; an http url is always whole)
    (["https://h.org/old", "/new", "http://h.org/x"],
     ["https://h.org/old", "https://h.org/new", "http://h.org/x"]),
    # a field that is not a url (a newline in it): kept apart, not split into two pages
    (["/a\n/b", "/c"], ["https://h.org/a\n/b", "https://h.org/c"]),
    (["/a\nx", "/c"], ["https://h.org/a\nx", "https://h.org/c"]),
    (["/a", ""], ["https://h.org/a", ""]),
])
def test_fields_that_are_not_all_paths_are_read_one_by_one(fields: list[str],
                                                             urls: list[str]) -> None:
    values = list(range(len(fields)))
    assert _url_keys("h.org", fields, values) == dict(zip(urls, values, strict=True))
    raw = [f.encode() for f in fields]
    assert _url_keys("h.org", raw, values) == dict(zip(urls, values, strict=True))


def test_hgetall_replies_of_either_protocol() -> None:
    assert _hash_pairs([b"f1", b"v1", b"f2", b"v2"]) == ([b"f1", b"f2"], [b"v1", b"v2"])
    assert _hash_pairs({"f1": "v1", "f2": "v2"}) == (["f1", "f2"], ["v1", "v2"])
    assert _hash_pairs([]) == ([], []) and _hash_pairs({}) == ([], [])
    assert _hash_dict([b"f1", b"v1", b"f2", b"v2"]) == {b"f1": b"v1", b"f2": b"v2"}
    assert _hash_dict({"f1": "v1"}) == {"f1": "v1"} and _hash_dict([]) == {}
    assert _url_keys("h.org", [], []) == {}
