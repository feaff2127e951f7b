"""float16 / bfloat16 conversions: exhaustive against NumPy / ml_dtypes, both variants."""

import numpy as np
import pytest

from trilinear_bwd._core import _dispatch

VARIANTS = _dispatch.available_variants()


@pytest.fixture(params=VARIANTS)
def kernels(request):
    return _dispatch.kernel_module(request.param)


def all_halves():
    return np.arange(2**16, dtype=np.uint32).astype(np.uint16)


@pytest.mark.parametrize("soft", [False, True])
def test_half_to_float_exhaustive(kernels, soft):
    bits = all_halves()
    got = kernels.half_to_float_bits(bits, soft)
    expected = bits.view(np.float16).astype(np.float32)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(got[finite].view(np.uint32), expected[finite].view(np.uint32))
    assert np.isnan(got[np.isnan(expected)]).all()
    np.testing.assert_array_equal(got[np.isinf(expected)], expected[np.isinf(expected)])


def float_samples():
    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 65536,
                        2.0**-24, 2.0**-25, 2.0**-25 * 1.0000001, 3 * 2.0**-25, 2.0**-14,
                        2.0**-14 * (1 - 2.0**-11), 6.0975552e-05, 1e-8, 1.0 + 2.0**-11,
                        1.0 + 3 * 2.0**-11], dtype=np.float32)
    every_exponent = (rng.integers(0, 2**32, 2**20, dtype=np.uint64)
                      .astype(np.uint32).view(np.float32))
    near_half = (rng.standard_normal(2**18) * 1e-4).astype(np.float32)
    return np.concatenate([special, -special, every_exponent, near_half])


@pytest.mark.parametrize("soft", [False, True])
def test_float_to_half_rounds_to_nearest_even(kernels, soft):
    x = float_samples()
    got = kernels.float_to_half_bits(x, soft)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(np.float16)
    ok = ~np.isnan(x)
    np.testing.assert_array_equal(got[ok], expected.view(np.uint16)[ok])
    assert np.isnan(got[~ok].view(np.float16)).all()


def test_soft_and_hardware_paths_agree_bit_for_bit_including_nan_payloads():
    kernels = _dispatch.kernel_module(VARIANTS[0])
    if not kernels.has_f16c():
        pytest.skip("no F16C variant here")
    x = float_samples()
    np.testing.assert_array_equal(kernels.float_to_half_bits(x, False),
                                  kernels.float_to_half_bits(x, True))
    bits = all_halves()
    np.testing.assert_array_equal(kernels.half_to_float_bits(bits, False).view(np.uint32),
                                  kernels.half_to_float_bits(bits, True).view(np.uint32))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_final_rounding_matches_numpy_and_ml_dtypes(dtype):
    """The kernel rounds its float32 sum once, to nearest-even, as NumPy/ml_dtypes do.

    With W = 1 <- 2 (align_corners False) every input point receives
    ((0 + 1*a) + 0*a) + 0.75*b + 0.25*b from its two output points, and D, H
    are identities; the float32 sum is emulated in NumPy, then rounded.
    """
    import ml_dtypes

    import trilinear_bwd as tb

    storage = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)
    rng = np.random.default_rng(1)
    g = (rng.standard_normal((1, 4, 1, 4096, 2)) * np.exp2(rng.integers(-12, 12, (1, 4, 1, 4096, 1))))
    g = g.astype(storage)
    a, b = (g[..., k].astype(np.float32) for k in (0, 1))
    f32 = np.float32
    total = ((((f32(0) + f32(1) * a) + f32(0) * a) + f32(0.75) * b) + f32(0.25) * b)
    with np.errstate(over="ignore"):
        expected = total.astype(storage)[..., None]
    got = tb.upsample_trilinear3d_backward(g, (1, 4, 1, 4096, 1))
    assert (got.view(np.uint16) != g[..., :1].view(np.uint16)).any()  # rounding did happen
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))
