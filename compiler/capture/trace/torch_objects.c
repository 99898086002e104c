/* Torch as the trace sees it: the torch objects looked up once (cap_T), the
 * conversions between torch's dtypes and devices and ptc's, and a real
 * tensor's metadata (cap_tmeta), which tensor guards compare and graph
 * inputs are typed by.
 *
 * They sit below the torch layer's handlers because the trace itself needs
 * them: wrapping an outside tensor reads its metadata, a guard compares it.
 */
#include "capture/trace/trace.h"

#include <string.h>

cap_torch cap_T;
/* The torch layer's answers for the trace (trace.h; filled by
 * cap_torch_hooks_install). */
cap_torch_hooks cap_thooks;

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

/* The torch objects the trace compares with or calls; the optional ones
 * may be missing from the running torch. */
static int lookup_objects(void)
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
    for (int i = 0; i < PTC_DTYPE_COUNT; i++) {
        char path[64];
        snprintf(path, sizeof path, "torch.%s", dtype_names[i]);
        if (need(&cap_T.dtypes[i], path))
            return -1;
    }
    return 0;
}

/* nn.Module's global hook dicts (an empty dict for one this torch lacks). */
static int lookup_global_hooks(void)
{
    static const char *hooks[] = {"_global_forward_hooks", "_global_forward_pre_hooks",
                                  "_global_backward_hooks", "_global_backward_pre_hooks"};
    PyObject *mm = PyImport_ImportModule("torch.nn.modules.module");
    if (!mm)
        return -1;
    int n = (int)(sizeof hooks / sizeof *hooks);
    cap_T.global_hooks = PyTuple_New(n);
    for (int i = 0; i < n; i++) {
        PyObject *h = PyObject_GetAttrString(mm, hooks[i]);
        if (!h) {
            PyErr_Clear();
            h = PyDict_New();
        }
        PyTuple_SetItem(cap_T.global_hooks, i, h);
    }
    Py_DECREF(mm);
    return 0;
}

/* The attribute names the trace reads, interned once. */
static int intern_names(void)
{
    struct {
        PyObject **slot;
        const char *s;
    } names[] = {
        {&cap_T.s_shape, "shape"},
        {&cap_T.s_dtype, "dtype"},
        {&cap_T.s_device, "device"},
        {&cap_T.s_is_cpu, "is_cpu"},
        {&cap_T.s_is_cuda, "is_cuda"},
        {&cap_T.s_get_device, "get_device"},
        {&cap_T.s_stride, "stride"},
        {&cap_T.s_requires_grad, "requires_grad"},
        {&cap_T.s_data_ptr, "data_ptr"},
        {&cap_T.s_is_contiguous, "is_contiguous"},
        {&cap_T.s_parameters, "_parameters"},
        {&cap_T.s_buffers, "_buffers"},
        {&cap_T.s_modules, "_modules"},
        {&cap_T.s_training, "training"},
        {&cap_T.s_forward, "forward"},
        {&cap_T.s_type, "type"},
        {&cap_T.s_index, "index"},
        {&cap_T.s_forward_hooks, "_forward_hooks"},
        {&cap_T.s_forward_pre_hooks, "_forward_pre_hooks"},
        {&cap_T.s_backward_hooks, "_backward_hooks"},
        {&cap_T.s_backward_pre_hooks, "_backward_pre_hooks"},
        {&cap_T.s_forward_hooks_with_kwargs, "_forward_hooks_with_kwargs"},
        {&cap_T.s_storage_offset, "storage_offset"},
        {&cap_T.s_setattr, "__setattr__"},
        {&cap_T.s_untyped_storage, "untyped_storage"},
        {&cap_T.s_nbytes, "nbytes"},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].s)))
            return -1;
    return 0;
}

int cap_torch_objects_init(void)
{
    return lookup_objects() < 0 || lookup_global_hooks() < 0 || intern_names() < 0 ? -1 : 0;
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

/* The ints of t (torch.Size and stride()'s result are tuples: read with
 * borrowed items; another sequence through the sequence protocol). */
static int int_tuple(PyObject *t, int64_t *out, int max)
{
    if (PyTuple_Check(t)) {
        Py_ssize_t n = PyTuple_Size(t);
        if (n > max)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++)
            out[i] = PyLong_AsLongLong(PyTuple_GetItem(t, i));
        return PyErr_Occurred() ? -1 : (int)n;
    }
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

/* t's device: t.is_cpu answers for the common case with a shared bool, and
 * t.is_cuda with t.get_device() for a CUDA tensor (two bools and an int: a
 * third of the time of building its torch.device and reading that's type
 * and index); only other tensors build a torch.device to read (guards and
 * externs read every tensor's device on every call). */
static int tensor_device(PyObject *t, ptc_device *out)
{
    PyObject *cpu = PyObject_GetAttr(t, cap_T.s_is_cpu);
    Py_XDECREF(cpu);
    if (cpu == Py_True) {
        *out = PTC_CPU;
        return 0;
    }
    PyObject *cuda = cpu ? PyObject_GetAttr(t, cap_T.s_is_cuda) : NULL;
    Py_XDECREF(cuda);
    PyObject *index =
        cuda == Py_True ? PyObject_CallMethodObjArgs(t, cap_T.s_get_device, NULL) : NULL;
    long i = index ? PyLong_AsLong(index) : -1;
    Py_XDECREF(index);
    if (i >= 0 && i <= INT16_MAX) {
        *out = (ptc_device){PTC_DEV_CUDA, (int16_t)i};
        return 0;
    }
    PyErr_Clear();
    PyObject *device = PyObject_GetAttr(t, cap_T.s_device);
    int rc = device ? cap_device_from_obj(device, out) : -1;
    Py_XDECREF(device);
    return rc;
}

/* What m says of t's layout: dtype, sizes, strides, device. */
static int read_layout(PyObject *t, cap_tmeta *m)
{
    PyObject *dtype = PyObject_GetAttr(t, cap_T.s_dtype);
    PyObject *shape = dtype ? PyObject_GetAttr(t, cap_T.s_shape) : NULL;
    PyObject *stride = shape ? PyObject_CallMethodObjArgs(t, cap_T.s_stride, NULL) : NULL;
    int rc = -1;
    if (!stride)
        goto done;
    m->dt = (ptc_dtype)cap_dtype_from_obj(dtype);
    m->ndim = int_tuple(shape, m->sizes, PTC_MAX_DIMS);
    if (m->ndim < 0 || int_tuple(stride, m->strides, PTC_MAX_DIMS) != m->ndim ||
        tensor_device(t, &m->dev) < 0) {
        PyErr_Clear();
        PyErr_Format(cap_InternalError, "ptc: unsupported tensor (rank > %d, or device)",
                     PTC_MAX_DIMS);
        goto done;
    }
    m->dtype = Py_NewRef(dtype);
    rc = 0;
done:
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    return rc;
}

int cap_tmeta_read_layout(PyObject *t, cap_tmeta *m)
{
    memset(m, 0, sizeof *m);
    return read_layout(t, m);
}

int cap_tmeta_read(PyObject *t, cap_tmeta *m)
{
    memset(m, 0, sizeof *m);
    PyObject *rg = read_layout(t, m) == 0 ? PyObject_GetAttr(t, cap_T.s_requires_grad) : NULL;
    if (!rg) {
        Py_CLEAR(m->dtype);
        return -1;
    }
    m->type = Py_NewRef((PyObject *)Py_TYPE(t));
    m->requires_grad = rg == Py_True;
    Py_DECREF(rg);
    return 0;
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
