/* torch <-> ptc tensors: a torch tensor seen as a borrowed ptc tensor (its
 * memory, dtype, sizes, strides and device), and a ptc tensor copied into a
 * new torch tensor. The backends below backend.c and the repro dumps above
 * them share these; they know nothing of entries or backends.
 */
#include "capture/backend/backend.h"

int cap_torch_to_ptc(PyObject *t, ptc_tensor *out, PyObject **held)
{
    cap_tmeta m;
    if (cap_tmeta_read_layout(t, &m) < 0)
        return -1;
    PyObject *ptr = PyObject_CallMethodObjArgs(t, cap_T.s_data_ptr, NULL);
    void *data = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
    Py_XDECREF(ptr);
    Py_DECREF(m.dtype);
    if (PyErr_Occurred())
        return -1;
    if ((int)m.dt < 0) {
        PyErr_SetString(cap_InternalError, "ptc: tensor dtype not supported by ptc");
        return -1;
    }
    *out = ptc_tensor_borrow(data, m.dt, m.ndim, m.sizes, m.strides);
    out->device = m.dev;
    *held = Py_NewRef(t);
    return 0;
}

/* A new torch tensor with ptc tensor t's contents (CPU). */
PyObject *cap_torch_from_ptc(const ptc_tensor *t)
{
    PyObject *shape = PyTuple_New(t->ndim);
    for (int i = 0; shape && i < t->ndim; i++)
        PyTuple_SetItem(shape, i, PyLong_FromLongLong(t->sizes[i]));
    PyObject *kw = Py_BuildValue("{s:O}", "dtype", cap_dtype_obj(t->dtype));
    PyObject *args = shape ? PyTuple_Pack(1, shape) : NULL;
    PyObject *r = args && kw ? PyObject_Call(cap_T.empty, args, kw) : NULL;
    Py_XDECREF(shape);
    Py_XDECREF(kw);
    Py_XDECREF(args);
    if (!r)
        return NULL;
    PyObject *ptr = PyObject_CallMethodObjArgs(r, cap_T.s_data_ptr, NULL);
    void *dst = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
    Py_XDECREF(ptr);
    ptc_tensor d = ptc_tensor_borrow(dst, t->dtype, t->ndim, t->sizes, NULL);
    ptc_error err;
    if (!dst || ptc_tensor_copy(&d, t, &err) < 0) {
        Py_DECREF(r);
        PyErr_Format(cap_InternalError, "ptc: copying an output failed: %s", err.msg);
        return NULL;
    }
    return r;
}
