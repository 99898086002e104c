/* The derivative rules of derivs.def, written as prims.
 *
 * A rule d_<name>(a, n, gout) reads the forward node n (its inputs are values
 * of the joint graph, so a rule may reuse forward results such as exp's
 * output) and the gradients of n's outputs, and adds each input's gradient
 * with ag_accum. Prims' binary operands already share shape and dtype
 * (decomposition made broadcasting and promotion explicit), which keeps most
 * rules one line. Formulas follow torch's derivatives.yaml, including its
 * choices at ties and at zero (maximum splits a tie's gradient in halves,
 * pow's gradients are zero where torch makes them zero).
 */
#include "ag.h"

#include <math.h>

#define X ag_in(n, 0)
#define Y ag_in(n, 1)
#define OUT (n->outs[0])
#define G (gout[0])
#define MUL(p, q) ag_binary(a, PTC_OP_PRIMS_MUL, p, q)
#define DIV(p, q) ag_binary(a, PTC_OP_PRIMS_DIV, p, q)
#define ADD(p, q) ag_binary(a, PTC_OP_PRIMS_ADD, p, q)
#define SUB(p, q) ag_binary(a, PTC_OP_PRIMS_SUB, p, q)
#define NEG(p) ag_unary(a, PTC_OP_PRIMS_NEG, p)
#define ZEROS(like) ag_full_like(a, like, 0.0)
#define ONES(like) ag_full_like(a, like, 1.0)

static int done(ag *a)
{
    return a->failed ? -1 : 0;
}

/* ---- unary pointwise ------------------------------------------------------------- */

static int d_abs(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, MUL(G, ag_unary(a, PTC_OP_PRIMS_SIGN, X)));
    return done(a);
}

static int d_neg(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, NEG(G));
    return done(a);
}

static int d_exp(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, MUL(G, OUT));
    return done(a);
}

static int d_log(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, DIV(G, X));
    return done(a);
}

static int d_log1p(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, DIV(G, ADD(X, ONES(X))));
    return done(a);
}

static int d_expm1(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, MUL(G, ADD(OUT, ONES(OUT))));
    return done(a);
}

static int d_sqrt(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, DIV(G, ag_scale(a, OUT, 2.0)));
    return done(a);
}

/* d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 out^3 */
static int d_rsqrt(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, MUL(G, ag_scale(a, MUL(OUT, MUL(OUT, OUT)), -0.5)));
    return done(a);
}

static int d_sin(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, MUL(G, ag_unary(a, PTC_OP_PRIMS_COS, X)));
    return done(a);
}

static int d_cos(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, NEG(MUL(G, ag_unary(a, PTC_OP_PRIMS_SIN, X))));
    return done(a);
}

static int d_tanh(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, MUL(G, SUB(ONES(OUT), MUL(OUT, OUT))));
    return done(a);
}

/* d/dx erf(x) = 2/sqrt(pi) exp(-x^2) */
static int d_erf(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_value *e = ag_unary(a, PTC_OP_PRIMS_EXP, NEG(MUL(X, X)));
    ag_accum(a, X, MUL(G, ag_scale(a, e, 2.0 / sqrt(M_PI))));
    return done(a);
}

static int d_reciprocal(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, NEG(MUL(G, MUL(OUT, OUT))));
    return done(a);
}

/* ---- binary pointwise ------------------------------------------------------------ */

static int d_add(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, G);
    ag_accum(a, Y, G);
    return done(a);
}

static int d_sub(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, G);
    if (ag_needs(a, Y))
        ag_accum(a, Y, NEG(G));
    return done(a);
}

static int d_mul(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    if (ag_needs(a, X))
        ag_accum(a, X, MUL(G, Y));
    if (ag_needs(a, Y))
        ag_accum(a, Y, MUL(G, X));
    return done(a);
}

/* out = x / y: d/dy = -x / y^2 = -out / y */
static int d_div(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    if (ag_needs(a, X))
        ag_accum(a, X, DIV(G, Y));
    if (ag_needs(a, Y))
        ag_accum(a, Y, NEG(DIV(MUL(G, OUT), Y)));
    return done(a);
}

/* out = x - floor(x / y) * y */
static int d_remainder(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, G);
    if (ag_needs(a, Y))
        ag_accum(a, Y, NEG(MUL(G, ag_binary(a, PTC_OP_PRIMS_FLOOR_DIVIDE, X, Y))));
    return done(a);
}

/* out = x - trunc(x / y) * y */
static int d_fmod(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, G);
    if (ag_needs(a, Y))
        ag_accum(a, Y, NEG(MUL(G, ag_unary(a, PTC_OP_PRIMS_TRUNC, DIV(X, Y)))));
    return done(a);
}

static ptc_value *cmp(ag *a, ptc_op op, ptc_value *p, ptc_value *q)
{
    return ag_binary(a, op, p, q);
}

/* torch: base where(y == 0, 0, g * y * x^(y-1)); exponent where(x == 0 & y >= 0, 0,
 * g * out * log(x)). */
static int d_pow(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    if (ag_needs(a, X)) {
        ptc_value *xpow = ag_binary(a, PTC_OP_PRIMS_POW, X, SUB(Y, ONES(Y)));
        ptc_value *gx = MUL(G, MUL(Y, xpow));
        ag_accum(a, X, ag_where(a, cmp(a, PTC_OP_PRIMS_EQ, Y, ZEROS(Y)), ZEROS(X), gx));
    }
    if (ag_needs(a, Y)) {
        ptc_value *gy = MUL(G, MUL(OUT, ag_unary(a, PTC_OP_PRIMS_LOG, X)));
        ptc_value *zero_base =
            ag_binary(a, PTC_OP_PRIMS_BITWISE_AND, cmp(a, PTC_OP_PRIMS_EQ, X, ZEROS(X)),
                      cmp(a, PTC_OP_PRIMS_GE, Y, ZEROS(Y)));
        ag_accum(a, Y, ag_where(a, zero_base, ZEROS(Y), gy));
    }
    return done(a);
}

/* maximum/minimum: the winner takes the gradient, a tie gives each half. */
static int d_extremum(ag *a, const ptc_node *n, ptc_value *const *gout, ptc_op wins)
{
    ptc_value *half = ag_scale(a, G, 0.5), *zero = ZEROS(G);
    ptc_value *tie = cmp(a, PTC_OP_PRIMS_EQ, X, Y);
    if (ag_needs(a, X))
        ag_accum(a, X, ag_where(a, tie, half, ag_where(a, cmp(a, wins, X, Y), G, zero)));
    if (ag_needs(a, Y))
        ag_accum(a, Y, ag_where(a, tie, half, ag_where(a, cmp(a, wins, Y, X), G, zero)));
    return done(a);
}

static int d_maximum(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    return d_extremum(a, n, gout, PTC_OP_PRIMS_GT);
}

static int d_minimum(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    return d_extremum(a, n, gout, PTC_OP_PRIMS_LT);
}

/* atan2(x, y): d/dx = y / (x^2 + y^2), d/dy = -x / (x^2 + y^2) */
static int d_atan2(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_value *scaled = DIV(G, ADD(MUL(X, X), MUL(Y, Y)));
    if (ag_needs(a, X))
        ag_accum(a, X, MUL(scaled, Y));
    if (ag_needs(a, Y))
        ag_accum(a, Y, NEG(MUL(scaled, X)));
    return done(a);
}

/* copysign(x, y) is |x| with y's sign: d/dx = out / x, +-1, and 0 where x is 0
 * (torch's copysign_tensor_self_backward: an infinite or nan x gives nan);
 * nothing flows to y, whose gradient is zero where it is needed. */
static int d_copysign(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    if (ag_needs(a, X)) {
        ptc_value *zero = ZEROS(X);
        ptc_value *ratio = ag_where(a, cmp(a, PTC_OP_PRIMS_EQ, X, zero), zero, DIV(OUT, X));
        ag_accum(a, X, MUL(G, ratio));
    }
    return done(a);
}

static int d_where(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_value *pred = ag_in(n, 0), *x = ag_in(n, 1), *y = ag_in(n, 2), *zero = ZEROS(G);
    if (ag_needs(a, x))
        ag_accum(a, x, ag_where(a, pred, G, zero));
    if (ag_needs(a, y))
        ag_accum(a, y, ag_where(a, pred, zero, G));
    return done(a);
}

/* ---- conversions and views ------------------------------------------------------- */

static int d_convert(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, ag_convert(a, G, X->type.dtype));
    return done(a);
}

static int d_device_put(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_arg args[2] = {{.kind = PTC_ARG_VALUE, .v = G},
                       {.kind = PTC_ARG_DEVICE, .dev = X->type.device}};
    ag_accum(a, X, ag_build(a, PTC_OP_PRIMS_DEVICE_PUT, args, 2));
    return done(a);
}

/* Sum over the dims broadcasting created or stretched, then the input's shape. */
static int d_broadcast_in_dim(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    const ptc_arg *bdims = &n->args[2];
    bool mask[PTC_MAX_DIMS] = {0};
    for (int d = 0; d < OUT->type.ndim; d++)
        mask[d] = true;
    for (int k = 0; k < bdims->is.n; k++) {
        int d = (int)bdims->is.d[k].value;
        mask[d] = ptc_dim_eq(X->type.shape[k], ptc_dim_c(1)) &&
                  !ptc_dim_eq(OUT->type.shape[d], ptc_dim_c(1));
    }
    ag_accum(a, X, ag_reshape(a, ag_sum(a, G, mask), X->type.shape, X->type.ndim));
    return done(a);
}

static int d_reshape(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, ag_reshape(a, G, X->type.shape, X->type.ndim));
    return done(a);
}

/* Whether perm swaps the last two of n dimensions and keeps the rest. */
static bool swaps_last_two(const int *perm, int n)
{
    for (int i = 0; i < n; i++)
        if (perm[i] != (i < n - 2 ? i : 2 * n - 3 - i))
            return false;
    return n >= 2;
}

/* g transposed by perm. A gradient that is a matrix product A B (the
 * gradient of a Linear layer's W^T) is built as B^T A^T instead: the
 * product then lands in W's own layout, where transposing it took a copy
 * kernel per weight, and the operands' transposes are views the extern
 * reads in place. g's own product is then dead, unless another rule was
 * handed the same gradient (both operands of an add are), which keeps it. */
static ptc_value *transpose_grad(ag *a, ptc_value *g, const int *perm)
{
    const ptc_node *d = g ? g->def : NULL;
    bool product = d && ((d->op == PTC_OP_MM && g->type.ndim == 2) ||
                         (d->op == PTC_OP_BMM && g->type.ndim == 3));
    if (!product || !swaps_last_two(perm, g->type.ndim))
        return ag_permute(a, g, perm);
    return ag_binary(a, d->op, ag_permute(a, ag_in(d, 1), perm), ag_permute(a, ag_in(d, 0), perm));
}

static int d_permute(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    const ptc_arg *perm = &n->args[1];
    int inverse[PTC_MAX_DIMS];
    for (int i = 0; i < perm->is.n; i++)
        inverse[perm->is.d[i].value] = i;
    ag_accum(a, X, transpose_grad(a, G, inverse));
    return done(a);
}

static ptc_value *pad(ag *a, ptc_value *x, const ptc_dim *config, int n)
{
    ptc_arg args[3] = {{.kind = PTC_ARG_VALUE, .v = x},
                       {.kind = PTC_ARG_FLOAT, .f = 0.0},
                       {.kind = PTC_ARG_INTS, .is = {n, (ptc_dim *)config}}};
    return ag_build(a, PTC_OP_PRIMS_PAD, args, 3);
}

static ptc_value *slice(ag *a, ptc_value *x, const ptc_dim *start, const ptc_dim *limit,
                        const ptc_dim *step)
{
    int nd = x ? x->type.ndim : 0;
    ptc_arg args[4] = {{.kind = PTC_ARG_VALUE, .v = x},
                       {.kind = PTC_ARG_INTS, .is = {nd, (ptc_dim *)start}},
                       {.kind = PTC_ARG_INTS, .is = {nd, (ptc_dim *)limit}},
                       {.kind = PTC_ARG_INTS, .is = {nd, (ptc_dim *)step}}};
    return ag_build(a, PTC_OP_PRIMS_SLICE, args, 4);
}

/* The gradient of a slice is the slice's gradient padded back into place:
 * `start` before, step-1 between neighbours, the rest after. */
static int d_slice(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_arena *ar = a->g->arena;
    const ptc_arg *start = &n->args[1], *steps = &n->args[3];
    ptc_dim config[3 * PTC_MAX_DIMS];
    for (int d = 0; d < X->type.ndim; d++) {
        ptc_dim size = X->type.shape[d], taken = OUT->type.shape[d];
        ptc_dim step = steps->is.n ? steps->is.d[d] : ptc_dim_c(1);
        if (ptc_dim_eq(taken, ptc_dim_c(0))) {
            ag_accum(a, X, ZEROS(X));
            return done(a);
        }
        /* the last element taken sits at start + (taken-1)*step */
        ptc_dim last = ptc_dim_add(ar, start->is.d[d],
                                   ptc_dim_mul(ar, ptc_dim_sub(ar, taken, ptc_dim_c(1)), step));
        config[3 * d] = start->is.d[d];
        config[3 * d + 1] = ptc_dim_sub(ar, ptc_dim_sub(ar, size, last), ptc_dim_c(1));
        config[3 * d + 2] = ptc_dim_sub(ar, step, ptc_dim_c(1));
    }
    ag_accum(a, X, pad(a, G, config, 3 * X->type.ndim));
    return done(a);
}

/* The gradient of a pad is the pad's gradient at the input's places. */
static int d_pad(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_arena *ar = a->g->arena;
    const ptc_arg *config = &n->args[2];
    ptc_dim start[PTC_MAX_DIMS], limit[PTC_MAX_DIMS], step[PTC_MAX_DIMS];
    for (int d = 0; d < X->type.ndim; d++) {
        ptc_dim lo = config->is.d[3 * d], hi = config->is.d[3 * d + 1];
        if (!ptc_dim_nonneg(lo) || !ptc_dim_nonneg(hi))
            return ag_fail(a,
                           "pad (node %d) crops (negative padding): its derivative is not "
                           "written yet",
                           n->id);
        step[d] = ptc_dim_add(ar, config->is.d[3 * d + 2], ptc_dim_c(1));
        start[d] = lo;
        limit[d] = ptc_dim_sub(ar, OUT->type.shape[d], hi);
    }
    ag_accum(a, X, slice(a, G, start, limit, step));
    return done(a);
}

static int d_cat(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_arena *ar = a->g->arena;
    const ptc_arg *parts = &n->args[0];
    int dim = (int)n->args[1].i.value, nd = OUT->type.ndim;
    ptc_dim start[PTC_MAX_DIMS], limit[PTC_MAX_DIMS], step[PTC_MAX_DIMS], offset = ptc_dim_c(0);
    for (int d = 0; d < nd; d++) {
        start[d] = ptc_dim_c(0);
        limit[d] = OUT->type.shape[d];
        step[d] = ptc_dim_c(1);
    }
    for (int k = 0; k < parts->vs.n; k++) {
        ptc_value *part = parts->vs.v[k];
        ptc_dim end = ptc_dim_add(ar, offset, part->type.shape[dim]);
        if (ag_needs(a, part)) {
            start[dim] = offset;
            limit[dim] = end;
            ag_accum(a, part, slice(a, G, start, limit, step));
        }
        offset = end;
    }
    return done(a);
}

/* ---- reductions, scans, indexing ------------------------------------------------- */

static void dims_mask(const ptc_arg *dims, bool *mask)
{
    for (int d = 0; d < PTC_MAX_DIMS; d++)
        mask[d] = false;
    for (int k = 0; k < dims->is.n; k++)
        mask[dims->is.d[k].value] = true;
}

static int d_sum(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    bool mask[PTC_MAX_DIMS];
    dims_mask(&n->args[1], mask);
    ag_accum(a, X, ag_unreduce(a, G, X, mask));
    return done(a);
}

/* amax/amin: the gradient is shared evenly by the elements equal to the result. */
static int d_amax_amin(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    bool mask[PTC_MAX_DIMS];
    dims_mask(&n->args[1], mask);
    ptc_value *hit =
        ag_convert(a, cmp(a, PTC_OP_PRIMS_EQ, X, ag_unreduce(a, OUT, X, mask)), X->type.dtype);
    ptc_value *share = DIV(G, ag_sum(a, hit, mask));
    ag_accum(a, X, MUL(hit, ag_unreduce(a, share, X, mask)));
    return done(a);
}

/* var_mean -> (var, mean) over N elements: d mean/dx = 1/N,
 * d var/dx = 2 (x - mean) / (N - correction). */
static int d_var_mean(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_arena *ar = a->g->arena;
    bool mask[PTC_MAX_DIMS];
    dims_mask(&n->args[1], mask);
    ptc_dim count = ptc_dim_c(1);
    for (int d = 0; d < X->type.ndim; d++)
        if (mask[d])
            count = ptc_dim_mul(ar, count, X->type.shape[d]);
    ptc_value *grad = NULL, *gvar = gout[0], *gmean = gout[1];
    if (gmean)
        grad = DIV(ag_unreduce(a, gmean, X, mask), ag_full_dim(a, X, count));
    if (gvar) {
        ptc_value *centred = SUB(X, ag_unreduce(a, n->outs[1], X, mask));
        ptc_value *denom = SUB(ag_full_dim(a, X, count), ag_full_like(a, X, n->args[2].f));
        ptc_value *gv = DIV(ag_scale(a, MUL(ag_unreduce(a, gvar, X, mask), centred), 2.0), denom);
        grad = grad ? ADD(grad, gv) : gv;
    }
    ag_accum(a, X, grad);
    return done(a);
}

static ptc_value *scatter_add(ag *a, ptc_value *into, ptc_arg dim, ptc_value *index,
                              ptc_value *src);

/* g's cumulative sum along dim reversed (from the end): total - cumsum(g) + g. */
static ptc_value *reversed_cumsum(ag *a, ptc_value *g, ptc_arg dim)
{
    bool mask[PTC_MAX_DIMS] = {0};
    mask[dim.i.value] = true;
    ptc_arg args[2] = {ptc_arg_value(g), dim};
    ptc_value *running = ag_build(a, PTC_OP_PRIMS_CUMSUM, args, 2);
    ptc_value *total = ag_unreduce(a, ag_sum(a, g, mask), g, mask);
    return ADD(SUB(total, running), g);
}

static int d_cumsum(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ag_accum(a, X, X->type.ndim == 0 ? G : reversed_cumsum(a, G, n->args[1]));
    return done(a);
}

/* torch's cumprod_backward, zeros included: before a line's first zero x_k
 * gets sum_{j>=k} g_j out_j / x_k; the first zero gets sum_{j>=z} g_j out'_j
 * where out' is the cumprod with that zero taken as 1; past it, nothing. */
static int d_cumprod(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    if (X->type.ndim == 0) {
        ag_accum(a, X, G);
        return done(a);
    }
    ptc_value *zero = cmp(a, PTC_OP_PRIMS_EQ, X, ZEROS(X));
    ptc_arg count_args[2] = {ptc_arg_value(ag_convert(a, zero, X->type.dtype)), n->args[1]};
    ptc_value *count = ag_build(a, PTC_OP_PRIMS_CUMSUM, count_args, 2);
    ptc_value *before = cmp(a, PTC_OP_PRIMS_EQ, count, ZEROS(X));
    ptc_value *first =
        ag_binary(a, PTC_OP_PRIMS_BITWISE_AND, zero, cmp(a, PTC_OP_PRIMS_EQ, count, ONES(X)));
    ptc_arg scan_args[2] = {ptc_arg_value(ag_where(a, first, ONES(X), X)), n->args[1]};
    ptc_value *out_past = ag_build(a, PTC_OP_PRIMS_CUMPROD, scan_args, 2);
    ptc_value *g_before =
        DIV(reversed_cumsum(a, MUL(G, OUT), n->args[1]), ag_where(a, before, X, ONES(X)));
    ptc_value *g_first = reversed_cumsum(a, MUL(G, out_past), n->args[1]);
    ag_accum(a, X, ag_where(a, before, g_before, ag_where(a, first, g_first, ZEROS(X))));
    return done(a);
}

/* sort, topk, cummax, cummin: each value's gradient goes back to where it
 * came from (summed where cummax repeats an index). */
static int d_sort(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    if (!G)
        return done(a);
    int dim = (int)ptc_node_arg(n, "dim")->i.value;
    if (X->type.ndim == 0) {
        ag_accum(a, X, G);
        return done(a);
    }
    dim = dim < 0 ? dim + X->type.ndim : dim;
    ag_accum(a, X, scatter_add(a, ZEROS(X), ptc_arg_int(dim), n->outs[1], G));
    return done(a);
}

/* prims.scatter_add or prims.scatter (op) of src into `into`. */
static ptc_value *scatter_like(ag *a, ptc_op op, ptc_value *into, ptc_arg dim, ptc_value *index,
                               ptc_value *src)
{
    ptc_arg args[4] = {ptc_arg_value(into), dim, ptc_arg_value(index), ptc_arg_value(src)};
    return ag_build(a, op, args, 4);
}

static ptc_value *scatter_add(ag *a, ptc_value *into, ptc_arg dim, ptc_value *index, ptc_value *src)
{
    return scatter_like(a, PTC_OP_PRIMS_SCATTER_ADD, into, dim, index, src);
}

/* Whether a gather takes one element of each row of x along dim (nll_loss,
 * cross_entropy's pick of the target's log-probability): index is x's
 * shape but 1 along dim. */
static bool picks_one_per_row(const ptc_value *x, const ptc_value *index, int dim)
{
    if (index->type.ndim != x->type.ndim || !ptc_dim_eq(index->type.shape[dim], ptc_dim_c(1)) ||
        ptc_dim_eq(x->type.shape[dim], ptc_dim_c(1)))
        return false;
    for (int d = 0; d < x->type.ndim; d++)
        if (d != dim && !ptc_dim_eq(index->type.shape[d], x->type.shape[d]))
            return false;
    return true;
}

/* g put back where the gather took one element per row: where(iota ==
 * index, g, 0), all views and pointwise, which fuse into the gradient's
 * readers; a scatter into zeros is an extern that writes all of x's shape
 * (GPT-2's loss: a 411 MB float32 [2048, 50257] gradient, zeros but one
 * per row, written and read twice). */
static ptc_value *one_hot_grad(ag *a, const ptc_value *x, ptc_value *index, int dim,
                               ptc_value *g)
{
    const ptc_ttype *t = &x->type;
    ptc_arg iota_args[5] = {{.kind = PTC_ARG_INT, .i = t->shape[dim]},
                            {.kind = PTC_ARG_INT, .i = ptc_dim_c(0)},
                            {.kind = PTC_ARG_INT, .i = ptc_dim_c(1)},
                            {.kind = PTC_ARG_DTYPE, .dt = index->type.dtype},
                            {.kind = PTC_ARG_DEVICE, .dev = t->device}};
    ptc_value *iota = ag_broadcast(a, ag_build(a, PTC_OP_PRIMS_IOTA, iota_args, 5), t->shape,
                                   t->ndim, &dim);
    int all[PTC_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
        all[d] = d;
    ptc_value *hit = cmp(a, PTC_OP_PRIMS_EQ, iota, ag_broadcast(a, index, t->shape, t->ndim, all));
    ptc_value *spread = ag_broadcast(a, g, t->shape, t->ndim, all);
    return ag_where(a, hit, spread, ZEROS(spread));
}

static int d_gather(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_value *index = ag_in(n, 2);
    int dim = (int)n->args[1].i.value;
    if (X->type.ndim > 0 && picks_one_per_row(X, index, dim))
        ag_accum(a, X, one_hot_grad(a, X, index, dim, G));
    else
        ag_accum(a, X, scatter_add(a, ZEROS(X), n->args[1], index, G));
    return done(a);
}

/* index_select picks whole slices: scatter them back with the index spread
 * over the slices' other dims. */
static int d_index_select(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    int dim = (int)n->args[1].i.value;
    ptc_value *index = ag_broadcast(a, ag_in(n, 2), G->type.shape, G->type.ndim, &dim);
    ag_accum(a, X, scatter_add(a, ZEROS(X), n->args[1], index, G));
    return done(a);
}

static int d_scatter_add(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_value *src = ag_in(n, 3);
    ag_accum(a, X, G);
    if (ag_needs(a, src)) {
        ptc_arg args[3] = {{.kind = PTC_ARG_VALUE, .v = G}, n->args[1], n->args[2]};
        ag_accum(a, src, ag_build(a, PTC_OP_PRIMS_GATHER, args, 3));
    }
    return done(a);
}

/* scatter: the places written take their gradient from src (gathered back,
 * as scatter_add's; src has index's shape, as capture makes it), the others
 * keep a's (g with zeros written over the places). */
static int d_scatter(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_value *index = ag_in(n, 2), *src = ag_in(n, 3);
    if (ag_needs(a, X))
        ag_accum(a, X, scatter_like(a, PTC_OP_PRIMS_SCATTER, G, n->args[1], index, ZEROS(src)));
    if (ag_needs(a, src)) {
        ptc_arg args[3] = {ptc_arg_value(G), n->args[1], ptc_arg_value(index)};
        ag_accum(a, src, ag_build(a, PTC_OP_PRIMS_GATHER, args, 3));
    }
    return done(a);
}

/* ---- matrix products ------------------------------------------------------------- */

static int d_matmul(ag *a, const ptc_node *n, ptc_value *const *gout, ptc_op op,
                    const int *transpose)
{
    if (ag_needs(a, X))
        ag_accum(a, X, ag_binary(a, op, G, ag_permute(a, Y, transpose)));
    if (ag_needs(a, Y))
        ag_accum(a, Y, ag_binary(a, op, ag_permute(a, X, transpose), G));
    return done(a);
}

static int d_mm(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    static const int t[2] = {1, 0};
    return d_matmul(a, n, gout, PTC_OP_MM, t);
}

static int d_bmm(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    static const int t[3] = {0, 2, 1};
    return d_matmul(a, n, gout, PTC_OP_BMM, t);
}

/* ---- the table ------------------------------------------------------------------- */

typedef struct rule_row {
    bool has_row;
    ag_rule rule;    /* RULE */
    const char *why; /* NONE: why not; ZERO, NODIFF: NULL */
} rule_row;

static const rule_row rows[PTC_OP_COUNT] = {
#define RULE(id, fn) [PTC_OP_##id] = {true, fn, NULL},
#define ZERO(id) [PTC_OP_##id] = {true, NULL, NULL},
#define NODIFF(id) [PTC_OP_##id] = {true, NULL, NULL},
#define NONE(id, reason) [PTC_OP_##id] = {true, NULL, reason},
#include "autograd/derivs.def"
#undef RULE
#undef ZERO
#undef NODIFF
#undef NONE
};

ag_rule ag_rule_of(ptc_op op)
{
    return rows[op].rule;
}

bool ptc_autograd_has_rule(ptc_op op, const char **why)
{
    const rule_row *row = &rows[op];
    *why =
        !row->has_row ? "a torch-level op: differentiate its decomposition into prims" : row->why;
    return row->rule != NULL;
}
