/* copy.copy of a builtin container while tracing.
 *
 * copy.copy(x) of a list, dict or set is type(x).copy(x), and of a tuple,
 * a frozenset or an immutable constant is x itself (copy's own dispatch
 * table); an OrderedDict or defaultdict is copied as its .copy() does (their
 * __reduce_ex__ and __copy__ rebuild the same items in the same order, with
 * the same default factory). So the call is traced as that method call, and
 * a copy of an outside container reads the items the trace sees (its
 * pending writes included), as torch.compile does, instead of running
 * copy.copy for real at a break. Anything else (a user class, a tensor, a
 * subclass that may override __copy__) is declined: copy.copy runs for real.
 */
#include "capture/trace/trace.h"

static bool is_copy_copy(PyObject *fn)
{
    static PyObject *copy_copy;
    if (!copy_copy && !(copy_copy = cap_import_path("copy.copy"))) {
        PyErr_Clear();
        return false;
    }
    return fn == copy_copy;
}

static bool copied_by_its_copy_method(PyObject *o)
{
    static PyObject *ordered, *defaulted;
    if (!ordered) {
        ordered = cap_import_path("collections.OrderedDict");
        defaulted = cap_import_path("collections.defaultdict");
        PyErr_Clear();
    }
    PyObject *t = (PyObject *)Py_TYPE(o);
    return PyList_CheckExact(o) || PyDict_CheckExact(o) || PySet_CheckExact(o) ||
           (ordered && t == ordered) || (defaulted && t == defaulted);
}

int cap_t_copy_call(cap_interp *I, PyObject *fn, PyObject *const *args, int nargs,
                    PyObject *kwnames, PyObject **out)
{
    if (nargs != 1 || kwnames || !is_copy_copy(fn))
        return CAP_NONE;
    PyObject *o = args[0];
    if (PyTuple_CheckExact(o) || PyFrozenSet_CheckExact(o) || cap_is_constant(o)) {
        *out = Py_NewRef(o);
        return CAP_NEXT;
    }
    if (!copied_by_its_copy_method(o))
        return CAP_NONE;
    PyObject *name = PyUnicode_FromString("copy"), *method = NULL;
    int rc = name ? cap_t_getattr(I, o, name, &method) : CAP_ERR;
    Py_XDECREF(name);
    if (rc == CAP_NEXT)
        rc = cap_hooks.call(I, method, NULL, 0, NULL, out);
    Py_XDECREF(method);
    return rc;
}
