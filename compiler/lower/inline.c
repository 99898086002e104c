/* Inlining: vertical fusion of pointwise producers into their consumers.
 *
 * A pointwise node whose buffer is read only by other loop nodes can be
 * replaced, at each load, by a copy of its body with its variables bound to
 * the load's index. Loads behind a mask (padding, concatenation) carry the
 * mask into the copied body, so an inlined producer never reads where the
 * original load would not have. Inlining is refused when it would recompute
 * an expensive body: unless the body is cheap (about a load, an add and an
 * rsqrt), the cost of the producer times the number of extra evaluations per
 * element it computes (broadcast consumers, several consumers) must stay
 * under a limit, and never more than 8x.
 * Bodies are rebuilt with common-subexpression elimination, so two inlined
 * producers that load the same element load it once.
 */
#include "lower/lower_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- hashed body building -------------------------------------------------- */

static bool fbits_eq(double x, double y) { return memcmp(&x, &y, sizeof x) == 0; }

static bool entry_eq(const ptc_lexpr *x, const ptc_lexpr *y)
{
    if (x->op != y->op || x->dtype != y->dtype || x->buf != y->buf || x->nidx != y->nidx ||
        x->is_int != y->is_int || x->ival != y->ival || !fbits_eq(x->fval, y->fval) ||
        x->seed != y->seed)
        return false;
    for (int k = 0; k < 3; k++)
        if (x->arg[k] != y->arg[k])
            return false;
    for (int k = 0; k < x->nidx; k++)
        if (!ptc_ix_eq(x->idx[k], y->idx[k]))
            return false;
    if ((x->ix == NULL) != (y->ix == NULL) || (x->ix && !ptc_ix_eq(x->ix, y->ix)))
        return false;
    return true;
}

/* A hash of a body's entries, so that emitting into a body of n entries costs
 * O(1), not O(n) (a chain of 10,000 inlined pointwise ops took minutes). It
 * indexes the entry array it was built for: a body whose array grew (or was
 * copied) is indexed again, entries added with ptc_lbody_add are indexed
 * when next asked, and a hit is compared in full, so it can never be wrong. */
struct ptc_lbody_cse {
    const ptc_lexpr *e; /* the array indexed */
    int n;              /* entries indexed */
    int mask;           /* slots - 1; slots > 2 * the array's capacity */
    int *slots;         /* entry index + 1; 0 empty */
};

static uint64_t entry_hash(const ptc_lexpr *x)
{
    /* idx and ix are left to entry_eq: loads of one buffer share a chain */
    int64_t f[] = {x->op,   x->dtype, x->buf,    x->nidx,   x->is_int,
                   x->ival, x->seed,  x->arg[0], x->arg[1], x->arg[2]};
    uint64_t h = ptc_hash_bytes(PTC_HASH_INIT, f, sizeof f);
    return ptc_hash_bytes(h, &x->fval, sizeof x->fval);
}

/* The slot of an entry equal to e, else the empty slot where e would go. */
static int *cse_slot(const ptc_lbody *b, const ptc_lexpr *e)
{
    const struct ptc_lbody_cse *c = b->cse;
    int s = (int)(entry_hash(e) & (uint64_t)c->mask);
    while (c->slots[s] && !entry_eq(&b->e[c->slots[s] - 1], e))
        s = (s + 1) & c->mask;
    return &c->slots[s];
}

static void cse_update(ptc_arena *a, ptc_lbody *b)
{
    struct ptc_lbody_cse *c = b->cse;
    if (!c || c->e != b->e || c->n > b->n) {
        int slots = 64;
        while (slots <= 2 * (b->cap > b->n ? b->cap : b->n))
            slots *= 2;
        c = b->cse = PTC_NEW(a, struct ptc_lbody_cse);
        c->e = b->e;
        c->mask = slots - 1;
        c->slots = PTC_NEWN(a, int, slots);
    }
    /* a later equal entry replaces an earlier one, as the backward scan
     * this replaced found the last */
    for (; c->n < b->n; c->n++)
        *cse_slot(b, &b->e[c->n]) = c->n + 1;
}

int ptc_body_emit(ptc_arena *a, ptc_lbody *b, const ptc_lexpr *e)
{
    /* Random draws are deterministic in their index, so they are values too. */
    cse_update(a, b);
    int *slot = cse_slot(b, e);
    if (*slot)
        return *slot - 1;
    int i = ptc_lbody_add(a, b, e);
    if (b->e == b->cse->e) { /* else the array grew: indexed anew next time */
        *slot = i + 1;
        b->cse->n = i + 1;
    }
    return i;
}

static int emit_binary(ptc_arena *a, ptc_lbody *b, int op, ptc_dtype dt, int x, int y)
{
    ptc_lexpr e;
    memset(&e, 0, sizeof e);
    e.op = (uint8_t)op;
    e.dtype = dt;
    e.arg[0] = x;
    e.arg[1] = y;
    e.arg[2] = -1;
    e.buf = -1;
    return ptc_body_emit(a, b, &e);
}

/* Copies entry e (from another body) into dst: operands through map, loop
 * variables through vars, and an extra mask ANDed into loads. */
static int copy_entry(ptc_arena *a, ptc_lbody *dst, const ptc_lexpr *src, const int *map,
                      int nmap, const ptc_ix *const *vars, int nvars, int mask)
{
    ptc_lexpr e = *src;
    for (int k = 0; k < ptc_lop_arity(e.op); k++)
        e.arg[k] = map[src->arg[k]];
    if (e.op == PTC_L_LOAD) {
        e.idx = PTC_NEWN(a, const ptc_ix *, e.nidx > 0 ? e.nidx : 1);
        for (int k = 0; k < e.nidx; k++)
            e.idx[k] = ptc_ix_subst(a, src->idx[k], vars, nvars, map, nmap);
        int inner = src->arg[0] >= 0 ? map[src->arg[0]] : -1;
        if (mask >= 0 && inner >= 0)
            e.arg[0] = emit_binary(a, dst, PTC_L_BITWISE_AND, PTC_BOOL, mask, inner);
        else
            e.arg[0] = mask >= 0 ? mask : inner;
        if (mask >= 0 && src->arg[0] < 0) {
            /* masked-off lanes of an inlined load read zero */
            e.is_int = !ptc_dtype_is_float(e.dtype);
            e.ival = 0;
            e.fval = 0;
        }
    } else if (e.op == PTC_L_CHECK && mask >= 0) {
        /* masked-off lanes computed on loads that read zero: they pass */
        ptc_lexpr off;
        memset(&off, 0, sizeof off);
        off.op = PTC_L_LOGICAL_NOT;
        off.dtype = PTC_BOOL;
        off.arg[0] = mask;
        off.arg[1] = off.arg[2] = -1;
        off.buf = -1;
        e.arg[0] =
            emit_binary(a, dst, PTC_L_BITWISE_OR, PTC_BOOL, e.arg[0], ptc_body_emit(a, dst, &off));
    } else if (e.ix) {
        e.ix = ptc_ix_subst(a, src->ix, vars, nvars, map, nmap);
    }
    return ptc_body_emit(a, dst, &e);
}

/* Entries of b that `root` depends on. */
static void live_set(const ptc_lbody *b, int root, bool *live)
{
    if (root < 0 || live[root])
        return;
    live[root] = true;
    const ptc_lexpr *e = &b->e[root];
    for (int k = 0; k < 3; k++)
        live_set(b, e->arg[k], live);
    int vals[64], n = 0;
    for (int k = 0; k < e->nidx; k++)
        n = ptc_ix_vals(e->idx[k], vals, n, 64);
    if (e->ix)
        n = ptc_ix_vals(e->ix, vals, n, 64);
    for (int k = 0; k < n; k++)
        live_set(b, vals[k], live);
}

int ptc_body_copy(ptc_arena *a, ptc_lbody *dst, const ptc_lbody *src, int root,
                  const ptc_ix *const *vars, int nvars, int mask)
{
    bool *live = calloc((size_t)src->n + 1, 1);
    int *map = malloc(sizeof(int) * ((size_t)src->n + 1));
    live_set(src, root, live);
    for (int i = 0; i <= root; i++)
        map[i] = live[i] ? copy_entry(a, dst, &src->e[i], map, src->n, vars, nvars, mask) : -1;
    int r = map[root];
    free(live);
    free(map);
    return r;
}

/* ---- inlining -------------------------------------------------------------- */

/* Whether a copy of n's body (ptc_body_copy from its value) is the body
 * itself: every entry live, no two equal. */
static bool body_is_canonical(ptc_arena *a, ptc_lnode *n)
{
    ptc_lbody *b = &n->body;
    bool *live = calloc((size_t)b->n + 1, 1);
    live_set(b, n->value, live);
    cse_update(a, b);
    bool ok = b->n > 0;
    for (int i = 0; i < b->n && ok; i++)
        ok = live[i] && *cse_slot(b, &b->e[i]) == i + 1;
    free(live);
    return ok;
}

/* May c take prod's body over instead of copying it? When prod's only reader
 * loads it once, unmasked, at prod's own variables, as its first entry, the
 * rebuilt body begins with an exact copy of a canonical prod body; taking it
 * over gives the same body in O(size of c), where the copy made a chain of
 * n single-reader ops cost O(n^2) time and memory. */
static bool can_take_over(const ptc_lnode *c, const ptc_lnode *prod, int nreaders,
                          bool prod_canonical)
{
    if (nreaders != 1 || !prod_canonical || c->body.n == 0 || prod->nred)
        return false;
    const ptc_lexpr *e = &c->body.e[0];
    if (e->op != PTC_L_LOAD || e->buf != prod->out[0] || e->arg[0] >= 0 || e->nidx != prod->ndim)
        return false;
    for (int k = 0; k < e->nidx; k++)
        if (!ptc_ix_is_var(e->idx[k], k) ||
            !ptc_dim_eq(e->idx[k]->terms[0].atom->d, prod->ranges[k]))
            return false;
    for (int i = 1; i < c->body.n; i++)
        if (c->body.e[i].op == PTC_L_LOAD && c->body.e[i].buf == e->buf)
            return false;
    return true;
}

/* Rebuilds consumer c with every load of `prod`'s buffer replaced by the body
 * (or, with take_over, c's body is prod's followed by the rest of c's). */
static void inline_into(ptc_lprog *p, ptc_lnode *c, const ptc_lnode *prod, bool take_over)
{
    ptc_arena *a = p->arena;
    int buf = prod->out[0];
    ptc_lbody nb = {0};
    int *map = malloc(sizeof(int) * ((size_t)c->body.n + 1));
    int first = 0;
    if (take_over) {
        nb = prod->body; /* prod is removed: its entries become c's */
        map[0] = prod->value;
        first = 1;
    }
    for (int i = first; i < c->body.n; i++) {
        const ptc_lexpr *e = &c->body.e[i];
        if (e->op != PTC_L_LOAD || e->buf != buf) {
            map[i] = copy_entry(a, &nb, e, map, c->body.n, NULL, 0, -1);
            continue;
        }
        const ptc_ix **vars = PTC_NEWN(a, const ptc_ix *, e->nidx > 0 ? e->nidx : 1);
        for (int k = 0; k < e->nidx; k++)
            vars[k] = ptc_ix_subst(a, e->idx[k], NULL, 0, map, c->body.n);
        int mask = e->arg[0] >= 0 ? map[e->arg[0]] : -1;
        int v = ptc_body_copy(a, &nb, &prod->body, prod->value, vars, e->nidx, mask);
        if (mask >= 0) {
            ptc_lexpr k;
            memset(&k, 0, sizeof k);
            k.op = PTC_L_CONST;
            k.dtype = e->dtype;
            k.is_int = e->is_int;
            k.ival = e->ival;
            k.fval = e->fval;
            k.arg[0] = k.arg[1] = k.arg[2] = -1;
            k.buf = -1;
            int other = ptc_body_emit(a, &nb, &k);
            ptc_lexpr w;
            memset(&w, 0, sizeof w);
            w.op = PTC_L_WHERE;
            w.dtype = e->dtype;
            w.arg[0] = mask;
            w.arg[1] = v;
            w.arg[2] = other;
            w.buf = -1;
            v = ptc_body_emit(a, &nb, &w);
        }
        map[i] = v;
    }
    c->value = map[c->value];
    c->body = nb;
    free(map);
    const char *label = prod->label ? prod->label : "pw";
    if (!c->label)
        c->label = label;
    else if (strlen(c->label) + strlen(label) < 48 && !strstr(c->label, label))
        c->label = ptc_arena_printf(a, "%s_%s", label, c->label);
    for (size_t i = 0; i < sizeof c->ops / sizeof *c->ops; i++)
        c->ops[i] |= prod->ops[i];
    /* provenance: the union */
    int n = c->nprov + prod->nprov;
    const char **prov = PTC_NEWN(a, const char *, n > 0 ? n : 1);
    int k = 0;
    for (int i = 0; i < prod->nprov; i++)
        prov[k++] = prod->prov[i];
    for (int i = 0; i < c->nprov; i++) {
        bool dup = false;
        for (int j = 0; j < k; j++)
            dup |= strcmp(prov[j], c->prov[i]) == 0;
        if (!dup)
            prov[k++] = c->prov[i];
    }
    c->prov = prov;
    c->nprov = k;
}

static int count_loads(const ptc_lnode *c, int buf)
{
    int k = 0;
    for (int i = 0; i < c->body.n; i++)
        if (c->body.e[i].op == PTC_L_LOAD && c->body.e[i].buf == buf)
            k++;
    return k;
}

double ptc_dim_hint_at(ptc_dim d, double scale)
{
    if (ptc_dim_is_static(d))
        return (double)d.value;
    const char *names[32];
    int n = ptc_dim_symbols(d, names, 0, 32);
    ptc_bindings b = {0};
    for (int i = 0; i < n; i++)
        ptc_bindings_set(&b, names[i], (int64_t)scale);
    int64_t v = 0;
    if (ptc_dim_eval(d, &b, &v, NULL))
        return scale;
    return (double)v;
}

double ptc_dim_hint(ptc_dim d) { return ptc_dim_hint_at(d, PTC_SIZE_HINT); }

double ptc_node_iterations(const ptc_lnode *n)
{
    double it = 1;
    for (int d = 0; d < n->ndim; d++)
        it *= ptc_dim_hint(n->ranges[d]);
    for (int d = 0; d < n->nred; d++)
        it *= ptc_dim_hint(n->red[d]);
    return it;
}

double ptc_buf_numel_hint(const ptc_lbuf *b)
{
    double n = 1;
    for (int d = 0; d < b->ndim; d++)
        n *= ptc_dim_hint(b->shape[d]);
    return n;
}

enum { CHEAP = 8, MAX_READERS = 256 };

/* Which nodes read each buffer, kept as producers are inlined (asking
 * ptc_lprog_readers, a scan of every node, made the pass quadratic). A list
 * may hold removed nodes and repeats; they are dropped when it is read. */
typedef struct rlist {
    int n, cap;
    int *node;
} rlist;

static void rlist_add(rlist *r, int node)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 4;
        r->node = realloc(r->node, sizeof(int) * (size_t)r->cap);
        PTC_ASSERT(r->node);
    }
    r->node[r->n++] = node;
}

static void rlist_add_reads(rlist *idx, const ptc_lnode *n, int node)
{
    if (n->kind == PTC_LN_EXTERN) {
        for (int i = 0; i < n->nxin; i++)
            if (n->xin[i].buf >= 0) /* an absent optional tensor */
                rlist_add(&idx[n->xin[i].buf], node);
        return;
    }
    for (int i = 0; i < n->body.n; i++)
        if (n->body.e[i].op == PTC_L_LOAD)
            rlist_add(&idx[n->body.e[i].buf], node);
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

/* The live readers of buf in program order, as ptc_lprog_readers finds them. */
static int rlist_readers(const ptc_lprog *p, rlist *r, int *nodes, int max)
{
    int k = 0;
    for (int i = 0; i < r->n; i++)
        if (p->nodes[r->node[i]])
            r->node[k++] = r->node[i];
    if (k > 1) /* an unread buffer has no list at all (qsort wants one) */
        qsort(r->node, (size_t)k, sizeof(int), cmp_int);
    int n = 0;
    for (int i = 0; i < k; i++)
        if (n == 0 || r->node[n - 1] != r->node[i])
            r->node[n++] = r->node[i];
    r->n = n;
    for (int i = 0; i < n && i < max; i++)
        nodes[i] = r->node[i];
    return n;
}

/* May prod be inlined into its readers? Refused past the kernel size cap,
 * into an extern, and where it would recompute an expensive body. */
static bool worth_inlining(const ptc_lprog *p, const ptc_lnode *prod, const int *readers, int nr,
                           int limit, int *nrefused)
{
    int buf = prod->out[0];
    double evals = 0;
    for (int r = 0; r < nr; r++) {
        const ptc_lnode *c = p->nodes[readers[r]];
        if (c->kind == PTC_LN_EXTERN || c->body.n + prod->body.n > PTC_KERNEL_MAX_ENTRIES)
            return false;
        evals += count_loads(c, buf) * ptc_node_iterations(c);
    }
    double numel = ptc_buf_numel_hint(p->bufs[buf]);
    double factor = numel > 0 ? evals / numel : 1;
    if (factor > 1.001) {
        /* a cheap body (a load, an add and an rsqrt) is recomputed at any
         * broadcast factor: it costs less per element than its load */
        int cost = ptc_lbody_cost(&prod->body, prod->value);
        if (cost > CHEAP && (factor > 8 || cost * (factor - 1) > limit)) {
            (*nrefused)++;
            return false;
        }
    }
    return true;
}

/* One sweep over the program in order: each pointwise producer worth
 * inlining is inlined into its readers. Returns the number inlined. */
static int inline_round(ptc_lprog *p, int limit, int *nrefused)
{
    int inlined = 0;
    int readers[MAX_READERS];
    rlist *idx = calloc((size_t)p->nbufs + 1, sizeof *idx);
    /* per node: 1 its body is canonical (see body_is_canonical), 0 not, -1 unknown */
    signed char *canonical = malloc((size_t)p->nnodes + 1);
    PTC_ASSERT(idx && canonical);
    for (int i = 0; i < p->nnodes; i++) {
        canonical[i] = -1;
        if (p->nodes[i])
            rlist_add_reads(idx, p->nodes[i], i);
    }
    for (int i = 0; i < p->nnodes && !ptc_arena_failed(p->arena); i++) {
        ptc_lnode *prod = p->nodes[i];
        if (!prod || prod->kind != PTC_LN_POINTWISE)
            continue;
        int buf = prod->out[0];
        ptc_lbuf *b = p->bufs[buf];
        if (b->kind == PTC_LB_OUTPUT)
            continue;
        int nr = rlist_readers(p, &idx[buf], readers, MAX_READERS);
        if (nr == 0 || nr > MAX_READERS || !worth_inlining(p, prod, readers, nr, limit, nrefused))
            continue;
        for (int r = 0; r < nr; r++) {
            ptc_lnode *c = p->nodes[readers[r]];
            if (nr == 1 && canonical[i] < 0)
                canonical[i] = body_is_canonical(p->arena, prod);
            bool take_over = can_take_over(c, prod, nr, canonical[i] == 1);
            /* a taken-over body stays canonical when the rest of c's was */
            if (take_over && canonical[c->id] < 0)
                canonical[c->id] = body_is_canonical(p->arena, c);
            canonical[c->id] = take_over ? canonical[c->id] : -1;
            inline_into(p, c, prod, take_over);
            rlist_add_reads(idx, prod, c->id);
        }
        p->nodes[i] = NULL;
        b->removed = true;
        inlined++;
    }
    for (int i = 0; i < p->nbufs; i++)
        free(idx[i].node);
    free(idx);
    free(canonical);
    return inlined;
}

/* A sweep decides a producer before the producers that come after it are
 * inlined, so it can count one value read by two nodes that a later
 * inlining merges into one body, where the two loads become one. A
 * BatchNorm followed by hardswish (x * relu6(x + 3) / 6) is such a value:
 * refused as computed twice in the first sweep, it is read once by the
 * merged activation in the next. Sweeps repeat until one inlines nothing;
 * the refusals counted are the last sweep's, the ones that stand. */
int ptc_inline_pass(ptc_lprog *p, int limit, int *ninlined, int *nrefused)
{
    int round;
    do {
        *nrefused = 0;
        round = inline_round(p, limit, nrefused);
        *ninlined += round;
    } while (round > 0 && !ptc_arena_failed(p->arena));
    return 0;
}

/* ---- narrow stores ----------------------------------------------------------- */

/* Does widening a float of type `from` to `to` keep every value exactly? */
static bool widens_exactly(ptc_dtype from, ptc_dtype to)
{
    return ptc_dtype_is_float(from) && ptc_dtype_is_float(to) &&
           ptc_dtype_size(from) < ptc_dtype_size(to);
}

/* The narrower value n's buffer could hold instead (n's value is an exact
 * widening cast of it), or -1: only a temporary that loop nodes alone read,
 * stored in its own order. */
static int narrower_value(const ptc_lprog *p, const ptc_lnode *n, const bool *extern_read)
{
    if (n->kind != PTC_LN_POINTWISE || n->out[1] >= 0 || n->value < 0)
        return -1;
    const ptc_lbuf *b = p->bufs[n->out[0]];
    const ptc_lexpr *v = &n->body.e[n->value];
    if (b->kind != PTC_LB_TEMP || b->permuted || extern_read[b->id] || v->op != PTC_L_CAST ||
        v->dtype != b->dtype || !widens_exactly(n->body.e[v->arg[0]].dtype, v->dtype))
        return -1;
    return v->arg[0];
}

/* n stores the value `narrow` into its buffer, which its readers widen as
 * they load it (the widening is inlined into each, as a producer is). */
static void store_narrow(ptc_lprog *p, ptc_lnode *n, int narrow)
{
    ptc_arena *a = p->arena;
    ptc_lbuf *b = p->bufs[n->out[0]];
    ptc_dtype wide = b->dtype, dt = n->body.e[narrow].dtype;
    ptc_lbody nb = {0};
    n->value = ptc_body_copy(a, &nb, &n->body, narrow, NULL, 0, -1);
    n->body = nb;
    b->dtype = dt;
    ptc_lnode widen = {.kind = PTC_LN_POINTWISE, .ndim = n->ndim, .out = {b->id, -1}};
    ptc_lexpr load = {.op = PTC_L_LOAD, .dtype = dt, .arg = {-1, -1, -1}, .buf = b->id,
                      .nidx = n->ndim, .idx = PTC_NEWN(a, const ptc_ix *, n->ndim + 1)};
    for (int d = 0; d < n->ndim; d++) {
        widen.ranges[d] = n->ranges[d];
        load.idx[d] = ptc_ix_var(a, d, n->ranges[d]);
    }
    ptc_lexpr cast = {.op = PTC_L_CAST, .dtype = wide, .arg = {0, -1, -1}, .buf = -1};
    ptc_lbody_add(a, &widen.body, &load);
    widen.value = ptc_lbody_add(a, &widen.body, &cast);
    for (int i = 0; i < p->nnodes; i++) {
        ptc_lnode *c = p->nodes[i];
        if (c && c != n && c->kind != PTC_LN_EXTERN && count_loads(c, b->id)) {
            widen.label = c->label; /* the reader keeps its name */
            inline_into(p, c, &widen, false);
        }
    }
}

int ptc_store_narrow_pass(ptc_lprog *p)
{
    bool *extern_read = calloc((size_t)p->nbufs + 1, sizeof *extern_read);
    PTC_ASSERT(extern_read);
    for (int i = 0; i < p->nnodes; i++) {
        const ptc_lnode *n = p->nodes[i];
        for (int k = 0; n && n->kind == PTC_LN_EXTERN && k < n->nxin; k++)
            if (n->xin[k].buf >= 0)
                extern_read[n->xin[k].buf] = true;
    }
    int narrowed = 0;
    for (int i = 0; i < p->nnodes && !ptc_arena_failed(p->arena); i++) {
        int narrow = p->nodes[i] ? narrower_value(p, p->nodes[i], extern_read) : -1;
        if (narrow >= 0) {
            store_narrow(p, p->nodes[i], narrow);
            narrowed++;
        }
    }
    free(extern_read);
    return narrowed;
}
