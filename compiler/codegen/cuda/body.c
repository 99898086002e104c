/* Scalar bodies for NVPTX.
 *
 * One thread evaluates a member body for W consecutive elements of its
 * vector variable (W-lane LLVM vectors, which NVPTX splits into scalar
 * instructions, except for loads and stores: a contiguous access whose offset
 * is a multiple of W is one ld.global.v4-style access). W is 1 everywhere but
 * in the vectorised form of flat pointwise kernels. A load whose offset does
 * not vary across the lanes is one scalar load and a splat; anything else is
 * a gather, which LLVM scalarises; masked loads branch around the memory
 * access, so masked-off lanes never touch memory.
 *
 * Index arithmetic uses the kernel's index type (i32 when every offset and
 * range of the kernel fits, i64 otherwise): 64-bit division is a long
 * software sequence on the GPU. Values of f16/bf16 are computed in f32 and
 * rounded at every op as the reference does; bools are i1 in registers and
 * bytes in memory. The semantics of every op follow the CPU emitter
 * (compiler/codegen/cpu/emit.c) exactly, so both backends agree with the
 * reference interpreter.
 */
#include "codegen/cuda/gpu.h"
#include "codegen/llmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- types and constants ----------------------------------------------------- */

LLVMTypeRef g_compute_type(gcg *c, ptc_dtype dt)
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

LLVMTypeRef g_storage_type(gcg *c, ptc_dtype dt)
{
    switch (dt) {
    case PTC_BOOL:
        return c->i8;
    case PTC_F16: /* as bits: LLVM 16's NVPTX miscompiles wide half vectors */
    case PTC_BF16:
        return c->i16;
    default:
        return g_compute_type(c, dt);
    }
}

LLVMTypeRef g_vec(gcg *c, LLVMTypeRef t, int w)
{
    (void)c;
    return w == 1 ? t : LLVMVectorType(t, (unsigned)w);
}

int g_width(LLVMValueRef x)
{
    return ptc_ll_width(x);
}

LLVMValueRef g_splat(gcg *c, LLVMValueRef v, int w)
{
    return ptc_ll_splat(c->b, v, w);
}

LLVMValueRef g_const_f(LLVMTypeRef t, double v, int w)
{
    return ptc_ll_splat_const(LLVMConstReal(t, v), w);
}

LLVMValueRef g_const_i(LLVMTypeRef t, int64_t v, int w)
{
    return ptc_ll_splat_const(LLVMConstInt(t, (unsigned long long)v, 1), w);
}

static bool is_float(ptc_dtype dt)
{
    return ptc_dtype_is_float(dt);
}
static bool is_unsigned(ptc_dtype dt)
{
    return dt == PTC_U8 || dt == PTC_BOOL;
}

LLVMValueRef g_kconst(gcg *c, ptc_dtype dt, double f, int64_t i, int w)
{
    LLVMTypeRef t = g_compute_type(c, dt);
    return is_float(dt) ? g_const_f(t, f, w) : g_const_i(t, i, w);
}

LLVMValueRef g_intrinsic(gcg *c, const char *name, LLVMTypeRef *over, int nover, LLVMValueRef *args,
                         int nargs)
{
    return ptc_ll_intrinsic(c->mod, c->b, name, over, nover, args, nargs);
}

LLVMValueRef g_alloca(gcg *c, LLVMTypeRef t, const char *name)
{
    return ptc_ll_alloca(c->b, c->entry, t, name);
}

/* ---- sizes and index expressions ---------------------------------------------- */

LLVMValueRef g_dim(gcg *c, ptc_dim d)
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

/* Does x vary across the lanes being emitted? */
static bool ix_varies(gcg *c, const ptc_ix *x, LLVMValueRef *vals)
{
    if (c->W == 1)
        return false;
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        if (at->kind == PTC_IXA_VAR && at->id == c->vec_var)
            return true;
        if (at->kind == PTC_IXA_VAL && g_width(vals[at->id]) > 1)
            return true;
        if ((at->kind == PTC_IXA_DIV || at->kind == PTC_IXA_MOD) && ix_varies(c, at->x, vals))
            return true;
    }
    return false;
}

static LLVMValueRef lane_iota(gcg *c, int w)
{
    LLVMValueRef ks[16];
    for (int i = 0; i < w; i++)
        ks[i] = LLVMConstInt(c->ix, (unsigned)i, 0);
    return LLVMConstVector(ks, (unsigned)w);
}

static LLVMValueRef to_index(gcg *c, LLVMValueRef v)
{
    LLVMTypeRef t = LLVMTypeOf(v);
    int w = g_width(v);
    LLVMTypeRef et = w > 1 ? LLVMGetElementType(t) : t;
    if (et == c->ix)
        return v;
    LLVMTypeRef to = g_vec(c, c->ix, w);
    unsigned bits = LLVMGetIntTypeWidth(et), ib = LLVMGetIntTypeWidth(c->ix);
    if (bits == 1)
        return LLVMBuildZExt(c->b, v, to, "");
    if (bits > ib)
        return LLVMBuildTrunc(c->b, v, to, "");
    return LLVMBuildSExt(c->b, v, to, "");
}

static LLVMValueRef atom_emit(gcg *c, const ptc_ixatom *at, LLVMValueRef *vals, int w)
{
    LLVMBuilderRef b = c->b;
    switch (at->kind) {
    case PTC_IXA_VAR: {
        LLVMValueRef v = c->vars[at->id];
        PTC_ASSERT(v != NULL);
        if (w > 1 && at->id == c->vec_var)
            return LLVMBuildNSWAdd(b, g_splat(c, v, w), lane_iota(c, w), "");
        return g_splat(c, v, w);
    }
    case PTC_IXA_VAL:
        return g_splat(c, to_index(c, vals[at->id]), w);
    default: {
        LLVMValueRef x = g_ix(c, at->x, vals, w);
        LLVMValueRef d = g_splat(c, g_dim(c, at->d), w);
        ptc_arena *tmp = ptc_arena_new();
        ptc_dim mx;
        bool nonneg = ptc_ix_max(tmp, at->x, &mx);
        ptc_arena_free(tmp);
        if (nonneg)
            return at->kind == PTC_IXA_DIV ? LLVMBuildUDiv(b, x, d, "")
                                           : LLVMBuildURem(b, x, d, "");
        /* floor semantics for possibly negative operands (divisor > 0) */
        LLVMValueRef q = LLVMBuildSDiv(b, x, d, ""), r = LLVMBuildSRem(b, x, d, "");
        LLVMValueRef zero = g_const_i(c->ix, 0, w);
        LLVMValueRef adj = LLVMBuildICmp(b, LLVMIntSLT, r, zero, "");
        if (at->kind == PTC_IXA_DIV)
            return LLVMBuildSub(b, q, LLVMBuildZExt(b, adj, g_vec(c, c->ix, w), ""), "");
        return LLVMBuildSelect(b, adj, LLVMBuildAdd(b, r, d, ""), r, "");
    }
    }
}

LLVMValueRef g_ix(gcg *c, const ptc_ix *x, LLVMValueRef *vals, int w)
{
    LLVMValueRef acc = g_splat(c, g_dim(c, x->constant), w);
    for (int i = 0; i < x->nterms; i++) {
        LLVMValueRef a = atom_emit(c, x->terms[i].atom, vals, w);
        if (!dim_is(x->terms[i].coeff, 1))
            a = LLVMBuildNSWMul(c->b, a, g_splat(c, g_dim(c, x->terms[i].coeff), w), "");
        acc = LLVMBuildNSWAdd(c->b, acc, a, "");
    }
    return acc;
}

/* Inline PTX `code` applied lane by lane to x (and y when given). */
static LLVMValueRef asm_lanes(gcg *c, const char *code, const char *cons, LLVMTypeRef rt,
                              LLVMValueRef x, LLVMValueRef y)
{
    LLVMBuilderRef b = c->b;
    int w = g_width(x);
    LLVMTypeRef xt = w > 1 ? LLVMGetElementType(LLVMTypeOf(x)) : LLVMTypeOf(x);
    LLVMTypeRef params[2] = {xt, xt};
    LLVMTypeRef ft = LLVMFunctionType(rt, params, y ? 2 : 1, 0);
    LLVMValueRef fn = LLVMGetInlineAsm(ft, (char *)code, strlen(code), (char *)cons, strlen(cons),
                                       0, 0, LLVMInlineAsmDialectATT, 0);
    /* memory(none) nounwind willreturn: a pure conversion that CSE may merge */
    unsigned mem = LLVMGetEnumAttributeKindForName("memory", 6);
    unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
    unsigned willreturn = LLVMGetEnumAttributeKindForName("willreturn", 10);
    LLVMValueRef out = w > 1 ? LLVMGetPoison(g_vec(c, rt, w)) : NULL;
    for (int i = 0; i < w; i++) {
        LLVMValueRef lane = LLVMConstInt(c->i32, (unsigned)i, 0);
        LLVMValueRef a[2] = {w > 1 ? LLVMBuildExtractElement(b, x, lane, "") : x,
                             y && w > 1 ? LLVMBuildExtractElement(b, y, lane, "") : y};
        LLVMValueRef call = LLVMBuildCall2(b, ft, fn, a, y ? 2 : 1, "");
        LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex,
                                 LLVMCreateEnumAttribute(c->ctx, mem, 0));
        LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex,
                                 LLVMCreateEnumAttribute(c->ctx, nounwind, 0));
        LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex,
                                 LLVMCreateEnumAttribute(c->ctx, willreturn, 0));
        if (w == 1)
            return call;
        out = LLVMBuildInsertElement(b, out, call, lane, "");
    }
    return out;
}

/* ---- storage conversions -------------------------------------------------------- */

LLVMValueRef g_from_storage(gcg *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    LLVMBuilderRef b = c->b;
    switch (dt) {
    case PTC_BOOL:
        return LLVMBuildICmp(b, LLVMIntNE, v, g_const_i(c->i8, 0, w), "");
    case PTC_F16:
        return asm_lanes(c, "cvt.f32.f16 $0, $1;", "=f,h", c->f32, v, NULL);
    case PTC_BF16: {
        if (c->sm >= 90)
            return asm_lanes(c, "cvt.f32.bf16 $0, $1;", "=f,h", c->f32, v, NULL);
        return ptc_ll_bf16_bits_to_f32(b, v);
    }
    default:
        return v;
    }
}

/* f32 -> bf16 bits, round to nearest even. sm_80 and later convert in one
 * instruction (cvt.rn.bf16.f32, as inline PTX: LLVM 16's NVPTX has no bfloat
 * conversions); older targets use integer arithmetic, nan quieted as
 * ptc_f32_to_bf16 does. */
static LLVMValueRef to_bf16(gcg *c, LLVMValueRef v)
{
    if (c->sm >= 80)
        return asm_lanes(c, "cvt.rn.bf16.f32 $0, $1;", "=h,f", c->i16, v, NULL);
    return ptc_ll_f32_to_bf16_bits(c->b, v);
}

LLVMValueRef g_to_storage(gcg *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    LLVMBuilderRef b = c->b;
    switch (dt) {
    case PTC_BOOL:
        return LLVMBuildZExt(b, v, g_vec(c, c->i8, w), "");
    case PTC_F16:
        return asm_lanes(c, "cvt.rn.f16.f32 $0, $1;", "=h,f", c->i16, v, NULL);
    case PTC_BF16:
        return to_bf16(c, v);
    default:
        return v;
    }
}

/* Rounds an f32 value to f16 / bf16 precision (a cast in the body); for
 * bf16 on sm_80+ one instruction: the upper half of cvt.rn.bf16x2 of (v, 0)
 * is the rounded value's f32 bit pattern. */
static LLVMValueRef round_to(gcg *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    if (dt != PTC_F16 && dt != PTC_BF16)
        return v;
    if (dt == PTC_BF16 && c->sm >= 80) {
        LLVMValueRef r = asm_lanes(c, "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f", c->i32, v,
                                   g_const_f(c->f32, 0, w));
        return LLVMBuildBitCast(c->b, r, g_vec(c, c->f32, w), "");
    }
    if (dt == PTC_F16)
        return asm_lanes(c, "{ .reg .b16 t; cvt.rn.f16.f32 t, $1; cvt.f32.f16 $0, t; }", "=f,f",
                         c->f32, v, NULL);
    return g_from_storage(c, g_to_storage(c, v, dt, w), dt, w);
}

/* ---- loads and stores ------------------------------------------------------------- */

enum { ACC_UNIFORM, ACC_CONTIG, ACC_GATHER };

static int access_kind(gcg *c, const ptc_ix *off, LLVMValueRef *vals)
{
    if (!ix_varies(c, off, vals))
        return ACC_UNIFORM;
    bool nested;
    ptc_dim k = ptc_ix_coeff(off, c->vec_var, &nested);
    for (int i = 0; i < off->nterms; i++)
        if (off->terms[i].atom->kind == PTC_IXA_VAL && g_width(vals[off->terms[i].atom->id]) > 1)
            return ACC_GATHER;
    return !nested && dim_is(k, 1) ? ACC_CONTIG : ACC_GATHER;
}

/* Is a contiguous access at `off` aligned to W elements? The vector variable
 * starts every thread's lanes at a multiple of W, so every other term and the
 * constant must be multiples of W (the base pointer's alignment is checked
 * at launch). */
static bool aligned_w(const ptc_ix *off, int vec_var, int w)
{
    if (!ptc_dim_is_static(off->constant) || off->constant.value % w)
        return false;
    for (int i = 0; i < off->nterms; i++) {
        const ptc_ixatom *at = off->terms[i].atom;
        if (at->kind == PTC_IXA_VAR && at->id == vec_var)
            continue;
        ptc_dim k = off->terms[i].coeff;
        if (!ptc_dim_is_static(k) || k.value % w)
            return false;
    }
    return true;
}

/* The launcher must check that buf's base is aligned to `align` bytes. */
static void note_alignment(gcg *c, int buf, unsigned align)
{
    if (c->bufspace[buf] == 1 && align > c->bufalign[buf])
        c->bufalign[buf] = (uint8_t)align;
}

static LLVMValueRef gep(gcg *c, LLVMTypeRef st, int bufid, LLVMValueRef off)
{
    LLVMValueRef base = c->bufptr[bufid];
    PTC_ASSERT(base != NULL);
    return LLVMBuildInBoundsGEP2(c->b, st, base, &off, 1, "");
}

/* A scalar load, branching around it when a mask is given. */
static LLVMValueRef scalar_load(gcg *c, int bufid, LLVMTypeRef st, unsigned align, LLVMValueRef off,
                                LLVMValueRef mask)
{
    LLVMBuilderRef b = c->b;
    if (!mask) {
        LLVMValueRef v = LLVMBuildLoad2(b, st, gep(c, st, bufid, off), "");
        LLVMSetAlignment(v, align);
        return v;
    }
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "mload");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "mjoin");
    LLVMBuildCondBr(b, mask, then, join);
    LLVMPositionBuilderAtEnd(b, then);
    LLVMValueRef v = LLVMBuildLoad2(b, st, gep(c, st, bufid, off), "");
    LLVMSetAlignment(v, align);
    LLVMBuildBr(b, join);
    LLVMPositionBuilderAtEnd(b, join);
    LLVMValueRef phi = LLVMBuildPhi(b, st, "");
    LLVMValueRef zero = LLVMConstNull(st);
    LLVMBasicBlockRef from[2] = {then, pre};
    LLVMValueRef vals[2] = {v, zero};
    LLVMAddIncoming(phi, vals, from, 2);
    return phi;
}

static LLVMValueRef emit_load(gcg *c, const ptc_lexpr *e, LLVMValueRef *vals, int w)
{
    LLVMBuilderRef b = c->b;
    const ptc_lbuf *buf = c->s->prog->bufs[e->buf];
    LLVMTypeRef st = g_storage_type(c, buf->dtype);
    unsigned esize = (unsigned)ptc_dtype_size(buf->dtype);
    LLVMValueRef mask = e->arg[0] >= 0 ? vals[e->arg[0]] : NULL;
    int kind = w == 1 ? ACC_UNIFORM : access_kind(c, e->idx[0], vals);
    LLVMValueRef raw;
    if (kind == ACC_UNIFORM && (!mask || g_width(mask) == 1)) {
        raw = g_splat(c, scalar_load(c, e->buf, st, esize, g_ix(c, e->idx[0], vals, 1), mask), w);
    } else if (kind == ACC_CONTIG && !mask) {
        LLVMValueRef p = gep(c, st, e->buf, g_ix(c, e->idx[0], vals, 1));
        raw = LLVMBuildLoad2(b, g_vec(c, st, w), p, "");
        bool al = c->vector_form && aligned_w(e->idx[0], c->vec_var, w);
        LLVMSetAlignment(raw, al ? esize * (unsigned)w : esize);
        if (al)
            note_alignment(c, e->buf, esize * (unsigned)w);
    } else {
        /* lane by lane (LLVM scalarises the gather into branches per lane) */
        LLVMValueRef off = g_ix(c, e->idx[0], vals, w);
        LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, st, c->bufptr[e->buf], &off, 1, "");
        LLVMTypeRef vt = g_vec(c, st, w);
        LLVMTypeRef over[2] = {vt, LLVMTypeOf(ptrs)};
        LLVMValueRef m = mask ? g_splat(c, mask, w) : g_const_i(c->i1, 1, w);
        LLVMValueRef args[4] = {ptrs, LLVMConstInt(c->i32, esize, 0), m, LLVMConstNull(vt)};
        raw = g_intrinsic(c, "llvm.masked.gather", over, 2, args, 4);
    }
    LLVMValueRef v = g_from_storage(c, raw, buf->dtype, w);
    if (mask)
        v = LLVMBuildSelect(b, g_splat(c, mask, w), v, g_kconst(c, e->dtype, e->fval, e->ival, w),
                            "");
    return v;
}

/* A load through the row cache when one is active: read-only buffers only
 * (nothing in the kernel writes them), unmasked loads only. */
static LLVMValueRef cached_load(gcg *c, const ptc_lexpr *e, LLVMValueRef *vals, int w)
{
    gcache *ca = c->cache;
    bool ok = ca && e->arg[0] < 0 && !c->written[e->buf] && !ptc_ix_uses_val(e->idx[0]);
    for (int k = 0; ok && k < ca->n; k++)
        if (ca->e[k].buf == e->buf && ca->e[k].j == c->cache_j && ca->e[k].w == w &&
            ptc_ix_eq(ca->e[k].off, e->idx[0]))
            return ca->e[k].val;
    LLVMValueRef v = emit_load(c, e, vals, w);
    if (ok && ca->n < (int)(sizeof ca->e / sizeof ca->e[0])) {
        ca->e[ca->n].buf = e->buf;
        ca->e[ca->n].j = c->cache_j;
        ca->e[ca->n].w = w;
        ca->e[ca->n].off = e->idx[0];
        ca->e[ca->n++].val = v;
    }
    return v;
}

void g_store(gcg *c, int bufid, const ptc_ix *off, LLVMValueRef v, LLVMValueRef *vals, int w)
{
    LLVMBuilderRef b = c->b;
    const ptc_lbuf *buf = c->s->prog->bufs[bufid];
    LLVMTypeRef st = g_storage_type(c, buf->dtype);
    unsigned esize = (unsigned)ptc_dtype_size(buf->dtype);
    LLVMValueRef raw = g_to_storage(c, g_splat(c, v, w), buf->dtype, w);
    int kind = w == 1 ? ACC_CONTIG : access_kind(c, off, vals);
    if (kind == ACC_CONTIG) {
        LLVMValueRef p = gep(c, st, bufid, g_ix(c, off, vals, 1));
        LLVMValueRef s = LLVMBuildStore(b, raw, p);
        bool al = w > 1 && c->vector_form && aligned_w(off, c->vec_var, w);
        LLVMSetAlignment(s, al ? esize * (unsigned)w : esize);
        if (al)
            note_alignment(c, bufid, esize * (unsigned)w);
        return;
    }
    /* scatter (lanes storing to one place: the last one wins) */
    LLVMValueRef o = g_ix(c, off, vals, w);
    LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, st, c->bufptr[bufid], &o, 1, "");
    LLVMTypeRef over[2] = {LLVMTypeOf(raw), LLVMTypeOf(ptrs)};
    LLVMValueRef args[4] = {raw, ptrs, LLVMConstInt(c->i32, esize, 0), g_const_i(c->i1, 1, w)};
    g_intrinsic(c, "llvm.masked.scatter", over, 2, args, 4);
}

/* ---- arithmetic ------------------------------------------------------------------------ */

static LLVMValueRef emit_cast(gcg *c, LLVMValueRef v, ptc_dtype from, ptc_dtype to, int w)
{
    LLVMBuilderRef b = c->b;
    LLVMTypeRef tt = g_vec(c, g_compute_type(c, to), w);
    if (to == PTC_BOOL) {
        if (is_float(from))
            return LLVMBuildFCmp(b, LLVMRealUNE, v, g_kconst(c, from, 0, 0, w), "");
        return LLVMBuildICmp(b, LLVMIntNE, v, g_kconst(c, from, 0, 0, w), "");
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
    unsigned fb = LLVMGetIntTypeWidth(g_compute_type(c, from)),
             tb = LLVMGetIntTypeWidth(g_compute_type(c, to));
    if (fb == tb)
        return v;
    if (fb > tb)
        return LLVMBuildTrunc(b, v, tt, "");
    return is_unsigned(from) ? LLVMBuildZExt(b, v, tt, "") : LLVMBuildSExt(b, v, tt, "");
}

static LLVMValueRef fcall1(gcg *c, const char *intr, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    return g_intrinsic(c, intr, &t, 1, &x, 1);
}

LLVMValueRef g_isnan(gcg *c, LLVMValueRef x)
{
    return ptc_ll_isnan(c->b, x);
}

static LLVMValueRef emit_unary(gcg *c, int op, ptc_dtype dt, LLVMValueRef x, int w)
{
    LLVMBuilderRef b = c->b;
    bool f = is_float(dt);
    switch (op) {
    case PTC_L_ABS:
        if (f)
            return fcall1(c, "llvm.fabs", x);
        if (is_unsigned(dt))
            return x;
        return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, x, g_kconst(c, dt, 0, 0, w), ""),
                               LLVMBuildNeg(b, x, ""), x, "");
    case PTC_L_NEG:
        return f ? LLVMBuildFNeg(b, x, "") : LLVMBuildNeg(b, x, "");
    case PTC_L_EXP:
        return g_exp(c, x);
    case PTC_L_LOG:
        return g_log(c, x);
    case PTC_L_TANH:
        return g_tanh(c, x);
    case PTC_L_ERF:
        return g_erf(c, x);
    case PTC_L_LOG1P:
        return g_log1p(c, x);
    case PTC_L_EXPM1:
        return g_expm1(c, x);
    case PTC_L_SIN:
        return g_sin(c, x);
    case PTC_L_COS:
        return g_cos(c, x);
    case PTC_L_SQRT:
        return fcall1(c, "llvm.sqrt", x);
    case PTC_L_RSQRT:
        return LLVMBuildFDiv(b, g_kconst(c, dt, 1, 1, w), fcall1(c, "llvm.sqrt", x), "");
    case PTC_L_RECIPROCAL:
        return LLVMBuildFDiv(b, g_kconst(c, dt, 1, 1, w), x, "");
    case PTC_L_FLOOR:
        return f ? fcall1(c, "llvm.floor", x) : x;
    case PTC_L_CEIL:
        return f ? fcall1(c, "llvm.ceil", x) : x;
    case PTC_L_ROUND:
        return f ? fcall1(c, "llvm.roundeven", x) : x;
    case PTC_L_TRUNC:
        return f ? fcall1(c, "llvm.trunc", x) : x;
    case PTC_L_SIGN: {
        LLVMValueRef zero = g_kconst(c, dt, 0, 0, w);
        if (dt == PTC_BOOL)
            return x;
        LLVMValueRef pos =
            f ? LLVMBuildFCmp(b, LLVMRealOGT, x, zero, "")
              : LLVMBuildICmp(b, is_unsigned(dt) ? LLVMIntUGT : LLVMIntSGT, x, zero, "");
        LLVMValueRef neg = f ? LLVMBuildFCmp(b, LLVMRealOLT, x, zero, "")
                             : LLVMBuildICmp(b, LLVMIntSLT, x, zero, "");
        LLVMValueRef r = LLVMBuildSelect(b, neg, g_kconst(c, dt, -1, -1, w), zero, "");
        r = LLVMBuildSelect(b, pos, g_kconst(c, dt, 1, 1, w), r, "");
        return f ? LLVMBuildSelect(b, g_isnan(c, x), x, r, "") : r;
    }
    case PTC_L_BITWISE_NOT:
        return LLVMBuildNot(b, x, "");
    case PTC_L_LOGICAL_NOT:
        return LLVMBuildNot(b, emit_cast(c, x, dt, PTC_BOOL, w), "");
    case PTC_L_ISNAN:
        return f ? g_isnan(c, x) : g_const_i(c->i1, 0, w);
    default:
        PTC_ASSERT(!"not a unary op");
    }
}

/* Integer power by squaring (a loop; exponents are small in practice). */
static LLVMValueRef ipow_scalar(gcg *c, LLVMValueRef base0, LLVMValueRef e0, ptc_dtype dt)
{
    LLVMBuilderRef b = c->b;
    LLVMTypeRef t = g_compute_type(c, dt);
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "ipow");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "ipow.body");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "ipow.done");
    LLVMValueRef one = LLVMConstInt(t, 1, 0), zero = LLVMConstInt(t, 0, 0);
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, head);
    LLVMValueRef r = LLVMBuildPhi(b, t, ""), bs = LLVMBuildPhi(b, t, ""),
                 e = LLVMBuildPhi(b, t, "");
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
    LLVMValueRef oddx = LLVMBuildTrunc(b, e0, c->i1, "");
    LLVMValueRef negv = LLVMBuildSelect(
        b, one_b, one, LLVMBuildSelect(b, m1, LLVMBuildSelect(b, oddx, base0, one, ""), zero, ""),
        "");
    return LLVMBuildSelect(b, neg, negv, r, "");
}

static LLVMValueRef ipow(gcg *c, LLVMValueRef x, LLVMValueRef y, ptc_dtype dt)
{
    int w = g_width(x);
    if (w == 1)
        return ipow_scalar(c, x, y, dt);
    LLVMValueRef out = LLVMGetPoison(LLVMTypeOf(x));
    for (int i = 0; i < w; i++) {
        LLVMValueRef lane = LLVMConstInt(c->i32, (unsigned)i, 0);
        LLVMValueRef r = ipow_scalar(c, LLVMBuildExtractElement(c->b, x, lane, ""),
                                     LLVMBuildExtractElement(c->b, y, lane, ""), dt);
        out = LLVMBuildInsertElement(c->b, out, r, lane, "");
    }
    return out;
}

/* fmod(x, y), exact: the quotient is truncated, x - q*y is formed with one
 * rounding (exact when q is right: fmod results are representable) and q is
 * nudged by one when the rounded division landed on the wrong integer. f32
 * works in f64, where the product q*y is exact. */
static LLVMValueRef fmod_(gcg *c, LLVMValueRef x, LLVMValueRef y)
{
    LLVMBuilderRef b = c->b;
    LLVMTypeRef t = LLVMTypeOf(x);
    int w = g_width(x);
    bool f32 = (w > 1 ? LLVMGetElementType(t) : t) == c->f32;
    LLVMTypeRef dt = g_vec(c, c->f64, w);
    LLVMValueRef xd = f32 ? LLVMBuildFPExt(b, x, dt, "") : x;
    LLVMValueRef yd = f32 ? LLVMBuildFPExt(b, y, dt, "") : y;
    LLVMTypeRef wt = LLVMTypeOf(xd);
    LLVMValueRef ay = fcall1(c, "llvm.fabs", yd);
    LLVMValueRef q = fcall1(c, "llvm.trunc", LLVMBuildFDiv(b, xd, yd, ""));
    LLVMValueRef args[3] = {LLVMBuildFNeg(b, q, ""), yd, xd};
    LLVMValueRef r = g_intrinsic(c, "llvm.fma", &wt, 1, args, 3);
    LLVMValueRef zero = LLVMConstNull(wt);
    /* q one too large: r has the other sign; one too small: |r| >= |y| */
    LLVMValueRef cs1[2] = {ay, xd};
    LLVMValueRef sy = g_intrinsic(c, "llvm.copysign", &wt, 1, cs1, 2);
    LLVMValueRef flip = LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealONE, r, zero, ""),
                                     LLVMBuildXor(b, LLVMBuildFCmp(b, LLVMRealOLT, r, zero, ""),
                                                  LLVMBuildFCmp(b, LLVMRealOLT, xd, zero, ""), ""),
                                     "");
    r = LLVMBuildSelect(b, flip, LLVMBuildFAdd(b, r, sy, ""), r, "");
    LLVMValueRef over = LLVMBuildFCmp(b, LLVMRealOGE, fcall1(c, "llvm.fabs", r), ay, "");
    r = LLVMBuildSelect(b, over, LLVMBuildFSub(b, r, sy, ""), r, "");
    /* the result has the sign of x (0 keeps x's sign); inf or nan: nan */
    LLVMValueRef cs[2] = {r, xd};
    r = g_intrinsic(c, "llvm.copysign", &wt, 1, cs, 2);
    LLVMValueRef bad = LLVMBuildFCmp(b, LLVMRealUEQ, fcall1(c, "llvm.fabs", xd),
                                     g_const_f(c->f64, INFINITY, w), "");
    bad = LLVMBuildOr(b, bad, LLVMBuildFCmp(b, LLVMRealUEQ, yd, zero, ""), "");
    r = LLVMBuildSelect(b, bad, g_const_f(c->f64, NAN, w), r, "");
    /* y infinite, x finite: x itself */
    LLVMValueRef yinf = LLVMBuildFCmp(b, LLVMRealOEQ, ay, g_const_f(c->f64, INFINITY, w), "");
    LLVMValueRef xfin = LLVMBuildFCmp(b, LLVMRealOLT, fcall1(c, "llvm.fabs", xd),
                                      g_const_f(c->f64, INFINITY, w), "");
    r = LLVMBuildSelect(b, LLVMBuildAnd(b, yinf, xfin, ""), xd, r, "");
    return f32 ? LLVMBuildFPTrunc(b, r, t, "") : r;
}

static LLVMValueRef emit_pow(gcg *c, ptc_dtype dt, LLVMValueRef x, LLVMValueRef y,
                             const ptc_lexpr *ye)
{
    if (!is_float(dt))
        return ipow(c, x, y, dt);
    LLVMValueRef short_form =
        ye && ye->op == PTC_L_CONST ? ptc_ll_pow_const(c->mod, c->b, x, ye->fval) : NULL;
    return short_form ? short_form : g_pow(c, x, y);
}

LLVMValueRef g_minmax(gcg *c, bool max, ptc_dtype dt, LLVMValueRef x, LLVMValueRef y)
{
    return ptc_ll_minmax(c->b, max, dt, x, y);
}

static LLVMValueRef emit_binary(gcg *c, const ptc_lbody *body, const ptc_lexpr *e, LLVMValueRef x,
                                LLVMValueRef y, int w)
{
    LLVMBuilderRef b = c->b;
    ptc_dtype dt = body->e[e->arg[0]].dtype; /* operand dtype */
    bool f = is_float(dt);
    LLVMValueRef r;
    switch (e->op) {
    case PTC_L_ADD:
        r = f                ? LLVMBuildFAdd(b, x, y, "")
            : dt == PTC_BOOL ? LLVMBuildOr(b, x, y, "")
                             : LLVMBuildAdd(b, x, y, "");
        break;
    case PTC_L_SUB:
        r = f                ? LLVMBuildFSub(b, x, y, "")
            : dt == PTC_BOOL ? LLVMBuildXor(b, x, y, "")
                             : LLVMBuildSub(b, x, y, "");
        break;
    case PTC_L_MUL:
        r = f                ? LLVMBuildFMul(b, x, y, "")
            : dt == PTC_BOOL ? LLVMBuildAnd(b, x, y, "")
                             : LLVMBuildMul(b, x, y, "");
        break;
    case PTC_L_DIV:
        r = f ? LLVMBuildFDiv(b, x, y, "") : ptc_ll_int_divmod(b, e->op, is_unsigned(dt), x, y);
        break;
    case PTC_L_FLOOR_DIVIDE:
    case PTC_L_REMAINDER:
        r = f ? ptc_ll_float_floordiv_rem(c->mod, b, e->op, x, y, fmod_(c, x, y))
              : ptc_ll_int_divmod(b, e->op, is_unsigned(dt), x, y);
        break;
    case PTC_L_POW:
        r = emit_pow(c, dt, x, y, &body->e[e->arg[1]]);
        break;
    case PTC_L_MAXIMUM:
        r = g_minmax(c, true, dt, x, y);
        break;
    case PTC_L_MINIMUM:
        r = g_minmax(c, false, dt, x, y);
        break;
    case PTC_L_ATAN2:
        r = g_atan2(c, x, y);
        break;
    case PTC_L_BITWISE_AND:
        r = LLVMBuildAnd(b, x, y, "");
        break;
    case PTC_L_BITWISE_OR:
        r = LLVMBuildOr(b, x, y, "");
        break;
    case PTC_L_BITWISE_XOR:
        r = LLVMBuildXor(b, x, y, "");
        break;
    default:
        return ptc_ll_compare(b, e->op, dt, x, y);
    }
    if (f && dt != PTC_F32 && dt != PTC_F64)
        r = round_to(c, r, dt, w); /* torch rounds f16/bf16 results per op */
    return r;
}

/* ---- bodies ------------------------------------------------------------------------------ */

void g_fwd_add(gfwd *fw, int buf, const ptc_ix *off, LLVMValueRef v)
{
    if (fw->n >= 64)
        return;
    fw->buf[fw->n] = buf;
    fw->off[fw->n] = off;
    fw->val[fw->n++] = v;
}

static LLVMValueRef status_ptr(void *ctx)
{
    gcg *c = ctx;
    PTC_ASSERT(c->status != NULL);
    return LLVMBuildIntToPtr(c->b, c->status, c->gptr, "status");
}

LLVMValueRef *g_body(gcg *c, const ptc_lbody *body, int w, const gfwd *fw)
{
    LLVMValueRef *v = calloc((size_t)body->n + 1, sizeof *v);
    LLVMBuilderRef b = c->b;
    for (int i = 0; i < body->n; i++) {
        const ptc_lexpr *e = &body->e[i];
        LLVMValueRef x = e->arg[0] >= 0 ? v[e->arg[0]] : NULL;
        LLVMValueRef y = e->arg[1] >= 0 ? v[e->arg[1]] : NULL;
        switch (e->op) {
        case PTC_L_LOAD: {
            LLVMValueRef hit = NULL;
            for (int k = 0; fw && k < fw->n && !hit; k++)
                if (fw->buf[k] == e->buf && ptc_ix_eq(fw->off[k], e->idx[0]))
                    hit = g_splat(c, fw->val[k], w);
            if (hit && e->arg[0] >= 0)
                hit = LLVMBuildSelect(b, g_splat(c, v[e->arg[0]], w), hit,
                                      g_kconst(c, e->dtype, e->fval, e->ival, w), "");
            v[i] = hit ? hit : cached_load(c, e, v, w);
            break;
        }
        case PTC_L_CONST:
            v[i] = g_kconst(c, e->dtype, e->fval, e->ival, w);
            break;
        case PTC_L_INDEX: {
            LLVMValueRef ix = g_ix(c, e->ix, v, w);
            LLVMTypeRef t = g_vec(c, c->i64, w);
            v[i] = c->ix == c->i64 ? ix : LLVMBuildSExt(b, ix, t, "");
            break;
        }
        case PTC_L_RAND:
        case PTC_L_RANDN: {
            LLVMValueRef key = g_rng_key(c, e->seed);
            LLVMValueRef idx = g_ix(c, e->ix, v, w);
            if (c->ix != c->i64)
                idx = LLVMBuildSExt(b, idx, g_vec(c, c->i64, w), "");
            LLVMValueRef u =
                e->op == PTC_L_RAND ? g_rng_uniform(c, key, idx) : g_randn(c, key, idx);
            v[i] = emit_cast(c, u, PTC_F32, e->dtype, w);
            break;
        }
        case PTC_L_CAST:
            v[i] = emit_cast(c, x, body->e[e->arg[0]].dtype, e->dtype, w);
            break;
        case PTC_L_WHERE:
            v[i] = LLVMBuildSelect(b, x, y, v[e->arg[2]], "");
            break;
        case PTC_L_CHECK:
            v[i] = ptc_ll_check(c->mod, b, e->ival, v[e->arg[0]], v[e->arg[1]], v[e->arg[2]],
                                status_ptr, c);
            break;
        default:
            if (ptc_lop_arity(e->op) == 1) {
                v[i] = emit_unary(c, e->op, body->e[e->arg[0]].dtype, x, w);
                if (is_float(e->dtype) && e->dtype != PTC_F32 && e->dtype != PTC_F64 &&
                    e->op != PTC_L_ISNAN)
                    v[i] = round_to(c, v[i], e->dtype, w);
            } else {
                v[i] = emit_binary(c, body, e, x, y, w);
            }
            break;
        }
        v[i] = g_splat(c, v[i], w);
    }
    return v;
}
