/* The scalar-body emitter both code generators share (body.c): LLVM IR for
 * the entries of a loop-IR body (loads, constants, index expressions, casts,
 * arithmetic, math, where, checks, random draws) over W lanes, the index
 * arithmetic and storage conversions around them, and the reduction steps
 * (identities, argmax/argmin order, the combine of two states). A backend
 * keeps its loop structure and says what truly differs in a ptc_emit_target
 * table: how a load reaches memory, how f16/bf16 convert, which math
 * functions it calls, how fmod and integer powers are built and where the
 * checks' status record lives.
 */
#ifndef PTC_CODEGEN_BODY_H
#define PTC_CODEGEN_BODY_H

#include "lower/lower.h"

#include <llvm-c/Core.h>
#include <stdbool.h>

typedef struct ptc_emitter ptc_emitter;

/* What differs between the targets. A hook gets the backend's own state as
 * the ptc_emitter its state begins with. */
typedef struct ptc_emit_target {
    /* f16 is kept in memory as i16 bits instead of half (LLVM 16's NVPTX
     * miscompiles wide half vectors) */
    bool f16_as_bits;
    /* x / y with y the same in every lane is x * (1 / y): the reciprocal is
     * hoisted out of the loop (at most an ulp off; torch's CPU softmax does
     * the same) */
    bool uniform_div_as_mul;
    /* integer powers call one helper function per type instead of running
     * their loop inline */
    bool ipow_as_call;
    /* The value of a load entry at the current lanes (vals: the entries
     * before it); masked-off lanes take the entry's constant. mask_uniform:
     * its mask is the same in every lane (a padded copy's rows past the
     * source's), so one test can stand for all lanes. */
    LLVMValueRef (*load)(ptc_emitter *c, const ptc_lexpr *e, LLVMValueRef *vals, bool mask_uniform,
                         int w);
    /* f16 / bf16 only: f32 -> storage bits / value and back. */
    LLVMValueRef (*half_to_storage)(ptc_emitter *c, LLVMValueRef v, ptc_dtype dt, int w);
    LLVMValueRef (*half_from_storage)(ptc_emitter *c, LLVMValueRef v, ptc_dtype dt, int w);
    /* An f32 value rounded to f16 / bf16 precision, or NULL: a store's
     * conversion and back. */
    LLVMValueRef (*half_round)(ptc_emitter *c, LLVMValueRef v, ptc_dtype dt, int w);
    /* x + y rounded to f16 / bf16 dt, for f32 x, y that are values of dt
     * (torch's sum of two half tensors), as a value like half_round's, or
     * NULL: the body adds in f32 and rounds. */
    LLVMValueRef (*half_add)(ptc_emitter *c, LLVMValueRef x, LLVMValueRef y, ptc_dtype dt, int w);
    /* The math functions on floats of dtype dt: the TARGET_MATH rows of
     * ir/pointwise.def's emit column (exp, log, tanh, erf, log1p, expm1, sin,
     * cos: y NULL; atan2) and pow (general float exponents). */
    LLVMValueRef (*math)(ptc_emitter *c, int op, ptc_dtype dt, LLVMValueRef x, LLVMValueRef y);
    /* 1 + erf(z) for f32 z (gelu's form), as erfc(-z) in one evaluation, or
     * NULL where the target has no such form (the hook or its value): the
     * body then adds 1 to erf(z). */
    LLVMValueRef (*one_plus_erf)(ptc_emitter *c, LLVMValueRef z);
    /* C's fmod on floats. */
    LLVMValueRef (*fmod)(ptc_emitter *c, LLVMValueRef x, LLVMValueRef y);
    /* A normal f32 draw for counter idx (i64 lanes) under key. */
    LLVMValueRef (*randn)(ptc_emitter *c, LLVMValueRef key, LLVMValueRef idx);
    /* The address of the checks' status record (ptc_ll_check). */
    LLVMValueRef (*status_ptr)(void *c);
} ptc_emit_target;

/* The emitter's state; the CPU's cg and the GPU's gcg begin with it (see
 * PTC_EMITTER_UNION). */
#define PTC_EMITTER_FIELDS                                                                         \
    LLVMContextRef ctx;                                                                            \
    LLVMModuleRef mod;                                                                             \
    LLVMBuilderRef b;                                                                              \
    LLVMValueRef fn;         /* the function being emitted */                                      \
    LLVMBasicBlockRef entry; /* allocas go here */                                                 \
    const ptc_schedule *s;                                                                         \
    const ptc_kernel *k;                                                                           \
    const ptc_emit_target *target;                                                                 \
    int W;                   /* lanes of the values being emitted (1: scalar) */                   \
    int vec_var;             /* the kernel variable that varies across lanes (-1: none) */         \
    LLVMValueRef lane_mask;  /* <W x i1> active lanes of a masked tail, or NULL */                 \
    LLVMValueRef *bufptr;    /* per buffer id: base address (NULL: unused) */                      \
    LLVMValueRef *param;     /* per kernel param: its index-typed value */                         \
    LLVMValueRef rng_offset; /* i64 */                                                             \
    int64_t seed_base;       /* the seed rng_offset is shifted by (ops.h's ptc_rng_shift) */       \
    LLVMValueRef vars[3 * PTC_MAX_DIMS]; /* index-typed value of each kernel variable */           \
    LLVMTypeRef i1, i8, i16, i32, i64, f16, f32, f64, ptr, void_;                                  \
    LLVMTypeRef ix; /* the type of index arithmetic: i64, or i32 where offsets fit */

struct ptc_emitter {
    PTC_EMITTER_FIELDS
};

/* A backend's state begins with this member: the shared fields by name (c->b)
 * and, as em, the ptc_emitter the shared functions take (as the Linux
 * kernel's struct_group does). */
#define PTC_EMITTER_UNION                                                                          \
    union {                                                                                        \
        ptc_emitter em;                                                                            \
        struct {                                                                                   \
            PTC_EMITTER_FIELDS                                                                     \
        };                                                                                         \
    }

/* ---- types and constants ---- */
LLVMTypeRef ptc_emit_compute_type(ptc_emitter *c, ptc_dtype dt); /* f16 -> float, bool -> i1 */
LLVMTypeRef ptc_emit_storage_type(ptc_emitter *c, ptc_dtype dt); /* bool -> i8, bf16 -> i16 */
LLVMTypeRef ptc_emit_vec(LLVMTypeRef t, int w);                  /* t itself when w == 1 */
/* A constant of dt's compute type, w lanes: f for floats, i for integers. */
LLVMValueRef ptc_emit_kconst(ptc_emitter *c, ptc_dtype dt, double f, int64_t i, int w);

/* ---- sizes and index expressions ---- */
/* A size as an index-typed value (symbolic sizes come from the params). */
LLVMValueRef ptc_emit_dim(ptc_emitter *c, ptc_dim d);
/* Does x vary across the lanes being emitted? */
bool ptc_emit_ix_varies(ptc_emitter *c, const ptc_ix *x, LLVMValueRef *vals);
/* An index expression for the current lanes (w lanes, or a scalar when w == 1). */
LLVMValueRef ptc_emit_ix(ptc_emitter *c, const ptc_ix *x, LLVMValueRef *vals, int w);
/* <0, 1, .., w-1> of the index type. */
LLVMValueRef ptc_emit_lane_iota(ptc_emitter *c, int w);

/* How the lanes of an access at offset off reach memory. */
enum { PTC_ACC_UNIFORM, PTC_ACC_CONTIG, PTC_ACC_GATHER };
int ptc_emit_access_kind(ptc_emitter *c, const ptc_ix *off, LLVMValueRef *vals);

/* ---- values ---- */
LLVMValueRef ptc_emit_to_storage(ptc_emitter *c, LLVMValueRef v, ptc_dtype dt, int w);
LLVMValueRef ptc_emit_from_storage(ptc_emitter *c, LLVMValueRef v, ptc_dtype dt, int w);
LLVMValueRef ptc_emit_cast(ptc_emitter *c, LLVMValueRef v, ptc_dtype from, ptc_dtype to, int w);

/* Stored values a later load of the same (buffer, offset) takes instead of
 * reading memory (at most 64; more are read again). */
typedef struct ptc_emit_fwd {
    int n;
    int buf[64];
    const ptc_ix *off[64];
    LLVMValueRef val[64];
} ptc_emit_fwd;
void ptc_emit_fwd_add(ptc_emit_fwd *fw, int buf, const ptc_ix *off, LLVMValueRef v);

/* The values of every entry of body at w lanes (malloc'd, body->n entries). */
LLVMValueRef *ptc_emit_body(ptc_emitter *c, const ptc_lbody *body, int w, const ptc_emit_fwd *fw);

/* ---- the counter RNG (ops.h), bit for bit ---- */
LLVMValueRef ptc_emit_rng_key(ptc_emitter *c, int64_t seed);
/* A uniform [0, 1) f32 draw for counter idx (i64 lanes). */
LLVMValueRef ptc_emit_rng_uniform(ptc_emitter *c, LLVMValueRef key, LLVMValueRef idx);

/* ---- reductions ---- */
/* A reduction state: value / index / Welford mean, M2 and count. */
typedef struct ptc_red_state {
    LLVMValueRef v, i, m, m2, n;
} ptc_red_state;
/* The start value of reduction `reduce` over dtype dt: f for floats, i for
 * integers. */
void ptc_emit_red_identity(int reduce, ptc_dtype dt, double *f, int64_t *i);
/* Combines two states of w lanes (Chan's merge for Welford, whose counts are
 * floats of the value's type; nan_last: see ptc_lnode). */
ptc_red_state ptc_emit_red_combine(ptc_emitter *c, int reduce, bool nan_last, ptc_dtype dt,
                                   ptc_red_state a, ptc_red_state x, int w);
/* The Welford state (mean, M2, count k) of k values xs of dtype dt, one
 * lane each, by two passes over them: to merge into a running state with
 * one division for k elements instead of one each. */
ptc_red_state ptc_emit_welford_of(ptc_emitter *c, ptc_dtype dt, const LLVMValueRef *xs, int k);
/* A reduction node's outputs from its final state f (t: its compute type):
 * the value, or argmax/argmin's (index, value), or Welford's (variance with
 * `correction`, mean). */
void ptc_emit_red_outputs(ptc_emitter *c, int reduce, double correction, LLVMTypeRef t,
                          ptc_red_state f, LLVMValueRef outs[2]);

#endif /* PTC_CODEGEN_BODY_H */
