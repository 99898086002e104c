/* Internal to compiler/codegen/cuda: the NVPTX emitter's state and helpers.
 *
 * The scalar bodies (arithmetic, casts, index math) are codegen/body.c's, for
 * one thread working on W consecutive elements (W-lane LLVM vectors; W is 1
 * except in vectorised pointwise kernels); body.c here gives it loads, stores
 * and f16/bf16 conversions, gmath.c the math functions the GPU has no
 * library for, kernel.c the kernel's structure (teams, loops, barriers,
 * entries; with reduce.c's reductions and shuffles and row.c's row mode,
 * which share kernel.h) and plan.c how a kernel is launched.
 */
#ifndef PTC_GPU_H
#define PTC_GPU_H

#include "codegen/body.h"
#include "codegen/codegen.h"

#include <llvm-c/Core.h>

/* Cross-warp reductions meet in shared memory: per reduction member, RED_FIELDS
 * 8-byte fields (value, index, Welford mean, M2, count) for each of the at most
 * MAX_WARPS warps of a block (1024 threads, the CUDA limit, / 32 lanes). */
enum { WARP = 32, MAX_BLOCK = 1024, MAX_WARPS = MAX_BLOCK / WARP, RED_FIELDS = 5 };
enum { RED_FIELD_BYTES = MAX_WARPS * 8, RED_MEMBER_BYTES = RED_FIELDS * RED_FIELD_BYTES };

/* Lanes a thread of a vectorised form handles at most (8 bf16: 16 bytes). */
enum { MAX_VEC = 8 };

/* Where a kernel-local buffer lives. */
enum { LOC_NONE, LOC_PRIVATE, LOC_SHARED, LOC_SCRATCH };

typedef struct gplan {
    int team;             /* threads per team (one team runs one outer iteration) */
    int block;            /* threads per block */
    int vec;              /* W of the vectorised form (1: none): flat kernels' outer
                           * elements, row mode's row chunks, or (neither) chunks of
                           * the innermost reduction range (reduce.c's red_loop) */
    bool flat;            /* every group pointwise without inner ranges */
    bool row;             /* row mode: every group runs over the same N elements */
    int row_n;            /* N */
    int row_ndim;         /* number of ranges of each group (flattened into N) */
    int row_j;            /* chunks of W elements per lane in the vectorised form */
    bool i32;             /* index arithmetic fits in 32 bits */
    int *red_lanes;       /* per group: threads of a team sharing one reduction (Tr) */
    uint8_t *loc;         /* per local (kernel->locals order): LOC_* */
    int64_t *loc_off;     /* per local: byte offset in its team's shared / scratch area */
    int64_t smem_team;    /* shared bytes per team (locals) */
    int64_t smem_red;     /* shared bytes per block for cross-warp reductions */
    int64_t scratch_team; /* global scratch bytes per team (static) */
    uint8_t *valign;      /* per kernel arg: alignment the vector form needs (0: none) */
    bool outer_contig, inner_contig; /* the accesses the team choice weighs */
    bool pointwise;                  /* and whether no group reduces */
    bool erfc_sum;                   /* 1 + erf(z) is g_one_plus_erf's (plan.c says when) */
    int min_blocks;    /* row mode: blocks per SM the entry asks registers for (0: any) */
    bool row_forward;  /* row mode: a lane's row-long locals stay in registers from
                        * their store to later groups' loads (cuda/body.c) */
    int row_ahead;     /* row mode: rows a team is given at least, its next row's loads
                        * issued before the current row's work (0: one row at a time) */
    bool packed_add;   /* bf16 sums are fma.rn.bf16x2 (cuda/body.c's half_add) */
    bool col;          /* column mode: a block is block/team columns x team row slices */
    int col_fields;    /* column mode: shared 8-byte fields per reduction member and thread */
    bool warps_loop;   /* a block's warps' states combine in a loop, not unrolled (reduce.c) */
    int split;         /* split rows: blocks per row, S (0: none) */
    int64_t split_len; /* split rows: the elements of a row each block folds, L */
    int split_members; /* split rows: the reduction members of group 0 */
    int red_unroll;    /* vectorised reductions (plan_red_vec): vectors a thread loads an
                        * unrolled iteration of reduce.c's red_loop (0: not one) */
} gplan;

/* Loads already emitted in this outer iteration (row mode and flat
 * kernels): issued first (g_prefetch), and in row mode read from memory once
 * and kept in registers across groups. */
typedef struct gcache {
    int n;
    struct {
        int buf, j, w;
        const ptc_ix *off;
        LLVMValueRef val;
    } e[256];
    int nfwd; /* row mode: the reductions' results, which every lane holds */
    struct {
        int buf;
        const ptc_ix *off;
        LLVMValueRef val; /* scalar */
    } fwd[32];
} gcache;

/* f16/bf16 roundings emitted in this kernel: each rounded value with the f32
 * value it came from, so that a store converts that value in one rounding
 * (rounding twice to the same precision is rounding once) instead of
 * converting the already rounded one again. A ring: an entry forgotten only
 * costs a redundant conversion. */
enum { ROUNDED_MAX = 64 };
typedef struct grounded {
    int n;
    struct {
        LLVMValueRef rounded, exact;
    } e[ROUNDED_MAX];
} grounded;

typedef struct gcg {
    PTC_EMITTER_UNION; /* ctx, mod, b, fn, entry, s, k, W, vec_var, ix, ... (body.h) */
    const gplan *plan;
    bool vector_form;       /* emitting the vectorised entry */
    unsigned *bufspace;     /* per buffer id: address space of bufptr */
    uint8_t *bufalign;      /* per buffer id: alignment its aligned vector accesses assume */
    LLVMValueRef status;    /* i64 address of the checks' status record (NULL: no checks) */
    LLVMValueRef smem;      /* the dynamic shared memory (addrspace 3) */
    LLVMTypeRef gptr, sptr; /* global and shared pointers */
    int sm;                 /* target compute capability x 10 */
    bool *written;          /* per buffer id: stored to by this kernel */
    gcache *cache;          /* row mode: loads of read-only buffers, or NULL */
    int cache_j;            /* the chunk the values being emitted belong to */
    grounded rounded;
    LLVMValueRef scratch; /* split rows: the scratch area (counters, partial states) */
} gcg;

/* ---- body.c ---- */
/* What the scalar-body emitter (codegen/body.h) asks of NVPTX. */
extern const ptc_emit_target g_target;
LLVMTypeRef g_vec(gcg *c, LLVMTypeRef t, int w);
LLVMValueRef g_splat(gcg *c, LLVMValueRef v, int w);
LLVMValueRef g_const_f(LLVMTypeRef t, double v, int w);
LLVMValueRef g_const_i(LLVMTypeRef t, int64_t v, int w);
int g_width(LLVMValueRef x);
LLVMValueRef g_intrinsic(gcg *c, const char *name, LLVMTypeRef *over, int nover, LLVMValueRef *args,
                         int nargs);
LLVMValueRef g_alloca(gcg *c, LLVMTypeRef t, const char *name);
void g_store(gcg *c, int bufid, const ptc_ix *off, LLVMValueRef v, LLVMValueRef *vals, int w);
/* Whether offset off is a multiple of w wherever variable vec_var is (every
 * other term and the constant static multiples of w): a w-lane access there
 * is aligned to its width on a base that is. */
bool g_aligned_w(const ptc_ix *off, int vec_var, int w);
/* Issues body's cacheable loads (read-only buffers, unmasked, direct
 * offsets) now, into c->cache, so that they are in flight together before
 * the arithmetic that uses them: ptxas does not move a load above the slow
 * path of an IEEE division or square root (a call in the SASS), and a load
 * issued after one waits a second memory latency. */
void g_prefetch(gcg *c, const ptc_lbody *body, int w);

/* ---- gmath.c: f32 / f64 math of any vector width ---- */
LLVMValueRef g_exp(gcg *c, LLVMValueRef x);
LLVMValueRef g_log(gcg *c, LLVMValueRef x);
LLVMValueRef g_log1p(gcg *c, LLVMValueRef x);
LLVMValueRef g_expm1(gcg *c, LLVMValueRef x);
LLVMValueRef g_tanh(gcg *c, LLVMValueRef x);
LLVMValueRef g_erf(gcg *c, LLVMValueRef x);
/* 1 + erf(z) for f32 z, as erfc(-z), in 2/3 of erf's instructions: 3e-6
 * relative error for every z (gmath.c), where 1 + erf(z) is within 6e-8. */
LLVMValueRef g_one_plus_erf(gcg *c, LLVMValueRef z);
LLVMValueRef g_sin(gcg *c, LLVMValueRef x);
LLVMValueRef g_cos(gcg *c, LLVMValueRef x);
LLVMValueRef g_atan2(gcg *c, LLVMValueRef y, LLVMValueRef x);
LLVMValueRef g_pow(gcg *c, LLVMValueRef x, LLVMValueRef y);
LLVMValueRef g_randn(gcg *c, LLVMValueRef key, LLVMValueRef idx);

/* ---- plan.c ---- */
/* Chooses how kernel k is launched (allocated in a): forms[0] for the
 * default sizes, and where the team depends on symbolic sizes, further forms
 * with other teams (forms[PTC_CUDA_MAX_FORMS]); returns their count.
 * wide_index: 64-bit index arithmetic whatever the sizes. */
int g_plan(ptc_arena *a, const ptc_schedule *s, const ptc_kernel *k, const ptc_cuda_target *t,
           bool wide_index, gplan *forms);

/* ---- reduce.c ---- */
/* Split rows: the bytes of kernel k's partial states in the scratch area
 * (after PTC_CUDA_SPLIT_COUNTERS). */
int64_t g_split_partials_bytes(const ptc_kernel *k, const gplan *p);

/* ---- kernel.c ---- */
/* Emits the kernel's entry `name` (vector_form: the vectorised one). */
void g_emit_kernel(gcg *c, const char *name, bool vector_form);
/* Emits the entry `name` of a horizontal combination of the flat kernels
 * ks[0..n) (plans[i]: each planned with the combination's block), taking
 * (args[0..nargs) buffers, rng offset, rng cell, ends[n] i32): blocks ends[i-1] ..
 * ends[i]-1 run member i; its draws take seeds relative to seed_base (the
 * launch shifts the rng offset by it). vector_form: members with a
 * vectorised form run it. */
void g_emit_combo(gcg *c, const char *name, const ptc_kernel *const *ks, const gplan *plans, int n,
                  const int *args, int nargs, int64_t seed_base, bool vector_form);

#endif /* PTC_GPU_H */
