"""Before/after cost of keeping remembered addresses true (issue 20, item 1), side by side.

Usage: python benchmarks/remembered_addresses.py BEFORE_DIR

BEFORE_DIR holds a copy of the package from before the change, renamed
``trilinear_bwd_before`` (with its compiled extensions).  Both versions run
in this one process, interleaved round by round, warm (each call repeated
on the same arrays); the figure is the median over rounds of the time per
call, in microseconds, and the ratio after / before.
"""

import statistics
import sys
import time

import numpy as np

sys.path.insert(0, sys.argv[1])
import trilinear_bwd as after  # noqa: E402
import trilinear_bwd_before as before  # noqa: E402

ROUNDS, CALLS = 31, 100


def executor_case(tb, shape, out_shape, kind):
    if kind == "torch":
        import torch

        g = torch.rand(shape)
        gi = torch.empty(out_shape)
    else:
        g = np.random.default_rng(0).random(shape, dtype=np.float32)
        gi = np.empty(out_shape, np.float32)
    size, ex = tb.get_workspace_size(g, shape[2:], out_shape, False, 0.0, 0.0, 0.0, gi,
                                     num_threads=1)
    ex.set_repeatable()
    if kind == "torch":
        import torch

        ws = torch.empty(size, dtype=torch.uint8)
    else:
        ws = tb.alloc_workspace(size)
    return lambda: tb.execute(ws, size, ex)


def one_call_case(tb, shape, out_shape):
    g = np.random.default_rng(0).random(shape, dtype=np.float32)
    return lambda: tb.upsample_trilinear3d_backward(g, out_shape[2:], num_threads=1)


SMALL = ((1, 2, 8, 8, 8), (1, 2, 4, 4, 4))
LARGE = ((1, 16, 64, 64, 64), (1, 16, 32, 32, 32))
CASES = {
    "executor, small, NumPy": lambda tb: executor_case(tb, *SMALL, "numpy"),
    "executor, small, torch": lambda tb: executor_case(tb, *SMALL, "torch"),
    "executor, large, NumPy": lambda tb: executor_case(tb, *LARGE, "numpy"),
    "executor, large, torch": lambda tb: executor_case(tb, *LARGE, "torch"),
    "one call, small": lambda tb: one_call_case(tb, *SMALL),
}


def per_call(fn, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    print(f"{'call':26s} {'before us':>10s} {'after us':>10s} {'ratio':>7s}")
    for name, make in CASES.items():
        fns = {"before": make(before), "after": make(after)}
        calls = CALLS if "small" in name else 10
        for fn in fns.values():
            per_call(fn, calls)                        # warm
        times = {"before": [], "after": []}
        for _ in range(ROUNDS):
            for which in ("before", "after"):
                times[which].append(per_call(fns[which], calls))
        b, a = (statistics.median(times[w]) for w in ("before", "after"))
        print(f"{name:26s} {b:10.2f} {a:10.2f} {a / b:7.3f}")


if __name__ == "__main__":
    main()
