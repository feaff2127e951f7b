/*
 * The channels-last W pass of _w_channels.h for one accumulation type: a C
 * template, included with TB_T double and TB_S f64 (TB_TYPED, _portable.h),
 * the kernel's one accumulation type.
 */

/* Without vectors, or for channel counts they cannot cover: element by element. */
static inline void TB_TYPED(tb_w_channels_scalar_)(TB_T *restrict out, const TB_T *restrict row,
                                                   const int64_t *restrict ptr,
                                                   const int64_t *restrict src,
                                                   const TB_T *restrict w, int64_t n_target,
                                                   int64_t v)
{
    for (int64_t i = 0; i < n_target; ++i) {
        TB_T *restrict acc = out + i * v;
        for (int64_t k = 0; k < v; ++k)
            acc[k] = (TB_T)0;
        for (int64_t t = ptr[i]; t < ptr[i + 1]; ++t) {
            const TB_T *restrict x = row + src[t] * v;
            const TB_T wt = w[t];
            for (int64_t k = 0; k < v; ++k)
                acc[k] = acc[k] + wt * x[k];
        }
    }
}

#if defined(TB_LANES_f32)
#define TB_VEC TB_CAT(tb_vec_, TB_S)
#define TB_LANES TB_CAT(TB_LANES_, TB_S)

/* One vector of out[i] (`left` < lanes elements of it when `left` is set,
 * AVX-512 only), stored or streamed. */
TB_ALWAYS_INLINE void TB_TYPED(tb_w_channels_store_)(TB_T *p, TB_VEC a, int64_t left, int stream)
{
    if (left) {
        if (stream)
            TB_V(stream_head)(p, a, left);
        else
            TB_V(store_head)(p, a, left);
    } else if (stream) {
        TB_V(stream)(p, a);
    } else {
        TB_V(store)(p, a);
    }
}

/* v <= 64 channels, all of out[i] held in registers. */
TB_ALWAYS_INLINE void TB_TYPED(tb_w_channels_fixed_)(TB_T *restrict out, const TB_T *restrict row,
                                                     const int64_t *restrict ptr,
                                                     const int64_t *restrict src,
                                                     const TB_T *restrict w, int64_t n_target,
                                                     int64_t v, int stream)
{
    enum { NV = 64 / TB_LANES };
    const int64_t nv = (v + TB_LANES - 1) / TB_LANES;
    const int64_t left = v % TB_LANES;
    for (int64_t i = 0; i < n_target; ++i) {
        TB_VEC acc[NV];
        for (int64_t j = 0; j < nv; ++j)
            acc[j] = TB_V(zero)();
        for (int64_t t = ptr[i]; t < ptr[i + 1]; ++t) {
            const TB_VEC wt = TB_V(set1)(w[t]);
            const TB_T *x = row + src[t] * v;
            for (int64_t j = 0; j < nv; ++j) {
                const TB_VEC xj = left && j == nv - 1 ? TB_V(load_head)(x + j * TB_LANES, left)
                                                      : TB_V(load)(x + j * TB_LANES);
                acc[j] = TB_V(add)(acc[j], TB_V(mul)(wt, xj));
            }
        }
        for (int64_t j = 0; j < nv; ++j)
            TB_TYPED(tb_w_channels_store_)(out + i * v + j * TB_LANES, acc[j],
                                           j == nv - 1 ? left : 0, stream);
    }
}

/* Any v: one vector of out[i] at a time, over all of i's terms. */
TB_ALWAYS_INLINE void TB_TYPED(tb_w_channels_vector_)(TB_T *restrict out,
                                                      const TB_T *restrict row,
                                                      const int64_t *restrict ptr,
                                                      const int64_t *restrict src,
                                                      const TB_T *restrict w, int64_t n_target,
                                                      int64_t v, int stream)
{
    for (int64_t i = 0; i < n_target; ++i) {
        const int64_t t0 = ptr[i], t1 = ptr[i + 1];
        for (int64_t k = 0; k < v; k += TB_LANES) {
            const int64_t left = v - k < TB_LANES ? v - k : 0;
            TB_VEC acc = TB_V(zero)();
            for (int64_t t = t0; t < t1; ++t) {
                const TB_T *x = row + src[t] * v + k;
                acc = TB_V(add)(acc, TB_V(mul)(TB_V(set1)(w[t]), left ? TB_V(load_head)(x, left)
                                                                      : TB_V(load)(x)));
            }
            TB_TYPED(tb_w_channels_store_)(out + i * v + k, acc, left, stream);
        }
    }
}

/* Every point of exactly two terms (the forward's tables): out[i] =
 * (0 + w[t] * row[src[t]]) + w[t+1] * row[src[t+1]], t = ptr[i], the same
 * operations in the same order as tb_w_channels_fixed_, without its loop
 * over a count of terms the compiler does not know; `stream` a constant
 * where the caller passes one. */
TB_ALWAYS_INLINE void TB_TYPED(tb_w_channels_two_)(TB_T *restrict out, const TB_T *restrict row,
                                                   const int64_t *restrict ptr,
                                                   const int64_t *restrict src,
                                                   const TB_T *restrict w, int64_t n_target,
                                                   int64_t v, int stream)
{
    const int64_t nv = (v + TB_LANES - 1) / TB_LANES;
    const int64_t left = v % TB_LANES;
    for (int64_t i = 0; i < n_target; ++i) {
        const int64_t t = ptr[i];
        const TB_VEC w0 = TB_V(set1)(w[t]), w1 = TB_V(set1)(w[t + 1]);
        int64_t s0 = src[t], s1 = src[t + 1];
        TB_IN_GPR(s0);
        TB_IN_GPR(s1);
        const TB_T *x0 = row + s0 * v, *x1 = row + s1 * v;
        for (int64_t j = 0; j < nv; ++j) {
            const int part = left && j == nv - 1;
            const TB_VEC a0 = part ? TB_V(load_head)(x0 + j * TB_LANES, left)
                                   : TB_V(load)(x0 + j * TB_LANES);
            const TB_VEC a1 = part ? TB_V(load_head)(x1 + j * TB_LANES, left)
                                   : TB_V(load)(x1 + j * TB_LANES);
            const TB_VEC acc = TB_V(add)(TB_V(add)(TB_V(zero)(), TB_V(mul)(w0, a0)),
                                         TB_V(mul)(w1, a1));
            TB_TYPED(tb_w_channels_store_)(out + i * v + j * TB_LANES, acc, part ? left : 0,
                                           stream);
        }
    }
}

/* tb_w_channels_fixed_ (or _two_ where every point has two terms) over
 * n_rows rows, v known to the compiler where the entry point passes a
 * constant. */
TB_ALWAYS_INLINE void TB_TYPED(tb_w_channels_rows_)(TB_T *restrict out, int64_t out_stride,
                                                    const TB_T *restrict row, int64_t row_stride,
                                                    int64_t n_rows, const int64_t *restrict ptr,
                                                    const int64_t *restrict src,
                                                    const TB_T *restrict w, int64_t n_target,
                                                    int64_t terms, int64_t v, int stream)
{
    int64_t r;
    if (terms == 2 && stream) {
        for (r = 0; r < n_rows; ++r)
            TB_TYPED(tb_w_channels_two_)(out + r * out_stride, row + r * row_stride, ptr, src, w,
                                         n_target, v, 1);
    } else if (terms == 2) {
        for (r = 0; r < n_rows; ++r)
            TB_TYPED(tb_w_channels_two_)(out + r * out_stride, row + r * row_stride, ptr, src, w,
                                         n_target, v, 0);
    } else {
        for (r = 0; r < n_rows; ++r)
            TB_TYPED(tb_w_channels_fixed_)(out + r * out_stride, row + r * row_stride, ptr, src,
                                           w, n_target, v, stream);
    }
}

/* h(s), one vector of it: the H pass's value at source point s of an output
 * row whose two terms read rows x0 and x1 with weights a0 and a1, as
 * tb_axpy2_ computes it, (0 + a0 * x0[s]) + a1 * x1[s]. */
TB_ALWAYS_INLINE TB_VEC TB_TYPED(tb_h_two_)(const TB_T *x0, const TB_T *x1, TB_VEC a0,
                                            TB_VEC a1, int64_t part)
{
    const TB_VEC y0 = part ? TB_V(load_head)(x0, part) : TB_V(load)(x0);
    const TB_VEC y1 = part ? TB_V(load_head)(x1, part) : TB_V(load)(x1);
    return TB_V(add)(TB_V(add)(TB_V(zero)(), TB_V(mul)(a0, y0)), TB_V(mul)(a1, y1));
}

/* p = h(s), nv vectors: a copy of q where q holds it already (q's point qs
 * is s), else computed (tb_h_two_). */
TB_ALWAYS_INLINE void TB_TYPED(tb_h_point_)(TB_VEC *p, const TB_VEC *q, int64_t s, int64_t qs,
                                            const TB_T *x0, const TB_T *x1, TB_VEC a0,
                                            TB_VEC a1, int64_t v, int64_t nv, int64_t left)
{
    if (s == qs)
        for (int64_t j = 0; j < nv; ++j)
            p[j] = q[j];
    else
        for (int64_t j = 0; j < nv; ++j)
            p[j] = TB_TYPED(tb_h_two_)(x0 + s * v + j * TB_LANES, x1 + s * v + j * TB_LANES,
                                       a0, a1, left && j == nv - 1 ? left : 0);
}

/* The H and W passes of a whole channels-last plane at once, where every
 * point of both tables has two terms (the forward's): output row r, point i
 * is (0 + w[t] * h(src[t])) + w[t+1] * h(src[t+1]), t = ptr[i], with h the H
 * pass's value (tb_h_two_) -- the operations of the two passes in their
 * order, so the same bits, without storing the H rows and reading them
 * back.  Each W term reads a source point at or after the one the same
 * term read for the point before, so the two points last computed are
 * kept in registers and each h(s) is computed once per row (twice where
 * the two terms alternate, which no forward table does).  v <= 4 vectors,
 * known to the compiler. */
TB_ALWAYS_INLINE void TB_TYPED(tb_hw_two_)(TB_T *restrict out, int64_t out_stride,
                                           const TB_T *restrict rows, int64_t row_stride,
                                           int64_t n_rows, const int64_t *restrict h_ptr,
                                           const int64_t *restrict h_src,
                                           const TB_T *restrict h_w,
                                           const int64_t *restrict ptr,
                                           const int64_t *restrict src,
                                           const TB_T *restrict w, int64_t n_target, int64_t v,
                                           int stream)
{
    enum { NV = 4 };
    const int64_t nv = (v + TB_LANES - 1) / TB_LANES;
    const int64_t left = v % TB_LANES;
    for (int64_t r = 0; r < n_rows; ++r) {
        const int64_t th = h_ptr[r];
        const TB_T *x0 = rows + h_src[th] * row_stride, *x1 = rows + h_src[th + 1] * row_stride;
        const TB_VEC a0 = TB_V(set1)(h_w[th]), a1 = TB_V(set1)(h_w[th + 1]);
        TB_T *o = out + r * out_stride;
        TB_VEC p0[NV], p1[NV];
        int64_t c0 = -1, c1 = -1;   /* the source points p0 and p1 hold */
        for (int64_t i = 0; i < n_target; ++i) {
            const int64_t t = ptr[i];
            int64_t s0 = src[t], s1 = src[t + 1];
            TB_IN_GPR(s0);
            TB_IN_GPR(s1);
            if (s0 != c0) {
                TB_TYPED(tb_h_point_)(p0, p1, s0, c1, x0, x1, a0, a1, v, nv, left);
                c0 = s0;
            }
            if (s1 != c1) {
                TB_TYPED(tb_h_point_)(p1, p0, s1, c0, x0, x1, a0, a1, v, nv, left);
                c1 = s1;
            }
            const TB_VEC w0 = TB_V(set1)(w[t]), w1 = TB_V(set1)(w[t + 1]);
            for (int64_t j = 0; j < nv; ++j) {
                const TB_VEC acc = TB_V(add)(TB_V(add)(TB_V(zero)(), TB_V(mul)(w0, p0[j])),
                                             TB_V(mul)(w1, p1[j]));
                TB_TYPED(tb_w_channels_store_)(o + i * v + j * TB_LANES, acc,
                                               left && j == nv - 1 ? left : 0, stream);
            }
        }
    }
}
#endif

/* The H and W passes of a whole plane fused (tb_hw_two_) where both tables
 * have two terms a point and v is a count it has a copy for (8, 16, 32, 64
 * channels, at most 4 vectors); returns 0, having done nothing, otherwise,
 * and the caller takes the two passes.  Not inlined: in the kernel's item
 * function, its copies cost the channels-first path registers. */
TB_NOINLINE int TB_TYPED(tb_hw_channels_)(TB_T *restrict out, int64_t out_stride,
                                            const TB_T *restrict rows, int64_t row_stride,
                                            int64_t n_rows, const tb_axis *ax_h,
                                            const tb_axis *ax_w, int64_t v, int stream)
{
#if defined(TB_LANES_f32)
    const int64_t *restrict h_ptr = ax_h->ptr, *restrict h_src = ax_h->src;
    const TB_T *restrict h_w = (const TB_T *)ax_h->weight;
    const int64_t *restrict ptr = ax_w->ptr, *restrict src = ax_w->src;
    const TB_T *restrict w = (const TB_T *)ax_w->weight;
    const int64_t n_target = ax_w->n_target;
#define TB_HW_CASE(V)                                                                         \
    case V:                                                                                   \
        if ((V + TB_LANES - 1) / TB_LANES > 4)                                                \
            return 0;                                                                         \
        if (stream)                                                                           \
            TB_TYPED(tb_hw_two_)(out, out_stride, rows, row_stride, n_rows, h_ptr, h_src,     \
                                 h_w, ptr, src, w, n_target, V, 1);                           \
        else                                                                                  \
            TB_TYPED(tb_hw_two_)(out, out_stride, rows, row_stride, n_rows, h_ptr, h_src,     \
                                 h_w, ptr, src, w, n_target, V, 0);                           \
        return 1;
    if (ax_h->terms != 2 || ax_w->terms != 2)
        return 0;
    /* Streamed pieces are 16 bytes, each aligned, in every row (as below). */
    stream = stream && ((uintptr_t)out & 15) == 0 && (v * sizeof(TB_T)) % 16 == 0
             && (n_rows == 1 || (out_stride * sizeof(TB_T)) % 16 == 0);
    switch (v) {
    TB_HW_CASE(8)
    TB_HW_CASE(16)
    TB_HW_CASE(32)
    TB_HW_CASE(64)
    }
#undef TB_HW_CASE
#endif
    (void)out, (void)out_stride, (void)rows, (void)row_stride, (void)n_rows, (void)ax_h;
    (void)ax_w, (void)v, (void)stream;
    return 0;
}

/* The entry point: n_rows rows, `row_stride` elements apart, into rows
 * `out_stride` apart (one call for a whole small plane saves a call and the
 * switch per row); the common channel counts get a copy with v known to the
 * compiler. */
static inline void TB_TYPED(tb_w_channels_terms_)(TB_T *restrict out, int64_t out_stride,
                                                  const TB_T *restrict row, int64_t row_stride,
                                                  int64_t n_rows, const int64_t *restrict ptr,
                                                  const int64_t *restrict src,
                                                  const TB_T *restrict w, int64_t n_target,
                                                  int64_t terms, int64_t v, int stream)
{
    int64_t r;
#if defined(TB_LANES_f32)
    /* Streamed pieces are 16 bytes, each aligned, in every row. */
    stream = stream && ((uintptr_t)out & 15) == 0 && (v * sizeof(TB_T)) % 16 == 0
             && (n_rows == 1 || (out_stride * sizeof(TB_T)) % 16 == 0);
    switch (v) {
    case 8: TB_TYPED(tb_w_channels_rows_)(out, out_stride, row, row_stride, n_rows, ptr, src, w,
                                          n_target, terms, 8, stream); return;
    case 16: TB_TYPED(tb_w_channels_rows_)(out, out_stride, row, row_stride, n_rows, ptr, src, w,
                                           n_target, terms, 16, stream); return;
    case 32: TB_TYPED(tb_w_channels_rows_)(out, out_stride, row, row_stride, n_rows, ptr, src, w,
                                           n_target, terms, 32, stream); return;
    case 64: TB_TYPED(tb_w_channels_rows_)(out, out_stride, row, row_stride, n_rows, ptr, src, w,
                                           n_target, terms, 64, stream); return;
    }
    if (TB_HAVE_MASKS || v % TB_LANES == 0) {
        for (r = 0; r < n_rows; ++r)
            TB_TYPED(tb_w_channels_vector_)(out + r * out_stride, row + r * row_stride, ptr, src,
                                            w, n_target, v, stream);
        return;
    }
#endif
    /* Without vectors, ordinary stores whatever `stream` says. */
    (void)stream;
    (void)terms;
    for (r = 0; r < n_rows; ++r)
        TB_TYPED(tb_w_channels_scalar_)(out + r * out_stride, row + r * row_stride, ptr, src, w,
                                        n_target, v);
}

/* The same for axis `ax`. */
TB_ALWAYS_INLINE void TB_TYPED(tb_w_channels_)(TB_T *restrict out, int64_t out_stride,
                                               const TB_T *restrict row, int64_t row_stride,
                                               int64_t n_rows, const tb_axis *ax, int64_t v,
                                               int stream)
{
    TB_TYPED(tb_w_channels_terms_)(out, out_stride, row, row_stride, n_rows, ax->ptr, ax->src,
                                   (const TB_T *)ax->weight, ax->n_target, ax->terms, v,
                                   stream);
}

#if defined(TB_LANES_f32)
#undef TB_VEC
#undef TB_LANES
#endif
