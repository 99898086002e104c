/* ptc ops: what each op of ops.def means. Owns shape and dtype inference (meta
 * functions, with PyTorch's broadcasting and type promotion), the graph builder
 * that uses them, the reference kernels (plain strided C loops: the oracle for
 * every backend) and the reference interpreter that runs a whole graph.
 */
#ifndef PTC_OPS_H
#define PTC_OPS_H

#include "ir/ir.h"

#include <math.h>

/* Op flags (the last column of ops.def). */
#define PTC_F_POINTWISE 0x01u /* output element i depends on input elements i */
#define PTC_F_REDUCTION 0x02u /* reduces or scans along dims */
#define PTC_F_VIEW 0x04u      /* shape/layout only: no arithmetic */
#define PTC_F_RANDOM 0x08u    /* uses the counter-based RNG (seed attr) */
#define PTC_F_EXTERN 0x10u    /* run by the framework / a library at loop level */
#define PTC_F_CREATION 0x20u  /* no tensor inputs */

unsigned ptc_op_flags(ptc_op op);

/* ------------------------------------------------------------------------------
 * Meta: shape and dtype inference
 * ---------------------------------------------------------------------------- */

/* Decides size relations that a meta function cannot decide structurally
 * (s1 against 2*s0, s0*s1 against a weight's 16, 6*s0 split in fours). Only
 * capture has one: it knows each symbol's value in the call being traced, so
 * it answers from those values, keeps the answer as a guard, and rewrites the
 * graph so the relation holds structurally from then on (s1 becomes 2*s0
 * everywhere); ptc_build then infers the node's types again over the rewritten
 * arguments. */
typedef struct ptc_shape_env ptc_shape_env;
struct ptc_shape_env {
    /* x == y? 1: it holds, guarded, graph rewritten; 0: it does not (or
     * cannot be made structural); `what` names the op for messages. */
    int (*same)(ptc_shape_env *env, ptc_dim x, ptc_dim y, const char *what);
    /* k divides x (k > 1)? 1: it does, guarded, and x's symbols rewritten so
     * that x // k is exact structurally; 0: it does not. */
    int (*divides)(ptc_shape_env *env, ptc_dim x, int64_t k, const char *what);
    /* d >= 0? 1: yes, 0: no (either answer guarded); -1: cannot tell. */
    int (*nonneg)(ptc_shape_env *env, ptc_dim d, const char *what);
    /* d under the rewrites made so far. */
    ptc_dim (*rewrite)(ptc_shape_env *env, ptc_arena *a, ptc_dim d);
    int rewrites; /* bumped by each rewrite of the graph */
};

/* State handed to a meta function. Args are in schema order with defaults
 * filled and int[N] normalised. The function appends outputs with
 * ptc_meta_add_output and reports invalid arguments with ptc_meta_fail. */
typedef struct ptc_meta {
    ptc_arena *arena; /* for symbolic dims of the outputs */
    ptc_op op;
    const ptc_arg *args;
    int nargs;
    int nout;
    ptc_ttype *out;
    int cap;
    ptc_error *err;
    ptc_shape_env *env; /* NULL: relations are decided structurally only */
} ptc_meta;

typedef int (*ptc_meta_fn)(ptc_meta *m);
/* A zeroed, contiguous output on the tensor inputs' device (cpu when none). */
ptc_ttype *ptc_meta_add_output(ptc_meta *m);
/* Fails with "op: message" (MetaError, stage "meta"); returns -1. */
int ptc_meta_fail(ptc_meta *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Infers output types of op applied to args (full, schema order). On success
 * *types is an arena array of *nout types. */
int ptc_meta_infer(ptc_arena *a, ptc_op op, const ptc_arg *args, int nargs, ptc_ttype **types,
                   int *nout, ptc_error *err);

/* Whether output out of node n was detached while captured (x.detach(),
 * torch.tensor(x)): it is marked as needing no gradient although meta's rule
 * gives it one. Gradients must not flow through it. */
bool ptc_op_output_detached(const ptc_node *n, int out);

/* torch.result_type over the tensor/scalar args given (NONE args skipped):
 * dimensioned tensors > 0-dim tensors > Python numbers, by category
 * (bool < int < float). */
ptc_dtype ptc_result_type(const ptc_arg *const *args, int n);
/* Broadcasts two shapes (numpy rules; symbolic dims must match exactly or be 1). */
int ptc_broadcast_shapes(ptc_arena *a, const ptc_dim *x, int nx, const ptc_dim *y, int ny,
                         ptc_dim *out, int *nout, ptc_error *err);
/* Wraps a possibly negative dim index into [0, ndim); -1 if out of range. */
int ptc_wrap_dim(int64_t dim, int ndim);
/* v rounded to the precision of float dtype dt, as a tensor of dt holds it
 * (f16 and bf16 through f32, as torch's casts; f64: v). */
double ptc_dtype_round(double v, ptc_dtype dt);

/* ------------------------------------------------------------------------------
 * Building graphs
 * ---------------------------------------------------------------------------- */

/* Appends op(args) to g: checks the args against the schema, normalises them,
 * infers output types and creates the node (outputs auto-named). nargs may be
 * shorter than the schema: missing trailing args take their defaults. On an
 * error nothing is added. */
ptc_node *ptc_build(ptc_graph *g, ptc_op op, const ptc_arg *args, int nargs, ptc_error *err);
/* The single output of ptc_build (asserts the op has exactly one). */
ptc_value *ptc_build1(ptc_graph *g, ptc_op op, const ptc_arg *args, int nargs, ptc_error *err);

/* Structural verification (ptc_ir_verify) plus: every node's printed output
 * types equal what its meta function infers. Messages name the node. */
int ptc_ops_verify(const ptc_graph *g, int stage, ptc_error *err);

/* ------------------------------------------------------------------------------
 * Reference kernels and the interpreter
 * ---------------------------------------------------------------------------- */

typedef struct ptc_kctx {
    const ptc_node *node;
    const ptc_tensor *env;        /* tensors by value id (inputs of this node are set) */
    ptc_tensor *out;              /* node->nout outputs, allocated contiguous, zeroed */
    const ptc_bindings *bindings; /* symbol values of this run */
    uint64_t rng_offset;
    ptc_error *err;
} ptc_kctx;

typedef int (*ptc_ref_fn)(ptc_kctx *k);
/* The tensor of a VALUE arg (NULL when the arg is NONE). */
const ptc_tensor *ptc_k_tensor(const ptc_kctx *k, int argi);
/* An int arg evaluated under the run's bindings. */
int64_t ptc_k_int(const ptc_kctx *k, int argi);
/* A scalar arg (INT/FLOAT/BOOL) as double. */
double ptc_k_scalar(const ptc_kctx *k, int argi);
/* The stable order of n sort keys, fkeys (floating) or else ikeys, as
 * torch.sort(stable=True) gives it: order[i] is the input position of the
 * i-th smallest (largest when descending), NaN above every number; ties keep
 * their input order. -1 when out of memory. The reference kernel and the C
 * extern (ptc-run) sort with it. */
int ptc_sort_order(const double *fkeys, const int64_t *ikeys, int64_t n, bool descending,
                   int64_t *order);
/* Whether element x takes over a running cummax (max) or cummin at cur:
 * NaN always, then only NaN; ties take over (the later index). The
 * reference kernel and the C extern scan with it. */
bool ptc_cum_extreme_takes(double x, double cur, bool max);
/* One element of the binary pointwise prim `op` as the reference computes it
 * (its pointwise.def formula) for operands a, b of dtype dt: float dtypes in
 * fa, fb and the result in *fr (rounded to dt), integer and bool dtypes in ia,
 * ib and *ir (wrapped to dt's width). Integer division by zero is the
 * caller's to avoid (passes/simplify.c folds constants with it). */
void ptc_ref_binary_scalar(ptc_op op, ptc_dtype dt, double fa, double fb, int64_t ia, int64_t ib,
                           double *fr, int64_t *ir);

typedef struct ptc_run_opts {
    uint64_t rng_offset; /* mixed into every random op's seed */
    /* Called after each node with its output tensors; non-zero stops the run
     * with an error. */
    int (*on_node)(void *ctx, const ptc_node *n, const ptc_tensor *outs);
    void *ctx;
} ptc_run_opts;

/* Runs g on inputs (any strides; checked against the input types, binding
 * symbols). outputs[g->noutputs] receive new references. opts may be NULL. */
int ptc_interp_run(const ptc_graph *g, const ptc_tensor *inputs, int ninputs,
                   ptc_tensor *outputs, const ptc_run_opts *opts, ptc_error *err);

/* Do inputs (on the cpu) fit g's input types? Binds the symbols of their sizes
 * into b; an error names the input that does not fit. */
int ptc_bind_inputs(const ptc_graph *g, const ptc_tensor *inputs, ptc_bindings *b, ptc_error *err);

/* The output tensor sizes of every node are the graph's types evaluated under
 * the bindings; this evaluates one type into sizes. */
int ptc_eval_shape(const ptc_ttype *t, const ptc_bindings *b, int64_t *sizes, ptc_error *err);

/* ------------------------------------------------------------------------------
 * Counter-based RNG shared by every backend: element idx of a random op with
 * `seed` in a run with `offset` draws ptc_rng_uniform(ptc_rng_key(seed,
 * offset), idx), idx being the row-major index in the op's output (for
 * scaled_dot_product_attention's dropout: in its (..., L, S) attention
 * weights). Normal values use Box-Muller on draws 2*idx and 2*idx+1
 * (ptc_rng_normal). Dropout keeps an element iff u < 1-p, scaling by 1/(1-p).
 * ---------------------------------------------------------------------------- */
static inline uint64_t ptc_rng_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}
#define PTC_RNG_SEED_STEP 0x9e3779b97f4a7c15ULL
static inline uint64_t ptc_rng_key(uint64_t seed, uint64_t offset)
{
    return ptc_rng_mix(seed * PTC_RNG_SEED_STEP + offset);
}
/* The offset that draws with seeds relative to base as offset does with
 * absolute ones: ptc_rng_key(seed, offset) == ptc_rng_key(seed - base,
 * ptc_rng_shift(offset, base)) (arithmetic mod 2^64). A generated kernel
 * draws relative to its smallest seed (ptc_kernel.seed_base) and its launch
 * passes the offset so shifted, so that kernels that differ only by their
 * seeds (a model's dropouts) share one code. */
static inline uint64_t ptc_rng_shift(uint64_t offset, int64_t base)
{
    return offset + (uint64_t)base * PTC_RNG_SEED_STEP;
}
/* Uniform in [0, 1) with 24 random bits (exact in f32). */
static inline float ptc_rng_uniform(uint64_t key, uint64_t idx)
{
    return (float)(ptc_rng_mix(key + idx) >> 40) * (1.0f / 16777216.0f);
}
/* Standard normal for element idx: Box-Muller in f32 on draws 2*idx and
 * 2*idx+1 (1 - u0 is in (0, 1], so the log is finite). */
static inline float ptc_rng_normal(uint64_t key, uint64_t idx)
{
    float u0 = ptc_rng_uniform(key, 2 * idx), u1 = ptc_rng_uniform(key, 2 * idx + 1);
    return sqrtf(-2.0f * logf(1.0f - u0)) * cosf(6.28318530717958648f * u1);
}


/* ------------------------------------------------------------------------------
 * Accuracy: a backend's outputs against the oracle. Used by the runtime under
 * PTC_ACCURACY=1 (each new compile's first run), by ptminify and by ptc-run.
 * ---------------------------------------------------------------------------- */

/* Default tolerances of a dtype for compiled-vs-reference comparisons (looser
 * than torch.testing's for f32: fused kernels reassociate sums):
 * f64 1e-7/1e-7, f32 1e-4/1e-5, f16 2e-3/1e-4, bf16 1.6e-2/1e-3; 0/0 for
 * integers and bools (exact). The same as ptc-run --check. */
void ptc_tolerance_default(ptc_dtype dt, double *rtol, double *atol);

/* What differs between two tensors (the worst element by |got - want| beyond
 * tolerance, or a dtype / shape difference). */
typedef struct ptc_mismatch {
    int output;            /* output index, set by callers comparing lists */
    char what[160];        /* "dtype f16 vs f32", "shape [2,3] vs [2,4]", or "" */
    int64_t nbad, numel;   /* elements out of tolerance, elements compared */
    int64_t index;         /* row-major index of the worst element */
    double got, want;      /* its values */
    double abs_err, rel_err;
    double rtol, atol;     /* the tolerances applied */
    double scale;          /* max(1, max finite |want|): atol is relative to it */
} ptc_mismatch;

/* Element-wise |got - want| <= atol * scale + rtol * |want|, scale being
 * max(1, max finite |want|) (torch.allclose with equal_nan, but with atol
 * relative to the output's magnitude, so that large reductions may differ by
 * their summation order); NaNs equal NaNs, infinities must match; integers
 * and bools compare exactly. rtol or atol < 0 takes want's dtype default.
 * dtype and sizes must agree. True when close; otherwise *m (if non-NULL)
 * describes the difference. */
bool ptc_tensor_close(const ptc_tensor *got, const ptc_tensor *want, double rtol, double atol,
                      ptc_mismatch *m);
/* "output 1: 37 of 64 elements differ, worst at [5]: got 2.5, want 1.25
 * (abs 1.25, rel 1; rtol 0.0001, atol 1e-05)". */
void ptc_mismatch_format(const ptc_mismatch *m, char *buf, size_t size);

/* PTC_ACCURACY=1 (read once). */
bool ptc_accuracy_enabled(void);
/* Runs g with the interpreter on inputs (random ops drawing with
 * rng_offset, as the backend's run did) and compares with a backend's
 * outputs (g->noutputs of them, dtype-default tolerances). On divergence
 * writes a repro folder (kind "accuracy", see ptc_repro_write in logs.h) and
 * fails with a RuntimeError (stage "accuracy") naming the output and the
 * folder. An interpreter failure is returned as is. */
int ptc_accuracy_check(const ptc_graph *g, const ptc_tensor *inputs, int ninputs,
                       const ptc_tensor *outputs, uint64_t rng_offset, const char *backend,
                       ptc_error *err);

#endif /* PTC_OPS_H */
