/* next() of an iterator that existed before the call, inside the graph.
 *
 * As torch.compile does for tuple and range iterators, next(it) of an
 * outside tuple_iterator or range_iterator does not end the graph. The
 * trace reads what it has left without advancing it (cap_iter_rest: its
 * __reduce__ gives its sequence and position), through a source of its own
 * (CAP_S_ITERREST, read again by the guards on every call: a tuple's items
 * through their sources and how many are left, a range equal), and walks a
 * ptc iterator over that, its shadow: one per iterator (T->iter_shadows),
 * so that each read sees the advances before it. Each advance is logged
 * (CAP_E_ITER_NEXT) and replayed after the graph with next(it), so the
 * caller's iterator ends as far advanced as eager's. iter(it) is it. C code
 * handed such an iterator after an advance would read it from where it was
 * before the graph: a break.
 */
#include "capture/trace/trace.h"

static PyTypeObject *tuple_iterator, *range_iterator;

static bool seq_iterator(PyObject *it)
{
    if (!tuple_iterator) {
        PyObject *t = PyTuple_New(0), *r = PyObject_CallFunction((PyObject *)&PyRange_Type, "i", 0);
        PyObject *ti = t ? PyObject_GetIter(t) : NULL, *ri = r ? PyObject_GetIter(r) : NULL;
        tuple_iterator = ti ? Py_TYPE(ti) : NULL;
        range_iterator = ri ? Py_TYPE(ri) : NULL;
        Py_XDECREF(ti);
        Py_XDECREF(ri);
        Py_XDECREF(t);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    return it && (Py_TYPE(it) == tuple_iterator || Py_TYPE(it) == range_iterator);
}

bool cap_t_outside_seq_iter(cap_trace *T, PyObject *it)
{
    return seq_iterator(it) && cap_t_outside(T, it);
}

PyObject *cap_iter_rest(PyObject *it)
{
    if (!seq_iterator(it))
        return NULL;
    PyObject *r = PyObject_CallMethod(it, "__reduce__", NULL), *rest = NULL;
    if (r && PyTuple_Check(r) && PyTuple_Size(r) >= 2 && PyTuple_Check(PyTuple_GetItem(r, 1)) &&
        PyTuple_Size(PyTuple_GetItem(r, 1)) == 1) {
        /* 3.12's range iterator gives a range of what is left and None */
        PyObject *seq = PyTuple_GetItem(PyTuple_GetItem(r, 1), 0);
        PyObject *state = PyTuple_Size(r) > 2 ? PyTuple_GetItem(r, 2) : Py_None;
        Py_ssize_t at = state == Py_None ? 0 : PyLong_AsSsize_t(state);
        rest = at < 0 ? NULL : PySequence_GetSlice(seq, at, PY_SSIZE_T_MAX);
    }
    Py_XDECREF(r);
    if (!rest)
        PyErr_Clear(); /* a form of __reduce__ not known here: not followed */
    return rest;
}

static PyObject *shadow_key(PyObject *it)
{
    return PyLong_FromVoidPtr(it);
}

/* The shadow of the outside iterator it at source src, made on first need:
 * a ptc iterator over what it has left, guarded. Borrowed. */
static cap_iter *shadow_of(cap_trace *T, PyObject *it)
{
    PyObject *key = shadow_key(it), *found = key ? PyDict_GetItem(T->iter_shadows, key) : NULL;
    if (found || !key) {
        Py_XDECREF(key);
        return (cap_iter *)found;
    }
    PyObject *rest = cap_iter_rest(it), *shadow = NULL;
    int rs = rest ? cap_source_add(T, CAP_S_ITERREST, cap_t_source_of(T, it), 0, 0, NULL) : -1;
    if (rs >= 0 && PyRange_Check(rest)) { /* ints: the range itself, guarded equal */
        PyObject *start = PyObject_GetAttrString(rest, "start"),
                 *step = PyObject_GetAttrString(rest, "step");
        long long a = start ? PyLong_AsLongLong(start) : -1,
                  s = step ? PyLong_AsLongLong(step) : -1;
        Py_ssize_t n = PyObject_Size(rest);
        if (!PyErr_Occurred() && cap_guard_add(T, CAP_G_EQ, rs, rest, 0) == 0)
            shadow = cap_iter_range(a, s, n);
        Py_XDECREF(start);
        Py_XDECREF(step);
    } else if (rs >= 0 && cap_guard_add(T, CAP_G_TYPE, rs, (PyObject *)Py_TYPE(rest), 0) == 0 &&
               cap_guard_add(T, CAP_G_LEN, rs, NULL, PyTuple_Size(rest)) == 0) {
        cap_t_map(T, rest, rs);
        shadow = cap_iter_seq(rest, rs, T);
    }
    if (shadow && PyDict_SetItem(T->iter_shadows, key, shadow) < 0)
        Py_CLEAR(shadow);
    Py_XDECREF(shadow); /* T->iter_shadows holds it */
    Py_XDECREF(rest);
    Py_DECREF(key);
    return shadow ? (cap_iter *)shadow : NULL;
}

int cap_t_outside_iter_next(cap_interp *I, PyObject *it, PyObject **out)
{
    cap_trace *T = I->T;
    cap_iter *shadow = shadow_of(T, it);
    if (!shadow)
        return PyErr_Occurred() ? CAP_ERR
                                : cap_t_break(T, CAP_B_OPAQUE_ITERATOR, "next() of an outside %s",
                                              cap_tpname(Py_TYPE(it)));
    int rc = cap_t_effect(I, CAP_E_ITER_NEXT, it, NULL, NULL);
    PyObject *v = rc == CAP_NEXT ? cap_iter_next_raw(shadow) : NULL;
    if (!v || shadow->src < 0) {
        *out = v;
        return rc != CAP_NEXT ? rc : v || !PyErr_Occurred() ? CAP_NEXT : CAP_ERR;
    }
    rc = cap_t_derived(T, v, CAP_S_INDEX, shadow->src, (int)(shadow->i - 1), NULL, out);
    Py_DECREF(v);
    return rc;
}

bool cap_t_outside_iter_advanced(cap_trace *T, PyObject *it)
{
    PyObject *key = seq_iterator(it) ? shadow_key(it) : NULL;
    bool found = key && PyDict_GetItem(T->iter_shadows, key) != NULL;
    Py_XDECREF(key);
    return found;
}
