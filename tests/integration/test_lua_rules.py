"""Each rule Redis applies in Lua against its one Python implementation, on generated
inputs and a real Redis (the ping rule's own test is ``test_ping_rule_lua.py``):

* the token bucket and the in-flight cap of ``issue.lua`` against
  :func:`models.decision.hosts.refill` and :func:`models.decision.hosts.admit`;
* the host's rate of ``apply_host.lua`` (the operator's lowered by the other sources')
  against :func:`models.decision.hosts.binding_rate`;
* the ping rule of ``apply_pings.lua`` and of the memory store against
  :func:`models.decision.pings.ping_verdict` (the stored bytes: ``test_ping_rule_lua.py``);
* the memory store (:mod:`streams.store.memory`), which calls those Python rules, against
  the same scripts on the same inputs, including the ping dedup on 48-bit fingerprints.
"""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest
from test_ping_rule_lua import _cases

from models.decision.hosts import admit, binding_rate, refill
from models.decision.pings import VERDICTS, ping_verdict
from streams.store import HostOp, IssueBatch, PingBatch
from streams.store.memory import MemoryStore
from streams.store.page_record import FP_BYTES, N_SEEN, PageState, ping_fingerprint, record_bytes
from streams.store.redis_store import Store

pytestmark = pytest.mark.integration


def _bucket_cases(n: int, seed: int) -> list[dict[str, object]]:
    """A host's stored bucket (each field present or not), its orders in flight, the time,
    the defaults and a batch of orders; many on the rule's boundaries (exactly one token,
    in flight at the cap, the time equal to the bucket's)."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, object]] = []
    for _ in range(n):
        now = 1.0e9 + int(rng.integers(0, 100_000)) / 1000
        burst = [1.0, 2.0, 3.5][int(rng.integers(0, 3))]
        rate = None if rng.random() < 0.3 else [0.5, 1.0, 4.0, 0.25][int(rng.integers(0, 4))]
        default_rate = [1.0, 2.0][int(rng.integers(0, 2))]
        r = rate if rate is not None else default_rate
        pick = int(rng.integers(0, 5))
        if pick == 0:
            tokens, ts = None, None
        elif pick == 1:  # exactly one token by now
            tokens, ts = 0.0, now - 1.0 / r
        elif pick == 2:
            tokens, ts = round(float(rng.uniform(-1.0, burst)), 3), now
        elif pick == 3:  # a bucket stamped after now (another worker's clock)
            tokens, ts = round(float(rng.uniform(0.0, burst)), 3), now + 0.5
        else:
            tokens, ts = round(float(rng.uniform(-2.0, burst)), 3), now - int(
                rng.integers(0, 4000)) / 1000
        mif = None if rng.random() < 0.5 else int(rng.integers(0, 4))
        default_mif = int(rng.integers(0, 3))
        out.append({"now": now, "burst": burst, "rate": rate, "default_rate": default_rate,
                    "tokens": tokens, "ts": ts, "mif": mif, "default_mif": default_mif,
                    "in_flight": int(rng.integers(0, 4)), "orders": int(rng.integers(1, 5))})
    return out


def _expected(c: dict[str, object]) -> tuple[list[str], float | None]:
    """The Python rules' codes for the batch, and the tokens left (None: none taken)."""
    rate = c["rate"] if c["rate"] is not None else c["default_rate"]
    mif = c["mif"] if c["mif"] is not None else c["default_mif"]
    assert isinstance(rate, float) and isinstance(mif, int)
    tokens = refill(c["tokens"], c["ts"], c["now"], rate, c["burst"])  # type: ignore[arg-type]
    nfl = int(c["in_flight"])  # type: ignore[call-overload]
    codes: list[str] = []
    took = False
    for _ in range(int(c["orders"])):  # type: ignore[call-overload]
        why = admit(tokens, nfl, mif)
        if why is None:
            tokens, nfl, took = tokens - 1, nfl + 1, True
            codes.append("ok")
        else:
            codes.append(why)
    return codes, (tokens if took else None)


async def _seed_bucket(store: Store | MemoryStore, host: str, c: dict[str, object]) -> None:
    page = PageState(last_crawl_s=1000.0).encode()
    urls = [f"http://{host}/p{k}" for k in range(int(c["orders"]))]  # type: ignore[call-overload]
    fields = {k: repr(c[k]) for k in ("tokens", "ts") if c[k] is not None}
    if c["rate"] is not None:
        fields["rate"] = repr(c["rate"])
    if c["mif"] is not None:
        fields["mif"] = str(c["mif"])
    flying = {f"http://{host}/f{k}": f"o{k}|1.0" for k in range(int(c["in_flight"]))}  # type: ignore[call-overload]
    if isinstance(store, Store):
        r = store.redis
        for u in urls + list(flying):
            await r.hset(store.key(host, "pages"), u, page)
        if flying:
            await r.hset(store.key(host, "inflight"), mapping=flying)
        if fields:
            await r.hset(store.key(host, "host"), mapping=fields)
    else:
        pages = store.pages.setdefault(host, {})
        for u in urls + list(flying):
            pages[u] = page
        store.inflight.setdefault(host, {}).update(flying)
        if fields:
            store.hosts.setdefault(host, {}).update(fields)


async def _issue(store: Store | MemoryStore, host: str, c: dict[str, object]) -> list[str]:
    orders = [(f"http://{host}/p{k}", f"n{k}") for k in range(int(c["orders"]))]  # type: ignore[call-overload]
    (res,) = await store.issue([IssueBatch(host, orders)], now_s=c["now"],  # type: ignore[arg-type]
                               default_rate=c["default_rate"],  # type: ignore[arg-type]
                               default_mif=c["default_mif"], burst=c["burst"])  # type: ignore[arg-type]
    return [str(code) for code, _payload in res]


async def _tokens(store: Store | MemoryStore, host: str) -> float | None:
    if isinstance(store, Store):
        v = await store.redis.hget(store.key(host, "host"), "tokens")
    else:
        v = store.hosts.get(host, {}).get("tokens")
    return None if v is None else float(v)


async def test_the_token_bucket_in_lua_is_the_python_rule(redis_url: str) -> None:
    """``issue.lua`` and the memory store decide every order of a batch as ``refill`` then
    ``admit`` (spending a token and a place in flight per order taken) and store the tokens
    left; every code occurs, so each branch of the rule is compared."""
    redis = Store.from_url(redis_url, f"tb{uuid.uuid4().hex[:8]}")
    memory = MemoryStore()
    try:
        await redis.load_scripts()
        seen: set[str] = set()
        for i, c in enumerate(_bucket_cases(500, seed=3)):
            host = f"h{i}.test"
            want, left = _expected(c)
            seen.update(want)
            for store in (redis, memory):
                await _seed_bucket(store, host, c)
                assert await _issue(store, host, c) == want, (i, c, type(store).__name__)
                got = await _tokens(store, host)
                if left is None:
                    assert got == c["tokens"], (i, c)
                else:
                    assert got is not None and math.isclose(got, left, rel_tol=1e-12,
                                                             abs_tol=1e-12), (i, c, got, left)
        assert seen == {"ok", "no-token", "max-in-flight"}
    finally:
        await redis.delete_all()
        await redis.close()


def test_refill_is_the_bucket_the_scheduler_mirrors() -> None:
    """:class:`models.decision.hosts.HostBuckets` (the scheduler's mirror) reads its tokens
    through :func:`refill`: the same tokens on generated buckets."""
    from models.decision.hosts import HostBuckets

    rng = np.random.default_rng(9)
    for _ in range(300):
        rate, burst = float(rng.choice([0.5, 1.0, 3.0, math.inf])), float(rng.choice([1.0, 2.5]))
        hb = HostBuckets(rate, burst=burst)
        tokens, ts = float(rng.uniform(-1, burst)), float(rng.uniform(0, 10))
        now = ts + float(rng.choice([-1.0, 0.0, rng.uniform(0, 5)]))
        hb.set_tokens("h", tokens, ts)
        assert hb.tokens("h", now) == refill(tokens, ts, now, rate, burst)
        assert hb.room("h", now) == max(0, int(refill(tokens, ts, now, rate, burst)))


async def test_the_ping_rule_of_both_stores_is_the_python_rule(redis_url: str) -> None:
    """Every verdict of ``apply_pings.lua`` is :func:`ping_verdict`'s ``"live"`` rule's,
    and the memory store's."""
    redis = Store.from_url(redis_url, f"tp{uuid.uuid4().hex[:8]}")
    memory = MemoryStore()
    try:
        await redis.load_scripts()
        got: list[str] = []
        mem: list[str] = []
        want: list[str] = []
        for i, (last, received, changed, t_delay) in enumerate(_cases(400, seed=17)):
            host, url = f"t{i}.test", f"http://t{i}.test/p"
            value = PageState(last_crawl_s=last).encode()
            await redis.redis.hset(redis.key(host, "pages"), url, value)
            memory.pages.setdefault(host, {})[url] = value.decode("utf-8", "surrogateescape")
            batch = [PingBatch(host, "pings", 0, [(i, url, "sitemap", changed, received,
                                                   f"f{i}")])]
            (res,) = await redis.apply_pings(batch, t_delay_s=t_delay)
            (res_m,) = await memory.apply_pings(batch, t_delay_s=t_delay)
            got.append(str(res[0][0]))
            mem.append(str(res_m[0][0]))
            v = ping_verdict("live", t_delay, last if last > 0 else -math.inf, received,
                             math.nan if changed is None else changed)
            want.append(VERDICTS[v])
        assert got == want
        assert mem == want
        assert set(got) == set(VERDICTS)
    finally:
        await redis.delete_all()
        await redis.close()


async def test_the_ping_dedup_in_lua_is_the_memory_stores_on_48_bit_fingerprints(
        redis_url: str) -> None:
    """``apply_pings.lua``'s dedup against the memory store's on binary pages whose kept
    fingerprints are the ping's (a duplicate), equal to it in every byte but one (the low 16
    bits always equal: what a 16-bit digest took for a duplicate), its bytes across two kept
    ones, or random, 0 to 8 of them, with signal counts stored or not: same codes, same
    stored bytes (the shape byte, the counts inserted, the oldest of 8 evicted), and a
    duplicate exactly when the 48-bit value is kept."""
    rng = np.random.default_rng(41)
    redis = Store.from_url(redis_url, f"td{uuid.uuid4().hex[:8]}")
    memory = MemoryStore()
    try:
        await redis.load_scripts()
        codes: list[str] = []
        for i in range(400):
            host, url = f"d{i}.test", f"http://d{i}.test/p"
            fp = ping_fingerprint(f"f{i}")
            pick = i % 4
            # 0..8 kept (8: the ping, no duplicate, evicts the oldest); 2 for the straddle
            n = max(int(rng.choice([0, 1, 3, N_SEEN])), (1, 1, 2, 0)[pick])
            seen = [int(x) for x in rng.integers(1, 1 << 48, n)]
            k = int(rng.integers(0, max(1, n - 1)))
            if pick == 0:
                seen[k] = fp
            elif pick == 1:  # one byte differs, above the low 16 bits
                seen[k] = fp ^ (int(rng.integers(1, 256)) << (8 * int(rng.integers(2, 6))))
            elif pick == 2:
                j, fb = int(rng.integers(1, FP_BYTES)), fp.to_bytes(FP_BYTES, "little")
                seen[k] = int.from_bytes(rng.bytes(FP_BYTES - j) + fb[:j], "little") or 1
                seen[k + 1] = int.from_bytes(fb[j:] + rng.bytes(j), "little") or 1
            # counts stored, or none (an applied ping inserts them)
            signals = (0, 1, 0, 0, 0) if i % 5 < 3 else (0,) * 5
            page = PageState(1.0, None, 1000.0 * (i % 2), signals, tuple(seen))
            rest = None if i % 3 else b"\x82" + rng.bytes(40)
            value = page.encode(rest)
            await redis.redis.hset(redis.key(host, "pages"), url, value)
            memory.pages.setdefault(host, {})[url] = value.decode("utf-8", "surrogateescape")
            batch = [PingBatch(host, "pings", 0, [(1, url, "cdn", None, 5000.0, f"f{i}")])]
            (res,) = await redis.apply_pings(batch, t_delay_s=0.0)
            (res_m,) = await memory.apply_pings(batch, t_delay_s=0.0)
            assert res[0][0] == res_m[0][0] == ("duplicate" if fp in seen else "applied"), i
            stored = record_bytes(await redis.get_page_raw(host, url) or "")
            assert stored == record_bytes(memory.pages[host][url]), i
            codes.append(str(res[0][0]))
        assert codes.count("duplicate") == 100
    finally:
        await redis.delete_all()
        await redis.close()


async def test_the_host_rate_in_lua_is_the_python_rule(redis_url: str) -> None:
    """Random sequences of capacity updates from the three sources (a rate, or None to
    lift it) on a host: after each, ``apply_host.lua``'s rate (and the memory store's) is
    the one :func:`binding_rate` picks from the stored sources' rates, '' for the default."""
    rng = np.random.default_rng(21)
    redis = Store.from_url(redis_url, f"hr{uuid.uuid4().hex[:8]}")
    memory = MemoryStore()
    sources = ("operator", "robots", "pushback")
    kinds: set[str] = set()
    try:
        await redis.load_scripts()
        for i in range(60):
            host = f"r{i}.test"
            default = float(rng.choice([0.5, 1.0, 2.0]))
            rates: dict[str, float | None] = dict.fromkeys(sources)
            for k in range(8):
                src = sources[int(rng.integers(0, 3))]
                rate = None if rng.random() < 0.3 else float(rng.choice([0.25, 0.5, 1.0, 3.0]))
                rates[src] = rate
                op = HostOp(host, rate, None, "hosts", 0, 1 + k, source=src,
                            default_rate_per_s=default)
                (got,) = await redis.apply_hosts([op])
                (got_m,) = await memory.apply_hosts([op])
                which = binding_rate([rates[s] for s in sources], default)
                want = "" if which is None else repr(rates[sources[which]])
                kinds.add("default" if which is None else sources[which])
                assert got[:2] == ("applied", want) or list(got[:2]) == ["applied", want], (
                    i, k, rates, got)
                assert list(got_m[:2]) == list(got[:2])
        assert kinds == {"default", *sources}
    finally:
        await redis.delete_all()
        await redis.close()
