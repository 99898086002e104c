/* Finishing a trace into an entry, and the parts of an entry that run on
 * every call: guard evaluation and recipes.
 *
 * At the end of a trace every live value is described by a recipe: a source
 * (an outside object: the same object next time), a constant, a graph output,
 * or a container / instance / function / cell / iterator built from other
 * recipes. The tensors recipes reach become the graph's outputs, so dead code
 * is dropped and each needed value is computed once. A value no recipe can
 * describe makes the resume state unreconstructable: the caller then retraces
 * with that call not inlined.
 */
#include "capture/entry/entry.h"
#include "capture/torch/torch.h"

#include <stdlib.h>
#include <string.h>

typedef struct builder {
    cap_trace *T;
    cap_recipe *r;
    int n, cap;
    PyObject *memo;        /* id(obj) -> recipe index */
    PyObject *keep;        /* objects referenced by memo keys */
    ptc_value **outs;
    int nouts, capouts;
    bool failed;           /* an unreconstructable value was met */
    bool escape;           /* building values the user sees (not resume frames) */
    PyObject *cells;       /* (cell recipe, contents, frame) to fill in last (fill_cells) */
    int frame;             /* the resume frame being described, or -1 */
    int depth;
    char why[160];
} builder;

static int add_recipe(builder *B, cap_recipe r)
{
    if (B->n == B->cap) {
        B->cap = B->cap ? 2 * B->cap : 32;
        B->r = realloc(B->r, sizeof *B->r * (size_t)B->cap);
    }
    B->r[B->n] = r;
    return B->n++;
}

static int output_index(builder *B, ptc_value *v)
{
    for (int i = 0; i < B->nouts; i++)
        if (B->outs[i] == v)
            return i;
    if (B->nouts == B->capouts) {
        B->capouts = B->capouts ? 2 * B->capouts : 16;
        B->outs = realloc(B->outs, sizeof *B->outs * (size_t)B->capouts);
    }
    B->outs[B->nouts] = v;
    return B->nouts++;
}

/* The output that returns v: v itself, or a fresh copy per call when v is
 * a constant or an input (outputs belong to the caller). -1 on failure. */
static int value_output(builder *B, ptc_value *v)
{
    if (!v->def) {
        ptc_arg a[1] = {ptc_arg_value(v)};
        ptc_error err;
        ptc_node *n = ptc_build(B->T->g, PTC_OP_CLONE, a, 1, &err);
        if (!n)
            return -1;
        cap_t_note_node(B->T, n);
        v = n->outs[0];
    }
    return output_index(B, v);
}

/* Inputs written in place: their last values become outputs, copied into
 * the caller's tensors after the graph (cap_entry.writeback). */
static int writeback_outputs(builder *B, cap_entry *e)
{
    Py_ssize_t n = PyList_Size(B->T->written);
    e->writeback = calloc((size_t)n + 1, sizeof *e->writeback);
    if (!e->writeback)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        cap_tensor *t = (cap_tensor *)PyList_GetItem(B->T->written, i);
        if (t->v == t->input_v)
            continue;
        int out = value_output(B, t->v);
        if (out < 0) {
            PyErr_SetString(cap_InternalError,
                            "ptc: cannot return the new value of a written input");
            return -1;
        }
        e->writeback[e->nwriteback++] = (cap_writeback){t->input_v->input_index, out};
    }
    return 0;
}

static int fail(builder *B, const char *why, PyObject *o)
{
    /* The value's type says which value; a frame's reasons stand alone. */
    if (!B->failed && o)
        snprintf(B->why, sizeof B->why, "%s (%s)", why, cap_tpname(Py_TYPE(o)));
    else if (!B->failed)
        snprintf(B->why, sizeof B->why, "%s", why);
    B->failed = true;
    return -1;
}

static int recipe_of(builder *B, PyObject *o);

static int items_recipe(builder *B, int kind, PyObject *seq, PyObject *obj)
{
    Py_ssize_t n = PySequence_Size(seq);
    int *items = malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_GetItem(seq, i);
        items[i] = x ? recipe_of(B, x) : -1;
        Py_XDECREF(x);
        if (items[i] < 0) {
            free(items);
            return -1;
        }
    }
    return add_recipe(B, (cap_recipe){(uint8_t)kind, (int)n, items, Py_XNewRef(obj), 0});
}

static int dict_recipe(builder *B, int kind, PyObject *d, PyObject *obj)
{
    PyObject *flat = PyList_New(0), *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        PyList_Append(flat, k);
        PyList_Append(flat, v);
    }
    int r = items_recipe(B, kind, flat, obj);
    Py_DECREF(flat);
    return r;
}

/* Does o hold attributes in an instance dict? */
static bool has_attrs(PyObject *o)
{
    PyObject *d = PyObject_GenericGetDict(o, NULL);
    bool any = d && PyDict_Size(d) > 0;
    Py_XDECREF(d);
    PyErr_Clear();
    return any;
}

static bool is_python_instance(PyObject *o)
{
    PyObject *d = PyObject_GenericGetDict(o, NULL);
    if (!d) {
        PyErr_Clear();
        return false;
    }
    Py_DECREF(d);
    return !PyType_Check(o) && !PyModule_Check(o);
}

/* Does class b declare slots that hold values (not only __dict__ and
 * __weakref__; abc.ABC's empty __slots__ holds nothing)? */
static bool has_slots(PyTypeObject *b)
{
    PyObject *d = PyObject_GetAttr((PyObject *)b, cap_P.s_dict);
    PyObject *slots = d ? PyMapping_GetItemString(d, "__slots__") : NULL;
    PyErr_Clear();
    Py_XDECREF(d);
    if (!slots)
        return false;
    PyObject *names = PyUnicode_Check(slots) ? PyTuple_Pack(1, slots) : PySequence_Tuple(slots);
    bool any = !names;
    for (Py_ssize_t i = 0; names && i < PyTuple_Size(names) && !any; i++) {
        PyObject *n = PyTuple_GetItem(names, i);
        any = !PyUnicode_Check(n) || (PyUnicode_CompareWithASCIIString(n, "__dict__") != 0 &&
                                      PyUnicode_CompareWithASCIIString(n, "__weakref__") != 0);
    }
    Py_XDECREF(names);
    Py_DECREF(slots);
    PyErr_Clear();
    return any;
}

/* Can an instance of t be rebuilt as t.__new__(t), its dict items and its
 * attributes? Every class of its MRO is written in Python (its instances are
 * freed by the generic subtype dealloc), without __slots__, or is object,
 * dict or OrderedDict. A type written in C (functools.partial, a list
 * subclass's items) or slots keep state elsewhere. */
static bool plain_layout(PyTypeObject *t)
{
    static void *python_dealloc;
    if (!python_dealloc)
        python_dealloc = PyType_GetSlot((PyTypeObject *)cap_T.Module, Py_tp_dealloc);
    PyObject *mro = PyObject_GetAttr((PyObject *)t, cap_P.s_mro);
    bool plain = mro && PyTuple_Check(mro);
    for (Py_ssize_t i = 0; plain && i < PyTuple_Size(mro); i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GetItem(mro, i);
        plain = b == &PyBaseObject_Type || b == &PyDict_Type || (PyObject *)b == cap_P.OrderedDict ||
                (PyType_GetFlags(b) & Py_TPFLAGS_HEAPTYPE && PyType_GetSlot(b, Py_tp_dealloc) == python_dealloc);
        if (plain && PyType_GetFlags(b) & Py_TPFLAGS_HEAPTYPE)
            plain = !has_slots(b);
    }
    Py_XDECREF(mro);
    PyErr_Clear();
    return plain;
}

/* Immutable objects made while tracing that can be shared across calls. */
static bool shareable(PyObject *o)
{
    static PyObject *types;
    if (!types) {
        static const char *paths[] = {"types.GenericAlias", "typing._GenericAlias",
                                      "typing._SpecialForm", "typing._UnionGenericAlias",
                                      "types.UnionType", "torch.finfo", "torch.iinfo",
                                      "torch.layout", "torch.memory_format", "torch.qscheme",
                                      "re.Pattern", "types.MappingProxyType",
                                      "types.TracebackType", "numpy.dtype", NULL};
        types = PyList_New(0);
        for (int i = 0; types && paths[i]; i++) {
            PyObject *t = cap_import_path(paths[i]);
            if (t && PyType_Check(t))
                PyList_Append(types, t);
            Py_XDECREF(t);
        }
    }
    for (Py_ssize_t i = 0; types && i < PyList_Size(types); i++)
        if (PyObject_TypeCheck(o, (PyTypeObject *)PyList_GetItem(types, i)))
            return true;
    return false;
}

/* Values rebuilt the way pickle would (obj.__reduce_ex__(2)): ptc's own
 * iterators as their real builtins, the builtin iterators and itertools
 * objects made in the trace, defaultdict and deque, and instances of Python
 * subclasses of list, set and tuple. Their parts (the function, the
 * iterators under them, their items) are recipes themselves. */
static bool reducible(PyObject *o)
{
    static PyObject *types;
    if (!types) {
        static const char *paths[] = {"collections.defaultdict", "collections.deque", NULL};
        types = PyList_New(0);
        for (int i = 0; types && paths[i]; i++) {
            PyObject *t = cap_import_path(paths[i]);
            if (t && PyType_Check(t))
                PyList_Append(types, t);
            Py_XDECREF(t);
        }
        PyErr_Clear();
    }
    PyTypeObject *t = Py_TYPE(o);
    if (cap_is_ptc_iter(o))
        return true;
    for (Py_ssize_t i = 0; types && i < PyList_Size(types); i++)
        if ((PyObject *)t == PyList_GetItem(types, i))
            return true;
    PyObject *mod = PyObject_GetAttr((PyObject *)t, cap_P.s_module);
    bool itertools = mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "itertools") == 0;
    bool builtin_iter = mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "builtins") == 0 &&
                        PyType_GetSlot(t, Py_tp_iternext) != NULL;
    Py_XDECREF(mod);
    PyErr_Clear();
    if (itertools || builtin_iter)
        return true;
    return PyType_GetFlags(t) & Py_TPFLAGS_HEAPTYPE &&
           (PyList_Check(o) || PyAnySet_Check(o) || PyTuple_Check(o)) && !PyObject_TypeCheck(o, (PyTypeObject *)cap_T.Tensor);
}

static int reduce_recipe(builder *B, PyObject *o)
{
    PyObject *r = PyObject_CallMethod(o, "__reduce_ex__", "i", 2), *parts = NULL;
    if (!r || !PyTuple_Check(r) || PyTuple_Size(r) < 2) {
        Py_XDECREF(r);
        PyErr_Clear();
        return fail(B, "a value whose pickled form ptc cannot read", o);
    }
    /* (callable, args, state, list items, dict items); the items as lists. */
    parts = PyList_New(5);
    for (Py_ssize_t i = 0; parts && i < 5; i++) {
        PyObject *p = i < PyTuple_Size(r) ? PyTuple_GetItem(r, i) : Py_None;
        p = i >= 3 && p != Py_None ? PySequence_List(p) : Py_NewRef(p);
        if (!p)
            Py_CLEAR(parts);
        else
            PyList_SetItem(parts, i, p);
    }
    Py_DECREF(r);
    int rr = parts ? items_recipe(B, CAP_R_REDUCE, parts, NULL) : -1;
    Py_XDECREF(parts);
    return rr;
}

/* A functools.lru_cache wrapper of a function that existed before the trace
 * (a decorated method such as transformers' logger.warning_once, bound at a
 * break): like the function, it is the same object on every call, and a copy
 * would lose its cache. */
static bool existing_lru_cache(cap_trace *T, PyObject *o)
{
    static PyObject *lru_type;
    if (!lru_type && !(lru_type = cap_import_path("functools._lru_cache_wrapper"))) {
        PyErr_Clear();
        return false;
    }
    if ((PyObject *)Py_TYPE(o) != lru_type)
        return false;
    PyObject *wrapped = PyObject_GetAttrString(o, "__wrapped__");
    bool existing = wrapped && cap_is_function(wrapped) && !cap_t_made_function(T, wrapped);
    Py_XDECREF(wrapped);
    PyErr_Clear();
    return existing;
}

/* ---- recipes by kind: each returns a recipe index, or -1 --------------------- */

/* container_recipe's answer for an object of another kind */
enum { NOT_MINE = -2 };

static int tensor_value_recipe(builder *B, cap_tensor *t);

/* maker(<what recipe r makes>, arg): numpy's flip, transpose or indexing
 * of it, a view of it (maker: a new reference, a constant of the recipes). */
static int view_recipe(builder *B, PyObject *maker, int r, PyObject *arg)
{
    int fn = maker ? add_recipe(B, (cap_recipe){CAP_R_CONST, 0, NULL, maker, 0}) : -1;
    int d = recipe_of(B, arg), none = recipe_of(B, Py_None);
    int *args = malloc(2 * sizeof(int)), *parts = malloc(5 * sizeof(int));
    if (r < 0 || fn < 0 || d < 0 || none < 0 || !args || !parts) {
        free(args);
        free(parts);
        return -1;
    }
    args[0] = r, args[1] = d;
    parts[0] = fn, parts[2] = parts[3] = parts[4] = none;
    parts[1] = add_recipe(B, (cap_recipe){CAP_R_TUPLE, 2, args, NULL, 0});
    return add_recipe(B, (cap_recipe){CAP_R_REDUCE, 5, parts, NULL, 0});
}

static int flip_of_recipe(builder *B, int r, PyObject *dims)
{
    return view_recipe(B, PyObject_GetAttrString(cap_np_module(), "flip"), r, dims);
}

/* Is traced array t a flip of another (np.flip, a negative-step slice), or
 * a view (by indexing or permuting) of one? torch.flip copies, so such
 * views leave the graph as numpy's views of the flip's base, as eager's
 * are (other views of an input are views of its graph value already). */
static bool over_a_flip(const cap_tensor *t)
{
    for (; t->base && t->base->numpy == CAP_NP_ARRAY; t = t->base)
        if (t->view_flip)
            return true;
        else if (!t->view_key && !t->view_perm)
            return false;
    return false;
}

/* A traced numpy array or scalar: tensor.numpy() of its value (a scalar:
 * its item as numpy's scalar). An array that eager's shares with an
 * argument (x.numpy(), written in place or not: a chain of same-shape
 * views, which follow every write) is the argument's; a view over a flip
 * (over_a_flip), the same view of its base's. */
static int numpy_recipe(builder *B, cap_tensor *t)
{
    if (t->numpy == CAP_NP_ARRAY && over_a_flip(t)) {
        int base = recipe_of(B, (PyObject *)t->base);
        if (t->view_flip)
            return flip_of_recipe(B, base, t->view_flip);
        if (t->view_perm)
            return view_recipe(B, PyObject_GetAttrString(cap_np_module(), "transpose"), base, t->view_perm);
        return view_recipe(B, cap_import_path("operator.getitem"), base, t->view_key);
    }
    cap_tensor *root = t;
    while (root->base && root->view_reshape && root->base->v->type.ndim == root->v->type.ndim)
        root = root->base;
    bool shares = t->numpy == CAP_NP_ARRAY && root != t && root->input_v && root->src >= 0;
    /* an array passed in is itself (its writes are done before the recipes run) */
    const cap_source *src = shares ? &B->T->src[root->src] : NULL;
    if (src && src->kind == CAP_S_FROM_NUMPY && (root->v == root->input_v || cap_t_is_written(B->T, root))) {
        int passed = add_recipe(B, (cap_recipe){CAP_R_SOURCE, 0, NULL, NULL, src->parent});
        /* one with strides running backwards was taken as its flip (torch_numpy.c) */
        return src->key ? flip_of_recipe(B, passed, src->key) : passed;
    }
    int r = tensor_value_recipe(B, shares ? root : t);
    int *items = r >= 0 ? malloc(sizeof(int)) : NULL;
    if (!items)
        return -1;
    items[0] = r;
    return add_recipe(B, (cap_recipe){CAP_R_NUMPY, 1, items, NULL, t->numpy});
}

/* A graph value: its input, or the graph output that holds it. */
static int tensor_recipe(builder *B, PyObject *o)
{
    cap_tensor *t = (cap_tensor *)o;
    return t->numpy != CAP_NP_TENSOR ? numpy_recipe(B, t) : tensor_value_recipe(B, t);
}

static int tensor_value_recipe(builder *B, cap_tensor *t)
{
    cap_trace *T = B->T;
    PyObject *o = (PyObject *)t;
    /* an input, maybe written in place (it gets its new value before the recipes run) */
    if (t->input_v && t->src >= 0 && (t->v == t->input_v || cap_t_is_written(T, t)))
        return add_recipe(B, (cap_recipe){CAP_R_SOURCE, 0, NULL, NULL, t->src});
    int out = value_output(B, t->v);
    if (out < 0)
        return fail(B, "clone of a graph input", o);
    return add_recipe(B, (cap_recipe){CAP_R_OUTPUT, 0, NULL, NULL, out});
}

/* ptc.export's form of a size kept past the graph: its value as a
 * ptc._export.SymIntResult that carries its expression over the graph's
 * symbols, so the exported program computes it from each call's sizes. */
static int symint_result_recipe(builder *B, const cap_symint *s)
{
    static PyObject *result_type;
    if (!result_type && !(result_type = cap_import_path("ptc._export.SymIntResult")))
        return -1;
    ptc_buf b = {0};
    ptc_dim_print(&b, s->d);
    PyObject *r =
        PyObject_CallFunction(result_type, "Ls", (long long)s->hint, b.data ? b.data : "");
    ptc_buf_free(&b);
    return r ? add_recipe(B, (cap_recipe){CAP_R_CONST, 0, NULL, r, 0}) : -1;
}

/* A size kept past the graph: its value, under a guard. */
static int symint_recipe(builder *B, PyObject *o)
{
    if (B->T->symint_results && ((cap_symint *)o)->d.sym)
        return symint_result_recipe(B, (cap_symint *)o);
    int64_t v;
    if (cap_symint_specialise((cap_symint *)o, "a value kept past the graph", &v) < 0)
        return -1;
    return add_recipe(B, (cap_recipe){CAP_R_CONST, 0, NULL, PyLong_FromLongLong(v), 0});
}

/* A builtin bound to an object: its type's descriptor bound to the rebuilt
 * object, not getattr by name, which would find a subclass's override
 * (super().append(v) replayed as self.append(v) ran the override twice).
 * getattr for a builtin no descriptor binds to, and for one of ptc's
 * iterators (rebuilt as the real one: gen.send is the generator's own);
 * module functions and unbound builtins are constants. */
static int bound_builtin_recipe(builder *B, PyObject *o)
{
    PyObject *self = PyCFunction_GetSelf(o);
    PyObject *name = PyObject_GetAttr(o, cap_P.s_name);
    if (!name)
        return -1;
    PyObject *descr = cap_is_ptc_iter(self) ? NULL : cap_builtin_descriptor(o, self, name);
    int r;
    if (descr) {
        int of = recipe_of(B, self);
        int *items = of >= 0 ? malloc(sizeof(int)) : NULL;
        if (items)
            items[0] = of;
        r = items ? add_recipe(B, (cap_recipe){CAP_R_BIND, 1, items, descr, 0}) : -1;
        if (r < 0)
            Py_DECREF(descr);
    } else {
        PyObject *parts = PyTuple_Pack(1, self);
        r = parts ? items_recipe(B, CAP_R_GETATTR, parts, name) : -1;
        Py_XDECREF(parts);
    }
    Py_DECREF(name);
    return r;
}

/* A tuple, list, dict, set or slice: its items' recipes; NOT_MINE for
 * another kind. */
static int container_recipe(builder *B, PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    if (t == &PyTuple_Type)
        return items_recipe(B, CAP_R_TUPLE, o, NULL);
    if (t == &PyList_Type)
        return items_recipe(B, CAP_R_LIST, o, NULL);
    if (t == &PyDict_Type)
        return dict_recipe(B, CAP_R_DICT, o, NULL);
    if (t == &PySet_Type) {
        PyObject *l = PySequence_List(o);
        int r = l ? items_recipe(B, CAP_R_SET, l, NULL) : -1;
        Py_XDECREF(l);
        return r;
    }
    if (t == &PySlice_Type) {
        PyObject *parts =
            Py_BuildValue("(NNN)", PyObject_GetAttrString(o, "start"),
                          PyObject_GetAttrString(o, "stop"), PyObject_GetAttrString(o, "step"));
        int r = parts ? items_recipe(B, CAP_R_SLICE, parts, NULL) : -1;
        Py_XDECREF(parts);
        return r;
    }
    return NOT_MINE;
}

/* Cells are made empty and filled after every recipe ran, so that closures
 * may refer to themselves (recursive nested functions). */
static int cell_recipe(builder *B, PyObject *o)
{
    int *items = malloc(sizeof(int));
    items[0] = -1;
    int self = add_recipe(B, (cap_recipe){CAP_R_CELL, 1, items, NULL, 0});
    PyObject *key = PyLong_FromVoidPtr(o), *idx = PyLong_FromLong(self);
    if (key && idx)
        PyDict_SetItem(B->memo, key, idx);
    Py_XDECREF(key);
    Py_XDECREF(idx);
    PyList_Append(B->keep, o);
    PyObject *v = cap_cell_get(o);
    PyErr_Clear();
    if (!v) {
        B->r[self].items[0] = -2; /* an empty cell */
        return self;
    }
    /* Its contents' recipe comes last (fill_cells): a function that
       holds its own cell is then the one recipe every reference to it
       shares (g() is g), not a second copy made while building it. */
    PyObject *pair = Py_BuildValue("(iNi)", self, v, B->frame);
    int r = pair ? PyList_Append(B->cells, pair) : -1;
    Py_XDECREF(pair);
    return r < 0 ? -1 : self;
}

/* An iterator the user gets (a module's parameters(), say): over the items
 * not consumed yet, a generator where eager has one. */
static int escaping_iter_recipe(builder *B, PyObject *o)
{
    cap_iter *it = (cap_iter *)o;
    if (!it->seq) {
        PyObject *params = Py_BuildValue("(LLnO)", it->start, it->step, it->n, Py_False);
        return add_recipe(B, (cap_recipe){CAP_R_PYITER, 0, NULL, params, (int)it->i});
    }
    int *items = malloc(sizeof(int));
    if ((items[0] = recipe_of(B, it->seq)) < 0) {
        free(items);
        return -1;
    }
    return add_recipe(B, (cap_recipe){CAP_R_PYITER, 1, items,
                                      Py_NewRef(it->gen ? Py_True : Py_False), (int)it->i});
}

/* An iterator the code after the graph goes on with. */
static int iter_recipe(builder *B, PyObject *o)
{
    cap_iter *it = (cap_iter *)o;
    if (!it->seq) {
        PyObject *params = Py_BuildValue("(LLn)", it->start, it->step, it->n);
        return add_recipe(B, (cap_recipe){CAP_R_ITER, 0, NULL, params, (int)it->i});
    }
    int seq = recipe_of(B, it->seq);
    if (seq < 0)
        return -1;
    if (it->src >= 0 && B->r[seq].kind != CAP_R_SOURCE)
        return fail(B, "iterator over an outside sequence", o);
    /* items: the sequence, and the container whose size it checks */
    int owner = it->owner ? recipe_of(B, it->owner) : -1;
    if (it->owner && owner < 0)
        return -1;
    int *items = malloc(2 * sizeof(int));
    items[0] = seq;
    items[1] = owner;
    PyObject *len = it->owner ? PyLong_FromSsize_t(it->owner_len) : NULL;
    return add_recipe(B, (cap_recipe){CAP_R_ITER, it->owner ? 2 : 1, items, len, (int)it->i});
}

/* A function made in the trace: code, globals (a module's dict, the same
 * object each time), defaults and closure cells. */
static int function_recipe(builder *B, PyObject *o)
{
    PyObject *parts = Py_BuildValue("(NNN)", PyObject_GetAttr(o, cap_P.s_defaults),
                                    PyObject_GetAttr(o, cap_P.s_kwdefaults),
                                    PyObject_GetAttr(o, cap_P.s_closure));
    if (!parts)
        return -1;
    PyObject *code = PyObject_GetAttr(o, cap_P.s_code);
    PyObject *qn = PyObject_GetAttr(o, cap_P.s_qualname);
    PyObject *info = Py_BuildValue("(NNN)", code, qn, PyObject_GetAttr(o, cap_P.s_globals));
    int r = items_recipe(B, CAP_R_FUNCTION, parts, info);
    Py_XDECREF(info);
    Py_DECREF(parts);
    return r;
}

/* A bound method: its function and self. */
static int method_recipe(builder *B, PyObject *o)
{
    PyObject *parts =
        Py_BuildValue("(NN)", PyObject_GetAttr(o, cap_P.s_func), PyObject_GetAttr(o, cap_P.s_self));
    int r = parts ? items_recipe(B, CAP_R_METHOD, parts, NULL) : -1;
    Py_XDECREF(parts);
    return r;
}

/* A Tensor method bound to a graph value: getattr on the real one. */
static int tensor_method_recipe(builder *B, PyObject *o)
{
    const char *name = ((cap_method *)o)->map->name;
    const char *dot = strrchr(name, '.');
    PyObject *parts = PyTuple_Pack(1, ((cap_method *)o)->self);
    PyObject *attr = PyUnicode_FromString(dot ? dot + 1 : name);
    int r = parts && attr ? items_recipe(B, CAP_R_GETATTR, parts, attr) : -1;
    Py_XDECREF(parts);
    Py_XDECREF(attr);
    return r;
}

/* weakref.ref(o, callback) made in the trace: a new reference to the
 * rebuilt referent (torch.compile's own nn.Module bookkeeping keeps one of
 * every module made). A dead referent cannot be rebuilt. */
static int weakref_recipe(builder *B, PyObject *o)
{
    PyObject *referent = PyWeakref_GetObject(o);
    PyObject *callback = PyObject_GetAttrString(o, "__callback__");
    if (!referent || referent == Py_None || !callback) {
        Py_XDECREF(callback);
        PyErr_Clear();
        return fail(B, "a weak reference to a dead object", o);
    }
    PyObject *args =
        callback == Py_None ? PyTuple_Pack(1, referent) : PyTuple_Pack(2, referent, callback);
    PyObject *parts =
        args ? Py_BuildValue("[ONOOO]", (PyObject *)Py_TYPE(o), args, Py_None, Py_None, Py_None)
             : NULL;
    int r = parts ? items_recipe(B, CAP_R_REDUCE, parts, NULL) : -1;
    Py_XDECREF(parts);
    Py_DECREF(callback);
    return r;
}

/* A view of a dict: the rebuilt dict's keys(), values() or items(). */
static int dict_view_recipe(builder *B, PyObject *o)
{
    PyObject *d = cap_view_dict(o);
    const char *name = PyDictKeys_Check(o) ? "keys" : PyDictValues_Check(o) ? "values" : "items";
    PyObject *m = d ? PyObject_GetAttrString(d, name) : NULL;
    PyObject *parts = m ? Py_BuildValue("[N()OOO]", m, Py_None, Py_None, Py_None) : NULL;
    int r = parts ? items_recipe(B, CAP_R_REDUCE, parts, NULL) : fail(B, "a dict view", o);
    Py_XDECREF(parts);
    return r;
}

/* A namedtuple or structseq: its type and items. */
static int named_tuple_recipe(builder *B, PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    PyObject *items = PySequence_List(o);
    PyObject *info = Py_BuildValue("(Oi)", (PyObject *)t, 1);
    int r = items && info ? items_recipe(B, CAP_R_INSTANCE, items, info) : -1;
    Py_XDECREF(items);
    Py_XDECREF(info);
    return r;
}

/* An exception made in the trace: its args, then its attributes. */
static int exception_recipe(builder *B, PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    PyObject *args = PyObject_GetAttrString(o, "args");
    PyObject *attrs = args ? PyObject_GenericGetDict(o, NULL) : NULL;
    PyObject *flat = attrs ? PySequence_List(args) : NULL, *k, *v;
    Py_ssize_t pos = 0, nargs = args ? PyTuple_Size(args) : 0;
    while (flat && PyDict_Next(attrs, &pos, &k, &v)) {
        PyList_Append(flat, k);
        PyList_Append(flat, v);
    }
    /* Its chaining too (not in __dict__): setting __cause__ sets
       __suppress_context__, so that one goes last. And its traceback so far:
       the frames the trace's raise passed through before a handler that
       re-raises it (the break), which the rerun of that re-raise cannot add. */
    static const char *chain[] = {"__traceback__", "__cause__", "__context__",
                                  "__suppress_context__"};
    for (int i = 0; flat && i < 4; i++) {
        PyObject *cv = PyObject_GetAttrString(o, chain[i]);
        if (cv && cv != Py_None && cv != Py_False) {
            PyObject *name = PyUnicode_FromString(chain[i]);
            PyList_Append(flat, name);
            PyList_Append(flat, cv);
            Py_XDECREF(name);
        }
        Py_XDECREF(cv);
    }
    PyObject *info = Py_BuildValue("(On)", (PyObject *)t, nargs);
    int r = flat && info ? items_recipe(B, CAP_R_EXCEPTION, flat, info) : -1;
    Py_XDECREF(args);
    Py_XDECREF(attrs);
    Py_XDECREF(flat);
    Py_XDECREF(info);
    return r;
}

/* An object of a Python class built in the trace: its dict items (dict
 * subclasses) and its attributes. */
static int instance_recipe(builder *B, PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    PyObject *attrs = PyObject_GenericGetDict(o, NULL);
    PyObject *items = PyDict_Check(o) ? PyDict_Items(o) : PyList_New(0);
    PyObject *flat = PyList_New(0), *k, *v;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; items && i < PyList_Size(items); i++) {
        PyObject *kv = PyList_GetItem(items, i);
        PyList_Append(flat, PyTuple_GetItem(kv, 0));
        PyList_Append(flat, PyTuple_GetItem(kv, 1));
    }
    Py_ssize_t nitems = PyList_Size(flat);
    while (attrs && PyDict_Next(attrs, &pos, &k, &v)) {
        PyList_Append(flat, k);
        PyList_Append(flat, v);
    }
    PyObject *info = Py_BuildValue("(Oin)", (PyObject *)t, 0, nitems);
    int r = attrs && items && info ? items_recipe(B, CAP_R_INSTANCE, flat, info) : -1;
    Py_XDECREF(attrs);
    Py_XDECREF(items);
    Py_XDECREF(flat);
    Py_XDECREF(info);
    return r;
}

/* The outside object o, reached by src; an id() a resume state held is
 * marked as still one (obj True), for the next resume state. */
static int source_recipe(builder *B, PyObject *o, int src)
{
    PyObject *id = cap_t_resumed_id(B->T, o) ? Py_NewRef(Py_True) : NULL;
    return add_recipe(B, (cap_recipe){CAP_R_SOURCE, 0, NULL, id, src});
}

/* An id() the trace took: id() of its object's recipe, so that it is the
 * id of the object this call rebuilds (or reaches), not the trace's. */
static int id_recipe(builder *B, PyObject *obj)
{
    int of = recipe_of(B, obj);
    if (of < 0)
        return fail(B, "the id() of an object ptc cannot rebuild", obj);
    int *items = malloc(sizeof(int));
    if (!items)
        return -1;
    items[0] = of;
    return add_recipe(B, (cap_recipe){CAP_R_ID, 1, items, NULL, 0});
}

/* The recipe of o, by its kind. The order matters: a graph value before its
 * source, a source before a rebuilt copy, exact builtin types before what
 * pickling could rebuild. */
static int recipe_uncached(builder *B, PyObject *o)
{
    cap_trace *T = B->T;
    if (!o)
        return add_recipe(B, (cap_recipe){CAP_R_NULLV, 0, NULL, NULL, 0});
    if (cap_is_tensor(o))
        return tensor_recipe(B, o);
    if (cap_is_symint(o))
        return symint_recipe(B, o);
    int src = cap_t_source_of(T, o);
    if (src >= 0)
        return source_recipe(B, o, src);
    if (PyCFunction_Check(o)) {
        PyObject *self = PyCFunction_GetSelf(o);
        if (self && !PyModule_Check(self) && !PyType_Check(self) && !cap_is_constant(self))
            return bound_builtin_recipe(B, o);
    }
    PyObject *id_of = cap_t_id_object(T, o);
    if (id_of)
        return id_recipe(B, id_of);
    if (PyTuple_CheckExact(o) && cap_t_holds_id(T, o))
        return container_recipe(B, o); /* a constant but for the ids */
    if (cap_is_constant(o) || Py_TYPE(o) == cap_gradexit_type || PyType_Check(o) ||
        PyModule_Check(o) || PyCFunction_Check(o) || shareable(o))
        return add_recipe(B, (cap_recipe){CAP_R_CONST, 0, NULL, Py_NewRef(o), 0});
    int r = container_recipe(B, o);
    if (r != NOT_MINE)
        return r;
    PyTypeObject *t = Py_TYPE(o);
    if (t == (PyTypeObject *)cap_P.CellType)
        return cell_recipe(B, o);
    if (t == cap_lazy_type ||
        (t == cap_iter_type && !((cap_iter *)o)->gen && (B->escape || ((cap_iter *)o)->rev)))
        return reduce_recipe(B, o); /* the real builtin iterator */
    if (t == cap_iter_type)
        return B->escape ? escaping_iter_recipe(B, o) : iter_recipe(B, o);
    if ((cap_is_function(o) && !cap_t_made_function(T, o)) || existing_lru_cache(T, o)) {
        /* An existing function reached without a source (a method of a
           class, an __init__ the trace ran): itself, not a copy. */
        return add_recipe(B, (cap_recipe){CAP_R_CONST, 0, NULL, Py_NewRef(o), 0});
    }
    if (cap_is_function(o))
        return function_recipe(B, o);
    if (cap_is_method(o))
        return method_recipe(B, o);
    if (t == cap_method_type)
        return tensor_method_recipe(B, o);
    if (PyObject_TypeCheck(o, (PyTypeObject *)cap_T.Tensor))
        return fail(B, "a tensor that is not part of the graph", o);
    if (PyDictKeys_Check(o) || PyDictValues_Check(o) || PyDictItems_Check(o))
        return dict_view_recipe(B, o);
    if (PyWeakref_CheckRefExact(o))
        return weakref_recipe(B, o);
    if (reducible(o) && (!PyTuple_Check(o) || has_attrs(o)))
        return reduce_recipe(B, o);
    if (PyTuple_Check(o))
        return named_tuple_recipe(B, o);
    if (PyExceptionInstance_Check(o))
        return exception_recipe(B, o);
    bool python_class = is_python_instance(o) && PyType_GetFlags(t) & Py_TPFLAGS_HEAPTYPE;
    if (python_class && !plain_layout(t))
        return fail(B, "an object whose state is not in its __dict__", o);
    if (python_class || (PyObject *)t == cap_P.OrderedDict)
        return instance_recipe(B, o);
    return fail(B, "a value ptc cannot rebuild", o);
}

/* The contents of the cells met while building (in order; filling one may
 * meet more cells). */
static int fill_cells(builder *B, int *frame)
{
    for (Py_ssize_t i = 0; i < PyList_Size(B->cells); i++) {
        PyObject *pair = PyList_GetItem(B->cells, i);
        int inner = recipe_of(B, PyTuple_GetItem(pair, 1));
        *frame = (int)PyLong_AsLong(PyTuple_GetItem(pair, 2));
        if (inner < 0)
            return -1;
        B->r[PyLong_AsLong(PyTuple_GetItem(pair, 0))].items[0] = inner;
    }
    return 0;
}

static int recipe_of(builder *B, PyObject *o)
{
    PyObject *key = PyLong_FromVoidPtr(o);
    PyObject *hit = key ? PyDict_GetItem(B->memo, key) : NULL;
    if (hit) {
        Py_DECREF(key);
        return (int)PyLong_AsLong(hit);
    }
    if (B->depth > 64) { /* a cycle, or nesting too deep to rebuild */
        Py_XDECREF(key);
        return fail(B, "a self-referencing or deeply nested value", o);
    }
    B->depth++;
    int r = recipe_uncached(B, o);
    B->depth--;
    if (r >= 0 && o) {
        PyObject *v = PyLong_FromLong(r);
        PyDict_SetItem(B->memo, key, v);
        PyList_Append(B->keep, o);
        Py_XDECREF(v);
    }
    Py_XDECREF(key);
    return r;
}

/* ---- building -------------------------------------------------------------------------- */

static void dce(ptc_graph *g)
{
    bool *live_v = calloc((size_t)g->nvalues + 1, 1);
    bool *keep = calloc((size_t)g->next_node_id + 1, 1);
    for (int i = 0; i < g->noutputs; i++)
        live_v[g->outputs[i]->id] = true;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        ptc_node *n = g->nodes[i];
        bool live = false;
        for (int k = 0; k < n->nout; k++)
            live = live || live_v[n->outs[k]->id];
        if (!live)
            continue;
        keep[n->id] = true;
        for (int a = 0; a < n->nargs; a++) {
            const ptc_arg *arg = &n->args[a];
            if (arg->kind == PTC_ARG_VALUE)
                live_v[arg->v->id] = true;
            else if (arg->kind == PTC_ARG_VALUES)
                for (int j = 0; j < arg->vs.n; j++)
                    if (arg->vs.v[j])
                        live_v[arg->vs.v[j]->id] = true;
        }
    }
    ptc_graph_remove_nodes(g, keep);
    free(live_v);
    free(keep);
}

static int frame_recipe(builder *B, cap_frame *f, cap_rframe *rf)
{
    if (f->exc_depth)
        return fail(B, "a break inside an except block", NULL);
    rf->code = cap_code_ref(f->code);
    rf->pc = f->pc;
    rf->sp = f->sp;
    rf->kwnames = Py_XNewRef(f->kwnames);
    rf->ret = f->ret;
    rf->ret_arg = f->ret_arg;
    rf->module_path = f->module_path ? strdup(f->module_path) : NULL;
    rf->lp = malloc(sizeof(int) * (size_t)(f->code->nlp + 1));
    rf->stack = malloc(sizeof(int) * (size_t)(f->sp + 1));
    if ((rf->func = recipe_of(B, f->func)) < 0)
        return -1;
    for (int i = 0; i < f->code->nlp; i++) {
        /* A local of the starting state the trace never read is still the
           same object: its source. */
        if (f->lp[i] && f->slot_src[i] >= 0)
            rf->lp[i] = source_recipe(B, f->lp[i], f->slot_src[i]);
        else if ((rf->lp[i] = recipe_of(B, f->lp[i])) < 0)
            return -1;
    }
    for (int i = 0; i < f->sp; i++) {
        if ((rf->stack[i] = recipe_of(B, f->stack[i])) < 0)
            return -1;
    }
    rf->ret_a = -1;
    if (f->ret_a && (rf->ret_a = recipe_of(B, f->ret_a)) < 0)
        return -1;
    /* only continuations that need nothing but ret_a and ret_arg can resume */
    if (f->ret && f->ret != cap_ret_push && f->ret != cap_ret_init && f->ret != cap_ret_discard &&
        f->ret != cap_ret_contains)
        return fail(B, "a frame running a special method", NULL);
    return 0;
}

static void free_rframes(cap_rframe *fr, int n)
{
    for (int i = 0; i < n; i++) {
        free(fr[i].lp);
        free(fr[i].stack);
        free(fr[i].module_path);
        Py_XDECREF(fr[i].kwnames);
        cap_code_unref(fr[i].code);
    }
    free(fr);
}

/* The sources a call must evaluate: those guards, recipes and graph inputs
 * read, and their ancestors. The rest were only stepped through while
 * tracing (a bound method whose function and self are guarded, ...). */
static void mark_needed(cap_entry *e)
{
    e->src_needed = calloc((size_t)e->nsrc + 1, 1);
    for (int i = 0; i < e->nguards; i++)
        if (e->guards[i].src >= 0)
            e->src_needed[e->guards[i].src] = 1;
    for (int i = 0; i < e->nrecipes; i++)
        if (e->recipes[i].kind == CAP_R_SOURCE && e->recipes[i].index >= 0)
            e->src_needed[e->recipes[i].index] = 1;
    for (int i = 0; e->graph && i < e->graph->ninputs; i++)
        if (e->input_src[i] >= 0)
            e->src_needed[e->input_src[i]] = 1;
    for (int i = e->nsrc - 1; i >= 0; i--)
        if (e->src_needed[i] && e->src[i].parent >= 0)
            e->src_needed[e->src[i].parent] = 1;
}

/* The size relations outlive the trace's arena (its graph may be dropped). */
static void keep_symbols(cap_entry *e, cap_trace *T)
{
    e->syms = T->syms;
    for (int i = 0; i < e->nguards; i++)
        if (e->guards[i].kind == CAP_G_SYM) {
            if (!e->sym_arena)
                e->sym_arena = ptc_arena_new();
            e->guards[i].expr = ptc_dim_copy(e->sym_arena, e->guards[i].expr);
        }
    for (int i = 0; i < e->syms.n; i++) {
        if (e->syms.plus[i].sym) {
            if (!e->sym_arena)
                e->sym_arena = ptc_arena_new();
            e->syms.plus[i] = ptc_dim_copy(e->sym_arena, e->syms.plus[i]);
        }
    }
}

static void guard_strings(cap_entry *e)
{
    e->guard_strs = PyList_New(0);
    for (int i = 0; e->guard_strs && i < e->nguards; i++) {
        char buf[600];
        cap_guard_str(e->src, e->nsrc, &e->guards[i], buf, sizeof buf);
        PyObject *s = PyUnicode_FromString(buf);
        if (s)
            PyList_Append(e->guard_strs, s);
        Py_XDECREF(s);
    }
    PyErr_Clear();
}

/* The end of the segment as recipes: the value it returned, or every frame
 * of the interpreter's stack at its break. On failure *unreconstructable is
 * the depth of the frame whose state cannot be rebuilt (0: the value). */
static int end_recipes(builder *B, cap_entry *e, cap_interp *I, int rc, int *unreconstructable)
{
    if (rc == CAP_DONE) {
        e->end = CAP_END_RETURN;
        B->escape = true;
        if ((e->ret = recipe_of(B, I->result)) < 0) {
            if (B->failed) /* the outermost frame returns it: runs for real */
                *unreconstructable = 0;
            return -1;
        }
        B->escape = false;
        return 0;
    }
    e->end = CAP_END_BREAK;
    e->brk = B->T->brk;
    cap_frame *chain[256];
    int n = 0;
    for (cap_frame *f = I->frame; f && n < 256; f = f->parent)
        chain[n++] = f;
    e->nframes = n;
    e->frames = calloc((size_t)n, sizeof *e->frames);
    for (int d = 0; d < n; d++) {
        B->frame = d;
        if (frame_recipe(B, chain[n - 1 - d], &e->frames[d]) < 0) {
            if (B->failed)
                *unreconstructable = d;
            return -1;
        }
    }
    B->frame = -1;
    return 0;
}

/* The side effects the trace logged on outside objects, as recipes of their
 * object, key and value (replay.c makes them after the graph). */
static int effect_recipes(builder *B, cap_entry *e)
{
    PyObject *effects = B->T->effects;
    Py_ssize_t neff = PyList_Size(effects);
    e->effects = calloc((size_t)neff + 1, sizeof *e->effects);
    for (Py_ssize_t i = 0; i < neff; i++) {
        PyObject *eff = PyList_GetItem(effects, i); /* (kind, obj, key, value) */
        cap_effect *x = &e->effects[e->neffects++];
        x->kind = (uint8_t)PyLong_AsLong(PyTuple_GetItem(eff, 0));
        x->key = x->value = -1;
        if ((x->obj = recipe_of(B, PyTuple_GetItem(eff, 1))) < 0)
            return -1;
        if (cap_effect_has_key(x->kind) && (x->key = recipe_of(B, PyTuple_GetItem(eff, 2))) < 0)
            return -1;
        B->escape = true; /* the values stored become the user's */
        if (cap_effect_has_value(x->kind) && (x->value = recipe_of(B, PyTuple_GetItem(eff, 3))) < 0)
            return -1;
        B->escape = false;
    }
    return 0;
}

/* The cuts noted while tracing (trace_split.c), as node ids: ascending, as
 * the trace made them. */
static int take_cuts(cap_entry *e, cap_trace *T)
{
    Py_ssize_t n = T->cuts ? PyList_Size(T->cuts) : 0;
    if (n == 0)
        return 0;
    if (!(e->cut_at = malloc(sizeof *e->cut_at * (size_t)n))) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        e->cut_at[i] = (int)PyLong_AsLong(PyTuple_GetItem(PyList_GetItem(T->cuts, i), 0));
    e->ncuts = (int)n;
    return 0;
}

/* Eager's strides of the graph's outputs, asked of the trace while it still
 * knows how each was made. */
static int take_output_strides(cap_entry *e, cap_trace *T)
{
    const ptc_graph *g = T->g;
    bool any = false;
    if (!(e->out_strides = calloc((size_t)g->noutputs + 1, sizeof *e->out_strides))) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < g->noutputs; i++) {
        e->out_strides[i].known = cap_value_strides(T, g->outputs[i], e->out_strides[i].st);
        any = any || e->out_strides[i].known;
    }
    if (!any) {
        free(e->out_strides);
        e->out_strides = NULL;
    }
    return 0;
}

/* The intermediate a returned view was taken of, following view ops down
 * to a value no view op made (or a *_like's own layout), or NULL: v is no
 * view, or one of an input, of another output, or of symbolic sizes. */
static ptc_value *view_base(builder *B, ptc_value *v)
{
    ptc_value *base = v;
    for (int n = 0; n < 64 && base->def && cap_op_returns_view(base->def->op) &&
                    !cap_made_like(B->T, base->def);
         n++) {
        base = base->def->args[0].v;
        for (int i = 0; i < B->nouts; i++)
            if (B->outs[i] == base)
                return NULL;
    }
    bool static_sizes = ptc_ttype_is_static(&v->type) && ptc_ttype_is_static(&base->type);
    return base != v && base->def && static_sizes ? base : NULL;
}

static int64_t elements(const ptc_ttype *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d].value;
    return n;
}

/* A returned view that covers only part of an intermediate (ones_like(x)[0],
 * (x * 2)[:, 1]) is eager's view of that whole tensor, with its strides and
 * storage offset: the graph returns the intermediate too, after the outputs
 * the recipes read, and the backend remakes the view from it
 * (cap_eager_plan_aliases), as torch.compile returns such a view's base. */
static void add_view_bases(builder *B)
{
    int returned = B->nouts;
    for (int i = 0; i < returned; i++) {
        ptc_value *base = view_base(B, B->outs[i]);
        if (base && elements(&B->outs[i]->type) < elements(&base->type))
            output_index(B, base);
    }
}

/* The graph, its outputs set and dead nodes dropped, is verified and moves
 * from the trace to the entry with what is kept per input and per node. An
 * empty graph stays with the trace (the entry has none). */
static int take_graph(builder *B, cap_entry *e)
{
    cap_trace *T = B->T;
    ptc_value *none[1] = {NULL};
    add_view_bases(B);
    ptc_graph_set_outputs(T->g, B->nouts ? B->outs : none, B->nouts);
    dce(T->g);
    if (T->g->nnodes == 0)
        return 0;
    ptc_error err;
    if (ptc_ops_verify(T->g, PTC_STAGE_TORCH, &err) < 0) {
        char buf[1200];
        ptc_error_format(&err, buf, sizeof buf);
        PyErr_Format(cap_InternalError, "ptc: the captured graph does not verify: %s", buf);
        return -1;
    }
    if (take_output_strides(e, T) < 0)
        return -1;
    e->graph = T->g;
    e->graph->shape_env = NULL; /* it answers from the trace, which ends here */
    T->g = NULL;
    e->node_grad = T->node_grad;
    T->node_grad = NULL;
    if (take_cuts(e, T) < 0)
        return -1;
    e->input_src = T->input_src;
    T->input_src = NULL;
    int ni = e->graph->ninputs;
    e->input_const = calloc((size_t)ni + 1, sizeof *e->input_const);
    for (int i = 0; i < ni; i++) {
        PyObject *c = PyList_GetItem(T->input_const, i);
        e->input_const[i] = c != Py_None ? Py_NewRef(c) : NULL;
    }
    return 0;
}

/* Sources and guards move from the trace to the entry. */
static void take_sources(cap_entry *e, cap_trace *T)
{
    e->nsrc = T->nsrc;
    e->src = T->src;
    e->nguards = T->nguards;
    e->guards = T->guards;
    for (int i = 0; i < T->nsrc; i++)
        Py_CLEAR(T->src_val[i]);
    T->src = NULL;
    T->guards = NULL;
    T->nsrc = T->nguards = 0;
}

/* What the builder holds besides its recipes (those go to the entry). */
static void builder_clear(builder *B)
{
    free(B->outs);
    Py_XDECREF(B->memo);
    Py_XDECREF(B->keep);
    Py_XDECREF(B->cells);
}

cap_entry *cap_entry_build(cap_trace *T, cap_interp *I, int rc, int *unreconstructable)
{
    builder B = {.T = T, .memo = PyDict_New(), .keep = PyList_New(0), .cells = PyList_New(0), .frame = -1};
    cap_entry *e = calloc(1, sizeof *e);
    *unreconstructable = -1;
    if (!e || !B.memo || !B.keep || !B.cells)
        goto fail;
    e->refs = 1;
    e->grad_start = T->grad_at_start;
    e->grad_end = T->grad_enabled;
    e->amp_start = cap_amp_pack(&T->amp_at_start);
    e->amp_end = cap_amp_pack(&T->amp);
    if (end_recipes(&B, e, I, rc, unreconstructable) < 0 || effect_recipes(&B, e) < 0)
        goto fail;
    B.escape = rc == CAP_DONE; /* what a returned closure holds is the user's too */
    int cell_frame = -1;
    if (fill_cells(&B, &cell_frame) < 0) {
        if (B.failed)
            *unreconstructable = rc == CAP_DONE ? 0 : cell_frame;
        goto fail;
    }
    B.escape = false;
    if (cap_t_identity_guards(T) < 0 || cap_t_alias_guards(T) < 0 || writeback_outputs(&B, e) < 0 ||
        take_graph(&B, e) < 0)
        goto fail;
    take_sources(e, T);
    keep_symbols(e, T);
    e->nrecipes = B.n;
    e->recipes = B.r;
    e->skipped = Py_NewRef(T->skipped);
    mark_needed(e);
    guard_strings(e);
    builder_clear(&B);
    return e;
fail:
    if (e) {
        e->nrecipes = B.n;
        e->recipes = B.r;
        B.r = NULL;
        cap_entry_unref(e);
    }
    free(B.r);
    builder_clear(&B);
    if (B.failed && !PyErr_Occurred())
        PyErr_Format(cap_InternalError, "ptc: cannot rebuild state: %s", B.why);
    return NULL;
}

cap_entry *cap_entry_ref(cap_entry *e)
{
    e->refs++;
    return e;
}

static void entry_free(cap_entry *e)
{
    if (e->free_bstate)
        e->free_bstate(e);
    for (int i = 0; i < e->nsrc; i++)
        Py_XDECREF(e->src[i].key);
    for (int i = 0; i < e->nguards; i++) {
        Py_XDECREF(e->guards[i].obj);
        cap_code_unref(e->guards[i].code);
        if (e->guards[i].tm) {
            Py_XDECREF(e->guards[i].tm->type);
            Py_XDECREF(e->guards[i].tm->dtype);
            free(e->guards[i].tm);
        }
    }
    free(e->src);
    free(e->guards);
    free(e->writeback);
    if (e->sym_arena)
        ptc_arena_free(e->sym_arena);
    free(e->src_needed);
    Py_XDECREF(e->tensor_guards);
    Py_XDECREF(e->stats);
    free(e->tensor_gi);
    for (int i = 0; e->param_seen && i < e->nguards; i++)
        Py_XDECREF(e->param_seen[i]);
    free(e->param_seen);
    free(e->clsmemo);
    free(e->hints);
    free(e->dcache);
    for (int i = 0; e->kept && i < e->nsrc; i++)
        Py_XDECREF(e->kept[i]);
    free(e->kept);
    cap_entry_snap_clear(e);
    free(e->trust);
    for (int i = 0; i < e->nrecipes; i++) {
        free(e->recipes[i].items);
        Py_XDECREF(e->recipes[i].obj);
    }
    free(e->recipes);
    if (e->graph) {
        for (int i = 0; i < e->graph->ninputs; i++)
            Py_XDECREF(e->input_const[i]);
        ptc_graph_free(e->graph);
    }
    free(e->input_const);
    free(e->out_strides);
    free(e->input_src);
    free(e->node_grad);
    free(e->cut_at);
    Py_XDECREF(e->piece_list);
    free_rframes(e->frames, e->nframes);
    free(e->effects);
    Py_XDECREF(e->guard_strs);
    Py_XDECREF(e->skipped);
    free(e);
}

void cap_entry_unref(cap_entry *e)
{
    if (e && --e->refs == 0)
        entry_free(e);
}
