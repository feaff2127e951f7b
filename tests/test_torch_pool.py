"""The storages kept for large torch results (``trilinear_bwd._torch_pool``).

A kept storage is handed out again only when nothing else refers to it, and
never after its user resized it or made it unresizable; what it hands out
behaves like ``torch.empty``'s tensors (resizable, the same strides).
"""

import pytest

torch = pytest.importorskip("torch")

import trilinear_bwd as tb  # noqa: E402
from trilinear_bwd import _torch_pool  # noqa: E402

# 2 x 16 x 32^3 float32: 4 MiB, above the pool's 1 MiB floor.
SHAPE = (2, 16, 32, 32, 32)
FORMATS = [torch.contiguous_format, torch.channels_last_3d]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _fresh_pool():
    tb.pool.clear()
    yield
    tb.pool.clear()


def _take(fmt=torch.contiguous_format, dtype=torch.float32, shape=SHAPE):
    return _torch_pool.empty(shape, dtype, fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_handed_out_tensors_are_like_torch_empty(dtype, fmt):
    first = _take(fmt, dtype)
    ptr = first.data_ptr()
    del first
    again = _take(fmt, dtype)
    assert again.data_ptr() == ptr                      # the kept storage, reused
    expected = torch.empty(SHAPE, dtype=dtype, memory_format=fmt)
    assert again.shape == expected.shape and again.stride() == expected.stride()
    assert again.dtype == dtype and again.storage_offset() == 0
    again.resize_(2 * again.numel())                    # resizable like PyTorch's own
    again.resize_(0)
    torch.cat([expected, expected], out=again)
    assert again.shape[0] == 2 * SHAPE[0]


# Every way a storage stays referred to: a view, an alias made with set_,
# a DLPack capsule, autograd's saved tensors, a container.
def _view(t):
    return t[0]


def _alias(t):
    return torch.empty(0).set_(t.untyped_storage())


def _capsule(t):
    return torch.utils.dlpack.to_dlpack(t)


def _saved_for_backward(t):
    w = torch.ones((), requires_grad=True)
    return t * w                                        # mul saves t for w's gradient


def _in_a_list(t):
    return [t]


@pytest.mark.parametrize("keep", [_view, _alias, _capsule, _saved_for_backward, _in_a_list])
def test_never_reused_while_referred_to(keep):
    first = _take()
    ptr = first.data_ptr()
    held = keep(first)
    del first
    second = _take()
    assert second.data_ptr() != ptr
    second_ptr = second.data_ptr()
    del held, second
    # Once nothing refers to them, both storages are free to serve again.
    assert _take().data_ptr() in (ptr, second_ptr)


@pytest.mark.parametrize("change", ["grow", "numpy", "storage_resize"])
def test_a_changed_storage_is_dropped_not_reused(change):
    first = _take()
    before = _torch_pool.held()
    if change == "grow":
        first.resize_(2 * first.numel())                # a new, larger storage block
    elif change == "numpy":
        first.numpy()                                   # marks the storage unresizable
    else:
        first.untyped_storage().resize_(first.untyped_storage().nbytes() + 64)
    storage = first.untyped_storage()
    del first
    second = _take()
    # The changed storage is forgotten (its bytes no longer counted) and the
    # new result does not share it.
    assert second.untyped_storage()._cdata != storage._cdata
    assert _torch_pool.held() == before
    second.resize_(4 * second.numel())


def test_the_limit_bounds_what_is_kept_and_zero_keeps_nothing():
    previous = tb.pool.set_limit(12 * 2**20)
    try:
        alive = [_take(shape=(1, 1, 32, 32, 32 * k)) for k in range(8, 16)]
        assert _torch_pool.held() <= 12 * 2**20
        del alive
        for k in range(16, 40):
            _take(shape=(1, 1, 32, 32, 32 * k))
            assert _torch_pool.held() <= 12 * 2**20
        tb.pool.set_limit(0)
        tb.pool.clear()
        _take()
        assert _torch_pool.held() == 0
    finally:
        tb.pool.set_limit(previous)


def test_pool_clear_forgets_the_kept_storages():
    _take()
    assert _torch_pool.held() > 0
    tb.pool.clear()
    assert _torch_pool.held() == 0


def test_small_results_are_plain_torch_empty():
    _take(shape=(1, 1, 4, 4, 4))
    assert _torch_pool.held() == 0


def test_front_end_results_reuse_storages_and_stay_correct():
    import trilinear_bwd.torch as tbt

    x = torch.randn(2, 16, 16, 16, 16)
    expected = torch.nn.functional.interpolate(x, size=(32, 32, 32), mode="trilinear")
    first = tbt.upsample_trilinear3d(x, size=(32, 32, 32))
    ptr = first.data_ptr()
    first.fill_(float("nan"))
    del first
    second = tbt.upsample_trilinear3d(x, size=(32, 32, 32))
    assert second.data_ptr() == ptr
    torch.testing.assert_close(second, expected)
