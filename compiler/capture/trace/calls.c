/* Tracing calls: what happens to `callable(args)` while tracing.
 *
 * In order: symbolic-tensor methods and mapped torch functions record ops;
 * bound methods are unwrapped; builtins that only move values around (len,
 * isinstance, getattr, zip, enumerate, sorted, ...) are evaluated with the
 * guards their answers depend on (builtins.c); nn.Module calls inline forward (or
 * torch's _call_impl when hooks are registered); Python functions and
 * __init__/__call__ of Python classes are inlined; C functions known to be
 * pure run for real; anything else is a graph break that runs the call for
 * real between two graphs. Callbacks invoked from inside a builtin (a key
 * function, the function given to map) are traced synchronously in a nested
 * run (sync_calls.c); a break inside one becomes a break at the builtin's call.
 */
#include "capture/trace/trace.h"

#include <string.h>

/* ---- classes ------------------------------------------------------------------------------ */

/* The arguments of a call made here sit in a buffer on the C stack of this
 * many slots; a call with more is a graph break (ptc's own bound, far above
 * what calls pass). prepend() takes ARGS_MAX - 2 arguments besides its first. */
enum { ARGS_MAX = 64 };

/* buf = (first, *args); false when they do not fit (a break of the caller's). */
static bool prepend(PyObject **buf, PyObject *first, PyObject *const *args, int nargs)
{
    if (nargs > ARGS_MAX - 2)
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
    PyObject *buf[ARGS_MAX];
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
        PyObject *buf[ARGS_MAX];
        if (!prepend(buf, cls, args, nargs))
            return too_many_args(I->T);
        int rc = cap_call_inline(I, mcall, buf, nargs + 1, kwnames, cap_ret_push);
        if (rc != CAP_NEXT)
            return rc;
    }
    return cap_t_call_real_flowed(I->T, cls, args, nargs, kwnames, out);
}

/* __new__ traced in a nested run; __init__ inlined on its result when that
 * is an instance of cls (as type.__call__ does). */
static int new_then_init(cap_interp *I, PyObject *cls, PyObject *newfn, PyObject *initf,
                         PyObject *const *args, int nargs, PyObject *kwnames, PyObject **out)
{
    PyObject *buf[ARGS_MAX], *obj = NULL;
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
    PyObject *buf[ARGS_MAX];
    if (!prepend(buf, cls, args, nargs))
        return too_many_args(I->T);
    int rc = cap_call_inline(I, newfn, buf, nargs + 1, kwnames, cap_ret_push);
    if (rc != CAP_NEXT)
        return rc;
    return cap_t_call_real_flowed(I->T, cls, args, nargs, kwnames, out);
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
        return cap_t_call_real_flowed(T, cls, args, nargs, kwnames, out);
    return c_new_then_init(I, cls, initf, args, nargs, kwnames, out);
}

/* ---- C callables -------------------------------------------------------------------------- */

static const char *read_only_methods[] = {
    "get", "keys", "values", "items", "copy", "index", "count", "__contains__", "__len__",
    "__getitem__", "__iter__", "startswith", "endswith", "union", "intersection", "difference",
    "symmetric_difference", "issubset", "issuperset", "isdisjoint", NULL,
};

static bool is_read_only(const char *name)
{
    return cap_name_index(name, read_only_methods) >= 0;
}

/* A method of an outside dict/list: reads go through the tracer. */

/* Whether a set's method of that name answers the same whatever order the
 * set iterates in (a copy or a union of it iterates as its table does). */
static bool order_free_set_read(const char *name)
{
    static const char *const names[] = {"__contains__", "__len__", "isdisjoint", "issubset",
                                        "issuperset", "__eq__", "__ne__", "__le__", "__lt__",
                                        "__ge__", "__gt__", NULL};
    return cap_name_index(name, names) >= 0;
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
    int rc = cap_t_current(I, &self); /* written in this trace: a break */
    if (rc != CAP_NEXT)
        return rc;
    PyObject *items = cap_t_stored_items(I->T, self);
    *out = items ? cap_t_dict_as_its_type(I, self, items) : NULL;
    Py_XDECREF(items);
    return *out ? CAP_NEXT : CAP_ERR;
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
        if (PyAnySet_Check(self) && strcmp(name, "pop") == 0)
            return cap_t_break(T, CAP_B_MUTATE_OUTSIDE,
                               "set.pop() of a set from outside: the item it takes depends on where "
                               "its last pop stopped, which Python does not expose");
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
    PyObject *orig = self;
    if (cap_t_current(I, &self) != CAP_NEXT)
        return CAP_ERR;
    if (PyAnySet_Check(orig) && !order_free_set_read(name)) {
        int rc = cap_t_written_set_read(T, orig, self);
        if (rc != CAP_NEXT)
            return rc;
    }
    PyObject *copy = cap_t_stored_items(T, self);
    if (!copy)
        return CAP_ERR;
    /* a copy is a plain list, tuple or dict (so is the trace's shadow of
       one it wrote, a set's too): its method of that name is the one the
       program called */
    PyObject *m = PyAnySet_Check(copy) && !PySet_CheckExact(copy) && !PyFrozenSet_CheckExact(copy)
                      ? bound_to(callable, copy)
                      : PyObject_GetAttrString(copy, name);
    int rc = m ? cap_t_call_real_flowed(T, m, args, nargs, kwnames, out) : CAP_ERR;
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

/* ---- updates from lazy iterators -------------------------------------------------- */

/* list.extend, set.update, set.difference_update and dict.update consume an
 * iterator argument item by item, as CPython does, so that code under it (a
 * generator's body) sees the items added so far: each item goes through the
 * base type's one-item method (append, add, discard, __setitem__), which
 * logs writes to an outside container as usual. A break or an uncaught
 * error reruns the call for real from its start, the trace made again up to
 * it (cap_t_rerun_from_start), so none of its writes happened. */
static const char *const lazy_updates[][2] = {
    {"extend", "append"},
    {"update", "add"},
    {"difference_update", "discard"},
    {"update", "__setitem__"},
};

/* The one-item method of self.name(...) (a descriptor of self's base
 * type), where an argument is one of ptc's iterators or is iterated by a
 * Python __iter__; else NULL. */
static PyObject *one_item_method(PyObject *self, const char *name, PyObject *const *args, int nargs,
                                 PyObject *kwnames)
{
    PyTypeObject *base = PyList_Check(self) ? &PyList_Type
                         : PySet_Check(self) ? &PySet_Type
                         : PyDict_Check(self) ? &PyDict_Type : NULL;
    int row = base == &PyList_Type ? 0 : base == &PyDict_Type ? 3 : 1;
    int npos = nargs - (kwnames ? (int)PyTuple_Size(kwnames) : 0);
    bool lazy = false; /* dict.update reads a mapping by its keys(), not by iteration */
    for (int a = 0; a < npos; a++)
        lazy = lazy || cap_is_ptc_iter(args[a]) ||
               (base != &PyDict_Type && cap_t_iterates_in_python(args[a]));
    bool keywords = npos < nargs;
    if (!base || !lazy || (keywords && base != &PyDict_Type) || (base != &PySet_Type && npos != 1))
        return NULL;
    if (row == 1 && strcmp(name, lazy_updates[2][0]) == 0)
        row = 2;
    if (strcmp(name, lazy_updates[row][0]) != 0)
        return NULL;
    return PyObject_GetAttrString((PyObject *)base, lazy_updates[row][1]);
}

/* The (key, value) of dict.update's item number k, as CPython unpacks it. */
static int update_pair(cap_trace *T, PyObject *item, Py_ssize_t k, PyObject *kv[2])
{
    if (cap_is_tensor(item) || cap_is_ptc_iter(item))
        return cap_t_break(T, CAP_B_TENSOR_DATA, "dict.update() item that is a %s",
                           cap_tpname(Py_TYPE(item)));
    PyObject *seq = PySequence_Fast(item, "");
    if (!seq) {
        PyErr_Format(PyExc_TypeError,
                     "cannot convert dictionary update sequence element #%zd to a sequence", k);
        return CAP_ERR;
    }
    Py_ssize_t n = PySequence_Size(seq);
    if (n != 2) {
        Py_DECREF(seq);
        if (n >= 0)
            PyErr_Format(PyExc_ValueError,
                         "dictionary update sequence element #%zd has length %zd; 2 is required",
                         k, n);
        return CAP_ERR;
    }
    kv[0] = PySequence_GetItem(seq, 0);
    kv[1] = kv[0] ? PySequence_GetItem(seq, 1) : NULL;
    Py_DECREF(seq);
    if (!kv[1]) {
        Py_CLEAR(kv[0]);
        return CAP_ERR;
    }
    return CAP_NEXT;
}

/* method(self, item) (dict: method(self, key, value)) for each item of obj. */
static int update_from(cap_interp *I, PyObject *method, PyObject *self, PyObject *obj)
{
    PyObject *it = NULL, *v = NULL, *none = NULL;
    int rc = cap_t_iter_sync(I, obj, &it);
    for (Py_ssize_t k = 0; rc == CAP_NEXT && (rc = cap_t_next_sync(I, it, &v)) == CAP_NEXT && v;
         k++) {
        PyObject *call[3] = {self, v, NULL};
        if (PyDict_Check(self) && (rc = update_pair(I->T, v, k, call + 1)) == CAP_NEXT) {
            rc = cap_t_call_sync(I, method, call, 3, NULL, &none);
            Py_DECREF(call[1]);
            Py_DECREF(call[2]);
        } else if (!PyDict_Check(self)) {
            rc = cap_t_call_sync(I, method, call, 2, NULL, &none);
        }
        Py_CLEAR(none);
        Py_CLEAR(v);
    }
    Py_XDECREF(it);
    return rc;
}

/* dict.update's keywords, after its positional argument. */
static int update_keywords(cap_interp *I, PyObject *method, PyObject *self, PyObject *const *values,
                           PyObject *kwnames)
{
    int rc = CAP_NEXT;
    for (Py_ssize_t k = 0; kwnames && rc == CAP_NEXT && k < PyTuple_Size(kwnames); k++) {
        PyObject *call[3] = {self, PyTuple_GetItem(kwnames, k), values[k]}, *none = NULL;
        rc = cap_t_call_sync(I, method, call, 3, NULL, &none);
        Py_XDECREF(none);
    }
    return rc;
}

/* set.symmetric_difference_update and intersection_update of lazy
 * iterators: CPython first makes a set of each, so their items are taken
 * whole (traced), and the call goes on with lists of them, which CPython
 * reads in the same order. */
static int update_from_drained(cap_interp *I, PyObject *self, const char *name,
                               PyObject *const *args, int nargs, PyObject **out)
{
    PyObject *call[ARGS_MAX] = {self};
    int rc = CAP_NEXT, n = 1;
    if (nargs + 1 > ARGS_MAX)
        return too_many_args(I->T);
    cap_iter_marks marks;
    cap_iter_mark(&marks, args, nargs);
    for (int a = 0; a < nargs && rc == CAP_NEXT; a++, n++)
        call[n] = cap_is_ptc_iter(args[a]) ? cap_t_materialize(I, args[a], &rc)
                                           : Py_NewRef(args[a]);
    PyObject *method =
        rc == CAP_NEXT ? PyObject_GetAttrString((PyObject *)&PySet_Type, name) : NULL;
    if (method)
        rc = cap_t_call(I, method, call, n, NULL, out);
    else if (rc == CAP_NEXT)
        rc = CAP_ERR;
    Py_XDECREF(method);
    for (int k = 1; k < n; k++)
        Py_XDECREF(call[k]);
    return cap_iter_rewind(I, &marks, rc);
}

static bool drains_first(PyObject *self, const char *name, PyObject *const *args, int nargs,
                         PyObject *kwnames)
{
    bool lazy = false;
    for (int a = 0; a < nargs; a++)
        lazy = lazy || cap_is_ptc_iter(args[a]);
    return lazy && !kwnames && PySet_Check(self) &&
           (strcmp(name, "symmetric_difference_update") == 0 ||
            strcmp(name, "intersection_update") == 0);
}

static int update_lazily(cap_interp *I, PyObject *method, PyObject *self, PyObject *const *args,
                         int nargs, PyObject *kwnames, PyObject **out)
{
    int npos = nargs - (kwnames ? (int)PyTuple_Size(kwnames) : 0), rc = CAP_NEXT;
    cap_iter_marks marks;
    cap_iter_mark(&marks, args, npos);
    for (int a = 0; a < npos && rc == CAP_NEXT; a++)
        rc = update_from(I, method, self, args[a]);
    if (rc == CAP_NEXT)
        rc = update_keywords(I, method, self, args + npos, kwnames);
    if (cap_t_reruns(I, rc))
        cap_t_rerun_from_start(I);
    rc = cap_iter_rewind(I, &marks, rc);
    if (rc == CAP_NEXT)
        *out = Py_NewRef(Py_None);
    return rc;
}

int cap_t_list_iadd(cap_interp *I, PyObject *list, PyObject *items)
{
    if (!cap_is_ptc_iter(items) && !cap_t_iterates_in_python(items))
        return CAP_NONE;
    PyObject *one_item = one_item_method(list, "extend", &items, 1, NULL), *none = NULL;
    int rc = one_item ? update_lazily(I, one_item, list, &items, 1, NULL, &none) : CAP_ERR;
    Py_XDECREF(one_item);
    Py_XDECREF(none);
    return rc;
}

/* The object a C callable is bound to: a builtin method's self, a
 * method-wrapper's (*held: a new reference), or a method descriptor's first
 * argument, taken off args. NULL for a plain C function. */
static PyObject *c_self(PyObject *callable, PyObject *const **args, int *nargs, PyObject **held)
{
    *held = NULL;
    if (PyCFunction_Check(callable))
        return PyCFunction_GetSelf(callable);
    if (Py_TYPE(callable) == (PyTypeObject *)cap_P.MethodWrapperType) {
        *held = PyObject_GetAttr(callable, cap_P.s_self);
        PyErr_Clear();
        return *held;
    }
    if ((PyObject_TypeCheck(callable, &PyMethodDescr_Type) ||
         PyObject_TypeCheck(callable, &PyWrapperDescr_Type)) &&
        *nargs > 0) {
        PyObject *self = (*args)[0];
        (*args)++, (*nargs)--;
        return self;
    }
    return NULL;
}

/* object.__getattribute__(obj, name), __setattr__, __delattr__ (as super()
 * calls them), on an object that is not a symbolic tensor. */
static bool object_attr_slot(PyObject *callable, PyObject *self, const char *name,
                             PyObject *const *args, int nargs, PyObject *kwnames)
{
    if (!self)
        return false;
    PyObject *objclass = PyObject_GetAttrString(callable, "__objclass__");
    PyErr_Clear();
    bool on_object = objclass == (PyObject *)&PyBaseObject_Type;
    Py_XDECREF(objclass);
    return on_object && !cap_is_tensor(self) && !kwnames &&
           (strcmp(name, "__getattribute__") == 0 || strcmp(name, "__setattr__") == 0 ||
            strcmp(name, "__delattr__") == 0) &&
           nargs >= 1 && PyUnicode_Check(args[0]);
}

/* Those slots traced as the generic lookup. */
static int object_attr_call(cap_interp *I, PyObject *self, const char *name, PyObject *const *args,
                            int nargs, PyObject **out)
{
    int rc;
    if (name[2] == 'g' && nargs == 1)
        rc = cap_t_getattr_generic(I, self, args[0], out);
    else if (name[2] == 's' && nargs == 2 &&
             (rc = cap_t_setattr_generic(I, self, args[0], args[1])) == CAP_NEXT)
        *out = Py_NewRef(Py_None);
    else if (name[2] == 'd' && nargs == 1 &&
             (rc = cap_t_setattr_generic(I, self, args[0], NULL)) == CAP_NEXT)
        *out = Py_NewRef(Py_None);
    else
        rc = cap_t_break(I->T, CAP_B_UNSUPPORTED_CALL, "object.%s with unusual arguments", name);
    return rc;
}

/* object.__new__(cls), tuple.__new__(cls, items) (namedtuples) and the like
 * only allocate: made for real, with the trace's values. */
static bool allocating_new(PyObject *self, const char *name, PyObject *const *args, int nargs)
{
    return self && PyType_Check(self) && strcmp(name, "__new__") == 0 && nargs >= 1 &&
           PyType_Check(args[0]) &&
           PyType_IsSubtype((PyTypeObject *)args[0], (PyTypeObject *)self) && plain_new(self) &&
           cap_t_first_tensor(args + 1, nargs - 1) < 0;
}

/* A C method of an object (neither a module nor a class): a break on
 * tensors and outside objects other than containers, run for real on
 * objects the trace made. by_self: callable is already bound to self. */
static int c_method_call(cap_interp *I, PyObject *callable, PyObject *self, bool by_self,
                         const char *name, PyObject *const *args, int nargs, PyObject *kwnames,
                         PyObject **out)
{
    cap_trace *T = I->T;
    if (Py_TYPE(self) == cap_lazy_type) {
        int rc = cap_t_generator_method(I, (cap_lazy *)self, name, args, nargs, kwnames, out);
        if (rc != CAP_NONE)
            return rc;
    }
    if (cap_is_tensor(self))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "Tensor.%s", name);
    PyObject *one_item = one_item_method(self, name, args, nargs, kwnames);
    if (one_item) {
        int rc = update_lazily(I, one_item, self, args, nargs, kwnames, out);
        Py_DECREF(one_item);
        return rc;
    }
    if (PyErr_Occurred())
        return CAP_ERR;
    if (drains_first(self, name, args, nargs, kwnames))
        return update_from_drained(I, self, name, args, nargs, out);
    if (PyObject_TypeCheck(self, (PyTypeObject *)cap_T.Tensor)) {
        char what[80];
        snprintf(what, sizeof what, "Tensor.%s", name);
        return cap_t_real_tensor(T, self, what);
    }
    if (cap_t_outside(T, self) && !cap_is_constant(self)) {
        if (PyDict_Check(self) || PyList_Check(self) || PyTuple_Check(self) || PyAnySet_Check(self))
            return outside_container_method(I, callable, self, name, args, nargs, kwnames, out);
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "%s.%s() on an object from outside",
                           cap_tpname(Py_TYPE(self)), name);
    }
    PyObject *m = PyCFunction_Check(callable) || by_self ? Py_NewRef(callable)
                                                         : PyObject_GetAttrString(self, name);
    int rc = m ? cap_t_call_real_flowed(T, m, args, nargs, kwnames, out) : CAP_ERR;
    Py_XDECREF(m);
    return rc;
}

/* A C function (or a method of a module or class): run for real when ptc
 * knows it pure (a break when it writes an outside argument), else a break. */
static int c_function_call(cap_trace *T, PyObject *callable, const char *name,
                           PyObject *const *args, int nargs, PyObject *kwnames, PyObject **out)
{
    if (cap_is_pure_fn(callable)) {
        int npos = nargs - (kwnames ? (int)PyTuple_Size(kwnames) : 0);
        if (npos > 0 && cap_pure_fn_writes(callable) && cap_t_outside(T, args[0]) &&
            !cap_is_constant(args[0]))
            return cap_t_break(T, CAP_B_MUTATE_OUTSIDE, "%s() writes a %s from outside", name,
                               cap_tpname(Py_TYPE(args[0])));
        return cap_t_call_real_flowed(T, callable, args, nargs, kwnames, out);
    }
    PyObject *mod = PyObject_GetAttr(callable, cap_P.s_module);
    PyErr_Clear();
    int rc = cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "call to %s%s%s",
                         mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : "",
                         mod && PyUnicode_Check(mod) ? "." : "", name);
    Py_XDECREF(mod);
    return rc;
}

static int c_callable(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out)
{
    if (PyDict_Check(cap_P.builtins) &&
        callable == PyDict_GetItemString(cap_P.builtins, "__build_class__"))
        return cap_t_build_class(I, callable, args, nargs, kwnames, out);
    int twin = cap_t_call_operator(I, callable, args, nargs, kwnames, out);
    if (twin != CAP_NONE)
        return twin;
    const char *name = "?";
    PyObject *nm = PyObject_GetAttr(callable, cap_P.s_name);
    if (nm && PyUnicode_Check(nm))
        name = PyUnicode_AsUTF8(nm);
    PyErr_Clear();
    PyObject *held;
    PyObject *self = c_self(callable, &args, &nargs, &held);
    int rc;
    if (object_attr_slot(callable, self, name, args, nargs, kwnames))
        rc = object_attr_call(I, self, name, args, nargs, out);
    else if (allocating_new(self, name, args, nargs))
        rc = cap_t_call_real_flowed(I->T, callable, args, nargs, kwnames, out);
    else if (self && !PyModule_Check(self) && !PyType_Check(self))
        rc = c_method_call(I, callable, self, held != NULL, name, args, nargs, kwnames, out);
    else
        rc = c_function_call(I->T, callable, name, args, nargs, kwnames, out);
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

/* Is fn written in the logging module (Logger.warning, logging.info,
 * Handler.emit, ...)? Inlined, its locks, clocks and stream writes were a
 * break each (15 for one logger.warning); it is I/O, so it runs for real
 * as one call. */
static bool logging_function(PyObject *fn)
{
    static PyObject *logging_dict;
    if (!logging_dict) {
        PyObject *m = PyImport_ImportModule("logging");
        logging_dict = m ? PyModule_GetDict(m) : NULL; /* the module is kept in sys.modules */
        Py_XDECREF(m);
        if (!logging_dict) {
            PyErr_Clear();
            return false;
        }
    }
    if (!cap_is_function(fn))
        return false;
    PyObject *globals = PyObject_GetAttr(fn, cap_P.s_globals);
    Py_XDECREF(globals); /* the function keeps it */
    PyErr_Clear();
    return globals == logging_dict;
}

/* A method of a torch.optim optimizer (step, with its profiling and grad-mode
 * wrappers): it reads every parameter's .grad, which a compiled backward
 * has just written, and updates parameters and its state in place, so it
 * runs as one call at a break, as loss.backward() does, instead of breaking
 * at each .grad read and state write inside it (step: ptc's compiled update
 * where it can, optim_step.c). */
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
    if (optimizer_method(fn, args, nargs) || cap_t_is_lr_scheduler_step(fn))
        return cap_t_optimizer_step(I, fn, args, nargs, kwnames);
    int made = cap_t_class_factory_call(T, fn, args, nargs, kwnames, out);
    if (made != CAP_NONE)
        return made;
    int copied = cap_t_copy_call(I, fn, args, nargs, kwnames, out);
    if (copied != CAP_NONE)
        return copied;
    const char *opaque = opaque_python(fn);
    if (opaque)
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "%s (runs for real as one call)", opaque);
    if (logging_function(fn))
        return cap_t_break(T, CAP_B_PRINT, "logging's %s (runs for real as one call)",
                           cap_func_name(fn));
    PyObject *code = PyObject_GetAttr(fn, cap_P.s_code);
    cap_code *c = code ? cap_code_get(code) : NULL;
    Py_XDECREF(code);
    if (!c)
        return CAP_ERR;
    if (c->notrace) {
        if (c->genexpr)
            return make_genexpr(I, fn, args, nargs, kwnames, out);
        if (c->genfunc)
            return cap_t_generator_call(I, fn, c, args, nargs, kwnames, out);
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
 * and dicts this trace wrote replaced by their shadows (buf: ARGS_MAX entries). */
static int current_args(cap_interp *I, PyObject *const **args, int nargs, PyObject **buf)
{
    if (PyDict_Size(I->T->mut) == 0 || nargs > ARGS_MAX)
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

/* The mapping-table row of a torch callable, or of a Tensor method bound to
 * a symbolic tensor (*self: that tensor); NULL for other callables. */
static const cap_tmap *torch_row(PyObject *callable, PyObject **self)
{
    *self = NULL;
    if (Py_TYPE(callable) != cap_method_type)
        return cap_thooks.lookup_fn(callable);
    *self = ((cap_method *)callable)->self;
    return ((cap_method *)callable)->map;
}

/* A mapped torch call: the torch layer records it. */
static int call_mapped(cap_interp *I, const cap_tmap *row, PyObject *self, PyObject *const *args,
                       int nargs, PyObject *kwnames, PyObject **out)
{
    PyObject *current[ARGS_MAX];
    int rc = current_args(I, &args, nargs, current);
    return rc != CAP_NEXT ? rc : cap_thooks.call(I->T, row, self, args, nargs, kwnames, out);
}

/* obj.method(args) as method.__func__(obj, args). */
static int call_bound_method(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                             PyObject *kwnames, PyObject **out)
{
    PyObject *fn = PyObject_GetAttr(callable, cap_P.s_func);
    PyObject *self = PyObject_GetAttr(callable, cap_P.s_self);
    PyObject *buf[ARGS_MAX];
    int rc;
    if (!fn || !self)
        rc = CAP_ERR;
    else if (!prepend(buf, self, args, nargs))
        rc = too_many_args(I->T);
    else
        rc = cap_t_call(I, fn, buf, nargs + 1, kwnames, out);
    Py_XDECREF(fn);
    Py_XDECREF(self);
    return rc;
}

/* The exit of a `with torch.no_grad()` / autocast block the trace entered:
 * the mode before it comes back. */
static int exit_mode(cap_trace *T, cap_gradexit *g, PyObject **out)
{
    if (g->kind == CAP_EXIT_GRAD)
        T->grad_enabled = g->prev;
    if (g->kind == CAP_EXIT_AMP)
        T->amp = cap_amp_unpack(g->amp_prev);
    *out = Py_NewRef(Py_False);
    return CAP_NEXT;
}

static bool is_c_callable(PyObject *callable)
{
    return PyCFunction_Check(callable) || PyObject_TypeCheck(callable, &PyMethodDescr_Type) ||
           Py_TYPE(callable) == (PyTypeObject *)cap_P.MethodWrapperType ||
           PyObject_TypeCheck(callable, &PyWrapperDescr_Type) ||
           PyObject_TypeCheck(callable, &PyClassMethodDescr_Type);
}

static int call_partial(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                        PyObject *kwnames, PyObject **out)
{
    PyObject *fn = NULL, *pargs = NULL, *pkw = NULL;
    int rc = partial_parts(I, callable, &fn, &pargs, &pkw);
    if (rc != CAP_NEXT)
        return rc;
    rc = cap_t_call_partial(I, fn, pargs, pkw, args, nargs, kwnames, out);
    Py_DECREF(fn);
    Py_DECREF(pargs);
    Py_DECREF(pkw);
    return rc;
}

/* Objects that are neither functions, classes nor modules: partials, C
 * callables, lru_cache wrappers, instances with a Python __call__,
 * operator.attrgetter/itemgetter/methodcaller; anything else is a break. */
static int call_object(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                       PyObject *kwnames, PyObject **out)
{
    if (cap_is_partial(callable))
        return call_partial(I, callable, args, nargs, kwnames, out);
    if (is_c_callable(callable))
        return c_callable(I, callable, args, nargs, kwnames, out);
    int rc = cap_t_call_lru(I, callable, args, nargs, kwnames, out);
    if (rc != CAP_NONE)
        return rc;
    PyObject *call = cap_type_lookup(Py_TYPE(callable), cap_P.s_call);
    if (call && cap_is_function(call)) {
        PyObject *buf[ARGS_MAX];
        if (!prepend(buf, callable, args, nargs))
            return too_many_args(I->T);
        return call_function(I, call, buf, nargs + 1, kwnames, out);
    }
    if ((rc = cap_t_call_getter(I, callable, args, nargs, kwnames, out)) != CAP_NONE)
        return rc;
    return cap_t_break(I->T, CAP_B_UNSUPPORTED_CALL, "call to a %s", cap_tpname(Py_TYPE(callable)));
}

/* numpy's functions that ptc does not trace (torch_npfuncs.c has those it
 * does), given a traced array: a break that names the function, rather
 * than its Python code inlined or its C code run on a materialised array
 * without a word. CAP_NONE for other calls. */
static int untraced_numpy(cap_trace *T, PyObject *callable, PyObject *const *args, int nargs)
{
    int i = 0;
    while (i < nargs && !cap_is_traced_numpy(args[i]))
        i++;
    if (i == nargs)
        return CAP_NONE;
    PyObject *mod = PyObject_GetAttrString(callable, "__module__");
    PyObject *name = mod ? PyObject_GetAttr(callable, cap_P.s_name) : NULL;
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    int rc = CAP_NONE;
    if (m && n && (strcmp(m, "numpy") == 0 || strncmp(m, "numpy.", 6) == 0))
        rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s.%s on a traced array (not traced by ptc)",
                         strncmp(m, "numpy._core", 11) == 0 ? "numpy" : m, n);
    Py_XDECREF(mod);
    Py_XDECREF(name);
    PyErr_Clear();
    return rc;
}

int cap_t_call(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
               PyObject *kwnames, PyObject **out)
{
    PyObject *self;
    const cap_tmap *row = torch_row(callable, &self);
    int mapped = row ? call_mapped(I, row, self, args, nargs, kwnames, out) : CAP_NONE;
    if (mapped != CAP_NONE) /* CAP_NONE: a numpy function with no traced array runs as C code */
        return mapped;
    if ((mapped = untraced_numpy(I->T, callable, args, nargs)) != CAP_NONE)
        return mapped;
    if (cap_is_method(callable))
        return call_bound_method(I, callable, args, nargs, kwnames, out);
    if (Py_TYPE(callable) == cap_gradexit_type)
        return exit_mode(I->T, (cap_gradexit *)callable, out);
    int fb = cap_frame_builtin(I->frame, callable, args, nargs, kwnames, out);
    if (fb)
        return fb > 0 ? CAP_NEXT : CAP_ERR;
    int bid = cap_t_builtin_of(callable);
    if (bid)
        return cap_t_builtin(I, bid, callable, args, nargs, kwnames, out);
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
    return call_object(I, callable, args, nargs, kwnames, out);
}
