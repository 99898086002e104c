/* The joint graph: forward, then backward, in one prims graph.
 *
 * The forward is cloned as it is. A forward sweep marks the values a
 * gradient must reach (floating values that depend on a wanted input); each
 * such output gets a tangent input. The reverse sweep visits the forward's
 * nodes last to first and, where an output has a gradient and an input needs
 * one, asks the op's rule (derivs.def) to add the inputs' gradients as prims
 * (ag_accum sums the contributions of values used more than once). The
 * wanted inputs' gradients become outputs after the forward's, and the usual
 * simplification (fold, cse, dce) tidies the result. A prims.stop_gradient
 * (ptc_decompose_for_autograd marks softmax's max shift with one) passes
 * nothing back; once the backward is written it is the identity and goes.
 */
#include "ag.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- builders -------------------------------------------------------------------- */

int ag_fail(ag *a, const char *fmt, ...)
{
    if (!a->failed) {
        va_list ap;
        va_start(ap, fmt);
        ptc_verrorf(a->err, PTC_ERR_UNSUPPORTED, "autograd", fmt, ap);
        va_end(ap);
        if (a->err && a->node) {
            a->err->has_node = true;
            a->err->node_id = a->node->id;
        }
    }
    a->failed = true;
    return -1;
}

bool ag_needs(const ag *a, const ptc_value *x)
{
    return x && x->id < a->nvalues && a->needs[x->id];
}

ptc_value *ag_in(const ptc_node *n, int argi)
{
    return argi < n->nargs && n->args[argi].kind == PTC_ARG_VALUE ? n->args[argi].v : NULL;
}

static ptc_arg arg_value(ptc_value *v)
{
    return (ptc_arg){.kind = PTC_ARG_VALUE, .v = v};
}

ptc_arg ag_arg_ints(ag *a, const ptc_dim *d, int n)
{
    ptc_dim *copy = PTC_NEWN(a->g->arena, ptc_dim, n > 0 ? n : 1);
    for (int i = 0; i < n; i++)
        copy[i] = d[i];
    return (ptc_arg){.kind = PTC_ARG_INTS, .is = {n, copy}};
}

ptc_arg ag_arg_int_list(ag *a, const int *v, int n)
{
    ptc_dim d[PTC_MAX_DIMS];
    for (int i = 0; i < n; i++)
        d[i] = ptc_dim_c(v[i]);
    return ag_arg_ints(a, d, n);
}

ptc_node *ag_build_node(ag *a, ptc_op op, const ptc_arg *args, int nargs)
{
    if (a->failed)
        return NULL;
    for (int i = 0; i < nargs; i++)
        if (args[i].kind == PTC_ARG_VALUE && !args[i].v)
            return NULL;
    ptc_node *n = ptc_build(a->g, op, args, nargs, a->err);
    if (!n) {
        a->failed = true;
        return NULL;
    }
    if (a->node) {
        n->loc = a->node->loc;
        n->module_path = a->node->module_path;
        n->nprov = a->node->nprov;
        n->prov = a->node->prov;
    }
    return n;
}

ptc_value *ag_build(ag *a, ptc_op op, const ptc_arg *args, int nargs)
{
    ptc_node *n = ag_build_node(a, op, args, nargs);
    return n ? n->outs[0] : NULL;
}

ptc_value *ag_unary(ag *a, ptc_op op, ptc_value *x)
{
    ptc_arg args[1] = {arg_value(x)};
    return ag_build(a, op, args, 1);
}

ptc_value *ag_binary(ag *a, ptc_op op, ptc_value *x, ptc_value *y)
{
    ptc_arg args[2] = {arg_value(x), arg_value(y)};
    return ag_build(a, op, args, 2);
}

static ptc_value *full(ag *a, const ptc_dim *shape, int n, ptc_arg value, ptc_dtype dt,
                       ptc_device dev)
{
    ptc_arg args[4] = {ag_arg_ints(a, shape, n),
                       value,
                       {.kind = PTC_ARG_DTYPE, .dt = dt},
                       {.kind = PTC_ARG_DEVICE, .dev = dev}};
    return ag_build(a, PTC_OP_PRIMS_FULL, args, 4);
}

ptc_value *ag_full(ag *a, const ptc_dim *shape, int n, double v, const ptc_value *like)
{
    if (!like)
        return NULL;
    return full(a, shape, n, (ptc_arg){.kind = PTC_ARG_FLOAT, .f = v}, like->type.dtype,
                like->type.device);
}

ptc_value *ag_full_like(ag *a, const ptc_value *like, double v)
{
    return like ? ag_full(a, like->type.shape, like->type.ndim, v, like) : NULL;
}

ptc_value *ag_full_dim(ag *a, const ptc_value *like, ptc_dim n)
{
    if (!like)
        return NULL;
    return full(a, like->type.shape, like->type.ndim, (ptc_arg){.kind = PTC_ARG_INT, .i = n},
                like->type.dtype, like->type.device);
}

ptc_value *ag_scale(ag *a, ptc_value *x, double v)
{
    return ag_binary(a, PTC_OP_PRIMS_MUL, x, ag_full_like(a, x, v));
}

ptc_value *ag_convert(ag *a, ptc_value *x, ptc_dtype dt)
{
    if (x && x->type.dtype == dt)
        return x;
    ptc_arg args[2] = {arg_value(x), {.kind = PTC_ARG_DTYPE, .dt = dt}};
    return ag_build(a, PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE, args, 2);
}

ptc_value *ag_where(ag *a, ptc_value *pred, ptc_value *x, ptc_value *y)
{
    ptc_arg args[3] = {arg_value(pred), arg_value(x), arg_value(y)};
    return ag_build(a, PTC_OP_PRIMS_WHERE, args, 3);
}

ptc_value *ag_broadcast(ag *a, ptc_value *x, const ptc_dim *shape, int n, const int *bdims)
{
    if (!x)
        return NULL;
    ptc_arg args[3] = {arg_value(x), ag_arg_ints(a, shape, n),
                       ag_arg_int_list(a, bdims, x->type.ndim)};
    return ag_build(a, PTC_OP_PRIMS_BROADCAST_IN_DIM, args, 3);
}

ptc_value *ag_sum(ag *a, ptc_value *x, const bool *mask)
{
    if (!x)
        return NULL;
    int dims[PTC_MAX_DIMS], n = 0;
    for (int d = 0; d < x->type.ndim; d++)
        if (mask[d])
            dims[n++] = d;
    if (n == 0)
        return x;
    ptc_arg args[2] = {arg_value(x), ag_arg_int_list(a, dims, n)};
    return ag_build(a, PTC_OP_PRIMS_SUM, args, 2);
}

ptc_value *ag_unreduce(ag *a, ptc_value *r, const ptc_value *x, const bool *mask)
{
    int bdims[PTC_MAX_DIMS], n = 0;
    for (int d = 0; d < x->type.ndim; d++)
        if (!mask[d])
            bdims[n++] = d;
    return ag_broadcast(a, r, x->type.shape, x->type.ndim, bdims);
}

ptc_value *ag_reshape(ag *a, ptc_value *x, const ptc_dim *shape, int n)
{
    if (!x)
        return NULL;
    ptc_arg args[2] = {arg_value(x), ag_arg_ints(a, shape, n)};
    return ag_build(a, PTC_OP_PRIMS_RESHAPE, args, 2);
}

ptc_value *ag_permute(ag *a, ptc_value *x, const int *perm)
{
    if (!x)
        return NULL;
    ptc_arg args[2] = {arg_value(x), ag_arg_int_list(a, perm, x->type.ndim)};
    return ag_build(a, PTC_OP_PRIMS_PERMUTE, args, 2);
}

/* ---- accumulation ---------------------------------------------------------------- */

static bool same_type(const ptc_ttype *x, const ptc_ttype *y)
{
    if (x->dtype != y->dtype || x->ndim != y->ndim || !ptc_device_eq(x->device, y->device))
        return false;
    for (int d = 0; d < x->ndim; d++)
        if (!ptc_dim_eq(x->shape[d], y->shape[d]))
            return false;
    return true;
}

void ag_accum(ag *a, const ptc_value *x, ptc_value *grad)
{
    if (a->failed || !ag_needs(a, x))
        return;
    if (!grad) {
        a->failed = true; /* a builder failed and said why */
        return;
    }
    if (!same_type(&grad->type, &x->type)) {
        ptc_buf want = {0}, got = {0};
        ptc_ttype_print(&want, &x->type, false);
        ptc_ttype_print(&got, &grad->type, false);
        ptc_errorf(a->err, PTC_ERR_INTERNAL, "autograd",
                   "the derivative of %s gave %%%s a gradient of type %s, expected %s",
                   ptc_op_name(a->node->op), x->name, got.data, want.data);
        ptc_buf_free(&want);
        ptc_buf_free(&got);
        a->failed = true;
        return;
    }
    ptc_value **slot = &a->grad[x->id];
    *slot = *slot ? ag_binary(a, PTC_OP_PRIMS_ADD, *slot, grad) : grad;
}

/* ---- the joint graph ------------------------------------------------------------- */

static bool node_reads_needed(const ag *a, const ptc_node *n)
{
    for (int i = 0; i < n->nargs; i++) {
        const ptc_arg *arg = &n->args[i];
        if (arg->kind == PTC_ARG_VALUE && ag_needs(a, arg->v))
            return true;
        if (arg->kind == PTC_ARG_VALUES)
            for (int j = 0; j < arg->vs.n; j++)
                if (ag_needs(a, arg->vs.v[j]))
                    return true;
    }
    return false;
}

/* Floating values that depend on a wanted input. */
static int mark_needs(ag *a, const bool *wants_grad)
{
    ptc_graph *g = a->g;
    for (int i = 0; i < g->ninputs; i++) {
        if (!wants_grad[i])
            continue;
        if (!ptc_dtype_is_float(g->inputs[i]->type.dtype))
            return ptc_errorf(a->err, PTC_ERR_UNSUPPORTED, "autograd",
                              "input %%%s (%s) cannot require gradients: only floating tensors can",
                              g->inputs[i]->name, ptc_dtype_name(g->inputs[i]->type.dtype));
        a->needs[g->inputs[i]->id] = true;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ptc_node *n = g->nodes[i];
        const char *why;
        bool constant = !ptc_autograd_has_rule(n->op, &why) && !why; /* stop_gradient, floor */
        if (constant || !node_reads_needed(a, n))
            continue;
        for (int j = 0; j < n->nout; j++)
            a->needs[n->outs[j]->id] = ptc_dtype_is_float(n->outs[j]->type.dtype);
    }
    return 0;
}

static int add_tangents(ag *a, const bool *no_tangent, ptc_joint *j)
{
    ptc_graph *g = a->g;
    for (int k = 0; k < j->nprimal_outputs; k++) {
        ptc_value *out = g->outputs[k];
        j->tangent_of[k] = -1;
        if (!ag_needs(a, out) || (no_tangent && no_tangent[k]))
            continue;
        ptc_ttype t = out->type;
        t.layout = PTC_LAYOUT_CONTIGUOUS;
        t.requires_grad = false;
        char name[32];
        snprintf(name, sizeof name, "tangent_%d", k);
        ptc_value *tangent = ptc_graph_add_input(g, name, &t);
        j->tangent_of[k] = tangent->input_index;
        j->ntangents++;
        a->node = NULL;
        ag_accum(a, out, tangent);
    }
    return a->failed ? -1 : 0;
}

static int backward_node(ag *a, ptc_node *n)
{
    ptc_value *gout[16] = {0};
    bool any = false;
    for (int j = 0; j < n->nout && j < 16; j++)
        any |= (gout[j] = a->grad[n->outs[j]->id]) != NULL;
    if (!any || !node_reads_needed(a, n))
        return 0;
    a->node = n;
    const char *why = NULL;
    if (!ptc_autograd_has_rule(n->op, &why)) {
        if (!why) /* piecewise constant or nothing floating flows back */
            return 0;
        return ag_fail(a, "%s (node %d) has no derivative: %s", ptc_op_name(n->op), n->id, why);
    }
    if (ag_rule_of(n->op)(a, n, gout) || a->failed) {
        if (!a->failed)
            ag_fail(a, "the derivative of %s (node %d) failed", ptc_op_name(n->op), n->id);
        return -1;
    }
    return 0;
}

/* v, or what the stop_gradients it goes through stop. */
static ptc_value *through_stops(ptc_value *v)
{
    while (v && v->def && v->def->op == PTC_OP_PRIMS_STOP_GRADIENT)
        v = v->def->args[0].v;
    return v;
}

/* With the backward written, a stop_gradient is the identity: its readers
 * read its input, and dce takes it out, so no later stage meets one. */
static void drop_stop_gradients(ptc_graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        ptc_node *n = g->nodes[i];
        for (int k = 0; k < n->nargs; k++) {
            ptc_arg *arg = &n->args[k];
            if (arg->kind == PTC_ARG_VALUE)
                arg->v = through_stops(arg->v);
            for (int e = 0; arg->kind == PTC_ARG_VALUES && e < arg->vs.n; e++)
                arg->vs.v[e] = through_stops(arg->vs.v[e]);
        }
    }
    for (int k = 0; k < g->noutputs; k++)
        g->outputs[k] = through_stops(g->outputs[k]);
}

static int set_joint_outputs(ag *a, const bool *wants_grad, ptc_joint *j)
{
    ptc_graph *g = a->g;
    int nout = j->nprimal_outputs;
    ptc_value **outs = PTC_NEWN(g->arena, ptc_value *, nout + j->nprimal_inputs + 1);
    for (int k = 0; k < nout; k++)
        outs[k] = g->outputs[k];
    a->node = NULL;
    for (int i = 0; i < j->nprimal_inputs; i++) {
        if (!wants_grad[i])
            continue;
        ptc_value *x = g->inputs[i], *grad = a->grad[x->id];
        outs[nout + j->ngrads] = grad ? grad : ag_full_like(a, x, 0.0);
        j->grad_of[j->ngrads++] = i;
    }
    if (a->failed)
        return -1;
    ptc_graph_set_outputs(g, outs, nout + j->ngrads);
    return 0;
}

/* ---- relu's mask from its result ------------------------------------------------------------ */

/* relu is where(m, 0, x) with m = x <= 0, and its backward reads m. Where
 * the backward reads relu's result r anyway (the next convolution or matmul
 * saves its input), m is rebuilt from r, r <= 0, rather than saved beside
 * it (resnet50's b32 bf16 training step on an H200 peaked 0.26 GiB lower
 * without them, 2.35 -> 2.09 GiB). So too where r is an output of the
 * graph: the caller holds it (eager's relu saves its result), and where the
 * graph ends at a unit's boundary (FSDP's units, a graph break) the next
 * graph saves it as its input; a mask saved beside it cost resnet50's
 * FSDP2 step on an H200 34 MiB more than eager's forward left alive.
 * Exact: r is 0 where m holds and x (> 0 or NaN) elsewhere;
 * under autocast r may be the narrowing of where's result back to the
 * dtype x was widened from, which holds x's values exactly. */

static bool is_zero_full(const ptc_value *v)
{
    const ptc_node *d = v->def;
    if (!d || d->op != PTC_OP_PRIMS_FULL)
        return false;
    const ptc_arg *fill = ptc_node_arg(d, "fill_value");
    return (fill->kind == PTC_ARG_FLOAT && fill->f == 0) ||
           (fill->kind == PTC_ARG_INT && ptc_dim_is_static(fill->i) && fill->i.value == 0);
}

/* The value x was widened from (a convert of a 16-bit float), or NULL. */
static const ptc_value *widened_from(const ptc_value *x)
{
    const ptc_node *d = x->def;
    if (!d || d->op != PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE)
        return NULL;
    ptc_dtype from = d->args[0].v->type.dtype;
    return from == PTC_BF16 || from == PTC_F16 ? d->args[0].v : NULL;
}

/* w's result as the backward reads it or the graph returns it (held): w
 * itself, or its narrowing to the dtype x was widened from; NULL when
 * neither is held. */
static ptc_value *result_held(const ptc_graph *g, const ptc_node *w, const ptc_value *x,
                              const bool *held, int first_backward_id)
{
    if (held[w->outs[0]->id])
        return w->outs[0];
    const ptc_value *narrow = widened_from(x);
    for (int i = 0; narrow && i < g->nnodes && g->nodes[i]->id < first_backward_id; i++) {
        const ptc_node *c = g->nodes[i];
        if (c->op == PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE && c->args[0].v == w->outs[0] &&
            c->outs[0]->type.dtype == narrow->type.dtype && held[c->outs[0]->id])
            return c->outs[0];
    }
    return NULL;
}

/* m rebuilt from r (widened back to x's dtype where r is narrower). */
static ptc_value *mask_from(ptc_graph *g, const ptc_node *le, ptc_value *r, ptc_error *err)
{
    ptc_value *x = le->args[0].v, *zero = le->args[1].v;
    if (r->type.dtype != x->type.dtype) {
        ptc_arg cargs[2] = {ptc_arg_value(r), ptc_arg_dtype(x->type.dtype)};
        ptc_node *c = ptc_build(g, PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE, cargs, 2, err);
        if (!c)
            return NULL;
        r = c->outs[0];
    }
    ptc_arg args[2] = {ptc_arg_value(r), ptc_arg_value(zero)};
    ptc_node *m = ptc_build(g, PTC_OP_PRIMS_LE, args, 2, err);
    return m ? m->outs[0] : NULL;
}

static void replace_in_backward(ptc_graph *g, const ptc_value *old, ptc_value *by,
                                int first_backward_id, int nold)
{
    for (int i = 0; i < nold; i++) {
        ptc_node *n = g->nodes[i];
        for (int k = 0; n->id >= first_backward_id && k < n->nargs; k++)
            if (n->args[k].kind == PTC_ARG_VALUE && n->args[k].v == old)
                n->args[k].v = by;
    }
}

/* Moves the nodes appended from index `from` on to just before the first
 * backward node, ahead of every reader. */
static void place_before_backward(ptc_graph *g, int from, int first_backward_id)
{
    int at = 0;
    while (at < from && g->nodes[at]->id < first_backward_id)
        at++;
    int n = g->nnodes - from;
    ptc_node **moved = malloc(sizeof *moved * ((size_t)n + 1));
    PTC_ASSERT(moved);
    memcpy(moved, g->nodes + from, sizeof *moved * (size_t)n);
    memmove(g->nodes + at + n, g->nodes + at, sizeof *moved * (size_t)(from - at));
    memcpy(g->nodes + at, moved, sizeof *moved * (size_t)n);
    free(moved);
}

static int masks_from_results(ptc_graph *g, int nprimal_outputs, int first_backward_id,
                              ptc_error *err)
{
    bool *read_back = calloc((size_t)g->nvalues + 1, sizeof *read_back);
    bool *held = calloc((size_t)g->nvalues + 1, sizeof *held);
    PTC_ASSERT(read_back && held);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; g->nodes[i]->id >= first_backward_id && k < g->nodes[i]->nargs; k++)
            for (int e = 0; e < ptc_arg_nvalues(&g->nodes[i]->args[k]); e++) {
                ptc_value *v = ptc_arg_value_at(&g->nodes[i]->args[k], e);
                if (v)
                    read_back[v->id] = held[v->id] = true;
            }
    for (int k = 0; k < nprimal_outputs; k++)
        held[g->outputs[k]->id] = true;
    int nold = g->nnodes, rc = 0;
    for (int i = 0; i < nold && rc == 0 && g->nodes[i]->id < first_backward_id; i++) {
        const ptc_node *w = g->nodes[i];
        if (w->op != PTC_OP_PRIMS_WHERE)
            continue;
        ptc_value *m = w->args[0].v, *x = w->args[2].v;
        const ptc_node *le = m->def;
        if (!read_back[m->id] || !le || le->op != PTC_OP_PRIMS_LE || le->args[0].v != x ||
            !is_zero_full(le->args[1].v) || !is_zero_full(w->args[1].v))
            continue;
        ptc_value *r = result_held(g, w, x, held, first_backward_id);
        if (!r)
            continue;
        ptc_value *rebuilt = mask_from(g, le, r, err);
        if (!rebuilt)
            rc = -1;
        else
            replace_in_backward(g, m, rebuilt, first_backward_id, nold);
    }
    if (g->nnodes > nold)
        place_before_backward(g, nold, first_backward_id);
    free(read_back);
    free(held);
    return rc;
}

int ptc_autograd_joint(const ptc_graph *g, const bool *wants_grad, const bool *no_tangent,
                       ptc_joint *out, ptc_error *err)
{
    memset(out, 0, sizeof *out);
    ptc_graph *jg = ptc_graph_clone(g, NULL);
    jg->name = "joint";
    /* The joint graph is functional: which values need gradients is its own
     * business (ag.needs), not the types' requires_grad. */
    for (int i = 0; i < jg->nvalues; i++)
        jg->values[i]->type.requires_grad = false;
    int nforward = jg->nnodes, first_backward_id = jg->next_node_id;
    ag a = {.g = jg, .err = err, .nvalues = jg->nvalues + g->noutputs};
    a.needs = PTC_NEWN(jg->arena, bool, a.nvalues);
    a.grad = PTC_NEWN(jg->arena, ptc_value *, a.nvalues);
    out->graph = jg;
    out->nprimal_inputs = g->ninputs;
    out->nprimal_outputs = g->noutputs;
    out->tangent_of = PTC_NEWN(jg->arena, int, g->noutputs + 1);
    out->grad_of = PTC_NEWN(jg->arena, int, g->ninputs + 1);
    if (mark_needs(&a, wants_grad) || add_tangents(&a, no_tangent, out))
        goto fail;
    for (int i = nforward - 1; i >= 0; i--)
        if (backward_node(&a, jg->nodes[i]))
            goto fail;
    if (set_joint_outputs(&a, wants_grad, out))
        goto fail;
    drop_stop_gradients(jg);
    if (masks_from_results(jg, out->nprimal_outputs, first_backward_id, err) ||
        ptc_pass_factor_sums(jg, first_backward_id, err) < 0 || ptc_simplify(jg, err) || ptc_ops_verify(jg, PTC_STAGE_PRIM, err))
        goto fail;
    return 0;
fail:
    ptc_graph_free(jg);
    memset(out, 0, sizeof *out);
    return -1;
}
