/* ptminify: shrinks a failing graph to a minimal repro by delta debugging.
 *
 * Owns: failure checks and pinned signatures (signature.c), the tests run in
 * forked children with time and memory limits (child.c), what a child runs
 * (exec.c: compile + run + compare with the oracle), candidates and the graph
 * surgery that builds them (cand.c), the reduction strategies and ddmin
 * (reduce.c), and the output folder with its repro scripts (emit.c, pyemit.c).
 * Only tools/minifier and its tests include this header.
 */
#ifndef PTC_MINIFY_H
#define PTC_MINIFY_H

#include "pipeline/pipeline.h"

#include <regex.h>

/* ------------------------------------------------------------------------------
 * What a test observed, and failure signatures
 * ---------------------------------------------------------------------------- */

#define MF_KINDS(X)                                                            \
    X(PASS, "pass")         /* compiled, ran, outputs agree */                 \
    X(ERROR, "error")       /* a ptc error from a compile stage or the run */  \
    X(ACCURACY, "accuracy") /* outputs diverge from the interpreter */         \
    X(CRASH, "crash")       /* the child died from a signal or exited */       \
    X(HANG, "hang")         /* the child ran past the time limit */            \
    X(OOM, "oom")           /* the child ran out of its memory limit */        \
    X(INVALID, "invalid")   /* the oracle itself rejects the candidate */

typedef enum {
#define X(id, name) MF_##id,
    MF_KINDS(X)
#undef X
    MF_KIND_COUNT
} mf_kind;

const char *mf_kind_name(mf_kind k);

/* Filled by the child (in shared memory) and completed by the parent. */
typedef struct mf_result {
    int kind;              /* mf_kind */
    int errclass;          /* ptc_errclass for ERROR */
    int signal;            /* CRASH: the signal; 0 with exit_status for an exit */
    int exit_status;
    char stage[32];        /* failing stage; for crashes and hangs the last stage seen */
    char message[1024];    /* error message, mismatch, or crash detail */
    double seconds;
    int done;              /* set by the child when it finished normally */
} mf_result;

/* --check: which failure the user is after. */
typedef struct mf_check {
    bool any;              /* no --check and no repro.json: whatever fails */
    mf_kind kind;          /* ERROR, ACCURACY or CRASH (CRASH also covers HANG and OOM) */
    char regex[512];       /* error:REGEX ("" = any error) */
    double rtol, atol;     /* accuracy tolerances; < 0: dtype defaults */
} mf_check;

/* Parses crash | hang | error[:REGEX] | accuracy[:RTOL[:ATOL]]. */
int mf_check_parse(const char *s, mf_check *c, ptc_error *err);
/* Does r show the failure asked for by c? */
bool mf_check_accepts(const mf_check *c, const mf_result *r);

/* A pinned signature: a candidate counts as failing only if it matches. */
typedef struct mf_signature {
    mf_kind kind;
    int errclass;          /* ERROR */
    int signal;            /* CRASH */
    int exit_status;       /* CRASH by exit (signal 0) */
    char stage[32];        /* "" matches any stage */
    char pattern[1024];    /* masked message ("" matches any) unless has_regex */
    bool has_regex;
    char regex_src[512];
    regex_t regex;
} mf_signature;

/* Masks what varies between runs of the same failure: numbers (integers,
 * decimals, exponents) become '#', hex addresses '0x#'. */
void mf_mask(const char *msg, char *out, size_t size);
/* Pins r's signature; with an error:REGEX check the regex replaces the
 * masked message. 0, or -1 with err for a bad regex. */
int mf_signature_pin(mf_signature *sig, const mf_result *r, const mf_check *c, ptc_error *err);
bool mf_signature_match(const mf_signature *sig, const mf_result *r);
void mf_signature_free(mf_signature *sig);
/* "error InjectedError in codegen: injected error in codegen of relu ..." */
void mf_result_format(const mf_result *r, char *buf, size_t size);
void mf_signature_format(const mf_signature *sig, char *buf, size_t size);

/* ------------------------------------------------------------------------------
 * One test case and what runs it
 * ---------------------------------------------------------------------------- */

typedef struct mf_case {
    ptc_module *mod;       /* the parsed text: what is tested is what is written */
    ptc_graph *g;
    char *text;            /* the .ptir text (malloc'd) */
    uint64_t hash;         /* of the text: the result cache key */
    int ninputs;
    ptc_tensor *inputs;    /* one reference each */
    ptc_tensor *want;      /* [noutputs] the oracle's outputs when already known (the
                            * recorded values; borrowed), else NULL: the child runs it */
} mf_case;

void mf_case_free(mf_case *c);
/* Parses text into c (taking ownership of text) and checks it with
 * ptc_ops_verify; the caller then sets the inputs. */
int mf_case_from_text(mf_case *c, char *text, const char *filename, ptc_error *err);

typedef struct mf_exec_opts {
    ptc_backend backend;
    bool compare;          /* run the interpreter and compare outputs */
    double rtol, atol;
} mf_exec_opts;

/* Runs one case (in a child): fills r's kind/errclass/stage/message. */
typedef void (*mf_exec_fn)(const mf_case *c, const mf_exec_opts *o, mf_result *r);
/* The reference backend emulated on the interpreter, with PTC_INJECT's
 * runtime stage applied after each node (the harness ptminify's own tests
 * use; needs no compiler pipeline). */
void mf_exec_harness(const mf_case *c, const mf_exec_opts *o, mf_result *r);
/* ptc_compile + ptc_program_run (+ the interpreter when comparing). */
void mf_exec_pipeline(const mf_case *c, const mf_exec_opts *o, mf_result *r);
/* Compares outputs with want; fills r (ACCURACY) on a difference. */
bool mf_compare(const mf_case *c, const ptc_tensor *got, const ptc_tensor *want,
                const mf_exec_opts *o, mf_result *r);

/* ------------------------------------------------------------------------------
 * Children: each test in a forked process with a time and memory limit
 * ---------------------------------------------------------------------------- */

typedef struct mf_limits {
    double timeout_s;
    long mem_mb;           /* 0 = no limit */
    int jobs;
} mf_limits;

typedef struct mf_pool mf_pool;
mf_pool *mf_pool_new(const mf_limits *lim, ptc_error *err);
void mf_pool_free(mf_pool *p);
/* Stops every running child (SIGINT handling). */
void mf_pool_kill_all(mf_pool *p);

/* A lazily built list of candidates: build(i) makes case i (0), or says it is
 * not a valid candidate (-1: skipped, no test). */
typedef struct mf_batch {
    int n;
    int (*build)(void *ctx, int i, mf_case *c);
    void *ctx;
} mf_batch;

int mf_pool_slots(const mf_pool *p);
int mf_pool_running(const mf_pool *p);
/* Starts a child testing c in a free slot (there must be one); returns the
 * slot, or -1 if fork failed. */
int mf_pool_start(mf_pool *p, const mf_case *c, mf_exec_fn exec, const mf_exec_opts *o);
/* Waits for a child to finish (killing those past the time limit, which
 * become hangs) and fills r; returns its slot, or -1 when interrupted. */
int mf_pool_wait(mf_pool *p, mf_result *r);
/* Kills a running child and forgets it. */
void mf_pool_kill(mf_pool *p, int slot);

/* Records every intermediate value of g on inputs with the interpreter, in a
 * child: recorded[value id] gets a reference (zeroed when not recorded, e.g.
 * after an interpreter error). Returns the number of values recorded, or -1
 * with err when the child died. */
int mf_record(mf_pool *p, const ptc_graph *g, const ptc_tensor *inputs, ptc_tensor *recorded,
              ptc_error *err);

/* ------------------------------------------------------------------------------
 * The minifier
 * ---------------------------------------------------------------------------- */

typedef struct mf_options {
    mf_check check;
    bool check_given;
    const char *stage;     /* --stage: the failing stage to pin */
    ptc_backend backend;
    mf_limits limits;
    int max_tests;         /* 0 = no limit */
    bool verbose;
    bool progress_tty;     /* a live progress line on stderr */
    bool quiet;
} mf_options;

/* A candidate: the parts of the original graph it keeps. */
typedef struct mf_cand {
    bool *keep;            /* [nnodes]: node kept (by position in the original) */
    bool *out;             /* [nvalues]: value is a graph output */
    bool *drop;            /* [ninputs]: original input removed */
    int64_t *sizes;        /* [nvalues * PTC_MAX_DIMS]: shrunk input sizes, [0] < 0 if not */
} mf_cand;

typedef struct mf_stats {
    int tests;             /* children run */
    int cached;            /* candidates answered from the cache */
    int invalid;           /* candidates the oracle or the builder rejected */
    int accepted;          /* reductions kept */
    double started_ms;
} mf_stats;

typedef struct mf {
    /* the original */
    const ptc_graph *g;
    const ptc_tensor *inputs;  /* by input index */
    ptc_tensor *recorded;      /* by value id (data NULL if not recorded) */
    int nnodes, nvalues;
    int *node_pos;             /* node id -> position, or -1 */
    /* how to test */
    mf_options opt;
    mf_signature sig;
    mf_exec_fn exec;
    mf_exec_opts xo;
    mf_pool *pool;
    /* state */
    mf_cand best;
    mf_stats stats;
    const char *phase;
    bool stopped;              /* --max-tests reached or interrupted */
    /* result cache: text hash -> failing? */
    int ncache, capcache;
    uint64_t *cache_keys;
    bool *cache_fail;
    /* progress */
    void (*on_progress)(struct mf *m, bool accepted);
} mf;

/* Candidates and surgery (cand.c). */
void mf_cand_init(const mf *m, mf_cand *c);      /* the original graph */
void mf_cand_copy(const mf *m, mf_cand *dst, const mf_cand *src);
void mf_cand_free(mf_cand *c);
int mf_cand_nodes(const mf *m, const mf_cand *c);
int mf_cand_outputs(const mf *m, const mf_cand *c, int *vals); /* output value ids */
/* Removes kept nodes (by position); values left without users become
 * outputs, so that nothing that was compiled becomes dead. */
void mf_cand_remove_nodes(const mf *m, mf_cand *c, const int *pos, int n);
/* Removes outputs (value ids) and then every node that no longer reaches an
 * output. */
void mf_cand_remove_outputs(const mf *m, mf_cand *c, const int *vals, int n);
/* Nodes that reach no output (dead code), by position. */
int mf_cand_dead_nodes(const mf *m, const mf_cand *c, int *pos);
/* Original inputs used by no kept node and no output, by input index. */
int mf_cand_unused_inputs(const mf *m, const mf_cand *c, int *idx);
/* Builds the candidate's graph: removed nodes' values that kept nodes use
 * become graph inputs with the same names, fed with the recorded values;
 * shrunk inputs take the leading block of their data and every node's type
 * is inferred again. -1 with err (a reason) when it is not a valid graph. */
int mf_cand_build(const mf *m, const mf_cand *c, mf_case *out, ptc_error *err);

/* ddmin over a list of items (complement removal, halving the chunks down to
 * single items). test returns the index of the first chunk whose removal
 * keeps the failure, -1 if none, -2 to stop. On return items[0..*n) is what
 * is left. Returns the number of removals kept. */
typedef struct mf_chunk {
    int begin, end; /* positions in items */
} mf_chunk;
typedef int (*mf_chunk_test)(void *ctx, const int *items, int nitems, const mf_chunk *chunks,
                             int nchunks);
int mf_ddmin(int *items, int *n, int min_items, mf_chunk_test test, void *ctx);

/* Tests candidates of a batch in order, jobs at a time; returns the index of
 * the first whose failure matches the signature, -1 if none, -2 if stopped
 * (--max-tests or interrupt). Deterministic: the same index a sequential run
 * would find. */
int mf_first_failing(mf *m, const mf_batch *b);

/* The reduction loop: every strategy until none makes progress. */
void mf_reduce(mf *m);
/* Does the candidate (built and tested in a child) fail with the signature? */
bool mf_cand_fails(mf *m, const mf_cand *c);

/* Request a stop (signal handlers). */
extern volatile int mf_interrupted;

/* ------------------------------------------------------------------------------
 * Output (emit.c, pyemit.c)
 * ---------------------------------------------------------------------------- */

typedef struct mf_summary {
    const char *input;         /* the input path */
    int nodes_before, nodes_after;
    int inputs_before, inputs_after;
    int outputs_before, outputs_after;
    bool reduced;              /* a smaller graph still fails */
    const char *stop_reason;   /* "" or why the reduction stopped early */
    const char *backend;
    double seconds;
} mf_summary;

/* Writes DIR/graph.ptir, inputs.bin, repro.json, reference.bin, repro.sh,
 * repro.py, summary.txt and summary.json for the final case. */
int mf_emit(const mf *m, const mf_case *c, const mf_result *r, const mf_summary *s,
            const char *dir, ptc_error *err);
/* The standalone torch script (pyemit.c). */
int mf_emit_python(const ptc_graph *g, const mf_signature *sig, const mf_result *r,
                   const mf_options *o, ptc_buf *b, ptc_error *err);
const char *mf_backend_name(ptc_backend b);

#endif /* PTC_MINIFY_H */
