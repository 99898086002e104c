/* The eager backend: a captured graph replayed op by op through torch's own
 * functions. The schemas are PyTorch's, so arguments pass through in schema
 * order; each op runs under the grad mode it was traced in, so autograd
 * works. Every other backend keeps these steps: they are what it falls back
 * to. Outputs that eager returns as views (of an input or another output)
 * are remade after any backend's run by replaying their view ops from the
 * base, so that they share its storage.
 */
#include "capture/backend/backend.h"

#include <stdlib.h>
#include <string.h>

/* A step's argument: a constant, a value, a list of values, or sizes that
 * are symbolic (evaluated per run from the inputs' sizes). */
enum { EA_CONST, EA_VALUE, EA_VALUES, EA_SIZES };
typedef struct earg {
    uint8_t kind;
    PyObject *obj;   /* EA_CONST */
    const ptc_arg *arg; /* EA_SIZES: the graph's (it outlives the steps) */
    int id;          /* EA_VALUE */
    int n, *ids;     /* EA_VALUES (-1 entries are None) */
} earg;

typedef struct estep {
    PyObject *fn;
    bool method;       /* fn is a Tensor method name, called on the first arg */
    int npos, nkw;
    earg *pos, *kw;
    PyObject *kwnames; /* tuple */
    int nout, *outs;
    bool wrap_list;    /* the torch call returns one tensor for a Tensor[] op */
    bool grad;
    int *release;      /* value ids whose last use is this step */
    int nrelease;
} estep;

struct cap_eager {
    int nsteps;
    estep *steps;
    int nvalues;
    int naliases;                /* outputs that are views of an input or another output */
    struct alias_out *aliases;
};

/* An output that eager returns as a view: it is remade after the graph from
 * its base (an input, or an output no view op made) by replaying the view
 * ops in between through torch, so that it shares the base's storage. */
typedef struct alias_out {
    int out;     /* output index */
    int base;    /* input index, or -1 - output index */
    int base_id; /* the base's value id */
    int nsteps;
    estep *steps; /* the view ops, base first */
} alias_out;

static void free_steps(estep *steps, int n);

static bool static_arg(const ptc_arg *a)
{
    if (a->kind == PTC_ARG_INT)
        return !a->i.sym;
    for (int i = 0; a->kind == PTC_ARG_INTS && i < a->is.n; i++)
        if (a->is.d[i].sym)
            return false;
    return true;
}

static int set_earg(earg *e, const ptc_arg *a)
{
    memset(e, 0, sizeof *e);
    if (a->kind == PTC_ARG_VALUE) {
        e->kind = EA_VALUE;
        e->id = a->v->id;
    } else if (a->kind == PTC_ARG_VALUES) {
        e->kind = EA_VALUES;
        e->n = a->vs.n;
        e->ids = malloc(sizeof(int) * (size_t)(a->vs.n + 1));
        for (int i = 0; i < a->vs.n; i++)
            e->ids[i] = a->vs.v[i] ? a->vs.v[i]->id : -1;
    } else if (!static_arg(a)) {
        e->kind = EA_SIZES;
        e->arg = a;
    } else {
        e->kind = EA_CONST;
        if (!(e->obj = cap_arg_obj(a, NULL)))
            return -1;
    }
    return 0;
}

/* The torch function that runs op (ops.def's eager column), or with
 * *method the name of the Tensor method; NULL: torch.<schema name>. */
static const char *eager_fn(ptc_op op, bool *method)
{
    static const char *const paths[PTC_OP_COUNT] = {
#define OP(id, stage, schema, meta, ref, flags, ...) "" __VA_ARGS__,
#include "ir/ops.def"
#undef OP
    };
    const char *path = paths[op];
    *method = strncmp(path, "Tensor.", 7) == 0;
    if (*method)
        return path + 7;
    return *path ? path : NULL;
}

/* The torch function (or method name) that runs node n. */
static int step_function(const ptc_node *n, estep *s)
{
    const ptc_schema *sch = ptc_op_schema(n->op);
    char path[128];
    const char *fn = eager_fn(n->op, &s->method);
    if (s->method) {
        s->fn = PyUnicode_FromString(fn);
    } else {
        if (!fn) {
            snprintf(path, sizeof path, "torch.%s", sch->name);
            fn = path;
        }
        s->fn = cap_import_path(fn);
    }
    if (!s->fn) {
        PyErr_Format(cap_InternalError, "ptc: no torch function for op %s", sch->name);
        return -1;
    }
    return 0;
}

/* Node n's arguments, positional or by keyword as torch takes them;
 * *trailing_default counts the positional ones at the end that equal their
 * default. */
static int step_args(const ptc_node *n, estep *s, PyObject *kwn, int *trailing_default)
{
    const ptc_schema *sch = ptc_op_schema(n->op);
    bool kwonly_for_all = n->op == PTC_OP_FULL || n->op == PTC_OP_ZEROS || n->op == PTC_OP_ONES ||
                          n->op == PTC_OP_EMPTY || n->op == PTC_OP_RAND || n->op == PTC_OP_RANDN ||
                          n->op == PTC_OP_ARANGE;
    for (int i = 0; i < sch->nparams; i++) {
        const ptc_param *p = &sch->params[i];
        const ptc_arg *a = &n->args[i];
        if (strcmp(p->name, "seed") == 0)
            continue;
        bool kw = p->kwarg_only;
        if (n->op == PTC_OP_TO && i > 0)
            kw = true; /* self.to(dtype=, device=) */
        if (kwonly_for_all && (p->kind == PTC_PK_DTYPE_OPT || p->kind == PTC_PK_DEVICE_OPT))
            kw = true;
        if (kw && p->has_default && ptc_arg_eq(a, &p->def))
            continue;
        if (!kw)
            *trailing_default =
                p->has_default && ptc_arg_eq(a, &p->def) ? *trailing_default + 1 : 0;
        earg *e = kw ? &s->kw[s->nkw++] : &s->pos[s->npos++];
        if (set_earg(e, a) < 0)
            return -1;
        if (kw) {
            PyObject *nm = PyUnicode_FromString(p->name);
            PyList_Append(kwn, nm);
            Py_XDECREF(nm);
        }
    }
    return 0;
}

/* torch.squeeze(x, None) is not accepted, nor a list of dims before torch
 * 2.0: the output shape is known, so a reshape does it. */
static void squeeze_as_reshape(const ptc_node *n, estep *s, int trailing_default)
{
    for (; trailing_default > 0; trailing_default--) {
        s->npos--;
        Py_CLEAR(s->pos[s->npos].obj);
    }
    const ptc_ttype *ot = &n->outs[0]->type;
    bool fixed = true;
    for (int d = 0; d < ot->ndim; d++)
        fixed = fixed && !ot->shape[d].sym;
    if (fixed && s->npos == 2) {
        PyObject *shape = PyTuple_New(ot->ndim);
        for (int d = 0; shape && d < ot->ndim; d++)
            PyTuple_SetItem(shape, d, PyLong_FromLongLong(ot->shape[d].value));
        Py_SETREF(s->pos[1].obj, shape);
        Py_SETREF(s->fn, cap_import_path("torch.reshape"));
    }
}

/* Where the call torch takes differs from the node's signature (older
 * torch versions, ops ptc models differently). */
static void adapt_to_torch(const ptc_node *n, estep *s, PyObject *kwn, int trailing_default)
{
    if (n->op == PTC_OP_SQUEEZE)
        squeeze_as_reshape(n, s, trailing_default);
    if ((n->op == PTC_OP_ANY || n->op == PTC_OP_ALL || n->op == PTC_OP_PROD) && s->npos >= 2 &&
        n->args[1].kind == PTC_ARG_INTS && n->args[1].is.n == 1 && !n->args[1].is.d[0].sym) {
        /* One dim as an int: torch before 2.2 takes no list here. */
        Py_SETREF(s->pos[1].obj, PyLong_FromLongLong(n->args[1].is.d[0].value));
    }
    if ((n->op == PTC_OP_SUM || n->op == PTC_OP_MEAN || n->op == PTC_OP_PROD || n->op == PTC_OP_ANY ||
         n->op == PTC_OP_ALL) &&
        n->args[1].kind == PTC_ARG_NONE) {
        /* torch.prod(x, None) is not accepted: drop dim and keepdim (the
           positional params after self). */
        for (int i = 1; i < s->npos; i++)
            Py_CLEAR(s->pos[i].obj);
        s->npos = 1;
    }
    if (n->op == PTC_OP_TO && n->args[1].kind == PTC_ARG_NONE && n->args[2].kind == PTC_ARG_NONE) {
        /* to() with nothing to change: detach (see the capture of detach). */
        Py_SETREF(s->fn, PyUnicode_FromString("detach"));
        s->method = true;
        s->nkw = 0;
        PyList_SetSlice(kwn, 0, PyList_Size(kwn), NULL);
    } else if (n->op == PTC_OP_TO) {
        Py_SETREF(s->fn, PyUnicode_FromString("to"));
        s->method = true;
    }
    if (n->op == PTC_OP_BATCH_NORM) {
        /* torch.batch_norm(..., cudnn_enabled) returns the output alone and
           updates the running statistics in place; the node returns the
           updated ones (written back after the graph, capture's rule for
           every in-place write of an input), so they are updated in copies. */
        bool update = n->nout == 3;
        Py_SETREF(s->fn,
                  cap_import_path(update ? "ptc._eager.batch_norm_update" : "torch.batch_norm"));
        s->pos[s->npos].kind = EA_CONST;
        s->pos[s->npos++].obj = Py_NewRef(Py_True);
        s->wrap_list = !update;
    }
}

/* One node as a torch call. */
static int eager_step(const ptc_node *n, bool grad, estep *s)
{
    if (step_function(n, s) < 0)
        return -1;
    const ptc_schema *sch = ptc_op_schema(n->op);
    s->grad = grad;
    s->pos = calloc((size_t)sch->nparams + 1, sizeof *s->pos);
    s->kw = calloc((size_t)sch->nparams + 1, sizeof *s->kw);
    PyObject *kwn = PyList_New(0);
    int trailing_default = 0;
    if (!kwn || step_args(n, s, kwn, &trailing_default) < 0) {
        Py_XDECREF(kwn);
        return -1;
    }
    adapt_to_torch(n, s, kwn, trailing_default);
    s->kwnames = PyList_AsTuple(kwn);
    Py_DECREF(kwn);
    s->nout = n->nout;
    s->outs = malloc(sizeof(int) * (size_t)(n->nout + 1));
    for (int i = 0; i < n->nout; i++)
        s->outs[i] = n->outs[i]->id;
    return s->kwnames ? 0 : -1;
}

void cap_eager_free(cap_eager *st)
{
    if (!st)
        return;
    free_steps(st->steps, st->nsteps);
    cap_eager_drop_aliases(st);
    free(st);
}

int cap_eager_prepare(const ptc_graph *g, const uint8_t *node_grad, cap_eager **out)
{
    cap_eager *st = *out = calloc(1, sizeof **out);
    if (!st) {
        PyErr_NoMemory();
        return -1;
    }
    st->nvalues = g->nvalues;
    st->steps = calloc((size_t)g->nnodes + 1, sizeof *st->steps);
    int *last = malloc(sizeof(int) * (size_t)(g->nvalues + 1));
    for (int i = 0; i < g->nvalues; i++)
        last[i] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const ptc_node *n = g->nodes[i];
        for (int a = 0; a < n->nargs; a++) {
            if (n->args[a].kind == PTC_ARG_VALUE)
                last[n->args[a].v->id] = i;
            if (n->args[a].kind == PTC_ARG_VALUES)
                for (int k = 0; k < n->args[a].vs.n; k++)
                    if (n->args[a].vs.v[k])
                        last[n->args[a].vs.v[k]->id] = i;
        }
    }
    for (int i = 0; i < g->noutputs; i++)
        last[g->outputs[i]->id] = g->nnodes; /* kept to the end */
    for (int i = 0; i < g->nnodes; i++) {
        const ptc_node *n = g->nodes[i];
        bool grad = node_grad ? node_grad[n->id] : true;
        st->nsteps = i + 1;
        if (eager_step(n, grad, &st->steps[i]) < 0) {
            free(last);
            return -1;
        }
    }
    for (int v = 0; v < g->nvalues; v++) {
        if (last[v] < 0 || last[v] >= g->nnodes)
            continue;
        estep *s = &st->steps[last[v]];
        s->release = realloc(s->release, sizeof(int) * (size_t)(s->nrelease + 1));
        s->release[s->nrelease++] = v;
    }
    free(last);
    return 0;
}

static PyObject *earg_obj(const earg *a, PyObject **env, const ptc_bindings *b)
{
    if (a->kind == EA_CONST)
        return Py_NewRef(a->obj);
    if (a->kind == EA_SIZES)
        return cap_arg_obj(a->arg, b);
    if (a->kind == EA_VALUE)
        return Py_XNewRef(env[a->id]);
    PyObject *l = PyList_New(a->n);
    for (int i = 0; l && i < a->n; i++)
        PyList_SetItem(l, i, Py_XNewRef(a->ids[i] >= 0 ? env[a->ids[i]] : Py_None));
    return l;
}

/* Calls step i on env (value id -> torch object) and stores its results. */
/* Step s's (node i's) positional and keyword arguments from env; *args is
 * NULL where the tuple could not be made. */
static int step_call_args(const estep *s, int i, PyObject **env, const ptc_bindings *b,
                          PyObject **args_out, PyObject **kw_out)
{
    PyObject *args = PyTuple_New(s->npos), *kw = s->nkw ? PyDict_New() : NULL;
    for (int k = 0; args && k < s->npos; k++) {
        PyObject *a = earg_obj(&s->pos[k], env, b);
        if (!a) {
            if (!PyErr_Occurred())
                PyErr_Format(cap_InternalError, "ptc: eager backend: node %d (%s) lost an argument",
                             i, PyUnicode_Check(s->fn) ? PyUnicode_AsUTF8(s->fn) : "?");
            Py_DECREF(args);
            Py_XDECREF(kw);
            return -1;
        }
        PyTuple_SetItem(args, k, a);
    }
    for (int k = 0; kw && k < s->nkw; k++) {
        PyObject *v = earg_obj(&s->kw[k], env, b);
        if (!v) {
            Py_XDECREF(args);
            Py_DECREF(kw);
            return -1;
        }
        PyDict_SetItem(kw, PyTuple_GetItem(s->kwnames, k), v);
        Py_DECREF(v);
    }
    *args_out = args;
    *kw_out = kw;
    return 0;
}

/* The torch call's result r (stolen) into env at s's output values; the
 * values s used last are released. */
static void store_results(const estep *s, PyObject *r, PyObject **env)
{
    if (s->nout == 1 && !s->wrap_list) {
        if (PyTuple_Check(r) || PyList_Check(r)) {
            PyObject *x = PySequence_GetItem(r, 0);
            Py_SETREF(r, x);
        }
        Py_XSETREF(env[s->outs[0]], r);
    } else if (s->wrap_list) {
        Py_XSETREF(env[s->outs[0]], r);
    } else {
        for (int k = 0; k < s->nout; k++)
            Py_XSETREF(env[s->outs[k]], PySequence_GetItem(r, k));
        Py_DECREF(r);
    }
    for (int k = 0; k < s->nrelease; k++)
        Py_CLEAR(env[s->release[k]]);
}

static int call_step(const estep *s, int i, PyObject **env, const ptc_bindings *b)
{
    PyObject *args, *kw, *r = NULL;
    if (step_call_args(s, i, env, b, &args, &kw) < 0)
        return -1;
    if (args && s->method) {
        PyObject *self = PyTuple_GetItem(args, 0);
        PyObject *m = PyObject_GetAttr(self, s->fn);
        PyObject *rest = PyTuple_GetSlice(args, 1, s->npos);
        r = m && rest ? PyObject_Call(m, rest, kw) : NULL;
        Py_XDECREF(m);
        Py_XDECREF(rest);
    } else if (args) {
        r = PyObject_Call(s->fn, args, kw);
    }
    Py_XDECREF(args);
    Py_XDECREF(kw);
    if (!r)
        return -1;
    store_results(s, r, env);
    return 0;
}

/* Runs steps in order, each under the grad mode it was traced in; the
 * caller's mode comes back after. */
static int run_steps(const estep *steps, int nsteps, PyObject **env, const ptc_bindings *b)
{
    PyObject *g0 = PyObject_CallNoArgs(cap_T.is_grad_enabled);
    bool grad_now = g0 == Py_True, grad_start = grad_now;
    Py_XDECREF(g0);
    int rc = 0;
    for (int i = 0; i < nsteps && rc == 0; i++) {
        if (steps[i].grad != grad_now) {
            if (cap_set_grad_enabled(steps[i].grad) < 0) {
                rc = -1;
                break;
            }
            grad_now = steps[i].grad;
        }
        rc = call_step(&steps[i], i, env, b);
    }
    if (grad_now != grad_start) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        if (cap_set_grad_enabled(grad_start) < 0) {
            rc = -1;
            Py_XDECREF(t);
            Py_XDECREF(v);
            Py_XDECREF(tb);
        } else {
            PyErr_Restore(t, v, tb);
        }
    }
    return rc;
}

/* The symbols of g's input types bound to the inputs' sizes (a dimension
 * that is one symbol binds it). */
static int bind_inputs(const ptc_graph *g, PyObject **inputs, ptc_bindings *b)
{
    b->n = 0;
    for (int i = 0; i < g->ninputs; i++) {
        const ptc_ttype *t = &g->inputs[i]->type;
        PyObject *shape = NULL;
        for (int d = 0; d < t->ndim; d++) {
            const char *name[2];
            int64_t have;
            if (!t->shape[d].sym || ptc_dim_symbols(t->shape[d], name, 0, 2) != 1 ||
                ptc_bindings_get(b, name[0], &have))
                continue;
            if (!shape && !(shape = PyObject_GetAttr(inputs[i], cap_T.s_shape)))
                return -1;
            PyObject *n = PySequence_GetItem(shape, d);
            int64_t v = n ? PyLong_AsLongLong(n) : -1;
            Py_XDECREF(n);
            if (v < 0 || ptc_bindings_set(b, name[0], v) < 0) {
                Py_DECREF(shape);
                PyErr_Format(cap_InternalError, "ptc: cannot bind size %s of input %d", name[0], i);
                return -1;
            }
        }
        Py_XDECREF(shape);
    }
    return 0;
}

int cap_eager_run(const ptc_graph *g, const cap_eager *st, PyObject **inputs, PyObject **outputs)
{
    PyObject **env = calloc((size_t)st->nvalues + 1, sizeof *env);
    int rc = -1;
    for (int i = 0; i < g->ninputs; i++)
        env[g->inputs[i]->id] = Py_NewRef(inputs[i]);
    ptc_bindings b;
    if (bind_inputs(g, inputs, &b) < 0 || run_steps(st->steps, st->nsteps, env, &b) < 0)
        goto done;
    for (int i = 0; i < g->noutputs; i++) {
        outputs[i] = Py_XNewRef(env[g->outputs[i]->id]);
        if (!outputs[i]) {
            PyErr_SetString(cap_InternalError, "ptc: eager backend lost an output");
            goto done;
        }
    }
    rc = 0;
done:
    for (int i = 0; i < st->nvalues; i++)
        Py_XDECREF(env[i]);
    free(env);
    if (rc < 0)
        for (int i = 0; i < g->noutputs; i++)
            Py_CLEAR(outputs[i]);
    return rc;
}

bool cap_eager_whole(const cap_eager *st, const ptc_graph *g)
{
    int nsteps = st ? st->nsteps : 0;
    for (int i = 0; i < nsteps; i++)
        if (!st->steps[i].fn)
            return false;
    return nsteps == g->nnodes;
}

/* ---- outputs that alias ------------------------------------------------------------ */

/* The node that made v as a view of its first argument in torch, or NULL.
 * to() that changes nothing returns its argument itself; to() with no
 * arguments is detach (adapt_to_torch), which shares its storage. A view's
 * symbolic size arguments are evaluated per call from the inputs' sizes. */
static const ptc_node *view_node(const ptc_value *v)
{
    const ptc_node *n = v->def;
    if (!n || n->nargs < 1 || n->args[0].kind != PTC_ARG_VALUE)
        return NULL;
    const ptc_ttype *from = &n->args[0].v->type;
    bool same_to = n->op == PTC_OP_TO && from->dtype == v->type.dtype &&
                   ptc_device_eq(from->device, v->type.device) &&
                   from->requires_grad == v->type.requires_grad;
    bool detach = n->op == PTC_OP_TO && n->args[1].kind == PTC_ARG_NONE &&
                  n->args[2].kind == PTC_ARG_NONE;
    return cap_op_returns_view(n->op) || same_to || detach ? n : NULL;
}

static int output_of(const ptc_graph *g, const ptc_value *v)
{
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == v)
            return i;
    return -1;
}

/* The input the graph wrote in place whose new value v is, or -1. */
static int written_input(const cap_entry *e, const ptc_value *v)
{
    for (int k = 0; k < e->nwriteback; k++)
        if (e->graph->outputs[e->writeback[k].output] == v)
            return e->writeback[k].input;
    return -1;
}

/* Output i's view chain down to an input or to another output (the first
 * the chain meets: an intermediate the entry returns for its views,
 * entry.c's add_view_bases, or an output no view op made).
 * A view of an input's new value written in place (x.t().add_(1); return
 * x.t()) is a view of the caller's tensor, which gets that value after the
 * graph. Constant tensors (input_src -1) are ptc's own: their views stay
 * copies. */
static int plan_alias(const cap_entry *e, int i, alias_out *a)
{
    const ptc_graph *g = e->graph;
    const ptc_node *chain[64];
    int n = 0, written = -1;
    const ptc_value *v = g->outputs[i];
    for (const ptc_node *d; n < 64 && (written = written_input(e, v)) < 0 &&
                            (n == 0 || output_of(g, v) < 0) && (d = view_node(v));
         v = d->args[0].v)
        chain[n++] = d;
    int in = written >= 0 ? written : v->input_index;
    int out = in < 0 ? output_of(g, v) : -1;
    if (n == 0 || n == 64 || (in < 0 && out < 0) || (in >= 0 && e->input_src[in] < 0))
        return 0; /* not a view, or of an intermediate nobody returns: a copy */
    const uint8_t *node_grad = e->node_grad;
    *a = (alias_out){i, in >= 0 ? in : -1 - out, v->id, n, calloc((size_t)n, sizeof(estep))};
    for (int k = 0; k < n; k++)
        if (eager_step(chain[n - 1 - k], node_grad ? node_grad[chain[n - 1 - k]->id] : true,
                       &a->steps[k]) < 0)
            return -1;
    return 1;
}

static void free_steps(estep *steps, int n)
{
    for (int i = 0; i < n; i++) {
        estep *s = &steps[i];
        for (int k = 0; k < s->npos; k++) {
            Py_XDECREF(s->pos[k].obj);
            free(s->pos[k].ids);
        }
        for (int k = 0; k < s->nkw; k++) {
            Py_XDECREF(s->kw[k].obj);
            free(s->kw[k].ids);
        }
        free(s->pos);
        free(s->kw);
        free(s->outs);
        free(s->release);
        Py_XDECREF(s->fn);
        Py_XDECREF(s->kwnames);
    }
    free(steps);
}

void cap_eager_drop_aliases(cap_eager *st)
{
    for (int i = 0; i < st->naliases; i++)
        free_steps(st->aliases[i].steps, st->aliases[i].nsteps);
    free(st->aliases);
    st->aliases = NULL;
    st->naliases = 0;
}

int cap_eager_plan_aliases(const cap_entry *e, cap_eager *st)
{
    const ptc_graph *g = e->graph;
    st->aliases = calloc((size_t)g->noutputs + 1, sizeof *st->aliases);
    for (int i = 0; i < g->noutputs; i++) {
        int rc = plan_alias(e, i, &st->aliases[st->naliases]);
        if (rc != 0)
            st->naliases++; /* kept on failure too, so that its steps are freed */
        if (rc < 0)
            return -1;
    }
    return 0;
}

int cap_eager_remake_aliases(const ptc_graph *g, const cap_eager *st, PyObject **inputs,
                             PyObject **outputs)
{
    if (!st || !st->naliases)
        return 0;
    ptc_bindings b;
    if (bind_inputs(g, inputs, &b) < 0)
        return -1;
    PyObject **env = calloc((size_t)g->nvalues + 1, sizeof *env);
    int rc = 0;
    for (int i = 0; i < st->naliases && rc == 0; i++) {
        const alias_out *a = &st->aliases[i];
        env[a->base_id] = Py_NewRef(a->base >= 0 ? inputs[a->base] : outputs[-1 - a->base]);
        rc = run_steps(a->steps, a->nsteps, env, &b);
        PyObject *view = env[g->outputs[a->out]->id];
        if (rc == 0 && !view) {
            PyErr_SetString(cap_InternalError, "ptc: a view among the outputs could not be remade");
            rc = -1;
        }
        if (rc == 0)
            Py_SETREF(outputs[a->out], Py_NewRef(view));
        Py_CLEAR(env[a->base_id]); /* only the chain's values were set */
        for (int k = 0; k < a->nsteps; k++)
            for (int o = 0; o < a->steps[k].nout; o++)
                Py_CLEAR(env[a->steps[k].outs[o]]);
    }
    free(env);
    return rc;
}
