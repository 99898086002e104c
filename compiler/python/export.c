/* ptc._C._package_seal, _package_verify and _package_kernels: the C half of
 * ExportedProgram.save, ptc.load and a loaded program's module()
 * (python/ptc/_export.py). Sealing compiles the package's kernels
 * for its targets and writes its manifest (compiler/export) with the GIL
 * released while LLVM works; verifying refuses what ptc_model_load refuses.
 */
#include <Python.h>

#include "export/export.h"

PyObject *ptc_py_package_seal(PyObject *mod, PyObject *args);
PyObject *ptc_py_package_verify(PyObject *mod, PyObject *dir);
PyObject *ptc_py_package_kernels(PyObject *mod, PyObject *args);

static PyObject *raise(const ptc_error *err)
{
    char msg[1400];
    ptc_error_format(err, msg, sizeof msg);
    return PyErr_Format(PyExc_ValueError, "ptc: %s", msg);
}

PyObject *ptc_py_package_seal(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *dir;
    PyObject *targets;
    if (!PyArg_ParseTuple(args, "sO!", &dir, &PyList_Type, &targets))
        return NULL;
    enum { MAX_TARGETS = 8 };
    const char *names[MAX_TARGETS];
    Py_ssize_t n = PyList_Size(targets);
    if (n > MAX_TARGETS)
        return PyErr_Format(PyExc_ValueError, "ptc.export: at most %d targets", MAX_TARGETS);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(names[i] = PyUnicode_AsUTF8AndSize(PyList_GetItem(targets, i), NULL)))
            return NULL;
    ptc_error err;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = ptc_package_seal(dir, names, (int)n, &err);
    Py_END_ALLOW_THREADS if (rc) return raise(&err);
    Py_RETURN_NONE;
}

PyObject *ptc_py_package_verify(PyObject *mod, PyObject *dir)
{
    (void)mod;
    const char *path = PyUnicode_AsUTF8AndSize(dir, NULL);
    ptc_error err;
    if (!path)
        return NULL;
    if (ptc_package_verify(path, &err))
        return raise(&err);
    Py_RETURN_NONE;
}

PyObject *ptc_py_package_kernels(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *dir, *target;
    char out[1200];
    ptc_error err;
    if (!PyArg_ParseTuple(args, "ss", &dir, &target))
        return NULL;
    if (ptc_package_kernels(dir, target, out, sizeof out, &err))
        return raise(&err);
    if (!out[0])
        Py_RETURN_NONE;
    return PyUnicode_FromString(out);
}
