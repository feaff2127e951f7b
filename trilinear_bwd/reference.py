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
        (``trilinear_bwd._tables.pytorch_zero_pattern``, the one rule this
        reference shares with the kernel's tables).
    storage : dtype, optional
        float16 or bfloat16 for the forward of those types, whose weights
        PyTorch's forward rounds to the storage type (the same rule).

    Returns
    -------
    list of tuple
        ``n_out`` tuples ``(x0, x1, l0, l1)``.
    """
    from ._tables import pytorch_zero_pattern

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


def _eight_corners(spatial_in, spatial_out, align_corners, scales, opmath, storage=None):
    """For each of the 8 corners: input indices (a, b, e) and weights, as
    arrays broadcast over the output grid (oD, oH, oW)."""
    cd, ch, cw = (_corners(int(i), int(o), align_corners, s, opmath, storage)
                  for i, o, s in zip(spatial_in, spatial_out, scales))
    for a, wa in cd:
        for b, wb in ch:
            for e, we in cw:
                yield (a[:, None, None], b[None, :, None], e[None, None, :],
                       wa[:, None, None] * wb[None, :, None] * we[None, None, :])


def backward(grad_out, input_size, align_corners=False, scales=(0.0, 0.0, 0.0),
             opmath=None):
    """The backward of trilinear upsampling, summed voxel by voxel in float64.

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

    Returns
    -------
    ndarray of float64, shape ``input_size``
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
    result = np.zeros((slices, id_ * ih * iw))
    for a, b, e, weight in _eight_corners((id_, ih, iw), (od, oh, ow), align_corners, scales,
                                          opmath):
        target = ((a * ih + b) * iw + e).ravel()
        for s in range(slices):
            result[s] += np.bincount(target, weights=g[s] * weight.ravel(),
                                     minlength=id_ * ih * iw)
    return result.reshape(n, c, id_, ih, iw)


def forward(x, output_size, align_corners=False, scales=(0.0, 0.0, 0.0), opmath=None,
            storage=None):
    """Trilinear upsampling of ``x`` (N, C, iD, iH, iW) to ``output_size``, in float64.

    The adjoint of :func:`backward` (with the same ``opmath``, and no
    ``storage``): for any ``x`` and ``g``, ``sum(forward(x) * g) ==
    sum(x * backward(g))`` up to rounding.  ``opmath`` and ``storage``
    (:func:`source_coefficients`) default to those of ``x``'s dtype; pass
    them when ``x`` was widened from another dtype.
    """
    x = np.asarray(x)
    if opmath is None:
        opmath, storage = opmath_of(x.dtype), x.dtype
    x = x.astype(np.float64)
    n, c, id_, ih, iw = x.shape
    od, oh, ow = (int(v) for v in output_size)
    out = np.zeros((n, c, od, oh, ow))
    for a, b, e, weight in _eight_corners((id_, ih, iw), (od, oh, ow), align_corners, scales,
                                          opmath, storage):
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


def error_bound(grad_out, input_size, align_corners=False, scales=(0.0, 0.0, 0.0),
                dtype=np.float32):
    """A rigorous first-order bound on the kernel's error against :func:`backward`.

    Each of the three passes sums at most ``m`` products in the accumulation
    type, with weights rounded to that type, so each output element is within
    ``(mD + mH + mW + 6) * u`` of the exact value, relative to the same
    backward applied to ``|grad_out|`` (``u`` is the unit roundoff of the
    accumulation type, ``m`` the longest sum on an axis).  For float16 and
    bfloat16 results, rounded once at the end, one ulp of the storage type
    at the exact value is added.

    Parameters
    ----------
    grad_out, input_size, align_corners, scales
        As for :func:`backward`.
    dtype : dtype
        The storage type of the result (float32, float64, float16, bfloat16).

    Returns
    -------
    ndarray of float64, shape ``input_size``
    """
    name = np.dtype(dtype).name
    acc = opmath_of(dtype)
    u = np.finfo(acc).eps / 2
    od, oh, ow = np.shape(grad_out)[2:]
    terms = 0
    for k, (n_in, n_out) in enumerate(zip(input_size[2:], (od, oh, ow))):
        counts = np.zeros(int(n_in), dtype=np.int64)
        for x0, x1, _, _ in source_coefficients(int(n_in), n_out, align_corners, scales[k],
                                                acc):
            counts[x0] += 1
            counts[x1] += 1
        terms += int(counts.max())
    g = np.asarray(grad_out).astype(np.float64)
    bound = (terms + 6) * u * backward(np.abs(g), input_size, align_corners, scales, acc)
    # Products too small for a normal number of the accumulation type (the
    # TINY weights of _tables.pytorch_zero_pattern) carry an absolute error.
    bound = bound + (terms + 6) * float(np.finfo(acc).smallest_subnormal)
    if name in ("float16", "bfloat16"):
        bound = bound + ulp(backward(g, input_size, align_corners, scales, acc), name)
    return bound


def forward_error_bound(x, output_size, align_corners=False, scales=(0.0, 0.0, 0.0)):
    """A first-order bound on the forward kernel's error against :func:`forward`.

    The forward sums two terms per axis in three passes, in the accumulation
    type with weights rounded to it, so each output element is within
    ``12 * u`` of the same forward applied to ``|x|`` (``u`` the unit
    roundoff of the accumulation type), plus 12 of that type's smallest
    subnormal for products too small for a normal number (the tiny weights
    of PyTorch's zero pattern).  For float16 and bfloat16 results, rounded
    once at the end, one ulp of the storage type at the exact value is
    added (``docs/numerics.md``, "The forward").

    Parameters
    ----------
    x, output_size, align_corners, scales
        As for :func:`forward`; ``x`` in its storage dtype.

    Returns
    -------
    ndarray of float64, shape ``(N, C) + output_size``
    """
    x = np.asarray(x)
    acc = opmath_of(x.dtype)
    u = np.finfo(acc).eps / 2
    with np.errstate(invalid="ignore"):  # 0 * Inf is NaN, as it should be
        bound = 12 * u * forward(np.abs(x), output_size, align_corners, scales)
        bound = bound + 12 * float(np.finfo(acc).smallest_subnormal)
        if x.dtype.name in ("float16", "bfloat16"):
            bound = bound + ulp(forward(x, output_size, align_corners, scales), x.dtype)
    return bound
