"""Hypothesis strategies for the fuzz campaign (tests/integration/test_fuzz.py): Kafka records
``(key, value)`` of each input topic, schema-valid extremes and malformed ones mixed.

A record is drawn in two steps: a *payload* (a dict close to the topic's schema, with values
at and just past the bounds of ``streams/events/records.py``), then a *wrapping* (serialised as is,
or broken: a field dropped, a type changed, NaN, truncated or non-UTF-8 bytes, not a JSON
object, no value at all) and a *key* (the URL's host as a producer should send it, no key,
an empty one, another host's, upper case, non-UTF-8, or over 1 KiB up to about a megabyte),
*headers* (none, the rerouting header, or any names and bytes), and a *size* (a few records
padded with JSON whitespace up to the broker's ``message.max.bytes``, key and headers
included: :func:`fit`).  :func:`generate` collects ``n`` records per topic
by running a ``@given`` function repeatedly (one example is a list of records plus a few of
them repeated: duplicates), so every record comes from the strategies, seeded.
"""

from __future__ import annotations

import json
import math
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from streams.events.records import (
    MAX_BUDGET_PER_S,
    MAX_IMPORTANCE,
    MAX_IN_FLIGHT,
    MAX_RATE_PER_S,
    MAX_SECONDS,
    MIN_CHANGE_RATE_PER_S,
    SOURCES,
    host_of,
)
from streams.events.urls import MAX_URL_BYTES
from streams.settings import KAFKA_MAX_MESSAGE_BYTES
from streams.worker.agents import REROUTED_HEADER

#: ``(key, value, partition, headers)``: ``partition`` None lets the producer's partitioner
#: choose (murmur2 of the key, random without one); ``headers`` may hold the header a worker
#: puts on an event it moved (one still on a wrong partition is a setup error: rejected)
Record = tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes]] | None]

#: Hosts most events use, so that pings and outcomes meet the pages they name.
POOL_HOSTS = ("fz-a.example", "b.fz.test", "xn--bcher-kva.example", "127.0.0.1", "[::1]",
              "c-d.fz.example", "e.example")
POOL_PATHS = ("/", "/a", "/b/c", "/index.html?q=1", "/%61", "/./x", "/ü", "/a#frag")


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each ``weight`` times as likely (``st.one_of`` weighs its
    branches equally and merges repeated ones)."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    pick = st.integers(0, len(table) - 1)

    @st.composite
    def one(draw: st.DrawFn) -> Any:
        return draw(table[draw(pick)])

    return one()


def _up(x: float) -> float:
    return math.nextafter(x, math.inf)


def _down(x: float) -> float:
    return math.nextafter(x, -math.inf)


def bounded(lo: float, hi: float, *extra: float) -> st.SearchStrategy[float]:
    """Floats in ``[lo, hi]``, their neighbours just outside, and extremes of float64."""
    edges = [lo, hi, _up(lo), _down(hi), _down(lo), _up(hi), 5e-324, 1e-300, 1e300,
             1.7976931348623157e308, -0.0, *extra]
    return weighted((3, st.floats(min_value=lo, max_value=hi)), (1, st.sampled_from(edges)),
                    (1, st.floats(allow_nan=False, allow_infinity=False)))


def timestamps(now_s: float) -> st.SearchStrategy[float]:
    """Recent, far past, far future, at the 300 s future limit."""
    return weighted(
        (6, st.floats(min_value=now_s - 86400.0, max_value=now_s)),
        (1, st.sampled_from([0.0, 5e-324, 1.0, now_s - 3e9, now_s + 290.0, now_s + 400.0,
                             now_s + 1e9, 1e15, 1.7976931348623157e308, -1.0])),
        (1, st.floats(min_value=0.0, allow_nan=False, allow_infinity=False)),
    )


_odd_host = st.one_of(
    st.sampled_from(["EXAMPLE.org", "trailing.dot.example.", "bücher.example",
                     "xn--bcher-kva.example", "user:pw@auth.example", "a.example:80",
                     "a.example:8080", "[2001:db8::1]",
                     "1.2.3.4", "0x7f.1", "a..b.example", "-lead.example", "under_score.example",
                     "a{b}.example", "host with space.example", "", "a" * 63 + ".example",
                     ("b" * 60 + ".") * 4 + "example"]),
    st.from_regex(r"\A[a-z0-9][a-z0-9.\-]{0,40}\.[a-z]{2,6}\Z", fullmatch=True),
    st.text(min_size=1, max_size=20).map(lambda s: s + ".example"),
)

_path = st.one_of(
    st.sampled_from(POOL_PATHS),
    st.text(max_size=40).map(lambda s: "/" + s),
    st.integers(min_value=MAX_URL_BYTES - 40, max_value=MAX_URL_BYTES + 40).map(
        lambda n: "/" + "p" * n),  # around the URL length limit
    st.integers(min_value=1, max_value=2000).map(lambda n: "/" + "é" * n),
)


_url_kind = st.integers(0, 499)
_pool_url = st.sampled_from([f"{scheme}://{host}{path}" for scheme in ("https", "http")
                             for host in POOL_HOSTS for path in POOL_PATHS])
_odd_url = st.builds("{}://{}{}".format,
                     st.sampled_from(["https", "http", "HTTP", "ftp", "javascript", ""]),
                     _odd_host, _path)
# a huge non-ASCII URL (its reject must still fit the producer); at most 140,000
# characters: 840 kB with JSON escapes, under the 1 MB record limit
_huge_url = st.integers(1000, 140_000).map(lambda n: "http://huge.example/" + "é" * n)
_not_url = st.text(max_size=60)


@st.composite
def urls(draw: st.DrawFn) -> str:
    kind = draw(_url_kind)
    if kind < 300:  # the pool: pages that pings and outcomes name again
        return draw(_pool_url)
    if kind < 450:
        return draw(_odd_url)
    if kind == 450:
        return draw(_huge_url)
    return draw(_not_url)


def payloads(now_s: float) -> dict[str, st.SearchStrategy[dict[str, Any]]]:
    """Per topic, dicts close to its schema (each strategy built once: building them per
    draw costs more than drawing)."""
    ts = timestamps(now_s)
    url = urls()
    importance = bounded(0.0, MAX_IMPORTANCE)
    rate = st.one_of(st.none(), st.just(0.0),
                     bounded(MIN_CHANGE_RATE_PER_S, MAX_RATE_PER_S, 1e-320))
    seconds = bounded(0.0, MAX_SECONDS)
    source = weighted((6, st.sampled_from(SOURCES)), (1, st.sampled_from(["", "CDN", "rss"])))
    maybe_ts = st.one_of(st.none(), ts)
    ping_id = weighted((2, st.none()), (4, st.text(max_size=20)), (1, st.just("x" * 256)),
                       (1, st.just("x" * 257)))
    changed = st.one_of(st.none(), st.booleans())
    order_id = weighted((2, st.none()), (5, st.text(max_size=30)), (1, st.just("o" * 128)),
                        (1, st.just("o" * 129)))
    status = st.one_of(st.none(), st.integers(-1, 1000), st.sampled_from([200, 304, 404, 500]))
    error = weighted((2, st.none()), (5, st.text(max_size=50)), (1, st.just("e" * 2048)),
                     (1, st.just("e" * 2049)))
    digest = st.one_of(st.none(), st.text(max_size=64))
    pool_host = st.sampled_from(POOL_HOSTS)
    host_name = weighted((6, pool_host), (1, pool_host.map(str.upper)), (2, _odd_host),
                         (1, st.just("h" * 255)), (1, st.just("h" * 256)))
    capacity = bounded(5e-324, MAX_RATE_PER_S, 0.0)
    in_flight = st.one_of(st.none(), st.integers(0, MAX_IN_FLIGHT), st.sampled_from(
        [0, 1, MAX_IN_FLIGHT, MAX_IN_FLIGHT + 1, -1, 10**310, 2**63, 2**64]))
    budget = bounded(0.0, MAX_BUDGET_PER_S)

    @st.composite
    def pages(draw: st.DrawFn) -> dict[str, Any]:
        u = draw(url)
        out: dict[str, Any] = {"url": u}
        if draw(st.booleans()):
            out["importance"] = draw(importance)
        if draw(st.booleans()):
            out["change_rate_per_s"] = draw(rate)
        if draw(st.integers(0, 4)) == 0:
            out["deleted"] = draw(st.booleans())
        if draw(st.integers(0, 4)) == 0:
            out["host"] = draw(st.one_of(st.just(host_of(u).upper()), _odd_host))
        return out

    @st.composite
    def pings(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": draw(url),
            "source": draw(source),
            "received_at": draw(ts),
        }
        if draw(st.booleans()):
            out["changed_at"] = draw(maybe_ts)
        if draw(st.booleans()):
            out["id"] = draw(ping_id)
        return out

    @st.composite
    def outcomes(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": draw(url),
            "fetched_at": draw(ts),
            "changed": draw(changed),
        }
        if draw(st.booleans()):
            out["order_id"] = draw(order_id)
        if draw(st.booleans()):
            out["status"] = draw(status)
        if draw(st.booleans()):
            out["error"] = draw(error)
        if draw(st.booleans()):
            out["digest"] = draw(digest)
        return out

    @st.composite
    def hosts(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {
            "host": draw(host_name),
            "max_crawls_per_s": draw(capacity),
        }
        if draw(st.booleans()):
            out["max_in_flight"] = draw(in_flight)
        return out

    @st.composite
    def control(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if draw(st.booleans()):
            out["budget_per_s"] = draw(budget)
        if draw(st.booleans()):
            out["paused"] = draw(st.booleans())
        for name in ("t_delay_s", "order_timeout_s", "max_interval_s"):
            if draw(st.integers(0, 2)) == 0:
                out[name] = draw(seconds)
        return out

    return {"pages": pages(), "pings": pings(), "outcomes": outcomes(), "hosts": hosts(),
            "control": control()}


_JUNK = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10),
                  st.sampled_from(["3", "1e3", "true", "null"]),
                  st.lists(st.integers(), max_size=3),
                  st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


_how = st.integers(0, 29)
_non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
_bad_bytes = st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])
_raw = st.one_of(st.none(), st.just(b""), st.binary(max_size=40), st.just(b"[" * 5000),
                 st.just(b'{"url": ' * 300))


@st.composite
def encoded(draw: st.DrawFn, payload: dict[str, Any]) -> bytes | None:
    """The payload's bytes: mostly as a producer would send it, else broken."""
    how = draw(_how)
    if how <= 21:
        return json.dumps(payload, ensure_ascii=draw(st.booleans())).encode(
            "utf-8", "surrogatepass")
    if how == 22 and payload:  # a field dropped
        gone = draw(st.sampled_from(sorted(payload)))
        return json.dumps({k: v for k, v in payload.items() if k != gone}).encode()
    if how == 23 and payload:  # a field of the wrong type
        name = draw(st.sampled_from(sorted(payload)))
        return json.dumps({**payload, name: draw(_JUNK)}).encode()
    if how == 24 and payload:  # NaN / Infinity (json.dumps writes them, JSON has none)
        name = draw(st.sampled_from(sorted(payload)))
        return json.dumps({**payload, name: draw(_non_finite)}).encode()
    data = json.dumps(payload).encode()
    if how == 25:  # truncated
        return data[: draw(st.integers(0, max(0, len(data) - 1)))]
    if how == 26:  # non-UTF-8 bytes spliced in
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(_bad_bytes) + data[at:]
    if how == 27:  # not a JSON object
        return json.dumps(draw(_JUNK)).encode()
    if how == 28:
        return draw(_raw)
    return data + b"garbage"


def _key_host(payload: dict[str, Any]) -> str:
    if isinstance(payload.get("url"), str):
        return host_of(payload["url"])
    return str(payload.get("host", "")).lower()


_control_key = st.one_of(st.none(), st.just(b"control"), st.binary(max_size=5))
_key_how = st.integers(0, 20)
_other_key = st.sampled_from(POOL_HOSTS).map(str.encode)
_binary_key = st.binary(min_size=1, max_size=8)
#: 1 record in 250 with a key over the 1 KiB a reject copies, up to about a megabyte
_huge_key = weighted((249, st.none()), (1, st.tuples(
    st.sampled_from([1025, 4096, 65_537, 400_000, 1_000_000]),
    st.sampled_from([b"k", b"\xff", b"\x00", "\u00e9".encode(), b"a.example."]))))


def _huge(size: int, unit: bytes) -> bytes:
    return (unit * (size // len(unit) + 1))[:size]


@st.composite
def keys(draw: st.DrawFn, topic: str, payload: dict[str, Any]) -> bytes | None:
    huge = draw(_huge_key)
    if huge is not None:
        return _huge(*huge)
    if topic == "control":
        return draw(_control_key)
    host = _key_host(payload)
    how = draw(_key_how)
    if how <= 14:
        return host.encode("utf-8", "surrogatepass")
    if how <= 16:
        return None  # no key: any partition; the worker moves it to its host's
    if how == 17:
        return host.upper().encode("utf-8", "surrogatepass")
    if how == 18:
        return draw(_other_key)  # another host's key
    if how == 19:
        return b""  # an empty key (not the same as none)
    return draw(_binary_key)  # non-UTF-8 keys among them


#: headers: 1 in 50 the rerouting header (a worker's), 1 in 25 any names and values
#: (the worker reads only the rerouting one), with odd values of it among them
_headers = weighted(
    (47, st.none()),
    (1, st.just([(REROUTED_HEADER, b"1")])),
    (2, st.lists(st.tuples(
        st.one_of(st.text(max_size=20), st.just(REROUTED_HEADER)),
        st.one_of(st.binary(max_size=64), st.just(b""), st.just(b"\xff" * 4096))),
        min_size=1, max_size=6)))
#: 1 record in 400 padded to a size: past the reject's 64 KiB copy, half a megabyte, or
#: the most the broker takes with its key and headers
_size = weighted((399, st.none()), (1, st.sampled_from([65_537, 500_000, -1])))


def fit(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None,
        size: int | None) -> tuple[bytes | None, bytes | None]:
    """``value`` padded with JSON whitespace to ``size`` bytes (-1: the largest record the
    broker takes), and any record cut to fit ``message.max.bytes``: the value first, then
    the key."""
    def total(k: bytes | None, v: bytes | None) -> int:
        return int(DefaultRecordBatchBuilder.estimate_size_in_bytes(k, v, headers or []))

    if size is not None and value is not None:
        limit = KAFKA_MAX_MESSAGE_BYTES - total(key, value) + len(value)
        value += b" " * max(0, (limit if size < 0 else min(size, limit)) - len(value))
    while total(key, value) > KAFKA_MAX_MESSAGE_BYTES:
        over = total(key, value) - KAFKA_MAX_MESSAGE_BYTES
        if value is not None and len(value) > over:
            value = value[: len(value) - over]
        elif key is not None and len(key) > over:
            key = key[: len(key) - over]
        else:
            value, key = (value or b"")[:16], (key or b"")[:16]
    return key, value


def records(topic: str, now_s: float, partitions: int = 2) -> st.SearchStrategy[list[Record]]:
    payload_of = payloads(now_s)[topic]
    # 1 in 20 on a partition of the producer's choosing (librdkafka's default partitioner,
    # a hand-picked one)
    placement = weighted((19, st.none()), (1, st.integers(0, partitions - 1)))

    @st.composite
    def one(draw: st.DrawFn) -> Record:
        payload = draw(payload_of)
        key, value = draw(keys(topic, payload)), draw(encoded(payload))
        if key is None and value is None:  # Kafka needs one of them
            key = _key_host(payload).encode("utf-8", "surrogatepass")
        headers = draw(_headers)
        key, value = fit(key, value, headers, draw(_size))
        return key, value, draw(placement), headers

    one_list = st.lists(one(), min_size=10, max_size=30)

    @st.composite
    def batch(draw: st.DrawFn) -> list[Record]:
        out = draw(one_list)
        # duplicates: some records sent again, later (redelivery, a retrying producer)
        again = draw(st.lists(st.integers(0, len(out) - 1), max_size=6))
        return out + [out[i] for i in again]

    return batch()


def generate(topic: str, n: int, now_s: float, base_seed: int) -> list[Record]:
    """At least ``n`` records of ``topic`` drawn from :func:`records`, reproducible from
    ``base_seed`` (each round of examples gets the next seed)."""
    out: list[Record] = []
    strategy = records(topic, now_s)

    for round_no in range(1000):
        @seed(base_seed + round_no)
        @settings(max_examples=max(1, (n - len(out)) // 30 + 1), database=None,
                  deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck), derandomize=False)
        @given(strategy)
        def collect(batch: list[Record]) -> None:
            out.extend(batch)

        collect()
        if len(out) >= n:
            break
    return out[:n]
