"""Thread control: OMP_NUM_THREADS, num_threads=, threadpoolctl, and fork.

Every check reads the team size the kernel itself counted
(``Executor.last_num_threads``), never a timing.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import trilinear_bwd as tb
from trilinear_bwd._kernels import _native

threadpoolctl = pytest.importorskip("threadpoolctl")

needs_openmp = pytest.mark.skipif(
    not _native.openmp_enabled(), reason="built without OpenMP: always one thread"
)

# Enough (slice, plane) work items and bytes (the default uses at most a thread
# per 256 KiB moved) for any team of a few threads.
SHAPE_OUT, SHAPE_IN = (2, 4, 32, 32, 32), (2, 4, 16, 16, 16)


def executor(num_threads=None):
    g = np.ones(SHAPE_OUT, np.float32)
    size, ex = tb.get_workspace_size(g, SHAPE_OUT[2:], SHAPE_IN, False, 0.0, 0.0, 0.0,
                                     np.empty(SHAPE_IN, np.float32), num_threads=num_threads)
    ex.set_repeatable()
    return ex, tb.alloc_workspace(size), size


def team(ex, workspace, size):
    tb.execute(workspace, size, ex)
    return ex.last_num_threads


def run_python(code, env_extra=None, timeout=120):
    # The child imports the package these tests import: the installed wheel
    # under ci/test_wheel.sh, the in-place build in a checkout.  Its working
    # directory, first on its sys.path, is that package's parent too, so a
    # source tree without compiled extensions cannot shadow it.
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(tb.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [package_parent, os.environ.get("PYTHONPATH")])))
    env.pop("OMP_NUM_THREADS", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          cwd=package_parent, capture_output=True, text=True, timeout=timeout)


TEAM_SIZE = """
    import numpy as np, trilinear_bwd as tb
    g = np.ones({out}, np.float32)
    size, ex = tb.get_workspace_size(g, {out}[2:], {inp}, False, 0.0, 0.0, 0.0,
                                     np.empty({inp}, np.float32))
    tb.execute(tb.alloc_workspace(size), size, ex)
    print(ex.last_num_threads)
""".format(out=SHAPE_OUT, inp=SHAPE_IN)


@needs_openmp
def test_threadpoolctl_sees_our_openmp_runtime():
    code = """
        from threadpoolctl import threadpool_info
        before = {i["filepath"] for i in threadpool_info() if i["user_api"] == "openmp"}
        import trilinear_bwd
        after = {i["filepath"] for i in threadpool_info() if i["user_api"] == "openmp"}
        print(sorted(after - before) or sorted(after))
    """
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() not in ("", "[]"), "no OpenMP runtime found by threadpoolctl"


@needs_openmp
def test_threadpool_limits_sets_the_team_size():
    ex, ws, size = executor()  # num_threads=None: follow OpenMP at each run
    with threadpoolctl.threadpool_limits(1):
        assert ex.num_threads == 1
        assert team(ex, ws, size) == 1
    with threadpoolctl.threadpool_limits(2):
        assert team(ex, ws, size) == 2
    with threadpoolctl.threadpool_limits(1, user_api="openmp"):
        assert team(ex, ws, size) == 1
    # The one-call API follows it too.
    with threadpoolctl.threadpool_limits(1):
        ex1, ws1, size1 = executor()
        assert team(ex1, ws1, size1) == 1


@needs_openmp
@pytest.mark.skipif(_native.num_procs() < 2, reason="needs two or more cores")
def test_default_team_uses_more_than_one_thread():
    proc = run_python(TEAM_SIZE)
    assert proc.returncode == 0, proc.stderr
    n_items = SHAPE_IN[0] * SHAPE_IN[1] * SHAPE_IN[2]  # (slice, plane) work items
    assert int(proc.stdout) == min(_native.num_procs(), n_items) > 1


@needs_openmp
@pytest.mark.parametrize("n", [1, 2])
def test_omp_num_threads_environment(n):
    proc = run_python(TEAM_SIZE, {"OMP_NUM_THREADS": str(n)})
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == n


@needs_openmp
def test_explicit_num_threads_wins_over_the_default():
    ex, ws, size = executor(num_threads=2)
    assert team(ex, ws, size) == 2
    with threadpoolctl.threadpool_limits(1):
        assert team(ex, ws, size) == 2
    ex, ws, size = executor(num_threads=1)
    assert team(ex, ws, size) == 1


@needs_openmp
def test_one_call_api_num_threads():
    g = np.ones(SHAPE_OUT, np.float32)
    with threadpoolctl.threadpool_limits(1):
        a = tb.upsample_trilinear3d_backward(g, SHAPE_IN)
    b = tb.upsample_trilinear3d_backward(g, SHAPE_IN, num_threads=2)
    np.testing.assert_array_equal(a, b)  # the split never changes the result


@needs_openmp
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_fork_child_runs_with_one_thread():
    """The documented recipe: after fork, limit the child's team to one thread.

    GNU libgomp cannot start a new team in a child forked after the parent
    used one (the child hangs), so the recipe must keep working.
    """
    code = """
        import os, numpy as np, trilinear_bwd as tb
        from threadpoolctl import threadpool_limits
        g = np.ones({out}, np.float32)
        print(tb.upsample_trilinear3d_backward(g, {inp}, num_threads=2).sum(), flush=True)
        pid = os.fork()
        if pid == 0:
            with threadpool_limits(1):
                r = tb.upsample_trilinear3d_backward(g, {inp})
            r1 = tb.upsample_trilinear3d_backward(g, {inp}, num_threads=1)
            os._exit(0 if r.sum() == r1.sum() == g.sum() else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """.format(out=SHAPE_OUT, inp=SHAPE_IN)
    proc = run_python(code, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(float(np.prod(SHAPE_OUT))), "0"]


@needs_openmp
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_fork_child_without_precautions_does_not_hang():
    """A child forked after a multi-thread run falls back to one thread, with a warning."""
    code = """
        import os, warnings, numpy as np, trilinear_bwd as tb
        g = np.ones({out}, np.float32)
        tb.upsample_trilinear3d_backward(g, {inp}, num_threads=2)
        pid = os.fork()
        if pid == 0:
            size, ex = tb.get_workspace_size(g, {out}[2:], {inp}, False, 0, 0, 0,
                                             np.empty({inp}, np.float32), num_threads=2)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                tb.execute(tb.alloc_workspace(size), size, ex)
            ok = (ex.grad_input.sum() == g.sum() and ex.last_num_threads == 1
                  and any("forked" in str(w.message) for w in caught))
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """.format(out=SHAPE_OUT, inp=SHAPE_IN)
    proc = run_python(code, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0"]


def test_torch_dataloader_style_limit(torch):
    """torch.set_num_threads(1) (what DataLoader workers do) limits this library
    too when both use the same OpenMP runtime; otherwise it is independent."""
    from threadpoolctl import threadpool_info

    runtimes = {i["filepath"] for i in threadpool_info() if i["user_api"] == "openmp"}
    if len(runtimes) != 1 or not _native.openmp_enabled():
        pytest.skip(f"PyTorch and this library use different OpenMP runtimes: {runtimes}")
    saved = torch.get_num_threads()
    ex, ws, size = executor()
    try:
        torch.set_num_threads(1)
        assert team(ex, ws, size) == 1
        torch.set_num_threads(2)
        assert team(ex, ws, size) == 2
    finally:
        torch.set_num_threads(saved)


@needs_openmp
def test_limits_are_per_thread_and_streams_follow_the_launcher():
    import threading

    seen = {}

    def worker():
        ex, ws, size = executor()
        with threadpoolctl.threadpool_limits(1):
            seen["worker"] = team(ex, ws, size)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["worker"] == 1
    ex, ws, size = executor()
    with threadpoolctl.threadpool_limits(1):
        with tb.Stream() as stream:  # the run happens on the stream's own thread
            tb.execute(ws, size, ex, stream=stream)
            stream.synchronize()
    assert ex.last_num_threads == 1


@needs_openmp
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_forked_dataloader_workers_can_call_the_kernel(torch):
    """DataLoader workers (forked) set torch.set_num_threads(1): safe with a shared libgomp."""
    code = """
        import numpy as np, torch, trilinear_bwd as tb
        from threadpoolctl import threadpool_info
        if len({i["filepath"] for i in threadpool_info() if i["user_api"] == "openmp"}) != 1:
            print("separate runtimes"); raise SystemExit(0)
        g = np.ones((2, 4, 16, 16, 16), np.float32)

        class Volumes(torch.utils.data.Dataset):
            def __len__(self):
                return 2

            def __getitem__(self, i):
                return float(tb.upsample_trilinear3d_backward(g, (8, 8, 8)).sum())

        tb.upsample_trilinear3d_backward(g, (8, 8, 8), num_threads=2)  # the parent's team
        loader = torch.utils.data.DataLoader(Volumes(), num_workers=2, batch_size=None,
                                             multiprocessing_context="fork")
        print(sorted(float(x) for x in loader))
    """
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if "separate runtimes" in proc.stdout:
        pytest.skip("PyTorch and this library use different OpenMP runtimes")
    assert proc.stdout.strip() == str([float(2 * 4 * 16**3)] * 2)  # the sum of g, per worker
