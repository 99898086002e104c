/* The symbolic tensor type and bound tensor methods (the torch objects and
 * conversions they use are the trace's: trace/torch_objects.c).
 *
 * A symbolic tensor (ptc._C.SymTensor) stands for a graph value while a trace
 * runs. The interpreter handles most operations on it directly, but it is also
 * a working Python object: code ptc does not interpret (a lambda given to
 * map(), a generator expression) can add, index or call methods on it and the
 * ops are recorded all the same; anything that needs its value (bool, int,
 * repr) raises the GraphBreak signal, which becomes a graph break at the
 * interpreted instruction that started it.
 */
#include "capture/torch/torch.h"

#include <string.h>
#include <structmember.h>

/* ---- the symbolic tensor type -------------------------------------------------------- */

static cap_trace *live(PyObject *self)
{
    cap_trace *T = ((cap_tensor *)self)->T;
    if (!T)
        PyErr_SetString(PyExc_RuntimeError,
                        "ptc: a symbolic tensor was used after its trace ended");
    return T;
}

/* Turns a tracer result into a Python result for code running for real. */
static PyObject *slot_result(cap_trace *T, int rc, PyObject *out)
{
    if (rc == CAP_NEXT)
        return out;
    if (rc == CAP_BREAK)
        return cap_signal_break(T->brk.code, "%s", T->brk.detail);
    if (rc == CAP_FRAME)
        return cap_signal_break(CAP_B_UNSUPPORTED_CALL, "Python code called from a builtin");
    return NULL;
}

static void tensor_dealloc(PyObject *self)
{
    cap_tensor *t = (cap_tensor *)self;
    if (t->weakrefs)
        PyObject_ClearWeakRefs(self);
    if (t->base) {
        t->base->nviews--;
        Py_DECREF(t->base);
    }
    Py_XDECREF(t->view_key);
    Py_XDECREF(t->view_perm);
    Py_XDECREF(t->view_flip);
    Py_XDECREF(t->views);
    Py_XDECREF(t->fake_type);
    PyTypeObject *tp = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

static PyObject *tensor_getattro(PyObject *self, PyObject *name)
{
    cap_trace *T = live(self);
    if (!T)
        return NULL;
    PyObject *out = NULL;
    int rc_ = cap_thooks.getattr(T, (cap_tensor *)self, name, &out);
    return slot_result(T, rc_, out);
}

static PyObject *tensor_repr(PyObject *self)
{
    return cap_signal_break(CAP_B_TENSOR_STR, "a tensor formatted as text");
}

static Py_hash_t tensor_hash(PyObject *self)
{
    Py_hash_t h = (Py_hash_t)((uintptr_t)self >> 4);
    return h == -1 ? -2 : h;
}

static PyObject *tensor_richcompare(PyObject *a, PyObject *b, int op)
{
    cap_trace *T = cap_is_tensor(a) ? live(a) : live(b);
    PyObject *out = NULL;
    if (!T)
        return NULL;
    int rc_ = cap_hooks.tensor_compare(T, op, a, b, &out);
    return slot_result(T, rc_, out);
}

#define BINSLOT(fname, op)                                                      \
    static PyObject *fname(PyObject *a, PyObject *b)                            \
    {                                                                           \
        cap_trace *T = cap_is_tensor(a) ? live(a) : live(b);                    \
        PyObject *out = NULL;                                                   \
        if (!T) \
            return NULL; \
        int rc_ = cap_hooks.tensor_binary(T, op, a, b, &out); \
        return slot_result(T, rc_, out); \
    }
BINSLOT(nb_add, CAP_NB_ADD)
BINSLOT(nb_sub, CAP_NB_SUBTRACT)
BINSLOT(nb_mul, CAP_NB_MULTIPLY)
BINSLOT(nb_truediv, CAP_NB_TRUE_DIVIDE)
BINSLOT(nb_floordiv, CAP_NB_FLOOR_DIVIDE)
BINSLOT(nb_mod, CAP_NB_REMAINDER)
BINSLOT(nb_matmul, CAP_NB_MATRIX_MULTIPLY)
BINSLOT(nb_and, CAP_NB_AND)
BINSLOT(nb_or, CAP_NB_OR)
BINSLOT(nb_xor, CAP_NB_XOR)
BINSLOT(nb_iadd, CAP_NB_ADD | CAP_NB_INPLACE)
BINSLOT(nb_isub, CAP_NB_SUBTRACT | CAP_NB_INPLACE)
BINSLOT(nb_imul, CAP_NB_MULTIPLY | CAP_NB_INPLACE)
BINSLOT(nb_itruediv, CAP_NB_TRUE_DIVIDE | CAP_NB_INPLACE)

static PyObject *nb_pow(PyObject *a, PyObject *b, PyObject *mod)
{
    cap_trace *T = cap_is_tensor(a) ? live(a) : live(b);
    PyObject *out = NULL;
    if (!T)
        return NULL;
    int rc_ = cap_hooks.tensor_binary(T, CAP_NB_POWER, a, b, &out);
    return slot_result(T, rc_, out);
}

#define UNSLOT(fname, h)                                                        \
    static PyObject *fname(PyObject *a)                                         \
    {                                                                           \
        cap_trace *T = live(a);                                                 \
        PyObject *out = NULL;                                                   \
        if (!T) \
            return NULL; \
        int rc_ = cap_hooks.tensor_unary(T, h, a, &out); \
        return slot_result(T, rc_, out); \
    }
UNSLOT(nb_neg, H_UNARY_NEGATIVE)
UNSLOT(nb_pos, H_UNARY_POSITIVE)
UNSLOT(nb_invert, H_UNARY_INVERT)
UNSLOT(nb_abs, -1)

static int nb_bool(PyObject *a)
{
    cap_signal_break(CAP_B_TENSOR_BOOL, "bool() of a tensor");
    return -1;
}

static PyObject *nb_int(PyObject *a)
{
    return cap_signal_break(CAP_B_TENSOR_ITEM, "a tensor converted to a Python number");
}

static Py_ssize_t mp_length(PyObject *a)
{
    cap_tensor *t = (cap_tensor *)a;
    if (t->v->type.ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    if (t->v->type.shape[0].sym) {
        /* CPython's len() wants a number: the size's value, under a guard. */
        PyObject *n = live(a) ? cap_dim_obj(t->T, t->v->type.shape[0]) : NULL;
        int64_t v = -1;
        if (n && cap_symint_specialise((cap_symint *)n, "len()", &v) < 0)
            v = -1;
        Py_XDECREF(n);
        return (Py_ssize_t)v;
    }
    return (Py_ssize_t)t->v->type.shape[0].value;
}

static PyObject *mp_subscript(PyObject *a, PyObject *key)
{
    cap_trace *T = live(a);
    PyObject *out = NULL;
    if (!T)
        return NULL;
    int rc_ = cap_thooks.getitem(T, (cap_tensor *)a, key, &out);
    return slot_result(T, rc_, out);
}

static int mp_ass_subscript(PyObject *a, PyObject *key, PyObject *v)
{
    cap_trace *T = live(a);
    if (!T)
        return -1;
    if (!v) {
        cap_signal_break(CAP_B_UNSUPPORTED_TORCH, "del of a tensor item");
        return -1;
    }
    int rc = cap_thooks.setitem(T, (cap_tensor *)a, key, v);
    return slot_result(T, rc, Py_None) ? 0 : -1;
}

static PyObject *tensor_iter(PyObject *a)
{
    cap_trace *T = live(a);
    if (!T)
        return NULL;
    PyObject *items = cap_thooks.unbind(T, (cap_tensor *)a);
    if (!items)
        return PyErr_Occurred() ? NULL : cap_signal_break(T->brk.code, "%s", T->brk.detail);
    PyObject *it = PyObject_GetIter(items);
    Py_DECREF(items);
    return it;
}

static PyMemberDef tensor_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(cap_tensor, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_members, tensor_members},
    {Py_tp_getattro, tensor_getattro},
    {Py_tp_repr, tensor_repr},
    {Py_tp_str, tensor_repr},
    {Py_tp_hash, tensor_hash},
    {Py_tp_richcompare, tensor_richcompare},
    {Py_tp_iter, tensor_iter},
    {Py_nb_add, nb_add},
    {Py_nb_subtract, nb_sub},
    {Py_nb_multiply, nb_mul},
    {Py_nb_true_divide, nb_truediv},
    {Py_nb_floor_divide, nb_floordiv},
    {Py_nb_remainder, nb_mod},
    {Py_nb_matrix_multiply, nb_matmul},
    {Py_nb_and, nb_and},
    {Py_nb_or, nb_or},
    {Py_nb_xor, nb_xor},
    {Py_nb_power, nb_pow},
    {Py_nb_inplace_add, nb_iadd},
    {Py_nb_inplace_subtract, nb_isub},
    {Py_nb_inplace_multiply, nb_imul},
    {Py_nb_inplace_true_divide, nb_itruediv},
    {Py_nb_negative, nb_neg},
    {Py_nb_positive, nb_pos},
    {Py_nb_invert, nb_invert},
    {Py_nb_absolute, nb_abs},
    {Py_nb_bool, nb_bool},
    {Py_nb_int, nb_int},
    {Py_nb_float, nb_int},
    {Py_nb_index, nb_int},
    {Py_mp_length, mp_length},
    {Py_mp_subscript, mp_subscript},
    {Py_mp_ass_subscript, mp_ass_subscript},
    {Py_tp_doc, "ptc: a tensor being traced (a value of the graph under construction)"},
    {0, NULL},
};

static PyType_Spec tensor_spec = {"ptc._C.SymTensor", sizeof(cap_tensor), 0, Py_TPFLAGS_DEFAULT,
                                  tensor_slots};

/* ---- bound methods of symbolic tensors ------------------------------------------------- */

static void method_dealloc(PyObject *self)
{
    Py_XDECREF(((cap_method *)self)->self);
    PyTypeObject *tp = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

static PyObject *method_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    cap_method *m = (cap_method *)self;
    cap_trace *T = live(m->self);
    if (!T)
        return NULL;
    Py_ssize_t n = PyTuple_Size(args), nkw = kwargs ? PyDict_Size(kwargs) : 0;
    if (n + nkw > 64)
        return cap_signal_break(CAP_B_UNSUPPORTED_CALL, "too many arguments");
    PyObject *buf[64], *kwnames = nkw ? PyTuple_New(nkw) : NULL;
    if (nkw && !kwnames)
        return NULL;
    cap_spread_args(args, kwargs, buf, kwnames);
    PyObject *out = NULL;
    int rc = cap_torch_call(T, m->map, m->self, buf, (int)(n + nkw), kwnames, &out);
    Py_XDECREF(kwnames);
    return slot_result(T, rc, out);
}

static PyType_Slot method_slots[] = {
    {Py_tp_dealloc, method_dealloc},
    {Py_tp_call, method_call},
    {Py_tp_doc, "ptc: a Tensor method bound to a symbolic tensor"},
    {0, NULL},
};

static PyType_Spec method_spec = {"ptc._C.SymMethod", sizeof(cap_method), 0, Py_TPFLAGS_DEFAULT,
                                  method_slots};

/* ---- module setup -------------------------------------------------------------------- */

static PyObject *new_exception(PyObject *module, const char *name, PyObject *base, const char *doc)
{
    char full[64];
    snprintf(full, sizeof full, "ptc._C.%s", name);
    PyObject *e = PyErr_NewExceptionWithDoc(full, doc, base, NULL);
    if (e && PyModule_AddObjectRef(module, name, e) < 0)
        Py_CLEAR(e);
    return e;
}

/* A TorchFunctionMode the user entered (with MyMode(): compiled(x)) sees
 * every torch call made under it: ptc's own (guards, allocations) would show,
 * and the graph's ops would not. */
bool cap_torch_function_mode_active(void)
{
    static PyObject *enabled;
    if (!enabled && !(enabled = cap_import_path("torch._C._is_torch_function_mode_enabled")))
        return PyErr_Clear(), false;
    PyObject *r = PyObject_CallNoArgs(enabled);
    bool on = r == Py_True;
    Py_XDECREF(r);
    PyErr_Clear();
    return on;
}

void cap_torch_hooks_install(void)
{
    cap_thooks.lookup_fn = cap_torch_lookup_fn;
    cap_thooks.call = cap_torch_call;
    cap_thooks.getattr = cap_np_hook_getattr;
    cap_thooks.getitem = cap_np_hook_getitem;
    cap_thooks.setitem = cap_np_hook_setitem;
    cap_thooks.unbind = cap_np_hook_unbind;
    cap_thooks.builtin_minmax = cap_torch_builtin_minmax;
    cap_thooks.foreach_call = cap_torch_foreach_call;
    cap_thooks.take_array = cap_np_take_array;
    cap_thooks.traced_array_method = cap_np_traced_method;
    cap_hooks.real_tensor = cap_t_real_tensor;
    cap_hooks.tensor_binary = cap_np_hook_binop;
    cap_hooks.tensor_compare = cap_np_hook_compare;
    cap_hooks.tensor_unary = cap_np_hook_unary;
    cap_hooks.tensor_unpack = cap_torch_unpack;
}

int cap_torch_init(void)
{
    static bool done;
    if (done)
        return 0;
    if (cap_torch_objects_init() < 0 || cap_torch_tables_init(cap_tmaps, cap_ntmaps) < 0)
        return -1;
    done = true;
    return 0;
}

int cap_types_init(PyObject *module)
{
    cap_GraphBreak = new_exception(module, "GraphBreakSignal", PyExc_Exception,
                                   "Internal: a symbolic value needed a real one.");
    cap_GraphBreakError = new_exception(module, "GraphBreakError", PyExc_RuntimeError,
                                        "A graph break where fullgraph=True forbids one.");
    cap_InternalError = new_exception(module, "InternalError", PyExc_RuntimeError,
                                      "An internal error of ptc's capture.");
    cap_PartialRunError =
        new_exception(module, "PartialRunError", PyExc_RuntimeError,
                      "A compiled graph failed after writing some of its inputs in place: "
                      "it is not run again (eagerly), which would repeat those writes.");
    if (!cap_GraphBreak || !cap_GraphBreakError || !cap_InternalError || !cap_PartialRunError)
        return -1;
    cap_tensor_type = (PyTypeObject *)PyType_FromSpec(&tensor_spec);
    cap_method_type = (PyTypeObject *)PyType_FromSpec(&method_spec);
    if (!cap_tensor_type || !cap_method_type ||
        PyModule_AddObjectRef(module, "SymTensor", (PyObject *)cap_tensor_type) < 0 ||
        cap_iter_types_init(module) < 0 || cap_symint_types_init(module) < 0)
        return -1;
    return 0;
}
