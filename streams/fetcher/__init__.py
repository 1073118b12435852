"""The reference fetcher: consumes ``recrawl.orders``, fetches, publishes ``recrawl.outcomes``.

- :mod:`streams.fetcher.egress` — which addresses may be contacted (:class:`EgressPolicy`),
  host-name overrides (``.test -> 127.0.0.1``) and the guarded resolver;
- :mod:`streams.fetcher.client` — :class:`SafeClient`: one HTTP GET with limits (timeouts,
  redirects, body size), every hop checked against the policy;
- :mod:`streams.fetcher.service` — :class:`FetcherService`: the Kafka consumer-group loop,
  per-host concurrency, content digests in Redis, outcomes.

Errors: :class:`~streams.fetcher.egress.RefusedTarget` (the policy said no).
"""

from streams.fetcher.client import FetchLimits, FetchResult, SafeClient
from streams.fetcher.egress import EgressPolicy, RefusedTarget
from streams.fetcher.service import DigestStore, FetcherService, outcome_for

__all__ = [
    "DigestStore",
    "EgressPolicy",
    "FetchLimits",
    "FetchResult",
    "FetcherService",
    "RefusedTarget",
    "SafeClient",
    "outcome_for",
]
