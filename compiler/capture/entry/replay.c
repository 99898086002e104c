/* What an entry does after its graph ran: rebuild Python values from
 * recipes (the return value, or the frames of a resume state), and replay
 * the side effects the trace logged on objects that existed before the call
 * (trace/effects.c logs them), in program order, one routine per kind.
 */
#include "capture/entry/entry.h"

#include <stdlib.h>
#include <string.h>

/* ---- recipes ------------------------------------------------------------------------------ */

/* An exception made in the trace: cls.__new__(cls, *args) (which sets
 * .args), the C __init__ of built-in exceptions (OSError, StopIteration, ...
 * set fields there; a Python __init__ already ran in the trace), then its
 * attributes. */
static PyObject *exception(const cap_recipe *r, PyObject **rv)
{
    PyObject *cls = PyTuple_GetItem(r->obj, 0);
    Py_ssize_t nargs = PyLong_AsSsize_t(PyTuple_GetItem(r->obj, 1));
    PyObject *args = PyTuple_New(nargs);
    for (Py_ssize_t i = 0; args && i < nargs; i++)
        PyTuple_SetItem(args, i, Py_NewRef(rv[r->items[i]]));
    PyObject *newf = args ? PyObject_GetAttr(cls, cap_P.s_new) : NULL;
    PyObject *full = newf ? PyTuple_New(nargs + 1) : NULL;
    for (Py_ssize_t i = 0; full && i <= nargs; i++)
        PyTuple_SetItem(full, i, Py_NewRef(i ? PyTuple_GetItem(args, i - 1) : cls));
    PyObject *o = full ? PyObject_Call(newf, full, NULL) : NULL;
    Py_XDECREF(newf);
    Py_XDECREF(full);
    PyObject *init = o ? PyObject_GetAttr(cls, cap_P.s_init) : NULL;
    if (init && !cap_is_function(init)) {
        PyObject *bound = PyObject_GetAttr(o, cap_P.s_init);
        PyObject *res = bound ? PyObject_Call(bound, args, NULL) : NULL;
        Py_XDECREF(bound);
        if (!res)
            Py_CLEAR(o);
        Py_XDECREF(res);
    }
    Py_XDECREF(init);
    Py_XDECREF(args);
    for (int i = (int)nargs; o && i + 1 < r->n; i += 2)
        if (PyObject_SetAttr(o, rv[r->items[i]], rv[r->items[i + 1]]) < 0)
            Py_CLEAR(o);
    return o;
}

/* A real iterator over what a traced one has left (entry.c, escaping). */
static PyObject *py_iter(const cap_recipe *r, PyObject **rv)
{
    if (!r->n) {
        long long start, step;
        Py_ssize_t n;
        PyObject *gen;
        if (!PyArg_ParseTuple(r->obj, "LLnO", &start, &step, &n, &gen))
            return NULL;
        PyObject *rg = PyObject_CallFunction((PyObject *)&PyRange_Type, "LLL", start + r->index * step,
                                             start + (long long)n * step, step);
        PyObject *it = rg ? PyObject_GetIter(rg) : NULL;
        Py_XDECREF(rg);
        return it;
    }
    PyObject *seq = rv[r->items[0]];
    PyObject *rest = PySequence_GetSlice(seq, r->index, PY_SSIZE_T_MAX);
    if (!rest)
        return NULL;
    PyObject *it;
    if (r->obj == Py_True) {
        /* ptc._drained_generator(items): a generator yielding the items. */
        static PyObject *make;
        if (!make && !(make = cap_import_path("ptc._drained_generator"))) {
            Py_DECREF(rest);
            return NULL;
        }
        it = PyObject_CallOneArg_compat(make, rest);
    } else {
        it = PyObject_GetIter(rest);
    }
    Py_DECREF(rest);
    return it;
}

/* callable(*args), then the state (__setstate__, or the instance dict),
 * the list items and the dict items: what pickle does with __reduce_ex__,
 * except that a list or dict subclass gets its items through list's and
 * dict's own methods: the items are already what the user's append or
 * __setitem__ stored, which must not run again (they would store v * 2 of
 * v * 2). */
static PyObject *reduced(const cap_recipe *r, PyObject **rv)
{
    PyObject *state = rv[r->items[2]], *litems = rv[r->items[3]], *ditems = rv[r->items[4]];
    PyObject *o = PyObject_CallObject(rv[r->items[0]], rv[r->items[1]]);
    if (o && state != Py_None) {
        PyObject *set = PyObject_GetAttrString(o, "__setstate__"), *res = NULL;
        if (set) {
            res = PyObject_CallOneArg_compat(set, state);
        } else if (PyDict_Check(state)) {
            PyErr_Clear();
            PyObject *d = PyObject_GenericGetDict(o, NULL);
            res = d && PyDict_Update(d, state) == 0 ? Py_NewRef(Py_None) : NULL;
            Py_XDECREF(d);
        }
        if (!res)
            Py_CLEAR(o);
        Py_XDECREF(set);
        Py_XDECREF(res);
    }
    for (Py_ssize_t i = 0; o && litems != Py_None && i < PyList_Size(litems); i++) {
        PyObject *item = PyList_GetItem(litems, i);
        PyObject *res = PyList_Check(o) ? (PyList_Append(o, item) < 0 ? NULL : Py_NewRef(Py_None))
                                        : PyObject_CallMethod(o, "append", "O", item);
        if (!res)
            Py_CLEAR(o);
        Py_XDECREF(res);
    }
    for (Py_ssize_t i = 0; o && ditems != Py_None && i < PyList_Size(ditems); i++) {
        PyObject *kv = PyList_GetItem(ditems, i), *k = PyTuple_GetItem(kv, 0),
                 *v = PyTuple_GetItem(kv, 1);
        if ((PyDict_Check(o) ? PyDict_SetItem(o, k, v) : PyObject_SetItem(o, k, v)) < 0)
            Py_CLEAR(o);
    }
    return o;
}

static PyObject *instance(const cap_recipe *r, PyObject **rv)
{
    PyObject *cls = PyTuple_GetItem(r->obj, 0);
    int tuple_sub = (int)PyLong_AsLong(PyTuple_GetItem(r->obj, 1));
    if (tuple_sub) {
        PyObject *items = PyTuple_New(r->n);
        for (int i = 0; items && i < r->n; i++)
            PyTuple_SetItem(items, i, Py_NewRef(rv[r->items[i]]));
        PyObject *make = PyObject_GetAttrString(cls, "_make");
        PyErr_Clear();
        PyObject *o = items ? PyObject_CallOneArg_compat(make ? make : cls, items) : NULL;
        Py_XDECREF(make);
        Py_XDECREF(items);
        return o;
    }
    Py_ssize_t nitems = PyLong_AsSsize_t(PyTuple_GetItem(r->obj, 2));
    PyObject *newf = PyObject_GetAttr(cls, cap_P.s_new);
    PyObject *o = newf ? PyObject_CallOneArg_compat(newf, cls) : NULL;
    Py_XDECREF(newf);
    if (!o)
        return NULL;
    /* Dict items through the C base's __setitem__ (bypassing overrides). */
    PyObject *setitem = NULL;
    if (nitems > 0) {
        PyObject *mro = PyObject_GetAttr(cls, cap_P.s_mro);
        for (Py_ssize_t i = 0; mro && i < PyTuple_Size(mro) && !setitem; i++) {
            PyTypeObject *b = (PyTypeObject *)PyTuple_GetItem(mro, i);
            if (!(PyType_GetFlags(b) & Py_TPFLAGS_HEAPTYPE) && PyType_IsSubtype(b, &PyDict_Type))
                setitem = PyObject_GetAttrString((PyObject *)b, "__setitem__");
        }
        Py_XDECREF(mro);
    }
    for (Py_ssize_t i = 0; i < nitems && o; i += 2) {
        PyObject *res = setitem ? PyObject_CallFunctionObjArgs(setitem, o, rv[r->items[i]],
                                                               rv[r->items[i + 1]], NULL)
                                : NULL;
        if (!res)
            Py_CLEAR(o);
        Py_XDECREF(res);
    }
    Py_XDECREF(setitem);
    PyObject *d = o ? PyObject_GenericGetDict(o, NULL) : NULL;
    for (int i = (int)nitems; d && i + 1 < r->n; i += 2)
        if (PyDict_SetItem(d, rv[r->items[i]], rv[r->items[i + 1]]) < 0)
            Py_CLEAR(o);
    Py_XDECREF(d);
    return o;
}

static PyObject *function(const cap_recipe *r, PyObject **rv)
{
    PyObject *code = PyTuple_GetItem(r->obj, 0), *qn = PyTuple_GetItem(r->obj, 1);
    PyObject *globals = PyTuple_GetItem(r->obj, 2);
    PyObject *defaults = rv[r->items[0]], *kwdefaults = rv[r->items[1]];
    PyObject *closure = rv[r->items[2]];
    PyObject *fn = PyObject_CallFunctionObjArgs(cap_P.FunctionType, code, globals, Py_None, defaults,
                                                closure, NULL);
    if (fn && (PyObject_SetAttr(fn, cap_P.s_qualname, qn) < 0 ||
               PyObject_SetAttr(fn, cap_P.s_kwdefaults, kwdefaults) < 0))
        Py_CLEAR(fn);
    return fn;
}

static PyObject *one(const cap_recipe *r, PyObject **vals, PyObject **outs, PyObject **rv)
{
    PyObject *o = NULL;
    switch (r->kind) {
    case CAP_R_NULLV:
        return NULL;
    case CAP_R_CONST:
        return Py_NewRef(r->obj);
    case CAP_R_SOURCE:
        return Py_XNewRef(vals[r->index]);
    case CAP_R_OUTPUT:
        return Py_NewRef(outs[r->index]);
    case CAP_R_TUPLE:
    case CAP_R_SLICE:
        o = PyTuple_New(r->n);
        for (int i = 0; o && i < r->n; i++)
            PyTuple_SetItem(o, i, Py_XNewRef(rv[r->items[i]]));
        if (r->kind == CAP_R_SLICE && o) {
            PyObject *s = PySlice_New(PyTuple_GetItem(o, 0), PyTuple_GetItem(o, 1), PyTuple_GetItem(o, 2));
            Py_SETREF(o, s);
        }
        return o;
    case CAP_R_LIST:
        o = PyList_New(r->n);
        for (int i = 0; o && i < r->n; i++)
            PyList_SetItem(o, i, Py_XNewRef(rv[r->items[i]]));
        return o;
    case CAP_R_SET:
        o = PySet_New(NULL);
        for (int i = 0; o && i < r->n; i++)
            if (PySet_Add(o, rv[r->items[i]]) < 0)
                Py_CLEAR(o);
        return o;
    case CAP_R_DICT:
        o = PyDict_New();
        for (int i = 0; o && i + 1 < r->n; i += 2)
            if (PyDict_SetItem(o, rv[r->items[i]], rv[r->items[i + 1]]) < 0)
                Py_CLEAR(o);
        return o;
    case CAP_R_CELL:
        return cap_cell_new(NULL); /* filled once every recipe ran */
    case CAP_R_ITER:
        if (!r->n) {
            long long start, step;
            Py_ssize_t n;
            if (!PyArg_ParseTuple(r->obj, "LLn", &start, &step, &n))
                return NULL;
            o = cap_iter_range(start, step, n);
        } else {
            o = cap_iter_seq(rv[r->items[0]], -1, NULL);
            if (o && r->n > 1) {
                cap_iter_set_owner((cap_iter *)o, rv[r->items[1]]);
                ((cap_iter *)o)->owner_len = PyLong_AsSsize_t(r->obj);
            }
        }
        if (o)
            ((cap_iter *)o)->i = r->index;
        return o;
    case CAP_R_FUNCTION:
        return function(r, rv);
    case CAP_R_METHOD:
        return PyObject_CallFunctionObjArgs(cap_P.MethodType, rv[r->items[0]], rv[r->items[1]], NULL);
    case CAP_R_INSTANCE:
        return instance(r, rv);
    case CAP_R_GETATTR:
        return PyObject_GetAttr(rv[r->items[0]], r->obj);
    case CAP_R_PYITER:
        return py_iter(r, rv);
    case CAP_R_EXCEPTION:
        return exception(r, rv);
    case CAP_R_REDUCE:
        return reduced(r, rv);
    case CAP_R_ID:
        return PyLong_FromVoidPtr(rv[r->items[0]]);
    case CAP_R_BIND:
        return PyObject_CallMethod(r->obj, "__get__", "(O)", rv[r->items[0]]);
    case CAP_R_NUMPY:
        o = PyObject_CallMethod(rv[r->items[0]], "numpy", NULL);
        if (o && r->index == CAP_NP_SCALAR) {
            PyObject *empty = PyTuple_New(0);
            Py_SETREF(o, empty ? PyObject_GetItem(o, empty) : NULL);
            Py_XDECREF(empty);
        }
        return o;
    }
    PyErr_SetString(cap_InternalError, "ptc: unknown recipe");
    return NULL;
}

int cap_entry_run_recipes(cap_entry *e, PyObject **vals, PyObject **outputs, PyObject **rvals)
{
    bool cells = false;
    for (int i = 0; i < e->nrecipes; i++) {
        cells = cells || e->recipes[i].kind == CAP_R_CELL;
        rvals[i] = one(&e->recipes[i], vals, outputs, rvals);
        if (!rvals[i] && e->recipes[i].kind != CAP_R_NULLV) {
            if (!PyErr_Occurred())
                PyErr_SetString(cap_InternalError, "ptc: a recipe produced nothing");
            for (int k = 0; k < i; k++)
                Py_CLEAR(rvals[k]);
            return -1;
        }
    }
    for (int i = 0; cells && i < e->nrecipes; i++) {
        const cap_recipe *r = &e->recipes[i];
        if (r->kind == CAP_R_CELL && r->items[0] >= 0 && cap_cell_set(rvals[i], rvals[r->items[0]]) < 0)
            return -1;
    }
    return 0;
}

/* ---- replaying side effects: one routine per kind (trace/effects.c logs them) ---- */

static int set_attr(PyObject *obj, PyObject *key, PyObject *value)
{
    return PyObject_SetAttr(obj, key, value);
}

static int del_attr(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)value;
    return PyObject_SetAttr(obj, key, NULL);
}

/* The first type in obj's MRO written in C: the one whose item methods the
 * trace logged (a subclass's Python override ran while tracing, and its
 * super() call is what was logged; OrderedDict keeps its order in its own). */
static PyObject *c_base(PyObject *obj)
{
    PyTypeObject *t = Py_TYPE(obj);
    PyObject *mro = PyObject_GetAttrString((PyObject *)t, "__mro__");
    for (Py_ssize_t i = 0; mro && i < PyTuple_Size(mro); i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GetItem(mro, i);
        if (!(PyType_GetFlags(b) & Py_TPFLAGS_HEAPTYPE)) {
            Py_DECREF(mro);
            return (PyObject *)b;
        }
    }
    Py_XDECREF(mro);
    return (PyObject *)t;
}

/* obj.name(args...) as the C type below obj's class does it. */
static int c_call(PyObject *obj, const char *name, PyObject *key, PyObject *value)
{
    PyObject *r = value ? PyObject_CallMethod(c_base(obj), name, "OOO", obj, key, value)
                  : key ? PyObject_CallMethod(c_base(obj), name, "OO", obj, key)
                        : PyObject_CallMethod(c_base(obj), name, "O", obj);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static bool exact(PyObject *obj)
{
    return PyList_CheckExact(obj) || PyDict_CheckExact(obj);
}

static int set_item(PyObject *obj, PyObject *key, PyObject *value)
{
    return exact(obj) ? PyObject_SetItem(obj, key, value) : c_call(obj, "__setitem__", key, value);
}

static int del_item(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)value;
    return exact(obj) ? PyObject_DelItem(obj, key) : c_call(obj, "__delitem__", key, NULL);
}

static int append(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)key;
    return PyList_Append(obj, value);
}

static int extend(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)key;
    Py_ssize_t n = PyList_Size(obj);
    return PyList_SetSlice(obj, n, n, value);
}

static int insert(PyObject *obj, PyObject *key, PyObject *value)
{
    Py_ssize_t i = PyLong_AsSsize_t(key);
    return i == -1 && PyErr_Occurred() ? -1 : PyList_Insert(obj, i, value);
}

static int pop(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)value;
    Py_ssize_t i = PyLong_AsSsize_t(key), n = PyList_Size(obj);
    if (i == -1 && PyErr_Occurred())
        return -1;
    i = i < 0 ? i + n : i;
    return PyList_SetSlice(obj, i, i + 1, NULL);
}

static int clear(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)key, (void)value;
    if (!exact(obj) && PyDict_Check(obj))
        return c_call(obj, "clear", NULL, NULL);
    if (PyDict_Check(obj)) {
        PyDict_Clear(obj);
        return 0;
    }
    if (PyAnySet_Check(obj))
        return PySet_Clear(obj);
    return PyList_SetSlice(obj, 0, PyList_Size(obj), NULL);
}

static int set_add(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)key;
    return PySet_Add(obj, value);
}

static int set_discard(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)key;
    return PySet_Discard(obj, value) < 0 ? -1 : 0;
}

static int iter_next(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)key, (void)value;
    PyObject *v = PyIter_Next(obj);
    Py_XDECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int set_cell(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)key;
    return cap_cell_set(obj, value);
}

static int del_cell(PyObject *obj, PyObject *key, PyObject *value)
{
    (void)key, (void)value;
    return cap_cell_set(obj, NULL);
}

typedef int (*effect_fn)(PyObject *obj, PyObject *key, PyObject *value);
static const effect_fn replay[CAP_E_COUNT] = {
    [CAP_E_ATTR_SET] = set_attr, [CAP_E_ATTR_DEL] = del_attr, [CAP_E_ITEM_SET] = set_item,
    [CAP_E_ITEM_DEL] = del_item, [CAP_E_APPEND] = append,     [CAP_E_EXTEND] = extend,
    [CAP_E_INSERT] = insert,     [CAP_E_POP] = pop,           [CAP_E_CLEAR] = clear,
    [CAP_E_CELL_SET] = set_cell, [CAP_E_CELL_DEL] = del_cell,
    [CAP_E_SET_ADD] = set_add,   [CAP_E_SET_DISCARD] = set_discard,
    [CAP_E_ITER_NEXT] = iter_next,
};

int cap_entry_run_effects(cap_entry *e, PyObject **rv)
{
    for (int i = 0; i < e->neffects; i++) {
        const cap_effect *x = &e->effects[i];
        PyObject *key = x->key >= 0 ? rv[x->key] : NULL,
                 *value = x->value >= 0 ? rv[x->value] : NULL;
        if (replay[x->kind](rv[x->obj], key, value) < 0)
            return -1;
    }
    return 0;
}

/* A local of the resume state that is an id() (rebuilt by an ID recipe, or
 * a SOURCE one marked as still an id): the interpreter hears of it, so that
 * the trace that goes on does not specialise on it (cap_interp.ids). */
static int note_id(cap_interp *I, const cap_recipe *r, PyObject *v)
{
    bool id = r->kind == CAP_R_ID || (r->kind == CAP_R_SOURCE && r->obj == Py_True);
    if (!id || !v)
        return 0;
    if (!I->ids && !(I->ids = PyDict_New()))
        return -1;
    PyObject *k = PyLong_FromVoidPtr(v);
    int rc = k ? PyDict_SetItem(I->ids, k, v) : -1;
    Py_XDECREF(k);
    return rc;
}

int cap_entry_resume_frames(cap_entry *e, PyObject **rv, cap_interp *I)
{
    for (int d = 0; d < e->nframes; d++) {
        const cap_rframe *rf = &e->frames[d];
        PyObject *func = rv[rf->func];
        PyObject *globals = func ? PyObject_GetAttr(func, cap_P.s_globals) : NULL;
        if (!globals)
            return -1;
        cap_frame *f = cap_frame_new(rf->code, func, globals, cap_func_builtins(globals));
        Py_DECREF(globals);
        if (!f)
            return -1;
        for (int i = 0; i < rf->code->nlp; i++) {
            f->lp[i] = Py_XNewRef(rv[rf->lp[i]]);
            if (note_id(I, &e->recipes[rf->lp[i]], f->lp[i]) < 0)
                return -1;
        }
        for (int i = 0; i < rf->sp; i++)
            f->stack[i] = Py_XNewRef(rv[rf->stack[i]]);
        f->sp = rf->sp;
        f->pc = rf->pc;
        f->kwnames = rf->kwnames;
        f->ret = rf->ret;
        f->ret_arg = rf->ret_arg;
        f->ret_a = rf->ret_a >= 0 ? Py_XNewRef(rv[rf->ret_a]) : NULL;
        f->module_path = rf->module_path;
        cap_push_frame(I, f);
    }
    return 0;
}
