"""Large torch results: what a fresh result's memory costs, side by side in one run.

Usage::

    python benchmarks/torch_results.py [--rounds 5] [--calls 20] \
        LABEL=PYTHON[:ENV=VALUE,...] ...

Each configuration is a Python interpreter (a virtual environment with one
version of ``trilinear_bwd`` installed) and environment variables
(``NO_HUGE_PAGE_HINT=1`` turns the current code's huge-page hint off), for
example::

    python benchmarks/torch_results.py \
        before=/venvs/before/bin/python \
        after=/venvs/after/bin/python \
        after+THP=/venvs/after/bin/python:THP_MEM_ALLOC_ENABLE=1

Every round starts one child process per configuration, in turn; a child
times the two calls the pool was made for, each ``--calls`` times after a
warm-up call, freeing each result before the next call (as a training loop
does once ``zero_grad`` sets ``x.grad`` to None):

* ``backward``: ``aten::upsample_trilinear3d_backward`` under ``enable()``
  (what ``loss.backward()`` calls), ``(2, 16, 128^3) -> (2, 16, 64^3)``
  float32, a 32 MiB ``x.grad`` from a 256 MiB gradient;
* ``forward``: ``F.interpolate(x, scale_factor=2, mode="trilinear")`` under
  ``enable()``, ``(1, 28, 32^3) -> (1, 28, 64^3)`` float32, a 28 MiB result;
* ``backward, headline``: the headline's ``enable()`` row (``python -m
  trilinear_bwd.bench --calls-only``), ``(2, 16, 40^3) -> (2, 16, 64^3)``:
  the same 32 MiB ``x.grad`` from an 8 MiB gradient, so the result's memory
  is a larger share of the call;
* ``forward, headline``: the headline's forward, ``(2, 32, 32^3) -> (2, 32,
  64^3)``, a 64 MiB result;

and the same two calls with ``disable()`` (PyTorch's kernels) for scale.
The figure is the minimum over rounds of each child's median time per call,
in milliseconds, warm caches (one geometry repeated).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
import torch, torch.nn.functional as F
import trilinear_bwd.torch as tbt

if os.environ.get("NO_HUGE_PAGE_HINT"):       # the hint of the current code turned off
    from trilinear_bwd.torch import _arrays
    _arrays._madvise = None

calls = int(sys.argv[1])
torch.manual_seed(0)
g = torch.rand(2, 16, 128, 128, 128)
x = torch.rand(1, 28, 32, 32, 32)
g_small = torch.rand(2, 16, 40, 40, 40)
x_large = torch.rand(2, 32, 32, 32, 32)
backward = torch.ops.aten.upsample_trilinear3d_backward.default


def timed(fn):
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2] * 1e3


def run_backward():
    r = backward(g, [128, 128, 128], [2, 16, 64, 64, 64], False, 2.0, 2.0, 2.0)
    del r


def run_forward():
    y = F.interpolate(x, scale_factor=2, mode="trilinear")
    del y


def run_backward_headline():
    r = backward(g_small, [40, 40, 40], [2, 16, 64, 64, 64], False, None, None, None)
    del r


def run_forward_headline():
    y = F.interpolate(x_large, scale_factor=2, mode="trilinear")
    del y


cases = {"backward": run_backward, "forward": run_forward,
         "backward, headline": run_backward_headline, "forward, headline": run_forward_headline}
out = {}
tbt.enable()
for name, fn in cases.items():
    out[name] = timed(fn)
tbt.disable()
for name, fn in cases.items():
    out[name + ", PyTorch"] = timed(fn)
print(json.dumps(out))
"""


def parse_config(text):
    label, _, rest = text.partition("=")
    python, _, env_text = rest.partition(":")
    env = dict(item.split("=", 1) for item in env_text.split(",") if item)
    return label, python, env


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", help="LABEL=PYTHON[:ENV=VALUE,...]")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    configs = [parse_config(c) for c in args.configs]
    results = {label: {} for label, _, _ in configs}
    for _ in range(args.rounds):
        for label, python, env in configs:
            child_env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), **env)
            line = subprocess.run([python, "-c", CHILD, str(args.calls)], env=child_env,
                                  check=True, capture_output=True, text=True).stdout
            for case, ms in json.loads(line.strip().splitlines()[-1]).items():
                results[label].setdefault(case, []).append(ms)
    cases = list(next(iter(results.values())))
    first = configs[0][0]
    print("| case | " + " | ".join(label for label, _, _ in configs) + " |")
    print("|---|" + "---|" * len(configs))
    for case in cases:
        base = min(results[first][case])
        cells = []
        for label, _, _ in configs:
            best = min(results[label][case])
            cells.append(f"{best:.2f} ms" + ("" if label == first else f" ({base / best:.2f}x)"))
        print(f"| {case} | " + " | ".join(cells) + " |")
    spread = {label: {case: round(statistics.pstdev(v) / statistics.mean(v), 3)
                      for case, v in r.items()} for label, r in results.items()}
    print("\nrelative spread across rounds:", json.dumps(spread))


if __name__ == "__main__":
    sys.exit(main())
