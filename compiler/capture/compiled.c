/* Compiled functions: what ptc.compile makes, and the entry point of every
 * call.
 *
 * For a function the starting state is one frame with the call's arguments
 * bound. For an nn.Module it is the module's forward with self bound, or,
 * while hooks are registered on it (or globally), torch's Module.__call__,
 * which runs the hooks; the NOHOOKS guard on the forward path notices hooks
 * added later. Code ptc never interprets (generators, coroutines) is simply
 * called.
 */
#include "capture/exec.h"

#include <stdlib.h>
#include <string.h>

static PyObject *module_names(PyObject *mod)
{
    PyObject *d = PyDict_New();
    PyObject *it = PyObject_CallMethod(mod, "named_modules", NULL);
    PyObject *iter = it ? PyObject_GetIter(it) : NULL, *pair;
    Py_XDECREF(it);
    while (iter && d && (pair = PyIter_Next(iter))) {
        PyObject *name = PyTuple_GetItem(pair, 0), *m = PyTuple_GetItem(pair, 1);
        PyObject *key = PyLong_FromVoidPtr(m);
        if (key && PyUnicode_GetLength(name) > 0 && !PyDict_GetItem(d, key))
            PyDict_SetItem(d, key, name);
        Py_XDECREF(key);
        Py_DECREF(pair);
    }
    Py_XDECREF(iter);
    PyErr_Clear();
    return d;
}

cap_compiled *cap_compiled_new(PyObject *target, const cap_options *opts)
{
    if (cap_torch_init() < 0)
        return NULL;
    cap_compiled *c = calloc(1, sizeof *c);
    if (!c)
        return (cap_compiled *)PyErr_NoMemory();
    c->target = Py_NewRef(target);
    c->opts = *opts;
    Py_XINCREF(c->opts.backend_fn);
    c->is_module = PyObject_TypeCheck(target, (PyTypeObject *)cap_T.Module);
    c->positions = PyDict_New();
    c->auto_dyn = PyDict_New();
    c->module_names = c->is_module ? module_names(target) : PyDict_New();
    if (cap_reports_init(&c->rep) < 0 || !c->positions || !c->auto_dyn || !c->module_names) {
        cap_compiled_free(c);
        return NULL;
    }
    return c;
}

void cap_compiled_reset(cap_compiled *c)
{
    PyDict_Clear(c->positions);
    cap_reports_clear(&c->rep);
    PyDict_Clear(c->auto_dyn);
    c->all_dynamic_failed = false;
    if (c->is_module) {
        Py_XSETREF(c->module_names, module_names(c->target));
    }
}

void cap_compiled_free(cap_compiled *c)
{
    if (!c)
        return;
    Py_XDECREF(c->positions);
    cap_reports_free(&c->rep);
    Py_XDECREF(c->auto_dyn);
    Py_XDECREF(c->module_names);
    Py_XDECREF(c->target);
    Py_XDECREF(c->opts.backend_fn);
    free(c);
}

/* ---- calls ------------------------------------------------------------------------------- */

static bool module_hooks(PyObject *mod)
{
    PyObject *keys[4] = {cap_T.s_forward_hooks, cap_T.s_forward_pre_hooks, cap_T.s_backward_hooks,
                         cap_T.s_backward_pre_hooks};
    PyObject *d = PyObject_GenericGetDict(mod, NULL);
    bool any = !d;
    for (int i = 0; d && i < 4 && !any; i++) {
        PyObject *h = PyDict_GetItem(d, keys[i]);
        any = h && PyObject_Size(h) > 0;
    }
    Py_XDECREF(d);
    PyErr_Clear();
    return any || cap_global_hooks();
}

static PyObject *compiled_call(cap_compiled *c, PyObject *args, PyObject *kwargs);

PyObject *cap_compiled_call(cap_compiled *c, PyObject *args, PyObject *kwargs)
{
    if (!cap_meas.on)
        return compiled_call(c, args, kwargs);
    /* ptexplain: the time of top-level compiled calls. */
    double t0 = ptc_now_ms();
    cap_meas.depth++;
    PyObject *r = compiled_call(c, args, kwargs);
    if (--cap_meas.depth == 0) {
        cap_meas.calls++;
        cap_meas.call_ms += ptc_now_ms() - t0;
    }
    return r;
}

/* What a call of the module runs: torch's Module.__call__ while hooks are
 * registered (it runs them), else its forward, a per-instance override
 * winning; *with_self when self goes first (a method's function). A new
 * reference, or NULL with an error. */
static PyObject *module_function(cap_compiled *c, bool *with_self)
{
    *with_self = true;
    bool hooks = module_hooks(c->target);
    PyObject *descr = hooks ? cap_type_lookup(Py_TYPE(c->target), cap_P.s_call) : NULL;
    if (hooks && descr && cap_is_function(descr))
        return Py_NewRef(descr);
    /* forward as an attribute: a per-instance override wins. */
    PyObject *bound = PyObject_GetAttr(c->target, cap_T.s_forward);
    if (bound && cap_is_method(bound)) {
        PyObject *fn = PyObject_GetAttr(bound, cap_P.s_func);
        Py_DECREF(bound);
        return fn;
    }
    *with_self = false; /* not a method: no self */
    return bound;
}

/* A call's arguments (and self) sit in an array on the stack up to this many
 * (a chosen size: a forward's arguments fit); more are allocated. */
enum { STACK_ARGS = 32 };

static PyObject *compiled_call(cap_compiled *c, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t n = PyTuple_Size(args), nkw = kwargs ? PyDict_Size(kwargs) : 0;
    PyObject *stack[STACK_ARGS];
    size_t nbuf = (size_t)(n + nkw + 1);
    PyObject **buf = nbuf <= STACK_ARGS ? stack : PyMem_Malloc(sizeof(PyObject *) * nbuf);
    PyObject *kwnames = nkw ? PyTuple_New(nkw) : NULL, *fn = NULL, *r = NULL;
    int off = 0;
    if (!buf)
        return PyErr_NoMemory();
    if (c->is_module) {
        bool with_self;
        if (!(fn = module_function(c, &with_self)))
            goto done;
        if (with_self)
            buf[off++] = c->target;
    } else {
        fn = Py_NewRef(c->target);
    }
    for (Py_ssize_t i = 0; i < n; i++)
        buf[off + i] = PyTuple_GetItem(args, i);
    Py_ssize_t pos = 0, k = 0;
    PyObject *key, *value;
    while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
        PyTuple_SetItem(kwnames, k, Py_NewRef(key));
        buf[off + n + k++] = value;
    }
    if (!cap_is_function(fn)) {
        r = PyObject_Call(c->target, args, kwargs);
        goto done;
    }
    r = cap_run_call(c, fn, buf, (int)(off + n + nkw), kwnames, c->target, args, kwargs);
done:
    Py_XDECREF(fn);
    Py_XDECREF(kwnames);
    if (buf != stack)
        PyMem_Free(buf);
    return r;
}

PyObject *cap_compiled_report(cap_compiled *c)
{
    return Py_NewRef(c->rep.events);
}
