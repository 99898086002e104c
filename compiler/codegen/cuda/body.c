/* What the scalar-body emitter (codegen/body.c) asks of NVPTX: loads,
 * stores and f16/bf16 conversions, fmod, the math functions, and the checks'
 * status record.
 *
 * One thread evaluates a member body for W consecutive elements of its
 * vector variable (W-lane LLVM vectors, which NVPTX splits into scalar
 * instructions, except for loads and stores: a contiguous access whose offset
 * is a multiple of W is one ld.global.v4-style access). W is 1 everywhere but
 * in the vectorised form of flat pointwise kernels. A load whose offset does
 * not vary across the lanes is one scalar load and a splat; anything else is
 * a gather, which LLVM scalarises; masked loads branch around the memory
 * access, so masked-off lanes never touch memory. A masked contiguous load
 * is still one vector load wherever every lane's mask is on, and a gather
 * only in the vectors that straddle the mask's edge (masked_contig_load).
 *
 * f16/bf16 values are kept in memory as i16 bits. bf16 widens to f32 by a
 * shift, which LLVM folds into the 32-bit words of a vector load (one
 * instruction per lane); the other conversions are PTX cvt instructions
 * (inline assembly: LLVM 16's NVPTX has no bfloat conversions and
 * miscompiles wide half vectors). Their rounding after each op is one
 * instruction where the target has it, and a store converts pairs of lanes
 * from the unrounded values (half_to_storage).
 */
#include "codegen/cuda/gpu.h"
#include "codegen/llmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static gcg *gpu_of(ptc_emitter *em)
{
    return (gcg *)em;
}

/* ---- types and constants ----------------------------------------------------- */

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

LLVMValueRef g_intrinsic(gcg *c, const char *name, LLVMTypeRef *over, int nover, LLVMValueRef *args,
                         int nargs)
{
    return ptc_ll_intrinsic(c->mod, c->b, name, over, nover, args, nargs);
}

LLVMValueRef g_alloca(gcg *c, LLVMTypeRef t, const char *name)
{
    return ptc_ll_alloca(c->b, c->entry, t, name);
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

/* ---- f16 / bf16 conversions -------------------------------------------------------- */

static LLVMValueRef half_from_storage(ptc_emitter *em, LLVMValueRef v, ptc_dtype dt, int w)
{
    gcg *c = gpu_of(em);
    (void)w;
    if (dt == PTC_F16)
        return asm_lanes(c, "cvt.f32.f16 $0, $1;", "=f,h", c->f32, v, NULL);
    return ptc_ll_bf16_bits_to_f32(c->b, v);
}

/* The f32 value that half_round rounded to v (v itself if none). */
static LLVMValueRef before_rounding(gcg *c, LLVMValueRef v)
{
    int n = c->rounded.n < ROUNDED_MAX ? c->rounded.n : ROUNDED_MAX;
    for (int i = 0; i < n; i++)
        if (c->rounded.e[i].rounded == v)
            return c->rounded.e[i].exact;
    return v;
}

static void remember_rounding(gcg *c, LLVMValueRef rounded, LLVMValueRef exact)
{
    int i = c->rounded.n++ % ROUNDED_MAX;
    c->rounded.e[i].rounded = rounded;
    c->rounded.e[i].exact = exact;
}

/* Lanes first, first + 2, ... of v (w / 2 of them). */
static LLVMValueRef every_other_lane(gcg *c, LLVMValueRef v, int w, int first)
{
    LLVMValueRef idx[MAX_VEC / 2];
    for (int i = 0; i < w / 2; i++)
        idx[i] = LLVMConstInt(c->i32, (unsigned)(2 * i + first), 0);
    return LLVMBuildShuffleVector(c->b, v, LLVMGetPoison(LLVMTypeOf(v)),
                                  LLVMConstVector(idx, (unsigned)(w / 2)), "");
}

/* f32 -> f16 / bf16 bits, round to nearest even. A value half_round made is
 * converted from the value it rounded: one rounding, not two. On sm_80 and
 * later an even number of lanes converts two at a time, cvt.rn.bf16x2.f32
 * (or f16x2) packing lanes 2i + 1 and 2i into the upper and lower halves of
 * one 32-bit word (memory order), which is what a 16-byte store writes; one
 * lane is cvt.rn.bf16.f32. Older targets convert bf16 with integer
 * arithmetic, nan quieted as ptc_f32_to_bf16 does. */
static LLVMValueRef half_to_storage(ptc_emitter *em, LLVMValueRef v, ptc_dtype dt, int w)
{
    gcg *c = gpu_of(em);
    bool bf = dt == PTC_BF16;
    v = before_rounding(c, v);
    if (c->sm >= 80 && w > 1 && w % 2 == 0 && w <= MAX_VEC) {
        LLVMValueRef hi = every_other_lane(c, v, w, 1), lo = every_other_lane(c, v, w, 0);
        LLVMValueRef words =
            asm_lanes(c, bf ? "cvt.rn.bf16x2.f32 $0, $1, $2;" : "cvt.rn.f16x2.f32 $0, $1, $2;",
                      "=r,f,f", c->i32, hi, lo);
        return LLVMBuildBitCast(c->b, words, g_vec(c, c->i16, w), "");
    }
    if (!bf)
        return asm_lanes(c, "cvt.rn.f16.f32 $0, $1;", "=h,f", c->i16, v, NULL);
    if (c->sm >= 80)
        return asm_lanes(c, "cvt.rn.bf16.f32 $0, $1;", "=h,f", c->i16, v, NULL);
    return ptc_ll_f32_to_bf16_bits(c->b, v);
}

/* x + y rounded to bf16, for f32 x, y that are bf16 values, two lanes per
 * fma.rn.bf16x2 (x * 1 + y) on sm_80+ (where the plan says so): torch's f32
 * sum rounded to bf16 is the exact sum rounded once, f32 having more than
 * 2 * 8 + 2 bits, so this is the same value in one instruction per pair
 * where the f32 form took six (two of them to unpack). The halves' bits are
 * the f32 values' upper 16, which LLVM folds back into the loaded words. */
static LLVMValueRef half_add(ptc_emitter *em, LLVMValueRef x, LLVMValueRef y, ptc_dtype dt, int w)
{
    gcg *c = gpu_of(em);
    if (dt != PTC_BF16 || c->sm < 80 || !c->plan->packed_add || w < 2 || w % 2 || w > MAX_VEC)
        return NULL;
    LLVMBuilderRef b = c->b;
    LLVMTypeRef words = g_vec(c, c->i32, w / 2);
    LLVMValueRef in[2];
    for (int k = 0; k < 2; k++) {
        LLVMValueRef bits = LLVMBuildBitCast(b, k ? y : x, g_vec(c, c->i32, w), "");
        bits = LLVMBuildLShr(b, bits, g_const_i(c->i32, 16, w), "");
        bits = LLVMBuildTrunc(b, bits, g_vec(c, c->i16, w), "");
        in[k] = LLVMBuildBitCast(b, bits, words, "");
    }
    LLVMValueRef ones = LLVMConstInt(c->i32, 0x3f803f80, 0); /* bf16x2 (1, 1) */
    LLVMValueRef out = LLVMGetPoison(words);
    for (int i = 0; i < w / 2; i++) {
        LLVMValueRef lane = LLVMConstInt(c->i32, (unsigned)i, 0);
        LLVMValueRef args[3] = {LLVMBuildExtractElement(b, in[0], lane, ""), ones,
                                LLVMBuildExtractElement(b, in[1], lane, "")};
        LLVMValueRef sum = g_intrinsic(c, "llvm.nvvm.fma.rn.bf16x2", NULL, 0, args, 3);
        out = LLVMBuildInsertElement(b, out, sum, lane, "");
    }
    return half_from_storage(em, LLVMBuildBitCast(b, out, g_vec(c, c->i16, w), ""), dt, w);
}

/* Rounds an f32 value to f16 / bf16 precision in one instruction where there
 * is one (NULL: through the storage conversions). For bf16 on sm_80+, the
 * upper half of cvt.rn.bf16x2 of (v, 0) is the rounded value's f32 bits. */
static LLVMValueRef half_round(ptc_emitter *em, LLVMValueRef v, ptc_dtype dt, int w)
{
    gcg *c = gpu_of(em);
    LLVMValueRef r = NULL;
    if (dt == PTC_BF16 && c->sm >= 80) {
        r = asm_lanes(c, "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f", c->i32, v,
                      g_const_f(c->f32, 0, w));
        r = LLVMBuildBitCast(c->b, r, g_vec(c, c->f32, w), "");
    } else if (dt == PTC_F16) {
        r = asm_lanes(c, "{ .reg .b16 t; cvt.rn.f16.f32 t, $1; cvt.f32.f16 $0, t; }", "=f,f",
                      c->f32, v, NULL);
    }
    if (r)
        remember_rounding(c, r, v);
    return r;
}

/* ---- loads and stores ------------------------------------------------------------- */

bool g_aligned_w(const ptc_ix *off, int vec_var, int w)
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

/* NVPTX (LLVM 16) splits a vector of 8- or 16-bit lanes into accesses of 4
 * lanes at most: 8 bf16 values were two ld.global.v4.u16 of 8 bytes, and
 * instcombine folds a load of 32-bit lanes bitcast to narrow ones back into a
 * load of the narrow lanes. An aligned access of 8 or 16 bytes of such lanes
 * of a kernel argument is therefore inline PTX over 32-bit lanes, one
 * ld/st.global.v2/v4.u32 (the load .nc where nothing in the kernel writes the
 * buffer, as LLVM makes its own). The number of 32-bit words, or 0 where the
 * lanes are wide already or the buffer is a local. */
static int wide_words(const gcg *c, int buf, unsigned esize, int w)
{
    unsigned bytes = esize * (unsigned)w;
    /* global memory the launcher checks the alignment of: a kernel argument
     * (ld.global on a local's shared or private address is an error) */
    bool argument = c->bufspace[buf] == 1 && !c->s->is_local[buf];
    return argument && esize < 4 && (bytes == 8 || bytes == 16) ? (int)(bytes / 4) : 0;
}

static LLVMValueRef asm_call(gcg *c, LLVMTypeRef rt, const char *code, const char *cons,
                             LLVMValueRef *args, int nargs, bool side_effects)
{
    LLVMTypeRef params[5];
    for (int i = 0; i < nargs; i++)
        params[i] = LLVMTypeOf(args[i]);
    LLVMTypeRef ft = LLVMFunctionType(rt, params, (unsigned)nargs, 0);
    LLVMValueRef fn = LLVMGetInlineAsm(ft, (char *)code, strlen(code), (char *)cons, strlen(cons),
                                       side_effects, 0, LLVMInlineAsmDialectATT, 0);
    return LLVMBuildCall2(c->b, ft, fn, args, (unsigned)nargs, "");
}

/* Can the load go through the cache: a read-only buffer (nothing in the
 * kernel writes it), unmasked, at an offset of index variables only? */
static bool cacheable(const gcg *c, const ptc_lexpr *e)
{
    return c->cache && e->arg[0] < 0 && !c->written[e->buf] && !ptc_ix_uses_val(e->idx[0]);
}

/* LLVM 16's MemoryEffects of a call that reads any memory and writes none:
 * ModRefInfo Ref (1) for argument, inaccessible and other memory, two bits each. */
enum { MEMORY_READ = 1 | 1 << 2 | 1 << 4 };

/* in_place: issued where it is emitted (the iteration's cache issues each
 * load once, first): LLVM's machine LICM takes an inline asm for arithmetic
 * and hoisted a row's weights out of the loop of outer iterations, into
 * registers held across it (bf16 layer_norm: 71 registers, 104 with the
 * loads issued first) */
static LLVMValueRef wide_load(gcg *c, LLVMValueRef p, int words, bool nc, LLVMTypeRef vt,
                              bool in_place)
{
    LLVMBuilderRef b = c->b;
    LLVMTypeRef lanes[4] = {c->i32, c->i32, c->i32, c->i32};
    LLVMTypeRef rt = LLVMStructTypeInContext(c->ctx, lanes, (unsigned)words, 0);
    char code[96];
    snprintf(code, sizeof code, "ld.global%s.v%d.u32 {%s}, [$%d];", nc ? ".nc" : "", words,
             words == 4 ? "$0, $1, $2, $3" : "$0, $1", words);
    LLVMValueRef addr = LLVMBuildPtrToInt(b, p, c->i64, "");
    LLVMValueRef got =
        asm_call(c, rt, code, words == 4 ? "=r,=r,=r,=r,l" : "=r,=r,l", &addr, 1, in_place);
    /* memory(read): not moved across a store or a barrier, as a load */
    unsigned mem = LLVMGetEnumAttributeKindForName("memory", 6);
    LLVMAddCallSiteAttribute(got, LLVMAttributeFunctionIndex,
                             LLVMCreateEnumAttribute(c->ctx, mem, MEMORY_READ));
    LLVMValueRef v = LLVMGetPoison(LLVMVectorType(c->i32, (unsigned)words));
    for (int i = 0; i < words; i++)
        v = LLVMBuildInsertElement(b, v, LLVMBuildExtractValue(b, got, (unsigned)i, ""),
                                   LLVMConstInt(c->i32, (unsigned)i, 0), "");
    return LLVMBuildBitCast(b, v, vt, "");
}

static void wide_store(gcg *c, LLVMValueRef p, int words, LLVMValueRef raw)
{
    LLVMBuilderRef b = c->b;
    LLVMValueRef v = LLVMBuildBitCast(b, raw, LLVMVectorType(c->i32, (unsigned)words), "");
    LLVMValueRef args[5] = {LLVMBuildPtrToInt(b, p, c->i64, "")};
    for (int i = 0; i < words; i++)
        args[1 + i] = LLVMBuildExtractElement(b, v, LLVMConstInt(c->i32, (unsigned)i, 0), "");
    const char *code = words == 4 ? "st.global.v4.u32 [$0], {$1, $2, $3, $4};"
                                  : "st.global.v2.u32 [$0], {$1, $2};";
    asm_call(c, LLVMVoidTypeInContext(c->ctx), code, words == 4 ? "l,r,r,r,r" : "l,r,r", args,
             1 + words, true);
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

/* if/else with a value from each side, each side in its own block: what a
 * masked load branches through, so that masked-off lanes never touch memory. */
typedef struct {
    LLVMBasicBlockRef other, join, from[2];
    LLVMValueRef val[2];
} branch;

static void branch_open(gcg *c, branch *br, LLVMValueRef cond)
{
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "mload");
    br->other = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "mskip");
    br->join = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "mjoin");
    LLVMBuildCondBr(c->b, cond, then, br->other);
    LLVMPositionBuilderAtEnd(c->b, then);
}

/* Side `side` (0: then, 1: else) ends with value v. */
static void branch_side(gcg *c, branch *br, int side, LLVMValueRef v)
{
    br->val[side] = v;
    br->from[side] = LLVMGetInsertBlock(c->b);
    LLVMBuildBr(c->b, br->join);
    LLVMPositionBuilderAtEnd(c->b, side == 0 ? br->other : br->join);
}

static LLVMValueRef branch_close(gcg *c, branch *br, LLVMValueRef v)
{
    branch_side(c, br, 1, v);
    LLVMValueRef phi = LLVMBuildPhi(c->b, LLVMTypeOf(v), "");
    LLVMAddIncoming(phi, br->val, br->from, 2);
    return phi;
}

/* A scalar load, branching around it when a mask is given. */
static LLVMValueRef scalar_load(gcg *c, int bufid, LLVMTypeRef st, unsigned align, LLVMValueRef off,
                                LLVMValueRef mask)
{
    LLVMValueRef p = gep(c, st, bufid, off);
    branch br;
    if (mask)
        branch_open(c, &br, mask);
    LLVMValueRef v = LLVMBuildLoad2(c->b, st, p, "");
    LLVMSetAlignment(v, align);
    if (!mask)
        return v;
    branch_side(c, &br, 0, v);
    return branch_close(c, &br, LLVMConstNull(st));
}

/* W contiguous lanes at p, unmasked: one ld.global.v4-style access where
 * the offset is aligned to the vector's width. guarded: under a branch on a
 * mask, which the load must not be moved out of (it would read past the
 * buffer's end). */
static LLVMValueRef contig_load(gcg *c, const ptc_lexpr *e, LLVMValueRef p, int w, bool guarded)
{
    const ptc_lbuf *buf = c->s->prog->bufs[e->buf];
    LLVMTypeRef st = ptc_emit_storage_type(&c->em, buf->dtype);
    unsigned esize = (unsigned)ptc_dtype_size(buf->dtype);
    bool al = c->vector_form && g_aligned_w(e->idx[0], c->vec_var, w);
    int words = al ? wide_words(c, e->buf, esize, w) : 0;
    LLVMValueRef raw;
    if (words) {
        raw = wide_load(c, p, words, !c->written[e->buf], g_vec(c, st, w),
                        guarded || cacheable(c, e));
    } else {
        raw = LLVMBuildLoad2(c->b, g_vec(c, st, w), p, "");
        LLVMSetAlignment(raw, al ? esize * (unsigned)w : esize);
    }
    if (al)
        note_alignment(c, e->buf, esize * (unsigned)w);
    return raw;
}

/* Lanes at offsets off where mask (NULL: all) is on, zero elsewhere, one by
 * one (LLVM scalarises the gather into a branch and a load per lane). */
static LLVMValueRef gather(gcg *c, const ptc_lexpr *e, LLVMValueRef off, LLVMValueRef mask, int w)
{
    LLVMTypeRef st = ptc_emit_storage_type(&c->em, c->s->prog->bufs[e->buf]->dtype);
    unsigned esize = (unsigned)ptc_dtype_size(c->s->prog->bufs[e->buf]->dtype);
    LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(c->b, st, c->bufptr[e->buf], &off, 1, "");
    LLVMTypeRef vt = g_vec(c, st, w);
    LLVMTypeRef over[2] = {vt, LLVMTypeOf(ptrs)};
    LLVMValueRef m = mask ? g_splat(c, mask, w) : g_const_i(c->i1, 1, w);
    LLVMValueRef args[4] = {ptrs, LLVMConstInt(c->i32, esize, 0), m, LLVMConstNull(vt)};
    return g_intrinsic(c, "llvm.masked.gather", over, 2, args, 4);
}

/* Lane i of a vector (a scalar: itself). */
static LLVMValueRef lane(gcg *c, LLVMValueRef v, int i)
{
    return g_width(v) == 1
               ? v
               : LLVMBuildExtractElement(c->b, v, LLVMConstInt(c->i32, (unsigned)i, 0), "");
}

/* Whether every lane of mask is on (any mask, not only an interval). */
static LLVMValueRef every_lane(gcg *c, LLVMValueRef mask)
{
    LLVMValueRef all = lane(c, mask, 0);
    for (int i = 1; i < g_width(mask); i++)
        all = LLVMBuildAnd(c->b, all, lane(c, mask, i), "");
    return all;
}

/* A masked contiguous load stays one vector load where it can: a mask
 * that is the same in every lane (a padded copy's rows past the source's)
 * branches around the unmasked load; one that differs between lanes (the
 * columns past a row's end, in the last vector of a row) takes the
 * unmasked load where every lane is inside and the gather elsewhere. */
static LLVMValueRef masked_contig_load(gcg *c, const ptc_lexpr *e, LLVMValueRef *vals,
                                       LLVMValueRef mask, int w)
{
    LLVMValueRef p = gep(c, ptc_emit_storage_type(&c->em, c->s->prog->bufs[e->buf]->dtype), e->buf,
                         ptc_emit_ix(&c->em, e->idx[0], vals, 1));
    bool lanes_differ = g_width(mask) > 1;
    LLVMValueRef offs = lanes_differ ? ptc_emit_ix(&c->em, e->idx[0], vals, w) : NULL;
    branch br;
    branch_open(c, &br, every_lane(c, mask));
    LLVMValueRef whole = contig_load(c, e, p, w, true);
    LLVMTypeRef vt = LLVMTypeOf(whole);
    /* joined as 32-bit words where the lanes are narrower, so that LLVM
     * still folds a bf16 lane's widening into its word of the wide load */
    unsigned esize = (unsigned)ptc_dtype_size(c->s->prog->bufs[e->buf]->dtype);
    unsigned bytes = esize * (unsigned)w;
    LLVMTypeRef jt = esize < 4 && bytes % 4 == 0 ? LLVMVectorType(c->i32, bytes / 4) : vt;
    branch_side(c, &br, 0, LLVMBuildBitCast(c->b, whole, jt, ""));
    LLVMValueRef part = lanes_differ ? gather(c, e, offs, mask, w) : LLVMConstNull(vt);
    return LLVMBuildBitCast(c->b, branch_close(c, &br, LLVMBuildBitCast(c->b, part, jt, "")), vt,
                            "");
}

/* A load's value as stored (f16/bf16 as bits). */
static LLVMValueRef emit_load_raw(gcg *c, const ptc_lexpr *e, LLVMValueRef *vals, bool mask_uniform,
                                  int w)
{
    const ptc_lbuf *buf = c->s->prog->bufs[e->buf];
    LLVMTypeRef st = ptc_emit_storage_type(&c->em, buf->dtype);
    unsigned esize = (unsigned)ptc_dtype_size(buf->dtype);
    LLVMValueRef mask = e->arg[0] >= 0 ? vals[e->arg[0]] : NULL;
    if (mask && mask_uniform) /* one bool for all lanes */
        mask = lane(c, mask, 0);
    int kind = w == 1 ? PTC_ACC_UNIFORM : ptc_emit_access_kind(&c->em, e->idx[0], vals);
    if (kind == PTC_ACC_UNIFORM && (!mask || g_width(mask) == 1))
        return g_splat(
            c, scalar_load(c, e->buf, st, esize, ptc_emit_ix(&c->em, e->idx[0], vals, 1), mask), w);
    if (kind == PTC_ACC_CONTIG && mask)
        return masked_contig_load(c, e, vals, mask, w);
    if (kind == PTC_ACC_CONTIG)
        return contig_load(c, e, gep(c, st, e->buf, ptc_emit_ix(&c->em, e->idx[0], vals, 1)), w,
                           false);
    return gather(c, e, ptc_emit_ix(&c->em, e->idx[0], vals, w), mask, w);
}

/* Masked-off lanes of a load's value v take the entry's constant. */
static LLVMValueRef masked(gcg *c, const ptc_lexpr *e, LLVMValueRef *vals, LLVMValueRef v, int w)
{
    if (e->arg[0] < 0)
        return v;
    return LLVMBuildSelect(c->b, g_splat(c, vals[e->arg[0]], w), v,
                           ptc_emit_kconst(&c->em, e->dtype, e->fval, e->ival, w), "");
}

/* A reduction's result this iteration holds in registers for the load (NULL: none). */
static LLVMValueRef forwarded(gcg *c, const ptc_lexpr *e, int w)
{
    for (int k = 0; c->cache && k < c->cache->nfwd; k++)
        if (c->cache->fwd[k].buf == e->buf && ptc_ix_eq(c->cache->fwd[k].off, e->idx[0]))
            return g_splat(c, c->cache->fwd[k].val, w);
    return NULL;
}

/* Row mode with PTC_CUDA_ROW_FORWARD: does lane-wise element off of local
 * buf stay in the iteration's cache from its store to its loads? A lane of
 * a row kernel runs the same chunks in every group, so a row-long local
 * (softmax's exponentials) that it stores at the row's position, stride 1,
 * it alone loads again there; a reduction's result ([0], stored by lane 0
 * for every lane) is not lane-wise. */
static bool row_forwarded(const gcg *c, int buf, const ptc_ix *off)
{
    if (!c->cache || !c->plan->row_forward || !c->s->is_local[buf] || ptc_ix_uses_val(off))
        return false;
    bool nested;
    ptc_dim k = ptc_ix_coeff(off, c->vec_var, &nested);
    return !nested && ptc_dim_is_static(k) && k.value == 1;
}

/* The cache entry of buf at off in the current chunk, width w (-1: none). */
static int cache_find(const gcache *ca, int buf, const ptc_ix *off, int j, int w)
{
    for (int k = 0; k < ca->n; k++)
        if (ca->e[k].buf == buf && ca->e[k].j == j && ca->e[k].w == w &&
            ptc_ix_eq(ca->e[k].off, off))
            return k;
    return -1;
}

static void cache_put(gcache *ca, int buf, const ptc_ix *off, int j, int w, LLVMValueRef raw)
{
    int k = cache_find(ca, buf, off, j, w);
    if (k < 0 && ca->n < (int)(sizeof ca->e / sizeof ca->e[0]))
        k = ca->n++;
    if (k < 0)
        return;
    ca->e[k].buf = buf;
    ca->e[k].j = j;
    ca->e[k].w = w;
    ca->e[k].off = off;
    ca->e[k].val = raw;
}

static void cache_drop(gcache *ca, int buf)
{
    int n = 0;
    for (int k = 0; k < ca->n; k++)
        if (ca->e[k].buf != buf)
            ca->e[n++] = ca->e[k];
    ca->n = n;
}

/* A load's stored form, through the iteration's cache when one is active
 * (cacheable loads, and row-forwarded locals). The cache holds the stored
 * form, so that a prefetched bf16 row takes a register per two elements
 * until it is used. */
static LLVMValueRef load_raw(gcg *c, const ptc_lexpr *e, LLVMValueRef *vals, bool mask_uniform,
                             int w)
{
    gcache *ca = c->cache;
    bool ok = cacheable(c, e) || (e->arg[0] < 0 && row_forwarded(c, e->buf, e->idx[0]));
    int k = ok ? cache_find(ca, e->buf, e->idx[0], c->cache_j, w) : -1;
    if (k >= 0)
        return ca->e[k].val;
    LLVMValueRef raw = emit_load_raw(c, e, vals, mask_uniform, w);
    if (ok)
        cache_put(ca, e->buf, e->idx[0], c->cache_j, w, raw);
    return raw;
}

/* A load (the body emitter's). */
static LLVMValueRef load(ptc_emitter *em, const ptc_lexpr *e, LLVMValueRef *vals, bool mask_uniform,
                         int w)
{
    gcg *c = gpu_of(em);
    LLVMValueRef v = forwarded(c, e, w);
    if (!v)
        v = ptc_emit_from_storage(&c->em, load_raw(c, e, vals, mask_uniform, w),
                                  c->s->prog->bufs[e->buf]->dtype, w);
    return masked(c, e, vals, v, w);
}

void g_prefetch(gcg *c, const ptc_lbody *body, int w)
{
    for (int i = 0; i < body->n; i++)
        if (body->e[i].op == PTC_L_LOAD && cacheable(c, &body->e[i]))
            (void)load_raw(c, &body->e[i], NULL, false, w);
}

void g_store(gcg *c, int bufid, const ptc_ix *off, LLVMValueRef v, LLVMValueRef *vals, int w)
{
    LLVMBuilderRef b = c->b;
    const ptc_lbuf *buf = c->s->prog->bufs[bufid];
    LLVMTypeRef st = ptc_emit_storage_type(&c->em, buf->dtype);
    unsigned esize = (unsigned)ptc_dtype_size(buf->dtype);
    LLVMValueRef raw = ptc_emit_to_storage(&c->em, g_splat(c, v, w), buf->dtype, w);
    if (row_forwarded(c, bufid, off))
        cache_put(c->cache, bufid, off, c->cache_j, w, raw);
    else if (c->cache && c->s->is_local[bufid])
        cache_drop(c->cache, bufid); /* what it held of buf may be overwritten */
    int kind = w == 1 ? PTC_ACC_CONTIG : ptc_emit_access_kind(&c->em, off, vals);
    if (kind == PTC_ACC_CONTIG) {
        LLVMValueRef p = gep(c, st, bufid, ptc_emit_ix(&c->em, off, vals, 1));
        bool al = w > 1 && c->vector_form && g_aligned_w(off, c->vec_var, w);
        int words = al ? wide_words(c, bufid, esize, w) : 0;
        if (words)
            wide_store(c, p, words, raw);
        else
            LLVMSetAlignment(LLVMBuildStore(b, raw, p), al ? esize * (unsigned)w : esize);
        if (al)
            note_alignment(c, bufid, esize * (unsigned)w);
        return;
    }
    /* scatter (lanes storing to one place: the last one wins) */
    LLVMValueRef o = ptc_emit_ix(&c->em, off, vals, w);
    LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, st, c->bufptr[bufid], &o, 1, "");
    LLVMTypeRef over[2] = {LLVMTypeOf(raw), LLVMTypeOf(ptrs)};
    LLVMValueRef args[4] = {raw, ptrs, LLVMConstInt(c->i32, esize, 0), g_const_i(c->i1, 1, w)};
    g_intrinsic(c, "llvm.masked.scatter", over, 2, args, 4);
}

/* ---- math ---------------------------------------------------------------------------- */

static LLVMValueRef fcall1(gcg *c, const char *intr, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    return g_intrinsic(c, intr, &t, 1, &x, 1);
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

static LLVMValueRef fmod_hook(ptc_emitter *em, LLVMValueRef x, LLVMValueRef y)
{
    return fmod_(gpu_of(em), x, y);
}

/* Every function inline (gmath.c): the GPU has no libm. */
static LLVMValueRef math(ptc_emitter *em, int op, ptc_dtype dt, LLVMValueRef x, LLVMValueRef y)
{
    gcg *c = gpu_of(em);
    (void)dt;
    switch (op) {
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
    case PTC_L_ATAN2:
        return g_atan2(c, x, y);
    case PTC_L_POW:
        return g_pow(c, x, y);
    default:
        PTC_ASSERT(!"not a math function");
    }
}

static LLVMValueRef one_plus_erf(ptc_emitter *em, LLVMValueRef z)
{
    gcg *c = gpu_of(em);
    return c->plan->erfc_sum ? g_one_plus_erf(c, z) : NULL;
}

static LLVMValueRef randn(ptc_emitter *em, LLVMValueRef key, LLVMValueRef idx)
{
    return g_randn(gpu_of(em), key, idx);
}

static LLVMValueRef status_ptr(void *ctx)
{
    gcg *c = ctx;
    PTC_ASSERT(c->status != NULL);
    return LLVMBuildIntToPtr(c->b, c->status, c->gptr, "status");
}

const ptc_emit_target g_target = {
    .f16_as_bits = true,
    .uniform_div_as_mul = true,
    .ipow_as_call = false,
    .load = load,
    .half_to_storage = half_to_storage,
    .half_from_storage = half_from_storage,
    .half_round = half_round,
    .half_add = half_add,
    .math = math,
    .one_plus_erf = one_plus_erf,
    .fmod = fmod_hook,
    .randn = randn,
    .status_ptr = status_ptr,
};
