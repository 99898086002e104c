/* Row mode (plan.c): the loops of kernels whose groups all run over the
 * same row, unrolled. Lane t handles chunks j*T + t of W elements, loads of
 * read-only buffers are emitted once per chunk and reused by later groups
 * (the row stays in registers between softmax's max, sum and division), and
 * reduction states are W lanes wide until a final in-thread combine.
 */
#include "codegen/cuda/kernel.h"

#include <stdlib.h>

/* Chunk j of this lane: elements f = (j*T + t)*W .. +W-1 of the row, bound to
 * the group variables from `first`. *valid is NULL when every lane's chunk
 * exists, else an i1 (the index is clamped so that loads stay in bounds). */
static void row_chunk(gcg *c, const kctx *k, int j, const ptc_dim *ranges, int first,
                      LLVMValueRef *valid)
{
    const gplan *p = c->plan;
    int64_t nc = p->row_n / c->W;
    LLVMValueRef q = LLVMBuildAdd(c->b, ixc(c, (int64_t)j * k->T), k->t, "");
    *valid = NULL;
    if (nc % k->T && (int64_t)(j + 1) * k->T > nc) {
        *valid = LLVMBuildICmp(c->b, LLVMIntSLT, q, ixc(c, nc), "");
        q = LLVMBuildSelect(c->b, *valid, q, ixc(c, nc - 1), "");
    }
    LLVMValueRef f = c->W > 1 ? LLVMBuildNSWMul(c->b, q, ixc(c, c->W), "") : q;
    g_decompose(c, f, ranges, p->row_ndim, first);
    c->cache_j = j;
}

static void guarded_store(gcg *c, LLVMValueRef valid, int buf, const ptc_ix *off, LLVMValueRef v,
                          LLVMValueRef *vals)
{
    LLVMBasicBlockRef join = valid ? g_if_open(c, valid, "row.store") : NULL;
    g_store(c, buf, off, v, vals, c->W);
    if (join)
        g_if_close(c, join);
}

static void row_pw_member(gcg *c, const ptc_kmember *mem, ptc_emit_fwd *fw, LLVMValueRef valid)
{
    const ptc_lnode *n = c->s->prog->nodes[mem->node];
    LLVMValueRef *v = ptc_emit_body(&c->em, &mem->body, c->W, fw);
    guarded_store(c, valid, n->out[0], mem->store[0], v[mem->value], v);
    ptc_emit_fwd_add(fw, n->out[0], mem->store[0], v[mem->value]);
    free(v);
}

/* Issues the read-only loads of every chunk of reduction group G first:
 * its statistics need the whole row. A pointwise group loads chunk by
 * chunk, and ptxas hoists what its registers allow: layer_norm's weights
 * issued together (after the statistics) were 48 f32 values a lane beside
 * the row's 24, spilled at 64 registers. */
void g_row_prefetch(gcg *c, const kctx *k, const ptc_kgroup *G)
{
    const ptc_dim *ranges = G->reduction ? G->red : G->inner;
    int first = c->k->nouter + (G->reduction ? G->ninner : 0);
    for (int j = 0; j < c->plan->row_j; j++) {
        LLVMValueRef valid;
        row_chunk(c, k, j, ranges, first, &valid);
        for (int m = 0; m < G->nmembers; m++)
            g_prefetch(c, &G->members[m].body, c->W);
    }
}

void g_emit_row_pw_group(gcg *c, const kctx *k, const ptc_kgroup *G)
{
    for (int j = 0; j < c->plan->row_j; j++) {
        LLVMValueRef valid;
        row_chunk(c, k, j, G->inner, c->k->nouter, &valid);
        ptc_emit_fwd fw;
        fw.n = 0;
        for (int m = 0; m < G->nmembers; m++)
            row_pw_member(c, &G->members[m], &fw, valid);
    }
}

/* A reduction member of a row group: scalar and W-lane accumulators. A
 * Welford member sums first and keeps each chunk's values for its second
 * pass (row_second_pass). */
static void row_red_init(gcg *c, red *r, const ptc_kmember *mem, const ptc_lnode *n)
{
    int w = c->W;
    r->mem = mem;
    r->n = n;
    r->dt = mem->body.e[mem->value].dtype;
    r->t = ptc_emit_compute_type(&c->em, r->dt);
    r->reduce = n->reduce == PTC_RED_WELFORD ? PTC_RED_SUM : n->reduce;
    if (n->reduce == PTC_RED_WELFORD) {
        r->row_x = calloc((size_t)c->plan->row_j, sizeof *r->row_x);
        r->row_valid = calloc((size_t)c->plan->row_j, sizeof *r->row_valid);
    }
    g_state_allocas(c, r, &r->acc, 1);
    g_state_allocas(c, r, &r->vacc, w);
    g_lanes_reset(c, r);
}

/* The second pass of the group's Welford members. The first summed the row:
 * the mean is sum / n, and M2 the sum of the squared deviations from it over
 * the values kept in registers; the state becomes Welford's (mean, M2, n).
 * Over a row in registers this is cheaper than Welford's update (a division
 * per element, and per lane merge) and at least as accurate. */
static void row_second_pass(gcg *c, const kctx *k, red *reds, int nred)
{
    LLVMBuilderRef b = c->b;
    red *two = calloc((size_t)nred + 1, sizeof *two);
    int ntwo = 0;
    for (int i = 0; i < nred; i++) {
        red *r = &reds[i];
        if (!r->row_x)
            continue;
        LLVMValueRef count = LLVMConstReal(r->t, (double)c->plan->row_n);
        LLVMValueRef mean = LLVMBuildFDiv(b, load_(c, r->t, r->acc.v), count, "mean");
        LLVMValueRef means = g_splat(c, mean, c->W);
        g_lanes_reset(c, r);
        for (int j = 0; j < c->plan->row_j; j++) {
            LLVMValueRef d = LLVMBuildFSub(b, r->row_x[j], means, "");
            g_lanes_update(c, r, LLVMBuildFMul(b, d, d, ""), NULL, r->row_valid[j]);
        }
        g_lanes_fold(c, r);
        store_(c, r->acc.m, mean);
        store_(c, r->acc.n, count);
        two[ntwo++] = *r;
    }
    if (k->T > 1 && ntwo)
        g_red_across(c, k, two, ntwo, k->T);
    for (int i = 0; i < nred; i++)
        if (reds[i].row_x) {
            store_(c, reds[i].acc.m2, load_(c, reds[i].t, reds[i].acc.v));
            reds[i].reduce = PTC_RED_WELFORD;
        }
    free(two);
}

/* Later groups of this iteration take out k of r from registers instead of
 * loading what lane 0 stores (every lane holds the final state: the
 * combines are commutative and a block's threads read the same slots), as
 * stored: rounded to the buffer's dtype. */
static void row_forward(gcg *c, const red *r, LLVMValueRef outs[2])
{
    gcache *ca = c->cache;
    for (int k = 0; k < 2; k++) {
        int buf = r->n->out[k];
        if (!r->mem->store[k] || buf < 0 || ca->nfwd >= (int)(sizeof ca->fwd / sizeof ca->fwd[0]))
            continue;
        ptc_dtype dt = c->s->prog->bufs[buf]->dtype;
        ca->fwd[ca->nfwd].buf = buf;
        ca->fwd[ca->nfwd].off = r->mem->store[k];
        ca->fwd[ca->nfwd++].val =
            ptc_emit_from_storage(&c->em, ptc_emit_to_storage(&c->em, outs[k], dt, 1), dt, 1);
    }
}

/* One chunk of a row reduction group: its pointwise members, and each
 * reduction member's values folded into its W-lane state. */
static void row_red_chunk(gcg *c, const kctx *k, const ptc_kgroup *G, red *reds, int j,
                          LLVMValueRef iota)
{
    int w = c->W;
    LLVMValueRef valid;
    row_chunk(c, k, j, G->red, c->k->nouter + G->ninner, &valid);
    ptc_emit_fwd fw;
    fw.n = 0;
    int ri = 0;
    for (int m = 0; m < G->nmembers; m++) {
        const ptc_kmember *mem = &G->members[m];
        const ptc_lnode *n = c->s->prog->nodes[mem->node];
        if (n->kind != PTC_LN_REDUCTION) {
            row_pw_member(c, mem, &fw, valid);
            continue;
        }
        red *r = &reds[ri++];
        LLVMValueRef *v = ptc_emit_body(&c->em, &mem->body, w, &fw);
        LLVMValueRef idx = NULL;
        if (is_arg(r)) {
            /* the linear reduction index of each lane: chunk base + lane */
            LLVMValueRef f = LLVMBuildNSWMul(
                c->b, LLVMBuildAdd(c->b, ixc(c, (int64_t)j * k->T), k->t, ""), ixc(c, w), "");
            if (c->ix != c->i64)
                f = LLVMBuildSExt(c->b, f, c->i64, "");
            idx = w > 1 ? LLVMBuildAdd(c->b, g_splat(c, f, w), iota, "") : f;
        }
        if (r->row_x) {
            r->row_x[j] = v[mem->value];
            r->row_valid[j] = valid;
        }
        g_lanes_update(c, r, v[mem->value], idx, valid);
        free(v);
    }
}

void g_emit_row_red_group(gcg *c, const kctx *k, const ptc_kgroup *G)
{
    int w = c->W;
    red *reds = calloc((size_t)G->nmembers + 1, sizeof *reds);
    int nred = 0;
    for (int m = 0; m < G->nmembers; m++) {
        const ptc_lnode *n = c->s->prog->nodes[G->members[m].node];
        if (n->kind == PTC_LN_REDUCTION)
            row_red_init(c, &reds[nred++], &G->members[m], n);
    }
    LLVMValueRef iota = g_iota64(c, w);
    for (int j = 0; j < c->plan->row_j; j++)
        row_red_chunk(c, k, G, reds, j, iota);
    for (int r = 0; r < nred; r++)
        g_lanes_fold(c, &reds[r]);
    if (k->T > 1)
        g_red_across(c, k, reds, nred, k->T);
    row_second_pass(c, k, reds, nred);
    LLVMValueRef(*outs)[2] = calloc((size_t)nred + 1, sizeof *outs);
    for (int r = 0; r < nred; r++) {
        g_red_outputs(c, &reds[r], g_red_load(c, &reds[r]), outs[r]);
        row_forward(c, &reds[r], outs[r]);
    }
    LLVMBasicBlockRef join = NULL;
    if (k->T > 1)
        join = g_if_open(c, LLVMBuildICmp(c->b, LLVMIntEQ, k->t, ixc(c, 0), ""), "red.store");
    for (int r = 0; r < nred; r++)
        g_red_store_outputs(c, &reds[r], outs[r]);
    if (join)
        g_if_close(c, join);
    for (int r = 0; r < nred; r++) {
        free(reds[r].row_x);
        free(reds[r].row_valid);
    }
    free(outs);
    free(reds);
}
