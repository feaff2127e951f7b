"""Digests of the kernels' results for a fixed set of cases: the same bits everywhere.

Every case (operator, dtype, layout, align_corners, shape and scales) runs on
inputs that an integer hash makes, exactly representable in the dtype, so
they are the same on every machine whatever its NumPy or processor.  The
digest of a case is the SHA-256 of the result's bytes (grad_input, or the
forward's out) in logical (N, C, D, H, W) order (little-endian, as on every
platform the wheels are built for).  The forward cases (ids ``fwd-...``)
upsample the shapes' input sizes to their output sizes.

``tests/digests.json`` holds the digests computed on x86-64;
``tests/test_digests.py`` checks that every kernel variant built here
reproduces them, and ``ci/cross_aarch64.sh`` runs that test on the aarch64
build under QEMU.  After a change that is meant to change results, rewrite
the table (from any directory; every variant must agree first)::

    python tests/_digests.py --write
"""

import hashlib
import json
import os
import platform
import sys

import numpy as np

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digests.json")

DTYPES = ["float32", "float64", "float16", "bfloat16"]
LAYOUTS = ["ncdhw", "ndhwc"]
# (N, C, input DHW, output DHW, scales): odd sizes and ratios, explicit
# scales that are not the size ratio (used only without align_corners),
# downsampling, channel counts that take the channels-last vector paths
# (16, 24) and ones that leave tails (3, 5), W rows longer than a vector,
# exact 3x.
SHAPES = [
    (2, 3, (4, 5, 7), (7, 11, 19), None),
    (1, 5, (3, 6, 9), (8, 13, 23), (2.7, 2.3, 2.6)),
    (1, 16, (5, 4, 6), (9, 7, 17), (1.9, 1.75, 2.9)),
    (2, 2, (7, 9, 11), (3, 5, 4), None),
    (1, 24, (2, 3, 5), (5, 7, 13), (2.5, 2.4, 2.7)),
    (1, 4, (11, 13, 17), (21, 27, 37), None),
    # 3x in W: the backward's inner W blocks read 3 apart (AVX2's stride-3 read).
    (1, 3, (3, 4, 21), (5, 6, 63), None),
]
# Significand bits each dtype holds exactly.
_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}


def np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


OPS = ["backward", "forward"]


def case_id(dtype, layout, align_corners, index, op="backward"):
    prefix = "fwd-" if op == "forward" else ""
    return f"{prefix}{dtype}-{layout}-ac{int(align_corners)}-shape{index}"


def cases():
    """Every case as (id, dtype, layout, align_corners, shape index, operator)."""
    return [(case_id(d, lay, ac, i, op), d, lay, ac, i, op)
            for op in OPS for i in range(len(SHAPES)) for d in DTYPES for lay in LAYOUTS
            for ac in (False, True)]


def grad_out_values(shape, dtype, seed):
    """Values in [-4, 4) with at most the dtype's significand bits, from integers only.

    A 64-bit multiplicative hash of the flat index (wrapping uint64
    arithmetic), its top bits as a signed integer, scaled by a power of two:
    every step is exact, so every machine gets the same array.
    """
    bits = _BITS[dtype]
    k = np.arange(int(np.prod(shape)), dtype=np.uint64)
    h = (k + np.uint64(seed)) * np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(29)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    top = (h >> np.uint64(64 - bits)).astype(np.int64) - (1 << (bits - 1))
    values = top.astype(np.float64) * 2.0 ** -(bits - 3)
    out = values.astype(np_dtype(dtype)).reshape(shape)
    assert np.array_equal(out.astype(np.float64), values.reshape(shape)), "not exact"
    return out


def _laid_out(values, layout):
    if layout == "ncdhw":
        return np.ascontiguousarray(values)
    return np.ascontiguousarray(values.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)


def _empty(shape, dtype, layout):
    n, c, d, h, w = shape
    if layout == "ncdhw":
        base = np.empty(shape, dtype)
        arr = base
    else:
        base = np.empty((n, d, h, w, c), dtype)
        arr = base.transpose(0, 4, 1, 2, 3)
    base.view(np.uint8)[...] = 0xFF  # NaN bytes: every element must be written
    return arr


def run_case(dtype, layout, align_corners, index, variant=None, num_threads=2, op="backward"):
    """The result of one case, computed by kernel ``variant`` (None: the public API)."""
    import trilinear_bwd as tb
    from trilinear_bwd._core import _dispatch
    from trilinear_bwd._core._arrays import data_address
    from trilinear_bwd._core._operator import BACKWARD, FORWARD, check
    from trilinear_bwd._core._plan import make_plan

    n, c, ins, outs, scales = SHAPES[index]
    scales = (0.0, 0.0, 0.0) if scales is None else scales
    forward = op == "forward"
    source_shape, target_shape = ((n, c) + ins, (n, c) + outs) if forward else \
        ((n, c) + outs, (n, c) + ins)
    src = _laid_out(grad_out_values(source_shape, dtype, seed=1000 * index + 7), layout)
    out = _empty(target_shape, src.dtype, layout)
    if variant is None:
        if forward:
            tb.upsample_trilinear3d(src, outs, align_corners, scales, out=out,
                                    num_threads=num_threads)
        else:
            tb.upsample_trilinear3d_backward(src, ins, output_size=outs,
                                             align_corners=align_corners, scales=scales,
                                             out=out, num_threads=num_threads)
        return out
    if forward:
        call = check(FORWARD, src, out, outs, None, align_corners, scales)
    else:
        call = check(BACKWARD, src, out, outs, (n, c) + ins, align_corners, scales)
    plan = make_plan(call, num_threads)
    ws = tb.alloc_workspace(plan.workspace_size)
    _dispatch.kernel_module(variant).run(
        plan.kernel, data_address(src), data_address(out), data_address(ws) if ws.size else 0, num_threads)
    return out


def digest(arr):
    """SHA-256 of the array's bytes in logical C order."""
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def compute(variant=None):
    """{case id: digest} for every case."""
    return {cid: digest(run_case(d, lay, ac, i, variant, op=op))
            for cid, d, lay, ac, i, op in cases()}


def load_table():
    with open(TABLE, encoding="utf-8") as f:
        return json.load(f)


def main(argv):
    from trilinear_bwd._core import _dispatch

    variants = _dispatch.available_variants()
    results = {name: compute(name) for name in variants}
    results["api"] = compute(None)
    first = results[variants[0]]
    disagree = {name: sorted(k for k in first if got[k] != first[k])
                for name, got in results.items() if got != first}
    if disagree:
        sys.exit(f"the variants disagree, table not written: {disagree}")
    if "--write" not in argv:
        print(json.dumps(first, indent=1))
        return
    table = {
        "about": "SHA-256 of the result (logical NCDHW order) per case; "
                 "made by `python tests/_digests.py --write`, see tests/_digests.py",
        "computed_on": f"{platform.machine()}, variants {variants}, "
                       f"Python {platform.python_version()}, NumPy {np.__version__}",
        "digests": first,
    }
    with open(TABLE, "w", encoding="utf-8") as f:
        json.dump(table, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"wrote {len(first)} digests to {TABLE} (variants {variants} and the API agree)")


if __name__ == "__main__":
    # Run as a script from anywhere: the package comes from the environment.
    main(sys.argv[1:])
