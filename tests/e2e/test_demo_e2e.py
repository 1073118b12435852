"""End to end: worker (the scheduler), fetcher, test web, producers; the live
accuracy is within 3 points of the simulator's expectation for the same world.

The expectation is Algorithm 1 in ``models.sim`` given what the worker is given and learns
(change rates and ping quality learned online with the worker's own estimator code, the
demo's default) on the run's own changes, pings and order times
(``streams.testweb.expected``; docs/edges.md).
"""

from __future__ import annotations

import asyncio

import pytest

from streams.demo import DemoConfig, run_loop, simulate_run
from streams.settings import Settings
from streams.testweb.world import generate_world

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("partitions", [1, 2])
def test_live_accuracy_matches_the_simulator(
    settings: Settings, start_worker, partitions: int
) -> None:
    from infra.kafka import create_topics
    from infra.proc import free_port

    web_port = free_port()
    tag = f"p{partitions}"
    s = settings.model_copy(update={
        "web_enabled": True, "web_port": web_port, "t_delay_s": 2.0, "partitions": partitions,
        "topic_prefix": settings.topic_prefix + tag, "app_id": settings.app_id + tag,
        "key_prefix": settings.key_prefix + tag,
    })  # fmt: skip
    asyncio.run(create_topics(s.kafka_bootstrap, s.topic_names(), partitions))
    start_worker(s)
    cfg = DemoConfig(
        duration_s=60.0, warmup_s=20.0, budget_per_s=8.0, hosts=5, pages_per_host=20,
        seed=11, time_unit_s=5.0, live=False, sim_runs=0,
    )  # fmt: skip
    world = generate_world(
        cfg.seed, n_hosts=cfg.hosts, pages_per_host=cfg.pages_per_host,
        time_unit_s=cfg.time_unit_s,
    )  # fmt: skip
    summary = asyncio.run(
        run_loop(s, cfg, world, expected=(float("nan"), "-"), worker_web_port=web_port)
    )
    sim = simulate_run(world, s, cfg, summary)
    live, expected = summary["accuracy"], sim["expected_accuracy"]
    print(f"partitions {partitions}: live {live:.4f} expected {expected:.4f} "
          f"oracle {sim['expected_accuracy_oracle']:.4f}")
    assert summary["orders_per_s"] == pytest.approx(cfg.budget_per_s, rel=0.15)
    assert summary["outcomes_failed"] == 0
    assert summary["pings_indexnow"] > 0 and summary["pings_sitemap"] > 0
    assert live is not None
    assert abs(live - expected) <= 0.03, (live, expected, sim)
