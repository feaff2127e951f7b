"""Remembered addresses stay true.

The class: every address the library remembers between calls (a repeatable
executor's workspace and bound arrays, a launched run's) whose owner can
move the memory behind it.  Each owner kind x each way it can move memory:
the run either raises 361001 or uses memory the owner holds *now* -- the
kernel's addresses are recorded and checked against the owner's current
memory -- and never writes into memory the owner gave up.
"""

import gc

import numpy as np
import pytest
from conftest import sample_product

import trilinear_bwd as tb
from trilinear_bwd import ExecutionError

G = (1, 2, 8, 8, 8)
I = (1, 2, 4, 4, 4)


class _Recorder:
    """Stands in for an executor's kernel: records the addresses each run gets."""

    def __init__(self, kernel):
        self.kernel, self.calls = kernel, []

    def __call__(self, source, target, workspace, threads):
        self.calls.append((source, target, workspace))
        return self.kernel(source, target, workspace, threads)


def _executor(g, gi):
    size, ex = tb.get_workspace_size(g, G[2:], I, False, 0.0, 0.0, 0.0, gi)
    ex.set_repeatable()
    ex._runner._kernel = _Recorder(ex._runner._kernel)
    return size, ex


def _inside(address, nbytes, start, length):
    return start <= address and address + nbytes <= start + length


def _tensor_memory(t):
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


# -- torch tensors: the memory can move at any time ----------------------------

TORCH_MOVES = {
    "resize_ larger": lambda t: t.resize_(t.numel() * 64),
    "resize_ smaller": lambda t: t.resize_(1),          # keeps its storage: still owned
    "set_ another storage": lambda t: t.set_(t.new_empty(t.shape).untyped_storage(), 0,
                                             t.shape, t.stride()),
    "storage resize_(0)": lambda t: t.untyped_storage().resize_(0),
    "storage resize_ larger": lambda t: t.untyped_storage().resize_(
        t.untyped_storage().nbytes() * 64),
}


@pytest.mark.parametrize("move,launch",
                         sample_product(5, sorted(TORCH_MOVES), ["execute", "stream"]))
def test_a_moved_torch_workspace_is_taken_afresh_or_refused(torch, move, launch):
    g = torch.rand(G)
    gi = torch.empty(I)
    size, ex = _executor(g, gi)
    ws = torch.empty(size, dtype=torch.uint8)
    tb.execute(ws, size, ex)
    first = gi.clone()
    TORCH_MOVES[move](ws)
    gc.collect()
    ex._runner._kernel.calls.clear()
    try:
        if launch == "stream":
            with tb.Stream() as s:
                tb.execute(ws, size, ex, stream=s)
        else:
            tb.execute(ws, size, ex)
    except tb.AclnnError as exc:
        # 361001, or 161002 for a tensor left with no memory at all.
        assert exc.status in (361001, 161002)
        assert "workspace" in str(exc)
        assert ex._runner._kernel.calls == []
        return
    (_, _, address), = ex._runner._kernel.calls
    start, length = _tensor_memory(ws)
    assert _inside(address, size - 64, start, length), (move, address, start, length)
    torch.testing.assert_close(gi, first, rtol=0, atol=0)


@pytest.mark.parametrize("move,which",
                         sample_product(5, sorted(TORCH_MOVES), ["grad_out", "grad_input"]))
def test_a_moved_bound_tensor_is_refused_or_still_owned(torch, move, which):
    g = torch.rand(G)
    gi = torch.empty(I)
    size, ex = _executor(g, gi)
    ws = tb.alloc_workspace(size)
    tb.execute(ws, size, ex)
    expected = gi.clone()
    t = g if which == "grad_out" else gi
    extent = t.numel() * t.element_size()
    TORCH_MOVES[move](t)
    gc.collect()
    ex._runner._kernel.calls.clear()
    try:
        tb.execute(ws, size, ex)
    except ExecutionError as exc:
        assert exc.status == 361001
        assert ex._runner._kernel.calls == []
        return
    assert move == "resize_ smaller"      # every other move must have been refused
    (gout, gin, _), = ex._runner._kernel.calls
    address = gout if which == "grad_out" else gin
    start, length = _tensor_memory(t)
    assert _inside(address, extent, start, length)
    if which == "grad_out":
        torch.testing.assert_close(gi, expected, rtol=0, atol=0)


def test_a_torch_workspace_moved_between_launch_and_run_is_refused(torch):
    g = torch.rand(G)
    gi = torch.empty(I)
    size, ex = _executor(g, gi)
    ws = torch.empty(size, dtype=torch.uint8)
    tb.execute(ws, size, ex)
    ex._runner._kernel.calls.clear()
    with tb.Stream() as s:
        with ex._busy:                       # the queued run waits for this
            tb.execute(ws, size, ex, stream=s)
            ws.resize_(size * 64)
        with pytest.raises(ExecutionError, match="workspace"):
            s.synchronize()
    assert ex._runner._kernel.calls == []


# -- NumPy arrays: pinned while remembered -------------------------------------

def _owner_of(arr):
    while not arr.flags.owndata:
        arr = arr.base
    return arr


def _numpy_case(role, view):
    g = np.random.default_rng(0).random(G, dtype=np.float32)
    gi = np.empty(I, np.float32)
    if view and role == "grad_input":
        gi = np.empty((2,) + I[1:], np.float32)[:1]
    if view and role == "grad_out":
        g = np.concatenate([g, g])[:1]
    size, ex = _executor(g, gi)
    ws = np.empty(size + 128, np.uint8)
    if view and role == "workspace":
        ws = ws[64:]
    tb.execute(ws, size, ex)
    return {"grad_out": g, "grad_input": gi, "workspace": ws}, size, ex


@pytest.mark.parametrize("role", ["workspace", "grad_out", "grad_input"])
@pytest.mark.parametrize("view", [False, True], ids=["owner", "view"])
def test_numpy_memory_cannot_move_while_remembered(role, view):
    arrays, size, ex = _numpy_case(role, view)
    owner = _owner_of(arrays[role])
    nbytes = owner.size
    with pytest.raises(ValueError, match="cannot resize"):
        owner.resize(nbytes * 4, refcheck=False)
    tb.execute(arrays["workspace"], size, ex)    # still runs, on the same memory
    ex.destroy()
    gc.collect()
    owner.resize(nbytes * 4, refcheck=False)     # let go: the caller's to move again


def test_update_arrays_moves_the_pin():
    arrays, size, ex = _numpy_case("grad_input", False)
    old = arrays["grad_input"]
    new = np.empty_like(old)
    ex.update_arrays(grad_input=new)
    old.resize(old.size * 2, refcheck=False)
    with pytest.raises(ValueError, match="cannot resize"):
        new.resize(new.size * 2, refcheck=False)
    ex.destroy()


@pytest.mark.parametrize("kind", ["bytearray", "memoryview"])
def test_an_exported_buffer_cannot_move_while_remembered(kind):
    arrays, size, ex = _numpy_case("workspace", False)
    raw = bytearray(size)
    ws = raw if kind == "bytearray" else memoryview(raw)
    tb.execute(ws, size, ex)
    with pytest.raises(BufferError):
        raw.extend(b"\0" * size)
    ex.destroy()


def test_a_workspace_of_unknown_owner_is_checked_every_run():
    """An __array_interface__ object could move its memory unseen: never remembered."""
    arrays, size, ex = _numpy_case("workspace", False)

    class Foreign:
        def __init__(self, arr):
            self.__array_interface__ = arr.__array_interface__
            self.keep = arr

    ws = Foreign(np.empty(size, np.uint8))
    tb.execute(ws, size, ex)
    assert ex._workspace_memo is None
    small = np.empty(size // 2, np.uint8)
    ws.__array_interface__, ws.keep = small.__array_interface__, small
    with pytest.raises(ExecutionError, match="workspace must hold"):
        tb.execute(ws, size, ex)


def test_a_pooled_result_as_workspace_is_remembered_and_kept():
    """The pool's blocks cannot move under a view: remembered, and not reused while held."""
    from trilinear_bwd._core import _pool

    arrays, size, ex = _numpy_case("workspace", False)
    ws = _pool.empty((1, 1, 1, 2**20, 1), np.float32).view(np.uint8).reshape(-1)
    tb.execute(ws, size, ex)
    assert ex._workspace_memo is not None
    address = ws.ctypes.data
    other = _pool.empty((1, 1, 1, 2**20, 1), np.float32)
    assert other.ctypes.data != address
    ex.destroy()
