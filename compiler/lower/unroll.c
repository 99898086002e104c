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
 * An argmax / argmin (max_pool2d's indices, read by its backward in
 * training) unrolls the same way into a scan that carries the best value
 * and its point number through `where`s, with the reduction's rules for
 * ties and NaNs; its value output, where there is one, is a second node
 * that reads the value at the chosen point. In resnet18's training step the
 * kernel of BatchNorm, relu and max_pool2d went from about 7 ms to 1.4 ms.
 *
 * Before that, dead nodes go: a pointwise or reduction node none of whose
 * outputs is read, and the index output of an argmax no node reads (eval
 * max_pool2d's indices), which makes it a max.
 */
#include "lower/lower_int.h"

#include <stdlib.h>
#include <string.h>

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
            n->nan_last = false;
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

static bool is_arg(int r) { return r == PTC_RED_ARGMAX || r == PTC_RED_ARGMIN; }

static bool unrollable(const ptc_lnode *n)
{
    if (!n || n->kind != PTC_LN_REDUCTION || n->nred == 0 ||
        !ptc_dtype_is_float(n->body.e[n->value].dtype))
        return false;
    if (!is_arg(n->reduce) && (n->out[1] >= 0 || combine_op(n->reduce) < 0))
        return false;
    int64_t count = static_count(n->red, n->nred);
    return count > 0 && count <= UNROLL_MAX_ELEMS &&
           count * n->body.n <= PTC_KERNEL_MAX_ENTRIES / 2;
}

/* Binds n's reduction variables to reduction point `point` (row-major, the
 * order a reduction visits them). */
static void bind_point(ptc_arena *a, const ptc_lnode *n, int64_t point, const ptc_ix **vars)
{
    for (int r = n->nred - 1; r >= 0; r--) {
        vars[n->ndim + r] = ptc_ix_int(a, point % n->red[r].value);
        point /= n->red[r].value;
    }
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
        bind_point(a, n, point, vars);
        int v = ptc_body_copy(a, &body, &n->body, n->value, vars, nvars, -1);
        v = ptc_lbody_cast(a, &body, acc_dt, v);
        acc = acc < 0 ? v : ptc_lbody_binary(a, &body, op, acc_dt, acc, v);
    }
    n->kind = PTC_LN_POINTWISE;
    n->nred = 0;
    n->body = body;
    n->value = ptc_lbody_cast(a, &n->body, dt, acc);
}

/* Does value v at a later point take over from the best so far, best? As
 * the reduction's combine (codegen's arg_better): strictly greater (less),
 * so ties keep the first index; a NaN beats a number, and an earlier NaN
 * only where nan_last. */
static int takes_over(ptc_arena *a, ptc_lbody *b, const ptc_lnode *n, int best, int v)
{
    int cmp = n->reduce == PTC_RED_ARGMAX ? PTC_L_GT : PTC_L_LT;
    int better = ptc_lbody_binary(a, b, cmp, PTC_BOOL, v, best);
    int nan = ptc_lbody_unary(a, b, PTC_L_ISNAN, PTC_BOOL, v);
    if (!n->nan_last) {
        int best_is_num = ptc_lbody_unary(a, b, PTC_L_LOGICAL_NOT, PTC_BOOL,
                                          ptc_lbody_unary(a, b, PTC_L_ISNAN, PTC_BOOL, best));
        nan = ptc_lbody_binary(a, b, PTC_L_BITWISE_AND, PTC_BOOL, nan, best_is_num);
    }
    return ptc_lbody_binary(a, b, PTC_L_BITWISE_OR, PTC_BOOL, better, nan);
}

/* The value at the point the index node chose: n's body with its reduction
 * variables read from the index node's output (the point number decoded
 * into coordinates), a gather of one point instead of a second scan. */
static void value_at_best(ptc_lprog *p, const ptc_lnode *n, ptc_lnode *val, int index_buf)
{
    ptc_arena *a = p->arena;
    ptc_lbody *b = &val->body;
    const ptc_ix *vars[2 * PTC_MAX_DIMS];
    for (int i = 0; i < n->ndim; i++)
        vars[i] = ptc_ix_var(a, i, n->ranges[i]);
    int point = ptc_lbody_load(a, b, index_buf, PTC_I64, n->ndim, vars);
    int64_t stride = 1;
    for (int r = n->nred - 1; r >= 0; r--) {
        int c = point;
        if (stride > 1)
            c = ptc_lbody_binary(a, b, PTC_L_FLOOR_DIVIDE, PTC_I64, c,
                                 ptc_lbody_const_i(a, b, stride, PTC_I64));
        if (r > 0)
            c = ptc_lbody_binary(a, b, PTC_L_REMAINDER, PTC_I64, c,
                                 ptc_lbody_const_i(a, b, n->red[r].value, PTC_I64));
        vars[n->ndim + r] = ptc_ix_val(a, c, n->red[r]);
        stride *= n->red[r].value;
    }
    val->value = ptc_body_copy(a, b, &n->body, n->value, vars, n->ndim + n->nred, -1);
}

/* An argmax / argmin of a few points as pointwise nodes: n becomes a scan
 * over the points that keeps the best value and its point number (the
 * linear reduction index the reduction stored) and, where the value is an
 * output too, a node inserted after it reads the value at that point.
 * Returns the nodes it added. */
static int unroll_arg(ptc_lprog *p, ptc_lnode *n)
{
    ptc_arena *a = p->arena;
    int nvars = n->ndim + n->nred;
    const ptc_ix *vars[2 * PTC_MAX_DIMS];
    for (int i = 0; i < n->ndim; i++)
        vars[i] = ptc_ix_var(a, i, n->ranges[i]);
    int64_t count = static_count(n->red, n->nred);
    ptc_lbody scan = {0};
    int best = -1, best_at = -1;
    for (int64_t point = 0; point < count; point++) {
        bind_point(a, n, point, vars);
        int v = ptc_body_copy(a, &scan, &n->body, n->value, vars, nvars, -1);
        int at = ptc_lbody_const_i(a, &scan, point, PTC_I64);
        if (best < 0) {
            best = v, best_at = at;
            continue;
        }
        int take = takes_over(a, &scan, n, best, v);
        best = ptc_lbody_where(a, &scan, scan.e[v].dtype, take, v, best);
        best_at = ptc_lbody_where(a, &scan, PTC_I64, take, at, best_at);
    }
    int added = 0;
    if (n->out[1] >= 0) {
        ptc_lnode *val = ptc_lprog_insert_node(p, n->id + 1, PTC_LN_POINTWISE);
        val->label = n->label;
        val->ndim = n->ndim;
        memcpy(val->ranges, n->ranges, sizeof n->ranges);
        memcpy(val->ops, n->ops, sizeof n->ops);
        value_at_best(p, n, val, n->out[0]);
        val->out[0] = n->out[1];
        p->bufs[val->out[0]]->def = val->id;
        ptc_lnode_set_prov(p, val, n->nprov, n->prov);
        added++;
    }
    n->kind = PTC_LN_POINTWISE;
    n->nred = 0;
    n->nan_last = false;
    n->out[1] = -1;
    n->body = (ptc_lbody){0};
    n->value = ptc_body_copy(a, &n->body, &scan, best_at, NULL, 0, -1);
    return added;
}

int ptc_unroll_small_reductions(ptc_lprog *p)
{
    remove_dead(p);
    int n = 0;
    for (int i = 0; i < p->nnodes; i++) {
        ptc_lnode *node = p->nodes[i];
        if (!unrollable(node))
            continue;
        if (is_arg(node->reduce))
            i += unroll_arg(p, node);
        else
            unroll(p->arena, node);
        n++;
    }
    return n;
}
