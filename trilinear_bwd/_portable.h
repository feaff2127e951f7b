/* Spellings that differ between compilers, for the other headers. */
#ifndef TRILINEAR_BWD_PORTABLE_H
#define TRILINEAR_BWD_PORTABLE_H

#if defined(_MSC_VER) && !defined(__clang__)
#define restrict __restrict
#define TB_ALWAYS_INLINE static __forceinline
#else
#define TB_ALWAYS_INLINE static inline __attribute__((always_inline))
#endif

#endif
