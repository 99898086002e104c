/* Candidates and graph surgery.
 *
 * A candidate is a description over the original graph (which nodes stay,
 * which values are outputs, which inputs go, which inputs are shrunk), never
 * an edited graph: every strategy edits the description and the graph is
 * built from scratch each time. Building is where the surgery happens: a kept
 * node whose argument was computed by a removed node gets a new graph input
 * of the same name and type instead, fed with the value the interpreter
 * recorded for it, so the kept nodes see exactly the data they saw in the
 * original run. Names never change, so messages that name values stay
 * comparable.
 *
 * When nodes go, values whose last users went become outputs: a node that is
 * kept is meant to be compiled, and a compiler drops dead nodes. Output
 * removal is the separate, tested step that lets dead code go.
 *
 * The built graph is printed and parsed back before it is tested, so what a
 * child tests is exactly the text that ends up in the repro.
 */
#include "minify.h"

#include <stdlib.h>
#include <string.h>

void mf_cand_init(const mf *m, mf_cand *c)
{
    c->keep = calloc((size_t)m->nnodes + 1, sizeof *c->keep);
    c->out = calloc((size_t)m->nvalues + 1, sizeof *c->out);
    c->drop = calloc((size_t)m->g->ninputs + 1, sizeof *c->drop);
    c->sizes = malloc(sizeof *c->sizes * ((size_t)m->nvalues * PTC_MAX_DIMS + 1));
    for (int i = 0; i < m->nnodes; i++)
        c->keep[i] = true;
    for (int i = 0; i < m->g->noutputs; i++)
        c->out[m->g->outputs[i]->id] = true;
    for (int v = 0; v < m->nvalues; v++)
        c->sizes[(size_t)v * PTC_MAX_DIMS] = -1;
}

void mf_cand_copy(const mf *m, mf_cand *dst, const mf_cand *src)
{
    if (!dst->keep)
        mf_cand_init(m, dst);
    memcpy(dst->keep, src->keep, sizeof *dst->keep * (size_t)m->nnodes);
    memcpy(dst->out, src->out, sizeof *dst->out * (size_t)m->nvalues);
    memcpy(dst->drop, src->drop, sizeof *dst->drop * (size_t)m->g->ninputs);
    memcpy(dst->sizes, src->sizes, sizeof *dst->sizes * (size_t)m->nvalues * PTC_MAX_DIMS);
}

void mf_cand_free(mf_cand *c)
{
    free(c->keep);
    free(c->out);
    free(c->drop);
    free(c->sizes);
    memset(c, 0, sizeof *c);
}

int mf_cand_nodes(const mf *m, const mf_cand *c)
{
    int n = 0;
    for (int i = 0; i < m->nnodes; i++)
        n += c->keep[i];
    return n;
}

int mf_cand_outputs(const mf *m, const mf_cand *c, int *vals)
{
    int n = 0;
    for (int v = 0; v < m->nvalues; v++)
        if (c->out[v])
            vals[n++] = v;
    return n;
}

/* Calls fn for each tensor value a node reads. */
static void for_each_use(const ptc_node *n, void (*fn)(void *ctx, const ptc_value *v), void *ctx)
{
    for (int a = 0; a < n->nargs; a++) {
        const ptc_arg *arg = &n->args[a];
        if (arg->kind == PTC_ARG_VALUE && arg->v)
            fn(ctx, arg->v);
        else if (arg->kind == PTC_ARG_VALUES)
            for (int k = 0; k < arg->vs.n; k++)
                if (arg->vs.v[k])
                    fn(ctx, arg->vs.v[k]);
    }
}

static void count_use(void *ctx, const ptc_value *v)
{
    ((int *)ctx)[v->id]++;
}

/* users[value id] among the kept nodes. */
static void count_users(const mf *m, const mf_cand *c, int *users)
{
    memset(users, 0, sizeof *users * (size_t)m->nvalues);
    for (int i = 0; i < m->nnodes; i++)
        if (c->keep[i])
            for_each_use(m->g->nodes[i], count_use, users);
}

void mf_cand_remove_nodes(const mf *m, mf_cand *c, const int *pos, int n)
{
    int *before = malloc(sizeof *before * ((size_t)m->nvalues + 1));
    int *after = malloc(sizeof *after * ((size_t)m->nvalues + 1));
    count_users(m, c, before);
    for (int k = 0; k < n; k++) {
        const ptc_node *node = m->g->nodes[pos[k]];
        c->keep[pos[k]] = false;
        for (int o = 0; o < node->nout; o++)
            c->out[node->outs[o]->id] = false;
    }
    count_users(m, c, after);
    for (int i = 0; i < m->nnodes; i++) {
        if (!c->keep[i])
            continue;
        const ptc_node *node = m->g->nodes[i];
        for (int o = 0; o < node->nout; o++) {
            int v = node->outs[o]->id;
            if (before[v] > 0 && after[v] == 0)
                c->out[v] = true;
        }
    }
    free(before);
    free(after);
}

static void mark_live(void *ctx, const ptc_value *v)
{
    ((bool *)ctx)[v->id] = true;
}

/* Liveness from the outputs backwards; nodes[pos] dead -> dead_pos. */
static int dead_nodes(const mf *m, const mf_cand *c, int *dead_pos)
{
    bool *live = calloc((size_t)m->nvalues + 1, sizeof *live);
    memcpy(live, c->out, sizeof *live * (size_t)m->nvalues);
    int n = 0;
    for (int i = m->nnodes - 1; i >= 0; i--) {
        if (!c->keep[i])
            continue;
        const ptc_node *node = m->g->nodes[i];
        bool is_live = false;
        for (int o = 0; o < node->nout; o++)
            is_live |= live[node->outs[o]->id];
        if (is_live)
            for_each_use(node, mark_live, live);
        else
            dead_pos[n++] = i;
    }
    free(live);
    return n;
}

int mf_cand_dead_nodes(const mf *m, const mf_cand *c, int *pos)
{
    return dead_nodes(m, c, pos);
}

void mf_cand_remove_outputs(const mf *m, mf_cand *c, const int *vals, int n)
{
    for (int k = 0; k < n; k++)
        c->out[vals[k]] = false;
    int *dead = malloc(sizeof *dead * ((size_t)m->nnodes + 1));
    int ndead = dead_nodes(m, c, dead);
    for (int k = 0; k < ndead; k++)
        c->keep[dead[k]] = false;
    free(dead);
}

int mf_cand_unused_inputs(const mf *m, const mf_cand *c, int *idx)
{
    int *users = malloc(sizeof *users * ((size_t)m->nvalues + 1));
    count_users(m, c, users);
    int n = 0;
    for (int i = 0; i < m->g->ninputs; i++) {
        int v = m->g->inputs[i]->id;
        if (!c->drop[i] && users[v] == 0 && !c->out[v])
            idx[n++] = i;
    }
    free(users);
    return n;
}

/* ---- building the graph ---------------------------------------------------- */

typedef struct builder {
    const mf *m;
    const mf_cand *c;
    ptc_graph *g;
    ptc_value **map;     /* original value id -> value of g */
    ptc_tensor *tensors; /* inputs of g, in order */
    int ntensors;
    bool reinfer; /* some input is shrunk: infer every type again */
    ptc_error *err;
} builder;

static const int64_t *shrunk_sizes(const mf_cand *c, int v)
{
    const int64_t *s = &c->sizes[(size_t)v * PTC_MAX_DIMS];
    return s[0] >= 0 ? s : NULL;
}

/* The leading block of src with the given sizes, as a new tensor. */
static int slice_leading(const ptc_tensor *src, const int64_t *sizes, ptc_tensor *dst,
                         ptc_error *err)
{
    ptc_tensor view = *src;
    view.storage = NULL;
    for (int d = 0; d < src->ndim; d++)
        view.sizes[d] = sizes[d];
    if (ptc_tensor_alloc(dst, src->dtype, src->ndim, sizes, err))
        return -1;
    return ptc_tensor_copy(dst, &view, err);
}

/* Adds original value v as an input of the candidate fed with data. */
static ptc_value *add_input(builder *b, const ptc_value *v, const ptc_tensor *data)
{
    ptc_ttype t = v->type;
    const int64_t *sizes = shrunk_sizes(b->c, v->id);
    ptc_tensor *dst = &b->tensors[b->ntensors];
    if (sizes) {
        for (int d = 0; d < t.ndim; d++)
            t.shape[d] = ptc_dim_c(sizes[d]);
        t.layout = PTC_LAYOUT_CONTIGUOUS;
        if (slice_leading(data, sizes, dst, b->err))
            return NULL;
    } else {
        *dst = *data;
        ptc_tensor_retain(dst);
    }
    b->ntensors++;
    return b->map[v->id] = ptc_graph_add_input(b->g, v->name, &t);
}

/* The candidate's value for original value v: kept, or a new input. */
static ptc_value *use_value(builder *b, const ptc_value *v)
{
    if (b->map[v->id])
        return b->map[v->id];
    if (!v->def) {
        ptc_errorf(b->err, PTC_ERR_INTERNAL, "minify", "input %%%s is dropped but used", v->name);
        return NULL;
    }
    const ptc_tensor *rec = &b->m->recorded[v->id];
    if (!rec->data) {
        ptc_errorf(b->err, PTC_ERR_RUNTIME, "minify",
                   "no recorded value for %%%s (the interpreter stopped before it)", v->name);
        return NULL;
    }
    return add_input(b, v, rec);
}

static int add_node(builder *b, const ptc_node *n)
{
    ptc_arena *a = b->g->arena;
    ptc_arg *args = PTC_NEWN(a, ptc_arg, n->nargs + 1);
    for (int i = 0; i < n->nargs; i++) {
        args[i] = n->args[i];
        if (args[i].kind == PTC_ARG_VALUE && args[i].v) {
            if (!(args[i].v = use_value(b, n->args[i].v)))
                return -1;
        } else if (args[i].kind == PTC_ARG_VALUES) {
            ptc_value **vs = PTC_NEWN(a, ptc_value *, args[i].vs.n + 1);
            for (int k = 0; k < args[i].vs.n; k++)
                if (n->args[i].vs.v[k] && !(vs[k] = use_value(b, n->args[i].vs.v[k])))
                    return -1;
            args[i].vs.v = vs;
        }
    }
    ptc_ttype *types = PTC_NEWN(a, ptc_ttype, n->nout + 1);
    const char **names = PTC_NEWN(a, const char *, n->nout + 1);
    for (int o = 0; o < n->nout; o++) {
        types[o] = n->outs[o]->type;
        names[o] = n->outs[o]->name;
    }
    if (b->reinfer) {
        ptc_ttype *inferred;
        int nout;
        if (ptc_meta_infer(a, n->op, args, n->nargs, &inferred, &nout, b->err))
            return -1;
        if (nout != n->nout)
            return ptc_errorf(b->err, PTC_ERR_META, "minify", "%s now has %d outputs, not %d",
                              ptc_op_name(n->op), nout, n->nout);
        memcpy(types, inferred, sizeof *types * (size_t)nout);
    }
    ptc_node *copy = ptc_graph_add_node(b->g, n->op, args, n->nargs, n->nout, types, names);
    copy->loc = n->loc;
    copy->module_path = n->module_path;
    copy->nprov = n->nprov;
    copy->prov = n->prov;
    for (int o = 0; o < n->nout; o++)
        b->map[n->outs[o]->id] = copy->outs[o];
    return 0;
}

static void set_outputs(builder *b)
{
    const mf *m = b->m;
    ptc_value **outs = calloc((size_t)m->nvalues + m->g->noutputs + 1, sizeof *outs);
    bool *done = calloc((size_t)m->nvalues + 1, sizeof *done);
    int n = 0;
    for (int i = 0; i < m->g->noutputs; i++) { /* the original's outputs first, in order */
        int v = m->g->outputs[i]->id;
        if (b->c->out[v] && !done[v] && b->map[v])
            outs[n++] = b->map[v], done[v] = true;
    }
    for (int v = 0; v < m->nvalues; v++)
        if (b->c->out[v] && !done[v] && b->map[v])
            outs[n++] = b->map[v], done[v] = true;
    ptc_graph_set_outputs(b->g, outs, n);
    free(outs);
    free(done);
}

/* The recorded values of the outputs (the interpreter computes exactly those
 * on the candidate, whose inputs are recorded values too), or NULL. */
static ptc_tensor *known_outputs(const builder *b)
{
    const ptc_graph *g = b->g;
    ptc_tensor *want = calloc((size_t)g->noutputs + 1, sizeof *want);
    for (int i = 0; i < g->noutputs; i++) {
        const ptc_value *orig = ptc_graph_find_value(b->m->g, g->outputs[i]->name);
        if (orig && orig->def && b->m->recorded[orig->id].data)
            want[i] = b->m->recorded[orig->id];
        else if (orig && !orig->def)
            want[i] = b->m->inputs[orig->input_index];
        else {
            free(want);
            return NULL;
        }
    }
    return want;
}

int mf_cand_build(const mf *m, const mf_cand *c, mf_case *out, ptc_error *err)
{
    memset(out, 0, sizeof *out);
    builder b = {.m = m, .c = c, .err = err};
    b.g = ptc_graph_new(NULL, m->g->name);
    b.map = calloc((size_t)m->nvalues + 1, sizeof *b.map);
    b.tensors = calloc((size_t)m->nvalues + 1, sizeof *b.tensors);
    for (int v = 0; v < m->nvalues && !b.reinfer; v++)
        b.reinfer = shrunk_sizes(c, v) != NULL;
    int rc = -1;
    for (int i = 0; i < m->g->ninputs; i++)
        if (!c->drop[i] && !add_input(&b, m->g->inputs[i], &m->inputs[i]))
            goto done;
    for (int i = 0; i < m->nnodes; i++)
        if (c->keep[i] && add_node(&b, m->g->nodes[i]))
            goto done;
    set_outputs(&b);
    if (b.g->noutputs == 0) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "minify", "the candidate has no outputs");
        goto done;
    }
    ptc_buf text = {0};
    ptc_print_graph(&text, b.g);
    if (mf_case_from_text(out, text.data, "candidate.ptir", err))
        goto done;
    PTC_ASSERT(out->g->ninputs == b.ntensors);
    out->want = b.reinfer ? NULL : known_outputs(&b);
    out->inputs = b.tensors;
    out->ninputs = b.ntensors;
    b.tensors = NULL;
    rc = 0;
done:
    if (rc)
        mf_case_free(out);
    if (b.tensors)
        for (int i = 0; i < b.ntensors; i++)
            ptc_tensor_release(&b.tensors[i]);
    free(b.tensors);
    free(b.map);
    ptc_graph_free(b.g);
    return rc;
}
