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

#endif
