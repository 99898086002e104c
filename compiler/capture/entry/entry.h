/* Compiled entries and the cache: what a finished trace leaves behind, and
 * what runs on every later call.
 *
 * An entry is one segment of a function: guards on the state it starts from,
 * at most one graph, and what follows the graph: either the return value
 * (rebuilt by a recipe) or a resume state (frames rebuilt by recipes) at a
 * break instruction, which then runs for real before the next segment is
 * looked up by position. Entries are cached per compiled function, keyed by
 * position (the code object and instruction of every frame), in order.
 */
#ifndef PTC_CAP_ENTRY_H
#define PTC_CAP_ENTRY_H

#include "logs/logs.h"
#include "capture/torch/torch.h"

typedef struct cap_backend_state cap_backend_state;
typedef struct cap_stats cap_stats;
typedef struct cap_dcache cap_dcache;

enum { CAP_END_RETURN = 0, CAP_END_BREAK = 1 };

typedef struct cap_rframe {
    cap_code *code;
    int pc, sp;
    int func;            /* recipe */
    int *lp;             /* [code->nlp] recipes */
    int *stack;          /* [sp] */
    PyObject *kwnames;   /* pending KW_NAMES (strong) or NULL */
    cap_cont ret;        /* the frame's continuation */
    int ret_arg;
    int ret_a;           /* recipe or -1 */
    char *module_path;
} cap_rframe;

/* A mutation of an outside object replayed after the graph, in program
 * order (entry_run.c has one routine per kind): its object, key and value
 * are recipes. */
typedef struct cap_effect {
    uint8_t kind; /* cap_effect_kind */
    int obj;      /* recipe indices; -1 where the kind has none */
    int key;
    int value;
} cap_effect;

/* Where a dict read found its key last time (entry_run.c): an entry index,
 * or -1 while unknown; given up after a few misses. */
typedef struct cap_hint {
    int32_t pos;
    int32_t misses;
} cap_hint;

typedef struct cap_clsmemo {
    PyTypeObject *type;
    unsigned int tag;
} cap_clsmemo;

/* Eager's strides of a graph output, where the trace knew them. */
typedef struct cap_out_strides {
    bool known;
    int64_t st[PTC_MAX_DIMS];
} cap_out_strides;

struct cap_entry {
    struct cap_entry *next;  /* the next entry at the same position */
    int refs;                /* its position's, and each call running it (GIL-held) */
    cap_compiled *owner;
    int id;                  /* compile id (graph numbering) */
    int recompile;           /* 0 for the first entry at its position */
    /* Guards. */
    int nsrc;
    cap_source *src;
    int nguards;
    cap_guard *guards;
    cap_symtab syms;         /* where each size symbol of the guards is read */
    ptc_arena *sym_arena;    /* the guards' size expressions, or NULL */
    uint8_t *src_needed;     /* [nsrc]: read by a guard, a recipe or an input (or an
                                ancestor of one); the others are never evaluated */
    /* Tensor guards checked in one call to torch's TensorGuards (C++), built
       at the entry's first hit; NULL before, or where torch has none. */
    PyObject *tensor_guards;
    int *tensor_gi;          /* indices of the TENSOR guards, in order */
    int ntensor;
    bool tg_tried;
    /* Parameters and buffers (module-held tensors): the object each guard
       last passed with (strong), or NULL. The same object again skips the
       metadata check, as torch.compile does for module tensors whose dict
       is unchanged; replacing .data of a parameter is not noticed. */
    PyObject **param_seen;   /* [nguards] */
    /* Method guards (CLASSATTR): the class each last passed with and its
       version tag (typever.c), not owned. The same class at the same tag
       passes without looking the method up again. */
    cap_clsmemo *clsmemo; /* [nguards] */
    /* Dict-read positions (entry_run.c), allocated at the first check:
       2 per source (the key, and the sub-dict of a parameter, buffer or
       child module), then 4 per guard (hook dicts). */
    cap_hint *hints;
    cap_dcache *dcache;      /* [nsrc]: per check, the dicts of a module (entry_run.c) */
    /* Trusted module state (ptc.config.trust_module_state, entry_run.c):
       flags per source then per guard, the kept module-held values (strong),
       and the module epoch they were kept at (0: none). */
    uint8_t *trust;
    PyObject **kept;
    uint64_t trusted_epoch;
    /* ... and, where the runtime has dict versions (typever.c), the dicts
       the kept values and the skipped "no hooks" guards were read from,
       strong, with their versions then (owner: the object whose instance
       dict it is, strong, or NULL). A hit where every one still matches
       takes the kept values too, whatever the epoch or the setting. */
    cap_snap *snap;
    int nsnap;
    uint32_t trust_wait;     /* full checks to go before learning again */
    uint8_t trust_wasted;    /* learnings in a row that no hit used */
    bool trust_used;
    /* The graph (NULL when the segment has no tensor ops). */
    ptc_graph *graph;
    int *input_src;          /* per graph input: source, or -1 (constant) */
    PyObject **input_const;  /* per graph input: the constant tensor or NULL */
    uint8_t *node_grad;      /* per node id: grad mode */
    /* Eager's strides of each graph output, where the trace knew them
       (cap_value_strides: a *_like's size-1 dims, which the graph's ops do
       not carry), for the ptc backend to return; NULL where none is known. */
    cap_out_strides *out_strides; /* [graph->noutputs] */
    /* Cuts (ptc._split.graph_cut): the first node id of each piece after
       the first, ascending; the training backend compiles the pieces. */
    int ncuts;
    int *cut_at;
    int npieces, nprograms;  /* what the backend made of them: pieces, distinct programs */
    PyObject *piece_list;    /* per piece, a dict for the report (backend_pieces.c), or NULL */
    cap_backend backend;     /* what runs the graph */
    bool autograd_fallback;  /* gradients needed: ran through torch ops */
    char autograd_why[256];  /*   why (an op without a derivative, ...) */
    bool broken;             /* its recipes failed once: its position runs eagerly */
    /* Graph inputs the segment writes in place (functionalised: the graph
       returns their new values): after the graph, in write order, input
       writeback[k].input takes output writeback[k].output (copy_). */
    int nwriteback;
    struct cap_writeback {
        int input, output;
    } * writeback;
    cap_backend_state *bstate;
    /* frees bstate: set by the backend that made it (entries know no backend) */
    void (*free_bstate)(struct cap_entry *e);
    /* After the graph. */
    int nrecipes;
    cap_recipe *recipes;
    int end;                 /* CAP_END_RETURN / CAP_END_BREAK */
    int ret;                 /* recipe of the return value */
    int nframes;
    cap_rframe *frames;
    bool grad_start, grad_end;
    int64_t amp_start, amp_end; /* autocast state, packed */
    int neffects;
    cap_effect *effects;
    cap_break brk;           /* why the segment ended (END_BREAK) */
    /* Reporting. */
    double compile_ms;
    ptc_trace_compile *tc;   /* its trace folder while compiling (PTC_TRACE_DIR) */
    char frame_name[160];
    PyObject *guard_strs;    /* list of str */
    PyObject *skipped;       /* list of skipped generator names */
    long hits;
    PyObject *stats;         /* measure.c's capsule (strong), or NULL */
    cap_stats *st;           /* its record */
};
typedef struct cap_entry cap_entry;
typedef struct cap_writeback cap_writeback;

/* Builds an entry from a trace that ended (rc: CAP_DONE or CAP_BREAK) in I.
 * NULL with *unreconstructable set when a resume state holds a value that
 * cannot be rebuilt (the frame index at fault), else NULL with an error. */
cap_entry *cap_entry_build(cap_trace *T, cap_interp *I, int rc, int *unreconstructable);
/* Entries are reference-counted: a reset only unlinks them from their
 * position, and a call in flight (this thread's or another's: the GIL is
 * released in torch calls and whenever Python code runs) keeps the entry
 * it runs alive. A new entry holds one reference. */
cap_entry *cap_entry_ref(cap_entry *e);
void cap_entry_unref(cap_entry *e); /* NULL-safe; frees at zero */

/* Guard evaluation over a state (frames[0..nframes)). Returns 1 pass, 0 fail
 * (with *failed = guard index), -1 error. vals receives source values (owned
 * flags set for new references); cap_entry_release_vals frees them. */
int cap_entry_check(cap_entry *e, cap_frame **frames, int nframes, PyObject **vals, bool *owned,
                    int *failed);
void cap_entry_release_vals(cap_entry *e, PyObject **vals, bool *owned);
/* Drops the dict versions of trusted module state (entry_run.c). */
void cap_entry_snap_clear(cap_entry *e);
/* A description of guard g with the value it saw now ("G['flag'] == True, now False"). */
void cap_guard_describe(const cap_entry *e, int g, PyObject **vals, char *buf, size_t size);
void cap_guard_str(const cap_source *src, int nsrc, const cap_guard *g, char *buf, size_t size);
/* Guard g as a dict for reports: kind, source, guard, old, new, and where the
 * trace made it (file, line, col, endcol, text; file "" when unknown). */
PyObject *cap_guard_info(const cap_entry *e, int g, PyObject **vals);

/* Evaluates the recipes after the graph (rvals[nrecipes], new refs). */
int cap_entry_run_recipes(cap_entry *e, PyObject **vals, PyObject **outputs, PyObject **rvals);
/* Replays the entry's attribute writes (after its recipes ran). */
int cap_entry_run_effects(cap_entry *e, PyObject **rvals);
/* Rebuilds the resume state's frames into I (real mode). */
int cap_entry_resume_frames(cap_entry *e, PyObject **rvals, cap_interp *I);

#endif /* PTC_CAP_ENTRY_H */
