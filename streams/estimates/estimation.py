"""Per-page estimators in the stream: crawl intervals in, ``(alpha, beta_s, gamma)`` out.

Each page with at least one observed crawl interval has an :class:`EstimatorRecord` appended
to its page record in ``P:{host}:pages`` (``streams/store/redis_store.py``): the
:class:`models.estimators.SignalEstimator` state plus the converged ``alpha``, its standard
error and ``kappa`` (what the crawl value needs that only the MLE solve gives), so the
scheduler rebuilds a shard without re-solving any MLE (``batch_result`` over 10^6 pages
takes 24-55 s here, ``docs/benchmarks.md "Design decisions"``).

Estimator record (version 3, little-endian, :data:`RECORD_HEAD3` + ring): a first byte
``0x80 + ring length`` (``0x80``-``0x8F``, never the first byte of a text record nor of a page
record, nor of a UTF-8 character); ``n_intervals`` uint32; float32 ``alpha``, ``alpha_se``,
``kappa[3]`` (the estimates), ``theta[4]``, ``lin[4]``, ``totals[4]``, ``quad_a[10]``,
``rep[2]`` (the state), then the ring, per interval ``tau`` float32 and its signal count per
group uint16:
121 + 10 x ring length bytes.  ``lin = unchanged - quad_b``: the state's sums over unchanged
intervals and the linear term of its quadratic expansion enter the negative log-posterior
only as that difference (``models.estimators._numeric.objective``: ``(lin - b) . theta``;
``SignalEstimator``'s scalar path the same), and both decay by the same factor, so one sum
is the same state: read back as ``unchanged = lin``, ``quad_b = 0``.
The ring's weights are not kept: without a half-life every weight is 1. Version 4 (``0xA0 +
ring length``, :data:`RECORD_HEAD4` + ring, 73 + 10 x ring length bytes) is version 3
without ``quad_a``, written while ``quad_a`` is zero as float32 (every byte): until a
changed interval first leaves the ring (``models.estimators.batch.batch_update``) there is
no quadratic summary, and a page that never changed, or changed at most :data:`STREAM_RING`
times, keeps it so; it reads back as the version 3 record of the same state (``quad_a``
zero), so the 40 bytes go without losing anything.  Version 5 (first byte
``0xC0 + 21 quad + 3 kept + ring``, 0xC0-0xE9) is a version 3 (``quad`` 1) or 4 (``quad``
0) record of a ring of at most 2 without the slots of the source groups whose every slot
is zero to the bit: a group's slots are its ``lin`` and ``totals`` entries, the ``quad_a``
entries of its row and column, and its count in each ring entry, all sums of that group's
signal counts, so all zero until the page's first signal of that group (a page pinged by
one kind of source only, or never pinged, keeps one group or none).  ``kept`` has bit g set
when group g's slots are stored (never all three: that record is version 3 or 4 as it is).
A group left out saves 8 + 2 x ring bytes, and in a version 3 the ``quad_a`` entries of its
row and column (a sitemap-only page after its third change: 141 -> 89 bytes; the bench's
pages, pinged by sitemaps and push sources: 141 -> 113).  The bytes kept are the version 3 or
4 record's at those positions, so it reads back as that record, byte for byte
(:func:`_unpack5`; on arrays in :meth:`Estimation.states_of` and :func:`record_heads`, what
the rebuild reads), and nothing is lost.

Version 6 (the default, first byte ``0xEA``, then a layout byte) leaves out more of a
version 3 or 4 record of a ring of at most 2, again only bytes it can put back exactly:

* ``theta``, the running estimate (warm start of the next solve, and the point at which
  a changed interval leaving the ring is expanded, ``models.estimators.signals``).  The
  model refreshes it by a Newton step at each eviction; the stream solves the posterior
  mode at every update anyway (for ``alpha``, ``kappa``), and keeps that mode as
  ``theta`` (:meth:`Estimation.observe`, :meth:`Estimation.observe_states`), so an
  interval leaving the ring is expanded one Newton step from the last update's mode,
  not from the last eviction's point: as close to the full-data MAP or slightly closer
  (``benchmarks/bench_running_estimate.py``, ``docs/benchmarks.md``).  So ``theta`` is
  the float32 ``alpha`` and ``kappa`` to the bit, and is read back from them;
* the slots of the groups with no signal, as version 5 (all three groups may be kept);
* if ``narrow``: the high two bytes of ``n_intervals`` (below 65,536) and the high byte
  of each ring count (below 256), all zero;
* the ``low`` (0-2) lowest bytes of each group's ``totals`` entry, all zero (a float32
  integer count below 256 has its two low bytes zero, below 65,536 its lowest).

The layout byte: bits 0-1 the shape (0-2: version 4 of that ring length; 3: version 3 of
a ring of 2: a quadratic summary only exists once a changed interval has left a full
ring), bits 2-4 ``kept`` (as version 5), bit 5 ``narrow``, bits 6-7 ``low`` (3 is no
layout: an unreadable record).  A record with another shape, or whose ``theta`` is not its
estimates (a state not from the stream), is written as version 5.  A three-group page
with a quadratic summary: 141 -> 112 bytes; one group, 89 -> 68 (:func:`_pack6`,
:func:`_unpack6`).  A worker reads every version written before its
own, none written after: a worker older than version 4 takes a version 4, 5 or 6 record for
an unreadable one and starts that page's estimator again from the prior; one of version 4
or 5 (c77529a on) keeps a later version's record as it is (:func:`newer_record`) and skips
that page's estimator.  So a rolling upgrade writes the version the old workers read
(``RECRAWL_ESTIMATOR_RECORD_VERSION=3``, ``4`` or ``5``, ``Estimation(record_version=...)``)
until every worker runs this code, then 6 (the default).
This code does not restart a record of a version it does not know
(:func:`newer_record`: a first byte neither ASCII nor a known version's; the next version
takes one of 0xEB-0xFF): it keeps it as it is, and that page's outcomes update only the page
record until a worker that reads it comes (counted ``estimators.newer``). A record that neither
version 3 nor 4 can hold exactly is written in the older layouts, read as ever: version 2 (``0x90 +
ring length``, 137 + 14 x ring length bytes: ``unchanged`` and ``quad_b`` apart, a float32
weight after each ring entry's counts) when a ring weight is not 1
(``estimator_half_life_s`` set); version 1 (``0xB0 + ring length``, every ring value
float32, 137 + 20 x ring length bytes) when a ring count is not a whole number of at most
65,535 (more signals of one group in one crawl interval).
float32 for all:
these are estimates whose standard errors are far above float32's 6e-8 relative rounding
(``SignalState.to_bytes`` already keeps theta, the ring and the quadratic in float32; the
float64 ``unchanged`` and ``totals`` sums lose at most 6e-8 relative, a crawl interval of a
second in 190 days of observed time).  Not stored, derived when read (vectorised on a
rebuild): ``gamma_g = totals_g / max(1 s, totals_0)`` (as ``_estimates_from``),
``Delta``, precision and recall (``models.estimators._numeric.derive``, paper 004 Sec. 3);
``end_s`` is the page's ``last_crawl`` (the outcome script writes both at once).  The
other standard errors are only shown by ``recrawl explain``, which solves that one page's
state again (:func:`full_estimates`).  The stream's ring holds :data:`STREAM_RING` changed
intervals (the model's default for 3 sources is 5; older ones are in the quadratic
expansion, as with any capacity: ``tests/integration/test_estimation.py`` compares the two).
The old text record ``"<estimates>|<base64 SignalState>"`` (kept in ``P:{host}:est`` before
version 1) is still read.

Only the outcomes agent writes a record, in the outcome's offset-guarded Lua step with a
compare-and-set on the page value and the old record (``streams/store/redis_store.py``), so
redelivery never applies an observation twice.

Source groups
-------------
``SignalEstimator`` takes at most 3 sources; recrawl has 5.  They are grouped by how a
signal is produced, which is also how alike their precision and recall should be:

* ``sitemap`` - sitemap ``lastmod`` (polled, often stale or bulk-touched);
* ``push``    - IndexNow and WebSub (the publisher pushes on an edit);
* ``cdn``     - CDN cache hints and ``other`` (infrastructure-side, noisy).

A page's signal counts are summed per group; every source of a group shares the group's
``beta`` (``tau_eff`` adds ``beta_g`` per signal of any source in group ``g``).

Parameters for the crawl value
------------------------------
The value function (Theorem 1 of paper 004) has one signal source; with several we use
``alpha`` (changes no source signals), ``gamma = sum_g gamma_g`` (all signals observed) and
``beta = ln(gamma/nu)/alpha`` with ``nu = sum_g gamma_g exp(-alpha beta_g)``: Sec. 3 of
paper 004 applied to the merged source (:func:`models.decision.pooling.pooled_beta`, the
same rule as the simulator; the plain mean of ``beta_g`` while ``gamma = 0``).  ``alpha``
may be taken at an upper quantile of its posterior (``settings.estimate_quantile``,
:func:`conservative_change_rate` of paper 003 Sec. 5.3) while the estimate converges;
``kappa_g = alpha*beta_g`` is kept, so a signal's evidence does not change with the quantile.

A crawl whose outcome says ``changed: null`` (the fetcher's first fetch of a URL: nothing to
compare with) is not an observation; the next interval starts at it, because the fetcher
compares the next fetch with that one.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from models.decision.pooling import pooled_beta
from models.estimators import (
    BatchEstimate,
    BatchSignalState,
    CrawlInterval,
    SignalEstimator,
    SignalState,
    batch_alpha_kappa,
    batch_from_bytes,
    batch_result,
    batch_update,
    conservative_change_rate,
    states_to_batch,
    update_many,
)
from streams.events.records import SOURCES

__all__ = [
    "GROUPS",
    "GROUP_NAMES",
    "GROUP_OF",
    "HEAD_PREFIX",
    "N_GROUPS",
    "RECORD_HEAD",
    "RECORD_HEAD3",
    "RECORD_VERSION",
    "STREAM_RING",
    "Estimates",
    "Estimation",
    "EstimatorRecord",
    "Observation",
    "estimates_of",
    "full_estimates",
    "gamma_from_totals",
    "group_counts",
    "newer_record",
    "record_heads",
    "record_sizes",
    "value_parameters",
]

#: Estimator source groups (see the module docstring): name -> recrawl sources.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sitemap", ("sitemap",)),
    ("push", ("indexnow", "websub")),
    ("cdn", ("cdn", "other")),
)
GROUP_NAMES: tuple[str, ...] = tuple(g for g, _ in GROUPS)
#: For each recrawl source (in ``SOURCES`` order), the index of its group.
GROUP_OF: tuple[int, ...] = tuple(
    next(i for i, (_, members) in enumerate(GROUPS) if s in members) for s in SOURCES
)
N_GROUPS = len(GROUPS)
#: ``signals (M, sources) @ _GROUP_SUM`` = per-group sums (:func:`group_counts` on arrays)
_GROUP_SUM = np.array([[1.0 if GROUP_OF[s] == g else 0.0 for g in range(N_GROUPS)]
                       for s in range(len(SOURCES))])
_D = 1 + N_GROUPS
_NQ = _D * (_D + 1) // 2

#: changed intervals the stream's estimator keeps exactly (module docstring)
STREAM_RING = 2
#: the newest estimator record version, written unless told to write 3, 4 or 5 (module
#: docstring)
RECORD_VERSION = 6
#: versions 1 and 2: first byte, n_intervals, alpha, alpha_se, kappa, theta, unchanged,
#: totals, quad_b, quad_a (the ring follows)
RECORD_HEAD = struct.Struct(f"<BI{2 + N_GROUPS}f{4 * _D + _NQ + 2}f")
#: version 3: first byte, n_intervals, alpha, alpha_se, kappa, theta, lin, totals, quad_a
RECORD_HEAD3 = struct.Struct(f"<BI{2 + N_GROUPS}f{3 * _D + _NQ + 2}f")
#: version 4: version 3 without ``quad_a`` (no changed interval has left the ring yet)
RECORD_HEAD4 = struct.Struct(f"<BI{2 + N_GROUPS}f{3 * _D}f")
#: the bytes every version starts with, the same fields at the same offsets (tag through
#: totals; versions 3 and 4 keep ``lin`` where the others keep ``unchanged``): what a
#: rebuild reads
HEAD_PREFIX = np.dtype([("tag", "u1"), ("n", "<u4"), ("alpha", "<f4"), ("alpha_se", "<f4"),
                        ("kappa", "<f4", (N_GROUPS,)), ("theta", "<f4", (_D,)),
                        ("lin", "<f4", (_D,)), ("totals", "<f4", (_D,))])
#: a ring entry: version 1 (tau, n_1..n_G, weight) all float32; version 2 the counts uint16;
#: version 3 (tau, n_1..n_G) without the weight
_RING_ENTRY = 4 * (_D + 1)
_RING_ENTRY2 = 8 + 2 * N_GROUPS
_RING_ENTRY3 = 4 + 2 * N_GROUPS
_RING2 = struct.Struct(f"<f{N_GROUPS}Hf")
_RING3 = struct.Struct(f"<f{N_GROUPS}H")
#: first bytes: ``_TAG4``, ``_TAG3``, ``_TAG2``, ``_TAG`` + ring length (versions 4, 3, 2,
#: 1); the ranges are UTF-8 continuation bytes, never a character's first byte, so a record
#: read through a ``surrogateescape`` client starts with a surrogate; version 5's
#: (0xC0-0xE9) are lead bytes (0xC2 0x80 is U+0080), so a first byte is always read from
#: the character's bytes, never its code point (:func:`_is_binary`, :func:`newer_record`).
#: 0xA1 is also the page record's first byte: an estimator record never starts a stored
#: value (it follows the page record, or is a legacy ``est`` value, written before version
#: 4), so the two are never told apart by it.
_TAG = 0xB0
_TAG2 = 0x90
_TAG3 = 0x80
_TAG4 = 0xA0
#: per version: (first byte of ring length 0, head bytes, bytes per ring entry)
_LAYOUTS = {1: (_TAG, RECORD_HEAD.size, _RING_ENTRY),
            2: (_TAG2, RECORD_HEAD.size, _RING_ENTRY2),
            3: (_TAG3, RECORD_HEAD3.size, _RING_ENTRY3),
            4: (_TAG4, RECORD_HEAD4.size, _RING_ENTRY3)}
#: ``quad_a`` as float32 bytes when no interval has left the ring (version 4: not stored)
_NO_QUAD = bytes(4 * _NQ + 8)
#: the most a version 2 ring count holds (an interval with more signals of one group is
#: written as version 1)
_COUNT_MAX = 0xFFFF
#: version 5 (module docstring): a version 3 or 4 record of a ring of at most
#: ``_RING5_MAX`` without the slots of the groups whose every slot is zero; first byte
#: ``_TAG5 + _PER_QUAD * quad + 3 * kept + ring`` (``quad``: 1 from version 3, 0 from 4;
#: ``kept``: bit g set when group g's slots are stored, never all groups), 0xC0-0xE9;
#: 0xEA is version 6's, 0xEB-0xFF are left to later versions (:func:`newer_record`)
_TAG5 = 0xC0
_RING5_MAX = 2
_ALL_GROUPS = (1 << N_GROUPS) - 1
_PER_QUAD = (_RING5_MAX + 1) * _ALL_GROUPS
_TAG5_LAST = _TAG5 + 2 * _PER_QUAD - 1


def _tag5(quad: bool, kept: int, ring: int) -> int:
    return _TAG5 + _PER_QUAD * int(quad) + (_RING5_MAX + 1) * kept + ring


@functools.cache
def _group_slots(quad: bool, ring: int) -> tuple[npt.NDArray[np.intp], ...]:
    """Per group, the byte positions of its slots in a version 3 (``quad``) or 4 record of a
    ring of ``ring``: its ``lin`` and ``totals`` entries, the ``quad_a`` entries of its row
    and column, its count in each ring entry."""
    dt = _record_dtype(ring, 3 if quad else 4)
    fields: Any = dt.fields
    iu = np.triu_indices(_D)
    out = []
    for g in range(N_GROUPS):
        j = 1 + g
        pos = [fields[name][1] + 4 * j + b for name in ("lin", "totals") for b in range(4)]
        if quad:
            base = fields["quad_a"][1]
            pos += [base + 4 * e + b for e, (r, c) in enumerate(zip(*iu, strict=True))
                    if j in (r, c) for b in range(4)]
        if ring:
            entry = fields["ring"][0].base
            base = fields["ring"][1] + entry.fields["n"][1] + 2 * g
            pos += [base + r * entry.itemsize + b for r in range(ring) for b in range(2)]
        out.append(np.array(sorted(pos), dtype=np.intp))
    return tuple(out)


@functools.cache
def _kept5(quad: bool, kept: int, ring: int) -> npt.NDArray[np.intp]:
    """The byte positions of a version 3 (``quad``) or 4 record that its version 5 record
    keeps (its first byte, then every slot but those of the groups not in ``kept``)."""
    size = _record_dtype(ring, 3 if quad else 4).itemsize
    drop = np.zeros(size, dtype=bool)
    for g, pos in enumerate(_group_slots(quad, ring)):
        if not kept >> g & 1:
            drop[pos] = True
    return np.flatnonzero(~drop)


def _of_tag5(first: int) -> tuple[bool, int, int]:
    """``(quad, kept, ring)`` of a version 5 first byte."""
    q, rest = divmod(first - _TAG5, _PER_QUAD)
    kept, ring = divmod(rest, _RING5_MAX + 1)
    return bool(q), kept, ring


def _pack5(mat: npt.NDArray[np.uint8], version: int, ring: int) -> list[bytes]:
    """Version 5 of version 3 or 4 records (rows of ``mat``, one ring length): each without
    the slots of its groups whose every slot is zero; a record with no such group (or a
    ring longer than version 5 holds) as it is."""
    n = mat.shape[0]
    if ring > _RING5_MAX or not n:
        return [bytes(row) for row in mat]
    quad = version == 3
    kept = np.zeros(n, dtype=np.int64)
    for g, pos in enumerate(_group_slots(quad, ring)):
        kept |= (mat[:, pos] != 0).any(axis=1).astype(np.int64) << g
    out: list[bytes] = [b""] * n
    for k in np.unique(kept).tolist():
        rows = np.flatnonzero(kept == k)
        if k == _ALL_GROUPS:
            sub = mat[rows]
        else:
            sub = mat[np.ix_(rows, _kept5(quad, k, ring))]
            sub[:, 0] = _tag5(quad, k, ring)
        buf, size = sub.tobytes(), sub.shape[1]
        for j, row in enumerate(rows.tolist()):
            out[row] = buf[j * size : (j + 1) * size]
    return out


def _unpack5(mat: npt.NDArray[np.uint8], first: int) -> npt.NDArray[np.uint8]:
    """Version 5 records of one first byte (rows of ``mat``) as the version 3 or 4 records
    they were (the left-out slots zero: every byte of them was)."""
    quad, kept, ring = _of_tag5(first)
    full = np.zeros((mat.shape[0], _record_dtype(ring, 3 if quad else 4).itemsize),
                    dtype=np.uint8)
    full[:, _kept5(quad, kept, ring)] = mat
    full[:, 0] = (_TAG3 if quad else _TAG4) + ring
    return full


#: version 6 (module docstring): first byte ``_TAG6``, then a layout byte (``shape`` in bits
#: 0-1: 0-2 a version 4 record of that ring length, 3 a version 3 record of a ring of
#: ``_RING5_MAX``; ``kept`` in bits 2-4, as version 5's, all three groups allowed;
#: ``narrow`` in bit 5; ``low`` in bits 6-7, 0-2), then the version 3 or 4 record's bytes
#: without its first byte, ``theta`` (equal to ``alpha`` and ``kappa``: the stream keeps the
#: mode as its running estimate), the slots of the groups not kept, if ``narrow`` the high
#: two bytes of ``n_intervals`` and the high byte of every ring count, and the ``low`` low
#: bytes of every group's ``totals`` entry (all zero, every byte left out)
_TAG6 = 0xEA
_SHAPE6 = ((False, 0), (False, 1), (False, 2), (True, _RING5_MAX))


def _layout6(second: int) -> tuple[bool, int, int, bool, int] | None:
    """``(quad, ring, kept, narrow, low)`` of a version 6 layout byte (None: not one)."""
    low = second >> 6
    if low > 2:
        return None
    quad, ring = _SHAPE6[second & 3]
    return quad, ring, second >> 2 & _ALL_GROUPS, bool(second >> 5 & 1), low


@functools.cache
def _slots6(quad: bool, ring: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp],
                                           npt.NDArray[np.intp], tuple[npt.NDArray[np.intp],
                                                                       ...]]:
    """Byte positions in a version 3 (``quad``) or 4 record of a ring of ``ring``:
    ``theta``'s, those it equals (``alpha``'s, then ``kappa``'s), the ``narrow`` ones (the
    high two bytes of ``n_intervals``, each ring count's high byte) and, per ``low`` byte
    (first the lowest), that byte of every group's ``totals`` entry."""
    fields: Any = _record_dtype(ring, 3 if quad else 4).fields
    theta = fields["theta"][1] + np.arange(4 * _D)
    src = np.concatenate([fields["alpha"][1] + np.arange(4),
                          fields["kappa"][1] + np.arange(4 * N_GROUPS)])
    narrow = [fields["n_intervals"][1] + 2, fields["n_intervals"][1] + 3]
    if ring:
        entry = fields["ring"][0].base
        base = fields["ring"][1] + entry.fields["n"][1]
        narrow += [base + r * entry.itemsize + 2 * g + 1 for r in range(ring)
                   for g in range(N_GROUPS)]
    totals = fields["totals"][1]
    low = tuple(np.array([totals + 4 * (1 + g) + b for g in range(N_GROUPS)], dtype=np.intp)
                for b in range(2))
    return theta, src, np.array(sorted(narrow), dtype=np.intp), low


@functools.cache
def _kept6(second: int) -> npt.NDArray[np.intp]:
    """The byte positions of a version 3 or 4 record that its version 6 record of layout
    byte ``second`` keeps, in order (after the two bytes of its own)."""
    layout = _layout6(second)
    assert layout is not None
    quad, ring, kept, narrow, low = layout
    drop = np.zeros(_record_dtype(ring, 3 if quad else 4).itemsize, dtype=bool)
    drop[0] = True
    for g, pos in enumerate(_group_slots(quad, ring)):
        if not kept >> g & 1:
            drop[pos] = True
    theta, _, narrow_pos, low_pos = _slots6(quad, ring)
    drop[theta] = True
    if narrow:
        drop[narrow_pos] = True
    for b in range(low):
        drop[low_pos[b]] = True
    return np.flatnonzero(~drop)


def _pack6(mat: npt.NDArray[np.uint8], version: int, ring: int
           ) -> list[bytes | None]:
    """Version 6 of version 3 or 4 records (rows of ``mat``, one ring length); None for a
    record version 6 does not hold (its ``theta`` not its estimates, or its shape)."""
    n = mat.shape[0]
    quad = version == 3
    out: list[bytes | None] = [None] * n
    if not n or (quad, ring) not in _SHAPE6:
        return out
    theta, src, narrow_pos, low_pos = _slots6(quad, ring)
    fits = (mat[:, theta] == mat[:, src]).all(axis=1)
    second = np.full(n, _SHAPE6.index((quad, ring)), dtype=np.int64)
    for g, pos in enumerate(_group_slots(quad, ring)):
        second |= (mat[:, pos] != 0).any(axis=1).astype(np.int64) << (2 + g)
    second |= (mat[:, narrow_pos] == 0).all(axis=1).astype(np.int64) << 5
    low1 = (mat[:, low_pos[0]] == 0).all(axis=1)
    low2 = low1 & (mat[:, low_pos[1]] == 0).all(axis=1)
    second |= (low1.astype(np.int64) + low2) << 6
    for s in np.unique(second[fits]).tolist():
        rows = np.flatnonzero(fits & (second == s))
        keep = _kept6(s)
        sub = np.empty((rows.size, 2 + keep.size), dtype=np.uint8)
        sub[:, 0], sub[:, 1] = _TAG6, s
        sub[:, 2:] = mat[np.ix_(rows, keep)]
        buf, size = sub.tobytes(), sub.shape[1]
        for j, row in enumerate(rows.tolist()):
            out[row] = buf[j * size : (j + 1) * size]
    return out


def _unpack6(mat: npt.NDArray[np.uint8], second: int) -> npt.NDArray[np.uint8]:
    """Version 6 records of one layout byte (rows of ``mat``) as the version 3 or 4 records
    they were (``theta`` from ``alpha`` and ``kappa``, the other bytes left out zero)."""
    layout = _layout6(second)
    assert layout is not None
    quad, ring = layout[:2]
    full = np.zeros((mat.shape[0], _record_dtype(ring, 3 if quad else 4).itemsize),
                    dtype=np.uint8)
    full[:, _kept6(second)] = mat[:, 2:]
    theta, src = _slots6(quad, ring)[:2]
    full[:, theta] = full[:, src]
    full[:, 0] = (_TAG3 if quad else _TAG4) + ring
    return full


def _packed(mat: npt.NDArray[np.uint8], version: int, ring: int, newest: int
            ) -> list[bytes]:
    """Version 3 or 4 records (rows of ``mat``, one ring length) as the newest version up to
    ``newest`` that holds each: 6, else 5 (:func:`_pack5`: a record it does not shorten as
    it is)."""
    out: list[bytes | None] = (_pack6(mat, version, ring) if newest >= 6
                               else [None] * mat.shape[0])
    rest = [i for i, r in enumerate(out) if r is None]
    if rest and newest >= 5:
        for i, r in zip(rest, _pack5(mat[rest], version, ring), strict=True):
            out[i] = r
    elif rest:
        for i in rest:
            out[i] = bytes(mat[i])
    return [r or b"" for r in out]


def _expanded(raw: bytes) -> bytes:
    """A binary record of version 5 or 6 (of the size its first bytes name: the caller
    checks) as the version 3 or 4 record it was; others as they are."""
    if _TAG5 <= raw[0] <= _TAG5_LAST:
        return _unpack5(np.frombuffer(raw, np.uint8)[None, :], raw[0]).tobytes()
    if raw[0] == _TAG6:
        return _unpack6(np.frombuffer(raw, np.uint8)[None, :], raw[1]).tobytes()
    return raw


def _version_of(first: int) -> int:
    """The record version a first byte names (0: not a binary estimator record)."""
    if _TAG5 <= first <= _TAG5_LAST:
        return 5
    if first == _TAG6:
        return 6
    for version, (tag, _, _) in _LAYOUTS.items():
        if tag <= first <= tag + 15:
            return version
    return 0


def _ring_of(raw: bytes) -> tuple[int, int, int]:
    """(version, ring length, expected bytes) of a binary estimator record, from its first
    byte (module docstring)."""
    version = _version_of(raw[0])
    if version == 5:
        quad, kept, ring = _of_tag5(raw[0])
        return 5, ring, _kept5(quad, kept, ring).size
    if version == 6:  # the size from the layout byte (-1: none, or not a layout)
        layout = _layout6(raw[1]) if len(raw) > 1 else None
        if layout is None:
            return 6, 0, -1
        return 6, layout[1], 2 + _kept6(raw[1]).size
    tag, head, entry = _LAYOUTS[version]
    return version, raw[0] - tag, head + (raw[0] - tag) * entry


@functools.cache
def _sizes_by_first() -> npt.NDArray[np.int64]:
    """The bytes of a binary estimator record by its first two bytes (``256 * first +
    second``; -1: not one)."""
    out = np.full(256 * 256, -1, dtype=np.int64)
    for first in range(256):
        if _version_of(first):
            for second in range(256):
                out[256 * first + second] = _ring_of(bytes((first, second)))[2]
    return out


def record_sizes(first: npt.NDArray[Any], second: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """The bytes of binary estimator records by their first two bytes (-1: not one), on
    arrays."""
    key = np.asarray(first).astype(np.int64) % 256 * 256 + np.asarray(second).astype(
        np.int64) % 256
    out: npt.NDArray[np.int64] = _sizes_by_first()[key]
    return out


def record_heads(mat: npt.NDArray[np.uint8]) -> npt.NDArray[Any]:
    """The :data:`HEAD_PREFIX` fields of binary estimator records of one size, the rows of
    ``mat`` (each of the size its first bytes name: the caller checks), version 5 and 6
    records read as the version 3 or 4 records they were."""
    heads = np.zeros(mat.shape[0], dtype=HEAD_PREFIX)
    first = mat[:, 0] if mat.size else np.zeros(0, dtype=np.uint8)
    five = (first >= _TAG5) & (first <= _TAG5_LAST)
    six = first == _TAG6
    n = HEAD_PREFIX.itemsize
    rows = np.flatnonzero(~five & ~six)
    if rows.size:
        heads[rows] = np.ascontiguousarray(mat[rows, :n]).view(HEAD_PREFIX)[:, 0]
    for tag in np.unique(first[five]).tolist():
        rows = np.flatnonzero(first == tag)
        heads[rows] = np.ascontiguousarray(_unpack5(mat[rows], tag)[:, :n]).view(
            HEAD_PREFIX)[:, 0]
    for second in np.unique(mat[six, 1]).tolist() if six.any() else []:
        rows = np.flatnonzero(six & (mat[:, 1] == second))
        heads[rows] = np.ascontiguousarray(_unpack6(mat[rows], second)[:, :n]).view(
            HEAD_PREFIX)[:, 0]
    return heads


def _record_dtype(ring_len: int, version: int = 3) -> np.dtype:
    """A record of ``version`` with a ring of ``ring_len`` as one packed numpy dtype (the
    same bytes: ``struct``'s ``<`` has no padding), for reading and writing on arrays."""
    g, d = N_GROUPS, _D
    if version in (3, 4):
        fields: list[Any] = [
            ("tag", "u1"), ("n_intervals", "<u4"), ("alpha", "<f4"), ("alpha_se", "<f4"),
            ("kappa", "<f4", (g,)), ("theta", "<f4", (d,)), ("lin", "<f4", (d,)),
            ("totals", "<f4", (d,)),
        ]
        if version == 3:
            fields += [("quad_a", "<f4", (_NQ,)), ("rep", "<f4", (2,))]
    else:
        fields = [
            ("tag", "u1"), ("n_intervals", "<u4"), ("alpha", "<f4"), ("alpha_se", "<f4"),
            ("kappa", "<f4", (g,)), ("theta", "<f4", (d,)), ("unchanged", "<f4", (d,)),
            ("totals", "<f4", (d,)), ("quad_b", "<f4", (d,)), ("quad_a", "<f4", (_NQ,)),
            ("rep", "<f4", (2,)),
        ]
    if ring_len and version == 1:
        fields.append(("ring", "<f4", (ring_len, d + 1)))
    elif ring_len and version == 2:
        entry = np.dtype([("tau", "<f4"), ("n", "<u2", (g,)), ("w", "<f4")])
        fields.append(("ring", entry, (ring_len,)))
    elif ring_len:
        fields.append(("ring", np.dtype([("tau", "<f4"), ("n", "<u2", (g,))]), (ring_len,)))
    return np.dtype(fields)


def _versions(batch: BatchSignalState, newest: int = RECORD_VERSION) -> npt.NDArray[np.int64]:
    """Per page, the record version that holds its state exactly (module docstring): 1 if a
    count of its ring's intervals is not a whole number a uint16 holds, else 2 if a ring
    weight is not 1, else 4 if ``quad_a`` is zero as float32 (every byte) and ``newest`` is
    4, else 3."""
    n = batch.ring[..., 1:-1]
    ok = ((n >= 0.0) & (n <= _COUNT_MAX) & (n == np.floor(n))).all(axis=2)
    one = batch.ring[..., -1] == 1.0
    k = batch.ring.shape[1]
    used = (np.arange(k)[None, :] - batch.ring_pos[:, None]) % max(k, 1) < batch.ring_len[:, None]
    fit = (ok | ~used).all(axis=1)
    ones = (one | ~used).all(axis=1)
    iu = np.triu_indices(batch.quad_a.shape[1])
    no_quad = ((batch.quad_a[:, iu[0], iu[1]].astype("<f4").view("<u4") == 0).all(axis=1)
               & (batch.rep.astype("<f4").view("<u4") == 0).all(axis=1) & (newest >= 4))
    out: npt.NDArray[np.int64] = np.where(fit, np.where(ones, np.where(no_quad, 4, 3), 2), 1)
    return out


def group_counts(signals: Sequence[int]) -> tuple[float, ...]:
    """Per-source signal counts (``SOURCES`` order) summed per group."""
    out = [0.0] * N_GROUPS
    for s, n in enumerate(signals):
        out[GROUP_OF[s]] += n
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Estimates:
    """What the crawl value needs from a page's estimator, with standard errors."""

    alpha_per_s: float
    alpha_se_per_s: float
    change_rate_per_s: float
    change_rate_se_per_s: float
    gamma_per_s: tuple[float, ...]  # per group
    kappa: tuple[float, ...]  # per group
    precision: tuple[float, ...]
    precision_se: tuple[float, ...]
    recall: tuple[float, ...]
    recall_se: tuple[float, ...]
    n_intervals: int

    def encode(self) -> str:
        nums = (self.alpha_per_s, self.alpha_se_per_s, self.change_rate_per_s,
                self.change_rate_se_per_s, *self.gamma_per_s, *self.kappa, *self.precision,
                *self.precision_se, *self.recall, *self.recall_se)
        return ",".join(f"{x:.6g}" for x in nums) + f",{self.n_intervals}"

    @classmethod
    def decode(cls, text: str) -> Estimates:
        v = text.split(",")
        if len(v) != 4 + 6 * N_GROUPS + 1:
            raise ValueError(f"estimates: expected {4 + 6 * N_GROUPS + 1} fields, got {len(v)}")
        f = [float(x) for x in v[:-1]]
        g = N_GROUPS

        def grp(i: int) -> tuple[float, ...]:
            return tuple(f[4 + i * g : 4 + (i + 1) * g])

        return cls(f[0], f[1], f[2], f[3], grp(0), grp(1), grp(2), grp(3), grp(4), grp(5),
                   int(v[-1]))


def _is_binary(record: str | bytes) -> bool:
    first = record[:1]
    if not first:
        return False
    # a str: read through a surrogateescape client (a version 5 first byte and the bytes
    # after it may decode as one character, so the character's bytes, not its code point)
    return _version_of(_raw(first)[0]) > 0


def _raw(record: str | bytes) -> bytes:
    return record if isinstance(record, bytes) else record.encode("utf-8", "surrogateescape")


def newer_record(record: str | bytes | None) -> bool:
    """Whether ``record`` is an estimator record of a version this code does not know (a
    later one): a first byte that is neither ASCII (the old text record) nor a known
    version's.  Such a record is not this code's to rewrite: :meth:`Estimation.observe`
    gives it back unchanged, and the outcomes agent keeps it (module docstring)."""
    if not record:
        return False
    b = _raw(record[:1])[0]
    return b >= 0x80 and _version_of(b) == 0


@dataclass(frozen=True, slots=True)
class EstimatorRecord:
    """A page's estimator record (module docstring): binary, or the old text form."""

    estimates: Estimates
    state: SignalState

    def encode(self, newest: int = RECORD_VERSION) -> str:
        """Binary (module docstring) as a ``str`` of surrogate-escaped bytes (what a
        ``surrogateescape`` Redis client reads and writes back unchanged)."""
        return self.to_bytes(newest).decode("utf-8", "surrogateescape")

    def to_bytes(self, newest: int = RECORD_VERSION) -> bytes:
        """Version 4 (if ``newest`` is 4 or more) or 3 if it holds the state exactly, else 2,
        else 1 (as :func:`_versions`); version 3 or 4 as version 5 if ``newest`` is 5 and
        some group's slots are all zero (:func:`_pack5`)."""
        st, e = self.state, self.estimates
        ring = st.ring[-15:]
        fit = all(0.0 <= n <= _COUNT_MAX and n == math.floor(n)
                  for entry in ring for n in entry[1:-1])
        n_int = min(st.n_intervals, 0xFFFFFFFF)
        if fit and all(entry[-1] == 1.0 for entry in ring):
            # lin in float64, then float32 by the packing: the bytes records_of writes
            lin = (u - b for u, b in zip(st.unchanged, st.quad_b, strict=True))
            head = RECORD_HEAD3.pack(_TAG3 + len(ring), n_int, e.alpha_per_s, e.alpha_se_per_s,
                                     *e.kappa, *st.theta, *lin, *st.totals, *st.quad_a,
                                     *st.rep)
            version = 3
            if newest >= 4 and head[RECORD_HEAD4.size :] == _NO_QUAD:  # version 4: no quad_a
                head = bytes((_TAG4 + len(ring),)) + head[1 : RECORD_HEAD4.size]
                version = 4
            raw = head + b"".join(_RING3.pack(x[0], *(int(n) for n in x[1:-1])) for x in ring)
            # version 6 or 5: without the bytes that are zero or repeated (module docstring)
            (raw,) = _packed(np.frombuffer(raw, np.uint8)[None, :], version, len(ring), newest)
            return raw
        head = RECORD_HEAD.pack(
            (_TAG2 if fit else _TAG) + len(ring), n_int, e.alpha_per_s, e.alpha_se_per_s,
            *e.kappa, *st.theta, *st.unchanged, *st.totals, *st.quad_b, *st.quad_a, *st.rep,
        )
        if fit:
            return head + b"".join(
                _RING2.pack(x[0], *(int(n) for n in x[1:-1]), x[-1]) for x in ring)
        flat = [x for entry in ring for x in entry]
        return head + struct.pack(f"<{len(flat)}f", *flat)

    def encode_text(self) -> str:
        """The old text record (``<estimates>|<base64 SignalState>``; tests of the upgrade)."""
        return f"{self.estimates.encode()}|{base64.b64encode(self.state.to_bytes()).decode()}"

    @classmethod
    def decode(cls, text: str | bytes, end_s: float = -math.inf,
               ring_capacity: int = STREAM_RING) -> EstimatorRecord:
        """``end_s``: the page's last crawl (a binary record does not keep it)."""
        if _is_binary(text):
            return _decode_binary(_raw(text), end_s, ring_capacity)
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        est, _, b64 = text.partition("|")
        try:
            raw = base64.b64decode(b64, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"estimator state is not base64: {exc}") from None
        return cls(Estimates.decode(est), SignalState.from_bytes(raw))


def _decode_binary(raw: bytes, end_s: float, ring_capacity: int) -> EstimatorRecord:
    version, n_ring, size = _ring_of(raw)
    if len(raw) != size:
        raise ValueError(f"estimator record of {len(raw)} bytes, expected {size}")
    if version >= 5:  # read as the version 3 or 4 record it was
        raw = _expanded(raw)
        version = _version_of(raw[0])
    g, d = N_GROUPS, _D
    _, head, entry = _LAYOUTS[version]
    if version in (3, 4):
        v = (RECORD_HEAD3 if version == 3 else RECORD_HEAD4).unpack_from(raw)
        i = 4 + g
        theta, unchanged, totals = v[i : i + d], v[i + d : i + 2 * d], v[i + 2 * d : i + 3 * d]
        quad_b = (0.0,) * d
        quad_a = v[i + 3 * d : i + 3 * d + _NQ] if version == 3 else (0.0,) * _NQ
        rep_wt = ((v[i + 3 * d + _NQ], v[i + 3 * d + _NQ + 1]) if version == 3
                  else (0.0, 0.0))
        ring = tuple((*(float(x) for x in _RING3.unpack_from(raw, head + j * entry)), 1.0)
                     for j in range(n_ring))
    else:
        v = RECORD_HEAD.unpack_from(raw)
        i = 4 + g
        theta, unchanged, totals = v[i : i + d], v[i + d : i + 2 * d], v[i + 2 * d : i + 3 * d]
        quad_b, quad_a = v[i + 3 * d : i + 4 * d], v[i + 4 * d : i + 4 * d + _NQ]
        rep_wt = (v[i + 4 * d + _NQ], v[i + 4 * d + _NQ + 1])
        if version == 2:
            ring = tuple(tuple(float(x) for x in _RING2.unpack_from(raw, head + j * entry))
                         for j in range(n_ring))
        else:
            flat = struct.unpack_from(f"<{n_ring * (d + 1)}f", raw, head)
            ring = tuple(tuple(flat[j * (d + 1) : (j + 1) * (d + 1)]) for j in range(n_ring))
    alpha, alpha_se, kappa = v[2], v[3], v[4 : 4 + g]
    state = SignalState(g, end_s if math.isfinite(end_s) else -math.inf, v[1], theta,
                        unchanged, totals, ring, quad_b, quad_a,
                        max(ring_capacity, n_ring), (float(rep_wt[0]), float(rep_wt[1])))
    return EstimatorRecord(_derived(alpha, alpha_se, kappa, totals, v[1]), state)


def _derived(alpha: float, alpha_se: float, kappa: Sequence[float], totals: Sequence[float],
             n_intervals: int) -> Estimates:
    """The estimates of a binary record (module docstring: gamma, Delta, precision and
    recall derived; standard errors other than alpha's not kept: NaN)."""
    nan = (math.nan,) * N_GROUPS
    # scalar twins of gamma_from_totals and models.estimators._numeric.derive (one page:
    # numpy's per-call cost would be most of it)
    t = totals[0]
    gam = tuple(x / max(t, 1.0) for x in totals[1:]) if t > 0.0 else (0.0,) * N_GROUPS
    precision = tuple(-math.expm1(-k) for k in kappa)
    signalled = [g * p for g, p in zip(gam, precision, strict=True)]
    delta = alpha + sum(signalled)
    recall = tuple(x / delta if delta > 0.0 else 0.0 for x in signalled)
    return Estimates(alpha, alpha_se, delta, math.nan, gam, tuple(kappa), precision, nan,
                     recall, nan, n_intervals)


def gamma_from_totals(totals: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Signal rates per group from the state's totals ``(N, d)``: signals over observed time
    (under a second counts as a second), as ``models.estimators.signals._estimates_from``."""
    t = totals[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((t > 0.0)[:, None], totals[:, 1:] / np.maximum(t, 1.0)[:, None], 0.0)


def estimates_of(text: str | bytes | None) -> Estimates | None:
    """The estimates of a stored record (cheap: no solve); None if absent/bad."""
    if not text:
        return None
    try:
        if _is_binary(text):
            return _decode_binary(_raw(text), -math.inf, STREAM_RING).estimates
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return Estimates.decode(text.partition("|")[0])
    except (ValueError, struct.error):
        return None


def full_estimates(text: str | bytes | None) -> Estimates | None:
    """The estimates of a stored record with every standard error (one Newton solve of its
    state: ``recrawl explain``); None if absent/bad."""
    if not text:
        return None
    try:
        rec = EstimatorRecord.decode(text)
    except (ValueError, struct.error):
        return None
    if not _is_binary(text):
        return rec.estimates
    (full,) = Estimation().results([rec.state])
    return full


@dataclass(frozen=True, slots=True)
class Observation:
    """One crawl interval of one page, as the outcomes agent sees it."""

    record: str | None  # the stored record before this interval (None: none yet)
    interval_s: float
    signals: tuple[int, ...]  # per source, SOURCES order
    changed: bool
    fetched_at_s: float


class Estimation:
    """The estimator of every page (one :class:`SignalEstimator` over the source groups)."""

    def __init__(self, half_life_s: float = math.inf, ring_capacity: int = STREAM_RING,
                 record_version: int = RECORD_VERSION) -> None:
        """``record_version``: the newest record version written (3, 4, 5 or 6; an older one
        while workers that read no newer one still run: ``Settings.estimator_record_version``,
        module docstring)."""
        if record_version not in (3, 4, 5, 6):
            raise ValueError(f"record_version: 3, 4, 5 or 6, not {record_version!r}")
        self.estimator = SignalEstimator(N_GROUPS, half_life_s=half_life_s,
                                         ring_capacity=ring_capacity)
        self.record_version = record_version

    def state_of(self, record: str | None, end_s: float = -math.inf) -> SignalState:
        """The stored state, or the prior's if absent or unreadable; ``end_s``: the page's
        last crawl (a binary record does not keep it)."""
        if record:
            try:
                st = EstimatorRecord.decode(record, end_s, self.estimator.ring_capacity).state
            except (ValueError, TypeError, struct.error):
                pass  # unreadable (or another version): start again from the prior
            else:
                if st.n_sources != self.estimator.n_sources:
                    return self.estimator.init()  # other source groups: start again
                if st.ring_capacity != self.estimator.ring_capacity:
                    # an old record with a longer ring: its oldest intervals leave it at the
                    # next update (models.estimators' eviction), nothing is lost before
                    st = replace(st, ring_capacity=self.estimator.ring_capacity)
                return st
        return self.estimator.init()

    def observe(self, observations: Sequence[Observation]) -> list[str]:
        """New records after one interval each, every page at once: the stored states read
        into arrays, one vectorised update (:func:`models.estimators.batch_update`, equal to
        ``SignalEstimator.update`` page by page), one Newton solve for the estimates
        (``batch_result``), the records written from the arrays.  No ``SignalState`` object
        per page (``tests/integration/test_estimation.py`` checks the records against that path).
        Each observation must be a different page (the outcomes agent's chunks)."""
        if not observations:
            return []
        apart = _newer_apart(observations, self.observe)
        if apart is not None:
            return apart
        m = len(observations)
        tau = np.fromiter((max(0.0, o.interval_s) for o in observations), np.float64, m)
        fetched = np.fromiter((o.fetched_at_s for o in observations), np.float64, m)
        # records not in the binary layout (the old text form, or unreadable): one by one
        text = {i: self.state_of(o.record, o.fetched_at_s - o.interval_s)
                for i, o in enumerate(observations) if o.record and not _is_binary(o.record)}
        k = self.estimator.ring_capacity
        if (any(len(st.ring) > k for st in text.values())
                or any(o.record and _is_binary(o.record) and _ring_of(_raw(o.record))[1] > k
                       for o in observations)):
            # a record with a ring longer than the stream's (written before the ring was 2):
            # the object path (the scalar update evicts one interval per update) until it fits
            return self.observe_states(observations)
        batch = self.states_of([o.record for o in observations], fetched - tau)
        if text:
            rows = np.fromiter(text, np.int64, len(text))
            sub = states_to_batch(list(text.values()), self.estimator.ring_capacity,
                                  self.estimator.n_sources)
            for f in dataclasses.fields(sub):
                getattr(batch, f.name)[rows] = getattr(sub, f.name)
        changed = np.fromiter((o.changed for o in observations), bool, m)
        signals = np.array([o.signals for o in observations], dtype=np.float64)
        # a fetch before the stored last crawl (a clock step): the interval follows it
        prev = batch.end_s
        end = np.where(fetched >= prev, fetched, prev + tau)
        batch_update(self.estimator, batch, tau, changed, signals.reshape(m, -1) @ _GROUP_SUM,
                     end_s=end)
        alpha, alpha_se, kappa = batch_alpha_kappa(self.estimator, batch)
        # the mode is the running estimate from here on (module docstring: "theta")
        batch.theta[:, 0], batch.theta[:, 1:] = alpha, kappa
        return self.records_of(batch, alpha, alpha_se, kappa)

    # -- the stored record <-> arrays (the storage encoding lives here and in EstimatorRecord)
    def states_of(self, records: Sequence[str | bytes | None],
                  end_s: npt.NDArray[np.float64] | None = None) -> BatchSignalState:
        """Binary records (module docstring) as arrays, one ``numpy.frombuffer`` per version
        and ring length; absent or unreadable records (another layout, a ring longer than the
        stream's) start from the prior.  ``end_s``: each page's last crawl (not kept in the
        record; ``-inf`` if not given).  Old text records: :meth:`state_of`."""
        n = len(records)
        batch = batch_from_bytes(self.estimator, [None] * n)[0]  # the prior everywhere
        k = self.estimator.ring_capacity
        groups: dict[tuple[int, int, int], list[int]] = {}
        raws: list[bytes] = [b""] * n
        for i, rec in enumerate(records):
            if not rec or not _is_binary(rec):
                continue
            raw = _raw(rec)
            version, ring_len, size = _ring_of(raw)
            if ring_len <= k and len(raw) == size:
                raws[i] = raw
                # versions 5 and 6: one group per first byte or layout byte (one layout each)
                key = raw[0] if version == 5 else raw[1] if version == 6 else 0
                groups.setdefault((ring_len, version, key), []).append(i)
        d = _D
        iu = np.triu_indices(d)
        for (ring_len, version, first), members in groups.items():
            buf = b"".join(raws[i] for i in members)
            if version >= 5:  # as the version 3 or 4 records they were
                mat = np.frombuffer(buf, np.uint8).reshape(len(members), -1)
                full = _unpack5(mat, first) if version == 5 else _unpack6(mat, first)
                buf, version = full.tobytes(), _version_of(int(full[0, 0]))
            arr = np.frombuffer(buf, dtype=_record_dtype(ring_len, version))
            rows = np.asarray(members, dtype=np.int64)
            batch.n_intervals[rows] = arr["n_intervals"]
            batch.theta[rows] = arr["theta"]
            # versions 3 and 4 keep unchanged - quad_b as one sum (module docstring)
            batch.unchanged[rows] = arr["lin" if version >= 3 else "unchanged"]
            batch.totals[rows] = arr["totals"]
            batch.ring[rows] = 0.0
            if ring_len and version == 1:
                batch.ring[rows, :ring_len] = arr["ring"]
            elif ring_len:
                ring = arr["ring"]
                batch.ring[rows, :ring_len, 0] = ring["tau"]
                batch.ring[rows, :ring_len, 1:-1] = ring["n"]
                batch.ring[rows, :ring_len, -1] = 1.0 if version >= 3 else ring["w"]
            batch.ring_len[rows] = ring_len
            batch.ring_pos[rows] = 0
            batch.quad_b[rows] = 0.0 if version >= 3 else arr["quad_b"]
            qa = np.zeros((rows.size, d, d))
            if version != 4:  # version 4: no quadratic summary yet
                upper = arr["quad_a"].astype(np.float64)
                qa[:, iu[0], iu[1]] = upper
                qa[:, iu[1], iu[0]] = upper
            batch.quad_a[rows] = qa
            batch.rep[rows] = 0.0 if version == 4 else arr["rep"]
            batch.end_s[rows] = -math.inf if end_s is None else end_s[rows]
        return batch

    def records_of(self, batch: BatchSignalState, alpha: npt.NDArray[np.float64],
                   alpha_se: npt.NDArray[np.float64], kappa: npt.NDArray[np.float64]
                   ) -> list[str]:
        """:meth:`EstimatorRecord.encode` of every page of ``batch`` with its estimates (the
        same bytes; ``batch_alpha_kappa``'s, the three a record keeps), written from the
        arrays."""
        n = batch.n_pages
        out = [""] * n
        d = _D
        k = batch.ring.shape[1]
        iu = np.triu_indices(d)
        versions = _versions(batch, self.record_version)
        for ring_len, version in sorted({(int(r), int(v)) for r, v in
                                         zip(batch.ring_len.tolist(), versions.tolist(),
                                             strict=True)}):
            rows = np.flatnonzero((batch.ring_len == ring_len) & (versions == version))
            arr = np.zeros(rows.size, dtype=_record_dtype(ring_len, version))
            arr["tag"] = _LAYOUTS[version][0] + ring_len
            arr["n_intervals"] = np.minimum(batch.n_intervals[rows], 0xFFFFFFFF)
            arr["alpha"] = alpha[rows]
            arr["alpha_se"] = alpha_se[rows]
            arr["kappa"] = kappa[rows]
            arr["theta"] = batch.theta[rows]
            if version >= 3:
                arr["lin"] = batch.unchanged[rows] - batch.quad_b[rows]
            else:
                arr["unchanged"] = batch.unchanged[rows]
                arr["quad_b"] = batch.quad_b[rows]
            arr["totals"] = batch.totals[rows]
            if version != 4:
                arr["quad_a"] = batch.quad_a[rows][:, iu[0], iu[1]]
                arr["rep"] = batch.rep[rows]
            if ring_len:
                order = (batch.ring_pos[rows, None] + np.arange(ring_len)[None, :]) % k
                ring = np.take_along_axis(batch.ring[rows], order[:, :, None], axis=1)
                if version == 1:
                    arr["ring"] = ring
                else:
                    arr["ring"]["tau"] = ring[:, :, 0]
                    arr["ring"]["n"] = ring[:, :, 1:-1]
                    if version == 2:
                        arr["ring"]["w"] = ring[:, :, -1]
            if self.record_version >= 5 and version in (3, 4):
                mat = arr.view(np.uint8).reshape(rows.size, -1)
                for row, raw in zip(rows.tolist(),
                                    _packed(mat, version, ring_len, self.record_version),
                                    strict=True):
                    out[row] = raw.decode("utf-8", "surrogateescape")
                continue
            buf = arr.tobytes()
            size = arr.dtype.itemsize
            for j, row in enumerate(rows.tolist()):
                out[row] = buf[j * size : (j + 1) * size].decode("utf-8", "surrogateescape")
        return out

    def observe_states(self, observations: Sequence[Observation]) -> list[str]:
        """:meth:`observe` through ``SignalState`` objects (:func:`update_many`): the same
        records, kept as the reference the array path is tested against (and the path of an
        old text record)."""
        if not observations:
            return []
        apart = _newer_apart(observations, self.observe_states)
        if apart is not None:
            return apart
        states = [self.state_of(o.record, o.fetched_at_s - o.interval_s) for o in observations]
        intervals = [
            CrawlInterval(max(0.0, o.interval_s), o.changed, group_counts(o.signals),
                          end_s=o.fetched_at_s if o.fetched_at_s >= st.end_s else None)
            for o, st in zip(observations, states, strict=True)
        ]
        if any(len(st.ring) > self.estimator.ring_capacity for st in states):
            # an old record's longer ring: the scalar update evicts its oldest intervals
            new_states = [self.estimator.update(st, iv)
                          for st, iv in zip(states, intervals, strict=True)]
            ests = self.results(new_states)
        else:
            new_states, r = update_many(self.estimator, states, intervals)
            ests = _estimates_list(r, new_states)
        # the mode is the running estimate from here on, as in observe
        return [EstimatorRecord(e, replace(s, theta=(e.alpha_per_s, *e.kappa))).encode(
                    self.record_version) for e, s in zip(ests, new_states, strict=True)]

    def results(self, states: Sequence[SignalState]) -> list[Estimates]:
        """Converged estimates of several states (``batch_result``: one Newton solve)."""
        if not states:
            return []
        capacity = max([self.estimator.ring_capacity, *(len(st.ring) for st in states)])
        batch = states_to_batch(states, capacity, self.estimator.n_sources)
        return _estimates_list(batch_result(self.estimator, batch), states)


def _newer_apart(observations: Sequence[Observation],
                 path: Callable[[Sequence[Observation]], list[str]]) -> list[str] | None:
    """The records of ``observations`` when some record is of a later version
    (:func:`newer_record`): those given back as they are, ``path``'s for the rest; None
    when there is none."""
    newer = [i for i, o in enumerate(observations) if newer_record(o.record)]
    if not newer:
        return None
    rest = [o for o in observations if not newer_record(o.record)]
    return _merged(observations, newer, path(rest))


def _merged(observations: Sequence[Observation], kept: Sequence[int],
            others: Sequence[str]) -> list[str]:
    """The records of ``observations``: those at ``kept`` as they were, ``others`` (the new
    records of the rest, in order) in between."""
    out: list[str] = []
    it = iter(others)
    keep = set(kept)
    for i, o in enumerate(observations):
        if i in keep:
            rec = o.record or ""
            out.append(rec if isinstance(rec, str) else rec.decode("utf-8", "surrogateescape"))
        else:
            out.append(next(it))
    return out


def _estimates_list(r: BatchEstimate, states: Sequence[SignalState]) -> list[Estimates]:
    a, a_se = r.alpha_per_s.tolist(), r.alpha_se_per_s.tolist()
    c, c_se = r.change_rate_per_s.tolist(), r.change_rate_se_per_s.tolist()
    g, k = r.gamma_per_s.tolist(), r.kappa.tolist()
    p, p_se, q, q_se = (r.precision.tolist(), r.precision_se.tolist(), r.recall.tolist(),
                        r.recall_se.tolist())
    return [
        Estimates(a[i], a_se[i], c[i], c_se[i], tuple(g[i]), tuple(k[i]), tuple(p[i]),
                  tuple(p_se[i]), tuple(q[i]), tuple(q_se[i]), st.n_intervals)
        for i, st in enumerate(states)
    ]


def value_parameters(
    est: Estimates, quantile: float
) -> tuple[float, tuple[float, ...], float, float]:
    """``(alpha, beta per group, gamma, beta)`` for the crawl value (module docstring)."""
    alpha = max(est.alpha_per_s, 1e-300)
    if quantile != 0.5:
        alpha = float(conservative_change_rate(alpha, est.alpha_se_per_s, quantile)) or alpha
    betas = tuple(k / alpha for k in est.kappa)
    gamma = float(sum(est.gamma_per_s))
    # the merged source of paper 004 Sec. 3 (models.decision.pooling): the simulator's rule
    beta = pooled_beta(alpha, betas, est.gamma_per_s)
    return alpha, betas, gamma, beta
