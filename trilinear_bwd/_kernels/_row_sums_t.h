/*
 * The row sums of _row_sums.h for one accumulation type: a C template,
 * included with TB_T double, TB_S f64 (the kernel's one accumulation type)
 * and TB_WIDE_ROWS set where the variant has vectors widening float32,
 * float16 and bfloat16 to float64.  Every name it defines ends in the
 * type's suffix (TB_TYPED, _portable.h).
 */

/* acc = (first ? 0 : acc) + w * x, n elements. */
static inline void TB_TYPED(tb_axpy_)(TB_T *restrict acc, TB_T w, const TB_T *restrict x,
                                      int64_t n, int first)
{
    if (first)
        for (int64_t k = 0; k < n; ++k)
            acc[k] = (TB_T)0 + w * x[k];
    else
        for (int64_t k = 0; k < n; ++k)
            acc[k] = acc[k] + w * x[k];
}

/* acc = ((first ? 0 : acc) + w0 * x0) + w1 * x1, n elements. */
static inline void TB_TYPED(tb_axpy2_)(TB_T *restrict acc, TB_T w0, const TB_T *restrict x0,
                                       TB_T w1, const TB_T *restrict x1, int64_t n, int first)
{
    if (first)
        for (int64_t k = 0; k < n; ++k)
            acc[k] = ((TB_T)0 + w0 * x0[k]) + w1 * x1[k];
    else
        for (int64_t k = 0; k < n; ++k)
            acc[k] = (acc[k] + w0 * x0[k]) + w1 * x1[k];
}

/* Element k of row x, any kind of row, in the accumulation type. */
TB_ALWAYS_INLINE TB_T TB_TYPED(tb_row_elem_)(const void *x, int64_t k, int kind)
{
    if (kind == TB_ROWS_SAME)
        return ((const TB_T *)x)[k];
    if (kind == TB_ROWS_F32)
        return (TB_T)((const float *)x)[k];
    return (TB_T)tb_widen1(((const uint16_t *)x)[k], kind == TB_ROWS_BF16);
}

/* Bytes of one element of a row of this kind. */
#define TB_ELEM_BYTES(kind) ((kind) == TB_ROWS_SAME ? (int64_t)sizeof(TB_T)                   \
                             : (kind) == TB_ROWS_F32 ? (int64_t)4 : (int64_t)2)

#if defined(TB_LANES_f32)
#define TB_VEC TB_CAT(tb_vec_, TB_S)
#define TB_LANES TB_CAT(TB_LANES_, TB_S)

/* A vector of row x at element k.  Other kinds than TB_ROWS_SAME reach the
 * vector code only where TB_WIDE_ROWS is set (tb_sum_rows_m_ tests it). */
TB_ALWAYS_INLINE TB_VEC TB_TYPED(tb_row_vec_)(const void *x, int64_t k, int kind)
{
#if TB_WIDE_ROWS
    if (kind != TB_ROWS_SAME)
        return tb_load_wide((const char *)x + k * TB_ELEM_BYTES(kind), kind);
#endif
    (void)kind;
    return TB_V(load)((const TB_T *)x + k);
}

/* One vector of acc at element k, summed over the m rows in a register. */
TB_ALWAYS_INLINE void TB_TYPED(tb_sum_vec_)(TB_T *restrict acc, const void *const *x,
                                            const TB_VEC *wv, int64_t m, int64_t k,
                                            int first, int kind)
{
    TB_VEC a = first ? TB_V(zero)() : TB_V(load)(acc + k);
    for (int64_t j = 0; j < m; ++j)
        a = TB_V(add)(a, TB_V(mul)(wv[j], TB_TYPED(tb_row_vec_)(x[j], k, kind)));
    TB_V(store)(acc + k, a);
}

#if TB_HAVE_MASKS
/* The first `part` (< lanes) elements of row x from element k, zeros after them. */
TB_ALWAYS_INLINE TB_VEC TB_TYPED(tb_row_vec_head_)(const void *x, int64_t k, int64_t part,
                                                   int kind)
{
#if TB_WIDE_ROWS
    if (kind != TB_ROWS_SAME)
        return tb_load_wide_head((const char *)x + k * TB_ELEM_BYTES(kind), part, kind);
#endif
    (void)kind;
    return TB_V(load_head)((const TB_T *)x + k, part);
}

/* A partial vector, `part` elements of acc from k, under a mask (see _simd.h). */
TB_ALWAYS_INLINE void TB_TYPED(tb_sum_vec_head_)(TB_T *restrict acc, const void *const *x,
                                                 const TB_VEC *wv, int64_t m, int64_t k,
                                                 int64_t part, int first, int kind)
{
    TB_VEC a = first ? TB_V(zero)() : TB_V(load_head)(acc + k, part);
    for (int64_t j = 0; j < m; ++j)
        a = TB_V(add)(a, TB_V(mul)(wv[j], TB_TYPED(tb_row_vec_head_)(x[j], k, part, kind)));
    TB_V(store_head)(acc + k, a, part);
}
#endif
#endif

/*
 * acc[k] = (((first ? 0 : acc[k]) + w[0] * x[0][k]) + w[1] * x[1][k]) + ...
 * over m <= TB_ROWS_PER_SUM rows, for k < n.
 */
TB_ALWAYS_INLINE void TB_TYPED(tb_sum_rows_m_)(TB_T *restrict acc, const void *const *x,
                                               const TB_T *restrict w, int64_t m, int64_t n,
                                               int first, int prefetch, int kind)
{
    int64_t k = 0;
#if defined(TB_LANES_f32)
    if (kind == TB_ROWS_SAME || TB_WIDE_ROWS) {
        const int64_t elem = TB_ELEM_BYTES(kind);
        const int64_t ahead = kind == TB_ROWS_SAME ? TB_PF_AHEAD : TB_PF_AHEAD_WIDE;
        TB_VEC wv[TB_ROWS_PER_SUM];
        for (int64_t j = 0; j < m; ++j)
            wv[j] = TB_V(set1)(w[j]);
#if TB_HAVE_MASKS
        /* A row longer than a vector starts with the elements before the
         * first vector boundary of x[0], so that the full vectors after them
         * read x[0] (and, for a plane read in one sweep, every row, whose
         * offsets are whole lines apart) without a load that straddles two
         * cache lines, which a 64-byte load at any other offset always does. */
        if (n > TB_LANES) {
            const uintptr_t vbytes = (uintptr_t)(TB_LANES * elem);
            const int64_t head = (int64_t)((0 - (uintptr_t)x[0]) & (vbytes - 1)) / elem;
            if (head) {
                TB_TYPED(tb_sum_vec_head_)(acc, x, wv, m, k, head, first, kind);
                k += head;
            }
        }
#endif
#if !TB_HAVE_MASKS
        /* Narrower vectors (AVX2, SSE2) over source rows narrower than the
         * sums (float32, float16, bfloat16): one prefetch per row per 32
         * bytes (two a line) instead of one per vector, and a long row
         * starts with the scalar
         * elements before x[0]'s first vector boundary, so that no vector
         * load of x[0] (nor, in a plane read in one sweep whose planes are
         * whole vectors apart, of any row) straddles two lines.  The scalar
         * elements take the same multiplies and adds as the vector lanes.
         * Two a line rather than one: a prefetch the core drops is likely
         * not asked for again, and one a line left the sweep as slow as
         * none.  Rows of the sums' own type keep one prefetch per vector
         * (docs/design.md, Decisions: narrow-rows-two-prefetches-a-line). */
        const int64_t per_prefetch = TB_PF_BYTES_16 / (TB_LANES * elem);
        if (prefetch && per_prefetch > 1 && kind != TB_ROWS_SAME) {
            if (n >= 8 * TB_LANES) {
                const uintptr_t vbytes = (uintptr_t)(TB_LANES * elem);
                const int64_t head = (int64_t)((0 - (uintptr_t)x[0]) & (vbytes - 1)) / elem;
                for (; k < head; ++k) {
                    TB_T a = first ? (TB_T)0 : acc[k];
                    for (int64_t j = 0; j < m; ++j)
                        a = a + w[j] * TB_TYPED(tb_row_elem_)(x[j], k, kind);
                    acc[k] = a;
                }
            }
            for (; k + per_prefetch * TB_LANES <= n; k += per_prefetch * TB_LANES) {
                for (int64_t j = 0; j < m; ++j)
                    _mm_prefetch((const char *)x[j] + k * elem + ahead, TB_PF_HINT);
                for (int64_t u = 0; u < per_prefetch; ++u)
                    TB_TYPED(tb_sum_vec_)(acc, x, wv, m, k + u * TB_LANES, first, kind);
            }
        }
#endif
        if (prefetch)
            for (; k + TB_LANES <= n; k += TB_LANES) {
                for (int64_t j = 0; j < m; ++j)
                    _mm_prefetch((const char *)x[j] + k * elem + ahead, TB_PF_HINT_VEC);
                TB_TYPED(tb_sum_vec_)(acc, x, wv, m, k, first, kind);
            }
        for (; k + TB_LANES <= n; k += TB_LANES)
            TB_TYPED(tb_sum_vec_)(acc, x, wv, m, k, first, kind);
#if TB_HAVE_MASKS
        /* The last, partial vector of the row: the row is done. */
        if (k < n)
            TB_TYPED(tb_sum_vec_head_)(acc, x, wv, m, k, n - k, first, kind);
        return;
#endif
    }
#else
    (void)prefetch;
#endif
    for (; k < n; ++k) {
        TB_T a = first ? (TB_T)0 : acc[k];
        for (int64_t j = 0; j < m; ++j)
            a = a + w[j] * TB_TYPED(tb_row_elem_)(x[j], k, kind);
        acc[k] = a;
    }
}

/* Each count of rows up to TB_ROWS_PER_SUM gets its own copy with the count
 * known to the compiler, which then unrolls the loop over rows. */
TB_ALWAYS_INLINE void TB_TYPED(tb_sum_rows_)(TB_T *restrict acc, const void *const *x,
                                             const TB_T *restrict w, int64_t m, int64_t n,
                                             int first, int prefetch, int kind)
{
    switch (m) {
    case 1: TB_TYPED(tb_sum_rows_m_)(acc, x, w, 1, n, first, prefetch, kind); return;
    case 2: TB_TYPED(tb_sum_rows_m_)(acc, x, w, 2, n, first, prefetch, kind); return;
    case 3: TB_TYPED(tb_sum_rows_m_)(acc, x, w, 3, n, first, prefetch, kind); return;
    case 4: TB_TYPED(tb_sum_rows_m_)(acc, x, w, 4, n, first, prefetch, kind); return;
    case 5: TB_TYPED(tb_sum_rows_m_)(acc, x, w, 5, n, first, prefetch, kind); return;
    case 6: TB_TYPED(tb_sum_rows_m_)(acc, x, w, 6, n, first, prefetch, kind); return;
    case 7: TB_TYPED(tb_sum_rows_m_)(acc, x, w, 7, n, first, prefetch, kind); return;
    default: /* m == TB_ROWS_PER_SUM */
        TB_TYPED(tb_sum_rows_m_)(acc, x, w, TB_ROWS_PER_SUM, n, first, prefetch, kind);
    }
}

#if defined(TB_LANES_f32) && !TB_HAVE_MASKS
/*
 * Narrower vectors (AVX2, SSE2), rows of the accumulation type read from
 * cache (the H pass): rows r0 <= r < n_rows of acc, as long as each is the
 * sum of m terms, m <= TB_ROWS_PER_SUM and known to the compiler; returns
 * the first row that is not.  Each row is summed in registers (from 0:
 * `first`), two vectors a step on one index, and a row of a vector or more
 * ends with the full vector that ends it: the elements it shares with the
 * vector before take the same operations on the same values again, which
 * stores the same bits.  Shorter rows take the scalar loop.  What the
 * general loop spends on each row (the term count, the row pointers and
 * weights in memory, the tail element by element) is most of the work in a
 * row of a few vectors.
 */
TB_ALWAYS_INLINE int64_t TB_TYPED(tb_cached_run_m_)(TB_T *restrict acc, int64_t acc_stride,
                                                    const TB_T *rows, int64_t stride,
                                                    const int64_t *restrict ptr,
                                                    const int64_t *restrict src,
                                                    const TB_T *restrict w, int64_t r0,
                                                    int64_t n_rows, int64_t m, int64_t n)
{
    const int64_t last = n - TB_LANES;
    int64_t r = r0;
    for (; r < n_rows && ptr[r + 1] - ptr[r] == m; ++r) {
        TB_T *restrict out = acc + r * acc_stride;
        const int64_t t0 = ptr[r];
        const void *x[TB_ROWS_PER_SUM];
        TB_VEC wv[TB_ROWS_PER_SUM];
        for (int64_t j = 0; j < m; ++j) {
            /* Scalar arithmetic: vectorised, these eight multiplies of
             * 64-bit integers cost more than the row's sums. */
            int64_t at = src[t0 + j] * stride;
            TB_IN_GPR(at);
            x[j] = rows + at;
            wv[j] = TB_V(set1)(w[t0 + j]);
        }
        if (last >= 0) {
            int64_t k = 0;
            for (; k + TB_LANES <= last; k += 2 * TB_LANES) {
                TB_TYPED(tb_sum_vec_)(out, x, wv, m, k, 1, TB_ROWS_SAME);
                TB_TYPED(tb_sum_vec_)(out, x, wv, m, k + TB_LANES, 1, TB_ROWS_SAME);
            }
            if (k <= last) {
                TB_TYPED(tb_sum_vec_)(out, x, wv, m, k, 1, TB_ROWS_SAME);
                k += TB_LANES;
            }
            if (k < n)
                TB_TYPED(tb_sum_vec_)(out, x, wv, m, last, 1, TB_ROWS_SAME);
            continue;
        }
        for (int64_t k = 0; k < n; ++k) {
            TB_T a = (TB_T)0;
            for (int64_t j = 0; j < m; ++j)
                a = a + w[t0 + j] * ((const TB_T *)x[j])[k];
            out[k] = a;
        }
    }
    return r;
}

/* Rows r0 <= r < n_rows of acc, as tb_reduce_rows_body_ (below) computes
 * them, as long as each has 3 to TB_ROWS_PER_SUM terms (rows of one or two
 * take the plain axpy loops there); returns the first row that has not.
 * Each run of rows with the same term count goes to its own copy of
 * tb_cached_run_m_.  Not inlined: a function of its own keeps the row
 * pointers and weights in registers, where the D pass's loops around it
 * would take them. */
TB_NOINLINE int64_t TB_TYPED(tb_cached_rows_)(TB_T *restrict acc, int64_t acc_stride,
                                              const TB_T *rows, int64_t stride,
                                              const int64_t *restrict ptr,
                                              const int64_t *restrict src,
                                              const TB_T *restrict w, int64_t r0,
                                              int64_t n_rows, int64_t n)
{
#define TB_RUN(M) TB_TYPED(tb_cached_run_m_)(acc, acc_stride, rows, stride, ptr, src, w, r,  \
                                             n_rows, (M), n)
    int64_t r = r0;
    while (r < n_rows) {
        switch (ptr[r + 1] - ptr[r]) {
        case 3: r = TB_RUN(3); break;
        case 4: r = TB_RUN(4); break;
        case 5: r = TB_RUN(5); break;
        case 6: r = TB_RUN(6); break;
        case 7: r = TB_RUN(7); break;
        case 8: r = TB_RUN(8); break;
        default: return r;
        }
    }
    return r;
#undef TB_RUN
}
#endif

/*
 * Rows r < n_rows of acc (acc_stride apart): the sum over the terms
 * ptr[r] <= t < ptr[r+1] of w[t] * rows[src[t] * stride :], n elements,
 * TB_ROWS_PER_SUM terms per register sum.  One call covers a whole plane of
 * short rows.  Rows of the accumulation type read from cache (prefetch
 * clear) with one or two terms take the plain axpy loops, which have less to
 * set up per row; on narrower vectors, those of 3 to TB_ROWS_PER_SUM terms
 * take tb_cached_rows_.
 */
TB_ALWAYS_INLINE void TB_TYPED(tb_reduce_rows_body_)(
    TB_T *restrict acc, int64_t acc_stride, const void *rows, int64_t stride,
    const int64_t *restrict ptr, const int64_t *restrict src, const TB_T *restrict w,
    int64_t n_rows, int64_t n, int prefetch, int kind)
{
    const void *x[TB_ROWS_PER_SUM];
    const int64_t row_bytes = stride * TB_ELEM_BYTES(kind);
    for (int64_t r = 0; r < n_rows; ++r) {
        TB_T *restrict out = acc + r * acc_stride;
        const int64_t t0 = ptr[r], t1 = ptr[r + 1];
        if (t0 == t1)
            for (int64_t k = 0; k < n; ++k)
                out[k] = (TB_T)0;
        if (kind == TB_ROWS_SAME && t1 - t0 == 1 && !prefetch) {
            TB_TYPED(tb_axpy_)(out, w[t0], (const TB_T *)rows + src[t0] * stride, n, 1);
            continue;
        }
        if (kind == TB_ROWS_SAME && t1 - t0 == 2 && !prefetch) {
            TB_TYPED(tb_axpy2_)(out, w[t0], (const TB_T *)rows + src[t0] * stride, w[t0 + 1],
                                (const TB_T *)rows + src[t0 + 1] * stride, n, 1);
            continue;
        }
#if defined(TB_LANES_f32) && !TB_HAVE_MASKS
        if (kind == TB_ROWS_SAME && !prefetch && t1 - t0 > 2 && t1 - t0 <= TB_ROWS_PER_SUM) {
            r = TB_TYPED(tb_cached_rows_)(acc, acc_stride, (const TB_T *)rows, stride, ptr, src,
                                          w, r, n_rows, n) - 1;
            continue;
        }
#endif
        for (int64_t t = t0; t < t1;) {
            const int64_t m = t1 - t < TB_ROWS_PER_SUM ? t1 - t : TB_ROWS_PER_SUM;
            for (int64_t j = 0; j < m; ++j)
                x[j] = (const char *)rows + src[t + j] * row_bytes;
            TB_TYPED(tb_sum_rows_)(out, x, w + t, m, n, t == t0, prefetch, kind);
            t += m;
        }
    }
}

/* Rows of the accumulation type itself, over the terms of ptr, src and w. */
static inline void TB_TYPED(tb_reduce_terms_)(TB_T *restrict acc, int64_t acc_stride,
                                              const TB_T *rows, int64_t stride,
                                              const int64_t *restrict ptr,
                                              const int64_t *restrict src,
                                              const TB_T *restrict w, int64_t n_rows, int64_t n,
                                              int prefetch)
{
    TB_TYPED(tb_reduce_rows_body_)(acc, acc_stride, rows, stride, ptr, src, w, n_rows, n,
                                   prefetch, TB_ROWS_SAME);
}

/* The same, rows r < n_rows of acc (acc_stride apart) being target points
 * first + r of axis `ax`: each the sum over its terms t of
 * weight[t] * rows[src[t] * stride :]. */
TB_ALWAYS_INLINE void TB_TYPED(tb_reduce_rows_)(TB_T *restrict acc, int64_t acc_stride,
                                                const TB_T *rows, int64_t stride,
                                                const tb_axis *ax, int64_t first,
                                                int64_t n_rows, int64_t n, int prefetch)
{
    TB_TYPED(tb_reduce_terms_)(acc, acc_stride, rows, stride, ax->ptr + first, ax->src,
                               (const TB_T *)ax->weight, n_rows, n, prefetch);
}

#if defined(TB_LANES_f32)
#undef TB_VEC
#undef TB_LANES
#endif
#undef TB_ELEM_BYTES
