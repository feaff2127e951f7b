"""How a chunked axis splits into a Dask graph's blocks: each block's source window, its runs, its calls.

Pure NumPy on a whole axis's terms (``_axis_terms.AxisTerms``): which source
points each result chunk reads, from which source chunks, and the kernel
calls a block is computed in (``trilinear_bwd.dask`` builds its graph from
them; docs/dask.md, "How it computes").
"""

import bisect

import numpy as np


class WindowAxis:
    """How one spatial axis is split: result chunks, their source windows, and their runs.

    Attributes
    ----------
    bounds : list of int
        Result chunk ``r`` holds target points ``bounds[r]:bounds[r+1]``.
    windows : list of tuple or None
        ``(t0, t1, s0)`` per result chunk (the kernel's window); None for a
        chunk whose targets read nothing (it is zeros).
    extents : list of int
        The window's length per result chunk (0: it reads nothing).
    parts : list of list of tuple
        Per result chunk, ``(q, dst, src)`` for each source chunk ``q`` that
        overlaps its window: ``source_chunk_q[src]`` fills ``window[dst]``.
    src_bounds : list of int
        Source chunk ``q`` holds source points ``src_bounds[q]:src_bounds[q+1]``.
    runs : list of list of tuple
        Per result chunk, ``(t0, t1, s0, s1, one_chunk)`` for each run of its targets
        (see :func:`_runs`): targets ``t0:t1`` read source points ``s0:s1``.
    """

    def __init__(self, terms, chunks):
        n_in, n_out, _, _, _, forward, _ = terms.key
        n_src, n_tgt = (n_in, n_out) if forward else (n_out, n_in)
        src_bounds = [0]
        for c in chunks:
            src_bounds.append(src_bounds[-1] + c)
        # The source's chunk boundaries, scaled to the target axis: a result
        # chunk reads about one source chunk (plus a point or two of its
        # neighbours), and there are never more result chunks than source ones.
        cuts = {0, n_tgt}
        cuts.update(min(n_tgt, round(b * n_tgt / n_src)) for b in src_bounds[1:-1])
        self.bounds = sorted(cuts)
        self.src_bounds = src_bounds
        inside = _inside(terms, src_bounds)
        self.windows, self.parts, self.extents, self.runs = [], [], [], []
        for t0, t1 in zip(self.bounds[:-1], self.bounds[1:]):
            read = terms.source_range(t0, t1)
            if read is None:
                # No target of the chunk reads anything: the backward's
                # downsampling with a given scale (issue 54).  Its blocks
                # are zeros and read no source.
                self.windows.append(None)
                self.extents.append(0)
                self.parts.append([])
                self.runs.append([])
                continue
            s0, s1 = read
            self.windows.append((t0, t1, s0))
            self.extents.append(s1 - s0)
            parts = []
            # Only the source chunks that overlap the window (found by
            # bisection: visiting all of them per result chunk is quadratic
            # in the chunks of a long axis).
            for q in range(bisect.bisect_right(src_bounds, s0) - 1,
                           bisect.bisect_left(src_bounds, s1)):
                a, b = src_bounds[q], src_bounds[q + 1]
                lo, hi = max(a, s0), min(b, s1)
                if lo < hi:
                    parts.append((q, slice(lo - s0, hi - s0), slice(lo - a, hi - a)))
            self.parts.append(parts)
            self.runs.append(_runs(terms, inside, t0, t1))

    @property
    def chunks(self):
        """The result's chunks along the axis."""
        return tuple(b - a for a, b in zip(self.bounds[:-1], self.bounds[1:]))


def _inside(terms, src_bounds):
    """Per target point of the axis, the source chunk holding every point it reads; -1: several.

    -1 too for a target that reads nothing (downsampling's backward leaves
    input points without terms).  O(n) NumPy on the axis's terms.
    """
    inside = np.full(len(terms.ptr) - 1, -1, dtype=np.int64)
    reading = np.flatnonzero(terms.ptr[1:] > terms.ptr[:-1])
    if reading.size:
        # Consecutive targets that read something own consecutive terms.
        first = terms.ptr[reading]
        edges = np.asarray(src_bounds[1:-1], dtype=np.int64)
        lowest = np.searchsorted(edges, np.minimum.reduceat(terms.src, first), side="right")
        highest = np.searchsorted(edges, np.maximum.reduceat(terms.src, first), side="right")
        inside[reading] = np.where(lowest == highest, lowest, -1)
    return inside


def _runs(terms, inside, t0, t1):
    """The runs of targets ``t0:t1``: ``[(t0, t1, s0, s1, one_chunk), ...]``, in order.

    A run is a maximal range of targets that read from one and the same
    source chunk (``one_chunk`` True), or of targets that each read from
    several (False): targets ``t0:t1`` of the run read source points
    ``s0:s1``.  Targets that read nothing go with the run before them (the
    first run, at the start), so that every run reads something.  See
    :func:`block_calls`.
    """
    reading = np.flatnonzero(terms.ptr[t0 + 1:t1 + 1] > terms.ptr[t0:t1]) + t0
    values = inside[reading]
    change = np.flatnonzero(np.diff(values)) + 1
    bounds = [t0, *reading[change].tolist(), t1]
    one_chunk = (values[[0, *change.tolist()]] >= 0).tolist()
    return [(a, b) + terms.source_range(a, b) + (one,)
            for a, b, one in zip(bounds[:-1], bounds[1:], one_chunk)]


def block_calls(runs, k=0, prefix=()):
    """The kernel calls of one block: ``((t0, t1, s0, s1) per axis)`` for each, in order.

    Peeled like an onion: along D, each run that reads across a chunk
    boundary is one call over the block's whole H and W (a thin slab, whose
    few source points are copied); each run inside one chunk is split the
    same way along H, and so on along W, where what remains, inside one
    chunk on every axis, is read where it lies.  At most ``1 + 2 * k``
    calls for a block split on ``k`` axes, and no copy thicker than the
    points next to a boundary.
    """
    if k == 3:
        yield prefix
        return
    full = [(r[0][0], r[-1][1], min(x[2] for x in r), max(x[3] for x in r)) for r in runs]
    for run in runs[k]:
        if run[4] and k < 2:
            yield from block_calls(runs, k + 1, prefix + (run[:4],))
        else:
            yield prefix + (run[:4],) + tuple(full[k + 1:])
