/* torch._foreach_* ops, traced as one op per tensor.
 *
 * torch._foreach_X(lists..., scalars..., **kw) is X applied to the i-th item
 * of every list argument (with every other argument as it is): the result
 * tuple of torch.X(...) calls, or for the in-place _foreach_X_ the method
 * X_ called on each item of the first list, returning None. Each call goes
 * through the ordinary call path, so its mapping, checks and breaks are
 * those of the per-tensor op; the fused kernels come from ptc's fusion, not
 * from a foreach kernel. _foreach_addcmul/addcdiv's fourth positional
 * argument (scalars) is the per-tensor `value=`, _foreach_norm is
 * torch.linalg.vector_norm, _foreach_max is torch.max of each tensor.
 */
#include "capture/torch/torch.h"

#include <string.h>

#define FOREACH_MAX_ARGS 8

/* X of torch._foreach_X(_) copied into buf, or NULL when callable is not
 * one of them. A copy: a builtin's __name__ is a new string on every read,
 * freed on return (pointing into it read freed memory: under load the
 * break named torch._foreach___ and fullgraph failed). */
static const char *foreach_base(PyObject *callable, char *buf, size_t size)
{
    if (!PyCFunction_Check(callable))
        return NULL;
    PyObject *name = PyObject_GetAttrString(callable, "__name__");
    const char *s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    PyErr_Clear();
    const char *base = NULL;
    if (s && strncmp(s, "_foreach_", 9) == 0) {
        PyObject *same = PyObject_GetAttr(cap_T.torch, name);
        PyErr_Clear();
        if (same == callable && strlen(s + 9) < size)
            base = strcpy(buf, s + 9);
        Py_XDECREF(same);
    }
    Py_XDECREF(name);
    return base;
}

/* The per-tensor function of out-of-place _foreach_<base>. */
static PyObject *per_tensor_fn(const char *base)
{
    if (strcmp(base, "norm") == 0)
        return cap_import_path("torch.linalg.vector_norm");
    return PyObject_GetAttrString(cap_T.torch, base);
}

/* Each list or tuple argument as a list of its traced items (an outside
 * list's items keep their sources, so its length and items are guarded);
 * others stay as they are. The length they share, or -1. */
static Py_ssize_t traced_lists(cap_interp *I, PyObject *const *args, int npos, PyObject **argv,
                               int *rc)
{
    Py_ssize_t n = -1;
    *rc = CAP_NEXT;
    for (int k = 0; k < npos; k++) {
        argv[k] = NULL;
        if (*rc != CAP_NEXT || (!PyList_Check(args[k]) && !PyTuple_Check(args[k])))
            continue;
        argv[k] = cap_t_materialize(I, args[k], rc);
        Py_ssize_t len = argv[k] ? PyList_Size(argv[k]) : -1;
        if (argv[k] && n >= 0 && len != n) /* eager raises: lists of different lengths */
            *rc = cap_t_break(I->T, CAP_B_UNSUPPORTED_TORCH,
                              "torch._foreach_* of lists of different lengths");
        n = len;
    }
    return n;
}

/* Item i's call: fn(items...) or items[0].<method>(items[1:]...); lists[k]
 * holds argument k's items when it is a list. */
static int call_item(cap_interp *I, PyObject *fn, PyObject *method, PyObject *const *args,
                     PyObject *const *lists, int nargs, PyObject *kwnames, Py_ssize_t i,
                     PyObject **out)
{
    PyObject *argv[FOREACH_MAX_ARGS];
    for (int k = 0; k < nargs; k++)
        argv[k] = lists[k] ? PyList_GetItem(lists[k], i) : args[k];
    cap_frame *outer = I->frame;
    if (!method)
        return cap_t_settle(I, outer, cap_op_call(I, fn, argv, nargs, kwnames, out), out);
    PyObject *bound = NULL;
    int rc = cap_t_settle(I, outer, cap_op_getattr(I, argv[0], method, &bound), &bound);
    if (rc != CAP_NEXT)
        return rc;
    rc = cap_t_settle(I, outer, cap_op_call(I, bound, argv + 1, nargs - 1, kwnames, out), out);
    Py_DECREF(bound);
    return rc;
}

/* addcmul/addcdiv's positional scalars become value=, as the op takes it. */
static PyObject *keywords_of(const char *base, int *npos, int nargs, PyObject *kwnames)
{
    bool addc = strncmp(base, "addcmul", 7) == 0 || strncmp(base, "addcdiv", 7) == 0;
    if (!addc || *npos != 4)
        return Py_XNewRef(kwnames);
    PyObject *names = PyTuple_New(nargs - 3);
    if (!names)
        return NULL;
    PyTuple_SetItem(names, 0, PyUnicode_FromString("value"));
    for (int k = 1; kwnames && k < nargs - 3; k++)
        PyTuple_SetItem(names, k, Py_NewRef(PyTuple_GetItem(kwnames, k - 1)));
    *npos = 3;
    return names;
}

int cap_torch_foreach_call(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                           PyObject *kwnames, PyObject **out)
{
    char base_buf[64];
    const char *base = foreach_base(callable, base_buf, sizeof base_buf);
    if (!base)
        return CAP_NONE;
    cap_trace *T = I->T;
    int npos = nargs - (kwnames ? (int)PyTuple_Size(kwnames) : 0);
    size_t len = strlen(base);
    bool inplace = len > 0 && base[len - 1] == '_';
    if (nargs > FOREACH_MAX_ARGS ||
        (inplace && (npos < 1 || !(PyList_Check(args[0]) || PyTuple_Check(args[0])))))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "torch._foreach_%s with these arguments",
                           base);
    PyObject *lists[FOREACH_MAX_ARGS] = {NULL};
    int rc;
    Py_ssize_t n = traced_lists(I, args, npos, lists, &rc);
    if (rc == CAP_NEXT && n < 0)
        rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "torch._foreach_%s without a list", base);
    PyObject *fn = rc == CAP_NEXT && !inplace ? per_tensor_fn(base) : NULL;
    if (rc == CAP_NEXT && !inplace && !fn) {
        PyErr_Clear(); /* no per-tensor op of that name (_foreach_powsum) */
        rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "torch._foreach_%s", base);
    }
    PyObject *method = inplace ? PyUnicode_FromString(base) : NULL;
    PyObject *names = keywords_of(base, &npos, nargs, kwnames);
    PyObject *results = inplace ? NULL : PyList_New(n > 0 ? n : 0);
    if (rc == CAP_NEXT && ((inplace && !method) || (!inplace && !results) || (kwnames && !names)))
        rc = CAP_ERR;
    for (Py_ssize_t i = 0; rc == CAP_NEXT && i < n; i++) {
        PyObject *r = NULL;
        rc = call_item(I, fn, method, args, lists, nargs, names, i, &r);
        if (rc == CAP_NEXT && results)
            PyList_SetItem(results, i, r);
        else if (rc == CAP_NEXT)
            Py_DECREF(r);
    }
    if (rc == CAP_NEXT && !(*out = results ? PyList_AsTuple(results) : Py_NewRef(Py_None)))
        rc = CAP_ERR; /* torch returns a tuple */
    for (int k = 0; k < FOREACH_MAX_ARGS; k++)
        Py_XDECREF(lists[k]);
    Py_XDECREF(fn);
    Py_XDECREF(method);
    Py_XDECREF(names);
    Py_XDECREF(results);
    return rc;
}
