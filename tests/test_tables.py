"""_tables: the vectorised coefficients against a slow per-point construction, fma64, the cache."""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from trilinear_bwd import _tables

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


def slow_coefficients(n_in, n_out, align_corners, scale, opmath, storage=None):
    """(x0, x1, l0, l1) per point with the documented zero-pattern rule, point by point."""
    limit = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}.get(
        storage, float(np.finfo(opmath).eps) / 2)
    out = []
    for j in range(n_out):
        if n_in == n_out:
            out.append((j, j, 1.0, 0.0))
            continue
        if align_corners:
            src = j * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
        else:
            step = 1.0 / scale if scale > 0 else n_in / n_out
            src = max((j + 0.5) * step - 0.5, 0.0)
        x0 = min(math.floor(min(src, n_in)), n_in - 1)
        x1 = min(x0 + 1, n_in - 1)
        l1 = min(max(src - x0, 0.0), 1.0)
        l0 = 1.0 - l1
        if src < n_in + 1:
            i0, i1, lam0, lam1 = slow_pytorch_point(n_in, n_out, align_corners, scale, opmath,
                                                    storage, j)
            if (i0, i1) != (x0, x1) or (lam0 == 0) != (l0 == 0) or (lam1 == 0) != (l1 == 0):
                exact = {x0: l0}
                exact[x1] = exact.get(x1, 0.0) + l1
                kept = (exact.get(i0, 0.0) if lam0 else 0.0) + (
                    exact.get(i1, 0.0) if lam1 and i1 != i0 else 0.0)
                dropped = sum(exact.values()) - kept
                near = abs(src - round(src)) <= 1e-9 * max(1.0, src)
                if near or dropped <= limit * (1 + 1e-12):
                    w0 = exact.get(i0, 0.0) or _tables.TINY
                    w1 = (exact.get(i1, 0.0) if i1 != i0 else 0.0) or _tables.TINY
                    x0, x1 = i0, i1
                    l0 = w0 if lam0 != 0.0 else 0.0
                    l1 = w1 if lam1 != 0.0 else 0.0
        out.append((x0, x1, l0, l1))
    return out


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
        fast = _tables.axis_coefficients(n_in, n_out, align, scale, opmath, storage)
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
        i0, i1, lam0, lam1 = _tables.pytorch_coefficients(n_in, n_out, align, 0.0, opmath,
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
        weight = np.stack([l0, l1], 1).ravel().astype(np.float32)
        target, source = (outputs, points) if forward else (points, outputs)
        n_t = n_out if forward else n_in
        order = np.argsort(target, kind="stable")
        table = _tables.axis_table(n_in, n_out, align, scale, np.float32, forward=forward)
        assert np.array_equal(table.src, source[order])
        assert np.array_equal(table.weight, weight[order])
        assert np.array_equal(table.ptr[1:], np.cumsum(np.bincount(target, minlength=n_t)))
        t0, t1 = n_t // 3, max(n_t // 3 + 1, (2 * n_t) // 3)
        keep = (target >= t0) & (target < t1)
        if not keep.any():  # input points no output reads (downsampling)
            continue
        s0, s1 = _tables.source_range(n_in, n_out, align, scale, np.float32, forward, t0, t1)
        assert (s0, s1) == (source[keep].min(), source[keep].max() + 1)
        win = _tables.axis_table(n_in, n_out, align, scale, np.float32, forward=forward,
                                 window=(t0, t1, s0))
        order = np.argsort(target[keep], kind="stable")
        assert np.array_equal(win.src, (source[keep] - s0)[order])
        assert np.array_equal(win.weight, weight[keep][order])


def slow_block_kind(table, b):
    """Block b of the padded table by the rule, one term at a time: the window
    every k shares (>= 0), W_STRIDE3 (every k reads 8 real sources 3 apart or
    is padding alone, one k at least reading), or -1."""
    from trilinear_bwd._constants import W_BLOCK, W_STRIDE3

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
    from trilinear_bwd._constants import W_STRIDE3

    three = [(21, 63, False, 0.0), (63, 21, False, 0.0), (40, 120, False, 0.0),
             (120, 40, False, 0.0), (13, 39, False, 0.0), (30, 10, False, 1 / 3)]
    seen = 0
    for n_in, n_out, align, scale in three + list(random_axes(11, 60, longest=130)):
        n_source, n_target = (n_in, n_out) if forward else (n_out, n_in)
        t = _tables.axis_table(n_in, n_out, align, scale, np.float32, sentinel=n_source,
                               forward=forward)
        if not t.width:
            continue
        kinds = [slow_block_kind(t, b) for b in range(t.block_window.size)]
        assert t.block_window.tolist() == kinds, (n_in, n_out, align, scale)
        seen += kinds.count(W_STRIDE3)
    assert seen


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
    got = _tables.fma64(a, b, c)
    expected = np.array([_exact_fma(x, y, z) for x, y, z in zip(a, b, c)])
    assert np.array_equal(got, expected)
    # General operands, with c cancelling most of a * b, where rounding
    # twice (the plain expression) differs from rounding once.
    a = rng.uniform(-8, 8, n) * np.exp2(rng.integers(-20, 20, n))
    b = rng.uniform(-8, 8, n) * np.exp2(rng.integers(-20, 20, n))
    c = -(a * b) * rng.choice([1.0, 1 + 2.0**-40, 1 - 2.0**-30, 0.5], n)
    got = _tables.fma64(a, b, c)
    expected = np.array([_exact_fma(x, y, z) for x, y, z in zip(a, b, c)])
    assert np.array_equal(got, expected)
    assert not np.array_equal(a * b + c, expected)


# --------------------------------------------------------------------------
# The cache: bounded by bytes, long axes kept


def test_cache_is_bounded_by_bytes_and_keeps_a_long_axis(monkeypatch):
    _tables.clear_cache()
    calls = []
    build = _tables.build_terms
    monkeypatch.setattr(_tables, "build_terms", lambda key: calls.append(key) or build(key))
    long_axis = (2**18, 2**19 + 3, False, 0.0, np.float32)
    first = _tables.axis_table(*long_axis, sentinel=2**19 + 3)
    assert _tables.axis_table(*long_axis, sentinel=2**19 + 3) is first
    assert len(calls) == 1
    for n in range(2, 400):
        _tables.axis_table(n, 3 * n + 1, True, 0.0, np.float64, sentinel=3 * n + 1)
        assert _tables._cache.nbytes <= _tables.CACHE_BYTES
    # A smaller bound: the next entry evicts the least recently used ones.
    monkeypatch.setattr(_tables._cache, "limit", 2**20)
    _tables.axis_table(5, 17, False, 0.0, np.float32, sentinel=17)
    assert 0 < _tables._cache.nbytes <= 2**20
    _tables.clear_cache()


def test_cache_lock_is_renewed_in_a_forked_child():
    cache = _tables._TableCache(1024)
    cache._lock.acquire()  # as a thread holding it at fork time would leave it
    cache._after_fork_in_child()
    cache.put("k", "v", 8)
    assert cache.get("k") == "v"
