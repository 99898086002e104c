/* Reference kernels of the pointwise ops: unary and binary math, where,
 * clamp, masked_fill, dtype conversion, triu/tril and dropout.
 *
 * Each kernel walks the output in row-major order (it is contiguous) and reads
 * every operand through a broadcast view of it, so any input strides work.
 * Operands are first converted to the compute dtype exactly as torch's type
 * promotion does, then one formula runs in one of three precisions: int64
 * (bool and integer dtypes, wrapped to the width at the store), float (f16,
 * bf16, f32, rounded once at the store) or double (f64). The formulas are
 * the ref column of ir/pointwise.def, a switch case per row: the float ones
 * expanded in ref_math.inc (instantiated for both float types), the integer
 * ones in unary_int and binary_int.
 */
#include "ops/ref.h"

#include <string.h>
#include <tgmath.h>

enum { ROUND_NONE, ROUND_TRUNC, ROUND_FLOOR };

typedef struct uparams {
    double min, max;                  /* hardtanh */
    int64_t decimals;                 /* round */
    double slope;                     /* leaky_relu */
    double alpha, scale, input_scale; /* elu */
    double beta, threshold;           /* softplus */
    double eps, eps_hi;               /* logit: eps (< 0: None), 1 - eps (output dtype) */
    bool gelu_tanh;
    int64_t imin, imax; /* hardtanh on integers */
} uparams;

typedef struct bparams {
    ref_scalar alpha; /* add, sub, rsub */
    int rounding;     /* div */
} bparams;

/* The formulas are pointwise.def's ref column, a switch case per row; a
 * pointwise prim's row goes to the unary or the binary switches by its kind. */
#define CASE(id, ref)                                                                              \
    case PTC_OP_##id:                                                                              \
        return ref;
#define NO_CASE(id, ref)
#define UNARY_UNARY CASE
#define UNARY_ARITH NO_CASE
#define UNARY_COMPARE NO_CASE
#define UNARY_BITWISE NO_CASE
#define UNARY_PREDICATE NO_CASE /* logical_not, isnan: ptc_ref_unary */
#define UNARY_SELECT NO_CASE    /* where: ptc_ref_where */
#define BINARY_UNARY NO_CASE
#define BINARY_ARITH CASE
#define BINARY_COMPARE CASE
#define BINARY_BITWISE CASE
#define BINARY_PREDICATE NO_CASE
#define BINARY_SELECT NO_CASE

static uint64_t uabs(int64_t x)
{
    return x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
}

#define T float
#define FN(name) name##_f32
#include "ops/ref_math.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "ops/ref_math.inc"
#undef T
#undef FN

/* The op whose formula computes op: a torch-level row whose reference is
 * BY_PRIM computes with the prim its `how` names (AS, RAW, COMPARE and
 * BITWISE rows; FORMULA and LOGICAL rows have formulas of their own). */
static ptc_op formula_op(ptc_op op)
{
#define IS_PRIM_BY_PRIM 1
#define IS_PRIM_REF(f, i) 0
#define IS_PRIM_ARGS(read, ref) IS_PRIM_##ref
#define PRIM_OF_AS(p) PTC_OP_##p
#define PRIM_OF_RAW(p) PTC_OP_##p
#define PRIM_OF_COMPARE(p) PTC_OP_##p
#define PRIM_OF_BITWISE(p) PTC_OP_##p
#define PRIM_OF_FORMULA(fn) op
#define PRIM_OF_LOGICAL(p) op
#define ROW(id, name, params, meta, eager, how, bind, sig, ref)                                    \
    case PTC_OP_##id:                                                                              \
        PTC_ASSERT((PRIM_OF_##how != op) == IS_PRIM_##ref);                                        \
        return PRIM_OF_##how;
    switch (op) {
#define PW_UNARY ROW
#define PW_BINARY ROW
#include "ir/pointwise.def"
    default:
        return op;
    }
#undef ROW
}

/* ---- operands: a tensor broadcast to the output, or a Python number ------------- */

typedef struct operand {
    bool is_scalar;
    ptc_tensor view; /* the tensor broadcast to the output's sizes */
    double f;        /* the scalar in the float compute type */
    int64_t i;       /* the scalar in the integer compute type */
} operand;

/* `compute` is the dtype values are converted to; `scalar_dt` the one a
 * Python number is converted to (torch keeps numbers in the op's math type,
 * f32 for f16/bf16, in add/sub/mul/div). */
static int operand_init(const ptc_kctx *k, int argi, const ptc_tensor *out, ptc_dtype compute,
                        ptc_dtype scalar_dt, operand *o)
{
    memset(o, 0, sizeof *o);
    const ptc_arg *a = &k->node->args[argi];
    if (a->kind == PTC_ARG_VALUE)
        return ref_broadcast_arg(k, ptc_k_tensor(k, argi), out->ndim, out->sizes, &o->view);
    ref_scalar s = ref_scalar_arg(k, argi);
    o->is_scalar = true;
    if (ref_is_float(compute))
        o->f = ref_scalar_as_f(s, scalar_dt);
    else
        o->i = ref_scalar_as_i(s, compute);
    return 0;
}

static double opnd_f(const operand *o, const int64_t *idx, ptc_dtype compute)
{
    if (o->is_scalar)
        return o->f;
    return ref_load_as_f(ref_at(&o->view, ref_offset(&o->view, idx)), o->view.dtype, compute);
}

static int64_t opnd_i(const operand *o, const int64_t *idx, ptc_dtype compute)
{
    if (o->is_scalar)
        return o->i;
    return ref_load_as_i(ref_at(&o->view, ref_offset(&o->view, idx)), o->view.dtype, compute);
}

/* Python truthiness of an operand element (nan is true). */
static bool opnd_truth(const operand *o, const int64_t *idx)
{
    if (o->is_scalar)
        return o->f != 0 || o->i != 0;
    const void *p = ref_at(&o->view, ref_offset(&o->view, idx));
    return ref_is_float(o->view.dtype) ? ptc_load_f64(p, o->view.dtype) != 0
                                       : ptc_load_i64(p, o->view.dtype) != 0;
}

/* ---- unary ---------------------------------------------------------------------- */

static int64_t unary_int(ptc_op op, int64_t x, ptc_dtype dt, const uparams *p)
{
    switch (op) {
#define REF(f, i) i
#define NOREF (PTC_ASSERT(!"no integer formula"), x)
#define BY_PRIM NOREF
#define PW_UNARY(id, name, params, meta, eager, how, bind, sig, ref) CASE(id, ref)
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit) UNARY_##kind(id, ref)
#include "ir/pointwise.def"
    default:
        PTC_ASSERT(!"not an integer unary op");
    }
    return x;
}

/* The readers of pointwise.def's ARGS(read, ref) rows: each fills the
 * parameters its formula uses, or refuses them as torch does. */
static int params_round(ptc_kctx *k, ptc_dtype dt, uparams *p)
{
    p->decimals = ref_int(k, "decimals");
    if (p->decimals != 0 && !ref_is_float(dt))
        return ref_fail(k, "round with decimals is not implemented for %s", ptc_dtype_name(dt));
    return 0;
}

static int params_hardtanh(ptc_kctx *k, ptc_dtype dt, uparams *p)
{
    ref_scalar lo = ref_scalar_arg(k, ref_argi(k, "min_val"));
    ref_scalar hi = ref_scalar_arg(k, ref_argi(k, "max_val"));
    p->min = lo.f, p->max = hi.f;
    if (!ref_is_float(dt))
        p->imin = ref_scalar_as_i(lo, PTC_I64), p->imax = ref_scalar_as_i(hi, PTC_I64);
    return 0;
}

static int params_leaky_relu(ptc_kctx *k, ptc_dtype dt, uparams *p)
{
    (void)dt;
    p->slope = ref_float(k, "negative_slope");
    return 0;
}

static int params_elu(ptc_kctx *k, ptc_dtype dt, uparams *p)
{
    (void)dt;
    p->alpha = ref_float(k, "alpha");
    p->scale = ref_float(k, "scale");
    p->input_scale = ref_float(k, "input_scale");
    return 0;
}

static int params_softplus(ptc_kctx *k, ptc_dtype dt, uparams *p)
{
    (void)dt;
    p->beta = ref_float(k, "beta");
    p->threshold = ref_float(k, "threshold");
    return 0;
}

static int params_logit(ptc_kctx *k, ptc_dtype dt, uparams *p)
{
    const ptc_arg *eps = ref_arg(k, "eps");
    p->eps = eps->kind == PTC_ARG_NONE ? -1 : ref_float(k, "eps");
    if (p->eps >= 0 && ref_is_float(dt)) {
        p->eps = ptc_dtype_round(p->eps, dt);
        p->eps_hi = ptc_dtype_round(1.0 - p->eps, dt);
    }
    return 0;
}

static int params_gelu(ptc_kctx *k, ptc_dtype dt, uparams *p)
{
    (void)dt;
    const char *s = ref_arg(k, "approximate")->s;
    if (strcmp(s, "tanh") != 0 && strcmp(s, "none") != 0)
        return ref_fail(k, "gelu: approximate must be 'none' or 'tanh', got '%s'", s);
    p->gelu_tanh = strcmp(s, "tanh") == 0;
    return 0;
}

/* A row's reader, through its ref column: READ_##ref is READ_ARGS for an
 * ARGS(read, ref) row and reads nothing otherwise. */
#define READ_ARGS(read, ref) return read(k, dt, p);
#define READ_REF(f, i) break;
#define READ_BY_PRIM break;
#define READ_CASE(id, name, params, meta, eager, how, bind, sig, ref)                              \
    case PTC_OP_##id:                                                                              \
        READ_##ref

static int unary_params(ptc_kctx *k, ptc_dtype dt, uparams *p)
{
    memset(p, 0, sizeof *p);
    switch (k->node->op) {
#define PW_UNARY READ_CASE
#include "ir/pointwise.def"
    default:
        break;
    }
    return 0;
}

int ptc_ref_unary(ptc_kctx *k)
{
    ptc_op op = k->node->op, f = formula_op(op);
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor *out = &k->out[0];
    ptc_dtype dt = out->dtype;
    uparams p;
    if (ref_out_like(k, 0, x) || unary_params(k, dt, &p))
        return -1;
    if (ptc_tensor_numel(x) == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    do {
        const void *px = ref_at(x, ref_offset(x, idx));
        if (op == PTC_OP_LOGICAL_NOT || op == PTC_OP_PRIMS_LOGICAL_NOT) {
            bool truth = ref_is_float(x->dtype) ? ptc_load_f64(px, x->dtype) != 0
                                                : ptc_load_i64(px, x->dtype) != 0;
            ref_sti(out, o, !truth);
        } else if (op == PTC_OP_ISNAN || op == PTC_OP_PRIMS_ISNAN) {
            ref_sti(out, o, ref_is_float(x->dtype) && isnan(ptc_load_f64(px, x->dtype)));
        } else if (dt == PTC_F64) {
            ref_stf(out, o, unary_f64(f, ref_load_as_f(px, x->dtype, dt), &p));
        } else if (ref_is_float(dt)) {
            ref_stf(out, o, unary_f32(f, (float)ref_load_as_f(px, x->dtype, dt), &p));
        } else {
            ref_sti(out, o, unary_int(f, ref_load_as_i(px, x->dtype, dt), dt, &p));
        }
        o++;
    } while (ref_next(idx, x->sizes, x->ndim));
    return 0;
}

/* ---- binary --------------------------------------------------------------------- */

typedef enum { BIN_ARITH, BIN_COMPARE, BIN_LOGICAL, BIN_BITWISE } binkind;

static binkind binary_kind(ptc_op op)
{
#define KIND_AS(p) BIN_ARITH
#define KIND_FORMULA(fn) BIN_ARITH
#define KIND_COMPARE(p) BIN_COMPARE
#define KIND_LOGICAL(p) BIN_LOGICAL
#define KIND_BITWISE(p) BIN_BITWISE
    switch (op) {
#define PW_BINARY(id, name, params, meta, eager, how, bind, sig, ref)                              \
    case PTC_OP_##id:                                                                              \
        return KIND_##how;
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit) BINKIND_##kind(id)
#define BINKIND_COMPARE(id)                                                                        \
    case PTC_OP_##id:                                                                              \
        return BIN_COMPARE;
#define BINKIND_BITWISE(id)                                                                        \
    case PTC_OP_##id:                                                                              \
        return BIN_BITWISE;
#define BINKIND_UNARY(id)
#define BINKIND_ARITH(id)
#define BINKIND_PREDICATE(id)
#define BINKIND_SELECT(id)
#include "ir/pointwise.def"
    default:
        return BIN_ARITH;
    }
}

/* Integer power by squaring in wrapping arithmetic; negative exponents as
 * torch's powi: 1 and -1 stay finite, everything else truncates to 0. */
static int64_t int_pow(int64_t base, int64_t exp)
{
    if (exp < 0) {
        if (base == 1)
            return 1;
        if (base == -1)
            return (-exp) % 2 ? -1 : 1;
        return 0;
    }
    uint64_t result = 1, b = (uint64_t)base;
    for (uint64_t e = (uint64_t)exp; e; e >>= 1) {
        if (e & 1)
            result *= b;
        b *= b;
    }
    return (int64_t)result;
}

static int64_t trunc_div(int64_t a, int64_t b)
{
    if (b == -1) /* INT64_MIN / -1 overflows in C; two's complement wraps */
        return (int64_t)(0 - (uint64_t)a);
    return a / b;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = trunc_div(a, b);
    if (b != -1 && a % b != 0 && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static int64_t py_mod(int64_t a, int64_t b)
{
    if (b == -1)
        return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* C's %: the sign of the dividend (torch's integer fmod) */
static int64_t trunc_mod(int64_t a, int64_t b)
{
    return b == -1 ? 0 : a % b;
}

static bool divides(ptc_op op, int rounding)
{
    return (op == PTC_OP_DIV && rounding != ROUND_NONE) || op == PTC_OP_PRIMS_DIV ||
           op == PTC_OP_PRIMS_FLOOR_DIVIDE || op == PTC_OP_REMAINDER ||
           op == PTC_OP_PRIMS_REMAINDER || op == PTC_OP_FMOD || op == PTC_OP_PRIMS_FMOD;
}

/* Integer arithmetic in wrapping uint64 (the store wraps to the width);
 * comparisons and logical ops (on truth values) as 0 or 1. */
static int64_t binary_int(ptc_op op, int64_t a, int64_t b, const bparams *p)
{
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b, alpha = (uint64_t)p->alpha.i;
    switch (op) {
#define REF(f, i) i
#define NOREF (PTC_ASSERT(!"no integer formula"), a)
#define BY_PRIM NOREF
#define PW_BINARY(id, name, params, meta, eager, how, bind, sig, ref) CASE(id, ref)
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit) BINARY_##kind(id, ref)
#include "ir/pointwise.def"
    default:
        PTC_ASSERT(!"not an integer binary op");
    }
    return 0;
}

static int params_alpha(ptc_kctx *k, ptc_dtype compute, bparams *p)
{
    p->alpha = ref_scalar_arg(k, ref_argi(k, "alpha"));
    if (p->alpha.is_float && !ref_is_float(compute))
        return ref_fail(k, "For integral input tensors, argument alpha must not be a "
                           "floating point number.");
    return 0;
}

static int params_rounding(ptc_kctx *k, ptc_dtype compute, bparams *p)
{
    (void)compute;
    if (!ref_has(k, "rounding_mode"))
        return 0;
    const char *m = ref_arg(k, "rounding_mode")->s;
    if (strcmp(m, "trunc") == 0)
        p->rounding = ROUND_TRUNC;
    else if (strcmp(m, "floor") == 0)
        p->rounding = ROUND_FLOOR;
    else
        return ref_fail(k,
                        "div expected rounding_mode to be one of None, 'trunc', or "
                        "'floor' but found '%s'",
                        m);
    return 0;
}

/* pow reads no parameter, but refuses what torch refuses. */
static int params_pow(ptc_kctx *k, ptc_dtype compute, bparams *p)
{
    (void)p;
    if (!ref_is_float(compute) && k->node->args[1].kind == PTC_ARG_INT && ptc_k_int(k, 1) < 0)
        return ref_fail(k, "Integers to negative integer powers are not allowed.");
    return 0;
}

static int binary_params(ptc_kctx *k, ptc_dtype dt, bparams *p)
{
    memset(p, 0, sizeof *p);
    p->alpha.i = 1, p->alpha.f = 1;
    switch (k->node->op) {
#define PW_BINARY READ_CASE
#include "ir/pointwise.def"
    default:
        break;
    }
    return 0;
}
#undef READ_ARGS
#undef READ_REF
#undef READ_BY_PRIM
#undef READ_CASE

void ptc_ref_binary_scalar(ptc_op op, ptc_dtype dt, double fa, double fb, int64_t ia, int64_t ib,
                           double *fr, int64_t *ir)
{
    bparams p;
    memset(&p, 0, sizeof p);
    p.alpha.i = 1, p.alpha.f = 1;
    *fr = 0, *ir = 0;
    if (dt == PTC_F64) {
        *fr = binary_f64(op, fa, fb, &p);
    } else if (ref_is_float(dt)) {
        *fr = ptc_dtype_round(binary_f32(op, (float)fa, (float)fb, &p), dt);
    } else {
        uint8_t tmp[8];
        ptc_store_i64(tmp, dt, binary_int(op, ia, ib, &p));
        *ir = ptc_load_i64(tmp, dt);
    }
}

/* The dtype operands are converted to: the output's, except for comparisons
 * (torch.result_type of the operands; the output is bool). */
static ptc_dtype binary_compute(const ptc_kctx *k, binkind kind)
{
    if (kind != BIN_COMPARE)
        return k->out[0].dtype;
    const ptc_arg *args[2] = {&k->node->args[0], &k->node->args[1]};
    return ptc_result_type(args, 2);
}

/* f is formula_op's of the node's op. */
static int binary_elem(ptc_kctx *k, ptc_op f, binkind kind, ptc_dtype compute, const operand *a,
                       const operand *b, const bparams *p, const int64_t *idx, int64_t o)
{
    ptc_tensor *out = &k->out[0];
    if (kind == BIN_LOGICAL) {
        ref_sti(out, o, binary_int(f, opnd_truth(a, idx), opnd_truth(b, idx), p));
    } else if (kind == BIN_COMPARE && ref_is_float(compute)) {
        /* each op tests its own relation: -1/0/1 would lose nan */
        ref_sti(out, o, binary_f64(f, opnd_f(a, idx, compute), opnd_f(b, idx, compute), p) != 0);
    } else if (kind == BIN_COMPARE) {
        ref_sti(out, o, binary_int(f, opnd_i(a, idx, compute), opnd_i(b, idx, compute), p));
    } else if (compute == PTC_F64) {
        ref_stf(out, o, binary_f64(f, opnd_f(a, idx, compute), opnd_f(b, idx, compute), p));
    } else if (ref_is_float(compute)) {
        ref_stf(out, o,
                binary_f32(f, (float)opnd_f(a, idx, compute), (float)opnd_f(b, idx, compute), p));
    } else {
        int64_t x = opnd_i(a, idx, compute), y = opnd_i(b, idx, compute);
        if (y == 0 && divides(k->node->op, p->rounding))
            return ref_fail(k, "ZeroDivisionError");
        ref_sti(out, o, binary_int(f, x, y, p));
    }
    return 0;
}

int ptc_ref_binary(ptc_kctx *k)
{
    ptc_op op = k->node->op;
    ptc_tensor *out = &k->out[0];
    binkind kind = binary_kind(op);
    ptc_op f = formula_op(op);
    ptc_dtype compute = binary_compute(k, kind);
    bparams p;
    if (binary_params(k, compute, &p))
        return -1;
    /* Python numbers stay in the op's math type in torch's add/sub/mul/div. */
    ptc_dtype scalar_dt = compute;
    if ((compute == PTC_F16 || compute == PTC_BF16) && kind == BIN_ARITH)
        scalar_dt = PTC_F32;
    operand a, b;
    if (operand_init(k, 0, out, compute, scalar_dt, &a) ||
        operand_init(k, 1, out, compute, scalar_dt, &b))
        return -1;
    if (ptc_tensor_numel(out) == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    do {
        if (binary_elem(k, f, kind, compute, &a, &b, &p, idx, o++))
            return -1;
    } while (ref_next(idx, out->sizes, out->ndim));
    return 0;
}

/* ---- where, clamp, masked_fill ---------------------------------------------------- */

/* Writes operand x (converted to the output dtype) at flat o. */
static void store_operand(ptc_tensor *out, int64_t o, const operand *x, const int64_t *idx)
{
    if (ref_is_float(out->dtype))
        ref_stf(out, o, opnd_f(x, idx, out->dtype));
    else
        ref_sti(out, o, opnd_i(x, idx, out->dtype));
}

int ptc_ref_where(ptc_kctx *k)
{
    ptc_tensor *out = &k->out[0];
    ptc_dtype dt = out->dtype;
    operand cond, a, b;
    if (operand_init(k, 0, out, dt, dt, &cond) || operand_init(k, 1, out, dt, dt, &a) ||
        operand_init(k, 2, out, dt, dt, &b))
        return -1;
    if (ptc_tensor_numel(out) == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    do {
        store_operand(out, o, opnd_truth(&cond, idx) ? &a : &b, idx);
        o++;
    } while (ref_next(idx, out->sizes, out->ndim));
    return 0;
}

/* torch.clamp. With Python-number bounds (clamp.Scalar) a nan bound is
 * ignored when it is the only bound and fills the result with nan when both
 * are given; once a bound is a tensor (clamp.Tensor, numbers wrapped as
 * 0-dim tensors) a nan in any bound propagates. min applies first, so
 * min > max gives max. */
typedef struct bounds {
    bool has_lo, has_hi, tensor; /* tensor: clamp.Tensor semantics */
    operand lo, hi;
} bounds;

static double clamp_f(double x, const bounds *b, const int64_t *idx, ptc_dtype dt)
{
    double lo = b->has_lo ? opnd_f(&b->lo, idx, dt) : NAN;
    double hi = b->has_hi ? opnd_f(&b->hi, idx, dt) : NAN;
    if (isnan(x))
        return x;
    if ((b->tensor || (b->has_lo && b->has_hi)) &&
        ((b->has_lo && isnan(lo)) || (b->has_hi && isnan(hi))))
        return NAN;
    if (b->has_lo && x < lo)
        x = lo;
    if (b->has_hi && x > hi)
        x = hi;
    return x;
}

int ptc_ref_clamp(ptc_kctx *k)
{
    ptc_tensor *out = &k->out[0];
    ptc_dtype dt = out->dtype;
    operand x;
    bounds b = {.has_lo = ref_has(k, "min"), .has_hi = ref_has(k, "max")};
    b.tensor = (b.has_lo && ref_arg(k, "min")->kind == PTC_ARG_VALUE) ||
               (b.has_hi && ref_arg(k, "max")->kind == PTC_ARG_VALUE);
    if (operand_init(k, 0, out, dt, dt, &x) ||
        (b.has_lo && operand_init(k, ref_argi(k, "min"), out, dt, dt, &b.lo)) ||
        (b.has_hi && operand_init(k, ref_argi(k, "max"), out, dt, dt, &b.hi)))
        return -1;
    if (ptc_tensor_numel(out) == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    do {
        if (ref_is_float(dt)) {
            ref_stf(out, o, clamp_f(opnd_f(&x, idx, dt), &b, idx, dt));
        } else {
            int64_t v = opnd_i(&x, idx, dt);
            if (b.has_lo && v < opnd_i(&b.lo, idx, dt))
                v = opnd_i(&b.lo, idx, dt);
            if (b.has_hi && v > opnd_i(&b.hi, idx, dt))
                v = opnd_i(&b.hi, idx, dt);
            ref_sti(out, o, v);
        }
        o++;
    } while (ref_next(idx, out->sizes, out->ndim));
    return 0;
}

int ptc_ref_masked_fill(ptc_kctx *k)
{
    ptc_tensor *out = &k->out[0];
    ptc_dtype dt = out->dtype;
    operand x, mask, value;
    if (operand_init(k, 0, out, dt, dt, &x) || operand_init(k, 1, out, dt, dt, &mask))
        return -1;
    int vi = ref_argi(k, "value");
    if (k->node->args[vi].kind == PTC_ARG_VALUE) {
        const ptc_tensor *v = ptc_k_tensor(k, vi);
        if (v->ndim != 0)
            return ref_fail(k,
                            "masked_fill_ only supports a 0-dimensional value tensor, but got "
                            "tensor with %d dimension(s).",
                            v->ndim);
    }
    if (operand_init(k, vi, out, dt, dt, &value))
        return -1;
    if (ptc_tensor_numel(out) == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    do {
        store_operand(out, o, opnd_truth(&mask, idx) ? &value : &x, idx);
        o++;
    } while (ref_next(idx, out->sizes, out->ndim));
    return 0;
}

/* ---- conversion, triangles, dropout ----------------------------------------------- */

/* to / prims.convert_element_type / prims.device_put / prims.stop_gradient:
 * a converting copy (the reference runs everything on the cpu, so a device
 * change is a copy; stop_gradient converts to its own dtype). */
int ptc_ref_to(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor *out = &k->out[0];
    if (ref_out_like(k, 0, x))
        return -1;
    if (ptc_tensor_numel(x) == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    do
        ref_convert_elem(out, o++, x, ref_offset(x, idx));
    while (ref_next(idx, x->sizes, x->ndim));
    return 0;
}

int ptc_ref_tri(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor *out = &k->out[0];
    int64_t diagonal = ref_int(k, "diagonal");
    bool upper = k->node->op == PTC_OP_TRIU;
    if (x->ndim < 2)
        return ref_fail(k, "%s: input tensor must have at least 2 dimensions",
                        upper ? "triu" : "tril");
    if (ref_out_like(k, 0, x))
        return -1;
    if (ptc_tensor_numel(x) == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    do {
        int64_t d = idx[x->ndim - 1] - idx[x->ndim - 2]; /* column - row */
        if (upper ? d >= diagonal : d <= diagonal)
            ref_copy_elem(out, o, x, ref_offset(x, idx));
        o++;
    } while (ref_next(idx, x->sizes, x->ndim));
    return 0;
}

/* Dropout: element i (row-major) draws u = ptc_rng_uniform(key, i) and is kept
 * iff u < 1-p; the output is x * (kept ? 1/(1-p) : 0), so a dropped nan stays
 * nan as in torch's x * mask * scale, and p = 1 gives x * 0. */
int ptc_ref_dropout(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor *out = &k->out[0];
    double p = ref_float(k, "p");
    if (p < 0 || p > 1)
        return ref_fail(k, "dropout probability has to be between 0 and 1, but got %g", p);
    if (ref_out_like(k, 0, x))
        return -1;
    bool active = ref_bool(k, "train") && p > 0;
    uint64_t key = ptc_rng_key((uint64_t)ref_int(k, "seed"), k->rng_offset);
    if (ptc_tensor_numel(x) == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    do {
        int64_t off = ref_offset(x, idx);
        if (!active) {
            ref_copy_elem(out, o, x, off);
        } else {
            bool keep = (double)ptc_rng_uniform(key, (uint64_t)o) < 1.0 - p;
            if (out->dtype == PTC_F64) {
                ref_stf(out, o, ref_ldf(x, off) * (keep ? 1.0 / (1.0 - p) : 0.0));
            } else {
                float scale = keep ? 1.0f / (float)(1.0 - p) : 0.0f;
                ref_stf(out, o, (float)ref_ldf(x, off) * scale);
            }
        }
        o++;
    } while (ref_next(idx, x->sizes, x->ndim));
    return 0;
}
