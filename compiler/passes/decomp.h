/* Internal to compiler/passes: the decomposition context and the prims
 * builders every decomposition uses (the rewriting passes build with them
 * too), and the walk helpers the rewriting passes share (simplify.c). */
#ifndef PTC_DECOMP_H
#define PTC_DECOMP_H

#include "passes/passes.h"

typedef struct dctx {
    ptc_graph *g;            /* the prims graph being built */
    const ptc_graph *src_g;  /* the graph being decomposed */
    ptc_value **map;         /* src value id -> prims value */
    const ptc_node *src;     /* the node being decomposed */
    int nprov;
    const char **prov;       /* provenance given to every node emitted for src */
    ptc_srcloc loc;          /* src's location, copied into g's arena */
    const char *module_path;
    ptc_error *err;
    bool failed;
    /* A composition (composite.c) builds through its caller's hooks, and
       has no source node, map or provenance. */
    const ptc_composer_hooks *hooks;
    void *hooks_ctx;
    /* Decomposing for autograd: constants of a derivative (softmax's max
       shift) are marked with prims.stop_gradient (dp_stop_gradient). */
    bool for_autograd;
} dctx;

/* A decomposition writes src->nout values into outs. Ops of stage BOTH are
 * copied unless they have one (which may still copy them: dp_copy). */
typedef int (*ptc_decomp_fn)(dctx *d, const ptc_node *n, ptc_value **outs);

/* Fails the current decomposition (Unsupported unless cls says otherwise). */
int dp_fail(dctx *d, ptc_errclass cls, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Builders: each returns NULL (with d->failed set) on error and passes NULL
 * inputs through, so a chain of them needs one check at the end. */
ptc_node *dp_buildn(dctx *d, ptc_op op, const ptc_arg *args, int nargs);
ptc_value *dp_build(dctx *d, ptc_op op, const ptc_arg *args, int nargs);
ptc_value *dp_unary(dctx *d, ptc_op op, ptc_value *x);
ptc_value *dp_binary(dctx *d, ptc_op op, ptc_value *a, ptc_value *b); /* same shape */
ptc_value *dp_bin(dctx *d, ptc_op op, ptc_value *a, ptc_value *b);    /* broadcasting */
ptc_value *dp_convert(dctx *d, ptc_value *x, ptc_dtype dt);
/* x, through which no gradient flows (when decomposing for autograd; else
 * x itself): a shift a formula subtracts for range only, as softmax's max. */
ptc_value *dp_stop_gradient(dctx *d, ptc_value *x);
ptc_value *dp_broadcast(dctx *d, ptc_value *x, const ptc_dim *shape, int n);
ptc_value *dp_broadcast_dims(dctx *d, ptc_value *x, const ptc_dim *shape, int n,
                             const int *bdims);
ptc_value *dp_full_arg(dctx *d, const ptc_dim *shape, int n, const ptc_arg *value, ptc_dtype dt);
ptc_value *dp_full(dctx *d, const ptc_dim *shape, int n, double v, ptc_dtype dt);
ptc_value *dp_reshape(dctx *d, ptc_value *x, const ptc_dim *shape, int n);
ptc_value *dp_permute(dctx *d, ptc_value *x, const int *perm);
ptc_value *dp_slice(dctx *d, ptc_value *x, int dim, ptc_dim start, ptc_dim limit, int64_t step);
ptc_value *dp_reduce(dctx *d, ptc_op op, ptc_value *x, const bool *mask);
/* Reinserts reduced dims as size 1 (keepdim). */
ptc_value *dp_keepdim(dctx *d, ptc_value *r, const ptc_value *x, const bool *mask);
ptc_value *dp_where(dctx *d, ptc_value *c, ptc_value *a, ptc_value *b);
ptc_value *dp_truth(dctx *d, ptc_value *x);
ptc_value *dp_iota(dctx *d, ptc_dim n, int64_t start, int64_t step, ptc_dtype dt);
/* softmax (log: log_softmax) of x over dim, in x's dtype; with masked_rows a
 * row of -inf gives zeros (attention's fully masked rows, as torch's math
 * path), where plain softmax gives nan. */
ptc_value *dp_softmax(dctx *d, ptc_value *x, int dim, bool log, bool masked_rows);
/* Dropout of x with probability p, drawing prims.rand with seed. */
ptc_value *dp_dropout(dctx *d, ptc_value *x, double p, ptc_dim seed);
/* n copied as it is (prims and externs). */
int dp_copy(dctx *d, const ptc_node *n, ptc_value **outs);
/* n's arguments with its values mapped into the new graph (arena memory), to
 * change before dp_build_outs builds n's op from them into outs. */
ptc_arg *dp_mapped_args(dctx *d, const ptc_node *n);
int dp_build_outs(dctx *d, const ptc_node *n, const ptc_arg *args, ptc_value **outs);

/* Helpers over src args. */
ptc_value *dp_in(dctx *d, const ptc_node *n, const char *param); /* mapped tensor or NULL */
const ptc_arg *dp_arg(const ptc_node *n, const char *param);
ptc_dtype dp_out_dtype(const ptc_node *n, int i);
ptc_dtype dp_compute(ptc_dtype dt); /* f16, bf16 compute in f32 */
/* A Tensor|Scalar operand converted to dt and broadcast to shape. */
ptc_value *dp_operand(dctx *d, const ptc_arg *a, ptc_dtype dt, const ptc_dim *shape, int n);
/* Normalised dims of an int[]? / int? dim arg: mask of reduced dims (all when
 * absent or empty). */
int dp_dim_mask(dctx *d, const ptc_arg *a, int ndim, bool *mask);
int dp_wrap(dctx *d, ptc_dim dim, int ndim, int *out);
double dp_scalar_f(const ptc_arg *a);

/* The per-family tables (decomp_*.c): fill fns[op] for their ops. */
void ptc_decomp_pointwise(ptc_decomp_fn *fns);
void ptc_decomp_reduce(ptc_decomp_fn *fns);
void ptc_decomp_shape(ptc_decomp_fn *fns);
void ptc_decomp_linalg(ptc_decomp_fn *fns);

/* ---- rewriting walks (simplify.c) ----------------------------------------------------------
 * A walk visits a graph's nodes in order, rewriting each one's arguments
 * through a replacement map (value id -> value, NULL: kept), so a replaced
 * value's users see its replacement at once; the replaced nodes are left
 * without users for DCE. */
void pass_remap_args(ptc_node *n, ptc_value **map);
void pass_remap_outputs(ptc_graph *g, ptc_value **map);
/* A walk's new node order: the nodes built while a node was visited (from
 * index `before` of g->nodes on) go right before it, so that they come
 * before its users; take installs the order in g. */
typedef struct pass_order {
    ptc_node **nodes;
    int n, cap;
} pass_order;
void pass_place_with_built(pass_order *o, const ptc_graph *g, int before, ptc_node *n);
void pass_take_order(ptc_graph *g, pass_order *o);

#endif /* PTC_DECOMP_H */
