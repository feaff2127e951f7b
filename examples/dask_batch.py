"""A batch bigger than a worker's memory, through the backward on a Dask cluster.

The batch of ``grad_out`` (by default 384 x 4 x 64^3 float32, 1.5 GiB) is
generated lazily, block by block, by a seeded NumPy generator on the workers, so
it never exists whole in any process: each worker of the LocalCluster may use
400 MiB, and the two together hold less than half the batch.  Each block runs
``trilinear_bwd``'s kernel (one OpenMP thread per Dask thread) and its
``grad_input`` block is written to a ``.npy`` file, with a progress bar.

Then one slice of the batch is recomputed in memory and checked bit for bit
against the cluster's result (chunks split only N and C, so they are equal).
Last, for comparison, the same pipeline in one process: a fresh interpreter
generates the whole batch in memory, calls
``trilinear_bwd.upsample_trilinear3d_backward`` once with as many threads as
the cluster has, saves the result, and reports its times and peak memory.

Run::

    pip install "trilinear_bwd[dask]"
    python examples/dask_batch.py            # --help for sizes and cluster shape
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import trilinear_bwd as tb


def peak_rss():
    """This process's peak resident memory in bytes (current RSS where no peak is known)."""
    try:
        import resource
    except ImportError:  # Windows
        import psutil

        info = psutil.Process().memory_info()
        return getattr(info, "peak_wset", info.rss)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


class NpyBlocks:
    """A ``dask.array.store`` target that writes each block to its own ``.npy`` file.

    Only a path travels to the workers; each writes the blocks it computed.
    """

    def __init__(self, directory):
        self.directory = directory

    def __setitem__(self, region, block):
        name = "_".join(str(s.start) for s in region) + ".npy"
        np.save(os.path.join(self.directory, name), block)


def random_block(block_info=None):
    """One block of the batch: uniform [0, 1) float32, seeded by the block's index."""
    info = block_info[None]
    rng = np.random.default_rng([2024, *info["chunk-location"]])
    return rng.random(info["chunk-shape"], dtype=np.float32)


def normalize(block, total):
    """Chunk sizes of ``block`` along an axis of ``total``, the last one shorter."""
    return (block,) * (total // block) + ((total % block,) if total % block else ())


def single_process(args):
    """Child process: the same pipeline with the whole batch in memory; prints JSON."""
    shape = (args.batch, args.channels) + (args.size,) * 3
    start = time.perf_counter()
    grad_out = np.random.default_rng(0).random(shape, dtype=np.float32)
    generated = time.perf_counter()
    grad_input = tb.upsample_trilinear3d_backward(grad_out, (args.size // 2,) * 3,
                                                  num_threads=args.workers * args.threads)
    done = time.perf_counter()
    with tempfile.TemporaryDirectory() as out_dir:
        np.save(os.path.join(out_dir, "grad_input.npy"), grad_input)
    stored = time.perf_counter()
    print(json.dumps({"generate_s": generated - start, "backward_s": done - generated,
                      "store_s": stored - done, "peak_rss": peak_rss()}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=384, help="N (default 384)")
    parser.add_argument("--channels", type=int, default=4, help="C (default 4)")
    parser.add_argument("--size", type=int, default=64,
                        help="grad_out is size^3, grad_input (size/2)^3 (default 64)")
    parser.add_argument("--block", type=int, default=8, help="samples per block (default 8)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="threads per worker (default 1)")
    parser.add_argument("--memory-limit", default="400MiB",
                        help="memory limit per worker (default 400MiB)")
    parser.add_argument("--no-single", action="store_true",
                        help="skip the in-memory single-process comparison")
    parser.add_argument("--single-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.single_process:
        single_process(args)
        return

    import dask.array as da
    from dask.utils import format_bytes, parse_bytes
    from distributed import Client, LocalCluster, progress

    import trilinear_bwd.dask as tbd

    shape = (args.batch, args.channels) + (args.size,) * 3
    input_spatial = (args.size // 2,) * 3
    nbytes = int(np.prod(shape)) * 4
    limit = parse_bytes(args.memory_limit)
    print(f"grad_out {shape} float32: {format_bytes(nbytes)}, in blocks of "
          f"{format_bytes(nbytes * args.block // args.batch)}; {args.workers} workers x "
          f"{args.threads} thread(s), {format_bytes(limit)} each "
          f"({nbytes / limit:.1f}x one worker's limit)")

    start = time.perf_counter()
    with LocalCluster(n_workers=args.workers, threads_per_worker=args.threads,
                      processes=True, memory_limit=limit, dashboard_address=None) as cluster, \
            Client(cluster) as client, tempfile.TemporaryDirectory() as out_dir:
        client.run(lambda: __import__("trilinear_bwd") and None)
        baseline = client.run(peak_rss)
        print(f"cluster up in {time.perf_counter() - start:.1f} s; worker RSS after start: "
              + ", ".join(format_bytes(v) for v in baseline.values()))

        grad_out = da.map_blocks(
            random_block, dtype=np.float32, meta=np.empty((0,) * 5, np.float32),
            chunks=(normalize(args.block, args.batch), (args.channels,))
            + ((args.size,),) * 3)
        grad_input = tbd.upsample_trilinear3d_backward(grad_out, input_spatial)

        start = time.perf_counter()
        stored = client.compute(da.store(grad_input, NpyBlocks(out_dir), lock=False,
                                         compute=False))
        progress(stored)
        stored.result()
        cluster_s = time.perf_counter() - start
        peaks = client.run(peak_rss)
        files = os.listdir(out_dir)
        written = sum(os.path.getsize(os.path.join(out_dir, f)) for f in files)
        print(f"\ncluster: {cluster_s:.2f} s for generate + backward + store "
              f"({len(files)} files, {format_bytes(written)}); peak worker RSS: "
              + ", ".join(format_bytes(v) for v in peaks.values()))

        # The same blocks generated and merely summed: what the random numbers
        # alone cost on the cluster, for scale.
        start = time.perf_counter()
        client.compute(grad_out.sum(), sync=True)
        print(f"cluster, for scale, generate + sum only: {time.perf_counter() - start:.2f} s")

        # One slice, recomputed in memory: the same random blocks, one kernel call.
        k = min(args.block, args.batch - 1)
        piece = slice(k, min(k + args.block, args.batch))
        # np.array copies: arrays received from a cluster can start at any byte
        # offset, and the kernel requires element-aligned arrays.
        expected = tb.upsample_trilinear3d_backward(np.array(grad_out[piece].compute()),
                                                    input_spatial)
        got = np.load(os.path.join(out_dir, f"{piece.start}_0_0_0_0.npy"))
        assert np.array_equal(got, expected), "cluster result differs from the in-memory call"
        print(f"check: samples {piece.start}..{piece.stop - 1} bitwise equal to the "
              "in-memory call")

    if not args.no_single:
        child = subprocess.run(
            [sys.executable, __file__, "--single-process", "--batch", str(args.batch),
             "--channels", str(args.channels), "--size", str(args.size),
             "--workers", str(args.workers), "--threads", str(args.threads)],
            check=True, capture_output=True, text=True)
        single = json.loads(child.stdout.strip().splitlines()[-1])
        total = single["generate_s"] + single["backward_s"] + single["store_s"]
        print(f"single process, whole batch in memory, {args.workers * args.threads} "
              f"thread(s): {total:.2f} s = generate {single['generate_s']:.2f} s + backward "
              f"call {single['backward_s']:.2f} s + store {single['store_s']:.2f} s; "
              f"peak RSS {format_bytes(single['peak_rss'])}")
        print(f"ratios: time cluster / single process {cluster_s / total:.2f}; peak memory "
              f"largest worker / single process {max(peaks.values()) / single['peak_rss']:.3f}")

if __name__ == "__main__":
    main()
