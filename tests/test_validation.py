"""Every rule of the contract: the status code, the message, and nothing written."""

import re
import numpy as np
import pytest
from conftest import np_dtype

import trilinear_bwd as tb
from trilinear_bwd import aclnn

NULL, INVALID = tb.ACLNN_ERR_PARAM_NULLPTR, tb.ACLNN_ERR_PARAM_INVALID


def good_call(**override):
    """A valid phase-one call as a dict of CANN-named arguments, with overrides."""
    args = {
        "gradOut": np.ones((2, 3, 4, 6, 8), dtype=np.float32),
        "outputSize": [4, 6, 8],
        "inputSize": [2, 3, 2, 3, 4],
        "alignCorners": False,
        "scalesD": 0.0,
        "scalesH": 0.0,
        "scalesW": 0.0,
        "gradInput": np.full((2, 3, 2, 3, 4), 7.0, dtype=np.float32),
    }
    args.update(override)
    return args


def call(args):
    return tb.get_workspace_size(*args.values())


def expect(status, match, **override):
    """Both APIs reject the call with ``status``; gradInput is untouched."""
    args = good_call(**override)
    before = None
    gi = args["gradInput"]
    if isinstance(gi, np.ndarray) and gi.size < 10**6:
        before = gi.copy()
    with pytest.raises(tb.AclnnError, match=match) as info:
        call(args)
    assert info.value.status == status
    assert isinstance(info.value, ValueError)
    got_status, size, executor = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        *args.values())
    assert (got_status, size, executor) == (status, 0, None)
    assert re.search(match, aclnn.aclGetRecentErrMsg())
    if before is not None:
        np.testing.assert_array_equal(gi, before)


def test_good_call_succeeds():
    size, executor = call(good_call())
    assert size > 0 and isinstance(executor, tb.Executor)
    assert aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*good_call().values())[0] == 0


@pytest.mark.parametrize("name", ["gradOut", "outputSize", "inputSize", "gradInput"])
def test_missing_argument_is_nullptr(name):
    expect(NULL, f"{name} must not be None", **{name: None})


@pytest.mark.parametrize("dtype", ["int32", "int64", "complex64", "bool", "uint16", "object",
                                   ">f4", "<U3"])
def test_unsupported_dtype(dtype):
    g = np.ones((2, 3, 4, 6, 8)).astype(dtype)
    gi = np.ones((2, 3, 2, 3, 4)).astype(dtype)
    expect(INVALID, "gradOut", gradOut=g, gradInput=gi)


def test_dtypes_must_match():
    expect(INVALID, "gradInput dtype must equal gradOut dtype",
           gradInput=np.zeros((2, 3, 2, 3, 4), np.float64))
    expect(INVALID, "gradInput dtype must equal gradOut dtype",
           gradInput=np.zeros((2, 3, 2, 3, 4), np_dtype("bfloat16")))


@pytest.mark.parametrize("ndim", [0, 1, 4, 6])
def test_grad_out_must_be_5d(ndim):
    expect(INVALID, f"gradOut must be 5-D.*got {ndim}-D", gradOut=np.ones((1,) * ndim, np.float32))


@pytest.mark.parametrize("size, match", [
    ([4, 6], "outputSize must have exactly 3 elements, got 2"),
    ([4, 6, 8, 1], "outputSize must have exactly 3 elements, got 4"),
    ([4, 0, 8], r"outputSize\[1\] \(H\) must be > 0, got 0"),
    ([-4, 6, 8], r"outputSize\[0\] \(D\) must be > 0, got -4"),
    ([4, 6.0, 8], r"outputSize\[1\] \(H\) must be an integer, got 6.0"),
    ([4, True, 8], r"outputSize\[1\] \(H\) must be an integer, got True"),
    ("468", "outputSize must be a sequence of 3 integers"),
    (7, "outputSize must be a sequence of 3 integers"),
])
def test_output_size_rules(size, match):
    expect(INVALID, match, outputSize=size)


@pytest.mark.parametrize("size, match", [
    ([2, 3, 2, 3], "inputSize must have exactly 5 elements, got 4"),
    ([2, 3, 2, 0, 4], r"inputSize\[3\] \(H\) must be > 0, got 0"),
    ([2, 3, 2, 3, -1], r"inputSize\[4\] \(W\) must be > 0, got -1"),
    ([2, -3, 2, 3, 4], r"inputSize\[1\] \(C\) must be >= 0, got -3"),
    ([2, 3, 2.5, 3, 4], r"inputSize\[2\] \(D\) must be an integer, got 2.5"),
])
def test_input_size_rules(size, match):
    expect(INVALID, match, inputSize=size)


def test_numpy_integer_sizes_are_accepted():
    size, _ = call(good_call(outputSize=np.array([4, 6, 8]),
                             inputSize=tuple(np.int32(v) for v in (2, 3, 2, 3, 4))))
    assert size > 0


def test_batch_and_channels_must_match_input_size():
    expect(INVALID, r"gradOut N must equal inputSize\[0\] \(N\) = 1, got 2",
           inputSize=[1, 3, 2, 3, 4], gradInput=np.zeros((1, 3, 2, 3, 4), np.float32))
    expect(INVALID, r"gradOut C must equal inputSize\[1\] \(C\) = 4, got 3",
           inputSize=[2, 4, 2, 3, 4], gradInput=np.zeros((2, 4, 2, 3, 4), np.float32))


def test_spatial_shape_must_match_output_size():
    expect(INVALID, r"gradOut H must equal outputSize\[1\] \(H\) = 5, got 6", outputSize=[4, 5, 8])


def test_grad_input_shape_must_match_input_size():
    expect(INVALID, r"gradInput shape must equal inputSize \(2, 3, 2, 3, 4\), got \(2, 3, 2, 3, 5\)",
           gradInput=np.zeros((2, 3, 2, 3, 5), np.float32))


@pytest.mark.parametrize("name", ["scalesD", "scalesH", "scalesW"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_scales_must_be_finite(name, value):
    expect(INVALID, f"{name} must be finite", **{name: value})


@pytest.mark.parametrize("value", ["2", [2.0], True, 1j])
def test_scales_must_be_real_numbers(value):
    expect(INVALID, "scalesH must be a real number", scalesH=value)


def test_scale_inconsistent_with_output_size():
    """PyTorch-named API only: CANN's code does not check this (tests/test_cann_rules.py)."""
    # floor(3 * 1.5) = 4 != 6
    args = good_call(scalesD=2.0, scalesH=1.5, scalesW=2.0)
    with pytest.raises(tb.InvalidArgumentError,
                       match=r"scalesH = 1.5 is inconsistent with outputSize\[1\] \(H\) = 6"):
        call(args)
    status, size, executor = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        *args.values())
    assert status == 0 and size > 0 and executor is not None


def test_consistent_and_ignored_scales_are_accepted():
    assert call(good_call(scalesD=2.0, scalesH=2.2, scalesW=2.1))[0] > 0
    # Negative means "not given"; align_corners ignores scales entirely.
    assert call(good_call(scalesD=-1.0))[0] > 0
    assert call(good_call(alignCorners=True, scalesH=1.5))[0] > 0


@pytest.mark.parametrize("value", [0, 1, "yes", None, 1.0])
def test_align_corners_must_be_bool(value):
    expect(INVALID, "alignCorners must be a bool", alignCorners=value)


def test_numpy_bool_align_corners_is_accepted():
    assert call(good_call(alignCorners=np.bool_(True)))[0] > 0


def test_grad_input_read_only():
    gi = np.zeros((2, 3, 2, 3, 4), np.float32)
    gi.flags.writeable = False
    expect(INVALID, "gradInput must be writable", gradInput=gi)


def test_grad_input_overlapping_grad_out():
    buf = np.zeros(2 * 3 * 4 * 6 * 8 + 2 * 3 * 2 * 3 * 4, np.float32)
    g = buf[: 2 * 3 * 4 * 6 * 8].reshape(2, 3, 4, 6, 8)
    inside = buf[10: 10 + 144].reshape(2, 3, 2, 3, 4)
    expect(INVALID, "gradInput must not overlap gradOut", gradOut=g, gradInput=inside)
    after = buf[2 * 3 * 4 * 6 * 8:].reshape(2, 3, 2, 3, 4)
    assert call(good_call(gradOut=g, gradInput=after))[0] > 0


def test_grad_input_overlapping_itself():
    gi = np.lib.stride_tricks.as_strided(np.zeros(6, np.float32), (2, 3, 2, 3, 4), (0, 0, 0, 4, 4))
    expect(INVALID, "gradInput must not overlap itself", gradInput=gi)


def test_misaligned_arrays():
    raw = np.zeros(2 * 3 * 4 * 6 * 8 * 4 + 1, np.uint8)
    g = raw[1:].view(np.float32).reshape(2, 3, 4, 6, 8)
    g[...] = np.arange(g.size, dtype=np.float32).reshape(g.shape)
    assert not g.flags.aligned
    expect(INVALID, "gradOut must be aligned", gradOut=g)
    # The one-call function copies a misaligned grad_out instead.
    np.testing.assert_array_equal(tb.upsample_trilinear3d_backward(g, (2, 3, 4)),
                                  tb.upsample_trilinear3d_backward(g.copy(), (2, 3, 4)))


@pytest.mark.parametrize("shape_out, shape_in, match", [
    ((1, 1, 1, 1, 2**20 + 1), (1, 1, 1, 1, 1), r"gradOut dimension 4 must be at most 2\*\*20"),
    ((1, 1, 1, 1, 1), (1, 1, 1, 1, 2**20 + 1), r"gradInput dimension 4 must be at most 2\*\*20"),
    ((2**10, 2**10, 1, 1, 2**14), (2**10, 2**10, 1, 1, 2**14), r"must be below 60 GiB"),
    ((1, 1, 2**11, 2**20, 1), (1, 1, 1, 1, 1), r"N\*C\*oD\*oH must be below 2\*\*31, got 2147483648"),
    ((1, 1, 1, 1, 1), (1, 1, 1, 2**16, 2**16), r"iW\*iH must be below 2\*\*31, got 4294967296"),
])
def test_limits_without_allocating(shape_out, shape_in, match):
    """Zero-stride views stand for arrays too large to allocate."""
    g = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape_out, (0,) * 5)
    gi = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape_in, (0,) * 5)
    expect(INVALID, match, gradOut=g, outputSize=list(shape_out[2:]), inputSize=list(shape_in),
           gradInput=gi)


def test_sixty_gib_limit_boundary():
    # N*C*(o + i + o + o)*4 with all sizes 1 along D, H: 4 * (ow + iw + iw + iw) per slice.
    from trilinear_bwd._core._operator import BACKWARD, MAX_BYTES, check_limits

    ow = iw = 2**20
    per_slice = (ow + iw + iw + iw) * 4
    slices_ok = (MAX_BYTES - 1) // per_slice
    check_limits(BACKWARD, (slices_ok, 1, 1, 1, ow), (slices_ok, 1, 1, 1, iw))
    with pytest.raises(tb.InvalidArgumentError, match="60 GiB"):
        check_limits(BACKWARD, (slices_ok + 1, 1, 1, 1, ow), (slices_ok + 1, 1, 1, 1, iw))


@pytest.mark.parametrize("value", [0, -2000, 10**6, 2.0, True, "4"])
def test_num_threads_rules(value):
    with pytest.raises(tb.InvalidArgumentError, match="num_threads"):
        tb.get_workspace_size(*good_call().values(), num_threads=value)


def test_non_array_arguments():
    expect(INVALID, "gradOut must be an array", gradOut=3.0)
    expect(INVALID, "gradInput must be an array", gradInput="abc")


def test_one_call_function_validates_before_allocating():
    g = np.ones((1, 1, 4, 4, 4), np.float32)
    with pytest.raises(tb.InvalidArgumentError, match=r"inputSize\[0\] \(D\) must be > 0"):
        tb.upsample_trilinear3d_backward(g, (0, 2, 2))
    with pytest.raises(tb.NullArgumentError):
        tb.upsample_trilinear3d_backward(None, (2, 2, 2))
    with pytest.raises(tb.InvalidArgumentError, match="scales must have exactly 3"):
        tb.upsample_trilinear3d_backward(g, (2, 2, 2), scales=(2.0, 2.0))


def test_error_string_carries_status_name():
    with pytest.raises(tb.AclnnError) as info:
        call(good_call(outputSize=[4, 0, 8]))
    assert "ACLNN_ERR_PARAM_INVALID 161002" in str(info.value)
