/* Decompositions of views, shape manipulation, indexing and creation ops.
 *
 * Views become prims.reshape / permute / broadcast_in_dim / slice (the
 * output type of the stage-1 node says the resulting shape, so -1 sizes and
 * squeezes need no re-derivation). Advanced indexing linearises its index
 * tensors over the indexed dims and becomes one index_select; padding,
 * repeat, roll and triangles are pad, broadcast + reshape, slices + cat and
 * an iota mask.
 */
#include "passes/decomp.h"

#include <string.h>

static ptc_value *out_reshape(dctx *d, const ptc_node *n, ptc_value *x, int i)
{
    return dp_reshape(d, x, n->outs[i]->type.shape, n->outs[i]->type.ndim);
}

static int d_reshape(dctx *d, const ptc_node *n, ptc_value **outs)
{
    outs[0] = out_reshape(d, n, dp_in(d, n, "self"), 0);
    return 0;
}

static int d_alias(dctx *d, const ptc_node *n, ptc_value **outs)
{
    outs[0] = dp_in(d, n, "self");
    return 0;
}

static int d_permute(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    int nd = x->type.ndim, perm[PTC_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        perm[i] = i;
    if (n->op == PTC_OP_PERMUTE) {
        const ptc_arg *dims = dp_arg(n, "dims");
        for (int i = 0; i < nd; i++)
            if (dp_wrap(d, dims->is.d[i], nd, &perm[i]))
                return -1;
    } else if (n->op == PTC_OP_TRANSPOSE) {
        int a, b;
        if (dp_wrap(d, dp_arg(n, "dim0")->i, nd, &a) || dp_wrap(d, dp_arg(n, "dim1")->i, nd, &b))
            return -1;
        if (nd > 0) {
            perm[a] = b;
            perm[b] = a;
        }
    } else if (nd == 2) { /* t */
        perm[0] = 1;
        perm[1] = 0;
    }
    outs[0] = dp_permute(d, x, perm);
    return 0;
}

static int d_expand(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    outs[0] = dp_broadcast(d, dp_in(d, n, "self"), ot->shape, ot->ndim);
    return 0;
}

/* A Python start index resolved against size (negative counts from the end,
 * clamped into [0, size] when that can be decided). */
static ptc_dim resolve(dctx *d, ptc_dim v, ptc_dim size)
{
    ptc_arena *a = d->g->arena;
    if (!ptc_dim_is_static(v))
        return v;
    if (v.value < 0) {
        ptc_dim r = ptc_dim_add(a, size, v);
        return ptc_dim_is_static(r) && r.value < 0 ? ptc_dim_c(0) : r;
    }
    if (ptc_dim_is_static(size) && v.value > size.value)
        return size;
    return v;
}

/* slice(dim, start, end, step) given the result length. */
static ptc_value *slice_len(dctx *d, ptc_value *x, int dim, ptc_dim start, ptc_dim len, int64_t step)
{
    ptc_arena *a = d->g->arena;
    ptc_dim limit = start;
    if (!(ptc_dim_is_static(len) && len.value == 0))
        limit = ptc_dim_add(a, start,
                            ptc_dim_add(a, ptc_dim_mul(a, ptc_dim_sub(a, len, ptc_dim_c(1)), ptc_dim_c(step)),
                                        ptc_dim_c(1)));
    return dp_slice(d, x, dim, start, limit, step);
}

static int d_slice(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    int dim;
    if (dp_wrap(d, dp_arg(n, "dim")->i, x->type.ndim, &dim))
        return -1;
    ptc_dim size = x->type.shape[dim];
    if (n->op == PTC_OP_SLICE) {
        const ptc_arg *sa = dp_arg(n, "start"), *st = dp_arg(n, "step");
        if (!ptc_dim_is_static(st->i))
            return dp_fail(d, PTC_ERR_UNSUPPORTED, "symbolic slice step");
        ptc_dim start = sa->kind == PTC_ARG_NONE ? ptc_dim_c(0) : resolve(d, sa->i, size);
        outs[0] = slice_len(d, x, dim, start, n->outs[0]->type.shape[dim], st->i.value);
    } else if (n->op == PTC_OP_NARROW) {
        ptc_dim start = resolve(d, dp_arg(n, "start")->i, size);
        outs[0] = slice_len(d, x, dim, start, dp_arg(n, "length")->i, 1);
    } else { /* select */
        ptc_dim index = resolve(d, dp_arg(n, "index")->i, size);
        outs[0] = out_reshape(d, n, slice_len(d, x, dim, index, ptc_dim_c(1), 1), 0);
    }
    return 0;
}

/* split, split_with_sizes, chunk, unbind: consecutive slices sized like the
 * outputs. */
static int d_split(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    int dim;
    if (dp_wrap(d, dp_arg(n, "dim")->i, x->type.ndim, &dim))
        return -1;
    ptc_dim start = ptc_dim_c(0);
    for (int i = 0; i < n->nout; i++) {
        ptc_dim len = n->op == PTC_OP_UNBIND ? ptc_dim_c(1) : n->outs[i]->type.shape[dim];
        ptc_value *s = slice_len(d, x, dim, start, len, 1);
        outs[i] = out_reshape(d, n, s, i);
        start = ptc_dim_add(d->g->arena, start, len);
    }
    return 0;
}

static int d_cat(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_arg *ts = dp_arg(n, "tensors");
    const ptc_ttype *ot = &n->outs[0]->type;
    int dim;
    if (dp_wrap(d, dp_arg(n, "dim")->i, n->op == PTC_OP_STACK ? ot->ndim : ot->ndim, &dim))
        return -1;
    ptc_arg parts = ptc_arg_values(d->g->arena, NULL, 0);
    parts.vs.v = PTC_NEWN(d->g->arena, ptc_value *, ts->vs.n > 0 ? ts->vs.n : 1);
    parts.vs.n = 0;
    for (int i = 0; i < ts->vs.n; i++) {
        ptc_value *v = dp_convert(d, d->map[ts->vs.v[i]->id], ot->dtype);
        if (!v)
            return -1;
        const ptc_ttype *t = &v->type;
        if (n->op == PTC_OP_STACK) {
            ptc_dim shape[PTC_MAX_DIMS];
            for (int k = 0, j = 0; k < ot->ndim; k++)
                shape[k] = k == dim ? ptc_dim_c(1) : t->shape[j++];
            v = dp_reshape(d, v, shape, ot->ndim);
        } else if (t->ndim == 1 && ot->ndim != 1 && ptc_dim_is_static(t->shape[0]) &&
                   t->shape[0].value == 0) {
            continue; /* torch skips legacy empty 1-d tensors */
        }
        parts.vs.v[parts.vs.n++] = v;
    }
    if (parts.vs.n == 1) {
        outs[0] = parts.vs.v[0];
        return 0;
    }
    ptc_arg args[2] = {parts, ptc_arg_int(dim)};
    outs[0] = dp_build(d, PTC_OP_PRIMS_CAT, args, 2);
    return 0;
}

static int d_pad(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    const ptc_arg *pad = dp_arg(n, "pad");
    int nd = x->type.ndim;
    if (pad->is.n % 2 || pad->is.n / 2 > nd)
        return dp_fail(d, PTC_ERR_META, "pad length must be even and at most 2 * ndim");
    /* prims.pad takes (lo, hi, interior) per dim, in dim order */
    ptc_dim cfg[3 * PTC_MAX_DIMS];
    for (int i = 0; i < 3 * nd; i++)
        cfg[i] = ptc_dim_c(0);
    for (int i = 0; i < pad->is.n / 2; i++) {
        int dim = nd - 1 - i;
        cfg[3 * dim] = pad->is.d[2 * i];
        cfg[3 * dim + 1] = pad->is.d[2 * i + 1];
    }
    ptc_arg args[3] = {ptc_arg_value(x), *dp_arg(n, "value"), ptc_arg_dims(d->g->arena, cfg, 3 * nd)};
    outs[0] = dp_build(d, PTC_OP_PRIMS_PAD, args, 3);
    return 0;
}

static int d_repeat(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    const ptc_arg *rep = dp_arg(n, "repeats");
    int nr = rep->is.n, nd = x->type.ndim, lead = nr - nd;
    if (lead < 0 || 2 * nr > 2 * PTC_MAX_DIMS)
        return dp_fail(d, PTC_ERR_META, "repeats must cover every dim");
    if (2 * nr > PTC_MAX_DIMS) {
        /* too many dims for an interleaved broadcast: copy as a cat */
        return dp_fail(d, PTC_ERR_UNSUPPORTED, "repeat of more than %d dims", PTC_MAX_DIMS / 2);
    }
    ptc_dim shape[PTC_MAX_DIMS];
    int bd[PTC_MAX_DIMS];
    for (int i = 0; i < nr; i++) {
        shape[2 * i] = rep->is.d[i];
        shape[2 * i + 1] = i < lead ? ptc_dim_c(1) : x->type.shape[i - lead];
    }
    ptc_dim xs[PTC_MAX_DIMS];
    for (int i = 0; i < nr; i++) {
        xs[i] = shape[2 * i + 1];
        bd[i] = 2 * i + 1;
    }
    ptc_value *xr = dp_reshape(d, x, xs, nr);
    ptc_value *b = dp_broadcast_dims(d, xr, shape, 2 * nr, bd);
    outs[0] = out_reshape(d, n, b, 0);
    return 0;
}

static int d_roll(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    const ptc_arg *shifts = dp_arg(n, "shifts"), *dims = dp_arg(n, "dims");
    const ptc_ttype *t = &x->type;
    ptc_value *v = x;
    int count = dims->is.n;
    if (count == 0) {
        ptc_dim numel = ptc_ttype_numel(d->g->arena, t);
        v = dp_reshape(d, x, &numel, 1);
        count = 1;
    }
    if (shifts->is.n != count)
        return dp_fail(d, PTC_ERR_META, "shifts and dims must have the same length");
    for (int i = 0; i < count && v; i++) {
        int dim = 0;
        if (dims->is.n && dp_wrap(d, dims->is.d[i], t->ndim, &dim))
            return -1;
        ptc_arena *a = d->g->arena;
        ptc_dim size = v->type.shape[dim], s = shifts->is.d[i];
        if (ptc_dim_is_static(size) && size.value == 0)
            continue;
        /* k = shift mod size (symbolic when either is): the last k elements
         * move to the front */
        ptc_dim k = ptc_dim_mod(a, s, size);
        if (ptc_dim_is_static(k) && k.value == 0)
            continue;
        ptc_dim cut = ptc_dim_sub(a, size, k);
        ptc_value *tail = dp_slice(d, v, dim, cut, size, 1);
        ptc_value *head = dp_slice(d, v, dim, ptc_dim_c(0), cut, 1);
        ptc_arg parts = ptc_arg_values(a, (ptc_value *[]){tail, head}, 2);
        ptc_arg args[2] = {parts, ptc_arg_int(dim)};
        v = tail && head ? dp_build(d, PTC_OP_PRIMS_CAT, args, 2) : NULL;
    }
    outs[0] = dp_reshape(d, v, t->shape, t->ndim);
    return 0;
}

/* triu / tril: where((col - row) >= diagonal, x, 0) over the last two dims. */
static int d_tri(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    const ptc_ttype *t = &x->type;
    if (t->ndim < 2)
        return dp_fail(d, PTC_ERR_META, "needs at least 2 dims");
    ptc_dim R = t->shape[t->ndim - 2], C = t->shape[t->ndim - 1];
    ptc_dim rc[2] = {R, C};
    int b0[1] = {0}, b1[1] = {1};
    ptc_value *row = dp_broadcast_dims(d, dp_iota(d, R, 0, 1, PTC_I64), rc, 2, b0);
    ptc_value *col = dp_broadcast_dims(d, dp_iota(d, C, 0, 1, PTC_I64), rc, 2, b1);
    ptc_value *diff = dp_binary(d, PTC_OP_PRIMS_SUB, col, row);
    ptc_value *k = dp_full_arg(d, rc, 2, dp_arg(n, "diagonal"), PTC_I64);
    ptc_value *keep = dp_binary(d, n->op == PTC_OP_TRIU ? PTC_OP_PRIMS_GE : PTC_OP_PRIMS_LE, diff, k);
    outs[0] = dp_where(d, keep, x, dp_full(d, t->shape, t->ndim, 0, t->dtype));
    return 0;
}

/* ---- indexing ------------------------------------------------------------------------ */

/* Advanced indexing's indices in i64, negative ones counted from the end,
 * checked against the size of the dim they index (eager raises IndexError for
 * one outside [-size, size), naming the index tensor's place `nth` among the
 * index tensors as its "dimension"). */
static ptc_value *wrap_index(dctx *d, ptc_value *idx, ptc_dim size, int nth)
{
    ptc_value *i64 = dp_convert(d, idx, PTC_I64);
    if (!i64)
        return NULL;
    ptc_arg args[3] = {ptc_arg_value(i64), ptc_arg_dim(size), ptc_arg_int(nth)};
    return dp_build(d, PTC_OP_PRIMS_CHECK_INDEX, args, 3);
}

static int d_index(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self");
    const ptc_arg *ix = dp_arg(n, "indices");
    ptc_arena *a = d->g->arena;
    int nd = x->type.ndim, pos[PTC_MAX_DIMS], k = 0;
    for (int i = 0; i < ix->vs.n; i++)
        if (ix->vs.v[i])
            pos[k++] = i;
    if (k == 0) {
        outs[0] = x;
        return 0;
    }
    /* bring the indexed dims together at the front unless they are adjacent */
    int first = pos[0];
    bool adjacent = pos[k - 1] - pos[0] + 1 == k;
    ptc_value *xs = x;
    if (!adjacent) {
        int perm[PTC_MAX_DIMS], m = 0;
        bool used[PTC_MAX_DIMS] = {0};
        for (int i = 0; i < k; i++) {
            perm[m++] = pos[i];
            used[pos[i]] = true;
        }
        for (int i = 0; i < nd; i++)
            if (!used[i])
                perm[m++] = i;
        xs = dp_permute(d, x, perm);
        first = 0;
    }
    /* broadcast shape of the index tensors, then the linear index */
    ptc_dim bs[PTC_MAX_DIMS];
    int nb = 0;
    for (int i = 0; i < k; i++) {
        const ptc_ttype *t = &ix->vs.v[pos[i]]->type;
        ptc_error e;
        if (i == 0) {
            nb = t->ndim;
            memcpy(bs, t->shape, sizeof(ptc_dim) * (size_t)nb);
        } else if (ptc_broadcast_shapes(a, bs, nb, t->shape, t->ndim, bs, &nb, &e)) {
            return dp_fail(d, PTC_ERR_META, "index tensors do not broadcast: %s", e.msg);
        }
    }
    ptc_value *lin = NULL;
    ptc_dim merged = ptc_dim_c(1);
    for (int i = 0; i < k; i++) {
        ptc_dim size = xs->type.shape[first + i];
        ptc_value *w =
            dp_broadcast(d, wrap_index(d, d->map[ix->vs.v[pos[i]]->id], size, i), bs, nb);
        if (lin)
            lin = dp_binary(d, PTC_OP_PRIMS_ADD,
                            dp_binary(d, PTC_OP_PRIMS_MUL, lin, dp_full_arg(d, bs, nb, &(ptc_arg){.kind = PTC_ARG_INT, .i = size}, PTC_I64)),
                            w);
        else
            lin = w;
        merged = ptc_dim_mul(a, merged, size);
    }
    /* x viewed [pre, merged, post], index_select, back to the result shape */
    ptc_dim xv[PTC_MAX_DIMS];
    int m = 0;
    for (int i = 0; i < first; i++)
        xv[m++] = xs->type.shape[i];
    xv[m++] = merged;
    for (int i = first + k; i < nd; i++)
        xv[m++] = xs->type.shape[i];
    ptc_value *xr = dp_reshape(d, xs, xv, m);
    ptc_dim numel = ptc_dim_c(1);
    for (int i = 0; i < nb; i++)
        numel = ptc_dim_mul(a, numel, bs[i]);
    ptc_value *flat = dp_reshape(d, lin, &numel, 1);
    ptc_arg args[3] = {ptc_arg_value(xr), ptc_arg_int(first), ptc_arg_value(flat)};
    ptc_value *sel = xr && flat ? dp_build(d, PTC_OP_PRIMS_INDEX_SELECT, args, 3) : NULL;
    outs[0] = out_reshape(d, n, sel, 0);
    return 0;
}

static int d_index_select(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self"), *idx = dp_convert(d, dp_in(d, n, "index"), PTC_I64);
    int dim;
    if (dp_wrap(d, dp_arg(n, "dim")->i, x->type.ndim, &dim))
        return -1;
    ptc_value *src = x;
    if (x->type.ndim == 0) {
        ptc_dim one = ptc_dim_c(1);
        src = dp_reshape(d, x, &one, 1);
    }
    if (idx && idx->type.ndim == 0) {
        ptc_dim one = ptc_dim_c(1);
        idx = dp_reshape(d, idx, &one, 1);
    }
    ptc_arg args[3] = {ptc_arg_value(src), ptc_arg_int(dim), ptc_arg_value(idx)};
    outs[0] = out_reshape(d, n, src && idx ? dp_build(d, PTC_OP_PRIMS_INDEX_SELECT, args, 3) : NULL, 0);
    return 0;
}

static int d_gather(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self"), *idx = dp_convert(d, dp_in(d, n, "index"), PTC_I64);
    int dim;
    if (dp_wrap(d, dp_arg(n, "dim")->i, x->type.ndim, &dim))
        return -1;
    ptc_arg args[3] = {ptc_arg_value(x), ptc_arg_int(dim), ptc_arg_value(idx)};
    outs[0] = idx ? dp_build(d, PTC_OP_PRIMS_GATHER, args, 3) : NULL;
    return 0;
}

/* scatter / scatter_add: their prims, the index in i64. */
static int d_scatter(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "self"), *idx = dp_convert(d, dp_in(d, n, "index"), PTC_I64);
    int dim;
    if (dp_wrap(d, dp_arg(n, "dim")->i, x->type.ndim, &dim))
        return -1;
    ptc_arg args[4] = {ptc_arg_value(x), ptc_arg_int(dim), ptc_arg_value(idx),
                       ptc_arg_value(dp_in(d, n, "src"))};
    ptc_op prim = n->op == PTC_OP_SCATTER ? PTC_OP_PRIMS_SCATTER : PTC_OP_PRIMS_SCATTER_ADD;
    outs[0] = idx ? dp_build(d, prim, args, 4) : NULL;
    return 0;
}

static int d_embedding(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *w = dp_in(d, n, "weight"), *idx = dp_convert(d, dp_in(d, n, "indices"), PTC_I64);
    if (!idx)
        return -1;
    ptc_dim numel = ptc_ttype_numel(d->g->arena, &idx->type);
    ptc_value *flat = dp_reshape(d, idx, &numel, 1);
    ptc_arg args[3] = {ptc_arg_value(w), ptc_arg_int(0), ptc_arg_value(flat)};
    outs[0] = out_reshape(d, n, flat ? dp_build(d, PTC_OP_PRIMS_INDEX_SELECT, args, 3) : NULL, 0);
    return 0;
}

/* ---- creation ---------------------------------------------------------------------------- */

static int d_full(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    ptc_arg v = ptc_arg_int(n->op == PTC_OP_ONES ? 1 : 0);
    if (n->op == PTC_OP_FULL)
        v = *dp_arg(n, "fill_value");
    outs[0] = dp_full_arg(d, ot->shape, ot->ndim, &v, ot->dtype);
    return 0;
}

static int d_arange(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    const ptc_arg *start = dp_arg(n, "start"), *step = dp_arg(n, "step");
    ptc_dim len = ot->shape[0];
    if (!ptc_dtype_is_float(ot->dtype)) {
        if ((start->kind == PTC_ARG_INT && !ptc_dim_is_static(start->i)) ||
            (step->kind == PTC_ARG_INT && !ptc_dim_is_static(step->i)))
            return dp_fail(d, PTC_ERR_UNSUPPORTED, "arange with a symbolic start or step");
        int64_t s0 = start->kind == PTC_ARG_INT ? start->i.value : (int64_t)dp_scalar_f(start);
        int64_t st = step->kind == PTC_ARG_INT ? step->i.value : (int64_t)dp_scalar_f(step);
        outs[0] = dp_iota(d, len, s0, st, ot->dtype);
        return 0;
    }
    ptc_value *i = dp_convert(d, dp_iota(d, len, 0, 1, PTC_I64), PTC_F64);
    ptc_value *r = dp_binary(d, PTC_OP_PRIMS_ADD, dp_full_arg(d, &len, 1, start, PTC_F64),
                             dp_binary(d, PTC_OP_PRIMS_MUL, dp_full_arg(d, &len, 1, step, PTC_F64), i));
    outs[0] = dp_convert(d, r, ot->dtype);
    return 0;
}

static int d_rand(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    ptc_arg args[4] = {ptc_arg_dims(d->g->arena, ot->shape, ot->ndim), ptc_arg_dtype(ot->dtype),
                       ptc_arg_device(ot->device), ptc_arg_dim(dp_arg(n, "seed")->i)};
    outs[0] = dp_build(d, n->op == PTC_OP_RAND ? PTC_OP_PRIMS_RAND : PTC_OP_PRIMS_RANDN, args, 4);
    return 0;
}

void ptc_decomp_shape(ptc_decomp_fn *fns)
{
    static const ptc_op reshape[] = {PTC_OP_VIEW, PTC_OP_RESHAPE, PTC_OP_SQUEEZE, PTC_OP_UNSQUEEZE,
                                     PTC_OP_FLATTEN};
    for (size_t i = 0; i < sizeof reshape / sizeof *reshape; i++)
        fns[reshape[i]] = d_reshape;
    fns[PTC_OP_PERMUTE] = d_permute;
    fns[PTC_OP_TRANSPOSE] = d_permute;
    fns[PTC_OP_T] = d_permute;
    fns[PTC_OP_EXPAND] = d_expand;
    fns[PTC_OP_SLICE] = d_slice;
    fns[PTC_OP_SELECT] = d_slice;
    fns[PTC_OP_NARROW] = d_slice;
    fns[PTC_OP_SPLIT] = d_split;
    fns[PTC_OP_SPLIT_WITH_SIZES] = d_split;
    fns[PTC_OP_CHUNK] = d_split;
    fns[PTC_OP_UNBIND] = d_split;
    fns[PTC_OP_CONTIGUOUS] = d_alias;
    fns[PTC_OP_CLONE] = d_alias;
    fns[PTC_OP_CAT] = d_cat;
    fns[PTC_OP_STACK] = d_cat;
    fns[PTC_OP_CONSTANT_PAD_ND] = d_pad;
    fns[PTC_OP_REPEAT] = d_repeat;
    fns[PTC_OP_ROLL] = d_roll;
    fns[PTC_OP_TRIU] = d_tri;
    fns[PTC_OP_TRIL] = d_tri;
    fns[PTC_OP_INDEX] = d_index;
    fns[PTC_OP_INDEX_SELECT] = d_index_select;
    fns[PTC_OP_GATHER] = d_gather;
    fns[PTC_OP_SCATTER] = d_scatter;
    fns[PTC_OP_SCATTER_ADD] = d_scatter;
    fns[PTC_OP_EMBEDDING] = d_embedding;
    fns[PTC_OP_FULL] = d_full;
    fns[PTC_OP_ZEROS] = d_full;
    fns[PTC_OP_ONES] = d_full;
    fns[PTC_OP_EMPTY] = d_full;
    fns[PTC_OP_ARANGE] = d_arange;
    fns[PTC_OP_RAND] = d_rand;
    fns[PTC_OP_RANDN] = d_rand;
}
