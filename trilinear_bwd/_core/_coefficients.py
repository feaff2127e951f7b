"""Per-axis source indices and weights, computed once in float64, chunk by chunk (docs/numerics.md).

Everything here is O(n) per axis: NumPy over the axis's points, in chunks of
:data:`CHUNK` points whose temporaries stay in cache, and PyTorch's own
coordinates are computed only where they can change the result
(:func:`~._pytorch_rounding.near_integer_bound`), so that planning an axis
of 2**20 points costs a small multiple of PyTorch's first call of it
(docs/performance.md, "Cold planning").  No Python loop runs per point, and
nothing is sorted.
"""

import numpy as np

from ._pytorch_rounding import _take_pytorch_pattern, near_integer_bound


# Output points per chunk of the per-point NumPy work (coefficients, zero
# pattern, the padded table's width): the few dozen temporaries of a chunk stay in the
# L2 cache and their memory is reused, where whole-axis temporaries of a long
# axis would stream through memory and fault in fresh pages, operation after
# operation; and a chunk is long enough that NumPy's per-call cost is small
# beside its work.
CHUNK = 2**15


def _chunks(n):
    """``(start, stop)`` of consecutive chunks covering ``range(n)``, CHUNK long."""
    for start in range(0, n, CHUNK):
        yield start, min(n, start + CHUNK)


def _coordinates(n_in, n_out, align_corners, scale, j):
    """The float64 source coordinate of output points ``j`` (clamped at 0)."""
    if align_corners:
        step = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        return j * step
    # Any positive finite scale reaches here under CANN's rules (which do
    # not check it against n_out): 1 / scale may be huge or inf, and so may
    # the coordinates.
    step = 1.0 / scale if scale > 0 else n_in / n_out
    with np.errstate(over="ignore"):
        return np.maximum((j + 0.5) * step - 0.5, 0.0)


def axis_coefficients(n_in, n_out, align_corners, scale, opmath=np.float64, storage=None):
    """Return the forward interpolation coefficients of one axis.

    Output point ``j`` reads ``l0[j] * x[x0[j]] + l1[j] * x[x1[j]]``.

    Parameters
    ----------
    n_in, n_out : int
        Input and output points on the axis (both > 0).
    align_corners : bool
        Corner-aligned (True) or half-pixel (False) coordinates.
    scale : float
        The user's forward multiplier for the axis; <= 0 means "not given".
        Only used when ``align_corners`` is False.
    opmath : {numpy.float64, numpy.float32}
        The type PyTorch computes this dtype's coordinates in (float64 for
        float64 data, float32 otherwise): see :func:`pytorch_zero_pattern`.
    storage : dtype or str, optional
        ``float16`` or ``bfloat16`` for the forward of those types, whose
        weights PyTorch's forward rounds to the storage type (see
        :func:`pytorch_coefficients`); None (the backward, and every other
        dtype) when the weights stay in ``opmath``.

    Returns
    -------
    x0, x1 : ndarray of int64, shape (n_out,)
    l0, l1 : ndarray of float64, shape (n_out,)
    """
    if n_in == n_out:
        # The identity, whatever the scale (as PyTorch and CANN do).
        j = np.arange(n_out, dtype=np.int64)
        return j, j.copy(), np.ones(n_out), np.zeros(n_out)
    x0, x1 = np.empty(n_out, np.int64), np.empty(n_out, np.int64)
    l0, l1 = np.empty(n_out), np.empty(n_out)
    for start, c0, c1, w0, w1 in _coefficient_chunks(n_in, n_out, align_corners, scale, opmath,
                                                     storage):
        stop = start + c0.size
        x0[start:stop], x1[start:stop], l0[start:stop], l1[start:stop] = c0, c1, w0, w1
    return x0, x1, l0, l1


def _coefficient_chunks(n_in, n_out, align_corners, scale, opmath, storage):
    """``(start, x0, x1, l0, l1)`` of each chunk of output points (:func:`axis_coefficients`).

    Every operation is elementwise in the point, so the chunks' values are
    those of the whole axis computed at once, bit for bit.
    """
    for start, stop in _chunks(n_out):
        j = np.arange(start, stop, dtype=np.int64)
        if n_in == n_out:
            yield start, j, j.copy(), np.ones(j.size), np.zeros(j.size)
            continue
        src = _coordinates(n_in, n_out, align_corners, scale, j)
        # x0 = floor(min(src, n_in - 1)): clamped before the cast, which is
        # undefined past 2**63.  src >= x0, so the fraction past x0 is >= 0
        # (past 1 only where the coordinate is clamped, l1 then 1).
        x0 = np.floor(np.minimum(src, n_in - 1))
        fraction = src - x0
        l1 = np.minimum(fraction, 1.0)
        l0 = 1.0 - l1
        x0 = x0.astype(np.int64)
        x1 = np.minimum(x0 + 1, n_in - 1)
        # The points within near_integer_bound of an integer (and clamped
        # points), inside: a superset of pytorch_zero_pattern's.
        with np.errstate(invalid="ignore"):
            near = np.abs(fraction - 0.5) >= 0.5 - near_integer_bound(src, opmath, storage)
            near &= src < n_in + 1
        _take_pytorch_pattern(n_in, n_out, align_corners, scale, opmath, storage, src, x0, x1,
                              l0, l1, np.flatnonzero(near), start)
        yield start, x0, x1, l0, l1
