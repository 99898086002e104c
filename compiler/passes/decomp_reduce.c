/* Decompositions of reductions, scans, softmax and the normalisations.
 *
 * Reductions become prims.sum/prod/amax/amin/argmax/var_mean over explicit
 * dims, with keepdim as a reshape. Mean divides by the count when it is
 * static and takes var_mean's mean when it is symbolic. Softmax is
 * amax, exp(x - max), sum, divide; the max shifts the range only, so it
 * carries no gradient (dp_stop_gradient): differentiated, these prims give
 * torch's softmax backward, y (g - sum(g y)), with no pass for amax's
 * gradient (which would be zero), and log_softmax's, g - exp(y) sum(g),
 * reading x and the row statistics or y, whichever the partitioner finds
 * smaller to save. layer_norm, batch_norm and group_norm are
 * one var_mean and one pointwise epilogue each, written so the epilogue
 * iterates in the reduction's outer dims first (group_norm normalises in an
 * [N, G, C/G, *] view of its input) and the scheduler can fuse both into one
 * kernel.
 */
#include "passes/decomp.h"

#include <math.h>
#include <string.h>

static ptc_value *B(dctx *d, ptc_op op, ptc_value *a, ptc_value *b) { return dp_bin(d, op, a, b); }

static ptc_value *K(dctx *d, double v, const ptc_value *like)
{
    if (!like)
        return NULL;
    return dp_full(d, like->type.shape, like->type.ndim, v, like->type.dtype);
}

/* A reduced value broadcast back over x's shape (mask: reduced dims). */
static ptc_value *back(dctx *d, ptc_value *r, const ptc_value *x, const bool *mask)
{
    if (!r)
        return NULL;
    int bd[PTC_MAX_DIMS], k = 0;
    for (int i = 0; i < x->type.ndim; i++)
        if (!mask[i])
            bd[k++] = i;
    return dp_broadcast_dims(d, r, x->type.shape, x->type.ndim, bd);
}

static bool count_of(const ptc_value *x, const bool *mask, int64_t *n)
{
    *n = 1;
    for (int i = 0; i < x->type.ndim; i++) {
        if (!mask[i])
            continue;
        if (!ptc_dim_is_static(x->type.shape[i]))
            return false;
        *n *= x->type.shape[i].value;
    }
    return true;
}

static ptc_value *var_mean(dctx *d, ptc_value *x, const bool *mask, double correction,
                           ptc_value **mean)
{
    if (!x)
        return NULL;
    int64_t dims[PTC_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < x->type.ndim; i++)
        if (mask[i])
            dims[n++] = i;
    ptc_arg args[3] = {ptc_arg_value(x), ptc_arg_ints(d->g->arena, dims, n),
                       ptc_arg_float(correction)};
    ptc_node *vm = dp_buildn(d, PTC_OP_PRIMS_VAR_MEAN, args, 3);
    if (!vm)
        return NULL;
    if (mean)
        *mean = vm->outs[1];
    return vm->outs[0];
}

/* Whether a and b are one value: the same, or conversions of one value to
 * one dtype (each decomposition converts its input anew; CSE merges them
 * later). */
static bool same_value(const ptc_value *a, const ptc_value *b)
{
    if (a == b)
        return true;
    const ptc_node *da = a->def, *db = b->def;
    return da && db && da->op == PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE && db->op == da->op &&
           da->args[0].v == db->args[0].v && a->type.dtype == b->type.dtype;
}

/* The mean output of a var_mean of x over the dims of mask already built
 * (torch.var_mean, BatchNorm-style statistics written as var and mean), or
 * NULL: a mean beside it reads x once, in the same reduction. Looks at the
 * last nodes built only. */
static ptc_value *var_mean_of(dctx *d, const ptc_value *x, const bool *mask)
{
    for (int i = d->g->nnodes - 1; i >= 0 && i >= d->g->nnodes - 64; i--) {
        const ptc_node *vm = d->g->nodes[i];
        if (vm->op != PTC_OP_PRIMS_VAR_MEAN || !same_value(vm->args[0].v, x))
            continue;
        const ptc_arg *dims = &vm->args[1];
        bool same = true;
        for (int k = 0, j = 0; k < x->type.ndim; k++) {
            bool in = j < dims->is.n && dims->is.d[j].value == k;
            j += in;
            same &= in == mask[k];
        }
        if (same)
            return vm->outs[1];
    }
    return NULL;
}

static int d_reduce(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    ptc_dtype out = dp_out_dtype(n, 0);
    bool mask[PTC_MAX_DIMS];
    const ptc_arg *dim = dp_arg(n, "dim");
    if (dp_dim_mask(d, dim, x->type.ndim, mask))
        return -1;
    bool keep = dp_arg(n, "keepdim")->b;
    /* any/all(x, []) reduce nothing (sum(x, []) reduces everything): the
     * output's rank says which */
    if (dim->kind == PTC_ARG_INTS && dim->is.n == 0 && !keep && n->outs[0]->type.ndim == x->type.ndim &&
        x->type.ndim > 0)
        for (int i = 0; i < x->type.ndim; i++)
            mask[i] = false;
    ptc_value *r = NULL;
    switch (n->op) {
    case PTC_OP_SUM:
    case PTC_OP_PROD: {
        /* a bool result counts truths in i64 (nonzero -> true), as the reference */
        ptc_dtype acc = out == PTC_BOOL ? PTC_I64 : out;
        ptc_op p = n->op == PTC_OP_SUM ? PTC_OP_PRIMS_SUM : PTC_OP_PRIMS_PROD;
        ptc_value *xs = out == PTC_BOOL ? dp_convert(d, dp_truth(d, x), PTC_I64) : dp_convert(d, x, acc);
        r = dp_convert(d, dp_reduce(d, p, xs, mask), out);
        break;
    }
    case PTC_OP_MEAN: {
        ptc_value *xc = dp_convert(d, x, dp_compute(out));
        int64_t cnt;
        r = var_mean_of(d, xc, mask);
        if (!r && count_of(x, mask, &cnt)) {
            ptc_value *s = dp_reduce(d, PTC_OP_PRIMS_SUM, xc, mask);
            r = B(d, PTC_OP_PRIMS_DIV, s, K(d, (double)cnt, s));
        } else if (!r) {
            var_mean(d, xc, mask, 0, &r);
        }
        r = dp_convert(d, r, out);
        break;
    }
    case PTC_OP_AMAX: r = dp_reduce(d, PTC_OP_PRIMS_AMAX, x, mask); break;
    case PTC_OP_AMIN: r = dp_reduce(d, PTC_OP_PRIMS_AMIN, x, mask); break;
    case PTC_OP_ANY:
    case PTC_OP_ALL: {
        int64_t cnt;
        bool any = n->op == PTC_OP_ANY;
        if (count_of(x, mask, &cnt) && cnt == 0) { /* over nothing: any false, all true */
            const ptc_ttype *ot = &n->outs[0]->type;
            outs[0] = dp_full(d, ot->shape, ot->ndim, any ? 0 : 1, out);
            return 0;
        }
        r = dp_reduce(d, any ? PTC_OP_PRIMS_AMAX : PTC_OP_PRIMS_AMIN, dp_truth(d, x), mask);
        r = dp_convert(d, r, out);
        break;
    }
    case PTC_OP_LOGSUMEXP: {
        /* max over the dims, a non-finite max replaced by 0, then
         * log(sum(exp(x - max))) + max */
        ptc_dtype c = dp_compute(out);
        ptc_value *xc = dp_convert(d, x, c);
        int64_t cnt;
        if (count_of(x, mask, &cnt) && cnt == 0) { /* log(0) = -inf, no max */
            ptc_value *s = dp_reduce(d, PTC_OP_PRIMS_SUM, xc, mask);
            r = dp_convert(d, dp_unary(d, PTC_OP_PRIMS_LOG, s), out);
            break;
        }
        ptc_value *m = dp_reduce(d, PTC_OP_PRIMS_AMAX, xc, mask);
        ptc_value *inf = dp_unary(d, PTC_OP_PRIMS_ABS, m);
        ptc_value *isinf = B(d, PTC_OP_PRIMS_EQ, inf, K(d, INFINITY, m));
        m = dp_stop_gradient(d, dp_where(d, isinf, K(d, 0, m), m));
        ptc_value *e = dp_unary(d, PTC_OP_PRIMS_EXP, B(d, PTC_OP_PRIMS_SUB, xc, back(d, m, x, mask)));
        ptc_value *s = dp_reduce(d, PTC_OP_PRIMS_SUM, e, mask);
        r = dp_convert(d, B(d, PTC_OP_PRIMS_ADD, dp_unary(d, PTC_OP_PRIMS_LOG, s), m), out);
        break;
    }
    default: return dp_fail(d, PTC_ERR_UNSUPPORTED, "no decomposition for this reduction");
    }
    outs[0] = keep ? dp_keepdim(d, r, x, mask) : r;
    return 0;
}

static int d_var(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    bool mask[PTC_MAX_DIMS];
    if (dp_dim_mask(d, dp_arg(n, "dim"), x->type.ndim, mask))
        return -1;
    const ptc_arg *corr = dp_arg(n, "correction");
    double c = corr->kind == PTC_ARG_NONE ? 1 : dp_scalar_f(corr);
    ptc_dtype out = dp_out_dtype(n, 0), cd = dp_compute(out);
    ptc_value *v = var_mean(d, dp_convert(d, x, cd), mask, c, NULL);
    if (n->op == PTC_OP_STD)
        v = dp_unary(d, PTC_OP_PRIMS_SQRT, v);
    v = dp_convert(d, v, out);
    outs[0] = dp_arg(n, "keepdim")->b ? dp_keepdim(d, v, x, mask) : v;
    return 0;
}

static int d_argreduce(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    const ptc_arg *dim = dp_arg(n, "dim");
    bool keep = dp_arg(n, "keepdim")->b;
    ptc_op op = n->op == PTC_OP_ARGMAX ? PTC_OP_PRIMS_ARGMAX : PTC_OP_PRIMS_ARGMIN;
    if (dim->kind == PTC_ARG_NONE) {
        ptc_dim numel = ptc_ttype_numel(d->g->arena, &x->type);
        ptc_value *flat = dp_reshape(d, x, &numel, 1);
        ptc_arg args[2] = {ptc_arg_value(flat), ptc_arg_int(0)};
        ptc_value *r = dp_build(d, op, args, 2);
        outs[0] = keep ? dp_reshape(d, r, n->outs[0]->type.shape, n->outs[0]->type.ndim) : r;
        return 0;
    }
    int w;
    if (dp_wrap(d, dim->i, x->type.ndim, &w))
        return -1;
    ptc_value *src = x;
    if (x->type.ndim == 0) {
        ptc_dim one = ptc_dim_c(1);
        src = dp_reshape(d, x, &one, 1);
    }
    ptc_arg args[2] = {ptc_arg_value(src), ptc_arg_int(w)};
    ptc_value *r = dp_build(d, op, args, 2);
    outs[0] = dp_reshape(d, r, n->outs[0]->type.shape, n->outs[0]->type.ndim);
    return 0;
}

/* cumsum, cumprod: the prim scan over self in the result's dtype. */
static int d_cumsum(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    int w;
    if (dp_wrap(d, dp_arg(n, "dim")->i, x->type.ndim, &w))
        return -1;
    ptc_value *xc = dp_convert(d, x, dp_out_dtype(n, 0));
    ptc_arg args[2] = {ptc_arg_value(xc), ptc_arg_int(w)};
    ptc_op scan = n->op == PTC_OP_CUMPROD ? PTC_OP_PRIMS_CUMPROD : PTC_OP_PRIMS_CUMSUM;
    outs[0] = dp_build(d, scan, args, 2);
    return 0;
}

ptc_value *dp_softmax(dctx *d, ptc_value *x, int dim, bool log, bool masked_rows)
{
    if (!x)
        return NULL;
    bool mask[PTC_MAX_DIMS] = {0};
    if (x->type.ndim > 0)
        mask[dim] = true;
    ptc_value *m = dp_reduce(d, PTC_OP_PRIMS_AMAX, x, mask);
    if (masked_rows) /* subtract 0 from a row of -inf, not -inf (nan) */
        m = dp_where(d, B(d, PTC_OP_PRIMS_EQ, m, K(d, -INFINITY, m)), K(d, 0, m), m);
    m = dp_stop_gradient(d, m);
    ptc_value *sh = B(d, PTC_OP_PRIMS_SUB, x, back(d, m, x, mask));
    ptc_value *e = dp_unary(d, PTC_OP_PRIMS_EXP, sh);
    ptc_value *s = dp_reduce(d, PTC_OP_PRIMS_SUM, e, mask);
    if (masked_rows) /* 0 / 1 for that row */
        s = dp_where(d, B(d, PTC_OP_PRIMS_EQ, s, K(d, 0, s)), K(d, 1, s), s);
    s = back(d, s, x, mask);
    return log ? B(d, PTC_OP_PRIMS_SUB, sh, dp_unary(d, PTC_OP_PRIMS_LOG, s))
               : B(d, PTC_OP_PRIMS_DIV, e, s);
}

static int d_softmax(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    ptc_dtype out = dp_out_dtype(n, 0), c = dp_compute(out);
    int w;
    if (dp_wrap(d, dp_arg(n, "dim")->i, x->type.ndim, &w))
        return -1;
    bool mask[PTC_MAX_DIMS] = {0};
    if (x->type.ndim > 0)
        mask[w] = true;
    ptc_value *xc = dp_convert(d, x, c);
    int64_t cnt;
    if (count_of(x, mask, &cnt) && cnt == 0) { /* nothing to normalise: empty */
        outs[0] = dp_convert(d, xc, out);
        return 0;
    }
    outs[0] = dp_convert(d, dp_softmax(d, xc, w, n->op == PTC_OP_LOG_SOFTMAX, false), out);
    return 0;
}

/* (x - mean) * rstd, computed in c; mean and var broadcast by `bd`. */
static ptc_value *normalize(dctx *d, ptc_value *x, ptc_value *mean, ptc_value *var, double eps,
                            const int *bd)
{
    if (!x || !mean)
        return NULL;
    const ptc_ttype *t = &x->type;
    ptc_value *rstd = dp_unary(d, PTC_OP_PRIMS_RSQRT, B(d, PTC_OP_PRIMS_ADD, var, K(d, eps, var)));
    ptc_value *mb = dp_broadcast_dims(d, mean, t->shape, t->ndim, bd);
    ptc_value *rb = dp_broadcast_dims(d, rstd, t->shape, t->ndim, bd);
    return B(d, PTC_OP_PRIMS_MUL, B(d, PTC_OP_PRIMS_SUB, x, mb), rb);
}

static int d_layer_norm(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "input");
    ptc_value *w = dp_in(d, n, "weight"), *b = dp_in(d, n, "bias");
    int k = dp_arg(n, "normalized_shape")->is.n;
    const ptc_ttype *t = &x->type;
    ptc_dtype out = dp_out_dtype(n, 0), c = dp_compute(out);
    bool mask[PTC_MAX_DIMS] = {0};
    int bd[PTC_MAX_DIMS], nb = 0;
    for (int i = 0; i < t->ndim; i++) {
        mask[i] = i >= t->ndim - k;
        if (!mask[i])
            bd[nb++] = i;
    }
    ptc_value *xc = dp_convert(d, x, c), *mean;
    ptc_value *var = var_mean(d, xc, mask, 0, &mean);
    ptc_value *y = normalize(d, xc, mean, var, dp_arg(n, "eps")->f, bd);
    if (w)
        y = B(d, PTC_OP_PRIMS_MUL, y, dp_convert(d, w, c));
    if (b)
        y = B(d, PTC_OP_PRIMS_ADD, y, dp_convert(d, b, c));
    outs[0] = dp_convert(d, y, out);
    return 0;
}

/* A per-channel parameter [C] broadcast over dim 1 of shape. */
static ptc_value *per_channel(dctx *d, ptc_value *p, const ptc_ttype *t, ptc_dtype c)
{
    if (!p)
        return NULL;
    int bd[1] = {1};
    return dp_broadcast_dims(d, dp_convert(d, p, c), t->shape, t->ndim, bd);
}

static int d_batch_norm(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "input");
    ptc_value *w = dp_in(d, n, "weight"), *b = dp_in(d, n, "bias");
    ptc_value *rm = dp_in(d, n, "running_mean"), *rv = dp_in(d, n, "running_var");
    bool training = dp_arg(n, "training")->b;
    double momentum = dp_arg(n, "momentum")->f, eps = dp_arg(n, "eps")->f;
    const ptc_ttype *t = &x->type;
    ptc_dtype out = dp_out_dtype(n, 0), c = dp_compute(out);
    bool mask[PTC_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++)
        mask[i] = i != 1;
    int bd[1] = {1};
    ptc_value *xc = dp_convert(d, x, c), *mean, *var;
    if (training) {
        var = var_mean(d, xc, mask, 0, &mean);
    } else {
        mean = dp_convert(d, rm, c);
        var = dp_convert(d, rv, c);
    }
    ptc_value *y = normalize(d, xc, mean, var, eps, bd);
    if (w)
        y = B(d, PTC_OP_PRIMS_MUL, y, per_channel(d, w, t, c));
    if (b)
        y = B(d, PTC_OP_PRIMS_ADD, y, per_channel(d, b, t, c));
    outs[0] = dp_convert(d, y, out);
    if (n->nout < 3)
        return 0;
    /* running statistics: (1 - m) * old + m * batch (unbiased variance) */
    ptc_dtype sd = rm->type.dtype;
    int64_t cnt;
    ptc_value *unbiased;
    if (count_of(x, mask, &cnt))
        unbiased = B(d, PTC_OP_PRIMS_MUL, var, K(d, (double)cnt / (double)(cnt - 1), var));
    else
        unbiased = var_mean(d, xc, mask, 1, NULL);
    ptc_value *m64 = dp_convert(d, mean, sd), *v64 = dp_convert(d, unbiased, sd);
    outs[1] = B(d, PTC_OP_PRIMS_ADD, B(d, PTC_OP_PRIMS_MUL, K(d, 1 - momentum, rm), rm),
                B(d, PTC_OP_PRIMS_MUL, K(d, momentum, rm), m64));
    outs[2] = B(d, PTC_OP_PRIMS_ADD, B(d, PTC_OP_PRIMS_MUL, K(d, 1 - momentum, rv), rv),
                B(d, PTC_OP_PRIMS_MUL, K(d, momentum, rv), v64));
    return 0;
}

/* Normalises in an [N, G, C/G, rest] view so that the epilogue shares the
 * statistics' outer dims (N, G); the affine parameters are viewed [G, C/G]. */
static int d_group_norm(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "input");
    ptc_value *w = dp_in(d, n, "weight"), *b = dp_in(d, n, "bias");
    const ptc_arg *ga = dp_arg(n, "num_groups");
    const ptc_ttype *t = &x->type;
    if (!ptc_dim_is_static(ga->i))
        return dp_fail(d, PTC_ERR_UNSUPPORTED, "symbolic num_groups");
    ptc_arena *a = d->g->arena;
    ptc_dim G = ga->i, C = t->shape[1], cg;
    if (!ptc_dim_div_exact(a, C, G, &cg))
        return dp_fail(d, PTC_ERR_META, "channels not divisible by num_groups");
    ptc_dim rest = ptc_dim_c(1);
    for (int i = 2; i < t->ndim; i++)
        rest = ptc_dim_mul(a, rest, t->shape[i]);
    ptc_dtype out = dp_out_dtype(n, 0), c = dp_compute(out);
    ptc_dim s4[4] = {t->shape[0], G, cg, rest};
    ptc_value *x4 = dp_reshape(d, dp_convert(d, x, c), s4, 4);
    bool mask[4] = {false, false, true, true};
    int bd[2] = {0, 1};
    ptc_value *mean, *var = var_mean(d, x4, mask, 0, &mean);
    ptc_value *y = normalize(d, x4, mean, var, dp_arg(n, "eps")->f, bd);
    ptc_dim s2[2] = {G, cg};
    int pbd[2] = {1, 2};
    if (w)
        y = B(d, PTC_OP_PRIMS_MUL, y,
              dp_broadcast_dims(d, dp_reshape(d, dp_convert(d, w, c), s2, 2), s4, 4, pbd));
    if (b)
        y = B(d, PTC_OP_PRIMS_ADD, y,
              dp_broadcast_dims(d, dp_reshape(d, dp_convert(d, b, c), s2, 2), s4, 4, pbd));
    outs[0] = dp_reshape(d, dp_convert(d, y, out), t->shape, t->ndim);
    return 0;
}

void ptc_decomp_reduce(ptc_decomp_fn *fns)
{
    static const ptc_op reduce[] = {PTC_OP_SUM, PTC_OP_MEAN, PTC_OP_AMAX, PTC_OP_AMIN,
                                    PTC_OP_PROD, PTC_OP_LOGSUMEXP, PTC_OP_ANY, PTC_OP_ALL};
    for (size_t i = 0; i < sizeof reduce / sizeof *reduce; i++)
        fns[reduce[i]] = d_reduce;
    fns[PTC_OP_VAR] = d_var;
    fns[PTC_OP_STD] = d_var;
    fns[PTC_OP_ARGMAX] = d_argreduce;
    fns[PTC_OP_ARGMIN] = d_argreduce;
    fns[PTC_OP_CUMSUM] = d_cumsum;
    fns[PTC_OP_CUMPROD] = d_cumsum;
    fns[PTC_OP_SOFTMAX] = d_softmax;
    fns[PTC_OP_LOG_SOFTMAX] = d_softmax;
    fns[PTC_OP_LAYER_NORM] = d_layer_norm;
    fns[PTC_OP_BATCH_NORM] = d_batch_norm;
    fns[PTC_OP_GROUP_NORM] = d_group_norm;
}
