"""Fetch, start, check and stop the real services recrawl runs on.

- :mod:`infra.kafka` -- Apache Kafka 3.9 (KRaft, one node) from Maven Central jars.
- :mod:`infra.redis` -- Debian's ``redis-server``.
- :mod:`infra.stack` -- both together, with a state file so ``recrawl infra up|status|down``
  work across processes, and process groups so nothing is left behind.

Errors::

    InfraError                  -- root; the message says what to do
    ├── MissingToolError        -- java / mvn / redis-server missing and cannot be installed
    └── ServiceStartError       -- a service did not become ready; the message names its log file
"""

from infra.errors import InfraError, MissingToolError, ServiceStartError

__all__ = ["InfraError", "MissingToolError", "ServiceStartError"]
