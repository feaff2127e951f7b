/*
 * The D and H passes: weighted sums of rows, each output element
 *     acc = ((0 + w0 * x0) + w1 * x1) + ...
 * over its terms in table order.  Plain axpys (one or two terms per sweep)
 * and the register-accumulating row sums, over float32 or float64 rows, and
 * over float16 / bfloat16 rows read in place and widened to float32 (widening
 * is exact, so the roundings and their order are those of float32 rows).
 *
 * In C rather than Cython for `restrict` (without it the compiler versions
 * every loop behind a run-time overlap check, which costs more than the work
 * for short rows) and for the vector intrinsics (_simd.h).  The explicit
 * `0 +` keeps the first term's rounding identical to every later one (and
 * turns -0 into +0, as a zero-initialised accumulator does); without
 * -ffast-math the compiler may not drop it.  Every variant performs the same
 * additions in the same order, so all of them, vector or scalar, give the
 * same bits.
 */
#ifndef TRILINEAR_BWD_ROW_SUMS_H
#define TRILINEAR_BWD_ROW_SUMS_H

#include <stdint.h>

#include "_portable.h"
#include "_convert.h"
#include "_simd.h"

#define TB_DEFINE_AXPY(NAME, T)                                                         \
    static inline void NAME(T *restrict acc, T w, const T *restrict x, int64_t n,     \
                            int first)                                                  \
    {                                                                                   \
        if (first)                                                                      \
            for (int64_t k = 0; k < n; ++k)                                             \
                acc[k] = (T)0 + w * x[k];                                               \
        else                                                                            \
            for (int64_t k = 0; k < n; ++k)                                             \
                acc[k] = acc[k] + w * x[k];                                             \
    }

#define TB_DEFINE_AXPY2(NAME, T)                                                        \
    static inline void NAME(T *restrict acc, T w0, const T *restrict x0, T w1,         \
                            const T *restrict x1, int64_t n, int first)                 \
    {                                                                                   \
        if (first)                                                                      \
            for (int64_t k = 0; k < n; ++k)                                             \
                acc[k] = ((T)0 + w0 * x0[k]) + w1 * x1[k];                              \
        else                                                                            \
            for (int64_t k = 0; k < n; ++k)                                             \
                acc[k] = (acc[k] + w0 * x0[k]) + w1 * x1[k];                            \
    }

TB_DEFINE_AXPY(tb_axpy_f32, float)
TB_DEFINE_AXPY(tb_axpy_f64, double)
TB_DEFINE_AXPY2(tb_axpy2_f32, float)
TB_DEFINE_AXPY2(tb_axpy2_f64, double)

/*
 * What the rows hold: the accumulation type itself, or float16 / bfloat16
 * summed into float32.  A compile-time constant in each copy of the sums, so
 * the load is chosen once.
 */
enum { TB_ROWS_SAME = 0, TB_ROWS_F16 = 1, TB_ROWS_BF16 = 2 };

/*
 * The most rows one register sum covers: each vector of acc is summed over
 * up to this many rows in a register and written once, so that a long
 * reduction reads acc neither from L1 nor, for a plane that does not fit
 * there, from L2; more terms continue from the stored value.  Each count up
 * to it gets its own copy with the count known to the compiler, which then
 * unrolls the loop over rows.
 */
#define TB_ROWS_PER_SUM 8

/* Sweeps over grad_out (prefetch set) also prefetch each row TB_PF_AHEAD
 * bytes ahead: the hardware prefetcher alone leaves the core waiting on
 * memory at every page boundary of its several streams.  Past the end of a
 * row this fetches the start of the next one, which the next D row reads.
 * 16 lines ahead: on a core that consumes a line in fewer cycles (AVX-512,
 * or a faster core), half that distance no longer covers the latency. */
#define TB_PF_AHEAD 1024
/* 16-bit rows: twice as far, in bytes (each step consumes half the bytes of
 * a float32 step, and 1 KiB left the core waiting on memory). */
#define TB_PF_AHEAD_16 2048
/* A channels-first item whose plane is one run asks for this many bytes at
 * the start of each grad_out plane the next item sums, before its own H and
 * W passes, which leave the memory idle. */
#define TB_PF_NEXT_ITEM 4096

/* Element k of row x, any kind, in the accumulation type. */
#define TB_ELEM(T, x, k, kind)                                                          \
    ((kind) == TB_ROWS_SAME ? ((const T *)(x))[k]                                       \
                            : (T)tb_widen1(((const uint16_t *)(x))[k], (kind) == TB_ROWS_BF16))
#define TB_ELEM_BYTES(T, kind) ((kind) == TB_ROWS_SAME ? (int64_t)sizeof(T) : 2)

#if defined(TB_LANES_f32)
/* A vector of row x at element k.  Half kinds only reach here as float32
 * (TB_VECTOR_KIND_OK), where the variant has half-type vectors. */
#define TB_LOAD_ROW(T, S, x, k, kind)                                                   \
    ((kind) == TB_ROWS_SAME ? tb_load_##S((const T *)(x) + (k))                         \
                            : TB_LOAD_HALF_##S((const uint16_t *)(x) + (k), (kind) == TB_ROWS_BF16))
#if TB_HAVE_HALF_VECTORS
#define TB_LOAD_HALF_f32 tb_load_half
#define TB_HALF_VECTORS_f32 1
#else
#define TB_LOAD_HALF_f32(p, bf16) tb_zero_f32()
#define TB_HALF_VECTORS_f32 0
#endif
#define TB_LOAD_HALF_f64(p, bf16) tb_zero_f64() /* never: halves sum into float32 */
#define TB_HALF_VECTORS_f64 0
#define TB_VECTOR_KIND_OK(S, kind) ((kind) == TB_ROWS_SAME || TB_HALF_VECTORS_##S)

#if TB_HAVE_MASKS
#define TB_LOAD_ROW_HEAD(T, S, x, k, n, kind)                                           \
    ((kind) == TB_ROWS_SAME                                                             \
         ? tb_load_head_##S((const T *)(x) + (k), (n))                                  \
         : TB_LOAD_HALF_HEAD_##S((const uint16_t *)(x) + (k), (n), (kind) == TB_ROWS_BF16))
#define TB_LOAD_HALF_HEAD_f32 tb_load_half_head
#define TB_LOAD_HALF_HEAD_f64(p, n, bf16) tb_zero_f64()
#endif

#define TB_SUM_ROWS_STEP(T, S)                                                          \
    {                                                                                   \
        tb_vec_##S a = first ? tb_zero_##S() : tb_load_##S(acc + k);                    \
        for (int64_t j = 0; j < m; ++j)                                                 \
            a = tb_add_##S(a, tb_mul_##S(wv[j], TB_LOAD_ROW(T, S, x[j], k, kind)));     \
        tb_store_##S(acc + k, a);                                                       \
    }
#if TB_HAVE_MASKS
/* A partial vector, `part` elements from k, under a mask (see _simd.h). */
#define TB_SUM_ROWS_PART(T, S, part)                                                    \
    {                                                                                   \
        tb_vec_##S a = first ? tb_zero_##S() : tb_load_head_##S(acc + k, (part));       \
        for (int64_t j = 0; j < m; ++j)                                                 \
            a = tb_add_##S(a, tb_mul_##S(wv[j], TB_LOAD_ROW_HEAD(T, S, x[j], k, (part), kind)));\
        tb_store_head_##S(acc + k, a, (part));                                          \
        k += (part);                                                                    \
    }
/* A row longer than a vector starts with the elements before the first
 * vector boundary of x[0], so that the full vectors after them read x[0]
 * (and, for a plane read in one sweep, every row, whose offsets are whole
 * lines apart) without a load that straddles two cache lines, which a
 * 64-byte load at any other offset always does. */
#define TB_SUM_ROWS_ALIGN(T, S)                                                         \
    if (n > TB_LANES_##S) {                                                             \
        const int64_t vbytes = TB_LANES_##S * TB_ELEM_BYTES(T, kind);                   \
        const int64_t head = (int64_t)((0 - (uintptr_t)x[0]) & (uintptr_t)(vbytes - 1)) \
                             / TB_ELEM_BYTES(T, kind);                                  \
        if (head)                                                                       \
            TB_SUM_ROWS_PART(T, S, head)                                                \
    }
/* The last, partial vector of the row. */
#define TB_SUM_ROWS_HEAD(T, S)                                                          \
    if (k < n)                                                                          \
        TB_SUM_ROWS_PART(T, S, n - k)
#else
#define TB_SUM_ROWS_ALIGN(T, S)
#define TB_SUM_ROWS_HEAD(T, S)
#endif
#define TB_SUM_ROWS_VECTOR(T, S)                                                        \
    if (TB_VECTOR_KIND_OK(S, kind)) {                                                   \
        tb_vec_##S wv[TB_ROWS_PER_SUM];                                                 \
        for (int64_t j = 0; j < m; ++j)                                                 \
            wv[j] = tb_set1_##S(w[j]);                                                  \
        TB_SUM_ROWS_ALIGN(T, S)                                                         \
        if (prefetch)                                                                   \
            for (; k + TB_LANES_##S <= n; k += TB_LANES_##S) {                          \
                for (int64_t j = 0; j < m; ++j)                                         \
                    _mm_prefetch((const char *)x[j] + k * TB_ELEM_BYTES(T, kind)        \
                                     + (kind == TB_ROWS_SAME ? TB_PF_AHEAD : TB_PF_AHEAD_16),\
                                 _MM_HINT_T0);                                          \
                TB_SUM_ROWS_STEP(T, S)                                                  \
            }                                                                           \
        for (; k + TB_LANES_##S <= n; k += TB_LANES_##S)                                \
            TB_SUM_ROWS_STEP(T, S)                                                      \
        TB_SUM_ROWS_HEAD(T, S)                                                          \
    }
#else
#define TB_SUM_ROWS_VECTOR(T, S) (void)prefetch;
#endif

/*
 * acc[k] = (((first ? 0 : acc[k]) + w[0] * x[0][k]) + w[1] * x[1][k]) + ...
 * over m <= TB_ROWS_PER_SUM rows, for k < n.
 */
#define TB_DEFINE_SUM_ROWS(T, S)                                                        \
    TB_ALWAYS_INLINE void tb_sum_rows_##S##_m(T *restrict acc, const void *const *x,    \
                                              const T *restrict w, int64_t m, int64_t n,\
                                              int first, int prefetch, int kind)        \
    {                                                                                   \
        int64_t k = 0;                                                                  \
        TB_SUM_ROWS_VECTOR(T, S)                                                        \
        for (; k < n; ++k) {                                                            \
            T a = first ? (T)0 : acc[k];                                                \
            for (int64_t j = 0; j < m; ++j)                                             \
                a = a + w[j] * TB_ELEM(T, x[j], k, kind);                               \
            acc[k] = a;                                                                 \
        }                                                                               \
    }                                                                                   \
    TB_ALWAYS_INLINE void tb_sum_rows_##S(T *restrict acc, const void *const *x,        \
                                          const T *restrict w, int64_t m, int64_t n,    \
                                          int first, int prefetch, int kind)            \
    {                                                                                   \
        switch (m) {                                                                    \
        case 1: tb_sum_rows_##S##_m(acc, x, w, 1, n, first, prefetch, kind); return;    \
        case 2: tb_sum_rows_##S##_m(acc, x, w, 2, n, first, prefetch, kind); return;    \
        case 3: tb_sum_rows_##S##_m(acc, x, w, 3, n, first, prefetch, kind); return;    \
        case 4: tb_sum_rows_##S##_m(acc, x, w, 4, n, first, prefetch, kind); return;    \
        case 5: tb_sum_rows_##S##_m(acc, x, w, 5, n, first, prefetch, kind); return;    \
        case 6: tb_sum_rows_##S##_m(acc, x, w, 6, n, first, prefetch, kind); return;    \
        case 7: tb_sum_rows_##S##_m(acc, x, w, 7, n, first, prefetch, kind); return;    \
        default: /* m == TB_ROWS_PER_SUM */                                             \
            tb_sum_rows_##S##_m(acc, x, w, TB_ROWS_PER_SUM, n, first, prefetch, kind);  \
        }                                                                               \
    }

/*
 * Rows r < n_rows of acc (acc_stride apart): the sum over the terms
 * ptr[r] <= t < ptr[r+1] of w[t] * rows[src[t] * stride :], n elements,
 * TB_ROWS_PER_SUM terms per register sum.  One call covers a whole plane of
 * short rows.  Rows of the accumulation type read from cache (prefetch
 * clear) with one or two terms take the plain axpy loops, which have less to
 * set up per row.
 */
#define TB_DEFINE_REDUCE_ROWS(T, S)                                                     \
    TB_ALWAYS_INLINE void tb_reduce_rows_##S##_body(                                    \
        T *restrict acc, int64_t acc_stride, const void *rows, int64_t stride,          \
        const int64_t *restrict ptr, const int64_t *restrict src, const T *restrict w,  \
        int64_t n_rows, int64_t n, int prefetch, int kind)                              \
    {                                                                                   \
        const void *x[TB_ROWS_PER_SUM];                                                 \
        const int64_t row_bytes = stride * TB_ELEM_BYTES(T, kind);                      \
        for (int64_t r = 0; r < n_rows; ++r) {                                          \
            T *restrict out = acc + r * acc_stride;                                     \
            const int64_t t0 = ptr[r], t1 = ptr[r + 1];                                 \
            if (t0 == t1)                                                               \
                for (int64_t k = 0; k < n; ++k)                                         \
                    out[k] = (T)0;                                                      \
            if (kind == TB_ROWS_SAME && t1 - t0 == 1 && !prefetch) {                    \
                tb_axpy_##S(out, w[t0], (const T *)rows + src[t0] * stride, n, 1);      \
                continue;                                                               \
            }                                                                           \
            if (kind == TB_ROWS_SAME && t1 - t0 == 2 && !prefetch) {                    \
                tb_axpy2_##S(out, w[t0], (const T *)rows + src[t0] * stride, w[t0 + 1], \
                             (const T *)rows + src[t0 + 1] * stride, n, 1);             \
                continue;                                                               \
            }                                                                           \
            for (int64_t t = t0; t < t1;) {                                             \
                const int64_t m = t1 - t < TB_ROWS_PER_SUM ? t1 - t : TB_ROWS_PER_SUM;  \
                for (int64_t j = 0; j < m; ++j)                                         \
                    x[j] = (const char *)rows + src[t + j] * row_bytes;                 \
                tb_sum_rows_##S(out, x, w + t, m, n, t == t0, prefetch, kind);          \
                t += m;                                                                 \
            }                                                                           \
        }                                                                               \
    }

TB_DEFINE_SUM_ROWS(float, f32)
TB_DEFINE_SUM_ROWS(double, f64)
TB_DEFINE_REDUCE_ROWS(float, f32)
TB_DEFINE_REDUCE_ROWS(double, f64)

/* Ask for the first `nbytes` of each row src[t] * row_bytes past `rows`,
 * ptr[0] <= t < ptr[1]: the start of a later D sum, fetched while other work runs. */
static inline void tb_prefetch_rows(const void *rows, int64_t row_bytes,
                                    const int64_t *restrict ptr, const int64_t *restrict src,
                                    int64_t nbytes)
{
#if defined(TB_LANES_f32)
    for (int64_t t = ptr[0]; t < ptr[1]; ++t)
        for (int64_t b = 0; b < nbytes; b += 64)
            _mm_prefetch((const char *)rows + src[t] * row_bytes + b, _MM_HINT_T0);
#else
    (void)rows, (void)row_bytes, (void)ptr, (void)src, (void)nbytes;
#endif
}

/* The entry points: float32 / float64 rows, and 16-bit rows into float32. */
static inline void tb_reduce_rows_f32(float *restrict acc, int64_t acc_stride, const float *rows,
                                      int64_t stride, const int64_t *restrict ptr,
                                      const int64_t *restrict src, const float *restrict w,
                                      int64_t n_rows, int64_t n, int prefetch)
{
    tb_reduce_rows_f32_body(acc, acc_stride, rows, stride, ptr, src, w, n_rows, n, prefetch,
                            TB_ROWS_SAME);
}

static inline void tb_reduce_rows_f64(double *restrict acc, int64_t acc_stride,
                                      const double *rows, int64_t stride,
                                      const int64_t *restrict ptr, const int64_t *restrict src,
                                      const double *restrict w, int64_t n_rows, int64_t n,
                                      int prefetch)
{
    tb_reduce_rows_f64_body(acc, acc_stride, rows, stride, ptr, src, w, n_rows, n, prefetch,
                            TB_ROWS_SAME);
}

/* 16-bit grad_out rows are always read from memory, hence prefetched. */
static inline void tb_reduce_half_rows(float *restrict acc, int64_t acc_stride,
                                       const uint16_t *rows, int64_t stride,
                                       const int64_t *restrict ptr, const int64_t *restrict src,
                                       const float *restrict w, int64_t n_rows, int64_t n,
                                       int bf16)
{
    if (bf16)
        tb_reduce_rows_f32_body(acc, acc_stride, rows, stride, ptr, src, w, n_rows, n, 1,
                                TB_ROWS_BF16);
    else
        tb_reduce_rows_f32_body(acc, acc_stride, rows, stride, ptr, src, w, n_rows, n, 1,
                                TB_ROWS_F16);
}

#endif
