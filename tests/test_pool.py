"""The pool of faulted memory behind fresh results (trilinear_bwd._pool)."""

import gc

import numpy as np
import pytest
from conftest import assert_matches_reference, np_dtype, random_grad

import trilinear_bwd as tb
from trilinear_bwd import _pool

BIG = (1, 8, 48, 48, 48)          # 1.7 MiB as float16, over _pool.MIN_BYTES
G_SHAPE = (1, 8, 24, 24, 24)


@pytest.fixture(autouse=True)
def fresh_pool():
    _pool.clear()
    previous = _pool.set_limit(_pool.POOL_BYTES)
    yield
    _pool.set_limit(previous)
    _pool.clear()


def _call(dtype="float32", layout_cl=False):
    g = random_grad(G_SHAPE, dtype, seed=4)
    if layout_cl:
        g = np.ascontiguousarray(g.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    return g, tb.upsample_trilinear3d_backward(g, BIG[2:])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_dead_result_is_reused_and_recomputed_right(dtype, channels_last):
    g, first = _call(dtype, channels_last)
    assert first.dtype == np_dtype(dtype)
    assert (first.strides[1] == first.itemsize) == channels_last
    assert_matches_reference(first, g, BIG)
    address = first.__array_interface__["data"][0]
    expected = first.copy()
    del first
    gc.collect()
    assert _pool.held() > 0
    g2, second = _call(dtype, channels_last)
    assert second.__array_interface__["data"][0] == address   # the same, faulted block
    np.testing.assert_array_equal(second, expected)


def test_a_view_keeps_the_block():
    g, first = _call()
    view = first[0, 3]
    kept = view.copy()
    del first
    gc.collect()
    _, second = _call()          # must not reuse the block the view still sees
    second[...] = -1
    np.testing.assert_array_equal(view, kept)


def test_a_torch_tensor_keeps_the_block(torch):
    # Torch results come from PyTorch's allocator (resizable, see
    # test_torch_front.py); a tensor made from a pooled array still keeps it.
    _, first = _call()
    t = _pool.as_tensor(first)
    del first
    kept = t.clone()
    address = t.data_ptr()
    _, other = _call()
    assert other.__array_interface__["data"][0] != address
    other[...] = -1
    assert torch.equal(t, kept)
    del t
    gc.collect()
    assert _pool.held() > 0


def test_limit_zero_is_no_pool_and_limits_are_kept():
    _pool.set_limit(0)
    _, first = _call()
    del first
    gc.collect()
    assert _pool.held() == 0
    _pool.set_limit(2**21)            # room for one block of 2 MiB + 64 bytes? no: less
    _, a = _call()
    _, b = _call()
    del a, b
    gc.collect()
    assert _pool.held() <= 2**21
    with pytest.raises(tb.InvalidArgumentError):
        _pool.set_limit(-1)


def test_small_results_are_not_pooled():
    g = random_grad((1, 1, 4, 4, 4), "float32")
    out = tb.upsample_trilinear3d_backward(g, (2, 2, 2))
    assert out.flags.owndata
