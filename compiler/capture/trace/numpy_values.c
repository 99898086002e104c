/* numpy values as the trace sees them; numpy is never imported here: with
 * no numpy module loaded, no numpy value can exist.
 *
 * Scalars (np.float32(2.0), np.int64(3), np.bool_(True)) are immutable, so
 * constants guarded on type and value, as Python numbers are (sources.c);
 * as operands of torch calls they are the Python number torch itself reads
 * them as. torch's argument parser takes a numpy integer as an int and every
 * other numpy scalar, np.bool_ included, as a float (torch.ones(2,
 * dtype=torch.int32) * np.bool_(True) is float32), so a numpy scalar keeps
 * eager's result dtype by becoming that number. Complex scalars are left
 * out (ptc has no complex dtype).
 *
 * Arrays reach a graph through torch.from_numpy: an outside ndarray's
 * torch.from_numpy(a) is a tensor source of its own (CAP_S_FROM_NUMPY), a
 * graph input made afresh from the array on every call and guarded like
 * any tensor input, so it shares the array's memory as eager's does and
 * writes to it are written back into the array.
 */
#include "capture/trace/trace.h"

/* numpy.integer, numpy.floating and numpy.bool_, once numpy is imported. */
static PyObject *numpy_types[3];
static PyObject *ndarray_type, *from_numpy;

static bool numpy_types_known(void)
{
    if (numpy_types[0])
        return true;
    PyObject *np = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");
    if (!np)
        return false;
    static const char *names[3] = {"integer", "floating", "bool_"};
    ndarray_type = PyObject_GetAttrString(np, "ndarray");
    if (!ndarray_type || !PyType_Check(ndarray_type)) {
        PyErr_Clear();
        Py_CLEAR(ndarray_type);
        return false;
    }
    PyObject *found[3];
    for (int i = 0; i < 3; i++) {
        found[i] = PyObject_GetAttrString(np, names[i]);
        if (!found[i] || !PyType_Check(found[i])) {
            PyErr_Clear();
            for (int k = 0; k <= i; k++)
                Py_XDECREF(found[k]);
            return false;
        }
    }
    for (int i = 0; i < 3; i++)
        numpy_types[i] = found[i]; /* kept for the life of the process */
    return true;
}

static int numpy_kind(PyObject *o)
{
    if (PyLong_Check(o) || PyBool_Check(o) || !numpy_types_known())
        return -1;
    for (int i = 0; i < 3; i++)
        if (PyObject_TypeCheck(o, (PyTypeObject *)numpy_types[i]))
            return i;
    return -1;
}

bool cap_is_numpy_scalar(PyObject *o)
{
    return numpy_kind(o) >= 0;
}

PyObject *cap_numpy_scalar_number(PyObject *o)
{
    switch (numpy_kind(o)) {
    case 0:
        return PyNumber_Index(o);
    case 1:
    case 2:
        return PyNumber_Float(o);
    default:
        PyErr_Format(PyExc_TypeError, "%s is not a numpy scalar", cap_tpname(Py_TYPE(o)));
        return NULL;
    }
}

bool cap_is_ndarray(PyObject *o)
{
    return o && numpy_types_known() && (PyObject *)Py_TYPE(o) == ndarray_type;
}

PyObject *cap_ndarray_backward_dims(PyObject *a)
{
    PyObject *strides = PyObject_GetAttrString(a, "strides"), *dims = strides ? PyList_New(0) : NULL;
    for (Py_ssize_t i = 0; dims && i < PyTuple_Size(strides); i++) {
        PyObject *d = PyLong_AsLong(PyTuple_GetItem(strides, i)) < 0 ? PyLong_FromSsize_t(i) : NULL;
        if (d && PyList_Append(dims, d) < 0)
            Py_CLEAR(dims);
        Py_XDECREF(d);
    }
    PyObject *t = dims && !PyErr_Occurred() ? (PyList_Size(dims) ? PyList_AsTuple(dims) : Py_NewRef(Py_None))
                                             : NULL;
    Py_XDECREF(strides);
    Py_XDECREF(dims);
    return t;
}

PyObject *cap_ndarray_tensor(PyObject *a, PyObject *flip_dims)
{
    if (!cap_is_ndarray(a)) {
        PyErr_Format(PyExc_TypeError, "expected np.ndarray (got %s)", cap_tpname(Py_TYPE(a)));
        return NULL;
    }
    PyObject *flags = PyObject_GetAttrString(a, "flags");
    PyObject *writeable = flags ? PyObject_GetAttrString(flags, "writeable") : NULL;
    int w = writeable ? PyObject_IsTrue(writeable) : -1;
    Py_XDECREF(flags);
    Py_XDECREF(writeable);
    if (w <= 0) {
        if (w == 0)
            PyErr_SetString(PyExc_ValueError, "a read-only array (torch.from_numpy warns)");
        return NULL;
    }
    if (!from_numpy && !(from_numpy = cap_import_path("torch.from_numpy")))
        return NULL;
    if (!flip_dims || flip_dims == Py_None)
        return PyObject_CallOneArg_compat(from_numpy, a);
    PyObject *np = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");
    PyObject *forwards = np ? PyObject_CallMethod(np, "flip", "OO", a, flip_dims) : NULL;
    PyObject *t = forwards ? PyObject_CallOneArg_compat(from_numpy, forwards) : NULL;
    Py_XDECREF(forwards);
    return t;
}
