"""The estimator record: how a page's estimator state is stored after its page record in
``P:{host}:pages`` (:mod:`streams.store.page_record`), encoded and decoded one by one or on
arrays.  The estimation service that writes it is :mod:`streams.estimates.estimation`.

A record keeps the :class:`models.estimators.SignalState` of the page's estimator over the
three source groups (:data:`GROUPS`) plus the converged ``alpha``, its standard error and
``kappa`` (what the crawl value needs that only the MLE solve gives), so a shard is rebuilt
without solving any MLE (``docs/benchmarks.md``, "Design decisions").

Layout (little-endian): a version byte :data:`VERSION`, a layout byte, then the bytes of the
*full record* that the layout keeps.  The full record of a ring of ``r`` changed intervals
(:func:`full_dtype`):

============  ========  ==============================================================
field         type      meaning
============  ========  ==============================================================
host          float32x2 the page's contribution to its host's prior: its posterior mean
                        rate ``E[lambda]`` and ``E[log lambda]`` under the host's Gamma
                        (:mod:`models.estimators.host_prior`); the mean is stored negated
                        while it is not the page's crawl-value ``alpha`` (its host has too
                        few pages, or the page has its own prior rate); ``(0, 0)``: no
                        contribution
n_intervals   uint32    crawl intervals observed (saturating)
alpha         float32   the change rate no source signals (the posterior mode)
alpha_se      float32   its standard error
kappa         float32x3 per group ``alpha * beta_g``
theta         float32x4 the running estimate (``alpha``, ``kappa``)
lin           float32x4 ``unchanged - quad_b`` (sums over unchanged intervals, less the
                        quadratic summary's linear term)
totals        float32x4 observed time, then each group's signals
quad_a        float32x10 the quadratic summary's matrix (upper triangle)
rep           float32x2 the representative changed interval without signals ``(w, T)``
unknown       float32x4 the intervals whose signals are unknown (an imported history):
                        their total time, their unchanged time, the representative
                        changed one ``(w, T)`` (``SignalState.unknown``)
ring          r x (tau float32, counts uint16x3[, weight float32])
============  ========  ==============================================================

``lin`` is one sum because the state's sums over unchanged intervals and the linear term of
its quadratic expansion enter the negative log-posterior only as that difference
(``models.estimators._numeric.objective``: ``(lin - b) . theta``) and both decay by the same
factor; it reads back as ``unchanged = lin``, ``quad_b = 0``.

The layout leaves out, and puts back on reading, only bytes it can put back exactly:

* ``theta`` when it is ``alpha`` and ``kappa`` to the bit: the stream solves the posterior
  mode at every update and keeps it as its running estimate (:meth:`Estimation.observe`), so
  an interval leaving the ring is expanded one Newton step from the last update's mode
  (``benchmarks/bench_running_estimate.py``);
* ``quad_a`` while it is all zero (no changed interval with signals has left the ring) and
  ``rep`` while it is (none without signals has): most pages never need either;
* ``unknown`` while it is all zero (no interval with signals unknown: a page only a live
  crawler has seen);
* the slots of each group with no signal yet (its ``lin`` and ``totals`` entries, the
  ``quad_a`` entries of its row and column, its count in each ring entry: all sums of that
  group's signal counts, zero to the bit until its first signal);
* ``narrow``: the high two bytes of ``n_intervals`` (below 65,536) and the high byte of
  every ring count (below 256), all zero;
* ``low`` (0-2): the lowest bytes of every group's ``totals`` entry, all zero (a float32
  whole count below 65,536 has its lowest byte zero, below 256 its two lowest);
* the ring weights when every one is 1 (no ``estimator_half_life_s``).

The layout is a 14-bit set of flags (:func:`_flags`): ring length (bits 0-2), ``quad_a``
kept (3), ``rep`` kept (4), the groups kept (5-7), ``narrow`` (8), ``low`` (9-10),
weights kept (11), ``theta`` kept (12), ``unknown`` kept (13).  The layout byte is the
index of those flags in :data:`_CODES`, the layouts a stream record of the default
configuration has (a ring of at most :data:`STREAM_RING`, no ``theta``, no weights; with
wide counts at most one low byte left out; with ``unknown`` only before any summary, with
narrow counts and two low bytes left out: an imported page and its first live crawls);
any other layout is the byte :data:`_ESCAPE` followed by the flags as uint16 (two bytes
more: an estimator half-life, a ring longer than the stream's, a state not from the
stream, a page with an imported history once it has a summary, wide counts or a group's
256th signal).  A
three-group page with a ring of 2 takes 112 bytes with the quadratic summary, 120 with
both summaries; a page never pinged with a ring of 2, 56 with the representative
interval, 48 without (8 of them the ``host`` contribution); a page with an imported
history never pinged, 56 with an empty ring (16 of them the ``unknown`` block), 64 with a
ring of 2, 74 with the representative interval as well (the escape layout).

A ring count is a group's signals in one crawl interval, saturating at :data:`COUNT_MAX`
as the page record's per-source counts do
(:func:`streams.estimates.estimation.group_counts`).  float32 for all: these
are estimates whose standard errors are far above float32's 6e-8 relative rounding (the
float64 ``unchanged`` and ``totals`` sums lose at most 6e-8 relative, a crawl interval of a
second in 190 days of observed time).  Not stored, derived when read: ``gamma_g = totals_g
/ max(1 s, known)`` (0 where ``known`` is 0) with ``known = max(totals_0 - unknown_0, 0)``
the observed time whose signals are known (``models.estimators._numeric.gamma_rates``),
``Delta``, precision and recall (``models.estimators._numeric.derive``, paper 004 Sec. 3);
``end_s`` is the page's ``last_crawl`` (the outcome script writes both at once).  The other
standard errors are only shown by ``recrawl explain``, which solves that one page's state
again (:func:`streams.estimates.estimation.full_estimates`).

A record with another version byte, an unknown layout, or a length other than its layout's
is unreadable: the page's estimator starts again from the prior.

Over 600 lines on purpose: this docstring is the layout's reference (~95 lines), and the
one-record and the array codecs read and write the same layouts through the same flags and
slot tables; split, each would have to be kept in step with the other's byte offsets.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from models.estimators import BatchSignalState, SignalState
from streams.store.host_prior import EST_ESCAPE, EST_VERSION, contribution

__all__ = [
    "COUNT_MAX",
    "HEADS",
    "N_GROUPS",
    "STREAM_RING",
    "VERSION",
    "Estimates",
    "EstimatorRecord",
    "contribution",
    "full_dtype",
    "gamma_from_totals",
    "record_heads",
    "record_sizes",
    "records_from_batch",
    "unpack_records",
    "value_alpha",
]

#: the estimator's source groups (:data:`streams.estimates.estimation.GROUPS`)
N_GROUPS = 3
_D = 1 + N_GROUPS
_NQ = _D * (_D + 1) // 2
_IU = np.triu_indices(_D)
#: changed intervals the stream's estimator keeps exactly
STREAM_RING = 2
#: the record's first byte; a later format takes another
VERSION = EST_VERSION
#: the layout byte of a layout not in :data:`_CODES`: its flags follow as uint16
_ESCAPE = EST_ESCAPE
#: the most signals of one group a ring entry counts (uint16)
COUNT_MAX = 0xFFFF
#: the longest ring a layout holds (3 bits)
_MAX_RING = 7

# flags (module docstring)
_QUAD, _REP, _NARROW, _WEIGHTED, _THETA = 1 << 3, 1 << 4, 1 << 8, 1 << 11, 1 << 12
_UNKNOWN = 1 << 13
_KEPT_SHIFT, _LOW_SHIFT = 5, 9
_ALL_GROUPS = (1 << N_GROUPS) - 1
_VALID = (1 << 14) - 1


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
    #: where ``alpha`` is the page's posterior mean under its host's prior
    #: (:attr:`EstimatorRecord.value_estimates`): that posterior's ``E[log lambda]`` (with
    #: the mean, the Gamma it is read as); NaN where ``alpha`` is the page's own mode and
    #: ``alpha_se`` its standard error
    alpha_mean_log: float = math.nan


@functools.cache
def full_dtype(ring: int, weighted: bool = False) -> np.dtype:
    """The full record of a ring of ``ring`` (module docstring) as one packed numpy dtype."""
    g, d = N_GROUPS, _D
    entry: list[Any] = [("tau", "<f4"), ("n", "<u2", (g,))]
    if weighted:
        entry.append(("w", "<f4"))
    fields: list[Any] = [
        ("host", "<f4", (2,)),
        ("n_intervals", "<u4"), ("alpha", "<f4"), ("alpha_se", "<f4"), ("kappa", "<f4", (g,)),
        ("theta", "<f4", (d,)), ("lin", "<f4", (d,)), ("totals", "<f4", (d,)),
        ("quad_a", "<f4", (_NQ,)), ("rep", "<f4", (2,)), ("unknown", "<f4", (4,)),
    ]
    if ring:
        fields.append(("ring", np.dtype(entry), (ring,)))
    return np.dtype(fields)


#: the full record's fields before the ring, and a ring entry (without, with its weight), as
#: in :func:`full_dtype` (``struct``'s ``<`` has no padding): the scalar decode
_HEAD = struct.Struct(f"<2fI{2 + N_GROUPS}f{3 * _D + _NQ + 2 + 4}f")
_RING = struct.Struct(f"<f{N_GROUPS}H")
_RING_W = struct.Struct(f"<f{N_GROUPS}Hf")


def _flags(ring: int, quad: bool, rep: bool, kept: int, narrow: bool, low: int,
           weighted: bool, theta: bool, unknown: bool = False) -> int:
    return (ring | _QUAD * quad | _REP * rep | kept << _KEPT_SHIFT | _NARROW * narrow
            | low << _LOW_SHIFT | _WEIGHTED * weighted | _THETA * theta | _UNKNOWN * unknown)


def _parsed(flags: int) -> tuple[int, bool, bool, int, bool, int, bool, bool, bool] | None:
    """``(ring, quad, rep, kept, narrow, low, weighted, theta, unknown)`` (None: not a
    layout)."""
    low = flags >> _LOW_SHIFT & 3
    if flags & ~_VALID or low > 2:
        return None
    return (flags & 7, bool(flags & _QUAD), bool(flags & _REP),
            flags >> _KEPT_SHIFT & _ALL_GROUPS, bool(flags & _NARROW), low,
            bool(flags & _WEIGHTED), bool(flags & _THETA), bool(flags & _UNKNOWN))


#: ``(narrow, low)`` of the one-byte layouts: wide counts make ``low`` 2 impossible but
#: through more than 65,535 intervals
_NARROW_LOW = ((False, 0), (False, 1), (True, 0), (True, 1), (True, 2))


def _stream_layouts() -> tuple[int, ...]:
    """The layouts of one byte (module docstring), in a fixed order."""
    out = []
    for ring in range(STREAM_RING + 1):
        for quad in (False, True):
            for rep in (False, True):
                if (quad or rep) and ring < STREAM_RING:
                    continue  # a summary only exists once an interval left a full ring
                for kept in range(_ALL_GROUPS + 1):
                    if quad and not kept:
                        continue  # a quadratic summary is of intervals with signals
                    for narrow, low in _NARROW_LOW:
                        out.append(_flags(ring, quad, rep, kept, narrow, low, False, False))
    # with the unknown block (an imported page): before any summary, narrow, both low
    # bytes left out (the table's room: 24 of the 25 codes left under the escape byte)
    for ring in range(STREAM_RING + 1):
        for kept in range(_ALL_GROUPS + 1):
            out.append(_flags(ring, False, False, kept, True, 2, False, False, True))
    assert len(out) < _ESCAPE
    return tuple(out)


_CODES = _stream_layouts()
_CODE_OF = {f: c for c, f in enumerate(_CODES)}


@functools.cache
def _slots(ring: int, weighted: bool) -> dict[str, Any]:
    """Byte positions in the full record: ``theta``, what it equals (``alpha``, then
    ``kappa``), ``quad_a``, ``rep``, per group its slots, the ``narrow`` bytes, per ``low``
    byte (lowest first) that byte of each group's ``totals`` entry."""
    fields: Any = full_dtype(ring, weighted).fields

    def span(name: str, n: int) -> npt.NDArray[np.intp]:
        return np.asarray(fields[name][1] + np.arange(n), dtype=np.intp)

    groups = []
    for g in range(N_GROUPS):
        j = 1 + g
        pos = [fields[name][1] + 4 * j + b for name in ("lin", "totals") for b in range(4)]
        pos += [fields["quad_a"][1] + 4 * e + b
                for e, (r, c) in enumerate(zip(*_IU, strict=True)) if j in (r, c)
                for b in range(4)]
        if ring:
            entry = fields["ring"][0].base
            base = fields["ring"][1] + entry.fields["n"][1] + 2 * g
            pos += [base + r * entry.itemsize + b for r in range(ring) for b in range(2)]
        groups.append(np.array(sorted(pos), dtype=np.intp))
    narrow = [fields["n_intervals"][1] + 2, fields["n_intervals"][1] + 3]
    if ring:
        entry = fields["ring"][0].base
        base = fields["ring"][1]
        narrow += [base + r * entry.itemsize + entry.fields["n"][1] + 2 * g + 1
                   for r in range(ring) for g in range(N_GROUPS)]
    totals = fields["totals"][1]
    return {
        "theta": span("theta", 4 * _D),
        "src": np.concatenate([span("alpha", 4), span("kappa", 4 * N_GROUPS)]),
        "quad": span("quad_a", 4 * _NQ),
        "rep": span("rep", 8),
        "unknown": span("unknown", 16),
        "groups": tuple(groups),
        "narrow": np.array(sorted(narrow), dtype=np.intp),
        "low": tuple(np.array([totals + 4 * (1 + g) + b for g in range(N_GROUPS)], dtype=np.intp)
                     for b in range(2)),
    }


@functools.cache
def _kept(flags: int) -> npt.NDArray[np.intp]:
    """The byte positions of the full record a layout keeps, in order."""
    layout = _parsed(flags)
    assert layout is not None
    ring, quad, rep, kept, narrow, low, weighted, theta, unknown = layout
    s = _slots(ring, weighted)
    drop = np.zeros(full_dtype(ring, weighted).itemsize, dtype=bool)
    if not theta:
        drop[s["theta"]] = True
    if not quad:
        drop[s["quad"]] = True
    if not rep:
        drop[s["rep"]] = True
    if not unknown:
        drop[s["unknown"]] = True
    for g, pos in enumerate(s["groups"]):
        if not kept >> g & 1:
            drop[pos] = True
    if narrow:
        drop[s["narrow"]] = True
    for b in range(low):
        drop[s["low"][b]] = True
    return np.flatnonzero(~drop)


def _header(flags: int) -> bytes:
    code = _CODE_OF.get(flags)
    if code is not None:
        return bytes((VERSION, code))
    return bytes((VERSION, _ESCAPE)) + flags.to_bytes(2, "little")


def _flags_of(raw: bytes) -> int | None:
    """A record's layout flags from its first bytes (None: not a record of this version)."""
    if len(raw) < 2 or raw[0] != VERSION:
        return None
    if raw[1] == _ESCAPE:
        flags = int.from_bytes(raw[2:4], "little") if len(raw) >= 4 else -1
        return flags if flags >= 0 and _parsed(flags) is not None else None
    return _CODES[raw[1]] if raw[1] < len(_CODES) else None


@functools.cache
def _size(flags: int) -> int:
    return len(_header(flags)) + _kept(flags).size


def _keys(mat: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """Per row of first bytes ``(n, >= 4)``: its flags, -1 if not a record's."""
    m = mat.astype(np.int64)
    codes = np.full(256, -1, dtype=np.int64)
    codes[: len(_CODES)] = _CODES
    flags = np.where(m[:, 1] == _ESCAPE, m[:, 2] | m[:, 3] << 8, codes[m[:, 1]])
    ok = (m[:, 0] == VERSION) & (flags >= 0) & (flags & ~_VALID == 0) & (
        (flags >> _LOW_SHIFT & 3) <= 2)
    out: npt.NDArray[np.int64] = np.where(ok, flags, -1)
    return out


def _first4(mat: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    m = np.asarray(mat, dtype=np.uint8)
    if m.ndim == 1:
        m = m[:, None]
    if m.shape[1] < 4:
        m = np.concatenate([m, np.zeros((m.shape[0], 4 - m.shape[1]), np.uint8)], axis=1)
    return m[:, :4]


def record_sizes(mat: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """The bytes of estimator records by their first bytes (rows of ``mat``, at least the
    first two, zero-padded; -1: not a record), on arrays."""
    keys = _keys(_first4(mat))
    out = np.full(keys.shape[0], -1, dtype=np.int64)
    for f in np.unique(keys[keys >= 0]).tolist():
        out[keys == f] = _size(f)
    return out


def _full_of(mat: npt.NDArray[np.uint8], flags: int) -> npt.NDArray[np.uint8]:
    """Records of one layout (rows of ``mat``, of its size) as full records' bytes."""
    layout = _parsed(flags)
    assert layout is not None
    ring, weighted, theta = layout[0], layout[6], layout[7]
    full = np.zeros((mat.shape[0], full_dtype(ring, weighted).itemsize), dtype=np.uint8)
    full[:, _kept(flags)] = mat[:, len(_header(flags)):]
    s = _slots(ring, weighted)
    if not theta:
        full[:, s["theta"]] = full[:, s["src"]]
    return full


def unpack_records(raws: Sequence[bytes]) -> list[tuple[npt.NDArray[np.int64], int, Any]]:
    """Readable records (each of its layout's size; others skipped) grouped by layout:
    ``(rows, ring length, full records)``, the last a structured array of
    :func:`full_dtype` (``ring["w"]`` absent: every weight 1)."""
    rows_by: dict[int, list[int]] = {}
    for i, raw in enumerate(raws):
        flags = _flags_of(raw)
        if flags is not None and len(raw) == _size(flags):
            rows_by.setdefault(flags, []).append(i)
    out = []
    for flags, rows in rows_by.items():
        mat = np.frombuffer(b"".join(raws[i] for i in rows), np.uint8).reshape(len(rows), -1)
        layout = _parsed(flags)
        assert layout is not None
        ring, weighted = layout[0], layout[6]
        arr = _full_of(mat, flags).view(full_dtype(ring, weighted))[:, 0]
        out.append((np.asarray(rows, dtype=np.int64), ring, arr))
    return out


def _pack(arr: Any, ring: int, weighted: bool) -> list[bytes]:
    """Full records of one ring length (a structured array of :func:`full_dtype`) as
    records, each in the layout that leaves out the most (module docstring)."""
    n = arr.shape[0]
    mat = arr.view(np.uint8).reshape(n, -1)
    s = _slots(ring, weighted)
    flags = np.full(n, ring | (_WEIGHTED if weighted else 0), dtype=np.int64)
    flags |= (mat[:, s["theta"]] != mat[:, s["src"]]).any(axis=1) * _THETA
    flags |= (mat[:, s["quad"]] != 0).any(axis=1) * _QUAD
    flags |= (mat[:, s["rep"]] != 0).any(axis=1) * _REP
    flags |= (mat[:, s["unknown"]] != 0).any(axis=1) * _UNKNOWN
    for g, pos in enumerate(s["groups"]):
        flags |= (mat[:, pos] != 0).any(axis=1).astype(np.int64) << (_KEPT_SHIFT + g)
    narrow = (mat[:, s["narrow"]] == 0).all(axis=1)
    flags |= narrow * _NARROW
    low1 = (mat[:, s["low"][0]] == 0).all(axis=1)
    low2 = low1 & (mat[:, s["low"][1]] == 0).all(axis=1)
    low = low1.astype(np.int64) + low2
    # a wide record of a one-byte layout leaves out at most one low byte (_NARROW_LOW);
    # one-byte layouts with the unknown block are all narrow
    wide = ~narrow & (flags & (_THETA | _WEIGHTED | _UNKNOWN) == 0) & (ring <= STREAM_RING)
    flags |= np.where(wide, np.minimum(low, 1), low) << _LOW_SHIFT
    out: list[bytes] = [b""] * n
    for f in np.unique(flags).tolist():
        rows = np.flatnonzero(flags == f)
        head = np.frombuffer(_header(f), np.uint8)
        keep = _kept(f)
        sub = np.empty((rows.size, head.size + keep.size), dtype=np.uint8)
        sub[:, : head.size] = head
        sub[:, head.size :] = mat[np.ix_(rows, keep)]
        buf, size = sub.tobytes(), sub.shape[1]
        for j, row in enumerate(rows.tolist()):
            out[row] = buf[j * size : (j + 1) * size]
    return out


def records_from_batch(batch: BatchSignalState, alpha: npt.NDArray[np.float64],
                       alpha_se: npt.NDArray[np.float64], kappa: npt.NDArray[np.float64],
                       host: npt.NDArray[np.float64] | None = None) -> list[bytes]:
    """The record of every page of ``batch`` with its estimates and its contribution to its
    host's prior (``host`` ``(N, 2)``, the ``host`` field; default none); ``ValueError`` if
    a ring count is not a whole number of at most :data:`COUNT_MAX` or a ring is longer
    than a layout holds."""
    n = batch.n_pages
    out: list[bytes] = [b""] * n
    k = batch.ring.shape[1]
    used = (np.arange(k)[None, :] - batch.ring_pos[:, None]) % max(k, 1) < batch.ring_len[:, None]
    counts = batch.ring[..., 1:-1]
    ok = ((counts >= 0.0) & (counts <= COUNT_MAX) & (counts == np.floor(counts))).all(axis=2)
    if not (ok | ~used).all():
        raise ValueError(f"estimator record: a ring count is not a whole number 0..{COUNT_MAX}")
    if n and int(batch.ring_len.max()) > _MAX_RING:
        raise ValueError(f"estimator record: a ring longer than {_MAX_RING}")
    weighted = ~((batch.ring[..., -1] == 1.0) | ~used).all(axis=1)
    for ring_len, w in sorted({(int(r), bool(x)) for r, x in
                               zip(batch.ring_len.tolist(), weighted.tolist(), strict=True)}):
        rows = np.flatnonzero((batch.ring_len == ring_len) & (weighted == w))
        arr = np.zeros(rows.size, dtype=full_dtype(ring_len, w))
        if host is not None:
            arr["host"] = host[rows]
        arr["n_intervals"] = np.minimum(batch.n_intervals[rows], 0xFFFFFFFF)
        arr["alpha"] = alpha[rows]
        arr["alpha_se"] = alpha_se[rows]
        arr["kappa"] = kappa[rows]
        arr["theta"] = batch.theta[rows]
        arr["lin"] = batch.unchanged[rows] - batch.quad_b[rows]
        arr["totals"] = batch.totals[rows]
        arr["quad_a"] = batch.quad_a[rows][:, _IU[0], _IU[1]]
        arr["rep"] = batch.rep[rows]
        arr["unknown"] = batch.unknown[rows]
        if ring_len:
            order = (batch.ring_pos[rows, None] + np.arange(ring_len)[None, :]) % k
            ring = np.take_along_axis(batch.ring[rows], order[:, :, None], axis=1)
            arr["ring"]["tau"] = ring[:, :, 0]
            arr["ring"]["n"] = ring[:, :, 1:-1]
            if w:
                arr["ring"]["w"] = ring[:, :, -1]
        for row, raw in zip(rows.tolist(), _pack(arr, ring_len, w), strict=True):
            out[row] = raw
    return out


def fill_batch(batch: BatchSignalState, rows: npt.NDArray[np.int64], ring_len: int,
               arr: Any, end_s: npt.NDArray[np.float64] | None) -> None:
    """Write full records ``arr`` (of a ring of ``ring_len``) into ``batch`` at ``rows``."""
    batch.n_intervals[rows] = arr["n_intervals"]
    batch.theta[rows] = arr["theta"]
    batch.unchanged[rows] = arr["lin"]  # unchanged - quad_b as one sum (module docstring)
    batch.totals[rows] = arr["totals"]
    batch.ring[rows] = 0.0
    if ring_len:
        ring = arr["ring"]
        batch.ring[rows, :ring_len, 0] = ring["tau"]
        batch.ring[rows, :ring_len, 1:-1] = ring["n"]
        names: Any = ring.dtype.names
        batch.ring[rows, :ring_len, -1] = ring["w"] if "w" in names else 1.0
    batch.ring_len[rows] = ring_len
    batch.ring_pos[rows] = 0
    batch.quad_b[rows] = 0.0
    upper = arr["quad_a"].astype(np.float64)
    qa = np.zeros((rows.size, _D, _D))
    qa[:, _IU[0], _IU[1]] = upper
    qa[:, _IU[1], _IU[0]] = upper
    batch.quad_a[rows] = qa
    batch.rep[rows] = arr["rep"]
    batch.unknown[rows] = arr["unknown"]
    batch.end_s[rows] = -math.inf if end_s is None else end_s[rows]


#: what a rebuild reads of an estimator record (:func:`record_heads`); ``unknown_s`` the
#: time of intervals with signals unknown (the ``unknown`` block's first entry)
HEADS = np.dtype([("host", "<f4", (2,)), ("n", "<u4"), ("alpha", "<f4"), ("alpha_se", "<f4"),
                  ("kappa", "<f4", (N_GROUPS,)), ("totals", "<f4", (_D,)),
                  ("unknown_s", "<f4")])


def record_heads(mat: npt.NDArray[np.uint8]) -> npt.NDArray[Any]:
    """The :data:`HEADS` fields of records of one size, the rows of ``mat`` (each of the
    size its first bytes name: the caller checks)."""
    heads = np.zeros(mat.shape[0], dtype=HEADS)
    if not mat.shape[0]:
        return heads
    keys = _keys(_first4(mat))
    for f in np.unique(keys[keys >= 0]).tolist():
        rows = np.flatnonzero(keys == f)
        layout = _parsed(f)
        assert layout is not None
        arr = _full_of(mat[rows], f).view(full_dtype(layout[0], layout[6]))[:, 0]
        heads["n"][rows] = arr["n_intervals"]
        for name in ("host", "alpha", "alpha_se", "kappa", "totals"):
            heads[name][rows] = arr[name]
        heads["unknown_s"][rows] = arr["unknown"][:, 0]
    return heads


def gamma_from_totals(totals: npt.NDArray[np.float64],
                      unknown_s: npt.NDArray[np.float64] | None = None,
                      ) -> npt.NDArray[np.float64]:
    """Signal rates per group from the state's totals ``(N, d)`` and the time of its
    intervals with signals unknown ``unknown_s`` ``(N,)`` (None: none): signals over the
    observed time whose signals are known (under a second counts as a second; none: 0), as
    ``models.estimators._numeric.gamma_rates``."""
    t = totals[:, 0] if unknown_s is None else np.maximum(totals[:, 0] - unknown_s, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((t > 0.0)[:, None], totals[:, 1:] / np.maximum(t, 1.0)[:, None], 0.0)


def derived(alpha: float, alpha_se: float, kappa: Sequence[float], totals: Sequence[float],
            n_intervals: int, unknown_s: float) -> Estimates:
    """The estimates of a record (module docstring: gamma, Delta, precision and recall
    derived; standard errors other than alpha's not kept: NaN); ``unknown_s`` the time of
    its intervals with signals unknown."""
    nan = (math.nan,) * N_GROUPS
    # scalar twins of gamma_from_totals and models.estimators._numeric.derive (one page:
    # numpy's per-call cost would be most of it)
    t = max(totals[0] - unknown_s, 0.0)
    gam = tuple(x / max(t, 1.0) for x in totals[1:]) if t > 0.0 else (0.0,) * N_GROUPS
    precision = tuple(-math.expm1(-k) for k in kappa)
    signalled = [g * p for g, p in zip(gam, precision, strict=True)]
    delta = alpha + sum(signalled)
    recall = tuple(x / delta if delta > 0.0 else 0.0 for x in signalled)
    return Estimates(alpha, alpha_se, delta, math.nan, gam, tuple(kappa), precision, nan,
                     recall, nan, n_intervals)


def value_alpha(host_mean: float) -> float | None:
    """The crawl-value ``alpha`` a record's stored host mean gives (the mean where it is
    stored positive and finite), None where it is the page's own mode (module docstring)."""
    return host_mean if 0.0 < host_mean < math.inf else None


def raw_bytes(record: str | bytes) -> bytes:
    """A record as bytes (a ``str`` read through a ``surrogateescape`` client)."""
    return record if isinstance(record, bytes) else record.encode("utf-8", "surrogateescape")


@dataclass(frozen=True, slots=True)
class EstimatorRecord:
    """A page's estimator record (module docstring): its estimates (``alpha`` the page's
    own posterior mode), state and contribution to its host's prior (the ``host`` field,
    as stored: :func:`contribution` reads it)."""

    estimates: Estimates
    state: SignalState
    host: tuple[float, float] = (0.0, 0.0)

    @property
    def value_estimates(self) -> Estimates:
        """The estimates the crawl value reads: ``alpha`` the page's posterior mean under
        its host's prior where the record says so (:func:`value_alpha`), ``Delta`` and
        recall derived from it; ``kappa`` kept."""
        a = value_alpha(self.host[0])
        if a is None:
            return self.estimates
        e = self.estimates
        st = self.state
        return replace(derived(a, e.alpha_se_per_s, e.kappa, st.totals, e.n_intervals,
                               st.unknown[0]), alpha_mean_log=self.host[1])

    def encode(self) -> str:
        """The record as a ``str`` of surrogate-escaped bytes (what a ``surrogateescape``
        Redis client reads and writes back unchanged)."""
        return self.to_bytes().decode("utf-8", "surrogateescape")

    def to_bytes(self) -> bytes:
        """The record's bytes (those :func:`records_from_batch` writes for this page)."""
        st, e = self.state, self.estimates
        ring = st.ring
        if any(not (0.0 <= n <= COUNT_MAX and n == math.floor(n))
               for x in ring for n in x[1:-1]):
            raise ValueError(f"estimator record: a ring count is not a whole number "
                             f"0..{COUNT_MAX}")
        if len(ring) > _MAX_RING:
            raise ValueError(f"estimator record: a ring longer than {_MAX_RING}")
        weighted = any(x[-1] != 1.0 for x in ring)
        arr = np.zeros(1, dtype=full_dtype(len(ring), weighted))
        arr["host"] = self.host
        arr["n_intervals"] = min(st.n_intervals, 0xFFFFFFFF)
        arr["alpha"], arr["alpha_se"], arr["kappa"] = e.alpha_per_s, e.alpha_se_per_s, e.kappa
        arr["theta"] = st.theta
        arr["lin"] = [u - b for u, b in zip(st.unchanged, st.quad_b, strict=True)]
        arr["totals"], arr["quad_a"], arr["rep"] = st.totals, st.quad_a, st.rep
        arr["unknown"] = st.unknown
        if ring:
            arr["ring"]["tau"] = [x[0] for x in ring]
            arr["ring"]["n"] = [x[1:-1] for x in ring]
            if weighted:
                arr["ring"]["w"] = [x[-1] for x in ring]
        (raw,) = _pack(arr, len(ring), weighted)
        return raw

    @classmethod
    def decode(cls, record: str | bytes, end_s: float = -math.inf,
               ring_capacity: int = STREAM_RING) -> EstimatorRecord:
        """``end_s``: the page's last crawl (a record does not keep it); ``ValueError`` if
        not a readable record."""
        raw = raw_bytes(record)
        flags = _flags_of(raw)
        if flags is None:
            raise ValueError(f"not an estimator record of version {VERSION}: {raw[:4]!r}")
        if len(raw) != _size(flags):
            raise ValueError(f"estimator record of {len(raw)} bytes, expected {_size(flags)}")
        layout = _parsed(flags)
        assert layout is not None
        ring_len, weighted = layout[0], layout[6]
        full = _full_of(np.frombuffer(raw, np.uint8)[None, :], flags).tobytes()
        v = _HEAD.unpack_from(full)
        g, d = N_GROUPS, _D
        entry = _RING_W if weighted else _RING
        ring = tuple((*(float(x) for x in entry.unpack_from(full, _HEAD.size + j * entry.size)),
                      *(() if weighted else (1.0,))) for j in range(ring_len))
        i = 5 + g  # host (2), n_intervals, alpha, alpha_se, kappa, then theta, lin, totals, ...
        theta, lin, totals = (v[i + k * d : i + (k + 1) * d] for k in range(3))
        j = i + 3 * d + _NQ
        quad_a, rep, unknown = v[i + 3 * d : j], v[j : j + 2], v[j + 2 : j + 6]
        state = SignalState(g, end_s if math.isfinite(end_s) else -math.inf, v[2], theta, lin,
                            totals, ring, (0.0,) * d, quad_a, max(ring_capacity, ring_len),
                            (rep[0], rep[1]), (unknown[0], unknown[1], unknown[2], unknown[3]))
        est = derived(v[3], v[4], v[5 : 5 + g], totals, v[2], unknown[0])
        return cls(est, state, (v[0], v[1]))

