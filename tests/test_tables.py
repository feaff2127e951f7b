"""The axis tables: the vectorised coefficients against a slow per-point construction, fma64, the cache.

(``_coefficients``, ``_pytorch_rounding``, ``_axis_terms``, ``_axis_table``, ``_table_cache``.)
"""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from trilinear_bwd._core import (_axis_table, _axis_terms, _coefficients, _pytorch_rounding,
                                 _table_cache)

HALVES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


# --------------------------------------------------------------------------
# A slow construction, one output point at a time in plain Python, exact
# rationals for PyTorch's fused multiply-add: what the vectorised tables
# must equal bit for bit.


def slow_pytorch_point(n_in, n_out, align_corners, scale, opmath, storage, j):
    """PyTorch's (i0, i1, lambda0, lambda1) of output point j, as its kernel rounds."""
    t = np.float32 if opmath == np.float32 else np.float64
    if n_in == n_out:
        return j, j, 1.0, 0.0
    if align_corners:
        step = t(n_in - 1) / t(n_out - 1) if n_out > 1 else t(0)
        real = t(step * t(j))
    else:
        step = t(1.0 / scale) if scale > 0 else t(n_in) / t(n_out)
        # fma(step, j + 0.5, -0.5), rounded once: Fraction -> float is
        # correctly rounded, and float32 from that float64 is then exact.
        real = max(t(float(Fraction(float(step)) * Fraction(2 * j + 1, 2) - Fraction(1, 2))),
                   t(0))
    i0 = min(int(np.floor(np.float32(real))), n_in - 1)
    i1 = min(i0 + 1, n_in - 1)
    lam1 = min(max(t(real - t(i0)), t(0)), t(1))
    if storage in HALVES and t == np.float32:
        h = HALVES[storage]
        lam1 = np.float32(h(lam1))
        lam0 = np.float32(h(np.float32(1) - lam1))
    else:
        lam0 = t(1) - lam1
    return i0, i1, float(lam0), float(lam1)


def exact_point(n_in, n_out, align_corners, scale, j):
    """The float64 coordinate of output point j and its exact (x0, x1, l0, l1)."""
    if align_corners:
        src = j * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        step = 1.0 / scale if scale > 0 else n_in / n_out
        src = max((j + 0.5) * step - 0.5, 0.0)
    x0 = min(math.floor(min(src, n_in)), n_in - 1)
    x1 = min(x0 + 1, n_in - 1)
    l1 = min(max(src - x0, 0.0), 1.0)
    return src, (x0, x1, 1.0 - l1, l1)


def slow_rule(src, exact, pytorch, opmath, storage):
    """The documented zero-pattern rule at one point: PyTorch's pair and zeros, or the exact."""
    x0, x1, l0, l1 = exact
    i0, i1, lam0, lam1 = pytorch
    if (i0, i1) == (x0, x1) and (lam0 == 0) == (l0 == 0) and (lam1 == 0) == (l1 == 0):
        return exact
    limit = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}.get(
        storage, float(np.finfo(opmath).eps) / 2)
    weights = {x0: l0}
    weights[x1] = weights.get(x1, 0.0) + l1
    kept = (weights.get(i0, 0.0) if lam0 else 0.0) + (
        weights.get(i1, 0.0) if lam1 and i1 != i0 else 0.0)
    dropped = sum(weights.values()) - kept
    near = abs(src - round(src)) <= 1e-9 * max(1.0, src)
    if not (near or dropped <= limit * (1 + 1e-12)):
        return exact
    w0 = weights.get(i0, 0.0) or _pytorch_rounding.TINY
    w1 = (weights.get(i1, 0.0) if i1 != i0 else 0.0) or _pytorch_rounding.TINY
    return i0, i1, w0 if lam0 != 0.0 else 0.0, w1 if lam1 != 0.0 else 0.0


def slow_point(n_in, n_out, align_corners, scale, opmath, storage, j):
    """(x0, x1, l0, l1) of output point j, the rule applied: all in plain Python."""
    if n_in == n_out:
        return j, j, 1.0, 0.0
    src, exact = exact_point(n_in, n_out, align_corners, scale, j)
    if not src < n_in + 1:
        return exact
    return slow_rule(src, exact, slow_pytorch_point(n_in, n_out, align_corners, scale, opmath,
                                                    storage, j), opmath, storage)


def slow_coefficients(n_in, n_out, align_corners, scale, opmath, storage=None):
    """(x0, x1, l0, l1) per point with the documented zero-pattern rule, point by point."""
    return [slow_point(n_in, n_out, align_corners, scale, opmath, storage, j)
            for j in range(n_out)]


def random_axes(seed, count, longest=200):
    """(n_in, n_out, align_corners, scale): size ratios, their scale, and free scales."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n_in, n_out = (int(v) for v in rng.integers(1, longest, 2))
        align = bool(rng.integers(2))
        pick = rng.integers(4)
        scale = [0.0, n_out / n_in, float(rng.uniform(0.1, 6.0)),
                 float(rng.integers(1, 9)) / float(rng.integers(1, 9))][pick]
        yield n_in, n_out, align, scale


@pytest.mark.parametrize("opmath, storage", [(np.float32, None), (np.float64, None),
                                             (np.float32, "float16"), (np.float32, "bfloat16")])
@pytest.mark.parametrize("seed", range(3))
def test_coefficients_equal_the_slow_per_point_construction(opmath, storage, seed):
    for n_in, n_out, align, scale in random_axes(seed, 60):
        fast = _coefficients.axis_coefficients(n_in, n_out, align, scale, opmath, storage)
        slow = slow_coefficients(n_in, n_out, align, scale, opmath, storage)
        slow = [np.array(v) for v in zip(*slow)]
        for name, a, b in zip(("x0", "x1", "l0", "l1"), fast, slow):
            assert np.array_equal(a, b.astype(a.dtype)), (name, n_in, n_out, align, scale,
                                                          np.flatnonzero(a != b)[:4])


@pytest.mark.parametrize("opmath", [np.float32, np.float64])
@pytest.mark.parametrize("storage", [None, "float16", "bfloat16"])
def test_pytorch_coefficients_equal_the_slow_point_at_integer_coordinates(opmath, storage):
    # Axes where many exact coordinates are integers (the points PyTorch's
    # rounding decides): 3x downsampling, and align_corners with a step of 1/2.
    for n_in, n_out, align in ((3 * 257, 257, False), (513, 1025, True), (1000, 10, False),
                               (7, 4097, True), (4096, 3, False)):
        i0, i1, lam0, lam1 = _pytorch_rounding.pytorch_coefficients(n_in, n_out, align, 0.0, opmath,
                                                          storage)
        for j in range(0, n_out, max(1, n_out // 300)):
            assert (i0[j], i1[j], lam0[j], lam1[j]) == slow_pytorch_point(
                n_in, n_out, align, 0.0, opmath, storage, j), (n_in, n_out, align, j)


@pytest.mark.parametrize("forward", [False, True])
def test_tables_equal_those_built_from_the_slow_coefficients(forward):
    # The CSR of the whole axis and of windows, from the slow coefficients.
    for n_in, n_out, align, scale in random_axes(7, 40, longest=90):
        x0, x1, l0, l1 = (np.array(v) for v in zip(*slow_coefficients(
            n_in, n_out, align, scale, np.float32)))
        points = np.stack([x0, x1], 1).ravel()
        outputs = np.repeat(np.arange(n_out), 2)
        weight = np.stack([l0, l1], 1).ravel()   # float64: the tables' weights for every dtype
        target, source = (outputs, points) if forward else (points, outputs)
        n_t = n_out if forward else n_in
        order = np.argsort(target, kind="stable")
        table = _axis_table.axis_table(n_in, n_out, align, scale, np.float32, forward=forward)
        assert np.array_equal(table.src, source[order])
        assert np.array_equal(table.weight, weight[order])
        assert np.array_equal(table.ptr[1:], np.cumsum(np.bincount(target, minlength=n_t)))
        t0, t1 = n_t // 3, max(n_t // 3 + 1, (2 * n_t) // 3)
        keep = (target >= t0) & (target < t1)
        if not keep.any():  # input points no output reads (downsampling)
            continue
        s0, s1 = _axis_terms.source_range(n_in, n_out, align, scale, np.float32, forward, t0, t1)
        assert (s0, s1) == (source[keep].min(), source[keep].max() + 1)
        win = _axis_table.axis_table(n_in, n_out, align, scale, np.float32, forward=forward,
                                 window=(t0, t1, s0))
        order = np.argsort(target[keep], kind="stable")
        assert np.array_equal(win.src, (source[keep] - s0)[order])
        assert np.array_equal(win.weight, weight[keep][order])


def slow_block_kind(table, b):
    """Block b of the padded table by the rule, one term at a time: the window
    every k shares (>= 0), W_STRIDE3 (every k reads 8 real sources 3 apart or
    is padding alone, one k at least reading), or -1."""
    from trilinear_bwd._core._constants import W_BLOCK, W_STRIDE3

    width = table.width
    src = table.padded_src[b * W_BLOCK * width:(b + 1) * W_BLOCK * width].reshape(width, W_BLOCK)
    rel = table.padded_rel[b * W_BLOCK * width:(b + 1) * W_BLOCK * width].reshape(width, W_BLOCK)
    real = [[int(src[k, j]) for j in range(W_BLOCK) if rel[k, j] >= 0] for k in range(width)]
    every = [v for r in real for v in r]
    if every and max(every) - min(every) < 8:
        return min(every)
    kinds = ["apart3" if len(r) == W_BLOCK and all(r[j] == r[0] + 3 * j for j in range(W_BLOCK))
             else "pad" if not r else "other" for r in real]
    if "other" not in kinds and "apart3" in kinds:
        return W_STRIDE3
    return -1


@pytest.mark.parametrize("forward", [False, True])
def test_block_kinds_follow_the_rule(forward):
    """block_window marks, block by block, what the slow rule says; 3x axes
    both ways have blocks read 3 apart (the AVX2 W pass's stride-3 read)."""
    from trilinear_bwd._core._constants import W_STRIDE3

    three = [(21, 63, False, 0.0), (63, 21, False, 0.0), (40, 120, False, 0.0),
             (120, 40, False, 0.0), (13, 39, False, 0.0), (30, 10, False, 1 / 3)]
    seen = 0
    for n_in, n_out, align, scale in three + list(random_axes(11, 60, longest=130)):
        n_source, n_target = (n_in, n_out) if forward else (n_out, n_in)
        t = _axis_table.axis_table(n_in, n_out, align, scale, np.float32, sentinel=n_source,
                               forward=forward)
        if not t.width:
            continue
        kinds = [slow_block_kind(t, b) for b in range(t.block_window.size)]
        assert t.block_window.tolist() == kinds, (n_in, n_out, align, scale)
        seen += kinds.count(W_STRIDE3)
    assert seen


# --------------------------------------------------------------------------
# Long axes, up to the limit: the chunked construction against an
# independent whole-axis one -- the exact coefficients in NumPy, PyTorch's at
# every point (no near-integer filter), the slow rule wherever they differ;
# the CSR by a stable sort; the padded table by the rule, point-major.


def reference_coefficients(n_in, n_out, align_corners, scale, opmath, storage):
    j = np.arange(n_out, dtype=np.int64)
    if n_in == n_out:
        return j, j.copy(), np.ones(n_out), np.zeros(n_out)
    if align_corners:
        src = j * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        step = 1.0 / scale if scale > 0 else n_in / n_out
        with np.errstate(over="ignore"):
            src = np.maximum((j + 0.5) * step - 0.5, 0.0)
    x0 = np.minimum(np.floor(np.minimum(src, n_in)), n_in - 1).astype(np.int64)
    x1 = np.minimum(x0 + 1, n_in - 1)
    l1 = np.clip(src - x0, 0.0, 1.0)
    l0 = 1.0 - l1
    i0, i1, lam0, lam1 = _pytorch_rounding.pytorch_coefficients(n_in, n_out, align_corners, scale, opmath,
                                                      storage)
    with np.errstate(invalid="ignore"):
        differ = (src < n_in + 1) & ((i0 != x0) | (i1 != x1) | ((lam0 == 0) != (l0 == 0))
                                     | ((lam1 == 0) != (l1 == 0)))
    for k in np.flatnonzero(differ):
        x0[k], x1[k], l0[k], l1[k] = slow_rule(
            float(src[k]), (int(x0[k]), int(x1[k]), float(l0[k]), float(l1[k])),
            (int(i0[k]), int(i1[k]), float(lam0[k]), float(lam1[k])), opmath, storage)
    return x0, x1, l0, l1


def reference_terms(n_in, n_out, align_corners, scale, dtype, forward, storage):
    """(ptr, src, weight) of the whole axis: targets in order, terms stable within each."""
    storage = storage if forward and storage in HALVES else None
    x0, x1, l0, l1 = reference_coefficients(n_in, n_out, align_corners, scale,
                                            np.dtype(dtype).type, storage)
    points = np.stack([x0, x1], 1).ravel()
    outputs = np.repeat(np.arange(n_out), 2)
    weight = np.stack([l0, l1], 1).ravel()   # float64 for every dtype
    target, source = (outputs, points) if forward else (points, outputs)
    order = np.argsort(target, kind="stable")
    counts = np.bincount(target, minlength=n_out if forward else n_in)
    return np.concatenate([[0], np.cumsum(counts)]), source[order], weight[order]


def reference_padded(ptr, src, weight, sentinel):
    """The padded table's fields by the rule, built point-major then stored k-major."""
    from trilinear_bwd._core._constants import (GATHER, W_BLOCK, W_STRIDE3, WINDOW8, WINDOW16,
                                          WINDOW32)

    counts = np.diff(ptr)
    n = counts.size
    blocks = -(-n // W_BLOCK)
    width = int(counts.max())
    if blocks * W_BLOCK * width > _axis_table.PADDED_LIMIT * (int(ptr[-1]) + blocks * W_BLOCK):
        width = 0
    if not width:
        return {"width": 0, "block_window": np.zeros(blocks, np.int32)}
    target = np.repeat(np.arange(n), counts)
    slot = np.arange(ptr[-1]) - np.repeat(ptr[:-1], counts)
    real = np.zeros((blocks * W_BLOCK, width), bool)
    by_point = np.full((blocks * W_BLOCK, width), sentinel, np.int64)
    weights = np.zeros((blocks * W_BLOCK, width), weight.dtype)
    real[target, slot], by_point[target, slot], weights[target, slot] = True, src, weight
    real = real.reshape(blocks, W_BLOCK, width)
    by_point = by_point.reshape(blocks, W_BLOCK, width)
    big = 2**40
    low = np.where(real, by_point, big).min(axis=1)
    high = np.where(real, by_point, -1).max(axis=1)
    block_low, block_high = low.min(axis=1), high.max(axis=1)
    low = np.where(high < 0, 0, low)
    span = high - low
    mode = np.select([span < 8, span < 16, span < 32], [WINDOW8, WINDOW16, WINDOW32], GATHER)
    shared = (block_high - block_low < 8) & (block_high >= 0)
    window = np.where(shared[:, None], block_low[:, None], low)
    mode[shared] = WINDOW8
    apart3 = real.all(axis=1) & (by_point - by_point[:, :1] == 3 * np.arange(W_BLOCK)[:, None]
                                 ).all(axis=1)
    stride3 = (apart3 | ~real.any(axis=1)).all(axis=1) & apart3.any(axis=1)
    rel = np.where(real, by_point - window[:, None, :], -1)

    def k_major(values):
        return values.transpose(0, 2, 1).ravel()

    return {"width": width, "padded_src": k_major(by_point), "padded_weight": k_major(
        weights.reshape(blocks, W_BLOCK, width)), "padded_rel": k_major(rel),
        "window": window.ravel(), "mode": mode.ravel(),
        "block_window": np.where(shared, block_low, np.where(stride3, W_STRIDE3, -1))}


TABLE_DTYPES = {"ptr": np.int64, "src": np.int64, "padded_src": np.int32,
                "padded_rel": np.int32, "window": np.int32, "mode": np.int8,
                "block_window": np.int32}


def assert_table(table, ptr, src, weight, sentinel, label):
    assert np.array_equal(table.ptr, ptr), label
    assert np.array_equal(table.src, src), label
    assert table.weight.dtype == weight.dtype and np.array_equal(table.weight, weight), label
    expected = reference_padded(ptr, src, weight, sentinel)
    assert table.width == expected.pop("width"), label
    for name, value in expected.items():
        got = getattr(table, name)
        assert got.dtype == TABLE_DTYPES.get(name, weight.dtype), (label, name)
        assert np.array_equal(got, value), (label, name, np.flatnonzero(got != value)[:4])
    if not table.width:
        assert all(getattr(table, name).size == 0 for name in
                   ("padded_src", "padded_weight", "padded_rel", "window", "mode")), label


def check_long_axis(n_in, n_out, align_corners, scale, dtype, storage, forward, blocks=8):
    """The whole axis's table and ``blocks`` windows of it (Dask's cut), against the reference."""
    _table_cache.clear_cache()
    label = (n_in, n_out, align_corners, scale, dtype, storage, forward)
    ptr, src, weight = reference_terms(n_in, n_out, align_corners, scale, dtype, forward, storage)
    n_source = n_in if forward else n_out
    table = _axis_table.axis_table(n_in, n_out, align_corners, scale, dtype, sentinel=n_source,
                               forward=forward, storage=storage)
    assert_table(table, ptr, src, weight, n_source, label)
    n_target = ptr.size - 1
    cuts = np.linspace(0, n_target, blocks + 1).astype(int)
    for t0, t1 in zip(cuts[:-1], cuts[1:]):
        a, b = ptr[t0], ptr[t1]
        if a == b:  # target points nothing reads (downsampling's backward)
            continue
        s0, s1 = int(src[a:b].min()), int(src[a:b].max()) + 1
        assert _axis_terms.source_range(n_in, n_out, align_corners, scale, dtype, forward, t0, t1,
                                    storage) == (s0, s1), label
        win = _axis_table.axis_table(n_in, n_out, align_corners, scale, dtype, sentinel=s1 - s0,
                                 forward=forward, window=(t0, t1, s0), storage=storage)
        assert_table(win, ptr[t0:t1 + 1] - a, src[a:b] - s0, weight[a:b], s1 - s0,
                     label + ((t0, t1),))
    # The slow per-point construction (exact rationals for PyTorch's
    # multiply-add) at points spread along the axis and at those whose
    # coordinates lie nearest to integers, where the rule decides.
    if n_in != n_out:
        opmath = np.dtype(dtype).type
        half = storage if forward and storage in HALVES else None
        x0, x1, l0, l1 = _coefficients.axis_coefficients(n_in, n_out, align_corners, scale, opmath,
                                                   half)
        j = np.arange(n_out)
        coordinate = (j * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0) if align_corners
                      else (j + 0.5) * (1.0 / scale if scale > 0 else n_in / n_out) - 0.5)
        nearest = np.argsort(np.abs(coordinate - np.rint(coordinate)), kind="stable")[:100]
        for k in np.concatenate([np.linspace(0, n_out - 1, 100).astype(int), nearest]):
            assert (x0[k], x1[k], l0[k], l1[k]) == slow_point(
                n_in, n_out, align_corners, scale, opmath, half, int(k)), label + (int(k),)
    _table_cache.clear_cache()


LIMIT = 2**20
# (n_in, n_out, align_corners, scale, dtype, storage): up and down, 3x
# (where a third of the coordinates are integers), a scale given, corners.
LONG_AXES = [
    (65537, 196611, False, 0.0, np.float32, None),
    (100003, 33334, False, 0.0, np.float64, None),
    (65536, 111411, False, 1.7, np.float32, "float16"),
    (40001, 100000, True, 0.0, np.float32, "bfloat16"),
]
LIMIT_AXES = [
    (349525, 3 * 349525, False, 0.0, np.float32, None),
    (349525, 3 * 349525, False, 0.0, np.float32, "bfloat16"),
    (LIMIT, LIMIT // 3, False, 0.0, np.float64, None),
    (616809, math.floor(616809 * 1.7), False, 1.7, np.float32, "float16"),
    (LIMIT // 2 + 1, LIMIT, True, 0.0, np.float32, None),
    (LIMIT, LIMIT, False, 0.0, np.float32, None),
]


@pytest.mark.parametrize("forward", [False, True])
@pytest.mark.parametrize("axis", LONG_AXES, ids=lambda a: f"{a[0]}-{a[1]}")
def test_long_axis_tables_equal_the_whole_axis_construction(axis, forward):
    check_long_axis(*axis, forward)


@pytest.mark.slow
@pytest.mark.parametrize("forward", [False, True])
@pytest.mark.parametrize("axis", LIMIT_AXES, ids=lambda a: f"{a[0]}-{a[1]}-{a[5]}")
def test_tables_at_the_limit_equal_the_whole_axis_construction(axis, forward):
    assert max(axis[:2]) <= LIMIT
    check_long_axis(*axis, forward)


def table_fields(table):
    return {name: getattr(table, name) for name in
            ("ptr", "src", "weight", "width", "padded_src", "padded_weight", "padded_rel",
             "window", "mode", "block_window")}


@pytest.mark.parametrize("chunk", [1, 7, 64, 256])
def test_tables_do_not_depend_on_the_chunk(chunk, monkeypatch):
    """Chunks of any length, whole axes and windows: the same tables bit for bit."""
    axes = list(random_axes(13, 40, longest=300)) + [(1000, 3000, False, 0.0),
                                                      (3000, 1000, True, 0.0)]
    dtypes = [("<f4", None), ("<f8", None), ("<f4", "float16"), ("<f4", "bfloat16")]
    for case, (n_in, n_out, align, scale) in enumerate(axes):
        dtype, storage = dtypes[case % 4]
        for forward in (False, True):
            n_target = n_out if forward else n_in
            n_source = n_in if forward else n_out
            windows = [None, (n_target // 3, max(n_target // 3 + 1, 2 * n_target // 3))]
            got = {}
            for size in (chunk, _coefficients.CHUNK):
                monkeypatch.setattr(_coefficients, "CHUNK", size)
                _table_cache.clear_cache()
                for window in windows:
                    if window is not None:
                        terms = _axis_terms.axis_terms(n_in, n_out, align, scale, dtype, forward,
                                                   storage)
                        if terms.ptr[window[0]] == terms.ptr[window[1]]:
                            continue
                        window += (terms.source_range(*window)[0],)
                    table = _axis_table.axis_table(n_in, n_out, align, scale, dtype, n_source,
                                               forward, window, storage)
                    got.setdefault(window, []).append(table_fields(table))
            monkeypatch.undo()
            for window, (small, default) in got.items():
                for name, value in small.items():
                    assert np.array_equal(value, default[name]), (n_in, n_out, forward,
                                                                  window, chunk, name)
    _table_cache.clear_cache()


def test_coefficients_do_not_depend_on_the_chunk(monkeypatch):
    axis = (4000, 12001, False, 0.0, np.float32, "bfloat16")
    whole = _coefficients.axis_coefficients(*axis)
    monkeypatch.setattr(_coefficients, "CHUNK", 97)
    for a, b in zip(whole, _coefficients.axis_coefficients(*axis)):
        assert np.array_equal(a, b)


def stable_grouping(x0, x1, w0, w1, n_in):
    points = np.stack([x0, x1], 1).ravel()
    order = np.argsort(points, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(points, minlength=n_in))])
    return ptr, np.repeat(np.arange(x0.size), 2)[order], np.stack([w0, w1], 1).ravel()[order]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pairs", ["rule", "other pair", "decreasing"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backward_grouping_equals_a_stable_sort(seed, pairs, dtype):
    """The compiled counting sort groups the terms as a stable sort by input
    point does: pairs of the rules (x0 non-decreasing, x1 = min(x0 + 1,
    n_in - 1): ties, the clamped last point, input points nothing reads) and
    any other pairs."""
    rng = np.random.default_rng(seed)
    n_out = int(rng.integers(1, 200))
    n_in = int(rng.integers(1, 60))
    x0 = np.sort(rng.integers(0, n_in, n_out))
    x1 = np.minimum(x0 + 1, n_in - 1)
    if pairs == "other pair":
        x1 = np.maximum.accumulate(np.minimum(x0 + rng.integers(0, 3, n_out), n_in - 1))
    elif pairs == "decreasing" and n_out > 1:
        x0 = rng.permutation(x0)
        x1 = np.minimum(x0 + 1, n_in - 1)
    w0, w1 = rng.random(n_out).astype(dtype), rng.random(n_out).astype(dtype)
    got = _axis_terms._by_input_point(x0, x1, w0, w1, n_in)
    for a, b in zip(got, stable_grouping(x0, x1, w0, w1, n_in)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("seed", range(4))
def test_pytorch_differs_only_near_integers(seed):
    """Every point where PyTorch's pair or zero weights differ from the float64
    ones lies within near_integer_bound of an integer (what lets the tables
    compute PyTorch's coefficients at those points alone)."""
    rng = np.random.default_rng(seed)
    axes = [(n_in, n_out, align, scale) for n_in, n_out, align, scale in
            random_axes(seed, 40, longest=3000)]
    axes += [(LIMIT // 3, LIMIT, False, 0.0), (LIMIT, LIMIT // 7, True, 0.0),
             (int(rng.integers(2, LIMIT)), LIMIT, False, float(rng.uniform(1, 8))),
             (5, 300, False, float(np.exp(rng.uniform(-30, 30))))]
    for n_in, n_out, align, scale in axes:
        if n_in == n_out:
            continue
        j = np.arange(n_out)
        src = _coefficients._coordinates(n_in, n_out, align, scale, j)
        x0 = np.minimum(np.floor(np.minimum(src, n_in)), n_in - 1).astype(np.int64)
        l1 = np.clip(src - x0, 0.0, 1.0)
        for opmath, storage in [(np.float32, None), (np.float64, None),
                                (np.float32, "float16"), (np.float32, "bfloat16")]:
            i0, _, lam0, lam1 = _pytorch_rounding.pytorch_coefficients(n_in, n_out, align, scale, opmath,
                                                             storage)
            with np.errstate(invalid="ignore"):
                differ = (src < n_in + 1) & ((i0 != x0) | ((lam0 == 0) != (l1 == 1))
                                             | ((lam1 == 0) != (l1 == 0)))
            s = src[differ]
            distance = np.abs(s - np.rint(s))
            assert (distance <= _pytorch_rounding.near_integer_bound(s, opmath, storage)).all(), (
                n_in, n_out, align, scale, opmath, storage)


# --------------------------------------------------------------------------
# fma64


def _exact_fma(a, b, c):
    return float(Fraction(a) * Fraction(b) + Fraction(c))


@pytest.mark.parametrize("seed", range(3))
def test_fma64_is_correctly_rounded(seed):
    rng = np.random.default_rng(seed)
    n = 4000
    a = rng.uniform(1e-6, 4.0, n) * np.exp2(rng.integers(-10, 10, n))
    b = rng.integers(0, 2**21, n) + 0.5
    c = np.full(n, -0.5)
    # Adversarial: a * b within a few ulps of k + 0.5 (the coordinates near
    # integers, where rounding once or twice differ).
    k = rng.integers(1, 2**20, n // 2)
    a[: n // 2] = (k + 0.5) / b[: n // 2]
    a[: n // 2] = np.nextafter(a[: n // 2], rng.choice([-np.inf, np.inf], n // 2))
    got = _pytorch_rounding.fma64(a, b, c)
    expected = np.array([_exact_fma(x, y, z) for x, y, z in zip(a, b, c)])
    assert np.array_equal(got, expected)
    # General operands, with c cancelling most of a * b, where rounding
    # twice (the plain expression) differs from rounding once.
    a = rng.uniform(-8, 8, n) * np.exp2(rng.integers(-20, 20, n))
    b = rng.uniform(-8, 8, n) * np.exp2(rng.integers(-20, 20, n))
    c = -(a * b) * rng.choice([1.0, 1 + 2.0**-40, 1 - 2.0**-30, 0.5], n)
    got = _pytorch_rounding.fma64(a, b, c)
    expected = np.array([_exact_fma(x, y, z) for x, y, z in zip(a, b, c)])
    assert np.array_equal(got, expected)
    assert not np.array_equal(a * b + c, expected)


# --------------------------------------------------------------------------
# The cache: bounded by bytes, long axes kept


def test_cache_is_bounded_by_bytes_and_keeps_a_long_axis(monkeypatch):
    _table_cache.clear_cache()
    calls = []
    build = _axis_terms.build_terms
    monkeypatch.setattr(_axis_terms, "build_terms", lambda key: calls.append(key) or build(key))
    long_axis = (2**18, 2**19 + 3, False, 0.0, np.float32)
    first = _axis_table.axis_table(*long_axis, sentinel=2**19 + 3)
    assert _axis_table.axis_table(*long_axis, sentinel=2**19 + 3) is first
    assert len(calls) == 1
    for n in range(2, 400):
        _axis_table.axis_table(n, 3 * n + 1, True, 0.0, np.float64, sentinel=3 * n + 1)
        assert _table_cache._cache.nbytes <= _table_cache.CACHE_BYTES
    # A smaller bound: the next entry evicts the least recently used ones.
    monkeypatch.setattr(_table_cache._cache, "limit", 2**20)
    _axis_table.axis_table(5, 17, False, 0.0, np.float32, sentinel=17)
    assert 0 < _table_cache._cache.nbytes <= 2**20
    _table_cache.clear_cache()


def test_cache_lock_is_renewed_in_a_forked_child():
    cache = _table_cache._TableCache(1024)
    cache._lock.acquire()  # as a thread holding it at fork time would leave it
    cache._after_fork_in_child()
    cache.put("k", "v", 8)
    assert cache.get("k") == "v"
