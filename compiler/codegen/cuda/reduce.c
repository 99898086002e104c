/* Reductions outside row mode, and the states every reduction shares.
 *
 * A reduction group's team is Tk x Tr: for (kk = t / Tr; kk < kept; kk +=
 * Tk) each lane folds elements rr = t % Tr, + Tr, ... into its own state,
 * the Tr lanes combine states with butterfly shuffles (then through shared
 * memory across the warps of a block), and lane 0 stores the results.
 * Column mode combines a column's slices in a tree through shared memory;
 * split rows publish each block's partial state to the scratch area, and a
 * row's last block combines them.
 *
 * Reduction states are (value), (value, index) for argmax/argmin with ties
 * going to the first index as torch does, or Welford's (mean, M2, count)
 * merged with Chan's formula.
 */
#include "codegen/cuda/kernel.h"

#include <stdlib.h>

static void red_init(gcg *c, red *r)
{
    double f;
    int64_t i;
    ptc_emit_red_identity(r->reduce, r->dt, &f, &i);
    store_(c, r->acc.v, ptc_emit_kconst(&c->em, r->dt, f, i, 1));
    store_(c, r->acc.i, LLVMConstInt(c->i64, 0, 0));
    if (is_welford(r)) {
        store_(c, r->acc.m, LLVMConstNull(r->t));
        store_(c, r->acc.m2, LLVMConstNull(r->t));
        store_(c, r->acc.n, LLVMConstNull(r->t));
    }
    if (c->W > 1)
        g_lanes_reset(c, r);
}

ptc_red_state g_acc_load(gcg *c, const red *r, const ptc_red_state *acc, int w)
{
    LLVMTypeRef t = g_vec(c, r->t, w);
    ptc_red_state o = {load_(c, t, acc->v), load_(c, g_vec(c, c->i64, w), acc->i), NULL, NULL,
                       NULL};
    if (is_welford(r)) {
        o.m = load_(c, t, acc->m);
        o.m2 = load_(c, t, acc->m2);
        o.n = load_(c, t, acc->n);
    }
    return o;
}

void g_acc_save(gcg *c, const red *r, const ptc_red_state *acc, ptc_red_state s)
{
    store_(c, acc->v, s.v);
    store_(c, acc->i, s.i);
    if (is_welford(r)) {
        store_(c, acc->m, s.m);
        store_(c, acc->m2, s.m2);
        store_(c, acc->n, s.n);
    }
}

ptc_red_state g_red_load(gcg *c, const red *r)
{
    return g_acc_load(c, r, &r->acc, 1);
}
void g_red_save(gcg *c, const red *r, ptc_red_state s)
{
    g_acc_save(c, r, &r->acc, s);
}

/* Combines two states (Chan's merge for Welford). */
ptc_red_state g_red_combine(gcg *c, const red *r, ptc_red_state a, ptc_red_state x)
{
    return ptc_emit_red_combine(&c->em, r->reduce, r->n->nan_last, r->dt, a, x, 1);
}

/* Folds one element (value x, linear reduction index idx) into a state. */
static void red_update(gcg *c, red *r, LLVMValueRef x, LLVMValueRef idx)
{
    LLVMBuilderRef b = c->b;
    if (is_welford(r) && r->chunking) {
        r->chunk[r->nchunk++] = x;
        return;
    }
    if (is_welford(r)) {
        ptc_red_state s = g_red_load(c, r);
        LLVMValueRef n = LLVMBuildFAdd(b, s.n, LLVMConstReal(r->t, 1), "");
        LLVMValueRef delta = LLVMBuildFSub(b, x, s.m, "");
        LLVMValueRef nm = LLVMBuildFAdd(b, s.m, LLVMBuildFDiv(b, delta, n, ""), "");
        s.m2 = LLVMBuildFAdd(b, s.m2, LLVMBuildFMul(b, delta, LLVMBuildFSub(b, x, nm, ""), ""), "");
        s.m = nm;
        s.n = n;
        g_red_save(c, r, s);
        return;
    }
    ptc_red_state a = g_red_load(c, r);
    ptc_red_state e = {x, idx ? idx : a.i, NULL, NULL, NULL};
    g_red_save(c, r, g_red_combine(c, r, a, e));
}

/* ---- W-lane states (row mode, vectorised reductions) ---- */

void g_state_allocas(gcg *c, const red *r, ptc_red_state *acc, int lanes)
{
    acc->v = g_alloca(c, g_vec(c, r->t, lanes), "acc");
    acc->i = g_alloca(c, g_vec(c, c->i64, lanes), "acc.i");
    acc->m = g_alloca(c, g_vec(c, r->t, lanes), "acc.mean");
    acc->m2 = g_alloca(c, g_vec(c, r->t, lanes), "acc.m2");
    acc->n = g_alloca(c, g_vec(c, r->t, lanes), "acc.n");
}

void g_lanes_update(gcg *c, red *r, LLVMValueRef x, LLVMValueRef idx, LLVMValueRef valid)
{
    LLVMBuilderRef b = c->b;
    int w = c->W;
    ptc_red_state s = g_acc_load(c, r, &r->vacc, w), o;
    if (is_welford(r)) {
        /* every lane has seen the same count: one division per chunk */
        o = s;
        LLVMValueRef n0 =
            w > 1 ? LLVMBuildExtractElement(b, s.n, LLVMConstInt(c->i32, 0, 0), "") : s.n;
        LLVMValueRef n1 = LLVMBuildFAdd(b, n0, LLVMConstReal(r->t, 1), "");
        LLVMValueRef inv = g_splat(c, LLVMBuildFDiv(b, LLVMConstReal(r->t, 1), n1, ""), w);
        LLVMValueRef delta = LLVMBuildFSub(b, x, s.m, "");
        o.m = LLVMBuildFAdd(b, s.m, LLVMBuildFMul(b, delta, inv, ""), "");
        o.m2 =
            LLVMBuildFAdd(b, s.m2, LLVMBuildFMul(b, delta, LLVMBuildFSub(b, x, o.m, ""), ""), "");
        o.n = g_splat(c, n1, w);
    } else {
        ptc_red_state e = {x, idx ? idx : s.i, NULL, NULL, NULL};
        o = g_red_combine(c, r, s, e);
    }
    if (valid) {
        o.v = LLVMBuildSelect(b, valid, o.v, s.v, "");
        o.i = LLVMBuildSelect(b, valid, o.i, s.i, "");
        if (is_welford(r)) {
            o.m = LLVMBuildSelect(b, valid, o.m, s.m, "");
            o.m2 = LLVMBuildSelect(b, valid, o.m2, s.m2, "");
            o.n = LLVMBuildSelect(b, valid, o.n, s.n, "");
        }
    }
    g_acc_save(c, r, &r->vacc, o);
}

static LLVMValueRef lane_of(gcg *c, LLVMValueRef v, int l)
{
    return v ? LLVMBuildExtractElement(c->b, v, LLVMConstInt(c->i32, (unsigned)l, 0), "") : NULL;
}

/* The W lanes of a state combined in lane order into the scalar state. */
void g_lanes_fold(gcg *c, red *r)
{
    int w = c->W;
    if (w == 1) {
        g_acc_save(c, r, &r->acc, g_acc_load(c, r, &r->vacc, 1));
        return;
    }
    ptc_red_state s = g_acc_load(c, r, &r->vacc, w);
    ptc_red_state o = {lane_of(c, s.v, 0), lane_of(c, s.i, 0), lane_of(c, s.m, 0),
                       lane_of(c, s.m2, 0), lane_of(c, s.n, 0)};
    for (int l = 1; l < w; l++) {
        ptc_red_state x = {lane_of(c, s.v, l), lane_of(c, s.i, l), lane_of(c, s.m, l),
                           lane_of(c, s.m2, l), lane_of(c, s.n, l)};
        o = g_red_combine(c, r, o, x);
    }
    g_red_save(c, r, o);
}

/* Member r's W-lane accumulators back to the identity of how it combines. */
void g_lanes_reset(gcg *c, red *r)
{
    int w = c->W;
    double f;
    int64_t iv;
    ptc_emit_red_identity(r->reduce, r->dt, &f, &iv);
    store_(c, r->vacc.v, ptc_emit_kconst(&c->em, r->dt, f, iv, w));
    store_(c, r->vacc.i, g_const_i(c->i64, 0, w));
    store_(c, r->vacc.m, LLVMConstNull(g_vec(c, r->t, w)));
    store_(c, r->vacc.m2, LLVMConstNull(g_vec(c, r->t, w)));
    store_(c, r->vacc.n, LLVMConstNull(g_vec(c, r->t, w)));
}

LLVMValueRef g_iota64(gcg *c, int w)
{
    if (w == 1)
        return NULL;
    LLVMValueRef ks[MAX_VEC];
    for (int l = 0; l < w; l++)
        ks[l] = LLVMConstInt(c->i64, (unsigned)l, 0);
    return LLVMConstVector(ks, (unsigned)w);
}

/* Butterfly shuffle of any scalar through 32-bit lanes. */
static LLVMValueRef shfl(gcg *c, LLVMValueRef v, int offset, LLVMValueRef mask)
{
    LLVMBuilderRef b = c->b;
    LLVMTypeRef t = LLVMTypeOf(v);
    LLVMValueRef off = LLVMConstInt(c->i32, (unsigned)offset, 0);
    LLVMValueRef clamp = LLVMConstInt(c->i32, 0x1f, 0);
    LLVMTypeKind kind = LLVMGetTypeKind(t);
    unsigned bits = kind == LLVMIntegerTypeKind  ? LLVMGetIntTypeWidth(t)
                    : kind == LLVMDoubleTypeKind ? 64
                                                 : 32;
    if (bits == 64) {
        LLVMValueRef x = kind == LLVMIntegerTypeKind ? v : LLVMBuildBitCast(b, v, c->i64, "");
        LLVMValueRef lo = LLVMBuildTrunc(b, x, c->i32, "");
        LLVMValueRef hi =
            LLVMBuildTrunc(b, LLVMBuildLShr(b, x, LLVMConstInt(c->i64, 32, 0), ""), c->i32, "");
        LLVMValueRef a1[4] = {mask, lo, off, clamp}, a2[4] = {mask, hi, off, clamp};
        lo = g_intrinsic(c, "llvm.nvvm.shfl.sync.bfly.i32", NULL, 0, a1, 4);
        hi = g_intrinsic(c, "llvm.nvvm.shfl.sync.bfly.i32", NULL, 0, a2, 4);
        LLVMValueRef r = LLVMBuildOr(
            b, LLVMBuildZExt(b, lo, c->i64, ""),
            LLVMBuildShl(b, LLVMBuildZExt(b, hi, c->i64, ""), LLVMConstInt(c->i64, 32, 0), ""), "");
        return kind == LLVMIntegerTypeKind ? r : LLVMBuildBitCast(b, r, t, "");
    }
    LLVMValueRef x;
    if (kind == LLVMFloatTypeKind)
        x = LLVMBuildBitCast(b, v, c->i32, "");
    else if (bits < 32)
        x = LLVMBuildZExt(b, v, c->i32, "");
    else
        x = v;
    LLVMValueRef a[4] = {mask, x, off, clamp};
    LLVMValueRef r = g_intrinsic(c, "llvm.nvvm.shfl.sync.bfly.i32", NULL, 0, a, 4);
    if (kind == LLVMFloatTypeKind)
        return LLVMBuildBitCast(b, r, t, "");
    if (bits < 32)
        return LLVMBuildTrunc(b, r, t, "");
    return r;
}

static ptc_red_state shfl_state(gcg *c, const red *r, ptc_red_state s, int offset,
                                LLVMValueRef mask)
{
    ptc_red_state o = {shfl(c, s.v, offset, mask), NULL, NULL, NULL, NULL};
    if (is_arg(r))
        o.i = shfl(c, s.i, offset, mask);
    else
        o.i = s.i;
    if (is_welford(r)) {
        o.m = shfl(c, s.m, offset, mask);
        o.m2 = shfl(c, s.m2, offset, mask);
        o.n = shfl(c, s.n, offset, mask);
    }
    return o;
}

/* Shared-memory slot `field` of member m for warp w (8 bytes each); in
 * column mode for thread w of the block. */
static LLVMValueRef red_slot(gcg *c, int m, int field, LLVMValueRef warp)
{
    const gplan *p = c->plan;
    int64_t field_bytes = p->col ? (int64_t)p->block * 8 : RED_FIELD_BYTES;
    int64_t member_bytes = p->col ? p->col_fields * field_bytes : RED_MEMBER_BYTES;
    int64_t base = p->smem_team + m * member_bytes + field * field_bytes;
    LLVMValueRef off =
        LLVMBuildAdd(c->b, ixc(c, base), LLVMBuildMul(c->b, warp, ixc(c, 8), ""), "");
    return LLVMBuildInBoundsGEP2(c->b, c->i8, c->smem, &off, 1, "");
}

/* Split rows: the scratch slot `field` of member m's partial state of unit
 * `unit` (row * S + the row's block), after the row counters. */
static LLVMValueRef partial_slot(gcg *c, int m, int field, LLVMValueRef unit)
{
    int64_t unit_bytes = (int64_t)c->plan->split_members * RED_FIELDS * 8;
    LLVMValueRef off = LLVMBuildMul(c->b, unit, ixc(c, unit_bytes), "");
    off = LLVMBuildAdd(c->b, off,
                       ixc(c, PTC_CUDA_SPLIT_COUNTERS + ((int64_t)m * RED_FIELDS + field) * 8), "");
    return LLVMBuildInBoundsGEP2(c->b, c->i8, c->scratch, &off, 1, "");
}

/* Writes member m's state s to its slots for `at`: a warp's (or column
 * mode's thread's) in shared memory, or with `partial` a split row's unit's
 * in the scratch area. */
static void state_put(gcg *c, bool partial, const red *r, int m, ptc_red_state s, LLVMValueRef at)
{
    LLVMValueRef f[5] = {s.v, s.i, s.m, s.m2, s.n};
    for (int k = 0; k < 5; k++)
        if (f[k] && (k != 1 || is_arg(r)) && (k < 2 || is_welford(r)))
            store_(c, partial ? partial_slot(c, m, k, at) : red_slot(c, m, k, at), f[k]);
}

/* The state state_put wrote (like: the fields it does not hold). Another
 * block's partial states are read past the L1 cache (volatile). */
static ptc_red_state state_get(gcg *c, bool partial, const red *r, int m, LLVMValueRef at,
                               ptc_red_state like)
{
    ptc_red_state o = like;
    LLVMValueRef *f[5] = {&o.v, &o.i, &o.m, &o.m2, &o.n};
    for (int k = 0; k < 5; k++) {
        if ((k == 1 && !is_arg(r)) || (k >= 2 && !is_welford(r)))
            continue;
        LLVMValueRef slot = partial ? partial_slot(c, m, k, at) : red_slot(c, m, k, at);
        *f[k] = load_(c, k == 1 ? c->i64 : r->t, slot);
        if (partial)
            LLVMSetVolatile(*f[k], 1);
    }
    return o;
}

/* Combines the states of the Tr lanes sharing each reduction. */
void g_red_across(gcg *c, const kctx *k, red *reds, int nred, int Tr)
{
    int warp_lanes = Tr > 32 ? 32 : Tr;
    LLVMValueRef mask = g_segment_mask(c, k, warp_lanes);
    for (int m = 0; m < nred; m++) {
        ptc_red_state s = g_red_load(c, &reds[m]);
        for (int off = warp_lanes / 2; off >= 1; off /= 2)
            s = g_red_combine(c, &reds[m], s, shfl_state(c, &reds[m], s, off, mask));
        g_red_save(c, &reds[m], s);
    }
    if (Tr <= 32)
        return;
    /* across the warps of the block, through shared memory, in warp order */
    LLVMValueRef warp = LLVMBuildUDiv(c->b, k->tid, ixc(c, 32), "");
    LLVMBasicBlockRef join =
        g_if_open(c, LLVMBuildICmp(c->b, LLVMIntEQ, k->lane, ixc(c, 0), ""), "red.put");
    for (int m = 0; m < nred; m++)
        state_put(c, false, &reds[m], m, g_red_load(c, &reds[m]), warp);
    g_if_close(c, join);
    call0(c, "llvm.nvvm.barrier0");
    for (int m = 0; m < nred; m++) {
        ptc_red_state s = state_get(c, false, &reds[m], m, ixc(c, 0), g_red_load(c, &reds[m]));
        if (c->plan->warps_loop) {
            g_red_save(c, &reds[m], s);
            loop l;
            g_loop_open(c, &l, ixc(c, 1), ixc(c, Tr / 32), ixc(c, 1), "red.warps");
            s = g_red_load(c, &reds[m]);
            s = g_red_combine(c, &reds[m], s, state_get(c, false, &reds[m], m, l.iv, s));
            g_red_save(c, &reds[m], s);
            g_loop_close(c, &l);
            continue;
        }
        for (int w = 1; w < Tr / 32; w++)
            s = g_red_combine(c, &reds[m], s, state_get(c, false, &reds[m], m, ixc(c, w), s));
        g_red_save(c, &reds[m], s);
    }
    call0(c, "llvm.nvvm.barrier0");
}

/* Column mode: combines the states of the T slices of each column of the
 * block (thread tid = slice * C + column) in a tree through shared memory:
 * at each step the slices below `half` fold in the state `half` slices
 * above theirs. The order is the plan's, the same on every run. */
static void col_across(gcg *c, const kctx *k, red *reds, int nred)
{
    int cols = c->plan->block / k->T;
    for (int m = 0; m < nred; m++)
        state_put(c, false, &reds[m], m, g_red_load(c, &reds[m]), k->tid);
    call0(c, "llvm.nvvm.barrier0");
    for (int half = k->T / 2; half >= 1; half /= 2) {
        LLVMBasicBlockRef join =
            g_if_open(c, LLVMBuildICmp(c->b, LLVMIntULT, k->t, ixc(c, half), ""), "col.fold");
        LLVMValueRef above = LLVMBuildAdd(c->b, k->tid, ixc(c, (int64_t)half * cols), "");
        for (int m = 0; m < nred; m++) {
            ptc_red_state s = g_red_load(c, &reds[m]);
            s = g_red_combine(c, &reds[m], s, state_get(c, false, &reds[m], m, above, s));
            g_red_save(c, &reds[m], s);
            if (half > 1)
                state_put(c, false, &reds[m], m, s, k->tid);
        }
        g_if_close(c, join);
        call0(c, "llvm.nvvm.barrier0");
    }
}

/* The member's outputs from its final state f. */
void g_red_outputs(gcg *c, const red *r, ptc_red_state f, LLVMValueRef outs[2])
{
    ptc_emit_red_outputs(&c->em, r->n->reduce, r->n->correction, r->t, f, outs);
}

void g_red_store_outputs(gcg *c, const red *r, LLVMValueRef outs[2])
{
    for (int k = 0; k < 2; k++)
        if (r->mem->store[k] && r->n->out[k] >= 0)
            g_store(c, r->n->out[k], r->mem->store[k], outs[k], NULL, 1);
}

static void red_store(gcg *c, const red *r)
{
    LLVMValueRef outs[2];
    g_red_outputs(c, r, g_red_load(c, r), outs);
    g_red_store_outputs(c, r, outs);
}

/* Merges the W lanes of x into r's state as one Welford chunk. */
static void welford_merge(gcg *c, red *r, LLVMValueRef x)
{
    LLVMValueRef xs[MAX_VEC];
    for (int l = 0; l < c->W; l++)
        xs[l] = lane_of(c, x, l);
    ptc_red_state chunk = ptc_emit_welford_of(&c->em, r->dt, xs, c->W);
    g_red_save(c, r, g_red_combine(c, r, g_red_load(c, r), chunk));
}

/* Folds element rr (a linear index over G's reduction ranges) of each
 * member of G into its state; in the vectorised form (W > 1) elements
 * rr = q*W .. q*W + W-1 of chunk q (rr), where W divides the innermost
 * range, into the W-lane states, or for Welford as one chunk (one division
 * for the W, as an unrolled scalar iteration's chunk: the W values of each
 * of the unrolled iteration's vectors, not all, are live at once). */
static void red_element(gcg *c, const ptc_kgroup *G, red *reds, LLVMValueRef rr)
{
    int w = c->W;
    if (w > 1)
        rr = LLVMBuildNSWMul(c->b, rr, ixc(c, w), "");
    g_decompose(c, rr, G->red, G->nred, c->k->nouter + G->ninner);
    ptc_emit_fwd fw;
    fw.n = 0;
    int ri = 0;
    for (int m = 0; m < G->nmembers; m++) {
        const ptc_kmember *mem = &G->members[m];
        const ptc_lnode *n = c->s->prog->nodes[mem->node];
        if (n->kind != PTC_LN_REDUCTION) {
            PTC_ASSERT(w == 1); /* plan.c vectorises groups of reductions only */
            g_emit_pw_member(c, mem, &fw, 1, false);
            continue;
        }
        red *r = &reds[ri++];
        LLVMValueRef *v = ptc_emit_body(&c->em, &mem->body, w, &fw);
        LLVMValueRef idx = NULL;
        if (is_arg(r))
            idx = c->ix == c->i64 ? rr : LLVMBuildSExt(c->b, rr, c->i64, "");
        if (w == 1)
            red_update(c, r, v[mem->value], idx);
        else if (is_welford(r))
            welford_merge(c, r, v[mem->value]);
        else
            g_lanes_update(c, r, v[mem->value],
                           idx ? LLVMBuildAdd(c->b, g_splat(c, idx, w), g_iota64(c, w), "") : NULL,
                           NULL);
        free(v);
    }
}

/* Welford members take an unrolled iteration's elements as one chunk (on)
 * or one by one (off: the chunks gathered merge into their states): one
 * division a chunk, not a chain of dependent divisions, one an element. */
static void welford_chunks(gcg *c, red *reds, int nred, bool on)
{
    for (int i = 0; i < nred; i++) {
        red *r = &reds[i];
        if (!is_welford(r))
            continue;
        r->chunking = on;
        if (!on && r->nchunk) {
            ptc_red_state x = ptc_emit_welford_of(&c->em, r->dt, r->chunk, r->nchunk);
            g_red_save(c, r, g_red_combine(c, r, g_red_load(c, r), x));
        }
        r->nchunk = 0;
    }
}

static bool has_welford(const red *reds, int nred)
{
    for (int i = 0; i < nred; i++)
        if (is_welford(&reds[i]))
            return true;
    return false;
}

/* Lane lr of the Tr sharing a reduction folds elements lr, lr + Tr, ... of
 * the n (in the vectorised form chunks of W elements: plan.c's vec). In
 * column mode (COL_UNROLL), split rows and groups with Welford members
 * (ROW_UNROLL; vectorised, the plan's red_unroll chunks) several an iteration, then
 * the rest one by one: the loads of an iteration in one block, where ptxas
 * issues them together (a thread otherwise waits out each load's latency
 * before the next); sums in the same order, Welford's in chunks of an
 * iteration (vectorised: of a vector). Vectorised, the W lanes' states
 * combine in lane order at the end. */
static void red_loop(gcg *c, const ptc_kgroup *G, red *reds, int nred, LLVMValueRef lr,
                     LLVMValueRef n, int Tr)
{
    LLVMValueRef start = lr;
    int unroll = c->plan->col ? COL_UNROLL : c->W > 1 ? c->plan->red_unroll : ROW_UNROLL;
    if (c->W > 1)
        c->vec_var = c->k->nouter + G->ninner + G->nred - 1;
    if (c->plan->col || c->plan->split || has_welford(reds, nred)) {
        loop ul;
        g_loop_open(c, &ul, lr, LLVMBuildSub(c->b, n, ixc(c, (int64_t)(unroll - 1) * Tr), ""),
                    ixc(c, (int64_t)unroll * Tr), "red.unrolled");
        welford_chunks(c, reds, nred, c->W == 1);
        for (int u = 0; u < unroll; u++)
            red_element(c, G, reds, LLVMBuildAdd(c->b, ul.iv, ixc(c, (int64_t)u * Tr), ""));
        welford_chunks(c, reds, nred, false);
        g_loop_close(c, &ul);
        start = ul.iv;
    }
    loop rl;
    g_loop_open(c, &rl, start, n, ixc(c, Tr), "red");
    red_element(c, G, reds, rl.iv);
    g_loop_close(c, &rl);
    for (int m = 0; m < nred && c->W > 1; m++)
        if (!is_welford(&reds[m]))
            g_lanes_fold(c, &reds[m]);
}

/* The reduction members of G (*nred of them), their states' allocas made;
 * the caller frees the array. */
static red *red_members(gcg *c, const ptc_kgroup *G, int *nred)
{
    red *reds = calloc((size_t)G->nmembers + 1, sizeof *reds);
    *nred = 0;
    for (int m = 0; m < G->nmembers; m++) {
        const ptc_lnode *n = c->s->prog->nodes[G->members[m].node];
        if (n->kind != PTC_LN_REDUCTION)
            continue;
        red *r = &reds[(*nred)++];
        r->mem = &G->members[m];
        r->n = n;
        r->dt = r->mem->body.e[r->mem->value].dtype;
        r->t = ptc_emit_compute_type(&c->em, r->dt);
        r->reduce = n->reduce;
        g_state_allocas(c, r, &r->acc, 1);
        if (c->W > 1)
            g_state_allocas(c, r, &r->vacc, c->W);
    }
    return reds;
}

/* v elements in red_loop's units: chunks of W in the vectorised form. */
static LLVMValueRef in_chunks(gcg *c, LLVMValueRef v)
{
    return c->W > 1 ? LLVMBuildExactUDiv(c->b, v, ixc(c, c->W), "") : v;
}

void g_emit_red_group(gcg *c, const kctx *k, const ptc_kgroup *G, int g)
{
    int nouter = c->k->nouter;
    int Tr = c->plan->red_lanes[g], Tk = k->T / Tr, nred;
    red *reds = red_members(c, G, &nred);
    LLVMValueRef lr = Tr == k->T ? k->t : LLVMBuildURem(c->b, k->t, ixc(c, Tr), "");
    LLVMValueRef kk0 = Tr == k->T ? ixc(c, 0) : LLVMBuildUDiv(c->b, k->t, ixc(c, Tr), "");
    loop kl;
    g_loop_open(c, &kl, kk0, g_dims_product(c, G->inner, G->ninner), ixc(c, Tk), "kept");
    g_decompose(c, kl.iv, G->inner, G->ninner, nouter);
    for (int r = 0; r < nred; r++)
        red_init(c, &reds[r]);
    red_loop(c, G, reds, nred, lr, in_chunks(c, g_dims_product(c, G->red, G->nred)), Tr);
    if (c->plan->col)
        col_across(c, k, reds, nred);
    else if (Tr > 1)
        g_red_across(c, k, reds, nred, Tr);
    LLVMBasicBlockRef join = NULL;
    if (Tr > 1)
        join = g_if_open(c, g_stores_results(c, k, lr), "red.store");
    for (int r = 0; r < nred; r++)
        red_store(c, &reds[r]);
    if (join)
        g_if_close(c, join);
    g_loop_close(c, &kl);
    free(reds);
}

/* ---- split rows (plan.c) ------------------------------------------------------------------ */

int64_t g_split_partials_bytes(const ptc_kernel *k, const gplan *p)
{
    int64_t rows = 1;
    for (int d = 0; d < k->nouter; d++)
        rows *= k->outer[d].value;
    return rows * p->split * p->split_members * RED_FIELDS * 8;
}

/* Thread 0 writes the block's states as unit `unit`'s partial states,
 * then counts the block done on row o's counter (the fence orders the two
 * for other blocks); returns whether the block was the row's last (an i1
 * every thread of the block holds), which also resets the counter for the
 * next launch. */
static LLVMValueRef split_publish(gcg *c, const kctx *k, red *reds, int nred, LLVMValueRef o,
                                  LLVMValueRef unit)
{
    LLVMBuilderRef b = c->b;
    LLVMValueRef last = g_alloca(c, c->i32, "split.last");
    store_(c, last, LLVMConstInt(c->i32, 0, 0));
    LLVMBasicBlockRef join =
        g_if_open(c, LLVMBuildICmp(b, LLVMIntEQ, k->tid, ixc(c, 0), ""), "split.put");
    for (int m = 0; m < nred; m++)
        state_put(c, true, &reds[m], m, g_red_load(c, &reds[m]), unit);
    call0(c, "llvm.nvvm.membar.gl");
    LLVMValueRef off = LLVMBuildMul(b, o, ixc(c, 4), "");
    LLVMValueRef counter = LLVMBuildInBoundsGEP2(b, c->i8, c->scratch, &off, 1, "");
    LLVMValueRef done =
        LLVMBuildAtomicRMW(b, LLVMAtomicRMWBinOpAdd, counter, LLVMConstInt(c->i32, 1, 0),
                           LLVMAtomicOrderingMonotonic, 0);
    LLVMValueRef is_last = LLVMBuildICmp(b, LLVMIntEQ, done,
                                         LLVMConstInt(c->i32, (unsigned)c->plan->split - 1, 0), "");
    LLVMBasicBlockRef reset = g_if_open(c, is_last, "split.reset");
    store_(c, counter, LLVMConstInt(c->i32, 0, 0));
    store_(c, last, LLVMConstInt(c->i32, 1, 0));
    g_if_close(c, reset);
    g_if_close(c, join);
    LLVMValueRef flag = load_(c, c->i32, last);
    LLVMValueRef any = g_intrinsic(c, "llvm.nvvm.barrier0.or", NULL, 0, &flag, 1);
    return LLVMBuildICmp(b, LLVMIntNE, any, LLVMConstInt(c->i32, 0, 0), "");
}

/* In row o's last block: thread t takes the row's block t's partial
 * states, the block combines them as it does its threads' (the same order
 * whichever block came last) and stores the row's results. */
static void split_combine(gcg *c, const kctx *k, red *reds, int nred, LLVMValueRef o)
{
    int S = c->plan->split;
    call0(c, "llvm.nvvm.membar.gl");
    for (int m = 0; m < nred; m++)
        red_init(c, &reds[m]);
    LLVMBasicBlockRef join =
        g_if_open(c, LLVMBuildICmp(c->b, LLVMIntULT, k->tid, ixc(c, S), ""), "split.get");
    LLVMValueRef unit = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, o, ixc(c, S), ""), k->tid, "");
    for (int m = 0; m < nred; m++)
        g_red_save(c, &reds[m], state_get(c, true, &reds[m], m, unit, g_red_load(c, &reds[m])));
    g_if_close(c, join);
    g_red_across(c, k, reds, nred, k->T);
    join = g_if_open(c, g_stores_results(c, k, k->t), "red.store");
    for (int m = 0; m < nred; m++)
        red_store(c, &reds[m]);
    g_if_close(c, join);
}

/* Split rows' grid: block b runs units b, b + nctaid, ... of the rows' S
 * blocks each (unit = row * S + the row's block j, which folds elements
 * j*L .. (j+1)*L-1 of group 0's reduction); a row's last block runs the
 * later groups (the epilogue). */
void g_emit_split_grid(gcg *c, kctx *k, LLVMValueRef ctaid, LLVMValueRef nctaid)
{
    LLVMBuilderRef b = c->b;
    const ptc_kgroup *G = &c->k->groups[0];
    k->t = k->tid;
    k->team_local = ixc(c, 0);
    g_bind_locals(c, k, NULL, NULL);
    LLVMValueRef S = ixc(c, c->plan->split), L = in_chunks(c, ixc(c, c->plan->split_len));
    LLVMValueRef units = LLVMBuildMul(b, g_dims_product(c, c->k->outer, c->k->nouter), S, "");
    LLVMValueRef n = in_chunks(c, g_dims_product(c, G->red, G->nred));
    int nred;
    red *reds = red_members(c, G, &nred);
    loop ul;
    g_loop_open(c, &ul, ctaid, units, nctaid, "split");
    LLVMValueRef o = LLVMBuildUDiv(b, ul.iv, S, "");
    LLVMValueRef lo = LLVMBuildMul(b, LLVMBuildURem(b, ul.iv, S, ""), L, "");
    LLVMValueRef hi = LLVMBuildAdd(b, lo, L, "");
    hi = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, hi, n, ""), hi, n, "");
    g_decompose(c, o, c->k->outer, c->k->nouter, 0);
    for (int m = 0; m < nred; m++)
        red_init(c, &reds[m]);
    red_loop(c, G, reds, nred, LLVMBuildAdd(b, lo, k->t, ""), hi, k->T);
    g_red_across(c, k, reds, nred, k->T);
    LLVMBasicBlockRef join = g_if_open(c, split_publish(c, k, reds, nred, o, ul.iv), "split.last");
    split_combine(c, k, reds, nred, o);
    g_team_barrier(c, k);
    for (int g = 1; g < c->k->ngroups; g++) {
        g_emit_pw_group(c, k, &c->k->groups[g]);
        g_team_barrier(c, k);
    }
    g_if_close(c, join);
    g_loop_close(c, &ul);
    free(reds);
}

/* Kernel c->k's outer iterations, run by the blocks `ctaid` of the `nctaid`
 * (ix values) its launch gives it, as a grid-stride loop over teams. */
