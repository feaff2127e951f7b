"""Leaks: thousands of create/execute/destroy cycles leave the resident set flat.

RSS comes from /proc/self/statm, measured after a warm-up (so that the
allocator's pools, OpenMP's thread pool and import-time caches are already
in place) and again after the cycles; the growth must stay within a few MB.
A leak of even one small object per cycle would show: 10,000 cycles x 200
bytes is 2 MB, and a leaked executor (its tables and plan) is kilobytes.
"""

import gc
import sys
import threading

import numpy as np
import pytest
from _hardening import rss_bytes
from threadpoolctl import threadpool_limits

import trilinear_bwd as tb
from trilinear_bwd import aclnn

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RSS from /proc/self/statm"),
]

SLACK = 4 * 2**20
CYCLES = 10_000


def measure(cycle, n, warmup=500, chunks=10):
    """RSS growth over ``n`` calls of ``cycle(k)`` after ``warmup`` calls.

    RSS is sampled after each of ``chunks`` equal parts, so that a failure
    shows whether the growth is steady (a leak) or a single step (the
    allocator taking one more block).
    """
    for k in range(warmup):
        cycle(k)
    gc.collect()
    before = rss_bytes()
    samples = []
    for part in range(chunks):
        for k in range(part * n // chunks, (part + 1) * n // chunks):
            cycle(k)
        gc.collect()
        samples.append(rss_bytes())
    growth = samples[-1] - before
    print(f"RSS before {before / 2**20:.1f} MiB, after {samples[-1] / 2**20:.1f} MiB, "
          f"growth {growth / 2**10:.0f} KiB over {n} cycles")
    assert growth < SLACK, (
        f"RSS grew by {growth / 2**10:.0f} KiB over {n} cycles; after each tenth: "
        f"{[(s - before) // 2**10 for s in samples]} KiB")
    return growth


G = np.random.default_rng(0).standard_normal((2, 3, 6, 6, 6)).astype(np.float32)
SHAPE_IN = (2, 3, 3, 3, 3)


def test_executor_create_execute_destroy_cycles():
    """10,000 x (phase one, allocate a workspace, execute, destroy)."""
    gi = np.empty(SHAPE_IN, np.float32)
    expected = tb.upsample_trilinear3d_backward(G, SHAPE_IN)

    def cycle(k):
        # Mostly one thread: the team's start-up would dominate these tiny runs.
        size, ex = tb.get_workspace_size(G, (6, 6, 6), SHAPE_IN, False, 0.0, 0.0, 0.0, gi,
                                         num_threads=2 if k % 10 == 0 else 1)
        with ex:
            tb.execute(tb.alloc_workspace(size), size, ex)
        if k % 1000 == 0:
            assert np.array_equal(gi, expected)

    measure(cycle, CYCLES)


def test_repeatable_executor_and_aclnn_cycles():
    """10,000 x the CANN names: phase one, repeatable, two runs with a rebind, destroy."""
    gi, gi2 = np.empty(SHAPE_IN, np.float32), np.empty(SHAPE_IN, np.float32)

    def cycle(k):
        status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
            G, [6, 6, 6], list(SHAPE_IN), bool(k % 2), 0.0, 0.0, 0.0, gi)
        assert status == 0
        assert aclnn.aclSetAclOpExecutorRepeatable(ex) == 0
        ws = aclnn.aclrtMalloc(size)
        assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, ex, None) == 0
        assert aclnn.aclSetOutputTensorAddr(ex, 0, gi2) == 0
        assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, ex, None) == 0
        assert aclnn.aclDestroyAclOpExecutor(ex) == 0
        aclnn.aclrtFree(ws)

    # The aclnn names take no thread count: limit OpenMP's default instead.
    with threadpool_limits(limits=1, user_api="openmp"):
        measure(cycle, CYCLES)


def test_failing_calls_cycles():
    """10,000 failing calls (exceptions, messages, tracebacks) leave nothing behind."""
    gi = np.empty(SHAPE_IN, np.float32)
    size, ex = tb.get_workspace_size(G, (6, 6, 6), SHAPE_IN, False, 0.0, 0.0, 0.0, gi)
    ex.set_repeatable()
    ws = tb.alloc_workspace(size)

    def cycle(k):
        kind = k % 5
        if kind == 0:
            status = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
                G, [6, 6, 7], list(SHAPE_IN), False, 0.0, 0.0, 0.0, gi)[0]
        elif kind == 1:
            status = aclnn.aclnnUpsampleTrilinear3dBackward(ws, size - 1, ex, None)
        elif kind == 2:
            status = aclnn.aclnnUpsampleTrilinear3dBackward(np.empty(size, object), size, ex, None)
        elif kind == 3:
            try:
                tb.upsample_trilinear3d_backward(G, (3, 3, 3), scales=(float("nan"), 0, 0))
            except tb.InvalidArgumentError as exc:
                status = exc.status
        else:
            try:
                ex.update_arrays(grad_input=gi[::-1])
            except tb.InvalidArgumentError as exc:
                status = exc.status
        assert status != 0

    measure(cycle, CYCLES)


def test_one_call_cycles():
    """10,000 one-call runs, half allocating their output."""
    out = np.empty(SHAPE_IN, np.float32)

    def cycle(k):
        tb.upsample_trilinear3d_backward(G, SHAPE_IN, out=None if k % 2 else out,
                                         num_threads=1)

    measure(cycle, CYCLES)


def test_stream_cycles_leave_no_threads_or_memory():
    """2,000 streams, each with a run, closed or simply dropped: no thread or memory left."""
    gi = np.empty(SHAPE_IN, np.float32)
    threads_before = threading.active_count()

    def cycle(k):
        size, ex = tb.get_workspace_size(G, (6, 6, 6), SHAPE_IN, False, 0.0, 0.0, 0.0, gi)
        stream = tb.Stream()
        tb.execute(tb.alloc_workspace(size), size, ex, stream=stream)
        stream.synchronize()
        if k % 2:
            stream.close()
        # else: dropped; its worker notices and exits.

    measure(cycle, 2_000, warmup=200)
    gc.collect()
    for t in threading.enumerate():
        if t.name == "trilinear_bwd-stream":
            t.join(timeout=10)
    assert threading.active_count() <= threads_before
