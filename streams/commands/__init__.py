"""Sub-commands of ``recrawl``, one module per group (see :mod:`streams.cli`)."""
