"""A whole axis's terms (the CSR that tables are cut from) and the windows a Dask block reads.

A block of a larger call (``trilinear_bwd.dask``) cuts its table from the
whole axis's terms (:class:`AxisTerms`, built once and cached) instead of
rebuilding the axis; :func:`source_range` says which source points a block
of targets reads, and :func:`window_scope` shares a task's windows between
its calls.
"""

import contextlib
import threading

import numpy as np

from . import _fork, _table_loops
from ._coefficients import _coefficient_chunks
from ._pytorch_rounding import _half_name
from ._table_cache import _cache

# The windows a task cuts (window_scope), by thread.
_scope = threading.local()
_fork.renew(globals(), "_scope", threading.local)


@contextlib.contextmanager
def window_scope():
    """Within it, this thread's windowed tables are cut once each and shared; forgotten at exit.

    What ``trilinear_bwd.dask`` runs a block's kernel calls in: the calls
    share some of their windows, which nothing outside the task uses.
    """
    outer = getattr(_scope, "tables", None)
    _scope.tables = {} if outer is None else outer
    try:
        yield
    finally:
        _scope.tables = outer


class AxisTerms:
    """Every term of one whole axis, sorted by target: the CSR that tables are cut from.

    Attributes
    ----------
    key : tuple
        The arguments it was built from (its cache key).
    ptr : ndarray of int64, shape (n_targets + 1,)
    src : ndarray of int64
        Source point of each term.
    weight : ndarray
        Weight of each term, in float64 (the accumulation type).
    nbytes : int
    """

    def __init__(self, key, ptr, src, weight):
        self.key = key
        self.ptr, self.src, self.weight = ptr, src, weight
        for value in (ptr, src, weight):
            value.flags.writeable = False
        self.nbytes = ptr.nbytes + src.nbytes + weight.nbytes

    def source_range(self, start, stop):
        """``(s0, s1)``: the source points that targets ``start:stop`` read; None: none.

        None only in the backward: downsampling with a given scale can leave
        input points that no output point reads (their gradient is zero).
        """
        used = self.src[self.ptr[start]:self.ptr[stop]]
        if not used.size:
            return None
        return int(used.min()), int(used.max()) + 1

    def cut(self, t0, t1, s0):
        """``(ptr, src, weight)`` of targets ``t0:t1``, sources numbered from ``s0``."""
        a, b = self.ptr[t0], self.ptr[t1]
        return self.ptr[t0:t1 + 1] - a, self.src[a:b] - s0, self.weight[a:b]


def _terms_key(n_in, n_out, align_corners, scale, dtype, forward, storage):
    name = _half_name(storage) if forward else None
    return (int(n_in), int(n_out), bool(align_corners), float(scale), np.dtype(dtype).str,
            bool(forward), name)


def axis_terms(n_in, n_out, align_corners, scale, dtype, forward=False, storage=None):
    """The whole axis's :class:`AxisTerms` (cached): built once, cut into any window.

    Parameters are those of :func:`axis_table`.
    """
    key = _terms_key(n_in, n_out, align_corners, scale, dtype, forward, storage)
    terms = _cache.get(("terms", key))
    if terms is None:
        terms = build_terms(key)
        remember(terms)
    return terms


def remember(terms):
    """Put ``terms`` (from :func:`axis_terms`, perhaps in another process) in the cache.

    ``trilinear_bwd.dask`` builds each axis's terms once, at graph
    construction, as a node of the graph, and each task hands them over
    here before it plans its block, so that no task rebuilds the axis.
    """
    _cache.put(("terms", terms.key), terms, terms.nbytes)


def build_terms(key):
    """Build the :class:`AxisTerms` of ``key`` (see :func:`axis_terms`): O(n) NumPy."""
    n_in, n_out, align_corners, scale, dtype, forward, storage = key
    chunks = _coefficient_chunks(n_in, n_out, align_corners, scale, np.dtype(dtype).type,
                                 storage)
    if forward or n_in == n_out:
        # Targets are the output points, already in order, two terms each:
        # l0's, then l1's (the identity's backward is the same table).
        points = np.empty((n_out, 2), np.int64)
        weight = np.empty((n_out, 2), np.float64)
        for start, x0, x1, l0, l1 in chunks:
            stop = start + x0.size
            points[start:stop, 0], points[start:stop, 1] = x0, x1
            weight[start:stop, 0], weight[start:stop, 1] = l0, l1
        ptr = np.arange(0, 2 * n_out + 1, 2, dtype=np.int64)
        return AxisTerms(key, ptr, points.ravel(), weight.ravel())
    x0, x1 = np.empty(n_out, np.int64), np.empty(n_out, np.int64)
    w0, w1 = np.empty(n_out, np.float64), np.empty(n_out, np.float64)
    for start, c0, c1, l0, l1 in chunks:
        stop = start + c0.size
        x0[start:stop], x1[start:stop], w0[start:stop], w1[start:stop] = c0, c1, l0, l1
    return AxisTerms(key, *_by_input_point(x0, x1, w0, w1, n_in))


def _by_input_point(x0, x1, w0, w1, n_in):
    """The backward's CSR: the terms grouped by input point, stable in their order.

    Input point ``i`` takes the terms that name it in the order they come
    (by output point ``j``, ``l0``'s before ``l1``'s): a counting sort,
    O(n), in compiled code (``_table_loops.group_by_input_point``).

    Returns
    -------
    ptr, src, weight : ndarray
        As :class:`AxisTerms` holds them.
    """
    ptr = np.empty(n_in + 1, np.int64)
    src = np.empty(2 * x0.size, np.int64)
    weight = np.empty(2 * x0.size, w0.dtype)
    _table_loops.group_by_input_point(x0, x1, w0, w1, ptr, src, weight)
    return ptr, src, weight


def source_range(n_in, n_out, align_corners, scale, dtype, forward, start, stop, storage=None):
    """``(s0, s1)``: the source points that targets ``start:stop`` of one axis read.

    Parameters are those of :func:`axis_table`; ``dtype`` matters because
    which point a weight falls on follows PyTorch's rounding in the
    opmath type (:func:`pytorch_zero_pattern`).  None where the
    targets read nothing (the backward's input points that no output point
    reads, :meth:`AxisTerms.source_range`).
    """
    return axis_terms(n_in, n_out, align_corners, scale, dtype, forward,
                      storage).source_range(start, stop)
