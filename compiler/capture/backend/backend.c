/* Backends: preparing and running a captured graph on torch tensors, per
 * backend.
 *
 * "eager" replays the graph op by op through torch (eager.c); it is also
 * what every other backend falls back to. "reference" runs ptc's reference
 * interpreter on the tensors' memory. "ptc" compiles the graph with the
 * runtime (backend_ptc.c; a graph that needs gradients, forward and backward:
 * backend_train.c, in pieces where graph_cut cut it: backend_pieces.c). A
 * Python callable backend gets a ptc.Graph (graphobj.c) and returns the
 * function to run. After any backend, outputs eager returns as views are
 * remade and inputs written in place get their new values.
 */
#include "capture/backend/backend.h"

#include <stdlib.h>
#include <string.h>

/* A graph's inputs sit in an array on the stack up to this many (a chosen
 * size: most graphs' inputs fit); more are allocated. */
enum { STACK_INPUTS = 64 };

struct cap_backend_state {
    cap_eager *eager;   /* eager steps (every backend keeps them: they are the fallback) */
    PyObject *callable; /* CAP_BACKEND_CALLABLE: what the backend returned */
    void *program;      /* CAP_BACKEND_PTC: the runtime's ptc_program */
    PyObject *train;    /* CAP_BACKEND_PTC needing gradients: a TrainProgram */
};

/* ---- reference: ptc's interpreter on torch memory -------------------------------------------- */

static int reference_run(cap_entry *e, PyObject **inputs, PyObject **outputs)
{
    ptc_graph *g = e->graph;
    ptc_tensor *ins = calloc((size_t)g->ninputs + 1, sizeof *ins);
    ptc_tensor *outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
    PyObject **held = calloc((size_t)g->ninputs + 1, sizeof *held);
    int rc = -1;
    for (int i = 0; i < g->ninputs; i++) {
        if (cap_torch_to_ptc(inputs[i], &ins[i], &held[i]) < 0)
            goto done;
        if (ins[i].device.kind != PTC_DEV_CPU) {
            PyErr_SetString(cap_InternalError, "ptc: the reference backend runs on the CPU only");
            goto done;
        }
    }
    static uint64_t rng_counter;
    ptc_run_opts opts = {.rng_offset = ++rng_counter};
    ptc_error err;
    if (ptc_interp_run(g, ins, g->ninputs, outs, &opts, &err) < 0) {
        char buf[1200];
        ptc_error_format(&err, buf, sizeof buf);
        PyErr_Format(cap_InternalError, "ptc: reference interpreter: %s", buf);
        goto done;
    }
    for (int i = 0; i < g->noutputs; i++)
        if (!(outputs[i] = cap_torch_from_ptc(&outs[i])))
            goto done;
    rc = 0;
done:
    for (int i = 0; i < g->noutputs; i++)
        ptc_tensor_release(&outs[i]);
    for (int i = 0; i < g->ninputs; i++)
        Py_XDECREF(held[i]);
    free(ins);
    free(outs);
    free(held);
    if (rc < 0)
        for (int i = 0; i < g->noutputs; i++)
            Py_CLEAR(outputs[i]);
    return rc;
}

/* Is output `out` the memory of input `in` itself (a program that wrote the
 * input in place, ptc_schedule_write_in_place), laid out alike? -1 on error. */
static int same_memory(PyObject *in, PyObject *out)
{
    static PyObject *data_ptr;
    if (!data_ptr && !(data_ptr = PyUnicode_InternFromString("data_ptr")))
        return -1;
    PyObject *a = PyObject_CallMethodObjArgs(in, data_ptr, NULL);
    PyObject *b = a ? PyObject_CallMethodObjArgs(out, data_ptr, NULL) : NULL;
    int same = b ? PyObject_RichCompareBool(a, b, Py_EQ) : -1;
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (same != 1)
        return same;
    PyObject *sa = PyObject_CallMethodObjArgs(in, cap_T.s_stride, NULL);
    PyObject *sb = sa ? PyObject_CallMethodObjArgs(out, cap_T.s_stride, NULL) : NULL;
    same = sb ? PyObject_RichCompareBool(sa, sb, Py_EQ) : -1;
    Py_XDECREF(sa);
    Py_XDECREF(sb);
    return same;
}

/* Inputs the graph wrote in place get their new values, in write order
 * (none to copy where the program wrote the input itself). */
static int write_back(const cap_entry *e, PyObject **inputs, PyObject **outputs)
{
    static PyObject *copy_;
    if (!copy_ && !(copy_ = PyUnicode_InternFromString("copy_")))
        return -1;
    for (int k = 0; k < e->nwriteback; k++) {
        PyObject *in = inputs[e->writeback[k].input], *out = outputs[e->writeback[k].output];
        int same = same_memory(in, out);
        if (same < 0)
            return -1;
        if (same)
            continue;
        PyObject *r = PyObject_CallMethodObjArgs(inputs[e->writeback[k].input], copy_,
                                                 outputs[e->writeback[k].output], NULL);
        if (!r)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* ---- preparing and running ------------------------------------------------------------------- */

static bool needs_autograd(cap_entry *e)
{
    ptc_graph *g = e->graph;
    bool grad_node = false;
    for (int i = 0; i < g->nnodes && !grad_node; i++)
        grad_node = e->node_grad && e->node_grad[g->nodes[i]->id];
    for (int i = 0; grad_node && i < g->ninputs; i++)
        if (g->inputs[i]->type.requires_grad)
            return true;
    return false;
}

#ifdef PTC_HAVE_RUNTIME
/* A mixed graph (no_grad nodes among grad ones) would differentiate through
 * what eager treats as constants. */
static bool mixed_grad_modes(const cap_entry *e)
{
    bool on = false, off = false;
    for (int i = 0; e->node_grad && i < e->graph->nnodes; i++) {
        bool g = e->node_grad[e->graph->nodes[i]->id];
        on |= g;
        off |= !g;
    }
    return on && off;
}

/* The training program of e's graph: in pieces where graph_cut cut it, else
 * whole. */
static int train_prepare(cap_entry *e, const char *mode, PyObject **program, ptc_error *err)
{
    *program = NULL;
    if (mixed_grad_modes(e))
        return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "autograd",
                          "the graph mixes grad modes (a no_grad block inside it)");
    if (e->ncuts > 0)
        return cap_pieces_prepare(e, mode, program, err);
    return cap_train_prepare(e, mode, program, err);
}
#endif

/* A graph that needs gradients: compiled forward and backward for backend
 * "ptc"; otherwise, or when that fails (an op without a derivative), torch
 * ops under autograd, with the reason kept for the report. */
static void prepare_training(cap_entry *e, cap_backend_state *st, const char *mode)
{
    ptc_error terr;
    ptc_error_clear(&terr);
#ifdef PTC_HAVE_RUNTIME
    if (e->backend == CAP_BACKEND_PTC && cap_cfg.compiled_autograd &&
        train_prepare(e, mode, &st->train, &terr) == 0)
        return;
    cap_runtime_records_training(e->graph, mode, false);
#else
    (void)mode;
#endif
    /* On by default; the user turned it off (ptc.config or the
       environment), and the report says how to turn it back on. */
    if (e->backend == CAP_BACKEND_PTC && !cap_cfg.compiled_autograd)
        ptc_errorf(&terr, PTC_ERR_UNSUPPORTED, "autograd",
                   "compiled autograd is off (ptc.config.compiled_autograd = True turns it on)");
    else if (e->backend != CAP_BACKEND_PTC)
        ptc_errorf(&terr, PTC_ERR_UNSUPPORTED, "autograd", "backend %s has no autograd",
                   e->backend == CAP_BACKEND_REFERENCE ? "reference" : "ptc");
    e->backend = CAP_BACKEND_EAGER;
    e->autograd_fallback = true;
    snprintf(e->autograd_why, sizeof e->autograd_why, "%.255s", terr.msg);
}

/* The eager steps could not be made (the pending Python error says why). */
static int eager_steps_failed(ptc_error *err)
{
    char msg[512] = "eager mapping failed";
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *s = v ? PyObject_Str(v) : NULL;
    if (s)
        snprintf(msg, sizeof msg, "%s", PyUnicode_AsUTF8(s));
    Py_XDECREF(s);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    return ptc_errorf(err, PTC_ERR_INTERNAL, "capture", "%s", msg);
}

/* A callable backend: backend_fn(graph) is what runs the graph. */
static int prepare_callable(cap_entry *e, cap_backend_state *st, PyObject *backend_fn,
                            ptc_error *err)
{
    PyObject *graph = cap_graph_object(e);
    st->callable = graph ? PyObject_CallOneArg_compat(backend_fn, graph) : NULL;
    Py_XDECREF(graph);
    if (st->callable && PyCallable_Check(st->callable))
        return 0;
    PyErr_Clear();
    e->backend = CAP_BACKEND_EAGER;
    return ptc_errorf(err, PTC_ERR_RUNTIME, "backend", "the backend callable did not return a callable");
}

int cap_backend_prepare(cap_entry *e, const cap_options *opts, ptc_error *err)
{
    if (!e->graph)
        return 0;
    cap_backend_state *st = calloc(1, sizeof *st);
    e->bstate = st;
    e->free_bstate = cap_backend_free;
    e->backend = opts->backend;
    if (e->backend != CAP_BACKEND_EAGER && e->backend != CAP_BACKEND_CALLABLE &&
        needs_autograd(e)) {
        prepare_training(e, st, opts->mode);
    }
    if (cap_eager_prepare(e->graph, e->node_grad, &st->eager) < 0)
        return eager_steps_failed(err);
    if (cap_eager_plan_aliases(e, st->eager) < 0) {
        PyErr_Clear();
        cap_eager_drop_aliases(st->eager); /* they come back as copies: the warning says so */
        return ptc_errorf(
            err, PTC_ERR_INTERNAL, "capture",
            "outputs that are views come back as copies: their view ops have no torch calls");
    }
    if (e->backend == CAP_BACKEND_CALLABLE && prepare_callable(e, st, opts->backend_fn, err) < 0)
        return -1;
    if (cap_cfg.inject_failure == 2 && e->backend != CAP_BACKEND_EAGER) {
        e->backend = CAP_BACKEND_EAGER;
        return ptc_errorf(err, PTC_ERR_INTERNAL, "backend", "injected backend failure (ptc.config.inject_failure)");
    }
    if (e->backend == CAP_BACKEND_PTC && !st->train) {
#ifdef PTC_HAVE_RUNTIME
        if (cap_runtime_compile(e, opts->mode, &st->program, e->tc, err) < 0) {
            e->backend = CAP_BACKEND_EAGER;
            return -1;
        }
#else
        e->backend = CAP_BACKEND_EAGER;
        return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "runtime",
                          "the compiled backend (compiler/runtime) is not part of this build yet");
#endif
    }
    return 0;
}

void cap_backend_free(cap_entry *e)
{
    cap_backend_state *st = e->bstate;
    if (!st)
        return;
    cap_eager_free(st->eager);
    Py_XDECREF(st->callable);
    Py_XDECREF(st->train);
#ifdef PTC_HAVE_RUNTIME
    cap_runtime_release(st->program);
#endif
    free(st);
    e->bstate = NULL;
}

static int callable_run(cap_entry *e, cap_backend_state *st, PyObject **inputs, PyObject **outputs)
{
    PyObject *args = cap_tuple_from_array(inputs, e->graph->ninputs);
    PyObject *r = args ? PyObject_Call(st->callable, args, NULL) : NULL;
    Py_XDECREF(args);
    if (!r)
        return -1;
    if (cap_is_tensor(r) || PyObject_TypeCheck(r, (PyTypeObject *)cap_T.Tensor)) {
        PyObject *t = PyTuple_Pack(1, r);
        Py_SETREF(r, t);
    }
    if (!r || PySequence_Size(r) != e->graph->noutputs) {
        Py_XDECREF(r);
        PyErr_Format(PyExc_RuntimeError, "ptc: backend returned %s, expected %d outputs",
                     r ? "a different number of outputs" : "nothing", e->graph->noutputs);
        return -1;
    }
    for (int i = 0; i < e->graph->noutputs; i++)
        outputs[i] = PySequence_GetItem(r, i);
    Py_DECREF(r);
    return 0;
}

int cap_backend_run(cap_entry *e, PyObject **inputs, PyObject **outputs)
{
    cap_backend_state *st = e->bstate;
    switch (e->backend) {
    case CAP_BACKEND_REFERENCE:
        return reference_run(e, inputs, outputs);
    case CAP_BACKEND_CALLABLE:
        return callable_run(e, st, inputs, outputs);
    case CAP_BACKEND_PTC:
#ifdef PTC_HAVE_RUNTIME
        if (st->train)
            return cap_train_run(e, st->train, inputs, outputs);
        return cap_runtime_run(e, st->program, inputs, outputs);
#endif
    case CAP_BACKEND_EAGER:
    default:
        return cap_eager_run(e->graph, st->eager, inputs, outputs);
    }
}

/* Runs e's backend; where a compiling backend fails internally, the graph
 * runs through torch ops instead and *fell_back holds the failure
 * (malloc'd) for the caller to report. */
static int run_or_fall_back(cap_entry *e, PyObject **inputs, PyObject **outputs, char **fell_back)
{
    int rc = cap_backend_run(e, inputs, outputs);
    if (rc >= 0 || e->backend == CAP_BACKEND_EAGER || e->backend == CAP_BACKEND_CALLABLE ||
        !PyErr_ExceptionMatches(cap_InternalError) || cap_cfg.strict)
        return rc;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    /* Ctrl-C ended the run (a planted hang): the user's KeyboardInterrupt */
    bool interrupted = PyErr_CheckSignals() < 0;
    PyObject *s = v && !interrupted ? PyObject_Str(v) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    if (!interrupted)
        *fell_back = strdup(msg ? msg : "error");
    Py_XDECREF(s);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    if (!interrupted) {
        e->backend = CAP_BACKEND_EAGER;
        rc = cap_backend_run(e, inputs, outputs);
    }
    return rc;
}

/* Writes autocast state amp back after a run that returned rc, keeping a
 * failed run's error: rc, or -1 when the write failed. */
static int restore_amp(int rc, const cap_amp *amp)
{
    PyObject *t = NULL, *v = NULL, *tb = NULL;
    if (rc < 0)
        PyErr_Fetch(&t, &v, &tb);
    if (cap_amp_write(amp) < 0) {
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        return -1;
    }
    if (t)
        PyErr_Restore(t, v, tb);
    return rc;
}

/* The graph's inputs from the state, then the backend (run_or_fall_back). */
int cap_entry_run_graph(cap_entry *e, PyObject **vals, PyObject **outputs, char **fell_back)
{
    ptc_graph *g = e->graph;
    PyObject *stack[STACK_INPUTS];
    PyObject **inputs =
        g->ninputs <= STACK_INPUTS ? stack : malloc(sizeof(PyObject *) * (size_t)g->ninputs);
    for (int i = 0; i < g->ninputs; i++)
        inputs[i] = e->input_src[i] >= 0 ? vals[e->input_src[i]] : e->input_const[i];
    /* The graph's autocast casts are explicit nodes: torch ops run with
       autocast off, or matmuls would be cast a second time. */
    cap_amp amp = cap_amp_unpack(e->amp_start), off = amp;
    bool amp_on = amp.on[0] || amp.on[1];
    off.on[0] = off.on[1] = false;
    if (amp_on && cap_amp_write(&off) < 0)
        return -1;
    int rc = run_or_fall_back(e, inputs, outputs, fell_back);
    const cap_eager *eager = e->bstate ? e->bstate->eager : NULL;
    if (rc == 0 && ((rc = cap_eager_remake_aliases(g, eager, inputs, outputs)) < 0 ||
                    (rc = write_back(e, inputs, outputs)) < 0))
        for (int i = 0; i < g->noutputs; i++)
            Py_CLEAR(outputs[i]);
    if (amp_on) /* the modes go back also when the graph failed */
        rc = restore_amp(rc, &amp);
    if (inputs != stack)
        free(inputs);
    return rc;
}

bool cap_backend_ready(cap_entry *e)
{
    cap_backend_state *st = e->bstate;
    if (!st || !e->graph)
        return !e->graph;
    return cap_eager_whole(st->eager, e->graph);
}
