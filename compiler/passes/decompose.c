/* Decomposition: torch-level ops into prims.
 *
 * The driver walks the source graph in order and hands each node to its
 * op's decomposition (a table filled by the decomp_*.c families), which
 * builds prims with the dp_* builders below and returns the values that
 * replace the node's outputs. Builders go through ptc_build, so every prims
 * node is type-checked by the op's meta function as it is made, and every
 * node gets the source node's provenance, location and module path. Prims
 * and extern ops of the input are copied. A node whose op has no
 * decomposition stops the compile with Unsupported naming the op.
 */
#include "passes/decomp.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int dp_fail(dctx *d, ptc_errclass cls, const char *fmt, ...)
{
    if (d->failed)
        return -1;
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const ptc_node *n = d->src;
    if (!n) { /* a composition: its hooks report failures */
        d->failed = true;
        return -1;
    }
    ptc_errorf(d->err, cls, "prims", "%s (%%%s): %s", ptc_op_name(n->op),
               n->nout ? n->outs[0]->name : "?", msg);
    if (d->err) {
        d->err->has_node = true;
        d->err->node_id = n->id;
    }
    d->failed = true;
    return -1;
}

/* ---- builders -------------------------------------------------------------------- */

ptc_node *dp_buildn(dctx *d, ptc_op op, const ptc_arg *args, int nargs)
{
    if (d->failed)
        return NULL;
    for (int i = 0; i < nargs; i++)
        if (args[i].kind == PTC_ARG_VALUE && !args[i].v)
            return NULL;
    if (d->hooks) {
        ptc_node *n = d->hooks->node(d->hooks_ctx, op, args, nargs);
        d->failed = !n;
        return n;
    }
    ptc_error e;
    ptc_node *n = ptc_build(d->g, op, args, nargs, &e);
    if (!n) {
        dp_fail(d, PTC_ERR_INTERNAL, "building %s: %s", ptc_op_name(op), e.msg);
        return NULL;
    }
    n->nprov = d->nprov;
    n->prov = d->prov;
    n->loc = d->loc;
    n->module_path = d->module_path;
    return n;
}

ptc_value *dp_build(dctx *d, ptc_op op, const ptc_arg *args, int nargs)
{
    ptc_node *n = dp_buildn(d, op, args, nargs);
    return n ? n->outs[0] : NULL;
}

ptc_value *dp_unary(dctx *d, ptc_op op, ptc_value *x)
{
    if (!x)
        return NULL;
    ptc_arg a = ptc_arg_value(x);
    return dp_build(d, op, &a, 1);
}

ptc_value *dp_binary(dctx *d, ptc_op op, ptc_value *a, ptc_value *b)
{
    if (!a || !b)
        return NULL;
    ptc_arg args[2] = {ptc_arg_value(a), ptc_arg_value(b)};
    return dp_build(d, op, args, 2);
}

ptc_value *dp_bin(dctx *d, ptc_op op, ptc_value *a, ptc_value *b)
{
    if (!a || !b)
        return NULL;
    ptc_dim shape[PTC_MAX_DIMS];
    int n;
    ptc_error e;
    if (ptc_broadcast_shapes(d->g->arena, a->type.shape, a->type.ndim, b->type.shape, b->type.ndim,
                             shape, &n, &e)) {
        dp_fail(d, PTC_ERR_INTERNAL, "broadcasting: %s", e.msg);
        return NULL;
    }
    return dp_binary(d, op, dp_broadcast(d, a, shape, n), dp_broadcast(d, b, shape, n));
}

ptc_value *dp_convert(dctx *d, ptc_value *x, ptc_dtype dt)
{
    if (!x || x->type.dtype == dt)
        return x;
    ptc_arg args[2] = {ptc_arg_value(x), ptc_arg_dtype(dt)};
    return dp_build(d, PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE, args, 2);
}

ptc_value *dp_stop_gradient(dctx *d, ptc_value *x)
{
    return d->for_autograd ? dp_unary(d, PTC_OP_PRIMS_STOP_GRADIENT, x) : x;
}

static bool same_shape(const ptc_value *x, const ptc_dim *shape, int n)
{
    if (x->type.ndim != n)
        return false;
    for (int i = 0; i < n; i++)
        if (!ptc_dim_eq(x->type.shape[i], shape[i]))
            return false;
    return true;
}

ptc_value *dp_broadcast_dims(dctx *d, ptc_value *x, const ptc_dim *shape, int n,
                             const int *bdims)
{
    if (!x)
        return NULL;
    bool identity = x->type.ndim == n;
    for (int i = 0; identity && i < n; i++)
        identity = bdims[i] == i && ptc_dim_eq(x->type.shape[i], shape[i]);
    if (identity)
        return x;
    int64_t bd[PTC_MAX_DIMS];
    for (int i = 0; i < x->type.ndim; i++)
        bd[i] = bdims[i];
    ptc_arg args[3] = {ptc_arg_value(x), ptc_arg_dims(d->g->arena, shape, n),
                       ptc_arg_ints(d->g->arena, bd, x->type.ndim)};
    return dp_build(d, PTC_OP_PRIMS_BROADCAST_IN_DIM, args, 3);
}

ptc_value *dp_broadcast(dctx *d, ptc_value *x, const ptc_dim *shape, int n)
{
    if (!x)
        return NULL;
    if (same_shape(x, shape, n))
        return x;
    int bd[PTC_MAX_DIMS];
    int k = x->type.ndim;
    if (k > n) {
        dp_fail(d, PTC_ERR_INTERNAL, "cannot broadcast %d dims to %d", k, n);
        return NULL;
    }
    for (int i = 0; i < k; i++)
        bd[i] = n - k + i;
    return dp_broadcast_dims(d, x, shape, n, bd);
}

static ptc_device out_device(dctx *d)
{
    return d->src->nout ? d->src->outs[0]->type.device : PTC_CPU;
}

ptc_value *dp_full_arg(dctx *d, const ptc_dim *shape, int n, const ptc_arg *value, ptc_dtype dt)
{
    if (d->failed)
        return NULL;
    ptc_arg args[4] = {ptc_arg_dims(d->g->arena, shape, n), *value, ptc_arg_dtype(dt),
                       ptc_arg_device(out_device(d))};
    return dp_build(d, PTC_OP_PRIMS_FULL, args, 4);
}

ptc_value *dp_full(dctx *d, const ptc_dim *shape, int n, double v, ptc_dtype dt)
{
    ptc_arg a;
    if (ptc_dtype_is_float(dt) || v != floor(v) || isinf(v))
        a = ptc_arg_float(v);
    else if (dt == PTC_BOOL)
        a = ptc_arg_bool(v != 0);
    else
        a = ptc_arg_int((int64_t)v);
    return dp_full_arg(d, shape, n, &a, dt);
}

ptc_value *dp_reshape(dctx *d, ptc_value *x, const ptc_dim *shape, int n)
{
    if (!x || same_shape(x, shape, n))
        return x;
    ptc_arg args[2] = {ptc_arg_value(x), ptc_arg_dims(d->g->arena, shape, n)};
    return dp_build(d, PTC_OP_PRIMS_RESHAPE, args, 2);
}

ptc_value *dp_permute(dctx *d, ptc_value *x, const int *perm)
{
    if (!x)
        return NULL;
    bool identity = true;
    int64_t p[PTC_MAX_DIMS];
    for (int i = 0; i < x->type.ndim; i++) {
        p[i] = perm[i];
        identity &= perm[i] == i;
    }
    if (identity)
        return x;
    ptc_arg args[2] = {ptc_arg_value(x), ptc_arg_ints(d->g->arena, p, x->type.ndim)};
    return dp_build(d, PTC_OP_PRIMS_PERMUTE, args, 2);
}

ptc_value *dp_slice(dctx *d, ptc_value *x, int dim, ptc_dim start, ptc_dim limit, int64_t step)
{
    if (!x)
        return NULL;
    const ptc_ttype *t = &x->type;
    if (ptc_dim_is_static(start) && start.value == 0 && ptc_dim_eq(limit, t->shape[dim]) &&
        step == 1)
        return x;
    ptc_dim st[PTC_MAX_DIMS], li[PTC_MAX_DIMS];
    int64_t sp[PTC_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {
        st[i] = i == dim ? start : ptc_dim_c(0);
        li[i] = i == dim ? limit : t->shape[i];
        sp[i] = i == dim ? step : 1;
    }
    ptc_arena *a = d->g->arena;
    ptc_arg args[4] = {ptc_arg_value(x), ptc_arg_dims(a, st, t->ndim), ptc_arg_dims(a, li, t->ndim),
                       ptc_arg_ints(a, sp, t->ndim)};
    return dp_build(d, PTC_OP_PRIMS_SLICE, args, 4);
}

ptc_value *dp_reduce(dctx *d, ptc_op op, ptc_value *x, const bool *mask)
{
    if (!x)
        return NULL;
    int64_t dims[PTC_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < x->type.ndim; i++)
        if (mask[i])
            dims[n++] = i;
    ptc_arg args[2] = {ptc_arg_value(x), ptc_arg_ints(d->g->arena, dims, n)};
    return dp_build(d, op, args, 2);
}

ptc_value *dp_keepdim(dctx *d, ptc_value *r, const ptc_value *x, const bool *mask)
{
    if (!r)
        return NULL;
    ptc_dim shape[PTC_MAX_DIMS];
    for (int i = 0; i < x->type.ndim; i++)
        shape[i] = mask[i] ? ptc_dim_c(1) : x->type.shape[i];
    return dp_reshape(d, r, shape, x->type.ndim);
}

ptc_value *dp_where(dctx *d, ptc_value *c, ptc_value *a, ptc_value *b)
{
    if (!c || !a || !b)
        return NULL;
    ptc_arena *ar = d->g->arena;
    ptc_dim s1[PTC_MAX_DIMS], s2[PTC_MAX_DIMS];
    int n1, n2;
    ptc_error e;
    if (ptc_broadcast_shapes(ar, a->type.shape, a->type.ndim, b->type.shape, b->type.ndim, s1, &n1,
                             &e) ||
        ptc_broadcast_shapes(ar, s1, n1, c->type.shape, c->type.ndim, s2, &n2, &e)) {
        dp_fail(d, PTC_ERR_INTERNAL, "broadcasting: %s", e.msg);
        return NULL;
    }
    ptc_arg args[3] = {ptc_arg_value(dp_broadcast(d, c, s2, n2)),
                       ptc_arg_value(dp_broadcast(d, a, s2, n2)),
                       ptc_arg_value(dp_broadcast(d, b, s2, n2))};
    return dp_build(d, PTC_OP_PRIMS_WHERE, args, 3);
}

ptc_value *dp_truth(dctx *d, ptc_value *x)
{
    if (!x || x->type.dtype == PTC_BOOL)
        return x;
    ptc_value *zero = dp_full(d, x->type.shape, x->type.ndim, 0, x->type.dtype);
    return dp_binary(d, PTC_OP_PRIMS_NE, x, zero);
}

ptc_value *dp_iota(dctx *d, ptc_dim n, int64_t start, int64_t step, ptc_dtype dt)
{
    ptc_arg args[5] = {ptc_arg_dim(n), ptc_arg_int(start), ptc_arg_int(step), ptc_arg_dtype(dt),
                       ptc_arg_device(out_device(d))};
    return dp_build(d, PTC_OP_PRIMS_IOTA, args, 5);
}

/* ---- src args ---------------------------------------------------------------------- */

const ptc_arg *dp_arg(const ptc_node *n, const char *param) { return ptc_node_arg(n, param); }

ptc_value *dp_in(dctx *d, const ptc_node *n, const char *param)
{
    const ptc_arg *a = dp_arg(n, param);
    if (a->kind != PTC_ARG_VALUE)
        return NULL;
    return d->map[a->v->id];
}

ptc_dtype dp_out_dtype(const ptc_node *n, int i) { return n->outs[i]->type.dtype; }

ptc_dtype dp_compute(ptc_dtype dt) { return dt == PTC_F16 || dt == PTC_BF16 ? PTC_F32 : dt; }

double dp_scalar_f(const ptc_arg *a)
{
    switch (a->kind) {
    case PTC_ARG_FLOAT: return a->f;
    case PTC_ARG_BOOL: return a->b;
    case PTC_ARG_INT: return ptc_dim_is_static(a->i) ? (double)a->i.value : NAN;
    default: return NAN;
    }
}

ptc_value *dp_operand(dctx *d, const ptc_arg *a, ptc_dtype dt, const ptc_dim *shape, int n)
{
    if (d->failed)
        return NULL;
    if (a->kind == PTC_ARG_VALUE)
        return dp_broadcast(d, dp_convert(d, d->map[a->v->id], dt), shape, n);
    if (a->kind == PTC_ARG_NONE) {
        dp_fail(d, PTC_ERR_INTERNAL, "missing operand");
        return NULL;
    }
    return dp_full_arg(d, shape, n, a, dt);
}

int dp_wrap(dctx *d, ptc_dim dim, int ndim, int *out)
{
    if (!ptc_dim_is_static(dim))
        return dp_fail(d, PTC_ERR_UNSUPPORTED, "a symbolic dim argument");
    int w = ptc_wrap_dim(dim.value, ndim > 0 ? ndim : 1);
    if (w < 0)
        return dp_fail(d, PTC_ERR_META, "dim %lld out of range", (long long)dim.value);
    *out = w;
    return 0;
}

int dp_dim_mask(dctx *d, const ptc_arg *a, int ndim, bool *mask)
{
    for (int i = 0; i < ndim; i++)
        mask[i] = false;
    if (a->kind == PTC_ARG_NONE || (a->kind == PTC_ARG_INTS && a->is.n == 0)) {
        for (int i = 0; i < ndim; i++)
            mask[i] = true;
        return 0;
    }
    int n = a->kind == PTC_ARG_INT ? 1 : a->is.n;
    for (int i = 0; i < n; i++) {
        int w;
        if (dp_wrap(d, a->kind == PTC_ARG_INT ? a->i : a->is.d[i], ndim, &w))
            return -1;
        if (ndim > 0)
            mask[w] = true;
    }
    return 0;
}

/* ---- copying prims and externs ---------------------------------------------------------- */

ptc_arg *dp_mapped_args(dctx *d, const ptc_node *n)
{
    ptc_arena *a = d->g->arena;
    ptc_arg *args = PTC_NEWN(a, ptc_arg, n->nargs > 0 ? n->nargs : 1);
    for (int i = 0; i < n->nargs; i++) {
        args[i] = n->args[i];
        if (args[i].kind == PTC_ARG_VALUE) {
            args[i].v = d->map[args[i].v->id];
        } else if (args[i].kind == PTC_ARG_VALUES) {
            ptc_value **vs = PTC_NEWN(a, ptc_value *, args[i].vs.n > 0 ? args[i].vs.n : 1);
            for (int j = 0; j < args[i].vs.n; j++)
                vs[j] = args[i].vs.v[j] ? d->map[args[i].vs.v[j]->id] : NULL;
            args[i].vs.v = vs;
        }
    }
    return args;
}

int dp_build_outs(dctx *d, const ptc_node *n, const ptc_arg *args, ptc_value **outs)
{
    ptc_node *m = dp_buildn(d, n->op, args, n->nargs);
    if (!m)
        return -1;
    for (int i = 0; i < n->nout; i++)
        outs[i] = m->outs[i];
    return 0;
}

int dp_copy(dctx *d, const ptc_node *n, ptc_value **outs)
{
    return dp_build_outs(d, n, dp_mapped_args(d, n), outs);
}

/* ---- the driver ------------------------------------------------------------------------- */

static ptc_decomp_fn table[PTC_OP_COUNT];

static void fill_table(void)
{
    ptc_decomp_pointwise(table);
    ptc_decomp_reduce(table);
    ptc_decomp_shape(table);
    ptc_decomp_linalg(table);
}

/* Stage-1 nodes are their own provenance (their first output's name); prims
 * and externs of the input keep theirs. */
static void set_provenance(dctx *d, const ptc_node *n)
{
    ptc_arena *a = d->g->arena;
    bool own = ptc_op_schema(n->op)->stage == PTC_STAGE_TORCH || n->nprov == 0;
    d->nprov = own ? (n->nout > 0) : n->nprov;
    d->prov = PTC_NEWN(a, const char *, d->nprov > 0 ? d->nprov : 1);
    for (int i = 0; i < d->nprov; i++)
        d->prov[i] = ptc_arena_strdup(a, own ? n->outs[0]->name : n->prov[i]);
    d->loc.file = ptc_arena_strdup(a, n->loc.file);
    d->loc.text = ptc_arena_strdup(a, n->loc.text);
    d->loc.line = n->loc.line;
    d->loc.col = n->loc.col;
    d->module_path = ptc_arena_strdup(a, n->module_path);
}

/* PTC_INJECT=prims:<op>:wrong: the decomposition's result is x*1.25+1
 * (integers x+1, bools !x). */
static ptc_value *inject_wrong(dctx *d, ptc_value *x)
{
    ptc_dtype dt = x->type.dtype;
    if (dt == PTC_BOOL)
        return dp_unary(d, PTC_OP_PRIMS_LOGICAL_NOT, x);
    if (!ptc_dtype_is_float(dt))
        return dp_binary(d, PTC_OP_PRIMS_ADD, x, dp_full(d, x->type.shape, x->type.ndim, 1, dt));
    ptc_value *scaled =
        dp_binary(d, PTC_OP_PRIMS_MUL, x, dp_full(d, x->type.shape, x->type.ndim, 1.25, dt));
    return dp_binary(d, PTC_OP_PRIMS_ADD, scaled, dp_full(d, x->type.shape, x->type.ndim, 1, dt));
}

static int decompose_node(dctx *d, const ptc_node *n)
{
    d->src = n;
    set_provenance(d, n);
    ptc_inject_kind ik = ptc_inject_hit("prims", n->op, d->err);
    if (ik == PTC_INJECT_ERROR) {
        d->failed = true;
        return -1;
    }
    ptc_value *outs[64] = {0};
    if (n->nout > 64)
        return dp_fail(d, PTC_ERR_UNSUPPORTED, "more than 64 outputs");
    int rc;
    ptc_opstage stage = ptc_op_schema(n->op)->stage;
    if (stage == PTC_STAGE_PRIM || (stage == PTC_STAGE_BOTH && !table[n->op]))
        rc = dp_copy(d, n, outs);
    else if (table[n->op])
        rc = table[n->op](d, n, outs);
    else
        rc = dp_fail(d, PTC_ERR_UNSUPPORTED, "no decomposition into prims for op '%s'",
                     ptc_op_name(n->op));
    if (rc || d->failed)
        return -1;
    for (int i = 0; i < n->nout; i++) {
        if (!outs[i])
            return dp_fail(d, PTC_ERR_INTERNAL, "decomposition produced no value for output %d", i);
        if (outs[i]->type.dtype != n->outs[i]->type.dtype || outs[i]->type.ndim != n->outs[i]->type.ndim)
            return dp_fail(d, PTC_ERR_INTERNAL, "decomposition gives %s[%d dims] for output %d, "
                           "the op gives %s[%d dims]", ptc_dtype_name(outs[i]->type.dtype),
                           outs[i]->type.ndim, i, ptc_dtype_name(n->outs[i]->type.dtype),
                           n->outs[i]->type.ndim);
        for (int k = 0; k < outs[i]->type.ndim; k++)
            if (!ptc_dim_eq(outs[i]->type.shape[k], n->outs[i]->type.shape[k]))
                return dp_fail(d, PTC_ERR_INTERNAL, "decomposition changes the shape of output %d",
                               i);
        if (ik == PTC_INJECT_WRONG && !(outs[i] = inject_wrong(d, outs[i])))
            return -1;
        if (ptc_op_output_detached(n, i))
            outs[i] = dp_stop_gradient(d, outs[i]);
        d->map[n->outs[i]->id] = outs[i];
    }
    return 0;
}

static ptc_graph *decompose(const ptc_graph *g, bool for_autograd, ptc_error *err)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_table);
    ptc_graph *out = ptc_graph_new(NULL, g->name);
    dctx d = {0};
    d.for_autograd = for_autograd;
    d.g = out;
    d.src_g = g;
    d.err = err;
    d.map = calloc((size_t)g->nvalues + 1, sizeof *d.map);
    for (int i = 0; i < g->ninputs; i++) {
        const ptc_value *v = g->inputs[i];
        d.map[v->id] = ptc_graph_add_input(out, v->name, &v->type);
    }
    int rc = 0;
    for (int i = 0; i < g->nnodes && rc == 0; i++)
        rc = decompose_node(&d, g->nodes[i]);
    if (rc == 0) {
        ptc_value **outs = PTC_NEWN(out->arena, ptc_value *, g->noutputs > 0 ? g->noutputs : 1);
        for (int i = 0; i < g->noutputs; i++)
            outs[i] = d.map[g->outputs[i]->id];
        ptc_graph_set_outputs(out, outs, g->noutputs);
    }
    free(d.map);
    if (rc) {
        ptc_graph_free(out);
        return NULL;
    }
    return out;
}

ptc_graph *ptc_decompose(const ptc_graph *g, ptc_error *err)
{
    return decompose(g, false, err);
}

ptc_graph *ptc_decompose_for_autograd(const ptc_graph *g, ptc_error *err)
{
    return decompose(g, true, err);
}
