/* Graph splits and cuts asked for by ptc itself (ptc._split).
 *
 * graph_split(reason) ends the graph (PTC-B027) and runs the no-op for
 * real; tracing resumes after it. graph_cut(reason) does not end anything:
 * the trace notes the first node id after the cut and goes on, and the
 * training backend compiles the graph as pieces cut there, each its own
 * autograd node (backend_pieces.c). ptc's distributed support
 * (python/ptc/_distributed.py) cuts where each DDP gradient bucket begins:
 * a break there would resume in the middle of the user's loop over blocks,
 * one entry per block (recompiles past the limit), where a cut keeps one
 * graph. Both markers are known by identity, so recognising them costs a
 * pointer compare per traced call.
 */
#include "capture/trace/trace.h"

static PyObject *marker(const char *path, PyObject **slot, bool *looked)
{
    if (!*looked) {
        *looked = true;
        *slot = cap_import_path(path);
        if (!*slot)
            PyErr_Clear(); /* an install without it: nothing is a marker */
    }
    return *slot;
}

/* The reason passed to a marker, or a default. */
static const char *marker_reason(PyObject *const *args, int nargs, const char *otherwise)
{
    const char *why = nargs == 1 && PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8(args[0]) : NULL;
    PyErr_Clear();
    return why ? why : otherwise;
}

const char *cap_graph_split_reason(PyObject *fn, PyObject *const *args, int nargs)
{
    static PyObject *split;
    static bool looked;
    PyObject *m = marker("ptc._split.graph_split", &split, &looked);
    if (!m || fn != m)
        return NULL;
    return marker_reason(args, nargs, "ptc._split.graph_split()");
}

int cap_t_graph_cut(cap_trace *T, PyObject *fn, PyObject *const *args, int nargs)
{
    static PyObject *cut;
    static bool looked;
    PyObject *m = marker("ptc._split.graph_cut", &cut, &looked);
    if (!m || fn != m)
        return 0;
    if (!T->cuts && !(T->cuts = PyList_New(0)))
        return -1;
    PyObject *entry = Py_BuildValue("(is)", T->g->next_node_id,
                                    marker_reason(args, nargs, "ptc._split.graph_cut()"));
    int rc = entry ? PyList_Append(T->cuts, entry) : -1;
    Py_XDECREF(entry);
    return rc < 0 ? -1 : 1;
}
