"""The worker process: the Faust app (:mod:`.app`), its agents (:mod:`.agents`), its HTTP views
and dashboard (:mod:`.web`), ``explain`` and the budget planner; its metrics and decisions
ring are :mod:`streams.telemetry`'s (shared with the scheduler)."""
