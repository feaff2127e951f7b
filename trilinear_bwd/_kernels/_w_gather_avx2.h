/*
 * The AVX2 W gather of float64 rows (_w_gather.h, which includes this file
 * where the variant has AVX2 and not AVX-512): a full block's 8 sums in two
 * vectors of 4, each k's 8 row elements read by two gathers of 4 (the
 * table's modes are for AVX-512's permutes); the partial last block one
 * point at a time (tb_block_d_scalar).
 */
#ifndef TRILINEAR_BWD_W_GATHER_AVX2_H
#define TRILINEAR_BWD_W_GATHER_AVX2_H

#include <immintrin.h>

#include "_w_gather_out8.h"

/* tb_double_to_float_odd on 4 lanes: rounded to nearest, stepped back toward
 * zero where that went away from it, the last bit set where inexact. */
TB_ALWAYS_INLINE __m128 tb_odd4(__m256d x)
{
    const __m128 f = _mm256_cvtpd_ps(x);
    const __m256d back = _mm256_cvtps_pd(f);
    const __m256d sign = _mm256_set1_pd(-0.0);
    const __m256d away = _mm256_cmp_pd(_mm256_andnot_pd(sign, back), _mm256_andnot_pd(sign, x),
                                       _CMP_GT_OQ);
    const __m256d inexact = _mm256_cmp_pd(back, x, _CMP_NEQ_OQ);
    /* The 64-bit masks' low halves, as 4 lanes of 32 bits. */
    const __m256i low = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m128i aw = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(away), low));
    const __m128i ix = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), low));
    const __m128i u = _mm_add_epi32(_mm_castps_si128(f), aw);     /* -1 where away */
    return _mm_castsi128_ps(_mm_or_si128(u, _mm_and_si128(ix, _mm_set1_epi32(1))));
}

/* A full block's 8 sums, two vectors of 4, to out at element i. */
TB_ALWAYS_INLINE void tb_out_d8(void *out, int64_t i, __m256d lo, __m256d hi, int stream,
                                int kind)
{
    if (kind == TB_OUT_F64) {
        double *dst = (double *)out + i;
        if (stream && ((uintptr_t)dst & 15) == 0) {
            tb_stream_f64(dst, lo);
            tb_stream_f64(dst + 4, hi);
        } else {
            _mm256_storeu_pd(dst, lo);
            _mm256_storeu_pd(dst + 4, hi);
        }
        return;
    }
    const __m256 f = kind == TB_OUT_F32 ? _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo))
                                        : _mm256_set_m128(tb_odd4(hi), tb_odd4(lo));
    tb_out8(out, i, f, stream, kind);
}

TB_ALWAYS_INLINE void tb_gather_rows_d_body(void *out, int64_t out_stride,
                                            const double *restrict rows, int64_t row_stride,
                                            int64_t n_rows, const tb_axis *ax, int stream,
                                            int kind, int64_t width)
{
    const double *weight = (const double *)ax->padded_weight;
    const int64_t n = ax->n_target;
    for (int64_t i = 0; i < n; i += 8) {
        const double *w = weight + i * width;
        const int32_t *s = ax->padded_src + i * width;
        for (int64_t y = 0; y < n_rows; ++y) {
            const double *row = rows + y * row_stride;
            if (n - i < 8) {
                tb_block_d_scalar((char *)out + y * out_stride * TB_OUT_BYTES(kind), row, w, s,
                                  i, n - i, width, kind);
                continue;
            }
            __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
            for (int64_t k = 0; k < width; ++k) {
                const __m256d xl = _mm256_i32gather_pd(row, _mm_loadu_si128((const __m128i *)(s + 8 * k)), 8);
                const __m256d xh = _mm256_i32gather_pd(row, _mm_loadu_si128((const __m128i *)(s + 8 * k + 4)), 8);
                lo = _mm256_add_pd(lo, _mm256_mul_pd(_mm256_loadu_pd(w + 8 * k), xl));
                hi = _mm256_add_pd(hi, _mm256_mul_pd(_mm256_loadu_pd(w + 8 * k + 4), xh));
            }
            tb_out_d8(out, y * out_stride + i, lo, hi, stream, kind);
        }
    }
}

#endif
