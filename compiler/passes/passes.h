/* ptc passes: from torch-level graphs to the closed set of prims, and the
 * clean-ups that run on prims graphs.
 *
 * Owns: decomposition (every torch-level op of ops.def written in prims, with
 * broadcasting and type promotion made explicit as broadcast_in_dim and
 * convert_element_type; ops that are already prims or externs are copied),
 * dead-code elimination, common-subexpression elimination and constant
 * folding; and the composites capture records for torch functions that have
 * no op of their own. Every prims node carries the provenance of the stage-1 node it
 * came from (ptc_node.prov), its source location and module path.
 */
#ifndef PTC_PASSES_H
#define PTC_PASSES_H

#include "ops/ops.h"

/* Decomposes a verified stage-1 (or stage-2) graph into a new prims graph
 * with its own arena. Ops without a decomposition fail with Unsupported
 * naming the op and the node. */
ptc_graph *ptc_decompose(const ptc_graph *g, ptc_error *err);
/* The same for a graph to differentiate: where a formula's derivative has a
 * constant its prims would differentiate (softmax, log_softmax and
 * logsumexp subtract the max for range only, and torch's derivatives treat
 * it as a constant), the prims mark it with prims.stop_gradient, which the
 * joint graph (compiler/autograd) drops once the backward is written. */
ptc_graph *ptc_decompose_for_autograd(const ptc_graph *g, ptc_error *err);

/* Removes nodes whose outputs nobody uses; returns how many. */
int ptc_pass_dce(ptc_graph *g);
/* Merges nodes with the same op and arguments (random draws included: they
 * are functions of their seed); returns how many were merged. */
int ptc_pass_cse(ptc_graph *g);
/* Folds constants: views and conversions of prims.full, arithmetic between
 * prims.full values, identity views and conversions; returns how many nodes
 * were replaced. */
int ptc_pass_fold(ptc_graph *g, ptc_error *err);
/* Takes factors out of the sums of nodes with ids from first_id on: a factor constant along
 * every reduced dim (a full, a broadcast onto kept dims) and negations leave
 * the sum, sum(a * c * -b) = -(sum(a * b) * c), the remaining factors
 * multiplied in value order so that sums of the same product become one under
 * CSE. Float sums only; the rounding differs as reassociation does. Returns
 * how many sums were rewritten (the old ones are left for DCE). */
int ptc_pass_factor_sums(ptc_graph *g, int first_id, ptc_error *err);
/* Folds each convolution's per-channel affine epilogue (an eval
 * BatchNorm, a frozen BatchNorm's y * scale + shift: single-use pointwise
 * steps with per-channel operands) into its weight and bias, computed in
 * float32 in the graph (fold_conv.c); returns how many were folded, -1 on
 * error. For inference graphs: the folded weight costs a pass over the
 * weight per call. */
int ptc_pass_fold_conv_affine(ptc_graph *g, ptc_error *err);
/* Hands each convolution with a bias (of its output's dtype) no bias and
 * adds the bias after it, a pointwise step the next kernel takes in: on
 * CUDA, torch adds a convolution's bias in a kernel of its own (fold_conv.c;
 * Inductor lowers it the same way). Returns how many, -1 on error. */
int ptc_pass_conv_bias_epilogue(ptc_graph *g, ptc_error *err);
/* fold, cse and dce until nothing changes. */
int ptc_simplify(ptc_graph *g, ptc_error *err);

/* ---- composites (composite.c) --------------------------------------------------------
 * Torch functions with no op of their own, written as small graphs of
 * torch-level ops for capture to record in place of the call. The caller
 * has read and checked the Python arguments; these only build, with the
 * decomposition's builders, into a graph through the caller's hooks. A
 * failed hook (which reports its own failure) makes the result NULL. */
typedef struct dctx ptc_composer;
typedef struct ptc_composer_hooks {
    /* builds one node of g (capture's adds autocast, the user's position
       and grad mode); NULL after reporting why */
    ptc_node *(*node)(void *ctx, ptc_op op, const ptc_arg *args, int nargs);
    /* a constant [n] tensor of data in dtype dt on dev */
    ptc_value *(*constant)(void *ctx, const double *data, int64_t n, ptc_dtype dt, ptc_device dev);
} ptc_composer_hooks;
/* One composition into g (allocated in g's arena); hooks outlive it. */
ptc_composer *ptc_composer_new(ptc_graph *g, const ptc_composer_hooks *hooks, void *ctx);

typedef enum { PTC_REDUCE_NONE, PTC_REDUCE_MEAN, PTC_REDUCE_SUM } ptc_reduction;
typedef enum { PTC_LOSS_MSE, PTC_LOSS_L1, PTC_LOSS_SMOOTH_L1, PTC_LOSS_HUBER } ptc_pointwise_loss;

/* torch._native_multi_head_attention's operands (static sizes, q/k/v
 * [B, N, E], E divisible by heads); bias, proj_bias and mask may be NULL. */
typedef struct ptc_mha {
    ptc_value *q, *k, *v, *qkv_weight, *qkv_bias, *proj_weight, *proj_bias;
    ptc_value *mask; /* bool; [B, S] when key_padding */
    bool key_padding, need_weights, average_weights;
    int64_t heads;
} ptc_mha;

/* Factories: eye(rows, cols), linspace(start, end, steps) (float dt). */
ptc_value *ptc_composite_eye(ptc_composer *c, int64_t rows, int64_t cols, ptc_dtype dt,
                             ptc_device dev);
ptc_value *ptc_composite_linspace(ptc_composer *c, double start, double end, int64_t steps,
                                  ptc_dtype dt, ptc_device dev);
/* Pointwise; float_dt is what an integer input is computed in. */
ptc_value *ptc_composite_hypot(ptc_composer *c, ptc_value *a, ptc_value *b);
ptc_value *ptc_composite_lerp(ptc_composer *c, ptc_value *start, ptc_value *end, ptc_value *weight);
ptc_value *ptc_composite_lerp_scalar(ptc_composer *c, ptc_value *start, ptc_value *end,
                                     double weight);
/* x + value * (t1 * t2) (div: t1 / t2); value_tensor (0-dim) replaces value. */
ptc_value *ptc_composite_addcop(ptc_composer *c, ptc_value *x, ptc_value *t1, ptc_value *t2,
                                bool div, ptc_value *value_tensor, double value);
ptc_value *ptc_composite_exp2(ptc_composer *c, ptc_value *x, ptc_dtype float_dt);
ptc_value *ptc_composite_log_base(ptc_composer *c, ptc_value *x, double base, ptc_dtype float_dt);
ptc_value *ptc_composite_xlogy(ptc_composer *c, ptc_value *x, ptc_value *y, ptc_dtype float_dt);
ptc_value *ptc_composite_sinc(ptc_composer *c, ptc_value *x, ptc_dtype float_dt);
/* x and values of one dtype (the caller checks). */
ptc_value *ptc_composite_heaviside(ptc_composer *c, ptc_value *x, ptc_value *values);
/* nansum(x, dims, keepdim), or nanmean with mean: dims normalised, distinct
 * (n 0: every dim); x floating. */
ptc_value *ptc_composite_nansum(ptc_composer *c, ptc_value *x, const int64_t *dims, int n,
                                bool keepdim, bool mean);
/* The scatters: x's dims static; dim normalised; index of x's rank (1-D for
 * the index_ forms), any integer dtype, checked against x's and src's
 * sizes by the caller (eager's errors); src of x's dtype, no smaller than
 * index (narrowed to it here). add: scatter_add, else scatter (the later of
 * two writes to a place wins). */
ptc_value *ptc_composite_scatter(ptc_composer *c, ptc_value *x, int dim, ptc_value *index,
                                 ptc_value *src, bool add);
/* value (a number, or a 0-dim tensor) spread over like's shape in dt (a
 * scatter's src). */
ptc_value *ptc_composite_spread(ptc_composer *c, ptc_value *like, ptc_arg value, ptc_dtype dt);
/* scatter_reduce with reduce "sum" or "mean" */
ptc_value *ptc_composite_scatter_reduce(ptc_composer *c, ptc_value *x, int dim, ptc_value *index,
                                        ptc_value *src, bool mean, bool include_self);
/* index_add (add; source times alpha, an int or float arg, none for 1) and
 * index_copy: source has x's shape but index's length at dim. */
ptc_value *ptc_composite_index_scatter(ptc_composer *c, ptc_value *x, int dim, ptc_value *index,
                                       ptc_value *source, bool add, ptc_arg alpha);
/* index_fill: negative indices count from the end. */
ptc_value *ptc_composite_index_fill(ptc_composer *c, ptc_value *x, int dim, ptc_value *index,
                                    ptc_arg value);
/* masked_scatter: mask bool, broadcast to x's shape; source of x's dtype. */
ptc_value *ptc_composite_masked_scatter(ptc_composer *c, ptc_value *x, ptc_value *mask,
                                        ptc_value *source);
/* F.pad in reflect (mode 0), replicate (1) or circular (2) mode: pads as
 * torch's (the last dim first), static, checked by the caller. */
ptc_value *ptc_composite_pad_indexed(ptc_composer *c, ptc_value *x, const int64_t *pads,
                                     int npads, int mode);
/* F.unfold / F.fold's geometry, (rows, columns) each: size is the image's
 * (unpadded). */
typedef struct ptc_unfold {
    int64_t kernel[2], dilation[2], padding[2], stride[2], size[2];
} ptc_unfold;
/* The blocks along dim i (0 rows, 1 columns): (size + 2 padding -
 * dilation (kernel - 1) - 1) / stride + 1. */
int64_t ptc_unfold_blocks(const ptc_unfold *u, int i);
/* unfold of x [n, c, h, w] (static): [n, c * kernel places, blocks]. */
ptc_value *ptc_composite_unfold(ptc_composer *c, ptc_value *x, const ptc_unfold *u);
/* fold of x [n, c * kernel places, blocks] (static): [n, c, h, w]. */
ptc_value *ptc_composite_fold(ptc_composer *c, ptc_value *x, const ptc_unfold *u);
/* The p-norm over dims (none: all; p > 0, inf the largest magnitude). */
ptc_value *ptc_composite_pnorm(ptc_composer *c, ptc_value *x, double p, ptc_arg dims,
                               bool keepdim);
/* pairwise_distance(x1, x2, p, eps, keepdim) */
ptc_value *ptc_composite_pairwise_distance(ptc_composer *c, ptc_value *x1, ptc_value *x2, double p,
                                           double eps, bool keepdim);
/* cdist(x1 [..., r1, m], x2 [..., r2, m], p > 0); the batch dims equal. */
ptc_value *ptc_composite_cdist(ptc_composer *c, ptc_value *x1, ptc_value *x2, double p);
/* matrix_norm over the last two dims: kind 0 "fro"; 1 / -1 the largest /
 * smallest column sum of magnitudes (rows: row sums, ord +-inf). */
ptc_value *ptc_composite_matrix_norm(ptc_composer *c, ptc_value *x, int kind, bool rows,
                                     bool keepdim);
/* block_diag of n (at most 64) 2-D blocks of one dtype and device. */
ptc_value *ptc_composite_block_diag(ptc_composer *c, ptc_value **blocks, int n);
/* triplet_margin_loss of abn: anchor, positive, negative. */
ptc_value *ptc_composite_triplet_margin(ptc_composer *c, ptc_value **abn, double margin, double p,
                                        double eps, bool swap, ptc_reduction red);
/* embedding_bag: input 2-D (bags of one size) or 1-D with offsets (the
 * first 0); per_sample weights (sum mode) of input's shape, or NULL;
 * padding_idx -1 for none, else normalised. Max of 1-D bags is not built. */
typedef enum { PTC_BAG_SUM, PTC_BAG_MEAN, PTC_BAG_MAX } ptc_bag_mode;
typedef struct ptc_embedding_bag {
    ptc_value *weight, *input, *offsets, *per_sample;
    ptc_bag_mode mode;
    int64_t padding_idx;
    bool include_last_offset;
} ptc_embedding_bag;
ptc_value *ptc_composite_embedding_bag(ptc_composer *c, const ptc_embedding_bag *e);
/* trace of a 2-D x (static sizes). */
ptc_value *ptc_composite_trace(ptc_composer *c, ptc_value *x);
/* channel_shuffle of x [n, c, ...] (static, more than 2 dims) in groups that
 * divide c. */
ptc_value *ptc_composite_channel_shuffle(ptc_composer *c, ptc_value *x, int64_t groups);
/* rot90 with k normalised to 0..3 and two distinct normalised dims. */
ptc_value *ptc_composite_rot90(ptc_composer *c, ptc_value *x, int k, const int *dims);
/* cross along dim (normalised, of size 3 in both; operands broadcast). */
ptc_value *ptc_composite_cross(ptc_composer *c, ptc_value *a, ptc_value *b, int dim);
/* addmv(input, mat, vec, beta, alpha): beta and alpha int or float args;
 * input broadcasts to mat's rows. */
ptc_value *ptc_composite_addmv(ptc_composer *c, ptc_value *input, ptc_value *mat, ptc_value *vec,
                               ptc_arg beta, ptc_arg alpha);
/* kron(a, b): nd (at most half of PTC_MAX_DIMS) the larger rank; static
 * sizes, one dtype. */
ptc_value *ptc_composite_kron(ptc_composer *c, ptc_value *a, ptc_value *b, int nd);
/* cartesian_prod of n (2 to PTC_MAX_DIMS) 1-D tensors of one dtype. */
ptc_value *ptc_composite_cartesian_prod(ptc_composer *c, ptc_value **parts, int n);
/* diag_embed(x, offset) into the last two dims (static sizes). */
ptc_value *ptc_composite_diag_embed(ptc_composer *c, ptc_value *x, int64_t offset);
/* cov(x, correction) of x 1-D or 2-D (static, observations > correction);
 * integers in float_dt. corrcoef the same with correction 1. */
ptc_value *ptc_composite_cov(ptc_composer *c, ptc_value *x, int64_t correction, ptc_dtype float_dt);
ptc_value *ptc_composite_corrcoef(ptc_composer *c, ptc_value *x, ptc_dtype float_dt);
/* kthvalue (k 0-based), median and nanmedian along dim (normalised, static
 * size n > 0): *values and *indices. */
typedef enum { PTC_ORDER_KTH, PTC_ORDER_MEDIAN, PTC_ORDER_NANMEDIAN } ptc_order_stat;
void ptc_composite_order_stat(ptc_composer *c, ptc_value *x, int dim, ptc_order_stat kind,
                              int64_t k, bool keepdim, ptc_value **values, ptc_value **indices);
/* searchsorted(seq, values) and bucketize(values, seq): seq 1-D, or of
 * values' leading dims; int64 (int32 with out_int32). */
ptc_value *ptc_composite_search_sorted(ptc_composer *c, ptc_value *seq, ptc_value *values,
                                       bool right, bool out_int32);
/* isin(elements, test), or its negation with invert. */
ptc_value *ptc_composite_isin(ptc_composer *c, ptc_value *elements, ptc_value *test, bool invert);
/* one_hot of int64 classes into `classes` columns (int64). */
ptc_value *ptc_composite_one_hot(ptc_composer *c, ptc_value *x, int64_t classes);
/* kl_div of floating input and target of one dtype; batchmean: the sum
 * over the first dim's size (a static one). */
ptc_value *ptc_composite_kl_div(ptc_composer *c, ptc_value *in, ptc_value *tg, bool log_target,
                                ptc_reduction red, bool batchmean);
/* isinf (sign 0), isposinf (1), isneginf (-1); isfinite when finite. */
ptc_value *ptc_composite_isinf(ptc_composer *c, ptc_value *x, int sign, bool finite);
ptc_value *ptc_composite_nan_to_num(ptc_composer *c, ptc_value *x, double nan, double posinf,
                                    double neginf);
ptc_value *ptc_composite_isclose(ptc_composer *c, ptc_value *a, ptc_value *b, double rtol,
                                 double atol, bool equal_nan);
ptc_value *ptc_composite_dot(ptc_composer *c, ptc_value *a, ptc_value *b);
/* Shapes: dims normalised and checked, sizes flipped static. */
ptc_value *ptc_composite_flip(ptc_composer *c, ptc_value *x, const int *dims, int ndims);
ptc_value *ptc_composite_repeat_interleave(ptc_composer *c, ptc_value *x, int64_t repeats,
                                           bool flat, int dim);
ptc_value *ptc_composite_diff(ptc_composer *c, ptc_value **parts, int nparts, int64_t n, int dim);
ptc_value *ptc_composite_stack_dims(ptc_composer *c, ptc_value **parts, int n, bool vertical);
/* pixel_shuffle(x, r), or pixel_unshuffle(x, r) with unshuffle: x's last three
 * dims static and divisible as torch checks (the caller checks). */
ptc_value *ptc_composite_pixel_shuffle(ptc_composer *c, ptc_value *x, int64_t r, bool unshuffle);
/* count_nonzero(x, dims): x != 0 summed over dims (n of them, normalised;
 * every dim with n 0), int64. */
ptc_value *ptc_composite_count_nonzero(ptc_composer *c, ptc_value *x, const int64_t *dims, int n);
/* Dim dim (static) of x resampled to outn: mode 0 nearest, 1 nearest-exact,
 * 2 linear; scale > 0 is the user's scale factor. */
ptc_value *ptc_composite_resample(ptc_composer *c, ptc_value *x, int dim, int64_t outn,
                                  double scale, int mode, bool align);
/* The attention output; *weights the attention weights when asked for. */
ptc_value *ptc_composite_mha(ptc_composer *c, const ptc_mha *m, ptc_value **weights);
/* Losses; k is smooth_l1's beta or huber's delta. */
ptc_value *ptc_composite_pointwise_loss(ptc_composer *c, ptc_pointwise_loss kind, ptc_value *in,
                                        ptc_value *tg, double k, ptc_reduction red);
ptc_value *ptc_composite_bce(ptc_composer *c, ptc_value *x, ptc_value *y, bool logits,
                             ptc_value *weight, ptc_value *pos_weight, ptc_reduction red);
ptc_value *ptc_composite_nll(ptc_composer *c, ptc_value *logp, ptc_value *target, ptc_value *weight,
                             int64_t ignore, ptc_reduction red);
/* Probability targets with a mean reduction need static sizes. */
ptc_value *ptc_composite_cross_entropy(ptc_composer *c, ptc_value *in, ptc_value *target,
                                       ptc_value *weight, int64_t ignore, ptc_reduction red);

#endif /* PTC_PASSES_H */
