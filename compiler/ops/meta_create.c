/* Meta functions of creation ops: full/zeros/ones/empty/rand/randn, arange,
 * and the creation prims.
 *
 * Creation ops have no tensor inputs: their device is the device arg (None
 * means cpu) and their dtype the dtype arg, else torch's default: full infers
 * it from the fill value (bool, i64 for ints, the default float for floats),
 * arange from its bounds (i64 unless one is a float). arange's length is
 * computed exactly as torch computes it, including its quirk of truncating
 * float bounds for an i64 result but not for other integer dtypes.
 */
#include "ops/meta.h"

#include <math.h>

static void set_device(ptc_meta *m, ptc_ttype *t)
{
    int i = meta_argi(m, "device");
    if (i >= 0 && m->args[i].kind == PTC_ARG_DEVICE)
        t->device = m->args[i].dev;
    else
        t->device = PTC_CPU;
}

static int size_list(ptc_meta *m, const ptc_arg *size)
{
    if (size->is.n > PTC_MAX_DIMS)
        return ptc_meta_fail(m, "size %s has more than %d dims",
                             meta_shapestr(m, size->is.d, size->is.n), PTC_MAX_DIMS);
    for (int i = 0; i < size->is.n; i++)
        if (meta_sign(size->is.d[i]) < 0)
            return ptc_meta_fail(m, "cannot create a tensor with a negative size: %s",
                                 meta_shapestr(m, size->is.d, size->is.n));
    return 0;
}

/* full, zeros, ones, empty, rand, randn. */
int meta_full(ptc_meta *m)
{
    const ptc_arg *size = &m->args[0];
    if (size_list(m, size))
        return -1;
    const ptc_arg *dt = meta_arg(m, "dtype");
    ptc_dtype dtype = PTC_DEFAULT_FLOAT;
    if (dt->kind == PTC_ARG_DTYPE) {
        dtype = dt->dt;
    } else if (m->op == PTC_OP_FULL) {
        const ptc_arg *fill = meta_arg(m, "fill_value");
        dtype = fill->kind == PTC_ARG_BOOL  ? PTC_BOOL
                : fill->kind == PTC_ARG_INT ? PTC_I64
                                            : PTC_DEFAULT_FLOAT;
    }
    if ((m->op == PTC_OP_RAND || m->op == PTC_OP_RANDN) && !ptc_dtype_is_float(dtype))
        return ptc_meta_fail(m, "expected a floating dtype, got %s", ptc_dtype_name(dtype));
    set_device(m, meta_out(m, dtype, size->is.d, size->is.n));
    return 0;
}

/* The value of a Scalar arg converted as C++ Scalar::to<acc>() would. */
static double acc_value(const ptc_arg *a, ptc_dtype out)
{
    double v = meta_scalar(a);
    if (!ptc_dtype_is_float(out))
        return (double)(int64_t)v; /* integer accumulation truncates */
    if (out == PTC_F16 || out == PTC_BF16 || out == PTC_F32)
        return out == PTC_F32 ? v : (double)(float)v;
    return v;
}

static int arange_static(ptc_meta *m, const ptc_arg *s, const ptc_arg *e, const ptc_arg *st,
                         ptc_dtype dt, int64_t *len)
{
    double xs = acc_value(s, dt), xe = acc_value(e, dt), xst = acc_value(st, dt);
    if (xst == 0)
        return ptc_meta_fail(m, "step must be nonzero");
    if (!isfinite(xs) || !isfinite(xe))
        return ptc_meta_fail(m, "unsupported range: %g -> %g", meta_scalar(s), meta_scalar(e));
    if (!((xst > 0 && xe >= xs) || (xst < 0 && xe <= xs)))
        return ptc_meta_fail(m,
                             "upper bound and lower bound inconsistent with step sign "
                             "(%g to %g by %g)",
                             meta_scalar(s), meta_scalar(e), meta_scalar(st));
    double size;
    if (dt == PTC_I64) {
        int64_t a = (int64_t)xs, b = (int64_t)xe, c = (int64_t)xst, sgn = (c > 0) - (c < 0);
        size = (double)((b - a + c - sgn) / c);
    } else {
        size = ceil((meta_scalar(e) - meta_scalar(s)) / meta_scalar(st));
    }
    if (!(size >= 0 && size < 9.2e18))
        return ptc_meta_fail(m, "invalid size %g", size);
    *len = (int64_t)size;
    return 0;
}

/* Symbolic bounds: integer start/end/step with a constant step. */
static int arange_symbolic(ptc_meta *m, const ptc_arg *s, const ptc_arg *e, const ptc_arg *st,
                           ptc_dim *len)
{
    ptc_arena *a = m->arena;
    if (s->kind != PTC_ARG_INT || e->kind != PTC_ARG_INT || st->kind != PTC_ARG_INT || st->i.sym)
        return ptc_meta_fail(m, "symbolic bounds need integer start and end and a constant integer "
                                "step");
    int64_t step = st->i.value;
    if (step == 0)
        return ptc_meta_fail(m, "step must be nonzero");
    ptc_dim span = step > 0 ? ptc_dim_sub(a, e->i, s->i) : ptc_dim_sub(a, s->i, e->i);
    int sign = meta_sign_env(m, span);
    if (sign == 2)
        return ptc_meta_fail(m, "cannot decide whether %s to %s is consistent with step %lld",
                             meta_dstr(m, s->i), meta_dstr(m, e->i), (long long)step);
    if (sign < 0)
        return ptc_meta_fail(m,
                             "upper bound and lower bound inconsistent with step sign (%s to %s "
                             "by %lld)",
                             meta_dstr(m, s->i), meta_dstr(m, e->i), (long long)step);
    *len = meta_ceildiv(a, span, step > 0 ? step : -step);
    return 0;
}

int meta_arange(ptc_meta *m)
{
    const ptc_arg *s = meta_arg(m, "start"), *e = meta_arg(m, "end"), *st = meta_arg(m, "step");
    const ptc_arg *dta = meta_arg(m, "dtype");
    ptc_dtype dt = PTC_I64;
    if (dta->kind == PTC_ARG_DTYPE)
        dt = dta->dt;
    else if (s->kind == PTC_ARG_FLOAT || e->kind == PTC_ARG_FLOAT || st->kind == PTC_ARG_FLOAT)
        dt = PTC_DEFAULT_FLOAT;
    if (dt == PTC_BOOL)
        return ptc_meta_fail(m, "not supported for bool results");
    ptc_dim len;
    bool symbolic = (s->kind == PTC_ARG_INT && s->i.sym) || (e->kind == PTC_ARG_INT && e->i.sym) ||
                    (st->kind == PTC_ARG_INT && st->i.sym);
    if (symbolic) {
        if (arange_symbolic(m, s, e, st, &len))
            return -1;
    } else {
        int64_t n = 0;
        if (arange_static(m, s, e, st, dt, &n))
            return -1;
        len = ptc_dim_c(n);
    }
    set_device(m, meta_out(m, dt, &len, 1));
    return 0;
}

/* ---- prims ------------------------------------------------------------------ */

int meta_prim_iota(ptc_meta *m)
{
    ptc_dim len = meta_arg(m, "length")->i;
    ptc_dtype dt = meta_arg(m, "dtype")->dt;
    if (meta_sign(len) < 0)
        return ptc_meta_fail(m, "length must not be negative, got %s", meta_dstr(m, len));
    if (dt == PTC_BOOL)
        return ptc_meta_fail(m, "not supported for bool results");
    set_device(m, meta_out(m, dt, &len, 1));
    return 0;
}

/* prims.full, prims.rand, prims.randn: dtype and device are explicit. */
int meta_prim_full(ptc_meta *m)
{
    const ptc_arg *shape = &m->args[0];
    ptc_dtype dt = meta_arg(m, "dtype")->dt;
    if (size_list(m, shape))
        return -1;
    if (m->op != PTC_OP_PRIMS_FULL && !ptc_dtype_is_float(dt))
        return ptc_meta_fail(m, "expected a floating dtype, got %s", ptc_dtype_name(dt));
    set_device(m, meta_out(m, dt, shape->is.d, shape->is.n));
    return 0;
}
