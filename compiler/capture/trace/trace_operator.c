/* operator.itemgetter, attrgetter and methodcaller objects called while
 * tracing, and operator's functions of the language's operators
 * (operator.add, operator.lt, operator.neg, ...).
 *
 * Their C __call__ would run obj[k], getattr(obj, name) or obj.name(*args)
 * for real, which a symbolic tensor or an outside object cannot take. Each
 * getter is taken apart through its __reduce__ (the items, dotted names, or
 * method name and arguments it was made with; they cannot change after it is
 * made, so an identity guard on a getter from outside covers them) and the
 * same operations run
 * through the interpreter instead: subscripts, attribute reads and calls
 * traced as if the program had written them out.
 *
 * operator.add(a, b) is a + b, but run for real it would call a Python
 * __add__ (or a torch function inside one) on what the trace holds: a
 * torch._numpy ndarray wrapping a symbolic tensor, as Dynamo's graphs make
 * for x.numpy() + 1 (torch._dynamo.utils.numpy_operator_wrapper), reached
 * torch.add for real and crashed it. Each such function has a Python twin,
 * `def add(a, b): return a + b`, compiled once, which the interpreter
 * inlines in its place, so the operator is traced as the program's own.
 */
#include "capture/trace/trace.h"

#include <string.h>

typedef enum { GETTER_ITEM, GETTER_ATTR, GETTER_METHOD } getter_kind;

/* Which getter o is, or -1. */
static int getter_kind_of(PyObject *o)
{
    static PyObject *types[3];
    static bool init;
    if (!init) {
        init = true;
        static const char *paths[3] = {"operator.itemgetter", "operator.attrgetter",
                                       "operator.methodcaller"};
        for (int k = 0; k < 3; k++) {
            types[k] = cap_import_path(paths[k]);
            PyErr_Clear();
        }
    }
    for (int k = 0; k < 3; k++)
        if (types[k] && Py_TYPE(o) == (PyTypeObject *)types[k])
            return k;
    return -1;
}

/* attrgetter's "a.b.c": one attribute read per dotted part. */
static int dotted_attr(cap_interp *I, PyObject *obj, PyObject *path, PyObject **out)
{
    PyObject *dot = PyUnicode_FromString(".");
    PyObject *parts = dot ? PyUnicode_Split(path, dot, -1) : NULL;
    Py_XDECREF(dot);
    if (!parts)
        return CAP_ERR;
    cap_frame *outer = I->frame;
    PyObject *cur = Py_NewRef(obj);
    int rc = CAP_NEXT;
    for (Py_ssize_t i = 0; rc == CAP_NEXT && i < PyList_Size(parts); i++) {
        PyObject *next = NULL;
        rc = cap_t_settle(I, outer, cap_op_getattr(I, cur, PyList_GetItem(parts, i), &next), &next);
        Py_SETREF(cur, rc == CAP_NEXT ? next : NULL);
    }
    Py_DECREF(parts);
    if (rc == CAP_NEXT)
        *out = cur;
    else
        Py_XDECREF(cur);
    return rc;
}

/* itemgetter(k...) / attrgetter(name...) on obj: one value, or a tuple of
 * them when the getter was made with several. */
static int get_each(cap_interp *I, int kind, PyObject *keys, PyObject *obj, PyObject **out)
{
    cap_frame *outer = I->frame;
    Py_ssize_t n = PyTuple_Size(keys);
    PyObject *values = PyTuple_New(n);
    if (!values)
        return CAP_ERR;
    int rc = CAP_NEXT;
    for (Py_ssize_t i = 0; rc == CAP_NEXT && i < n; i++) {
        PyObject *key = PyTuple_GetItem(keys, i), *v = NULL;
        rc = kind == GETTER_ITEM ? cap_t_settle(I, outer, cap_op_getitem(I, obj, key, &v), &v)
                                 : dotted_attr(I, obj, key, &v);
        if (rc == CAP_NEXT)
            PyTuple_SetItem(values, i, v);
    }
    if (rc == CAP_NEXT)
        *out = n == 1 ? Py_NewRef(PyTuple_GetItem(values, 0)) : Py_NewRef(values);
    Py_DECREF(values);
    return rc;
}

/* methodcaller(name, *args, **kw)(obj): obj.name(*args, **kw). Its reduce
 * is (methodcaller, (name, *args)), or with keywords
 * (partial(methodcaller, name, **kw), args). */
static int call_method(cap_interp *I, PyObject *reduced, PyObject *obj, PyObject **out)
{
    PyObject *maker = PyTuple_GetItem(reduced, 0), *rargs = PyTuple_GetItem(reduced, 1);
    PyObject *name, *margs, *kw = NULL, *fn = NULL, *pargs = NULL;
    if (cap_is_partial(maker)) {
        if (cap_partial_unpack(maker, &fn, &pargs, &kw) < 0)
            return CAP_ERR;
        name = PyTuple_GetItem(pargs, 0);
        margs = Py_NewRef(rargs);
    } else {
        name = PyTuple_GetItem(rargs, 0);
        margs = PyTuple_GetSlice(rargs, 1, PyTuple_Size(rargs));
    }
    PyObject *method = NULL;
    cap_frame *outer = I->frame;
    int rc = margs && name ? cap_t_settle(I, outer, cap_op_getattr(I, obj, name, &method), &method)
                           : CAP_ERR;
    if (rc == CAP_NEXT) {
        rc = cap_op_call_ex(I, method, margs, kw && PyDict_Size(kw) ? kw : NULL, out);
        Py_DECREF(method);
    }
    Py_XDECREF(margs);
    Py_XDECREF(fn);
    Py_XDECREF(pargs);
    Py_XDECREF(kw);
    return rc;
}

int cap_t_call_getter(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out)
{
    int kind = getter_kind_of(callable);
    if (kind < 0)
        return CAP_NONE;
    if (nargs != 1 || kwnames) /* eager's TypeError, raised by the real call */
        return cap_t_break(I->T, CAP_B_UNSUPPORTED_CALL, "operator getter with %d arguments",
                           nargs);
    /* one from outside: its identity, so that another getter (other keys)
       is not served by this trace */
    int src = cap_t_source_of(I->T, callable);
    if (src >= 0 && cap_guard_add(I->T, CAP_G_ID, src, callable, 0) < 0)
        return CAP_ERR;
    PyObject *reduced = PyObject_CallMethod(callable, "__reduce__", NULL);
    if (!reduced)
        return CAP_ERR;
    int rc = CAP_ERR;
    if (PyTuple_Check(reduced) && PyTuple_Size(reduced) >= 2 &&
        PyTuple_Check(PyTuple_GetItem(reduced, 1)))
        rc = kind == GETTER_METHOD ? call_method(I, reduced, args[0], out)
                                   : get_each(I, kind, PyTuple_GetItem(reduced, 1), args[0], out);
    else
        PyErr_SetString(cap_InternalError, "operator getter: unexpected __reduce__");
    Py_DECREF(reduced);
    return rc;
}

/* operator's functions of operators, and the expression each is: of a
 * alone (the unary ones, first), else of a and b. */
static const char *const operator_twins[][2] = {
    {"neg", "-a"},          {"pos", "+a"},    {"invert", "~a"},  {"abs", "abs(a)"},
    {"add", "a + b"},       {"sub", "a - b"}, {"mul", "a * b"},  {"truediv", "a / b"},
    {"floordiv", "a // b"}, {"mod", "a % b"}, {"pow", "a ** b"}, {"matmul", "a @ b"},
    {"and_", "a & b"},      {"or_", "a | b"}, {"xor", "a ^ b"},  {"lshift", "a << b"},
    {"rshift", "a >> b"},   {"lt", "a < b"},  {"le", "a <= b"},  {"eq", "a == b"},
    {"ne", "a != b"},       {"gt", "a > b"},  {"ge", "a >= b"},  {"getitem", "a[b]"},
};
enum { UNARY_TWINS = 4 };

/* _operator's function -> its twin, made on first use (NULL on failure,
 * with an exception). */
static PyObject *twins_by_function(void)
{
    static PyObject *twins;
    if (twins)
        return twins;
    PyObject *op = PyImport_ImportModule("_operator");
    PyObject *scope = PyDict_New(), *made = PyDict_New();
    bool ok = op && scope && made &&
              PyDict_SetItemString(scope, "__builtins__", PyEval_GetBuiltins()) == 0;
    size_t n = sizeof operator_twins / sizeof operator_twins[0];
    for (size_t i = 0; ok && i < n; i++) {
        const char *name = operator_twins[i][0], *expr = operator_twins[i][1];
        char src[128];
        snprintf(src, sizeof src, "def %s(a%s):\n    return %s\n", name,
                 i < UNARY_TWINS ? "" : ", b", expr);
        PyObject *code = Py_CompileString(src, "<ptc operator twin>", Py_file_input);
        PyObject *r = code ? PyEval_EvalCode(code, scope, scope) : NULL;
        PyObject *fn = r ? PyDict_GetItemString(scope, name) : NULL;
        PyObject *real = fn ? PyObject_GetAttrString(op, name) : NULL;
        ok = real && PyDict_SetItem(made, real, fn) == 0;
        Py_XDECREF(real);
        Py_XDECREF(r);
        Py_XDECREF(code);
    }
    Py_XDECREF(op);
    Py_XDECREF(scope);
    if (!ok) {
        Py_XDECREF(made);
        return NULL;
    }
    return twins = made;
}

int cap_t_call_operator(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                        PyObject *kwnames, PyObject **out)
{
    if (!PyCFunction_Check(callable) || kwnames)
        return CAP_NONE;
    bool constant = true; /* constants keep the real call, which is the same */
    for (int i = 0; i < nargs; i++)
        constant = constant && cap_is_constant(args[i]);
    if (constant)
        return CAP_NONE;
    PyObject *twins = twins_by_function();
    if (!twins)
        return CAP_ERR;
    PyObject *twin = PyDict_GetItemWithError(twins, callable);
    if (!twin)
        return PyErr_Occurred() ? CAP_ERR : CAP_NONE;
    PyObject *argtuple = PyTuple_New(nargs);
    for (int i = 0; argtuple && i < nargs; i++)
        PyTuple_SetItem(argtuple, i, Py_NewRef(args[i]));
    /* a wrong count raises the twin's TypeError, which breaks; eager's
       real call then raises its own */
    int rc = argtuple ? cap_op_call_ex(I, twin, argtuple, NULL, out) : CAP_ERR;
    Py_XDECREF(argtuple);
    return rc;
}
