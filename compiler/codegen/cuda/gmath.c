/* Math for GPU kernels: the GPU has no libm, so every function is emitted
 * inline as straight-line code over f32 or f64 values of any vector width.
 *
 * f32 exp runs on the GPU's 2^x unit with an FMA correction (about 2 ulp);
 * f32 log is Cephes' logf, shared with the CPU backend (llmath.c), tanh is
 * Cephes' tanhf (about 1 ulp) and erf two fitted polynomials, the outer one
 * through 2^x (about 1.5 ulp). f64 exp and log reduce the argument
 * with fdlibm's split ln2 and sum Taylor / atanh series to 1e-17. The other
 * functions are built from those: log1p and expm1 with Goldberg's and Kahan's
 * corrections, tanh from expm1, sin and cos by reduction modulo pi/2 (in f64
 * for f32 arguments: accurate up to |x| ~ 1e6) and Taylor polynomials on
 * [-pi/4, pi/4], atan from two argument reductions and its series, pow as
 * exp(y log|x|) (in f64 for f32) with C99's special cases, f64 erf from the
 * positive series of erf(x) exp(x^2) and a continued fraction for erfc in
 * the tail. Normal draws of the counter RNG are ops.h's, bit for bit.
 */
#include "codegen/cuda/gpu.h"
#include "codegen/llmath.h"

#include <math.h>

static LLVMTypeRef scalar_of(LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMGetElementType(t) : t;
}

static bool is_f64(gcg *c, LLVMValueRef x)
{
    return scalar_of(x) == c->f64;
}

/* A constant of x's type and width. */
static LLVMValueRef K(LLVMValueRef x, double v)
{
    return g_const_f(scalar_of(x), v, g_width(x));
}

static LLVMValueRef fmuladd(gcg *c, LLVMValueRef a, LLVMValueRef b, LLVMValueRef d)
{
    return ptc_ll_fmuladd(c->mod, c->b, a, b, d);
}

static LLVMValueRef poly(gcg *c, LLVMValueRef x, const double *coeffs, int n)
{
    return ptc_ll_poly(c->mod, c->b, x, coeffs, n);
}

static LLVMValueRef f1(gcg *c, const char *intr, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    return g_intrinsic(c, intr, &t, 1, &x, 1);
}

static LLVMValueRef copysign_(gcg *c, LLVMValueRef mag, LLVMValueRef sgn)
{
    LLVMTypeRef t = LLVMTypeOf(mag);
    LLVMValueRef a[2] = {mag, sgn};
    return g_intrinsic(c, "llvm.copysign", &t, 1, a, 2);
}

static LLVMValueRef sel(gcg *c, LLVMValueRef cond, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(c->b, cond, a, b, "");
}

static LLVMValueRef fcmp(gcg *c, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildFCmp(c->b, p, a, b, "");
}

static LLVMValueRef fmul(gcg *c, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildFMul(c->b, a, b, "");
}
static LLVMValueRef fadd(gcg *c, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildFAdd(c->b, a, b, "");
}
static LLVMValueRef fsub(gcg *c, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildFSub(c->b, a, b, "");
}
static LLVMValueRef fdiv(gcg *c, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildFDiv(c->b, a, b, "");
}

static LLVMValueRef widen(gcg *c, LLVMValueRef x)
{
    return LLVMBuildFPExt(c->b, x, g_vec(c, c->f64, g_width(x)), "");
}

static LLVMValueRef narrow(gcg *c, LLVMValueRef x)
{
    return LLVMBuildFPTrunc(c->b, x, g_vec(c, c->f32, g_width(x)), "");
}

/* ---- f32 ---------------------------------------------------------------------------- */

/* An NVVM math instruction on every lane (the intrinsics are scalar). */
static LLVMValueRef nvvm1(gcg *c, const char *name, LLVMValueRef x)
{
    int w = g_width(x);
    if (w == 1)
        return g_intrinsic(c, name, NULL, 0, &x, 1);
    LLVMValueRef out = LLVMGetPoison(LLVMTypeOf(x));
    for (int i = 0; i < w; i++) {
        LLVMValueRef lane = LLVMConstInt(c->i32, (unsigned)i, 0);
        LLVMValueRef a = LLVMBuildExtractElement(c->b, x, lane, "");
        out = LLVMBuildInsertElement(c->b, out, g_intrinsic(c, name, NULL, 0, &a, 1), lane, "");
    }
    return out;
}

static LLVMValueRef fma_(gcg *c, LLVMValueRef a, LLVMValueRef b, LLVMValueRef d)
{
    LLVMTypeRef t = LLVMTypeOf(a);
    LLVMValueRef args[3] = {a, b, d};
    return g_intrinsic(c, "llvm.fma", &t, 1, args, 3);
}

/* 1/x to about 1 ulp (rcp.approx): for quotients inside math functions whose
 * own error is larger; user-visible divisions stay IEEE. */
static LLVMValueRef rcp_f32(gcg *c, LLVMValueRef x)
{
    return nvvm1(c, "llvm.nvvm.rcp.approx.ftz.f", x);
}

/* exp on the GPU's 2^x unit: t = x log2(e) rounded, r = 2^t (ex2.approx,
 * 2^-22 relative), then one FMA corrects r by the rounding error of t,
 * x log2(e) - t, formed exactly with two FMAs and a split log2(e). About
 * 2 ulp for every finite x; results below 2^-126 flush to 0. Ten
 * instructions where Cephes' expf takes thirty. */
static LLVMValueRef exp_f32(gcg *c, LLVMValueRef x)
{
    const double log2e = 1.44269504088896340736;
    const double hi = (double)(float)log2e, lo = log2e - hi;
    LLVMValueRef t = fmul(c, x, K(x, hi));
    LLVMValueRef r = nvvm1(c, "llvm.nvvm.ex2.approx.ftz.f", t);
    LLVMValueRef e = fma_(c, x, K(x, hi), LLVMBuildFNeg(c->b, t, ""));
    e = fma_(c, x, K(x, lo), e);
    /* near overflow, infinite or nan x: r as it is (inf * 0 would be nan) */
    LLVMValueRef fixed = fma_(c, r, fmul(c, e, K(x, 0.69314718055994530942)), r);
    return sel(c, fcmp(c, LLVMRealOLT, f1(c, "llvm.fabs", x), K(x, 88.0)), fixed, r);
}

static LLVMValueRef log_f32(gcg *c, LLVMValueRef x)
{
    return ptc_ll_log_f32(c->mod, c->b, x);
}

static LLVMValueRef tanh_f32(gcg *c, LLVMValueRef x)
{
    LLVMValueRef ax = f1(c, "llvm.fabs", x);
    static const double P[] = {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2,
                               1.33314422036E-1, -3.33332819422E-1};
    LLVMValueRef z = fmul(c, x, x);
    LLVMValueRef ps = fmuladd(c, fmul(c, poly(c, z, P, 5), z), x, x);
    LLVMValueRef e = exp_f32(c, fadd(c, ax, ax));
    LLVMValueRef t = fsub(c, K(x, 1.0), fmul(c, K(x, 2.0), rcp_f32(c, fadd(c, e, K(x, 1.0)))));
    return sel(c, fcmp(c, LLVMRealOLT, ax, K(x, 0.625)), ps, copysign_(c, t, x));
}

/* erf(x) = x + x p(x^2) for |x| < 0.92 and 1 - 2^q(t) beyond, t = min(|x|,
 * 3.92) (erf rounds to 1 in f32 from about there), with p of degree 6 and q
 * of degree 7 fitted by scripts/fit_erf_f32.py (weighted least squares
 * towards minimax). Both are computed and one selected: about twenty
 * instructions and one ex2 where the Taylor series, an erfc fit with its
 * reciprocal and a corrected exp took forty, which made gelu's bf16
 * kernels issue-bound. About 1.5 ulp with ex2.approx's error (1.05
 * without; the script measures both). A nan fails the ordered |x| >= 0.92 and takes the first form,
 * which carries it through. */
static LLVMValueRef erf_f32(gcg *c, LLVMValueRef x)
{
    static const double P[] = {8.40996072e-05, -0.000815263891, 0.00520196138, -0.0268597994,
                               0.112837031,    -0.376126349,    0.128379166};
    static const double Q[] = {-3.02466105e-05, 0.000624638109, -0.00600713538, 0.0362122618,
                               -0.156172872,    -0.913764715,   -1.62952673,    0.000248104683};
    LLVMValueRef ax = f1(c, "llvm.fabs", x);
    LLVMValueRef small = fmuladd(c, poly(c, fmul(c, x, x), P, 7), x, x);
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef lim[2] = {ax, K(x, 3.92)};
    LLVMValueRef tail = nvvm1(c, "llvm.nvvm.ex2.approx.ftz.f",
                              poly(c, g_intrinsic(c, "llvm.minnum", &t, 1, lim, 2), Q, 8));
    /* 1 - tail is in [0, 1]: x's sign bit or'ed in is copysign in one
     * instruction (llvm.copysign took three) */
    LLVMTypeRef it = g_vec(c, c->i32, g_width(x));
    LLVMValueRef sign = LLVMBuildAnd(c->b, LLVMBuildBitCast(c->b, x, it, ""),
                                     g_const_i(c->i32, (int64_t)0x80000000u, g_width(x)), "");
    LLVMValueRef mag = LLVMBuildBitCast(c->b, fsub(c, K(x, 1.0), tail), it, "");
    LLVMValueRef big = LLVMBuildBitCast(c->b, LLVMBuildOr(c->b, mag, sign, ""), t, "");
    return sel(c, fcmp(c, LLVMRealULT, ax, K(x, 0.92)), small, big);
}

/* 1 + erf(z) = erfc(-z), gelu's form, in one evaluation: with a = |z|,
 * erfc(a) = 2^r(a), r a degree-9 fit of log2(erfc) on [0, 5] by
 * scripts/fit_erf_f32.py, continued past 5 by its slope there (so that
 * infinity gives 0 and NaN stays NaN); then erfc(-z) is erfc(a) for z < 0
 * and 2 - erfc(a) otherwise. Error: 3e-6 relative for every z (r's fit;
 * about 50 f32 ulp near 1), where 1 + erf(z) is only 6e-8 absolute, which
 * is all of the result below z = -4 (erfc(4) = 1.5e-8). */
LLVMValueRef g_one_plus_erf(gcg *c, LLVMValueRef z)
{
    static const double R[] = {3.83857895e-07, -7.481186e-06, 3.99133023e-05, 0.000227908648,
                               -0.0045915097,  0.0330325477,  -0.151792452,   -0.917271376,
                               -1.62806094,    3.33293792e-06};
    static const double END = 5.0, SLOPE = -14.7049578;
    LLVMTypeRef t = LLVMTypeOf(z);
    LLVMValueRef a = f1(c, "llvm.fabs", z);
    LLVMValueRef lim[2] = {a, K(z, END)};
    LLVMValueRef in = g_intrinsic(c, "llvm.minnum", &t, 1, lim, 2);
    LLVMValueRef r = fmuladd(c, fsub(c, a, in), K(z, SLOPE), poly(c, in, R, 10));
    LLVMValueRef e = nvvm1(c, "llvm.nvvm.ex2.approx.ftz.f", r);
    return sel(c, fcmp(c, LLVMRealOLT, z, K(z, 0.0)), e, fsub(c, K(z, 2.0), e));
}

/* ---- f64 exp and log ----------------------------------------------------------------- */

static const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;

/* 2^n for integer-valued f64 n in [-1022, 1023]. */
static LLVMValueRef pow2i_f64(gcg *c, LLVMValueRef nf)
{
    int w = g_width(nf);
    LLVMValueRef n = LLVMBuildFPToSI(c->b, nf, g_vec(c, c->i64, w), "");
    LLVMValueRef e = LLVMBuildAdd(c->b, n, g_const_i(c->i64, 1023, w), "");
    e = LLVMBuildShl(c->b, e, g_const_i(c->i64, 52, w), "");
    return LLVMBuildBitCast(c->b, e, g_vec(c, c->f64, w), "");
}

static LLVMValueRef exp_f64(gcg *c, LLVMValueRef x)
{
    LLVMValueRef isnan = ptc_ll_isnan(c->b, x);
    LLVMValueRef xc = sel(c, fcmp(c, LLVMRealOGT, x, K(x, 709.8)), K(x, 709.8), x);
    xc = sel(c, fcmp(c, LLVMRealOLT, xc, K(x, -745.2)), K(x, -745.2), xc);
    xc = sel(c, isnan, K(x, 0.0), xc);
    LLVMValueRef n = f1(c, "llvm.roundeven", fmul(c, xc, K(x, 1.4426950408889634074)));
    LLVMValueRef r = fmuladd(c, n, K(x, -LN2_HI), xc);
    r = fmuladd(c, n, K(x, -LN2_LO), r);
    /* sum r^k / k! for k <= 14 (|r| <= ln2/2) */
    double coef[15];
    double f = 1;
    for (int k = 0; k <= 14; k++) {
        coef[14 - k] = 1.0 / f;
        f *= k + 1;
    }
    LLVMValueRef y = poly(c, r, coef, 15);
    /* scale in two halves so that results reach the subnormals */
    LLVMValueRef n1 = f1(c, "llvm.floor", fmul(c, n, K(x, 0.5)));
    LLVMValueRef n2 = fsub(c, n, n1);
    y = fmul(c, fmul(c, y, pow2i_f64(c, n1)), pow2i_f64(c, n2));
    y = sel(c, fcmp(c, LLVMRealOGT, x, K(x, 709.782712893384)), K(x, INFINITY), y);
    y = sel(c, fcmp(c, LLVMRealOLT, x, K(x, -745.2)), K(x, 0.0), y);
    return sel(c, isnan, x, y);
}

static LLVMValueRef log_f64(gcg *c, LLVMValueRef x)
{
    int w = g_width(x);
    LLVMBuilderRef b = c->b;
    LLVMTypeRef it = g_vec(c, c->i64, w), ft = g_vec(c, c->f64, w);
    LLVMValueRef tiny = fcmp(c, LLVMRealOLT, x, K(x, 2.2250738585072014e-308));
    LLVMValueRef xs = sel(c, tiny, fmul(c, x, K(x, 4503599627370496.0)), x); /* 2^52 */
    LLVMValueRef ebias = sel(c, tiny, g_const_i(c->i64, 52, w), g_const_i(c->i64, 0, w));
    LLVMValueRef bits = LLVMBuildBitCast(b, xs, it, "");
    LLVMValueRef e = LLVMBuildAnd(b, LLVMBuildLShr(b, bits, g_const_i(c->i64, 52, w), ""),
                                  g_const_i(c->i64, 0x7ff, w), "");
    e = LLVMBuildSub(b, LLVMBuildSub(b, e, g_const_i(c->i64, 1022, w), ""), ebias, "");
    LLVMValueRef mb =
        LLVMBuildAnd(b, bits, g_const_i(c->i64, (int64_t)0x800fffffffffffffULL, w), "");
    mb = LLVMBuildOr(b, mb, g_const_i(c->i64, 0x3fe0000000000000LL, w), "");
    LLVMValueRef m = LLVMBuildBitCast(b, mb, ft, ""); /* [0.5, 1) */
    LLVMValueRef small = fcmp(c, LLVMRealOLT, m, K(x, 0.70710678118654752440));
    e = sel(c, small, LLVMBuildSub(b, e, g_const_i(c->i64, 1, w), ""), e);
    m = sel(c, small, fadd(c, m, m), m); /* [sqrt(1/2), sqrt(2)) */
    /* log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716 */
    LLVMValueRef s = fdiv(c, fsub(c, m, K(x, 1.0)), fadd(c, m, K(x, 1.0)));
    LLVMValueRef z = fmul(c, s, s);
    double coef[11];
    for (int k = 0; k <= 10; k++)
        coef[10 - k] = 2.0 / (2 * k + 1);
    LLVMValueRef lm = fmul(c, s, poly(c, z, coef, 11));
    LLVMValueRef ef = LLVMBuildSIToFP(b, e, ft, "");
    LLVMValueRef r = fadd(c, fmuladd(c, ef, K(x, LN2_LO), lm), fmul(c, ef, K(x, LN2_HI)));
    LLVMValueRef neg = fcmp(c, LLVMRealULT, x, K(x, 0.0));
    r = sel(c, fcmp(c, LLVMRealOEQ, x, K(x, INFINITY)), x, r);
    r = sel(c, fcmp(c, LLVMRealOEQ, x, K(x, 0.0)), K(x, -INFINITY), r);
    return sel(c, neg, K(x, NAN), r);
}

LLVMValueRef g_exp(gcg *c, LLVMValueRef x)
{
    return is_f64(c, x) ? exp_f64(c, x) : exp_f32(c, x);
}
LLVMValueRef g_log(gcg *c, LLVMValueRef x)
{
    return is_f64(c, x) ? log_f64(c, x) : log_f32(c, x);
}

/* ---- derived functions ------------------------------------------------------------------ */

/* log1p: Goldberg's log(u) * x / (u - 1), u = 1 + x. */
LLVMValueRef g_log1p(gcg *c, LLVMValueRef x)
{
    LLVMValueRef u = fadd(c, x, K(x, 1.0));
    LLVMValueRef um1 = fsub(c, u, K(x, 1.0));
    LLVMValueRef r = fdiv(c, fmul(c, g_log(c, u), x), um1);
    r = sel(c, fcmp(c, LLVMRealOEQ, um1, K(x, 0.0)), x, r);
    r = sel(c, fcmp(c, LLVMRealOEQ, u, K(x, 0.0)), K(x, -INFINITY), r);
    return sel(c, fcmp(c, LLVMRealOEQ, x, K(x, INFINITY)), x, r);
}

/* expm1: Kahan's (u - 1) * x / log(u), u = exp(x), for |x| < 0.5; exp(x) - 1
 * beyond. */
LLVMValueRef g_expm1(gcg *c, LLVMValueRef x)
{
    LLVMValueRef u = g_exp(c, x);
    LLVMValueRef um1 = fsub(c, u, K(x, 1.0));
    LLVMValueRef r = fdiv(c, fmul(c, um1, x), g_log(c, u));
    r = sel(c, fcmp(c, LLVMRealOEQ, u, K(x, 1.0)), x, r);
    r = sel(c, fcmp(c, LLVMRealOLT, f1(c, "llvm.fabs", x), K(x, 0.5)), r, um1);
    return sel(c, ptc_ll_isnan(c->b, x), x, r);
}

LLVMValueRef g_tanh(gcg *c, LLVMValueRef x)
{
    if (!is_f64(c, x))
        return tanh_f32(c, x);
    /* tanh(x) = e / (e + 2), e = expm1(2x); +-1 beyond |x| = 22 */
    LLVMValueRef e = g_expm1(c, fadd(c, x, x));
    LLVMValueRef r = fdiv(c, e, fadd(c, e, K(x, 2.0)));
    LLVMValueRef big = fcmp(c, LLVMRealOGT, f1(c, "llvm.fabs", x), K(x, 22.0));
    r = sel(c, big, copysign_(c, K(x, 1.0), x), r);
    return sel(c, ptc_ll_isnan(c->b, x), x, r);
}

/* f64 erf for one scalar: 2/sqrt(pi) x exp(-x^2) sum (2x^2)^n / (2n+1)!!
 * (positive terms) for |x| < 3, 1 - erfc with a continued fraction beyond,
 * +-1 from |x| >= 6. A helper function with loops, called lane by lane. */
static LLVMValueRef erf_f64_fn(gcg *c)
{
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, "ptc.erf.f64");
    if (fn)
        return fn;
    LLVMTypeRef t = c->f64;
    LLVMTypeRef ft = LLVMFunctionType(t, &t, 1, 0);
    fn = LLVMAddFunction(c->mod, "ptc.erf.f64", ft);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    LLVMBuilderRef saved = c->b;
    LLVMValueRef saved_fn = c->fn;
    c->b = LLVMCreateBuilderInContext(c->ctx);
    c->fn = fn;
    LLVMBuilderRef b = c->b;
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c->ctx, fn, "entry");
    LLVMBasicBlockRef ser = LLVMAppendBasicBlockInContext(c->ctx, fn, "series");
    LLVMBasicBlockRef ser_done = LLVMAppendBasicBlockInContext(c->ctx, fn, "series.done");
    LLVMBasicBlockRef cf = LLVMAppendBasicBlockInContext(c->ctx, fn, "cfrac");
    LLVMBasicBlockRef cf_done = LLVMAppendBasicBlockInContext(c->ctx, fn, "cfrac.done");
    LLVMPositionBuilderAtEnd(b, entry);
    LLVMValueRef x = LLVMGetParam(fn, 0);
    LLVMValueRef ax = f1(c, "llvm.fabs", x);
    LLVMValueRef ex = exp_f64(c, LLVMBuildFNeg(b, fmul(c, ax, ax), ""));
    LLVMBuildCondBr(b, fcmp(c, LLVMRealOLT, ax, K(x, 3.0)), ser, cf);
    /* series: term_{n+1} = term_n * 2x^2 / (2n+3), 80 terms reach 1e-17 at 3 */
    LLVMPositionBuilderAtEnd(b, ser);
    LLVMValueRef n = LLVMBuildPhi(b, t, "n"), term = LLVMBuildPhi(b, t, "term"),
                 sum = LLVMBuildPhi(b, t, "sum");
    LLVMValueRef zero = K(x, 0.0);
    LLVMAddIncoming(n, &zero, &entry, 1);
    LLVMAddIncoming(term, &ax, &entry, 1);
    LLVMAddIncoming(sum, &zero, &entry, 1);
    LLVMValueRef sum2 = fadd(c, sum, term);
    LLVMValueRef x2 = fmul(c, fmul(c, ax, ax), K(x, 2.0));
    LLVMValueRef term2 = fdiv(c, fmul(c, term, x2), fadd(c, fmul(c, n, K(x, 2.0)), K(x, 3.0)));
    LLVMValueRef n2 = fadd(c, n, K(x, 1.0));
    LLVMAddIncoming(n, &n2, &ser, 1);
    LLVMAddIncoming(term, &term2, &ser, 1);
    LLVMAddIncoming(sum, &sum2, &ser, 1);
    LLVMValueRef more = fcmp(c, LLVMRealOGT, term2, fmul(c, sum2, K(x, 1e-17)));
    more = LLVMBuildAnd(b, more, fcmp(c, LLVMRealOLT, n2, K(x, 200.0)), "");
    LLVMBuildCondBr(b, more, ser, ser_done);
    LLVMPositionBuilderAtEnd(b, ser_done);
    LLVMValueRef rs = fmul(c, fmul(c, sum2, ex), K(x, 1.12837916709551257390));
    LLVMBuildRet(b, copysign_(c, sel(c, ptc_ll_isnan(c->b, x), x, rs), x));
    /* erfc(a) = exp(-a^2)/sqrt(pi) / (a + 1/2 / (a + 1 / (a + 3/2 / (a + ...)))),
     * evaluated bottom-up from 60 levels */
    LLVMPositionBuilderAtEnd(b, cf);
    LLVMValueRef k = LLVMBuildPhi(b, t, "k"), tail = LLVMBuildPhi(b, t, "tail");
    LLVMValueRef k0 = K(x, 60.0);
    LLVMAddIncoming(k, &k0, &entry, 1);
    LLVMAddIncoming(tail, &ax, &entry, 1);
    LLVMValueRef tail2 = fadd(c, ax, fdiv(c, fmul(c, k, K(x, 0.5)), tail));
    LLVMValueRef k2 = fsub(c, k, K(x, 1.0));
    LLVMAddIncoming(k, &k2, &cf, 1);
    LLVMAddIncoming(tail, &tail2, &cf, 1);
    LLVMBuildCondBr(b, fcmp(c, LLVMRealOGT, k2, K(x, 0.5)), cf, cf_done);
    LLVMPositionBuilderAtEnd(b, cf_done);
    LLVMValueRef erfc = fdiv(c, fmul(c, ex, K(x, 0.56418958354775628695)), tail2);
    LLVMValueRef rc = fsub(c, K(x, 1.0), erfc);
    rc = sel(c, fcmp(c, LLVMRealOGE, ax, K(x, 6.0)), K(x, 1.0), rc);
    LLVMBuildRet(b, copysign_(c, rc, x));
    LLVMDisposeBuilder(c->b);
    c->b = saved;
    c->fn = saved_fn;
    return fn;
}

static LLVMValueRef per_lane(gcg *c, LLVMValueRef fn, LLVMValueRef x)
{
    LLVMTypeRef t = c->f64;
    LLVMTypeRef ft = LLVMFunctionType(t, &t, 1, 0);
    int w = g_width(x);
    if (w == 1)
        return LLVMBuildCall2(c->b, ft, fn, &x, 1, "");
    LLVMValueRef out = LLVMGetPoison(LLVMTypeOf(x));
    for (int i = 0; i < w; i++) {
        LLVMValueRef lane = LLVMConstInt(c->i32, (unsigned)i, 0);
        LLVMValueRef a = LLVMBuildExtractElement(c->b, x, lane, "");
        out = LLVMBuildInsertElement(c->b, out, LLVMBuildCall2(c->b, ft, fn, &a, 1, ""), lane, "");
    }
    return out;
}

LLVMValueRef g_erf(gcg *c, LLVMValueRef x)
{
    return is_f64(c, x) ? per_lane(c, erf_f64_fn(c), x) : erf_f32(c, x);
}

/* sin and cos: x = n pi/2 + r, |r| <= pi/4, then Taylor polynomials. */
static void sincos_reduce(gcg *c, LLVMValueRef x, LLVMValueRef *r, LLVMValueRef *quad)
{
    bool d = is_f64(c, x);
    LLVMValueRef xd = d ? x : widen(c, x);
    LLVMValueRef n = f1(c, "llvm.roundeven", fmul(c, xd, K(xd, 0.63661977236758134308)));
    /* pi/2 in three parts (fdlibm's pio2_1, pio2_2, pio2_2t) */
    LLVMValueRef rr = fmuladd(c, n, K(xd, -1.57079632673412561417e+00), xd);
    rr = fmuladd(c, n, K(xd, -6.07710050630396597660e-11), rr);
    rr = fmuladd(c, n, K(xd, -2.02226624879595063154e-21), rr);
    *r = d ? rr : narrow(c, rr);
    /* quadrant: n mod 4 from a finite integer-valued double */
    LLVMValueRef ni = LLVMBuildFPToSI(
        c->b, sel(c, fcmp(c, LLVMRealOLT, f1(c, "llvm.fabs", n), K(n, 9.0e15)), n, K(n, 0.0)),
        g_vec(c, c->i64, g_width(x)), "");
    *quad = LLVMBuildAnd(c->b, ni, g_const_i(c->i64, 3, g_width(x)), "");
}

static LLVMValueRef sin_poly(gcg *c, LLVMValueRef r)
{
    int terms = is_f64(c, r) ? 9 : 5; /* up to r^17 / r^9 */
    double coef[9];
    double f = 1;
    for (int k = 0; k < terms; k++) {
        coef[terms - 1 - k] = (k % 2 ? -1.0 : 1.0) / f;
        f *= (2 * k + 2) * (2 * k + 3);
    }
    LLVMValueRef z = fmul(c, r, r);
    return fmul(c, poly(c, z, coef, terms), r);
}

static LLVMValueRef cos_poly(gcg *c, LLVMValueRef r)
{
    int terms = is_f64(c, r) ? 10 : 6; /* up to r^18 / r^10 */
    double coef[10];
    double f = 1;
    for (int k = 0; k < terms; k++) {
        coef[terms - 1 - k] = (k % 2 ? -1.0 : 1.0) / f;
        f *= (2 * k + 1) * (2 * k + 2);
    }
    return poly(c, fmul(c, r, r), coef, terms);
}

static LLVMValueRef sincos_(gcg *c, LLVMValueRef x, bool cosine)
{
    LLVMValueRef r, q;
    sincos_reduce(c, x, &r, &q);
    int w = g_width(x);
    LLVMValueRef s = sin_poly(c, r), co = cos_poly(c, r);
    if (cosine)
        q = LLVMBuildAnd(c->b, LLVMBuildAdd(c->b, q, g_const_i(c->i64, 1, w), ""),
                         g_const_i(c->i64, 3, w), "");
    /* sin(n pi/2 + r): q 0: s, 1: c, 2: -s, 3: -c */
    LLVMValueRef odd = LLVMBuildTrunc(c->b, q, g_vec(c, c->i1, w), "");
    LLVMValueRef neg = LLVMBuildICmp(c->b, LLVMIntUGE, q, g_const_i(c->i64, 2, w), "");
    LLVMValueRef v = sel(c, odd, co, s);
    v = sel(c, neg, LLVMBuildFNeg(c->b, v, ""), v);
    /* infinities and nan give nan (the reduction already does for nan) */
    LLVMValueRef inf = fcmp(c, LLVMRealOEQ, f1(c, "llvm.fabs", x), K(x, INFINITY));
    return sel(c, inf, K(x, NAN), v);
}

LLVMValueRef g_sin(gcg *c, LLVMValueRef x)
{
    return sincos_(c, x, false);
}
LLVMValueRef g_cos(gcg *c, LLVMValueRef x)
{
    return sincos_(c, x, true);
}

/* atan of a in [0, 1]: atan(a) = pi/6 + atan((a sqrt3 - 1) / (a + sqrt3)) when
 * a > 2 - sqrt3, leaving |t| <= 0.268 for the series. */
static LLVMValueRef atan01(gcg *c, LLVMValueRef a)
{
    LLVMValueRef big = fcmp(c, LLVMRealOGT, a, K(a, 0.26794919243112270647));
    LLVMValueRef s3 = K(a, 1.73205080756887729353);
    LLVMValueRef t2 = fdiv(c, fmuladd(c, a, s3, K(a, -1.0)), fadd(c, a, s3));
    LLVMValueRef t = sel(c, big, t2, a);
    int terms = is_f64(c, a) ? 15 : 8;
    double coef[15];
    for (int k = 0; k < terms; k++)
        coef[terms - 1 - k] = (k % 2 ? -1.0 : 1.0) / (2 * k + 1);
    LLVMValueRef v = fmul(c, poly(c, fmul(c, t, t), coef, terms), t);
    return sel(c, big, fadd(c, v, K(a, 0.52359877559829887308)), v);
}

LLVMValueRef g_atan2(gcg *c, LLVMValueRef y, LLVMValueRef x)
{
    LLVMBuilderRef b = c->b;
    LLVMValueRef ay = f1(c, "llvm.fabs", y), ax = f1(c, "llvm.fabs", x);
    LLVMValueRef swap = fcmp(c, LLVMRealOGT, ay, ax);
    LLVMValueRef num = sel(c, swap, ax, ay), den = sel(c, swap, ay, ax);
    LLVMValueRef q = fdiv(c, num, den);
    /* both infinite: 1; both zero: 0 */
    LLVMValueRef both_inf = LLVMBuildAnd(b, fcmp(c, LLVMRealOEQ, ay, K(y, INFINITY)),
                                         fcmp(c, LLVMRealOEQ, ax, K(x, INFINITY)), "");
    q = sel(c, both_inf, K(y, 1.0), q);
    q = sel(c, fcmp(c, LLVMRealOEQ, den, K(y, 0.0)), K(y, 0.0), q);
    LLVMValueRef a = atan01(c, q);
    a = sel(c, swap, fsub(c, K(y, 1.57079632679489661923), a), a);
    /* x negative (or -0): pi - a */
    LLVMValueRef xi =
        LLVMBuildBitCast(b, x, g_vec(c, is_f64(c, x) ? c->i64 : c->i32, g_width(x)), "");
    LLVMValueRef xneg = LLVMBuildICmp(b, LLVMIntSLT, xi, LLVMConstNull(LLVMTypeOf(xi)), "");
    a = sel(c, xneg, fsub(c, K(y, 3.14159265358979323846), a), a);
    LLVMValueRef r = copysign_(c, a, y);
    LLVMValueRef nan = LLVMBuildOr(b, ptc_ll_isnan(c->b, x), ptc_ll_isnan(c->b, y), "");
    return sel(c, nan, K(y, NAN), r);
}

/* pow(x, y) = exp(y log|x|) with the sign and special cases of C99. */
LLVMValueRef g_pow(gcg *c, LLVMValueRef x, LLVMValueRef y)
{
    LLVMBuilderRef b = c->b;
    bool d = is_f64(c, x);
    LLVMValueRef xd = d ? x : widen(c, x), yd = d ? y : widen(c, y);
    LLVMValueRef ax = f1(c, "llvm.fabs", xd);
    LLVMValueRef r = exp_f64(c, fmul(c, yd, log_f64(c, ax)));
    LLVMValueRef yint = fcmp(c, LLVMRealOEQ, f1(c, "llvm.floor", yd), yd);
    LLVMValueRef half = fmul(c, yd, K(yd, 0.5));
    LLVMValueRef yodd =
        LLVMBuildAnd(b, yint, fcmp(c, LLVMRealONE, f1(c, "llvm.floor", half), half), "");
    LLVMValueRef xi = LLVMBuildBitCast(b, xd, g_vec(c, c->i64, g_width(x)), "");
    LLVMValueRef xneg = LLVMBuildICmp(b, LLVMIntSLT, xi, LLVMConstNull(LLVMTypeOf(xi)), "");
    /* negative base: odd integer exponent flips the sign, non-integer is nan */
    r = sel(c, LLVMBuildAnd(b, xneg, yodd, ""), LLVMBuildFNeg(b, r, ""), r);
    LLVMValueRef yinf = fcmp(c, LLVMRealOEQ, f1(c, "llvm.fabs", yd), K(yd, INFINITY));
    LLVMValueRef bad = LLVMBuildAnd(b, fcmp(c, LLVMRealOLT, xd, K(xd, 0.0)),
                                    LLVMBuildNot(b, LLVMBuildOr(b, yint, yinf, ""), ""), "");
    r = sel(c, bad, K(xd, NAN), r);
    /* |x| == 1 with infinite y, and y == 0 (even for nan x), give 1; x == 1 too */
    LLVMValueRef one = LLVMBuildAnd(b, fcmp(c, LLVMRealOEQ, ax, K(xd, 1.0)), yinf, "");
    one = LLVMBuildOr(b, one, fcmp(c, LLVMRealOEQ, yd, K(yd, 0.0)), "");
    one = LLVMBuildOr(b, one, fcmp(c, LLVMRealOEQ, xd, K(xd, 1.0)), "");
    r = sel(c, one, K(xd, 1.0), r);
    return d ? r : narrow(c, r);
}

/* ---- normal draws of the counter RNG (ops.h; uniform ones are body.c's) ---------------- */

/* ptc_rng_normal: sqrtf(-2 logf(1 - u0)) * cosf(2 pi u1). */
LLVMValueRef g_randn(gcg *c, LLVMValueRef key, LLVMValueRef idx)
{
    int w = g_width(idx);
    LLVMBuilderRef b = c->b;
    LLVMValueRef i2 = LLVMBuildShl(b, idx, g_const_i(c->i64, 1, w), "");
    LLVMValueRef u0 = ptc_emit_rng_uniform(&c->em, key, i2);
    LLVMValueRef u1 =
        ptc_emit_rng_uniform(&c->em, key, LLVMBuildAdd(b, i2, g_const_i(c->i64, 1, w), ""));
    LLVMValueRef lg = log_f32(c, fsub(c, g_const_f(c->f32, 1.0, w), u0));
    LLVMValueRef r = f1(c, "llvm.sqrt", fmul(c, g_const_f(c->f32, -2.0, w), lg));
    LLVMValueRef ang = fmul(c, g_const_f(c->f32, 6.28318530717958648, w), u1);
    return fmul(c, r, g_cos(c, ang));
}
