/* The "ptc" backend's host: how the runtime (runtime.h) sees torch.
 *
 * Outputs are torch tensors allocated by torch (their ptc storage keeps the
 * PyObject as owner), so the user gets ordinary tensors. Extern ops (mm, bmm,
 * convolution, attention) run torch's kernels: their operands, views into
 * ptc's buffers, are handed to torch without copies through DLPack, and the
 * results are written into the buffers ptc allocated.
 */
#include "exec.h"

#include <stdlib.h>
#include <string.h>

#ifdef PTC_HAVE_RUNTIME
#include "runtime/runtime.h"

/* ---- DLPack (the stable C ABI of dlpack.h, v0.8) ------------------------------------------- */

typedef struct {
    int32_t device_type; /* kDLCPU 1, kDLCUDA 2 */
    int32_t device_id;
} dl_device;
typedef struct {
    uint8_t code; /* kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6 */
    uint8_t bits;
    uint16_t lanes;
} dl_dtype;
typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed {
    dl_tensor t;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
    int64_t shape[PTC_MAX_DIMS], strides[PTC_MAX_DIMS];
} dl_managed;

static void dl_delete(dl_managed *m)
{
    free(m);
}

static void capsule_destructor(PyObject *cap)
{
    /* An unconsumed capsule still owns its tensor description. */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter)
            m->deleter(m);
    }
    PyErr_Clear();
}

static const dl_dtype dl_dtypes[PTC_DTYPE_COUNT] = {
    [PTC_BOOL] = {6, 8, 1}, [PTC_U8] = {1, 8, 1},   [PTC_I8] = {0, 8, 1},
    [PTC_I16] = {0, 16, 1}, [PTC_I32] = {0, 32, 1}, [PTC_I64] = {0, 64, 1},
    [PTC_F16] = {2, 16, 1}, [PTC_BF16] = {4, 16, 1}, [PTC_F32] = {2, 32, 1},
    [PTC_F64] = {2, 64, 1},
};

/* A torch tensor viewing t's memory (no copy). */
static PyObject *torch_view(const ptc_tensor *t)
{
    static PyObject *from_dlpack;
    if (!from_dlpack && !(from_dlpack = cap_import_path("torch.utils.dlpack.from_dlpack")))
        return PyErr_Format(cap_InternalError, "ptc: torch.utils.dlpack is missing");
    dl_managed *m = calloc(1, sizeof *m);
    if (!m)
        return PyErr_NoMemory();
    m->t.data = t->data;
    m->t.device.device_type = t->device.kind == PTC_DEV_CUDA ? 2 : 1;
    m->t.device.device_id = t->device.kind == PTC_DEV_CUDA && t->device.index > 0 ? t->device.index : 0;
    m->t.ndim = t->ndim;
    m->t.dtype = dl_dtypes[t->dtype];
    for (int i = 0; i < t->ndim; i++) {
        m->shape[i] = t->sizes[i];
        m->strides[i] = t->strides[i];
    }
    m->t.shape = m->shape;
    m->t.strides = m->strides;
    m->deleter = dl_delete;
    PyObject *cap = PyCapsule_New(m, "dltensor", capsule_destructor);
    if (!cap) {
        free(m);
        return NULL;
    }
    PyObject *r = PyObject_CallOneArg_compat(from_dlpack, cap);
    Py_DECREF(cap);
    return r;
}

/* ---- host hooks ---------------------------------------------------------------------------------- */

static void release_owned(ptc_storage *s)
{
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF((PyObject *)s->owner);
    PyGILState_Release(g);
    free(s);
}

static int host_alloc(void *ctx, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                      ptc_device dev, ptc_error *err)
{
    PyObject *shape = PyTuple_New(ndim);
    for (int i = 0; shape && i < ndim; i++)
        PyTuple_SetItem(shape, i, PyLong_FromLongLong(sizes[i]));
    PyObject *device = cap_device_obj(dev);
    PyObject *kw = device ? Py_BuildValue("{s:O,s:N}", "dtype", cap_dtype_obj(dt), "device", device) : NULL;
    PyObject *args = shape ? PyTuple_Pack(1, shape) : NULL;
    PyObject *tensor = args && kw ? PyObject_Call(cap_T.empty, args, kw) : NULL;
    Py_XDECREF(shape);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    PyObject *held = NULL;
    if (!tensor || cap_torch_to_ptc(tensor, t, &held) < 0) {
        Py_XDECREF(tensor);
        PyErr_Clear();
        return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "torch could not allocate an output");
    }
    Py_DECREF(held);
    ptc_storage *s = calloc(1, sizeof *s);
    s->refs = 1;
    s->data = t->data;
    s->nbytes = ptc_dtype_size(dt);
    for (int i = 0; i < ndim; i++)
        s->nbytes *= (size_t)sizes[i];
    s->release = release_owned;
    s->owner = tensor; /* the reference from torch.empty */
    t->storage = s;
    (void)ctx;
    return 0;
}

static PyObject *arg_value(const ptc_arg *a)
{
    switch (a->kind) {
    case PTC_ARG_NONE: return Py_NewRef(Py_None);
    case PTC_ARG_INT: return PyLong_FromLongLong(a->i.value);
    case PTC_ARG_INTS: {
        PyObject *l = PyList_New(a->is.n);
        for (int i = 0; l && i < a->is.n; i++)
            PyList_SetItem(l, i, PyLong_FromLongLong(a->is.d[i].value));
        return l;
    }
    case PTC_ARG_FLOAT: return PyFloat_FromDouble(a->f);
    case PTC_ARG_BOOL: return Py_NewRef(a->b ? Py_True : Py_False);
    case PTC_ARG_STR: return PyUnicode_FromString(a->s);
    default: return Py_NewRef(Py_None);
    }
}

static const char *extern_fn(ptc_op op)
{
    switch (op) {
    case PTC_OP_MM: return "torch.mm";
    case PTC_OP_BMM: return "torch.bmm";
    case PTC_OP_ADDMM: return "torch.addmm";
    case PTC_OP_CONVOLUTION: return "torch.convolution";
    case PTC_OP_SDPA: return "torch.nn.functional.scaled_dot_product_attention";
    default: return NULL;
    }
}

/* node(inputs) through torch, the result copied into outs. */
static int host_extern(void *ctx, const ptc_node *node, const ptc_tensor *const *inputs,
                       int ninputs, ptc_tensor *outs, ptc_error *err)
{
    PyGILState_STATE g = PyGILState_Ensure();
    const ptc_schema *s = ptc_op_schema(node->op);
    const char *path = extern_fn(node->op);
    PyObject *fn = path ? cap_import_path(path) : NULL;
    PyObject *args = PyList_New(0), *kw = PyDict_New(), *res = NULL;
    int rc = -1, ti = 0;
    if (!fn) {
        ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "no torch kernel for extern %s", s->name);
        goto done;
    }
    for (int i = 0; i < s->nparams; i++) {
        const ptc_param *p = &s->params[i];
        PyObject *v;
        bool tensor = p->kind == PTC_PK_TENSOR || p->kind == PTC_PK_TENSOR_OPT;
        if (strcmp(p->name, "seed") == 0)
            continue;
        if (tensor) {
            const ptc_tensor *t = ti < ninputs ? inputs[ti] : NULL;
            ti++;
            v = t ? torch_view(t) : Py_NewRef(Py_None);
        } else {
            v = arg_value(&node->args[i]);
        }
        if (!v)
            goto done;
        if (p->kwarg_only)
            PyDict_SetItemString(kw, p->name, v);
        else
            PyList_Append(args, v);
        Py_DECREF(v);
    }
    PyObject *t = PyList_AsTuple(args);
    res = t ? PyObject_Call(fn, t, kw) : NULL;
    Py_XDECREF(t);
    if (!res)
        goto done;
    PyObject *dst = torch_view(&outs[0]);
    PyObject *r = dst ? PyObject_CallMethod(dst, "copy_", "O", res) : NULL;
    Py_XDECREF(dst);
    if (!r)
        goto done;
    Py_DECREF(r);
    rc = 0;
done:
    if (rc < 0 && PyErr_Occurred()) {
        PyObject *et, *ev, *etb;
        PyErr_Fetch(&et, &ev, &etb);
        PyObject *str = ev ? PyObject_Str(ev) : NULL;
        ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "extern %s through torch: %s", s->name,
                   str ? PyUnicode_AsUTF8(str) : "error");
        Py_XDECREF(str);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(etb);
    }
    Py_XDECREF(fn);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    Py_XDECREF(res);
    PyGILState_Release(g);
    (void)ctx;
    return rc;
}

static void *host_stream(void *ctx, ptc_device dev)
{
    PyGILState_STATE g = PyGILState_Ensure();
    static PyObject *current;
    if (!current)
        current = cap_import_path("torch.cuda.current_stream");
    PyObject *d = PyLong_FromLong(dev.index < 0 ? 0 : dev.index);
    PyObject *st = current && d ? PyObject_CallOneArg_compat(current, d) : NULL;
    PyObject *h = st ? PyObject_GetAttrString(st, "cuda_stream") : NULL;
    void *ptr = h ? PyLong_AsVoidPtr(h) : NULL;
    Py_XDECREF(d);
    Py_XDECREF(st);
    Py_XDECREF(h);
    PyErr_Clear();
    PyGILState_Release(g);
    (void)ctx;
    return ptr;
}

static const ptc_host torch_host = {NULL, host_alloc, host_extern, host_stream};

int cap_runtime_compile(cap_entry *e, void **program, ptc_trace_compile *tc, ptc_error *err)
{
    ptc_compile_opts opts = {.backend = PTC_BACKEND_CPU, .trace = tc};
    for (int i = 0; i < e->graph->ninputs; i++)
        if (e->graph->inputs[i]->type.device.kind == PTC_DEV_CUDA)
            opts.backend = PTC_BACKEND_CUDA;
    ptc_program *p = ptc_compile(e->graph, &opts, err);
    *program = p;
    return p ? 0 : -1;
}

void cap_runtime_release(void *program)
{
    if (program)
        ptc_program_release(program);
}

int cap_runtime_run(cap_entry *e, void *program, PyObject **inputs, PyObject **outputs)
{
    static uint64_t rng_offset;
    ptc_graph *g = e->graph;
    ptc_tensor *ins = calloc((size_t)g->ninputs + 1, sizeof *ins);
    ptc_tensor *outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
    PyObject **held = calloc((size_t)g->ninputs + 1, sizeof *held);
    int rc = -1;
    for (int i = 0; i < g->ninputs; i++)
        if (cap_torch_to_ptc(inputs[i], &ins[i], &held[i]) < 0)
            goto done;
    ptc_error err;
    if (ptc_program_run(program, ins, g->ninputs, outs, &torch_host, ++rng_offset, &err) < 0) {
        char buf[1200];
        ptc_error_format(&err, buf, sizeof buf);
        PyErr_Format(cap_InternalError, "ptc: running the compiled graph: %s", buf);
        goto done;
    }
    for (int i = 0; i < g->noutputs; i++) {
        ptc_storage *s = outs[i].storage;
        if (!s || s->release != release_owned || !s->owner) {
            PyErr_SetString(cap_InternalError, "ptc: a compiled output was not allocated by torch");
            goto done;
        }
        outputs[i] = Py_NewRef((PyObject *)s->owner);
    }
    rc = 0;
done:
    for (int i = 0; i < g->noutputs; i++) {
        if (rc < 0)
            Py_CLEAR(outputs[i]);
        ptc_tensor_release(&outs[i]);
    }
    for (int i = 0; i < g->ninputs; i++)
        Py_XDECREF(held[i]);
    free(ins);
    free(outs);
    free(held);
    return rc;
}

#endif /* PTC_HAVE_RUNTIME */
