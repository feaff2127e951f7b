/*
 * The W pass of channels-first rows: out[i] = sum_k w[i,k] * row[src[i,k]].
 *
 * The table is padded to `width` terms per output point (padding reads a zero
 * sentinel with weight 0, which adds +0 and changes nothing) and stored in
 * blocks of 8 output points, k-major inside a block:
 *     index of (i, k) = (i / 8) * 8 * width + k * 8 + i % 8,
 * so that the 8 weights and 8 source indices of one k load as vectors.  The
 * portable path walks this table one point at a time.  The vector paths read
 * a block's 8 row elements for one k in one of these ways, chosen per
 * (block, k) at plan time (_tables.py) and recorded in `mode`:
 *   TB_WINDOW8:  they lie within 8 consecutive elements starting at
 *                window[block, k]: one load and one in-register permute;
 *   TB_WINDOW16: within 16: AVX2 uses two loads, two permutes and a blend,
 *                AVX-512 one two-source permute (vpermt2ps) for two blocks;
 *   TB_WINDOW32: within 32: AVX-512 uses one two-source permute per block,
 *                AVX2 three loads, three permutes and two blends where the
 *                8 lie within 24 (TB_WINDOW24, chosen at set-up), else a
 *                gather;
 *   TB_GATHER:   anywhere: one gather instruction.
 * `rel` holds the offsets inside the window, -1 for padding, whose lanes are
 * zeroed.  When every k of a block reads within the same 8 elements
 * (block_window[block] >= 0, typical of downsampling) the window is loaded
 * once for the block; when every k of a block reads 8 real elements 3
 * apart or is padding alone (block_window[block] == TB_W_STRIDE3, 3x
 * upsampling away from the edges) and the table has TB_W_STRIDE3_WIDTH
 * terms (the backward's), AVX2 reads each k by three loads, two blends and
 * a permute instead of a TB_WINDOW32 gather.  A permute costs a cycle where
 * a gather of 8 or 16 elements costs several.  Row buffers keep 32 spare
 * elements after the sentinel, so that a window may run past the row's end.
 * All paths add the same terms in the same order with separate multiply and
 * add, so they round identically.
 *
 * Every row of a plane uses the same table, so the W pass takes a plane's
 * rows (or a few of them) at once: each block's weights, indices, masks and
 * window offsets are set up once, in registers, for all the rows (short rows
 * spent most of their time on that set-up).  The output rows hold float32,
 * with streaming (non-temporal) stores where `stream` is set and a block is
 * 16-byte aligned (see _store.h), or float16 / bfloat16, rounded from the
 * float32 sums in registers exactly as _convert.h rounds one element, so that
 * a 16-bit result needs neither a float32 row buffer nor a second pass.
 */
#ifndef TRILINEAR_BWD_W_GATHER_H
#define TRILINEAR_BWD_W_GATHER_H

#include <stdint.h>

#include "_constants.h"
#include "_kernel_plan.h"
#include "_portable.h"
#include "_convert.h"
#include "_simd.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* The modes (TB_GATHER, TB_WINDOW8/16/32) and the block of TB_W_BLOCK points
 * come from _constants.h; the vector code below is written for blocks of 8. */
#if TB_W_BLOCK != 8
#error "_w_gather.h handles blocks of exactly 8 output points"
#endif

/* What the output rows hold. */
enum { TB_OUT_F32 = 0, TB_OUT_F16 = 1, TB_OUT_BF16 = 2 };

/* The most terms per point whose set-up is kept in registers across rows;
 * wider tables (strong downsampling) set each block up again for each row. */
#define TB_ROWS_MAX_WIDTH 8

/* Element i of out, any kind, from its float32 value. */
TB_ALWAYS_INLINE void tb_out1(void *out, int64_t i, float a, int kind)
{
    if (kind == TB_OUT_F32)
        ((float *)out)[i] = a;
    else
        ((uint16_t *)out)[i] = kind == TB_OUT_F16 ? tb_float_to_half(a) : tb_float_to_bf16(a);
}

#if defined(__AVX512F__)
/* Two 256-bit halves as one 512-bit vector. */
#define TB_JOIN_PS(lo, hi) _mm512_castpd_ps(_mm512_insertf64x4(                        \
    _mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1))
#define TB_JOIN_SI(lo, hi) _mm512_inserti64x4(_mm512_castsi256_si512(lo), (hi), 1)

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
#endif

#if defined(__AVX2__)
/* 16-byte streaming stores: large arrays from malloc/mmap start 16 bytes
 * past a page, so 32-byte alignment is rare. */
#define TB_STREAM8(p, a) (_mm_stream_ps((p), _mm256_castps256_ps128(a)),                \
                          _mm_stream_ps((p) + 4, _mm256_extractf128_ps((a), 1)))

/* `stream` of a call whose every float32 row starts 16-byte aligned (the
 * AVX2 gather checks the rows once): every block's streaming store is
 * aligned, with no test per row. */
#define TB_STREAM_ALIGNED 2

/* 8 lanes to out at element i, the first n_valid of them (8: all; fewer
 * only where AVX-512 masks exist); streamed where `stream` is set and the
 * 8 are 16-byte aligned. */
TB_ALWAYS_INLINE void tb_out8(void *out, int64_t i, __m256 a, int64_t n_valid, int stream,
                              int kind)
{
#if defined(__AVX512F__)
    if (n_valid < 8) {
        tb_out16(out, i, _mm512_castps256_ps512(a), n_valid, 0, kind);
        return;
    }
#endif
    (void)n_valid;
    if (kind == TB_OUT_F32) {
        float *dst = (float *)out + i;
#if defined(__AVX512F__)
        if (stream && ((uintptr_t)dst & 15) == 0)
#else
        if (stream && (stream == TB_STREAM_ALIGNED || ((uintptr_t)dst & 15) == 0))
#endif
            TB_STREAM8(dst, a);
        else
            _mm256_storeu_ps(dst, a);
        return;
    }
    uint16_t *dst = (uint16_t *)out + i;
    if (kind == TB_OUT_F16) {
        _mm_storeu_si128((__m128i *)dst, _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
        return;
    }
    const __m256i u = _mm256_castps_si256(a);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                         _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))), 16);
    /* NaN where |u| > 0x7f800000 (a signed compare: both sides are >= 0). */
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
    const __m256i bits = _mm256_blendv_epi8(rounded, quiet, nan);
    /* Lanes 0-3 and 4-7 packed to 16 bits (the values fit: no saturation). */
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    _mm_storeu_si128((__m128i *)dst, _mm256_castsi256_si128(packed));
}

/* tb_term8's mode for a TB_WINDOW32 term within 24 elements: AVX2 reads it
 * by three loads, three permutes and two blends, where a gather of 8 takes
 * longer on AMD cores (the table's modes stop at TB_WINDOW32; the AVX-512
 * variant's last block never takes it). */
#define TB_WINDOW24 (TB_WINDOW32 + 1)
/* Whether this variant's tb_term8_setup ever chooses it. */
#if defined(__AVX512F__)
#define TB_HAS_W24 0
#else
#define TB_HAS_W24 1
#endif

/* One k of one block of 8 points, set up: how its 8 elements are read from
 * any row, and their weights. */
typedef struct {
    __m256 w, valid, upper;
    __m256i idx;
    int mode;
    int32_t at;
    int32_t even_at;    /* AVX2: >= 0 where the term reads every other element from there */
} tb_term8;

#if !defined(__AVX512F__)
/* Elements 0, 2, ..., 14 of p: the even elements of each 128-bit lane of the
 * two loads, then their 64-bit pieces in order. */
TB_ALWAYS_INLINE __m256 tb_read_even8(const float *p)
{
    const __m256 e = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), 0x88);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8));
}

/* Elements 0, 3, ..., 21 of p: three loads blended into
 * (p0, p9, p18, p3, p12, p21, p6, p15) by immediates, then one permute by
 * a constant into order.  Reads p[0 .. 23]. */
TB_ALWAYS_INLINE __m256 tb_read_third8(const float *p)
{
    const __m256 ab = _mm256_blend_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), 0x92);
    const __m256 abc = _mm256_blend_ps(ab, _mm256_loadu_ps(p + 16), 0x24);
    return _mm256_permutevar8x32_ps(abc, _mm256_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5));
}

/* The rows of one block whose first n_terms terms read 8 real elements 3
 * apart and whose others are padding alone (each adds w * 0 = +0 to a sum
 * that starts from +0 and so is never -0: left out, the same bits): one
 * loop with nothing else to choose, the weights and window offsets in
 * registers. */
TB_ALWAYS_INLINE void tb_third_rows_body(void *out, int64_t out_stride,
                                         const float *restrict rows, int64_t row_stride,
                                         int64_t n_rows, const float *restrict w,
                                         const int32_t *restrict win, int64_t i,
                                         int64_t n_valid, int64_t n_terms, int stream, int kind)
{
    __m256 wk[TB_ROWS_MAX_WIDTH];
    int64_t at[TB_ROWS_MAX_WIDTH];
    for (int64_t k = 0; k < n_terms; ++k) {
        wk[k] = _mm256_loadu_ps(w + 8 * k);
        at[k] = win[k];
    }
    for (int64_t y = 0; y < n_rows; ++y) {
        const float *row = rows + y * row_stride;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t k = 0; k < n_terms; ++k)
            acc = _mm256_add_ps(acc, _mm256_mul_ps(wk[k], tb_read_third8(row + at[k])));
        tb_out8(out, y * out_stride + i, acc, n_valid, stream, kind);
    }
}

/* The rows of one block whose every term reads within the same 8 elements
 * (block_window[block] >= 0, downsampling): the window loaded once a row,
 * each term a permute, a mask, a multiply and an add, with nothing else to
 * choose -- tb_term8_read's TB_WINDOW8 read, so the same bits. */
TB_ALWAYS_INLINE void tb_shared_rows_body(void *out, int64_t out_stride,
                                          const float *restrict rows, int64_t row_stride,
                                          int64_t n_rows, const float *restrict w,
                                          const int32_t *restrict r, int32_t at, int64_t i,
                                          int64_t n_valid, int64_t width, int stream, int kind)
{
    __m256 wk[TB_ROWS_MAX_WIDTH], vk[TB_ROWS_MAX_WIDTH];
    __m256i ik[TB_ROWS_MAX_WIDTH];
    for (int64_t k = 0; k < width; ++k) {
        wk[k] = _mm256_loadu_ps(w + 8 * k);
        ik[k] = _mm256_loadu_si256((const __m256i *)(r + 8 * k));
        vk[k] = _mm256_castsi256_ps(_mm256_cmpgt_epi32(ik[k], _mm256_set1_epi32(-1)));
    }
    for (int64_t y = 0; y < n_rows; ++y) {
        const __m256 x = _mm256_loadu_ps(rows + y * row_stride + at);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t k = 0; k < width; ++k)
            acc = _mm256_add_ps(acc, _mm256_mul_ps(wk[k], _mm256_and_ps(
                                         _mm256_permutevar8x32_ps(x, ik[k]), vk[k])));
        tb_out8(out, y * out_stride + i, acc, n_valid, stream, kind);
    }
}
#endif

TB_ALWAYS_INLINE tb_term8 tb_term8_setup(const float *restrict w, const int32_t *restrict s,
                                         const int32_t *restrict r,
                                         const int32_t *restrict win,
                                         const int8_t *restrict m, int32_t shared, int64_t k)
{
    tb_term8 t;
    t.w = _mm256_loadu_ps(w + 8 * k);
    t.mode = shared >= 0 ? TB_WINDOW8 : m[k] == TB_WINDOW32 ? TB_GATHER : m[k];
    t.at = shared >= 0 ? shared : win[k];
#if !defined(__AVX512F__)
    /* AVX2: a TB_WINDOW32 term whose 8 elements lie within 24 (odd scales
     * a little above 2x) reads three windows instead of gathering. */
    if (shared < 0 && m[k] == TB_WINDOW32 &&
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(
            _mm256_loadu_si256((const __m256i *)(r + 8 * k)), _mm256_set1_epi32(23)))) == 0)
        t.mode = TB_WINDOW24;
#endif
    t.idx = _mm256_loadu_si256((const __m256i *)((t.mode == TB_GATHER ? s : r) + 8 * k));
    t.valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(t.idx, _mm256_set1_epi32(-1)));
    t.upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(t.idx, _mm256_set1_epi32(7)));
    t.even_at = -1;
#if !defined(__AVX512F__)
    /* AVX2 (the AVX-512 variant reads its last block through tb_term8 too,
     * and keeps to the table's modes): 8 sources every other element of 16
     * from the window, all real (2x upsampling away from the edges), i.e.
     * rel = c + 2j in lane j, c = 0 or 1.  A block whose terms all read so
     * takes tb_read_even8, two loads, a shuffle and a lane permute per
     * term, where TB_WINDOW16 takes two loads, two permutes, a blend and a
     * mask. */
    if (t.mode == TB_WINDOW16 && r[8 * k] >= 0) {
        const __m256i c = _mm256_set1_epi32(r[8 * k]);
        const __m256i even = _mm256_add_epi32(c, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
        if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(t.idx, even))) == 0xff)
            t.even_at = t.at + r[8 * k];
    }
    /* A term of padding alone (a slot none of the 8 points has) reads the
     * sentinel and the zeros after it (_kernels.pxi) with weight 0, adding
     * +0 to sums that are never -0: no change, as in the masked read. */
    if (t.mode != TB_GATHER && _mm256_movemask_ps(t.valid) == 0)
        t.even_at = s[8 * k];
#endif
    return t;
}

/* The 8 elements of term t in row.  w24, a constant where it is called, says
 * whether t may be a TB_WINDOW24 term: 0 keeps that test out of the loops of
 * blocks that have none (the edge blocks of 2x upsampling, whose other
 * terms would each pay it on every row). */
TB_ALWAYS_INLINE __m256 tb_term8_read(const tb_term8 *t, const float *restrict row, int w24)
{
    if (t->mode == TB_GATHER)
        return _mm256_i32gather_ps(row, t->idx, 4);
    __m256 x = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + t->at), t->idx);
    if (t->mode == TB_WINDOW16 || (w24 && t->mode == TB_WINDOW24))
        x = _mm256_blendv_ps(x, _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + t->at + 8), t->idx),
                             t->upper);
    /* Lanes 16-23 (bit 4 of the offset, shifted into the sign bit that
     * blendv reads; padding's -1 has it too, and is zeroed below). */
    if (w24 && t->mode == TB_WINDOW24)
        x = _mm256_blendv_ps(x, _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + t->at + 16), t->idx),
                             _mm256_castsi256_ps(_mm256_slli_epi32(t->idx, 27)));
    return _mm256_and_ps(x, t->valid);
}

#if !defined(__AVX512F__)
/*
 * AVX2: the rows of one block whose n_terms terms (set up in t) all read
 * within `span` elements of their windows (16: TB_WINDOW8 and TB_WINDOW16
 * terms; 24: TB_WINDOW24 ones too; 0: every other element, `even_at`), one
 * loop with nothing to choose per term.  A term is read as tb_term8_read
 * reads the widest mode: a narrower term's lanes take the same element
 * from the first window (its offsets are below 8, or below 16), and a
 * lane of padding is zeroed as before, so the same bits.  Where span is 0,
 * each term is tb_read_even8's two loads, shuffle and permute (2x
 * upsampling; a term of padding alone reads the sentinel's zeros).
 */
TB_ALWAYS_INLINE void tb_span_rows_body(void *out, int64_t out_stride,
                                        const float *restrict rows, int64_t row_stride,
                                        int64_t n_rows, const tb_term8 *t, int64_t n_terms,
                                        int span, int64_t i, int64_t n_valid, int stream,
                                        int kind)
{
    for (int64_t y = 0; y < n_rows; ++y) {
        const float *row = rows + y * row_stride;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t k = 0; k < n_terms; ++k) {
            __m256 x;
            if (span == 0) {
                x = tb_read_even8(row + t[k].even_at);
            } else {
                const float *p = row + t[k].at;
                x = _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(p), t[k].idx),
                                     _mm256_permutevar8x32_ps(_mm256_loadu_ps(p + 8), t[k].idx),
                                     t[k].upper);
                if (span == 24)
                    x = _mm256_blendv_ps(
                        x, _mm256_permutevar8x32_ps(_mm256_loadu_ps(p + 16), t[k].idx),
                        _mm256_castsi256_ps(_mm256_slli_epi32(t[k].idx, 27)));
                x = _mm256_and_ps(x, t[k].valid);
            }
            acc = _mm256_add_ps(acc, _mm256_mul_ps(t[k].w, x));
        }
        tb_out8(out, y * out_stride + i, acc, n_valid, stream, kind);
    }
}

/* Whether the last of a block's `width` terms is padding for all 8 points:
 * it adds w * 0 = +0 to sums that start from +0 and so are never -0, which
 * changes nothing; the loops above leave it out. */
TB_ALWAYS_INLINE int tb_last_is_padding(const int32_t *restrict r, int64_t width)
{
    const __m256i last = _mm256_loadu_si256((const __m256i *)(r + 8 * (width - 1)));
    return _mm256_movemask_ps(_mm256_castsi256_ps(
               _mm256_cmpgt_epi32(last, _mm256_set1_epi32(-1)))) == 0;
}

/* tb_span_rows_body with the block's width, or one term fewer where the
 * last is padding alone, each count and span known to the compiler. */
#define TB_SPAN_ROWS(N, SPAN)                                                                \
    tb_span_rows_body(out, out_stride, rows, row_stride, n_rows, t, (N), (SPAN), i, n_valid, \
                      stream, kind)
TB_ALWAYS_INLINE void tb_span_rows(void *out, int64_t out_stride, const float *restrict rows,
                                   int64_t row_stride, int64_t n_rows, const tb_term8 *t,
                                   int64_t width, int last_padding, int span, int64_t i,
                                   int64_t n_valid, int stream, int kind)
{
    const int64_t n = last_padding && width > 1 ? width - 1 : width;
    if (n == width) {
        if (span == 0)
            TB_SPAN_ROWS(width, 0);
        else if (span == 16)
            TB_SPAN_ROWS(width, 16);
        else
            TB_SPAN_ROWS(width, 24);
    } else {
        if (span == 0)
            TB_SPAN_ROWS(width - 1, 0);
        else if (span == 16)
            TB_SPAN_ROWS(width - 1, 16);
        else
            TB_SPAN_ROWS(width - 1, 24);
    }
}
#undef TB_SPAN_ROWS
#endif

#endif

#if defined(__AVX512F__)
/* One k of two consecutive blocks (16 points), set up.  Where neither block
 * needs a gather and both read within 16 elements, block b's lanes index the
 * 16 from its window and block b + 1's the 16 from its own (+16), so that
 * one two-source permute of the two windows reads all 16 lanes; where one
 * reads within 32, each block takes its own two-source permute of the 32
 * from its window.  Blocks sharing one window for every k (downsampling)
 * read from the same two addresses for every k, which the compiler loads
 * once. */
enum { TB_PAIR_GATHER = 0, TB_PAIR_16 = 1, TB_PAIR_32 = 2 };
typedef struct {
    __m512 w;
    __m512i idx;
    __mmask16 valid;
    int how;
    int32_t lo, hi;
} tb_term16;

TB_ALWAYS_INLINE tb_term16 tb_term16_setup(const float *restrict w, const int32_t *restrict s,
                                           const int32_t *restrict r,
                                           const int32_t *restrict win,
                                           const int8_t *restrict m, int32_t shared0,
                                           int32_t shared1, int64_t width, int64_t k)
{
    const int64_t next = 8 * width;     /* table offset of block b + 1 */
    const int shared = shared0 >= 0 && shared1 >= 0;
    const int m0 = shared ? TB_WINDOW8 : m[k], m1 = shared ? TB_WINDOW8 : m[width + k];
    tb_term16 t;
    t.w = TB_JOIN_PS(_mm256_loadu_ps(w + 8 * k), _mm256_loadu_ps(w + next + 8 * k));
    t.lo = shared ? shared0 : win[k];
    t.hi = shared ? shared1 : win[width + k];
    if (m0 == TB_GATHER || m1 == TB_GATHER) {
        t.how = TB_PAIR_GATHER;
        t.idx = TB_JOIN_SI(_mm256_loadu_si256((const __m256i *)(s + 8 * k)),
                           _mm256_loadu_si256((const __m256i *)(s + next + 8 * k)));
        t.valid = (__mmask16)0xffffu;
        return t;
    }
    const __m512i rel = TB_JOIN_SI(_mm256_loadu_si256((const __m256i *)(r + 8 * k)),
                                   _mm256_loadu_si256((const __m256i *)(r + next + 8 * k)));
    t.valid = _mm512_cmpgt_epi32_mask(rel, _mm512_set1_epi32(-1));
    if (m0 == TB_WINDOW32 || m1 == TB_WINDOW32) {
        t.how = TB_PAIR_32;
        t.idx = rel;
    } else {
        t.how = TB_PAIR_16;
        t.idx = _mm512_add_epi32(rel, TB_JOIN_SI(_mm256_setzero_si256(), _mm256_set1_epi32(16)));
    }
    return t;
}

/* The 16 elements of term t in row. */
TB_ALWAYS_INLINE __m512 tb_term16_read(const tb_term16 *t, const float *restrict row)
{
    if (t->how == TB_PAIR_GATHER)
        return _mm512_i32gather_ps(t->idx, row, 4);
    const __m512 a = _mm512_loadu_ps(row + t->lo);
    if (t->how == TB_PAIR_16)
        return _mm512_maskz_permutex2var_ps(t->valid, a, t->idx, _mm512_loadu_ps(row + t->hi));
    const __m512 x0 = _mm512_maskz_permutex2var_ps(t->valid & (__mmask16)0x00ffu, a, t->idx,
                                                   _mm512_loadu_ps(row + t->lo + 16));
    const __m512 x1 = _mm512_maskz_permutex2var_ps(t->valid & (__mmask16)0xff00u,
                                                   _mm512_loadu_ps(row + t->hi), t->idx,
                                                   _mm512_loadu_ps(row + t->hi + 16));
    return _mm512_mask_mov_ps(x0, (__mmask16)0xff00u, x1);
}
#endif

/*
 * n_rows rows, row y read at rows + y * row_stride and written at element
 * y * out_stride of out.  With `hoist` (width <= TB_ROWS_MAX_WIDTH, known to
 * the compiler) each block's terms are set up once for all rows; without,
 * once per row.
 */
TB_ALWAYS_INLINE void tb_gather_rows_body(void *out, int64_t out_stride,
                                          const float *restrict rows, int64_t row_stride,
                                          int64_t n_rows, const float *restrict weight,
                                          const int32_t *restrict src,
                                          const int32_t *restrict rel,
                                          const int32_t *restrict window,
                                          const int8_t *restrict mode,
                                          const int32_t *restrict block_window, int64_t n,
                                          int64_t width, int stream, int kind, int hoist)
{
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        const int64_t b = i / 8;
        const float *w = weight + i * width;
        const int32_t *s = src + i * width, *r = rel + i * width, *win = window + b * width;
        const int8_t *m = mode + b * width;
        if (hoist) {
            tb_term16 t[TB_ROWS_MAX_WIDTH];
            for (int64_t k = 0; k < width; ++k)
                t[k] = tb_term16_setup(w, s, r, win, m, block_window[b], block_window[b + 1],
                                       width, k);
            for (int64_t y = 0; y < n_rows; ++y) {
                const float *row = rows + y * row_stride;
                __m512 acc = _mm512_setzero_ps();
                for (int64_t k = 0; k < width; ++k)
                    acc = _mm512_add_ps(acc, _mm512_mul_ps(t[k].w, tb_term16_read(&t[k], row)));
                tb_out16(out, y * out_stride + i, acc, 16, stream, kind);
            }
        } else {
            for (int64_t y = 0; y < n_rows; ++y) {
                const float *row = rows + y * row_stride;
                __m512 acc = _mm512_setzero_ps();
                for (int64_t k = 0; k < width; ++k) {
                    const tb_term16 t = tb_term16_setup(w, s, r, win, m, block_window[b],
                                                        block_window[b + 1], width, k);
                    acc = _mm512_add_ps(acc, _mm512_mul_ps(t.w, tb_term16_read(&t, row)));
                }
                tb_out16(out, y * out_stride + i, acc, 16, stream, kind);
            }
        }
    }
    /* The last one or two blocks, the last one whole or not, its tail stored
     * under a mask (the table is padded to whole blocks, and the rows' spare
     * elements cover the windows). */
    const int64_t end8 = n;
#elif defined(__AVX2__)
    const int64_t end8 = n - n % 8;
    /* Blocks start 32 bytes apart: where every row starts 16-byte aligned,
     * so does every block. */
    if (stream && kind == TB_OUT_F32 && ((uintptr_t)out & 15) == 0
        && (n_rows == 1 || (out_stride * (int64_t)sizeof(float)) % 16 == 0))
        stream = TB_STREAM_ALIGNED;
#endif
#if defined(__AVX2__)
    for (; i < end8; i += 8) {
        const int64_t b = i / 8;
        const int64_t n_valid = n - i < 8 ? n - i : 8;
        const float *w = weight + i * width;
        const int32_t *s = src + i * width, *r = rel + i * width, *win = window + b * width;
        const int8_t *m = mode + b * width;
#if !defined(__AVX512F__)
        /* Only in the copy for TB_W_STRIDE3_WIDTH (a compile-time constant
         * here), so that the other widths' copies keep their code. */
        if (hoist && width == TB_W_STRIDE3_WIDTH && block_window[b] == TB_W_STRIDE3) {
            /* Its real terms first, then at most one of padding alone (3x
             * upsampling's tables); any other order takes the loops below. */
            int64_t real = 0;
            while (real < width && r[8 * real] >= 0)
                ++real;
            if (real == width) {
                tb_third_rows_body(out, out_stride, rows, row_stride, n_rows, w, win, i,
                                   n_valid, width, stream, kind);
                continue;
            }
            if (real == width - 1) {
                tb_third_rows_body(out, out_stride, rows, row_stride, n_rows, w, win, i,
                                   n_valid, width - 1, stream, kind);
                continue;
            }
        }
        if (hoist && block_window[b] >= 0) {
            tb_shared_rows_body(out, out_stride, rows, row_stride, n_rows, w, r, block_window[b],
                                i, n_valid, width, stream, kind);
            continue;
        }
#endif
        if (hoist) {
            tb_term8 t[TB_ROWS_MAX_WIDTH];
            int even = 1, w24 = 0, span = 16;
            for (int64_t k = 0; k < width; ++k) {
                t[k] = tb_term8_setup(w, s, r, win, m, block_window[b], k);
#if !defined(__AVX512F__)
                even = even && t[k].even_at >= 0;
                if (t[k].mode == TB_GATHER)
                    span = 32;
                else if (t[k].mode == TB_WINDOW24 && span < 24)
                    span = 24;
#endif
            }
#if !defined(__AVX512F__)
            /* Every term reads every other element (2x upsampling), or
             * every one within 16 or 24 elements of its window: one loop
             * with nothing else to choose, the weights and window offsets
             * in registers, a last term of padding alone left out. */
            if (even || span < 32) {
                tb_span_rows(out, out_stride, rows, row_stride, n_rows, t, width,
                             tb_last_is_padding(r, width), even ? 0 : span, i, n_valid, stream,
                             kind);
                continue;
            }
#endif
            (void)even;
            (void)span;
            (void)w24;
#if !defined(__AVX512F__)
            /* A copy of the loop below for blocks with a TB_WINDOW24 term
             * among gathers, so that the others' loop keeps its code. */
            for (int64_t k = 0; k < width; ++k)
                w24 = w24 || t[k].mode == TB_WINDOW24;
            if (w24) {
                for (int64_t y = 0; y < n_rows; ++y) {
                    const float *row = rows + y * row_stride;
                    __m256 acc = _mm256_setzero_ps();
                    for (int64_t k = 0; k < width; ++k)
                        acc = _mm256_add_ps(acc, _mm256_mul_ps(t[k].w,
                                                               tb_term8_read(&t[k], row, 1)));
                    tb_out8(out, y * out_stride + i, acc, n_valid, stream, kind);
                }
                continue;
            }
#endif
            for (int64_t y = 0; y < n_rows; ++y) {
                const float *row = rows + y * row_stride;
                __m256 acc = _mm256_setzero_ps();
                for (int64_t k = 0; k < width; ++k)
                    acc = _mm256_add_ps(acc, _mm256_mul_ps(t[k].w, tb_term8_read(&t[k], row, 0)));
                tb_out8(out, y * out_stride + i, acc, n_valid, stream, kind);
            }
        } else {
            for (int64_t y = 0; y < n_rows; ++y) {
                const float *row = rows + y * row_stride;
                __m256 acc = _mm256_setzero_ps();
                for (int64_t k = 0; k < width; ++k) {
                    const tb_term8 t = tb_term8_setup(w, s, r, win, m, block_window[b], k);
                    acc = _mm256_add_ps(acc,
                                        _mm256_mul_ps(t.w, tb_term8_read(&t, row, TB_HAS_W24)));
                }
                tb_out8(out, y * out_stride + i, acc, n_valid, stream, kind);
            }
        }
    }
#endif
    (void)block_window;
    (void)rel;
    (void)window;
    (void)mode;
    (void)stream;
    (void)hoist;
    for (; i < n; ++i) {
        const int64_t base = (i / 8) * 8 * width + i % 8;
        for (int64_t y = 0; y < n_rows; ++y) {
            const float *row = rows + y * row_stride;
            float acc = 0.0f;
            for (int64_t k = 0; k < width; ++k)
                acc = acc + weight[base + 8 * k] * row[src[base + 8 * k]];
            tb_out1(out, y * out_stride + i, acc, kind);
        }
    }
}

/* The widths 1 to 8 get copies with the width known to the compiler (which
 * then unrolls the loops over terms and keeps their set-up in registers),
 * each kind of output its own. */
#define TB_GATHER_ROWS_CASE(K, KIND)                                                        \
    case K:                                                                                 \
        tb_gather_rows_body(out, out_stride, rows, row_stride, n_rows, weight, src, rel,    \
                            window, mode, block_window, n, K, stream, KIND, 1);             \
        return;
#define TB_DEFINE_GATHER_ROWS(NAME, OUT_T, KIND)                                            \
    static inline void NAME##_terms(OUT_T *restrict out, int64_t out_stride,               \
                                    const float *restrict rows, int64_t row_stride,         \
                                    int64_t n_rows, const float *restrict weight,           \
                                    const int32_t *restrict src,                            \
                                    const int32_t *restrict rel,                            \
                                    const int32_t *restrict window,                         \
                                    const int8_t *restrict mode,                            \
                                    const int32_t *restrict block_window, int64_t n,        \
                                    int64_t width, int stream)                              \
    {                                                                                       \
        switch (width) {                                                                    \
        TB_GATHER_ROWS_CASE(1, KIND)                                                        \
        TB_GATHER_ROWS_CASE(2, KIND)                                                        \
        TB_GATHER_ROWS_CASE(3, KIND)                                                        \
        TB_GATHER_ROWS_CASE(4, KIND)                                                        \
        TB_GATHER_ROWS_CASE(5, KIND)                                                        \
        TB_GATHER_ROWS_CASE(6, KIND)                                                        \
        TB_GATHER_ROWS_CASE(7, KIND)                                                        \
        TB_GATHER_ROWS_CASE(8, KIND)                                                        \
        default:                                                                            \
            tb_gather_rows_body(out, out_stride, rows, row_stride, n_rows, weight, src,     \
                                rel, window, mode, block_window, n, width, stream, KIND, 0);\
        }                                                                                   \
    }                                                                                       \
    TB_ALWAYS_INLINE void NAME(OUT_T *restrict out, int64_t out_stride,                    \
                               const float *restrict rows, int64_t row_stride,              \
                               int64_t n_rows, const tb_axis *ax, int stream)               \
    {                                                                                       \
        NAME##_terms(out, out_stride, rows, row_stride, n_rows,                             \
                     (const float *)ax->padded_weight, ax->padded_src, ax->padded_rel,      \
                     ax->window, ax->mode, ax->block_window, ax->n_target, ax->width,       \
                     stream);                                                               \
    }

TB_DEFINE_GATHER_ROWS(tb_gather_rows_f32, float, TB_OUT_F32)
TB_DEFINE_GATHER_ROWS(tb_gather_rows_f16, uint16_t, TB_OUT_F16)
TB_DEFINE_GATHER_ROWS(tb_gather_rows_bf16, uint16_t, TB_OUT_BF16)

/*
 * float64 rows, the kernel's sums for every dtype (docs/numerics.md, "One
 * rounding"): out[i] = sum_k w[i,k] * row[src[i,k]] over the same padded
 * table, each sum rounded once to the target's dtype as it is stored
 * (TB_OUT_F64: stored as it is).  AVX-512 holds a block's 8 sums in one
 * vector and reads each k's 8 elements by a two-source permute (vpermt2pd)
 * of the 16 elements from its window (TB_WINDOW8, TB_WINDOW16), two such
 * permutes and a blend (TB_WINDOW32), one permute of the shared 8
 * (block_window >= 0), or a gather; AVX2 takes two gathers of 4.  Lanes of
 * padding read zeros, as the sentinel holds, so every path adds the same
 * terms in the same order: the same bits.
 */
enum { TB_OUT_F64 = 3 };

/* One sum to out[i], rounded once to the target's dtype. */
TB_ALWAYS_INLINE void tb_out1_d(void *out, int64_t i, double a, int kind)
{
    if (kind == TB_OUT_F64)
        ((double *)out)[i] = a;
    else if (kind == TB_OUT_F32)
        ((float *)out)[i] = (float)a;
    else
        ((uint16_t *)out)[i] = kind == TB_OUT_F16 ? tb_double_to_half(a) : tb_double_to_bf16(a);
}

/* Points i .. i + n_valid - 1 of one block, one at a time (the portable
 * path, and AVX2's last, partial block). */
TB_ALWAYS_INLINE void tb_block_d_scalar(void *out, const double *restrict row,
                                        const double *restrict w, const int32_t *restrict s,
                                        int64_t i, int64_t n_valid, int64_t width, int kind)
{
    for (int64_t p = 0; p < n_valid; ++p) {
        double acc = 0.0;
        for (int64_t k = 0; k < width; ++k)
            acc = acc + w[8 * k + p] * row[s[8 * k + p]];
        tb_out1_d(out, i + p, acc, kind);
    }
}

#if defined(__AVX512F__)
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
    tb_out8(out, i, kind == TB_OUT_F32 ? _mm512_cvtpd_ps(a) : tb_odd8(a), n_valid, stream, kind);
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
#elif defined(__AVX2__)
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
    tb_out8(out, i, f, 8, stream, kind);
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
                tb_block_d_scalar((char *)out + y * out_stride * (kind == TB_OUT_F64 ? 8
                                  : kind == TB_OUT_F32 ? 4 : 2), row, w, s, i, n - i, width,
                                  kind);
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
#else
TB_ALWAYS_INLINE void tb_gather_rows_d_body(void *out, int64_t out_stride,
                                            const double *restrict rows, int64_t row_stride,
                                            int64_t n_rows, const tb_axis *ax, int stream,
                                            int kind, int64_t width)
{
    const int64_t esize = kind == TB_OUT_F64 ? 8 : kind == TB_OUT_F32 ? 4 : 2;
    (void)stream;
    for (int64_t i = 0; i < ax->n_target; i += 8) {
        const int64_t n_valid = ax->n_target - i < 8 ? ax->n_target - i : 8;
        for (int64_t y = 0; y < n_rows; ++y)
            tb_block_d_scalar((char *)out + y * out_stride * esize, rows + y * row_stride,
                              (const double *)ax->padded_weight + i * width,
                              ax->padded_src + i * width, i, n_valid, width, kind);
    }
}
#endif

/* The channels-first W pass of n_rows float64 rows (row_stride apart; each
 * with its zero sentinel and 32 readable elements after it) over the padded
 * table, into n_rows target rows out_stride elements apart of the target's
 * kind (TB_OUT_*), each sum rounded once.  One copy per kind. */
static inline void tb_gather_rows_d(void *out, int64_t out_stride, const double *restrict rows,
                                    int64_t row_stride, int64_t n_rows, const tb_axis *ax,
                                    int stream, int kind)
{
    switch (kind) {
    case TB_OUT_F64:
        tb_gather_rows_d_body(out, out_stride, rows, row_stride, n_rows, ax, stream, TB_OUT_F64,
                              ax->width);
        return;
    case TB_OUT_F32:
        tb_gather_rows_d_body(out, out_stride, rows, row_stride, n_rows, ax, stream, TB_OUT_F32,
                              ax->width);
        return;
    case TB_OUT_F16:
        tb_gather_rows_d_body(out, out_stride, rows, row_stride, n_rows, ax, stream, TB_OUT_F16,
                              ax->width);
        return;
    default:
        tb_gather_rows_d_body(out, out_stride, rows, row_stride, n_rows, ax, stream, TB_OUT_BF16,
                              ax->width);
    }
}

#endif
