/* Tracing Python objects: attributes, items, iteration, globals and the
 * other ways values flow out of objects that existed before the call.
 *
 * Reads of an outside object produce outside values with derived sources
 * (self.conv1 is `_modules['conv1']` of self; a list item is its index), so
 * guards cover exactly what the trace looked at. Attribute lookup follows
 * Python's order (data descriptors, the instance dict, class attributes,
 * __getattr__), with nn.Module's parameters, buffers and submodules read from
 * their dicts directly, and properties and __getattr__ written in Python
 * inlined. Writes to outside objects are logged side effects where the
 * entry can replay them (effects.c), else graph breaks.
 */
#include "capture/trace/trace.h"

#include <string.h>

/* Library code whose module attributes and globals are taken as constants. */
static const char *frozen_pkgs[] = {
    "torch", "torchvision", "timm", "transformers", "math", "operator", "builtins",
    "functools", "itertools", "collections", "typing", "types", "enum", "dataclasses",
    "inspect", "warnings", "copy", "numpy", "abc", "contextlib", "numbers", "re",
    "string", "logging", "importlib", "einops", "huggingface_hub", "safetensors",
    "packaging", "typing_extensions", "sys", "os", "weakref", "threading", "ptc",
};

static bool frozen_name(PyObject *name)
{
    const char *s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (!s)
        return false;
    for (size_t i = 0; i < sizeof frozen_pkgs / sizeof *frozen_pkgs; i++) {
        size_t n = strlen(frozen_pkgs[i]);
        if (strncmp(s, frozen_pkgs[i], n) == 0 && (s[n] == 0 || s[n] == '.'))
            return true;
    }
    return false;
}

bool cap_frozen_globals(PyObject *globals)
{
    return frozen_name(PyDict_GetItemString(globals, "__name__"));
}

static bool frozen_module(PyObject *mod)
{
    PyObject *d = PyModule_GetDict(mod);
    return d && cap_frozen_globals(d);
}

static int const_value(cap_trace *T, PyObject *v, PyObject **out)
{
    if (cap_is_constant(v) || cap_is_tensor(v)) {
        *out = Py_NewRef(v);
        return CAP_NEXT;
    }
    int s = cap_source_add(T, CAP_S_CONST, -1, 0, 0, v);
    return s < 0 ? CAP_ERR : cap_t_outside_value(T, v, s, out);
}

static PyObject *inst_dict(PyObject *obj)
{
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (!d)
        PyErr_Clear();
    return d;
}

static bool is_data_descr(PyObject *descr)
{
    return PyType_GetSlot(Py_TYPE(descr), Py_tp_descr_set) != NULL;
}

static PyObject *python_method(PyObject *obj, const char *name, PyObject *skip)
{
    PyObject *s = PyUnicode_InternFromString(name);
    PyObject *m = s ? cap_type_lookup(Py_TYPE(obj), s) : NULL;
    Py_XDECREF(s);
    return m && cap_is_function(m) && m != skip ? m : NULL;
}

bool cap_t_iterates_in_python(PyObject *obj)
{
    return !PyList_Check(obj) && !PyTuple_Check(obj) && !PyAnySet_Check(obj) &&
           !PyDict_Check(obj) && python_method(obj, "__iter__", NULL);
}

/* The first of obj's iteration methods (__iter__, __getitem__, __contains__,
 * __len__, __next__) written in Python, or NULL: C code handed obj
 * (list.extend, dict.fromkeys, `in` with no __contains__, the old
 * __getitem__ protocol) runs it for real. */
static const char *python_protocol_method(PyObject *obj)
{
    static const char *const names[] = {"__iter__", "__getitem__", "__contains__", "__len__",
                                        "__next__"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (python_method(obj, names[i], NULL))
            return names[i];
    return NULL;
}

/* Such a method, run for real after this trace wrote outside objects, would
 * read them before the replay writes them (a silent wrong result): its name
 * then, for a PTC-B009 break (NULL: nothing written, or no such method). */
static const char *stale_protocol_method(cap_trace *T, PyObject *obj)
{
    return PyList_Size(T->effects) > 0 ? python_protocol_method(obj) : NULL;
}

#define STALE_PROTOCOL_DETAIL "C code runs a Python %s.%s for real after this trace wrote outside objects"

int cap_t_check_protocol_read(cap_trace *T, PyObject *obj)
{
    const char *m = stale_protocol_method(T, obj);
    return m ? cap_t_break(T, CAP_B_MUTATE_OUTSIDE, STALE_PROTOCOL_DETAIL, cap_tpname(Py_TYPE(obj)), m)
             : CAP_NEXT;
}

static PyObject *bound_method(PyObject *func, PyObject *self)
{
    return PyObject_CallFunctionObjArgs(cap_P.MethodType, func, self, NULL);
}

/* nn.Module's __getattr__: parameters, buffers, submodules (as this trace's
 * writes left them: add_module or register_buffer on an outside module is a
 * logged write to its dict). */
static int module_attr(cap_trace *T, PyObject *mod, int src, PyObject *name, PyObject **out,
                       bool *found)
{
    static const int kinds[3] = {CAP_S_MODPARAM, CAP_S_MODBUF, CAP_S_MODCHILD};
    PyObject *keys[3] = {cap_T.s_parameters, cap_T.s_buffers, cap_T.s_modules};
    PyObject *d = inst_dict(mod);
    *found = false;
    if (!d)
        return CAP_NEXT;
    for (int k = 0; k < 3; k++) {
        PyObject *sub = PyDict_GetItem(d, keys[k]), *written = NULL;
        int w = sub && PyDict_CheckExact(sub) ? cap_t_dict_written(T, sub, name, &written) : -1;
        if (w >= 0 && (*found = w == 1)) {
            *out = Py_NewRef(written);
            Py_DECREF(d);
            return CAP_NEXT;
        }
        PyObject *v = w < 0 && sub && PyDict_Check(sub) ? PyDict_GetItem(sub, name) : NULL;
        if (!v)
            continue;
        *found = true;
        Py_DECREF(d);
        return cap_t_derived(T, v, kinds[k], src, 0, name, out);
    }
    Py_DECREF(d);
    return CAP_NEXT;
}

/* The value an earlier write of this trace left in obj.name, if any. */
static int shadowed(cap_trace *T, PyObject *obj, PyObject *name, PyObject **out)
{
    PyObject *key = PyLong_FromVoidPtr(obj);
    PyObject *attrs = key ? PyDict_GetItem(T->shadow, key) : NULL;
    PyObject *v = attrs ? PyDict_GetItem(attrs, name) : NULL;
    Py_XDECREF(key);
    if (!v)
        return CAP_NONE;
    if (PyTuple_Check(v) && PyTuple_Size(v) == 0) { /* deleted */
        PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%U'", cap_tpname(Py_TYPE(obj)), name);
        return CAP_ERR;
    }
    *out = Py_NewRef(PyList_GetItem(v, 0));
    return CAP_NEXT;
}

/* obj.__dict__ of an object whose attributes this trace wrote. */
static int written_dict(cap_trace *T, PyObject *obj, PyObject *name)
{
    if (PyModule_Check(obj) || PyType_Check(obj) || !PyUnicode_Check(name) ||
        PyUnicode_Compare(name, cap_P.s_dict) != 0)
        return CAP_NEXT;
    PyObject *key = PyLong_FromVoidPtr(obj);
    PyObject *attrs = key ? PyDict_GetItem(T->shadow, key) : NULL;
    Py_XDECREF(key);
    return attrs ? cap_t_instance_dict_read(T, obj, attrs) : CAP_NEXT;
}

/* What this trace's record of obj's instance dict says of name (writes
 * through obj.__dict__[k] and attribute writes made after obj.__dict__ was
 * read both land there): 1 written (*v borrowed), 0 deleted, -1 unknown. */
static int inst_dict_written(cap_trace *T, PyObject *obj, PyObject *name, PyObject **v)
{
    if (PyDict_Size(T->mut) == 0 || PyType_Check(obj) || PyModule_Check(obj))
        return -1;
    PyObject *d = inst_dict(obj);
    int w = d && PyDict_CheckExact(d) ? cap_t_dict_written(T, d, name, v) : -1;
    Py_XDECREF(d); /* the record holds the dict, and *v with it */
    return w;
}

/* getattr run for real, its value derived from obj's source (src). */
static int real_attr(cap_trace *T, PyObject *obj, PyObject *name, int src, PyObject **out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v)
        return CAP_ERR;
    int rc = cap_t_derived(T, v, CAP_S_ATTR, src, 0, name, out);
    Py_DECREF(v);
    return rc;
}

/* A real tensor's attribute: methods are fine (calling them is the break);
 * data would be read at trace time and baked in. */
static int real_tensor_attr(cap_trace *T, PyObject *obj, PyObject *name, PyObject **out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v)
        return CAP_ERR;
    if (PyCFunction_Check(v) || cap_is_method(v)) {
        *out = v;
        return CAP_NEXT;
    }
    Py_DECREF(v);
    char what[96];
    snprintf(what, sizeof what, "attribute '%s'", PyUnicode_AsUTF8(name));
    return cap_t_real_tensor(T, obj, what);
}

/* A module's attribute: what the trace wrote, else the value, guarded unless
 * the module is one whose globals never change. */
static int module_object_attr(cap_trace *T, PyObject *obj, PyObject *name, int src, PyObject **out)
{
    int rc = cap_t_module_attr_written(T, obj, name, out);
    if (rc != CAP_NONE)
        return rc;
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v)
        return CAP_ERR;
    if (src < 0 && !frozen_module(obj)) /* imported in the trace: still guarded */
        src = cap_t_const_source(T, obj);
    rc = src < 0 || frozen_module(obj) ? const_value(T, v, out)
                                       : cap_t_derived(T, v, CAP_S_INSTDICT, src, 0, name, out);
    Py_DECREF(v);
    return rc;
}

/* Python's lookup order is emulated for objects using object's
 * __getattribute__; super objects and other C types with their own run for
 * real, one written in Python is inlined. CAP_NONE: obj's type has none. */
static int custom_getattribute(cap_interp *I, PyObject *obj, PyObject *name, int src, bool generic,
                               PyObject **out)
{
    cap_trace *T = I->T;
    bool custom = !PyType_Check(obj) && PyType_GetSlot(Py_TYPE(obj), Py_tp_getattro) !=
                                            PyType_GetSlot(&PyBaseObject_Type, Py_tp_getattro);
    PyObject *ga = custom ? cap_type_lookup(Py_TYPE(obj), cap_P.s_getattribute) : NULL;
    if (custom && ga && ga == cap_type_lookup(&PyBaseObject_Type, cap_P.s_getattribute))
        custom = false; /* only a Python __getattr__ (nn.Module): emulated below */
    if (!custom || generic)
        return CAP_NONE;
    if (ga && cap_is_function(ga)) {
        PyObject *args[2] = {obj, name};
        int rc = cap_call_inline(I, ga, args, 2, NULL, cap_ret_push);
        if (rc != CAP_NEXT)
            return rc;
    }
    return real_attr(T, obj, name, src, out);
}

/* A property whose getter is a Python function: the getter inlined. CAP_NEXT:
 * it was not (a getter in C, or one that cannot be inlined). */
static int inline_property(cap_interp *I, PyObject *obj, PyObject *descr)
{
    PyObject *fget = PyObject_GetAttrString(descr, "fget");
    if (fget && cap_is_function(fget)) {
        PyObject *args[1] = {obj};
        int rc = cap_call_inline(I, fget, args, 1, NULL, cap_ret_push);
        Py_DECREF(fget);
        return rc;
    }
    Py_XDECREF(fget);
    PyErr_Clear();
    return CAP_NEXT;
}

/* obj's own `name`: written earlier in the trace, else in its instance dict.
 * CAP_NONE: it has none. */
static int instance_attr(cap_trace *T, PyObject *obj, PyObject *name, int src, PyObject **out)
{
    PyObject *written = NULL;
    int w = src >= 0 ? inst_dict_written(T, obj, name, &written) : -1;
    if (w == 1) {
        *out = Py_NewRef(written);
        return CAP_NEXT;
    }
    if (PyType_Check(obj) || w >= 0)
        return CAP_NONE;
    PyObject *d = inst_dict(obj);
    PyObject *v = d && PyDict_Check(d) ? PyDict_GetItem(d, name) : NULL;
    if (!v) {
        Py_XDECREF(d);
        return CAP_NONE;
    }
    Py_INCREF(v);
    Py_DECREF(d);
    int rc = cap_t_derived(T, v, CAP_S_INSTDICT, src, 0, name, out);
    Py_DECREF(v);
    return rc;
}

/* The class attribute descr as obj's `name`: a method bound to obj, what a
 * non-data descriptor gives, or descr itself. */
static int class_attr(cap_trace *T, PyObject *obj, PyObject *name, PyObject *descr, int src,
                      PyObject **out)
{
    if (cap_is_function(descr)) {
        /* A method of an outside object's class: guarded (the class
           still has it, the instance does not shadow it), so that
           replacing it recompiles. */
        PyObject *m = bound_method(descr, obj);
        if (!m || src < 0) {
            *out = m;
            return m ? CAP_NEXT : CAP_ERR;
        }
        int rc = cap_t_derived(T, m, CAP_S_ATTR, src, 0, name, out);
        Py_DECREF(m);
        return rc;
    }
    descrgetfunc get = (descrgetfunc)PyType_GetSlot(Py_TYPE(descr), Py_tp_descr_get);
    if (get) {
        *out = get(descr, obj, (PyObject *)Py_TYPE(obj));
        return *out ? CAP_NEXT : CAP_ERR;
    }
    return cap_t_derived(T, descr, CAP_S_ATTR, src, 0, name, out);
}

/* Properties, data descriptors, the instance dict, then the class's other
 * attributes, in Python's order. CAP_NONE: none of them has `name`. */
static int class_lookup(cap_interp *I, PyObject *obj, PyObject *name, int src, PyObject **out)
{
    cap_trace *T = I->T;
    PyObject *descr = PyType_Check(obj) ? NULL : cap_type_lookup(Py_TYPE(obj), name);
    if (descr && PyObject_TypeCheck(descr, &PyProperty_Type)) {
        int rc = inline_property(I, obj, descr);
        if (rc != CAP_NEXT)
            return rc;
    }
    if (descr && is_data_descr(descr))
        return real_attr(T, obj, name, src, out);
    int rc = instance_attr(T, obj, name, src, out);
    if (rc != CAP_NONE)
        return rc;
    return descr ? class_attr(T, obj, name, descr, src, out) : CAP_NONE;
}

/* Nothing on the class or the instance: nn.Module's parameters, buffers and
 * submodules, a Python __getattr__, else the real getattr (which raises). */
static int missing_attr(cap_interp *I, PyObject *obj, PyObject *name, int src, PyObject **out)
{
    cap_trace *T = I->T;
    if (PyObject_TypeCheck(obj, (PyTypeObject *)cap_T.Module)) {
        bool found;
        int rc = module_attr(T, obj, src, name, out, &found);
        if (rc != CAP_NEXT || found)
            return rc;
    }
    PyObject *gattr =
        PyType_Check(obj) ? NULL : python_method(obj, "__getattr__", cap_T.module_getattr);
    if (gattr) {
        PyObject *args[2] = {obj, name};
        int rc = cap_call_inline(I, gattr, args, 2, NULL, cap_ret_push);
        if (rc != CAP_NEXT)
            return rc;
    }
    if (src >= 0)
        return real_attr(T, obj, name, src, out);
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v)
        return CAP_ERR;
    int rc = cap_t_outside_value(T, v, -1, out);
    Py_DECREF(v);
    return rc;
}

bool cap_t_is_outside_array(cap_trace *T, PyObject *o)
{
    return cap_is_ndarray(o) && cap_t_source_of(T, o) >= 0;
}

/* An outside ndarray's traced method (name), item (key) or item write
 * (key, v): numpy's on the array's graph input, as torch.compile traces
 * numpy inputs; writes reach the array after the graph. */
static int outside_array(cap_trace *T, PyObject *array, PyObject *name, PyObject *key, PyObject *v,
                         PyObject **out)
{
    PyObject *a = NULL;
    int rc = cap_thooks.take_array(T, array, &a);
    if (rc != CAP_NEXT)
        return rc;
    rc = name  ? cap_thooks.getattr(T, (cap_tensor *)a, name, out)
         : v   ? cap_thooks.setitem(T, (cap_tensor *)a, key, v)
               : cap_thooks.getitem(T, (cap_tensor *)a, key, out);
    Py_DECREF(a);
    return rc;
}

static int getattr_impl(cap_interp *I, PyObject *obj, PyObject *name, PyObject **out, bool generic)
{
    cap_trace *T = I->T;
    if (cap_is_tensor(obj))
        return cap_thooks.getattr(T, (cap_tensor *)obj, name, out);
    if (cap_t_is_real_tensor(obj))
        return real_tensor_attr(T, obj, name, out);
    if (cap_t_is_outside_array(T, obj) && cap_thooks.traced_array_method(name))
        return outside_array(T, obj, name, NULL, NULL, out);
    int src = cap_t_source_of(T, obj);
    PyObject *written;
    if (src >= 0 && PyDict_Size(T->shadow) > 0 && inst_dict_written(T, obj, name, &written) < 0) {
        int rc = shadowed(T, obj, name, out);
        if (rc != CAP_NONE)
            return rc;
        if ((rc = written_dict(T, obj, name)) != CAP_NEXT)
            return rc;
    }
    if (PyModule_Check(obj))
        return module_object_attr(T, obj, name, src, out);
    int rc = custom_getattribute(I, obj, name, src, generic, out);
    if (rc == CAP_NONE)
        rc = class_lookup(I, obj, name, src, out);
    return rc != CAP_NONE ? rc : missing_attr(I, obj, name, src, out);
}

int cap_t_getattr(cap_interp *I, PyObject *obj, PyObject *name, PyObject **out)
{
    return getattr_impl(I, obj, name, out, false);
}

int cap_t_getattr_generic(cap_interp *I, PyObject *obj, PyObject *name, PyObject **out)
{
    return getattr_impl(I, obj, name, out, true);
}

/* object.__setattr__(obj, name, v) on an outside object: replayable when the
 * name lands in the instance dict (no data descriptor owns it). */
static bool plain_dict_attr(PyObject *obj, PyObject *name)
{
    PyObject *descr = cap_type_lookup(Py_TYPE(obj), name);
    if (descr && is_data_descr(descr))
        return false;
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (!d) {
        PyErr_Clear();
        return false;
    }
    Py_DECREF(d);
    return true;
}

/* Can obj.name = v be replayed with a plain setattr after the graph? The
 * object's __setattr__ must be object's (or nn.Module's for a plain
 * attribute), and no data descriptor may own the name. */
static bool replayable_write(PyObject *obj, PyObject *name, PyObject *v)
{
    PyObject *sa = cap_type_lookup(Py_TYPE(obj), cap_T.s_setattr);
    if (sa == cap_type_lookup(&PyBaseObject_Type, cap_T.s_setattr))
        return plain_dict_attr(obj, name);
    PyObject *descr = cap_type_lookup(Py_TYPE(obj), name);
    if (sa != cap_type_lookup((PyTypeObject *)cap_T.Module, cap_T.s_setattr) ||
        (descr && is_data_descr(descr)))
        return false;
    /* nn.Module: not a parameter, buffer or submodule, and not becoming one. */
    PyObject *keys[3] = {cap_T.s_parameters, cap_T.s_buffers, cap_T.s_modules};
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    bool plain = d != NULL;
    for (int k = 0; plain && k < 3; k++) {
        PyObject *sub = PyDict_GetItem(d, keys[k]);
        plain = !(sub && PyDict_Check(sub) && PyDict_GetItem(sub, name));
    }
    Py_XDECREF(d);
    PyErr_Clear();
    if (v && (PyObject_TypeCheck(v, (PyTypeObject *)cap_T.Parameter) ||
              PyObject_TypeCheck(v, (PyTypeObject *)cap_T.Module) ||
              (cap_is_tensor(v) && ((cap_tensor *)v)->fake_type == cap_T.Parameter)))
        return false;
    return plain;
}

/* Logs obj.name = v (v NULL: del); later reads in the trace see it. */
static int record_write(cap_interp *I, PyObject *obj, PyObject *name, PyObject *v)
{
    cap_trace *T = I->T;
    int rc = cap_t_effect(I, v ? CAP_E_ATTR_SET : CAP_E_ATTR_DEL, obj, name, v);
    if (rc != CAP_NEXT)
        return rc;
    PyObject *key = PyLong_FromVoidPtr(obj);
    PyObject *attrs = key ? PyDict_GetItem(T->shadow, key) : NULL;
    if (key && !attrs) {
        attrs = PyDict_New();
        if (!attrs || PyDict_SetItem(T->shadow, key, attrs) < 0) {
            Py_XDECREF(attrs);
            Py_DECREF(key);
            return CAP_ERR;
        }
        Py_DECREF(attrs);
    }
    Py_XDECREF(key);
    /* The value lives in a 1-list (a deleted attribute is the empty tuple). */
    PyObject *holder = v ? PyList_New(1) : PyTuple_New(0);
    if (!holder)
        return CAP_ERR;
    if (v)
        PyList_SetItem(holder, 0, Py_NewRef(v));
    rc = attrs && PyDict_SetItem(attrs, name, holder) == 0 ? CAP_NEXT : CAP_ERR;
    Py_DECREF(holder);
    return rc == CAP_NEXT ? cap_t_instance_dict_write(T, obj, name, v) : rc;
}

static int setattr_impl(cap_interp *I, PyObject *obj, PyObject *name, PyObject *v, bool generic);

int cap_t_setattr(cap_interp *I, PyObject *obj, PyObject *name, PyObject *v)
{
    return setattr_impl(I, obj, name, v, false);
}

int cap_t_setattr_generic(cap_interp *I, PyObject *obj, PyObject *name, PyObject *v)
{
    return setattr_impl(I, obj, name, v, true);
}

static int setattr_impl(cap_interp *I, PyObject *obj, PyObject *name, PyObject *v, bool generic)
{
    cap_trace *T = I->T;
    if (cap_is_tensor(obj))
        return cap_t_break(T, CAP_B_TENSOR_ATTR_WRITE, "tensor attribute '%s' written",
                           PyUnicode_AsUTF8(name));
    if (PyModule_Check(obj) && PyDict_CheckExact(PyModule_GetDict(obj))) {
        /* A write to the module's dict (even of a module imported in the
           trace: it outlives the call), which its functions' globals see. */
        if (cap_t_const_source(T, PyModule_GetDict(obj)) < 0)
            return CAP_ERR;
        return cap_t_outside_item_write(I, PyModule_GetDict(obj), name, v);
    }
    if (cap_t_outside(T, obj)) {
        if (!cap_is_constant(obj) && !PyType_Check(obj) &&
            (generic ? plain_dict_attr(obj, name) : replayable_write(obj, name, v)))
            return record_write(I, obj, name, v);
        return cap_t_break(T, CAP_B_ATTR_WRITE, "attribute '%s' of a %s from outside %s",
                           PyUnicode_AsUTF8(name), cap_tpname(Py_TYPE(obj)),
                           v ? "written" : "deleted");
    }
    PyObject *m = generic ? NULL : python_method(obj, v ? "__setattr__" : "__delattr__", NULL);
    if (m) {
        PyObject *args[3] = {obj, name, v};
        int rc = cap_call_inline(I, m, args, v ? 3 : 2, NULL, cap_ret_discard);
        if (rc != CAP_NEXT)
            return rc;
    }
    if (generic)
        return PyObject_GenericSetAttr(obj, name, v) < 0 ? CAP_ERR : CAP_NEXT;
    return PyObject_SetAttr(obj, name, v) < 0 ? CAP_ERR : CAP_NEXT;
}

/* ---- items -------------------------------------------------------------------- */

static bool plain_dict(PyObject *o)
{
    return PyDict_Check(o) && !python_method(o, "__getitem__", NULL);
}

static bool plain_seq(PyObject *o)
{
    return (PyList_Check(o) || PyTuple_Check(o)) && !python_method(o, "__getitem__", NULL) &&
           !python_method(o, "__iter__", NULL);
}

static Py_ssize_t seq_len(PyObject *o)
{
    return PyList_Check(o) ? PyList_Size(o) : PyTuple_Size(o);
}

static PyObject *seq_item(PyObject *o, Py_ssize_t i)
{
    return PyList_Check(o) ? PyList_GetItem(o, i) : PyTuple_GetItem(o, i);
}

/* Items [lo, hi) step of an outside list or tuple, wrapped with index sources. */
static PyObject *seq_wrapped(cap_trace *T, PyObject *o, int src, Py_ssize_t start,
                             Py_ssize_t step, Py_ssize_t n, bool as_tuple)
{
    PyObject *r = as_tuple ? PyTuple_New(n) : PyList_New(n);
    for (Py_ssize_t k = 0; r && k < n; k++) {
        Py_ssize_t i = start + k * step;
        PyObject *w = NULL;
        if (cap_t_derived(T, seq_item(o, i), CAP_S_INDEX, src, (int)i, NULL, &w) != CAP_NEXT) {
            Py_CLEAR(r);
            break;
        }
        if (as_tuple)
            PyTuple_SetItem(r, k, w);
        else
            PyList_SetItem(r, k, w);
    }
    return r;
}

static int len_guard(cap_trace *T, PyObject *o, int src)
{
    Py_ssize_t n = cap_stored_len(o);
    if (n < 0)
        return -1;
    return src >= 0 ? cap_guard_add(T, CAP_G_LEN, src, NULL, n) : 0;
}

static int keys_guard(cap_trace *T, PyObject *d, int src, PyObject **keys_out)
{
    PyObject *t = cap_stored_keys(d);
    if (!t)
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_Size(t); i++)
        if (!cap_is_key(PyTuple_GetItem(t, i))) {
            Py_DECREF(t);
            PyErr_SetString(PyExc_TypeError, "ptc: non-constant dict keys");
            return -1;
        }
    if (src >= 0 && cap_guard_add(T, CAP_G_KEYS, src, t, 0) < 0) {
        Py_DECREF(t);
        return -1;
    }
    *keys_out = t;
    return 0;
}

/* d[key] of a key d does not hold, as dict's lookup answers it: a Python
 * __missing__ (Counter's 0) is traced; defaultdict's stores
 * default_factory() under the key (a logged write where d is from outside)
 * and returns it; with neither, eager's KeyError. */
static int missing_item(cap_interp *I, PyObject *d, PyObject *key, PyObject **out)
{
    PyObject *m = python_method(d, "__missing__", NULL), *factory = NULL, *v = NULL;
    if (m) {
        PyObject *args[2] = {d, key};
        return cap_t_call_sync(I, m, args, 2, NULL, out);
    }
    if (!PyObject_TypeCheck(d, (PyTypeObject *)cap_P.defaultdict) ||
        python_method(d, "__setitem__", NULL)) {
        PyErr_SetObject(PyExc_KeyError, key);
        return CAP_ERR;
    }
    PyObject *name = PyUnicode_InternFromString("default_factory");
    int rc = name ? cap_t_getattr(I, d, name, &factory) : CAP_ERR;
    Py_XDECREF(name);
    if (rc == CAP_NEXT && factory == Py_None) {
        PyErr_SetObject(PyExc_KeyError, key);
        rc = CAP_ERR;
    }
    if (rc == CAP_NEXT)
        rc = cap_t_call_sync(I, factory, NULL, 0, NULL, &v);
    if (rc == CAP_NEXT) {
        rc = cap_t_outside(I->T, d) ? cap_t_outside_item_write(I, d, key, v)
             : PyDict_SetItem(d, key, v) < 0 ? CAP_ERR
                                              : CAP_NEXT;
    }
    Py_XDECREF(factory);
    if (rc == CAP_NEXT)
        *out = v;
    else
        Py_XDECREF(v);
    return rc;
}

/* obj[t] with t a symbolic tensor: its value is known while tracing where
 * t is a constant of the trace, and eager's index is used, as torch.compile
 * does; else a break. */
static int tensor_key_item(cap_interp *I, PyObject *obj, PyObject *key, PyObject **out)
{
    PyObject *index = PySequence_Check(obj) ? cap_t_const_index(I->T, key) : NULL;
    int rc = index ? cap_t_getitem(I, obj, index, out)
                   : cap_t_break(I->T, CAP_B_TENSOR_ITEM, "a tensor used as an index of a %s",
                                 cap_tpname(Py_TYPE(obj)));
    Py_XDECREF(index);
    return rc;
}

/* d[key] of an outside dict d (at src): the key's presence is guarded. */
static int outside_dict_item(cap_interp *I, PyObject *obj, PyObject *key, int src, PyObject **out)
{
    cap_trace *T = I->T;
    if (!cap_is_key(key))
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "outside dict indexed by a %s",
                           cap_tpname(Py_TYPE(key)));
    int has = PyDict_Contains(obj, key);
    if (has == 0 && cap_guard_add(T, CAP_G_DICT_HAS, src, key, 0) == 0)
        return missing_item(I, obj, key, out);
    return has < 0 || PyErr_Occurred() ? CAP_ERR : cap_t_stored_dict_item(T, obj, key, out);
}

/* o[i] or o[a:b:c] of an outside list or tuple o (at src), its length
 * guarded; CAP_NONE for other keys. */
static int outside_seq_item(cap_trace *T, PyObject *obj, PyObject *key, int src, PyObject **out)
{
    if (len_guard(T, obj, src) < 0)
        return CAP_ERR;
    Py_ssize_t n = seq_len(obj);
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred())
            return CAP_ERR;
        if (i < 0)
            i += n;
        if (i < 0 || i >= n) {
            PyErr_Format(PyExc_IndexError, "%s index out of range",
                         PyList_Check(obj) ? "list" : "tuple");
            return CAP_ERR;
        }
        return cap_t_derived(T, seq_item(obj, i), CAP_S_INDEX, src, (int)i, NULL, out);
    }
    if (PySlice_Check(key)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(key, &start, &stop, &step) < 0)
            return CAP_ERR;
        Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
        *out = seq_wrapped(T, obj, src, start, step, len, PyTuple_Check(obj));
        return *out ? CAP_NEXT : CAP_ERR;
    }
    return CAP_NONE;
}

int cap_t_getitem(cap_interp *I, PyObject *obj, PyObject *key, PyObject **out)
{
    cap_trace *T = I->T;
    if (cap_is_tensor(obj))
        return cap_thooks.getitem(T, (cap_tensor *)obj, key, out);
    if (cap_t_is_outside_array(T, obj))
        return outside_array(T, obj, NULL, key, NULL, out);
    if (cap_t_is_real_tensor(obj) || cap_t_is_real_tensor(key))
        return cap_t_real_tensor(T, cap_t_is_real_tensor(obj) ? obj : key, "indexing");
    if (cap_is_tensor(key) && !cap_t_dict_of_trace(T, obj))
        return tensor_key_item(I, obj, key, out);
    PyObject *written = NULL;
    switch (plain_dict(obj) ? cap_t_dict_written(T, obj, key, &written) : -1) {
    case 1:
        *out = Py_NewRef(written);
        return CAP_NEXT;
    case 0: /* deleted in this trace */
        return missing_item(I, obj, key, out);
    }
    int rc = cap_t_current(I, &obj);
    if (rc != CAP_NEXT)
        return rc;
    int src = cap_t_source_of(T, obj);
    PyObject *m = python_method(obj, "__getitem__", NULL);
    if (m) {
        PyObject *args[2] = {obj, key};
        int rc = cap_call_inline(I, m, args, 2, NULL, cap_ret_push);
        if (rc != CAP_NEXT)
            return rc;
    }
    if (src < 0 || cap_is_constant(obj)) {
        *out = PyObject_GetItem(obj, key);
        return *out ? CAP_NEXT : CAP_ERR;
    }
    if (plain_dict(obj))
        return outside_dict_item(I, obj, key, src, out);
    if (plain_seq(obj) && (rc = outside_seq_item(T, obj, key, src, out)) != CAP_NONE)
        return rc;
    return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "subscript of an outside %s",
                       cap_tpname(Py_TYPE(obj)));
}

int cap_t_setitem(cap_interp *I, PyObject *obj, PyObject *key, PyObject *v)
{
    if (cap_t_is_real_tensor(obj))
        return cap_t_real_tensor(I->T, obj, "item assignment");
    cap_trace *T = I->T;
    if (cap_is_tensor(obj) || (v && cap_t_is_outside_array(T, obj))) {
        if (!v)
            return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "del of a tensor item");
        if (!cap_is_tensor(obj))
            return outside_array(T, obj, NULL, key, v, NULL);
        return cap_thooks.setitem(T, (cap_tensor *)obj, key, v);
    }
    PyObject *m = python_method(obj, v ? "__setitem__" : "__delitem__", NULL);
    if (cap_t_outside(T, obj)) {
        /* the base type's item write, unless a Python override takes it */
        int rc = cap_is_constant(obj) || m ? CAP_NONE : cap_t_outside_item_write(I, obj, key, v);
        if (rc != CAP_NONE)
            return rc;
        /* A Python __setitem__ (nn.Sequential's, a user container's) is
           inlined as torch.compile does: the writes it makes are logged or
           break themselves. Run for real, it would be an unlogged write. */
        PyObject *args[3] = {obj, key, v};
        rc = m && !cap_is_constant(obj)
                 ? cap_call_inline(I, m, args, v ? 3 : 2, NULL, cap_ret_discard)
                 : CAP_NEXT;
        if (rc != CAP_NEXT)
            return rc;
        return cap_t_break(T, CAP_B_MUTATE_OUTSIDE, "item of a %s from outside %s",
                           cap_tpname(Py_TYPE(obj)), v ? "assigned" : "deleted");
    }
    if (m) {
        PyObject *args[3] = {obj, key, v};
        int rc = cap_call_inline(I, m, args, v ? 3 : 2, NULL, cap_ret_discard);
        if (rc != CAP_NEXT)
            return rc;
    }
    int r = v ? PyObject_SetItem(obj, key, v) : PyObject_DelItem(obj, key);
    return r < 0 ? CAP_ERR : CAP_NEXT;
}

/* ---- iteration --------------------------------------------------------------------- */

static bool is_container_module(PyObject *o, const char *name)
{
    for (PyTypeObject *t = Py_TYPE(o); t; t = (PyTypeObject *)PyType_GetSlot(t, Py_tp_base)) {
        PyObject *mod = PyObject_GetAttr((PyObject *)t, cap_P.s_module);
        PyObject *qn = PyObject_GetAttr((PyObject *)t, cap_P.s_qualname);
        bool hit = mod && qn && PyUnicode_CompareWithASCIIString(mod, "torch.nn.modules.container") == 0 &&
                   PyUnicode_CompareWithASCIIString(qn, name) == 0;
        Py_XDECREF(mod);
        Py_XDECREF(qn);
        PyErr_Clear();
        if (hit)
            return true;
        if (t == &PyBaseObject_Type)
            break;
    }
    return false;
}

/* Whether this trace wrote mod's attributes or its _modules dict (an
 * add_module, or a module resumed after a break inside its __init__): its
 * real _modules is then not what the program sees, and iteration runs the
 * container's own __iter__ over the written state instead of module_children. */
static bool module_written(cap_trace *T, PyObject *mod)
{
    PyObject *key = PyLong_FromVoidPtr(mod), *d = inst_dict(mod);
    bool attrs = key && PyDict_GetItem(T->shadow, key);
    PyObject *mods = d && PyDict_CheckExact(d) ? PyDict_GetItem(d, cap_T.s_modules) : NULL;
    bool written = attrs || (d && cap_t_written(T, d)) || (mods && cap_t_written(T, mods));
    Py_XDECREF(key);
    Py_XDECREF(d);
    PyErr_Clear();
    return written;
}

/* nn.ModuleList / nn.Sequential: their submodules in order, wrapped. */
static PyObject *module_children(cap_trace *T, PyObject *mod, int src, bool keys_only)
{
    PyObject *d = inst_dict(mod);
    PyObject *mods = d ? PyDict_GetItem(d, cap_T.s_modules) : NULL;
    PyObject *keys = NULL, *list = NULL;
    Py_XINCREF(mods);
    Py_XDECREF(d);
    if (!mods)
        return PyErr_Format(PyExc_TypeError, "ptc: module without _modules");
    int msrc = src >= 0 ? cap_source_add(T, CAP_S_INSTDICT, src, 0, 0, cap_T.s_modules) : -1;
    if (msrc >= 0)
        cap_t_map(T, mods, msrc);
    if (keys_guard(T, mods, msrc, &keys) < 0)
        goto done;
    Py_ssize_t n = PyTuple_Size(keys);
    list = PyList_New(n);
    for (Py_ssize_t i = 0; list && i < n; i++) {
        PyObject *k = PyTuple_GetItem(keys, i), *w;
        if (keys_only) {
            PyList_SetItem(list, i, Py_NewRef(k));
            continue;
        }
        if (cap_t_derived(T, PyDict_GetItem(mods, k), CAP_S_ITEM, msrc, 0, k, &w) != CAP_NEXT) {
            Py_CLEAR(list);
            break;
        }
        PyList_SetItem(list, i, w);
    }
done:
    Py_XDECREF(keys);
    Py_DECREF(mods);
    return list;
}

/* iter(t) of a symbolic tensor: a walk over its rows (unbound). */
static int iter_tensor(cap_trace *T, PyObject *obj, PyObject **out)
{
    PyObject *items = cap_thooks.unbind(T, (cap_tensor *)obj);
    if (!items)
        return PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    *out = cap_iter_seq(items, -1, T);
    Py_DECREF(items);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* iter(d) of a dict with no Python __iter__: a walk over its keys (guarded
 * at src), which checks d's size at each step. */
static int iter_dict(cap_trace *T, PyObject *obj, int src, PyObject **out)
{
    PyObject *keys = NULL;
    if (keys_guard(T, obj, src, &keys) < 0)
        return PyErr_ExceptionMatches(PyExc_TypeError)
                   ? (PyErr_Clear(), cap_t_break(T, CAP_B_OPAQUE_ITERATOR, "dict with non-constant keys"))
                   : CAP_ERR;
    *out = cap_iter_seq(keys, -1, T);
    Py_DECREF(keys);
    if (*out)
        cap_iter_set_owner((cap_iter *)*out, obj);
    return *out ? CAP_NEXT : CAP_ERR;
}

static int iter_range(PyObject *obj, PyObject **out)
{
    PyObject *a = PyObject_GetAttrString(obj, "start"), *s = PyObject_GetAttrString(obj, "step");
    Py_ssize_t n = PyObject_Size(obj);
    if (a && s && n >= 0)
        *out = cap_iter_range(PyLong_AsLongLong(a), PyLong_AsLongLong(s), n);
    Py_XDECREF(a);
    Py_XDECREF(s);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* The items of an outside set or frozenset, in its iteration order (*list),
 * guarded on that order: equal sets may iterate in other orders. Items that
 * are not constants break. */
static int set_in_order(cap_trace *T, PyObject *set, int src, PyObject **list)
{
    PyObject *items = PySequence_Tuple(set);
    if (!items)
        return CAP_ERR;
    for (Py_ssize_t i = 0; i < PyTuple_Size(items); i++)
        if (!cap_is_key(PyTuple_GetItem(items, i))) {
            Py_DECREF(items);
            return cap_t_break(T, CAP_B_OPAQUE_ITERATOR,
                               "iteration over an outside set of values that are not constants");
        }
    int rc = cap_guard_add(T, CAP_G_ORDER, src, items, 0);
    *list = rc < 0 ? NULL : PySequence_List(items);
    Py_DECREF(items);
    return *list ? CAP_NEXT : CAP_ERR;
}

/* The items of any other iterable, listed now (*list): a container module's
 * children (wrapped), or what iterating it for real gives where it was made
 * in the trace. A Python __iter__ is a traced call instead: inlined
 * (CAP_FRAME), or a generator function's lazy generator (*out); listing the
 * object for real would read the caller's objects, not what this trace
 * wrote to them. A C iterator made in the trace (itertools.count()) is
 * advanced for real, one item at a time, as eager does: *out is it, *list
 * stays NULL. */
static int listed_items(cap_interp *I, PyObject *obj, int src, PyObject **list, PyObject **out)
{
    cap_trace *T = I->T;
    if (src >= 0 && !module_written(T, obj) &&
        (is_container_module(obj, "ModuleList") || is_container_module(obj, "Sequential") ||
         is_container_module(obj, "ModuleDict"))) {
        *list = module_children(T, obj, src, is_container_module(obj, "ModuleDict"));
        return *list ? CAP_NEXT : CAP_ERR;
    }
    PyObject *m = python_method(obj, "__iter__", NULL);
    if (m) {
        PyObject *args[1] = {obj};
        return cap_hooks.call(I, m, args, 1, NULL, out);
    }
    if (src >= 0 && PyObject_TypeCheck(obj, (PyTypeObject *)cap_P.GeneratorType))
        return cap_t_break(T, CAP_B_GENERATOR, "iteration over a generator");
    if (src >= 0 && (PySet_CheckExact(obj) || PyFrozenSet_CheckExact(obj)))
        return set_in_order(T, obj, src, list);
    if (src >= 0 && !cap_is_constant(obj))
        return cap_t_break(T, CAP_B_OPAQUE_ITERATOR, "iteration over an outside %s",
                           cap_tpname(Py_TYPE(obj)));
    int rc = cap_t_check_protocol_read(T, obj);
    if (rc != CAP_NEXT)
        return rc;
    if (PyObject_TypeCheck(obj, (PyTypeObject *)cap_P.GeneratorType))
        cap_t_note_skipped(T, obj);
    else if (PyIter_Check(obj)) {
        *out = PyObject_GetIter(obj);
        return *out ? CAP_NEXT : CAP_ERR;
    }
    *list = PySequence_List(obj);
    return *list ? CAP_NEXT : CAP_ERR;
}

/* Whether a set holds a float (a NaN compares in no order). */
static bool holds_floats(PyObject *set)
{
    PyObject *it = PyObject_GetIter(set), *v;
    bool floats = it == NULL;
    while (!floats && (v = PyIter_Next(it))) {
        floats = PyFloat_Check(v);
        Py_DECREF(v);
    }
    Py_XDECREF(it);
    PyErr_Clear();
    return floats;
}

/* Whether orig, read as now, is a written outside set read through its
 * shadow in its order: a set's order depends on its table's history, which
 * no copy keeps, so iterating the shadow, or C code reading it whole, would
 * differ from the real set after the replay. A builtin whose answer does
 * not depend on the order (T->any_order) may iterate it, if no item is a
 * float. */
static bool set_order_unknown(cap_trace *T, PyObject *orig, PyObject *now)
{
    return orig != now && PyAnySet_Check(orig) && !(T->any_order && !holds_floats(now));
}

static const char set_order_detail[] =
    "an outside set read in its order after a write (a copy may iterate otherwise)";

int cap_t_written_set_read(cap_trace *T, PyObject *orig, PyObject *now)
{
    if (!set_order_unknown(T, orig, now))
        return CAP_NEXT;
    return cap_t_break(T, CAP_B_MUTATE_OUTSIDE, "%s", set_order_detail);
}

int cap_t_iter(cap_interp *I, PyObject *obj, PyObject **out)
{
    cap_trace *T = I->T;
    if (cap_is_tensor(obj))
        return iter_tensor(T, obj, out);
    if (cap_is_ptc_iter(obj)) {
        *out = Py_NewRef(obj);
        return CAP_NEXT;
    }
    if (cap_t_is_real_tensor(obj))
        return cap_t_real_tensor(T, obj, "iteration");
    if (cap_t_outside_seq_iter(T, obj)) { /* iter(it) is it; next() is logged */
        *out = Py_NewRef(obj);
        return CAP_NEXT;
    }
    PyObject *orig = obj;
    int rc = cap_t_current(I, &obj);
    if (rc != CAP_NEXT)
        return rc;
    if (set_order_unknown(T, orig, obj))
        return cap_t_break(T, CAP_B_MUTATE_OUTSIDE, "%s", set_order_detail);
    int src = cap_t_source_of(T, obj);
    if (plain_seq(obj)) {
        if (len_guard(T, obj, src) < 0)
            return CAP_ERR;
        *out = cap_iter_seq(obj, src, T);
        return *out ? CAP_NEXT : CAP_ERR;
    }
    if (PyDict_Check(obj) && !python_method(obj, "__iter__", NULL))
        return iter_dict(T, obj, src, out);
    if (PyObject_TypeCheck(obj, &PyRange_Type))
        return iter_range(obj, out);
    PyObject *list = NULL;
    if ((rc = listed_items(I, obj, src, &list, out)) != CAP_NEXT || !list)
        return rc;
    *out = cap_iter_seq(list, -1, T);
    Py_DECREF(list);
    if (*out && (PyAnySet_Check(obj) || PyDictKeys_Check(obj) || PyDictValues_Check(obj) ||
                 PyDictItems_Check(obj)))
        cap_iter_set_owner((cap_iter *)*out, obj);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_t_next(cap_interp *I, PyObject *it, PyObject **out)
{
    cap_trace *T = I->T;
    if (Py_TYPE(it) == cap_iter_type) {
        cap_iter *ci = (cap_iter *)it;
        PyObject *v = cap_iter_next_raw(ci);
        if (!v || ci->src < 0) {
            *out = v;
            return v || !PyErr_Occurred() ? CAP_NEXT : CAP_ERR;
        }
        int rc = cap_t_derived(T, v, CAP_S_INDEX, ci->src, (int)(ci->rev ? ci->i + 1 : ci->i - 1), NULL, out);
        Py_DECREF(v);
        return rc;
    }
    if (Py_TYPE(it) == cap_lazy_type)
        return cap_t_lazy_next(I, (cap_lazy *)it, out);
    if (cap_t_outside_seq_iter(T, it))
        return cap_t_outside_iter_next(I, it, out);
    PyObject *m = python_method(it, "__next__", NULL);
    if (m) {
        PyObject *args[1] = {it};
        int rc = cap_call_inline(I, m, args, 1, NULL, cap_ret_next_item);
        if (rc != CAP_NEXT)
            return rc;
    }
    if (cap_t_outside(T, it))
        return cap_t_break(T, CAP_B_OPAQUE_ITERATOR, "next() of an outside %s", cap_tpname(Py_TYPE(it)));
    if (PyObject_TypeCheck(it, (PyTypeObject *)cap_P.GeneratorType))
        return cap_t_break(T, CAP_B_GENERATOR, "next() of a generator");
    int rc = cap_next_real(it, out);
    /* A C iterator made here (groupby) whose callback broke: trace again, breaking before. */
    if (rc == CAP_ERR && cap_t_reruns(I, rc))
        cap_t_rerun_from_start(I);
    return rc;
}

/* ---- globals --------------------------------------------------------------------- */

int cap_t_load_global(cap_trace *T, cap_frame *f, PyObject *name, PyObject *v, bool builtin,
                      PyObject **out)
{
    if (builtin || cap_frozen_globals(f->globals))
        return const_value(T, v, out);
    int gsrc = cap_source_add(T, CAP_S_CONST, -1, 0, 0, f->globals);
    if (gsrc < 0)
        return CAP_ERR;
    cap_t_map(T, f->globals, gsrc);
    return cap_t_derived(T, v, CAP_S_ITEM, gsrc, 0, name, out);
}

/* ---- guards for truth, membership and operands ------------------------------------------ */

int cap_t_truth_guard(cap_trace *T, PyObject *v)
{
    int src = cap_t_source_of(T, v);
    if (src >= 0 && (PyList_Check(v) || PyTuple_Check(v) || PyDict_Check(v)) &&
        len_guard(T, v, src) < 0)
        return CAP_ERR;
    return CAP_NEXT;
}

int cap_t_contains_guard(cap_trace *T, PyObject *container, PyObject *item)
{
    int stale = cap_t_check_protocol_read(T, container);
    if (stale != CAP_NEXT)
        return stale;
    int src = cap_t_source_of(T, container);
    if (src < 0 || cap_is_constant(container))
        return CAP_NEXT;
    /* A dict, its keys() or a set: one guard on the answer (the guard asks
       `in` again on every call). */
    bool keyed =
        PyDict_Check(container) || PyDictKeys_Check(container) || PyAnySet_Check(container);
    if (keyed) {
        if (!cap_is_key(item))
            return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "'in' on an outside %s with a %s key",
                               cap_tpname(Py_TYPE(container)), cap_tpname(Py_TYPE(item)));
        int has = PyDict_Check(container) ? PyDict_Contains(container, item)
                                          : PySequence_Contains(container, item);
        return has < 0 || cap_guard_add(T, CAP_G_DICT_HAS, src, item, has) < 0 ? CAP_ERR : CAP_NEXT;
    }
    if (plain_seq(container)) {
        if (len_guard(T, container, src) < 0)
            return CAP_ERR;
        for (Py_ssize_t i = 0; i < seq_len(container); i++) {
            PyObject *w = NULL;
            if (cap_t_derived(T, seq_item(container, i), CAP_S_INDEX, src, (int)i, NULL, &w) != CAP_NEXT)
                return CAP_ERR;
            Py_DECREF(w);
        }
        return CAP_NEXT;
    }
    return cap_t_break(T, CAP_B_UNSUPPORTED_CALL, "'in' on an outside %s",
                       cap_tpname(Py_TYPE(container)));
}

/* A real tensor met by an operator in the trace (a subclass, or a tensor of
 * a dtype ptc lacks): the operation runs for real. */
bool cap_t_is_real_tensor(PyObject *o)
{
    return o && !cap_is_tensor(o) && PyObject_TypeCheck(o, (PyTypeObject *)cap_T.Tensor);
}

/* ---- containers read whole by C code ---------------------------------------------------- */

static bool is_container(PyObject *o)
{
    return (PyList_Check(o) || PyTuple_Check(o) || PyDict_Check(o) || PyAnySet_Check(o)) &&
           !cap_is_constant(o);
}

/* The items of a container (a dict's values), as a new list. */
static PyObject *contents(PyObject *o)
{
    return PyDict_Check(o) ? PyDict_Values(o) : PySequence_List(o);
}

/* C code (str, ==, json's encoder, any call ptc runs for real) reads obj
 * and whatever it holds, at any depth, as they are now. Each outside
 * container under obj is read through its source, so its items are guarded
 * (l == [[1, 2]] and str(l) of an outside [[1, 2]] would otherwise be the
 * first call's answer for [[4, 5]]); one this trace wrote breaks, as the C
 * code would read it before the replay writes it (str(l) after l[0].append(3)).
 * The caller handles obj itself. 0, or -1 with an error or a break signal. */
static int guard_held(cap_trace *T, PyObject *obj, int depth)
{
    PyObject *items = is_container(obj) ? contents(obj) : NULL;
    if (!items)
        return PyErr_Occurred() ? -1 : 0;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_Size(items); i++) {
        PyObject *v = PyList_GetItem(items, i), *held = NULL;
        if (!is_container(v))
            continue;
        if (depth > 16) {
            cap_signal_break(CAP_B_UNSUPPORTED_CALL, "containers nested too deep for C code");
            rc = -1;
        } else if (!cap_t_outside(T, v)) {
            rc = guard_held(T, v, depth + 1);
        } else if (cap_t_written(T, v)) {
            cap_signal_break(CAP_B_MUTATE_OUTSIDE, "C code reads an outside %s written in this "
                             "trace, held in another container", cap_tpname(Py_TYPE(v)));
            rc = -1;
        } else {
            rc = (held = cap_t_stored_items(T, v)) ? guard_held(T, held, depth + 1) : -1;
            PyObject *typed = rc == 0 && PyDict_Check(v) ? cap_t_dict_as_its_type(T->I, v, held)
                                                         : NULL; /* a default_factory, guarded */
            rc = rc == 0 && PyDict_Check(v) && !typed ? -1 : rc;
            Py_XDECREF(typed);
            Py_XDECREF(held);
        }
    }
    Py_DECREF(items);
    return rc;
}

/* An outside list, tuple, dict or set an operator reads: the items it
 * holds, reached through sources (d | {...} is a new dict of them, l == m
 * compares them under their guards; a set's items, which have no sources,
 * guarded equal), kept by the trace (*o borrowed). */
static int operand_items(cap_trace *T, PyObject **o)
{
    if (!cap_t_outside(T, *o) || cap_is_constant(*o))
        return guard_held(T, *o, 0) < 0 ? CAP_ERR : CAP_NEXT;
    if (!PyList_CheckExact(*o) && !PyTuple_CheckExact(*o) && !PyDict_CheckExact(*o) &&
        !PyAnySet_Check(*o))
        return CAP_NEXT;
    PyObject *items = cap_t_stored_items(T, *o);
    int rc = items ? guard_held(T, items, 0) : -1;
    rc = rc == 0 ? PyList_Append(T->keep, items) : -1;
    Py_XDECREF(items);
    if (rc < 0)
        return CAP_ERR;
    *o = items;
    return CAP_NEXT;
}

int cap_t_check_operands(cap_trace *T, PyObject **a, PyObject **b, bool arithmetic)
{
    PyObject **ops[2] = {a, b};
    for (int i = 0; i < 2; i++)
        if (cap_t_is_real_tensor(*ops[i]))
            return cap_t_real_tensor(T, *ops[i], "an operator");
    for (int i = 0; i < 2; i++) {
        int rc = operand_items(T, ops[i]);
        if (rc != CAP_NEXT)
            return rc;
    }
    /* ids compare as eager's do (equal or not); numbers made from them
       would be the trace's */
    int rc = arithmetic ? cap_t_check_id_use(T, *a) : CAP_NEXT;
    return rc == CAP_NEXT && arithmetic ? cap_t_check_id_use(T, *b) : rc;
}

int cap_t_check_format(cap_trace *T, PyObject *v)
{
    if (cap_is_tensor(v) || cap_t_is_real_tensor(v))
        return cap_t_break(T, CAP_B_TENSOR_STR, "a tensor formatted as text");
    /* an outside container as a call ptc runs for real would get it */
    PyObject *read = cap_t_outside(T, v) && is_container(v) ? cap_t_flow(T, v) : NULL;
    int rc = read ? 0 : PyErr_Occurred() ? -1 : guard_held(T, v, 0);
    Py_XDECREF(read);
    return rc < 0 ? CAP_ERR : cap_t_check_id_use(T, v);
}

/* ---- flows of whole containers ---------------------------------------------------------- */

/* Whether read, the plain copy of what a subclass instance of list, tuple
 * or dict obj stores, holds the very objects obj does (no tensor read as a
 * symbolic one): C code may then be given obj itself, with its type (a
 * namedtuple's repr), under the same guards. Exact containers keep their
 * copy: the call must not see them otherwise than the trace does. */
static bool holds_the_same(PyObject *obj, PyObject *read)
{
    if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj) || PyDict_CheckExact(obj) ||
        cap_stored_len(obj) != cap_stored_len(read))
        return false;
    if (PyDict_Check(obj)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(read, &pos, &k, &v))
            if (PyDict_GetItem(obj, k) != v)
                return false;
        return true;
    }
    if (!PyList_Check(read) && !PyTuple_Check(read))
        return false;
    for (Py_ssize_t i = 0; i < cap_stored_len(obj); i++) {
        PyObject *mine = PyList_Check(obj) ? PyList_GetItem(obj, i) : PyTuple_GetItem(obj, i);
        if (mine != (PyList_Check(read) ? PyList_GetItem(read, i) : PyTuple_GetItem(read, i)))
            return false;
    }
    return true;
}

PyObject *cap_t_dict_as_its_type(cap_interp *I, PyObject *d, PyObject *items)
{
    PyObject *type = (PyObject *)Py_TYPE(d), *factory = NULL, *name = NULL;
    if (type == cap_P.OrderedDict)
        return PyObject_CallFunctionObjArgs(cap_P.OrderedDict, items, NULL);
    if (type != cap_P.defaultdict)
        return Py_NewRef(items);
    name = PyUnicode_InternFromString("default_factory");
    int rc = name ? cap_t_getattr(I, d, name, &factory) : CAP_ERR;
    PyObject *typed = rc == CAP_NEXT
                          ? PyObject_CallFunctionObjArgs(cap_P.defaultdict, factory, items, NULL)
                      : rc == CAP_BREAK ? cap_signal_break(I->T->brk.code, "%s", I->T->brk.detail)
                                        : NULL;
    Py_XDECREF(factory);
    Py_XDECREF(name);
    return typed;
}

PyObject *cap_t_flow(cap_trace *T, PyObject *obj)
{
    if (cap_lazy_over_c_iterator(obj))
        return cap_signal_break(CAP_B_OPAQUE_ITERATOR,
                                "a lazy iterator over a C iterator handed to C code");
    if (Py_TYPE(obj) == cap_lazy_type) {
        /* A call ptc runs for real consumes it: its items, traced, now. */
        int rc;
        PyObject *items = cap_t_materialize(T->I, obj, &rc), *it;
        if (!items && rc == CAP_BREAK)
            return cap_signal_break(T->brk.code, "%s", T->brk.detail);
        it = items ? PyObject_GetIter(items) : NULL;
        Py_XDECREF(items);
        return it;
    }
    if (Py_TYPE(obj) == cap_iter_type) {
        cap_iter *ci = (cap_iter *)obj;
        PyObject *list = PyList_New(0), *v;
        while (list && (v = cap_iter_next_raw(ci))) {
            PyObject *w = v;
            if (ci->src >= 0) {
                if (cap_t_derived(T, v, CAP_S_INDEX, ci->src, (int)(ci->rev ? ci->i + 1 : ci->i - 1), NULL, &w) != CAP_NEXT)
                    Py_CLEAR(list);
                Py_DECREF(v);
            }
            if (list)
                PyList_Append(list, w);
            Py_XDECREF(w);
        }
        if (PyErr_Occurred()) /* its container changed size */
            Py_CLEAR(list);
        /* Still an iterator (a generator expression's .0 is iterated as is). */
        PyObject *it = list ? PyObject_GetIter(list) : NULL;
        Py_XDECREF(list);
        return it;
    }
    if (cap_t_outside_iter_advanced(T, obj))
        return cap_signal_break(CAP_B_OPAQUE_ITERATOR,
                                "an outside %s handed to C code after next()",
                                cap_tpname(Py_TYPE(obj)));
    PyObject *orig = obj;
    if (cap_t_current(T->I, &obj) != CAP_NEXT)
        return NULL;
    if (set_order_unknown(T, orig, obj))
        return cap_signal_break(CAP_B_MUTATE_OUTSIDE, "%s", set_order_detail);
    PyObject *read = plain_seq(obj) || plain_dict(obj) || PyAnySet_Check(obj)
                         ? cap_t_stored_items(T, obj)
                         : Py_NewRef(obj);
    if (read && guard_held(T, read, 0) < 0)
        Py_CLEAR(read);
    if (read && read != obj && holds_the_same(obj, read))
        Py_SETREF(read, Py_NewRef(obj)); /* str(nt) is not str(tuple(nt)) */
    else if (read && read != obj && PyDict_Check(obj))
        Py_SETREF(read, cap_t_dict_as_its_type(T->I, obj, read));
    return read;
}

/* A C callable that stores or reads its arguments and never runs their
 * Python protocol methods: super() and type(obj) (3.12 makes super(cls,
 * self) for real), and a slot of item or attribute access (obj.__setitem__,
 * or OrderedDict.__setitem__ as super() calls it), unless a slice
 * assignment, which iterates its value. */
static bool stores_without_iterating(PyObject *callable, PyObject *const *args, int nargs)
{
    static const char *const names[] = {"__getattribute__", "__setattr__", "__delattr__",
                                        "__getitem__",      "__setitem__", "__delitem__"};
    if (callable == (PyObject *)&PySuper_Type ||
        (callable == (PyObject *)&PyType_Type && nargs == 1))
        return true;
    if (Py_TYPE(callable) != (PyTypeObject *)cap_P.MethodWrapperType &&
        !PyObject_TypeCheck(callable, &PyWrapperDescr_Type))
        return false;
    for (int i = 0; i < nargs; i++)
        if (PySlice_Check(args[i]))
            return false;
    PyObject *name = PyObject_GetAttrString(callable, "__name__");
    const char *s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    bool found = false;
    for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
        found |= strcmp(s, names[i]) == 0;
    Py_XDECREF(name);
    PyErr_Clear();
    return found;
}

/* Arguments made safe for a real call: outside containers become sourced
 * copies, iterators over traced sequences are drained into lists. */
static PyObject **flow_args(cap_trace *T, PyObject *callable, PyObject *const *args, int nargs)
{
    PyObject **fa = PyMem_Malloc(sizeof(PyObject *) * (size_t)(nargs + 1));
    /* Only after writes to outside objects can a protocol method be stale. */
    bool check = PyList_Size(T->effects) > 0 && !stores_without_iterating(callable, args, nargs);
    for (int i = 0; fa && i < nargs; i++) {
        const char *stale = check ? stale_protocol_method(T, args[i]) : NULL;
        fa[i] = stale ? cap_signal_break(CAP_B_MUTATE_OUTSIDE, STALE_PROTOCOL_DETAIL,
                                         cap_tpname(Py_TYPE(args[i])), stale)
                      : cap_t_flow(T, args[i]);
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
    for (int i = 0; fa && i < n; i++)
        Py_DECREF(fa[i]);
    PyMem_Free(fa);
}

int cap_t_call_real_flowed(cap_trace *T, PyObject *callable, PyObject *const *args, int nargs,
                            PyObject *kwnames, PyObject **out)
{
    /* ptc's iterators in args, drained for the call, are put back if it breaks. */
    cap_iter_marks marks;
    cap_iter_mark(&marks, args, nargs);
    PyObject **fa = flow_args(T, callable, args, nargs);
    *out = fa ? cap_call_real(callable, fa, nargs, kwnames) : NULL;
    free_args(fa, nargs);
    return cap_iter_rewind(T->I, &marks, *out ? CAP_NEXT : CAP_ERR);
}

/* An outside set read whole by C code: the set itself, guarded equal on
 * every call to a copy of what it holds now (a set's items have no sources
 * of their own); one of a subclass, or holding what is not a constant,
 * breaks (NULL with the signal). Its iteration order is what the guard does
 * not fix, so iterating over one stays a break (listed_items). */
static PyObject *set_items(cap_trace *T, PyObject *set, int src)
{
    bool frozen = PyFrozenSet_CheckExact(set);
    if (!PySet_CheckExact(set) && !frozen)
        return cap_signal_break(CAP_B_UNSUPPORTED_CALL, "read of an outside %s",
                                cap_tpname(Py_TYPE(set)));
    PyObject *copy = frozen ? PyFrozenSet_New(set) : PySet_New(set);
    PyObject *it = copy ? PyObject_GetIter(copy) : NULL, *v;
    bool keys = it != NULL;
    while (keys && (v = PyIter_Next(it))) {
        keys = cap_is_key(v);
        Py_DECREF(v);
    }
    Py_XDECREF(it);
    int rc = !copy || PyErr_Occurred() ? -1 : keys ? cap_guard_add(T, CAP_G_EQ, src, copy, 0) : 1;
    Py_XDECREF(copy);
    if (rc > 0)
        return cap_signal_break(CAP_B_UNSUPPORTED_CALL,
                                "read of an outside set of values that are not constants");
    return rc < 0 ? NULL : Py_NewRef(set);
}

PyObject *cap_t_stored_items(cap_trace *T, PyObject *obj)
{
    int src = cap_t_source_of(T, obj);
    if (src < 0 || cap_is_constant(obj))
        return Py_NewRef(obj);
    if (PyList_Check(obj) || PyTuple_Check(obj)) {
        if (len_guard(T, obj, src) < 0)
            return NULL;
        return seq_wrapped(T, obj, src, 0, 1, seq_len(obj), PyTuple_Check(obj));
    }
    if (PyDict_Check(obj)) {
        PyObject *keys = NULL, *d = NULL;
        if (keys_guard(T, obj, src, &keys) < 0)
            return NULL;
        d = PyDict_New();
        for (Py_ssize_t i = 0; d && i < PyTuple_Size(keys); i++) {
            PyObject *k = PyTuple_GetItem(keys, i), *w = NULL;
            if (cap_t_derived(T, PyDict_GetItem(obj, k), CAP_S_ITEM, src, 0, k, &w) != CAP_NEXT ||
                PyDict_SetItem(d, k, w) < 0)
                Py_CLEAR(d);
            Py_XDECREF(w);
        }
        Py_DECREF(keys);
        return d;
    }
    if (PyAnySet_Check(obj))
        return set_items(T, obj, src);
    return Py_NewRef(obj);
}
