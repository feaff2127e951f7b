/*
 * The D and H passes: weighted sums of rows, each output element
 *     acc = ((0 + w0 * x0) + w1 * x1) + ...
 * over its terms in table order.  Plain axpys (one or two terms per sweep)
 * and the register-accumulating row sums of float64, the kernel's
 * accumulation type for every dtype (docs/numerics.md, "One rounding"), over
 * float64 rows, and over float32 / float16 / bfloat16 rows read in place and
 * widened to float64 (widening is exact, so the roundings and their order are
 * those of float64 rows).
 *
 * In C rather than Cython for `restrict` (without it the compiler versions
 * every loop behind a run-time overlap check, which costs more than the work
 * for short rows) and for the vector intrinsics (_simd.h).  The explicit
 * `0 +` keeps the first term's rounding identical to every later one (and
 * turns -0 into +0, as a zero-initialised accumulator does); without
 * -ffast-math the compiler may not drop it.  Every variant performs the same
 * additions in the same order, so all of them, vector or scalar, give the
 * same bits.
 */
#ifndef TRILINEAR_BWD_ROW_SUMS_H
#define TRILINEAR_BWD_ROW_SUMS_H

#include <stdint.h>

#include "_portable.h"
#include "_convert.h"
#include "_kernel_plan.h"
#include "_simd.h"

/*
 * What the rows hold: float64 itself, or float16 / bfloat16 / float32
 * widened to it (TB_ROWS_F32, _F16, _BF16).  A
 * compile-time constant in each copy of the sums, so the load is chosen
 * once.
 */
enum { TB_ROWS_SAME = 0, TB_ROWS_F16 = 1, TB_ROWS_BF16 = 2, TB_ROWS_F32 = 3 };

/*
 * The most rows one register sum covers: each vector of acc is summed over
 * up to this many rows in a register and written once, so that a long
 * reduction reads acc neither from L1 nor, for a plane that does not fit
 * there, from L2; more terms continue from the stored value.  Each count up
 * to it gets its own copy with the count known to the compiler, which then
 * unrolls the loop over rows.
 */
#define TB_ROWS_PER_SUM 8

/* Sweeps over the source (prefetch set) also prefetch each row TB_PF_AHEAD
 * bytes ahead: the hardware prefetcher alone leaves the core waiting on
 * memory at every page boundary of its several streams.  Past the end of a
 * row this fetches the start of the next one, which the next D row reads.
 * 16 lines ahead: a core that consumes a line in few cycles (AVX-512, or a
 * fast core) outruns a shorter distance (docs/design.md,
 * Decisions: prefetch-distance). */
#define TB_PF_AHEAD 1024
/* Rows widened to float64 sums (float32, float16, bfloat16 source rows):
 * each step consumes a half or a quarter of the bytes of a float64 step
 * but takes as long, so the lines must be asked for further ahead. */
#ifndef TB_PF_AHEAD_WIDE
#define TB_PF_AHEAD_WIDE 4096
#endif
/* Widened rows (float32, float16, bfloat16) on narrower vectors (AVX2):
 * bytes of a row per prefetch, two a 64-byte line (_row_sums_t.h;
 * docs/design.md, Decisions: narrow-rows-two-prefetches-a-line). */
#define TB_PF_BYTES_16 32
/* A channels-first item whose plane is one run asks for this many bytes at
 * the start of each source plane the next item sums, before its own H and
 * W passes, which leave the memory idle. */
#define TB_PF_NEXT_ITEM 4096
/* The prefetches of the source ask for L2, not L1: the lines are read a few
 * hundred cycles later, from L2 as fast as the loads need them, while asked
 * into L1 they would evict the plane of sums (16 KiB for 64 x 64) that the
 * H and W passes work on there -- above all the next item's request, made
 * just before those passes (docs/design.md, Decisions: source-prefetch-into-l2). */
#define TB_PF_HINT _MM_HINT_T1
/* Two exceptions, each chosen by timing both hints.  One prefetch per
 * vector on narrower vectors (AVX2 and SSE2, _row_sums_t.h) asks for L1
 * (docs/design.md, Decisions: vector-prefetch-into-l1-narrow). */
#if TB_HAVE_MASKS
#define TB_PF_HINT_VEC TB_PF_HINT
#else
#define TB_PF_HINT_VEC _MM_HINT_T0
#endif
/* And with AVX-512 a next item whose whole request is at most this many
 * bytes (a forward's two planes of a small source) asks for L1: it evicts
 * little of the plane the H and W passes work on, and its short D pass then
 * starts from L1.  AVX2 keeps L2 for it
 * (docs/design.md, Decisions: next-item-prefetch-into-l1-small). */
#define TB_PF_NEXT_ITEM_L1 4096

/* The row sums (the C template _row_sums_t.h), for float64 only: the
 * kernel's one accumulation type. */
#define TB_T double
#define TB_S f64
#define TB_WIDE_ROWS TB_HAVE_WIDE_VECTORS
#include "_row_sums_t.h"
#undef TB_T
#undef TB_S
#undef TB_WIDE_ROWS

/* Ask for the first `nbytes` of each source row that target point i of
 * axis `ax` reads, src[t] * row_bytes past `rows` for ptr[i] <= t < ptr[i+1]:
 * the start of a later D sum, fetched while other work runs, into L2 (into
 * L1 for a small request with AVX-512, TB_PF_NEXT_ITEM_L1).  A plane
 * shorter than `nbytes` has the request run past it, perhaps past the
 * array: prefetches never fault (one to an unmapped page is dropped). */
static inline void tb_prefetch_rows(const void *rows, int64_t row_bytes, const tb_axis *ax,
                                    int64_t i, int64_t nbytes)
{
#if defined(TB_LANES_f32)
    const int64_t *restrict ptr = ax->ptr + i;
    const int64_t *restrict src = ax->src;
#if TB_HAVE_MASKS
    if ((ptr[1] - ptr[0]) * nbytes <= TB_PF_NEXT_ITEM_L1) {
        for (int64_t t = ptr[0]; t < ptr[1]; ++t)
            for (int64_t b = 0; b < nbytes; b += 64)
                _mm_prefetch((const char *)rows + src[t] * row_bytes + b, _MM_HINT_T0);
        return;
    }
#endif
    for (int64_t t = ptr[0]; t < ptr[1]; ++t)
        for (int64_t b = 0; b < nbytes; b += 64)
            _mm_prefetch((const char *)rows + src[t] * row_bytes + b, TB_PF_HINT);
#else
    (void)rows, (void)row_bytes, (void)ax, (void)i, (void)nbytes;
#endif
}

/* float32, float16 or bfloat16 source rows (TB_READ_FLOAT32, _FLOAT16,
 * _BFLOAT16) summed into float64, the kernel's accumulation type: widened
 * exactly as they are read, so the roundings and their order are those of
 * float64 rows.  Always read from memory, hence prefetched.  One copy per
 * kind, the kind known to the compiler in each. */
static inline void tb_reduce_wide_terms(double *restrict acc, int64_t acc_stride,
                                        const void *rows, int64_t stride,
                                        const int64_t *restrict ptr, const int64_t *restrict src,
                                        const double *restrict w, int64_t n_rows, int64_t n,
                                        int kind)
{
    if (kind == TB_ROWS_F32)
        tb_reduce_rows_body_f64(acc, acc_stride, rows, stride, ptr, src, w, n_rows, n, 1,
                                TB_ROWS_F32);
    else if (kind == TB_ROWS_BF16)
        tb_reduce_rows_body_f64(acc, acc_stride, rows, stride, ptr, src, w, n_rows, n, 1,
                                TB_ROWS_BF16);
    else
        tb_reduce_rows_body_f64(acc, acc_stride, rows, stride, ptr, src, w, n_rows, n, 1,
                                TB_ROWS_F16);
}

TB_ALWAYS_INLINE void tb_reduce_wide_rows(double *restrict acc, int64_t acc_stride,
                                          const void *rows, int64_t stride,
                                          const tb_axis *ax, int64_t first, int64_t n_rows,
                                          int64_t n, int kind)
{
    tb_reduce_wide_terms(acc, acc_stride, rows, stride, ax->ptr + first, ax->src,
                         (const double *)ax->weight, n_rows, n, kind);
}

#endif
