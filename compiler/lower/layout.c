/* Layout planning: channels-last temporaries for chains of 2-d convolutions.
 *
 * torch's convolutions (oneDNN on the CPU, cuDNN on the GPU) run faster on
 * channels-last tensors and return channels-last results for them, so, as
 * Inductor's layout optimisation does, the temporaries of a convolution chain
 * are stored NHWC: every 2-d convolution's result, every convolution input
 * and weight written by ptc (a weight cast under autocast: torch's
 * convolution would copy a contiguous one into its input's layout every
 * call), and each 4-d temporary whose kernel reads a channels-last
 * buffer element-aligned in its batch and channel dims (pointwise ops,
 * batch norm, pooling, residual adds) — so a layout once chosen flows down
 * the chain and no conversion runs between convolutions.
 *
 * A chosen buffer becomes a permuted buffer (lower.h): its shape is stored
 * as [N,H,W,C], every load of it lists its index in that order, and its
 * writer iterates [N,H,W,C] with its variables renamed — the per-node loop
 * order the scheduler and inliner then see as the plain order, so the inner
 * loop runs along C, the contiguous dim. Externs read it through views with
 * channels-last strides; a convolution writing it is asked for a
 * channels-last result (the runtime keeps torch's tensor as the buffer).
 * Graph inputs and outputs keep the user's layout: a convolution reading a
 * contiguous input reads a channels-last copy made by one small kernel
 * before it, and a graph output written from channels-last buffers is
 * written contiguous by its kernel (a transposing store, no extra pass).
 * So does a convolution whose weight is a contiguous graph input (a module
 * parameter), where torch's convolution would make that copy itself: the
 * kernel runs just after the one before the convolution, which it shares a
 * launch with on CUDA (combo.c), unless the runtime keeps channels-last
 * weights (weights_kept: the capture's opt-in weight cache).
 */
#include "lower/lower_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NCHW -> stored NHWC: stored dim d holds logical dim perm[d]. */
static const uint8_t channels_last_perm[4] = {0, 2, 3, 1};

static bool is_conv2d(const ptc_lnode *n)
{
    if (n->kind != PTC_LN_EXTERN || n->xkind != PTC_XK_HOST || n->xnode->op != PTC_OP_CONVOLUTION ||
        n->out[1] >= 0 || n->out[0] < 0)
        return false;
    return n->nxin >= 2 && n->xin[0].ndim == 4 && n->xin[1].ndim == 4;
}

/* The view reads all of buffer b in its own order (offset 0, its shape and
 * strides). */
static bool whole_view(const ptc_lview *v, const ptc_lbuf *b)
{
    if (v->ndim != b->ndim || !ptc_dim_is_static(v->offset) || v->offset.value != 0)
        return false;
    for (int d = 0; d < b->ndim; d++)
        if (!ptc_dim_eq(v->sizes[d], b->shape[d]) ||
            (!ptc_dim_eq(v->strides[d], b->strides[d]) &&
             !(ptc_dim_is_static(v->sizes[d]) && v->sizes[d].value == 1)))
            return false;
    return true;
}

/* A pointwise or reduction node whose outputs all have its 4 ranges as
 * their shape: its variables can be renamed to iterate in another order. */
static bool renamable_writer(const ptc_lprog *p, const ptc_lnode *n)
{
    if (n->kind == PTC_LN_EXTERN || n->ndim != 4)
        return false;
    for (int o = 0; o < 2; o++) {
        const ptc_lbuf *b = n->out[o] >= 0 ? p->bufs[n->out[o]] : NULL;
        if (!b)
            continue;
        if (b->ndim != 4)
            return false;
        for (int d = 0; d < 4; d++)
            if (!ptc_dim_eq(n->ranges[d], b->shape[d]))
                return false;
    }
    return true;
}

/* Can node w's outputs be stored channels-last? 4-d temporaries written by a
 * renamable node or a 2-d convolution. */
static bool can_permute(const ptc_lprog *p, const ptc_lnode *w)
{
    if (!w || (!is_conv2d(w) && !renamable_writer(p, w)))
        return false;
    for (int o = 0; o < 2; o++) {
        const ptc_lbuf *b = w->out[o] >= 0 ? p->bufs[w->out[o]] : NULL;
        if (b && (b->kind != PTC_LB_TEMP || b->removed || b->ndim != 4 || b->permuted))
            return false;
    }
    return w->out[0] >= 0;
}

/* Does node n read a channels-last buffer at its own batch and channel
 * (load index dims 0 and 1 are variables 0 and 1)? */
static bool follows_channels_last(const ptc_lnode *n, const bool *cl)
{
    for (int i = 0; i < n->body.n; i++) {
        const ptc_lexpr *e = &n->body.e[i];
        if (e->op == PTC_L_LOAD && cl[e->buf] && e->nidx == 4 && ptc_ix_is_var(e->idx[0], 0) &&
            ptc_ix_is_var(e->idx[1], 1))
            return true;
    }
    return false;
}

/* Stored stride of logical dim `dim` of a channels-last buffer of logical
 * shape s. */
static ptc_dim stored_stride(ptc_arena *a, const ptc_dim *s, int dim)
{
    int at = 0;
    while (channels_last_perm[at] != dim)
        at++;
    ptc_dim st = ptc_dim_c(1);
    for (int q = 3; q > at; q--)
        st = ptc_dim_mul(a, st, s[channels_last_perm[q]]);
    return st;
}

/* Rewrites extern view v of b (logical, contiguous) for b stored
 * channels-last: each view dim of size > 1 walks one logical dim of b with
 * that dim's stride. False (unchanged) for views it cannot express. */
static bool remap_view(ptc_arena *a, const ptc_lbuf *b, ptc_lview *v, bool apply)
{
    if (!ptc_dim_is_static(v->offset) || v->offset.value != 0)
        return false;
    ptc_dim strides[PTC_MAX_DIMS];
    for (int j = 0; j < v->ndim; j++) {
        strides[j] = v->strides[j];
        if (ptc_dim_is_static(v->sizes[j]) && v->sizes[j].value == 1)
            continue;
        int dim = -1;
        for (int d = 0; d < 4 && dim < 0; d++)
            if (ptc_dim_eq(v->strides[j], b->strides[d]) && ptc_dim_eq(v->sizes[j], b->shape[d]))
                dim = d;
        if (dim < 0)
            return false;
        strides[j] = stored_stride(a, b->shape, dim);
    }
    for (int j = 0; apply && j < v->ndim; j++)
        v->strides[j] = strides[j];
    return true;
}

/* Marks each buffer some extern reads through a view remap_view cannot
 * express (one pass over the externs). */
static void find_unfollowable(ptc_arena *a, const ptc_lprog *p, bool *bad)
{
    for (int r = 0; r < p->nnodes; r++) {
        ptc_lnode *n = p->nodes[r];
        if (!n || n->kind != PTC_LN_EXTERN)
            continue;
        for (int i = 0; i < n->nxin; i++) {
            int b = n->xin[i].buf;
            if (b >= 0 && p->bufs[b]->ndim == 4 && !remap_view(a, p->bufs[b], &n->xin[i], false))
                bad[b] = true;
        }
    }
}

static void set_outputs(const ptc_lnode *w, bool *cl, bool v)
{
    for (int o = 0; o < 2; o++)
        if (w->out[o] >= 0)
            cl[w->out[o]] = v;
}

/* Chooses the channels-last buffers (cl[b]); returns how many writers store
 * channels-last. */
static int choose(ptc_arena *a, const ptc_lprog *p, bool *cl)
{
    int n = 0;
    /* a convolution's input or weight that ptc writes (a weight cast under
     * autocast) is written channels-last, unless the convolution's result
     * must be contiguous (a graph output): torch would return it
     * channels-last and the runtime copy it, and given a contiguous weight
     * torch's convolution copies it into its input's layout every call */
    for (int i = 0; i < p->nnodes; i++) {
        const ptc_lnode *c = p->nodes[i];
        if (!c || !is_conv2d(c) || !can_permute(p, c))
            continue;
        for (int k = 0; k < 2; k++) {
            const ptc_lbuf *in = c->xin[k].buf >= 0 ? p->bufs[c->xin[k].buf] : NULL;
            if (in && in->def >= 0 && can_permute(p, p->nodes[in->def]) &&
                whole_view(&c->xin[k], in))
                set_outputs(p->nodes[in->def], cl, true);
        }
    }
    bool *bad = calloc((size_t)p->nbufs + 1, 1);
    find_unfollowable(a, p, bad);
    for (int i = 0; i < p->nnodes; i++) {
        const ptc_lnode *w = p->nodes[i];
        if (!can_permute(p, w))
            continue;
        bool want = cl[w->out[0]] || is_conv2d(w) || follows_channels_last(w, cl);
        want = want && !bad[w->out[0]] && (w->out[1] < 0 || !bad[w->out[1]]);
        set_outputs(w, cl, want);
        n += want;
    }
    free(bad);
    return n;
}

/* ---- rewriting ---------------------------------------------------------------- */

/* Load indices of a channels-last buffer listed in stored order. */
static void permute_loads(ptc_arena *a, ptc_lnode *n, const bool *cl)
{
    for (int i = 0; i < n->body.n; i++) {
        ptc_lexpr *e = &n->body.e[i];
        if (e->op != PTC_L_LOAD || !cl[e->buf])
            continue;
        const ptc_ix **idx = PTC_NEWN(a, const ptc_ix *, 4);
        for (int d = 0; d < 4; d++)
            idx[d] = e->idx[channels_last_perm[d]];
        e->idx = idx;
    }
}

/* Node w iterates its 4 ranges in stored order: variable perm[d] becomes d. */
static void rename_writer(ptc_arena *a, ptc_lnode *w)
{
    ptc_dim logical[4];
    memcpy(logical, w->ranges, sizeof logical);
    const ptc_ix *vars[4];
    for (int d = 0; d < 4; d++) {
        w->ranges[d] = logical[channels_last_perm[d]];
        vars[channels_last_perm[d]] = ptc_ix_var(a, d, w->ranges[d]);
    }
    for (int i = 0; i < w->body.n; i++) {
        ptc_lexpr *e = &w->body.e[i];
        if (e->op == PTC_L_LOAD)
            for (int d = 0; d < e->nidx; d++)
                e->idx[d] = ptc_ix_subst(a, e->idx[d], vars, 4, NULL, 0);
        else if (e->ix)
            e->ix = ptc_ix_subst(a, e->ix, vars, 4, NULL, 0);
    }
}

/* Buffer b's shape and strides become the stored NHWC order. */
static void store_channels_last(ptc_arena *a, ptc_lbuf *b)
{
    ptc_dim logical[4];
    memcpy(logical, b->shape, sizeof logical);
    ptc_dim s = ptc_dim_c(1);
    for (int d = 3; d >= 0; d--) {
        b->perm[d] = channels_last_perm[d];
        b->shape[d] = logical[channels_last_perm[d]];
        b->strides[d] = s;
        s = ptc_dim_mul(a, s, b->shape[d]);
    }
    b->permuted = true;
}

static void apply(ptc_arena *a, ptc_lprog *p, const bool *cl)
{
    for (int i = 0; i < p->nnodes; i++) {
        ptc_lnode *n = p->nodes[i];
        if (!n)
            continue;
        if (n->kind == PTC_LN_EXTERN) {
            for (int k = 0; k < n->nxin; k++)
                if (n->xin[k].buf >= 0 && cl[n->xin[k].buf])
                    remap_view(a, p->bufs[n->xin[k].buf], &n->xin[k], true);
            continue;
        }
        /* the writer's own loads are renamed with its other indices */
        permute_loads(a, n, cl);
        if (n->out[0] >= 0 && cl[n->out[0]])
            rename_writer(a, n);
    }
    for (int b = 0; b < p->nbufs; b++)
        if (cl[b])
            store_channels_last(a, p->bufs[b]);
}

/* ---- conversions at the graph's boundary ---------------------------------------- */

/* Convolution c, whose result is channels-last, reads operand k (its input
 * or its weight) from a whole buffer in the user's layout: it reads a
 * channels-last copy (written by a kernel just before it) instead, so torch
 * returns the result in the planned layout and copies no weight into it. */
static void convert_operand(ptc_lprog *p, ptc_lnode *c, int k, bool **cl)
{
    const ptc_lbuf *src = p->bufs[c->xin[k].buf];
    ptc_lbuf *nb = ptc_lprog_add_buf(p, src->dtype, 4, src->shape, PTC_LB_TEMP);
    *cl = realloc(*cl, (size_t)p->nbufs);
    (*cl)[nb->id] = true;
    ptc_lprog_insert_copy(p, c->id, src->id, nb->id, c,
                          k == 0 ? "to_channels_last" : "weight_to_channels_last");
    c->xin[k].buf = nb->id;
}

/* Is b stored in the same memory order contiguous and channels-last (its
 * channels or its planes of size 1: a 1x1 or depthwise weight)? torch
 * copies nothing for such a weight. */
static bool same_either_way(const ptc_lbuf *b)
{
    const ptc_dim *s = b->shape;
    if (!ptc_dim_is_static(s[1]) || !ptc_dim_is_static(s[2]) || !ptc_dim_is_static(s[3]))
        return false;
    return s[1].value == 1 || s[2].value * s[3].value == 1;
}

/* Are b's strides contiguous (dims of size 1 aside)? */
static bool stored_contiguous(ptc_arena *a, const ptc_lbuf *b)
{
    ptc_dim want = ptc_dim_c(1);
    for (int d = b->ndim - 1; d >= 0; d--) {
        bool one = ptc_dim_is_static(b->shape[d]) && b->shape[d].value == 1;
        if (!one && !ptc_dim_eq(b->strides[d], want))
            return false;
        want = ptc_dim_mul(a, want, b->shape[d]);
    }
    return true;
}

/* Should convolution c's operand k be converted? Its input: a whole buffer
 * not planned channels-last. Its weight: a whole graph input stored
 * contiguous (a weight ptc writes is planned by choose; a channels-last one
 * is used as it is), unless the caller hands convolutions kept channels-last
 * weights (weight_cache.c), and not one stored the same either way. */
static bool wants_conversion(ptc_lprog *p, const ptc_lnode *c, int k, const bool *cl,
                             bool weights_kept)
{
    if (c->xin[k].buf < 0)
        return false;
    const ptc_lbuf *in = p->bufs[c->xin[k].buf];
    if (cl[in->id] || in->ndim != 4 || !whole_view(&c->xin[k], in))
        return false;
    return k == 0 || (in->kind == PTC_LB_INPUT && !weights_kept && !same_either_way(in) &&
                      stored_contiguous(p->arena, in));
}

/* Converts the operands wants_conversion names. A weight input that
 * several convolutions read (a module applied twice) is converted once,
 * before the first of them, and the later ones read that copy. */
static int convert_operands(ptc_lprog *p, bool **cl, bool weights_kept)
{
    int n = 0, nbufs = p->nbufs;
    int *converted = calloc((size_t)nbufs + 1, sizeof *converted); /* weight buf -> copy + 1 */
    for (int i = 0; i < p->nnodes; i++) {
        ptc_lnode *c = p->nodes[i];
        if (!c || !is_conv2d(c) || !(*cl)[c->out[0]])
            continue;
        for (int k = 0; k < 2; k++) {
            if (!wants_conversion(p, c, k, *cl, weights_kept))
                continue;
            int src = c->xin[k].buf;
            if (k == 1 && converted && converted[src]) {
                c->xin[k].buf = converted[src] - 1;
                continue;
            }
            convert_operand(p, c, k, cl);
            if (k == 1 && converted && src < nbufs)
                converted[src] = c->xin[k].buf + 1;
            n++;
            i++; /* c moved one place on */
        }
    }
    free(converted);
    return n;
}

/* PTC_LAYOUT=contiguous turns planning off, channels_last turns it on;
 * unset, it is on unless the program asked for contiguous layouts; anything
 * else warns once and keeps the program's choice. */
static bool planning_off(bool contiguous)
{
    static int warned;
    const char *v = getenv("PTC_LAYOUT");
    if (!v || !*v)
        return contiguous;
    if (strcmp(v, "channels_last") == 0)
        return false;
    if (strcmp(v, "contiguous") == 0)
        return true;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        fprintf(stderr,
                "ptc: warning: PTC_LAYOUT=%s is neither contiguous nor channels_last; "
                "layouts are planned as by default\n",
                v);
    return contiguous;
}

int ptc_layout_plan(ptc_lprog *p, bool contiguous, bool weights_kept)
{
    bool any_conv = false;
    for (int i = 0; i < p->nnodes && !any_conv; i++)
        any_conv = p->nodes[i] && is_conv2d(p->nodes[i]);
    if (!any_conv || planning_off(contiguous))
        return 0;
    bool *cl = calloc((size_t)p->nbufs + 1, 1);
    int n = choose(p->arena, p, cl);
    if (n > 0) {
        n += convert_operands(p, &cl, weights_kept);
        apply(p->arena, p, cl);
    }
    free(cl);
    return n;
}

void ptc_lbuf_logical(const ptc_lbuf *b, const int64_t *stored_sizes, int64_t *sizes,
                      int64_t *strides)
{
    if (b->padded) {
        for (int d = 0; d < b->ndim; d++) {
            sizes[d] = stored_sizes[d];
            strides[d] = b->strides[d].value;
        }
        return;
    }
    int64_t s = 1;
    for (int d = b->ndim - 1; d >= 0; d--) {
        int dim = b->permuted ? b->perm[d] : d;
        sizes[dim] = stored_sizes[d];
        strides[dim] = s;
        s *= stored_sizes[d];
    }
}

int64_t ptc_lbuf_elems(const ptc_lbuf *b, const int64_t *stored_sizes)
{
    int64_t n = 1;
    for (int d = 0; d < b->ndim; d++)
        n *= stored_sizes[d];
    if (b->padded && n > 0)
        n = stored_sizes[0] * b->strides[0].value;
    return n;
}
