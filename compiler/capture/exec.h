/* Internal: compiled functions, their caches, and reporting (exec.c,
 * compiled.c, report.c).
 */
#ifndef PTC_CAP_EXEC_H
#define PTC_CAP_EXEC_H

#include "entry.h"
#include "logs/logs.h"

/* The entries at one position, most recent first. */
typedef struct cap_pos {
    cap_entry *head;
    int count;             /* entries compiled here */
    bool eager;            /* over the recompile limit, or untraceable */
    bool warned;
    char last_fail[700];   /* the most recent entry's failing guard */
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
    ptc_trace *trace;      /* PTC_TRACE_DIR, opened on the first compile */
    bool trace_checked;
    uint64_t rng_offset;   /* per graph run */
};

PyObject *cap_drive(cap_compiled *c, cap_interp *S, PyObject *fn, PyObject *args, PyObject *kwargs);
PyObject *cap_compiled_module_names(cap_compiled *c);
/* Calls fn(args) through c's caches (a callee the tracer would not inline). */
PyObject *cap_compiled_call_fn(cap_compiled *c, PyObject *fn, PyObject *const *args, int nargs,
                               PyObject *kwnames);

/* Reporting. */
void cap_report_compile(cap_compiled *c, cap_entry *e, cap_trace *T, const char *reason);
/* Closes the entry's trace folder once its backend compiled. */
void cap_report_compiled(cap_entry *e);
void cap_report_recompile(cap_compiled *c, const char *name, const char *guard);
void cap_report_limit(cap_compiled *c, const char *name, const char *guard);
/* A break whose resume state cannot be rebuilt in the outermost frame. */
void cap_report_untraceable(cap_compiled *c, const char *name, const cap_break *b, const char *why);
/* Internal error with the pending exception: warns once, dumps a repro,
 * clears the exception. */
void cap_warn_error(cap_compiled *c, const char *where);
/* A backend failed for entry e: warns once, dumps a repro, records it. */
void cap_warn_fallback(cap_compiled *c, cap_entry *e, const char *stage, const char *msg);
/* The partial graph of the last trace that failed internally (or NULL). */
const ptc_graph *cap_last_graph(void);
/* Writes a repro folder for graph g with the given torch inputs (may be NULL). */
void cap_repro_dump(const ptc_graph *g, PyObject **inputs, int ninputs, const char *stage,
                    const char *message, const char *backend, char *path, size_t size);

#endif /* PTC_CAP_EXEC_H */
