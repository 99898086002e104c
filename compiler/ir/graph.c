/* Graphs: building, editing, cloning.
 *
 * Arrays grow inside the graph's arena (old copies are simply abandoned: the
 * arena frees them all together). Values are found by name through an
 * open-addressing index so that parsing and editing large graphs stays linear.
 */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

ptc_graph *ptc_graph_new(ptc_arena *arena, const char *name)
{
    bool owns = arena == NULL;
    if (owns)
        arena = ptc_arena_new();
    ptc_graph *g = PTC_NEW(arena, ptc_graph);
    g->arena = arena;
    g->owns_arena = owns;
    g->name = ptc_arena_strdup(arena, name ? name : "graph");
    return g;
}

void ptc_graph_free(ptc_graph *g)
{
    if (g && g->owns_arena)
        ptc_arena_free(g->arena);
}

static void *grow(ptc_arena *a, void *old, int n, int *cap, size_t elem)
{
    if (n < *cap)
        return old;
    int ncap = *cap ? *cap * 2 : 16;
    void *p = ptc_arena_alloc(a, elem * (size_t)ncap);
    if (old)
        memcpy(p, old, elem * (size_t)n);
    *cap = ncap;
    return p;
}

static uint64_t name_hash(const char *s) { return ptc_hash_bytes(PTC_HASH_INIT, s, strlen(s)); }

static void index_insert(ptc_graph *g, ptc_value *v)
{
    if ((g->nvalues + 1) * 2 > g->name_slots) {
        int slots = g->name_slots ? g->name_slots * 2 : 64;
        ptc_value **idx = PTC_NEWN(g->arena, ptc_value *, slots);
        for (int i = 0; i < g->name_slots; i++) {
            ptc_value *w = g->name_index[i];
            if (!w)
                continue;
            uint64_t h = name_hash(w->name) & (uint64_t)(slots - 1);
            while (idx[h])
                h = (h + 1) & (uint64_t)(slots - 1);
            idx[h] = w;
        }
        g->name_index = idx;
        g->name_slots = slots;
    }
    uint64_t h = name_hash(v->name) & (uint64_t)(g->name_slots - 1);
    while (g->name_index[h])
        h = (h + 1) & (uint64_t)(g->name_slots - 1);
    g->name_index[h] = v;
}

ptc_value *ptc_graph_find_value(const ptc_graph *g, const char *name)
{
    if (!g->name_slots)
        return NULL;
    uint64_t h = name_hash(name) & (uint64_t)(g->name_slots - 1);
    while (g->name_index[h]) {
        if (strcmp(g->name_index[h]->name, name) == 0)
            return g->name_index[h];
        h = (h + 1) & (uint64_t)(g->name_slots - 1);
    }
    return NULL;
}

ptc_node *ptc_graph_find_node(const ptc_graph *g, int id)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->id == id)
            return g->nodes[i];
    return NULL;
}

/* Numeric names advance the auto-naming counter so "%N" never collides. */
static void note_name(ptc_graph *g, const char *name)
{
    char *end;
    long v = strtol(name, &end, 10);
    if (*name && !*end && v >= g->next_value_name && v < 1000000000)
        g->next_value_name = (int)v + 1;
}

static ptc_value *new_value(ptc_graph *g, const char *name, const ptc_ttype *t)
{
    ptc_value *v = PTC_NEW(g->arena, ptc_value);
    v->id = g->nvalues;
    if (name) {
        v->name = ptc_arena_strdup(g->arena, name);
    } else {
        do
            v->name = ptc_arena_printf(g->arena, "%d", g->next_value_name++);
        while (ptc_graph_find_value(g, v->name));
    }
    note_name(g, v->name);
    v->type = *t;
    for (int i = 0; i < t->ndim; i++) {
        v->type.shape[i] = ptc_dim_copy(g->arena, t->shape[i]);
        if (t->layout == PTC_LAYOUT_STRIDED)
            v->type.strides[i] = ptc_dim_copy(g->arena, t->strides[i]);
    }
    v->input_index = -1;
    g->values = grow(g->arena, g->values, g->nvalues, &g->cap_values, sizeof(ptc_value *));
    index_insert(g, v);
    g->values[g->nvalues++] = v;
    return v;
}

ptc_value *ptc_graph_add_input(ptc_graph *g, const char *name, const ptc_ttype *t)
{
    ptc_value *v = new_value(g, name, t);
    v->input_index = g->ninputs;
    g->inputs = grow(g->arena, g->inputs, g->ninputs, &g->cap_inputs, sizeof(ptc_value *));
    g->inputs[g->ninputs++] = v;
    return v;
}

/* Deep-copies an arg into g's arena (value pointers kept or remapped). */
static ptc_arg copy_arg(ptc_arena *a, const ptc_arg *x, ptc_value *const *map)
{
    ptc_arg r = *x;
    switch ((ptc_argkind)x->kind) {
    case PTC_ARG_VALUE:
        if (map)
            r.v = map[x->v->id];
        break;
    case PTC_ARG_VALUES:
        r.vs.v = PTC_NEWN(a, ptc_value *, x->vs.n);
        for (int i = 0; i < x->vs.n; i++)
            r.vs.v[i] = (map && x->vs.v[i]) ? map[x->vs.v[i]->id] : x->vs.v[i];
        break;
    case PTC_ARG_INT: r.i = ptc_dim_copy(a, x->i); break;
    case PTC_ARG_INTS:
        r.is.d = PTC_NEWN(a, ptc_dim, x->is.n);
        for (int i = 0; i < x->is.n; i++)
            r.is.d[i] = ptc_dim_copy(a, x->is.d[i]);
        break;
    case PTC_ARG_STR: r.s = ptc_arena_strdup(a, x->s); break;
    default: break;
    }
    return r;
}

ptc_node *ptc_graph_add_node(ptc_graph *g, ptc_op op, const ptc_arg *args, int nargs, int nout,
                             const ptc_ttype *out_types, const char *const *out_names)
{
    PTC_ASSERT((unsigned)op < PTC_OP_COUNT && nout >= 0);
    ptc_node *n = PTC_NEW(g->arena, ptc_node);
    n->id = g->next_node_id++;
    n->op = op;
    n->nargs = nargs;
    n->args = PTC_NEWN(g->arena, ptc_arg, nargs > 0 ? nargs : 1);
    for (int i = 0; i < nargs; i++)
        n->args[i] = copy_arg(g->arena, &args[i], NULL);
    n->nout = nout;
    n->outs = PTC_NEWN(g->arena, ptc_value *, nout > 0 ? nout : 1);
    for (int i = 0; i < nout; i++) {
        ptc_value *v = new_value(g, out_names ? out_names[i] : NULL, &out_types[i]);
        v->def = n;
        v->def_index = i;
        n->outs[i] = v;
    }
    g->nodes = grow(g->arena, g->nodes, g->nnodes, &g->cap_nodes, sizeof(ptc_node *));
    g->nodes[g->nnodes++] = n;
    return n;
}

void ptc_graph_set_outputs(ptc_graph *g, ptc_value *const *outs, int n)
{
    /* n may be 0 (a graph returning nothing) with outs NULL. */
    g->outputs = PTC_NEWN(g->arena, ptc_value *, n > 0 ? n : 1);
    if (n > 0)
        memcpy(g->outputs, outs, sizeof(ptc_value *) * (size_t)n);
    g->noutputs = n;
}

void ptc_graph_remove_nodes(ptc_graph *g, const bool *keep)
{
    int k = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (keep[g->nodes[i]->id])
            g->nodes[k++] = g->nodes[i];
    g->nnodes = k;
    /* Values of removed nodes stay in `values` (ids are dense and stable) but
     * are no longer findable by name. */
    int slots = 64;
    while (slots < 2 * (g->nvalues + 1))
        slots *= 2;
    g->name_index = PTC_NEWN(g->arena, ptc_value *, slots);
    g->name_slots = slots;
    for (int i = 0; i < g->nvalues; i++) {
        ptc_value *v = g->values[i];
        if (v->def && !keep[v->def->id])
            continue;
        uint64_t h = name_hash(v->name) & (uint64_t)(slots - 1);
        while (g->name_index[h])
            h = (h + 1) & (uint64_t)(slots - 1);
        g->name_index[h] = v;
    }
}

void ptc_graph_use_counts(const ptc_graph *g, int *counts)
{
    memset(counts, 0, sizeof(int) * (size_t)g->nvalues);
    for (int i = 0; i < g->nnodes; i++) {
        const ptc_node *n = g->nodes[i];
        for (int j = 0; j < n->nargs; j++)
            for (int k = 0; k < ptc_arg_nvalues(&n->args[j]); k++) {
                const ptc_value *v = ptc_arg_value_at(&n->args[j], k);
                if (v)
                    counts[v->id]++;
            }
    }
    for (int i = 0; i < g->noutputs; i++)
        counts[g->outputs[i]->id]++;
}

ptc_node *ptc_graph_copy_node(ptc_graph *dst, const ptc_node *n, ptc_value **map)
{
    ptc_ttype types[1];
    ptc_ttype *tys = n->nout <= 1 ? types : malloc(sizeof(ptc_ttype) * (size_t)n->nout);
    const char **names = malloc(sizeof(char *) * (size_t)(n->nout + 1));
    PTC_ASSERT(tys && names);
    for (int j = 0; j < n->nout; j++) {
        tys[j] = n->outs[j]->type;
        names[j] = n->outs[j]->name;
    }
    ptc_arg *args = PTC_NEWN(dst->arena, ptc_arg, n->nargs > 0 ? n->nargs : 1);
    for (int j = 0; j < n->nargs; j++)
        args[j] = copy_arg(dst->arena, &n->args[j], map);
    ptc_node *m = ptc_graph_add_node(dst, n->op, args, n->nargs, n->nout, tys, names);
    m->id = n->id;
    if (dst->next_node_id <= n->id)
        dst->next_node_id = n->id + 1;
    m->loc.file = ptc_arena_strdup(dst->arena, n->loc.file);
    m->loc.line = n->loc.line;
    m->loc.col = n->loc.col;
    m->loc.text = ptc_arena_strdup(dst->arena, n->loc.text);
    m->module_path = ptc_arena_strdup(dst->arena, n->module_path);
    m->nprov = n->nprov;
    m->prov = PTC_NEWN(dst->arena, const char *, n->nprov > 0 ? n->nprov : 1);
    for (int j = 0; j < n->nprov; j++)
        m->prov[j] = ptc_arena_strdup(dst->arena, n->prov[j]);
    for (int j = 0; j < n->nout; j++)
        map[n->outs[j]->id] = m->outs[j];
    if (tys != types)
        free(tys);
    free(names);
    return m;
}

ptc_graph *ptc_graph_clone(const ptc_graph *g, ptc_value **map_out)
{
    ptc_graph *c = ptc_graph_new(NULL, g->name);
    ptc_value **map = calloc((size_t)g->nvalues + 1, sizeof *map);
    PTC_ASSERT(map);
    for (int i = 0; i < g->ninputs; i++)
        map[g->inputs[i]->id] = ptc_graph_add_input(c, g->inputs[i]->name, &g->inputs[i]->type);
    for (int i = 0; i < g->nnodes; i++)
        ptc_graph_copy_node(c, g->nodes[i], map);
    c->next_node_id = g->next_node_id;
    ptc_value **outs = malloc(sizeof(ptc_value *) * (size_t)(g->noutputs + 1));
    PTC_ASSERT(outs);
    for (int i = 0; i < g->noutputs; i++)
        outs[i] = map[g->outputs[i]->id];
    ptc_graph_set_outputs(c, outs, g->noutputs);
    free(outs);
    if (map_out)
        memcpy(map_out, map, sizeof *map * (size_t)g->nvalues);
    free(map);
    return c;
}
