"""PyTorch's bit-parity rules: its coordinates, rounding and zero weights, emulated in NumPy.

The float64 coefficients (``_coefficients``) are exact; PyTorch's kernel
rounds in its "opmath" type (float32 for float32, float16 and bfloat16
data), fuses a multiply-add, and stores half-type forward weights in the
storage type.  Where that rounding decides which weights are zero (and so
where ``0 * Inf`` makes NaN), the tables follow PyTorch: this module holds
those rules (docs/numerics.md).
"""

import functools

import numpy as np

# Storage types whose forward weights PyTorch rounds to the storage type
# (see pytorch_coefficients).
HALF_TYPES = ("float16", "bfloat16")

# Points whose float64 coordinate lies this close (relative) to an integer
# are where PyTorch's own rounding can make a weight exactly zero or not; a
# coordinate that is not an integer lies at least 1 / (2 * 2**20) from one
# (for the size ratio; an explicit scale can put it anywhere).
_NEAR_INTEGER = 1e-9
# The weight of a term PyTorch has and exact arithmetic has not (its weight
# there is a rounding error): the least normal float32, enough for 0 * Inf
# and Inf * TINY to tell apart, too small to move a finite sum.
TINY = float(np.finfo(np.float32).tiny)


@functools.lru_cache(maxsize=None)
def _unit_roundoff(opmath, storage):
    """The unit roundoff of the type PyTorch holds this axis's weights in."""
    name = _half_name(storage)
    if name == "float16":
        return 2.0 ** -11
    if name == "bfloat16":
        return 2.0 ** -8
    return float(np.finfo(opmath).eps) / 2


@functools.lru_cache(maxsize=None)
def _half_name(storage):
    if storage is None:
        return None
    name = storage if isinstance(storage, str) else np.dtype(storage).name
    return name if name in HALF_TYPES else None


def pytorch_zero_pattern(n_in, n_out, align_corners, scale, opmath, src, x0, x1, l0, l1,
                         storage=None):
    """Make the zero weights those of PyTorch's CPU kernel, in place.

    A zero weight is never skipped, so an Inf in ``grad_out`` (or ``x``)
    becomes NaN exactly where a weight is zero (``0 * Inf``).  Which weights
    are zero depends on rounding, and PyTorch's differs from the float64
    arithmetic here (see :func:`pytorch_coefficients`): it computes in its
    "opmath" type (float32 for float32, float16 and bfloat16 data), its
    compiler fuses ``scale * (j + 0.5) - 0.5`` into one multiply-add, it
    floors the coordinate after rounding it to float32, and its forward
    stores float16 and bfloat16 weights in the storage type (``1 - 2**-12``
    is 1 in float16, and leaves the other weight exactly 0).  Where the
    exact coordinate is an integer, PyTorch's is then often a hair off it:
    a weight of 3e-17 instead of 0, or a zero weight on the neighbouring
    point.

    At every point where PyTorch's pair of points or which of its weights
    are zero differ from the float64 ones, this takes PyTorch's pair and
    zero pattern when doing so is a rounding matter: the float64 coordinate
    is within ``_NEAR_INTEGER`` of an integer, or the exact weight it drops
    is at most the unit roundoff of the type PyTorch holds the weights in.
    The weights stay the exact ones (their sum per point); a term which
    PyTorch weights by a rounding error and exact arithmetic not at all gets
    ``TINY``.  Everywhere else the float64 coefficients stand (PyTorch's
    float32 coordinates drift by more than a rounding on long axes, and the
    library keeps exact weights there).
    """
    # Coordinates of n_in + 1 or more (only from scales that CANN's rules
    # accept and PyTorch's refuse) give x0 = x1 = n_in - 1 and l1 = 1 in
    # PyTorch's rounding as in exact arithmetic; inf is among them.  Below,
    # PyTorch's pair and zero pattern can differ from these only where the
    # coordinate lies within near_integer_bound of an integer: the rest are
    # left alone without computing PyTorch's coordinates.
    with np.errstate(invalid="ignore"):
        near = ((src < n_in + 1)
                & (np.abs(src - np.rint(src)) <= near_integer_bound(src, opmath, storage)))
    _take_pytorch_pattern(n_in, n_out, align_corners, scale, opmath, storage, src, x0, x1, l0,
                          l1, np.flatnonzero(near))


def _take_pytorch_pattern(n_in, n_out, align_corners, scale, opmath, storage, src, x0, x1, l0,
                          l1, inside, start=0):
    """:func:`pytorch_zero_pattern` at the points ``inside`` of the arrays.

    The arrays hold output points ``start`` onwards (a chunk of them, see
    :data:`CHUNK`): the rule is one point at a time.
    """
    if inside.size == 0:
        return
    # (The weights in PyTorch's own type: only which are zero matters here.)
    i0, i1, lam0, lam1 = _pytorch_points(n_in, n_out, align_corners, scale, opmath, storage,
                                         start + inside)
    a0, a1, w0, w1 = x0[inside], x1[inside], l0[inside], l1[inside]
    z0, z1 = lam0 == 0.0, lam1 == 0.0
    differ = (i0 != a0) | (i1 != a1) | (z0 != (w0 == 0.0)) | (z1 != (w1 == 0.0))
    # Usually few points differ: the rest of the work is on those alone.
    d = np.flatnonzero(differ)
    if d.size == 0:
        return
    inside = inside[d]
    i0, i1, z0, z1 = i0[d], i1[d], z0[d], z1[d]
    a0, a1, w0, w1 = a0[d], a1[d], w0[d], w1[d]
    # The exact weight on each of PyTorch's two points (l0, then l1 added).
    e0 = np.where(a0 == i0, w0, 0.0) + np.where(a1 == i0, w1, 0.0)
    e1 = np.where(a0 == i1, w0, 0.0) + np.where(a1 == i1, w1, 0.0)
    distinct = i1 != i0
    # What taking PyTorch's pattern drops of the exact weights: those on
    # points it does not read, and those it weights by zero.
    outside = (np.where((a0 != i0) & (a0 != i1), w0, 0.0)
               + np.where((a1 != i0) & (a1 != i1), w1, 0.0))
    dropped = outside + np.where(z0, e0, 0.0) + np.where(z1 & distinct, e1, 0.0)
    s = src[inside]
    with np.errstate(invalid="ignore"):
        near = np.abs(s - np.rint(s)) <= _NEAR_INTEGER * np.maximum(1.0, s)
    take = near | (dropped <= _unit_roundoff(opmath, storage))
    if not take.any():
        return
    k = inside[take]
    e0, e1, distinct = e0[take], e1[take], distinct[take]
    n0 = np.where(e0 != 0.0, e0, TINY)
    n1 = np.where(distinct, e1, 0.0)
    n1 = np.where(n1 != 0.0, n1, TINY)
    x0[k], x1[k] = i0[take], i1[take]
    l0[k] = np.where(z0[take], 0.0, n0)
    l1[k] = np.where(z1[take], 0.0, n1)


# PyTorch's coordinate of a point lies within about 2**-23 * (src + 1) of
# the float64 one here: its step, rounded to float32, is off by 2**-24 of
# itself, which moves (j + 0.5) * step (or j * step) by 2**-24 * (src + 0.5);
# its float32 coordinate is rounded once more (2**-24 * src); the float64
# arithmetic of both adds a few 2**-53.  _DRIFT * (src + 2) is twice that.
_DRIFT = 2.0 ** -22


def near_integer_bound(src, opmath, storage=None):
    """How close to an integer a coordinate must lie for PyTorch's pattern to differ there.

    PyTorch's ``i0`` (the floor of its coordinate) differs from the floor of
    ``src`` only where an integer lies between the two coordinates, at most
    ``_DRIFT * (src + 2)`` apart; its weights are exactly 0 or 1 only where
    its coordinate is an integer (a difference of nearby floats is exact),
    or for float16/bfloat16 weights, where ``lambda1`` is within that
    type's unit roundoff of 0 or 1 (it rounds to them).  The bound is the
    sum of the two; ``tests/test_tables.py`` checks that every point where
    PyTorch's pattern differs lies within it.

    Parameters
    ----------
    src : ndarray of float64
        Coordinates (>= 0).
    opmath, storage
        As for :func:`axis_coefficients`.

    Returns
    -------
    ndarray of float64
    """
    return _DRIFT * (src + 2.0) + _unit_roundoff(opmath, storage)


def _round_float16(values):
    return values.astype(np.float16).astype(np.float32)


def _round_bfloat16(values):
    """Round float32 values in [0, 1] to bfloat16, nearest-even, as float32."""
    bits = values.astype(np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) \
        & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def _two_sum(a, b):
    s = a + b
    v = s - a
    return s, (a - (s - v)) + (b - v)


def _two_product(a, b):
    """``p + e == a * b`` exactly (Dekker), for finite values far from overflow."""
    p = a * b
    f = 134217729.0  # 2**27 + 1 splits a double into two 26-bit halves
    ah = a * f
    ah = ah - (ah - a)
    al = a - ah
    bh = b * f
    bh = bh - (bh - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def fma64(a, b, c):
    """``a * b + c`` rounded once to float64, elementwise (what a fused multiply-add gives).

    Boldo and Melquiond's emulation ("Emulation of FMA and correctly rounded
    sums: proved algorithms using rounding to odd", IEEE TC 2008): the
    product and the sum split exactly into high and low parts, the low
    parts added with rounding to odd, then one rounding to nearest.  Valid
    for finite operands whose product is far from overflow and underflow
    (``tests/test_tables.py`` checks it against exact rationals).
    """
    uh, ul = _two_product(a, b)
    th, tl = _two_sum(c, uh)
    v, w = _two_sum(tl, ul)
    # Round to odd: an inexact v with an even significand moves one ulp
    # toward the exact value.
    inexact = (w != 0.0) & ((v.view(np.int64) & 1) == 0)
    v = np.where(inexact, np.nextafter(v, np.where(w > 0.0, np.inf, -np.inf)), v)
    return th + v


def pytorch_coefficients(n_in, n_out, align_corners, scale, opmath, storage=None, points=None):
    """PyTorch's ``(i0, i1, lambda0, lambda1)`` per output point, rounded as its kernel rounds.

    Mirrors ``area_pixel_compute_scale``, ``area_pixel_compute_source_index``,
    ``guard_index_and_lambda`` and ``compute_source_index_and_lambda``
    (ATen's ``native/UpSample.h``) as PyTorch 2.13's x86-64 (AVX2, AVX-512)
    and aarch64 builds execute them: in ``opmath`` (``at::opmath_type``:
    float32 for float32, float16 and bfloat16 data), with the multiply-add
    of the half-pixel coordinate fused, ``floorf`` of the coordinate (so a
    float64 coordinate is rounded to float32 before it is floored).  The
    backward (``cpu_upsample_linear_backward``, both layouts) keeps the
    lambdas in ``opmath``; the forward's generic kernel
    (``HelperInterpLinear::compute_indices_weights``, which PyTorch runs for
    NCDHW input and for channels-last input of up to 3 channels) stores
    them in the data's own type, so for float16 and bfloat16 (``storage``)
    ``lambda1`` is rounded to it and ``lambda0 = 1 - lambda1`` is computed
    from the rounded value and rounded again.

    Parameters
    ----------
    n_in, n_out, align_corners, scale, opmath, storage
        As for :func:`axis_coefficients`.
    points : ndarray of int64, optional
        The output points to compute (all by default).

    Returns
    -------
    i0, i1 : ndarray of int64
    lambda0, lambda1 : ndarray of float64
        The values PyTorch's kernel holds (exactly representable in float64).
    """
    j = np.arange(n_out, dtype=np.int64) if points is None else np.asarray(points, np.int64)
    i0, i1, lam0, lam1 = _pytorch_points(n_in, n_out, align_corners, scale, opmath, storage, j)
    return i0, i1, lam0.astype(np.float64), lam1.astype(np.float64)


def _pytorch_points(n_in, n_out, align_corners, scale, opmath, storage, j):
    """:func:`pytorch_coefficients` of points ``j``, the lambdas in PyTorch's own type."""
    if n_in == n_out:
        return j, j.copy(), np.ones(j.size), np.zeros(j.size)
    single = np.dtype(opmath) == np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        if single:
            f32 = np.float32
            if align_corners:
                step = f32(n_in - 1) / f32(n_out - 1) if n_out > 1 else f32(0)
                real = step * j.astype(f32)
            else:
                step = f32(1.0 / scale) if scale > 0 else f32(n_in) / f32(n_out)
                # The fused step * (j + 0.5) - 0.5: exact in float64 wherever
                # it is >= 0 (a 24-bit step times a 21-bit j + 0.5, minus
                # 0.5), so the cast to float32 is its one rounding.
                real = ((np.float64(step) * (j + 0.5)) - 0.5).astype(f32)
                real = np.maximum(real, f32(0))
            base = real
        else:
            if align_corners:
                step = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
                real = j * step
            else:
                step = 1.0 / scale if scale > 0 else n_in / n_out
                h = j + 0.5
                if np.isfinite(step) and 0.0 < step < 2.0 ** 900:
                    real = fma64(np.full(j.size, step), h, np.full(j.size, -0.5))
                else:
                    # Inf or 0 (scales only CANN's rules accept): no
                    # rounding to emulate that would change the clamps.
                    real = step * h - 0.5
                real = np.maximum(real, 0.0)
            base = real.astype(np.float32)
        i0 = np.minimum(np.floor(base.astype(np.float64)), n_in - 1).astype(np.int64)
        t = np.float32 if single else np.float64
        lam1 = np.minimum(np.maximum(real - i0.astype(t), t(0)), t(1))
    i1 = np.minimum(i0 + 1, n_in - 1)  # (i0 <= n_in - 1 already)
    name = _half_name(storage)
    if name is not None and single:
        rnd = _round_float16 if name == "float16" else _round_bfloat16
        lam1 = rnd(lam1)
        lam0 = rnd(np.float32(1) - lam1)
    else:
        lam0 = t(1) - lam1
    return i0, i1, lam0, lam1
