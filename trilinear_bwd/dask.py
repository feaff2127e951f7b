"""The backward on Dask arrays: lazily, on Dask's own schedulers and clusters.

``trilinear_bwd.dask.upsample_trilinear3d_backward`` takes a
``dask.array.Array`` of ``grad_out`` and returns a ``dask.array.Array`` of
``grad_input``, without computing anything.  Dask is an optional dependency
(``pip install trilinear_bwd[dask]``) that only this module imports.

Two kinds of chunking, two kinds of task:

- **N and C chunks** (one chunk spanning each of D, H and W): every block is
  an independent problem, run by the compiled kernel with its own workspace.
  The result is bitwise equal to the single-machine call.
- **D, H or W chunks**: every grad_out block contributes to a known box of
  input points (per axis ``[x0[first], x1[last]]`` of the block's output
  range, from the same float64 tables as the kernel).  A task computes that
  *partial* with a NumPy routine doing the kernel's arithmetic restricted to
  the block; a second task per result block adds the partials that overlap
  it in a fixed order (chunk-index order), then rounds once to the storage
  type.  For a given chunking the result is the same on every scheduler and
  every run, and equal to the single-machine result within float rounding
  (bitwise away from chunk boundaries).

See ``docs/dask.md`` for when to use it and how to chunk.
"""


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

from ._api import upsample_trilinear3d_backward as _kernel_call
from ._status import NullArgumentError
from ._tables import axis_coefficients
from ._arguments import (
    _int_list,
    element_name,
    invalid,
    one_call_sizes,
    resolve_num_threads,
    validate,
)

__all__ = ["upsample_trilinear3d_backward"]


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
        None follows the worker's ``OMP_NUM_THREADS``.  Blocks chunked along
        D, H or W are computed with NumPy, single-threaded, whatever this is.

    Returns
    -------
    dask.array.Array, shape (N, C, iD, iH, iW)
        Of ``grad_out``'s dtype, chunked like ``grad_out`` along N and C.
        Along an axis that ``grad_out`` splits, result chunk ``r`` starts at
        the first input point that grad_out chunk ``r`` contributes to
        (chunks that would be empty are merged), so chunk counts match or
        shrink; an unsplit axis is one chunk.

    Raises
    ------
    AclnnError
        At graph construction, with ``.status`` 161001 or 161002, for any
        argument that breaks the operator contract, as the in-memory call
        would (the size limits of one kernel call apply to each N/C block).
        161002 also if ``grad_out`` is not a Dask array.

    Notes
    -----
    With D, H and W each in one chunk, every block runs the compiled kernel
    and the result is bitwise equal to the in-memory call on the whole array.
    Otherwise each element is within float rounding of it, identical on every
    scheduler and run for the same chunks; see ``docs/dask.md``.

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
    grad_out, input_size, output_size, scales = _check_arguments(
        grad_out, input_size, output_size, align_corners, scales, num_threads)
    align_corners = bool(align_corners)
    token = tokenize(grad_out.name, input_size, output_size, align_corners, scales, num_threads)
    if all(len(grad_out.chunks[k]) == 1 for k in (2, 3, 4)):
        return _nc_blocks(grad_out, input_size, output_size, align_corners, scales,
                          num_threads, token)
    return _spatial_blocks(grad_out, input_size, align_corners, scales, token)


# --------------------------------------------------------------------------
# Arguments


def _check_arguments(grad_out, input_size, output_size, align_corners, scales, num_threads):
    # The contract is checked here, at graph construction, with the core's
    # own validation, so that a bad call fails at once rather than in a task.
    if grad_out is None:
        raise NullArgumentError("gradOut must not be None")
    if input_size is None:
        raise NullArgumentError("inputSize must not be None")
    if not isinstance(grad_out, da.Array):
        raise invalid(
            f"gradOut must be a dask.array.Array, got {type(grad_out).__name__} (use "
            "trilinear_bwd.upsample_trilinear3d_backward for in-memory arrays, or wrap "
            "it with dask.array.from_array)"
        )
    if grad_out.ndim != 5:
        raise invalid(f"gradOut must be 5-D (N, C, D, H, W), got {grad_out.ndim}-D")
    if any(np.isnan(n) for n in grad_out.shape):
        raise invalid("gradOut must have known chunk sizes, got unknown (NaN) sizes; "
                      "call compute_chunk_sizes() first")
    if any(0 in grad_out.chunks[k] and grad_out.shape[k] for k in (2, 3, 4)):
        # Empty spatial chunks contribute nothing and have no input range.
        grad_out = grad_out.rechunk(grad_out.chunks[:2] + tuple(
            tuple(c for c in grad_out.chunks[k] if c) or grad_out.chunks[k] for k in (2, 3, 4)))
    input_size, output_size, scales, first = one_call_sizes(
        tuple(grad_out.shape), input_size, output_size, scales)
    input_size = _int_list(input_size, "inputSize", 5, first)
    resolve_num_threads(num_threads)

    for k, axis in enumerate("NC"):
        name = element_name("inputSize", k, first)
        if input_size[k] < 0:
            raise invalid(f"{name} must be >= 0, got {input_size[k]}")
        if grad_out.shape[k] != input_size[k]:
            raise invalid(f"gradOut {axis} must equal {name} = {input_size[k]}, "
                          f"got {grad_out.shape[k]}")
    # Everything else, on a stand-in that holds no memory: with N = C = 0 the
    # checks are those of the whole problem minus the batch-size limits,
    # which belong to one kernel call (checked per block below), not to a
    # batch spread over a cluster.
    spatial = tuple(grad_out.shape[2:])
    stand_in = np.broadcast_to(np.zeros((), dtype=grad_out.dtype), (0, 0) + spatial)
    args = validate(stand_in, output_size, (0, 0) + input_size[2:], align_corners, *scales,
                    None, allocate=True, input_first=first)
    if all(len(grad_out.chunks[k]) == 1 for k in (2, 3, 4)):
        biggest = (max(grad_out.chunks[0]), max(grad_out.chunks[1]))
        block = np.broadcast_to(np.zeros((), dtype=grad_out.dtype), biggest + spatial)
        validate(block, output_size, biggest + input_size[2:], align_corners, *scales,
                 None, allocate=True, input_first=first)
    return grad_out, input_size, args.output_size, args.scales


def _acc_dtype(dtype):
    return np.dtype(np.float64 if np.dtype(dtype).name == "float64" else np.float32)


# --------------------------------------------------------------------------
# N and C chunks: one kernel call per block


def _kernel_block(block, input_spatial, output_size, align_corners, scales, num_threads):
    # dask.distributed can hand a task a block deserialised at any byte
    # offset of a network frame; the one call copies such a block (it needs
    # element alignment).
    return _kernel_call(np.asarray(block), input_spatial, output_size=output_size,
                        align_corners=align_corners, scales=scales, num_threads=num_threads)


def _nc_blocks(grad_out, input_size, output_size, align_corners, scales, num_threads, token):
    spatial = input_size[2:]
    return grad_out.map_blocks(
        _kernel_block, spatial, output_size, align_corners, scales, num_threads,
        chunks=grad_out.chunks[:2] + tuple((n,) for n in spatial),
        dtype=grad_out.dtype,
        meta=np.empty((0,) * 5, dtype=grad_out.dtype),
        name=f"upsample_trilinear3d_backward-{token}",
    )


# --------------------------------------------------------------------------
# D, H and W chunks: partials per grad_out block, then a fixed-order sum


class _Axis:
    """How one spatial axis is split: grad_out chunks, their input ranges, result chunks.

    Attributes
    ----------
    n_in, n_out : int
    scale : float
    bounds : list of int
        grad_out chunk ``q`` covers output points ``bounds[q]:bounds[q+1]``.
    lo, hi : list of int
        ... and contributes to input points ``lo[q]..hi[q]`` (inclusive).
    result_bounds : list of int
        Result chunk ``r`` holds input points ``result_bounds[r]:result_bounds[r+1]``.
    sources : list of list of int
        The grad_out chunks whose range meets result chunk ``r``, increasing.
    """

    def __init__(self, n_in, n_out, align_corners, scale, chunks):
        self.n_in, self.n_out, self.scale = n_in, n_out, scale
        self.bounds = [0]
        for c in chunks:
            self.bounds.append(self.bounds[-1] + c)
        # The points of float32 and float64 data can differ by one where
        # PyTorch's rounding decides (_tables.pytorch_zero_pattern): cover both.
        pairs = [axis_coefficients(n_in, n_out, align_corners, scale, t)[:2]
                 for t in (np.float32, np.float64)]
        x0 = np.minimum(pairs[0][0], pairs[1][0])
        x1 = np.maximum(pairs[0][1], pairs[1][1])
        # x0 and x1 never decrease along the axis, so a run of output points
        # touches exactly the input points between its first x0 and last x1.
        self.lo = [int(x0[b]) for b in self.bounds[:-1]]
        self.hi = [int(x1[b - 1]) for b in self.bounds[1:]]
        cuts = sorted({0, n_in, *self.lo[1:]})
        self.result_bounds = cuts
        self.sources = [
            [q for q in range(len(chunks)) if self.lo[q] < stop and self.hi[q] >= start]
            for start, stop in zip(cuts[:-1], cuts[1:])
        ]

    @property
    def part_chunks(self):
        return tuple(h - l + 1 for l, h in zip(self.lo, self.hi))

    @property
    def result_chunks(self):
        return tuple(b - a for a, b in zip(self.result_bounds[:-1], self.result_bounds[1:]))


def _axis_terms(n_in, n_out, align_corners, scale, start, stop, acc):
    """The backward of one axis restricted to output points ``start:stop``.

    Returns ``lo`` (the first input point touched), ``counts`` (terms per
    input point ``lo + i``), and ``src``, ``weight`` of shape
    ``(max count, len(counts))``: slot ``k`` of point ``i`` is its ``k``-th
    term, in the kernel's order (increasing source point, the ``l0`` term
    before the ``l1`` term of one point), weights rounded from float64 to
    ``acc`` as the kernel's tables are.  Zero weights are kept, as in the kernel.
    """
    x0, x1, l0, l1 = (a[start:stop] for a in axis_coefficients(n_in, n_out, align_corners,
                                                                  scale, acc))
    lo = int(x0[0])
    length = int(x1[-1]) - lo + 1
    target = np.stack([x0, x1], axis=1).ravel() - lo
    source = np.repeat(np.arange(stop - start, dtype=np.int64), 2)
    weight = np.stack([l0, l1], axis=1).ravel()
    order = np.argsort(target, kind="stable")
    counts = np.bincount(target, minlength=length)
    first = np.zeros(length, dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    slot = np.arange(target.size) - np.repeat(first, counts)
    width = int(counts.max())
    src = np.zeros((width, length), dtype=np.int64)
    w = np.zeros((width, length), dtype=acc)
    src[slot, target[order]] = source[order]
    w[slot, target[order]] = weight[order].astype(acc)
    return lo, counts, src, w


def _as_slice(idx):
    # Index arrays that step evenly (the usual case: integer factors, and the
    # run of points that have a k-th term) become slices, so that NumPy reads
    # and updates views instead of gathering and scattering copies.
    if idx.size == 1:
        return slice(int(idx[0]), int(idx[0]) + 1)
    step = int(idx[1] - idx[0])
    if step > 0 and np.all(np.diff(idx) == step):
        return slice(int(idx[0]), int(idx[-1]) + 1, step)
    return idx


def _axis_pass(x, axis, counts, src, w):
    # out[i] = ((0 + w0*x[s0]) + w1*x[s1]) + ... along ``axis``: the kernel's
    # per-element arithmetic, so a block spanning the whole volume gives the
    # kernel's bits.  Slot k only touches the points that have a k-th term.
    shape = list(x.shape)
    shape[axis] = counts.size
    out = np.zeros(shape, dtype=x.dtype)
    lead = (slice(None),) * axis
    tail = (1,) * (x.ndim - axis - 1)
    # 0 * Inf = NaN is the intended result (zero weights are kept), and the
    # kernel does not warn about it; neither does this.
    scratch = np.empty(shape, dtype=x.dtype)  # reused: fresh temporaries cost page faults
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(src.shape[0]):
            rows = np.flatnonzero(counts > k)
            target = lead + (_as_slice(rows),)
            weight = w[k, rows].reshape((-1,) + tail)
            source = x[lead + (_as_slice(src[k, rows]),)]
            if isinstance(target[-1], slice):
                term = np.multiply(source, weight, out=scratch[target])
                out[target] += term
            else:
                out[target] = out[target] + source * weight
    return out


def _partial_block(block, align_corners, axes, block_id=None):
    """The contribution of one grad_out block, in the accumulation type.

    ``axes`` holds ``(n_in, n_out, scale, bounds)`` per spatial axis; the
    block is chunk ``block_id[2 + k]`` along axis ``k``.  Passes run D, then
    H, then W, as in the kernel.
    """
    acc = _acc_dtype(block.dtype)
    x = np.asarray(block).astype(acc, copy=False)
    for k, (n_in, n_out, scale, bounds) in enumerate(axes):
        q = block_id[2 + k]
        _, counts, src, w = _axis_terms(n_in, n_out, align_corners, scale,
                                        bounds[q], bounds[q + 1], acc)
        x = _axis_pass(x, 2 + k, counts, src, w)
    return x


def _sum_partials(parts, placements, shape, dtype):
    """Add ``parts`` into a zero block in the order given, then round once.

    ``placements[i]`` is ``(dst, src)``: ``parts[i][src]`` lands on ``dst``.
    The order is the caller's (increasing chunk index), never the
    scheduler's, so every run gives the same bits.
    """
    out = np.zeros(shape, dtype=_acc_dtype(dtype))
    with np.errstate(invalid="ignore", over="ignore"):
        for part, (dst, src) in zip(parts, placements):
            out[dst] += part[src]
    return out.astype(dtype, copy=False)


def _spatial_blocks(grad_out, input_size, align_corners, scales, token):
    dtype = grad_out.dtype
    acc = _acc_dtype(dtype)
    axes = [
        _Axis(input_size[2 + k], grad_out.shape[2 + k], align_corners, scales[k],
              grad_out.chunks[2 + k])
        for k in range(3)
    ]
    parts = grad_out.map_blocks(
        _partial_block, align_corners,
        tuple((a.n_in, a.n_out, a.scale, tuple(a.bounds)) for a in axes),
        chunks=grad_out.chunks[:2] + tuple(a.part_chunks for a in axes),
        dtype=acc,
        meta=np.empty((0,) * 5, dtype=acc),
        name=f"upsample_trilinear3d_backward-partial-{token}",
    )

    name = f"upsample_trilinear3d_backward-{token}"
    n_chunks, c_chunks = grad_out.chunks[:2]
    dsk = {}
    for rd in range(len(axes[0].sources)):
        for rh in range(len(axes[1].sources)):
            for rw in range(len(axes[2].sources)):
                r = (rd, rh, rw)
                keys, placements = [], []
                for qd in axes[0].sources[rd]:
                    for qh in axes[1].sources[rh]:
                        for qw in axes[2].sources[rw]:
                            keys.append((qd, qh, qw))
                            placements.append(_placement(axes, r, (qd, qh, qw)))
                spatial = tuple(a.result_chunks[i] for a, i in zip(axes, r))
                for i, n in enumerate(n_chunks):
                    for j, c in enumerate(c_chunks):
                        dsk[(name, i, j) + r] = (
                            _sum_partials, [(parts.name, i, j) + q for q in keys],
                            placements, (n, c) + spatial, dtype)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[parts])
    chunks = (n_chunks, c_chunks) + tuple(a.result_chunks for a in axes)
    return da.Array(graph, name, chunks, meta=np.empty((0,) * 5, dtype=dtype))


def _placement(axes, r, q):
    # Where partial q overlaps result block r: (slices into r, slices into q).
    dst, src = [slice(None)] * 2, [slice(None)] * 2
    for a, rk, qk in zip(axes, r, q):
        start = max(a.result_bounds[rk], a.lo[qk])
        stop = min(a.result_bounds[rk + 1], a.hi[qk] + 1)
        dst.append(slice(start - a.result_bounds[rk], stop - a.result_bounds[rk]))
        src.append(slice(start - a.lo[qk], stop - a.lo[qk]))
    return tuple(dst), tuple(src)
