/*
 * The W pass of channels-first rows: out[i] = sum_k w[i,k] * row[src[i,k]],
 * over float64 rows, the kernel's sums for every dtype (docs/numerics.md,
 * "One rounding"), each sum rounded once to the target's dtype as it is
 * stored (TB_OUT_F64: stored as it is).
 *
 * The table is padded to `width` terms per output point (padding reads a zero
 * sentinel with weight 0, which adds +0 and changes nothing) and stored in
 * blocks of 8 output points, k-major inside a block:
 *     index of (i, k) = (i / 8) * 8 * width + k * 8 + i % 8,
 * so that the 8 weights and 8 source indices of one k load as vectors.  For
 * each (block, k) the plan (_core/_axis_table.py) records in `mode` how far apart its
 * 8 row elements lie, from window[block, k] on: within 8 (TB_WINDOW8), 16
 * (TB_WINDOW16) or 32 (TB_WINDOW32) elements, or anywhere (TB_GATHER); `rel`
 * holds the offsets inside the window, -1 for padding; block_window[block]
 * >= 0 where every k of the block reads within the same 8 elements
 * (downsampling).  Row buffers keep 32 spare elements after the sentinel, so
 * that a window may run past the row's end.
 *
 * This file holds what every variant shares -- the output kinds, one block
 * element by element (the portable path, and the partial last block of
 * AVX2) and the entry point, tb_gather_rows_d -- and picks, at one place
 * below, the vector path of the instruction set being compiled:
 * _w_gather_avx512.h (the modes, by permutes) or _w_gather_avx2.h (gathers).
 * All paths add the same terms in the same order with separate multiply and
 * add, and lanes of padding read zeros as the sentinel holds, so they round
 * identically: the same bits.
 *
 * Every row of a plane uses the same table, so the W pass takes a plane's
 * rows (or a few of them) at once, each block's set-up done once for all of
 * them where the vector path keeps it in registers.  float32 results are
 * stored with streaming (non-temporal) stores where `stream` is set and a
 * block is 16-byte aligned (see _store.h); float16 / bfloat16 ones are
 * rounded from float64 in registers exactly as _convert.h rounds one
 * element (through float32 rounded to odd), so that a 16-bit result needs
 * neither a row buffer nor a second pass.
 */
#ifndef TRILINEAR_BWD_W_GATHER_H
#define TRILINEAR_BWD_W_GATHER_H

#include <stdint.h>

#include "_constants.h"
#include "_kernel_plan.h"
#include "_portable.h"
#include "_convert.h"
#include "_simd.h"

/* The modes (TB_GATHER, TB_WINDOW8/16/32) and the block of TB_W_BLOCK points
 * come from _constants.h; the code is written for blocks of 8. */
#if TB_W_BLOCK != 8
#error "_w_gather.h handles blocks of exactly 8 output points"
#endif

/* What the output rows hold. */
enum { TB_OUT_F32 = 0, TB_OUT_F16 = 1, TB_OUT_BF16 = 2, TB_OUT_F64 = 3 };

/* Bytes of one output element of this kind. */
#define TB_OUT_BYTES(kind) ((kind) == TB_OUT_F64 ? 8 : (kind) == TB_OUT_F32 ? 4 : 2)

/* The most terms per point whose set-up is kept in registers across rows;
 * wider tables (strong downsampling) set each block up again for each row. */
#define TB_ROWS_MAX_WIDTH 8

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

/* tb_gather_rows_d_body: the rows of one call, each block of each row, in
 * this variant's way (one definition per instruction set, chosen here). */
#if defined(__AVX512F__)
#include "_w_gather_avx512.h"
#elif defined(__AVX2__)
#include "_w_gather_avx2.h"
#else
TB_ALWAYS_INLINE void tb_gather_rows_d_body(void *out, int64_t out_stride,
                                            const double *restrict rows, int64_t row_stride,
                                            int64_t n_rows, const tb_axis *ax, int stream,
                                            int kind, int64_t width)
{
    (void)stream;
    for (int64_t i = 0; i < ax->n_target; i += 8) {
        const int64_t n_valid = ax->n_target - i < 8 ? ax->n_target - i : 8;
        for (int64_t y = 0; y < n_rows; ++y)
            tb_block_d_scalar((char *)out + y * out_stride * TB_OUT_BYTES(kind),
                              rows + y * row_stride,
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
