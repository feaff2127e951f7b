"""Zero-copy inputs and outputs: DLPack producers, PyTorch tensors, buffers, array interfaces."""

import numpy as np
import pytest
from conftest import random_grad

import trilinear_bwd as tb
from trilinear_bwd._core._arrays import as_array

SHAPE_OUT = (2, 3, 8, 6, 10)
SHAPE_IN = (2, 3, 4, 3, 5)


def expected_for(g):
    return tb.upsample_trilinear3d_backward(np.asarray(g, dtype=np.float64), SHAPE_IN)


class DLPackOnly:
    """A foreign array that offers nothing but the DLPack protocol."""

    def __init__(self, arr, device=(1, 0)):
        self._arr = arr
        self._device = device

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._device


class ArrayInterfaceOnly:
    """A foreign array that offers only ``__array_interface__``."""

    def __init__(self, arr):
        self._arr = arr
        self.__array_interface__ = arr.__array_interface__


# -- generic protocols ---------------------------------------------------------

def test_dlpack_producer_is_viewed_in_place():
    g = random_grad(SHAPE_OUT, "float32", seed=1)
    gi = np.full(SHAPE_IN, np.nan, np.float32)
    view = as_array(DLPackOnly(gi), "gradInput")
    assert view.ctypes.data == gi.ctypes.data
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        # NumPy before 2.1 (the newest for Python 3.9 is 2.0) imports every
        # DLPack tensor read-only, so a DLPack-only gradInput cannot be
        # written: it is refused, and gradOut still comes in through DLPack.
        assert not view.flags.writeable
        with pytest.raises(tb.InvalidArgumentError, match="writable") as info:
            tb.upsample_trilinear3d_backward(DLPackOnly(g), SHAPE_IN, out=DLPackOnly(gi))
        assert info.value.status == 161002
        tb.upsample_trilinear3d_backward(DLPackOnly(g), SHAPE_IN, out=gi)
    else:
        assert view.flags.writeable
        tb.upsample_trilinear3d_backward(DLPackOnly(g), SHAPE_IN, out=DLPackOnly(gi))
    np.testing.assert_allclose(gi, expected_for(g), rtol=1e-5, atol=1e-5)


def test_non_cpu_dlpack_device_is_161002():
    g = random_grad(SHAPE_OUT, "float32")
    with pytest.raises(tb.InvalidArgumentError, match="CPU memory.*type 2") as info:
        tb.upsample_trilinear3d_backward(DLPackOnly(g, device=(2, 0)), SHAPE_IN)
    assert info.value.status == 161002


def test_memoryview_in_and_out_without_copy():
    g = random_grad(SHAPE_OUT, "float32", seed=2)
    raw = bytearray(int(np.prod(SHAPE_IN)) * 4)
    out = memoryview(raw).cast("B").cast("f", SHAPE_IN)
    tb.upsample_trilinear3d_backward(memoryview(g), SHAPE_IN, out=out)
    got = np.frombuffer(raw, np.float32).reshape(SHAPE_IN)
    np.testing.assert_allclose(got, expected_for(g), rtol=1e-5, atol=1e-5)


def test_read_only_memoryview_as_grad_input_is_refused():
    ro = memoryview(np.zeros(SHAPE_IN, np.float32).tobytes()).cast("f", SHAPE_IN)
    with pytest.raises(tb.InvalidArgumentError, match="writable"):
        tb.upsample_trilinear3d_backward(random_grad(SHAPE_OUT, "float32"), SHAPE_IN, out=ro)


def test_array_interface_is_written_in_place():
    g = random_grad(SHAPE_OUT, "float64", seed=3)
    gi = np.zeros(SHAPE_IN)
    tb.upsample_trilinear3d_backward(ArrayInterfaceOnly(g), SHAPE_IN, out=ArrayInterfaceOnly(gi))
    np.testing.assert_allclose(gi, expected_for(g), rtol=1e-12)


def test_grad_input_that_needs_a_copy_is_refused_not_copied():
    g = random_grad((1, 1, 2, 2, 2), "float64")
    nested = np.zeros((1, 1, 1, 1, 1)).tolist()
    with pytest.raises(tb.InvalidArgumentError, match="gradInput is written in place"):
        tb.upsample_trilinear3d_backward(g, (1, 1, 1, 1, 1), out=nested)
    # Read-only arguments may still be converted.
    got = tb.upsample_trilinear3d_backward(g.tolist(), (1, 1, 1, 1, 1))
    assert got.item() == pytest.approx(g.sum())


# -- PyTorch tensors -----------------------------------------------------------

def _tensor_layouts(torch, dtype):
    base = torch.randn(SHAPE_OUT, dtype=torch.float32).to(dtype)
    return {
        "ncdhw": base,
        "channels_last_3d": base.contiguous(memory_format=torch.channels_last_3d),
        "strided": torch.randn((2, 3, 16, 6, 21)).to(dtype)[:, :, ::2, :, 1::2],
        "requires_grad": base.clone().requires_grad_(),
    }


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["ncdhw", "channels_last_3d", "strided", "requires_grad"])
def test_torch_tensor_is_viewed_in_place(torch, dtype, layout):
    t = _tensor_layouts(torch, getattr(torch, dtype))[layout]
    arr = as_array(t, "gradOut")
    assert arr.ctypes.data == t.data_ptr()  # the same memory: zero copy
    assert arr.shape == tuple(t.shape)
    assert arr.strides == tuple(s * t.element_size() for s in t.stride())
    assert arr.dtype.name == dtype and arr.flags.writeable
    np.testing.assert_array_equal(arr.astype(np.float64),
                                  t.detach().to(torch.float64).numpy())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("fmt", ["contiguous_format", "channels_last_3d"])
def test_torch_grad_input_is_written_in_place(torch, dtype, fmt):
    tdtype = getattr(torch, dtype)
    g = torch.randn(SHAPE_OUT).to(tdtype)
    gi = torch.full(SHAPE_IN, float("nan"), dtype=tdtype).contiguous(
        memory_format=getattr(torch, fmt))
    ptr = gi.data_ptr()
    result = tb.upsample_trilinear3d_backward(g, SHAPE_IN, out=gi)
    assert result is gi and gi.data_ptr() == ptr
    expected = torch.ops.aten.upsample_trilinear3d_backward(g, SHAPE_OUT[2:], SHAPE_IN, False)
    tol = 2e-5 if dtype == "float32" else 1.6e-2
    scale = expected.abs().max().item()
    torch.testing.assert_close(gi.float(), expected.float(), rtol=tol, atol=tol * scale)


def test_executor_binds_the_tensors_memory(torch):
    g = torch.randn(SHAPE_OUT)
    gi = torch.empty(SHAPE_IN)
    size, executor = tb.get_workspace_size(g, SHAPE_OUT[2:], SHAPE_IN, False, 0.0, 0.0, 0.0, gi)
    assert executor.grad_out.ctypes.data == g.data_ptr()
    assert executor.grad_input.ctypes.data == gi.data_ptr()
    executor.set_repeatable()
    tb.execute(tb.alloc_workspace(size), size, executor)
    first = gi.clone()
    g.mul_(2)  # seen by the next run: the executor reads the tensor's memory
    tb.execute(tb.alloc_workspace(size), size, executor)
    torch.testing.assert_close(gi, 2 * first)


def test_torch_grad_input_requiring_grad(torch):
    g = torch.randn(SHAPE_OUT)
    gi = torch.zeros(SHAPE_IN, requires_grad=True)
    with pytest.raises(tb.InvalidArgumentError, match="must not require grad") as info:
        tb.upsample_trilinear3d_backward(g, SHAPE_IN, out=gi)
    assert info.value.status == 161002
    assert gi.detach().abs().sum().item() == 0  # nothing written
    with torch.no_grad():  # PyTorch's rule for out= tensors: fine without grad mode
        tb.upsample_trilinear3d_backward(g, SHAPE_IN, out=gi)
    assert gi.detach().abs().sum().item() > 0


def test_torch_non_cpu_and_sparse_tensors_are_161002(torch):
    meta = torch.empty(SHAPE_OUT, device="meta")
    with pytest.raises(tb.InvalidArgumentError, match="CPU memory.*meta"):
        tb.upsample_trilinear3d_backward(meta, SHAPE_IN)
    sparse = torch.zeros(SHAPE_OUT).to_sparse()
    with pytest.raises(tb.InvalidArgumentError, match="dense"):
        tb.upsample_trilinear3d_backward(sparse, SHAPE_IN)


def test_unsupported_torch_dtype_names_it(torch):
    g = torch.zeros(SHAPE_OUT, dtype=torch.int32)
    with pytest.raises(tb.InvalidArgumentError, match="dtype must be float32"):
        tb.upsample_trilinear3d_backward(g, SHAPE_IN)
