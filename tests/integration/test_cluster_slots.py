"""Every Lua script of the store touches keys of one Redis Cluster slot.

A Redis Cluster refuses a script whose keys hash to two slots (CROSSSLOT), and redis-py's
cluster client refuses it before sending.  This test records every EVAL/EVALSHA the store
sends (through the clients' and pipelines' ``execute_command`` and the store's
``run_commands``, which every call goes through), computes each key's slot with
``redis.crc.key_slot`` (the cluster's own CRC16 rule, hash tags included) and fails if one
call spans two slots, on a single Redis node (where nothing else would notice) and on a
real three-master cluster.  It also fails if a script of the store is never called here,
so a new script has to be added to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio.client
import redis.asyncio.cluster
from redis.crc import key_slot

from streams.store import ControlOp, HostOp, IssueBatch, OutcomeOp, PageOp, PingBatch, redis_store
from streams.store.redis_store import Store

pytestmark = pytest.mark.integration

#: (script sha, keys) of every script call made while the recorder is on
Calls = list[tuple[str, tuple[str, ...]]]


def slots_of(keys: tuple[str, ...]) -> set[int]:
    return {key_slot(k.encode()) for k in keys}


@pytest.fixture
def script_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    """Record the keys of every EVAL/EVALSHA through any async client or pipeline."""
    calls: Calls = []
    classes = (redis.asyncio.client.Redis, redis.asyncio.client.Pipeline,
               redis.asyncio.cluster.RedisCluster, redis.asyncio.cluster.ClusterPipeline)
    for cls in classes:
        original = cls.execute_command

        def recording(self: Any, *args: Any, __original: Any = original, **kw: Any) -> Any:
            if str(args[0]).upper() in ("EVAL", "EVALSHA"):
                n = int(args[2])
                calls.append((str(args[1]), tuple(str(k) for k in args[3 : 3 + n])))
            return __original(self, *args, **kw)

        monkeypatch.setattr(cls, "execute_command", recording)

    def record(commands: Any) -> None:
        for c in commands:
            if str(c[0]).upper() in ("EVAL", "EVALSHA"):
                calls.append((str(c[1]), tuple(str(k) for k in c[3 : 3 + int(c[2])])))

    original_run = redis_store.run_commands

    async def run_recorded(client: Any, commands: Any) -> list[Any]:
        record(commands)
        return await original_run(client, commands)

    # the store's batches on one node skip the clients' execute_command (run_commands)
    monkeypatch.setattr(redis_store, "run_commands", run_recorded)
    yield calls


def test_the_slot_check_catches_keys_of_two_slots() -> None:
    # the control keys before they shared a hash tag: a cluster refused their script
    assert len(slots_of(("rc:control", "rc:control:offsets"))) == 2
    assert len(slots_of(("rc:{a.org}:pages", "rc:{b.org}:pages"))) == 2
    assert len(slots_of(("rc:control:{ctl}", "rc:control:{ctl}:offsets"))) == 1


async def _every_script(store: Store) -> list[Any]:
    """Each mutation of the store once, as the agents and the scheduler call them."""
    host, url = "slots.example", "https://slots.example/a"
    out: list[Any] = []
    out += await store.apply_pages([PageOp(url, host, 1.0, None, False, "t.pages", 0, 1)])
    out += await store.apply_hosts([HostOp(host, 5.0, 2, "t.hosts", 0, 1)])
    out += await store.apply_control([ControlOp({"budget_per_s": "3"}, "t.control", 0, 1)])
    out += await store.apply_pings(
        [PingBatch(host, "t.pings", 0, [(2, url, "sitemap", None, 50.0, "fp1")])], t_delay_s=1.0)
    out += await store.issue([IssueBatch(host, [(url, "o1")])], now_s=100.0, default_rate=1.0,
                             default_mif=0, burst=1.0)
    out += await store.apply_outcomes([
        OutcomeOp(url, host, "o1", 101.0, None, "t.outcomes", 0, 3, expect=""),
        OutcomeOp(url, host, "o1", 101.0, None, "t.outcomes", 0, 4)])
    out += await store.expire([(url, host, "o1")])
    out += [await store.read_pages([(host, url)]), await store.get_page(host, url)]
    # a host in several buckets: its scripts reach the buckets' keys (not in KEYS, same slot)
    big = "big.slots.example"
    urls = [f"https://{big}/{i}" for i in range(130)]
    out += await store.apply_pages([PageOp(u, big, 1.0, None, False, "t.pages", 0, i)
                                    for i, u in enumerate(urls)])
    out += await store.apply_pings(
        [PingBatch(big, "t.pings", 0, [(i, u, "sitemap", None, 50.0, f"f{i}")
                                       for i, u in enumerate(urls)])], t_delay_s=1.0)
    out += await store.issue([IssueBatch(big, [(u, f"b{i}") for i, u in enumerate(urls)])],
                             now_s=100.0, default_rate=1000.0, default_mif=0, burst=1000.0)
    out += await store.apply_outcomes([OutcomeOp(u, big, f"b{i}", 101.0, None, "t.outcomes", 0,
                                                 i) for i, u in enumerate(urls)])
    read = await store.read_pages([(big, u) for u in urls])
    assert all(v is not None for v in read)
    # the outcomes agent's read: pages and the hosts' prior keys, one script per host
    values, sums = await store.read_outcome_inputs([(big, u) for u in urls] + [(host, url)])
    assert values[:-1] == read and values[-1] is not None
    assert sums == {big: (0.0, 0.0, 0.0), host: (0.0, 0.0, 0.0)}
    assert out[-1] == ("applied", read[-1], 1)
    return out


@pytest.fixture(params=["redis_url", "redis_cluster_url"])
def backend_url(request: pytest.FixtureRequest) -> str:
    """The session's Redis (one node, or a cluster with REDIS_CLUSTER=1) and a real
    three-master Redis Cluster."""
    return str(request.getfixturevalue(request.param))


async def test_every_store_script_keeps_its_keys_in_one_slot(
    backend_url: str, script_calls: Calls
) -> None:
    store = Store.from_url(backend_url, f"sl{uuid.uuid4().hex[:8]}")
    try:
        await store.load_scripts()
        results = await _every_script(store)
        assert control_ok(await store.get_control())
    finally:
        await store.close()
    # a cluster client or server refusal would be an error result here
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors == []
    scripts = {name: getattr(store, name).sha for name in vars(store) if name.endswith("_script")}
    called = {sha for sha, _keys in script_calls}
    assert set(scripts.values()) <= called, (
        "scripts never called by this test: "
        + ", ".join(n for n, sha in scripts.items() if sha not in called))
    spanning = [(sha, keys) for sha, keys in script_calls if len(slots_of(keys)) > 1]
    assert spanning == []
    assert all(keys for _sha, keys in script_calls)


def control_ok(control: dict[str, str]) -> bool:
    return control.get("budget_per_s") == "3"
