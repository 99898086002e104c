/* torch objects, conversions, and the symbolic tensor type.
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

cap_torch cap_T;
PyTypeObject *cap_tensor_type, *cap_method_type;

static const char *dtype_names[PTC_DTYPE_COUNT] = {
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
};

/* ---- lookups ------------------------------------------------------------------------ */

static int need(PyObject **slot, const char *path)
{
    *slot = cap_import_path(path);
    if (!*slot) {
        PyErr_Format(PyExc_ImportError, "ptc: %s not found", path);
        return -1;
    }
    return 0;
}

static void want(PyObject **slot, const char *path)
{
    *slot = cap_import_path(path);
}

static int init_torch(void)
{
    if (need(&cap_T.torch, "torch") || need(&cap_T.F, "torch.nn.functional") ||
        need(&cap_T.Tensor, "torch.Tensor") || need(&cap_T.Parameter, "torch.nn.Parameter") ||
        need(&cap_T.Module, "torch.nn.Module") || need(&cap_T.Size, "torch.Size") ||
        need(&cap_T.dtype_type, "torch.dtype") || need(&cap_T.device_type, "torch.device") ||
        need(&cap_T.is_grad_enabled, "torch.is_grad_enabled") ||
        need(&cap_T.set_grad_enabled_c, "torch._C._set_grad_enabled") ||
        need(&cap_T.no_grad, "torch.no_grad") || need(&cap_T.enable_grad, "torch.enable_grad") ||
        need(&cap_T.set_grad_enabled, "torch.set_grad_enabled") ||
        need(&cap_T.nullcontext, "contextlib.nullcontext") ||
        need(&cap_T.tensor_fn, "torch.tensor") || need(&cap_T.empty, "torch.empty") ||
        need(&cap_T.empty_strided, "torch.empty_strided") ||
        need(&cap_T.module_call_impl, "torch.nn.Module._call_impl") ||
        need(&cap_T.module_getattr, "torch.nn.Module.__getattr__"))
        return -1;
    want(&cap_T.inference_mode, "torch.inference_mode");
    want(&cap_T.autocast_cls, "torch.autocast");
    want(&cap_T.is_autocast_enabled, "torch.is_autocast_enabled");
    want(&cap_T.module_wrapped_call, "torch.nn.Module._wrapped_call_impl");
    PyObject *dyn = cap_import_path("torch._dynamo");
    cap_T.have_dynamo = dyn != NULL;
    Py_XDECREF(dyn);
    for (int i = 0; i < PTC_DTYPE_COUNT; i++) {
        char path[64];
        snprintf(path, sizeof path, "torch.%s", dtype_names[i]);
        if (need(&cap_T.dtypes[i], path))
            return -1;
    }
    static const char *hooks[] = {"_global_forward_hooks", "_global_forward_pre_hooks",
                                  "_global_backward_hooks", "_global_backward_pre_hooks"};
    PyObject *mm = PyImport_ImportModule("torch.nn.modules.module");
    if (!mm)
        return -1;
    cap_T.global_hooks = PyTuple_New(4);
    for (int i = 0; i < 4; i++) {
        PyObject *h = PyObject_GetAttrString(mm, hooks[i]);
        if (!h) {
            PyErr_Clear();
            h = PyDict_New();
        }
        PyTuple_SetItem(cap_T.global_hooks, i, h);
    }
    Py_DECREF(mm);
    struct {
        PyObject **slot;
        const char *s;
    } names[] = {
        {&cap_T.s_shape, "shape"}, {&cap_T.s_dtype, "dtype"}, {&cap_T.s_device, "device"},
        {&cap_T.s_stride, "stride"}, {&cap_T.s_requires_grad, "requires_grad"},
        {&cap_T.s_data_ptr, "data_ptr"}, {&cap_T.s_is_contiguous, "is_contiguous"},
        {&cap_T.s_parameters, "_parameters"}, {&cap_T.s_buffers, "_buffers"},
        {&cap_T.s_modules, "_modules"}, {&cap_T.s_training, "training"},
        {&cap_T.s_forward, "forward"}, {&cap_T.s_type, "type"}, {&cap_T.s_index, "index"},
        {&cap_T.s_forward_hooks, "_forward_hooks"},
        {&cap_T.s_forward_pre_hooks, "_forward_pre_hooks"},
        {&cap_T.s_backward_hooks, "_backward_hooks"},
        {&cap_T.s_backward_pre_hooks, "_backward_pre_hooks"},
        {&cap_T.s_forward_hooks_with_kwargs, "_forward_hooks_with_kwargs"},
        {&cap_T.s_storage_offset, "storage_offset"},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].s)))
            return -1;
    return 0;
}

/* ---- conversions ------------------------------------------------------------------- */

PyObject *cap_dtype_obj(ptc_dtype dt)
{
    return dt >= 0 && dt < PTC_DTYPE_COUNT ? cap_T.dtypes[dt] : Py_None;
}

int cap_dtype_from_obj(PyObject *o)
{
    for (int i = 0; i < PTC_DTYPE_COUNT; i++)
        if (o == cap_T.dtypes[i])
            return i;
    if (o == (PyObject *)&PyFloat_Type)
        return PTC_F64;
    if (o == (PyObject *)&PyLong_Type)
        return PTC_I64;
    if (o == (PyObject *)&PyBool_Type)
        return PTC_BOOL;
    return -1;
}

PyObject *cap_device_obj(ptc_device d)
{
    if (d.kind == PTC_DEV_CPU)
        return PyObject_CallFunction(cap_T.device_type, "s", "cpu");
    if (d.index < 0)
        return PyObject_CallFunction(cap_T.device_type, "s", "cuda");
    return PyObject_CallFunction(cap_T.device_type, "si", "cuda", (int)d.index);
}

/* A size under the run's bindings; a symbolic one without them is an
 * internal error (never a silent 0). */
static PyObject *dim_obj(ptc_dim d, const ptc_bindings *b)
{
    int64_t v = d.value;
    ptc_error err;
    if (d.sym && (!b || ptc_dim_eval(d, b, &v, &err) < 0))
        return PyErr_Format(cap_InternalError, "ptc: a symbolic size without its value (%s)",
                            b ? err.msg : "no bindings");
    return PyLong_FromLongLong(v);
}

PyObject *cap_arg_obj(const ptc_arg *a, const ptc_bindings *b)
{
    switch (a->kind) {
    case PTC_ARG_NONE:
        return Py_NewRef(Py_None);
    case PTC_ARG_INT:
        return dim_obj(a->i, b);
    case PTC_ARG_INTS: {
        PyObject *l = PyList_New(a->is.n);
        for (int i = 0; l && i < a->is.n; i++) {
            PyObject *x = dim_obj(a->is.d[i], b);
            if (!x) {
                Py_CLEAR(l);
                break;
            }
            PyList_SetItem(l, i, x);
        }
        return l;
    }
    case PTC_ARG_FLOAT:
        return PyFloat_FromDouble(a->f);
    case PTC_ARG_BOOL:
        return Py_NewRef(a->b ? Py_True : Py_False);
    case PTC_ARG_STR:
        return PyUnicode_FromString(a->s);
    case PTC_ARG_DTYPE:
        return Py_NewRef(cap_dtype_obj(a->dt));
    case PTC_ARG_DEVICE:
        return cap_device_obj(a->dev);
    }
    return NULL;
}

int cap_device_from_obj(PyObject *o, ptc_device *out)
{
    if (PyUnicode_Check(o))
        return ptc_device_parse(PyUnicode_AsUTF8(o), out);
    if (PyLong_Check(o)) {
        *out = (ptc_device){PTC_DEV_CUDA, (int16_t)PyLong_AsLong(o)};
        return 0;
    }
    if (!PyObject_TypeCheck(o, (PyTypeObject *)cap_T.device_type))
        return -1;
    PyObject *type = PyObject_GetAttr(o, cap_T.s_type), *idx = PyObject_GetAttr(o, cap_T.s_index);
    int rc = -1;
    if (type && idx) {
        const char *t = PyUnicode_AsUTF8(type);
        if (t && strcmp(t, "cpu") == 0) {
            *out = PTC_CPU;
            rc = 0;
        } else if (t && strcmp(t, "cuda") == 0) {
            *out = (ptc_device){PTC_DEV_CUDA, idx == Py_None ? -1 : (int16_t)PyLong_AsLong(idx)};
            rc = 0;
        }
    }
    Py_XDECREF(type);
    Py_XDECREF(idx);
    PyErr_Clear();
    return rc;
}

static int int_tuple(PyObject *t, int64_t *out, int max)
{
    Py_ssize_t n = PySequence_Size(t);
    if (n < 0 || n > max)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PySequence_GetItem(t, i);
        out[i] = v ? PyLong_AsLongLong(v) : -1;
        Py_XDECREF(v);
    }
    return PyErr_Occurred() ? -1 : (int)n;
}

int cap_tmeta_read(PyObject *t, cap_tmeta *m)
{
    memset(m, 0, sizeof *m);
    PyObject *dtype = PyObject_GetAttr(t, cap_T.s_dtype);
    PyObject *shape = dtype ? PyObject_GetAttr(t, cap_T.s_shape) : NULL;
    PyObject *stride = shape ? PyObject_CallMethodObjArgs(t, cap_T.s_stride, NULL) : NULL;
    PyObject *device = stride ? PyObject_GetAttr(t, cap_T.s_device) : NULL;
    PyObject *rg = device ? PyObject_GetAttr(t, cap_T.s_requires_grad) : NULL;
    int rc = -1;
    if (!rg)
        goto done;
    m->type = Py_NewRef((PyObject *)Py_TYPE(t));
    m->dtype = Py_NewRef(dtype);
    m->dt = (ptc_dtype)cap_dtype_from_obj(dtype);
    m->ndim = int_tuple(shape, m->sizes, PTC_MAX_DIMS);
    if (m->ndim < 0 || int_tuple(stride, m->strides, PTC_MAX_DIMS) != m->ndim ||
        cap_device_from_obj(device, &m->dev) < 0) {
        PyErr_Clear();
        PyErr_Format(cap_InternalError, "ptc: unsupported tensor (rank > %d, or device)",
                     PTC_MAX_DIMS);
        goto done;
    }
    m->requires_grad = rg == Py_True;
    rc = 0;
done:
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(device);
    Py_XDECREF(rg);
    return rc;
}

void cap_tmeta_str(const cap_tmeta *m, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "%s[", ptc_dtype_name(m->dt));
    for (int i = 0; i < m->ndim && n < size; i++)
        n += (m->dyn >> i & 1) ? (size_t)snprintf(buf + n, size - n, "%s*", i ? "," : "")
                               : (size_t)snprintf(buf + n, size - n, "%s%lld", i ? "," : "",
                                                  (long long)m->sizes[i]);
    if (n < size)
        n += (size_t)snprintf(buf + n, size - n, m->dyn ? "]{contiguous" : "]{");
    for (int i = 0; !m->dyn && i < m->ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? "," : "", (long long)m->strides[i]);
    char dev[32];
    ptc_device_str(m->dev, dev, sizeof dev);
    if (n < size)
        snprintf(buf + n, size - n, "} %s%s", dev, m->requires_grad ? " grad" : "");
}

bool cap_tmeta_dense(const cap_tmeta *m)
{
    int64_t expect = 1;
    for (int i = m->ndim - 1; i >= 0; i--) {
        if (m->sizes[i] != 1 && m->strides[i] != expect)
            return false;
        expect *= m->sizes[i];
    }
    return true;
}

/* Does now match m in everything but the sizes of m's symbolic dims? A tensor
 * with symbolic dims must be contiguous, as it was when traced. */
static bool tmeta_same(const cap_tmeta *now, const cap_tmeta *m)
{
    bool same = now->dtype == m->dtype && now->ndim == m->ndim &&
                now->requires_grad == m->requires_grad && ptc_device_eq(now->dev, m->dev);
    if (same && m->dyn)
        same = cap_tmeta_dense(now);
    for (int i = 0; same && i < m->ndim; i++) {
        if (m->dyn >> i & 1)
            continue;
        same = now->sizes[i] == m->sizes[i] &&
               (m->dyn || now->strides[i] == m->strides[i] || now->sizes[i] <= 1);
    }
    return same;
}

int cap_tmeta_check(PyObject *t, const cap_tmeta *m, char *why, size_t size)
{
    if ((PyObject *)Py_TYPE(t) != m->type) {
        snprintf(why, size, "type %s, expected %s", cap_tpname(Py_TYPE(t)),
                 cap_tpname((PyTypeObject *)m->type));
        return 0;
    }
    cap_tmeta now;
    if (cap_tmeta_read(t, &now) < 0) {
        PyErr_Clear();
        snprintf(why, size, "unreadable tensor");
        return 0;
    }
    bool same = tmeta_same(&now, m);
    if (!same && why) {
        char a[256], b[256];
        cap_tmeta_str(m, a, sizeof a);
        cap_tmeta_str(&now, b, sizeof b);
        snprintf(why, size, "%s, expected %s", b, a);
    }
    Py_DECREF(now.type);
    Py_DECREF(now.dtype);
    return same;
}

int cap_tmeta_size_change(PyObject *t, const cap_tmeta *m)
{
    cap_tmeta now;
    if ((PyObject *)Py_TYPE(t) != m->type || cap_tmeta_read(t, &now) < 0) {
        PyErr_Clear();
        return 0;
    }
    int changed = 0;
    if (now.dtype == m->dtype && now.ndim == m->ndim && now.requires_grad == m->requires_grad &&
        ptc_device_eq(now.dev, m->dev) && cap_tmeta_dense(&now) == cap_tmeta_dense(m))
        for (int i = 0; i < m->ndim; i++)
            changed |= (now.sizes[i] != m->sizes[i]) << i;
    Py_DECREF(now.type);
    Py_DECREF(now.dtype);
    return changed;
}

void cap_tmeta_type(const cap_tmeta *m, ptc_ttype *t)
{
    memset(t, 0, sizeof *t);
    t->dtype = m->dt;
    t->ndim = (int8_t)m->ndim;
    t->device = m->dev;
    t->requires_grad = m->requires_grad && ptc_dtype_is_float(m->dt);
    int64_t expect = 1;
    bool contiguous = true;
    for (int i = m->ndim - 1; i >= 0; i--) {
        t->shape[i] = ptc_dim_c(m->sizes[i]);
        t->strides[i] = ptc_dim_c(m->strides[i]);
        if (m->sizes[i] != 1 && m->strides[i] != expect)
            contiguous = false;
        expect *= m->sizes[i];
    }
    t->layout = contiguous ? PTC_LAYOUT_CONTIGUOUS : PTC_LAYOUT_STRIDED;
    if (contiguous)
        memset(t->strides, 0, sizeof t->strides);
}

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

PyObject *cap_tensor_new(cap_trace *T, ptc_value *v)
{
    cap_tensor *t = PyObject_New(cap_tensor, cap_tensor_type);
    if (!t)
        return NULL;
    t->T = T;
    t->v = v;
    t->input_v = NULL;
    t->src = -1;
    t->fake_type = Py_NewRef(cap_T.Tensor);
    t->base = NULL;
    t->view_key = NULL;
    t->nviews = 0;
    t->views = NULL;
    t->weakrefs = NULL;
    cap_t_track_tensor(T, (PyObject *)t);
    return (PyObject *)t;
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
    int rc_ = cap_torch_getattr(T, (cap_tensor *)self, name, &out);
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
    int rc_ = cap_torch_compare(T, op, a, b, &out);
    return slot_result(T, rc_, out);
}

#define BINSLOT(fname, op)                                                      \
    static PyObject *fname(PyObject *a, PyObject *b)                            \
    {                                                                           \
        cap_trace *T = cap_is_tensor(a) ? live(a) : live(b);                    \
        PyObject *out = NULL;                                                   \
        if (!T) \
            return NULL; \
        int rc_ = cap_torch_binop(T, op, a, b, &out); \
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
    int rc_ = cap_torch_binop(T, CAP_NB_POWER, a, b, &out);
    return slot_result(T, rc_, out);
}

#define UNSLOT(fname, h)                                                        \
    static PyObject *fname(PyObject *a)                                         \
    {                                                                           \
        cap_trace *T = live(a);                                                 \
        PyObject *out = NULL;                                                   \
        if (!T) \
            return NULL; \
        int rc_ = cap_torch_unary(T, h, a, &out); \
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
    int rc_ = cap_torch_getitem(T, (cap_tensor *)a, key, &out);
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
    int rc = cap_torch_setitem(T, (cap_tensor *)a, key, v);
    return slot_result(T, rc, Py_None) ? 0 : -1;
}

static PyObject *tensor_iter(PyObject *a)
{
    cap_trace *T = live(a);
    if (!T)
        return NULL;
    PyObject *items = cap_torch_unbind(T, (cap_tensor *)a);
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
    PyObject *buf[64], *kwnames = nkw ? PyTuple_New(nkw) : NULL;
    if (n + nkw > 64)
        return cap_signal_break(CAP_B_UNSUPPORTED_CALL, "too many arguments");
    for (Py_ssize_t i = 0; i < n; i++)
        buf[i] = PyTuple_GetItem(args, i);
    Py_ssize_t pos = 0, k = 0;
    PyObject *key, *value;
    while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
        PyTuple_SetItem(kwnames, k, Py_NewRef(key));
        buf[n + k++] = value;
    }
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

PyObject *cap_method_new(PyObject *self, const cap_tmap *map)
{
    cap_method *m = PyObject_New(cap_method, cap_method_type);
    if (m) {
        m->self = Py_NewRef(self);
        m->map = map;
    }
    return (PyObject *)m;
}

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

int cap_torch_init(void)
{
    static bool done;
    if (done)
        return 0;
    if (init_torch() < 0 || cap_torch_tables_init() < 0)
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
    if (!cap_GraphBreak || !cap_GraphBreakError || !cap_InternalError)
        return -1;
    cap_tensor_type = (PyTypeObject *)PyType_FromSpec(&tensor_spec);
    cap_method_type = (PyTypeObject *)PyType_FromSpec(&method_spec);
    if (!cap_tensor_type || !cap_method_type ||
        PyModule_AddObjectRef(module, "SymTensor", (PyObject *)cap_tensor_type) < 0 ||
        cap_iter_types_init(module) < 0 || cap_symint_types_init(module) < 0)
        return -1;
    return 0;
}
