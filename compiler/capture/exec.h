/* Internal header of compiler/capture's top: compiled functions, their
 * caches, reporting and measurements (compiled.c, exec.c, report.c,
 * measure.c, init.c). The layers below, each a folder with one header, depend
 * one way: interp <- trace <- torch <- entry <- backend <- this.
 */
#ifndef PTC_CAP_EXEC_H
#define PTC_CAP_EXEC_H

#include "capture/backend/backend.h"
#include "logs/logs.h"

/* The entries at one position, most recent first. */
typedef struct cap_pos {
    cap_entry *head;
    int count;             /* entries compiled here */
    bool eager;            /* over the recompile limit, or untraceable */
    bool warned;
    bool ran_eagerly;      /* its first call ran eagerly (stance eager_then_compile) */
    char last_fail[700];   /* the most recent entry's failing guard */
    PyObject *last_info;   /* the same as a dict (cap_guard_info), or NULL */
} cap_pos;

struct cap_compiled {
    PyObject *target;      /* the function, or the nn.Module (strong) */
    bool is_module;
    cap_options opts;
    PyObject *module_names;/* id(submodule) -> "layer1.0.conv1" (modules) */
    PyObject *positions;   /* position bytes -> capsule(cap_pos) */
    int next_id;           /* compile ids, for graph numbering */
    PyObject *events;      /* list of dicts: compiles, recompiles, limits, fallbacks */
    PyObject *warned;      /* set of warning keys already shown */
    PyObject *auto_dyn;    /* dynamic=None: source text -> dims (a mask) whose size
                              alone made a guard fail; later traces make them symbolic */
    bool all_dynamic_failed; /* dynamic=True could not trace with every size symbolic */
    PyObject *prev_sizes;    /* while recompiling: the previous entry's tensor sizes (borrowed) */
    ptc_trace *trace;      /* PTC_TRACE_DIR, opened on the first compile */
    bool trace_checked;
    uint64_t rng_offset;   /* per graph run */
    int serial;            /* numbers compiled functions (measure.c's "cf") */
};

PyObject *cap_drive(cap_compiled *c, cap_interp *S, PyObject *fn, PyObject *args, PyObject *kwargs);
/* Calls fn(args) through c's caches (a callee the tracer would not inline). */
PyObject *cap_compiled_call_fn(cap_compiled *c, PyObject *fn, PyObject *const *args, int nargs,
                               PyObject *kwnames);

/* Reporting. */
void cap_report_compile(cap_compiled *c, cap_entry *e, cap_trace *T, const char *reason);
/* A graph the training backend compiled as pieces cut by graph_cut. */
void cap_report_pieces(cap_compiled *c, const cap_entry *e);
/* Closes the entry's trace folder once its backend compiled. */
void cap_report_compiled(cap_entry *e);
/* info: cap_guard_info's dict for the failing guard (merged into the event), or NULL. */
void cap_report_recompile(cap_compiled *c, const char *name, const char *guard, PyObject *info);
void cap_report_limit(cap_compiled *c, const char *name, const char *guard, PyObject *info);
/* A trace with symbolic sizes failed (why): the position retraces with fewer
 * symbols (all: none at all). */
void cap_report_static_fallback(cap_compiled *c, const char *name, const char *why, bool all);
/* A break whose resume state cannot be rebuilt in the outermost frame. */
void cap_report_untraceable(cap_compiled *c, const char *name, const cap_break *b, const char *why);
/* Internal error with the pending exception: warns once, dumps a repro,
 * clears the exception. */
void cap_warn_error(cap_compiled *c, const char *where);
/* A call made while a user's TorchFunctionMode is active runs eagerly:
 * records it and warns once. */
void cap_warn_mode(cap_compiled *c, PyObject *fn);
/* A backend failed for entry e: warns once, dumps a repro, records it. */
void cap_warn_fallback(cap_compiled *c, cap_entry *e, const char *stage, const char *msg);
/* The partial graph of the last trace that failed internally (or NULL). */
const ptc_graph *cap_last_graph(void);
/* Writes a repro folder for graph g with the given torch inputs (may be NULL). */
void cap_repro_dump(const ptc_graph *g, PyObject **inputs, int ninputs, const char *stage,
                    const char *message, const char *backend, char *path, size_t size);

/* ---- measurements for ptexplain (measure.c) ------------------------------------------- */

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
/* Appends a copy of the event to the global list (when measuring). */
void cap_measure_event(cap_compiled *c, PyObject *ev);
/* Creates e's stats record (when measuring); borrowed capsule or NULL. */
PyObject *cap_stats_attach(cap_entry *e);
PyObject *cap_stats_dict(PyObject *capsule);
/* ptc._C._compile_ptir(text): the first graph of a .ptir text compiled with
 * the ptc backend, as a capsule; _run_compiled(capsule, tensors) runs it,
 * binding the graph's symbolic sizes from the tensors' shapes on every call
 * (one compile for every size). */
/* kernel_dir: compiled as an export package's graph, its kernels there. */
PyObject *cap_compile_ptir(PyObject *text, const char *kernel_dir);
PyObject *cap_run_compiled(PyObject *capsule, PyObject *tensors);
PyObject *cap_measured(void);
void cap_clock_graph_begin(cap_clock *k, cap_entry *e, PyObject **vals);
void cap_clock_graph_end(cap_clock *k, cap_entry *e, PyObject **outs, int nout);
void cap_clock_done(cap_clock *k);
void cap_measure_eager(const char *frame, double ms);

#endif /* PTC_CAP_EXEC_H */
