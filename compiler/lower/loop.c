/* Loop programs: construction, bodies, the `loops` printer and the verifier.
 *
 * A program is a list of buffers and a list of nodes in execution order. Each
 * node writes its output buffers; bodies read buffers through loads whose
 * index is one expression per buffer dimension, so views never exist as data:
 * a permute or a slice is just another index in the consumer's load. The
 * printer writes one line per buffer and per node, each ending with the
 * stage-1 provenance ("  <- %a, %b"), followed by the node's body.
 */
#include "lower/lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int arity, cost;
} lops[] = {
#define LOP(id, name, arity, cost) {name, arity, cost},
#include "lower/lops.def"
};
_Static_assert(sizeof lops / sizeof *lops == PTC_L_COUNT, "loop op table out of step");

static const char *reduce_names[] = {
#define X(id, name) name,
    PTC_REDUCES(X)
#undef X
};
_Static_assert(sizeof reduce_names / sizeof *reduce_names == PTC_RED_COUNT,
               "reduction table out of step");

const char *ptc_lop_name(int op) { return (unsigned)op < PTC_L_COUNT ? lops[op].name : "?"; }
int ptc_lop_arity(int op) { return lops[op].arity; }
int ptc_lop_cost(int op) { return lops[op].cost; }
const char *ptc_reduce_name(int r) { return (unsigned)r < PTC_RED_COUNT ? reduce_names[r] : "?"; }

/* ---- bodies ---------------------------------------------------------------- */

int ptc_lbody_add(ptc_arena *a, ptc_lbody *b, const ptc_lexpr *e)
{
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 16;
        ptc_lexpr *n = PTC_NEWN(a, ptc_lexpr, cap);
        if (b->n)
            memcpy(n, b->e, sizeof *n * (size_t)b->n);
        b->e = n;
        b->cap = cap;
    }
    b->e[b->n] = *e;
    return b->n++;
}

static ptc_lexpr blank(int op, ptc_dtype dt)
{
    ptc_lexpr e;
    memset(&e, 0, sizeof e);
    e.op = (uint8_t)op;
    e.dtype = dt;
    e.arg[0] = e.arg[1] = e.arg[2] = -1;
    e.buf = -1;
    return e;
}

int ptc_lbody_const_f(ptc_arena *a, ptc_lbody *b, double v, ptc_dtype dt)
{
    ptc_lexpr e = blank(PTC_L_CONST, dt);
    if (!ptc_dtype_is_float(dt)) {
        e.is_int = true;
        e.ival = ptc_dtype_is_bool(dt) ? (v != 0) : (int64_t)v;
    }
    e.fval = v;
    return ptc_lbody_add(a, b, &e);
}

int ptc_lbody_const_i(ptc_arena *a, ptc_lbody *b, int64_t v, ptc_dtype dt)
{
    if (ptc_dtype_is_float(dt))
        return ptc_lbody_const_f(a, b, (double)v, dt);
    ptc_lexpr e = blank(PTC_L_CONST, dt);
    e.is_int = true;
    e.ival = ptc_dtype_is_bool(dt) ? (v != 0) : v;
    e.fval = (double)e.ival;
    return ptc_lbody_add(a, b, &e);
}

int ptc_lbody_unary(ptc_arena *a, ptc_lbody *b, int op, ptc_dtype dt, int x)
{
    ptc_lexpr e = blank(op, dt);
    e.arg[0] = x;
    return ptc_lbody_add(a, b, &e);
}

int ptc_lbody_binary(ptc_arena *a, ptc_lbody *b, int op, ptc_dtype dt, int x, int y)
{
    ptc_lexpr e = blank(op, dt);
    e.arg[0] = x;
    e.arg[1] = y;
    return ptc_lbody_add(a, b, &e);
}

int ptc_lbody_where(ptc_arena *a, ptc_lbody *b, ptc_dtype dt, int c, int x, int y)
{
    ptc_lexpr e = blank(PTC_L_WHERE, dt);
    e.arg[0] = c;
    e.arg[1] = x;
    e.arg[2] = y;
    return ptc_lbody_add(a, b, &e);
}

int ptc_lbody_check(ptc_arena *a, ptc_lbody *b, int kind, int dim, int ok, int value, int bound)
{
    ptc_lexpr e = blank(PTC_L_CHECK, b->e[value].dtype);
    e.arg[0] = ok;
    e.arg[1] = value;
    e.arg[2] = bound;
    e.is_int = true;
    e.ival = ptc_check_code(kind, dim);
    return ptc_lbody_add(a, b, &e);
}

/* clang-format off */
static const struct {
    const char *name, *exc, *msg;
} checks[] = {
    {"none", NULL, NULL},
#define X(id, exc, msg) {#id, exc, msg},
    PTC_CHECKS(X)
#undef X
};
/* clang-format on */
_Static_assert(sizeof checks / sizeof *checks == PTC_CHECK_COUNT, "one row per check kind");

int ptc_check_fail(const ptc_check_status *st, ptc_error *err)
{
    int kind = (int)(st->code & 0xff), dim = (int)(st->code >> 8);
    if (kind <= PTC_CHECK_NONE || kind >= PTC_CHECK_COUNT)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "check", "unknown check code %lld",
                          (long long)st->code);
    ptc_buf b = {0};
    if (strcmp(checks[kind].exc, "RuntimeError") != 0)
        ptc_buf_printf(&b, "%s: ", checks[kind].exc);
    for (const char *m = checks[kind].msg; *m; m++) {
        if (m[0] != '%' || !m[1]) {
            ptc_buf_putc(&b, *m);
            continue;
        }
        switch (*++m) {
        case 'V':
            ptc_buf_printf(&b, "%lld", (long long)st->value);
            break;
        case 'D':
            ptc_buf_printf(&b, "%d", dim);
            break;
        default:
            ptc_buf_printf(&b, "%lld", (long long)st->bound);
            break;
        }
    }
    ptc_errorf(err, PTC_ERR_RUNTIME, "check", "%s", b.data ? b.data : "");
    ptc_buf_free(&b);
    return -1;
}

bool ptc_kernel_has_checks(const ptc_kernel *k)
{
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++) {
            const ptc_lbody *body = &k->groups[g].members[m].body;
            for (int i = 0; i < body->n; i++)
                if (body->e[i].op == PTC_L_CHECK)
                    return true;
        }
    return false;
}

bool ptc_kernel_is_flat(const ptc_kernel *k)
{
    for (int g = 0; g < k->ngroups; g++)
        if (k->groups[g].reduction || k->groups[g].ninner || k->groups[g].nred)
            return false;
    return true;
}

int ptc_lbody_cast(ptc_arena *a, ptc_lbody *b, ptc_dtype dt, int x)
{
    if (b->e[x].dtype == dt)
        return x;
    return ptc_lbody_unary(a, b, PTC_L_CAST, dt, x);
}

int ptc_lbody_load(ptc_arena *a, ptc_lbody *b, int buf, ptc_dtype dt, int nidx,
                   const ptc_ix *const *idx)
{
    ptc_lexpr e = blank(PTC_L_LOAD, dt);
    e.buf = buf;
    e.nidx = nidx;
    e.idx = PTC_NEWN(a, const ptc_ix *, nidx > 0 ? nidx : 1);
    for (int i = 0; i < nidx; i++)
        e.idx[i] = idx[i];
    return ptc_lbody_add(a, b, &e);
}

int ptc_lbody_index(ptc_arena *a, ptc_lbody *b, const ptc_ix *ix)
{
    ptc_lexpr e = blank(PTC_L_INDEX, PTC_I64);
    e.ix = ix;
    return ptc_lbody_add(a, b, &e);
}

static void mark_live(const ptc_lbody *b, int root, bool *live)
{
    if (root < 0 || live[root])
        return;
    live[root] = true;
    const ptc_lexpr *e = &b->e[root];
    for (int k = 0; k < 3; k++)
        mark_live(b, e->arg[k], live);
    int vals[64], n = 0;
    for (int k = 0; k < e->nidx; k++)
        n = ptc_ix_vals(e->idx[k], vals, n, 64);
    if (e->ix)
        n = ptc_ix_vals(e->ix, vals, n, 64);
    for (int k = 0; k < n; k++)
        mark_live(b, vals[k], live);
}

int ptc_lbody_cost(const ptc_lbody *b, int root)
{
    bool stack_live[256];
    bool *live = b->n <= 256 ? stack_live : calloc((size_t)b->n, 1);
    memset(live, 0, (size_t)b->n);
    mark_live(b, root, live);
    int cost = 0;
    for (int i = 0; i < b->n; i++)
        if (live[i])
            cost += lops[b->e[i].op].cost;
    if (live != stack_live)
        free(live);
    return cost;
}

/* ---- programs -------------------------------------------------------------- */

ptc_lprog *ptc_lprog_new(ptc_arena *a)
{
    ptc_lprog *p = PTC_NEW(a, ptc_lprog);
    p->arena = a;
    return p;
}

#define GROW(a, arr, n, cap)                                                    \
    do {                                                                        \
        if ((n) == (cap)) {                                                     \
            int ncap_ = (cap) ? (cap) * 2 : 16;                                 \
            void *np_ = ptc_arena_alloc((a), sizeof *(arr) * (size_t)ncap_);    \
            if (n)                                                              \
                memcpy(np_, (arr), sizeof *(arr) * (size_t)(n));                \
            (arr) = np_;                                                        \
            (cap) = ncap_;                                                      \
        }                                                                       \
    } while (0)

ptc_lbuf *ptc_lprog_add_buf(ptc_lprog *p, ptc_dtype dt, int ndim, const ptc_dim *shape, int kind)
{
    GROW(p->arena, p->bufs, p->nbufs, p->cap_bufs);
    ptc_lbuf *b = PTC_NEW(p->arena, ptc_lbuf);
    b->id = p->nbufs;
    b->name = ptc_arena_printf(p->arena, "buf%d", b->id);
    b->dtype = dt;
    b->ndim = ndim;
    b->kind = (uint8_t)kind;
    b->input = b->output = b->def = -1;
    for (int d = 0; d < ndim; d++)
        b->shape[d] = shape[d];
    /* contiguous strides */
    ptc_dim s = ptc_dim_c(1);
    for (int d = ndim - 1; d >= 0; d--) {
        b->strides[d] = s;
        s = ptc_dim_mul(p->arena, s, shape[d]);
    }
    p->bufs[p->nbufs++] = b;
    return b;
}

ptc_lnode *ptc_lprog_add_node(ptc_lprog *p, int kind)
{
    GROW(p->arena, p->nodes, p->nnodes, p->cap_nodes);
    ptc_lnode *n = PTC_NEW(p->arena, ptc_lnode);
    n->id = p->nnodes;
    n->kind = (uint8_t)kind;
    n->out[0] = n->out[1] = -1;
    n->value = -1;
    p->nodes[p->nnodes++] = n;
    return n;
}

ptc_lnode *ptc_lprog_insert_node(ptc_lprog *p, int at, int kind)
{
    PTC_ASSERT(at >= 0 && at <= p->nnodes);
    ptc_lnode *n = ptc_lprog_add_node(p, kind);
    memmove(&p->nodes[at + 1], &p->nodes[at], sizeof *p->nodes * (size_t)(p->nnodes - 1 - at));
    p->nodes[at] = n;
    for (int i = at; i < p->nnodes; i++)
        if (p->nodes[i])
            p->nodes[i]->id = i;
    for (int b = 0; b < p->nbufs; b++)
        if (p->bufs[b]->def >= at)
            p->bufs[b]->def++;
    return n;
}

/* A bool entry of body: the point (vars over ext) lies inside `ranges` in
 * every dim ext grows statically; -1 where it grows none. */
static int inside_of(ptc_arena *a, ptc_lbody *body, int ndim, const ptc_dim *ranges,
                     const ptc_dim *ext, bool *grown)
{
    int inside = -1;
    for (int d = 0; d < ndim; d++) {
        grown[d] = ptc_dim_is_static(ext[d]) && ptc_dim_is_static(ranges[d]) &&
                   ext[d].value > ranges[d].value;
        if (!grown[d])
            continue;
        int var = ptc_lbody_index(a, body, ptc_ix_var(a, d, ext[d]));
        int in = ptc_lbody_binary(a, body, PTC_L_LT, PTC_BOOL, var,
                                  ptc_lbody_const_i(a, body, ranges[d].value, PTC_I64));
        inside =
            inside < 0 ? in : ptc_lbody_binary(a, body, PTC_L_BITWISE_AND, PTC_BOOL, inside, in);
    }
    return inside;
}

static bool steps_grown(const ptc_lexpr *e, int ndim, const bool *grown)
{
    for (int k = 0; k < e->nidx; k++)
        for (int d = 0; d < ndim; d++)
            if (grown[d] && ptc_ix_uses_var(e->idx[k], d))
                return true;
    return false;
}

void ptc_lnode_zero_past(ptc_lprog *p, ptc_lnode *n, const ptc_dim *ext)
{
    ptc_arena *a = p->arena;
    PTC_ASSERT(n->kind == PTC_LN_POINTWISE);
    ptc_lbody body = {0};
    bool grown[PTC_MAX_DIMS];
    int inside = inside_of(a, &body, n->ndim, n->ranges, ext, grown);
    if (inside < 0)
        return;
    /* the old entries follow the mask, their operands renumbered */
    int *at = PTC_NEWN(a, int, n->body.n > 0 ? n->body.n : 1);
    for (int i = 0; i < n->body.n; i++) {
        ptc_lexpr e = n->body.e[i];
        int nargs = e.op == PTC_L_LOAD ? 1 : ptc_lop_arity(e.op);
        for (int k = 0; k < nargs; k++)
            if (e.arg[k] >= 0)
                e.arg[k] = at[e.arg[k]];
        if (e.op == PTC_L_LOAD && steps_grown(&e, n->ndim, grown)) /* no read outside */
            e.arg[0] = e.arg[0] < 0 ? inside
                                    : ptc_lbody_binary(a, &body, PTC_L_BITWISE_AND, PTC_BOOL,
                                                       inside, e.arg[0]);
        at[i] = ptc_lbody_add(a, &body, &e);
    }
    ptc_dtype dt = body.e[at[n->value]].dtype;
    n->value =
        ptc_lbody_where(a, &body, dt, inside, at[n->value], ptc_lbody_const_f(a, &body, 0, dt));
    n->body = body;
    for (int d = 0; d < n->ndim; d++)
        n->ranges[d] = ext[d];
}

ptc_lnode *ptc_lprog_insert_copy(ptc_lprog *p, int at, int src, int dst, const ptc_lnode *like,
                                 const char *label)
{
    ptc_arena *a = p->arena;
    ptc_lnode *cp = ptc_lprog_insert_node(p, at, PTC_LN_POINTWISE);
    const ptc_lbuf *from = p->bufs[src];
    ptc_lbuf *to = p->bufs[dst];
    PTC_ASSERT(from->ndim == to->ndim && from->dtype == to->dtype);
    const ptc_ix *idx[PTC_MAX_DIMS];
    cp->ndim = to->ndim;
    for (int d = 0; d < to->ndim; d++) {
        cp->ranges[d] = from->shape[d];
        idx[d] = ptc_ix_var(a, d, from->shape[d]);
    }
    cp->value = ptc_lbody_load(a, &cp->body, src, from->dtype, to->ndim, idx);
    ptc_lnode_zero_past(p, cp, to->shape);
    cp->out[0] = dst;
    to->def = cp->id;
    cp->label = label;
    memcpy(cp->ops, like->ops, sizeof cp->ops);
    ptc_lnode_set_prov(p, cp, like->nprov, like->prov);
    if (to->kind == PTC_LB_TEMP) {
        to->nprov = cp->nprov;
        to->prov = cp->prov;
    }
    return cp;
}

void ptc_lnode_set_prov(ptc_lprog *p, ptc_lnode *n, int nprov, const char *const *prov)
{
    n->nprov = nprov;
    n->prov = PTC_NEWN(p->arena, const char *, nprov > 0 ? nprov : 1);
    for (int i = 0; i < nprov; i++)
        n->prov[i] = prov[i];
}

bool ptc_lnode_reads(const ptc_lnode *n, int buf)
{
    if (n->kind == PTC_LN_EXTERN) {
        for (int i = 0; i < n->nxin; i++)
            if (n->xin[i].buf == buf)
                return true;
        return false;
    }
    for (int i = 0; i < n->body.n; i++)
        if (n->body.e[i].op == PTC_L_LOAD && n->body.e[i].buf == buf)
            return true;
    return false;
}

void ptc_lprog_last_reads(const ptc_lprog *p, const int *step_of, int *last)
{
    for (int r = 0; r < p->nnodes; r++) {
        const ptc_lnode *n = p->nodes[r];
        if (!n)
            continue;
        int st = step_of[r];
        if (n->kind == PTC_LN_EXTERN) {
            for (int i = 0; i < n->nxin; i++)
                if (n->xin[i].buf >= 0 && st > last[n->xin[i].buf])
                    last[n->xin[i].buf] = st;
            continue;
        }
        for (int i = 0; i < n->body.n; i++)
            if (n->body.e[i].op == PTC_L_LOAD && st > last[n->body.e[i].buf])
                last[n->body.e[i].buf] = st;
    }
}

int ptc_lprog_readers(const ptc_lprog *p, int buf, int *nodes, int max)
{
    int k = 0;
    for (int i = 0; i < p->nnodes; i++)
        if (p->nodes[i] && ptc_lnode_reads(p->nodes[i], buf)) {
            if (k < max && nodes)
                nodes[k] = i;
            k++;
        }
    return k;
}

/* ---- printing -------------------------------------------------------------- */

static void print_prov(ptc_buf *b, int n, const char *const *prov)
{
    if (n <= 0)
        return;
    ptc_buf_puts(b, "  <-");
    for (int i = 0; i < n; i++)
        ptc_buf_printf(b, "%s %%%s", i ? "," : "", prov[i]);
}

static void print_const(ptc_buf *b, const ptc_lexpr *e)
{
    if (e->is_int)
        ptc_buf_printf(b, "%lld", (long long)e->ival);
    else if (isinf(e->fval))
        ptc_buf_puts(b, e->fval > 0 ? "inf" : "-inf");
    else if (isnan(e->fval))
        ptc_buf_puts(b, "nan");
    else
        ptc_buf_printf(b, "%.17g", e->fval);
}

static void print_dims(ptc_buf *b, const ptc_dim *d, int n, char var, int first)
{
    ptc_buf_putc(b, '[');
    for (int i = 0; i < n; i++) {
        ptc_buf_printf(b, "%s%c%d < ", i ? ", " : "", var, first + i);
        ptc_dim_print(b, d[i]);
    }
    ptc_buf_putc(b, ']');
}

void ptc_lbody_print(ptc_buf *b, const ptc_lbody *body, const char *const *names, int nnames,
                     const char *const *bufnames, const char *indent, int64_t seed_base)
{
    for (int i = 0; i < body->n; i++) {
        const ptc_lexpr *e = &body->e[i];
        ptc_buf_printf(b, "%st%d = %s", indent, i, ptc_lop_name(e->op));
        switch (e->op) {
        case PTC_L_LOAD:
            if (bufnames && e->buf >= 0)
                ptc_buf_printf(b, " %s[", bufnames[e->buf]);
            else
                ptc_buf_printf(b, " buf%d[", e->buf);
            for (int k = 0; k < e->nidx; k++) {
                if (k)
                    ptc_buf_puts(b, ", ");
                ptc_ix_print(b, e->idx[k], names, nnames);
            }
            ptc_buf_putc(b, ']');
            if (e->arg[0] >= 0) {
                ptc_buf_printf(b, " if t%d else ", e->arg[0]);
                print_const(b, e);
            }
            break;
        case PTC_L_CONST:
            ptc_buf_putc(b, ' ');
            print_const(b, e);
            break;
        case PTC_L_INDEX:
            ptc_buf_putc(b, ' ');
            ptc_ix_print(b, e->ix, names, nnames);
            break;
        case PTC_L_CHECK: {
            int kind = (int)(e->ival & 0xff);
            ptc_buf_printf(b, " %s@%d t%d, t%d, t%d",
                           kind > 0 && kind < PTC_CHECK_COUNT ? checks[kind].name : "?",
                           (int)(e->ival >> 8), e->arg[0], e->arg[1], e->arg[2]);
            break;
        }
        case PTC_L_RAND:
        case PTC_L_RANDN:
            ptc_buf_printf(b, " seed=%lld at ", (long long)(e->seed - seed_base));
            ptc_ix_print(b, e->ix, names, nnames);
            break;
        default:
            for (int k = 0; k < lops[e->op].arity; k++)
                ptc_buf_printf(b, "%st%d", k ? ", " : " ", e->arg[k]);
            break;
        }
        ptc_buf_printf(b, " : %s\n", ptc_dtype_name(e->dtype));
    }
}

static const char *buf_kind_name(const ptc_lbuf *b)
{
    switch (b->kind) {
    case PTC_LB_INPUT: return "input";
    case PTC_LB_OUTPUT: return "output";
    default: return "temp";
    }
}

static void print_shape(ptc_buf *b, const ptc_lbuf *buf, bool strides)
{
    ptc_buf_printf(b, "%s[", ptc_dtype_name(buf->dtype));
    for (int d = 0; d < buf->ndim; d++) {
        if (d)
            ptc_buf_putc(b, ',');
        ptc_dim_print(b, buf->shape[d]);
    }
    ptc_buf_putc(b, ']');
    if (!strides)
        return;
    ptc_buf_putc(b, '{');
    for (int d = 0; d < buf->ndim; d++) {
        if (d)
            ptc_buf_putc(b, ',');
        ptc_dim_print(b, buf->strides[d]);
    }
    ptc_buf_putc(b, '}');
}

static bool is_contiguous(ptc_arena *a, const ptc_lbuf *buf)
{
    ptc_dim s = ptc_dim_c(1);
    for (int d = buf->ndim - 1; d >= 0; d--) {
        if (!ptc_dim_eq(buf->strides[d], s))
            return false;
        s = ptc_dim_mul(a, s, buf->shape[d]);
    }
    return true;
}

static void print_buffer(ptc_buf *b, const ptc_lprog *p, const ptc_lbuf *buf)
{
    ptc_buf_printf(b, "%s: ", buf->name);
    print_shape(b, buf, !is_contiguous(p->arena, buf));
    ptc_buf_printf(b, " %s", buf_kind_name(buf));
    if (buf->kind == PTC_LB_INPUT)
        ptc_buf_printf(b, " %d", buf->input);
    if (buf->kind == PTC_LB_OUTPUT)
        ptc_buf_printf(b, " %d", buf->output);
    print_prov(b, buf->nprov, buf->prov);
    ptc_buf_putc(b, '\n');
}

/* Variable names of a node: x0.. for ranges, r0.. for reduction ranges. */
static const char **node_var_names(ptc_arena *a, const ptc_lnode *n)
{
    const char **names = PTC_NEWN(a, const char *, n->ndim + n->nred + 1);
    for (int i = 0; i < n->ndim; i++)
        names[i] = ptc_arena_printf(a, "x%d", i);
    for (int i = 0; i < n->nred; i++)
        names[n->ndim + i] = ptc_arena_printf(a, "r%d", i);
    return names;
}

static void print_view(ptc_buf *b, const ptc_lprog *p, const ptc_lview *v)
{
    if (v->buf < 0) {
        ptc_buf_puts(b, "None");
        return;
    }
    ptc_buf_printf(b, "%s[", p->bufs[v->buf]->name);
    for (int d = 0; d < v->ndim; d++) {
        if (d)
            ptc_buf_putc(b, ',');
        ptc_dim_print(b, v->sizes[d]);
    }
    ptc_buf_puts(b, "]{");
    for (int d = 0; d < v->ndim; d++) {
        if (d)
            ptc_buf_putc(b, ',');
        ptc_dim_print(b, v->strides[d]);
    }
    ptc_buf_putc(b, '}');
    if (!(ptc_dim_is_static(v->offset) && v->offset.value == 0)) {
        ptc_buf_putc(b, '+');
        ptc_dim_print(b, v->offset);
    }
}

static void print_outs(ptc_buf *b, const ptc_lprog *p, const ptc_lnode *n)
{
    ptc_buf_puts(b, " ->");
    for (int k = 0; k < 2; k++)
        if (n->out[k] >= 0)
            ptc_buf_printf(b, "%s %s", k ? "," : "", p->bufs[n->out[k]]->name);
        else if (k == 0 && n->out[1] >= 0)
            ptc_buf_puts(b, " _");
}

static void print_node(ptc_buf *b, const ptc_lprog *p, const ptc_lnode *n)
{
    ptc_buf_printf(b, "n%d = ", n->id);
    if (n->kind == PTC_LN_EXTERN) {
        ptc_buf_printf(b, "extern %s(", ptc_op_name(n->xnode->op));
        for (int i = 0; i < n->nxin; i++) {
            if (i)
                ptc_buf_puts(b, ", ");
            print_view(b, p, &n->xin[i]);
        }
        ptc_buf_putc(b, ')');
        print_outs(b, p, n);
        print_prov(b, n->nprov, n->prov);
        ptc_buf_putc(b, '\n');
        return;
    }
    if (n->kind == PTC_LN_POINTWISE) {
        ptc_buf_puts(b, "pointwise ");
        print_dims(b, n->ranges, n->ndim, 'x', 0);
    } else {
        ptc_buf_printf(b, "reduction %s%s ", ptc_reduce_name(n->reduce),
                       n->nan_last ? " nan_last" : "");
        print_dims(b, n->ranges, n->ndim, 'x', 0);
        ptc_buf_puts(b, " over ");
        print_dims(b, n->red, n->nred, 'r', 0);
        if (n->reduce == PTC_RED_WELFORD)
            ptc_buf_printf(b, " correction=%g", n->correction);
    }
    ptc_buf_printf(b, " of t%d", n->value);
    print_outs(b, p, n);
    print_prov(b, n->nprov, n->prov);
    ptc_buf_putc(b, '\n');
    ptc_arena *tmp = ptc_arena_new();
    const char **names = node_var_names(tmp, n);
    const char **bufnames = PTC_NEWN(tmp, const char *, p->nbufs + 1);
    for (int i = 0; i < p->nbufs; i++)
        bufnames[i] = p->bufs[i]->name;
    ptc_lbody_print(b, &n->body, names, n->ndim + n->nred, bufnames, "    ", 0);
    ptc_arena_free(tmp);
}

void ptc_lprog_print(ptc_buf *b, const ptc_lprog *p)
{
    ptc_buf_puts(b, "# ptc loops v1\n");
    for (int i = 0; i < p->nbufs; i++)
        if (!p->bufs[i]->removed)
            print_buffer(b, p, p->bufs[i]);
    for (int i = 0; i < p->nviews; i++)
        ptc_buf_printf(b, "%s\n", p->views[i]);
    for (int i = 0; i < p->nnodes; i++)
        if (p->nodes[i])
            print_node(b, p, p->nodes[i]);
    ptc_buf_puts(b, "return (");
    for (int i = 0; i < p->noutputs; i++)
        ptc_buf_printf(b, "%s%s", i ? ", " : "", p->bufs[p->outputs[i]]->name);
    ptc_buf_puts(b, ")\n");
}

/* ---- verification ---------------------------------------------------------- */

static int vfail(ptc_error *err, const ptc_lnode *n, int entry, const char *what)
{
    if (entry >= 0)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "loops", "node n%d, entry t%d: %s", n->id, entry,
                          what);
    return ptc_errorf(err, PTC_ERR_INTERNAL, "loops", "node n%d: %s", n->id, what);
}

static bool ix_vars_ok(const ptc_ix *x, int nvars, int entry)
{
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        if (at->kind == PTC_IXA_VAR && (at->id < 0 || at->id >= nvars))
            return false;
        if (at->kind == PTC_IXA_VAL && (at->id < 0 || at->id >= entry))
            return false;
        if ((at->kind == PTC_IXA_DIV || at->kind == PTC_IXA_MOD) &&
            !ix_vars_ok(at->x, nvars, entry))
            return false;
    }
    return true;
}

/* Operand dtype rules of one entry. */
static const char *check_entry(const ptc_lprog *p, const ptc_lbody *b, int i, int nvars)
{
    const ptc_lexpr *e = &b->e[i];
    if (e->op >= PTC_L_COUNT)
        return "unknown op";
    for (int k = 0; k < lops[e->op].arity; k++)
        if (e->arg[k] < 0 || e->arg[k] >= i)
            return "operand is not an earlier entry";
    const ptc_lexpr *x = lops[e->op].arity > 0 ? &b->e[e->arg[0]] : NULL;
    const ptc_lexpr *y = lops[e->op].arity > 1 ? &b->e[e->arg[1]] : NULL;
    switch (e->op) {
    case PTC_L_LOAD:
        if (e->buf < 0 || e->buf >= p->nbufs)
            return "load of an unknown buffer";
        if (p->bufs[e->buf]->dtype != e->dtype)
            return "load dtype differs from the buffer's";
        if (e->nidx != p->bufs[e->buf]->ndim && e->nidx != 1)
            return "load index rank differs from the buffer's";
        if (e->arg[0] >= 0 && (e->arg[0] >= i || b->e[e->arg[0]].dtype != PTC_BOOL))
            return "load mask is not an earlier bool";
        for (int k = 0; k < e->nidx; k++)
            if (!ix_vars_ok(e->idx[k], nvars, i))
                return "load index uses a variable out of the node's ranges";
        return NULL;
    case PTC_L_INDEX:
    case PTC_L_RAND:
    case PTC_L_RANDN:
        if (!e->ix || !ix_vars_ok(e->ix, nvars, i))
            return "index uses a variable out of the node's ranges";
        if (e->op != PTC_L_INDEX && !ptc_dtype_is_float(e->dtype))
            return "random draw of a non-float dtype";
        return NULL;
    case PTC_L_CONST:
    case PTC_L_CAST:
        return NULL;
    case PTC_L_WHERE:
        if (x->dtype != PTC_BOOL)
            return "where condition is not bool";
        if (b->e[e->arg[1]].dtype != e->dtype || b->e[e->arg[2]].dtype != e->dtype)
            return "where operands differ from its dtype";
        return NULL;
    case PTC_L_CHECK:
        if (x->dtype != PTC_BOOL)
            return "check condition is not bool";
        if (y->dtype != e->dtype || ptc_dtype_is_float(e->dtype))
            return "checked value is not an integer of the check's dtype";
        return NULL;
    case PTC_L_EQ: case PTC_L_NE: case PTC_L_LT: case PTC_L_LE: case PTC_L_GT: case PTC_L_GE:
        if (x->dtype != y->dtype)
            return "comparison operands differ in dtype";
        if (e->dtype != PTC_BOOL)
            return "comparison result is not bool";
        return NULL;
    case PTC_L_ISNAN:
    case PTC_L_LOGICAL_NOT:
        return e->dtype == PTC_BOOL ? NULL : "predicate result is not bool";
    default:
        if (x->dtype != e->dtype || (y && y->dtype != e->dtype))
            return "operand dtype differs from the result's";
        return NULL;
    }
}

static int verify_body(const ptc_lprog *p, const ptc_lnode *n, ptc_error *err)
{
    int nvars = n->ndim + n->nred;
    for (int i = 0; i < n->body.n; i++) {
        const char *why = check_entry(p, &n->body, i, nvars);
        if (why)
            return vfail(err, n, i, why);
        const ptc_lexpr *e = &n->body.e[i];
        if (e->op == PTC_L_LOAD) {
            const ptc_lbuf *src = p->bufs[e->buf];
            if (src->removed)
                return vfail(err, n, i, "reads a buffer that was inlined away");
            if (src->def >= 0 && (!p->nodes[src->def] || src->def >= n->id))
                return vfail(err, n, i, "reads a buffer not written before it");
            if (e->nidx != src->ndim)
                return vfail(err, n, i, "load index rank differs from the buffer's");
        }
    }
    if (n->value < 0 || n->value >= n->body.n)
        return vfail(err, n, -1, "computed value is not a body entry");
    return 0;
}

static int verify_outputs(const ptc_lprog *p, const ptc_lnode *n, ptc_error *err)
{
    for (int k = 0; k < 2; k++) {
        int o = n->out[k];
        if (o < 0)
            continue;
        if (o >= p->nbufs || p->bufs[o]->def != n->id)
            return vfail(err, n, -1, "writes a buffer it does not define");
        if (n->kind == PTC_LN_EXTERN)
            continue;
        const ptc_lbuf *b = p->bufs[o];
        if (b->ndim != n->ndim)
            return vfail(err, n, -1, "output rank differs from the node's ranges");
        for (int d = 0; d < n->ndim; d++)
            if (!ptc_dim_eq(b->shape[d], n->ranges[d]))
                return vfail(err, n, -1, "output shape differs from the node's ranges");
    }
    if (n->out[0] < 0 && n->out[1] < 0)
        return vfail(err, n, -1, "writes no buffer");
    return 0;
}

int ptc_lprog_verify(const ptc_lprog *p, ptc_error *err)
{
    for (int i = 0; i < p->nbufs; i++) {
        const ptc_lbuf *b = p->bufs[i];
        if (b->removed)
            continue;
        if (b->kind == PTC_LB_INPUT ? b->def >= 0 : b->def < 0 || b->def >= p->nnodes)
            return ptc_errorf(err, PTC_ERR_INTERNAL, "loops", "%s: %s", b->name,
                              b->kind == PTC_LB_INPUT ? "an input has a writer"
                                                      : "no node writes it");
        if (b->kind != PTC_LB_INPUT && !p->nodes[b->def])
            return ptc_errorf(err, PTC_ERR_INTERNAL, "loops", "%s: its writer was removed",
                              b->name);
    }
    for (int i = 0; i < p->nnodes; i++) {
        const ptc_lnode *n = p->nodes[i];
        if (!n)
            continue;
        if (n->id != i)
            return vfail(err, n, -1, "id differs from its position");
        if (verify_outputs(p, n, err))
            return -1;
        if (n->kind == PTC_LN_EXTERN) {
            for (int k = 0; k < n->nxin; k++) {
                int bi = n->xin[k].buf;
                if (bi >= p->nbufs || (bi >= 0 && p->bufs[bi]->def >= n->id))
                    return vfail(err, n, -1, "extern reads a buffer not written before it");
            }
            continue;
        }
        if (n->kind == PTC_LN_REDUCTION && n->reduce >= PTC_RED_COUNT)
            return vfail(err, n, -1, "unknown reduction");
        if (verify_body(p, n, err))
            return -1;
    }
    for (int i = 0; i < p->noutputs; i++)
        if (p->outputs[i] < 0 || p->outputs[i] >= p->nbufs ||
            p->bufs[p->outputs[i]]->kind != PTC_LB_OUTPUT)
            return ptc_errorf(err, PTC_ERR_INTERNAL, "loops",
                              "graph output %d is not an output buffer", i);
    return 0;
}
