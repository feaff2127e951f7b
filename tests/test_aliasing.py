"""Aliasing: gradInput overlapping gradOut is refused in phase one (161002), never computed wrong.

The ground truth is computed here, independently of NumPy's overlap test:
the set of bytes each view covers, enumerated element by element.  Views
that share no byte (interleaved, or side by side) must be accepted and give
the right result without touching gradOut.
"""

import math

import numpy as np
import pytest
from _hardening import _view, layouts, torch_or_none
from conftest import assert_matches_reference, examples, np_dtype
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import trilinear_bwd as tb
from trilinear_bwd import aclnn

INVALID = tb.ACLNN_ERR_PARAM_INVALID
RUNTIME = tb.ACLNN_ERR_RUNTIME_ERROR
TORCH = torch_or_none()


def byte_set(arr):
    """Every byte address ``arr``'s elements occupy (enumerated, not bounded)."""
    if arr.size == 0:
        return set()
    base = arr.__array_interface__["data"][0]
    index = np.indices(arr.shape).reshape(arr.ndim, -1).T
    starts = base + index @ np.array(arr.strides, dtype=np.int64)
    return {int(s) + b for s in starts for b in range(arr.itemsize)}


def truly_overlap(a, b):
    return bool(byte_set(a) & byte_set(b))


@st.composite
def two_views(draw):
    """gradOut and gradInput as views of one buffer, anywhere in it, in any layout."""
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    go_shape = (n, c, *(draw(st.integers(1, 3)) for _ in range(3)))
    gi_shape = (n, c, *(draw(st.integers(1, 3)) for _ in range(3)))
    dtype = np_dtype(draw(st.sampled_from(["float32", "float64", "float16", "bfloat16"])))
    go_layout, gi_layout = draw(layouts()), draw(layouts())
    go_need = go_layout.offset + math.prod(go_shape[a] * go_layout.steps[a] for a in go_layout.perm)
    gi_need = math.prod(gi_shape[a] * gi_layout.steps[a] for a in gi_layout.perm)
    # gradInput starts anywhere from the start of the buffer to just past gradOut.
    start = draw(st.integers(0, go_need + 1))
    buf = np.zeros(max(go_need, start + gi_need) + 4, dtype=dtype)
    go = _view(buf, go_shape, go_layout)
    gi = _view(buf[start:], gi_shape, gi_layout)
    values = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(go_shape)
    go[...] = values.astype(dtype)
    return buf, go, gi


@settings(max_examples=examples(400), deadline=None, suppress_health_check=list(HealthCheck))
@given(two_views(), st.sampled_from(["two phases", "one call", "aclnn", "update_arrays"]))
def test_views_of_one_buffer(views, entry):
    buf, go, gi = views
    overlap = truly_overlap(go, gi)
    event(f"{entry}: {'overlapping' if overlap else 'disjoint'}")
    before = buf.tobytes()
    values = go.copy()
    args = (go, list(go.shape[2:]), list(gi.shape), False, 0.0, 0.0, 0.0, gi)

    if entry == "update_arrays":
        # A repeatable executor on private arrays with the same strides, then
        # pointed at the pair.
        size, ex = tb.get_workspace_size(private_like(go), *args[1:7], private_like(gi))
        ex.set_repeatable()
        call = lambda: ex.update_arrays(grad_out=go, grad_input=gi)  # noqa: E731
    elif entry == "two phases":
        call = lambda: tb.get_workspace_size(*args)  # noqa: E731
    elif entry == "one call":
        call = lambda: tb.upsample_trilinear3d_backward(go, gi.shape, out=gi)  # noqa: E731
    else:
        call = None

    if overlap:
        if call is None:
            assert aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*args)[0] == INVALID
        else:
            with pytest.raises(tb.InvalidArgumentError, match="overlap") as info:
                call()
            assert info.value.status == INVALID
        assert buf.tobytes() == before, "a refused call wrote to the buffer"
        return

    if entry == "update_arrays":
        call()
        tb.execute(tb.alloc_workspace(size), size, ex)
    elif entry == "two phases":
        size, ex = call()
        tb.execute(tb.alloc_workspace(size), size, ex)
    elif entry == "one call":
        call()
    else:
        status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*args)
        assert status == 0
        assert aclnn.aclnnUpsampleTrilinear3dBackward(aclnn.aclrtMalloc(size), size, ex, None) == 0
    assert go.tobytes() == values.tobytes(), "gradOut was written"
    assert_matches_reference(gi, values, gi.shape)


def private_like(arr):
    """A copy of ``arr`` in fresh memory with exactly the same strides."""
    lo = sum(min(0, (n - 1) * s) for n, s in zip(arr.shape, arr.strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(arr.shape, arr.strides))
    block = np.zeros((hi - lo) // arr.itemsize + 1, arr.dtype)
    out = np.lib.stride_tricks.as_strided(block[-lo // arr.itemsize:], arr.shape, arr.strides)
    out[...] = arr
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_single_shared_element_is_found(dtype):
    """gradInput sharing exactly one element with gradOut, at each of its positions."""
    itemsize = np.dtype(dtype).itemsize
    for k in range(27):
        buf = np.zeros(64, dtype)
        go = buf[5:32].reshape(1, 1, 3, 3, 3)
        # Element 0 before gradOut, element 1 on gradOut's element k.
        gi = np.lib.stride_tricks.as_strided(buf, (1, 1, 1, 1, 2), (0, 0, 0, 0, (5 + k) * itemsize))
        assert len(byte_set(go) & byte_set(gi)) == itemsize
        with pytest.raises(tb.InvalidArgumentError, match="gradInput must not overlap gradOut"):
            tb.get_workspace_size(go, [3, 3, 3], [1, 1, 1, 1, 2], False, 0, 0, 0, gi)


def test_last_byte_overlap_of_half_precision():
    """float16 views one element apart at the boundary: adjacent is fine, one element in is not."""
    buf = np.zeros(64, np.float16)
    go = buf[:27].reshape(1, 1, 3, 3, 3)
    adjacent = buf[27:35].reshape(1, 1, 2, 2, 2)
    inside = buf[26:34].reshape(1, 1, 2, 2, 2)
    tb.get_workspace_size(go, [3, 3, 3], [1, 1, 2, 2, 2], False, 0, 0, 0, adjacent)
    with pytest.raises(tb.InvalidArgumentError, match="overlap"):
        tb.get_workspace_size(go, [3, 3, 3], [1, 1, 2, 2, 2], False, 0, 0, 0, inside)


@pytest.mark.skipif(TORCH is None, reason="needs PyTorch")
def test_torch_tensors_sharing_storage():
    torch = TORCH
    storage = torch.zeros(200, dtype=torch.float32)
    go = storage[:108].view(2, 2, 3, 3, 3)
    go.copy_(torch.randn(2, 2, 3, 3, 3))
    cases = {
        "overlapping slice": (storage[100:116].view(2, 2, 2, 2, 1), True),
        "inside gradOut, transposed": (storage[8:24].view(2, 2, 1, 2, 2).transpose(0, 1), True),
        "through numpy": (torch.from_numpy(storage.numpy()[50:66]).view(2, 2, 2, 2, 1), True),
        "strided, interleaved": (storage.as_strided((2, 2, 2, 2, 1), (1, 1, 1, 1, 1), 0), None),
        "after gradOut": (storage[108:124].view(2, 2, 2, 2, 1), False),
    }
    for name, (gi, overlap) in cases.items():
        args = (go, [3, 3, 3], list(gi.shape), False, 0.0, 0.0, 0.0, gi)
        if overlap is False:
            size, ex = tb.get_workspace_size(*args)
            tb.execute(tb.alloc_workspace(size), size, ex)
            assert_matches_reference(gi.numpy(), go.numpy(), gi.shape)
            continue
        # "strided, interleaved" overlaps itself as well as gradOut: 161002 either way.
        with pytest.raises(tb.InvalidArgumentError, match="overlap") as info:
            tb.get_workspace_size(*args)
        assert info.value.status == INVALID, name
        assert aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*args)[0] == INVALID


@pytest.mark.skipif(TORCH is None, reason="needs PyTorch")
def test_torch_tensor_and_numpy_view_of_it():
    torch = TORCH
    t = torch.randn(2, 2, 4, 4, 4)
    gi = t.numpy()[:, :, :2, :2, :2]           # numpy view into the tensor's storage
    with pytest.raises(tb.InvalidArgumentError, match="overlap"):
        tb.upsample_trilinear3d_backward(t, (2, 2, 2), out=gi)


def test_workspace_sharing_memory_with_an_array_is_refused():
    """A workspace aliasing gradInput or gradOut through another object is 361001."""
    g = np.random.default_rng(0).standard_normal((1, 2, 4, 4, 4)).astype(np.float32)
    raw = bytearray(1 << 16)
    gi = np.frombuffer(raw, np.float32, count=16, offset=4096).reshape(1, 2, 2, 2, 2)
    size, ex = tb.get_workspace_size(g, [4, 4, 4], [1, 2, 2, 2, 2], False, 0, 0, 0, gi)
    assert size <= len(raw)
    for ws in (raw, memoryview(raw), np.frombuffer(raw, np.uint8)):
        with pytest.raises(tb.ExecutionError, match="workspace must not overlap gradInput") as info:
            tb.execute(ws, size, ex)
        assert info.value.status == RUNTIME
        assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, ex, None) == RUNTIME
    go_raw = bytearray(g.tobytes() + bytes(size))
    g2 = np.frombuffer(go_raw, np.float32, count=g.size).reshape(g.shape)
    gi2 = np.zeros_like(gi)
    size2, ex2 = tb.get_workspace_size(g2, [4, 4, 4], [1, 2, 2, 2, 2], False, 0, 0, 0, gi2)
    with pytest.raises(tb.ExecutionError, match="workspace must not overlap gradOut"):
        tb.execute(memoryview(go_raw), size2, ex2)
    assert ex.state == ex2.state == "ready"
    assert not gi2.any()
