/* Decompositions of the pointwise ops.
 *
 * Operands are converted to the computation dtype first (the output dtype,
 * except f16/bf16 which compute in f32 and round once at the end, as the
 * reference and torch's CPU kernels do); Python numbers become prims.full of
 * that dtype; tensors are broadcast to the output's shape. Composite
 * activations follow the reference's formulas operation by operation, so
 * the two round the same way.
 */
#include "passes/decomp.h"

#include <math.h>
#include <string.h>

/* A constant shaped like x. */
static ptc_value *K(dctx *d, double v, const ptc_value *like)
{
    if (!like)
        return NULL;
    return dp_full(d, like->type.shape, like->type.ndim, v, like->type.dtype);
}

static ptc_value *U(dctx *d, ptc_op op, ptc_value *x) { return dp_unary(d, op, x); }
static ptc_value *B(dctx *d, ptc_op op, ptc_value *a, ptc_value *b) { return dp_binary(d, op, a, b); }

/* std::max(x, v) / std::min(x, v) with a scalar bound: x wins unless the
 * comparison holds, so a nan x stays nan. */
static ptc_value *stdmax(dctx *d, ptc_value *x, double v)
{
    ptc_value *k = K(d, v, x);
    return dp_where(d, B(d, PTC_OP_PRIMS_LT, x, k), k, x);
}

static ptc_value *stdmin(dctx *d, ptc_value *x, double v)
{
    ptc_value *k = K(d, v, x);
    return dp_where(d, B(d, PTC_OP_PRIMS_LT, k, x), k, x);
}

static ptc_op simple_unary(ptc_op op)
{
    switch (op) {
    case PTC_OP_ABS: return PTC_OP_PRIMS_ABS;
    case PTC_OP_NEG: return PTC_OP_PRIMS_NEG;
    case PTC_OP_FLOOR: return PTC_OP_PRIMS_FLOOR;
    case PTC_OP_CEIL: return PTC_OP_PRIMS_CEIL;
    case PTC_OP_TRUNC: return PTC_OP_PRIMS_TRUNC;
    case PTC_OP_SIGN: return PTC_OP_PRIMS_SIGN;
    case PTC_OP_EXP: return PTC_OP_PRIMS_EXP;
    case PTC_OP_LOG: return PTC_OP_PRIMS_LOG;
    case PTC_OP_LOG1P: return PTC_OP_PRIMS_LOG1P;
    case PTC_OP_EXPM1: return PTC_OP_PRIMS_EXPM1;
    case PTC_OP_SQRT: return PTC_OP_PRIMS_SQRT;
    case PTC_OP_RSQRT: return PTC_OP_PRIMS_RSQRT;
    case PTC_OP_SIN: return PTC_OP_PRIMS_SIN;
    case PTC_OP_COS: return PTC_OP_PRIMS_COS;
    case PTC_OP_TANH: return PTC_OP_PRIMS_TANH;
    case PTC_OP_ERF: return PTC_OP_PRIMS_ERF;
    case PTC_OP_RECIPROCAL: return PTC_OP_PRIMS_RECIPROCAL;
    case PTC_OP_BITWISE_NOT: return PTC_OP_PRIMS_BITWISE_NOT;
    default: return PTC_OP_COUNT;
    }
}

static ptc_value *round_decimals(dctx *d, ptc_value *x, int64_t decimals)
{
    if (decimals == 0)
        return U(d, PTC_OP_PRIMS_ROUND, x);
    bool neg = decimals < 0;
    double p = pow(10.0, (double)(neg ? -decimals : decimals));
    if (x && x->type.dtype != PTC_F64)
        p = (float)p;
    if (neg)
        return B(d, PTC_OP_PRIMS_MUL, U(d, PTC_OP_PRIMS_ROUND, B(d, PTC_OP_PRIMS_DIV, x, K(d, p, x))),
                 K(d, p, x));
    return B(d, PTC_OP_PRIMS_DIV, U(d, PTC_OP_PRIMS_ROUND, B(d, PTC_OP_PRIMS_MUL, x, K(d, p, x))),
             K(d, p, x));
}

/* The float activations; x is in the computation dtype. */
static ptc_value *activation(dctx *d, const ptc_node *n, ptc_value *x)
{
    const ptc_op op = n->op;
    switch (op) {
    case PTC_OP_SIGMOID:
        return U(d, PTC_OP_PRIMS_RECIPROCAL,
                 B(d, PTC_OP_PRIMS_ADD, K(d, 1, x), U(d, PTC_OP_PRIMS_EXP, U(d, PTC_OP_PRIMS_NEG, x))));
    case PTC_OP_SILU:
        return B(d, PTC_OP_PRIMS_DIV, x,
                 B(d, PTC_OP_PRIMS_ADD, K(d, 1, x), U(d, PTC_OP_PRIMS_EXP, U(d, PTC_OP_PRIMS_NEG, x))));
    case PTC_OP_GELU:
        if (strcmp(dp_arg(n, "approximate")->s, "tanh") == 0) {
            ptc_value *x3 = B(d, PTC_OP_PRIMS_MUL, B(d, PTC_OP_PRIMS_MUL, B(d, PTC_OP_PRIMS_MUL,
                                                                          K(d, 0.044715, x), x), x), x);
            ptc_value *inner = B(d, PTC_OP_PRIMS_MUL, K(d, 0.7978845608028654, x),
                                 B(d, PTC_OP_PRIMS_ADD, x, x3));
            return B(d, PTC_OP_PRIMS_MUL, B(d, PTC_OP_PRIMS_MUL, K(d, 0.5, x), x),
                     B(d, PTC_OP_PRIMS_ADD, K(d, 1, x), U(d, PTC_OP_PRIMS_TANH, inner)));
        }
        if (strcmp(dp_arg(n, "approximate")->s, "none") != 0) {
            dp_fail(d, PTC_ERR_META, "approximate must be 'none' or 'tanh'");
            return NULL;
        }
        return B(d, PTC_OP_PRIMS_MUL, B(d, PTC_OP_PRIMS_MUL, x, K(d, 0.5, x)),
                 B(d, PTC_OP_PRIMS_ADD, K(d, 1, x),
                   U(d, PTC_OP_PRIMS_ERF, B(d, PTC_OP_PRIMS_MUL, x, K(d, 0.7071067811865476, x)))));
    case PTC_OP_HARDSWISH:
        return B(d, PTC_OP_PRIMS_DIV,
                 B(d, PTC_OP_PRIMS_MUL, x, stdmin(d, stdmax(d, B(d, PTC_OP_PRIMS_ADD, x, K(d, 3, x)), 0), 6)),
                 K(d, 6, x));
    case PTC_OP_HARDSIGMOID:
        return B(d, PTC_OP_PRIMS_DIV, stdmin(d, stdmax(d, B(d, PTC_OP_PRIMS_ADD, x, K(d, 3, x)), 0), 6),
                 K(d, 6, x));
    case PTC_OP_LEAKY_RELU: {
        double s = dp_scalar_f(dp_arg(n, "negative_slope"));
        return dp_where(d, B(d, PTC_OP_PRIMS_GT, x, K(d, 0, x)), x, B(d, PTC_OP_PRIMS_MUL, x, K(d, s, x)));
    }
    case PTC_OP_ELU: {
        double alpha = dp_scalar_f(dp_arg(n, "alpha")), scale = dp_scalar_f(dp_arg(n, "scale")),
               is = dp_scalar_f(dp_arg(n, "input_scale"));
        ptc_value *neg = B(d, PTC_OP_PRIMS_MUL,
                           B(d, PTC_OP_PRIMS_MUL, U(d, PTC_OP_PRIMS_EXPM1, B(d, PTC_OP_PRIMS_MUL, x, K(d, is, x))),
                             K(d, alpha, x)),
                           K(d, scale, x));
        return dp_where(d, B(d, PTC_OP_PRIMS_LE, x, K(d, 0, x)), neg, B(d, PTC_OP_PRIMS_MUL, x, K(d, scale, x)));
    }
    case PTC_OP_SOFTPLUS: {
        double beta = dp_scalar_f(dp_arg(n, "beta")), th = dp_scalar_f(dp_arg(n, "threshold"));
        ptc_value *xb = B(d, PTC_OP_PRIMS_MUL, x, K(d, beta, x));
        ptc_value *soft = B(d, PTC_OP_PRIMS_DIV, U(d, PTC_OP_PRIMS_LOG1P, U(d, PTC_OP_PRIMS_EXP, xb)),
                            K(d, beta, x));
        return dp_where(d, B(d, PTC_OP_PRIMS_GT, xb, K(d, th, x)), x, soft);
    }
    default: return NULL;
    }
}

static int d_unary(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    ptc_dtype out = dp_out_dtype(n, 0), c = dp_compute(out);
    ptc_op op = n->op;
    if (op == PTC_OP_LOGICAL_NOT || op == PTC_OP_ISNAN) {
        outs[0] = U(d, op == PTC_OP_ISNAN ? PTC_OP_PRIMS_ISNAN : PTC_OP_PRIMS_LOGICAL_NOT, x);
        return 0;
    }
    ptc_value *xc = dp_convert(d, x, c), *r = NULL;
    ptc_op prim = simple_unary(op);
    if (op == PTC_OP_ABS && c == PTC_BOOL) {
        r = xc;
    } else if (prim != PTC_OP_COUNT) {
        r = U(d, prim, xc);
    } else if (op == PTC_OP_ROUND) {
        const ptc_arg *dec = dp_arg(n, "decimals");
        if (!ptc_dim_is_static(dec->i))
            return dp_fail(d, PTC_ERR_UNSUPPORTED, "symbolic decimals");
        r = ptc_dtype_is_float(c) ? round_decimals(d, xc, dec->i.value) : xc;
    } else if (op == PTC_OP_RELU) {
        r = B(d, PTC_OP_PRIMS_MAXIMUM, xc, K(d, 0, xc));
    } else if (op == PTC_OP_HARDTANH) {
        const ptc_arg *lo = dp_arg(n, "min_val"), *hi = dp_arg(n, "max_val");
        ptc_value *vlo = dp_full_arg(d, xc->type.shape, xc->type.ndim, lo, c);
        ptc_value *vhi = dp_full_arg(d, xc->type.shape, xc->type.ndim, hi, c);
        ptc_value *v = dp_where(d, B(d, PTC_OP_PRIMS_LT, xc, vlo), vlo, xc);
        r = dp_where(d, B(d, PTC_OP_PRIMS_LT, vhi, v), vhi, v);
    } else {
        r = activation(d, n, xc);
        if (!r && !d->failed)
            return dp_fail(d, PTC_ERR_UNSUPPORTED, "no decomposition for this unary op");
    }
    outs[0] = dp_convert(d, r, out);
    return 0;
}

/* ---- binary ----------------------------------------------------------------------------- */

static ptc_op simple_binary(ptc_op op)
{
    switch (op) {
    case PTC_OP_MUL: return PTC_OP_PRIMS_MUL;
    case PTC_OP_POW: return PTC_OP_PRIMS_POW;
    case PTC_OP_REMAINDER: return PTC_OP_PRIMS_REMAINDER;
    case PTC_OP_MAXIMUM: return PTC_OP_PRIMS_MAXIMUM;
    case PTC_OP_MINIMUM: return PTC_OP_PRIMS_MINIMUM;
    case PTC_OP_ATAN2: return PTC_OP_PRIMS_ATAN2;
    case PTC_OP_EQ: return PTC_OP_PRIMS_EQ;
    case PTC_OP_NE: return PTC_OP_PRIMS_NE;
    case PTC_OP_LT: return PTC_OP_PRIMS_LT;
    case PTC_OP_LE: return PTC_OP_PRIMS_LE;
    case PTC_OP_GT: return PTC_OP_PRIMS_GT;
    case PTC_OP_GE: return PTC_OP_PRIMS_GE;
    case PTC_OP_BITWISE_AND: return PTC_OP_PRIMS_BITWISE_AND;
    case PTC_OP_BITWISE_OR: return PTC_OP_PRIMS_BITWISE_OR;
    case PTC_OP_BITWISE_XOR: return PTC_OP_PRIMS_BITWISE_XOR;
    default: return PTC_OP_COUNT;
    }
}

static bool is_compare(ptc_op op)
{
    return op == PTC_OP_EQ || op == PTC_OP_NE || op == PTC_OP_LT || op == PTC_OP_LE ||
           op == PTC_OP_GT || op == PTC_OP_GE;
}

/* alpha * v, skipped for alpha == 1 */
static ptc_value *scale_alpha(dctx *d, const ptc_node *n, ptc_value *v)
{
    const ptc_arg *alpha = dp_arg(n, "alpha");
    if (alpha->kind == PTC_ARG_INT && ptc_dim_is_static(alpha->i) && alpha->i.value == 1)
        return v;
    if (alpha->kind == PTC_ARG_FLOAT && alpha->f == 1.0)
        return v;
    if (alpha->kind == PTC_ARG_BOOL && alpha->b)
        return v;
    if (!v)
        return NULL;
    return B(d, PTC_OP_PRIMS_MUL, dp_full_arg(d, v->type.shape, v->type.ndim, alpha, v->type.dtype), v);
}

static int d_binary(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_op op = n->op;
    const ptc_ttype *ot = &n->outs[0]->type;
    ptc_dtype out = ot->dtype, c = dp_compute(out);
    const ptc_arg *sa = &n->args[0], *sb = &n->args[1];
    if (op == PTC_OP_LOGICAL_AND || op == PTC_OP_LOGICAL_OR || op == PTC_OP_LOGICAL_XOR) {
        ptc_value *a = dp_broadcast(d, dp_truth(d, d->map[sa->v->id]), ot->shape, ot->ndim);
        ptc_value *b = dp_broadcast(d, dp_truth(d, d->map[sb->v->id]), ot->shape, ot->ndim);
        ptc_op p = op == PTC_OP_LOGICAL_AND ? PTC_OP_PRIMS_BITWISE_AND
                   : op == PTC_OP_LOGICAL_OR ? PTC_OP_PRIMS_BITWISE_OR : PTC_OP_PRIMS_NE;
        outs[0] = B(d, p, a, b);
        return 0;
    }
    if (is_compare(op)) {
        const ptc_arg *args[2] = {sa, sb};
        c = ptc_result_type(args, 2);
    } else if (op == PTC_OP_BITWISE_AND || op == PTC_OP_BITWISE_OR || op == PTC_OP_BITWISE_XOR) {
        c = out;
    } else if (c == PTC_BOOL) {
        c = PTC_I64; /* bool arithmetic: in integers, nonzero is true (the reference's way) */
    }
    /* tensors are cast to the result dtype first (a 0-dim f64 operand of
     * an f16 op is rounded to f16), then computed in c; numbers go to c */
    ptc_value *a = dp_operand(d, sa, c, ot->shape, ot->ndim);
    ptc_value *b = dp_operand(d, sb, c, ot->shape, ot->ndim);
    if (c != out && !is_compare(op)) {
        if (sa->kind == PTC_ARG_VALUE)
            a = dp_convert(d, dp_broadcast(d, dp_convert(d, d->map[sa->v->id], out), ot->shape, ot->ndim), c);
        if (sb->kind == PTC_ARG_VALUE)
            b = dp_convert(d, dp_broadcast(d, dp_convert(d, d->map[sb->v->id], out), ot->shape, ot->ndim), c);
    }
    ptc_value *r;
    switch (op) {
    case PTC_OP_ADD: r = B(d, PTC_OP_PRIMS_ADD, a, scale_alpha(d, n, b)); break;
    case PTC_OP_SUB: r = B(d, PTC_OP_PRIMS_SUB, a, scale_alpha(d, n, b)); break;
    case PTC_OP_RSUB: r = B(d, PTC_OP_PRIMS_SUB, b, scale_alpha(d, n, a)); break;
    case PTC_OP_DIV: {
        const ptc_arg *rm = dp_arg(n, "rounding_mode");
        if (rm->kind == PTC_ARG_NONE)
            r = B(d, PTC_OP_PRIMS_DIV, a, b);
        else if (strcmp(rm->s, "floor") == 0)
            r = B(d, PTC_OP_PRIMS_FLOOR_DIVIDE, a, b);
        else if (strcmp(rm->s, "trunc") == 0)
            r = ptc_dtype_is_float(c) ? U(d, PTC_OP_PRIMS_TRUNC, B(d, PTC_OP_PRIMS_DIV, a, b))
                                      : B(d, PTC_OP_PRIMS_DIV, a, b);
        else
            return dp_fail(d, PTC_ERR_META, "rounding_mode must be None, 'trunc' or 'floor'");
        break;
    }
    default: {
        ptc_op p = simple_binary(op);
        if (p == PTC_OP_COUNT)
            return dp_fail(d, PTC_ERR_UNSUPPORTED, "no decomposition for this binary op");
        r = B(d, p, a, b);
        break;
    }
    }
    outs[0] = dp_convert(d, r, out);
    return 0;
}

/* ---- where, clamp, masked_fill, dropout, to ------------------------------------------------ */

static int d_where(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    ptc_value *c = dp_broadcast(d, dp_truth(d, dp_in(d, n, "condition")), ot->shape, ot->ndim);
    ptc_value *a = dp_operand(d, dp_arg(n, "self"), ot->dtype, ot->shape, ot->ndim);
    ptc_value *b = dp_operand(d, dp_arg(n, "other"), ot->dtype, ot->shape, ot->ndim);
    outs[0] = dp_where(d, c, a, b);
    return 0;
}

static int d_masked_fill(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    ptc_value *m = dp_broadcast(d, dp_truth(d, dp_in(d, n, "mask")), ot->shape, ot->ndim);
    ptc_value *x = dp_operand(d, dp_arg(n, "self"), ot->dtype, ot->shape, ot->ndim);
    ptc_value *v = dp_operand(d, dp_arg(n, "value"), ot->dtype, ot->shape, ot->ndim);
    outs[0] = dp_where(d, m, v, x);
    return 0;
}

/* torch.clamp: scalar bounds ignore a nan bound, tensor bounds propagate it;
 * min first, then max. */
static ptc_value *clamp_side(dctx *d, ptc_value *x, const ptc_arg *bound, bool lower, const ptc_ttype *ot)
{
    if (bound->kind == PTC_ARG_NONE || !x)
        return x;
    bool fl = ptc_dtype_is_float(ot->dtype);
    if (bound->kind != PTC_ARG_VALUE && fl && isnan(dp_scalar_f(bound)) && bound->kind == PTC_ARG_FLOAT)
        return x;
    ptc_value *b = dp_operand(d, bound, ot->dtype, ot->shape, ot->ndim);
    ptc_value *r = dp_where(d, lower ? B(d, PTC_OP_PRIMS_LT, x, b) : B(d, PTC_OP_PRIMS_GT, x, b), b, x);
    if (fl && bound->kind == PTC_ARG_VALUE)
        r = dp_where(d, U(d, PTC_OP_PRIMS_ISNAN, b), b, r);
    return r;
}

static int d_clamp(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    ptc_value *x = dp_operand(d, dp_arg(n, "self"), ot->dtype, ot->shape, ot->ndim);
    x = clamp_side(d, x, dp_arg(n, "min"), true, ot);
    outs[0] = clamp_side(d, x, dp_arg(n, "max"), false, ot);
    return 0;
}

/* Element i keeps iff (double)u_i < 1 - p with u the shared uniform draw
 * (prims.rand with `seed`, element i in x's row-major order), scaled by
 * 1/(1-p) computed exactly as the reference does. */
ptc_value *dp_dropout(dctx *d, ptc_value *x, double p, ptc_dim seed)
{
    if (!x)
        return NULL;
    const ptc_ttype *t = &x->type;
    ptc_arena *a = d->g->arena;
    ptc_arg rargs[4] = {ptc_arg_dims(a, t->shape, t->ndim), ptc_arg_dtype(PTC_F32),
                        ptc_arg_device(t->device), ptc_arg_dim(seed)};
    ptc_value *u = dp_build(d, PTC_OP_PRIMS_RAND, rargs, 4);
    ptc_value *u64 = dp_convert(d, u, PTC_F64);
    ptc_value *keep = B(d, PTC_OP_PRIMS_LT, u64, dp_full(d, t->shape, t->ndim, 1.0 - p, PTC_F64));
    ptc_dtype c = t->dtype == PTC_F64 ? PTC_F64 : PTC_F32;
    double s = c == PTC_F64 ? 1.0 / (1.0 - p) : (double)(1.0f / (float)(1.0 - p));
    ptc_value *scale = dp_where(d, keep, dp_full(d, t->shape, t->ndim, s, c),
                                dp_full(d, t->shape, t->ndim, 0, c));
    return dp_convert(d, B(d, PTC_OP_PRIMS_MUL, dp_convert(d, x, c), scale), t->dtype);
}

static int d_dropout(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "input");
    double p = dp_arg(n, "p")->f;
    if (p < 0 || p > 1)
        return dp_fail(d, PTC_ERR_META, "dropout probability has to be between 0 and 1, but got %g", p);
    if (!dp_arg(n, "train")->b || p == 0) {
        outs[0] = x;
        return 0;
    }
    outs[0] = dp_dropout(d, x, p, dp_arg(n, "seed")->i);
    return 0;
}

static int d_to(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_convert(d, dp_in(d, n, "self"), dp_out_dtype(n, 0));
    ptc_device dev = n->outs[0]->type.device;
    if (x && !ptc_device_eq(x->type.device, dev)) {
        ptc_arg args[2] = {ptc_arg_value(x), ptc_arg_device(dev)};
        x = dp_build(d, PTC_OP_PRIMS_DEVICE_PUT, args, 2);
    }
    outs[0] = x;
    return 0;
}

void ptc_decomp_pointwise(ptc_decomp_fn *fns)
{
    static const ptc_op unary[] = {
        PTC_OP_ABS, PTC_OP_NEG, PTC_OP_RELU, PTC_OP_FLOOR, PTC_OP_CEIL, PTC_OP_TRUNC,
        PTC_OP_SIGN, PTC_OP_ROUND, PTC_OP_HARDTANH, PTC_OP_EXP, PTC_OP_LOG, PTC_OP_LOG1P,
        PTC_OP_EXPM1, PTC_OP_SQRT, PTC_OP_RSQRT, PTC_OP_SIN, PTC_OP_COS, PTC_OP_TANH,
        PTC_OP_SIGMOID, PTC_OP_ERF, PTC_OP_RECIPROCAL, PTC_OP_GELU, PTC_OP_SILU,
        PTC_OP_HARDSWISH, PTC_OP_HARDSIGMOID, PTC_OP_LEAKY_RELU, PTC_OP_ELU, PTC_OP_SOFTPLUS,
        PTC_OP_LOGICAL_NOT, PTC_OP_ISNAN, PTC_OP_BITWISE_NOT};
    static const ptc_op binary[] = {
        PTC_OP_ADD, PTC_OP_SUB, PTC_OP_RSUB, PTC_OP_MUL, PTC_OP_DIV, PTC_OP_POW,
        PTC_OP_REMAINDER, PTC_OP_MAXIMUM, PTC_OP_MINIMUM, PTC_OP_ATAN2, PTC_OP_EQ, PTC_OP_NE,
        PTC_OP_LT, PTC_OP_LE, PTC_OP_GT, PTC_OP_GE, PTC_OP_LOGICAL_AND, PTC_OP_LOGICAL_OR,
        PTC_OP_LOGICAL_XOR, PTC_OP_BITWISE_AND, PTC_OP_BITWISE_OR, PTC_OP_BITWISE_XOR};
    for (size_t i = 0; i < sizeof unary / sizeof *unary; i++)
        fns[unary[i]] = d_unary;
    for (size_t i = 0; i < sizeof binary / sizeof *binary; i++)
        fns[binary[i]] = d_binary;
    fns[PTC_OP_WHERE] = d_where;
    fns[PTC_OP_CLAMP] = d_clamp;
    fns[PTC_OP_MASKED_FILL] = d_masked_fill;
    fns[PTC_OP_DROPOUT] = d_dropout;
    fns[PTC_OP_TO] = d_to;
}
