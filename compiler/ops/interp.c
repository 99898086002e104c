/* The reference interpreter: runs a graph node by node with the reference
 * kernels of ops.def's ref column. It is the oracle every backend and
 * ptminify's accuracy checks compare against, so it is deliberately simple:
 * symbols are bound from the input shapes, every node's outputs are fresh
 * contiguous zeroed tensors sized by the node's own types evaluated under
 * those bindings, and the kernel fills them. Values are reference-counted
 * tensors held in an environment indexed by value id; each is released right
 * after its last use so that peak memory stays near what eager torch needs.
 */
#include "ops/ref.h"

#include <stdlib.h>
#include <string.h>

static const ptc_ref_fn ref_fns[] = {
#define OP(id, stage, schema, meta, ref, flags, ...) ptc_##ref,
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof ref_fns / sizeof *ref_fns == PTC_OP_COUNT, "ref table out of step");

/* ---- kernel argument access (ops.h) ------------------------------------------ */

const ptc_tensor *ptc_k_tensor(const ptc_kctx *k, int argi)
{
    PTC_ASSERT(argi >= 0 && argi < k->node->nargs);
    const ptc_arg *a = &k->node->args[argi];
    if (a->kind == PTC_ARG_NONE)
        return NULL;
    PTC_ASSERT(a->kind == PTC_ARG_VALUE);
    return &k->env[a->v->id];
}

int64_t ptc_k_int(const ptc_kctx *k, int argi)
{
    PTC_ASSERT(argi >= 0 && argi < k->node->nargs);
    const ptc_arg *a = &k->node->args[argi];
    PTC_ASSERT(a->kind == PTC_ARG_INT);
    int64_t v;
    /* The verifier guarantees every symbol is bound by the graph's inputs. */
    PTC_ASSERT(ptc_dim_eval(a->i, k->bindings, &v, NULL) == 0);
    return v;
}

double ptc_k_scalar(const ptc_kctx *k, int argi)
{
    PTC_ASSERT(argi >= 0 && argi < k->node->nargs);
    const ptc_arg *a = &k->node->args[argi];
    switch (a->kind) {
    case PTC_ARG_INT:
        return (double)ptc_k_int(k, argi);
    case PTC_ARG_FLOAT:
        return a->f;
    case PTC_ARG_BOOL:
        return a->b ? 1.0 : 0.0;
    default:
        PTC_ASSERT(!"scalar argument expected");
    }
    return 0;
}

/* ---- shapes ------------------------------------------------------------------ */

int ptc_eval_shape(const ptc_ttype *t, const ptc_bindings *b, int64_t *sizes, ptc_error *err)
{
    for (int i = 0; i < t->ndim; i++) {
        if (ptc_dim_eval(t->shape[i], b, &sizes[i], err))
            return -1;
        if (sizes[i] < 0) {
            ptc_buf pb = {0};
            ptc_dim_print(&pb, t->shape[i]);
            ptc_errorf(err, PTC_ERR_RUNTIME, "shape", "size %s of dim %d evaluates to %lld < 0",
                       pb.data, i, (long long)sizes[i]);
            ptc_buf_free(&pb);
            return -1;
        }
    }
    return 0;
}

/* Binds symbols from the inputs' sizes. check_type binds a dim's one unknown
 * symbol (s0, s5 + s4 - 2 once s4 is bound) and checks every dim it can
 * evaluate; later passes, while one binds more, check the expressions whose
 * symbols a later input bound. Then every dim must evaluate. */
int ptc_bind_inputs(const ptc_graph *g, const ptc_tensor *inputs, ptc_bindings *b, ptc_error *err)
{
    char what[96];
    for (int pass = 0, before = -1; pass < 2 || b->n > before; pass++) {
        before = b->n;
        for (int i = 0; i < g->ninputs; i++) {
            snprintf(what, sizeof what, "input %%%s", g->inputs[i]->name);
            if (inputs[i].device.kind != PTC_DEV_CPU)
                return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "interp",
                                  "%s: the reference interpreter runs on cpu tensors only", what);
            if (ptc_tensor_check_type(&inputs[i], &g->inputs[i]->type, b, what, err))
                return -1;
        }
    }
    for (int i = 0; i < g->ninputs; i++) {
        int64_t sizes[PTC_MAX_DIMS];
        if (ptc_eval_shape(&g->inputs[i]->type, b, sizes, err)) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
            return ptc_errorf(err, PTC_ERR_RUNTIME, "inputs",
                              "input %%%s: its sizes do not determine every symbol (%s)",
                              g->inputs[i]->name, msg);
        }
    }
    return 0;
}

/* ---- errors ------------------------------------------------------------------ */

/* Names the node in err: "msg: in '%3 = div(...) : i64[4]'", with the node id
 * and the user's source location when the node has one. */
static int node_error(ptc_error *err, const ptc_node *n)
{
    if (!err)
        return -1;
    ptc_buf b = {0};
    ptc_print_node(&b, n);
    if (b.len > 300)
        strcpy(b.data + 297, "...");
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    snprintf(err->msg, sizeof err->msg, "%.600s: in '%s'", msg, b.data);
    ptc_buf_free(&b);
    err->has_node = true;
    err->node_id = n->id;
    if (n->loc.file) {
        ptc_error_at(err, n->loc.file, n->loc.line, n->loc.col);
        snprintf(err->text, sizeof err->text, "%s", n->loc.text ? n->loc.text : "");
    }
    return -1;
}

/* ---- running ----------------------------------------------------------------- */

typedef struct run {
    const ptc_graph *g;
    ptc_tensor *env; /* by value id; data == NULL when not live */
    int *last_use;   /* by value id: index of the last node using it, -1 none */
    bool *is_output; /* by value id */
    ptc_bindings b;
} run;

static void note_use(run *r, const ptc_value *v, int ni)
{
    if (v && r->last_use[v->id] < ni)
        r->last_use[v->id] = ni;
}

static void compute_last_uses(run *r)
{
    for (int i = 0; i < r->g->nvalues; i++)
        r->last_use[i] = -1;
    for (int ni = 0; ni < r->g->nnodes; ni++) {
        const ptc_node *n = r->g->nodes[ni];
        for (int a = 0; a < n->nargs; a++) {
            if (n->args[a].kind == PTC_ARG_VALUE)
                note_use(r, n->args[a].v, ni);
            else if (n->args[a].kind == PTC_ARG_VALUES)
                for (int j = 0; j < n->args[a].vs.n; j++)
                    note_use(r, n->args[a].vs.v[j], ni);
        }
    }
    for (int i = 0; i < r->g->noutputs; i++)
        r->is_output[r->g->outputs[i]->id] = true;
}

static void release_value(run *r, const ptc_value *v)
{
    if (v && !r->is_output[v->id] && r->env[v->id].data)
        ptc_tensor_release(&r->env[v->id]);
}

/* Releases what node ni was the last to use, and its own unused outputs. */
static void release_after(run *r, int ni)
{
    const ptc_node *n = r->g->nodes[ni];
    for (int a = 0; a < n->nargs; a++) {
        const ptc_arg *arg = &n->args[a];
        if (arg->kind == PTC_ARG_VALUE && r->last_use[arg->v->id] == ni)
            release_value(r, arg->v);
        else if (arg->kind == PTC_ARG_VALUES)
            for (int j = 0; j < arg->vs.n; j++)
                if (arg->vs.v[j] && r->last_use[arg->vs.v[j]->id] == ni)
                    release_value(r, arg->vs.v[j]);
    }
    for (int i = 0; i < n->nout; i++)
        if (r->last_use[n->outs[i]->id] < 0)
            release_value(r, n->outs[i]);
}

static int run_node(run *r, const ptc_node *n, const ptc_run_opts *opts, ptc_error *err)
{
    ptc_tensor *outs = calloc((size_t)n->nout + 1, sizeof *outs); /* split: any count */
    if (!outs) {
        ptc_errorf(err, PTC_ERR_RUNTIME, "interp", "out of memory");
        return node_error(err, n);
    }
    for (int i = 0; i < n->nout; i++) {
        const ptc_ttype *t = &n->outs[i]->type;
        int64_t sizes[PTC_MAX_DIMS];
        if (ptc_eval_shape(t, &r->b, sizes, err) ||
            ptc_tensor_alloc(&outs[i], t->dtype, t->ndim, sizes, err))
            goto fail;
    }
    ptc_kctx k = {
        .node = n,
        .env = r->env,
        .out = outs,
        .bindings = &r->b,
        .rng_offset = opts ? opts->rng_offset : 0,
        .err = err,
    };
    if (ref_fns[n->op](&k))
        goto fail;
    for (int i = 0; i < n->nout; i++)
        r->env[n->outs[i]->id] = outs[i];
    int stop = opts && opts->on_node ? opts->on_node(opts->ctx, n, outs) : 0;
    free(outs); /* the references now live in env: the caller releases them */
    if (stop) {
        ptc_errorf(err, PTC_ERR_RUNTIME, "interp", "run stopped by the on_node callback");
        return node_error(err, n);
    }
    return 0;
fail:
    for (int i = 0; i < n->nout; i++)
        ptc_tensor_release(&outs[i]);
    free(outs);
    return node_error(err, n);
}

/* A graph output that is a graph input is returned as a fresh copy: outputs
 * never alias the caller's inputs (which may be borrowed memory). */
static int take_output(run *r, const ptc_value *v, ptc_tensor *out, ptc_error *err)
{
    const ptc_tensor *t = &r->env[v->id];
    if (v->def) {
        *out = *t;
        ptc_tensor_retain(out);
        return 0;
    }
    if (ptc_tensor_alloc(out, t->dtype, t->ndim, t->sizes, err))
        return -1;
    return ptc_tensor_copy(out, t, err);
}

int ptc_interp_run(const ptc_graph *g, const ptc_tensor *inputs, int ninputs, ptc_tensor *outputs,
                   const ptc_run_opts *opts, ptc_error *err)
{
    if (ninputs != g->ninputs)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "inputs", "graph '%s' takes %d inputs, got %d",
                          g->name, g->ninputs, ninputs);
    run r = {.g = g};
    memset(outputs, 0, sizeof *outputs * (size_t)g->noutputs);
    if (ptc_bind_inputs(g, inputs, &r.b, err))
        return -1;
    size_t nv = (size_t)g->nvalues + 1;
    r.env = calloc(nv, sizeof *r.env);
    r.last_use = calloc(nv, sizeof *r.last_use);
    r.is_output = calloc(nv, sizeof *r.is_output);
    int rc = -1, ntaken = 0;
    if (!r.env || !r.last_use || !r.is_output) {
        ptc_errorf(err, PTC_ERR_RUNTIME, "interp", "out of memory");
        goto done;
    }
    compute_last_uses(&r);
    for (int i = 0; i < g->ninputs; i++) {
        r.env[g->inputs[i]->id] = inputs[i];
        ptc_tensor_retain(&r.env[g->inputs[i]->id]);
    }
    for (int ni = 0; ni < g->nnodes; ni++) {
        if (run_node(&r, g->nodes[ni], opts, err))
            goto done;
        release_after(&r, ni);
    }
    for (; ntaken < g->noutputs; ntaken++)
        if (take_output(&r, g->outputs[ntaken], &outputs[ntaken], err))
            goto done;
    rc = 0;
done:
    if (rc)
        for (int i = 0; i < ntaken; i++)
            ptc_tensor_release(&outputs[i]);
    if (r.env) {
        /* Inputs were retained, not owned: releasing drops only that reference
         * (borrowed inputs have no storage and are left alone). */
        for (int i = 0; i < g->nvalues; i++)
            if (r.env[i].data || r.env[i].storage)
                ptc_tensor_release(&r.env[i]);
    }
    free(r.env);
    free(r.last_use);
    free(r.is_output);
    return rc;
}
