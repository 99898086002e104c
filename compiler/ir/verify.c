/* The structural verifier: everything about a graph that can be checked
 * without knowing what ops compute. Run between passes and after parsing.
 * Messages name the node ("%3 = add(...)") and set err->node_id.
 */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static int node_fail(ptc_error *err, const ptc_node *n,
                                                           const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if ((unsigned)n->op < PTC_OP_COUNT) {
        ptc_buf b = {0};
        ptc_print_node(&b, n);
        if (b.len > 200)
            b.data[200] = 0;
        ptc_errorf(err, PTC_ERR_VERIFY, "verify", "%s: in '%s'", msg, b.data);
        ptc_buf_free(&b);
    } else { /* nothing to print: the node is not even an op */
        ptc_errorf(err, PTC_ERR_VERIFY, "verify", "%s: in node %d", msg, n->id);
    }
    if (err) {
        err->has_node = true;
        err->node_id = n->id;
    }
    return -1;
}

static bool name_ok(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '.'))
            return false;
    return true;
}

typedef struct vstate {
    const ptc_graph *g;
    int stage;
    unsigned char *defined; /* by value id */
    const char *bound[64];  /* symbols bound by inputs */
    int nbound;
} vstate;

static bool symbol_bound(const vstate *s, const char *name)
{
    for (int i = 0; i < s->nbound; i++)
        if (strcmp(s->bound[i], name) == 0)
            return true;
    return false;
}

/* Symbols are bound by inputs' dims that determine them (s0, 4*s2), and by
 * a dim whose other symbols are bound (s5 + s4 - 2 once an input binds s4),
 * in passes while one binds more, as the runtime binds them. */
static int bind_symbols(vstate *s, ptc_error *err)
{
    ptc_bindings known = {0};
    int before;
    do {
        before = s->nbound;
        for (int i = 0; i < s->g->ninputs; i++) {
            const ptc_value *v = s->g->inputs[i];
            for (int d = 0; v && d < v->type.ndim; d++) {
                const char *name;
                if (!ptc_dim_binds_given(v->type.shape[d], &known, &name, 0, NULL) ||
                    symbol_bound(s, name))
                    continue;
                if (s->nbound >= 32)
                    return ptc_errorf(err, PTC_ERR_VERIFY, "verify", "more than 32 symbols");
                s->bound[s->nbound++] = name;
                ptc_bindings_set(&known, name, 1 << 16); /* any size: terms over it evaluate */
            }
        }
    } while (s->nbound > before);
    return 0;
}

/* Checks a type: rank, dtype, non-negative static sizes, bound symbols. */
static int check_type(const vstate *s, const ptc_ttype *t, char *why, size_t size)
{
    if (t->ndim < 0 || t->ndim > PTC_MAX_DIMS) {
        snprintf(why, size, "rank %d out of range", t->ndim);
        return -1;
    }
    if ((unsigned)t->dtype >= PTC_DTYPE_COUNT) {
        snprintf(why, size, "bad dtype");
        return -1;
    }
    for (int i = 0; i < t->ndim; i++) {
        ptc_dim d = t->shape[i];
        if (!d.sym && d.value < 0) {
            snprintf(why, size, "negative size %lld in dim %d", (long long)d.value, i);
            return -1;
        }
        const char *names[16];
        int n = ptc_dim_symbols(d, names, 0, 16);
        if (t->layout == PTC_LAYOUT_STRIDED)
            n = ptc_dim_symbols(t->strides[i], names, n, 16);
        for (int k = 0; k < n; k++)
            if (!symbol_bound(s, names[k])) {
                snprintf(why, size, "symbol '%s' is not a dim of any graph input", names[k]);
                return -1;
            }
    }
    return 0;
}

static bool value_ok(const vstate *s, const ptc_value *v)
{
    return v && v->id >= 0 && v->id < s->g->nvalues && s->g->values[v->id] == v && s->defined[v->id];
}

static int check_node(vstate *s, const ptc_node *n, ptc_error *err)
{
    if ((unsigned)n->op >= PTC_OP_COUNT)
        return node_fail(err, n, "unknown op %d", (int)n->op);
    const ptc_schema *sc = ptc_op_schema(n->op);
    if (s->stage && !(sc->stage & s->stage))
        return node_fail(err, n, "op %s does not belong in the %s stage", sc->name,
                         s->stage == PTC_STAGE_PRIM ? "prims" : "captured");
    ptc_error aerr;
    if (ptc_args_check(n->op, n->args, n->nargs, &aerr))
        return node_fail(err, n, "%s", aerr.msg);
    for (int i = 0; i < n->nargs; i++) {
        const ptc_arg *a = &n->args[i];
        if (a->kind == PTC_ARG_VALUE && !value_ok(s, a->v))
            return node_fail(err, n, "argument '%s' uses a value not defined before it",
                             sc->params[i].name);
        if (a->kind == PTC_ARG_VALUES)
            for (int j = 0; j < a->vs.n; j++)
                if (a->vs.v[j] && !value_ok(s, a->vs.v[j]))
                    return node_fail(err, n, "argument '%s'[%d] uses a value not defined before it",
                                     sc->params[i].name, j);
        const char *names[16];
        int k = 0;
        if (a->kind == PTC_ARG_INT)
            k = ptc_dim_symbols(a->i, names, 0, 16);
        if (a->kind == PTC_ARG_INTS)
            for (int j = 0; j < a->is.n; j++)
                k = ptc_dim_symbols(a->is.d[j], names, k, 16);
        for (int j = 0; j < k; j++)
            if (!symbol_bound(s, names[j]))
                return node_fail(err, n, "argument '%s' uses symbol '%s' that no input binds",
                                 sc->params[i].name, names[j]);
    }
    if (n->nout < 1)
        return node_fail(err, n, "a node must produce at least one value");
    if (sc->nreturns >= 0 && n->nout != sc->nreturns)
        return node_fail(err, n, "%s returns %d values, node has %d", sc->name, sc->nreturns,
                         n->nout);
    for (int i = 0; i < n->nout; i++) {
        const ptc_value *v = n->outs[i];
        if (!v || v->def != n || v->def_index != i || v->id >= s->g->nvalues || s->g->values[v->id] != v)
            return node_fail(err, n, "output %d is not linked to its node", i);
        if (s->defined[v->id])
            return node_fail(err, n, "value %%%s is defined twice", v->name);
        if (!name_ok(v->name))
            return node_fail(err, n, "bad value name '%s' (use letters, digits, '_' and '.')",
                             v->name);
        char why[200];
        if (check_type(s, &v->type, why, sizeof why))
            return node_fail(err, n, "result %%%s: %s", v->name, why);
        s->defined[v->id] = 1;
    }
    return 0;
}

int ptc_ir_verify(const ptc_graph *g, int stage, ptc_error *err)
{
    vstate s = {g, stage, calloc((size_t)g->nvalues + 1, 1), {0}, 0};
    unsigned char *seen_ids = NULL;
    int rc = -1;
    PTC_ASSERT(s.defined);
    if (!name_ok(g->name)) {
        ptc_errorf(err, PTC_ERR_VERIFY, "verify", "bad graph name '%s'", g->name ? g->name : "");
        goto done;
    }
    if (bind_symbols(&s, err))
        goto done;
    for (int i = 0; i < g->ninputs; i++) {
        const ptc_value *v = g->inputs[i];
        char why[200];
        if (!v || v->id >= g->nvalues || g->values[v->id] != v || v->def || v->input_index != i) {
            ptc_errorf(err, PTC_ERR_VERIFY, "verify", "input %d is not linked to the graph", i);
            goto done;
        }
        if (!name_ok(v->name)) {
            ptc_errorf(err, PTC_ERR_VERIFY, "verify", "bad input name '%s'", v->name);
            goto done;
        }
        if (s.defined[v->id]) {
            ptc_errorf(err, PTC_ERR_VERIFY, "verify", "input %%%s is declared twice", v->name);
            goto done;
        }
        if (check_type(&s, &v->type, why, sizeof why)) {
            ptc_errorf(err, PTC_ERR_VERIFY, "verify", "input %%%s: %s", v->name, why);
            goto done;
        }
        s.defined[v->id] = 1;
    }
    seen_ids = calloc((size_t)g->next_node_id + 1, 1);
    PTC_ASSERT(seen_ids);
    for (int i = 0; i < g->nnodes; i++) {
        const ptc_node *n = g->nodes[i];
        if (n->id < 0 || n->id >= g->next_node_id || seen_ids[n->id]) {
            node_fail(err, n, "node id %d is out of range or not unique", n->id);
            goto done;
        }
        seen_ids[n->id] = 1;
        if (check_node(&s, n, err))
            goto done;
    }
    /* Names unique: the index finds the first value of a name. */
    for (int i = 0; i < g->nvalues; i++) {
        const ptc_value *v = g->values[i];
        if (s.defined[v->id] && ptc_graph_find_value(g, v->name) != v) {
            ptc_errorf(err, PTC_ERR_VERIFY, "verify", "value name %%%s is used twice", v->name);
            goto done;
        }
    }
    for (int i = 0; i < g->noutputs; i++)
        if (!value_ok(&s, g->outputs[i])) {
            ptc_errorf(err, PTC_ERR_VERIFY, "verify", "returned value %d is not defined", i);
            goto done;
        }
    rc = 0;
done:
    free(s.defined);
    free(seen_ids);
    return rc;
}
