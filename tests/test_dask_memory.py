"""trilinear_bwd.dask out of core: what a task carries, holds and allocates; what a worker keeps.

The promise (docs/dask.md, "Memory"): a block's task holds the source points
its window reads (its own chunk and thin parts of its neighbours), its result
and, for a window of ``SPLIT_BYTES`` or more, at most a copy of the points
next to one chunk boundary; a task sent to a worker carries no data that
grows with the array; nothing is kept on a worker past its tasks.
"""

import gc
import pickle
import tracemalloc

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

import trilinear_bwd as tb  # noqa: E402
import trilinear_bwd.dask as tbd  # noqa: E402
from trilinear_bwd._core import _axis_terms, _plan, _table_cache  # noqa: E402

MiB = 2**20


def seeded(shape, chunks, dtype="float32", channels_last=False):
    """A Dask array whose chunks are made on demand: standard normal, seeded by position."""
    def make(block_info=None):
        info = block_info[None]
        seed = [start for start, _ in info["array-location"]]
        block = np.random.default_rng(seed).standard_normal(info["chunk-shape"],
                                                            dtype=np.float32)
        block = block.astype(dtype, copy=False)
        if channels_last:
            block = np.ascontiguousarray(block.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
        return block

    return da.map_blocks(make, dtype=dtype, chunks=da.core.normalize_chunks(chunks, shape),
                         meta=np.empty((0,) * 5, dtype))


def bits(a):
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


# --------------------------------------------------------------------------
# What a task carries to a worker


@pytest.mark.parametrize("forward", [False, True])
def test_tasks_carry_nothing_that_grows_with_the_array(forward):
    # dask.distributed pickles each task to send it to a worker.  A 128 MiB
    # array (64 MiB for the forward; never made: da.zeros) in 1 MiB chunks:
    # a task must pickle to a few KiB, not to the array's bytes (a broadcast
    # stand-in of the whole array pickles to all of them).
    if forward:
        x = da.zeros((4, 4, 64, 128, 128), dtype="float32", chunks=(1, 4, 16, 64, 64))
        lazy = tbd.upsample_trilinear3d(x, (128, 256, 256))
    else:
        x = da.zeros((4, 4, 128, 128, 128), dtype="float32", chunks=(1, 4, 16, 64, 64))
        lazy = tbd.upsample_trilinear3d_backward(x, (64, 64, 64))
    layer = lazy.__dask_graph__().layers[lazy.name]
    sizes = {}
    for key in layer:
        sizes[key] = len(pickle.dumps(layer[key], protocol=5))
        assert sizes[key] < 16 * 2**10, (key, sizes[key])
    assert any(str(k[0]).endswith("-part") for k in sizes)     # parts are tasks too


# --------------------------------------------------------------------------
# What one block's task holds and allocates


class _BlockProbe(dask.callbacks.Callback):
    """Bytes one task's inputs hold, and the peak its run allocates (tracemalloc)."""

    def __init__(self, key):
        super().__init__()
        self.key = key

    def _pretask(self, key, dsk, state):
        if key == self.key:
            deps = dask.core.get_dependencies(dsk, key)
            self.inputs = sum(state["cache"][d].nbytes for d in deps
                              if not str(d[0]).endswith("-terms"))
            tracemalloc.reset_peak()
            self.start = tracemalloc.get_traced_memory()[0]

    def _posttask(self, key, result, dsk, state, id):
        if key == self.key:
            self.allocated = tracemalloc.get_traced_memory()[1] - self.start
            self.result = result.nbytes


def block_memory(lazy, source, index):
    """``(inputs, allocated, result, window)`` bytes of block ``index``'s task.

    ``window`` is what the block reads: its source points on each axis
    (``_axis_terms.source_range`` of its targets) times its N and C.
    """
    key = (lazy.name,) + index
    probe = _BlockProbe(key)
    previous = tb.pool.set_limit(0)     # every allocation a fresh, traced one
    tracemalloc.start()
    try:
        with probe:
            dask.get(dict(lazy.__dask_graph__()), [key])
    finally:
        tracemalloc.stop()
        tb.pool.set_limit(previous)
    window = np.dtype(source.dtype).itemsize
    window *= lazy.chunks[0][index[0]] * lazy.chunks[1][index[1]]
    for k in range(3):
        terms = dask.get(dict(lazy.__dask_graph__()), (lazy.name + "-terms", k))
        t0 = sum(lazy.chunks[2 + k][:index[2 + k]])
        s0, s1 = terms.source_range(t0, t0 + lazy.chunks[2 + k][index[2 + k]])
        window *= s1 - s0
    return probe.inputs, probe.allocated, probe.result, window


# (source shape, chunks, layout, upsampled size or None for the backward): the
# reported chunking (D slabs), channels-last, every axis split, the forward.
LARGE_BLOCKS = [
    ((1, 4, 144, 128, 128), (1, 4, 48, 128, 128), "NCDHW", None),
    ((1, 4, 144, 128, 128), (1, 4, 48, 128, 128), "NDHWC", None),
    ((1, 4, 192, 192, 192), (1, 4, 96, 96, 96), "NCDHW", None),
    ((1, 4, 96, 128, 128), (1, 4, 32, 128, 128), "NCDHW", (192, 128, 128)),
]


@pytest.mark.parametrize("case", range(len(LARGE_BLOCKS)))
def test_a_large_block_holds_its_window_and_copies_only_boundary_points(case):
    shape, chunks, layout, upsampled = LARGE_BLOCKS[case]
    x = seeded(shape, chunks, channels_last=layout == "NDHWC")
    if upsampled is None:
        lazy = tbd.upsample_trilinear3d_backward(x, tuple(n // 2 for n in shape[2:]))
    else:
        lazy = tbd.upsample_trilinear3d(x, upsampled)
    # A block with neighbours on every split axis; its window, 8.5 to 14 MiB.
    index = tuple(len(c) // 2 for c in lazy.chunks)
    inputs, allocated, result, window = block_memory(lazy, x, index)
    # Its inputs are its window: its own chunk and the thin parts of its
    # neighbours it reads, not the neighbours whole (3 to 27 times as much).
    assert inputs <= 1.02 * window, (inputs / MiB, window / MiB)
    # It allocates its result and copies of the few source points next to a
    # boundary, not a copy of the window (another window's worth).
    assert allocated <= result + 0.25 * window, (allocated / MiB, result / MiB, window / MiB)


def test_a_small_block_copies_its_window_at_most_once():
    x = seeded((1, 4, 64, 64, 64), (1, 4, 32, 32, 32))     # 512 KiB chunks
    lazy = tbd.upsample_trilinear3d_backward(x, (32, 32, 32))
    inputs, allocated, result, window = block_memory(lazy, x, (0, 0, 1, 1, 1))
    assert window < tbd.SPLIT_BYTES
    assert inputs <= 8 * 512 * 2**10           # the chunks it overlaps, no more
    assert allocated <= result + 1.1 * window


def test_a_large_block_runs_few_kernel_calls(monkeypatch):
    # The onion: one call inside its chunk, and a thin one per side that
    # reads across a boundary -- at most 1 + 2 * (split axes), here 7.
    seen = []
    real = tbd.run_once
    monkeypatch.setattr(tbd, "run_once", lambda call, n: seen.append(call.window) or
                        real(call, n))
    # A middle block, its window (4.4 MiB) computed in runs whatever its size.
    monkeypatch.setattr(tbd, "SPLIT_BYTES", 0)
    x = seeded((1, 4, 192, 192, 192), (1, 4, 64, 64, 64))
    lazy = tbd.upsample_trilinear3d_backward(x, (96, 96, 96))
    key = (lazy.name, 0, 0, 1, 1, 1)
    dask.get(dict(lazy.__dask_graph__()), [key])
    assert 3 <= len(seen) <= 7
    # The calls tile the block's targets exactly once.
    covered = np.zeros(tuple(c[1] for c in lazy.chunks[2:]), dtype=int)
    first = [sum(c[:1]) for c in lazy.chunks[2:]]
    for window in seen:
        covered[tuple(slice(t0 - f, t1 - f) for (t0, t1, _), f in zip(window, first))] += 1
    assert (covered == 1).all()


# --------------------------------------------------------------------------
# Nothing kept past the tasks


def test_nothing_is_kept_past_the_tasks_but_the_axes_terms():
    _table_cache.clear_cache()
    _plan.clear_plans()
    x = seeded((2, 4, 96, 96, 96), (1, 4, 32, 48, 96))
    lazy = tbd.upsample_trilinear3d_backward(x, (48, 48, 48))
    terms = [dask.get(dict(lazy.__dask_graph__()), (lazy.name + "-terms", k)) for k in range(3)]
    built = _table_cache._cache.nbytes
    assert built == sum({t.key: t.nbytes for t in terms}.values())
    for scheduler in ("sync", "threads"):
        lazy.compute(scheduler=scheduler)
        gc.collect()
        # No block's plan, and no table of a window: each block has its own,
        # which nothing after its task uses.
        assert len(_plan._plans) == 0
        assert _table_cache._cache.nbytes == built
        assert getattr(_axis_terms._scope, "tables", None) is None


# --------------------------------------------------------------------------
# The promise on a memory-limited cluster


def _peak_rss():
    """This process's peak resident memory in bytes (Linux's VmHWM), or None where unknown.

    Not ``getrusage``'s ``ru_maxrss``: Linux carries it across ``exec``, so a
    worker started from a large test process would report that process's.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@pytest.mark.slow
def test_a_batch_twice_the_cluster_memory_on_memory_limited_workers():
    distributed = pytest.importorskip("distributed")

    # 512 MiB of grad_out, made on the workers chunk by chunk (8 MiB, split
    # along D as well as N), through the backward on 2 workers of 256 MiB.
    # A worker holds a few chunks at a time; a task that carried the whole
    # array, or a worker that kept what its tasks freed, would exceed its limit.
    x = seeded((16, 4, 128, 128, 128), (1, 4, 32, 128, 128))
    lazy = tbd.upsample_trilinear3d_backward(x, (64, 64, 64))
    sample = 5
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, memory_limit="256MiB") as cluster, \
            distributed.Client(cluster) as client:
        workers = set(client.scheduler_info()["workers"])
        total, block = client.compute([lazy.sum(dtype="float64"), lazy[sample]], sync=True)
        # Both workers alive, neither restarted (a restarted one has a new address).
        assert set(client.scheduler_info()["workers"]) == workers
        # Nothing from the pool on a worker, and no block's plan kept.
        kept = client.run(lambda: (tb.pool.stats(), len(_plan._plans), _peak_rss()))
    for stats, plans, peak in kept.values():
        assert stats["held"] == stats["hits"] == stats["misses"] == 0
        assert plans == 0
        # Short of the 80% at which a worker pauses (measured: about half).
        assert peak is None or peak < 0.8 * 256 * MiB, peak / MiB
    expected = tb.upsample_trilinear3d_backward(
        x[sample:sample + 1].compute(scheduler="sync"), (64, 64, 64))
    assert np.array_equal(bits(block), bits(expected[0]))
    assert np.isfinite(total)
