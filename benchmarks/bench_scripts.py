"""Redis's own time per call of the store's ping and outcome scripts, alone: no worker, no
Kafka.  A synthetic shard (``--hosts`` hosts of 100 crawled pages, each page value a page
record and an estimator record of 133 bytes, in listpack-encoded hashes) gets ``--calls``
script calls of one ping or one outcome each, pipelined by 500, in ``--rounds`` alternated
rounds; the time is Redis's ``INFO commandstats`` for ``EVALSHA`` (the script and the
commands it calls), so the client's speed does not enter it::

    redis-server --port 6399 --save '' --appendonly no --daemonize yes
    .venv/bin/python benchmarks/bench_scripts.py --redis redis://127.0.0.1:6399/0

It flushes that Redis's database first.  To compare two versions, run the same file with
``PYTHONPATH`` set to each tree, alternating the runs.
"""

from __future__ import annotations

import argparse
import itertools
import os

import redis

from streams.store.page_record import PageState
from streams.store.redis_store import _APPLY_OUTCOME, _APPLY_PINGS

PAGES_PER_HOST = 100
PIPELINE = 500


def load(r: redis.Redis, hosts: int) -> None:
    r.flushdb()
    r.config_set("hash-max-listpack-value", 256)
    for h in range(hosts):
        values = {}
        for i in range(PAGES_PER_HOST):
            page = PageState(1.0, None, 1.7e9).encode(b"\x82")[:-1]
            values[f"/page/{h * PAGES_PER_HOST + i:08d}"] = page + bytes([0x82]) + os.urandom(132)
        r.hset(f"bs:{{host{h}.example}}:pages", mapping=values)  # type: ignore[arg-type]


def timed(r: redis.Redis, calls: list[tuple[int, list[str], list[object]]], sha: str) -> float:
    """Redis's microseconds per call of ``sha`` over ``calls``."""
    r.config_resetstat()
    pipe = r.pipeline(transaction=False)
    for k, (nkeys, keys, args) in enumerate(calls):
        pipe.evalsha(sha, nkeys, *keys, *args)
        if k % PIPELINE == PIPELINE - 1:
            pipe.execute()
    pipe.execute()
    st = r.info("commandstats")["cmdstat_evalsha"]
    return float(st["usec"]) / len(calls)


def main(args: argparse.Namespace) -> None:
    r = redis.Redis.from_url(args.redis)
    load(r, args.hosts)
    pings, outcomes = r.script_load(_APPLY_PINGS), r.script_load(_APPLY_OUTCOME)
    tags = itertools.count()
    est = bytes([0x82]) + os.urandom(132)

    def key(h: int, name: str) -> str:
        return f"bs:{{host{h}.example}}:{name}"

    def url(h: int, k: int, tag: int) -> str:
        i = (k * 7919 + tag * 13) % PAGES_PER_HOST
        return f"https://host{h}.example/page/{h * PAGES_PER_HOST + i:08d}"

    for rnd in range(args.rounds):
        tag = next(tags)  # a fresh offset field: no call is a redelivery
        ping_calls: list[tuple[int, list[str], list[object]]] = []
        out_calls: list[tuple[int, list[str], list[object]]] = []
        for k in range(args.calls):
            h = k % args.hosts
            ping_calls.append((3, [key(h, n) for n in ("pages", "offsets", "buckets")], [
                f"pings:{tag}", "0", "0", 0, k, url(h, k, tag), 1, "", repr(1.7e9 + 10),
                1 + (k * 31 + tag * 7777) % 65000]))
            out_calls.append((6, [key(h, n) for n in (
                "pages", "offsets", "inflight", "blocked", "host", "buckets")], [
                f"outcomes:{tag}", k, url(h, k, tag + 1), "", f"{1.8e9 + tag * 1e3 + k * 0.01:.3f}",
                est if k % 2 else "", "0", "", "0", ""]))
        p = timed(r, ping_calls, pings)
        o = timed(r, out_calls, outcomes)
        print(f"round {rnd + 1}: ping script {p:.1f} us per call (one ping), "
              f"outcome script {o:.1f} us per call")
    r.flushdb()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6399/0")
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    main(ap.parse_args())
