/* The "ptc" backend's host: how the runtime (runtime.h) sees torch.
 *
 * Outputs are torch tensors allocated by torch (their ptc storage keeps the
 * PyObject as owner), so the user gets ordinary tensors. Extern ops (mm, bmm,
 * convolution, attention) run torch's kernels: their operands, views into
 * ptc's buffers, are handed to torch without copies through DLPack, and the
 * results are written into the buffers ptc allocated.
 */
#include "exec.h"

#include <stdint.h>
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
    if (!from_dlpack && !(from_dlpack = cap_import_path("torch._C._from_dlpack")) &&
        !(PyErr_Clear(), from_dlpack = cap_import_path("torch.utils.dlpack.from_dlpack")))
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

/* Torch views of ptc memory, cached by (address, dtype, sizes, strides,
 * device): a program's arena and weights sit at the same addresses run after
 * run, so externs find their operands here instead of building a DLPack view
 * per call. A view owns nothing, so a stale entry is still a correct view of
 * the memory it names. */
typedef struct vkey {
    void *data;
    int32_t dtype, ndim, kind, index;
    int64_t sizes[PTC_MAX_DIMS], strides[PTC_MAX_DIMS];
} vkey;
enum { VCACHE = 2048, VPROBE = 8 };
static struct {
    vkey k;
    PyObject *t;
} vcache[VCACHE];

static PyObject *cached_view(const ptc_tensor *t)
{
    vkey k;
    memset(&k, 0, sizeof k);
    k.data = t->data;
    k.dtype = t->dtype;
    k.ndim = t->ndim;
    k.kind = t->device.kind;
    k.index = t->device.index;
    for (int d = 0; d < t->ndim; d++) {
        k.sizes[d] = t->sizes[d];
        k.strides[d] = t->strides[d];
    }
    uint64_t h = ptc_hash_bytes(PTC_HASH_INIT, &k, sizeof k);
    int slot = -1;
    for (int i = 0; i < VPROBE; i++) {
        int j = (int)((h + (uint64_t)i) % VCACHE);
        if (vcache[j].t && memcmp(&vcache[j].k, &k, sizeof k) == 0)
            return Py_NewRef(vcache[j].t);
        if (!vcache[j].t && slot < 0)
            slot = j;
    }
    PyObject *v = torch_view(t);
    if (!v)
        return NULL;
    if (slot < 0) {
        slot = (int)(h % VCACHE);
        Py_CLEAR(vcache[slot].t);
    }
    vcache[slot].k = k;
    vcache[slot].t = Py_NewRef(v);
    return v;
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

/* mm, bmm and addmm write straight into ptc's buffer (out=). */
static bool has_out(ptc_op op) { return op == PTC_OP_MM || op == PTC_OP_BMM || op == PTC_OP_ADDMM; }

static void extern_error(ptc_error *err, const ptc_schema *s)
{
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

/* The layout torch's fast CUDA kernels want for input ti of node, given in
 * t: 1 a contiguous copy, 2 a channels-last copy, 0 t as it is.
 *   - scaled_dot_product_attention: the fused kernels (flash, memory
 *     efficient, cudnn) refuse a mask whose last dimension has a stride other
 *     than 1, a broadcast mask from an expand for one, and torch then takes
 *     the math path: a dozen kernels in float32 instead of one.
 *   - convolution: cudnn runs a depthwise convolution in 16-bit floats only
 *     for channels-last input; for contiguous input torch uses its own
 *     depthwise kernel, 3x slower on convnext's 7x7. Eager models get
 *     channels-last input there from their permutes; ptc's buffers are
 *     contiguous. */
static int extern_layout(const ptc_node *node, int ti, const ptc_tensor *t)
{
    if (t->device.kind != PTC_DEV_CUDA || t->ndim < 1)
        return 0;
    if (node->op == PTC_OP_SDPA && ti == 3)
        return t->strides[t->ndim - 1] != 1 && t->sizes[t->ndim - 1] > 1;
    if (node->op == PTC_OP_CONVOLUTION && ti == 0 && t->ndim == 4 &&
        (t->dtype == PTC_BF16 || t->dtype == PTC_F16)) {
        const ptc_arg *groups = ptc_node_arg(node, "groups");
        const ptc_arg *tr = ptc_node_arg(node, "transposed");
        int64_t g = ptc_dim_is_static(groups->i) ? groups->i.value : 1, c = t->sizes[1];
        bool depthwise = !tr->b && g > 1 && g == c;
        bool channels_last = t->strides[1] == 1 && t->strides[3] == c;
        return depthwise && !channels_last ? 2 : 0;
    }
    return 0;
}

/* t as a torch tensor, in the layout extern_layout asks for. */
static PyObject *extern_input(const ptc_node *node, int ti, const ptc_tensor *t)
{
    static PyObject *no_args, *channels_last; /* () and {"memory_format": torch.channels_last} */
    PyObject *v = cached_view(t);
    int layout = v ? extern_layout(node, ti, t) : 0;
    if (!layout)
        return v;
    if (!no_args) {
        PyObject *fmt = cap_import_path("torch.channels_last");
        channels_last = fmt ? Py_BuildValue("{s:O}", "memory_format", fmt) : NULL;
        no_args = channels_last ? PyTuple_New(0) : NULL;
        Py_XDECREF(fmt);
        if (!no_args) {
            Py_CLEAR(channels_last);
            Py_DECREF(v);
            return NULL;
        }
    }
    PyObject *meth = PyObject_GetAttrString(v, "contiguous");
    PyObject *r = meth ? PyObject_Call(meth, no_args, layout == 2 ? channels_last : NULL) : NULL;
    Py_XDECREF(meth);
    Py_DECREF(v);
    return r;
}

/* Appends "v0,v1,..." to line at *n. */
static void put_dims(char *line, size_t size, size_t *n, const int64_t *v, int nd)
{
    for (int d = 0; d < nd && *n < size; d++)
        *n += (size_t)snprintf(line + *n, size - *n, "%s%lld", d ? "," : "", (long long)v[d]);
}

/* One debug line per extern call: the op and each input's dtype, sizes,
 * strides and the alignment of its data (what decides torch's kernel). */
static void log_extern(const ptc_schema *s, const ptc_tensor *const *inputs, int ninputs)
{
    char line[1024];
    size_t n = (size_t)snprintf(line, sizeof line, "extern %s:", s->name);
    for (int i = 0; i < ninputs && n < sizeof line; i++) {
        const ptc_tensor *t = inputs[i];
        if (!t) {
            n += (size_t)snprintf(line + n, sizeof line - n, " None");
            continue;
        }
        n += (size_t)snprintf(line + n, sizeof line - n, " %s[", ptc_dtype_name(t->dtype));
        put_dims(line, sizeof line, &n, t->sizes, t->ndim);
        if (n < sizeof line)
            n += (size_t)snprintf(line + n, sizeof line - n, "] strides (");
        put_dims(line, sizeof line, &n, t->strides, t->ndim);
        uintptr_t p = (uintptr_t)t->data, al = p & -p;
        if (n < sizeof line)
            n += (size_t)snprintf(line + n, sizeof line - n, ") align %d",
                                  al && al < 256 ? (int)al : 256);
    }
    ptc_log(PTC_LOG_RUNTIME, PTC_LOG_DEBUG, "%s", line);
}

/* node(inputs) through torch: the result (a new reference), written into
 * `into` directly when the op has an out= form and into is given. */
static PyObject *call_extern(const ptc_node *node, const ptc_tensor *const *inputs, int ninputs,
                             PyObject *into)
{
    static PyObject *fns[PTC_OP_COUNT];
    const ptc_schema *s = ptc_op_schema(node->op);
    const char *path = extern_fn(node->op);
    if (!path)
        return PyErr_Format(cap_InternalError, "no torch kernel for extern %s", s->name);
    if (!fns[node->op] && !(fns[node->op] = cap_import_path(path)))
        return NULL;
    int npos = 0;
    for (int i = 0; i < s->nparams; i++)
        npos += !s->params[i].kwarg_only && strcmp(s->params[i].name, "seed") != 0;
    PyObject *args = PyTuple_New(npos), *kw = NULL, *res = NULL;
    int na = 0, ti = 0;
    for (int i = 0; args && i < s->nparams; i++) {
        const ptc_param *p = &s->params[i];
        bool tensor = p->kind == PTC_PK_TENSOR || p->kind == PTC_PK_TENSOR_OPT;
        if (strcmp(p->name, "seed") == 0)
            continue;
        PyObject *v;
        if (tensor) {
            const ptc_tensor *t = ti < ninputs ? inputs[ti] : NULL;
            ti++;
            v = t ? extern_input(node, ti - 1, t) : Py_NewRef(Py_None);
        } else {
            v = cap_arg_obj(&node->args[i]);
        }
        if (!v)
            goto done;
        if (p->kwarg_only) {
            if (!kw && !(kw = PyDict_New()))
                goto done;
            PyDict_SetItemString(kw, p->name, v);
            Py_DECREF(v);
        } else {
            PyTuple_SetItem(args, na++, v);
        }
    }
    if (into && has_out(node->op)) {
        if (!kw && !(kw = PyDict_New()))
            goto done;
        PyDict_SetItemString(kw, "out", into);
    }
    if (ptc_log_on(PTC_LOG_RUNTIME, PTC_LOG_DEBUG))
        log_extern(s, inputs, ninputs);
    res = PyObject_Call(fns[node->op], args, kw);
done:
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return res;
}

/* node(inputs) through torch, the result written into outs. */
static int host_extern(void *ctx, const ptc_node *node, const ptc_tensor *const *inputs,
                       int ninputs, ptc_tensor *outs, ptc_error *err)
{
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = -1;
    PyObject *dst = cached_view(&outs[0]);
    PyObject *res = dst ? call_extern(node, inputs, ninputs, dst) : NULL;
    if (res && res != dst && !has_out(node->op)) {
        PyObject *r = PyObject_CallMethod(dst, "copy_", "O", res);
        Py_XDECREF(r);
        if (r)
            rc = 0;
    } else if (res) {
        rc = 0;
    }
    if (rc < 0)
        extern_error(err, ptc_op_schema(node->op));
    Py_XDECREF(dst);
    Py_XDECREF(res);
    PyGILState_Release(g);
    (void)ctx;
    return rc;
}

/* node(inputs) through torch, the (contiguous) result handed to the runtime. */
static int host_extern_new(void *ctx, const ptc_node *node, const ptc_tensor *const *inputs,
                           int ninputs, ptc_tensor *outs, ptc_error *err)
{
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = -1;
    PyObject *res = call_extern(node, inputs, ninputs, NULL);
    if (res && !PyObject_TypeCheck(res, (PyTypeObject *)cap_T.Tensor)) {
        Py_CLEAR(res);
        PyErr_SetString(cap_InternalError, "ptc: an extern returned a non-tensor");
    }
    PyObject *c = res ? PyObject_CallMethod(res, "contiguous", NULL) : NULL;
    PyObject *held = NULL;
    if (c && cap_torch_to_ptc(c, &outs[0], &held) == 0) {
        Py_DECREF(held);
        ptc_storage *st = calloc(1, sizeof *st);
        st->refs = 1;
        st->data = outs[0].data;
        st->release = release_owned;
        st->owner = Py_NewRef(c);
        outs[0].storage = st;
        rc = 0;
    }
    if (rc < 0)
        extern_error(err, ptc_op_schema(node->op));
    Py_XDECREF(c);
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

static const ptc_host torch_host = {NULL, host_alloc, host_extern, host_stream, host_extern_new};

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

/* A kernel's failed check (stage "check", lower.h) is the user's error, not
 * ptc's: eager's exception, IndexError where the message says so. */
static void raise_run_error(const ptc_error *err)
{
    static const char index_error[] = "IndexError: ";
    if (strcmp(err->stage, "check") == 0) {
        bool index = strncmp(err->msg, index_error, strlen(index_error)) == 0;
        PyErr_SetString(index ? PyExc_IndexError : PyExc_RuntimeError,
                        err->msg + (index ? strlen(index_error) : 0));
        return;
    }
    char buf[1200];
    ptc_error_format(err, buf, sizeof buf);
    PyErr_Format(cap_InternalError, "ptc: running the compiled graph: %s", buf);
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
        raise_run_error(&err);
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
