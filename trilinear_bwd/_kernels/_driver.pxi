# The kernel of both operators (a target computed from a source through
# per-axis tables), compiled once per instruction-set variant: see
# baseline.pyx, avx2.pyx and avx512.pyx, which only
# include this file.
#
# Work is split into items (slice b, target plane a), or (slice b, target
# planes a and a + 1) in channels-last mode.  An item reads the source planes
# that feed its planes, reduces them over D (vectorised along the contiguous
# row), then each H row, then W, and writes each of its target planes of
# slice b once.  Items share nothing but the read-only source, so any static
# split across threads - over slices, or inside one slice when there are
# few - computes every value with the same operations in the same order.

from libc.stdint cimport int64_t, uint16_t, uintptr_t
from cython.parallel cimport prange

from trilinear_bwd._kernels._constants_h cimport (
    TB_LINE,
    TB_MAX_PLANES_PER_ITEM,
    TB_READ_BFLOAT16,
    TB_READ_FLOAT16,
    TB_READ_FLOAT32,
    TB_READ_IN_PLACE,
)
from trilinear_bwd._kernels._kernel_plan cimport KernelPlan, Problem, RunTeam
from trilinear_bwd._kernels._kernel_helpers cimport (
    axpy,
    axpy2,
    fill_zero,
    hw_pass_channels,
    load_row,
    reduce_rows,
    store_row,
    tb_float_to_half,
    tb_float_to_half_soft,
    tb_half_to_float,
    tb_half_to_float_soft,
    tb_prefetch_rows,
    TB_PF_NEXT_ITEM,
    tb_reduce_wide_rows,
    TB_ROWS_BF16,
    TB_ROWS_F16,
    TB_ROWS_F32,
    tb_have_f16c,
    tb_store_fence,
    w_pass,
    w_pass_channels,
    w_pass_rows,
    w_pass_rows_to,
)
from trilinear_bwd._kernels._openmp cimport omp_get_thread_num

import numpy as np

cdef enum:
    # Zeros from each acc_h row's sentinel on (within its 32 spare elements):
    # the W gather reads a term of padding from the sentinel with weight 0,
    # which adds +0 only where the sentinel holds a number, not whatever
    # an earlier item left there (0 * NaN is NaN); the 15 after it with it,
    # as docs/design.md's workspace table states.
    W_ZEROS = 16


cdef inline void _reduce_source(double* acc, const Problem* p, int64_t a,
                                const char* source, int64_t base, int64_t stride,
                                double* conv, int64_t n) noexcept nogil:
    # The D pass of target plane a: the sum over the source rows at
    # ``base + src[t] * stride`` elements of its terms t in the D table,
    # read as p.read_mode says.
    cdef const int64_t* src = p.ax_d.src
    cdef const double* w = <const double*> p.ax_d.weight
    cdef int64_t t0 = p.ax_d.ptr[a], t1 = p.ax_d.ptr[a + 1]
    cdef int64_t t = t0
    cdef int64_t o0, o1
    cdef bint pair
    if p.read_mode == TB_READ_IN_PLACE:
        reduce_rows(acc, 0, (<const double*> source) + base, stride, &p.ax_d, a, 1, n, True)
        return
    # float32 and 16-bit rows summed into float64, widened as they are read.
    if p.read_mode == TB_READ_FLOAT32:
        tb_reduce_wide_rows(acc, 0, (<const float*> source) + base, stride, &p.ax_d, a, 1, n,
                            TB_ROWS_F32)
        return
    if p.read_mode == TB_READ_FLOAT16 or p.read_mode == TB_READ_BFLOAT16:
        tb_reduce_wide_rows(acc, 0, (<const uint16_t*> source) + base, stride, &p.ax_d, a, 1, n,
                            TB_ROWS_BF16 if p.read_mode == TB_READ_BFLOAT16 else TB_ROWS_F16)
        return
    # TB_READ_CONVERT: two rows at a time gathered into ``conv`` first.
    if t0 == t1:
        fill_zero(acc, n)
    while t < t1:
        pair = t + 1 < t1
        o0 = base + src[t] * stride
        o1 = base + src[t + 1] * stride if pair else o0
        load_row(conv, source, o0, &p.source.row, p.dtype)
        if pair:
            load_row(conv + n, source, o1, &p.source.row, p.dtype)
            axpy2(acc, w[t], conv, w[t + 1], conv + n, n, t == t0)
        else:
            axpy(acc, w[t], conv, n, t == t0)
        t += 2


cdef inline void _w_and_store(const Problem* p, char* target, int64_t off, double* h_row,
                              double* out, double* ws) noexcept nogil:
    # The W pass of one H-reduced row, written to the target at element ``off``.
    if p.out_direct:
        w_pass((<double*> target) + off, h_row, &p.ax_w, p.v, p.stream)
    else:
        w_pass(out, h_row, &p.ax_w, p.v, False)
        store_row(target, off, out, &p.target.row, p.dtype, p.stream,
                  <void*> ((<char*> ws) + p.off_narrow))


cdef inline void _prefetch_item(const Problem* p, const char* source, int64_t item,
                                int64_t acc_size) noexcept nogil:
    # Ask for the first source bytes of each plane channels-first ``item``
    # (a plane read as one run) sums over D, so that its D pass does not
    # start by waiting on memory while this item's H and W passes leave the
    # memory idle.
    cdef int64_t items_per_slice = p.target_d  # one target plane per channels-first item
    cdef int64_t b = item // items_per_slice
    cdef int64_t a = item - b * items_per_slice
    cdef int64_t esize = acc_size
    if p.read_mode == TB_READ_FLOAT16 or p.read_mode == TB_READ_BFLOAT16:
        esize = 2
    elif p.read_mode == TB_READ_FLOAT32:
        esize = 4
    # No further than the plane: a small plane's 4 KB would be mostly other
    # memory, unmapped pages among it (a page walk each).
    tb_prefetch_rows(source + ((b // p.nb2) * p.source.s_b1
                               + (b % p.nb2) * p.source.s_b2) * esize,
                     p.source.s_d * esize, &p.ax_d, a,
                     min(<int64_t> TB_PF_NEXT_ITEM, p.source_h * p.L * esize))


cdef void _item(const Problem* p, const char* source, char* target, double* ws,
                int64_t item) noexcept nogil:
    # Item = (slice b, target planes a0 .. a0 + p.planes_per_item - 1).
    cdef int64_t per_item = p.planes_per_item
    cdef int64_t items_per_slice = (p.target_d + per_item - 1) // per_item
    cdef int64_t b = item // items_per_slice
    cdef int64_t a0 = (item - b * items_per_slice) * per_item
    cdef int64_t n_planes = min(per_item, p.target_d - a0)
    cdef int64_t b1 = b // p.nb2
    cdef int64_t b2 = b - b1 * p.nb2
    cdef int64_t L = p.L
    cdef double* acc_d = ws
    cdef double* acc_h = ws + p.off_acch
    cdef double* conv = ws + p.off_conv
    cdef double* out = ws + p.off_out
    cdef const int64_t* h_ptr = p.ax_h.ptr
    cdef const int64_t* h_src = p.ax_h.src
    cdef int64_t src_base = b1 * p.source.s_b1 + b2 * p.source.s_b2
    cdef int64_t dst_base = b1 * p.target.s_b1 + b2 * p.target.s_b2 + a0 * p.target.s_d
    cdef int64_t y, row, g, first, last, step, off
    cdef double* h_rows
    cdef double* ring
    cdef int64_t done[TB_MAX_PLANES_PER_ITEM]

    if p.whole_planes:
        # Small channels-last planes, one after the other: D for the whole
        # plane in one sweep (its source plane is one run), then H for all
        # its rows, then W for all of them, a call per pass rather than per
        # row.  Each element takes the same terms in the same order as in
        # the ring below, so the same bits.
        for g in range(n_planes):
            _reduce_source(acc_d, p, a0 + g, source, src_base, p.source.s_d, conv,
                           p.source_h * L)
            off = dst_base + g * p.target.s_d
            if p.out_direct and hw_pass_channels((<double*> target) + off, p.target.s_h, acc_d,
                                                 L, p.target_h, &p.ax_h, &p.ax_w, p.v, p.stream):
                continue    # H and W at once (the forward's tables, common channel counts)
            reduce_rows(acc_h, p.h_stride, acc_d, L, &p.ax_h, 0, p.target_h, L, False)
            if p.out_direct:
                w_pass_channels((<double*> target) + off, p.target.s_h, acc_h, p.h_stride,
                                p.target_h, &p.ax_w, p.v, p.stream)
            else:
                # Rows to be rounded go through a one-row buffer, which stays
                # in L1 where a buffer of the whole plane would not.
                for y in range(p.target_h):
                    _w_and_store(p, target, off + y * p.target.s_h, acc_h + y * p.h_stride,
                                 out, ws)
    elif p.v > 1:
        # Channels-last: one H row at a time, each reduced over W at once.
        # A source row is summed over D when the first H row that needs it
        # comes up, into a ring of p.ring rows per plane (H reads rows in
        # non-decreasing order), so D, H and W all work in L1 and the target
        # stores are spread over the plane rather than bunched after a D
        # sweep of it.  The item's planes take turns row by row: neighbouring
        # target planes read mostly the same source rows, which the second
        # then finds in cache, where a plane's whole share of source (512 KB
        # per source plane at 2x with 32 channels) would have left L2
        # before the next item came to it.
        for g in range(n_planes):
            done[g] = -1
        for row in range(p.target_h):
            if h_ptr[row + 1] > h_ptr[row]:
                first, last = h_src[h_ptr[row]], h_src[h_ptr[row + 1] - 1]
            else:
                first, last = 0, -1
            for g in range(n_planes):
                ring = acc_d + g * p.ring * L
                y = max(done[g] + 1, first)
                done[g] = max(done[g], last)
                while y <= done[g]:
                    _reduce_source(ring + (y % p.ring) * L, p, a0 + g, source,
                                   src_base + y * p.source.s_h, p.source.s_d, conv, L)
                    y += 1
                reduce_rows(acc_h, 0, ring, L, &p.ax_h_ring, row, 1, L, False)
                _w_and_store(p, target, dst_base + g * p.target.s_d + row * p.target.s_h, acc_h,
                             out, ws)
    else:
        # Channels-first: D for the whole plane (one sweep when a plane is one
        # contiguous run read in place), then H for the whole plane, then W:
        # the W gather reads windows of a row at unaligned offsets, which
        # would stall on the H pass's vector stores if it followed them
        # immediately.  The W table's zero sentinels are set first, for the
        # same reason.
        for row in range(p.target_h):
            fill_zero(acc_h + row * p.h_stride + L, W_ZEROS)
        if p.plane_run:
            _reduce_source(acc_d, p, a0, source, src_base, p.source.s_d, conv, p.source_h * L)
            if item + 1 < p.n_items:
                _prefetch_item(p, source, item + 1, sizeof(double))
        else:
            for y in range(p.source_h):
                _reduce_source(acc_d + y * L, p, a0, source, src_base + y * p.source.s_h,
                               p.source.s_d, conv, L)
        reduce_rows(acc_h, p.h_stride, acc_d, L, &p.ax_h, 0, p.target_h, L, False)
        # The W pass, p.w_rows rows per call (each call sets the table up once).
        row = 0
        while row < p.target_h:
            step = min(p.w_rows, p.target_h - row)
            h_rows = acc_h + row * p.h_stride
            off = dst_base + row * p.target.s_h
            if not p.out_direct:
                w_pass_rows(out, p.ax_w.n_target, h_rows, p.h_stride, step, &p.ax_w, False)
                for y in range(step):
                    store_row(target, off + y * p.target.s_h, out + y * p.ax_w.n_target,
                              &p.target.row, p.dtype, p.stream,
                              <void*> ((<char*> ws) + p.off_narrow))
            else:
                # Straight into the target's rows, each sum rounded once.
                w_pass_rows_to(target, off, p.target.s_h, h_rows, p.h_stride, step, &p.ax_w,
                               p.stream, p.dtype)
            row += step
    if p.stream:
        tb_store_fence()


cdef inline char* _first_slot(char* ws) noexcept nogil:
    # Slots start on a cache line; the workspace size includes the TB_LINE
    # bytes of slack this may need, so any buffer the caller passes is usable.
    return <char*> ((<uintptr_t> ws + (TB_LINE - 1)) & ~(<uintptr_t> (TB_LINE - 1)))


cdef void _run(const Problem* p, const char* source, char* target, char* ws,
               int n_threads, char* seen) noexcept nogil:
    # seen[t] is set by every thread t that computed an item, unless seen is
    # NULL: the team size actually used, reported to Python without any timing.
    cdef int64_t item
    cdef int tid
    cdef char* base = _first_slot(ws)
    # Every dtype sums in float64 (docs/numerics.md, "One rounding").
    for item in prange(p.n_items, schedule="static", num_threads=n_threads):
        tid = omp_get_thread_num()
        if seen != NULL:
            seen[tid] = 1
        _item(p, source, target, <double*> (base + tid * p.slot_bytes), item)


cdef void _run_alone(const Problem* p, const char* source, char* target,
                     char* ws) noexcept nogil:
    # _run for a team of one, in the calling thread: the items in order,
    # each into slot 0.
    cdef int64_t item
    cdef char* base = _first_slot(ws)
    for item in range(p.n_items):
        _item(p, source, target, <double*> base, item)


cdef void _run_team(const Problem* p, const char* source, char* target, char* ws,
                    int n_threads) noexcept nogil:
    # The kernel as a C function (RunTeam, _kernel_plan.pxd), for callers
    # that hold a plan and need no count of the threads used: the torch
    # fast path (torch/_fast.pyx, through _runner.Runner.run_raw) calls it
    # without a Python call.
    if p.n_items == 0:
        return
    if n_threads == 1:
        # A team of one: no OpenMP region to start (it costs about as much as
        # the whole kernel of a tiny call), the same items computed the same way.
        _run_alone(p, source, target, ws)
    else:
        _run(p, source, target, ws, n_threads, NULL)


# _run_team's address (RunTeam).
RUN_TEAM = <uintptr_t> <RunTeam> _run_team


def run(KernelPlan plan not None, uintptr_t source, uintptr_t target, uintptr_t workspace,
        int n_threads):
    """Compute the target array at address ``target`` from the source at ``source``.

    Parameters
    ----------
    plan : trilinear_bwd._kernels._kernel_plan.KernelPlan
        The geometry's plan (``trilinear_bwd._core._plan.make_plan``).
    source, target, workspace : int
        Addresses of element [0, 0, 0, 0, 0] of each array and of the
        workspace's first byte.
    n_threads : int
        Team size; at most the number of slots the workspace was sized for.

    Returns
    -------
    int
        The number of threads that computed part of the result.
    """
    cdef const Problem* p = &plan.p
    if p.n_items == 0:
        return 0
    if n_threads == 1:
        with nogil:
            _run_team(p, <const char*> source, <char*> target, <char*> workspace, 1)
        return 1
    seen = bytearray(n_threads)
    cdef char* flags = seen
    with nogil:
        _run(p, <const char*> source, <char*> target, <char*> workspace, n_threads, flags)
    return len(seen) - seen.count(0)


def has_f16c():
    """Return True if this variant converts float16 with F16C instructions."""
    return bool(tb_have_f16c())


def half_to_float_bits(const uint16_t[::1] src, bint soft=False):
    """Widen binary16 bit patterns to float32 with this variant's converter (tests)."""
    out = np.empty(src.shape[0], dtype=np.float32)
    cdef float[::1] dst = out
    cdef Py_ssize_t k
    for k in range(src.shape[0]):
        dst[k] = tb_half_to_float_soft(src[k]) if soft else tb_half_to_float(src[k])
    return out


def float_to_half_bits(const float[::1] src, bint soft=False):
    """Round float32 values to binary16 bit patterns with this variant's converter (tests)."""
    out = np.empty(src.shape[0], dtype=np.uint16)
    cdef uint16_t[::1] dst = out
    cdef Py_ssize_t k
    for k in range(src.shape[0]):
        dst[k] = tb_float_to_half_soft(src[k]) if soft else tb_float_to_half(src[k])
    return out
