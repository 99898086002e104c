/* Building graph nodes: a traced op becomes a node of the trace's graph with
 * the user's source position, the text of the expression and the nn.Module
 * path, and its results become symbolic tensors. What the trace records per
 * node lives here too: the grad mode it ran under, in-place writes to graph
 * inputs, random seeds.
 *
 * The symbolic tensor type and the bound-method type are made by the torch
 * layer (their Python protocol runs torch handlers); the trace only makes
 * values of them (symbolic tensors in lifecycle.c, which keeps them) and
 * tells them apart.
 */
#include "capture/trace/trace.h"

#include <stdlib.h>
#include <string.h>

PyTypeObject *cap_method_type;

static void node_location(cap_trace *T, ptc_node *n)
{
    cap_frame *f = T->I->frame;
    int line, col, endline, endcol;
    cap_code_pos(f->code, f->pc, &line, &col, &endline, &endcol);
    n->loc.file = cap_t_intern_str(T, f->code->file);
    n->loc.line = line;
    n->loc.col = col >= 0 ? col + 1 : 0;
    char text[512];
    cap_source_line(f->code->file, line, text, sizeof text);
    if (col >= 0 && endline == line && endcol > col && (size_t)endcol <= strlen(text))
        n->loc.text = ptc_arena_strndup(T->arena, text + col, (size_t)(endcol - col));
    else if (col >= 0 && (size_t)col < strlen(text))
        n->loc.text = ptc_arena_strdup(T->arena, text + col);
    else
        n->loc.text = ptc_arena_strdup(T->arena, text);
    n->module_path = f->module_path;
}

/* An op's meta rejected its arguments: with symbolic sizes, perhaps only
 * because it cannot decide a relation between them, which static sizes can. */
static int build_failed(cap_trace *T, const ptc_error *err)
{
    if (cap_t_symbolic(T))
        return cap_t_need_static(T, "%s", err->msg);
    return cap_t_break(T, CAP_B_TRACE_ERROR, "%s", err->msg);
}

/* Casts op's tensor arguments as torch's autocast would (autocast.c says
 * which, and to what): each cast is a `to` node before op's. */
static int autocast_args(cap_trace *T, ptc_op op, ptc_arg *args, int nargs)
{
    if (!T->amp.on[0] && !T->amp.on[1])
        return CAP_NEXT;
    for (int i = 0; i < nargs; i++) {
        if (args[i].kind != PTC_ARG_VALUE || !args[i].v)
            continue;
        int want = cap_amp_cast_dtype(T, op, args[i].v);
        if (want < 0)
            continue;
        ptc_arg a[2] = {ptc_arg_value(args[i].v), ptc_arg_dtype((ptc_dtype)want)};
        ptc_value *c = cap_build1(T, PTC_OP_TO, a, 2);
        if (!c)
            return CAP_BREAK;
        args[i] = ptc_arg_value(c);
    }
    return CAP_NEXT;
}

int cap_amp_loss_inputs(cap_trace *T, ptc_value **vals, int n)
{
    for (int i = 0; i < n; i++) {
        int want = vals[i] ? cap_amp_loss_dtype(T, vals[i]) : -1;
        if (want < 0)
            continue;
        ptc_arg a[2] = {ptc_arg_value(vals[i]), ptc_arg_dtype((ptc_dtype)want)};
        if (!(vals[i] = cap_build1(T, PTC_OP_TO, a, 2)))
            return CAP_BREAK;
    }
    return CAP_NEXT;
}

ptc_value *cap_build1(cap_trace *T, ptc_op op, ptc_arg *args, int nargs)
{
    ptc_error err;
    if (autocast_args(T, op, args, nargs) != CAP_NEXT)
        return NULL;
    ptc_node *n = ptc_build(T->g, op, args, nargs, &err);
    if (!n) {
        build_failed(T, &err);
        return NULL;
    }
    node_location(T, n);
    cap_t_note_node(T, n);
    return n->outs[0];
}

int cap_wrap_value(cap_trace *T, ptc_value *v, PyObject **out)
{
    if (!v)
        return CAP_BREAK;
    *out = cap_tensor_new(T, v);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_build(cap_trace *T, ptc_op op, ptc_arg *args, int nargs, PyObject **out)
{
    ptc_error err;
    if (autocast_args(T, op, args, nargs) != CAP_NEXT)
        return CAP_BREAK;
    ptc_node *n = ptc_build(T->g, op, args, nargs, &err);
    if (!n)
        return build_failed(T, &err);
    node_location(T, n);
    cap_t_note_node(T, n);
    const ptc_schema *s = ptc_op_schema(op);
    if (n->nout == 1 && s->nreturns == 1) {
        *out = cap_tensor_new(T, n->outs[0]);
        return *out ? CAP_NEXT : CAP_ERR;
    }
    /* Several tensors, or a Tensor[]: torch returns a tuple either way. */
    PyObject *r = PyTuple_New(n->nout);
    for (int i = 0; r && i < n->nout; i++) {
        PyObject *t = cap_tensor_new(T, n->outs[i]);
        if (!t) {
            Py_CLEAR(r);
            break;
        }
        PyTuple_SetItem(r, i, t);
    }
    *out = r;
    return r ? CAP_NEXT : CAP_ERR;
}

/* A torch call met a real tensor in the trace: a subclass (B023) or a plain
 * tensor no graph value can hold (B026). */
int cap_t_real_tensor(cap_trace *T, PyObject *v, const char *what)
{
    PyTypeObject *tt = Py_TYPE(v);
    if (tt != (PyTypeObject *)cap_T.Tensor && tt != (PyTypeObject *)cap_T.Parameter)
        return cap_t_break(T, CAP_B_TENSOR_SUBCLASS, "%s: a %s", what, cap_tpname(tt));
    PyObject *d = PyObject_GetAttr(v, cap_T.s_dtype);
    PyObject *s = d ? PyObject_Str(d) : NULL;
    int rc = cap_t_break(T, CAP_B_UNSUPPORTED_TENSOR, "%s: a %s tensor", what,
                         s ? PyUnicode_AsUTF8(s) : "unsupported");
    Py_XDECREF(d);
    Py_XDECREF(s);
    PyErr_Clear();
    return rc;
}

/* ---- nodes ------------------------------------------------------------------------- */

void cap_t_note_node(cap_trace *T, ptc_node *n)
{
    if (n->id >= T->cap_node_grad) {
        int cap = T->cap_node_grad ? 2 * T->cap_node_grad : 256;
        while (cap <= n->id)
            cap *= 2;
        T->node_grad = realloc(T->node_grad, (size_t)cap);
        memset(T->node_grad + T->cap_node_grad, 0, (size_t)(cap - T->cap_node_grad));
        T->cap_node_grad = cap;
    }
    T->node_grad[n->id] = T->grad_enabled;
}

bool cap_t_value_grad(cap_trace *T, ptc_value *v)
{
    return !v->def || (v->def->id < T->cap_node_grad && T->node_grad[v->def->id]);
}

bool cap_t_is_written(cap_trace *T, cap_tensor *t)
{
    /* by identity: == on symbolic tensors would trace a comparison */
    for (Py_ssize_t i = 0; i < PyList_Size(T->written); i++)
        if (PyList_GetItem(T->written, i) == (PyObject *)t)
            return true;
    return false;
}

int cap_t_note_written(cap_trace *T, cap_tensor *t)
{
    if (cap_t_is_written(T, t))
        return CAP_NEXT;
    return PyList_Append(T->written, (PyObject *)t) < 0 ? CAP_ERR : CAP_NEXT;
}

uint64_t cap_t_next_seed(cap_trace *T)
{
    return ++T->seeds;
}

/* A Tensor method bound to a symbolic tensor (its type: torch_types.c). */
PyObject *cap_method_new(PyObject *self, const struct cap_tmap *map)
{
    cap_method *m = PyObject_New(cap_method, cap_method_type);
    if (m) {
        m->self = Py_NewRef(self);
        m->map = map;
    }
    return (PyObject *)m;
}
