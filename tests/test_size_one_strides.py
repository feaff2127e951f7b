"""Strides of axes of size 1 (or of empty arrays) are never compared, by class.

Such a stride is never multiplied by anything but 0, so exporters report it
as they like (PyTorch 2.8's DLPack view of a size-1 axis differs from
``tensor.stride()``; NumPy keeps whatever ``as_strided`` was given).  Every
check that compares strides -- the core's (``_arrays.same_strides``,
``is_misaligned``, an executor's ``update_arrays``) and the torch wing's
(``_cache._faithful``) -- must accept any value there, and still refuse a
difference on an axis longer than 1.
"""

import itertools

import numpy as np
import pytest

import trilinear_bwd
from trilinear_bwd._core import _arrays
from trilinear_bwd._core._status import InvalidArgumentError

SHAPE = (2, 1, 1, 3, 4)          # N, C=1, D=1, H, W: two axes of size 1
ODD = (-40, 0, 4, 7 * 4, 1000 * 4)   # strides an exporter might report for them


def _restrided(arr, axis_strides):
    """A view of ``arr``'s memory with the given strides on its axes of size 1."""
    strides = list(arr.strides)
    for axis, stride in axis_strides.items():
        assert arr.shape[axis] == 1
        strides[axis] = stride
    return np.lib.stride_tricks.as_strided(arr, arr.shape, strides, writeable=arr.flags.writeable)


@pytest.mark.parametrize("c_stride, d_stride", list(itertools.product(ODD, ODD))[::3])
def test_same_strides_ignores_size_one_axes(c_stride, d_stride):
    a = np.zeros(SHAPE, np.float32)
    b = _restrided(a, {1: c_stride, 2: d_stride})
    assert _arrays.same_strides(a.shape, a.strides, b.strides)
    # An axis longer than 1 still counts.
    c = np.zeros((2, 1, 1, 4, 3), np.float32).transpose(0, 1, 2, 4, 3)
    assert not _arrays.same_strides(SHAPE, a.strides, c.strides)


def test_same_strides_of_empty_arrays():
    assert _arrays.same_strides((0, 2, 3), (24, 12, 4), (4, 0, 99))
    assert not _arrays.same_strides((1, 2), (8, 4), (8,))


@pytest.mark.parametrize("stride", [1, 3, 5])
def test_misaligned_looks_at_axes_that_are_stepped_along(stride, monkeypatch):
    # A float type whose alignment is below its size (float64 on 32-bit
    # platforms) is checked stride by stride: a size-1 axis' byte stride
    # that is not a multiple of the size must not count.
    a = _restrided(np.zeros(SHAPE, np.float32), {1: stride})
    assert not _arrays.is_misaligned(a)

    class Dtype:
        alignment, itemsize = 1, 4

    class View:
        flags = a.flags
        dtype = Dtype()
        itemsize = 4
        shape, strides, size = a.shape, a.strides, a.size

    assert not _arrays.is_misaligned(View())
    View.shape = (2, 2, 1, 3, 4)           # now axis 1 is stepped along
    assert _arrays.is_misaligned(View())


@pytest.mark.parametrize("stride", ODD)
def test_update_arrays_accepts_other_strides_of_size_one_axes(stride):
    rng = np.random.default_rng(0)
    out_size = (2, 6, 8)
    g = rng.standard_normal(SHAPE[:2] + out_size).astype(np.float32)
    gi = np.zeros(SHAPE, np.float32)
    size, ex = trilinear_bwd.get_workspace_size(g, out_size, SHAPE, False, 0.0, 0.0, 0.0, gi)
    ex.set_repeatable()
    ws = trilinear_bwd.alloc_workspace(size)
    trilinear_bwd.execute(ws, size, ex)
    want = gi.copy()
    # The same arrays as other exporters report them: C (size 1) with any stride.
    g2 = _restrided(g.copy(), {1: stride})
    gi2 = _restrided(np.zeros(SHAPE, np.float32), {1: stride, 2: stride})
    ex.update_arrays(grad_out=g2, grad_input=gi2)
    trilinear_bwd.execute(ws, size, ex)
    np.testing.assert_array_equal(gi2, want)
    # A stride of an axis longer than 1 still has to match.
    with pytest.raises(InvalidArgumentError, match="strides"):
        ex.update_arrays(grad_out=np.asfortranarray(g))


@pytest.mark.parametrize("stride", ODD)
def test_the_torch_wing_remembers_geometries_whatever_size_one_strides_say(stride):
    torch = pytest.importorskip("torch")
    from trilinear_bwd.torch import _cache
    t = torch.randn(SHAPE[:2] + (2, 6, 8))
    source = _restrided(t.numpy(), {1: stride})
    key = ("a key",)
    # What PyTorch's DLPack export reports for a size-1 axis differs by release.
    assert _cache._faithful(key, source, t, False) == key
    other = np.asfortranarray(t.numpy())
    assert _cache._faithful(key, other, t, False) is None


@pytest.mark.parametrize("n", [1, 2])
def test_a_tensor_with_size_one_axes_takes_the_fast_path(n):
    torch = pytest.importorskip("torch")
    import trilinear_bwd.torch as tbt
    from trilinear_bwd.torch import _cache
    _cache.forget()
    x = torch.randn(n, 1, 1, 3, 4).as_strided((n, 1, 1, 3, 4), (12, 999, 77, 4, 1))
    tbt.upsample_trilinear3d(x, scale_factor=2)
    assert len(_cache.geometries) == 1
    assert _cache.REFUSED not in _cache.geometries.values()
    assert all(type(g).__name__ == "Geometry" for g in _cache.geometries.values())
