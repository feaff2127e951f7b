/*
 * The sums of the D, H and channels-last W passes, each output element
 *     acc = ((0 + w0 * x0) + w1 * x1) + ...
 * over its terms in table order: plain axpys (one or two terms per sweep),
 * the register-accumulating row reductions, and the channels-last W pass.
 * In C rather than Cython for `restrict` (without it the compiler versions
 * every loop behind a run-time overlap check, which costs more than the work
 * for short rows) and for the vector intrinsics.  The explicit `0 +` keeps
 * the first term's rounding identical to every later one (and turns -0 into
 * +0, as a zero-initialised accumulator does); without -ffast-math the
 * compiler may not drop it.  Every variant performs the same additions in
 * the same order, so all of them, vector or scalar, give the same bits.
 */
#ifndef TRILINEAR_BWD_AXPY_H
#define TRILINEAR_BWD_AXPY_H

#include <stdint.h>

#include "_portable.h"

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

/*
 * The W pass of one channels-last row: out[i, :v] = sum over the terms
 * ptr[i] <= t < ptr[i+1] of w[t] * row[src[t], :v] -- the same operations
 * in the same order as reduce_rows ((0 + w0*x0) + w1*x1) + ..., in one loop
 * so that short channel runs do not pay a call per output position.
 *
 * Where the channels fill whole vectors, each vector of out[i] is summed
 * over all of i's terms in a register and stored once; with `stream` set
 * and out 16-byte aligned, with non-temporal stores straight from the
 * register, so that writing a large grad_input overlaps the arithmetic
 * instead of following each row as a copy (downsample NDHWC, 2 threads,
 * 1.68 -> 1.25 ms with the output's lines in cache, 2.08 -> 1.70 ms
 * without).  Other channel counts ignore `stream`.  This is written with
 * intrinsics because, left to itself, GCC fully unrolls the channel loop of
 * the common counts and then vectorises the straight-line result badly
 * (half-width and scalar pieces).  The common counts get their own copy with
 * v known to the compiler.
 */
#if defined(__AVX__)
#include <immintrin.h>
#define TB_LANES_f32 8
#define TB_LANES_f64 4
typedef __m256 tb_vec_f32;
typedef __m256d tb_vec_f64;
#define tb_zero_f32 _mm256_setzero_ps
#define tb_zero_f64 _mm256_setzero_pd
#define tb_set1_f32 _mm256_set1_ps
#define tb_set1_f64 _mm256_set1_pd
#define tb_load_f32 _mm256_loadu_ps
#define tb_load_f64 _mm256_loadu_pd
#define tb_store_f32 _mm256_storeu_ps
#define tb_store_f64 _mm256_storeu_pd
#define tb_add_f32 _mm256_add_ps
#define tb_add_f64 _mm256_add_pd
#define tb_mul_f32 _mm256_mul_ps
#define tb_mul_f64 _mm256_mul_pd
/* Non-temporal stores 16 bytes at a time (see tb_stream_copy in _store.h). */
#define tb_stream_f32(p, a) (_mm_stream_ps((p), _mm256_castps256_ps128(a)),             \
                             _mm_stream_ps((p) + 4, _mm256_extractf128_ps((a), 1)))
#define tb_stream_f64(p, a) (_mm_stream_pd((p), _mm256_castpd256_pd128(a)),             \
                             _mm_stream_pd((p) + 2, _mm256_extractf128_pd((a), 1)))
#elif defined(__SSE2__)
#include <emmintrin.h>
#define TB_LANES_f32 4
#define TB_LANES_f64 2
typedef __m128 tb_vec_f32;
typedef __m128d tb_vec_f64;
#define tb_zero_f32 _mm_setzero_ps
#define tb_zero_f64 _mm_setzero_pd
#define tb_set1_f32 _mm_set1_ps
#define tb_set1_f64 _mm_set1_pd
#define tb_load_f32 _mm_loadu_ps
#define tb_load_f64 _mm_loadu_pd
#define tb_store_f32 _mm_storeu_ps
#define tb_store_f64 _mm_storeu_pd
#define tb_add_f32 _mm_add_ps
#define tb_add_f64 _mm_add_pd
#define tb_mul_f32 _mm_mul_ps
#define tb_mul_f64 _mm_mul_pd
#define tb_stream_f32 _mm_stream_ps
#define tb_stream_f64 _mm_stream_pd
#endif

#define TB_DEFINE_W_CHANNELS_SCALAR(NAME, T)                                            \
    static inline void NAME(T *restrict out, const T *restrict row,                    \
                            const int64_t *restrict ptr, const int64_t *restrict src,  \
                            const T *restrict w, int64_t n_in, int64_t v, int stream)  \
    {                                                                                   \
        (void)stream;                                                                   \
        for (int64_t i = 0; i < n_in; ++i) {                                            \
            T *restrict acc = out + i * v;                                              \
            for (int64_t k = 0; k < v; ++k)                                             \
                acc[k] = (T)0;                                                          \
            for (int64_t t = ptr[i]; t < ptr[i + 1]; ++t) {                             \
                const T *restrict x = row + src[t] * v;                                 \
                const T wt = w[t];                                                      \
                for (int64_t k = 0; k < v; ++k)                                         \
                    acc[k] = acc[k] + wt * x[k];                                        \
            }                                                                           \
        }                                                                               \
    }

#define TB_DEFINE_W_CHANNELS_VECTOR(NAME, T, S)                                         \
    TB_ALWAYS_INLINE void NAME##_fixed(                                                \
        T *restrict out, const T *restrict row, const int64_t *restrict ptr,           \
        const int64_t *restrict src, const T *restrict w, int64_t n_in, int64_t v,     \
        int stream)                                                                     \
    {                                                                                   \
        enum { NV = 64 / TB_LANES_##S };                                                \
        const int64_t nv = v / TB_LANES_##S;                                            \
        for (int64_t i = 0; i < n_in; ++i) {                                            \
            tb_vec_##S acc[NV];                                                         \
            for (int64_t j = 0; j < nv; ++j)                                            \
                acc[j] = tb_zero_##S();                                                 \
            for (int64_t t = ptr[i]; t < ptr[i + 1]; ++t) {                             \
                const tb_vec_##S wt = tb_set1_##S(w[t]);                                \
                const T *x = row + src[t] * v;                                          \
                for (int64_t j = 0; j < nv; ++j)                                        \
                    acc[j] = tb_add_##S(acc[j],                                         \
                                        tb_mul_##S(wt, tb_load_##S(x + j * TB_LANES_##S)));\
            }                                                                           \
            if (stream)                                                                 \
                for (int64_t j = 0; j < nv; ++j)                                        \
                    tb_stream_##S(out + i * v + j * TB_LANES_##S, acc[j]);              \
            else                                                                        \
                for (int64_t j = 0; j < nv; ++j)                                        \
                    tb_store_##S(out + i * v + j * TB_LANES_##S, acc[j]);               \
        }                                                                               \
    }                                                                                   \
    TB_ALWAYS_INLINE void NAME##_vector(                                               \
        T *restrict out, const T *restrict row, const int64_t *restrict ptr,           \
        const int64_t *restrict src, const T *restrict w, int64_t n_in, int64_t v,     \
        int stream)                                                                     \
    {                                                                                   \
        for (int64_t i = 0; i < n_in; ++i) {                                            \
            const int64_t t0 = ptr[i], t1 = ptr[i + 1];                                 \
            for (int64_t k = 0; k < v; k += TB_LANES_##S) {                             \
                tb_vec_##S acc = tb_zero_##S();                                         \
                for (int64_t t = t0; t < t1; ++t)                                       \
                    acc = tb_add_##S(acc, tb_mul_##S(tb_set1_##S(w[t]),                 \
                                                     tb_load_##S(row + src[t] * v + k)));\
                if (stream)                                                             \
                    tb_stream_##S(out + i * v + k, acc);                                \
                else                                                                    \
                    tb_store_##S(out + i * v + k, acc);                                 \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
    static inline void NAME(T *restrict out, const T *restrict row,                    \
                            const int64_t *restrict ptr, const int64_t *restrict src,  \
                            const T *restrict w, int64_t n_in, int64_t v, int stream)  \
    {                                                                                   \
        stream = stream && ((uintptr_t)out & 15) == 0;                                  \
        switch (v) {                                                                    \
        case 8: NAME##_fixed(out, row, ptr, src, w, n_in, 8, stream); return;           \
        case 16: NAME##_fixed(out, row, ptr, src, w, n_in, 16, stream); return;         \
        case 32: NAME##_fixed(out, row, ptr, src, w, n_in, 32, stream); return;         \
        case 64: NAME##_fixed(out, row, ptr, src, w, n_in, 64, stream); return;         \
        }                                                                               \
        if (v % TB_LANES_##S == 0)                                                      \
            NAME##_vector(out, row, ptr, src, w, n_in, v, stream);                      \
        else                                                                            \
            NAME##_scalar(out, row, ptr, src, w, n_in, v, 0);                           \
    }

TB_DEFINE_W_CHANNELS_SCALAR(tb_w_channels_f32_scalar, float)
TB_DEFINE_W_CHANNELS_SCALAR(tb_w_channels_f64_scalar, double)
#if defined(TB_LANES_f32)
TB_DEFINE_W_CHANNELS_VECTOR(tb_w_channels_f32, float, f32)
TB_DEFINE_W_CHANNELS_VECTOR(tb_w_channels_f64, double, f64)
#else
/* Without vectors, the scalar loops (which write with ordinary stores). */
#define tb_w_channels_f32 tb_w_channels_f32_scalar
#define tb_w_channels_f64 tb_w_channels_f64_scalar
#endif


/*
 * The D and H passes: acc[k] = (((first ? 0 : acc[k]) + w[0] * x[0][k])
 * + w[1] * x[1][k]) + ... over m <= TB_GROUP rows, for k < n.  Each vector
 * of acc is summed over all m rows in a register and written once, so that
 * a long reduction reads acc neither from L1 nor, for a plane that does not
 * fit there, from L2.  Each count gets its own copy with m known to the
 * compiler, which then unrolls the loop over rows.
 */
#define TB_GROUP 8

#if defined(TB_LANES_f32)
#define TB_SUM_ROWS_STEP(S)                                                             \
    {                                                                                   \
        tb_vec_##S a = first ? tb_zero_##S() : tb_load_##S(acc + k);                    \
        for (int64_t j = 0; j < m; ++j)                                                 \
            a = tb_add_##S(a, tb_mul_##S(wv[j], tb_load_##S(x[j] + k)));                \
        tb_store_##S(acc + k, a);                                                       \
    }
/* Sweeps over grad_out (prefetch set) also prefetch each row TB_PF_AHEAD
 * bytes ahead: the hardware prefetcher alone leaves the core waiting on
 * memory at every page boundary of its several streams.  Past the end of a
 * row this fetches the start of the next one, which the next D row reads. */
#define TB_PF_AHEAD 512
#define TB_SUM_ROWS_VECTOR(S)                                                           \
    tb_vec_##S wv[TB_GROUP];                                                            \
    for (int64_t j = 0; j < m; ++j)                                                     \
        wv[j] = tb_set1_##S(w[j]);                                                      \
    if (prefetch)                                                                       \
        for (; k + TB_LANES_##S <= n; k += TB_LANES_##S) {                              \
            for (int64_t j = 0; j < m; ++j)                                             \
                _mm_prefetch((const char *)(x[j] + k) + TB_PF_AHEAD, _MM_HINT_T0);      \
            TB_SUM_ROWS_STEP(S)                                                         \
        }                                                                               \
    for (; k + TB_LANES_##S <= n; k += TB_LANES_##S)                                    \
        TB_SUM_ROWS_STEP(S)
#else
#define TB_SUM_ROWS_VECTOR(S) (void)prefetch;
#endif

#define TB_DEFINE_SUM_ROWS(NAME, T, S)                                                  \
    TB_ALWAYS_INLINE void NAME##_m(T *restrict acc, const T *const *x,                 \
                                   const T *restrict w, int64_t m, int64_t n,          \
                                   int first, int prefetch)                             \
    {                                                                                   \
        int64_t k = 0;                                                                  \
        TB_SUM_ROWS_VECTOR(S)                                                           \
        for (; k < n; ++k) {                                                            \
            T a = first ? (T)0 : acc[k];                                                \
            for (int64_t j = 0; j < m; ++j)                                             \
                a = a + w[j] * x[j][k];                                                 \
            acc[k] = a;                                                                 \
        }                                                                               \
    }                                                                                   \
    TB_ALWAYS_INLINE void NAME(T *restrict acc, const T *const *x, const T *restrict w, \
                               int64_t m, int64_t n, int first, int prefetch)           \
    {                                                                                   \
        switch (m) {                                                                    \
        case 1: NAME##_m(acc, x, w, 1, n, first, prefetch); return;                     \
        case 2: NAME##_m(acc, x, w, 2, n, first, prefetch); return;                     \
        case 3: NAME##_m(acc, x, w, 3, n, first, prefetch); return;                     \
        case 4: NAME##_m(acc, x, w, 4, n, first, prefetch); return;                     \
        case 5: NAME##_m(acc, x, w, 5, n, first, prefetch); return;                     \
        case 6: NAME##_m(acc, x, w, 6, n, first, prefetch); return;                     \
        case 7: NAME##_m(acc, x, w, 7, n, first, prefetch); return;                     \
        default: NAME##_m(acc, x, w, TB_GROUP, n, first, prefetch); /* m == TB_GROUP */ \
        }                                                                               \
    }

/*
 * Rows r < n_rows of acc (acc_stride apart): the sum over the terms
 * ptr[r] <= t < ptr[r+1] of w[t] * rows[src[t] * stride :], n elements,
 * TB_GROUP terms per sweep.  One call covers a whole plane of short rows.
 * Rows read from cache (prefetch clear) with one or two terms take the plain
 * axpy loops, which have less to set up per row: 5% faster on 40-element
 * rows.
 */
#define TB_DEFINE_REDUCE_ROWS(NAME, T, SUM, AXPY, AXPY2)                                \
    static inline void NAME(T *restrict acc, int64_t acc_stride, const T *rows,         \
                            int64_t stride, const int64_t *restrict ptr,                \
                            const int64_t *restrict src, const T *restrict w,           \
                            int64_t n_rows, int64_t n, int prefetch)                    \
    {                                                                                   \
        const T *x[TB_GROUP];                                                           \
        for (int64_t r = 0; r < n_rows; ++r) {                                          \
            T *restrict out = acc + r * acc_stride;                                     \
            const int64_t t0 = ptr[r], t1 = ptr[r + 1];                                 \
            if (t0 == t1)                                                               \
                for (int64_t k = 0; k < n; ++k)                                         \
                    out[k] = (T)0;                                                      \
            if (t1 - t0 == 1 && !prefetch) {                                            \
                AXPY(out, w[t0], rows + src[t0] * stride, n, 1);                        \
                continue;                                                               \
            }                                                                           \
            if (t1 - t0 == 2 && !prefetch) {                                            \
                AXPY2(out, w[t0], rows + src[t0] * stride, w[t0 + 1],                   \
                      rows + src[t0 + 1] * stride, n, 1);                               \
                continue;                                                               \
            }                                                                           \
            for (int64_t t = t0; t < t1;) {                                             \
                const int64_t m = t1 - t < TB_GROUP ? t1 - t : TB_GROUP;                \
                for (int64_t j = 0; j < m; ++j)                                         \
                    x[j] = rows + src[t + j] * stride;                                  \
                SUM(out, x, w + t, m, n, t == t0, prefetch);                            \
                t += m;                                                                 \
            }                                                                           \
        }                                                                               \
    }

TB_DEFINE_AXPY(tb_axpy_f32, float)
TB_DEFINE_AXPY(tb_axpy_f64, double)
TB_DEFINE_AXPY2(tb_axpy2_f32, float)
TB_DEFINE_AXPY2(tb_axpy2_f64, double)
TB_DEFINE_SUM_ROWS(tb_sum_rows_f32, float, f32)
TB_DEFINE_SUM_ROWS(tb_sum_rows_f64, double, f64)
TB_DEFINE_REDUCE_ROWS(tb_reduce_rows_f32, float, tb_sum_rows_f32, tb_axpy_f32, tb_axpy2_f32)
TB_DEFINE_REDUCE_ROWS(tb_reduce_rows_f64, double, tb_sum_rows_f64, tb_axpy_f64, tb_axpy2_f64)

#endif
