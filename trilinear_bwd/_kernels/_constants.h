/* The facts the Python planner and the C kernels must agree on, defined
 * once, here.  The kernels include this header; Python reads the same values
 * from the always-built _native extension (trilinear_bwd._core._constants),
 * and tests/test_constants.py checks that every TB_ name below reaches it. */
#ifndef TRILINEAR_BWD_CONSTANTS_H
#define TRILINEAR_BWD_CONSTANTS_H

/* Storage dtype of both arrays (Problem.dtype). */
#define TB_DT_FLOAT32 0
#define TB_DT_FLOAT64 1
#define TB_DT_FLOAT16 2
#define TB_DT_BFLOAT16 3

/* How the D pass reads source rows (Problem.read_mode).  The accumulation
 * type is float64 for every dtype (docs/numerics.md, "One rounding"): rows
 * of the other dtypes are widened, exactly, as they are read
 * (docs/design.md, Decisions: widen-in-the-d-pass). */
#define TB_READ_IN_PLACE 0   /* float64, unit stride: used where they lie */
#define TB_READ_FLOAT16 1    /* float16, unit stride: widened inside the axpy */
#define TB_READ_BFLOAT16 2   /* bfloat16, unit stride: widened inside the axpy */
#define TB_READ_CONVERT 3    /* anything else: gathered and converted into a buffer first */
#define TB_READ_FLOAT32 4    /* float32, unit stride: widened inside the axpy */

/* Where a block of the padded W table finds its sources (Axis.mode). */
#define TB_GATHER 0          /* anywhere: one gather instruction */
#define TB_WINDOW8 1         /* within 8 consecutive elements */
#define TB_WINDOW16 2        /* within 16 */
#define TB_WINDOW32 3        /* within 32 */

/* Axis.block_window of a block whose every term reads 8 real sources 3
 * apart (3x upsampling away from the edges, a window of 22) or is padding
 * alone: the AVX2 W pass reads each such term by three loads and one
 * permute where the table's mode would take a gather (_w_gather.h).  Other
 * blocks hold the window they share (>= 0) or -1. */
#define TB_W_STRIDE3 (-2)

/* The one table width whose AVX2 copy of the W pass takes such blocks:
 * 3x upsampling's backward (5 real terms and 2 of padding a point; the
 * other widths' copies, every forward's among them, keep their code). */
#define TB_W_STRIDE3_WIDTH 7

/* Output points per block of the padded W table: the 8 lanes of an
 * AVX-512 float64 vector, two of AVX2's (the vector code is written for
 * exactly this many; docs/design.md, Decisions: w-blocks-of-8). */
#define TB_W_BLOCK 8

/* Elements after an acc_h row's zero sentinel that a W window may read
 * (TB_WINDOW32 reads up to 32 from a real source). */
#define TB_W_SPARE 32

/* The cache line: workspace slots and regions start on one, and every
 * workspace carries this many bytes more, to align an unaligned buffer. */
#define TB_LINE 64

/* Most input planes one channels-last work item computes. */
#define TB_MAX_PLANES_PER_ITEM 2

#endif
