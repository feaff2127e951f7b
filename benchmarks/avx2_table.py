"""Issue 23's table: builds of the kernel side by side, each case's % of the cold copy limit.

Each build (a checkout whose extensions are built in place) runs in its own
worker process, so that two builds of the same package can be timed in one
run; the parent sends "time case i" to each worker in turn, round after
round, so that drift in the machine's load hits every build alike.  Every
timed call starts cold: the worker first reads a 512 MiB buffer (the bench's
``EVICT_BYTES``), then times one ``execute`` into a preallocated output.  The
limit is the best of several cold one-thread copies (``np.copyto`` of 256 MiB,
bytes read plus bytes written) measured by the parent between the rounds.

    python benchmarks/avx2_table.py --build before=/path/to/old/checkout \\
        --build after=. [--threads 2] [--repeat 15] [--stat min] [--variant avx2] [--forward]

A build may name a kernel variant, ``after=.:baseline``; ``--variant`` sets it
for every build that does not.  Timing is not a test: compare the builds'
ratios measured in the same run.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

# The seven cases: name, (N, C), input DHW, output DHW, layout, dtype.
CASES = [
    ("unet-x2", (2, 32), (32, 32, 32), (64, 64, 64), "ncdhw", "float32"),
    ("unet-x2", (2, 32), (32, 32, 32), (64, 64, 64), "ndhwc", "float32"),
    ("odd-scale", (1, 16), (20, 30, 40), (47, 71, 93), "ncdhw", "float32"),
    ("one-slice", (1, 1), (64, 64, 64), (192, 192, 192), "ncdhw", "float32"),
    ("downsample", (2, 16), (64, 64, 64), (40, 40, 40), "ncdhw", "float32"),
    ("unet-x2", (2, 32), (32, 32, 32), (64, 64, 64), "ncdhw", "float16"),
    ("unet-x2", (2, 32), (32, 32, 32), (64, 64, 64), "ncdhw", "bfloat16"),
]
TARGETS = [65, 75, 50, 55, 55, 45, 45]
EVICT_BYTES = 512 * 2**20

# The worker: run with the build's root first on sys.path; reads "i" lines,
# answers each with the seconds one cold call of case i took.
WORKER = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import trilinear_bwd as tb
from trilinear_bwd._core import _dispatch
try:                                    # the harness's own folder since issue 56
    from trilinear_bwd._bench._kernel import _empty, _layout
except ImportError:
    from trilinear_bwd.bench import _empty, _layout
try:                                    # a build of any age
    from trilinear_bwd._core._arrays import numpy_dtype as _dtype
except ImportError:
    from trilinear_bwd.bench import _dtype
cases, threads, forward = json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
runs = []
for name, (n, c), ins, outs, layout, dtype in cases:
    # The backward reads a gradient of the output size and writes the input
    # size; the forward reads the input size and writes the output size.
    read, written = (ins, outs) if forward else (outs, ins)
    values = np.random.default_rng(0).standard_normal((n, c) + tuple(read), dtype=np.float32)
    g = _layout(values.astype(_dtype(dtype)), layout)
    out = _empty((n, c) + tuple(written), g.dtype, layout)
    out[...] = 0
    if forward:
        size, ex = tb.get_forward_workspace_size(g, tuple(written), False, 0.0, 0.0, 0.0, out,
                                                 num_threads=threads)
    else:
        size, ex = tb.get_workspace_size(g, g.shape[2:], out.shape, False, 0.0, 0.0, 0.0, out,
                                         num_threads=threads)
    ex.set_repeatable()
    ws = tb.alloc_workspace(size)
    run = (lambda ws=ws, size=size, ex=ex: tb.execute(ws, size, ex))
    run(); run()
    runs.append((run, g.nbytes + out.nbytes))
buf = np.ones(%d // 8)
print(json.dumps({"file": tb.__file__, "variant": _dispatch.active_variant(),
                  "bytes": [b for _, b in runs]}), flush=True)
for line in sys.stdin:
    run = runs[int(line)][0]
    buf.sum()
    t = time.perf_counter(); run(); t = time.perf_counter() - t
    print(t, flush=True)
""" % EVICT_BYTES


def cold_copy(nbytes=256 * 2**20, repeat=3):
    """The best of ``repeat`` one-thread cold copies, in bytes per second (read + write)."""
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    evict = np.ones(EVICT_BYTES // 8)
    np.copyto(dst, src)
    best = 0.0
    for _ in range(repeat):
        evict.sum()
        t = time.perf_counter()
        np.copyto(dst, src)
        best = max(best, 2 * src.nbytes / (time.perf_counter() - t))
    return best


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", action="append", required=True, metavar="NAME=PATH[:VARIANT]")
    p.add_argument("--threads", "-t", type=int, default=2)
    p.add_argument("--repeat", "-r", type=int, default=15)
    p.add_argument("--stat", choices=["median", "min"], default="min")
    p.add_argument("--variant", default="avx2", help="kernel variant ('' for the default)")
    p.add_argument("--forward", action="store_true",
                   help="time the forward of the same geometries (input size -> output size); "
                        "the targets are the backward's")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    builds = []
    for spec in args.build:
        name, _, path = spec.partition("=")
        path, _, variant = path.partition(":")
        variant = variant or args.variant
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        env.pop("TRILINEAR_BWD_KERNEL", None)
        if variant:
            env["TRILINEAR_BWD_KERNEL"] = variant
        proc = subprocess.Popen([sys.executable, "-c", WORKER, os.path.abspath(path),
                                 json.dumps(CASES), str(args.threads),
                                 "1" if args.forward else "0"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=env, cwd="/")
        builds.append((name, proc, json.loads(proc.stdout.readline())))
    times = {name: [[] for _ in CASES] for name, _, _ in builds}
    copies = []
    load = [os.getloadavg()[0]]
    for round_ in range(args.repeat):
        if round_ % 5 == 0:
            copies.append(cold_copy())
        order = builds[round_ % len(builds):] + builds[:round_ % len(builds)]
        for i in range(len(CASES)):
            for name, proc, _ in order:
                proc.stdin.write(f"{i}\n")
                proc.stdin.flush()
                times[name][i].append(float(proc.stdout.readline()))
        load.append(os.getloadavg()[0])
    copies.append(cold_copy())
    for _, proc, _ in builds:
        proc.stdin.close()
        proc.wait()
    limit = max(copies)
    stat = np.min if args.stat == "min" else np.median
    nbytes = builds[0][2]["bytes"]
    names = [name for name, _, _ in builds]
    print(f"CPU: {cpu_model()}, {os.cpu_count()} processors; {args.threads} threads; "
          f"cold caches; {args.stat} of {args.repeat} interleaved rounds; "
          f"{'forward' if args.forward else 'backward'}")
    for name, _, info in builds:
        print(f"  {name}: {info['file']} (variant {info['variant']})")
    print(f"cold copy limit: {limit / 1e9:.1f} GB/s (best one-thread cold np.copyto, "
          f"read + write; all: {', '.join(f'{c / 1e9:.1f}' for c in copies)}); "
          f"load average during the run {min(load):.2f}-{max(load):.2f}")
    head = ["case", "MB"] + [f"{n} (ms)" for n in names] + [f"{n} %" for n in names]
    head += ["target"] + ([f"speedup, {names[-1]} over {names[0]}"] if len(names) > 1 else [])
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    rows = []
    for i, (name, (n, c), ins, outs, layout, dtype) in enumerate(CASES):
        t = [float(stat(times[b][i])) for b in names]
        pct = [100 * nbytes[i] / limit / x for x in t]
        label = f"{name} {layout.upper()} {dtype}" + (" forward" if args.forward else "")
        cells = [label, f"{nbytes[i] / 1e6:.1f}"] + [f"{x * 1e3:.2f}" for x in t]
        cells += [f"{x:.0f}%" for x in pct] + [f"{TARGETS[i]}%"]
        if len(names) > 1:
            cells.append(f"{t[0] / t[-1]:.2f}x")
        print("| " + " | ".join(cells) + " |")
        rows.append({"case": label, "bytes": nbytes[i], "seconds": dict(zip(names, t)),
                     "percent": dict(zip(names, pct)), "target": TARGETS[i]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_model(), "threads": args.threads, "limit": limit,
                       "forward": args.forward,
                       "copies": copies, "load": load, "stat": args.stat,
                       "builds": {n: info for n, _, info in builds}, "rows": rows,
                       "raw": times}, f, indent=1)


if __name__ == "__main__":
    main()
