/*
 * Conversions between the 16-bit storage types and float32.
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

/* Contiguous blocks, the hot case: eight lanes at a time where F16C exists. */
static inline void tb_half_to_float_n(float *restrict dst, const uint16_t *restrict src, int64_t n)
{
    int64_t k = 0;
#if TB_HAVE_F16C
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(dst + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + k))));
#endif
    for (; k < n; ++k)
        dst[k] = tb_half_to_float(src[k]);
}

static inline void tb_float_to_half_n(uint16_t *restrict dst, const float *restrict src, int64_t n)
{
    int64_t k = 0;
#if TB_HAVE_F16C
    for (; k + 8 <= n; k += 8)
        _mm_storeu_si128((__m128i *)(dst + k),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + k), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; k < n; ++k)
        dst[k] = tb_float_to_half(src[k]);
}

/*
 * acc = (first ? 0 : acc) + w * widen(x), and the two-term form
 * acc = ((first ? 0 : acc) + w0 * widen(x0)) + w1 * widen(x1): the D pass
 * reading 16-bit grad_out rows in place.  Same roundings in the same order as
 * the float32 axpy of _kernel_helpers.pxd (widening is exact).
 */
#define TB_AXPY_BODY(WIDEN)                                                          \
    for (; k < n; ++k)                                                               \
        acc[k] = (first ? 0.0f : acc[k]) + w0 * WIDEN(x0[k]);
#define TB_AXPY2_BODY(WIDEN)                                                         \
    for (; k < n; ++k)                                                               \
        acc[k] = ((first ? 0.0f : acc[k]) + w0 * WIDEN(x0[k])) + w1 * WIDEN(x1[k]);

static inline void tb_axpy_f16(float *restrict acc, float w0, const uint16_t *restrict x0,
                               int64_t n, int first)
{
    int64_t k = 0;
#if TB_HAVE_F16C
    const __m256 vw = _mm256_set1_ps(w0);
    for (; k + 8 <= n; k += 8) {
        __m256 a = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + k);
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x0 + k)));
        _mm256_storeu_ps(acc + k, _mm256_add_ps(a, _mm256_mul_ps(vw, x)));
    }
#endif
    TB_AXPY_BODY(tb_half_to_float)
}

static inline void tb_axpy2_f16(float *restrict acc, float w0, const uint16_t *restrict x0,
                                float w1, const uint16_t *restrict x1, int64_t n, int first)
{
    int64_t k = 0;
#if TB_HAVE_F16C
    const __m256 v0 = _mm256_set1_ps(w0), v1 = _mm256_set1_ps(w1);
    for (; k + 8 <= n; k += 8) {
        __m256 a = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + k);
        __m256 y0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x0 + k)));
        __m256 y1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x1 + k)));
        a = _mm256_add_ps(a, _mm256_mul_ps(v0, y0));
        _mm256_storeu_ps(acc + k, _mm256_add_ps(a, _mm256_mul_ps(v1, y1)));
    }
#endif
    TB_AXPY2_BODY(tb_half_to_float)
}

static inline void tb_axpy_bf16(float *restrict acc, float w0, const uint16_t *restrict x0,
                                int64_t n, int first)
{
    int64_t k = 0;
    TB_AXPY_BODY(tb_bf16_to_float)
}

static inline void tb_axpy2_bf16(float *restrict acc, float w0, const uint16_t *restrict x0,
                                 float w1, const uint16_t *restrict x1, int64_t n, int first)
{
    int64_t k = 0;
    TB_AXPY2_BODY(tb_bf16_to_float)
}

/* 1 when this translation unit was compiled with the F16C fast path. */
static inline int tb_have_f16c(void) { return TB_HAVE_F16C; }

#endif
