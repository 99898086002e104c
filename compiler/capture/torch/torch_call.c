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

int cap_torch_call_traced(cap_trace *T, const cap_tmap *m, PyObject *self, PyObject *const *args,
                          int nargs, PyObject *kwnames, PyObject **out)
{
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
    int rc;
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
        return cap_inplace(T, (cap_tensor *)self_t, res, out);
    }
    if (npos >= 1 && cap_is_tensor(args[0]) && res != args[0] && mark_aliases(m, (cap_tensor *)args[0], res) < 0) {
        Py_DECREF(res);
        return CAP_ERR;
    }
    *out = res;
    return CAP_NEXT;
}
