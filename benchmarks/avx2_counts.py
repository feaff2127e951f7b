"""Issue 50's instruction counts: each pass of one kernel variant, per output element, by callgrind.

Counts are repeatable on any x86-64 machine that valgrind runs (it runs AVX2
code on any core that has it, but not AVX-512), so they measure a change to the H and W passes
where timing cannot: on a busy machine, or on a core that is not the one the
change is for.  Each build is a directory made by ``benchmarks/avx2_passes.sh
DEST``: ``DEST/d`` stops each item after the D pass, ``DEST/dh`` after D and
H, ``DEST/full`` is the kernel.  One process per build and stop runs one call
of each case of ``avx2_table.py`` (the issue's seven, backward, or with
``--forward`` their forward) on one thread, under ``valgrind --tool=callgrind``
collecting only inside the kernel's items (``_item``, which the passes are
inlined into or called from) and dumping after each call;
then H = (D + H) - D and W = whole - (D + H), W including the stores of the
target.  Figures are instructions per element of the target.

    sh benchmarks/avx2_passes.sh /tmp/passes-after          # this checkout
    python benchmarks/avx2_counts.py --build before=/tmp/passes-before \\
        --build after=/tmp/passes-after [--variant avx2] [--forward] [--json FILE]
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from avx2_table import CASES  # noqa: E402

STOPS = (("d", "D"), ("dh", "D+H"), ("full", "whole"))

# One call of each case through the kernel module's ``run`` (a team of one:
# ``_run_team`` in the calling thread).  The values do not change the count
# (no branch of the kernel depends on them), so they are cheap to make.
WORKER = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from trilinear_bwd._core import _dispatch
from trilinear_bwd._core._arrays import data_address
from trilinear_bwd._core._operator import BACKWARD, FORWARD, check
from trilinear_bwd._core._plan import make_plan
import trilinear_bwd as tb
try:                                    # the harness's own folder since issue 56
    from trilinear_bwd._bench._kernel import _empty, _layout
except ImportError:
    from trilinear_bwd.bench import _empty, _layout
try:                                    # a build of any age
    from trilinear_bwd._core._arrays import numpy_dtype as _dtype
except ImportError:
    from trilinear_bwd.bench import _dtype
cases, variant, forward = json.loads(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
module = _dispatch.kernel_module(variant)
for name, (n, c), ins, outs, layout, dtype in cases:
    read, written = (ins, outs) if forward else (outs, ins)
    shape = (n, c) + tuple(read)
    values = (np.arange(np.prod(shape), dtype=np.float32) % 251 - 125).reshape(shape) / 64
    src = _layout(values.astype(_dtype(dtype)), layout)
    out = _empty((n, c) + tuple(written), src.dtype, layout)
    if forward:
        call = check(FORWARD, src, out, tuple(written), None, False, (0.0, 0.0, 0.0))
    else:
        call = check(BACKWARD, src, out, tuple(read), (n, c) + tuple(written), False,
                     (0.0, 0.0, 0.0))
    plan = make_plan(call, 1)
    ws = tb.alloc_workspace(plan.workspace_size)
    module.run(plan.kernel, data_address(src), data_address(out),
               data_address(ws) if ws.size else 0, 1)
    print(json.dumps({"case": name, "elements": int(out.size)}), flush=True)
"""


def _callgrind(path, variant, forward, cases, tmp):
    """One process for ``cases``: each call's count, or None if callgrind's dumps miss some."""
    out = os.path.join(tmp, "cg.out")
    for f in glob.glob(out + "*"):
        os.remove(f)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--toggle-collect=*_kernels_*{variant}__item*",
         f"--dump-after=*_kernels_*{variant}_1run*", f"--callgrind-out-file={out}",
         sys.executable, "-c", WORKER, os.path.abspath(path), json.dumps(cases), variant,
         "1" if forward else "0"],
        capture_output=True, text=True, env=env, cwd="/", check=True)
    elements = [json.loads(line)["elements"] for line in proc.stdout.splitlines()]
    # One dump per call (out.1, out.2, ...), then the rest of the run (out);
    # a single call needs none: the whole run's count is its own.
    dumps = sorted(glob.glob(out + ".*"), key=lambda f: int(f.rsplit(".", 1)[1]))
    if len(cases) == 1:
        dumps = [out]
    totals = []
    for f in dumps:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("totals:"):
                    totals.append(int(line.split()[1]))
                    break
    if len(totals) != len(cases) or not all(totals):
        return None, elements
    return totals, elements


def count(path, variant, forward, cases):
    """Instructions of each case's one call inside ``_item``, in case order."""
    with tempfile.TemporaryDirectory() as tmp:
        totals, elements = _callgrind(path, variant, forward, cases, tmp)
        if totals is None:
            # Some builds' calls end where callgrind does not see them leave
            # ``run`` (their item function entered by a jump): no dump after
            # each call.  One process per case then.
            totals, elements = [], []
            for case in cases:
                t, e = _callgrind(path, variant, forward, [case], tmp)
                if t is None:
                    raise RuntimeError(f"{path}: no count for {case[0]}")
                totals += t
                elements += e
        return totals, elements


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", action="append", required=True, metavar="NAME=DEST")
    p.add_argument("--variant", default="avx2")
    p.add_argument("--forward", action="store_true")
    p.add_argument("--cases", default="", help="comma-separated indices into the table's cases")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    index = [int(i) for i in args.cases.split(",")] if args.cases else range(len(CASES))
    cases = [CASES[i] for i in index]
    result = {}
    for spec in args.build:
        name, _, dest = spec.partition("=")
        by_stop = {}
        for stop, _ in STOPS:
            totals, elements = count(os.path.join(dest, stop), args.variant, args.forward,
                                     cases)
            by_stop[stop] = totals
        result[name] = {"elements": elements, **by_stop}
    names = list(result)
    print(f"variant {args.variant}; one thread; one call each; instructions per target "
          f"element inside _item (callgrind); {'forward' if args.forward else 'backward'}")
    head = ["case"] + [f"{n} D / H / W / whole" for n in names]
    if len(names) > 1:
        head += [f"{names[-1]} / {names[0]}: D / H / W / whole"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    rows = []
    for i, (label, (n, c), ins, outs, layout, dtype) in enumerate(cases):
        cells = [f"{label} {layout.upper()} {dtype}"]
        per = {}
        for name in names:
            r = result[name]
            e = r["elements"][i]
            d, dh, full = r["d"][i], r["dh"][i], r["full"][i]
            per[name] = (d / e, (dh - d) / e, (full - dh) / e, full / e)
            cells.append(" / ".join(f"{x:.2f}" for x in per[name]))
        if len(names) > 1:
            a, b = per[names[0]], per[names[-1]]
            cells.append(" / ".join(f"{y / x:.2f}x" if x else "-" for x, y in zip(a, b)))
        print("| " + " | ".join(cells) + " |")
        rows.append({"case": cells[0], "per_element": per})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"variant": args.variant, "forward": args.forward, "raw": result,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
