"""A forked child can always run its first call.

The class: every module-level lock, condition and thread-local of the
package.  The first test finds them all by scanning the globals of every
module (so a new one that is not registered with ``trilinear_bwd._core._fork``
fails it); the second holds every one of them in another thread while
forking and checks that the child can take each; the last forks a process
whose threads are busy calling the library, over and over, and requires
every child's first call to finish (a deadlock is a child killed by its
alarm, counted as a failure, never a hung test).
"""

import importlib
import importlib.util
import os
import pkgutil
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from _hardening import forks_while_threads_allocate
from conftest import sample

import trilinear_bwd
from trilinear_bwd._core import _fork

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()), threading.Condition,
               threading.Semaphore, threading.Event, threading.local)


def _all_modules():
    from trilinear_bwd._core import _dispatch

    runnable = {f"trilinear_bwd._kernels.{v}" for v in _dispatch.available_variants()}
    variants = {f"trilinear_bwd._kernels.{v}" for v in ("baseline", "avx2", "avx512")}
    modules = []
    for info in pkgutil.walk_packages(trilinear_bwd.__path__, "trilinear_bwd."):
        if info.name.endswith("__main__"):
            continue
        if info.name in variants and info.name not in runnable:
            continue                  # built for a processor this is not: it cannot load
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:           # an optional dependency (dask) missing
            continue
    return modules


def _shared_state():
    """(module name, global name, object) of every lock-like module global of the package."""
    found = []
    for module in _all_modules():
        for name, value in vars(module).items():
            if isinstance(value, _LOCK_TYPES):
                found.append((module.__name__, name, value))
    return found


def test_every_module_level_lock_and_thread_local_is_renewed_at_fork(torch):
    found = _shared_state()
    names = {(m, n) for m, n, _ in found}
    # The ones known when this test was written must be among those found.
    assert {("trilinear_bwd._core._plan", "_plans_lock"), ("trilinear_bwd._core._pool", "_lock"),
            ("trilinear_bwd.aclnn", "_recent"), ("trilinear_bwd.torch._override", "_lock"),
            ("trilinear_bwd._core._runner", "_scratch")} <= names
    missing = names - set(_fork.registered())
    assert not missing, f"not renewed in a forked child (register with _fork.renew): {missing}"


def _fork_and_report(check):
    """Fork; the child runs ``check()`` (a string, "" for success) under an alarm."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                     # the child
        os.close(read)
        signal.alarm(10)
        try:
            message = check()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            message = f"{type(exc).__name__}: {exc}"
        os.write(write, (message or "ok").encode()[:4000])
        os._exit(0)
    os.close(write)
    chunks = []
    while True:
        chunk = os.read(read, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    return status, b"".join(chunks).decode()


def test_a_child_forked_while_another_thread_holds_every_lock_can_take_them(torch):
    # All but _fork's import guard, which fork() itself waits for (held
    # across the fork, it would wait forever: see the first-use import tests).
    found = [(m, n, v) for m, n, v in _shared_state()
             if (m, n) != ("trilinear_bwd._core._fork", "_importing")]
    locks = [(m, n, v) for m, n, v in found if hasattr(v, "acquire")]
    holding, release = threading.Event(), threading.Event()

    def hold():
        for _, _, lock in locks:
            lock.acquire()
        holding.set()
        release.wait()
        for _, _, lock in reversed(locks):
            lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)

    def check():
        stuck = []
        for module, name, old in found:
            new = getattr(sys.modules[module], name)
            if new is old:
                stuck.append(f"{module}.{name} (same object)")
            elif hasattr(new, "acquire"):
                if not new.acquire(timeout=1):
                    stuck.append(f"{module}.{name} (held)")
                else:
                    new.release()
        if stuck:
            return "; ".join(stuck)
        import numpy as np

        import trilinear_bwd as tb

        g = np.ones((1, 1, 4, 4, 4), np.float32)
        tb.upsample_trilinear3d_backward(g, (2, 2, 2), num_threads=1)
        return ""

    try:
        status, message = _fork_and_report(check)
    finally:
        release.set()
        holder.join()
    assert os.WIFEXITED(status), f"child died: status {status} (alarm: a deadlock)"
    assert message == "ok", message


_STRESS = textwrap.dedent("""
    import os, signal, sys, threading
    import numpy as np
    import trilinear_bwd as tb
    from trilinear_bwd import aclnn

    sys.setswitchinterval(1e-6)
    stop = threading.Event()
    rng = np.random.default_rng(0)
    shapes = [(1, 2, 4 + k, 5, 6) for k in range(80)]       # more than the plan cache holds
    big = np.ones((1, 4, 32, 32, 32), np.float32)           # a pooled (1 MiB+) result

    def busy(seed):
        k = seed
        while not stop.is_set():
            k += 1
            g = np.ones(shapes[k % len(shapes)], np.float32)
            tb.upsample_trilinear3d_backward(g, (2, 3, 3), num_threads=1)
            tb.upsample_trilinear3d(big[:, :, :8, :8, :8], (16, 16, 16), num_threads=1)
            aclnn.aclGetRecentErrMsg()
            tb.pool.stats()

    threads = [threading.Thread(target=busy, args=(s,), daemon=True) for s in range(3)]
    for t in threads:
        t.start()
    hung = failed = 0
    for _ in range(int(sys.argv[1])):
        pid = os.fork()
        if pid == 0:
            signal.alarm(5)
            g = np.ones((1, 2, 6, 5, 6), np.float32)
            r = tb.upsample_trilinear3d(big, (40, 40, 40), num_threads=1)
            r = tb.upsample_trilinear3d_backward(g, (2, 3, 3), num_threads=1)
            os._exit(0 if r.shape == (1, 2, 2, 3, 3) else 3)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            hung += 1
        elif os.WEXITSTATUS(status) != 0:
            failed += 1
    stop.set()
    print(hung, failed)
""")


@forks_while_threads_allocate
def test_forks_under_load_every_child_runs_its_first_call():
    result = subprocess.run([sys.executable, "-c", _STRESS, "60"], capture_output=True,
                            text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    hung, failed = map(int, result.stdout.split())
    assert (hung, failed) == (0, 0), f"{hung} children deadlocked, {failed} failed"


# A module whose import takes a while: the thread importing it holds
# importlib's per-module lock for that time, a lock no after-fork handler
# can renew.
_SLOW_IMPORT = textwrap.dedent("""
    import os, signal, sys, threading, time
    sys.path.insert(0, sys.argv[1])
    with open(os.path.join(sys.argv[1], "tb_slow_module.py"), "w") as f:
        f.write("import time\\nopen(__file__ + '.started', 'w').close()\\ntime.sleep(1.5)\\n")
    from trilinear_bwd._core import _fork
    guarded = sys.argv[2] == "guarded"
    import importlib
    load = _fork.import_module if guarded else importlib.import_module
    t = threading.Thread(target=load, args=("tb_slow_module",))
    t.start()
    while not os.path.exists(os.path.join(sys.argv[1], "tb_slow_module.py.started")):
        time.sleep(0.001)
    pid = os.fork()
    if pid == 0:
        signal.alarm(6)
        load("tb_slow_module")
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    t.join()
    print("hung" if os.WIFSIGNALED(status) else "ran")
""")


@pytest.mark.parametrize("how", sample(["guarded", "plain"], 1))
def test_a_fork_during_a_first_use_import_leaves_the_child_able_to_import(tmp_path, how):
    # Through _fork.import_module the fork waits for the import to finish;
    # through importlib alone (the control) the child inherits the module's
    # import lock held by a thread it does not have, and hangs.
    result = subprocess.run([sys.executable, "-c", _SLOW_IMPORT, str(tmp_path), how],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == (["ran"] if how == "guarded" else ["hung"])


# Modules of the package that its callers reach (tools and the CLI aside).
# (The core is a subpackage since issue 56: every module of it.)
_CALL_PATH = ("_api", "_core", "_executor", "_stream", "aclnn", "dask", "torch", "pool",
              "__init__")


def test_every_first_use_import_goes_through_the_fork_guard():
    # An import inside a function of a module on the call path, of a module
    # that importing the package's modules has not loaded already, would
    # take importlib's per-module lock at the first call: it must go through
    # _fork.import_module instead (the test above shows why).
    import ast

    loaded = subprocess.run(
        [sys.executable, "-c",
         "import importlib, sys, trilinear_bwd\n"
         "for m in ('aclnn', 'torch', 'dask', 'pool'):\n"
         "    try:\n"
         "        importlib.import_module('trilinear_bwd.' + m)\n"
         "    except ImportError:\n"
         "        pass        # an optional dependency (torch, dask) missing\n"
         "print(' '.join(sys.modules))"],
        capture_output=True, text=True, check=True).stdout.split()
    package = os.path.dirname(trilinear_bwd.__file__)
    offenders = []
    files = []
    for name in _CALL_PATH:
        if os.path.isdir(os.path.join(package, name)):          # a subpackage: each module
            files += [(f"{name}.{f[:-3]}", os.path.join(name, f))
                      for f in sorted(os.listdir(os.path.join(package, name)))
                      if f.endswith(".py")]
        else:
            files.append((name, f"{name}.py"))
    for name, file in files:
        module = "trilinear_bwd" if name == "__init__" else f"trilinear_bwd.{name}"
        module = module.removesuffix(".__init__")
        if module not in loaded:
            continue        # cannot load here (its optional dependency is missing)
        path = os.path.join(package, file)
        tree = ast.parse(open(path).read())
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        parent = module if file.endswith("__init__.py") else \
                            module.rpartition(".")[0]
                        for _ in range(node.level - 1):
                            parent = parent.rpartition(".")[0]
                        base = parent + ("." + base if base else "")
                        targets = [base] if node.module else \
                            [f"{base}.{a.name}" for a in node.names]
                    else:
                        targets = [base]
                else:
                    continue
                # (A package not installed here cannot be imported by any
                # call: its objects cannot have been passed in.)
                offenders += [f"{name}.py:{node.lineno} imports {t}" for t in targets
                              if t not in loaded
                              and importlib.util.find_spec(t.partition(".")[0]) is not None]
    assert not offenders, "first-use imports outside _fork.import_module: " + "; ".join(offenders)
