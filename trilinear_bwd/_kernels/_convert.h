/*
 * Conversions between the storage types and the accumulation types: the
 * 16-bit types and float32, and float64 results rounded once to float32,
 * float16 or bfloat16.
 *
 * Written in C rather than Cython because the fast paths are F16C intrinsics
 * and the portable paths are bit manipulation that Cython cannot express
 * without type punning.  Every function here is exact (widening) or rounds to
 * nearest-even (narrowing), and the portable and F16C paths return identical
 * bits for every input, NaN payloads included, so that the kernel variants
 * stay bitwise identical.
 */
#ifndef TRILINEAR_BWD_CONVERT_H
#define TRILINEAR_BWD_CONVERT_H

#include <stdint.h>

#include "_portable.h"
#include <string.h>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define TB_HAVE_F16C 1
#else
#define TB_HAVE_F16C 0
#endif

static inline float tb_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t tb_float_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* ---- bfloat16: the top half of a float32 ---------------------------------- */

static inline float tb_bf16_to_float(uint16_t h) { return tb_bits_to_float((uint32_t)h << 16); }

static inline uint16_t tb_float_to_bf16(float f)
{
    uint32_t u = tb_float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)          /* NaN: quiet, sign kept (as ml_dtypes) */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* Round to nearest, ties to even: add 0x7fff plus the lowest kept bit. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- IEEE binary16 ---------------------------------------------------------- */

static inline float tb_half_to_float_soft(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t expo = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (expo == 0x1fu)                             /* Inf, or NaN quietened as F16C does */
        return tb_bits_to_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u));
    if (expo == 0) {                               /* zero / subnormal: mant * 2^-24, exact */
        float v = (float)mant * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return tb_bits_to_float(sign | ((expo + 112u) << 23) | (mant << 13));
}

static inline uint16_t tb_float_to_half_soft(float f)
{
    uint32_t u = tb_float_to_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u)                        /* NaN: quiet it, keep the top payload bits (as F16C) */
        return (uint16_t)(sign | 0x7e00u | ((absu >> 13) & 0x3ffu));
    if (absu >= 0x477ff000u)                       /* rounds to >= 65520: overflow to Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) {                      /* below 2^-14: subnormal half or zero */
        /* Adding 0.5 (2^-1) aligns the binary point so that the float adder's
         * own round-to-nearest-even rounds at 2^-24, the subnormal half ulp. */
        float v = tb_bits_to_float(absu) + 0.5f;
        return (uint16_t)(sign | (tb_float_to_bits(v) - 0x3f000000u));
    }
    /* Normal: rebias the exponent, then round the 13 dropped bits to nearest-even. */
    uint32_t mant_odd = (absu >> 13) & 1u;
    absu += 0xc8000fffu + mant_odd;                /* (15-127)<<23 rebias, plus rounding bias */
    return (uint16_t)(sign | (absu >> 13));
}

static inline float tb_half_to_float(uint16_t h)
{
#if TB_HAVE_F16C
    return _cvtsh_ss(h);
#else
    return tb_half_to_float_soft(h);
#endif
}

static inline uint16_t tb_float_to_half(float f)
{
#if TB_HAVE_F16C
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    return tb_float_to_half_soft(f);
#endif
}

TB_ALWAYS_INLINE float tb_widen1(uint16_t h, int bf16)
{
    return bf16 ? tb_bf16_to_float(h) : tb_half_to_float(h);
}

/* ---- float64 results rounded once ------------------------------------------ */

/*
 * float64 to float32 rounded to odd: toward zero, then the last bit set if
 * anything was lost.  Rounding a float64 value to odd in float32 (24 bits)
 * and then to nearest-even in float16 (11) or bfloat16 (8) gives the float64
 * value rounded to nearest-even in that type directly, because 24 >= 2p + 2
 * for both (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums:
 * proved algorithms using rounding to odd", 2008): the kernel's float64 sums
 * reach a 16-bit result with one rounding, not two.  Scalar, and the same
 * instructions in every variant, so the same bits.  NaN passes through.
 */
static inline float tb_double_to_float_odd(double d)
{
    float f = (float)d;                              /* to nearest-even */
    if ((double)f != d && d == d) {                  /* inexact, not NaN */
        uint32_t u = tb_float_to_bits(f);
        /* Rounded away from zero (an infinity included): step back toward it. */
        if ((d > 0.0) ? ((double)f > d) : ((double)f < d))
            u -= 1u;
        f = tb_bits_to_float(u | 1u);
    }
    return f;
}

static inline uint16_t tb_double_to_half(double d) { return tb_float_to_half(tb_double_to_float_odd(d)); }
static inline uint16_t tb_double_to_bf16(double d) { return tb_float_to_bf16(tb_double_to_float_odd(d)); }

/*
 * A vector of float64 (see _simd.h) widened, exactly, from float32, float16
 * or bfloat16 elements, for the D pass's row sums over source rows of those
 * types (_row_sums_t.h): `kind` 1 float16, 2 bfloat16, 3 float32 (the
 * TB_ROWS_ kinds of _row_sums.h).  With masks, the first n elements only,
 * zeros after them.  TB_HAVE_WIDE_VECTORS says whether this variant has them
 * (AVX-512 and AVX2 with F16C; the baseline sums such rows one element at a
 * time).
 */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define TB_HAVE_WIDE_VECTORS 1
TB_ALWAYS_INLINE __m512d tb_widen_f64_vec(__m128i h, int kind)
{
    const __m256 f = kind == 2 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                               : _mm256_cvtph_ps(h);
    return _mm512_cvtps_pd(f);
}
TB_ALWAYS_INLINE __m512d tb_load_wide(const void *p, int kind)
{
    if (kind == 3)
        return _mm512_cvtps_pd(_mm256_loadu_ps((const float *)p));
    return tb_widen_f64_vec(_mm_loadu_si128((const __m128i *)p), kind);
}
TB_ALWAYS_INLINE __m512d tb_load_wide_head(const void *p, int64_t n, int kind)
{
    const __mmask8 m = (__mmask8)((1u << n) - 1u);
    if (kind == 3)
        return _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, (const float *)p));
    return tb_widen_f64_vec(_mm_maskz_loadu_epi16(m, p), kind);
}
#elif TB_HAVE_F16C && defined(__AVX2__)
#define TB_HAVE_WIDE_VECTORS 1
TB_ALWAYS_INLINE __m256d tb_load_wide(const void *p, int kind)
{
    if (kind == 3)
        return _mm256_cvtps_pd(_mm_loadu_ps((const float *)p));
    const __m128i h = _mm_loadl_epi64((const __m128i *)p);
    const __m128 f = kind == 2 ? _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16))
                               : _mm_cvtph_ps(h);
    return _mm256_cvtps_pd(f);
}
#else
#define TB_HAVE_WIDE_VECTORS 0
#endif

/* 1 when this translation unit was compiled with the F16C fast path. */
static inline int tb_have_f16c(void) { return TB_HAVE_F16C; }

#endif
