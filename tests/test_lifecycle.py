"""The executor / workspace / stream lifecycle, and its misuse (361001)."""

import threading

import numpy as np
import pytest
from _hardening import blocked_stream
from conftest import assert_matches_reference, random_grad

import trilinear_bwd as tb
from trilinear_bwd import aclnn

RUNTIME = tb.ACLNN_ERR_RUNTIME_ERROR


def phase_one(shape_in=(2, 3, 4, 5, 6), shape_out=(8, 10, 12), dtype="float32", seed=0, **kw):
    g = random_grad(shape_in[:2] + shape_out, dtype, seed)
    gi = np.full(shape_in, np.nan, dtype=g.dtype)
    size, ex = tb.get_workspace_size(g, shape_out, shape_in, False, 0.0, 0.0, 0.0, gi, **kw)
    return g, gi, size, ex


def expect_runtime(fn, match):
    with pytest.raises(tb.ExecutionError, match=match) as info:
        fn()
    assert info.value.status == RUNTIME
    assert isinstance(info.value, RuntimeError)


def test_execute_then_single_use():
    g, gi, size, ex = phase_one()
    assert ex.workspace_size == size
    ws = tb.alloc_workspace(size)
    assert ws.ctypes.data % 64 == 0 and ws.nbytes == size
    tb.execute(ws, size, ex)
    assert_matches_reference(gi, g, gi.shape)
    assert ex.state == "consumed"
    expect_runtime(lambda: tb.execute(ws, size, ex), "already executed")
    expect_runtime(ex.set_repeatable, "already executed")


def test_repeatable_executor_runs_again_and_follows_update_arrays():
    g, gi, size, ex = phase_one()
    ex.set_repeatable()
    ws = tb.alloc_workspace(size)
    tb.execute(ws, size, ex)
    first = gi.copy()
    gi[...] = np.nan
    tb.execute(ws, size, ex)
    np.testing.assert_array_equal(gi, first)

    g2 = random_grad(g.shape, "float32", seed=9)
    gi2 = np.empty_like(gi)
    ex.update_arrays(grad_out=g2, grad_input=gi2)
    tb.execute(ws, size, ex)
    assert_matches_reference(gi2, g2, gi.shape)
    np.testing.assert_array_equal(gi, first)  # the old output is no longer written


def test_update_arrays_rules():
    g, gi, size, ex = phase_one()
    expect_runtime(lambda: ex.update_arrays(grad_input=np.empty_like(gi)), "repeatable")
    ex.set_repeatable()
    with pytest.raises(tb.InvalidArgumentError, match="gradInput must keep shape"):
        ex.update_arrays(grad_input=np.empty((2, 3, 4, 5, 7), np.float32))
    with pytest.raises(tb.InvalidArgumentError, match="gradOut must keep shape"):
        ex.update_arrays(grad_out=g.astype(np.float64))
    with pytest.raises(tb.InvalidArgumentError, match="strides"):
        ex.update_arrays(grad_input=np.empty(gi.shape[::-1], np.float32).T)
    ro = np.empty_like(gi)
    ro.flags.writeable = False
    with pytest.raises(tb.InvalidArgumentError, match="writable"):
        ex.update_arrays(grad_input=ro)
    # A failed update changes nothing: the executor still writes gi.
    ws = tb.alloc_workspace(size)
    tb.execute(ws, size, ex)
    assert_matches_reference(gi, g, gi.shape)


def test_update_arrays_rejects_overlap():
    buf = np.zeros(2 * 3 * 8 * 10 * 12 + 2 * 3 * 4 * 5 * 6, np.float32)
    g, gi, size, ex = phase_one()
    ex.set_repeatable()
    g_view = buf[:g.size].reshape(g.shape)
    with pytest.raises(tb.InvalidArgumentError, match="overlap"):
        ex.update_arrays(grad_out=g_view, grad_input=buf[100:100 + gi.size].reshape(gi.shape))


def test_destroy_and_context_manager():
    g, gi, size, ex = phase_one()
    with ex as same:
        assert same is ex
    assert ex.state == "destroyed"
    expect_runtime(lambda: tb.execute(tb.alloc_workspace(size), size, ex), "destroyed")
    ex.destroy()  # twice is harmless
    assert np.isnan(gi).all()


def test_workspace_misuse():
    g, gi, size, ex = phase_one()
    ws = tb.alloc_workspace(size)
    expect_runtime(lambda: tb.execute(ws, size - 1, ex), "workspaceSize must be at least")
    expect_runtime(lambda: tb.execute(ws[:-1], size, ex), "workspace must hold")
    ro = np.zeros(size, np.uint8)
    ro.flags.writeable = False
    expect_runtime(lambda: tb.execute(ro, size, ex), "read-only")
    expect_runtime(lambda: tb.execute(bytes(size), size, ex), "read-only")
    expect_runtime(lambda: tb.execute(np.zeros((size, 2), np.uint8)[:, 0], size, ex),
                   "contiguous")
    big_out = np.zeros((2, 3, 4, 5, 6 + size), np.float32)[..., :6]
    g2, _, size2, ex2 = phase_one()
    _, ex2 = tb.get_workspace_size(g2, (8, 10, 12), big_out.shape, False, 0, 0, 0, big_out)
    expect_runtime(lambda: tb.execute(big_out.base.view(np.uint8).reshape(-1), size, ex2),
                   "workspace must not overlap gradInput")
    with pytest.raises(tb.NullArgumentError, match="workspace must not be None"):
        tb.execute(None, size, ex)
    with pytest.raises(tb.InvalidArgumentError, match="workspaceSize must be an integer"):
        tb.execute(ws, float(size), ex)
    # None of these consumed the executor or wrote gradInput.
    assert ex.state == "ready" and np.isnan(gi).all()
    tb.execute(bytearray(size), size, ex)  # any writable buffer will do
    assert_matches_reference(gi, g, gi.shape)


def test_execute_argument_checks():
    with pytest.raises(tb.NullArgumentError, match="executor must not be None"):
        tb.execute(None, 0, None)
    with pytest.raises(tb.InvalidArgumentError, match="executor must be an Executor"):
        tb.execute(None, 0, object())
    g, gi, size, ex = phase_one()
    with pytest.raises(tb.InvalidArgumentError, match="stream must be a Stream"):
        tb.execute(tb.alloc_workspace(size), size, ex, stream="default")
    with pytest.raises(tb.InvalidArgumentError):
        tb.alloc_workspace(-1)


def test_repr_is_readable():
    g, gi, size, ex = phase_one(num_threads=2)
    text = repr(ex)
    for part in ("ready", "float32", "(2, 3, 8, 10, 12)", "(2, 3, 4, 5, 6)", "NCDHW",
                 f"{size} bytes", "2 thread"):
        assert part in text
    ex.set_repeatable()
    assert "repeatable" in repr(ex)


def test_stream_runs_in_order_and_synchronizes():
    runs = []
    with tb.Stream() as stream:
        for seed in range(4):
            g, gi, size, ex = phase_one(seed=seed)
            tb.execute(tb.alloc_workspace(size), size, ex, stream=stream)
            runs.append((g, gi))
        stream.synchronize()
        for g, gi in runs:
            assert_matches_reference(gi, g, gi.shape)
    assert "closed" in repr(stream)
    g, gi, size, ex = phase_one()
    expect_runtime(lambda: tb.execute(tb.alloc_workspace(size), size, ex, stream=stream), "closed")


def test_stream_reports_errors_at_synchronize():
    """A run that fails on the stream (here a job that raises) is reported by synchronize(),
    once; the next run succeeds."""
    g, gi, size, ex = phase_one()
    ex.set_repeatable()
    ws = tb.alloc_workspace(size)
    stream = tb.Stream()

    def failing_job():
        raise tb.ExecutionError("simulated failure of a queued run")

    stream._submit(failing_job)
    with pytest.raises(tb.ExecutionError, match="simulated") as info:
        stream.synchronize()
    assert info.value.status == RUNTIME
    assert np.isnan(gi).all()
    tb.execute(ws, size, ex, stream=stream)
    stream.synchronize()  # the error was reported once; this run succeeds
    assert_matches_reference(gi, g, gi.shape)
    stream.close()


def test_queued_run_waits_for_a_run_in_another_thread():
    """A run queued on a stream while the executor runs elsewhere waits, then runs."""
    g, gi, size, ex = phase_one()
    ex.set_repeatable()
    stream = tb.Stream()
    release = blocked_stream(stream)
    tb.execute(tb.alloc_workspace(size), size, ex, stream=stream)
    ex._busy.acquire()  # the executor is running elsewhere when the job starts
    release.set()
    waiter = threading.Thread(target=stream.synchronize)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and np.isnan(gi).all()   # waiting, not dropped
    ex._busy.release()
    waiter.join()
    stream.synchronize()
    assert_matches_reference(gi, g, gi.shape)
    stream.close()

def test_two_threads_one_executor():
    """One executor launched from two threads at once: one result, one 361001."""
    g, gi, size, ex = phase_one(shape_in=(2, 8, 24, 24, 24), shape_out=(48, 48, 48))
    ex.set_repeatable()
    barrier = threading.Barrier(2)
    outcomes = []

    def launch():
        ws = tb.alloc_workspace(size)
        barrier.wait()
        for _ in range(20):
            try:
                tb.execute(ws, size, ex)
                outcomes.append("ok")
            except tb.ExecutionError as exc:
                assert exc.status == RUNTIME and "running" in str(exc)
                outcomes.append("busy")

    threads = [threading.Thread(target=launch) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert "ok" in outcomes
    assert_matches_reference(gi, g, gi.shape)


def test_aclnn_names_return_status_codes():
    g = np.arange(1, 33, dtype=np.float32).reshape(2, 2, 2, 2, 2)
    gi = np.zeros((2, 2, 1, 1, 1), np.float32)
    status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        g, [2, 2, 2], [2, 2, 1, 1, 1], False, 0.0, 0.0, 0.0, gi)
    assert status == aclnn.ACLNN_SUCCESS
    assert aclnn.aclSetAclOpExecutorRepeatable(ex) == 0
    ws = aclnn.aclrtMalloc(size)
    status, stream = aclnn.aclrtCreateStream()
    assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, ex, stream) == 0
    assert aclnn.aclrtSynchronizeStream(stream) == 0
    np.testing.assert_array_equal(gi.ravel(), [36, 100, 164, 228])

    # Rebinding and misuse come back as codes, never as exceptions.
    gi2 = np.zeros_like(gi)
    assert aclnn.aclSetOutputTensorAddr(ex, 0, gi2) == 0
    assert aclnn.aclSetInputTensorAddr(ex, 0, g * 2) == 0
    assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, ex, None) == 0
    np.testing.assert_array_equal(gi2.ravel(), [72, 200, 328, 456])
    assert aclnn.aclSetOutputTensorAddr(ex, 1, gi2) == aclnn.ACLNN_ERR_PARAM_INVALID
    assert aclnn.aclSetOutputTensorAddr(ex, 0, None) == aclnn.ACLNN_ERR_PARAM_NULLPTR
    assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size - 1, ex, None) == RUNTIME
    assert "workspaceSize must be at least" in aclnn.aclGetRecentErrMsg()
    assert aclnn.aclDestroyAclOpExecutor(ex) == 0
    assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, ex, None) == RUNTIME
    assert aclnn.aclDestroyAclOpExecutor(None) == aclnn.ACLNN_ERR_PARAM_NULLPTR
    assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, None, None) == \
        aclnn.ACLNN_ERR_PARAM_NULLPTR
    assert aclnn.aclSetAclOpExecutorRepeatable("executor") == aclnn.ACLNN_ERR_PARAM_INVALID
    assert aclnn.aclrtDestroyStream(stream) == 0
    assert aclnn.aclrtSynchronizeStream(None) == aclnn.ACLNN_ERR_PARAM_NULLPTR
    assert aclnn.aclrtFree(ws) == 0


def test_aclnn_stream_error_is_a_status():
    g, gi, size, ex = phase_one()
    status, stream = aclnn.aclrtCreateStream()
    stream._submit(lambda: (_ for _ in ()).throw(tb.ExecutionError("boom")))
    assert aclnn.aclrtSynchronizeStream(stream) == RUNTIME
    assert "boom" in aclnn.aclGetRecentErrMsg()
    assert aclnn.aclrtSynchronizeStream(stream) == 0  # the error was reported once


def test_num_threads_none_follows_openmp_default():
    from trilinear_bwd._kernels import _native

    g, gi, size, ex = phase_one(shape_in=(4, 8, 16, 16, 16), shape_out=(32, 32, 32))
    assert ex.num_threads == min(_native.max_threads(), ex._runner.plan.n_slots)
    g, gi, size, ex = phase_one(num_threads=1)
    assert ex.num_threads == 1 and size > 0


def test_small_problems_use_fewer_threads_by_default():
    g, gi, size, ex = phase_one(shape_in=(1, 1, 2, 2, 2), shape_out=(4, 4, 4))
    assert ex.num_threads == 1
    tb.execute(tb.alloc_workspace(size), size, ex)
    assert ex.last_num_threads == 1
    # An explicit request is honoured as given.
    g, gi, size, ex = phase_one(shape_in=(1, 4, 2, 2, 2), shape_out=(4, 4, 4), num_threads=2)
    tb.execute(tb.alloc_workspace(size), size, ex)
    assert ex.num_threads == 2 and ex.last_num_threads == 2
