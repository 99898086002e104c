/* The composites of compiler/passes (composite.c: flip, eye, the losses...)
 * built into the trace: their nodes through cap_build1, their constant
 * tensors (indices, weights) as graph constants. Low in the torch folder, so
 * that the torch functions with no op of their own (torch_composite.c) and
 * the views that follow mutations (torch_permviews.c: numpy's flip) build
 * them alike.
 */
#include "capture/torch/torch.h"

#include <string.h>

typedef ptc_value *V;

static ptc_node *trace_node(void *T, ptc_op op, const ptc_arg *args, int nargs)
{
    ptc_arg copy[8]; /* cap_build1 may convert them (autocast) */
    PTC_ASSERT(nargs <= 8);
    memcpy(copy, args, sizeof(ptc_arg) * (size_t)nargs);
    V v = cap_build1(T, op, copy, nargs);
    return v ? v->def : NULL;
}

/* A constant tensor made now (indices, weights): a graph constant. */
static V trace_constant(void *T, const double *data, int64_t n, ptc_dtype dt, ptc_device dev)
{
    PyObject *list = PyList_New(n);
    for (int64_t i = 0; list && i < n; i++)
        PyList_SetItem(list, i,
                       dt == PTC_I64 ? PyLong_FromLongLong((long long)data[i])
                                     : PyFloat_FromDouble(data[i]));
    PyObject *kw =
        list ? Py_BuildValue("{s:O,s:N}", "dtype", cap_dtype_obj(dt), "device", cap_device_obj(dev))
             : NULL;
    PyObject *args = kw ? PyTuple_Pack(1, list) : NULL;
    PyObject *real = args ? PyObject_Call(cap_T.tensor_fn, args, kw) : NULL;
    PyObject *t = real ? cap_tensor_const(T, real) : NULL;
    Py_XDECREF(list);
    Py_XDECREF(kw);
    Py_XDECREF(args);
    Py_XDECREF(real);
    V v = t ? cap_val(t) : NULL;
    Py_XDECREF(t); /* the value lives in the graph */
    if (!v && !PyErr_Occurred())
        cap_t_break(T, CAP_B_TRACE_ERROR, "making a constant tensor failed");
    return v;
}

static const ptc_composer_hooks trace_hooks = {trace_node, trace_constant};

ptc_composer *cap_composer(cap_trace *T)
{
    return ptc_composer_new(T->g, &trace_hooks, T);
}
