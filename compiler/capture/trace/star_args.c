/* f(*args, **kwargs) while tracing: the tuple and the dict CALL_FUNCTION_EX
 * calls with. The star argument is flowed as a real call's argument would
 * be (outside containers as sourced copies), a tensor gives its rows, and
 * any other iterable is iterated through the interpreter, so a Python
 * __iter__ is traced, not run for real; errors are CPython's.
 */
#include "capture/trace/trace.h"

/* The items of f(*a) as a tuple (*t NULL with an error): other iterables
 * than tuples and lists are iterated through the interpreter, so that a
 * Python __iter__ is traced (and what it reads guarded), not run for real. */
static int star_items(cap_interp *I, PyObject *a, PyObject **t)
{
    if (PyTuple_CheckExact(a) || PyList_CheckExact(a)) {
        *t = PySequence_Tuple(a);
        return CAP_NEXT;
    }
    PyObject *it = NULL, *items = PyList_New(0), *v = NULL;
    int rc = items ? cap_op_iter_now(I, a, &it) : CAP_ERR;
    while (rc == CAP_NEXT && (rc = cap_op_next_now(I, it, &v)) == CAP_NEXT && v) {
        if (PyList_Append(items, v) < 0)
            rc = CAP_ERR;
        Py_DECREF(v);
    }
    Py_XDECREF(it);
    *t = rc == CAP_NEXT ? PyList_AsTuple(items) : NULL;
    Py_XDECREF(items);
    return rc == CAP_ERR ? CAP_NEXT : rc; /* an error: *t NULL, reported below */
}

/* The tuple of f(*args): a tensor's rows, an iterable's items. */
static int star_args(cap_trace *T, PyObject *func, PyObject *args, PyObject **t)
{
    PyObject *a = cap_t_flow(T, args);
    if (!a)
        return CAP_ERR;
    if (cap_is_tensor(a)) {
        Py_DECREF(a);
        a = cap_thooks.unbind(T, (cap_tensor *)args);
        if (!a)
            return PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    }
    int rc = star_items(T->I, a, t);
    Py_DECREF(a);
    if (rc != CAP_NEXT)
        return rc;
    if (!*t) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%S argument after * must be an iterable, not %s", func,
                         cap_tpname(Py_TYPE(args)));
        }
        return CAP_ERR;
    }
    return CAP_NEXT;
}

/* The dict of f(**kw): kw itself when it is a dict, else a dict of the
 * mapping's items. */
static int star_star_args(cap_trace *T, PyObject *kw, PyObject **d)
{
    PyObject *k = cap_t_flow(T, kw);
    if (!k)
        return CAP_ERR;
    if (PyDict_CheckExact(k)) {
        *d = k;
        return CAP_NEXT;
    }
    *d = PyDict_New();
    if (!*d || PyDict_Update(*d, k) < 0) {
        Py_CLEAR(*d);
        Py_DECREF(k);
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "argument after ** must be a mapping, not %s",
                         cap_tpname(Py_TYPE(kw)));
        }
        return CAP_ERR;
    }
    Py_DECREF(k);
    return CAP_NEXT;
}

int cap_t_expand_call_args(cap_trace *T, PyObject *func, PyObject *args, PyObject *kw,
                           PyObject **t, PyObject **d)
{
    *t = *d = NULL;
    int rc = star_args(T, func, args, t);
    if (rc != CAP_NEXT || !kw)
        return rc;
    rc = star_star_args(T, kw, d);
    if (rc != CAP_NEXT)
        Py_CLEAR(*t);
    return rc;
}
