"""Agreement with ``torch.ops.aten.upsample_trilinear3d_backward`` (skipped without torch)."""

import numpy as np
import pytest
from conftest import DTYPES, IN_LAYOUTS, in_layout, random_grad

import trilinear_bwd as tb

CASES = [
    (2, 3, (4, 5, 6), (7, 9, 11), False, None),
    (2, 3, (4, 5, 6), (7, 9, 11), True, None),
    (1, 2, (5, 4, 3), (5, 8, 2), False, None),
    (1, 4, (9, 8, 7), (4, 3, 5), False, None),
    (1, 2, (4, 5, 6), (10, 7, 15), False, (2.5, 1.5, 2.5)),
    (2, 2, (3, 3, 3), (1, 1, 1), True, None),
    (1, 1, (16, 16, 16), (32, 32, 32), False, None),
]

# PyTorch computes float32 coordinates in float32 (about 1e-7 relative error in
# each weight) and sums in its own order; these bounds cover both sides.
RTOL = {"float32": 2e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.6e-2}


def torch_dtype(torch, name):
    return getattr(torch, name)


def torch_backward(torch, g, input_size, align_corners, scales):
    t = torch.from_numpy(np.ascontiguousarray(g.astype(np.float32) if g.dtype.itemsize == 2
                                              and g.dtype.name == "bfloat16" else g))
    if g.dtype.name == "bfloat16":
        t = t.to(torch.bfloat16)
    s = scales or (None, None, None)
    return torch.ops.aten.upsample_trilinear3d_backward(
        t, list(g.shape[2:]), list(input_size), align_corners, *s)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_agrees_with_torch(torch, dtype, case):
    n, c, ins, outs, ac, scales = case
    g = random_grad((n, c) + outs, dtype, seed=7)
    expected = torch_backward(torch, g, (n, c) + ins, ac, scales).to(torch.float64).numpy()
    got = tb.upsample_trilinear3d_backward(g, (n, c) + ins, align_corners=ac,
                                           scales=scales or (0, 0, 0)).astype(np.float64)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(got, expected, rtol=RTOL[dtype], atol=RTOL[dtype] * scale)


@pytest.mark.parametrize("layout", IN_LAYOUTS)
def test_agrees_with_torch_channels_last_and_views(torch, layout):
    g = random_grad((2, 5, 8, 9, 10), "float32", seed=8)
    expected = torch_backward(torch, g, (2, 5, 3, 4, 5), False, None).numpy()
    got = tb.upsample_trilinear3d_backward(in_layout(g, layout), (3, 4, 5))
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5 * np.abs(expected).max())


def test_nan_inf_pattern_matches_torch(torch):
    rng = np.random.default_rng(3)
    g = rng.standard_normal((1, 2, 6, 7, 8))
    g.flat[rng.choice(g.size, 12, replace=False)] = np.inf
    g.flat[rng.choice(g.size, 6, replace=False)] = -np.inf
    g.flat[rng.choice(g.size, 6, replace=False)] = np.nan
    for ins in ((3, 7, 4), (6, 4, 8), (12, 14, 3)):
        expected = torch_backward(torch, g, (1, 2) + ins, False, None).numpy()
        got = tb.upsample_trilinear3d_backward(g, (1, 2) + ins)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(expected))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(expected))


def test_cann_worked_example_matches_torch(torch):
    g = np.arange(1, 33, dtype=np.float32).reshape(2, 2, 2, 2, 2)
    expected = torch_backward(torch, g, (2, 2, 1, 1, 1), False, None).numpy()
    np.testing.assert_array_equal(tb.upsample_trilinear3d_backward(g, (2, 2, 1, 1, 1)), expected)


def test_float64_tables_beat_torch_float32_tables_on_long_axes(torch):
    """The spec's precision claim: float64 tables stay near float32 rounding."""
    from trilinear_bwd import reference

    g = random_grad((1, 1, 1, 1, 6001), "float32", seed=11)
    exact = reference.backward(g.astype(np.float64), (1, 1, 1, 1, 2999), opmath=np.float32)
    ours = tb.upsample_trilinear3d_backward(g, (1, 1, 1, 1, 2999)).astype(np.float64)
    theirs = torch_backward(torch, g, (1, 1, 1, 1, 2999), False, None).numpy().astype(np.float64)
    scale = np.abs(g).max()
    assert np.abs(ours - exact).max() <= 1e-6 * scale
    assert np.abs(ours - exact).max() < np.abs(theirs - exact).max()
