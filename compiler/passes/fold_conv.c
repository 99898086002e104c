/* Per-channel affine epilogues of convolutions folded into their weights.
 *
 * A convolution's output y[n, c, ...] = sum(W[c, ...] * x) + b[c] is linear
 * in its weight and bias per output channel c, so any chain after it of
 * single-use pointwise steps with a per-channel operand, y * s[c] + t[c],
 * is the convolution of the scaled weight W * s and bias b * s + t. Eval
 * BatchNorm decomposes into such a chain ((y - mean) * rsqrt(var + eps) *
 * gamma + beta), and so do the frozen forms torchvision and timm write by
 * hand (y * scale + shift with scale and shift reshaped to [1, C, 1, 1]).
 * The pass finds each chain, builds s and t as [C] vectors in float32 from
 * the steps' operands (whatever computes them: graph inputs, most often
 * module parameters), scales the weight in float32 from its float32 source
 * when the graph converts it (autocast) and casts the result to the
 * convolution's dtype, as Inductor's freezing and torch.fx's
 * fuse_conv_bn_eval do. The chain's BatchNorm kernel disappears; what it
 * costs is one pass over the weight per call, since the folded weight is
 * computed in the graph from the parameters of that call and so is never
 * stale.
 *
 * A chain stops at the first value with more than one user (a graph
 * output counts): the convolution's raw output, or a step's, read by
 * anything else keeps the convolution and its epilogue as they were. A
 * training BatchNorm reads its input twice (its statistics), so it never
 * folds. Transposed convolutions (weight [Cin, Cout/groups, ...]) are left
 * alone.
 */
#include "passes/decomp.h"

#include <stdlib.h>
#include <string.h>

typedef enum {
    STEP_ADD,
    STEP_SUB,
    STEP_RSUB,
    STEP_MUL,
    STEP_DIV,
    STEP_NEG,
    STEP_CONVERT
} step_kind;

typedef struct step {
    step_kind kind;
    ptc_value *operand; /* the per-channel operand at the chain's shape; NULL for neg/convert */
} step;

#define MAX_STEPS 16
typedef struct chain {
    ptc_node *conv;
    ptc_node *end; /* the last step: its output is replaced */
    int nsteps;
    step steps[MAX_STEPS];
} chain;

static const ptc_arg *arg_of(const ptc_node *n, const char *name)
{
    int i = ptc_param_index(n->op, name);
    return i >= 0 && i < n->nargs ? &n->args[i] : NULL;
}

static bool same_shape(const ptc_value *a, const ptc_value *b)
{
    if (a->type.ndim != b->type.ndim)
        return false;
    for (int d = 0; d < a->type.ndim; d++)
        if (!ptc_dim_eq(a->type.shape[d], b->type.shape[d]))
            return false;
    return true;
}

/* Whether v, at y's shape, is the same along every dim but the channels
 * (dim 1): a full, or a broadcast of a value whose every dim is 1 but the
 * one landing on dim 1. */
static bool per_channel(const ptc_value *v, const ptc_value *y)
{
    const ptc_node *d = v->def;
    if (!d || !same_shape(v, y) || !ptc_dtype_is_float(v->type.dtype))
        return false;
    if (d->op == PTC_OP_PRIMS_FULL)
        return true;
    if (d->op != PTC_OP_PRIMS_BROADCAST_IN_DIM)
        return false;
    const ptc_value *u = d->args[0].v;
    const ptc_arg *bdims = arg_of(d, "broadcast_dimensions");
    for (int k = 0; k < u->type.ndim; k++) {
        ptc_dim size = u->type.shape[k];
        if (!ptc_dim_is_static(bdims->is.d[k]) || !ptc_dim_is_static(size))
            return false;
        if (bdims->is.d[k].value != 1 && size.value != 1)
            return false;
    }
    return true;
}

/* The step v's single user u makes, or false when u is none of them. */
static bool step_of(const ptc_node *u, const ptc_value *v, const ptc_value *y, step *s)
{
    ptc_op op = u->op;
    if (!ptc_dtype_is_float(u->outs[0]->type.dtype) || !same_shape(u->outs[0], y))
        return false;
    if (op == PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE || op == PTC_OP_PRIMS_NEG) {
        *s = (step){op == PTC_OP_PRIMS_NEG ? STEP_NEG : STEP_CONVERT, NULL};
        return true;
    }
    if (op != PTC_OP_PRIMS_ADD && op != PTC_OP_PRIMS_SUB && op != PTC_OP_PRIMS_MUL &&
        op != PTC_OP_PRIMS_DIV)
        return false;
    bool first = u->args[0].v == v;
    ptc_value *other = u->args[first ? 1 : 0].v;
    if (other == v || !per_channel(other, y))
        return false;
    switch (op) {
    case PTC_OP_PRIMS_ADD:
        s->kind = STEP_ADD;
        break;
    case PTC_OP_PRIMS_MUL:
        s->kind = STEP_MUL;
        break;
    case PTC_OP_PRIMS_SUB:
        s->kind = first ? STEP_SUB : STEP_RSUB;
        break;
    default:
        if (!first) /* c / y is not affine in y */
            return false;
        s->kind = STEP_DIV;
    }
    s->operand = other;
    return true;
}

/* The chain after convolution n, if it has an affine step. */
static bool find_chain(ptc_node *n, const int *uses, ptc_node *const *user, chain *c)
{
    const ptc_arg *transposed = arg_of(n, "transposed");
    if ((transposed && transposed->b) || n->outs[0]->type.ndim < 3)
        return false;
    ptc_value *y = n->outs[0];
    *c = (chain){.conv = n};
    int last_affine = -1;
    ptc_node *ends[MAX_STEPS];
    for (ptc_value *v = y; uses[v->id] == 1 && user[v->id] && c->nsteps < MAX_STEPS;) {
        ptc_node *u = user[v->id];
        if (!step_of(u, v, y, &c->steps[c->nsteps]))
            break;
        if (c->steps[c->nsteps].kind != STEP_CONVERT)
            last_affine = c->nsteps;
        ends[c->nsteps++] = u;
        v = u->outs[0];
    }
    if (last_affine < 0)
        return false;
    /* trailing conversions go too: autocast's BatchNorm converts back to
       the convolution's dtype, which the folded convolution has already */
    c->end = ends[c->nsteps - 1];
    return true;
}

/* ---- building the folded convolution ------------------------------------------------------- */

/* Operand v of a step (per_channel) as a float32 [C] vector. */
static ptc_value *channel_vector(dctx *d, const ptc_value *v, ptc_dim channels)
{
    const ptc_node *def = v->def;
    if (def->op == PTC_OP_PRIMS_FULL)
        return dp_full_arg(d, &channels, 1, arg_of(def, "fill_value"), PTC_F32);
    ptc_value *u = def->args[0].v;
    int64_t n = 1;
    for (int k = 0; k < u->type.ndim; k++)
        n *= u->type.shape[k].value;
    ptc_dim flat = ptc_dim_c(n);
    ptc_value *vec = dp_convert(d, dp_reshape(d, u, &flat, 1), PTC_F32);
    int bdims[1] = {0};
    return n == 1 ? dp_broadcast_dims(d, vec, &channels, 1, bdims) : vec;
}

static ptc_value *scaled(dctx *d, ptc_op op, ptc_value *x, ptc_value *by)
{
    return x ? dp_binary(d, op, x, by) : NULL;
}

/* y * scale + shift equal to the chain's steps; NULL scale is 1, NULL
 * shift 0. */
static void affine_of(dctx *d, const chain *c, ptc_dim channels, ptc_value **scale,
                      ptc_value **shift)
{
    ptc_value *s = NULL, *t = NULL;
    for (int i = 0; i < c->nsteps && !d->failed; i++) {
        const step *st = &c->steps[i];
        if (st->kind == STEP_CONVERT)
            continue;
        if (st->kind == STEP_NEG || st->kind == STEP_RSUB) {
            s = s ? dp_unary(d, PTC_OP_PRIMS_NEG, s) : dp_full(d, &channels, 1, -1.0, PTC_F32);
            t = t ? dp_unary(d, PTC_OP_PRIMS_NEG, t) : NULL;
        }
        if (st->kind == STEP_NEG)
            continue;
        ptc_value *vec = channel_vector(d, st->operand, channels);
        switch (st->kind) {
        case STEP_ADD:
        case STEP_RSUB:
            t = t ? dp_binary(d, PTC_OP_PRIMS_ADD, t, vec) : vec;
            break;
        case STEP_SUB:
            t = t ? dp_binary(d, PTC_OP_PRIMS_SUB, t, vec) : dp_unary(d, PTC_OP_PRIMS_NEG, vec);
            break;
        case STEP_MUL:
        case STEP_DIV: {
            ptc_op op = st->kind == STEP_MUL ? PTC_OP_PRIMS_MUL : PTC_OP_PRIMS_DIV;
            ptc_value *one = dp_full(d, &channels, 1, 1.0, PTC_F32);
            s = s ? dp_binary(d, op, s, vec) : dp_binary(d, op, one, vec);
            t = scaled(d, op, t, vec);
            break;
        }
        default:
            break;
        }
    }
    *scale = s;
    *shift = t;
}

/* v in float32, from the float32 value it was converted from if it was
 * (autocast's cast of a parameter: the fold keeps its precision). */
static ptc_value *as_f32(dctx *d, ptc_value *v)
{
    const ptc_node *def = v->def;
    if (def && def->op == PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE &&
        def->args[0].v->type.dtype == PTC_F32)
        return def->args[0].v;
    return dp_convert(d, v, PTC_F32);
}

/* The convolution of chain c with its weight and bias folded; its output
 * in the chain end's dtype. */
static ptc_value *fold_chain(dctx *d, const chain *c)
{
    const ptc_node *conv = c->conv;
    int wi = ptc_param_index(conv->op, "weight"), bi = ptc_param_index(conv->op, "bias");
    ptc_value *w = conv->args[wi].v;
    ptc_value *b = conv->args[bi].kind == PTC_ARG_VALUE ? conv->args[bi].v : NULL;
    ptc_dim channels = w->type.shape[0];
    ptc_value *s, *t;
    affine_of(d, c, channels, &s, &t);
    ptc_value *w2 = w;
    if (s) {
        int at_out[1] = {0};
        ptc_value *per_out = dp_broadcast_dims(d, s, w->type.shape, w->type.ndim, at_out);
        w2 = dp_convert(d, dp_binary(d, PTC_OP_PRIMS_MUL, as_f32(d, w), per_out), w->type.dtype);
    }
    ptc_value *b32 = b ? as_f32(d, b) : NULL;
    if (b32 && s)
        b32 = dp_binary(d, PTC_OP_PRIMS_MUL, b32, s);
    if (t)
        b32 = b32 ? dp_binary(d, PTC_OP_PRIMS_ADD, b32, t) : t;
    ptc_value *b2 = b32 ? dp_convert(d, b32, w->type.dtype) : NULL;
    if (d->failed || !w2 || (b32 && !b2))
        return NULL;
    ptc_arg *args = PTC_NEWN(d->g->arena, ptc_arg, conv->nargs);
    memcpy(args, conv->args, sizeof *args * (size_t)conv->nargs);
    args[wi] = ptc_arg_value(w2);
    args[bi] = b2 ? ptc_arg_value(b2) : ptc_arg_none();
    ptc_value *y = dp_build(d, conv->op, args, conv->nargs);
    return dp_convert(d, y, c->end->outs[0]->type.dtype);
}

/* ---- the pass ------------------------------------------------------------------------------- */

/* Each value's users and, where it has one, that user. */
static void users_of(const ptc_graph *g, int *uses, ptc_node **user)
{
    ptc_graph_use_counts(g, uses);
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nargs; j++) {
            const ptc_arg *a = &g->nodes[i]->args[j];
            for (int k = 0; k < ptc_arg_nvalues(a); k++)
                if (ptc_arg_value_at(a, k))
                    user[ptc_arg_value_at(a, k)->id] = g->nodes[i];
        }
}

/* One forward walk that replaces the first output of each node n with
 * at[n->id] = k >= 0 by build(d, k, ctx), built in n's place with n's
 * provenance; users see the replacement through the remap. */
typedef ptc_value *(*rebuild_fn)(dctx *d, int k, void *ctx);

static int rebuild_at(ptc_graph *g, const int *at, rebuild_fn build, void *ctx, ptc_error *err)
{
    int nvalues = g->nvalues, n0 = g->nnodes, rc = 0;
    ptc_value **map = calloc((size_t)nvalues + 1, sizeof *map);
    pass_order order = {0};
    for (int i = 0; i < n0; i++) {
        ptc_node *n = g->nodes[i];
        pass_remap_args(n, map);
        int before = g->nnodes;
        if (at[n->id] >= 0 && rc == 0) {
            dctx d = {.g = g,
                      .src = n,
                      .nprov = n->nprov,
                      .prov = n->prov,
                      .loc = n->loc,
                      .module_path = n->module_path,
                      .err = err};
            ptc_value *r = build(&d, at[n->id], ctx);
            if (r)
                map[n->outs[0]->id] = r;
            else
                rc = -1;
        }
        pass_place_with_built(&order, g, before, n);
    }
    pass_take_order(g, &order);
    pass_remap_outputs(g, map);
    free(map);
    return rc;
}

static ptc_value *fold_chain_at(dctx *d, int k, void *chains)
{
    const chain *c = &((const chain *)chains)[k];
    d->module_path = c->conv->module_path;
    return fold_chain(d, c);
}

int ptc_pass_fold_conv_affine(ptc_graph *g, ptc_error *err)
{
    int *uses = calloc((size_t)g->nvalues + 1, sizeof *uses);
    ptc_node **user = calloc((size_t)g->nvalues + 1, sizeof *user);
    int *chain_at = malloc(sizeof *chain_at * ((size_t)g->next_node_id + 1));
    chain *chains = malloc(sizeof *chains * ((size_t)g->nnodes + 1));
    PTC_ASSERT(uses && user && chain_at && chains);
    users_of(g, uses, user);
    memset(chain_at, -1, sizeof *chain_at * ((size_t)g->next_node_id + 1));
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == PTC_OP_CONVOLUTION &&
            find_chain(g->nodes[i], uses, user, &chains[n])) {
            chain_at[chains[n].end->id] = n;
            n++;
        }
    int rc = n ? rebuild_at(g, chain_at, fold_chain_at, chains, err) : 0;
    if (n && rc == 0)
        ptc_pass_dce(g);
    free(uses);
    free(user);
    free(chain_at);
    free(chains);
    return rc ? -1 : n;
}

/* ---- bias as an epilogue ------------------------------------------------------------------ */

/* Convolution k of convs without its bias, the bias added after it. */
static ptc_value *bias_added_after(dctx *d, int k, void *convs)
{
    const ptc_node *conv = ((ptc_node *const *)convs)[k];
    int bi = ptc_param_index(conv->op, "bias");
    ptc_arg *args = PTC_NEWN(d->g->arena, ptc_arg, conv->nargs);
    memcpy(args, conv->args, sizeof *args * (size_t)conv->nargs);
    args[bi] = ptc_arg_none();
    ptc_value *y = dp_build(d, conv->op, args, conv->nargs);
    if (!y)
        return NULL;
    int at_channels[1] = {1};
    ptc_value *b = dp_broadcast_dims(d, conv->args[bi].v, y->type.shape, y->type.ndim, at_channels);
    return dp_binary(d, PTC_OP_PRIMS_ADD, y, b);
}

int ptc_pass_conv_bias_epilogue(ptc_graph *g, ptc_error *err)
{
    int *conv_at = malloc(sizeof *conv_at * ((size_t)g->next_node_id + 1));
    ptc_node **convs = malloc(sizeof *convs * ((size_t)g->nnodes + 1));
    PTC_ASSERT(conv_at && convs);
    memset(conv_at, -1, sizeof *conv_at * ((size_t)g->next_node_id + 1));
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) {
        ptc_node *c = g->nodes[i];
        if (c->op != PTC_OP_CONVOLUTION || c->outs[0]->type.ndim < 3)
            continue;
        const ptc_arg *bias = arg_of(c, "bias");
        if (bias && bias->kind == PTC_ARG_VALUE && bias->v->type.dtype == c->outs[0]->type.dtype) {
            conv_at[c->id] = n;
            convs[n++] = c;
        }
    }
    int rc = n ? rebuild_at(g, conv_at, bias_added_after, convs, err) : 0;
    if (n && rc == 0)
        ptc_pass_dce(g);
    free(conv_at);
    free(convs);
    return rc ? -1 : n;
}
