"""The memory of fresh results: never handed out while anything can still reach it.

The class: a block of memory is handed out again while
something can still reach it, or kept after its owner changed it.  Torch
results are ``torch.empty``'s own (the library keeps nothing of them);
NumPy results come from the pool (``_pool``), which gets a block back only
from the finalizer of its owner, once the result and every view of it have
died.  Each test below holds for every front end that returns a fresh
result, for every way a caller can keep a result's memory alive.
"""

import ctypes
import gc
import threading
import warnings
import weakref

import numpy as np
import pytest

import trilinear_bwd as tb

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import trilinear_bwd.torch as tbt  # noqa: E402

# 2 x 8 x 32^3 float32 results: 2 MiB, above the pool's 1 MiB floor, and a
# small one below it.
LARGE, SMALL = (2, 8, 32, 32, 32), (1, 2, 4, 4, 4)


def _upsampled(shape):
    return shape[:2] + tuple(2 * s for s in shape[2:])


def _public_backward(shape):
    g = torch.rand(_upsampled(shape))
    return lambda: tbt.upsample_trilinear3d_backward(g, g.shape[2:], shape, False)


def _public_forward(shape):
    x = torch.rand(shape)
    return lambda: tbt.upsample_trilinear3d(x, scale_factor=2)


def _drop_in_grad(shape):
    x = torch.rand(shape, requires_grad=True)

    def call():
        tbt.upsample_trilinear3d(x, scale_factor=2).sum().backward()
        grad, x.grad = x.grad, None
        return grad
    return call


def _operator(shape):
    x = torch.rand(shape)
    return lambda: torch.ops.trilinear_bwd.upsample_trilinear3d(
        x, list(_upsampled(shape)[2:]), False, None, None, None)


def _enabled_interpolate(shape):
    x = torch.rand(shape)

    def call():
        with tbt.enabled():
            return F.interpolate(x, scale_factor=2, mode="trilinear")
    return call


def _enabled_grad(shape):
    x = torch.rand(shape, requires_grad=True)

    def call():
        with tbt.enabled():
            F.interpolate(x, scale_factor=2, mode="trilinear").sum().backward()
        grad, x.grad = x.grad, None
        return grad
    return call


def _one_call_on_a_tensor(shape):
    g = torch.rand(_upsampled(shape))
    return lambda: tb.upsample_trilinear3d_backward(g, shape[2:])


TORCH_FRONT_ENDS = [_public_backward, _public_forward, _drop_in_grad, _operator,
                    _enabled_interpolate, _enabled_grad, _one_call_on_a_tensor]


# Every way a caller keeps a torch result's memory while dropping the result.
def _untyped_storage(r):
    return r.untyped_storage()


def _typed_storage(r):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # TypedStorage is deprecated
        return r.storage()


def _a_view(r):
    return r[0]


def _an_alias(r):
    return torch.empty(0).set_(r.untyped_storage())


def _a_capsule(r):
    return torch.utils.dlpack.to_dlpack(r)


def _its_numpy_array(r):
    return r.numpy()


def _a_saved_tensor_hook(r):
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: kept.append(t.untyped_storage()) or t, lambda t: t):
        w = torch.ones((), requires_grad=True)
        r * w                                      # mul saves r for w's gradient
    return kept


KEEPERS = [_untyped_storage, _typed_storage, _a_view, _an_alias, _a_capsule,
           _its_numpy_array, _a_saved_tensor_hook]


def _span(tensor):
    start = tensor.untyped_storage().data_ptr()
    return start, start + tensor.untyped_storage().nbytes()


# Every keeper through two front ends, every front end through the keeper
# that fooled a use count (the storage object itself).
KEPT_CASES = ([(f, k) for f in (_public_backward, _enabled_grad) for k in KEEPERS]
              + [(f, _untyped_storage) for f in TORCH_FRONT_ENDS
                 if f not in (_public_backward, _enabled_grad)])


@pytest.mark.parametrize(("front_end", "keep"), KEPT_CASES,
                         ids=[f"{f.__name__}-{k.__name__}" for f, k in KEPT_CASES])
def test_memory_a_caller_keeps_is_never_a_later_result(front_end, keep):
    call = front_end(LARGE)
    first = call()
    first.fill_(7.0)
    start, stop = _span(first)
    kept = keep(first)
    del first
    gc.collect()
    for _ in range(2):
        later = call()
        assert not start <= later.data_ptr() < stop
        del later
    # Untouched while kept (read through its address: ``kept`` may be a capsule).
    assert (np.frombuffer(ctypes.string_at(start, stop - start), np.float32) == 7.0).all()
    del kept


@pytest.mark.parametrize("size", [LARGE, SMALL], ids=["large", "small"])
@pytest.mark.parametrize("front_end", TORCH_FRONT_ENDS)
def test_the_library_keeps_nothing_of_a_torch_result(front_end, size):
    call = front_end(size)
    result = call()
    storage = weakref.ref(result.untyped_storage())
    result.resize_(2 * result.numel())             # resizable like torch.empty's
    del result
    gc.collect()
    assert storage() is None


@pytest.mark.parametrize("size", [LARGE, SMALL], ids=["large", "small"])
@pytest.mark.parametrize("front_end", TORCH_FRONT_ENDS)
def test_results_are_cpu_tensors_whatever_the_default_device(front_end, size):
    call = front_end(size)
    expected = call()
    with torch.device("meta"):
        inside = [call() for _ in range(2)]
    torch.set_default_device("meta")
    try:
        inside += [call() for _ in range(2)]
    finally:
        torch.set_default_device(None)
    after = call()                                 # nothing poisoned for later calls
    for r in inside + [after]:
        assert r.device.type == "cpu"
        torch.testing.assert_close(r, expected, rtol=0, atol=0)


@pytest.mark.parametrize("front_end", [_public_backward, _public_forward, _operator,
                                       _enabled_interpolate, _one_call_on_a_tensor])
def test_threads_never_share_a_result(front_end):
    call = front_end(LARGE)
    expected = call()
    results, errors = [], []
    start = threading.Barrier(4)

    def worker():
        try:
            start.wait()
            mine = []
            for _ in range(6):
                mine.append(call())
                if len(mine) > 2:
                    mine.pop(0)                    # some die while others are made
                results.append(mine[-1])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    spans = sorted({_span(r) for r in results})
    for (_, stop), (start_next, _) in zip(spans, spans[1:]):
        assert stop <= start_next                  # live results never overlap
    for r in results:
        torch.testing.assert_close(r, expected, rtol=0, atol=0)


# NumPy results come from the pool: every way of keeping one alive keeps its block.
def _np_view(r):
    return r[0]


def _np_memoryview(r):
    return memoryview(r)


def _np_from_numpy(r):
    return torch.from_numpy(r)


def _np_dlpack(r):
    return np.from_dlpack(r)


def _np_base(r):
    return r.base


def _np_capsule(r):
    return r.__dlpack__()


NP_KEEPERS = [_np_view, _np_memoryview, _np_from_numpy, _np_dlpack, _np_base, _np_capsule]


@pytest.mark.parametrize("keep", NP_KEEPERS)
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_pooled_block_comes_back_only_when_nothing_reaches_it(keep, channels_last):
    g = np.random.default_rng(0).random(_upsampled(LARGE), dtype=np.float32)
    if channels_last:
        g = np.ascontiguousarray(g.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    tb.pool.clear()
    first = tb.upsample_trilinear3d_backward(g, LARGE[2:])
    first[...] = 7.0
    address = first.__array_interface__["data"][0]
    kept = keep(first)
    del first
    gc.collect()
    for _ in range(3):
        later = tb.upsample_trilinear3d_backward(g, LARGE[2:])
        assert abs(later.__array_interface__["data"][0] - address) >= later.nbytes
        del later
    del kept
    gc.collect()
    # Once nothing reaches it, the block serves again.
    again = [tb.upsample_trilinear3d_backward(g, LARGE[2:]) for _ in range(2)]
    assert address in {a.__array_interface__["data"][0] for a in again}


def _thp_eligible(address):
    """``THPeligible`` of the mapping holding ``address`` (None where the kernel does not say)."""
    with open("/proc/self/smaps") as smaps:
        inside = False
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, stop = (int(v, 16) for v in head.split("-"))
                inside = start <= address < stop
            elif inside and head == "THPeligible:":
                return int(line.split()[1])
    return None


def _thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return None


@pytest.mark.skipif(_thp_mode() not in ("madvise", "always"),
                    reason="transparent huge pages are off (or this is not Linux)")
@pytest.mark.parametrize("front_end", [_public_backward, _enabled_interpolate])
def test_large_torch_results_ask_for_huge_pages(front_end, monkeypatch):
    """Each large result's whole 2 MiB pages are advised, and the mapping that holds them
    is eligible for huge pages right after the advice (read then: what the process does
    with its memory later, a neighbour's realloc among it, is no longer the hint's)."""
    from trilinear_bwd.torch import _arrays

    real, advised = _arrays._madvise, []

    def recording(start, length, advice):
        rc = real(start, length, advice)
        errno = ctypes.get_errno() if rc else 0
        advised.append((start, length, advice, rc, errno, _thp_eligible(start)))
        return rc

    monkeypatch.setattr(_arrays, "_madvise", recording)
    call = front_end((2, 8, 48, 48, 48))                # 7 MiB results
    for result in (call(), call()):                     # the careful way, then the fast path
        address = result.untyped_storage().data_ptr()
        nbytes = result.untyped_storage().nbytes()
        start = -(-address // _arrays.HUGE_PAGE) * _arrays.HUGE_PAGE
        stop = (address + nbytes) // _arrays.HUGE_PAGE * _arrays.HUGE_PAGE
        (record,) = [r for r in advised if r[0] == start]
        assert record[1:3] == (stop - start, _arrays._MADV_HUGEPAGE)
        # The advice is a hint: an operating system that refuses it (rc -1) leaves
        # the result as it was; one that takes it makes the mapping eligible.
        assert record[3] == -1 or record[5] == 1, record
        result.resize_(2 * result.numel())              # still PyTorch's, resizable
