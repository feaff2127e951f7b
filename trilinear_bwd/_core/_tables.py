"""Per-axis source indices and weights, computed once in float64 (docs/numerics.md).

Everything here is O(n) per axis: NumPy over the axis's points, and the two
per-term loops (the backward's grouping, the padded table's fill) in
compiled code (``_table_loops``); no Python loop runs per point or per term,
and nothing is sorted.  The NumPy work runs over the axis in chunks of
:data:`CHUNK` points, whose temporaries stay in cache, and PyTorch's own
coordinates are computed only where they can change the result
(:func:`near_integer_bound`), so that planning an axis of 2**20 points costs
a small multiple of PyTorch's first call of it (docs/performance.md, "Cold
planning").  Tables are cached by bytes
(:data:`CACHE_BYTES`), and a block of a larger call (``trilinear_bwd.dask``)
cuts its table from the whole axis's terms (:class:`AxisTerms`) instead of
rebuilding the axis.
"""

import collections
import contextlib
import functools
import threading
from dataclasses import dataclass

import numpy as np

from . import _fork, _table_loops
# The padded table's block of points (_constants.h, _w_gather.h).
from ._constants import W_BLOCK

# Storage types whose forward weights PyTorch rounds to the storage type
# (see pytorch_coefficients).
HALF_TYPES = ("float16", "bfloat16")


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


def axis_table(n_in, n_out, align_corners, scale, dtype, sentinel=None, forward=False,
               window=None, storage=None):
    """Return one axis of the backward (or the forward) in gather (CSR) form (cached, read-only).

    The kernel computes each *target* point from *source* points: target
    ``i`` receives the terms ``ptr[i] <= t < ptr[i+1]``, each
    ``weight[t] * source[src[t]]``.  For the backward the targets are the
    ``n_in`` input points and the sources the ``n_out`` output points;
    terms are ordered by output point, and where ``x0 == x1`` the ``l0``
    term comes before the ``l1`` term.  For the forward (``forward=True``)
    the same coefficients are read the other way: the targets are the
    output points, each with its two terms ``l0 * x[x0]`` then
    ``l1 * x[x1]``.  Zero weights are kept, so that NaN and Inf propagate
    as in PyTorch.

    Parameters
    ----------
    n_in, n_out, align_corners, scale
        As for :func:`axis_coefficients`.
    dtype : numpy dtype
        PyTorch's opmath type for the data (float32, or float64 for float64
        data): which weights are exactly zero follows PyTorch's rounding in
        it (:func:`pytorch_zero_pattern`).  The weights themselves are the
        float64 coefficients, in float64, the kernel's accumulation type for
        every dtype.
    sentinel : int, optional
        Index of a zero the kernel keeps after the row it gathers from.  When
        given, the table also holds the terms padded to the same count per
        input point, the padding being ``0 * row[sentinel]`` (adding +0 leaves
        every sum unchanged), in blocks of 8 points for the vector gather.
    forward : bool, default False
        The forward's table (targets are output points) instead of the
        backward's.
    window : tuple of 3 int, optional
        ``(t0, t1, s0)``: only targets ``t0 <= i < t1`` of the whole axis,
        numbered from ``t0``, each with all of its terms (the whole axis's
        weights, in the same order), their sources numbered from ``s0`` --
        the table of a block of the result computed from the window of the
        source it reads (:func:`source_range`); what ``trilinear_bwd.dask``
        runs each chunk with.  The block's values are then bitwise those of
        the whole call.  The window is cut from the whole axis's terms
        (:func:`axis_terms`), which are built once.
    storage : dtype or str, optional
        The data's dtype, for the forward of float16 and bfloat16 (see
        :func:`axis_coefficients`); ignored otherwise.

    Returns
    -------
    AxisTable
        ``ptr`` (int64, targets + 1), ``src`` (int64, one per term: 2 * n_out,
        fewer in a window) and ``weight`` (``dtype``, likewise), and the padded
        table (``width`` terms per point; 0 without a sentinel, or past
        ``PADDED_LIMIT``) the W pass reads.  The arrays are read-only and,
        except for a window's, shared between calls with the same arguments
        while the table cache (:data:`CACHE_BYTES`) holds them, so that
        planning a call in a training loop costs microseconds, not
        milliseconds.
    """
    terms = axis_terms(n_in, n_out, align_corners, scale, dtype, forward, storage)
    if window is not None:
        # A block's window is not cached: each block has its own, and kept
        # they would pile up on a Dask worker past the tasks that cut them.
        # Within a window_scope (a task's calls) each is cut once.
        key = (terms.key, sentinel, tuple(map(int, window)))
        memo = getattr(_scope, "tables", None)
        table = None if memo is None else memo.get(key)
        if table is None:
            table = _padded_table(*terms.cut(*key[2]), sentinel)
            if memo is not None:
                memo[key] = table
        return table
    key = ("table", terms.key, sentinel)
    table = _cache.get(key)
    if table is None:
        table = _padded_table(terms.ptr, terms.src, terms.weight, sentinel)
        _cache.put(key, table, table.nbytes)
    return table


_scope = threading.local()
_fork.renew(globals(), "_scope", threading.local)


@contextlib.contextmanager
def window_scope():
    """Within it, this thread's windowed tables are cut once each and shared; forgotten at exit.

    What ``trilinear_bwd.dask`` runs a block's kernel calls in: the calls
    share some of their windows, which nothing outside the task uses.
    """
    outer = getattr(_scope, "tables", None)
    _scope.tables = {} if outer is None else outer
    try:
        yield
    finally:
        _scope.tables = outer


# The padded table holds ceil(n_in / 8) * 8 * width terms, width being the
# most terms any input point receives.  For the sizes and scales PyTorch's
# rules accept, width stays near 3 * n_out / n_in + 4 and the padded table
# within 32 * n_out + 4 * n_in + 32 terms.  A scale that only CANN's rules
# accept (not checked against n_out) can send every output point to one or
# two input points: width up to 2 * n_out, and a padded table n_in * 2 * n_out
# terms large -- terabytes for axes of 2**20.  Past this many times the terms
# plus one per padded point, the table is not padded (width 0) and the W pass
# walks the unpadded one (_kernel_helpers.pxd, w_pass): the same sums.
PADDED_LIMIT = 16

# Bytes of tables and terms the cache keeps (least recently used out): a
# whole axis of 2**20 points and its padded table take about 100 MiB in
# float64, so that one long axis fits and small ones (tens of KiB each)
# stay shared by every call that uses them.
CACHE_BYTES = 128 * 2**20


class _TableCache:
    """Least recently used entries, bounded by their bytes; safe across threads and forks."""

    def __init__(self, limit):
        self.limit = limit
        self._entries = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            return hit[0]

    def put(self, key, value, nbytes):
        if nbytes > self.limit:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.limit:
                _, (_, size) = self._entries.popitem(last=False)
                self._bytes -= size

    def clear(self):
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @property
    def nbytes(self):
        """Bytes held now."""
        return self._bytes

    def _after_fork_in_child(self):
        # A fork while another thread held the lock leaves it held forever
        # in the child; the entries themselves are immutable and stay valid.
        self._lock = threading.Lock()


_cache = _TableCache(CACHE_BYTES)
_fork.at_child(_cache._after_fork_in_child)


def clear_cache():
    """Forget every cached table and axis (tests that count table building call it)."""
    _cache.clear()


class AxisTerms:
    """Every term of one whole axis, sorted by target: the CSR that tables are cut from.

    Attributes
    ----------
    key : tuple
        The arguments it was built from (its cache key).
    ptr : ndarray of int64, shape (n_targets + 1,)
    src : ndarray of int64
        Source point of each term.
    weight : ndarray
        Weight of each term, in float64 (the accumulation type).
    nbytes : int
    """

    def __init__(self, key, ptr, src, weight):
        self.key = key
        self.ptr, self.src, self.weight = ptr, src, weight
        for value in (ptr, src, weight):
            value.flags.writeable = False
        self.nbytes = ptr.nbytes + src.nbytes + weight.nbytes

    def source_range(self, start, stop):
        """``(s0, s1)``: the source points that targets ``start:stop`` read; None: none.

        None only in the backward: downsampling with a given scale can leave
        input points that no output point reads (their gradient is zero).
        """
        used = self.src[self.ptr[start]:self.ptr[stop]]
        if not used.size:
            return None
        return int(used.min()), int(used.max()) + 1

    def cut(self, t0, t1, s0):
        """``(ptr, src, weight)`` of targets ``t0:t1``, sources numbered from ``s0``."""
        a, b = self.ptr[t0], self.ptr[t1]
        return self.ptr[t0:t1 + 1] - a, self.src[a:b] - s0, self.weight[a:b]


def _terms_key(n_in, n_out, align_corners, scale, dtype, forward, storage):
    name = _half_name(storage) if forward else None
    return (int(n_in), int(n_out), bool(align_corners), float(scale), np.dtype(dtype).str,
            bool(forward), name)


def axis_terms(n_in, n_out, align_corners, scale, dtype, forward=False, storage=None):
    """The whole axis's :class:`AxisTerms` (cached): built once, cut into any window.

    Parameters are those of :func:`axis_table`.
    """
    key = _terms_key(n_in, n_out, align_corners, scale, dtype, forward, storage)
    terms = _cache.get(("terms", key))
    if terms is None:
        terms = build_terms(key)
        remember(terms)
    return terms


def remember(terms):
    """Put ``terms`` (from :func:`axis_terms`, perhaps in another process) in the cache.

    ``trilinear_bwd.dask`` builds each axis's terms once, at graph
    construction, as a node of the graph, and each task hands them over
    here before it plans its block, so that no task rebuilds the axis.
    """
    _cache.put(("terms", terms.key), terms, terms.nbytes)


def build_terms(key):
    """Build the :class:`AxisTerms` of ``key`` (see :func:`axis_terms`): O(n) NumPy."""
    n_in, n_out, align_corners, scale, dtype, forward, storage = key
    chunks = _coefficient_chunks(n_in, n_out, align_corners, scale, np.dtype(dtype).type,
                                 storage)
    if forward or n_in == n_out:
        # Targets are the output points, already in order, two terms each:
        # l0's, then l1's (the identity's backward is the same table).
        points = np.empty((n_out, 2), np.int64)
        weight = np.empty((n_out, 2), np.float64)
        for start, x0, x1, l0, l1 in chunks:
            stop = start + x0.size
            points[start:stop, 0], points[start:stop, 1] = x0, x1
            weight[start:stop, 0], weight[start:stop, 1] = l0, l1
        ptr = np.arange(0, 2 * n_out + 1, 2, dtype=np.int64)
        return AxisTerms(key, ptr, points.ravel(), weight.ravel())
    x0, x1 = np.empty(n_out, np.int64), np.empty(n_out, np.int64)
    w0, w1 = np.empty(n_out, np.float64), np.empty(n_out, np.float64)
    for start, c0, c1, l0, l1 in chunks:
        stop = start + c0.size
        x0[start:stop], x1[start:stop], w0[start:stop], w1[start:stop] = c0, c1, l0, l1
    return AxisTerms(key, *_by_input_point(x0, x1, w0, w1, n_in))


def _by_input_point(x0, x1, w0, w1, n_in):
    """The backward's CSR: the terms grouped by input point, stable in their order.

    Input point ``i`` takes the terms that name it in the order they come
    (by output point ``j``, ``l0``'s before ``l1``'s): a counting sort,
    O(n), in compiled code (``_table_loops.group_by_input_point``).

    Returns
    -------
    ptr, src, weight : ndarray
        As :class:`AxisTerms` holds them.
    """
    ptr = np.empty(n_in + 1, np.int64)
    src = np.empty(2 * x0.size, np.int64)
    weight = np.empty(2 * x0.size, w0.dtype)
    _table_loops.group_by_input_point(x0, x1, w0, w1, ptr, src, weight)
    return ptr, src, weight


def source_range(n_in, n_out, align_corners, scale, dtype, forward, start, stop, storage=None):
    """``(s0, s1)``: the source points that targets ``start:stop`` of one axis read.

    Parameters are those of :func:`axis_table`; ``dtype`` matters because
    which point a weight falls on follows PyTorch's rounding in the
    opmath type (:func:`pytorch_zero_pattern`).  None where the
    targets read nothing (the backward's input points that no output point
    reads, :meth:`AxisTerms.source_range`).
    """
    return axis_terms(n_in, n_out, align_corners, scale, dtype, forward,
                      storage).source_range(start, stop)


@dataclass(frozen=True, eq=False)
class AxisTable:
    """The kernel's table of one axis (or window), in the C ``Axis`` struct's field order.

    Built by :func:`axis_table`; the typed plan (``_kernel_plan.KernelPlan``)
    takes the address of each array once.  Every array is C-contiguous,
    read-only and of the dtype the struct names.  Compared by identity
    (``eq=False``): arrays have no truth value to compare with.

    Attributes
    ----------
    ptr, src : ndarray of int64
        Gather form: target point ``i`` receives the terms
        ``ptr[i] <= t < ptr[i+1]``, each ``weight[t] * source[src[t]]``.
    weight : ndarray of float64
    width : int
        Terms per point of the padded table (0: not padded; the W pass
        walks the gather form).
    padded_src, padded_rel : ndarray of int32
    padded_weight : ndarray of float64
        The padded table, blocked by ``W_BLOCK`` points, k-major in a block.
    window, block_window : ndarray of int32
    mode : ndarray of int8
        How the vector W pass reads each (block, k) (``GATHER``, ``WINDOW*``)
        and each block (``block_window``: the window every k shares, or
        ``W_STRIDE3``, or -1).
    """

    __slots__ = ("ptr", "src", "weight", "width", "padded_src", "padded_weight",
                 "padded_rel", "window", "mode", "block_window")

    ptr: np.ndarray
    src: np.ndarray
    weight: np.ndarray
    width: int
    padded_src: np.ndarray
    padded_weight: np.ndarray
    padded_rel: np.ndarray
    window: np.ndarray
    mode: np.ndarray
    block_window: np.ndarray

    def __post_init__(self):
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                value.flags.writeable = False

    @property
    def nbytes(self):
        """Bytes of the table's arrays (what the table cache counts)."""
        return sum(getattr(self, name).nbytes for name in self.__slots__ if name != "width")


def _padded_table(ptr, src, weight, sentinel):
    """The kernel's table of one axis (or window) from its CSR terms."""
    n_targets = ptr.size - 1
    n_terms = int(ptr[-1] - ptr[0])
    ptr = np.ascontiguousarray(ptr, dtype=np.int64)
    src = np.ascontiguousarray(src, dtype=np.int64)
    weight = np.ascontiguousarray(weight)
    # (Terms per point, chunk by chunk: no array of the whole axis's counts.)
    width = max((int((ptr[a + 1:b + 1] - ptr[a:b]).max()) for a, b in _chunks(n_targets)),
                default=0)
    blocks = -(-n_targets // W_BLOCK)
    if sentinel is None or blocks * W_BLOCK * width > PADDED_LIMIT * (n_terms + blocks * W_BLOCK):
        width = 0
    size = blocks * W_BLOCK * width
    padded = dict(padded_src=np.empty(size, np.int32), padded_weight=np.empty(size, weight.dtype),
                  padded_rel=np.empty(size, np.int32), window=np.empty(blocks * width, np.int32),
                  mode=np.empty(blocks * width, np.int8), block_window=np.zeros(blocks, np.int32))
    if width:
        _table_loops.fill_padded(ptr, src, weight, sentinel, **padded)
    return AxisTable(ptr=ptr, src=src, weight=weight, width=width, **padded)
