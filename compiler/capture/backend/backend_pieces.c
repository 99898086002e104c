/* Training a graph in pieces cut where ptc._split.graph_cut was called.
 *
 * The trace noted the first node id after each cut (trace_split.c); node
 * ids follow the trace, so piece k holds the nodes whose id lies between
 * cut k-1 and cut k. Each piece becomes a graph of its own: its inputs are
 * the graph inputs and the earlier pieces' values it reads, its outputs the
 * values later pieces or the caller read. Each is compiled forward and
 * backward (cap_train_program) and run as one autograd node, so the
 * gradients of a piece's parameters are ready when its backward ends, not
 * when the whole graph's does (what DDP needs to start a bucket's
 * all-reduce during the backward, as torch.compile's DDPOptimizer splits
 * Dynamo's graph). Pieces that print alike once names, source locations and
 * provenance are set aside (a model's identical blocks) share one program:
 * a model of many identical blocks compiles one program per distinct piece.
 * What each piece holds (its ops, modules and kernels, the cut that ends
 * it, its compile time) goes to the report: ptexplain shows why one graph
 * runs as N autograd nodes.
 *
 * At run time ptc._split.GraphPieces applies the programs in order over a
 * table of slots: graph inputs first, then one slot per value id.
 */
#include "capture/backend/backend.h"

#ifdef PTC_HAVE_RUNTIME

#include <stdlib.h>
#include <string.h>

typedef struct cutter {
    cap_entry *e;
    const ptc_graph *g;
    int npieces;
    int *piece;    /* [nnodes]: the piece of each node, by position */
    int *last_use; /* [nvalues]: the last piece reading the value (npieces: the caller) */
    int *write_target; /* [nvalues]: the graph input the value is written into, or -1 */
} cutter;

static int slot_of(const cutter *C, const ptc_value *v)
{
    return v->def ? C->g->ninputs + v->id : v->input_index;
}

/* How many cuts come at or before node id: the node's piece. */
static int piece_of_id(const cap_entry *e, int id)
{
    int p = 0;
    while (p < e->ncuts && e->cut_at[p] <= id)
        p++;
    return p;
}

static void note_use(cutter *C, const ptc_value *v, int piece)
{
    if (v && C->last_use[v->id] < piece)
        C->last_use[v->id] = piece;
}

/* Pieces and last uses; -1 when a node reads a later piece's value (node
 * ids out of trace order: the graph is not cut). */
static int assign_pieces(cutter *C)
{
    const ptc_graph *g = C->g;
    int *def_piece = calloc((size_t)g->nvalues + 1, sizeof *def_piece);
    if (!def_piece)
        return -1;
    for (int i = 0; i < g->nvalues; i++)
        C->last_use[i] = -1;
    int rc = 0;
    for (int i = 0; i < g->nnodes && rc == 0; i++) {
        const ptc_node *n = g->nodes[i];
        int p = C->piece[i] = piece_of_id(C->e, n->id);
        for (int a = 0; a < n->nargs; a++) {
            const ptc_arg *arg = &n->args[a];
            for (int k = 0; k < ptc_arg_nvalues(arg); k++) {
                const ptc_value *v = ptc_arg_value_at(arg, k);
                if (v && v->def && def_piece[v->id] > p)
                    rc = -1;
                note_use(C, v, p);
            }
        }
        for (int k = 0; k < n->nout; k++)
            def_piece[n->outs[k]->id] = p;
    }
    for (int i = 0; i < g->noutputs; i++)
        note_use(C, g->outputs[i], C->npieces);
    for (int i = 0; i < g->nvalues; i++)
        C->write_target[i] = -1;
    for (int k = 0; k < C->e->nwriteback; k++)
        C->write_target[g->outputs[C->e->writeback[k].output]->id] = C->e->writeback[k].input;
    free(def_piece);
    return rc;
}

static int append_int(PyObject *list, int v)
{
    PyObject *o = PyLong_FromLong(v);
    int rc = o ? PyList_Append(list, o) : -1;
    Py_XDECREF(o);
    return rc;
}

/* Where piece p (pg, map: the graph's values to its own) may write the new
 * value of graph input `input` itself: the position of that input among
 * the piece's, if the piece reads it and no later piece does (a later piece
 * reads the input's old value, which the graph writes back only after the
 * call), else -1. */
static int piece_write_target(const cutter *C, int p, const ptc_graph *pg, ptc_value **map,
                              int input)
{
    const ptc_value *in = C->g->inputs[input];
    if (!map[in->id] || C->last_use[in->id] > p)
        return -1;
    for (int i = 0; i < pg->ninputs; i++)
        if (pg->inputs[i] == map[in->id])
            return i;
    return -1;
}

/* Piece p as a graph of its own; in_slots / out_slots get where its inputs
 * come from and its outputs go, written its outputs' flags and into the
 * piece's input each written output may be written into itself (-1: none;
 * piece_write_target). NULL if the piece has no node. */
static ptc_graph *cut_piece(cutter *C, int p, ptc_value **map, PyObject *in_slots,
                            PyObject *out_slots, bool *written, int *into)
{
    const ptc_graph *g = C->g;
    ptc_graph *pg = NULL;
    memset(map, 0, sizeof *map * (size_t)g->nvalues);
    for (int i = 0; i < g->nnodes; i++) {
        const ptc_node *n = g->nodes[i];
        if (C->piece[i] != p)
            continue;
        if (!pg && !(pg = ptc_graph_new(NULL, g->name)))
            return NULL;
        for (int a = 0; a < n->nargs; a++) {
            const ptc_arg *arg = &n->args[a];
            for (int k = 0; k < ptc_arg_nvalues(arg); k++) {
                ptc_value *v = ptc_arg_value_at(arg, k);
                if (v && !map[v->id]) {
                    map[v->id] = ptc_graph_add_input(pg, v->name, &v->type);
                    if (append_int(in_slots, slot_of(C, v)) < 0)
                        goto fail;
                }
            }
        }
        ptc_graph_copy_node(pg, n, map);
    }
    if (!pg)
        return NULL;
    ptc_value **outs = malloc(sizeof *outs * ((size_t)g->nvalues + 1));
    int nouts = 0;
    for (int i = 0; outs && i < g->nnodes; i++)
        for (int k = 0; C->piece[i] == p && k < g->nodes[i]->nout; k++) {
            const ptc_value *v = g->nodes[i]->outs[k];
            if (C->last_use[v->id] <= p)
                continue;
            int target = C->write_target[v->id];
            written[nouts] = target >= 0;
            into[nouts] = target >= 0 ? piece_write_target(C, p, pg, map, target) : -1;
            outs[nouts++] = map[v->id];
            if (append_int(out_slots, slot_of(C, v)) < 0)
                nouts = -1;
        }
    if (outs && nouts >= 0)
        ptc_graph_set_outputs(pg, outs, nouts);
    free(outs);
    if (outs && nouts >= 0)
        return pg;
fail:
    ptc_graph_free(pg);
    return NULL;
}

/* The piece as text without what differs between alike pieces (value
 * names, source locations, module paths, provenance), its written flags and
 * the inputs they are written into after it. Malloc'd. */
static char *piece_key(const ptc_graph *pg, const bool *written, const int *into)
{
    ptc_graph *k = ptc_graph_clone(pg, NULL);
    if (!k)
        return NULL;
    for (int i = 0; i < k->nvalues; i++)
        k->values[i]->name = ptc_arena_printf(k->arena, "%d", i);
    for (int i = 0; i < k->nnodes; i++) {
        memset(&k->nodes[i]->loc, 0, sizeof k->nodes[i]->loc);
        k->nodes[i]->module_path = NULL;
        k->nodes[i]->nprov = 0;
    }
    ptc_buf b = {0};
    ptc_print_graph(&b, k);
    for (int i = 0; i < pg->noutputs; i++)
        if (written[i])
            ptc_buf_printf(&b, "w%d ", into[i]);
        else
            ptc_buf_putc(&b, '-');
    ptc_graph_free(k);
    return b.data;
}

/* A new program for piece p (pg), the k-th distinct one. Traced, its stages
 * go to a folder of its own beside the graph's, "<graph's>.program_<k>"
 * (each would overwrite the one before in the graph's), its piece as its
 * captured graph; its compile times add to the graph's metrics.json, which
 * ptexplain's compile time line reads. New reference. */
static PyObject *new_program(cutter *C, int p, const ptc_graph *pg, const bool *written,
                             const int *into, int k, ptc_error *err)
{
    ptc_trace_compile *whole = C->e->tc, *tc = NULL;
    if (whole) {
        char part[32], reason[160];
        snprintf(part, sizeof part, "program_%d", k);
        snprintf(reason, sizeof reason, "program %d: piece %d of %d of a graph cut into pieces", k,
                 p + 1, C->npieces);
        if (!(tc = ptc_trace_begin_part(whole, part, reason, err)) ||
            ptc_trace_graph(tc, "captured", pg, err))
            return NULL;
    }
    PyObject *program = cap_train_program(pg, written, into, tc, err);
    if (tc) {
        ptc_error terr;
        ptc_metrics_add_all(ptc_trace_metrics(whole), ptc_trace_metrics(tc), NULL);
        if (ptc_trace_end(tc, &terr) && program) {
            *err = terr;
            Py_CLEAR(program);
        }
    }
    return program;
}

/* The program of piece p (pg): an alike piece's (keys / programs: the
 * distinct ones so far), or a new one, wrapped for mode per piece (a CUDA
 * graph recorder per piece: alike pieces run in one step, each holding its
 * recording until its backward). *index: its place in programs;
 * *compile_ms: the time compiling it took (0: an alike piece's). New
 * reference. */
static PyObject *piece_program(cutter *C, int p, const ptc_graph *pg, const bool *written,
                               const int *into, PyObject *keys, PyObject *programs, const char *mode,
                               Py_ssize_t *index, double *compile_ms, ptc_error *err)
{
    char *text = piece_key(pg, written, into);
    PyObject *key = text ? PyUnicode_FromString(text) : NULL;
    free(text);
    PyObject *program = NULL;
    *index = key ? PySequence_Index(keys, key) : -1;
    *compile_ms = 0;
    if (*index >= 0) {
        program = Py_NewRef(PyList_GetItem(programs, *index));
    } else if (key) {
        PyErr_Clear();
        double t0 = ptc_now_ms();
        program = new_program(C, p, pg, written, into, (int)PyList_Size(programs) + 1, err);
        *compile_ms = ptc_now_ms() - t0;
        *index = PyList_Size(programs);
        if (program && (PyList_Append(keys, key) < 0 || PyList_Append(programs, program) < 0))
            Py_CLEAR(program);
    }
    Py_XDECREF(key);
    PyObject *run = program ? cap_train_recorded(C->e, mode, program, false, err) : NULL;
    Py_XDECREF(program);
    if (!run && !err->msg[0])
        ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "out of memory");
    return run;
}

/* Whether module path a lies inside module path b ("blocks.0.fc" in
 * "blocks.0"; everything in "": the model). */
static bool inside(const char *a, const char *b)
{
    size_t n = strlen(b);
    return n == 0 || (strncmp(a, b, n) == 0 && (a[n] == 0 || a[n] == '.'));
}

/* The modules piece p holds, for the report: the innermost module holding
 * all its nodes' ("blocks.0"), else its first and last node's ("fc2 ..
 * fc3"); "" when no node has a module path. New reference. */
static PyObject *piece_modules(const cutter *C, int p)
{
    const char *first = NULL, *last = NULL;
    char common[256] = "";
    for (int i = 0; i < C->g->nnodes; i++) {
        const char *path = C->g->nodes[i]->module_path;
        if (C->piece[i] != p || !path || !path[0])
            continue;
        if (!first)
            snprintf(common, sizeof common, "%s", path);
        while (!inside(path, common))
            *(strrchr(common, '.') ? strrchr(common, '.') : common) = 0;
        first = first ? first : path;
        last = path;
    }
    if (!first || common[0] || strcmp(first, last) == 0)
        return PyUnicode_FromString(first ? (common[0] ? common : first) : "");
    return PyUnicode_FromFormat("%s .. %s", first, last);
}

/* What the report says of piece p (pg, its program programs[index]): its
 * ops, the modules it holds, its program (shared by alike pieces) and the
 * time compiling it took, its kernels forward and backward, and the cut
 * that ends it (an index into the compile event's "cuts"; None: the
 * graph's end). New reference. */
static PyObject *piece_report(const cutter *C, int p, const ptc_graph *pg, PyObject *programs,
                              Py_ssize_t index, double compile_ms)
{
    int kernels[2], externs[2];
    cap_train_count_kernels(PyList_GetItem(programs, index), kernels, externs);
    PyObject *cut = p < C->e->ncuts ? PyLong_FromLong(p) : Py_NewRef(Py_None);
    return Py_BuildValue("{s:i,s:N,s:n,s:d,s:(ii),s:(ii),s:N}", "ops", pg->nnodes, "modules",
                         piece_modules(C, p), "program", index + 1, "compile_ms", compile_ms,
                         "kernels", kernels[0], kernels[1], "externs", externs[0], externs[1],
                         "cut", cut);
}

/* One step of GraphPieces for each piece with nodes, and its report. */
static int make_steps(cutter *C, PyObject *steps, PyObject *reports, PyObject *programs,
                      const char *mode, ptc_error *err)
{
    const ptc_graph *g = C->g;
    ptc_value **map = malloc(sizeof *map * ((size_t)g->nvalues + 1));
    bool *written = malloc(sizeof *written * ((size_t)g->nvalues + 1));
    int *into = malloc(sizeof *into * ((size_t)g->nvalues + 1));
    PyObject *keys = PyList_New(0);
    int rc = map && written && into && keys ? 0 : -1;
    for (int p = 0; rc == 0 && p < C->npieces; p++) {
        PyObject *ins = PyList_New(0), *outs = PyList_New(0);
        ptc_graph *pg = ins && outs ? cut_piece(C, p, map, ins, outs, written, into) : NULL;
        Py_ssize_t index;
        double ms;
        PyObject *program =
            pg ? piece_program(C, p, pg, written, into, keys, programs, mode, &index, &ms, err)
               : NULL;
        PyObject *step =
            program ? Py_BuildValue("(NNN)", program, PyList_AsTuple(ins), PyList_AsTuple(outs))
                    : NULL;
        PyObject *report = step ? piece_report(C, p, pg, programs, index, ms) : NULL;
        if (step && report ? PyList_Append(steps, step) < 0 || PyList_Append(reports, report) < 0
                           : pg != NULL || PyErr_Occurred())
            rc = -1;
        Py_XDECREF(step);
        Py_XDECREF(report);
        Py_XDECREF(ins);
        Py_XDECREF(outs);
        ptc_graph_free(pg);
    }
    free(map);
    free(written);
    free(into);
    Py_XDECREF(keys);
    return rc;
}

int cap_pieces_prepare(cap_entry *e, const char *mode, PyObject **program, ptc_error *err)
{
    const ptc_graph *g = e->graph;
    cutter C = {.e = e, .g = g, .npieces = e->ncuts + 1};
    C.piece = calloc((size_t)g->nnodes + 1, sizeof *C.piece);
    C.last_use = calloc((size_t)g->nvalues + 1, sizeof *C.last_use);
    C.write_target = calloc((size_t)g->nvalues + 1, sizeof *C.write_target);
    PyObject *steps = PyList_New(0), *programs = PyList_New(0), *outputs = NULL;
    PyObject *reports = PyList_New(0);
    PyObject *make = cap_import_path("ptc._split.GraphPieces");
    ptc_error_clear(err);
    int rc = -1;
    if (!C.piece || !C.last_use || !C.write_target || !steps || !programs || !reports || !make)
        ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "cannot cut the graph into pieces");
    else if (assign_pieces(&C) < 0)
        ptc_errorf(err, PTC_ERR_INTERNAL, "autograd",
                   "a cut piece reads a value of a later piece (node ids out of trace order)");
    else if (make_steps(&C, steps, reports, programs, mode, err) == 0 &&
             (outputs = PyTuple_New(g->noutputs))) {
        for (int i = 0; i < g->noutputs; i++)
            PyTuple_SetItem(outputs, i, PyLong_FromLong(slot_of(&C, g->outputs[i])));
        *program = PyObject_CallFunction(make, "iOO", g->ninputs + g->nvalues, steps, outputs);
        e->npieces = (int)PyList_Size(steps);
        e->nprograms = (int)PyList_Size(programs);
        Py_XSETREF(e->piece_list, Py_NewRef(reports));
        rc = *program ? 0 : -1;
    }
    if (rc < 0 && !err->msg[0])
        ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "cannot cut the graph into pieces");
    PyErr_Clear();
    free(C.piece);
    free(C.last_use);
    free(C.write_target);
    Py_XDECREF(steps);
    Py_XDECREF(programs);
    Py_XDECREF(reports);
    Py_XDECREF(outputs);
    Py_XDECREF(make);
    return rc;
}

#endif /* PTC_HAVE_RUNTIME */
