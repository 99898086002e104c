/* The structure of a GPU kernel.
 *
 * Every kernel is a grid-stride loop over its outer iterations: team j of
 * the grid runs iterations j, j + nteams, ... (plan.c chose the team size T
 * and the block). Inside one iteration a team runs the kernel's groups in
 * order, with a team barrier between groups (bar.warp.sync for teams within
 * a warp, bar.sync for a block) and at the end of the iteration, so that
 * kernel-local buffers and global buffers written by one group are complete
 * before the next reads them.
 *
 *   pointwise group:  for (f = t; f < inner; f += T) members
 *   reduction group:  the team is Tk x Tr; for (kk = t / Tr; kk < kept; kk += Tk):
 *                     each lane folds elements rr = t % Tr, + Tr, ... into its
 *                     own state, the Tr lanes combine states with butterfly
 *                     shuffles (then through shared memory across the warps
 *                     of a block), and lane 0 stores the results.
 *
 * Reduction states are (value), (value, index) for argmax/argmin with ties
 * going to the first index as torch does, or Welford's (mean, M2, count)
 * merged with Chan's formula. Flat kernels have no team work: one thread
 * computes W consecutive elements (the vectorised form) or one, and values of
 * kernel-local buffers are forwarded in registers.
 *
 * Row mode (plan.c) unrolls the loops of kernels whose groups all run over
 * the same row: lane t handles chunks j*T + t of W elements, loads of
 * read-only buffers are emitted once per chunk and reused by later groups
 * (the row stays in registers between softmax's max, sum and division), and
 * reduction states are W lanes wide until a final in-thread combine.
 */
#include "codegen/cuda/gpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------ */

typedef struct loop {
    LLVMBasicBlockRef head, body, exit;
    LLVMValueRef iv, step;
} loop;

static void loop_open(gcg *c, loop *l, LLVMValueRef lo, LLVMValueRef hi, LLVMValueRef step,
                      const char *name)
{
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(c->b);
    l->head = LLVMAppendBasicBlockInContext(c->ctx, c->fn, name);
    l->body = LLVMAppendBasicBlockInContext(c->ctx, c->fn, name);
    l->exit = LLVMAppendBasicBlockInContext(c->ctx, c->fn, name);
    l->step = step;
    LLVMBuildBr(c->b, l->head);
    LLVMPositionBuilderAtEnd(c->b, l->head);
    l->iv = LLVMBuildPhi(c->b, c->ix, name);
    LLVMAddIncoming(l->iv, &lo, &pre, 1);
    LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, l->iv, hi, ""), l->body, l->exit);
    LLVMPositionBuilderAtEnd(c->b, l->body);
}

static void loop_close(gcg *c, loop *l)
{
    LLVMValueRef next = LLVMBuildNSWAdd(c->b, l->iv, l->step, "");
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(c->b);
    LLVMAddIncoming(l->iv, &next, &cur, 1);
    LLVMBuildBr(c->b, l->head);
    LLVMPositionBuilderAtEnd(c->b, l->exit);
}

/* if (cond) { ... } : returns the join block; the builder is inside "then". */
static LLVMBasicBlockRef if_open(gcg *c, LLVMValueRef cond, const char *name)
{
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(c->ctx, c->fn, name);
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(c->ctx, c->fn, name);
    LLVMBuildCondBr(c->b, cond, then, join);
    LLVMPositionBuilderAtEnd(c->b, then);
    return join;
}

static void if_close(gcg *c, LLVMBasicBlockRef join)
{
    LLVMBuildBr(c->b, join);
    LLVMPositionBuilderAtEnd(c->b, join);
}

static LLVMValueRef ixc(gcg *c, int64_t v)
{
    return LLVMConstInt(c->ix, (unsigned long long)v, 1);
}

static LLVMValueRef call0(gcg *c, const char *name)
{
    return g_intrinsic(c, name, NULL, 0, NULL, 0);
}

static LLVMValueRef sreg(gcg *c, const char *name)
{
    LLVMValueRef v = call0(c, name);
    return c->ix == c->i32 ? v : LLVMBuildZExt(c->b, v, c->ix, "");
}

static LLVMValueRef dims_product(gcg *c, const ptc_dim *d, int n)
{
    LLVMValueRef p = ixc(c, 1);
    for (int i = 0; i < n; i++)
        p = LLVMBuildNSWMul(c->b, p, ptc_emit_dim(&c->em, d[i]), "");
    return p;
}

/* Splits flat index f (innermost fastest) into variables first..first+n-1. */
static void decompose(gcg *c, LLVMValueRef f, const ptc_dim *d, int n, int first)
{
    LLVMValueRef rem = f;
    for (int i = n - 1; i >= 1; i--) {
        LLVMValueRef e = ptc_emit_dim(&c->em, d[i]);
        c->vars[first + i] = LLVMBuildURem(c->b, rem, e, "");
        rem = LLVMBuildUDiv(c->b, rem, e, "");
    }
    if (n > 0)
        c->vars[first] = rem;
}

typedef struct kctx {
    LLVMValueRef tid, t, team_local, lane; /* ix values */
    LLVMValueRef valid; /* column mode: this thread's column exists (i1); else NULL */
    int T;
} kctx;

/* The lanes of this thread's T-lane segment of its warp (T <= 32). */
static LLVMValueRef segment_mask(gcg *c, const kctx *k, int T)
{
    if (T >= 32)
        return LLVMConstInt(c->i32, 0xffffffffu, 0);
    LLVMValueRef lane = k->lane;
    if (c->ix != c->i32)
        lane = LLVMBuildTrunc(c->b, lane, c->i32, "");
    LLVMValueRef start = LLVMBuildAnd(c->b, lane, LLVMConstInt(c->i32, ~(unsigned)(T - 1), 0), "");
    return LLVMBuildShl(c->b, LLVMConstInt(c->i32, (1u << T) - 1, 0), start, "");
}

static void team_barrier(gcg *c, const kctx *k)
{
    if (k->T == 1)
        return;
    if (k->T > 32 || c->plan->col) {
        call0(c, "llvm.nvvm.barrier0");
        return;
    }
    LLVMValueRef m = segment_mask(c, k, k->T);
    g_intrinsic(c, "llvm.nvvm.bar.warp.sync", NULL, 0, &m, 1);
}

/* ---- pointwise members ------------------------------------------------------------------ */

static bool is_local(gcg *c, int buf)
{
    return c->s->is_local[buf];
}

/* Whether lane `lane` of its team stores its iteration's results: lane 0,
 * and in column mode only where the column exists. */
static LLVMValueRef stores_results(gcg *c, const kctx *k, LLVMValueRef lane)
{
    LLVMValueRef lead = LLVMBuildICmp(c->b, LLVMIntEQ, lane, ixc(c, 0), "");
    return k->valid ? LLVMBuildAnd(c->b, lead, k->valid, "") : lead;
}

static void emit_pw_member(gcg *c, const ptc_kmember *mem, ptc_emit_fwd *fw, int w,
                           bool skip_locals)
{
    const ptc_lnode *n = c->s->prog->nodes[mem->node];
    LLVMValueRef *v = ptc_emit_body(&c->em, &mem->body, w, fw);
    LLVMValueRef val = v[mem->value];
    int ob = n->out[0];
    if (!(skip_locals && is_local(c, ob)))
        g_store(c, ob, mem->store[0], val, v, w);
    ptc_emit_fwd_add(fw, ob, mem->store[0], val);
    free(v);
}

static void emit_flat(gcg *c)
{
    ptc_emit_fwd fw;
    fw.n = 0;
    for (int g = 0; g < c->k->ngroups; g++)
        for (int m = 0; m < c->k->groups[g].nmembers; m++)
            g_prefetch(c, &c->k->groups[g].members[m].body, c->W);
    for (int g = 0; g < c->k->ngroups; g++)
        for (int m = 0; m < c->k->groups[g].nmembers; m++)
            emit_pw_member(c, &c->k->groups[g].members[m], &fw, c->W, true);
}

static void emit_pw_group(gcg *c, const kctx *k, const ptc_kgroup *G)
{
    int nouter = c->k->nouter;
    ptc_emit_fwd fw;
    fw.n = 0;
    if (G->ninner == 0) {
        LLVMBasicBlockRef join = NULL;
        if (k->T > 1)
            join = if_open(c, stores_results(c, k, k->t), "lead");
        for (int m = 0; m < G->nmembers; m++)
            emit_pw_member(c, &G->members[m], &fw, 1, false);
        if (join)
            if_close(c, join);
        return;
    }
    loop l;
    loop_open(c, &l, k->t, dims_product(c, G->inner, G->ninner), ixc(c, k->T), "pw");
    decompose(c, l.iv, G->inner, G->ninner, nouter);
    for (int m = 0; m < G->nmembers; m++)
        emit_pw_member(c, &G->members[m], &fw, 1, false);
    loop_close(c, &l);
}

/* ---- reductions -------------------------------------------------------------------------- */

/* Elements a thread folds an unrolled iteration: column mode; split and
 * Welford's rows, which need more loads in flight (BatchNorm statistics: four
 * 2-byte loads a thread, 8 KiB an SM, ran at 750 GB/s on an H200). */
enum { COL_UNROLL = 4, ROW_UNROLL = 8 };

typedef struct red {
    const ptc_kmember *mem;
    const ptc_lnode *n;
    ptc_dtype dt;                    /* the reduced value's dtype */
    LLVMTypeRef t;                   /* its compute type */
    int reduce;                      /* how its states combine: n->reduce, or PTC_RED_SUM for the
                                        sums of a row's two-pass Welford */
    ptc_red_state acc;               /* allocas */
    ptc_red_state vacc;              /* row mode: W-lane allocas */
    LLVMValueRef *row_x, *row_valid; /* two-pass Welford: each chunk's values and valid */
    LLVMValueRef chunk[ROW_UNROLL];  /* Welford: an unrolled iteration's values, when chunking */
    int nchunk;
    bool chunking;
} red;

static bool is_arg(const red *r)
{
    return r->reduce == PTC_RED_ARGMAX || r->reduce == PTC_RED_ARGMIN;
}
static bool is_welford(const red *r)
{
    return r->reduce == PTC_RED_WELFORD;
}

static LLVMValueRef load_(gcg *c, LLVMTypeRef t, LLVMValueRef p)
{
    return LLVMBuildLoad2(c->b, t, p, "");
}
static void store_(gcg *c, LLVMValueRef p, LLVMValueRef v)
{
    LLVMBuildStore(c->b, v, p);
}

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
}

static ptc_red_state acc_load(gcg *c, const red *r, const ptc_red_state *acc, int w)
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

static void acc_save(gcg *c, const red *r, const ptc_red_state *acc, ptc_red_state s)
{
    store_(c, acc->v, s.v);
    store_(c, acc->i, s.i);
    if (is_welford(r)) {
        store_(c, acc->m, s.m);
        store_(c, acc->m2, s.m2);
        store_(c, acc->n, s.n);
    }
}

static ptc_red_state red_load(gcg *c, const red *r)
{
    return acc_load(c, r, &r->acc, 1);
}
static void red_save(gcg *c, const red *r, ptc_red_state s)
{
    acc_save(c, r, &r->acc, s);
}

/* Combines two states (Chan's merge for Welford). */
static ptc_red_state red_combine(gcg *c, const red *r, ptc_red_state a, ptc_red_state x)
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
        ptc_red_state s = red_load(c, r);
        LLVMValueRef n = LLVMBuildFAdd(b, s.n, LLVMConstReal(r->t, 1), "");
        LLVMValueRef delta = LLVMBuildFSub(b, x, s.m, "");
        LLVMValueRef nm = LLVMBuildFAdd(b, s.m, LLVMBuildFDiv(b, delta, n, ""), "");
        s.m2 = LLVMBuildFAdd(b, s.m2, LLVMBuildFMul(b, delta, LLVMBuildFSub(b, x, nm, ""), ""), "");
        s.m = nm;
        s.n = n;
        red_save(c, r, s);
        return;
    }
    ptc_red_state a = red_load(c, r);
    ptc_red_state e = {x, idx ? idx : a.i, NULL, NULL, NULL};
    red_save(c, r, red_combine(c, r, a, e));
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
static void red_across(gcg *c, const kctx *k, red *reds, int nred, int Tr)
{
    int warp_lanes = Tr > 32 ? 32 : Tr;
    LLVMValueRef mask = segment_mask(c, k, warp_lanes);
    for (int m = 0; m < nred; m++) {
        ptc_red_state s = red_load(c, &reds[m]);
        for (int off = warp_lanes / 2; off >= 1; off /= 2)
            s = red_combine(c, &reds[m], s, shfl_state(c, &reds[m], s, off, mask));
        red_save(c, &reds[m], s);
    }
    if (Tr <= 32)
        return;
    /* across the warps of the block, through shared memory, in warp order */
    LLVMValueRef warp = LLVMBuildUDiv(c->b, k->tid, ixc(c, 32), "");
    LLVMBasicBlockRef join =
        if_open(c, LLVMBuildICmp(c->b, LLVMIntEQ, k->lane, ixc(c, 0), ""), "red.put");
    for (int m = 0; m < nred; m++)
        state_put(c, false, &reds[m], m, red_load(c, &reds[m]), warp);
    if_close(c, join);
    call0(c, "llvm.nvvm.barrier0");
    for (int m = 0; m < nred; m++) {
        ptc_red_state s = state_get(c, false, &reds[m], m, ixc(c, 0), red_load(c, &reds[m]));
        if (c->plan->warps_loop) {
            red_save(c, &reds[m], s);
            loop l;
            loop_open(c, &l, ixc(c, 1), ixc(c, Tr / 32), ixc(c, 1), "red.warps");
            s = red_load(c, &reds[m]);
            s = red_combine(c, &reds[m], s, state_get(c, false, &reds[m], m, l.iv, s));
            red_save(c, &reds[m], s);
            loop_close(c, &l);
            continue;
        }
        for (int w = 1; w < Tr / 32; w++)
            s = red_combine(c, &reds[m], s, state_get(c, false, &reds[m], m, ixc(c, w), s));
        red_save(c, &reds[m], s);
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
        state_put(c, false, &reds[m], m, red_load(c, &reds[m]), k->tid);
    call0(c, "llvm.nvvm.barrier0");
    for (int half = k->T / 2; half >= 1; half /= 2) {
        LLVMBasicBlockRef join =
            if_open(c, LLVMBuildICmp(c->b, LLVMIntULT, k->t, ixc(c, half), ""), "col.fold");
        LLVMValueRef above = LLVMBuildAdd(c->b, k->tid, ixc(c, (int64_t)half * cols), "");
        for (int m = 0; m < nred; m++) {
            ptc_red_state s = red_load(c, &reds[m]);
            s = red_combine(c, &reds[m], s, state_get(c, false, &reds[m], m, above, s));
            red_save(c, &reds[m], s);
            if (half > 1)
                state_put(c, false, &reds[m], m, s, k->tid);
        }
        if_close(c, join);
        call0(c, "llvm.nvvm.barrier0");
    }
}

/* The member's outputs from its final state f. */
static void red_outputs(gcg *c, const red *r, ptc_red_state f, LLVMValueRef outs[2])
{
    LLVMBuilderRef b = c->b;
    int kind = r->n->reduce;
    outs[0] = f.v;
    outs[1] = NULL;
    if (kind == PTC_RED_ARGMAX || kind == PTC_RED_ARGMIN) {
        outs[0] = f.i;
        outs[1] = f.v;
    } else if (kind == PTC_RED_WELFORD) {
        LLVMValueRef dof = LLVMBuildFSub(b, f.n, LLVMConstReal(r->t, r->n->correction), "");
        LLVMValueRef zero = LLVMConstReal(r->t, 0);
        dof = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, dof, zero, ""), zero, dof, "");
        outs[0] = LLVMBuildFDiv(b, f.m2, dof, "");
        /* the mean of no elements is 0/0, as eager's (a symbolic length may be 0) */
        LLVMValueRef none = LLVMBuildFCmp(b, LLVMRealOLE, f.n, zero, "");
        outs[1] = LLVMBuildSelect(b, none, LLVMConstReal(r->t, NAN), f.m, "");
    }
}

static void red_store_outputs(gcg *c, const red *r, LLVMValueRef outs[2])
{
    for (int k = 0; k < 2; k++)
        if (r->mem->store[k] && r->n->out[k] >= 0)
            g_store(c, r->n->out[k], r->mem->store[k], outs[k], NULL, 1);
}

static void red_store(gcg *c, const red *r)
{
    LLVMValueRef outs[2];
    red_outputs(c, r, red_load(c, r), outs);
    red_store_outputs(c, r, outs);
}

/* Folds element rr (a linear index over G's reduction ranges) of each
 * member of G into its state. */
static void red_element(gcg *c, const ptc_kgroup *G, red *reds, LLVMValueRef rr)
{
    decompose(c, rr, G->red, G->nred, c->k->nouter + G->ninner);
    ptc_emit_fwd fw;
    fw.n = 0;
    int ri = 0;
    for (int m = 0; m < G->nmembers; m++) {
        const ptc_kmember *mem = &G->members[m];
        const ptc_lnode *n = c->s->prog->nodes[mem->node];
        if (n->kind != PTC_LN_REDUCTION) {
            emit_pw_member(c, mem, &fw, 1, false);
            continue;
        }
        red *r = &reds[ri++];
        LLVMValueRef *v = ptc_emit_body(&c->em, &mem->body, 1, &fw);
        LLVMValueRef idx = NULL;
        if (is_arg(r))
            idx = c->ix == c->i64 ? rr : LLVMBuildSExt(c->b, rr, c->i64, "");
        red_update(c, r, v[mem->value], idx);
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
            red_save(c, r, red_combine(c, r, red_load(c, r), x));
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

/* Lane lr of the Tr sharing a reduction folds elements lr, lr + Tr, ... In
 * column mode (COL_UNROLL), split rows and groups with Welford members
 * (ROW_UNROLL) several elements an iteration, then the rest one by one:
 * the loads of an iteration in one block, where ptxas issues them together
 * (a thread otherwise waits out each load's latency before the next);
 * sums in the same order, Welford's in chunks of an iteration. */
static void red_loop(gcg *c, const ptc_kgroup *G, red *reds, int nred, LLVMValueRef lr,
                     LLVMValueRef n, int Tr)
{
    LLVMValueRef start = lr;
    int unroll = c->plan->col ? COL_UNROLL : ROW_UNROLL;
    if (c->plan->col || c->plan->split || has_welford(reds, nred)) {
        loop ul;
        loop_open(c, &ul, lr, LLVMBuildSub(c->b, n, ixc(c, (int64_t)(unroll - 1) * Tr), ""),
                  ixc(c, (int64_t)unroll * Tr), "red.unrolled");
        welford_chunks(c, reds, nred, true);
        for (int u = 0; u < unroll; u++)
            red_element(c, G, reds, LLVMBuildAdd(c->b, ul.iv, ixc(c, (int64_t)u * Tr), ""));
        welford_chunks(c, reds, nred, false);
        loop_close(c, &ul);
        start = ul.iv;
    }
    loop rl;
    loop_open(c, &rl, start, n, ixc(c, Tr), "red");
    red_element(c, G, reds, rl.iv);
    loop_close(c, &rl);
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
        r->acc.v = g_alloca(c, r->t, "acc");
        r->acc.i = g_alloca(c, c->i64, "acc.i");
        r->acc.m = g_alloca(c, r->t, "acc.mean");
        r->acc.m2 = g_alloca(c, r->t, "acc.m2");
        r->acc.n = g_alloca(c, r->t, "acc.n");
    }
    return reds;
}

static void emit_red_group(gcg *c, const kctx *k, const ptc_kgroup *G, int g)
{
    int nouter = c->k->nouter;
    int Tr = c->plan->red_lanes[g], Tk = k->T / Tr, nred;
    red *reds = red_members(c, G, &nred);
    LLVMValueRef lr = Tr == k->T ? k->t : LLVMBuildURem(c->b, k->t, ixc(c, Tr), "");
    LLVMValueRef kk0 = Tr == k->T ? ixc(c, 0) : LLVMBuildUDiv(c->b, k->t, ixc(c, Tr), "");
    loop kl;
    loop_open(c, &kl, kk0, dims_product(c, G->inner, G->ninner), ixc(c, Tk), "kept");
    decompose(c, kl.iv, G->inner, G->ninner, nouter);
    for (int r = 0; r < nred; r++)
        red_init(c, &reds[r]);
    red_loop(c, G, reds, nred, lr, dims_product(c, G->red, G->nred), Tr);
    if (c->plan->col)
        col_across(c, k, reds, nred);
    else if (Tr > 1)
        red_across(c, k, reds, nred, Tr);
    LLVMBasicBlockRef join = NULL;
    if (Tr > 1)
        join = if_open(c, stores_results(c, k, lr), "red.store");
    for (int r = 0; r < nred; r++)
        red_store(c, &reds[r]);
    if (join)
        if_close(c, join);
    loop_close(c, &kl);
    free(reds);
}

/* ---- row mode ----------------------------------------------------------------------------------
 */

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
    decompose(c, f, ranges, p->row_ndim, first);
    c->cache_j = j;
}

static void guarded_store(gcg *c, LLVMValueRef valid, int buf, const ptc_ix *off, LLVMValueRef v,
                          LLVMValueRef *vals)
{
    LLVMBasicBlockRef join = valid ? if_open(c, valid, "row.store") : NULL;
    g_store(c, buf, off, v, vals, c->W);
    if (join)
        if_close(c, join);
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
static void row_prefetch(gcg *c, const kctx *k, const ptc_kgroup *G)
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

static void emit_row_pw_group(gcg *c, const kctx *k, const ptc_kgroup *G)
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

/* Folds W lanes of element values into a W-lane state (masked by valid). */
static void row_update(gcg *c, red *r, LLVMValueRef x, LLVMValueRef idx, LLVMValueRef valid)
{
    LLVMBuilderRef b = c->b;
    int w = c->W;
    ptc_red_state s = acc_load(c, r, &r->vacc, w), o;
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
        o = red_combine(c, r, s, e);
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
    acc_save(c, r, &r->vacc, o);
}

static LLVMValueRef lane_of(gcg *c, LLVMValueRef v, int l)
{
    return v ? LLVMBuildExtractElement(c->b, v, LLVMConstInt(c->i32, (unsigned)l, 0), "") : NULL;
}

/* The W lanes of a state combined in lane order into the scalar state. */
static void row_fold_lanes(gcg *c, red *r)
{
    int w = c->W;
    if (w == 1) {
        acc_save(c, r, &r->acc, acc_load(c, r, &r->vacc, 1));
        return;
    }
    ptc_red_state s = acc_load(c, r, &r->vacc, w);
    ptc_red_state o = {lane_of(c, s.v, 0), lane_of(c, s.i, 0), lane_of(c, s.m, 0),
                       lane_of(c, s.m2, 0), lane_of(c, s.n, 0)};
    for (int l = 1; l < w; l++) {
        ptc_red_state x = {lane_of(c, s.v, l), lane_of(c, s.i, l), lane_of(c, s.m, l),
                           lane_of(c, s.m2, l), lane_of(c, s.n, l)};
        o = red_combine(c, r, o, x);
    }
    red_save(c, r, o);
}

/* Member r's W-lane accumulators back to the identity of how it combines. */
static void row_acc_reset(gcg *c, red *r)
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
    ptc_red_state *a[2] = {&r->acc, &r->vacc};
    for (int i = 0; i < 2; i++) {
        int lanes = i ? w : 1;
        a[i]->v = g_alloca(c, g_vec(c, r->t, lanes), "acc");
        a[i]->i = g_alloca(c, g_vec(c, c->i64, lanes), "acc.i");
        a[i]->m = g_alloca(c, g_vec(c, r->t, lanes), "acc.mean");
        a[i]->m2 = g_alloca(c, g_vec(c, r->t, lanes), "acc.m2");
        a[i]->n = g_alloca(c, g_vec(c, r->t, lanes), "acc.n");
    }
    row_acc_reset(c, r);
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
        row_acc_reset(c, r);
        for (int j = 0; j < c->plan->row_j; j++) {
            LLVMValueRef d = LLVMBuildFSub(b, r->row_x[j], means, "");
            row_update(c, r, LLVMBuildFMul(b, d, d, ""), NULL, r->row_valid[j]);
        }
        row_fold_lanes(c, r);
        store_(c, r->acc.m, mean);
        store_(c, r->acc.n, count);
        two[ntwo++] = *r;
    }
    if (k->T > 1 && ntwo)
        red_across(c, k, two, ntwo, k->T);
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
        row_update(c, r, v[mem->value], idx, valid);
        free(v);
    }
}

static void emit_row_red_group(gcg *c, const kctx *k, const ptc_kgroup *G)
{
    int w = c->W;
    red *reds = calloc((size_t)G->nmembers + 1, sizeof *reds);
    int nred = 0;
    for (int m = 0; m < G->nmembers; m++) {
        const ptc_lnode *n = c->s->prog->nodes[G->members[m].node];
        if (n->kind == PTC_LN_REDUCTION)
            row_red_init(c, &reds[nred++], &G->members[m], n);
    }
    LLVMValueRef iota = NULL;
    if (w > 1) {
        LLVMValueRef ks[16];
        for (int l = 0; l < w; l++)
            ks[l] = LLVMConstInt(c->i64, (unsigned)l, 0);
        iota = LLVMConstVector(ks, (unsigned)w);
    }
    for (int j = 0; j < c->plan->row_j; j++)
        row_red_chunk(c, k, G, reds, j, iota);
    for (int r = 0; r < nred; r++)
        row_fold_lanes(c, &reds[r]);
    if (k->T > 1)
        red_across(c, k, reds, nred, k->T);
    row_second_pass(c, k, reds, nred);
    LLVMValueRef(*outs)[2] = calloc((size_t)nred + 1, sizeof *outs);
    for (int r = 0; r < nred; r++) {
        red_outputs(c, &reds[r], red_load(c, &reds[r]), outs[r]);
        row_forward(c, &reds[r], outs[r]);
    }
    LLVMBasicBlockRef join = NULL;
    if (k->T > 1)
        join = if_open(c, LLVMBuildICmp(c->b, LLVMIntEQ, k->t, ixc(c, 0), ""), "red.store");
    for (int r = 0; r < nred; r++)
        red_store_outputs(c, &reds[r], outs[r]);
    if (join)
        if_close(c, join);
    for (int r = 0; r < nred; r++) {
        free(reds[r].row_x);
        free(reds[r].row_valid);
    }
    free(outs);
    free(reds);
}

/* ---- the kernel function --------------------------------------------------------------------- */

static void annotate(gcg *c, LLVMValueRef fn, const char *key, int value)
{
    LLVMValueRef md[3] = {fn, LLVMMDStringInContext(c->ctx, key, (unsigned)strlen(key)),
                          LLVMConstInt(c->i32, (unsigned)value, 0)};
    LLVMAddNamedMetadataOperand(c->mod, "nvvm.annotations", LLVMMDNodeInContext(c->ctx, md, 3));
}

static void add_attr(gcg *c, LLVMValueRef fn, unsigned idx, const char *name)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    LLVMAddAttributeAtIndex(fn, idx, LLVMCreateEnumAttribute(c->ctx, kind, 0));
}

/* Whether some member of kernel k stores to buf (buffers no kernel of an
 * entry stores to are read-only: ld.global.nc). */
static bool kernel_stores(const ptc_schedule *s, const ptc_kernel *k, int buf)
{
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++) {
            const ptc_lnode *n = s->prog->nodes[k->groups[g].members[m].node];
            if (n->out[0] == buf || n->out[1] == buf)
                return true;
        }
    return false;
}

static void bind_locals(gcg *c, const kctx *k, LLVMValueRef scratch, LLVMValueRef slot)
{
    const gplan *p = c->plan;
    for (int i = 0; i < c->k->nlocal; i++) {
        int buf = c->k->locals[i];
        const ptc_lbuf *lb = c->s->prog->bufs[buf];
        switch (p->loc[i]) {
        case LOC_PRIVATE: {
            int64_t n = ptc_kernel_local_elems(c->s->prog, c->k, i);
            LLVMTypeRef at = LLVMArrayType(ptc_emit_storage_type(&c->em, lb->dtype), (unsigned)n);
            c->bufptr[buf] = g_alloca(c, at, "local");
            c->bufspace[buf] = 0;
            break;
        }
        case LOC_SHARED: {
            LLVMValueRef off =
                LLVMBuildAdd(c->b, LLVMBuildMul(c->b, k->team_local, ixc(c, p->smem_team), ""),
                             ixc(c, p->loc_off[i]), "");
            c->bufptr[buf] = LLVMBuildInBoundsGEP2(c->b, c->i8, c->smem, &off, 1, "");
            c->bufspace[buf] = 3;
            break;
        }
        case LOC_SCRATCH: {
            /* 64-bit whatever the index width: the slots of a wave (270,336
             * threads on an H100) times a few KB each pass 2^31 bytes */
            LLVMValueRef slot64 = c->ix == c->i64 ? slot : LLVMBuildZExt(c->b, slot, c->i64, "");
            LLVMValueRef team_bytes = LLVMConstInt(c->i64, (uint64_t)p->scratch_team, 1);
            LLVMValueRef off = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, slot64, team_bytes, ""),
                                            LLVMConstInt(c->i64, (uint64_t)p->loc_off[i], 1), "");
            c->bufptr[buf] = LLVMBuildInBoundsGEP2(c->b, c->i8, scratch, &off, 1, "");
            c->bufspace[buf] = 1;
            break;
        }
        default:
            break;
        }
    }
}

/* Outer iteration o; in row mode its read-only loads go through `ahead`
 * where given (those already issued: emit_rows_ahead), else a fresh cache. */
static void emit_iteration(gcg *c, const kctx *k, LLVMValueRef o, gcache *ahead)
{
    const ptc_kernel *kn = c->k;
    gcache fresh;
    gcache *cache = ahead ? ahead : &fresh;
    fresh.n = 0;
    fresh.nfwd = 0;
    if (c->plan->flat) {
        LLVMValueRef e = c->W > 1 ? LLVMBuildNSWMul(c->b, o, ixc(c, c->W), "") : o;
        decompose(c, e, kn->outer, kn->nouter, 0);
        c->cache = cache;
        c->cache_j = 0;
        emit_flat(c);
        c->cache = NULL;
        return;
    }
    decompose(c, o, kn->outer, kn->nouter, 0);
    bool row = c->plan->row && (c->vector_form || c->plan->vec == 1);
    if (row)
        c->cache = cache;
    for (int g = 0; g < kn->ngroups; g++) {
        if (row && kn->groups[g].reduction)
            row_prefetch(c, k, &kn->groups[g]);
        if (row && kn->groups[g].reduction)
            emit_row_red_group(c, k, &kn->groups[g]);
        else if (row)
            emit_row_pw_group(c, k, &kn->groups[g]);
        else if (kn->groups[g].reduction)
            emit_red_group(c, k, &kn->groups[g], g);
        else
            emit_pw_group(c, k, &kn->groups[g]);
        team_barrier(c, k);
    }
    c->cache = NULL;
}

/* ---- rows ahead (plan.c's row_ahead) -----------------------------------------------------
 *
 * A team's rows come one after another in the grid-stride loop; loading a
 * row waits a memory latency, and the team's reductions, shuffles and
 * stores then leave its loads idle. With rows ahead, the first reduction
 * group's loads of the team's next row are issued before the current row's
 * work and carried to the next iteration in phis, in their stored form (a
 * 16-bit row takes a register per two elements), so that every team keeps
 * a row in flight while it computes. The launcher gives each team several
 * rows (ptc_cuda_launch.row_ahead). */

static const ptc_kgroup *first_reduction(const ptc_kernel *k)
{
    for (int g = 0; g < k->ngroups; g++)
        if (k->groups[g].reduction)
            return &k->groups[g];
    return NULL;
}

/* The first reduction group's loads of row o, into `into` (emptied first). */
static void load_row(gcg *c, const kctx *k, LLVMValueRef o, gcache *into)
{
    decompose(c, o, c->k->outer, c->k->nouter, 0);
    into->n = 0;
    into->nfwd = 0;
    c->cache = into;
    row_prefetch(c, k, first_reduction(c->k));
    c->cache = NULL;
}

static bool is_16_bit(LLVMTypeRef t)
{
    LLVMTypeKind k = LLVMGetTypeKind(t);
    return k == LLVMHalfTypeKind || k == LLVMBFloatTypeKind ||
           (k == LLVMIntegerTypeKind && LLVMGetIntTypeWidth(t) == 16);
}

/* 16-bit lanes travel through phis as 32-bit words (NVPTX would give each
 * bf16 lane a 16-bit register of its own). */
static LLVMValueRef as_words(gcg *c, LLVMValueRef v)
{
    LLVMTypeRef t = LLVMTypeOf(v);
    if (LLVMGetTypeKind(t) != LLVMVectorTypeKind || !is_16_bit(LLVMGetElementType(t)))
        return v;
    unsigned n = LLVMGetVectorSize(t);
    return n % 2 ? v : LLVMBuildBitCast(c->b, v, LLVMVectorType(c->i32, n / 2), "");
}

/* Row o's loads when o < O (a team's last row has no next): phis of their
 * words at the join, poison where the row does not exist; stored[i] the
 * type the groups read entry i as. */
static void load_row_if(gcg *c, const kctx *k, LLVMValueRef o, LLVMValueRef O, gcache *into,
                        LLVMTypeRef *stored)
{
    LLVMBasicBlockRef skip = LLVMGetInsertBlock(c->b);
    LLVMBasicBlockRef join = if_open(c, LLVMBuildICmp(c->b, LLVMIntSLT, o, O, ""), "row.ahead");
    load_row(c, k, o, into);
    LLVMValueRef words[256];
    for (int i = 0; i < into->n; i++) {
        stored[i] = LLVMTypeOf(into->e[i].val);
        words[i] = as_words(c, into->e[i].val);
    }
    LLVMBasicBlockRef loaded = LLVMGetInsertBlock(c->b);
    if_close(c, join);
    for (int i = 0; i < into->n; i++) {
        LLVMValueRef phi = LLVMBuildPhi(c->b, LLVMTypeOf(words[i]), "");
        LLVMValueRef in[2] = {words[i], LLVMGetPoison(LLVMTypeOf(words[i]))};
        LLVMBasicBlockRef from[2] = {loaded, skip};
        LLVMAddIncoming(phi, in, from, 2);
        into->e[i].val = phi;
    }
}

static void emit_rows_ahead(gcg *c, const kctx *k, LLVMValueRef slot, LLVMValueRef O,
                            LLVMValueRef nteams)
{
    LLVMBuilderRef b = c->b;
    gcache *first = malloc(sizeof *first), *next = malloc(sizeof *next), *cur = malloc(sizeof *cur);
    LLVMTypeRef stored[256];
    load_row_if(c, k, slot, O, first, stored);
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "rows");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "rows");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "rows");
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, head);
    LLVMValueRef o = LLVMBuildPhi(b, c->ix, "row");
    *cur = *first;
    for (int i = 0; i < first->n; i++)
        cur->e[i].val = LLVMBuildPhi(b, LLVMTypeOf(first->e[i].val), "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, o, O, ""), body, exit);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef o_next = LLVMBuildNSWAdd(b, o, nteams, "");
    load_row_if(c, k, o_next, O, next, stored);
    PTC_ASSERT(next->n == first->n);
    gcache iteration = *cur;
    for (int i = 0; i < cur->n; i++) /* back to the stored form the groups read */
        iteration.e[i].val = LLVMBuildBitCast(b, cur->e[i].val, stored[i], "");
    emit_iteration(c, k, o, &iteration);
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
    LLVMBuildBr(b, head);
    LLVMAddIncoming(o, &slot, &pre, 1);
    LLVMAddIncoming(o, &o_next, &latch, 1);
    for (int i = 0; i < cur->n; i++) {
        LLVMAddIncoming(cur->e[i].val, &first->e[i].val, &pre, 1);
        LLVMAddIncoming(cur->e[i].val, &next->e[i].val, &latch, 1);
    }
    LLVMPositionBuilderAtEnd(b, exit);
    free(first);
    free(next);
    free(cur);
}

/* Declares entry `name` over params pt[0..np) (the first nbufs global
 * pointers to buffers bufs[i], noalias, readonly where no kernel of ks
 * stores to them) and positions the builder in its body. */
static void open_entry(gcg *c, const char *name, LLVMTypeRef *pt, int np, const int *bufs,
                       int nbufs, const ptc_kernel *const *ks, int nks, int block)
{
    LLVMTypeRef ft = LLVMFunctionType(c->void_, pt, (unsigned)np, 0);
    c->fn = LLVMAddFunction(c->mod, name, ft);
    annotate(c, c->fn, "kernel", 1);
    annotate(c, c->fn, "maxntidx", block);
    add_attr(c, c->fn, LLVMAttributeFunctionIndex, "nounwind");
    for (int b = 0; b < c->s->prog->nbufs; b++)
        c->written[b] = c->s->is_local[b];
    for (int i = 0; i < nbufs; i++) {
        for (int j = 0; j < nks; j++)
            c->written[bufs[i]] |= kernel_stores(c->s, ks[j], bufs[i]);
        add_attr(c, c->fn, 1 + (unsigned)i, "noalias");
        if (!c->written[bufs[i]])
            add_attr(c, c->fn, 1 + (unsigned)i, "readonly");
        c->bufptr[bufs[i]] = LLVMGetParam(c->fn, (unsigned)i);
        c->bufspace[bufs[i]] = 1;
    }
    c->entry = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "entry");
    LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "start");
    LLVMPositionBuilderAtEnd(c->b, start);
}

/* The run's RNG offset from the entry's two parameters at index i and i+1:
 * the offset by value plus the int64 its cell holds. A run outside a CUDA
 * graph passes its offset and a cell of zeros; a recorded run passes 0 and
 * the recorder's cell, which it rewrites before each replay, so every replay
 * draws anew. Read once per thread; kernels that draw nothing lose the load. */
static LLVMValueRef run_rng_offset(gcg *c, unsigned i)
{
    LLVMValueRef cell = LLVMGetParam(c->fn, i + 1);
    add_attr(c, c->fn, i + 2, "noalias");
    add_attr(c, c->fn, i + 2, "readonly");
    LLVMValueRef held = LLVMBuildLoad2(c->b, c->i64, cell, "rng.cell");
    return LLVMBuildAdd(c->b, LLVMGetParam(c->fn, i), held, "rng.offset");
}

/* Closes the entry: its allocas' block falls through to the body. */
static void close_entry(gcg *c)
{
    LLVMBuildRetVoid(c->b);
    LLVMBasicBlockRef start = LLVMGetNextBasicBlock(c->entry);
    LLVMPositionBuilderAtEnd(c->b, c->entry);
    LLVMBuildBr(c->b, start);
}

/* Column mode's grid: block b runs the tiles of C consecutive columns b,
 * b + nctaid, ...; thread tid is slice tid / C of column tid % C. Every
 * thread of a block runs every tile, for the barriers: a thread past the
 * last column reads the last one's elements and stores nothing. */
static void emit_col_grid(gcg *c, kctx *k, LLVMValueRef ctaid, LLVMValueRef nctaid)
{
    int cols = c->plan->block / k->T;
    k->t = LLVMBuildUDiv(c->b, k->tid, ixc(c, cols), "");
    k->team_local = LLVMBuildURem(c->b, k->tid, ixc(c, cols), "");
    bind_locals(c, k, NULL, NULL);
    LLVMValueRef O = dims_product(c, c->k->outer, c->k->nouter);
    loop tl;
    loop_open(c, &tl, LLVMBuildMul(c->b, ctaid, ixc(c, cols), ""), O,
              LLVMBuildMul(c->b, nctaid, ixc(c, cols), ""), "tile");
    LLVMValueRef o = LLVMBuildAdd(c->b, tl.iv, k->team_local, "");
    k->valid = LLVMBuildICmp(c->b, LLVMIntSLT, o, O, "");
    o = LLVMBuildSelect(c->b, k->valid, o, LLVMBuildSub(c->b, O, ixc(c, 1), ""), "");
    emit_iteration(c, k, o, NULL);
    loop_close(c, &tl);
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
        if_open(c, LLVMBuildICmp(b, LLVMIntEQ, k->tid, ixc(c, 0), ""), "split.put");
    for (int m = 0; m < nred; m++)
        state_put(c, true, &reds[m], m, red_load(c, &reds[m]), unit);
    call0(c, "llvm.nvvm.membar.gl");
    LLVMValueRef off = LLVMBuildMul(b, o, ixc(c, 4), "");
    LLVMValueRef counter = LLVMBuildInBoundsGEP2(b, c->i8, c->scratch, &off, 1, "");
    LLVMValueRef done =
        LLVMBuildAtomicRMW(b, LLVMAtomicRMWBinOpAdd, counter, LLVMConstInt(c->i32, 1, 0),
                           LLVMAtomicOrderingMonotonic, 0);
    LLVMValueRef is_last = LLVMBuildICmp(b, LLVMIntEQ, done,
                                         LLVMConstInt(c->i32, (unsigned)c->plan->split - 1, 0), "");
    LLVMBasicBlockRef reset = if_open(c, is_last, "split.reset");
    store_(c, counter, LLVMConstInt(c->i32, 0, 0));
    store_(c, last, LLVMConstInt(c->i32, 1, 0));
    if_close(c, reset);
    if_close(c, join);
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
        if_open(c, LLVMBuildICmp(c->b, LLVMIntULT, k->tid, ixc(c, S), ""), "split.get");
    LLVMValueRef unit = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, o, ixc(c, S), ""), k->tid, "");
    for (int m = 0; m < nred; m++)
        red_save(c, &reds[m], state_get(c, true, &reds[m], m, unit, red_load(c, &reds[m])));
    if_close(c, join);
    red_across(c, k, reds, nred, k->T);
    join = if_open(c, stores_results(c, k, k->t), "red.store");
    for (int m = 0; m < nred; m++)
        red_store(c, &reds[m]);
    if_close(c, join);
}

/* Split rows' grid: block b runs units b, b + nctaid, ... of the rows' S
 * blocks each (unit = row * S + the row's block j, which folds elements
 * j*L .. (j+1)*L-1 of group 0's reduction); a row's last block runs the
 * later groups (the epilogue). */
static void emit_split_grid(gcg *c, kctx *k, LLVMValueRef ctaid, LLVMValueRef nctaid)
{
    LLVMBuilderRef b = c->b;
    const ptc_kgroup *G = &c->k->groups[0];
    k->t = k->tid;
    k->team_local = ixc(c, 0);
    bind_locals(c, k, NULL, NULL);
    LLVMValueRef S = ixc(c, c->plan->split), L = ixc(c, c->plan->split_len);
    LLVMValueRef units = LLVMBuildMul(b, dims_product(c, c->k->outer, c->k->nouter), S, "");
    LLVMValueRef n = dims_product(c, G->red, G->nred);
    int nred;
    red *reds = red_members(c, G, &nred);
    loop ul;
    loop_open(c, &ul, ctaid, units, nctaid, "split");
    LLVMValueRef o = LLVMBuildUDiv(b, ul.iv, S, "");
    LLVMValueRef lo = LLVMBuildMul(b, LLVMBuildURem(b, ul.iv, S, ""), L, "");
    LLVMValueRef hi = LLVMBuildAdd(b, lo, L, "");
    hi = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, hi, n, ""), hi, n, "");
    decompose(c, o, c->k->outer, c->k->nouter, 0);
    for (int m = 0; m < nred; m++)
        red_init(c, &reds[m]);
    red_loop(c, G, reds, nred, LLVMBuildAdd(b, lo, k->t, ""), hi, k->T);
    red_across(c, k, reds, nred, k->T);
    LLVMBasicBlockRef join = if_open(c, split_publish(c, k, reds, nred, o, ul.iv), "split.last");
    split_combine(c, k, reds, nred, o);
    team_barrier(c, k);
    for (int g = 1; g < c->k->ngroups; g++) {
        emit_pw_group(c, k, &c->k->groups[g]);
        team_barrier(c, k);
    }
    if_close(c, join);
    loop_close(c, &ul);
    free(reds);
}

/* Kernel c->k's outer iterations, run by the blocks `ctaid` of the `nctaid`
 * (ix values) its launch gives it, as a grid-stride loop over teams. */
static void emit_grid(gcg *c, bool vector_form, LLVMValueRef scratch, LLVMValueRef ctaid,
                      LLVMValueRef nctaid)
{
    const ptc_kernel *kn = c->k;
    const gplan *p = c->plan;
    c->vector_form = vector_form;
    c->rounded.n = 0;
    c->W = vector_form ? p->vec : 1;
    c->vec_var = c->W == 1 ? -1 : p->row ? kn->nouter + p->row_ndim - 1 : kn->nouter - 1;
    kctx k = {.T = p->team};
    int tpb = p->block / p->team;
    k.tid = sreg(c, "llvm.nvvm.read.ptx.sreg.tid.x");
    k.lane = LLVMBuildURem(c->b, k.tid, ixc(c, 32), "");
    if (p->col || p->split) {
        (p->col ? emit_col_grid : emit_split_grid)(c, &k, ctaid, nctaid);
        return;
    }
    k.t = k.T == 1 ? ixc(c, 0) : LLVMBuildURem(c->b, k.tid, ixc(c, k.T), "");
    k.team_local = k.T == 1 ? k.tid : LLVMBuildUDiv(c->b, k.tid, ixc(c, k.T), "");
    LLVMValueRef slot =
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, ctaid, ixc(c, tpb), ""), k.team_local, "");
    LLVMValueRef nteams = LLVMBuildMul(c->b, nctaid, ixc(c, tpb), "");
    bind_locals(c, &k, scratch, slot);
    LLVMValueRef O = dims_product(c, kn->outer, kn->nouter);
    if (c->W > 1 && p->flat)
        O = LLVMBuildUDiv(c->b, O, ixc(c, c->W), "");
    if (p->row_ahead && p->row && (vector_form || p->vec == 1) && first_reduction(kn)) {
        emit_rows_ahead(c, &k, slot, O, nteams);
        return;
    }
    loop ol;
    loop_open(c, &ol, slot, O, nteams, "outer");
    emit_iteration(c, &k, ol.iv, NULL);
    loop_close(c, &ol);
}

void g_emit_kernel(gcg *c, const char *name, bool vector_form)
{
    c->target = &g_target;
    const ptc_kernel *kn = c->k;
    /* (bufs..., scratch, rng offset, rng cell, params..., [status record address]) */
    bool checks = ptc_kernel_has_checks(kn);
    int nargs = kn->nargs, np = nargs + 3 + kn->nparams + checks;
    LLVMTypeRef *pt = calloc((size_t)np + 1, sizeof *pt);
    for (int i = 0; i < np; i++)
        pt[i] = i <= nargs || i == nargs + 2 ? c->gptr : c->i64;
    open_entry(c, name, pt, np, kn->args, nargs, &c->k, 1, c->plan->block);
    if (c->plan->min_blocks) /* .minnctapersm: ptxas caps registers to fit them */
        annotate(c, c->fn, "minctasm", c->plan->min_blocks);
    free(pt);
    LLVMValueRef scratch = LLVMGetParam(c->fn, (unsigned)nargs);
    c->rng_offset = run_rng_offset(c, (unsigned)nargs + 1);
    c->seed_base = kn->seed_base;
    for (int i = 0; i < kn->nparams; i++) {
        LLVMValueRef v = LLVMGetParam(c->fn, (unsigned)(nargs + 3 + i));
        c->param[i] = c->ix == c->i64 ? v : LLVMBuildTrunc(c->b, v, c->ix, "");
    }
    c->status = checks ? LLVMGetParam(c->fn, (unsigned)(np - 1)) : NULL;
    c->scratch = scratch;
    emit_grid(c, vector_form, scratch, sreg(c, "llvm.nvvm.read.ptx.sreg.ctaid.x"),
              sreg(c, "llvm.nvvm.read.ptx.sreg.nctaid.x"));
    close_entry(c);
}

/* ---- horizontal combinations: one launch, a member per block --------------------------------- */

typedef struct combo_emit {
    const ptc_kernel *const *ks;
    const gplan *plans;
    LLVMValueRef bid;
    LLVMBasicBlockRef exit;
    LLVMValueRef *ends; /* per member: the block after its last (ix) */
    bool vector_form;
} combo_emit;

/* Members lo..hi-1 for the blocks from `start` on: a binary search over the
 * block offsets, then the member's grid (its blocks, renumbered from 0). */
static void emit_members(gcg *c, const combo_emit *e, int lo, int hi, LLVMValueRef start)
{
    if (hi - lo == 1) {
        c->k = e->ks[lo];
        c->plan = &e->plans[lo];
        emit_grid(c, e->vector_form && c->plan->vec > 1, NULL,
                  LLVMBuildSub(c->b, e->bid, start, ""),
                  LLVMBuildSub(c->b, e->ends[lo], start, ""));
        LLVMBuildBr(c->b, e->exit);
        return;
    }
    int mid = (lo + hi) / 2;
    LLVMBasicBlockRef left = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "members");
    LLVMBasicBlockRef right = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "members");
    LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntULT, e->bid, e->ends[mid - 1], ""), left,
                    right);
    LLVMPositionBuilderAtEnd(c->b, left);
    emit_members(c, e, lo, mid, start);
    LLVMPositionBuilderAtEnd(c->b, right);
    emit_members(c, e, mid, hi, e->ends[mid - 1]);
}

void g_emit_combo(gcg *c, const char *name, const ptc_kernel *const *ks, const gplan *plans, int n,
                  const int *args, int nargs, int64_t seed_base, bool vector_form)
{
    c->target = &g_target;
    /* (bufs..., rng offset, rng cell, ends[n]) */
    int np = nargs + 2 + n;
    LLVMTypeRef *pt = calloc((size_t)np + 1, sizeof *pt);
    for (int i = 0; i < np; i++)
        pt[i] = i < nargs || i == nargs + 1 ? c->gptr : i == nargs ? c->i64 : c->i32;
    open_entry(c, name, pt, np, args, nargs, ks, n, plans[0].block);
    free(pt);
    c->rng_offset = run_rng_offset(c, (unsigned)nargs);
    c->seed_base = seed_base; /* one offset for every member */
    c->status = NULL;
    LLVMValueRef *ends = calloc((size_t)n + 1, sizeof *ends);
    for (int i = 0; i < n; i++) {
        LLVMValueRef v = LLVMGetParam(c->fn, (unsigned)(nargs + 2 + i));
        ends[i] = c->ix == c->i32 ? v : LLVMBuildZExt(c->b, v, c->ix, "");
    }
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "done");
    combo_emit e = {ks, plans, sreg(c, "llvm.nvvm.read.ptx.sreg.ctaid.x"), exit, ends, vector_form};
    emit_members(c, &e, 0, n, ixc(c, 0));
    LLVMPositionBuilderAtEnd(c->b, exit);
    close_entry(c);
    free(ends);
}
