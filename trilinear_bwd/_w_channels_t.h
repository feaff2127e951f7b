/*
 * The channels-last W pass of _w_channels.h for one accumulation type: a C
 * template, included once with TB_T float and TB_S f32, once with TB_T
 * double and TB_S f64 (TB_TYPED, _portable.h).  No include guard: it is
 * meant to be included more than once.
 */

/* Without vectors, or for channel counts they cannot cover: element by element. */
static inline void TB_TYPED(tb_w_channels_scalar_)(TB_T *restrict out, const TB_T *restrict row,
                                                   const int64_t *restrict ptr,
                                                   const int64_t *restrict src,
                                                   const TB_T *restrict w, int64_t n_in,
                                                   int64_t v)
{
    for (int64_t i = 0; i < n_in; ++i) {
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
                                                     const TB_T *restrict w, int64_t n_in,
                                                     int64_t v, int stream)
{
    enum { NV = 64 / TB_LANES };
    const int64_t nv = (v + TB_LANES - 1) / TB_LANES;
    const int64_t left = v % TB_LANES;
    for (int64_t i = 0; i < n_in; ++i) {
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
                                                      const TB_T *restrict w, int64_t n_in,
                                                      int64_t v, int stream)
{
    for (int64_t i = 0; i < n_in; ++i) {
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

/* tb_w_channels_fixed_ over n_rows rows, v known to the compiler where the
 * entry point passes a constant. */
TB_ALWAYS_INLINE void TB_TYPED(tb_w_channels_rows_)(TB_T *restrict out, int64_t out_stride,
                                                    const TB_T *restrict row, int64_t row_stride,
                                                    int64_t n_rows, const int64_t *restrict ptr,
                                                    const int64_t *restrict src,
                                                    const TB_T *restrict w, int64_t n_in,
                                                    int64_t v, int stream)
{
    for (int64_t r = 0; r < n_rows; ++r)
        TB_TYPED(tb_w_channels_fixed_)(out + r * out_stride, row + r * row_stride, ptr, src, w,
                                       n_in, v, stream);
}
#endif

/* The entry point: n_rows rows, `row_stride` elements apart, into rows
 * `out_stride` apart (one call for a whole small plane saves a call and the
 * switch per row); the common channel counts get a copy with v known to the
 * compiler. */
static inline void TB_TYPED(tb_w_channels_)(TB_T *restrict out, int64_t out_stride,
                                            const TB_T *restrict row, int64_t row_stride,
                                            int64_t n_rows, const int64_t *restrict ptr,
                                            const int64_t *restrict src,
                                            const TB_T *restrict w, int64_t n_in, int64_t v,
                                            int stream)
{
    int64_t r;
#if defined(TB_LANES_f32)
    /* Streamed pieces are 16 bytes, each aligned, in every row. */
    stream = stream && ((uintptr_t)out & 15) == 0 && (v * sizeof(TB_T)) % 16 == 0
             && (n_rows == 1 || (out_stride * sizeof(TB_T)) % 16 == 0);
    switch (v) {
    case 8: TB_TYPED(tb_w_channels_rows_)(out, out_stride, row, row_stride, n_rows, ptr, src, w,
                                          n_in, 8, stream); return;
    case 16: TB_TYPED(tb_w_channels_rows_)(out, out_stride, row, row_stride, n_rows, ptr, src, w,
                                           n_in, 16, stream); return;
    case 32: TB_TYPED(tb_w_channels_rows_)(out, out_stride, row, row_stride, n_rows, ptr, src, w,
                                           n_in, 32, stream); return;
    case 64: TB_TYPED(tb_w_channels_rows_)(out, out_stride, row, row_stride, n_rows, ptr, src, w,
                                           n_in, 64, stream); return;
    }
    if (TB_HAVE_MASKS || v % TB_LANES == 0) {
        for (r = 0; r < n_rows; ++r)
            TB_TYPED(tb_w_channels_vector_)(out + r * out_stride, row + r * row_stride, ptr, src,
                                            w, n_in, v, stream);
        return;
    }
#endif
    /* Without vectors, ordinary stores whatever `stream` says. */
    (void)stream;
    for (r = 0; r < n_rows; ++r)
        TB_TYPED(tb_w_channels_scalar_)(out + r * out_stride, row + r * row_stride, ptr, src, w,
                                        n_in, v);
}

#if defined(TB_LANES_f32)
#undef TB_VEC
#undef TB_LANES
#endif
