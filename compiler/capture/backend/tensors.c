/* torch <-> ptc tensors: a torch tensor seen as a borrowed ptc tensor (its
 * memory, dtype, sizes, strides and device), a ptc tensor copied into a new
 * torch tensor, and a torch tensor viewing a ptc tensor's memory (DLPack). The backends below backend.c and the repro dumps above
 * them share these; they know nothing of entries or backends.
 */
#include "capture/backend/backend.h"

#include <stdint.h>
#include <stdlib.h>

int cap_torch_to_ptc(PyObject *t, ptc_tensor *out, PyObject **held)
{
    cap_tmeta m;
    if (cap_tmeta_read_layout(t, &m) < 0)
        return -1;
    PyObject *ptr = PyObject_CallMethodObjArgs(t, cap_T.s_data_ptr, NULL);
    void *data = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
    Py_XDECREF(ptr);
    Py_DECREF(m.dtype);
    if (PyErr_Occurred())
        return -1;
    if ((int)m.dt < 0) {
        PyErr_SetString(cap_InternalError, "ptc: tensor dtype not supported by ptc");
        return -1;
    }
    *out = ptc_tensor_borrow(data, m.dt, m.ndim, m.sizes, m.strides);
    out->device = m.dev;
    *held = Py_NewRef(t);
    return 0;
}

/* A new torch tensor with ptc tensor t's contents (CPU). */
PyObject *cap_torch_from_ptc(const ptc_tensor *t)
{
    PyObject *shape = PyTuple_New(t->ndim);
    for (int i = 0; shape && i < t->ndim; i++)
        PyTuple_SetItem(shape, i, PyLong_FromLongLong(t->sizes[i]));
    PyObject *kw = Py_BuildValue("{s:O}", "dtype", cap_dtype_obj(t->dtype));
    PyObject *args = shape ? PyTuple_Pack(1, shape) : NULL;
    PyObject *r = args && kw ? PyObject_Call(cap_T.empty, args, kw) : NULL;
    Py_XDECREF(shape);
    Py_XDECREF(kw);
    Py_XDECREF(args);
    if (!r)
        return NULL;
    PyObject *ptr = PyObject_CallMethodObjArgs(r, cap_T.s_data_ptr, NULL);
    void *dst = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
    Py_XDECREF(ptr);
    ptc_tensor d = ptc_tensor_borrow(dst, t->dtype, t->ndim, t->sizes, NULL);
    ptc_error err;
    if (!dst || ptc_tensor_copy(&d, t, &err) < 0) {
        Py_DECREF(r);
        PyErr_Format(cap_InternalError, "ptc: copying an output failed: %s", err.msg);
        return NULL;
    }
    return r;
}

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

/* A torch tensor viewing t's memory (no copy), through DLPack: how the
 * ptc backend hands torch's externs views into ptc's buffers. */
PyObject *cap_torch_view_of_ptc(const ptc_tensor *t)
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

/* v.contiguous(), or v.contiguous(memory_format=torch.channels_last): a new
 * reference (v itself when it is laid out so already). */
PyObject *cap_contiguous_as(PyObject *v, bool channels_last)
{
    static PyObject *no_args, *cl_kwargs; /* () and {"memory_format": torch.channels_last} */
    if (!no_args) {
        PyObject *fmt = cap_import_path("torch.channels_last");
        cl_kwargs = fmt ? Py_BuildValue("{s:O}", "memory_format", fmt) : NULL;
        no_args = cl_kwargs ? PyTuple_New(0) : NULL;
        Py_XDECREF(fmt);
        if (!no_args) {
            Py_CLEAR(cl_kwargs);
            return NULL;
        }
    }
    PyObject *meth = PyObject_GetAttrString(v, "contiguous");
    PyObject *r = meth ? PyObject_Call(meth, no_args, channels_last ? cl_kwargs : NULL) : NULL;
    Py_XDECREF(meth);
    return r;
}
