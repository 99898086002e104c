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
    c->events = PyList_New(0);
    static int serials;
    c->serial = ++serials;
    c->warned = PySet_New(NULL);
    c->auto_dyn = PyDict_New();
    c->module_names = c->is_module ? module_names(target) : PyDict_New();
    if (!c->positions || !c->events || !c->warned || !c->auto_dyn || !c->module_names) {
        cap_compiled_free(c);
        return NULL;
    }
    return c;
}

void cap_compiled_reset(cap_compiled *c)
{
    PyDict_Clear(c->positions);
    PyList_SetSlice(c->events, 0, PyList_Size(c->events), NULL);
    PySet_Clear(c->warned);
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
    Py_XDECREF(c->events);
    Py_XDECREF(c->warned);
    Py_XDECREF(c->auto_dyn);
    Py_XDECREF(c->module_names);
    Py_XDECREF(c->target);
    Py_XDECREF(c->opts.backend_fn);
    if (c->trace)
        ptc_trace_close(c->trace);
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

/* Runs fn(args) (args[nargs] with kwnames' values last) from its first
 * instruction through the caches. `eager` is what an eager fallback calls. */
static PyObject *run_from_start(cap_compiled *c, PyObject *fn, PyObject *const *args, int nargs,
                                PyObject *kwnames, PyObject *eager, PyObject *eargs,
                                PyObject *ekwargs)
{
    if (cap_torch_function_mode_active()) {
        cap_warn_mode(c, fn);
        return PyObject_Call(eager, eargs, ekwargs);
    }
    const char *why = NULL;
    cap_frame *f = cap_frame_for_call(fn, args, nargs, kwnames, &why);
    if (!f) {
        if (!why)
            return NULL;
        /* Generators and coroutines run untouched; binding errors raise as in eager. */
        if (strcmp(why, "argument binding") != 0)
            cap_report_skipped(c, fn, why);
        return PyObject_Call(eager, eargs, ekwargs);
    }
    cap_interp S = {.mode = CAP_REAL, .max_depth = cap_cfg.inline_depth};
    cap_push_frame(&S, f);
    PyObject *r = cap_drive(c, &S, eager, eargs, ekwargs);
    cap_interp_clear(&S);
    return r;
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

static PyObject *compiled_call(cap_compiled *c, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t n = PyTuple_Size(args), nkw = kwargs ? PyDict_Size(kwargs) : 0;
    PyObject *stack[32], **buf = n + nkw + 1 <= 32 ? stack : PyMem_Malloc(sizeof(PyObject *) * (size_t)(n + nkw + 1));
    PyObject *kwnames = nkw ? PyTuple_New(nkw) : NULL, *fn = NULL, *r = NULL;
    int off = 0;
    if (!buf)
        return PyErr_NoMemory();
    if (c->is_module) {
        bool hooks = module_hooks(c->target);
        PyObject *descr = hooks ? cap_type_lookup(Py_TYPE(c->target), cap_P.s_call) : NULL;
        if (hooks && descr && cap_is_function(descr)) {
            fn = Py_NewRef(descr);
        } else {
            /* forward as an attribute: a per-instance override wins. */
            PyObject *bound = PyObject_GetAttr(c->target, cap_T.s_forward);
            if (bound && cap_is_method(bound)) {
                fn = PyObject_GetAttr(bound, cap_P.s_func);
                Py_DECREF(bound);
            } else {
                fn = bound;
                off = -1; /* not a method: no self */
            }
        }
        if (!fn)
            goto done;
        if (off == 0) {
            buf[0] = c->target;
            off = 1;
        } else {
            off = 0;
        }
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
    r = run_from_start(c, fn, buf, (int)(off + n + nkw), kwnames, c->target, args, kwargs);
done:
    Py_XDECREF(fn);
    Py_XDECREF(kwnames);
    if (buf != stack)
        PyMem_Free(buf);
    return r;
}

PyObject *cap_compiled_call_fn(cap_compiled *c, PyObject *fn, PyObject *const *args, int nargs,
                               PyObject *kwnames)
{
    PyObject *func = fn, *buf[64];
    PyObject *real_args = NULL, *real_kw = NULL, *r = NULL;
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0;
    if (cap_is_method(fn) && nargs < 63) {
        func = PyObject_GetAttr(fn, cap_P.s_func);
        buf[0] = PyObject_GetAttr(fn, cap_P.s_self);
        memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
        Py_XDECREF(buf[0]); /* the bound method keeps self alive */
        args = buf;
        nargs++;
    } else {
        Py_INCREF(func);
    }
    real_args = cap_tuple_from_array(args, nargs - nkw);
    if (nkw) {
        real_kw = PyDict_New();
        for (int i = 0; real_kw && i < nkw; i++)
            PyDict_SetItem(real_kw, PyTuple_GetItem(kwnames, i), args[nargs - nkw + i]);
    }
    if (func && real_args && (!nkw || real_kw))
        r = run_from_start(c, func, args, nargs, kwnames, func, real_args, real_kw);
    Py_XDECREF(func);
    Py_XDECREF(real_args);
    Py_XDECREF(real_kw);
    return r;
}

PyObject *cap_compiled_report(cap_compiled *c)
{
    return Py_NewRef(c->events);
}
