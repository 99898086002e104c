/* Support for torch.distributed jobs: per-rank trace folders, and the
 * observer through which ptc._distributed compares the ranks' compiles.
 *
 * Ranks of one job share the environment, so PTC_TRACE_DIR names one folder
 * for all of them; each rank writes its own `rank_N` folder inside it, or
 * their index.json files would overwrite each other. The rank is
 * torch.distributed's when a process group is initialised, else the RANK
 * variable torchrun sets; a process that is neither writes the folder itself.
 */
#include "capture/capture.h"

#include <stdio.h>
#include <stdlib.h>

static int torch_rank(void)
{
    /* borrowed; only if the program imported it: ptc imports nothing for this */
    PyObject *dist = PyDict_GetItemString(PyImport_GetModuleDict(), "torch.distributed");
    int rank = -1;
    if (dist) {
        PyObject *on = PyObject_CallMethod(dist, "is_initialized", NULL);
        if (on && PyObject_IsTrue(on) == 1) {
            PyObject *r = PyObject_CallMethod(dist, "get_rank", NULL);
            rank = r ? (int)PyLong_AsLong(r) : -1;
            Py_XDECREF(r);
        }
        Py_XDECREF(on);
    }
    PyErr_Clear();
    return rank;
}

const char *cap_rank_trace_dir(char *buf, size_t size)
{
    const char *dir = getenv("PTC_TRACE_DIR");
    if (!dir || !*dir)
        return NULL;
    int rank = torch_rank();
    const char *env = getenv("RANK");
    if (rank < 0 && env && *env)
        rank = atoi(env);
    if (rank < 0)
        return dir;
    snprintf(buf, size, "%s/rank_%d", dir, rank);
    return buf;
}

/* ptc._distributed's check that every rank compiles the same graphs: it sees
 * each compile and recompile event as it is recorded. */
static PyObject *observer;

void cap_set_compile_observer(PyObject *fn)
{
    Py_XSETREF(observer, fn == Py_None ? NULL : Py_XNewRef(fn));
}

void cap_observe_event(PyObject *ev)
{
    if (!observer || !ev)
        return;
    PyObject *r = PyObject_CallFunctionObjArgs(observer, ev, NULL);
    if (!r)
        PyErr_WriteUnraisable(observer); /* a broken check must not break the program */
    Py_XDECREF(r);
}
