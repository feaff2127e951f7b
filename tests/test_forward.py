"""The forward operator, trilinear upsampling (``upsample_trilinear3d``).

Checked against PyTorch's ``F.interpolate`` (float32, float64), against the
float64 ``reference.forward`` for every dtype and layout (within the bound of
docs/numerics.md; half types within one ulp of the storage type), through the
adjoint identity with the library's own backward, for bitwise determinism
across thread counts and layouts, on CANN's worked example, for the status
codes of the one call, the two-phase call and ``trilinear_bwd.aclnn`` (and for
``out`` being left alone on error), for CANN's scale rule against PyTorch's,
for the executor lifecycle, and in ``trilinear_bwd.torch`` (the aten override,
autograd, the fallback for calls outside the contract).
"""

import math

import numpy as np
import pytest
from conftest import (
    examples,
    sample_product,
    DTYPES,
    FULL_DTYPES,
    HALF_DTYPES,
    IN_LAYOUTS,
    OUT_LAYOUTS,
    in_layout,
    np_dtype,
    out_array,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trilinear_bwd as tb
from trilinear_bwd._core import _axis_table, _pytorch_rounding
from trilinear_bwd import aclnn, reference

OK = tb.ACLNN_SUCCESS
NULL, INVALID = tb.ACLNN_ERR_PARAM_NULLPTR, tb.ACLNN_ERR_PARAM_INVALID
RUNTIME = tb.ACLNN_ERR_RUNTIME_ERROR
ZERO_SCALES = (0.0, 0.0, 0.0)
# Against PyTorch: relative to the largest |x| (PyTorch computes float32 weights
# in float32 and sums in another order, so only these tolerances hold).
TORCH_TOL = {"float64": 1e-12, "float32": 1e-5}

# (N, C, input DHW, output DHW): up, down, odd sizes, mixed, identity and size-1 axes.
SHAPES = [
    (2, 3, (4, 5, 6), (7, 9, 11)),
    (2, 3, (3, 5, 7), (7, 4, 13)),
    (1, 2, (9, 8, 7), (4, 3, 5)),
    (1, 2, (5, 4, 3), (5, 8, 2)),
    (1, 1, (1, 1, 1), (3, 4, 5)),
    (2, 2, (3, 3, 3), (1, 1, 1)),
    (1, 2, (2, 3, 17), (5, 7, 40)),
]
# (input DHW, scale factors): output size floor(in * scale), consistent scales.
SCALE_CASES = [
    ((4, 5, 6), (1.5, 2.0, 2.5)),
    ((5, 6, 7), (1.02, 2.2, 0.6)),
    ((7, 6, 5), (0.5, 0.5, 0.7)),
]


def random_x(shape, dtype, seed=0, low=None):
    """Standard-normal values (or uniform in [low, 4) if ``low`` is given), exact in ``dtype``."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape) if low is None else rng.uniform(low, 4.0, shape)
    return values.astype(np_dtype(dtype))


def size_from_scales(ins, scales):
    """F.interpolate's output size for ``scale_factor``: floor(in * scale) per axis."""
    return tuple(math.floor(i * s) for i, s in zip(ins, scales))


def exact(x, output_size, align_corners=False, scales=ZERO_SCALES):
    """The float64 reference of ``x`` with the zero pattern of ``x``'s dtype."""
    opmath = reference.opmath_of(x.dtype)
    with np.errstate(invalid="ignore"):  # 0 * Inf and Inf - Inf are NaN, as they should be
        return reference.forward(np.asarray(x).astype(np.float64), output_size, align_corners,
                                 scales, opmath, storage=x.dtype)


def forward_bound(x, output_size, align_corners=False, scales=ZERO_SCALES):
    """docs/numerics.md's bound on the forward's error, per output element.

    Three passes of two-term sums in the accumulation type, weights rounded to
    it: ``12 u`` of the forward of ``|x|`` (plus subnormal slack for the tiny
    weights of ``_pytorch_rounding.pytorch_zero_pattern``); for half types one ulp of the
    storage type at the exact value on top (the final rounding).
    """
    acc = reference.opmath_of(x.dtype)
    u = np.finfo(acc).eps / 2
    magnitude = exact(np.abs(np.asarray(x).astype(np.float64)).astype(x.dtype), output_size,
                      align_corners, scales)
    bound = 12 * u * magnitude + 12 * float(np.finfo(acc).smallest_subnormal)
    if x.dtype.name in HALF_DTYPES:
        bound = bound + reference.ulp(exact(x, output_size, align_corners, scales), x.dtype)
    return bound


def assert_within(got, expected, bound, what=""):
    """Fail with the worst element if ``|got - expected| > bound`` anywhere (NaN fails)."""
    got = np.asarray(got).astype(np.float64)
    err = np.abs(got - expected)
    bad = ~(err <= bound)
    if bad.any():
        k = np.unravel_index(np.argmax(np.where(bad, err - bound, -np.inf)), err.shape)
        bound = np.broadcast_to(bound, err.shape)
        pytest.fail(f"{what}{bad.sum()} of {err.size} elements outside the bound; worst at {k}: "
                    f"got {got[k]!r}, expected {expected[k]!r}, bound {bound[k]!r}")


def assert_matches_reference(result, x, output_size, align_corners=False, scales=ZERO_SCALES):
    """``result`` is within :func:`forward_bound` of the float64 reference."""
    assert result.dtype == x.dtype
    assert result.shape == x.shape[:2] + tuple(output_size)
    assert_within(result, exact(x, output_size, align_corners, scales),
                  forward_bound(x, output_size, align_corners, scales))


def two_phase(x, output_size, align_corners=False, scales=ZERO_SCALES, out_layout="ncdhw",
              num_threads=None, fill=0xFF):
    """Run get_forward_workspace_size + execute into a new ``out``; workspace full of ``fill``."""
    out = out_array(x.shape[:2] + tuple(output_size), x.dtype, out_layout)
    size, executor = tb.get_forward_workspace_size(x, output_size, align_corners, *scales, out,
                                                   num_threads=num_threads)
    assert executor.op == "forward"
    workspace = tb.alloc_workspace(size)
    workspace[...] = fill
    tb.execute(workspace, size, executor)
    assert executor.state == "consumed"
    return out


def bits(arr):
    """The bytes of ``arr`` in logical (C) order, for bitwise comparison."""
    return np.ascontiguousarray(arr).view(np.uint8)


def is_ndhwc(arr):
    """Whether ``arr`` (N, C, D, H, W) is laid out channels-last."""
    return arr.transpose(0, 2, 3, 4, 1).flags.c_contiguous


def assert_layout(arr, layout):
    """``arr`` is a contiguous ``layout`` array (with C == 1 both layouts are one)."""
    assert is_ndhwc(arr) if layout == "ndhwc" else arr.flags.c_contiguous, arr.strides


# -- 1. against F.interpolate ------------------------------------------------------------------

def interpolate(torch, x, **kw):
    """PyTorch's own result (with this library's override off) as float64 NumPy."""
    import trilinear_bwd.torch as tbt

    assert not tbt.is_enabled()
    t = torch.from_numpy(np.ascontiguousarray(x))
    if is_ndhwc(x):
        t = t.contiguous(memory_format=torch.channels_last_3d)
    return torch.nn.functional.interpolate(t, mode="trilinear", **kw).double().numpy()


@pytest.mark.parametrize("dtype", FULL_DTYPES)
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_interpolate_with_size(torch, dtype, layout, align_corners, shape):
    n, c, ins, outs = shape
    x = in_layout(random_x((n, c) + ins, dtype, seed=1), layout)
    y = tb.upsample_trilinear3d(x, outs, align_corners)
    assert y.shape == (n, c) + outs and y.dtype == x.dtype
    assert_layout(y, layout)  # the input's layout
    expected = interpolate(torch, x, size=outs, align_corners=align_corners)
    assert_within(y, expected, TORCH_TOL[dtype] * np.abs(x).max())


@pytest.mark.parametrize("dtype", FULL_DTYPES)
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
@pytest.mark.parametrize("case", SCALE_CASES, ids=str)
def test_matches_interpolate_with_scale_factor(torch, dtype, layout, case):
    ins, scales = case
    x = in_layout(random_x((2, 3) + ins, dtype, seed=2), layout)
    outs = size_from_scales(ins, scales)
    expected = interpolate(torch, x, scale_factor=scales)
    assert expected.shape[2:] == outs
    tol = TORCH_TOL[dtype] * np.abs(x).max()
    # output_size None: floor(in * scale); and the same with the size given too.
    for y in (tb.upsample_trilinear3d(x, None, False, scales),
              tb.upsample_trilinear3d(x, outs, False, scales)):
        assert y.shape == expected.shape
        assert_within(y, expected, tol)
    if any(o != i and i / o != 1 / s for i, o, s in zip(ins, outs, scales)):
        # The scales matter here: 1/scale is the step, not the size ratio.
        by_ratio = tb.upsample_trilinear3d(x, outs, False)
        assert np.abs(by_ratio - expected).max() > 1e3 * tol


# -- 2. half types: one ulp -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc", "strided"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape", SHAPES[:4], ids=str)
def test_half_types_within_one_ulp(dtype, layout, align_corners, shape):
    # Positive data: no cancellation, so the float32 sums are far inside one
    # ulp of the storage type and the single final rounding gives at most
    # half an ulp more.  (With signed data an exact result near 0 can be
    # off by more than one ulp of itself, as the documented bound allows:
    # see test_half_types_signed_within_documented_bound.)
    n, c, ins, outs = shape
    x = random_x((n, c) + ins, dtype, seed=3, low=0.25)
    y = tb.upsample_trilinear3d(in_layout(x, layout), outs, align_corners)
    assert y.dtype == np_dtype(dtype)
    ex = exact(x, outs, align_corners)
    assert_within(y, ex, reference.ulp(ex, dtype))


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape", SHAPES[:4], ids=str)
def test_half_types_signed_within_documented_bound(dtype, align_corners, shape):
    n, c, ins, outs = shape
    x = random_x((n, c) + ins, dtype, seed=4)
    assert_matches_reference(tb.upsample_trilinear3d(x, outs, align_corners), x, outs,
                             align_corners)


# Shapes whose float32-opmath tables equal their float64 ones (elsewhere
# PyTorch's zero pattern, computed in float32, differs at a point or two).
SAME_TABLES = [(SHAPES[0], False), (SHAPES[0], True), (SHAPES[1], True), (SHAPES[2], False),
               (SHAPES[2], True), (SHAPES[3], False), (SHAPES[3], True), (SHAPES[6], False)]


@pytest.mark.parametrize("dtype", ["float32"] + HALF_DTYPES)
@pytest.mark.parametrize("shape, align_corners", SAME_TABLES, ids=str)
def test_every_dtype_is_the_float64_sum_rounded_once(dtype, shape, align_corners):
    # Widened exactly, summed in float64 as float64 data is, rounded once to
    # nearest even: the same bits as the float64 kernel's result cast by
    # NumPy and ml_dtypes, which round float64 directly (docs/numerics.md,
    # "One rounding").  Where the two dtypes' tables differ (PyTorch's zero
    # pattern is computed in float32 for these dtypes), the shape is no test.
    n, c, ins, outs = shape
    for i, o in zip(ins, outs):
        t = [_axis_table.axis_table(i, o, align_corners, 0.0, opmath, forward=True, storage=storage)
             for opmath, storage in ((np.float32, dtype), (np.float64, None))]
        assert np.array_equal(t[0].weight, t[1].weight), "tables differ: choose another shape"
    x = random_x((n, c) + ins, dtype, seed=5)
    y = tb.upsample_trilinear3d(x, outs, align_corners)
    y64 = tb.upsample_trilinear3d(x.astype(np.float64), outs, align_corners)
    np.testing.assert_array_equal(bits(y), bits(nearest(y64, np_dtype(dtype))))


def nearest(v, dtype):
    """float64 ``v`` rounded to nearest-even in ``dtype``, from first principles: of
    a cast's result and its two neighbours, the nearest (ties: the even one).  Not
    ``astype``: ml_dtypes before 0.5 rounds float64 to bfloat16 through float32,
    which can round twice."""
    width = np.dtype(dtype).itemsize * 8
    ints = {16: np.uint16, 32: np.uint32}[width]
    with np.errstate(over="ignore"):
        cast = v.astype(np.float32).astype(dtype)
    first = cast.view(ints).astype(np.int64)
    best = first.copy()
    best_gap = np.full(v.shape, np.inf)
    for step in (-1, 0, 1):
        # Step the magnitude (sign-magnitude bits); skip past zero and the ends.
        cand = first + step
        ok = (cand & ((1 << (width - 1)) - 1)) != (1 << (width - 1)) - 1
        ok &= (cand >= 0) & (cand < (1 << width))
        value = np.where(ok, cand, first).astype(ints).view(dtype).astype(np.float64)
        with np.errstate(invalid="ignore"):
            gap = np.where(ok & np.isfinite(value), np.abs(value - v), np.inf)
        better = (gap < best_gap) | ((gap == best_gap) & (cand % 2 == 0))
        best = np.where(better, cand, best)
        best_gap = np.where(better, gap, best_gap)
    # Infinities and NaN are the cast's (the results here are finite).
    best = np.where(np.isfinite(cast.astype(np.float64)), best, first)
    return best.astype(ints).view(dtype)


# -- 3. against the reference, every dtype and layout -------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", IN_LAYOUTS)
@pytest.mark.parametrize("out_layout", OUT_LAYOUTS)
@pytest.mark.parametrize("align_corners", [False, True])
def test_two_phase_matches_reference(dtype, layout, out_layout, align_corners):
    for k, (n, c, ins, outs) in enumerate(SHAPES[:3]):
        x = random_x((n, c) + ins, dtype, seed=10 + k)
        y = two_phase(in_layout(x, layout), outs, align_corners, out_layout=out_layout)
        assert_layout(y, out_layout)
        assert_matches_reference(y, x, outs, align_corners)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_layout", OUT_LAYOUTS)
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("case", SCALE_CASES, ids=str)
def test_one_call_with_out_and_scales_matches_reference(dtype, out_layout, threads, case):
    ins, scales = case
    x = random_x((2, 3) + ins, dtype, seed=20)
    outs = size_from_scales(ins, scales)
    out = out_array((2, 3) + outs, x.dtype, out_layout)
    result = tb.upsample_trilinear3d(x, outs, False, scales, out=out, num_threads=threads)
    assert result is out
    assert_matches_reference(out, x, outs, False, scales)


def test_result_is_a_new_array_in_the_input_layout():
    x = random_x((2, 3, 4, 5, 6), "float32")
    a = tb.upsample_trilinear3d(x, (5, 6, 7))
    b = tb.upsample_trilinear3d(in_layout(x, "ndhwc"), (5, 6, 7))
    assert a.flags.c_contiguous and is_ndhwc(b) and not b.flags.c_contiguous
    assert not np.shares_memory(a, x) and not np.shares_memory(a, b)
    np.testing.assert_array_equal(a, b)


# -- 4. the adjoint identity --------------------------------------------------------------------

axis = st.integers(1, 7)


@st.composite
def problems(draw):
    """(input shape, output DHW, align_corners, scales): up, down or equal per axis."""
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    ins = tuple(draw(axis) for _ in range(3))
    align = draw(st.booleans())
    outs, scales = [], []
    for i in ins:
        if not align and draw(st.booleans()):
            s = draw(st.floats(0.3, 3.5, allow_nan=False))
            o = math.floor(i * s)
            if o >= 1:
                outs.append(o)
                scales.append(s)
                continue
        outs.append(draw(axis))
        scales.append(0.0)
    return (n, c) + ins, tuple(outs), align, tuple(scales)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.integers(0, 2**32 - 1))
def test_adjoint_identity(problem, seed):
    """<forward(x), g> == <x, backward(g)>, both by this library, in float64."""
    input_size, outs, align, scales = problem
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(input_size)
    g = rng.standard_normal(input_size[:2] + outs)
    y = tb.upsample_trilinear3d(x, outs, align, scales)
    gi = tb.upsample_trilinear3d_backward(g, x.shape, output_size=outs, align_corners=align,
                                          scales=scales)
    lhs, rhs = np.sum(y * g), np.sum(x * gi)
    scale = np.sum(np.abs(reference.forward(np.abs(x), outs, align, scales)) * np.abs(g))
    assert abs(lhs - rhs) <= 1e-12 * scale, (lhs, rhs)


# -- 5. determinism -----------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
@pytest.mark.parametrize("shape", [(3, 4, (5, 6, 7), (9, 11, 13)), (2, 5, (9, 8, 10), (4, 5, 3))],
                         ids=str)
@pytest.mark.parametrize("align_corners", [False, True])
def test_bitwise_identical_for_every_thread_count(layout, shape, align_corners):
    n, c, ins, outs = shape
    x = in_layout(random_x((n, c) + ins, "float32", seed=30), layout)
    results = [bits(tb.upsample_trilinear3d(x, outs, align_corners, num_threads=t))
               for t in (1, 2, 3)]
    results.append(bits(two_phase(x, outs, align_corners, out_layout=layout, num_threads=2,
                                  fill=0x00)))
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_bitwise_identical_for_every_layout(dtype):
    x = random_x((2, 3, 5, 6, 7), dtype, seed=31)
    outs = (9, 4, 13)
    base = bits(tb.upsample_trilinear3d(x, outs, num_threads=1))
    for layout in IN_LAYOUTS:
        for out_layout in OUT_LAYOUTS:
            y = two_phase(in_layout(x, layout), outs, out_layout=out_layout, num_threads=2)
            np.testing.assert_array_equal(bits(y), base, err_msg=f"{layout} -> {out_layout}")


@pytest.mark.parametrize("dtype,channels,stream",
                         sample_product(12, ["float32", "float64"],
                                        [2, 3, 8, 12, 16, 32, 40, 64, 65], [False, True]))
def test_channels_last_every_variant_gives_the_channels_first_bits(dtype, channels, stream,
                                                                    monkeypatch):
    """Every forward table has two terms a point, which the channels-last W pass
    sums without its loop over terms (copies of their own for 8, 16, 32 and 64
    channels): in each variant, with whole planes and with the ring, stored and
    streamed, it gives the channels-first pass's bits."""
    from trilinear_bwd._core import _dispatch, _plan

    x = random_x((2, channels, 3, 4, 5), dtype, seed=7)
    outs = (6, 8, 11)
    want = bits(tb.upsample_trilinear3d(x, outs, num_threads=1))
    monkeypatch.setattr(_plan, "streamed", lambda *a: stream)
    for variant in _dispatch.available_variants():
        for whole in (True, False):
            monkeypatch.setattr(_plan, "WHOLE_PLANE_BYTES", 2**30 if whole else 0)
            _plan.clear_plans()
            got = out_array((2, channels) + outs, x.dtype, "ndhwc")
            with _dispatch.forced(variant):
                size, executor = tb.get_forward_workspace_size(
                    in_layout(x, "ndhwc"), outs, False, 0.0, 0.0, 0.0, got, num_threads=2)
            plan = executor._runner.plan
            assert plan.channels_last and plan.kernel.whole_planes == whole
            assert plan.kernel.stream == stream
            tb.execute(tb.alloc_workspace(size), size, executor)
            np.testing.assert_array_equal(bits(got), want, err_msg=f"{variant}, whole={whole}")
    _plan.clear_plans()


# -- 6. CANN's worked example -------------------------------------------------------------------

def test_cann_worked_example():
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 2, 2, 2)
    out = np.full((1, 1, 4, 4, 4), np.nan, dtype=np.float32)
    status, size, executor = aclnn.aclnnUpsampleTrilinear3dGetWorkspaceSize(
        x, [4, 4, 4], False, 0.0, 0.0, 0.0, out)
    assert status == OK, aclnn.aclGetRecentErrMsg()
    workspace = aclnn.aclrtMalloc(size)
    assert aclnn.aclnnUpsampleTrilinear3d(workspace, size, executor, None) == OK
    t = np.array([0.0, 0.25, 0.75, 1.0])
    expected = 1 + 4 * t[:, None, None] + 2 * t[None, :, None] + t[None, None, :]
    np.testing.assert_array_equal(out[0, 0], expected.astype(np.float32))


# -- 7. validation and status codes -------------------------------------------------------------

X_SHAPE, OUT_SIZE = (1, 2, 3, 4, 5), (6, 7, 8)
ALL = ("one", "two", "aclnn")


def good_call():
    """The arguments of a valid call: x, outputSize, alignCorners, scales, out."""
    x = random_x(X_SHAPE, "float32", seed=40)
    return {"x": x, "size": OUT_SIZE, "align": False, "scales": ZERO_SCALES,
            "out": np.empty(X_SHAPE[:2] + OUT_SIZE, dtype=np.float32)}


def overlapping():
    """x and out views of one buffer that share memory."""
    call = good_call()
    buf = np.zeros(2 * 2 * 6 * 7 * 8, dtype=np.float32)
    call["x"] = buf[: 2 * 3 * 4 * 5].reshape(X_SHAPE)
    call["out"] = buf[10: 10 + 2 * 6 * 7 * 8].reshape(X_SHAPE[:2] + OUT_SIZE)
    return call


def read_only():
    call = good_call()
    call["out"].flags.writeable = False
    return call


def with_(**changes):
    """A builder: :func:`good_call` with ``changes`` (a callable value is applied to the call)."""
    def build():
        call = good_call()
        for key, value in changes.items():
            call[key] = value(call) if callable(value) else value
        return call
    return build


# (id, builder, expected status, entry points that must refuse it)
BAD_CALLS = [
    ("self None", with_(x=None), NULL, ALL),
    ("outputSize None", with_(size=None), NULL, ("two", "aclnn")),
    ("out None", with_(out=None), NULL, ("two", "aclnn")),
    ("no size, no scales", with_(size=None), INVALID, ("one",)),
    ("C 0", with_(x=np.zeros((1, 0, 3, 4, 5), np.float32),
                  out=np.empty((1, 0, 6, 7, 8), np.float32)), INVALID, ALL),
    ("D 0", with_(x=np.zeros((1, 2, 0, 4, 5), np.float32)), INVALID, ALL),
    ("H 0", with_(x=np.zeros((1, 2, 3, 0, 5), np.float32)), INVALID, ALL),
    ("W 0", with_(x=np.zeros((1, 2, 3, 4, 0), np.float32)), INVALID, ALL),
    ("outputSize 0", with_(size=(6, 0, 8)), INVALID, ALL),
    ("outputSize -1", with_(size=(6, 7, -1)), INVALID, ALL),
    ("outputSize 2 elements", with_(size=(6, 7)), INVALID, ALL),
    ("out shape", with_(out=np.empty((1, 2, 6, 7, 9), np.float32)), INVALID, ALL),
    ("out N", with_(out=np.empty((2, 2, 6, 7, 8), np.float32)), INVALID, ALL),
    ("out dtype", with_(out=np.empty((1, 2, 6, 7, 8), np.float64)), INVALID, ALL),
    ("self int32", with_(x=lambda c: c["x"].astype(np.int32),
                         out=np.empty((1, 2, 6, 7, 8), np.int32)), INVALID, ALL),
    ("out read-only", read_only, INVALID, ALL),
    ("out overlaps self", overlapping, INVALID, ALL),
    ("self 4-D", with_(x=np.ones((2, 3, 4, 5), np.float32)), INVALID, ALL),
    ("self 6-D", with_(x=np.ones((1, 1, 2, 3, 4, 5), np.float32)), INVALID, ALL),
    ("alignCorners 1", with_(align=1), INVALID, ALL),
    # PyTorch's rule: floor(3 * 2.5) = 7 != 6.  CANN ignores scales unless all three > 0.
    ("scale inconsistent", with_(scales=(2.5, 0.0, 0.0)), INVALID, ("one", "two")),
    ("scales NaN", with_(scales=(0.0, float("nan"), 0.0)), INVALID, ALL),
    ("scales inf", with_(scales=(2.0, 1.75, float("inf"))), INVALID, ALL),
    ("scales -inf", with_(scales=(float("-inf"), 0.0, 0.0)), INVALID, ALL),
]
ENTRY_CASES = [(name, entry, build, status) for name, build, status, entries in BAD_CALLS
               for entry in entries]


def call_entry(entry, call):
    """Run ``call`` through ``entry``; return the status (0 or the AclnnError's)."""
    x, size, align, scales, out = (call[k] for k in ("x", "size", "align", "scales", "out"))
    if entry == "aclnn":
        status, ws, executor = aclnn.aclnnUpsampleTrilinear3dGetWorkspaceSize(
            x, size, align, *scales, out)
        if status != OK:
            assert (ws, executor) == (0, None)
            assert aclnn.aclGetRecentErrMsg()
            return status
        assert aclnn.aclnnUpsampleTrilinear3d(aclnn.aclrtMalloc(ws), ws, executor, None) == OK
        return OK
    try:
        if entry == "one":
            tb.upsample_trilinear3d(x, size, align, scales, out=out)
        else:
            ws, executor = tb.get_forward_workspace_size(x, size, align, *scales, out)
            tb.execute(tb.alloc_workspace(ws), ws, executor)
    except tb.AclnnError as exc:
        expected_type = tb.NullArgumentError if exc.status == NULL else tb.InvalidArgumentError
        assert isinstance(exc, expected_type)
        return exc.status
    return OK


@pytest.mark.parametrize("name, entry, build, status", ENTRY_CASES,
                         ids=[f"{e}-{n}" for n, e, _, _ in ENTRY_CASES])
def test_invalid_calls_are_refused_and_write_nothing(name, entry, build, status):
    call = build()
    arrays = {k: call[k] for k in ("x", "out") if isinstance(call[k], np.ndarray)}
    for arr in arrays.values():
        if arr.flags.writeable and arr.size:
            arr.view(np.uint8)[...] = 0xA5  # a sentinel, NaN-free
    before = {k: bits(a).copy() for k, a in arrays.items()}
    assert call_entry(entry, call) == status
    for k, arr in arrays.items():
        np.testing.assert_array_equal(bits(arr), before[k], err_msg=f"{k} was written")


def test_the_valid_call_is_accepted_everywhere():
    # The baseline of BAD_CALLS: each change above is what breaks the call.
    for entry in ALL:
        call = good_call()
        assert call_entry(entry, call) == OK
        assert_matches_reference(call["out"], call["x"], OUT_SIZE)


@pytest.mark.parametrize("entry", ALL)
def test_empty_batch_is_valid(entry):
    call = with_(x=np.zeros((0, 2, 3, 4, 5), np.float32),
                 out=np.empty((0, 2, 6, 7, 8), np.float32))()
    assert call_entry(entry, call) == OK


def test_empty_batch_one_call_returns_an_empty_result():
    y = tb.upsample_trilinear3d(np.zeros((0, 2, 3, 4, 5), np.float64), (6, 7, 8))
    assert y.shape == (0, 2, 6, 7, 8) and y.dtype == np.float64


# -- 8. CANN's scale rule against PyTorch's -----------------------------------------------------

def cann_forward(x, output_size, align_corners, scales):
    """``trilinear_bwd.aclnn``'s two phases into a NaN-filled out; returns out."""
    out = out_array(x.shape[:2] + tuple(output_size), x.dtype, "ncdhw")
    status, size, executor = aclnn.aclnnUpsampleTrilinear3dGetWorkspaceSize(
        x, list(output_size), align_corners, *scales, out)
    assert status == OK, aclnn.aclGetRecentErrMsg()
    assert executor.op == "forward"
    assert aclnn.aclnnUpsampleTrilinear3d(aclnn.aclrtMalloc(size), size, executor, None) == OK
    return out


@pytest.mark.parametrize("dtype", FULL_DTYPES)
def test_cann_ignores_scales_unless_all_three_are_given(dtype):
    x = random_x((1, 1, 3, 3, 3), dtype, seed=50)
    with pytest.raises(tb.InvalidArgumentError) as info:  # floor(3 * 2) = 6 != 5
        tb.upsample_trilinear3d(x, (5, 5, 5), False, (2.0, 0.0, 0.0))
    assert info.value.status == INVALID
    with pytest.raises(tb.InvalidArgumentError):
        tb.get_forward_workspace_size(x, (5, 5, 5), False, 2.0, 0.0, 0.0,
                                      np.empty((1, 1, 5, 5, 5), x.dtype))
    got = cann_forward(x, (5, 5, 5), False, (2.0, 0.0, 0.0))
    # The size ratio 3/5 on every axis, D included.
    np.testing.assert_array_equal(got, tb.upsample_trilinear3d(x, (5, 5, 5)))
    assert_matches_reference(got, x, (5, 5, 5))
    assert np.abs(got - exact(x, (5, 5, 5), False, (2.0, 0.0, 0.0))).max() > 1e-3


@pytest.mark.parametrize("dtype", FULL_DTYPES)
def test_cann_uses_all_three_scales_without_a_check(dtype):
    x = random_x((1, 2, 2, 2, 2), dtype, seed=51)
    with pytest.raises(tb.InvalidArgumentError):  # floor(2 * 1.5) = 3 != 4
        tb.upsample_trilinear3d(x, (4, 4, 4), False, (1.5, 1.5, 1.5))
    got = cann_forward(x, (4, 4, 4), False, (1.5, 1.5, 1.5))
    assert_matches_reference(got, x, (4, 4, 4), False, (1.5, 1.5, 1.5))
    # Not the size ratio 2/4.
    assert np.abs(got - exact(x, (4, 4, 4))).max() > 1e-2


def test_cann_with_align_corners_ignores_scales():
    x = random_x((1, 2, 3, 4, 5), "float64", seed=52)
    got = cann_forward(x, (5, 6, 7), True, (1.5, 1.5, 1.5))
    np.testing.assert_array_equal(got, tb.upsample_trilinear3d(x, (5, 6, 7), True))


# -- 9. the executor lifecycle ------------------------------------------------------------------

def forward_executor(x, outs=(4, 5, 6), **kw):
    """Phase one of the forward into a NaN-filled ``out``: (out, workspace size, executor)."""
    out = np.full(x.shape[:2] + outs, np.nan, dtype=x.dtype)
    size, executor = tb.get_forward_workspace_size(x, outs, False, 0.0, 0.0, 0.0, out, **kw)
    return out, size, executor


def expect_runtime(fn):
    with pytest.raises(tb.ExecutionError) as info:
        fn()
    assert info.value.status == RUNTIME


def test_single_use_executor_is_consumed():
    x = random_x((1, 2, 3, 3, 3), "float64", seed=60)
    out, size, executor = forward_executor(x)
    assert executor.op == "forward" and executor.state == "ready"
    assert "forward" in repr(executor)
    ws = tb.alloc_workspace(size)
    tb.execute(ws, size, executor)
    assert executor.state == "consumed"
    assert "forward" in repr(executor)
    assert_matches_reference(out, x, (4, 5, 6))
    expect_runtime(lambda: tb.execute(ws, size, executor))
    assert aclnn.aclnnUpsampleTrilinear3d(ws, size, executor, None) == RUNTIME


def test_repeatable_executor_with_new_arrays():
    x = random_x((2, 3, 3, 4, 5), "float32", seed=61)
    out, size, executor = forward_executor(x, num_threads=2)
    executor.set_repeatable()
    ws = tb.alloc_workspace(size)
    tb.execute(ws, size, executor)
    first = out.copy()
    tb.execute(ws, size, executor)
    np.testing.assert_array_equal(out, first)
    assert executor.state == "ready"
    x2 = random_x(x.shape, "float32", seed=62)
    out2 = np.full_like(out, np.nan)
    executor.update_arrays(x2, out2)
    tb.execute(ws, size, executor)
    assert_matches_reference(out2, x2, (4, 5, 6))
    np.testing.assert_array_equal(out, first)  # the old out is no longer written
    with pytest.raises(tb.InvalidArgumentError):  # a new x of another shape
        executor.update_arrays(random_x((2, 3, 3, 4, 6), "float32"), None)
    buf = np.zeros(x.size + out.size, dtype=np.float32)
    x3 = buf[: x.size].reshape(x.shape)
    out3 = buf[100: 100 + out.size].reshape(out.shape)
    with pytest.raises(tb.InvalidArgumentError):  # a new out overlapping the new x
        executor.update_arrays(x3, out3)
    tb.execute(ws, size, executor)  # still bound to x2 and out2


def test_repeatable_executor_through_aclnn():
    x = random_x((1, 2, 3, 4, 5), "float64", seed=63)
    out = np.empty((1, 2, 4, 5, 6))
    status, size, executor = aclnn.aclnnUpsampleTrilinear3dGetWorkspaceSize(
        x, [4, 5, 6], False, 0.0, 0.0, 0.0, out)
    assert status == OK
    assert aclnn.aclSetAclOpExecutorRepeatable(executor) == OK
    ws = aclnn.aclrtMalloc(size)
    assert aclnn.aclnnUpsampleTrilinear3d(ws, size, executor, None) == OK
    x2, out2 = 2 * x - 1, np.empty_like(out)
    assert aclnn.aclSetInputTensorAddr(executor, 0, x2) == OK
    assert aclnn.aclSetOutputTensorAddr(executor, 0, out2) == OK
    assert aclnn.aclnnUpsampleTrilinear3d(ws, size, executor, None) == OK
    assert_matches_reference(out, x, (4, 5, 6))
    assert_matches_reference(out2, x2, (4, 5, 6))


def test_stream_run():
    x = random_x((2, 3, 4, 5, 6), "float32", seed=64)
    out, size, executor = forward_executor(x, (7, 3, 9))
    with tb.Stream() as s:
        tb.execute(tb.alloc_workspace(size), size, executor, stream=s)
        s.synchronize()
        assert_matches_reference(out, x, (7, 3, 9))
    status, stream = aclnn.aclrtCreateStream()
    assert status == OK
    out2 = np.full_like(out, np.nan)
    status, size, executor = aclnn.aclnnUpsampleTrilinear3dGetWorkspaceSize(
        x, [7, 3, 9], False, 0.0, 0.0, 0.0, out2)
    assert status == OK
    assert aclnn.aclnnUpsampleTrilinear3d(aclnn.aclrtMalloc(size), size, executor, stream) == OK
    assert aclnn.aclrtSynchronizeStream(stream) == OK
    assert aclnn.aclrtDestroyStream(stream) == OK
    np.testing.assert_array_equal(bits(out2), bits(out))


def test_wrong_operator_in_phase_two():
    x = random_x((1, 2, 2, 3, 4), "float32", seed=65)
    out = np.full((1, 2, 4, 6, 8), np.nan, np.float32)
    status, size, forward = aclnn.aclnnUpsampleTrilinear3dGetWorkspaceSize(
        x, [4, 6, 8], False, 0.0, 0.0, 0.0, out)
    assert status == OK
    ws = aclnn.aclrtMalloc(size)
    assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, forward, None) == RUNTIME
    assert np.isnan(out).all()  # nothing ran
    assert forward.state == "ready"  # and the misuse did not consume it
    assert aclnn.aclnnUpsampleTrilinear3d(ws, size, forward, None) == OK
    assert_matches_reference(out, x, (4, 6, 8))

    grad_input = np.full(x.shape, np.nan, np.float32)
    status, size, backward = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        out, [4, 6, 8], list(x.shape), False, 0.0, 0.0, 0.0, grad_input)
    assert status == OK and backward.op == "backward"
    ws = aclnn.aclrtMalloc(size)
    assert aclnn.aclnnUpsampleTrilinear3d(ws, size, backward, None) == RUNTIME
    assert np.isnan(grad_input).all()
    assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, backward, None) == OK
    assert not np.isnan(grad_input).any()


# -- 10. trilinear_bwd.torch --------------------------------------------------------------------

@pytest.fixture
def tbt(torch):
    """``trilinear_bwd.torch``, with the aten override off again afterwards."""
    import trilinear_bwd.torch as module

    module.disable()
    try:
        yield module
    finally:
        module.disable()


def assert_close_tensor(torch, got, expected, x):
    """The PyTorch tolerance of ``x``'s dtype, relative to max |x|."""
    tol = TORCH_TOL[str(x.dtype).removeprefix("torch.")] * x.abs().max().item()
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert_within(got.detach().double().numpy(), expected.detach().double().numpy(), tol)


TORCH_CALLS = [
    {"size": (7, 4, 13)},
    {"size": (7, 4, 13), "align_corners": True},
    {"size": (2, 3, 2)},
    {"scale_factor": 2},
    {"scale_factor": (1.5, 2.0, 2.5)},
]


@pytest.mark.parametrize("dtype", FULL_DTYPES)
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("kw", TORCH_CALLS, ids=str)
def test_enabled_interpolate_uses_the_forward(tbt, torch, dtype, channels_last, kw):
    F = torch.nn.functional
    x = torch.randn(2, 3, 3, 5, 7, dtype=getattr(torch, dtype),
                    generator=torch.Generator().manual_seed(70))
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    expected = F.interpolate(x, mode="trilinear", **kw)  # PyTorch's kernel
    with tbt.enabled():
        before = tbt.call_counts()
        got = F.interpolate(x, mode="trilinear", **kw)
        after = tbt.call_counts()
    assert after["forward"] == before["forward"] + 1
    assert after["forward_fallback"] == before["forward_fallback"]
    assert got.is_contiguous(memory_format=torch.channels_last_3d) == channels_last
    assert_close_tensor(torch, got, expected, x)
    # Off again: PyTorch's kernel, bit for bit.
    before = tbt.call_counts()["forward"]
    assert torch.equal(F.interpolate(x, mode="trilinear", **kw), expected)
    assert tbt.call_counts()["forward"] == before


def test_enabled_interpolate_is_not_pytorch_kernel(tbt, torch):
    # How we know the override really computes: float64 tables give float32
    # results that differ from PyTorch's float32 ones somewhere in a large volume.
    F = torch.nn.functional
    x = torch.randn(1, 4, 9, 10, 11, generator=torch.Generator().manual_seed(71))
    expected = F.interpolate(x, size=(17, 23, 29), mode="trilinear")
    with tbt.enabled():
        got = F.interpolate(x, size=(17, 23, 29), mode="trilinear")
    ours = tb.upsample_trilinear3d(x.numpy(), (17, 23, 29))
    assert torch.equal(got, torch.from_numpy(ours))
    assert not torch.equal(got, expected)
    assert_close_tensor(torch, got, expected, x)


def test_enabled_empty_channels_falls_back_to_pytorch(tbt, torch):
    F = torch.nn.functional
    x = torch.randn(1, 0, 2, 3, 4)
    with pytest.raises(RuntimeError) as pytorch_error:
        F.interpolate(x, size=(4, 5, 6), mode="trilinear")
    with tbt.enabled():
        before = tbt.call_counts()
        with pytest.raises(RuntimeError) as info:
            F.interpolate(x, size=(4, 5, 6), mode="trilinear")
        after = tbt.call_counts()
    assert not isinstance(info.value, tb.AclnnError)  # PyTorch's own error
    assert str(info.value) == str(pytorch_error.value)
    assert after["forward_fallback"] == before["forward_fallback"] + 1
    assert after["forward"] == before["forward"]


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 4, 5, 6, 7)])
def test_enabled_wrong_rank_gets_pytorch_error(tbt, torch, shape):
    # aten called directly with a tensor that is not 5-D: the fallback's
    # PyTorch kernel raises PyTorch's own message.
    x = torch.randn(*shape)
    with pytest.raises(RuntimeError) as pytorch_error:
        torch.ops.aten.upsample_trilinear3d(x, [4, 4, 4], False)
    with tbt.enabled():
        before = tbt.call_counts()["forward_fallback"]
        with pytest.raises(RuntimeError) as info:
            torch.ops.aten.upsample_trilinear3d(x, [4, 4, 4], False)
        assert tbt.call_counts()["forward_fallback"] == before + 1
    assert not isinstance(info.value, tb.AclnnError)
    assert str(info.value) == str(pytorch_error.value)


def test_enabled_empty_batch(tbt, torch):
    F = torch.nn.functional
    x = torch.randn(0, 2, 2, 3, 4)
    with tbt.enabled():
        y = F.interpolate(x, size=(4, 5, 6), mode="trilinear")
    assert y.shape == (0, 2, 4, 5, 6)


def test_gradcheck_with_enabled_interpolate(tbt, torch):
    F = torch.nn.functional
    x = torch.randn(1, 2, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    with tbt.enabled():
        before = tbt.call_counts()
        for kw in ({"size": (3, 5, 4)}, {"size": (1, 2, 3), "align_corners": True}):
            fn = lambda t, kw=kw: F.interpolate(t, mode="trilinear", **kw)
            assert torch.autograd.gradcheck(fn, (x,))
            assert torch.autograd.gradgradcheck(fn, (x,))
        after = tbt.call_counts()
    assert after["forward"] > before["forward"]
    assert after["kernel"] > before["kernel"]


def test_gradcheck_with_upsample_trilinear3d(tbt, torch):
    x = torch.randn(1, 2, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    before = tbt.call_counts()
    for kw in ({"size": (3, 5, 4)}, {"scale_factor": (1.5, 1.0, 2.0)},
               {"size": (1, 2, 3), "align_corners": True}):
        fn = lambda t, kw=kw: tbt.upsample_trilinear3d(t, **kw)
        assert torch.autograd.gradcheck(fn, (x,))
        assert torch.autograd.gradgradcheck(fn, (x,))
    after = tbt.call_counts()
    assert after["forward"] > before["forward"]
    assert after["kernel"] > before["kernel"]


@pytest.mark.parametrize("dtype", FULL_DTYPES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_upsample_trilinear3d_on_tensors(tbt, torch, dtype, channels_last):
    F = torch.nn.functional
    x = torch.randn(2, 3, 3, 4, 5, dtype=getattr(torch, dtype),
                    generator=torch.Generator().manual_seed(72))
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    before = tbt.call_counts()["forward"]
    y = tbt.upsample_trilinear3d(x, scale_factor=2)
    assert tbt.call_counts()["forward"] == before + 1
    assert isinstance(y, torch.Tensor)
    assert y.is_contiguous(memory_format=torch.channels_last_3d) == channels_last
    assert_close_tensor(torch, y, F.interpolate(x, scale_factor=2, mode="trilinear"), x)
    # The one call, and the custom op, on a torch tensor: torch tensors back.
    z = tb.upsample_trilinear3d(x, (6, 8, 10))
    assert isinstance(z, torch.Tensor) and torch.equal(z, y)
    w = torch.ops.trilinear_bwd.upsample_trilinear3d(x, [6, 8, 10], False, 2.0, 2.0, 2.0)
    assert torch.equal(w, y)


# -- 11. a property: random problems, NaN and Inf ------------------------------------------------

@st.composite
def values(draw, shape, dtype):
    """Standard-normal data with, sometimes, a few NaN / +Inf / -Inf planted."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal(shape)
    for _ in range(draw(st.integers(0, 3))):
        k = tuple(int(rng.integers(0, n)) for n in shape)
        x[k] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return x.astype(dtype)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), problems(), st.sampled_from(FULL_DTYPES), st.sampled_from(IN_LAYOUTS),
       st.integers(1, 3))
def test_random_problems_match_reference(data, problem, dtype, layout, threads):
    input_size, outs, align, scales = problem
    x = data.draw(values(input_size, dtype))
    y = tb.upsample_trilinear3d(in_layout(x, layout), outs, align, scales, num_threads=threads)
    ex = exact(x, outs, align, scales)
    # Zero weights are not skipped: NaN exactly where the reference has NaN
    # (a NaN neighbour, 0 * Inf, Inf - Inf), the same Inf where it has Inf.
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ex))
    infinite = np.isinf(ex)
    np.testing.assert_array_equal(y[infinite], ex[infinite])
    finite = np.isfinite(ex)
    magnitude = np.abs(x[np.isfinite(x)]).max(initial=1.0)
    assert_within(y[finite], ex[finite], TORCH_TOL[dtype] * magnitude)


@pytest.mark.parametrize("dtype", FULL_DTYPES)
def test_zero_weights_are_not_skipped(dtype):
    # align_corners 3 -> 5 on D: coordinates 0, 0.5, 1, 1.5, 2.  Output 0
    # reads x[0] and x[1] with weights (1, 0): 0 * Inf is NaN there; output 4
    # reads only x[2] and stays finite.
    x = np.ones((1, 1, 3, 2, 2), dtype=dtype)
    x[0, 0, 1, 0, 0] = np.inf
    y = tb.upsample_trilinear3d(x, (5, 2, 2), True)
    assert np.isnan(y[0, 0, 0, 0, 0])
    np.testing.assert_array_equal(y[0, 0, 4], np.ones((2, 2)))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(exact(x, (5, 2, 2), True)))


@pytest.mark.parametrize("dtype", FULL_DTYPES)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize(
    "shape", SHAPES + [(1, 2, (4, 4, 4), (8, 8, 8)), (1, 2, (8, 8, 8), (4, 4, 4))], ids=str)
def test_nan_and_inf_as_in_pytorch(torch, dtype, align_corners, shape):
    n, c, ins, outs = shape
    rng = np.random.default_rng(80)
    for _ in range(4):
        x = rng.standard_normal((n, c) + ins).astype(dtype)
        for _ in range(3):
            k = tuple(int(rng.integers(0, m)) for m in x.shape)
            x[k] = rng.choice([np.inf, -np.inf, np.nan])
        y = tb.upsample_trilinear3d(x, outs, align_corners)
        expected = interpolate(torch, x, size=outs, align_corners=align_corners)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
        infinite = np.isinf(expected)
        np.testing.assert_array_equal(y[infinite], expected[infinite])
        finite = np.isfinite(expected)
        magnitude = np.abs(x[np.isfinite(x)]).max(initial=1.0)
        assert_within(y[finite], expected[finite], TORCH_TOL[dtype] * magnitude)
