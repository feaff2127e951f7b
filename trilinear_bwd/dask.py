"""The backward and the forward on Dask arrays: lazily, on Dask's own schedulers and clusters.

``trilinear_bwd.dask.upsample_trilinear3d_backward`` takes a
``dask.array.Array`` of ``grad_out`` and returns a ``dask.array.Array`` of
``grad_input``; ``trilinear_bwd.dask.upsample_trilinear3d`` does the same for
the forward (``x`` to the upsampled volume).  Nothing is computed until the
result is.  Dask is an optional dependency (``pip install
trilinear_bwd[dask]``) that only this module imports.

Every block of the result is one call of the compiled kernel, whatever the
chunking: a task computes result block ``r`` -- a range of target points on
each axis -- from the *window* of the source array that those points read
(per axis, the source points of their terms: ``_tables.source_range``),
assembled from the source chunks that overlap it.  The kernel's windowed
entry (``_operator.check_window``) runs the whole call's per-axis tables
restricted to the block, with the whole axis's weights, so each result
element is the same sum, in the same order, as in the in-memory call: the
result is bitwise equal to it, for any chunking, on every scheduler.

See ``docs/dask.md`` for when to use it and how to chunk.
"""


import bisect

import numpy as np

try:
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "trilinear_bwd.dask needs Dask; install it with `pip install trilinear_bwd[dask]` "
        "(dask[array] and distributed)"
    ) from exc

from . import _pool, _tables, _threads
from ._arguments import forward_sizes, one_call_sizes
from ._arrays import dtype_info, is_misaligned
from ._coerce import invalid
from ._operator import BACKWARD, FORWARD, check, check_5d, check_limits, check_window
from ._runner import run_once
from ._status import NullArgumentError

__all__ = ["upsample_trilinear3d", "upsample_trilinear3d_backward"]


def upsample_trilinear3d_backward(grad_out, input_size, *, output_size=None,
                                  align_corners=False, scales=(0.0, 0.0, 0.0), num_threads=1):
    """Gradient of trilinear 3-D upsampling for a Dask array, lazily.

    The same operator as :func:`trilinear_bwd.upsample_trilinear3d_backward`,
    built as a Dask graph: nothing is computed until the result is (with
    ``.compute()``, ``.persist()``, ``da.store`` ...), on whatever scheduler
    is active -- synchronous, threads, processes or a ``dask.distributed``
    cluster.

    Parameters
    ----------
    grad_out : dask.array.Array, shape (N, C, oD, oH, oW)
        float32, float64, float16 or bfloat16 (``ml_dtypes.bfloat16``), with
        any chunks.
    input_size : sequence of int
        ``(N, C, iD, iH, iW)``, or ``(iD, iH, iW)`` with N and C taken from
        ``grad_out``.
    output_size : sequence of 3 int, optional
        ``(oD, oH, oW)``; defaults to ``grad_out.shape[2:]``.
    align_corners : bool, default False
        Corner-aligned (True) or half-pixel (False) coordinates.
    scales : sequence of 3 float, default (0.0, 0.0, 0.0)
        The forward's multipliers per axis (D, H, W); <= 0 means "not given".
    num_threads : int or None, default 1
        OpenMP threads of each kernel call, i.e. per Dask task.  The default,
        one, gives one OpenMP thread per Dask thread, so a worker never runs
        more threads than it was given.  Raise it when a worker has several
        cores but runs fewer tasks at once than that (few, large blocks);
        None follows the worker's ``OMP_NUM_THREADS``.

    Returns
    -------
    dask.array.Array, shape (N, C, iD, iH, iW)
        Of ``grad_out``'s dtype, chunked like ``grad_out`` along N and C.
        Along a spatial axis that ``grad_out`` splits into k chunks, the
        result has at most k: its boundaries are grad_out's, scaled to the
        input size and rounded (boundaries that coincide are merged); an
        unsplit axis is one chunk.

    Raises
    ------
    AclnnError
        At graph construction, with ``.status`` 161001 or 161002, for any
        argument that breaks the operator contract, as the in-memory call
        would (the size limits of one kernel call apply to each block).
        161002 also if ``grad_out`` is not a Dask array.

    Notes
    -----
    Every block is one kernel call on a window of ``grad_out`` (see the
    module's notes), so the result is bitwise equal to the in-memory call
    on the whole array, for every chunking and scheduler.

    Examples
    --------
    >>> import dask.array as da, trilinear_bwd.dask as tbd
    >>> g = da.ones((4, 2, 8, 8, 8), dtype="float32", chunks=(1, 2, 8, 8, 8))
    >>> gi = tbd.upsample_trilinear3d_backward(g, (4, 4, 4))
    >>> gi.chunks[0], gi.shape
    ((1, 1, 1, 1), (4, 2, 4, 4, 4))
    >>> float(gi.sum().compute())
    4096.0
    """
    grad_out, whole = _check_arguments(grad_out, input_size, output_size, align_corners,
                                       scales, num_threads)
    token = tokenize(grad_out.name, whole.input_size, whole.output_size, whole.align_corners,
                     whole.scales, num_threads)
    return _windowed(grad_out, whole, num_threads,
                     f"upsample_trilinear3d_backward-{token}")


def upsample_trilinear3d(x, output_size=None, *, align_corners=False, scales=(0.0, 0.0, 0.0),
                         num_threads=1):
    """Trilinear 3-D upsampling (the forward) of a Dask array, lazily.

    The same operator as :func:`trilinear_bwd.upsample_trilinear3d`, built as
    a Dask graph: each output block is one kernel call on the window of
    ``x`` that it reads, so the result is bitwise equal to the in-memory
    call, for every chunking and scheduler.

    Parameters
    ----------
    x : dask.array.Array, shape (N, C, iD, iH, iW)
        float32, float64, float16 or bfloat16, with any chunks; C, iD, iH
        and iW > 0.
    output_size : sequence of 3 int, optional
        ``(oD, oH, oW)``; None: ``floor(x.shape[k + 2] * scales[k])``, which
        needs all three scales > 0.
    align_corners : bool, default False
    scales : sequence of 3 float, default (0.0, 0.0, 0.0)
        The multipliers per axis; <= 0 means "not given".
    num_threads : int or None, default 1
        As for :func:`upsample_trilinear3d_backward`.

    Returns
    -------
    dask.array.Array, shape (N, C, oD, oH, oW)
        Of ``x``'s dtype, chunked like ``x`` along N and C; along a split
        spatial axis, at most as many chunks as ``x`` has, with ``x``'s
        boundaries scaled to the output size.

    Raises
    ------
    AclnnError
        At graph construction (161001 / 161002), as the in-memory call would.

    Examples
    --------
    >>> import dask.array as da, trilinear_bwd.dask as tbd
    >>> x = da.ones((1, 2, 8, 8, 8), dtype="float32", chunks=(1, 2, 4, 8, 8))
    >>> y = tbd.upsample_trilinear3d(x, (16, 16, 16))
    >>> y.chunks[2], float(y.sum().compute())
    ((8, 8), 8192.0)
    """
    x, whole = _check_forward_arguments(x, output_size, align_corners, scales, num_threads)
    token = tokenize(x.name, whole.input_size, whole.output_size, whole.align_corners,
                     whole.scales, num_threads)
    return _windowed(x, whole, num_threads, f"upsample_trilinear3d-{token}")


# --------------------------------------------------------------------------
# Arguments


def _check_arguments(grad_out, input_size, output_size, align_corners, scales, num_threads):
    # The contract is checked here, at graph construction, with the core's
    # own validation, so that a bad call fails at once rather than in a task.
    if grad_out is not None and input_size is None:
        raise NullArgumentError("inputSize must not be None")
    grad_out = _checked_dask_array(grad_out, "gradOut", "upsample_trilinear3d_backward")
    input_size, output_size, scales, first = one_call_sizes(
        tuple(grad_out.shape), input_size, output_size, scales)
    _threads.resolve(num_threads)
    call = check(BACKWARD, _stand_in(grad_out), None, output_size, input_size, align_corners,
                 scales, allocate=True, input_first=first, batch_limits=False)
    return grad_out, call


def _stand_in(arr):
    """A NumPy array of ``arr``'s shape and dtype that holds no memory, for the contract's check.

    The whole call is checked on it, except for the batch-size limits
    (``batch_limits=False``), which belong to one kernel call (checked per
    block, :func:`_windowed`), not to a batch spread over a cluster.
    """
    return np.broadcast_to(np.zeros((), dtype=arr.dtype), tuple(arr.shape))


def _checked_dask_array(arr, name, one_call):
    """The source array's own checks, named ``name``; returned without empty spatial chunks.

    ``one_call`` names the in-memory function to suggest for other arrays.
    """
    if arr is None:
        raise NullArgumentError(f"{name} must not be None")
    if not isinstance(arr, da.Array):
        raise invalid(
            f"{name} must be a dask.array.Array, got {type(arr).__name__} (use "
            f"trilinear_bwd.{one_call} for in-memory arrays, or wrap "
            "it with dask.array.from_array)"
        )
    check_5d(arr.ndim, name)
    if any(np.isnan(n) for n in arr.shape):
        raise invalid(f"{name} must have known chunk sizes, got unknown (NaN) sizes; "
                      "call compute_chunk_sizes() first")
    if any(0 in arr.chunks[k] and arr.shape[k] for k in (2, 3, 4)):
        # Empty spatial chunks read and write nothing.
        arr = arr.rechunk(arr.chunks[:2] + tuple(
            tuple(c for c in arr.chunks[k] if c) or arr.chunks[k] for k in (2, 3, 4)))
    return arr


def _check_forward_arguments(x, output_size, align_corners, scales, num_threads):
    """The forward's checks at graph construction; ``(x, whole)`` as for the backward."""
    x = _checked_dask_array(x, "self", "upsample_trilinear3d")
    _threads.resolve(num_threads)
    output_size, scales = forward_sizes(x.shape, output_size, scales)
    call = check(FORWARD, _stand_in(x), None, output_size, None, align_corners, scales,
                 allocate=True, batch_limits=False)
    return x, call


# --------------------------------------------------------------------------
# Every block one kernel call, on the window of the source it reads


class _WindowAxis:
    """How one spatial axis is split: result chunks, and the source window of each.

    Attributes
    ----------
    bounds : list of int
        Result chunk ``r`` holds target points ``bounds[r]:bounds[r+1]``.
    windows : list of tuple
        ``(t0, t1, s0)`` per result chunk (the kernel's window).
    parts : list of list of tuple
        Per result chunk, ``(q, dst, src)`` for each source chunk ``q`` that
        overlaps its window: ``source_chunk_q[src]`` fills ``window[dst]``.
    extents : list of int
        The window's length per result chunk.
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
        self.windows, self.parts, self.extents = [], [], []
        for t0, t1 in zip(self.bounds[:-1], self.bounds[1:]):
            s0, s1 = terms.source_range(t0, t1)
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

    @property
    def chunks(self):
        """The result's chunks along the axis."""
        return tuple(b - a for a, b in zip(self.bounds[:-1], self.bounds[1:]))


def _window_block(blocks, placements, window_shape, whole, window, num_threads, terms,
                  block_keys):
    """One result block: its source window assembled from ``blocks``, then one kernel call.

    ``terms`` are the three axes' :class:`trilinear_bwd._tables.AxisTerms`
    (graph nodes, built once at graph construction): handed to the table
    cache, so that planning the block cuts its tables from them instead of
    rebuilding the axes.  ``block_keys`` name the source chunks, for errors.
    """
    read = whole.op.source
    expected = whole.source.dtype
    blocks = [np.asarray(b) for b in blocks]
    # One rule for every block, wherever it falls in the window: a chunk
    # whose dtype is not the array's is refused, as the in-memory call
    # refuses arrays of another dtype than it was given (nothing is cast).
    for block, key in zip(blocks, block_keys):
        if block.dtype != expected:
            raise invalid(f"{read} chunk {key} must have the array's dtype "
                          f"{_dtype_name(expected)}, got {_dtype_name(block.dtype)} (a dask "
                          "array whose chunks do not match its declared dtype; cast it with "
                          ".astype first)")
    for axis_terms in terms:
        _tables.remember(axis_terms)
    first = blocks[0]
    if len(blocks) == 1 and first.shape == window_shape and not is_misaligned(first):
        source = first
    else:
        # Several chunks (or a misaligned one, as dask.distributed can hand
        # a task): one contiguous window.
        source = _pool.empty(window_shape, first.dtype, False)
        for block, (dst, src) in zip(blocks, placements):
            source[dst] = block[src]
    # From the pool of faulted memory that results give back when they die
    # (as the one call's results do): a worker computing block after block
    # then stops paying the page faults of fresh memory.
    out = _pool.empty(window_shape[:2] + tuple(t1 - t0 for t0, t1, _ in window),
                      source.dtype, False)
    run_once(check_window(whole, source, window, out), num_threads)
    return out


def _dtype_name(dtype):
    """The dtype's name as users write it (``float32``, ``bfloat16``)."""
    return np.dtype(dtype).name


def _windowed(source, whole, num_threads, name):
    """The graph: one :func:`_window_block` task per result block."""
    acc = dtype_info(np.dtype(source.dtype))[1]
    forward = whole.op.forward
    # The limits of one kernel call that the batch chunks alone break, before
    # any table is built: each block has at least one point per spatial
    # axis, and the limits only grow with the points (the whole call's
    # spatial sizes were checked by _check_arguments).
    n, c = (max(ch, default=0) for ch in source.chunks[:2])
    check_limits(whole.op, (n, c, 1, 1, 1), (n, c, 1, 1, 1))
    # Each axis's terms, built once here (O(n) NumPy): every chunk's source
    # window comes from them, and they go into the graph as one node per
    # axis, which every task of the graph reads its tables from.
    terms = [_tables.axis_terms(whole.input_size[2 + k], whole.output_size[k],
                                whole.align_corners, whole.scales[k], acc, forward,
                                source.dtype)
             for k in range(3)]
    axes = [_WindowAxis(t, source.chunks[2 + k]) for k, t in enumerate(terms)]
    # The size limits of one kernel call, for the largest block, now rather
    # than in a task.
    check_limits(whole.op, (n, c) + tuple(max(a.extents) for a in axes),
                 (n, c) + tuple(max(a.chunks) for a in axes))
    n_chunks, c_chunks = source.chunks[:2]
    terms_keys = [(name + "-terms", k) for k in range(3)]
    dsk = dict(zip(terms_keys, terms))
    for r in np.ndindex(*(len(a.windows) for a in axes)):
        window = tuple(a.windows[k] for a, k in zip(axes, r))
        extents = tuple(a.extents[k] for a, k in zip(axes, r))
        keys, placements = [], []
        for combo in np.ndindex(*(len(a.parts[k]) for a, k in zip(axes, r))):
            pieces = [a.parts[k][m] for a, k, m in zip(axes, r, combo)]
            keys.append(tuple(p[0] for p in pieces))
            placements.append(((slice(None),) * 2 + tuple(p[1] for p in pieces),
                               (slice(None),) * 2 + tuple(p[2] for p in pieces)))
        for i, nb in enumerate(n_chunks):
            for j, cb in enumerate(c_chunks):
                block_keys = [(i, j) + q for q in keys]
                dsk[(name, i, j) + tuple(r)] = (
                    _window_block, [(source.name,) + k for k in block_keys], placements,
                    (nb, cb) + extents, whole, window, num_threads, terms_keys, block_keys)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[source])
    chunks = (n_chunks, c_chunks) + tuple(a.chunks for a in axes)
    return da.Array(graph, name, chunks, meta=np.empty((0,) * 5, dtype=source.dtype))
