/* Classes made inside the traced function.
 *
 * A class statement (`__build_class__(body, name, *bases, **kw)`), a
 * collections.namedtuple call and a dataclasses call make or change a class:
 * Python code that builds namespaces with exec and sets attributes of new
 * functions, which would break the trace at each step. When all they read is
 * known while tracing (constants, classes, modules, functions from outside;
 * never a traced tensor or size), they run for real as one call, and the
 * class is a constant of the trace, kept by the compiled code: eager makes a
 * new class per call, ptc one per trace (`type(f(x)) is type(f(x))` holds
 * under ptc only). The globals a class body reads are read through the
 * trace first, so they are guarded as if the function read them.
 *
 * Nobody outside can see a class made during the trace, so writes to it
 * (a decorator's setattr) run for real; instances and methods are traced
 * as those of any user class. */
#include "capture/trace/trace.h"

int cap_t_note_class(cap_trace *T, PyObject *cls)
{
    return cap_t_note_made(T->made_classes, cls);
}

bool cap_t_made_class(cap_trace *T, PyObject *cls)
{
    return PyType_Check(cls) && cap_t_was_made(T->made_classes, cls);
}

/* fn(args) run for real; a class it returns is one made in this trace. */
static int call_noting_class(cap_trace *T, PyObject *fn, PyObject *const *args, int nargs,
                             PyObject *kwnames, PyObject **out)
{
    int rc = cap_t_call_real_flowed(T, fn, args, nargs, kwnames, out);
    if (rc == CAP_NEXT && PyType_Check(*out) && cap_t_note_class(T, *out) < 0) {
        Py_CLEAR(*out);
        rc = CAP_ERR;
    }
    return rc;
}

/* May code running for real while tracing read v? Only what holds no traced
 * value and stays the same object on every call the guards admit. */
static bool known_while_tracing(cap_trace *T, PyObject *v)
{
    if (cap_is_tensor(v) || cap_is_symint(v))
        return false;
    return cap_is_constant(v) || PyType_Check(v) || PyModule_Check(v) ||
           (cap_is_function(v) && !cap_t_made_function(T, v)) || PyCFunction_Check(v);
}

static int unknown_input(cap_trace *T, const char *what, PyObject *v)
{
    return cap_t_break(T, CAP_B_UNINTERPRETABLE, "class definition reads %s, a traced %s", what,
                       cap_is_tensor(v) ? "tensor" : cap_tpname(Py_TYPE(v)));
}

/* The closure variables the class body reads, through the trace (guards on
 * outside cells); each must be known while tracing and what the real body
 * will read. */
static int check_closure(cap_interp *I, PyObject *body)
{
    PyObject *cells = PyObject_GetAttr(body, cap_P.s_closure);
    if (!cells)
        return CAP_ERR;
    int rc = CAP_NEXT;
    for (Py_ssize_t i = 0; rc == CAP_NEXT && PyTuple_Check(cells) && i < PyTuple_Size(cells); i++) {
        PyObject *cell = PyTuple_GetItem(cells, i);
        PyObject *real = PyObject_GetAttrString(cell, "cell_contents");
        if (!real) { /* empty: the body raises eager's NameError if it reads it */
            PyErr_Clear();
            continue;
        }
        PyObject *v = Py_NewRef(real);
        rc = cap_t_load_cell(I->T, cell, &v);
        if (rc == CAP_NEXT && (v != real || !known_while_tracing(I->T, v)))
            rc = unknown_input(I->T, "a closure variable", v);
        Py_DECREF(real);
        Py_XDECREF(v);
    }
    Py_DECREF(cells);
    return rc;
}

/* The globals the class body may read (its names found in the frame's
 * globals), read through the trace so that they are guarded. */
static int guard_body_globals(cap_interp *I, PyObject *body)
{
    PyObject *code = PyObject_GetAttr(body, cap_P.s_code);
    cap_code *c = code ? cap_code_get(code) : NULL;
    Py_XDECREF(code);
    if (!c)
        return CAP_ERR;
    PyObject *globals = I->frame->globals;
    int rc = CAP_NEXT;
    for (Py_ssize_t i = 0; rc == CAP_NEXT && i < PyTuple_Size(c->names); i++) {
        PyObject *name = PyTuple_GetItem(c->names, i);
        PyObject *v = PyDict_Check(globals) ? PyDict_GetItemWithError(globals, name) : NULL;
        if (!v) {
            rc = PyErr_Occurred() ? CAP_ERR : CAP_NEXT;
            continue;
        }
        PyObject *w = NULL;
        rc = cap_t_load_global(I->T, I->frame, name, v, false, &w);
        if (rc == CAP_NEXT && cap_is_tensor(w))
            rc = unknown_input(I->T, "a global", w);
        Py_XDECREF(w);
    }
    return rc;
}

int cap_t_build_class(cap_interp *I, PyObject *build_class, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    if (nargs < 2 || !cap_is_function(args[0]))
        return cap_t_break(T, CAP_B_UNINTERPRETABLE, "class definition");
    int npos = nargs - (kwnames ? (int)PyTuple_Size(kwnames) : 0);
    for (int i = 1; i < nargs; i++)
        if (!known_while_tracing(T, args[i]))
            return unknown_input(T, i < npos ? "a base" : "a keyword", args[i]);
    int rc = check_closure(I, args[0]);
    if (rc == CAP_NEXT)
        rc = guard_body_globals(I, args[0]);
    return rc == CAP_NEXT ? call_noting_class(T, build_class, args, nargs, kwnames, out) : rc;
}

/* A function that only makes or changes classes: collections.namedtuple,
 * functools.total_ordering, and the functions of the dataclasses module
 * (dataclass, the wrapper dataclass(...) returns, make_dataclass, fields). */
static bool class_factory(PyObject *fn)
{
    static PyObject *namedtuple, *total_ordering;
    if (!namedtuple) {
        namedtuple = cap_import_path("collections.namedtuple");
        total_ordering = cap_import_path("functools.total_ordering");
        PyErr_Clear();
    }
    if (fn == namedtuple || fn == total_ordering)
        return fn != NULL;
    if (!cap_is_function(fn))
        return false;
    PyObject *mod = PyObject_GetAttr(fn, cap_P.s_module);
    bool dataclasses =
        mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "dataclasses") == 0;
    Py_XDECREF(mod);
    PyErr_Clear();
    return dataclasses;
}

/* An argument of a class factory: a constant (or a list or tuple of them)
 * or a class made in this trace, which it may change. */
static bool factory_argument(cap_trace *T, PyObject *a)
{
    if (cap_is_constant(a) || cap_t_made_class(T, a))
        return true;
    if (!PyList_Check(a) && !PyTuple_Check(a))
        return false;
    for (Py_ssize_t k = 0; k < PySequence_Size(a); k++)
        if (!cap_is_constant(PyList_Check(a) ? PyList_GetItem(a, k) : PyTuple_GetItem(a, k)))
            return false;
    return true;
}

int cap_t_class_factory_call(cap_trace *T, PyObject *fn, PyObject *const *args, int nargs,
                             PyObject *kwnames, PyObject **out)
{
    if (!class_factory(fn))
        return CAP_NONE;
    for (int i = 0; i < nargs; i++)
        if (!factory_argument(T, args[i]))
            return CAP_NONE;
    return call_noting_class(T, fn, args, nargs, kwnames, out);
}
