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

/* A row of pointwise.def as a case of a switch over ops: its `how` macro,
 * defined by the switch, says what the case does. */
#define ROW_CASE(id, name, params, meta, eager, how, bind, sig, ref)                               \
    case PTC_OP_##id:                                                                              \
        how

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

/* ---- unary: the formulas of pointwise.def's FORMULA(fn) rows --------------------------- */

static ptc_value *pw_abs(dctx *d, const ptc_node *n, ptc_value *x)
{
    if (dp_compute(dp_out_dtype(n, 0)) == PTC_BOOL)
        return x;
    return U(d, PTC_OP_PRIMS_ABS, x);
}

/* where(x <= 0, 0, x) rather than maximum(x, 0): torch's relu passes no
 * gradient at x == 0, where maximum's derivative splits it in half between
 * the tied operands (an activation that rounds to exactly 0 got half its
 * gradient); NaN stays NaN. */
static ptc_value *pw_relu(dctx *d, const ptc_node *n, ptc_value *x)
{
    ptc_value *zero = K(d, 0, x);
    return dp_where(d, B(d, PTC_OP_PRIMS_LE, x, zero), zero, x);
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

static ptc_value *pw_round(dctx *d, const ptc_node *n, ptc_value *x)
{
    const ptc_arg *dec = dp_arg(n, "decimals");
    if (!ptc_dim_is_static(dec->i)) {
        dp_fail(d, PTC_ERR_UNSUPPORTED, "symbolic decimals");
        return NULL;
    }
    if (!ptc_dtype_is_float(dp_compute(dp_out_dtype(n, 0))))
        return x;
    return round_decimals(d, x, dec->i.value);
}

static ptc_value *pw_hardtanh(dctx *d, const ptc_node *n, ptc_value *x)
{
    if (!x)
        return NULL;
    const ptc_arg *lo = dp_arg(n, "min_val"), *hi = dp_arg(n, "max_val");
    ptc_dtype c = x->type.dtype;
    ptc_value *vlo = dp_full_arg(d, x->type.shape, x->type.ndim, lo, c);
    ptc_value *vhi = dp_full_arg(d, x->type.shape, x->type.ndim, hi, c);
    ptc_value *v = dp_where(d, B(d, PTC_OP_PRIMS_LT, x, vlo), vlo, x);
    return dp_where(d, B(d, PTC_OP_PRIMS_LT, vhi, v), vhi, v);
}

static ptc_value *pw_sigmoid(dctx *d, const ptc_node *n, ptc_value *x)
{
    return U(d, PTC_OP_PRIMS_RECIPROCAL,
             B(d, PTC_OP_PRIMS_ADD, K(d, 1, x), U(d, PTC_OP_PRIMS_EXP, U(d, PTC_OP_PRIMS_NEG, x))));
}

/* tan(x) = sin(x) / cos(x): the prims' errors add, a few ulp. */
static ptc_value *pw_tan(dctx *d, const ptc_node *n, ptc_value *x)
{
    return B(d, PTC_OP_PRIMS_DIV, U(d, PTC_OP_PRIMS_SIN, x), U(d, PTC_OP_PRIMS_COS, x));
}

/* sqrt(1 - x^2) as sqrt((1 - x)(1 + x)): 1 - x is exact near |x| = 1, where
 * 1 - x*x cancels; NaN for |x| > 1, which asin and acos pass on. */
static ptc_value *cos_of_asin(dctx *d, ptc_value *x)
{
    ptc_value *one = K(d, 1, x);
    return U(d, PTC_OP_PRIMS_SQRT, B(d, PTC_OP_PRIMS_MUL, B(d, PTC_OP_PRIMS_SUB, one, x),
                                     B(d, PTC_OP_PRIMS_ADD, one, x)));
}

/* asin(x) = atan2(x, sqrt(1 - x^2)), acos(x) = atan2(sqrt(1 - x^2), x): the
 * angle's quadrant and signed zeros come from atan2, acos(-1) = pi. */
static ptc_value *pw_asin(dctx *d, const ptc_node *n, ptc_value *x)
{
    return B(d, PTC_OP_PRIMS_ATAN2, x, cos_of_asin(d, x));
}

static ptc_value *pw_acos(dctx *d, const ptc_node *n, ptc_value *x)
{
    return B(d, PTC_OP_PRIMS_ATAN2, cos_of_asin(d, x), x);
}

/* sinh and cosh of x from s = sinh(x/2) and c = cosh(x/2), built on
 * a = expm1(x/2), b = expm1(-x/2): s = (a - b) / 2 keeps sinh's precision
 * near 0 (exp(x) - exp(-x) cancels), c = (a + b) / 2 + 1, and halving x keeps
 * every factor finite wherever the result is (exp(x) overflows below sinh's
 * and cosh's limit). sinh(x) = 2 s c, cosh(x) = c^2 + s^2, a sum of squares. */
static ptc_value *cosh_half(dctx *d, ptc_value *x, ptc_value **a_minus_b)
{
    ptc_value *half = K(d, 0.5, x), *y = B(d, PTC_OP_PRIMS_MUL, x, half);
    ptc_value *a = U(d, PTC_OP_PRIMS_EXPM1, y), *b = U(d, PTC_OP_PRIMS_EXPM1, U(d, PTC_OP_PRIMS_NEG, y));
    *a_minus_b = B(d, PTC_OP_PRIMS_SUB, a, b);
    return B(d, PTC_OP_PRIMS_ADD, B(d, PTC_OP_PRIMS_MUL, B(d, PTC_OP_PRIMS_ADD, a, b), half), K(d, 1, x));
}

static ptc_value *pw_sinh(dctx *d, const ptc_node *n, ptc_value *x)
{
    ptc_value *two_s, *c = cosh_half(d, x, &two_s);
    return B(d, PTC_OP_PRIMS_MUL, two_s, c);
}

static ptc_value *pw_cosh(dctx *d, const ptc_node *n, ptc_value *x)
{
    ptc_value *two_s, *c = cosh_half(d, x, &two_s);
    ptc_value *s = B(d, PTC_OP_PRIMS_MUL, two_s, K(d, 0.5, x));
    return B(d, PTC_OP_PRIMS_ADD, B(d, PTC_OP_PRIMS_MUL, c, c), B(d, PTC_OP_PRIMS_MUL, s, s));
}

/* log(x / (1 - x)), x first clamped to [eps, 1 - eps] when eps >= 0 is given;
 * the bounds are in the output dtype, as aten's kernel has them. */
static ptc_value *pw_logit(dctx *d, const ptc_node *n, ptc_value *x)
{
    const ptc_arg *e = dp_arg(n, "eps");
    double eps = e->kind == PTC_ARG_NONE ? -1 : dp_scalar_f(e);
    if (x && eps >= 0) {
        ptc_dtype out = dp_out_dtype(n, 0);
        double lo = ptc_dtype_round(eps, out);
        x = stdmin(d, stdmax(d, x, lo), ptc_dtype_round(1.0 - lo, out));
    }
    return U(d, PTC_OP_PRIMS_LOG, B(d, PTC_OP_PRIMS_DIV, x, B(d, PTC_OP_PRIMS_SUB, K(d, 1, x), x)));
}

/* frac(x) = x - trunc(x), as torch: exact in every float dtype. */
static ptc_value *pw_frac(dctx *d, const ptc_node *n, ptc_value *x)
{
    return B(d, PTC_OP_PRIMS_SUB, x, U(d, PTC_OP_PRIMS_TRUNC, x));
}

static ptc_value *pw_silu(dctx *d, const ptc_node *n, ptc_value *x)
{
    return B(d, PTC_OP_PRIMS_DIV, x,
             B(d, PTC_OP_PRIMS_ADD, K(d, 1, x), U(d, PTC_OP_PRIMS_EXP, U(d, PTC_OP_PRIMS_NEG, x))));
}

static ptc_value *pw_gelu(dctx *d, const ptc_node *n, ptc_value *x)
{
    if (strcmp(dp_arg(n, "approximate")->s, "tanh") == 0) {
        ptc_value *x3 =
            B(d, PTC_OP_PRIMS_MUL,
              B(d, PTC_OP_PRIMS_MUL, B(d, PTC_OP_PRIMS_MUL, K(d, 0.044715, x), x), x), x);
        ptc_value *inner =
            B(d, PTC_OP_PRIMS_MUL, K(d, 0.7978845608028654, x), B(d, PTC_OP_PRIMS_ADD, x, x3));
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
}

static ptc_value *pw_hardswish(dctx *d, const ptc_node *n, ptc_value *x)
{
    return B(d, PTC_OP_PRIMS_DIV,
             B(d, PTC_OP_PRIMS_MUL, x,
               stdmin(d, stdmax(d, B(d, PTC_OP_PRIMS_ADD, x, K(d, 3, x)), 0), 6)),
             K(d, 6, x));
}

static ptc_value *pw_hardsigmoid(dctx *d, const ptc_node *n, ptc_value *x)
{
    return B(d, PTC_OP_PRIMS_DIV, stdmin(d, stdmax(d, B(d, PTC_OP_PRIMS_ADD, x, K(d, 3, x)), 0), 6),
             K(d, 6, x));
}

static ptc_value *pw_leaky_relu(dctx *d, const ptc_node *n, ptc_value *x)
{
    double s = dp_scalar_f(dp_arg(n, "negative_slope"));
    return dp_where(d, B(d, PTC_OP_PRIMS_GT, x, K(d, 0, x)), x,
                    B(d, PTC_OP_PRIMS_MUL, x, K(d, s, x)));
}

static ptc_value *pw_elu(dctx *d, const ptc_node *n, ptc_value *x)
{
    double alpha = dp_scalar_f(dp_arg(n, "alpha")), scale = dp_scalar_f(dp_arg(n, "scale")),
           is = dp_scalar_f(dp_arg(n, "input_scale"));
    ptc_value *neg =
        B(d, PTC_OP_PRIMS_MUL,
          B(d, PTC_OP_PRIMS_MUL, U(d, PTC_OP_PRIMS_EXPM1, B(d, PTC_OP_PRIMS_MUL, x, K(d, is, x))),
            K(d, alpha, x)),
          K(d, scale, x));
    return dp_where(d, B(d, PTC_OP_PRIMS_LE, x, K(d, 0, x)), neg,
                    B(d, PTC_OP_PRIMS_MUL, x, K(d, scale, x)));
}

static ptc_value *pw_softplus(dctx *d, const ptc_node *n, ptc_value *x)
{
    double beta = dp_scalar_f(dp_arg(n, "beta")), th = dp_scalar_f(dp_arg(n, "threshold"));
    ptc_value *xb = B(d, PTC_OP_PRIMS_MUL, x, K(d, beta, x));
    ptc_value *soft =
        B(d, PTC_OP_PRIMS_DIV, U(d, PTC_OP_PRIMS_LOG1P, U(d, PTC_OP_PRIMS_EXP, xb)), K(d, beta, x));
    return dp_where(d, B(d, PTC_OP_PRIMS_GT, xb, K(d, th, x)), x, soft);
}

/* ---- unary ops: pointwise.def's PW_UNARY rows ------------------------------------------- */

/* n's op on x, which is in the computation dtype. */
static ptc_value *unary_body(dctx *d, const ptc_node *n, ptc_value *x)
{
    switch (n->op) {
#define AS(p) return U(d, PTC_OP_##p, x);
#define FORMULA(fn) return fn(d, n, x);
#define RAW(p) break;
#define PW_UNARY ROW_CASE
#include "ir/pointwise.def"
    default:
        break;
    }
    dp_fail(d, PTC_ERR_UNSUPPORTED, "no decomposition for this unary op");
    return NULL;
}

/* The input converted to the computation dtype, the op, the result rounded
 * to the output dtype. */
static int d_unary(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_dtype out = dp_out_dtype(n, 0);
    ptc_value *r = unary_body(d, n, dp_convert(d, dp_in(d, n, "self"), dp_compute(out)));
    outs[0] = dp_convert(d, r, out);
    return d->failed ? -1 : 0;
}

/* A predicate (RAW rows): the prim on the input as it is. */
static int d_unary_raw(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    outs[0] = NULL;
    switch (n->op) {
#define RAW(p)                                                                                     \
    outs[0] = U(d, PTC_OP_##p, x);                                                                 \
    break;
#define AS(p) break;
#define FORMULA(fn) break;
#define PW_UNARY ROW_CASE
#include "ir/pointwise.def"
    default:
        break;
    }
    if (!outs[0] && !d->failed)
        return dp_fail(d, PTC_ERR_UNSUPPORTED, "not a predicate");
    return d->failed ? -1 : 0;
}

/* ---- binary: the formulas of pointwise.def's FORMULA(fn) rows -------------------------- */

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

static ptc_value *pw_add(dctx *d, const ptc_node *n, ptc_value *a, ptc_value *b)
{
    return B(d, PTC_OP_PRIMS_ADD, a, scale_alpha(d, n, b));
}

static ptc_value *pw_sub(dctx *d, const ptc_node *n, ptc_value *a, ptc_value *b)
{
    return B(d, PTC_OP_PRIMS_SUB, a, scale_alpha(d, n, b));
}

static ptc_value *pw_rsub(dctx *d, const ptc_node *n, ptc_value *a, ptc_value *b)
{
    return B(d, PTC_OP_PRIMS_SUB, b, scale_alpha(d, n, a));
}

static ptc_value *pw_div(dctx *d, const ptc_node *n, ptc_value *a, ptc_value *b)
{
    const ptc_arg *rm = dp_arg(n, "rounding_mode");
    if (rm->kind == PTC_ARG_NONE)
        return B(d, PTC_OP_PRIMS_DIV, a, b);
    if (strcmp(rm->s, "floor") == 0)
        return B(d, PTC_OP_PRIMS_FLOOR_DIVIDE, a, b);
    if (strcmp(rm->s, "trunc") == 0)
        return a && ptc_dtype_is_float(a->type.dtype)
                   ? U(d, PTC_OP_PRIMS_TRUNC, B(d, PTC_OP_PRIMS_DIV, a, b))
                   : B(d, PTC_OP_PRIMS_DIV, a, b);
    dp_fail(d, PTC_ERR_META, "rounding_mode must be None, 'trunc' or 'floor'");
    return NULL;
}

/* logaddexp(a, b) = max(a, b) + log1p(exp(-|a - b|)), as aten computes it;
 * where a == b is an infinity the result is a (the formula's inf - inf is nan). */
static ptc_value *pw_logaddexp(dctx *d, const ptc_node *n, ptc_value *a, ptc_value *b)
{
    ptc_value *shift = U(d, PTC_OP_PRIMS_NEG, U(d, PTC_OP_PRIMS_ABS, B(d, PTC_OP_PRIMS_SUB, a, b)));
    ptc_value *sum = B(d, PTC_OP_PRIMS_ADD, B(d, PTC_OP_PRIMS_MAXIMUM, a, b),
                       U(d, PTC_OP_PRIMS_LOG1P, U(d, PTC_OP_PRIMS_EXP, shift)));
    ptc_value *same_inf = B(d, PTC_OP_PRIMS_BITWISE_AND, B(d, PTC_OP_PRIMS_EQ, a, b),
                            B(d, PTC_OP_PRIMS_EQ, U(d, PTC_OP_PRIMS_ABS, a), K(d, INFINITY, a)));
    return dp_where(d, same_inf, a, sum);
}

/* ---- binary ops: pointwise.def's PW_BINARY rows ----------------------------------------- */

/* n's op on operands converted to its computation dtype. */
static ptc_value *binary_body(dctx *d, const ptc_node *n, ptc_value *a, ptc_value *b)
{
    switch (n->op) {
#define AS(p) return B(d, PTC_OP_##p, a, b);
#define COMPARE(p) AS(p)
#define BITWISE(p) AS(p)
#define LOGICAL(p) break;
#define FORMULA(fn) return fn(d, n, a, b);
#define PW_BINARY ROW_CASE
#include "ir/pointwise.def"
    default:
        break;
    }
    dp_fail(d, PTC_ERR_UNSUPPORTED, "no decomposition for this binary op");
    return NULL;
}

/* How a row's computation dtype is chosen. */
enum { BY_RESULT, BY_COMPARE, BY_OUTPUT };

static int compute_rule(ptc_op op)
{
    switch (op) {
#define AS(p) return BY_RESULT;
#define FORMULA(fn) return BY_RESULT;
#define LOGICAL(p) return BY_RESULT;
#define COMPARE(p) return BY_COMPARE;
#define BITWISE(p) return BY_OUTPUT;
#define PW_BINARY ROW_CASE
#include "ir/pointwise.def"
    default:
        return BY_RESULT;
    }
}

static int d_binary(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    ptc_dtype out = ot->dtype, c = dp_compute(out);
    const ptc_arg *sa = &n->args[0], *sb = &n->args[1];
    int rule = compute_rule(n->op);
    if (rule == BY_COMPARE) {
        const ptc_arg *args[2] = {sa, sb};
        c = ptc_result_type(args, 2);
    } else if (rule == BY_OUTPUT) {
        c = out;
    } else if (c == PTC_BOOL) {
        c = PTC_I64; /* bool arithmetic: in integers, nonzero is true (the reference's way) */
    }
    /* tensors are cast to the result dtype first (a 0-dim f64 operand of
     * an f16 op is rounded to f16), then computed in c; numbers go to c */
    ptc_value *a = dp_operand(d, sa, c, ot->shape, ot->ndim);
    ptc_value *b = dp_operand(d, sb, c, ot->shape, ot->ndim);
    if (c != out && rule != BY_COMPARE) {
        if (sa->kind == PTC_ARG_VALUE)
            a = dp_convert(d, dp_broadcast(d, dp_convert(d, d->map[sa->v->id], out), ot->shape, ot->ndim), c);
        if (sb->kind == PTC_ARG_VALUE)
            b = dp_convert(d, dp_broadcast(d, dp_convert(d, d->map[sb->v->id], out), ot->shape, ot->ndim), c);
    }
    outs[0] = dp_convert(d, binary_body(d, n, a, b), out);
    return d->failed ? -1 : 0;
}

/* LOGICAL rows: the prim on both operands' truth values. */
static int d_logical(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    ptc_value *a = dp_broadcast(d, dp_truth(d, d->map[n->args[0].v->id]), ot->shape, ot->ndim);
    ptc_value *b = dp_broadcast(d, dp_truth(d, d->map[n->args[1].v->id]), ot->shape, ot->ndim);
    outs[0] = NULL;
    switch (n->op) {
#define LOGICAL(p)                                                                                 \
    outs[0] = B(d, PTC_OP_##p, a, b);                                                              \
    break;
#define AS(p) break;
#define COMPARE(p) break;
#define BITWISE(p) break;
#define FORMULA(fn) break;
#define PW_BINARY ROW_CASE
#include "ir/pointwise.def"
    default:
        break;
    }
    if (!outs[0] && !d->failed)
        return dp_fail(d, PTC_ERR_UNSUPPORTED, "not a logical op");
    return d->failed ? -1 : 0;
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

/* Every row of pointwise.def gets the driver its `how` names. */
void ptc_decomp_pointwise(ptc_decomp_fn *fns)
{
#define AS(p) d_unary
#define FORMULA(fn) d_unary
#define RAW(p) d_unary_raw
#define PW_UNARY(id, name, params, meta, eager, how, bind, sig, ref) fns[PTC_OP_##id] = how;
#include "ir/pointwise.def"
#define AS(p) d_binary
#define COMPARE(p) d_binary
#define BITWISE(p) d_binary
#define FORMULA(fn) d_binary
#define LOGICAL(p) d_logical
#define PW_BINARY(id, name, params, meta, eager, how, bind, sig, ref) fns[PTC_OP_##id] = how;
#include "ir/pointwise.def"
    fns[PTC_OP_WHERE] = d_where;
    fns[PTC_OP_CLAMP] = d_clamp;
    fns[PTC_OP_MASKED_FILL] = d_masked_fill;
    fns[PTC_OP_DROPOUT] = d_dropout;
    fns[PTC_OP_TO] = d_to;
}
