/*
 * The W pass of channels-last rows: out[i, :v] = sum over the terms
 * ptr[i] <= t < ptr[i+1] of w[t] * row[src[t], :v] for each row -- the same
 * operations in the same order as the row sums ((0 + w0*x0) + w1*x1) + ...,
 * in one loop so that short channel runs do not pay a call per output
 * position (nor small planes a call per row).
 *
 * Where the channels fill whole vectors (any count, with AVX-512's masked
 * tails), each vector of out[i] is summed over all of i's terms in a
 * register and stored once; with `stream` set and out 16-byte aligned, with
 * non-temporal stores straight from the register, so that writing a large
 * target overlaps the arithmetic instead of following each row as a
 * copy.  Channel counts that the streaming stores cannot cover in aligned
 * 16-byte pieces ignore `stream`.  This is written with intrinsics because,
 * left to itself, GCC fully unrolls the channel loop of the common counts
 * and then vectorises the straight-line result badly (half-width and scalar
 * pieces).  The common counts get their own copy with v known to the
 * compiler, and, where every point has two terms (the forward's tables),
 * one without the loop over terms; for a whole small plane of the forward
 * the H pass is folded into this one (tb_hw_channels_), its rows never
 * stored.
 */
#ifndef TRILINEAR_BWD_W_CHANNELS_H
#define TRILINEAR_BWD_W_CHANNELS_H

#include <stdint.h>

#include "_kernel_plan.h"
#include "_portable.h"
#include "_simd.h"

/* float64 only: the kernel's one accumulation type. */
#define TB_T double
#define TB_S f64
#include "_w_channels_t.h"
#undef TB_T
#undef TB_S

#endif
