"""The test web's world: what each page does, fixed before the run (and handed to the
simulator, so both see the same instance).

Drawn as in Sec. 6.1 of Busa-Fekete et al. (paper 004), in *units* of ``time_unit_s`` real
seconds: change rate ``Delta ~ Unif(delta_min, 1)`` per unit, importance
``mu ~ Unif(0, 1)``, recall ``lambda ~ Beta(0.25, 0.25)``, false-ping rate
``nu ~ Unif(0.1, 0.6)`` per unit; pings are delayed by an exponential time of mean
``delay_units`` (the paper uses a Poisson delay).  Each host announces its pings through
one channel: ``indexnow`` (POSTs to the receiver) or ``sitemap`` (``lastmod``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["CHANNELS", "PAST_PING_STREAM", "PAST_STREAM", "PageSpec", "World", "generate_world",
           "key_for_host", "past_changes", "past_pings"]

CHANNELS = ("indexnow", "sitemap")

#: the random stream of a world's past (:func:`past_changes`), apart from the world's
#: own draw and the test web's live processes
PAST_STREAM = 1
#: the random stream of the pings of a world's past (:func:`past_pings`)
PAST_PING_STREAM = 2


@dataclass(frozen=True, slots=True)
class PageSpec:
    host: str
    path: str
    importance: float
    change_rate_per_s: float
    recall: float
    false_rate_per_s: float
    delay_s: float
    channel: str

    def url(self, port: int) -> str:
        return f"http://{self.host}:{port}{self.path}"


@dataclass(frozen=True)
class World:
    seed: int
    time_unit_s: float
    pages: tuple[PageSpec, ...]

    @property
    def hosts(self) -> list[str]:
        return sorted({p.host for p in self.pages}, key=lambda h: (len(h), h))

    def host_channel(self, host: str) -> str:
        return next(p.channel for p in self.pages if p.host == host)

    def arrays(self) -> dict[str, np.ndarray]:
        """Per-page parameters as arrays (per real second), for the simulator."""
        return {
            "importance": np.array([p.importance for p in self.pages]),
            "change_rate_per_s": np.array([p.change_rate_per_s for p in self.pages]),
            "recall": np.array([p.recall for p in self.pages]),
            "false_rate_per_s": np.array([p.false_rate_per_s for p in self.pages]),
            "delay_s": np.array([p.delay_s for p in self.pages]),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "time_unit_s": self.time_unit_s,
            "pages": [asdict(p) for p in self.pages],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> World:
        return cls(
            seed=int(obj["seed"]),
            time_unit_s=float(obj["time_unit_s"]),
            pages=tuple(PageSpec(**p) for p in obj["pages"]),
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json())


def key_for_host(seed: int, host: str) -> str:
    """The host's IndexNow key (32 hex characters, deterministic per world)."""
    import hashlib

    return hashlib.sha256(f"indexnow:{seed}:{host}".encode()).hexdigest()[:32]


def generate_world(
    seed: int = 0,
    *,
    n_hosts: int = 20,
    pages_per_host: int = 20,
    time_unit_s: float = 10.0,
    delta_min: float = 0.05,
    recall_beta: tuple[float, float] = (0.25, 0.25),
    false_rate_range: tuple[float, float] = (0.1, 0.6),
    delay_units: float = 0.05,
    sitemap_share: float = 0.5,
) -> World:
    """Draw a world; host ``h{k}.test`` uses sitemaps for the first ``sitemap_share`` of
    hosts and IndexNow for the rest."""
    if n_hosts < 1 or pages_per_host < 1:
        raise ValueError("n_hosts and pages_per_host must be >= 1")
    if time_unit_s <= 0:
        raise ValueError(f"time_unit_s must be > 0, not {time_unit_s}")
    rng = np.random.default_rng(seed)
    m = n_hosts * pages_per_host
    delta = rng.uniform(delta_min, 1.0, m) / time_unit_s
    mu = rng.uniform(0.0, 1.0, m)
    lam = rng.beta(*recall_beta, m)
    nu = rng.uniform(*false_rate_range, m) / time_unit_s
    delay = np.full(m, delay_units * time_unit_s)
    n_sitemap = round(sitemap_share * n_hosts)
    pages = []
    for i in range(m):
        h = i // pages_per_host
        pages.append(
            PageSpec(
                host=f"h{h}.test",
                path=f"/p/{i % pages_per_host}",
                importance=float(mu[i]),
                change_rate_per_s=float(delta[i]),
                recall=float(lam[i]),
                false_rate_per_s=float(nu[i]),
                delay_s=float(delay[i]),
                channel="sitemap" if h < n_sitemap else "indexnow",
            )
        )
    return World(seed=seed, time_unit_s=time_unit_s, pages=tuple(pages))


def past_changes(world: World, history_s: float, seed: int | None = None) -> list[np.ndarray]:
    """Each page's change times over the ``history_s`` seconds before the run's start, in
    seconds relative to it (in ``[-history_s, 0)``, sorted): the page's live change process
    (Poisson at ``change_rate_per_s``) run backwards from the start.  A Poisson process has
    no memory, so the past and the live changes drawn from the start on are one process
    over ``[-history_s, inf)``; the page's version at the start is the number of its past
    changes.  Deterministic: the world's seed (or ``seed``) fixes it."""
    if history_s < 0 or not np.isfinite(history_s):
        raise ValueError(f"history_s must be finite and >= 0, not {history_s}")
    rng = np.random.default_rng([world.seed if seed is None else seed, PAST_STREAM])
    out = []
    for p in world.pages:
        n = rng.poisson(p.change_rate_per_s * history_s)
        out.append(np.sort(rng.uniform(-history_s, 0.0, n)))
    return out


def past_pings(world: World, past: list[np.ndarray], history_s: float, *,
               poll_interval_s: float = 1.0, flush_interval_s: float = 0.2,
               seed: int | None = None) -> list[np.ndarray]:
    """Each page's pings over the ``history_s`` seconds before the run's start: their
    arrival times at the worker, relative to the start (in ``[-history_s, 0]``, sorted), for
    the page's ``past`` changes (:func:`past_changes`), as the live test web announces
    changes and its producers deliver the pings (:func:`models.sim.live.testweb_pings`: the
    page's recall, false pings and delay, its host's sitemap polls at ``poll_interval_s``
    or IndexNow flushes at ``flush_interval_s``): the ping log a worker that had been
    watching the site would have kept.  Deterministic: the world's seed (or ``seed``)
    fixes it."""
    from models.sim.live import testweb_pings

    if len(past) != len(world.pages):
        raise ValueError(f"past has {len(past)} pages, the world {len(world.pages)}")
    rng = np.random.default_rng([world.seed if seed is None else seed, PAST_PING_STREAM])
    t = world.arrays()
    m = len(world.pages)
    cp = np.repeat(np.arange(m, dtype=np.int64), [len(c) for c in past])
    ct = (np.concatenate([np.asarray(c, dtype=np.float64) for c in past]) + history_s
          if m else np.zeros(0))
    sitemap = np.array([p.channel == "sitemap" for p in world.pages], dtype=bool)
    arrival, _emitted, page, _true = testweb_pings(
        ct, cp, t["recall"], t["false_rate_per_s"], t["delay_s"], sitemap, history_s, rng,
        poll_interval=poll_interval_s, flush_interval=flush_interval_s)
    order = np.lexsort((arrival, page))
    arrival, page = arrival[order], page[order]
    bounds = np.searchsorted(page, np.arange(m + 1))
    return [arrival[bounds[i]:bounds[i + 1]] - history_s for i in range(m)]
