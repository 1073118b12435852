"""A page's place in its shard's book, from its stored state and parameters: the one step
between :func:`streams.estimates.params.page_params` and
:meth:`models.decision.core.ShardBook.set_page`, taken by the scheduler for every page
event (:mod:`streams.scheduler.loading`) and by the demo's replay of a live run
(:class:`streams.testweb.expected.WorkerMirror`), so that both decide with the same book.

A page's floor due time (the longest-interval floor, :mod:`models.decision.floor`) is its
last crawl, or when it was first seen if never crawled, plus ``max_interval_s`` (0: no
floor).
"""

from __future__ import annotations

import math
from collections.abc import Hashable

from models.decision.core import ShardBook
from models.decision.hosts import HostBuckets
from models.decision.table import PageTable
from streams.estimates.params import PageParams
from streams.events.records import SOURCES
from streams.settings import Settings
from streams.store.page_record import PageState

__all__ = ["new_book", "place_page"]


def new_book(settings: Settings, key: Hashable = None) -> ShardBook:
    """An empty book as the scheduler makes one per shard: hosts' buckets at the settings'
    defaults (rate, burst, orders in flight), a page table with a column per source."""
    return ShardBook(HostBuckets(settings.default_host_crawls_per_s, settings.host_burst,
                                 settings.default_host_max_in_flight), key=key,
                     table=PageTable(n_sources=len(SOURCES)))


def place_page(book: ShardBook, url: str | int, host: str | int, state: PageState,
               params: PageParams, *, max_interval_s: float, now_s: float,
               end_flight: bool = False) -> None:
    """Set the page in ``book``, its order ended first when ``end_flight`` (ValueError,
    the book unchanged, when its parameters are not usable: NaN, or an infinite rate,
    importance or value; ``beta = inf`` and ``origin = -inf`` are the model's)."""
    cap = params.max_value()
    if (not all(math.isfinite(x) for x in (params.alpha_per_s, params.gamma_per_s,
                                           params.mu, cap))
            or math.isnan(params.origin_s) or math.isnan(params.beta_s)):
        raise ValueError(f"parameters not usable: {params.as_dict()}")
    t = book.table
    slot = t.get(url)
    first_seen = float(t.first_seen[slot]) if slot is not None else now_s
    floor_due: float | None = None
    if max_interval_s > 0:
        base = state.last_crawl_s if state.crawled else first_seen
        floor_due = base + max_interval_s
    if end_flight:
        book.end_flight(url)
    book.set_page(
        url, host, crawled=state.crawled, origin=params.origin_s,
        alpha=params.alpha_per_s, beta=params.beta_s, gamma=params.gamma_per_s,
        mu=params.mu, max_value=cap, floor_due_s=floor_due,
        first_seen_s=first_seen, last_crawl_s=state.last_crawl_s,
        delta=params.change_rate_per_s, estimated=params.estimated,
        src_beta=params.source_beta_s)
