/* Graph splits asked for by ptc itself (ptc._split.graph_split).
 *
 * ptc's distributed support (python/ptc/_distributed.py) places calls to
 * graph_split(reason) in forward pre-hooks of the modules where a DDP
 * gradient bucket begins. A call to it ends the graph there (PTC-B027) and
 * runs the no-op for real; tracing resumes after it. The marker is known by
 * identity, so recognising it costs one pointer compare per traced call.
 */
#include "capture/trace/trace.h"

static PyObject *split_marker(void)
{
    static PyObject *marker;
    static bool looked;
    if (!looked) {
        looked = true;
        marker = cap_import_path("ptc._split.graph_split");
        if (!marker)
            PyErr_Clear(); /* an install without it: nothing is a marker */
    }
    return marker;
}

const char *cap_graph_split_reason(PyObject *fn, PyObject *const *args, int nargs)
{
    PyObject *marker = split_marker();
    if (!marker || fn != marker)
        return NULL;
    const char *why = nargs == 1 && PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8(args[0]) : NULL;
    PyErr_Clear();
    return why ? why : "ptc._split.graph_split()";
}
