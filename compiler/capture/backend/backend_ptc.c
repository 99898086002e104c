/* The "ptc" backend's host: how the runtime (runtime.h) sees torch.
 *
 * Outputs are torch tensors allocated by torch (their ptc storage keeps the
 * PyObject as owner), so the user gets ordinary tensors. Extern ops (mm, bmm,
 * convolution, attention) run torch's kernels: their operands, views into
 * ptc's buffers, are handed to torch without copies through DLPack, and the
 * results are written into the buffers ptc allocated.
 */
#include "capture/backend/backend.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef PTC_HAVE_RUNTIME
#include "pipeline/pipeline.h"

/* ---- host hooks ---------------------------------------------------------------------------------- */

/* Memory a torch tensor owns for ptc: an output torch.empty allocated, or an
 * extern's result handed over. While ptc holds it, that tensor is the torch
 * view of the memory laid out as `as`, so an extern whose operand is exactly
 * that takes the tensor itself (owner_view) instead of a DLPack view, which
 * the view cache could not keep: such memory is new every call. The table
 * `owned` finds a live one by address; an entry leaves it with its storage,
 * so it never names freed memory. Used under the GIL only. */
typedef struct torch_storage {
    ptc_storage s; /* s.owner: the torch tensor */
    ptc_tensor as; /* its dtype, sizes, strides and device (no storage) */
} torch_storage;

enum { OWNED = 1024 };
static torch_storage *owned[OWNED];

static unsigned owned_slot(const void *data)
{
    uintptr_t p = (uintptr_t)data;
    return (unsigned)((p >> 6) ^ (p >> 17)) % OWNED;
}

static void release_owned(ptc_storage *s)
{
    PyGILState_STATE g = PyGILState_Ensure();
    unsigned slot = owned_slot(s->data);
    if (owned[slot] == (torch_storage *)s)
        owned[slot] = NULL;
    Py_XDECREF((PyObject *)s->owner);
    PyGILState_Release(g);
    free(s);
}

/* t, laid out as torch tensor `tensor` (a reference it takes over), as a ptc
 * tensor keeping it alive; NULL storage when out of memory. */
static ptc_storage *torch_owned(PyObject *tensor, ptc_tensor *t)
{
    torch_storage *ts = calloc(1, sizeof *ts);
    if (!ts)
        return NULL;
    ts->s.refs = 1;
    ts->s.data = t->data;
    ts->s.nbytes = ptc_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++)
        ts->s.nbytes *= (size_t)t->sizes[i];
    ts->s.release = release_owned;
    ts->s.owner = tensor;
    ts->as = *t;
    owned[owned_slot(t->data)] = ts;
    t->storage = &ts->s;
    return &ts->s;
}

/* The torch tensor that owns t's memory laid out as t (a new reference), or
 * NULL. */
static PyObject *owner_view(const ptc_tensor *t)
{
    const torch_storage *ts = owned[owned_slot(t->data)];
    const ptc_tensor *as = ts ? &ts->as : NULL;
    if (!as || as->data != t->data || as->dtype != t->dtype || as->ndim != t->ndim ||
        !ptc_device_eq(as->device, t->device))
        return NULL;
    for (int d = 0; d < t->ndim; d++)
        if (as->sizes[d] != t->sizes[d] || as->strides[d] != t->strides[d])
            return NULL;
    return Py_NewRef((PyObject *)ts->s.owner);
}

/* torch.empty's keywords for dtype dt on dev (a new reference). */
static PyObject *empty_kwargs(ptc_dtype dt, ptc_device dev)
{
    PyObject *device = cap_device_obj(dev);
    return device ? Py_BuildValue("{s:O,s:N}", "dtype", cap_dtype_obj(dt), "device", device)
                  : NULL;
}

/* The bound method new_empty of a tensor of no elements of dtype dt on dev,
 * which outputs are made by (borrowed, kept per pair), or NULL (without an
 * error: a device beyond the table, or with no index). */
static PyObject *output_maker(ptc_dtype dt, ptc_device dev)
{
    enum { MAX_CACHED_DEVICES = 16 };
    static PyObject *kept[PTC_DTYPE_COUNT][1 + MAX_CACHED_DEVICES];
    int slot = dev.kind == PTC_DEV_CPU ? 0 : dev.index >= 0 ? 1 + dev.index : -1;
    if ((int)dt < 0 || dt >= PTC_DTYPE_COUNT || slot < 0 || slot > MAX_CACHED_DEVICES)
        return NULL;
    if (!kept[dt][slot]) {
        PyObject *kw = empty_kwargs(dt, dev);
        PyObject *args = kw ? Py_BuildValue("((i))", 0) : NULL;
        PyObject *like = args ? PyObject_Call(cap_T.empty, args, kw) : NULL;
        kept[dt][slot] = like ? PyObject_GetAttrString(like, "new_empty") : NULL;
        Py_XDECREF(like);
        Py_XDECREF(args);
        Py_XDECREF(kw);
    }
    return kept[dt][slot];
}

/* A new uninitialised contiguous tensor of shape (a tuple), dtype dt, on dev:
 * every output of every run is allocated here. template.new_empty(*shape)
 * gives what torch.empty(shape, dtype=, device=) does, and torch parses
 * sizes given one by one in half the time of a tuple of them, and that in
 * half the time of the keywords (a 2-d output: 1.6, 2.7 and 4.4 us on the
 * CPU; every output and saved tensor of a training step is one). */
static PyObject *new_empty(PyObject *shape, ptc_dtype dt, ptc_device dev)
{
    PyObject *make = output_maker(dt, dev);
    if (make && PyTuple_Size(shape) > 0)
        return PyObject_Call(make, shape, NULL);
    if (make) { /* new_empty() takes no sizes as () only */
        PyObject *args = PyTuple_Pack(1, shape);
        PyObject *t = args ? PyObject_Call(make, args, NULL) : NULL;
        Py_XDECREF(args);
        return t;
    }
    if (PyErr_Occurred())
        return NULL;
    PyObject *kw = empty_kwargs(dt, dev);
    PyObject *args = kw ? PyTuple_Pack(1, shape) : NULL;
    PyObject *t = args ? PyObject_Call(cap_T.empty, args, kw) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return t;
}

/* A new contiguous torch tensor as t. Its metadata is what was asked for, so
 * only its address is read back (cap_torch_to_ptc's six attribute reads were
 * a fifth of a CUDA training step's host time in resnet50's forward). */
static int host_alloc(void *ctx, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                      ptc_device dev, ptc_error *err)
{
    PyObject *shape = PyTuple_New(ndim);
    for (int i = 0; shape && i < ndim; i++)
        PyTuple_SetItem(shape, i, PyLong_FromLongLong(sizes[i]));
    PyObject *tensor = shape ? new_empty(shape, dt, dev) : NULL;
    Py_XDECREF(shape);
    PyObject *ptr = tensor ? PyObject_CallMethodObjArgs(tensor, cap_T.s_data_ptr, NULL) : NULL;
    void *data = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
    Py_XDECREF(ptr);
    if (!ptr || PyErr_Occurred()) {
        Py_XDECREF(tensor);
        PyErr_Clear();
        return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "torch could not allocate an output");
    }
    *t = ptc_tensor_borrow(data, dt, ndim, sizes, NULL);
    t->device = dev;
    (void)ctx;
    if (torch_owned(tensor, t)) /* the reference from torch.empty */
        return 0;
    Py_DECREF(tensor);
    return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "out of memory");
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

/* A word at a time over the fields k uses (a byte-wise hash of the whole
 * key was 5% of a chain of small externs: every operand is looked up). */
static uint64_t vkey_hash(const vkey *k)
{
    uint64_t h = (uint64_t)(uintptr_t)k->data;
    uint64_t words[2] = {(uint64_t)(uint32_t)k->dtype << 32 | (uint32_t)k->ndim,
                         (uint64_t)(uint32_t)k->kind << 32 | (uint32_t)k->index};
    for (int i = 0; i < 2 + 2 * k->ndim; i++) {
        uint64_t w = i < 2 ? words[i] : i % 2 ? (uint64_t)k->strides[i / 2 - 1]
                                               : (uint64_t)k->sizes[i / 2 - 1];
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
    }
    return h;
}

static PyObject *cached_view(const ptc_tensor *t)
{
    PyObject *own = owner_view(t);
    if (own)
        return own;
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
    uint64_t h = vkey_hash(&k);
    int slot = -1;
    for (int i = 0; i < VPROBE; i++) {
        int j = (int)((h + (uint64_t)i) % VCACHE);
        if (vcache[j].t && memcmp(&vcache[j].k, &k, sizeof k) == 0)
            return Py_NewRef(vcache[j].t);
        if (!vcache[j].t && slot < 0)
            slot = j;
    }
    PyObject *v = cap_torch_view_of_ptc(t);
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

/* The torch function each extern op calls (prims.cumsum, cumprod,
 * scatter_add and scatter on CUDA only: ptc_exec_extern_by_host); an op of several
 * outputs returns them as a sequence. extern_fn: a node's, *slot where
 * call_extern keeps it (its op, or one past the ops for a transposed
 * convolution, which has a faster form on the CPU). */
static const char *const extern_paths[PTC_OP_COUNT] = {
    [PTC_OP_MM] = "torch.mm",
    [PTC_OP_BMM] = "torch.bmm",
    [PTC_OP_ADDMM] = "torch.addmm",
    [PTC_OP_CONVOLUTION] = "torch.convolution",
    [PTC_OP_CONVOLUTION_BACKWARD_WEIGHT] = "ptc._eager.convolution_backward_weight",
    [PTC_OP_CONVOLUTION_BACKWARD] = "ptc._eager.convolution_backward",
    [PTC_OP_SDPA] = "torch.nn.functional.scaled_dot_product_attention",
    [PTC_OP_SORT] = "torch.sort", [PTC_OP_TOPK] = "torch.topk",
    [PTC_OP_CUMMAX] = "torch.cummax", [PTC_OP_CUMMIN] = "torch.cummin",
    [PTC_OP_PRIMS_CUMSUM] = "torch.cumsum", [PTC_OP_PRIMS_CUMPROD] = "torch.cumprod",
    [PTC_OP_PRIMS_SCATTER_ADD] = "torch.scatter_add", [PTC_OP_PRIMS_SCATTER] = "torch.scatter",
};

static const char *extern_fn(const ptc_node *node, int *slot)
{
    *slot = node->op;
    if (node->op == PTC_OP_CONVOLUTION && ptc_node_arg(node, "transposed")->b) {
        *slot = PTC_OP_COUNT;
        return "ptc._eager.convolution_transposed";
    }
    return extern_paths[node->op];
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

/* The layout torch's kernels want for input ti of node, given in t: 1 a
 * contiguous copy, 2 a channels-last copy, 0 t as it is.
 *   - sort, topk: contiguous, as their results must be (torch's take the input's).
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
    if (node->op == PTC_OP_SORT || node->op == PTC_OP_TOPK)
        return !ptc_tensor_is_contiguous(t);
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

/* What the host hooks know of the run under way (ptc_host.ctx): the torch
 * tensors given for the graph's inputs (given, and held: cap_torch_to_ptc's
 * references), as the runtime reads them (ins); the first nconsumed are
 * handed over (host_input_done); weights: the program's kept channels-last
 * copies of convolution weights, or NULL. */
typedef struct host_run {
    PyObject **given, **held;
    const ptc_tensor *ins;
    int ninputs, nconsumed;
    cap_weight_cache *weights;
} host_run;

/* Operand ti of node as a torch tensor, in the layout extern_layout asks
 * for; a convolution's weight that is a graph input, as the program's kept
 * channels-last copy where the convolution's input is channels-last (torch's
 * convolution would copy it into that layout itself, every call). */
static PyObject *extern_input(const host_run *run, const ptc_node *node,
                              const ptc_tensor *const *inputs, int ti)
{
    const ptc_tensor *t = inputs[ti];
    PyObject *v = cached_view(t);
    if (v && node->op == PTC_OP_CONVOLUTION && ti == 1 && run->weights &&
        cap_weight_wants_channels_last(inputs[0], t))
        Py_SETREF(v, cap_weight_cache_get(run->weights, run->given, run->ins, run->ninputs, t, v));
    int layout = v ? extern_layout(node, ti, t) : 0;
    if (!layout)
        return v;
    PyObject *r = cap_contiguous_as(v, layout == 2);
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

/* Arguments of ptc's ops that torch's function does not take: seed (ptc's
 * random streams) and heads_last (where ptc wants attention's result). */
static bool ptc_only_param(const char *name)
{
    return strcmp(name, "seed") == 0 || strcmp(name, "heads_last") == 0;
}

/* Whether keyword p of an extern call can be left out: the callee is a torch
 * function (path "torch...."), whose defaults are the schema's, and the
 * node's value is that default. torch parses each keyword it is given:
 * addmm's beta=1, alpha=1 cost half of a small addmm's host time. */
static bool default_keyword(const char *path, const ptc_param *p, const ptc_arg *a)
{
    return p->kwarg_only && p->has_default && strncmp(path, "torch.", 6) == 0 &&
           ptc_arg_eq(&p->def, a);
}

/* node(inputs) through torch: the result (a new reference), written into
 * `into` directly when the op has an out= form and into is given. */
static PyObject *call_extern(const host_run *run, const ptc_node *node,
                             const ptc_tensor *const *inputs, int ninputs, PyObject *into)
{
    static PyObject *fns[PTC_OP_COUNT + 1];
    const ptc_schema *s = ptc_op_schema(node->op);
    int slot;
    const char *path = extern_fn(node, &slot);
    if (!path)
        return PyErr_Format(cap_InternalError, "no torch kernel for extern %s", s->name);
    if (!fns[slot] && !(fns[slot] = cap_import_path(path)))
        return NULL;
    int npos = 0;
    for (int i = 0; i < s->nparams; i++)
        npos += !s->params[i].kwarg_only && !ptc_only_param(s->params[i].name);
    PyObject *args = PyTuple_New(npos), *kw = NULL, *res = NULL;
    int na = 0, ti = 0;
    for (int i = 0; args && i < s->nparams; i++) {
        const ptc_param *p = &s->params[i];
        bool tensor = p->kind == PTC_PK_TENSOR || p->kind == PTC_PK_TENSOR_OPT;
        if (ptc_only_param(p->name) || default_keyword(path, p, &node->args[i])) {
            ti += tensor;
            continue;
        }
        PyObject *v;
        if (tensor) {
            const ptc_tensor *t = ti < ninputs ? inputs[ti] : NULL;
            ti++;
            v = t ? extern_input(run, node, inputs, ti - 1) : Py_NewRef(Py_None);
        } else {
            v = cap_arg_obj(&node->args[i], NULL);
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
    res = PyObject_Call(fns[slot], args, kw);
done:
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return res;
}

/* Output i of node among the extern's results res (a new reference). */
static PyObject *extern_result(const ptc_node *node, PyObject *res, int i)
{
    PyObject *r = node->nout == 1 ? Py_NewRef(res) : PySequence_GetItem(res, i);
    if (r && !PyObject_TypeCheck(r, (PyTypeObject *)cap_T.Tensor)) {
        Py_CLEAR(r);
        PyErr_SetString(cap_InternalError, "ptc: an extern returned a non-tensor");
    }
    if (r && node->op == PTC_OP_SDPA && ptc_node_arg(node, "heads_last")->b) {
        /* torch's [B, H, L, E] as the [B, L, H, E] ptc asked for: a view,
           laid out as the buffer where torch's kernel wrote L outside H */
        PyObject *t = PyObject_CallMethod(r, "transpose", "ii", 1, 2);
        Py_SETREF(r, t);
    }
    return r;
}

/* Copies node's results res into its outputs outs (ptc's buffers). */
static int copy_results(const ptc_node *node, PyObject *res, ptc_tensor *outs)
{
    for (int i = 0; i < node->nout && i < 2; i++) {
        PyObject *item = extern_result(node, res, i);
        PyObject *dst = item ? cached_view(&outs[i]) : NULL;
        PyObject *r = dst ? PyObject_CallMethod(dst, "copy_", "O", item) : NULL;
        Py_XDECREF(item);
        Py_XDECREF(dst);
        Py_XDECREF(r);
        if (!r)
            return -1;
    }
    return 0;
}

/* node(inputs) through torch, the result written into outs. */
static int host_extern(void *ctx, const ptc_node *node, const ptc_tensor *const *inputs,
                       int ninputs, ptc_tensor *outs, ptc_error *err)
{
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = -1;
    PyObject *dst = has_out(node->op) ? cached_view(&outs[0]) : NULL;
    PyObject *res = dst || !has_out(node->op) ? call_extern(ctx, node, inputs, ninputs, dst) : NULL;
    if (res)
        rc = has_out(node->op) ? 0 : copy_results(node, res, outs);
    if (rc < 0)
        extern_error(err, ptc_op_schema(node->op));
    Py_XDECREF(dst);
    Py_XDECREF(res);
    PyGILState_Release(g);
    return rc;
}

/* Whether ptc buffer t asks for channels-last: layout planning chose it. */
static bool wants_channels_last(const ptc_tensor *t)
{
    return t->ndim == 4 && t->strides[1] == 1 && t->sizes[1] > 1;
}

/* Whether ptc buffer t takes any dense layout: strides all 0 (a gradient the
 * program returns, ptc_compile_opts.extern_output_layouts). */
static bool takes_any_dense(const ptc_tensor *t)
{
    if (t->ndim == 0)
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] != 0)
            return false;
    return true;
}

/* Whether torch's result, read into got, is laid out as out asks already:
 * then it is handed over as it is, without a call of contiguous() (which
 * would return it unchanged: torch's is_contiguous is ptc_tensor_is_contiguous). */
static bool laid_out_as_asked(const ptc_tensor *out, const ptc_tensor *got)
{
    if (takes_any_dense(out))
        return ptc_tensor_is_dense(got);
    return !wants_channels_last(out) && ptc_tensor_is_contiguous(got);
}

/* t (a torch tensor) as a ptc tensor laid out as out asks, keeping it alive:
 * channels-last where layout planning chose it (torch's convolutions return
 * that for channels-last input), torch's own dense layout where out takes
 * any, else contiguous. */
static int hand_over(PyObject *t, ptc_tensor *out)
{
    PyObject *held = NULL;
    ptc_tensor got;
    if (cap_torch_to_ptc(t, &got, &held) < 0)
        return -1;
    if (!laid_out_as_asked(out, &got)) {
        PyObject *c = cap_contiguous_as(t, wants_channels_last(out));
        Py_CLEAR(held);
        int bad = !c || cap_torch_to_ptc(c, &got, &held) < 0;
        Py_XDECREF(c);
        if (bad)
            return -1;
    }
    if (!torch_owned(held, &got)) { /* the reference cap_torch_to_ptc took */
        Py_DECREF(held);
        PyErr_NoMemory();
        return -1;
    }
    *out = got;
    return 0;
}

/* node(inputs) through torch, the results handed to the runtime laid out as
 * outs ask (hand_over). */
static int host_extern_new(void *ctx, const ptc_node *node, const ptc_tensor *const *inputs,
                           int ninputs, ptc_tensor *outs, ptc_error *err)
{
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = -1, nout = node->nout < 2 ? node->nout : 2, done = 0;
    PyObject *res = call_extern(ctx, node, inputs, ninputs, NULL);
    for (; res && done < nout; done++) {
        PyObject *t = extern_result(node, res, done);
        int bad = !t || hand_over(t, &outs[done]) < 0;
        Py_XDECREF(t);
        if (bad)
            break;
    }
    if (res && done == nout)
        rc = 0;
    for (int i = 0; rc < 0 && i < done; i++)
        ptc_tensor_release(&outs[i]);
    if (rc < 0)
        extern_error(err, ptc_op_schema(node->op));
    Py_XDECREF(res);
    PyGILState_Release(g);
    return rc;
}

/* The current stream of CUDA device dev, asked of torch once per run:
 * torch._C._cuda_getCurrentRawStream(index) gives its handle (what
 * Inductor's launchers ask); torch.cuda.current_stream(index).cuda_stream,
 * a Python function building a Stream to read, where torch has no such
 * function. */
static void *host_stream(void *ctx, ptc_device dev)
{
    PyGILState_STATE g = PyGILState_Ensure();
    static PyObject *raw, *current;
    static bool looked;
    if (!looked) {
        looked = true;
        raw = cap_import_path("torch._C._cuda_getCurrentRawStream");
        PyErr_Clear();
    }
    if (!raw && !current)
        current = cap_import_path("torch.cuda.current_stream");
    PyObject *d = PyLong_FromLong(dev.index < 0 ? 0 : dev.index);
    PyObject *st = !d        ? NULL
                   : raw     ? PyObject_CallOneArg_compat(raw, d)
                   : current ? PyObject_CallOneArg_compat(current, d)
                             : NULL;
    PyObject *h = st && !raw ? PyObject_GetAttrString(st, "cuda_stream") : Py_XNewRef(st);
    void *ptr = h ? PyLong_AsVoidPtr(h) : NULL;
    Py_XDECREF(d);
    Py_XDECREF(st);
    Py_XDECREF(h);
    PyErr_Clear();
    PyGILState_Release(g);
    (void)ctx;
    return ptr;
}

static bool host_writes_in_place(void *ctx, const ptc_node *node)
{
    (void)ctx;
    return has_out(node->op);
}

static const ptc_host torch_host = {.alloc = host_alloc,
                                    .run_extern = host_extern,
                                    .cuda_stream = host_stream,
                                    .run_extern_new = host_extern_new,
                                    .writes_in_place = host_writes_in_place};


struct ptir_compiled;

typedef struct cap_program {
    ptc_program *p;
    int ninputs, noutputs;
    cap_out_layout *layout;    /* per output (out_strides.c) */
    bool draws;                /* has random ops: each run needs an RNG offset */
    bool cuda;                 /* compiled for a CUDA device */
    cap_weight_cache *weights; /* an inference program's kept weights, or NULL */
    /* reduce-overhead: the CUDA graph recorder (python/ptc/_cudagraphs.py)
     * that runs the program, and the capsule's view of it that it runs
     * the program through (cleared when the program goes) */
    PyObject *graphs;
    struct ptir_compiled *graphs_ref;
} cap_program;

/* Random ops (dropout, rand, attention with dropout) draw from ptc's
 * counter-based generator (ops.h). */
static bool draws_random(const ptc_node *n)
{
    if (ptc_op_flags(n->op) & PTC_F_RANDOM)
        return true;
    return n->op == PTC_OP_SDPA && ptc_node_arg(n, "dropout_p")->f > 0;
}

/* Whether g runs on CUDA (an input lives there). */
static bool on_cuda(const ptc_graph *g)
{
    for (int i = 0; i < g->ninputs; i++)
        if (g->inputs[i]->type.device.kind == PTC_DEV_CUDA)
            return true;
    return false;
}

/* A program for g compiled with opts, short of its ptc program. */
static cap_program *program_for(const ptc_graph *g, const ptc_compile_opts *opts, ptc_error *err)
{
    cap_program *cp = calloc(1, sizeof *cp);
    if (!cp) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "runtime", "out of memory");
        return NULL;
    }
    cp->ninputs = g->ninputs;
    cp->noutputs = g->noutputs;
    cp->cuda = opts->backend == PTC_BACKEND_CUDA;
    for (int i = 0; i < g->nnodes; i++)
        cp->draws |= draws_random(g->nodes[i]);
    return cp;
}

/* g compiled with opts into *program; plan_outputs: with eager's output
 * strides (cap_plan_out_layouts, known: those the trace knew, or NULL). */
static int compile_with(const ptc_graph *g, const ptc_compile_opts *opts, bool plan_outputs,
                        const cap_out_strides *known, void **program, ptc_error *err)
{
    cap_program *cp = program_for(g, opts, err);
    if (!cp)
        return -1;
    ptc_graph *permuted = NULL;
    if (plan_outputs && cap_plan_out_layouts(g, known, &cp->layout, &permuted, err) < 0) {
        cap_runtime_release(cp);
        return -1;
    }
    cp->p = ptc_compile(permuted ? permuted : g, opts, err);
    if (permuted)
        ptc_graph_free(permuted);
    if (!cp->p) {
        cap_runtime_release(cp);
        return -1;
    }
    *program = cp;
    return 0;
}

/* Compiles g into *program. A training graph (the forward or backward
 * autograd runs) returns its outputs as its kernels write them; an inference
 * graph returns eager's output strides. autotune: its kernels are tuned at
 * their first run (runtime/autotune.c). */
static int compile_program(const ptc_graph *g, bool training, bool autotune,
                           const int *output_inputs, const cap_out_strides *known,
                           void **program, ptc_trace_compile *tc, ptc_error *err)
{
    /* a training graph's weights change every step: copies would only
       double their memory */
    cap_weight_cache *weights = training ? NULL : cap_weight_cache_new(g, output_inputs);
    ptc_compile_opts opts = {.backend = on_cuda(g) ? PTC_BACKEND_CUDA : PTC_BACKEND_CPU,
                             .trace = tc,
                             .autotune = autotune,
                             .weights_kept = weights != NULL,
                             .output_inputs = output_inputs};
    if (compile_with(g, &opts, !training, known, program, err) < 0) {
        cap_weight_cache_free(weights);
        return -1;
    }
    ((cap_program *)*program)->weights = weights;
    return 0;
}

int cap_runtime_compile_graph(const ptc_graph *g, void **program, ptc_trace_compile *tc,
                              ptc_error *err)
{
    return compile_program(g, true, false, NULL, NULL, program, tc, err);
}

/* Layouts of a training step: on CUDA the convolution chains are planned
 * channels-last, as for inference (cuDNN's fast layout). On the CPU both
 * halves keep contiguous layouts: oneDNN's convolution backward is slower on
 * channels-last tensors at training shapes (resnet18, batch 8 at 64x64:
 * forward + backward 157 ms contiguous against 217 ms channels-last on this
 * CPU), and a channels-last activation makes each contiguous weight's
 * gradient channels-last, which AccumulateGrad's layout contract then copies
 * (ptc._autograd); PTC_LAYOUT=channels_last plans them all the same. */
static ptc_compile_opts training_opts(const ptc_graph *g, bool backward, const int *output_inputs,
                                      ptc_trace_compile *tc, ptc_metrics *backward_times)
{
    ptc_backend backend = on_cuda(g) ? PTC_BACKEND_CUDA : PTC_BACKEND_CPU;
    /* the backward's stage files would overwrite the forward's */
    return (ptc_compile_opts){.backend = backend,
                              .trace = backward ? NULL : tc,
                              .metrics = backward && tc ? backward_times : NULL,
                              .extern_output_layouts = backward,
                              .contiguous_layouts = backend == PTC_BACKEND_CPU,
                              .trace_keeps_captured = true, .keep_conv_epilogues = true,
                              .output_inputs = output_inputs};
}

/* Both halves are compiled together (ptc_compile_all): one compile worker
 * makes the code of the forward's and the backward's kernels. */
int cap_runtime_compile_training(const ptc_graph *forward, const int *output_inputs,
                                 const ptc_graph *backward, void **forward_program,
                                 void **backward_program, ptc_trace_compile *tc, ptc_error *err)
{
    ptc_metrics backward_times = {0};
    int first = forward ? 0 : 1; /* without a forward: the backward alone */
    ptc_compile_opts opts[2] = {{0}, training_opts(backward, true, NULL, tc, &backward_times)};
    if (forward)
        opts[0] = training_opts(forward, false, output_inputs, tc, NULL);
    const ptc_graph *gs[2] = {forward, backward};
    const ptc_compile_opts *os[2] = {&opts[0], &opts[1]};
    cap_program *cps[2] = {NULL, NULL};
    for (int i = first; i < 2 && (i == first || cps[i - 1]); i++)
        cps[i] = program_for(gs[i], &opts[i], err);
    ptc_program *ps[2] = {NULL, NULL};
    int rc = cps[1] ? ptc_compile_all(gs + first, os + first, 2 - first, ps + first, err) : -1;
    if (tc)
        ptc_metrics_add_all(ptc_trace_metrics(tc), &backward_times, "backward_");
    for (int i = first; i < 2; i++) {
        if (cps[i])
            cps[i]->p = ps[i];
        if (rc && cps[i])
            cap_runtime_release(cps[i]);
    }
    if (rc)
        return -1;
    if (forward)
        *forward_program = cps[0];
    *backward_program = cps[1];
    return 0;
}

int *cap_writeback_inputs(const cap_entry *e, ptc_error *err)
{
    int *into = malloc(sizeof(int) * ((size_t)e->graph->noutputs + 1));
    if (!into) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "runtime", "out of memory");
        return NULL;
    }
    for (int i = 0; i < e->graph->noutputs; i++)
        into[i] = -1;
    for (int k = 0; k < e->nwriteback; k++)
        into[e->writeback[k].output] = e->writeback[k].input;
    return into;
}

static int apply_mode(void *program, const char *mode, const cap_entry *e, ptc_error *err);

int cap_runtime_compile(cap_entry *e, const char *mode, void **program, ptc_trace_compile *tc,
                        ptc_error *err)
{
    bool autotune = strncmp(mode, "max-autotune", 12) == 0;
    /* the inputs written in place (cap_entry.writeback): the program may
       write them itself instead of returning values to copy into them */
    int *output_inputs = cap_writeback_inputs(e, err);
    if (!output_inputs)
        return -1;
    int rc = compile_program(e->graph, false, autotune, output_inputs, e->out_strides, program, tc,
                             err);
    free(output_inputs);
    if (rc < 0)
        return -1;
    return apply_mode(*program, mode, e, err);
}

static void release_graphs(cap_program *cp);

void cap_runtime_release(void *program)
{
    cap_program *cp = program;
    if (!cp)
        return;
    release_graphs(cp);
    if (cp->p)
        ptc_program_release(cp->p);
    free(cp->layout);
    cap_weight_cache_free(cp->weights);
    free(cp);
}

void cap_mark_partial_run(void)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v && PyObject_SetAttrString(v, "_ptc_partial_run", Py_True) < 0)
        PyErr_Clear();
    PyErr_Restore(t, v, tb);
}

bool cap_is_partial_run(void)
{
    if (!PyErr_Occurred())
        return false;
    if (PyErr_ExceptionMatches(cap_PartialRunError))
        return true;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    bool marked = v && PyObject_HasAttrString(v, "_ptc_partial_run");
    PyErr_Restore(t, v, tb);
    return marked;
}

/* A kernel's failed check (stage "check", lower.h) is the user's error, not
 * ptc's: eager's exception, IndexError where the message says so. On the CPU
 * the caller runs the graph's segment again eagerly, which makes its writes
 * to outside objects and raises eager's own error from the user's frame. Not
 * on CUDA: there eager raises nothing (an integer division by zero) or stops
 * the process's CUDA context with a device-side assert (an index out of
 * range), so the check's error, the CPU's, is raised as it is (man ptc.7),
 * marked not to be rerun. A failure after the run wrote inputs in place is
 * ptc.PartialRunError: an internal error would fall back to eager, which
 * would redo those writes; a check failing then keeps eager's exception,
 * marked not to be rerun too. */
static void raise_run_error(const ptc_error *err, bool cuda)
{
    static const char index_error[] = "IndexError: ";
    bool written = err->inputs_written;
    if (strcmp(err->stage, "check") == 0) {
        bool index = strncmp(err->msg, index_error, strlen(index_error)) == 0;
        PyErr_SetString(index ? PyExc_IndexError : PyExc_RuntimeError,
                        err->msg + (index ? strlen(index_error) : 0));
        if (written || cuda)
            cap_mark_partial_run();
        return;
    }
    char buf[1200];
    ptc_error_format(err, buf, sizeof buf);
    if (written) { /* not rerun eagerly */
        PyErr_Format(cap_PartialRunError,
                     "ptc: the compiled graph failed after writing some of its inputs in "
                     "place, which now hold part of the new values (running it again "
                     "through torch ops would apply those writes twice): %s",
                     buf);
        return;
    }
    PyErr_Format(cap_InternalError, "ptc: running the compiled graph: %s", buf);
}

/* r (contiguous, dims in the layout's order) as a tensor with the output's
 * own dims and eager's strides over the same memory. */
static PyObject *unpermute(PyObject *r, const cap_out_layout *l)
{
    cap_tmeta m;
    if (cap_tmeta_read(r, &m) < 0)
        return NULL;
    Py_DECREF(m.type);
    Py_DECREF(m.dtype);
    PyObject *size = PyTuple_New(m.ndim), *stride = PyTuple_New(m.ndim);
    for (int k = 0; size && stride && k < m.ndim; k++) {
        PyTuple_SetItem(size, l->perm[k], PyLong_FromLongLong(m.sizes[k]));
        PyTuple_SetItem(stride, k, PyLong_FromLongLong(l->strides[k]));
    }
    PyObject *storage = PyObject_HasAttrString(r, "untyped_storage")
                            ? PyObject_CallMethod(r, "untyped_storage", NULL)
                            : PyObject_CallMethod(r, "storage", NULL);
    PyObject *empty = PyObject_CallMethod(r, "new_empty", "((i))", 0);
    PyObject *out = storage && empty && size && stride
                        ? PyObject_CallMethod(empty, "set_", "OiOO", storage, 0, size, stride)
                        : NULL;
    Py_XDECREF(storage);
    Py_XDECREF(empty);
    Py_XDECREF(size);
    Py_XDECREF(stride);
    return out;
}

/* Whether a program draws: its runs take an RNG offset (rng.c). */
bool cap_runtime_draws(void *program)
{
    return ((cap_program *)program)->draws;
}

ptc_program *cap_runtime_program(void *program)
{
    return ((cap_program *)program)->p;
}

void cap_runtime_info(void *program, ptc_program_info *info)
{
    ptc_program_get_info(((cap_program *)program)->p, info);
}

/* ptc_host.input_done: an input handed over (nconsumed) goes at its last read. */
static void host_input_done(void *ctx, int input)
{
    host_run *c = ctx;
    if (input >= c->nconsumed)
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_CLEAR(c->given[input]);
    Py_CLEAR(c->held[input]);
    PyGILState_Release(g);
}

int cap_runtime_run_program(void *program, PyObject **inputs, int ninputs, int nconsumed,
                            PyObject **outputs, int noutputs, cap_rng rng, const cap_run_io *io)
{
    cap_program *cp = program;
    ptc_tensor *ins = calloc((size_t)ninputs + 1, sizeof *ins);
    ptc_tensor *outs = calloc((size_t)noutputs + 1, sizeof *outs);
    PyObject **held = calloc((size_t)ninputs + 1, sizeof *held);
    /* a CUDA graph recorder's program keeps no copies: a replay would read
       a copy of the weights as they were when it recorded */
    host_run run = {inputs, held, ins, ninputs, nconsumed, cp->graphs ? NULL : cp->weights};
    ptc_host host = torch_host;
    host.ctx = &run;
    host.rng_cell = rng.cell;
    if (nconsumed > 0)
        host.input_done = host_input_done;
    cap_placing_hook(io, &host);
    int rc = -1;
    for (int i = 0; i < ninputs; i++)
        if (!cap_ready_input(io, i, &ins[i], &held[i]) &&
            cap_torch_to_ptc(inputs[i], &ins[i], &held[i]) < 0)
            goto done;
    ptc_error err;
    if (ptc_program_run(cp->p, ins, ninputs, outs, &host, rng.offset, &err) < 0) {
        raise_run_error(&err, cp->cuda);
        goto done;
    }
    for (int i = 0; i < noutputs; i++) {
        if (cap_placing_took(io, i)) /* in a block of saved values: no tensor of its own */
            continue;
        ptc_storage *s = outs[i].storage;
        int in = ptc_program_output_input(cp->p, i);
        if (in >= 0) { /* written into input `in`: it, or the copy the run conformed it to */
            outputs[i] = outs[i].data == ins[in].data && inputs[in]
                             ? Py_NewRef(inputs[in])
                             : cap_torch_from_ptc(&outs[i]);
            if (!outputs[i])
                goto done;
            continue;
        }
        if (!s || s->release != release_owned || !s->owner) {
            PyErr_SetString(cap_InternalError, "ptc: a compiled output was not allocated by torch");
            goto done;
        }
        int same = ptc_program_output_first(cp->p, i); /* an output listed twice is one tensor */
        if (same != i && outs[same].storage == s)
            outputs[i] = Py_NewRef(outputs[same]);
        else if (cp->layout && cp->layout[i].perm[0] >= 0)
            outputs[i] = unpermute((PyObject *)s->owner, &cp->layout[i]);
        else
            outputs[i] = Py_NewRef((PyObject *)s->owner);
        if (!outputs[i])
            goto done;
    }
    rc = 0;
done:
    for (int i = 0; i < noutputs; i++) {
        if (rc < 0)
            Py_CLEAR(outputs[i]);
        ptc_tensor_release(&outs[i]);
    }
    for (int i = 0; i < ninputs; i++)
        Py_XDECREF(held[i]);
    free(ins);
    free(outs);
    free(held);
    return rc;
}

/* Runs a program with the RNG offset `given` (cap_runtime_rng_value's), or
 * when given is NULL a fresh one from torch's generator where it draws. */
static int run_drawing(void *program, PyObject **inputs, int ninputs, PyObject **outputs,
                       int noutputs, PyObject *given)
{
    cap_rng rng;
    PyObject *draw = given               ? Py_NewRef(given)
                     : cap_runtime_draws(program) ? cap_runtime_rng_draw()
                                                  : Py_NewRef(Py_None);
    int rc = draw ? cap_runtime_rng_value(draw, &rng) : -1;
    if (rc == 0)
        rc = cap_runtime_run_program(program, inputs, ninputs, 0, outputs, noutputs, rng, NULL);
    Py_XDECREF(draw);
    return rc;
}

static int run_recorded(cap_program *cp, PyObject **inputs, PyObject **outputs);

int cap_runtime_run(cap_entry *e, void *program, PyObject **inputs, PyObject **outputs)
{
    cap_program *cp = program;
    if (cp->graphs)
        return run_recorded(cp, inputs, outputs);
    return run_drawing(program, inputs, e->graph->ninputs, outputs, e->graph->noutputs, NULL);
}

/* ---- a .ptir graph compiled from Python (ptc._C._compile_ptir) ------------------- */

/* What a compiled .ptir graph's capsule holds: one program for every size of
 * the graph's symbols, bound from the tensors' shapes on each call. */
typedef struct ptir_compiled {
    void *program; /* NULL once a borrowed program is released */
    int ninputs, noutputs;
    bool borrowed; /* a compiled entry's program (its CUDA graph recorder runs it) */
} ptir_compiled;

static const char PTIR_CAPSULE[] = "ptc.compiled_ptir";

static void ptir_capsule_free(PyObject *capsule)
{
    ptir_compiled *c = PyCapsule_GetPointer(capsule, PTIR_CAPSULE);
    if (c && !c->borrowed)
        cap_runtime_release(c->program);
    free(c);
}

/* g compiled as ptc_package_seal compiles an export package's graph (and
 * ptc_model_load loads it), its kernels looked up in kernel_dir. */
static int compile_as_sealed(const ptc_graph *g, const char *kernel_dir, void **program,
                             ptc_error *err)
{
    ptc_compile_opts opts = {.backend = on_cuda(g) ? PTC_BACKEND_CUDA : PTC_BACKEND_CPU,
                             .kernel_dir = kernel_dir};
    return compile_with(g, &opts, false, NULL, program, err);
}

PyObject *cap_compile_ptir(PyObject *text, const char *kernel_dir)
{
    Py_ssize_t len;
    const char *src = PyUnicode_AsUTF8AndSize(text, &len);
    if (!src || cap_torch_init() < 0) /* the runs read torch tensors */
        return NULL;
    ptc_error err;
    char msg[1200];
    ptc_module *m = ptc_parse_module(src, (size_t)len, "<ptir>", &err);
    ptir_compiled *c = calloc(1, sizeof *c);
    int rc = m && c ? 0 : -1;
    if (rc == 0 && m->ngraphs < 1)
        rc = ptc_errorf(&err, PTC_ERR_PARSE, "parse", "the text holds no graph");
    if (rc == 0 && (rc = ptc_ops_verify(m->graphs[0], 0, &err)) == 0) {
        c->ninputs = m->graphs[0]->ninputs;
        c->noutputs = m->graphs[0]->noutputs;
        rc = kernel_dir ? compile_as_sealed(m->graphs[0], kernel_dir, &c->program, &err)
                        : cap_runtime_compile_graph(m->graphs[0], &c->program, NULL, &err);
    }
    if (m)
        ptc_module_free(m);
    if (rc) {
        free(c);
        ptc_error_format(&err, msg, sizeof msg);
        PyErr_Format(PyExc_ValueError, "ptc: %s", msg);
        return NULL;
    }
    PyObject *cap = PyCapsule_New(c, PTIR_CAPSULE, ptir_capsule_free);
    if (!cap) {
        cap_runtime_release(c->program);
        free(c);
    }
    return cap;
}

PyObject *cap_compiled_draws(PyObject *capsule)
{
    ptir_compiled *c = PyCapsule_GetPointer(capsule, PTIR_CAPSULE);
    if (!c)
        return NULL;
    if (!c->program)
        return PyErr_Format(cap_InternalError, "ptc: the compiled program was released");
    return PyBool_FromLong(cap_runtime_draws(c->program));
}

PyObject *cap_run_compiled(PyObject *capsule, PyObject *tensors, PyObject *rng)
{
    ptir_compiled *c = PyCapsule_GetPointer(capsule, PTIR_CAPSULE);
    if (!c)
        return NULL;
    if (!c->program)
        return PyErr_Format(cap_InternalError, "ptc: the compiled program was released");
    if (!PyTuple_Check(tensors) || PyTuple_Size(tensors) != c->ninputs)
        return PyErr_Format(PyExc_TypeError, "the graph takes a tuple of %d tensors", c->ninputs);
    PyObject **ins = calloc((size_t)c->ninputs + 1, sizeof *ins);
    PyObject **outs = calloc((size_t)c->noutputs + 1, sizeof *outs);
    for (int i = 0; i < c->ninputs; i++)
        ins[i] = PyTuple_GetItem(tensors, i);
    PyObject *r = NULL;
    if (run_drawing(c->program, ins, c->ninputs, outs, c->noutputs, rng) == 0) {
        r = PyTuple_New(c->noutputs);
        for (int i = 0; i < c->noutputs; i++)
            if (r)
                PyTuple_SetItem(r, i, outs[i]); /* steals the reference */
            else
                Py_DECREF(outs[i]);
    }
    free(ins);
    free(outs);
    return r;
}

/* ---- modes: reduce-overhead records CUDA graphs ------------------------------------ */

/* cap_not_acted_on of fmt filled with mode. */
static void notice(const char *fmt, const char *mode)
{
    char text[400];
    snprintf(text, sizeof text, fmt, mode);
    cap_not_acted_on(text);
}

static bool records_graphs(const char *mode)
{
    return mode && (strcmp(mode, "reduce-overhead") == 0 || strcmp(mode, "max-autotune") == 0);
}

/* A graph that needs gradients is recorded as a compiled forward and
 * backward (python/ptc/_cudagraphs.py's TrainGraphs), as torch's trees
 * record AOT autograd's pair; without ptc's compiled autograd it runs
 * through torch's autograd op by op, which leaves nothing to record.
 * Said once, for CUDA graphs only (on the CPU the mode has no effect
 * anyway, another notice). */
bool cap_runtime_records_training(const ptc_graph *g, const char *mode, bool compiled)
{
    if (!records_graphs(mode) || !on_cuda(g))
        return false;
    if (!compiled)
        notice("mode='%s': graphs that need gradients (training) run without CUDA graphs where "
               "ptc's compiled autograd does not run them (it was turned off, "
               "ptc.config.compiled_autograd = True turns it on, or it could not compile the graph): torch's autograd runs "
               "them op by op.",
               mode);
    return compiled;
}

/* reduce-overhead and max-autotune record each CUDA program into CUDA
 * graphs (python/ptc/_cudagraphs.py: warm-up, record per size set,
 * replay); where that cannot act, one notice says so. */
static int apply_mode(void *program, const char *mode, const cap_entry *e, ptc_error *err)
{
    cap_program *cp = program;
    if (!records_graphs(mode))
        return 0;
    if (!cp->cuda) {
        notice("mode='%s' records CUDA graphs: it has no effect on graphs that run on the CPU "
               "(they run as in mode='default').",
               mode);
        return 0;
    }
    ptir_compiled *ref = calloc(1, sizeof *ref);
    if (!ref)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "runtime", "out of memory");
    *ref = (ptir_compiled){cp, cp->ninputs, cp->noutputs, true};
    PyObject *capsule = PyCapsule_New(ref, PTIR_CAPSULE, ptir_capsule_free);
    PyObject *recorder = capsule ? cap_import_path("ptc._cudagraphs.Recorder") : NULL;
    PyObject *args = recorder ? Py_BuildValue("(Os)", capsule, mode) : NULL;
    PyObject *kw = args ? cap_recorder_kwargs(e) : NULL;
    if (kw && PyDict_SetItemString(kw, "draws", cp->draws ? Py_True : Py_False) < 0)
        Py_CLEAR(kw);
    cp->graphs = kw ? PyObject_Call(recorder, args, kw) : NULL;
    cp->graphs_ref = cp->graphs ? ref : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(args);
    Py_XDECREF(recorder);
    Py_XDECREF(capsule);
    if (!capsule)
        free(ref);
    if (cp->graphs)
        return 0;
    PyErr_Clear();
    return ptc_errorf(err, PTC_ERR_INTERNAL, "runtime",
                      "the CUDA graph recorder (ptc._cudagraphs) could not be made");
}

static void release_graphs(cap_program *cp)
{
    if (!cp->graphs)
        return;
    cp->graphs_ref->program = NULL; /* the capsule may outlive the program */
    PyGILState_STATE g = PyGILState_Ensure();
    Py_CLEAR(cp->graphs);
    PyGILState_Release(g);
}

/* The recorder runs the program: recording, replaying, or plainly. */
static int run_recorded(cap_program *cp, PyObject **inputs, PyObject **outputs)
{
    PyObject *args = cap_tuple_from_array(inputs, cp->ninputs);
    PyObject *r = args ? PyObject_CallOneArg_compat(cp->graphs, args) : NULL;
    Py_XDECREF(args);
    if (!r)
        return -1;
    if (!PyTuple_Check(r) || PyTuple_Size(r) != cp->noutputs) {
        Py_DECREF(r);
        PyErr_Format(cap_InternalError, "ptc: the CUDA graph recorder returned no %d-tuple",
                     cp->noutputs);
        return -1;
    }
    for (int i = 0; i < cp->noutputs; i++)
        outputs[i] = Py_NewRef(PyTuple_GetItem(r, i));
    Py_DECREF(r);
    return 0;
}

/* ---- max-autotune's counts (ptc._C._autotune_counts) ---------------------------------- */

PyObject *cap_autotune_counts(void)
{
    ptc_autotune_counts c;
    ptc_autotune_get_counts(&c);
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:d,s:d,s:d}", "tuned", c.tuned, "cache_hits",
                         c.cache_hits, "budget_cut", c.budget_cut, "candidates_timed",
                         c.candidates_timed, "only_choice", c.only_choice, "ms", c.ms,
                         "slowest_run_ms", c.slowest_run_ms, "default_budget_ms",
                         ptc_autotune_default_budget_ms());
}

/* ---- CUDA launches by index width (ptc._C._cuda_index_counts) ----------------------------- */

PyObject *cap_cuda_index_counts(void)
{
    ptc_cuda_index_counts c;
    ptc_cuda_get_index_counts(&c);
    return Py_BuildValue("{s:L,s:L,s:L}", "launches_i32", (long long)c.launches_i32, "launches_i64",
                         (long long)c.launches_i64, "wide_variants", (long long)c.wide_variants);
}

/* ---- what a CUDA graph recorder knows of an entry ------------------------------------ */

static bool held_input(const cap_entry *e, int i)
{
    int s = e->input_src[i];
    return s < 0 || cap_source_module_tensor(e->src[s].kind);
}

PyObject *cap_recorder_kwargs(const cap_entry *e)
{
    PyObject *held = PyList_New(0);
    for (int i = 0; held && i < e->graph->ninputs; i++) {
        if (!held_input(e, i))
            continue;
        PyObject *k = PyLong_FromLong(i);
        if (!k || PyList_Append(held, k) < 0)
            Py_CLEAR(held);
        Py_XDECREF(k);
    }
    PyObject *kw = held ? Py_BuildValue("{s:O,s:O}", "held", held, "fixed_signature",
                                        e->syms.n == 0 ? Py_True : Py_False)
                        : NULL;
    Py_XDECREF(held);
    return kw;
}

#else
PyObject *cap_compile_ptir(PyObject *text, const char *kernel_dir)
{
    (void)text, (void)kernel_dir;
    return PyErr_Format(PyExc_NotImplementedError, "ptc was built without its runtime");
}

PyObject *cap_compiled_draws(PyObject *capsule)
{
    (void)capsule;
    return PyErr_Format(PyExc_NotImplementedError, "ptc was built without its runtime");
}

PyObject *cap_run_compiled(PyObject *capsule, PyObject *tensors, PyObject *rng)
{
    (void)capsule, (void)tensors, (void)rng;
    return PyErr_Format(PyExc_NotImplementedError, "ptc was built without its runtime");
}

PyObject *cap_autotune_counts(void)
{
    return PyErr_Format(PyExc_NotImplementedError, "ptc was built without its runtime");
}

PyObject *cap_cuda_index_counts(void)
{
    return PyErr_Format(PyExc_NotImplementedError, "ptc was built without its runtime");
}
#endif /* PTC_HAVE_RUNTIME */
