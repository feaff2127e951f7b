/*
 * The W pass of channels-first rows: out[i] = sum_k w[i,k] * row[src[i,k]].
 *
 * The table is padded to `width` terms per output point (padding reads a zero
 * sentinel with weight 0, which adds +0 and changes nothing) and stored in
 * blocks of 8 output points, k-major inside a block:
 *     index of (i, k) = (i / 8) * 8 * width + k * 8 + i % 8,
 * so that the 8 weights and 8 source indices of one k load as vectors.  The
 * portable path walks this table one point at a time.  The AVX2 path reads a
 * block's 8 row elements for one k in one of three ways, chosen per (block, k)
 * at plan time and recorded in `mode`:
 *   TB_WINDOW8:  they lie within 8 consecutive elements starting at
 *                window[block, k]: one load and one in-register permute;
 *   TB_WINDOW16: within 16: two loads, two permutes and a blend;
 *   TB_GATHER:   anywhere: one gather instruction.
 * `rel` holds the offsets inside the window, -1 for padding, whose lanes are
 * zeroed.  When every k of a block reads within the same 8 elements
 * (block_window[block] >= 0, typical of downsampling) the window is loaded
 * once for the block.  A permute costs a cycle where a gather costs about five.  The row
 * buffer keeps 16 spare elements so a window may run past its end.  All paths
 * add the same terms in the same order with separate multiply and add, so
 * they round identically.  With `stream` set, blocks of `out` are written with
 * non-temporal stores where 16-byte aligned (see _store.h).
 */
#ifndef TRILINEAR_BWD_W_GATHER_H
#define TRILINEAR_BWD_W_GATHER_H

#include <stdint.h>

#include "_portable.h"
#include "_simd.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

enum { TB_GATHER = 0, TB_WINDOW8 = 1, TB_WINDOW16 = 2 };

#if defined(__AVX2__)
/* 16-byte streaming stores: large arrays from malloc/mmap start 16 bytes
 * past a page, so 32-byte alignment is rare. */
#define TB_STREAM8(p, a) (_mm_stream_ps((p), _mm256_castps256_ps128(a)),                \
                          _mm_stream_ps((p) + 4, _mm256_extractf128_ps((a), 1)))

/* One block of 8 output points (block index i / 8 of the table), summed over
 * its `width` terms in a register. */
TB_ALWAYS_INLINE __m256 tb_gather_block8(const float *restrict row, const float *restrict w,
                                         const int32_t *restrict s, const int32_t *restrict r,
                                         const int32_t *restrict win,
                                         const int8_t *restrict m, int32_t shared,
                                         int64_t width)
{
    const __m256i seven = _mm256_set1_epi32(7), minus_one = _mm256_set1_epi32(-1);
    __m256 acc = _mm256_setzero_ps();
    if (shared >= 0) {              /* one window serves every k of the block */
        const __m256 xs = _mm256_loadu_ps(row + shared);
        for (int64_t k = 0; k < width; ++k) {
            const __m256i idx = _mm256_loadu_si256((const __m256i *)(r + 8 * k));
            __m256 x = _mm256_permutevar8x32_ps(xs, idx);
            x = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, minus_one)));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(w + 8 * k), x));
        }
        return acc;
    }
    for (int64_t k = 0; k < width; ++k) {
        __m256 x;
        if (m[k] == TB_GATHER) {
            x = _mm256_i32gather_ps(row, _mm256_loadu_si256((const __m256i *)(s + 8 * k)), 4);
        } else {
            const __m256i idx = _mm256_loadu_si256((const __m256i *)(r + 8 * k));
            x = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + win[k]), idx);
            if (m[k] == TB_WINDOW16) {
                const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + win[k] + 8), idx);
                x = _mm256_blendv_ps(x, hi, _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, seven)));
            }
            x = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, minus_one)));
        }
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(w + 8 * k), x));
    }
    return acc;
}
#endif

#if defined(__AVX512F__)
/* Two 256-bit halves as one 512-bit vector. */
#define TB_JOIN_PS(lo, hi) _mm512_castpd_ps(_mm512_insertf64x4(                        \
    _mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1))
#define TB_JOIN_SI(lo, hi) _mm512_inserti64x4(_mm512_castsi256_si512(lo), (hi), 1)

/* Two consecutive blocks (16 output points) at once: the same terms in the
 * same order as tb_gather_block8 gives each of them.  For each k, where
 * neither block needs a gather instruction, block b's elements lie within
 * the 16 from its window and block b + 1's within the 16 from its own, so
 * one two-source permute (vpermt2ps) of the two windows reads all 16 lanes;
 * where the blocks share one window each for every k (downsampling), both
 * windows are loaded once. */
TB_ALWAYS_INLINE __m512 tb_gather_block16(const float *restrict row, const float *restrict w,
                                          const int32_t *restrict s, const int32_t *restrict r,
                                          const int32_t *restrict win,
                                          const int8_t *restrict m, int32_t shared0,
                                          int32_t shared1, int64_t width)
{
    /* The second block's lanes index the second source: +16. */
    const __m512i second = TB_JOIN_SI(_mm256_setzero_si256(), _mm256_set1_epi32(16));
    const __m512i minus_one = _mm512_set1_epi32(-1);
    const int64_t next = 8 * width;     /* table offset of block b + 1 */
    __m512 acc = _mm512_setzero_ps();
    if (shared0 >= 0 && shared1 >= 0) {
        const __m512 xs0 = _mm512_loadu_ps(row + shared0), xs1 = _mm512_loadu_ps(row + shared1);
        for (int64_t k = 0; k < width; ++k) {
            const __m512i rel = TB_JOIN_SI(_mm256_loadu_si256((const __m256i *)(r + 8 * k)),
                                           _mm256_loadu_si256((const __m256i *)(r + next + 8 * k)));
            const __m512 x = _mm512_maskz_permutex2var_ps(
                _mm512_cmpgt_epi32_mask(rel, minus_one), xs0, _mm512_add_epi32(rel, second), xs1);
            const __m512 wk = TB_JOIN_PS(_mm256_loadu_ps(w + 8 * k), _mm256_loadu_ps(w + next + 8 * k));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(wk, x));
        }
        return acc;
    }
    const int32_t *win1 = win + width;
    const int8_t *m1 = m + width;
    for (int64_t k = 0; k < width; ++k) {
        __m512 x;
        if (m[k] == TB_GATHER || m1[k] == TB_GATHER) {
            const __m512i idx = TB_JOIN_SI(_mm256_loadu_si256((const __m256i *)(s + 8 * k)),
                                           _mm256_loadu_si256((const __m256i *)(s + next + 8 * k)));
            x = _mm512_i32gather_ps(idx, row, 4);
        } else {
            const __m512i rel = TB_JOIN_SI(_mm256_loadu_si256((const __m256i *)(r + 8 * k)),
                                           _mm256_loadu_si256((const __m256i *)(r + next + 8 * k)));
            x = _mm512_maskz_permutex2var_ps(_mm512_cmpgt_epi32_mask(rel, minus_one),
                                             _mm512_loadu_ps(row + win[k]),
                                             _mm512_add_epi32(rel, second),
                                             _mm512_loadu_ps(row + win1[k]));
        }
        const __m512 wk = TB_JOIN_PS(_mm256_loadu_ps(w + 8 * k), _mm256_loadu_ps(w + next + 8 * k));
        acc = _mm512_add_ps(acc, _mm512_mul_ps(wk, x));
    }
    return acc;
}
#endif

TB_ALWAYS_INLINE void tb_gather_f32_body(float *restrict out, const float *restrict row,
                                         const float *restrict weight,
                                         const int32_t *restrict src,
                                         const int32_t *restrict rel,
                                         const int32_t *restrict window,
                                         const int8_t *restrict mode,
                                         const int32_t *restrict block_window, int64_t n,
                                         int64_t width, int stream)
{
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        const int64_t b = i / 8;
        const __m512 acc = tb_gather_block16(row, weight + i * width, src + i * width,
                                             rel + i * width, window + b * width,
                                             mode + b * width, block_window[b],
                                             block_window[b + 1], width);
        if (stream && ((uintptr_t)(out + i) & 15) == 0)
            tb_stream_f32(out + i, acc);
        else
            _mm512_storeu_ps(out + i, acc);
    }
    /* The last one or two blocks, the last one whole or not, its tail stored
     * under a mask (the table is padded to whole blocks, and the row buffer's
     * spare elements cover the windows). */
    for (; i < n; i += 8) {
        const int64_t b = i / 8;
        const __m256 acc = tb_gather_block8(row, weight + i * width, src + i * width,
                                            rel + i * width, window + b * width,
                                            mode + b * width, block_window[b], width);
        if (n - i < 8)
            _mm256_mask_storeu_ps(out + i, (__mmask8)((1u << (n - i)) - 1u), acc);
        else if (stream && ((uintptr_t)(out + i) & 15) == 0)
            TB_STREAM8(out + i, acc);
        else
            _mm256_storeu_ps(out + i, acc);
    }
#elif defined(__AVX2__)
    for (; i + 8 <= n; i += 8) {
        const int64_t b = i / 8;
        const __m256 acc = tb_gather_block8(row, weight + i * width, src + i * width,
                                            rel + i * width, window + b * width,
                                            mode + b * width, block_window[b], width);
        if (stream && ((uintptr_t)(out + i) & 15) == 0)
            TB_STREAM8(out + i, acc);
        else
            _mm256_storeu_ps(out + i, acc);
    }
#endif
    (void)stream;
    (void)block_window;
    (void)rel;
    (void)window;
    (void)mode;
    for (; i < n; ++i) {
        const int64_t base = (i / 8) * 8 * width + i % 8;
        float acc = 0.0f;
        for (int64_t k = 0; k < width; ++k)
            acc = acc + weight[base + 8 * k] * row[src[base + 8 * k]];
        out[i] = acc;
    }
}

/* The common widths (1 to 8 terms per point) get copies with the width known
 * to the compiler, which then unrolls the loops over terms. */
static inline void tb_gather_f32(float *restrict out, const float *restrict row,
                                 const float *restrict weight, const int32_t *restrict src,
                                 const int32_t *restrict rel, const int32_t *restrict window,
                                 const int8_t *restrict mode,
                                 const int32_t *restrict block_window, int64_t n,
                                 int64_t width, int stream)
{
    switch (width) {
#define TB_GATHER_WIDTH(K)                                                                  \
    case K:                                                                                 \
        tb_gather_f32_body(out, row, weight, src, rel, window, mode, block_window, n, K,    \
                           stream);                                                         \
        return;
    TB_GATHER_WIDTH(1)
    TB_GATHER_WIDTH(2)
    TB_GATHER_WIDTH(3)
    TB_GATHER_WIDTH(4)
    TB_GATHER_WIDTH(5)
    TB_GATHER_WIDTH(6)
    TB_GATHER_WIDTH(7)
    TB_GATHER_WIDTH(8)
#undef TB_GATHER_WIDTH
    default:
        tb_gather_f32_body(out, row, weight, src, rel, window, mode, block_window, n, width,
                           stream);
    }
}

static inline void tb_gather_f64(double *restrict out, const double *restrict row,
                                 const double *restrict weight, const int32_t *restrict src,
                                 int64_t n, int64_t width, int stream)
{
    int64_t i = 0;
#if defined(__AVX512F__)
    /* Every block, the last one's tail stored under a mask (the padded
     * table's sources are all valid indices). */
    for (; i < n; i += 8) {
        const double *w = weight + i * width;
        const int32_t *s = src + i * width;
        __m512d acc = _mm512_setzero_pd();
        for (int64_t k = 0; k < width; ++k) {
            const __m512d x = _mm512_i32gather_pd(_mm256_loadu_si256((const __m256i *)(s + 8 * k)),
                                                  row, 8);
            acc = _mm512_add_pd(acc, _mm512_mul_pd(_mm512_loadu_pd(w + 8 * k), x));
        }
        if (n - i < 8)
            _mm512_mask_storeu_pd(out + i, (__mmask8)((1u << (n - i)) - 1u), acc);
        else if (stream && ((uintptr_t)(out + i) & 15) == 0)
            tb_stream_f64(out + i, acc);
        else
            _mm512_storeu_pd(out + i, acc);
    }
#elif defined(__AVX2__)
    for (; i + 8 <= n; i += 8) {
        const double *w = weight + i * width;
        const int32_t *s = src + i * width;
        __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
        for (int64_t k = 0; k < width; ++k) {
            __m256d xl = _mm256_i32gather_pd(row, _mm_loadu_si128((const __m128i *)(s + 8 * k)), 8);
            __m256d xh = _mm256_i32gather_pd(row, _mm_loadu_si128((const __m128i *)(s + 8 * k + 4)), 8);
            lo = _mm256_add_pd(lo, _mm256_mul_pd(_mm256_loadu_pd(w + 8 * k), xl));
            hi = _mm256_add_pd(hi, _mm256_mul_pd(_mm256_loadu_pd(w + 8 * k + 4), xh));
        }
        if (stream && ((uintptr_t)(out + i) & 15) == 0) {
            _mm_stream_pd(out + i, _mm256_castpd256_pd128(lo));
            _mm_stream_pd(out + i + 2, _mm256_extractf128_pd(lo, 1));
            _mm_stream_pd(out + i + 4, _mm256_castpd256_pd128(hi));
            _mm_stream_pd(out + i + 6, _mm256_extractf128_pd(hi, 1));
        } else {
            _mm256_storeu_pd(out + i, lo);
            _mm256_storeu_pd(out + i + 4, hi);
        }
    }
#endif
    (void)stream;
    for (; i < n; ++i) {
        const int64_t base = (i / 8) * 8 * width + i % 8;
        double acc = 0.0;
        for (int64_t k = 0; k < width; ++k)
            acc = acc + weight[base + 8 * k] * row[src[base + 8 * k]];
        out[i] = acc;
    }
}

#endif
