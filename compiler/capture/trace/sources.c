/* Values and their sources: how a value is reached from a segment's
 * starting state, and wrapping the outside values that enter the trace.
 *
 * Every value that enters a trace from outside (a local of the starting
 * state, a global, an attribute or item of an outside object, a closure cell,
 * a default an inlined call binds) gets a source, and the guards its type calls for are installed right away:
 * constants are compared by value, modules and functions by identity, tensors
 * by their metadata (and become graph inputs), other objects by type. Sources
 * and guards are interned, so reading `self.conv1` twice costs one guard.
 */
#include "capture/trace/trace.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

PyObject *cap_GraphBreakError;

/* ---- what outside containers hold ------------------------------------------------- */

Py_ssize_t cap_stored_len(PyObject *o)
{
    if (PyList_Check(o))
        return PyList_Size(o);
    if (PyTuple_Check(o))
        return PyTuple_Size(o);
    if (PyDict_Check(o))
        return PyDict_Size(o);
    if (PyAnySet_Check(o))
        return PySet_Size(o);
    return PyObject_Size(o);
}

PyObject *cap_stored_keys(PyObject *d)
{
    if (PyObject_TypeCheck(d, (PyTypeObject *)cap_P.OrderedDict)) {
        /* OrderedDict.keys itself: its order, not the dict's below it */
        PyObject *keys = PyObject_CallMethod(cap_P.OrderedDict, "keys", "O", d);
        PyObject *t = keys ? PySequence_Tuple(keys) : NULL;
        Py_XDECREF(keys);
        return t;
    }
    PyObject *t = PyTuple_New(PyDict_Size(d)), *k, *v;
    Py_ssize_t pos = 0, i = 0;
    while (t && PyDict_Next(d, &pos, &k, &v))
        PyTuple_SetItem(t, i++, Py_NewRef(k));
    return t;
}

PyObject *cap_builtin_descriptor(PyObject *o, PyObject *self, PyObject *name)
{
    PyObject *mro = PyObject_GetAttr((PyObject *)Py_TYPE(self), cap_P.s_mro), *found = NULL;
    for (Py_ssize_t i = 0; mro && !found && i < PyTuple_Size(mro); i++) {
        PyObject *dict = PyObject_GetAttrString(PyTuple_GetItem(mro, i), "__dict__");
        PyObject *d = dict ? PyObject_GetItem(dict, name) : NULL;
        PyErr_Clear();
        if (d && Py_TYPE(d) == &PyMethodDescr_Type) {
            PyObject *bound = PyObject_CallMethod(d, "__get__", "(O)", self);
            if (bound && PyCFunction_Check(bound) &&
                PyCFunction_GetFunction(bound) == PyCFunction_GetFunction(o))
                found = Py_NewRef(d);
            Py_XDECREF(bound);
            PyErr_Clear();
        }
        Py_XDECREF(d);
        Py_XDECREF(dict);
    }
    Py_XDECREF(mro);
    return found;
}

/* ---- outside objects -------------------------------------------------------------- */

/* Gives dims `dyn` of the input at src their symbols, in its graph type ty
 * and in its tensor guard (which then leaves their sizes to the symbols'). */
static int symbolic_dims(cap_trace *T, int src, PyObject *obj, const cap_tmeta *m, int dyn,
                         ptc_ttype *ty)
{
    int gi = T->nguards - 1; /* an index: cap_t_input_dim's guards may move T->guards */
    while (gi >= 0 && !(T->guards[gi].kind == CAP_G_TENSOR && T->guards[gi].src == src))
        gi--;
    for (int d = 0; gi >= 0 && d < m->ndim; d++) {
        if (!(dyn >> d & 1))
            continue;
        ptc_dim s = cap_t_input_dim(T, src, d, m->sizes[d], obj);
        if (!s.sym && s.value < 0)
            return -1;
        ty->shape[d] = s;
        if (s.sym)
            T->guards[gi].tm->dyn |= (uint8_t)(1 << d);
    }
    if (gi >= 0 && T->guards[gi].tm->dyn)
        ty->layout = PTC_LAYOUT_CONTIGUOUS;
    return 0;
}

int cap_t_source_of(cap_trace *T, PyObject *obj)
{
    if (!obj)
        return -1;
    PyObject *k = PyLong_FromVoidPtr(obj);
    PyObject *v = k ? PyDict_GetItem(T->obj_src, k) : NULL;
    Py_XDECREF(k);
    return v ? (int)PyLong_AsLong(v) : -1;
}

bool cap_t_outside(cap_trace *T, PyObject *obj)
{
    return cap_t_source_of(T, obj) >= 0;
}

bool cap_t_dict_of_trace(cap_trace *T, PyObject *obj)
{
    return PyDict_CheckExact(obj) && !cap_t_outside(T, obj);
}

int cap_t_note_made(PyObject *made, PyObject *obj)
{
    PyObject *k = PyLong_FromVoidPtr(obj);
    int rc = k ? PyDict_SetItem(made, k, obj) : -1;
    Py_XDECREF(k);
    return rc;
}

bool cap_t_was_made(PyObject *made, PyObject *obj)
{
    PyObject *k = PyLong_FromVoidPtr(obj);
    bool found = k && PyDict_GetItem(made, k) == obj;
    Py_XDECREF(k);
    PyErr_Clear();
    return found;
}

int cap_t_note_function(cap_trace *T, PyObject *fn)
{
    return cap_t_note_made(T->made_funcs, fn);
}

bool cap_t_made_function(cap_trace *T, PyObject *fn)
{
    return cap_t_was_made(T->made_funcs, fn);
}

int cap_t_map(cap_trace *T, PyObject *obj, int src)
{
    if (src < 0 || cap_t_source_of(T, obj) >= 0)
        return 0;
    PyObject *k = PyLong_FromVoidPtr(obj), *v = PyLong_FromLong(src);
    int rc = k && v ? PyDict_SetItem(T->obj_src, k, v) : -1;
    if (rc == 0)
        rc = PyList_Append(T->keep, obj);
    Py_XDECREF(k);
    Py_XDECREF(v);
    return rc;
}

bool cap_is_enum_member(PyObject *o)
{
    static PyObject *Enum;
    if (!Enum) {
        Enum = cap_import_path("enum.Enum");
        if (!Enum)
            return false;
    }
    return PyObject_TypeCheck(o, (PyTypeObject *)Enum);
}

bool cap_is_constant(PyObject *o)
{
    if (o == Py_None || o == Py_True || o == Py_False || o == Py_Ellipsis ||
        o == Py_NotImplemented)
        return true;
    PyTypeObject *t = Py_TYPE(o);
    if (t == &PyLong_Type || t == &PyFloat_Type || t == &PyUnicode_Type || t == &PyBytes_Type ||
        t == &PyComplex_Type || t == &PyRange_Type || cap_is_numpy_scalar(o))
        return true;
    if (t == (PyTypeObject *)cap_T.dtype_type || t == (PyTypeObject *)cap_T.device_type)
        return true;
    if (t == &PyTuple_Type || t == (PyTypeObject *)cap_T.Size || t == &PyFrozenSet_Type) {
        PyObject *it = PyObject_GetIter(o), *x;
        bool all = it != NULL;
        while (all && (x = PyIter_Next(it))) {
            all = cap_is_constant(x);
            Py_DECREF(x);
        }
        Py_XDECREF(it);
        PyErr_Clear();
        return all;
    }
    if (t == &PySlice_Type) {
        PyObject *parts[3] = {PyObject_GetAttrString(o, "start"), PyObject_GetAttrString(o, "stop"),
                              PyObject_GetAttrString(o, "step")};
        bool all = true;
        for (int i = 0; i < 3; i++) {
            all = all && parts[i] && cap_is_constant(parts[i]);
            Py_XDECREF(parts[i]);
        }
        PyErr_Clear();
        return all;
    }
    return cap_is_enum_member(o);
}

bool cap_is_key(PyObject *o)
{
    return cap_is_constant(o) || PyType_Check(o) || PyModule_Check(o) || cap_is_function(o) ||
           (PyCFunction_Check(o) && !PyCFunction_GetSelf(o));
}

/* Objects compared by identity: code-like things whose meaning is fixed. */
/* A builtin function (not one bound to an instance: those are made fresh). */
/* A class method of a builtin type (dict.fromkeys) is bound afresh on each
 * read, so it cannot be guarded by identity; a function a type stores as
 * it is (torch's, on _VariableFunctions) can. */
static bool same_on_each_read(PyObject *type, PyObject *f)
{
    PyObject *name = PyObject_GetAttr(f, cap_P.s_name);
    PyObject *again = name ? PyObject_GetAttr(type, name) : NULL;
    PyErr_Clear();
    Py_XDECREF(name);
    Py_XDECREF(again);
    return again == f;
}

static bool plain_builtin(PyObject *o)
{
    if (!PyCFunction_Check(o))
        return false;
    PyObject *self = PyCFunction_GetSelf(o);
    return !self || PyModule_Check(self) || (PyType_Check(self) && same_on_each_read(self, o));
}

/* Cells are not among these: a resumed state's cells are made afresh on
 * every call, and what a trace reads of one, its contents, has its own
 * source and guards. */
static bool identity_guarded(PyObject *o)
{
    return PyType_Check(o) || PyModule_Check(o) || cap_is_function(o) || plain_builtin(o) ||
           PyObject_TypeCheck(o, (PyTypeObject *)cap_T.Module) || cap_is_enum_member(o);
}

/* Defaults a nested function can be guarded by value: none, or constants
 * (a tuple of them; keyword-only ones, a dict of them by name). */
bool cap_constant_defaults(PyObject *d, bool kw)
{
    if (d == Py_None)
        return true;
    if (!kw)
        return PyTuple_Check(d) && cap_is_constant(d);
    if (!PyDict_Check(d))
        return false;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v))
        if (!PyUnicode_CheckExact(k) || !cap_is_constant(v))
            return false;
    return true;
}

/* A function defined inside another one is made anew by every call of its
 * maker, and rebuilt by the recipes of a resumed state: it is guarded by
 * what calling it reads, its code, globals and defaults (by value, where
 * they are constants), instead of by identity; its closure cells are
 * reached through it (cap_t_closure_cell). */
static bool nested_function(PyObject *o)
{
    if (!cap_is_function(o))
        return false;
    PyObject *qn = PyObject_GetAttr(o, cap_P.s_qualname);
    PyObject *d = qn ? PyObject_GetAttr(o, cap_P.s_defaults) : NULL;
    PyObject *kd = d ? PyObject_GetAttr(o, cap_P.s_kwdefaults) : NULL;
    const char *name = kd && PyUnicode_Check(qn) ? PyUnicode_AsUTF8(qn) : NULL;
    bool nested = name && strstr(name, "<locals>") && cap_constant_defaults(d, false) &&
                  cap_constant_defaults(kd, true);
    Py_XDECREF(qn);
    Py_XDECREF(d);
    Py_XDECREF(kd);
    PyErr_Clear();
    return nested;
}

static int guard_nested_function(cap_trace *T, PyObject *fn, int src)
{
    if (cap_guard_add(T, CAP_G_TYPE, src, (PyObject *)Py_TYPE(fn), 0) < 0)
        return -1;
    PyObject *attrs[4] = {cap_P.s_code, cap_P.s_globals, cap_P.s_defaults, cap_P.s_kwdefaults};
    for (int i = 0; i < 4; i++) {
        PyObject *v = PyObject_GetAttr(fn, attrs[i]);
        int s = v ? cap_source_add(T, CAP_S_ATTR, src, 0, 0, attrs[i]) : -1;
        /* code and globals by identity; defaults (made per call when there
           are any) by value */
        int kind = i < 2 || v == Py_None ? CAP_G_ID : CAP_G_EQ;
        int rc = s >= 0 ? cap_guard_add(T, kind, s, v, 0) : -1;
        Py_XDECREF(v);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static PyObject *wrap_tensor(cap_trace *T, PyObject *obj, int src)
{
    PyTypeObject *tt = Py_TYPE(obj);
    if (tt != (PyTypeObject *)cap_T.Tensor && tt != (PyTypeObject *)cap_T.Parameter) {
        /* Tensor subclasses run for real: guard the type, keep the object. */
        if (cap_guard_add(T, CAP_G_TYPE, src, (PyObject *)tt, 0) < 0)
            return NULL;
        cap_t_map(T, obj, src);
        return Py_NewRef(obj);
    }
    int prev = cap_t_source_of(T, obj);
    if (prev >= 0 && prev != src && T->src_val[prev] && cap_is_tensor(T->src_val[prev])) {
        /* The tensor of another source (f(a, a)): the same graph input, so
           that `is` and writes through one are seen through the other. */
        if (cap_guard_add(T, CAP_G_SAME, src, NULL, prev) < 0)
            return NULL;
        return Py_NewRef(T->src_val[prev]);
    }
    cap_tmeta m;
    if (cap_tmeta_read(obj, &m) < 0 || (int)m.dt < 0 || (int)m.dt >= PTC_DTYPE_COUNT) {
        /* No graph value can hold it (dtype, rank, device): the object is
           kept, and torch calls on it are breaks (PTC-B026). */
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(cap_InternalError))
            return NULL;
        PyErr_Clear();
        Py_XDECREF(m.type);
        Py_XDECREF(m.dtype);
        if (cap_guard_add(T, CAP_G_TYPE, src, (PyObject *)tt, 0) < 0)
            return NULL;
        cap_t_map(T, obj, src);
        return Py_NewRef(obj);
    }
    int dyn =
        cap_guard_add(T, CAP_G_TENSOR, src, obj, 0) < 0 ? -1 : cap_t_dynamic_dims(T, obj, src, &m);
    ptc_ttype ty;
    cap_tmeta_type(&m, &ty);
    if (dyn > 0 && symbolic_dims(T, src, obj, &m, dyn, &ty) < 0)
        dyn = -1;
    if (dyn < 0) {
        Py_DECREF(m.type);
        Py_DECREF(m.dtype);
        return NULL;
    }
    char name[128];
    cap_input_name(T, src, name, sizeof name);
    /* before it is an input: one that breaks here (it shares memory with
       an input written before) must not be among the graph's inputs, whose
       NOALIAS guard it would fail */
    ptc_value *v = cap_t_note_input(T, obj, src, name) < 0 ? NULL : ptc_graph_add_input(T->g, name, &ty);
    Py_DECREF(m.type);
    Py_DECREF(m.dtype);
    if (!v)
        return PyErr_Occurred() ? NULL : PyErr_Format(cap_InternalError, "ptc: cannot add graph input %s", name);
    cap_t_add_input(T, src, NULL);
    cap_tensor *ct = (cap_tensor *)cap_tensor_new(T, v);
    if (!ct)
        return NULL;
    ct->input_v = v;
    ct->src = src;
    Py_XSETREF(ct->fake_type, Py_NewRef((PyObject *)tt));
    cap_t_map(T, obj, src);
    return (PyObject *)ct;
}

/* The default that f's slot i holds, bound from defaults (a tuple, or the
 * kw-only dict) at defaults_src: outside objects reached through it. */
static int wrap_default(cap_trace *T, cap_frame *f, PyObject *d, int kind, int defaults_src,
                        int index, PyObject *key)
{
    if (cap_is_constant(d))
        return 0;
    for (int i = 0; i < f->code->nlp; i++) {
        if (f->lp[i] != d)
            continue;
        int s = cap_source_add(T, kind, defaults_src, 0, index, key);
        PyObject *w = s >= 0 ? cap_t_wrap(T, d, s) : NULL;
        if (!w)
            return -1;
        Py_SETREF(f->lp[i], w);
    }
    return 0;
}

int cap_t_wrap_defaults(cap_trace *T, cap_frame *f, PyObject *defaults, int defaults_src)
{
    /* An inlined call's default is the function's own object, as eager's:
       a tensor written in place or a list appended to keeps the write for
       the next call. So it is an outside object reached through
       __defaults__ (a graph input; a logged and replayed mutation), not a
       constant of the trace. */
    if (PyTuple_Check(defaults))
        for (Py_ssize_t j = 0; j < PyTuple_Size(defaults); j++)
            if (wrap_default(T, f, PyTuple_GetItem(defaults, j), CAP_S_INDEX, defaults_src,
                             (int)j, NULL) < 0)
                return -1;
    PyObject *key, *d;
    Py_ssize_t pos = 0;
    while (PyDict_Check(defaults) && PyDict_Next(defaults, &pos, &key, &d))
        if (wrap_default(T, f, d, CAP_S_ITEM, defaults_src, 0, key) < 0)
            return -1;
    return 0;
}

int cap_t_identity_guards(cap_trace *T)
{
    int n = T->g ? T->g->ninputs : 0, last = -1;
    PyObject *ids = PyList_New(0);
    for (int i = 0; ids && i < n; i++) {
        int s = T->input_src[i];
        if (s < 0 || cap_source_module_tensor(T->src[s].kind) || T->src[s].kind == CAP_S_CONST)
            continue;
        PyObject *id = PyLong_FromLong(s);
        if (!id || PyList_Append(ids, id) < 0)
            Py_CLEAR(ids);
        Py_XDECREF(id);
        last = s > last ? s : last;
    }
    if (!ids)
        return -1;
    PyObject *t = PyList_AsTuple(ids);
    Py_DECREF(ids);
    int rc = !t ? -1 : PyTuple_Size(t) < 2 ? 0 : cap_guard_add(T, CAP_G_DISTINCT, last, t, 0);
    Py_XDECREF(t);
    return rc;
}

static int ptr_order(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (PyObject *const *)a, y = (uintptr_t) * (PyObject *const *)b;
    return x < y ? -1 : x > y;
}

bool cap_identity_guard_ok(const cap_guard *g, PyObject *const *vals)
{
    if (g->kind == CAP_G_SAME)
        return vals[g->src] && vals[g->src] == vals[g->n];
    Py_ssize_t n = PyTuple_Size(g->obj);
    PyObject *stack[16], **objs = n <= 16 ? stack : malloc(sizeof(PyObject *) * (size_t)n);
    bool ok = objs != NULL;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok = (objs[i] = vals[PyLong_AsLong(PyTuple_GetItem(g->obj, i))]) != NULL;
    if (ok)
        qsort(objs, (size_t)n, sizeof *objs, ptr_order);
    for (Py_ssize_t i = 1; ok && i < n; i++)
        ok = objs[i] != objs[i - 1];
    if (objs != stack)
        free(objs);
    return ok;
}

/* A loop's iterator in the starting state (a resume after a break inside a
 * for loop): guarded on its position, and copied, so that the trace advances
 * its copy and the entry rebuilds a fresh iterator; the items of a sequence
 * are reached through the original's .seq (with their own guards). */
static PyObject *wrap_iter(cap_trace *T, cap_iter *it, int src)
{
    PyObject *range = it->seq ? Py_NewRef(Py_None) : Py_BuildValue("(LLn)", it->start, it->step, it->n);
    if (!range || cap_guard_add(T, CAP_G_ITERPOS, src, range, it->i) < 0) {
        Py_XDECREF(range);
        return NULL;
    }
    Py_DECREF(range);
    cap_iter *copy;
    if (!it->seq) {
        copy = (cap_iter *)cap_iter_range(it->start, it->step, it->n);
    } else {
        int ss = cap_source_add(T, CAP_S_ITERSEQ, src, 0, 0, NULL);
        if (ss < 0 || cap_guard_add(T, CAP_G_TYPE, ss, (PyObject *)Py_TYPE(it->seq), 0) < 0 ||
            cap_guard_add(T, CAP_G_LEN, ss, NULL, cap_stored_len(it->seq)) < 0)
            return NULL;
        cap_t_map(T, it->seq, ss);
        copy = (cap_iter *)cap_iter_seq(it->seq, ss, T);
        if (copy)
            copy->gen = it->gen;
        if (copy && it->owner) { /* the container it walks, whose size each step reads */
            static PyObject *name;
            int os = cap_t_source_of(T, it->owner);
            if (os < 0 && (name || (name = PyUnicode_InternFromString("owner"))))
                os = cap_source_add(T, CAP_S_ATTR, src, 0, 0, name);
            cap_iter_set_owner(copy, it->owner);
            copy->owner_len = it->owner_len;
            if (os >= 0)
                cap_t_map(T, it->owner, os);
            if (os < 0 || cap_guard_add(T, CAP_G_LEN, os, NULL, cap_stored_len(it->owner)) < 0)
                Py_CLEAR(copy);
        }
    }
    if (copy) {
        copy->i = it->i;
        copy->T = T;
    }
    return (PyObject *)copy;
}

/* obj.name where name is a function of obj's class: one guard on obj (the
 * class still has that function, obj's dict does not shadow it) instead of
 * guards on a bound method made afresh at every read. The function is a
 * constant of the entry, so rebuilt methods bind the same function. */
static bool class_method_guard(cap_trace *T, PyObject *m, int src)
{
    /* copied: cap_source_add below may move T->src */
    const cap_source s = T->src[src];
    if ((s.kind != CAP_S_ATTR && s.kind != CAP_S_INSTDICT) || s.parent < 0 || !PyUnicode_Check(s.key))
        return false;
    PyObject *parent = T->src_val[s.parent];
    PyObject *self = PyObject_GetAttr(m, cap_P.s_self), *func = PyObject_GetAttr(m, cap_P.s_func);
    PyObject *onclass = self == parent && parent && func ? PyObject_GetAttr((PyObject *)Py_TYPE(parent), s.key) : NULL;
    PyErr_Clear();
    bool ok = onclass && onclass == func && cap_is_function(func);
    if (ok) {
        PyObject *d = PyObject_GenericGetDict(parent, NULL);
        ok = d && !PyDict_GetItem(d, s.key);
        Py_XDECREF(d);
        PyErr_Clear();
    }
    PyObject *pair = ok ? PyTuple_Pack(2, s.key, func) : NULL;
    int fs = pair ? cap_source_add(T, CAP_S_CONST, -1, 0, 0, func) : -1;
    ok = pair && fs >= 0 && cap_guard_add(T, CAP_G_CLASSATTR, s.parent, pair, 0) == 0;
    if (ok)
        cap_t_map(T, func, fs);
    PyErr_Clear();
    Py_XDECREF(pair);
    Py_XDECREF(self);
    Py_XDECREF(func);
    Py_XDECREF(onclass);
    return ok;
}

PyObject *cap_t_wrap(cap_trace *T, PyObject *obj, int src)
{
    if (src < 0)
        return NULL;
    if (T->src_val[src])
        return Py_NewRef(T->src_val[src]);
    PyObject *w = NULL;
    if (Py_TYPE(obj) == cap_iter_type) {
        w = wrap_iter(T, (cap_iter *)obj, src);
    } else if (PyObject_TypeCheck(obj, (PyTypeObject *)cap_T.Tensor)) {
        w = wrap_tensor(T, obj, src);
    } else if (T->src[src].kind == CAP_S_CONST) {
        cap_t_map(T, obj, src); /* assumed constant: no guard */
        w = Py_NewRef(obj);
    } else if (cap_is_method(obj) && class_method_guard(T, obj, src)) {
        w = Py_NewRef(obj);
    } else if (cap_is_method(obj) || (PyCFunction_Check(obj) && !plain_builtin(obj))) {
        /* Bound methods are made on each attribute read: guard what they
           bind, the function and self, not the method object. */
        if (cap_guard_add(T, CAP_G_TYPE, src, (PyObject *)Py_TYPE(obj), 0) < 0)
            return NULL;
        PyObject *names[2] = {cap_is_method(obj) ? cap_P.s_func : cap_P.s_name, cap_P.s_self};
        for (int k = 0; k < 2; k++) {
            PyObject *part = PyObject_GetAttr(obj, names[k]);
            int ps = part ? cap_source_add(T, CAP_S_ATTR, src, 0, 0, names[k]) : -1;
            PyObject *pw = ps >= 0 ? cap_t_wrap(T, part, ps) : NULL;
            Py_XDECREF(part);
            if (!pw)
                return NULL;
            Py_DECREF(pw);
        }
        w = Py_NewRef(obj);
    } else if (nested_function(obj)) {
        if (guard_nested_function(T, obj, src) < 0)
            return NULL;
        cap_t_map(T, obj, src);
        w = Py_NewRef(obj);
    } else if (obj == Py_None || obj == Py_True || obj == Py_False || identity_guarded(obj)) {
        if (cap_guard_add(T, CAP_G_ID, src, obj, 0) < 0)
            return NULL;
        if (!cap_is_constant(obj))
            cap_t_map(T, obj, src);
        w = Py_NewRef(obj);
    } else if (cap_is_constant(obj)) {
        if (cap_guard_add(T, CAP_G_EQ, src, obj, 0) < 0)
            return NULL;
        w = Py_NewRef(obj);
    } else {
        if (cap_guard_add(T, CAP_G_TYPE, src, (PyObject *)Py_TYPE(obj), 0) < 0)
            return NULL;
        if (PyTuple_Check(obj) && cap_guard_add(T, CAP_G_LEN, src, NULL, PyTuple_Size(obj)) < 0)
            return NULL;
        cap_t_map(T, obj, src);
        w = Py_NewRef(obj);
    }
    if (w)
        T->src_val[src] = Py_NewRef(w);
    return w;
}

/* A value read from outside: wrapped with guards when the source is known. */
int cap_t_outside_value(cap_trace *T, PyObject *v, int src, PyObject **out)
{
    if (src < 0) {
        *out = Py_NewRef(v);
        return CAP_NEXT;
    }
    *out = cap_t_wrap(T, v, src);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_t_derived(cap_trace *T, PyObject *v, int kind, int parent, int index, PyObject *key,
                  PyObject **out)
{
    int s = parent >= 0 ? cap_source_add(T, kind, parent, 0, index, key) : -1;
    if (parent >= 0 && s < 0)
        return CAP_ERR;
    return cap_t_outside_value(T, v, s, out);
}

int cap_t_stored_dict_item(cap_trace *T, PyObject *d, PyObject *key, PyObject **out)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    int src = cap_t_source_of(T, d);
    if (!v) {
        if (!PyErr_Occurred() && cap_guard_add(T, CAP_G_DICT_HAS, src, key, 0) == 0)
            PyErr_SetObject(PyExc_KeyError, key);
        return CAP_ERR;
    }
    return cap_t_derived(T, v, CAP_S_ITEM, src, 0, key, out);
}

/* type(obj) as eager sees it. The type of an outside object is an outside
 * object too, reached by type(obj): reading its attributes guards them and
 * writing them is logged or breaks, as for any class from outside (else
 * type(self).n += 1 was made once, while tracing, and never again). */
int cap_t_type_of(cap_trace *T, PyObject *obj, PyObject **out)
{
    PyObject *type = cap_eager_type(obj);
    int parent = cap_is_tensor(obj) || cap_is_ptc_iter(obj) ? -1 : cap_t_source_of(T, obj);
    int src = parent >= 0 ? cap_source_add(T, CAP_S_TYPE, parent, 0, 0, NULL) : -1;
    *out = src >= 0 ? cap_t_wrap(T, type, src) : parent >= 0 ? NULL : Py_NewRef(type);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* ---- interpreter hooks ----------------------------------------------------------------- */

int cap_t_load_state(cap_interp *I, cap_frame *f, int slot)
{
    int src = f->slot_src[slot];
    f->slot_src[slot] = -1;
    /* An id() the resume state holds is new each call: its source rebuilds
       it where it escapes, and nothing is specialised on it (ids.c). */
    if (cap_t_resumed_id(I->T, f->lp[slot]))
        return cap_t_map(I->T, f->lp[slot], src) < 0 ? CAP_ERR : CAP_NEXT;
    PyObject *w = cap_t_wrap(I->T, f->lp[slot], src);
    if (!w)
        return CAP_ERR;
    Py_SETREF(f->lp[slot], w);
    return CAP_NEXT;
}

void cap_t_closure_cell(cap_trace *T, cap_frame *f, int i, PyObject *cell)
{
    /* The cells of an outside function are outside: writes to them are
       logged effects, and their contents are reached through the function. */
    int fsrc = cap_t_source_of(T, f->func);
    if (fsrc < 0 || cap_t_source_of(T, cell) >= 0)
        return;
    int s;
    if (nested_function(f->func)) {
        /* Guarded by its code, not its identity: this call's cells. */
        int cs = cap_source_add(T, CAP_S_ATTR, fsrc, 0, 0, cap_P.s_closure);
        s = cs >= 0 ? cap_source_add(T, CAP_S_INDEX, cs, 0, i, NULL) : -1;
    } else {
        s = cap_source_add(T, CAP_S_CONST, -1, 0, 0, cell);
    }
    if (s >= 0)
        cap_t_map(T, cell, s);
    PyErr_Clear();
}
