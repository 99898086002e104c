/* Builtins called while tracing: len, isinstance, getattr, zip, enumerate,
 * sorted, min, sum, ... are answered here, on symbolic and outside values,
 * with the guards their answers depend on; print, input and open are breaks;
 * a builtin no group answers runs for real. Iterator builtins over traced
 * sequences (zip, map, filter, enumerate, reversed, and itertools' starmap,
 * filterfalse, takewhile, dropwhile, accumulate, islice, chain,
 * chain.from_iterable and zip_longest) make lazy ptc iterators
 * (iter.c); a callback they call (a key function) is traced in a nested run
 * (sync_calls.c).
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

/* itertools classes that advance what they are given only when advanced:
 * lazy like map. */
#define CAP_ITERTOOLS(X)                                                                           \
    X(starmap) X(filterfalse) X(takewhile) X(dropwhile) X(accumulate) X(islice) X(chain)          \
        X(zip_longest)

typedef enum {
    B_NONE = 0,
#define X(n) B_##n,
    CAP_BUILTINS(X) CAP_ITERTOOLS(X)
#undef X
    B_chain_from_iterable
} builtin_id;

static PyObject *builtin_ids; /* dict: builtin object -> id */

int cap_t_builtin_of(PyObject *callable)
{
    if (!builtin_ids) {
        builtin_ids = PyDict_New();
        static const char *names[] = {
#define X(n) #n,
            CAP_BUILTINS(X)
#undef X
#define X(n) "itertools." #n,
            CAP_ITERTOOLS(X)
#undef X
            "itertools.chain.from_iterable",
        };
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            bool itertools = strncmp(names[i], "itertools.", 10) == 0;
            PyObject *b = itertools ? cap_import_path(names[i])
                                    : Py_XNewRef(PyDict_GetItemString(cap_P.builtins, names[i]));
            PyObject *v = PyLong_FromLong((long)i + 1);
            if (b && v)
                PyDict_SetItem(builtin_ids, b, v);
            Py_XDECREF(v);
            Py_XDECREF(b);
        }
        PyErr_Clear();
    }
    PyObject *v = PyDict_GetItemWithError(builtin_ids, callable);
    if (!v) {
        PyErr_Clear();
        return B_NONE;
    }
    return (int)PyLong_AsLong(v);
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

/* Whether a ValueError of callable's over empty iterables is about its
 * other arguments: islice's indices. */
static bool lazy_value_error(PyObject *callable)
{
    return PyErr_ExceptionMatches(PyExc_ValueError) && cap_t_builtin_of(callable) == B_islice;
}

/* CPython's own argument checks for a builtin that takes iterables: the
 * call made for real with empty tuples in the iterables' places (nothing is
 * consumed, no callback runs). Its TypeError is the user's error, as is
 * islice's ValueError; other outcomes (max() of nothing) say nothing about
 * the arguments. */
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
    if (!r && !PyErr_ExceptionMatches(PyExc_TypeError) && !lazy_value_error(callable))
        PyErr_Clear();
    return PyErr_Occurred() ? CAP_ERR : CAP_NEXT;
}

static const int lazy_kind_of[][2] = {
    {B_map, CAP_LAZY_MAP},           {B_filter, CAP_LAZY_FILTER},
    {B_zip, CAP_LAZY_ZIP},           {B_enumerate, CAP_LAZY_ENUMERATE},
    {B_starmap, CAP_LAZY_STARMAP},   {B_filterfalse, CAP_LAZY_FILTERFALSE},
    {B_takewhile, CAP_LAZY_TAKEWHILE}, {B_dropwhile, CAP_LAZY_DROPWHILE},
    {B_accumulate, CAP_LAZY_ACCUMULATE}, {B_islice, CAP_LAZY_ISLICE},
    {B_chain, CAP_LAZY_CHAIN},       {B_zip_longest, CAP_LAZY_ZIP_LONGEST},
    {B_chain_from_iterable, CAP_LAZY_CHAIN},
};

static int lazy_kind(int id)
{
    for (size_t i = 0; i < sizeof lazy_kind_of / sizeof *lazy_kind_of; i++)
        if (lazy_kind_of[i][0] == id)
            return lazy_kind_of[i][1];
    return -1;
}

/* islice's (next, stop, step, consumed) from islice(it, stop) or
 * islice(it, start, stop[, step]) (None: 0, no stop as -1, 1), the
 * arguments checked by the real islice already. */
static PyObject *islice_state(PyObject *const *args, int npos)
{
    PyObject *start = npos > 2 ? args[1] : Py_None, *stop = npos > 2 ? args[2] : args[1];
    PyObject *step = npos > 3 ? args[3] : Py_None;
    Py_ssize_t v[3] = {0, -1, 1};
    PyObject *given[3] = {start, stop, step};
    for (int i = 0; i < 3; i++)
        if (given[i] != Py_None && (v[i] = PyNumber_AsSsize_t(given[i], NULL)) == -1 &&
            PyErr_Occurred())
            return NULL;
    return Py_BuildValue("(nnnn)", v[0], v[1], v[2], (Py_ssize_t)0);
}

/* The value an iterator builtin keeps besides its function and iterators:
 * enumerate's start, accumulate's initial= (NULL: none), islice's state,
 * chain's index of the iterable it takes items from (from_iterable's after
 * the iterator of iterables). */
static int lazy_extra(int id, PyObject *const *args, int nargs, PyObject *kwnames, PyObject **extra)
{
    int npos = nargs - kw_count(kwnames);
    *extra = NULL;
    if (id == B_enumerate) {
        PyObject *start = npos > 1 ? args[1] : kw_get(args, nargs, kwnames, "start");
        *extra = start ? PyNumber_Index(start) : PyLong_FromLong(0);
        return *extra ? CAP_NEXT : CAP_ERR;
    }
    if (id == B_islice || id == B_chain || id == B_chain_from_iterable) {
        *extra = id == B_islice ? islice_state(args, npos) : PyLong_FromLong(id != B_chain);
        return *extra ? CAP_NEXT : CAP_ERR;
    }
    PyObject *initial = id == B_accumulate ? kw_get(args, nargs, kwnames, "initial") : NULL;
    *extra = initial && initial != Py_None ? Py_NewRef(initial) : NULL;
    return CAP_NEXT;
}

/* The function an iterator builtin calls (accumulate's func=; none for
 * zip, enumerate, islice and chain), or zip_longest's fillvalue=. */
static PyObject *lazy_fn(int id, PyObject *const *args, int nargs, PyObject *kwnames, int npos)
{
    switch (id) {
    case B_accumulate: return npos > 1 ? args[1] : kw_get(args, nargs, kwnames, "func");
    case B_zip_longest: return kw_get(args, nargs, kwnames, "fillvalue");
    case B_zip:
    case B_enumerate:
    case B_islice:
    case B_chain:
    case B_chain_from_iterable: return NULL;
    default: return npos > 0 ? args[0] : NULL; /* map(fn, ...), filter(fn, it)... */
    }
}

/* map, filter, zip, enumerate and itertools' starmap, filterfalse,
 * takewhile, dropwhile, accumulate, islice, chain and zip_longest: as in
 * CPython, the arguments are checked and iter() is called on each iterable
 * now (chain's when it reaches it); the items come when the program asks
 * for them (cap_t_lazy_next). */
static int make_lazy(cap_interp *I, int id, PyObject *callable, PyObject *const *args, int nargs,
                     PyObject *kwnames, PyObject **out)
{
    int npos = nargs - kw_count(kwnames), kind = lazy_kind(id);
    PyObject *fn = lazy_fn(id, args, nargs, kwnames, npos);
    int first = id == B_map || id == B_filter || id == B_starmap || id == B_filterfalse ||
                id == B_takewhile || id == B_dropwhile;
    bool one = id == B_enumerate || id == B_accumulate || id == B_islice ||
               id == B_chain_from_iterable;
    int nits = one ? npos > 0 : npos - first;
    if (check_iterable_args(callable, args, nargs, kwnames, first, nits) != CAP_NEXT)
        return CAP_ERR;
    PyObject *its = PyTuple_New(nits), *count = NULL;
    int rc = its ? CAP_NEXT : CAP_ERR;
    for (int k = 0; rc == CAP_NEXT && k < nits; k++) {
        PyObject *it = id == B_chain ? Py_NewRef(args[k]) : NULL;
        if (it || (rc = cap_t_iter_sync(I, args[first + k], &it)) == CAP_NEXT)
            PyTuple_SetItem(its, k, it);
    }
    if (rc == CAP_NEXT)
        rc = lazy_extra(id, args, nargs, kwnames, &count);
    if (rc == CAP_NEXT) {
        PyObject *strict = id == B_zip ? kw_get(args, nargs, kwnames, "strict") : NULL;
        int on = strict ? PyObject_IsTrue(strict) : 0;
        *out = on < 0 ? NULL : cap_lazy_new(kind, fn, its, count, on > 0);
        rc = *out ? CAP_NEXT : CAP_ERR;
        if (*out && id == B_accumulate) /* count: initial=, to be yielded first */
            ((cap_lazy *)*out)->switched = count != NULL;
        if (*out)
            ((cap_lazy *)*out)->from_source = id == B_chain_from_iterable;
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
        return rc != CAP_NONE
                   ? rc
                   : cap_t_break(I->T, CAP_B_TENSOR_BOOL, "%s() comparing tensors", name);
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
    int rc = cap_t_iter_sync(I, iterable, &it);
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

/* Whether builtin id's answer for the set s does not depend on the order
 * it iterates in: sorted, min and max by no key. */
static bool reads_in_any_order(int id, PyObject *s, PyObject *const *args, int nargs,
                               PyObject *kwnames)
{
    bool keyed = kw_get(args, nargs, kwnames, "key") != NULL;
    return PyAnySet_Check(s) && (id == B_sorted || id == B_min || id == B_max) && !keyed;
}

/* set(s) and frozenset(s) of a set or dict copy its table (CPython merges a
 * set's, and presizes for a dict's keys): made item by item, the result
 * could iterate, and pop, in another order than eager's. Made for real from
 * the object as the trace sees it (a written outside set breaks there: its
 * order is the real set's, which no copy keeps). */
static int copy_of_table(cap_trace *T, int id, PyObject *src, PyObject **out)
{
    PyObject *seen = cap_t_flow(T, src);
    PyObject *type = (PyObject *)(id == B_set ? &PySet_Type : &PyFrozenSet_Type);
    *out = seen ? PyObject_CallOneArg_compat(type, seen) : NULL;
    Py_XDECREF(seen);
    return *out ? CAP_NEXT : CAP_ERR;
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
    if ((id == B_set || id == B_frozenset) && npos == 1 &&
        (PyAnySet_Check(args[0]) || PyDict_CheckExact(args[0])))
        return copy_of_table(I->T, id, args[0], out);
    I->T->any_order = npos > 0 && reads_in_any_order(id, args[0], args, nargs, kwnames);
    PyObject *items = npos > 0 ? cap_t_materialize(I, args[0], &rc) : PyList_New(0);
    I->T->any_order = false;
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
    int ti = cap_t_first_tensor(args, nargs);
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
                    cap_t_raise_stop_iteration(args[0]);
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
    int ti = cap_t_first_tensor(args, nargs);
    switch (id) {
    case B_enumerate:
    case B_zip:
    case B_map:
    case B_filter:
    case B_starmap:
    case B_filterfalse:
    case B_takewhile:
    case B_dropwhile:
    case B_accumulate:
    case B_islice:
    case B_chain:
    case B_zip_longest:
    case B_chain_from_iterable:
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
    int ti = cap_t_first_tensor(args, nargs);
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
int cap_t_builtin(cap_interp *I, int id, PyObject *callable, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out)
{
    int rc = builtin_on_objects(I, id, args, nargs, kwnames, out);
    if (rc == DECLINED)
        rc = builtin_on_iterables(I, id, callable, args, nargs, kwnames, out);
    if (rc == DECLINED)
        rc = builtin_on_numbers(I, id, args, nargs, kwnames, out);
    return rc != DECLINED ? rc : cap_t_call_real_flowed(I->T, callable, args, nargs, kwnames, out);
}
