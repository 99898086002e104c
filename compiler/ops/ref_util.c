/* What every reference kernel needs: arguments by schema name, dtype
 * conversions with torch's cast semantics, and broadcast views.
 *
 * Conversions go through two domains only: int64 for bool and integer dtypes
 * (exact; wrapped to the width at the end, as the dtype's two's-complement
 * arithmetic would) and double for floats, rounded to the dtype's precision
 * where torch would round (f16/bf16 go through f32, as c10::Half does).
 */
#include "ops/ref.h"

#include <math.h>
#include <string.h>

int ref_fail(const ptc_kctx *k, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ptc_verrorf(k->err, PTC_ERR_RUNTIME, "interp", fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- arguments ---------------------------------------------------------------- */

int ref_argi(const ptc_kctx *k, const char *param)
{
    int i = ptc_param_index(k->node->op, param);
    PTC_ASSERT(i >= 0 && i < k->node->nargs);
    return i;
}

const ptc_arg *ref_arg(const ptc_kctx *k, const char *param)
{
    return &k->node->args[ref_argi(k, param)];
}

bool ref_has(const ptc_kctx *k, const char *param)
{
    int i = ptc_param_index(k->node->op, param);
    return i >= 0 && i < k->node->nargs && k->node->args[i].kind != PTC_ARG_NONE;
}

const ptc_tensor *ref_tensor(const ptc_kctx *k, const char *param)
{
    return ptc_k_tensor(k, ref_argi(k, param));
}

int64_t ref_int(const ptc_kctx *k, const char *param)
{
    return ptc_k_int(k, ref_argi(k, param));
}

double ref_float(const ptc_kctx *k, const char *param)
{
    return ptc_k_scalar(k, ref_argi(k, param));
}

bool ref_bool(const ptc_kctx *k, const char *param)
{
    const ptc_arg *a = ref_arg(k, param);
    PTC_ASSERT(a->kind == PTC_ARG_BOOL);
    return a->b;
}

int ref_ints(const ptc_kctx *k, const char *param, int64_t *out, int max)
{
    const ptc_arg *a = ref_arg(k, param);
    if (a->kind == PTC_ARG_INT) { /* int[N] not normalised: one value repeated */
        PTC_ASSERT(max >= 1);
        out[0] = ptc_k_int(k, ref_argi(k, param));
        return 1;
    }
    PTC_ASSERT(a->kind == PTC_ARG_INTS && a->is.n <= max);
    for (int i = 0; i < a->is.n; i++)
        PTC_ASSERT(ptc_dim_eval(a->is.d[i], k->bindings, &out[i], NULL) == 0);
    return a->is.n;
}

ref_scalar ref_scalar_arg(const ptc_kctx *k, int argi)
{
    const ptc_arg *a = &k->node->args[argi];
    ref_scalar s = {0};
    switch (a->kind) {
    case PTC_ARG_INT:
        s.i = ptc_k_int(k, argi);
        s.f = (double)s.i;
        break;
    case PTC_ARG_BOOL:
        s.i = a->b;
        s.f = a->b;
        break;
    case PTC_ARG_FLOAT:
        s.is_float = true;
        s.f = a->f;
        break;
    default:
        PTC_ASSERT(!"scalar argument expected");
    }
    return s;
}

/* ---- conversions -------------------------------------------------------------- */

double ptc_dtype_round(double v, ptc_dtype dt)
{
    switch (dt) {
    case PTC_F16:
        return ptc_f16_to_f32(ptc_f32_to_f16((float)v));
    case PTC_BF16:
        return ptc_bf16_to_f32(ptc_f32_to_bf16((float)v));
    case PTC_F32:
        return (float)v;
    case PTC_F64:
        return v;
    default:
        PTC_ASSERT(!"float dtype expected");
    }
    return v;
}

int64_t ref_wrap(int64_t v, ptc_dtype dt)
{
    switch (dt) {
    case PTC_BOOL:
        return v != 0;
    case PTC_U8:
        return (uint8_t)(uint64_t)v;
    case PTC_I8:
        return (int8_t)(uint64_t)v;
    case PTC_I16:
        return (int16_t)(uint64_t)v;
    case PTC_I32:
        return (int32_t)(uint64_t)v;
    case PTC_I64:
        return v;
    default:
        PTC_ASSERT(!"integer dtype expected");
    }
    return v;
}

/* An int64 to float dtype dt, rounding once (i64 -> f32 directly, as
 * static_cast<float>(int64_t) does, not through double). */
static double int_to_float(int64_t i, ptc_dtype dt)
{
    if (dt == PTC_F64)
        return (double)i;
    return ptc_dtype_round((double)(float)i, dt);
}

/* A double to integer dtype dt like torch's cast: truncate, then wrap (out of
 * range and nan go through INT64_MIN, as on x86). */
static int64_t float_to_int(double v, ptc_dtype dt)
{
    if (dt == PTC_BOOL)
        return v != 0;
    unsigned char tmp[8];
    ptc_store_f64(tmp, dt, v);
    return ptc_load_i64(tmp, dt);
}

double ref_load_as_f(const void *p, ptc_dtype src, ptc_dtype dst)
{
    if (ref_is_float(src))
        return ptc_dtype_round(ptc_load_f64(p, src), dst);
    return int_to_float(ptc_load_i64(p, src), dst);
}

int64_t ref_load_as_i(const void *p, ptc_dtype src, ptc_dtype dst)
{
    if (ref_is_float(src))
        return float_to_int(ptc_load_f64(p, src), dst);
    return ref_wrap(ptc_load_i64(p, src), dst);
}

double ref_scalar_as_f(ref_scalar s, ptc_dtype dt)
{
    return s.is_float ? ptc_dtype_round(s.f, dt) : int_to_float(s.i, dt);
}

int64_t ref_scalar_as_i(ref_scalar s, ptc_dtype dt)
{
    return s.is_float ? float_to_int(s.f, dt) : ref_wrap(s.i, dt);
}

void ref_copy_elem(ptc_tensor *dst, int64_t doff, const ptc_tensor *src, int64_t soff)
{
    PTC_ASSERT(dst->dtype == src->dtype);
    memcpy(ref_at(dst, doff), ref_at(src, soff), ptc_dtype_size(src->dtype));
}

void ref_convert_elem(ptc_tensor *dst, int64_t doff, const ptc_tensor *src, int64_t soff)
{
    if (dst->dtype == src->dtype)
        ref_copy_elem(dst, doff, src, soff);
    else if (ref_is_float(dst->dtype) && ref_is_float(src->dtype))
        ptc_store_f64(ref_at(dst, doff), dst->dtype, ref_ldf(src, soff));
    else if (ref_is_float(dst->dtype))
        ptc_store_f64(ref_at(dst, doff), dst->dtype,
                      ref_load_as_f(ref_at(src, soff), src->dtype, dst->dtype));
    else
        ptc_store_i64(ref_at(dst, doff), dst->dtype,
                      ref_load_as_i(ref_at(src, soff), src->dtype, dst->dtype));
}

int ref_as_f64(const ptc_kctx *k, const ptc_tensor *t, ptc_tensor *out)
{
    if (ptc_tensor_alloc(out, PTC_F64, t->ndim, t->sizes, k->err))
        return -1;
    if (ptc_tensor_copy(out, t, k->err) == 0)
        return 0;
    ptc_tensor_release(out);
    return -1;
}

/* ---- shapes ------------------------------------------------------------------- */

ptc_tensor ref_broadcast(const ptc_tensor *t, int ndim, const int64_t *sizes)
{
    PTC_ASSERT(t->ndim <= ndim);
    ptc_tensor v = *t;
    v.storage = NULL;
    v.ndim = ndim;
    int shift = ndim - t->ndim;
    for (int d = ndim - 1; d >= 0; d--) {
        int sd = d - shift;
        v.sizes[d] = sizes[d];
        if (sd < 0) {
            v.strides[d] = 0;
        } else {
            PTC_ASSERT(t->sizes[sd] == sizes[d] || t->sizes[sd] == 1);
            v.strides[d] = t->sizes[sd] == sizes[d] ? t->strides[sd] : 0;
        }
    }
    return v;
}

int ref_broadcast_arg(const ptc_kctx *k, const ptc_tensor *t, int ndim, const int64_t *sizes,
                      ptc_tensor *out)
{
    if (t->ndim > ndim)
        return ref_fail(k, "a %d-d tensor cannot broadcast to %d dims", t->ndim, ndim);
    for (int d = 0; d < t->ndim; d++) {
        int64_t have = t->sizes[d], want = sizes[ndim - t->ndim + d];
        if (have != want && have != 1)
            return ref_fail(k,
                            "The size of tensor a (%lld) must match the size of tensor b (%lld) "
                            "at non-singleton dimension %d",
                            (long long)have, (long long)want, ndim - t->ndim + d);
    }
    *out = ref_broadcast(t, ndim, sizes);
    return 0;
}

int ref_out_sizes(const ptc_kctx *k, int i, int ndim, const int64_t *sizes)
{
    const ptc_tensor *o = &k->out[i];
    bool same = o->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = o->sizes[d] == sizes[d];
    if (same)
        return 0;
    ptc_buf want = {0}, got = {0};
    for (int d = 0; d < ndim; d++)
        ptc_buf_printf(&want, "%s%lld", d ? "," : "", (long long)sizes[d]);
    for (int d = 0; d < o->ndim; d++)
        ptc_buf_printf(&got, "%s%lld", d ? "," : "", (long long)o->sizes[d]);
    ref_fail(k,
             "internal: output %d has sizes [%s], the kernel makes [%s] (the graph's types "
             "disagree with the op)",
             i, got.data ? got.data : "", want.data ? want.data : "");
    ptc_buf_free(&want);
    ptc_buf_free(&got);
    return -1;
}

int ref_wrap_dim(int64_t dim, int ndim)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n)
        return -1;
    return (int)(dim < 0 ? dim + n : dim);
}

int ref_dim(const ptc_kctx *k, int64_t dim, int ndim, int *out)
{
    *out = ref_wrap_dim(dim, ndim);
    if (*out < 0)
        return ref_fail(
            k, "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
            ndim > 0 ? -ndim : -1, ndim > 0 ? ndim - 1 : 0, (long long)dim);
    return 0;
}
