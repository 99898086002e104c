/* ptc._C.GraphHandle: a captured graph as a Python object. It owns a copy of
 * the graph (so it outlives ptc.reset), prints it as .ptir, lists its nodes
 * with their source locations and module paths, and runs it on torch tensors
 * through torch ops. ptc.Graph (python/ptc) wraps it for callable backends and
 * for ptc.explain.
 */
#include "capture/backend/backend.h"

#include <stdlib.h>
#include <string.h>

typedef struct graph_handle {
    PyObject_HEAD
    ptc_graph *g;
    uint8_t *node_grad;
    cap_eager *eager; /* its steps through torch ops, made on the first run */
} graph_handle;

static PyTypeObject *graph_handle_type;

static void gh_dealloc(PyObject *self)
{
    graph_handle *h = (graph_handle *)self;
    cap_eager_free(h->eager);
    if (h->g)
        ptc_graph_free(h->g);
    free(h->node_grad);
    PyTypeObject *t = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(t, Py_tp_free))(self);
    Py_DECREF(t);
}

static PyObject *gh_ptir(PyObject *self, PyObject *unused)
{
    ptc_buf b = {0};
    ptc_print_graph(&b, ((graph_handle *)self)->g);
    PyObject *s = PyUnicode_FromStringAndSize(b.data ? b.data : "", (Py_ssize_t)b.len);
    ptc_buf_free(&b);
    return s;
}

static PyObject *type_str(const ptc_ttype *t)
{
    ptc_buf b = {0};
    ptc_ttype_print(&b, t, false);
    PyObject *s = PyUnicode_FromString(b.data ? b.data : "");
    ptc_buf_free(&b);
    return s;
}

static PyObject *gh_nodes(PyObject *self, PyObject *unused)
{
    ptc_graph *g = ((graph_handle *)self)->g;
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < g->nnodes; i++) {
        const ptc_node *n = g->nodes[i];
        ptc_buf b = {0};
        ptc_print_node(&b, n);
        PyObject *outs = PyList_New(n->nout), *types = PyList_New(n->nout);
        for (int k = 0; outs && types && k < n->nout; k++) {
            PyList_SetItem(outs, k, PyUnicode_FromString(n->outs[k]->name));
            PyList_SetItem(types, k, type_str(&n->outs[k]->type));
        }
        PyObject *d = Py_BuildValue("{s:i,s:s,s:s,s:N,s:N,s:s,s:i,s:i,s:s,s:s}", "id", n->id, "op",
                                    ptc_op_name(n->op), "text", b.data ? b.data : "", "outputs", outs,
                                    "types", types, "file", n->loc.file ? n->loc.file : "", "line",
                                    n->loc.line, "col", n->loc.col, "source",
                                    n->loc.text ? n->loc.text : "", "module",
                                    n->module_path ? n->module_path : "");
        ptc_buf_free(&b);
        if (!d || PyList_Append(list, d) < 0)
            Py_CLEAR(list);
        Py_XDECREF(d);
    }
    return list;
}

static PyObject *gh_inputs(PyObject *self, PyObject *unused)
{
    ptc_graph *g = ((graph_handle *)self)->g;
    PyObject *list = PyList_New(g->ninputs);
    for (int i = 0; list && i < g->ninputs; i++)
        PyList_SetItem(list, i, Py_BuildValue("(sN)", g->inputs[i]->name, type_str(&g->inputs[i]->type)));
    return list;
}

static PyObject *gh_outputs(PyObject *self, PyObject *unused)
{
    ptc_graph *g = ((graph_handle *)self)->g;
    PyObject *list = PyList_New(g->noutputs);
    for (int i = 0; list && i < g->noutputs; i++)
        PyList_SetItem(list, i, Py_BuildValue("(sN)", g->outputs[i]->name, type_str(&g->outputs[i]->type)));
    return list;
}

static PyObject *gh_run(PyObject *self, PyObject *args)
{
    graph_handle *h = (graph_handle *)self;
    ptc_graph *g = h->g;
    if (PyTuple_Size(args) != g->ninputs)
        return PyErr_Format(PyExc_TypeError, "ptc.Graph.run: expected %d tensors, got %zd", g->ninputs,
                            PyTuple_Size(args));
    if (!h->eager && cap_eager_prepare(g, h->node_grad, &h->eager) < 0)
        return NULL;
    PyObject **ins = malloc(sizeof(PyObject *) * (size_t)(g->ninputs + 1));
    PyObject **outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
    for (int i = 0; i < g->ninputs; i++)
        ins[i] = PyTuple_GetItem(args, i);
    int rc = cap_eager_run(g, h->eager, ins, outs);
    PyObject *r = rc == 0 ? PyTuple_New(g->noutputs) : NULL;
    for (int i = 0; i < g->noutputs; i++) {
        if (r)
            PyTuple_SetItem(r, i, outs[i]);
        else
            Py_XDECREF(outs[i]);
    }
    free(ins);
    free(outs);
    return r;
}

static PyObject *gh_count(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong(((graph_handle *)self)->g->nnodes);
}

static PyMethodDef gh_methods[] = {
    {"ptir", gh_ptir, METH_NOARGS, "The graph as .ptir text."},
    {"nodes", gh_nodes, METH_NOARGS, "The nodes as dicts (op, text, types, source, module)."},
    {"inputs", gh_inputs, METH_NOARGS, "(name, type) of each input."},
    {"outputs", gh_outputs, METH_NOARGS, "(name, type) of each output."},
    {"run", gh_run, METH_VARARGS, "Runs the graph on torch tensors through torch ops."},
    {"node_count", gh_count, METH_NOARGS, "Number of nodes."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot gh_slots[] = {
    {Py_tp_dealloc, gh_dealloc},
    {Py_tp_methods, gh_methods},
    {Py_tp_doc, "ptc: a captured graph"},
    {0, NULL},
};

static PyType_Spec gh_spec = {"ptc._C.GraphHandle", sizeof(graph_handle), 0, Py_TPFLAGS_DEFAULT, gh_slots};

int cap_graph_type_init(PyObject *module)
{
    graph_handle_type = (PyTypeObject *)PyType_FromSpec(&gh_spec);
    if (!graph_handle_type)
        return -1;
    return PyModule_AddObjectRef(module, "GraphHandle", (PyObject *)graph_handle_type);
}

PyObject *cap_graph_object(cap_entry *e)
{
    if (!e->graph)
        Py_RETURN_NONE;
    graph_handle *h = PyObject_New(graph_handle, graph_handle_type);
    if (!h)
        return NULL;
    h->g = ptc_graph_clone(e->graph, NULL);
    h->eager = NULL;
    size_t n = (size_t)h->g->next_node_id + 1;
    h->node_grad = calloc(n, 1);
    if (e->node_grad)
        for (int i = 0; i < e->graph->nnodes; i++) {
            int id = e->graph->nodes[i]->id;
            if ((size_t)id < n)
                h->node_grad[id] = e->node_grad[id];
        }
    return (PyObject *)h;
}
