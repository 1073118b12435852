"""The decision core: everything the scheduler decides, pure (time passed in).

One implementation serves the simulator (:mod:`models.sim`) and the streaming service
(:mod:`streams.scheduler`, which keeps only Redis, Lua and Kafka I/O):

* :mod:`models.decision.pings` - which ping moves a page's origin (paper 004 App. C);
* :mod:`models.decision.pooling` - several ping sources pooled into the value's
  ``(alpha, beta, gamma)`` (paper 004 Sec. 3 applied to the merged source);
* :mod:`models.decision.pacer` - the credit pacer that holds the budget ``R``;
* :mod:`models.decision.hosts` - per-host token buckets and the timer heap of hosts
  without a token;
* :mod:`models.decision.floor` - the longest-interval floor queue;
* :mod:`models.decision.fresh` - never-crawled pages (value ``mu/Delta``);
* :mod:`models.decision.hostindex` - crawled pages by host: the exact greedy top under
  the hosts' room (per-host bounds, hosts without room parked);
* :mod:`models.decision.core` - the merged pick over shards (:func:`~models.decision.core.choose`,
  the one Greedy rule: the simulator's Algorithm 1 picks with it too, over a book whose index
  is :class:`models.index.CrawlIndex`, the service's over :mod:`~models.decision.hostindex`).
"""
