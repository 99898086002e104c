/* The derivative rules of the extern and pooling ops (derivs.def), written
 * with the same externs: convolutions differentiate into a transposed
 * convolution and torch's weight-gradient kernel,
 * average pooling into a transposed depthwise convolution with a ones kernel,
 * max pooling into a scatter of the gradient to the recorded indices.
 *
 * Convolution (not transposed), groups G, spatial dims k:
 *   grad_input  = conv_transpose(g, w), same stride, padding, dilation and
 *                 groups, output_padding making up what the forward's floor
 *                 division dropped (cuDNN's and oneDNN's backward-data);
 *                 over symbolic sizes, convolution_backward's first output;
 *   grad_weight = convolution_backward_weight(g, x, w): torch's
 *                 convolution_backward for the weight alone, an extern;
 *   both        = convolution_backward(g, x, w): one extern of two
 *                 outputs, one torch call as eager's backward makes;
 *   grad_bias   = g summed over every dim but the channels (a ptc
 *                 reduction, fused with g's producer).
 */
#include "ag.h"

#define G (gout[0])

static int64_t ival(const ptc_arg *list, int i, int64_t fallback)
{
    return i < list->is.n ? list->is.d[i].value : fallback;
}

static ptc_value *convolution(ag *a, ptc_value *x, ptc_value *w, const int64_t *stride,
                              const int64_t *padding, const int64_t *dilation, bool transposed,
                              const int64_t *output_padding, int64_t groups, int k)
{
    ptc_dim s[3], p[3], d[3], op[3];
    for (int i = 0; i < k; i++) {
        s[i] = ptc_dim_c(stride[i]);
        p[i] = ptc_dim_c(padding[i]);
        d[i] = ptc_dim_c(dilation[i]);
        op[i] = ptc_dim_c(output_padding[i]);
    }
    ptc_arg args[9] = {{.kind = PTC_ARG_VALUE, .v = x},
                       {.kind = PTC_ARG_VALUE, .v = w},
                       {.kind = PTC_ARG_NONE},
                       ag_arg_ints(a, s, k),
                       ag_arg_ints(a, p, k),
                       ag_arg_ints(a, d, k),
                       {.kind = PTC_ARG_BOOL, .b = transposed},
                       ag_arg_ints(a, op, k),
                       {.kind = PTC_ARG_INT, .i = ptc_dim_c(groups)}};
    return ag_build(a, PTC_OP_CONVOLUTION, args, 9);
}

static bool all_static(const ptc_value *v)
{
    return v && ptc_ttype_is_static(&v->type);
}

/* The geometry of a convolution node: k spatial dims and their attributes. */
typedef struct conv_geom {
    int k;
    int64_t stride[3], padding[3], dilation[3], groups;
} conv_geom;

static conv_geom geometry(const ptc_node *n, int k)
{
    conv_geom c = {.k = k, .groups = n->args[8].i.value};
    for (int i = 0; i < k; i++) {
        c.stride[i] = ival(&n->args[3], i, 1);
        c.padding[i] = ival(&n->args[4], i, 0);
        c.dilation[i] = ival(&n->args[5], i, 1);
    }
    return c;
}

static ptc_value *conv_grad_input(ag *a, const conv_geom *c, const ptc_value *x, ptc_value *w,
                                  ptc_value *g)
{
    int64_t output_padding[3];
    for (int i = 0; i < c->k; i++) {
        int64_t in = x->type.shape[2 + i].value, out = g->type.shape[2 + i].value;
        int64_t kernel = w->type.shape[2 + i].value;
        int64_t covered =
            (out - 1) * c->stride[i] - 2 * c->padding[i] + c->dilation[i] * (kernel - 1) + 1;
        output_padding[i] = in - covered;
    }
    return convolution(a, g, w, c->stride, c->padding, c->dilation, true, output_padding, c->groups,
                       c->k);
}

/* The weight gradient through torch's convolution_backward (cuDNN, oneDNN):
 * as a convolution over the batch it ran some 30x slower on an H200. With
 * the input's gradient too (op CONVOLUTION_BACKWARD) it is one call of two
 * outputs: as two (a weight-only convolution_backward and a transposed
 * convolution) resnet18's CPU training step took 1.25-1.5x eager's. */
static ptc_node *conv_backward(ag *a, ptc_op op, const conv_geom *c, ptc_value *x, ptc_value *w,
                               ptc_value *g)
{
    ptc_dim s[3], p[3], d[3];
    for (int i = 0; i < c->k; i++) {
        s[i] = ptc_dim_c(c->stride[i]);
        p[i] = ptc_dim_c(c->padding[i]);
        d[i] = ptc_dim_c(c->dilation[i]);
    }
    ptc_arg args[7] = {{.kind = PTC_ARG_VALUE, .v = g},
                       {.kind = PTC_ARG_VALUE, .v = x},
                       {.kind = PTC_ARG_VALUE, .v = w},
                       ag_arg_ints(a, s, c->k),
                       ag_arg_ints(a, p, c->k),
                       ag_arg_ints(a, d, c->k),
                       {.kind = PTC_ARG_INT, .i = ptc_dim_c(c->groups)}};
    return ag_build_node(a, op, args, 7);
}

int ag_d_convolution(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_value *x = ag_in(n, 0), *w = ag_in(n, 1), *bias = ag_in(n, 2);
    if (n->args[6].b)
        return ag_fail(a,
                       "convolution (node %d) is transposed: its derivative is not written "
                       "yet",
                       n->id);
    conv_geom c = geometry(n, w->type.ndim - 2);
    /* the transposed convolution's output_padding is worked out from static
     * sizes; where they are symbolic, torch's convolution_backward gives the
     * input's gradient (and a weight gradient nothing reads) */
    bool sizes_static = all_static(x) && all_static(w) && all_static(G);
    if (ag_needs(a, x) && (ag_needs(a, w) || !sizes_static)) {
        ptc_node *both = conv_backward(a, PTC_OP_CONVOLUTION_BACKWARD, &c, x, w, G);
        if (both) {
            ag_accum(a, x, both->outs[0]);
            if (ag_needs(a, w))
                ag_accum(a, w, both->outs[1]);
        }
    } else if (ag_needs(a, x)) {
        ag_accum(a, x, conv_grad_input(a, &c, x, w, G));
    } else if (ag_needs(a, w)) {
        ptc_node *dw = conv_backward(a, PTC_OP_CONVOLUTION_BACKWARD_WEIGHT, &c, x, w, G);
        ag_accum(a, w, dw ? dw->outs[0] : NULL);
    }
    if (ag_needs(a, bias)) {
        bool mask[PTC_MAX_DIMS] = {0};
        for (int d = 0; d < G->type.ndim; d++)
            mask[d] = d != 1;
        ag_accum(a, bias, ag_sum(a, G, mask));
    }
    return a->failed ? -1 : 0;
}

/* ---- pooling --------------------------------------------------------------------- */

/* x (..., H, W) as planes: (P, H*W) for max pooling's scatter, or
 * (1, P, H, W) for average pooling's depthwise convolution. */
static ptc_dim planes(ag *a, const ptc_value *x)
{
    ptc_dim p = ptc_dim_c(1);
    for (int d = 0; d < x->type.ndim - 2; d++)
        p = ptc_dim_mul(a->g->arena, p, x->type.shape[d]);
    return p;
}

int ag_d_max_pool(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_arena *ar = a->g->arena;
    ptc_value *x = ag_in(n, 0), *indices = n->outs[1];
    const ptc_ttype *xt = &x->type, *ot = &G->type;
    ptc_dim p = planes(a, x);
    ptc_dim flat_in[2] = {p, ptc_dim_mul(ar, xt->shape[xt->ndim - 2], xt->shape[xt->ndim - 1])};
    ptc_dim flat_out[2] = {p, ptc_dim_mul(ar, ot->shape[ot->ndim - 2], ot->shape[ot->ndim - 1])};
    ptc_arg args[4] = {{.kind = PTC_ARG_VALUE, .v = ag_full(a, flat_in, 2, 0.0, x)},
                       {.kind = PTC_ARG_INT, .i = ptc_dim_c(1)},
                       {.kind = PTC_ARG_VALUE, .v = ag_reshape(a, indices, flat_out, 2)},
                       {.kind = PTC_ARG_VALUE, .v = ag_reshape(a, G, flat_out, 2)}};
    ptc_value *scattered = ag_build(a, PTC_OP_PRIMS_SCATTER_ADD, args, 4);
    ag_accum(a, x, ag_reshape(a, scattered, xt->shape, xt->ndim));
    return a->failed ? -1 : 0;
}

/* Windows that tile the input (stride = kernel, no padding, nothing left
 * over): each input element lies in one window, so the spread is g
 * broadcast over its window, [.., OH, OW] -> [.., OH, kh, OW, kw] -> x's
 * shape, pointwise work that fuses with what reads it. As a transposed
 * convolution, resnet50's global average pool took 3.2 ms of a 17 ms
 * training step on an H100 (cuDNN, 65,536 planes of one pixel). */
static ptc_value *spread_tiled(ag *a, const ptc_value *x, ptc_value *g, const int64_t *kernel)
{
    const ptc_ttype *xt = &x->type;
    int lead = xt->ndim - 2, bdims[PTC_MAX_DIMS];
    ptc_dim windows[PTC_MAX_DIMS + 2];
    for (int d = 0; d < lead; d++) {
        windows[d] = xt->shape[d];
        bdims[d] = d;
    }
    windows[lead] = g->type.shape[lead];
    windows[lead + 1] = ptc_dim_c(kernel[0]);
    windows[lead + 2] = g->type.shape[lead + 1];
    windows[lead + 3] = ptc_dim_c(kernel[1]);
    bdims[lead] = lead;
    bdims[lead + 1] = lead + 2;
    return ag_reshape(a, ag_broadcast(a, g, windows, lead + 4, bdims), xt->shape, xt->ndim);
}

/* Spreads g / divisor over each window: a transposed depthwise convolution
 * of a ones kernel over the planes, or a broadcast where the windows tile
 * the input. */
static ptc_value *spread(ag *a, const ptc_value *x, ptc_value *g, const int64_t *kernel,
                         const int64_t *stride, const int64_t *padding)
{
    const ptc_ttype *xt = &x->type;
    int64_t ps = planes(a, x).value, H = xt->shape[xt->ndim - 2].value,
            W = xt->shape[xt->ndim - 1].value;
    int64_t OH = g->type.shape[g->type.ndim - 2].value, OW = g->type.shape[g->type.ndim - 1].value;
    if (stride[0] == kernel[0] && stride[1] == kernel[1] && !padding[0] && !padding[1] &&
        H == OH * kernel[0] && W == OW * kernel[1])
        return spread_tiled(a, x, g, kernel);
    int64_t output_padding[2] = {H - ((OH - 1) * stride[0] - 2 * padding[0] + kernel[0]),
                                 W - ((OW - 1) * stride[1] - 2 * padding[1] + kernel[1])};
    for (int i = 0; i < 2; i++)
        if (output_padding[i] < 0 || output_padding[i] >= stride[i]) {
            ag_fail(a,
                    "the pooling windows of %s (node %d) overhang the input (ceil_mode): "
                    "its derivative is not written yet",
                    ptc_op_name(a->node->op), a->node->id);
            return NULL;
        }
    ptc_dim gshape[4] = {ptc_dim_c(1), ptc_dim_c(ps), ptc_dim_c(OH), ptc_dim_c(OW)};
    ptc_dim wshape[4] = {ptc_dim_c(ps), ptc_dim_c(1), ptc_dim_c(kernel[0]), ptc_dim_c(kernel[1])};
    int64_t ones[2] = {1, 1};
    ptc_value *r = convolution(a, ag_reshape(a, g, gshape, 4), ag_full(a, wshape, 4, 1.0, g),
                               stride, padding, ones, true, output_padding, ps, 2);
    return ag_reshape(a, r, xt->shape, xt->ndim);
}

static int pool_backward(ag *a, const ptc_node *n, ptc_value *g, const int64_t *kernel,
                         const int64_t *stride, const int64_t *padding, bool count_pad,
                         int64_t divisor)
{
    ptc_value *x = ag_in(n, 0);
    if (!all_static(x) || !all_static(g))
        return ag_fail(a, "%s (node %d) has symbolic sizes: its derivative needs static ones",
                       ptc_op_name(n->op), n->id);
    ptc_value *scaled;
    if (divisor || count_pad) {
        scaled = ag_scale(a, g, 1.0 / (double)(divisor ? divisor : kernel[0] * kernel[1]));
    } else {
        /* each window's divisor counts the input elements inside it: the same
         * pooling of ones, summed (divisor_override=1) */
        ptc_arg args[7] = {{.kind = PTC_ARG_VALUE, .v = ag_full_like(a, x, 1.0)},
                           n->args[1],
                           n->args[2],
                           n->args[3],
                           {.kind = PTC_ARG_BOOL, .b = false},
                           {.kind = PTC_ARG_BOOL, .b = true},
                           {.kind = PTC_ARG_INT, .i = ptc_dim_c(1)}};
        scaled = ag_binary(a, PTC_OP_PRIMS_DIV, g, ag_build(a, PTC_OP_AVG_POOL2D, args, 7));
    }
    ag_accum(a, x, spread(a, x, scaled, kernel, stride, padding));
    return a->failed ? -1 : 0;
}

int ag_d_avg_pool(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    int64_t kernel[2], stride[2], padding[2];
    for (int i = 0; i < 2; i++) {
        kernel[i] = ival(&n->args[1], i, 1);
        stride[i] = ival(&n->args[2], i, kernel[i]);
        padding[i] = ival(&n->args[3], i, 0);
    }
    if (n->args[4].b)
        return ag_fail(a,
                       "avg_pool2d (node %d) with ceil_mode=True: its derivative is not "
                       "written yet",
                       n->id);
    int64_t divisor = n->args[6].kind == PTC_ARG_INT ? n->args[6].i.value : 0;
    return pool_backward(a, n, G, kernel, stride, padding, n->args[5].b, divisor);
}

/* Adaptive average pooling with bins that tile the input evenly is an
 * average pool with kernel = stride = input / output. */
int ag_d_adaptive_avg_pool(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_value *x = ag_in(n, 0);
    int nd = x->type.ndim;
    int64_t kernel[2], padding[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        int64_t in = x->type.shape[nd - 2 + i].value, out = G->type.shape[nd - 2 + i].value;
        if (!ptc_dim_is_static(x->type.shape[nd - 2 + i]) || out <= 0 || in % out)
            return ag_fail(a,
                           "adaptive_avg_pool2d (node %d): bins that do not tile the input "
                           "evenly have no derivative yet",
                           n->id);
        kernel[i] = in / out;
    }
    return pool_backward(a, n, G, kernel, kernel, padding, true, 0);
}

/* ---- attention ------------------------------------------------------------------- */

/* scaled_dot_product_attention recomputes its weights P = softmax(scale q k^T
 * + mask) in the backward (B = the batch dims flattened):
 *   dV = P^T dO,  dP = dO V^T,  dS = P (dP - rowsum(dP P)),
 *   dQ = scale dS K,  dK = scale dS^T Q.
 * A fully masked row has P = 0, as in torch's math path. */
typedef struct attn_shapes {
    ptc_dim b, l, s, e, ev;
} attn_shapes;

static ptc_value *bmm(ag *a, ptc_value *x, ptc_value *y)
{
    return ag_binary(a, PTC_OP_BMM, x, y);
}

static ptc_value *transpose(ag *a, ptc_value *x)
{
    static const int t[3] = {0, 2, 1};
    return ag_permute(a, x, t);
}

static ptc_value *as3(ag *a, ptc_value *x, ptc_dim b, ptc_dim rows, ptc_dim cols)
{
    ptc_dim shape[3] = {b, rows, cols};
    return ag_reshape(a, x, shape, 3);
}

/* The scores' mask (is_causal, or attn_mask broadcast to (batch..., L, S)),
 * applied to the (B, L, S) scores. */
static ptc_value *masked(ag *a, const ptc_node *n, ptc_value *scores, const ptc_value *q,
                         const attn_shapes *sh)
{
    ptc_value *mask = ag_in(n, 3);
    int nd = q->type.ndim;
    ptc_dim full_shape[PTC_MAX_DIMS];
    for (int d = 0; d < nd - 2; d++)
        full_shape[d] = q->type.shape[d];
    full_shape[nd - 2] = sh->l;
    full_shape[nd - 1] = sh->s;
    ptc_value *keep = NULL, *bias = NULL;
    if (n->args[5].b) {
        ptc_arg rows[5] = {{.kind = PTC_ARG_INT, .i = sh->l},
                           {.kind = PTC_ARG_INT, .i = ptc_dim_c(0)},
                           {.kind = PTC_ARG_INT, .i = ptc_dim_c(1)},
                           {.kind = PTC_ARG_DTYPE, .dt = PTC_I64},
                           {.kind = PTC_ARG_DEVICE, .dev = q->type.device}};
        ptc_arg cols[5] = {rows[0], rows[1], rows[2], rows[3], rows[4]};
        cols[0].i = sh->s;
        static const int row_dim = 0, col_dim = 1;
        ptc_dim ls[2] = {sh->l, sh->s};
        ptc_value *r = ag_broadcast(a, ag_build(a, PTC_OP_PRIMS_IOTA, rows, 5), ls, 2, &row_dim);
        ptc_value *c = ag_broadcast(a, ag_build(a, PTC_OP_PRIMS_IOTA, cols, 5), ls, 2, &col_dim);
        ptc_dim bls[3] = {sh->b, sh->l, sh->s};
        int tail[2] = {1, 2};
        keep = ag_broadcast(a, ag_binary(a, PTC_OP_PRIMS_GE, r, c), bls, 3, tail);
    } else if (mask) {
        int bdims[PTC_MAX_DIMS];
        for (int d = 0; d < mask->type.ndim; d++)
            bdims[d] = nd - mask->type.ndim + d;
        ptc_value *m = ag_broadcast(a, mask, full_shape, nd, bdims);
        m = as3(a, m, sh->b, sh->l, sh->s);
        if (mask->type.dtype == PTC_BOOL)
            keep = m;
        else
            bias = ag_convert(a, m, scores ? scores->type.dtype : PTC_F32);
    }
    if (bias)
        return ag_binary(a, PTC_OP_PRIMS_ADD, scores, bias);
    if (keep)
        return ag_where(a, keep, scores, ag_full_like(a, scores, -INFINITY));
    return scores;
}

/* softmax over the last dim; rows of -inf give zeros. */
static ptc_value *softmax_rows(ag *a, ptc_value *s)
{
    if (!s)
        return NULL;
    bool last[PTC_MAX_DIMS] = {false, false, true};
    ptc_value *m = ag_unary(
        a, PTC_OP_PRIMS_NEG,
        ag_build(a, PTC_OP_PRIMS_AMAX,
                 (ptc_arg[]){{.kind = PTC_ARG_VALUE, .v = s}, ag_arg_int_list(a, (int[]){2}, 1)},
                 2));
    ptc_value *finite = ag_binary(a, PTC_OP_PRIMS_EQ, m, ag_full_like(a, m, INFINITY));
    m = ag_where(a, finite, ag_full_like(a, m, 0.0), m);
    ptc_value *e = ag_unary(a, PTC_OP_PRIMS_EXP,
                            ag_binary(a, PTC_OP_PRIMS_ADD, s, ag_unreduce(a, m, s, last)));
    ptc_value *sum = ag_sum(a, e, last);
    ptc_value *empty = ag_binary(a, PTC_OP_PRIMS_EQ, sum, ag_full_like(a, sum, 0.0));
    sum = ag_where(a, empty, ag_full_like(a, sum, 1.0), sum);
    return ag_binary(a, PTC_OP_PRIMS_DIV, e, ag_unreduce(a, sum, s, last));
}

int ag_d_sdpa(ag *a, const ptc_node *n, ptc_value *const *gout)
{
    ptc_value *q = ag_in(n, 0), *k = ag_in(n, 1), *v = ag_in(n, 2), *mask = ag_in(n, 3);
    int nd = q->type.ndim;
    if (n->args[4].f != 0.0) /* decomposition writes it out in prims (d_sdpa) */
        return ag_fail(a,
                       "scaled_dot_product_attention (node %d) with dropout reached autograd "
                       "as one op: differentiate its decomposition into prims",
                       n->id);
    if (ag_needs(a, mask))
        return ag_fail(a,
                       "scaled_dot_product_attention (node %d): a gradient for attn_mask is "
                       "not written yet",
                       n->id);
    attn_shapes sh = {ptc_dim_c(1), q->type.shape[nd - 2], k->type.shape[nd - 2],
                      q->type.shape[nd - 1], v->type.shape[nd - 1]};
    for (int d = 0; d < nd - 2; d++) {
        if (k->type.ndim != nd || v->type.ndim != nd ||
            !ptc_dim_eq(k->type.shape[d], q->type.shape[d]) ||
            !ptc_dim_eq(v->type.shape[d], q->type.shape[d]))
            return ag_fail(a,
                           "scaled_dot_product_attention (node %d) broadcasts its batch dims: "
                           "its derivative is not written yet",
                           n->id);
        sh.b = ptc_dim_mul(a->g->arena, sh.b, q->type.shape[d]);
    }
    double scale = n->args[6].kind == PTC_ARG_FLOAT ? n->args[6].f
                   : ptc_dim_is_static(sh.e)        ? 1.0 / sqrt((double)sh.e.value)
                                                    : 0.0;
    if (scale == 0.0)
        return ag_fail(a,
                       "scaled_dot_product_attention (node %d): a symbolic head size needs "
                       "an explicit scale for its derivative",
                       n->id);
    ptc_value *g = G;
    if (n->args[ptc_param_index(n->op, "heads_last")].b) { /* G is [B, L, H, Ev] */
        static const int heads_first[4] = {0, 2, 1, 3};
        g = ag_permute(a, g, heads_first);
    }
    ptc_value *q3 = as3(a, q, sh.b, sh.l, sh.e), *k3 = as3(a, k, sh.b, sh.s, sh.e);
    ptc_value *v3 = as3(a, v, sh.b, sh.s, sh.ev), *g3 = as3(a, g, sh.b, sh.l, sh.ev);
    ptc_value *p =
        softmax_rows(a, masked(a, n, ag_scale(a, bmm(a, q3, transpose(a, k3)), scale), q, &sh));
    if (ag_needs(a, v))
        ag_accum(a, v, ag_reshape(a, bmm(a, transpose(a, p), g3), v->type.shape, nd));
    if (ag_needs(a, q) || ag_needs(a, k)) {
        bool last[PTC_MAX_DIMS] = {false, false, true};
        ptc_value *dp = bmm(a, g3, transpose(a, v3));
        ptc_value *rowsum =
            ag_unreduce(a, ag_sum(a, ag_binary(a, PTC_OP_PRIMS_MUL, dp, p), last), p, last);
        ptc_value *ds = ag_scale(
            a, ag_binary(a, PTC_OP_PRIMS_MUL, p, ag_binary(a, PTC_OP_PRIMS_SUB, dp, rowsum)),
            scale);
        if (ag_needs(a, q))
            ag_accum(a, q, ag_reshape(a, bmm(a, ds, k3), q->type.shape, nd));
        if (ag_needs(a, k))
            ag_accum(a, k, ag_reshape(a, bmm(a, transpose(a, ds), q3), k->type.shape, nd));
    }
    return a->failed ? -1 : 0;
}
