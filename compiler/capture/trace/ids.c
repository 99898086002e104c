/* id() while tracing.
 *
 * An object the trace makes is rebuilt by the entry's recipes on every call,
 * and an outside object may be another one next call (an argument is guarded
 * on its type, not its identity), so the id the trace sees is only good for
 * the relations it answers inside the call (`id(a) == id(b)`, an id as a
 * key of a dict the trace made). Every id taken is remembered with its
 * object; a value that leaves the call (returned, stored by a replayed side
 * effect, held by a resume frame) is rebuilt as id() of the object's own
 * recipe (entry.c), so it is the id of the object the caller gets. A resume
 * state's ids (cap_interp.ids) are loaded by the next trace without a value
 * guard, so that a new object each call recompiles nothing; arithmetic or
 * formatting on an id, whose result no recipe could follow, runs for real.
 * Left: hash() and repr() of an object made in the trace (derived from its
 * address) and orderings of ids (`id(a) < id(b)`) are the trace's answers.
 */
#include "capture/trace/trace.h"

int cap_t_id(cap_trace *T, PyObject *obj, PyObject **out)
{
    /* id() of a traced tensor would be a different object's each call. */
    if (cap_is_tensor(obj))
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "id() of a tensor");
    PyObject *id = PyLong_FromVoidPtr(obj);
    /* Kept alive to the end of the trace, so no object made later takes
       its id. */
    if (!id || PyDict_SetItem(T->made_ids, id, obj) < 0) {
        Py_XDECREF(id);
        return CAP_ERR;
    }
    *out = id;
    return CAP_NEXT;
}

PyObject *cap_t_id_object(cap_trace *T, PyObject *v)
{
    if (!PyLong_CheckExact(v) || PyDict_Size(T->made_ids) == 0)
        return NULL;
    PyObject *obj = PyDict_GetItemWithError(T->made_ids, v);
    PyErr_Clear();
    return obj;
}

bool cap_t_holds_id(cap_trace *T, PyObject *v)
{
    if (PyDict_Size(T->made_ids) == 0)
        return false;
    if (cap_t_id_object(T, v))
        return true;
    if (!PyTuple_Check(v))
        return false;
    for (Py_ssize_t i = 0; i < PyTuple_Size(v); i++)
        if (cap_t_holds_id(T, PyTuple_GetItem(v, i)))
            return true;
    return false;
}

bool cap_t_resumed_id(cap_trace *T, PyObject *v)
{
    if (!T->resumed_ids || !PyLong_CheckExact(v))
        return false;
    PyObject *k = PyLong_FromVoidPtr(v);
    bool is = k && PyDict_GetItemWithError(T->resumed_ids, k) == v;
    Py_XDECREF(k);
    PyErr_Clear();
    return is;
}

int cap_t_check_id_use(cap_trace *T, PyObject *v)
{
    /* A number or text made from an id would be the trace's, a constant:
       the operation runs for real. */
    if (cap_t_id_object(T, v) || cap_t_resumed_id(T, v))
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "arithmetic or formatting on an id()");
    return CAP_NEXT;
}
