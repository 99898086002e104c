/* Internal header of compiler/capture's reporting (report.c, measure.c):
 * the events ptc.explain reads, logs, the trace directory, warnings and
 * repro dumps, and ptexplain's measurements. It sits above the backends and
 * below the runner (exec.h): what it records of one compiled function is a
 * cap_reports that the compiled function holds and hands down, so reporting
 * knows no compiled function, cache or runner.
 */
#ifndef PTC_CAP_REPORT_H
#define PTC_CAP_REPORT_H

#include "capture/backend/backend.h"
#include "logs/logs.h"

/* What reporting keeps of one compiled function. */
typedef struct cap_reports {
    PyObject *events;      /* list of dicts: compiles, recompiles, limits, fallbacks */
    PyObject *warned;      /* set of warning keys already shown */
    int next_id;           /* compile ids, for graph numbering */
    int serial;            /* numbers compiled functions (measure.c's "cf") */
    ptc_trace *trace;      /* PTC_TRACE_DIR, opened on the first compile */
    bool trace_checked;
} cap_reports;

/* 0, or -1 with a Python error. */
int cap_reports_init(cap_reports *r);
/* Forgets the events and warnings shown (ptc.reset); ids and the trace go on. */
void cap_reports_clear(cap_reports *r);
void cap_reports_free(cap_reports *r);

/* A new entry e (given its id here) from trace T. */
void cap_report_compile(cap_reports *r, cap_entry *e, cap_trace *T, const char *reason);
/* A graph the training backend compiled as pieces cut by graph_cut. */
void cap_report_pieces(cap_reports *r, const cap_entry *e);
/* A graph that needs gradients runs through torch ops (e->autograd_why). */
void cap_report_autograd(cap_reports *r, const cap_entry *e);
/* Closes the entry's trace folder once its backend compiled. */
void cap_report_compiled(cap_entry *e);
/* info: cap_guard_info's dict for the failing guard (merged into the event), or NULL. */
void cap_report_recompile(cap_reports *r, const char *name, const char *guard, PyObject *info);
void cap_report_limit(cap_reports *r, const char *name, const char *guard, PyObject *info);
/* A trace with symbolic sizes failed (why): the position retraces with fewer
 * symbols (all: none at all). */
void cap_report_static_fallback(cap_reports *r, const char *name, const char *why, bool all);
/* A break whose resume state cannot be rebuilt in the outermost frame. */
void cap_report_untraceable(cap_reports *r, const char *name, const cap_break *b, const char *why);
/* Code ptc does not interpret (a generator, a coroutine) ran untouched. */
void cap_report_skipped(cap_reports *r, PyObject *fn, const char *why);
/* Internal error with the pending exception: warns once, dumps a repro of
 * graph (the partial graph of the failed trace, or NULL), clears the
 * exception. */
void cap_warn_error(cap_reports *r, const char *where, const ptc_graph *graph);
/* A call made while a user's TorchFunctionMode is active runs eagerly:
 * records it and warns once. */
void cap_warn_mode(cap_reports *r, PyObject *fn);
/* A backend failed for entry e: warns once, dumps a repro, records it. */
void cap_warn_fallback(cap_reports *r, cap_entry *e, const char *stage, const char *msg);
/* Writes a repro folder for graph g with the given torch inputs (may be NULL). */
void cap_repro_dump(const ptc_graph *g, PyObject **inputs, int ninputs, const char *stage,
                    const char *message, const char *backend, char *path, size_t size);

/* ---- measurements for ptexplain (measure.c) ------------------------------------------- */

/* Bounds, chosen rather than measured, that keep a stats record and a clock
 * one fixed allocation: past them the later break times, crossing tensors
 * and graph outputs are not recorded (ptexplain reports from those kept). */
#define CAP_STATS_SAMPLES 64
#define CAP_STATS_CROSS 32
#define CAP_CLOCK_OUTS 64

/* One entry's numbers; shared with its compile event through a capsule. */
struct cap_stats {
    long runs;              /* graph runs */
    double graph_ms;        /* inside the graph */
    double backend_ms;      /* compiling the graph for its backend */
    long breaks;            /* END_BREAK: times its break ran */
    double break_ms;        /* outside graphs from its graph to the next (see measure.c) */
    double tail_ms;         /* END_RETURN: from its graph to the return */
    int nsamples;
    float samples[CAP_STATS_SAMPLES]; /* break_ms of the first runs, one each */
    int ncross;             /* outputs of its graph that the next graph read */
    struct cap_cross { int next, out, in; } cross[CAP_STATS_CROSS];
    int backend;            /* cap_backend that ran the graph last */
    bool end_break;
};

typedef struct cap_measure {
    bool on;
    int depth;              /* nested compiled calls */
    long calls;             /* top-level compiled calls */
    double call_ms, compile_ms, graph_ms;
    long clock_reads;       /* by the calls' clocks (cap_clock_*): per graph and break */
    PyObject *events;       /* every compiled function's events (dicts with "cf") */
    PyObject *eager;        /* frame name -> (calls, ms) run eagerly by a fallback */
} cap_measure;
extern cap_measure cap_meas;

/* The accounting of one call (cap_drive). */
typedef struct cap_clock {
    cap_stats *pending;     /* the entry whose break is running */
    cap_stats *last;        /* the entry that ran last */
    double since, compile0, graph0, graph_start;
    int nouts;
    PyObject *outs[CAP_CLOCK_OUTS]; /* the pending entry's graph outputs (strong) */
} cap_clock;

void cap_measure_set(bool on);
/* Appends a copy of the event (of compiled function number serial) to the
 * global list (when measuring). */
void cap_measure_event(int serial, PyObject *ev);
/* Creates e's stats record (when measuring); borrowed capsule or NULL. */
PyObject *cap_stats_attach(cap_entry *e);
PyObject *cap_stats_dict(PyObject *capsule);
PyObject *cap_measured(void);
void cap_clock_graph_begin(cap_clock *k, cap_entry *e, PyObject **vals);
void cap_clock_graph_end(cap_clock *k, cap_entry *e, PyObject **outs, int nout);
void cap_clock_done(cap_clock *k);
void cap_measure_eager(const char *frame, double ms);

#endif /* PTC_CAP_REPORT_H */
