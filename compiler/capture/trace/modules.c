/* nn.Modules while tracing: calling one (its forward inlined, or torch's
 * _call_impl when hooks are registered), its path for node provenance, and
 * its iteration methods: parameters(), buffers(), children(), modules() and
 * their named_ forms.
 *
 * The iteration methods are generator functions in torch, which ptc does not trace; but what
 * they yield only depends on the module tree, which the trace can read with
 * guards: each module's _modules, _parameters and _buffers dicts are walked
 * through their sources (so their keys are guarded and every yielded object
 * has a source), following torch's order and de-duplication rules. The call
 * returns an iterator over the list (a generator if it escapes to the user).
 */
#include "capture/interp/interp.h"
#include "capture/trace/trace.h"

#include <string.h>

enum { MI_NAMED_PARAMETERS, MI_PARAMETERS, MI_NAMED_BUFFERS, MI_BUFFERS, MI_NAMED_CHILDREN,
       MI_CHILDREN, MI_NAMED_MODULES, MI_MODULES, MI_COUNT };

static const char *mi_names[MI_COUNT] = {"named_parameters", "parameters", "named_buffers", "buffers",
                                         "named_children", "children", "named_modules", "modules"};
static PyObject *mi_fns[MI_COUNT];

/* Which of the methods fn is (the plain function from torch.nn.Module), or -1. */
int cap_module_iter_kind(PyObject *fn)
{
    static bool init;
    if (!init) {
        init = true;
        for (int i = 0; i < MI_COUNT; i++)
            mi_fns[i] = PyObject_GetAttrString(cap_T.Module, mi_names[i]);
        PyErr_Clear();
    }
    for (int i = 0; i < MI_COUNT; i++)
        if (fn == mi_fns[i] && fn)
            return i;
    return -1;
}

typedef struct walk {
    cap_interp *I;
    PyObject *memo;  /* set of ids already yielded */
    PyObject *out;   /* list of results */
    bool dedupe;
} walk;

/* d[k] as the program sees it (a write of this trace, else the dict's),
 * borrowed. */
static PyObject *current_item(cap_trace *T, PyObject *d, PyObject *k)
{
    PyObject *written = NULL;
    return cap_t_dict_written(T, d, k, &written) == 1 ? written : PyDict_GetItemWithError(d, k);
}

/* The items of mod.<attr> (a dict) in order: keys (guarded), values
 * (wrapped through their sources) and the real values (for identity).
 * Returns new lists in *keys, *vals, *raw. */
static int dict_items(cap_interp *I, PyObject *mod, const char *attr, PyObject **keys, PyObject **vals,
                      PyObject **raw)
{
    PyObject *name = PyUnicode_FromString(attr), *d = NULL, *it = NULL, *k = NULL;
    *keys = *vals = *raw = NULL;
    int rc = name ? cap_t_getattr(I, mod, name, &d) : CAP_ERR;
    Py_XDECREF(name);
    if (rc == CAP_FRAME)
        return cap_t_break(I->T, CAP_B_UNSUPPORTED_CALL, "a module whose %s is computed", attr);
    if (rc != CAP_NEXT)
        return rc;
    if (!PyDict_Check(d)) {
        Py_DECREF(d);
        return cap_t_break(I->T, CAP_B_UNSUPPORTED_CALL, "a module whose %s is not a dict", attr);
    }
    *keys = PyList_New(0);
    *vals = PyList_New(0);
    *raw = PyList_New(0);
    rc = *keys && *vals && *raw ? cap_t_iter(I, d, &it) : CAP_ERR;
    while (rc == CAP_NEXT && (rc = cap_t_next(I, it, &k)) == CAP_NEXT && k) {
        PyObject *v = NULL;
        rc = cap_t_getitem(I, d, k, &v);
        PyObject *r = rc == CAP_NEXT ? current_item(I->T, d, k) : NULL;
        if (rc == CAP_NEXT && (!r || PyList_Append(*keys, k) < 0 || PyList_Append(*vals, v) < 0 ||
                               PyList_Append(*raw, r) < 0))
            rc = CAP_ERR;
        Py_CLEAR(k);
        Py_XDECREF(v);
    }
    if (rc == CAP_FRAME)
        rc = cap_t_break(I->T, CAP_B_OPAQUE_ITERATOR, "a module dict with a Python iterator");
    Py_XDECREF(it);
    Py_DECREF(d);
    if (rc != CAP_NEXT) {
        Py_CLEAR(*keys);
        Py_CLEAR(*vals);
        Py_CLEAR(*raw);
    }
    return rc;
}

/* Adds the real object v unless seen (when de-duplicating): 1 added, 0
 * seen, -1 error. */
static int remember(walk *w, PyObject *v)
{
    PyObject *id = PyLong_FromVoidPtr(v);
    if (!id)
        return -1;
    int seen = PySet_Contains(w->memo, id);
    if (seen == 0 && w->dedupe)
        seen = PySet_Add(w->memo, id) < 0 ? -1 : 0;
    Py_DECREF(id);
    return seen < 0 ? -1 : !seen;
}

static PyObject *join(PyObject *prefix, PyObject *name)
{
    if (PyUnicode_GetLength(prefix) == 0)
        return Py_NewRef(name);
    return PyUnicode_FromFormat("%U.%U", prefix, name);
}

/* named_modules: (prefix, module) pairs, depth first, parents first. */
static int named_modules(walk *w, PyObject *mod, PyObject *prefix, PyObject *pairs)
{
    int add = remember(w, mod);
    if (add < 0)
        return CAP_ERR;
    if (!add)
        return CAP_NEXT;
    PyObject *pair = PyTuple_Pack(2, prefix, mod);
    if (!pair || PyList_Append(pairs, pair) < 0) {
        Py_XDECREF(pair);
        return CAP_ERR;
    }
    Py_DECREF(pair);
    PyObject *keys, *vals, *raw;
    int rc = dict_items(w->I, mod, "_modules", &keys, &vals, &raw);
    for (Py_ssize_t i = 0; rc == CAP_NEXT && i < PyList_Size(keys); i++) {
        PyObject *child = PyList_GetItem(vals, i);
        if (child == Py_None)
            continue;
        PyObject *p = join(prefix, PyList_GetItem(keys, i));
        rc = p ? named_modules(w, child, p, pairs) : CAP_ERR;
        Py_XDECREF(p);
    }
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    Py_XDECREF(raw);
    return rc;
}

static PyObject *kwarg(PyObject *const *args, int nargs, PyObject *kwnames, const char *name, int pos)
{
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0;
    for (int i = 0; i < nkw; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GetItem(kwnames, i), name) == 0)
            return args[nargs - nkw + i];
    return pos < nargs - nkw ? args[pos] : NULL;
}

static int flag(PyObject *v, bool dflt)
{
    return v ? PyObject_IsTrue(v) : dflt;
}

/* (name, child) of mod's direct children, skipping None and repeats. */
static int child_pairs(walk *w, PyObject *mod, PyObject *pairs)
{
    PyObject *keys, *vals, *raw;
    int rc = dict_items(w->I, mod, "_modules", &keys, &vals, &raw);
    for (Py_ssize_t i = 0; rc == CAP_NEXT && i < PyList_Size(keys); i++) {
        PyObject *child = PyList_GetItem(vals, i);
        int add = child == Py_None ? 0 : remember(w, PyList_GetItem(raw, i));
        PyObject *pair = add > 0 ? PyTuple_Pack(2, PyList_GetItem(keys, i), child) : NULL;
        if (add < 0 || (add > 0 && (!pair || PyList_Append(pairs, pair) < 0)))
            rc = CAP_ERR;
        Py_XDECREF(pair);
    }
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    Py_XDECREF(raw);
    return rc;
}

/* *pairs, (prefix, module), become the (name, tensor) pairs of each module's
 * _parameters or _buffers, skipping None and repeats. */
static int member_pairs(walk *w, int kind, PyObject **pairs)
{
    int rc = CAP_NEXT;
    PyObject *result = PyList_New(0);
    for (Py_ssize_t i = 0; rc == CAP_NEXT && i < PyList_Size(*pairs); i++) {
        PyObject *pair = PyList_GetItem(*pairs, i), *keys, *vals, *raw;
        rc = dict_items(w->I, PyTuple_GetItem(pair, 1),
                        kind <= MI_PARAMETERS ? "_parameters" : "_buffers", &keys, &vals, &raw);
        for (Py_ssize_t k = 0; rc == CAP_NEXT && k < PyList_Size(keys); k++) {
            PyObject *v = PyList_GetItem(vals, k);
            int add = v == Py_None ? 0 : remember(w, PyList_GetItem(raw, k));
            if (add <= 0) {
                rc = add < 0 ? CAP_ERR : CAP_NEXT;
                continue;
            }
            PyObject *name = join(PyTuple_GetItem(pair, 0), PyList_GetItem(keys, k));
            PyObject *item = name ? PyTuple_Pack(2, name, v) : NULL;
            if (!item || PyList_Append(result, item) < 0)
                rc = CAP_ERR;
            Py_XDECREF(name);
            Py_XDECREF(item);
        }
        Py_XDECREF(keys);
        Py_XDECREF(vals);
        Py_XDECREF(raw);
    }
    Py_SETREF(*pairs, result);
    return rc;
}

int cap_module_iter_call(cap_interp *I, int kind, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    PyObject *mod = nargs > 0 ? args[0] : NULL;
    if (!mod || cap_t_source_of(T, mod) < 0 || !PyObject_TypeCheck(mod, (PyTypeObject *)cap_T.Module))
        return cap_t_break(T, CAP_B_GENERATOR, "Module.%s of a module made in the trace", mi_names[kind]);
    bool members = kind <= MI_BUFFERS, named = kind % 2 == 0;
    PyObject *prefix = NULL, *recurse = NULL, *dedupe = NULL;
    if (members) {
        prefix = named ? kwarg(args, nargs, kwnames, "prefix", 1) : NULL;
        recurse = kwarg(args, nargs, kwnames, "recurse", named ? 2 : 1);
        dedupe = named ? kwarg(args, nargs, kwnames, "remove_duplicate", 3) : NULL;
    } else if (kind == MI_NAMED_MODULES) {
        PyObject *memo = kwarg(args, nargs, kwnames, "memo", 1);
        if (memo && memo != Py_None)
            return cap_t_break(T, CAP_B_GENERATOR, "Module.named_modules with a memo");
        prefix = kwarg(args, nargs, kwnames, "prefix", 2);
        dedupe = kwarg(args, nargs, kwnames, "remove_duplicate", 3);
    }
    if ((prefix && !PyUnicode_Check(prefix)) || (recurse && !cap_is_constant(recurse)) ||
        (dedupe && !cap_is_constant(dedupe)))
        return cap_t_break(T, CAP_B_GENERATOR, "Module.%s with non-constant arguments", mi_names[kind]);
    PyObject *empty = PyUnicode_FromString("");
    walk w = {I, PySet_New(NULL), PyList_New(0), flag(dedupe, true) == 1};
    PyObject *pairs = PyList_New(0);
    int rc = w.memo && w.out && pairs && empty ? CAP_NEXT : CAP_ERR;
    if (rc == CAP_NEXT && (kind == MI_NAMED_CHILDREN || kind == MI_CHILDREN)) {
        rc = child_pairs(&w, mod, pairs);
    } else if (rc == CAP_NEXT) {
        bool all = !members || flag(recurse, true) == 1;
        if (all) {
            walk mw = {I, PySet_New(NULL), NULL, w.dedupe};
            rc = mw.memo ? named_modules(&mw, mod, prefix ? prefix : empty, pairs) : CAP_ERR;
            Py_XDECREF(mw.memo);
        } else {
            PyObject *pair = PyTuple_Pack(2, prefix ? prefix : empty, mod);
            rc = pair && PyList_Append(pairs, pair) == 0 ? CAP_NEXT : CAP_ERR;
            Py_XDECREF(pair);
        }
        if (members && rc == CAP_NEXT)
            rc = member_pairs(&w, kind, &pairs);
    }
    /* Plain forms yield the second element of each pair. */
    for (Py_ssize_t i = 0; rc == CAP_NEXT && pairs && i < PyList_Size(pairs); i++) {
        PyObject *pair = PyList_GetItem(pairs, i);
        if (PyList_Append(w.out, named ? pair : PyTuple_GetItem(pair, 1)) < 0)
            rc = CAP_ERR;
    }
    if (rc == CAP_NEXT && !pairs)
        rc = CAP_ERR;
    if (rc == CAP_NEXT) {
        *out = cap_iter_seq(w.out, -1, T);
        if (*out)
            ((cap_iter *)*out)->gen = true;
        else
            rc = CAP_ERR;
    }
    Py_XDECREF(empty);
    Py_XDECREF(pairs);
    Py_XDECREF(w.memo);
    Py_XDECREF(w.out);
    return rc;
}

/* ---- module paths ------------------------------------------------------------------- */

const char *cap_module_path(cap_trace *T, PyObject *mod)
{
    PyObject *names = T->module_names;
    PyObject *key = PyLong_FromVoidPtr(mod);
    PyObject *name = names && key ? PyDict_GetItem(names, key) : NULL;
    Py_XDECREF(key);
    if (name && PyUnicode_Check(name))
        return ptc_arena_strdup(T->arena, PyUnicode_AsUTF8(name));
    return NULL;
}

/* ---- nn.Module calls ---------------------------------------------------------------------- */

static bool module_has_hooks(PyObject *mod)
{
    PyObject *d = PyObject_GenericGetDict(mod, NULL);
    if (!d) {
        PyErr_Clear();
        return true;
    }
    PyObject *keys[4] = {cap_T.s_forward_hooks, cap_T.s_forward_pre_hooks, cap_T.s_backward_hooks,
                         cap_T.s_backward_pre_hooks};
    bool any = false;
    for (int i = 0; i < 4 && !any; i++) {
        PyObject *h = PyDict_GetItem(d, keys[i]);
        any = h && PyObject_Size(h) > 0;
    }
    Py_DECREF(d);
    PyErr_Clear();
    return any;
}

bool cap_global_hooks(void)
{
    for (Py_ssize_t i = 0; cap_T.global_hooks && i < PyTuple_Size(cap_T.global_hooks); i++)
        if (PyObject_Size(PyTuple_GetItem(cap_T.global_hooks, i)) > 0)
            return true;
    PyErr_Clear();
    return false;
}

int cap_t_module_call(cap_interp *I, PyObject *mod, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    int src = cap_t_source_of(T, mod);
    bool global = cap_global_hooks(), hooks = global || module_has_hooks(mod);
    if (src >= 0 && !hooks && cap_guard_add(T, CAP_G_NOHOOKS, src, NULL, 0) < 0)
        return CAP_ERR;
    if (cap_guard_add(T, CAP_G_GLOBAL_HOOKS, -1, NULL, global) < 0)
        return CAP_ERR;
    PyObject *fn = NULL;
    int rc = cap_t_getattr(I, mod, hooks ? cap_P.s_call : cap_T.s_forward, &fn);
    if (rc != CAP_NEXT)
        return rc == CAP_FRAME ? cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "a module whose forward is a property") : rc;
    const char *path = cap_module_path(T, mod);
    rc = cap_op_call(I, fn, args, nargs, kwnames, out);
    Py_DECREF(fn);
    if (rc == CAP_FRAME && path)
        I->frame->module_path = path;
    return rc;
}
