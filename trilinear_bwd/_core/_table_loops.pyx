"""The per-term loops of planning an axis, in compiled code.

Called by ``_axis_terms`` and ``_axis_table``.

Two linear passes that NumPy could only write as dozens of whole-chunk
temporaries: the backward's grouping of an axis's terms by input point (a
counting sort) and the fill of the kernel's padded table with its read
modes.  Each takes arrays its caller has allocated and checked, fills them,
and holds the GIL only to take their buffers; the results are bitwise those
of the NumPy construction that ``tests/test_tables.py`` keeps as the
reference.
"""

from cython cimport floating
from libc.stdint cimport int8_t, int32_t, int64_t, uint32_t

cimport trilinear_bwd._kernels._constants_h as h


def group_by_input_point(const int64_t[::1] x0, const int64_t[::1] x1,
                         const floating[::1] w0, const floating[::1] w1,
                         int64_t[::1] ptr, int64_t[::1] src, floating[::1] weight):
    """Group the backward's terms by input point: a stable counting sort.

    Output point ``j`` has two terms, ``w0[j]`` on input point ``x0[j]``
    and ``w1[j]`` on ``x1[j]``.  Input point ``i`` receives the terms
    ``ptr[i] <= t < ptr[i+1]``, in the order they come (by ``j``, ``w0``'s
    before ``w1``'s): what a stable sort of the interleaved points gives.

    Parameters
    ----------
    x0, x1 : int64 arrays of shape (n_out,)
        Input points, each in ``[0, n_in)``.
    w0, w1 : float32 or float64 arrays of shape (n_out,)
    ptr : int64 array of shape (n_in + 1,)
        Filled with the groups' bounds.
    src, weight : arrays of shape (2 * n_out,)
        Filled with each term's output point and weight.
    """
    cdef Py_ssize_t n_out = x0.shape[0], n_in = ptr.shape[0] - 1, i, j
    cdef int64_t place
    with nogil:
        for i in range(n_in + 1):
            ptr[i] = 0
        for j in range(n_out):
            ptr[x0[j] + 1] += 1
            ptr[x1[j] + 1] += 1
        for i in range(n_in):
            ptr[i + 1] += ptr[i]
        # ptr[i] is the next free place of point i while the terms are
        # placed, the end of its group after: shifted back by one point.
        for j in range(n_out):
            place = ptr[x0[j]]
            ptr[x0[j]] = place + 1
            src[place], weight[place] = j, w0[j]
            place = ptr[x1[j]]
            ptr[x1[j]] = place + 1
            src[place], weight[place] = j, w1[j]
        for i in range(n_in, 0, -1):
            ptr[i] = ptr[i - 1]
        ptr[0] = 0


def fill_padded(const int64_t[::1] ptr, const int64_t[::1] src, const floating[::1] weight,
                int32_t sentinel, int32_t[::1] padded_src, floating[::1] padded_weight,
                int32_t[::1] padded_rel, int32_t[::1] window, int8_t[::1] mode,
                int32_t[::1] block_window):
    """Fill the padded table of ``width`` terms a point, blocked by ``W_BLOCK`` points.

    Entry ``(b, k, p)`` of the padded arrays (k-major inside block ``b``)
    holds term ``k`` of point ``b * W_BLOCK + p``, or padding:
    ``0 * source[sentinel]``, relative index -1.  Every output array is
    written whole.

    Parameters
    ----------
    ptr, src, weight : arrays
        The axis's (or window's) gather form: point ``i`` has the terms
        ``ptr[i] <= t < ptr[i+1]`` (``ptr[0]`` need not be 0), sources
        numbered from 0.
    sentinel : int
        The source index padding reads (with weight 0).
    padded_src, padded_weight, padded_rel : arrays of shape (blocks * W_BLOCK * width,)
        Filled with each entry's source, weight (0 for padding) and source
        less its k's window (-1 for padding).
    window, mode : arrays of shape (blocks * width,)
        Filled per ``(b, k)``: the lowest real source (0 where there is
        none; the block's where it is shared), and how the W pass reads the
        k: ``WINDOW8``, ``WINDOW16`` or ``WINDOW32`` where its real sources
        span under 8, 16 or 32 elements, else ``GATHER``.
    block_window : array of shape (blocks,)
        Filled per block: the lowest source where all of the block's
        sources lie within 8 elements (every k's window is then it);
        ``W_STRIDE3`` where every k reads ``W_BLOCK`` real sources 3 apart
        or is padding alone, one k at least reading; else -1.  Its length
        and ``window``'s give the width.
    """
    cdef Py_ssize_t n_blocks = block_window.shape[0]
    cdef Py_ssize_t width = window.shape[0] // n_blocks if n_blocks else 0
    cdef Py_ssize_t n_targets = ptr.shape[0] - 1
    cdef Py_ssize_t b, k, p, t, e, row
    cdef int64_t first
    cdef int32_t s, lo, hi, block_lo, block_hi, span
    cdef bint shared, every_k, some_k, apart
    with nogil:
        for b in range(n_blocks):
            # The block's entries and, per k, its real sources' bounds.
            block_lo, block_hi = -1, -1
            for k in range(width):
                row = (b * width + k) * h.TB_W_BLOCK
                lo, hi = -1, -1
                for p in range(h.TB_W_BLOCK):
                    t = b * h.TB_W_BLOCK + p
                    e = row + p
                    if t < n_targets and k < ptr[t + 1] - ptr[t]:
                        first = ptr[t] + k
                        s = <int32_t>src[first]
                        padded_src[e] = s
                        padded_weight[e] = weight[first]
                        if lo < 0 or s < lo:
                            lo = s
                        if s > hi:
                            hi = s
                    else:
                        padded_src[e] = -1
                        padded_weight[e] = 0
                if hi >= 0:
                    if block_lo < 0 or lo < block_lo:
                        block_lo = lo
                    if hi > block_hi:
                        block_hi = hi
                    span = hi - lo
                    window[b * width + k] = lo
                    if span < 8:
                        mode[b * width + k] = h.TB_WINDOW8
                    elif span < 16:
                        mode[b * width + k] = h.TB_WINDOW16
                    elif span < 32:
                        mode[b * width + k] = h.TB_WINDOW32
                    else:
                        mode[b * width + k] = h.TB_GATHER
                else:
                    window[b * width + k] = 0
                    mode[b * width + k] = h.TB_WINDOW8
            shared = block_hi >= 0 and block_hi - block_lo < 8
            block_window[b] = block_lo if shared else -1
            if shared:
                for k in range(width):
                    window[b * width + k] = block_lo
            else:
                # Read 3 apart: every k is W_BLOCK real sources each 3 past
                # the one before, or padding alone; one k at least reading.
                every_k, some_k = True, False
                for k in range(width):
                    row = (b * width + k) * h.TB_W_BLOCK
                    if padded_src[row] < 0:
                        # Padding alone, or a k that reads but not 3 apart.
                        for p in range(1, h.TB_W_BLOCK):
                            if padded_src[row + p] >= 0:
                                every_k = False
                                break
                        continue
                    apart = True
                    for p in range(1, h.TB_W_BLOCK):
                        if padded_src[row + p] != padded_src[row + p - 1] + 3:
                            apart = False
                            break
                    if apart:
                        some_k = True
                    else:
                        every_k = False
                if every_k and some_k:
                    block_window[b] = h.TB_W_STRIDE3
            for k in range(width):
                row = (b * width + k) * h.TB_W_BLOCK
                lo = window[b * width + k]
                for p in range(h.TB_W_BLOCK):
                    e = row + p
                    if padded_src[e] < 0:
                        padded_rel[e] = -1
                        padded_src[e] = sentinel
                    else:
                        padded_rel[e] = padded_src[e] - lo
