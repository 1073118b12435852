"""What the service reports about itself, below both the scheduler (:mod:`streams.scheduler`)
and the worker (:mod:`streams.worker`), which both write to it: the Prometheus metrics
(:mod:`.metrics`) and the ring of recent decisions per page (:mod:`.decisions`).  It imports
neither of them."""
