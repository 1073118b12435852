"""Scale-out on paper (sizing) and in the simulator (the budget split protocol).

    .venv/bin/python benchmarks/bench_scaleout.py            # both tables, markdown
    .venv/bin/python benchmarks/bench_scaleout.py --json     # the same as JSON

Sizing: :func:`models.sim.scaleout.size` on the measured per-worker and per-page figures
(:class:`models.sim.scaleout.Measured`, docs/benchmarks.md "One worker at 10^6 pages") for 10^7,
10^8, 10^9 pages at 10^3 and 10^4 orders/s with pings at twice the order rate
(``--ping-ratio``).  Protocol: :func:`models.sim.scaleout.simulate_split` with the real split
rule (``models.decision.budget.live``, ``ready_weights``, ``split``) and pacer; the rates are
counted over the given windows, the worst window of 1/5/60 s against ``R (L + tick) + workers``
(one order of slack per worker's pacer).  Pure and deterministic: no Redis, no Kafka.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from models.sim.scaleout import Worker, simulate_split, size, worst_window
from streams.scheduler import (
    HEARTBEAT_S,
    LOOP_HUNG_S,
    LOOP_STALL_S,
    RESPLIT_S,
    SHARD_ALIVE_S,
)

TICK = 0.1


def _workers(n: int, per: int, resplit_s: float) -> list[Worker]:
    # resplit and heartbeat phases spread over the interval (the workers start apart)
    return [Worker(i, {per * i + k: 0.0 for k in range(per)},
                   resplit_phase_s=resplit_s * i / n,
                   beat_phase_s=HEARTBEAT_S * ((i * 0.37) % 1.0)) for i in range(n)]


def scenario(name: str, *, workers: int, per: int, rate: float, duration: float,
             window: tuple[float, float], kill_at: float | None = None,
             stall: tuple[int, float, float] | None = None,
             load: tuple[int, float, float] | None = None, heartbeat: bool = True,
             alive_s: float = SHARD_ALIVE_S, rebuild_s: float = 1.0,
             announce: bool = True, resplit_s: float = RESPLIT_S,
             stall_s: float | None = LOOP_STALL_S) -> dict[str, Any]:
    ws = _workers(workers, per, resplit_s)
    if kill_at is not None:
        ws[-1].dead_at = kill_at
    if stall is not None:
        w, a, d = stall
        ws[w].stalls.append((a, a + d))
    if load is not None:  # worker w is given a new partition at t that loads for d s
        w, t, d = load
        ws[w].shards[10_000] = t + d
        # before t the partition does not exist: model it as ready only from t + d and
        # owned from the start (its entry says loading, weight 0 until then)
    r = simulate_split(ws, rate, duration, tick_s=TICK, resplit_s=resplit_s,
                       heartbeat=heartbeat, heartbeat_s=HEARTBEAT_S,
                       alive_s=alive_s, hung_s=LOOP_HUNG_S, rebuild_s=rebuild_s,
                       announce=announce, stall_s=stall_s)
    a, b = window
    # windows from `a` on: at t = 0 every worker starts at once and takes all of R until
    # it has read the others' entries (a cold start with R set; the tests set R later)
    after = r.orders[round(a / r.dt_s):]
    worst = {L: worst_window(after, r.dt_s, L) for L in (1.0, 5.0, 60.0)}
    bound = {L: rate * (L + TICK) + workers for L in worst}
    return {"scenario": name, "R": rate, "workers": workers, "partitions": workers * per,
            "heartbeat": heartbeat, "alive_s": alive_s, "announce": announce,
            "window": [a, b],
            "rate": r.rate(a, b), "ratio": r.rate(a, b) / rate,
            "worst": {str(k): v for k, v in worst.items()},
            "over_bound": [L for L in worst if worst[L] > bound[L]]}


def protocol() -> list[dict[str, Any]]:
    out = []
    now = f"heartbeat thread, {SHARD_ALIVE_S:g} s, resplit {RESPLIT_S:g} s"
    before = "before: entries by the loop, 3 s, resplit 0.5 s"
    for hb, alive, rs, ann, label in (
            (False, 3.0, 0.5, False, before),
            (True, 1.0, 0.5, False, "heartbeat thread, 1 s, resplit 0.5 s"),
            (True, 1.0, 0.5, True, "the same, ready shards announced first"),
            (True, SHARD_ALIVE_S, RESPLIT_S, True, now)):
        out.append(scenario(f"kill at 20 s ({label})", workers=3, per=2, rate=30.0,
                            duration=80.0, window=(5.0, 65.0), kill_at=20.0, heartbeat=hb,
                            alive_s=alive, resplit_s=rs, announce=ann))
    for hb, alive, rs, st, label in (
            (False, 3.0, 0.5, None, before),
            (False, 1.0, 0.5, None, "entries by the loop, 1 s"),
            (True, SHARD_ALIVE_S, RESPLIT_S, None, now + ", share kept while stalled"),
            (True, SHARD_ALIVE_S, RESPLIT_S, LOOP_STALL_S,
             now + f", share handed over after {LOOP_STALL_S:g} s")):
        out.append(scenario(f"loop stalled 2.5 s at 30 s ({label})", workers=3, per=2,
                            rate=30.0, duration=80.0, window=(5.0, 65.0),
                            stall=(1, 30.0, 2.5), heartbeat=hb, alive_s=alive, resplit_s=rs,
                            stall_s=st))
    for ann, label in ((False, "spent at once when ready"),
                       (True, "spent from the next resplit")):
        out.append(scenario(f"a shard loading for 20 s ({label})", workers=3, per=2,
                            rate=30.0, duration=80.0, window=(5.0, 65.0),
                            load=(0, 0.0, 20.0), announce=ann))
    out.append(scenario("53 workers, 212 partitions, R = 10^4, kill at 20 s (rebuild 8 s)",
                        workers=53, per=4, rate=1e4, duration=80.0, window=(5.0, 65.0),
                        kill_at=20.0, rebuild_s=8.2))
    return out


def sizing(ping_ratio: float) -> list[dict[str, Any]]:
    rows = []
    for pages in (1e7, 1e8, 1e9):
        for orders in (1e3, 1e4):
            s = size(pages, orders, ping_ratio * orders)
            rows.append({"pages": pages, "orders_per_s": orders, "pings_per_s": s.pings_per_s,
                         "workers": s.workers, "bound_by": s.bound_by,
                         "workers_by": s.workers_by, "partitions": s.partitions,
                         "rebuild_s": s.rebuild_s, "masters": s.masters,
                         "masters_bound_by": s.masters_bound_by,
                         "redis_gb": s.redis_bytes / 1e9, "table_load": s.table_load,
                         "breaks_first": s.breaks_first[:3]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ping-ratio", type=float, default=2.0, help="pings per order")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows, sims = sizing(args.ping_ratio), protocol()
    if args.json:
        print(json.dumps({"sizing": rows, "protocol": sims}, indent=1))
        return
    print("| pages | orders/s | pings/s | workers (bound by; memory/orders/pings/outcomes) "
          "| partitions (rebuild s each) | Redis masters (bound by) | Redis GB "
          "| closest to its limit |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        wb = r["workers_by"]
        print(f"| 10^{len(str(int(r['pages']))) - 1} | {r['orders_per_s']:,.0f} "
              f"| {r['pings_per_s']:,.0f} | {r['workers']} ({r['bound_by']}; "
              f"{wb['memory (RSS)']}/{wb['orders']}/{wb['pings']}/{wb['outcomes']}) "
              f"| {r['partitions']} ({r['rebuild_s']:.1f}) | {r['masters']} "
              f"({r['masters_bound_by']}) | {r['redis_gb']:.0f} "
              f"| {', '.join(r['breaks_first'])} |")
    print()
    print("| scenario | R | window (s) | rate | ratio | worst 1/5/60 s | over the bound |")
    print("|---|---|---|---|---|---|---|")
    for s in sims:
        w = s["worst"]
        print(f"| {s['scenario']} | {s['R']:g} | {s['window'][0]:g}-{s['window'][1]:g} "
              f"| {s['rate']:.2f} | {s['ratio']:.4f} | {w['1.0']}/{w['5.0']}/{w['60.0']} "
              f"| {', '.join(f'{L:g} s' for L in s['over_bound']) or 'none'} |")


if __name__ == "__main__":
    main()
