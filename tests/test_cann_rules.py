"""CANN's rules in the CANN layer, PyTorch's in the rest (docs/operator.md, "Which layer
follows which rule").

``trilinear_bwd.aclnn`` follows CANN's implementation of the backward
(hicann/ops-cv, ``image/upsample_trilinear3d_backward/op_host/op_api/
aclnn_upsample_trilinear_3d_backward.cpp``): the scales are used only when all three
are > 0, otherwise the size ratio on every axis, and they are not checked against
``outputSize``.  The PyTorch-named API (``get_workspace_size``, the one call,
``trilinear_bwd.torch``, ``trilinear_bwd.dask``) uses each given scale on its own axis
and refuses one inconsistent with ``outputSize``.  Both refuse non-finite scales and
keep this project's size limits; both accept an empty batch.

The concrete values are those of the research note on CANN's rules (computed there
with torch 2.13 in float64); every result is also compared with
``trilinear_bwd.reference`` for the scales the layer is expected to use.
"""

import math

import numpy as np
import pytest
from conftest import DTYPES, OUT_LAYOUTS, assert_matches_reference, in_layout, np_dtype, \
    out_array, random_grad

import trilinear_bwd as tb
from trilinear_bwd._core import _axis_table, _plan, _table_cache
from trilinear_bwd import aclnn, reference

OK = tb.ACLNN_SUCCESS
NULL, INVALID = tb.ACLNN_ERR_PARAM_NULLPTR, tb.ACLNN_ERR_PARAM_INVALID

# One axis that matters: D, 3 -> 4 (H and W are 1 -> 1, the identity).  floor(3 * 1.5)
# = 4, so 1.5 is a consistent scale, and 1 / 1.5 != 3 / 4, so the rules differ.
G_D = np.array([1.0, 2.0, 3.0, 4.0])
RATIO = np.array([1.75, 3.125, 5.125])                  # the size ratio 3/4 on D
SCALE_1_5 = np.array([2.0, 25 / 6, 23 / 6])             # 1 / 1.5 on D
SCALE_2 = np.array([3.25, 5.75, 1.0])                   # 1 / 2 on D (floor(3*2) = 6 != 4)
INPUT_D = (1, 2, 3, 1, 1)
OUTPUT_D = (4, 1, 1)
# Loose pins of the literal values (one ulp of the storage type, a few for the float32
# sums); assert_matches_reference is the tight check.
REL = {"float64": 1e-14, "float32": 2.0**-21, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def d_axis_grad(dtype, layout):
    """grad_out (1, 2, 4, 1, 1): channel 0 holds G_D, channel 1 ten times it."""
    values = np.stack([G_D, 10 * G_D]).reshape(1, 2, 4, 1, 1).astype(np_dtype(dtype))
    return in_layout(values, layout)


def expected_d(per_channel):
    """The (1, 2, 3, 1, 1) result whose channel 0 is ``per_channel``."""
    return np.stack([per_channel, 10 * per_channel]).reshape(INPUT_D)


def cann(grad_out, output_size, input_size, align, scales, layout="ncdhw"):
    """Run ``trilinear_bwd.aclnn``'s two phases; return gradInput."""
    gi = out_array(tuple(input_size), grad_out.dtype, layout)
    status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        grad_out, list(output_size), list(input_size), align, *scales, gi)
    assert status == OK, aclnn.aclGetRecentErrMsg()
    assert aclnn.aclnnUpsampleTrilinear3dBackward(aclnn.aclrtMalloc(size), size, ex, None) == OK
    return gi


def pytorch_named(grad_out, output_size, input_size, align, scales, layout="ncdhw"):
    """Run ``get_workspace_size`` + ``execute`` and the one call; return the first result.

    The two must agree bitwise (they are the same rules and the same kernel).
    """
    gi = out_array(tuple(input_size), grad_out.dtype, layout)
    size, ex = tb.get_workspace_size(grad_out, output_size, input_size, align, *scales, gi)
    tb.execute(tb.alloc_workspace(size), size, ex)
    one = tb.upsample_trilinear3d_backward(grad_out, input_size, output_size=output_size,
                                           align_corners=align, scales=scales)
    assert one.tobytes() == np.ascontiguousarray(gi).tobytes()
    return gi


def assert_values(result, expected, dtype):
    got = result.astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=REL[dtype], atol=0)


# -- the scales: all three > 0, or none -----------------------------------------------


@pytest.mark.parametrize("layout", OUT_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scales", [(1.5, 0.0, 0.0), (1.5, -1.0, 1.0), (1.5, 1.0, 0.0),
                                    (1.5, None, 1.0)])
def test_one_scale_not_positive_cann_uses_the_ratio_everywhere(scales, dtype, layout):
    g = d_axis_grad(dtype, layout)
    got = cann(g, OUTPUT_D, INPUT_D, False, scales, layout)
    # 1.75, 3.125 and 5.125 (and ten times them) are exact in every dtype.
    np.testing.assert_array_equal(got.astype(np.float64), expected_d(RATIO))
    assert_matches_reference(got, g, INPUT_D, False, (0.0, 0.0, 0.0))


@pytest.mark.parametrize("layout", OUT_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scales", [(1.5, 0.0, 0.0), (1.5, -1.0, 1.0), (1.5, 1.0, 0.0),
                                    (1.5, None, 1.0)])
def test_one_scale_not_positive_pytorch_uses_each_axis_own(scales, dtype, layout):
    g = d_axis_grad(dtype, layout)
    got = pytorch_named(g, OUTPUT_D, INPUT_D, False, scales, layout)
    assert_values(got, expected_d(SCALE_1_5), dtype)
    assert_matches_reference(got, g, INPUT_D, False, (1.5, 0.0, 0.0))
    assert not np.array_equal(got.astype(np.float64), expected_d(RATIO))


@pytest.mark.parametrize("layout", OUT_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_three_positive_both_layers_use_them(dtype, layout):
    g = d_axis_grad(dtype, layout)
    scales = (1.5, 1.0, 1.0)
    a = cann(g, OUTPUT_D, INPUT_D, False, scales, layout)
    b = pytorch_named(g, OUTPUT_D, INPUT_D, False, scales, layout)
    assert_values(a, expected_d(SCALE_1_5), dtype)
    assert_matches_reference(a, g, INPUT_D, False, scales)
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_align_corners_ignores_scales_in_both_layers(dtype):
    g = d_axis_grad(dtype, "ncdhw")
    a = cann(g, OUTPUT_D, INPUT_D, True, (1.5, 0.0, 0.0))
    b = pytorch_named(g, OUTPUT_D, INPUT_D, True, (1.5, 0.0, 0.0))
    # (in - 1) / (out - 1) = 2/3: coordinates 0, 2/3, 4/3, 2.
    assert_values(a, expected_d(np.array([1 + 2 / 3, 2 * 2 / 3 + 3 * 2 / 3, 3 / 3 + 4])),
                  dtype)
    assert_matches_reference(a, g, INPUT_D, True, (0.0, 0.0, 0.0))
    assert a.tobytes() == b.tobytes()


# Three axes at once, each with a consistent scale where one is given.
GEOMETRIES = [
    # grad_out shape, input_size, scales
    ((2, 3, 4, 5, 6), (2, 3, 3, 4, 4), (1.5, 0.0, 1.6)),
    ((1, 4, 5, 7, 3), (1, 4, 3, 5, 6), (1.7, 1.45, -2.0)),
    ((2, 2, 6, 2, 9), (2, 2, 4, 3, 5), (0.0, 0.0, 1.9)),
    ((1, 3, 4, 5, 6), (1, 3, 3, 4, 4), (1.5, 1.3, 1.6)),
]


@pytest.mark.parametrize("layout", OUT_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,input_size,scales", GEOMETRIES)
def test_three_axes(shape, input_size, scales, dtype, layout):
    """CANN: bitwise the ratio call unless all three > 0, then bitwise PyTorch's."""
    g = in_layout(random_grad(shape, dtype, seed=sum(shape)), layout)
    out = shape[2:]
    a = cann(g, out, input_size, False, scales, layout)
    b = pytorch_named(g, out, input_size, False, scales, layout)
    assert_matches_reference(b, g, input_size, False, scales)
    if all(s > 0 for s in scales):
        assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
        assert_matches_reference(a, g, input_size, False, scales)
        return
    ratio = pytorch_named(g, out, input_size, False, (0.0, 0.0, 0.0), layout)
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(ratio).tobytes()
    assert_matches_reference(a, g, input_size, False, (0.0, 0.0, 0.0))
    # The two rules really differ here (a positive scale != out / in on its axis).
    assert not np.array_equal(a.astype(np.float64), b.astype(np.float64))


# -- no consistency check in the CANN layer ----------------------------------------


@pytest.mark.parametrize("layout", OUT_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_inconsistent_scale_cann_accepts_pytorch_refuses(dtype, layout):
    g = d_axis_grad(dtype, layout)
    scales = (2.0, 1.0, 1.0)              # floor(3 * 2.0) = 6, outputSize D is 4
    got = cann(g, OUTPUT_D, INPUT_D, False, scales, layout)
    np.testing.assert_array_equal(got.astype(np.float64), expected_d(SCALE_2))
    assert_matches_reference(got, g, INPUT_D, False, scales)

    gi = out_array(INPUT_D, g.dtype, layout)
    message = r"scalesD = 2.0 is inconsistent with outputSize\[0\] \(D\) = 4"
    with pytest.raises(tb.InvalidArgumentError, match=message) as info:
        tb.get_workspace_size(g, OUTPUT_D, INPUT_D, False, *scales, gi)
    assert info.value.status == INVALID
    with pytest.raises(tb.InvalidArgumentError, match=message):
        tb.upsample_trilinear3d_backward(g, INPUT_D, output_size=OUTPUT_D, scales=scales)


def test_inconsistent_scale_dask_refuses():
    tbd = pytest.importorskip("trilinear_bwd.dask")
    da = pytest.importorskip("dask.array")
    g = da.from_array(d_axis_grad("float32", "ncdhw"))
    with pytest.raises(tb.InvalidArgumentError, match="scalesD = 2.0 is inconsistent"):
        tbd.upsample_trilinear3d_backward(g, INPUT_D, scales=(2.0, 1.0, 1.0))
    # And it keeps PyTorch's per-axis rule.
    got = tbd.upsample_trilinear3d_backward(g, INPUT_D, scales=(1.5, 0.0, 0.0)).compute()
    assert_values(got, expected_d(SCALE_1_5), "float32")


def test_torch_wrapper_keeps_pytorch_rule(torch):
    tbt = pytest.importorskip("trilinear_bwd.torch")
    g = torch.from_numpy(d_axis_grad("float64", "ncdhw"))
    got = tbt.upsample_trilinear3d_backward(g, OUTPUT_D, INPUT_D, False, 1.5, None, None)
    ours = got.numpy()
    theirs = torch.ops.aten.upsample_trilinear3d_backward(
        g, list(OUTPUT_D), list(INPUT_D), False, 1.5, None, None).numpy()
    np.testing.assert_allclose(ours, expected_d(SCALE_1_5), rtol=1e-15)
    np.testing.assert_allclose(ours, theirs, rtol=1e-15)


@pytest.mark.parametrize("layout", OUT_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_inconsistent_scales_three_axes(dtype, layout):
    shape, input_size = (2, 3, 5, 4, 7), (2, 3, 3, 4, 4)
    scales = (1.2, 2.5, 0.9)    # floor gives 3, 10, 3: none equals 5, 4, 7 (H is 4 -> 4)
    assert all(math.floor(i * s) != o for i, s, o in zip(input_size[2:], scales, shape[2:]))
    g = in_layout(random_grad(shape, dtype, seed=5), layout)
    got = cann(g, shape[2:], input_size, False, scales, layout)
    assert_matches_reference(got, g, input_size, False, scales)
    with pytest.raises(tb.InvalidArgumentError, match="scalesD = 1.2 is inconsistent"):
        tb.get_workspace_size(g, shape[2:], input_size, False, *scales,
                              out_array(input_size, g.dtype, layout))


@pytest.mark.parametrize("scale,last", [(1e-25, True), (5e-324, True), (1e-3, True),
                                        (1e300, False), (1e3, False)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_extreme_scales_clamp_to_an_edge(scale, last, dtype):
    """Steps of 1e25, inf (1 / 5e-324), 1e-300: every output point on an edge of D.

    A tiny scale sends every coordinate past the last input point (all of the
    gradient lands there); a huge one sends every coordinate to 0 (all on the first).
    The coordinates are clamped before they become indices.
    """
    g = d_axis_grad(dtype, "ncdhw")
    got = cann(g, OUTPUT_D, INPUT_D, False, (scale, 1.0, 1.0)).astype(np.float64)
    expected = np.zeros(3)
    expected[2 if last else 0] = G_D.sum()
    np.testing.assert_array_equal(got, expected_d(expected))
    assert_matches_reference(got.astype(g.dtype), g, INPUT_D, False, (scale, 1.0, 1.0))


@pytest.mark.parametrize("layout", OUT_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_skewed_w_axis_memory_stays_bounded(dtype, layout):
    """A scale that piles 2400 of 3000 output points onto the last of 2000 input points.

    The padded W table would hold 2000 x 4800 terms; it is not built (width 0) and
    the W pass walks the unpadded table instead.
    """
    shape, input_size, scales = (1, 2, 1, 2, 3000), (1, 2, 1, 3, 2000), (1.0, 1.5, 0.3)
    g = in_layout(random_grad(shape, dtype, seed=3), layout)
    gi = out_array(input_size, g.dtype, layout)
    status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        g, list(shape[2:]), list(input_size), False, *scales, gi)
    assert status == OK, aclnn.aclGetRecentErrMsg()
    w = ex._runner.plan.kernel.tables[2]
    assert w.width == 0 and w.padded_src.size == 0
    assert int(np.diff(w.ptr).max()) > 4000      # the pile the padding would repeat
    assert aclnn.aclnnUpsampleTrilinear3dBackward(aclnn.aclrtMalloc(size), size, ex, None) == OK
    assert_matches_reference(gi, g, input_size, False, scales)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unpadded_w_pass_gives_the_same_bits(dtype, monkeypatch):
    """The W pass without the padded table adds the same terms in the same order."""
    shape, input_size = (2, 3, 4, 5, 37), (2, 3, 3, 4, 20)
    g = random_grad(shape, dtype, seed=11)
    padded = pytorch_named(g, shape[2:], input_size, False, (0.0, 0.0, 0.0))
    monkeypatch.setattr(_axis_table, "PADDED_LIMIT", -1)
    _table_cache.clear_cache()
    _plan.clear_plans()
    try:
        size, ex = tb.get_workspace_size(g, shape[2:], input_size, False, 0.0, 0.0, 0.0,
                                         out_array(input_size, g.dtype, "ncdhw"))
        assert ex._runner.plan.kernel.tables[2].width == 0
        tb.execute(tb.alloc_workspace(size), size, ex)
        assert ex.grad_input.tobytes() == padded.tobytes()
    finally:
        monkeypatch.undo()
        _table_cache.clear_cache()
        _plan.clear_plans()


def test_padded_table_kept_for_every_pytorch_geometry():
    """Sizes and scales PyTorch's rules accept never lose the padded (vector) W table."""
    for n_in in (1, 2, 3, 7, 8, 9, 64, 100):
        for n_out in (1, 2, 5, 8, 63, 64, 200, 1000):
            scales = [0.0]
            s = n_out / n_in
            if math.floor(n_in * s) == n_out:
                scales.append(s)
            for align in (False, True):
                for s in scales:
                    t = _axis_table.axis_table(n_in, n_out, align, s, "<f4", n_out)
                    assert t.width > 0, (n_in, n_out, align, s)


def test_repeatable_executor_keeps_cann_rules():
    """aclSetInputTensorAddr re-checks new arrays under the rules phase one used."""
    g = d_axis_grad("float32", "ncdhw")
    gi = out_array(INPUT_D, g.dtype, "ncdhw")
    status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        g, list(OUTPUT_D), list(INPUT_D), False, 2.0, 1.0, 1.0, gi)
    assert status == OK
    assert aclnn.aclSetAclOpExecutorRepeatable(ex) == OK
    g2 = np.ascontiguousarray(-2 * g)
    assert aclnn.aclSetInputTensorAddr(ex, 0, g2) == OK, aclnn.aclGetRecentErrMsg()
    ws = aclnn.aclrtMalloc(size)
    assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, ex, None) == OK
    np.testing.assert_array_equal(gi, -2 * expected_d(SCALE_2))
    # And the ratio rule stays the ratio rule for a repeatable executor too.
    gi = out_array(INPUT_D, g.dtype, "ncdhw")
    status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        g, list(OUTPUT_D), list(INPUT_D), False, 1.5, 0.0, 0.0, gi)
    assert aclnn.aclSetAclOpExecutorRepeatable(ex) == OK
    assert aclnn.aclSetOutputTensorAddr(ex, 0, gi) == OK
    assert aclnn.aclnnUpsampleTrilinear3dBackward(aclnn.aclrtMalloc(size), size, ex, None) == OK
    np.testing.assert_array_equal(gi, expected_d(RATIO))


# -- what stays the same in both layers -------------------------------------------


def _both_statuses(g, output_size, input_size, align, scales, gi):
    """(status of get_workspace_size, status of the aclnn name, aclnn's message)."""
    try:
        tb.get_workspace_size(g, output_size, input_size, align, *scales, gi)
        python = OK
    except tb.AclnnError as exc:
        python = exc.status
    status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        g, output_size, input_size, align, *scales, gi)
    assert (status == OK) == (ex is not None)
    return python, status, aclnn.aclGetRecentErrMsg()


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, np.float32("nan")])
def test_non_finite_scales_refused_in_both_layers(bad, k, align):
    g = d_axis_grad("float32", "ncdhw")
    gi = out_array(INPUT_D, g.dtype, "ncdhw")
    for others in (1.0, 0.0):
        scales = [1.5 if k else others, others, others]
        scales[k] = bad
        python, status, message = _both_statuses(g, list(OUTPUT_D), list(INPUT_D), align,
                                                 scales, gi)
        assert python == status == INVALID
        name = ("scalesD", "scalesH", "scalesW")[k]
        assert f"{name} must be finite" in message
        assert np.isnan(gi).all() or (gi.view(np.uint32) == 0xFFFFFFFF).all()


def test_size_limits_kept_in_both_layers():
    """CANN's code checks only each dim < INT32_MAX; this project keeps its own limits."""
    g = np.broadcast_to(np.float32(1), (1, 1, 1, 1, 2**20 + 1))
    gi = np.zeros((1, 1, 1, 1, 2), np.float32)
    python, status, message = _both_statuses(g, [1, 1, 2**20 + 1], [1, 1, 1, 1, 2], False,
                                             (0.0, 0.0, 0.0), gi)
    assert python == status == INVALID
    assert "at most 2**20" in message


@pytest.mark.parametrize("go_shape,input_size", [
    ((0, 2, 3, 4, 5), (0, 2, 6, 8, 10)),     # CANN UT case_shape_0_2_3_4_5_normal
    ((2, 0, 3, 4, 5), (2, 0, 6, 8, 10)),     # CANN UT case_shape_2_0_3_4_5_normal
])
@pytest.mark.parametrize("scales", [(0.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.7, 0.0, 0.5)])
def test_empty_batch_in_both_layers(go_shape, input_size, scales):
    """N = 0 or C = 0: status 0 and workspace 0 in both layers, as CANN's code does.

    (0.5, 0.5, 0.5) is consistent with 6 -> 3 etc.; (0.7, 0, 0.5) is not on D
    (floor(6 * 0.7) = 4 != 3): the PyTorch-named API still refuses it, the CANN layer
    checks everything but the consistency before it returns for an empty tensor.
    """
    g = np.zeros(go_shape, np.float32)
    gi = np.zeros(input_size, np.float32)
    status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        g, list(go_shape[2:]), list(input_size), False, *scales, gi)
    assert (status, size) == (OK, 0)
    assert aclnn.aclnnUpsampleTrilinear3dBackward(None, 0, ex, None) == OK
    if scales == (0.7, 0.0, 0.5):
        with pytest.raises(tb.InvalidArgumentError, match="scalesD = 0.7 is inconsistent"):
            tb.get_workspace_size(g, go_shape[2:], input_size, False, *scales, gi)
        return
    size, ex = tb.get_workspace_size(g, go_shape[2:], input_size, False, *scales, gi)
    assert size == 0
    tb.execute(None, 0, ex)
    assert tb.upsample_trilinear3d_backward(g, input_size, scales=scales).shape == input_size


@pytest.mark.parametrize("go_shape,output_size,input_size", [
    ((2, 2, 0, 4, 5), [0, 4, 5], [2, 2, 6, 8, 10]),   # CANN UT: outputSize element 0
    ((2, 2, 3, 4, 5), [3, 4, 5], [2, 2, 0, 8, 10]),   # CANN UT: inputSize D 0
])
def test_empty_spatial_axis_refused_in_both_layers(go_shape, output_size, input_size):
    g = np.zeros(go_shape, np.float32)
    gi = np.zeros([max(n, 0) for n in input_size], np.float32)
    python, status, message = _both_statuses(g, output_size, input_size, False,
                                             (0.0, 0.0, 0.0), gi)
    assert python == status == INVALID
    assert "must be > 0" in message


def test_cann_scales_rule():
    """The rule itself, as ``_operator.cann_scales`` states it."""
    from trilinear_bwd._core._operator import cann_scales

    assert cann_scales([1.5, 2.0, 0.5], False) == [1.5, 2.0, 0.5]
    for scales in ([1.5, 0.0, 2.0], [-1.0, 2.0, 2.0], [0.0, 0.0, 0.0], [2.0, 2.0, -0.0]):
        assert cann_scales(scales, False) == [0.0, 0.0, 0.0]
    assert cann_scales([1.5, 2.0, 0.5], True) == [0.0, 0.0, 0.0]


def test_reference_agrees_with_the_literal_values():
    """The reference, independently of the kernel, gives the note's numbers."""
    g = G_D.reshape(1, 1, 4, 1, 1)
    np.testing.assert_allclose(reference.backward(g, (1, 1, 3, 1, 1))[0, 0, :, 0, 0], RATIO,
                               rtol=1e-15)
    np.testing.assert_allclose(
        reference.backward(g, (1, 1, 3, 1, 1), scales=(1.5, 0, 0))[0, 0, :, 0, 0],
        SCALE_1_5, rtol=1e-15)
    np.testing.assert_allclose(
        reference.backward(g, (1, 1, 3, 1, 1), scales=(2.0, 0, 0))[0, 0, :, 0, 0],
        SCALE_2, rtol=1e-15)
