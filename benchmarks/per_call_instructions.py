"""Instructions per call of the calls users make, counted by callgrind: before and after a change.

Usage::

    python benchmarks/per_call_instructions.py LABEL=PYTHON ... [--calls 400]

Each LABEL=PYTHON is an interpreter with one version of ``trilinear_bwd``
installed.  One child per interpreter runs every case below under
``valgrind --tool=callgrind``: a warm-up, then ``--calls`` calls inside one
``operator.call`` (a function nothing else calls), the only stretch
callgrind counts (``--toggle-collect``) and after which it writes a file
of its own (``--dump-after``); that count over ``--calls`` is the instructions one call
costs, the cost of the Python around the kernel included.  Instruction counts do not depend on what else the machine runs,
so the figures of two versions compare exactly (``docs/performance.md``).
One thread (``OMP_NUM_THREADS=1``), tiny volumes: what is counted is the
per-call cost, not the kernel's work.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

CHILD = r"""
import operator
import sys

import numpy as np
import torch
import torch.nn.functional as F
import trilinear_bwd as tb
import trilinear_bwd.torch as tbt

calls = int(sys.argv[1])
x = torch.rand(1, 2, 4, 4, 4)
g = torch.rand(1, 2, 8, 8, 8)
xg = x.clone().requires_grad_()
gn = g.numpy()
backward = torch.ops.aten.upsample_trilinear3d_backward.default


def forward_and_backward(up):
    def fn():
        up(xg).backward(g)
        xg.grad = None
    return fn


def executor():
    out = np.empty((1, 2, 4, 4, 4), np.float32)
    size, ex = tb.get_workspace_size(gn, (8, 8, 8), (1, 2, 4, 4, 4), False, 0.0, 0.0, 0.0,
                                     out)
    ex.set_repeatable()
    ws = tb.alloc_workspace(size)
    return lambda: tb.execute(ws, size, ex)


interpolate = lambda t: F.interpolate(t, scale_factor=2.0, mode="trilinear")
drop_in = lambda t: tbt.upsample_trilinear3d(t, scale_factor=2.0)
cases = {
    "enable: F.interpolate": lambda: interpolate(x),
    "enable: aten backward": lambda: backward(g, [8, 8, 8], [1, 2, 4, 4, 4], False, 2.0,
                                              2.0, 2.0),
    "enable: F.interpolate + backward": forward_and_backward(interpolate),
    "drop-in forward": lambda: drop_in(x),
    "drop-in forward + backward": forward_and_backward(drop_in),
    "tbt.upsample_trilinear3d_backward": lambda: tbt.upsample_trilinear3d_backward(
        g, (8, 8, 8), (1, 2, 4, 4, 4), False),
    "one call (NumPy)": lambda: tb.upsample_trilinear3d_backward(gn, (4, 4, 4)),
    "executor (NumPy)": executor(),
}
for name in sys.argv[2:]:
    fn = cases[name]
    tbt.enable() if name.startswith("enable") else tbt.disable()
    for _ in range(20):
        fn()

    def loop():
        for _ in range(calls):
            fn()
    operator.call(loop)                     # counted
"""

CASES = ["enable: F.interpolate", "enable: aten backward", "enable: F.interpolate + backward",
         "drop-in forward", "drop-in forward + backward", "tbt.upsample_trilinear3d_backward",
         "one call (NumPy)", "executor (NumPy)"]


def per_call(python, cases, calls, script):
    """Instructions per call of each case, in one callgrind run of ``python``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--toggle-collect=_operator_call", "--dump-after=_operator_call",
                        python, script, str(calls), *cases],
                       env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0"),
                       check=True, capture_output=True)
        dumps = sorted((f for f in os.listdir(tmp) if re.fullmatch(r"callgrind\.out\.\d+", f)),
                       key=lambda f: int(f.rpartition(".")[2]))
        counts = [int(re.search(r"^summary: (\d+)", open(os.path.join(tmp, f)).read(),
                                re.M).group(1)) for f in dumps]
    if len(counts) != len(cases):
        raise RuntimeError(f"{len(counts)} dumps for {len(cases)} cases")
    return [n / calls for n in counts]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", help="LABEL=PYTHON")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--cases", nargs="*", default=CASES)
    args = parser.parse_args()
    configs = [c.split("=", 1) for c in args.configs]
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CHILD)
        script = f.name
    figures = [per_call(python, args.cases, args.calls, script) for _, python in configs]
    print("| call | " + " | ".join(label for label, _ in configs)
          + (" | after / before |" if len(configs) == 2 else " |"))
    print("|---|" + "---|" * (len(configs) + (len(configs) == 2)))
    for k, case in enumerate(args.cases):
        cells = [f"{f[k]:,.0f}" for f in figures]
        if len(figures) == 2:
            cells.append(f"{figures[1][k] / figures[0][k]:.3f}")
        print(f"| {case} | " + " | ".join(cells) + " |")
    os.unlink(script)


if __name__ == "__main__":
    sys.exit(main())
