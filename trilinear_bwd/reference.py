"""A slow, plain-NumPy reference of the operator, in float64.

Written straight from the contract (``docs/operator.md``) and independent of
the fast path: the coordinate formula is transcribed per output point, and the
backward scatters every output voxel onto its 8 input voxels with the product
of the three weights -- the formula applied directly, not separably.  Used by
the tests and by ``python -m trilinear_bwd`` to check the kernels; far too slow
for real work.
"""

import math

import numpy as np


def source_coefficients(n_in, n_out, align_corners, scale=0.0, opmath=np.float64, storage=None):
    """Per output point of one axis: ``(x0, x1, l0, l1)``, transcribed from the spec.

    Parameters
    ----------
    n_in, n_out : int
        Input and output points on the axis.
    align_corners : bool
    scale : float
        The forward multiplier; <= 0 means "not given".
    opmath : {numpy.float64, numpy.float32}
        The type PyTorch computes the coordinates of the data's dtype in:
        which weights are exactly zero follows PyTorch's rounding there
        (``trilinear_bwd._core._pytorch_rounding.pytorch_zero_pattern``, the one rule this
        reference shares with the kernel's tables).
    storage : dtype, optional
        float16 or bfloat16 for the forward of those types, whose weights
        PyTorch's forward rounds to the storage type (the same rule).

    Returns
    -------
    list of tuple
        ``n_out`` tuples ``(x0, x1, l0, l1)``.
    """
    from ._core._pytorch_rounding import pytorch_zero_pattern

    coefficients = []
    for j in range(n_out):
        if n_in == n_out:
            coefficients.append((j, j, 1.0, 0.0))
            continue
        if align_corners:
            step = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
            src = j * step
        else:
            step = 1.0 / scale if scale > 0 else n_in / n_out
            src = max(0.0, (j + 0.5) * step - 0.5)
        # (src may be huge or inf for a scale only CANN's rules accept:
        # min() before floor(), which cannot take inf.)
        x0 = min(math.floor(min(src, n_in)), n_in - 1)
        x1 = min(x0 + 1, n_in - 1)
        l1 = min(max(src - x0, 0.0), 1.0)
        coefficients.append((x0, x1, 1.0 - l1, l1))
    if n_in != n_out and coefficients:
        x0, x1, l0, l1 = (np.array(v) for v in zip(*coefficients))
        src = np.array([j * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0) if align_corners
                        else max(0.0, (j + 0.5) * (1.0 / scale if scale > 0 else n_in / n_out)
                                 - 0.5) for j in range(n_out)])
        pytorch_zero_pattern(n_in, n_out, align_corners, scale, opmath, src, x0, x1, l0, l1,
                             storage)
        coefficients = [(int(a), int(b), float(c), float(d)) for a, b, c, d in zip(x0, x1, l0, l1)]
    return coefficients


def opmath_of(dtype):
    """The type PyTorch computes coordinates in for data of ``dtype`` (float64 only for float64)."""
    return np.float64 if np.dtype(dtype).name == "float64" else np.float32


def _corners(n_in, n_out, align_corners, scale, opmath, storage=None):
    """Two (index, weight) pairs of arrays, one per corner of the axis."""
    c = np.array(source_coefficients(n_in, n_out, align_corners, scale, opmath, storage),
                 dtype=np.float64)
    c = c.reshape(n_out, 4)
    return [(c[:, 0].astype(np.int64), c[:, 2]), (c[:, 1].astype(np.int64), c[:, 3])]


def _eight_corners(spatial_in, spatial_out, align_corners, scales, opmath, storage=None,
                   precision=np.float64):
    """For each of the 8 corners: input indices (a, b, e) and weights (their
    float64 values multiplied in ``precision``), as arrays broadcast over the
    output grid (oD, oH, oW)."""
    cd, ch, cw = (_corners(int(i), int(o), align_corners, s, opmath, storage)
                  for i, o, s in zip(spatial_in, spatial_out, scales))
    cd, ch, cw = ([(i, w.astype(precision)) for i, w in axis] for axis in (cd, ch, cw))
    for a, wa in cd:
        for b, wb in ch:
            for e, we in cw:
                yield (a[:, None, None], b[None, :, None], e[None, None, :],
                       wa[:, None, None] * wb[None, :, None] * we[None, None, :])


def backward(grad_out, input_size, align_corners=False, scales=(0.0, 0.0, 0.0),
             opmath=None, precision=np.float64):
    """The backward of trilinear upsampling, summed voxel by voxel in float64 (or ``precision``).

    Parameters
    ----------
    grad_out : array_like, shape (N, C, oD, oH, oW)
    input_size : sequence of 5 int
        ``(N, C, iD, iH, iW)``.
    align_corners : bool
    scales : sequence of 3 float
    opmath : {numpy.float64, numpy.float32}, optional
        See :func:`source_coefficients`; by default that of ``grad_out``'s
        dtype (pass it when ``grad_out`` was widened from another dtype).
    precision : {numpy.float64, numpy.longdouble}
        The type the products of the (float64) weights and the data are
        formed and summed in: ``numpy.longdouble`` (64 significant bits on
        x86-64, 113 on aarch64 Linux) makes the result the exact value to
        well within the kernels' bound, to test that bound itself
        (``docs/numerics.md``, "One rounding"); slower.

    Returns
    -------
    ndarray of ``precision``, shape ``input_size``
        ``grad_input[n, c, a, b, e] = sum over (x, y, z) of
        grad_out[n, c, x, y, z] * wD(x -> a) * wH(y -> b) * wW(z -> e)``.
    """
    g = np.asarray(grad_out)
    opmath = opmath_of(g.dtype) if opmath is None else opmath
    g = g.astype(np.float64)
    n, c, od, oh, ow = g.shape
    _, _, id_, ih, iw = (int(v) for v in input_size)
    slices = n * c
    g = g.reshape(slices, od * oh * ow)
    result = np.zeros((slices, id_ * ih * iw), precision)
    wide = np.dtype(precision) != np.float64
    if wide:
        g = g.astype(precision)
    for a, b, e, weight in _eight_corners((id_, ih, iw), (od, oh, ow), align_corners, scales,
                                          opmath, precision=precision):
        target = ((a * ih + b) * iw + e).ravel()
        for s in range(slices):
            if wide:  # (np.bincount sums in float64 only)
                np.add.at(result[s], target, g[s] * weight.ravel())
            else:
                result[s] += np.bincount(target, weights=g[s] * weight.ravel(),
                                         minlength=id_ * ih * iw)
    return result.reshape(n, c, id_, ih, iw)


def forward(x, output_size, align_corners=False, scales=(0.0, 0.0, 0.0), opmath=None,
            storage=None, precision=np.float64):
    """Trilinear upsampling of ``x`` (N, C, iD, iH, iW) to ``output_size``, in float64 (or ``precision``).

    The adjoint of :func:`backward` (with the same ``opmath``, and no
    ``storage``): for any ``x`` and ``g``, ``sum(forward(x) * g) ==
    sum(x * backward(g))`` up to rounding.  ``opmath`` and ``storage``
    (:func:`source_coefficients`) default to those of ``x``'s dtype; pass
    them when ``x`` was widened from another dtype.  ``precision`` as for
    :func:`backward`.
    """
    x = np.asarray(x)
    if opmath is None:
        opmath, storage = opmath_of(x.dtype), x.dtype
    x = x.astype(np.float64).astype(precision)
    n, c, id_, ih, iw = x.shape
    od, oh, ow = (int(v) for v in output_size)
    out = np.zeros((n, c, od, oh, ow), precision)
    for a, b, e, weight in _eight_corners((id_, ih, iw), (od, oh, ow), align_corners, scales,
                                          opmath, storage, precision):
        out += x[:, :, a, b, e] * weight
    return out


_STORAGE = {  # significand bits (with the implicit one), minimum normal exponent
    "float16": (11, -14),
    "bfloat16": (8, -126),
    "float32": (24, -126),
    "float64": (53, -1022),
}


def ulp(x, dtype):
    """Spacing of ``dtype`` numbers at ``|x|`` (float64; subnormal spacing near 0).

    Parameters
    ----------
    x : array_like
    dtype : {"float16", "bfloat16", "float32", "float64"} or dtype
    """
    bits, emin = _STORAGE[np.dtype(dtype).name]
    x = np.abs(np.asarray(x, dtype=np.float64))
    e = np.where(x > 0, np.floor(np.log2(np.where(x > 0, x, 1.0))), emin)
    return np.exp2(np.maximum(e, emin) - (bits - 1))


def _terms_per_point(n_in, n_out, align_corners, scale, opmath, backward):
    """The most terms one target point of the axis sums (the ``m`` of the bound)."""
    if not backward:
        return 2
    counts = np.zeros(int(n_in), dtype=np.int64)
    for x0, x1, _, _ in source_coefficients(int(n_in), n_out, align_corners, scale, opmath):
        counts[x0] += 1
        counts[x1] += 1
    return int(counts.max())


def _bound(exact_abs, magnitudes, terms, corners, dtype, precision):
    """``|result - reference(precision)|`` at most: see :func:`error_bound`."""
    name = np.dtype(dtype).name
    u = 2.0 ** -53
    # The kernel: every product and sum in float64, K = terms + 6 units of
    # 2**-53 of the terms' magnitudes (the weights of the reference and of
    # the kernel's tables may differ in their last bit: 3 units), and an
    # absolute unit for products below float64's normal range (the TINY
    # weights of _pytorch_rounding.pytorch_zero_pattern times tiny data).
    kernel = (terms + 6) * (u * magnitudes + float(np.finfo(np.float64).smallest_subnormal))
    if name != "float64":
        # ... then one rounding to the result's dtype.
        kernel = kernel + 0.5 * ulp(exact_abs + kernel, name)
    # The reference's own error: products of four numbers and sums of up to
    # `corners` of them, in `precision`.
    r = float(np.finfo(precision).eps) / 2
    return kernel + (corners + 3) * (r * magnitudes + float(np.finfo(precision).smallest_subnormal))


def error_bound(grad_out, input_size, align_corners=False, scales=(0.0, 0.0, 0.0),
                dtype=np.float32, precision=np.float64):
    """A rigorous bound on the kernel's error against :func:`backward` in ``precision``.

    The kernel sums in float64 for every dtype, axis by axis, each target
    point's ``m`` products of an axis in order, and rounds each result once
    to its dtype.  Against the exact value (the float64 weights applied to
    the data, summed exactly), each element is therefore within

        ``(mD + mH + mW + 6) * 2**-53 * |B|(|grad_out|)``

    before that rounding, and within half an ulp of its dtype more after it
    (``docs/numerics.md``, "One rounding"), where ``m`` is the longest sum
    of an axis and ``|B|(|grad_out|)`` the backward of ``|grad_out|``, the
    sum of the terms' magnitudes.  Added to it: the reference's own error in
    ``precision`` (products of four numbers, sums of up to ``mD * mH * mW``
    terms), which ``numpy.longdouble`` makes small beside it.

    Parameters
    ----------
    grad_out, input_size, align_corners, scales
        As for :func:`backward`.
    dtype : dtype
        The storage type of the result (float32, float64, float16, bfloat16).
    precision : {numpy.float64, numpy.longdouble}
        That of the reference the result is compared with.

    Returns
    -------
    ndarray of float64, shape ``input_size``
    """
    opmath = opmath_of(dtype)
    od, oh, ow = np.shape(grad_out)[2:]
    ms = [_terms_per_point(n_in, n_out, align_corners, scales[k], opmath, True)
          for k, (n_in, n_out) in enumerate(zip(input_size[2:], (od, oh, ow)))]
    g = np.asarray(grad_out).astype(np.float64)
    magnitudes = backward(np.abs(g), input_size, align_corners, scales, opmath).astype(np.float64)
    exact_abs = np.abs(backward(g, input_size, align_corners, scales, opmath, precision))
    return _bound(exact_abs.astype(np.float64), magnitudes, sum(ms), ms[0] * ms[1] * ms[2],
                  dtype, precision)


def forward_error_bound(x, output_size, align_corners=False, scales=(0.0, 0.0, 0.0),
                        precision=np.float64):
    """A rigorous bound on the forward kernel's error against :func:`forward` in ``precision``.

    As :func:`error_bound`, with two terms a point on each axis:
    ``(2 + 2 + 2 + 6) * 2**-53`` of the forward of ``|x|``, then half an ulp
    of the result's dtype (``docs/numerics.md``, "One rounding"), plus the
    reference's own error (sums of 8 products).

    Parameters
    ----------
    x, output_size, align_corners, scales
        As for :func:`forward`; ``x`` in its storage dtype.
    precision : {numpy.float64, numpy.longdouble}
        That of the reference the result is compared with.

    Returns
    -------
    ndarray of float64, shape ``(N, C) + output_size``
    """
    x = np.asarray(x)
    with np.errstate(invalid="ignore"):  # 0 * Inf is NaN, as it should be
        magnitudes = forward(np.abs(x), output_size, align_corners, scales).astype(np.float64)
        exact_abs = np.abs(forward(x, output_size, align_corners, scales,
                                   precision=precision)).astype(np.float64)
        return _bound(exact_abs, magnitudes, 6, 8, x.dtype, precision)


