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
(per axis, the source points of their terms: ``_axis_terms.source_range``),
assembled from the source chunks that overlap it.  The kernel's windowed
entry (``_operator.check_window``) runs the whole call's per-axis tables
restricted to the block, with the whole axis's weights, so each result
element is the same sum, in the same order, as in the in-memory call: the
result is bitwise equal to it, for any chunking, on every scheduler.  A
result block whose points read nothing (the backward's input points that
no output point reads, downsampling with a given scale) is zeros, as in
the in-memory call, from a task that reads no source.

See ``docs/dask.md`` for when to use it and how to chunk.
"""


import itertools
import math
import sys

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

from ._core import _axis_terms, _pool, _threads
from ._core._arguments import forward_sizes, one_call_sizes
from ._core._arrays import dtype_info, is_channels_last, is_misaligned
from ._core._block_windows import WindowAxis, block_calls
from ._core._coerce import invalid
from ._core._operator import BACKWARD, FORWARD, check, check_5d, check_limits, check_window
from ._core._runner import run_once
from ._core._status import NullArgumentError

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
    output_size, align_corners, scales
        As for :func:`trilinear_bwd.upsample_trilinear3d_backward`:
        ``(oD, oH, oW)``, by default ``grad_out.shape[2:]``; corner-aligned
        (True) or half-pixel (False, the default) coordinates; the forward's
        multipliers per axis (D, H, W), <= 0 meaning "not given".
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


# A block whose source window holds fewer bytes than this is computed in one
# kernel call on its window, copied unless one chunk holds it: in runs
# (block_calls), its calls' planning would cost more than the copy they save
# (docs/dask.md, "Memory").
SPLIT_BYTES = 8 * 2**20
# A block that reads at most half of a source chunk of at least this many
# bytes gets that part from a task of its own (_part), rather than the chunk:
# smaller chunks are handed whole, a task costing more than they hold.
PART_BYTES = 2**20


def _window_block(pieces, spans, runs, nc, whole, num_threads, terms, chunk_keys):
    """One result block, from the pieces of source its window overlaps, without copying them.

    ``pieces`` are source chunks, or the parts of them that the block reads
    (:func:`_part`); ``spans[p]`` are the source points piece ``p`` holds,
    ``(a, b)`` per spatial axis.  ``runs[k]`` split the block's targets on
    axis ``k`` (``_block_windows.WindowAxis.runs``); ``nc`` is the block's N
    and C extent.  Each of :func:`~._core._block_windows.block_calls` is one
    kernel call (the windowed entry, writing its part of the result block): on a view of the one piece that holds every
    source point it reads (when aligned), else on a copy of just those
    points.  A task therefore holds its pieces, its result and a copy of at
    most the points next to one chunk boundary -- or, for a block whose
    window is under ``SPLIT_BYTES``, of its window (``docs/dask.md``,
    "Memory").

    ``terms`` are the three axes' :class:`trilinear_bwd._core._axis_terms.AxisTerms`
    (graph nodes, built once at graph construction): handed to the table
    cache, so that planning cuts the tables from them instead of
    rebuilding the axes.  ``chunk_keys`` name each piece's chunk, for errors.
    """
    read = whole.op.source
    expected = whole.source.dtype
    pieces = [np.asarray(b) for b in pieces]
    # One rule for every chunk, wherever it falls in the window: a chunk
    # whose dtype is not the array's is refused, as the in-memory call
    # refuses arrays of another dtype than it was given (nothing is cast).
    for piece, key in zip(pieces, chunk_keys):
        if piece.dtype != expected:
            raise invalid(f"{read} chunk {key} must have the array's dtype "
                          f"{_dtype_name(expected)}, got {_dtype_name(piece.dtype)} (a dask "
                          "array whose chunks do not match its declared dtype; cast it with "
                          ".astype first)")
    for axis_terms in terms:
        _axis_terms.remember(axis_terms)
    first = tuple(r[0][0] for r in runs)
    out = _empty(nc + tuple(r[-1][1] - t0 for r, t0 in zip(runs, first)), expected)
    channels_last = is_channels_last(pieces[0])
    with _axis_terms.window_scope():
        for call in block_calls(runs):
            source = _source(pieces, spans, tuple((s0, s1) for _, _, s0, s1 in call), nc,
                             channels_last)
            target = out[(slice(None),) * 2 + tuple(slice(t0 - f, t1 - f)
                                                     for (t0, t1, _, _), f in zip(call, first))]
            window = tuple((t0, t1, s0) for t0, t1, s0, _ in call)
            run_once(check_window(whole, source, window, target), num_threads)
    return out


def _source(pieces, spans, wanted, nc, channels_last):
    """The source points ``wanted`` (``(s0, s1)`` per axis) of one kernel call.

    A view of the one piece that holds them all, when there is one and it
    is aligned (``dask.distributed`` can hand a task a chunk at any byte
    offset); else a copy, from every piece that holds some of them.
    """
    reads = [p for p, span in enumerate(spans)
             if all(a < s1 and s0 < b for (a, b), (s0, s1) in zip(span, wanted))]
    if len(reads) == 1 and all(a <= s0 and s1 <= b
                               for (a, b), (s0, s1) in zip(spans[reads[0]], wanted)):
        view = pieces[reads[0]][_overlap(wanted, spans[reads[0]])[1]]
        if not is_misaligned(view):
            return view
    source = _empty(nc + tuple(s1 - s0 for s0, s1 in wanted), pieces[0].dtype, channels_last)
    for p in reads:
        dst, src = _overlap(wanted, spans[p])
        source[dst] = pieces[p][src]
    return source


def _overlap(wanted, span):
    """``(dst, src)``: where a piece holding ``span`` fills the points ``wanted``, and from where.

    Both are (N, C, D, H, W) indices; ``wanted`` and ``span`` are ``(a, b)``
    per spatial axis, in the whole axis's points.
    """
    dst, src = [slice(None)] * 2, [slice(None)] * 2
    for (s0, s1), (a, b) in zip(wanted, span):
        lo, hi = max(a, s0), min(b, s1)
        dst.append(slice(lo - s0, hi - s0))
        src.append(slice(lo - a, hi - a))
    return tuple(dst), tuple(src)


def _part(chunk, index, dtype):
    """A copy of the part ``index`` of a chunk that a block reads (the chunk can then go).

    ``dtype`` is the array's: a chunk of another is copied as it is, for
    the block's task to refuse.
    """
    part = np.asarray(chunk)[index]
    if part.dtype != dtype:
        return np.array(part)
    copy = _empty(part.shape, dtype, is_channels_last(part))
    copy[...] = part
    return copy


def _zeros(shape, dtype):
    """A result block of zeros: points that read nothing, as the in-memory call gives them."""
    block = _empty(shape, dtype)
    block[...] = 0
    return block


def _empty(shape, dtype, channels_last=False):
    """An uninitialised (N, C, D, H, W) array: a result block, a part, a call's copied source.

    C innermost in memory if ``channels_last``.  From the pool of faulted
    memory, except on a ``dask.distributed`` worker: a worker's memory
    limit counts every byte of its process, but Dask accounts for, spills
    and frees only the results it holds, so blocks the pool kept after
    their arrays died would be memory nobody can free there.  On the local
    schedulers the process is the caller's, and blocks come from the pool
    as the one call's results do (a worker computing block after block does
    not pay the page faults of fresh memory).
    """
    if not _on_distributed_worker():
        return _pool.empty(shape, dtype, channels_last)
    if not channels_last:
        return np.empty(shape, dtype)
    n, c, d, h, w = shape
    return np.empty((n, d, h, w, c), dtype).transpose(0, 4, 1, 2, 3)


def _on_distributed_worker():
    """True in a task that a ``dask.distributed`` worker runs."""
    worker = sys.modules.get("distributed.worker")
    if worker is None:
        return False
    try:
        worker.get_worker()
    except ValueError:
        return False
    return True


def _dtype_name(dtype):
    """The dtype's name as users write it (``float32``, ``bfloat16``)."""
    return np.dtype(dtype).name


def _carried(whole):
    """The whole call as every task carries it: sizes, flags and dtype, and no elements.

    ``whole`` was checked on a stand-in of the source's shape that holds no
    memory (a broadcast array), but pickling writes out every element of a
    broadcast array: carried as it is, each task sent to a worker would hold
    the whole source's bytes.  Tasks read the call's sizes and flags and the
    source's dtype only.
    """
    return whole.replace(source=np.empty((0,) * 5, whole.source.dtype))


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
    terms = [_axis_terms.axis_terms(whole.input_size[2 + k], whole.output_size[k],
                                whole.align_corners, whole.scales[k], acc, forward,
                                source.dtype)
             for k in range(3)]
    axes = [WindowAxis(t, source.chunks[2 + k]) for k, t in enumerate(terms)]
    # The size limits of one kernel call, for the largest block, now rather
    # than in a task.
    check_limits(whole.op, (n, c) + tuple(max(a.extents) for a in axes),
                 (n, c) + tuple(max(a.chunks) for a in axes))
    n_chunks, c_chunks = source.chunks[:2]
    terms_keys = [(name + "-terms", k) for k in range(3)]
    dsk = dict(zip(terms_keys, terms))
    carried = _carried(whole)
    itemsize = np.dtype(source.dtype).itemsize
    for r in np.ndindex(*(len(a.windows) for a in axes)):
        windows = [a.windows[k] for a, k in zip(axes, r)]
        if None in windows:
            # A block whose points read nothing on one axis: every term of
            # its points is zero there, so the block is zeros.
            shape = tuple(a.chunks[k] for a, k in zip(axes, r))
            for i, nb in enumerate(n_chunks):
                for j, cb in enumerate(c_chunks):
                    dsk[(name, i, j) + tuple(r)] = (_zeros, (nb, cb) + shape, source.dtype)
            continue
        wanted = [(s0, s0 + a.extents[k]) for a, k, (_, _, s0) in zip(axes, r, windows)]
        # The source chunks the block's window overlaps, with the points
        # each holds and the points the block reads from it.
        overlaps = []
        for parts in itertools.product(*(a.parts[k] for a, k in zip(axes, r))):
            held = tuple((a.src_bounds[q], a.src_bounds[q + 1])
                         for a, (q, _, _) in zip(axes, parts))
            used = tuple((s0 + dst.start, s0 + dst.stop)
                         for (_, dst, _), (s0, _) in zip(parts, wanted))
            overlaps.append((tuple(q for q, _, _ in parts), held, used))
        window_points = math.prod(s1 - s0 for s0, s1 in wanted)
        for i, nb in enumerate(n_chunks):
            for j, cb in enumerate(c_chunks):
                volume = nb * cb * itemsize
                if volume * window_points < SPLIT_BYTES:
                    # Small: one call on the window (copied unless one chunk holds it).
                    runs = [[w + (s1, False)] for w, (_, s1) in zip(windows, wanted)]
                else:
                    runs = [a.runs[k] for a, k in zip(axes, r)]
                pieces, spans, chunk_keys = [], [], []
                for q, held, used in overlaps:
                    chunk = (source.name, i, j) + q
                    whole_points = math.prod(hi - lo for lo, hi in held)
                    used_points = math.prod(hi - lo for lo, hi in used)
                    if volume * whole_points >= PART_BYTES and 2 * used_points <= whole_points:
                        # The block reads a slab of a large chunk (its
                        # neighbour's, next to a boundary): a task of its own
                        # cuts it, so that the block holds the slab, not the
                        # chunk, and only the slab travels between workers.
                        part = (name + "-part", i, j) + tuple(r) + q
                        dsk[part] = (_part, chunk, _overlap(used, held)[1], source.dtype)
                        pieces.append(part)
                        spans.append(used)
                    else:
                        pieces.append(chunk)
                        spans.append(held)
                    chunk_keys.append((i, j) + q)
                dsk[(name, i, j) + tuple(r)] = (
                    _window_block, pieces, spans, runs, (nb, cb), carried, num_threads,
                    terms_keys, chunk_keys)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[source])
    chunks = (n_chunks, c_chunks) + tuple(a.chunks for a in axes)
    return da.Array(graph, name, chunks, meta=np.empty((0,) * 5, dtype=source.dtype))
