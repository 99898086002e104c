/* Small reductions become pointwise, before inlining.
 *
 * A pooling window (max_pool2d's 3x3) is a reduction of a few elements per
 * output: as a reduction its loop is the innermost one, too short to
 * vectorise, so each output element was reduced lane by lane in scalar code
 * — and in a channels-last layout the contiguous dim, C, is an outer one.
 * Unrolled into one pointwise body (the reduced value at each window point,
 * combined with maximum / minimum / add), the node iterates only its output
 * and its inner loop (C, channels-last) is vectorised like any elementwise
 * kernel: 9 vector loads per 8 outputs instead of 72 scalar ones.
 *
 * Before that, dead nodes go: a pointwise or reduction node none of whose
 * outputs is read, and the index output of an argmax no node reads (eval
 * max_pool2d's indices), which makes it a max.
 */
#include "lower/lower_int.h"

#include <stdlib.h>

/* Reductions up to this many elements per output are unrolled. */
enum { UNROLL_MAX_ELEMS = 16 };

/* Reads of each buffer by live nodes (loads counted once per node). */
static void count_reads(const ptc_lprog *p, int *reads)
{
    for (int i = 0; i < p->nnodes; i++) {
        const ptc_lnode *n = p->nodes[i];
        if (!n)
            continue;
        for (int k = 0; k < ptc_lnode_nslots(n); k++) {
            int b = ptc_lnode_slot_buf(n, k);
            if (b >= 0)
                reads[b]++;
        }
    }
}

static void drop_reads(const ptc_lnode *n, int *reads)
{
    for (int k = 0; k < n->body.n; k++)
        if (n->body.e[k].op == PTC_L_LOAD)
            reads[n->body.e[k].buf]--;
}

static bool unread_temp(const ptc_lprog *p, int buf, const int *reads)
{
    return buf < 0 || (p->bufs[buf]->kind == PTC_LB_TEMP && reads[buf] == 0);
}

/* Removes dead nodes, last first so that a chain dies whole (not one with a
 * CHECK: eager raises its error); an argmax whose index nobody reads becomes
 * a max of its value. */
static void remove_dead(ptc_lprog *p)
{
    int *reads = calloc((size_t)p->nbufs + 1, sizeof(int));
    count_reads(p, reads);
    for (int i = p->nnodes - 1; i >= 0; i--) {
        ptc_lnode *n = p->nodes[i];
        if (!n || n->kind == PTC_LN_EXTERN)
            continue;
        bool checks = false;
        for (int k = 0; k < n->body.n; k++)
            checks |= n->body.e[k].op == PTC_L_CHECK;
        if (!checks && unread_temp(p, n->out[0], reads) && unread_temp(p, n->out[1], reads)) {
            drop_reads(n, reads);
            for (int o = 0; o < 2; o++)
                if (n->out[o] >= 0)
                    p->bufs[n->out[o]]->removed = true;
            p->nodes[i] = NULL;
            continue;
        }
        bool arg = n->kind == PTC_LN_REDUCTION &&
                   (n->reduce == PTC_RED_ARGMAX || n->reduce == PTC_RED_ARGMIN);
        if (arg && n->out[1] >= 0 && unread_temp(p, n->out[0], reads)) {
            p->bufs[n->out[0]]->removed = true;
            n->reduce = n->reduce == PTC_RED_ARGMAX ? PTC_RED_MAX : PTC_RED_MIN;
            n->out[0] = n->out[1];
            n->out[1] = -1;
        }
    }
    free(reads);
}

/* The combining op of reduction kind r, or -1 where it is not unrolled. */
static int combine_op(int r)
{
    switch (r) {
    case PTC_RED_SUM:
        return PTC_L_ADD;
    case PTC_RED_MAX:
        return PTC_L_MAXIMUM;
    case PTC_RED_MIN:
        return PTC_L_MINIMUM;
    default:
        return -1;
    }
}

static int64_t static_count(const ptc_dim *d, int n)
{
    int64_t c = 1;
    for (int i = 0; i < n; i++) {
        if (!ptc_dim_is_static(d[i]))
            return -1;
        c *= d[i].value;
    }
    return c;
}

static bool unrollable(const ptc_lnode *n)
{
    if (!n || n->kind != PTC_LN_REDUCTION || n->nred == 0 || n->out[1] >= 0 ||
        combine_op(n->reduce) < 0 || !ptc_dtype_is_float(n->body.e[n->value].dtype))
        return false;
    int64_t count = static_count(n->red, n->nred);
    return count > 0 && count <= UNROLL_MAX_ELEMS &&
           count * n->body.n <= PTC_KERNEL_MAX_ENTRIES / 2;
}

/* n's value at each reduction point, combined in order, as one pointwise
 * body over n's ranges. */
static void unroll(ptc_arena *a, ptc_lnode *n)
{
    int nvars = n->ndim + n->nred;
    const ptc_ix *vars[2 * PTC_MAX_DIMS];
    for (int i = 0; i < n->ndim; i++)
        vars[i] = ptc_ix_var(a, i, n->ranges[i]);
    int64_t count = static_count(n->red, n->nred);
    ptc_dtype dt = n->body.e[n->value].dtype;
    /* a sum of 16-bit floats adds in float32, as the reduction's accumulator
     * (and eager's) did, and rounds once at the end */
    bool narrow = dt == PTC_F16 || dt == PTC_BF16;
    ptc_dtype acc_dt = n->reduce == PTC_RED_SUM && narrow ? PTC_F32 : dt;
    int op = combine_op(n->reduce);
    ptc_lbody body = {0};
    int acc = -1;
    for (int64_t point = 0; point < count; point++) {
        int64_t rest = point;
        for (int r = n->nred - 1; r >= 0; r--) {
            vars[n->ndim + r] = ptc_ix_int(a, rest % n->red[r].value);
            rest /= n->red[r].value;
        }
        int v = ptc_body_copy(a, &body, &n->body, n->value, vars, nvars, -1);
        v = ptc_lbody_cast(a, &body, acc_dt, v);
        acc = acc < 0 ? v : ptc_lbody_binary(a, &body, op, acc_dt, acc, v);
    }
    n->kind = PTC_LN_POINTWISE;
    n->nred = 0;
    n->body = body;
    n->value = ptc_lbody_cast(a, &n->body, dt, acc);
}

int ptc_unroll_small_reductions(ptc_lprog *p)
{
    remove_dead(p);
    int n = 0;
    for (int i = 0; i < p->nnodes; i++)
        if (unrollable(p->nodes[i])) {
            unroll(p->arena, p->nodes[i]);
            n++;
        }
    return n;
}
