/* What an entry does on every call before its graph: evaluate its sources
 * and guards over the current state (replay.c does what follows the graph).
 *
 * Sources are evaluated in id order (a parent always has a smaller id), each
 * once, with its guards checked right after it, so a failing guard stops the
 * walk early. nn.Module attributes are read from the instance dicts directly
 * (no __getattr__), which is what keeps a cache hit cheap: a module's dicts
 * are fetched once per check, and each read starts at the dict position
 * where its key was found last time (a few ns, where a lookup with its
 * error save/restore is several times that). Guards stay exactly as strict:
 * every read yields what a lookup would.
 */
#include "capture/entry/entry.h"

#include <stdlib.h>
#include <string.h>

/* The instance dict of an object, and its _parameters, _buffers and
 * _modules dicts, all borrowed (the object keeps them): several sources and
 * guards read from one module, so each is looked up once per check and kept
 * in the slot of the module's source. A slot is valid while its generation
 * is the current one; anything that may run Python code (getattr, __eq__)
 * starts a new generation. */
struct cap_dcache {
    uint64_t gen;
    PyObject *dict;
    PyObject *sub[3];
    uint64_t sub_gen[3];
};

enum { SUB_PARAMS, SUB_BUFFERS, SUB_MODULES };

static uint64_t check_gen = 1;

static PyObject *inst_dict_of(PyObject *obj, cap_dcache *c)
{
    if (c && c->gen == check_gen)
        return c->dict;
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (!d)
        PyErr_Clear();
    else
        Py_DECREF(d); /* the object keeps its dict */
    if (c) {
        c->gen = check_gen;
        c->dict = d;
    }
    return d;
}

/* ---- dict reads at a remembered position ----------------------------------------------
 *
 * Most of a hit is dict reads: module attributes, parameters, hook dicts. A
 * hint remembers the entry index where the key was found last time; at that
 * index PyDict_Next yields the first live entry, and if that entry holds the
 * very key object we look up (the source keeps it alive, so its address
 * cannot be reused), it is the dict's one entry for that key: its value is
 * exactly what a lookup returns, whatever was written since. Anything else
 * (a resize, a deletion before it, an equal but distinct key) falls back to
 * the lookup, which re-learns the position; a hint that keeps missing is
 * given up so that a dict rebuilt on every call costs one lookup, not a scan.
 */
enum { HINT_MAX_MISSES = 4 };

/* The index of the entry holding exactly key, or -1. */
static Py_ssize_t dict_pos(PyObject *d, PyObject *key)
{
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v))
        if (k == key)
            return pos - 1;
    return -1;
}

static PyObject *dict_get(PyObject *d, PyObject *key, cap_hint *h)
{
    if (h && h->pos >= 0) {
        Py_ssize_t pos = h->pos;
        PyObject *k, *v;
        if (PyDict_Next(d, &pos, &k, &v) && k == key)
            return v;
        h->pos = -1;
        h->misses++;
    }
    if (!PyUnicode_CheckExact(key))
        check_gen++; /* comparing other keys may run Python code */
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (!v) {
        PyErr_Clear();
        return NULL;
    }
    if (h && h->pos < 0 && h->misses < HINT_MAX_MISSES) {
        Py_ssize_t p = dict_pos(d, key);
        if (p >= 0 && p < INT32_MAX)
            h->pos = (int32_t)p;
        else
            h->misses++;
    }
    return v;
}

static PyObject *inst_get(PyObject *obj, PyObject *key, int sub, cap_hint *hints, cap_dcache *c)
{
    static PyObject **sub_keys[3] = {&cap_T.s_parameters, &cap_T.s_buffers, &cap_T.s_modules};
    PyObject *d = inst_dict_of(obj, c);
    if (!d)
        return NULL;
    if (sub < 0)
        return dict_get(d, key, hints); /* the dict keeps its values */
    PyObject *s;
    if (c && c->sub_gen[sub] == check_gen) {
        s = c->sub[sub];
    } else {
        s = dict_get(d, *sub_keys[sub], hints ? &hints[1] : NULL);
        if (s && !PyDict_Check(s))
            s = NULL;
        if (c) {
            c->sub[sub] = s;
            c->sub_gen[sub] = check_gen;
        }
    }
    return s ? dict_get(s, key, hints) : NULL;
}

/* The value of source i; *owned when it is a new reference. NULL when it
 * cannot be reached (a missing attribute or key): the guards fail. */
static PyObject *eval_source(const cap_source *s, PyObject **vals, cap_frame **frames, int nframes,
                             bool *owned, cap_hint *hints, cap_dcache *dc)
{
    *owned = false;
    PyObject *p = s->parent >= 0 ? vals[s->parent] : NULL;
    cap_dcache *c = s->parent >= 0 && dc ? &dc[s->parent] : NULL;
    if (s->parent >= 0 && !p)
        return NULL;
    PyObject *v = NULL;
    switch (s->kind) {
    case CAP_S_LOCAL:
        return s->frame < nframes && s->index < frames[s->frame]->code->nlp
                   ? frames[s->frame]->lp[s->index] : NULL;
    case CAP_S_STACK:
        return s->frame < nframes && s->index < frames[s->frame]->sp ? frames[s->frame]->stack[s->index]
                                                                     : NULL;
    case CAP_S_FUNC:
        return s->frame < nframes ? frames[s->frame]->func : NULL;
    case CAP_S_RETA:
        return s->frame < nframes ? frames[s->frame]->ret_a : NULL;
    case CAP_S_CONST:
        return s->key;
    case CAP_S_INSTDICT:
        if ((v = inst_get(p, s->key, -1, hints, c)))
            return v;
        /* Modules and other objects without a plain dict entry: getattr. */
        /* fallthrough */
    case CAP_S_ATTR:
        check_gen++; /* getattr may run Python code */
        v = PyObject_GetAttr(p, s->key);
        if (!v)
            PyErr_Clear();
        *owned = v != NULL;
        return v;
    case CAP_S_MODPARAM:
        return inst_get(p, s->key, SUB_PARAMS, hints, c);
    case CAP_S_MODBUF:
        return inst_get(p, s->key, SUB_BUFFERS, hints, c);
    case CAP_S_MODCHILD:
        return inst_get(p, s->key, SUB_MODULES, hints, c);
    case CAP_S_ITEM:
        if (PyDict_Check(p))
            return dict_get(p, s->key, hints);
        check_gen++;
        v = PyObject_GetItem(p, s->key);
        if (!v)
            PyErr_Clear();
        *owned = v != NULL;
        return v;
    case CAP_S_INDEX:
        if (PyList_Check(p))
            return s->index < PyList_Size(p) ? PyList_GetItem(p, s->index) : NULL;
        if (PyTuple_Check(p))
            return s->index < PyTuple_Size(p) ? PyTuple_GetItem(p, s->index) : NULL;
        return NULL;
    case CAP_S_ITERSEQ:
        return Py_TYPE(p) == cap_iter_type ? ((cap_iter *)p)->seq : NULL;
    case CAP_S_ITERREST:
        v = cap_iter_rest(p);
        PyErr_Clear();
        *owned = v != NULL;
        return v;
    case CAP_S_CELL:
        v = cap_cell_get(p);
        PyErr_Clear();
        *owned = v != NULL;
        return v;
    case CAP_S_TYPE:
        return (PyObject *)Py_TYPE(p);
    case CAP_S_FROM_NUMPY:
        v = cap_ndarray_tensor(p, s->key);
        PyErr_Clear();
        *owned = v != NULL;
        return v;
    }
    return NULL;
}

static bool hooks_empty(PyObject *mod, cap_hint *hints, cap_dcache *c)
{
    PyObject *keys[4] = {cap_T.s_forward_hooks, cap_T.s_forward_pre_hooks, cap_T.s_backward_hooks,
                         cap_T.s_backward_pre_hooks};
    PyObject *d = inst_dict_of(mod, c);
    if (!d)
        return false;
    bool empty = true;
    for (int i = 0; i < 4 && empty; i++) {
        PyObject *h = dict_get(d, keys[i], hints ? &hints[i] : NULL);
        if (h && !PyDict_Check(h))
            check_gen++; /* len() may run Python code */
        empty = !h || (PyDict_Check(h) ? PyDict_Size(h) == 0 : PyObject_Size(h) == 0);
    }
    PyErr_Clear();
    return empty;
}

static int keys_equal(PyObject *d, PyObject *keys)
{
    if (!PyDict_Check(d) || PyDict_Size(d) != PyTuple_Size(keys))
        return 0;
    if (PyObject_TypeCheck(d, (PyTypeObject *)cap_P.OrderedDict)) {
        PyObject *now = cap_stored_keys(d);
        int r = now ? PyObject_RichCompareBool(now, keys, Py_EQ) : -1;
        Py_XDECREF(now);
        PyErr_Clear();
        return r == 1;
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        PyObject *e = PyTuple_GetItem(keys, i++);
        if (k != e && PyObject_RichCompareBool(k, e, Py_EQ) != 1) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* Whether set s iterates as the tuple items: each item of the same type
 * and equal (equal sets may iterate in other orders). */
static int iterates_as(PyObject *s, PyObject *items)
{
    if (!(PySet_CheckExact(s) || PyFrozenSet_CheckExact(s)) || PySet_Size(s) != PyTuple_Size(items))
        return 0;
    PyObject *it = PyObject_GetIter(s), *v;
    int same = it != NULL;
    for (Py_ssize_t i = 0; same && (v = PyIter_Next(it)); i++) {
        PyObject *e = PyTuple_GetItem(items, i);
        same = v == e || (Py_TYPE(v) == Py_TYPE(e) && PyObject_RichCompareBool(v, e, Py_EQ) == 1);
        Py_DECREF(v);
    }
    Py_XDECREF(it);
    PyErr_Clear();
    return same;
}

static bool plain_value(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    return t == &PyLong_Type || t == &PyFloat_Type || t == &PyUnicode_Type || t == &PyBool_Type ||
           v == Py_None || t == &PyTuple_Type;
}

/* A method guard: v's class has g's function under g's name, and v's
 * instance dict does not shadow it (unless the caller knows, see trusted
 * module state). With a memo, a class seen before at the same version tag
 * passes without a lookup; a lookup may run Python code (a descriptor's
 * __get__), so it starts a new dict-cache generation. */
static int class_attr_ok(const cap_guard *g, PyObject *v, cap_clsmemo *m, bool unshadowed,
                         cap_dcache *c)
{
    PyObject *name = PyTuple_GetItem(g->obj, 0);
    if (!unshadowed) {
        PyObject *d = inst_dict_of(v, c);
        if (d && dict_get(d, name, NULL))
            return 0;
    }
    PyTypeObject *t = Py_TYPE(v);
    if (m && m->type == t && m->tag && cap_type_version(t) == m->tag)
        return 1;
    check_gen++;
    PyObject *f = PyObject_GetAttr((PyObject *)t, name);
    int same = f && f == PyTuple_GetItem(g->obj, 1);
    Py_XDECREF(f);
    PyErr_Clear();
    /* Only a plain metaclass's lookup is the class's MRO alone. */
    if (m)
        *m = (cap_clsmemo){same && Py_TYPE((PyObject *)t) == &PyType_Type ? t : NULL,
                           cap_type_version(t)};
    return same;
}

static int check_guard(const cap_guard *g, PyObject *v, cap_hint *hints, cap_dcache *c)
{
    if (g->kind != CAP_G_ID && g->kind != CAP_G_TYPE && g->kind != CAP_G_NOHOOKS &&
        g->kind != CAP_G_CLASSATTR && !(g->kind == CAP_G_EQ && plain_value(v)))
        check_gen++; /* the check may run Python code */
    switch (g->kind) {
    case CAP_G_ID:
        return v == g->obj;
    case CAP_G_TYPE:
        return (PyObject *)Py_TYPE(v) == g->obj;
    case CAP_G_EQ: {
        if (v == g->obj)
            return 1;
        if (Py_TYPE(v) != Py_TYPE(g->obj))
            return 0;
        int r = PyObject_RichCompareBool(v, g->obj, Py_EQ);
        if (r < 0)
            PyErr_Clear();
        return r == 1;
    }
    case CAP_G_LEN: {
        Py_ssize_t n = cap_stored_len(v);
        if (n < 0)
            PyErr_Clear();
        return n == g->n;
    }
    case CAP_G_KEYS:
        return keys_equal(v, g->obj);
    case CAP_G_ORDER:
        return iterates_as(v, g->obj);
    case CAP_G_ITERPOS: {
        if (Py_TYPE(v) != cap_iter_type)
            return 0;
        cap_iter *it = (cap_iter *)v;
        if (it->i != g->n || (it->seq == NULL) != (g->obj != Py_None))
            return 0;
        if (it->seq)
            return 1;
        long long start, step;
        Py_ssize_t n;
        if (!PyArg_ParseTuple(g->obj, "LLn", &start, &step, &n)) {
            PyErr_Clear();
            return 0;
        }
        return it->start == start && it->step == step && it->n == n;
    }
    case CAP_G_TENSOR:
        return cap_tmeta_check(v, g->tm, NULL, 0);
    case CAP_G_HASATTR: {
        int r = PyObject_HasAttr(v, g->obj);
        return r == (int)g->n;
    }
    case CAP_G_DICT_HAS: {
        int r = PyDict_Check(v) ? PyDict_Contains(v, g->obj) : PySequence_Contains(v, g->obj);
        if (r < 0)
            PyErr_Clear();
        return r == (int)g->n;
    }
    case CAP_G_NOHOOKS:
        return hooks_empty(v, hints, c);
    case CAP_G_CLASSATTR:
        return class_attr_ok(g, v, NULL, false, c);
    }
    return 0;
}

static int check_global(const cap_guard *g)
{
    switch (g->kind) {
    case CAP_G_GRAD: {
        PyObject *r = PyObject_CallNoArgs(cap_T.is_grad_enabled);
        int on = r == Py_True;
        Py_XDECREF(r);
        PyErr_Clear();
        return on == (int)g->n;
    }
    case CAP_G_GLOBAL_HOOKS:
        return cap_global_hooks() == (g->n != 0);
    case CAP_G_AUTOCAST: {
        cap_amp a;
        if (cap_amp_read(&a) < 0) {
            PyErr_Clear();
            return 0;
        }
        return cap_amp_pack(&a) == g->n;
    }
    }
    return 0;
}

/* ---- size relations ------------------------------------------------------------------ */

/* Size d of the tensor v, or -1. */
static int64_t size_of(PyObject *v, int d)
{
    PyObject *shape = v ? PyObject_GetAttr(v, cap_T.s_shape) : NULL;
    PyObject *n =
        shape && PyTuple_Check(shape) && d < PyTuple_Size(shape) ? PyTuple_GetItem(shape, d) : NULL;
    int64_t r = n ? PyLong_AsLongLong(n) : -1;
    Py_XDECREF(shape);
    PyErr_Clear();
    return r;
}

/* The symbols' sizes in this call (their tensors passed their guards). */
static bool bind_symbols(const cap_entry *e, PyObject **vals, ptc_bindings *b)
{
    b->n = 0;
    for (int i = 0; i < e->syms.n; i++) {
        int64_t v = size_of(vals[e->syms.src[i]], e->syms.dim[i]);
        if (e->syms.div[i] > 1 && v > 0)
            v /= e->syms.div[i];
        int64_t plus = 0; /* over earlier symbols, bound by now */
        if (e->syms.plus[i].sym && ptc_dim_eval(e->syms.plus[i], b, &plus, NULL) < 0)
            return false;
        if (v >= 0)
            v += plus - e->syms.off[i]; /* may go below 0: the symbol's range guard fails */
        if (v < 0 || ptc_bindings_set(b, cap_sym_name(i), v) < 0)
            return false;
    }
    return true;
}

static bool relation_holds(int64_t v, int rel)
{
    switch (rel) {
    case Py_LT:
        return v < 0;
    case Py_LE:
        return v <= 0;
    case Py_EQ:
        return v == 0;
    case Py_NE:
        return v != 0;
    case Py_GT:
        return v > 0;
    default:
        return v >= 0;
    }
}

static bool size_guard_ok(const cap_guard *g, PyObject **vals, const ptc_bindings *b)
{
    int64_t v;
    ptc_error err;
    if (g->kind == CAP_G_SYMSIZE)
        return size_of(vals[g->src], (int)(g->n & 255)) == b->values[g->n >> 8];
    return ptc_dim_eval(g->expr, b, &v, &err) == 0 && relation_holds(v, (int)g->n);
}

/* SYM and SYMSIZE guards, checked in C over the symbols' sizes. */
static int check_sizes(cap_entry *e, PyObject **vals, int *failed)
{
    ptc_bindings b;
    bool bound = bind_symbols(e, vals, &b);
    for (int gi = 0; gi < e->nguards; gi++) {
        const cap_guard *g = &e->guards[gi];
        if ((g->kind == CAP_G_SYM || g->kind == CAP_G_SYMSIZE) &&
            (!bound || !size_guard_ok(g, vals, &b))) {
            *failed = gi;
            return 0;
        }
    }
    return 1;
}

/* ---- tensor guards in one call ----------------------------------------------------- */

/* torch._C._dynamo.guards.TensorGuards checks type, dtype, device, sizes,
 * strides, requires_grad and dispatch keys of many tensors in C++; ptc builds
 * one per entry from the tensors of its first hit (sizes and strides static;
 * strides of size-1 dims unchecked, as ptc's own guard). */
static PyObject *tensor_guards_type(void)
{
    static PyObject *type;
    static bool tried;
    if (!tried) {
        tried = true;
        type = cap_import_path("torch._C._dynamo.guards.TensorGuards");
        PyErr_Clear();
    }
    return type;
}

static bool module_tensor(const cap_entry *e, const cap_guard *g)
{
    return g->kind == CAP_G_TENSOR && cap_source_module_tensor(e->src[g->src].kind);
}

/* Tensor guards TensorGuards checks: not those of module tensors (see
 * param_seen), nor those with symbolic sizes (contiguity instead of strides). */
static bool batched(const cap_entry *e, const cap_guard *g)
{
    return g->kind == CAP_G_TENSOR && !module_tensor(e, g) && !g->tm->dyn;
}

static void build_tensor_guards(cap_entry *e, PyObject **vals)
{
    e->tg_tried = true;
    PyObject *type = tensor_guards_type();
    int n = 0;
    for (int i = 0; i < e->nguards; i++)
        n += batched(e, &e->guards[i]);
    if (!type || n == 0)
        return;
    PyObject *args = PyTuple_New(n), *sizes = PyList_New(n), *strides = PyList_New(n);
    int *gi = malloc(sizeof(int) * (size_t)n);
    for (int i = 0, k = 0; args && sizes && strides && gi && i < e->nguards; i++) {
        const cap_guard *g = &e->guards[i];
        if (!batched(e, g))
            continue;
        if (!vals[g->src] || (PyObject *)Py_TYPE(vals[g->src]) != g->tm->type)
            goto done; /* subclasses keep the per-tensor path */
        gi[k] = i;
        PyTuple_SetItem(args, k, Py_NewRef(vals[g->src]));
        PyObject *sz = PyList_New(g->tm->ndim), *st = PyList_New(g->tm->ndim);
        for (int d = 0; sz && st && d < g->tm->ndim; d++) {
            PyList_SetItem(sz, d, PyLong_FromLongLong(g->tm->sizes[d]));
            PyList_SetItem(st, d, g->tm->sizes[d] <= 1 ? Py_NewRef(Py_None) : PyLong_FromLongLong(g->tm->strides[d]));
        }
        PyList_SetItem(sizes, k, sz);
        PyList_SetItem(strides, k, st);
        k++;
    }
    PyObject *kw = args && sizes && strides
                       ? Py_BuildValue("{s:O,s:O}", "dynamic_dims_sizes", sizes, "dynamic_dims_strides", strides)
                       : NULL;
    PyObject *tg = kw ? PyObject_Call(type, args, kw) : NULL;
    Py_XDECREF(kw);
    if (tg) {
        /* It must accept the tensors it was made from. */
        PyObject *chk = PyObject_GetAttrString(tg, "check");
        PyObject *ok = chk ? PyObject_Call(chk, args, NULL) : NULL;
        if (ok == Py_True) {
            e->tensor_guards = chk;
            chk = NULL;
            e->tensor_gi = gi;
            e->ntensor = n;
            gi = NULL;
        }
        Py_XDECREF(chk);
        Py_XDECREF(ok);
        Py_DECREF(tg);
    }
done:
    PyErr_Clear();
    free(gi);
    Py_XDECREF(args);
    Py_XDECREF(sizes);
    Py_XDECREF(strides);
}

/* All tensor guards at once; on a miss, the per-tensor path names the first
 * failing one (for the recompile message). */
static int check_tensors(cap_entry *e, PyObject **vals, int *failed)
{
    PyObject *args = PyTuple_New(e->ntensor);
    for (int k = 0; args && k < e->ntensor; k++)
        PyTuple_SetItem(args, k, Py_NewRef(vals[e->guards[e->tensor_gi[k]].src]));
    PyObject *ok = args ? PyObject_Call(e->tensor_guards, args, NULL) : NULL;
    Py_XDECREF(args);
    int pass = ok == Py_True;
    Py_XDECREF(ok);
    PyErr_Clear();
    if (pass)
        return 1;
    for (int k = 0; k < e->ntensor; k++) {
        const cap_guard *g = &e->guards[e->tensor_gi[k]];
        if (!check_guard(g, vals[g->src], NULL, NULL)) {
            *failed = e->tensor_gi[k];
            return 0;
        }
    }
    return 1; /* stricter than ptc's own guards (e.g. dispatch keys): still a hit */
}

/* ---- trusted module state ---------------------------------------------------------------
 *
 * With ptc.config.trust_module_state, nn.Module's attribute writes, hook
 * registrations and container edits bump cap_module_epoch (python/ptc/
 * _module_state.py wraps them). After a full check passes, the entry keeps
 * the values of its module-held sources (attributes found in a module's
 * instance dict, parameters, buffers, submodules, under a module whose
 * identity a guard checks) and marks the guards those values imply: is,
 * == on immutable values, module tensors (same object, as param_seen) and
 * "no hooks". While the epoch stays, a hit takes the kept values and skips
 * the marked guards; any other guard still runs on them. A method guard
 * skips only its half about the instance dict (no attribute shadows the
 * method): a class is not a module, so its half still runs. Only at the start
 * of a call: after a graph break, code of the call ran for real (traces
 * follow the wrapped methods, so a break inside one bumps nothing) and the
 * next segment is checked in full. Writes that go around nn.Module (its
 * __dict__, its _parameters dict, object.__setattr__) are not seen: man
 * ptc(7) lists them.
 *
 * Without the setting (or once the epoch moved), the same kept values serve
 * a hit when the dicts they were read from still have the versions they had
 * (snap_learn, typever.c): that sees every write, around nn.Module too.
 */
enum { TRUST_KEPT = 1, TRUST_ANCHOR = 2 };     /* per source */
enum { TRUST_SKIP = 1, TRUST_UNSHADOWED = 2 }; /* per guard */

uint64_t cap_module_epoch = 1;

/* A module whose writes go through nn.Module's (wrapped) methods. Types are
 * remembered for one learning pass (looking up __setattr__ walks the MRO). */
typedef struct type_memo {
    PyTypeObject *types[32];
    bool tracked[32];
    int n;
    PyObject *setattr, *delattr; /* nn.Module's */
} type_memo;

static bool tracked_module(PyObject *obj, type_memo *tm)
{
    static PyObject *s_setattr, *s_delattr;
    PyTypeObject *m = (PyTypeObject *)cap_T.Module, *t = obj ? Py_TYPE(obj) : NULL;
    if (!t || !PyObject_TypeCheck(obj, m))
        return false;
    for (int i = 0; i < tm->n; i++)
        if (tm->types[i] == t)
            return tm->tracked[i];
    if (!s_setattr && !(s_setattr = PyUnicode_InternFromString("__setattr__")))
        return PyErr_Clear(), false;
    if (!s_delattr && !(s_delattr = PyUnicode_InternFromString("__delattr__")))
        return PyErr_Clear(), false;
    if (!tm->setattr) {
        tm->setattr = cap_type_lookup(m, s_setattr);
        tm->delattr = cap_type_lookup(m, s_delattr);
    }
    bool tracked = tm->setattr && cap_type_lookup(t, s_setattr) == tm->setattr &&
                   cap_type_lookup(t, s_delattr) == tm->delattr;
    if (tm->n < 32) {
        tm->types[tm->n] = t;
        tm->tracked[tm->n++] = tracked;
    }
    return tracked;
}

static bool immutable_value(PyObject *v, int depth)
{
    PyTypeObject *t = Py_TYPE(v);
    if (v == Py_None || t == &PyBool_Type || t == &PyLong_Type || t == &PyFloat_Type ||
        t == &PyUnicode_Type || t == &PyBytes_Type)
        return true;
    if (t != &PyTuple_Type || depth > 4)
        return false;
    for (Py_ssize_t i = 0; i < PyTuple_Size(v); i++)
        if (!immutable_value(PyTuple_GetItem(v, i), depth + 1))
            return false;
    return true;
}

static bool module_held(const cap_entry *e, int i, PyObject **vals, const uint8_t *trust,
                        type_memo *tm)
{
    const cap_source *s = &e->src[i];
    if (s->parent < 0 || !vals[i] || !(trust[s->parent] & (TRUST_KEPT | TRUST_ANCHOR)) ||
        !tracked_module(vals[s->parent], tm))
        return false;
    switch (s->kind) {
    case CAP_S_INSTDICT: { /* found in the instance dict, not through getattr */
        PyObject *d = inst_dict_of(vals[s->parent], NULL);
        return d && dict_get(d, s->key, NULL) == vals[i];
    }
    case CAP_S_MODPARAM:
    case CAP_S_MODBUF:
    case CAP_S_MODCHILD:
        return true;
    }
    return false;
}

/* ---- the dicts behind kept values, by version ---- */

void cap_entry_snap_clear(cap_entry *e)
{
    for (int k = 0; k < e->nsnap; k++) {
        Py_XDECREF(e->snap[k].owner);
        Py_DECREF(e->snap[k].dict);
    }
    free(e->snap);
    e->snap = NULL;
    e->nsnap = 0;
}

static bool snap_add(cap_entry *e, int *cap, PyObject *owner, PyObject *dict)
{
    if (!dict || !PyDict_Check(dict))
        return false;
    if (e->nsnap == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        cap_snap *n = realloc(e->snap, sizeof *n * (size_t)*cap);
        if (!n)
            return false;
        e->snap = n;
    }
    e->snap[e->nsnap++] = (cap_snap){Py_XNewRef(owner), Py_NewRef(dict), cap_dict_version(dict)};
    return true;
}

/* What snap_learn recorded per source: its instance dict, the sub-dicts,
 * the hook dicts. */
enum { SNAP_DICT = 1, SNAP_SUB = 2 /* << sub */, SNAP_HOOKS = 16 };

static bool snap_module(cap_entry *e, int *cap, uint8_t *done, int i, PyObject *obj, int what)
{
    PyObject *d = inst_dict_of(obj, NULL);
    if (!d)
        return false;
    if (!(done[i] & SNAP_DICT)) {
        if (!snap_add(e, cap, obj, d))
            return false;
        done[i] |= SNAP_DICT;
    }
    if (what == SNAP_HOOKS && !(done[i] & SNAP_HOOKS)) {
        PyObject *keys[4] = {cap_T.s_forward_hooks, cap_T.s_forward_pre_hooks,
                             cap_T.s_backward_hooks, cap_T.s_backward_pre_hooks};
        for (int k = 0; k < 4; k++) {
            PyObject *h = dict_get(d, keys[k], NULL);
            if (h && !snap_add(e, cap, NULL, h))
                return false; /* not a dict: its emptiness has no version */
        }
        done[i] |= SNAP_HOOKS;
    } else if (what >= 0 && what < 3 && !(done[i] & (SNAP_SUB << what))) {
        static PyObject **sub_keys[3] = {&cap_T.s_parameters, &cap_T.s_buffers, &cap_T.s_modules};
        if (!snap_add(e, cap, NULL, dict_get(d, *sub_keys[what], NULL)))
            return false;
        done[i] |= (uint8_t)(SNAP_SUB << what);
    }
    return true;
}

/* Records the dicts that every kept value, every skipped "no hooks" guard
 * and every method guard's skipped shadow check read, with their versions
 * now (right after the full check that the kept values come from). Where
 * one cannot be recorded, there is no snapshot and only the epoch trusts. */
static void snap_learn(cap_entry *e, PyObject **vals)
{
    cap_entry_snap_clear(e);
    if (!cap_versions_known())
        return;
    uint8_t *done = calloc((size_t)e->nsrc + 1, 1);
    int cap = 0;
    bool ok = done != NULL;
    for (int i = 0; ok && i < e->nsrc; i++) {
        const cap_source *s = &e->src[i];
        if (!(e->trust[i] & TRUST_KEPT))
            continue;
        int what = s->kind == CAP_S_MODPARAM   ? SUB_PARAMS
                   : s->kind == CAP_S_MODBUF   ? SUB_BUFFERS
                   : s->kind == CAP_S_MODCHILD ? SUB_MODULES
                                               : -1;
        ok = snap_module(e, &cap, done, s->parent, vals[s->parent], what);
    }
    for (int gi = 0; ok && gi < e->nguards; gi++) {
        const cap_guard *g = &e->guards[gi];
        if (g->kind == CAP_G_NOHOOKS && e->trust[e->nsrc + gi] == TRUST_SKIP)
            ok = snap_module(e, &cap, done, g->src, vals[g->src], SNAP_HOOKS);
        else if (g->kind == CAP_G_CLASSATTR && e->trust[e->nsrc + gi] == TRUST_UNSHADOWED)
            ok = snap_module(e, &cap, done, g->src, vals[g->src], -1); /* no attribute shadows it */
    }
    free(done);
    PyErr_Clear();
    if (!ok || e->nsnap == 0)
        cap_entry_snap_clear(e);
}

static void trust_learn(cap_entry *e, PyObject **vals)
{
    size_t n = (size_t)e->nsrc + (size_t)e->nguards;
    if (!e->trust) {
        e->trust = calloc(n + 1, 1);
        e->kept = calloc((size_t)e->nsrc + 1, sizeof *e->kept);
        if (!e->trust || !e->kept) {
            free(e->trust);
            free(e->kept);
            e->trust = NULL;
            e->kept = NULL;
            return;
        }
    }
    uint8_t *trust = e->trust;
    type_memo tm = {.n = 0};
    memset(trust, 0, n);
    check_gen++;
    for (int gi = 0; gi < e->nguards; gi++)
        if (e->guards[gi].kind == CAP_G_ID && e->guards[gi].src >= 0)
            trust[e->guards[gi].src] |= TRUST_ANCHOR;
    for (int i = 0; i < e->nsrc; i++) {
        bool kept = module_held(e, i, vals, trust, &tm);
        if (kept)
            trust[i] |= TRUST_KEPT;
        Py_XSETREF(e->kept[i], kept ? Py_NewRef(vals[i]) : NULL);
    }
    for (int gi = 0; gi < e->nguards; gi++) {
        const cap_guard *g = &e->guards[gi];
        if (g->src < 0)
            continue;
        bool kept = trust[g->src] & TRUST_KEPT;
        bool module =
            (trust[g->src] & (TRUST_KEPT | TRUST_ANCHOR)) && tracked_module(vals[g->src], &tm);
        if ((kept && (g->kind == CAP_G_ID || (g->kind == CAP_G_EQ && immutable_value(g->obj, 0)) ||
                      (g->kind == CAP_G_TENSOR && module_tensor(e, g)))) ||
            (g->kind == CAP_G_NOHOOKS && module))
            trust[e->nsrc + gi] = TRUST_SKIP;
        else if (g->kind == CAP_G_CLASSATTR && module)
            trust[e->nsrc + gi] = TRUST_UNSHADOWED; /* the class may still change */
    }
    PyErr_Clear();
    e->trusted_epoch = cap_module_epoch;
    snap_learn(e, vals);
}

/* The per-guard memories a check keeps on the entry, made on its first check. */
static void alloc_check_caches(cap_entry *e)
{
    if (!e->param_seen)
        e->param_seen = calloc((size_t)e->nguards + 1, sizeof *e->param_seen);
    if (!e->clsmemo)
        e->clsmemo = calloc((size_t)e->nguards + 1, sizeof *e->clsmemo);
    if (!e->dcache)
        e->dcache = calloc((size_t)e->nsrc + 1, sizeof *e->dcache);
    if (!e->hints &&
        (e->hints = malloc(sizeof *e->hints * (2 * (size_t)e->nsrc + 4 * (size_t)e->nguards + 1))))
        for (int i = 0; i < 2 * e->nsrc + 4 * e->nguards; i++)
            e->hints[i] = (cap_hint){-1, 0};
}

/* Trusted module state: nothing was written to a module since the last full
 * check passed, so module-held values are the ones kept then. NULL when the
 * check must be full. */
static const uint8_t *trusted(cap_entry *e, bool call_start)
{
    return call_start && e->trust &&
                   ((cap_cfg.trust_module_state && e->trusted_epoch == cap_module_epoch) ||
                    (e->nsnap > 0 && cap_snap_valid(e->snap, e->nsnap)))
               ? e->trust
               : NULL;
}

/* Guard gi on its value v (NULL: none could be read). True also for the
 * guards checked later, all at once (batched tensors, identity, sizes) and
 * for those the trusted state implies. */
static bool guard_passes(cap_entry *e, int gi, PyObject *v, const uint8_t *trust, bool batch)
{
    const cap_guard *g = &e->guards[gi];
    cap_hint *guard_hints = e->hints ? e->hints + 2 * e->nsrc : NULL;
    if (trust && trust[e->nsrc + gi] == TRUST_SKIP)
        return true; /* implied by the kept value and the epoch */
    if (g->kind == CAP_G_CLASSATTR && e->clsmemo && v)
        return class_attr_ok(g, v, &e->clsmemo[gi],
                             trust && trust[e->nsrc + gi] == TRUST_UNSHADOWED,
                             e->dcache ? &e->dcache[g->src] : NULL);
    if (g->kind == CAP_G_TENSOR && e->param_seen && module_tensor(e, g) && v) {
        PyObject **seen = &e->param_seen[gi];
        bool pass = *seen == v || check_guard(g, v, NULL, NULL);
        if (pass && *seen != v)
            Py_XSETREF(*seen, Py_NewRef(v));
        return pass;
    }
    if (batch && batched(e, g) && v)
        return true; /* checked later, all at once */
    if (v && v == g->obj && (g->kind == CAP_G_ID || g->kind == CAP_G_EQ))
        return true; /* the common case, without a call */
    if (g->kind == CAP_G_SAME || g->kind == CAP_G_DISTINCT || g->kind == CAP_G_NOALIAS ||
        g->kind == CAP_G_SYM || g->kind == CAP_G_SYMSIZE)
        return true; /* after the tensors' own guards, which say more */
    return g->src < 0 ? check_global(g)
                      : v && check_guard(g, v, guard_hints ? &guard_hints[4 * gi] : NULL,
                                         e->dcache ? &e->dcache[g->src] : NULL);
}

/* The guards checked once every source was read: the tensors' in one batch,
 * argument identity, size relations. 1 pass, 0 fail (*failed), -1 error. */
static int check_after_sources(cap_entry *e, PyObject **vals, bool batch, int *failed)
{
    int ok = 1;
    if (batch)
        ok = check_tensors(e, vals, failed);
    else if (!e->tg_tried)
        build_tensor_guards(e, vals);
    /* one pass: the NOALIAS guards come after the identity ones (entry.c) */
    for (int gi = 0; ok == 1 && gi < e->nguards; gi++) {
        const cap_guard *g = &e->guards[gi];
        bool holds = g->kind == CAP_G_SAME || g->kind == CAP_G_DISTINCT
                         ? cap_identity_guard_ok(g, vals)
                     : g->kind == CAP_G_NOALIAS ? cap_noalias_guard_ok(g, vals)
                                                : true;
        if (!holds) {
            *failed = gi;
            ok = 0;
        }
    }
    if (ok == 1 && e->syms.n > 0)
        ok = check_sizes(e, vals, failed);
    return ok;
}

/* Learning costs a few full checks: where the epoch moves on every call (a
 * forward that writes a module attribute), learn ever more rarely. */
static void maybe_learn_trust(cap_entry *e, PyObject **vals)
{
    if (e->trust_wait > 0) {
        e->trust_wait--;
        return;
    }
    if (e->trust && !e->trust_used && e->trust_wasted < 10)
        e->trust_wasted++;
    else if (e->trust_used)
        e->trust_wasted = 0;
    e->trust_wait = (1u << e->trust_wasted) - 1;
    e->trust_used = false;
    trust_learn(e, vals);
}

int cap_entry_check(cap_entry *e, cap_frame **frames, int nframes, PyObject **vals, bool *owned,
                    int *failed)
{
    int gi = 0;
    check_gen++;
    /* Global-state guards (no source) are installed first by the tracer. */
    for (; gi < e->nguards && e->guards[gi].src < 0; gi++)
        if (!check_global(&e->guards[gi])) {
            *failed = gi;
            return 0;
        }
    bool batch = e->tensor_guards != NULL;
    alloc_check_caches(e);
    cap_hint *src_hints = e->hints;
    bool call_start = nframes == 1 && frames[0]->pc == 0;
    const uint8_t *trust = trusted(e, call_start);
    for (int i = 0; i < e->nsrc; i++) {
        if (e->src_needed && !e->src_needed[i]) {
            vals[i] = NULL;
            owned[i] = false;
            continue;
        }
        if (trust && (trust[i] & TRUST_KEPT)) {
            e->trust_used = true;
            vals[i] = e->kept[i];
            owned[i] = false;
        } else {
            vals[i] = eval_source(&e->src[i], vals, frames, nframes, &owned[i],
                                  src_hints ? &src_hints[2 * i] : NULL, e->dcache);
        }
        for (; gi < e->nguards && e->guards[gi].src <= i; gi++) {
            const cap_guard *g = &e->guards[gi];
            if (!guard_passes(e, gi, g->src >= 0 ? vals[g->src] : NULL, trust, batch)) {
                *failed = gi;
                for (int k = i + 1; k < e->nsrc; k++)
                    vals[k] = NULL, owned[k] = false;
                return 0;
            }
        }
    }
    for (; gi < e->nguards; gi++)
        if (!check_global(&e->guards[gi])) {
            *failed = gi;
            return 0;
        }
    int ok = check_after_sources(e, vals, batch, failed);
    if (ok == 1 && (cap_cfg.trust_module_state || cap_versions_known()) && call_start && !trust)
        maybe_learn_trust(e, vals);
    return ok;
}

void cap_entry_release_vals(cap_entry *e, PyObject **vals, bool *owned)
{
    for (int i = 0; i < e->nsrc; i++)
        if (owned[i])
            Py_CLEAR(vals[i]);
}

/* ---- describing guards ------------------------------------------------------------------ */

static const char *guard_names[] = {
#define X(id, s) s,
    CAP_GUARD_KINDS(X)
#undef X
};

static void repr_into(PyObject *o, char *buf, size_t size)
{
    PyObject *r = o ? PyObject_Repr(o) : NULL;
    const char *s = r ? PyUnicode_AsUTF8(r) : NULL;
    snprintf(buf, size, "%s", s ? s : "<missing>");
    if (strlen(buf) > 80)
        strcpy(buf + 77, "...");
    Py_XDECREF(r);
    PyErr_Clear();
}

void cap_guard_str(const cap_source *src, int nsrc, const cap_guard *g, char *buf, size_t size)
{
    char s[400] = "", v[200] = "";
    if (g->src >= 0)
        cap_source_str(src, nsrc, g->src, s, sizeof s);
    switch (g->kind) {
    case CAP_G_TENSOR:
        cap_tmeta_str(g->tm, v, sizeof v);
        snprintf(buf, size, "%s: tensor %s", s, v);
        return;
    case CAP_G_TYPE:
        snprintf(buf, size, "type(%s) is %s", s, cap_tpname((PyTypeObject *)g->obj));
        return;
    case CAP_G_ID:
        repr_into(g->obj, v, sizeof v);
        snprintf(buf, size, "%s is %s", s, v);
        return;
    case CAP_G_EQ:
        repr_into(g->obj, v, sizeof v);
        snprintf(buf, size, "%s == %s", s, v);
        return;
    case CAP_G_LEN:
        snprintf(buf, size, "len(%s) == %lld", s, (long long)g->n);
        return;
    case CAP_G_ITERPOS:
        snprintf(buf, size, "%s is a loop iterator at item %lld", s, (long long)g->n);
        return;
    case CAP_G_KEYS:
        repr_into(g->obj, v, sizeof v);
        snprintf(buf, size, "list(%s.keys()) == %s", s, v);
        return;
    case CAP_G_ORDER:
        repr_into(g->obj, v, sizeof v);
        snprintf(buf, size, "tuple(%s) == %s, in order", s, v);
        return;
    case CAP_G_HASATTR:
        snprintf(buf, size, "hasattr(%s, '%s') == %s", s, PyUnicode_AsUTF8(g->obj), g->n ? "True" : "False");
        return;
    case CAP_G_DICT_HAS:
        repr_into(g->obj, v, sizeof v);
        snprintf(buf, size, "(%s in %s) == %s", v, s, g->n ? "True" : "False");
        return;
    case CAP_G_NOHOOKS:
        snprintf(buf, size, "%s has no hooks", s);
        return;
    case CAP_G_CLASSATTR:
        repr_into(PyTuple_GetItem(g->obj, 1), v, sizeof v);
        snprintf(buf, size, "%s.%s is the method %s", s, PyUnicode_AsUTF8(PyTuple_GetItem(g->obj, 0)), v);
        return;
    case CAP_G_GRAD:
        snprintf(buf, size, "torch.is_grad_enabled() == %s", g->n ? "True" : "False");
        return;
    case CAP_G_SAME:
        cap_source_str(src, nsrc, (int)g->n, v, sizeof v);
        snprintf(buf, size, "%s is %s", s, v);
        return;
    case CAP_G_NOALIAS:
    case CAP_G_DISTINCT: {
        size_t k =
            (size_t)snprintf(buf, size,
                             g->kind == CAP_G_DISTINCT ? "distinct objects:"
                                                       : "written in place, sharing no memory:");
        for (Py_ssize_t i = 0; i < PyTuple_Size(g->obj) && k < size; i++) {
            cap_source_str(src, nsrc, (int)PyLong_AsLong(PyTuple_GetItem(g->obj, i)), v, sizeof v);
            k += (size_t)snprintf(buf + k, size - k, "%s %s", i ? "," : "", v);
        }
        return;
    }
    case CAP_G_GLOBAL_HOOKS:
        snprintf(buf, size, "global module hooks %s", g->n ? "present" : "absent");
        return;
    case CAP_G_SYM:
    case CAP_G_SYMSIZE:
        snprintf(buf, size, "%s", PyUnicode_AsUTF8(g->obj));
        return;
    case CAP_G_AUTOCAST: {
        char st[120];
        cap_amp_str(g->n, st, sizeof st);
        snprintf(buf, size, "autocast state == %s", st);
        return;
    }
    default:
        snprintf(buf, size, "%s %s", s, guard_names[g->kind]);
    }
}

/* "s0 = 1" for the symbols a size guard reads, and the size it compares. */
static void sizes_now(const cap_entry *e, const cap_guard *g, PyObject **vals, char *now,
                      size_t size)
{
    ptc_bindings b;
    if (!bind_symbols(e, vals, &b)) {
        snprintf(now, size, "sizes unreadable");
        return;
    }
    const char *names[CAP_MAX_SYMS];
    int n = g->kind == CAP_G_SYM ? ptc_dim_symbols(g->expr, names, 0, CAP_MAX_SYMS) : 0;
    if (g->kind == CAP_G_SYMSIZE)
        names[n++] = cap_sym_name((int)(g->n >> 8));
    size_t k = 0;
    now[0] = 0;
    for (int j = 0; j < n && k < size; j++) {
        int64_t v = 0;
        ptc_bindings_get(&b, names[j], &v);
        k += (size_t)snprintf(now + k, size - k, "%s%s = %lld", j ? ", " : "", names[j],
                              (long long)v);
    }
    if (g->kind == CAP_G_SYMSIZE && k < size)
        snprintf(now + k, size - k, ", size %lld",
                 (long long)size_of(vals[g->src], (int)(g->n & 255)));
}

/* What guard gi's value is now, in the guard's own terms. */
static void guard_now(const cap_entry *e, int gi, PyObject **vals, char *now, size_t size)
{
    const cap_guard *g = &e->guards[gi];
    PyObject *v = g->src >= 0 ? vals[g->src] : NULL;
    now[0] = 0;
    if (g->src >= 0 && !v) {
        snprintf(now, size, "missing");
    } else if (g->kind == CAP_G_TENSOR && v) {
        char why[300] = "unchanged";
        cap_tmeta_check(v, g->tm, why, sizeof why);
        snprintf(now, size, "%s", why);
    } else if (g->kind == CAP_G_SYM || g->kind == CAP_G_SYMSIZE) {
        sizes_now(e, g, vals, now, size);
    } else if (g->kind == CAP_G_GRAD) {
        snprintf(now, size, "%s", g->n ? "False" : "True");
    } else if (g->kind == CAP_G_NOALIAS) {
        snprintf(now, size, "a written one shares memory");
    } else if (g->kind == CAP_G_SAME || g->kind == CAP_G_DISTINCT) {
        snprintf(now, size, "%s",
                 g->kind == CAP_G_SAME ? "a different object" : "some the same object");
    } else if (g->kind == CAP_G_ITERPOS && v && Py_TYPE(v) == cap_iter_type) {
        snprintf(now, size, "at item %lld", (long long)((cap_iter *)v)->i);
    } else if (g->kind == CAP_G_AUTOCAST) {
        cap_amp a;
        if (cap_amp_read(&a) == 0)
            cap_amp_str(cap_amp_pack(&a), now, size);
        PyErr_Clear();
    } else if (g->kind == CAP_G_GLOBAL_HOOKS) {
        snprintf(now, size, "%s", g->n ? "absent" : "present");
    } else if (g->kind == CAP_G_TYPE) {
        snprintf(now, size, "%s", cap_tpname(Py_TYPE(v)));
    } else if (g->kind == CAP_G_LEN) {
        snprintf(now, size, "%zd", PyObject_Size(v));
        PyErr_Clear();
    } else if (g->kind == CAP_G_NOHOOKS) {
        snprintf(now, size, "hooks registered");
    } else if (g->kind == CAP_G_CLASSATTR && v) {
        /* The method the class has now, not the instance the guard reads. */
        PyObject *f = PyObject_GetAttr((PyObject *)Py_TYPE(v), PyTuple_GetItem(g->obj, 0));
        if (f && f == PyTuple_GetItem(g->obj, 1))
            snprintf(now, size, "shadowed by an instance attribute");
        else
            repr_into(f, now, size);
        Py_XDECREF(f);
        PyErr_Clear();
    } else if (v) {
        repr_into(v, now, size);
    }
}

void cap_guard_describe(const cap_entry *e, int gi, PyObject **vals, char *buf, size_t size)
{
    char what[600], now[300];
    cap_guard_str(e->src, e->nsrc, &e->guards[gi], what, sizeof what);
    guard_now(e, gi, vals, now, sizeof now);
    snprintf(buf, size, "%s (now %s)", what, now);
}

/* The value guard g expects, in the terms guard_now uses for the new one. */
static void guard_old(const cap_guard *g, char *old, size_t size)
{
    switch (g->kind) {
    case CAP_G_TENSOR: cap_tmeta_str(g->tm, old, size); return;
    case CAP_G_TYPE: snprintf(old, size, "%s", cap_tpname((PyTypeObject *)g->obj)); return;
    case CAP_G_LEN: snprintf(old, size, "%lld", (long long)g->n); return;
    case CAP_G_GRAD: snprintf(old, size, "%s", g->n ? "True" : "False"); return;
    case CAP_G_GLOBAL_HOOKS: snprintf(old, size, "%s", g->n ? "present" : "absent"); return;
    case CAP_G_NOHOOKS: snprintf(old, size, "no hooks"); return;
    case CAP_G_ITERPOS: snprintf(old, size, "at item %lld", (long long)g->n); return;
    case CAP_G_AUTOCAST: cap_amp_str(g->n, old, size); return;
    case CAP_G_HASATTR:
    case CAP_G_DICT_HAS: snprintf(old, size, "%s", g->n ? "True" : "False"); return;
    case CAP_G_CLASSATTR: repr_into(PyTuple_GetItem(g->obj, 1), old, size); return;
    case CAP_G_SAME: snprintf(old, size, "the same object"); return;
    case CAP_G_DISTINCT: snprintf(old, size, "distinct objects"); return;
    case CAP_G_NOALIAS: snprintf(old, size, "no memory shared"); return;
    case CAP_G_SYM:
    case CAP_G_SYMSIZE: snprintf(old, size, "%s", PyUnicode_AsUTF8(g->obj)); return;
    default: repr_into(g->obj, old, size);
    }
}

PyObject *cap_guard_info(const cap_entry *e, int gi, PyObject **vals)
{
    const cap_guard *g = &e->guards[gi];
    char what[600], src[400] = "", old[300], now[300], text[512] = "";
    const char *file = "";
    int line = 0, col = -1, endline = 0, endcol = -1;
    cap_guard_str(e->src, e->nsrc, g, what, sizeof what);
    if (g->src >= 0)
        cap_source_str(e->src, e->nsrc, g->src, src, sizeof src);
    guard_old(g, old, sizeof old);
    guard_now(e, gi, vals, now, sizeof now);
    if (g->kind == CAP_G_TENSOR) {
        /* cap_tmeta_check says "<now>, expected <old>": keep <now>. */
        char *cut = strstr(now, ", expected ");
        if (cut)
            *cut = 0;
    }
    if (g->code) {
        file = g->code->file;
        cap_code_pos(g->code, g->pc, &line, &col, &endline, &endcol);
        cap_source_line(file, line, text, sizeof text);
    }
    return Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:s}", "guard_kind", guard_names[g->kind],
                         "source", src, "expected", what, "old", old, "new", now, "file", file, "line",
                         line, "col", col + 1, "endcol", endline == line && endcol >= 0 ? endcol + 1 : 0,
                         "text", text);
}
