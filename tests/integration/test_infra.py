"""The launcher itself: services start, answer, and leave nothing behind when stopped."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from infra import kafka, redis, stack
from infra.errors import ServiceStartError
from infra.proc import pid_alive, spawn, stop_group


def test_stop_group_reaps_through_the_popen(tmp_path: Path) -> None:
    """A Popen stopped by stop_group has its returncode: collected later it does not warn
    "subprocess N is still running" (pytest pinned that warning on whichever test was
    running when the collector came by)."""
    import gc
    import warnings

    proc = spawn(["sleep", "60"], tmp_path / "sleep.log", tie_to_parent=True)
    stop_group(proc, timeout_s=5)
    assert proc.returncode is not None and not pid_alive(proc.pid)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del proc
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], caught


def test_redis_starts_appendonly_and_stops_without_orphans(tmp_path: Path) -> None:
    proc, cfg = redis.start(tmp_path / "r", tie_to_parent=True)
    try:
        redis.wait_ready(proc, cfg)
        assert redis.ping(cfg.port)
        import redis as redis_client

        r = redis_client.Redis(port=cfg.port)
        assert r.config_get("appendonly") == {"appendonly": "yes"}
        assert Path(r.config_get("dir")["dir"]) == tmp_path / "r"
        r.close()
    finally:
        stop_group(proc)
    assert not pid_alive(proc.pid)
    assert not redis.ping(cfg.port)


def test_stack_status_and_down_without_a_stack(tmp_path: Path) -> None:
    assert stack.status(tmp_path) == {"running": False, "home": str(tmp_path)}
    assert stack.down(tmp_path) is False


def test_kafka_jars_are_cached_once(tmp_path: Path) -> None:
    lib = kafka.ensure_jars(stack.default_cache())
    assert (lib / ".complete").exists()
    assert any(lib.glob("kafka_2.13-3.9.*.jar"))
    mtime = (lib / ".complete").stat().st_mtime
    assert kafka.ensure_jars(stack.default_cache()) == lib
    assert (lib / ".complete").stat().st_mtime == mtime


def test_topics_must_share_one_partition_count(kafka_bootstrap: str) -> None:
    import asyncio
    import uuid

    name = f"pc-{uuid.uuid4().hex[:8]}"
    assert asyncio.run(kafka.create_topics(kafka_bootstrap, [name], 3)) == [name]
    assert asyncio.run(kafka.create_topics(kafka_bootstrap, [name], 3)) == []
    with pytest.raises(ServiceStartError, match="3 partitions, expected 2"):
        asyncio.run(kafka.create_topics(kafka_bootstrap, [name], 2))


def test_stack_up_down_round_trip(tmp_path: Path) -> None:
    info = stack.up(["rt.a", "rt.b"], 2, home=tmp_path, tie_to_parent=True)
    try:
        st = stack.status(tmp_path)
        assert st["running"] is True and st["kafka"] is True and st["redis"] is True
        again = stack.up(["rt.a"], 2, home=tmp_path, tie_to_parent=True)
        assert again.kafka_pid == info.kafka_pid  # reused, not restarted
    finally:
        assert stack.down(tmp_path) is True
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (pid_alive(info.kafka_pid) or pid_alive(info.redis_pid)):
        time.sleep(0.1)
    assert not pid_alive(info.kafka_pid) and not pid_alive(info.redis_pid)
    assert stack.status(tmp_path)["running"] is False


def test_cluster_ids_never_start_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0xf8 encodes to "-" first (URL-safe base64): such an id made `kafka-storage
    # format -t <id>` fail with "expected one argument" (1 start in 64)
    import uuid

    dash = uuid.UUID(bytes=b"\xf8" + bytes(15))
    plain = uuid.UUID(bytes=b"\x10" + bytes(15))
    draws = iter([dash, dash, plain])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(draws))
    assert kafka.base64.urlsafe_b64encode(dash.bytes).decode().startswith("-")
    cid = kafka.new_cluster_id()
    assert cid == kafka.base64.urlsafe_b64encode(plain.bytes).decode().rstrip("=")
    assert len(cid) == 22 and not cid.startswith("-")


def test_redis_cluster_forms_and_restarts_with_its_data(tmp_path: Path) -> None:
    from streams.store.redis_conn import connect_sync

    procs, cfg = redis.start_cluster(tmp_path / "rc", 3, tie_to_parent=True)
    try:
        redis.wait_cluster_ready(procs, cfg)
        assert redis.cluster_ok(cfg.ports)
        assert cfg.url.startswith("redis+cluster://127.0.0.1:")
        r = connect_sync(cfg.url, decode_responses=True)
        assert len(r.get_primaries()) == 3
        for i in range(30):  # keys on every master
            r.set(f"k{i}", str(i))
        assert {r.get_node_from_key(f"k{i}").port for i in range(30)} == set(cfg.ports)
        r.close()
    finally:
        for p in procs:
            stop_group(p)
    assert not any(pid_alive(p.pid) for p in procs)
    # the same folder again: the same ports, the nodes re-form the cluster from nodes.conf
    procs2, cfg2 = redis.start_cluster(tmp_path / "rc", 3, tie_to_parent=True)
    try:
        assert cfg2.ports == cfg.ports
        redis.wait_cluster_ready(procs2, cfg2)
        r = connect_sync(cfg2.url, decode_responses=True)
        assert [r.get(f"k{i}") for i in range(30)] == [str(i) for i in range(30)]
        r.close()
    finally:
        for p in procs2:
            stop_group(p)


def test_stack_with_a_redis_cluster(tmp_path: Path) -> None:
    """``recrawl infra up --redis-cluster 3``: the stack file records every master, status
    checks the cluster, a request for another kind of Redis is refused, down stops all."""
    info = stack.up(["rc.a"], 1, home=tmp_path, redis_cluster=3, tie_to_parent=True)
    try:
        assert info.redis_masters == 3 and len(set(info.redis_cluster_pids)) == 3
        assert info.redis_url.startswith("redis+cluster://")
        st = stack.status(tmp_path)
        assert st["running"] is True and st["redis"] is True
        assert stack.read_state(tmp_path) == info
        again = stack.up(["rc.a"], 1, home=tmp_path, redis_cluster=3, tie_to_parent=True)
        assert again.redis_cluster_pids == info.redis_cluster_pids  # reused
        # no kind asked (make up, make demo): whatever runs is reused
        assert stack.up(["rc.a"], 1, home=tmp_path, tie_to_parent=True) == info
        with pytest.raises(ServiceStartError, match="Redis Cluster of 3 masters"):
            stack.up(["rc.a"], 1, home=tmp_path, redis_cluster=0, tie_to_parent=True)
        with pytest.raises(ServiceStartError, match="Redis Cluster of 3 masters"):
            stack.up(["rc.a"], 1, home=tmp_path, redis_cluster=2, tie_to_parent=True)
    finally:
        assert stack.down(tmp_path) is True
    deadline = time.monotonic() + 5
    pids = [info.kafka_pid, *info.redis_cluster_pids]
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in pids)
