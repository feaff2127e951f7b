"""Shared helpers: dtypes, layouts, the reference comparison."""

import numpy as np
import pytest

from trilinear_bwd import reference

DTYPES = ["float32", "float64", "float16", "bfloat16"]
FULL_DTYPES = ["float32", "float64"]
HALF_DTYPES = ["float16", "bfloat16"]
# Layouts of grad_out: the two contiguous ones and views the kernel reads
# through general strides.
IN_LAYOUTS = ["ncdhw", "ndhwc", "strided", "reversed", "transposed"]
OUT_LAYOUTS = ["ncdhw", "ndhwc"]


def np_dtype(name):
    """The NumPy dtype for a dtype name (bfloat16 from ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def in_layout(values, layout):
    """Return an array equal to ``values`` (N, C, D, H, W) laid out as ``layout``."""
    n, c, d, h, w = values.shape
    if layout == "ncdhw":
        return np.ascontiguousarray(values)
    if layout == "ndhwc":
        return np.ascontiguousarray(values.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    if layout == "strided":
        # Steps in D and W, an offset start, and a padded H: no axis is unit-stride.
        buf = np.zeros((n, c, 2 * d, h + 1, 2 * w + 1), dtype=values.dtype)
        view = buf[:, :, ::2, :h, 1::2]
    elif layout == "reversed":
        buf = np.zeros_like(values)
        view = buf[::-1, :, ::-1, :, ::-1]
    elif layout == "transposed":
        buf = np.zeros((c, n, d, w, h), dtype=values.dtype)
        view = buf.transpose(1, 0, 2, 4, 3)
    else:
        raise ValueError(layout)
    view[...] = values
    return view


def out_array(shape, dtype, layout):
    """A grad_input of ``shape`` in ``layout``, filled with NaN bytes (0xFF)."""
    n, c, d, h, w = shape
    if layout == "ncdhw":
        base = np.empty(shape, dtype=dtype)
        arr = base
    elif layout == "ndhwc":
        base = np.empty((n, d, h, w, c), dtype=dtype)
        arr = base.transpose(0, 4, 1, 2, 3)
    else:
        raise ValueError(layout)
    base.view(np.uint8)[...] = 0xFF
    return arr


def random_grad(shape, dtype, seed=0):
    """Standard-normal values, exactly representable in ``dtype``."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np_dtype(dtype))


def assert_matches_reference(result, grad_out, input_size, align_corners=False,
                             scales=(0.0, 0.0, 0.0)):
    """Check ``result`` against the float64 reference within the spec's bound.

    float32/float64: the summation bound of ``reference.error_bound``.
    float16/bfloat16: one ulp of the storage type at the exact value, plus
    the float32 accumulation bound.
    """
    exact = reference.backward(grad_out.astype(np.float64), input_size, align_corners, scales,
                               reference.opmath_of(result.dtype))
    bound = reference.error_bound(grad_out, input_size, align_corners, scales, result.dtype)
    got = result.astype(np.float64)
    err = np.abs(got - exact)
    bad = ~(err <= bound)
    if bad.any():
        k = np.unravel_index(np.argmax(np.where(bad, err - bound, -np.inf)), err.shape)
        pytest.fail(
            f"{bad.sum()} of {err.size} elements outside the bound; worst at {k}: "
            f"got {got[k]!r}, exact {exact[k]!r}, bound {bound[k]!r}"
        )


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")
