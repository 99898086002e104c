/* torch.from_numpy, and torch.tensor and torch.as_tensor of an ndarray, in
 * the trace. ptc does not trace numpy itself (a numpy call or an ndarray's
 * method runs for real at a break, and .numpy() of a traced tensor is a
 * break, PTC-B003), so the arrays a traced function hands torch come from
 * outside the graph: arguments, globals, attributes, or values made before
 * a break. Each is a tensor input of the
 * graph (trace.h's CAP_S_FROM_NUMPY source): torch.from_numpy of the array,
 * made again on every call and guarded like any tensor input (dtype, sizes,
 * strides), so the tensor shares the array's memory as in eager, and in-place
 * writes to it reach the array after the graph.
 */
#include "capture/torch/torch.h"

#include <string.h>

/* The graph input torch.from_numpy(a) for ndarray a from outside. */
static int array_input(cap_tcall *c, PyObject *a, PyObject **out)
{
    cap_trace *T = c->T;
    if (!cap_is_ndarray(a))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s of a %s", c->m->name, cap_tpname(Py_TYPE(a)));
    int parent = cap_t_source_of(T, a);
    if (parent < 0)
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH,
                           "%s of an array ptc cannot reach from the call's inputs", c->m->name);
    PyObject *real = cap_ndarray_tensor(a);
    if (!real) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_TypeError))
            return CAP_ERR;
        /* eager warns (read-only) or raises (a dtype torch lacks): it runs for real */
        PyObject *type, *val, *tb;
        PyErr_Fetch(&type, &val, &tb);
        PyErr_NormalizeException(&type, &val, &tb);
        PyObject *msg = val ? PyObject_Str(val) : NULL;
        const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
        PyErr_Clear();
        int rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s: %s", c->m->name, m ? m : "this array");
        Py_XDECREF(msg);
        Py_XDECREF(type);
        Py_XDECREF(val);
        Py_XDECREF(tb);
        return rc;
    }
    int src = cap_source_add(T, CAP_S_FROM_NUMPY, parent, 0, 0, NULL);
    *out = src >= 0 ? cap_t_wrap(T, real, src) : NULL;
    Py_DECREF(real);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_th_from_numpy(cap_tcall *c, PyObject **out)
{
    PyObject *a = cap_targ(c, 0, "ndarray");
    if (!a || c->npos + c->nkw != 1)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "torch.from_numpy takes one array");
    return array_input(c, a, out);
}

/* torch.as_tensor(a) shares a's memory where it needs no conversion, as
 * from_numpy does; torch.tensor(a) copies it. */
int cap_th_tensor_of_array(cap_tcall *c, PyObject **out)
{
    PyObject *t = NULL;
    int rc = array_input(c, c->pos[0], &t);
    if (rc != CAP_NEXT)
        return rc;
    if (!cap_is_tensor(t)) {
        /* an array no graph value can hold (a dtype ptc lacks) */
        rc = cap_t_real_tensor(c->T, t, c->m->name);
        Py_DECREF(t);
        return rc;
    }
    rc = cap_th_tensor_of_tensor(c, (cap_tensor *)t, true, out);
    Py_DECREF(t);
    return rc;
}
