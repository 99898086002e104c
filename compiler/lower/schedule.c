/* The scheduler: loop nodes into kernels.
 *
 * After inlining, nodes are taken in program order and each joins the most
 * recent kernel it may legally share an outer loop nest with, else starts a
 * new one. A kernel's outer ranges are a common prefix of its members' ranges
 * (a reduction's kept ranges count as its ranges), so softmax's two row
 * reductions and the final division share the row loop. Joining is legal when
 * every buffer the node reads from a member of the kernel is read at the same
 * outer index it is written at (the writer finished that outer iteration
 * before the reader runs), when everything else it reads is produced by an
 * earlier step, and when the outer loop keeps enough parallelism. Horizontal
 * joins (sharing loads, not values) are refused when they would raise the
 * estimated peak of live temporaries.
 *
 * Inside a kernel, consecutive members with the same inner ranges share one
 * inner loop (a group); a pointwise member may join its writer's group only
 * when it reads the written element itself. Member bodies are then rewritten
 * over kernel variables with flat element offsets, dimensions that are
 * contiguous for every access are collapsed, and buffers produced and
 * consumed inside one outer iteration become stack locals.
 */
#include "lower/lower_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct kb {
    int nouter;
    ptc_dim outer[PTC_MAX_DIMS];
    int nmem, cap;
    int *mem;
    int step;
    int nentries; /* body entries of its members, at most PTC_KERNEL_MAX_ENTRIES */
} kb;

typedef struct sched {
    ptc_arena *a;
    ptc_lprog *p;
    int nthreads;
    int team_threads;
    int nk, capk;
    kb *ks;
    int nsteps, caps;
    ptc_step *steps;
    int *node_step;
    int *node_kernel;
    int nrefused_memory;
} sched;

static int add_step(sched *s, int kind, int index)
{
    if (s->nsteps == s->caps) {
        s->caps = s->caps ? s->caps * 2 : 16;
        s->steps = realloc(s->steps, sizeof *s->steps * (size_t)s->caps);
    }
    s->steps[s->nsteps] = (ptc_step){(uint8_t)kind, index};
    return s->nsteps++;
}

static void kb_add(kb *k, int node, const ptc_lnode *n)
{
    if (k->nmem == k->cap) {
        k->cap = k->cap ? k->cap * 2 : 8;
        k->mem = realloc(k->mem, sizeof(int) * (size_t)k->cap);
    }
    k->mem[k->nmem++] = node;
    k->nentries += n->body.n;
}

static double outer_product(const ptc_dim *d, int n)
{
    double p = 1;
    for (int i = 0; i < n; i++)
        p *= ptc_dim_hint(d[i]);
    return p;
}

/* Buffers read by node n, through its loads. */
static bool reads_from_kernel(const sched *s, const ptc_lnode *n, int k)
{
    for (int i = 0; i < n->body.n; i++) {
        const ptc_lexpr *e = &n->body.e[i];
        if (e->op != PTC_L_LOAD)
            continue;
        int w = s->p->bufs[e->buf]->def;
        if (w >= 0 && s->node_kernel[w] == k)
            return true;
    }
    return false;
}

static bool shares_loads(const sched *s, const ptc_lnode *n, const kb *k)
{
    for (int i = 0; i < n->body.n; i++) {
        const ptc_lexpr *e = &n->body.e[i];
        if (e->op != PTC_L_LOAD)
            continue;
        for (int m = 0; m < k->nmem; m++)
            if (ptc_lnode_reads(s->p->nodes[k->mem[m]], e->buf))
                return true;
    }
    return false;
}

/* Estimated peak bytes of live temporaries if node n runs at step `at`: a
 * temporary lives from its writer's step to its last reader's (nsteps for a
 * reader not scheduled yet), summed over steps through a difference array. */
static double peak_with(const sched *s, int n, int at)
{
    const ptc_lprog *p = s->p;
    int nsteps = s->nsteps + 1;
    int *step_of = malloc(sizeof(int) * ((size_t)p->nnodes + 1));
    int *last = malloc(sizeof(int) * ((size_t)p->nbufs + 1));
    double *live = calloc((size_t)nsteps + 2, sizeof(double));
    for (int r = 0; r < p->nnodes; r++)
        step_of[r] = r == n ? at : s->node_step[r] < 0 ? nsteps : s->node_step[r];
    for (int b = 0; b < p->nbufs; b++) {
        int w = p->bufs[b]->def;
        last[b] = w < 0 ? -1 : w == n ? at : s->node_step[w];
    }
    ptc_lprog_last_reads(p, step_of, last);
    for (int b = 0; b < p->nbufs; b++) {
        const ptc_lbuf *buf = p->bufs[b];
        if (buf->removed || buf->kind != PTC_LB_TEMP)
            continue;
        int w = buf->def;
        int first = w == n ? at : s->node_step[w];
        if (first < 0)
            continue;
        double bytes = ptc_buf_numel_hint(buf) * (double)ptc_dtype_size(buf->dtype);
        live[first] += bytes;
        live[(last[b] < nsteps ? last[b] : nsteps) + 1] -= bytes;
    }
    /* bytes are whole numbers, so the running sum is exact in any order */
    double peak = 0, now = 0;
    for (int t = 0; t <= nsteps; t++) {
        now += live[t];
        peak = now > peak ? now : peak;
    }
    free(live);
    free(last);
    free(step_of);
    return peak;
}

/* Elements one thread of a team may be given in a joined pass: a team of a
 * CUDA block (1024 threads) then runs up to 32768 elements per outer
 * iteration, a layer norm's or softmax's row in one pass per thread or a
 * few, as Inductor's persistent reductions do. */
#define TEAM_ELEMENTS_PER_THREAD 32.0

/* Whether a team of threads sharing one outer iteration (the GPU) runs the
 * ranges one outer iteration leaves (rest, then red) side by side: few outer
 * iterations are then no reason to keep a pass out of the kernel. Only for
 * static ranges: a symbolic row's size is a guess (a [3, s1] row sum may
 * have rows of millions) — and never on the CPU, where one thread runs each
 * outer iteration. */
static bool team_covers(const sched *s, const ptc_dim *rest, int nrest, const ptc_dim *red,
                        int nred)
{
    if (s->team_threads <= 1)
        return false;
    double per_iteration = 1;
    for (int d = 0; d < nrest + nred; d++) {
        ptc_dim r = d < nrest ? rest[d] : red[d - nrest];
        if (!ptc_dim_is_static(r))
            return false;
        per_iteration *= (double)r.value;
    }
    return per_iteration <= s->team_threads * TEAM_ELEMENTS_PER_THREAD;
}

/* The outer ranges n would share with kernel k, or -1 if it may not join. */
static int join_outer(sched *s, int k, const ptc_lnode *n)
{
    const kb *K = &s->ks[k];
    int lim = K->nouter < n->ndim ? K->nouter : n->ndim;
    int j = 0;
    while (j < lim && ptc_dim_eq(K->outer[j], n->ranges[j]))
        j++;
    if (j == 0 && K->nouter > 0)
        return -1;
    double want = 4.0 * s->nthreads;
    if (j < K->nouter) {
        double before = outer_product(K->outer, K->nouter), after = outer_product(K->outer, j);
        if (after < before && after < want && !team_covers(s, K->outer + j, K->nouter - j, NULL, 0))
            return -1;
    }
    /* Joining runs n's loops past the shared j inside each outer iteration:
       a big node must not join a kernel with fewer outer iterations than
       threads (a loss's scalar sum would otherwise run the whole [rows, vocab]
       pass it joined on one core, or in one CUDA block). */
    double work = outer_product(n->ranges, n->ndim) * outer_product(n->red, n->nred);
    bool big = work >= 16.0 * want && work >= 32768.0; /* worth a pass of its own */
    double shared = outer_product(n->ranges, j);
    if (j < n->ndim && shared < s->nthreads && big &&
        !team_covers(s, n->ranges + j, n->ndim - j, n->red, n->nred))
        return -1;
    for (int i = 0; i < n->body.n; i++) {
        const ptc_lexpr *e = &n->body.e[i];
        if (e->op != PTC_L_LOAD)
            continue;
        int w = s->p->bufs[e->buf]->def;
        if (w < 0)
            continue;
        if (s->node_kernel[w] == k) {
            for (int d = 0; d < j; d++)
                if (!ptc_ix_is_var(e->idx[d], d))
                    return -1;
        } else if (s->node_step[w] < 0 || s->node_step[w] > K->step) {
            return -1;
        }
    }
    return j;
}

static void schedule_node(sched *s, int ni)
{
    ptc_lnode *n = s->p->nodes[ni];
    if (n->kind == PTC_LN_EXTERN) {
        s->node_step[ni] = add_step(s, PTC_STEP_EXTERN, ni);
        return;
    }
    int lo = s->nk > 8 ? s->nk - 8 : 0;
    for (int k = s->nk - 1; k >= lo; k--) {
        if (s->ks[k].nentries + n->body.n > PTC_KERNEL_MAX_ENTRIES)
            continue;
        bool vertical = reads_from_kernel(s, n, k);
        if (!vertical && !shares_loads(s, n, &s->ks[k]))
            continue;
        int j = join_outer(s, k, n);
        if (j < 0)
            continue;
        if (!vertical && peak_with(s, ni, s->ks[k].step) > peak_with(s, ni, s->nsteps)) {
            s->nrefused_memory++;
            continue;
        }
        s->ks[k].nouter = j;
        kb_add(&s->ks[k], ni, n);
        s->node_step[ni] = s->ks[k].step;
        s->node_kernel[ni] = k;
        return;
    }
    if (s->nk == s->capk) {
        s->capk = s->capk ? s->capk * 2 : 16;
        s->ks = realloc(s->ks, sizeof *s->ks * (size_t)s->capk);
    }
    kb *K = &s->ks[s->nk];
    memset(K, 0, sizeof *K);
    K->nouter = n->ndim;
    for (int d = 0; d < n->ndim; d++)
        K->outer[d] = n->ranges[d];
    kb_add(K, ni, n);
    K->step = add_step(s, PTC_STEP_KERNEL, s->nk);
    s->node_step[ni] = K->step;
    s->node_kernel[ni] = s->nk++;
}

/* ---- kernel form ----------------------------------------------------------- */

typedef struct kform {
    sched *s;
    ptc_kernel *k;
    const bool *local;
} kform;

/* Stride of buffer dim d as the kernel addresses it (locals drop outer dims). */
static ptc_dim kstride(const kform *f, const ptc_lbuf *b, int d)
{
    if (!f->local[b->id])
        return b->strides[d];
    if (d < f->k->nouter)
        return ptc_dim_c(0);
    ptc_dim s = ptc_dim_c(1);
    for (int e = b->ndim - 1; e > d; e--)
        s = ptc_dim_mul(f->s->a, s, b->shape[e]);
    return s;
}

static const ptc_ix *flat_offset(const kform *f, const ptc_lbuf *b, int nidx,
                                 const ptc_ix *const *idx)
{
    ptc_arena *a = f->s->a;
    const ptc_ix *off = ptc_ix_int(a, 0);
    for (int d = 0; d < nidx; d++)
        off = ptc_ix_madd(a, idx[d], kstride(f, b, d), off);
    return off;
}

static void member_form(const kform *f, const ptc_kgroup *g, const ptc_lnode *n, ptc_kmember *m)
{
    ptc_arena *a = f->s->a;
    int nouter = f->k->nouter;
    const ptc_ix *vars[2 * PTC_MAX_DIMS];
    /* a pointwise member of a reduction group runs over its reduction loop */
    const ptc_dim *inner = g->reduction && n->kind == PTC_LN_POINTWISE ? g->red : g->inner;
    for (int i = 0; i < n->ndim; i++)
        vars[i] =
            i < nouter ? ptc_ix_var(a, i, f->k->outer[i]) : ptc_ix_var(a, i, inner[i - nouter]);
    for (int r = 0; r < n->nred; r++)
        vars[n->ndim + r] = ptc_ix_var(a, nouter + g->ninner + r, n->red[r]);
    int nvars = n->ndim + n->nred;
    m->node = n->id;
    m->value = n->value;
    m->body.n = m->body.cap = n->body.n;
    m->body.e = PTC_NEWN(a, ptc_lexpr, n->body.n > 0 ? n->body.n : 1);
    for (int i = 0; i < n->body.n; i++) {
        ptc_lexpr e = n->body.e[i];
        if (e.op == PTC_L_LOAD) {
            const ptc_ix **idx = PTC_NEWN(a, const ptc_ix *, e.nidx > 0 ? e.nidx : 1);
            for (int d = 0; d < e.nidx; d++)
                idx[d] = ptc_ix_subst(a, e.idx[d], vars, nvars, NULL, 0);
            const ptc_ix **flat = PTC_NEWN(a, const ptc_ix *, 1);
            flat[0] = flat_offset(f, f->s->p->bufs[e.buf], e.nidx, idx);
            e.idx = flat;
            e.nidx = 1;
        } else if (e.ix) {
            e.ix = ptc_ix_subst(a, e.ix, vars, nvars, NULL, 0);
        }
        m->body.e[i] = e;
    }
    for (int k = 0; k < 2; k++) {
        m->store[k] = NULL;
        if (n->out[k] < 0)
            continue;
        m->store[k] = flat_offset(f, f->s->p->bufs[n->out[k]], n->ndim, vars);
    }
}

/* Groups of a kernel, decided on node-level indices. */
/* Ranges a member iterates inside the kernel: a pointwise member its inner
 * ranges, a reduction its kept-inner then reduction ranges. */
static bool same_dims(const ptc_dim *a, int na, const ptc_dim *b, int nb)
{
    if (na != nb)
        return false;
    for (int i = 0; i < na; i++)
        if (!ptc_dim_eq(a[i], b[i]))
            return false;
    return true;
}

/* May n join group g (whose members are gnodes[0..ng))? Members of a group
 * share one loop nest. Pointwise members share it with pointwise members of
 * the same inner ranges, reductions with reductions of the same kept and
 * reduction ranges; and pointwise members over exactly the reduction ranges
 * of a reduction group without kept-inner ranges run inside its reduction
 * loop (softmax's exp feeds its sum in the same loop). A member may read a
 * pointwise member of its group only at the element being computed, and
 * never a reduction member of its group (not final until the loop ends). */
static bool fits_group(const sched *s, const ptc_kgroup *g, const int *gnodes, int ng,
                       const ptc_lnode *n, int nouter)
{
    bool red = n->kind == PTC_LN_REDUCTION;
    int n_inner = n->ndim - nouter;
    const ptc_dim *n_in = n->ranges + nouter;
    if (red) {
        if (g->reduction) {
            if (!same_dims(g->inner, g->ninner, n_in, n_inner) ||
                !same_dims(g->red, g->nred, n->red, n->nred))
                return false;
        } else if (n_inner != 0 || !same_dims(g->inner, g->ninner, n->red, n->nred)) {
            return false;
        }
    } else if (g->reduction) {
        if (g->ninner != 0 || !same_dims(g->red, g->nred, n_in, n_inner))
            return false;
    } else if (!same_dims(g->inner, g->ninner, n_in, n_inner)) {
        return false;
    }
    for (int i = 0; i < n->body.n; i++) {
        const ptc_lexpr *e = &n->body.e[i];
        if (e->op != PTC_L_LOAD)
            continue;
        int w = s->p->bufs[e->buf]->def;
        for (int j = 0; j < ng; j++) {
            if (gnodes[j] != w)
                continue;
            if (s->p->nodes[w]->kind == PTC_LN_REDUCTION)
                return false;
            for (int d = 0; d < e->nidx; d++)
                if (!ptc_ix_is_var(e->idx[d], d))
                    return false;
        }
    }
    return true;
}

static void form_groups(sched *s, const kb *K, ptc_kernel *k, int *group_of)
{
    k->groups = PTC_NEWN(s->a, ptc_kgroup, K->nmem);
    int *gstart = calloc((size_t)K->nmem + 1, sizeof(int));
    for (int i = 0; i < K->nmem; i++) {
        const ptc_lnode *n = s->p->nodes[K->mem[i]];
        ptc_kgroup *g = k->ngroups ? &k->groups[k->ngroups - 1] : NULL;
        int gs = k->ngroups ? gstart[k->ngroups - 1] : 0;
        if (g && !g->reduction && n->kind == PTC_LN_REDUCTION &&
            fits_group(s, g, K->mem + gs, i - gs, n, K->nouter)) {
            /* the pointwise group becomes a reduction loop over its inner ranges */
            g->reduction = true;
            g->nred = g->ninner;
            for (int d = 0; d < g->ninner; d++)
                g->red[d] = g->inner[d];
            g->ninner = 0;
        } else if (!g || !fits_group(s, g, K->mem + gs, i - gs, n, K->nouter)) {
            g = &k->groups[k->ngroups];
            gstart[k->ngroups++] = i;
            g->reduction = n->kind == PTC_LN_REDUCTION;
            g->ninner = n->ndim - K->nouter;
            for (int d = 0; d < g->ninner; d++)
                g->inner[d] = n->ranges[K->nouter + d];
            g->nred = n->nred;
            for (int d = 0; d < n->nred; d++)
                g->red[d] = n->red[d];
            g->members = PTC_NEWN(s->a, ptc_kmember, K->nmem);
        }
        group_of[i] = k->ngroups - 1;
        g->nmembers++;
    }
    free(gstart);
}

/* ---- locals ---------------------------------------------------------------- */

enum { MAX_LOCAL_ELEMS = 4096 };

/* Marks each buffer some node outside its writer's kernel reads (one pass
 * over the loads: asking every node about every buffer was quadratic). */
static void find_read_outside(const sched *s, bool *outside)
{
    const ptc_lprog *p = s->p;
    for (int r = 0; r < p->nnodes; r++) {
        const ptc_lnode *n = p->nodes[r];
        if (!n)
            continue;
        for (int i = 0; i < ptc_lnode_nslots(n); i++) {
            int b = ptc_lnode_slot_buf(n, i);
            int w = b >= 0 ? p->bufs[b]->def : -1;
            if (w >= 0 && s->node_kernel[w] != s->node_kernel[r])
                outside[b] = true;
        }
    }
}

static void find_locals(sched *s, bool *local)
{
    const ptc_lprog *p = s->p;
    bool *outside = calloc((size_t)p->nbufs + 1, 1);
    find_read_outside(s, outside);
    for (int b = 0; b < p->nbufs; b++) {
        const ptc_lbuf *buf = p->bufs[b];
        local[b] = false;
        if (buf->removed || buf->kind != PTC_LB_TEMP)
            continue;
        int k = s->node_kernel[buf->def];
        if (k < 0)
            continue;
        bool ok = !outside[b];
        int64_t elems = 1;
        for (int d = s->ks[k].nouter; d < buf->ndim && ok; d++) {
            ok = ptc_dim_is_static(buf->shape[d]);
            elems *= ok ? buf->shape[d].value : 1;
        }
        local[b] = ok && elems <= MAX_LOCAL_ELEMS;
    }
    free(outside);
}

/* ---- variable rewriting and collapsing -------------------------------------- */

typedef void (*ix_visit)(const ptc_ix **x, void *ctx);

static void visit_member(ptc_kmember *m, ix_visit fn, void *ctx)
{
    for (int i = 0; i < m->body.n; i++) {
        ptc_lexpr *e = &m->body.e[i];
        if (e->op == PTC_L_LOAD)
            fn(&e->idx[0], ctx);
        else if (e->ix)
            fn(&e->ix, ctx);
    }
    for (int k = 0; k < 2; k++)
        if (m->store[k])
            fn(&m->store[k], ctx);
}

typedef struct mergectx {
    ptc_arena *a;
    int v, w; /* merge candidates: w == v+1 */
    ptc_dim ext_w;
    bool ok;
    const ptc_ix **vars;
    int nvars;
} mergectx;

static void check_merge(const ptc_ix **x, void *ctx)
{
    mergectx *c = ctx;
    bool n1, n2;
    ptc_dim cv = ptc_ix_coeff(*x, c->v, &n1), cw = ptc_ix_coeff(*x, c->w, &n2);
    if (n1 || n2 || !ptc_dim_eq(cv, ptc_dim_mul(c->a, cw, c->ext_w)))
        c->ok = false;
}

static void apply_vars(const ptc_ix **x, void *ctx)
{
    mergectx *c = ctx;
    *x = ptc_ix_subst(c->a, *x, c->vars, c->nvars, NULL, 0);
}

/* Variables v and v+1 of groups [g0, g1) can merge: every access has
 * coeff(v) == coeff(v+1) * extent(v+1) and neither inside a division. */
static bool can_merge(ptc_arena *a, ptc_kernel *k, int g0, int g1, int v, ptc_dim ext_w)
{
    mergectx c = {a, v, v + 1, ext_w, true, NULL, 0};
    for (int g = g0; g < g1; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++)
            visit_member(&k->groups[g].members[m], check_merge, &c);
    return c.ok;
}

/* Applies the merge of v and v+1: v+1 becomes the merged variable numbered v,
 * later variables shift down (ext: the group's extents before the merge). */
static void renumber(ptc_arena *a, ptc_kernel *k, int g0, int g1, int v, const ptc_dim *ext,
                     int nvars)
{
    mergectx c = {a, v, v + 1, ptc_dim_c(0), true, NULL, nvars};
    c.vars = PTC_NEWN(a, const ptc_ix *, nvars > 0 ? nvars : 1);
    c.vars[v] = ptc_ix_int(a, 0);
    c.vars[v + 1] = ptc_ix_var(a, v, ptc_dim_mul(a, ext[v], ext[v + 1]));
    for (int id = v + 2; id < nvars; id++)
        c.vars[id] = ptc_ix_var(a, id - 1, ext[id]);
    for (int g = g0; g < g1; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++)
            visit_member(&k->groups[g].members[m], apply_vars, &c);
}

/* Variable extents of group g: outer, inner, red. */
static int group_extents(const ptc_kernel *k, const ptc_kgroup *g, ptc_dim *ext)
{
    int n = 0;
    for (int i = 0; i < k->nouter; i++)
        ext[n++] = k->outer[i];
    for (int i = 0; i < g->ninner; i++)
        ext[n++] = g->inner[i];
    for (int i = 0; i < g->nred; i++)
        ext[n++] = g->red[i];
    return n;
}

static void remove_dim(ptc_dim *d, int *n, int at, ptc_dim merged)
{
    d[at] = merged;
    for (int i = at + 1; i + 1 < *n; i++)
        d[i] = d[i + 1];
    (*n)--;
}

static void collapse_outer(ptc_arena *a, ptc_kernel *k)
{
    for (int v = k->nouter - 2; v >= 0; v--) {
        if (!can_merge(a, k, 0, k->ngroups, v, k->outer[v + 1]))
            continue;
        ptc_dim merged = ptc_dim_mul(a, k->outer[v], k->outer[v + 1]);
        for (int g = 0; g < k->ngroups; g++) {
            ptc_dim ext[3 * PTC_MAX_DIMS];
            int n = group_extents(k, &k->groups[g], ext);
            renumber(a, k, g, g + 1, v, ext, n);
        }
        /* the merged dim sits at v; v+1 disappears */
        k->outer[v] = merged;
        for (int i = v + 1; i + 1 < k->nouter; i++)
            k->outer[i] = k->outer[i + 1];
        k->nouter--;
    }
}

static void collapse_group(ptc_arena *a, ptc_kernel *k, int g)
{
    ptc_kgroup *G = &k->groups[g];
    for (int pass = 0; pass < 2; pass++) {
        ptc_dim *dims = pass == 0 ? G->inner : G->red;
        int *count = pass == 0 ? &G->ninner : &G->nred;
        int base = k->nouter + (pass == 0 ? 0 : G->ninner);
        for (int i = *count - 2; i >= 0; i--) {
            int v = base + i;
            if (!can_merge(a, k, g, g + 1, v, dims[i + 1]))
                continue;
            ptc_dim ext[3 * PTC_MAX_DIMS];
            int n = group_extents(k, G, ext);
            renumber(a, k, g, g + 1, v, ext, n);
            remove_dim(dims, count, i, ptc_dim_mul(a, dims[i], dims[i + 1]));
        }
    }
}

/* A flat kernel (outer loops only; the last is the vector loop) whose last
 * loop is a few iterations of a long one before it, as in the copy of an
 * image's 3 colour planes into channels-last order: [n, hw, c < 3] reads
 * 3 elements 50176 apart per (n, hw), a 3-lane gather and a masked store
 * with a division of the flat parallel index per step. The two loops trade
 * places when an access is contiguous along the long one, which then runs
 * as full vectors ([n, c, hw]: contiguous loads, a strided store). */
enum { SHORT_INNER = 4, LONG_BEFORE = 256 };

static void contiguous_along(const ptc_ix **x, void *ctx)
{
    mergectx *c = ctx;
    bool nested;
    ptc_dim cv = ptc_ix_coeff(*x, c->v, &nested);
    if (!nested && ptc_dim_is_static(cv) && cv.value == 1)
        c->ok = true;
}

static bool flat_kernel(const ptc_kernel *k)
{
    for (int g = 0; g < k->ngroups; g++)
        if (k->groups[g].ninner || k->groups[g].nred)
            return false;
    return true;
}

static void swap_short_inner(ptc_arena *a, ptc_kernel *k)
{
    int v = k->nouter - 2, w = k->nouter - 1;
    if (v < 0 || k->nlocal || !flat_kernel(k) || !ptc_dim_is_static(k->outer[w]) ||
        !ptc_dim_is_static(k->outer[v]) || k->outer[w].value > SHORT_INNER ||
        k->outer[v].value < LONG_BEFORE)
        return;
    mergectx c = {a, v, w, ptc_dim_c(0), false, NULL, k->nouter};
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++)
            visit_member(&k->groups[g].members[m], contiguous_along, &c);
    if (!c.ok)
        return;
    c.vars = PTC_NEWN(a, const ptc_ix *, k->nouter);
    for (int id = 0; id < k->nouter; id++)
        c.vars[id] = ptc_ix_var(a, id, k->outer[id]);
    c.vars[v] = ptc_ix_var(a, w, k->outer[v]);
    c.vars[w] = ptc_ix_var(a, v, k->outer[w]);
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++)
            visit_member(&k->groups[g].members[m], apply_vars, &c);
    ptc_dim t = k->outer[v];
    k->outer[v] = k->outer[w];
    k->outer[w] = t;
}

/* ---- finishing a kernel ------------------------------------------------------ */

static void add_unique_int(ptc_arena *a, int **arr, int *n, int v, int max)
{
    for (int i = 0; i < *n; i++)
        if ((*arr)[i] == v)
            return;
    (void)max;
    (*arr)[(*n)++] = v;
    (void)a;
}

typedef struct paramctx {
    ptc_arena *a;
    ptc_kernel *k;
    int cap;
} paramctx;

static void add_param(paramctx *c, ptc_dim d)
{
    if (ptc_dim_is_static(d))
        return;
    for (int i = 0; i < c->k->nparams; i++)
        if (ptc_dim_eq(c->k->params[i], d))
            return;
    if (c->k->nparams == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        ptc_dim *n = PTC_NEWN(c->a, ptc_dim, cap);
        if (c->k->nparams)
            memcpy(n, c->k->params, sizeof *n * (size_t)c->k->nparams);
        c->k->params = n;
        c->cap = cap;
    }
    c->k->params[c->k->nparams++] = d;
}

static void params_of_ix(paramctx *c, const ptc_ix *x)
{
    add_param(c, x->constant);
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        add_param(c, x->terms[i].coeff);
        add_param(c, at->d);
        if (at->kind == PTC_IXA_DIV || at->kind == PTC_IXA_MOD)
            params_of_ix(c, at->x);
    }
}

static void params_visit(const ptc_ix **x, void *ctx)
{
    params_of_ix(ctx, *x);
}

static void collect_params(ptc_arena *a, ptc_kernel *k)
{
    paramctx c = {a, k, 0};
    for (int i = 0; i < k->nouter; i++)
        add_param(&c, k->outer[i]);
    for (int g = 0; g < k->ngroups; g++) {
        ptc_kgroup *G = &k->groups[g];
        for (int i = 0; i < G->ninner; i++)
            add_param(&c, G->inner[i]);
        for (int i = 0; i < G->nred; i++)
            add_param(&c, G->red[i]);
        for (int m = 0; m < G->nmembers; m++)
            visit_member(&G->members[m], params_visit, &c);
    }
}

static int choose_npar(const ptc_kernel *k, int nthreads)
{
    if (k->nouter == 0)
        return 0;
    bool flat = flat_kernel(k); /* the last outer loop is the vector loop */
    int max = flat && k->nouter > 1 ? k->nouter - 1 : k->nouter;
    int npar = 1;
    double prod = ptc_dim_hint(k->outer[0]);
    while (npar < max && prod < 8.0 * nthreads)
        prod *= ptc_dim_hint(k->outer[npar++]);
    return npar;
}

static void name_kernel(sched *s, ptc_kernel *k, const kb *K)
{
    ptc_buf b = {0};
    ptc_buf_printf(&b, "k%d", k->id);
    int nprov = 0;
    const char **prov = PTC_NEWN(s->a, const char *, 64);
    for (int i = 0; i < K->nmem; i++) {
        const ptc_lnode *n = s->p->nodes[K->mem[i]];
        const char *l = n->label ? n->label : "pw";
        if (b.len + strlen(l) < 56 && !strstr(b.data, l))
            ptc_buf_printf(&b, "_%s", l);
        for (int j = 0; j < n->nprov && nprov < 64; j++) {
            bool dup = false;
            for (int q = 0; q < nprov; q++)
                dup |= strcmp(prov[q], n->prov[j]) == 0;
            if (!dup)
                prov[nprov++] = n->prov[j];
        }
    }
    k->name = ptc_arena_strdup(s->a, b.data);
    ptc_buf_free(&b);
    k->prov = prov;
    k->nprov = nprov;
}

static void args_visit(const ptc_kmember *m, const bool *local, ptc_kernel *k, ptc_arena *a,
                       const ptc_lnode *n)
{
    for (int i = 0; i < m->body.n; i++) {
        const ptc_lexpr *e = &m->body.e[i];
        if (e->op != PTC_L_LOAD)
            continue;
        if (local[e->buf])
            add_unique_int(a, &k->locals, &k->nlocal, e->buf, 0);
        else
            add_unique_int(a, &k->args, &k->nargs, e->buf, 0);
    }
    for (int j = 0; j < 2; j++) {
        if (n->out[j] < 0)
            continue;
        if (local[n->out[j]])
            add_unique_int(a, &k->locals, &k->nlocal, n->out[j], 0);
        else
            add_unique_int(a, &k->args, &k->nargs, n->out[j], 0);
    }
}

int64_t ptc_kernel_local_elems(const ptc_lprog *p, const ptc_kernel *k, int i)
{
    const ptc_lbuf *lb = p->bufs[k->locals[i]];
    int64_t n = 1;
    for (int d = k->local_from[i]; d < lb->ndim; d++)
        n *= lb->shape[d].value;
    return n > 0 ? n : 1;
}

/* The smallest seed of k's random draws, 0 when it has none (*any false). */
static int64_t seed_base(const ptc_kernel *k, bool *any)
{
    int64_t base = 0;
    *any = false;
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++) {
            const ptc_lbody *body = &k->groups[g].members[m].body;
            for (int i = 0; i < body->n; i++) {
                const ptc_lexpr *e = &body->e[i];
                if ((e->op == PTC_L_RAND || e->op == PTC_L_RANDN) && (!*any || e->seed < base))
                    base = e->seed, *any = true;
            }
        }
    return base;
}

static ptc_kernel *finish_kernel(sched *s, int ki, const bool *local)
{
    const kb *K = &s->ks[ki];
    ptc_arena *a = s->a;
    ptc_kernel *k = PTC_NEW(a, ptc_kernel);
    k->id = ki;
    k->nouter = K->nouter;
    for (int i = 0; i < K->nouter; i++)
        k->outer[i] = K->outer[i];
    int *gn = calloc((size_t)K->nmem + 1, sizeof(int));
    form_groups(s, K, k, gn);
    kform f = {s, k, local};
    int maxbufs = s->p->nbufs + 1;
    k->args = PTC_NEWN(a, int, maxbufs);
    k->locals = PTC_NEWN(a, int, maxbufs);
    for (int i = 0; i < K->nmem; i++) {
        ptc_kgroup *g = &k->groups[gn[i]];
        const ptc_lnode *n = s->p->nodes[K->mem[i]];
        ptc_kmember *m = &g->members[0];
        while (m->body.e)
            m++;
        member_form(&f, g, n, m);
        args_visit(m, local, k, a, n);
    }
    free(gn);
    k->local_from = PTC_NEWN(a, int, k->nlocal + 1);
    for (int i = 0; i < k->nlocal; i++)
        k->local_from[i] = K->nouter; /* before collapse_outer merges the outer loops */
    collapse_outer(a, k);
    for (int g = 0; g < k->ngroups; g++)
        collapse_group(a, k, g);
    swap_short_inner(a, k);
    k->npar = choose_npar(k, s->nthreads);
    collect_params(a, k);
    k->seed_base = seed_base(k, &k->draws);
    name_kernel(s, k, K);
    return k;
}

ptc_schedule *ptc_schedule_build(ptc_arena *a, ptc_lprog *p, const ptc_sched_opts *opts,
                                 ptc_error *err)
{
    ptc_schedule *out = PTC_NEW(a, ptc_schedule);
    out->prog = p;
    int limit = opts && opts->recompute_limit > 0 ? opts->recompute_limit : 8;
    ptc_unroll_small_reductions(p);
    ptc_layout_plan(p, opts && opts->contiguous_layouts, opts && opts->weights_kept);
    ptc_inline_pass(p, limit, &out->ninlined, &out->nrefused_recompute);
    ptc_store_narrow_pass(p);
    ptc_pad_plan(p, opts && opts->pad_matmuls);
    sched s = {0};
    s.a = a;
    s.p = p;
    s.nthreads = opts && opts->nthreads > 0 ? opts->nthreads : 2;
    s.team_threads = opts ? opts->team_threads : 0;
    s.node_step = malloc(sizeof(int) * ((size_t)p->nnodes + 1));
    s.node_kernel = malloc(sizeof(int) * ((size_t)p->nnodes + 1));
    for (int i = 0; i < p->nnodes; i++)
        s.node_step[i] = s.node_kernel[i] = -1;
    for (int i = 0; i < p->nnodes; i++)
        if (p->nodes[i])
            schedule_node(&s, i);
    bool *local = PTC_NEWN(a, bool, p->nbufs + 1);
    find_locals(&s, local);
    out->is_local = local;
    out->nkernels = s.nk;
    out->kernels = PTC_NEWN(a, ptc_kernel *, s.nk + 1);
    for (int k = 0; k < s.nk; k++)
        out->kernels[k] = finish_kernel(&s, k, local);
    out->nsteps = s.nsteps;
    out->steps = PTC_NEWN(a, ptc_step, s.nsteps + 1);
    if (s.nsteps)
        memcpy(out->steps, s.steps, sizeof *s.steps * (size_t)s.nsteps);
    out->nrefused_memory = s.nrefused_memory;
    for (int k = 0; k < s.nk; k++)
        free(s.ks[k].mem);
    free(s.ks);
    free(s.steps);
    free(s.node_step);
    free(s.node_kernel);
    ptc_mplan_build(a, out);
    return ptc_schedule_verify(out, err) ? NULL : out;
}
