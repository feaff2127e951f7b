/*
 * The vectors of the variant being compiled, behind one set of names, so
 * that the row sums and the channels-last W pass are written once for every
 * instruction set: 16 floats / 8 doubles with AVX-512, 8 / 4 with AVX, 4 / 2
 * with SSE2; without vectors TB_LANES_f32 is left undefined and the callers
 * keep only their scalar loops.
 *
 * With AVX-512 (TB_HAVE_MASKS) the last, partial vector of a row is loaded
 * and stored under a mask instead of element by element: the masked-off
 * lanes compute on zeros and are never stored, and each stored lane goes
 * through the same multiply and add as in a full vector, so the results do
 * not change.  A masked load does not fault on the masked-off elements, so
 * it never reads past the row.
 *
 * Streaming (non-temporal) stores need only 16-byte alignment here, because
 * large NumPy arrays start 16 bytes past a page: a full vector is written as
 * one store where it is aligned to its width, else 16 bytes at a time.
 */
#ifndef TRILINEAR_BWD_SIMD_H
#define TRILINEAR_BWD_SIMD_H

#include <stdint.h>

#include "_portable.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define TB_HAVE_MASKS 1
#define TB_LANES_f32 16
#define TB_LANES_f64 8
typedef __m512 tb_vec_f32;
typedef __m512d tb_vec_f64;
#define tb_zero_f32 _mm512_setzero_ps
#define tb_zero_f64 _mm512_setzero_pd
#define tb_set1_f32 _mm512_set1_ps
#define tb_set1_f64 _mm512_set1_pd
#define tb_load_f32 _mm512_loadu_ps
#define tb_load_f64 _mm512_loadu_pd
#define tb_store_f32 _mm512_storeu_ps
#define tb_store_f64 _mm512_storeu_pd
#define tb_add_f32 _mm512_add_ps
#define tb_add_f64 _mm512_add_pd
#define tb_mul_f32 _mm512_mul_ps
#define tb_mul_f64 _mm512_mul_pd
/* The first n (< lanes) elements: loaded with zeros after them, stored alone. */
#define tb_head_f32(n) ((__mmask16)((1u << (n)) - 1u))
#define tb_head_f64(n) ((__mmask8)((1u << (n)) - 1u))
#define tb_load_head_f32(p, n) _mm512_maskz_loadu_ps(tb_head_f32(n), (p))
#define tb_load_head_f64(p, n) _mm512_maskz_loadu_pd(tb_head_f64(n), (p))
#define tb_store_head_f32(p, a, n) _mm512_mask_storeu_ps((p), tb_head_f32(n), (a))
#define tb_store_head_f64(p, a, n) _mm512_mask_storeu_pd((p), tb_head_f64(n), (a))

TB_ALWAYS_INLINE void tb_stream_f32(float *p, __m512 a)
{
    if (((uintptr_t)p & 63) == 0) {
        _mm512_stream_ps(p, a);
        return;
    }
    _mm_stream_ps(p, _mm512_castps512_ps128(a));
    _mm_stream_ps(p + 4, _mm512_extractf32x4_ps(a, 1));
    _mm_stream_ps(p + 8, _mm512_extractf32x4_ps(a, 2));
    _mm_stream_ps(p + 12, _mm512_extractf32x4_ps(a, 3));
}

TB_ALWAYS_INLINE void tb_stream_f64(double *p, __m512d a)
{
    tb_stream_f32((float *)p, _mm512_castpd_ps(a));
}

/* The first n elements, n a multiple of 16 bytes' worth, streamed. */
TB_ALWAYS_INLINE void tb_stream_head_f32(float *p, __m512 a, int64_t n)
{
    _mm_stream_ps(p, _mm512_castps512_ps128(a));
    if (n > 4)
        _mm_stream_ps(p + 4, _mm512_extractf32x4_ps(a, 1));
    if (n > 8)
        _mm_stream_ps(p + 8, _mm512_extractf32x4_ps(a, 2));
}

TB_ALWAYS_INLINE void tb_stream_head_f64(double *p, __m512d a, int64_t n)
{
    tb_stream_head_f32((float *)p, _mm512_castpd_ps(a), 2 * n);
}

#elif defined(__AVX__)
#include <immintrin.h>
#define TB_HAVE_MASKS 0
#define TB_LANES_f32 8
#define TB_LANES_f64 4
typedef __m256 tb_vec_f32;
typedef __m256d tb_vec_f64;
#define tb_zero_f32 _mm256_setzero_ps
#define tb_zero_f64 _mm256_setzero_pd
#define tb_set1_f32 _mm256_set1_ps
#define tb_set1_f64 _mm256_set1_pd
#define tb_load_f32 _mm256_loadu_ps
#define tb_load_f64 _mm256_loadu_pd
#define tb_store_f32 _mm256_storeu_ps
#define tb_store_f64 _mm256_storeu_pd
#define tb_add_f32 _mm256_add_ps
#define tb_add_f64 _mm256_add_pd
#define tb_mul_f32 _mm256_mul_ps
#define tb_mul_f64 _mm256_mul_pd
#define tb_stream_f32(p, a) (_mm_stream_ps((p), _mm256_castps256_ps128(a)),             \
                             _mm_stream_ps((p) + 4, _mm256_extractf128_ps((a), 1)))
#define tb_stream_f64(p, a) (_mm_stream_pd((p), _mm256_castpd256_pd128(a)),             \
                             _mm_stream_pd((p) + 2, _mm256_extractf128_pd((a), 1)))

#elif defined(__SSE2__)
#include <emmintrin.h>
#define TB_HAVE_MASKS 0
#define TB_LANES_f32 4
#define TB_LANES_f64 2
typedef __m128 tb_vec_f32;
typedef __m128d tb_vec_f64;
#define tb_zero_f32 _mm_setzero_ps
#define tb_zero_f64 _mm_setzero_pd
#define tb_set1_f32 _mm_set1_ps
#define tb_set1_f64 _mm_set1_pd
#define tb_load_f32 _mm_loadu_ps
#define tb_load_f64 _mm_loadu_pd
#define tb_store_f32 _mm_storeu_ps
#define tb_store_f64 _mm_storeu_pd
#define tb_add_f32 _mm_add_ps
#define tb_add_f64 _mm_add_pd
#define tb_mul_f32 _mm_mul_ps
#define tb_mul_f64 _mm_mul_pd
#define tb_stream_f32 _mm_stream_ps
#define tb_stream_f64 _mm_stream_pd

#else
#define TB_HAVE_MASKS 0
#endif

#if !TB_HAVE_MASKS && defined(TB_LANES_f32)
/* Never called (callers test TB_HAVE_MASKS first); defined so that code
 * written for both kinds of instruction set compiles for either. */
#define tb_load_head_f32(p, n) tb_zero_f32()
#define tb_load_head_f64(p, n) tb_zero_f64()
#define tb_store_head_f32(p, a, n) ((void)0)
#define tb_store_head_f64(p, a, n) ((void)0)
#define tb_stream_head_f32(p, a, n) ((void)0)
#define tb_stream_head_f64(p, a, n) ((void)0)
#endif

#endif
