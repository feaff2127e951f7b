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
 * The D pass reading 16-bit grad_out rows in place: acc[k] is the sum over
 * the terms ptr[0] <= t < ptr[1] of w[t] * widen(rows[src[t] * stride + k]),
 * as tb_reduce_rows does for float32 (widening is exact, so the roundings and
 * their order are the same): each vector of acc summed over up to 8 terms
 * in a register, rows prefetched ahead.  BF16 is a compile-time constant in
 * each copy, so the widening is chosen once.
 */
#define TB_HALF_GROUP 8

TB_ALWAYS_INLINE float tb_widen1(uint16_t h, int bf16)
{
    return bf16 ? tb_bf16_to_float(h) : tb_half_to_float(h);
}

#if TB_HAVE_F16C && defined(__AVX2__)
TB_ALWAYS_INLINE __m256 tb_widen8(const uint16_t *p, int bf16)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                : _mm256_cvtph_ps(h);
}
#endif

TB_ALWAYS_INLINE void tb_sum_half_rows(float *restrict acc, const uint16_t *const *x,
                                       const float *restrict w, int64_t m, int64_t n,
                                       int first, int bf16)
{
    int64_t k = 0;
#if TB_HAVE_F16C && defined(__AVX2__)
    __m256 wv[TB_HALF_GROUP];
    for (int64_t j = 0; j < m; ++j)
        wv[j] = _mm256_set1_ps(w[j]);
    for (; k + 8 <= n; k += 8) {
        __m256 a = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + k);
        for (int64_t j = 0; j < m; ++j) {
            _mm_prefetch((const char *)(x[j] + k) + 512, _MM_HINT_T0);
            a = _mm256_add_ps(a, _mm256_mul_ps(wv[j], tb_widen8(x[j] + k, bf16)));
        }
        _mm256_storeu_ps(acc + k, a);
    }
#endif
    for (; k < n; ++k) {
        float a = first ? 0.0f : acc[k];
        for (int64_t j = 0; j < m; ++j)
            a = a + w[j] * tb_widen1(x[j][k], bf16);
        acc[k] = a;
    }
}

TB_ALWAYS_INLINE void tb_reduce_half_row_body(float *restrict acc, const uint16_t *rows,
                                              int64_t stride, const int64_t *restrict ptr,
                                              const int64_t *restrict src,
                                              const float *restrict w, int64_t n, int bf16)
{
    const uint16_t *x[TB_HALF_GROUP];
    const int64_t t0 = ptr[0], t1 = ptr[1];
    if (t0 == t1)
        for (int64_t k = 0; k < n; ++k)
            acc[k] = 0.0f;
    for (int64_t t = t0; t < t1;) {
        const int64_t m = t1 - t < TB_HALF_GROUP ? t1 - t : TB_HALF_GROUP;
        for (int64_t j = 0; j < m; ++j)
            x[j] = rows + src[t + j] * stride;
        switch (m) {
#define TB_HALF_TERMS(M)                                                                    \
        case M: tb_sum_half_rows(acc, x, w + t, M, n, t == t0, bf16); break;
        TB_HALF_TERMS(1)
        TB_HALF_TERMS(2)
        TB_HALF_TERMS(3)
        TB_HALF_TERMS(4)
        TB_HALF_TERMS(5)
        TB_HALF_TERMS(6)
        TB_HALF_TERMS(7)
#undef TB_HALF_TERMS
        default: tb_sum_half_rows(acc, x, w + t, TB_HALF_GROUP, n, t == t0, bf16);
        }
        t += m;
    }
}

static inline void tb_reduce_half_row(float *restrict acc, const uint16_t *rows, int64_t stride,
                                      const int64_t *restrict ptr, const int64_t *restrict src,
                                      const float *restrict w, int64_t n, int bf16)
{
    if (bf16)
        tb_reduce_half_row_body(acc, rows, stride, ptr, src, w, n, 1);
    else
        tb_reduce_half_row_body(acc, rows, stride, ptr, src, w, n, 0);
}

/* 1 when this translation unit was compiled with the F16C fast path. */
static inline int tb_have_f16c(void) { return TB_HAVE_F16C; }

#endif
