/* A backward for outputs that got no gradient.
 *
 * torch gives a node no gradient for an output the loss does not use
 * (GPT-2's present keys and values); feeding the backward zeros in its
 * place would allocate and clear a tensor per such output, per step, and
 * run the kernels that multiply and add them. Every value of a backward
 * graph is linear in its tangents, so an absent tangent is a structural
 * zero: this pass rebuilds the backward without those inputs, carrying a
 * "known zero" mark forward through the ops that keep a zero a zero (a
 * product, a quotient of zero, a view, a conversion, a sum, a matmul, a
 * convolution's gradients) and dropping it from sums (x + 0 is x), as
 * eager's autograd skips an undefined gradient. Where a zero reaches an op
 * with no such rule it is made a prims.full, which the loop stage computes
 * in the reading kernel rather than loading from memory.
 */
#include "ag.h"

#include <stdlib.h>
#include <string.h>

typedef struct rebuild {
    ptc_graph *g;    /* the new backward */
    ptc_value **map; /* old value id -> new value (NULL: a zero not made yet) */
    bool *zero;      /* old value id -> known zero */
    ptc_error *err;
} rebuild;

static bool same_shape(const ptc_ttype *a, const ptc_ttype *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->device.kind != b->device.kind ||
        a->device.index != b->device.index)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (!ptc_dim_eq(a->shape[d], b->shape[d]))
            return false;
    return true;
}

/* The new graph's value for old value v: a prims.full of zeros where v is a
 * known zero (made once). */
static ptc_value *value_of(rebuild *r, const ptc_value *v)
{
    if (r->map[v->id] || !r->zero[v->id])
        return r->map[v->id];
    const ptc_ttype *t = &v->type;
    ptc_dim *shape = PTC_NEWN(r->g->arena, ptc_dim, t->ndim > 0 ? t->ndim : 1);
    memcpy(shape, t->shape, sizeof *shape * (size_t)t->ndim);
    ptc_arg args[4] = {{.kind = PTC_ARG_INTS, .is = {t->ndim, shape}},
                       {.kind = PTC_ARG_FLOAT, .f = 0},
                       {.kind = PTC_ARG_DTYPE, .dt = t->dtype},
                       {.kind = PTC_ARG_DEVICE, .dev = t->device}};
    return r->map[v->id] = ptc_build1(r->g, PTC_OP_PRIMS_FULL, args, 4, r->err);
}

static bool arg_zero(const rebuild *r, const ptc_node *n, int i)
{
    return n->args[i].kind == PTC_ARG_VALUE && r->zero[n->args[i].v->id];
}

static bool reads_zero(const rebuild *r, const ptc_node *n)
{
    for (int a = 0; a < n->nargs; a++)
        for (int k = 0; k < ptc_arg_nvalues(&n->args[a]); k++) {
            const ptc_value *v = ptc_arg_value_at(&n->args[a], k);
            if (v && r->zero[v->id])
                return true;
        }
    return false;
}

static bool all_values_zero(const rebuild *r, const ptc_arg *a)
{
    for (int k = 0; k < ptc_arg_nvalues(a); k++) {
        const ptc_value *v = ptc_arg_value_at(a, k);
        if (!v || !r->zero[v->id])
            return false;
    }
    return true;
}

/* Whether n, which reads a known zero, has all its results zero. */
static bool gives_zero(const rebuild *r, const ptc_node *n)
{
    switch (n->op) {
    case PTC_OP_PRIMS_MUL:
    case PTC_OP_MM:
    case PTC_OP_BMM:
        return true;
    case PTC_OP_PRIMS_DIV:
    case PTC_OP_PRIMS_NEG:
    case PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE:
    case PTC_OP_PRIMS_BROADCAST_IN_DIM:
    case PTC_OP_PRIMS_RESHAPE:
    case PTC_OP_PRIMS_PERMUTE:
    case PTC_OP_PRIMS_SLICE:
    case PTC_OP_PRIMS_SUM:
    case PTC_OP_CONVOLUTION_BACKWARD_WEIGHT:
    case PTC_OP_CONVOLUTION_BACKWARD: /* the gradient of the convolution's output */
        return arg_zero(r, n, 0);
    case PTC_OP_PRIMS_ADD:
    case PTC_OP_PRIMS_SUB:
        return arg_zero(r, n, 0) && arg_zero(r, n, 1);
    case PTC_OP_PRIMS_WHERE:
        return arg_zero(r, n, 1) && arg_zero(r, n, 2);
    case PTC_OP_PRIMS_CAT:
        return all_values_zero(r, &n->args[0]);
    case PTC_OP_PRIMS_SCATTER_ADD:
    case PTC_OP_PRIMS_SCATTER:
        return arg_zero(r, n, 0) && arg_zero(r, n, 3);
    default:
        return false;
    }
}

/* n's result where it is one of its operands (x + 0, x - 0) or its negation
 * (0 - x), else NULL. */
static ptc_value *drops_zero(rebuild *r, const ptc_node *n)
{
    if (n->op != PTC_OP_PRIMS_ADD && n->op != PTC_OP_PRIMS_SUB)
        return NULL;
    int kept = arg_zero(r, n, 0) ? 1 : 0;
    const ptc_value *x = n->args[kept].v;
    if (!same_shape(&x->type, &n->outs[0]->type))
        return NULL;
    if (n->op == PTC_OP_PRIMS_ADD || kept == 0)
        return r->map[x->id];
    ptc_arg neg = ptc_arg_value(r->map[x->id]);
    return ptc_build1(r->g, PTC_OP_PRIMS_NEG, &neg, 1, r->err);
}

/* Copies node n into the new graph, or marks its results zero, or maps its
 * result to what it reduces to; -1 on a failed build. */
static int copy_node(rebuild *r, const ptc_node *n)
{
    if (!reads_zero(r, n)) {
        ptc_graph_copy_node(r->g, n, r->map);
        return 0;
    }
    if (gives_zero(r, n)) {
        for (int k = 0; k < n->nout; k++)
            r->zero[n->outs[k]->id] = true;
        return 0;
    }
    ptc_value *same = drops_zero(r, n);
    if (same) {
        r->map[n->outs[0]->id] = same;
        return 0;
    }
    for (int a = 0; a < n->nargs; a++)
        for (int k = 0; k < ptc_arg_nvalues(&n->args[a]); k++) {
            const ptc_value *v = ptc_arg_value_at(&n->args[a], k);
            if (v && !value_of(r, v))
                return -1;
        }
    ptc_graph_copy_node(r->g, n, r->map);
    return 0;
}

ptc_graph *ptc_autograd_without_tangents(const ptc_graph *backward, int first_tangent,
                                         const bool *absent, ptc_error *err)
{
    rebuild r = {ptc_graph_new(NULL, backward->name),
                 calloc((size_t)backward->nvalues + 1, sizeof(ptc_value *)),
                 calloc((size_t)backward->nvalues + 1, sizeof(bool)), err};
    ptc_value **outs = malloc(sizeof(ptc_value *) * ((size_t)backward->noutputs + 1));
    if (!r.g || !r.map || !r.zero || !outs) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "out of memory");
        goto fail;
    }
    r.g->next_node_id = backward->next_node_id; /* new nodes do not take a copied id */
    r.g->next_value_name = backward->next_value_name; /* nor new values a copied name */
    for (int i = 0; i < backward->ninputs; i++) {
        const ptc_value *in = backward->inputs[i];
        if (i >= first_tangent && absent[i - first_tangent])
            r.zero[in->id] = true;
        else
            r.map[in->id] = ptc_graph_add_input(r.g, in->name, &in->type);
    }
    for (int i = 0; i < backward->nnodes; i++)
        if (copy_node(&r, backward->nodes[i]))
            goto fail;
    for (int i = 0; i < backward->noutputs; i++)
        if (!(outs[i] = value_of(&r, backward->outputs[i])))
            goto fail;
    ptc_graph_set_outputs(r.g, outs, backward->noutputs);
    if (ptc_simplify(r.g, err))
        goto fail;
    free(r.map);
    free(r.zero);
    free(outs);
    return r.g;
fail:
    ptc_graph_free(r.g);
    free(r.map);
    free(r.zero);
    free(outs);
    return NULL;
}
