/* Spellings that differ between compilers, for the other headers. */
#ifndef TRILINEAR_BWD_PORTABLE_H
#define TRILINEAR_BWD_PORTABLE_H

#if defined(_MSC_VER) && !defined(__clang__)
#define restrict __restrict
#define TB_ALWAYS_INLINE static __forceinline
#define TB_NOINLINE static __declspec(noinline)
#define TB_IN_GPR(x) ((void)0)
#else
#define TB_ALWAYS_INLINE static inline __attribute__((always_inline))
#define TB_NOINLINE static __attribute__((noinline))
/* Keep integer x in a general register: GCC 12 otherwise computes some
 * AVX-512 loops' row offsets in mask registers (kmovq, kshiftlq), a chain
 * of slow moves on the path of every load. */
#define TB_IN_GPR(x) __asm__("" : "+r"(x))
#endif

/* C templates (_row_sums_t.h, _w_channels_t.h) are included once per
 * accumulation type with TB_T (float or double) and TB_S (f32 or f64)
 * defined; TB_TYPED(tb_axpy_) names that type's copy (tb_axpy_f32), and
 * TB_V(load) its vector operation (tb_load_f32, from _simd.h). */
#define TB_CAT_(a, b) a##b
#define TB_CAT(a, b) TB_CAT_(a, b)
#define TB_TYPED(name) TB_CAT(name, TB_S)
#define TB_V(op) TB_CAT(tb_##op##_, TB_S)

#endif
