/* Internal header of compiler/capture's top: compiled functions (compiled.c)
 * above the runner of their calls (exec.c), which compiles on a miss
 * (compile.c). The layers below depend one way: interp <- trace <- torch <-
 * entry <- backend <- report (report.h) <- compile <- exec <- compiled.
 */
#ifndef PTC_CAP_EXEC_H
#define PTC_CAP_EXEC_H

#include "capture/report.h"

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
    cap_reports rep;       /* its events, warnings shown, trace folder */
    PyObject *auto_dyn;    /* dynamic=None: source text -> dims (a mask) whose size
                              alone made a guard fail; later traces make them symbolic */
    bool all_dynamic_failed; /* dynamic=True could not trace with every size symbolic */
    PyObject *prev_sizes;    /* while recompiling: the previous entry's tensor sizes (borrowed) */
};

/* The most frames a state holds: the outermost and the inlined ones, at most
 * ptc.config.inline_depth deep, which compiler/python bounds to 1..200. */
#define CAP_MAX_STATE_FRAMES 256

/* ---- compiling on a miss (compile.c) ----------------------------------------------------- */

/* S's frames, outermost first, into frames[max]: their number. */
int cap_state_frames(cap_interp *S, cap_frame **frames, int max);
/* Traces from the state in S with symbolic sizes where the options and
 * marks ask for them, and again with static sizes where those fail (the
 * reason in the log and ptc.explain); prepares the new entry's backend. NULL
 * with an error on failure, or with *eager set when this position cannot be
 * compiled (run it for real). prev_sizes: the previous entry's tensor sizes
 * while recompiling (borrowed), or NULL. */
cap_entry *cap_compile_at(cap_compiled *c, cap_interp *S, const char *reason, int recompile,
                          bool *eager, PyObject *prev_sizes);
/* The partial graph of the last trace that failed internally (or NULL): the
 * repro the warning about the failure shows. */
const ptc_graph *cap_failed_graph(void);

/* ---- the runner (exec.c) ----------------------------------------------------------------- */

/* Runs fn (args[nargs], kwnames' values last) from its first instruction
 * through c's caches. `eager` is what an eager fallback calls, with eargs
 * and ekwargs. */
PyObject *cap_run_call(cap_compiled *c, PyObject *fn, PyObject *const *args, int nargs,
                       PyObject *kwnames, PyObject *eager, PyObject *eargs, PyObject *ekwargs);

#endif /* PTC_CAP_EXEC_H */
