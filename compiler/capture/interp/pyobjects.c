/* Small helpers on Python objects that every layer of capture uses: kinds
 * of callables, tuples from arrays, cells, special-method lookup as CPython
 * does it (on the type, bound to the object), type names for messages,
 * imports by dotted path, and the one warning for what ptc does not act on.
 * They know nothing of frames or tracing.
 */
#include "capture/interp/interp.h"

#include <string.h>

bool cap_is_function(PyObject *o)
{
    return o && PyObject_TypeCheck(o, (PyTypeObject *)cap_P.FunctionType);
}

bool cap_is_method(PyObject *o)
{
    return o && Py_TYPE(o) == (PyTypeObject *)cap_P.MethodType;
}

PyObject *cap_tuple_from_array(PyObject *const *items, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++)
        PyTuple_SetItem(t, i, Py_NewRef(items[i]));
    return t;
}

PyObject *cap_cell_new(PyObject *v)
{
    return v ? PyObject_CallOneArg_compat(cap_P.CellType, v) : PyObject_CallNoArgs(cap_P.CellType);
}

PyObject *cap_cell_get(PyObject *cell)
{
    PyObject *v = PyObject_GetAttr(cell, cap_P.s_cell_contents);
    if (!v && PyErr_ExceptionMatches(PyExc_ValueError))
        PyErr_Clear(); /* empty cell */
    return v;
}

int cap_cell_set(PyObject *cell, PyObject *v)
{
    return PyObject_SetAttr(cell, cap_P.s_cell_contents, v);
}

PyObject *PyObject_CallOneArg_compat(PyObject *fn, PyObject *arg)
{
    PyObject *args = PyTuple_Pack(1, arg);
    PyObject *r = args ? PyObject_Call(fn, args, NULL) : NULL;
    Py_XDECREF(args);
    return r;
}

/* _PyType_Lookup: the attribute `name` in t's MRO dicts, borrowed. */
PyObject *cap_type_lookup(PyTypeObject *t, PyObject *name)
{
    PyObject *mro = PyObject_GetAttr((PyObject *)t, cap_P.s_mro);
    PyObject *found = NULL;
    if (!mro) {
        PyErr_Clear();
        return NULL;
    }
    for (Py_ssize_t i = 0; !found && i < PyTuple_Size(mro); i++) {
        PyObject *base = PyTuple_GetItem(mro, i);
        PyObject *d = PyObject_GetAttr(base, cap_P.s_dict);
        if (!d) {
            PyErr_Clear();
            continue;
        }
        PyObject *v = PyObject_GetItem(d, name);
        if (v) {
            found = v;
            Py_DECREF(v); /* still owned by the class dict */
        } else {
            PyErr_Clear();
        }
        Py_DECREF(d);
    }
    Py_DECREF(mro);
    return found;
}

/* Binds a descriptor found on obj's type (like _PyObject_LookupSpecial). */
PyObject *cap_bind_descr(PyObject *descr, PyObject *obj)
{
    descrgetfunc get = (descrgetfunc)PyType_GetSlot(Py_TYPE(descr), Py_tp_descr_get);
    if (!get)
        return Py_NewRef(descr);
    return get(descr, obj, (PyObject *)Py_TYPE(obj));
}

PyObject *cap_lookup_special(PyObject *obj, PyObject *name)
{
    PyObject *descr = cap_type_lookup(Py_TYPE(obj), name);
    return descr ? cap_bind_descr(descr, obj) : NULL;
}

int cap_name_index(const char *name, const char *const *names)
{
    for (int i = 0; name && names[i]; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

const char *cap_tpname(PyTypeObject *t)
{
    static char ring[8][128];
    static int next;
    char *buf = ring[next++ & 7];
    PyObject *n = t ? PyType_GetName(t) : NULL;
    snprintf(buf, sizeof ring[0], "%s", n ? PyUnicode_AsUTF8(n) : "?");
    Py_XDECREF(n);
    if (!n)
        PyErr_Clear();
    return buf;
}

/* ptc._notices.not_acted_on(text): one warning per process, and a line in
 * ptexplain's Notes. A notice that cannot be given (warnings made errors)
 * leaves the caller's work as it is: the text is recorded before the warning. */
void cap_not_acted_on(const char *text)
{
    PyObject *fn = cap_import_path("ptc._notices.not_acted_on");
    PyObject *r = fn ? PyObject_CallFunction(fn, "s", text) : NULL;
    if (!r)
        PyErr_Clear();
    Py_XDECREF(r);
    Py_XDECREF(fn);
}

PyObject *cap_import_path(const char *path)
{
    char mod[256];
    const char *dot = NULL;
    PyObject *obj = NULL;
    /* The longest importable prefix, then attributes. */
    for (const char *p = path + strlen(path); p > path; p--) {
        if (*p != '.' && *p != 0)
            continue;
        snprintf(mod, sizeof mod, "%.*s", (int)(p - path), path);
        obj = PyImport_ImportModule(mod);
        if (obj) {
            dot = *p ? p + 1 : NULL;
            break;
        }
        PyErr_Clear();
    }
    while (obj && dot) {
        const char *next = strchr(dot, '.');
        char name[128];
        snprintf(name, sizeof name, "%.*s", next ? (int)(next - dot) : (int)strlen(dot), dot);
        Py_SETREF(obj, PyObject_GetAttrString(obj, name));
        dot = next ? next + 1 : NULL;
    }
    if (!obj)
        PyErr_Clear();
    return obj;
}

void cap_spread_args(PyObject *args, PyObject *kwargs, PyObject **buf, PyObject *kwnames)
{
    Py_ssize_t n = PyTuple_Size(args), pos = 0, k = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        buf[i] = PyTuple_GetItem(args, i);
    PyObject *key, *value;
    while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
        PyTuple_SetItem(kwnames, k, Py_NewRef(key));
        buf[n + k++] = value;
    }
}
