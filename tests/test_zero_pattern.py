"""Where NaN and Inf appear, against PyTorch: every dtype, both directions, Inf at single positions.

The class behind the float16 case below: which weights are *exactly* zero decides
whether an Inf becomes NaN (``0 * Inf``) or stays Inf, and PyTorch's zeros
come from its own rounding (float32 coordinates for float32 and half data,
a fused multiply-add, ``floorf``, and float16/bfloat16 forward weights stored
in the storage type).  A seeded grid of axes -- up- and downsampling, same
size, one point, both coordinate modes, with and without explicit scales --
is probed with one Inf at a time, so that each output's NaN/Inf says which
of its terms are zero.  PyTorch runs on NCDHW tensors, the layout whose
kernel (``HelperInterpLinear``) the tables follow (docs/numerics.md).
"""

import math

import numpy as np
import pytest

import trilinear_bwd as tb

from conftest import DTYPES, np_dtype

torch = pytest.importorskip("torch")

TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64,
                "float16": torch.float16, "bfloat16": torch.bfloat16}


def cases(seed, count):
    """(input DHW, output DHW, align_corners, scales): a seeded grid of small axes."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        ins, outs, scales = [], [], []
        align = bool(rng.integers(2))
        explicit = not align and rng.integers(2) == 1
        for _ in range(3):
            n_in = int(rng.integers(1, 10))
            kind = rng.integers(4)
            if explicit:
                # A scale that is a ratio of small integers (or not): the
                # output size is F.interpolate's floor(n_in * scale).
                s = [float(rng.integers(1, 13)) / float(rng.integers(1, 7)),
                     float(rng.uniform(0.3, 5.0))][int(rng.integers(2))]
                n_out = max(1, math.floor(n_in * s))
                s = s if math.floor(n_in * s) == n_out else n_out / n_in
            else:
                n_out = [n_in, int(rng.integers(1, 25)), max(1, n_in // 2), 1][kind]
                s = 0.0
            ins.append(n_in)
            outs.append(n_out)
            scales.append(s)
        yield tuple(ins), tuple(outs), align, tuple(scales)


def probes(shape, rng, count=6):
    """Single-Inf arrays of ``shape`` (its corners, then random positions), sign varied."""
    positions = {(0,) * 5, tuple(n - 1 for n in shape)}
    while len(positions) < min(count, int(np.prod(shape))):
        positions.add(tuple(int(rng.integers(n)) for n in shape))
    for k, p in enumerate(sorted(positions)):
        a = np.zeros(shape)
        a[p] = np.inf if k % 2 == 0 else -np.inf
        yield p, a


def torch_forward(x, outs, align, scales):
    if any(scales):
        return torch.nn.functional.interpolate(x, scale_factor=scales, mode="trilinear",
                                               align_corners=align,
                                               recompute_scale_factor=False)
    return torch.nn.functional.interpolate(x, size=outs, mode="trilinear",
                                           align_corners=align)


def same_pattern(got, ref):
    got = np.asarray(got).astype(np.float64)
    ref = ref.to(torch.float64).numpy()
    return all(np.array_equal(f(got), f(ref)) for f in (np.isnan, np.isposinf, np.isneginf))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
def test_forward_nan_inf_positions_match_torch(dtype, seed):
    rng = np.random.default_rng(100 + seed)
    for ins, outs, align, scales in cases(seed, 40):
        for p, a in probes((1, 2) + ins, rng):
            x = a.astype(np_dtype(dtype))
            ref = torch_forward(torch.from_numpy(a).to(TORCH_DTYPES[dtype]), outs, align,
                                scales)
            got = tb.upsample_trilinear3d(x, outs, align_corners=align, scales=scales)
            assert same_pattern(got, ref), (ins, outs, align, scales, p)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
def test_backward_nan_inf_positions_match_torch(dtype, seed):
    rng = np.random.default_rng(200 + seed)
    for ins, outs, align, scales in cases(10 + seed, 40):
        for p, a in probes((1, 2) + outs, rng):
            g = a.astype(np_dtype(dtype))
            ref = torch.ops.aten.upsample_trilinear3d_backward(
                torch.from_numpy(a).to(TORCH_DTYPES[dtype]), outs, (1, 2) + ins, align,
                *[s or None for s in scales])
            got = tb.upsample_trilinear3d_backward(g, (1, 2) + ins, align_corners=align,
                                                   scales=scales)
            assert same_pattern(got, ref), (ins, outs, align, scales, p)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("n_in, n_out", [(1, 3), (2, 512), (3, 4100), (5, 2049), (7, 300)])
def test_forward_long_axis_zero_pattern_matches_torch(dtype, n_in, n_out):
    # Axes long enough for float16's and bfloat16's rounding of a weight to
    # 1 (1 - 2**-12, 1 - 2**-9) to zero the other weight in PyTorch's forward.
    for p in range(n_in):
        a = np.zeros((1, 1, 2, 1, n_in))
        a[0, 0, 0, 0, p] = np.inf
        ref = torch_forward(torch.from_numpy(a).to(TORCH_DTYPES[dtype]), (3, 2, n_out), False,
                            (0.0, 0.0, 0.0))
        got = tb.upsample_trilinear3d(a.astype(np_dtype(dtype)), (3, 2, n_out))
        assert same_pattern(got, ref), p


def test_the_reported_float16_case():
    # A 1**3 float16 inf to (2, 2, 3): a weight zero in float32 but not in float64.
    x = torch.full((1, 1, 1, 1, 1), float("inf"), dtype=torch.float16)
    ref = torch.nn.functional.interpolate(x, size=(2, 2, 3), mode="trilinear")
    got = tb.upsample_trilinear3d(x.numpy(), (2, 2, 3))
    assert np.isnan(ref.numpy()).sum() == 11
    assert same_pattern(got, ref)
