/*
 * Streaming (non-temporal) stores for large outputs.
 *
 * An ordinary store first reads the destination line into the cache (a
 * "read for ownership"), so writing a large target that is not in cache
 * costs twice its size in memory traffic.  Non-temporal stores skip that
 * read; the kernel uses them when the target is much larger than the caches
 * would keep anyway (decided at phase one), and fences each plane so the
 * data is globally visible before the threads join.  On other processors
 * the functions fall back to plain copies.
 */
#ifndef TRILINEAR_BWD_STORE_H
#define TRILINEAR_BWD_STORE_H

#include <stdint.h>

#include "_portable.h"
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__AVX__)
#include <immintrin.h>
#endif

/* Copy nbytes with non-temporal stores.  Whole 64-byte lines are written by
 * as few instructions as the instruction set has (one on AVX-512, two on
 * AVX): a line whose 16-byte pieces arrive too far apart can leave the
 * write-combining buffer half written, which costs a read of the line after
 * all (docs/design.md, Decisions: stream-whole-lines). */
static inline void tb_stream_copy(void *dst, const void *src, int64_t nbytes)
{
#if defined(__SSE2__)
    char *d = (char *)dst;
    const char *s = (const char *)src;
    int64_t head = (int64_t)((16 - ((uintptr_t)d & 15)) & 15);
    if (head > nbytes)
        head = nbytes;
    memcpy(d, s, (size_t)head);
    d += head, s += head, nbytes -= head;
    for (; nbytes >= 16 && ((uintptr_t)d & 63) != 0; d += 16, s += 16, nbytes -= 16)
        _mm_stream_si128((__m128i *)d, _mm_loadu_si128((const __m128i *)s));
#if defined(__AVX512F__)
    for (; nbytes >= 64; d += 64, s += 64, nbytes -= 64)
        _mm512_stream_si512((__m512i *)d, _mm512_loadu_si512((const void *)s));
#elif defined(__AVX__)
    for (; nbytes >= 64; d += 64, s += 64, nbytes -= 64) {
        _mm256_stream_si256((__m256i *)d, _mm256_loadu_si256((const __m256i *)s));
        _mm256_stream_si256((__m256i *)(d + 32), _mm256_loadu_si256((const __m256i *)(s + 32)));
    }
#endif
    for (; nbytes >= 16; d += 16, s += 16, nbytes -= 16)
        _mm_stream_si128((__m128i *)d, _mm_loadu_si128((const __m128i *)s));
    memcpy(d, s, (size_t)nbytes);
#else
    memcpy(dst, src, (size_t)nbytes);
#endif
}

static inline void tb_store_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

#endif
