"""Property tests (hypothesis): random shapes and parameters, and the adjoint identity."""

import numpy as np
from conftest import DTYPES, IN_LAYOUTS, OUT_LAYOUTS, assert_matches_reference, in_layout, np_dtype
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trilinear_bwd as tb
from trilinear_bwd import reference

axis = st.integers(1, 12)


@st.composite
def problems(draw):
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    ins = tuple(draw(axis) for _ in range(3))
    align = draw(st.booleans())
    outs, scales = [], []
    for i in ins:
        if not align and draw(st.booleans()):
            s = draw(st.floats(0.3, 3.5, allow_nan=False))
            o = int(np.floor(i * s))
            if o >= 1:
                outs.append(o)
                scales.append(s)
                continue
        outs.append(draw(axis))
        scales.append(0.0)
    return (n, c) + ins, tuple(outs), align, tuple(scales)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.sampled_from(DTYPES), st.sampled_from(IN_LAYOUTS),
       st.sampled_from(OUT_LAYOUTS), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_random_problems_match_reference(problem, dtype, layout, out_layout, threads, seed):
    input_size, outs, align, scales = problem
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(input_size[:2] + outs).astype(np_dtype(dtype))
    out = tb.upsample_trilinear3d_backward(in_layout(g, layout), input_size, align_corners=align,
                                           scales=scales, num_threads=threads)
    assert_matches_reference(out, g, input_size, align, scales)


@settings(max_examples=examples(100), deadline=None)
@given(problems(), st.integers(0, 2**32 - 1))
def test_adjoint_identity(problem, seed):
    """<forward(x), g> == <x, backward(g)>: an independent check of the whole operator."""
    input_size, outs, align, scales = problem
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(input_size)
    g = rng.standard_normal(input_size[:2] + outs)
    lhs = np.sum(reference.forward(x, outs, align, scales) * g)
    gi = tb.upsample_trilinear3d_backward(g, input_size, align_corners=align, scales=scales)
    rhs = np.sum(x * gi)
    scale = np.sum(np.abs(reference.forward(np.abs(x), outs, align, scales) * g))
    assert abs(lhs - rhs) <= 1e-12 * scale + 1e-300


def test_adjoint_identity_float32_large():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 6, 7, 8))
    g = rng.standard_normal((2, 3, 13, 11, 17)).astype(np.float32)
    lhs = np.sum(reference.forward(x, (13, 11, 17)) * g)
    rhs = np.sum(x * tb.upsample_trilinear3d_backward(g, (6, 7, 8)).astype(np.float64))
    scale = np.sum(np.abs(reference.forward(np.abs(x), (13, 11, 17)) * g))
    assert abs(lhs - rhs) <= 1e-6 * scale
