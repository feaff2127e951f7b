"""Cold planning of long axes: this tree, an earlier revision and PyTorch, side by side in one run.

Issue 46, item 9 (issue 20, item 5 before it): the first call of a geometry
builds its axis tables (``trilinear_bwd._core._axis_table`` and the modules
beside it) before the kernel runs.
This times that first call, for both operators, at axis lengths up to the
per-dimension limit (2**20), against PyTorch's first ``F.interpolate`` (and
its backward, ``aten.upsample_trilinear3d_backward``) of the same shapes,
and the same calls with the ``_tables`` module of an earlier revision (``--old``,
loaded beside this tree's from git), plus the Dask per-block task of the
issue's case (8 blocks of one axis).

    python benchmarks/planning.py              # against main as of issue 46
    python benchmarks/planning.py --old HEAD   # this tree against its own commit

(``--old`` takes any revision from 44f6088 on, whose tables are the
``AxisTable`` records the plan reads, up to issue 56, which split
``_tables.py`` into ``_coefficients``, ``_pytorch_rounding``, ``_axis_terms``,
``_axis_table`` and ``_table_cache``.)

Every figure of this library is a cold one: the plan and table caches are
cleared before each run.  PyTorch keeps no per-geometry state on CPU, so its
"first" figure is its first call with that shape in the process, "later"
the best of the rest.  Rounds are interleaved (old, new, PyTorch, old, ...)
and each figure is the best of ``--repeat`` rounds; the machine and its load
are printed with the table.  Prints Markdown (milliseconds).
"""

import argparse
import contextlib
import importlib.util
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import ml_dtypes
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import trilinear_bwd as tb  # noqa: E402
from trilinear_bwd._core import _operator, _plan, _table_cache  # noqa: E402

# main when issue 46 was filed: the tables of issue 20 (vectorised, unchunked).
DEFAULT_OLD = "de8aa2c"
LIMIT = _operator.MAX_DIM


def load_old_tables(rev):
    """The revision's ``_tables`` module, as a sibling of this tree's package."""
    # (trilinear_bwd/_tables.py until the core moved to _core/, in issue 56.)
    for where in ("trilinear_bwd/_core/_tables.py", "trilinear_bwd/_tables.py"):
        shown = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{where}"],
                               capture_output=True, text=True)
        if shown.returncode == 0:
            break
    shown.check_returncode()
    text = shown.stdout
    path = os.path.join(tempfile.mkdtemp(), "_old_tables.py")
    with open(path, "w") as f:
        f.write(text)
    # In the core, so that its relative imports (_fork, _table_loops) are this tree's.
    name = "trilinear_bwd._core._old_tables"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "window_scope"):
        # Revisions before issue 46's Dask work had no scope for a task's
        # tables (they stayed cached): this tree's dask.py opens one.
        module.window_scope = contextlib.nullcontext
    return module


@contextlib.contextmanager
def tables(module):
    """Plan (and build Dask graphs) with ``module``'s tables and terms."""
    import trilinear_bwd.dask as tbd

    saved = _plan.axis_table, tbd._axis_terms
    _plan.axis_table, tbd._axis_terms = module.axis_table, module
    try:
        yield
    finally:
        _plan.axis_table, tbd._axis_terms = saved
        clear(module)


def clear(module):
    _plan.clear_plans()
    _table_cache.clear_cache()
    module.clear_cache()


# The clock: wall time, or with --cpu-time the calling thread's CPU time,
# which the machine's other work does not stretch (both libraries then run
# on one thread, so that it is all of their work).
CLOCK = [time.perf_counter]


def timed(fn):
    clock = CLOCK[0]
    t = clock()
    fn()
    return clock() - t


def axis_cases(lengths):
    """``(name, n_in, n_out, scale)``: x2, x3 and x1.7 up, x1/3 down, each length.

    A length past what the limit allows for a scale is replaced by the
    longest that fits (the output, or the input when downsampling, 2**20).
    """
    for name, factor, given in (("x2", 2, False), ("x3", 3, False),
                                ("x1.7 (scale given)", 1.7, True), ("x1/3 (down)", 1 / 3, False)):
        seen = set()
        for n in lengths:
            n_in = min(n, LIMIT, int(LIMIT / factor))
            n_out = math.floor(n_in * factor)
            if n_in in seen:
                continue
            seen.add(n_in)
            yield name, n_in, n_out, factor if given else 0.0


def as_tensor(array):
    """The same values as a tensor (bfloat16 through its bits: NumPy has no such type)."""
    import torch

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def calls(n_in, n_out, scale, align_corners, dtype):
    """This library's forward and backward of one axis, and PyTorch's."""
    import torch
    import torch.nn.functional as F

    x = np.random.default_rng(0).random((1, 1, 1, 1, n_in)).astype(dtype)
    g = np.random.default_rng(1).random((1, 1, 1, 1, n_out)).astype(dtype)
    xt, gt = as_tensor(x), as_tensor(g)
    scales = (0.0, 0.0, scale)
    size = (1, 1, n_out)

    threads = 1 if CLOCK[0] is time.thread_time else None

    def ours_forward():
        tb.upsample_trilinear3d(x, size, align_corners=align_corners, scales=scales,
                                num_threads=threads)

    def ours_backward():
        tb.upsample_trilinear3d_backward(g, (1, 1, 1, 1, n_in), align_corners=align_corners,
                                         scales=scales, num_threads=threads)

    def torch_forward():
        if scale:
            F.interpolate(xt, scale_factor=(1.0, 1.0, scale), mode="trilinear",
                          align_corners=align_corners)
        else:
            F.interpolate(xt, size=size, mode="trilinear", align_corners=align_corners)

    def torch_backward():
        torch.ops.aten.upsample_trilinear3d_backward(
            gt, list(size), [1, 1, 1, 1, n_in], align_corners, None, None, scale or None)

    return {"forward": (ours_forward, torch_forward), "backward": (ours_backward, torch_backward)}


def measure_axes(old, lengths, repeat, align_corners, dtype):
    rows = []
    for name, n_in, n_out, scale in axis_cases(lengths):
        for op, (ours, theirs) in calls(n_in, n_out, scale, align_corners, dtype).items():
            t_old, t_new, t_torch = [], [], []
            t_torch_first = timed(theirs)
            for _ in range(repeat):
                with tables(old):
                    clear(old)
                    t_old.append(timed(ours))
                clear(old)
                t_new.append(timed(ours))
                t_torch.append(timed(theirs))
            t_warm = min(timed(ours) for _ in range(repeat))  # plan cached: kernel and call
            rows.append((op, f"{name}: {n_in} -> {n_out}", t_torch_first, min(t_torch),
                         min(t_old), min(t_new), t_warm))
    return rows


def dask_blocks(old, repeat):
    """Per-block task times of the issue's Dask case, both operators, 8 blocks of W."""
    import dask.array as da

    import trilinear_bwd.dask as tbd

    x = np.random.default_rng(0).random((1, 1, 1, 1, 65536)).astype(np.float32)
    g = np.random.default_rng(1).random((1, 1, 1, 1, 196608)).astype(np.float32)
    graphs = {
        "forward (1,1,1,1,65536) x3, 8 blocks":
            lambda: tbd.upsample_trilinear3d(da.from_array(x, chunks=(1, 1, 1, 1, 8192)),
                                             (1, 1, 196608)),
        "backward (1,1,1,1,196608) -> 65536, 8 blocks":
            lambda: tbd.upsample_trilinear3d_backward(
                da.from_array(g, chunks=(1, 1, 1, 1, 24576)), (1, 1, 1, 1, 65536)),
    }
    block = tbd._window_block
    times = []

    def timed_block(*args, **kwargs):
        clock = CLOCK[0]
        t = clock()
        out = block(*args, **kwargs)
        times.append(clock() - t)
        return out

    rows = []
    tbd._window_block = timed_block
    try:
        for name, build in graphs.items():
            result = {}
            for _ in range(repeat):
                for variant in ("old", "new"):
                    with tables(old) if variant == "old" else contextlib.nullcontext():
                        clear(old)
                        times.clear()
                        clock = CLOCK[0]
                        t = clock()
                        lazy = build()
                        t_graph = clock() - t
                        lazy.compute(scheduler="sync")
                        t_all = clock() - t
                    assert len(times) == 8, len(times)
                    best = result.get(variant)
                    row = (t_graph, float(np.median(times)), max(times), t_all)
                    result[variant] = row if best is None else tuple(map(min, best, row))
            rows.append((name, result["old"], result["new"]))
    finally:
        tbd._window_block = block
    return rows


def machine():
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        for line in subprocess.run(["lscpu"], capture_output=True, text=True,
                                   check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    return (f"{model}, {os.cpu_count()} cores, load average "
            f"{' '.join(f'{v:.1f}' for v in os.getloadavg())} at the start")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default=DEFAULT_OLD, help="git revision to compare with")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lengths", default=f"256,4096,65536,{LIMIT}",
                        help="input axis lengths (comma-separated)")
    parser.add_argument("--align-corners", action="store_true")
    parser.add_argument("--dtype", default="float32",
                        choices=["float32", "float64", "float16", "bfloat16"])
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--cpu-time", action="store_true",
                        help="one thread each, the calling thread's CPU time (not wall)")
    args = parser.parse_args(argv)
    import torch

    if args.cpu_time:
        CLOCK[0] = time.thread_time
        torch.set_num_threads(1)

    old = load_old_tables(args.old)
    lengths = [int(v) for v in args.lengths.split(",")]
    print(f"CPU: {machine()}; torch {torch.__version__} ({torch.get_num_threads()} threads); "
          f"{args.dtype}, align_corners={args.align_corners}; best of {args.repeat} "
          f"interleaved rounds; old = {args.old}; "
          f"{'CPU time of one thread' if args.cpu_time else 'wall time'}")
    # The first call of the process pays for imports and dispatch set-up.
    tb.upsample_trilinear3d(np.ones((1, 1, 2, 2, 2), np.float32), (3, 3, 3))
    torch.nn.functional.interpolate(torch.ones(1, 1, 2, 2, 2), size=(3, 3, 3), mode="trilinear")
    dtype = np.dtype(ml_dtypes.bfloat16 if args.dtype == "bfloat16" else args.dtype)
    rows = measure_axes(old, lengths, args.repeat, args.align_corners, dtype)
    print()
    print("| op | axis (W; D = H = 1) | PyTorch first | PyTorch later | old cold | "
          "new cold | new / PyTorch first | old / new | new, plan cached |")
    print("|---|---|---|---|---|---|---|---|---|")
    for op, name, first, later, t_old, t_new, warm in rows:
        print(f"| {op} | {name} | {first * 1e3:.2f} | {later * 1e3:.2f} | {t_old * 1e3:.2f} | "
              f"{t_new * 1e3:.2f} | {t_new / first:.1f} | {t_old / t_new:.1f} | "
              f"{warm * 1e3:.2f} |")
    if args.no_dask:
        return
    print()
    print("| Dask graph (sync scheduler, cold) | variant | graph built | block task, median | "
          "block task, max | graph + compute |")
    print("|---|---|---|---|---|---|")
    for name, t_old, t_new in dask_blocks(old, args.repeat):
        for variant, row in (("old", t_old), ("new", t_new)):
            print(f"| {name} | {variant} | " + " | ".join(f"{v * 1e3:.2f}" for v in row) + " |")


if __name__ == "__main__":
    main()
