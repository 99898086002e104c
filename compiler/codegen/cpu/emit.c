/* LLVM IR for one kernel.
 *
 * The kernel is a function over a range of its parallel outer iterations;
 * inside, the remaining outer loops and then each group's inner loops. The
 * innermost loop of every nest is vectorised explicitly: the body is emitted
 * once with W lanes (a main loop stepping W) and once with one lane (the
 * tail), so vectorisation never depends on LLVM's cost model. A load whose
 * offset has coefficient 1 in the vector variable is one vector load, one
 * that does not use it is a scalar load and a splat, anything else a gather;
 * masked loads never touch memory where the mask is off. Reductions keep W
 * lane accumulators plus a scalar one for the tail and combine them at the
 * end with a tree of the same associative step (sum, NaN-propagating max,
 * first-index argmax, Chan's merge for Welford), so they vectorise too.
 *
 * Values of f16/bf16 are computed in f32 and rounded when stored or cast;
 * bools are i1 in registers and bytes in memory. Buffer pointers reach the
 * body function as noalias parameters: distinct buffers never overlap (the
 * memory plan checks it), which is what lets LLVM keep values in registers.
 */
#include "codegen/cpu/cpu.h"
#include "codegen/llmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


static bool is_float(ptc_dtype dt) { return ptc_dtype_is_float(dt); }
static bool is_unsigned(ptc_dtype dt) { return dt == PTC_U8 || dt == PTC_BOOL; }

static LLVMValueRef kconst(cg *c, ptc_dtype dt, double f, int64_t i, int w)
{
    LLVMTypeRef t = cg_compute_type(c, dt);
    return is_float(dt) ? cg_const_f(c, t, f, w) : cg_const_i(c, t, i, w);
}

/* ---- loops ------------------------------------------------------------------ */

typedef struct loop {
    LLVMBasicBlockRef head, body, exit;
    LLVMValueRef iv, step;
} loop;

static void loop_open(cg *c, loop *l, LLVMValueRef lo, LLVMValueRef hi, int64_t step,
                      const char *name)
{
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(c->b);
    l->head = LLVMAppendBasicBlockInContext(c->ctx, c->fn, name);
    l->body = LLVMAppendBasicBlockInContext(c->ctx, c->fn, name);
    l->exit = LLVMAppendBasicBlockInContext(c->ctx, c->fn, name);
    l->step = LLVMConstInt(c->i64, (unsigned long long)step, 0);
    LLVMBuildBr(c->b, l->head);
    LLVMPositionBuilderAtEnd(c->b, l->head);
    l->iv = LLVMBuildPhi(c->b, c->i64, name);
    LLVMAddIncoming(l->iv, &lo, &pre, 1);
    LLVMValueRef cond = LLVMBuildICmp(c->b, LLVMIntSLT, l->iv, hi, "");
    LLVMBuildCondBr(c->b, cond, l->body, l->exit);
    LLVMPositionBuilderAtEnd(c->b, l->body);
}

static void loop_close(cg *c, loop *l)
{
    LLVMValueRef next = LLVMBuildNSWAdd(c->b, l->iv, l->step, "");
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(c->b);
    LLVMAddIncoming(l->iv, &next, &cur, 1);
    LLVMBuildBr(c->b, l->head);
    LLVMPositionBuilderAtEnd(c->b, l->exit);
}

/* ---- sizes and index expressions ----------------------------------------------- */

static LLVMValueRef dim_value(cg *c, ptc_dim d)
{
    if (ptc_dim_is_static(d))
        return LLVMConstInt(c->i64, (unsigned long long)d.value, 1);
    for (int i = 0; i < c->k->nparams; i++)
        if (ptc_dim_eq(c->k->params[i], d))
            return c->param[i];
    PTC_ASSERT(!"symbolic size missing from the kernel's params");
}

static bool dim_is(ptc_dim d, int64_t v) { return ptc_dim_is_static(d) && d.value == v; }

/* Does x vary across the lanes of the current vector loop? */
static bool ix_varies(cg *c, const ptc_ix *x, LLVMValueRef *vals)
{
    if (c->W == 1)
        return false;
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        if (at->kind == PTC_IXA_VAR && at->id == c->vec_var)
            return true;
        if (at->kind == PTC_IXA_VAL && cg_width(vals[at->id]) > 1)
            return true;
        if ((at->kind == PTC_IXA_DIV || at->kind == PTC_IXA_MOD) && ix_varies(c, at->x, vals))
            return true;
    }
    return false;
}

static LLVMValueRef lane_iota(cg *c, int w)
{
    LLVMValueRef ks[64];
    for (int i = 0; i < w; i++)
        ks[i] = LLVMConstInt(c->i64, (unsigned)i, 0);
    return LLVMConstVector(ks, (unsigned)w);
}

static LLVMValueRef ix_emit(cg *c, const ptc_ix *x, LLVMValueRef *vals, int w);

static LLVMValueRef atom_emit(cg *c, const ptc_ixatom *at, LLVMValueRef *vals, int w)
{
    LLVMBuilderRef b = c->b;
    switch (at->kind) {
    case PTC_IXA_VAR: {
        LLVMValueRef v = c->vars[at->id];
        PTC_ASSERT(v != NULL);
        if (w > 1 && at->id == c->vec_var)
            return LLVMBuildNSWAdd(b, cg_splat(c, v, w), lane_iota(c, w), "");
        return cg_splat(c, v, w);
    }
    case PTC_IXA_VAL: {
        LLVMValueRef v = vals[at->id];
        LLVMTypeRef t = LLVMTypeOf(v);
        LLVMTypeRef et = cg_width(v) > 1 ? LLVMGetElementType(t) : t;
        if (et != c->i64) {
            LLVMTypeRef to = cg_vec(c, c->i64, cg_width(v));
            v = LLVMGetIntTypeWidth(et) == 1 ? LLVMBuildZExt(b, v, to, "") : LLVMBuildSExt(b, v, to, "");
        }
        return cg_splat(c, v, w);
    }
    default: {
        LLVMValueRef x = ix_emit(c, at->x, vals, w);
        LLVMValueRef d = cg_splat(c, dim_value(c, at->d), w);
        ptc_arena *tmp = ptc_arena_new();
        ptc_dim mx;
        bool nonneg = ptc_ix_max(tmp, at->x, &mx);
        ptc_arena_free(tmp);
        if (nonneg)
            return at->kind == PTC_IXA_DIV ? LLVMBuildUDiv(b, x, d, "") : LLVMBuildURem(b, x, d, "");
        /* floor semantics for possibly negative operands (divisor > 0) */
        LLVMValueRef q = LLVMBuildSDiv(b, x, d, ""), r = LLVMBuildSRem(b, x, d, "");
        LLVMValueRef zero = cg_const_i(c, c->i64, 0, w);
        LLVMValueRef adj = LLVMBuildICmp(b, LLVMIntSLT, r, zero, "");
        if (at->kind == PTC_IXA_DIV)
            return LLVMBuildSub(b, q, LLVMBuildZExt(b, adj, cg_vec(c, c->i64, w), ""), "");
        return LLVMBuildSelect(b, adj, LLVMBuildAdd(b, r, d, ""), r, "");
    }
    }
}

static LLVMValueRef ix_emit(cg *c, const ptc_ix *x, LLVMValueRef *vals, int w)
{
    LLVMValueRef acc = cg_splat(c, dim_value(c, x->constant), w);
    for (int i = 0; i < x->nterms; i++) {
        LLVMValueRef a = atom_emit(c, x->terms[i].atom, vals, w);
        if (!dim_is(x->terms[i].coeff, 1))
            a = LLVMBuildNSWMul(c->b, a, cg_splat(c, dim_value(c, x->terms[i].coeff), w), "");
        acc = LLVMBuildNSWAdd(c->b, acc, a, "");
    }
    return acc;
}

/* ---- storage conversions -------------------------------------------------------- */

static LLVMValueRef from_storage(cg *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    LLVMBuilderRef b = c->b;
    switch (dt) {
    case PTC_BOOL: return LLVMBuildICmp(b, LLVMIntNE, v, cg_const_i(c, c->i8, 0, w), "");
    case PTC_F16: return LLVMBuildFPExt(b, v, cg_vec(c, c->f32, w), "");
    case PTC_BF16: return ptc_ll_bf16_bits_to_f32(b, v);
    default: return v;
    }
}

static LLVMValueRef to_storage(cg *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    LLVMBuilderRef b = c->b;
    switch (dt) {
    case PTC_BOOL: return LLVMBuildZExt(b, v, cg_vec(c, c->i8, w), "");
    case PTC_F16: return LLVMBuildFPTrunc(b, v, cg_vec(c, c->f16, w), "");
    case PTC_BF16: return ptc_ll_f32_to_bf16_bits(b, v);
    default: return v;
    }
}

/* Rounds an f32 value to f16 / bf16 precision (a cast in the body). */
static LLVMValueRef round_to(cg *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    if (dt != PTC_F16 && dt != PTC_BF16)
        return v;
    return from_storage(c, to_storage(c, v, dt, w), dt, w);
}

/* ---- loads and stores ------------------------------------------------------------ */

enum { ACC_CONTIG, ACC_UNIFORM, ACC_GATHER };

static int access_kind(cg *c, const ptc_ix *off, LLVMValueRef *vals)
{
    if (!ix_varies(c, off, vals))
        return ACC_UNIFORM;
    bool nested;
    ptc_dim k = ptc_ix_coeff(off, c->vec_var, &nested);
    bool vals_vary = false;
    for (int i = 0; i < off->nterms; i++)
        if (off->terms[i].atom->kind == PTC_IXA_VAL && cg_width(vals[off->terms[i].atom->id]) > 1)
            vals_vary = true;
    if (!nested && !vals_vary && dim_is(k, 1))
        return ACC_CONTIG;
    return ACC_GATHER;
}

static LLVMValueRef all_true(cg *c, int w) { return cg_const_i(c, c->i1, 1, w); }

static LLVMValueRef and_masks(cg *c, LLVMValueRef a, LLVMValueRef b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    return LLVMBuildAnd(c->b, a, b, "");
}

static LLVMValueRef emit_load(cg *c, const ptc_lexpr *e, LLVMValueRef *vals, int w)
{
    LLVMBuilderRef b = c->b;
    const ptc_lbuf *buf = c->s->prog->bufs[e->buf];
    LLVMTypeRef st = cg_storage_type(c, buf->dtype);
    unsigned align = (unsigned)ptc_dtype_size(buf->dtype);
    LLVMValueRef base = c->bufptr[e->buf];
    PTC_ASSERT(base != NULL);
    LLVMValueRef mask = e->arg[0] >= 0 ? cg_splat(c, vals[e->arg[0]], w) : NULL;
    LLVMValueRef raw;
    int kind = w == 1 ? ACC_UNIFORM : access_kind(c, e->idx[0], vals);
    /* lanes past the end of a masked tail must not be read either */
    LLVMValueRef lanes = w > 1 && kind != ACC_UNIFORM ? c->lane_mask : NULL;
    LLVMValueRef vmask = and_masks(c, mask, lanes);
    if (kind == ACC_UNIFORM && (!mask || w == 1)) {
        LLVMValueRef off = ix_emit(c, e->idx[0], vals, 1);
        if (mask)
            off = LLVMBuildSelect(b, mask, off, LLVMConstInt(c->i64, 0, 0), "");
        LLVMValueRef p = LLVMBuildInBoundsGEP2(b, st, base, &off, 1, "");
        raw = LLVMBuildLoad2(b, st, p, "");
        LLVMSetAlignment(raw, align);
        raw = cg_splat(c, raw, w);
    } else if (kind == ACC_CONTIG) {
        LLVMValueRef off = ix_emit(c, e->idx[0], vals, 1);
        LLVMValueRef p = LLVMBuildInBoundsGEP2(b, st, base, &off, 1, "");
        LLVMTypeRef vt = cg_vec(c, st, w);
        if (vmask) {
            LLVMTypeRef over[2] = {vt, c->ptr};
            LLVMValueRef args[4] = {p, LLVMConstInt(c->i32, align, 0), vmask, LLVMConstNull(vt)};
            raw = cg_call_intrinsic(c, "llvm.masked.load", over, 2, args, 4);
        } else {
            raw = LLVMBuildLoad2(b, vt, p, "");
            LLVMSetAlignment(raw, align);
        }
    } else {
        LLVMValueRef off = ix_emit(c, e->idx[0], vals, w);
        if (vmask)
            off = LLVMBuildSelect(b, vmask, off, cg_const_i(c, c->i64, 0, w), "");
        LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, st, base, &off, 1, "");
        LLVMTypeRef vt = cg_vec(c, st, w);
        LLVMTypeRef over[2] = {vt, LLVMTypeOf(ptrs)};
        LLVMValueRef args[4] = {ptrs, LLVMConstInt(c->i32, align, 0), vmask ? vmask : all_true(c, w),
                                LLVMConstNull(vt)};
        raw = cg_call_intrinsic(c, "llvm.masked.gather", over, 2, args, 4);
    }
    LLVMValueRef v = from_storage(c, raw, buf->dtype, w);
    if (mask)
        v = LLVMBuildSelect(b, mask, v, kconst(c, e->dtype, e->fval, e->ival, w), "");
    return v;
}

/* PTC_INJECT=codegen:<op>:wrong: x*1.25+1 (integers x+1, bools !x). */
static LLVMValueRef inject_wrong(cg *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    LLVMTypeRef t = cg_compute_type(c, dt);
    if (dt == PTC_BOOL)
        return LLVMBuildXor(c->b, v, cg_const_i(c, t, 1, w), "");
    if (!is_float(dt))
        return LLVMBuildAdd(c->b, v, cg_const_i(c, t, 1, w), "");
    LLVMValueRef s = LLVMBuildFMul(c->b, v, cg_const_f(c, t, 1.25, w), "");
    return LLVMBuildFAdd(c->b, s, cg_const_f(c, t, 1.0, w), "");
}

static void emit_store(cg *c, int bufid, const ptc_ix *off, LLVMValueRef v, LLVMValueRef *vals,
                       int w)
{
    LLVMBuilderRef b = c->b;
    const ptc_lbuf *buf = c->s->prog->bufs[bufid];
    LLVMTypeRef st = cg_storage_type(c, buf->dtype);
    unsigned align = (unsigned)ptc_dtype_size(buf->dtype);
    LLVMValueRef base = c->bufptr[bufid];
    PTC_ASSERT(base != NULL);
    if (c->inject_wrong)
        v = inject_wrong(c, v, buf->dtype, w);
    LLVMValueRef raw = to_storage(c, v, buf->dtype, w);
    int kind = w == 1 ? ACC_UNIFORM : access_kind(c, off, vals);
    LLVMValueRef lanes = w > 1 ? c->lane_mask : NULL;
    if (kind == ACC_CONTIG || w == 1) {
        LLVMValueRef o = ix_emit(c, off, vals, 1);
        LLVMValueRef p = LLVMBuildInBoundsGEP2(b, st, base, &o, 1, "");
        if (lanes) {
            LLVMTypeRef over[2] = {LLVMTypeOf(raw), c->ptr};
            LLVMValueRef args[4] = {raw, p, LLVMConstInt(c->i32, align, 0), lanes};
            cg_call_intrinsic(c, "llvm.masked.store", over, 2, args, 4);
            return;
        }
        LLVMValueRef s = LLVMBuildStore(b, raw, p);
        LLVMSetAlignment(s, align);
        return;
    }
    /* scatter (also for lanes that all store to one place: the last one wins) */
    LLVMValueRef o = ix_emit(c, off, vals, w);
    LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, st, base, &o, 1, "");
    LLVMTypeRef over[2] = {LLVMTypeOf(raw), LLVMTypeOf(ptrs)};
    LLVMValueRef args[4] = {raw, ptrs, LLVMConstInt(c->i32, align, 0), lanes ? lanes : all_true(c, w)};
    cg_call_intrinsic(c, "llvm.masked.scatter", over, 2, args, 4);
}

/* ---- body entries ------------------------------------------------------------------ */

static LLVMValueRef emit_cast(cg *c, LLVMValueRef v, ptc_dtype from, ptc_dtype to, int w)
{
    LLVMBuilderRef b = c->b;
    LLVMTypeRef tt = cg_vec(c, cg_compute_type(c, to), w);
    if (to == PTC_BOOL) {
        if (is_float(from))
            return LLVMBuildFCmp(b, LLVMRealUNE, v, kconst(c, from, 0, 0, w), "");
        return LLVMBuildICmp(b, LLVMIntNE, v, kconst(c, from, 0, 0, w), "");
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
        LLVMValueRef r = is_unsigned(to) ? LLVMBuildFPToUI(b, v, tt, "") : LLVMBuildFPToSI(b, v, tt, "");
        return LLVMBuildFreeze(b, r, "");
    }
    if (is_float(to)) {
        LLVMValueRef r = is_unsigned(from) ? LLVMBuildUIToFP(b, v, tt, "") : LLVMBuildSIToFP(b, v, tt, "");
        return round_to(c, r, to, w);
    }
    unsigned fb = LLVMGetIntTypeWidth(cg_compute_type(c, from)),
             tb = LLVMGetIntTypeWidth(cg_compute_type(c, to));
    if (fb == tb)
        return v;
    if (fb > tb)
        return LLVMBuildTrunc(b, v, tt, "");
    return is_unsigned(from) ? LLVMBuildZExt(b, v, tt, "") : LLVMBuildSExt(b, v, tt, "");
}

static LLVMValueRef fcall1(cg *c, const char *intr, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    return cg_call_intrinsic(c, intr, &t, 1, &x, 1);
}

static const char *libm_name(int op, ptc_dtype dt)
{
    bool d = dt == PTC_F64;
    switch (op) {
    case PTC_L_LOG1P: return d ? "log1p" : "log1pf";
    case PTC_L_EXPM1: return d ? "expm1" : "expm1f";
    case PTC_L_SIN: return d ? "sin" : "sinf";
    case PTC_L_COS: return d ? "cos" : "cosf";
    case PTC_L_ATAN2: return d ? "atan2" : "atan2f";
    case PTC_L_POW: return d ? "pow" : "powf";
    default: return NULL;
    }
}

static LLVMValueRef emit_unary(cg *c, int op, ptc_dtype dt, LLVMValueRef x, int w)
{
    LLVMBuilderRef b = c->b;
    bool f = is_float(dt);
    LLVMTypeRef st = cg_compute_type(c, dt);
    switch (op) {
    case PTC_L_ABS:
        if (f)
            return fcall1(c, "llvm.fabs", x);
        if (is_unsigned(dt))
            return x;
        return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, x, kconst(c, dt, 0, 0, w), ""),
                               LLVMBuildNeg(b, x, ""), x, "");
    case PTC_L_NEG: return f ? LLVMBuildFNeg(b, x, "") : LLVMBuildNeg(b, x, "");
    case PTC_L_EXP: return cg_exp(c, x, dt);
    case PTC_L_LOG: return cg_log(c, x, dt);
    case PTC_L_TANH: return cg_tanh(c, x, dt);
    case PTC_L_ERF: return cg_erf(c, x, dt);
    case PTC_L_LOG1P: return cg_log1p(c, x, dt);
    case PTC_L_EXPM1: return cg_expm1(c, x, dt);
    case PTC_L_SIN:
    case PTC_L_COS: return cg_libm(c, libm_name(op, dt), st, &x, 1);
    case PTC_L_SQRT: return fcall1(c, "llvm.sqrt", x);
    case PTC_L_RSQRT:
        return LLVMBuildFDiv(b, kconst(c, dt, 1, 1, w), fcall1(c, "llvm.sqrt", x), "");
    case PTC_L_RECIPROCAL: return LLVMBuildFDiv(b, kconst(c, dt, 1, 1, w), x, "");
    case PTC_L_FLOOR: return f ? fcall1(c, "llvm.floor", x) : x;
    case PTC_L_CEIL: return f ? fcall1(c, "llvm.ceil", x) : x;
    case PTC_L_ROUND: return f ? fcall1(c, "llvm.roundeven", x) : x;
    case PTC_L_TRUNC: return f ? fcall1(c, "llvm.trunc", x) : x;
    case PTC_L_SIGN: {
        LLVMValueRef zero = kconst(c, dt, 0, 0, w);
        if (dt == PTC_BOOL)
            return x;
        LLVMValueRef pos = f ? LLVMBuildFCmp(b, LLVMRealOGT, x, zero, "")
                             : LLVMBuildICmp(b, is_unsigned(dt) ? LLVMIntUGT : LLVMIntSGT, x, zero, "");
        LLVMValueRef neg = f ? LLVMBuildFCmp(b, LLVMRealOLT, x, zero, "")
                             : LLVMBuildICmp(b, LLVMIntSLT, x, zero, "");
        LLVMValueRef r = LLVMBuildSelect(b, neg, kconst(c, dt, -1, -1, w), zero, "");
        r = LLVMBuildSelect(b, pos, kconst(c, dt, 1, 1, w), r, "");
        return f ? LLVMBuildSelect(b, ptc_ll_isnan(c->b, x), x, r, "") : r;
    }
    case PTC_L_BITWISE_NOT: return LLVMBuildNot(b, x, "");
    case PTC_L_LOGICAL_NOT: return LLVMBuildNot(b, emit_cast(c, x, dt, PTC_BOOL, w), "");
    case PTC_L_ISNAN:
        return f ? ptc_ll_isnan(c->b, x) : cg_const_i(c, c->i1, 0, w);
    default: PTC_ASSERT(!"not a unary op");
    }
}

/* Integer power by squaring, in a helper function per type. */
static LLVMValueRef ipow(cg *c, LLVMValueRef x, LLVMValueRef y, ptc_dtype dt)
{
    LLVMTypeRef t = cg_compute_type(c, dt);
    char name[32];
    snprintf(name, sizeof name, "ptc.ipow.%s", ptc_dtype_name(dt));
    LLVMTypeRef params[2] = {t, t};
    LLVMTypeRef ft = LLVMFunctionType(t, params, 2, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (!fn) {
        fn = LLVMAddFunction(c->mod, name, ft);
        LLVMSetLinkage(fn, LLVMInternalLinkage);
        LLVMBuilderRef b = LLVMCreateBuilderInContext(c->ctx);
        LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c->ctx, fn, "entry");
        LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(c->ctx, fn, "head");
        LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(c->ctx, fn, "body");
        LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->ctx, fn, "done");
        LLVMPositionBuilderAtEnd(b, entry);
        LLVMValueRef base0 = LLVMGetParam(fn, 0), e0 = LLVMGetParam(fn, 1);
        LLVMValueRef one = LLVMConstInt(t, 1, 0), zero = LLVMConstInt(t, 0, 0);
        LLVMBuildBr(b, head);
        LLVMPositionBuilderAtEnd(b, head);
        LLVMValueRef r = LLVMBuildPhi(b, t, "r"), bs = LLVMBuildPhi(b, t, "b"), e = LLVMBuildPhi(b, t, "e");
        LLVMAddIncoming(r, &one, &entry, 1);
        LLVMAddIncoming(bs, &base0, &entry, 1);
        LLVMAddIncoming(e, &e0, &entry, 1);
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
        /* a negative exponent: 1 and -1 stay finite, anything else is 0 */
        LLVMValueRef res = r;
        if (!is_unsigned(dt)) {
            LLVMValueRef neg = LLVMBuildICmp(b, LLVMIntSLT, e0, zero, "");
            LLVMValueRef one_b = LLVMBuildICmp(b, LLVMIntEQ, base0, one, "");
            LLVMValueRef m1 = LLVMBuildICmp(b, LLVMIntEQ, base0, LLVMConstAllOnes(t), "");
            LLVMValueRef odd = LLVMBuildTrunc(b, e0, c->i1, "");
            LLVMValueRef negv = LLVMBuildSelect(b, one_b, one,
                                                LLVMBuildSelect(b, m1, LLVMBuildSelect(b, odd, base0, one, ""),
                                                                zero, ""), "");
            res = LLVMBuildSelect(b, neg, negv, r, "");
        }
        LLVMBuildRet(b, res);
        LLVMDisposeBuilder(b);
    }
    int w = cg_width(x);
    if (w == 1) {
        LLVMValueRef a[2] = {x, y};
        return LLVMBuildCall2(c->b, ft, fn, a, 2, "");
    }
    LLVMValueRef out = LLVMGetPoison(LLVMTypeOf(x));
    for (int i = 0; i < w; i++) {
        LLVMValueRef lane = LLVMConstInt(c->i32, (unsigned)i, 0);
        LLVMValueRef a[2] = {LLVMBuildExtractElement(c->b, x, lane, ""),
                             LLVMBuildExtractElement(c->b, y, lane, "")};
        out = LLVMBuildInsertElement(c->b, out, LLVMBuildCall2(c->b, ft, fn, a, 2, ""), lane, "");
    }
    return out;
}

static LLVMValueRef emit_pow(cg *c, ptc_dtype dt, LLVMValueRef x, LLVMValueRef y,
                             const ptc_lexpr *ye)
{
    if (!is_float(dt))
        return ipow(c, x, y, dt);
    LLVMValueRef short_form =
        ye && ye->op == PTC_L_CONST ? ptc_ll_pow_const(c->mod, c->b, x, ye->fval) : NULL;
    if (short_form)
        return short_form;
    LLVMValueRef a[2] = {x, y};
    return cg_libm(c, libm_name(PTC_L_POW, dt), cg_compute_type(c, dt), a, 2);
}

/* y_uniform: the divisor is the same in every lane (a row's sum): a vector
 * division becomes one reciprocal, hoisted out of the loop, and a multiply
 * (at most an ulp from the quotient; torch's CPU softmax does the same). */
static LLVMValueRef emit_binary(cg *c, const ptc_lbody *body, const ptc_lexpr *e, LLVMValueRef x,
                                LLVMValueRef y, int w, bool y_uniform)
{
    LLVMBuilderRef b = c->b;
    ptc_dtype dt = body->e[e->arg[0]].dtype; /* operand dtype */
    bool f = is_float(dt);
    LLVMValueRef r;
    switch (e->op) {
    case PTC_L_ADD:
        r = f ? LLVMBuildFAdd(b, x, y, "") : dt == PTC_BOOL ? LLVMBuildOr(b, x, y, "") : LLVMBuildAdd(b, x, y, "");
        break;
    case PTC_L_SUB:
        r = f ? LLVMBuildFSub(b, x, y, "") : dt == PTC_BOOL ? LLVMBuildXor(b, x, y, "") : LLVMBuildSub(b, x, y, "");
        break;
    case PTC_L_MUL:
        r = f ? LLVMBuildFMul(b, x, y, "") : dt == PTC_BOOL ? LLVMBuildAnd(b, x, y, "") : LLVMBuildMul(b, x, y, "");
        break;
    case PTC_L_DIV:
        if (f && w > 1 && y_uniform)
            r = LLVMBuildFMul(b, x, LLVMBuildFDiv(b, kconst(c, dt, 1, 1, w), y, ""), "");
        else
            r = f ? LLVMBuildFDiv(b, x, y, "") : ptc_ll_int_divmod(b, e->op, is_unsigned(dt), x, y);
        break;
    case PTC_L_FLOOR_DIVIDE:
    case PTC_L_REMAINDER:
        r = f ? ptc_ll_float_floordiv_rem(c->mod, b, e->op, x, y, LLVMBuildFRem(b, x, y, ""))
              : ptc_ll_int_divmod(b, e->op, is_unsigned(dt), x, y);
        break;
    case PTC_L_POW:
        r = emit_pow(c, dt, x, y, &body->e[e->arg[1]]);
        break;
    case PTC_L_MAXIMUM:
        r = ptc_ll_minmax(c->b, true, dt, x, y);
        break;
    case PTC_L_MINIMUM:
        r = ptc_ll_minmax(c->b, false, dt, x, y);
        break;
    case PTC_L_ATAN2: {
        LLVMValueRef a[2] = {x, y};
        r = cg_libm(c, libm_name(PTC_L_ATAN2, dt), cg_compute_type(c, dt), a, 2);
        break;
    }
    case PTC_L_BITWISE_AND: r = LLVMBuildAnd(b, x, y, ""); break;
    case PTC_L_BITWISE_OR: r = LLVMBuildOr(b, x, y, ""); break;
    case PTC_L_BITWISE_XOR: r = LLVMBuildXor(b, x, y, ""); break;
    default:
        return ptc_ll_compare(b, e->op, dt, x, y);
    }
    if (f && dt != PTC_F32 && dt != PTC_F64)
        r = round_to(c, r, dt, w); /* torch rounds f16/bf16 results per op */
    return r;
}

/* The call's status record: its address follows the params in the block. */
static LLVMValueRef status_ptr(void *ctx)
{
    cg *c = ctx;
    LLVMValueRef at = LLVMConstInt(c->i64, 1 + (unsigned)c->k->nparams, 0);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(c->b, c->i64, c->params, &at, 1, "");
    return LLVMBuildLoad2(c->b, c->ptr, p, "status");
}

/* Lanes past the end of a masked tail computed on zeros: their checks pass. */
static LLVMValueRef emit_check(cg *c, const ptc_lexpr *e, LLVMValueRef *v, int w)
{
    LLVMValueRef ok = v[e->arg[0]];
    if (w > 1 && c->lane_mask)
        ok = LLVMBuildOr(c->b, ok, LLVMBuildNot(c->b, c->lane_mask, ""), "");
    return ptc_ll_check(c->mod, c->b, e->ival, ok, v[e->arg[1]], v[e->arg[2]], status_ptr, c);
}

/* Values of the entries of a member body; loads of buffers written earlier in
 * the same group at the same offset take the written value. */
typedef struct fwd {
    int n;
    int buf[64];
    const ptc_ix *off[64];
    LLVMValueRef val[64];
} fwd;

/* Is entry i the same in every lane of the vector loop? */
static bool entry_uniform(cg *c, const ptc_lexpr *e, LLVMValueRef *v, const bool *uni, bool forwarded)
{
    if (c->W == 1)
        return true;
    switch (e->op) {
    case PTC_L_CONST: return true;
    case PTC_L_LOAD:
        return !forwarded && !ix_varies(c, e->idx[0], v) && (e->arg[0] < 0 || uni[e->arg[0]]);
    case PTC_L_INDEX:
    case PTC_L_RAND:
    case PTC_L_RANDN: return !ix_varies(c, e->ix, v);
    default:
        for (int k = 0; k < ptc_lop_arity(e->op); k++)
            if (!uni[e->arg[k]])
                return false;
        return true;
    }
}

static LLVMValueRef *emit_body(cg *c, const ptc_lbody *body, int w, const fwd *fw)
{
    LLVMValueRef *v = calloc((size_t)body->n + 1, sizeof *v);
    bool *uni = calloc((size_t)body->n + 1, sizeof *uni);
    LLVMBuilderRef b = c->b;
    for (int i = 0; i < body->n; i++) {
        const ptc_lexpr *e = &body->e[i];
        LLVMValueRef x = e->arg[0] >= 0 ? v[e->arg[0]] : NULL;
        LLVMValueRef y = e->arg[1] >= 0 ? v[e->arg[1]] : NULL;
        bool forwarded = false;
        switch (e->op) {
        case PTC_L_LOAD: {
            LLVMValueRef hit = NULL;
            for (int k = 0; fw && k < fw->n && !hit; k++)
                if (fw->buf[k] == e->buf && ptc_ix_eq(fw->off[k], e->idx[0]))
                    hit = fw->val[k];
            if (hit && e->arg[0] >= 0)
                hit = LLVMBuildSelect(b, cg_splat(c, v[e->arg[0]], w), hit,
                                      kconst(c, e->dtype, e->fval, e->ival, w), "");
            v[i] = hit ? hit : emit_load(c, e, v, w);
            forwarded = hit != NULL;
            break;
        }
        case PTC_L_CONST: v[i] = kconst(c, e->dtype, e->fval, e->ival, w); break;
        case PTC_L_INDEX: v[i] = ix_emit(c, e->ix, v, w); break;
        case PTC_L_RAND:
        case PTC_L_RANDN: {
            LLVMValueRef key = cg_rng_key(c, e->seed);
            LLVMValueRef idx = ix_emit(c, e->ix, v, w);
            LLVMValueRef u = e->op == PTC_L_RAND ? cg_rng_uniform(c, key, idx)
                                                 : cg_randn(c, key, idx, e->dtype);
            v[i] = emit_cast(c, u, PTC_F32, e->dtype, w);
            break;
        }
        case PTC_L_CAST: v[i] = emit_cast(c, x, body->e[e->arg[0]].dtype, e->dtype, w); break;
        case PTC_L_WHERE: v[i] = LLVMBuildSelect(b, x, y, v[e->arg[2]], ""); break;
        case PTC_L_CHECK:
            v[i] = emit_check(c, e, v, w);
            break;
        default:
            if (ptc_lop_arity(e->op) == 1) {
                v[i] = emit_unary(c, e->op, body->e[e->arg[0]].dtype, x, w);
                if (is_float(e->dtype) && e->dtype != PTC_F32 && e->dtype != PTC_F64 &&
                    e->op != PTC_L_ISNAN)
                    v[i] = round_to(c, v[i], e->dtype, w);
            } else {
                v[i] = emit_binary(c, body, e, x, y, w, uni[e->arg[1]]);
            }
            break;
        }
        v[i] = cg_splat(c, v[i], w);
        uni[i] = entry_uniform(c, e, v, uni, forwarded);
    }
    free(uni);
    return v;
}

enum { UNROLL_COST = 32 };

/* ---- reductions ------------------------------------------------------------------ */

/* One member's reduction state: value / index / Welford mean and M2 / count. */
typedef struct rv {
    LLVMValueRef v, i, m, m2, n;
} rv;

typedef struct red {
    const ptc_kmember *mem;
    const ptc_lnode *n;
    ptc_dtype dt;     /* the reduced value's dtype */
    LLVMTypeRef t;    /* its compute type */
    rv vec, vec2, sc; /* allocas: lane accumulators (two sets when unrolled), tail */
} red;

static void red_identity(cg *c, const red *r, double *f, int64_t *i)
{
    bool fl = is_float(r->dt);
    *f = 0;
    *i = 0;
    switch (r->n->reduce) {
    case PTC_RED_PROD: *f = 1; *i = 1; break;
    case PTC_RED_MAX:
    case PTC_RED_ARGMAX:
        *f = -INFINITY;
        if (!fl)
            *i = is_unsigned(r->dt) ? 0 : r->dt == PTC_I8 ? INT8_MIN : r->dt == PTC_I16 ? INT16_MIN
                 : r->dt == PTC_I32 ? INT32_MIN : INT64_MIN;
        break;
    case PTC_RED_MIN:
    case PTC_RED_ARGMIN:
        *f = INFINITY;
        if (!fl)
            *i = r->dt == PTC_BOOL ? 1 : r->dt == PTC_U8 ? 255 : r->dt == PTC_I8 ? INT8_MAX
                 : r->dt == PTC_I16 ? INT16_MAX : r->dt == PTC_I32 ? INT32_MAX : INT64_MAX;
        break;
    default: break;
    }
    (void)c;
}

static void red_alloc(cg *c, red *r, rv *acc, int w)
{
    acc->v = cg_alloca(c, cg_vec(c, r->t, w), "acc");
    acc->i = cg_alloca(c, cg_vec(c, c->i64, w), "acc.i");
    acc->m = cg_alloca(c, cg_vec(c, r->t, w), "acc.mean");
    acc->m2 = cg_alloca(c, cg_vec(c, r->t, w), "acc.m2");
    acc->n = cg_alloca(c, c->i64, "acc.n");
}

static void store_(cg *c, LLVMValueRef p, LLVMValueRef v) { LLVMBuildStore(c->b, v, p); }
static LLVMValueRef load_(cg *c, LLVMTypeRef t, LLVMValueRef p) { return LLVMBuildLoad2(c->b, t, p, ""); }

static void red_init(cg *c, red *r, rv *acc, int w)
{
    double f;
    int64_t i;
    red_identity(c, r, &f, &i);
    store_(c, acc->v, kconst(c, r->dt, f, i, w));
    store_(c, acc->i, cg_const_i(c, c->i64, 0, w));
    if (r->n->reduce == PTC_RED_WELFORD) {
        store_(c, acc->m, kconst(c, r->dt, 0, 0, w));
        store_(c, acc->m2, kconst(c, r->dt, 0, 0, w));
    }
    store_(c, acc->n, LLVMConstInt(c->i64, 0, 0));
}

/* Does b's (value, index) win over a's for argmax/argmin? Ties and NaNs go
 * to the first index, as torch does. */
static LLVMValueRef arg_better(cg *c, const red *r, LLVMValueRef av, LLVMValueRef ai,
                               LLVMValueRef bv, LLVMValueRef bi)
{
    LLVMBuilderRef b = c->b;
    bool max = r->n->reduce == PTC_RED_ARGMAX;
    LLVMValueRef earlier = LLVMBuildICmp(b, LLVMIntSLT, bi, ai, "");
    if (!is_float(r->dt)) {
        LLVMIntPredicate p = is_unsigned(r->dt) ? (max ? LLVMIntUGT : LLVMIntULT)
                                                : (max ? LLVMIntSGT : LLVMIntSLT);
        LLVMValueRef gt = LLVMBuildICmp(b, p, bv, av, "");
        LLVMValueRef eq = LLVMBuildICmp(b, LLVMIntEQ, bv, av, "");
        return LLVMBuildOr(b, gt, LLVMBuildAnd(b, eq, earlier, ""), "");
    }
    LLVMValueRef an = ptc_ll_isnan(c->b, av), bn = ptc_ll_isnan(c->b, bv);
    LLVMValueRef gt = LLVMBuildFCmp(b, max ? LLVMRealOGT : LLVMRealOLT, bv, av, "");
    LLVMValueRef eq = LLVMBuildFCmp(b, LLVMRealOEQ, bv, av, "");
    LLVMValueRef num = LLVMBuildAnd(b, LLVMBuildNot(b, an, ""),
                                    LLVMBuildOr(b, gt, LLVMBuildAnd(b, eq, earlier, ""), ""), "");
    LLVMValueRef nan = LLVMBuildAnd(b, bn, LLVMBuildOr(b, LLVMBuildNot(b, an, ""), earlier, ""), "");
    return LLVMBuildSelect(b, bn, nan, num, "");
}

/* Combines two states of width w (Welford counts as float in .n). */
static rv red_combine(cg *c, const red *r, rv a, rv x, int w)
{
    LLVMBuilderRef b = c->b;
    rv o = a;
    switch (r->n->reduce) {
    case PTC_RED_SUM:
        o.v = is_float(r->dt) ? LLVMBuildFAdd(b, a.v, x.v, "")
              : r->dt == PTC_BOOL ? LLVMBuildOr(b, a.v, x.v, "") : LLVMBuildAdd(b, a.v, x.v, "");
        break;
    case PTC_RED_PROD:
        o.v = is_float(r->dt) ? LLVMBuildFMul(b, a.v, x.v, "")
              : r->dt == PTC_BOOL ? LLVMBuildAnd(b, a.v, x.v, "") : LLVMBuildMul(b, a.v, x.v, "");
        break;
    case PTC_RED_MAX:
        o.v = ptc_ll_minmax(c->b, true, r->dt, x.v, a.v);
        break;
    case PTC_RED_MIN:
        o.v = ptc_ll_minmax(c->b, false, r->dt, x.v, a.v);
        break;
    case PTC_RED_ARGMAX:
    case PTC_RED_ARGMIN: {
        LLVMValueRef take = arg_better(c, r, a.v, a.i, x.v, x.i);
        o.v = LLVMBuildSelect(b, take, x.v, a.v, "");
        o.i = LLVMBuildSelect(b, take, x.i, a.i, "");
        break;
    }
    case PTC_RED_WELFORD: {
        LLVMValueRef zero = kconst(c, r->dt, 0, 0, w);
        LLVMValueRef n = LLVMBuildFAdd(b, a.n, x.n, "");
        LLVMValueRef pos = LLVMBuildFCmp(b, LLVMRealOGT, n, zero, "");
        LLVMValueRef ns = LLVMBuildSelect(b, pos, n, kconst(c, r->dt, 1, 1, w), "");
        LLVMValueRef delta = LLVMBuildFSub(b, x.m, a.m, "");
        LLVMValueRef fb = LLVMBuildFDiv(b, x.n, ns, "");
        o.m = LLVMBuildFAdd(b, a.m, LLVMBuildFMul(b, delta, fb, ""), "");
        LLVMValueRef t = LLVMBuildFMul(b, LLVMBuildFMul(b, delta, delta, ""), a.n, "");
        t = LLVMBuildFMul(b, t, fb, "");
        o.m2 = LLVMBuildFAdd(b, LLVMBuildFAdd(b, a.m2, x.m2, ""), t, "");
        o.n = n;
        break;
    }
    default: PTC_ASSERT(!"unknown reduction");
    }
    return o;
}

static void red_update(cg *c, red *r, LLVMValueRef x, LLVMValueRef idx, int w)
{
    rv *acc = w == 1 ? &r->sc : c->acc_set ? &r->vec2 : &r->vec;
    LLVMTypeRef vt = cg_vec(c, r->t, w);
    LLVMBuilderRef b = c->b;
    if (r->n->reduce == PTC_RED_WELFORD) {
        LLVMValueRef n = LLVMBuildAdd(b, load_(c, c->i64, acc->n), LLVMConstInt(c->i64, 1, 0), "");
        store_(c, acc->n, n);
        LLVMValueRef inv = LLVMBuildFDiv(b, LLVMConstReal(r->t, 1.0), LLVMBuildSIToFP(b, n, r->t, ""), "");
        LLVMValueRef mean = load_(c, vt, acc->m), m2 = load_(c, vt, acc->m2);
        LLVMValueRef delta = LLVMBuildFSub(b, x, mean, "");
        LLVMValueRef nm = LLVMBuildFAdd(b, mean, LLVMBuildFMul(b, delta, cg_splat(c, inv, w), ""), "");
        m2 = LLVMBuildFAdd(b, m2, LLVMBuildFMul(b, delta, LLVMBuildFSub(b, x, nm, ""), ""), "");
        store_(c, acc->m, nm);
        store_(c, acc->m2, m2);
        return;
    }
    rv a = {load_(c, vt, acc->v), NULL, NULL, NULL, NULL};
    rv e = {x, idx, NULL, NULL, NULL};
    bool arg = r->n->reduce == PTC_RED_ARGMAX || r->n->reduce == PTC_RED_ARGMIN;
    if (arg)
        a.i = load_(c, cg_vec(c, c->i64, w), acc->i);
    rv o = red_combine(c, r, a, e, w);
    if (w > 1 && c->lane_mask) {
        o.v = LLVMBuildSelect(b, c->lane_mask, o.v, a.v, "");
        if (arg)
            o.i = LLVMBuildSelect(b, c->lane_mask, o.i, a.i, "");
    }
    store_(c, acc->v, o.v);
    if (arg)
        store_(c, acc->i, o.i);
}

static LLVMValueRef half_of(cg *c, LLVMValueRef v, int w, int part)
{
    if (!v)
        return NULL;
    int h = w / 2;
    if (h == 1)
        return LLVMBuildExtractElement(c->b, v, LLVMConstInt(c->i32, (unsigned)part, 0), "");
    LLVMValueRef mask[32];
    for (int i = 0; i < h; i++)
        mask[i] = LLVMConstInt(c->i32, (unsigned)(part * h + i), 0);
    return LLVMBuildShuffleVector(c->b, v, LLVMGetPoison(LLVMTypeOf(v)), LLVMConstVector(mask, (unsigned)h), "");
}

/* Loads an accumulator set as values (Welford count as float of the type). */
static rv red_load(cg *c, const red *r, const rv *acc, int w)
{
    LLVMTypeRef vt = cg_vec(c, r->t, w);
    rv o = {load_(c, vt, acc->v), load_(c, cg_vec(c, c->i64, w), acc->i), NULL, NULL, NULL};
    if (r->n->reduce == PTC_RED_WELFORD) {
        o.m = load_(c, vt, acc->m);
        o.m2 = load_(c, vt, acc->m2);
        LLVMValueRef n = LLVMBuildSIToFP(c->b, load_(c, c->i64, acc->n), r->t, "");
        o.n = cg_splat(c, n, w);
    }
    return o;
}

static rv red_final(cg *c, const red *r, bool had_vector, bool unrolled, int lanes)
{
    rv s = red_load(c, r, &r->sc, 1);
    if (!had_vector)
        return s;
    rv v = red_load(c, r, &r->vec, lanes);
    if (unrolled)
        v = red_combine(c, r, v, red_load(c, r, &r->vec2, lanes), lanes);
    for (int w = lanes; w > 1; w /= 2) {
        rv lo = {half_of(c, v.v, w, 0), half_of(c, v.i, w, 0), half_of(c, v.m, w, 0),
                 half_of(c, v.m2, w, 0), half_of(c, v.n, w, 0)};
        rv hi = {half_of(c, v.v, w, 1), half_of(c, v.i, w, 1), half_of(c, v.m, w, 1),
                 half_of(c, v.m2, w, 1), half_of(c, v.n, w, 1)};
        v = red_combine(c, r, lo, hi, w / 2);
    }
    return red_combine(c, r, v, s, 1);
}

static void red_store(cg *c, const red *r, rv f)
{
    LLVMValueRef outs[2] = {f.v, NULL};
    switch (r->n->reduce) {
    case PTC_RED_ARGMAX:
    case PTC_RED_ARGMIN:
        outs[0] = f.i;
        outs[1] = f.v;
        break;
    case PTC_RED_WELFORD: {
        LLVMBuilderRef b = c->b;
        LLVMValueRef dof = LLVMBuildFSub(b, f.n, LLVMConstReal(r->t, r->n->correction), "");
        LLVMValueRef zero = LLVMConstReal(r->t, 0);
        dof = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, dof, zero, ""), zero, dof, "");
        outs[0] = LLVMBuildFDiv(b, f.m2, dof, "");
        /* the mean of no elements is 0/0, as eager's (a symbolic length may be 0) */
        LLVMValueRef none = LLVMBuildFCmp(b, LLVMRealOLE, f.n, zero, "");
        outs[1] = LLVMBuildSelect(b, none, LLVMConstReal(r->t, NAN), f.m, "");
        break;
    }
    default: break;
    }
    for (int k = 0; k < 2; k++)
        if (r->mem->store[k] && r->n->out[k] >= 0)
            emit_store(c, r->n->out[k], r->mem->store[k], outs[k], NULL, 1);
}

/* ---- groups ------------------------------------------------------------------------- */

typedef void (*emit_fn)(cg *c, void *ctx, int w);

/* A vector main loop over [lo, hi) stepping lanes, then the remainder: one
 * masked vector step, or (scalar_tail) a scalar loop. */
static void vector_loop(cg *c, int var, LLVMValueRef lo, LLVMValueRef hi, emit_fn fn, void *ctx,
                        bool *had_vector, bool scalar_tail, bool unroll2)
{
    LLVMBuilderRef b = c->b;
    int lanes = c->lanes;
    LLVMValueRef vhi = lo;
    if (lanes > 1 && unroll2) {
        /* two independent accumulator sets: halves loop-carried latency */
        LLVMValueRef n = LLVMBuildSub(b, hi, lo, "");
        LLVMValueRef rem = LLVMBuildAnd(b, n, LLVMConstInt(c->i64, (unsigned)(2 * lanes - 1), 0), "");
        LLVMValueRef v2 = LLVMBuildSub(b, hi, rem, "");
        loop l;
        loop_open(c, &l, lo, v2, 2 * lanes, "vec2");
        c->vec_var = var;
        c->W = lanes;
        c->vars[var] = l.iv;
        c->acc_set = 0;
        fn(c, ctx, lanes);
        c->vars[var] = LLVMBuildNSWAdd(b, l.iv, LLVMConstInt(c->i64, (unsigned)lanes, 0), "");
        c->acc_set = 1;
        fn(c, ctx, lanes);
        c->acc_set = 0;
        loop_close(c, &l);
        lo = v2;
        if (had_vector)
            *had_vector = true;
    }
    if (lanes > 1) {
        LLVMValueRef n = LLVMBuildSub(b, hi, lo, "");
        LLVMValueRef rem = LLVMBuildAnd(b, n, LLVMConstInt(c->i64, (unsigned)(lanes - 1), 0), "");
        vhi = LLVMBuildSub(b, hi, rem, "");
        loop l;
        loop_open(c, &l, lo, vhi, lanes, "vec");
        c->vars[var] = l.iv;
        c->vec_var = var;
        c->W = lanes;
        fn(c, ctx, lanes);
        loop_close(c, &l);
        if (had_vector)
            *had_vector = true;
    }
    if (lanes > 1 && !scalar_tail) {
        LLVMBasicBlockRef tail = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "tail");
        LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "done");
        LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, vhi, hi, ""), tail, done);
        LLVMPositionBuilderAtEnd(b, tail);
        c->vars[var] = vhi;
        c->vec_var = var;
        c->W = lanes;
        LLVMValueRef pos = LLVMBuildNSWAdd(b, cg_splat(c, vhi, lanes), lane_iota(c, lanes), "");
        c->lane_mask = LLVMBuildICmp(b, LLVMIntSLT, pos, cg_splat(c, hi, lanes), "lanes");
        fn(c, ctx, lanes);
        c->lane_mask = NULL;
        LLVMBuildBr(b, done);
        LLVMPositionBuilderAtEnd(b, done);
        c->vec_var = -1;
        c->W = 1;
        return;
    }
    loop t;
    loop_open(c, &t, vhi, hi, 1, "tail");
    c->vars[var] = t.iv;
    c->vec_var = -1;
    c->W = 1;
    fn(c, ctx, 1);
    loop_close(c, &t);
}

typedef struct pwctx {
    const ptc_kgroup *g;
    int g0, g1; /* groups emitted in one loop (flat kernels) */
} pwctx;

static bool is_local_buf(cg *c, int buf) { return c->s->is_local[buf]; }

static bool kernel_is_flat(const ptc_kernel *k)
{
    for (int g = 0; g < k->ngroups; g++)
        if (k->groups[g].reduction || k->groups[g].ninner || k->groups[g].nred)
            return false;
    return true;
}

static void emit_members(cg *c, void *ctx, int w)
{
    pwctx *p = ctx;
    fwd fw;
    fw.n = 0;
    bool flat = kernel_is_flat(c->k);
    for (int g = p->g0; g < p->g1; g++) {
        const ptc_kgroup *G = &c->k->groups[g];
        for (int m = 0; m < G->nmembers; m++) {
            const ptc_kmember *mem = &G->members[m];
            const ptc_lnode *n = c->s->prog->nodes[mem->node];
            LLVMValueRef *v = emit_body(c, &mem->body, w, &fw);
            LLVMValueRef val = v[mem->value];
            int ob = n->out[0];
            if (!(flat && is_local_buf(c, ob)))
                emit_store(c, ob, mem->store[0], val, v, w);
            if (fw.n < 64) {
                fw.buf[fw.n] = ob;
                fw.off[fw.n] = mem->store[0];
                fw.val[fw.n++] = val;
            }
            free(v);
        }
    }
}

static void emit_pw_inner(cg *c, const ptc_kgroup *G, int g, int d)
{
    int var = c->k->nouter + d;
    pwctx p = {G, g, g + 1};
    if (d == G->ninner - 1) {
        vector_loop(c, var, LLVMConstInt(c->i64, 0, 0), dim_value(c, G->inner[d]), emit_members, &p,
                    NULL, false, false);
        return;
    }
    loop l;
    loop_open(c, &l, LLVMConstInt(c->i64, 0, 0), dim_value(c, G->inner[d]), 1, "inner");
    c->vars[var] = l.iv;
    emit_pw_inner(c, G, g, d + 1);
    loop_close(c, &l);
}

typedef struct redctx {
    const ptc_kgroup *G;
    red *reds;
    bool scalar_tail; /* Welford's lanes must see equal counts: no masked tail */
    bool unroll;      /* two accumulator sets (cheap bodies are latency-bound) */
    const ptc_ix *ridx; /* linear reduction index, for argmax/argmin */
} redctx;

static void emit_red_step(cg *c, void *ctx, int w)
{
    redctx *r = ctx;
    fwd fw;
    fw.n = 0;
    for (int m = 0; m < r->G->nmembers; m++) {
        red *rd = &r->reds[m];
        if (rd->n->kind == PTC_LN_POINTWISE) {
            /* a pointwise member inside the reduction loop: computed, stored
             * and handed to later members of this step */
            LLVMValueRef *v = emit_body(c, &rd->mem->body, w, &fw);
            int ob = rd->n->out[0];
            emit_store(c, ob, rd->mem->store[0], v[rd->mem->value], v, w);
            if (fw.n < 64) {
                fw.buf[fw.n] = ob;
                fw.off[fw.n] = rd->mem->store[0];
                fw.val[fw.n++] = v[rd->mem->value];
            }
            free(v);
            continue;
        }
        LLVMValueRef *v = emit_body(c, &rd->mem->body, w, &fw);
        LLVMValueRef idx = NULL;
        if (rd->n->reduce == PTC_RED_ARGMAX || rd->n->reduce == PTC_RED_ARGMIN)
            idx = ix_emit(c, r->ridx, v, w);
        red_update(c, rd, v[rd->mem->value], idx, w);
        free(v);
    }
}

static void emit_red_loops(cg *c, redctx *r, int d, bool *had_vector)
{
    const ptc_kgroup *G = r->G;
    int var = c->k->nouter + G->ninner + d;
    if (G->nred == 0) {
        emit_red_step(c, r, 1);
        return;
    }
    if (d == G->nred - 1) {
        vector_loop(c, var, LLVMConstInt(c->i64, 0, 0), dim_value(c, G->red[d]), emit_red_step, r,
                    had_vector, r->scalar_tail, r->unroll);
        return;
    }
    loop l;
    loop_open(c, &l, LLVMConstInt(c->i64, 0, 0), dim_value(c, G->red[d]), 1, "red");
    c->vars[var] = l.iv;
    emit_red_loops(c, r, d + 1, had_vector);
    loop_close(c, &l);
}

static void emit_red_group(cg *c, const ptc_kgroup *G, int d, ptc_arena *tmp)
{
    int nouter = c->k->nouter;
    if (d < G->ninner) {
        loop l;
        loop_open(c, &l, LLVMConstInt(c->i64, 0, 0), dim_value(c, G->inner[d]), 1, "kept");
        c->vars[nouter + d] = l.iv;
        emit_red_group(c, G, d + 1, tmp);
        loop_close(c, &l);
        return;
    }
    red *reds = calloc((size_t)G->nmembers, sizeof *reds);
    for (int m = 0; m < G->nmembers; m++) {
        red *r = &reds[m];
        r->mem = &G->members[m];
        r->n = c->s->prog->nodes[r->mem->node];
        if (r->n->kind == PTC_LN_POINTWISE)
            continue;
        r->dt = r->mem->body.e[r->mem->value].dtype;
        r->t = cg_compute_type(c, r->dt);
        red_alloc(c, r, &r->vec, c->lanes);
        red_alloc(c, r, &r->vec2, c->lanes);
        red_alloc(c, r, &r->sc, 1);
        red_init(c, r, &r->vec, c->lanes);
        red_init(c, r, &r->vec2, c->lanes);
        red_init(c, r, &r->sc, 1);
    }
    /* linear reduction index over the group's reduction variables */
    const ptc_ix *ridx = ptc_ix_int(tmp, 0);
    ptc_dim stride = ptc_dim_c(1);
    for (int j = G->nred - 1; j >= 0; j--) {
        ridx = ptc_ix_madd(tmp, ptc_ix_var(tmp, nouter + G->ninner + j, G->red[j]), stride, ridx);
        stride = ptc_dim_mul(tmp, stride, G->red[j]);
    }
    redctx rc = {.G = G, .reds = reds, .ridx = ridx, .scalar_tail = false};
    int cost = 0;
    for (int m = 0; m < G->nmembers; m++) {
        rc.scalar_tail |= reds[m].n->kind == PTC_LN_REDUCTION && reds[m].n->reduce == PTC_RED_WELFORD;
        cost += ptc_lbody_cost(&G->members[m].body, G->members[m].value);
    }
    /* a reduction's accumulator is a loop-carried chain (a compare and a
     * blend for max, an add for sum, several for Welford): with cheap bodies
     * it, not the body, bounds the loop, and two chains run twice as fast */
    rc.unroll = rc.scalar_tail || cost <= UNROLL_COST;
    bool had_vector = false;
    emit_red_loops(c, &rc, 0, &had_vector);
    c->vec_var = -1;
    c->W = 1;
    for (int m = 0; m < G->nmembers; m++)
        if (reds[m].n->kind == PTC_LN_REDUCTION)
            red_store(c, &reds[m], red_final(c, &reds[m], had_vector, rc.unroll, c->lanes));
    free(reds);
}

static void emit_groups(cg *c, ptc_arena *tmp)
{
    const ptc_kernel *k = c->k;
    for (int g = 0; g < k->ngroups; g++) {
        const ptc_kgroup *G = &k->groups[g];
        if (G->reduction) {
            emit_red_group(c, G, 0, tmp);
        } else if (G->ninner == 0) {
            pwctx p = {G, g, g + 1};
            c->vec_var = -1;
            c->W = 1;
            emit_members(c, &p, 1);
        } else {
            emit_pw_inner(c, G, g, 0);
        }
    }
}

/* Outer loops from dimension d on (the parallel ones are already bound). */
static void emit_outer(cg *c, int d, ptc_arena *tmp)
{
    const ptc_kernel *k = c->k;
    if (d == k->nouter) {
        emit_groups(c, tmp);
        return;
    }
    if (kernel_is_flat(k) && d == k->nouter - 1) {
        pwctx p = {NULL, 0, k->ngroups};
        vector_loop(c, d, LLVMConstInt(c->i64, 0, 0), dim_value(c, k->outer[d]), emit_members, &p,
                    NULL, false, false);
        return;
    }
    loop l;
    loop_open(c, &l, LLVMConstInt(c->i64, 0, 0), dim_value(c, k->outer[d]), 1, "outer");
    c->vars[d] = l.iv;
    emit_outer(c, d + 1, tmp);
    loop_close(c, &l);
}

/* ---- the functions -------------------------------------------------------------------- */

static void add_attr(cg *c, LLVMValueRef fn, unsigned idx, const char *name)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    LLVMAddAttributeAtIndex(fn, idx, LLVMCreateEnumAttribute(c->ctx, kind, 0));
}

static void add_str_attr(cg *c, LLVMValueRef fn, const char *k, const char *v)
{
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(c->ctx, k, (unsigned)strlen(k), v,
                                                      (unsigned)strlen(v)));
}

static void vector_attrs(cg *c, LLVMValueRef fn)
{
    char bits[16];
    snprintf(bits, sizeof bits, "%d", c->lanes * 32);
    add_str_attr(c, fn, "min-legal-vector-width", bits);
    add_str_attr(c, fn, "prefer-vector-width", bits);
    add_attr(c, fn, LLVMAttributeFunctionIndex, "nounwind");
}

/* Binds parameters, locals and the outer parallel loop inside the body function. */
static void emit_body_fn(cg *c, ptc_arena *tmp)
{
    const ptc_kernel *k = c->k;
    const ptc_lprog *p = c->s->prog;
    LLVMValueRef begin = LLVMGetParam(c->fn, 0), end = LLVMGetParam(c->fn, 1);
    LLVMValueRef params = c->params = LLVMGetParam(c->fn, 2 + (unsigned)k->nargs);
    for (int i = 0; i < k->nargs; i++)
        c->bufptr[k->args[i]] = LLVMGetParam(c->fn, 2 + (unsigned)i);
    bool flat = kernel_is_flat(k);
    for (int i = 0; i < k->nlocal && !flat; i++) {
        const ptc_lbuf *lb = p->bufs[k->locals[i]];
        int64_t n = 1;
        for (int d = k->nouter; d < lb->ndim; d++)
            n *= lb->shape[d].value;
        LLVMTypeRef at = LLVMArrayType(cg_storage_type(c, lb->dtype), (unsigned)(n > 0 ? n : 1));
        c->bufptr[lb->id] = cg_alloca(c, at, "local");
    }
    c->rng_offset = LLVMBuildLoad2(c->b, c->i64, params, "rng.offset");
    for (int i = 0; i < k->nparams; i++) {
        LLVMValueRef idx = LLVMConstInt(c->i64, (unsigned)(1 + i), 0);
        LLVMValueRef ptr = LLVMBuildInBoundsGEP2(c->b, c->i64, params, &idx, 1, "");
        c->param[i] = LLVMBuildLoad2(c->b, c->i64, ptr, "param");
    }
    c->vec_var = -1;
    c->W = 1;
    if (k->nouter == 0) {
        emit_groups(c, tmp);
    } else if (flat && k->nouter == 1) {
        pwctx pc = {NULL, 0, k->ngroups};
        vector_loop(c, 0, begin, end, emit_members, &pc, NULL, false, false);
    } else {
        loop l;
        loop_open(c, &l, begin, end, 1, "par");
        LLVMValueRef rem = l.iv;
        for (int d = k->npar - 1; d >= 1; d--) {
            LLVMValueRef e = dim_value(c, k->outer[d]);
            c->vars[d] = LLVMBuildURem(c->b, rem, e, "");
            rem = LLVMBuildUDiv(c->b, rem, e, "");
        }
        c->vars[0] = rem;
        emit_outer(c, k->npar, tmp);
        loop_close(c, &l);
    }
    LLVMBuildRetVoid(c->b);
}

int cg_emit_kernel(cg *c, const char *name, ptc_error *err)
{
    const ptc_kernel *k = c->k;
    int nargs = k->nargs;
    LLVMTypeRef *pt = calloc((size_t)nargs + 3, sizeof *pt);
    pt[0] = pt[1] = c->i64;
    for (int i = 0; i < nargs; i++)
        pt[2 + i] = c->ptr;
    pt[2 + nargs] = c->ptr;
    LLVMTypeRef body_t = LLVMFunctionType(c->void_, pt, (unsigned)nargs + 3, 0);
    char bname[96];
    snprintf(bname, sizeof bname, "%s.body", name);
    c->fn = LLVMAddFunction(c->mod, bname, body_t);
    LLVMSetLinkage(c->fn, LLVMInternalLinkage);
    add_attr(c, c->fn, LLVMAttributeFunctionIndex, "alwaysinline");
    vector_attrs(c, c->fn);
    for (int i = 0; i < nargs; i++)
        add_attr(c, c->fn, 3 + (unsigned)i, "noalias");
    c->entry = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "entry");
    LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "start");
    LLVMPositionBuilderAtEnd(c->b, start);
    ptc_arena *tmp = ptc_arena_new();
    emit_body_fn(c, tmp);
    ptc_arena_free(tmp);
    LLVMPositionBuilderAtEnd(c->b, c->entry);
    LLVMBuildBr(c->b, start);

    /* the exported wrapper: (begin, end, bufs, params) */
    LLVMTypeRef wt_params[4] = {c->i64, c->i64, c->ptr, c->ptr};
    LLVMTypeRef wt = LLVMFunctionType(c->void_, wt_params, 4, 0);
    LLVMValueRef wfn = LLVMAddFunction(c->mod, name, wt);
    vector_attrs(c, wfn);
    LLVMBasicBlockRef wb = LLVMAppendBasicBlockInContext(c->ctx, wfn, "entry");
    LLVMPositionBuilderAtEnd(c->b, wb);
    LLVMValueRef *args = calloc((size_t)nargs + 3, sizeof *args);
    args[0] = LLVMGetParam(wfn, 0);
    args[1] = LLVMGetParam(wfn, 1);
    for (int i = 0; i < nargs; i++) {
        LLVMValueRef idx = LLVMConstInt(c->i64, (unsigned)i, 0);
        LLVMValueRef p = LLVMBuildInBoundsGEP2(c->b, c->ptr, LLVMGetParam(wfn, 2), &idx, 1, "");
        args[2 + i] = LLVMBuildLoad2(c->b, c->ptr, p, "");
    }
    args[2 + nargs] = LLVMGetParam(wfn, 3);
    LLVMBuildCall2(c->b, body_t, c->fn, args, (unsigned)nargs + 3, "");
    LLVMBuildRetVoid(c->b);
    free(args);
    free(pt);
    (void)err;
    return 0;
}
