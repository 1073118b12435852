"""``recrawl import`` into a real worker (real Kafka and Redis, ``recrawl worker`` as an
operator starts it): the estimates it stores are the model's of the same observations; a
second run changes nothing; an interrupted run, resumed, ends where an uninterrupted one
does."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from worker_process import REPO, settings_env

from models.estimators import CrawlInterval, SignalEstimator
from models.sim.trace import complete_history_intervals
from streams.estimates.estimation import N_GROUPS, Estimation, Observation, full_estimates
from streams.estimates.record import EstimatorRecord
from streams.events.records import SOURCES
from streams.histories.observations import EPS_S
from streams.histories.sample import simulated_history
from streams.histories.write import write_cdx, write_changes
from streams.settings import Settings
from streams.store.page_record import PageState, estimator_part
from streams.store.redis_store import Store

pytestmark = pytest.mark.integration


def run_import(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams.cli", "import", *args, "--wait-s",
                           "120"], env=settings_env(settings), cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def stored(settings: Settings, urls: list[str]) -> dict[str, bytes | None]:
    """Each page's stored value (page record and estimator record), as bytes."""
    from streams.events.records import host_of

    async def go() -> list[str | None]:
        store = Store.from_url(settings.redis_url, settings.key_prefix)
        try:
            return await store.read_pages([(host_of(u), u) for u in urls])
        finally:
            await store.close()

    out: dict[str, bytes | None] = {}
    for u, value in zip(urls, asyncio.run(go()), strict=True):
        out[u] = None if value is None else value.encode("utf-8", "surrogateescape")
    return out


def stream_rates(pages: dict[str, list[tuple[float, bool, float]]]) -> dict[str, float]:
    """The change rate the worker's estimator code (:class:`Estimation`, the models'
    ``batch_update`` and Newton solve) computes in-process from each page's
    ``(tau, changed, end_s)``, signals unknown: the k-th interval of every page in one
    ``observe`` call, as the outcomes agent updates a chunk of pages (each page's records
    chained in order)."""
    est = Estimation()
    records: dict[str, str | None] = dict.fromkeys(pages)
    for k in range(max((len(v) for v in pages.values()), default=0)):
        urls = [u for u, intervals in pages.items() if len(intervals) > k]
        new = est.observe([Observation(records[u], pages[u][k][0], (0,) * len(SOURCES),
                                       pages[u][k][1], pages[u][k][2], signals_known=False)
                            for u in urls])
        records.update(zip(urls, new, strict=True))
    out = {}
    for u, record in records.items():
        e = full_estimates(record)
        assert e is not None, u
        out[u] = e.change_rate_per_s
    return out


def model_rate(intervals: list[tuple[float, bool, float]]) -> tuple[float, int]:
    """The change rate ``models.estimators.SignalEstimator`` (the worker's source groups,
    default prior) estimates from the intervals, signals unknown, page by page, and their
    number; its running estimate after each interval the mode, as the stream keeps it (an
    imported changed interval is merged into its representative at the running estimate,
    and ``update`` alone moves it only when a changed interval leaves the ring, which an
    imported one never enters)."""
    est = SignalEstimator(N_GROUPS)
    st = est.init()
    for tau, changed, end in intervals:
        st = est.update(st, CrawlInterval(tau, changed, (0,) * N_GROUPS, end,
                                          signals_known=False))
        mode = est.result(st)
        st = dataclasses.replace(st, theta=(mode.alpha_per_s, *mode.kappa))
    r = est.result(st)
    return r.change_rate_per_s, r.n_intervals


def assert_model_estimates(values: dict[str, bytes | None],
                           expected: dict[str, list[tuple[float, bool, float]]],
                           importance: dict[str, float]) -> None:
    in_process = stream_rates(expected)
    for url, intervals in expected.items():
        value = values[url]
        assert value is not None, f"{url}: not stored"
        page = PageState.decode(value)
        assert page.last_crawl_s == pytest.approx(intervals[-1][2], abs=1e-3), url
        assert page.importance == importance.get(url, 1.0), url
        est = full_estimates(estimator_part(value))
        assert est is not None, url
        # every imported interval's signals are unknown: all of its time is in that block
        state = EstimatorRecord.decode(estimator_part(value) or "").state
        assert state.unknown[0] == pytest.approx(state.totals[0], rel=1e-6), url
        assert state.unknown[0] > 0.0, url
        rate, n = model_rate(intervals)
        assert est.n_intervals == n == len(intervals), url
        # the same code in-process: equal to the float32 the record keeps
        assert est.change_rate_per_s == pytest.approx(in_process[url], rel=1e-6), url
        # the scalar model, page by page, with the mode as its running estimate: the
        # float32 record and the summation order aside, the same state
        assert est.change_rate_per_s == pytest.approx(rate, rel=1e-5), (url, intervals)


def capture_intervals(obs: dict[str, list[tuple[float, bool | None]]]
                      ) -> dict[str, list[tuple[float, bool, float]]]:
    return {u: [(b[0] - a[0], bool(b[1]), b[0]) for a, b in itertools.pairwise(o)]
            for u, o in obs.items()}


def complete_intervals(changes: list[float], start: float, stop: float
                       ) -> list[tuple[float, bool, float]]:
    """``complete_history_intervals`` with each interval's end time."""
    out = []
    end = start
    for tau, changed in complete_history_intervals(np.asarray(changes), start, stop, EPS_S):
        end += tau
        out.append((tau, changed, end))
    return out


def test_an_imported_capture_index_gives_the_models_estimates_and_a_rerun_changes_nothing(
        settings: Settings, start_worker: Any, tmp_path: Path) -> None:
    obs, _truth = simulated_history(m=12, days=10.0, seed=4, crawls_per_day=8.0)
    path = tmp_path / "captures.cdx"
    write_cdx(path, obs)
    with open(path, "a") as fh:
        fh.write("this is not a CDX line\n")
    n_lines = len(path.read_text().splitlines())
    start_worker(settings)
    done = run_import(settings, str(path))
    assert done.returncode == 1, done.stdout + done.stderr  # the bad line
    assert f"line {n_lines}:" in done.stdout, done.stdout
    n_out = sum(len(o) for o in obs.values())
    assert f"{n_out} outcomes sent" in done.stdout, done.stdout
    urls = sorted(obs)
    first = stored(settings, urls)
    assert_model_estimates(first, capture_intervals(obs), {})
    # a second run: the progress record says done; nothing is sent
    again = run_import(settings, str(path))
    assert again.returncode == 0 and "already imported" in again.stdout, again.stdout
    # everything sent again: every outcome is stale at the worker
    forced = run_import(settings, str(path), "--again")
    assert forced.returncode == 1 and f"{n_out} outcomes sent" in forced.stdout, forced.stdout
    assert stored(settings, urls) == first


def test_an_interrupted_change_log_import_resumes_to_the_models_estimates(
        settings: Settings, start_worker: Any, tmp_path: Path) -> None:
    _obs, truth = simulated_history(m=30, days=20.0, seed=6)
    importance = {u: 1.0 + k for k, u in enumerate(sorted(truth)) if k % 3 == 0}
    path = tmp_path / "changes.jsonl"
    write_changes(path, truth, importance=importance)
    times = [t for ts in truth.values() for t in ts]
    start, stop = min(times), max(times)
    expected = {u: complete_intervals(ts, start, stop) for u, ts in truth.items()}
    n_out = sum(len(e) + 1 for e in expected.values())
    start_worker(settings)
    part = run_import(settings, str(path), "--limit", "70")
    assert part.returncode == 0, part.stdout + part.stderr
    assert "70 outcomes sent" in part.stdout and "--limit" in part.stdout, part.stdout
    rest = run_import(settings, str(path))
    assert rest.returncode == 0, rest.stdout + rest.stderr
    assert f"{n_out - 70} outcomes sent" in rest.stdout and "after 70" in rest.stdout
    assert_model_estimates(stored(settings, sorted(truth)), expected, importance)


def test_a_killed_import_resumes_to_the_same_state_as_one_uninterrupted(
        settings: Settings, start_worker: Any, tmp_path: Path) -> None:
    obs, _truth = simulated_history(m=200, days=30.0, seed=8, crawls_per_day=400.0)
    path = tmp_path / "captures.cdx"
    write_cdx(path, obs)
    n_out = sum(len(o) for o in obs.values())
    start_worker(settings)
    env = settings_env(settings)
    proc = subprocess.Popen([sys.executable, "-m", "streams.cli", "import", str(path)],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    from streams.commands.importing import file_digest
    from streams.store.redis_conn import connect_sync

    key = f"{settings.key_prefix}:import:{file_digest(path, 'cdx')}"
    r = connect_sync(settings.redis_url, decode_responses=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and int(r.hget(key, "sent") or 0) < 2000:
        assert proc.poll() is None, "the import ended before it could be killed"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    sent = int(r.hget(key, "sent") or 0)
    assert 2000 <= sent < n_out and r.hget(key, "done") is None, sent
    rest = run_import(settings, str(path))
    assert rest.returncode == 0, rest.stdout + rest.stderr
    assert f"{n_out - sent} outcomes sent" in rest.stdout, rest.stdout
    assert_model_estimates(stored(settings, sorted(obs)), capture_intervals(obs), {})


def test_warc_and_kolobov_imports_and_an_older_history_changes_nothing(
        settings: Settings, start_worker: Any, tmp_path: Path) -> None:
    from streams.commands.importing import file_digest
    from streams.histories.write import write_kolobov, write_warc
    from streams.store.redis_conn import connect_sync

    obs, _truth = simulated_history(m=10, days=10.0, seed=9, crawls_per_day=6.0)
    warc_obs = {u.replace("example", "warc"): o for u, o in obs.items()}
    kol_obs = {u.replace("example", "kolobov"): o for u, o in obs.items()}
    write_warc(tmp_path / "captures.warc.gz", warc_obs)
    write_kolobov(tmp_path / "kolobov", kol_obs)
    # the same pages' captures a month earlier: older than what the worker will have
    older = {u: [(t - 30 * 86400.0, c) for t, c in o] for u, o in warc_obs.items()}
    write_cdx(tmp_path / "older.cdx", older)
    start_worker(settings)
    done = run_import(settings, str(tmp_path / "captures.warc.gz"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert_model_estimates(stored(settings, sorted(warc_obs)), capture_intervals(warc_obs), {})

    before = time.time()
    done = run_import(settings, str(tmp_path / "kolobov"))
    assert done.returncode == 0, done.stdout + done.stderr
    key = f"{settings.key_prefix}:import:{file_digest(tmp_path / 'kolobov', 'kolobov')}"
    start = float(connect_sync(settings.redis_url, decode_responses=True).hget(key, "start_s"))
    # without --start the collection ends at the run's time
    last = max(o[-1][0] for o in kol_obs.values())
    assert before - 1 <= start + last <= time.time()
    shifted = {u: [(t + start, c) for t, c in o] for u, o in kol_obs.items()}
    assert_model_estimates(stored(settings, sorted(kol_obs)), capture_intervals(shifted), {})

    current = stored(settings, sorted(warc_obs))
    done = run_import(settings, str(tmp_path / "older.cdx"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{sum(len(o) for o in older.values())} outcomes sent" in done.stdout
    assert stored(settings, sorted(warc_obs)) == current


def test_strict_unreachable_and_unknown_inputs_exit_with_their_status(
        settings: Settings, tmp_path: Path) -> None:
    from test_scheduler import free_port

    path = tmp_path / "changes.jsonl"
    write_changes(path, {"https://g.example/a": [1_700_000_000.0, 1_700_000_100.0]})
    with open(path, "a") as fh:
        fh.write('{"url": "https://g.example/a", "time": "soon"}\n')
    strict = run_import(settings, str(path), "--strict")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert f"{path}:4: 'time' must be a finite number" in strict.stderr
    assert "nothing sent" in strict.stderr
    env = {**settings_env(settings), "RECRAWL_CONNECT_TIMEOUT_S": "2"}
    for name, value in (("RECRAWL_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0"),
                        ("RECRAWL_KAFKA_BOOTSTRAP", f"127.0.0.1:{free_port()}")):
        done = subprocess.run([sys.executable, "-m", "streams.cli", "import", str(path)],
                              env={**env, name: value}, cwd=REPO, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 3, done.stdout + done.stderr
        assert done.stderr.startswith("recrawl import: cannot reach"), done.stderr
        assert done.stderr.strip().count("\n") == 0, done.stderr
    unknown = run_import(settings, str(tmp_path / "history.txt"))
    assert unknown.returncode == 2 and "no such file" in unknown.stderr
    (tmp_path / "history.txt").write_text("x\n")
    unknown = run_import(settings, str(tmp_path / "history.txt"))
    assert unknown.returncode == 2 and "cannot tell the format" in unknown.stderr


def test_a_change_log_imported_with_its_ping_log_teaches_the_pings_quality(
        settings: Settings, start_worker: Any, tmp_path: Path) -> None:
    """Each interval reaches the worker with its recorded pings: the stored estimates are
    what the worker's estimator code computes from the crawls of
    :func:`models.sim.trace.ping_history_crawls` with their ping counts, and a page whose
    every change was pinged is learned as announced."""
    import json

    from models.sim.trace import ping_history_crawls

    _obs, truth = simulated_history(m=16, days=10.0, seed=12, median_rate=2.0)
    rng = np.random.default_rng(13)
    urls = sorted(truth)
    pings: dict[str, np.ndarray] = {}
    with open(tmp_path / "pings.jsonl", "w") as fh:
        for k, u in enumerate(urls):
            c = np.asarray(truth[u])
            # even pages: every change pinged ten minutes later; odd: pings at random
            t = (c + 600.0 if k % 2 == 0
                 else rng.uniform(c.min(initial=0) if c.size else 0, c.max(initial=0) + 1,
                                  c.size))
            t = np.round(np.sort(t), 3)
            pings[u] = t
            for x in t.tolist():
                fh.write(json.dumps({"url": u, "time": x, "source": "indexnow"}) + "\n")
        fh.write(json.dumps({"url": "https://elsewhere.example/", "time": 1e9}) + "\n")
    path = tmp_path / "changes.jsonl"
    write_changes(path, truth)
    times = [t for ts in truth.values() for t in ts]
    start, stop = min(times), max(times)
    start_worker(settings)
    done = run_import(settings, str(path), "--ping-log", str(tmp_path / "pings.jsonl"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 of other URLs skipped" in done.stdout, done.stdout
    values = stored(settings, urls)
    # the worker's estimator code in-process, on the same crawls and counts
    src = SOURCES.index("indexnow")
    est = Estimation()
    records: dict[str, str | None] = dict.fromkeys(urls)
    per_url = {}
    for u in urls:
        c = np.round(np.asarray(truth[u]), 3)
        t, ch, counts = ping_history_crawls(c, pings[u], round(start, 3), round(stop, 3))
        ends = np.round(t, 3)
        taus = np.diff(np.concatenate([[round(start, 3)], ends]))
        per_url[u] = [(float(a), bool(b), float(e), int(n)) for a, b, e, n in
                      zip(taus, ch, ends, counts, strict=True)]
    for k in range(max(len(v) for v in per_url.values())):
        batch = [u for u in urls if len(per_url[u]) > k]
        obs = []
        for u in batch:
            tau, changed, end, n = per_url[u][k]
            sig = [0] * len(SOURCES)
            sig[src] = n
            obs.append(Observation(records[u], tau, tuple(sig), changed, end))
        records.update(zip(batch, est.observe(obs), strict=True))
    recall = {}
    for u in urls:
        value = values[u]
        assert value is not None, u
        got = full_estimates(estimator_part(value))
        want = full_estimates(records[u])
        assert got is not None and want is not None
        assert got.n_intervals == want.n_intervals == len(per_url[u]), u
        state = EstimatorRecord.decode(estimator_part(value) or "").state
        assert state.unknown[0] == 0.0, u  # every interval's pings are known
        assert got.change_rate_per_s == pytest.approx(want.change_rate_per_s, rel=1e-5), u
        assert got.gamma_per_s == pytest.approx(want.gamma_per_s, rel=1e-5), u
        assert got.kappa == pytest.approx(want.kappa, rel=1e-4, abs=1e-6), u
        recall[u] = got.recall[1]  # the push group: indexnow
    busy = [u for u in urls if len(truth[u]) >= 10]
    even = [recall[u] for k, u in enumerate(urls) if k % 2 == 0 and u in busy]
    odd = [recall[u] for k, u in enumerate(urls) if k % 2 == 1 and u in busy]
    assert len(even) >= 3 and len(odd) >= 3, (even, odd)
    assert min(even) > max(odd), (even, odd)
