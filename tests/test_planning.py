"""Planning a long axis under Dask: each result chunk's window and the source chunks it reads."""

import numpy as np
import pytest

from trilinear_bwd._core import _axis_terms, _block_windows


def brute_force_parts(src_bounds, s0, s1):
    """Every source chunk, in order, that overlaps [s0, s1): (q, window slice, chunk slice)."""
    parts = []
    for q, (a, b) in enumerate(zip(src_bounds[:-1], src_bounds[1:])):
        lo, hi = max(a, s0), min(b, s1)
        if lo < hi:
            parts.append((q, slice(lo - s0, hi - s0), slice(lo - a, hi - a)))
    return parts


def chunkings(n, rng):
    """Chunks of a source axis of n points: one, every point, even, random, some empty."""
    yield (n,)
    yield (1,) * n
    yield tuple(c for c in (n // 2, n - n // 2) if c)
    cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(1, 12))))
    yield tuple(np.diff(np.concatenate([[0], cuts, [n]])).tolist())


@pytest.mark.parametrize("forward", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_window_parts_are_the_overlapping_source_chunks(seed, forward):
    """WindowAxis finds the chunks each window overlaps by bisection: the
    same parts, in the same order, as checking every chunk (empty chunks
    included, which overlap nothing)."""
    rng = np.random.default_rng(seed)
    for _ in range(12):
        n_in, n_out = (int(v) for v in rng.integers(1, 90, 2))
        align = bool(rng.integers(2))
        terms = _axis_terms.axis_terms(n_in, n_out, align, 0.0, np.float32, forward)
        n_source = n_in if forward else n_out
        for chunks in chunkings(n_source, rng):
            axis = _block_windows.WindowAxis(terms, chunks)
            src_bounds = np.concatenate([[0], np.cumsum(chunks)]).tolist()
            assert len(axis.windows) == len(axis.parts) == len(axis.extents)
            for (t0, t1, s0), extent, parts in zip(axis.windows, axis.extents, axis.parts):
                assert parts == brute_force_parts(src_bounds, s0, s0 + extent), (
                    n_in, n_out, forward, chunks, t0, t1)
                # The parts tile the window.
                assert sum(p[1].stop - p[1].start for p in parts) == extent
