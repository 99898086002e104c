/* Small Python types a trace puts on the interpreter's stack (they belong
 * to tracing: each knows its trace and runs its callbacks traced): an iterator whose
 * position ptc can read and rebuild (over a list, tuple or range, forwards
 * or reversed), the lazy iterators map/filter/zip/enumerate and itertools'
 * starmap/filterfalse/takewhile/dropwhile/accumulate/islice/chain/zip_longest
 * made while tracing, and the __exit__ object of a with-block whose grad mode or
 * autocast state is modelled symbolically.
 *
 * Iterators stay lazy as in eager: a lazy iterator holds its function and
 * the iterators under it and advances them only when the program advances
 * it, so callbacks see the state of the moment. A generator expression is
 * one too: its frame runs traced in a nested run up to its next yield, and
 * is kept suspended in between. Both iterator types know
 * their eager equivalent (__reduce__, cap_eager_type): values the user gets
 * back, or that are live at a break, are rebuilt as the real builtin over
 * the rebuilt iterators under it. A consumer that breaks midway puts the
 * positions back (cap_iter_mark / cap_iter_rewind), because the instruction
 * then reruns for real from its start.
 *
 * The objects under an iterator are advanced as the interpreter advances
 * them, through its hook table (cap_hooks.iter, .next, .current,
 * .enter_frame): tracing what objects yield (objects.c) is a file above
 * this one, and uses these types.
 */
#include "capture/trace/trace.h"

#include <stdlib.h>
#include <string.h>
#include <structmember.h>

PyTypeObject *cap_iter_type, *cap_gradexit_type;

/* ---- iterator -------------------------------------------------------------------- */

static void iter_dealloc(PyObject *self)
{
    cap_iter *it = (cap_iter *)self;
    Py_XDECREF(it->seq);
    Py_XDECREF(it->owner);
    PyTypeObject *t = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(t, Py_tp_free))(self);
    Py_DECREF(t);
}

/* A snapshot of a dict's keys or a set's items is walked, so a change of
 * the container's size while walking raises what CPython's own iterator
 * raises (and goes on raising). */
void cap_iter_set_owner(cap_iter *it, PyObject *owner)
{
    Py_XSETREF(it->owner, Py_NewRef(owner));
    it->owner_len = PyObject_Size(owner);
}

/* The owner's size as the program sees it: a trace's writes to an outside
 * dict are pending until the graph ran (effects.c). */
static Py_ssize_t owner_size(cap_iter *it)
{
    PyObject *o = it->owner;
    if (it->T && it->T->I && cap_hooks.current(it->T->I, &o) != CAP_NEXT) {
        PyErr_Clear();
        o = it->owner;
    }
    return PyObject_Size(o);
}

static bool owner_changed(cap_iter *it)
{
    if (!it->owner || owner_size(it) == it->owner_len)
        return false;
    PyErr_Clear();
    PyErr_SetString(PyExc_RuntimeError, PyAnySet_Check(it->owner)
                                            ? "Set changed size during iteration"
                                            : "dictionary changed size during iteration");
    it->owner_len = -1;
    return true;
}

PyObject *cap_iter_next_raw(cap_iter *it)
{
    if (owner_changed(it))
        return NULL;
    if (!it->seq) {
        if (it->i >= it->n)
            return NULL;
        return PyLong_FromLongLong(it->start + it->step * (long long)it->i++);
    }
    Py_ssize_t n = PyList_Check(it->seq) ? PyList_Size(it->seq) : PyTuple_Size(it->seq);
    if (it->rev) {
        /* As list_reverseiterator: an index past a shrunk list ends it. */
        if (it->i < 0 || it->i >= n) {
            it->i = -1;
            return NULL;
        }
        PyObject *v = PyList_Check(it->seq) ? PyList_GetItem(it->seq, it->i) : PyTuple_GetItem(it->seq, it->i);
        it->i--;
        return Py_NewRef(v);
    }
    if (it->i >= n)
        return NULL;
    PyObject *v = PyList_Check(it->seq) ? PyList_GetItem(it->seq, it->i) : PyTuple_GetItem(it->seq, it->i);
    it->i++;
    return Py_NewRef(v);
}

static PyObject *iter_next(PyObject *self)
{
    return cap_iter_next_raw((cap_iter *)self);
}

static PyObject *iter_iter(PyObject *self)
{
    return Py_NewRef(self);
}

static PyObject *iter_length_hint(PyObject *self, PyObject *unused)
{
    cap_iter *it = (cap_iter *)self;
    Py_ssize_t n = !it->seq ? it->n : PyList_Check(it->seq) ? PyList_Size(it->seq) : PyTuple_Size(it->seq);
    if (it->rev)
        return PyLong_FromSsize_t(it->i >= 0 && it->i < n ? it->i + 1 : 0);
    return PyLong_FromSsize_t(n > it->i ? n - it->i : 0);
}

/* An iterator over a dict (its keys, values or items) or a set: eager's is
 * that container's own iterator, which ptc walks a snapshot of. */
static bool walks_owner(const cap_iter *it)
{
    PyObject *o = it->owner;
    return o && (PyDict_Check(o) || PyAnySet_Check(o) || PyDictKeys_Check(o) || PyDictValues_Check(o) ||
                 PyDictItems_Check(o));
}

/* _iter_at(container, n[, view]): iter(container) advanced n items, the
 * real iterator a walking one stands for; with view ("keys", "values",
 * "items"), over that view of the dict container. */
static PyObject *iter_at(PyObject *unused, PyObject *args)
{
    PyObject *container;
    Py_ssize_t n;
    const char *view = NULL;
    if (!PyArg_ParseTuple(args, "On|s", &container, &n, &view))
        return NULL;
    PyObject *walked = view ? PyObject_CallMethod(container, view, NULL) : Py_NewRef(container);
    PyObject *it = walked ? PyObject_GetIter(walked) : NULL;
    Py_XDECREF(walked);
    for (Py_ssize_t i = 0; it && i < n; i++) {
        PyObject *v = PyIter_Next(it);
        if (!v) {
            if (!PyErr_Occurred())
                PyErr_SetString(cap_InternalError, "ptc: a dict or set iterator past its container's end");
            Py_CLEAR(it);
        }
        Py_XDECREF(v);
    }
    return it;
}

PyObject *cap_view_dict(PyObject *view)
{
    static PyObject *referents;
    if (!referents && !(referents = cap_import_path("gc.get_referents")))
        return NULL;
    PyObject *r = PyObject_CallOneArg_compat(referents, view);
    PyObject *d = r && PyList_Check(r) && PyList_Size(r) == 1 ? PyList_GetItem(r, 0) : NULL;
    Py_XDECREF(r);
    PyErr_Clear();
    return d && PyDict_Check(d) ? d : NULL; /* the view keeps it alive */
}

static PyMethodDef iter_at_def = {"_iter_at", iter_at, METH_VARARGS, NULL};

/* The real iterator this one stands for: (iter or reversed, (seq,), position),
 * or the container's own iterator at that position. */
static PyObject *iter_reduce(PyObject *self, PyObject *unused)
{
    cap_iter *it = (cap_iter *)self;
    if (walks_owner(it) && PyObject_Size(it->owner) == it->owner_len) {
        static PyObject *fn;
        if (!fn && !(fn = PyCFunction_New(&iter_at_def, NULL)))
            return NULL;
        PyObject *o = it->owner;
        if (PyDict_Check(o) || PyAnySet_Check(o))
            return Py_BuildValue("O(On)", fn, o, it->i);
        PyObject *d = cap_view_dict(o);
        const char *view = PyDictKeys_Check(o) ? "keys" : PyDictValues_Check(o) ? "values" : "items";
        if (d)
            return Py_BuildValue("O(Ons)", fn, d, it->i, view);
    }
    PyObject *fn = PyDict_GetItemString(cap_P.builtins, it->rev ? "reversed" : "iter");
    if (it->seq)
        return Py_BuildValue("O(O)n", fn, it->seq, it->i);
    PyObject *r = PyObject_CallFunction((PyObject *)&PyRange_Type, "LLL", it->start,
                                       it->start + (long long)it->n * it->step, it->step);
    return r ? Py_BuildValue("O(N)n", fn, r, it->i) : NULL;
}

static PyMethodDef iter_methods[] = {
    {"__length_hint__", iter_length_hint, METH_NOARGS, NULL},
    {"__reduce__", iter_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef iter_members[] = {
    {"owner", T_OBJECT, offsetof(cap_iter, owner), READONLY, "the container whose size is checked"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot iter_slots[] = {
    {Py_tp_dealloc, iter_dealloc},
    {Py_tp_members, iter_members},
    {Py_tp_iter, iter_iter},
    {Py_tp_iternext, iter_next},
    {Py_tp_methods, iter_methods},
    {Py_tp_doc, "ptc: an iterator over a list, tuple or range whose position ptc tracks"},
    {0, NULL},
};

static PyType_Spec iter_spec = {"ptc._C.Iter", sizeof(cap_iter), 0, Py_TPFLAGS_DEFAULT, iter_slots};

PyObject *cap_iter_seq(PyObject *seq, int src, cap_trace *T)
{
    cap_iter *it = PyObject_New(cap_iter, cap_iter_type);
    if (!it)
        return NULL;
    it->seq = Py_NewRef(seq);
    it->i = 0;
    it->n = -1;
    it->start = it->step = 0;
    it->src = src;
    it->gen = false;
    it->rev = false;
    it->T = T;
    it->owner = NULL;
    it->owner_len = 0;
    return (PyObject *)it;
}

PyObject *cap_iter_range(long long start, long long step, Py_ssize_t n)
{
    cap_iter *it = PyObject_New(cap_iter, cap_iter_type);
    if (!it)
        return NULL;
    it->seq = NULL;
    it->i = 0;
    it->n = n;
    it->start = start;
    it->step = step;
    it->src = -1;
    it->gen = false;
    it->rev = false;
    it->T = NULL;
    it->owner = NULL;
    it->owner_len = 0;
    return (PyObject *)it;
}

/* ---- lazy iterators --------------------------------------------------------------- */

PyTypeObject *cap_lazy_type;

/* Each kind's eager class: a builtin, or one of itertools'. */
static const struct {
    const char *name;
    bool itertools;
} lazy_kinds[] = {
    [CAP_LAZY_MAP] = {"map", false},           [CAP_LAZY_FILTER] = {"filter", false},
    [CAP_LAZY_ZIP] = {"zip", false},           [CAP_LAZY_ENUMERATE] = {"enumerate", false},
    [CAP_LAZY_STARMAP] = {"starmap", true},    [CAP_LAZY_FILTERFALSE] = {"filterfalse", true},
    [CAP_LAZY_TAKEWHILE] = {"takewhile", true}, [CAP_LAZY_DROPWHILE] = {"dropwhile", true},
    [CAP_LAZY_ACCUMULATE] = {"accumulate", true}, [CAP_LAZY_ISLICE] = {"islice", true},
    [CAP_LAZY_CHAIN] = {"chain", true},        [CAP_LAZY_ZIP_LONGEST] = {"zip_longest", true},
    [CAP_LAZY_GEN] = {"generator", false},
};
_Static_assert(sizeof lazy_kinds / sizeof *lazy_kinds == CAP_LAZY_GEN + 1, "one row per lazy kind");

#define lazy_name(lz) (lazy_kinds[(lz)->kind].name)

/* The class eager code made for a lazy iterator of this kind (not a
 * generator's). Borrowed. */
static PyObject *lazy_class(int kind)
{
    static PyObject *classes[CAP_LAZY_GEN];
    if (!classes[kind] && lazy_kinds[kind].itertools) {
        char path[40];
        snprintf(path, sizeof path, "itertools.%s", lazy_kinds[kind].name);
        classes[kind] = cap_import_path(path);
    } else if (!classes[kind]) {
        classes[kind] = Py_XNewRef(PyDict_GetItemString(cap_P.builtins, lazy_kinds[kind].name));
    }
    return classes[kind];
}

/* ---- generators with clean-up code (generators.c tracks them) ------------------------ */

/* The live generators with clean-up code (borrowed: each leaves at its
 * dealloc), and the call sites of those freed while suspended in a try or
 * with block, since the last check. */
static cap_lazy **live;
static int nlive, caplive;
static PyObject *dropped;

/* Whether CPython would run code of g's when it frees g now. */
static bool cleanup_pending(const cap_lazy *g)
{
    return g->state == CAP_GEN_SUSPENDED && g->frame &&
           cap_code_cleanup_at(g->frame->code, cap_frame_yield_pc(g->frame), g->frame->globals,
                               g->frame->builtins);
}

int cap_t_generator_track(cap_lazy *g, PyObject *site)
{
    if (nlive == caplive) {
        int cap = caplive ? 2 * caplive : 16;
        cap_lazy **grown = realloc(live, sizeof *live * (size_t)cap);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        live = grown, caplive = cap;
    }
    g->site = Py_NewRef(site);
    live[nlive++] = g;
    return 0;
}

static void generator_freed(cap_lazy *g)
{
    for (int i = 0; i < nlive; i++)
        if (live[i] == g) {
            live[i] = live[--nlive];
            break;
        }
    if (!cleanup_pending(g))
        return;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (dropped || (dropped = PySet_New(NULL)))
        PySet_Add(dropped, g->site);
    PyErr_Clear();
    PyErr_Restore(t, v, tb);
}

int cap_t_generators_unfinished(PyObject *no_inline)
{
    Py_ssize_t before = PySet_Size(no_inline);
    for (int i = 0; i < nlive; i++)
        if (cleanup_pending(live[i]) && PySet_Add(no_inline, live[i]->site) < 0)
            return -1;
    PyObject *it = dropped ? PyObject_GetIter(dropped) : NULL, *site;
    while (it && (site = PyIter_Next(it))) {
        int rc = PySet_Add(no_inline, site);
        Py_DECREF(site);
        if (rc < 0)
            break;
    }
    Py_XDECREF(it);
    if (PyErr_Occurred())
        return -1;
    cap_t_generators_reset();
    return (int)(PySet_Size(no_inline) - before);
}

void cap_t_generators_reset(void)
{
    if (dropped)
        PySet_Clear(dropped);
}

static void lazy_dealloc(PyObject *self)
{
    cap_lazy *lz = (cap_lazy *)self;
    Py_XDECREF(lz->fn);
    Py_XDECREF(lz->its);
    Py_XDECREF(lz->kwnames);
    Py_XDECREF(lz->retval);
    Py_XDECREF(lz->count);
    if (lz->site)
        generator_freed(lz);
    Py_XDECREF(lz->site);
    cap_frame_free(lz->frame);
    PyTypeObject *t = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(t, Py_tp_free))(self);
    Py_DECREF(t);
}

/* Only reached when code ptc runs for real (a C function) consumes a lazy
 * iterator while tracing: its callbacks must be traced, so that call
 * breaks and reruns for real on the rebuilt builtin. */
static PyObject *lazy_next_real(PyObject *self)
{
    return cap_signal_break(CAP_B_OPAQUE_ITERATOR, "%s() consumed by a call ptc runs for real",
                            lazy_name((cap_lazy *)self));
}

/* A suspended generator expression of one for-loop holds only its
 * iterator (which is also its argument .0) and the None sent at the yield:
 * resuming it is running it afresh over that iterator. */
static bool gen_rebuildable(const cap_lazy *g)
{
    const cap_frame *f = g->frame;
    return g->state == CAP_GEN_READY || g->state == CAP_GEN_DONE ||
           (g->state == CAP_GEN_SUSPENDED && !g->genfunc && f && f->sp == 2 &&
            f->stack[0] == f->lp[0]);
}

/* A generator function's generator not started yet: the call that made
 * it, ptc._generator_call(fn, args, kwargs); a finished one: a generator
 * that yields nothing. */
static PyObject *genfunc_reduce(cap_lazy *g)
{
    static PyObject *call, *drained;
    if ((!call && !(call = cap_import_path("ptc._generator_call"))) ||
        (!drained && !(drained = cap_import_path("ptc._drained_generator"))))
        return NULL;
    if (g->state == CAP_GEN_DONE)
        return Py_BuildValue("O(O)", drained, cap_P.empty_tuple);
    Py_ssize_t nkw = g->kwnames ? PyTuple_Size(g->kwnames) : 0, n = PyTuple_Size(g->its) - nkw;
    PyObject *args = PyTuple_GetSlice(g->its, 0, n);
    PyObject *kwargs = args ? PyDict_New() : NULL;
    for (Py_ssize_t k = 0; kwargs && k < nkw; k++) {
        PyObject *name = PyTuple_GetItem(g->kwnames, k), *value = PyTuple_GetItem(g->its, n + k);
        if (PyDict_SetItem(kwargs, name, value) < 0)
            Py_CLEAR(kwargs);
    }
    PyObject *r = kwargs ? Py_BuildValue("O(OOO)", call, g->fn, args, kwargs) : NULL;
    Py_XDECREF(kwargs);
    Py_XDECREF(args);
    return r;
}

/* A generator expression as (its function, (its iterator,)): a fresh
 * generator, where it stands (gen_rebuildable); a finished one over an
 * empty iterator. */
static PyObject *gen_reduce(cap_lazy *g)
{
    if (!gen_rebuildable(g)) {
        PyErr_SetString(PyExc_TypeError,
                        g->genfunc ? "ptc: a generator suspended at a yield"
                                   : "ptc: a generator expression suspended inside a nested loop");
        return NULL;
    }
    if (g->genfunc)
        return genfunc_reduce(g);
    if (g->state == CAP_GEN_DONE) {
        PyObject *empty = PyObject_GetIter(cap_P.empty_tuple);
        return empty ? Py_BuildValue("O(N)", g->fn, empty) : NULL;
    }
    return Py_BuildValue("O(O)", g->fn, PyTuple_GetItem(g->its, 0));
}

/* accumulate as CPython's __reduce__ describes it: its total as the state;
 * an initial= not yielded yet chained in front of the iterator. */
static PyObject *accumulate_reduce(PyObject *cls, cap_lazy *lz)
{
    PyObject *it = PyTuple_GetItem(lz->its, 0), *fn = lz->fn ? lz->fn : Py_None;
    if (!lz->count)
        return Py_BuildValue("O(OO)", cls, it, fn);
    if (!lz->switched)
        return Py_BuildValue("O(OO)O", cls, it, fn, lz->count);
    static PyObject *chain;
    if (!chain && !(chain = cap_import_path("itertools.chain")))
        return NULL;
    PyObject *first = PyTuple_Pack(1, lz->count);
    PyObject *both = first ? PyObject_CallFunctionObjArgs(chain, first, it, NULL) : NULL;
    Py_XDECREF(first);
    return both ? Py_BuildValue("O(NO)", cls, both, fn) : NULL;
}

/* islice from where it stands: the items left to skip and to take counted
 * from its iterator's position; a finished one over nothing. */
static PyObject *islice_reduce(PyObject *cls, cap_lazy *lz)
{
    Py_ssize_t next, stop, step, taken;
    if (!PyArg_ParseTuple(lz->count, "nnnn", &next, &stop, &step, &taken))
        return NULL;
    if (lz->switched)
        return Py_BuildValue("O(Ni)", cls, PyObject_GetIter(cap_P.empty_tuple), 0);
    PyObject *end = stop < 0 ? Py_NewRef(Py_None) : PyLong_FromSsize_t(stop - taken);
    return end ? Py_BuildValue("O(OnNn)", cls, PyTuple_GetItem(lz->its, 0), next - taken, end, step)
               : NULL;
}

/* zip_longest over its iterators, an exhausted one as (); fillvalue= is a
 * keyword: through ptc._generator_call where it is given. */
static PyObject *zip_longest_reduce(PyObject *cls, cap_lazy *lz)
{
    Py_ssize_t n = PyTuple_Size(lz->its);
    PyObject *args = PyTuple_New(n);
    for (Py_ssize_t k = 0; args && k < n; k++) {
        PyObject *it = PyTuple_GetItem(lz->its, k);
        PyTuple_SetItem(args, k, Py_NewRef(it == Py_None ? cap_P.empty_tuple : it));
    }
    if (!args || !lz->fn)
        return args ? Py_BuildValue("ON", cls, args) : NULL;
    static PyObject *call;
    if (!call && !(call = cap_import_path("ptc._generator_call"))) {
        Py_DECREF(args);
        return NULL;
    }
    return Py_BuildValue("O(ON{sO})", call, cls, args, "fillvalue", lz->fn);
}

/* chain over the iterables it has not finished; from_iterable's over them
 * and then its iterator of iterables: chain.from_iterable(chain(rest,
 * source)), the inner chain one of ptc's. */
static PyObject *chain_reduce(PyObject *cls, cap_lazy *lz)
{
    PyObject *rest = PyTuple_GetSlice(lz->its, PyLong_AsSsize_t(lz->count), PY_SSIZE_T_MAX);
    if (!rest || !lz->from_source)
        return rest ? Py_BuildValue("ON", cls, rest) : NULL;
    PyObject *source = PyTuple_GetItem(lz->its, 0), *inner = NULL;
    if (PyTuple_Size(rest) == 0) {
        inner = Py_NewRef(source);
    } else {
        PyObject *its = PyTuple_Pack(2, rest, source), *zero = PyLong_FromLong(0);
        inner = its && zero ? cap_lazy_new(CAP_LAZY_CHAIN, NULL, its, zero, false) : NULL;
        Py_XDECREF(its);
        Py_XDECREF(zero);
    }
    Py_DECREF(rest);
    PyObject *from = inner ? PyObject_GetAttrString(cls, "from_iterable") : NULL;
    PyObject *r = from ? Py_BuildValue("O(O)", from, inner) : NULL;
    Py_XDECREF(from);
    Py_XDECREF(inner);
    return r;
}

/* The real builtin this one stands for, as pickle describes it. */
static PyObject *lazy_reduce(PyObject *self, PyObject *unused)
{
    cap_lazy *lz = (cap_lazy *)self;
    if (lz->kind == CAP_LAZY_GEN)
        return gen_reduce(lz);
    PyObject *cls = lazy_class(lz->kind);
    if (!cls)
        return NULL;
    switch (lz->kind) {
    case CAP_LAZY_TAKEWHILE:
    case CAP_LAZY_DROPWHILE:
        return Py_BuildValue("O(OO)O", cls, lz->fn, PyTuple_GetItem(lz->its, 0),
                             lz->switched ? Py_True : Py_False);
    case CAP_LAZY_ACCUMULATE:
        return accumulate_reduce(cls, lz);
    case CAP_LAZY_ISLICE:
        return islice_reduce(cls, lz);
    case CAP_LAZY_ZIP_LONGEST:
        return zip_longest_reduce(cls, lz);
    case CAP_LAZY_CHAIN:
        return chain_reduce(cls, lz);
    case CAP_LAZY_MAP:
    case CAP_LAZY_STARMAP:
    case CAP_LAZY_FILTERFALSE:
    case CAP_LAZY_FILTER: {
        PyObject *head = PyTuple_Pack(1, lz->fn);
        PyObject *args = head ? PySequence_Concat(head, lz->its) : NULL;
        Py_XDECREF(head);
        return args ? Py_BuildValue("ON", cls, args) : NULL;
    }
    case CAP_LAZY_ZIP:
        return lz->strict ? Py_BuildValue("OOO", cls, lz->its, Py_True) : Py_BuildValue("OO", cls, lz->its);
    default:
        return Py_BuildValue("O(OO)", cls, PyTuple_GetItem(lz->its, 0), lz->count);
    }
}

/* send, throw and close of a generator are traced (generators.c); code
 * ptc runs for real that calls them breaks, as lazy_next_real. */
static PyObject *gen_method_real(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args, (void)nargs;
    return cap_signal_break(CAP_B_OPAQUE_ITERATOR,
                            "a generator resumed by a call ptc runs for real");
}

/* The methods only a generator has: map and the rest have no send. */
static PyObject *lazy_getattro(PyObject *self, PyObject *name)
{
    if (((cap_lazy *)self)->kind != CAP_LAZY_GEN && PyUnicode_Check(name) &&
        (PyUnicode_CompareWithASCIIString(name, "send") == 0 ||
         PyUnicode_CompareWithASCIIString(name, "throw") == 0 ||
         PyUnicode_CompareWithASCIIString(name, "close") == 0)) {
        PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%U'",
                     lazy_name((cap_lazy *)self), name);
        return NULL;
    }
    return PyObject_GenericGetAttr(self, name);
}

static PyMethodDef lazy_methods[] = {
    {"__reduce__", lazy_reduce, METH_NOARGS, NULL},
    {"send", (PyCFunction)(void (*)(void))gen_method_real, METH_FASTCALL, NULL},
    {"throw", (PyCFunction)(void (*)(void))gen_method_real, METH_FASTCALL, NULL},
    {"close", (PyCFunction)(void (*)(void))gen_method_real, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot lazy_slots[] = {
    {Py_tp_dealloc, lazy_dealloc},
    {Py_tp_iter, iter_iter},
    {Py_tp_iternext, lazy_next_real},
    {Py_tp_methods, lazy_methods},
    {Py_tp_getattro, lazy_getattro},
    {Py_tp_doc, "ptc: a map, filter, zip, enumerate or itertools iterator made while tracing, "
                "advanced by the trace"},
    {0, NULL},
};

static PyType_Spec lazy_spec = {"ptc._C.LazyIter", sizeof(cap_lazy), 0, Py_TPFLAGS_DEFAULT, lazy_slots};

PyObject *cap_lazy_new(int kind, PyObject *fn, PyObject *its, PyObject *count, bool strict)
{
    cap_lazy *lz = PyObject_New(cap_lazy, cap_lazy_type);
    if (!lz)
        return NULL;
    lz->kind = kind;
    lz->fn = Py_XNewRef(fn);
    lz->its = Py_NewRef(its);
    lz->kwnames = NULL;
    lz->genfunc = false;
    lz->retval = NULL;
    lz->count = Py_XNewRef(count);
    lz->strict = strict;
    lz->from_source = false;
    lz->switched = false;
    lz->frame = NULL;
    lz->state = CAP_GEN_READY;
    lz->steps = 0;
    lz->site = NULL;
    return (PyObject *)lz;
}

void cap_gen_suspend(PyObject *gen, cap_frame *f)
{
    ((cap_lazy *)gen)->frame = f;
}

PyObject *cap_eager_type(PyObject *o)
{
    static PyObject *types[5]; /* iterators of list, tuple, range; reversed list, tuple */
    if (!types[0]) {
        PyObject *seqs[3] = {PyList_New(0), PyTuple_New(0), PyObject_CallFunction((PyObject *)&PyRange_Type, "i", 0)};
        PyObject *reversed = PyDict_GetItemString(cap_P.builtins, "reversed");
        for (int i = 0; i < 5; i++) {
            PyObject *s = seqs[i % 3];
            PyObject *v = !s ? NULL : i < 3 ? PyObject_GetIter(s) : PyObject_CallOneArg_compat(reversed, s);
            types[i] = v ? Py_NewRef((PyObject *)Py_TYPE(v)) : NULL;
            Py_XDECREF(v);
        }
        for (int i = 0; i < 3; i++)
            Py_XDECREF(seqs[i]);
        PyErr_Clear();
    }
    if (cap_is_tensor(o))
        return ((cap_tensor *)o)->fake_type;
    if (Py_TYPE(o) == cap_lazy_type)
        return ((cap_lazy *)o)->kind == CAP_LAZY_GEN
                   ? cap_P.GeneratorType
                   : lazy_class(((cap_lazy *)o)->kind);
    if (Py_TYPE(o) == cap_iter_type && walks_owner((cap_iter *)o)) {
        PyObject *real = PyObject_GetIter(((cap_iter *)o)->owner);
        PyObject *t = real ? (PyObject *)Py_TYPE(real) : NULL;
        Py_XDECREF(real); /* the type outlives it: a static builtin */
        PyErr_Clear();
        if (t)
            return t;
    }
    if (Py_TYPE(o) == cap_iter_type && !((cap_iter *)o)->gen) {
        cap_iter *it = (cap_iter *)o;
        int k = !it->seq ? 2 : (PyTuple_Check(it->seq) ? 1 : 0) + (it->rev ? 3 : 0);
        if (types[k])
            return types[k];
    }
    return (PyObject *)Py_TYPE(o);
}

/* ---- trace-time stepping ---------------------------------------------------------------- */

static void mark_one(cap_iter_marks *k, PyObject *o)
{
    if (!cap_is_ptc_iter(o))
        return;
    for (int j = 0; j < k->n; j++)
        if (k->m[j].it == o)
            return;
    if (k->n == (int)(sizeof k->m / sizeof *k->m)) {
        k->overflow = true;
        return;
    }
    int j = k->n++;
    k->m[j].it = Py_NewRef(o);
    k->m[j].i = Py_TYPE(o) == cap_iter_type ? ((cap_iter *)o)->i : 0;
    k->m[j].count = Py_TYPE(o) == cap_lazy_type ? Py_XNewRef(((cap_lazy *)o)->count) : NULL;
    k->m[j].its = Py_TYPE(o) == cap_lazy_type ? Py_XNewRef(((cap_lazy *)o)->its) : NULL;
    k->m[j].switched = Py_TYPE(o) == cap_lazy_type && ((cap_lazy *)o)->switched;
    if (Py_TYPE(o) == cap_lazy_type && ((cap_lazy *)o)->kind == CAP_LAZY_GEN) {
        /* Put back as a fresh generator over its iterator (whose position
           is marked too), finished, or lost when neither describes it. */
        cap_lazy *g = (cap_lazy *)o;
        k->m[j].steps = g->steps;
        k->m[j].i = !gen_rebuildable(g) ? CAP_GEN_LOST : g->state == CAP_GEN_DONE ? CAP_GEN_DONE : CAP_GEN_READY;
    }
    if (Py_TYPE(o) == cap_lazy_type)
        for (Py_ssize_t i = 0; i < PyTuple_Size(((cap_lazy *)o)->its); i++)
            mark_one(k, PyTuple_GetItem(((cap_lazy *)o)->its, i));
}

void cap_iter_mark(cap_iter_marks *k, PyObject *const *objs, int n)
{
    k->n = 0;
    k->overflow = false;
    for (int i = 0; i < n; i++)
        mark_one(k, objs[i]);
}

/* Does a handler in the traced frames catch the pending exception (as
 * trace_unwind decides)? One that nothing catches becomes a break, and the
 * raising instruction reruns for real. */
static bool error_caught(cap_interp *I)
{
    if (PyErr_ExceptionMatches(cap_GraphBreak) || PyErr_ExceptionMatches(cap_InternalError))
        return false;
    for (cap_frame *f = I->frame; f; f = f->parent) {
        if (cap_code_handler(f->code, f->pc))
            return true;
        if (f->ret == cap_ret_sync || f == I->base)
            return false;
    }
    return false;
}

bool cap_t_reruns(cap_interp *I, int rc)
{
    return rc == CAP_BREAK || (rc == CAP_ERR && !error_caught(I));
}

int cap_iter_rewind(cap_interp *I, cap_iter_marks *k, int rc)
{
    bool back = cap_t_reruns(I, rc);
    for (int j = 0; j < k->n; j++) {
        PyObject *o = k->m[j].it;
        if (back && Py_TYPE(o) == cap_iter_type)
            ((cap_iter *)o)->i = k->m[j].i;
        if (back && Py_TYPE(o) == cap_lazy_type) {
            Py_XSETREF(((cap_lazy *)o)->count, Py_XNewRef(k->m[j].count));
            Py_XSETREF(((cap_lazy *)o)->its, Py_XNewRef(k->m[j].its));
            ((cap_lazy *)o)->switched = k->m[j].switched;
        }
        if (back && Py_TYPE(o) == cap_lazy_type && ((cap_lazy *)o)->kind == CAP_LAZY_GEN &&
            ((cap_lazy *)o)->steps != k->m[j].steps) {
            cap_lazy *g = (cap_lazy *)o;
            cap_frame_free(g->frame);
            g->frame = NULL;
            g->state = (uint8_t)k->m[j].i;
        }
        Py_XDECREF(k->m[j].count);
        Py_XDECREF(k->m[j].its);
        Py_DECREF(o);
    }
    k->n = 0;
    if (back && k->overflow) {
        PyErr_Clear();
        PyErr_SetString(cap_InternalError, "ptc: a break inside a chain of more than 32 iterators");
        return CAP_ERR;
    }
    return rc;
}

/* next(it) that finishes here: a Python __next__ runs in a nested run, and
 * its StopIteration is the end. */
int cap_t_next_sync(cap_interp *I, PyObject *it, PyObject **out)
{
    cap_frame *outer = I->frame;
    *out = NULL;
    int rc = cap_hooks.next(I, it, out);
    if (rc == CAP_FRAME)
        rc = cap_t_run_sync(I, outer, out);
    if (rc == CAP_ERR && PyErr_ExceptionMatches(PyExc_StopIteration)) {
        PyErr_Clear();
        *out = NULL;
        return CAP_NEXT;
    }
    return rc;
}

int cap_t_iter_sync(cap_interp *I, PyObject *obj, PyObject **out)
{
    cap_frame *outer = I->frame;
    *out = NULL;
    int rc = cap_hooks.iter(I, obj, out);
    return rc == CAP_FRAME ? cap_t_run_sync(I, outer, out) : rc;
}

/* The remaining items of anything iterable, as a new list; outside
 * containers' items keep their sources. NULL with CAP_BREAK when ptc cannot
 * enumerate it. */
PyObject *cap_t_materialize(cap_interp *I, PyObject *obj, int *rc)
{
    PyObject *it = NULL, *v = NULL, *list = PyList_New(0);
    /* A Python __iter__ (a user container, a MutableMapping) runs in a
       nested run: main turned its pushed frame into a break and left it on
       the stack, so list(m) returned m.__iter__()'s iterator. */
    *rc = cap_t_settle(I, I->frame, cap_hooks.iter(I, obj, &it), &it);
    if (*rc != CAP_NEXT) {
        Py_XDECREF(list);
        return NULL;
    }
    while ((*rc = cap_t_next_sync(I, it, &v)) == CAP_NEXT && v) {
        PyList_Append(list, v);
        Py_DECREF(v);
    }
    Py_DECREF(it);
    if (*rc != CAP_NEXT)
        Py_CLEAR(list);
    return list;
}

/* zip(strict=True) found argument k exhausted: as CPython, the others must
 * be exhausted too (k == 0 checks the rest; else the error names k). */
static int zip_strict_end(cap_interp *I, cap_lazy *lz, Py_ssize_t k)
{
    if (k > 0) {
        PyErr_Format(PyExc_ValueError, "zip() argument %zd is shorter than argument%s%zd", k + 1,
                     k == 1 ? " " : "s 1-", k);
        return CAP_ERR;
    }
    for (Py_ssize_t j = 1; j < PyTuple_Size(lz->its); j++) {
        PyObject *v = NULL;
        int rc = cap_t_next_sync(I, PyTuple_GetItem(lz->its, j), &v);
        if (rc != CAP_NEXT)
            return rc;
        if (v) {
            Py_DECREF(v);
            PyErr_Format(PyExc_ValueError, "zip() argument %zd is longer than argument%s%zd", j + 1,
                         j == 1 ? " " : "s 1-", j);
            return CAP_ERR;
        }
    }
    return CAP_NEXT;
}

/* One item from each iterator under lz, in order, as a tuple; NULL when
 * one of them is exhausted. */
static int next_items(cap_interp *I, cap_lazy *lz, PyObject **items)
{
    Py_ssize_t n = PyTuple_Size(lz->its);
    PyObject *t = PyTuple_New(n);
    *items = NULL;
    if (!t)
        return CAP_ERR;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *v = NULL;
        int rc = cap_t_next_sync(I, PyTuple_GetItem(lz->its, k), &v);
        if (rc == CAP_NEXT && !v && lz->strict)
            rc = zip_strict_end(I, lz, k);
        if (rc != CAP_NEXT || !v) {
            Py_DECREF(t);
            return rc;
        }
        PyTuple_SetItem(t, k, v);
    }
    *items = t;
    return CAP_NEXT;
}

/* The test of one item by filter, filterfalse, takewhile or dropwhile:
 * fn(v) (or v itself) must not be a tensor. */
static int filter_keeps(cap_interp *I, cap_lazy *lz, PyObject *v, int *keep)
{
    PyObject *r = NULL;
    int rc = lz->fn == Py_None ? (r = Py_NewRef(v), CAP_NEXT) : cap_t_call_sync(I, lz->fn, &v, 1, NULL, &r);
    if (rc != CAP_NEXT)
        return rc;
    if (cap_is_tensor(r)) {
        Py_DECREF(r);
        return cap_t_break(I->T, CAP_B_TENSOR_BOOL, "%s() on tensor values", lazy_name(lz));
    }
    *keep = PyObject_IsTrue(r);
    Py_DECREF(r);
    return *keep < 0 ? CAP_ERR : CAP_NEXT;
}

int cap_t_gen_run(cap_interp *I, cap_lazy *g, PyObject *sent, PyObject *thrown, PyObject **out)
{
    cap_trace *T = I->T;
    cap_frame *outer = I->frame;
    switch (g->state) {
    case CAP_GEN_DONE:
        return CAP_NEXT;
    case CAP_GEN_RUNNING:
        PyErr_SetString(PyExc_ValueError, "generator already executing");
        return CAP_ERR;
    case CAP_GEN_LOST:
        PyErr_SetString(cap_InternalError, "ptc: a generator expression advanced after its state was lost");
        return CAP_ERR;
    }
    if (outer->depth + 1 > I->max_depth)
        return cap_t_break(T, CAP_B_INLINE_DEPTH, "inlining deeper than %d", I->max_depth);
    cap_frame *f = g->frame;
    if (!f) {
        const char *why = NULL;
        f = cap_generator_frame(g->fn, g->its, g->kwnames, (PyObject *)g, &why);
        if (!f)
            return PyErr_Occurred() ? CAP_ERR
                                    : cap_t_break(T, CAP_B_GENERATOR, "generator (arguments)");
        if (cap_hooks.enter_frame(T, f) < 0) {
            cap_frame_free(f);
            return CAP_ERR;
        }
    } else if (sent) { /* what the yield evaluates to: YIELD_VALUE left None */
        Py_SETREF(f->stack[f->sp - 1], Py_NewRef(sent));
    }
    g->frame = NULL;
    g->state = CAP_GEN_RUNNING;
    g->steps++;
    cap_push_frame(I, f);
    if (thrown) { /* raised at the yield (the frame's start if it had not begun) */
        f->pc = cap_frame_yield_pc(f);
        PyErr_SetObject((PyObject *)Py_TYPE(thrown), thrown);
        I->throw_in = true;
    }
    PyObject *v = NULL;
    int rc = cap_t_run_sync(I, outer, &v);
    if (rc == CAP_NEXT && g->frame) { /* it yielded */
        g->state = CAP_GEN_SUSPENDED;
        *out = v;
        return CAP_NEXT;
    }
    g->state = CAP_GEN_DONE;
    Py_XSETREF(g->retval, v); /* what it returned: yield from's value */
    if (rc == CAP_ERR && PyErr_ExceptionMatches(PyExc_StopIteration)) {
        PyErr_Clear(); /* PEP 479 */
        PyErr_SetString(PyExc_RuntimeError, "generator raised StopIteration");
    }
    if (rc == CAP_BREAK) {
        const char *pre = "inside a callback: ";
        char inner[sizeof T->brk.detail];
        snprintf(inner, sizeof inner, "%s", strncmp(T->brk.detail, pre, strlen(pre)) == 0
                                                ? T->brk.detail + strlen(pre) : T->brk.detail);
        snprintf(T->brk.detail, sizeof T->brk.detail, "in a generator%s: %.440s",
                 g->genfunc ? "" : " expression", inner);
    }
    return rc;
}

int cap_t_gen_error(cap_interp *I, int rc)
{
    if (rc == CAP_ERR && !PyErr_ExceptionMatches(cap_InternalError) && !error_caught(I))
        return cap_trace_error(I);
    return rc;
}

/* Runs generator g up to its next yield (*out) or its end (*out NULL). An
 * exception it raises ends it: a traced except block of the consumer's
 * frames catches it, else the instruction advancing it reruns for real (a
 * break). */
static int gen_step(cap_interp *I, cap_lazy *g, PyObject **out)
{
    return cap_t_gen_error(I, cap_t_gen_run(I, g, NULL, NULL, out));
}

/* The next item of the one iterator under lz (*v NULL at its end). */
static int next_item(cap_interp *I, cap_lazy *lz, PyObject **v)
{
    return cap_t_next_sync(I, PyTuple_GetItem(lz->its, 0), v);
}

/* filter, filterfalse, takewhile and dropwhile: the next item their test
 * lets through. takewhile stops for good at the first that fails it;
 * dropwhile passes everything from the first that fails it. */
static int tested_step(cap_interp *I, cap_lazy *lz, PyObject **out)
{
    bool take = lz->kind == CAP_LAZY_TAKEWHILE, drop = lz->kind == CAP_LAZY_DROPWHILE;
    if (take && lz->switched)
        return CAP_NEXT;
    for (;;) {
        PyObject *v = NULL;
        int rc = next_item(I, lz, &v), keep = 0;
        if (rc != CAP_NEXT || !v)
            return rc;
        if (drop && lz->switched) {
            *out = v;
            return CAP_NEXT;
        }
        if ((rc = filter_keeps(I, lz, v, &keep)) != CAP_NEXT) {
            Py_DECREF(v);
            return rc;
        }
        if (lz->kind == CAP_LAZY_FILTERFALSE || drop)
            keep = !keep;
        if (drop && keep)
            lz->switched = true;
        if (take && !keep) {
            lz->switched = true;
            Py_DECREF(v);
            return CAP_NEXT;
        }
        if (keep) {
            *out = v;
            return CAP_NEXT;
        }
        Py_DECREF(v);
    }
}

/* map(fn, *its) calls fn on one item of each; starmap(fn, it) on the items
 * of one item. */
static int mapped_step(cap_interp *I, cap_lazy *lz, PyObject **out)
{
    PyObject *items = NULL;
    int rc = next_items(I, lz, &items);
    if (rc != CAP_NEXT || !items)
        return rc;
    if (lz->kind == CAP_LAZY_STARMAP) {
        PyObject *spread = cap_t_materialize(I, PyTuple_GetItem(items, 0), &rc);
        Py_SETREF(items, spread ? PyList_AsTuple(spread) : NULL);
        Py_XDECREF(spread);
        if (!items)
            return rc == CAP_NEXT ? CAP_ERR : rc;
    }
    int n = (int)PyTuple_Size(items);
    PyObject **args = PyMem_Malloc(sizeof *args * (size_t)(n + 1));
    for (int k = 0; args && k < n; k++)
        args[k] = PyTuple_GetItem(items, k);
    rc = args ? cap_t_call_sync(I, lz->fn, args, n, NULL, out) : (PyErr_NoMemory(), CAP_ERR);
    PyMem_Free(args);
    Py_DECREF(items);
    return rc;
}

/* accumulate: initial= first, then the running total, fn(total, v) (the
 * sum without fn). */
static int accumulate_step(cap_interp *I, cap_lazy *lz, PyObject **out)
{
    if (lz->switched) {
        lz->switched = false;
        *out = Py_NewRef(lz->count);
        return CAP_NEXT;
    }
    PyObject *v = NULL, *total = NULL;
    int rc = next_item(I, lz, &v);
    if (rc != CAP_NEXT || !v)
        return rc;
    if (!lz->count) {
        total = v;
    } else {
        static PyObject *add;
        if (!add && !(add = cap_import_path("operator.add")))
            rc = CAP_ERR;
        PyObject *args[2] = {lz->count, v};
        if (rc == CAP_NEXT)
            rc = cap_t_call_sync(I, lz->fn && lz->fn != Py_None ? lz->fn : add, args, 2, NULL, &total);
        Py_DECREF(v);
    }
    if (rc != CAP_NEXT)
        return rc;
    Py_XSETREF(lz->count, total);
    *out = Py_NewRef(total);
    return CAP_NEXT;
}

/* lz->its with item k replaced by v, or v appended for k == len(its) (a
 * reference taken): the tuple is replaced, so a mark taken before
 * (cap_iter_mark) still holds the old. */
static int replace_it(cap_lazy *lz, Py_ssize_t k, PyObject *v)
{
    Py_ssize_t n = PyTuple_Size(lz->its);
    PyObject *its = PyTuple_New(k == n ? n + 1 : n);
    if (its && k == n)
        PyTuple_SetItem(its, k, Py_NewRef(v));
    for (Py_ssize_t i = 0; its && i < n; i++)
        PyTuple_SetItem(its, i, Py_NewRef(i == k ? v : PyTuple_GetItem(lz->its, i)));
    Py_DECREF(v);
    if (!its)
        return CAP_ERR;
    Py_SETREF(lz->its, its);
    return CAP_NEXT;
}

/* islice, as CPython's islice_next: skip to the next index to give, stop
 * at stop, and let go of the iterator at the end. */
static int islice_step(cap_interp *I, cap_lazy *lz, PyObject **out)
{
    Py_ssize_t next, stop, step, taken;
    if (lz->switched)
        return CAP_NEXT;
    if (!PyArg_ParseTuple(lz->count, "nnnn", &next, &stop, &step, &taken))
        return CAP_ERR;
    int rc = CAP_NEXT;
    PyObject *v = NULL;
    while (taken < next && (rc = next_item(I, lz, &v)) == CAP_NEXT && v) {
        Py_CLEAR(v);
        taken++;
    }
    bool end = rc == CAP_NEXT && (taken < next || (stop >= 0 && taken >= stop));
    if (rc == CAP_NEXT && !end && (rc = next_item(I, lz, &v)) == CAP_NEXT)
        end = !v;
    if (v) {
        taken++;
        Py_ssize_t after = next + step;
        next = after < next || (stop >= 0 && after > stop) ? stop : after;
    }
    PyObject *state = Py_BuildValue("(nnnn)", next, stop, step, taken);
    if (!state) {
        Py_XDECREF(v);
        return CAP_ERR;
    }
    Py_SETREF(lz->count, state);
    lz->switched = end;
    *out = v;
    return rc;
}

/* chain.from_iterable: the next iterable from its[0] appended to its; at
 * the end of them, its[0] an empty iterator (CPython lets go of it). *end
 * is set when there is none. */
static int chain_pull(cap_interp *I, cap_lazy *lz, bool *end)
{
    PyObject *v = NULL;
    int rc = cap_t_next_sync(I, PyTuple_GetItem(lz->its, 0), &v);
    if (rc != CAP_NEXT)
        return rc;
    *end = !v;
    return v ? replace_it(lz, PyTuple_Size(lz->its), v)
             : replace_it(lz, 0, PyObject_GetIter(cap_P.empty_tuple));
}

/* chain: the items of each iterable in turn, iter() called on one when
 * chain reaches it, as CPython's chain_next. */
static int chain_step(cap_interp *I, cap_lazy *lz, PyObject **out)
{
    for (;;) {
        Py_ssize_t k = PyLong_AsSsize_t(lz->count);
        bool end = k >= PyTuple_Size(lz->its);
        int rc = end && lz->from_source ? chain_pull(I, lz, &end) : CAP_NEXT;
        if (rc != CAP_NEXT || end)
            return rc;
        if (!lz->switched) {
            PyObject *it = NULL;
            if ((rc = cap_t_iter_sync(I, PyTuple_GetItem(lz->its, k), &it)) != CAP_NEXT ||
                (rc = replace_it(lz, k, it)) != CAP_NEXT)
                return rc;
            lz->switched = true;
        }
        if ((rc = cap_t_next_sync(I, PyTuple_GetItem(lz->its, k), out)) != CAP_NEXT || *out)
            return rc;
        PyObject *after = PyLong_FromSsize_t(k + 1);
        if (!after)
            return CAP_ERR;
        Py_SETREF(lz->count, after);
        lz->switched = false;
    }
}

/* zip_longest, as CPython's: an exhausted iterator gives fillvalue from
 * then on (None in its place), and the end is when the last one runs out. */
static int zip_longest_step(cap_interp *I, cap_lazy *lz, PyObject **out)
{
    Py_ssize_t n = PyTuple_Size(lz->its), active = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        active += PyTuple_GetItem(lz->its, k) != Py_None;
    PyObject *t = active ? PyTuple_New(n) : NULL;
    if (!active)
        return CAP_NEXT;
    int rc = t ? CAP_NEXT : CAP_ERR;
    for (Py_ssize_t k = 0; rc == CAP_NEXT && k < n; k++) {
        PyObject *it = PyTuple_GetItem(lz->its, k), *v = NULL;
        if (it != Py_None && (rc = cap_t_next_sync(I, it, &v)) == CAP_NEXT && !v) {
            rc = replace_it(lz, k, Py_NewRef(Py_None));
            if (--active == 0)
                break;
        }
        if (rc == CAP_NEXT)
            PyTuple_SetItem(t, k, v ? v : Py_NewRef(lz->fn ? lz->fn : Py_None));
    }
    if (rc == CAP_NEXT && active)
        *out = Py_NewRef(t);
    Py_XDECREF(t);
    return rc;
}

static int lazy_step(cap_interp *I, cap_lazy *lz, PyObject **out)
{
    switch (lz->kind) {
    case CAP_LAZY_GEN:
        return gen_step(I, lz, out);
    case CAP_LAZY_MAP:
    case CAP_LAZY_STARMAP:
        return mapped_step(I, lz, out);
    case CAP_LAZY_FILTER:
    case CAP_LAZY_FILTERFALSE:
    case CAP_LAZY_TAKEWHILE:
    case CAP_LAZY_DROPWHILE:
        return tested_step(I, lz, out);
    case CAP_LAZY_ACCUMULATE:
        return accumulate_step(I, lz, out);
    case CAP_LAZY_ISLICE:
        return islice_step(I, lz, out);
    case CAP_LAZY_CHAIN:
        return chain_step(I, lz, out);
    case CAP_LAZY_ZIP_LONGEST:
        return zip_longest_step(I, lz, out);
    }
    PyObject *items = NULL;
    int rc = next_items(I, lz, &items);
    if (rc != CAP_NEXT || !items)
        return rc;
    if (lz->kind == CAP_LAZY_ZIP) {
        *out = items;
        return CAP_NEXT;
    }
    static PyObject *one; /* enumerate */
    if (!one)
        one = PyLong_FromLong(1);
    PyObject *next = one ? PyNumber_Add(lz->count, one) : NULL;
    *out = next ? PyTuple_Pack(2, lz->count, PyTuple_GetItem(items, 0)) : NULL;
    if (next)
        Py_SETREF(lz->count, next);
    Py_DECREF(items);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_t_lazy_next(cap_interp *I, cap_lazy *lz, PyObject **out)
{
    PyObject *self = (PyObject *)lz;
    cap_iter_marks marks;
    *out = NULL;
    if (lz->kind == CAP_LAZY_ZIP && PyTuple_Size(lz->its) == 0)
        return CAP_NEXT; /* zip() */
    cap_iter_mark(&marks, &self, 1);
    return cap_iter_rewind(I, &marks, lazy_step(I, lz, out));
}

bool cap_lazy_over_c_iterator(PyObject *o)
{
    if (Py_TYPE(o) != cap_lazy_type)
        return false;
    cap_lazy *lz = (cap_lazy *)o;
    if (lz->kind == CAP_LAZY_GEN && lz->genfunc)
        return false; /* its arguments, not iterators */
    for (Py_ssize_t i = 0; i < PyTuple_Size(lz->its); i++) {
        PyObject *it = PyTuple_GetItem(lz->its, i);
        if (cap_lazy_over_c_iterator(it) || (PyIter_Check(it) && !cap_is_ptc_iter(it)))
            return true;
    }
    return false;
}

/* Whether `x in obj` iterates obj through a Python __iter__ (its class has
 * no __contains__). */
static bool contains_by_iteration(PyObject *obj)
{
    PyObject *names[2] = {PyUnicode_InternFromString("__contains__"),
                          PyUnicode_InternFromString("__iter__")};
    PyObject *contains = names[0] ? cap_type_lookup(Py_TYPE(obj), names[0]) : NULL;
    PyObject *iter = names[1] ? cap_type_lookup(Py_TYPE(obj), names[1]) : NULL;
    Py_XDECREF(names[0]);
    Py_XDECREF(names[1]);
    return !contains && iter && cap_is_function(iter);
}

/* item in it, for one of ptc's iterators or an object iterated by its
 * Python __iter__ (no __contains__): advanced through the tracer up to the
 * first equal item, as CPython's search does. CAP_NONE for other
 * containers, and for a tensor item (a break of the caller's). */
int cap_t_iter_contains(cap_interp *I, PyObject *it, PyObject *item, PyObject **out)
{
    if (cap_is_tensor(item) || (!cap_is_ptc_iter(it) && !contains_by_iteration(it)))
        return CAP_NONE;
    if (!cap_is_ptc_iter(it)) {
        PyObject *made = NULL;
        int rc = cap_t_iter_sync(I, it, &made);
        if (rc == CAP_NEXT)
            rc = cap_t_iter_contains(I, made, item, out);
        Py_XDECREF(made);
        return rc == CAP_NONE ? cap_t_break(I->T, CAP_B_OPAQUE_ITERATOR, "'in' over a %s",
                                            cap_tpname(Py_TYPE(it)))
                              : rc;
    }
    cap_iter_marks marks;
    cap_iter_mark(&marks, &it, 1);
    PyObject *v = NULL;
    int rc, found = 0;
    while (!found && (rc = cap_t_next_sync(I, it, &v)) == CAP_NEXT && v) {
        if (cap_is_tensor(v))
            rc = cap_t_break(I->T, CAP_B_TENSOR_BOOL, "'in' over tensors");
        else if ((found = PyObject_RichCompareBool(v, item, Py_EQ)) < 0)
            rc = CAP_ERR;
        Py_CLEAR(v);
        if (rc != CAP_NEXT)
            break;
    }
    rc = cap_iter_rewind(I, &marks, rc);
    if (rc == CAP_NEXT)
        *out = Py_NewRef(found ? Py_True : Py_False);
    return rc;
}

/* ---- with-block exits -------------------------------------------------------------- */

static void gradexit_dealloc(PyObject *self)
{
    PyTypeObject *t = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(t, Py_tp_free))(self);
    Py_DECREF(t);
}

int cap_set_grad_enabled(bool on)
{
    PyObject *r = PyObject_CallOneArg_compat(cap_T.set_grad_enabled_c, on ? Py_True : Py_False);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* exit(type, value, traceback): restores the mode saved at __enter__. */
static PyObject *gradexit_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    cap_gradexit *g = (cap_gradexit *)self;
    if (g->kind == CAP_EXIT_GRAD && cap_set_grad_enabled(g->prev) < 0)
        return NULL;
    if (g->kind == CAP_EXIT_AMP) {
        cap_amp a = cap_amp_unpack(g->amp_prev);
        if (cap_amp_write(&a) < 0)
            return NULL;
    }
    Py_RETURN_FALSE;
}

static PyMemberDef gradexit_members[] = {
    {"prev", T_BOOL, offsetof(cap_gradexit, prev), READONLY, "mode restored on exit"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot gradexit_slots[] = {
    {Py_tp_dealloc, gradexit_dealloc},
    {Py_tp_call, gradexit_call},
    {Py_tp_members, gradexit_members},
    {Py_tp_doc, "ptc: the __exit__ of a grad-mode with-block modelled while tracing"},
    {0, NULL},
};

static PyType_Spec gradexit_spec = {"ptc._C.GradModeExit", sizeof(cap_gradexit), 0,
                                    Py_TPFLAGS_DEFAULT, gradexit_slots};

PyObject *cap_gradexit_new(int kind, bool prev)
{
    cap_gradexit *g = PyObject_New(cap_gradexit, cap_gradexit_type);
    if (g) {
        g->kind = kind;
        g->prev = prev;
        g->amp_prev = 0;
    }
    return (PyObject *)g;
}

int cap_iter_types_init(PyObject *module)
{
    cap_iter_type = (PyTypeObject *)PyType_FromSpec(&iter_spec);
    cap_gradexit_type = (PyTypeObject *)PyType_FromSpec(&gradexit_spec);
    cap_lazy_type = (PyTypeObject *)PyType_FromSpec(&lazy_spec);
    if (!cap_iter_type || !cap_gradexit_type || !cap_lazy_type)
        return -1;
    if (PyModule_AddObjectRef(module, "Iter", (PyObject *)cap_iter_type) < 0 ||
        PyModule_AddObjectRef(module, "GradModeExit", (PyObject *)cap_gradexit_type) < 0 ||
        PyModule_AddObjectRef(module, "LazyIter", (PyObject *)cap_lazy_type) < 0)
        return -1;
    return 0;
}
