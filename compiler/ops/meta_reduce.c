/* Meta functions of reductions, scans and normalisations, torch-level and
 * prims.
 *
 * A reduction's dims come as None, an int or an int list. None (and, for the
 * ops whose schema defaults to [], the empty list) means every dim; a dim may
 * not repeat. The dtype rules are torch's: sum and prod of bools and integers
 * accumulate in i64, mean/var/std need floating point, any/all keep u8 and
 * otherwise give bool, argmax/argmin give i64, and dtype= overrides.
 * Reducing an empty dim is an error for ops without an identity (amax, amin,
 * argmax, argmin), as in torch.
 */
#include "ops/meta.h"

#include <string.h>

typedef struct reduction {
    bool mask[PTC_MAX_DIMS]; /* reduced dims */
    bool all;                /* every dim (also for 0-dim tensors) */
} reduction;

/* What an empty dim list means. */
enum { EMPTY_ALL, EMPTY_NONE, EMPTY_ERROR };

/* Reads a dim arg (NONE, INT or INTS) into r; `empty` says what [] means
 * (torch: every dim for sum/mean/amax..., no dim for any/all). */
static int reduce_dims(ptc_meta *m, const ptc_ttype *x, const ptc_arg *dim, int empty, reduction *r)
{
    memset(r, 0, sizeof *r);
    int n = dim->kind == PTC_ARG_INTS ? dim->is.n : dim->kind == PTC_ARG_INT ? 1 : 0;
    if (n == 0 && dim->kind == PTC_ARG_INTS && empty == EMPTY_NONE)
        return 0;
    if (n == 0) {
        if (dim->kind == PTC_ARG_INTS && empty == EMPTY_ERROR)
            return ptc_meta_fail(m, "dim must not be empty");
        r->all = true;
        for (int i = 0; i < x->ndim; i++)
            r->mask[i] = true;
        return 0;
    }
    bool seen[PTC_MAX_DIMS] = {0};
    for (int i = 0; i < n; i++) {
        int d;
        ptc_dim v = dim->kind == PTC_ARG_INT ? dim->i : dim->is.d[i];
        if (meta_dim(m, v, x->ndim, x, &d))
            return -1;
        if (seen[d])
            return ptc_meta_fail(m, "dim %d appears more than once in the dims of %s", d,
                                 meta_tstr(m, x));
        seen[d] = true;
        if (x->ndim > 0)
            r->mask[d] = true;
    }
    r->all = true;
    for (int i = 0; i < x->ndim; i++)
        r->all = r->all && r->mask[i];
    return 0;
}

/* Ops without an identity cannot reduce an empty dim. */
static int need_nonempty(ptc_meta *m, const ptc_ttype *x, const reduction *r, bool dim_given)
{
    if (!dim_given && x->ndim > 0) {
        for (int i = 0; i < x->ndim; i++)
            if (meta_is(x->shape[i], 0))
                return ptc_meta_fail(m,
                                     "cannot reduce %s, which has no elements, over all dims "
                                     "(give dim)",
                                     meta_tstr(m, x));
        return 0;
    }
    for (int i = 0; i < x->ndim; i++)
        if (r->mask[i] && meta_is(x->shape[i], 0))
            return ptc_meta_fail(m, "cannot reduce dim %d of %s, which has size 0", i,
                                 meta_tstr(m, x));
    return 0;
}

static void reduced_out(ptc_meta *m, const ptc_ttype *x, const reduction *r, bool keepdim,
                        ptc_dtype dt)
{
    ptc_dim shape[PTC_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (!r->mask[i])
            shape[n++] = x->shape[i];
        else if (keepdim)
            shape[n++] = ptc_dim_c(1);
    }
    meta_out(m, dt, shape, n);
}

static ptc_dtype dtype_arg(const ptc_meta *m)
{
    int i = meta_argi(m, "dtype");
    return i >= 0 && m->args[i].kind == PTC_ARG_DTYPE ? m->args[i].dt : PTC_DTYPE_NONE;
}

/* sum, mean, prod, amax, amin, logsumexp, any, all. */
int meta_reduce(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    ptc_op op = m->op;
    const ptc_arg *dim = &m->args[1];
    reduction r;
    int empty = op == PTC_OP_LOGSUMEXP                 ? EMPTY_ERROR
                : op == PTC_OP_ANY || op == PTC_OP_ALL ? EMPTY_NONE
                                                       : EMPTY_ALL;
    if (reduce_dims(m, x, dim, empty, &r))
        return -1;
    bool dim_given = dim->kind == PTC_ARG_INT || (dim->kind == PTC_ARG_INTS && dim->is.n > 0);
    ptc_dtype given = dtype_arg(m), dt = x->dtype;
    switch (op) {
    case PTC_OP_SUM:
    case PTC_OP_PROD:
        dt = given != PTC_DTYPE_NONE ? given : ptc_dtype_is_float(dt) ? dt : PTC_I64;
        break;
    case PTC_OP_MEAN:
        if (given != PTC_DTYPE_NONE && !ptc_dtype_is_float(given))
            return ptc_meta_fail(m, "dtype must be floating point, got %s", ptc_dtype_name(given));
        if (given == PTC_DTYPE_NONE && !ptc_dtype_is_float(dt))
            return ptc_meta_fail(m, "expected a floating point tensor or a floating dtype=, got %s",
                                 meta_tstr(m, x));
        dt = given != PTC_DTYPE_NONE ? given : dt;
        break;
    case PTC_OP_AMAX:
    case PTC_OP_AMIN:
        if (need_nonempty(m, x, &r, dim_given))
            return -1;
        break;
    case PTC_OP_LOGSUMEXP:
        dt = ptc_dtype_is_float(dt) ? dt : PTC_DEFAULT_FLOAT;
        break;
    case PTC_OP_ANY:
    case PTC_OP_ALL:
        dt = dt == PTC_U8 ? PTC_U8 : PTC_BOOL;
        break;
    default:
        PTC_ASSERT(!"meta_reduce: unexpected op");
    }
    reduced_out(m, x, &r, meta_arg(m, "keepdim")->b, dt);
    return 0;
}

/* var, std. */
int meta_var(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    reduction r;
    if (reduce_dims(m, x, meta_arg(m, "dim"), EMPTY_ALL, &r) || meta_need_float(m, x, "tensor"))
        return -1;
    reduced_out(m, x, &r, meta_arg(m, "keepdim")->b, x->dtype);
    return 0;
}

/* argmax, argmin: dim None reduces the flattened tensor. */
int meta_argreduce(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *dim = meta_arg(m, "dim");
    bool keepdim = meta_arg(m, "keepdim")->b;
    reduction r;
    if (reduce_dims(m, x, dim, EMPTY_ALL, &r) || need_nonempty(m, x, &r, dim->kind != PTC_ARG_NONE))
        return -1;
    if (x->dtype == PTC_BOOL)
        return ptc_meta_fail(m, "not supported for bool tensors (%s)", meta_tstr(m, x));
    reduced_out(m, x, &r, keepdim, PTC_I64);
    return 0;
}

int meta_cumsum(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    int d;
    if (meta_dim(m, meta_arg(m, "dim")->i, x->ndim, x, &d))
        return -1;
    ptc_dtype dt = dtype_arg(m);
    if (dt == PTC_DTYPE_NONE)
        dt = ptc_dtype_is_float(x->dtype) ? x->dtype : PTC_I64;
    meta_out(m, dt, x->shape, x->ndim);
    return 0;
}

/* sort, topk: the values in self's dtype and their int64 indices, self's
 * shape but k along dim for topk (a 0-d self sorts along dim 0 or -1, as
 * torch, and k is 0 or 1 there). */
int meta_sort(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    int d;
    if (meta_dim(m, meta_arg(m, "dim")->i, x->ndim, x, &d))
        return -1;
    ptc_dim shape[PTC_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        shape[i] = x->shape[i];
    if (m->op == PTC_OP_TOPK) {
        int64_t k;
        ptc_dim size = x->ndim ? x->shape[d] : ptc_dim_c(1);
        if (meta_const(m, meta_arg(m, "k")->i, "k", &k))
            return -1;
        if (k < 0 || (ptc_dim_is_static(size) && k > size.value))
            return ptc_meta_fail(m, "k %lld is out of range for dim %d of %s", (long long)k, d,
                                 meta_tstr(m, x));
        if (x->ndim)
            shape[d] = ptc_dim_c(k);
    }
    meta_out(m, x->dtype, shape, x->ndim);
    meta_out(m, PTC_I64, shape, x->ndim);
    return 0;
}

/* softmax, log_softmax. */
int meta_softmax(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    int d;
    if (meta_dim(m, meta_arg(m, "dim")->i, x->ndim, x, &d))
        return -1;
    ptc_dtype dt = dtype_arg(m);
    if (dt == PTC_DTYPE_NONE)
        dt = x->dtype;
    if (!ptc_dtype_is_float(dt))
        return ptc_meta_fail(m, "computes in floating point: %s needs a floating dtype=, got %s",
                             meta_tstr(m, x), ptc_dtype_name(dt));
    meta_out(m, dt, x->shape, x->ndim);
    return 0;
}

/* Parameters of a normalisation (weight, bias, running stats) have the
 * input's dtype, or f32 for f16/bf16 inputs (torch's mixed-type CPU path). */
static int check_param_dtype(ptc_meta *m, const ptc_ttype *x, const ptc_ttype *p, const char *what)
{
    if (p->dtype == x->dtype ||
        (p->dtype == PTC_F32 && (x->dtype == PTC_F16 || x->dtype == PTC_BF16)))
        return 0;
    return ptc_meta_fail(m, "%s %s does not match input %s in dtype", what, meta_tstr(m, p),
                         meta_tstr(m, x));
}

/* A per-channel parameter: 1-D with C elements. */
static int check_channel_param(ptc_meta *m, const ptc_ttype *x, int argi, ptc_dim c)
{
    const ptc_ttype *p = meta_t(m, argi);
    if (!p)
        return 0;
    const char *what = ptc_op_schema(m->op)->params[argi].name;
    if (p->ndim != 1 || !meta_same(m, p->shape[0], c))
        return ptc_meta_fail(m, "%s should have %s elements, got %s (input %s)", what,
                             meta_dstr(m, c), meta_tstr(m, p), meta_tstr(m, x));
    return check_param_dtype(m, x, p, what);
}

int meta_layer_norm(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *ns = meta_arg(m, "normalized_shape");
    int k = ns->is.n;
    if (meta_need_float(m, x, "input"))
        return -1;
    if (k < 1)
        return ptc_meta_fail(m, "normalized_shape must not be empty");
    bool ok = k <= x->ndim;
    for (int i = 0; ok && i < k; i++)
        ok = meta_same(m, ns->is.d[i], x->shape[x->ndim - k + i]);
    if (!ok)
        return ptc_meta_fail(m, "normalized_shape %s does not match the trailing dims of %s",
                             meta_shapestr(m, ns->is.d, k), meta_tstr(m, x));
    for (int argi = 2; argi <= 3; argi++) {
        const ptc_ttype *p = meta_t(m, argi);
        if (!p)
            continue;
        const char *what = ptc_op_schema(m->op)->params[argi].name;
        ok = p->ndim == k;
        for (int i = 0; ok && i < k; i++)
            ok = meta_same(m, p->shape[i], ns->is.d[i]);
        if (!ok)
            return ptc_meta_fail(m, "%s %s should have the shape normalized_shape %s", what,
                                 meta_tstr(m, p), meta_shapestr(m, ns->is.d, k));
        if (check_param_dtype(m, x, p, what))
            return -1;
    }
    meta_out_like(m, x);
    return 0;
}

int meta_batch_norm(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_ttype *rm = meta_t(m, 3), *rv = meta_t(m, 4);
    bool training = meta_arg(m, "training")->b;
    if (meta_need_float(m, x, "input"))
        return -1;
    if (x->ndim < 2)
        return ptc_meta_fail(m, "expected an input with at least 2 dims, got %s", meta_tstr(m, x));
    ptc_dim c = x->shape[1];
    for (int argi = 1; argi <= 4; argi++)
        if (check_channel_param(m, x, argi, c))
            return -1;
    if (!rm != !rv)
        return ptc_meta_fail(m, "running_mean and running_var must be given together");
    if (!training && !rm)
        return ptc_meta_fail(m, "running_mean and running_var must be given in evaluation mode");
    if (training) {
        /* F.batch_norm's check: statistics over a single value are undefined. */
        ptc_dim per_channel = x->shape[0];
        for (int i = 2; i < x->ndim; i++)
            per_channel = ptc_dim_mul(m->arena, per_channel, x->shape[i]);
        if (meta_is(per_channel, 1))
            return ptc_meta_fail(m,
                                 "expected more than 1 value per channel when training, got "
                                 "input %s",
                                 meta_tstr(m, x));
    }
    meta_out_like(m, x);
    if (training && rm) {
        meta_out_like(m, rm);
        meta_out_like(m, rv);
    }
    return 0;
}

int meta_group_norm(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    int64_t groups;
    if (meta_need_float(m, x, "input") ||
        meta_const(m, meta_arg(m, "num_groups")->i, "num_groups", &groups))
        return -1;
    if (x->ndim < 2)
        return ptc_meta_fail(m, "expected an input with at least 2 dims, got %s", meta_tstr(m, x));
    if (groups <= 0)
        return ptc_meta_fail(m, "num_groups must be positive, got %lld", (long long)groups);
    ptc_dim c = x->shape[1];
    ptc_dim rem = ptc_dim_mod(m->arena, c, ptc_dim_c(groups));
    if (!meta_is(rem, 0))
        return ptc_meta_fail(m, "the channels of %s are not divisible by num_groups=%lld",
                             meta_tstr(m, x), (long long)groups);
    for (int argi = 2; argi <= 3; argi++)
        if (check_channel_param(m, x, argi, c))
            return -1;
    meta_out_like(m, x);
    return 0;
}

/* ---- prims ------------------------------------------------------------------ */

/* prims reductions take an explicit dim list ([] reduces nothing) and never
 * keep dims. */
static int prim_dims(ptc_meta *m, const ptc_ttype *x, reduction *r)
{
    const ptc_arg *dims = meta_arg(m, "dims");
    memset(r, 0, sizeof *r);
    for (int i = 0; i < dims->is.n; i++) {
        int64_t d;
        if (meta_const(m, dims->is.d[i], "dims", &d))
            return -1;
        if (d < 0 || d >= x->ndim)
            return ptc_meta_fail(m, "dim %lld is out of range for %s (prims take dims in [0, %d))",
                                 (long long)d, meta_tstr(m, x), x->ndim);
        if (r->mask[d])
            return ptc_meta_fail(m, "dim %lld appears more than once", (long long)d);
        r->mask[d] = true;
    }
    return 0;
}

/* prims.sum, prod, amax, amin. */
int meta_prim_reduce(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    reduction r;
    if (prim_dims(m, x, &r))
        return -1;
    bool minmax = m->op == PTC_OP_PRIMS_AMAX || m->op == PTC_OP_PRIMS_AMIN;
    if (!minmax && x->dtype == PTC_BOOL)
        return ptc_meta_fail(m, "not supported for bool tensors (%s)", meta_tstr(m, x));
    if (minmax && need_nonempty(m, x, &r, true))
        return -1;
    reduced_out(m, x, &r, false, x->dtype);
    return 0;
}

/* prims.argmax, argmin over one dim. */
int meta_prim_argreduce(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    int64_t d;
    if (meta_const(m, meta_arg(m, "dim")->i, "dim", &d))
        return -1;
    if (d < 0 || d >= x->ndim)
        return ptc_meta_fail(m, "dim %lld is out of range for %s (prims take dims in [0, %d))",
                             (long long)d, meta_tstr(m, x), x->ndim);
    if (x->dtype == PTC_BOOL)
        return ptc_meta_fail(m, "not supported for bool tensors (%s)", meta_tstr(m, x));
    reduction r = {0};
    r.mask[d] = true;
    if (need_nonempty(m, x, &r, true))
        return -1;
    reduced_out(m, x, &r, false, PTC_I64);
    return 0;
}

/* prims.var_mean -> (var, mean). */
int meta_prim_var_mean(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    reduction r;
    if (prim_dims(m, x, &r) || meta_need_float(m, x, "tensor"))
        return -1;
    reduced_out(m, x, &r, false, x->dtype);
    reduced_out(m, x, &r, false, x->dtype);
    return 0;
}

int meta_prim_cumsum(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    int64_t d;
    if (meta_const(m, meta_arg(m, "dim")->i, "dim", &d))
        return -1;
    if (d < 0 || d >= (x->ndim > 0 ? x->ndim : 1))
        return ptc_meta_fail(m, "dim %lld is out of range for %s (prims take dims in [0, %d))",
                             (long long)d, meta_tstr(m, x), x->ndim > 0 ? x->ndim : 1);
    if (x->dtype == PTC_BOOL)
        return ptc_meta_fail(m, "not supported for bool tensors (%s)", meta_tstr(m, x));
    meta_out_like(m, x);
    return 0;
}
