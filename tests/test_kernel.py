"""The kernels against the float64 reference, across shapes, dtypes, layouts and threads."""

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    sample_product,
    DTYPES,
    IN_LAYOUTS,
    OUT_LAYOUTS,
    assert_matches_reference,
    in_layout,
    np_dtype,
    out_array,
    random_grad,
)

import trilinear_bwd as tb
from trilinear_bwd._core import _dispatch
from trilinear_bwd._core._arrays import data_address
from trilinear_bwd._core._plan import make_plan, ring_rows
from trilinear_bwd._core._axis_table import axis_table
from trilinear_bwd._core._operator import BACKWARD, check

# (N, C, input DHW, output DHW): up, down, identity and size-1 axes, mixed,
# and W lengths that leave tails after the 8-point blocks of the W gather.
SHAPES = [
    (2, 3, (4, 5, 6), (7, 9, 11)),
    (1, 2, (5, 4, 3), (5, 8, 2)),
    (1, 1, (1, 1, 1), (3, 4, 5)),
    (2, 2, (3, 3, 3), (1, 1, 1)),
    (1, 3, (9, 8, 7), (4, 3, 5)),
    (1, 1, (6, 6, 6), (6, 6, 6)),
    (2, 5, (3, 4, 5), (6, 8, 10)),
    (1, 2, (2, 3, 17), (5, 7, 40)),
    (1, 2, (3, 2, 41), (2, 5, 19)),
]


def run(grad_out, input_size, align_corners=False, scales=(0.0, 0.0, 0.0), out_layout="ncdhw",
        num_threads=None, fill=0xFF):
    """Run the two-phase API; the workspace starts full of ``fill`` bytes."""
    grad_input = out_array(input_size, grad_out.dtype, out_layout)
    size, executor = tb.get_workspace_size(
        grad_out, grad_out.shape[2:], input_size, align_corners, *scales, grad_input,
        num_threads=num_threads,
    )
    workspace = tb.alloc_workspace(size)
    workspace[...] = fill
    tb.execute(workspace, size, executor)
    return grad_input


def bits(arr):
    """The bytes of ``arr`` in logical (C) order, for bitwise comparison."""
    return np.ascontiguousarray(arr).view(np.uint8)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("align_corners", [False, True])
def test_matches_reference(dtype, shape, align_corners):
    n, c, ins, outs = shape
    g = random_grad((n, c) + outs, dtype)
    result = run(g, (n, c) + ins, align_corners)
    assert_matches_reference(result, g, (n, c) + ins, align_corners)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "ins, outs, scales",
    [
        ((4, 5, 6), (8, 10, 12), (2.0, 2.0, 2.0)),
        ((4, 5, 6), (10, 7, 15), (2.5, 1.5, 2.5)),
        ((5, 6, 7), (5, 13, 4), (1.02, 2.2, 0.6)),
        ((7, 6, 5), (3, 3, 3), (0.5, 0.5, 0.7)),
        ((4, 4, 4), (9, 9, 9), (0.0, 2.3, 0.0)),
    ],
    ids=str,
)
def test_explicit_scales(dtype, ins, outs, scales):
    g = random_grad((2, 3) + outs, dtype, seed=1)
    result = run(g, (2, 3) + ins, False, scales)
    assert_matches_reference(result, g, (2, 3) + ins, False, scales)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", IN_LAYOUTS)
@pytest.mark.parametrize("out_layout", OUT_LAYOUTS)
def test_every_layout_gives_the_same_bits(dtype, layout, out_layout):
    """Every layout runs the same arithmetic in the same order, so the bits agree."""
    n, c, ins, outs = 2, 3, (3, 5, 4), (7, 9, 11)
    g = random_grad((n, c) + outs, dtype, seed=2)
    expected = run(g, (n, c) + ins)
    assert_matches_reference(expected, g, (n, c) + ins)
    got = run(in_layout(g, layout), (n, c) + ins, out_layout=out_layout)
    np.testing.assert_array_equal(bits(got), bits(expected))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("channels", [4, 8, 12, 16, 24, 32, 64])
@pytest.mark.parametrize(
    "ins, outs",
    [((3, 6, 5), (7, 13, 17)), ((9, 7, 13), (4, 3, 6)), ((2, 3, 2), (9, 17, 11))],
    ids=str,
)
def test_channel_counts_of_the_vector_w_pass(dtype, channels, ins, outs):
    """Channels-last rows whose channels fill whole vectors (and the counts
    with a copy of their own: 8, 16, 32, 64) give the channels-first bits."""
    g = random_grad((1, channels) + outs, dtype, seed=channels)
    expected = run(g, (1, channels) + ins)
    got = run(in_layout(g, "ndhwc"), (1, channels) + ins, out_layout="ndhwc")
    np.testing.assert_array_equal(bits(got), bits(expected))
    assert_matches_reference(got, g, (1, channels) + ins)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", IN_LAYOUTS)
@pytest.mark.parametrize("out_layout", OUT_LAYOUTS)
@pytest.mark.parametrize("shape", [SHAPES[0], (1, 1, (17, 9, 8), (33, 20, 15))], ids=str)
def test_bitwise_identical_for_every_thread_count(dtype, layout, out_layout, shape):
    n, c, ins, outs = shape
    g = in_layout(random_grad((n, c) + outs, dtype, seed=3), layout)
    one = run(g, (n, c) + ins, num_threads=1, fill=0x00, out_layout=out_layout)
    for threads in (2, 3, 4):
        got = run(g, (n, c) + ins, num_threads=threads, fill=0xFF, out_layout=out_layout)
        np.testing.assert_array_equal(bits(got), bits(one), err_msg=f"{threads} threads")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fill", [0x00, 0xFF, 0x7F])
def test_result_does_not_depend_on_workspace_contents(dtype, fill):
    g = random_grad((1, 2, 9, 10, 11), dtype, seed=4)
    expected = run(g, (1, 2, 4, 5, 6), fill=0x00)
    got = run(g, (1, 2, 4, 5, 6), fill=fill)
    np.testing.assert_array_equal(bits(got), bits(expected))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", IN_LAYOUTS)
@pytest.mark.parametrize("out_layout", OUT_LAYOUTS)
def test_workspace_size_is_what_the_kernel_uses(dtype, layout, out_layout):
    """Exactly ``size`` bytes suffice; bytes past them are never touched."""
    g = in_layout(random_grad((2, 3, 7, 6, 9), dtype, seed=12), layout)
    expected = run(g, (2, 3, 3, 4, 5))
    out = out_array((2, 3, 3, 4, 5), g.dtype, out_layout)
    size, executor = tb.get_workspace_size(g, (7, 6, 9), (2, 3, 3, 4, 5), False, 0, 0, 0, out,
                                           num_threads=3)
    raw = np.full(size + 4096, 0x5A, dtype=np.uint8)
    tb.execute(raw[:size], size, executor)
    assert (raw[size:] == 0x5A).all()
    np.testing.assert_array_equal(bits(out), bits(expected))


def test_read_only_memory_mapped_grad_out(tmp_path):
    g = random_grad((1, 2, 8, 6, 10), "float32", seed=13)
    np.save(tmp_path / "g.npy", g)
    mapped = np.load(tmp_path / "g.npy", mmap_mode="r")
    assert not mapped.flags.writeable
    out = tb.upsample_trilinear3d_backward(mapped, (4, 3, 5))
    np.testing.assert_array_equal(out, tb.upsample_trilinear3d_backward(g, (4, 3, 5)))


def test_unaligned_workspace_is_used_in_place():
    g = random_grad((2, 2, 8, 8, 8), "float32")
    expected = tb.upsample_trilinear3d_backward(g, (2, 2, 4, 4, 4))
    out = np.empty_like(expected)
    size, executor = tb.get_workspace_size(g, (8, 8, 8), (2, 2, 4, 4, 4), False, 0, 0, 0, out)
    raw = np.full(size + 3, 0xFF, dtype=np.uint8)
    tb.execute(raw[3:], size, executor)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[4], SHAPES[7], (2, 16, (8, 8, 8), (16, 16, 16))],
                         ids=str)
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
def test_kernel_variants_are_bitwise_identical(dtype, shape, layout):
    """The baseline, AVX2 and AVX-512 builds round identically (no FMA, same order)."""
    variants = _dispatch.available_variants()
    if len(variants) < 2:
        pytest.skip(f"only {variants} built or runnable here")
    n, c, ins, outs = shape
    g = in_layout(random_grad((n, c) + outs, dtype, seed=5), layout)
    results = [run_variant(name, g, (n, c) + ins, layout) for name in variants]
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


def run_variant(name, g, input_size, out_layout, align_corners=False, n_threads=2,
                stream=False):
    """grad_input's bytes computed by kernel variant ``name`` (workspace full of 0xFF)."""
    from trilinear_bwd._core import _plan

    out = out_array(input_size, g.dtype, out_layout)
    rule = _plan.streamed
    # Stream every row shape and dtype, as large outputs may be: each
    # streaming path of the kernel, tails included, must give the same bits.
    _plan.streamed = (lambda *a: True) if stream else (lambda *a: False)
    try:
        plan = make_plan(check(BACKWARD, g, out, g.shape[2:], input_size, align_corners,
                               (0, 0, 0)), n_threads)
    finally:
        _plan.streamed = rule
    row = plan.kernel.target_row
    unit_rows = row[0] == 1 and row[3] == 1
    assert plan.kernel.stream == (stream and unit_rows)
    ws = tb.alloc_workspace(plan.workspace_size)
    ws[...] = 0xFF
    _dispatch.kernel_module(name).run(
        plan.kernel, data_address(g), data_address(out), data_address(ws) if ws.size else 0, n_threads)
    return bits(out)


# Row lengths around every tail of 4-, 8- and 16-lane vectors and of the W
# gather's 8- and 16-point blocks (3x, whose inner blocks read 3 apart,
# among them); channel counts that fill whole vectors of each width, part of
# one, or none.
W_TAIL_SHAPES = [
    (1, 2, (3, 4, w_in), (5, 3, w_out))
    for w_in, w_out in [(1, 1), (3, 7), (5, 15), (8, 16), (9, 17), (13, 31), (16, 33),
                        (17, 47), (33, 65), (40, 23), (24, 71), (5, 41), (6, 61), (21, 63),
                        (35, 105), (16, 60), (10, 37)]
]
TAIL_SHAPES = W_TAIL_SHAPES + [
    (1, c, (3, 5, 4), (4, 9, 7)) for c in (1, 3, 4, 8, 12, 16, 17, 24, 32, 40, 64)
] + [
    # More rows than one W pass call takes where rows are buffered or streamed.
    (1, 3, (2, 19, 21), (3, 23, 50)),
]


def test_tail_shapes_reach_every_w_read_path():
    """TAIL_SHAPES' W tables use every way _w_gather.h reads a block (gather,
    windows of 8, 16 and 32, a window shared by a whole block, a block read
    3 apart, and in whole blocks windows of 32 whose 8 elements lie within
    24, which AVX2 reads from three windows, and beyond, which it gathers),
    with their term set-up kept across rows (up to 8 terms) and redone per
    row (more)."""
    from trilinear_bwd._core import _plan
    from trilinear_bwd._core._constants import GATHER, WINDOW8, WINDOW16, WINDOW32
    from trilinear_bwd._core._constants import W_STRIDE3, W_STRIDE3_WIDTH

    modes, shared, stride3, widths = set(), False, False, set()
    within24, beyond24 = set(), set()
    for _, _, ins, outs in TAIL_SHAPES:
        for align_corners in (False, True):
            t = axis_table(ins[2], outs[2], align_corners, 0.0, np.float32, sentinel=outs[2])
            modes |= set(np.unique(t.mode).tolist())
            whole = ins[2] // 8
            highest = t.padded_rel.reshape(-1, t.width, 8).max(axis=2)[:whole]
            w32 = highest[(t.mode.reshape(-1, t.width) == WINDOW32)[:whole]]
            hoisted = t.width <= 8
            within24 |= {hoisted} if (w32 < 24).any() else set()
            beyond24 |= {hoisted} if (w32 >= 24).any() else set()
            shared |= bool((t.block_window >= 0).any())
            stride3 |= bool((t.block_window == W_STRIDE3).any()) and t.width == W_STRIDE3_WIDTH
            widths.add(t.width)
    assert modes == {GATHER, WINDOW8, WINDOW16, WINDOW32}
    assert shared and stride3
    assert within24 == beyond24 == {True, False}
    assert min(widths) <= 8 < max(widths)
    # And the rows: more than one W call per plane, buffered and streamed.
    assert max(ins[1] for _, _, ins, _ in TAIL_SHAPES) > max(_plan.W_ROWS_BUFFERED,
                                                             _plan.W_ROWS_STREAMED)


@pytest.mark.parametrize("dtype,in_lay,align_corners",
                         sample_product(10, DTYPES, IN_LAYOUTS, [False, True]))
def test_kernel_variants_are_bitwise_identical_on_tails_layouts_and_threads(
        dtype, in_lay, align_corners):
    """Every variant gives every other's bits on row lengths and channel counts
    that leave partial vectors, on every grad_out layout, with ordinary and
    streaming stores, for 1 to 3 threads; and the result is right."""
    variants = _dispatch.available_variants()
    if len(variants) < 2:
        pytest.skip(f"only {variants} built or runnable here")
    for k, (n, c, ins, outs) in enumerate(TAIL_SHAPES):
        g = in_layout(random_grad((n, c) + outs, dtype, seed=k), in_lay)
        size = (n, c) + ins
        out_lay = OUT_LAYOUTS[k % 2]
        expected = run_variant("baseline", g, size, out_lay, align_corners, 1)
        for name in variants:
            for n_threads, stream in ((1, False), (2, True), (3, False)):
                got = run_variant(name, g, size, out_lay, align_corners, n_threads, stream)
                np.testing.assert_array_equal(got, expected,
                                              err_msg=f"{name} {size} {n_threads}t")
        result = expected.view(g.dtype).reshape(
            np.ascontiguousarray(out_array(size, g.dtype, out_lay)).shape)
        assert_matches_reference(result, g, size, align_corners)


@pytest.mark.parametrize("dtype,in_lay", sample_product(6, DTYPES, IN_LAYOUTS))
def test_variants_and_layouts_agree_on_non_finite_and_overflowing_values(dtype, in_lay):
    """NaN (with payloads), infinities, the largest finite values (whose sums
    overflow when rounded to the storage type) and values near the smallest
    subnormals: every variant, grad_out layout, grad_input layout and thread
    count gives the same bits as the baseline on contiguous arrays, also where
    a 16-bit result is rounded in registers by a vector W pass and element by
    element by the scalar one -- except the sign and payload of NaN results,
    which follow the operand order each compiled loop happens to use
    (docs/numerics.md): there they agree that the result is NaN."""
    dt = np_dtype(dtype)
    tiny = float(np.finfo(np.float32 if dtype == "bfloat16" else dt).tiny)
    big = 3.3e38 if dtype == "bfloat16" else float(np.finfo(dt).max)
    rng = np.random.default_rng(21)
    seen_nan = seen_inf = False
    for k, (n, c, ins, outs) in enumerate(W_TAIL_SHAPES + TAIL_SHAPES[-1:]):
        g = random_grad((n, c) + outs, dtype, seed=k).astype(np.float64)
        pick = rng.random(g.shape)
        g[pick < 0.02] = np.nan
        g[(pick >= 0.02) & (pick < 0.03)] = np.inf
        g[(pick >= 0.03) & (pick < 0.04)] = -np.inf
        huge = (pick >= 0.04) & (pick < 0.2)
        g[huge] = big * np.sign(g[huge])
        g[(pick >= 0.2) & (pick < 0.3)] *= tiny
        g = g.astype(dt)
        if dt.itemsize == 2:  # NaN payloads other than the default quiet NaN
            g.view(np.uint16)[pick < 0.01] |= 0x0015
        size = (n, c) + ins
        expected = run_variant("baseline", g, size, "ncdhw", False, 1).view(dt)
        nan = np.isnan(expected.astype(np.float64))
        assert not nan.all()
        seen_nan |= bool(nan.any())
        seen_inf |= bool(np.isinf(expected.astype(np.float64)).any())
        src = in_layout(g, in_lay)
        for name in _dispatch.available_variants():
            for n_threads, stream in ((1, False), (2, True), (3, False)):
                out_lay = OUT_LAYOUTS[(k + n_threads) % 2]
                got = run_variant(name, src, size, out_lay, False, n_threads, stream)
                got = got.view(dt).reshape(expected.shape)
                where = f"{name} {size} {out_lay} {n_threads}t {stream}"
                np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), nan,
                                              err_msg=where)
                np.testing.assert_array_equal(bits(got[~nan]), bits(expected[~nan]),
                                              err_msg=where)
    assert seen_nan and seen_inf


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("channels", [3, 16, 24])
def test_large_output_streams_and_matches(dtype, channels, monkeypatch):
    """grad_input above the streaming threshold goes through non-temporal stores
    (written by the channels-first gather or the channels-last W pass, or
    copied row by row) and still matches, bit for bit, the ordinary stores."""
    from trilinear_bwd._core import _plan

    g = random_grad((1, channels, 5, 6, 7), dtype, seed=6)
    for layout in OUT_LAYOUTS:
        src = in_layout(g, layout)
        expected = run(src, (1, channels, 9, 11, 13), out_layout=layout)
        monkeypatch.setattr(_plan, "streamed", lambda *a: True)
        _plan.clear_plans()
        out = out_array((1, channels, 9, 11, 13), g.dtype, layout)
        size, ex = tb.get_workspace_size(src, (5, 6, 7), (1, channels, 9, 11, 13), False,
                                         0, 0, 0, out)
        assert ex._runner.plan.kernel.stream
        tb.execute(tb.alloc_workspace(size), size, ex)
        monkeypatch.undo()
        _plan.clear_plans()
        np.testing.assert_array_equal(bits(out), bits(expected))
        assert_matches_reference(out, g, (1, channels, 9, 11, 13))


def test_streaming_only_where_it_wins():
    """Large float32/float64 targets of whole 32-byte rows stream; others do not."""
    from trilinear_bwd._core import _plan

    big = _plan.STREAM_BYTES
    assert _plan.streamed(big, 256, 4) and _plan.streamed(big, 288, 8)
    assert not _plan.streamed(big - 1, 256, 4)          # small: stays in cache
    assert not _plan.streamed(big, 268, 4)              # 67 floats: a partial tail
    assert not _plan.streamed(big, 272, 4)              # 68 floats: likewise
    assert not _plan.streamed(big, 256, 2)              # 16-bit rows: never
    g = random_grad((1, 2, 5, 6, 7), "float32", seed=1)
    for w, expected in ((64, True), (68, False)):
        out = np.empty((1, 2, 4, 4, w), np.float32)
        args = check(BACKWARD, g, out, (5, 6, 7), out.shape, False, (0, 0, 0))
        plan = make_plan(args, 1)
        assert not plan.kernel.stream                    # 64 KiB: far below the threshold
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_plan, "STREAM_BYTES", 0)
            assert make_plan(args, 1).kernel.stream == expected


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("scale", [0.0, 0.3, 1.7, 4.0])
def test_ring_holds_every_row_the_h_pass_reads(align_corners, scale):
    """Replay the channels-last schedule of _kernels.pxi: D-summed rows go to
    slot ``y % ring`` when first needed; every H term must find its row."""
    sizes = list(range(1, 13)) + [17, 40, 64, 97]
    for n_in in sizes:
        for n_out in sizes:
            t = axis_table(n_in, n_out, align_corners, scale, np.float32)
            ptr, src = t.ptr, t.src
            ring = ring_rows(ptr, src)
            assert 1 <= ring <= n_out
            slot, done = {}, -1
            for r in range(n_in):
                if ptr[r + 1] > ptr[r]:
                    first = max(done + 1, src[ptr[r]])
                    done = max(done, src[ptr[r + 1] - 1])
                    for y in range(first, done + 1):
                        slot[y % ring] = y
                for y in src[ptr[r]:ptr[r + 1]]:
                    assert slot[y % ring] == y, (n_in, n_out, r, y, ring)


def test_cann_worked_example():
    g = np.arange(1, 33, dtype=np.float32).reshape(2, 2, 2, 2, 2)
    out = tb.upsample_trilinear3d_backward(g, (2, 2, 1, 1, 1))
    np.testing.assert_array_equal(out.ravel(), [36, 100, 164, 228])


@pytest.mark.parametrize("n, c", [(0, 3), (2, 0), (0, 0)])
def test_empty_batch(n, c):
    g = np.zeros((n, c, 4, 4, 4), dtype=np.float32)
    size, executor = tb.get_workspace_size(g, (4, 4, 4), (n, c, 2, 2, 2), False, 0, 0, 0,
                                           np.zeros((n, c, 2, 2, 2), np.float32))
    assert size == 0
    tb.execute(None, 0, executor)
    assert tb.upsample_trilinear3d_backward(g, (2, 2, 2)).shape == (n, c, 2, 2, 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_propagate_through_zero_weights(dtype):
    """A zero weight times Inf is NaN (PyTorch does not skip zero weights)."""
    g = np.zeros((1, 1, 1, 1, 4), dtype=np_dtype(dtype))
    g[..., 1] = np.inf
    out = tb.upsample_trilinear3d_backward(g, (1, 1, 1, 1, 4))
    # In == out is the identity (1 * g + 0 * g): the Inf becomes NaN in place.
    assert np.isnan(out.astype(np.float64)[..., 1]).all()
    assert (out.astype(np.float64)[..., [0, 2, 3]] == 0).all()
    g = np.zeros((1, 1, 1, 1, 8), dtype=np_dtype(dtype))
    g[..., 2] = np.nan
    out = tb.upsample_trilinear3d_backward(g, (1, 1, 1, 1, 4)).astype(np.float64)
    assert np.isnan(out[..., :2]).all() and (out[..., 2:] == 0).all()


def test_one_call_allocates_channels_last_for_channels_last_input():
    g = in_layout(random_grad((2, 4, 6, 6, 6), "float32"), "ndhwc")
    out = tb.upsample_trilinear3d_backward(g, (3, 3, 3))
    assert out.shape == (2, 4, 3, 3, 3)
    assert out.strides[1] == out.itemsize  # C innermost
    assert_matches_reference(out, g, (2, 4, 3, 3, 3))


def test_one_call_writes_into_out():
    g = random_grad((1, 2, 6, 6, 6), "float64")
    out = np.full((1, 2, 3, 3, 3), np.nan)
    assert tb.upsample_trilinear3d_backward(g, (1, 2, 3, 3, 3), out=out) is out
    assert_matches_reference(out, g, (1, 2, 3, 3, 3))


@pytest.mark.parametrize("planes", [3, 4])
def test_kernel_plan_refuses_more_planes_per_item_than_it_holds(planes, monkeypatch):
    """A plan asking an item for planes the kernel has no room for is a
    plan/kernel mismatch, refused when the KernelPlan is built."""
    from trilinear_bwd._core import _plan

    g = in_layout(random_grad((1, 4, 6, 5, 4), "float32"), "ndhwc")
    out = out_array((1, 4, 16, 3, 2), g.dtype, "ndhwc")
    call = check(BACKWARD, g, out, (6, 5, 4), (1, 4, 16, 3, 2), False, (0, 0, 0))
    assert make_plan(call, 1).kernel.planes_per_item == 2
    monkeypatch.setattr(_plan, "CHANNELS_LAST_PLANES_PER_ITEM", planes)
    with pytest.raises(ValueError, match=f"planes_per_item must be 1..2, got {planes}"):
        make_plan(call, 1)


# Channels-last shapes on both sides of the whole-plane rule: channel counts
# with and without a copy of the W pass of their own (_w_channels_t.h), odd
# and tailed ones, up- and downsampling, size-1 and unequal axes.
WHOLE_PLANE_SHAPES = [
    (2, 32, (3, 3, 3), (6, 6, 6)),
    (1, 3, (4, 5, 6), (7, 9, 11)),
    (2, 8, (5, 4, 3), (2, 8, 5)),
    (1, 5, (1, 1, 1), (3, 4, 5)),
    (1, 16, (6, 6, 6), (6, 6, 6)),
    (1, 33, (3, 2, 4), (5, 7, 9)),
    (1, 64, (2, 3, 2), (4, 6, 4)),
]


def _run_mode(variant, op, source, target_shape, out_layout, whole, n_threads, stream,
              align_corners):
    """The target's bytes computed by ``variant`` with whole channels-last planes on or off."""
    from trilinear_bwd._core import _operator, _plan

    out = out_array(target_shape, source.dtype, out_layout)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_plan, "WHOLE_PLANE_BYTES", 2**62 if whole else -1)
        mp.setattr(_plan, "streamed", (lambda *a: True) if stream else (lambda *a: False))
        if op == "forward":
            call = check(_operator.FORWARD, source, out, target_shape[2:], None,
                         align_corners, (0, 0, 0))
        else:
            call = check(BACKWARD, source, out, source.shape[2:], target_shape, align_corners,
                         (0, 0, 0))
        plan = make_plan(call, n_threads)
    assert plan.channels_last and plan.kernel.whole_planes == whole
    ws = tb.alloc_workspace(plan.workspace_size)
    ws[...] = 0xFF
    _dispatch.kernel_module(variant).run(plan.kernel, data_address(source), data_address(out),
                                         data_address(ws), min(n_threads, plan.n_slots))
    return out


@pytest.mark.parametrize("dtype,op,shape",
                         sample_product(14, DTYPES, ["backward", "forward"], WHOLE_PLANE_SHAPES))
def test_whole_channels_last_planes_give_the_rings_bits(dtype, op, shape):
    """A channels-last plane summed over D, H and W whole (small planes) and
    the same plane through the ring of D sums row by row give the same bits
    in every variant, for every target layout, thread count and store kind,
    and match the float64 reference: the two schedules take each element's
    terms in the same order."""
    n, c, small, large = shape
    if op == "forward":
        src_shape, target_shape = (n, c) + small, (n, c) + large
    else:
        src_shape, target_shape = (n, c) + large, (n, c) + small
    values = random_grad(src_shape, dtype, seed=11)
    source = in_layout(values, "ndhwc")
    for variant in _dispatch.available_variants():
        for out_layout in OUT_LAYOUTS:
            for n_threads, stream in ((1, False), (2, False), (2, True)):
                args = (variant, op, source, target_shape, out_layout)
                ring = _run_mode(*args, False, n_threads, stream, False)
                whole = _run_mode(*args, True, n_threads, stream, False)
                np.testing.assert_array_equal(
                    bits(whole), bits(ring),
                    err_msg=f"{variant} ->{out_layout} {n_threads}t {stream}")
    if op == "backward":
        assert_matches_reference(whole, values, target_shape)
    else:
        from test_forward import assert_within, exact, forward_bound

        assert_within(whole, exact(values, target_shape[2:]),
                      forward_bound(values, target_shape[2:]))


def test_whole_planes_only_where_they_are_small():
    """The default rule: tiny channels-last planes whole, large ones through
    the ring, channels-first planes never (they have their own schedule)."""
    from trilinear_bwd._core import _plan

    def plan(shape, layout, size):
        g = in_layout(random_grad(shape, "float32"), layout)
        out = out_array(size, g.dtype, layout)
        return make_plan(check(BACKWARD, g, out, shape[2:], size, False, (0, 0, 0)), 2).kernel

    assert plan((2, 32, 6, 6, 6), "ndhwc", (2, 32, 3, 3, 3)).whole_planes
    assert not plan((2, 32, 64, 64, 64), "ndhwc", (2, 32, 32, 32, 32)).whole_planes
    assert not plan((2, 32, 6, 6, 6), "ncdhw", (2, 32, 3, 3, 3)).whole_planes
    # A channels-last source whose planes are not one run (padded rows) keeps the ring.
    g = random_grad((2, 32, 6, 6, 6), "float32")
    padded = np.zeros((2, 6, 6, 7, 32), np.float32)[:, :, :, :6].transpose(0, 4, 1, 2, 3)
    padded[...] = g
    out = out_array((2, 32, 3, 3, 3), g.dtype, "ndhwc")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_plan, "WHOLE_PLANE_BYTES", 2**62)
        k = make_plan(check(BACKWARD, padded, out, (6, 6, 6), out.shape, False, (0, 0, 0)), 2)
    assert k.channels_last and not k.kernel.whole_planes
    # Just over the limit: the scratch of the plane is what the rule counts.
    k = plan((1, 16, 24, 24, 24), "ndhwc", (1, 16, 12, 12, 12))
    assert k.whole_planes
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_plan, "WHOLE_PLANE_BYTES", 24 * 16 * 24 * 4)
        assert not plan((1, 16, 24, 24, 24), "ndhwc", (1, 16, 12, 12, 12)).whole_planes


def _c_structs(text):
    """{C typedef name: [field names]} of the plain structs in a C header."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return {name: re.findall(r"(\w+)\s*;", body)
            for body, name in re.findall(r"typedef struct \{(.*?)\}\s*(\w+);", text, flags=re.S)}


def _cython_structs(text):
    """{C name: [field names]} of ``ctypedef struct Name "c_name":`` blocks in a .pxd."""
    structs = {}
    for cname, body in re.findall(r'ctypedef struct \w+ "(\w+)":\n((?:[ \t]+\S.*\n)+)', text):
        structs[cname] = [line.split()[-1] for line in body.splitlines()
                          if line.strip() and not line.strip().startswith("#")]
    return structs


def test_the_plan_structs_are_declared_once_in_c_and_every_field_is_filled():
    """_kernel_plan.h declares the plan's structs, which the C helpers read;
    _kernel_plan.pxd reads the same fields in the same order, and KernelPlan
    fills every field of tb_problem (a field it left out would be zero)."""
    package = Path(tb.__file__).parent / "_kernels"
    header = _c_structs((package / "_kernel_plan.h").read_text())
    cython = _cython_structs((package / "_kernel_plan.pxd").read_text())
    assert set(header) == {"tb_axis", "tb_row", "tb_volume", "tb_problem"}
    assert cython == header
    filler = (package / "_kernel_plan.pyx").read_text()
    unfilled = [f for f in header["tb_problem"] if not re.search(rf"self\.p\.{f}\b", filler)]
    assert not unfilled
    axis_filler = filler[filler.index("cdef void _fill_axis"):filler.index("cdef void _fill_volume")]
    assert [f for f in header["tb_axis"] if not re.search(rf"ax\.{f}\b", axis_filler)] == []


# H axes whose rows sum every count of terms from 0 to past TB_ROWS_PER_SUM
# (8), on source rows of lengths around the 4- and 8-lane vectors' tails.
H_TERM_SHAPES = [
    (1, 2, (2, h_in, w_in), (3, h_out, w_out))
    for (h_in, h_out), (w_in, w_out) in zip(
        [(64, 5), (20, 47), (10, 33), (7, 26), (4, 24)],
        [(3, 5), (4, 8), (5, 9), (6, 17), (20, 33)])
]


def test_h_term_shapes_reach_every_term_count():
    counts, lengths = set(), set()
    for _, _, ins, outs in H_TERM_SHAPES:
        for align_corners in (False, True):
            t = axis_table(ins[1], outs[1], align_corners, 0.0, np.float32)
            counts |= set(np.diff(t.ptr).tolist())
        lengths.add(outs[2])
    assert set(range(0, 10)) <= counts and max(counts) > 9
    assert {n % 8 for n in lengths} >= {0, 1, 5} and min(lengths) < 8


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("align_corners", [False, True])
def test_every_h_term_count_gives_every_variant_the_same_bits(dtype, align_corners):
    """The H pass sums a row of any term count (none, the one- and two-term
    axpys, each count a register sum takes whole, more) on rows with and
    without a partial vector: every variant gives the baseline's bits, and
    the result is right."""
    variants = _dispatch.available_variants()
    for k, (n, c, ins, outs) in enumerate(H_TERM_SHAPES):
        g = random_grad((n, c) + outs, dtype, seed=40 + k)
        size = (n, c) + ins
        expected = run_variant("baseline", g, size, "ncdhw", align_corners, 1)
        for name in variants:
            got = run_variant(name, g, size, "ncdhw", align_corners, 2)
            np.testing.assert_array_equal(got, expected, err_msg=f"{name} {size}")
        result = expected.view(g.dtype).reshape(size)
        assert_matches_reference(result, g, size, align_corners)
