/* The scalar bodies of kernels, for both code generators.
 *
 * A loop-IR body is a small DAG of scalar entries in topological order; one
 * walk emits each entry once, for W lanes of the current vector variable (W
 * is 1 for scalar code; LLVM vectors otherwise, which the CPU keeps and NVPTX
 * splits into scalar instructions except for loads and stores). What the
 * targets do differently is asked of their ptc_emit_target: the memory side
 * of loads (the CPU's masked vector loads and gathers, the GPU's branches
 * around masked loads, aligned vector accesses and row cache), f16/bf16
 * conversions (LLVM's on the CPU, PTX cvt instructions on the GPU), the
 * math functions (libm and ptc's polynomials on the CPU, inline code on the
 * GPU) and fmod. Which instruction, intrinsic or formula computes each
 * pointwise op is ir/pointwise.def's emit column; the formulas it names
 * (EMIT rows) are here.
 *
 * Semantics follow the reference interpreter: f16/bf16 are computed in f32
 * and rounded after every op, as torch does; bools are i1 in registers and
 * bytes in memory; integer division by zero gives 0 instead of trapping;
 * float -> int conversions are frozen (out of range is undefined in torch
 * too, but must not be poison here). Index arithmetic runs in the target's
 * index type (i64 on the CPU; i32 on the GPU when every offset fits, since
 * 64-bit division is a long software sequence there), with floor semantics
 * where an operand may be negative.
 */
#include "codegen/body.h"

#include "codegen/llmath.h"

#include <math.h>
#include <stdlib.h>

static bool is_float(ptc_dtype dt)
{
    return ptc_dtype_is_float(dt);
}

static bool is_unsigned(ptc_dtype dt)
{
    return dt == PTC_U8 || dt == PTC_BOOL;
}

/* f16 and bf16: computed in f32, rounded to their precision after each op */
static bool is_half(ptc_dtype dt)
{
    return dt == PTC_F16 || dt == PTC_BF16;
}

/* ---- types and constants --------------------------------------------------------- */

LLVMTypeRef ptc_emit_compute_type(ptc_emitter *c, ptc_dtype dt)
{
    switch (dt) {
    case PTC_BOOL:
        return c->i1;
    case PTC_U8:
    case PTC_I8:
        return c->i8;
    case PTC_I16:
        return c->i16;
    case PTC_I32:
        return c->i32;
    case PTC_I64:
        return c->i64;
    case PTC_F64:
        return c->f64;
    default:
        return c->f32;
    }
}

LLVMTypeRef ptc_emit_storage_type(ptc_emitter *c, ptc_dtype dt)
{
    switch (dt) {
    case PTC_BOOL:
        return c->i8;
    case PTC_F16:
        return c->target->f16_as_bits ? c->i16 : c->f16;
    case PTC_BF16:
        return c->i16;
    default:
        return ptc_emit_compute_type(c, dt);
    }
}

LLVMTypeRef ptc_emit_vec(LLVMTypeRef t, int w)
{
    return w == 1 ? t : LLVMVectorType(t, (unsigned)w);
}

LLVMValueRef ptc_emit_kconst(ptc_emitter *c, ptc_dtype dt, double f, int64_t i, int w)
{
    LLVMTypeRef t = ptc_emit_compute_type(c, dt);
    LLVMValueRef k = is_float(dt) ? LLVMConstReal(t, f) : LLVMConstInt(t, (unsigned long long)i, 1);
    return ptc_ll_splat_const(k, w);
}

static LLVMValueRef int_splat(LLVMTypeRef t, int64_t v, int w)
{
    return ptc_ll_splat_const(LLVMConstInt(t, (unsigned long long)v, 1), w);
}

/* ---- sizes and index expressions --------------------------------------------------- */

LLVMValueRef ptc_emit_dim(ptc_emitter *c, ptc_dim d)
{
    if (ptc_dim_is_static(d))
        return LLVMConstInt(c->ix, (unsigned long long)d.value, 1);
    for (int i = 0; i < c->k->nparams; i++)
        if (ptc_dim_eq(c->k->params[i], d))
            return c->param[i];
    PTC_ASSERT(!"symbolic size missing from the kernel's params");
}

static bool dim_is(ptc_dim d, int64_t v)
{
    return ptc_dim_is_static(d) && d.value == v;
}

bool ptc_emit_ix_varies(ptc_emitter *c, const ptc_ix *x, LLVMValueRef *vals)
{
    if (c->W == 1)
        return false;
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        if (at->kind == PTC_IXA_VAR && at->id == c->vec_var)
            return true;
        if (at->kind == PTC_IXA_VAL && ptc_ll_width(vals[at->id]) > 1)
            return true;
        if ((at->kind == PTC_IXA_DIV || at->kind == PTC_IXA_MOD) &&
            ptc_emit_ix_varies(c, at->x, vals))
            return true;
    }
    return false;
}

LLVMValueRef ptc_emit_lane_iota(ptc_emitter *c, int w)
{
    LLVMValueRef ks[64];
    PTC_ASSERT(w <= 64);
    for (int i = 0; i < w; i++)
        ks[i] = LLVMConstInt(c->ix, (unsigned)i, 0);
    return LLVMConstVector(ks, (unsigned)w);
}

/* A body value used in an index (an integer or bool) in the index type. */
static LLVMValueRef to_index(ptc_emitter *c, LLVMValueRef v)
{
    LLVMTypeRef t = LLVMTypeOf(v);
    int w = ptc_ll_width(v);
    LLVMTypeRef et = w > 1 ? LLVMGetElementType(t) : t;
    if (et == c->ix)
        return v;
    LLVMTypeRef to = ptc_emit_vec(c->ix, w);
    unsigned bits = LLVMGetIntTypeWidth(et), ib = LLVMGetIntTypeWidth(c->ix);
    if (bits == 1)
        return LLVMBuildZExt(c->b, v, to, "");
    if (bits > ib)
        return LLVMBuildTrunc(c->b, v, to, "");
    return LLVMBuildSExt(c->b, v, to, "");
}

static LLVMValueRef atom_emit(ptc_emitter *c, const ptc_ixatom *at, LLVMValueRef *vals, int w)
{
    LLVMBuilderRef b = c->b;
    switch (at->kind) {
    case PTC_IXA_VAR: {
        LLVMValueRef v = c->vars[at->id];
        PTC_ASSERT(v != NULL);
        if (w > 1 && at->id == c->vec_var)
            return LLVMBuildNSWAdd(b, ptc_ll_splat(b, v, w), ptc_emit_lane_iota(c, w), "");
        return ptc_ll_splat(b, v, w);
    }
    case PTC_IXA_VAL:
        return ptc_ll_splat(b, to_index(c, vals[at->id]), w);
    default: {
        LLVMValueRef x = ptc_emit_ix(c, at->x, vals, w);
        LLVMValueRef d = ptc_ll_splat(b, ptc_emit_dim(c, at->d), w);
        ptc_arena *tmp = ptc_arena_new();
        ptc_dim mx;
        bool nonneg = ptc_ix_max(tmp, at->x, &mx);
        ptc_arena_free(tmp);
        if (nonneg)
            return at->kind == PTC_IXA_DIV ? LLVMBuildUDiv(b, x, d, "")
                                           : LLVMBuildURem(b, x, d, "");
        /* floor semantics for possibly negative operands (divisor > 0) */
        LLVMValueRef q = LLVMBuildSDiv(b, x, d, ""), r = LLVMBuildSRem(b, x, d, "");
        LLVMValueRef adj = LLVMBuildICmp(b, LLVMIntSLT, r, int_splat(c->ix, 0, w), "");
        if (at->kind == PTC_IXA_DIV)
            return LLVMBuildSub(b, q, LLVMBuildZExt(b, adj, ptc_emit_vec(c->ix, w), ""), "");
        return LLVMBuildSelect(b, adj, LLVMBuildAdd(b, r, d, ""), r, "");
    }
    }
}

LLVMValueRef ptc_emit_ix(ptc_emitter *c, const ptc_ix *x, LLVMValueRef *vals, int w)
{
    LLVMValueRef acc = ptc_ll_splat(c->b, ptc_emit_dim(c, x->constant), w);
    for (int i = 0; i < x->nterms; i++) {
        LLVMValueRef a = atom_emit(c, x->terms[i].atom, vals, w);
        if (!dim_is(x->terms[i].coeff, 1))
            a = LLVMBuildNSWMul(c->b, a, ptc_ll_splat(c->b, ptc_emit_dim(c, x->terms[i].coeff), w),
                                "");
        acc = LLVMBuildNSWAdd(c->b, acc, a, "");
    }
    return acc;
}

/* An index-typed value as i64 (what index_expr and the RNG counters are). */
static LLVMValueRef index_to_i64(ptc_emitter *c, LLVMValueRef v, int w)
{
    return c->ix == c->i64 ? v : LLVMBuildSExt(c->b, v, ptc_emit_vec(c->i64, w), "");
}

int ptc_emit_access_kind(ptc_emitter *c, const ptc_ix *off, LLVMValueRef *vals)
{
    if (!ptc_emit_ix_varies(c, off, vals))
        return PTC_ACC_UNIFORM;
    bool nested;
    ptc_dim k = ptc_ix_coeff(off, c->vec_var, &nested);
    for (int i = 0; i < off->nterms; i++)
        if (off->terms[i].atom->kind == PTC_IXA_VAL &&
            ptc_ll_width(vals[off->terms[i].atom->id]) > 1)
            return PTC_ACC_GATHER;
    return !nested && dim_is(k, 1) ? PTC_ACC_CONTIG : PTC_ACC_GATHER;
}

/* ---- storage conversions and casts ---------------------------------------------------- */

LLVMValueRef ptc_emit_from_storage(ptc_emitter *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    if (dt == PTC_BOOL)
        return LLVMBuildICmp(c->b, LLVMIntNE, v, int_splat(c->i8, 0, w), "");
    return is_half(dt) ? c->target->half_from_storage(c, v, dt, w) : v;
}

LLVMValueRef ptc_emit_to_storage(ptc_emitter *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    if (dt == PTC_BOOL)
        return LLVMBuildZExt(c->b, v, ptc_emit_vec(c->i8, w), "");
    return is_half(dt) ? c->target->half_to_storage(c, v, dt, w) : v;
}

/* Rounds an f32 value to f16 / bf16 precision (a cast in the body). */
static LLVMValueRef round_to(ptc_emitter *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    if (!is_half(dt))
        return v;
    LLVMValueRef r = c->target->half_round ? c->target->half_round(c, v, dt, w) : NULL;
    return r ? r : ptc_emit_from_storage(c, ptc_emit_to_storage(c, v, dt, w), dt, w);
}

LLVMValueRef ptc_emit_cast(ptc_emitter *c, LLVMValueRef v, ptc_dtype from, ptc_dtype to, int w)
{
    LLVMBuilderRef b = c->b;
    LLVMTypeRef tt = ptc_emit_vec(ptc_emit_compute_type(c, to), w);
    if (to == PTC_BOOL) {
        if (is_float(from))
            return LLVMBuildFCmp(b, LLVMRealUNE, v, ptc_emit_kconst(c, from, 0, 0, w), "");
        return LLVMBuildICmp(b, LLVMIntNE, v, ptc_emit_kconst(c, from, 0, 0, w), "");
    }
    if (is_float(from) && is_float(to)) {
        LLVMValueRef r = v;
        if (from == PTC_F64 && to != PTC_F64)
            r = LLVMBuildFPTrunc(b, v, tt, ""); /* via f32, like ptc_store_f64 */
        else if (from != PTC_F64 && to == PTC_F64)
            r = LLVMBuildFPExt(b, v, tt, "");
        return round_to(c, r, to, w);
    }
    if (is_float(from)) {
        /* float -> int truncates; out-of-range is undefined in torch too, but
         * must not be poison here: freeze it */
        LLVMValueRef r =
            is_unsigned(to) ? LLVMBuildFPToUI(b, v, tt, "") : LLVMBuildFPToSI(b, v, tt, "");
        return LLVMBuildFreeze(b, r, "");
    }
    if (is_float(to)) {
        LLVMValueRef r =
            is_unsigned(from) ? LLVMBuildUIToFP(b, v, tt, "") : LLVMBuildSIToFP(b, v, tt, "");
        return round_to(c, r, to, w);
    }
    unsigned fb = LLVMGetIntTypeWidth(ptc_emit_compute_type(c, from)),
             tb = LLVMGetIntTypeWidth(ptc_emit_compute_type(c, to));
    if (fb == tb)
        return v;
    if (fb > tb)
        return LLVMBuildTrunc(b, v, tt, "");
    return is_unsigned(from) ? LLVMBuildZExt(b, v, tt, "") : LLVMBuildSExt(b, v, tt, "");
}

/* ---- arithmetic ------------------------------------------------------------------------- */

static LLVMValueRef fcall1(ptc_emitter *c, const char *intr, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    return ptc_ll_intrinsic(c->mod, c->b, intr, &t, 1, &x, 1);
}

static LLVMValueRef fcall2(ptc_emitter *c, const char *intr, LLVMValueRef x, LLVMValueRef y)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef xy[2] = {x, y};
    return ptc_ll_intrinsic(c->mod, c->b, intr, &t, 1, xy, 2);
}

/* A pointwise entry's operands, for the formulas of pointwise.def's emit
 * column (see emit_unary, emit_binary). */
typedef struct {
    int op;              /* PTC_L_* */
    ptc_dtype dt;        /* the operands' dtype */
    LLVMValueRef x, y;   /* y: binary ops only */
    int w;               /* lanes */
    const ptc_lexpr *ye; /* y's entry (pow by a constant) */
    bool y_uniform;      /* y is the same in every lane (see uniform_div_as_mul) */
} operands;

typedef LLVMValueRef (*build_unary)(LLVMBuilderRef, LLVMValueRef, const char *);
typedef LLVMValueRef (*build_binary)(LLVMBuilderRef, LLVMValueRef, LLVMValueRef, const char *);

/* An INSTR(float, integer, bool) row: the instruction for the operands' class. */
static LLVMValueRef instruction1(ptc_emitter *c, const operands *o, build_unary fl, build_unary in,
                                 build_unary bo)
{
    build_unary build = is_float(o->dt) ? fl : o->dt == PTC_BOOL ? bo : in;
    return build(c->b, o->x, "");
}

static LLVMValueRef instruction2(ptc_emitter *c, const operands *o, build_binary fl,
                                 build_binary in, build_binary bo)
{
    build_binary build = is_float(o->dt) ? fl : o->dt == PTC_BOOL ? bo : in;
    return build(c->b, o->x, o->y, "");
}

/* A CMP(float, signed, unsigned) row: fcmp or icmp with the predicate for the
 * operands' class (bool compares as unsigned). */
static LLVMValueRef compare(ptc_emitter *c, const operands *o, LLVMRealPredicate fl,
                            LLVMIntPredicate si, LLVMIntPredicate un)
{
    if (is_float(o->dt))
        return LLVMBuildFCmp(c->b, fl, o->x, o->y, "");
    return LLVMBuildICmp(c->b, is_unsigned(o->dt) ? un : si, o->x, o->y, "");
}

/* ---- the formulas of pointwise.def's EMIT(fn) rows ---- */

static LLVMValueRef emit_abs(ptc_emitter *c, const operands *o)
{
    LLVMBuilderRef b = c->b;
    ptc_dtype dt = o->dt;
    LLVMValueRef x = o->x;
    if (is_float(dt))
        return fcall1(c, "llvm.fabs", x);
    if (is_unsigned(dt))
        return x;
    return LLVMBuildSelect(b,
                           LLVMBuildICmp(b, LLVMIntSLT, x, ptc_emit_kconst(c, dt, 0, 0, o->w), ""),
                           LLVMBuildNeg(b, x, ""), x, "");
}

static LLVMValueRef emit_rsqrt(ptc_emitter *c, const operands *o)
{
    return LLVMBuildFDiv(c->b, ptc_emit_kconst(c, o->dt, 1, 1, o->w), fcall1(c, "llvm.sqrt", o->x),
                         "");
}

static LLVMValueRef emit_reciprocal(ptc_emitter *c, const operands *o)
{
    return LLVMBuildFDiv(c->b, ptc_emit_kconst(c, o->dt, 1, 1, o->w), o->x, "");
}

static LLVMValueRef emit_sign(ptc_emitter *c, const operands *o)
{
    LLVMBuilderRef b = c->b;
    ptc_dtype dt = o->dt;
    LLVMValueRef x = o->x;
    int w = o->w;
    bool f = is_float(dt);
    LLVMValueRef zero = ptc_emit_kconst(c, dt, 0, 0, w);
    if (dt == PTC_BOOL)
        return x;
    LLVMValueRef pos = f ? LLVMBuildFCmp(b, LLVMRealOGT, x, zero, "")
                         : LLVMBuildICmp(b, is_unsigned(dt) ? LLVMIntUGT : LLVMIntSGT, x, zero, "");
    LLVMValueRef neg =
        f ? LLVMBuildFCmp(b, LLVMRealOLT, x, zero, "") : LLVMBuildICmp(b, LLVMIntSLT, x, zero, "");
    LLVMValueRef r = LLVMBuildSelect(b, neg, ptc_emit_kconst(c, dt, -1, -1, w), zero, "");
    r = LLVMBuildSelect(b, pos, ptc_emit_kconst(c, dt, 1, 1, w), r, "");
    return f ? LLVMBuildSelect(b, ptc_ll_isnan(b, x), x, r, "") : r;
}

static LLVMValueRef emit_logical_not(ptc_emitter *c, const operands *o)
{
    return LLVMBuildNot(c->b, ptc_emit_cast(c, o->x, o->dt, PTC_BOOL, o->w), "");
}

static LLVMValueRef emit_isnan(ptc_emitter *c, const operands *o)
{
    return is_float(o->dt) ? ptc_ll_isnan(c->b, o->x) : int_splat(c->i1, 0, o->w);
}

/* base ** e on one integer lane by squaring (exponents are small in
 * practice), built at b's position in fn. */
static LLVMValueRef ipow_loop(ptc_emitter *c, LLVMBuilderRef b, LLVMValueRef fn, LLVMValueRef base0,
                              LLVMValueRef e0, ptc_dtype dt)
{
    LLVMTypeRef t = ptc_emit_compute_type(c, dt);
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(c->ctx, fn, "head");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(c->ctx, fn, "body");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->ctx, fn, "done");
    LLVMValueRef one = LLVMConstInt(t, 1, 0), zero = LLVMConstInt(t, 0, 0);
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, head);
    LLVMValueRef r = LLVMBuildPhi(b, t, "r"), bs = LLVMBuildPhi(b, t, "b"),
                 e = LLVMBuildPhi(b, t, "e");
    LLVMAddIncoming(r, &one, &pre, 1);
    LLVMAddIncoming(bs, &base0, &pre, 1);
    LLVMAddIncoming(e, &e0, &pre, 1);
    LLVMValueRef more = LLVMBuildICmp(b, is_unsigned(dt) ? LLVMIntUGT : LLVMIntSGT, e, zero, "");
    LLVMBuildCondBr(b, more, body, done);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef odd = LLVMBuildTrunc(b, e, c->i1, "");
    LLVMValueRef r2 = LLVMBuildSelect(b, odd, LLVMBuildMul(b, r, bs, ""), r, "");
    LLVMValueRef b2 = LLVMBuildMul(b, bs, bs, "");
    LLVMValueRef e2 = LLVMBuildLShr(b, e, one, "");
    LLVMAddIncoming(r, &r2, &body, 1);
    LLVMAddIncoming(bs, &b2, &body, 1);
    LLVMAddIncoming(e, &e2, &body, 1);
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, done);
    if (is_unsigned(dt))
        return r;
    /* a negative exponent: 1 and -1 stay finite, anything else is 0 */
    LLVMValueRef neg = LLVMBuildICmp(b, LLVMIntSLT, e0, zero, "");
    LLVMValueRef one_b = LLVMBuildICmp(b, LLVMIntEQ, base0, one, "");
    LLVMValueRef m1 = LLVMBuildICmp(b, LLVMIntEQ, base0, LLVMConstAllOnes(t), "");
    LLVMValueRef odd_e = LLVMBuildTrunc(b, e0, c->i1, "");
    LLVMValueRef negv = LLVMBuildSelect(
        b, one_b, one, LLVMBuildSelect(b, m1, LLVMBuildSelect(b, odd_e, base0, one, ""), zero, ""),
        "");
    return LLVMBuildSelect(b, neg, negv, r, "");
}

/* The per-type helper function ptc.ipow.<dtype>(base, e) (made once). */
static LLVMValueRef ipow_fn(ptc_emitter *c, ptc_dtype dt, LLVMTypeRef *ft)
{
    LLVMTypeRef t = ptc_emit_compute_type(c, dt);
    char name[32];
    snprintf(name, sizeof name, "ptc.ipow.%s", ptc_dtype_name(dt));
    LLVMTypeRef params[2] = {t, t};
    *ft = LLVMFunctionType(t, params, 2, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (fn)
        return fn;
    fn = LLVMAddFunction(c->mod, name, *ft);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(c->ctx);
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c->ctx, fn, "entry"));
    LLVMBuildRet(b, ipow_loop(c, b, fn, LLVMGetParam(fn, 0), LLVMGetParam(fn, 1), dt));
    LLVMDisposeBuilder(b);
    return fn;
}

static LLVMValueRef ipow_lane(ptc_emitter *c, LLVMValueRef x, LLVMValueRef y, ptc_dtype dt)
{
    if (!c->target->ipow_as_call)
        return ipow_loop(c, c->b, c->fn, x, y, dt);
    LLVMTypeRef ft;
    LLVMValueRef fn = ipow_fn(c, dt, &ft);
    LLVMValueRef a[2] = {x, y};
    return LLVMBuildCall2(c->b, ft, fn, a, 2, "");
}

static LLVMValueRef ipow(ptc_emitter *c, LLVMValueRef x, LLVMValueRef y, ptc_dtype dt)
{
    int w = ptc_ll_width(x);
    if (w == 1)
        return ipow_lane(c, x, y, dt);
    LLVMValueRef out = LLVMGetPoison(LLVMTypeOf(x));
    for (int i = 0; i < w; i++) {
        LLVMValueRef lane = LLVMConstInt(c->i32, (unsigned)i, 0);
        /* each target's own order of the two extracts (the GPU's PTX
         * register numbers follow it) */
        LLVMValueRef xl = NULL, yl = NULL;
        if (!c->target->ipow_as_call)
            yl = LLVMBuildExtractElement(c->b, y, lane, "");
        xl = LLVMBuildExtractElement(c->b, x, lane, "");
        if (!yl)
            yl = LLVMBuildExtractElement(c->b, y, lane, "");
        out = LLVMBuildInsertElement(c->b, out, ipow_lane(c, xl, yl, dt), lane, "");
    }
    return out;
}

static LLVMValueRef emit_pow(ptc_emitter *c, const operands *o)
{
    if (!is_float(o->dt))
        return ipow(c, o->x, o->y, o->dt);
    const ptc_lexpr *ye = o->ye;
    LLVMValueRef short_form =
        ye && ye->op == PTC_L_CONST ? ptc_ll_pow_const(c->mod, c->b, o->x, ye->fval) : NULL;
    return short_form ? short_form : c->target->math(c, PTC_L_POW, o->dt, o->x, o->y);
}

static LLVMValueRef emit_div(ptc_emitter *c, const operands *o)
{
    LLVMBuilderRef b = c->b;
    bool f = is_float(o->dt);
    if (f && o->w > 1 && o->y_uniform && c->target->uniform_div_as_mul)
        return LLVMBuildFMul(b, o->x,
                             LLVMBuildFDiv(b, ptc_emit_kconst(c, o->dt, 1, 1, o->w), o->y, ""), "");
    return f ? LLVMBuildFDiv(b, o->x, o->y, "")
             : ptc_ll_int_divmod(b, o->op, is_unsigned(o->dt), o->x, o->y);
}

/* floor_divide and remainder: Python's, rounding to minus infinity. */
static LLVMValueRef emit_floor_divmod(ptc_emitter *c, const operands *o)
{
    if (is_float(o->dt))
        return ptc_ll_float_floordiv_rem(c->mod, c->b, o->op, o->x, o->y,
                                         c->target->fmod(c, o->x, o->y));
    return ptc_ll_int_divmod(c->b, o->op, is_unsigned(o->dt), o->x, o->y);
}

/* fmod: C's, the sign of the dividend; on integers the truncating remainder. */
static LLVMValueRef emit_fmod(ptc_emitter *c, const operands *o)
{
    if (is_float(o->dt))
        return c->target->fmod(c, o->x, o->y);
    return ptc_ll_int_divmod(c->b, o->op, is_unsigned(o->dt), o->x, o->y);
}

static LLVMValueRef emit_minmax(ptc_emitter *c, const operands *o)
{
    return ptc_ll_minmax(c->b, o->op == PTC_L_MAXIMUM, o->dt, o->x, o->y);
}

/* ---- pointwise ops: pointwise.def's emit column ---- */

/* A row's case in a switch over loop ops, for the rows of one (ONE_OPERAND)
 * or two (TWO_OPERANDS) operands; where has a case of its own (emit_entry). */
#define ONE_OPERAND_UNARY(lop, emit)                                                               \
    case PTC_L_##lop:                                                                              \
        emit
#define ONE_OPERAND_PREDICATE ONE_OPERAND_UNARY
#define ONE_OPERAND_ARITH(lop, emit)
#define ONE_OPERAND_COMPARE(lop, emit)
#define ONE_OPERAND_BITWISE(lop, emit)
#define ONE_OPERAND_SELECT(lop, emit)
#define TWO_OPERANDS_UNARY(lop, emit)
#define TWO_OPERANDS_PREDICATE(lop, emit)
#define TWO_OPERANDS_ARITH ONE_OPERAND_UNARY
#define TWO_OPERANDS_COMPARE ONE_OPERAND_UNARY
#define TWO_OPERANDS_BITWISE ONE_OPERAND_UNARY
#define TWO_OPERANDS_SELECT(lop, emit)

/* The value of a unary entry, before its f16/bf16 rounding. */
static LLVMValueRef emit_unary(ptc_emitter *c, const operands *o)
{
    switch (o->op) {
#define INSTR(fl, in, bo) return instruction1(c, o, LLVMBuild##fl, LLVMBuild##in, LLVMBuild##bo);
#define INT_INSTR(in) return LLVMBuild##in(c->b, o->x, "");
#define INTRINSIC(name) return is_float(o->dt) ? fcall1(c, name, o->x) : o->x;
#define TARGET_MATH return c->target->math(c, o->op, o->dt, o->x, NULL);
#define EMIT(fn) return fn(c, o);
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit) ONE_OPERAND_##kind(lop, emit)
#include "ir/pointwise.def"
    default:
        PTC_ASSERT(!"not a unary loop op");
        return NULL;
    }
}

/* The value of a binary entry, f16/bf16 results rounded (torch rounds them
 * per op). */
static LLVMValueRef emit_binary(ptc_emitter *c, const operands *o)
{
    LLVMValueRef r;
    switch (o->op) {
#define INSTR(fl, in, bo)                                                                          \
    r = instruction2(c, o, LLVMBuild##fl, LLVMBuild##in, LLVMBuild##bo);                           \
    break;
#define INT_INSTR(in)                                                                              \
    r = LLVMBuild##in(c->b, o->x, o->y, "");                                                       \
    break;
#define CMP(fl, si, un) return compare(c, o, LLVMReal##fl, LLVMInt##si, LLVMInt##un);
#define INTRINSIC(name)                                                                            \
    r = is_float(o->dt) ? fcall2(c, name, o->x, o->y) : o->x;                                      \
    break;
#define TARGET_MATH                                                                                \
    r = c->target->math(c, o->op, o->dt, o->x, o->y);                                              \
    break;
#define EMIT(fn)                                                                                   \
    r = fn(c, o);                                                                                  \
    break;
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit) TWO_OPERANDS_##kind(lop, emit)
#include "ir/pointwise.def"
    default:
        PTC_ASSERT(!"not a binary loop op");
        return NULL;
    }
    return is_float(o->dt) ? round_to(c, r, o->dt, o->w) : r;
}
#undef ONE_OPERAND_UNARY
#undef ONE_OPERAND_PREDICATE
#undef ONE_OPERAND_ARITH
#undef ONE_OPERAND_COMPARE
#undef ONE_OPERAND_BITWISE
#undef ONE_OPERAND_SELECT
#undef TWO_OPERANDS_UNARY
#undef TWO_OPERANDS_PREDICATE
#undef TWO_OPERANDS_ARITH
#undef TWO_OPERANDS_COMPARE
#undef TWO_OPERANDS_BITWISE
#undef TWO_OPERANDS_SELECT

/* Lanes past the end of a masked tail computed on zeros: their checks pass. */
static LLVMValueRef emit_check(ptc_emitter *c, const ptc_lexpr *e, LLVMValueRef *v, int w)
{
    LLVMValueRef ok = v[e->arg[0]];
    if (w > 1 && c->lane_mask)
        ok = LLVMBuildOr(c->b, ok, LLVMBuildNot(c->b, c->lane_mask, ""), "");
    return ptc_ll_check(c->mod, c->b, e->ival, ok, v[e->arg[1]], v[e->arg[2]],
                        c->target->status_ptr, c);
}

/* ---- bodies ------------------------------------------------------------------------------ */

void ptc_emit_fwd_add(ptc_emit_fwd *fw, int buf, const ptc_ix *off, LLVMValueRef v)
{
    if (fw->n >= 64)
        return;
    fw->buf[fw->n] = buf;
    fw->off[fw->n] = off;
    fw->val[fw->n++] = v;
}

/* Is entry e the same in every lane being emitted? (uni: the earlier entries'
 * answers) */
static bool entry_uniform(ptc_emitter *c, const ptc_lexpr *e, LLVMValueRef *v, const bool *uni,
                          bool forwarded)
{
    if (c->W == 1)
        return true;
    switch (e->op) {
    case PTC_L_CONST:
        return true;
    case PTC_L_LOAD:
        return !forwarded && !ptc_emit_ix_varies(c, e->idx[0], v) &&
               (e->arg[0] < 0 || uni[e->arg[0]]);
    case PTC_L_INDEX:
    case PTC_L_RAND:
    case PTC_L_RANDN:
        return !ptc_emit_ix_varies(c, e->ix, v);
    default:
        for (int k = 0; k < ptc_lop_arity(e->op); k++)
            if (!uni[e->arg[k]])
                return false;
        return true;
    }
}

/* A load takes a value stored earlier at the same (buffer, offset) when fw
 * holds one (masked: where the mask is on), else reads memory. */
static LLVMValueRef emit_load(ptc_emitter *c, const ptc_lexpr *e, LLVMValueRef *v, const bool *uni,
                              int w, const ptc_emit_fwd *fw, bool *forwarded)
{
    LLVMValueRef hit = NULL;
    for (int k = 0; fw && k < fw->n && !hit; k++)
        if (fw->buf[k] == e->buf && ptc_ix_eq(fw->off[k], e->idx[0]))
            hit = ptc_ll_splat(c->b, fw->val[k], w);
    if (hit && e->arg[0] >= 0)
        hit = LLVMBuildSelect(c->b, ptc_ll_splat(c->b, v[e->arg[0]], w), hit,
                              ptc_emit_kconst(c, e->dtype, e->fval, e->ival, w), "");
    *forwarded = hit != NULL;
    return hit ? hit : c->target->load(c, e, v, e->arg[0] >= 0 && uni[e->arg[0]], w);
}

static LLVMValueRef emit_random(ptc_emitter *c, const ptc_lexpr *e, LLVMValueRef *v, int w)
{
    LLVMValueRef key = ptc_emit_rng_key(c, e->seed);
    LLVMValueRef idx = index_to_i64(c, ptc_emit_ix(c, e->ix, v, w), w);
    LLVMValueRef u =
        e->op == PTC_L_RAND ? ptc_emit_rng_uniform(c, key, idx) : c->target->randn(c, key, idx);
    return ptc_emit_cast(c, u, PTC_F32, e->dtype, w);
}

/* The entry whose erf an f32 entry e adds 1 to (1 + erf(z), either order:
 * gelu's), or -1. */
static int erf_plus_one(const ptc_lbody *body, const ptc_lexpr *e)
{
    if (e->op != PTC_L_ADD || e->dtype != PTC_F32)
        return -1;
    for (int k = 0; k < 2; k++) {
        const ptc_lexpr *one = &body->e[e->arg[k]], *erf = &body->e[e->arg[1 - k]];
        if (one->op == PTC_L_CONST && one->dtype == PTC_F32 && one->fval == 1.0 &&
            erf->op == PTC_L_ERF && erf->dtype == PTC_F32)
            return e->arg[1 - k];
    }
    return -1;
}

/* Cast entry e rounding to f16 / bf16 the f32 sum of two values cast from
 * that dtype: the target's half_add of them, or NULL. */
static LLVMValueRef half_sum(ptc_emitter *c, const ptc_lbody *body, const ptc_lexpr *e,
                             LLVMValueRef *v, int w)
{
    if (!c->target->half_add || !is_half(e->dtype))
        return NULL;
    const ptc_lexpr *add = &body->e[e->arg[0]];
    if (add->op != PTC_L_ADD || add->dtype != PTC_F32)
        return NULL;
    for (int k = 0; k < 2; k++) {
        const ptc_lexpr *x = &body->e[add->arg[k]];
        if (x->op != PTC_L_CAST || body->e[x->arg[0]].dtype != e->dtype)
            return NULL;
    }
    return c->target->half_add(c, v[add->arg[0]], v[add->arg[1]], e->dtype, w);
}

static LLVMValueRef emit_entry(ptc_emitter *c, const ptc_lbody *body, int i, LLVMValueRef *v, int w,
                               const bool *uni)
{
    const ptc_lexpr *e = &body->e[i];
    LLVMValueRef x = e->arg[0] >= 0 ? v[e->arg[0]] : NULL;
    LLVMValueRef y = e->arg[1] >= 0 ? v[e->arg[1]] : NULL;
    switch (e->op) {
    case PTC_L_CONST:
        return ptc_emit_kconst(c, e->dtype, e->fval, e->ival, w);
    case PTC_L_INDEX:
        return index_to_i64(c, ptc_emit_ix(c, e->ix, v, w), w);
    case PTC_L_RAND:
    case PTC_L_RANDN:
        return emit_random(c, e, v, w);
    case PTC_L_CAST: {
        /* the f32 sum it replaces is left unused, for LLVM to delete */
        LLVMValueRef sum = half_sum(c, body, e, v, w);
        return sum ? sum : ptc_emit_cast(c, x, body->e[e->arg[0]].dtype, e->dtype, w);
    }
    case PTC_L_WHERE:
        return LLVMBuildSelect(c->b, x, y, v[e->arg[2]], "");
    case PTC_L_CHECK:
        return emit_check(c, e, v, w);
    default: {
        /* the erf(z) it replaces is left unused, for LLVM to delete */
        int erf = c->target->one_plus_erf ? erf_plus_one(body, e) : -1;
        LLVMValueRef sum = erf >= 0 ? c->target->one_plus_erf(c, v[body->e[erf].arg[0]]) : NULL;
        if (sum)
            return sum;
        operands o = {e->op, body->e[e->arg[0]].dtype, x, y, w, NULL, false};
        if (ptc_lop_arity(e->op) == 1)
            return round_to(c, emit_unary(c, &o), e->dtype, w);
        o.ye = &body->e[e->arg[1]];
        o.y_uniform = uni[e->arg[1]];
        return emit_binary(c, &o);
    }
    }
}

LLVMValueRef *ptc_emit_body(ptc_emitter *c, const ptc_lbody *body, int w, const ptc_emit_fwd *fw)
{
    LLVMValueRef *v = calloc((size_t)body->n + 1, sizeof *v);
    bool *uni = calloc((size_t)body->n + 1, sizeof *uni);
    for (int i = 0; i < body->n; i++) {
        const ptc_lexpr *e = &body->e[i];
        bool forwarded = false;
        if (e->op == PTC_L_LOAD)
            v[i] = emit_load(c, e, v, uni, w, fw, &forwarded);
        else
            v[i] = emit_entry(c, body, i, v, w, uni);
        v[i] = ptc_ll_splat(c->b, v[i], w);
        uni[i] = entry_uniform(c, e, v, uni, forwarded);
    }
    free(uni);
    return v;
}

/* ---- the counter RNG (ops.h), bit for bit ------------------------------------------------ */

static LLVMValueRef rng_mix(ptc_emitter *c, LLVMValueRef x)
{
    int w = ptc_ll_width(x);
    LLVMBuilderRef b = c->b;
    LLVMTypeRef t = c->i64;
    x = LLVMBuildXor(b, x, LLVMBuildLShr(b, x, int_splat(t, 30, w), ""), "");
    x = LLVMBuildMul(b, x, int_splat(t, (int64_t)0xbf58476d1ce4e5b9ULL, w), "");
    x = LLVMBuildXor(b, x, LLVMBuildLShr(b, x, int_splat(t, 27, w), ""), "");
    x = LLVMBuildMul(b, x, int_splat(t, (int64_t)0x94d049bb133111ebULL, w), "");
    return LLVMBuildXor(b, x, LLVMBuildLShr(b, x, int_splat(t, 31, w), ""), "");
}

LLVMValueRef ptc_emit_rng_key(ptc_emitter *c, int64_t seed)
{
    uint64_t relative = (uint64_t)(seed - c->seed_base);
    LLVMValueRef s = LLVMConstInt(c->i64, relative * PTC_RNG_SEED_STEP, 0);
    return rng_mix(c, LLVMBuildAdd(c->b, s, c->rng_offset, "rng.key"));
}

LLVMValueRef ptc_emit_rng_uniform(ptc_emitter *c, LLVMValueRef key, LLVMValueRef idx)
{
    int w = ptc_ll_width(idx);
    LLVMBuilderRef b = c->b;
    LLVMValueRef h = rng_mix(c, LLVMBuildAdd(b, ptc_ll_splat(b, key, w), idx, ""));
    h = LLVMBuildLShr(b, h, int_splat(c->i64, 40, w), "");
    LLVMValueRef f = LLVMBuildUIToFP(b, h, ptc_emit_vec(c->f32, w), "");
    return LLVMBuildFMul(b, f, ptc_ll_splat_const(LLVMConstReal(c->f32, 1.0 / 16777216.0), w), "");
}

/* ---- reductions ------------------------------------------------------------------------------ */

void ptc_emit_red_identity(int reduce, ptc_dtype dt, double *f, int64_t *i)
{
    bool fl = is_float(dt);
    *f = 0;
    *i = 0;
    switch (reduce) {
    case PTC_RED_PROD:
        *f = 1;
        *i = 1;
        break;
    case PTC_RED_MAX:
    case PTC_RED_ARGMAX:
        *f = -INFINITY;
        if (!fl)
            *i = is_unsigned(dt) ? 0
                 : dt == PTC_I8  ? INT8_MIN
                 : dt == PTC_I16 ? INT16_MIN
                 : dt == PTC_I32 ? INT32_MIN
                                 : INT64_MIN;
        break;
    case PTC_RED_MIN:
    case PTC_RED_ARGMIN:
        *f = INFINITY;
        if (!fl)
            *i = dt == PTC_BOOL  ? 1
                 : dt == PTC_U8  ? 255
                 : dt == PTC_I8  ? INT8_MAX
                 : dt == PTC_I16 ? INT16_MAX
                 : dt == PTC_I32 ? INT32_MAX
                                 : INT64_MAX;
        break;
    default:
        break;
    }
}

/* Does b's (value, index) win over a's for argmax/argmin? Ties go to the
 * first index, as torch does; NaNs too, or to the last one where nan_last
 * (torch's max_pool2d). */
static LLVMValueRef arg_better(ptc_emitter *c, bool max, bool nan_last, ptc_dtype dt,
                               LLVMValueRef av, LLVMValueRef ai, LLVMValueRef bv, LLVMValueRef bi)
{
    LLVMBuilderRef b = c->b;
    LLVMValueRef earlier = LLVMBuildICmp(b, LLVMIntSLT, bi, ai, "");
    if (!is_float(dt)) {
        LLVMIntPredicate p =
            is_unsigned(dt) ? (max ? LLVMIntUGT : LLVMIntULT) : (max ? LLVMIntSGT : LLVMIntSLT);
        LLVMValueRef gt = LLVMBuildICmp(b, p, bv, av, "");
        LLVMValueRef eq = LLVMBuildICmp(b, LLVMIntEQ, bv, av, "");
        return LLVMBuildOr(b, gt, LLVMBuildAnd(b, eq, earlier, ""), "");
    }
    LLVMValueRef an = ptc_ll_isnan(b, av), bn = ptc_ll_isnan(b, bv);
    LLVMValueRef gt = LLVMBuildFCmp(b, max ? LLVMRealOGT : LLVMRealOLT, bv, av, "");
    LLVMValueRef eq = LLVMBuildFCmp(b, LLVMRealOEQ, bv, av, "");
    LLVMValueRef num = LLVMBuildAnd(b, LLVMBuildNot(b, an, ""),
                                    LLVMBuildOr(b, gt, LLVMBuildAnd(b, eq, earlier, ""), ""), "");
    LLVMValueRef nan_order = nan_last ? LLVMBuildICmp(b, LLVMIntSGT, bi, ai, "") : earlier;
    LLVMValueRef nan =
        LLVMBuildAnd(b, bn, LLVMBuildOr(b, LLVMBuildNot(b, an, ""), nan_order, ""), "");
    return LLVMBuildSelect(b, bn, nan, num, "");
}

/* Chan's merge of two Welford states. */
static ptc_red_state welford_merge(ptc_emitter *c, ptc_dtype dt, ptc_red_state a, ptc_red_state x,
                                   int w)
{
    LLVMBuilderRef b = c->b;
    ptc_red_state o = a;
    LLVMValueRef zero = ptc_emit_kconst(c, dt, 0, 0, w);
    LLVMValueRef n = LLVMBuildFAdd(b, a.n, x.n, "");
    LLVMValueRef pos = LLVMBuildFCmp(b, LLVMRealOGT, n, zero, "");
    LLVMValueRef ns = LLVMBuildSelect(b, pos, n, ptc_emit_kconst(c, dt, 1, 1, w), "");
    LLVMValueRef delta = LLVMBuildFSub(b, x.m, a.m, "");
    LLVMValueRef fb = LLVMBuildFDiv(b, x.n, ns, "");
    o.m = LLVMBuildFAdd(b, a.m, LLVMBuildFMul(b, delta, fb, ""), "");
    LLVMValueRef t = LLVMBuildFMul(b, LLVMBuildFMul(b, delta, delta, ""), a.n, "");
    t = LLVMBuildFMul(b, t, fb, "");
    o.m2 = LLVMBuildFAdd(b, LLVMBuildFAdd(b, a.m2, x.m2, ""), t, "");
    o.n = n;
    return o;
}

void ptc_emit_red_outputs(ptc_emitter *c, int reduce, double correction, LLVMTypeRef t,
                          ptc_red_state f, LLVMValueRef outs[2])
{
    LLVMBuilderRef b = c->b;
    outs[0] = f.v;
    outs[1] = NULL;
    if (reduce == PTC_RED_ARGMAX || reduce == PTC_RED_ARGMIN) {
        outs[0] = f.i;
        outs[1] = f.v;
    } else if (reduce == PTC_RED_WELFORD) {
        LLVMValueRef dof = LLVMBuildFSub(b, f.n, LLVMConstReal(t, correction), "");
        LLVMValueRef zero = LLVMConstReal(t, 0);
        dof = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, dof, zero, ""), zero, dof, "");
        outs[0] = LLVMBuildFDiv(b, f.m2, dof, "");
        /* the mean of no elements is 0/0, as eager's (a symbolic length may be 0) */
        LLVMValueRef none = LLVMBuildFCmp(b, LLVMRealOLE, f.n, zero, "");
        outs[1] = LLVMBuildSelect(b, none, LLVMConstReal(t, NAN), f.m, "");
    }
}

ptc_red_state ptc_emit_welford_of(ptc_emitter *c, ptc_dtype dt, const LLVMValueRef *xs, int k)
{
    LLVMBuilderRef b = c->b;
    LLVMValueRef sum = xs[0];
    for (int j = 1; j < k; j++)
        sum = LLVMBuildFAdd(b, sum, xs[j], "");
    ptc_red_state o = {0};
    o.n = ptc_emit_kconst(c, dt, k, k, 1);
    o.m = LLVMBuildFDiv(b, sum, o.n, "chunk.mean");
    for (int j = 0; j < k; j++) {
        LLVMValueRef d = LLVMBuildFSub(b, xs[j], o.m, "");
        LLVMValueRef dd = LLVMBuildFMul(b, d, d, "");
        o.m2 = o.m2 ? LLVMBuildFAdd(b, o.m2, dd, "") : dd;
    }
    return o;
}

ptc_red_state ptc_emit_red_combine(ptc_emitter *c, int reduce, bool nan_last, ptc_dtype dt,
                                   ptc_red_state a, ptc_red_state x, int w)
{
    LLVMBuilderRef b = c->b;
    ptc_red_state o = a;
    bool f = is_float(dt);
    switch (reduce) {
    case PTC_RED_SUM:
        o.v = f                ? LLVMBuildFAdd(b, a.v, x.v, "")
              : dt == PTC_BOOL ? LLVMBuildOr(b, a.v, x.v, "")
                               : LLVMBuildAdd(b, a.v, x.v, "");
        break;
    case PTC_RED_PROD:
        o.v = f                ? LLVMBuildFMul(b, a.v, x.v, "")
              : dt == PTC_BOOL ? LLVMBuildAnd(b, a.v, x.v, "")
                               : LLVMBuildMul(b, a.v, x.v, "");
        break;
    case PTC_RED_MAX:
    case PTC_RED_MIN:
        o.v = ptc_ll_minmax(b, reduce == PTC_RED_MAX, dt, x.v, a.v);
        break;
    case PTC_RED_ARGMAX:
    case PTC_RED_ARGMIN: {
        LLVMValueRef take =
            arg_better(c, reduce == PTC_RED_ARGMAX, nan_last, dt, a.v, a.i, x.v, x.i);
        o.v = LLVMBuildSelect(b, take, x.v, a.v, "");
        o.i = LLVMBuildSelect(b, take, x.i, a.i, "");
        break;
    }
    case PTC_RED_WELFORD:
        return welford_merge(c, dt, a, x, w);
    default:
        PTC_ASSERT(!"unknown reduction");
    }
    return o;
}
