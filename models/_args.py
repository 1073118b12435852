"""Argument validation shared by the ``models`` modules.

Every public function of ``models`` takes numbers or array-likes; these helpers turn
them into float64 arrays and raise :class:`ValueError` naming the offending argument
(and the bad value) for NaN, negative, infinite or non-numeric input, and for shapes
that do not broadcast.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def as_float_array(
    name: str,
    value: npt.ArrayLike,
    *,
    allow_negative: bool = False,
    allow_inf: bool = False,
    allow_zero: bool = True,
) -> FloatArray:
    """Return ``value`` as a float64 array, checked.

    Raises
    ------
    ValueError
        If ``value`` is not numeric, contains NaN, is negative (unless
        ``allow_negative``), infinite (unless ``allow_inf``) or zero (unless
        ``allow_zero``).  The message names the argument.
    """
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric, got {value!r}") from exc
    if arr.size:
        lo, hi = float(arr.min()), float(arr.max())  # NaN propagates into both
        fast_ok = (
            lo == lo  # not NaN
            and (lo >= 0 or allow_negative)
            and (allow_inf or (hi < np.inf and lo > -np.inf))
            and (allow_zero or bool((arr != 0).all()))
        )
        if fast_ok:
            return arr
        if np.isnan(arr).any():
            raise ValueError(f"{name} must not be NaN")
        if not allow_negative and (arr < 0).any():
            raise ValueError(f"{name} must be >= 0, got min {float(arr.min())!r}")
        if not allow_inf and np.isinf(arr).any():
            raise ValueError(f"{name} must be finite, got {float(arr[np.isinf(arr)][0])!r}")
        if not allow_zero and (arr == 0).any():
            raise ValueError(f"{name} must be > 0")
    return arr


def broadcast(**arrays: FloatArray) -> tuple[FloatArray, ...]:
    """Broadcast the named arrays against each other.

    Raises
    ------
    ValueError
        If the shapes do not broadcast; the message names every argument and its shape.
    """
    try:
        out = np.broadcast_arrays(*arrays.values())
    except ValueError as exc:
        shapes = ", ".join(f"{k} {v.shape}" for k, v in arrays.items())
        raise ValueError(f"arguments do not broadcast: {shapes}") from exc
    return tuple(
        a if a is b and a.flags.c_contiguous else np.array(b, dtype=np.float64, order="C")
        for a, b in zip(arrays.values(), out, strict=True)
    )


def as_terms(terms: int | None) -> int | None:
    """Check the Approx-J truncation ``terms`` (None or an int >= 1)."""
    if terms is None:
        return None
    if isinstance(terms, bool) or not isinstance(terms, int | np.integer):
        raise ValueError(f"terms must be an int >= 1 or None, got {terms!r}")
    if terms < 1:
        raise ValueError(f"terms must be >= 1, got {terms!r}")
    return int(terms)
