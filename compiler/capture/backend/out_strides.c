/* Eager's output strides (backend.h's cap_plan_out_layouts).
 *
 * Kernels write outputs contiguous; eager gives a pointwise result the
 * layout of its operands (TensorIterator: x.t() + 1 is transposed too), and
 * a sort's values and indices the layout of its input where that is dense
 * (empty_like). So the compiled graph returns such an output permuted to be
 * contiguous, and the user gets a tensor over the same memory with eager's
 * sizes and strides (set_, so that it has no _base, as eager's). Strides
 * are followed through pointwise ops and the views that reorder or drop
 * dims; any other op's result is contiguous, as in eager. Static shapes
 * only.
 */
#include "capture/backend/backend.h"

#include <stdlib.h>
#include <string.h>

typedef int64_t stride_row[PTC_MAX_DIMS]; /* a value's strides */

static void contiguous_strides(const ptc_ttype *t, int64_t *st)
{
    int64_t step = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        st[d] = step;
        step *= t->shape[d].value > 1 ? t->shape[d].value : 1;
    }
}

/* TensorIterator's layout of a pointwise result (cap_pointwise_strides). */
static void pointwise_strides(const ptc_node *n, stride_row *strides, int64_t *out)
{
    enum { MAX_OPERANDS = 8 };
    const ptc_ttype *types[MAX_OPERANDS];
    const int64_t *operand_strides[MAX_OPERANDS];
    int nops = 0;
    for (int a = 0; a < n->nargs && nops < MAX_OPERANDS; a++) {
        const ptc_value *v = n->args[a].kind == PTC_ARG_VALUE ? n->args[a].v : NULL;
        if (!v || v->type.ndim == 0)
            continue;
        types[nops] = &v->type;
        operand_strides[nops++] = strides[v->id];
    }
    cap_pointwise_strides(&n->outs[0]->type, nops, types, operand_strides,
                          cap_has_scalar_operand(n), out);
}

/* The strides eager gives node n's first output, from its operands'. */
static void node_strides(const ptc_node *n, stride_row *strides, int64_t *out)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    const ptc_value *in = n->nargs && n->args[0].kind == PTC_ARG_VALUE ? n->args[0].v : NULL;
    const int64_t *is = in ? strides[in->id] : NULL;
    int nd = in ? in->type.ndim : 0;
    contiguous_strides(ot, out);
    int8_t order[PTC_MAX_DIMS];
    if (n->op == PTC_OP_SORT) { /* values and indices: empty_like(input) */
        if (cap_dense_order(&in->type, is, order))
            memcpy(out, is, sizeof(int64_t) * (size_t)nd);
        return;
    }
    if (n->nout != 1)
        return;
    if (ptc_op_flags(n->op) & PTC_F_POINTWISE) {
        pointwise_strides(n, strides, out);
    } else if (n->op == PTC_OP_T || n->op == PTC_OP_TRANSPOSE) {
        bool t = n->op == PTC_OP_T;
        int d0 = t ? 0 : (int)n->args[1].i.value, d1 = t ? 1 : (int)n->args[2].i.value;
        d0 = d0 < 0 ? d0 + nd : d0, d1 = d1 < 0 ? d1 + nd : d1;
        for (int d = 0; d < nd; d++)
            out[d] = is[d == d0 ? d1 : d == d1 ? d0 : d];
    } else if (n->op == PTC_OP_PERMUTE) {
        for (int d = 0; d < nd; d++) {
            int64_t src = n->args[1].is.d[d].value;
            out[d] = is[src < 0 ? src + nd : src];
        }
    } else if (n->op == PTC_OP_SELECT) {
        int64_t dim = n->args[1].i.value < 0 ? n->args[1].i.value + nd : n->args[1].i.value;
        for (int d = 0, k = 0; d < nd; d++)
            if (d != dim)
                out[k++] = is[d];
    } else if (n->op == PTC_OP_SLICE && n->args[4].kind == PTC_ARG_INT) {
        int64_t dim = n->args[1].i.value < 0 ? n->args[1].i.value + nd : n->args[1].i.value;
        for (int d = 0; d < nd; d++)
            out[d] = is[d] * (d == dim ? n->args[4].i.value : 1);
    } else if (n->op == PTC_OP_NARROW) {
        memcpy(out, is, sizeof(int64_t) * (size_t)nd);
    } else if (n->op == PTC_OP_UNSQUEEZE) {
        int64_t dim = n->args[1].i.value < 0 ? n->args[1].i.value + nd + 1 : n->args[1].i.value;
        for (int d = 0, k = 0; d <= nd; d++)
            out[d] = d == dim ? (d < nd ? in->type.shape[d].value * is[d] : 1) : is[k++];
    } else if (n->op == PTC_OP_CONTIGUOUS || n->op == PTC_OP_CLONE || n->op == PTC_OP_EXPAND) {
        /* clone keeps a dense layout (preserve_format); expand's new dims are
           broadcast (skipped by pointwise_strides) */
        for (int d = 0; d < nd && n->op != PTC_OP_CONTIGUOUS; d++)
            out[d + ot->ndim - nd] = is[d];
    }
}

/* The order of dims that makes strides st contiguous: false when they are
 * contiguous already, or not a dense layout (a view eager returns of an
 * intermediate: it comes back contiguous). */
static bool output_perm(const ptc_ttype *t, const int64_t *st, int8_t *perm)
{
    int64_t want[PTC_MAX_DIMS];
    contiguous_strides(t, want);
    return memcmp(want, st, sizeof(int64_t) * (size_t)t->ndim) != 0 &&
           cap_dense_order(t, st, perm);
}

/* A copy of g that returns the outputs layout permutes permuted. */
static ptc_graph *permute_outputs(const ptc_graph *g, const cap_out_layout *layout,
                                  ptc_error *err)
{
    ptc_graph *c = ptc_graph_clone(g, NULL);
    if (!c) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "capture", "the graph could not be copied");
        return NULL;
    }
    ptc_value **outs = malloc(sizeof *outs * (size_t)(g->noutputs + 1));
    for (int i = 0; c && i < g->noutputs; i++) {
        outs[i] = c->outputs[i];
        if (layout[i].perm[0] < 0)
            continue;
        int64_t dims[PTC_MAX_DIMS];
        for (int d = 0; d < outs[i]->type.ndim; d++)
            dims[d] = layout[i].perm[d];
        ptc_arg a[2] = {ptc_arg_value(outs[i]), ptc_arg_ints(c->arena, dims, outs[i]->type.ndim)};
        ptc_node *n = ptc_build(c, PTC_OP_PERMUTE, a, 2, err);
        if (!n) {
            ptc_graph_free(c);
            c = NULL;
            break;
        }
        n->loc = outs[i]->def->loc;
        outs[i] = n->outs[0];
    }
    if (c)
        ptc_graph_set_outputs(c, outs, g->noutputs);
    free(outs);
    return c;
}

/* Which outputs need eager's strides, and a graph that returns those
 * permuted (*permuted stays NULL when none does). known: the strides the
 * trace knew (cap_entry.out_strides, or NULL), which win over these ops'
 * (a *_like's size-1 dims). */
int cap_plan_out_layouts(const ptc_graph *g, const cap_out_strides *known, cap_out_layout **out,
                         ptc_graph **permuted, ptc_error *err)
{
    *permuted = NULL;
    for (int i = 0; i < g->nvalues; i++)
        if (!ptc_ttype_is_static(&g->values[i]->type))
            return 0;
    stride_row *strides = calloc((size_t)g->nvalues + 1, sizeof *strides);
    cap_out_layout *layout = *out = calloc((size_t)g->noutputs + 1, sizeof *layout);
    if (!strides || !layout) {
        free(strides);
        return ptc_errorf(err, PTC_ERR_INTERNAL, "runtime", "out of memory");
    }
    for (int i = 0; i < g->ninputs; i++) {
        const ptc_ttype *t = &g->inputs[i]->type;
        for (int d = 0; d < t->ndim; d++)
            strides[g->inputs[i]->id][d] = t->strides[d].value;
        if (t->layout == PTC_LAYOUT_CONTIGUOUS)
            contiguous_strides(t, strides[g->inputs[i]->id]);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ptc_node *n = g->nodes[i];
        node_strides(n, strides, strides[n->outs[0]->id]);
        for (int k = 1; k < n->nout; k++)
            if (n->op == PTC_OP_SORT) /* the indices: as the values */
                memcpy(strides[n->outs[k]->id], strides[n->outs[0]->id], sizeof(stride_row));
            else
                contiguous_strides(&n->outs[k]->type, strides[n->outs[k]->id]);
    }
    bool any = false;
    for (int i = 0; i < g->noutputs; i++) {
        const ptc_value *v = g->outputs[i];
        if (known && known[i].known && v->def)
            memcpy(strides[v->id], known[i].st, sizeof strides[v->id]);
        bool p = v->def && output_perm(&v->type, strides[v->id], layout[i].perm);
        memcpy(layout[i].strides, strides[v->id], sizeof strides[v->id]);
        layout[i].perm[0] = p ? layout[i].perm[0] : -1;
        any = any || p;
    }
    free(strides);
    if (!any)
        return 0;
    *permuted = permute_outputs(g, layout, err);
    return *permuted ? 0 : -1;
}

