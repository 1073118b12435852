"""The worker process: the Faust app (:mod:`.app`), its agents (:mod:`.agents`), its HTTP views
and dashboard (:mod:`.web`), metrics, the decisions ring, ``explain`` and the budget planner."""
