/*
 * A full block's 8 results, as 8 float32 lanes (AVX2 instructions), stored
 * to an output row of float32, float16 or bfloat16: the store both vector
 * W gathers share (_w_gather_avx2.h, _w_gather_avx512.h), included by
 * them.  The 16-bit kinds are rounded exactly as _convert.h rounds one
 * element, so that the variants give the same bits.
 */
#ifndef TRILINEAR_BWD_W_GATHER_OUT8_H
#define TRILINEAR_BWD_W_GATHER_OUT8_H

#include <immintrin.h>
#include <stdint.h>

#include "_portable.h"

/* 16-byte streaming stores: large arrays from malloc/mmap start 16 bytes
 * past a page, so 32-byte alignment is rare. */
#define TB_STREAM8(p, a) (_mm_stream_ps((p), _mm256_castps256_ps128(a)),                \
                          _mm_stream_ps((p) + 4, _mm256_extractf128_ps((a), 1)))

/* 8 lanes to out at element i; float32 streamed where `stream` is set and
 * the 8 are 16-byte aligned. */
TB_ALWAYS_INLINE void tb_out8(void *out, int64_t i, __m256 a, int stream, int kind)
{
    if (kind == TB_OUT_F32) {
        float *dst = (float *)out + i;
        if (stream && ((uintptr_t)dst & 15) == 0)
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

#endif
