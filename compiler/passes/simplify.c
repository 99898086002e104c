/* Clean-ups on prims graphs: constant folding, CSE and dead-code elimination.
 *
 * Folding and CSE are one forward walk each that rewrites arguments through
 * a replacement map (value id -> value), so a replaced node's users see the
 * replacement at once and the pass stays linear; the replaced nodes are then
 * left without users for DCE. CSE hashes (op, arguments) and confirms with
 * ptc_arg_eq; random prims merge too, because a draw is a function of its
 * seed, shape and the run's offset. Folding works on prims.full, the one
 * constant the prims have: views and conversions of a full are a full of the
 * new shape or dtype, arithmetic between fulls is computed by the reference's
 * formula in the dtype's own precision, and identity views and conversions
 * disappear. Integer and bool values also carry the range of their elements
 * (iota, fulls, views, widening conversions, add and sub): a comparison that
 * every element answers the same way is a full, and an
 * attention mask that is a full True is no mask at all (Hugging Face builds
 * `arange(L) >= 0` masks under compilation; torch's fused attention kernels
 * run faster without one). Which prims fold, how their ranges combine and
 * how a comparison is decided are pointwise.def's fold column, so a new
 * pointwise prim is one row there.
 */
#include "passes/decomp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const ptc_arg *find_arg(const ptc_node *n, const char *name)
{
    int i = ptc_param_index(n->op, name);
    return i >= 0 && i < n->nargs ? &n->args[i] : NULL;
}

void pass_remap_args(ptc_node *n, ptc_value **map)
{
    for (int i = 0; i < n->nargs; i++) {
        ptc_arg *a = &n->args[i];
        if (a->kind == PTC_ARG_VALUE && map[a->v->id])
            a->v = map[a->v->id];
        else if (a->kind == PTC_ARG_VALUES)
            for (int j = 0; j < a->vs.n; j++)
                if (a->vs.v[j] && map[a->vs.v[j]->id])
                    a->vs.v[j] = map[a->vs.v[j]->id];
    }
}

void pass_remap_outputs(ptc_graph *g, ptc_value **map)
{
    for (int i = 0; i < g->noutputs; i++)
        if (map[g->outputs[i]->id])
            g->outputs[i] = map[g->outputs[i]->id];
}

/* ---- DCE ------------------------------------------------------------------------------------ */

int ptc_pass_dce(ptc_graph *g)
{
    int *uses = calloc((size_t)g->nvalues + 1, sizeof(int));
    bool *keep = calloc((size_t)g->next_node_id + 1, 1);
    for (int i = 0; i < g->noutputs; i++)
        uses[g->outputs[i]->id]++;
    int removed = 0;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        ptc_node *n = g->nodes[i];
        bool live = false;
        for (int k = 0; k < n->nout; k++)
            live |= uses[n->outs[k]->id] > 0;
        keep[n->id] = live;
        if (!live) {
            removed++;
            continue;
        }
        for (int a = 0; a < n->nargs; a++) {
            if (n->args[a].kind == PTC_ARG_VALUE)
                uses[n->args[a].v->id]++;
            else if (n->args[a].kind == PTC_ARG_VALUES)
                for (int j = 0; j < n->args[a].vs.n; j++)
                    if (n->args[a].vs.v[j])
                        uses[n->args[a].vs.v[j]->id]++;
        }
    }
    if (removed)
        ptc_graph_remove_nodes(g, keep);
    free(uses);
    free(keep);
    return removed;
}

/* ---- CSE ------------------------------------------------------------------------------------ */

static uint64_t hash_dim(uint64_t h, ptc_dim d)
{
    ptc_buf b = {0};
    if (d.sym) {
        ptc_dim_print(&b, d);
        h = ptc_hash_bytes(h, b.data, b.len);
        ptc_buf_free(&b);
    } else {
        h = ptc_hash_bytes(h, &d.value, sizeof d.value);
    }
    return h;
}

static uint64_t hash_node(const ptc_node *n)
{
    uint64_t h = ptc_hash_bytes(PTC_HASH_INIT, &n->op, sizeof n->op);
    for (int i = 0; i < n->nargs; i++) {
        const ptc_arg *a = &n->args[i];
        h = ptc_hash_bytes(h, &a->kind, sizeof a->kind);
        switch (a->kind) {
        case PTC_ARG_VALUE: h = ptc_hash_bytes(h, &a->v->id, sizeof a->v->id); break;
        case PTC_ARG_VALUES:
            for (int j = 0; j < a->vs.n; j++) {
                int id = a->vs.v[j] ? a->vs.v[j]->id : -1;
                h = ptc_hash_bytes(h, &id, sizeof id);
            }
            break;
        case PTC_ARG_INT: h = hash_dim(h, a->i); break;
        case PTC_ARG_INTS:
            for (int j = 0; j < a->is.n; j++)
                h = hash_dim(h, a->is.d[j]);
            break;
        case PTC_ARG_FLOAT: h = ptc_hash_bytes(h, &a->f, sizeof a->f); break;
        case PTC_ARG_BOOL: h = ptc_hash_bytes(h, &a->b, sizeof a->b); break;
        case PTC_ARG_STR: h = ptc_hash_bytes(h, a->s, strlen(a->s)); break;
        case PTC_ARG_DTYPE: h = ptc_hash_bytes(h, &a->dt, sizeof a->dt); break;
        default: break;
        }
    }
    return h;
}

static bool same_node(const ptc_node *a, const ptc_node *b)
{
    if (a->op != b->op || a->nargs != b->nargs || a->nout != b->nout)
        return false;
    for (int i = 0; i < a->nargs; i++)
        if (!ptc_arg_eq(&a->args[i], &b->args[i]))
            return false;
    for (int k = 0; k < a->nout; k++)
        if (!ptc_device_eq(a->outs[k]->type.device, b->outs[k]->type.device))
            return false;
    return true;
}

int ptc_pass_cse(ptc_graph *g)
{
    ptc_value **map = calloc((size_t)g->nvalues + 1, sizeof *map);
    int slots = 64;
    while (slots < 2 * (g->nnodes + 1))
        slots *= 2;
    const ptc_node **table = calloc((size_t)slots, sizeof *table);
    uint64_t *hashes = calloc((size_t)slots, sizeof *hashes);
    int merged = 0;
    for (int i = 0; i < g->nnodes; i++) {
        ptc_node *n = g->nodes[i];
        pass_remap_args(n, map);
        uint64_t h = hash_node(n);
        int s = (int)(h & (uint64_t)(slots - 1));
        const ptc_node *hit = NULL;
        while (table[s]) {
            if (hashes[s] == h && same_node(table[s], n)) {
                hit = table[s];
                break;
            }
            s = (s + 1) & (slots - 1);
        }
        if (hit) {
            for (int k = 0; k < n->nout; k++)
                map[n->outs[k]->id] = hit->outs[k];
            merged++;
        } else {
            table[s] = n;
            hashes[s] = h;
        }
    }
    pass_remap_outputs(g, map);
    free(map);
    free(table);
    free(hashes);
    return merged;
}

/* ---- folding -------------------------------------------------------------------------------- */

static const ptc_node *full_def(const ptc_value *v)
{
    return v && v->def && v->def->op == PTC_OP_PRIMS_FULL ? v->def : NULL;
}

/* The fill value of a full as double / int64 in its dtype. */
static bool full_value(const ptc_node *f, double *fv, int64_t *iv)
{
    const ptc_arg *v = find_arg(f, "fill_value");
    ptc_dtype dt = f->outs[0]->type.dtype;
    uint8_t tmp[8];
    switch (v->kind) {
    case PTC_ARG_FLOAT: ptc_store_f64(tmp, dt, v->f); break;
    case PTC_ARG_BOOL: ptc_store_i64(tmp, dt, v->b); break;
    case PTC_ARG_INT:
        if (!ptc_dim_is_static(v->i))
            return false;
        if (ptc_dtype_is_float(dt))
            ptc_store_f64(tmp, dt, (double)v->i.value);
        else
            ptc_store_i64(tmp, dt, v->i.value);
        break;
    default: return false;
    }
    *fv = ptc_load_f64(tmp, dt);
    *iv = ptc_dtype_is_float(dt) ? 0 : ptc_load_i64(tmp, dt);
    return true;
}

/* A node built to replace n (or part of it), with n's location and
 * provenance; its output. */
static ptc_value *build_for(ptc_graph *g, const ptc_node *n, ptc_op op, const ptc_arg *args,
                            int nargs, ptc_error *err)
{
    ptc_node *m = ptc_build(g, op, args, nargs, err);
    if (!m)
        return NULL;
    m->nprov = n->nprov;
    m->prov = n->prov;
    m->loc = n->loc;
    m->module_path = n->module_path;
    return m->outs[0];
}

/* A new full like n's output with the given value. */
static ptc_value *make_full(ptc_graph *g, const ptc_node *n, double fv, int64_t iv, ptc_error *err)
{
    const ptc_ttype *t = &n->outs[0]->type;
    ptc_arg val = ptc_dtype_is_float(t->dtype) ? ptc_arg_float(fv)
                  : t->dtype == PTC_BOOL       ? ptc_arg_bool(iv != 0)
                                               : ptc_arg_int(iv);
    ptc_arg args[4] = {ptc_arg_dims(g->arena, t->shape, t->ndim), val, ptc_arg_dtype(t->dtype),
                       ptc_arg_device(t->device)};
    return build_for(g, n, PTC_OP_PRIMS_FULL, args, 4, err);
}

static bool same_type_shape(const ptc_value *a, const ptc_value *b)
{
    if (a->type.ndim != b->type.ndim || a->type.dtype != b->type.dtype)
        return false;
    for (int i = 0; i < a->type.ndim; i++)
        if (!ptc_dim_eq(a->type.shape[i], b->type.shape[i]))
            return false;
    return true;
}

/* Whether simplify folds op between two fulls of dtype dt (pointwise.def's
 * fold column, FOLD(dtypes, range)): the value is then the reference's. */
static bool folds(ptc_op op, ptc_dtype dt)
{
#define DTYPES_NUMBERS (dt == PTC_F32 || dt == PTC_F64 || ptc_dtype_is_int(dt))
#define DTYPES_FLOATS (dt == PTC_F32 || dt == PTC_F64)
#define FOLDS_FOLD(dtypes, range) return DTYPES_##dtypes;
#define FOLDS_DECIDE(fn) break;
#define FOLDS_KEEP break;
    switch (op) {
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit)                                \
    case PTC_OP_##id:                                                                              \
        FOLDS_##fold
#include "ir/pointwise.def"
    default:
        break;
    }
    return false;
#undef FOLDS_FOLD
#undef DTYPES_NUMBERS
#undef DTYPES_FLOATS
#undef FOLDS_DECIDE
#undef FOLDS_KEEP
}

/* ---- element ranges of integer and bool values ---------------------------------------------- */

typedef struct range {
    bool known;
    int64_t lo, hi;
} range;

static bool int_like(ptc_dtype dt)
{
    return dt == PTC_BOOL || ptc_dtype_is_int(dt);
}

static range range_of(const range *r, const ptc_value *v)
{
    range none = {false, 0, 0};
    return v && int_like(v->type.dtype) ? r[v->id] : none;
}

static bool dtype_holds(ptc_dtype dt, int64_t lo, int64_t hi)
{
    uint8_t tmp[8];
    ptc_store_i64(tmp, dt, lo);
    if (ptc_load_i64(tmp, dt) != lo)
        return false;
    ptc_store_i64(tmp, dt, hi);
    return ptc_load_i64(tmp, dt) == hi;
}

/* The range functions of pointwise.def's FOLD rows: the range of x op y. */
static range range_unknown(range x, range y)
{
    (void)x, (void)y;
    return (range){false, 0, 0};
}

static range range_add(range x, range y)
{
    range out = {x.known && y.known, 0, 0};
    if (!out.known || __builtin_add_overflow(x.lo, y.lo, &out.lo) ||
        __builtin_add_overflow(x.hi, y.hi, &out.hi))
        return range_unknown(x, y);
    return out;
}

static range range_sub(range x, range y)
{
    range out = {x.known && y.known, 0, 0};
    if (!out.known || __builtin_sub_overflow(x.lo, y.hi, &out.lo) ||
        __builtin_sub_overflow(x.hi, y.lo, &out.hi))
        return range_unknown(x, y);
    return out;
}

/* The range of n's output from its arguments' (known = false: unknown). */
static range node_range(const range *r, const ptc_node *n)
{
    range out = {false, 0, 0};
    if (n->nout != 1 || !int_like(n->outs[0]->type.dtype))
        return out;
    ptc_dtype dt = n->outs[0]->type.dtype;
    const ptc_value *a = n->nargs > 0 && n->args[0].kind == PTC_ARG_VALUE ? n->args[0].v : NULL;
    const ptc_value *b = n->nargs > 1 && n->args[1].kind == PTC_ARG_VALUE ? n->args[1].v : NULL;
    range x = range_of(r, a), y = range_of(r, b);
    switch (n->op) {
    case PTC_OP_PRIMS_FULL: {
        double fv;
        int64_t iv;
        if (ptc_dtype_is_float(dt) || !full_value(n, &fv, &iv))
            return out;
        return (range){true, iv, iv};
    }
    case PTC_OP_PRIMS_IOTA: {
        const ptc_arg *len = find_arg(n, "length"), *st = find_arg(n, "start"),
                      *sp = find_arg(n, "step");
        int64_t span, last;
        if (!ptc_dim_is_static(len->i) || !ptc_dim_is_static(st->i) || !ptc_dim_is_static(sp->i) ||
            len->i.value < 1 || __builtin_mul_overflow(sp->i.value, len->i.value - 1, &span) ||
            __builtin_add_overflow(st->i.value, span, &last))
            return out;
        int64_t first = st->i.value;
        out = (range){true, first < last ? first : last, first < last ? last : first};
        break;
    }
    case PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE:
        out = x;
        break;
#define RANGE_FOLD(dtypes, range_fn)                                                               \
    if (dt == PTC_BOOL)                                                                            \
        return out;                                                                                \
    out = range_fn(x, y);                                                                          \
    break;
#define RANGE_DECIDE(fn) return out;
#define RANGE_KEEP return out;
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit)                                \
    case PTC_OP_##id:                                                                              \
        RANGE_##fold
#include "ir/pointwise.def"
#undef RANGE_FOLD
#undef RANGE_DECIDE
#undef RANGE_KEEP
    default:
        if (!(ptc_op_flags(n->op) & PTC_F_VIEW))
            return out;
        out = x; /* a view's elements are its input's */
    }
    /* a value that does not fit the output dtype wraps: unknown */
    if (out.known && !dtype_holds(dt, out.lo, out.hi))
        out.known = false;
    return out;
}

/* The deciders of pointwise.def's DECIDE rows: 1 / 0 when x op y holds for
 * every / no pair of elements of the ranges x and y, else -1. */
static int decide_ge(range x, range y)
{
    return x.lo >= y.hi ? 1 : x.hi < y.lo ? 0 : -1;
}

static int decide_gt(range x, range y)
{
    return x.lo > y.hi ? 1 : x.hi <= y.lo ? 0 : -1;
}

static int decide_le(range x, range y)
{
    return x.hi <= y.lo ? 1 : x.lo > y.hi ? 0 : -1;
}

static int decide_lt(range x, range y)
{
    return x.hi < y.lo ? 1 : x.lo >= y.hi ? 0 : -1;
}

static int decide_eq(range x, range y)
{
    bool one_value = x.lo == x.hi && y.lo == y.hi && x.lo == y.lo;
    return one_value ? 1 : x.hi < y.lo || y.hi < x.lo ? 0 : -1;
}

static int decide_ne(range x, range y)
{
    int eq = decide_eq(x, y);
    return eq < 0 ? -1 : !eq;
}

/* 1 / 0 when every element of the comparison n is true / false, else -1. */
static int decided_compare(const range *r, const ptc_node *n)
{
    if (n->nargs < 2 || n->args[0].kind != PTC_ARG_VALUE || n->args[1].kind != PTC_ARG_VALUE)
        return -1;
    range x = range_of(r, n->args[0].v), y = range_of(r, n->args[1].v);
    if (!x.known || !y.known)
        return -1;
    switch (n->op) {
#define DECIDED_FOLD(dtypes, range) break;
#define DECIDED_DECIDE(fn) return fn(x, y);
#define DECIDED_KEEP break;
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit)                                \
    case PTC_OP_##id:                                                                              \
        DECIDED_##fold
#include "ir/pointwise.def"
#undef DECIDED_FOLD
#undef DECIDED_DECIDE
#undef DECIDED_KEEP
    default:
        break;
    }
    return -1;
}

/* An attention mask that is a full True (bool) or 0 (added to the scores)
 * changes nothing: the node loses it. */
static bool drop_neutral_mask(ptc_node *n)
{
    if (n->op != PTC_OP_SDPA)
        return false;
    int i = ptc_param_index(n->op, "attn_mask");
    if (i < 0 || i >= n->nargs || n->args[i].kind != PTC_ARG_VALUE)
        return false;
    const ptc_node *f = full_def(n->args[i].v);
    double fv;
    int64_t iv;
    if (!f || !full_value(f, &fv, &iv))
        return false;
    bool neutral = f->outs[0]->type.dtype == PTC_BOOL
                       ? iv != 0
                       : ptc_dtype_is_float(f->outs[0]->type.dtype) && fv == 0;
    if (neutral)
        n->args[i] = ptc_arg_none();
    return neutral;
}

/* A view that changes nothing is its input; a view of a full is a full. */
static ptc_value *fold_view(ptc_graph *g, ptc_node *n, const ptc_node *f, ptc_error *err)
{
    ptc_value *x = n->args[0].v;
    bool identity = same_type_shape(x, n->outs[0]);
    if (n->op == PTC_OP_PRIMS_PERMUTE) {
        const ptc_arg *dims = find_arg(n, "dims");
        for (int i = 0; i < dims->is.n; i++)
            identity &= ptc_dim_is_static(dims->is.d[i]) && dims->is.d[i].value == i;
    }
    if (identity)
        return x;
    double fv;
    int64_t iv;
    if (f && full_value(f, &fv, &iv))
        return make_full(g, n, fv, iv, err);
    return NULL;
}

/* op between two fulls (a row that folds): a full of the reference's value. */
static ptc_value *fold_binary(ptc_graph *g, ptc_node *n, const ptc_node *f, ptc_error *err)
{
    const ptc_node *f2 = full_def(n->args[1].v);
    double fv, fv2, r;
    int64_t iv, iv2, ir;
    if (!f || !f2 || !full_value(f, &fv, &iv) || !full_value(f2, &fv2, &iv2))
        return NULL;
    ptc_ref_binary_scalar(n->op, n->outs[0]->type.dtype, fv, fv2, iv, iv2, &r, &ir);
    return make_full(g, n, r, ir, err);
}

/* where with a full condition between fulls: a full of the value it picks
 * (a boolean attention mask made additive, once the mask folds). */
static ptc_value *fold_where(ptc_graph *g, ptc_node *n, const ptc_node *cond, ptc_error *err)
{
    double fv;
    int64_t iv;
    if (!cond || !full_value(cond, &fv, &iv) || n->nargs < 3)
        return NULL;
    const ptc_node *picked = full_def(n->args[iv != 0 ? 1 : 2].v);
    if (!picked || !full_value(picked, &fv, &iv))
        return NULL;
    return make_full(g, n, fv, iv, err);
}

/* add(a, scatter_add(zeros, dim, index, src)), either way round, where a is
 * of the zeros' type: scatter_add(a, dim, index, src). A tied weight's
 * gradient (an output layer's matmul gradient plus its embedding's) held a
 * zero-filled buffer and a scatter result as large as the weight beside the
 * sum: BERT's and GPT-2's vocabulary-sized weights, 94-154 MB each. */
static ptc_value *fold_add_scatter(ptc_graph *g, ptc_node *n, ptc_error *err)
{
    for (int k = 0; k < 2; k++) {
        ptc_value *a = n->args[k].v;
        const ptc_node *sc = n->args[1 - k].v->def;
        if (!sc || sc->op != PTC_OP_PRIMS_SCATTER_ADD)
            continue;
        const ptc_node *zeros = full_def(sc->args[0].v);
        double fv;
        int64_t iv;
        if (!zeros || !full_value(zeros, &fv, &iv) || fv != 0 || iv != 0 ||
            !same_type_shape(a, sc->args[0].v) || !same_type_shape(a, n->outs[0]))
            continue;
        ptc_arg args[4] = {ptc_arg_value(a), sc->args[1], sc->args[2], sc->args[3]};
        return build_for(g, n, PTC_OP_PRIMS_SCATTER_ADD, args, 4, err);
    }
    return NULL;
}

/* The replacement of n's output, or NULL. */
static ptc_value *fold_node(ptc_graph *g, ptc_node *n, const range *r, ptc_error *err)
{
    int decided = decided_compare(r, n);
    if (decided >= 0)
        return make_full(g, n, decided, decided, err);
    if (n->nout != 1 || n->nargs == 0 || n->args[0].kind != PTC_ARG_VALUE)
        return NULL;
    ptc_value *x = n->args[0].v, *out = n->outs[0];
    const ptc_node *f = full_def(x);
    double fv;
    int64_t iv;
    switch (n->op) {
    case PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE:
        if (x->type.dtype == out->type.dtype)
            return x;
        if (f && full_value(f, &fv, &iv)) {
            uint8_t tmp[8];
            if (ptc_dtype_is_float(x->type.dtype))
                ptc_store_f64(tmp, out->type.dtype, fv);
            else
                ptc_store_i64(tmp, out->type.dtype, iv);
            double r = ptc_load_f64(tmp, out->type.dtype);
            int64_t ir = ptc_dtype_is_float(out->type.dtype) ? 0 : ptc_load_i64(tmp, out->type.dtype);
            return make_full(g, n, r, ir, err);
        }
        return NULL;
    case PTC_OP_PRIMS_WHERE:
        return fold_where(g, n, f, err);
    case PTC_OP_PRIMS_ADD: {
        ptc_value *r = fold_add_scatter(g, n, err);
        if (r || !folds(n->op, out->type.dtype))
            return r;
        return fold_binary(g, n, f, err);
    }
    default:
        if (ptc_op_flags(n->op) & PTC_F_VIEW)
            return fold_view(g, n, f, err);
        if (folds(n->op, out->type.dtype))
            return fold_binary(g, n, f, err);
        return NULL;
    }
}

void pass_place_with_built(pass_order *o, const ptc_graph *g, int before, ptc_node *n)
{
    int need = o->n + (g->nnodes - before) + 1;
    if (need > o->cap) {
        o->cap = 2 * need;
        o->nodes = realloc(o->nodes, sizeof *o->nodes * (size_t)o->cap);
        PTC_ASSERT(o->nodes);
    }
    for (int k = before; k < g->nnodes; k++)
        o->nodes[o->n++] = g->nodes[k];
    o->nodes[o->n++] = n;
}

void pass_take_order(ptc_graph *g, pass_order *o)
{
    for (int i = 0; i < o->n; i++)
        g->nodes[i] = o->nodes[i];
    g->nnodes = o->n;
    free(o->nodes);
}

int ptc_pass_fold(ptc_graph *g, ptc_error *err)
{
    ptc_value **map = calloc((size_t)g->nvalues + 64, sizeof *map);
    range *ranges = calloc((size_t)g->nvalues + 64, sizeof *ranges);
    int cap = g->nvalues + 64;
    int folded = 0, n0 = g->nnodes;
    /* new fulls are appended: they must come before their users, so the
     * graph is rebuilt in order at the end */
    pass_order order = {0};
    for (int i = 0; i < n0; i++) {
        ptc_node *n = g->nodes[i];
        pass_remap_args(n, map);
        folded += drop_neutral_mask(n);
        int before = g->nnodes;
        ptc_value *r = fold_node(g, n, ranges, err);
        if (g->nvalues + 1 > cap) {
            int ncap = 2 * (g->nvalues + 1);
            map = realloc(map, sizeof *map * (size_t)ncap);
            ranges = realloc(ranges, sizeof *ranges * (size_t)ncap);
            memset(map + cap, 0, sizeof *map * (size_t)(ncap - cap));
            memset(ranges + cap, 0, sizeof *ranges * (size_t)(ncap - cap));
            cap = ncap;
        }
        for (int k = before; k < g->nnodes; k++)
            ranges[g->nodes[k]->outs[0]->id] = node_range(ranges, g->nodes[k]);
        pass_place_with_built(&order, g, before, n);
        if (!r) {
            for (int k = 0; k < n->nout; k++)
                ranges[n->outs[k]->id] = k == 0 ? node_range(ranges, n) : (range){false, 0, 0};
            continue;
        }
        map[n->outs[0]->id] = r;
        folded++;
    }
    pass_take_order(g, &order);
    pass_remap_outputs(g, map);
    free(map);
    free(ranges);
    return folded;
}

/* ---- factors leaving sums ------------------------------------------------------------------ */

/* A sum's operand as a product of factors, the ones constant along every
 * reduced dim apart, and the sign its negations leave. */
#define MAX_FACTORS 8
typedef struct factors {
    ptc_value *varying[MAX_FACTORS];
    ptc_value *constant[MAX_FACTORS];
    int nvarying, nconstant;
    bool negated, overflow;
} factors;

/* Whether v is the same along every reduced dim: a full, or a broadcast
 * whose source dims all land on kept dims. */
static bool constant_over(const ptc_value *v, const bool *reduced)
{
    const ptc_node *d = v->def;
    if (d && d->op == PTC_OP_PRIMS_FULL)
        return true;
    if (!d || d->op != PTC_OP_PRIMS_BROADCAST_IN_DIM)
        return false;
    const ptc_arg *bdims = find_arg(d, "broadcast_dimensions");
    for (int k = 0; k < bdims->is.n; k++)
        if (!ptc_dim_is_static(bdims->is.d[k]) || reduced[bdims->is.d[k].value])
            return false;
    return true;
}

static void add_factor(ptc_value **list, int *n, ptc_value *v, factors *f)
{
    if (*n == MAX_FACTORS)
        f->overflow = true;
    else
        list[(*n)++] = v;
}

static void collect_factors(ptc_value *v, const bool *reduced, factors *f)
{
    const ptc_node *d = v->def;
    if (d && d->op == PTC_OP_PRIMS_NEG) {
        f->negated = !f->negated;
        collect_factors(d->args[0].v, reduced, f);
    } else if (d && d->op == PTC_OP_PRIMS_MUL) {
        collect_factors(d->args[0].v, reduced, f);
        collect_factors(d->args[1].v, reduced, f);
    } else if (constant_over(v, reduced)) {
        add_factor(f->constant, &f->nconstant, v, f);
    } else {
        add_factor(f->varying, &f->nvarying, v, f);
    }
}

static int by_value_id(const void *x, const void *y)
{
    int a = (*(ptc_value *const *)x)->id, b = (*(ptc_value *const *)y)->id;
    return (a > b) - (a < b);
}

static ptc_value *build_binary(ptc_graph *g, const ptc_node *n, ptc_op op, ptc_value *a,
                               ptc_value *b, ptc_error *err)
{
    if (!a || !b)
        return NULL;
    ptc_arg args[2] = {ptc_arg_value(a), ptc_arg_value(b)};
    return build_for(g, n, op, args, 2, err);
}

/* A constant factor c of the sum's operand, at the sum's (reduced) shape:
 * a full is refilled, a broadcast's source is broadcast again onto the kept
 * dims (or is the result as it is). */
static ptc_value *constant_at_sum(ptc_graph *g, const ptc_node *sum, const ptc_value *c,
                                  const bool *reduced, ptc_error *err)
{
    const ptc_node *d = c->def;
    const ptc_ttype *out = &sum->outs[0]->type;
    ptc_arg shape = ptc_arg_dims(g->arena, out->shape, out->ndim);
    if (d->op == PTC_OP_PRIMS_FULL) {
        ptc_arg args[4] = {shape, *find_arg(d, "fill_value"), *find_arg(d, "dtype"),
                           *find_arg(d, "device")};
        return build_for(g, sum, PTC_OP_PRIMS_FULL, args, 4, err);
    }
    ptc_value *src = d->args[0].v;
    const ptc_arg *bdims = find_arg(d, "broadcast_dimensions");
    int kept_index[PTC_MAX_DIMS], nkept = 0;
    for (int i = 0; i < c->type.ndim; i++)
        kept_index[i] = reduced[i] ? -1 : nkept++;
    ptc_dim mapped[PTC_MAX_DIMS];
    bool identity = src->type.ndim == out->ndim;
    for (int k = 0; k < bdims->is.n; k++) {
        mapped[k] = ptc_dim_c(kept_index[bdims->is.d[k].value]);
        identity = identity && mapped[k].value == k &&
                   ptc_dim_eq(src->type.shape[k], out->shape[k]);
    }
    if (identity)
        return src;
    ptc_arg args[3] = {ptc_arg_value(src), shape,
                       ptc_arg_dims(g->arena, mapped, bdims->is.n)};
    return build_for(g, sum, PTC_OP_PRIMS_BROADCAST_IN_DIM, args, 3, err);
}

/* sum(a * c * -b) over dims where c is constant -> -(sum(a * b) * c), or
 * NULL where nothing leaves the sum. */
static ptc_value *factor_sum(ptc_graph *g, const ptc_node *n, ptc_error *err)
{
    ptc_value *x = n->args[0].v;
    if (x->type.dtype != PTC_F32 && x->type.dtype != PTC_F64)
        return NULL;
    bool reduced[PTC_MAX_DIMS] = {false};
    const ptc_arg *dims = find_arg(n, "dims");
    for (int k = 0; k < dims->is.n; k++) {
        if (!ptc_dim_is_static(dims->is.d[k]))
            return NULL;
        reduced[dims->is.d[k].value] = true;
    }
    factors f = {.nvarying = 0};
    collect_factors(x, reduced, &f);
    if (f.overflow || f.nvarying == 0 || (f.nconstant == 0 && !f.negated))
        return NULL;
    qsort(f.varying, (size_t)f.nvarying, sizeof *f.varying, by_value_id);
    qsort(f.constant, (size_t)f.nconstant, sizeof *f.constant, by_value_id);
    ptc_value *product = f.varying[0];
    for (int i = 1; i < f.nvarying; i++)
        product = build_binary(g, n, PTC_OP_PRIMS_MUL, product, f.varying[i], err);
    if (!product)
        return NULL;
    ptc_arg sum_args[2] = {ptc_arg_value(product), *dims};
    ptc_value *r = build_for(g, n, PTC_OP_PRIMS_SUM, sum_args, 2, err);
    for (int i = 0; i < f.nconstant && r; i++)
        r = build_binary(g, n, PTC_OP_PRIMS_MUL, r,
                         constant_at_sum(g, n, f.constant[i], reduced, err), err);
    if (r && f.negated) {
        ptc_arg neg_args[1] = {ptc_arg_value(r)};
        r = build_for(g, n, PTC_OP_PRIMS_NEG, neg_args, 1, err);
    }
    return r;
}

int ptc_pass_factor_sums(ptc_graph *g, int first_id, ptc_error *err)
{
    /* the walk's nodes read only values made before it began: ids < nvalues */
    ptc_value **map = calloc((size_t)g->nvalues + 1, sizeof *map);
    int n0 = g->nnodes, factored = 0;
    pass_order order = {0};
    for (int i = 0; i < n0; i++) {
        ptc_node *n = g->nodes[i];
        pass_remap_args(n, map);
        int before = g->nnodes;
        ptc_value *r = n->id >= first_id && n->op == PTC_OP_PRIMS_SUM ? factor_sum(g, n, err) : NULL;
        pass_place_with_built(&order, g, before, n);
        if (r) {
            map[n->outs[0]->id] = r;
            factored++;
        }
    }
    pass_take_order(g, &order);
    pass_remap_outputs(g, map);
    free(map);
    return factored;
}

int ptc_simplify(ptc_graph *g, ptc_error *err)
{
    for (int iter = 0; iter < 8; iter++) {
        int changed = ptc_pass_fold(g, err);
        changed += ptc_pass_cse(g);
        changed += ptc_pass_dce(g);
        if (!changed)
            break;
    }
    return 0;
}
