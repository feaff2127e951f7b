"""Many Python threads at once, one executor shared by two threads, and 1,000 reuses.

Every result is compared bit for bit with a result computed beforehand on one
thread (the library is bitwise deterministic for every thread count and
layout), and that one with the float64 reference.  No timing decides a pass.
"""

import threading

import numpy as np
import pytest
from _hardening import NCDHW, NDHWC, Guarded
from conftest import DTYPES, assert_matches_reference, np_dtype

import trilinear_bwd as tb
from trilinear_bwd import aclnn

RUNTIME = tb.ACLNN_ERR_RUNTIME_ERROR
THREADS = 32
ROUNDS = 20


class Job:
    """One thread's private problem and its expected result."""

    def __init__(self, k):
        rng = np.random.default_rng(1000 + k)
        self.dtype = DTYPES[k % len(DTYPES)]
        n, c = 1 + k % 2, 1 + k % 3
        self.input_size = (n, c, 2 + k % 3, 3, 2 + k % 4)
        self.output_size = (3 + k % 4, 5, 4 + k % 3)
        self.align = bool(k % 2)
        self.layout = (NCDHW, NDHWC)[k % 2 if c > 1 else 0]
        values = rng.standard_normal((n, c, *self.output_size)).astype(np_dtype(self.dtype))
        self.go = Guarded(values.shape, values.dtype, self.layout, values=values)
        self.values = values
        self.expected = tb.upsample_trilinear3d_backward(
            values, self.input_size, align_corners=self.align, num_threads=1)
        assert_matches_reference(self.expected, values, self.input_size, self.align)
        self.runs = 0

    def new_output(self):
        return Guarded(self.input_size, self.values.dtype, self.layout, fill=np.nan)

    def check(self, out):
        # tobytes() walks the logical order, whatever the memory layout.
        assert out.view.tobytes() == self.expected.tobytes(), "result differs from the serial one"
        out.check_outside()
        self.runs += 1

    def phase_one(self, gi, **kw):
        return tb.get_workspace_size(self.go.view, self.output_size, self.input_size, self.align,
                                     0.0, 0.0, 0.0, gi.view, **kw)

    def work(self, barrier, errors):
        """One call of every kind, ROUNDS times, all threads starting together."""
        try:
            barrier.wait()
            for r in range(ROUNDS):
                threads = (None, 1, 2)[r % 3]
                # The one-call function.
                gi = self.new_output()
                tb.upsample_trilinear3d_backward(self.go.view, self.input_size,
                                                 align_corners=self.align, out=gi.view,
                                                 num_threads=threads)
                self.check(gi)
                # A single-use executor of its own.
                gi = self.new_output()
                size, ex = self.phase_one(gi, num_threads=threads)
                tb.execute(tb.alloc_workspace(size), size, ex)
                self.check(gi)
                # A repeatable executor on a stream of its own, run twice,
                # into two outputs through update_arrays.
                gi, gi2 = self.new_output(), self.new_output()
                size, ex = self.phase_one(gi)
                ex.set_repeatable()
                ws = tb.alloc_workspace(size)
                with tb.Stream() as stream:
                    tb.execute(ws, size, ex, stream=stream)
                    stream.synchronize()
                    ex.update_arrays(grad_input=gi2.view)
                    tb.execute(ws, size, ex, stream=stream)
                self.check(gi)
                self.check(gi2)
                ex.destroy()
                # The CANN names, on the calling thread.
                gi = self.new_output()
                status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
                    self.go.view, list(self.output_size), list(self.input_size), self.align,
                    0.0, 0.0, 0.0, gi.view)
                assert status == 0
                assert aclnn.aclnnUpsampleTrilinear3dBackward(
                    aclnn.aclrtMalloc(size), size, ex, None) == 0
                self.check(gi)
            self.go.check_untouched()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)


def run_threads(targets):
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_thirty_two_threads_at_once():
    """32 threads, each with its own data, executors, streams and one-call runs, all at once."""
    jobs = [Job(k) for k in range(THREADS)]
    barrier = threading.Barrier(THREADS)
    errors = []
    run_threads([lambda j=j: j.work(barrier, errors) for j in jobs])
    if errors:
        raise errors[0]
    runs = sum(j.runs for j in jobs)
    assert runs == THREADS * ROUNDS * 5, runs
    print(f"{runs} checked runs in {THREADS} threads")


def test_thirty_two_threads_share_one_stream():
    """32 threads launching onto one stream: every run happens, in order per thread."""
    jobs = [Job(k) for k in range(THREADS)]
    outputs = {k: [] for k in range(THREADS)}
    barrier = threading.Barrier(THREADS)
    errors = []
    stream = tb.Stream()

    def launch(k):
        try:
            barrier.wait()
            for _ in range(4):
                gi = jobs[k].new_output()
                size, ex = jobs[k].phase_one(gi)
                tb.execute(tb.alloc_workspace(size), size, ex, stream=stream)
                outputs[k].append(gi)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    run_threads([lambda k=k: launch(k) for k in range(THREADS)])
    stream.synchronize()
    stream.close()
    if errors:
        raise errors[0]
    for k, outs in outputs.items():
        assert len(outs) == 4
        for gi in outs:
            jobs[k].check(gi)


def _big_problem():
    """Large enough that a run lasts a while, so the two threads really meet."""
    rng = np.random.default_rng(7)
    g = rng.standard_normal((2, 8, 32, 32, 32)).astype(np.float32)
    expected = tb.upsample_trilinear3d_backward(g, (16, 16, 16), num_threads=1)
    return g, expected


def test_single_use_executor_from_two_threads():
    """Two threads launch one single-use executor at once: one runs, the other gets 361001."""
    g, expected = _big_problem()
    for _ in range(16):
        gi = np.full(expected.shape, np.nan, np.float32)
        size, ex = tb.get_workspace_size(g, (32, 32, 32), gi.shape, False, 0.0, 0.0, 0.0, gi)
        barrier = threading.Barrier(2)
        outcomes = []

        def launch():
            ws = tb.alloc_workspace(size)
            barrier.wait()
            try:
                tb.execute(ws, size, ex)
                outcomes.append("ok")
            except tb.ExecutionError as exc:
                assert exc.status == RUNTIME
                outcomes.append("refused")

        run_threads([launch, launch])
        assert sorted(outcomes) == ["ok", "refused"]
        assert np.array_equal(gi, expected)
        assert ex.state == "consumed"


def test_repeatable_executor_from_two_threads():
    """A repeatable executor launched from two threads: while one runs, the other gets 361001.

    The second launch is made while the first holds the executor (observed,
    not timed); if the first has already finished, the attempt is repeated.
    """
    g, expected = _big_problem()
    gi = np.full(expected.shape, np.nan, np.float32)
    size, ex = tb.get_workspace_size(g, (32, 32, 32), gi.shape, False, 0.0, 0.0, 0.0, gi)
    ex.set_repeatable()
    ws1, ws2 = tb.alloc_workspace(size), tb.alloc_workspace(size)
    refused = ran_both = 0
    for _ in range(200):
        first = threading.Thread(target=tb.execute, args=(ws1, size, ex))
        first.start()
        while not ex._busy.locked() and first.is_alive():
            pass
        try:
            tb.execute(ws2, size, ex)
            ran_both += 1
        except tb.ExecutionError as exc:
            assert exc.status == RUNTIME and "running" in str(exc)
            refused += 1
        first.join()
        assert np.array_equal(gi, expected)
        if refused >= 3:
            break
    assert refused >= 3, f"never observed the executor busy ({ran_both} sequential runs)"
    assert ex.state == "ready"


def test_repeatable_executor_on_two_streams():
    """Two streams running one repeatable executor: each run is correct or reports 361001."""
    g, expected = _big_problem()
    gi = np.full(expected.shape, np.nan, np.float32)
    size, ex = tb.get_workspace_size(g, (32, 32, 32), gi.shape, False, 0.0, 0.0, 0.0, gi)
    ex.set_repeatable()
    streams = [tb.Stream(), tb.Stream()]
    workspaces = [tb.alloc_workspace(size), tb.alloc_workspace(size)]
    statuses = []
    for _ in range(10):
        for s, ws in zip(streams, workspaces):
            tb.execute(ws, size, ex, stream=s)
        for s in streams:
            statuses.append(aclnn.aclrtSynchronizeStream(s))
    assert set(statuses) <= {0, RUNTIME} and 0 in statuses
    assert np.array_equal(gi, expected)
    for s in streams:
        s.close()


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeatable_executor_reused_1000_times_gives_the_same_bits(dtype):
    rng = np.random.default_rng(3)
    g = rng.standard_normal((2, 3, 5, 6, 7)).astype(np_dtype(dtype))
    gi = np.full((2, 3, 3, 4, 3), np.nan, g.dtype)
    size, ex = tb.get_workspace_size(g, (5, 6, 7), gi.shape, False, 0.0, 0.0, 0.0, gi)
    ex.set_repeatable()
    ws = tb.alloc_workspace(size)
    tb.execute(ws, size, ex)
    assert_matches_reference(gi, g, gi.shape)
    first = gi.tobytes()
    stream = tb.Stream()
    for k in range(1000):
        gi[...] = np.nan
        ws[...] = k % 256   # whatever the workspace held must not matter
        if k % 10 == 9:
            tb.execute(ws, size, ex, stream=stream)
            stream.synchronize()
        else:
            tb.execute(ws, size, ex)
        assert gi.tobytes() == first, f"run {k} differs"
    stream.close()
    assert ex.state == "ready"
