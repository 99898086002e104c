/* ptexplain: why a compiled model is slow.
 *
 * Owns the report: a model built from what ptc measured while a script ran
 * (the events of every compiled function, with per-entry times, as JSON from
 * ptc._C._measured()) and from the trace folder of each compile (loops.txt,
 * kernels.txt, metrics.json); its analysis (break sites grouped and ranked by
 * measured cost in bands, tensors that cross a break and the kernels on both
 * sides, recompiles with their guards, ops that ran outside ptc's kernels,
 * performance hints); and its two printed forms, text and JSON. None of this
 * needs Python: the driver (ptexplain.c, embed.c) runs the script in an
 * embedded CPython and hands the JSON over, and tests/unit/test_explain.c
 * drives the rest from files.
 */
#ifndef PTC_EXPLAIN_H
#define PTC_EXPLAIN_H

#include "logs/logs.h"

/* A place in the user's source: file, 1-based line, columns of the
 * expression (endcol 0: unknown end) and the whole source line. */
typedef struct xp_loc {
    const char *file; /* "" when unknown */
    int line, col, endcol;
    const char *text;
} xp_loc;

/* ---- one compiled graph's kernels (kernels.txt, loops.txt) ------------------------ */

typedef enum { XP_BUF_INPUT, XP_BUF_OUTPUT, XP_BUF_TEMP } xp_buf_kind;

typedef struct xp_buf {
    int num;            /* bufN */
    xp_buf_kind kind;
    int index;          /* input / output number */
    const char *type;   /* "f32[4,16]" */
    const char *prov;   /* first stage-1 value it comes from ("%3"), or "" */
} xp_buf;

typedef struct xp_kernel {
    int index;          /* kernel <n> or extern <n> */
    bool is_extern;
    const char *name;   /* "k0_full_mul", "addmm" */
    int nwrites, nreads;
    int *writes, *reads;/* buffer numbers */
    int nprov;
    const char **prov;  /* stage-1 values its members come from, in order, unique */
    int nreduce;        /* reduction members */
    const char **reduce_prov; /* the stage-1 value of each reduction member */
} xp_kernel;

typedef struct xp_kernels {
    bool present;       /* the compile wrote kernels.txt */
    int nbufs, nkernels;
    xp_buf *bufs;
    xp_kernel *kernels; /* kernels and externs in step order */
    int refused_recompute, refused_memory;
} xp_kernels;

/* ---- the model ---------------------------------------------------------------------- */

typedef struct xp_cross { int next, out, in; } xp_cross;

/* A piece of a graph cut where ptc._split.graph_cut was called (ptc's DDP
 * gradient-bucket boundaries): compiled forward and backward, run as one
 * autograd node. */
typedef struct xp_piece {
    int ops;
    const char *modules; /* "blocks.0", "fc2 .. fc3", or "" */
    int program;         /* 1-based among the graph's distinct programs */
    double compile_ms;   /* 0: an alike piece's program, compiled before */
    int kernels[2], externs[2]; /* [0] forward, [1] backward */
    const char *ends;    /* the reason of the cut that ends it, or NULL: the graph's end */
} xp_piece;

/* One compiled entry: a segment of a function, with at most one graph. */
typedef struct xp_graph {
    int num;            /* graph number in compile order (1-based), 0 without ops */
    int cf, id, recompile;
    const char *frame, *reason, *end, *backend, *trace;
    int nodes, nguards;
    double trace_ms, backend_ms, graph_ms, break_ms, tail_ms;
    long runs, breaks;
    int nsamples;
    double *samples;
    int ncross;
    xp_cross *cross;
    ptc_module *mod;    /* the captured graph's parsed module (owned), or NULL */
    ptc_graph *g;       /* its graph */
    xp_kernels kn;
    ptc_metrics times;  /* metrics.json: per-stage compile times */
    int site;           /* break site it ends at, or -1 */
    int ncuts;
    const char **cuts;  /* the reasons of the graph's cuts, in order */
    int npieces, nprograms;
    xp_piece *pieces;   /* what the training backend made of the cuts */
} xp_graph;

/* A tensor that leaves one graph at a break and enters the next. */
typedef struct xp_crossing {
    int from_graph, to_graph;   /* graph numbers */
    const char *value, *type;   /* stage-1 output value and its type */
    const char *op;             /* the op that made it */
    xp_loc made;                /* where */
    double bytes;
    const char *producer;       /* kernel that writes it ("" without kernels) */
    const char *consumers;      /* kernels of the next graph that read it, ", "-joined */
} xp_crossing;

/* A place where graphs break, with every entry that ends there. */
typedef struct xp_site {
    const char *code, *name, *reason, *explanation, *hint, *detail, *stack, *frame;
    xp_loc loc;
    bool untraceable;   /* the whole frame ran eagerly because of it */
    int ngraphs;
    int *graphs;        /* indices into xp_report.graphs */
    long runs;
    double total_ms, median_ms;
    double steady_ms;   /* fastest run after each entry's first (0: none) */
    double rank_ms;     /* steady_ms times the runs: what ranking uses */
    int band;           /* cost band, 1 the costliest (analyze.c says how bands form) */
    int ncross;
    xp_crossing *cross;
    const char *advice; /* the concrete hint */
} xp_site;

/* A recompile (or the recompile limit) with the guard that failed. */
typedef struct xp_recompile {
    int cf;
    const char *frame, *guard, *kind, *source, *expected, *old, *now;
    xp_loc loc;         /* where the trace made the guard */
    bool limit;         /* the limit was hit here: later calls ran eagerly */
    int limit_value;
} xp_recompile;

/* Something that ran outside ptc's kernels. */
typedef enum {
    XP_OUT_EAGER_OP,    /* a torch op with no ptc op ran between graphs (a break) */
    XP_OUT_AUTOGRAD,    /* a graph ran through torch ops: it needs gradients */
    XP_OUT_BACKEND,     /* the compiled backend failed; the graph ran through torch ops */
    XP_OUT_NO_LOWERING, /* an op has no lowering (named by the backend failure) */
    XP_OUT_EAGER_BACKEND, /* the user chose a backend that runs torch ops */
    XP_OUT_EXTERN,      /* an extern kernel: the framework's own kernel, not fused */
    XP_OUT_EAGER_FRAME, /* a whole frame ran eagerly (recompile limit, untraceable) */
    XP_OUT_INTERNAL,    /* an internal error: the call ran eagerly */
    XP_OUT_SKIPPED,     /* a generator or coroutine ran untouched */
} xp_out_kind;

typedef struct xp_outside {
    xp_out_kind kind;
    const char *what;   /* op name, frame, or message */
    const char *detail;
    int graph;          /* graph number or 0 */
    int count;
    xp_loc loc;
    const char *module_path;
} xp_outside;

typedef enum { XP_HINT_SYNC, XP_HINT_DTYPE, XP_HINT_REDUCTION, XP_HINT_GRAD, XP_HINT_RECOMPILE } xp_hint_kind;

/* A performance hint. The same finding in several graphs (recompiles of one
 * function) is one hint: `key` names the finding, `others` counts repeats. */
typedef struct xp_hint {
    xp_hint_kind kind;
    const char *text;
    xp_loc loc;
    const char *key;
    int others;
} xp_hint;

typedef struct xp_eager {
    const char *frame;
    long calls;
    double ms;
    double steady_ms;   /* fastest call after the first (0 with one call) */
} xp_eager;

typedef struct xp_report {
    ptc_arena *arena;
    /* what ran */
    const char *target;   /* "script.py arg..." or "file.py:fn" */
    int status;           /* 0 ran, 1 raised */
    const char *error;    /* the exception's one-line summary, or NULL */
    double wall_ms;       /* the whole script */
    long calls;
    double call_ms, compile_ms, graph_ms;
    int nfunctions;       /* compiled functions that compiled something */
    const char **functions;
    int ngraphs;
    xp_graph *graphs;     /* every compiled entry, in compile order */
    int nsites;
    xp_site *sites;       /* ranked */
    int nrecompiles;
    xp_recompile *recompiles;
    int noutside;
    xp_outside *outside;
    int nhints;
    xp_hint *hints;
    int neager;
    xp_eager *eager;
    int nnotes;
    const char **notes;   /* from the driver ("torch.compile(backend=...) ran with ptc") */
    int ndynamic;
    const char **dynamic; /* symbols a use specialised (and where), symbolic sizes that failed */
    ptc_metrics stages;   /* compile time per stage, summed */
    int ops_captured, ops_no_lowering, nextern;
    const char *versions; /* "python 3.11.7, torch 2.11.0, ptc 0.1.0" (JSON only) */
    /* a process the script started (ranks.c): its torch.distributed rank
       (-1: none), pid and command line; pid 0 for the script's own process */
    int proc_rank;
    long pid;
    const char *argv;
} xp_report;

/* Builds the report from the measured JSON (see embed.c) and the trace
 * folders it names; then analyses it. 0, or -1 with err. */
int xp_report_build(xp_report *r, const char *json, size_t len, ptc_error *err);
void xp_report_free(xp_report *r);

/* Trace folder parsing (kernels.c). Missing files leave kn->present false. */
int xp_kernels_load(ptc_arena *a, const char *dir, xp_kernels *kn, ptc_error *err);
int xp_kernels_parse(ptc_arena *a, const char *loops, const char *kernels, xp_kernels *kn);
const xp_kernel *xp_kernel_writing(const xp_kernels *kn, int buf);
const xp_buf *xp_buf_find(const xp_kernels *kn, xp_buf_kind kind, int index);
void xp_metrics_load(const char *dir, ptc_metrics *m);

/* Analysis (analyze.c): sites, costs, bands and ranking, crossings,
 * outside ops, hints. Called by xp_report_build. */
void xp_analyze(xp_report *r);
double xp_median(const double *v, int n);
/* Concrete advice for a break site (hints.c). */
const char *xp_advice(ptc_arena *a, const xp_site *s);
const char *xp_recompile_advice(const xp_recompile *rc);

/* Output (render.c). color: ANSI escapes. */
void xp_render_text(ptc_buf *b, const xp_report *r, bool color);
void xp_render_json(ptc_buf *b, const xp_report *r);
/* The report's members as JSON, into an open object (render_json.c). */
void xp_render_json_fields(ptc_jw *w, const xp_report *r);

/* ---- the processes a script started (ranks.c) ----------------------------------------- */

/* One report per process that wrote its measurements (measured_<pid>.json)
 * into a trace directory or its rank_N folders, ordered by rank, then pid. */
typedef struct xp_procs {
    int n;
    xp_report *reports;
} xp_procs;

/* Loads the processes' reports from trace directory dir (a job's, holding
 * rank_N folders, or one rank's), leaving out skip_pid's; target: the
 * command line they ran under (NULL: each one's own). 0 (p->n may be 0),
 * or -1 with err naming the bad file. */
int xp_procs_load(const char *dir, long skip_pid, const char *target, xp_procs *p, ptc_error *err);
void xp_procs_free(xp_procs *p);
/* The script's own report (top; NULL when reading a trace directory), then
 * a line per process and each process's report, every line of it marked
 * "[rank N]" ("[pid P]" without a rank). */
void xp_render_procs_text(ptc_buf *b, const xp_report *top, const xp_procs *p, bool color);
/* top's JSON (an empty report when NULL) with "processes": [{"rank", "pid",
 * ...the report's members}]. */
void xp_render_procs_json(ptc_buf *b, const xp_report *top, const xp_procs *p);

#endif /* PTC_EXPLAIN_H */
