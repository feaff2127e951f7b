# Small inline helpers of the kernel (both operators: a target computed from
# a source); the structs they read are declared in _kernel_plan.h.
#
# Everything here is ``noexcept nogil`` and trusts its arguments: the Python
# layer validates the call, and ``_plan.py`` fills the typed plan's
# ``Problem`` once per geometry (``_kernel_plan.pxd``).  The helpers are
# compiled into each kernel variant, so they pick up that variant's
# instruction set; the passes they call are C headers with intrinsics, not
# Cython (docs/design.md, Decisions: intrinsics-in-c).
#
# Arithmetic contract, shared by every layout and variant: each output element
# of a pass is ``((0 + w0*x0) + w1*x1) + ...`` over its terms in a fixed order.
# Because the order never depends on the layout, the thread or the ISA, the
# result is bitwise identical across all of them.

from libc.stdint cimport int64_t, uint16_t
from libc.string cimport memset

# The structs the helpers read, declared once (_kernel_plan.h, through
# _kernel_plan.pxd).
from trilinear_bwd._kernels._kernel_plan cimport Axis, Row

cdef extern from "_convert.h" nogil:
    float tb_half_to_float(uint16_t h) noexcept
    uint16_t tb_float_to_half(float f) noexcept
    float tb_bf16_to_float(uint16_t h) noexcept
    uint16_t tb_float_to_bf16(float f) noexcept
    float tb_half_to_float_soft(uint16_t h) noexcept
    uint16_t tb_float_to_half_soft(float f) noexcept
    float tb_double_to_float_odd(double d) noexcept
    uint16_t tb_double_to_half(double d) noexcept
    uint16_t tb_double_to_bf16(double d) noexcept
    int tb_have_f16c() noexcept

cdef extern from "_row_sums.h" nogil:
    enum: TB_PF_NEXT_ITEM
    void tb_prefetch_rows(const void* rows, int64_t row_bytes, const Axis* ax, int64_t i,
                          int64_t nbytes) noexcept
    enum: TB_ROWS_F16, TB_ROWS_BF16, TB_ROWS_F32
    void tb_reduce_wide_rows(double* acc, int64_t acc_stride, const void* rows,
                             int64_t stride, const Axis* ax, int64_t first, int64_t n_rows,
                             int64_t n, int kind) noexcept
    void tb_reduce_rows_f64(double* acc, int64_t acc_stride, const double* rows,
                            int64_t stride, const Axis* ax, int64_t first, int64_t n_rows,
                            int64_t n, int prefetch) noexcept
    void tb_axpy_f64(double* acc, double w, const double* x, int64_t n, int first) noexcept
    void tb_axpy2_f64(double* acc, double w0, const double* x0, double w1, const double* x1,
                      int64_t n, int first) noexcept

cdef extern from "_w_channels.h" nogil:
    void tb_w_channels_f64(double* out, int64_t out_stride, const double* row,
                           int64_t row_stride, int64_t n_rows, const Axis* ax, int64_t v,
                           int stream) noexcept
    int tb_hw_channels_f64(double* out, int64_t out_stride, const double* rows,
                           int64_t row_stride, int64_t n_rows, const Axis* ax_h,
                           const Axis* ax_w, int64_t v, int stream) noexcept

cdef extern from "_store.h" nogil:
    void tb_stream_copy(void* dst, const void* src, int64_t nbytes) noexcept
    void tb_store_fence() noexcept

cdef extern from "_w_gather.h" nogil:
    enum: TB_OUT_F32, TB_OUT_F16, TB_OUT_BF16, TB_OUT_F64
    void tb_gather_rows_d(void* out, int64_t out_stride, const double* rows,
                          int64_t row_stride, int64_t n_rows, const Axis* ax, int stream,
                          int kind) noexcept


# Shared with Python, defined once in _constants.h (see _constants_h.pxd).
from trilinear_bwd._kernels._constants_h cimport TB_DT_FLOAT16, TB_DT_FLOAT32, TB_DT_FLOAT64


# The kernel sums every dtype in float64 (docs/numerics.md, "One rounding"):
# the helpers below take float64 rows of sums.


cdef inline void fill_zero(double* x, int64_t n) noexcept nogil:
    memset(x, 0, n * sizeof(double))


cdef inline void axpy(double* acc, double w, const double* x, int64_t n,
                      bint first) noexcept nogil:
    # acc = (first ? 0 : acc) + w * x  (see _row_sums.h).
    tb_axpy_f64(acc, w, x, n, first)


cdef inline void axpy2(double* acc, double w0, const double* x0, double w1,
                       const double* x1, int64_t n, bint first) noexcept nogil:
    # Two terms at once: acc = ((first ? 0 : acc) + w0 * x0) + w1 * x1, the
    # same roundings in the same order as two axpy calls, with half the
    # loads and stores of acc.
    tb_axpy2_f64(acc, w0, x0, w1, x1, n, first)


cdef inline void load_row(double* dst, const char* base, int64_t off,
                          const Row* r, int dtype) noexcept nogil:
    # Gather one source row into contiguous float64 elements.
    cdef int64_t o, k, n = r.n_inner, si = r.s_inner, so = r.s_outer
    cdef const float* f32
    cdef const double* f64
    cdef const uint16_t* u16
    if dtype == TB_DT_FLOAT32:
        f32 = (<const float*> base) + off
        for o in range(r.n_outer):
            for k in range(n):
                dst[o * n + k] = f32[o * so + k * si]
    elif dtype == TB_DT_FLOAT64:
        f64 = (<const double*> base) + off
        for o in range(r.n_outer):
            for k in range(n):
                dst[o * n + k] = f64[o * so + k * si]
    elif dtype == TB_DT_FLOAT16:
        u16 = (<const uint16_t*> base) + off
        for o in range(r.n_outer):
            for k in range(n):
                dst[o * n + k] = tb_half_to_float(u16[o * so + k * si])
    else:
        u16 = (<const uint16_t*> base) + off
        for o in range(r.n_outer):
            for k in range(n):
                dst[o * n + k] = tb_bf16_to_float(u16[o * so + k * si])


cdef inline void _round_16(uint16_t* dst, int64_t step, const double* src, int64_t n,
                           int dtype) noexcept nogil:
    # n results rounded once to float16 (dtype TB_DT_FLOAT16) or bfloat16,
    # into every ``step``-th element of dst.
    cdef int64_t k
    if dtype == TB_DT_FLOAT16:
        for k in range(n):
            dst[k * step] = tb_double_to_half(src[k])
    else:
        for k in range(n):
            dst[k * step] = tb_double_to_bf16(src[k])


cdef inline void store_row(char* base, int64_t off, const double* src,
                           const Row* r, int dtype, bint stream, void* narrow) noexcept nogil:
    # Scatter one finished target row, rounding once to the storage type
    # (float64 sums to float16/bfloat16 through float32 rounded to odd, which
    # is one rounding: _convert.h).  Streamed rows are unit-stride: rounded
    # into ``narrow`` if need be, then copied with non-temporal stores.
    cdef int64_t o, k, n = r.n_inner, si = r.s_inner, so = r.s_outer
    cdef float* f32
    cdef double* f64
    cdef uint16_t* u16
    cdef bint unit = r.n_outer == 1 and si == 1
    if stream:
        if dtype == TB_DT_FLOAT64:
            tb_stream_copy(base + off * sizeof(double), src, n * sizeof(double))
            return
        if dtype == TB_DT_FLOAT32:
            f32 = <float*> narrow
            for k in range(n):
                f32[k] = <float> src[k]
            tb_stream_copy(base + off * 4, narrow, n * 4)
            return
        u16 = <uint16_t*> narrow
        _round_16(u16, 1, src, n, dtype)
        tb_stream_copy(base + off * 2, narrow, n * 2)
        return
    if dtype == TB_DT_FLOAT32:
        f32 = (<float*> base) + off
        if unit:
            for k in range(n):
                f32[k] = <float> src[k]
        else:
            for o in range(r.n_outer):
                for k in range(n):
                    f32[o * so + k * si] = <float> src[o * n + k]
    elif dtype == TB_DT_FLOAT64:
        f64 = (<double*> base) + off
        for o in range(r.n_outer):
            for k in range(n):
                f64[o * so + k * si] = src[o * n + k]
    else:
        u16 = (<uint16_t*> base) + off
        if unit:
            _round_16(u16, 1, src, n, dtype)
        else:
            for o in range(r.n_outer):
                _round_16(u16 + o * so, si, src + o * n, n, dtype)


cdef inline void reduce_rows(double* acc, int64_t acc_stride, const double* rows,
                             int64_t stride, const Axis* ax, int64_t first, int64_t n_rows,
                             int64_t n, bint prefetch) noexcept nogil:
    # Rows r < n_rows of acc (acc_stride apart): target points first + r of
    # axis ax, each the sum over its terms t of weight[t] * rows[src[t] * stride :];
    # ``prefetch`` when the rows come from memory (source) rather than cache
    # (see _row_sums.h).
    tb_reduce_rows_f64(acc, acc_stride, rows, stride, ax, first, n_rows, n, prefetch)


cdef inline void w_pass_channels(double* out, int64_t out_stride, const double* rows,
                                 int64_t row_stride, int64_t n_rows, const Axis* ax, int64_t v,
                                 bint stream) noexcept nogil:
    # w_pass of n_rows rows, ``row_stride`` apart, into rows ``out_stride`` apart.
    tb_w_channels_f64(out, out_stride, rows, row_stride, n_rows, ax, v, stream)


cdef inline bint hw_pass_channels(double* out, int64_t out_stride, const double* rows,
                                  int64_t row_stride, int64_t n_rows, const Axis* ax_h,
                                  const Axis* ax_w, int64_t v, bint stream) noexcept nogil:
    # The H and W passes of n_rows target rows at once from the D-reduced
    # rows, where both tables have two terms a point and v has a copy
    # (_w_channels.h, tb_hw_channels_); False, having done nothing, otherwise.
    return tb_hw_channels_f64(out, out_stride, rows, row_stride, n_rows, ax_h, ax_w, v, stream)


cdef inline void w_pass(double* out, const double* row, const Axis* ax, int64_t v,
                        bint stream) noexcept nogil:
    # The W pass of one row of v channels per position, as an axpy over the
    # v contiguous channels per term (the channels-last W pass, and the
    # channels-first one of an axis without a padded table), optionally with
    # streaming stores.
    w_pass_channels(out, 0, row, 0, 1, ax, v, stream)


cdef inline void w_pass_rows(double* out, int64_t out_stride, const double* rows,
                             int64_t row_stride, int64_t n_rows, const Axis* ax,
                             bint stream) noexcept nogil:
    # The channels-first W pass of n_rows rows, ``row_stride`` apart, into
    # rows ``out_stride`` apart.  Each row has its zero sentinel at index L
    # and 32 readable elements after it.  Over the padded table, a gather
    # along the row (_w_gather.h, one table set-up for all the rows); an
    # axis whose padded table would be too large (width 0, see
    # _tables.PADDED_LIMIT) takes the axpy with one channel: the same terms
    # in the same order, so the same bits.
    cdef int64_t y
    if ax.width == 0:
        for y in range(n_rows):
            w_pass(out + y * out_stride, rows + y * row_stride, ax, 1, stream)
    else:
        tb_gather_rows_d(out, out_stride, rows, row_stride, n_rows, ax, stream, TB_OUT_F64)


cdef inline void w_pass_rows_to(char* target, int64_t off, int64_t out_stride,
                                const double* rows, int64_t row_stride, int64_t n_rows,
                                const Axis* ax, bint stream, int dtype) noexcept nogil:
    # The channels-first W pass of n_rows float64 rows straight into target
    # rows of any dtype (element ``off`` on, ``out_stride`` apart), each sum
    # rounded once in registers: no row buffer, no second pass.  Other
    # dtypes than float64 need the padded table (ax.width > 0).
    if dtype == TB_DT_FLOAT64:
        w_pass_rows((<double*> target) + off, out_stride, rows, row_stride, n_rows, ax, stream)
    elif dtype == TB_DT_FLOAT32:
        tb_gather_rows_d((<float*> target) + off, out_stride, rows, row_stride, n_rows, ax,
                         stream, TB_OUT_F32)
    else:
        tb_gather_rows_d((<uint16_t*> target) + off, out_stride, rows, row_stride, n_rows, ax,
                         stream, TB_OUT_F16 if dtype == TB_DT_FLOAT16 else TB_OUT_BF16)
