"""A host's prior sums in the store, and what an estimator record adds to them.

Each host's empirical-Bayes prior over its pages' change rates
(:mod:`models.estimators.host_prior`) is kept as the sums of the incremental EM (Neal and
Hinton 1998, Sec. 4): ``P:{host}:prior`` is a hash of ``n`` (pages counted), ``mean``
(the sum of their posterior ``E[lambda]``) and ``log`` (of their ``E[log lambda]``).  Each
page's own contribution is the ``host`` field of its estimator record
(:mod:`streams.estimates.record`: two float32 right after the record's header, the mean
negated while it is not the page's crawl ``alpha``).  The script that writes a page's
value (``streams/store/lua/apply_outcome.lua``; ``apply_page.lua`` when a page is deleted)
takes the old record's contribution out of the sums and puts the new one's in, in the same
offset-guarded step: the sums are always those of the stored records, and a redelivered
event changes neither.  The Gamma they fit is computed by the reader
(:func:`models.estimators.host_prior.host_priors`), never stored.

:func:`contribution` and :func:`swapped` are the Python twins of ``lib.lua``'s
``contribution`` and ``swap_prior`` (the memory backend and the demo's mirror use them):
the same float32 values read, the same double-precision operations in the same order.
"""

from __future__ import annotations

import math
import struct

__all__ = ["EST_ESCAPE", "EST_VERSION", "PRIOR_FIELDS", "Sums", "contribution", "swapped"]

#: an estimator record's first byte (``streams.estimates.record.VERSION``)
EST_VERSION = 0x01
#: its layout byte when two flag bytes follow (``streams.estimates.record._ESCAPE``)
EST_ESCAPE = 0xFF
#: the fields of ``P:{host}:prior``
PRIOR_FIELDS = ("n", "mean", "log")

_HOST = struct.Struct("<2f")

#: a host's prior sums ``(n, sum E[lambda], sum E[log lambda])``; ``(0, 0, 0)``: none
Sums = tuple[float, float, float]


def contribution(record: str | bytes | None) -> Sums:
    """``(count, E[lambda], E[log lambda])`` a stored estimator record adds to its host's
    sums: ``(0, 0, 0)`` for none, a record of another version, a stored mean of 0 or a
    non-finite one."""
    if not record:
        return (0.0, 0.0, 0.0)
    raw = record if isinstance(record, bytes) else record.encode("utf-8", "surrogateescape")
    if len(raw) < 2 or raw[0] != EST_VERSION:
        return (0.0, 0.0, 0.0)
    off = 4 if raw[1] == EST_ESCAPE else 2
    if len(raw) < off + _HOST.size:
        return (0.0, 0.0, 0.0)
    m, lg = _HOST.unpack_from(raw, off)
    if m == 0.0 or not (math.isfinite(m) and math.isfinite(lg)):
        return (0.0, 0.0, 0.0)
    return (1.0, abs(m), lg)


def swapped(sums: Sums, old: str | bytes | None, new: str | bytes | None) -> Sums | None:
    """The sums with ``old``'s contribution replaced by ``new``'s (None: neither has one,
    nothing to write)."""
    c0, m0, l0 = contribution(old)
    c1, m1, l1 = contribution(new)
    if c0 == 0.0 and c1 == 0.0:
        return None
    return (sums[0] + c1 - c0, sums[1] + m1 - m0, sums[2] + l1 - l0)
