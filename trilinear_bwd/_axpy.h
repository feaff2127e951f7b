/*
 * The axpys of the D, H and channels-last W passes:
 *     acc = (first ? 0 : acc) + w * x
 *     acc = ((first ? 0 : acc) + w0 * x0) + w1 * x1
 * in C rather than Cython only for `restrict`: without it the compiler
 * versions every loop behind a run-time overlap check, which costs more than
 * the work for short rows (16 channels, say).  The explicit `0 +` keeps the
 * first term's rounding identical to every later one (and turns -0 into +0,
 * as a zero-initialised accumulator does); without -ffast-math the compiler
 * may not drop it.
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
 * ptr[i] <= t < ptr[i+1] of w[t] * row[src[t], :v], two terms per sweep --
 * the same operations in the same order as reduce_rows, in one loop so that
 * short channel runs do not pay a call per output position.  The common
 * channel counts get their own copy with v known to the compiler, which then
 * unrolls the channel loops completely.
 */
#define TB_DEFINE_W_CHANNELS(NAME, T)                                                   \
    TB_ALWAYS_INLINE void NAME##_body(                                                 \
        T *restrict out, const T *restrict row, const int64_t *restrict ptr,           \
        const int64_t *restrict src, const T *restrict w, int64_t n_in, int64_t v)     \
    {                                                                                   \
        for (int64_t i = 0; i < n_in; ++i) {                                            \
            T *restrict acc = out + i * v;                                              \
            int64_t t = ptr[i];                                                         \
            const int64_t t1 = ptr[i + 1];                                              \
            if (t == t1)                                                                \
                for (int64_t k = 0; k < v; ++k)                                         \
                    acc[k] = (T)0;                                                      \
            for (int first = 1; t < t1; first = 0) {                                    \
                const T *restrict x0 = row + src[t] * v;                                \
                if (t + 1 < t1) {                                                       \
                    const T *restrict x1 = row + src[t + 1] * v;                        \
                    const T w0 = w[t], w1 = w[t + 1];                                   \
                    if (first)                                                          \
                        for (int64_t k = 0; k < v; ++k)                                 \
                            acc[k] = ((T)0 + w0 * x0[k]) + w1 * x1[k];                  \
                    else                                                                \
                        for (int64_t k = 0; k < v; ++k)                                 \
                            acc[k] = (acc[k] + w0 * x0[k]) + w1 * x1[k];                \
                    t += 2;                                                             \
                } else {                                                                \
                    const T w0 = w[t];                                                  \
                    if (first)                                                          \
                        for (int64_t k = 0; k < v; ++k)                                 \
                            acc[k] = (T)0 + w0 * x0[k];                                 \
                    else                                                                \
                        for (int64_t k = 0; k < v; ++k)                                 \
                            acc[k] = acc[k] + w0 * x0[k];                               \
                    t += 1;                                                             \
                }                                                                       \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
    static inline void NAME(T *restrict out, const T *restrict row,                    \
                            const int64_t *restrict ptr, const int64_t *restrict src,  \
                            const T *restrict w, int64_t n_in, int64_t v)              \
    {                                                                                   \
        switch (v) {                                                                    \
        case 8: NAME##_body(out, row, ptr, src, w, n_in, 8); break;                     \
        case 16: NAME##_body(out, row, ptr, src, w, n_in, 16); break;                   \
        case 32: NAME##_body(out, row, ptr, src, w, n_in, 32); break;                   \
        case 64: NAME##_body(out, row, ptr, src, w, n_in, 64); break;                   \
        default: NAME##_body(out, row, ptr, src, w, n_in, v);                           \
        }                                                                               \
    }

TB_DEFINE_W_CHANNELS(tb_w_channels_f32, float)
TB_DEFINE_W_CHANNELS(tb_w_channels_f64, double)

TB_DEFINE_AXPY(tb_axpy_f32, float)
TB_DEFINE_AXPY(tb_axpy_f64, double)
TB_DEFINE_AXPY2(tb_axpy2_f32, float)
TB_DEFINE_AXPY2(tb_axpy2_f64, double)

#endif
