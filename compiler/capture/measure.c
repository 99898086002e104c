/* Measurements for ptexplain: where the time of compiled calls goes.
 *
 * Off by default; ptc._C._measure(True) turns it on (ptexplain does), and
 * every hook is one branch while it is off. With it on, each compiled entry
 * gets a cap_stats record, shared through a capsule with its compile event so
 * that the numbers outlive the entry: how often it ran, the time inside its
 * graph, and for a segment that ends in a graph break the time from the end
 * of its graph to the start of the next graph of the same call (the break
 * instruction running for real, the resume state rebuilt, the next lookup's
 * guards, and whatever ran eagerly after it), with compiles and the graphs of
 * nested compiled calls subtracted. A clock per call (cap_drive) does the
 * accounting. Tensors that cross a break are found by identity: an output of
 * the graph before the break that is an input of the next graph. Top-level
 * compiled calls and positions that ran eagerly are totalled (with the fastest
 * call after the first, a cost one-time work cannot move), and every
 * compiled function's events also go to one list, tagged with "cf".
 */
#include "capture/report.h"

#include <stdlib.h>
#include <string.h>

cap_measure cap_meas;

static const char *backend_names[] = {
#define X(id, name) name,
    CAP_BACKENDS(X)
#undef X
};

void cap_measure_set(bool on)
{
    cap_meas.on = on;
    if (on && !cap_meas.events) {
        cap_meas.events = PyList_New(0);
        cap_meas.eager = PyDict_New();
        if (!cap_meas.events || !cap_meas.eager) {
            PyErr_Clear();
            cap_meas.on = false;
        }
    }
}

/* ---- a measuring scope (ptc.explain) ------------------------------------------------------ */

static cap_measure outer; /* what was measured before the open scope */
static bool scoped;

int cap_measure_scope_begin(void)
{
    if (scoped) {
        PyErr_SetString(PyExc_RuntimeError, "ptc.explain: another explain is measuring");
        return -1;
    }
    PyObject *events = PyList_New(0), *eager = PyDict_New();
    if (!events || !eager) {
        Py_XDECREF(events);
        Py_XDECREF(eager);
        return -1;
    }
    outer = cap_meas;
    scoped = true;
    cap_meas = (cap_measure){.on = true, .depth = outer.depth, .events = events, .eager = eager};
    return 0;
}

/* Adds the scope's eager frames to the outer's: calls and time add up, the
 * steady time is the faster of the two (0 means none). */
static void merge_eager(PyObject *into, PyObject *from)
{
    PyObject *key, *v;
    Py_ssize_t pos = 0;
    while (into && PyDict_Next(from, &pos, &key, &v)) {
        long c1 = 0, c2 = 0;
        double t1 = 0, t2 = 0, s1 = 0, s2 = 0;
        PyObject *old = PyDict_GetItem(into, key);
        if ((old && !PyArg_ParseTuple(old, "ldd", &c1, &t1, &s1)) || !PyArg_ParseTuple(v, "ldd", &c2, &t2, &s2)) {
            PyErr_Clear();
            continue;
        }
        double steady = s1 > 0 && (s2 <= 0 || s1 < s2) ? s1 : s2;
        PyObject *sum = Py_BuildValue("(ldd)", c1 + c2, t1 + t2, steady);
        if (!sum || PyDict_SetItem(into, key, sum) < 0)
            PyErr_Clear();
        Py_XDECREF(sum);
    }
}

PyObject *cap_measure_scope_end(void)
{
    if (!scoped) {
        PyErr_SetString(PyExc_RuntimeError, "ptc.explain: no measuring scope is open");
        return NULL;
    }
    PyObject *measured = cap_measured();
    cap_measure inner = cap_meas;
    cap_meas = outer;
    scoped = false;
    cap_meas.calls += inner.calls;
    cap_meas.call_ms += inner.call_ms;
    cap_meas.compile_ms += inner.compile_ms;
    cap_meas.graph_ms += inner.graph_ms;
    if (cap_meas.on && cap_meas.events) {
        if (PyList_SetSlice(cap_meas.events, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, inner.events) < 0)
            PyErr_Clear();
        merge_eager(cap_meas.eager, inner.eager);
    }
    Py_DECREF(inner.events);
    Py_DECREF(inner.eager);
    return measured;
}

void cap_measure_event(int serial, PyObject *ev)
{
    if (!cap_meas.on || !ev)
        return;
    PyObject *cf = PyLong_FromLong(serial);
    if (!cf || PyDict_SetItemString(ev, "cf", cf) < 0 || PyList_Append(cap_meas.events, ev) < 0)
        PyErr_Clear();
    Py_XDECREF(cf);
}

/* ---- per-entry records --------------------------------------------------------------- */

static void stats_free(PyObject *cap)
{
    free(PyCapsule_GetPointer(cap, "ptc.stats"));
}

PyObject *cap_stats_attach(cap_entry *e)
{
    if (!cap_meas.on || e->stats)
        return e->stats;
    cap_stats *s = calloc(1, sizeof *s);
    e->stats = s ? PyCapsule_New(s, "ptc.stats", stats_free) : NULL;
    if (!e->stats) {
        free(s);
        PyErr_Clear();
        return NULL;
    }
    e->st = s;
    s->end_break = e->end == CAP_END_BREAK;
    return e->stats;
}

PyObject *cap_stats_dict(PyObject *capsule)
{
    cap_stats *s = PyCapsule_GetPointer(capsule, "ptc.stats");
    if (!s)
        return NULL;
    PyObject *samples = PyList_New(s->nsamples), *cross = PyList_New(s->ncross);
    for (int i = 0; samples && i < s->nsamples; i++)
        PyList_SetItem(samples, i, PyFloat_FromDouble(s->samples[i]));
    for (int i = 0; cross && i < s->ncross; i++)
        PyList_SetItem(cross, i,
                       Py_BuildValue("[iii]", s->cross[i].next, s->cross[i].out, s->cross[i].in));
    if (!samples || !cross) {
        Py_XDECREF(samples);
        Py_XDECREF(cross);
        return NULL;
    }
    return Py_BuildValue("{s:l,s:d,s:d,s:l,s:d,s:d,s:N,s:N,s:s}", "runs", s->runs, "graph_ms",
                         s->graph_ms, "backend_ms", s->backend_ms, "breaks", s->breaks, "break_ms",
                         s->break_ms, "tail_ms", s->tail_ms, "samples", samples, "cross", cross,
                         "backend", backend_names[s->backend]);
}

PyObject *cap_measured(void)
{
    return Py_BuildValue("{s:l,s:d,s:d,s:d,s:l,s:O,s:O}", "calls", cap_meas.calls, "call_ms",
                         cap_meas.call_ms, "compile_ms", cap_meas.compile_ms, "graph_ms",
                         cap_meas.graph_ms, "clock_reads", cap_meas.clock_reads, "eager",
                         cap_meas.eager ? cap_meas.eager : Py_None,
                         "events", cap_meas.events ? cap_meas.events : Py_None);
}

/* ---- the clock of one call ---------------------------------------------------------------- */

/* The time for a call's clock, counted: a test holds measuring to a few
 * reads per graph and break, whatever the graphs hold. */
static double clock_read(void)
{
    cap_meas.clock_reads++;
    return ptc_now_ms();
}

static void clock_drop_outs(cap_clock *k)
{
    for (int i = 0; i < k->nouts; i++)
        Py_CLEAR(k->outs[i]);
    k->nouts = 0;
}

/* Time since the pending break's graph ended, compiles and nested graphs out. */
static double clock_elapsed(const cap_clock *k, double now)
{
    double ms =
        now - k->since - (cap_meas.compile_ms - k->compile0) - (cap_meas.graph_ms - k->graph0);
    return ms > 0 ? ms : 0;
}

static void charge_break(cap_clock *k, double now)
{
    cap_stats *s = k->pending;
    if (!s)
        return;
    double ms = clock_elapsed(k, now);
    s->breaks++;
    s->break_ms += ms;
    if (s->nsamples < CAP_STATS_SAMPLES)
        s->samples[s->nsamples++] = (float)ms;
    k->pending = NULL;
}

static void note_cross(cap_stats *s, int next, int out, int in)
{
    for (int i = 0; i < s->ncross; i++)
        if (s->cross[i].next == next && s->cross[i].out == out && s->cross[i].in == in)
            return;
    if (s->ncross < CAP_STATS_CROSS)
        s->cross[s->ncross++] = (struct cap_cross){next, out, in};
}

void cap_clock_graph_begin(cap_clock *k, cap_entry *e, PyObject **vals)
{
    double now = clock_read();
    if (k->pending && e->graph) {
        for (int i = 0; i < e->graph->ninputs; i++) {
            PyObject *v = e->input_src[i] >= 0 ? vals[e->input_src[i]] : NULL;
            for (int j = 0; v && j < k->nouts; j++)
                if (k->outs[j] == v)
                    note_cross(k->pending, e->id, j, i);
        }
    }
    charge_break(k, now);
    clock_drop_outs(k);
    k->graph_start = now;
}

void cap_clock_graph_end(cap_clock *k, cap_entry *e, PyObject **outs, int nout)
{
    double now = clock_read(), ms = now - k->graph_start;
    cap_stats *s = e->st;
    if (s) {
        s->runs++;
        s->graph_ms += ms;
        s->backend = e->backend;
    }
    cap_meas.graph_ms += ms;
    k->last = s;
    k->since = now;
    k->compile0 = cap_meas.compile_ms;
    k->graph0 = cap_meas.graph_ms;
    if (e->end != CAP_END_BREAK || !s)
        return;
    k->pending = s;
    for (int i = 0; i < nout && i < CAP_CLOCK_OUTS; i++)
        k->outs[k->nouts++] = Py_XNewRef(outs[i]);
}

void cap_clock_done(cap_clock *k)
{
    double now = clock_read();
    if (k->pending)
        charge_break(k, now);
    else if (k->last && !k->last->end_break)
        k->last->tail_ms += clock_elapsed(k, now);
    clock_drop_outs(k);
}

/* Per frame: (calls, total ms, fastest call after the first). */
void cap_measure_eager(const char *frame, double ms)
{
    PyObject *key = PyUnicode_FromString(frame);
    PyObject *old = key ? PyDict_GetItem(cap_meas.eager, key) : NULL;
    long calls = 0;
    double total = 0, steady = 0;
    if (old && !PyArg_ParseTuple(old, "ldd", &calls, &total, &steady))
        PyErr_Clear();
    if (calls >= 1 && (calls == 1 || ms < steady))
        steady = ms; /* the first call pays one-time costs: never the fastest */
    PyObject *v = Py_BuildValue("(ldd)", calls + 1, total + ms, steady);
    if (!v || PyDict_SetItem(cap_meas.eager, key, v) < 0)
        PyErr_Clear();
    Py_XDECREF(v);
    Py_XDECREF(key);
}
