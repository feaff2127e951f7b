/*
 * The W pass of one channels-last row: out[i, :v] = sum over the terms
 * ptr[i] <= t < ptr[i+1] of w[t] * row[src[t], :v] -- the same operations
 * in the same order as the row sums ((0 + w0*x0) + w1*x1) + ..., in one
 * loop so that short channel runs do not pay a call per output position.
 *
 * Where the channels fill whole vectors (any count, with AVX-512's masked
 * tails), each vector of out[i] is summed over all of i's terms in a
 * register and stored once; with `stream` set and out 16-byte aligned, with
 * non-temporal stores straight from the register, so that writing a large
 * grad_input overlaps the arithmetic instead of following each row as a
 * copy.  Channel counts that the streaming stores cannot cover in aligned
 * 16-byte pieces ignore `stream`.  This is written with intrinsics because,
 * left to itself, GCC fully unrolls the channel loop of the common counts
 * and then vectorises the straight-line result badly (half-width and scalar
 * pieces).  The common counts get their own copy with v known to the
 * compiler.
 */
#ifndef TRILINEAR_BWD_W_CHANNELS_H
#define TRILINEAR_BWD_W_CHANNELS_H

#include <stdint.h>

#include "_portable.h"
#include "_simd.h"

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

/* One vector of out[i] (`left` < lanes elements of it when `left` is set,
 * AVX-512 only), stored or streamed. */
#define TB_W_CHANNELS_STORE(S, p, a, left)                                              \
    do {                                                                                \
        if (left) {                                                                     \
            if (stream)                                                                 \
                tb_stream_head_##S((p), (a), (left));                                   \
            else                                                                        \
                tb_store_head_##S((p), (a), (left));                                    \
        } else if (stream) {                                                            \
            tb_stream_##S((p), (a));                                                    \
        } else {                                                                        \
            tb_store_##S((p), (a));                                                     \
        }                                                                               \
    } while (0)

#define TB_DEFINE_W_CHANNELS_VECTOR(NAME, T, S)                                         \
    /* v <= 64 channels, all of out[i] held in registers. */                            \
    TB_ALWAYS_INLINE void NAME##_fixed(                                                \
        T *restrict out, const T *restrict row, const int64_t *restrict ptr,           \
        const int64_t *restrict src, const T *restrict w, int64_t n_in, int64_t v,     \
        int stream)                                                                     \
    {                                                                                   \
        enum { NV = 64 / TB_LANES_##S };                                                \
        const int64_t nv = (v + TB_LANES_##S - 1) / TB_LANES_##S;                       \
        const int64_t left = v % TB_LANES_##S;                                          \
        for (int64_t i = 0; i < n_in; ++i) {                                            \
            tb_vec_##S acc[NV];                                                         \
            for (int64_t j = 0; j < nv; ++j)                                            \
                acc[j] = tb_zero_##S();                                                 \
            for (int64_t t = ptr[i]; t < ptr[i + 1]; ++t) {                             \
                const tb_vec_##S wt = tb_set1_##S(w[t]);                                \
                const T *x = row + src[t] * v;                                          \
                for (int64_t j = 0; j < nv; ++j) {                                      \
                    const tb_vec_##S xj = left && j == nv - 1                           \
                        ? tb_load_head_##S(x + j * TB_LANES_##S, left)                  \
                        : tb_load_##S(x + j * TB_LANES_##S);                            \
                    acc[j] = tb_add_##S(acc[j], tb_mul_##S(wt, xj));                    \
                }                                                                       \
            }                                                                           \
            for (int64_t j = 0; j < nv; ++j)                                            \
                TB_W_CHANNELS_STORE(S, out + i * v + j * TB_LANES_##S, acc[j],          \
                                    j == nv - 1 ? left : 0);                            \
        }                                                                               \
    }                                                                                   \
    /* Any v: one vector of out[i] at a time, over all of i's terms. */                 \
    TB_ALWAYS_INLINE void NAME##_vector(                                               \
        T *restrict out, const T *restrict row, const int64_t *restrict ptr,           \
        const int64_t *restrict src, const T *restrict w, int64_t n_in, int64_t v,     \
        int stream)                                                                     \
    {                                                                                   \
        for (int64_t i = 0; i < n_in; ++i) {                                            \
            const int64_t t0 = ptr[i], t1 = ptr[i + 1];                                 \
            for (int64_t k = 0; k < v; k += TB_LANES_##S) {                             \
                const int64_t left = v - k < TB_LANES_##S ? v - k : 0;                  \
                tb_vec_##S acc = tb_zero_##S();                                         \
                for (int64_t t = t0; t < t1; ++t) {                                     \
                    const T *x = row + src[t] * v + k;                                  \
                    acc = tb_add_##S(acc, tb_mul_##S(tb_set1_##S(w[t]),                 \
                                                     left ? tb_load_head_##S(x, left)   \
                                                          : tb_load_##S(x)));           \
                }                                                                       \
                TB_W_CHANNELS_STORE(S, out + i * v + k, acc, left);                     \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
    static inline void NAME(T *restrict out, const T *restrict row,                    \
                            const int64_t *restrict ptr, const int64_t *restrict src,  \
                            const T *restrict w, int64_t n_in, int64_t v, int stream)  \
    {                                                                                   \
        /* Streamed pieces are 16 bytes, each aligned. */                               \
        stream = stream && ((uintptr_t)out & 15) == 0 && (v * sizeof(T)) % 16 == 0;     \
        switch (v) {                                                                    \
        case 8: NAME##_fixed(out, row, ptr, src, w, n_in, 8, stream); return;           \
        case 16: NAME##_fixed(out, row, ptr, src, w, n_in, 16, stream); return;         \
        case 32: NAME##_fixed(out, row, ptr, src, w, n_in, 32, stream); return;         \
        case 64: NAME##_fixed(out, row, ptr, src, w, n_in, 64, stream); return;         \
        }                                                                               \
        if (TB_HAVE_MASKS || v % TB_LANES_##S == 0)                                     \
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

#endif
