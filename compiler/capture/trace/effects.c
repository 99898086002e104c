/* Side effects on objects that existed before the call: logged while
 * tracing, replayed after the graph.
 *
 * As torch.compile does, a write to an outside list, dict, set, cell, global
 * or attribute does not end the graph: the trace logs it (T->effects, in
 * program order) and the entry replays the log after its graph, one routine
 * per kind of mutation (entry_run.c), with the values the graph computed.
 * Reads later in the trace must see the writes, so each written list, dict,
 * set or cell has a record in T->mut (keyed by the object's id; the interpreter
 * keeps holding the object itself, so identity and aliasing are eager's):
 *
 *   [obj, shadow or None, pending writes]
 *
 * Appends to a list and item writes to a dict are only pending: logging them
 * reads nothing of the object, so a log list or cache dict that grows on
 * every call is not guarded on its length or keys (no recompiles). The first
 * read that needs the whole object makes the shadow: the object's items as
 * a read would see them (through their sources, guarded), the pending
 * writes applied; operations then read the shadow instead (cap_t_current).
 * A single key of a written dict is answered from the pending writes.
 * Instances of list and dict subclasses are written the same way (through
 * the base type's methods, which is what the program called: no Python
 * override of them, or super() in one); one of a subclass that adds no
 * methods has a shadow too, others none: a read of one that needs the whole
 * object after a write breaks, since the subclass may read itself otherwise
 * than its storage.
 *
 * Mutations inside a nested run (a callback of a builtin, a generator
 * expression's body) are logged too: a break there reruns the builtin for
 * real from its start, and the trace is then made again up to that builtin
 * (exec.c), so that what the callbacks did before the break never happened.
 *
 * Making a shadow flows the object out as a whole (cap_hooks.flow: objects.c,
 * above this file, which reads the shadows this file keeps).
 */
#include "capture/trace/trace.h"

#include <string.h>

enum { REC_OBJ, REC_SHADOW, REC_PENDING };

static const struct {
    bool key, value;
} shapes[CAP_E_COUNT] = {
#define X(id, k, v) {k, v},
    CAP_EFFECT_KINDS(X)
#undef X
};

bool cap_effect_has_key(int kind)
{
    return shapes[kind].key;
}

bool cap_effect_has_value(int kind)
{
    return shapes[kind].value;
}

/* What a pending write of a deleted dict key or cell holds. */
static PyObject *deleted(void)
{
    static PyObject *marker;
    if (!marker)
        marker = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    return marker;
}

int cap_t_effect(cap_interp *I, int kind, PyObject *obj, PyObject *key, PyObject *value)
{
    PyObject *e = Py_BuildValue("(iOOO)", kind, obj, key ? key : Py_None, value ? value : Py_None);
    int rc = e ? PyList_Append(I->T->effects, e) : -1;
    Py_XDECREF(e);
    return rc < 0 ? CAP_ERR : CAP_NEXT;
}

int cap_t_const_source(cap_trace *T, PyObject *obj)
{
    int s = cap_t_source_of(T, obj);
    if (s >= 0)
        return s;
    s = cap_source_add(T, CAP_S_CONST, -1, 0, 0, obj);
    if (s >= 0)
        cap_t_map(T, obj, s);
    return s;
}

/* ---- records ------------------------------------------------------------------------ */

static PyObject *record_of(cap_trace *T, PyObject *obj)
{
    if (PyDict_Size(T->mut) == 0)
        return NULL;
    PyObject *key = PyLong_FromVoidPtr(obj);
    PyObject *rec = key ? PyDict_GetItem(T->mut, key) : NULL;
    Py_XDECREF(key);
    return rec;
}

static PyObject *record_get(cap_trace *T, PyObject *obj)
{
    PyObject *rec = record_of(T, obj);
    if (rec)
        return rec;
    PyObject *key = PyLong_FromVoidPtr(obj);
    rec = key ? Py_BuildValue("[OO[]]", obj, Py_None) : NULL;
    int rc = rec ? PyDict_SetItem(T->mut, key, rec) : -1;
    Py_XDECREF(key);
    Py_XDECREF(rec); /* T->mut holds it */
    return rc < 0 ? NULL : rec;
}

/* The shadow, or NULL: none yet, or being made (Ellipsis: reads of the
 * object then go to the object itself). */
static PyObject *shadow_of(PyObject *rec)
{
    PyObject *s = PyList_GetItem(rec, REC_SHADOW);
    return s == Py_None || s == Py_Ellipsis ? NULL : s;
}

/* Whether a written outside obj can be read through a shadow: a list, dict
 * or set, or an instance of a subclass of list or dict written in Python
 * that adds no methods (class L(list): pass; an __init__ aside), so every
 * read of it is the base type's and sees only its items. A subclass with
 * methods of its own (a __len__, __missing__, keys, ...) or one written in
 * C (OrderedDict, defaultdict) may read itself otherwise: no shadow. */
/* Whether class t, written in Python, defines nothing but plain_names. */
static bool adds_no_methods(PyObject *t)
{
    static const char *const plain_names[] = {
        "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__init__",
        "__annotations__", "__slots__", "__orig_bases__", "__parameters__", NULL};
    if (!(PyType_GetFlags((PyTypeObject *)t) & Py_TPFLAGS_HEAPTYPE))
        return false;
    PyObject *d = PyObject_GetAttrString(t, "__dict__"), *keys = d ? PyMapping_Keys(d) : NULL;
    bool plain = keys != NULL;
    for (Py_ssize_t i = 0; plain && i < PyList_Size(keys); i++) {
        PyObject *k = PyList_GetItem(keys, i);
        plain = PyUnicode_Check(k) && cap_name_index(PyUnicode_AsUTF8(k), plain_names) >= 0;
    }
    Py_XDECREF(keys);
    Py_XDECREF(d);
    PyErr_Clear();
    return plain;
}

static bool shadowable(PyObject *obj)
{
    if (PyList_CheckExact(obj) || PyDict_CheckExact(obj) || PySet_CheckExact(obj))
        return true;
    PyObject *base = PyList_Check(obj)   ? (PyObject *)&PyList_Type
                     : PyDict_Check(obj) ? (PyObject *)&PyDict_Type
                                         : NULL;
    PyObject *mro = base ? PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__mro__") : NULL;
    bool ok = false;
    for (Py_ssize_t i = 0; mro && i < PyTuple_Size(mro); i++) {
        PyObject *t = PyTuple_GetItem(mro, i);
        if (t == base) {
            ok = true;
            break;
        }
        if (!adds_no_methods(t))
            break;
    }
    Py_XDECREF(mro);
    PyErr_Clear();
    return ok;
}

/* A pending write of a set, (value, True) for add and (value, deleted) for
 * discard, applied to its shadow s. */
static int set_write(PyObject *s, PyObject *w)
{
    PyObject *v = PyTuple_GetItem(w, 0);
    return PyTuple_GetItem(w, 1) == deleted() ? (PySet_Discard(s, v) < 0 ? -1 : 0)
                                              : PySet_Add(s, v);
}

/* The shadow of rec's object, made on first need. Borrowed; NULL with an
 * error (a GraphBreak signal where ptc cannot read the object whole). */
static PyObject *materialize(cap_interp *I, PyObject *rec)
{
    PyObject *s = shadow_of(rec);
    if (s)
        return s;
    PyObject *obj = PyList_GetItem(rec, REC_OBJ), *pending = PyList_GetItem(rec, REC_PENDING);
    if (!shadowable(obj)) {
        cap_signal_break(CAP_B_MUTATE_OUTSIDE, "an outside %s read whole after a write",
                         cap_tpname(Py_TYPE(obj)));
        return NULL;
    }
    PyList_SetItem(rec, REC_SHADOW, Py_NewRef(Py_Ellipsis));
    s = cap_hooks.flow(I->T, obj);
    if (s == obj) /* a set's flow, or a subclass instance's, is the object itself, guarded */
        Py_SETREF(s, PyAnySet_Check(obj) ? PySet_New(obj)
                     : PyList_Check(obj) ? PySequence_List(obj)
                                         : PyDict_Copy(obj));
    if (!s) {
        PyList_SetItem(rec, REC_SHADOW, Py_NewRef(Py_None));
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            cap_signal_break(CAP_B_MUTATE_OUTSIDE, "an outside %s read whole after a write",
                             cap_tpname(Py_TYPE(obj)));
        }
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_Size(pending); i++) {
        PyObject *w = PyList_GetItem(pending, i);
        int rc = PyList_Check(s)    ? PyList_Append(s, w)
                 : PyAnySet_Check(s) ? set_write(s, w)
                 : PyTuple_GetItem(w, 1) == deleted()
                     ? PyDict_DelItem(s, PyTuple_GetItem(w, 0))
                     : PyDict_SetItem(s, PyTuple_GetItem(w, 0), PyTuple_GetItem(w, 1));
        if (rc < 0) {
            Py_DECREF(s);
            return NULL;
        }
    }
    PyList_SetItem(rec, REC_SHADOW, s);
    PyObject *none = PyList_New(0);
    if (none)
        PyList_SetItem(rec, REC_PENDING, none);
    return none ? s : NULL;
}

int cap_t_current(cap_interp *I, PyObject **obj)
{
    if (!I->T || !(PyList_Check(*obj) || PyDict_Check(*obj) || PyAnySet_Check(*obj)))
        return CAP_NEXT;
    PyObject *rec = record_of(I->T, *obj);
    if (!rec || PyList_GetItem(rec, REC_OBJ) != *obj ||
        PyList_GetItem(rec, REC_SHADOW) == Py_Ellipsis)
        return CAP_NEXT;
    if (!shadowable(*obj)) { /* a subclass that may read itself otherwise: no shadow */
        cap_signal_break(CAP_B_MUTATE_OUTSIDE, "an outside %s read after a write",
                         cap_tpname(Py_TYPE(*obj)));
        return CAP_ERR;
    }
    PyObject *s = materialize(I, rec);
    if (!s)
        return CAP_ERR;
    *obj = s;
    return CAP_NEXT;
}

bool cap_t_written(cap_trace *T, PyObject *obj)
{
    return record_of(T, obj) != NULL;
}

int cap_t_dict_written(cap_trace *T, PyObject *d, PyObject *key, PyObject **v)
{
    PyObject *rec = PyDict_Check(d) ? record_of(T, d) : NULL;
    if (!rec)
        return -1;
    PyObject *s = shadow_of(rec);
    if (s) {
        *v = PyDict_GetItem(s, key);
        return *v ? 1 : 0;
    }
    PyObject *pending = PyList_GetItem(rec, REC_PENDING);
    for (Py_ssize_t i = PyList_Size(pending) - 1; i >= 0; i--) {
        PyObject *w = PyList_GetItem(pending, i);
        int eq = PyObject_RichCompareBool(PyTuple_GetItem(w, 0), key, Py_EQ);
        if (eq < 0)
            PyErr_Clear();
        if (eq > 0) {
            *v = PyTuple_GetItem(w, 1);
            return *v == deleted() ? 0 : 1;
        }
    }
    return -1;
}

/* ---- dicts ---------------------------------------------------------------------------- */

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

/* d[key] as this trace left it: a new reference, or NULL (no error) when
 * missing; unwritten keys are read from d through its source. */
static int dict_read(cap_interp *I, PyObject *d, PyObject *key, PyObject **out)
{
    PyObject *v = NULL;
    int w = cap_t_dict_written(I->T, d, key, &v);
    if (w >= 0) {
        *out = w ? Py_NewRef(v) : NULL;
        return CAP_NEXT;
    }
    return cap_t_dict_lookup(I, d, key, out);
}

static int dict_write(cap_interp *I, PyObject *d, PyObject *key, PyObject *v)
{
    cap_trace *T = I->T;
    if (!cap_is_key(key))
        return cap_t_break(T, CAP_B_MUTATE_OUTSIDE, "an outside dict written with a %s key",
                           cap_tpname(Py_TYPE(key)));
    if (!v) { /* del d[key]: eager's KeyError when it is not there */
        PyObject *old = NULL;
        int rc = dict_read(I, d, key, &old);
        if (rc != CAP_NEXT)
            return rc;
        if (!old) {
            PyErr_SetObject(PyExc_KeyError, key);
            return CAP_ERR;
        }
        Py_DECREF(old);
    }
    int rc = cap_t_effect(I, v ? CAP_E_ITEM_SET : CAP_E_ITEM_DEL, d, key, v);
    PyObject *rec = rc == CAP_NEXT ? record_get(T, d) : NULL;
    if (!rec)
        return rc == CAP_NEXT ? CAP_ERR : rc;
    PyObject *s = shadow_of(rec);
    if (s)
        return (v ? PyDict_SetItem(s, key, v) : PyDict_DelItem(s, key)) < 0 ? CAP_ERR : CAP_NEXT;
    PyObject *w = PyTuple_Pack(2, key, v ? v : deleted());
    rc = w ? PyList_Append(PyList_GetItem(rec, REC_PENDING), w) : -1;
    Py_XDECREF(w);
    return rc < 0 ? CAP_ERR : CAP_NEXT;
}

/* Makes obj empty: a shadow known without reading it. */
static int clear(cap_interp *I, PyObject *obj)
{
    int rc = cap_t_effect(I, CAP_E_CLEAR, obj, NULL, NULL);
    PyObject *rec = rc == CAP_NEXT ? record_get(I->T, obj) : NULL;
    if (!rec)
        return rc == CAP_NEXT ? CAP_ERR : rc;
    PyObject *empty = PyList_Check(obj)    ? PyList_New(0)
                      : PyAnySet_Check(obj) ? PySet_New(NULL)
                                            : PyDict_New();
    PyObject *none = PyList_New(0);
    if (!empty || !none) {
        Py_XDECREF(empty);
        Py_XDECREF(none);
        return CAP_ERR;
    }
    PyList_SetItem(rec, REC_SHADOW, empty);
    PyList_SetItem(rec, REC_PENDING, none);
    return CAP_NEXT;
}

/* d.update(other, **kw): other a dict or an iterable of pairs. */
static int dict_update(cap_interp *I, PyObject *d, PyObject *const *args, int nargs,
                       PyObject *kwnames)
{
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0, rc = CAP_NEXT;
    if (nargs - nkw > 1) {
        PyErr_Format(PyExc_TypeError, "update expected at most 1 argument, got %d", nargs - nkw);
        return CAP_ERR;
    }
    if (nargs - nkw == 1) {
        PyObject *other = args[0], *items;
        if ((rc = cap_t_current(I, &other)) != CAP_NEXT)
            return rc;
        PyObject *flat = cap_hooks.flow(I->T, other);
        if (!flat)
            return CAP_ERR;
        if (PyDict_Check(flat)) {
            items = PyDict_Items(flat);
        } else {
            items = PySequence_List(flat);
        }
        Py_DECREF(flat);
        for (Py_ssize_t i = 0; items && rc == CAP_NEXT && i < PyList_Size(items); i++) {
            PyObject *kv = PyList_GetItem(items, i);
            if (!PyTuple_Check(kv) || PyTuple_Size(kv) != 2)
                rc = cap_t_break(I->T, CAP_B_MUTATE_OUTSIDE,
                                 "dict.update() with items that are not pairs");
            else
                rc = dict_write(I, d, PyTuple_GetItem(kv, 0), PyTuple_GetItem(kv, 1));
        }
        if (!items)
            rc = CAP_ERR;
        Py_XDECREF(items);
    }
    for (int k = 0; rc == CAP_NEXT && k < nkw; k++)
        rc = dict_write(I, d, PyTuple_GetItem(kwnames, k), args[nargs - nkw + k]);
    return rc;
}

static int dict_mutator(cap_interp *I, PyObject *d, const char *name, PyObject *const *args,
                        int nargs, PyObject *kwnames, PyObject **out)
{
    if (strcmp(name, "update") == 0) {
        int rc = dict_update(I, d, args, nargs, kwnames);
        if (rc == CAP_NEXT)
            *out = Py_NewRef(Py_None);
        return rc;
    }
    if (kwnames)
        return CAP_NONE;
    if (strcmp(name, "clear") == 0 && nargs == 0) {
        int rc = clear(I, d);
        if (rc == CAP_NEXT)
            *out = Py_NewRef(Py_None);
        return rc;
    }
    bool pop = strcmp(name, "pop") == 0, setdefault = strcmp(name, "setdefault") == 0;
    if (!(pop || setdefault) || nargs < 1 || nargs > 2)
        return CAP_NONE;
    if (!cap_is_key(args[0]))
        return cap_t_break(I->T, CAP_B_MUTATE_OUTSIDE, "dict.%s() of an outside dict with a %s key",
                           name, cap_tpname(Py_TYPE(args[0])));
    PyObject *v = NULL;
    int rc = dict_read(I, d, args[0], &v);
    if (rc != CAP_NEXT)
        return rc;
    if (v) {
        rc = pop ? dict_write(I, d, args[0], NULL) : CAP_NEXT;
        if (rc == CAP_NEXT)
            *out = v;
        else
            Py_DECREF(v);
        return rc;
    }
    if (pop && nargs == 1) {
        PyErr_SetObject(PyExc_KeyError, args[0]);
        return CAP_ERR;
    }
    PyObject *dflt = nargs == 2 ? args[1] : Py_None;
    rc = setdefault ? dict_write(I, d, args[0], dflt) : CAP_NEXT;
    if (rc == CAP_NEXT)
        *out = Py_NewRef(dflt);
    return rc;
}

/* ---- lists ---------------------------------------------------------------------------- */

static int list_shadow(cap_interp *I, PyObject *l, PyObject **s)
{
    PyObject *rec = record_get(I->T, l);
    *s = rec ? materialize(I, rec) : NULL;
    return *s ? CAP_NEXT : CAP_ERR;
}

static bool is_index(PyObject *o)
{
    return PyLong_CheckExact(o) || PyBool_Check(o);
}

/* l.pop(i): from the pending appends when they hold it, else the shadow. */
static int list_pop(cap_interp *I, PyObject *l, PyObject *index, PyObject **out)
{
    Py_ssize_t i = index ? PyLong_AsSsize_t(index) : -1;
    if (i == -1 && PyErr_Occurred())
        return CAP_ERR;
    PyObject *rec = record_get(I->T, l);
    if (!rec)
        return CAP_ERR;
    PyObject *pending = PyList_GetItem(rec, REC_PENDING), *s = shadow_of(rec);
    Py_ssize_t n = PyList_Size(pending);
    bool from_pending = !s && i < 0 && -i <= n;
    /* the shadow before the log: a break in making it runs the pop for real */
    if (!from_pending && !s && !(s = materialize(I, rec)))
        return CAP_ERR;
    PyObject *key = PyLong_FromSsize_t(i);
    int rc = key ? cap_t_effect(I, CAP_E_POP, l, key, NULL) : CAP_ERR;
    Py_XDECREF(key);
    if (rc != CAP_NEXT)
        return rc;
    if (from_pending) {
        *out = Py_NewRef(PyList_GetItem(pending, n + i));
        return PySequence_DelItem(pending, n + i) < 0 ? CAP_ERR : CAP_NEXT;
    }
    *out = PyObject_CallMethod(s, "pop", "n", i);
    return *out ? CAP_NEXT : CAP_ERR;
}

static int list_mutator(cap_interp *I, PyObject *l, const char *name, PyObject *const *args,
                        int nargs, PyObject **out)
{
    PyObject *s = NULL, *rec;
    int rc;
    if (strcmp(name, "append") == 0 && nargs == 1) {
        if ((rc = cap_t_effect(I, CAP_E_APPEND, l, NULL, args[0])) != CAP_NEXT)
            return rc;
        if (!(rec = record_get(I->T, l)))
            return CAP_ERR;
        s = shadow_of(rec);
        rc = PyList_Append(s ? s : PyList_GetItem(rec, REC_PENDING), args[0]) < 0 ? CAP_ERR
                                                                                  : CAP_NEXT;
    } else if (strcmp(name, "extend") == 0 && nargs == 1) {
        PyObject *items = cap_t_materialize(I, args[0], &rc);
        if (!items)
            return rc == CAP_NEXT ? CAP_ERR : rc;
        if ((rc = cap_t_effect(I, CAP_E_EXTEND, l, NULL, items)) == CAP_NEXT) {
            rec = record_get(I->T, l);
            s = rec ? shadow_of(rec) : NULL;
            PyObject *dst = s ? s : rec ? PyList_GetItem(rec, REC_PENDING) : NULL;
            rc = dst && PyList_SetSlice(dst, PyList_Size(dst), PyList_Size(dst), items) == 0
                     ? CAP_NEXT
                     : CAP_ERR;
        }
        Py_DECREF(items);
    } else if (strcmp(name, "insert") == 0 && nargs == 2 && is_index(args[0])) {
        if ((rc = list_shadow(I, l, &s)) != CAP_NEXT ||
            (rc = cap_t_effect(I, CAP_E_INSERT, l, args[0], args[1])) != CAP_NEXT)
            return rc;
        Py_ssize_t i = PyLong_AsSsize_t(args[0]);
        rc = PyList_Insert(s, i, args[1]) < 0 ? CAP_ERR : CAP_NEXT;
    } else if (strcmp(name, "pop") == 0 && nargs <= 1 && (nargs == 0 || is_index(args[0]))) {
        return list_pop(I, l, nargs ? args[0] : NULL, out);
    } else if (strcmp(name, "remove") == 0 && nargs == 1) {
        if ((rc = list_shadow(I, l, &s)) != CAP_NEXT)
            return rc;
        Py_ssize_t i = PySequence_Index(s, args[0]);
        if (i < 0) {
            if (PyErr_ExceptionMatches(PyExc_ValueError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "list.remove(x): x not in list");
            }
            return CAP_ERR;
        }
        PyObject *key = PyLong_FromSsize_t(i);
        rc = key ? cap_t_effect(I, CAP_E_POP, l, key, NULL) : CAP_ERR;
        Py_XDECREF(key);
        if (rc == CAP_NEXT && PySequence_DelItem(s, i) < 0)
            rc = CAP_ERR;
    } else if (strcmp(name, "clear") == 0 && nargs == 0) {
        rc = clear(I, l);
    } else {
        return CAP_NONE;
    }
    if (rc == CAP_NEXT)
        *out = Py_NewRef(Py_None);
    return rc;
}

/* ---- whole-list rewrites: sort, reverse, slices ----------------------------------------- */

/* Logs that l now holds the items of its shadow s, all of them (one slice
 * write replays a sort, a reverse or a slice assignment alike). */
static int log_whole_list(cap_interp *I, PyObject *l, PyObject *s)
{
    PyObject *all = PySlice_New(NULL, NULL, NULL), *items = PyList_GetSlice(s, 0, PyList_Size(s));
    int rc = all && items ? cap_t_effect(I, CAP_E_ITEM_SET, l, all, items) : CAP_ERR;
    Py_XDECREF(all);
    Py_XDECREF(items);
    return rc;
}

/* Sorting compares the items for real: only values whose comparisons are
 * fixed at trace time (constants under guards), by no key or a builtin one. */
static bool sorts_at_trace_time(PyObject *s, PyObject *const *args, int nargs, PyObject *kwnames)
{
    for (int k = 0; kwnames && k < (int)PyTuple_Size(kwnames); k++) {
        PyObject *v = args[nargs + k];
        if (PyUnicode_CompareWithASCIIString(PyTuple_GetItem(kwnames, k), "key") == 0 &&
            v != Py_None && !PyCFunction_Check(v))
            return false;
    }
    for (Py_ssize_t i = 0; i < PyList_Size(s); i++)
        if (!cap_is_constant(PyList_GetItem(s, i)))
            return false;
    return true;
}

/* The order list.sort(key=key, reverse=rev) gives items: the key is a
 * traced call per item, and the keys must be constants (compared now for
 * real; a tensor's or object's order is not known while tracing). Indices
 * sorted by their keys keep list.sort's stability, reversed too. */
static PyObject *order_by_traced_key(cap_interp *I, PyObject *items, PyObject *key, PyObject *rev,
                                     int *rc)
{
    Py_ssize_t n = PyList_Size(items);
    PyObject *keys = PyList_New(n);
    for (Py_ssize_t i = 0; keys && i < n; i++) {
        PyObject *a[1] = {PyList_GetItem(items, i)}, *kv = NULL;
        if ((*rc = cap_t_call_sync(I, key, a, 1, NULL, &kv)) != CAP_NEXT) {
            Py_DECREF(keys);
            return NULL;
        }
        PyList_SetItem(keys, i, kv);
        if (!cap_is_constant(kv)) {
            Py_DECREF(keys);
            *rc = cap_t_break(I->T, CAP_B_MUTATE_OUTSIDE,
                              "list.sort() of an outside list by keys not known while tracing "
                              "(tensors or objects)");
            return NULL;
        }
    }
    PyObject *getter = keys ? PyObject_GetAttrString(keys, "__getitem__") : NULL;
    PyObject *range = PyObject_CallFunction((PyObject *)&PyRange_Type, "n", n);
    PyObject *order = getter && range ? PySequence_List(range) : NULL;
    PyObject *sort = order ? PyObject_GetAttrString(order, "sort") : NULL;
    PyObject *kw =
        sort ? Py_BuildValue("{sOsO}", "key", getter, "reverse", rev ? rev : Py_False) : NULL;
    PyObject *no_args = kw ? PyTuple_New(0) : NULL;
    PyObject *none = no_args ? PyObject_Call(sort, no_args, kw) : NULL;
    Py_XDECREF(no_args);
    *rc = none ? CAP_NEXT : CAP_ERR; /* eager's TypeError: keys that do not compare */
    if (!none)
        Py_CLEAR(order);
    Py_XDECREF(none);
    Py_XDECREF(kw);
    Py_XDECREF(sort);
    Py_XDECREF(range);
    Py_XDECREF(getter);
    Py_XDECREF(keys);
    return order;
}

/* l.sort(key=f, reverse=r) with a Python key function, on its shadow s. */
static int sort_by_traced_key(cap_interp *I, PyObject *l, PyObject *s, PyObject *key, PyObject *rev,
                              PyObject **out)
{
    int rc;
    PyObject *order = order_by_traced_key(I, s, key, rev, &rc);
    if (!order)
        return rc;
    PyObject *sorted = PyList_New(PyList_Size(order));
    for (Py_ssize_t i = 0; sorted && i < PyList_Size(order); i++)
        PyList_SetItem(sorted, i,
                       Py_NewRef(PyList_GetItem(s, PyLong_AsSsize_t(PyList_GetItem(order, i)))));
    Py_DECREF(order);
    rc = sorted && PyList_SetSlice(s, 0, PyList_Size(s), sorted) == 0 ? log_whole_list(I, l, s)
                                                                      : CAP_ERR;
    Py_XDECREF(sorted);
    if (rc == CAP_NEXT)
        *out = Py_NewRef(Py_None);
    return rc;
}

/* sort's keyword key (reverse: the other one), or NULL; NULL too when the
 * call has other keywords (eager's TypeError then comes from the real call). */
static PyObject *sort_keyword(PyObject *const *args, int npos, PyObject *kwnames, bool reverse)
{
    PyObject *found = NULL;
    for (int k = 0; kwnames && k < (int)PyTuple_Size(kwnames); k++) {
        PyObject *name = PyTuple_GetItem(kwnames, k);
        bool is_key = PyUnicode_CompareWithASCIIString(name, "key") == 0;
        if (!is_key && PyUnicode_CompareWithASCIIString(name, "reverse") != 0)
            return NULL;
        if (is_key != reverse)
            found = args[npos + k];
    }
    return found;
}

/* l.sort(...) and l.reverse() on an outside list: done on its shadow. */
static int list_reorder(cap_interp *I, PyObject *l, const char *name, PyObject *const *args,
                        int nargs, PyObject *kwnames, PyObject **out)
{
    int npos = nargs - (kwnames ? (int)PyTuple_Size(kwnames) : 0);
    PyObject *s = NULL;
    int rc = list_shadow(I, l, &s);
    if (rc != CAP_NEXT)
        return rc;
    bool sort = strcmp(name, "sort") == 0;
    PyObject *key = sort ? sort_keyword(args, npos, kwnames, false) : NULL;
    if (key && key != Py_None && !PyCFunction_Check(key) && npos == 0)
        return sort_by_traced_key(I, l, s, key, sort_keyword(args, npos, kwnames, true), out);
    if (sort && !sorts_at_trace_time(s, args, npos, kwnames))
        return cap_t_break(I->T, CAP_B_MUTATE_OUTSIDE,
                           "list.sort() of an outside list whose order is not known while "
                           "tracing (tensors or objects, or a Python key function)");
    PyObject *method = PyObject_GetAttrString(s, name), *pos = PyTuple_New(npos),
             *kw = PyDict_New();
    for (int i = 0; pos && i < npos; i++)
        PyTuple_SetItem(pos, i, Py_NewRef(args[i]));
    for (int k = 0; kw && kwnames && k < (int)PyTuple_Size(kwnames); k++)
        PyDict_SetItem(kw, PyTuple_GetItem(kwnames, k), args[npos + k]);
    PyObject *r = method && pos && kw ? PyObject_Call(method, pos, kw) : NULL;
    Py_XDECREF(method);
    Py_XDECREF(pos);
    Py_XDECREF(kw);
    if (!r)
        return CAP_ERR; /* eager's TypeError: too many arguments, unorderable items */
    rc = log_whole_list(I, l, s);
    if (rc == CAP_NEXT)
        *out = r;
    else
        Py_DECREF(r);
    return rc;
}

/* l[a:b] = items, del l[a:b] on an outside list. */
static int list_slice_write(cap_interp *I, PyObject *l, PyObject *slice, PyObject *v)
{
    PyObject *s = NULL, *items = NULL;
    int rc = CAP_NEXT;
    if (v && !(items = cap_t_materialize(I, v, &rc)))
        return rc == CAP_NEXT ? CAP_ERR : rc;
    if ((rc = list_shadow(I, l, &s)) == CAP_NEXT &&
        (items ? PyObject_SetItem(s, slice, items) : PyObject_DelItem(s, slice)) < 0)
        rc = CAP_ERR; /* eager's error: an extended slice of the wrong size */
    Py_XDECREF(items);
    return rc == CAP_NEXT ? log_whole_list(I, l, s) : rc;
}

/* ---- sets ------------------------------------------------------------------------------ */

/* One logged add (or discard) of the key v to the outside set: applied to
 * its shadow when it has one, else kept pending. */
static int set_write_logged(cap_interp *I, PyObject *set, PyObject *rec, PyObject *v, bool add)
{
    PyObject *s = shadow_of(rec);
    int rc = cap_t_effect(I, add ? CAP_E_SET_ADD : CAP_E_SET_DISCARD, set, NULL, v);
    PyObject *w = rc == CAP_NEXT ? PyTuple_Pack(2, v, add ? Py_True : deleted()) : NULL;
    if (w)
        rc = (s ? set_write(s, w) : PyList_Append(PyList_GetItem(rec, REC_PENDING), w)) < 0
                 ? CAP_ERR
                 : CAP_NEXT;
    else if (rc == CAP_NEXT)
        rc = CAP_ERR;
    Py_XDECREF(w);
    return rc;
}

/* The keys s.update(arg) or s.difference_update(arg) (s |= arg, s -= arg)
 * adds or discards, when arg is a list, tuple or set the trace made or a
 * constant, or an outside set (read whole: guarded equal), all of whose
 * items are keys: a new list, or NULL (no error). */
static PyObject *update_keys(cap_trace *T, PyObject *arg)
{
    bool made = PyList_CheckExact(arg) || PyTuple_CheckExact(arg) || PySet_CheckExact(arg) ||
                PyFrozenSet_CheckExact(arg);
    bool outside = made && cap_t_outside(T, arg) && !cap_is_constant(arg);
    if (!made || (outside && !PyAnySet_Check(arg)))
        return NULL;
    PyObject *read = outside ? cap_hooks.flow(T, arg) : Py_NewRef(arg);
    if (!read) {
        PyErr_Clear(); /* a set of values that are not constants: not logged */
        return NULL;
    }
    PyObject *keys = PySequence_List(read);
    Py_DECREF(read);
    for (Py_ssize_t i = 0; keys && i < PyList_Size(keys); i++)
        if (!cap_is_key(PyList_GetItem(keys, i)))
            Py_CLEAR(keys);
    PyErr_Clear();
    return keys;
}

/* s.symmetric_difference_update(arg) (s ^= arg): each of arg's keys, in
 * the order of a set made of them (eager's), is discarded where the set
 * holds it and added where not, read on its shadow; s ^= s clears s. */
static int set_symmetric_update(cap_interp *I, PyObject *set, PyObject *rec, PyObject *arg)
{
    if (arg == set)
        return clear(I, set);
    PyObject *unique = PyAnySet_Check(arg) ? Py_NewRef(arg) : PySet_New(arg);
    PyObject *keys = unique ? update_keys(I->T, unique) : NULL, *s = shadow_of(rec);
    Py_XDECREF(unique);
    if (!keys)
        return PyErr_Occurred() ? CAP_ERR : CAP_NONE;
    int rc = s || (s = materialize(I, rec)) ? CAP_NEXT : CAP_ERR;
    for (Py_ssize_t i = 0; rc == CAP_NEXT && i < PyList_Size(keys); i++) {
        int held = PySet_Contains(s, PyList_GetItem(keys, i));
        rc = held < 0 ? CAP_ERR : set_write_logged(I, set, rec, PyList_GetItem(keys, i), !held);
    }
    Py_DECREF(keys);
    return rc;
}

/* s.add(v), s.discard(v), s.remove(v), s.update(keys), s.difference_update
 * (keys) and s.clear() on an outside set, v and the keys constants (a set
 * holds keys: the guards compare them). Adds and discards are pending until
 * a read needs the shadow, as a list's appends are, so a set that grows on
 * every call is not guarded on what it holds; remove reads the shadow first
 * (eager's KeyError when v is missing) and is replayed as a discard. Other
 * methods, or other values, return CAP_NONE; symmetric_difference_update
 * is set_symmetric_update's. */
static int set_mutator(cap_interp *I, PyObject *set, const char *name, PyObject *const *args,
                       int nargs, PyObject **out)
{
    bool add = strcmp(name, "add") == 0, discard = strcmp(name, "discard") == 0,
         remove = strcmp(name, "remove") == 0, update = strcmp(name, "update") == 0,
         diff = strcmp(name, "difference_update") == 0;
    PyObject *rec, *keys = NULL;
    int rc = CAP_NEXT;
    if (strcmp(name, "clear") == 0 && nargs == 0) {
        rc = clear(I, set);
    } else if (strcmp(name, "symmetric_difference_update") == 0 && nargs == 1) {
        if (!(rec = record_get(I->T, set)))
            return CAP_ERR;
        if ((rc = set_symmetric_update(I, set, rec, args[0])) == CAP_NONE)
            return rc;
    } else if ((update || diff) && nargs == 1) {
        if (!(keys = update_keys(I->T, args[0])))
            return CAP_NONE;
        rec = record_get(I->T, set);
        rc = rec ? CAP_NEXT : CAP_ERR;
        for (Py_ssize_t i = 0; rc == CAP_NEXT && i < PyList_Size(keys); i++)
            rc = set_write_logged(I, set, rec, PyList_GetItem(keys, i), update);
        Py_DECREF(keys);
    } else if ((add || discard || remove) && nargs == 1 && cap_is_key(args[0])) {
        PyObject *s = (rec = record_get(I->T, set)) ? shadow_of(rec) : NULL;
        if (!rec || (remove && !s && !(s = materialize(I, rec))))
            return CAP_ERR;
        if (remove && PySet_Contains(s, args[0]) != 1) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, args[0]);
            return CAP_ERR;
        }
        rc = set_write_logged(I, set, rec, args[0], add);
    } else {
        return CAP_NONE;
    }
    *out = rc == CAP_NEXT ? Py_NewRef(Py_None) : NULL;
    return rc;
}

/* ---- entry points ---------------------------------------------------------------------- */

int cap_t_outside_mutator(cap_interp *I, PyObject *self, const char *name, PyObject *const *args,
                          int nargs, PyObject *kwnames, PyObject **out)
{
    bool set = strcmp(name, "__setitem__") == 0;
    if ((set || strcmp(name, "__delitem__") == 0) && nargs == (set ? 2 : 1) && !kwnames) {
        /* super().__setitem__(k, v) in a subclass's override */
        int rc = cap_t_outside_item_write(I, self, args[0], set ? args[1] : NULL);
        if (rc == CAP_NEXT)
            *out = Py_NewRef(Py_None);
        return rc;
    }
    if (PyDict_Check(self))
        return dict_mutator(I, self, name, args, nargs, kwnames, out);
    if (PyList_Check(self) && (strcmp(name, "sort") == 0 || strcmp(name, "reverse") == 0))
        return list_reorder(I, self, name, args, nargs, kwnames, out);
    if (PyList_Check(self) && !kwnames)
        return list_mutator(I, self, name, args, nargs, out);
    if (PySet_CheckExact(self) && !kwnames)
        return set_mutator(I, self, name, args, nargs, out);
    return CAP_NONE;
}

int cap_t_outside_item_write(cap_interp *I, PyObject *obj, PyObject *key, PyObject *v)
{
    if (PyDict_Check(obj))
        return dict_write(I, obj, key, v);
    if (PyList_Check(obj) && PySlice_Check(key))
        return list_slice_write(I, obj, key, v);
    if (!PyList_Check(obj) || !is_index(key))
        return CAP_NONE;
    PyObject *s = NULL;
    int rc = list_shadow(I, obj, &s); /* before the log: a break here runs the write for real */
    if (rc == CAP_NEXT)
        rc = cap_t_effect(I, v ? CAP_E_ITEM_SET : CAP_E_ITEM_DEL, obj, key, v);
    if (rc != CAP_NEXT)
        return rc;
    return (v ? PyObject_SetItem(s, key, v) : PyObject_DelItem(s, key)) < 0 ? CAP_ERR : CAP_NEXT;
}

int cap_t_global_write(cap_interp *I, cap_frame *f, PyObject *name, PyObject *v)
{
    if (!PyDict_CheckExact(f->globals))
        return cap_t_break(I->T, CAP_B_GLOBAL_WRITE,
                           "global '%s' of a namespace that is not a dict", PyUnicode_AsUTF8(name));
    if (cap_t_const_source(I->T, f->globals) < 0)
        return CAP_ERR;
    int rc = dict_write(I, f->globals, name, v);
    if (rc == CAP_ERR && !v && PyErr_ExceptionMatches(PyExc_KeyError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_NameError, "name '%U' is not defined", name);
    }
    return rc;
}

int cap_t_global_written(cap_interp *I, cap_frame *f, PyObject *name, PyObject **out)
{
    PyObject *v = NULL;
    int w = cap_t_dict_written(I->T, f->globals, name, &v);
    if (w < 0)
        return CAP_NONE;
    if (!w)
        return cap_t_break(I->T, CAP_B_GLOBAL_WRITE, "global '%s' read after it was deleted",
                           PyUnicode_AsUTF8(name));
    *out = Py_NewRef(v);
    return CAP_NEXT;
}

int cap_t_module_attr_written(cap_trace *T, PyObject *mod, PyObject *name, PyObject **out)
{
    PyObject *v = NULL;
    int w = cap_t_dict_written(T, PyModule_GetDict(mod), name, &v);
    if (w < 0)
        return CAP_NONE;
    if (!w) {
        PyErr_Format(PyExc_AttributeError, "module '%s' has no attribute '%U'",
                     PyModule_GetName(mod), name);
        return CAP_ERR;
    }
    *out = Py_NewRef(v);
    return CAP_NEXT;
}

/* ---- instance dicts ------------------------------------------------------------------------ */

/* Records in the trace's view of obj's instance dict that attribute name was
 * written (v NULL: deleted); the attribute write itself is logged apart. */
static int note_in_dict(cap_trace *T, PyObject *d, PyObject *name, PyObject *v)
{
    PyObject *rec = record_get(T, d), *s = rec ? shadow_of(rec) : NULL;
    if (!rec)
        return CAP_ERR;
    if (s)
        return (v ? PyDict_SetItem(s, name, v) : PyDict_DelItem(s, name)) < 0 ? CAP_ERR : CAP_NEXT;
    PyObject *w = PyTuple_Pack(2, name, v ? v : deleted());
    int rc = w ? PyList_Append(PyList_GetItem(rec, REC_PENDING), w) : -1;
    Py_XDECREF(w);
    return rc < 0 ? CAP_ERR : CAP_NEXT;
}

int cap_t_instance_dict_read(cap_trace *T, PyObject *obj, PyObject *attrs)
{
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (!d) {
        PyErr_Clear();
        return CAP_NEXT;
    }
    int rc = CAP_NEXT;
    if (PyDict_CheckExact(d) && !record_of(T, d)) {
        PyObject *name, *holder;
        Py_ssize_t pos = 0;
        while (rc == CAP_NEXT && PyDict_Next(attrs, &pos, &name, &holder))
            rc = note_in_dict(T, d, name, PyList_Check(holder) ? PyList_GetItem(holder, 0) : NULL);
    }
    Py_DECREF(d);
    return rc;
}

int cap_t_instance_dict_write(cap_trace *T, PyObject *obj, PyObject *name, PyObject *v)
{
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (!d) {
        PyErr_Clear();
        return CAP_NEXT;
    }
    int rc = PyDict_CheckExact(d) && record_of(T, d) ? note_in_dict(T, d, name, v) : CAP_NEXT;
    Py_DECREF(d);
    return rc;
}

/* ---- cells ------------------------------------------------------------------------------ */

int cap_t_write_cell(cap_interp *I, PyObject *cell, PyObject *v, bool *done)
{
    *done = false;
    if (cap_t_source_of(I->T, cell) < 0)
        return CAP_NEXT;
    int rc = cap_t_effect(I, v ? CAP_E_CELL_SET : CAP_E_CELL_DEL, cell, NULL, v);
    PyObject *rec = rc == CAP_NEXT ? record_get(I->T, cell) : NULL;
    if (!rec)
        return rc == CAP_NEXT ? CAP_ERR : rc;
    *done = true;
    PyList_SetItem(rec, REC_SHADOW, Py_NewRef(v ? v : deleted()));
    return CAP_NEXT;
}

int cap_t_load_cell(cap_trace *T, PyObject *cell, PyObject **v)
{
    int csrc = cap_t_source_of(T, cell);
    if (csrc < 0)
        return CAP_NEXT;
    PyObject *rec = record_of(T, cell);
    if (rec) { /* written in this trace */
        PyObject *w = PyList_GetItem(rec, REC_SHADOW);
        if (w == deleted())
            return cap_t_break(T, CAP_B_MUTATE_OUTSIDE,
                               "a closure variable read after it was deleted");
        Py_XSETREF(*v, Py_NewRef(w));
        return CAP_NEXT;
    }
    if (!*v)
        return CAP_NEXT; /* empty: the interpreter raises eager's NameError */
    int s = cap_source_add(T, CAP_S_CELL, csrc, 0, 0, NULL);
    PyObject *w = s >= 0 ? cap_t_wrap(T, *v, s) : NULL;
    if (!w)
        return CAP_ERR;
    Py_SETREF(*v, w);
    return CAP_NEXT;
}
