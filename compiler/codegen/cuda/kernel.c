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
 *   reduction group:  reduce.c; in row mode row.c
 *
 * Flat kernels have no team work: one thread computes W consecutive
 * elements (the vectorised form) or one, and values of kernel-local buffers
 * are forwarded in registers. This file also declares the entries, lays out
 * the grids (teams, column mode's tiles; split rows' is reduce.c's), gives a
 * team its next row ahead, and emits horizontal combinations.
 */
#include "codegen/cuda/kernel.h"

#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------ */

void g_loop_open(gcg *c, loop *l, LLVMValueRef lo, LLVMValueRef hi, LLVMValueRef step,
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

void g_loop_close(gcg *c, loop *l)
{
    LLVMValueRef next = LLVMBuildNSWAdd(c->b, l->iv, l->step, "");
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(c->b);
    LLVMAddIncoming(l->iv, &next, &cur, 1);
    LLVMBuildBr(c->b, l->head);
    LLVMPositionBuilderAtEnd(c->b, l->exit);
}

/* if (cond) { ... } : returns the join block; the builder is inside "then". */
LLVMBasicBlockRef g_if_open(gcg *c, LLVMValueRef cond, const char *name)
{
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(c->ctx, c->fn, name);
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(c->ctx, c->fn, name);
    LLVMBuildCondBr(c->b, cond, then, join);
    LLVMPositionBuilderAtEnd(c->b, then);
    return join;
}

void g_if_close(gcg *c, LLVMBasicBlockRef join)
{
    LLVMBuildBr(c->b, join);
    LLVMPositionBuilderAtEnd(c->b, join);
}

static LLVMValueRef sreg(gcg *c, const char *name)
{
    LLVMValueRef v = call0(c, name);
    return c->ix == c->i32 ? v : LLVMBuildZExt(c->b, v, c->ix, "");
}

LLVMValueRef g_dims_product(gcg *c, const ptc_dim *d, int n)
{
    LLVMValueRef p = ixc(c, 1);
    for (int i = 0; i < n; i++)
        p = LLVMBuildNSWMul(c->b, p, ptc_emit_dim(&c->em, d[i]), "");
    return p;
}

/* Splits flat index f (innermost fastest) into variables first..first+n-1. */
void g_decompose(gcg *c, LLVMValueRef f, const ptc_dim *d, int n, int first)
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

/* The lanes of this thread's T-lane segment of its warp (T <= 32). */
LLVMValueRef g_segment_mask(gcg *c, const kctx *k, int T)
{
    if (T >= 32)
        return LLVMConstInt(c->i32, 0xffffffffu, 0);
    LLVMValueRef lane = k->lane;
    if (c->ix != c->i32)
        lane = LLVMBuildTrunc(c->b, lane, c->i32, "");
    LLVMValueRef start = LLVMBuildAnd(c->b, lane, LLVMConstInt(c->i32, ~(unsigned)(T - 1), 0), "");
    return LLVMBuildShl(c->b, LLVMConstInt(c->i32, (1u << T) - 1, 0), start, "");
}

void g_team_barrier(gcg *c, const kctx *k)
{
    if (k->T == 1)
        return;
    if (k->T > 32 || c->plan->col) {
        call0(c, "llvm.nvvm.barrier0");
        return;
    }
    LLVMValueRef m = g_segment_mask(c, k, k->T);
    g_intrinsic(c, "llvm.nvvm.bar.warp.sync", NULL, 0, &m, 1);
}

/* ---- pointwise members ------------------------------------------------------------------ */

static bool is_local(gcg *c, int buf)
{
    return c->s->is_local[buf];
}

/* Whether lane `lane` of its team stores its iteration's results: lane 0,
 * and in column mode only where the column exists. */
LLVMValueRef g_stores_results(gcg *c, const kctx *k, LLVMValueRef lane)
{
    LLVMValueRef lead = LLVMBuildICmp(c->b, LLVMIntEQ, lane, ixc(c, 0), "");
    return k->valid ? LLVMBuildAnd(c->b, lead, k->valid, "") : lead;
}

void g_emit_pw_member(gcg *c, const ptc_kmember *mem, ptc_emit_fwd *fw, int w, bool skip_locals)
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
            g_emit_pw_member(c, &c->k->groups[g].members[m], &fw, c->W, true);
}

void g_emit_pw_group(gcg *c, const kctx *k, const ptc_kgroup *G)
{
    int nouter = c->k->nouter;
    ptc_emit_fwd fw;
    fw.n = 0;
    if (G->ninner == 0) {
        LLVMBasicBlockRef join = NULL;
        if (k->T > 1)
            join = g_if_open(c, g_stores_results(c, k, k->t), "lead");
        for (int m = 0; m < G->nmembers; m++)
            g_emit_pw_member(c, &G->members[m], &fw, 1, false);
        if (join)
            g_if_close(c, join);
        return;
    }
    loop l;
    g_loop_open(c, &l, k->t, g_dims_product(c, G->inner, G->ninner), ixc(c, k->T), "pw");
    g_decompose(c, l.iv, G->inner, G->ninner, nouter);
    for (int m = 0; m < G->nmembers; m++)
        g_emit_pw_member(c, &G->members[m], &fw, 1, false);
    g_loop_close(c, &l);
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

void g_bind_locals(gcg *c, const kctx *k, LLVMValueRef scratch, LLVMValueRef slot)
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
        g_decompose(c, e, kn->outer, kn->nouter, 0);
        c->cache = cache;
        c->cache_j = 0;
        emit_flat(c);
        c->cache = NULL;
        return;
    }
    g_decompose(c, o, kn->outer, kn->nouter, 0);
    bool row = c->plan->row && (c->vector_form || c->plan->vec == 1);
    if (row)
        c->cache = cache;
    for (int g = 0; g < kn->ngroups; g++) {
        if (row && kn->groups[g].reduction)
            g_row_prefetch(c, k, &kn->groups[g]);
        if (row && kn->groups[g].reduction)
            g_emit_row_red_group(c, k, &kn->groups[g]);
        else if (row)
            g_emit_row_pw_group(c, k, &kn->groups[g]);
        else if (kn->groups[g].reduction)
            g_emit_red_group(c, k, &kn->groups[g], g);
        else
            g_emit_pw_group(c, k, &kn->groups[g]);
        g_team_barrier(c, k);
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
    g_decompose(c, o, c->k->outer, c->k->nouter, 0);
    into->n = 0;
    into->nfwd = 0;
    c->cache = into;
    g_row_prefetch(c, k, first_reduction(c->k));
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
    LLVMBasicBlockRef join = g_if_open(c, LLVMBuildICmp(c->b, LLVMIntSLT, o, O, ""), "row.ahead");
    load_row(c, k, o, into);
    LLVMValueRef words[256];
    for (int i = 0; i < into->n; i++) {
        stored[i] = LLVMTypeOf(into->e[i].val);
        words[i] = as_words(c, into->e[i].val);
    }
    LLVMBasicBlockRef loaded = LLVMGetInsertBlock(c->b);
    g_if_close(c, join);
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
    g_bind_locals(c, k, NULL, NULL);
    LLVMValueRef O = g_dims_product(c, c->k->outer, c->k->nouter);
    loop tl;
    g_loop_open(c, &tl, LLVMBuildMul(c->b, ctaid, ixc(c, cols), ""), O,
                LLVMBuildMul(c->b, nctaid, ixc(c, cols), ""), "tile");
    LLVMValueRef o = LLVMBuildAdd(c->b, tl.iv, k->team_local, "");
    k->valid = LLVMBuildICmp(c->b, LLVMIntSLT, o, O, "");
    o = LLVMBuildSelect(c->b, k->valid, o, LLVMBuildSub(c->b, O, ixc(c, 1), ""), "");
    emit_iteration(c, k, o, NULL);
    g_loop_close(c, &tl);
}

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
        (p->col ? emit_col_grid : g_emit_split_grid)(c, &k, ctaid, nctaid);
        return;
    }
    k.t = k.T == 1 ? ixc(c, 0) : LLVMBuildURem(c->b, k.tid, ixc(c, k.T), "");
    k.team_local = k.T == 1 ? k.tid : LLVMBuildUDiv(c->b, k.tid, ixc(c, k.T), "");
    LLVMValueRef slot =
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, ctaid, ixc(c, tpb), ""), k.team_local, "");
    LLVMValueRef nteams = LLVMBuildMul(c->b, nctaid, ixc(c, tpb), "");
    g_bind_locals(c, &k, scratch, slot);
    LLVMValueRef O = g_dims_product(c, kn->outer, kn->nouter);
    if (c->W > 1 && p->flat)
        O = LLVMBuildUDiv(c->b, O, ixc(c, c->W), "");
    if (p->row_ahead && p->row && (vector_form || p->vec == 1) && first_reduction(kn)) {
        emit_rows_ahead(c, &k, slot, O, nteams);
        return;
    }
    loop ol;
    g_loop_open(c, &ol, slot, O, nteams, "outer");
    emit_iteration(c, &k, ol.iv, NULL);
    g_loop_close(c, &ol);
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
