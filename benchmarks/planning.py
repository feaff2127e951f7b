"""Planning cost of long axes, before and after vectorised tables, side by side in one run.

Issue 20, item 5: the cases it reports, each run with this tree's
``_tables`` and with the one of an earlier revision (``--old``, default the
commit before the vectorised tables), loaded side by side in the same
process, plus the kernel's own time for the same call.

    python benchmarks/planning.py --old 53e11c9

Every planning figure is a cold one: the plan and table caches are cleared
before each run.  Prints a Markdown table (seconds, best of ``--repeat``).
"""

import argparse
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import trilinear_bwd as tb  # noqa: E402
from trilinear_bwd import _plan, _tables  # noqa: E402


def load_old(rev):
    """The revision's ``_tables`` and ``dask`` modules, as siblings of this tree's package."""
    modules = {}
    for name in ("_tables", "dask"):
        text = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:trilinear_bwd/{name}.py"],
                              check=True, capture_output=True, text=True).stdout
        text = text.replace("from ._tables import", "from ._old_tables import")
        path = os.path.join(tempfile.mkdtemp(), f"_old{name}.py")
        with open(path, "w") as f:
            f.write(text)
        full = f"trilinear_bwd._old{name if name.startswith('_') else '_' + name}"
        spec = importlib.util.spec_from_file_location(full, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
        modules[name] = module
    return modules


class Variant:
    """Route planning through one ``_tables`` implementation."""

    def __init__(self, old=None):
        self.old = old

    def __enter__(self):
        self.saved = _plan.axis_table
        if self.old is not None:
            old = self.old["_tables"]
            _plan.axis_table = lambda *a, storage=None, **k: old.axis_table(*a, **k)
        self.clear()
        return self

    def __exit__(self, *exc):
        _plan.axis_table = self.saved
        self.clear()

    def clear(self):
        _plan.clear_plans()
        _tables.clear_cache()
        if self.old is not None:
            self.old["_tables"]._cached_axis_table.cache_clear()


def best(fn, repeat, before=None):
    times = []
    for _ in range(repeat):
        if before:
            before()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def cases():
    x = np.ones((1, 1, 1, 1, 65536), np.float32)
    g = np.ones((1, 1, 1, 1, 2**20 - 1), np.float32)
    size = (1, 1, 1, 1, 2**19)

    def forward():
        tb.upsample_trilinear3d(x, (3, 3, 3 * 65536))

    def phase_one():
        tb.get_workspace_size(g, (1, 1, 2**20 - 1), size, True, 0.0, 0.0, 0.0,
                              np.empty(size, np.float32))

    def backward():
        tb.upsample_trilinear3d_backward(g, size, align_corners=True)

    yield "forward (1,1,1,1,65536) x3, first call", forward
    yield "phase one, 2**20-1 -> 2**19, align_corners", phase_one
    yield "backward 2**20-1 -> 2**19, align_corners, first call", backward


def dask_case(module):
    import dask.array as da

    g = da.ones((1, 1, 1, 1, 2**20 - 1), dtype=np.float32, chunks=(1, 1, 1, 1, 65536))
    assert g.numblocks[4] == 16

    def run():
        module.upsample_trilinear3d_backward(g, (1, 1, 2**19), align_corners=True).compute(
            scheduler="sync")
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="53e11c9", help="git revision to compare with")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    old = load_old(args.old)
    import trilinear_bwd.dask as new_dask

    rows = []
    for name, fn in cases():
        with Variant(old) as v:
            t_old = best(fn, args.repeat, v.clear)
        with Variant() as v:
            t_new = best(fn, args.repeat, v.clear)
            fn()
            t_warm = best(fn, args.repeat)  # plan cached: the kernel and the call around it
        rows.append((name, t_old, t_new, t_warm))
    with Variant(old) as v:
        t_old = best(dask_case(old["dask"]), 1, v.clear)
    with Variant() as v:
        t_new = best(dask_case(new_dask), args.repeat, v.clear)
    rows.append(("dask backward, 16 chunks of 2**20-1 -> 2**19, align_corners, "
                 "build + compute", t_old, t_new, float("nan")))
    print(f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"cold caches (plans and tables cleared before each run); best of {args.repeat} "
          "(the old Dask run once)")
    print("| case | before (s) | after (s) | speed-up | same call, plan cached (s) |")
    print("|---|---|---|---|---|")
    for name, a, b, w in rows:
        print(f"| {name} | {a:.3f} | {b:.4f} | {a / b:.0f}x | "
              f"{'' if w != w else f'{w:.4f}'} |")


if __name__ == "__main__":
    main()
