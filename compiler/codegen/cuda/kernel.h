/* Internal to the kernel structure of compiler/codegen/cuda: what kernel.c
 * (the kernel function: teams, loops, pointwise groups, entries, grids and
 * combinations), reduce.c (reduction states, their combination across
 * threads, the reduction loop, split rows) and row.c (row mode) share.
 */
#ifndef PTC_GPU_KERNEL_H
#define PTC_GPU_KERNEL_H

#include "codegen/cuda/gpu.h"

/* ---- kernel.c: control flow, index math, teams ---- */

typedef struct loop {
    LLVMBasicBlockRef head, body, exit;
    LLVMValueRef iv, step;
} loop;

/* for (iv = lo; iv < hi; iv += step): the builder is in the body. */
void g_loop_open(gcg *c, loop *l, LLVMValueRef lo, LLVMValueRef hi, LLVMValueRef step,
                 const char *name);
void g_loop_close(gcg *c, loop *l);
/* if (cond) { ... } : returns the join block; the builder is inside "then". */
LLVMBasicBlockRef g_if_open(gcg *c, LLVMValueRef cond, const char *name);
void g_if_close(gcg *c, LLVMBasicBlockRef join);

static inline LLVMValueRef ixc(gcg *c, int64_t v)
{
    return LLVMConstInt(c->ix, (unsigned long long)v, 1);
}

static inline LLVMValueRef call0(gcg *c, const char *name)
{
    return g_intrinsic(c, name, NULL, 0, NULL, 0);
}

static inline LLVMValueRef load_(gcg *c, LLVMTypeRef t, LLVMValueRef p)
{
    return LLVMBuildLoad2(c->b, t, p, "");
}

static inline void store_(gcg *c, LLVMValueRef p, LLVMValueRef v)
{
    LLVMBuildStore(c->b, v, p);
}

LLVMValueRef g_dims_product(gcg *c, const ptc_dim *d, int n);
/* Splits flat index f (innermost fastest) into variables first..first+n-1. */
void g_decompose(gcg *c, LLVMValueRef f, const ptc_dim *d, int n, int first);

typedef struct kctx {
    LLVMValueRef tid, t, team_local, lane; /* ix values */
    LLVMValueRef valid; /* column mode: this thread's column exists (i1); else NULL */
    int T;
} kctx;

/* The lanes of this thread's T-lane segment of its warp (T <= 32). */
LLVMValueRef g_segment_mask(gcg *c, const kctx *k, int T);
void g_team_barrier(gcg *c, const kctx *k);
/* Whether lane `lane` of its team stores its iteration's results: lane 0,
 * and in column mode only where the column exists. */
LLVMValueRef g_stores_results(gcg *c, const kctx *k, LLVMValueRef lane);
void g_emit_pw_member(gcg *c, const ptc_kmember *mem, ptc_emit_fwd *fw, int w, bool skip_locals);
void g_emit_pw_group(gcg *c, const kctx *k, const ptc_kgroup *G);
void g_bind_locals(gcg *c, const kctx *k, LLVMValueRef scratch, LLVMValueRef slot);

/* ---- reduce.c: reduction members and their states ---- */

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
    ptc_red_state vacc;              /* vectorised forms: W-lane allocas */
    LLVMValueRef *row_x, *row_valid; /* two-pass Welford: each chunk's values and valid */
    LLVMValueRef chunk[ROW_UNROLL];  /* Welford: an unrolled iteration's values, when chunking */
    int nchunk;
    bool chunking;
} red;

static inline bool is_arg(const red *r)
{
    return r->reduce == PTC_RED_ARGMAX || r->reduce == PTC_RED_ARGMIN;
}

static inline bool is_welford(const red *r)
{
    return r->reduce == PTC_RED_WELFORD;
}

/* Member r's state in the accumulators acc, w lanes wide, and back. */
ptc_red_state g_acc_load(gcg *c, const red *r, const ptc_red_state *acc, int w);
void g_acc_save(gcg *c, const red *r, const ptc_red_state *acc, ptc_red_state s);
/* Makes the allocas of a state of member r, `lanes` wide. */
void g_state_allocas(gcg *c, const red *r, ptc_red_state *acc, int lanes);
/* W-lane states (vacc; W = c->W): back to the identity of how the member
 * combines; W lanes of element values x (linear reduction indices idx for
 * argmax/argmin, else NULL) folded in, where valid (NULL: every lane); the
 * lanes combined in lane order into the scalar state. */
void g_lanes_reset(gcg *c, red *r);
void g_lanes_update(gcg *c, red *r, LLVMValueRef x, LLVMValueRef idx, LLVMValueRef valid);
void g_lanes_fold(gcg *c, red *r);
/* The i64 vector 0, 1, .. w-1 (NULL for w = 1). */
LLVMValueRef g_iota64(gcg *c, int w);
/* Its scalar state. */
ptc_red_state g_red_load(gcg *c, const red *r);
void g_red_save(gcg *c, const red *r, ptc_red_state s);
/* Combines two states (Chan's merge for Welford). */
ptc_red_state g_red_combine(gcg *c, const red *r, ptc_red_state a, ptc_red_state x);
/* Combines the states of the Tr lanes sharing each reduction. */
void g_red_across(gcg *c, const kctx *k, red *reds, int nred, int Tr);
/* The member's outputs from its final state f, and their stores. */
void g_red_outputs(gcg *c, const red *r, ptc_red_state f, LLVMValueRef outs[2]);
void g_red_store_outputs(gcg *c, const red *r, LLVMValueRef outs[2]);
/* A reduction group outside row mode: kept elements side by side, Tr lanes
 * sharing each reduction. */
void g_emit_red_group(gcg *c, const kctx *k, const ptc_kgroup *G, int g);
/* Split rows' grid (plan.c). */
void g_emit_split_grid(gcg *c, kctx *k, LLVMValueRef ctaid, LLVMValueRef nctaid);

/* ---- row.c: row mode ---- */

void g_row_prefetch(gcg *c, const kctx *k, const ptc_kgroup *G);
void g_emit_row_pw_group(gcg *c, const kctx *k, const ptc_kgroup *G);
void g_emit_row_red_group(gcg *c, const kctx *k, const ptc_kgroup *G);

#endif /* PTC_GPU_KERNEL_H */
