/* ptc capture: the CPython front end. Owns the bytecode interpreter that runs a
 * user's functions (its own frames, stack and exception tables, written against
 * the stable ABI), symbolic tensors and the mapping of torch calls onto ops.def,
 * guards and the per-code cache of compiled entries, graph breaks and their
 * taxonomy, and the backends that run a captured graph on torch tensors.
 *
 * compiler/python (the `ptc._C` extension module) is the only user of this
 * header: it creates the module, exposes compile/reset/config/explain and calls
 * cap_compiled_call on every call of a compiled function.
 */
#ifndef PTC_CAPTURE_H
#define PTC_CAPTURE_H

#include <Python.h>

#include "ir/ir.h"

/* What the stable ABI of 3.11 lacks but its full API has: small shims. */
#ifndef PyUnicode_AsUTF8
#define PyUnicode_AsUTF8(o) PyUnicode_AsUTF8AndSize((o), NULL)
#endif
#ifndef Py_SETREF
#define Py_SETREF(dst, src)                                                     \
    do {                                                                        \
        PyObject **_ptc_p = (PyObject **)&(dst);                                \
        PyObject *_ptc_old = *_ptc_p;                                           \
        *_ptc_p = (PyObject *)(src);                                            \
        Py_DECREF(_ptc_old);                                                    \
    } while (0)
#define Py_XSETREF(dst, src)                                                    \
    do {                                                                        \
        PyObject **_ptc_p = (PyObject **)&(dst);                                \
        PyObject *_ptc_old = *_ptc_p;                                           \
        *_ptc_p = (PyObject *)(src);                                            \
        Py_XDECREF(_ptc_old);                                                   \
    } while (0)
#endif

/* A type's name for messages (tp_name is opaque in the stable ABI); the
 * string lives until a few more names have been asked for. */
const char *cap_tpname(PyTypeObject *t);
/* The index of name in the NULL-terminated names, or -1 (name NULL: -1). */
int cap_name_index(const char *name, const char *const *names);

/* Backends a compiled function runs its graphs with. */
#define CAP_BACKENDS(X)                                                         \
    X(EAGER, "eager")         /* the captured graph run op by op through torch */ \
    X(REFERENCE, "reference") /* ptc's reference interpreter on torch memory */ \
    X(PTC, "ptc")             /* the compiled pipeline (runtime.h) */           \
    X(CALLABLE, "callable")   /* a Python callable given a ptc.Graph */

typedef enum {
#define X(id, name) CAP_BACKEND_##id,
    CAP_BACKENDS(X)
#undef X
    CAP_BACKEND_COUNT
} cap_backend;

/* Global configuration (ptc.config). */
typedef struct cap_config {
    int recompile_limit;  /* entries per (code, position) before running eagerly */
    bool strict;          /* PTC_STRICT: internal errors raise instead of falling back */
    int inline_depth;     /* deepest inlined call stack */
    char repro_dir[512];  /* PTC_REPRO ("" = a temp dir chosen on first use) */
    int inject_failure;   /* tests of the fallback paths: 1 compile, 2 backend */
    bool trust_module_state; /* hits skip module guards while cap_module_epoch stays */
    bool compiled_autograd;  /* PTC_COMPILED_AUTOGRAD: graphs needing gradients compile
                              * forward and backward (off: they run through torch ops) */
    int stance;              /* a cap_stance: ptc.set_stance, as torch.compiler.set_stance */
} cap_config;
/* What compiled calls do about compiling (ptc.set_stance; torch's names). */
typedef enum cap_stance {
    CAP_STANCE_DEFAULT,            /* compile, recompile when a guard fails */
    CAP_STANCE_FORCE_EAGER,        /* run every compiled function eagerly */
    CAP_STANCE_EAGER_ON_RECOMPILE, /* use cached entries; run eagerly instead of recompiling */
    CAP_STANCE_FAIL_ON_RECOMPILE,  /* use cached entries; raise instead of recompiling */
    CAP_STANCE_EAGER_THEN_COMPILE, /* each position's first call runs eagerly, then compile */
} cap_stance;
/* cap_stance's names (torch.compiler.set_stance's), and the stance a name
 * names (-1: none). */
extern const char *const cap_stance_names[];
int cap_stance_of(const char *name);
/* The stance compiled calls follow now: ptc.set_stance's, or where that is
 * "default", torch.compiler.set_stance's (exec.c). */
int cap_stance_now(void);
extern cap_config cap_cfg;
/* Bumped (from Python) by every nn.Module write, hook registration and
 * container edit while trust_module_state is on (python/ptc/_module_state.py). */
extern uint64_t cap_module_epoch;

/* Sets everything up (opcode numbers from `dis`, torch objects, types). Adds
 * the module's types and constants to `module`. 0 / -1 with a Python error. */
int cap_init(PyObject *module);

/* Options of one ptc.compile call. */
typedef struct cap_options {
    cap_backend backend;
    PyObject *backend_fn;   /* CAP_BACKEND_CALLABLE: the callable (strong) */
    bool fullgraph;
    int dynamic;            /* -1 None, 0 False, 1 True */
    char mode[32];
    bool symint_results; /* ptc.export: an int of the result computed from symbolic
                          * sizes comes back as a ptc._export.SymIntResult carrying
                          * its expression, instead of being specialised */
} cap_options;

/* A compiled function: what ptc.compile returns for a function, and the engine
 * behind the module wrapper. Opaque to compiler/python except through these. */
typedef struct cap_compiled cap_compiled;
cap_compiled *cap_compiled_new(PyObject *target, const cap_options *opts);
void cap_compiled_free(cap_compiled *c);
/* Calls it: guards, graphs, breaks; falls back to eager on internal errors. */
PyObject *cap_compiled_call(cap_compiled *c, PyObject *args, PyObject *kwargs);
/* Drops every cached entry (ptc.reset) of one compiled function. */
void cap_compiled_reset(cap_compiled *c);
/* Explain data collected since the last reset (a dict, new reference). */
PyObject *cap_compiled_report(cap_compiled *c);

/* Drops every cache (ptc.reset()). */
void cap_reset_all(void);

/* Test hook: runs fn(*args, **kwargs) in the interpreter without tracing,
 * inlining every Python call when `inline_all` (used to check the interpreter
 * against CPython on plain Python programs). */
PyObject *cap_interpret(PyObject *fn, PyObject *args, PyObject *kwargs, bool inline_all);

/* Marks a function as never traced into (ptc.disable). */
int cap_disable(PyObject *fn);

/* PTC_TRACE_DIR, or its rank_N folder in a torch.distributed job (rank.c);
 * NULL when tracing is off. buf holds the result when it is a rank folder. */
const char *cap_rank_trace_dir(char *buf, size_t size);
/* fn(event) is called with each compile and recompile event (None: off). */
void cap_set_compile_observer(PyObject *fn);
void cap_observe_event(PyObject *ev);

/* The break taxonomy as a list of dicts (code, name, reason, explanation, hint). */
PyObject *cap_break_table(void);

#endif /* PTC_CAPTURE_H */
