"""Benchmark: this library against PyTorch and against the memory-bandwidth limit.

``python -m trilinear_bwd.bench`` (or ``python benchmarks/bench.py``) times,
for each case, this library (at the default thread count and on one thread)
and, if installed, ``torch.ops.aten.upsample_trilinear3d_backward`` on the same
data in the same process: a warm-up, then rounds in which every contender runs
once, in turn, and the median per contender.  By default every timed call
starts from caches that hold none of its data (``cache="cold"``: a buffer
larger than the last-level cache is read first), the state of a training
step in which other operators ran in between; ``--cache warm`` instead runs
each contender once, untimed, right before its timed call.  It measures the
machine's copy bandwidth in the same run (a large ``np.copyto``, counted as
bytes read plus bytes written: once on one thread, the "plain copy" that
defines the limit, and once split over as many threads as the kernel uses)
and reports, per case, the time, the speedup over torch, the speedup from
one thread to all, and the percentage of the bandwidth limit
``(bytes(grad_out) + bytes(grad_input)) / bandwidth`` that was reached,
against both copies.  ``--variants avx512,avx2`` times several kernel
variants side by side in the same rounds (each on all threads and on one),
the first one in the main columns.

Timing is not a test: the numbers depend on the machine and on what else runs
on it.  Compare ratios measured side by side in one run.
"""

import platform
import time

import numpy as np

from .._core._arrays import numpy_dtype

# name, (N, C), input DHW, output DHW, layout, dtype, align_corners
CASES = [
    ("unet-x2", (2, 32), (32, 32, 32), (64, 64, 64), "ncdhw", "float32", False),
    ("unet-x2", (2, 32), (32, 32, 32), (64, 64, 64), "ndhwc", "float32", False),
    ("unet-x2-ac", (2, 32), (32, 32, 32), (64, 64, 64), "ncdhw", "float32", True),
    ("odd-scale", (1, 16), (20, 30, 40), (47, 71, 93), "ncdhw", "float32", False),
    ("odd-scale", (1, 16), (20, 30, 40), (47, 71, 93), "ndhwc", "float32", False),
    ("one-slice", (1, 1), (64, 64, 64), (192, 192, 192), "ncdhw", "float32", False),
    ("downsample", (2, 16), (64, 64, 64), (40, 40, 40), "ncdhw", "float32", False),
    ("downsample", (2, 16), (64, 64, 64), (40, 40, 40), "ndhwc", "float32", False),
    ("half", (2, 32), (32, 32, 32), (64, 64, 64), "ncdhw", "float16", False),
    ("half", (2, 32), (32, 32, 32), (64, 64, 64), "ncdhw", "bfloat16", False),
]


def _layout(values, layout):
    if layout == "ndhwc":
        return np.ascontiguousarray(values.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    return np.ascontiguousarray(values)


def _empty(shape, dtype, layout):
    n, c, d, h, w = shape
    if layout == "ndhwc":
        return np.empty((n, d, h, w, c), dtype=dtype).transpose(0, 4, 1, 2, 3)
    return np.empty(shape, dtype=dtype)


def copy_bandwidth(nbytes=256 * 2**20, repeat=7, threads=1):
    """Bytes per second of a large ``np.copyto`` (bytes read plus bytes written).

    Parameters
    ----------
    nbytes : int
        Size of each array; larger than the caches so that memory is measured.
    repeat : int
        Copies timed; the median is used.
    threads : int
        The copy is split into this many contiguous chunks copied at once by
        a thread pool (NumPy releases the GIL while copying), so that the
        reference uses as many cores as the kernel it is compared with.
    """
    from concurrent.futures import ThreadPoolExecutor

    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    bounds = np.linspace(0, src.size, threads + 1).astype(int)
    chunks = [(dst[a:b], src[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    with ThreadPoolExecutor(threads) as pool:
        def copy():
            list(pool.map(lambda pair: np.copyto(*pair), chunks))

        copy()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            copy()
            times.append(time.perf_counter() - start)
    return 2 * src.nbytes / float(np.median(times))


def _torch_call(grad_out, input_size, align_corners):
    import torch

    g = grad_out
    bf16 = g.dtype.name == "bfloat16"
    if g.flags.c_contiguous:
        t = torch.from_numpy(g.view(np.int16) if bf16 else g)
    else:  # channels-last: the same memory as a channels_last_3d tensor
        nd = np.ascontiguousarray(g.transpose(0, 2, 3, 4, 1))
        t = torch.from_numpy(nd.view(np.int16) if bf16 else nd).permute(0, 4, 1, 2, 3)
    if bf16:
        t = t.view(torch.bfloat16)
    out_size, in_size = list(g.shape[2:]), list(input_size)

    def run():
        torch.ops.aten.upsample_trilinear3d_backward(t, out_size, in_size, align_corners,
                                                     None, None, None)

    return run


def _ours_call(grad_out, input_size, align_corners, layout, num_threads, variant=None):
    import contextlib

    import trilinear_bwd as tb
    from trilinear_bwd._core import _dispatch

    out = _empty(input_size, grad_out.dtype, layout)
    with _dispatch.forced(variant) if variant else contextlib.nullcontext():
        size, executor = tb.get_workspace_size(grad_out, grad_out.shape[2:], input_size,
                                               align_corners, 0.0, 0.0, 0.0, out,
                                               num_threads=num_threads)
    executor.set_repeatable()
    workspace = tb.alloc_workspace(size)

    def run():
        tb.execute(workspace, size, executor)

    run.out = out
    return run


# How the rounds of a contender are summarised (--stat).
STATS = {"median": np.median, "min": np.min}

# Read before every timed call in "cold" mode: twice the 260 MB of
# last-level cache the CI machine reports.
EVICT_BYTES = 512 * 2**20


def _evicter(cache):
    """Return the function that sets the cache state before a timed call."""
    if cache == "warm":
        return lambda run: run()
    if cache != "cold":
        raise ValueError(f"cache must be 'cold' or 'warm', got {cache!r}")
    buf = np.ones(EVICT_BYTES // 8)  # written once, so that its pages exist

    def evict(run):
        # Reading, not writing: the caches end up full of clean lines, so the
        # timed call pays for its own memory traffic only, which is what the
        # bandwidth limit counts, not for writing back someone else's.
        buf.sum()

    return evict


def measure(case, repeat, num_threads, with_torch, seed=0, cache="cold", variants=None,
            stat="median"):
    """Time one case; return a dict of results (times in seconds).

    ``cache`` is "cold" (every timed call starts with none of the data in
    cache) or "warm" (each timed call follows an untimed one of the same
    contender).  ``variants`` (kernel variant names) are timed in the same
    rounds: the first as ``ours`` / ``ours_1t``, each other one ``v`` as
    ``ours_v`` / ``ours_1t_v``; None times the active variant alone.  ``stat``
    is how the rounds are summarised: "median", or "min" on a machine shared
    with other work, where a preempted call is slower by the time it lost.
    """
    name, (n, c), ins, outs, layout, dtype, align = case
    values = np.random.default_rng(seed).standard_normal((n, c) + outs, dtype=np.float32)
    grad_out = _layout(values.astype(numpy_dtype(dtype)), layout)
    input_size = (n, c) + ins
    first, *others = variants or [None]
    contenders = {
        "ours": _ours_call(grad_out, input_size, align, layout, num_threads, first),
        "ours_1t": _ours_call(grad_out, input_size, align, layout, 1, first),
    }
    for v in others:
        contenders[f"ours_{v}"] = _ours_call(grad_out, input_size, align, layout,
                                             num_threads, v)
        contenders[f"ours_1t_{v}"] = _ours_call(grad_out, input_size, align, layout, 1, v)
    if with_torch:
        contenders["torch"] = _torch_call(grad_out, input_size, align)
    for run in contenders.values():  # warm-up: first touch, caches, thread pools
        run()
        run()
    times = {k: [] for k in contenders}
    order = list(contenders)
    prepare = _evicter(cache)
    for round_ in range(repeat):
        # Interleaved rounds, so that drift in the machine's load hits every
        # contender alike, in an order that rotates.  Each timed call starts
        # from the cache state ``prepare`` sets, not from whatever its
        # predecessor left: with three contenders a rotation alone has the
        # one-thread run follow the all-thread run (warm) in two rounds of
        # three, and the all-thread run follow torch's long call, after which
        # this machine's caches have gone cold, in two of three, which
        # understated the thread speedup by 10-15%.
        for key in order[round_ % len(order):] + order[:round_ % len(order)]:
            prepare(contenders[key])
            start = time.perf_counter()
            contenders[key]()
            times[key].append(time.perf_counter() - start)
    result = {
        "case": name, "layout": layout, "dtype": dtype, "align_corners": align,
        "N": n, "C": c, "input": list(ins), "output": list(outs),
        "bytes": int(grad_out.nbytes + contenders["ours"].out.nbytes),
    }
    for key, values_ in times.items():
        result[f"{key}_s"] = float(STATS[stat](values_))
    return result


def run_benchmark(cases=CASES, repeat=15, num_threads=None, with_torch=None, bandwidth=None,
                  progress=None, cache="cold", variants=None, stat="median"):
    """Run every case; return ``{"machine": ..., "bandwidth": ..., "results": [...]}``.

    ``cache``, ``variants`` and ``stat`` are passed to :func:`measure`.
    """
    import trilinear_bwd as tb
    from trilinear_bwd._core import _dispatch, _threads

    if with_torch is None:
        try:
            import torch  # noqa: F401
        except ImportError:
            with_torch = False
        else:
            with_torch = True
    threads = _threads.effective(num_threads)
    bw = bandwidth or copy_bandwidth(threads=1)
    bw_all = copy_bandwidth(threads=threads) if threads > 1 else bw
    results = []
    for case in cases:
        r = measure(case, repeat, num_threads, with_torch, cache=cache, variants=variants,
                    stat=stat)
        limit = r["bytes"] / bw
        r["limit_s"] = limit
        r["percent_of_limit"] = 100.0 * limit / r["ours_s"]
        for v in (variants or [])[1:]:
            r[f"percent_of_limit_{v}"] = 100.0 * limit / r[f"ours_{v}_s"]
            r[f"speedup_over_{v}"] = r[f"ours_{v}_s"] / r["ours_s"]
            r[f"speedup_over_{v}_1t"] = r[f"ours_1t_{v}_s"] / r["ours_1t_s"]
        r["percent_of_all_threads_copy"] = 100.0 * r["bytes"] / bw_all / r["ours_s"]
        r["thread_scaling"] = r["ours_1t_s"] / r["ours_s"]
        if with_torch:
            r["speedup_vs_torch"] = r["torch_s"] / r["ours_s"]
        results.append(r)
        if progress:
            progress(r)
    machine = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "threads": _threads.effective(num_threads),
        "kernel_variant": variants[0] if variants else _dispatch.active_variant(),
        "other_variants": list((variants or [])[1:]),
        "trilinear_bwd": tb.__version__,
        "numpy": np.__version__,
    }
    if with_torch:
        import torch

        machine["torch"] = torch.__version__
        machine["torch_threads"] = torch.get_num_threads()
    return {"machine": machine, "bandwidth_bytes_per_s": bw,
            "all_threads_bandwidth_bytes_per_s": bw_all, "repeat": repeat, "cache": cache, "stat": stat,
            "results": results}
