"""A live test web with known ground truth.

- :mod:`streams.testweb.world` — the world: hosts, pages, change rates, importance, ping
  quality (recall, false-ping rate, delay), drawn as in Sec. 6.1 of Busa-Fekete et al.;
- :mod:`streams.testweb.truth` — per-page versions and the fetcher's copy; live accuracy;
- :mod:`streams.testweb.server` — the aiohttp server (virtual hosts by ``Host`` header,
  pages, sitemaps, IndexNow key files, ``/truth``) and the change/ping processes.
"""

from streams.testweb.server import TestWeb
from streams.testweb.truth import Truth
from streams.testweb.world import PageSpec, World, generate_world

__all__ = ["PageSpec", "TestWeb", "Truth", "World", "generate_world"]
