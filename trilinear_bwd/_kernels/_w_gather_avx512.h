/*
 * The AVX-512 W gather of float64 rows (_w_gather.h, which includes this
 * file where the variant has AVX-512): a block's 8 sums in one vector, each
 * k's 8 row elements read as the table's modes allow -- a two-source
 * permute (vpermt2pd) of the 16 elements from its window (TB_WINDOW8,
 * TB_WINDOW16), two such permutes and a blend (TB_WINDOW32), one permute of
 * the shared 8 (block_window >= 0), or a gather -- and the partial last
 * block stored under a mask.  A permute costs a cycle where a gather of 8
 * costs several.
 */
#ifndef TRILINEAR_BWD_W_GATHER_AVX512_H
#define TRILINEAR_BWD_W_GATHER_AVX512_H

#include <immintrin.h>

#include "_w_gather_out8.h"

/* tb_float_to_bf16 on 16 lanes, as 32-bit lanes holding the 16-bit results. */
TB_ALWAYS_INLINE __m512i tb_bf16_bits16(__m512 a)
{
    const __m512i u = _mm512_castps_si512(a);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                         _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(u, 16),
                                _mm512_set1_epi32(0x0040));
}

/* 16 lanes to out at element i, the first n_valid of them (16: all). */
TB_ALWAYS_INLINE void tb_out16(void *out, int64_t i, __m512 a, int64_t n_valid, int stream,
                               int kind)
{
    const __mmask16 head = (__mmask16)((1u << n_valid) - 1u);
    if (kind == TB_OUT_F32) {
        float *dst = (float *)out + i;
        if (n_valid < 16)
            _mm512_mask_storeu_ps(dst, head, a);
        else if (stream && ((uintptr_t)dst & 15) == 0)
            tb_stream_f32(dst, a);
        else
            _mm512_storeu_ps(dst, a);
        return;
    }
    const __m256i h = kind == TB_OUT_F16 ? _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)
                                         : _mm512_cvtepi32_epi16(tb_bf16_bits16(a));
    uint16_t *dst = (uint16_t *)out + i;
    if (n_valid < 16)
        _mm256_mask_storeu_epi16(dst, head, h);
    else
        _mm256_storeu_si256((__m256i *)dst, h);
}

/* tb_double_to_float_odd on 8 lanes: truncated, the last bit set where inexact. */
TB_ALWAYS_INLINE __m256 tb_odd8(__m512d x)
{
    const __m256 t = _mm512_cvt_roundpd_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(t), x, _CMP_NEQ_OQ);
    return _mm256_castsi256_ps(_mm256_mask_or_epi32(_mm256_castps_si256(t), inexact,
                                                    _mm256_castps_si256(t),
                                                    _mm256_set1_epi32(1)));
}

/* A block's 8 sums to out at element i, the first n_valid of them. */
TB_ALWAYS_INLINE void tb_out_d8(void *out, int64_t i, __m512d a, int64_t n_valid, int stream,
                                int kind)
{
    if (kind == TB_OUT_F64) {
        double *dst = (double *)out + i;
        if (n_valid < 8)
            _mm512_mask_storeu_pd(dst, (__mmask8)((1u << n_valid) - 1u), a);
        else if (stream && ((uintptr_t)dst & 15) == 0)
            tb_stream_f64(dst, a);
        else
            _mm512_storeu_pd(dst, a);
        return;
    }
    const __m256 f = kind == TB_OUT_F32 ? _mm512_cvtpd_ps(a) : tb_odd8(a);
    if (n_valid < 8) {
        tb_out16(out, i, _mm512_castps256_ps512(f), n_valid, 0, kind);
        return;
    }
    tb_out8(out, i, f, stream, kind);
}

/* How a block's terms are read, the widest any of its k needs (a narrower
 * k read the wider way takes the same elements: its offsets select within
 * the first 16, and lanes of padding are zeroed either way). */
enum { TB_D_SPAN16 = 0, TB_D_SPAN32 = 1, TB_D_GATHER = 2 };

/* One k of one block, set up once for all the rows. */
typedef struct {
    __m512d w;
    __m512i idx;        /* offsets in the window, 64-bit (spans) */
    __m256i src;        /* sources (gather) */
    __mmask8 valid, upper;
    int32_t at;
} tb_term_d8;

TB_ALWAYS_INLINE tb_term_d8 tb_term_d8_setup(const double *restrict w, const int32_t *restrict s,
                                             const int32_t *restrict r,
                                             const int32_t *restrict win, int32_t shared,
                                             int64_t k)
{
    tb_term_d8 t;
    const __m256i rel = _mm256_loadu_si256((const __m256i *)(r + 8 * k));
    t.w = _mm512_loadu_pd(w + 8 * k);
    t.idx = _mm512_cvtepi32_epi64(rel);
    t.src = _mm256_loadu_si256((const __m256i *)(s + 8 * k));
    t.valid = _mm256_cmpgt_epi32_mask(rel, _mm256_set1_epi32(-1));
    t.upper = _mm256_cmpgt_epi32_mask(rel, _mm256_set1_epi32(15));
    t.at = shared >= 0 ? shared : win[k];
    return t;
}

/* The 8 elements of term t in row, read as `span` says. */
TB_ALWAYS_INLINE __m512d tb_term_d8_read(const tb_term_d8 *t, const double *restrict row,
                                         int span)
{
    if (span == TB_D_GATHER)
        return _mm512_i32gather_pd(t->src, row, 8);
    const double *p = row + t->at;
    const __m512d lo = _mm512_maskz_permutex2var_pd(t->valid, _mm512_loadu_pd(p), t->idx,
                                                    _mm512_loadu_pd(p + 8));
    if (span == TB_D_SPAN16)
        return lo;
    const __m512d hi = _mm512_maskz_permutex2var_pd(t->valid, _mm512_loadu_pd(p + 16), t->idx,
                                                    _mm512_loadu_pd(p + 24));
    return _mm512_mask_blend_pd(t->upper, lo, hi);
}

/* The rows of one block, its `width` terms set up in t, read as `span` says;
 * width and span constants where it is called, so that the loop over terms
 * unrolls with nothing to choose. */
TB_ALWAYS_INLINE void tb_block_d8_rows(void *out, int64_t out_stride,
                                       const double *restrict rows, int64_t row_stride,
                                       int64_t n_rows, const tb_term_d8 *t, int64_t width,
                                       int span, int64_t i, int64_t n_valid, int stream,
                                       int kind)
{
    for (int64_t y = 0; y < n_rows; ++y) {
        const double *row = rows + y * row_stride;
        __m512d acc = _mm512_setzero_pd();
        for (int64_t k = 0; k < width; ++k)
            acc = _mm512_add_pd(acc, _mm512_mul_pd(t[k].w, tb_term_d8_read(&t[k], row, span)));
        tb_out_d8(out, y * out_stride + i, acc, n_valid, stream, kind);
    }
}

#define TB_D8_SPANS(W)                                                                       \
    if (span == TB_D_SPAN16)                                                                 \
        tb_block_d8_rows(out, out_stride, rows, row_stride, n_rows, t, (W), TB_D_SPAN16, i,  \
                         n_valid, stream, kind);                                             \
    else if (span == TB_D_SPAN32)                                                            \
        tb_block_d8_rows(out, out_stride, rows, row_stride, n_rows, t, (W), TB_D_SPAN32, i,  \
                         n_valid, stream, kind);                                             \
    else                                                                                     \
        tb_block_d8_rows(out, out_stride, rows, row_stride, n_rows, t, (W), TB_D_GATHER, i,  \
                         n_valid, stream, kind);                                             \
    break;

TB_ALWAYS_INLINE void tb_gather_rows_d_body(void *out, int64_t out_stride,
                                            const double *restrict rows, int64_t row_stride,
                                            int64_t n_rows, const tb_axis *ax, int stream,
                                            int kind, int64_t width)
{
    const double *weight = (const double *)ax->padded_weight;
    const int64_t n = ax->n_target;
    for (int64_t i = 0, b = 0; i < n; i += 8, ++b) {
        const int64_t n_valid = n - i < 8 ? n - i : 8;
        const double *w = weight + i * width;
        const int32_t *s = ax->padded_src + i * width, *r = ax->padded_rel + i * width;
        const int32_t *win = ax->window + b * width;
        const int8_t *m = ax->mode + b * width;
        const int32_t shared = ax->block_window[b];
        int span = TB_D_SPAN16;
        if (shared < 0)
            for (int64_t k = 0; k < width; ++k)
                if (m[k] == TB_GATHER)
                    span = TB_D_GATHER;
                else if (m[k] == TB_WINDOW32 && span == TB_D_SPAN16)
                    span = TB_D_SPAN32;
        if (width <= TB_ROWS_MAX_WIDTH) {
            tb_term_d8 t[TB_ROWS_MAX_WIDTH];
            for (int64_t k = 0; k < width; ++k)
                t[k] = tb_term_d8_setup(w, s, r, win, shared, k);
            switch (width) {
            case 1: TB_D8_SPANS(1)
            case 2: TB_D8_SPANS(2)
            case 3: TB_D8_SPANS(3)
            case 4: TB_D8_SPANS(4)
            case 5: TB_D8_SPANS(5)
            case 6: TB_D8_SPANS(6)
            case 7: TB_D8_SPANS(7)
            default: TB_D8_SPANS(TB_ROWS_MAX_WIDTH)
            }
        } else {
            for (int64_t y = 0; y < n_rows; ++y) {
                const double *row = rows + y * row_stride;
                __m512d acc = _mm512_setzero_pd();
                for (int64_t k = 0; k < width; ++k) {
                    const tb_term_d8 t = tb_term_d8_setup(w, s, r, win, shared, k);
                    acc = _mm512_add_pd(acc, _mm512_mul_pd(t.w, tb_term_d8_read(&t, row, span)));
                }
                tb_out_d8(out, y * out_stride + i, acc, n_valid, stream, kind);
            }
        }
    }
}
#undef TB_D8_SPANS

#endif
