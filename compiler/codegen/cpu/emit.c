/* LLVM IR for one kernel on the CPU: its loops, loads and stores, and
 * reductions; the scalar bodies inside are codegen/body.c's, which asks this
 * file's cpu_target for loads, f16 conversions and math calls.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_float(ptc_dtype dt)
{
    return ptc_dtype_is_float(dt);
}

static cg *cpu_of(ptc_emitter *em)
{
    return (cg *)em;
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

/* ---- f16 / bf16 in memory: LLVM's half conversions, bf16 as bits ----------------------- */

static LLVMValueRef half_from_storage(ptc_emitter *em, LLVMValueRef v, ptc_dtype dt, int w)
{
    cg *c = cpu_of(em);
    if (dt == PTC_F16)
        return LLVMBuildFPExt(c->b, v, cg_vec(c, c->f32, w), "");
    return ptc_ll_bf16_bits_to_f32(c->b, v);
}

static LLVMValueRef half_to_storage(ptc_emitter *em, LLVMValueRef v, ptc_dtype dt, int w)
{
    cg *c = cpu_of(em);
    if (dt == PTC_F16)
        return LLVMBuildFPTrunc(c->b, v, cg_vec(c, c->f16, w), "");
    return ptc_ll_f32_to_bf16_bits(c->b, v);
}

/* ---- loads and stores ------------------------------------------------------------ */

static LLVMValueRef all_true(cg *c, int w)
{
    return cg_const_i(c, c->i1, 1, w);
}

static LLVMValueRef and_masks(cg *c, LLVMValueRef a, LLVMValueRef b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    return LLVMBuildAnd(c->b, a, b, "");
}

/* A load (the body emitter's): contiguous lanes are one vector load, lanes at one
 * offset one scalar load and a splat, anything else a gather; masked-off lanes
 * and lanes past a masked tail's end are never read. */
static LLVMValueRef load(ptc_emitter *em, const ptc_lexpr *e, LLVMValueRef *vals, bool mask_uniform,
                         int w)
{
    cg *c = cpu_of(em);
    /* llvm.masked.load is x86's masked vector load: AVX-512BW for any lane,
     * AVX2 for 32- and 64-bit lanes (16-bit ones are scalarised there) */
    (void)mask_uniform;
    LLVMBuilderRef b = c->b;
    const ptc_lbuf *buf = c->s->prog->bufs[e->buf];
    LLVMTypeRef st = ptc_emit_storage_type(&c->em, buf->dtype);
    unsigned align = (unsigned)ptc_dtype_size(buf->dtype);
    LLVMValueRef base = c->bufptr[e->buf];
    PTC_ASSERT(base != NULL);
    LLVMValueRef mask = e->arg[0] >= 0 ? cg_splat(c, vals[e->arg[0]], w) : NULL;
    LLVMValueRef raw;
    int kind = w == 1 ? PTC_ACC_UNIFORM : ptc_emit_access_kind(&c->em, e->idx[0], vals);
    /* lanes past the end of a masked tail must not be read either */
    LLVMValueRef lanes = w > 1 && kind != PTC_ACC_UNIFORM ? c->lane_mask : NULL;
    LLVMValueRef vmask = and_masks(c, mask, lanes);
    if (kind == PTC_ACC_UNIFORM && (!mask || w == 1)) {
        LLVMValueRef off = ptc_emit_ix(&c->em, e->idx[0], vals, 1);
        if (mask)
            off = LLVMBuildSelect(b, mask, off, LLVMConstInt(c->i64, 0, 0), "");
        LLVMValueRef p = LLVMBuildInBoundsGEP2(b, st, base, &off, 1, "");
        raw = LLVMBuildLoad2(b, st, p, "");
        LLVMSetAlignment(raw, align);
        raw = cg_splat(c, raw, w);
    } else if (kind == PTC_ACC_CONTIG) {
        LLVMValueRef off = ptc_emit_ix(&c->em, e->idx[0], vals, 1);
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
        LLVMValueRef off = ptc_emit_ix(&c->em, e->idx[0], vals, w);
        if (vmask)
            off = LLVMBuildSelect(b, vmask, off, cg_const_i(c, c->i64, 0, w), "");
        LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, st, base, &off, 1, "");
        LLVMTypeRef vt = cg_vec(c, st, w);
        LLVMTypeRef over[2] = {vt, LLVMTypeOf(ptrs)};
        LLVMValueRef args[4] = {ptrs, LLVMConstInt(c->i32, align, 0),
                                vmask ? vmask : all_true(c, w), LLVMConstNull(vt)};
        raw = cg_call_intrinsic(c, "llvm.masked.gather", over, 2, args, 4);
    }
    LLVMValueRef v = ptc_emit_from_storage(&c->em, raw, buf->dtype, w);
    if (mask)
        v = LLVMBuildSelect(b, mask, v, ptc_emit_kconst(&c->em, e->dtype, e->fval, e->ival, w), "");
    return v;
}

/* PTC_INJECT=codegen:<op>:wrong: x*1.25+1 (integers x+1, bools !x). */
static LLVMValueRef inject_wrong(cg *c, LLVMValueRef v, ptc_dtype dt, int w)
{
    LLVMTypeRef t = ptc_emit_compute_type(&c->em, dt);
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
    LLVMTypeRef st = ptc_emit_storage_type(&c->em, buf->dtype);
    unsigned align = (unsigned)ptc_dtype_size(buf->dtype);
    LLVMValueRef base = c->bufptr[bufid];
    PTC_ASSERT(base != NULL);
    if (c->inject_wrong)
        v = inject_wrong(c, v, buf->dtype, w);
    LLVMValueRef raw = ptc_emit_to_storage(&c->em, v, buf->dtype, w);
    int kind = w == 1 ? PTC_ACC_UNIFORM : ptc_emit_access_kind(&c->em, off, vals);
    LLVMValueRef lanes = w > 1 ? c->lane_mask : NULL;
    if (kind == PTC_ACC_CONTIG || w == 1) {
        LLVMValueRef o = ptc_emit_ix(&c->em, off, vals, 1);
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
    LLVMValueRef o = ptc_emit_ix(&c->em, off, vals, w);
    LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, st, base, &o, 1, "");
    LLVMTypeRef over[2] = {LLVMTypeOf(raw), LLVMTypeOf(ptrs)};
    LLVMValueRef args[4] = {raw, ptrs, LLVMConstInt(c->i32, align, 0),
                            lanes ? lanes : all_true(c, w)};
    cg_call_intrinsic(c, "llvm.masked.scatter", over, 2, args, 4);
}

/* ---- what the scalar-body emitter asks of the CPU ------------------------------------- */

static const char *libm_name(int op, ptc_dtype dt)
{
    bool d = dt == PTC_F64;
    switch (op) {
    case PTC_L_SIN:
        return d ? "sin" : "sinf";
    case PTC_L_COS:
        return d ? "cos" : "cosf";
    case PTC_L_ATAN2:
        return d ? "atan2" : "atan2f";
    case PTC_L_POW:
        return d ? "pow" : "powf";
    default:
        return NULL;
    }
}

static void add_attr(cg *c, LLVMValueRef fn, unsigned idx, const char *name);

/* The module's function that computes libm's sinf or cosf on each lane of a
 * value of type xt: defined once per kernel module and width, called only
 * from sincos_f32's cold branch (a call there costs LLVM far less than the
 * calls themselves). */
static LLVMValueRef libm_lanes_fn(cg *c, bool cosine, LLVMTypeRef xt)
{
    char name[32];
    snprintf(name, sizeof name, "ptc.%s.x%d", cosine ? "cosf" : "sinf",
             LLVMGetTypeKind(xt) == LLVMVectorTypeKind ? (int)LLVMGetVectorSize(xt) : 1);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (fn)
        return fn;
    fn = LLVMAddFunction(c->mod, name, LLVMFunctionType(xt, &xt, 1, 0));
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    add_attr(c, fn, LLVMAttributeFunctionIndex, "noinline");
    add_attr(c, fn, LLVMAttributeFunctionIndex, "cold");
    LLVMBuilderRef outer = c->b;
    c->b = LLVMCreateBuilderInContext(c->ctx);
    LLVMPositionBuilderAtEnd(c->b, LLVMAppendBasicBlockInContext(c->ctx, fn, "entry"));
    LLVMValueRef x = LLVMGetParam(fn, 0);
    LLVMBuildRet(c->b, cg_libm(c, cosine ? "cosf" : "sinf", c->f32, &x, 1));
    LLVMDisposeBuilder(c->b);
    c->b = outer;
    return fn;
}

/* f32 sin / cos without libmvec: ptc_ll_sincos's straight-line vector code,
 * and where some lane is past its range (rare: a cold branch) libm's sinf /
 * cosf on every lane through libm_lanes_fn. */
static LLVMValueRef sincos_poly(cg *c, LLVMValueRef x, bool cosine)
{
    LLVMBuilderRef b = c->b;
    int w = cg_width(x);
    LLVMValueRef fast = ptc_ll_sincos(c->mod, b, x, cosine);
    LLVMTypeRef xt = LLVMTypeOf(x);
    LLVMValueRef absx = cg_call_intrinsic(c, "llvm.fabs", &xt, 1, &x, 1);
    LLVMValueRef big =
        LLVMBuildFCmp(b, LLVMRealOGT, absx, cg_const_f(c, c->f32, PTC_LL_SINCOS_RANGE, w), "");
    if (w > 1) {
        LLVMTypeRef bt = LLVMTypeOf(big);
        big = cg_call_intrinsic(c, "llvm.vector.reduce.or", &bt, 1, &big, 1);
    }
    LLVMValueRef expect[2] = {big, LLVMConstInt(c->i1, 0, 0)};
    big = cg_call_intrinsic(c, "llvm.expect", &c->i1, 1, expect, 2);
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef cold = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "sincos.libm");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "sincos.done");
    LLVMBuildCondBr(b, big, cold, done);

    LLVMPositionBuilderAtEnd(b, cold);
    LLVMValueRef fn = libm_lanes_fn(c, cosine, xt);
    LLVMValueRef slow = LLVMBuildCall2(b, LLVMGlobalGetValueType(fn), fn, &x, 1, "");
    LLVMBuildBr(b, done);

    LLVMPositionBuilderAtEnd(b, done);
    LLVMValueRef r = LLVMBuildPhi(b, xt, "sincos");
    LLVMValueRef vals[2] = {fast, slow};
    LLVMBasicBlockRef from[2] = {pre, cold};
    LLVMAddIncoming(r, vals, from, 2);
    return r;
}

/* f32 sin / cos: one call of libmvec's vector function per vector where the
 * host has it (as torch's kernels call Sleef's), else sincos_poly; libm for
 * one lane. 16 libm calls per vector body were most of LLVM's time on a
 * 10,000-op chain: a 2,000-op chain of sin, mul, add, tanh, abs and sub took
 * 2.2 s of CPU to compile with them, 0.5 s with libmvec, 1.2 s with
 * sincos_poly (0.65 s of it without the branch, which is what costs). */
static LLVMValueRef sincos_f32(cg *c, LLVMValueRef x, bool cosine)
{
    const char *name = cosine ? "cosf" : "sinf";
    int w = cg_width(x);
    if (w == 1)
        return cg_libm(c, name, c->f32, &x, 1);
    if (!c->vec_libm || w != c->lanes)
        return sincos_poly(c, x, cosine);
    char sym[32];
    snprintf(sym, sizeof sym, "%s%s", c->vec_libm, name);
    LLVMTypeRef xt = LLVMTypeOf(x);
    LLVMTypeRef ft = LLVMFunctionType(xt, &xt, 1, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, sym);
    if (!fn)
        fn = LLVMAddFunction(c->mod, sym, ft);
    return LLVMBuildCall2(c->b, ft, fn, &x, 1, "");
}

/* exp, log, tanh, erf, log1p, expm1 (mathfn.c's) and f32 sin and cos are
 * vectorisable; the rest libm's, lane by lane. */
static LLVMValueRef math(ptc_emitter *em, int op, ptc_dtype dt, LLVMValueRef x, LLVMValueRef y)
{
    cg *c = cpu_of(em);
    switch (op) {
    case PTC_L_EXP:
        return cg_exp(c, x, dt);
    case PTC_L_LOG:
        return cg_log(c, x, dt);
    case PTC_L_TANH:
        return cg_tanh(c, x, dt);
    case PTC_L_ERF:
        return cg_erf(c, x, dt);
    case PTC_L_LOG1P:
        return cg_log1p(c, x, dt);
    case PTC_L_EXPM1:
        return cg_expm1(c, x, dt);
    case PTC_L_SIN:
    case PTC_L_COS:
        if (dt != PTC_F64)
            return sincos_f32(c, x, op == PTC_L_COS);
        /* fall through */
    default: {
        const char *name = libm_name(op, dt);
        PTC_ASSERT(name != NULL && "not a math function");
        LLVMValueRef a[2] = {x, y};
        return cg_libm(c, name, ptc_emit_compute_type(em, dt), a, y ? 2 : 1);
    }
    }
}

static LLVMValueRef fmod_(ptc_emitter *em, LLVMValueRef x, LLVMValueRef y)
{
    return LLVMBuildFRem(em->b, x, y, "");
}

static LLVMValueRef randn(ptc_emitter *em, LLVMValueRef key, LLVMValueRef idx)
{
    return cg_randn(cpu_of(em), key, idx);
}

/* The call's status record: its address follows the params in the block. */
static LLVMValueRef status_ptr(void *ctx)
{
    cg *c = ctx;
    LLVMValueRef at = LLVMConstInt(c->i64, 1 + (unsigned)c->k->nparams, 0);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(c->b, c->i64, c->params, &at, 1, "");
    return LLVMBuildLoad2(c->b, c->ptr, p, "status");
}

static const ptc_emit_target cpu_target = {
    .f16_as_bits = false,
    .uniform_div_as_mul = true,
    .ipow_as_call = true,
    .load = load,
    .half_to_storage = half_to_storage,
    .half_from_storage = half_from_storage,
    .half_round = NULL,
    .math = math,
    .fmod = fmod_,
    .randn = randn,
    .status_ptr = status_ptr,
};

enum { UNROLL_COST = 32 };

/* ---- reductions ------------------------------------------------------------------ */

typedef struct red {
    const ptc_kmember *mem;
    const ptc_lnode *n;
    ptc_dtype dt;                /* the reduced value's dtype */
    LLVMTypeRef t;               /* its compute type */
    ptc_red_state vec, vec2, sc; /* allocas: lane accumulators (two sets when unrolled), tail */
} red;

static void red_alloc(cg *c, red *r, ptc_red_state *acc, int w)
{
    acc->v = cg_alloca(c, cg_vec(c, r->t, w), "acc");
    acc->i = cg_alloca(c, cg_vec(c, c->i64, w), "acc.i");
    acc->m = cg_alloca(c, cg_vec(c, r->t, w), "acc.mean");
    acc->m2 = cg_alloca(c, cg_vec(c, r->t, w), "acc.m2");
    acc->n = cg_alloca(c, c->i64, "acc.n");
}

static void store_(cg *c, LLVMValueRef p, LLVMValueRef v)
{
    LLVMBuildStore(c->b, v, p);
}
static LLVMValueRef load_(cg *c, LLVMTypeRef t, LLVMValueRef p)
{
    return LLVMBuildLoad2(c->b, t, p, "");
}

static void red_init(cg *c, red *r, ptc_red_state *acc, int w)
{
    double f;
    int64_t i;
    ptc_emit_red_identity(r->n->reduce, r->dt, &f, &i);
    store_(c, acc->v, ptc_emit_kconst(&c->em, r->dt, f, i, w));
    store_(c, acc->i, cg_const_i(c, c->i64, 0, w));
    if (r->n->reduce == PTC_RED_WELFORD) {
        store_(c, acc->m, ptc_emit_kconst(&c->em, r->dt, 0, 0, w));
        store_(c, acc->m2, ptc_emit_kconst(&c->em, r->dt, 0, 0, w));
    }
    store_(c, acc->n, LLVMConstInt(c->i64, 0, 0));
}

static ptc_red_state red_combine(cg *c, const red *r, ptc_red_state a, ptc_red_state x, int w)
{
    return ptc_emit_red_combine(&c->em, r->n->reduce, r->n->nan_last, r->dt, a, x, w);
}

static void red_update(cg *c, red *r, LLVMValueRef x, LLVMValueRef idx, int w)
{
    ptc_red_state *acc = w == 1 ? &r->sc : c->acc_set ? &r->vec2 : &r->vec;
    LLVMTypeRef vt = cg_vec(c, r->t, w);
    LLVMBuilderRef b = c->b;
    if (r->n->reduce == PTC_RED_WELFORD) {
        LLVMValueRef n = LLVMBuildAdd(b, load_(c, c->i64, acc->n), LLVMConstInt(c->i64, 1, 0), "");
        store_(c, acc->n, n);
        LLVMValueRef inv =
            LLVMBuildFDiv(b, LLVMConstReal(r->t, 1.0), LLVMBuildSIToFP(b, n, r->t, ""), "");
        LLVMValueRef mean = load_(c, vt, acc->m), m2 = load_(c, vt, acc->m2);
        LLVMValueRef delta = LLVMBuildFSub(b, x, mean, "");
        LLVMValueRef nm =
            LLVMBuildFAdd(b, mean, LLVMBuildFMul(b, delta, cg_splat(c, inv, w), ""), "");
        m2 = LLVMBuildFAdd(b, m2, LLVMBuildFMul(b, delta, LLVMBuildFSub(b, x, nm, ""), ""), "");
        store_(c, acc->m, nm);
        store_(c, acc->m2, m2);
        return;
    }
    ptc_red_state a = {load_(c, vt, acc->v), NULL, NULL, NULL, NULL};
    ptc_red_state e = {x, idx, NULL, NULL, NULL};
    bool arg = r->n->reduce == PTC_RED_ARGMAX || r->n->reduce == PTC_RED_ARGMIN;
    if (arg)
        a.i = load_(c, cg_vec(c, c->i64, w), acc->i);
    ptc_red_state o = red_combine(c, r, a, e, w);
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
    return LLVMBuildShuffleVector(c->b, v, LLVMGetPoison(LLVMTypeOf(v)),
                                  LLVMConstVector(mask, (unsigned)h), "");
}

/* Loads an accumulator set as values (Welford count as float of the type). */
static ptc_red_state red_load(cg *c, const red *r, const ptc_red_state *acc, int w)
{
    LLVMTypeRef vt = cg_vec(c, r->t, w);
    ptc_red_state o = {load_(c, vt, acc->v), load_(c, cg_vec(c, c->i64, w), acc->i), NULL, NULL,
                       NULL};
    if (r->n->reduce == PTC_RED_WELFORD) {
        o.m = load_(c, vt, acc->m);
        o.m2 = load_(c, vt, acc->m2);
        LLVMValueRef n = LLVMBuildSIToFP(c->b, load_(c, c->i64, acc->n), r->t, "");
        o.n = cg_splat(c, n, w);
    }
    return o;
}

static ptc_red_state red_final(cg *c, const red *r, bool had_vector, bool unrolled, int lanes)
{
    ptc_red_state s = red_load(c, r, &r->sc, 1);
    if (!had_vector)
        return s;
    ptc_red_state v = red_load(c, r, &r->vec, lanes);
    if (unrolled)
        v = red_combine(c, r, v, red_load(c, r, &r->vec2, lanes), lanes);
    for (int w = lanes; w > 1; w /= 2) {
        ptc_red_state lo = {half_of(c, v.v, w, 0), half_of(c, v.i, w, 0), half_of(c, v.m, w, 0),
                            half_of(c, v.m2, w, 0), half_of(c, v.n, w, 0)};
        ptc_red_state hi = {half_of(c, v.v, w, 1), half_of(c, v.i, w, 1), half_of(c, v.m, w, 1),
                            half_of(c, v.m2, w, 1), half_of(c, v.n, w, 1)};
        v = red_combine(c, r, lo, hi, w / 2);
    }
    return red_combine(c, r, v, s, 1);
}

static void red_store(cg *c, const red *r, ptc_red_state f)
{
    LLVMValueRef outs[2];
    ptc_emit_red_outputs(&c->em, r->n->reduce, r->n->correction, r->t, f, outs);
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
        LLVMValueRef rem =
            LLVMBuildAnd(b, n, LLVMConstInt(c->i64, (unsigned)(2 * lanes - 1), 0), "");
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
        LLVMValueRef pos =
            LLVMBuildNSWAdd(b, cg_splat(c, vhi, lanes), ptc_emit_lane_iota(&c->em, lanes), "");
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

static bool is_local_buf(cg *c, int buf)
{
    return c->s->is_local[buf];
}

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
    ptc_emit_fwd fw;
    fw.n = 0;
    bool flat = kernel_is_flat(c->k);
    for (int g = p->g0; g < p->g1; g++) {
        const ptc_kgroup *G = &c->k->groups[g];
        for (int m = 0; m < G->nmembers; m++) {
            const ptc_kmember *mem = &G->members[m];
            const ptc_lnode *n = c->s->prog->nodes[mem->node];
            LLVMValueRef *v = ptc_emit_body(&c->em, &mem->body, w, &fw);
            LLVMValueRef val = v[mem->value];
            int ob = n->out[0];
            if (!(flat && is_local_buf(c, ob)))
                emit_store(c, ob, mem->store[0], val, v, w);
            ptc_emit_fwd_add(&fw, ob, mem->store[0], val);
            free(v);
        }
    }
}

static void emit_pw_inner(cg *c, const ptc_kgroup *G, int g, int d)
{
    int var = c->k->nouter + d;
    pwctx p = {G, g, g + 1};
    if (d == G->ninner - 1) {
        vector_loop(c, var, LLVMConstInt(c->i64, 0, 0), ptc_emit_dim(&c->em, G->inner[d]),
                    emit_members, &p, NULL, false, false);
        return;
    }
    loop l;
    loop_open(c, &l, LLVMConstInt(c->i64, 0, 0), ptc_emit_dim(&c->em, G->inner[d]), 1, "inner");
    c->vars[var] = l.iv;
    emit_pw_inner(c, G, g, d + 1);
    loop_close(c, &l);
}

typedef struct redctx {
    const ptc_kgroup *G;
    red *reds;
    bool scalar_tail;   /* Welford's lanes must see equal counts: no masked tail */
    bool unroll;        /* two accumulator sets (cheap bodies are latency-bound) */
    const ptc_ix *ridx; /* linear reduction index, for argmax/argmin */
} redctx;

static void emit_red_step(cg *c, void *ctx, int w)
{
    redctx *r = ctx;
    ptc_emit_fwd fw;
    fw.n = 0;
    for (int m = 0; m < r->G->nmembers; m++) {
        red *rd = &r->reds[m];
        if (rd->n->kind == PTC_LN_POINTWISE) {
            /* a pointwise member inside the reduction loop: computed, stored
             * and handed to later members of this step */
            LLVMValueRef *v = ptc_emit_body(&c->em, &rd->mem->body, w, &fw);
            int ob = rd->n->out[0];
            emit_store(c, ob, rd->mem->store[0], v[rd->mem->value], v, w);
            ptc_emit_fwd_add(&fw, ob, rd->mem->store[0], v[rd->mem->value]);
            free(v);
            continue;
        }
        LLVMValueRef *v = ptc_emit_body(&c->em, &rd->mem->body, w, &fw);
        LLVMValueRef idx = NULL;
        if (rd->n->reduce == PTC_RED_ARGMAX || rd->n->reduce == PTC_RED_ARGMIN)
            idx = ptc_emit_ix(&c->em, r->ridx, v, w);
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
        vector_loop(c, var, LLVMConstInt(c->i64, 0, 0), ptc_emit_dim(&c->em, G->red[d]),
                    emit_red_step, r, had_vector, r->scalar_tail, r->unroll);
        return;
    }
    loop l;
    loop_open(c, &l, LLVMConstInt(c->i64, 0, 0), ptc_emit_dim(&c->em, G->red[d]), 1, "red");
    c->vars[var] = l.iv;
    emit_red_loops(c, r, d + 1, had_vector);
    loop_close(c, &l);
}

/* Two accumulator sets or one: max-autotune's choice (c->unroll) where it
 * made one, else cheap bodies get two. Welford always keeps two: its lanes
 * must see equal counts, so its tail is scalar and its main loop steps 2W. */
static bool reduction_unrolled(const cg *c, bool scalar_tail, int cost)
{
    if (scalar_tail || c->unroll == PTC_UNROLL_AUTO)
        return scalar_tail || cost <= UNROLL_COST;
    return c->unroll == PTC_UNROLL_ON;
}

static bool col_red_group(const cg *c, const ptc_kgroup *G, int lane);
static void emit_col_red(cg *c, const ptc_kgroup *G, int lane, LLVMValueRef lo, LLVMValueRef hi);

static void emit_red_group(cg *c, const ptc_kgroup *G, int d, ptc_arena *tmp)
{
    int nouter = c->k->nouter;
    if (d == G->ninner - 1 && col_red_group(c, G, nouter + d)) {
        /* a reduction over rows of a kept contiguous dim (an SE block's
         * channels-last average pool): lanes along it, as emit_col_red */
        emit_col_red(c, G, nouter + d, LLVMConstInt(c->i64, 0, 0),
                     ptc_emit_dim(&c->em, G->inner[d]));
        return;
    }
    if (d < G->ninner) {
        loop l;
        loop_open(c, &l, LLVMConstInt(c->i64, 0, 0), ptc_emit_dim(&c->em, G->inner[d]), 1, "kept");
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
        r->t = ptc_emit_compute_type(&c->em, r->dt);
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
        rc.scalar_tail |=
            reds[m].n->kind == PTC_LN_REDUCTION && reds[m].n->reduce == PTC_RED_WELFORD;
        cost += ptc_lbody_cost(&G->members[m].body, G->members[m].value);
    }
    /* a reduction's accumulator is a loop-carried chain (a compare and a
     * blend for max, an add for sum, several for Welford): with cheap bodies
     * it, not the body, bounds the loop, and two chains run twice as fast */
    rc.unroll = reduction_unrolled(c, rc.scalar_tail, cost);
    bool had_vector = false;
    emit_red_loops(c, &rc, 0, &had_vector);
    c->vec_var = -1;
    c->W = 1;
    for (int m = 0; m < G->nmembers; m++)
        if (reds[m].n->kind == PTC_LN_REDUCTION)
            red_store(c, &reds[m], red_final(c, &reds[m], had_vector, rc.unroll, c->lanes));
    free(reds);
}

/* ---- column reductions ------------------------------------------------------------------ */

/* A reduction over leading dims (a bias or LayerNorm weight gradient:
 * [2048, 1024] summed over its rows) reads across rows as its reduction
 * variable advances, so the usual loop, lanes along the reduction, gathers
 * every lane from another row. Such a kernel runs its lanes along its one
 * outer variable instead: each lane accumulates its own output over scalar
 * reduction loops that read contiguous pieces of rows, and the lanes are
 * stored as they are, with no horizontal combine. */

static bool unit_coeff(const ptc_ix *x, int var)
{
    bool nested;
    ptc_dim k = ptc_ix_coeff(x, var, &nested);
    return !nested && ptc_dim_is_static(k) && k.value == 1;
}

/* Can member m run lanes along `outer`? Sets *contig when one of its loads
 * is contiguous along it; false when one that depends on it is contiguous
 * along `last_red` (the usual loop reads that one best). Loads that do not
 * depend on it (a LayerNorm's statistics per row) are one value for all
 * lanes. */
static bool col_red_member(const cg *c, const ptc_kmember *m, int outer, int last_red, bool *contig)
{
    const ptc_lnode *n = c->s->prog->nodes[m->node];
    if (n->kind != PTC_LN_REDUCTION || !m->store[0] || m->store[1] || n->out[1] >= 0)
        return false;
    if (n->reduce != PTC_RED_SUM && n->reduce != PTC_RED_PROD && n->reduce != PTC_RED_MAX &&
        n->reduce != PTC_RED_MIN)
        return false;
    if (ptc_ix_uses_val(m->store[0]) || !unit_coeff(m->store[0], outer))
        return false;
    for (int i = 0; i < m->body.n; i++) {
        const ptc_lexpr *e = &m->body.e[i];
        if (e->op != PTC_L_LOAD)
            continue;
        if (!ptc_ix_uses_var(e->idx[0], outer))
            continue;
        if (unit_coeff(e->idx[0], last_red))
            return false;
        *contig |= unit_coeff(e->idx[0], outer);
    }
    return true;
}

/* Can reduction group G run lanes along variable `lane`, its one outer
 * variable or its last kept one? */
static bool col_red_group(const cg *c, const ptc_kgroup *G, int lane)
{
    if (!G->reduction || !G->nred)
        return false;
    bool contig = false;
    int last_red = c->k->nouter + G->ninner + G->nred - 1;
    for (int m = 0; m < G->nmembers; m++)
        if (!col_red_member(c, &G->members[m], lane, last_red, &contig))
            return false;
    return contig;
}

static bool is_col_red(const cg *c)
{
    const ptc_kernel *k = c->k;
    if (k->nouter != 1 || k->npar != 1 || k->ngroups != 1 || k->groups[0].ninner)
        return false;
    return col_red_group(c, &k->groups[0], 0);
}

/* The innermost reduction loop in blocks of COL_BLOCK steps, each block
 * accumulated on its own (the second accumulator set) and then combined into
 * the total: a sum of n rows then rounds like n / COL_BLOCK + COL_BLOCK
 * additions instead of n, close to the usual loop's lanes and to torch's
 * cascade sum. */
enum { COL_BLOCK = 64, COL_VECTORS = 4 };

static void col_red_blocks(cg *c, redctx *r, int var, LLVMValueRef n, int w)
{
    LLVMBuilderRef b = c->b;
    loop blk, l;
    loop_open(c, &blk, LLVMConstInt(c->i64, 0, 0), n, COL_BLOCK, "block");
    LLVMValueRef end = LLVMBuildNSWAdd(b, blk.iv, LLVMConstInt(c->i64, COL_BLOCK, 0), "");
    end = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, end, n, ""), end, n, "");
    for (int m = 0; m < r->G->nmembers; m++)
        red_init(c, &r->reds[m], &r->reds[m].vec2, w);
    c->acc_set = 1;
    loop_open(c, &l, blk.iv, end, 1, "red");
    c->vars[var] = l.iv;
    emit_red_step(c, r, w);
    loop_close(c, &l);
    c->acc_set = 0;
    for (int m = 0; m < r->G->nmembers; m++) {
        red *rd = &r->reds[m];
        ptc_red_state sum =
            red_combine(c, rd, red_load(c, rd, &rd->vec, w), red_load(c, rd, &rd->vec2, w), w);
        store_(c, rd->vec.v, sum.v);
    }
    loop_close(c, &blk);
}

static void col_red_loops(cg *c, redctx *r, int d, int w)
{
    int var = c->k->nouter + r->G->ninner + d;
    if (d == r->G->nred - 1) {
        col_red_blocks(c, r, var, ptc_emit_dim(&c->em, r->G->red[d]), w);
        return;
    }
    loop l;
    loop_open(c, &l, LLVMConstInt(c->i64, 0, 0), ptc_emit_dim(&c->em, r->G->red[d]), 1, "red");
    c->vars[var] = l.iv;
    col_red_loops(c, r, d + 1, w);
    loop_close(c, &l);
}

/* The outputs at w lanes of the outer variable (w > 1: vector_loop's tail
 * is masked lanes). */
static void col_red_step(cg *c, void *ctx, int w)
{
    redctx *r = ctx;
    for (int m = 0; m < r->G->nmembers; m++)
        red_init(c, &r->reds[m], &r->reds[m].vec, w);
    col_red_loops(c, r, 0, w);
    for (int m = 0; m < r->G->nmembers; m++) {
        const red *rd = &r->reds[m];
        ptc_red_state f = red_load(c, rd, &rd->vec, w);
        emit_store(c, rd->n->out[0], rd->mem->store[0], f.v, NULL, w);
    }
}

/* Group G's outputs with lanes along variable `lane` over [lo, hi). */
static void emit_col_red(cg *c, const ptc_kgroup *G, int lane, LLVMValueRef lo, LLVMValueRef hi)
{
    red *reds = calloc((size_t)G->nmembers, sizeof *reds);
    for (int m = 0; m < G->nmembers; m++) {
        red *r = &reds[m];
        r->mem = &G->members[m];
        r->n = c->s->prog->nodes[r->mem->node];
        r->dt = r->mem->body.e[r->mem->value].dtype;
        r->t = ptc_emit_compute_type(&c->em, r->dt);
    }
    redctx rc = {.G = G, .reds = reds};
    /* COL_VECTORS vectors of lanes per step: independent accumulator chains,
     * and whole cache lines of each row (2048x1024 f32 summed over rows:
     * 1.2 ms with 4 vectors of 16 lanes against 1.9-9 ms with one, and 44-91
     * ms lanes along the rows, on this loaded machine) */
    int lanes = c->lanes;
    const char *vec_libm = c->vec_libm; /* its functions take `lanes` lanes */
    c->lanes = lanes * COL_VECTORS;
    c->vec_libm = NULL;
    for (int m = 0; m < G->nmembers; m++) {
        red_alloc(c, &reds[m], &reds[m].vec, c->lanes);
        red_alloc(c, &reds[m], &reds[m].vec2, c->lanes);
    }
    vector_loop(c, lane, lo, hi, col_red_step, &rc, NULL, false, false);
    c->lanes = lanes;
    c->vec_libm = vec_libm;
    c->vec_var = -1;
    c->W = 1;
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
        vector_loop(c, d, LLVMConstInt(c->i64, 0, 0), ptc_emit_dim(&c->em, k->outer[d]),
                    emit_members, &p, NULL, false, false);
        return;
    }
    loop l;
    loop_open(c, &l, LLVMConstInt(c->i64, 0, 0), ptc_emit_dim(&c->em, k->outer[d]), 1, "outer");
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
    LLVMAddAttributeAtIndex(
        fn, LLVMAttributeFunctionIndex,
        LLVMCreateStringAttribute(c->ctx, k, (unsigned)strlen(k), v, (unsigned)strlen(v)));
}

/* The attributes of the kernel's two functions (the body is inlined into
 * the wrapper, so they must agree on sanitize_address: jit.c's PASSES). */
static void kernel_attrs(cg *c, LLVMValueRef fn)
{
    char bits[16];
    snprintf(bits, sizeof bits, "%d", c->lanes * 32);
    add_str_attr(c, fn, "min-legal-vector-width", bits);
    add_str_attr(c, fn, "prefer-vector-width", bits);
    add_attr(c, fn, LLVMAttributeFunctionIndex, "nounwind");
#ifdef PTC_ASAN
    add_attr(c, fn, LLVMAttributeFunctionIndex, "sanitize_address");
#endif
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
        int64_t n = ptc_kernel_local_elems(p, k, i);
        LLVMTypeRef at = LLVMArrayType(ptc_emit_storage_type(&c->em, lb->dtype), (unsigned)n);
        c->bufptr[lb->id] = cg_alloca(c, at, "local");
    }
    c->rng_offset = LLVMBuildLoad2(c->b, c->i64, params, "rng.offset");
    c->seed_base = k->seed_base;
    for (int i = 0; i < k->nparams; i++) {
        LLVMValueRef idx = LLVMConstInt(c->i64, (unsigned)(1 + i), 0);
        LLVMValueRef ptr = LLVMBuildInBoundsGEP2(c->b, c->i64, params, &idx, 1, "");
        c->param[i] = LLVMBuildLoad2(c->b, c->i64, ptr, "param");
    }
    c->vec_var = -1;
    c->W = 1;
    if (k->nouter == 0) {
        emit_groups(c, tmp);
    } else if (is_col_red(c)) {
        emit_col_red(c, &k->groups[0], 0, begin, end);
    } else if (flat && k->nouter == 1) {
        pwctx pc = {NULL, 0, k->ngroups};
        vector_loop(c, 0, begin, end, emit_members, &pc, NULL, false, false);
    } else {
        loop l;
        loop_open(c, &l, begin, end, 1, "par");
        LLVMValueRef rem = l.iv;
        for (int d = k->npar - 1; d >= 1; d--) {
            LLVMValueRef e = ptc_emit_dim(&c->em, k->outer[d]);
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
    c->target = &cpu_target;
    c->ix = c->i64;
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
    kernel_attrs(c, c->fn);
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
    kernel_attrs(c, wfn);
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
