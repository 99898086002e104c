/* Vectorisable math for generated kernels.
 *
 * Calls to libm cannot be vectorised, so the f32 functions that dominate
 * real models (exp, log, tanh, erf) are emitted inline as straight-line
 * polynomial code that works on any vector width: Cephes' expf and logf
 * approximations (about 1 ulp; logf is shared with the GPU, llmath.c), log1p and expm1 built on
 * them without cancellation, and Eigen's odd rational approximations of tanh and erf (relative
 * error below 5e-7, one division, no branches). Special values (nan, +-inf, overflow, gradual
 * underflow) are handled with selects, never branches. f64 goes to libm lane by lane. Normal draws
 * of the counter RNG use libm's logf and cosf, bit for bit with the reference.
 */
#include "codegen/cpu/cpu.h"
#include "codegen/llmath.h"

#include <math.h>

static int width_of(LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? (int)LLVMGetVectorSize(t) : 1;
}

static LLVMValueRef fk(cg *c, double v, int w) { return cg_const_f(c, c->f32, v, w); }
static LLVMValueRef ik(cg *c, int64_t v, int w) { return cg_const_i(c, c->i32, v, w); }

static LLVMValueRef fmuladd(cg *c, LLVMValueRef a, LLVMValueRef b, LLVMValueRef d)
{
    return ptc_ll_fmuladd(c->mod, c->b, a, b, d);
}

static LLVMValueRef poly(cg *c, LLVMValueRef x, const double *coeffs, int n)
{
    return ptc_ll_poly(c->mod, c->b, x, coeffs, n);
}

static LLVMValueRef fabs_(cg *c, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    return cg_call_intrinsic(c, "llvm.fabs", &t, 1, &x, 1);
}

static LLVMValueRef select_(cg *c, LLVMValueRef cond, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(c->b, cond, a, b, "");
}

/* 2^n for integer n in [-126, 127] (i32 lanes) as float. */
static LLVMValueRef pow2i(cg *c, LLVMValueRef n)
{
    int w = width_of(n);
    LLVMValueRef e = LLVMBuildAdd(c->b, n, ik(c, 127, w), "");
    e = LLVMBuildShl(c->b, e, ik(c, 23, w), "");
    return LLVMBuildBitCast(c->b, e, cg_vec(c, c->f32, w), "");
}

static LLVMValueRef exp_f32(cg *c, LLVMValueRef x)
{
    int w = width_of(x);
    LLVMBuilderRef b = c->b;
    /* clamp so that the exponent stays representable (a nan passes through
     * and stays nan through the polynomial) */
    LLVMValueRef xc = select_(c, LLVMBuildFCmp(b, LLVMRealOGT, x, fk(c, 89.0, w), ""),
                              fk(c, 89.0, w), x);
    xc = select_(c, LLVMBuildFCmp(b, LLVMRealOLT, xc, fk(c, -104.0, w), ""), fk(c, -104.0, w),
                 xc);
    LLVMValueRef fx = LLVMBuildFMul(b, xc, fk(c, 1.44269504088896341, w), "");
    LLVMTypeRef ft = LLVMTypeOf(fx);
    fx = cg_call_intrinsic(c, "llvm.roundeven", &ft, 1, &fx, 1);
    LLVMValueRef r = fmuladd(c, fx, fk(c, -0.693359375, w), xc);
    r = fmuladd(c, fx, fk(c, 2.12194440e-4, w), r);
    static const double P[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                               4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
    LLVMValueRef p = poly(c, r, P, 6);
    LLVMValueRef r2 = LLVMBuildFMul(b, r, r, "");
    LLVMValueRef y = fmuladd(c, p, r2, LLVMBuildFAdd(b, r, fk(c, 1.0, w), ""));
    /* scale by 2^n in two halves so that results reach the subnormals, and
     * overflow to inf past 88.72 by themselves; n of a nan is frozen to some
     * integer (the nan in y decides the result) */
    LLVMValueRef n = LLVMBuildFreeze(b, LLVMBuildFPToSI(b, fx, cg_vec(c, c->i32, w), ""), "");
    LLVMValueRef n1 = LLVMBuildAShr(b, n, ik(c, 1, w), "");
    LLVMValueRef n2 = LLVMBuildSub(b, n, n1, "");
    y = LLVMBuildFMul(b, y, pow2i(c, n1), "");
    return LLVMBuildFMul(b, y, pow2i(c, n2), "");
}

/* clamp(x, -m, m) with compares and selects, so a nan passes through. */
static LLVMValueRef clampm(cg *c, LLVMValueRef x, double m)
{
    int w = width_of(x);
    LLVMBuilderRef b = c->b;
    LLVMValueRef r = select_(c, LLVMBuildFCmp(b, LLVMRealOGT, x, fk(c, m, w), ""), fk(c, m, w), x);
    return select_(c, LLVMBuildFCmp(b, LLVMRealOLT, r, fk(c, -m, w), ""), fk(c, -m, w), r);
}

/* x * P(x^2) / Q(x^2): the odd rational forms of Eigen's fast tanh and erf. */
static LLVMValueRef odd_rational(cg *c, LLVMValueRef x, const double *p, int np, const double *q, int nq)
{
    LLVMValueRef x2 = LLVMBuildFMul(c->b, x, x, "");
    LLVMValueRef num = LLVMBuildFMul(c->b, poly(c, x2, p, np), x, "");
    return LLVMBuildFDiv(c->b, num, poly(c, x2, q, nq), "");
}

/* tanh: a 13/6 rational on [-7.9, 7.9] (Eigen; relative error < 4e-7 in
 * f32), +-1 beyond, x itself near 0. */
static LLVMValueRef tanh_f32(cg *c, LLVMValueRef x)
{
    static const double P[] = {-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                               5.12229709037114e-08,  1.48572235717979e-05, 6.37261928875436e-04,
                               4.89352455891786e-03};
    static const double Q[] = {1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                               4.89352518554385e-03};
    int w = width_of(x);
    LLVMValueRef xc = clampm(c, x, 7.90531110763549805);
    LLVMValueRef r = odd_rational(c, xc, P, 7, Q, 4);
    LLVMValueRef tiny = LLVMBuildFCmp(c->b, LLVMRealOLT, fabs_(c, x), fk(c, 0.0004, w), "");
    return select_(c, tiny, x, r);
}

/* erf: a 13/8 rational on [-4, 4] (Eigen; relative error < 5e-7 in f32),
 * +-1 beyond. */
static LLVMValueRef erf_f32(cg *c, LLVMValueRef x)
{
    static const double P[] = {-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                               -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                               -1.60960333262415e-02};
    static const double Q[] = {-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                               -7.37332916720468e-03, -1.42647390514189e-02};
    return odd_rational(c, clampm(c, x, 4.0), P, 7, Q, 5);
}

/* log1p(x) = log(u) - ((u - 1) - x) / u with u = 1 + x: the correction
 * restores what rounding u lost (Goldberg), so small x keeps full precision;
 * u == 1 exactly gives x itself. */
static LLVMValueRef log1p_f32(cg *c, LLVMValueRef x)
{
    int w = width_of(x);
    LLVMBuilderRef b = c->b;
    LLVMValueRef one = fk(c, 1.0, w);
    LLVMValueRef u = LLVMBuildFAdd(b, x, one, "");
    LLVMValueRef corr = LLVMBuildFDiv(b, LLVMBuildFSub(b, LLVMBuildFSub(b, u, one, ""), x, ""), u, "");
    LLVMValueRef r = LLVMBuildFSub(b, ptc_ll_log_f32(c->mod, c->b, u), corr, "");
    LLVMValueRef exact = LLVMBuildFCmp(b, LLVMRealOEQ, u, one, "");
    r = select_(c, exact, x, r);
    /* u = inf: log(inf) = inf, the correction is nan */
    return select_(c, LLVMBuildFCmp(b, LLVMRealOEQ, u, fk(c, INFINITY, w), ""), u, r);
}

/* expm1: a Taylor series below 1/4 in magnitude (relative error < 1e-9),
 * exp(x) - 1 above (no cancellation left there). */
static LLVMValueRef expm1_f32(cg *c, LLVMValueRef x)
{
    int w = width_of(x);
    LLVMBuilderRef b = c->b;
    static const double T[] = {1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0};
    LLVMValueRef small = LLVMBuildFMul(b, poly(c, x, T, 7), x, "");
    LLVMValueRef big = LLVMBuildFSub(b, exp_f32(c, x), fk(c, 1.0, w), "");
    LLVMValueRef ax = fabs_(c, x);
    return select_(c, LLVMBuildFCmp(b, LLVMRealOLT, ax, fk(c, 0.25, w), ""), small, big);
}

LLVMValueRef cg_log1p(cg *c, LLVMValueRef x, ptc_dtype dt)
{
    if (dt == PTC_F64)
        return cg_libm(c, "log1p", c->f64, &x, 1);
    return log1p_f32(c, x);
}

LLVMValueRef cg_expm1(cg *c, LLVMValueRef x, ptc_dtype dt)
{
    if (dt == PTC_F64)
        return cg_libm(c, "expm1", c->f64, &x, 1);
    return expm1_f32(c, x);
}

LLVMValueRef cg_exp(cg *c, LLVMValueRef x, ptc_dtype dt)
{
    if (dt == PTC_F64)
        return cg_libm(c, "exp", c->f64, &x, 1);
    return exp_f32(c, x);
}

LLVMValueRef cg_log(cg *c, LLVMValueRef x, ptc_dtype dt)
{
    if (dt == PTC_F64)
        return cg_libm(c, "log", c->f64, &x, 1);
    return ptc_ll_log_f32(c->mod, c->b, x);
}

LLVMValueRef cg_tanh(cg *c, LLVMValueRef x, ptc_dtype dt)
{
    if (dt == PTC_F64)
        return cg_libm(c, "tanh", c->f64, &x, 1);
    return tanh_f32(c, x);
}

LLVMValueRef cg_erf(cg *c, LLVMValueRef x, ptc_dtype dt)
{
    if (dt == PTC_F64)
        return cg_libm(c, "erf", c->f64, &x, 1);
    return erf_f32(c, x);
}

/* ---- normal draws of the counter RNG (ops.h; uniform draws are body.c's) -------- */

/* ptc_rng_normal: sqrtf(-2 logf(1 - u0)) * cosf(2 pi u1), with libm's logf and
 * cosf so that the draws equal the reference's exactly. */
LLVMValueRef cg_randn(cg *c, LLVMValueRef key, LLVMValueRef idx)
{
    int w = width_of(idx);
    LLVMBuilderRef b = c->b;
    LLVMValueRef i2 = LLVMBuildShl(b, idx, cg_const_i(c, c->i64, 1, w), "");
    LLVMValueRef u0 = ptc_emit_rng_uniform(&c->em, key, i2);
    LLVMValueRef u1 =
        ptc_emit_rng_uniform(&c->em, key, LLVMBuildAdd(b, i2, cg_const_i(c, c->i64, 1, w), ""));
    LLVMValueRef one_minus = LLVMBuildFSub(b, fk(c, 1.0, w), u0, "");
    LLVMValueRef lg = cg_libm(c, "logf", c->f32, &one_minus, 1);
    LLVMValueRef r = LLVMBuildFMul(b, fk(c, -2.0, w), lg, "");
    LLVMTypeRef ft = LLVMTypeOf(r);
    r = cg_call_intrinsic(c, "llvm.sqrt", &ft, 1, &r, 1);
    LLVMValueRef ang = LLVMBuildFMul(b, fk(c, 6.28318530717958648, w), u1, "");
    LLVMValueRef cs = cg_libm(c, "cosf", c->f32, &ang, 1);
    return LLVMBuildFMul(b, r, cs, "");
}
