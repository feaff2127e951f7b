/*
 * The kernel's plan as C structs, declared once, here: the C helpers of the
 * kernel read them (each takes one const pointer to its axis table), and
 * Cython reads this header through `cdef extern` (_kernel_plan.pxd), so the
 * typed plan (_kernel_plan.pyx) fills the same structs the helpers see.
 *
 * The kernel computes a target array from a source array through one table
 * per axis and knows no operator: the backward reads grad_out as its source
 * and writes grad_input as its target, the forward reads x and writes out.
 * A struct's layout does not depend on the instruction set, so one plan
 * serves every kernel variant.
 */
#ifndef TRILINEAR_BWD_KERNEL_PLAN_H
#define TRILINEAR_BWD_KERNEL_PLAN_H

#include <stdint.h>

/*
 * One axis in gather form: target point i receives the terms
 * ptr[i] <= t < ptr[i+1], each weight[t] * source[src[t]], with src
 * increasing (the backward's tables: at an index where x0 == x1, the l0
 * term before l1; the forward's: l0 then l1 of each target point).  The
 * weights are of the accumulation type (double, for every dtype).
 */
typedef struct {
    int64_t n_target;           /* target points */
    int64_t terms;              /* terms per point where every point has as many, else 0 */
    const int64_t *ptr;
    const int64_t *src;
    const void *weight;
    /* The same terms padded to `width` per target point and blocked by 8
     * points, for the channels-first W pass (_w_gather.h); width 0: no
     * padded table (the W pass walks the terms above). */
    int64_t width;
    const int32_t *padded_src;
    const void *padded_weight;
    const int32_t *padded_rel;
    const int32_t *window;
    const int8_t *mode;
    const int32_t *block_window;
} tb_axis;

/*
 * One row of a (D, H) plane: n_outer groups of n_inner elements, with
 * element strides s_outer and s_inner.  Rows that are one contiguous run are
 * described with n_outer == 1.
 */
typedef struct {
    int64_t n_outer;
    int64_t s_outer;
    int64_t n_inner;
    int64_t s_inner;
} tb_row;

/*
 * Element strides of an array: slice b = (b1, b2), then D and H; `row`
 * covers W and, in channels-last mode, C.
 */
typedef struct {
    int64_t s_b1;
    int64_t s_b2;
    int64_t s_d;
    int64_t s_h;
    tb_row row;
} tb_volume;

/* A geometry's plan: every value _plan.make_plan decides, filled once. */
typedef struct {
    int dtype;                  /* TB_DT_* of both arrays */
    int read_mode;              /* TB_READ_*: how the D pass reads source rows */
    int plane_run;              /* rows are read in place and each source plane is one run */
    int stream;                 /* target rows are unit-stride and written with streaming stores */
    int out_direct;             /* the W pass writes target rows in place (unit stride: float64,
                                   or any dtype from the padded gather, rounded once), with
                                   streaming stores if `stream` */
    int64_t nb2;                /* slice b is (b / nb2, b % nb2) */
    int64_t n_items;            /* slices * items per slice: the units of parallel work */
    int64_t planes_per_item;    /* target planes an item computes: 1, or 2 in channels-last mode */
    int whole_planes;           /* channels-last planes small enough to sum over D, then H, then
                                   W whole, as channels-first ones are (see _plan.py) */
    int64_t source_h;           /* rows of a source plane */
    int64_t ring;               /* rows of acc_d: source_h, or the channels-last ring */
    int64_t target_d;           /* planes of a target slice */
    int64_t target_h;           /* rows of a target plane */
    int64_t v;                  /* elements per W position: C in channels-last mode, else 1 */
    int64_t L;                  /* elements in one source row: source W * v */
    tb_volume source;
    tb_volume target;
    tb_axis ax_d;
    tb_axis ax_h;
    tb_axis ax_h_ring;          /* ax_h with each src modulo ring: the acc_d row of each term */
    tb_axis ax_w;
    int64_t h_stride;           /* elements between rows of acc_h: L, a sentinel, 32 spare */
    int64_t off_acch;           /* element offsets of the scratch buffers in a thread's slot */
    int64_t off_conv;
    int64_t off_out;
    int64_t off_narrow;         /* byte offset: a target row in its 16-bit storage type */
    int64_t slot_bytes;         /* bytes per thread slot, a multiple of 64 */
    int64_t w_rows;             /* channels-first rows per W pass call (see _plan.py) */
} tb_problem;

#endif
