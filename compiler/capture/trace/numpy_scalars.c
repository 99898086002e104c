/* numpy scalars (np.float32(2.0), np.int64(3), np.bool_(True)) as the trace
 * sees them: immutable values, so constants guarded on type and value, as
 * Python numbers are (sources.c); and as operands of torch calls, the Python
 * number torch itself reads them as. torch's argument parser takes a numpy
 * integer as an int and every other numpy scalar, np.bool_ included, as a
 * float (torch.ones(2, dtype=torch.int32) * np.bool_(True) is float32), so a
 * numpy scalar keeps eager's result dtype by becoming that number.
 *
 * numpy is never imported here: with no numpy module loaded, no numpy
 * scalar can exist. Complex scalars are left out (ptc has no complex dtype).
 */
#include "capture/trace/trace.h"

/* numpy.integer, numpy.floating and numpy.bool_, once numpy is imported. */
static PyObject *numpy_types[3];

static bool numpy_types_known(void)
{
    if (numpy_types[0])
        return true;
    PyObject *np = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");
    if (!np)
        return false;
    static const char *names[3] = {"integer", "floating", "bool_"};
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
