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

#if defined(__AVX2__)
#include <immintrin.h>
#endif

enum { TB_GATHER = 0, TB_WINDOW8 = 1, TB_WINDOW16 = 2 };

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
#if defined(__AVX2__)
    const __m256i seven = _mm256_set1_epi32(7), minus_one = _mm256_set1_epi32(-1);
    for (; i + 8 <= n; i += 8) {
        const float *w = weight + i * width;
        const int32_t *s = src + i * width, *r = rel + i * width, *win = window + (i / 8) * width;
        const int8_t *m = mode + (i / 8) * width;
        __m256 acc = _mm256_setzero_ps();
        const int32_t shared = block_window[i / 8];
        if (shared >= 0) {              /* one window serves every k of the block */
            const __m256 xs = _mm256_loadu_ps(row + shared);
            for (int64_t k = 0; k < width; ++k) {
                const __m256i idx = _mm256_loadu_si256((const __m256i *)(r + 8 * k));
                __m256 x = _mm256_permutevar8x32_ps(xs, idx);
                x = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, minus_one)));
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(w + 8 * k), x));
            }
        } else {
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
        }
        if (stream && ((uintptr_t)(out + i) & 15) == 0) {
            /* 16-byte streaming stores: large arrays from malloc/mmap start
             * 16 bytes past a page, so 32-byte alignment is rare. */
            _mm_stream_ps(out + i, _mm256_castps256_ps128(acc));
            _mm_stream_ps(out + i + 4, _mm256_extractf128_ps(acc, 1));
        } else {
            _mm256_storeu_ps(out + i, acc);
        }
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
#if defined(__AVX2__)
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
