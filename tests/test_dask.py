"""trilinear_bwd.dask: the backward and the forward on Dask arrays, on Dask's schedulers and a LocalCluster."""

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

da = pytest.importorskip("dask.array")

import trilinear_bwd as tb  # noqa: E402
from trilinear_bwd._core import _axis_terms, _block_windows, _table_cache  # noqa: E402
from trilinear_bwd import reference
from trilinear_bwd.dask import upsample_trilinear3d as dask_forward  # noqa: E402
from trilinear_bwd.dask import upsample_trilinear3d_backward as dask_backward  # noqa: E402

from conftest import DTYPES, FULL, in_layout, np_dtype, random_grad, sample_product  # noqa: E402

# (grad_out spatial shape, input spatial size, align_corners, scales): up- and
# downsampling, both coordinate modes, given scales and an identity axis.
CASES = [
    ((12, 10, 9), (5, 4, 7), False, (0.0, 0.0, 0.0)),
    ((12, 10, 9), (5, 4, 7), True, (0.0, 0.0, 0.0)),
    ((12, 10, 9), (5, 4, 7), False, (2.5, 2.5, 1.3)),
    ((6, 5, 8), (13, 11, 8), False, (0.0, 0.0, 0.0)),
    ((6, 5, 8), (13, 11, 8), True, (0.0, 0.0, 0.0)),
]


def bits(a):
    """The array's bytes as unsigned integers, for bitwise comparison (NaN included)."""
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


# --------------------------------------------------------------------------
# N and C chunks: the kernel per block, bitwise


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_nc_chunks_bitwise_equal_to_one_call(dtype, case):
    spatial, size, ac, scales = CASES[case]
    g = random_grad((3, 4) + spatial, dtype, seed=case)
    expected = tb.upsample_trilinear3d_backward(g, size, align_corners=ac, scales=scales)
    x = da.from_array(g, chunks=((2, 1), (1, 3)) + tuple((n,) for n in spatial))
    lazy = dask_backward(x, size, align_corners=ac, scales=scales)
    assert lazy.chunks == ((2, 1), (1, 3)) + tuple((n,) for n in size)
    assert lazy.dtype == g.dtype
    got = lazy.compute(scheduler="sync")
    assert got.dtype == g.dtype and got.shape == expected.shape
    assert np.array_equal(bits(got), bits(expected))


def test_nc_chunks_default_output_size_and_five_element_input_size():
    g = random_grad((2, 2, 8, 6, 4), "float32")
    x = da.from_array(g, chunks=(1, 1, 8, 6, 4))
    a = dask_backward(x, (2, 2, 4, 3, 2)).compute(scheduler="sync")
    b = dask_backward(x, (4, 3, 2), output_size=(8, 6, 4)).compute(scheduler="sync")
    assert np.array_equal(a, tb.upsample_trilinear3d_backward(g, (4, 3, 2)))
    assert np.array_equal(a, b)


def test_misaligned_blocks_are_accepted(calls):
    # Blocks deserialised by dask.distributed may start at any byte offset.
    def misalign(block):
        raw = np.empty(block.nbytes + 1, dtype=np.uint8)
        odd = raw[1:].view(block.dtype).reshape(block.shape)
        odd[...] = block
        assert not odd.flags.aligned or block.size == 0
        return odd

    g = random_grad((2, 2, 8, 6, 4), "float32")
    for chunks in ((1, 2, 8, 6, 4), (1, 2, 3, 6, 4), (2, 1, 4, 3, 2)):
        x = da.from_array(g, chunks=chunks).map_blocks(
            misalign, dtype=g.dtype, meta=np.empty((0,) * 5, g.dtype))
        got = dask_backward(x, (4, 3, 2)).compute(scheduler="sync")
        assert np.array_equal(got, tb.upsample_trilinear3d_backward(g, (4, 3, 2)))


def test_num_threads_reaches_each_kernel_call(monkeypatch):
    import trilinear_bwd.dask as tbd

    seen = []
    real = tbd.run_once

    def spy(args, num_threads):
        seen.append(num_threads)
        return real(args, num_threads)

    monkeypatch.setattr(tbd, "run_once", spy)
    g = random_grad((2, 1, 8, 8, 8), "float32")
    x = da.from_array(g, chunks=(1, 1, 8, 8, 8))
    one = dask_backward(x, (4, 4, 4)).compute(scheduler="sync")
    assert seen == [1, 1]
    seen.clear()
    two = dask_backward(x, (4, 4, 4), num_threads=2).compute(scheduler="sync")
    assert seen == [2, 2]
    assert np.array_equal(one, two)


def test_graph_is_lazy():
    calls = []

    def make(block):
        calls.append(block.shape)
        return block

    g = random_grad((2, 1, 8, 8, 8), "float32")
    for chunks in ((1, 1, 8, 8, 8), (2, 1, 4, 8, 8)):
        calls.clear()
        x = da.from_array(g, chunks=chunks).map_blocks(make, dtype=g.dtype,
                                                       meta=np.empty((0,) * 5, g.dtype))
        lazy = dask_backward(x, (4, 4, 4))
        assert isinstance(lazy, da.Array) and calls == []
        lazy.compute(scheduler="sync")
        assert calls


# --------------------------------------------------------------------------
# D, H and W chunks: each block one kernel call on its window, bitwise


SPATIAL_CHUNKS = [
    (2, 4, 5, 4, 3),       # every axis split, uneven chunks
    (3, 2, 6, 10, 9),      # D only
    (3, 4, 1, 1, 1),       # one point per source block: windows span several blocks
    (3, 4, 12, 3, 9),      # H only
]


def assert_chunks(lazy, source, size):
    """N and C chunked as the source; each spatial axis in at most as many non-empty chunks."""
    assert lazy.chunks[:2] == source.chunks[:2]
    for k in range(3):
        assert sum(lazy.chunks[2 + k]) == size[k] and min(lazy.chunks[2 + k]) > 0
        assert len(lazy.chunks[2 + k]) <= len(source.chunks[2 + k])


@pytest.fixture(params=["one call", "runs"])
def calls(request, monkeypatch):
    """How blocks are computed: one call on their window (small blocks), or in runs.

    "runs": every block in runs (``_calls``) and every partly read chunk cut
    into its part (``_part``), as blocks and chunks of ``SPLIT_BYTES`` and
    ``PART_BYTES`` or more are, whatever the size.
    """
    import trilinear_bwd.dask as tbd

    if request.param == "runs":
        monkeypatch.setattr(tbd, "SPLIT_BYTES", 0)
        monkeypatch.setattr(tbd, "PART_BYTES", 0)
    return request.param


@pytest.mark.parametrize("dtype,case", sample_product(6, DTYPES, range(len(CASES))))
def test_spatial_chunks_bitwise_equal_to_one_call(dtype, case, calls):
    spatial, size, ac, scales = CASES[case]
    g = random_grad((3, 4) + spatial, dtype, seed=10 + case)
    expected = tb.upsample_trilinear3d_backward(g, size, align_corners=ac, scales=scales)
    for chunks in SPATIAL_CHUNKS:
        x = da.from_array(g, chunks=chunks)
        lazy = dask_backward(x, size, align_corners=ac, scales=scales)
        got = lazy.compute(scheduler="sync")
        assert got.dtype == g.dtype and got.shape == (3, 4) + size
        assert_chunks(lazy, x, size)
        assert np.array_equal(bits(got), bits(expected)), chunks


@pytest.mark.parametrize("dtype,case", sample_product(6, DTYPES, range(len(CASES))))
def test_forward_chunks_bitwise_equal_to_one_call(dtype, case, calls):
    # The forward of each case: the volume of the backward's input size to
    # its grad_out's size.
    out_size, size, ac, scales = CASES[case]
    x0 = random_grad((3, 4) + size, dtype, seed=20 + case)
    expected = tb.upsample_trilinear3d(x0, out_size, align_corners=ac, scales=scales)
    for chunks in [(3, 4) + size] + SPATIAL_CHUNKS:
        x = da.from_array(x0, chunks=chunks)
        lazy = dask_forward(x, out_size, align_corners=ac, scales=scales)
        got = lazy.compute(scheduler="sync")
        assert got.dtype == x0.dtype and got.shape == (3, 4) + out_size
        assert_chunks(lazy, x, out_size)
        assert np.array_equal(bits(got), bits(expected)), chunks


@pytest.mark.parametrize("layout", ["ndhwc", "strided", "reversed"])
@pytest.mark.parametrize("forward", [False, True])
def test_chunks_of_any_layout_bitwise_equal_to_one_call(layout, forward, calls):
    # A block read where it lies is a view of a chunk in the chunk's own
    # layout; one copied is laid out as its first piece.
    spatial, size, ac, scales = CASES[2]
    shape = (2, 3) + (size if forward else spatial)
    g = in_layout(random_grad(shape, "float32", seed=31), layout)
    if forward:
        expected = tb.upsample_trilinear3d(g, spatial, align_corners=ac, scales=scales)
    else:
        expected = tb.upsample_trilinear3d_backward(g, size, align_corners=ac, scales=scales)
    for chunks in SPATIAL_CHUNKS:
        x = da.from_array(g, chunks=chunks)
        if forward:
            lazy = dask_forward(x, spatial, align_corners=ac, scales=scales)
        else:
            lazy = dask_backward(x, size, align_corners=ac, scales=scales)
        got = lazy.compute(scheduler="sync")
        assert np.array_equal(bits(got), bits(expected)), chunks


@pytest.mark.parametrize("forward", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_windows_hold_every_source_point_their_block_reads(forward, case):
    # From the reference's coefficients, independently of the module's
    # tables: each block's window covers every source point of its terms.
    spatial, size, ac, scales = CASES[case]
    for k in range(3):
        n_in, n_out = size[k], spatial[k]
        coefficients = reference.source_coefficients(n_in, n_out, ac, scales[k], np.float32)
        n_src = n_in if forward else n_out
        for chunks in ((n_src,), (1,) * n_src, (n_src // 2, n_src - n_src // 2)):
            chunks = tuple(c for c in chunks if c)
            terms = _axis_terms.axis_terms(n_in, n_out, ac, scales[k], np.float32, forward)
            axis = _block_windows.WindowAxis(terms, chunks)
            for (t0, t1, s0), extent in zip(axis.windows, axis.extents):
                for j, (x0, x1, _, _) in enumerate(coefficients):
                    if forward and t0 <= j < t1:
                        assert s0 <= x0 and x1 < s0 + extent
                    if not forward and (t0 <= x0 < t1 or t0 <= x1 < t1):
                        assert s0 <= j < s0 + extent


@pytest.mark.parametrize("forward", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_runs_tile_each_block_and_say_where_they_read(seed, forward):
    # Up- and downsampling (whose backward leaves input points reading
    # nothing), random chunks: a block's runs tile its targets in order, each
    # reads something, reads what its targets read, and is marked one_chunk
    # exactly when one source chunk holds all of it.
    rng = np.random.default_rng(seed)
    for _ in range(10):
        n_in, n_out = (int(v) for v in rng.integers(1, 90, 2))
        terms = _axis_terms.axis_terms(n_in, n_out, bool(rng.integers(2)), 0.0, np.float32, forward)
        n_src = n_in if forward else n_out
        cuts = np.unique(rng.integers(1, n_src, int(rng.integers(0, 6)))) if n_src > 1 else []
        chunks = tuple(np.diff([0, *cuts, n_src]).tolist())
        axis = _block_windows.WindowAxis(terms, chunks)
        for (t0, t1, s0), extent, runs in zip(axis.windows, axis.extents, axis.runs):
            assert [r[0] for r in runs] == [t0] + [r[1] for r in runs[:-1]]
            assert runs[-1][1] == t1
            for a, b, r0, r1, one_chunk in runs:
                assert terms.ptr[b] > terms.ptr[a]
                assert (r0, r1) == terms.source_range(a, b)
                assert s0 <= r0 and r1 <= s0 + extent
                first, last = np.searchsorted(axis.src_bounds, [r0, r1 - 1], side="right") - 1
                assert one_chunk == (first == last), (a, b, chunks)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_spatial_chunks_identical_across_schedulers_and_runs(dtype):
    g = random_grad((2, 3, 24, 20, 18), dtype, seed=7)
    x = da.from_array(g, chunks=(1, 2, 7, 6, 5))
    lazy = dask_backward(x, (10, 9, 7))
    first = lazy.compute(scheduler="sync")
    runs = [first, lazy.compute(scheduler="sync")]
    for workers in (1, 2, 4):
        runs.append(lazy.compute(scheduler="threads", num_workers=workers))
    # The graph built again from scratch.
    again = dask_backward(da.from_array(g, chunks=(1, 2, 7, 6, 5)), (10, 9, 7))
    runs.append(again.compute(scheduler="threads", num_workers=3))
    for r in runs[1:]:
        assert np.array_equal(bits(r), bits(first))
    assert np.array_equal(bits(first), bits(tb.upsample_trilinear3d_backward(g, (10, 9, 7))))


def test_spatial_chunks_keep_nan_and_inf_where_the_kernel_does(calls):
    g = random_grad((1, 2, 12, 10, 9), "float32", seed=5)
    g[0, 0, 6, 4, 3] = np.inf      # on a chunk boundary below
    g[0, 1, 2, 7, 1] = np.nan
    g[0, 1, 11, 0, 8] = -np.inf
    expected = tb.upsample_trilinear3d_backward(g, (5, 4, 7))
    got = dask_backward(da.from_array(g, chunks=(1, 1, 6, 4, 4)), (5, 4, 7)).compute(
        scheduler="sync")
    assert np.array_equal(bits(got), bits(expected))


def test_empty_batch_and_empty_chunks(calls):
    g = random_grad((0, 2, 8, 6, 4), "float32")
    for chunks in ((1, 1, 8, 6, 4), (1, 1, 3, 6, 4)):
        got = dask_backward(da.from_array(g, chunks=chunks), (4, 3, 2)).compute(
            scheduler="sync")
        assert got.shape == (0, 2, 4, 3, 2)
        got = dask_forward(da.from_array(g, chunks=chunks), (5, 7, 9)).compute(
            scheduler="sync")
        assert got.shape == (0, 2, 5, 7, 9)
    g = random_grad((1, 2, 8, 6, 4), "float32")
    expected = tb.upsample_trilinear3d_backward(g, (4, 3, 2))
    for d_chunks in ((3, 0, 5), (8, 0)):
        x = da.from_array(g, chunks=(1, 2, 8, 6, 4)).rechunk(((1,), (2,), d_chunks, (6,), (4,)))
        assert 0 in x.chunks[2]
        got = dask_backward(x, (4, 3, 2)).compute(scheduler="sync")
        assert np.array_equal(got, expected)
        got = dask_forward(x, (9, 5, 7)).compute(scheduler="sync")
        assert np.array_equal(got, tb.upsample_trilinear3d(g, (9, 5, 7)))


# --------------------------------------------------------------------------
# Arguments


def test_argument_errors_are_raised_at_graph_construction():
    x = da.zeros((2, 3, 8, 8, 8), dtype="float32", chunks=(1, 3, 8, 8, 8))
    with pytest.raises(tb.NullArgumentError):
        dask_backward(None, (4, 4, 4))
    with pytest.raises(tb.NullArgumentError):
        dask_backward(x, None)
    with pytest.raises(tb.InvalidArgumentError, match="dask.array.Array"):
        dask_backward(np.zeros((2, 3, 8, 8, 8), np.float32), (4, 4, 4))
    with pytest.raises(tb.InvalidArgumentError, match=r"inputSize\[0\] \(N\) = 3"):
        dask_backward(x, (3, 3, 4, 4, 4))
    with pytest.raises(tb.InvalidArgumentError, match=r"inputSize\[1\] \(H\) must be > 0"):
        dask_backward(x, (4, 0, 4))
    with pytest.raises(tb.InvalidArgumentError, match="scalesH"):
        dask_backward(x, (4, 4, 4), scales=(2.0, 3.0, 2.0))
    with pytest.raises(tb.InvalidArgumentError, match="dtype"):
        dask_backward(x.astype("int32"), (4, 4, 4))
    with pytest.raises(tb.InvalidArgumentError, match="5-D"):
        dask_backward(x[0], (4, 4, 4))
    with pytest.raises(tb.InvalidArgumentError, match="num_threads"):
        dask_backward(x, (4, 4, 4), num_threads=0)
    with pytest.raises(tb.InvalidArgumentError, match="alignCorners"):
        dask_backward(x, (4, 4, 4), align_corners="yes")
    unknown = da.Array(x.dask, x.name, ((np.nan, np.nan),) + x.chunks[1:], dtype=x.dtype)
    with pytest.raises(tb.InvalidArgumentError, match="unknown"):
        dask_backward(unknown, (4, 4, 4))
    with pytest.raises(tb.InvalidArgumentError, match=r"outputSize\[0\] \(D\) must be > 0"):
        dask_backward(da.zeros((2, 3, 0, 8, 8), dtype="float32"), (4, 4, 4))
    for err in (tb.NullArgumentError, tb.InvalidArgumentError):
        assert issubclass(err, tb.AclnnError)


def test_forward_argument_errors_are_raised_at_graph_construction():
    x = da.zeros((2, 3, 4, 4, 4), dtype="float32", chunks=(1, 3, 2, 4, 4))
    with pytest.raises(tb.NullArgumentError):
        dask_forward(None, (8, 8, 8))
    with pytest.raises(tb.InvalidArgumentError, match="dask.array.Array"):
        dask_forward(np.zeros((2, 3, 4, 4, 4), np.float32), (8, 8, 8))
    with pytest.raises(tb.InvalidArgumentError, match=r"outputSize\[1\] \(H\) must be > 0"):
        dask_forward(x, (8, 0, 8))
    with pytest.raises(tb.InvalidArgumentError, match="self C must be > 0"):
        dask_forward(da.zeros((2, 0, 4, 4, 4), dtype="float32"), (8, 8, 8))
    with pytest.raises(tb.InvalidArgumentError, match="scalesW"):
        dask_forward(x, (8, 8, 8), scales=(2.0, 2.0, 3.0))
    with pytest.raises(tb.InvalidArgumentError, match="5-D"):
        dask_forward(x[0], (8, 8, 8))
    # output_size from the scales, as F.interpolate's scale_factor.
    assert dask_forward(x, scales=(2.0, 1.5, 2.0)).shape == (2, 3, 8, 6, 8)


def test_size_limits_apply_per_block_not_per_batch():
    # N = 2**21 breaks the one-call limit on a dimension (2**20); in blocks of
    # 2**20 each call is within it, so the graph builds.  Nothing is computed.
    big = da.zeros((2**21, 1, 2, 2, 2), dtype="float32", chunks=(2**20, 1, 2, 2, 2))
    with pytest.raises(tb.InvalidArgumentError, match="2\\*\\*20"):
        tb.upsample_trilinear3d_backward(np.broadcast_to(np.float32(0), big.shape), (1, 1, 1))
    lazy = dask_backward(big, (1, 1, 1))
    assert lazy.shape == (2**21, 1, 1, 1, 1) and lazy.numblocks[0] == 2
    with pytest.raises(tb.InvalidArgumentError, match="2\\*\\*20"):
        dask_backward(big.rechunk((2**21, 1, 2, 2, 2)), (1, 1, 1))


def test_reachable_as_a_lazy_attribute_of_the_package():
    assert tb.dask.upsample_trilinear3d_backward is dask_backward
    assert tb.dask.upsample_trilinear3d is dask_forward


# --------------------------------------------------------------------------
# dask.distributed


@pytest.mark.slow
def test_local_cluster_matches_the_local_schedulers():
    distributed = pytest.importorskip("distributed")

    g = random_grad((4, 2, 16, 12, 10), "float32", seed=11)
    nc = dask_backward(da.from_array(g, chunks=(1, 2, 16, 12, 10)), (8, 6, 5))
    sp = dask_backward(da.from_array(g, chunks=(2, 1, 5, 6, 4)), (8, 6, 5))
    expected_nc = tb.upsample_trilinear3d_backward(g, (8, 6, 5))
    expected_sp = expected_nc      # spatial chunks give the one call's bits too
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, memory_limit="1GiB") as cluster, \
            distributed.Client(cluster) as client:
        with distributed.get_task_stream(client) as stream:
            got_nc, got_sp = client.compute([nc, sp], sync=True)
        again = client.compute(sp, sync=True)
    # Both workers took part: the work really crossed processes.
    assert len({task["worker"] for task in stream.data}) == 2
    assert np.array_equal(bits(got_nc), bits(expected_nc))
    assert np.array_equal(bits(got_sp), bits(expected_sp))
    assert np.array_equal(bits(again), bits(expected_sp))


@pytest.mark.slow
def test_example_runs_small(tmp_path):
    pytest.importorskip("distributed")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "examples", "dask_batch.py")
    if not os.path.exists(script):
        pytest.skip("examples/ is not part of this installation")
    env = dict(os.environ)
    # The example imports the package the tests import, installed or in place.
    package_parent = os.path.dirname(os.path.dirname(tb.__file__))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent,
                                                      env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, script, "--batch", "6", "--channels", "2", "--size", "16",
         "--block", "2", "--memory-limit", "300MiB"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bitwise equal to the in-memory call" in done.stdout
    assert "single process, whole batch in memory" in done.stdout


# --------------------------------------------------------------------------
# Tables: each axis's built once per graph, and only after the contract's checks


def _count_builds(monkeypatch):
    calls = []
    build = _axis_terms.build_terms
    monkeypatch.setattr(_axis_terms, "build_terms", lambda key: calls.append(key) or build(key))
    _table_cache.clear_cache()
    return calls


@pytest.mark.parametrize("forward", [False, True])
def test_each_axis_tables_are_built_once_per_graph(forward, monkeypatch):
    calls = _count_builds(monkeypatch)
    if forward:
        x0 = random_grad((1, 2, 5, 6, 64), "float32", seed=3)
        x = da.from_array(x0, chunks=(1, 2, 2, 3, 4))  # 16 chunks along W
        lazy = dask_forward(x, (9, 11, 150))
        expected = tb.upsample_trilinear3d(x0, (9, 11, 150))
    else:
        x0 = random_grad((1, 2, 9, 11, 150), "float32", seed=3)
        x = da.from_array(x0, chunks=(1, 2, 4, 5, 10))  # 15 chunks along W
        lazy = dask_backward(x, (5, 6, 64))
        expected = tb.upsample_trilinear3d_backward(x0, (1, 2, 5, 6, 64))
    # Graph construction: once per distinct axis, not once per chunk.
    assert len(calls) == len(set(calls)) == 3
    # Computing: the tasks cut their tables from the graph's terms, even
    # in a process whose cache no longer holds them.
    _table_cache.clear_cache()
    for scheduler in ("sync", "threads"):
        got = lazy.compute(scheduler=scheduler)
        assert np.array_equal(bits(got), bits(expected))
    assert len(calls) == 3


def test_contract_is_checked_before_any_table_is_built(monkeypatch):
    calls = _count_builds(monkeypatch)
    refused = [
        # A dimension above 2**20: the source, the target, either operator.
        lambda: dask_backward(da.zeros((1, 1, 1, 1, 2**20 + 1), dtype="float32",
                                       chunks=(1, 1, 1, 1, 2**18)), (1, 1, 5)),
        lambda: dask_backward(da.zeros((1, 1, 1, 1, 5), dtype="float32"), (1, 1, 2**20 + 1)),
        lambda: dask_forward(da.zeros((1, 1, 1, 1, 5), dtype="float32"), (1, 1, 2**21)),
        lambda: dask_forward(da.zeros((1, 1, 2**20 + 1, 1, 1), dtype="float32",
                                      chunks=(1, 1, 2**18, 1, 1)), (4, 1, 1)),
        # A batch chunk above 2**20 (the limits of one kernel call, per block).
        lambda: dask_backward(da.zeros((2**21, 1, 2, 2, 2), dtype="float32",
                                       chunks=(2**21, 1, 2, 2, 2)), (1, 1, 1)),
        lambda: dask_forward(da.zeros((1, 2**21, 2, 2, 2), dtype="float32",
                                      chunks=(1, 2**21, 2, 2, 2)), (3, 3, 3)),
        # Junk arguments.
        lambda: dask_forward(da.zeros((1, 1, 4, 4, 4), dtype="float32"),
                             scales=(float("nan"), 2.0, 2.0)),
        lambda: dask_backward(da.zeros((1, 1, 4, 4, 4), dtype="int16"), (2, 2, 2)),
    ]
    for call in refused:
        with pytest.raises(tb.InvalidArgumentError) as info:
            call()
        assert info.value.status == 161002
    assert calls == []


# --------------------------------------------------------------------------
# Chunks of another dtype than the array's: one rule wherever they fall


@pytest.mark.parametrize("declared, actual", [("float32", "float64"), ("float64", "float32"),
                                              ("float32", "bfloat16")])
@pytest.mark.parametrize("forward", [False, True])
@pytest.mark.parametrize("bad", [0, 1, 2, 3])  # window start, middles, end
def test_chunks_of_another_dtype_are_refused_wherever_they_fall(declared, actual, forward,
                                                                bad):
    shape = (1, 2, 4, 3, 12)
    g = random_grad(shape, declared, seed=1)
    x = da.from_array(g, chunks=(1, 2, 4, 3, 3))

    def cast_one(block, block_info=None):
        if block_info[0]["chunk-location"][4] == bad:
            return block.astype(np_dtype(actual))
        return block

    x = x.map_blocks(cast_one, dtype=g.dtype, meta=np.empty((0,) * 5, g.dtype))
    lazy = dask_forward(x, (7, 5, 25)) if forward else dask_backward(x, (2, 2, 5))
    with pytest.raises(tb.InvalidArgumentError) as info:
        lazy.compute(scheduler="sync")
    message = str(info.value)
    assert info.value.status == 161002
    assert f"dtype {declared}" in message and f"got {actual}" in message
    assert f", {bad})" in message  # the chunk's position


# --------------------------------------------------------------------------
# The class: every valid call, every chunking, both operators, bitwise


def _partition(draw, n):
    """A chunking of an axis of ``n`` points, drawn (empty chunks included)."""
    from hypothesis import strategies as st

    cuts = draw(st.lists(st.integers(0, n), max_size=4))
    bounds = sorted({0, n, *cuts})
    chunks = tuple(b - a for a, b in zip(bounds[:-1], bounds[1:])) or (n,)
    if draw(st.booleans()) and n:
        chunks = chunks + (0,)
    return chunks


def _dask_problem(draw):
    """One valid call of either operator, with a chunking of its source, drawn.

    Sizes from 1 to 9 with up- and downsampling both ways, given scales
    (including ones that leave input points nobody reads: a backward's
    result block may read nothing at all), both coordinate modes.
    """
    from hypothesis import strategies as st

    forward = draw(st.booleans())
    n_in = tuple(draw(st.integers(1, 9)) for _ in range(3))
    n_out = tuple(draw(st.integers(1, 9)) for _ in range(3))
    align = draw(st.booleans())
    # A given scale must agree with the sizes (floor(in * scale) == out):
    # anywhere in [out / in, (out + 1) / in), where its far end leaves the
    # most input points unread when downsampling (drawn often, as draws of
    # a float rarely come near it).
    given = st.one_of(st.just(0.0), st.just(0.999), st.floats(0.0, 1.0, exclude_max=True))
    scales = tuple(draw(given.map(lambda u, i=i, o=o: u and (o + u) / i))
                   for i, o in zip(n_in, n_out))
    source = (draw(st.integers(0, 2)), draw(st.integers(1, 2))) + (n_in if forward else n_out)
    chunks = tuple(draw(st.sampled_from([(n,), (1,) * n])) or (0,) for n in source[:2])
    chunks += tuple(_partition(draw, n) for n in source[2:])
    return forward, n_in, n_out, align, scales, source, chunks


def _check_dask_problem(problem, dtype):
    forward, n_in, n_out, align, scales, source, chunks = problem
    values = random_grad(source, dtype, seed=sum(source))
    try:
        if forward:
            expected = tb.upsample_trilinear3d(values, n_out, align_corners=align,
                                               scales=scales)
        else:
            expected = tb.upsample_trilinear3d_backward(values, n_in, output_size=n_out,
                                                        align_corners=align, scales=scales)
    except tb.AclnnError:
        return  # not a valid call: the argument tests cover its refusal
    x = da.from_array(values, chunks=tuple(
        (sum(c),) if k < 2 else c for k, c in enumerate(chunks))).rechunk(chunks)
    if forward:
        lazy = dask_forward(x, n_out, align_corners=align, scales=scales)
    else:
        lazy = dask_backward(x, n_in, output_size=n_out, align_corners=align, scales=scales)
    got = lazy.compute(scheduler="sync")
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.array_equal(bits(got), bits(expected)), problem


# The reported reproducers: result blocks of the backward that
# no target point reads, with downsampling at a given scale.
BLOCKS_NOBODY_READS = [
    (False, (100, 1, 1), (3, 1, 1), False, (0.0399, 0.0, 0.0), (1, 1, 3, 1, 1),
     ((1,), (1,), (1, 1, 1), (1,), (1,))),
    (False, (7, 1, 1), (5, 1, 1), False, (0.8196, 0.0, 0.0), (1, 1, 5, 1, 1),
     ((1,), (1,), (4, 1), (1,), (1,))),
]


@pytest.mark.parametrize("problem", BLOCKS_NOBODY_READS)
def test_result_blocks_that_read_nothing_are_zeros_as_in_memory(problem, calls):
    _check_dask_problem(problem, "float32")


def _chunkings(n):
    """Chunkings of an axis of ``n`` points: every one in the full run; by default
    one point a chunk and every single cut (each result block's ends are among
    theirs)."""
    if FULL:
        cuts = itertools.product((False, True), repeat=n - 1)
    else:
        cuts = [(True,) * (n - 1)] + [tuple(k == c for k in range(n - 1))
                                      for c in range(n - 1)]
    for cut in cuts:
        bounds = [0] + [k + 1 for k, c in enumerate(cut) if c] + [n]
        yield tuple(b - a for a, b in zip(bounds[:-1], bounds[1:]))


@pytest.mark.parametrize("forward", [False, True])
def test_every_small_axis_and_chunking_bitwise_equal_to_one_call(forward):
    """Exhaustive in the small (the class, one axis): sizes 1-9 each way,
    both modes, scales not given, at the low and the high end of their range,
    and the chunkings of :func:`_chunkings`."""
    for n_in, n_out, align in itertools.product(range(1, 10), range(1, 10), (False, True)):
        # align_corners uses no scale: one case of it.
        for u in (0.0,) if align else (0.0, 1e-9, 0.999):
            scales = (u and (n_out + u) / n_in, 0.0, 0.0)
            source = (1, 2, n_in if forward else n_out, 1, 1)
            for chunks in _chunkings(source[2]):
                _check_dask_problem((forward, (n_in, 1, 1), (n_out, 1, 1), align, scales,
                                     source, ((1,), (2,), chunks, (1,), (1,))), "float32")


def test_every_valid_call_and_chunking_bitwise_equal_to_one_call(calls):
    """The class: any valid call of either operator, any chunking, bitwise."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    from conftest import examples

    @hypothesis.settings(max_examples=examples(200), deadline=None,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(st.data(), st.sampled_from(DTYPES))
    def check(data, dtype):
        _check_dask_problem(data.draw(st.composite(_dask_problem)()), dtype)

    check()
