/* Splitting a joint graph into the forward and the backward that run at
 * different times: the forward returns, after its outputs, the values the
 * backward reads (saved), the backward starts from them and the tangents.
 *
 * A node belongs to the backward when it reads a tangent, directly or not;
 * the rest is forward. Nodes with no tensor input (fulls, iotas) are copied
 * into whichever side uses them. Then a greedy pass trades memory for work
 * as Inductor's partitioner does for cheap ops: a saved value made by a
 * pointwise or view node is recomputed in the backward instead when the
 * inputs that node would need saved take no more bytes than the value
 * itself (an exp of a saved input, a broadcast of a small tensor), an input
 * counted at what it would cost once recomputed in turn (save_cost), an
 * output of the forward at nothing (its caller holds it: relu's mask rebuilt
 * from a graph's relu result, autograd.c); chains follow from repeating it
 * until nothing moves. The backward recomputes a
 * value where it first reads it, not at its start.
 */
#include "ag.h"

#include <stdlib.h>
#include <string.h>

typedef enum { SIDE_FORWARD, SIDE_BACKWARD, SIDE_FREE } side;

typedef struct split {
    const ptc_graph *j;
    side *node_side; /* by node index */
    ptc_node **def;  /* by value id: the node defining it, NULL for inputs */
    bool *saved;     /* by value id */
    bool *output;    /* by value id: an output of the forward, which its caller holds */
    bool *recompute; /* by node index: a forward node copied into the backward */
    int *index;      /* by node id: node index */
} split;

static bool is_tangent(const ptc_joint *jt, const ptc_value *v)
{
    return v->input_index >= jt->nprimal_inputs;
}

/* The tensor inputs of n one at a time (arg and elem start at 0). */
static ptc_value *next_input(const ptc_node *n, int *arg, int *elem)
{
    for (; *arg < n->nargs; (*arg)++, *elem = 0) {
        const ptc_arg *a = &n->args[*arg];
        if (a->kind == PTC_ARG_VALUE && *elem == 0) {
            (*elem)++;
            return a->v;
        }
        if (a->kind == PTC_ARG_VALUES)
            while (*elem < a->vs.n)
                if (a->vs.v[(*elem)++])
                    return a->vs.v[*elem - 1];
    }
    return NULL;
}

#define FOR_INPUTS(n, v) for (int arg_ = 0, elem_ = 0; ((v) = next_input((n), &arg_, &elem_));)

static void classify(split *s, const ptc_joint *jt, bool *tangent_dep)
{
    const ptc_graph *j = s->j;
    for (int i = 0; i < j->ninputs; i++)
        tangent_dep[j->inputs[i]->id] = is_tangent(jt, j->inputs[i]);
    for (int i = 0; i < j->nnodes; i++) {
        ptc_node *n = j->nodes[i];
        bool any_input = false, dep = false;
        ptc_value *v;
        FOR_INPUTS(n, v)
        {
            any_input = true;
            dep |= tangent_dep[v->id];
        }
        s->node_side[i] = dep ? SIDE_BACKWARD : any_input ? SIDE_FORWARD : SIDE_FREE;
        for (int k = 0; k < n->nout; k++) {
            tangent_dep[n->outs[k]->id] = dep;
            s->def[n->outs[k]->id] = n;
        }
    }
}

/* Computed by the forward (inputs included) and not recomputed. */
static bool on_forward(const split *s, const ptc_value *v)
{
    const ptc_node *d = s->def[v->id];
    if (!d)
        return true;
    int i = s->index[d->id];
    return s->node_side[i] == SIDE_FORWARD && !s->recompute[i];
}

/* Forward values the backward reads, and gradients that are forward values. */
static void mark_saved(split *s, const ptc_joint *jt)
{
    const ptc_graph *j = s->j;
    memset(s->saved, 0, sizeof(bool) * (size_t)j->nvalues);
    for (int i = 0; i < j->nnodes; i++) {
        if (s->node_side[i] != SIDE_BACKWARD && !s->recompute[i])
            continue;
        ptc_value *v;
        FOR_INPUTS(j->nodes[i], v)
        {
            if (on_forward(s, v) && !is_tangent(jt, v))
                s->saved[v->id] = true;
        }
    }
    for (int r = 0; r < jt->ngrads; r++) {
        ptc_value *g = j->outputs[jt->nprimal_outputs + r];
        if (on_forward(s, g) && !is_tangent(jt, g))
            s->saved[g->id] = true;
    }
}

static double bytes(const ptc_value *v)
{
    double n = (double)ptc_dtype_size(v->type.dtype);
    for (int d = 0; d < v->type.ndim; d++)
        n *= ptc_dim_is_static(v->type.shape[d]) ? (double)v->type.shape[d].value : 1024.0;
    return n;
}

/* How many cheap producers save_cost looks through. */
enum { SAVE_COST_DEPTH = 3 };

static bool cheap(const ptc_node *n)
{
    unsigned f = ptc_op_flags(n->op);
    return (f & (PTC_F_POINTWISE | PTC_F_VIEW)) && !(f & PTC_F_RANDOM) && n->nout == 1;
}

/* Bytes saving v for the backward would cost: a value a cheap forward node
 * makes from smaller unsaved inputs costs what they do, since a later round
 * recomputes it from them (a BatchNorm's mean broadcast to the activation's
 * shape is one float per channel, not a second activation; a float32 copy of
 * a bfloat16 activation is the activation). depth bounds the walk. */
static double save_cost(const split *s, const ptc_value *v, int depth)
{
    if (s->output[v->id])
        return 0;
    double own = bytes(v);
    ptc_node *d = s->def[v->id];
    if (!d || depth == 0 || !cheap(d) || s->node_side[s->index[d->id]] != SIDE_FORWARD)
        return own;
    double from = 0;
    ptc_value *u;
    FOR_INPUTS(d, u)
    {
        if (!s->saved[u->id])
            from += save_cost(s, u, depth - 1);
    }
    return from < own ? from : own;
}

/* What mark_saved gives once node n is recomputed, without its pass over
 * the graph (one pass per value moved made the partition quadratic in the
 * graph's size). Only two things change: n's outputs are no longer computed
 * by the forward, so nothing saves them, and n has joined the nodes whose
 * forward inputs are saved. */
static void saved_after_recompute(split *s, const ptc_joint *jt, const ptc_node *n)
{
    for (int k = 0; k < n->nout; k++)
        s->saved[n->outs[k]->id] = false;
    ptc_value *v;
    FOR_INPUTS(n, v)
    {
        if (on_forward(s, v) && !is_tangent(jt, v))
            s->saved[v->id] = true;
    }
}

/* One round of recomputation; whether anything moved. */
static bool recompute_round(split *s, const ptc_joint *jt)
{
    const ptc_graph *j = s->j;
    bool moved = false;
    for (int id = 0; id < j->nvalues; id++) {
        if (!s->saved[id] || !s->def[id])
            continue;
        ptc_node *n = s->def[id];
        int ni = s->index[n->id];
        if (s->recompute[ni] || s->node_side[ni] != SIDE_FORWARD || !cheap(n))
            continue;
        double extra = 0;
        ptc_value *v;
        FOR_INPUTS(n, v)
        {
            if (!s->saved[v->id] && on_forward(s, v))
                extra += save_cost(s, v, SAVE_COST_DEPTH);
        }
        if (extra > bytes(j->values[id]))
            continue;
        s->recompute[ni] = true;
        saved_after_recompute(s, jt, n);
        moved = true;
    }
    return moved;
}

/* Copies the forward's nodes in order, inputs through map. */
static void copy_forward(ptc_graph *dst, const split *s, ptc_value **map)
{
    const ptc_graph *j = s->j;
    for (int i = 0; i < j->nnodes; i++) {
        if (s->node_side[i] == SIDE_BACKWARD)
            continue;
        ptc_value *v;
        FOR_INPUTS(j->nodes[i], v)
        {
            PTC_ASSERT(map[v->id]); /* an input, or computed before */
        }
        ptc_graph_copy_node(dst, j->nodes[i], map);
    }
}

/* Makes v in the backward if it is not there yet: a recomputed value (or a
 * free node's) is copied where the backward first reads it, its own
 * recomputed inputs first. In the joint's order every recomputation came
 * before the whole backward, so the first layer's, read at the backward's
 * end, lived through all of it beside the last layer's: a backward's
 * temporaries as large as what saving them would have cost. */
static void recompute_on_demand(ptc_graph *dst, const split *s, ptc_value **map,
                                const ptc_value *v)
{
    if (map[v->id])
        return;
    ptc_node *d = s->def[v->id];
    PTC_ASSERT(d); /* a backward input is mapped from the start */
    ptc_value *u;
    FOR_INPUTS(d, u)
    {
        recompute_on_demand(dst, s, map, u);
    }
    ptc_graph_copy_node(dst, d, map);
}

/* Copies the backward's nodes in order, recomputations where first read. */
static void copy_backward(ptc_graph *dst, const split *s, ptc_value **map)
{
    const ptc_graph *j = s->j;
    for (int i = 0; i < j->nnodes; i++) {
        ptc_node *n = j->nodes[i];
        if (s->node_side[i] != SIDE_BACKWARD)
            continue; /* recomputed and free nodes: on demand */
        ptc_value *v;
        FOR_INPUTS(n, v)
        {
            recompute_on_demand(dst, s, map, v);
        }
        ptc_graph_copy_node(dst, n, map);
    }
}

static ptc_graph *build_forward(const split *s, const ptc_joint *jt, int *nsaved, int **saved_input)
{
    const ptc_graph *j = s->j;
    ptc_graph *f = ptc_graph_new(NULL, "forward");
    ptc_value **map = calloc((size_t)j->nvalues + 1, sizeof *map);
    ptc_value **outs = malloc(sizeof *outs * (size_t)(jt->nprimal_outputs + j->nvalues + 1));
    PTC_ASSERT(map && outs);
    for (int i = 0; i < jt->nprimal_inputs; i++)
        map[j->inputs[i]->id] = ptc_graph_add_input(f, j->inputs[i]->name, &j->inputs[i]->type);
    copy_forward(f, s, map);
    int n = jt->nprimal_outputs;
    for (int k = 0; k < n; k++)
        outs[k] = map[j->outputs[k]->id];
    *nsaved = 0;
    *saved_input = malloc(sizeof **saved_input * (size_t)(j->nvalues + 1));
    PTC_ASSERT(*saved_input);
    int nouts = n;
    for (int id = 0; id < j->nvalues; id++) {
        if (!s->saved[id])
            continue;
        const ptc_value *v = j->values[id];
        bool input = v->input_index >= 0 && !is_tangent(jt, v); /* a primal input */
        (*saved_input)[(*nsaved)++] = input ? v->input_index : -1;
        if (!input)
            outs[nouts++] = map[id];
    }
    ptc_graph_set_outputs(f, outs, nouts);
    free(outs);
    free(map);
    ptc_pass_dce(f);
    return f;
}

static ptc_graph *build_backward(const split *s, const ptc_joint *jt)
{
    const ptc_graph *j = s->j;
    ptc_graph *b = ptc_graph_new(NULL, "backward");
    ptc_value **map = calloc((size_t)j->nvalues + 1, sizeof *map);
    ptc_value **outs = malloc(sizeof *outs * (size_t)(jt->ngrads + 1));
    PTC_ASSERT(map && outs);
    for (int id = 0; id < j->nvalues; id++)
        if (s->saved[id]) {
            ptc_ttype t = j->values[id]->type;
            t.requires_grad = false;
            map[id] = ptc_graph_add_input(b, j->values[id]->name, &t);
        }
    for (int i = jt->nprimal_inputs; i < j->ninputs; i++)
        map[j->inputs[i]->id] = ptc_graph_add_input(b, j->inputs[i]->name, &j->inputs[i]->type);
    copy_backward(b, s, map);
    for (int r = 0; r < jt->ngrads; r++) {
        const ptc_value *g = j->outputs[jt->nprimal_outputs + r];
        recompute_on_demand(b, s, map, g);
        outs[r] = map[g->id];
    }
    ptc_graph_set_outputs(b, outs, jt->ngrads);
    free(outs);
    free(map);
    ptc_pass_dce(b);
    return b;
}

int ptc_autograd_partition(const ptc_joint *jt, ptc_partition *out, ptc_error *err)
{
    const ptc_graph *j = jt->graph;
    memset(out, 0, sizeof *out);
    split s = {.j = j};
    int max_id = 0;
    for (int i = 0; i < j->nnodes; i++)
        max_id = j->nodes[i]->id > max_id ? j->nodes[i]->id : max_id;
    s.node_side = calloc((size_t)j->nnodes + 1, sizeof *s.node_side);
    s.recompute = calloc((size_t)j->nnodes + 1, sizeof *s.recompute);
    s.index = calloc((size_t)max_id + 1, sizeof *s.index);
    s.def = calloc((size_t)j->nvalues + 1, sizeof *s.def);
    s.saved = calloc((size_t)j->nvalues + 1, sizeof *s.saved);
    s.output = calloc((size_t)j->nvalues + 1, sizeof *s.output);
    bool *tangent_dep = calloc((size_t)j->nvalues + 1, sizeof *tangent_dep);
    PTC_ASSERT(s.node_side && s.recompute && s.index && s.def && s.saved && s.output && tangent_dep);
    for (int k = 0; k < jt->nprimal_outputs; k++)
        s.output[j->outputs[k]->id] = true;
    for (int i = 0; i < j->nnodes; i++)
        s.index[j->nodes[i]->id] = i;
    classify(&s, jt, tangent_dep);
    mark_saved(&s, jt);
    while (recompute_round(&s, jt))
        ;
    out->forward = build_forward(&s, jt, &out->nsaved, &out->saved_input);
    out->backward = build_backward(&s, jt);
    free(s.node_side);
    free(s.recompute);
    free(s.index);
    free(s.def);
    free(s.saved);
    free(s.output);
    free(tangent_dep);
    if (ptc_ops_verify(out->forward, PTC_STAGE_PRIM, err) ||
        ptc_ops_verify(out->backward, PTC_STAGE_PRIM, err)) {
        ptc_graph_free(out->forward);
        ptc_graph_free(out->backward);
        free(out->saved_input);
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}
