"""Exceptions of :mod:`infra`. Each message tells the operator what to do."""


class InfraError(RuntimeError):
    """A local service could not be fetched, started or stopped."""


class MissingToolError(InfraError):
    """A program the stack needs is not installed; install what the message names."""


class ServiceStartError(InfraError):
    """A service did not become ready in time; read the log file the message names."""
