/* torch.from_numpy in the trace. ptc does not trace numpy itself (a numpy
 * call or an ndarray's method runs for real at a break, and .numpy() of a
 * traced tensor is a break, PTC-B003), so the arrays a traced function hands
 * torch.from_numpy come from outside the graph: arguments, globals,
 * attributes, or values made before a break. Each is a tensor input of the
 * graph (trace.h's CAP_S_FROM_NUMPY source): torch.from_numpy of the array,
 * made again on every call and guarded like any tensor input (dtype, sizes,
 * strides), so the tensor shares the array's memory as in eager, and in-place
 * writes to it reach the array after the graph.
 */
#include "capture/torch/torch.h"

#include <string.h>

int cap_th_from_numpy(cap_tcall *c, PyObject **out)
{
    cap_trace *T = c->T;
    PyObject *a = cap_targ(c, 0, "ndarray");
    if (!a || c->npos + c->nkw != 1)
        return cap_t_break(T, CAP_B_TRACE_ERROR, "torch.from_numpy takes one array");
    if (!cap_is_ndarray(a))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "torch.from_numpy of a %s", cap_tpname(Py_TYPE(a)));
    int parent = cap_t_source_of(T, a);
    if (parent < 0)
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH,
                           "torch.from_numpy of an array ptc cannot reach from the call's inputs");
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
        int rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "torch.from_numpy: %s", m ? m : "this array");
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
