/* Autocast, modelled while tracing.
 *
 * torch.autocast changes what ops compute: inside a region, matmuls and
 * convolutions cast their floating inputs to the region's dtype and a few
 * numerically touchy ops cast to float32. ptc tracks the autocast state of
 * cpu and cuda in the trace (read from torch when tracing starts, changed by
 * with torch.autocast(...) blocks and their exits) and inserts those casts as
 * explicit `to` nodes when it builds an op (this file says which argument
 * becomes what dtype; nodes.c builds the casts), so the graph computes what
 * eager autocast computes on every backend. The state at entry is a guard; graphs
 * run with real autocast off (their casts are explicit), and the state at
 * the end of a graph is made real before Python code runs after a break.
 *
 * Op lists follow torch's autocast policy (torch.amp docs: "ops that can
 * autocast to float16/bfloat16" and "... to float32"), restricted to the ops
 * of ops.def; the float32 list of cuda is the long one, cpu's has prod.
 */
#include "capture/interp/interp.h"
#include "capture/trace/trace.h"

#include <string.h>

static PyObject *get_on, *get_dt, *set_on, *set_dt;        /* torch 2.x: (device, ...) */
static PyObject *old_get_on[2], *old_get_dt[2], *old_set_on[2], *old_set_dt[2]; /* 1.13 */
static PyObject *dev_str[2];
static bool amp_ready, amp_new_api;

/* Imports one of torch's autocast functions into *slot; an error naming it
 * when torch has none (cap_import_path clears its error). */
static int amp_import(PyObject **slot, const char *path)
{
    if (*slot)
        return 0;
    *slot = cap_import_path(path);
    if (!*slot)
        PyErr_Format(cap_InternalError, "ptc: cannot model autocast: %s is missing or cannot be imported",
                     path);
    return *slot ? 0 : -1;
}

static int amp_init(void)
{
    if (amp_ready)
        return 0;
    if ((!dev_str[0] && !(dev_str[0] = PyUnicode_FromString("cpu"))) ||
        (!dev_str[1] && !(dev_str[1] = PyUnicode_FromString("cuda"))))
        return -1;
    /* torch 2.4+ takes the device as an argument; older ones name it. */
    PyObject *probe = cap_import_path("torch.get_autocast_dtype");
    amp_new_api = probe != NULL;
    Py_XDECREF(probe);
    int rc = 0;
    if (amp_new_api) {
        rc = amp_import(&get_dt, "torch.get_autocast_dtype") < 0 ||
             amp_import(&get_on, "torch.is_autocast_enabled") < 0 ||
             amp_import(&set_on, "torch.set_autocast_enabled") < 0 ||
             amp_import(&set_dt, "torch.set_autocast_dtype") < 0;
    } else {
        rc = amp_import(&old_get_on[0], "torch.is_autocast_cpu_enabled") < 0 ||
             amp_import(&old_get_on[1], "torch.is_autocast_enabled") < 0 ||
             amp_import(&old_get_dt[0], "torch.get_autocast_cpu_dtype") < 0 ||
             amp_import(&old_get_dt[1], "torch.get_autocast_gpu_dtype") < 0 ||
             amp_import(&old_set_on[0], "torch.set_autocast_cpu_enabled") < 0 ||
             amp_import(&old_set_on[1], "torch.set_autocast_enabled") < 0 ||
             amp_import(&old_set_dt[0], "torch.set_autocast_cpu_dtype") < 0 ||
             amp_import(&old_set_dt[1], "torch.set_autocast_gpu_dtype") < 0;
    }
    if (rc)
        return -1; /* what was imported stays; the next call retries the rest */
    amp_ready = true;
    return 0;
}

static PyObject *call_dev(PyObject *fn_new, PyObject *fn_old, int d, PyObject *arg)
{
    if (amp_new_api)
        return arg ? PyObject_CallFunctionObjArgs(fn_new, dev_str[d], arg, NULL)
                   : PyObject_CallOneArg_compat(fn_new, dev_str[d]);
    return arg ? PyObject_CallOneArg_compat(fn_old, arg) : PyObject_CallNoArgs(fn_old);
}

int cap_amp_read(cap_amp *a)
{
    if (amp_init() < 0)
        return -1;
    for (int d = 0; d < 2; d++) {
        PyObject *on = call_dev(get_on, old_get_on[d], d, NULL);
        PyObject *dt = on ? call_dev(get_dt, old_get_dt[d], d, NULL) : NULL;
        if (!dt) {
            Py_XDECREF(on);
            return -1;
        }
        a->on[d] = on == Py_True;
        int k = cap_dtype_from_obj(dt);
        a->dt[d] = k < 0 ? 255 : (uint8_t)k;
        Py_DECREF(on);
        Py_DECREF(dt);
    }
    return 0;
}

int cap_amp_write(const cap_amp *a)
{
    if (amp_init() < 0)
        return -1;
    for (int d = 0; d < 2; d++) {
        PyObject *r = call_dev(set_on, old_set_on[d], d, a->on[d] ? Py_True : Py_False);
        Py_XDECREF(r);
        if (!r)
            return -1;
        if (a->dt[d] < PTC_DTYPE_COUNT) {
            r = call_dev(set_dt, old_set_dt[d], d, cap_dtype_obj((ptc_dtype)a->dt[d]));
            Py_XDECREF(r);
            if (!r)
                return -1;
        }
    }
    return 0;
}

int64_t cap_amp_pack(const cap_amp *a)
{
    return (int64_t)a->on[0] | (int64_t)a->on[1] << 1 | (int64_t)a->dt[0] << 8 | (int64_t)a->dt[1] << 16;
}

cap_amp cap_amp_unpack(int64_t n)
{
    cap_amp a;
    a.on[0] = n & 1;
    a.on[1] = (n >> 1) & 1;
    a.dt[0] = (uint8_t)(n >> 8);
    a.dt[1] = (uint8_t)(n >> 16);
    return a;
}

void cap_amp_str(int64_t n, char *buf, size_t size)
{
    cap_amp a = cap_amp_unpack(n);
    const char *names[2] = {"cpu", "cuda"};
    char part[2][48];
    for (int d = 0; d < 2; d++)
        snprintf(part[d], sizeof part[d], "%s %s", names[d],
                 a.on[d] ? (a.dt[d] < PTC_DTYPE_COUNT ? ptc_dtype_name((ptc_dtype)a.dt[d]) : "?") : "off");
    snprintf(buf, size, "%s, %s", part[0], part[1]);
}

/* ---- the policy ------------------------------------------------------------------ */

enum { AMP_NONE, AMP_LOWER, AMP_FP32 };

static int policy(ptc_op op, int dev)
{
    switch (op) {
    case PTC_OP_MM: case PTC_OP_BMM: case PTC_OP_MATMUL: case PTC_OP_ADDMM: case PTC_OP_LINEAR:
    case PTC_OP_BADDBMM: case PTC_OP_SDPA: case PTC_OP_CONVOLUTION: case PTC_OP_CONV1D:
    case PTC_OP_CONV2D: case PTC_OP_CONV3D: case PTC_OP_CONV_TRANSPOSE2D:
        return AMP_LOWER;
    case PTC_OP_PROD:
        return AMP_FP32;
    case PTC_OP_EXP: case PTC_OP_LOG: case PTC_OP_LOG1P: case PTC_OP_EXPM1: case PTC_OP_RSQRT:
    case PTC_OP_RECIPROCAL: case PTC_OP_POW: case PTC_OP_SOFTPLUS: case PTC_OP_LAYER_NORM:
    case PTC_OP_GROUP_NORM: case PTC_OP_LOGSUMEXP: case PTC_OP_SOFTMAX: case PTC_OP_LOG_SOFTMAX:
    case PTC_OP_CUMSUM: case PTC_OP_CUMPROD: case PTC_OP_SUM:
        return dev == PTC_DEV_CUDA ? AMP_FP32 : AMP_NONE;
    default:
        return AMP_NONE;
    }
}

/* The dtype torch's autocast casts v, a tensor argument of op, to in the
 * trace's state (v floating, not float64, on a device whose autocast is
 * on), or -1 where it leaves v as it is. */
int cap_amp_cast_dtype(const cap_trace *T, ptc_op op, const ptc_value *v)
{
    int d = v->type.device.kind == PTC_DEV_CUDA ? 1 : 0;
    int pol = policy(op, v->type.device.kind);
    ptc_dtype dt = v->type.dtype;
    if (!pol || !T->amp.on[d] || !ptc_dtype_is_float(dt) || dt == PTC_F64)
        return -1;
    ptc_dtype want = pol == AMP_FP32 ? PTC_F32 : (ptc_dtype)T->amp.dt[d];
    return dt == want || want >= PTC_DTYPE_COUNT ? -1 : (int)want;
}

/* Losses compute in float32 wherever autocast is on: cross_entropy,
 * nll_loss, mse/l1/smooth_l1/huber_loss and binary cross entropy are on the
 * float32 lists of cpu and cuda alike (eager's loss is float32 for bfloat16
 * logits). The dtype v, a loss's tensor argument, is cast to, or -1 (nodes.c
 * builds the casts, cap_amp_loss_inputs). */
int cap_amp_loss_dtype(const cap_trace *T, const ptc_value *v)
{
    ptc_dtype dt = v->type.dtype;
    if (!T->amp.on[v->type.device.kind == PTC_DEV_CUDA] || !ptc_dtype_is_float(dt) ||
        dt == PTC_F32 || dt == PTC_F64)
        return -1;
    return PTC_F32;
}

/* ---- with torch.autocast(...) --------------------------------------------------------- */

bool cap_amp_is_manager(PyObject *mgr)
{
    return cap_T.autocast_cls && PyObject_TypeCheck(mgr, (PyTypeObject *)cap_T.autocast_cls);
}

/* Enters an autocast region: the trace's state changes, and *prev is the
 * state before it (packed), which the region's exit restores. */
int cap_amp_enter(cap_trace *T, PyObject *mgr, int64_t *prev)
{
    PyObject *dev = PyObject_GetAttrString(mgr, "device");
    PyObject *dt = dev ? PyObject_GetAttrString(mgr, "fast_dtype") : NULL;
    PyObject *en = dt ? PyObject_GetAttrString(mgr, "_enabled") : NULL;
    int rc = CAP_ERR;
    if (!en)
        goto done;
    const char *ds = PyUnicode_Check(dev) ? PyUnicode_AsUTF8(dev) : "";
    int d = strcmp(ds, "cpu") == 0 ? 0 : strcmp(ds, "cuda") == 0 ? 1 : -1;
    int k = cap_dtype_from_obj(dt);
    if (d < 0 || k < 0) {
        rc = cap_t_break(T, CAP_B_CONTEXT_MANAGER, "autocast on device '%s' with dtype %s", ds,
                         k < 0 ? "that ptc has no dtype for" : ptc_dtype_name((ptc_dtype)k));
        goto done;
    }
    *prev = cap_amp_pack(&T->amp);
    T->amp.on[d] = en == Py_True;
    T->amp.dt[d] = (uint8_t)k;
    rc = CAP_NEXT;
done:
    Py_XDECREF(dev);
    Py_XDECREF(dt);
    Py_XDECREF(en);
    return rc;
}

/* torch.is_autocast_enabled(...) and friends answer from the trace. Returns
 * 1 (answered), 0 (not one of them), -1 (error). */
int cap_amp_query(cap_trace *T, PyObject *callable, PyObject *const *args, int nargs, PyObject **out)
{
    static PyObject *fns[6];
    static const char *paths[6] = {"torch.is_autocast_enabled", "torch.get_autocast_dtype",
                                   "torch.is_autocast_cpu_enabled", "torch.get_autocast_cpu_dtype",
                                   "torch.get_autocast_gpu_dtype", "torch._C._is_any_autocast_enabled"};
    static bool init;
    if (!init) {
        init = true;
        for (int i = 0; i < 6; i++) {
            fns[i] = cap_import_path(paths[i]);
            PyErr_Clear();
        }
    }
    int which = -1;
    for (int i = 0; i < 6; i++)
        if (fns[i] && callable == fns[i])
            which = i;
    if (which < 0)
        return 0;
    int d = which == 2 || which == 3 ? 0 : 1;
    if ((which == 0 || which == 1) && nargs == 1 && !amp_new_api)
        return 0; /* torch 1.13 takes no device here: asked for real (it raises) */
    if ((which == 0 || which == 1) && nargs == 1) {
        const char *ds = PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8(args[0]) : "";
        if (strcmp(ds, "cpu") != 0 && strcmp(ds, "cuda") != 0)
            return 0; /* other devices: asked for real */
        d = strcmp(ds, "cpu") == 0 ? 0 : 1;
    } else if (nargs != 0 || which == 1) {
        return 0;
    }
    if (which == 5)
        *out = Py_NewRef(T->amp.on[0] || T->amp.on[1] ? Py_True : Py_False);
    else if (which == 0 || which == 2)
        *out = Py_NewRef(T->amp.on[d] ? Py_True : Py_False);
    else if (T->amp.dt[d] < PTC_DTYPE_COUNT)
        *out = Py_NewRef(cap_dtype_obj((ptc_dtype)T->amp.dt[d]));
    else
        return 0;
    return 1;
}
