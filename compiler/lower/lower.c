/* Lowering: a prims graph into a loop program.
 *
 * Every prims value is known as a buffer plus an index map: one index
 * expression per buffer dimension over the value's own loop variables.
 * Computations (pointwise ops, reductions, externs) make a node and a new
 * buffer whose map is the identity; views (broadcast_in_dim, reshape,
 * permute, slice) make no node at all, only a new map over the same buffer,
 * so a view never copies. A consumer loads a value by substituting its own
 * variables into the value's map. Padding and concatenation are masked
 * loads; gathers put a loaded index into the load's index (a VAL atom).
 * Externs need strided tensors: a view whose map is affine becomes strides
 * and an offset, anything else is copied first. A graph output that is the
 * identity (or a contiguous reshape) of a temporary becomes that temporary;
 * otherwise it is copied into its own buffer.
 */
#include "lower/lower_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lval {
    int buf;
    int ndim;              /* the value's rank */
    const ptc_ix **idx;    /* per buffer dim, over the value's variables */
} lval;

typedef struct lowerer {
    ptc_lprog *p;
    ptc_arena *a;
    const ptc_graph *g;
    lval *vals;            /* by prims value id */
    int *uses;             /* prims use counts */
    int *user_start;       /* by value id: its users are users[user_start[id] ..
                              user_start[id + 1]) (node indices, repeated per use) */
    int *users;
    const ptc_node *cur;
    ptc_error *err;
} lowerer;

static int lfail(lowerer *L, ptc_errclass cls, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int lfail(lowerer *L, ptc_errclass cls, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const ptc_node *n = L->cur;
    ptc_errorf(L->err, cls, "lower", "%s (%%%s): %s", n ? ptc_op_name(n->op) : "graph",
               n && n->nout ? n->outs[0]->name : "?", msg);
    if (n && L->err) {
        L->err->has_node = true;
        L->err->node_id = n->id;
    }
    return -1;
}

/* ---- values ------------------------------------------------------------------------- */

static const ptc_ix **identity_vars(ptc_arena *a, const ptc_ttype *t)
{
    const ptc_ix **v = PTC_NEWN(a, const ptc_ix *, t->ndim > 0 ? t->ndim : 1);
    for (int i = 0; i < t->ndim; i++)
        v[i] = ptc_ix_var(a, i, t->shape[i]);
    return v;
}

/* The value's map with its variables replaced by `at` (one per value dim). */
static const ptc_ix **map_at(lowerer *L, const lval *v, const ptc_ix *const *at)
{
    int nd = L->p->bufs[v->buf]->ndim;
    const ptc_ix **idx = PTC_NEWN(L->a, const ptc_ix *, nd > 0 ? nd : 1);
    for (int d = 0; d < nd; d++)
        idx[d] = ptc_ix_subst(L->a, v->idx[d], at, v->ndim, NULL, 0);
    return idx;
}

static int load_at(lowerer *L, ptc_lbody *b, const ptc_value *x, const ptc_ix *const *at)
{
    const lval *v = &L->vals[x->id];
    const ptc_lbuf *buf = L->p->bufs[v->buf];
    ptc_lexpr e;
    memset(&e, 0, sizeof e);
    e.op = PTC_L_LOAD;
    e.dtype = buf->dtype;
    e.arg[0] = e.arg[1] = e.arg[2] = -1;
    e.buf = v->buf;
    e.nidx = buf->ndim;
    e.idx = map_at(L, v, at);
    return ptc_body_emit(L->a, b, &e);
}

static int masked_load_at(lowerer *L, ptc_lbody *b, const ptc_value *x, const ptc_ix *const *at,
                          int mask, double other)
{
    const lval *v = &L->vals[x->id];
    const ptc_lbuf *buf = L->p->bufs[v->buf];
    ptc_lexpr e;
    memset(&e, 0, sizeof e);
    e.op = PTC_L_LOAD;
    e.dtype = buf->dtype;
    e.arg[0] = mask;
    e.arg[1] = e.arg[2] = -1;
    e.buf = v->buf;
    e.nidx = buf->ndim;
    e.idx = map_at(L, v, at);
    e.is_int = !ptc_dtype_is_float(buf->dtype);
    e.fval = other;
    e.ival = e.is_int ? (int64_t)other : 0;
    return ptc_body_emit(L->a, b, &e);
}

static void set_identity(lowerer *L, const ptc_value *v, int buf)
{
    lval *lv = &L->vals[v->id];
    lv->buf = buf;
    lv->ndim = v->type.ndim;
    lv->idx = identity_vars(L->a, &v->type);
}

static void copy_prov(lowerer *L, ptc_lnode *n, ptc_lbuf *out)
{
    const ptc_node *src = L->cur;
    ptc_lnode_set_prov(L->p, n, src->nprov, src->prov);
    const char *name = ptc_op_name(src->op);
    n->label = strncmp(name, "prims.", 6) == 0 ? name + 6 : name;
    if (out) {
        out->nprov = n->nprov;
        out->prov = n->prov;
    }
}

/* A new node writing a new temp buffer shaped like value v. */
static ptc_lnode *new_node(lowerer *L, int kind, const ptc_value *v, ptc_dtype dt)
{
    ptc_lnode *n = ptc_lprog_add_node(L->p, kind);
    ptc_lbuf *b = ptc_lprog_add_buf(L->p, dt, v->type.ndim, v->type.shape, PTC_LB_TEMP);
    b->def = n->id;
    n->out[0] = b->id;
    n->ndim = v->type.ndim;
    for (int i = 0; i < n->ndim; i++)
        n->ranges[i] = v->type.shape[i];
    copy_prov(L, n, b);
    set_identity(L, v, b->id);
    return n;
}

/* ---- pointwise -------------------------------------------------------------------------- */

/* The loop-IR op of a pointwise prim (pointwise.def's PW_PRIM rows), or -1. */
static int lop_of(ptc_op op)
{
    switch (op) {
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit)                                \
    case PTC_OP_##id:                                                                              \
        return PTC_L_##lop;
#include "ir/pointwise.def"
    default: return -1;
    }
}

/* An integer divisor of //, % or a truncating division, checked to be non-zero:
 * eager raises ZeroDivisionError where float division gives inf or nan. */
static int check_divisor(lowerer *L, ptc_lbody *b, int lop, int y)
{
    const ptc_lexpr *d = &b->e[y];
    if ((lop != PTC_L_DIV && lop != PTC_L_FLOOR_DIVIDE && lop != PTC_L_REMAINDER &&
         lop != PTC_L_FMOD) ||
        ptc_dtype_is_float(d->dtype) || (d->op == PTC_L_CONST && d->ival != 0))
        return y;
    int zero = ptc_lbody_const_i(L->a, b, 0, d->dtype);
    int ok = ptc_lbody_binary(L->a, b, PTC_L_NE, PTC_BOOL, y, zero);
    return ptc_lbody_check(L->a, b, PTC_CHECK_ZERO_DIV, 0, ok, y, y);
}

static int lower_pointwise(lowerer *L, const ptc_node *n)
{
    const ptc_value *out = n->outs[0];
    int lop = lop_of(n->op);
    ptc_lnode *ln = new_node(L, PTC_LN_POINTWISE, out, out->type.dtype);
    const ptc_ix **at = identity_vars(L->a, &out->type);
    int ops[3];
    int k = 0;
    for (int i = 0; i < n->nargs && k < 3; i++)
        if (n->args[i].kind == PTC_ARG_VALUE)
            ops[k++] = load_at(L, &ln->body, n->args[i].v, at);
    if (n->op == PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE) {
        ln->value = ptc_lbody_cast(L->a, &ln->body, out->type.dtype, ops[0]);
    } else if (lop == PTC_L_WHERE) {
        ln->value = ptc_lbody_where(L->a, &ln->body, out->type.dtype, ops[0], ops[1], ops[2]);
    } else if (ptc_lop_arity(lop) == 1) {
        ln->value = ptc_lbody_unary(L->a, &ln->body, lop, out->type.dtype, ops[0]);
    } else {
        ops[1] = check_divisor(L, &ln->body, lop, ops[1]);
        ln->value = ptc_lbody_binary(L->a, &ln->body, lop, out->type.dtype, ops[0], ops[1]);
    }
    return 0;
}

/* ---- views ------------------------------------------------------------------------------- */

static int64_t int_of(const ptc_arg *a, int i) { return a->is.d[i].value; }

static void add_view_record(lowerer *L, const ptc_node *n)
{
    const ptc_value *v = n->outs[0];
    const lval *lv = &L->vals[v->id];
    const ptc_lbuf *b = L->p->bufs[lv->buf];
    ptc_buf t = {0};
    ptc_buf_printf(&t, "view %%%s = %s -> %s[", v->name, ptc_op_name(n->op), b->name);
    const char *names[PTC_MAX_DIMS] = {"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"};
    for (int d = 0; d < b->ndim; d++) {
        if (d)
            ptc_buf_puts(&t, ", ");
        ptc_ix_print(&t, lv->idx[d], names, PTC_MAX_DIMS);
    }
    ptc_buf_putc(&t, ']');
    if (n->nprov) {
        ptc_buf_puts(&t, "  <-");
        for (int i = 0; i < n->nprov; i++)
            ptc_buf_printf(&t, "%s %%%s", i ? "," : "", n->prov[i]);
    }
    ptc_lprog *p = L->p;
    if (p->nviews == p->cap_views) {
        p->cap_views = p->cap_views ? 2 * p->cap_views : 16;
        const char **nv = PTC_NEWN(L->a, const char *, p->cap_views);
        if (p->nviews)
            memcpy(nv, p->views, sizeof *nv * (size_t)p->nviews);
        p->views = nv;
    }
    p->views[p->nviews++] = ptc_arena_strdup(L->a, t.data);
    ptc_buf_free(&t);
}

/* out = x seen through `map` (one ix per x dim over out's variables). */
static void set_view(lowerer *L, const ptc_value *x, const ptc_value *out, const ptc_ix *const *map)
{
    const lval *xv = &L->vals[x->id];
    lval *ov = &L->vals[out->id];
    ov->buf = xv->buf;
    ov->ndim = out->type.ndim;
    ov->idx = map_at(L, xv, map);
}

static int lower_view(lowerer *L, const ptc_node *n)
{
    const ptc_value *x = n->args[0].v, *out = n->outs[0];
    ptc_arena *a = L->a;
    const ptc_ix **y = identity_vars(a, &out->type);
    const ptc_ix *map[PTC_MAX_DIMS];
    const ptc_ttype *xt = &x->type, *ot = &out->type;
    switch (n->op) {
    case PTC_OP_PRIMS_BROADCAST_IN_DIM: {
        const ptc_arg *bd = ptc_node_arg(n, "broadcast_dimensions");
        for (int i = 0; i < xt->ndim; i++) {
            int d = (int)int_of(bd, i);
            bool stretched = ptc_dim_is_static(xt->shape[i]) && xt->shape[i].value == 1 &&
                             !(ptc_dim_is_static(ot->shape[d]) && ot->shape[d].value == 1);
            map[i] = stretched ? ptc_ix_int(a, 0) : y[d];
        }
        break;
    }
    case PTC_OP_PRIMS_PERMUTE: {
        const ptc_arg *dims = ptc_node_arg(n, "dims");
        for (int j = 0; j < ot->ndim; j++)
            map[int_of(dims, j)] = y[j];
        break;
    }
    case PTC_OP_PRIMS_SLICE: {
        const ptc_arg *st = ptc_node_arg(n, "start_indices"), *sp = ptc_node_arg(n, "strides");
        for (int i = 0; i < xt->ndim; i++) {
            ptc_dim step = sp->is.n ? sp->is.d[i] : ptc_dim_c(1);
            map[i] = ptc_ix_madd(a, y[i], step, ptc_ix_const(a, st->is.d[i]));
        }
        break;
    }
    case PTC_OP_PRIMS_RESHAPE: {
        /* flat index of out, unflattened over x's shape (an empty tensor is
         * never indexed: ix division by a zero size gives 0) */
        const ptc_ix *flat = ptc_ix_int(a, 0);
        ptc_dim s = ptc_dim_c(1);
        for (int j = ot->ndim - 1; j >= 0; j--) {
            flat = ptc_ix_madd(a, y[j], s, flat);
            s = ptc_dim_mul(a, s, ot->shape[j]);
        }
        s = ptc_dim_c(1);
        for (int i = xt->ndim - 1; i >= 0; i--) {
            const ptc_ix *q = ptc_ix_floordiv(a, flat, s);
            map[i] = i == 0 ? q : ptc_ix_mod(a, q, xt->shape[i]);
            s = ptc_dim_mul(a, s, xt->shape[i]);
        }
        break;
    }
    default: return lfail(L, PTC_ERR_INTERNAL, "not a view");
    }
    set_view(L, x, out, map);
    add_view_record(L, n);
    return 0;
}

/* ---- creation ------------------------------------------------------------------------------ */

/* A scalar constant in the body: a symbolic int becomes an index value. */
static int const_arg(lowerer *L, ptc_lbody *b, const ptc_arg *v, ptc_dtype dt)
{
    switch (v->kind) {
    case PTC_ARG_FLOAT: return ptc_lbody_const_f(L->a, b, v->f, dt);
    case PTC_ARG_BOOL: return ptc_lbody_const_i(L->a, b, v->b, dt);
    case PTC_ARG_INT:
        if (ptc_dim_is_static(v->i))
            return ptc_lbody_const_i(L->a, b, v->i.value, dt);
        return ptc_lbody_cast(L->a, b, dt, ptc_lbody_index(L->a, b, ptc_ix_const(L->a, v->i)));
    default: return ptc_lbody_const_i(L->a, b, 0, dt);
    }
}

static const ptc_ix *flat_index(ptc_arena *a, const ptc_ttype *t)
{
    const ptc_ix *flat = ptc_ix_int(a, 0);
    ptc_dim s = ptc_dim_c(1);
    for (int j = t->ndim - 1; j >= 0; j--) {
        flat = ptc_ix_madd(a, ptc_ix_var(a, j, t->shape[j]), s, flat);
        s = ptc_dim_mul(a, s, t->shape[j]);
    }
    return flat;
}

static int lower_creation(lowerer *L, const ptc_node *n)
{
    const ptc_value *out = n->outs[0];
    ptc_dtype dt = out->type.dtype;
    ptc_lnode *ln = new_node(L, PTC_LN_POINTWISE, out, dt);
    ptc_arena *a = L->a;
    switch (n->op) {
    case PTC_OP_PRIMS_FULL:
        ln->value = const_arg(L, &ln->body, ptc_node_arg(n, "fill_value"), dt);
        break;
    case PTC_OP_PRIMS_IOTA: {
        const ptc_arg *st = ptc_node_arg(n, "start"), *sp = ptc_node_arg(n, "step");
        const ptc_ix *ix = ptc_ix_madd(a, ptc_ix_var(a, 0, out->type.shape[0]), sp->i, ptc_ix_const(a, st->i));
        ln->value = ptc_lbody_cast(a, &ln->body, dt, ptc_lbody_index(a, &ln->body, ix));
        break;
    }
    default: {
        ptc_lexpr e;
        memset(&e, 0, sizeof e);
        e.op = n->op == PTC_OP_PRIMS_RAND ? PTC_L_RAND : PTC_L_RANDN;
        e.dtype = PTC_F32;
        e.arg[0] = e.arg[1] = e.arg[2] = -1;
        e.buf = -1;
        e.ix = flat_index(a, &out->type);
        const ptc_arg *seed = ptc_node_arg(n, "seed");
        if (!ptc_dim_is_static(seed->i))
            return lfail(L, PTC_ERR_UNSUPPORTED, "symbolic seed");
        e.seed = seed->i.value;
        int r = ptc_lbody_add(a, &ln->body, &e);
        ln->value = ptc_lbody_cast(a, &ln->body, dt, r);
        break;
    }
    }
    return 0;
}

/* ---- pad and cat ----------------------------------------------------------------------------- */

/* A size as an i64 body entry. */
static int dim_entry(lowerer *L, ptc_lbody *b, ptc_dim d)
{
    return ptc_dim_is_static(d) ? ptc_lbody_const_i(L->a, b, d.value, PTC_I64)
                                : ptc_lbody_index(L->a, b, ptc_ix_const(L->a, d));
}

static int idx_cmp(lowerer *L, ptc_lbody *b, int op, int var_entry, ptc_dim bound)
{
    return ptc_lbody_binary(L->a, b, op, PTC_BOOL, var_entry, dim_entry(L, b, bound));
}

static int and_mask(lowerer *L, ptc_lbody *b, int m, int c)
{
    return m < 0 ? c : ptc_lbody_binary(L->a, b, PTC_L_BITWISE_AND, PTC_BOOL, m, c);
}

/* prims.pad: (lo, hi, interior) per dim. Output position y reads input
 * (y - lo) / (interior + 1) where that is a whole in-range position; every
 * other position is the padding value. Negative lo / hi crop. */
static int lower_pad(lowerer *L, const ptc_node *n)
{
    const ptc_value *x = n->args[0].v, *out = n->outs[0];
    ptc_arena *a = L->a;
    const ptc_arg *cfg = ptc_node_arg(n, "padding_config");
    for (int i = 0; i < x->type.ndim; i++)
        if (!ptc_dim_is_static(cfg->is.d[3 * i + 2]))
            return lfail(L, PTC_ERR_UNSUPPORTED, "symbolic interior padding");
    ptc_lnode *ln = new_node(L, PTC_LN_POINTWISE, out, out->type.dtype);
    const ptc_ix *at[PTC_MAX_DIMS];
    int mask = -1;
    for (int i = 0; i < x->type.ndim; i++) {
        ptc_dim lo = cfg->is.d[3 * i], hi = cfg->is.d[3 * i + 1];
        int64_t step = cfg->is.d[3 * i + 2].value + 1;
        const ptc_ix *y = ptc_ix_var(a, i, out->type.shape[i]);
        const ptc_ix *t = ptc_ix_add(a, y, ptc_ix_const(a, ptc_dim_mul(a, lo, ptc_dim_c(-1))));
        at[i] = step == 1 ? t : ptc_ix_floordiv(a, t, ptc_dim_c(step));
        bool lo_pad = !(ptc_dim_is_static(lo) && lo.value <= 0);
        bool hi_pad = !(ptc_dim_is_static(hi) && hi.value <= 0);
        if (!lo_pad && !hi_pad && step == 1)
            continue;
        int tv = ptc_lbody_index(a, &ln->body, t);
        if (lo_pad)
            mask = and_mask(L, &ln->body, mask, idx_cmp(L, &ln->body, PTC_L_GE, tv, ptc_dim_c(0)));
        /* the last input element sits at (size - 1) * step */
        ptc_dim last = ptc_dim_mul(a, ptc_dim_sub(a, x->type.shape[i], ptc_dim_c(1)), ptc_dim_c(step));
        if (hi_pad || step > 1)
            mask = and_mask(L, &ln->body, mask, idx_cmp(L, &ln->body, PTC_L_LE, tv, last));
        if (step > 1) {
            int r = ptc_lbody_binary(a, &ln->body, PTC_L_REMAINDER, PTC_I64, tv,
                                     ptc_lbody_const_i(a, &ln->body, step, PTC_I64));
            mask = and_mask(L, &ln->body, mask, idx_cmp(L, &ln->body, PTC_L_EQ, r, ptc_dim_c(0)));
        }
    }
    const ptc_arg *pv = ptc_node_arg(n, "padding_value");
    if (mask < 0) {
        ln->value = load_at(L, &ln->body, x, at);
        return 0;
    }
    int ld = masked_load_at(L, &ln->body, x, at, mask, 0);
    ln->value = ptc_lbody_where(a, &ln->body, out->type.dtype, mask, ld,
                                const_arg(L, &ln->body, pv, out->type.dtype));
    return 0;
}

static int lower_cat(lowerer *L, const ptc_node *n)
{
    const ptc_value *out = n->outs[0];
    const ptc_arg *ts = ptc_node_arg(n, "tensors");
    int dim = ptc_wrap_dim(ptc_node_arg(n, "dim")->i.value, out->type.ndim);
    ptc_arena *a = L->a;
    ptc_lnode *ln = new_node(L, PTC_LN_POINTWISE, out, out->type.dtype);
    const ptc_ix **y = identity_vars(a, &out->type);
    int yv = ptc_lbody_index(a, &ln->body, y[dim]);
    ptc_dim off = ptc_dim_c(0);
    int *loads = malloc(sizeof(int) * (size_t)ts->vs.n), *masks = malloc(sizeof(int) * (size_t)ts->vs.n);
    for (int k = 0; k < ts->vs.n; k++) {
        const ptc_value *t = ts->vs.v[k];
        ptc_dim end = ptc_dim_add(a, off, t->type.shape[dim]);
        const ptc_ix *at[PTC_MAX_DIMS];
        for (int i = 0; i < out->type.ndim; i++)
            at[i] = i == dim ? ptc_ix_add(a, y[i], ptc_ix_const(a, ptc_dim_mul(a, off, ptc_dim_c(-1))))
                             : y[i];
        int m = -1;
        if (k > 0)
            m = idx_cmp(L, &ln->body, PTC_L_GE, yv, off);
        if (k + 1 < ts->vs.n)
            m = and_mask(L, &ln->body, m, idx_cmp(L, &ln->body, PTC_L_LT, yv, end));
        masks[k] = m;
        loads[k] = m < 0 ? load_at(L, &ln->body, t, at) : masked_load_at(L, &ln->body, t, at, m, 0);
        off = end;
    }
    int v = loads[ts->vs.n - 1];
    for (int k = ts->vs.n - 2; k >= 0; k--)
        v = ptc_lbody_where(a, &ln->body, out->type.dtype, masks[k], loads[k], v);
    ln->value = v;
    free(loads);
    free(masks);
    return 0;
}

/* ---- reductions ------------------------------------------------------------------------------- */

/* A reduction node over x: kept dims become ranges, masked dims reductions. */
static ptc_lnode *reduction_over(lowerer *L, const ptc_value *x, const bool *mask, int reduce,
                                 ptc_dtype dt, int nout)
{
    ptc_arena *a = L->a;
    ptc_lnode *ln = ptc_lprog_add_node(L->p, PTC_LN_REDUCTION);
    ln->reduce = (uint8_t)reduce;
    const ptc_ix *at[PTC_MAX_DIMS];
    for (int i = 0; i < x->type.ndim; i++)
        if (!mask[i])
            ln->ranges[ln->ndim++] = x->type.shape[i];
    int k = 0, r = 0;
    for (int i = 0; i < x->type.ndim; i++) {
        if (mask[i]) {
            at[i] = ptc_ix_var(a, ln->ndim + r, x->type.shape[i]);
            ln->red[r++] = x->type.shape[i];
        } else {
            at[i] = ptc_ix_var(a, k++, x->type.shape[i]);
        }
    }
    ln->nred = r;
    ln->value = load_at(L, &ln->body, x, at);
    if (ptc_dtype_is_float(dt) != ptc_dtype_is_float(x->type.dtype) || dt == PTC_BOOL)
        ln->value = ptc_lbody_cast(a, &ln->body, dt, ln->value);
    for (int o = 0; o < nout; o++) {
        const ptc_value *ov = L->cur->outs[o];
        ptc_lbuf *b = ptc_lprog_add_buf(L->p, ov->type.dtype, ov->type.ndim, ov->type.shape,
                                        PTC_LB_TEMP);
        b->def = ln->id;
        ln->out[o] = b->id;
        set_identity(L, ov, b->id);
    }
    copy_prov(L, ln, L->p->bufs[ln->out[0]]);
    for (int o = 1; o < nout; o++) {
        L->p->bufs[ln->out[o]]->nprov = ln->nprov;
        L->p->bufs[ln->out[o]]->prov = ln->prov;
    }
    return ln;
}

static int lower_reduce(lowerer *L, const ptc_node *n)
{
    const ptc_value *x = n->args[0].v;
    bool mask[PTC_MAX_DIMS] = {0};
    int nmask = 0;
    if (n->op == PTC_OP_PRIMS_ARGMAX || n->op == PTC_OP_PRIMS_ARGMIN) {
        mask[ptc_wrap_dim(ptc_node_arg(n, "dim")->i.value, x->type.ndim)] = true;
        nmask = 1;
    } else {
        const ptc_arg *dims = ptc_node_arg(n, "dims");
        for (int i = 0; i < dims->is.n; i++, nmask++)
            mask[ptc_wrap_dim(dims->is.d[i].value, x->type.ndim)] = true;
    }
    if (nmask == 0 && n->op != PTC_OP_PRIMS_VAR_MEAN) {
        L->vals[n->outs[0]->id] = L->vals[x->id]; /* reducing no dims: the value itself */
        return 0;
    }
    int red;
    switch (n->op) {
    case PTC_OP_PRIMS_SUM: red = PTC_RED_SUM; break;
    case PTC_OP_PRIMS_PROD: red = PTC_RED_PROD; break;
    case PTC_OP_PRIMS_AMAX: red = PTC_RED_MAX; break;
    case PTC_OP_PRIMS_AMIN: red = PTC_RED_MIN; break;
    case PTC_OP_PRIMS_ARGMAX: red = PTC_RED_ARGMAX; break;
    case PTC_OP_PRIMS_ARGMIN: red = PTC_RED_ARGMIN; break;
    default: red = PTC_RED_WELFORD; break;
    }
    ptc_lnode *ln = reduction_over(L, x, mask, red, x->type.dtype, n->nout);
    if (red == PTC_RED_WELFORD)
        ln->correction = ptc_node_arg(n, "correction")->f;
    return 0;
}

/* ---- gathers ------------------------------------------------------------------------------------ */

/* An index value loaded from idx at `at`, checked to lie in [0, size) (the
 * check fails the call with eager's error `check` and gives 0 instead, so
 * that a load never leaves its buffer), as a VAL atom. Where size may be 0 the
 * load is masked too: index 0 is outside an empty buffer. */
static const ptc_ix *index_atom(lowerer *L, ptc_lbody *b, const ptc_value *idx,
                                const ptc_ix *const *at, ptc_dim size, int check, int dim,
                                int *mask)
{
    ptc_arena *a = L->a;
    int v = ptc_lbody_cast(a, b, PTC_I64, load_at(L, b, idx, at));
    int bound = dim_entry(L, b, size);
    int ok = and_mask(L, b, idx_cmp(L, b, PTC_L_GE, v, ptc_dim_c(0)),
                      ptc_lbody_binary(a, b, PTC_L_LT, PTC_BOOL, v, bound));
    int safe = ptc_lbody_check(a, b, check, dim, ok, v, bound);
    if (!ptc_dim_is_static(size) || size.value == 0)
        *mask = and_mask(L, b, *mask, ok);
    return ptc_ix_val(a, safe, size);
}

/* prims.check_index: i where -size <= i < size (else the call fails with
 * eager's IndexError), counted from the end when negative. */
static int lower_check_index(lowerer *L, const ptc_node *n)
{
    const ptc_value *idx = ptc_node_arg(n, "index")->v, *out = n->outs[0];
    int dim = (int)ptc_node_arg(n, "dim")->i.value;
    ptc_arena *a = L->a;
    ptc_lnode *ln = new_node(L, PTC_LN_POINTWISE, out, PTC_I64);
    ptc_lbody *b = &ln->body;
    int v = load_at(L, b, idx, identity_vars(a, &out->type));
    int size = dim_entry(L, b, ptc_node_arg(n, "size")->i);
    int low = ptc_lbody_unary(a, b, PTC_L_NEG, PTC_I64, size);
    int ok = and_mask(L, b, ptc_lbody_binary(a, b, PTC_L_GE, PTC_BOOL, v, low),
                      ptc_lbody_binary(a, b, PTC_L_LT, PTC_BOOL, v, size));
    int c = ptc_lbody_check(a, b, PTC_CHECK_INDEX_ADV, dim, ok, v, size);
    int neg = ptc_lbody_binary(a, b, PTC_L_LT, PTC_BOOL, c, ptc_lbody_const_i(a, b, 0, PTC_I64));
    ln->value =
        ptc_lbody_where(a, b, PTC_I64, neg, ptc_lbody_binary(a, b, PTC_L_ADD, PTC_I64, c, size), c);
    return 0;
}

static int lower_gather(lowerer *L, const ptc_node *n)
{
    const ptc_value *x = ptc_node_arg(n, "a")->v, *idx = ptc_node_arg(n, "index")->v;
    const ptc_value *out = n->outs[0];
    int dim = ptc_wrap_dim(ptc_node_arg(n, "dim")->i.value, x->type.ndim > 0 ? x->type.ndim : 1);
    if (dim < 0 || x->type.ndim == 0)
        return lfail(L, PTC_ERR_UNSUPPORTED, "gather over a 0-dim tensor or a bad dim");
    ptc_arena *a = L->a;
    ptc_lnode *ln = new_node(L, PTC_LN_POINTWISE, out, out->type.dtype);
    const ptc_ix **y = identity_vars(a, &out->type);
    const ptc_ix *at[PTC_MAX_DIMS];
    int mask = -1;
    if (n->op == PTC_OP_PRIMS_GATHER) {
        for (int i = 0; i < x->type.ndim; i++)
            at[i] = y[i];
        at[dim] = index_atom(L, &ln->body, idx, y, x->type.shape[dim], PTC_CHECK_INDEX, dim, &mask);
    } else { /* index_select (and embedding) */
        for (int i = 0; i < x->type.ndim; i++)
            at[i] = y[i];
        const ptc_ix *iy[1] = {y[dim]};
        /* eager's CPU kernel for dim 1 of a matrix or more has its own message */
        int check = dim == 1 && x->type.ndim >= 2 ? PTC_CHECK_INDEX_DIM1 : PTC_CHECK_INDEX_RANGE;
        at[dim] = index_atom(L, &ln->body, idx, iy, x->type.shape[dim], check, dim, &mask);
    }
    ln->value = masked_load_at(L, &ln->body, x, at, mask, 0);
    return 0;
}

/* ---- externs ------------------------------------------------------------------------------------ */

/* The element offset v's map reads in its buffer, as one expression: a
 * flatten of a contiguous buffer ([8,64,1024] read as [512,1024]) has a
 * div and a mod per buffer dimension but folds to 1024*o0 + o1. */
static const ptc_ix *flat_offset(lowerer *L, const lval *lv, const ptc_lbuf *b)
{
    const ptc_ix *off = ptc_ix_int(L->a, 0);
    for (int d = 0; d < b->ndim; d++)
        off = ptc_ix_madd(L->a, lv->idx[d], b->strides[d], off);
    return off;
}

static bool is_affine(const ptc_ix *x)
{
    for (int t = 0; t < x->nterms; t++)
        if (x->terms[t].atom->kind != PTC_IXA_VAR)
            return false;
    return true;
}

/* A strided view of value v, copying it first if its map is not affine
 * (reshaping a contiguous buffer is: the extern reads it in place). */
static int extern_view(lowerer *L, const ptc_value *v, ptc_lview *out)
{
    ptc_arena *a = L->a;
    lval *lv = &L->vals[v->id];
    const ptc_lbuf *b = L->p->bufs[lv->buf];
    const ptc_ix *flat = flat_offset(L, lv, b);
    if (!is_affine(flat)) {
        ptc_lnode *cp = ptc_lprog_add_node(L->p, PTC_LN_POINTWISE);
        ptc_lbuf *nb = ptc_lprog_add_buf(L->p, v->type.dtype, v->type.ndim, v->type.shape, PTC_LB_TEMP);
        nb->def = cp->id;
        cp->out[0] = nb->id;
        cp->ndim = v->type.ndim;
        for (int i = 0; i < cp->ndim; i++)
            cp->ranges[i] = v->type.shape[i];
        cp->value = load_at(L, &cp->body, v, identity_vars(a, &v->type));
        copy_prov(L, cp, nb);
        cp->label = "copy";
        set_identity(L, v, nb->id);
        lv = &L->vals[v->id];
        flat = flat_offset(L, lv, nb);
    }
    out->buf = lv->buf;
    out->ndim = v->type.ndim;
    out->offset = flat->constant;
    for (int j = 0; j < v->type.ndim; j++) {
        out->sizes[j] = v->type.shape[j];
        out->strides[j] = ptc_dim_c(0);
    }
    for (int t = 0; t < flat->nterms; t++) {
        int j = flat->terms[t].atom->id;
        out->strides[j] = ptc_dim_add(a, out->strides[j], flat->terms[t].coeff);
    }
    return 0;
}

static ptc_lnode *new_extern(lowerer *L, const ptc_node *n, int xkind)
{
    /* views first: a copy they need must run before the extern */
    const ptc_schema *s = ptc_op_schema(n->op);
    ptc_lview *xin = PTC_NEWN(L->a, ptc_lview, s->nparams);
    int nxin = 0;
    for (int i = 0; i < n->nargs; i++) {
        if (s->params[i].kind != PTC_PK_TENSOR && s->params[i].kind != PTC_PK_TENSOR_OPT)
            continue;
        ptc_lview *v = &xin[nxin++];
        v->buf = -1;
        if (n->args[i].kind == PTC_ARG_VALUE)
            extern_view(L, n->args[i].v, v);
    }
    ptc_lnode *ln = ptc_lprog_add_node(L->p, PTC_LN_EXTERN);
    ln->xnode = n;
    ln->xkind = (uint8_t)xkind;
    ln->xin = xin;
    ln->nxin = nxin;
    for (int o = 0; o < n->nout && o < 2; o++) {
        const ptc_value *ov = n->outs[o];
        ptc_lbuf *b = ptc_lprog_add_buf(L->p, ov->type.dtype, ov->type.ndim, ov->type.shape, PTC_LB_TEMP);
        b->def = ln->id;
        ln->out[o] = b->id;
        set_identity(L, ov, b->id);
    }
    copy_prov(L, ln, ln->out[0] >= 0 ? L->p->bufs[ln->out[0]] : NULL);
    return ln;
}

/* The nodes using each value, as ranges of one array (lowerer.users). */
static int index_users(lowerer *L)
{
    const ptc_graph *g = L->g;
    L->user_start = calloc((size_t)g->nvalues + 2, sizeof *L->user_start);
    int total = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nargs; j++)
            total += ptc_arg_nvalues(&g->nodes[i]->args[j]);
    L->users = malloc(sizeof *L->users * (size_t)(total + 1));
    if (!L->user_start || !L->users)
        return -1;
    for (int pass = 0; pass < 2; pass++) {
        int *fill = pass ? calloc((size_t)g->nvalues + 1, sizeof *fill) : NULL;
        if (pass && !fill)
            return -1;
        for (int i = 0; i < g->nnodes; i++)
            for (int j = 0; j < g->nodes[i]->nargs; j++)
                for (int k = 0; k < ptc_arg_nvalues(&g->nodes[i]->args[j]); k++) {
                    const ptc_value *v = ptc_arg_value_at(&g->nodes[i]->args[j], k);
                    if (v && !pass)
                        L->user_start[v->id + 1]++;
                    else if (v)
                        L->users[L->user_start[v->id] + fill[v->id]++] = i;
                }
        if (!pass)
            for (int v = 0; v < g->nvalues; v++)
                L->user_start[v + 1] += L->user_start[v];
        free(fill);
    }
    return 0;
}

/* Whether a loop (pointwise, reduction, gather...) reads v, looking
 * through views, besides the externs that may read it and the graph
 * outputs it may be. */
static bool a_loop_reads(lowerer *L, const ptc_value *v, int depth)
{
    const ptc_graph *g = L->g;
    for (int u = L->user_start[v->id]; u < L->user_start[v->id + 1]; u++) {
        const ptc_node *n = g->nodes[L->users[u]];
        unsigned flags = ptc_op_flags(n->op);
        if ((flags & PTC_F_EXTERN) || n->op == PTC_OP_PRIMS_CUMSUM ||
            n->op == PTC_OP_PRIMS_CUMPROD || n->op == PTC_OP_PRIMS_SCATTER_ADD ||
            n->op == PTC_OP_PRIMS_SCATTER)
            continue;
        if (!(flags & PTC_F_VIEW) || n->nout != 1 || depth > 16 ||
            a_loop_reads(L, n->outs[0], depth + 1))
            return true;
    }
    return false;
}

/* Whether a bias add after an mm (the sum `sum`) is better one addmm (the
 * BLAS adds it) than the mm alone with the add fused into the kernel that
 * reads the product. Where no kernel reads the sum (only externs read it,
 * through views, or the graph returns it: GPT-2's qkv projection, which
 * attention reads), always: the add would be a kernel of its own, a launch
 * and a pass over the product that the BLAS's epilogue saves. Where a
 * kernel reads it (an extern or the caller may too), the reading kernel
 * adds it to a product seen through a reshape (a linear layer's [rows,
 * out] product as [batch, length, out]), and the BLAS to a 2-d product
 * (Hugging Face's Conv1D: addmm(bias, x, W)), except on CUDA in float32:
 * there torch's addmm is cuBLASLt's bias epilogue, whose kernel choice is
 * slower than mm's for some shapes (H100, GPT-2's four 128-row matmuls:
 * 26/34/32/65 us against mm's 24/29/33/33 us), so the kernel adds it.
 * (Inductor unfuses the add into the users only when every use is
 * pointwise; a sum a kernel and an extern both read keeps the kernel's add
 * here, as before, unmeasured either way.) */
static bool bias_in_blas(lowerer *L, const ptc_value *sum, bool reshaped)
{
    if (!a_loop_reads(L, sum, 0))
        return true;
    ptc_device dev = sum->type.device;
    return !reshaped && !(dev.kind == PTC_DEV_CUDA && sum->type.dtype == PTC_F32);
}

/* The mm whose product p is, or NULL: p itself, or p a reshape of it that
 * splits its rows and keeps its columns; each used once. */
static const ptc_value *mm_product(lowerer *L, const ptc_value *p)
{
    if (p->def && p->def->op == PTC_OP_PRIMS_RESHAPE && L->uses[p->id] == 1) {
        const ptc_value *m = p->def->args[0].v;
        if (m->type.ndim == 2 && p->type.ndim > 2 &&
            ptc_dim_eq(m->type.shape[1], p->type.shape[p->type.ndim - 1]))
            p = m;
    }
    if (!p->def || p->def->op != PTC_OP_MM || L->uses[p->id] != 1 || p->type.ndim != 2)
        return NULL;
    return p;
}

/* mm followed only by + bias[N] (broadcast over rows) is one addmm. */
static bool try_addmm(lowerer *L, const ptc_node *n)
{
    if (n->op != PTC_OP_PRIMS_ADD)
        return false;
    for (int side = 0; side < 2; side++) {
        const ptc_value *p = n->args[side].v, *bv = n->args[1 - side].v;
        const ptc_value *m = mm_product(L, p);
        if (!m || !bias_in_blas(L, n->outs[0], m != p))
            continue;
        if (!bv->def || bv->def->op != PTC_OP_PRIMS_BROADCAST_IN_DIM)
            continue;
        const ptc_value *bias = bv->def->args[0].v;
        const ptc_arg *bd = ptc_node_arg(bv->def, "broadcast_dimensions");
        if (bias->type.ndim != 1 || bd->is.d[0].value != p->type.ndim - 1 ||
            bias->type.dtype != p->type.dtype)
            continue;
        /* the mm's extern node is the writer of p's buffer */
        ptc_lnode *mmn = L->p->nodes[L->p->bufs[L->vals[m->id].buf]->def];
        if (mmn->kind != PTC_LN_EXTERN || mmn->xnode != m->def)
            continue;
        const lval *bl = &L->vals[bias->id];
        bool affine = true;
        for (int t = 0; t < bl->idx[0]->nterms; t++)
            affine &= bl->idx[0]->terms[t].atom->kind == PTC_IXA_VAR;
        if (!affine || L->p->bufs[bl->buf]->def > mmn->id)
            continue;
        ptc_lview bview;
        extern_view(L, bias, &bview);
        ptc_node *an = PTC_NEW(L->a, ptc_node);
        an->op = PTC_OP_ADDMM;
        an->id = n->id;
        an->nargs = 5;
        an->args = PTC_NEWN(L->a, ptc_arg, 5);
        an->args[0] = ptc_arg_value((ptc_value *)bias);
        an->args[1] = m->def->args[0];
        an->args[2] = m->def->args[1];
        an->args[3] = ptc_arg_int(1);
        an->args[4] = ptc_arg_int(1);
        an->nout = 1;
        an->outs = PTC_NEWN(L->a, ptc_value *, 1);
        an->outs[0] = m == p ? n->outs[0] : (ptc_value *)m; /* the product's 2-d shape */
        an->nprov = n->nprov;
        an->prov = n->prov;
        ptc_lview *xin = PTC_NEWN(L->a, ptc_lview, 3);
        xin[0] = bview;
        xin[1] = mmn->xin[0];
        xin[2] = mmn->xin[1];
        mmn->xin = xin;
        mmn->nxin = 3;
        mmn->xnode = an;
        mmn->label = "addmm";
        int nprov = mmn->nprov + n->nprov;
        const char **prov = PTC_NEWN(L->a, const char *, nprov > 0 ? nprov : 1);
        int k = 0;
        for (int i = 0; i < mmn->nprov; i++)
            prov[k++] = mmn->prov[i];
        for (int i = 0; i < n->nprov; i++) {
            bool dup = false;
            for (int j = 0; j < k; j++)
                dup |= strcmp(prov[j], n->prov[i]) == 0;
            if (!dup)
                prov[k++] = n->prov[i];
        }
        mmn->nprov = k;
        mmn->prov = prov;
        L->vals[n->outs[0]->id] = L->vals[p->id];
        return true;
    }
    return false;
}

/* ---- pooling ------------------------------------------------------------------------------------ */

typedef struct poolgeo {
    int lead;                 /* leading dims before H, W */
    ptc_dim H, W;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
} poolgeo;

static int pool_params(lowerer *L, const ptc_node *n, poolgeo *g, bool dilation)
{
    const ptc_value *x = n->args[0].v;
    const ptc_arg *ks = ptc_node_arg(n, "kernel_size"), *st = ptc_node_arg(n, "stride"),
                  *pd = ptc_node_arg(n, "padding");
    g->lead = x->type.ndim - 2;
    g->H = x->type.shape[g->lead];
    g->W = x->type.shape[g->lead + 1];
    const ptc_arg *lists[3] = {ks, st, pd};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < lists[i]->is.n; j++)
            if (!ptc_dim_is_static(lists[i]->is.d[j]))
                return lfail(L, PTC_ERR_UNSUPPORTED, "symbolic pooling parameters");
    g->kh = ks->is.d[0].value;
    g->kw = ks->is.d[ks->is.n > 1].value;
    g->sh = st->is.n ? st->is.d[0].value : g->kh;
    g->sw = st->is.n ? st->is.d[st->is.n > 1].value : g->kw;
    g->ph = pd->is.d[0].value;
    g->pw = pd->is.d[pd->is.n > 1].value;
    g->dh = g->dw = 1;
    if (dilation) {
        const ptc_arg *dl = ptc_node_arg(n, "dilation");
        g->dh = dl->is.d[0].value;
        g->dw = dl->is.d[dl->is.n > 1].value;
    }
    return 0;
}

/* i64 body arithmetic helpers */
static int I(lowerer *L, ptc_lbody *b, int64_t v) { return ptc_lbody_const_i(L->a, b, v, PTC_I64); }
static int op2(lowerer *L, ptc_lbody *b, int op, int x, int y)
{
    return ptc_lbody_binary(L->a, b, op, PTC_I64, x, y);
}

/* A window reduction over [kh, kw] at out position (oh, ow): input row
 * oh*sh - ph + r0*dh, column ow*sw - pw + r1*dw, masked outside the input. */
static ptc_lnode *window_reduction(lowerer *L, const ptc_node *n, const poolgeo *g, int reduce,
                                   double other, int nout)
{
    ptc_arena *a = L->a;
    const ptc_value *x = n->args[0].v, *out = n->outs[0];
    ptc_lnode *ln = ptc_lprog_add_node(L->p, PTC_LN_REDUCTION);
    ln->reduce = (uint8_t)reduce;
    ln->nan_last = reduce == PTC_RED_ARGMAX; /* torch's max_pool2d: the last NaN */
    ln->ndim = out->type.ndim;
    for (int i = 0; i < ln->ndim; i++)
        ln->ranges[i] = out->type.shape[i];
    ln->nred = 2;
    ln->red[0] = ptc_dim_c(g->kh);
    ln->red[1] = ptc_dim_c(g->kw);
    const ptc_ix *at[PTC_MAX_DIMS];
    for (int i = 0; i < g->lead; i++)
        at[i] = ptc_ix_var(a, i, out->type.shape[i]);
    const ptc_ix *oh = ptc_ix_var(a, g->lead, out->type.shape[g->lead]);
    const ptc_ix *ow = ptc_ix_var(a, g->lead + 1, out->type.shape[g->lead + 1]);
    const ptc_ix *r0 = ptc_ix_var(a, ln->ndim, ptc_dim_c(g->kh));
    const ptc_ix *r1 = ptc_ix_var(a, ln->ndim + 1, ptc_dim_c(g->kw));
    at[g->lead] = ptc_ix_add(a, ptc_ix_madd(a, oh, ptc_dim_c(g->sh), ptc_ix_scale(a, r0, ptc_dim_c(g->dh))),
                             ptc_ix_int(a, -g->ph));
    at[g->lead + 1] = ptc_ix_add(a, ptc_ix_madd(a, ow, ptc_dim_c(g->sw), ptc_ix_scale(a, r1, ptc_dim_c(g->dw))),
                                 ptc_ix_int(a, -g->pw));
    int mask = -1;
    if (g->ph > 0 || g->pw > 0 || true) {
        int ih = ptc_lbody_index(a, &ln->body, at[g->lead]);
        int iw = ptc_lbody_index(a, &ln->body, at[g->lead + 1]);
        mask = and_mask(L, &ln->body, idx_cmp(L, &ln->body, PTC_L_GE, ih, ptc_dim_c(0)),
                        idx_cmp(L, &ln->body, PTC_L_LT, ih, g->H));
        mask = and_mask(L, &ln->body, mask, idx_cmp(L, &ln->body, PTC_L_GE, iw, ptc_dim_c(0)));
        mask = and_mask(L, &ln->body, mask, idx_cmp(L, &ln->body, PTC_L_LT, iw, g->W));
    }
    ln->value = masked_load_at(L, &ln->body, x, at, mask, other);
    for (int o = 0; o < nout; o++) {
        const ptc_value *ov = n->outs[0];
        ptc_dtype dt = reduce == PTC_RED_ARGMAX && o == 0 ? PTC_I64 : x->type.dtype;
        ptc_lbuf *b = ptc_lprog_add_buf(L->p, dt, ov->type.ndim, ov->type.shape, PTC_LB_TEMP);
        b->def = ln->id;
        ln->out[o] = b->id;
    }
    copy_prov(L, ln, L->p->bufs[ln->out[0]]);
    ln->label = reduce == PTC_RED_ARGMAX ? "max_pool" : "avg_pool";
    return ln;
}

/* Row (column) i of a window moved to its first one inside the input, where
 * i lies in the padding before it. The index output reports that position
 * when every value inside the window is -inf, as torch's search starts there;
 * the reduction, whose masked loads read -inf in the padding too, kept its
 * first point, which may lie outside. Elsewhere i is inside: unchanged. */
static int first_inside(lowerer *L, ptc_lbody *b, int i, int64_t dilation)
{
    int before = op2(L, b, PTC_L_MAXIMUM, op2(L, b, PTC_L_SUB, I(L, b, 0), i), I(L, b, 0));
    int steps = op2(L, b, PTC_L_FLOOR_DIVIDE, op2(L, b, PTC_L_ADD, before, I(L, b, dilation - 1)),
                    I(L, b, dilation));
    return op2(L, b, PTC_L_ADD, i, op2(L, b, PTC_L_MUL, steps, I(L, b, dilation)));
}

static int lower_max_pool(lowerer *L, const ptc_node *n)
{
    poolgeo g;
    if (pool_params(L, n, &g, true))
        return -1;
    const ptc_value *x = n->args[0].v;
    bool fl = ptc_dtype_is_float(x->type.dtype);
    ptc_lnode *red = window_reduction(L, n, &g, PTC_RED_ARGMAX, fl ? -INFINITY : (double)INT64_MIN, 2);
    ptc_lbuf *vals = L->p->bufs[red->out[1]];
    set_identity(L, n->outs[0], vals->id);
    if (n->nout < 2)
        return 0;
    /* the index output: the window position as ih * W + iw */
    const ptc_value *io = n->outs[1];
    ptc_lnode *ix = new_node(L, PTC_LN_POINTWISE, io, PTC_I64);
    ptc_lbody *b = &ix->body;
    const ptc_ix **y = identity_vars(L->a, &io->type);
    ptc_lexpr e; /* the argmax position the reduction stored, at this output position */
    memset(&e, 0, sizeof e);
    e.op = PTC_L_LOAD;
    e.dtype = PTC_I64;
    e.arg[0] = e.arg[1] = e.arg[2] = -1;
    e.buf = red->out[0];
    e.nidx = io->type.ndim;
    e.idx = y;
    int rv = ptc_lbody_add(L->a, b, &e);
    int kh = op2(L, b, PTC_L_FLOOR_DIVIDE, rv, I(L, b, g.kw));
    int kw = op2(L, b, PTC_L_REMAINDER, rv, I(L, b, g.kw));
    int oh = ptc_lbody_index(L->a, b, y[g.lead]), ow = ptc_lbody_index(L->a, b, y[g.lead + 1]);
    int ih = op2(L, b, PTC_L_ADD, op2(L, b, PTC_L_SUB, op2(L, b, PTC_L_MUL, oh, I(L, b, g.sh)), I(L, b, g.ph)),
                 op2(L, b, PTC_L_MUL, kh, I(L, b, g.dh)));
    int iw = op2(L, b, PTC_L_ADD, op2(L, b, PTC_L_SUB, op2(L, b, PTC_L_MUL, ow, I(L, b, g.sw)), I(L, b, g.pw)),
                 op2(L, b, PTC_L_MUL, kw, I(L, b, g.dw)));
    if (g.ph > 0)
        ih = first_inside(L, b, ih, g.dh);
    if (g.pw > 0)
        iw = first_inside(L, b, iw, g.dw);
    int W = ptc_dim_is_static(g.W) ? I(L, b, g.W.value) : ptc_lbody_index(L->a, b, ptc_ix_const(L->a, g.W));
    ix->value = op2(L, b, PTC_L_ADD, op2(L, b, PTC_L_MUL, ih, W), iw);
    ix->label = "max_pool_index";
    return 0;
}

/* Sum over a window divided by its size: the divisor per output position is
 * computed in the epilogue from the clipped window, as torch does. */
static int lower_avg_pool(lowerer *L, const ptc_node *n)
{
    poolgeo g;
    if (pool_params(L, n, &g, false))
        return -1;
    if (!ptc_dim_is_static(g.H) || !ptc_dim_is_static(g.W))
        return lfail(L, PTC_ERR_UNSUPPORTED, "avg_pool2d over symbolic sizes");
    const ptc_value *x = n->args[0].v, *out = n->outs[0];
    bool include_pad = ptc_node_arg(n, "count_include_pad")->b;
    const ptc_arg *dov = ptc_node_arg(n, "divisor_override");
    ptc_lnode *red = window_reduction(L, n, &g, PTC_RED_SUM, 0, 1);
    ptc_lnode *ep = new_node(L, PTC_LN_POINTWISE, out, out->type.dtype);
    ptc_lbody *b = &ep->body;
    const ptc_ix **y = identity_vars(L->a, &out->type);
    ptc_lexpr e;
    memset(&e, 0, sizeof e);
    e.op = PTC_L_LOAD;
    e.dtype = x->type.dtype;
    e.arg[0] = e.arg[1] = e.arg[2] = -1;
    e.buf = red->out[0];
    e.nidx = out->type.ndim;
    e.idx = y;
    int sum = ptc_lbody_add(L->a, b, &e);
    int div;
    if (dov->kind != PTC_ARG_NONE) {
        div = I(L, b, dov->i.value);
    } else {
        int64_t H = g.H.value, W = g.W.value;
        int oh = ptc_lbody_index(L->a, b, y[g.lead]), ow = ptc_lbody_index(L->a, b, y[g.lead + 1]);
        int h0 = op2(L, b, PTC_L_SUB, op2(L, b, PTC_L_MUL, oh, I(L, b, g.sh)), I(L, b, g.ph));
        int w0 = op2(L, b, PTC_L_SUB, op2(L, b, PTC_L_MUL, ow, I(L, b, g.sw)), I(L, b, g.pw));
        int h1 = op2(L, b, PTC_L_MINIMUM, op2(L, b, PTC_L_ADD, h0, I(L, b, g.kh)), I(L, b, H + g.ph));
        int w1 = op2(L, b, PTC_L_MINIMUM, op2(L, b, PTC_L_ADD, w0, I(L, b, g.kw)), I(L, b, W + g.pw));
        if (include_pad) {
            div = op2(L, b, PTC_L_MUL, op2(L, b, PTC_L_SUB, h1, h0), op2(L, b, PTC_L_SUB, w1, w0));
        } else {
            h0 = op2(L, b, PTC_L_MAXIMUM, h0, I(L, b, 0));
            w0 = op2(L, b, PTC_L_MAXIMUM, w0, I(L, b, 0));
            h1 = op2(L, b, PTC_L_MINIMUM, h1, I(L, b, H));
            w1 = op2(L, b, PTC_L_MINIMUM, w1, I(L, b, W));
            div = op2(L, b, PTC_L_MUL, op2(L, b, PTC_L_SUB, h1, h0), op2(L, b, PTC_L_SUB, w1, w0));
        }
        /* an empty window (possible with ceil_mode) divides 0 by 1 */
        div = op2(L, b, PTC_L_MAXIMUM, div, I(L, b, 1));
    }
    ptc_dtype dt = out->type.dtype;
    int dv = ptc_lbody_cast(L->a, b, dt, div);
    ep->value = ptc_lbody_binary(L->a, b, ptc_dtype_is_float(dt) ? PTC_L_DIV : PTC_L_DIV, dt, sum, dv);
    ep->label = "avg_pool";
    return 0;
}

/* adaptive_avg_pool2d: windows [floor(o*I/O), ceil((o+1)*I/O)), reduced over
 * the largest window with a mask. */
static int lower_adaptive_pool(lowerer *L, const ptc_node *n)
{
    ptc_arena *a = L->a;
    const ptc_value *x = n->args[0].v, *out = n->outs[0];
    int lead = x->type.ndim - 2;
    ptc_dim H = x->type.shape[lead], W = x->type.shape[lead + 1];
    ptc_dim OH = out->type.shape[lead], OW = out->type.shape[lead + 1];
    if (!ptc_dim_is_static(H) || !ptc_dim_is_static(W) || !ptc_dim_is_static(OH) ||
        !ptc_dim_is_static(OW) || OH.value == 0 || OW.value == 0)
        return lfail(L, PTC_ERR_UNSUPPORTED, "adaptive_avg_pool2d over symbolic sizes");
    int64_t kh = (H.value + OH.value - 1) / OH.value + 1, kw = (W.value + OW.value - 1) / OW.value + 1;
    if (H.value % OH.value == 0)
        kh = H.value / OH.value;
    if (W.value % OW.value == 0)
        kw = W.value / OW.value;
    ptc_lnode *ln = ptc_lprog_add_node(L->p, PTC_LN_REDUCTION);
    ln->reduce = PTC_RED_SUM;
    ln->ndim = out->type.ndim;
    for (int i = 0; i < ln->ndim; i++)
        ln->ranges[i] = out->type.shape[i];
    ln->nred = 2;
    ln->red[0] = ptc_dim_c(kh);
    ln->red[1] = ptc_dim_c(kw);
    const ptc_ix *at[PTC_MAX_DIMS];
    for (int i = 0; i < lead; i++)
        at[i] = ptc_ix_var(a, i, out->type.shape[i]);
    const ptc_ix *oh = ptc_ix_var(a, lead, OH), *ow = ptc_ix_var(a, lead + 1, OW);
    const ptc_ix *h0 = ptc_ix_floordiv(a, ptc_ix_scale(a, oh, H), OH);
    const ptc_ix *w0 = ptc_ix_floordiv(a, ptc_ix_scale(a, ow, W), OW);
    at[lead] = ptc_ix_add(a, h0, ptc_ix_var(a, ln->ndim, ln->red[0]));
    at[lead + 1] = ptc_ix_add(a, w0, ptc_ix_var(a, ln->ndim + 1, ln->red[1]));
    /* end = ceil((o+1)*I/O) = ((o+1)*I + O - 1) // O */
    const ptc_ix *h1 = ptc_ix_floordiv(a, ptc_ix_add(a, ptc_ix_scale(a, oh, H), ptc_ix_int(a, H.value + OH.value - 1)), OH);
    const ptc_ix *w1 = ptc_ix_floordiv(a, ptc_ix_add(a, ptc_ix_scale(a, ow, W), ptc_ix_int(a, W.value + OW.value - 1)), OW);
    int mask = -1;
    if (H.value % OH.value || W.value % OW.value) {
        int ih = ptc_lbody_index(a, &ln->body, at[lead]), iw = ptc_lbody_index(a, &ln->body, at[lead + 1]);
        mask = and_mask(L, &ln->body, ptc_lbody_binary(a, &ln->body, PTC_L_LT, PTC_BOOL, ih, ptc_lbody_index(a, &ln->body, h1)),
                        ptc_lbody_binary(a, &ln->body, PTC_L_LT, PTC_BOOL, iw, ptc_lbody_index(a, &ln->body, w1)));
    }
    ln->value = mask < 0 ? load_at(L, &ln->body, x, at) : masked_load_at(L, &ln->body, x, at, mask, 0);
    ptc_lbuf *sb = ptc_lprog_add_buf(L->p, x->type.dtype, out->type.ndim, out->type.shape, PTC_LB_TEMP);
    sb->def = ln->id;
    ln->out[0] = sb->id;
    copy_prov(L, ln, sb);
    ln->label = "adaptive_pool";
    ptc_lnode *ep = new_node(L, PTC_LN_POINTWISE, out, out->type.dtype);
    ptc_lbody *b = &ep->body;
    const ptc_ix **y = identity_vars(a, &out->type);
    ptc_lexpr e;
    memset(&e, 0, sizeof e);
    e.op = PTC_L_LOAD;
    e.dtype = x->type.dtype;
    e.arg[0] = e.arg[1] = e.arg[2] = -1;
    e.buf = sb->id;
    e.nidx = out->type.ndim;
    e.idx = y;
    int sum = ptc_lbody_add(a, b, &e);
    const ptc_ix *vars[PTC_MAX_DIMS];
    for (int i = 0; i < out->type.ndim; i++)
        vars[i] = y[i];
    int hs = op2(L, b, PTC_L_SUB, ptc_lbody_index(a, b, ptc_ix_subst(a, h1, vars, out->type.ndim, NULL, 0)),
                 ptc_lbody_index(a, b, ptc_ix_subst(a, h0, vars, out->type.ndim, NULL, 0)));
    int ws = op2(L, b, PTC_L_SUB, ptc_lbody_index(a, b, ptc_ix_subst(a, w1, vars, out->type.ndim, NULL, 0)),
                 ptc_lbody_index(a, b, ptc_ix_subst(a, w0, vars, out->type.ndim, NULL, 0)));
    int dv = ptc_lbody_cast(a, b, out->type.dtype, op2(L, b, PTC_L_MUL, hs, ws));
    ep->value = ptc_lbody_binary(a, b, PTC_L_DIV, out->type.dtype, sum, dv);
    ep->label = "adaptive_pool";
    return 0;
}

/* ---- the driver ------------------------------------------------------------------------------------ */

static int lower_node(lowerer *L, const ptc_node *n)
{
    L->cur = n;
    unsigned flags = ptc_op_flags(n->op);
    switch (n->op) {
    case PTC_OP_PRIMS_DEVICE_PUT:
        /* the CPU backend computes everything on the host: placement is the
         * identity here, as in the reference interpreter */
    case PTC_OP_PRIMS_STOP_GRADIENT: /* the joint drops them; a .ptir may not */
        L->vals[n->outs[0]->id] = L->vals[n->args[0].v->id];
        return 0;
    case PTC_OP_PRIMS_BROADCAST_IN_DIM:
    case PTC_OP_PRIMS_RESHAPE:
    case PTC_OP_PRIMS_PERMUTE:
    case PTC_OP_PRIMS_SLICE: return lower_view(L, n);
    case PTC_OP_PRIMS_PAD: return lower_pad(L, n);
    case PTC_OP_PRIMS_CAT: return lower_cat(L, n);
    case PTC_OP_PRIMS_IOTA:
    case PTC_OP_PRIMS_FULL:
    case PTC_OP_PRIMS_RAND:
    case PTC_OP_PRIMS_RANDN: return lower_creation(L, n);
    case PTC_OP_PRIMS_SUM:
    case PTC_OP_PRIMS_PROD:
    case PTC_OP_PRIMS_AMAX:
    case PTC_OP_PRIMS_AMIN:
    case PTC_OP_PRIMS_ARGMAX:
    case PTC_OP_PRIMS_ARGMIN:
    case PTC_OP_PRIMS_VAR_MEAN: return lower_reduce(L, n);
    case PTC_OP_PRIMS_GATHER:
    case PTC_OP_PRIMS_INDEX_SELECT: return lower_gather(L, n);
    case PTC_OP_PRIMS_CHECK_INDEX:
        return lower_check_index(L, n);
    case PTC_OP_PRIMS_CUMSUM:
    case PTC_OP_PRIMS_CUMPROD: new_extern(L, n, PTC_XK_SCAN); return 0;
    case PTC_OP_PRIMS_SCATTER_ADD:
    case PTC_OP_PRIMS_SCATTER: new_extern(L, n, PTC_XK_SCATTER); return 0;
    case PTC_OP_MM:
    case PTC_OP_BMM:
    case PTC_OP_CONVOLUTION:
    case PTC_OP_CONVOLUTION_BACKWARD_WEIGHT:
    case PTC_OP_CONVOLUTION_BACKWARD:
    case PTC_OP_SDPA:
    case PTC_OP_SORT:
    case PTC_OP_TOPK:
    case PTC_OP_CUMMAX:
    case PTC_OP_CUMMIN: new_extern(L, n, PTC_XK_HOST); return 0;
    case PTC_OP_MAX_POOL2D_WITH_INDICES: return lower_max_pool(L, n);
    case PTC_OP_AVG_POOL2D: return lower_avg_pool(L, n);
    case PTC_OP_ADAPTIVE_AVG_POOL2D: return lower_adaptive_pool(L, n);
    default: break;
    }
    if (lop_of(n->op) >= 0 || n->op == PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE) {
        if (try_addmm(L, n))
            return 0;
        return lower_pointwise(L, n);
    }
    (void)flags;
    return lfail(L, PTC_ERR_UNSUPPORTED, "no loop-level lowering for op '%s'", ptc_op_name(n->op));
}

/* Does v's map address its buffer contiguously in v's own row-major order? */
static bool contiguous_alias(lowerer *L, const ptc_value *v)
{
    const lval *lv = &L->vals[v->id];
    const ptc_lbuf *b = L->p->bufs[lv->buf];
    ptc_arena *a = L->a;
    const ptc_ix *off = ptc_ix_int(a, 0);
    for (int d = 0; d < b->ndim; d++)
        off = ptc_ix_madd(a, lv->idx[d], b->strides[d], off);
    ptc_dim n1 = ptc_ttype_numel(a, &v->type), n2 = ptc_dim_c(1);
    for (int d = 0; d < b->ndim; d++)
        n2 = ptc_dim_mul(a, n2, b->shape[d]);
    return ptc_dim_eq(n1, n2) && ptc_ix_eq(off, flat_index(a, &v->type));
}

static int lower_outputs(lowerer *L)
{
    const ptc_graph *g = L->g;
    ptc_lprog *p = L->p;
    p->noutputs = g->noutputs;
    p->outputs = PTC_NEWN(L->a, int, g->noutputs > 0 ? g->noutputs : 1);
    for (int i = 0; i < g->noutputs; i++) {
        const ptc_value *v = g->outputs[i];
        L->cur = v->def;
        int prev = -1;
        for (int j = 0; j < i; j++)
            if (g->outputs[j] == v)
                prev = j;
        if (prev >= 0) {
            p->outputs[i] = p->outputs[prev];
            continue;
        }
        const lval *lv = &L->vals[v->id];
        ptc_lbuf *b = p->bufs[lv->buf];
        /* a temporary the output is all of, in order, becomes the output
           (a kernel's or an extern's result alike), also where the output
           is a reshape of it (a linear's [rows, out] product returned as
           [batch, length, out]): the output's tensor is the buffer's memory */
        if (b->kind == PTC_LB_TEMP && contiguous_alias(L, v)) {
            b->kind = PTC_LB_OUTPUT;
            b->output = i;
            p->outputs[i] = b->id;
            continue;
        }
        /* a copy into the output's own buffer */
        ptc_lnode *cp = ptc_lprog_add_node(p, PTC_LN_POINTWISE);
        ptc_lbuf *ob = ptc_lprog_add_buf(p, v->type.dtype, v->type.ndim, v->type.shape, PTC_LB_OUTPUT);
        ob->def = cp->id;
        ob->output = i;
        cp->out[0] = ob->id;
        cp->ndim = v->type.ndim;
        for (int d = 0; d < cp->ndim; d++)
            cp->ranges[d] = v->type.shape[d];
        cp->value = load_at(L, &cp->body, v, identity_vars(L->a, &v->type));
        cp->label = "copy";
        const ptc_node *src = v->def;
        if (src) {
            ptc_lnode_set_prov(p, cp, src->nprov, src->prov);
            ob->nprov = cp->nprov;
            ob->prov = cp->prov;
        }
        p->outputs[i] = ob->id;
    }
    return 0;
}

/* PTC_INJECT=lower:<op>:wrong: every loop body emitted for the node computes
 * x*1.25+1 (integers x+1, bools !x) instead of x. */
static int inject_wrong(lowerer *L, const ptc_node *n, int first)
{
    int bodies = 0;
    for (int i = first; i < L->p->nnodes; i++) {
        ptc_lnode *ln = L->p->nodes[i];
        if (!ln || ln->kind == PTC_LN_EXTERN || ln->value < 0)
            continue;
        ptc_lbody *b = &ln->body;
        ptc_dtype dt = b->e[ln->value].dtype;
        if (dt == PTC_BOOL) {
            ln->value = ptc_lbody_unary(L->a, b, PTC_L_LOGICAL_NOT, dt, ln->value);
        } else if (ptc_dtype_is_float(dt)) {
            int scaled = ptc_lbody_binary(L->a, b, PTC_L_MUL, dt, ln->value,
                                          ptc_lbody_const_f(L->a, b, 1.25, dt));
            ln->value = ptc_lbody_binary(L->a, b, PTC_L_ADD, dt, scaled,
                                         ptc_lbody_const_f(L->a, b, 1.0, dt));
        } else {
            ln->value = ptc_lbody_binary(L->a, b, PTC_L_ADD, dt, ln->value,
                                         ptc_lbody_const_i(L->a, b, 1, dt));
        }
        bodies++;
    }
    if (bodies == 0)
        return ptc_errorf(L->err, PTC_ERR_INJECTED, "lower",
                          "PTC_INJECT: lower:%s:wrong, but %%%s has no loop body to make wrong "
                          "(a view or an extern)",
                          ptc_op_name(n->op), n->nout ? n->outs[0]->name : "?");
    return 0;
}

/* Lowers one node; its loop nodes remember its op (for PTC_INJECT). */
static int lower_one(lowerer *L, const ptc_node *n)
{
    ptc_inject_kind ik = ptc_inject_hit("lower", n->op, L->err);
    if (ik == PTC_INJECT_ERROR)
        return -1;
    int first = L->p->nnodes;
    if (lower_node(L, n))
        return -1;
    for (int i = first; i < L->p->nnodes; i++)
        if (L->p->nodes[i])
            ptc_lnode_add_op(L->p->nodes[i], n->op);
    return ik == PTC_INJECT_WRONG ? inject_wrong(L, n, first) : 0;
}

ptc_lprog *ptc_lower(ptc_arena *a, const ptc_graph *g, ptc_error *err)
{
    lowerer L = {0};
    L.a = a;
    L.g = g;
    L.err = err;
    L.p = ptc_lprog_new(a);
    L.vals = calloc((size_t)g->nvalues + 1, sizeof *L.vals);
    L.uses = calloc((size_t)g->nvalues + 1, sizeof *L.uses);
    ptc_graph_use_counts(g, L.uses);
    for (int i = 0; i < g->noutputs; i++)
        L.uses[g->outputs[i]->id]++;
    if (index_users(&L) < 0) {
        free(L.vals);
        free(L.uses);
        free(L.user_start);
        free(L.users);
        ptc_errorf(err, PTC_ERR_COMPILE, "loops", "out of memory");
        return NULL;
    }
    L.p->ninputs = g->ninputs;
    for (int i = 0; i < g->ninputs; i++) {
        const ptc_value *v = g->inputs[i];
        ptc_lbuf *b = ptc_lprog_add_buf(L.p, v->type.dtype, v->type.ndim, v->type.shape, PTC_LB_INPUT);
        b->input = i;
        b->nprov = 1;
        b->prov = PTC_NEWN(a, const char *, 1);
        b->prov[0] = ptc_arena_strdup(a, v->name);
        if (v->type.layout == PTC_LAYOUT_STRIDED)
            for (int d = 0; d < v->type.ndim; d++)
                b->strides[d] = ptc_dim_copy(a, v->type.strides[d]);
        set_identity(&L, v, b->id);
    }
    int rc = 0;
    /* out of memory: the reserve (ir.h) lasts a few nodes, not a long graph */
    for (int i = 0; i < g->nnodes && rc == 0; i++)
        rc = ptc_arena_failed(a) ? ptc_errorf(err, PTC_ERR_COMPILE, "loops", "out of memory")
                                 : lower_one(&L, g->nodes[i]);
    if (rc == 0)
        rc = lower_outputs(&L);
    free(L.vals);
    free(L.uses);
    free(L.user_start);
    free(L.users);
    if (rc == 0 && ptc_lprog_verify(L.p, err))
        rc = -1;
    return rc ? NULL : L.p;
}
