/* Tracing calls: what happens to `callable(args)` while tracing.
 *
 * In order: symbolic-tensor methods and mapped torch functions record ops;
 * bound methods are unwrapped; builtins that only move values around (len,
 * isinstance, getattr, zip, enumerate, sorted, ...) are evaluated here, with
 * the guards their answers depend on; nn.Module calls inline forward (or
 * torch's _call_impl when hooks are registered); Python functions and
 * __init__/__call__ of Python classes are inlined; C functions known to be
 * pure run for real; anything else is a graph break that runs the call for
 * real between two graphs. Callbacks invoked from inside a builtin (a key
 * function, the function given to map) are traced synchronously in a nested
 * run; a break inside one becomes a break at the builtin's call.
 */
#include "capture/trace/trace.h"

#include <string.h>

#define CAP_BUILTINS(X)                                                                            \
    X(len)                                                                                         \
    X(isinstance) X(issubclass) X(type) X(getattr) X(hasattr) X(setattr) X(delattr) X(iter)        \
        X(next) X(print) X(input) X(open) X(range) X(enumerate) X(zip) X(reversed) X(map)          \
            X(filter) X(sorted) X(min) X(max) X(sum) X(any) X(all) X(list) X(tuple) X(set)         \
                X(frozenset) X(dict) X(str) X(repr) X(format) X(ascii) X(int) X(float) X(bool)     \
                    X(complex) X(abs) X(round) X(pow) X(divmod) X(hash) X(id) X(callable) X(vars)  \
                        X(chr) X(ord) X(bin) X(hex) X(oct) X(slice) X(object) X(super)             \
                            X(staticmethod) X(classmethod) X(property) X(bytes) X(breakpoint)

typedef enum {
    B_NONE = 0,
#define X(n) B_##n,
    CAP_BUILTINS(X)
#undef X
} builtin_id;

static PyObject *builtin_ids; /* dict: builtin object -> id */

static int builtin_of(PyObject *callable)
{
    if (!builtin_ids) {
        builtin_ids = PyDict_New();
        static const char *names[] = {
#define X(n) #n,
            CAP_BUILTINS(X)
#undef X
        };
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            PyObject *b = PyDict_GetItemString(cap_P.builtins, names[i]);
            PyObject *v = PyLong_FromLong((long)i + 1);
            if (b && v)
                PyDict_SetItem(builtin_ids, b, v);
            Py_XDECREF(v);
        }
    }
    PyObject *v = PyDict_GetItemWithError(builtin_ids, callable);
    if (!v) {
        PyErr_Clear();
        return B_NONE;
    }
    return (int)PyLong_AsLong(v);
}

/* ---- synchronous nested calls ------------------------------------------------------ */

/* A frame was just pushed above `outer`: runs it to its return (a nested
 * run) and hands back its result. An exception it does not catch comes back
 * as CAP_ERR, still pending, with the nested frames gone; a break inside
 * becomes a break at outer's instruction. */
int cap_t_run_sync(cap_interp *I, cap_frame *outer, PyObject **out)
{
    bool outermost = true;
    for (cap_frame *f = outer; f && outermost; f = f->parent)
        outermost = f->ret != cap_ret_sync;
    long start = I->instr_step; /* of the instruction that runs it */
    I->frame->ret = cap_ret_sync;
    int rc = cap_run(I);
    I->instr_step = start;
    if (rc == CAP_SYNC) {
        *out = I->sync_result;
        I->sync_result = NULL;
        return CAP_NEXT;
    }
    if (outermost) {
        I->T->sync_step = start;
        I->T->sync_exit = I->steps;
    }
    cap_break inner = I->T->brk;
    while (I->frame != outer) {
        cap_frame *p = I->frame->parent;
        cap_frame_free(I->frame);
        I->frame = p;
    }
    if (rc == CAP_BREAK)
        return cap_t_break(I->T, inner.code, "inside a callback: %s", inner.detail);
    return rc;
}

/* Calls callable(args) and waits for the result, tracing Python callees in a
 * nested run. An exception raised inside becomes a break at the current
 * instruction (it reruns for real). */
int cap_t_call_sync(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                    PyObject *kwnames, PyObject **out)
{
    cap_frame *outer = I->frame;
    return cap_t_settle(I, outer, cap_op_call(I, callable, args, nargs, kwnames, out), out);
}

int cap_t_settle(cap_interp *I, cap_frame *outer, int rc, PyObject **out)
{
    if (rc != CAP_FRAME)
        return rc;
    rc = cap_t_run_sync(I, outer, out);
    if (rc == CAP_ERR && !PyErr_ExceptionMatches(cap_InternalError))
        return cap_trace_error(I);
    return rc;
}

/* ---- builtins ------------------------------------------------------------------------ */

static int kw_count(PyObject *kwnames)
{
    return kwnames ? (int)PyTuple_Size(kwnames) : 0;
}

static PyObject *kw_get(PyObject *const *args, int nargs, PyObject *kwnames, const char *name)
{
    int nkw = kw_count(kwnames);
    for (int i = 0; i < nkw; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GetItem(kwnames, i), name) == 0)
            return args[nargs - nkw + i];
    return NULL;
}

/* Arguments made safe for a real call: outside containers become sourced
 * copies, iterators over traced sequences are drained into lists. */
static PyObject **flow_args(cap_trace *T, PyObject *const *args, int nargs)
{
    PyObject **fa = PyMem_Malloc(sizeof(PyObject *) * (size_t)(nargs + 1));
    for (int i = 0; fa && i < nargs; i++) {
        fa[i] = cap_t_flow(T, args[i]);
        if (!fa[i]) {
            while (i-- > 0)
                Py_DECREF(fa[i]);
            PyMem_Free(fa);
            return NULL;
        }
    }
    return fa;
}

static void free_args(PyObject **fa, int n)
{
    for (int i = 0; i < n; i++)
        Py_DECREF(fa[i]);
    PyMem_Free(fa);
}

static int real_call_flowed(cap_trace *T, PyObject *callable, PyObject *const *args, int nargs,
                            PyObject *kwnames, PyObject **out)
{
    PyObject **fa = flow_args(T, args, nargs);
    if (!fa)
        return CAP_ERR;
    *out = cap_call_real(callable, fa, nargs, kwnames);
    free_args(fa, nargs);
    return *out ? CAP_NEXT : CAP_ERR;
}

static int tensor_in(PyObject *const *args, int n)
{
    for (int i = 0; i < n; i++)
        if (cap_is_tensor(args[i]))
            return i;
    return -1;
}

/* isinstance with symbolic tensors answering as torch.Tensor / Parameter. */
static int do_isinstance(cap_trace *T, PyObject *obj, PyObject *cls, PyObject **out)
{
    int r;
    if (cap_is_tensor(obj) || cap_is_ptc_iter(obj))
        r = PyObject_IsSubclass(cap_eager_type(obj), cls);
    else
        r = PyObject_IsInstance(obj, cls);
    if (r < 0)
        return CAP_ERR;
    *out = Py_NewRef(r ? Py_True : Py_False);
    return CAP_NEXT;
}

static int do_len(cap_interp *I, PyObject *x, PyObject **out)
{
    cap_trace *T = I->T;
    if (cap_is_tensor(x)) {
        cap_tensor *t = (cap_tensor *)x;
        if (t->v->type.ndim == 0) {
            PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
            return CAP_ERR;
        }
        *out = cap_dim_obj(T, t->v->type.shape[0]);
        return *out ? CAP_NEXT : CAP_ERR;
    }
    PyObject *m = cap_type_lookup(Py_TYPE(x), cap_P.s_len);
    if (m && cap_is_function(m)) {
        PyObject *args[1] = {x};
        int rc = cap_call_inline(I, m, args, 1, NULL, cap_ret_push);
        if (rc != CAP_NEXT)
            return rc;
    }
    if (cap_is_ptc_iter(x)) {
        PyErr_Format(PyExc_TypeError, "object of type '%s' has no len()",
                     cap_tpname((PyTypeObject *)cap_eager_type(x)));
        return CAP_ERR;
    }
    int rc = cap_t_current(I, &x);
    if (rc != CAP_NEXT)
        return rc;
    int src = cap_t_source_of(T, x);
    Py_ssize_t n = PyObject_Size(x);
    if (n < 0)
        return CAP_ERR;
    if (src >= 0 && !cap_is_constant(x)) {
        /* the guard reads the stored size: a __len__ that says another
           cannot be guarded */
        if (cap_stored_len(x) != n)
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL,
                               "len() of a %s from outside whose __len__ is not its size",
                               cap_tpname(Py_TYPE(x)));
        if (cap_guard_add(T, CAP_G_LEN, src, NULL, n) < 0)
            return CAP_ERR;
    }
    *out = PyLong_FromSsize_t(n);
    return CAP_NEXT;
}

static int do_getattr(cap_interp *I, PyObject *const *args, int nargs, PyObject **out, bool has)
{
    cap_trace *T = I->T;
    if (nargs < 2 || !PyUnicode_Check(args[1]))
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "getattr with a non-constant name");
    PyObject *obj = args[0], *name = args[1];
    int src = cap_t_source_of(T, obj);
    PyObject *v = NULL;
    cap_frame *outer = I->frame;
    int rc = cap_t_getattr(I, obj, name, &v);
    if (rc == CAP_FRAME && (has || nargs >= 3)) {
        /* A Python getter: run it here so an AttributeError gives the default. */
        rc = cap_t_run_sync(I, outer, &v);
        if (rc == CAP_ERR && !PyErr_ExceptionMatches(PyExc_AttributeError) &&
            !PyErr_ExceptionMatches(cap_InternalError))
            return cap_trace_error(I);
    }
    if (rc == CAP_FRAME)
        return rc;
    if (rc == CAP_NEXT) {
        if (has) {
            Py_DECREF(v);
            if (src >= 0 && cap_guard_add(T, CAP_G_HASATTR, src, name, 1) < 0)
                return CAP_ERR;
            *out = Py_NewRef(Py_True);
        } else {
            *out = v;
        }
        return CAP_NEXT;
    }
    if (rc != CAP_ERR || !PyErr_ExceptionMatches(PyExc_AttributeError) || (!has && nargs < 3))
        return rc;
    PyErr_Clear();
    if (src >= 0 && cap_guard_add(T, CAP_G_HASATTR, src, name, 0) < 0)
        return CAP_ERR;
    *out = Py_NewRef(has ? Py_False : args[2]);
    return CAP_NEXT;
}

/* ---- builtins over iterables ----------------------------------------------------------- */

/* CPython's own argument checks for a builtin that takes iterables: the
 * call made for real with empty tuples in the iterables' places (nothing is
 * consumed, no callback runs). Its TypeError is the user's error; other
 * outcomes (max() of nothing) say nothing about the arguments. */
static int check_iterable_args(PyObject *callable, PyObject *const *args, int nargs, PyObject *kwnames,
                               int first, int nits)
{
    PyObject **probe = PyMem_Malloc(sizeof *probe * (size_t)(nargs + 1));
    if (!probe)
        return (PyErr_NoMemory(), CAP_ERR);
    for (int i = 0; i < nargs; i++)
        probe[i] = i >= first && i < first + nits ? cap_P.empty_tuple : args[i];
    PyObject *r = cap_call_real(callable, probe, nargs, kwnames);
    PyMem_Free(probe);
    Py_XDECREF(r);
    if (!r && !PyErr_ExceptionMatches(PyExc_TypeError))
        PyErr_Clear();
    return PyErr_Occurred() ? CAP_ERR : CAP_NEXT;
}

/* iter(obj) that finishes here (a Python __iter__ runs in a nested run). */
static int iter_sync(cap_interp *I, PyObject *obj, PyObject **out)
{
    cap_frame *outer = I->frame;
    int rc = cap_t_iter(I, obj, out);
    return rc == CAP_FRAME ? cap_t_run_sync(I, outer, out) : rc;
}

/* map, filter, zip and enumerate: as in CPython, the arguments are checked
 * and iter() is called on each iterable now; the items come when the
 * program asks for them (cap_t_lazy_next). */
static int make_lazy(cap_interp *I, int id, PyObject *callable, PyObject *const *args, int nargs,
                     PyObject *kwnames, PyObject **out)
{
    int npos = nargs - kw_count(kwnames), first = id == B_map || id == B_filter;
    int nits = id == B_enumerate ? npos > 0 : npos - first;
    if (check_iterable_args(callable, args, nargs, kwnames, first, nits) != CAP_NEXT)
        return CAP_ERR;
    PyObject *its = PyTuple_New(nits), *count = NULL;
    int rc = its ? CAP_NEXT : CAP_ERR;
    for (int k = 0; rc == CAP_NEXT && k < nits; k++) {
        PyObject *it = NULL;
        if ((rc = iter_sync(I, args[first + k], &it)) == CAP_NEXT)
            PyTuple_SetItem(its, k, it);
    }
    if (rc == CAP_NEXT && id == B_enumerate) {
        PyObject *start = npos > 1 ? args[1] : kw_get(args, nargs, kwnames, "start");
        count = start ? PyNumber_Index(start) : PyLong_FromLong(0);
        rc = count ? CAP_NEXT : CAP_ERR;
    }
    if (rc == CAP_NEXT) {
        PyObject *strict = id == B_zip ? kw_get(args, nargs, kwnames, "strict") : NULL;
        int on = strict ? PyObject_IsTrue(strict) : 0;
        int kind = id == B_map ? CAP_LAZY_MAP : id == B_filter ? CAP_LAZY_FILTER
                   : id == B_zip ? CAP_LAZY_ZIP : CAP_LAZY_ENUMERATE;
        *out = on < 0 ? NULL : cap_lazy_new(kind, first ? args[0] : NULL, its, count, on > 0);
        rc = *out ? CAP_NEXT : CAP_ERR;
    }
    Py_XDECREF(its);
    Py_XDECREF(count);
    return rc;
}

/* reversed(seq): a list or tuple is walked down by index as CPython does (a
 * write to it before the walk reaches an item is seen), a range becomes the
 * reversed range; anything else is reversed as a whole now. */
static int make_reversed(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out)
{
    if (check_iterable_args(callable, args, nargs, kwnames, 0, 1) != CAP_NEXT)
        return CAP_ERR;
    PyObject *seq = args[0];
    int rc;
    if (PyList_CheckExact(seq) || PyTuple_CheckExact(seq) || PyRange_Check(seq)) {
        if ((rc = cap_t_iter(I, seq, out)) != CAP_NEXT)
            return rc;
        cap_iter *it = (cap_iter *)*out;
        if (!it->seq) {
            it->start += (long long)(it->n - 1) * it->step;
            it->step = -it->step;
        } else {
            it->rev = true;
            it->i = PyObject_Size(seq) - 1;
        }
        return CAP_NEXT;
    }
    PyObject *items = cap_t_materialize(I, seq, &rc);
    if (!items)
        return rc;
    PyList_Reverse(items);
    *out = cap_iter_seq(items, -1, I->T);
    Py_DECREF(items);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* The index of the item in items that min/max/sorted picks by its key;
 * sorted gives the order instead (a list of (key, index)). */
static PyObject *sort_by_key(cap_interp *I, PyObject *items, PyObject *key, PyObject *rev, int *rc)
{
    PyObject *idx = PyList_New(0);
    for (Py_ssize_t i = 0; idx && i < PyList_Size(items); i++) {
        PyObject *a[1] = {PyList_GetItem(items, i)}, *kv = NULL;
        if ((*rc = cap_t_call_sync(I, key, a, 1, NULL, &kv)) != CAP_NEXT) {
            Py_DECREF(idx);
            return NULL;
        }
        PyObject *pair = Py_BuildValue("(Nn)", kv, i);
        if (!pair || PyList_Append(idx, pair) < 0)
            Py_CLEAR(idx);
        Py_XDECREF(pair);
    }
    PyObject *kw = PyDict_New();
    if (idx && kw && (!rev || PyDict_SetItemString(kw, "reverse", rev) == 0)) {
        PyObject *sortargs = PyTuple_Pack(1, idx);
        PyObject *s = sortargs ? PyObject_Call(PyDict_GetItemString(cap_P.builtins, "sorted"), sortargs, kw) : NULL;
        Py_XDECREF(sortargs);
        Py_SETREF(idx, s);
    } else {
        Py_CLEAR(idx);
    }
    Py_XDECREF(kw);
    *rc = idx ? CAP_NEXT : CAP_ERR;
    return idx;
}

static int sort_keyed(cap_interp *I, int id, PyObject *items, PyObject *key, PyObject *const *args,
                      int nargs, PyObject *kwnames, PyObject **res)
{
    int rc;
    PyObject *s = sort_by_key(I, items, key, kw_get(args, nargs, kwnames, "reverse"), &rc);
    if (!s)
        return rc;
    Py_ssize_t n = PyList_Size(s);
    if (id != B_sorted && n == 0) {
        PyObject *dflt = kw_get(args, nargs, kwnames, "default");
        if (dflt)
            *res = Py_NewRef(dflt);
        else
            PyErr_Format(PyExc_ValueError, "%s() iterable argument is empty", id == B_min ? "min" : "max");
    } else if (id == B_sorted) {
        *res = PyList_New(n);
        for (Py_ssize_t i = 0; *res && i < n; i++) {
            Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GetItem(PyList_GetItem(s, i), 1));
            PyList_SetItem(*res, i, Py_NewRef(PyList_GetItem(items, j)));
        }
    } else {
        /* min: first smallest; max: first largest (stable). */
        Py_ssize_t pick = 0;
        if (id == B_max) {
            pick = n - 1;
            PyObject *kmax = PyTuple_GetItem(PyList_GetItem(s, n - 1), 0);
            while (pick > 0 && PyObject_RichCompareBool(PyTuple_GetItem(PyList_GetItem(s, pick - 1), 0), kmax,
                                                        Py_EQ) == 1)
                pick--;
        }
        Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GetItem(PyList_GetItem(s, pick), 1));
        *res = Py_NewRef(PyList_GetItem(items, j));
    }
    Py_DECREF(s);
    return *res ? CAP_NEXT : CAP_ERR;
}

/* min or max over items some of which are tensors: as min(a, b, ...) of
 * them (one-element tensors stay in the graph); CAP_NONE where that
 * declines. */
static int minmax_of_items(cap_trace *T, int id, PyObject *items, PyObject **res)
{
    Py_ssize_t n = PyList_Size(items);
    PyObject **args = n <= INT_MAX ? PyMem_Malloc(sizeof *args * (size_t)n) : NULL;
    if (!args)
        return CAP_NONE;
    for (Py_ssize_t i = 0; i < n; i++)
        args[i] = PyList_GetItem(items, i);
    int rc = cap_thooks.builtin_minmax(T, id == B_max, args, (int)n, res);
    PyMem_Free(args);
    return rc;
}

/* sorted, min and max over the items: key functions are traced calls;
 * without one, the builtin itself runs on the items. */
static int sort_items(cap_interp *I, int id, PyObject *items, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **res)
{
    PyObject *key = kw_get(args, nargs, kwnames, "key");
    if (key && key != Py_None)
        return sort_keyed(I, id, items, key, args, nargs, kwnames, res);
    const char *name = id == B_sorted ? "sorted" : id == B_min ? "min" : "max";
    for (Py_ssize_t i = 0; PyList_Size(items) > 1 && i < PyList_Size(items); i++) {
        if (!cap_is_tensor(PyList_GetItem(items, i)))
            continue;
        bool minmax = id != B_sorted && !kw_get(args, nargs, kwnames, "reverse");
        int rc = minmax ? minmax_of_items(I->T, id, items, res) : CAP_NONE;
        return rc != CAP_NONE ? rc : cap_t_break(I->T, CAP_B_TENSOR_BOOL, "%s() comparing tensors", name);
    }
    PyObject *fn = PyDict_GetItemString(cap_P.builtins, name);
    PyObject *kwn = NULL, *all[3] = {items, NULL, NULL};
    PyObject *rev = kw_get(args, nargs, kwnames, "reverse"), *dflt = kw_get(args, nargs, kwnames, "default");
    int nk = 0;
    if (rev || dflt) {
        kwn = PyTuple_New((rev ? 1 : 0) + (dflt ? 1 : 0));
        if (!kwn)
            return CAP_ERR;
        if (rev) {
            PyTuple_SetItem(kwn, nk, PyUnicode_FromString("reverse"));
            all[1 + nk++] = rev;
        }
        if (dflt) {
            PyTuple_SetItem(kwn, nk, PyUnicode_FromString("default"));
            all[1 + nk++] = dflt;
        }
    }
    *res = cap_call_real(fn, all, 1 + nk, kwn);
    Py_XDECREF(kwn);
    return *res ? CAP_NEXT : CAP_ERR;
}

static int sum_items(cap_interp *I, PyObject *items, PyObject *start, PyObject **res)
{
    PyObject *acc = start ? Py_NewRef(start) : PyLong_FromLong(0);
    for (Py_ssize_t i = 0; acc && i < PyList_Size(items); i++) {
        PyObject *r = NULL;
        int rc = cap_op_binary(I, CAP_NB_ADD, acc, PyList_GetItem(items, i), &r);
        Py_CLEAR(acc);
        if (rc == CAP_FRAME)
            return cap_t_break(I->T, CAP_B_UNSUPPORTED_CALL, "sum() over objects with Python __add__");
        if (rc != CAP_NEXT)
            return rc;
        acc = r;
    }
    *res = acc;
    return acc ? CAP_NEXT : CAP_ERR;
}

/* any() and all() stop at the first item that decides, as in eager: the
 * items after it are never asked for. */
static int any_all(cap_interp *I, bool want, PyObject *iterable, PyObject **res)
{
    PyObject *it = NULL, *v = NULL;
    int rc = iter_sync(I, iterable, &it);
    bool decided = false;
    while (rc == CAP_NEXT && !decided && (rc = cap_t_next_sync(I, it, &v)) == CAP_NEXT && v) {
        int t = 0;
        if (cap_is_tensor(v))
            rc = cap_t_break(I->T, CAP_B_TENSOR_BOOL, "%s() over tensors", want ? "any" : "all");
        else if ((t = PyObject_IsTrue(v)) < 0)
            rc = CAP_ERR;
        decided = rc == CAP_NEXT && (bool)t == want;
        Py_CLEAR(v);
    }
    Py_XDECREF(it);
    if (rc == CAP_NEXT)
        *res = Py_NewRef(decided == want ? Py_True : Py_False);
    return rc;
}

/* Builtins that consume an iterable (list, tuple, set, frozenset, sorted,
 * min, max, sum, any, all), through the tracer. A break midway puts the
 * iterators it advanced back: the call then reruns for real. */
static int consume_items(cap_interp *I, int id, PyObject *const *args, int nargs, PyObject *kwnames,
                         PyObject **out)
{
    int npos = nargs - kw_count(kwnames), rc = CAP_NEXT;
    if (id == B_any || id == B_all)
        return npos == 1 ? any_all(I, id == B_any, args[0], out) : CAP_ERR;
    PyObject *items = npos > 0 ? cap_t_materialize(I, args[0], &rc) : PyList_New(0);
    if (!items)
        return npos > 0 ? rc : CAP_ERR;
    switch (id) {
    case B_list:
        *out = Py_NewRef(items);
        break;
    case B_tuple:
        *out = PyList_AsTuple(items);
        break;
    case B_set:
        *out = PySet_New(items);
        break;
    case B_frozenset:
        *out = PyFrozenSet_New(items);
        break;
    case B_sum: {
        PyObject *start = npos > 1 ? args[1] : kw_get(args, nargs, kwnames, "start");
        rc = sum_items(I, items, start, out);
        break;
    }
    default:
        rc = sort_items(I, id, items, args, nargs, kwnames, out);
        break;
    }
    Py_DECREF(items);
    return rc == CAP_NEXT && !*out ? CAP_ERR : rc;
}

static int do_iterables(cap_interp *I, int id, PyObject *callable, PyObject *const *args, int nargs,
                        PyObject *kwnames, PyObject **out)
{
    int npos = nargs - kw_count(kwnames);
    if (check_iterable_args(callable, args, nargs, kwnames, 0, npos > 0) != CAP_NEXT)
        return CAP_ERR;
    cap_iter_marks marks;
    cap_iter_mark(&marks, args, nargs);
    return cap_iter_rewind(I, &marks, consume_items(I, id, args, nargs, kwnames, out));
}

/* What a group of builtins below returns for a builtin it does not answer
 * (no CAP_* result is -2): the call then runs for real. */
enum { DECLINED = -2 };

/* Builtins that read objects (len, isinstance, getattr, next, ...) and the
 * ones that are breaks (print, input, open). */
static int builtin_on_objects(cap_interp *I, int id, PyObject *const *args, int nargs,
                              PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    int npos = nargs - kw_count(kwnames);
    int ti = tensor_in(args, nargs);
    switch (id) {
    case B_len:
        if (npos == 1 && !kwnames)
            return do_len(I, args[0], out);
        break;
    case B_isinstance:
        if (npos == 2 && !kwnames)
            return do_isinstance(T, args[0], args[1], out);
        break;
    case B_type:
        if (npos == 1 && !kwnames)
            return cap_t_type_of(T, args[0], out);
        return cap_t_break(T, CAP_B_UNINTERPRETABLE, "type() creating a class");
    case B_getattr:
    case B_hasattr:
        if (!kwnames)
            return do_getattr(I, args, nargs, out, id == B_hasattr);
        break;
    case B_setattr:
    case B_delattr:
        if (!kwnames && npos == (id == B_setattr ? 3 : 2) && PyUnicode_Check(args[1])) {
            int rc = cap_t_setattr(I, args[0], args[1], id == B_setattr ? args[2] : NULL);
            if (rc == CAP_NEXT)
                *out = Py_NewRef(Py_None);
            return rc;
        }
        break;
    case B_iter:
        if (npos == 1 && !kwnames)
            return cap_t_iter(I, args[0], out);
        break;
    case B_next:
        if (!kwnames && (npos == 1 || npos == 2)) {
            int rc = cap_t_next(I, args[0], out);
            if (rc == CAP_NEXT && !*out) {
                if (npos == 2)
                    *out = Py_NewRef(args[1]);
                else {
                    PyErr_SetNone(PyExc_StopIteration);
                    return CAP_ERR;
                }
            }
            return rc;
        }
        break;
    case B_print:
        return cap_t_break(T, CAP_B_PRINT, "print()");
    case B_input:
    case B_open:
    case B_breakpoint:
        return cap_t_break(T, CAP_B_PRINT, "%s()",
                           id == B_open    ? "open"
                           : id == B_input ? "input"
                                           : "breakpoint");
    case B_id:
        if (npos == 1 && !kwnames)
            return cap_t_id(T, args[0], out);
        break;
    case B_callable:
        if (ti == 0) {
            *out = Py_NewRef(Py_False);
            return CAP_NEXT;
        }
        break;
    case B_vars:
        if (npos == 1) {
            PyObject *a = args[0];
            return cap_t_getattr(I, a, cap_P.s_dict, out);
        }
        break;
    }
    return DECLINED;
}

/* Builtins that make or consume iterators. */
static int builtin_on_iterables(cap_interp *I, int id, PyObject *callable, PyObject *const *args,
                                int nargs, PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    int npos = nargs - kw_count(kwnames);
    int ti = tensor_in(args, nargs);
    switch (id) {
    case B_enumerate:
    case B_zip:
    case B_map:
    case B_filter:
        return make_lazy(I, id, callable, args, nargs, kwnames, out);
    case B_reversed:
        return make_reversed(I, callable, args, nargs, kwnames, out);
    case B_sorted:
    case B_sum:
    case B_any:
    case B_all:
    case B_list:
    case B_tuple:
    case B_set:
    case B_frozenset:
        return do_iterables(I, id, callable, args, nargs, kwnames, out);
    case B_min:
    case B_max:
        if (npos == 1)
            return do_iterables(I, id, callable, args, nargs, kwnames, out);
        if (ti >= 0 && !kwnames) {
            int rc = cap_thooks.builtin_minmax(T, id == B_max, args, nargs, out);
            if (rc != CAP_NONE)
                return rc;
        }
        if (ti >= 0)
            return cap_t_break(T, CAP_B_TENSOR_BOOL, "%s() comparing tensors",
                               id == B_min ? "min" : "max");
        break;
    }
    return DECLINED;
}

/* Conversions to numbers and strings, and arithmetic builtins. */
static int builtin_on_numbers(cap_interp *I, int id, PyObject *const *args, int nargs,
                              PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    int npos = nargs - kw_count(kwnames);
    int ti = tensor_in(args, nargs);
    switch (id) {
    case B_str:
    case B_repr:
    case B_format:
    case B_ascii:
        if (ti >= 0)
            return cap_t_break(T, CAP_B_TENSOR_STR, "%s() of a tensor",
                               id == B_str ? "str" : "repr");
        break;
    case B_int:
    case B_float:
    case B_bool:
    case B_complex:
    case B_chr:
    case B_hex:
    case B_oct:
    case B_bin:
    case B_divmod:
    case B_hash:
        if (ti >= 0)
            return cap_t_break(T, CAP_B_TENSOR_ITEM, "a tensor converted to a Python number");
        if (id == B_hash && npos == 1 && !cap_is_constant(args[0]) && !cap_t_outside(T, args[0]))
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL,
                               "hash() of an object created in the trace");
        break;
    case B_abs:
        if (ti == 0 && npos == 1)
            return cap_hooks.tensor_unary(T, -1, args[0], out);
        break;
    case B_round:
        if (ti == 0) {
            ptc_arg a[2] = {ptc_arg_value(((cap_tensor *)args[0])->v), ptc_arg_int(0)};
            if (npos > 1 && PyLong_Check(args[1]))
                a[1] = ptc_arg_int(PyLong_AsLongLong(args[1]));
            return cap_build(T, PTC_OP_ROUND, a, 2, out);
        }
        break;
    case B_pow:
        if (npos == 2 && !kwnames)
            return cap_op_binary(I, CAP_NB_POWER, args[0], args[1], out);
        break;
    }
    return DECLINED;
}

/* A builtin called while tracing: answered here with the guards its answer
 * depends on, a break, or run for real when no group answers it. */
static int do_builtin(cap_interp *I, int id, PyObject *callable, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out)
{
    int rc = builtin_on_objects(I, id, args, nargs, kwnames, out);
    if (rc == DECLINED)
        rc = builtin_on_iterables(I, id, callable, args, nargs, kwnames, out);
    if (rc == DECLINED)
        rc = builtin_on_numbers(I, id, args, nargs, kwnames, out);
    return rc != DECLINED ? rc : real_call_flowed(I->T, callable, args, nargs, kwnames, out);
}

/* ---- classes ------------------------------------------------------------------------------ */

/* buf = (first, *args); false when they do not fit (a break of the caller's). */
static bool prepend(PyObject **buf, PyObject *first, PyObject *const *args, int nargs)
{
    if (nargs > 62)
        return false;
    buf[0] = first;
    memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
    return true;
}

static int too_many_args(cap_trace *T)
{
    return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "too many arguments");
}

/* torch.compile, once run in the process, replaces nn.Module.__init__ with a
 * wrapper that tags every new module for its own guards (a write to a
 * registry of torch._dynamo's) and traces the original __init__ instead, as
 * ptc does here: traced, the tag broke the graph at every module made inside
 * a compiled function (and took the module's id(), new on every call). fn,
 * or the original __init__ (borrowed). */
static PyObject *unpatched_module_init(PyObject *fn)
{
    if (!cap_is_function(fn))
        return fn;
    static const char *where = "torch._dynamo.mutation_guard";
    PyObject *name = PyObject_GetAttr(fn, cap_P.s_name), *module = NULL;
    bool dynamos = name && PyUnicode_Check(name) &&
                   PyUnicode_CompareWithASCIIString(name, "patched_init") == 0 &&
                   (module = PyObject_GetAttr(fn, cap_P.s_module)) && PyUnicode_Check(module) &&
                   PyUnicode_CompareWithASCIIString(module, where) == 0;
    Py_XDECREF(module);
    Py_XDECREF(name);
    PyObject *guard = dynamos ? PyDict_GetItemString(PyImport_GetModuleDict(), where) : NULL;
    PyObject *orig = guard ? PyObject_GetAttrString(guard, "unpatched_nn_module_init") : NULL;
    PyErr_Clear();
    Py_XDECREF(orig); /* the module keeps it */
    return orig && cap_is_function(orig) ? orig : fn;
}

/* obj.__init__(*args) inlined; obj is the call's result once it returns. */
static int inline_init(cap_interp *I, PyObject *initf, PyObject *obj, PyObject *const *args,
                       int nargs, PyObject *kwnames)
{
    initf = unpatched_module_init(initf);
    PyObject *buf[64];
    if (!prepend(buf, obj, args, nargs))
        return too_many_args(I->T);
    int rc = cap_call_inline(I, initf, buf, nargs + 1, kwnames, cap_ret_init);
    if (rc == CAP_FRAME)
        I->frame->ret_a = Py_NewRef(obj);
    if (rc == CAP_NEXT)
        return cap_t_break(I->T, CAP_B_UNSUPPORTED_CALL, "__init__ that cannot be interpreted");
    return rc;
}

/* torch.autocast(...) only records its settings: made for real (with
 * constant arguments), entered symbolically. */
static int make_autocast(cap_trace *T, PyObject *cls, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out)
{
    for (int i = 0; i < nargs; i++)
        if (cap_is_tensor(args[i]))
            return cap_t_break(T, CAP_B_CONTEXT_MANAGER, "autocast with a tensor argument");
    *out = cap_call_real(cls, args, nargs, kwnames);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* A class whose metaclass defines __call__: inlined when written in Python. */
static int metaclass_call(cap_interp *I, PyObject *mcall, PyObject *cls, PyObject *const *args,
                          int nargs, PyObject *kwnames, PyObject **out)
{
    if (mcall && cap_is_function(mcall)) {
        PyObject *buf[64];
        if (!prepend(buf, cls, args, nargs))
            return too_many_args(I->T);
        int rc = cap_call_inline(I, mcall, buf, nargs + 1, kwnames, cap_ret_push);
        if (rc != CAP_NEXT)
            return rc;
    }
    return real_call_flowed(I->T, cls, args, nargs, kwnames, out);
}

/* __new__ traced in a nested run; __init__ inlined on its result when that
 * is an instance of cls (as type.__call__ does). */
static int new_then_init(cap_interp *I, PyObject *cls, PyObject *newfn, PyObject *initf,
                         PyObject *const *args, int nargs, PyObject *kwnames, PyObject **out)
{
    PyObject *buf[64], *obj = NULL;
    if (!prepend(buf, cls, args, nargs))
        return too_many_args(I->T);
    int rc = cap_t_call_sync(I, newfn, buf, nargs + 1, kwnames, &obj);
    if (rc != CAP_NEXT)
        return rc;
    int inst = PyObject_IsInstance(obj, cls);
    if (inst <= 0) {
        *out = obj;
        return inst < 0 ? CAP_ERR : CAP_NEXT;
    }
    rc = inline_init(I, initf, obj, args, nargs, kwnames);
    Py_DECREF(obj);
    return rc;
}

/* A Python __new__ without a Python __init__: __new__ inlined when it can
 * be, else the class is called for real. */
static int python_new(cap_interp *I, PyObject *cls, PyObject *newfn, PyObject *const *args,
                      int nargs, PyObject *kwnames, PyObject **out)
{
    PyObject *buf[64];
    if (!prepend(buf, cls, args, nargs))
        return too_many_args(I->T);
    int rc = cap_call_inline(I, newfn, buf, nargs + 1, kwnames, cap_ret_push);
    if (rc != CAP_NEXT)
        return rc;
    return real_call_flowed(I->T, cls, args, nargs, kwnames, out);
}

/* C __new__ (object, dict, ...) for real, then __init__ inlined. */
static int c_new_then_init(cap_interp *I, PyObject *cls, PyObject *initf, PyObject *const *args,
                           int nargs, PyObject *kwnames, PyObject **out)
{
    PyObject *newbound = PyObject_GetAttr(cls, cap_P.s_new);
    PyObject *obj = newbound ? PyObject_CallOneArg_compat(newbound, cls) : NULL;
    Py_XDECREF(newbound);
    if (!obj)
        return CAP_ERR;
    if (!PyObject_TypeCheck(obj, (PyTypeObject *)cls)) {
        *out = obj;
        return CAP_NEXT;
    }
    int rc = inline_init(I, initf, obj, args, nargs, kwnames);
    Py_DECREF(obj);
    return rc;
}

/* cls(*args) while tracing: its __new__ and __init__ inlined where they are
 * Python, run for real where they are C. */
static int instantiate(cap_interp *I, PyObject *cls, PyObject *const *args, int nargs,
                       PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    if (cap_T.autocast_cls &&
        PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)cap_T.autocast_cls))
        return make_autocast(T, cls, args, nargs, kwnames, out);
    PyObject *mcall = cap_type_lookup(Py_TYPE(cls), cap_P.s_call);
    if (mcall != cap_type_lookup(&PyType_Type, cap_P.s_call))
        return metaclass_call(I, mcall, cls, args, nargs, kwnames, out);
    PyObject *newf = cap_type_lookup((PyTypeObject *)cls, cap_P.s_new);
    PyObject *initf = cap_type_lookup((PyTypeObject *)cls, cap_P.s_init);
    bool py_new = newf && PyObject_TypeCheck(newf, (PyTypeObject *)cap_P.StaticMethodType);
    PyObject *newfn = py_new ? PyObject_GetAttrString(newf, "__func__") : NULL;
    if (py_new && !cap_is_function(newfn))
        py_new = false;
    bool py_init = initf && cap_is_function(initf);
    if (py_new) {
        int rc = py_init ? new_then_init(I, cls, newfn, initf, args, nargs, kwnames, out)
                         : python_new(I, cls, newfn, args, nargs, kwnames, out);
        Py_DECREF(newfn);
        return rc;
    }
    Py_XDECREF(newfn);
    if (!py_init)
        return real_call_flowed(T, cls, args, nargs, kwnames, out);
    return c_new_then_init(I, cls, initf, args, nargs, kwnames, out);
}

/* ---- C callables -------------------------------------------------------------------------- */

static const char *read_only_methods[] = {
    "get", "keys", "values", "items", "copy", "index", "count", "__contains__", "__len__",
    "__getitem__", "__iter__", "startswith", "endswith", NULL,
};

static bool is_read_only(const char *name)
{
    for (int i = 0; read_only_methods[i]; i++)
        if (strcmp(read_only_methods[i], name) == 0)
            return true;
    return false;
}

/* A method of an outside dict/list: reads go through the tracer. */
/* d.get(key) on an outside dict: the key's presence is guarded; *out is
 * the value (through its source) or NULL when the key is missing. */
int cap_t_dict_lookup(cap_interp *I, PyObject *d, PyObject *key, PyObject **out)
{
    cap_trace *T = I->T;
    *out = NULL;
    if (!cap_is_key(key))
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "dict lookup with a non-constant key");
    PyObject *written = NULL;
    int w = cap_t_dict_written(T, d, key, &written);
    if (w >= 0) {
        *out = w ? Py_NewRef(written) : NULL;
        return CAP_NEXT;
    }
    int has = PyDict_Contains(d, key);
    if (has < 0)
        return CAP_ERR;
    if (!has)
        return cap_guard_add(T, CAP_G_DICT_HAS, cap_t_source_of(T, d), key, 0) < 0 ? CAP_ERR : CAP_NEXT;
    /* not written in this trace: what d stores, as dict's own lookup reads
       it (a subclass's __getitem__ aside) */
    return cap_t_stored_dict_item(T, d, key, out);
}

/* The class whose C method callable is (a method-wrapper and a method
 * descriptor say; a bound builtin's descriptor does), new ref or NULL. */
static PyObject *method_owner(PyObject *callable, PyObject *self)
{
    PyObject *owner = PyObject_GetAttrString(callable, "__objclass__");
    if (owner || !PyCFunction_Check(callable)) {
        PyErr_Clear();
        return owner;
    }
    PyErr_Clear();
    PyObject *name = PyObject_GetAttr(callable, cap_P.s_name);
    PyObject *descr = name ? cap_builtin_descriptor(callable, self, name) : NULL;
    owner = descr ? PyObject_GetAttrString(descr, "__objclass__") : NULL;
    PyErr_Clear();
    Py_XDECREF(descr);
    Py_XDECREF(name);
    return owner;
}

/* The method callable of an outside set (which ptc does not copy), bound
 * to it. */
static PyObject *bound_to(PyObject *callable, PyObject *self)
{
    if (PyCFunction_Check(callable) || Py_TYPE(callable) == (PyTypeObject *)cap_P.MethodWrapperType)
        return Py_NewRef(callable);
    return PyObject_CallMethod(callable, "__get__", "(O)", self);
}

/* A dict view a read of an outside dict returned, a view of the trace's
 * copy, which stands for the outside dict where the view escapes (live, as
 * eager's). An OrderedDict's view is remade on an OrderedDict of the copy's
 * items (the copy lists them in the OrderedDict's order): an odict view, as
 * eager's, that escapes as a view of the caller's OrderedDict. */
static int view_result(cap_trace *T, const char *name, PyObject *copy, PyObject *self,
                       PyObject **out)
{
    if (copy == self)
        return CAP_NEXT; /* no copy: the view is the object's own */
    if (!PyObject_TypeCheck(self, (PyTypeObject *)cap_P.OrderedDict))
        return cap_t_map(T, copy, cap_t_source_of(T, self)) < 0 ? CAP_ERR : CAP_NEXT;
    PyObject *ordered = PyObject_CallFunctionObjArgs(cap_P.OrderedDict, copy, NULL);
    PyObject *view = ordered ? PyObject_CallMethod(ordered, name, NULL) : NULL;
    int rc = view && cap_t_map(T, ordered, cap_t_source_of(T, self)) == 0 ? CAP_NEXT : CAP_ERR;
    Py_XDECREF(ordered);
    if (rc == CAP_NEXT)
        Py_SETREF(*out, view);
    else
        Py_XDECREF(view);
    return rc;
}

/* od.copy() / dd.copy() of an outside OrderedDict or defaultdict (exactly
 * those: a subclass's copy calls its own constructor): a new one holding
 * the items the object stores, in its order, with the same default_factory
 * (read through the object's source, guarded). */
static int typed_dict_copy(cap_interp *I, PyObject *self, PyObject **out)
{
    PyObject *items = NULL, *factory = NULL, *name = NULL;
    int rc = cap_t_current(I, &self); /* written in this trace: a break */
    if (rc != CAP_NEXT)
        return rc;
    if (!(items = cap_t_stored_items(I->T, self)))
        return CAP_ERR;
    if ((PyObject *)Py_TYPE(self) == cap_P.OrderedDict) {
        *out = PyObject_CallFunctionObjArgs(cap_P.OrderedDict, items, NULL);
    } else {
        name = PyUnicode_InternFromString("default_factory");
        rc = name ? cap_t_getattr(I, self, name, &factory) : CAP_ERR;
        *out = rc == CAP_NEXT ? PyObject_CallFunctionObjArgs(cap_P.defaultdict, factory, items, NULL)
                              : NULL;
    }
    Py_DECREF(items);
    Py_XDECREF(factory);
    Py_XDECREF(name);
    return rc != CAP_NEXT ? rc : *out ? CAP_NEXT : CAP_ERR;
}

/* A C method of an outside list, tuple, dict or set. Mutators are logged
 * (or break); a read of list, tuple or dict runs on the items the object
 * holds in its own storage, as that method reads them whatever a subclass
 * overrides (super().__getitem__ in an override of __getitem__), each item
 * through its source, so that guards cover what the read saw. Another C
 * method of a subclass (defaultdict.copy) breaks. */
static int outside_container_method(cap_interp *I, PyObject *callable, PyObject *self,
                                    const char *name, PyObject *const *args, int nargs,
                                    PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    if (!is_read_only(name)) {
        int rc = cap_t_outside_mutator(I, self, name, args, nargs, kwnames, out);
        if (rc != CAP_NONE)
            return rc;
        return cap_t_break(T, CAP_B_MUTATE_OUTSIDE, "%s.%s() on an object from outside",
                           cap_tpname(Py_TYPE(self)), name);
    }
    PyTypeObject *type = Py_TYPE(self);
    if (strcmp(name, "copy") == 0 && nargs == 0 && !kwnames &&
        ((PyObject *)type == cap_P.OrderedDict || (PyObject *)type == cap_P.defaultdict))
        return typed_dict_copy(I, self, out);
    PyObject *owner = method_owner(callable, self);
    /* OrderedDict's views list what a plain dict in its order (the copy's)
       lists; its copy() is not a dict's (a subclass's is its own) */
    PyTypeObject *base = owner && PyType_Check(owner) ? (PyTypeObject *)owner : NULL;
    bool stored = base == &PyList_Type || base == &PyTuple_Type || base == &PyDict_Type ||
                  (owner && owner == cap_P.OrderedDict && strcmp(name, "copy") != 0);
    if (!stored && !PyAnySet_Check(self)) {
        int rc = cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "%s.%s() on an object from outside",
                             cap_tpname(base ? base : Py_TYPE(self)), name);
        Py_XDECREF(owner);
        return rc;
    }
    Py_XDECREF(owner);
    PyObject *getitem = cap_type_lookup(Py_TYPE(self), cap_P.s_getitem);
    if (PyDict_Check(self) && strcmp(name, "get") == 0 && nargs >= 1 && !kwnames &&
        !(getitem && cap_is_function(getitem))) {
        int rc = cap_t_dict_lookup(I, self, args[0], out);
        if (rc == CAP_NEXT && !*out)
            *out = Py_NewRef(nargs > 1 ? args[1] : Py_None);
        return rc;
    }
    if (cap_t_current(I, &self) != CAP_NEXT)
        return CAP_ERR;
    PyObject *copy = cap_t_stored_items(T, self);
    if (!copy)
        return CAP_ERR;
    /* a copy is a plain list, tuple or dict (so is the trace's shadow of
       one it wrote): its method of that name is the one the program
       called */
    PyObject *m =
        PyAnySet_Check(copy) ? bound_to(callable, copy) : PyObject_GetAttrString(copy, name);
    int rc = m ? real_call_flowed(T, m, args, nargs, kwnames, out) : CAP_ERR;
    Py_XDECREF(m);
    if (rc == CAP_NEXT &&
        (PyDictKeys_Check(*out) || PyDictValues_Check(*out) || PyDictItems_Check(*out)))
        rc = view_result(T, name, copy, self, out);
    Py_DECREF(copy);
    return rc;
}

/* Builtin types whose __new__ only allocates and fills. */
static bool plain_new(PyObject *type)
{
    return type == (PyObject *)&PyBaseObject_Type || type == (PyObject *)&PyTuple_Type ||
           type == (PyObject *)&PyList_Type || type == (PyObject *)&PyDict_Type ||
           type == (PyObject *)&PySet_Type || type == (PyObject *)&PyFrozenSet_Type ||
           type == (PyObject *)&PyLong_Type || type == (PyObject *)&PyFloat_Type ||
           type == (PyObject *)&PyUnicode_Type;
}

/* l.extend(it) on a list made in the trace: item by item, as CPython does
 * for an iterator, so callbacks under it see the items added so far. A
 * break or an uncaught error takes the list and the iterators back. */
static int extend_lazily(cap_interp *I, PyObject *list, PyObject *it, PyObject **out)
{
    Py_ssize_t n0 = PyList_Size(list);
    cap_iter_marks marks;
    cap_iter_mark(&marks, &it, 1);
    PyObject *v = NULL;
    int rc;
    while ((rc = cap_t_next_sync(I, it, &v)) == CAP_NEXT && v) {
        int r = PyList_Append(list, v);
        Py_DECREF(v);
        if (r < 0) {
            rc = CAP_ERR;
            break;
        }
    }
    if (cap_t_reruns(I, rc))
        PyList_SetSlice(list, n0, PyList_Size(list), NULL);
    rc = cap_iter_rewind(I, &marks, rc);
    if (rc == CAP_NEXT)
        *out = Py_NewRef(Py_None);
    return rc;
}

static int c_callable(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    PyObject *self = NULL;
    const char *name = "?";
    if (PyDict_Check(cap_P.builtins) && callable == PyDict_GetItemString(cap_P.builtins, "__build_class__"))
        return cap_t_break(T, CAP_B_UNINTERPRETABLE, "class definition");
    PyObject *nm = PyObject_GetAttr(callable, cap_P.s_name);
    if (nm && PyUnicode_Check(nm))
        name = PyUnicode_AsUTF8(nm);
    PyErr_Clear();
    PyObject *held = NULL;
    if (PyCFunction_Check(callable)) {
        self = PyCFunction_GetSelf(callable);
    } else if (Py_TYPE(callable) == (PyTypeObject *)cap_P.MethodWrapperType) {
        held = self = PyObject_GetAttr(callable, cap_P.s_self);
        PyErr_Clear();
    } else if ((PyObject_TypeCheck(callable, &PyMethodDescr_Type) ||
                PyObject_TypeCheck(callable, &PyWrapperDescr_Type)) && nargs > 0) {
        self = args[0], args++, nargs--;
    }
    int rc;
    PyObject *objclass = self ? PyObject_GetAttrString(callable, "__objclass__") : NULL;
    PyErr_Clear();
    if (objclass == (PyObject *)&PyBaseObject_Type && self && !cap_is_tensor(self) && !kwnames &&
        (strcmp(name, "__getattribute__") == 0 || strcmp(name, "__setattr__") == 0 ||
         strcmp(name, "__delattr__") == 0) && nargs >= 1 && PyUnicode_Check(args[0])) {
        /* object.__getattribute__(obj, name) and friends (as super() calls
           them): the generic lookup, traced. */
        Py_DECREF(objclass);
        if (name[2] == 'g' && nargs == 1)
            rc = cap_t_getattr_generic(I, self, args[0], out);
        else if (name[2] == 's' && nargs == 2 && (rc = cap_t_setattr_generic(I, self, args[0], args[1])) == CAP_NEXT)
            *out = Py_NewRef(Py_None);
        else if (name[2] == 'd' && nargs == 1 && (rc = cap_t_setattr_generic(I, self, args[0], NULL)) == CAP_NEXT)
            *out = Py_NewRef(Py_None);
        else
            rc = cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "object.%s with unusual arguments", name);
        Py_XDECREF(nm);
        Py_XDECREF(held);
        return rc;
    }
    Py_XDECREF(objclass);
    if (self && PyType_Check(self) && strcmp(name, "__new__") == 0 && nargs >= 1 && PyType_Check(args[0]) &&
        PyType_IsSubtype((PyTypeObject *)args[0], (PyTypeObject *)self) && plain_new(self) &&
        tensor_in(args + 1, nargs - 1) < 0) {
        /* object.__new__(cls), tuple.__new__(cls, items) (namedtuples) and
           the like only allocate: made for real, with the trace's values. */
        rc = real_call_flowed(T, callable, args, nargs, kwnames, out);
        Py_XDECREF(nm);
        Py_XDECREF(held);
        return rc;
    }
    if (self && !PyModule_Check(self) && !PyType_Check(self)) {
        if (cap_is_tensor(self)) {
            rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "Tensor.%s", name);
        } else if (PyObject_TypeCheck(self, (PyTypeObject *)cap_T.Tensor)) {
            char what[80];
            snprintf(what, sizeof what, "Tensor.%s", name);
            rc = cap_t_real_tensor(T, self, what);
        } else if (cap_t_outside(T, self) && !cap_is_constant(self)) {
            if (PyDict_Check(self) || PyList_Check(self) || PyTuple_Check(self) || PyAnySet_Check(self))
                rc = outside_container_method(I, callable, self, name, args, nargs, kwnames, out);
            else
                rc = cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "%s.%s() on an object from outside",
                                 cap_tpname(Py_TYPE(self)), name);
        } else if (PyList_CheckExact(self) && strcmp(name, "extend") == 0 && nargs == 1 && !kwnames &&
                   cap_is_ptc_iter(args[0])) {
            rc = extend_lazily(I, self, args[0], out);
        } else {
            PyObject *m = PyCFunction_Check(callable) || held ? Py_NewRef(callable)
                                                             : PyObject_GetAttrString(self, name);
            rc = m ? real_call_flowed(T, m, args, nargs, kwnames, out) : CAP_ERR;
            Py_XDECREF(m);
        }
    } else if (cap_is_pure_fn(callable)) {
        int npos = nargs - (kwnames ? (int)PyTuple_Size(kwnames) : 0);
        if (npos > 0 && cap_pure_fn_writes(callable) && cap_t_outside(T, args[0]) &&
            !cap_is_constant(args[0]))
            rc = cap_t_break(T, CAP_B_MUTATE_OUTSIDE, "%s() writes a %s from outside", name,
                             cap_tpname(Py_TYPE(args[0])));
        else
            rc = real_call_flowed(T, callable, args, nargs, kwnames, out);
    } else {
        PyObject *mod = PyObject_GetAttr(callable, cap_P.s_module);
        PyErr_Clear();
        rc = cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "call to %s%s%s",
                         mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : "",
                         mod && PyUnicode_Check(mod) ? "." : "", name);
        Py_XDECREF(mod);
    }
    Py_XDECREF(nm);
    Py_XDECREF(held);
    return rc;
}

/* ---- the dispatcher ------------------------------------------------------------------------ */

/* Python functions run for real as one call rather than traced: copying
 * walks arbitrary object graphs through __reduce_ex__ and a memo dict, which
 * would break the trace at every step. */
static const char *opaque_python(PyObject *fn)
{
    static const char *paths[] = {"copy.deepcopy", "copy.copy"};
    static PyObject *fns[2];
    static bool init;
    if (!init) {
        init = true;
        for (int i = 0; i < 2; i++) {
            fns[i] = cap_import_path(paths[i]);
            PyErr_Clear();
        }
    }
    for (int i = 0; i < 2; i++)
        if (fns[i] && fn == fns[i])
            return paths[i];
    return NULL;
}

/* collections.namedtuple(...) of constant arguments: its Python code builds
 * the class with eval and sets attributes of the new functions, which would
 * break the trace at each step; it only makes a class, so it runs for real
 * as one call. The class is made when the function is traced and kept by
 * the compiled code (eager makes a new one per call: `type(f(x)) is
 * type(f(x))` holds under ptc only). */
static bool class_factory_call(PyObject *fn, PyObject *const *args, int nargs)
{
    static PyObject *namedtuple;
    if (!namedtuple && !(namedtuple = cap_import_path("collections.namedtuple"))) {
        PyErr_Clear();
        return false;
    }
    if (fn != namedtuple)
        return false;
    for (int i = 0; i < nargs; i++) {
        PyObject *a = args[i];
        if (cap_is_constant(a))
            continue;
        if (!PyList_Check(a) && !PyTuple_Check(a))
            return false;
        for (Py_ssize_t k = 0; k < PySequence_Size(a); k++)
            if (!cap_is_constant(PyList_Check(a) ? PyList_GetItem(a, k) : PyTuple_GetItem(a, k)))
                return false;
    }
    return true;
}

/* A method of a torch.optim optimizer (step, with its profiling and grad-mode
 * wrappers): it reads every parameter's .grad, which a compiled backward
 * has just written, and updates parameters and its state in place, so it
 * runs for real as one call, as loss.backward() does, instead of breaking
 * at each .grad read and state write inside it. */
static bool optimizer_method(PyObject *fn, PyObject *const *args, int nargs)
{
    static PyObject *optimizer;
    if (!optimizer && !(optimizer = cap_import_path("torch.optim.Optimizer"))) {
        PyErr_Clear();
        return false;
    }
    if (nargs < 1 || PyObject_IsInstance(args[0], optimizer) != 1) {
        PyErr_Clear();
        return false;
    }
    PyObject *module = PyObject_GetAttrString(fn, "__module__");
    const char *name = module && PyUnicode_Check(module) ? PyUnicode_AsUTF8(module) : NULL;
    bool torch_optim = name && strncmp(name, "torch.optim", strlen("torch.optim")) == 0;
    Py_XDECREF(module);
    PyErr_Clear();
    return torch_optim;
}

/* A generator expression, (f(x) for x in xs), is a lazy generator (iter.c):
 * its body runs traced when the program advances it, one item at a time,
 * as in eager. */
static int make_genexpr(cap_interp *I, PyObject *fn, PyObject *const *args, int nargs,
                        PyObject *kwnames, PyObject **out)
{
    if (nargs != 1 || kwnames)
        return cap_t_break(I->T, CAP_B_GENERATOR, "generator expression (arguments)");
    PyObject *its = PyTuple_Pack(1, args[0]);
    *out = its ? cap_lazy_new(CAP_LAZY_GEN, fn, its, NULL, false) : NULL;
    Py_XDECREF(its);
    return *out ? CAP_NEXT : CAP_ERR;
}

static int call_function(cap_interp *I, PyObject *fn, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    const char *disabled = cap_disabled_by(fn);
    if (disabled)
        return cap_t_break(T, CAP_B_DISABLED, "%s is marked %s", cap_func_name(fn), disabled);
    const char *split = cap_graph_split_reason(fn, args, nargs);
    if (split)
        return cap_t_break(T, CAP_B_GRAPH_SPLIT, "%s", split);
    int cut = cap_t_graph_cut(T, fn, args, nargs);
    if (cut) {
        *out = cut > 0 ? Py_NewRef(Py_None) : NULL;
        return cut > 0 ? CAP_NEXT : CAP_ERR;
    }
    int mk = cap_module_iter_kind(fn);
    if (mk >= 0)
        return cap_module_iter_call(I, mk, args, nargs, kwnames, out);
    if (optimizer_method(fn, args, nargs))
        return cap_t_break(T, CAP_B_AUTOGRAD, "optimizer %s (runs for real as one call)",
                           cap_func_name(fn));
    if (class_factory_call(fn, args, nargs))
        return real_call_flowed(T, fn, args, nargs, kwnames, out);
    int copied = cap_t_copy_call(I, fn, args, nargs, kwnames, out);
    if (copied != CAP_NONE)
        return copied;
    const char *opaque = opaque_python(fn);
    if (opaque)
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "%s (runs for real as one call)", opaque);
    PyObject *code = PyObject_GetAttr(fn, cap_P.s_code);
    cap_code *c = code ? cap_code_get(code) : NULL;
    Py_XDECREF(code);
    if (!c)
        return CAP_ERR;
    if (c->notrace) {
        if (c->genexpr)
            return make_genexpr(I, fn, args, nargs, kwnames, out);
        if (c->flags & 0x20)
            return cap_t_break(T, CAP_B_GENERATOR, "call to generator function %s", c->qualname_s);
        return cap_t_break(T, (c->flags & 0x380) ? CAP_B_GENERATOR : CAP_B_UNINTERPRETABLE,
                           "%s is %s", c->qualname_s, c->notrace);
    }
    if (cap_t_no_inline(T, I->frame))
        return cap_t_break(T, CAP_B_UNSUPPORTED_OBJECT, "call to %s runs as its own frame",
                           c->qualname_s);
    int rc = cap_call_inline(I, unpatched_module_init(fn), args, nargs, kwnames, cap_ret_push);
    if (rc == CAP_NEXT) /* binding failed: CPython raises the TypeError */
        return cap_t_break(T, CAP_B_RAISE, "arguments do not match %s", c->qualname_s);
    return rc;
}

/* The function, arguments and keywords of a functools.partial; of one from
 * outside, read through their sources, so that guards cover them (a
 * partial with other arguments on the next call is another). */
static int partial_parts(cap_interp *I, PyObject *p, PyObject **fn, PyObject **pargs,
                         PyObject **pkw)
{
    cap_trace *T = I->T;
    if (!cap_t_outside(T, p) || cap_is_constant(p))
        return cap_partial_unpack(p, fn, pargs, pkw) < 0 ? CAP_ERR : CAP_NEXT;
    if (!cap_is_exact_partial(p))
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "call of an outside %s",
                           cap_tpname(Py_TYPE(p)));
    const char *names[3] = {"func", "args", "keywords"};
    PyObject *parts[3] = {NULL, NULL, NULL};
    int rc = CAP_NEXT;
    for (int i = 0; i < 3 && rc == CAP_NEXT; i++) {
        PyObject *name = PyUnicode_FromString(names[i]), *v = NULL;
        rc = name ? cap_t_getattr(I, p, name, &v) : CAP_ERR;
        Py_XDECREF(name);
        parts[i] = v;
        if (rc == CAP_NEXT && i) {
            /* the tuple and the dict as plain ones of the values under guards */
            parts[i] = cap_t_flow(T, v);
            Py_DECREF(v);
            rc = parts[i] ? CAP_NEXT : CAP_ERR;
        }
    }
    if (rc == CAP_NEXT && !(PyTuple_Check(parts[1]) && PyDict_Check(parts[2])))
        rc = cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "call of a partial with odd parts");
    if (rc != CAP_NEXT) {
        for (int i = 0; i < 3; i++)
            Py_XDECREF(parts[i]);
        return rc;
    }
    *fn = parts[0], *pargs = parts[1], *pkw = parts[2];
    return CAP_NEXT;
}

/* A torch function's arguments as it should read them: the outside lists
 * and dicts this trace wrote replaced by their shadows (buf: 64 entries). */
static int current_args(cap_interp *I, PyObject *const **args, int nargs, PyObject **buf)
{
    if (PyDict_Size(I->T->mut) == 0 || nargs > 64)
        return CAP_NEXT;
    for (int i = 0; i < nargs; i++) {
        buf[i] = (*args)[i];
        int rc = cap_t_current(I, &buf[i]);
        if (rc != CAP_NEXT)
            return rc;
    }
    *args = buf;
    return CAP_NEXT;
}

int cap_t_call(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
               PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    PyObject *current[64];
    if (Py_TYPE(callable) == cap_method_type) {
        cap_method *m = (cap_method *)callable;
        int rc = current_args(I, &args, nargs, current);
        return rc != CAP_NEXT ? rc : cap_thooks.call(T, m->map, m->self, args, nargs, kwnames, out);
    }
    const cap_tmap *tm = cap_thooks.lookup_fn(callable);
    if (tm) {
        int rc = current_args(I, &args, nargs, current);
        return rc != CAP_NEXT ? rc : cap_thooks.call(T, tm, NULL, args, nargs, kwnames, out);
    }
    if (cap_is_method(callable)) {
        PyObject *fn = PyObject_GetAttr(callable, cap_P.s_func);
        PyObject *self = PyObject_GetAttr(callable, cap_P.s_self);
        PyObject *buf[64];
        int rc;
        if (!fn || !self || nargs > 62) {
            rc = fn && self ? cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "too many arguments") : CAP_ERR;
        } else {
            buf[0] = self;
            memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
            rc = cap_t_call(I, fn, buf, nargs + 1, kwnames, out);
        }
        Py_XDECREF(fn);
        Py_XDECREF(self);
        return rc;
    }
    if (Py_TYPE(callable) == cap_gradexit_type) {
        cap_gradexit *g = (cap_gradexit *)callable;
        if (g->kind == CAP_EXIT_GRAD)
            T->grad_enabled = g->prev;
        if (g->kind == CAP_EXIT_AMP)
            T->amp = cap_amp_unpack(g->amp_prev);
        *out = Py_NewRef(Py_False);
        return CAP_NEXT;
    }
    int fb = cap_frame_builtin(I->frame, callable, args, nargs, kwnames, out);
    if (fb)
        return fb > 0 ? CAP_NEXT : CAP_ERR;
    int bid = builtin_of(callable);
    if (bid)
        return do_builtin(I, bid, callable, args, nargs, kwnames, out);
    int rc = cap_thooks.foreach_call(I, callable, args, nargs, kwnames, out);
    if (rc == CAP_NONE)
        rc = cap_torch_special_call(I, callable, args, nargs, kwnames, out);
    if (rc != CAP_NONE)
        return rc;
    if (PyObject_TypeCheck(callable, (PyTypeObject *)cap_T.Module))
        return cap_t_module_call(I, callable, args, nargs, kwnames, out);
    if (cap_is_function(callable))
        return call_function(I, callable, args, nargs, kwnames, out);
    if (PyType_Check(callable))
        return instantiate(I, callable, args, nargs, kwnames, out);
    if (cap_is_partial(callable)) {
        PyObject *fn = NULL, *pargs = NULL, *pkw = NULL;
        if ((rc = partial_parts(I, callable, &fn, &pargs, &pkw)) != CAP_NEXT)
            return rc;
        rc = cap_t_call_partial(I, fn, pargs, pkw, args, nargs, kwnames, out);
        Py_DECREF(fn);
        Py_DECREF(pargs);
        Py_DECREF(pkw);
        return rc;
    }
    if (PyCFunction_Check(callable) || PyObject_TypeCheck(callable, &PyMethodDescr_Type) ||
        Py_TYPE(callable) == (PyTypeObject *)cap_P.MethodWrapperType ||
        PyObject_TypeCheck(callable, &PyWrapperDescr_Type) ||
        PyObject_TypeCheck(callable, &PyClassMethodDescr_Type))
        return c_callable(I, callable, args, nargs, kwnames, out);
    if ((rc = cap_t_call_lru(I, callable, args, nargs, kwnames, out)) != CAP_NONE)
        return rc;
    PyObject *call = cap_type_lookup(Py_TYPE(callable), cap_P.s_call);
    if (call && cap_is_function(call)) {
        PyObject *buf[64];
        if (nargs > 62)
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "too many arguments");
        buf[0] = callable;
        memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
        return call_function(I, call, buf, nargs + 1, kwnames, out);
    }
    if ((rc = cap_t_call_getter(I, callable, args, nargs, kwnames, out)) != CAP_NONE)
        return rc;
    return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "call to a %s", cap_tpname(Py_TYPE(callable)));
}
