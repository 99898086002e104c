/* ptc lower: the loop-level IR, the scheduler that fuses it into kernels, and
 * the memory plan.
 *
 * Owns: index expressions (affine sums of loop variables, floor divisions and
 * modulos over symbolic sizes, simplified with variable ranges), scalar bodies
 * (small SSA lists of loads, arithmetic, casts, index values and random draws),
 * loop programs (buffers computed by Pointwise / Reduction / Extern nodes,
 * views folded into load indices), lowering of a prims graph into a loop
 * program, the scheduler (inlining of pointwise producers, grouping of nodes
 * into kernels that share an outer loop nest), the memory planner (one arena,
 * reuse by live range) and the checkers and printers of each stage.
 * Nothing here knows LLVM: compiler/codegen turns kernels into code.
 */
#ifndef PTC_LOWER_H
#define PTC_LOWER_H

#include "logs/logs.h"
#include "ops/ops.h"

/* ------------------------------------------------------------------------------
 * Index expressions
 *
 * constant + sum(coeff * atom) where coefficients and the constant are sizes
 * (ptc_dim, possibly symbolic) and an atom is a loop variable, a floor division
 * or modulo of another index expression by a positive size, or an integer value
 * computed by the body (indirect indexing). Every atom knows its range
 * [0, extent), which is what lets (s1*x0 + x1) // s1 simplify to x0.
 * Expressions are immutable and arena-allocated.
 * ---------------------------------------------------------------------------- */

typedef enum { PTC_IXA_VAR, PTC_IXA_DIV, PTC_IXA_MOD, PTC_IXA_VAL } ptc_ixatom_kind;

typedef struct ptc_ix ptc_ix;

typedef struct ptc_ixatom {
    uint8_t kind;    /* ptc_ixatom_kind */
    int id;          /* VAR: variable number; VAL: body expression index */
    const ptc_ix *x; /* DIV / MOD operand */
    ptc_dim d;       /* DIV / MOD divisor (> 0); VAR / VAL: extent, values in [0, d) */
} ptc_ixatom;

typedef struct ptc_ixterm {
    ptc_dim coeff; /* never statically 0 */
    const ptc_ixatom *atom;
} ptc_ixterm;

struct ptc_ix {
    ptc_dim constant;
    int nterms;
    const ptc_ixterm *terms;
};

const ptc_ix *ptc_ix_const(ptc_arena *a, ptc_dim c);
const ptc_ix *ptc_ix_int(ptc_arena *a, int64_t c);
const ptc_ix *ptc_ix_var(ptc_arena *a, int id, ptc_dim extent);
const ptc_ix *ptc_ix_val(ptc_arena *a, int expr, ptc_dim extent);
const ptc_ix *ptc_ix_add(ptc_arena *a, const ptc_ix *x, const ptc_ix *y);
const ptc_ix *ptc_ix_scale(ptc_arena *a, const ptc_ix *x, ptc_dim c);
/* x*c + y */
const ptc_ix *ptc_ix_madd(ptc_arena *a, const ptc_ix *x, ptc_dim c, const ptc_ix *y);
/* Floor division and modulo by a positive size, simplified with atom ranges. */
const ptc_ix *ptc_ix_floordiv(ptc_arena *a, const ptc_ix *x, ptc_dim d);
const ptc_ix *ptc_ix_mod(ptc_arena *a, const ptc_ix *x, ptc_dim d);
/* Replaces VAR atom i by vars[i] when i < nvars and vars[i] != NULL, and renames
 * VAL atom j to vals[j] when j < nvals (re-simplifying divisions). */
const ptc_ix *ptc_ix_subst(ptc_arena *a, const ptc_ix *x, const ptc_ix *const *vars, int nvars,
                           const int *vals, int nvals);
bool ptc_ix_eq(const ptc_ix *x, const ptc_ix *y);
bool ptc_ix_is_const(const ptc_ix *x, ptc_dim *c);
/* x is exactly variable v (coefficient 1, no constant). */
bool ptc_ix_is_var(const ptc_ix *x, int v);
/* The coefficient of variable v among the top-level terms (0 if absent);
 * *nested is set when v also occurs inside a DIV / MOD atom. */
ptc_dim ptc_ix_coeff(const ptc_ix *x, int v, bool *nested);
bool ptc_ix_uses_var(const ptc_ix *x, int v);
bool ptc_ix_uses_val(const ptc_ix *x);
/* The body entries VAL atoms of x refer to, nested ones included (appended
 * to vals[n..max)); returns the new count. */
int ptc_ix_vals(const ptc_ix *x, int *vals, int n, int max);
/* Upper bound (inclusive) when every term's sign is known and the minimum is
 * >= 0; false otherwise. */
bool ptc_ix_max(ptc_arena *a, const ptc_ix *x, ptc_dim *max);
/* names[v] prints VAR v (NULL or short array: "v<id>"); VAL j prints "t<j>". */
void ptc_ix_print(ptc_buf *b, const ptc_ix *x, const char *const *names, int nnames);

/* ------------------------------------------------------------------------------
 * Scalar bodies
 *
 * A body is an SSA list: entry i may use entries < i. Values have a dtype with
 * storage meaning (f16 values are f16-rounded at casts; codegen computes them
 * in f32). Bool values are 0/1.
 * ---------------------------------------------------------------------------- */

/* The loop ops (lops.def: the pointwise ones are ir/pointwise.def's). */
typedef enum {
#define LOP(id, name, arity, cost) PTC_L_##id,
#include "lower/lops.def"
    PTC_L_COUNT
} ptc_lop;

const char *ptc_lop_name(int op);
int ptc_lop_arity(int op);
int ptc_lop_cost(int op);

typedef struct ptc_lexpr {
    uint8_t op;        /* ptc_lop */
    ptc_dtype dtype;   /* result dtype */
    int arg[3];        /* operands (entry indices); LOAD: arg[0] = mask or -1 */
    /* LOAD: buffer and index. In loop IR idx has one expression per buffer
     * dimension (logical index); in kernels nidx == 1 and idx[0] is the flat
     * element offset. */
    int buf;
    int nidx;
    const ptc_ix **idx;
    /* CONST, and a masked LOAD's value where the mask is false. */
    bool is_int;
    int64_t ival; /* CHECK: ptc_check_code(kind, dim) */
    double fval;
    /* INDEX: the expression; RAND/RANDN: the element number drawn. */
    const ptc_ix *ix;
    int64_t seed; /* RAND / RANDN */
} ptc_lexpr;

typedef struct ptc_lbody {
    int n, cap;
    ptc_lexpr *e;
    struct ptc_lbody_cse *cse; /* ptc_body_emit's hash of the entries; NULL until used */
} ptc_lbody;

int ptc_lbody_add(ptc_arena *a, ptc_lbody *b, const ptc_lexpr *e); /* returns its index */
int ptc_lbody_const_f(ptc_arena *a, ptc_lbody *b, double v, ptc_dtype dt);
int ptc_lbody_const_i(ptc_arena *a, ptc_lbody *b, int64_t v, ptc_dtype dt);
int ptc_lbody_unary(ptc_arena *a, ptc_lbody *b, int op, ptc_dtype dt, int x);
int ptc_lbody_binary(ptc_arena *a, ptc_lbody *b, int op, ptc_dtype dt, int x, int y);
int ptc_lbody_where(ptc_arena *a, ptc_lbody *b, ptc_dtype dt, int c, int x, int y);
int ptc_lbody_cast(ptc_arena *a, ptc_lbody *b, ptc_dtype dt, int x); /* no-op if same dtype */
int ptc_lbody_load(ptc_arena *a, ptc_lbody *b, int buf, ptc_dtype dt, int nidx,
                   const ptc_ix *const *idx);
int ptc_lbody_index(ptc_arena *a, ptc_lbody *b, const ptc_ix *ix);
/* A CHECK (see Checks below): `ok` a bool entry, `value` and `bound` i64
 * entries reported on failure (a divisor check passes its divisor for both). */
int ptc_lbody_check(ptc_arena *a, ptc_lbody *b, int kind, int dim, int ok, int value, int bound);
/* Total cost of the entries `root` depends on. */
int ptc_lbody_cost(const ptc_lbody *b, int root);

/* ------------------------------------------------------------------------------
 * Checks
 *
 * Errors eager torch raises from inside its kernels (a bad index, an integer
 * division by zero) are CHECK entries in the body, as torch's device-side
 * asserts: a failing one records (code, value, bound) in the call's status
 * record, the first failure winning, and the runtime reads the record after
 * the kernel and fails with eager's exception and message.
 * X(ID, exception, message): %V is the value, %D the dim, %S the bound.
 * ---------------------------------------------------------------------------- */

#define PTC_CHECKS(X)                                                                              \
    X(INDEX, "RuntimeError", "index %V is out of bounds for dimension %D with size %S")            \
    X(INDEX_ADV, "IndexError", "index %V is out of bounds for dimension %D with size %S")          \
    X(INDEX_RANGE, "IndexError", "index out of range in self")                                     \
    X(INDEX_DIM1, "RuntimeError", "INDICES element is out of DATA bounds, id=%V axis_dim=%S")      \
    X(ZERO_DIV, "RuntimeError", "ZeroDivisionError")

typedef enum {
    PTC_CHECK_NONE,
#define X(id, exc, msg) PTC_CHECK_##id,
    PTC_CHECKS(X)
#undef X
        PTC_CHECK_COUNT
} ptc_check_kind;

/* The status record kernels write: code 0 while every check passed. */
typedef struct ptc_check_status {
    int64_t code, value, bound;
} ptc_check_status;

static inline int64_t ptc_check_code(int kind, int dim)
{
    return kind | (int64_t)dim << 8;
}
/* Fills err from a failed status: class RuntimeError, stage "check", eager's
 * message, led by "<exception>: " where eager's is not a RuntimeError
 * ("IndexError: index out of range in self"). Returns -1. */
int ptc_check_fail(const ptc_check_status *st, ptc_error *err);

/* ------------------------------------------------------------------------------
 * Loop programs
 * ---------------------------------------------------------------------------- */

#define PTC_REDUCES(X)                                                          \
    X(SUM, "sum")                                                               \
    X(PROD, "prod")                                                             \
    X(MAX, "max")                                                               \
    X(MIN, "min")                                                               \
    X(ARGMAX, "argmax")  /* out[0]: i64 index, out[1]: value (optional) */      \
    X(ARGMIN, "argmin")                                                         \
    X(WELFORD, "welford") /* out[0]: variance, out[1]: mean (either optional) */

typedef enum {
#define X(id, name) PTC_RED_##id,
    PTC_REDUCES(X)
#undef X
        PTC_RED_COUNT
} ptc_reduce;
const char *ptc_reduce_name(int r);

typedef enum { PTC_LB_INPUT, PTC_LB_TEMP, PTC_LB_OUTPUT } ptc_lbuf_kind;

typedef struct ptc_lbuf {
    int id;
    const char *name; /* "buf3" */
    ptc_dtype dtype;
    int ndim;
    ptc_dim shape[PTC_MAX_DIMS];
    ptc_dim strides[PTC_MAX_DIMS]; /* in elements; contiguous unless an input says otherwise */
    uint8_t kind;                  /* ptc_lbuf_kind */
    int input;                     /* INPUT: graph input index */
    int output;                    /* OUTPUT: first graph output it is */
    int def;                       /* writing node id, -1 for inputs */
    bool removed;                  /* inlined away by the scheduler */
    /* Layout planning (layout.c) may store a temporary in another dimension
     * order: shape and strides above are then the stored (physical) order,
     * and stored dim d holds the graph's logical dim perm[d]. Kernels see only
     * the stored order; externs and the runtime see the logical tensor. */
    bool permuted;
    uint8_t perm[PTC_MAX_DIMS];
    /* Row padding (pad.c) may store a temporary's rows further apart than
     * its last dim is long: the strides above are then static, 1 for the
     * last dim and whole padded rows for the others. */
    bool padded;
    /* A zero-padded copy (pad.c): its elements from zero_from on along dim
     * zero_dim are zeros, which a matmul may read as extra K; 0: none. */
    int64_t zero_from;
    int zero_dim;
    int nprov;
    const char **prov;
} ptc_lbuf;

/* An extern's tensor argument: a buffer seen through an affine view. */
typedef struct ptc_lview {
    int buf; /* -1: an absent optional */
    int ndim;
    ptc_dim sizes[PTC_MAX_DIMS];
    ptc_dim strides[PTC_MAX_DIMS]; /* in elements of the buffer */
    ptc_dim offset;
} ptc_lview;

/* Externs ptc runs itself (always C), besides the framework externs. */
typedef enum { PTC_XK_HOST = 0, PTC_XK_SCAN, PTC_XK_SCATTER } ptc_xkind;

typedef enum { PTC_LN_POINTWISE, PTC_LN_REDUCTION, PTC_LN_EXTERN } ptc_lnode_kind;

typedef struct ptc_lnode {
    int id;
    uint8_t kind;       /* ptc_lnode_kind */
    const char *label;  /* short op names for kernel names: "exp_sum" */
    int ndim;           /* iteration ranges: variables 0..ndim-1 */
    ptc_dim ranges[PTC_MAX_DIMS];
    int nred;           /* reduction ranges: variables ndim..ndim+nred-1 */
    ptc_dim red[PTC_MAX_DIMS];
    uint8_t reduce;     /* ptc_reduce */
    /* ARGMAX / ARGMIN: a later NaN wins over an earlier one, as in torch's
     * max_pool2d (`val > max || isnan(val)`); else the first NaN wins, as in
     * torch.argmax. Ties between numbers keep the first index either way. */
    bool nan_last;
    double correction;  /* WELFORD: variance divisor is n - correction */
    ptc_lbody body;
    int value;          /* the body entry computed per point */
    /* The prims ops this node computes, its own and those inlined into it
     * (bit per ptc_op): PTC_INJECT's lower/codegen/runtime stages ask about
     * them. */
    uint64_t ops[(PTC_OP_COUNT + 63) / 64];
    int out[2];         /* buffers written (-1: none) */
    /* EXTERN */
    const ptc_node *xnode; /* the op and its non-tensor args (schema order) */
    uint8_t xkind;         /* ptc_xkind */
    int nxin;
    ptc_lview *xin;        /* tensor args in schema order */
    int nprov;
    const char **prov;
} ptc_lnode;

typedef struct ptc_lprog {
    ptc_arena *arena;
    int nbufs, cap_bufs;
    ptc_lbuf **bufs;
    int nnodes, cap_nodes;
    ptc_lnode **nodes; /* in execution order; removed nodes are NULL */
    int ninputs;
    int noutputs;
    int *outputs; /* buffer per graph output */
    /* Printable view records (views are folded into loads). */
    int nviews, cap_views;
    const char **views;
} ptc_lprog;

ptc_lprog *ptc_lprog_new(ptc_arena *a);
ptc_lbuf *ptc_lprog_add_buf(ptc_lprog *p, ptc_dtype dt, int ndim, const ptc_dim *shape,
                            int kind);
ptc_lnode *ptc_lprog_add_node(ptc_lprog *p, int kind);
static inline void ptc_lnode_add_op(ptc_lnode *n, ptc_op op)
{
    n->ops[op / 64] |= 1ull << (op % 64);
}
static inline bool ptc_lnode_has_op(const ptc_lnode *n, ptc_op op)
{
    return n->ops[op / 64] >> (op % 64) & 1;
}
/* A new node at position `at` of the execution order: the nodes from `at`
 * on move one place later (their ids and their buffers' defs follow). */
ptc_lnode *ptc_lprog_insert_node(ptc_lprog *p, int at, int kind);
/* A pointwise node at position `at` (ptc_lprog_insert_node) writing
 * dst[i] = src[i] over dst's shape (the two of one dtype and rank), and 0
 * where dst is longer than src in a static dim, named
 * `label`, with the ops and provenance of `like`; dst->def is set to it. */
ptc_lnode *ptc_lprog_insert_copy(ptc_lprog *p, int at, int src, int dst, const ptc_lnode *like,
                                 const char *label);
/* Pointwise node n runs over ext, its ranges grown in some static dims,
 * and computes 0 past its old ranges, where its loads stepping a grown dim
 * are masked off (they read nothing they did not read before). */
void ptc_lnode_zero_past(ptc_lprog *p, ptc_lnode *n, const ptc_dim *ext);
/* Sets a node's provenance (copied). */
void ptc_lnode_set_prov(ptc_lprog *p, ptc_lnode *n, int nprov, const char *const *prov);
/* Nodes reading buffer `buf` (loads or extern inputs), counted per node. */
int ptc_lprog_readers(const ptc_lprog *p, int buf, int *nodes, int max);
bool ptc_lnode_reads(const ptc_lnode *n, int buf);
/* Raises last[b] to step_of[r] for every node r that reads buffer b (loads
 * or extern inputs): with last[] set to where each buffer's life begins, the
 * step of its last read. One pass over the bodies, not one per buffer: the
 * scheduler asks it for every horizontal join it weighs. */
void ptc_lprog_last_reads(const ptc_lprog *p, const int *step_of, int *last);

/* Structural checks: operands before uses, dtypes of operands, load indices
 * matching buffer ranks, variables within the node's ranges, every buffer
 * written exactly once before it is read. */
int ptc_lprog_verify(const ptc_lprog *p, ptc_error *err);
/* The `loops` stage text. */
void ptc_lprog_print(ptc_buf *b, const ptc_lprog *p);
/* bufnames: indexed by buffer id (NULL: "buf<id>"); seeds printed less
 * seed_base (a kernel's key: ptc_kernel.seed_base; else 0). */
void ptc_lbody_print(ptc_buf *b, const ptc_lbody *body, const char *const *names, int nnames,
                     const char *const *bufnames, const char *indent, int64_t seed_base);

/* Layout planning: temporaries of 2-d convolution chains are stored
 * channels-last (a permuted buffer: NHWC storage of an NCHW value), so the
 * convolutions read and write channels-last tensors and the pointwise,
 * normalisation and pooling kernels between them iterate in that order.
 * Graph inputs and outputs keep their layout; a convolution reading a
 * contiguous input, or a contiguous weight that is a graph input, gets a
 * converted copy (a weight's not with weights_kept: the caller hands
 * convolutions kept channels-last weights). Run before scheduling; returns
 * the number of nodes made to write channels-last: none with contiguous (a
 * CPU training program's choice) or PTC_LAYOUT=contiguous; PTC_LAYOUT=
 * channels_last plans even where contiguous is asked. */
int ptc_layout_plan(ptc_lprog *p, bool contiguous, bool weights_kept);
/* The logical sizes and element strides of buffer b (its own when it is not
 * permuted), given its stored sizes: contiguous in the stored order, or the
 * padded rows of a padded buffer. */
void ptc_lbuf_logical(const ptc_lbuf *b, const int64_t *stored_sizes, int64_t *sizes,
                      int64_t *strides);
/* The elements buffer b's memory holds, given its stored sizes: their
 * product, or whole padded rows for a padded buffer. */
int64_t ptc_lbuf_elems(const ptc_lbuf *b, const int64_t *stored_sizes);

/* Aligned matmul operands (pad.c): every matrix an mm, addmm or bmm extern
 * reads or writes gets a leading dimension that is a multiple of 16 bytes, as
 * Inductor's pad_mm does for cuBLAS: temporaries are stored with padded
 * rows, graph inputs and outputs are copied to or from padded temporaries
 * where the matmul is large enough to pay for the copy. Run after
 * inlining, before scheduling; `on` is the target's default (CUDA),
 * PTC_PAD_MM=0/1 overrides it. Returns the number of matrices aligned. */
int ptc_pad_plan(ptc_lprog *p, bool on);

/* Lowers a verified prims graph. Fails with Unsupported naming the op for what
 * cannot be lowered. */
ptc_lprog *ptc_lower(ptc_arena *a, const ptc_graph *prims, ptc_error *err);

/* ------------------------------------------------------------------------------
 * Kernels: the scheduler's output
 *
 * A kernel is one loop nest over `outer` ranges (the first `npar` of them,
 * flattened, are split across threads) running its groups in order inside each
 * outer iteration. A group runs its members in one inner loop nest: pointwise
 * members over `inner` ranges, or reduction members over `inner` kept ranges
 * and then `red` reduction ranges. Member bodies are rewritten with flat
 * element offsets over kernel variables: outer variables 0..nouter-1, then the
 * group's inner variables, then its reduction variables.
 * ---------------------------------------------------------------------------- */

typedef struct ptc_kmember {
    int node;          /* loop node id */
    ptc_lbody body;    /* loads hold flat offsets */
    int value;
    const ptc_ix *store[2]; /* flat offset written per output (NULL: none) */
} ptc_kmember;

typedef struct ptc_kgroup {
    bool reduction;
    int ninner;
    ptc_dim inner[PTC_MAX_DIMS];
    int nred;
    ptc_dim red[PTC_MAX_DIMS];
    int nmembers;
    ptc_kmember *members;
} ptc_kgroup;

typedef struct ptc_kernel {
    int id;
    const char *name;
    int nouter;
    ptc_dim outer[PTC_MAX_DIMS];
    int npar;
    int ngroups;
    ptc_kgroup *groups;
    int nargs;
    int *args;          /* buffers the kernel touches, in argument order */
    int nlocal;
    int *locals;        /* buffers private to one outer iteration (stack) */
    int *local_from;    /* per local: its first dim private to one outer iteration; the
                           dims before it are outer loops (more than nouter once the
                           outer loops collapsed) */
    int nparams;
    ptc_dim *params;    /* symbolic sizes the code reads at run time */
    int64_t seed_base;  /* the smallest seed of its random draws (0: none): its code
                           and key take seeds relative to it (ops.h's ptc_rng_shift) */
    bool draws;         /* it has random draws (seed_base is their smallest seed) */
    int nprov;
    const char **prov;
} ptc_kernel;

/* Elements of kernel k's local i that one outer iteration owns. */
int64_t ptc_kernel_local_elems(const ptc_lprog *p, const ptc_kernel *k, int i);
/* d's value with each of its symbols taken to be `scale` (3072*s0*s1 at 64:
 * 12.6M), for decisions that need a number; `scale` if it overflows. */
double ptc_dim_hint_at(ptc_dim d, double scale);

typedef enum { PTC_STEP_KERNEL, PTC_STEP_EXTERN } ptc_step_kind;
typedef struct ptc_step {
    uint8_t kind;
    int index; /* kernel id or loop node id */
} ptc_step;

/* The memory plan: every temp buffer that is not kernel-local gets an arena
 * offset; lives [first, last] steps. Symbolic sizes are planned at run time. */
typedef struct ptc_mplan {
    int nbufs;          /* == program nbufs */
    bool *in_arena;
    int *first, *last;  /* live steps */
    int ninputs;
    int *input_last;    /* per graph input: the last step that reads it (-1:
                         * none), after which a run may let it go */
    int *input_order;   /* the inputs by input_last, earliest first */
    int noutputs;
    int *output_first;  /* per graph output: the first step that writes it (-1: none),
                         * before which a run need not allocate it */
    int *output_order;  /* the outputs by output_first, earliest first */
    bool is_static;     /* sizes known: offsets below are final */
    int64_t *offset;    /* bytes */
    int64_t *nbytes;
    int64_t arena_bytes;
} ptc_mplan;

/* A horizontal combination (combo.c): steps first..first+n-1, kernels that
 * touch no buffer another of them writes, run together. */
typedef struct ptc_combo {
    int first, n;
    int64_t seed_base; /* the smallest seed of its members' draws (0: none): its CUDA
                          code takes seeds relative to it, so that combinations that
                          differ only by their seeds (a model's layers) share one */
} ptc_combo;

typedef struct ptc_schedule {
    const ptc_lprog *prog;
    int nkernels;
    ptc_kernel **kernels;
    int nsteps;
    ptc_step *steps;
    int ncombos; /* ptc_schedule_combine's, in step order; 0 until it ran */
    ptc_combo *combos;
    bool combos_launch; /* each combination is one CUDA launch (else one parallel region) */
    bool combos_arena;  /* members may touch arena temporaries (the plan merged for them) */
    ptc_mplan plan;
    bool *is_local; /* per buffer */
    /* decisions, for the kernels stage and tests */
    int ninlined, nrefused_recompute, nrefused_memory;
} ptc_schedule;

/* The most body entries one kernel holds: inlining and the scheduler's joins
 * stop there. LLVM's register allocation and instruction scheduling grow
 * faster than the function they compile (a chain of 2,000 pointwise ops in
 * one kernel took 7.8 ms of LLVM per op, against 1.1 ms up to 250 ops), so a
 * long chain is compiled as several kernels of bounded size, each reading
 * the previous one's output. */
#define PTC_KERNEL_MAX_ENTRIES 256

typedef struct ptc_sched_opts {
    int recompute_limit;   /* max extra cost per element when inlining (default 8) */
    int nthreads;          /* for choosing npar (default: omp max threads) */
    int team_threads;      /* threads that may share one outer iteration (a CUDA
                              block's 1024; 0 or 1: one thread, the CPU) */
    bool contiguous_layouts; /* no channels-last planning (ptc_layout_plan) */
    bool weights_kept;       /* the runtime hands convolutions channels-last
                                copies of weight inputs: none converted */
    bool pad_matmuls;        /* aligned matmul operands by default (ptc_pad_plan) */
} ptc_sched_opts;

/* Fuses a loop program (modified: inlined producers are removed) into kernels
 * and plans memory. */
ptc_schedule *ptc_schedule_build(ptc_arena *a, ptc_lprog *p, const ptc_sched_opts *opts,
                                 ptc_error *err);
/* Output `output` (a graph output index) written into the memory of graph
 * input `input` (its new value, which the caller would otherwise copy into
 * it): where the kernel writing it is the last reader of the input and
 * reads each element before writing it, the output's buffer is merged into
 * the input's (inplace.c) and true returned; false leaves s as it was. */
bool ptc_schedule_write_in_place(ptc_schedule *s, int output, int input);
/* The most kernels one horizontal combination holds. */
#define PTC_COMBO_MAX_KERNELS 64

/* A CUDA launch's parameters: 4 KB (CUDA's limit before 12.1, and on
 * every device), 8 bytes a slot. */
#define PTC_LAUNCH_PARAM_SLOTS 512

/* What a backend's launch asks of a combination's members (CUDA): block
 * returns the threads per block kernel k must run with (0: any, a thread
 * per element; -1: it cannot share a launch). */
typedef struct ptc_combo_launch {
    int (*block)(void *ctx, const ptc_schedule *s, const ptc_kernel *k);
    void *ctx;
} ptc_combo_launch;

/* Groups runs of consecutive independent kernels into combinations (combo.c);
 * call after the in-place writes are settled. The CPU runtime (launch NULL)
 * runs one as a parallel region. With a launch (CUDA) it is one launch: its
 * members are kernels over static sizes of one block size (or any), and
 * their buffers, the rng offset and cell and a block offset per member fit
 * PTC_LAUNCH_PARAM_SLOTS. With arena set, members may touch the memory
 * plan's arena temporaries, and the plan counts each combination's steps
 * as one (else a kernel that touches one stays alone). Returns the number
 * of combinations. */
int ptc_schedule_combine(ptc_schedule *s, const ptc_combo_launch *launch, bool arena);
/* The buffers combination c's launch takes, each once, in order of first
 * use by its members (kernel args order); returns their count (at most the
 * members' args together). */
int ptc_combo_args(const ptc_schedule *s, const ptc_combo *c, int *args);
/* The combination that starts at step `step`, or NULL. */
const ptc_combo *ptc_schedule_combo_at(const ptc_schedule *s, int step);
int ptc_combo_verify(const ptc_schedule *s, ptc_error *err);
/* "combo <i>: <n> kernels, one parallel region: <kernel ids>" (kernels.txt;
 * "one launch" on CUDA). */
void ptc_combo_print(ptc_buf *b, const ptc_schedule *s, const ptc_combo *c);
/* Checks kernels (variables in range, members legal in their group, every
 * read after its write) and the memory plan. */
int ptc_schedule_verify(const ptc_schedule *s, ptc_error *err);
void ptc_schedule_print(ptc_buf *b, const ptc_schedule *s);
/* One kernel as text that determines its code (no names): the cache key. */
void ptc_kernel_print_key(ptc_buf *b, const ptc_schedule *s, const ptc_kernel *k);
void ptc_kernel_print(ptc_buf *b, const ptc_schedule *s, const ptc_kernel *k);
/* A kernel's generated code (LLVM IR, PTX) headed by the line naming it and
 * the captured nodes it came from, "; ptc kernel <n> <name>  <- %a, %b"
 * (malloc'd; the trace's kernel_<n> files and the output_code log). */
char *ptc_kernel_code_text(const ptc_kernel *k, const char *code);
/* Does a member body hold a CHECK (the kernel then reports to a status record)? */
bool ptc_kernel_has_checks(const ptc_kernel *k);
/* Only pointwise groups without inner ranges: one element per iteration. */
bool ptc_kernel_is_flat(const ptc_kernel *k);

/* Plans the arena for concrete sizes (bytes per buffer; 0 = not in arena). */
int64_t ptc_mplan_place(int nbufs, const int64_t *nbytes, const int *first, const int *last,
                        const bool *in_arena, int64_t *offset);
/* Segments (memplan.c): the arena split by phase of the run, each segment
 * allocated at its first buffer's first step and freed after its last
 * buffer's last step, where that lowers the peak of outside[t] (bytes live
 * outside the arena at step t, nsteps of them) plus the segments held.
 * Fills seg_of (per arena buffer), offset (within its segment) and
 * seg_bytes[PTC_MPLAN_MAX_SEGMENTS]; returns the number of segments (1: one
 * arena, placed as ptc_mplan_place does). */
enum { PTC_MPLAN_MAX_SEGMENTS = 8 };
int ptc_mplan_segment(int nbufs, const int64_t *nbytes, const int *first, const int *last,
                      const bool *in_arena, int nsteps, const int64_t *outside, int *seg_of,
                      int64_t *offset, int64_t *seg_bytes);
/* Places each segment's buffers as ptc_mplan_place does, offsets within it. */
void ptc_mplan_place_segments(int nbufs, const int64_t *nbytes, const int *first, const int *last,
                              const bool *in_arena, int nsegs, const int *seg_of, int64_t *offset,
                              int64_t *seg_bytes);
/* The steps each segment is held: its buffers' first first and last last. */
void ptc_mplan_segment_spans(int nbufs, const int *first, const int *last, const bool *in_arena,
                             int nsegs, const int *seg_of, int *seg_first, int *seg_last);
/* No two arena buffers live at the same step overlap. */
int ptc_mplan_check(int nbufs, const int64_t *nbytes, const int *first, const int *last,
                    const bool *in_arena, const int64_t *offset, int64_t arena_bytes,
                    ptc_error *err);

/* PTC_INJECT (ir.h) at a later stage: asks `stage` about every op a kernel's
 * loop nodes compute, or one loop node's (an extern); an error wins over a
 * wrong result (faults.c). */
ptc_inject_kind ptc_kernel_inject(const ptc_schedule *s, const ptc_kernel *k, const char *stage,
                                  ptc_error *err);
ptc_inject_kind ptc_lnode_inject(const ptc_lnode *n, const char *stage, ptc_error *err);

#endif /* PTC_LOWER_H */
