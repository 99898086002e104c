/* The RNG offset of a run.
 *
 * A random op with seed s (fixed at capture) draws ptc_rng_uniform(
 * ptc_rng_key(s, offset), i) for element i. The offset is drawn from torch's
 * default generator for each run of a program that has random ops, so
 * torch.manual_seed makes ptc's dropout masks repeat run to run (they are not
 * eager's: ptc's generator is its own), and a program without random ops
 * leaves torch's generator as eager would. The CPU generator serves every
 * device: reading a CUDA draw back would synchronise the stream.
 *
 * A CUDA graph recording (python/ptc/_cudagraphs.py) cannot take its offset
 * by value: every replay would repeat it. It hands the run a cell instead, a
 * 0-dim int64 CUDA tensor whose value the kernels read when they run
 * (ptc_host.rng_cell), and fills it with a fresh draw before each replay.
 */
#include "capture/backend/backend.h"

PyObject *cap_runtime_rng_draw(void)
{
    static PyObject *randint, *args;
    if (!randint) {
        /* below 2^62: any offset, well inside int64 */
        args = Py_BuildValue("(L())", (long long)1 << 62);
        randint = args ? cap_import_path("torch.randint") : NULL;
        if (!randint) {
            Py_CLEAR(args);
            return NULL;
        }
    }
    return PyObject_Call(randint, args, NULL);
}

/* A CUDA tensor's value is never read on the host (that would synchronise
 * the stream): it is the cell the kernels read when they run. */
static int rng_cell_of(PyObject *draw, cap_rng *rng)
{
    ptc_tensor t;
    PyObject *held = NULL;
    if (cap_torch_to_ptc(draw, &t, &held) < 0)
        return -1;
    bool cell = t.device.kind == PTC_DEV_CUDA;
    if (cell && (t.dtype != PTC_I64 || ptc_tensor_numel(&t) != 1)) {
        Py_DECREF(held);
        PyErr_SetString(PyExc_ValueError, "ptc: an RNG cell is one int64 on the device");
        return -1;
    }
    rng->cell = cell ? t.data : NULL; /* the caller holds draw through the run */
    Py_DECREF(held);
    return cell ? 1 : 0;
}

int cap_runtime_rng_value(PyObject *draw, cap_rng *rng)
{
    *rng = (cap_rng){0, NULL};
    if (draw == Py_None)
        return 0;
    if (PyObject_TypeCheck(draw, (PyTypeObject *)cap_T.Tensor)) {
        int cell = rng_cell_of(draw, rng);
        if (cell)
            return cell < 0 ? -1 : 0;
    }
    PyObject *v = PyNumber_Index(draw);
    if (!v)
        return -1;
    rng->offset = (uint64_t)PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}
