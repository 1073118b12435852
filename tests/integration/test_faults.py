"""Faults during a steady stream of pings, orders and outcomes, and a graceful stop.

Each fault runs against a private Kafka and Redis (``faults.PrivateStack``): SIGKILL of the
worker, a Redis crash and restart (append-only file on), a Kafka broker restart, Redis
paused for 30 s.  For each: no event lost, none applied twice, no order duplicated, and the
final state equals a clean replay of the same input by a fresh worker.  Timings are printed
(``pytest -s``) and written to ``$RECRAWL_FAULTS_JSON`` when set, never asserted;
docs/reliability.md has the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from faults import (
    CRAWL_HOSTS,
    HEADER,
    PrivateStack,
    Report,
    Traffic,
    account,
    applied_offsets,
    catalogue,
    committed_and_ends,
    compare,
    copy_inputs,
    lag,
    page_state,
    read_all,
    wait_caught_up,
)
from kafka_io import produce_json, wait_for
from worker_process import IN_CI, Worker

from infra import InfraError
from infra.kafka import create_topics
from infra.stack import default_cache
from streams.settings import Settings
from streams.store.redis_conn import connect_sync as connect_redis_sync

pytestmark = pytest.mark.integration

#: the stream: R = 30 orders/s over 96 crawlable pages (each ordered every ~3 s), 40 pings/s
STREAM_ENV = {"RECRAWL_BUDGET_PER_S": "30", "RECRAWL_DEFAULT_HOST_CRAWLS_PER_S": "1000",
              "RECRAWL_BATCH_SIZE": "100", "RECRAWL_T_DELAY_S": "0"}
REPORTS: list[Report] = []


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateStack]:
    try:
        st = PrivateStack(tmp_path_factory.mktemp("faults-stack"), default_cache())
    except InfraError as exc:
        if IN_CI:
            pytest.fail(f"CI=true and the private stack did not start: {exc}", pytrace=False)
        pytest.skip(f"private Kafka/Redis unavailable: {exc}")
    try:
        yield st
    finally:
        st.close()
        if REPORTS:
            print("\n" + HEADER)
            for rep in REPORTS:
                print(rep.row())
            out = os.environ.get("RECRAWL_FAULTS_JSON")
            if out:
                Path(out).write_text(json.dumps([asdict(r) for r in REPORTS], indent=2))


def new_settings(stack: PrivateStack, tmp_path: Path) -> Settings:
    tag = uuid.uuid4().hex[:8]
    s = Settings(kafka_bootstrap=stack.bootstrap, redis_url=stack.redis_url,
                 topic_prefix=f"f{tag}", app_id=f"fapp{tag}", key_prefix=f"f{tag}",
                 partitions=4, web_enabled=False, data_dir=tmp_path / f"worker-{tag}")
    asyncio.run(create_topics(stack.bootstrap, s.topic_names(), s.partitions))
    return s


class Workers:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.all: list[Worker] = []

    def spawn(self, s: Settings, env: dict[str, str]) -> Worker:
        w = Worker(s, self.tmp_path / f"worker-{len(self.all)}.log", env)
        self.all.append(w)
        return w

    def start(self, s: Settings, env: dict[str, str]) -> Worker:
        w = self.spawn(s, env)
        w.wait_ready(timeout_s=90)
        return w

    def stop_all(self) -> None:
        """SIGTERM every worker at once, then wait for each (SIGKILL after 20 s)."""
        for w in self.all:
            if w.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(w.proc.pid, signal.SIGTERM)
        for w in self.all:
            w.stop()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    ws = Workers(tmp_path)
    yield ws
    ws.stop_all()


def orders_after(t: Traffic, at: float) -> bool:
    return any(o["issued_at"] > at for _r, o in t.orders)


# -- the faults: each returns (fault_at, recovered_at) ----------------------------------
def kill_worker(stack: PrivateStack, ws: Workers, w: Worker) -> tuple[float, float]:
    at = time.time()
    w.kill()
    w2 = ws.spawn(w.settings, STREAM_ENV)
    done = time.time()
    w2.wait_ready(timeout_s=90)
    return at, done


def restart_redis(stack: PrivateStack, ws: Workers, w: Worker) -> tuple[float, float]:
    at = time.time()
    stack.crash_redis()
    stack.start_redis()
    return at, time.time()


def restart_redis_empty(stack: PrivateStack, ws: Workers, w: Worker) -> tuple[float, float]:
    at = time.time()
    stack.crash_redis()
    stack.wipe_redis()
    stack.start_redis()
    return at, time.time()


def restart_kafka(stack: PrivateStack, ws: Workers, w: Worker) -> tuple[float, float]:
    at = time.time()
    stack.stop_kafka()
    stack.start_kafka()
    return at, time.time()


def pause_redis(stack: PrivateStack, ws: Workers, w: Worker) -> tuple[float, float]:
    at = time.time()
    stack.pause_redis()
    try:
        time.sleep(30)
    finally:
        stack.resume_redis()
    return at, time.time()


FAULTS: dict[str, Callable[[PrivateStack, Workers, Worker], tuple[float, float]]] = {
    "worker SIGKILL + restart": kill_worker,
    "Redis SIGKILL + restart (AOF everysec)": restart_redis,
    "Redis restarted empty (no AOF)": restart_redis_empty,
    "Kafka broker restart": restart_kafka,
    "Redis paused 30 s (SIGSTOP/SIGCONT)": pause_redis,
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_loses_nothing_applies_nothing_twice_and_equals_a_clean_replay(
    fault: str, stack: PrivateStack, workers: Workers, tmp_path: Path
) -> None:
    s = new_settings(stack, tmp_path)
    pages, hosts = catalogue()
    produce_json(s, "pages", pages)
    produce_json(s, "hosts", hosts)
    w = workers.start(s, STREAM_ENV)
    wait_for(lambda: len(page_state(s)["pages"]) == len(pages), 30, "the catalogue loaded")
    traffic = Traffic(s)
    traffic.start()
    try:
        wait_for(lambda: len(traffic.outcomes) > 40, 60, "a steady stream of orders")
        fault_at, recovered_at = FAULTS[fault](stack, workers, w)
        try:
            wait_for(lambda: orders_after(traffic, recovered_at), 90, "orders after the fault")
        except AssertionError:
            st = page_state(s)
            raise AssertionError(
                f"no orders after the fault: lag {lag(s)}, {len(st['inflight'])} pages in "
                f"flight, {len(traffic.orders)} orders received (last issued at "
                f"{max(o['issued_at'] for _r, o in traffic.orders) - recovered_at:.1f}s), "
                f"driver retries {traffic.send_errors}") from None
        time.sleep(3)  # the stream goes on for a while after the recovery
        traffic.stop_pings()
        produce_json(s, "control", [("control", {"budget_per_s": 0})])
        # the replay's fresh worker starts meanwhile (its budget 0: it orders nothing)
        r = new_settings(stack, tmp_path)
        replayer = workers.spawn(r, {"RECRAWL_BUDGET_PER_S": "0", "RECRAWL_BATCH_SIZE": "100",
                                     "RECRAWL_T_DELAY_S": "0"})
        time.sleep(1.5)  # the last orders are answered
    finally:
        traffic.stop()
    catch_up_s = wait_caught_up(s, 60)
    rep = Report(fault)
    rep.notes = {"driver_send_retries": traffic.send_errors, "catch_up_s": round(catch_up_s, 1)}
    account(traffic, s, rep, fault_at, recovered_at)

    # a clean replay: the same input, copied in partition order, into a fresh worker
    # (the catalogue first, as in the run: an outcome before its page is 'unknown')
    replayer.wait_ready(timeout_s=90)
    copied = copy_inputs(s, r, ("pages", "hosts"))
    wait_caught_up(r, 60)
    copied += copy_inputs(s, r, ("pings", "outcomes"))
    wait_caught_up(r, 60)
    rep.replay_diff = compare(s, r)
    rep.replay_equal = not rep.replay_diff
    rep.notes["replayed_events"] = copied
    REPORTS.append(rep)
    print(f"\n{fault}: {asdict(rep)}")

    assert rep.pings > 0 and rep.outcomes > 0 and rep.orders > 0
    assert rep.lost == 0
    assert rep.twice == 0, rep.notes
    if fault != "Redis restarted empty (no AOF)":  # in-flight marks are not rebuilt:
        # a page whose order was out at the loss may be ordered again before its outcome
        assert rep.orders_duplicated == 0, rep.notes
    # an issue call without a reply clears its marks; a killed worker's unsent orders are
    # found by the worker that rebuilds its shards (streams/scheduler/confirm.py); orders
    # the producer gives up end their marks, and a replaced producer's batches are all
    # settled (sent again, or given up)
    assert rep.orders_lost == 0, rep.notes
    assert rep.replay_diff == [], rep.replay_diff[:5]


# -- a SIGKILL during a burst of orders ---------------------------------------------------
@pytest.mark.timeout(240)
def test_sigkill_during_a_burst_of_orders_loses_none(
    stack: PrivateStack, workers: Workers, tmp_path: Path
) -> None:
    """Orders marked in flight while the broker cannot take them (paused: they wait in the
    producer), then the worker SIGKILLed: the worker that rebuilds the shards must find
    the marks whose order is not on the orders topic and order those pages again (none
    waits for the 600 s order time-out).  Nobody answers the orders here: each page is
    ordered once and stays in flight."""
    s = new_settings(stack, tmp_path)
    produce_json(s, "pages", [(h, {"url": f"https://{h}/b/{i}"})
                              for h in CRAWL_HOSTS for i in range(100)])
    env = {**STREAM_ENV, "RECRAWL_BUDGET_PER_S": "2"}
    w1 = workers.start(s, env)
    wait_for(lambda: len(read_all(s, "orders")) >= 2, 60, "the orders producer running")
    r = connect_redis_sync(s.redis_url, decode_responses=True)

    def lost() -> list[str]:
        on_topic = {o["order_id"] for o in read_all(s, "orders")}
        return [u for u, fl in page_state(s)["inflight"].items()
                if fl.split("|")[0] not in on_topic]

    r.hset(f"{s.key_prefix}:control:{{ctl}}", "budget_per_s", "5000")  # the burst
    wait_for(lambda: len(page_state(s)["inflight"]) >= 100, 30, "a burst of orders")
    stack.pause_kafka()  # the orders of the last ticks stay in the producer
    try:
        time.sleep(0.5)
        w1.kill()
    finally:
        stack.resume_kafka()
    marked = page_state(s)["inflight"]
    unsent = len(lost())
    assert unsent > 0, "every order of the burst reached the topic: the test shows nothing"
    w2 = workers.spawn(s, env)
    w2.wait_ready(timeout_s=90)
    # (the marked pages' own orders awaited: the new worker orders the other pages of the
    # burst at once, its check of the marks waits until the youngest is 3 s old)
    wait_for(lambda: not lost() and set(marked) <= {o["url"] for o in read_all(s, "orders")},
             90, "every page in flight with its order on the topic")
    ordered = {o["url"] for o in read_all(s, "orders")}
    assert set(marked) <= ordered
    assert "never reached the orders topic" in w2.log()
    print(f"\nSIGKILL during a burst: {len(marked)} pages marked, {unsent} of their orders "
          "not on the topic at the kill, all ordered again, 0 lost")


# -- a broker restart during a burst of orders --------------------------------------------
@pytest.mark.timeout(300)
def test_a_broker_restart_during_a_burst_of_orders_loses_none(
    stack: PrivateStack, workers: Workers, tmp_path: Path
) -> None:
    """800 pages ordered at up to 5,000/s by a worker whose orders producer times out
    requests after 3 s, the broker stopped for 6 s and started again: after the restart
    every page marked in flight has its order on the orders topic (orders the producer gave
    up end their marks and are ordered again), none waits for the order time-out.  Nobody
    answers the orders: each page stays in flight once its order is out."""
    s = new_settings(stack, tmp_path)
    produce_json(s, "pages", [(h, {"url": f"https://{h}/r/{i}"})
                              for h in CRAWL_HOSTS for i in range(100)])
    env = {**STREAM_ENV, "RECRAWL_BUDGET_PER_S": "2", "RECRAWL_ORDERS_REQUEST_TIMEOUT_S": "3"}
    workers.start(s, env)
    wait_for(lambda: len(read_all(s, "orders")) >= 2, 60, "the orders producer running")
    r = connect_redis_sync(s.redis_url, decode_responses=True)

    def lost() -> list[str]:
        on_topic = {o["order_id"] for o in read_all(s, "orders")}
        return [u for u, fl in page_state(s)["inflight"].items()
                if fl.split("|")[0] not in on_topic]

    r.hset(f"{s.key_prefix}:control:{{ctl}}", "budget_per_s", "5000")  # the burst
    wait_for(lambda: len(page_state(s)["inflight"]) >= 50, 30, "a burst of orders")
    stack.stop_kafka()
    time.sleep(6)
    stack.start_kafka()
    back = time.time()
    try:
        wait_for(lambda: len(page_state(s)["inflight"]) == 800 and not lost(), 90,
                 "every page in flight with its order on the topic")
    except AssertionError:
        left = lost()
        raise AssertionError(f"{len(left)} pages marked in flight without their order on the "
                             f"topic {time.time() - back:.0f}s after the restart: {left[:5]}"
                             ) from None
    print(f"\nbroker restart during a burst: every page ordered, 0 lost, "
          f"{time.time() - back:.1f}s after the restart")


# -- graceful stop ------------------------------------------------------------------------
def worker_after_traffic(stack: PrivateStack, workers: Workers, tmp_path: Path,
                         env: dict[str, str], outcomes: int) -> tuple[Settings, Worker]:
    """A worker on the fault world's catalogue that has answered ``outcomes`` orders (the
    traffic stopped then)."""
    s = new_settings(stack, tmp_path)
    pages, hosts = catalogue()
    produce_json(s, "pages", pages)
    produce_json(s, "hosts", hosts)
    w = workers.start(s, env)
    traffic = Traffic(s)
    traffic.start()
    try:
        wait_for(lambda: len(traffic.outcomes) > outcomes, 60, "a steady stream of orders")
    finally:
        traffic.stop()
    return s, w


def shards(s: Settings) -> dict[int, dict[str, object]]:
    r = connect_redis_sync(s.redis_url, decode_responses=True)
    return {int(p): json.loads(v) for p, v in r.hgetall(f"{s.key_prefix}:sched:shards").items()}


@pytest.mark.timeout(240)
def test_sigterm_stops_with_offsets_committed_and_a_peer_takes_over_a_killed_worker(
    stack: PrivateStack, workers: Workers, tmp_path: Path
) -> None:
    s, w1 = worker_after_traffic(stack, workers, tmp_path, STREAM_ENV, outcomes=60)
    _committed, ends = committed_and_ends(s)
    want = {f"{tp.topic}:{tp.partition}": end - 1 for tp, end in ends.items()
            if end and tp.topic in (s.topic("pings"), s.topic("outcomes"))}
    wait_for(lambda: all(applied_offsets(s).get(k, -1) >= v for k, v in want.items()), 30,
             "every ping and outcome applied")
    # SIGTERM right away: the last events were applied within the commit interval (2 s)
    t0 = time.monotonic()
    os.killpg(w1.proc.pid, signal.SIGTERM)
    w1.proc.wait(timeout=90)
    stop_s = time.monotonic() - t0
    committed, ends = committed_and_ends(s)
    behind = {f"{tp.topic}:{tp.partition}": (committed.get(tp), end)
              for tp, end in ends.items() if end and committed.get(tp, -1) < end}
    print(f"\nSIGTERM: the worker exited in {stop_s:.2f}s (code {w1.proc.returncode}); "
          f"partitions not committed to their end: {behind}")
    assert w1.proc.returncode == 0, w1.log()[-3000:]
    assert behind == {}

    # a peer takes over a SIGKILLed worker's partitions
    w2 = workers.spawn(s, STREAM_ENV)
    w3 = workers.spawn(s, STREAM_ENV)
    w2.wait_ready(timeout_s=90)
    w3.wait_ready(timeout_s=90)

    def live_workers(after: float) -> set[object]:
        return {e.get("worker") for e in shards(s).values()
                if e.get("ready") and float(str(e["ts"])) > after}

    wait_for(lambda: len(live_workers(time.time() - 1.5)) == 2, 60,
             "two workers share the partitions")
    t_kill = time.time()
    w2.kill()

    def taken_over() -> bool:
        got = shards(s)
        fresh = [e for e in got.values() if e.get("ready") and float(str(e["ts"])) > t_kill]
        return len(fresh) == s.partitions and len({e.get("worker") for e in fresh}) == 1

    wait_for(taken_over, 90, "the other worker runs every partition")
    takeover_s = time.time() - t_kill
    assert w3.proc.poll() is None
    print(f"SIGKILL: the other worker had every partition ready {takeover_s:.1f}s later "
          f"(session timeout {STREAM_ENV.get('RECRAWL_SESSION_TIMEOUT_S', '10')}s)")
    out = os.environ.get("RECRAWL_GRACEFUL_JSON")
    if out:
        Path(out).write_text(json.dumps({"stop_s": stop_s, "takeover_s": takeover_s}))


# -- a stop while Kafka is gone ----------------------------------------------------------
@pytest.mark.timeout(240)
def test_with_kafka_gone_the_log_stays_short_and_a_stop_ends_within_its_timeout(
    stack: PrivateStack, workers: Workers, tmp_path: Path
) -> None:
    env = {**STREAM_ENV, "RECRAWL_OUTAGE_REPORT_S": "5", "RECRAWL_STOP_TIMEOUT_S": "10"}
    _s, w = worker_after_traffic(stack, workers, tmp_path, env, outcomes=30)
    stack.stop_kafka()
    try:
        time.sleep(15)  # orders keep being issued into the producer's buffer meanwhile
        t0 = time.monotonic()
        os.killpg(w.proc.pid, signal.SIGTERM)
        w.proc.wait(timeout=60)
        stop_s = time.monotonic() - t0
    finally:
        stack.start_kafka()
    log = w.log()
    refused = log.count("Unable connect to node")
    print(f"\nKafka gone for {15 + stop_s:.0f} s: {refused} 'Unable connect' lines, "
          f"{log.count(chr(10))} log lines; SIGTERM to exit {stop_s:.1f} s "
          f"(code {w.proc.returncode})")
    # one line of each kind per outage_report_s (5 s), not thousands a second
    assert 0 < refused <= 2 * (15 + stop_s) / 5 + 4, log[-3000:]
    assert stop_s < 10 + 15, log[-3000:]
    if w.proc.returncode != 0:  # cut short: said so
        assert w.proc.returncode == 1 and "did not stop within 10 s" in log, log[-3000:]
