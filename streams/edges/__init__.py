"""The producer edge: everything that turns "this page changed" news into ``recrawl.pings``.

- :mod:`streams.edges.pings` — the ping record and :class:`PingProducer` (a library and
  ``recrawl ping``);
- :mod:`streams.edges.indexnow` — an IndexNow receiver (HTTP, key checks);
- :mod:`streams.edges.sitemaps` — a sitemap poller (conditional GET, safe parsing, memory
  in Redis);
- :mod:`streams.edges.websub` — a WebSub subscriber callback.
"""

from streams.edges.pings import PING_SOURCES, Ping, PingProducer, publish_pings

__all__ = ["PING_SOURCES", "Ping", "PingProducer", "publish_pings"]
