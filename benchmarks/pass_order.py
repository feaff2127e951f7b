"""Why the kernel runs D, then H, then W: a measurement with the kernel itself.

The spec describes the separable sum as W, then H, then D.  Done in that
order, the W pass -- the one pass that cannot use contiguous vectors in NCDHW,
a gather along each row -- runs over every row of ``grad_out``.  Done last,
it runs over the rows of the D- and H-reduced volume, four times fewer at 2x.

This script times, on the same data, with the same kernel build:

* ``D->H->W``: the real problem (what the kernel does);
* ``W on all of grad_out``: the problem ``(N, C, oD, oH, iW) <- (oD, oH, oW)``.
  Its D and H axes are identities, so it computes exactly the first step of a
  W-first order -- the W reduction of every grad_out row -- and writes that
  intermediate out.  It is a proxy for the cost of a W-first kernel: it has
  two cheap identity passes and a larger write where W-first would have the
  reduced H and D passes and a smaller write, both of which also stream the
  intermediate.

    python benchmarks/pass_order.py [--threads N] [--repeat R]
"""

import argparse
import time

import numpy as np

import trilinear_bwd as tb

CASES = [
    ("unet-x2 NCDHW", (2, 32), (32, 32, 32), (64, 64, 64), False),
    ("unet-x2 NDHWC", (2, 32), (32, 32, 32), (64, 64, 64), True),
    ("odd-scale NCDHW", (1, 16), (20, 30, 40), (47, 71, 93), False),
    ("one-slice NCDHW", (1, 1), (64, 64, 64), (192, 192, 192), False),
]


def _layout(values, channels_last):
    if channels_last:
        return np.ascontiguousarray(values.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    return values


def _runner(grad_out, spatial_in, channels_last, threads):
    n, c = grad_out.shape[:2]
    shape = (n, c) + tuple(spatial_in)
    if channels_last:
        out = np.empty((n,) + tuple(spatial_in) + (c,), np.float32).transpose(0, 4, 1, 2, 3)
    else:
        out = np.empty(shape, np.float32)
    size, ex = tb.get_workspace_size(grad_out, grad_out.shape[2:], shape, False, 0, 0, 0, out,
                                     num_threads=threads)
    ex.set_repeatable()
    ws = tb.alloc_workspace(size)
    return lambda: tb.execute(ws, size, ex)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args(argv)
    print("| case | D->H->W (ms) | W on all of grad_out (ms) | ratio |")
    print("|---|---|---|---|")
    for name, (n, c), ins, outs, cl in CASES:
        g = _layout(np.random.default_rng(0).standard_normal((n, c) + outs, dtype=np.float32), cl)
        od, oh, ow = outs
        runs = {
            "full": _runner(g, ins, cl, args.threads),
            "w_all": _runner(g, (od, oh, ins[2]), cl, args.threads),
        }
        for run in runs.values():
            run()
        times = {k: [] for k in runs}
        for _ in range(args.repeat):
            for k, run in runs.items():
                start = time.perf_counter()
                run()
                times[k].append(time.perf_counter() - start)
        t = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
        print(f"| {name} | {t['full']:.2f} | {t['w_all']:.2f} | {t['w_all'] / t['full']:.1f}x |")


if __name__ == "__main__":
    main()
