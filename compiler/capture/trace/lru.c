/* Calls of functools.lru_cache / functools.cache wrappers while tracing.
 *
 * Eager returns the cached result for arguments seen before, else runs the
 * wrapped function and caches what it returns. Two cases trace as eager runs:
 *  - every argument a constant of the trace (guarded like any other): the
 *    wrapper itself is called for real, once, while tracing; its result (the
 *    cached object, the one eager returns on every later call) is a constant
 *    of the graph. The cache fills as eager's does.
 *  - some arguments made in this call (tensors the trace computed, symbolic
 *    sizes): a fresh tensor is a new key for every eager call, so eager runs
 *    the wrapped function every time; the trace inlines __wrapped__.
 * An object from outside whose type hashes and compares by identity (a
 * logging.Logger, a module: object's own __hash__ and __eq__) is a key by
 * its identity alone, so under an identity guard it counts as a constant
 * (transformers' `logger.warning_once(msg)` is such a call).
 * Anything else (a tensor or other object from outside, an unhashable value
 * made here) could meet a cached result the trace cannot see: the call is a
 * break and runs for real. The cache's statistics (cache_info) are not kept for
 * the calls a compiled graph replaces, and cache_clear() after a compile does
 * not make the graph call the function again (man ptc.7).
 */
#include "capture/trace/trace.h"

static bool is_lru_wrapper(PyObject *o)
{
    static PyObject *lru_type;
    if (!lru_type && !(lru_type = cap_import_path("functools._lru_cache_wrapper"))) {
        PyErr_Clear();
        return false;
    }
    return (PyObject *)Py_TYPE(o) == lru_type;
}

enum { ARGS_CONSTANT, ARGS_MADE_HERE, ARGS_OTHER };

/* Does the cache key a, an object from outside, by its identity only? */
static bool keyed_by_identity(PyObject *a)
{
    PyTypeObject *t = Py_TYPE(a), *object = &PyBaseObject_Type;
    return PyType_GetSlot(t, Py_tp_hash) == PyType_GetSlot(object, Py_tp_hash) &&
           PyType_GetSlot(t, Py_tp_richcompare) == PyType_GetSlot(object, Py_tp_richcompare);
}

/* An outside object's source when the cache keys it by identity, else -1. */
static int identity_key_source(cap_trace *T, PyObject *a)
{
    return cap_is_tensor(a) || !keyed_by_identity(a) ? -1 : cap_t_source_of(T, a);
}

/* How the arguments (keyword values included) meet the cache. */
static int classify(cap_trace *T, PyObject *const *args, int n)
{
    int kind = ARGS_CONSTANT;
    for (int i = 0; i < n; i++) {
        PyObject *a = args[i];
        if (cap_is_constant(a) || identity_key_source(T, a) >= 0)
            continue;
        bool made_tensor = cap_is_tensor(a) && !((cap_tensor *)a)->input_v;
        if (!made_tensor && !cap_is_symint(a))
            return ARGS_OTHER;
        kind = ARGS_MADE_HERE;
    }
    return kind;
}

/* Constant arguments: the outside objects among them are keys by identity,
 * guarded so (0 / -1). */
static int guard_identity_keys(cap_trace *T, PyObject *const *args, int n)
{
    for (int i = 0; i < n; i++) {
        int src = cap_is_constant(args[i]) ? -1 : identity_key_source(T, args[i]);
        if (src >= 0 && cap_guard_add(T, CAP_G_ID, src, args[i], 0) < 0)
            return -1;
    }
    return 0;
}

/* The wrapper called for real: a tensor it returns is the cached object
 * itself, read by the graph as an input (a constant of the trace), as eager
 * reads that same tensor on every call. */
static int cached_result(cap_trace *T, PyObject *callable, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out)
{
    PyObject *r = cap_call_real(callable, args, nargs, kwnames);
    if (!r || !cap_t_is_real_tensor(r)) {
        *out = r;
        return r ? CAP_NEXT : CAP_ERR;
    }
    int src = cap_t_const_source(T, r);
    *out = src >= 0 ? cap_t_wrap(T, r, src) : NULL;
    Py_DECREF(r);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* wrapper.__wrapped__ traced, reached from the wrapper's source when it has
 * one (so that replacing the function or its code is seen by the guards). It
 * is called through the interpreter's call row (cap_t_call, whose call path
 * reaches this file), so that lru.c sits below calls.c. */
static int call_wrapped(cap_interp *I, PyObject *callable, int src, PyObject *const *args,
                        int nargs, PyObject *kwnames, PyObject **out)
{
    static PyObject *name;
    if (!name && !(name = PyUnicode_InternFromString("__wrapped__")))
        return CAP_ERR;
    PyObject *fn = PyObject_GetAttr(callable, name), *w = NULL;
    int s = fn && src >= 0 ? cap_source_add(I->T, CAP_S_ATTR, src, 0, 0, name) : -1;
    if (fn)
        w = s >= 0 ? cap_t_wrap(I->T, fn, s) : Py_NewRef(fn);
    int rc = w ? cap_hooks.call(I, w, args, nargs, kwnames, out) : CAP_ERR;
    Py_XDECREF(fn);
    Py_XDECREF(w);
    return rc;
}

int cap_t_call_lru(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                   PyObject *kwnames, PyObject **out)
{
    if (!is_lru_wrapper(callable))
        return CAP_NONE;
    /* The wrapper by identity (its source's own guard checks only its
       type): another cache, or another function, is another trace. */
    int src = cap_t_source_of(I->T, callable);
    if (src >= 0 && cap_guard_add(I->T, CAP_G_ID, src, callable, 0) < 0)
        return CAP_ERR;
    switch (classify(I->T, args, nargs)) { /* nargs counts the keyword values too */
    case ARGS_CONSTANT:
        if (guard_identity_keys(I->T, args, nargs) < 0)
            return CAP_ERR;
        return cached_result(I->T, callable, args, nargs, kwnames, out);
    case ARGS_MADE_HERE: {
        return call_wrapped(I, callable, src, args, nargs, kwnames, out);
    }
    default:
        return cap_t_break(I->T, CAP_B_UNSUPPORTED_CALL,
                           "call to the functools.lru_cache function %s with an argument from "
                           "outside the graph (its cache may hold a result for it)",
                           cap_func_name(callable));
    }
}
