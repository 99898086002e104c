/* Meta functions of pointwise ops: torch-level unary, binary and ternary ops,
 * dropout and `to`, and the pointwise prims.
 *
 * Torch-level ops broadcast their tensor operands and promote with
 * torch.result_type (a Python number takes part as a "wrapped" scalar of its
 * category). Dtype restrictions follow what torch's CPU kernels accept, so a
 * graph that verifies here runs in eager torch. Prims are strict: their
 * operands already have one dtype and one shape, which the decomposition made
 * explicit with convert_element_type and broadcast_in_dim.
 */
#include "ops/meta.h"

#include <string.h>

/* Broadcast shape of the tensor args idx[0..n) (numbers skipped) into *acc,
 * whose dtype is that of the first tensor (for messages). */
static int broadcast_args(ptc_meta *m, const int *idx, int n, ptc_ttype *acc)
{
    bool first = true;
    for (int i = 0; i < n; i++) {
        const ptc_ttype *t = idx[i] >= 0 ? meta_t(m, idx[i]) : NULL;
        if (!t)
            continue;
        if (first) {
            *acc = *t;
            acc->layout = PTC_LAYOUT_CONTIGUOUS;
            first = false;
            continue;
        }
        ptc_dim out[PTC_MAX_DIMS];
        int nout;
        if (meta_broadcast(m, acc, t, out, &nout))
            return -1;
        acc->ndim = (int8_t)nout;
        memcpy(acc->shape, out, sizeof(ptc_dim) * (size_t)nout);
    }
    PTC_ASSERT(!first);
    return 0;
}

/* Adds the output of a pointwise op over args idx with dtype dt. */
static int pointwise(ptc_meta *m, const int *idx, int n, ptc_dtype dt)
{
    ptc_ttype acc;
    if (broadcast_args(m, idx, n, &acc))
        return -1;
    meta_out(m, dt, acc.shape, acc.ndim);
    return 0;
}

/* ---- torch-level unary ----------------------------------------------------- */

int meta_unary_same(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    if (x->dtype == PTC_BOOL && m->op != PTC_OP_SIGN)
        return ptc_meta_fail(m, "not supported for bool tensors (%s)", meta_tstr(m, x));
    /* torch casts the limits to the tensor's type first: only limits that
     * truncate below zero are refused for u8. */
    if (m->op == PTC_OP_HARDTANH && x->dtype == PTC_U8)
        for (int i = 1; i <= 2; i++) {
            const ptc_arg *lim = &m->args[i];
            double v = lim->kind == PTC_ARG_FLOAT ? lim->f
                       : lim->kind == PTC_ARG_INT ? (double)lim->i.value
                                                  : 0;
            if ((int64_t)v < 0)
                return ptc_meta_fail(m,
                                     "cannot do hardtanh on an unsigned type with negative limits");
        }
    if (m->op == PTC_OP_ROUND && !meta_is(meta_arg(m, "decimals")->i, 0) &&
        !ptc_dtype_is_float(x->dtype))
        return ptc_meta_fail(m, "decimals needs a floating point tensor, got %s", meta_tstr(m, x));
    meta_out_like(m, x);
    return 0;
}

/* Ops that compute in floating point: integers and bools give the default
 * float dtype. */
int meta_unary_float(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    meta_out(m, ptc_dtype_is_float(x->dtype) ? x->dtype : PTC_DEFAULT_FLOAT, x->shape, x->ndim);
    return 0;
}

int meta_unary_float_only(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    if (meta_need_float(m, x, "tensor"))
        return -1;
    meta_out_like(m, x);
    return 0;
}

int meta_unary_bool(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    meta_out(m, PTC_BOOL, x->shape, x->ndim);
    return 0;
}

int meta_unary_int(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    if (ptc_dtype_is_float(x->dtype))
        return ptc_meta_fail(m, "expected an integer or bool tensor, got %s", meta_tstr(m, x));
    meta_out_like(m, x);
    return 0;
}

/* ---- torch-level binary ---------------------------------------------------- */

static bool arg_is_bool(const ptc_meta *m, int i)
{
    const ptc_arg *a = &m->args[i];
    return a->kind == PTC_ARG_BOOL || (a->kind == PTC_ARG_VALUE && a->v->type.dtype == PTC_BOOL);
}

/* add / sub / rsub's alpha against the result dtype, as torch checks it. */
static int check_alpha(ptc_meta *m, ptc_dtype dt)
{
    int i = meta_argi(m, "alpha");
    if (i < 0)
        return 0;
    const ptc_arg *alpha = &m->args[i];
    if (alpha->kind == PTC_ARG_FLOAT && !ptc_dtype_is_float(dt))
        return ptc_meta_fail(m, "alpha must not be a float for %s inputs", ptc_dtype_name(dt));
    if (alpha->kind == PTC_ARG_BOOL && dt != PTC_BOOL)
        return ptc_meta_fail(m, "a bool alpha needs a bool result, got %s", ptc_dtype_name(dt));
    return 0;
}

/* add, sub, rsub, mul, remainder, fmod, maximum, minimum. */
int meta_binary(ptc_meta *m)
{
    static const int idx[] = {0, 1};
    ptc_dtype dt = meta_result_type(m, idx, 2);
    bool sub = m->op == PTC_OP_SUB || m->op == PTC_OP_RSUB;
    if (sub && (arg_is_bool(m, 0) || arg_is_bool(m, 1)))
        return ptc_meta_fail(m, "subtraction with a bool tensor or scalar is not supported "
                                "(use logical_not or logical_xor)");
    if ((m->op == PTC_OP_REMAINDER || m->op == PTC_OP_FMOD) && dt == PTC_BOOL)
        return ptc_meta_fail(m, "not supported for bool tensors");
    if (check_alpha(m, dt))
        return -1;
    return pointwise(m, idx, 2, dt);
}

int meta_div(ptc_meta *m)
{
    static const int idx[] = {0, 1};
    ptc_dtype dt = meta_result_type(m, idx, 2);
    const ptc_arg *mode = meta_arg(m, "rounding_mode");
    if (mode->kind == PTC_ARG_NONE) {
        if (!ptc_dtype_is_float(dt))
            dt = PTC_DEFAULT_FLOAT;
    } else if (dt == PTC_BOOL) {
        return ptc_meta_fail(m, "rounding_mode=\"%s\" is not supported for bool tensors", mode->s);
    }
    return pointwise(m, idx, 2, dt);
}

/* The range of an integer dtype (for pow's exponent check). */
static void int_range(ptc_dtype dt, int64_t *lo, int64_t *hi)
{
    int bits = (int)ptc_dtype_size(dt) * 8;
    if (dt == PTC_U8) {
        *lo = 0;
        *hi = 255;
    } else if (bits == 64) {
        *lo = INT64_MIN;
        *hi = INT64_MAX;
    } else {
        *lo = -((int64_t)1 << (bits - 1));
        *hi = ((int64_t)1 << (bits - 1)) - 1;
    }
}

int meta_pow(ptc_meta *m)
{
    static const int idx[] = {0, 1};
    if (!meta_t(m, 0) && !meta_t(m, 1))
        return ptc_meta_fail(m, "needs a tensor base or exponent, got two numbers");
    ptc_dtype dt = meta_result_type(m, idx, 2);
    const ptc_arg *e = &m->args[1];
    /* torch only computes bool ** True / False (a copy or ones). */
    if (dt == PTC_BOOL && !(meta_t(m, 0) && e->kind == PTC_ARG_BOOL))
        return ptc_meta_fail(m, "not supported for bool tensors");
    if (ptc_dtype_is_int(dt) && e->kind == PTC_ARG_INT && !e->i.sym) {
        int64_t lo, hi;
        int_range(dt, &lo, &hi);
        if (e->i.value < 0)
            return ptc_meta_fail(m,
                                 "integers to negative integer powers are not allowed (%s ** %lld)",
                                 meta_tstr(m, meta_t(m, 0)), (long long)e->i.value);
        if (e->i.value > hi)
            return ptc_meta_fail(m, "exponent %lld does not fit the result dtype %s",
                                 (long long)e->i.value, ptc_dtype_name(dt));
    }
    return pointwise(m, idx, 2, dt);
}

int meta_binary_float(ptc_meta *m)
{
    static const int idx[] = {0, 1};
    ptc_dtype dt = meta_result_type(m, idx, 2);
    return pointwise(m, idx, 2, ptc_dtype_is_float(dt) ? dt : PTC_DEFAULT_FLOAT);
}

/* logaddexp: torch computes it for floating-point tensors only. */
int meta_binary_float_only(ptc_meta *m)
{
    static const int idx[] = {0, 1};
    ptc_dtype dt = meta_result_type(m, idx, 2);
    if (!ptc_dtype_is_float(dt))
        return ptc_meta_fail(m, "not implemented for %s tensors", ptc_dtype_name(dt));
    return pointwise(m, idx, 2, dt);
}

int meta_compare(ptc_meta *m)
{
    static const int idx[] = {0, 1};
    return pointwise(m, idx, 2, PTC_BOOL);
}

int meta_bitwise(ptc_meta *m)
{
    static const int idx[] = {0, 1};
    ptc_dtype dt = meta_result_type(m, idx, 2);
    if (ptc_dtype_is_float(dt))
        return ptc_meta_fail(m, "expected integer or bool operands, the result would be %s",
                             ptc_dtype_name(dt));
    return pointwise(m, idx, 2, dt);
}

/* ---- torch-level ternary ----------------------------------------------------- */

int meta_where(ptc_meta *m)
{
    static const int idx[] = {0, 1, 2};
    const ptc_ttype *c = meta_t(m, 0);
    /* torch still accepts u8 conditions (with a deprecation warning). */
    if (c->dtype != PTC_BOOL && c->dtype != PTC_U8)
        return ptc_meta_fail(m, "expected a bool condition, got %s", meta_tstr(m, c));
    return pointwise(m, idx, 3, meta_result_type(m, idx + 1, 2));
}

int meta_clamp(ptc_meta *m)
{
    static const int idx[] = {0, 1, 2};
    if (m->args[1].kind == PTC_ARG_NONE && m->args[2].kind == PTC_ARG_NONE)
        return ptc_meta_fail(m, "at least one of min and max must not be none");
    ptc_dtype dt = meta_result_type(m, idx, 3);
    /* torch has bool kernels for tensor bounds, not for Python-number ones. */
    for (int i = 1; i <= 2 && dt == PTC_BOOL; i++)
        if (m->args[i].kind != PTC_ARG_NONE && m->args[i].kind != PTC_ARG_VALUE)
            return ptc_meta_fail(m, "not supported for bool results with a number bound");
    return pointwise(m, idx, 3, dt);
}

int meta_masked_fill(ptc_meta *m)
{
    static const int idx[] = {0, 1};
    const ptc_ttype *x = meta_t(m, 0), *mask = meta_t(m, 1), *value = meta_t(m, 2);
    if (mask->dtype != PTC_BOOL)
        return ptc_meta_fail(m, "expected a bool mask, got %s", meta_tstr(m, mask));
    if (value && value->ndim != 0)
        return ptc_meta_fail(m, "the value must be a number or a 0-dim tensor, got %s",
                             meta_tstr(m, value));
    return pointwise(m, idx, 2, x->dtype);
}

/* ---- dropout, to ------------------------------------------------------------ */

int meta_dropout(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    double p = meta_arg(m, "p")->f;
    if (!(p >= 0 && p <= 1))
        return ptc_meta_fail(m, "probability has to be between 0 and 1, got %g", p);
    if (meta_arg(m, "train")->b && meta_need_float(m, x, "input when training"))
        return -1;
    meta_out_like(m, x);
    return 0;
}

int meta_to(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *dt = meta_arg(m, "dtype"), *dev = meta_arg(m, "device");
    ptc_ttype *o = meta_out(m, dt->kind == PTC_ARG_NONE ? x->dtype : dt->dt, x->shape, x->ndim);
    o->device = dev->kind == PTC_ARG_NONE ? x->device : dev->dev;
    return 0;
}

/* ---- prims ------------------------------------------------------------------ */

/* The dtypes a pointwise prim takes are those its reference computes in:
 * whether pointwise.def's ref column, REF(float formula, integer formula),
 * has a formula in floats (floating) or in integers (and bool, where its
 * bools column says so). */
static bool prim_has_formula(ptc_op op, bool floating)
{
    switch (op) {
#define REF(f, i) strcmp(floating ? #f : #i, "NOREF") != 0
#define NONE true /* where, logical_not, isnan: kernels of their own, any dtype */
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit)                                \
    case PTC_OP_##id:                                                                              \
        return ref;
#include "ir/pointwise.def"
#undef NONE
    default:
        return true;
    }
}

/* Whether a pointwise prim takes bool operands (pointwise.def's bools column;
 * computed by the integer formula). */
static bool prim_takes_bool(ptc_op op)
{
    switch (op) {
#define TAKES_BOOL true
#define NO_BOOL false
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit)                                \
    case PTC_OP_##id:                                                                              \
        return bools;
#include "ir/pointwise.def"
    default:
        return true;
    }
}

int meta_prim_unary(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    if (!prim_has_formula(m->op, false) && meta_need_float(m, x, "tensor"))
        return -1;
    if (!prim_has_formula(m->op, true) && ptc_dtype_is_float(x->dtype))
        return ptc_meta_fail(m, "expected an integer or bool tensor, got %s", meta_tstr(m, x));
    if (x->dtype == PTC_BOOL && !prim_takes_bool(m->op))
        return ptc_meta_fail(m, "not supported for bool tensors (%s)", meta_tstr(m, x));
    meta_out_like(m, x);
    return 0;
}

int meta_prim_unary_bool(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    meta_out(m, PTC_BOOL, x->shape, x->ndim);
    return 0;
}

/* Prims operands: one dtype and one shape. */
static int same_operands(ptc_meta *m, const int *idx, int n)
{
    const ptc_ttype *a = meta_t(m, idx[0]);
    for (int i = 1; i < n; i++) {
        const ptc_ttype *b = meta_t(m, idx[i]);
        bool same = a->ndim == b->ndim;
        for (int d = 0; same && d < a->ndim; d++)
            same = meta_same(m, a->shape[d], b->shape[d]);
        if (!same)
            return ptc_meta_fail(m, "operands must have one shape, got %s and %s", meta_tstr(m, a),
                                 meta_tstr(m, b));
        if (a->dtype != b->dtype)
            return ptc_meta_fail(m, "operands must have one dtype, got %s and %s", meta_tstr(m, a),
                                 meta_tstr(m, b));
    }
    return 0;
}

int meta_prim_binary(ptc_meta *m)
{
    static const int idx[] = {0, 1};
    if (same_operands(m, idx, 2))
        return -1;
    const ptc_ttype *a = meta_t(m, 0);
    ptc_op op = m->op;
    if (!prim_has_formula(op, true) && ptc_dtype_is_float(a->dtype))
        return ptc_meta_fail(m, "expected integer or bool operands, got %s", meta_tstr(m, a));
    if (!prim_has_formula(op, false) && meta_need_float(m, a, "operand"))
        return -1;
    if (a->dtype == PTC_BOOL && !prim_takes_bool(op))
        return ptc_meta_fail(m, "not supported for bool operands (%s)", meta_tstr(m, a));
    meta_out_like(m, a);
    return 0;
}

int meta_prim_compare(ptc_meta *m)
{
    static const int idx[] = {0, 1};
    if (same_operands(m, idx, 2))
        return -1;
    const ptc_ttype *a = meta_t(m, 0);
    meta_out(m, PTC_BOOL, a->shape, a->ndim);
    return 0;
}

int meta_prim_where(ptc_meta *m)
{
    static const int idx[] = {1, 2};
    const ptc_ttype *p = meta_t(m, 0), *a = meta_t(m, 1);
    if (p->dtype != PTC_BOOL)
        return ptc_meta_fail(m, "expected a bool predicate, got %s", meta_tstr(m, p));
    if (same_operands(m, idx, 2))
        return -1;
    bool same = p->ndim == a->ndim;
    for (int d = 0; same && d < a->ndim; d++)
        same = meta_same(m, a->shape[d], p->shape[d]);
    if (!same)
        return ptc_meta_fail(m, "predicate %s and operands %s must have one shape", meta_tstr(m, p),
                             meta_tstr(m, a));
    meta_out_like(m, a);
    return 0;
}

int meta_prim_convert(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    meta_out(m, meta_arg(m, "dtype")->dt, x->shape, x->ndim);
    return 0;
}

int meta_prim_device_put(ptc_meta *m)
{
    ptc_ttype *o = meta_out_like(m, meta_t(m, 0));
    o->device = meta_arg(m, "device")->dev;
    return 0;
}
