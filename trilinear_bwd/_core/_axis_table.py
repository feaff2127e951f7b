"""The kernel's table of one axis (or window): the gather form and the padded table, cached.

:func:`axis_table` is what the plan asks for; :class:`AxisTable` holds the
arrays in the C ``Axis`` struct's field order, the padded table (blocked by
``W_BLOCK`` points) filled in compiled code (``_table_loops``).
"""

from dataclasses import dataclass

import numpy as np

from . import _axis_terms, _table_loops
from ._axis_terms import axis_terms
from ._coefficients import _chunks
# The padded table's block of points (_constants.h, _w_gather.h).
from ._constants import W_BLOCK
from ._table_cache import _cache

# The padded table holds ceil(n_in / 8) * 8 * width terms, width being the
# most terms any input point receives.  For the sizes and scales PyTorch's
# rules accept, width stays near 3 * n_out / n_in + 4 and the padded table
# within 32 * n_out + 4 * n_in + 32 terms.  A scale that only CANN's rules
# accept (not checked against n_out) can send every output point to one or
# two input points: width up to 2 * n_out, and a padded table n_in * 2 * n_out
# terms large -- terabytes for axes of 2**20.  Past this many times the terms
# plus one per padded point, the table is not padded (width 0) and the W pass
# walks the unpadded one (_kernel_helpers.pxd, w_pass): the same sums.
PADDED_LIMIT = 16


def axis_table(n_in, n_out, align_corners, scale, dtype, sentinel=None, forward=False,
               window=None, storage=None):
    """Return one axis of the backward (or the forward) in gather (CSR) form (cached, read-only).

    The kernel computes each *target* point from *source* points: target
    ``i`` receives the terms ``ptr[i] <= t < ptr[i+1]``, each
    ``weight[t] * source[src[t]]``.  For the backward the targets are the
    ``n_in`` input points and the sources the ``n_out`` output points;
    terms are ordered by output point, and where ``x0 == x1`` the ``l0``
    term comes before the ``l1`` term.  For the forward (``forward=True``)
    the same coefficients are read the other way: the targets are the
    output points, each with its two terms ``l0 * x[x0]`` then
    ``l1 * x[x1]``.  Zero weights are kept, so that NaN and Inf propagate
    as in PyTorch.

    Parameters
    ----------
    n_in, n_out, align_corners, scale
        As for :func:`axis_coefficients`.
    dtype : numpy dtype
        PyTorch's opmath type for the data (float32, or float64 for float64
        data): which weights are exactly zero follows PyTorch's rounding in
        it (:func:`pytorch_zero_pattern`).  The weights themselves are the
        float64 coefficients, in float64, the kernel's accumulation type for
        every dtype.
    sentinel : int, optional
        Index of a zero the kernel keeps after the row it gathers from.  When
        given, the table also holds the terms padded to the same count per
        input point, the padding being ``0 * row[sentinel]`` (adding +0 leaves
        every sum unchanged), in blocks of 8 points for the vector gather.
    forward : bool, default False
        The forward's table (targets are output points) instead of the
        backward's.
    window : tuple of 3 int, optional
        ``(t0, t1, s0)``: only targets ``t0 <= i < t1`` of the whole axis,
        numbered from ``t0``, each with all of its terms (the whole axis's
        weights, in the same order), their sources numbered from ``s0`` --
        the table of a block of the result computed from the window of the
        source it reads (:func:`source_range`); what ``trilinear_bwd.dask``
        runs each chunk with.  The block's values are then bitwise those of
        the whole call.  The window is cut from the whole axis's terms
        (:func:`axis_terms`), which are built once.
    storage : dtype or str, optional
        The data's dtype, for the forward of float16 and bfloat16 (see
        :func:`axis_coefficients`); ignored otherwise.

    Returns
    -------
    AxisTable
        ``ptr`` (int64, targets + 1), ``src`` (int64, one per term: 2 * n_out,
        fewer in a window) and ``weight`` (``dtype``, likewise), and the padded
        table (``width`` terms per point; 0 without a sentinel, or past
        ``PADDED_LIMIT``) the W pass reads.  The arrays are read-only and,
        except for a window's, shared between calls with the same arguments
        while the table cache (:data:`CACHE_BYTES`) holds them, so that
        planning a call in a training loop costs microseconds, not
        milliseconds.
    """
    terms = axis_terms(n_in, n_out, align_corners, scale, dtype, forward, storage)
    if window is not None:
        # A block's window is not cached: each block has its own, and kept
        # they would pile up on a Dask worker past the tasks that cut them.
        # Within a window_scope (a task's calls) each is cut once.
        key = (terms.key, sentinel, tuple(map(int, window)))
        memo = getattr(_axis_terms._scope, "tables", None)
        table = None if memo is None else memo.get(key)
        if table is None:
            table = _padded_table(*terms.cut(*key[2]), sentinel)
            if memo is not None:
                memo[key] = table
        return table
    key = ("table", terms.key, sentinel)
    table = _cache.get(key)
    if table is None:
        table = _padded_table(terms.ptr, terms.src, terms.weight, sentinel)
        _cache.put(key, table, table.nbytes)
    return table


@dataclass(frozen=True, eq=False)
class AxisTable:
    """The kernel's table of one axis (or window), in the C ``Axis`` struct's field order.

    Built by :func:`axis_table`; the typed plan (``_kernel_plan.KernelPlan``)
    takes the address of each array once.  Every array is C-contiguous,
    read-only and of the dtype the struct names.  Compared by identity
    (``eq=False``): arrays have no truth value to compare with.

    Attributes
    ----------
    ptr, src : ndarray of int64
        Gather form: target point ``i`` receives the terms
        ``ptr[i] <= t < ptr[i+1]``, each ``weight[t] * source[src[t]]``.
    weight : ndarray of float64
    width : int
        Terms per point of the padded table (0: not padded; the W pass
        walks the gather form).
    padded_src, padded_rel : ndarray of int32
    padded_weight : ndarray of float64
        The padded table, blocked by ``W_BLOCK`` points, k-major in a block.
    window, block_window : ndarray of int32
    mode : ndarray of int8
        How the vector W pass reads each (block, k) (``GATHER``, ``WINDOW*``)
        and each block (``block_window``: the window every k shares, or
        ``W_STRIDE3``, or -1).
    """

    __slots__ = ("ptr", "src", "weight", "width", "padded_src", "padded_weight",
                 "padded_rel", "window", "mode", "block_window")

    ptr: np.ndarray
    src: np.ndarray
    weight: np.ndarray
    width: int
    padded_src: np.ndarray
    padded_weight: np.ndarray
    padded_rel: np.ndarray
    window: np.ndarray
    mode: np.ndarray
    block_window: np.ndarray

    def __post_init__(self):
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                value.flags.writeable = False

    @property
    def nbytes(self):
        """Bytes of the table's arrays (what the table cache counts)."""
        return sum(getattr(self, name).nbytes for name in self.__slots__ if name != "width")


def _padded_table(ptr, src, weight, sentinel):
    """The kernel's table of one axis (or window) from its CSR terms."""
    n_targets = ptr.size - 1
    n_terms = int(ptr[-1] - ptr[0])
    ptr = np.ascontiguousarray(ptr, dtype=np.int64)
    src = np.ascontiguousarray(src, dtype=np.int64)
    weight = np.ascontiguousarray(weight)
    # (Terms per point, chunk by chunk: no array of the whole axis's counts.)
    width = max((int((ptr[a + 1:b + 1] - ptr[a:b]).max()) for a, b in _chunks(n_targets)),
                default=0)
    blocks = -(-n_targets // W_BLOCK)
    if sentinel is None or blocks * W_BLOCK * width > PADDED_LIMIT * (n_terms + blocks * W_BLOCK):
        width = 0
    size = blocks * W_BLOCK * width
    padded = dict(padded_src=np.empty(size, np.int32), padded_weight=np.empty(size, weight.dtype),
                  padded_rel=np.empty(size, np.int32), window=np.empty(blocks * width, np.int32),
                  mode=np.empty(blocks * width, np.int8), block_window=np.zeros(blocks, np.int32))
    if width:
        _table_loops.fill_padded(ptr, src, weight, sentinel, **padded)
    return AxisTable(ptr=ptr, src=src, weight=weight, width=width, **padded)
