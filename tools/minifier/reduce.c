/* The reduction: strategies run in a loop until none makes progress.
 *
 *   truncate      the shortest prefix of the nodes that still fails
 *                 (a (jobs+1)-ary search: each round tests `jobs` cut points)
 *   outputs       ddmin over the outputs; nodes that then reach no output go
 *   ddmin         ddmin over the nodes: removed nodes become inputs fed with
 *                 recorded values, chunks halve down to single nodes
 *   dead code     nodes that reach no output, all at once
 *   inputs        original inputs nothing uses
 *   shrink        input sizes: each static dim to 1, else halved, keeping
 *                 whatever the oracle and the failure survive
 *
 * Every step proposes a batch of candidates and keeps the first that fails
 * with the pinned signature (mf_first_failing); with --jobs N the batch runs
 * N children at a time but the answer is the one a sequential run would give,
 * so a reduction is reproducible whatever the parallelism. Results are cached
 * by the candidate's text, so no graph is tested twice.
 */
#include "minify.h"

#include <stdlib.h>
#include <string.h>

/* ---- result cache ------------------------------------------------------------ */

static int cache_find(const mf *m, uint64_t key)
{
    for (int i = 0; i < m->ncache; i++)
        if (m->cache_keys[i] == key)
            return i;
    return -1;
}

static void cache_put(mf *m, uint64_t key, bool fail)
{
    if (cache_find(m, key) >= 0)
        return;
    if (m->ncache == m->capcache) {
        m->capcache = m->capcache ? 2 * m->capcache : 256;
        m->cache_keys = realloc(m->cache_keys, sizeof *m->cache_keys * (size_t)m->capcache);
        m->cache_fail = realloc(m->cache_fail, sizeof *m->cache_fail * (size_t)m->capcache);
    }
    m->cache_keys[m->ncache] = key;
    m->cache_fail[m->ncache++] = fail;
}

static void progress(mf *m, bool accepted)
{
    if (m->on_progress)
        m->on_progress(m, accepted);
}

/* ---- testing a batch ----------------------------------------------------------- */

/* A batch in flight: which candidate each child slot tests. */
typedef struct flight {
    const mf_batch *b;
    int nslots;
    int *index;     /* per slot: candidate index, -1 when idle */
    uint64_t *hash; /* per slot: the candidate's text hash */
    int next;       /* the next candidate to build */
    int best;       /* the first failing candidate known, -1 */
    bool stop;      /* --max-tests or an interrupt */
} flight;

/* Starts candidate f->next (or answers it from the cache); false when no
 * more may start. */
static bool start_next(mf *m, flight *f)
{
    if (f->stop || mf_pool_running(m->pool) >= f->nslots || f->next >= f->b->n ||
        (f->best >= 0 && f->next >= f->best))
        return false;
    int i = f->next++;
    mf_case c;
    if (f->b->build(f->b->ctx, i, &c)) {
        m->stats.invalid++;
        return true;
    }
    int hit = cache_find(m, c.hash);
    if (hit >= 0) {
        m->stats.cached++;
        if (m->cache_fail[hit])
            f->best = i;
    } else if ((m->opt.max_tests && m->stats.tests >= m->opt.max_tests) || mf_interrupted) {
        m->stopped = f->stop = true;
    } else {
        int s = mf_pool_start(m->pool, &c, m->exec, &m->xo);
        if (s >= 0) {
            f->index[s] = i;
            f->hash[s] = c.hash;
            m->stats.tests++;
        }
    }
    mf_case_free(&c); /* a child has its own copy */
    return !f->stop;
}

/* Waits for one child and records its answer; false when interrupted. */
static bool finish_one(mf *m, flight *f)
{
    mf_result r;
    int s = mf_pool_wait(m->pool, &r);
    if (s < 0) {
        m->stopped = f->stop = true;
        return false;
    }
    int i = f->index[s];
    f->index[s] = -1;
    bool fail = mf_signature_match(&m->sig, &r);
    if (r.kind == MF_INVALID)
        m->stats.invalid++;
    cache_put(m, f->hash[s], fail);
    if (m->opt.verbose) {
        char what[1400];
        mf_result_format(&r, what, sizeof what);
        fprintf(stderr, "ptminify:   test %d (candidate %d of %d): %s%s\n", m->stats.tests, i + 1,
                f->b->n, what, fail ? "  [same failure]" : "");
    }
    if (fail && (f->best < 0 || i < f->best))
        f->best = i;
    progress(m, false);
    return true;
}

/* Is a candidate before the best failing one still running? */
static bool earlier_running(const flight *f)
{
    for (int s = 0; s < f->nslots; s++)
        if (f->index[s] >= 0 && (f->best < 0 || f->index[s] < f->best))
            return true;
    return false;
}

int mf_first_failing(mf *m, const mf_batch *b)
{
    flight f = {.b = b, .nslots = mf_pool_slots(m->pool), .best = -1};
    f.index = malloc(sizeof *f.index * (size_t)f.nslots);
    f.hash = malloc(sizeof *f.hash * (size_t)f.nslots);
    for (int s = 0; s < f.nslots; s++)
        f.index[s] = -1;
    for (;;) {
        while (start_next(m, &f))
            ;
        /* Done when nothing runs, or nothing before the best failing one. */
        if (mf_pool_running(m->pool) == 0 || (f.best >= 0 && !earlier_running(&f)))
            break;
        if (!finish_one(m, &f))
            break;
    }
    for (int s = 0; s < f.nslots; s++)
        mf_pool_kill(m->pool, s); /* candidates after best: their answer is not needed */
    free(f.index);
    free(f.hash);
    return f.best >= 0 ? f.best : (f.stop ? -2 : -1);
}

static int build_one(void *ctx, int i, mf_case *c)
{
    void **pair = ctx;
    ptc_error err;
    (void)i;
    return mf_cand_build(pair[0], pair[1], c, &err);
}

bool mf_cand_fails(mf *m, const mf_cand *c)
{
    void *pair[2] = {m, (void *)c};
    mf_batch b = {1, build_one, pair};
    return mf_first_failing(m, &b) == 0;
}

/* ---- ddmin ----------------------------------------------------------------------- */

int mf_ddmin(int *items, int *n, int min_items, mf_chunk_test test, void *ctx)
{
    int removals = 0, granularity = 2;
    mf_chunk *chunks = malloc(sizeof *chunks * ((size_t)*n + 1));
    while (*n > min_items && *n >= 2) {
        if (granularity > *n)
            granularity = *n;
        for (int k = 0; k < granularity; k++) {
            chunks[k].begin = (int)((long long)*n * k / granularity);
            chunks[k].end = (int)((long long)*n * (k + 1) / granularity);
        }
        /* Never propose going below min_items. */
        int nchunks = granularity;
        if (*n - (chunks[0].end - chunks[0].begin) < min_items)
            nchunks = 0;
        int k = nchunks ? test(ctx, items, *n, chunks, nchunks) : -1;
        if (k == -2)
            break;
        if (k >= 0) {
            int len = chunks[k].end - chunks[k].begin;
            memmove(items + chunks[k].begin, items + chunks[k].end,
                    sizeof *items * (size_t)(*n - chunks[k].end));
            *n -= len;
            removals++;
            granularity = granularity - 1 > 2 ? granularity - 1 : 2;
        } else if (granularity >= *n) {
            break;
        } else {
            granularity = 2 * granularity < *n ? 2 * granularity : *n;
        }
    }
    free(chunks);
    return removals;
}

/* ---- strategies ------------------------------------------------------------------ */

/* What a batch of one strategy step proposes: candidate i is the current best
 * with chunks[i] of items removed by `apply`. */
typedef struct step {
    mf *m;
    const int *items;
    const mf_chunk *chunks;
    void (*apply)(const mf *m, mf_cand *c, const int *items, int n);
    mf_cand scratch;
} step;

static void apply_chunk(step *st, mf_cand *c, int i)
{
    mf_cand_copy(st->m, c, &st->m->best);
    st->apply(st->m, c, st->items + st->chunks[i].begin, st->chunks[i].end - st->chunks[i].begin);
}

static int build_chunk(void *ctx, int i, mf_case *c)
{
    step *st = ctx;
    ptc_error err;
    apply_chunk(st, &st->scratch, i);
    return mf_cand_build(st->m, &st->scratch, c, &err);
}

static void accept(mf *m, const mf_cand *c)
{
    mf_cand_copy(m, &m->best, c);
    m->stats.accepted++;
    progress(m, true);
}

static int chunk_test(void *ctx, const int *items, int nitems, const mf_chunk *chunks, int nchunks)
{
    step *st = ctx;
    st->items = items;
    st->chunks = chunks;
    (void)nitems;
    mf_batch b = {nchunks, build_chunk, st};
    int k = mf_first_failing(st->m, &b);
    if (k >= 0) {
        apply_chunk(st, &st->scratch, k);
        accept(st->m, &st->scratch);
    }
    return k;
}

static int ddmin_with(mf *m, int *items, int *n, int min_items,
                      void (*apply)(const mf *, mf_cand *, const int *, int))
{
    step st = {.m = m, .apply = apply};
    int removed = mf_ddmin(items, n, min_items, chunk_test, &st);
    mf_cand_free(&st.scratch);
    return removed;
}

static int kept_positions(const mf *m, const mf_cand *c, int *pos)
{
    int n = 0;
    for (int i = 0; i < m->nnodes; i++)
        if (c->keep[i])
            pos[n++] = i;
    return n;
}

/* Truncation: candidate i keeps the first cut[i] kept nodes. */
typedef struct trunc_ctx {
    mf *m;
    const int *pos;
    int npos;
    const int *cuts;
    mf_cand scratch;
} trunc_ctx;

static void apply_cut(trunc_ctx *t, mf_cand *c, int cut)
{
    mf_cand_copy(t->m, c, &t->m->best);
    mf_cand_remove_nodes(t->m, c, t->pos + cut, t->npos - cut);
}

static int build_cut(void *ctx, int i, mf_case *c)
{
    trunc_ctx *t = ctx;
    ptc_error err;
    apply_cut(t, &t->scratch, t->cuts[i]);
    return mf_cand_build(t->m, &t->scratch, c, &err);
}

static bool truncate_suffix(mf *m)
{
    int *pos = malloc(sizeof *pos * ((size_t)m->nnodes + 1));
    int npos = kept_positions(m, &m->best, pos);
    int ways = mf_pool_slots(m->pool), *cuts = malloc(sizeof *cuts * ((size_t)ways + 1));
    trunc_ctx t = {.m = m, .pos = pos, .npos = npos, .cuts = cuts};
    int lo = 0, hi = npos; /* hi: shortest prefix known to fail */
    while (hi - lo > 1 && !m->stopped) {
        int n = 0;
        for (int j = 1; j <= ways; j++) {
            int cut = lo + (int)((long long)(hi - lo) * j / (ways + 1));
            if (cut > lo && cut < hi && (n == 0 || cut > cuts[n - 1]))
                cuts[n++] = cut;
        }
        if (n == 0)
            break;
        mf_batch b = {n, build_cut, &t};
        int k = mf_first_failing(m, &b);
        if (k == -2)
            break;
        if (k >= 0) {
            lo = k > 0 ? cuts[k - 1] : lo;
            hi = cuts[k];
        } else {
            lo = cuts[n - 1];
        }
    }
    bool progress_made = hi < npos;
    if (progress_made) {
        apply_cut(&t, &t.scratch, hi);
        accept(m, &t.scratch);
    }
    mf_cand_free(&t.scratch);
    free(pos);
    free(cuts);
    return progress_made;
}

static bool reduce_outputs(mf *m)
{
    int *vals = malloc(sizeof *vals * ((size_t)m->nvalues + 1));
    int n = mf_cand_outputs(m, &m->best, vals);
    int removed = n > 1 ? ddmin_with(m, vals, &n, 1, mf_cand_remove_outputs) : 0;
    free(vals);
    return removed > 0;
}

static bool ddmin_nodes(mf *m)
{
    int *pos = malloc(sizeof *pos * ((size_t)m->nnodes + 1));
    int n = kept_positions(m, &m->best, pos);
    int removed = ddmin_with(m, pos, &n, 1, mf_cand_remove_nodes);
    free(pos);
    return removed > 0;
}

static void drop_nodes(const mf *m, mf_cand *c, const int *pos, int n)
{
    for (int k = 0; k < n; k++)
        c->keep[pos[k]] = false;
}

static bool dead_code(mf *m)
{
    int *pos = malloc(sizeof *pos * ((size_t)m->nnodes + 1));
    int n = mf_cand_dead_nodes(m, &m->best, pos);
    bool done = false;
    if (n > 0) {
        mf_cand c = {0};
        mf_cand_copy(m, &c, &m->best);
        drop_nodes(m, &c, pos, n);
        if ((done = mf_cand_fails(m, &c)))
            accept(m, &c);
        mf_cand_free(&c);
    }
    free(pos);
    return done;
}

static void drop_inputs(const mf *m, mf_cand *c, const int *idx, int n)
{
    for (int k = 0; k < n; k++)
        c->drop[idx[k]] = true;
    (void)m;
}

static bool unused_inputs(mf *m)
{
    int *idx = malloc(sizeof *idx * ((size_t)m->g->ninputs + 1));
    int n = mf_cand_unused_inputs(m, &m->best, idx);
    int removed = 0;
    if (n > 0) {
        /* ddmin with min 0: all at once first, then halves, down to single inputs. */
        mf_cand c = {0};
        mf_cand_copy(m, &c, &m->best);
        drop_inputs(m, &c, idx, n);
        if (mf_cand_fails(m, &c)) {
            accept(m, &c);
            removed = n;
        } else if (!m->stopped) {
            removed = ddmin_with(m, idx, &n, 0, drop_inputs);
        }
        mf_cand_free(&c);
    }
    free(idx);
    return removed > 0;
}

/* ---- shrinking input sizes ------------------------------------------------------ */

/* One input dim to a new size; value < 0: every input dim of size `from`
 * (sizes that must agree, e.g. a conv's channels in its input and weight). */
typedef struct proposal {
    int value, dim;
    int64_t from, size;
} proposal;

typedef struct shrink_ctx {
    mf *m;
    proposal *props;
    int *inputs; /* original value ids of the candidate's static inputs */
    int ninputs;
    mf_cand scratch;
} shrink_ctx;

/* The current sizes of original value v as an input (shrunk or not). */
static int64_t *input_sizes(const mf *m, mf_cand *c, int v)
{
    const ptc_value *val = m->g->values[v];
    int64_t *sizes = &c->sizes[(size_t)v * PTC_MAX_DIMS];
    if (sizes[0] < 0)
        for (int d = 0; d < val->type.ndim; d++)
            sizes[d] = val->type.shape[d].value; /* static: shrink_proposals checked */
    return sizes;
}

static void apply_shrink(shrink_ctx *s, mf_cand *c, int i)
{
    const proposal *p = &s->props[i];
    mf_cand_copy(s->m, c, &s->m->best);
    if (p->value >= 0) {
        input_sizes(s->m, c, p->value)[p->dim] = p->size;
        return;
    }
    for (int k = 0; k < s->ninputs; k++) {
        int v = s->inputs[k];
        int64_t *sizes = input_sizes(s->m, c, v);
        for (int d = 0; d < s->m->g->values[v]->type.ndim; d++)
            if (sizes[d] == p->from)
                sizes[d] = p->size;
    }
}

static int build_shrink(void *ctx, int i, mf_case *c)
{
    shrink_ctx *s = ctx;
    ptc_error err;
    apply_shrink(s, &s->scratch, i);
    return mf_cand_build(s->m, &s->scratch, c, &err);
}

static void add_proposal(proposal *props, int *n, proposal p)
{
    for (int i = 0; i < *n; i++)
        if (props[i].value == p.value && props[i].dim == p.dim && props[i].from == p.from &&
            props[i].size == p.size)
            return;
    props[(*n)++] = p;
}

/* The candidate's inputs are the kept original inputs and the values of
 * removed nodes that kept nodes read. Proposals: first every dim of a size
 * at once (a size shared by several inputs usually has to shrink together),
 * then each input dim alone; each to 1, else halved. */
static int shrink_proposals(const mf *m, shrink_ctx *s)
{
    mf_case c;
    ptc_error err;
    s->ninputs = 0;
    if (mf_cand_build(m, &m->best, &c, &err))
        return 0;
    proposal *props = s->props;
    int n = 0;
    for (int i = 0; i < c.g->ninputs; i++) {
        const ptc_value *in = c.g->inputs[i];
        const ptc_value *orig = ptc_graph_find_value(m->g, in->name);
        /* Symbolic sizes stay: they are the graph's own (shrink them with --sym). */
        if (!orig || orig->type.layout != PTC_LAYOUT_CONTIGUOUS ||
            !ptc_ttype_is_static(&orig->type) || !ptc_ttype_is_static(&in->type))
            continue;
        s->inputs[s->ninputs++] = orig->id;
        for (int d = 0; d < in->type.ndim; d++) {
            int64_t size = in->type.shape[d].value;
            if (size > 1)
                add_proposal(props, &n, (proposal){-1, 0, size, 1});
            if (size > 3)
                add_proposal(props, &n, (proposal){-1, 0, size, size / 2});
        }
    }
    for (int k = 0; k < s->ninputs; k++) {
        const ptc_value *orig = m->g->values[s->inputs[k]];
        const ptc_value *in = ptc_graph_find_value(c.g, orig->name);
        for (int d = 0; d < in->type.ndim; d++) {
            int64_t size = in->type.shape[d].value;
            if (size > 1)
                add_proposal(props, &n, (proposal){orig->id, d, size, 1});
            if (size > 3)
                add_proposal(props, &n, (proposal){orig->id, d, size, size / 2});
        }
    }
    mf_case_free(&c);
    return n;
}

static bool shrink_inputs(mf *m)
{
    shrink_ctx s = {.m = m};
    s.props = malloc(sizeof *s.props * ((size_t)m->nvalues * PTC_MAX_DIMS * 4 + 1));
    s.inputs = malloc(sizeof *s.inputs * ((size_t)m->nvalues + 1));
    bool any = false;
    while (!m->stopped) {
        int n = shrink_proposals(m, &s);
        if (n == 0)
            break;
        mf_batch b = {n, build_shrink, &s};
        int k = mf_first_failing(m, &b);
        if (k < 0)
            break;
        apply_shrink(&s, &s.scratch, k);
        accept(m, &s.scratch);
        any = true;
    }
    mf_cand_free(&s.scratch);
    free(s.props);
    free(s.inputs);
    return any;
}

void mf_reduce(mf *m)
{
    static const struct {
        const char *name;
        bool (*run)(mf *m);
    } strategies[] = {
        {"truncate", truncate_suffix}, {"outputs", reduce_outputs}, {"ddmin", ddmin_nodes},
        {"dead code", dead_code},      {"inputs", unused_inputs},   {"shrink", shrink_inputs},
    };
    bool again = true;
    while (again && !m->stopped) {
        again = false;
        for (size_t i = 0; i < sizeof strategies / sizeof *strategies && !m->stopped; i++) {
            /* A failure that no smaller graph shows leaves the original as it
             * is: its input sizes are part of what makes it fail. */
            if (strategies[i].run == shrink_inputs && m->nnodes > 1 &&
                mf_cand_nodes(m, &m->best) == m->nnodes)
                continue;
            m->phase = strategies[i].name;
            progress(m, false);
            again |= strategies[i].run(m);
        }
    }
    if (m->nnodes > 1 && mf_cand_nodes(m, &m->best) == m->nnodes && !m->stopped) {
        /* No node can go: the failure needs the whole graph, so nothing of it
         * is changed (dropping an output or an input would be a repro of a
         * different graph, not a smaller one). */
        mf_cand_free(&m->best);
        mf_cand_init(m, &m->best);
        m->stats.accepted = 0;
    }
    m->phase = "done";
}
