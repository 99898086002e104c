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
#include "torch.h"

#include <string.h>

#define CAP_BUILTINS(X)                                                         \
    X(len) X(isinstance) X(issubclass) X(type) X(getattr) X(hasattr) X(setattr)  \
    X(delattr) X(iter) X(next) X(print) X(input) X(open) X(range) X(enumerate)  \
    X(zip) X(reversed) X(map) X(filter) X(sorted) X(min) X(max) X(sum) X(any)   \
    X(all) X(list) X(tuple) X(set) X(frozenset) X(dict) X(str) X(repr) X(format) \
    X(ascii) X(int) X(float) X(bool) X(complex) X(abs) X(round) X(pow) X(divmod) \
    X(hash) X(id) X(callable) X(vars) X(chr) X(ord) X(bin) X(hex) X(oct)        \
    X(slice) X(object) X(super) X(staticmethod) X(classmethod) X(property)      \
    X(bytes) X(breakpoint)

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
    I->frame->ret_kind = RET_SYNC;
    int rc = cap_run(I);
    if (rc == CAP_SYNC) {
        *out = I->sync_result;
        I->sync_result = NULL;
        return CAP_NEXT;
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
    int rc = cap_op_call(I, callable, args, nargs, kwnames, out);
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
    if (cap_is_tensor(obj))
        r = PyObject_IsSubclass(((cap_tensor *)obj)->fake_type, cls);
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
        if (t->v->type.shape[0].sym)
            return cap_t_break(T, CAP_B_TENSOR_ITEM, "len() of a dynamic dimension");
        *out = PyLong_FromLongLong(t->v->type.shape[0].value);
        return CAP_NEXT;
    }
    PyObject *m = cap_type_lookup(Py_TYPE(x), PyUnicode_InternFromString("__len__"));
    if (m && cap_is_function(m)) {
        PyObject *args[1] = {x};
        int rc = cap_call_inline(I, m, args, 1, NULL, RET_PUSH);
        if (rc != CAP_NEXT)
            return rc;
    }
    if (Py_TYPE(x) == cap_iter_type) {
        PyErr_SetString(PyExc_TypeError, "object of type 'iterator' has no len()");
        return CAP_ERR;
    }
    int src = cap_t_source_of(T, x);
    Py_ssize_t n = PyObject_Size(x);
    if (n < 0)
        return CAP_ERR;
    if (src >= 0 && !cap_is_constant(x) && cap_guard_add(T, CAP_G_LEN, src, NULL, n) < 0)
        return CAP_ERR;
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

/* Builtins over iterables: the items are materialized through the tracer. */
static int do_iterables(cap_interp *I, int id, PyObject *const *args, int nargs,
                        PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    int npos = nargs - kw_count(kwnames), rc = CAP_NEXT;
    PyObject *lists[8] = {0}, *res = NULL;
    int nl = id == B_zip || id == B_map ? npos - (id == B_map) : (npos > 0 ? 1 : 0);
    if (nl > 8)
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "zip of more than 8 iterables");
    int first = id == B_map || id == B_filter ? 1 : 0;
    /* Materializing advances ptc's own iterators (iter(), a drained generator
       expression); a break after it reruns the call for real from where
       they were, so their positions go back then. */
    Py_ssize_t pos[8];
    for (int k = 0; k < nl; k++)
        pos[k] = Py_TYPE(args[first + k]) == cap_iter_type ? ((cap_iter *)args[first + k])->i : -1;
    if (id == B_min || id == B_max) {
        if (npos > 1) /* min(a, b, ...) */
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "unreachable");
    }
    for (int k = 0; k < nl; k++) {
        lists[k] = cap_t_materialize(I, args[first + k], &rc);
        if (!lists[k])
            goto done;
    }
    switch (id) {
    case B_list:
        res = nl ? Py_NewRef(lists[0]) : PyList_New(0);
        break;
    case B_tuple:
        res = nl ? PyList_AsTuple(lists[0]) : PyTuple_New(0);
        break;
    case B_set:
        res = PySet_New(nl ? lists[0] : NULL);
        break;
    case B_frozenset:
        res = PyFrozenSet_New(nl ? lists[0] : NULL);
        break;
    case B_enumerate: {
        PyObject *start = npos > 1 ? args[1] : kw_get(args, nargs, kwnames, "start");
        long long s0 = start ? PyLong_AsLongLong(start) : 0;
        res = PyList_New(PyList_Size(lists[0]));
        for (Py_ssize_t i = 0; res && i < PyList_Size(lists[0]); i++)
            PyList_SetItem(res, i, Py_BuildValue("(LO)", s0 + (long long)i, PyList_GetItem(lists[0], i)));
        break;
    }
    case B_zip: {
        Py_ssize_t n = nl ? PyList_Size(lists[0]) : 0;
        for (int k = 1; k < nl; k++)
            if (PyList_Size(lists[k]) < n)
                n = PyList_Size(lists[k]);
        PyObject *strict = kw_get(args, nargs, kwnames, "strict");
        if (strict && PyObject_IsTrue(strict) == 1)
            for (int k = 1; k < nl; k++)
                if (PyList_Size(lists[k]) != PyList_Size(lists[0])) {
                    PyErr_SetString(PyExc_ValueError, "zip() arguments have different lengths");
                    rc = CAP_ERR;
                    goto done;
                }
        res = PyList_New(n);
        for (Py_ssize_t i = 0; res && i < n; i++) {
            PyObject *t = PyTuple_New(nl);
            for (int k = 0; k < nl; k++)
                PyTuple_SetItem(t, k, Py_NewRef(PyList_GetItem(lists[k], i)));
            PyList_SetItem(res, i, t);
        }
        break;
    }
    case B_reversed:
        res = Py_NewRef(lists[0]);
        PyList_Reverse(res);
        break;
    case B_map:
    case B_filter: {
        Py_ssize_t n = PyList_Size(lists[0]);
        for (int k = 1; k < nl; k++)
            if (PyList_Size(lists[k]) < n)
                n = PyList_Size(lists[k]);
        res = PyList_New(0);
        for (Py_ssize_t i = 0; res && i < n; i++) {
            PyObject *a[8], *r = NULL;
            for (int k = 0; k < nl; k++)
                a[k] = PyList_GetItem(lists[k], i);
            if (id == B_filter && args[0] == Py_None) {
                r = Py_NewRef(a[0]);
            } else if ((rc = cap_t_call_sync(I, args[0], a, nl, NULL, &r)) != CAP_NEXT) {
                Py_CLEAR(res);
                goto done;
            }
            if (id == B_map) {
                PyList_Append(res, r);
            } else {
                if (cap_is_tensor(r)) {
                    Py_DECREF(r);
                    rc = cap_t_break(T, CAP_B_TENSOR_BOOL, "filter() on tensor values");
                    Py_CLEAR(res);
                    goto done;
                }
                int t = PyObject_IsTrue(r);
                if (t > 0)
                    PyList_Append(res, a[0]);
            }
            Py_DECREF(r);
        }
        break;
    }
    case B_sorted:
    case B_min:
    case B_max: {
        PyObject *key = kw_get(args, nargs, kwnames, "key");
        PyObject *items = lists[0];
        if (key && key != Py_None) {
            /* Decorate with keys computed by traced calls. */
            PyObject *keys = PyList_New(0);
            for (Py_ssize_t i = 0; i < PyList_Size(items); i++) {
                PyObject *a[1] = {PyList_GetItem(items, i)}, *kv = NULL;
                if ((rc = cap_t_call_sync(I, key, a, 1, NULL, &kv)) != CAP_NEXT) {
                    Py_DECREF(keys);
                    goto done;
                }
                PyList_Append(keys, kv);
                Py_DECREF(kv);
            }
            /* Sort indices by key; pick the best index for min/max. */
            PyObject *idx = PyList_New(0);
            for (Py_ssize_t i = 0; i < PyList_Size(items); i++) {
                PyObject *pair = Py_BuildValue("(On)", PyList_GetItem(keys, i), i);
                PyList_Append(idx, pair);
                Py_DECREF(pair);
            }
            Py_DECREF(keys);
            PyObject *kw0 = PyDict_New();
            PyObject *rev = kw_get(args, nargs, kwnames, "reverse");
            if (rev)
                PyDict_SetItemString(kw0, "reverse", rev);
            PyObject *sortargs = PyTuple_Pack(1, idx);
            PyObject *sorted_fn = PyDict_GetItemString(cap_P.builtins, "sorted");
            PyObject *s = PyObject_Call(sorted_fn, sortargs, kw0);
            Py_DECREF(sortargs);
            Py_DECREF(kw0);
            Py_DECREF(idx);
            if (!s) {
                rc = CAP_ERR;
                goto done;
            }
            Py_ssize_t n = PyList_Size(s);
            if (id != B_sorted && n == 0) {
                PyObject *dflt = kw_get(args, nargs, kwnames, "default");
                if (dflt)
                    res = Py_NewRef(dflt);
                else
                    PyErr_Format(PyExc_ValueError, "%s() iterable argument is empty",
                                 id == B_min ? "min" : "max");
            } else if (id == B_sorted) {
                res = PyList_New(n);
                for (Py_ssize_t i = 0; i < n; i++) {
                    Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GetItem(PyList_GetItem(s, i), 1));
                    PyList_SetItem(res, i, Py_NewRef(PyList_GetItem(items, j)));
                }
            } else {
                /* min: first smallest; max: first largest (stable). */
                Py_ssize_t pick = 0;
                if (id == B_max) {
                    pick = n - 1;
                    PyObject *kmax = PyTuple_GetItem(PyList_GetItem(s, n - 1), 0);
                    while (pick > 0 && PyObject_RichCompareBool(
                                           PyTuple_GetItem(PyList_GetItem(s, pick - 1), 0), kmax, Py_EQ) == 1)
                        pick--;
                }
                Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GetItem(PyList_GetItem(s, pick), 1));
                res = Py_NewRef(PyList_GetItem(items, j));
            }
            Py_DECREF(s);
            break;
        }
        PyObject *fn = PyDict_GetItemString(cap_P.builtins, id == B_sorted ? "sorted" : id == B_min ? "min" : "max");
        PyObject *a0[1] = {items};
        PyObject *kwn = NULL;
        PyObject *kwv[2];
        int nk = 0;
        PyObject *rev = kw_get(args, nargs, kwnames, "reverse"), *dflt = kw_get(args, nargs, kwnames, "default");
        if (rev || dflt) {
            kwn = PyTuple_New((rev ? 1 : 0) + (dflt ? 1 : 0));
            if (rev) {
                PyTuple_SetItem(kwn, nk, PyUnicode_FromString("reverse"));
                kwv[nk++] = rev;
            }
            if (dflt) {
                PyTuple_SetItem(kwn, nk, PyUnicode_FromString("default"));
                kwv[nk++] = dflt;
            }
        }
        PyObject *all[3] = {a0[0], nk > 0 ? kwv[0] : NULL, nk > 1 ? kwv[1] : NULL};
        res = cap_call_real(fn, all, 1 + nk, kwn);
        Py_XDECREF(kwn);
        break;
    }
    case B_sum: {
        PyObject *acc = npos > 1 ? Py_NewRef(args[1]) : PyLong_FromLong(0);
        PyObject *start = kw_get(args, nargs, kwnames, "start");
        if (start)
            Py_SETREF(acc, Py_NewRef(start));
        for (Py_ssize_t i = 0; acc && i < PyList_Size(lists[0]); i++) {
            PyObject *r = NULL;
            rc = cap_op_binary(I, CAP_NB_ADD, acc, PyList_GetItem(lists[0], i), &r);
            if (rc == CAP_FRAME) {
                rc = cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "sum() over objects with Python __add__");
                Py_CLEAR(acc);
                goto done;
            }
            Py_SETREF(acc, r);
            if (rc != CAP_NEXT) {
                Py_CLEAR(acc);
                goto done;
            }
        }
        res = acc;
        break;
    }
    case B_any:
    case B_all: {
        bool want = id == B_any;
        res = Py_NewRef(want ? Py_False : Py_True);
        for (Py_ssize_t i = 0; i < PyList_Size(lists[0]); i++) {
            PyObject *v = PyList_GetItem(lists[0], i);
            if (cap_is_tensor(v)) {
                Py_CLEAR(res);
                rc = cap_t_break(T, CAP_B_TENSOR_BOOL, "%s() over tensors", want ? "any" : "all");
                goto done;
            }
            int t = PyObject_IsTrue(v);
            if (t < 0) {
                Py_CLEAR(res);
                rc = CAP_ERR;
                goto done;
            }
            if ((bool)t == want) {
                Py_SETREF(res, Py_NewRef(want ? Py_True : Py_False));
                break;
            }
        }
        break;
    }
    }
    if (!res && rc == CAP_NEXT)
        rc = CAP_ERR;
    if (res && (id == B_enumerate || id == B_zip || id == B_reversed || id == B_map || id == B_filter)) {
        *out = cap_iter_seq(res, -1, T);
        Py_DECREF(res);
        res = NULL;
        if (!*out)
            rc = CAP_ERR;
    } else {
        *out = res;
    }
done:
    for (int k = 0; k < 8; k++)
        Py_XDECREF(lists[k]);
    bool breaks = rc == CAP_BREAK || (rc == CAP_ERR && PyErr_ExceptionMatches(cap_GraphBreak));
    for (int k = 0; breaks && k < nl; k++)
        if (pos[k] >= 0)
            ((cap_iter *)args[first + k])->i = pos[k];
    return rc;
}

static int do_builtin(cap_interp *I, int id, PyObject *callable, PyObject *const *args,
                      int nargs, PyObject *kwnames, PyObject **out)
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
        if (npos == 1 && !kwnames) {
            *out = Py_NewRef(cap_is_tensor(args[0]) ? ((cap_tensor *)args[0])->fake_type
                                                   : (PyObject *)Py_TYPE(args[0]));
            return CAP_NEXT;
        }
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
        return cap_t_break(T, CAP_B_PRINT, "%s()", id == B_open ? "open" : id == B_input ? "input" : "breakpoint");
    case B_enumerate: case B_zip: case B_reversed: case B_map: case B_filter: case B_sorted:
    case B_sum: case B_any: case B_all: case B_list: case B_tuple: case B_set: case B_frozenset:
        if ((id == B_min || id == B_max) && npos != 1)
            break;
        return do_iterables(I, id, args, nargs, kwnames, out);
    case B_min:
    case B_max:
        if (npos == 1)
            return do_iterables(I, id, args, nargs, kwnames, out);
        if (ti >= 0)
            return cap_t_break(T, CAP_B_TENSOR_BOOL, "%s() comparing tensors", id == B_min ? "min" : "max");
        break;
    case B_str: case B_repr: case B_format: case B_ascii:
        if (ti >= 0)
            return cap_t_break(T, CAP_B_TENSOR_STR, "%s() of a tensor", id == B_str ? "str" : "repr");
        break;
    case B_int: case B_float: case B_bool: case B_complex: case B_chr: case B_hex: case B_oct:
    case B_bin: case B_divmod: case B_hash:
        if (ti >= 0)
            return cap_t_break(T, CAP_B_TENSOR_ITEM, "a tensor converted to a Python number");
        if (id == B_hash && npos == 1 && !cap_is_constant(args[0]) && !cap_t_outside(T, args[0]))
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "hash() of an object created in the trace");
        break;
    case B_abs:
        if (ti == 0 && npos == 1)
            return cap_torch_unary(T, -1, args[0], out);
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
    case B_id:
        /* id() of a traced tensor would be a different object's each call. */
        if (npos == 1 && cap_is_tensor(args[0]))
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "id() of a tensor");
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
    case B_dict:
        break;
    default:
        break;
    }
    return real_call_flowed(T, callable, args, nargs, kwnames, out);
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

static int module_call(cap_interp *I, PyObject *mod, PyObject *const *args, int nargs,
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

/* ---- classes ------------------------------------------------------------------------------ */

static int instantiate(cap_interp *I, PyObject *cls, PyObject *const *args, int nargs,
                       PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    if (cap_T.autocast_cls && PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)cap_T.autocast_cls)) {
        /* torch.autocast(...) only records its settings: made for real
           (with constant arguments), entered symbolically. */
        for (int i = 0; i < nargs; i++)
            if (cap_is_tensor(args[i]))
                return cap_t_break(T, CAP_B_CONTEXT_MANAGER, "autocast with a tensor argument");
        *out = cap_call_real(cls, args, nargs, kwnames);
        return *out ? CAP_NEXT : CAP_ERR;
    }
    PyTypeObject *meta = Py_TYPE(cls);
    PyObject *mcall = cap_type_lookup(meta, cap_P.s_call);
    PyObject *type_call = cap_type_lookup(&PyType_Type, cap_P.s_call);
    if (mcall != type_call) {
        if (mcall && cap_is_function(mcall)) {
            PyObject *buf[64];
            if (nargs > 62)
                return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "too many arguments");
            buf[0] = cls;
            memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
            int rc = cap_call_inline(I, mcall, buf, nargs + 1, kwnames, RET_PUSH);
            if (rc != CAP_NEXT)
                return rc;
        }
        return real_call_flowed(T, cls, args, nargs, kwnames, out);
    }
    PyObject *newf = cap_type_lookup((PyTypeObject *)cls, cap_P.s_new);
    PyObject *initf = cap_type_lookup((PyTypeObject *)cls, cap_P.s_init);
    bool py_new = newf && PyObject_TypeCheck(newf, (PyTypeObject *)cap_P.StaticMethodType);
    PyObject *newfn = py_new ? PyObject_GetAttrString(newf, "__func__") : NULL;
    if (py_new && !cap_is_function(newfn))
        py_new = false;
    bool py_init = initf && cap_is_function(initf);
    if (py_new && py_init) {
        /* __new__ traced in a nested run; __init__ inlined on its result
           when that is an instance of cls (as type.__call__ does). */
        PyObject *buf[64], *obj = NULL;
        if (nargs > 62) {
            Py_DECREF(newfn);
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "too many arguments");
        }
        buf[0] = cls;
        memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
        int rc = cap_t_call_sync(I, newfn, buf, nargs + 1, kwnames, &obj);
        Py_DECREF(newfn);
        if (rc != CAP_NEXT)
            return rc;
        int inst = PyObject_IsInstance(obj, cls);
        if (inst <= 0) {
            *out = obj;
            return inst < 0 ? CAP_ERR : CAP_NEXT;
        }
        buf[0] = obj;
        rc = cap_call_inline(I, initf, buf, nargs + 1, kwnames, RET_INIT);
        if (rc == CAP_FRAME)
            I->frame->ret_a = Py_NewRef(obj);
        Py_DECREF(obj);
        if (rc == CAP_NEXT)
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "__init__ that cannot be interpreted");
        return rc;
    }
    if (py_new) {
        PyObject *buf[64];
        if (nargs > 62) {
            Py_DECREF(newfn);
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "too many arguments");
        }
        buf[0] = cls;
        memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
        int rc = cap_call_inline(I, newfn, buf, nargs + 1, kwnames, RET_PUSH);
        Py_DECREF(newfn);
        if (rc != CAP_NEXT)
            return rc;
        return real_call_flowed(T, cls, args, nargs, kwnames, out);
    }
    Py_XDECREF(newfn);
    if (!py_init)
        return real_call_flowed(T, cls, args, nargs, kwnames, out);
    /* C __new__ (object, dict, ...) for real, then __init__ inlined. */
    PyObject *newbound = PyObject_GetAttr(cls, cap_P.s_new);
    PyObject *obj = newbound ? PyObject_CallOneArg_compat(newbound, cls) : NULL;
    Py_XDECREF(newbound);
    if (!obj)
        return CAP_ERR;
    if (!PyObject_TypeCheck(obj, (PyTypeObject *)cls)) {
        *out = obj;
        return CAP_NEXT;
    }
    PyObject *buf[64];
    if (nargs > 62) {
        Py_DECREF(obj);
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "too many arguments");
    }
    buf[0] = obj;
    memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
    int rc = cap_call_inline(I, initf, buf, nargs + 1, kwnames, RET_INIT);
    if (rc == CAP_FRAME)
        I->frame->ret_a = Py_NewRef(obj);
    Py_DECREF(obj);
    if (rc == CAP_NEXT)
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "__init__ that cannot be interpreted");
    return rc;
}

/* ---- C callables -------------------------------------------------------------------------- */

static const char *read_only_methods[] = {
    "get", "keys", "values", "items", "copy", "index", "count", "__contains__", "__len__",
    "__getitem__", "startswith", "endswith", NULL,
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
    int has = PyDict_Contains(d, key);
    if (has < 0)
        return CAP_ERR;
    if (!has)
        return cap_guard_add(T, CAP_G_DICT_HAS, cap_t_source_of(T, d), key, 0) < 0 ? CAP_ERR : CAP_NEXT;
    return cap_t_getitem(I, d, key, out);
}

static int outside_container_method(cap_interp *I, PyObject *self, const char *name,
                                    PyObject *const *args, int nargs, PyObject *kwnames,
                                    PyObject **out)
{
    cap_trace *T = I->T;
    if (!is_read_only(name))
        return cap_t_break(T, CAP_B_MUTATE_OUTSIDE, "%s.%s() on an object from outside",
                           cap_tpname(Py_TYPE(self)), name);
    if (PyDict_Check(self) && strcmp(name, "get") == 0 && nargs >= 1 && !kwnames) {
        int rc = cap_t_dict_lookup(I, self, args[0], out);
        if (rc == CAP_NEXT && !*out)
            *out = Py_NewRef(nargs > 1 ? args[1] : Py_None);
        return rc;
    }
    PyObject *copy = cap_t_flow(T, self);
    if (!copy)
        return CAP_ERR;
    PyObject *m = PyObject_GetAttrString(copy, name);
    Py_DECREF(copy);
    if (!m)
        return CAP_ERR;
    int rc = real_call_flowed(T, m, args, nargs, kwnames, out);
    Py_DECREF(m);
    if (rc == CAP_NEXT && (PyDictKeys_Check(*out) || PyDictValues_Check(*out) || PyDictItems_Check(*out))) {
        PyObject *l = PySequence_List(*out);
        Py_SETREF(*out, l);
        if (!l)
            return CAP_ERR;
    }
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
                rc = outside_container_method(I, self, name, args, nargs, kwnames, out);
            else
                rc = cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "%s.%s() on an object from outside",
                                 cap_tpname(Py_TYPE(self)), name);
        } else {
            PyObject *m = PyCFunction_Check(callable) || held ? Py_NewRef(callable)
                                                             : PyObject_GetAttrString(self, name);
            rc = m ? real_call_flowed(T, m, args, nargs, kwnames, out) : CAP_ERR;
            Py_XDECREF(m);
        }
    } else if (cap_is_pure_fn(callable)) {
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

/* A generator expression, (f(x) for x in xs), is run to its end at once in
 * a nested run and becomes an iterator over what it yielded. Its body is
 * traced like any code: a break, an exception or an opaque iteration in it
 * makes the call a break instead (B015), so that the generator is made for
 * real and consumed lazily, as in eager. Draining early is unobservable
 * otherwise: the body had no side effects and raised nothing. */
static int drain_genexpr(cap_interp *I, PyObject *fn, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    cap_frame *outer = I->frame;
    /* Its iterator argument advances while draining; a break puts it back
       where it was (the call reruns for real from there). */
    Py_ssize_t pos[8];
    for (int i = 0; i < nargs && i < 8; i++)
        pos[i] = Py_TYPE(args[i]) == cap_iter_type ? ((cap_iter *)args[i])->i : -1;
    int rc = cap_call_drain(I, fn, args, nargs, kwnames);
    if (rc == CAP_NEXT)
        return cap_t_break(T, CAP_B_GENERATOR, "generator expression (arguments)");
    if (rc != CAP_FRAME)
        return rc;
    PyObject *items = Py_NewRef(I->frame->yielded), *none = NULL;
    rc = cap_t_run_sync(I, outer, &none);
    Py_XDECREF(none);
    if (rc == CAP_ERR && !PyErr_ExceptionMatches(cap_InternalError)) {
        PyErr_Clear();
        rc = cap_t_break(T, CAP_B_GENERATOR, "generator expression that raises");
    } else if (rc == CAP_BREAK) {
        /* Keep the inner reason; say where it happened. */
        const char *pre = "inside a callback: ";
        char inner[sizeof T->brk.detail];
        snprintf(inner, sizeof inner, "%s", strncmp(T->brk.detail, pre, strlen(pre)) == 0
                                                ? T->brk.detail + strlen(pre) : T->brk.detail);
        snprintf(T->brk.detail, sizeof T->brk.detail, "in a generator expression: %.440s", inner);
    }
    if (rc == CAP_NEXT) {
        *out = cap_iter_seq(items, -1, T);
        if (*out)
            ((cap_iter *)*out)->gen = true;
        rc = *out ? CAP_NEXT : CAP_ERR;
    } else {
        for (int i = 0; i < nargs && i < 8; i++)
            if (pos[i] >= 0)
                ((cap_iter *)args[i])->i = pos[i];
    }
    Py_DECREF(items);
    return rc;
}

static int call_function(cap_interp *I, PyObject *fn, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    const char *disabled = cap_disabled_by(fn);
    if (disabled)
        return cap_t_break(T, CAP_B_DISABLED, "%s is marked %s", cap_func_name(fn), disabled);
    int mk = cap_module_iter_kind(fn);
    if (mk >= 0)
        return cap_module_iter_call(I, mk, args, nargs, kwnames, out);
    const char *opaque = opaque_python(fn);
    if (opaque)
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "%s (runs for real as one call)", opaque);
    PyObject *code = PyObject_GetAttr(fn, cap_P.s_code);
    cap_code *c = code ? cap_code_get(code) : NULL;
    Py_XDECREF(code);
    if (!c)
        return CAP_ERR;
    if (c->notrace) {
        if (c->drainable)
            return drain_genexpr(I, fn, args, nargs, kwnames, out);
        if (c->flags & 0x20)
            return cap_t_break(T, CAP_B_GENERATOR, "call to generator function %s", c->qualname_s);
        return cap_t_break(T, (c->flags & 0x380) ? CAP_B_GENERATOR : CAP_B_UNINTERPRETABLE,
                           "%s is %s", c->qualname_s, c->notrace);
    }
    if (cap_t_no_inline(T, I->frame))
        return cap_t_break(T, CAP_B_UNSUPPORTED_OBJECT, "call to %s runs as its own frame",
                           c->qualname_s);
    int rc = cap_call_inline(I, fn, args, nargs, kwnames, RET_PUSH);
    if (rc == CAP_NEXT) /* binding failed: CPython raises the TypeError */
        return cap_t_break(T, CAP_B_RAISE, "arguments do not match %s", c->qualname_s);
    return rc;
}

int cap_t_call(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
               PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    if (Py_TYPE(callable) == cap_method_type) {
        cap_method *m = (cap_method *)callable;
        return cap_torch_call(T, m->map, m->self, args, nargs, kwnames, out);
    }
    const cap_tmap *tm = cap_torch_lookup_fn(callable);
    if (tm)
        return cap_torch_call(T, tm, NULL, args, nargs, kwnames, out);
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
    int rc = cap_torch_special_call(I, callable, args, nargs, kwnames, out);
    if (rc != CAP_NONE)
        return rc;
    if (PyObject_TypeCheck(callable, (PyTypeObject *)cap_T.Module))
        return module_call(I, callable, args, nargs, kwnames, out);
    if (cap_is_function(callable))
        return call_function(I, callable, args, nargs, kwnames, out);
    if (PyType_Check(callable))
        return instantiate(I, callable, args, nargs, kwnames, out);
    if (cap_is_partial(callable)) {
        PyObject *fn = NULL, *pargs = NULL, *pkw = NULL;
        if (cap_partial_unpack(callable, &fn, &pargs, &pkw) < 0)
            return CAP_ERR;
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
    PyObject *call = cap_type_lookup(Py_TYPE(callable), cap_P.s_call);
    if (call && cap_is_function(call)) {
        PyObject *buf[64];
        if (nargs > 62)
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "too many arguments");
        buf[0] = callable;
        memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
        return call_function(I, call, buf, nargs + 1, kwnames, out);
    }
    return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "call to a %s", cap_tpname(Py_TYPE(callable)));
}
