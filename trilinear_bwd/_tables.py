"""Per-axis source indices and weights, computed once in float64 (spec, "Precision")."""

import functools

import numpy as np

# How the vector W pass reads one (block, k) of the padded table (_w_gather.h).
GATHER, WINDOW8, WINDOW16, WINDOW32 = 0, 1, 2, 3


def axis_coefficients(n_in, n_out, align_corners, scale, opmath=np.float64):
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

    Returns
    -------
    x0, x1 : ndarray of int64, shape (n_out,)
    l0, l1 : ndarray of float64, shape (n_out,)
    """
    j = np.arange(n_out, dtype=np.int64)
    if n_in == n_out:
        # The identity, whatever the scale (as PyTorch and CANN do).
        return j, j.copy(), np.ones(n_out), np.zeros(n_out)
    if align_corners:
        step = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        src = j * step
    else:
        # Any positive finite scale reaches here under CANN's rules (which
        # do not check it against n_out): 1 / scale may be huge or inf, and
        # so may the coordinates.
        step = 1.0 / scale if scale > 0 else n_in / n_out
        with np.errstate(over="ignore"):
            src = np.maximum((j + 0.5) * step - 0.5, 0.0)
    # Clamped before the cast, which is undefined past 2**63: beyond
    # n_in - 1 the clamp below gives the same x0, x1 and l1 either way.
    x0 = np.minimum(np.floor(np.minimum(src, n_in)), n_in - 1).astype(np.int64)
    x1 = np.minimum(x0 + 1, n_in - 1)
    l1 = np.clip(src - x0, 0.0, 1.0)
    l0 = 1.0 - l1
    pytorch_zero_pattern(n_in, n_out, align_corners, scale, opmath, src, x0, x1, l0, l1)
    return x0, x1, l0, l1


# Points whose float64 coordinate lies this close (relative) to an integer
# are where PyTorch's own rounding can make a weight exactly zero or not; a
# coordinate that is not an integer lies at least 1 / (2 * 2**20) from one.
_NEAR_INTEGER = 1e-9
# The weight of a term PyTorch has and exact arithmetic has not (its weight
# there is a rounding error): the least normal float32, enough for 0 * Inf
# and Inf * TINY to tell apart, too small to move a finite sum.
TINY = float(np.finfo(np.float32).tiny)


def pytorch_zero_pattern(n_in, n_out, align_corners, scale, opmath, src, x0, x1, l0, l1):
    """Make the zero weights those of PyTorch's CPU kernel, in place.

    A zero weight is never skipped, so an Inf in ``grad_out`` becomes NaN
    exactly where a weight is zero (``0 * Inf``).  Which weights are zero
    depends on rounding, and PyTorch's differs from the float64 arithmetic
    here in three ways (see :func:`_pytorch_point`): it computes in its
    "opmath" type (float32 for float32, float16 and bfloat16 data), its
    compiler fuses ``scale * (j + 0.5) - 0.5`` into one multiply-add, and it
    floors the coordinate after rounding it to float32.  Where the exact
    coordinate is an integer, PyTorch's is then often a hair off it: a weight
    of 3e-17 instead of 0, or a zero weight on the neighbouring point.  At
    those points only -- where the float64 coordinate is within
    ``_NEAR_INTEGER`` of an integer -- this takes PyTorch's pair of points
    and which of its weights are zero, whenever they differ; the weights
    stay the exact ones (their sum per point), except that a term which
    PyTorch weights by a rounding error and exact arithmetic not at all gets
    ``TINY``.  Everywhere else the float64 coefficients stand.
    """
    # Coordinates of n_in + 1 or more (only from scales that CANN's rules
    # accept and PyTorch's refuse) give x0 = x1 = n_in - 1 and l1 = 1 in
    # PyTorch's rounding as in exact arithmetic; inf is among them.
    with np.errstate(invalid="ignore"):
        near = (src < n_in + 1) & (
            np.abs(src - np.rint(src)) <= _NEAR_INTEGER * np.maximum(1.0, src))
    for k in np.flatnonzero(near):
        i0, i1, lam0, lam1 = _pytorch_point(n_in, n_out, align_corners, scale, opmath, int(k))
        if (i0, i1) == (x0[k], x1[k]) and (lam0 == 0.0) == (l0[k] == 0.0) \
                and (lam1 == 0.0) == (l1[k] == 0.0):
            continue
        exact = {int(x0[k]): float(l0[k])}
        exact[int(x1[k])] = exact.get(int(x1[k]), 0.0) + float(l1[k])
        w0 = exact.get(i0, 0.0) or TINY
        w1 = (exact.get(i1, 0.0) if i1 != i0 else 0.0) or TINY
        x0[k], x1[k] = i0, i1
        l0[k] = w0 if lam0 != 0.0 else 0.0
        l1[k] = w1 if lam1 != 0.0 else 0.0


def _pytorch_point(n_in, n_out, align_corners, scale, opmath, j):
    """PyTorch's ``(i0, i1, lambda0, lambda1)`` for output point ``j``, rounded as its kernel rounds.

    Mirrors ``area_pixel_compute_scale``, ``area_pixel_compute_source_index``
    and ``guard_index_and_lambda`` (ATen's UpSample.h) as its x86-64 and
    aarch64 builds execute them: in ``opmath``, with the multiply-add of the
    half-pixel coordinate fused, and ``floorf`` of the coordinate.
    """
    t = np.float32 if np.dtype(opmath) == np.float32 else np.float64
    if align_corners:
        step = t(n_in - 1) / t(n_out - 1) if n_out > 1 else t(0)
        real = t(step * t(j))
    else:
        step = t(1.0 / scale) if scale > 0 else t(n_in) / t(n_out)
        # fma(step, j + 0.5, -0.5), rounded once: exactly, as a ratio of
        # integers, which Python divides with correct rounding; for float32
        # the float64 quotient is exact wherever it is >= 0 (a product of
        # two float32 values, minus 0.5), so the cast is the one rounding.
        num, den = float(step).as_integer_ratio()
        real = max(t((num * (2 * j + 1) - den) / (2 * den)), t(0))
    i0 = min(int(np.floor(np.float32(real))), n_in - 1)
    i1 = min(i0 + 1, n_in - 1)
    lam1 = min(max(t(real - t(i0)), t(0)), t(1))
    lam0 = t(1) - lam1
    return i0, i1, float(lam0), float(lam1)


def axis_table(n_in, n_out, align_corners, scale, dtype, sentinel=None, forward=False,
               window=None):
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
        The accumulation type the weights are rounded to (float32 or float64).
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
        the whole call.

    Returns
    -------
    dict
        ``ptr`` (int64, targets + 1), ``src`` (int64, one per term: 2 * n_out,
        fewer in a window) and ``weight`` (``dtype``, likewise), and the padded table (``width`` terms per
        point; 0 without a sentinel, or past ``PADDED_LIMIT``) the W pass reads.  The
        arrays are read-only; for axes of up to ``CACHED_POINTS`` points they
        are shared between calls with the same arguments, so that planning a
        call in a training loop costs microseconds, not milliseconds.
    """
    args = (int(n_in), int(n_out), bool(align_corners), float(scale), np.dtype(dtype).str,
            sentinel, bool(forward), None if window is None else tuple(map(int, window)))
    if n_in + n_out <= CACHED_POINTS:
        return _cached_axis_table(*args)
    return _axis_table(*args)


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

# Small axes' tables are cached (a few hundred KiB at most in all); large
# ones are rebuilt, so that the cache never pins much memory.
CACHED_POINTS = 4096


def _terms(n_in, n_out, align_corners, scale, dtype, forward):
    """Every term of one axis: ``(target, source, weight, n_targets)``, by output point."""
    x0, x1, l0, l1 = axis_coefficients(n_in, n_out, align_corners, scale, np.dtype(dtype).type)
    points = np.stack([x0, x1], axis=1).ravel()
    outputs = np.repeat(np.arange(n_out, dtype=np.int64), 2)
    weight = np.stack([l0, l1], axis=1).ravel()
    if forward:
        return outputs, points, weight, n_out
    return points, outputs, weight, n_in


def source_range(n_in, n_out, align_corners, scale, dtype, forward, start, stop):
    """``(s0, s1)``: the source points that targets ``start:stop`` of one axis read.

    Parameters are those of :func:`axis_table`; ``dtype`` matters because
    which point a weight falls on follows PyTorch's rounding in the
    accumulation type (:func:`pytorch_zero_pattern`).  Every target has at
    least one term, so the range is never empty.
    """
    target, source, _, _ = _terms(n_in, n_out, align_corners, scale, dtype, forward)
    used = source[(target >= start) & (target < stop)]
    return int(used.min()), int(used.max()) + 1


def _axis_table(n_in, n_out, align_corners, scale, dtype, sentinel, forward=False,
                window=None):
    # Below, "n_targets" points are computed, each from terms of the source.
    target, source, weight, n_targets = _terms(n_in, n_out, align_corners, scale, dtype,
                                               forward)
    if window is not None:
        t0, t1, s0 = window
        keep = (target >= t0) & (target < t1)
        target, source, weight = target[keep] - t0, source[keep] - s0, weight[keep]
        n_targets = t1 - t0
    n_terms = target.size
    order = np.argsort(target, kind="stable")
    counts = np.bincount(target, minlength=n_targets)
    ptr = np.zeros(n_targets + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    src = np.ascontiguousarray(source[order])
    weight = np.ascontiguousarray(weight[order].astype(dtype))
    width = int(counts.max()) if n_targets else 0
    table = {"ptr": ptr, "src": src, "weight": weight}
    blocks = -(-n_targets // 8)
    if sentinel is None or blocks * 8 * width > PADDED_LIMIT * (n_terms + blocks * 8):
        width = 0
    padded_src = np.full((blocks * 8, width), sentinel or 0, dtype=np.int32)
    padded_weight = np.zeros((blocks * 8, width), dtype=dtype)
    real = np.zeros((blocks * 8, width), dtype=bool)
    if width:
        slot = np.arange(n_terms) - np.repeat(ptr[:-1], counts)
        padded_src[target[order], slot] = src
        padded_weight[target[order], slot] = weight
        real[target[order], slot] = True
    # Blocks of 8 points, k-major inside a block (the layout _w_gather.h reads).
    padded_src = padded_src.reshape(blocks, 8, width).transpose(0, 2, 1)
    padded_weight = padded_weight.reshape(blocks, 8, width).transpose(0, 2, 1)
    real = real.reshape(blocks, 8, width).transpose(0, 2, 1)
    # Where a block's 8 real sources for one k lie within 8, 16 or 32
    # consecutive elements, the vector paths read them as a window instead of
    # a gather (_w_gather.h);
    # where all of a block's sources (every k) lie within 8, one window read
    # serves the whole block (block_window >= 0).
    big = np.iinfo(np.int32).max
    lowest = np.where(real, padded_src, big).min(axis=2)
    highest = np.where(real, padded_src, -1).max(axis=2)
    lowest = np.where(highest < 0, 0, lowest)
    span = highest - lowest
    mode = np.select([span < 8, span < 16, span < 32], [WINDOW8, WINDOW16, WINDOW32],
                     GATHER).astype(np.int8)
    block_low = np.where(real, padded_src, big).min(axis=(1, 2)) if width else np.zeros(blocks)
    block_high = np.where(real, padded_src, -1).max(axis=(1, 2)) if width else np.zeros(blocks)
    shared = (block_high - block_low < 8) & (block_high >= 0)
    lowest = np.where(shared[:, None], block_low[:, None], lowest)
    mode[shared] = WINDOW8
    block_window = np.where(shared, block_low, -1).astype(np.int32)
    window = lowest.astype(np.int32)
    padded_rel = np.where(real, padded_src - lowest[:, :, None], -1).astype(np.int32)
    padded_src = padded_src.ravel()
    padded_weight = padded_weight.ravel()
    padded_rel = padded_rel.ravel()
    window = window.ravel()
    mode = mode.ravel()
    table.update(width=width, padded_src=padded_src, padded_weight=padded_weight,
                 padded_rel=padded_rel, window=window, mode=mode, block_window=block_window)
    for value in table.values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return table


_cached_axis_table = functools.lru_cache(maxsize=256)(_axis_table)
