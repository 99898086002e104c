/* Decompositions of the matrix products, convolutions and max pooling.
 *
 * Everything becomes mm or bmm (externs at the loop level) plus pointwise
 * scaling and bias: matmul folds leading dims of a batched left operand into
 * the rows of one mm when the right operand is a matrix (as torch does), and
 * broadcasts batch dims into one bmm otherwise; linear is mm against the
 * transposed weight plus the bias. conv1d/2d/3d and conv_transpose2d become
 * the generic convolution extern; max_pool2d is the first output of
 * max_pool2d_with_indices. Attention stays an extern (its boolean mask made
 * additive in the graph) except with dropout, which is written out in prims
 * (d_sdpa).
 */
#include "passes/decomp.h"

#include <math.h>
#include <string.h>

static ptc_value *mm(dctx *d, ptc_op op, ptc_value *a, ptc_value *b)
{
    return dp_binary(d, op, a, b);
}

static ptc_dim prod(ptc_arena *a, const ptc_dim *d, int n)
{
    ptc_dim p = ptc_dim_c(1);
    for (int i = 0; i < n; i++)
        p = ptc_dim_mul(a, p, d[i]);
    return p;
}

/* a @ b with torch.matmul's rules; `shape` is the result's. */
static ptc_value *matmul(dctx *d, ptc_value *a, ptc_value *b, const ptc_dim *shape, int nshape)
{
    if (!a || !b)
        return NULL;
    ptc_arena *ar = d->g->arena;
    int na = a->type.ndim, nb = b->type.ndim;
    if (na == 1 && nb == 1) {
        ptc_value *p = dp_binary(d, PTC_OP_PRIMS_MUL, a, b);
        bool mask[1] = {true};
        return dp_reduce(d, PTC_OP_PRIMS_SUM, p, mask);
    }
    ptc_dim k = a->type.shape[na - 1];
    if (nb <= 2) {
        /* fold a's leading dims into rows */
        ptc_dim rows = prod(ar, a->type.shape, na - 1);
        ptc_dim s2[2] = {rows, k};
        ptc_value *a2 = dp_reshape(d, a, s2, 2);
        ptc_value *b2 = b;
        if (nb == 1) {
            ptc_dim sb[2] = {k, ptc_dim_c(1)};
            b2 = dp_reshape(d, b, sb, 2);
        }
        return dp_reshape(d, mm(d, PTC_OP_MM, a2, b2), shape, nshape);
    }
    /* batched: broadcast batch dims, fold them into one */
    ptc_value *a3 = a;
    if (na == 1) {
        ptc_dim s[2] = {ptc_dim_c(1), k};
        a3 = dp_reshape(d, a, s, 2);
        na = 2;
    }
    ptc_dim n = a3->type.shape[na - 2], m = b->type.shape[nb - 1];
    ptc_dim batch[PTC_MAX_DIMS];
    int nbatch;
    ptc_error e;
    if (ptc_broadcast_shapes(ar, a3->type.shape, na - 2, b->type.shape, nb - 2, batch, &nbatch,
                             &e)) {
        dp_fail(d, PTC_ERR_META, "matmul batch dims: %s", e.msg);
        return NULL;
    }
    ptc_dim sa[PTC_MAX_DIMS], sb[PTC_MAX_DIMS];
    memcpy(sa, batch, sizeof(ptc_dim) * (size_t)nbatch);
    memcpy(sb, batch, sizeof(ptc_dim) * (size_t)nbatch);
    sa[nbatch] = n;
    sa[nbatch + 1] = k;
    sb[nbatch] = k;
    sb[nbatch + 1] = m;
    ptc_dim B = prod(ar, batch, nbatch);
    ptc_dim fa[3] = {B, n, k}, fb[3] = {B, k, m};
    ptc_value *ab = dp_reshape(d, dp_broadcast(d, a3, sa, nbatch + 2), fa, 3);
    ptc_value *bb = dp_reshape(d, dp_broadcast(d, b, sb, nbatch + 2), fb, 3);
    return dp_reshape(d, mm(d, PTC_OP_BMM, ab, bb), shape, nshape);
}

static int d_matmul(dctx *d, const ptc_node *n, ptc_value **outs)
{
    const ptc_ttype *ot = &n->outs[0]->type;
    outs[0] = matmul(d, dp_in(d, n, "self"), dp_in(d, n, "other"), ot->shape, ot->ndim);
    return 0;
}

static bool scalar_is(const ptc_arg *a, double v)
{
    return dp_scalar_f(a) == v;
}

/* beta * self + alpha * p */
static ptc_value *scaled(dctx *d, const ptc_node *n, ptc_value *p)
{
    if (!p)
        return NULL;
    const ptc_arg *alpha = dp_arg(n, "alpha"), *beta = dp_arg(n, "beta");
    const ptc_ttype *t = &p->type;
    if (!scalar_is(alpha, 1))
        p = dp_binary(d, PTC_OP_PRIMS_MUL, dp_full_arg(d, t->shape, t->ndim, alpha, t->dtype), p);
    if (scalar_is(beta, 0))
        return p;
    ptc_value *self =
        dp_broadcast(d, dp_convert(d, dp_in(d, n, "self"), t->dtype), t->shape, t->ndim);
    if (!scalar_is(beta, 1))
        self =
            dp_binary(d, PTC_OP_PRIMS_MUL, dp_full_arg(d, t->shape, t->ndim, beta, t->dtype), self);
    return dp_binary(d, PTC_OP_PRIMS_ADD, self, p);
}

static int d_addmm(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *p = n->op == PTC_OP_ADDMM
                       ? mm(d, PTC_OP_MM, dp_in(d, n, "mat1"), dp_in(d, n, "mat2"))
                       : mm(d, PTC_OP_BMM, dp_in(d, n, "batch1"), dp_in(d, n, "batch2"));
    outs[0] = scaled(d, n, p);
    return 0;
}

static int d_linear(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *x = dp_in(d, n, "input"), *w = dp_in(d, n, "weight"), *b = dp_in(d, n, "bias");
    const ptc_ttype *ot = &n->outs[0]->type;
    if (!x || !w)
        return -1;
    ptc_value *wt = w;
    if (w->type.ndim == 2) {
        int perm[2] = {1, 0};
        wt = dp_permute(d, w, perm);
    }
    ptc_value *y = matmul(d, x, wt, ot->shape, ot->ndim);
    if (b)
        y = dp_bin(d, PTC_OP_PRIMS_ADD, y, dp_convert(d, b, ot->dtype));
    outs[0] = y;
    return 0;
}

/* The attention scores' mask (is_causal, or attn_mask), applied to scores
 * of shape[n] (batch..., L, S). */
static ptc_value *attention_mask(dctx *d, const ptc_node *n, ptc_value *scores,
                                 const ptc_dim *shape, int ns)
{
    ptc_value *mask = dp_in(d, n, "attn_mask"), *keep = NULL;
    ptc_value *ninf = dp_full(d, shape, ns, -INFINITY, scores ? scores->type.dtype : PTC_F32);
    if (dp_arg(n, "is_causal")->b) {
        /* row l sees columns s <= l (top-left aligned, as torch) */
        static const int row_dim[1] = {0}, col_dim[1] = {1};
        ptc_dim ls[2] = {shape[ns - 2], shape[ns - 1]};
        ptc_value *rows = dp_broadcast_dims(d, dp_iota(d, ls[0], 0, 1, PTC_I64), ls, 2, row_dim);
        ptc_value *cols = dp_broadcast_dims(d, dp_iota(d, ls[1], 0, 1, PTC_I64), ls, 2, col_dim);
        keep = dp_broadcast(d, dp_binary(d, PTC_OP_PRIMS_GE, rows, cols), shape, ns);
    } else if (mask && mask->type.dtype == PTC_BOOL) {
        keep = dp_broadcast(d, mask, shape, ns);
    } else if (mask) {
        ptc_value *bias = dp_broadcast(d, dp_convert(d, mask, scores->type.dtype), shape, ns);
        return dp_binary(d, PTC_OP_PRIMS_ADD, scores, bias);
    }
    return keep ? dp_where(d, keep, scores, ninf) : scores;
}

/* scaled_dot_product_attention with dropout, written out as torch's math
 * path: weights softmax(scale q k^T + mask) (a fully masked row gives
 * zeros), dropped out, times v. The dropout draws prims.rand over the
 * (batch..., L, S) weights with the node's seed, the draws of the extern's
 * reference kernel (ops.h), and training differentiates these prims, so the
 * backward applies the forward's mask. Without dropout the node stays the
 * extern (torch's fused kernels). */
/* Whether torch must keep attention's boolean mask: on CUDA it runs 16-bit
 * attention on cuDNN and gives it a boolean mask's dropped places as a
 * finite value, so a fully masked row averages v there, where -inf (every
 * other kernel) gives zeros. */
static bool mask_left_to_torch(const ptc_value *query)
{
    ptc_dtype dt = query->type.dtype;
    return query->type.device.kind == PTC_DEV_CUDA && (dt == PTC_BF16 || dt == PTC_F16);
}

/* Dim i of a static permutation argument, or -1. */
static int64_t perm_dim(const ptc_arg *perm, int i)
{
    return ptc_dim_is_static(perm->is.d[i]) ? perm->is.d[i].value : -1;
}

/* q as one slice of a permute's leading dim, reshaped away (unbind(0)'s prims):
 * that permute, or NULL. */
static const ptc_node *unbound_from(const ptc_value *q)
{
    const ptc_node *r = q->def;
    if (!r || r->op != PTC_OP_PRIMS_RESHAPE || !r->args[0].v->def)
        return NULL;
    const ptc_node *sl = r->args[0].v->def;
    const ptc_ttype *t = &r->args[0].v->type;
    if (sl->op != PTC_OP_PRIMS_SLICE || t->ndim != 5 || !ptc_dim_is_static(t->shape[0]) ||
        t->shape[0].value != 1)
        return NULL;
    const ptc_value *x = sl->args[0].v;
    for (int d = 1; d < 5; d++)
        if (!ptc_dim_eq(t->shape[d], x->type.shape[d]) ||
            !ptc_dim_eq(t->shape[d], q->type.shape[d - 1]))
            return NULL;
    return x->def && x->def->op == PTC_OP_PRIMS_PERMUTE ? x->def : NULL;
}

/* The query as a permute of a tensor (directly, or one slice of one,
 * unbound): from[d] is the permute input's dim that query dim d is. */
static bool query_permuted_dims(const ptc_value *query, int64_t *from)
{
    const ptc_node *p = query->def;
    int skip = 0;
    if (p && p->op != PTC_OP_PRIMS_PERMUTE) {
        p = unbound_from(query);
        skip = 1;
    }
    if (!p)
        return false;
    const ptc_arg *perm = &p->args[1];
    if (perm->is.n != 4 + skip)
        return false;
    for (int d = 0; d < 4; d++)
        if ((from[d] = perm_dim(perm, d + skip)) < 0)
            return false;
    return true;
}

/* Whether attention's result is stored [B, L, H, E] (the extern's
 * heads_last) and given to the graph transposed back to [B, H, L, E]: when
 * the query is a [B, L, H, E] tensor transposed (Hugging Face's
 * q.view(B, L, H, E).transpose(1, 2); timm's q of
 * qkv.reshape(B, L, 3, H, E).permute(2, 0, 3, 1, 4).unbind(0)), torch's
 * attention kernels write their result with L outside H, and the model
 * transposes it back before its output projection. Stored so, the two
 * transposes fold and the projection reads the result in place; stored
 * [B, H, L, E], the result costs a copy into its buffer (torch's layout is
 * not the buffer's) and a kernel that copies it out again (GPT-2 on the
 * H100: 12 copies per call; vit_tiny on the CPU: 4.6% of a call in those
 * kernels). A result torch writes otherwise is copied into the buffer, as
 * before. */
static bool result_heads_last(const ptc_value *query)
{
    int64_t from[4]; /* the dim of the permute's input each query dim is */
    if (query->type.ndim != 4 || !query_permuted_dims(query, from))
        return false;
    return from[0] < from[2] && from[2] < from[1] && from[1] < from[3];
}

/* Attention without dropout: the extern, a boolean mask made additive first
 * (0 where it keeps, -inf where it drops, in the query's dtype), which is
 * what torch's attention does before its kernels run (but mask_left_to_torch).
 * Here the where fuses into the kernel that computes the mask; left to torch,
 * it costs a where and two fill launches on every call. The result is
 * stored heads last where result_heads_last says. */
static int sdpa_extern(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_value *mask = dp_in(d, n, "attn_mask"), *query = dp_in(d, n, "query");
    ptc_arg *args = dp_mapped_args(d, n);
    if (mask && query && mask->type.dtype == PTC_BOOL && !mask_left_to_torch(query)) {
        ptc_dtype dt = query->type.dtype;
        ptc_value *keep = dp_full(d, NULL, 0, 0.0, dt), *drop = dp_full(d, NULL, 0, -INFINITY, dt);
        ptc_value *additive = dp_where(d, mask, keep, drop);
        if (!additive)
            return -1;
        args[ptc_param_index(n->op, "attn_mask")] = ptc_arg_value(additive);
    }
    if (!query || dp_arg(n, "heads_last")->b || !result_heads_last(query))
        return dp_build_outs(d, n, args, outs); /* (a graph decomposed before keeps its own) */
    args[ptc_param_index(n->op, "heads_last")] = ptc_arg_bool(true);
    if (dp_build_outs(d, n, args, outs))
        return -1;
    static const int back_to_heads_first[4] = {0, 2, 1, 3};
    outs[0] = dp_permute(d, outs[0], back_to_heads_first);
    return outs[0] ? 0 : -1;
}

static int d_sdpa(dctx *d, const ptc_node *n, ptc_value **outs)
{
    double p = dp_arg(n, "dropout_p")->f;
    if (p == 0)
        return sdpa_extern(d, n, outs);
    ptc_value *q = dp_in(d, n, "query"), *k = dp_in(d, n, "key"), *v = dp_in(d, n, "value");
    const ptc_ttype *ot = &n->outs[0]->type;
    int nq = q->type.ndim, nk = k->type.ndim, ns;
    ptc_dim shape[PTC_MAX_DIMS], e = q->type.shape[nq - 1];
    ptc_error err;
    if (ptc_broadcast_shapes(d->g->arena, q->type.shape, nq - 2, k->type.shape, nk - 2, shape, &ns,
                             &err))
        return dp_fail(d, PTC_ERR_META, "attention batch dims: %s", err.msg);
    shape[ns++] = q->type.shape[nq - 2];
    shape[ns++] = k->type.shape[nk - 2];
    const ptc_arg *scale_arg = dp_arg(n, "scale");
    if (scale_arg->kind != PTC_ARG_FLOAT && !ptc_dim_is_static(e))
        return dp_fail(d, PTC_ERR_UNSUPPORTED,
                       "attention with dropout and a symbolic head size "
                       "needs an explicit scale");
    double scale = scale_arg->kind == PTC_ARG_FLOAT ? scale_arg->f : 1.0 / sqrt((double)e.value);
    int perm[PTC_MAX_DIMS];
    for (int i = 0; i < nk; i++)
        perm[i] = i < nk - 2 ? i : 2 * nk - 3 - i; /* the last two swapped */
    ptc_dtype c = dp_compute(ot->dtype);
    ptc_value *scores = dp_convert(d, matmul(d, q, dp_permute(d, k, perm), shape, ns), c);
    scores = dp_binary(d, PTC_OP_PRIMS_MUL, scores, dp_full(d, shape, ns, scale, c));
    ptc_value *w = dp_softmax(d, attention_mask(d, n, scores, shape, ns), ns - 1, false, true);
    w = dp_dropout(d, w, p, dp_arg(n, "seed")->i);
    outs[0] = matmul(d, dp_convert(d, w, ot->dtype), v, ot->shape, ot->ndim);
    return 0;
}

/* conv1d/2d/3d and conv_transpose2d as the generic convolution. */
static int d_conv(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_arena *a = d->g->arena;
    ptc_value *x = dp_in(d, n, "input");
    const ptc_arg *stride = dp_arg(n, "stride"), *padding = dp_arg(n, "padding");
    const ptc_arg *dilation = dp_arg(n, "dilation");
    int k = stride->is.n;
    bool transposed = n->op == PTC_OP_CONV_TRANSPOSE2D;
    ptc_arg outpad;
    if (transposed) {
        outpad = *dp_arg(n, "output_padding");
    } else {
        int64_t zeros[PTC_MAX_DIMS] = {0};
        outpad = ptc_arg_ints(a, zeros, k);
    }
    bool unbatched = x && x->type.ndim == k + 1;
    if (unbatched) {
        ptc_dim s[PTC_MAX_DIMS];
        s[0] = ptc_dim_c(1);
        memcpy(s + 1, x->type.shape, sizeof(ptc_dim) * (size_t)(k + 1));
        x = dp_reshape(d, x, s, k + 2);
    }
    ptc_value *bias = dp_in(d, n, "bias");
    ptc_arg args[9] = {ptc_arg_value(x),
                       ptc_arg_value(dp_in(d, n, "weight")),
                       bias ? ptc_arg_value(bias) : ptc_arg_none(),
                       *stride,
                       *padding,
                       *dilation,
                       ptc_arg_bool(transposed),
                       outpad,
                       *dp_arg(n, "groups")};
    ptc_value *y = x ? dp_build(d, PTC_OP_CONVOLUTION, args, 9) : NULL;
    outs[0] = dp_reshape(d, y, n->outs[0]->type.shape, n->outs[0]->type.ndim);
    return 0;
}

static int d_max_pool2d(dctx *d, const ptc_node *n, ptc_value **outs)
{
    ptc_arg args[6];
    static const char *names[6] = {"self",    "kernel_size", "stride",
                                   "padding", "dilation",    "ceil_mode"};
    for (int i = 0; i < 6; i++)
        args[i] = *dp_arg(n, names[i]);
    args[0].v = d->map[args[0].v->id];
    ptc_node *m = dp_buildn(d, PTC_OP_MAX_POOL2D_WITH_INDICES, args, 6);
    outs[0] = m ? m->outs[0] : NULL;
    return 0;
}

void ptc_decomp_linalg(ptc_decomp_fn *fns)
{
    fns[PTC_OP_MATMUL] = d_matmul;
    fns[PTC_OP_ADDMM] = d_addmm;
    fns[PTC_OP_BADDBMM] = d_addmm;
    fns[PTC_OP_LINEAR] = d_linear;
    fns[PTC_OP_CONV1D] = d_conv;
    fns[PTC_OP_CONV2D] = d_conv;
    fns[PTC_OP_CONV3D] = d_conv;
    fns[PTC_OP_CONV_TRANSPOSE2D] = d_conv;
    fns[PTC_OP_MAX_POOL2D] = d_max_pool2d;
    fns[PTC_OP_SDPA] = d_sdpa;
}
