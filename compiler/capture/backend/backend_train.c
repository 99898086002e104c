/* Training: a graph whose inputs require gradients, compiled forward and
 * backward (AOT autograd).
 *
 * At prepare time the captured graph is decomposed into prims, its joint
 * graph built for the inputs that require gradients and split into a
 * forward and a backward (compiler/autograd); both are compiled. The result
 * is a ptc._C.TrainProgram: forward(*inputs) returns the outputs followed by
 * the tensors the backward needs, backward(*saved, *output_grads) returns
 * the inputs' gradients. At run time ptc._autograd's torch.autograd.Function
 * calls them, so one compiled call is one autograd node whose backward runs
 * ptc's kernels on the same device (and, on CUDA, torch's current stream).
 * An output torch gives no gradient comes to the backward as None: a
 * variant of the backward compiled with that tangent a known zero
 * (ptc_autograd_without_tangents) runs instead, kept per set of such outputs.
 *
 * Graphs that mix grad modes (a no_grad block inside a graph that needs
 * gradients) or use an op without a derivative are not compiled this way:
 * the caller runs them through torch ops and reports why.
 */
#include "capture/backend/backend.h"

#ifdef PTC_HAVE_RUNTIME

#include "autograd/autograd.h"
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

/* A backward compiled for outputs that got no gradient (absent, by
 * tangent position): ptc_autograd_without_tangents's. */
typedef struct variant {
    struct variant *next;
    bool *absent;  /* [ntangents] */
    void *program; /* ptc_program */
} variant;

typedef struct train_program {
    PyObject_HEAD void *forward, *backward; /* ptc_program */
    int ninputs, noutputs, nsaved, ntangents, ngrads;
    int *saved_input;          /* [nsaved]: the input a saved value is, or -1 (computed) */
    int ncomputed;             /* saved values the forward returns (saved_input < 0) */
    int *place_order;          /* [ncomputed]: those in the order the backward reads them
                                  last, which forward_blocks places them by */
    bool draws;                /* random ops: the RNG offset is saved after the values */
    PyObject *tangent_of;      /* tuple: per output, its position among tangents or -1 */
    PyObject *grad_of;         /* tuple: per gradient, the input it belongs to */
    PyObject *written_into;    /* tuple of (output, input): outputs the forward may write
                                  into that input itself (forward_writes) */
    ptc_graph *backward_graph; /* the partition's backward, which variants are made from */
    variant *variants;         /* one per set of absent tangents met, compiled once */
    PyObject *plan;            /* ptc._autograd's facts about the program, worked out on its
                                  first call and kept here (None before) */
} train_program;

static PyObject *train_type;

static void tp_dealloc(PyObject *self)
{
    train_program *t = (train_program *)self;
    cap_runtime_release(t->forward);
    cap_runtime_release(t->backward);
    Py_XDECREF(t->tangent_of);
    Py_XDECREF(t->grad_of);
    Py_XDECREF(t->written_into);
    Py_XDECREF(t->plan);
    free(t->saved_input);
    free(t->place_order);
    ptc_graph_free(t->backward_graph);
    for (variant *v = t->variants, *next; v; v = next) {
        next = v->next;
        cap_runtime_release(v->program);
        free(v->absent);
        free(v);
    }
    PyTypeObject *type = Py_TYPE(self);
    freefunc free_fn = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_fn(self);
    Py_DECREF(type);
}

/* program(ins[nin]) -> a tuple of nout tensors; ins[0..nconsumed) are
 * references handed over, released as the run stops reading them
 * (cap_runtime_run_program). */
static PyObject *run_args(void *program, PyObject **ins, int nin, int nconsumed, int nout,
                          cap_rng rng, const cap_run_io *io)
{
    PyObject *stack_out[64];
    PyObject **outs = nout <= 64 ? stack_out : PyMem_Calloc((size_t)nout, sizeof(PyObject *));
    PyObject *r = NULL;
    if (!outs)
        return PyErr_NoMemory();
    for (int i = 0; i < nout; i++)
        outs[i] = NULL;
    if (cap_runtime_run_program(program, ins, nin, nconsumed, outs, nout, rng, io) == 0) {
        r = PyTuple_New(nout);
        for (int i = 0; r && i < nout; i++)
            PyTuple_SetItem(r, i, outs[i]);
        if (!r)
            for (int i = 0; i < nout; i++)
                Py_XDECREF(outs[i]);
    }
    if (outs != stack_out)
        PyMem_Free(outs);
    return r ? r : (PyErr_Occurred() ? NULL : PyErr_NoMemory());
}

/* program(args[nin]) -> a tuple of nout tensors (NULL for one io placed). */
static PyObject *run_tuple(void *program, PyObject *args, int nin, int nout, cap_rng rng,
                           const cap_run_io *io)
{
    PyObject *stack_in[64];
    PyObject **ins = nin <= 64 ? stack_in : PyMem_Malloc(sizeof(PyObject *) * (size_t)nin);
    if (!ins)
        return PyErr_NoMemory();
    for (int i = 0; i < nin; i++)
        ins[i] = PyTuple_GetItem(args, i);
    PyObject *r = run_args(program, ins, nin, 0, nout, rng, io);
    if (ins != stack_in)
        PyMem_Free(ins);
    return r;
}

static PyObject *wrong_count(int want, Py_ssize_t got)
{
    return PyErr_Format(PyExc_TypeError, "ptc: the compiled program takes %d tensors, got %zd",
                        want, got);
}

/* The forward's results with the saved inputs put back in their places
 * among the saved values (and the RNG draw last when given). */
static PyObject *with_saved_inputs(const train_program *t, PyObject *r, PyObject *args,
                                   PyObject *draw)
{
    PyObject *all = PyTuple_New(t->noutputs + t->nsaved + (draw != NULL));
    int next = 0;
    for (int i = 0; all && i < t->noutputs + t->nsaved; i++) {
        int from = i < t->noutputs ? -1 : t->saved_input[i - t->noutputs];
        PyObject *v = from >= 0 ? PyTuple_GetItem(args, from) : PyTuple_GetItem(r, next++);
        PyTuple_SetItem(all, i, Py_NewRef(v));
    }
    if (all && draw)
        PyTuple_SetItem(all, t->noutputs + t->nsaved, Py_NewRef(draw));
    return all;
}

/* The forward's RNG offset into *draw (a new reference; NULL without random
 * ops) and rng: given, or a fresh draw. */
static int forward_draw(const train_program *t, PyObject *given, PyObject **draw, cap_rng *rng)
{
    *draw = !t->draws ? NULL : given ? Py_NewRef(given) : cap_runtime_rng_draw();
    if (t->draws && (!*draw || cap_runtime_rng_value(*draw, rng) < 0)) {
        Py_CLEAR(*draw);
        return -1;
    }
    return 0;
}

/* A graph with random ops: the forward draws the run's RNG offset and saves
 * it (a 0-dim tensor after the saved values), and the backward runs with it,
 * so a mask the backward recomputes is the forward's. rng=, where given,
 * is the offset instead of a draw (cap_runtime_rng_value's: a CUDA graph
 * recorder's cell, which the backward then reads as well). */
static PyObject *tp_forward(PyObject *self, PyObject *args, PyObject *kwargs)
{
    train_program *t = (train_program *)self;
    if (PyTuple_Size(args) != t->ninputs)
        return wrong_count(t->ninputs, PyTuple_Size(args));
    PyObject *given = kwargs ? PyDict_GetItemString(kwargs, "rng") : NULL;
    if (kwargs && PyDict_Size(kwargs) != (given != NULL))
        return PyErr_Format(PyExc_TypeError, "ptc: forward takes one keyword, rng");
    cap_rng rng = {0, NULL};
    PyObject *draw;
    if (forward_draw(t, given == Py_None ? NULL : given, &draw, &rng) < 0)
        return NULL;
    PyObject *r = run_tuple(t->forward, args, t->ninputs, t->noutputs + t->ncomputed, rng, NULL);
    PyObject *all = r ? with_saved_inputs(t, r, args, draw) : NULL;
    Py_XDECREF(r);
    Py_XDECREF(draw);
    return all;
}

/* forward_blocks's result from the forward's results r (NULL for a value
 * placed in a block): (outputs, saved, layout), saved the saved values of
 * their own (inputs, an extern's result), then the blocks, then the RNG
 * offset with random ops. */
static PyObject *placed_result(const train_program *t, PyObject *r, PyObject *args,
                               const cap_placing *pl, PyObject *draw)
{
    PyObject *blocks[CAP_SAVED_BLOCKS];
    int nblocks = 0;
    cap_saved_layout *l = cap_saved_layout_new(pl, t->nsaved, t->saved_input, blocks, &nblocks);
    PyObject *outputs = l ? PyTuple_GetSlice(r, 0, t->noutputs) : NULL;
    PyObject *saved = outputs ? PyList_New(0) : NULL;
    for (int k = 0, j = 0; saved && k < t->nsaved; k++) {
        int from = t->saved_input[k];
        PyObject *v = from >= 0 ? PyTuple_GetItem(args, from)
                                : PyTuple_GetItem(r, t->noutputs + j++);
        if (v && PyList_Append(saved, v) < 0)
            Py_CLEAR(saved);
    }
    for (int b = 0; b < nblocks; b++) {
        if (saved && PyList_Append(saved, blocks[b]) < 0)
            Py_CLEAR(saved);
        Py_DECREF(blocks[b]);
    }
    if (saved && draw && PyList_Append(saved, draw) < 0)
        Py_CLEAR(saved);
    PyObject *result = saved ? Py_BuildValue("(ONO)", outputs, PyList_AsTuple(saved), l) : NULL;
    Py_XDECREF(saved);
    Py_XDECREF(outputs);
    Py_XDECREF((PyObject *)l);
    return result;
}

/* forward_blocks(*inputs) -> (outputs, saved, layout): the forward, its
 * computed saved values placed in a few blocks (saved_blocks.c). */
static PyObject *tp_forward_blocks(PyObject *self, PyObject *args)
{
    train_program *t = (train_program *)self;
    if (PyTuple_Size(args) != t->ninputs)
        return wrong_count(t->ninputs, PyTuple_Size(args));
    cap_rng rng = {0, NULL};
    PyObject *draw;
    if (forward_draw(t, NULL, &draw, &rng) < 0)
        return NULL;
    cap_run_io io = {NULL, cap_placing_new(t->noutputs, t->ncomputed, t->place_order)};
    PyObject *r = !io.placing ? PyErr_NoMemory()
                              : run_tuple(t->forward, args, t->ninputs,
                                          t->noutputs + t->ncomputed, rng, &io);
    PyObject *result = r ? placed_result(t, r, args, io.placing, draw) : NULL;
    cap_placing_free(io.placing);
    Py_XDECREF(r);
    Py_XDECREF(draw);
    return result;
}

/* The backward for the tangents flagged absent: found among the variants,
 * or compiled (once) and kept there. */
static void *backward_without(train_program *t, const bool *absent)
{
    size_t bytes = sizeof(bool) * (size_t)t->ntangents;
    for (variant *v = t->variants; v; v = v->next)
        if (memcmp(v->absent, absent, bytes) == 0)
            return v->program;
    double t0 = ptc_now_ms();
    ptc_error err = {0};
    variant *v = calloc(1, sizeof *v);
    ptc_graph *g = v && (v->absent = malloc(bytes + 1))
                       ? ptc_autograd_without_tangents(t->backward_graph, t->nsaved, absent, &err)
                       : NULL;
    if (!v || !v->absent)
        ptc_errorf(&err, PTC_ERR_INTERNAL, "autograd", "out of memory");
    int rc = g ? cap_runtime_compile_training(NULL, NULL, g, NULL, &v->program, NULL, &err) : -1;
    ptc_graph_free(g);
    if (rc) {
        if (v)
            free(v->absent);
        free(v);
        PyErr_Format(cap_InternalError,
                     "ptc: compiling the backward for outputs with no gradient failed: %s",
                     err.msg);
        return NULL;
    }
    memcpy(v->absent, absent, bytes);
    v->next = t->variants;
    t->variants = v;
    ptc_log(PTC_LOG_PERF, PTC_LOG_INFO, "backward without some tangents: %.2f ms",
            ptc_now_ms() - t0);
    return v->program;
}

/* The backward on ins: the saved values, then the tangents, None for an
 * output that got no gradient (which picks the backward compiled with it
 * zero, backward_without, and leaves ins without it); draw is the RNG
 * offset with random ops (else NULL). With consume, ins are references
 * handed over, each released after the backward's last read of it (and set
 * to NULL; the caller releases any left). ready, or NULL: saved values
 * given as ptc tensors into their blocks (ins NULL there). */
static PyObject *run_backward(train_program *t, PyObject **ins, PyObject *draw, bool consume,
                              cap_ready *ready)
{
    cap_rng rng = {0, NULL};
    if (draw && cap_runtime_rng_value(draw, &rng) < 0)
        return NULL;
    int nin = t->nsaved + t->ntangents, kept = t->nsaved;
    bool stack_absent[64];
    bool *absent = t->ntangents <= 64 ? stack_absent : PyMem_Malloc((size_t)t->ntangents);
    if (!absent)
        return PyErr_NoMemory();
    for (int k = 0; k < t->ntangents; k++) {
        PyObject *g = ins[t->nsaved + k];
        absent[k] = g == Py_None;
        if (!absent[k])
            ins[kept++] = g;
        else if (consume)
            Py_DECREF(g);
    }
    for (int i = kept; i < nin; i++)
        ins[i] = NULL;
    void *program = kept == nin ? t->backward : backward_without(t, absent);
    if (absent != stack_absent)
        PyMem_Free(absent);
    if (!program)
        return NULL;
    cap_run_io io = {ready, NULL};
    return run_args(program, ins, kept, consume ? kept : 0, t->ngrads, rng, &io);
}

/* Lets go of what backward_inputs gave and a run left (with owned, the
 * references in ins and ready), and frees the arrays. */
static void release_backward_inputs(const train_program *t, PyObject **ins, PyObject *draw,
                                    cap_ready *ready, bool owned)
{
    for (int i = 0; owned && i < t->nsaved + t->ntangents; i++)
        Py_XDECREF(ins[i]);
    for (int k = 0; ready && k < t->nsaved; k++)
        Py_XDECREF(ready[k].owner);
    Py_XDECREF(draw);
    PyMem_Free(ins);
    PyMem_Free(ready);
}

/* The program's backward inputs, the saved values then the tangents, from
 * list when given (new references, the list emptied) or from args
 * (borrowed); the RNG offset, which comes between them, goes to *draw.
 * With a layout (forward_blocks's) the saved values come as the tensors of
 * their own then the blocks, and those in blocks go to *ready instead. */
static PyObject **backward_inputs(train_program *t, PyObject *list, PyObject *args,
                                  const cap_saved_layout *layout, PyObject **draw,
                                  cap_ready **ready)
{
    int nsaved = layout ? cap_saved_layout_given(layout) : t->nsaved;
    int nin = nsaved + t->draws + t->ntangents;
    Py_ssize_t given = list ? PyList_Size(list) : PyTuple_Size(args);
    if (given != nin) {
        wrong_count(nin, given);
        return NULL;
    }
    size_t nins = (size_t)(t->nsaved + t->ntangents) + 1;
    PyObject **got = PyMem_Malloc(sizeof(PyObject *) * ((size_t)nin + 1));
    PyObject **ins = layout ? PyMem_Calloc(nins, sizeof(PyObject *)) : got;
    *ready = layout ? PyMem_Calloc(nins, sizeof(cap_ready)) : NULL;
    if (!got || !ins || (layout && !*ready)) {
        PyMem_Free(got);
        if (layout)
            PyMem_Free(ins);
        PyMem_Free(*ready);
        PyErr_NoMemory();
        return NULL;
    }
    *draw = NULL;
    for (int i = 0, k = 0; i < nin; i++) {
        PyObject *v = list ? Py_NewRef(PyList_GetItem(list, i)) : PyTuple_GetItem(args, i);
        if (t->draws && i == nsaved)
            *draw = v;
        else
            got[k++] = v;
    }
    if (layout) { /* owned (list) only: backward_consuming's */
        int rc = cap_saved_layout_expand(layout, got, true, ins, *ready);
        for (int k = 0; k < t->ntangents; k++)
            ins[t->nsaved + k] = got[nsaved + k];
        for (int i = 0; rc < 0 && i < nsaved; i++)
            Py_XDECREF(got[i]);
        PyMem_Free(got);
        if (rc < 0 || PyList_SetSlice(list, 0, nin, NULL) < 0) {
            release_backward_inputs(t, ins, *draw, *ready, true);
            return NULL;
        }
        return ins;
    }
    if (list && PyList_SetSlice(list, 0, nin, NULL) < 0) {
        release_backward_inputs(t, ins, *draw, NULL, true);
        return NULL;
    }
    return ins;
}

static PyObject *tp_backward(PyObject *self, PyObject *args)
{
    train_program *t = (train_program *)self;
    PyObject *draw;
    cap_ready *ready;
    PyObject **ins = backward_inputs(t, NULL, args, NULL, &draw, &ready);
    PyObject *r = ins ? run_backward(t, ins, draw, false, NULL) : NULL;
    PyMem_Free(ins);
    return r;
}

/* backward_consuming(inputs, layout=None): the saved tensors, the RNG
 * offset with random ops and the output gradients in a list, which is
 * emptied: the backward holds them alone and lets each go after its last
 * read, as eager's autograd frees a saved tensor once its node has run
 * (ptc._autograd clears the node's own references first) and never holds a
 * gradient the node does not read; a block of saved values (layout: the
 * SavedLayout of forward_blocks) after the last read of its last value. */
static PyObject *tp_backward_consuming(PyObject *self, PyObject *args)
{
    train_program *t = (train_program *)self;
    Py_ssize_t n = PyTuple_Size(args);
    PyObject *list = n == 1 || n == 2 ? PyTuple_GetItem(args, 0) : NULL;
    PyObject *layout = n == 2 ? PyTuple_GetItem(args, 1) : Py_None;
    if (!list || !PyList_CheckExact(list) ||
        (layout != Py_None && !cap_saved_layout_check(layout)))
        return PyErr_Format(PyExc_TypeError,
                            "ptc: backward_consuming(inputs: list, layout=None) takes one list: "
                            "the saved tensors, then the output gradients (and forward_blocks's "
                            "layout where it made them)");
    PyObject *draw;
    cap_ready *ready;
    PyObject **ins = backward_inputs(
        t, list, NULL, layout == Py_None ? NULL : (const cap_saved_layout *)layout, &draw, &ready);
    if (!ins)
        return NULL;
    PyObject *r = run_backward(t, ins, draw, true, ready);
    release_backward_inputs(t, ins, draw, ready, true);
    return r;
}

static PyObject *tp_get(PyObject *self, void *which)
{
    train_program *t = (train_program *)self;
    switch ((int)(intptr_t)which) {
    case 0:
        return PyLong_FromLong(t->ninputs);
    case 1:
        return PyLong_FromLong(t->noutputs);
    case 2:
        return PyLong_FromLong(t->nsaved + t->draws);
    case 3:
        return Py_NewRef(t->tangent_of);
    case 6:
        return Py_NewRef(t->written_into);
    case 5: {
        ptc_program_info f, b;
        cap_runtime_info(t->forward, &f);
        cap_runtime_info(t->backward, &b);
        return Py_BuildValue("(nn)", (Py_ssize_t)f.arena_bytes, (Py_ssize_t)b.arena_bytes);
    }
    case 8:
        return PyBool_FromLong(t->draws);
    case 9: {
        long n = 0;
        for (const variant *v = t->variants; v; v = v->next)
            n++;
        return PyLong_FromLong(n);
    }
    case 7: {
        ptc_program_info f, b;
        cap_runtime_info(t->forward, &f);
        cap_runtime_info(t->backward, &b);
        return Py_BuildValue("(ii)", f.arena_segments, b.arena_segments);
    }
    default:
        return Py_NewRef(t->grad_of);
    }
}

static PyObject *tp_get_plan(PyObject *self, void *unused)
{
    (void)unused;
    PyObject *plan = ((train_program *)self)->plan;
    return Py_NewRef(plan ? plan : Py_None);
}

static int tp_set_plan(PyObject *self, PyObject *value, void *unused)
{
    (void)unused;
    Py_XSETREF(((train_program *)self)->plan, Py_XNewRef(value));
    return 0;
}

static PyMethodDef tp_methods[] = {
    {"forward", (PyCFunction)(void (*)(void))tp_forward, METH_VARARGS | METH_KEYWORDS,
     "forward(*inputs, rng=None) -> outputs + saved tensors (the RNG offset last, with random "
     "ops: a fresh draw from torch's generator, or rng: an offset or a 0-dim int64 CUDA tensor "
     "whose value the kernels read when they run)"},
    {"backward", tp_backward, METH_VARARGS,
     "backward(*saved, *output_grads) -> gradients of the inputs that require them (an output "
     "gradient None: that output got none, and a backward compiled with it zero runs)"},
    {"backward_consuming", tp_backward_consuming, METH_VARARGS,
     "backward_consuming(inputs: list, layout=None) -> the gradients, as backward(*inputs); the "
     "list is emptied and each tensor released after the backward's last read of it (a block "
     "of forward_blocks's after the last read of its last value)"},
    {"forward_blocks", tp_forward_blocks, METH_VARARGS,
     "forward_blocks(*inputs) -> (outputs, saved, layout): the forward, the saved values it "
     "computes placed in a few blocks of bytes; saved: the saved values of their own, then the "
     "blocks, then the RNG offset with random ops; layout: a SavedLayout for "
     "backward_consuming"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef tp_getset[] = {
    {"ninputs", tp_get, NULL, NULL, (void *)0},
    {"noutputs", tp_get, NULL, NULL, (void *)1},
    {"nsaved", tp_get, NULL, NULL, (void *)2},
    {"tangent_of", tp_get, NULL, "per output: its gradient's position, or -1", (void *)3},
    {"grad_of", tp_get, NULL, "per gradient: the input it belongs to", (void *)4},
    {"written_into", tp_get, NULL,
     "(output, input) pairs: outputs the forward may write into that input itself (then "
     "the output is the input)",
     (void *)6},
    {"arena_bytes", tp_get, NULL,
     "(forward, backward): the bytes of each program's arena of temporaries at its last run",
     (void *)5},
    {"arena_segments", tp_get, NULL,
     "(forward, backward): the segments each program's arena was split into at its last run "
     "(1: one arena held through the run; more: each allocated through torch when first "
     "needed and freed after its last use)",
     (void *)7},
    {"backward_variants", tp_get, NULL,
     "how many backwards were compiled for outputs with no gradient (one per set of them met)",
     (void *)9},
    {"draws", tp_get, NULL,
     "whether it has random ops (forward saves its RNG offset last, backward reads it)", (void *)8},
    {"plan", tp_get_plan, tp_set_plan,
     "ptc._autograd's facts about the program, kept from its first call (None before)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot tp_slots[] = {{Py_tp_dealloc, tp_dealloc},
                                 {Py_tp_methods, tp_methods},
                                 {Py_tp_getset, tp_getset},
                                 {Py_tp_doc, "A compiled forward and backward (ptc autograd)."},
                                 {0, NULL}};

static PyType_Spec tp_spec = {"ptc._C.TrainProgram", sizeof(train_program), 0, Py_TPFLAGS_DEFAULT,
                              tp_slots};

/* ---- compiling ------------------------------------------------------------------- */

static PyObject *int_tuple(const int *v, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++)
        PyTuple_SetItem(t, i, PyLong_FromLong(v[i]));
    return t;
}

/* A CPU backward allocates all its gradients while the saved tensors live:
 * malloc is asked not to give them back to the system between steps. */
static void keep_heap(const ptc_graph *backward)
{
    size_t bytes = 0;
    for (int i = 0; i < backward->noutputs; i++) {
        const ptc_ttype *t = &backward->outputs[i]->type;
        if (t->device.kind != PTC_DEV_CPU)
            return;
        size_t n = ptc_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) /* a symbolic size counts as 1 */
            n *= ptc_dim_is_static(t->shape[d]) ? (size_t)t->shape[d].value : 1;
        bytes += n;
    }
    ptc_runtime_keep_heap(bytes);
}

/* A phase of building the training program, begun at t0: its time goes to
 * the perf log and to the trace's metrics.json (ptexplain's compile time). */
static void phase_done(ptc_trace_compile *tc, const char *phase, double t0)
{
    double ms = ptc_now_ms() - t0;
    ptc_log(PTC_LOG_PERF, PTC_LOG_INFO, "%s: %.2f ms", phase, ms);
    if (tc)
        ptc_metrics_add(ptc_trace_metrics(tc), phase, ms, true);
}

static bool saved_for_backward(const ptc_partition *p, int input)
{
    for (int k = 0; k < p->nsaved; k++)
        if (p->saved_input[k] == input)
            return true;
    return false;
}

/* The inputs the forward of p may write itself, one per output of the
 * forward (NULL where g writes none): its inputs and first outputs are g's
 * (autograd.h), its saved values after them write nothing. An input the
 * backward reads as it was (y = x * buf; buf.add_(1)) is copied into after
 * the call instead, so that torch's version check raises at the backward,
 * as eager does, where a kernel's write would go unseen. */
static int forward_writes(const ptc_graph *g, const int *output_inputs, const ptc_partition *p,
                          int **out, ptc_error *err)
{
    *out = NULL;
    if (!output_inputs)
        return 0;
    const ptc_graph *fw = p->forward;
    *out = malloc(sizeof(int) * ((size_t)fw->noutputs + 1));
    if (!*out)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "out of memory");
    for (int i = 0; i < fw->noutputs; i++) {
        int in = i < g->noutputs ? output_inputs[i] : -1;
        (*out)[i] = in >= 0 && !saved_for_backward(p, in) ? in : -1;
    }
    return 0;
}

/* The (output, input) pairs of writes, the forward's first n outputs'
 * inputs (forward_writes; NULL: none). */
static PyObject *written_pairs(const int *writes, int n)
{
    PyObject *pairs = PyList_New(0);
    for (int i = 0; pairs && writes && i < n; i++) {
        PyObject *pair = writes[i] >= 0 ? Py_BuildValue("(ii)", i, writes[i]) : NULL;
        if (writes[i] >= 0 && (!pair || PyList_Append(pairs, pair) < 0))
            Py_CLEAR(pairs);
        Py_XDECREF(pair);
    }
    PyObject *t = pairs ? PyList_AsTuple(pairs) : NULL;
    Py_XDECREF(pairs);
    return t;
}

/* Joint, partition and both compiles of g (written: its outputs that are
 * new values of inputs written in place; output_inputs, or NULL: the input
 * each is written into, for the forward to write itself); err says why not. */
static int build(const ptc_graph *g, const bool *written, const int *output_inputs,
                 ptc_trace_compile *tc, ptc_graph **prims, ptc_joint *j, ptc_partition *p,
                 train_program *t, ptc_error *err)
{
    bool *wants = calloc((size_t)g->ninputs + 1, sizeof *wants);
    int *fwd_writes = NULL;
    int rc = -1;
    if (!wants) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "out of memory");
        goto done;
    }
    for (int i = 0; i < g->ninputs; i++)
        wants[i] = g->inputs[i]->type.requires_grad;
    double t0 = ptc_now_ms();
    if (!(*prims = ptc_decompose_for_autograd(g, err)) || ptc_simplify(*prims, err) ||
        ptc_autograd_joint(*prims, wants, written, j, err))
        goto done;
    phase_done(tc, "joint", t0);
    t0 = ptc_now_ms();
    if (ptc_autograd_partition(j, p, err))
        goto done;
    phase_done(tc, "partition", t0);
    if (tc && (ptc_trace_graph(tc, "joint", j->graph, err) ||
               ptc_trace_graph(tc, "forward", p->forward, err) ||
               ptc_trace_graph(tc, "backward", p->backward, err)))
        goto done;
    if (forward_writes(g, output_inputs, p, &fwd_writes, err) ||
        cap_runtime_compile_training(p->forward, fwd_writes, p->backward, &t->forward, &t->backward,
                                     tc, err))
        goto done;
    keep_heap(p->backward);
    if (!(t->written_into = written_pairs(fwd_writes, g->noutputs))) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "out of memory");
        goto done;
    }
    rc = 0;
done:
    free(wants);
    free(fwd_writes);
    return rc;
}

PyObject *cap_train_recorded(cap_entry *e, const char *mode, PyObject *program, bool whole,
                             ptc_error *err)
{
    if (!cap_runtime_records_training(e->graph, mode, true))
        return Py_NewRef(program);
    PyObject *wrap = cap_import_path("ptc._cudagraphs.TrainGraphs");
    PyObject *args = wrap ? Py_BuildValue("(Os)", program, mode) : NULL;
    PyObject *kw = args && whole ? cap_recorder_kwargs(e) : NULL;
    PyObject *graphs = args && (kw || !whole) ? PyObject_Call(wrap, args, kw) : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(args);
    Py_XDECREF(wrap);
    if (!graphs) {
        PyErr_Clear();
        ptc_errorf(err, PTC_ERR_INTERNAL, "autograd",
                   "the CUDA graph recorder (ptc._cudagraphs.TrainGraphs) could not be made");
    }
    return graphs;
}

int cap_train_prepare(cap_entry *e, const char *mode, PyObject **program, ptc_error *err)
{
    *program = NULL;
    /* the new values of inputs written in place are forward-only, as eager
       updates buffers (BatchNorm's running statistics) outside autograd */
    int *output_inputs = cap_writeback_inputs(e, err);
    bool *written = output_inputs ? calloc((size_t)e->graph->noutputs + 1, sizeof *written) : NULL;
    if (!written) {
        free(output_inputs);
        return output_inputs ? ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "out of memory") : -1;
    }
    for (int i = 0; i < e->graph->noutputs; i++)
        written[i] = output_inputs[i] >= 0;
    PyObject *t = cap_train_program(e->graph, written, output_inputs, e->tc, err);
    free(written);
    free(output_inputs);
    *program = t ? cap_train_recorded(e, mode, t, true, err) : NULL;
    Py_XDECREF(t);
    return *program ? 0 : -1;
}

typedef struct last_read {
    int step, value; /* the backward's last step reading a computed value */
} last_read;

static int last_read_cmp(const void *a, const void *b)
{
    const last_read *x = a, *y = b;
    return x->step != y->step ? (x->step > y->step) - (x->step < y->step) : x->value - y->value;
}

/* The computed saved values (0..ncomputed-1) in the order the backward
 * reads them last: forward_blocks's blocks follow it (saved_blocks.c). */
static int order_by_last_read(train_program *t, ptc_error *err)
{
    t->place_order = malloc(sizeof(int) * ((size_t)t->ncomputed + 1));
    last_read *reads = malloc(sizeof(last_read) * ((size_t)t->ncomputed + 1));
    if (!t->place_order || !reads) {
        free(reads);
        return ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "out of memory");
    }
    const ptc_program *backward = cap_runtime_program(t->backward);
    for (int k = 0, j = 0; k < t->nsaved; k++)
        if (t->saved_input[k] < 0) {
            reads[j] = (last_read){ptc_program_input_last(backward, k), j};
            j++;
        }
    qsort(reads, (size_t)t->ncomputed, sizeof *reads, last_read_cmp);
    for (int j = 0; j < t->ncomputed; j++)
        t->place_order[j] = reads[j].value;
    free(reads);
    return 0;
}

/* t's counts and maps from its joint graph j and partition p (whose
 * saved_input t takes over). */
static int take_shape(train_program *t, const ptc_joint *j, ptc_partition *p, ptc_error *err)
{
    t->ninputs = j->nprimal_inputs;
    t->noutputs = j->nprimal_outputs;
    t->nsaved = p->nsaved;
    t->saved_input = p->saved_input;
    p->saved_input = NULL;
    t->ncomputed = 0;
    for (int k = 0; k < t->nsaved; k++)
        t->ncomputed += t->saved_input[k] < 0;
    t->ntangents = j->ntangents;
    t->ngrads = j->ngrads;
    t->draws = cap_runtime_draws(t->forward) || cap_runtime_draws(t->backward);
    int *tangent_pos = calloc((size_t)j->nprimal_outputs + 1, sizeof *tangent_pos);
    for (int k = 0, n = 0; tangent_pos && k < j->nprimal_outputs; k++)
        tangent_pos[k] = j->tangent_of[k] < 0 ? -1 : n++;
    t->tangent_of = tangent_pos ? int_tuple(tangent_pos, j->nprimal_outputs) : NULL;
    t->grad_of = int_tuple(j->grad_of, j->ngrads);
    free(tangent_pos);
    if (!t->tangent_of || !t->grad_of)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "out of memory");
    return 0;
}

PyObject *cap_train_program(const ptc_graph *g, const bool *written, const int *output_inputs,
                            ptc_trace_compile *tc, ptc_error *err)
{
    if (!train_type && !(train_type = PyType_FromSpec(&tp_spec))) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "cannot create TrainProgram");
        return NULL;
    }
    train_program *t = PyObject_New(train_program, (PyTypeObject *)train_type);
    if (!t) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "autograd", "out of memory");
        return NULL;
    }
    t->forward = t->backward = NULL;
    t->draws = false;
    t->tangent_of = t->grad_of = t->written_into = NULL;
    t->saved_input = t->place_order = NULL;
    t->backward_graph = NULL;
    t->variants = NULL;
    t->plan = NULL;
    Py_INCREF(train_type); /* instances of heap types hold their type */
    ptc_graph *prims = NULL;
    ptc_joint j = {0};
    ptc_partition p = {0};
    int rc = build(g, written, output_inputs, tc, &prims, &j, &p, t, err);
    if (rc == 0)
        rc = take_shape(t, &j, &p, err);
    if (rc == 0)
        rc = order_by_last_read(t, err);
    if (rc == 0) { /* kept for the backwards of outputs with no gradient */
        t->backward_graph = p.backward;
        p.backward = NULL;
    }
    ptc_graph_free(p.forward);
    ptc_graph_free(p.backward);
    free(p.saved_input);
    ptc_graph_free(j.graph);
    ptc_graph_free(prims);
    if (rc) {
        Py_DECREF(t);
        PyErr_Clear();
        return NULL;
    }
    return (PyObject *)t;
}

void cap_train_count_kernels(PyObject *program, int kernels[2], int externs[2])
{
    train_program *t = (train_program *)program;
    ptc_program_info f, b;
    cap_runtime_info(t->forward, &f);
    cap_runtime_info(t->backward, &b);
    kernels[0] = f.nkernels, externs[0] = f.nexterns;
    kernels[1] = b.nkernels, externs[1] = b.nexterns;
}

/* ptc._autograd.apply(program, *inputs) -> the outputs, as one autograd node. */
int cap_train_run(cap_entry *e, PyObject *program, PyObject **inputs, PyObject **outputs)
{
    static PyObject *apply;
    if (!apply && !(apply = cap_import_path("ptc._autograd.apply")))
        return -1;
    /* pieces (a ptc._split.GraphPieces) apply their programs themselves */
    bool pieces = e->ncuts > 0;
    int n = e->graph->ninputs;
    PyObject *args = PyTuple_New(n + !pieces);
    if (!args)
        return -1;
    if (!pieces)
        PyTuple_SetItem(args, 0, Py_NewRef(program));
    for (int i = 0; i < n; i++)
        PyTuple_SetItem(args, i + !pieces, Py_NewRef(inputs[i]));
    PyObject *r = PyObject_Call(pieces ? program : apply, args, NULL);
    Py_DECREF(args);
    if (!r)
        return -1;
    if (!PyTuple_Check(r) || PyTuple_Size(r) != e->graph->noutputs) {
        Py_DECREF(r);
        PyErr_SetString(cap_InternalError,
                        "ptc: the compiled training step returned the wrong outputs");
        return -1;
    }
    for (int i = 0; i < e->graph->noutputs; i++)
        outputs[i] = Py_NewRef(PyTuple_GetItem(r, i));
    Py_DECREF(r);
    return 0;
}

#endif /* PTC_HAVE_RUNTIME */
