/*
 * Throughput of the AVX2 instructions the W pass chooses between, on the
 * machine it runs on (issue 23, docs/performance.md): a virtual machine's
 * CPU model name (QEMU's "AMD EPYC", family 23 model 1) does not say which
 * core is underneath, and the costs of lane-crossing permutes differ by a
 * factor of 4 between core generations.
 *
 *     gcc -O2 -mavx2 benchmarks/avx2_shuffles.c -o /tmp/avx2_shuffles && /tmp/avx2_shuffles
 *
 * Each line is the time-stamp counter's ticks per instruction over eight
 * independent chains (so throughput, not latency, for instructions of up
 * to 8 cycles' latency); the TSC ticks at a fixed rate, not the core's
 * clock, so compare the lines with each other, e.g. with vaddps, which
 * every core of this kind issues once or twice per cycle.  Not a test.
 */
#include <immintrin.h>
#include <stdio.h>
#include <x86intrin.h>

#define N 50000000L

#define RUN(NAME, T, OP)                                                                   \
    do {                                                                                   \
        unsigned long long t0 = __rdtsc();                                                 \
        for (long i = 0; i < N; ++i) {                                                     \
            __asm__ volatile("" : "+x"(T##0), "+x"(T##1), "+x"(T##2), "+x"(T##3),          \
                             "+x"(T##4), "+x"(T##5), "+x"(T##6), "+x"(T##7));               \
            T##0 = OP(T##0); T##1 = OP(T##1); T##2 = OP(T##2); T##3 = OP(T##3);            \
            T##4 = OP(T##4); T##5 = OP(T##5); T##6 = OP(T##6); T##7 = OP(T##7);            \
        }                                                                                  \
        printf("%-26s %5.2f ticks\n", NAME, (double)(__rdtsc() - t0) / N / 8);             \
    } while (0)

int main(void)
{
    __m256 a0 = _mm256_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
           a7 = a0;
    __m128 b0 = _mm_set1_ps(1.0f), b1 = b0, b2 = b0, b3 = b0, b4 = b0, b5 = b0, b6 = b0,
           b7 = b0;
    const __m256i idx = _mm256_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6);
    const __m128i idx4 = _mm_setr_epi32(1, 0, 3, 2);
    const __m256i bytes = _mm256_setr_epi8(4, 5, 6, 7, 0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15,
                                           4, 5, 6, 7, 0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15);
#define ADD(x) _mm256_add_ps(x, x)
#define ADD4(x) _mm_add_ps(x, x)
#define PERMPS(x) _mm256_permutevar8x32_ps(x, idx)
#define PERMILV(x) _mm256_permutevar_ps(x, idx)
#define PERMILV4(x) _mm_permutevar_ps(x, idx4)
#define PERMILI(x) _mm256_permute_ps(x, 0xb1)
#define PERMPD(x) _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(x), 0xd8))
#define SHUFPS(x) _mm256_shuffle_ps(x, x, 0x88)
#define PSHUFB(x) _mm256_castsi256_ps(_mm256_shuffle_epi8(_mm256_castps_si256(x), bytes))
#define BLENDV(x) _mm256_blendv_ps(x, a1, x)
    RUN("vaddps ymm", a, ADD);
    RUN("vaddps xmm", b, ADD4);
    RUN("vpermps ymm", a, PERMPS);
    RUN("vpermilps ymm, variable", a, PERMILV);
    RUN("vpermilps xmm, variable", b, PERMILV4);
    RUN("vpermilps ymm, immediate", a, PERMILI);
    RUN("vpermpd ymm, immediate", a, PERMPD);
    RUN("vshufps ymm", a, SHUFPS);
    RUN("vpshufb ymm", a, PSHUFB);
    RUN("vblendvps ymm", a, BLENDV);
    /* Keep every chain's result alive. */
    float sink[8];
    _mm256_storeu_ps(sink, _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                         _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7))));
    _mm_storeu_ps(sink, _mm_add_ps(_mm_add_ps(_mm_add_ps(b0, b1), _mm_add_ps(b2, b3)),
                                   _mm_add_ps(_mm_add_ps(b4, b5), _mm_add_ps(b6, b7))));
    return sink[0] == 12345.0f;
}
