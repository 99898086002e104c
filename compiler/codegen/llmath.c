/* LLVM IR for the arithmetic both code generators share: see llmath.h. */
#include "codegen/llmath.h"

#include <math.h>
#include <string.h>

static bool is_unsigned(ptc_dtype dt)
{
    return dt == PTC_U8 || dt == PTC_BOOL;
}

int ptc_ll_width(LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? (int)LLVMGetVectorSize(t) : 1;
}

LLVMValueRef ptc_ll_splat(LLVMBuilderRef b, LLVMValueRef v, int w)
{
    if (w == 1 || ptc_ll_width(v) > 1)
        return v;
    LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(v), (unsigned)w);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(LLVMGetTypeContext(vt));
    LLVMValueRef ins = LLVMBuildInsertElement(b, LLVMGetPoison(vt), v, LLVMConstInt(i32, 0, 0), "");
    return LLVMBuildShuffleVector(b, ins, LLVMGetPoison(vt),
                                  LLVMConstNull(LLVMVectorType(i32, (unsigned)w)), "");
}

LLVMValueRef ptc_ll_splat_const(LLVMValueRef k, int w)
{
    if (w == 1)
        return k;
    LLVMValueRef ks[64];
    PTC_ASSERT(w <= 64);
    for (int i = 0; i < w; i++)
        ks[i] = k;
    return LLVMConstVector(ks, (unsigned)w);
}

LLVMValueRef ptc_ll_alloca(LLVMBuilderRef b, LLVMBasicBlockRef entry, LLVMTypeRef t,
                           const char *name)
{
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(b);
    LLVMValueRef first = LLVMGetFirstInstruction(entry);
    if (first)
        LLVMPositionBuilderBefore(b, first);
    else
        LLVMPositionBuilderAtEnd(b, entry);
    LLVMValueRef a = LLVMBuildAlloca(b, t, name);
    LLVMPositionBuilderAtEnd(b, cur);
    return a;
}

LLVMValueRef ptc_ll_const(LLVMTypeRef t, double f, int64_t i)
{
    bool vec = LLVMGetTypeKind(t) == LLVMVectorTypeKind;
    LLVMTypeRef e = vec ? LLVMGetElementType(t) : t;
    LLVMValueRef k = LLVMGetTypeKind(e) == LLVMIntegerTypeKind
                         ? LLVMConstInt(e, (unsigned long long)i, 1)
                         : LLVMConstReal(e, f);
    return ptc_ll_splat_const(k, vec ? (int)LLVMGetVectorSize(t) : 1);
}

LLVMValueRef ptc_ll_intrinsic(LLVMModuleRef m, LLVMBuilderRef b, const char *name,
                              LLVMTypeRef *over, int nover, LLVMValueRef *args, int nargs)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    PTC_ASSERT(id != 0);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(m, id, over, (size_t)nover);
    LLVMTypeRef ft = LLVMIntrinsicGetType(LLVMGetModuleContext(m), id, over, (size_t)nover);
    return LLVMBuildCall2(b, ft, fn, args, (unsigned)nargs, "");
}

LLVMValueRef ptc_ll_isnan(LLVMBuilderRef b, LLVMValueRef x)
{
    return LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
}

static LLVMValueRef call1(LLVMModuleRef m, LLVMBuilderRef b, const char *intr, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    return ptc_ll_intrinsic(m, b, intr, &t, 1, &x, 1);
}

LLVMValueRef ptc_ll_int_divmod(LLVMBuilderRef b, int op, bool is_unsigned, LLVMValueRef x,
                               LLVMValueRef y)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef zero = ptc_ll_const(t, 0, 0), one = ptc_ll_const(t, 1, 1);
    LLVMValueRef yz = LLVMBuildICmp(b, LLVMIntEQ, y, zero, "");
    LLVMValueRef ys = LLVMBuildSelect(b, yz, one, y, "");
    LLVMValueRef r;
    if (is_unsigned) {
        bool rem = op == PTC_L_REMAINDER || op == PTC_L_FMOD;
        r = rem ? LLVMBuildURem(b, x, ys, "") : LLVMBuildUDiv(b, x, ys, "");
    } else {
        /* INT_MIN / -1 overflows: x * -1 wraps the same way */
        LLVMValueRef m1 = LLVMBuildICmp(b, LLVMIntEQ, ys, ptc_ll_const(t, -1, -1), "");
        LLVMValueRef ys2 = LLVMBuildSelect(b, m1, one, ys, "");
        LLVMValueRef q = LLVMBuildSDiv(b, x, ys2, ""), rm = LLVMBuildSRem(b, x, ys2, "");
        q = LLVMBuildSelect(b, m1, LLVMBuildNeg(b, x, ""), q, "");
        rm = LLVMBuildSelect(b, m1, zero, rm, "");
        /* floor adjustments when signs differ and the remainder is non-zero */
        LLVMValueRef nz = LLVMBuildICmp(b, LLVMIntNE, rm, zero, "");
        LLVMValueRef diff = LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildXor(b, rm, ys, ""), zero, "");
        LLVMValueRef adj = LLVMBuildAnd(b, nz, diff, "");
        if (op == PTC_L_DIV)
            r = q; /* prims.div on integers truncates */
        else if (op == PTC_L_FMOD)
            r = rm;
        else if (op == PTC_L_FLOOR_DIVIDE)
            r = LLVMBuildSub(b, q, LLVMBuildZExt(b, adj, LLVMTypeOf(q), ""), "");
        else
            r = LLVMBuildSelect(b, adj, LLVMBuildAdd(b, rm, ys, ""), rm, "");
    }
    return LLVMBuildSelect(b, yz, zero, r, "");
}

LLVMValueRef ptc_ll_float_floordiv_rem(LLVMModuleRef m, LLVMBuilderRef b, int op, LLVMValueRef x,
                                       LLVMValueRef y, LLVMValueRef mod)
{
    /* torch: mod = fmod(a, b); if mod != 0 and (b < 0) != (mod < 0): mod += b;
     * floor_divide: div = (a - mod) / b, floored and nudged like torch's
     * div_floor_floating */
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef zero = ptc_ll_const(t, 0, 0), one = ptc_ll_const(t, 1, 1);
    LLVMValueRef diff = LLVMBuildXor(b, LLVMBuildFCmp(b, LLVMRealOLT, y, zero, ""),
                                     LLVMBuildFCmp(b, LLVMRealOLT, mod, zero, ""), "");
    LLVMValueRef adj = LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealONE, mod, zero, ""), diff, "");
    if (op == PTC_L_REMAINDER)
        return LLVMBuildSelect(b, adj, LLVMBuildFAdd(b, mod, y, ""), mod, "");
    LLVMValueRef div = LLVMBuildFDiv(b, LLVMBuildFSub(b, x, mod, ""), y, "");
    div = LLVMBuildSelect(b, adj, LLVMBuildFSub(b, div, one, ""), div, "");
    LLVMValueRef fl = call1(m, b, "llvm.floor", div);
    LLVMValueRef half = ptc_ll_const(t, 0.5, 0);
    LLVMValueRef up = LLVMBuildFCmp(b, LLVMRealOGT, LLVMBuildFSub(b, div, fl, ""), half, "");
    fl = LLVMBuildSelect(b, up, LLVMBuildFAdd(b, fl, one, ""), fl, "");
    /* div == 0: copysign(0, a / b) */
    LLVMValueRef q = LLVMBuildFDiv(b, x, y, "");
    LLVMValueRef cs[2] = {zero, q};
    LLVMValueRef z = ptc_ll_intrinsic(m, b, "llvm.copysign", &t, 1, cs, 2);
    LLVMValueRef divz = LLVMBuildFCmp(b, LLVMRealOEQ, div, zero, "");
    LLVMValueRef r = LLVMBuildSelect(b, divz, z, fl, "");
    /* b == 0: a / b (inf or nan) */
    LLVMValueRef y0 = LLVMBuildFCmp(b, LLVMRealOEQ, y, zero, "");
    return LLVMBuildSelect(b, y0, q, r, "");
}

LLVMValueRef ptc_ll_minmax(LLVMBuilderRef b, bool max, ptc_dtype dt, LLVMValueRef x, LLVMValueRef y)
{
    if (ptc_dtype_is_float(dt)) {
        LLVMValueRef better = LLVMBuildFCmp(b, max ? LLVMRealOGT : LLVMRealOLT, x, y, "");
        LLVMValueRef r = LLVMBuildSelect(b, better, x, y, "");
        return LLVMBuildSelect(b, ptc_ll_isnan(b, x), x, r, "");
    }
    LLVMIntPredicate p =
        is_unsigned(dt) ? (max ? LLVMIntUGT : LLVMIntULT) : (max ? LLVMIntSGT : LLVMIntSLT);
    return LLVMBuildSelect(b, LLVMBuildICmp(b, p, x, y, ""), x, y, "");
}

LLVMValueRef ptc_ll_pow_const(LLVMModuleRef m, LLVMBuilderRef b, LLVMValueRef x, double e)
{
    if (e == 1)
        return x;
    if (e == 2)
        return LLVMBuildFMul(b, x, x, "");
    if (e == 3)
        return LLVMBuildFMul(b, LLVMBuildFMul(b, x, x, ""), x, "");
    if (e == 0.5)
        return call1(m, b, "llvm.sqrt", x);
    if (e == -1)
        return LLVMBuildFDiv(b, ptc_ll_const(LLVMTypeOf(x), 1, 1), x, "");
    return NULL;
}

/* Lane `lane` of x (x itself when scalar), widened to i64: bools are 0/1. */
static LLVMValueRef lane_i64(LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef lane)
{
    if (lane)
        x = LLVMBuildExtractElement(b, x, lane, "");
    LLVMTypeRef i64 = LLVMInt64TypeInContext(LLVMGetTypeContext(LLVMTypeOf(x)));
    unsigned bits = LLVMGetIntTypeWidth(LLVMTypeOf(x));
    if (bits == 64)
        return x;
    return bits == 1 ? LLVMBuildZExt(b, x, i64, "") : LLVMBuildSExt(b, x, i64, "");
}

LLVMValueRef ptc_ll_check(LLVMModuleRef m, LLVMBuilderRef b, int64_t code, LLVMValueRef ok,
                          LLVMValueRef v, LLVMValueRef bound, LLVMValueRef (*status_ptr)(void *ctx),
                          void *ctx)
{
    LLVMContextRef cx = LLVMGetModuleContext(m);
    LLVMTypeRef i1 = LLVMInt1TypeInContext(cx), i64 = LLVMInt64TypeInContext(cx);
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(b));
    int w = ptc_ll_width(ok);
    LLVMValueRef bad = LLVMBuildNot(b, ok, "check.bad"), any = bad;
    if (w > 1) {
        LLVMTypeRef vt = LLVMTypeOf(bad);
        any = ptc_ll_intrinsic(m, b, "llvm.vector.reduce.or", &vt, 1, &bad, 1);
    }
    LLVMValueRef expect[2] = {any, LLVMConstInt(i1, 0, 0)};
    any = ptc_ll_intrinsic(m, b, "llvm.expect", &i1, 1, expect, 2);
    LLVMBasicBlockRef cold = LLVMAppendBasicBlockInContext(cx, fn, "check.fail");
    LLVMBasicBlockRef won = LLVMAppendBasicBlockInContext(cx, fn, "check.report");
    LLVMBasicBlockRef cont = LLVMAppendBasicBlockInContext(cx, fn, "check.ok");
    LLVMBuildCondBr(b, any, cold, cont);

    LLVMPositionBuilderAtEnd(b, cold);
    LLVMValueRef lane = NULL;
    if (w > 1) { /* the first failing lane */
        LLVMTypeRef iw = LLVMIntTypeInContext(cx, (unsigned)w);
        LLVMValueRef args[2] = {LLVMBuildBitCast(b, bad, iw, ""), LLVMConstInt(i1, 1, 0)};
        lane = ptc_ll_intrinsic(m, b, "llvm.cttz", &iw, 1, args, 2);
    }
    LLVMValueRef value = lane_i64(b, v, lane), limit = lane_i64(b, bound, lane);
    LLVMValueRef st = status_ptr(ctx);
    LLVMValueRef xchg = LLVMBuildAtomicCmpXchg(
        b, st, LLVMConstInt(i64, 0, 0), LLVMConstInt(i64, (unsigned long long)code, 1),
        LLVMAtomicOrderingMonotonic, LLVMAtomicOrderingMonotonic, 0);
    LLVMBuildCondBr(b, LLVMBuildExtractValue(b, xchg, 1, ""), won, cont);

    LLVMPositionBuilderAtEnd(b, won);
    for (unsigned k = 1; k <= 2; k++) {
        LLVMValueRef at = LLVMConstInt(i64, k, 0);
        LLVMBuildStore(b, k == 1 ? value : limit, LLVMBuildInBoundsGEP2(b, i64, st, &at, 1, ""));
    }
    LLVMBuildBr(b, cont);

    LLVMPositionBuilderAtEnd(b, cont);
    return LLVMBuildSelect(b, ok, v, ptc_ll_const(LLVMTypeOf(v), 0, 0), "");
}

/* An integer or float type of the width of x's lanes. */
static LLVMTypeRef lanes_of(LLVMValueRef x, LLVMTypeRef scalar)
{
    int w = ptc_ll_width(x);
    return w > 1 ? LLVMVectorType(scalar, (unsigned)w) : scalar;
}

LLVMValueRef ptc_ll_f32_to_bf16_bits(LLVMBuilderRef b, LLVMValueRef v)
{
    LLVMContextRef cx = LLVMGetTypeContext(LLVMTypeOf(v));
    LLVMTypeRef it = lanes_of(v, LLVMInt32TypeInContext(cx));
    LLVMValueRef x = LLVMBuildBitCast(b, v, it, "");
    LLVMValueRef absx = LLVMBuildAnd(b, x, ptc_ll_const(it, 0, 0x7fffffff), "");
    LLVMValueRef isnan = LLVMBuildICmp(b, LLVMIntUGT, absx, ptc_ll_const(it, 0, 0x7f800000), "");
    LLVMValueRef lsb =
        LLVMBuildAnd(b, LLVMBuildLShr(b, x, ptc_ll_const(it, 0, 16), ""), ptc_ll_const(it, 0, 1), "");
    LLVMValueRef r = LLVMBuildAdd(b, x, LLVMBuildAdd(b, lsb, ptc_ll_const(it, 0, 0x7fff), ""), "");
    LLVMValueRef q = LLVMBuildOr(b, x, ptc_ll_const(it, 0, 0x400000), "");
    r = LLVMBuildSelect(b, isnan, q, r, "");
    r = LLVMBuildLShr(b, r, ptc_ll_const(it, 0, 16), "");
    return LLVMBuildTrunc(b, r, lanes_of(v, LLVMInt16TypeInContext(cx)), "");
}

LLVMValueRef ptc_ll_bf16_bits_to_f32(LLVMBuilderRef b, LLVMValueRef v)
{
    LLVMContextRef cx = LLVMGetTypeContext(LLVMTypeOf(v));
    LLVMTypeRef it = lanes_of(v, LLVMInt32TypeInContext(cx));
    LLVMValueRef x = LLVMBuildZExt(b, v, it, "");
    x = LLVMBuildShl(b, x, ptc_ll_const(it, 0, 16), "");
    return LLVMBuildBitCast(b, x, lanes_of(v, LLVMFloatTypeInContext(cx)), "");
}

/* ---- polynomials of the math functions ------------------------------------------------- */

LLVMValueRef ptc_ll_fmuladd(LLVMModuleRef m, LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y,
                            LLVMValueRef z)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef args[3] = {x, y, z};
    return ptc_ll_intrinsic(m, b, "llvm.fmuladd", &t, 1, args, 3);
}

LLVMValueRef ptc_ll_poly(LLVMModuleRef m, LLVMBuilderRef b, LLVMValueRef x, const double *coeffs,
                         int n)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef y = ptc_ll_const(t, coeffs[0], 0);
    for (int i = 1; i < n; i++)
        y = ptc_ll_fmuladd(m, b, y, x, ptc_ll_const(t, coeffs[i], 0));
    return y;
}

/* Cephes' logf: x = 2^e m with m in [sqrt(1/2), sqrt(2)), log(m) from a
 * degree-9 polynomial in m - 1, e ln2 added in two parts. */
LLVMValueRef ptc_ll_log_f32(LLVMModuleRef mod, LLVMBuilderRef b, LLVMValueRef x)
{
    LLVMTypeRef ft = LLVMTypeOf(x);
    LLVMTypeRef it = lanes_of(x, LLVMInt32TypeInContext(LLVMGetTypeContext(ft)));
#define F(v) ptc_ll_const(ft, v, 0)
#define I(v) ptc_ll_const(it, 0, v)
    /* subnormals: scale into the normal range first */
    LLVMValueRef tiny = LLVMBuildFCmp(b, LLVMRealOLT, x, F(1.17549435e-38), "");
    LLVMValueRef xs = LLVMBuildSelect(b, tiny, LLVMBuildFMul(b, x, F(8388608.0), ""), x, "");
    LLVMValueRef ebias = LLVMBuildSelect(b, tiny, I(23), I(0), "");
    LLVMValueRef bits = LLVMBuildBitCast(b, xs, it, "");
    LLVMValueRef e = LLVMBuildLShr(b, bits, I(23), "");
    e = LLVMBuildAnd(b, e, I(0xff), "");
    e = LLVMBuildSub(b, e, I(126), "");
    e = LLVMBuildSub(b, e, ebias, "");
    LLVMValueRef mb = LLVMBuildAnd(b, bits, I(0x807fffff), "");
    mb = LLVMBuildOr(b, mb, I(0x3f000000), "");
    LLVMValueRef m = LLVMBuildBitCast(b, mb, ft, ""); /* [0.5, 1) */
    LLVMValueRef small = LLVMBuildFCmp(b, LLVMRealOLT, m, F(0.707106781186547524), "");
    e = LLVMBuildSelect(b, small, LLVMBuildSub(b, e, I(1), ""), e, "");
    m = LLVMBuildSelect(b, small, LLVMBuildFAdd(b, m, m, ""), m, "");
    m = LLVMBuildFSub(b, m, F(1.0), "");
    LLVMValueRef ef = LLVMBuildSIToFP(b, e, ft, "");
    static const double P[] = {7.0376836292E-2,  -1.1514610310E-1, 1.1676998740E-1,
                               -1.2420140846E-1, 1.4249322787E-1,  -1.6668057665E-1,
                               2.0000714765E-1,  -2.4999993993E-1, 3.3333331174E-1};
    LLVMValueRef z = LLVMBuildFMul(b, m, m, "");
    LLVMValueRef y = LLVMBuildFMul(b, LLVMBuildFMul(b, ptc_ll_poly(mod, b, m, P, 9), m, ""), z, "");
    y = ptc_ll_fmuladd(mod, b, ef, F(-2.12194440e-4), y);
    y = ptc_ll_fmuladd(mod, b, z, F(-0.5), y);
    LLVMValueRef r = LLVMBuildFAdd(b, m, y, "");
    r = ptc_ll_fmuladd(mod, b, ef, F(0.693359375), r);
    /* specials: x < 0 or nan -> nan, 0 -> -inf, inf -> inf */
    LLVMValueRef neg = LLVMBuildFCmp(b, LLVMRealULT, x, F(0.0), "");
    r = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, x, F(INFINITY), ""), x, r, "");
    r = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, x, F(0.0), ""), F(-INFINITY), r, "");
    return LLVMBuildSelect(b, neg, F(NAN), r, "");
#undef F
#undef I
}

/* ---- sin and cos as straight-line vector code ------------------------------------------ */

/* Sleef's single-precision sinf/cosf (u35): x = q pi + r (sin) or
 * x = q pi/2 + r with q odd (cos), |r| <= pi/2, pi split in three floats whose
 * products with q stay exact for |q| < 1024 without a fused multiply-add;
 * then one odd polynomial of r (to r^9) whose sign q decides. At most 2.5 ulp
 * off the exact result for |x| <= PTC_LL_SINCOS_RANGE (checked against f64
 * over 2M points per range, emulating unfused f32). */
LLVMValueRef ptc_ll_sincos(LLVMModuleRef m, LLVMBuilderRef b, LLVMValueRef x, bool cosine)
{
    static const double pi_parts[3] = {3.1414794921875, 0.00011315941810607910156,
                                       1.9841872589410058936e-09};
    static const double sin_poly[4] = {2.6083159809786593541503e-06, -0.0001981069071916863322258,
                                       0.00833307858556509017944336, -0.166666597127914428710938};
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMTypeRef it = lanes_of(x, LLVMInt32TypeInContext(LLVMGetTypeContext(t)));
    LLVMValueRef q = LLVMBuildFMul(b, x, ptc_ll_const(t, 0.318309886183790671538, 0), "");
    if (cosine) { /* the odd q nearest to x / (pi/2) */
        q = call1(m, b, "llvm.roundeven", LLVMBuildFSub(b, q, ptc_ll_const(t, 0.5, 0), ""));
        q = LLVMBuildFAdd(b, LLVMBuildFAdd(b, q, q, ""), ptc_ll_const(t, 1, 0), "");
    } else {
        q = call1(m, b, "llvm.roundeven", q);
    }
    LLVMValueRef r = x;
    for (int i = 0; i < 3; i++)
        r = ptc_ll_fmuladd(m, b, q, ptc_ll_const(t, -pi_parts[i] * (cosine ? 0.5 : 1), 0), r);
    LLVMValueRef s = LLVMBuildFMul(b, r, r, "");
    LLVMValueRef u = ptc_ll_poly(m, b, s, sin_poly, 4);
    LLVMValueRef v = ptc_ll_fmuladd(m, b, s, LLVMBuildFMul(b, u, r, ""), r);
    /* sin(q pi + r) = (-1)^q sin(r); cos(q pi/2 + r) = -sin(r) when q & 2 is
     * 0. q of a nan is frozen to some integer: the nan decides the result. */
    LLVMValueRef qi = LLVMBuildFreeze(b, LLVMBuildFPToSI(b, q, it, ""), "");
    LLVMValueRef bit = LLVMBuildAnd(b, qi, ptc_ll_const(it, 0, cosine ? 2 : 1), "");
    LLVMValueRef flip = LLVMBuildICmp(b, cosine ? LLVMIntEQ : LLVMIntNE, bit, ptc_ll_const(it, 0, 0), "");
    return LLVMBuildSelect(b, flip, LLVMBuildFNeg(b, v, ""), v, "");
}
