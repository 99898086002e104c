/* A mapped torch call: the row's special handler or the generic binder
 * builds the op, then an in-place form writes its result into the tensor it
 * names and a view-returning op's result is recorded as an alias of its
 * input. Ops that draw from ptc's random generator run in torch instead
 * after torch.manual_seed, for eager's values.
 */
#include "capture/torch/torch.h"

#include <string.h>

static bool inplace_flag(cap_tcall *c)
{
    for (int k = 0; k < c->m->np; k++)
        if (c->m->p[k].kind == TP_INPLACE) {
            PyObject *v = cap_targ(c, k, c->m->p[k].pyname);
            return v && PyObject_IsTrue(v) == 1;
        }
    return false;
}

/* Results of ops that return views in torch alias their input: recorded
 * (without a key, so mutating either while the other lives is a break). */
static int mark_aliases(const cap_tmap *m, cap_tensor *base, PyObject *res)
{
    if (!cap_op_returns_view(m->op))
        return 0;
    PyObject *items = PyTuple_Check(res) ? Py_NewRef(res) : PyTuple_Pack(1, res);
    for (Py_ssize_t i = 0; items && i < PyTuple_Size(items); i++) {
        PyObject *x = PyTuple_GetItem(items, i);
        if (cap_is_tensor(x) && !((cap_tensor *)x)->base && x != (PyObject *)base &&
            cap_t_add_view(base, (cap_tensor *)x, NULL) < 0) {
            Py_DECREF(items);
            return -1;
        }
    }
    Py_XDECREF(items);
    return items ? 0 : -1;
}

/* Ops that draw from ptc's random generator (dropout, attention dropout and
 * rand/randn(_like); the ones without a ptc op run in torch anyway). */
static bool draws_random(const cap_tmap *m)
{
    return m->fn == cap_th_random || m->fn == cap_th_dropout || m->fn == cap_th_dropout_nd ||
           m->fn == cap_th_sdpa ||
           (m->fn == cap_th_like && (m->op == PTC_OP_RAND || m->op == PTC_OP_RANDN));
}

/* torch's functions and Tensor's methods raise for a numpy array (but the
 * rows that take arrays: torch.from_numpy, numpy's own); the call runs for
 * real, for eager's error. */
static int numpy_operands(cap_trace *T, const cap_tmap *m, PyObject *self, PyObject *const *args,
                          int nargs)
{
    if (m->flags & TM_NUMPY)
        return CAP_NEXT;
    for (int i = -1; i < nargs; i++)
        if (cap_is_traced_numpy(i < 0 ? self : args[i]))
            return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH,
                               "%s of a numpy array (torch takes tensors: torch.from_numpy(a))",
                               m->name);
    return CAP_NEXT;
}

int cap_torch_call(cap_trace *T, const cap_tmap *m, PyObject *self, PyObject *const *args,
                   int nargs, PyObject *kwnames, PyObject **out)
{
    int rc = numpy_operands(T, m, self, args, nargs);
    return rc != CAP_NEXT ? rc : cap_torch_call_traced(T, m, self, args, nargs, kwnames, out);
}

/* The traced tensor given as out= to a mapped op whose signature takes out=
 * (its position among the keywords: *at), or NULL. */
static cap_tensor *out_argument(const cap_tmap *m, PyObject *const *args, int nargs,
                                PyObject *kwnames, int *at)
{
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0;
    bool takes_out = false;
    for (int k = 0; k < m->np; k++)
        takes_out |= m->p[k].kind == TP_MUSTNONE && strcmp(m->p[k].pyname, "out") == 0;
    for (int i = 0; takes_out && !m->fn && i < nkw; i++) {
        PyObject *v = args[nargs - nkw + i];
        if (PyUnicode_CompareWithASCIIString(PyTuple_GetItem(kwnames, i), "out") == 0 &&
            cap_is_tensor(v)) {
            *at = i;
            return (cap_tensor *)v;
        }
    }
    return NULL;
}

/* op(..., out=t): the op's result written into t, converted to its dtype as
 * an in-place op's (cap_inplace), and t returned. Only where the result has
 * t's shape: eager resizes t otherwise (a break). */
static int call_into(cap_trace *T, const cap_tmap *m, PyObject *self, PyObject *const *args,
                     int nargs, PyObject *kwnames, int at, cap_tensor *into, PyObject **out)
{
    int nkw = (int)PyTuple_Size(kwnames);
    PyObject *rest[40], *names = PyTuple_New(nkw - 1), *res = NULL;
    if (!names)
        return CAP_ERR;
    for (int i = 0, j = 0; i < nargs; i++)
        if (i != nargs - nkw + at)
            rest[j++] = args[i];
    for (int i = 0, j = 0; i < nkw; i++)
        if (i != at)
            PyTuple_SetItem(names, j++, Py_NewRef(PyTuple_GetItem(kwnames, i)));
    int first = T->g->next_node_id;
    int rc = cap_torch_call_traced(T, m, self, rest, nargs - 1, nkw > 1 ? names : NULL, &res);
    Py_DECREF(names);
    if (rc != CAP_NEXT)
        return rc;
    const ptc_ttype *rt = cap_is_tensor(res) ? &cap_val(res)->type : NULL, *ot = &into->v->type;
    if (!rt || !ptc_ttype_same_shape(rt, ot)) {
        Py_XDECREF(res);
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH,
                           "%s with out= of another shape than its result", m->name);
    }
    return cap_inplace_since(T, into, res, first, out);
}

int cap_torch_call_traced(cap_trace *T, const cap_tmap *m, PyObject *self, PyObject *const *args,
                          int nargs, PyObject *kwnames, PyObject **out)
{
    int at = -1;
    cap_tensor *into = out_argument(m, args, nargs, kwnames, &at);
    if (into)
        return call_into(T, m, self, args, nargs, kwnames, at, into, out);
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0;
    PyObject *buf[40];
    int npos = nargs - nkw;
    if (nargs + 1 > 40)
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "%s: too many arguments", m->name);
    if (self) {
        buf[0] = self;
        memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
        args = buf;
        npos++;
    }
    cap_tcall c = {T, m, args, npos, kwnames, args + npos, nkw};
    if (draws_random(m) && cap_t_seeds_torch(T))
        return cap_t_break(
            T, CAP_B_UNSUPPORTED_TORCH,
            "%s after torch.manual_seed in this function runs in torch, for eager's values",
            m->name);
    if ((m->flags & TM_METHOD) && (npos < 1 || !cap_is_tensor(args[0]))) {
        if (npos >= 1 && PyObject_TypeCheck(args[0], (PyTypeObject *)cap_T.Tensor))
            return cap_t_real_tensor(T, args[0], m->name);
        return cap_t_break(T, CAP_B_TRACE_ERROR, "%s needs a tensor", m->name);
    }
    PyObject *res = NULL;
    int rc, first = T->g->next_node_id;
    if (m->fn) {
        rc = m->fn(&c, &res);
    } else {
        ptc_arg a[16];
        rc = cap_tbind(&c, m->op, a);
        if (rc == CAP_NEXT)
            rc = cap_build(T, (ptc_op)m->op, a, ptc_op_schema((ptc_op)m->op)->nparams, &res);
    }
    if (rc != CAP_NEXT)
        return rc;
    if ((m->flags & TM_INPLACE) || (!m->fn && inplace_flag(&c))) {
        /* the tensor written: self of a method, the first parameter of a
           function (F.relu_(x), F.relu(input=x, inplace=True)) */
        PyObject *self_t = cap_targ(&c, 0, m->np ? m->p[0].pyname : "input");
        if (!cap_is_tensor(self_t)) {
            Py_DECREF(res);
            return cap_t_break(T, CAP_B_TRACE_ERROR, "%s writes no traced tensor", m->name);
        }
        if (m->flags & TM_SCALAR_VALUE)
            first = CAP_NO_OPERANDS;
        return cap_inplace_since(T, (cap_tensor *)self_t, res, first, out);
    }
    if (npos >= 1 && cap_is_tensor(args[0]) && res != args[0] && mark_aliases(m, (cap_tensor *)args[0], res) < 0) {
        Py_DECREF(res);
        return CAP_ERR;
    }
    *out = res;
    return CAP_NEXT;
}
