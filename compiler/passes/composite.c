/* Composites: torch functions with no op of their own in ops.def, written as
 * small graphs of torch-level ops that exist — factories (eye, linspace),
 * pointwise helpers (hypot, lerp, addcmul, xlogy, nan_to_num, isclose, ...),
 * shape helpers (flip, repeat_interleave, diff, hstack), resampling,
 * nn.MultiheadAttention's fast path and the common losses of
 * torch.nn.functional. Each follows the formula torch's own kernel or
 * decomposition uses, so results agree to rounding.
 *
 * Capture reads the call's Python arguments (capture/torch/torch_composite.c:
 * what is accepted, what breaks) and hands the values and constants here;
 * these functions only build. They build with the decomposition's builders
 * (dp_build and friends) on a context whose build function is the caller's:
 * capture's gives each node autocast, the user's source position and grad
 * mode, and records a failure as a graph break. A failed build makes every
 * later one return NULL, so a formula checks its result once.
 */
#include "passes/decomp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef ptc_value *V;

ptc_composer *ptc_composer_new(ptc_graph *g, const ptc_composer_hooks *hooks, void *ctx)
{
    dctx *d = ptc_arena_alloc(g->arena, sizeof *d);
    if (!d)
        return NULL;
    memset(d, 0, sizeof *d);
    d->g = g;
    d->hooks = hooks;
    d->hooks_ctx = ctx;
    return d;
}

/* ---- torch-level shorthands over dp_build --------------------------------------------- */

/* op(a, s): a torch-level op with a Python-number operand. */
static V scalar_op(dctx *d, ptc_op op, V a, double s)
{
    if (!a)
        return NULL;
    ptc_arg x[2] = {ptc_arg_value(a), ptc_arg_float(s)};
    return dp_build(d, op, x, 2);
}

/* op(a, s) with an integer s (keeps an integer a's dtype). */
static V int_op(dctx *d, ptc_op op, V a, int64_t s)
{
    if (!a)
        return NULL;
    ptc_arg x[2] = {ptc_arg_value(a), ptc_arg_int(s)};
    return dp_build(d, op, x, 2);
}

/* s - a (a scalar on the left). */
static V rsub_scalar(dctx *d, double s, V a)
{
    return scalar_op(d, PTC_OP_ADD, dp_unary(d, PTC_OP_NEG, a), s);
}

static V where(dctx *d, V cond, ptc_arg a, ptc_arg b)
{
    if (!cond || (a.kind == PTC_ARG_VALUE && !a.v) || (b.kind == PTC_ARG_VALUE && !b.v))
        return NULL;
    ptc_arg x[3] = {ptc_arg_value(cond), a, b};
    return dp_build(d, PTC_OP_WHERE, x, 3);
}

static V to_dtype(dctx *d, V a, ptc_dtype dt)
{
    if (!a || a->type.dtype == dt)
        return a;
    ptc_arg x[2] = {ptc_arg_value(a), ptc_arg_dtype(dt)};
    return dp_build(d, PTC_OP_TO, x, 2);
}

/* sum/mean of a over dim (over all dims when all). */
static V reduce(dctx *d, ptc_op op, V a, int64_t dim, bool keepdim, bool all)
{
    if (!a)
        return NULL;
    ptc_arg x[3] = {ptc_arg_value(a), all ? ptc_arg_none() : ptc_arg_ints(d->g->arena, &dim, 1),
                    ptc_arg_bool(keepdim)};
    return dp_build(d, op, x, 3);
}

static V reduce_all(dctx *d, ptc_op op, V a)
{
    return reduce(d, op, a, 0, false, true);
}

static V unsqueeze(dctx *d, V a, int64_t dim)
{
    if (!a)
        return NULL;
    ptc_arg x[2] = {ptc_arg_value(a), ptc_arg_int(dim)};
    return dp_build(d, PTC_OP_UNSQUEEZE, x, 2);
}

static V squeeze(dctx *d, V a, int64_t dim)
{
    if (!a)
        return NULL;
    ptc_arg x[2] = {ptc_arg_value(a), ptc_arg_ints(d->g->arena, &dim, 1)};
    return dp_build(d, PTC_OP_SQUEEZE, x, 2);
}

static V clamp_min(dctx *d, V a, double lo)
{
    if (!a)
        return NULL;
    ptc_arg x[3] = {ptc_arg_value(a), ptc_arg_float(lo), ptc_arg_none()};
    return dp_build(d, PTC_OP_CLAMP, x, 3);
}

static V arange(dctx *d, double start, double end, double step, ptc_dtype dt, ptc_device dev)
{
    ptc_arg x[5] = {ptc_arg_float(start), ptc_arg_float(end), ptc_arg_float(step),
                    ptc_arg_dtype(dt), ptc_arg_device(dev)};
    if (!ptc_dtype_is_float(dt))
        x[0] = ptc_arg_int((int64_t)start), x[1] = ptc_arg_int((int64_t)end),
        x[2] = ptc_arg_int((int64_t)step);
    return dp_build(d, PTC_OP_ARANGE, x, 5);
}

static V clone(dctx *d, V a)
{
    return dp_unary(d, PTC_OP_CLONE, a);
}

/* ---- factories ------------------------------------------------------------------------ */

/* eye(n, m): (arange(n)[:, None] == arange(m)[None, :]) as dtype. */
V ptc_composite_eye(dctx *d, int64_t rows, int64_t cols, ptc_dtype dt, ptc_device dev)
{
    V r = unsqueeze(d, arange(d, 0, (double)rows, 1, PTC_I64, dev), 1);
    V k = unsqueeze(d, arange(d, 0, (double)cols, 1, PTC_I64, dev), 0);
    return to_dtype(d, dp_binary(d, PTC_OP_EQ, r, k), dt);
}

/* linspace(start, end, steps): torch's two-sided formula (exact endpoints). */
V ptc_composite_linspace(dctx *d, double start, double end, int64_t n, ptc_dtype dt, ptc_device dev)
{
    double step = n > 1 ? (end - start) / (double)(n - 1) : 0;
    V i = arange(d, 0, (double)n, 1, dt, dev);
    V lo = scalar_op(d, PTC_OP_ADD, scalar_op(d, PTC_OP_MUL, i, step), start);
    V hi = rsub_scalar(d, end, scalar_op(d, PTC_OP_MUL, rsub_scalar(d, (double)(n - 1), i), step));
    V first = scalar_op(d, PTC_OP_LT, i, (double)(n / 2));
    return where(d, first, ptc_arg_value(lo), ptc_arg_value(hi));
}

/* ---- pointwise ------------------------------------------------------------------------ */

V ptc_composite_hypot(dctx *d, V a, V b)
{
    V s = dp_binary(d, PTC_OP_ADD, dp_binary(d, PTC_OP_MUL, a, a), dp_binary(d, PTC_OP_MUL, b, b));
    return dp_unary(d, PTC_OP_SQRT, s);
}

/* lerp(start, end, weight): start + w (end - start) for w < 0.5, else
 * end - (end - start)(1 - w), as torch computes it. */
V ptc_composite_lerp(dctx *d, V start, V end, V weight)
{
    V diff = dp_binary(d, PTC_OP_SUB, end, start);
    V lo = dp_binary(d, PTC_OP_ADD, start, dp_binary(d, PTC_OP_MUL, weight, diff));
    V hi =
        dp_binary(d, PTC_OP_SUB, end, dp_binary(d, PTC_OP_MUL, diff, rsub_scalar(d, 1.0, weight)));
    V small = scalar_op(d, PTC_OP_LT, dp_unary(d, PTC_OP_ABS, weight), 0.5);
    return where(d, small, ptc_arg_value(lo), ptc_arg_value(hi));
}

V ptc_composite_lerp_scalar(dctx *d, V start, V end, double weight)
{
    V diff = dp_binary(d, PTC_OP_SUB, end, start);
    if (weight < 0.5)
        return dp_binary(d, PTC_OP_ADD, start, scalar_op(d, PTC_OP_MUL, diff, weight));
    return dp_binary(d, PTC_OP_SUB, end, scalar_op(d, PTC_OP_MUL, diff, 1.0 - weight));
}

/* addcmul / addcdiv: x + value * t1 (* or /) t2; a 0-dim tensor value is
 * read as eager reads a Scalar: its value, in the product's dtype. */
V ptc_composite_addcop(dctx *d, V x, V t1, V t2, bool div, V value_tensor, double value)
{
    V p = dp_binary(d, div ? PTC_OP_DIV : PTC_OP_MUL, t1, t2);
    if (value_tensor)
        p = p ? dp_binary(d, PTC_OP_MUL, p, to_dtype(d, value_tensor, p->type.dtype)) : NULL;
    else if (value != 1.0)
        p = scalar_op(d, PTC_OP_MUL, p, value);
    return dp_binary(d, PTC_OP_ADD, x, p);
}

/* exp2(x) = 2 ** x; an integer x in float_dt. */
V ptc_composite_exp2(dctx *d, V x, ptc_dtype float_dt)
{
    if (x && !ptc_dtype_is_float(x->type.dtype))
        x = to_dtype(d, x, float_dt);
    if (!x)
        return NULL;
    ptc_arg a[2] = {ptc_arg_float(2.0), ptc_arg_value(x)};
    return dp_build(d, PTC_OP_POW, a, 2);
}

/* sinc(x) = sin(pi x) / (pi x), 1 at 0 (torch's kernel: the product in
 * x's type); an integer x in float_dt. At 0 the quotient is taken of 1, not
 * 0, so that its gradient there is 0 (torch's) and not NaN, which the
 * outer where's zero would not mask (0 * NaN). */
V ptc_composite_sinc(dctx *d, V x, ptc_dtype float_dt)
{
    if (x && !ptc_dtype_is_float(x->type.dtype))
        x = to_dtype(d, x, float_dt);
    V zero = scalar_op(d, PTC_OP_EQ, x, 0);
    V px = where(d, zero, ptc_arg_float(1.0), ptc_arg_value(scalar_op(d, PTC_OP_MUL, x, M_PI)));
    V q = dp_binary(d, PTC_OP_DIV, dp_unary(d, PTC_OP_SIN, px), px);
    return where(d, zero, ptc_arg_float(1.0), ptc_arg_value(q));
}

/* heaviside(x, values): values where x is 0, else 1 where x > 0 and 0
 * otherwise (NaN too, as torch's kernel); x and values of one dtype. */
V ptc_composite_heaviside(dctx *d, V x, V values)
{
    V pos = x ? to_dtype(d, scalar_op(d, PTC_OP_GT, x, 0), x->type.dtype) : NULL;
    return where(d, scalar_op(d, PTC_OP_EQ, x, 0), ptc_arg_value(values), ptc_arg_value(pos));
}

/* nansum / nanmean over dims (n of them; all with n 0): NaNs count as 0,
 * and nanmean divides by the number of the others. */
V ptc_composite_nansum(dctx *d, V x, const int64_t *dims, int n, bool keepdim, bool mean)
{
    V nan = dp_unary(d, PTC_OP_ISNAN, x);
    V kept = where(d, nan, ptc_arg_float(0.0), ptc_arg_value(x));
    ptc_arg dl = n ? ptc_arg_ints(d->g->arena, dims, n) : ptc_arg_none();
    ptc_arg sa[3] = {ptc_arg_value(kept), dl, ptc_arg_bool(keepdim)};
    V sum = kept ? dp_build(d, PTC_OP_SUM, sa, 3) : NULL;
    if (!mean || !sum)
        return sum;
    ptc_arg ca[3] = {ptc_arg_value(dp_unary(d, PTC_OP_LOGICAL_NOT, nan)), dl, ptc_arg_bool(keepdim)};
    V count = nan ? dp_build(d, PTC_OP_SUM, ca, 3) : NULL;
    return dp_binary(d, PTC_OP_DIV, sum, count);
}

/* log2 / log10 as log(x) / log(base); an integer x in float_dt. */
V ptc_composite_log_base(dctx *d, V x, double base, ptc_dtype float_dt)
{
    if (x && !ptc_dtype_is_float(x->type.dtype))
        x = to_dtype(d, x, float_dt);
    return scalar_op(d, PTC_OP_MUL, dp_unary(d, PTC_OP_LOG, x), 1.0 / log(base));
}

/* xlogy(x, y): 0 where x == 0 (unless y is nan), else x * log(y). */
V ptc_composite_xlogy(dctx *d, V x, V y, ptc_dtype float_dt)
{
    if (x && !ptc_dtype_is_float(x->type.dtype))
        x = to_dtype(d, x, float_dt);
    V prod = dp_binary(d, PTC_OP_MUL, x, dp_unary(d, PTC_OP_LOG, y));
    V zero = where(d, scalar_op(d, PTC_OP_EQ, x, 0), ptc_arg_float(0), ptc_arg_value(prod));
    return where(d, dp_unary(d, PTC_OP_ISNAN, y), ptc_arg_float(NAN), ptc_arg_value(zero));
}

/* sign > 0: x == inf; < 0: x == -inf; 0: |x| == inf. */
static V is_inf(dctx *d, V v, int sign)
{
    if (sign > 0)
        return scalar_op(d, PTC_OP_EQ, v, INFINITY);
    if (sign < 0)
        return scalar_op(d, PTC_OP_EQ, v, -INFINITY);
    return scalar_op(d, PTC_OP_EQ, dp_unary(d, PTC_OP_ABS, v), INFINITY);
}

static V is_finite(dctx *d, V v)
{
    return dp_binary(d, PTC_OP_LOGICAL_AND, dp_binary(d, PTC_OP_EQ, v, v),
                     dp_unary(d, PTC_OP_LOGICAL_NOT, is_inf(d, v, 0)));
}

/* isinf (sign 0), isposinf (1), isneginf (-1), or isfinite (finite); all
 * integers are finite. */
V ptc_composite_isinf(dctx *d, V v, int sign, bool finite)
{
    if (!v)
        return NULL;
    if (!ptc_dtype_is_float(v->type.dtype)) {
        ptc_arg a[4] = {ptc_arg_dims(d->g->arena, v->type.shape, v->type.ndim),
                        ptc_arg_bool(finite), ptc_arg_dtype(PTC_BOOL),
                        ptc_arg_device(v->type.device)};
        return dp_build(d, PTC_OP_FULL, a, 4);
    }
    return finite ? is_finite(d, v) : is_inf(d, v, sign);
}

/* nan_to_num(x, nan, posinf, neginf); an integer x is copied. */
V ptc_composite_nan_to_num(dctx *d, V v, double nan, double posinf, double neginf)
{
    if (v && !ptc_dtype_is_float(v->type.dtype))
        return clone(d, v);
    v = where(d, dp_unary(d, PTC_OP_ISNAN, v), ptc_arg_float(nan), ptc_arg_value(v));
    v = where(d, is_inf(d, v, 1), ptc_arg_float(posinf), ptc_arg_value(v));
    return where(d, is_inf(d, v, -1), ptc_arg_float(neginf), ptc_arg_value(v));
}

/* isclose(a, b, rtol, atol, equal_nan) for floating tensors, as torch:
 * a == b, or |a - b| finite and <= atol + rtol |b|. */
V ptc_composite_isclose(dctx *d, V a, V b, double rtol, double atol, bool equal_nan)
{
    V close = dp_binary(d, PTC_OP_EQ, a, b);
    if (equal_nan)
        close = dp_binary(d, PTC_OP_LOGICAL_OR, close,
                          dp_binary(d, PTC_OP_LOGICAL_AND, dp_unary(d, PTC_OP_ISNAN, a),
                                    dp_unary(d, PTC_OP_ISNAN, b)));
    V diff = dp_unary(d, PTC_OP_ABS, dp_binary(d, PTC_OP_SUB, a, b));
    V allowed =
        scalar_op(d, PTC_OP_ADD, scalar_op(d, PTC_OP_MUL, dp_unary(d, PTC_OP_ABS, b), rtol), atol);
    V ok = dp_binary(d, PTC_OP_LOGICAL_AND, is_finite(d, diff),
                     dp_binary(d, PTC_OP_LE, diff, allowed));
    return dp_binary(d, PTC_OP_LOGICAL_OR, close, ok);
}

/* dot(a, b) = sum(a * b) for 1-d tensors, in their dtype (sum makes an
 * integer tensor int64; dot of int32 is int32, wrapping as it does). */
V ptc_composite_dot(dctx *d, V a, V b)
{
    V product = dp_binary(d, PTC_OP_MUL, a, b);
    return product ? to_dtype(d, reduce_all(d, PTC_OP_SUM, product), product->type.dtype) : NULL;
}

/* ---- shapes ----------------------------------------------------------------------------- */

/* flip over dims (normalised, of static sizes): index_select with reversed
 * aranges; no dims is a copy. */
V ptc_composite_flip(dctx *d, V v, const int *dims, int ndims)
{
    if (ndims == 0)
        return clone(d, v);
    for (int i = 0; i < ndims && v; i++) {
        ptc_dim n = v->type.shape[dims[i]];
        PTC_ASSERT(!n.sym);
        V idx = arange(d, (double)(n.value - 1), -1, -1, PTC_I64, v->type.device);
        ptc_arg a[3] = {ptc_arg_value(v), ptc_arg_int(dims[i]), ptc_arg_value(idx)};
        v = dp_build(d, PTC_OP_INDEX_SELECT, a, 3);
    }
    return v;
}

/* repeat_interleave(repeats, dim): unsqueeze, expand, flatten; with no dim
 * (flat) the input is flattened first. */
V ptc_composite_repeat_interleave(dctx *d, V v, int64_t repeats, bool flat, int dim)
{
    if (flat && v) {
        ptc_arg f[3] = {ptc_arg_value(v), ptc_arg_int(0), ptc_arg_int(-1)};
        v = dp_build(d, PTC_OP_FLATTEN, f, 3);
    }
    if (!v)
        return NULL;
    ptc_dim shape[PTC_MAX_DIMS + 1];
    int nd = v->type.ndim;
    for (int i = 0, k = 0; i < nd; i++) {
        shape[k++] = v->type.shape[i];
        if (i == dim)
            shape[k++] = ptc_dim_c(repeats);
    }
    V u = unsqueeze(d, v, dim + 1);
    ptc_arg e[2] = {ptc_arg_value(u), ptc_arg_dims(d->g->arena, shape, nd + 1)};
    V ex = u ? dp_build(d, PTC_OP_EXPAND, e, 2) : NULL;
    ptc_arg f[3] = {ptc_arg_value(ex), ptc_arg_int(dim), ptc_arg_int(dim + 1)};
    return ex ? dp_build(d, PTC_OP_FLATTEN, f, 3) : NULL;
}

/* diff(cat(parts), n, dim): n times, the later elements minus the earlier
 * (xor for bool). */
V ptc_composite_diff(dctx *d, V *parts, int nparts, int64_t n, int dim)
{
    V v = parts[0];
    if (nparts > 1) {
        ptc_arg a[2] = {ptc_arg_values(d->g->arena, parts, nparts), ptc_arg_int(dim)};
        v = dp_build(d, PTC_OP_CAT, a, 2);
    }
    bool is_bool = v && v->type.dtype == PTC_BOOL;
    for (int64_t k = 0; k < n && v; k++) {
        ptc_dim len = v->type.shape[dim];
        if (!len.sym && len.value == 0)
            break;
        ptc_dim n1 = ptc_dim_sub(d->g->arena, len, ptc_dim_c(1)); /* a symbolic size is >= 2 */
        ptc_arg hi[4] = {ptc_arg_value(v), ptc_arg_int(dim), ptc_arg_int(1), ptc_arg_dim(n1)};
        ptc_arg lo[4] = {ptc_arg_value(v), ptc_arg_int(dim), ptc_arg_int(0), ptc_arg_dim(n1)};
        V h = dp_build(d, PTC_OP_NARROW, hi, 4), l = dp_build(d, PTC_OP_NARROW, lo, 4);
        v = dp_binary(d, is_bool ? PTC_OP_LOGICAL_XOR : PTC_OP_SUB, h, l);
    }
    return v;
}

/* hstack (vertical false) / vstack: cat after making the parts at least
 * 1-d / 2-d. */
V ptc_composite_stack_dims(dctx *d, V *parts, int n, bool vertical)
{
    int dim = 0;
    for (int i = 0; i < n; i++) {
        V p = parts[i];
        if (p && p->type.ndim == 0)
            p = unsqueeze(d, p, 0);
        if (vertical && p && p->type.ndim == 1)
            p = unsqueeze(d, p, 0);
        if (!p)
            return NULL;
        parts[i] = p;
        if (!vertical && i == 0)
            dim = p->type.ndim == 1 ? 0 : 1;
    }
    ptc_arg a[2] = {ptc_arg_values(d->g->arena, parts, n), ptc_arg_int(dim)};
    return dp_build(d, PTC_OP_CAT, a, 2);
}

/* pixel_shuffle as torch's reference writes it: [*b, C*r*r, H, W] viewed
 * [*b, C, r, r, H, W], permuted to [*b, C, H, r, W, r], reshaped to
 * [*b, C, H*r, W*r] and copied contiguous (a contiguous node first, so that
 * the copy's strides are known row-major); pixel_unshuffle the other way
 * round ([*b, C, H, r, W, r] -> [*b, C, r, r, H, W] -> [*b, C*r*r, H, W]). */
V ptc_composite_pixel_shuffle(dctx *d, V v, int64_t r, bool unshuffle)
{
    if (!v)
        return NULL;
    ptc_arena *a = d->g->arena;
    int n = v->type.ndim - 3;
    ptc_dim split[PTC_MAX_DIMS + 2], joined[PTC_MAX_DIMS];
    int64_t perm[PTC_MAX_DIMS + 2];
    memcpy(split, v->type.shape, sizeof(ptc_dim) * (size_t)n);
    memcpy(joined, v->type.shape, sizeof(ptc_dim) * (size_t)n);
    int64_t c = v->type.shape[n].value, h = v->type.shape[n + 1].value,
            w = v->type.shape[n + 2].value;
    /* the six dims after the batch, and the order they are read in */
    int64_t six[6], order[6];
    if (!unshuffle) {
        int64_t s[6] = {c / (r * r), r, r, h, w, 0}, o[5] = {0, 3, 1, 4, 2};
        memcpy(six, s, sizeof s), memcpy(order, o, sizeof o);
        joined[n] = ptc_dim_c(c / (r * r)), joined[n + 1] = ptc_dim_c(h * r),
        joined[n + 2] = ptc_dim_c(w * r);
    } else {
        int64_t s[6] = {c, h / r, r, w / r, r, 0}, o[5] = {0, 2, 4, 1, 3};
        memcpy(six, s, sizeof s), memcpy(order, o, sizeof o);
        joined[n] = ptc_dim_c(c * r * r), joined[n + 1] = ptc_dim_c(h / r),
        joined[n + 2] = ptc_dim_c(w / r);
    }
    for (int i = 0; i < 5; i++) {
        split[n + i] = ptc_dim_c(six[i]);
        perm[n + i] = n + order[i];
    }
    for (int i = 0; i < n; i++)
        perm[i] = i;
    ptc_arg vw[2] = {ptc_arg_value(v), ptc_arg_dims(a, split, n + 5)};
    V t = dp_build(d, PTC_OP_VIEW, vw, 2);
    if (!t)
        return NULL;
    ptc_arg pm[2] = {ptc_arg_value(t), ptc_arg_ints(a, perm, n + 5)};
    t = dp_build(d, PTC_OP_PERMUTE, pm, 2);
    if (!t)
        return NULL;
    ptc_arg rs[2] = {ptc_arg_value(t), ptc_arg_dims(a, joined, n + 3)};
    return clone(d, dp_unary(d, PTC_OP_CONTIGUOUS, dp_build(d, PTC_OP_RESHAPE, rs, 2)));
}

/* count_nonzero: (v != 0).sum(dims), as torch's reference. */
V ptc_composite_count_nonzero(dctx *d, V v, const int64_t *dims, int n)
{
    V nz = scalar_op(d, PTC_OP_NE, v, 0);
    if (!nz)
        return NULL;
    ptc_arg x[3] = {ptc_arg_value(nz), n ? ptc_arg_ints(d->g->arena, dims, n) : ptc_arg_none(),
                    ptc_arg_bool(false)};
    return dp_build(d, PTC_OP_SUM, x, 3);
}

/* ---- resampling ------------------------------------------------------------------------ */

/* The indices (and linear weights) of one spatial dim of nearest (mode 0),
 * nearest-exact (1) or linear (2) resampling from in to outn elements, with
 * the arithmetic of torch's CPU kernels (UpSample.h), in float for float
 * inputs and double for double. */
static void resample_table(int64_t in, int64_t outn, double scale_arg, int mode, bool align,
                           bool dbl, double *i0, double *i1, double *w0, double *w1)
{
    for (int64_t o = 0; o < outn; o++) {
        if (mode != 2) {
            int64_t src;
            if (outn == in)
                src = o;
            else if (outn == 2 * in && mode == 0)
                src = o >> 1;
            else {
                float sc = scale_arg > 0 ? (float)(1.0 / scale_arg) : (float)in / (float)outn;
                float pos = mode == 0 ? (float)o * sc : ((float)o + 0.5f) * sc;
                src = (int64_t)floorf(pos);
                if (src > in - 1)
                    src = in - 1;
            }
            i0[o] = (double)src;
            continue;
        }
        double sc, pos;
        if (align)
            sc = outn > 1 ? (dbl ? (double)(in - 1) / (double)(outn - 1)
                                 : (double)((float)(in - 1) / (float)(outn - 1)))
                          : 0;
        else
            sc = scale_arg > 0
                     ? (dbl ? 1.0 / scale_arg : (double)(float)(1.0 / scale_arg))
                     : (dbl ? (double)in / (double)outn : (double)((float)in / (float)outn));
        if (dbl) {
            pos = align ? sc * (double)o : sc * ((double)o + 0.5) - 0.5;
            if (!align && pos < 0)
                pos = 0;
        } else {
            float p = align ? (float)sc * (float)o : (float)sc * ((float)o + 0.5f) - 0.5f;
            if (!align && p < 0)
                p = 0;
            pos = p;
        }
        int64_t idx = (int64_t)floor(pos);
        if (idx > in - 1)
            idx = in - 1;
        double lam = dbl ? pos - (double)idx : (double)((float)pos - (float)idx);
        if (lam < 0)
            lam = 0;
        if (lam > 1)
            lam = 1;
        i0[o] = (double)idx;
        i1[o] = (double)(idx + (idx < in - 1 ? 1 : 0));
        w0[o] = dbl ? 1.0 - lam : (double)(1.0f - (float)lam);
        w1[o] = lam;
    }
}

/* Reshapes a [n] tensor so that it broadcasts along dim d of an ndim tensor. */
static V along(dctx *d, V w, int dim, int ndim)
{
    int64_t shape[PTC_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        shape[i] = 1;
    shape[dim] = -1;
    ptc_arg a[2] = {ptc_arg_value(w), ptc_arg_ints(d->g->arena, shape, ndim)};
    return w ? dp_build(d, PTC_OP_RESHAPE, a, 2) : NULL;
}

static V index_select(dctx *d, V x, int dim, V index)
{
    ptc_arg a[3] = {ptc_arg_value(x), ptc_arg_int(dim), ptc_arg_value(index)};
    return x && index ? dp_build(d, PTC_OP_INDEX_SELECT, a, 3) : NULL;
}

/* A constant [n] tensor (indices, weights), made by the caller's hook. */
static V constant(dctx *d, const double *data, int64_t n, ptc_dtype dt, ptc_device dev)
{
    if (d->failed)
        return NULL;
    V v = d->hooks->constant(d->hooks_ctx, data, n, dt, dev);
    d->failed = !v;
    return v;
}

/* Dim dim of x (static sizes) resampled to outn elements (mode as
 * resample_table's): x[i0], or x[i0] w0 + x[i1] w1 for linear, with
 * constant indices and weights. */
V ptc_composite_resample(dctx *d, V x, int dim, int64_t outn, double scale, int mode, bool align)
{
    if (!x)
        return NULL;
    ptc_device dev = x->type.device;
    double *t = malloc(sizeof(double) * 4 * (size_t)(outn > 0 ? outn : 1));
    if (!t) {
        d->failed = true;
        return NULL;
    }
    double *i0 = t, *i1 = t + outn, *w0 = t + 2 * outn, *w1 = t + 3 * outn;
    resample_table(x->type.shape[dim].value, outn, scale, mode, align, x->type.dtype == PTC_F64, i0,
                   i1, w0, w1);
    V r = index_select(d, x, dim, constant(d, i0, outn, PTC_I64, dev));
    if (mode == 2) {
        V x1 = index_select(d, x, dim, constant(d, i1, outn, PTC_I64, dev));
        V l0 = along(d, constant(d, w0, outn, x->type.dtype, dev), dim, x->type.ndim);
        V l1 = along(d, constant(d, w1, outn, x->type.dtype, dev), dim, x->type.ndim);
        r = dp_binary(d, PTC_OP_ADD, dp_binary(d, PTC_OP_MUL, r, l0),
                      dp_binary(d, PTC_OP_MUL, x1, l1));
    }
    free(t);
    return r;
}

/* ---- norms and distances -------------------------------------------------------------- */

/* The p-norm of x over dims (none: all): sqrt of the sum of squares for 2,
 * the largest magnitude for inf, the sum of magnitudes for 1. */
V ptc_composite_pnorm(dctx *d, V x, double p, ptc_arg dims, bool keepdim)
{
    if (!x)
        return NULL;
    if (p == 2) {
        ptc_arg s[3] = {ptc_arg_value(dp_binary(d, PTC_OP_MUL, x, x)), dims, ptc_arg_bool(keepdim)};
        return s[0].v ? dp_unary(d, PTC_OP_SQRT, dp_build(d, PTC_OP_SUM, s, 3)) : NULL;
    }
    V ax = dp_unary(d, PTC_OP_ABS, x);
    if (isinf(p) && p > 0) {
        ptc_arg s[3] = {ptc_arg_value(ax),
                        dims.kind == PTC_ARG_NONE ? ptc_arg_ints(d->g->arena, NULL, 0) : dims,
                        ptc_arg_bool(keepdim)};
        return ax ? dp_build(d, PTC_OP_AMAX, s, 3) : NULL;
    }
    ptc_arg s[3] = {ptc_arg_value(p == 1 ? ax : scalar_op(d, PTC_OP_POW, ax, p)), dims,
                    ptc_arg_bool(keepdim)};
    V sum = s[0].v ? dp_build(d, PTC_OP_SUM, s, 3) : NULL;
    return p == 1 ? sum : scalar_op(d, PTC_OP_POW, sum, 1.0 / p);
}

/* pairwise_distance: the p-norm of x1 - x2 + eps along the last dim. */
V ptc_composite_pairwise_distance(dctx *d, V x1, V x2, double p, double eps, bool keepdim)
{
    int64_t last = -1;
    return ptc_composite_pnorm(d, scalar_op(d, PTC_OP_ADD, dp_binary(d, PTC_OP_SUB, x1, x2), eps),
                               p, ptc_arg_ints(d->g->arena, &last, 1), keepdim);
}

/* ---- the multi-head attention fast path --------------------------------------------- */

static V reshape_to(dctx *d, V v, const int64_t *shape, int n)
{
    if (!v)
        return NULL;
    ptc_arg a[2] = {ptc_arg_value(v), ptc_arg_ints(d->g->arena, shape, n)};
    return dp_build(d, PTC_OP_RESHAPE, a, 2);
}

static V transpose(dctx *d, V v, int d0, int d1)
{
    if (!v)
        return NULL;
    ptc_arg a[3] = {ptc_arg_value(v), ptc_arg_int(d0), ptc_arg_int(d1)};
    return dp_build(d, PTC_OP_TRANSPOSE, a, 3);
}

static V narrow(dctx *d, V v, int dim, int64_t start, int64_t len)
{
    if (!v)
        return NULL;
    ptc_arg a[4] = {ptc_arg_value(v), ptc_arg_int(dim), ptc_arg_int(start), ptc_arg_int(len)};
    return dp_build(d, PTC_OP_NARROW, a, 4);
}

static V linear(dctx *d, V x, V w, V b)
{
    if (!x || !w)
        return NULL;
    ptc_arg a[3] = {ptc_arg_value(x), ptc_arg_value(w), b ? ptc_arg_value(b) : ptc_arg_none()};
    return dp_build(d, PTC_OP_LINEAR, a, 3);
}

static V matmul(dctx *d, V a, V b)
{
    return dp_binary(d, PTC_OP_MATMUL, a, b);
}

/* [B, N, E] -> [B, H, N, D] */
static V heads(dctx *d, V x, int64_t b, int64_t n, int64_t h, int64_t hd)
{
    int64_t shape[4] = {b, n, h, hd};
    return transpose(d, reshape_to(d, x, shape, 4), 1, 2);
}

/* The q, k, v projections of m: one linear when query, key and value are
 * one tensor, else one per third of the packed weight. */
static void mha_project(dctx *d, const ptc_mha *m, V *qp, V *kp, V *vp)
{
    int64_t E = m->q->type.shape[2].value;
    V W = m->qkv_weight, Bv = m->qkv_bias;
    if (m->q == m->k && m->k == m->v) {
        V qkv = linear(d, m->q, W, Bv);
        *qp = narrow(d, qkv, 2, 0, E), *kp = narrow(d, qkv, 2, E, E),
        *vp = narrow(d, qkv, 2, 2 * E, E);
        return;
    }
    *qp = linear(d, m->q, narrow(d, W, 0, 0, E), Bv ? narrow(d, Bv, 0, 0, E) : NULL);
    *kp = linear(d, m->k, narrow(d, W, 0, E, E), Bv ? narrow(d, Bv, 0, E, E) : NULL);
    *vp = linear(d, m->v, narrow(d, W, 0, 2 * E, E), Bv ? narrow(d, Bv, 0, 2 * E, E) : NULL);
}

/* torch._native_multi_head_attention (nn.MultiheadAttention's inference fast
 * path in torch 1.13+): projections, q scaled by 1/sqrt(head dim), masked
 * softmax of q k^T, weights times v, the output projection; the weights
 * averaged over heads when asked for. As ATen computes it. Static sizes. */
V ptc_composite_mha(dctx *d, const ptc_mha *m, V *weights)
{
    const ptc_ttype *qt = &m->q->type;
    int64_t B = qt->shape[0].value, L = qt->shape[1].value, E = qt->shape[2].value;
    int64_t S = m->k->type.shape[1].value, H = m->heads, D = E / H;
    V qp, kp, vp;
    mha_project(d, m, &qp, &kp, &vp);
    V qh = scalar_op(d, PTC_OP_DIV, heads(d, qp, B, L, H, D), sqrt((double)D));
    V kh = heads(d, kp, B, S, H, D), vh = heads(d, vp, B, S, H, D);
    V scores = matmul(d, qh, transpose(d, kh, 2, 3)); /* [B, H, L, S] */
    if (m->mask) {
        V mask = m->mask;
        if (m->key_padding) { /* [B, S] -> [B, 1, 1, S] */
            int64_t shape[4] = {B, 1, 1, S};
            mask = reshape_to(d, mask, shape, 4);
        }
        ptc_arg mf[3] = {ptc_arg_value(scores), ptc_arg_value(mask), ptc_arg_float(-INFINITY)};
        scores = scores && mask ? dp_build(d, PTC_OP_MASKED_FILL, mf, 3) : NULL;
    }
    ptc_arg sm[3] = {ptc_arg_value(scores), ptc_arg_int(-1), ptc_arg_none()};
    V attn = scores ? dp_build(d, PTC_OP_SOFTMAX, sm, 3) : NULL;
    V ctx = matmul(d, attn, vh); /* [B, H, L, D] */
    int64_t merged[3] = {B, L, E};
    V o =
        linear(d, reshape_to(d, transpose(d, ctx, 1, 2), merged, 3), m->proj_weight, m->proj_bias);
    *weights = NULL;
    if (o && m->need_weights)
        *weights =
            m->average_weights
                ? scalar_op(d, PTC_OP_DIV, reduce(d, PTC_OP_SUM, attn, 1, false, false), (double)H)
                : attn;
    return o;
}

/* ---- losses ----------------------------------------------------------------------------- */

static V reduced(dctx *d, V loss, ptc_reduction red)
{
    if (red == PTC_REDUCE_MEAN)
        return reduce_all(d, PTC_OP_MEAN, loss);
    if (red == PTC_REDUCE_SUM)
        return reduce_all(d, PTC_OP_SUM, loss);
    return loss;
}

/* smooth_l1 (beta k) and huber (delta k) of a = |in - tg|. */
static V smooth_abs(dctx *d, V a, bool huber, double k)
{
    if (!huber && k == 0)
        return a;
    V sq = scalar_op(d, PTC_OP_MUL, dp_binary(d, PTC_OP_MUL, a, a), huber ? 0.5 : 0.5 / k);
    V lin = huber ? scalar_op(d, PTC_OP_MUL, scalar_op(d, PTC_OP_SUB, a, 0.5 * k), k)
                  : scalar_op(d, PTC_OP_SUB, a, 0.5 * k);
    return where(d, scalar_op(d, PTC_OP_LT, a, k), ptc_arg_value(sq), ptc_arg_value(lin));
}

/* mse_loss, l1_loss, smooth_l1_loss(beta k), huber_loss(delta k). */
V ptc_composite_pointwise_loss(dctx *d, ptc_pointwise_loss kind, V in, V tg, double k,
                               ptc_reduction red)
{
    V diff = dp_binary(d, PTC_OP_SUB, in, tg), loss;
    if (kind == PTC_LOSS_MSE)
        loss = dp_binary(d, PTC_OP_MUL, diff, diff);
    else if (kind == PTC_LOSS_L1)
        loss = dp_unary(d, PTC_OP_ABS, diff);
    else
        loss = smooth_abs(d, dp_unary(d, PTC_OP_ABS, diff), kind == PTC_LOSS_HUBER, k);
    return reduced(d, loss, red);
}

/* binary_cross_entropy(_with_logits)(x, y, weight, pos_weight). */
V ptc_composite_bce(dctx *d, V x, V y, bool logits, V weight, V pos_weight, ptc_reduction red)
{
    V loss;
    if (logits) {
        /* (1 - y) x + lw (log1p(exp(-|x|)) + max(-x, 0)), lw = 1 + (pw - 1) y */
        V relu_neg = clamp_min(d, dp_unary(d, PTC_OP_NEG, x), 0.0);
        V sp = dp_binary(
            d, PTC_OP_ADD,
            dp_unary(d, PTC_OP_LOG1P,
                     dp_unary(d, PTC_OP_EXP, dp_unary(d, PTC_OP_NEG, dp_unary(d, PTC_OP_ABS, x)))),
            relu_neg);
        if (pos_weight) {
            V lw = scalar_op(d, PTC_OP_ADD,
                             dp_binary(d, PTC_OP_MUL, scalar_op(d, PTC_OP_SUB, pos_weight, 1.0), y),
                             1.0);
            sp = dp_binary(d, PTC_OP_MUL, lw, sp);
        }
        loss = dp_binary(d, PTC_OP_ADD, dp_binary(d, PTC_OP_MUL, rsub_scalar(d, 1.0, y), x), sp);
    } else {
        /* -(y log(x) + (1 - y) log(1 - x)), logs clamped at -100 */
        V log_x = dp_unary(d, PTC_OP_LOG, x),
          log_1mx = dp_unary(d, PTC_OP_LOG, rsub_scalar(d, 1.0, x));
        V lx = clamp_min(d, log_x, -100.0), l1x = clamp_min(d, log_1mx, -100.0);
        loss = dp_unary(d, PTC_OP_NEG,
                        dp_binary(d, PTC_OP_ADD, dp_binary(d, PTC_OP_MUL, y, lx),
                                  dp_binary(d, PTC_OP_MUL, rsub_scalar(d, 1.0, y), l1x)));
    }
    if (weight)
        loss = dp_binary(d, PTC_OP_MUL, loss, weight);
    return reduced(d, loss, red);
}

/* weight[target] for class targets: an embedding lookup in a [C, 1] table. */
static V class_weights(dctx *d, V weight, V target)
{
    V table = unsqueeze(d, weight, 1);
    ptc_arg e[2] = {ptc_arg_value(table), ptc_arg_value(target)};
    V ws = table && target ? dp_build(d, PTC_OP_EMBEDDING, e, 2) : NULL;
    return squeeze(d, ws, -1);
}

/* nll_loss on log-probabilities logp [N, C, ...] (or [C]) and class
 * targets: -logp[target] weighted, ignore_index masked; mean divides by the
 * total weight of the targets that count. */
V ptc_composite_nll(dctx *d, V logp, V target, V weight, int64_t ignore, ptc_reduction red)
{
    bool flat = logp && logp->type.ndim == 1;
    if (flat) {
        logp = unsqueeze(d, logp, 0);
        target = unsqueeze(d, target, 0);
    }
    if (!logp || !target)
        return NULL;
    V keep = scalar_op(d, PTC_OP_NE, target, (double)ignore);
    V safe = where(d, keep, ptc_arg_value(target), ptc_arg_int(0));
    V safe1 = unsqueeze(d, safe, 1);
    ptc_arg g[3] = {ptc_arg_value(logp), ptc_arg_int(1), ptc_arg_value(safe1)};
    V picked = squeeze(d, safe1 ? dp_build(d, PTC_OP_GATHER, g, 3) : NULL, 1);
    V w = to_dtype(d, keep, logp->type.dtype);
    if (weight)
        w = dp_binary(d, PTC_OP_MUL, w, class_weights(d, weight, safe));
    V loss = dp_unary(d, PTC_OP_NEG, dp_binary(d, PTC_OP_MUL, picked, w));
    if (red == PTC_REDUCE_NONE && flat)
        return squeeze(d, loss, 0);
    if (red == PTC_REDUCE_MEAN)
        return dp_binary(d, PTC_OP_DIV, reduce_all(d, PTC_OP_SUM, loss),
                         reduce_all(d, PTC_OP_SUM, w));
    return reduced(d, loss, red);
}

/* cross_entropy = nll_loss(log_softmax(input, 1)) for class targets, or
 * -sum(target * log_softmax) over classes for probability targets (their
 * mean divides by the elements per class: static sizes). */
V ptc_composite_cross_entropy(dctx *d, V in, V target, V weight, int64_t ignore, ptc_reduction red)
{
    int cdim = in->type.ndim == 1 ? 0 : 1;
    ptc_arg a[3] = {ptc_arg_value(in), ptc_arg_int(cdim), ptc_arg_none()};
    V logp = dp_build(d, PTC_OP_LOG_SOFTMAX, a, 3);
    if (!ptc_dtype_is_float(target->type.dtype))
        return ptc_composite_nll(d, logp, target, weight, ignore, red);
    V prod = dp_binary(d, PTC_OP_MUL, logp, target);
    if (weight) {
        V wb = weight;
        for (int i = cdim + 1; i < in->type.ndim && wb; i++)
            wb = unsqueeze(d, wb, -1);
        prod = dp_binary(d, PTC_OP_MUL, prod, wb);
    }
    V loss = dp_unary(d, PTC_OP_NEG, reduce(d, PTC_OP_SUM, prod, cdim, false, false));
    if (red != PTC_REDUCE_MEAN)
        return reduced(d, loss, red);
    int64_t n = 1;
    for (int i = 0; i < in->type.ndim; i++) {
        PTC_ASSERT(!in->type.shape[i].sym);
        n *= in->type.shape[i].value;
    }
    return scalar_op(d, PTC_OP_DIV, reduce_all(d, PTC_OP_SUM, loss),
                     (double)(n / in->type.shape[cdim].value));
}

/* ---- scatters ------------------------------------------------------------------------- */

/* value (a number, or a 0-dim tensor) spread over shape in dt, on dev. */
static V spread_value(dctx *d, const ptc_dim *shape, int ndim, ptc_device dev, ptc_arg value,
                      ptc_dtype dt)
{
    if (d->failed || (value.kind == PTC_ARG_VALUE && !value.v))
        return NULL;
    ptc_arg dims = ptc_arg_dims(d->g->arena, shape, ndim);
    if (value.kind == PTC_ARG_VALUE) {
        ptc_arg x[2] = {ptc_arg_value(to_dtype(d, value.v, dt)), dims};
        return x[0].v ? dp_build(d, PTC_OP_EXPAND, x, 2) : NULL;
    }
    ptc_arg x[4] = {dims, value, ptc_arg_dtype(dt), ptc_arg_device(dev)};
    return dp_build(d, PTC_OP_FULL, x, 4);
}

V ptc_composite_spread(dctx *d, V like, ptc_arg value, ptc_dtype dt)
{
    return like ? spread_value(d, like->type.shape, like->type.ndim, like->type.device, value, dt)
                : NULL;
}

/* scatter_add (add) or scatter of src into x along dim, src narrowed to
 * index's shape (a scatter reads src only there, and the gradients of the
 * scatters' prims give src index's shape). */
V ptc_composite_scatter(dctx *d, V x, int dim, V index, V src, bool add)
{
    for (int k = 0; index && src && k < src->type.ndim; k++)
        if (!ptc_dim_eq(src->type.shape[k], index->type.shape[k]))
            src = narrow(d, src, k, 0, index->type.shape[k].value);
    if (!x || !index || !src)
        return NULL;
    ptc_arg a[4] = {ptc_arg_value(x), ptc_arg_int(dim), ptc_arg_value(index), ptc_arg_value(src)};
    return dp_build(d, add ? PTC_OP_SCATTER_ADD : PTC_OP_SCATTER, a, 4);
}

/* scatter_reduce's sum and mean: without include_self the places written
 * start from 0 (and count no element of x); the mean divides by the count
 * where it is not 0 (flooring for integers, as torch), elsewhere x stays. */
V ptc_composite_scatter_reduce(dctx *d, V x, int dim, V index, V src, bool mean, bool include_self)
{
    if (!x)
        return NULL;
    ptc_dtype dt = x->type.dtype;
    V base = include_self
                 ? x
                 : ptc_composite_scatter(d, x, dim, index,
                                         ptc_composite_spread(d, index, ptc_arg_int(0), dt), false);
    V sum = ptc_composite_scatter(d, base, dim, index, src, true);
    if (!mean)
        return sum;
    V count =
        ptc_composite_scatter(d, ptc_composite_spread(d, x, ptc_arg_int(include_self), dt), dim,
                              index, ptc_composite_spread(d, index, ptc_arg_int(1), dt), true);
    count = where(d, scalar_op(d, PTC_OP_EQ, count, 0), ptc_arg_int(1), ptc_arg_value(count));
    ptc_arg q[3] = {ptc_arg_value(sum), ptc_arg_value(count),
                    ptc_dtype_is_float(dt) ? ptc_arg_none() : ptc_arg_str(d->g->arena, "floor")};
    return sum && count ? dp_build(d, PTC_OP_DIV, q, 3) : NULL;
}

/* A 1-D index spread over source's shape along dim: index[k] names the
 * place of source's slice k. */
static V index_along(dctx *d, V index, int dim, V source)
{
    if (!index || !source)
        return NULL;
    ptc_arg x[2] = {ptc_arg_value(along(d, index, dim, source->type.ndim)),
                    ptc_arg_dims(d->g->arena, source->type.shape, source->type.ndim)};
    return x[0].v ? dp_build(d, PTC_OP_EXPAND, x, 2) : NULL;
}

V ptc_composite_index_scatter(dctx *d, V x, int dim, V index, V source, bool add, ptc_arg alpha)
{
    bool one = (alpha.kind == PTC_ARG_INT && alpha.i.value == 1) ||
               (alpha.kind == PTC_ARG_FLOAT && alpha.f == 1.0) || alpha.kind == PTC_ARG_NONE;
    if (!one && source) {
        ptc_arg m[2] = {ptc_arg_value(source), alpha};
        source = dp_build(d, PTC_OP_MUL, m, 2);
    }
    return ptc_composite_scatter(d, x, dim, index_along(d, index, dim, source), source, add);
}

V ptc_composite_index_fill(dctx *d, V x, int dim, V index, ptc_arg value)
{
    if (!x || !index)
        return NULL;
    V wrapped = where(d, scalar_op(d, PTC_OP_LT, index, 0),
                      ptc_arg_value(int_op(d, PTC_OP_ADD, index, x->type.shape[dim].value)),
                      ptc_arg_value(index));
    ptc_dim shape[PTC_MAX_DIMS];
    memcpy(shape, x->type.shape, sizeof *shape * (size_t)x->type.ndim);
    shape[dim] = index->type.shape[0];
    V source = spread_value(d, shape, x->type.ndim, x->type.device, value, x->type.dtype);
    return ptc_composite_scatter(d, x, dim, index_along(d, wrapped, dim, source), source, false);
}

/* masked_scatter(x, mask, source): the k-th place of mask (broadcast to x,
 * in row-major order) that holds True takes source's k-th element. */
V ptc_composite_masked_scatter(dctx *d, V x, V mask, V source)
{
    if (!x || !mask || !source)
        return NULL;
    ptc_arg shape = ptc_arg_dims(d->g->arena, x->type.shape, x->type.ndim);
    ptc_arg e[2] = {ptc_arg_value(mask), shape};
    V m = dp_build(d, PTC_OP_EXPAND, e, 2);
    int64_t flat = -1;
    V ones = reshape_to(d, to_dtype(d, m, PTC_I64), &flat, 1);
    ptc_arg c[3] = {ptc_arg_value(ones), ptc_arg_int(0), ptc_arg_none()};
    V before = int_op(d, PTC_OP_SUB, ones ? dp_build(d, PTC_OP_CUMSUM, c, 3) : NULL, 1);
    ptc_arg z[3] = {ptc_arg_value(before), ptc_arg_int(0), ptc_arg_none()};
    V at = before ? dp_build(d, PTC_OP_CLAMP, z, 3) : NULL;
    V picked = index_select(d, reshape_to(d, source, &flat, 1), 0, at);
    ptc_arg r[2] = {ptc_arg_value(picked), shape};
    return where(d, m, ptc_arg_value(picked ? dp_build(d, PTC_OP_RESHAPE, r, 2) : NULL),
                 ptc_arg_value(x));
}

/* ---- indexed padding, one_hot ------------------------------------------------------------ */

/* The source position of padded position j of a dim of n elements padded
 * by lo in front: reflect (mode 0) mirrors without repeating the edge,
 * replicate (1) repeats the edge, circular (2) wraps around. */
static int64_t pad_source(int64_t j, int64_t n, int64_t lo, int mode)
{
    int64_t s = j - lo;
    if (mode == 0)
        return s < 0 ? -s : s >= n ? 2 * (n - 1) - s : s;
    if (mode == 1)
        return s < 0 ? 0 : s >= n ? n - 1 : s;
    return ((s % n) + n) % n;
}

V ptc_composite_pad_indexed(dctx *d, V x, const int64_t *pads, int npads, int mode)
{
    for (int k = 0; x && k < npads / 2; k++) {
        int dim = x->type.ndim - 1 - k;
        int64_t n = x->type.shape[dim].value, lo = pads[2 * k], len = n + lo + pads[2 * k + 1];
        double *at = malloc(sizeof *at * (size_t)(len > 0 ? len : 1));
        if (!at) {
            d->failed = true;
            return NULL;
        }
        for (int64_t j = 0; j < len; j++)
            at[j] = (double)pad_source(j, n, lo, mode);
        x = index_select(d, x, dim, constant(d, at, len, PTC_I64, x->type.device));
        free(at);
    }
    return x;
}

/* one_hot(x, classes): arange(classes)[x] is x itself, read through an
 * index check (eager's error for a class out of range, negative ones too),
 * compared with every class. */
V ptc_composite_one_hot(dctx *d, V x, int64_t classes)
{
    if (!x)
        return NULL;
    V all = arange(d, 0, (double)classes, 1, PTC_I64, x->type.device);
    int64_t flat = -1;
    V checked = index_select(d, all, 0, reshape_to(d, x, &flat, 1));
    ptc_arg r[2] = {ptc_arg_value(checked), ptc_arg_dims(d->g->arena, x->type.shape, x->type.ndim)};
    V same = checked ? dp_build(d, PTC_OP_RESHAPE, r, 2) : NULL;
    return to_dtype(d, dp_binary(d, PTC_OP_EQ, unsqueeze(d, same, -1), all), PTC_I64);
}

/* kl_div(input, target): target (log(target) - input), 0 where target is
 * 0 (xlogy); with log_target exp(target) (target - input). batchmean sums
 * and divides by the first dim's size. */
V ptc_composite_kl_div(dctx *d, V in, V tg, bool log_target, ptc_reduction red, bool batchmean)
{
    V loss = log_target ? dp_binary(d, PTC_OP_MUL, dp_unary(d, PTC_OP_EXP, tg),
                                    dp_binary(d, PTC_OP_SUB, tg, in))
                        : dp_binary(d, PTC_OP_SUB, ptc_composite_xlogy(d, tg, tg, PTC_F32),
                                    dp_binary(d, PTC_OP_MUL, tg, in));
    if (!batchmean)
        return reduced(d, loss, red);
    double rows = in && in->type.ndim ? (double)in->type.shape[0].value : 1.0;
    return scalar_op(d, PTC_OP_DIV, reduce_all(d, PTC_OP_SUM, loss), rows);
}

/* cdist(x1 [..., r1, m], x2 [..., r2, m], p): the p-norm of every pair of
 * rows' difference. Where the sum of powers is 0 its root is taken of 1 and
 * 0 put back after, so that the gradient at a zero distance is torch's 0
 * and not NaN (p 1 and inf have no root). */
V ptc_composite_cdist(dctx *d, V x1, V x2, double p)
{
    if (!x1 || !x2)
        return NULL;
    V diff = dp_binary(d, PTC_OP_SUB, unsqueeze(d, x1, -2), unsqueeze(d, x2, -3));
    int64_t last = -1;
    ptc_arg dims = ptc_arg_ints(d->g->arena, &last, 1);
    if (p == 1 || isinf(p))
        return ptc_composite_pnorm(d, diff, p, dims, false);
    V powers = p == 2 ? dp_binary(d, PTC_OP_MUL, diff, diff)
                      : scalar_op(d, PTC_OP_POW, dp_unary(d, PTC_OP_ABS, diff), p);
    ptc_arg s[3] = {ptc_arg_value(powers), dims, ptc_arg_bool(false)};
    V sum = powers ? dp_build(d, PTC_OP_SUM, s, 3) : NULL;
    V zero = scalar_op(d, PTC_OP_EQ, sum, 0);
    V safe = where(d, zero, ptc_arg_float(1), ptc_arg_value(sum));
    V root = p == 2 ? dp_unary(d, PTC_OP_SQRT, safe) : scalar_op(d, PTC_OP_POW, safe, 1.0 / p);
    return where(d, zero, ptc_arg_float(0), ptc_arg_value(root));
}

/* matrix_norm over the last two dims: "fro" (kind 0), or the largest
 * (kind 1) / smallest (-1) column sum of magnitudes (ord 1 / -1) or row sum
 * (ord inf / -inf, rows true). */
V ptc_composite_matrix_norm(dctx *d, V x, int kind, bool rows, bool keepdim)
{
    if (!x)
        return NULL;
    int64_t both[2] = {-2, -1}, along = rows ? -1 : -2, across = rows ? -2 : -1;
    if (kind == 0)
        return ptc_composite_pnorm(d, x, 2, ptc_arg_ints(d->g->arena, both, 2), keepdim);
    V sums = reduce(d, PTC_OP_SUM, dp_unary(d, PTC_OP_ABS, x), along, true, false);
    ptc_arg m[3] = {ptc_arg_value(sums), ptc_arg_ints(d->g->arena, &across, 1), ptc_arg_bool(true)};
    V most = sums ? dp_build(d, kind > 0 ? PTC_OP_AMAX : PTC_OP_AMIN, m, 3) : NULL;
    return keepdim || !most ? most : squeeze(d, squeeze(d, most, -1), -1);
}

/* block_diag of n blocks already 2-D and of one dtype: each block padded
 * with zeros to the total width at its column offset, the rows stacked. */
V ptc_composite_block_diag(dctx *d, V *blocks, int n)
{
    int64_t width = 0, at = 0;
    for (int i = 0; i < n; i++)
        width += blocks[i] ? blocks[i]->type.shape[1].value : 0;
    V rows[64];
    for (int i = 0; i < n && i < 64; i++) {
        int64_t w = blocks[i] ? blocks[i]->type.shape[1].value : 0;
        int64_t pads[2] = {at, width - at - w};
        ptc_arg p[3] = {ptc_arg_value(blocks[i]), ptc_arg_ints(d->g->arena, pads, 2),
                        ptc_arg_int(0)};
        if (!(rows[i] = blocks[i] ? dp_build(d, PTC_OP_CONSTANT_PAD_ND, p, 3) : NULL))
            return NULL;
        at += w;
    }
    ptc_arg c[2] = {ptc_arg_values(d->g->arena, rows, n), ptc_arg_int(0)};
    return dp_build(d, PTC_OP_CAT, c, 2);
}

/* triplet_margin_loss: max(margin + d(a, pos) - d(a, neg), 0), d the
 * pairwise distance; with swap d(a, neg) is the smaller of it and
 * d(pos, neg). */
V ptc_composite_triplet_margin(dctx *d, V *abn, double margin, double p, double eps, bool swap,
                               ptc_reduction red)
{
    V pos = ptc_composite_pairwise_distance(d, abn[0], abn[1], p, eps, false);
    V neg = ptc_composite_pairwise_distance(d, abn[0], abn[2], p, eps, false);
    if (swap)
        neg = dp_binary(d, PTC_OP_MINIMUM, neg,
                        ptc_composite_pairwise_distance(d, abn[1], abn[2], p, eps, false));
    V over = scalar_op(d, PTC_OP_ADD, dp_binary(d, PTC_OP_SUB, pos, neg), margin);
    return reduced(d, clamp_min(d, over, 0), red);
}

/* ---- unfold / fold (im2col, col2im) --------------------------------------------------- */

int64_t ptc_unfold_blocks(const ptc_unfold *u, int i)
{
    int64_t span = u->dilation[i] * (u->kernel[i] - 1) + 1;
    return (u->size[i] + 2 * u->padding[i] - span) / u->stride[i] + 1;
}

/* The flat places of the padded plane that unfold reads: kernel place by
 * kernel place (row-major), each over the blocks (row-major). */
static V unfold_index(dctx *d, const ptc_unfold *u, ptc_device dev)
{
    int64_t rows = ptc_unfold_blocks(u, 0), cols = ptc_unfold_blocks(u, 1), blocks = rows * cols;
    int64_t width = u->size[1] + 2 * u->padding[1], n = u->kernel[0] * u->kernel[1] * blocks;
    double *at = malloc(sizeof *at * (size_t)(n > 0 ? n : 1));
    if (!at) {
        d->failed = true;
        return NULL;
    }
    for (int64_t ki = 0, k = 0; ki < u->kernel[0]; ki++)
        for (int64_t kj = 0; kj < u->kernel[1]; kj++)
            for (int64_t oi = 0; oi < rows; oi++)
                for (int64_t oj = 0; oj < cols; oj++, k++)
                    at[k] = (double)((oi * u->stride[0] + ki * u->dilation[0]) * width +
                                     oj * u->stride[1] + kj * u->dilation[1]);
    V index = constant(d, at, n, PTC_I64, dev);
    free(at);
    return index;
}

static V zero_padded(dctx *d, V x, const ptc_unfold *u)
{
    int64_t pads[4] = {u->padding[1], u->padding[1], u->padding[0], u->padding[0]};
    ptc_arg a[3] = {ptc_arg_value(x), ptc_arg_ints(d->g->arena, pads, 4), ptc_arg_int(0)};
    return x ? dp_build(d, PTC_OP_CONSTANT_PAD_ND, a, 3) : NULL;
}

/* unfold of x [n, c, h, w]: [n, c * kernel places, blocks]. */
V ptc_composite_unfold(dctx *d, V x, const ptc_unfold *u)
{
    if (!x)
        return NULL;
    int64_t n = x->type.shape[0].value, c = x->type.shape[1].value;
    int64_t plane = (u->size[0] + 2 * u->padding[0]) * (u->size[1] + 2 * u->padding[1]);
    int64_t places = u->kernel[0] * u->kernel[1];
    int64_t flat[3] = {n, c, plane}, cols[3] = {n, c * places, 0};
    cols[2] = ptc_unfold_blocks(u, 0) * ptc_unfold_blocks(u, 1);
    V picked = index_select(d, reshape_to(d, zero_padded(d, x, u), flat, 3), 2,
                            unfold_index(d, u, x->type.device));
    return reshape_to(d, picked, cols, 3);
}

/* fold of x [n, c * kernel places, blocks]: [n, c, h, w], the values that
 * land on one place summed, the padding cut off. */
V ptc_composite_fold(dctx *d, V x, const ptc_unfold *u)
{
    if (!x)
        return NULL;
    int64_t places = u->kernel[0] * u->kernel[1], n = x->type.shape[0].value;
    int64_t c = x->type.shape[1].value / places, blocks = x->type.shape[2].value;
    int64_t hp = u->size[0] + 2 * u->padding[0], wp = u->size[1] + 2 * u->padding[1];
    int64_t by_channel[3] = {n, c, places * blocks}, plane[4] = {n, c, hp, wp};
    ptc_dim zeros_shape[3] = {ptc_dim_c(n), ptc_dim_c(c), ptc_dim_c(hp * wp)};
    V zeros = spread_value(d, zeros_shape, 3, x->type.device, ptc_arg_int(0), x->type.dtype);
    V summed = ptc_composite_index_scatter(d, zeros, 2, unfold_index(d, u, x->type.device),
                                           reshape_to(d, x, by_channel, 3), true, ptc_arg_none());
    V image = narrow(d, reshape_to(d, summed, plane, 4), 2, u->padding[0], u->size[0]);
    return clone(d, narrow(d, image, 3, u->padding[1], u->size[1]));
}

/* ---- trace, channel_shuffle ------------------------------------------------------------------ */

/* trace of a 2-D x: the sum of the places where row and column agree. */
V ptc_composite_trace(dctx *d, V x)
{
    if (!x)
        return NULL;
    ptc_device dev = x->type.device;
    V rows = unsqueeze(d, arange(d, 0, (double)x->type.shape[0].value, 1, PTC_I64, dev), 1);
    V cols = unsqueeze(d, arange(d, 0, (double)x->type.shape[1].value, 1, PTC_I64, dev), 0);
    V diagonal = where(d, dp_binary(d, PTC_OP_EQ, rows, cols), ptc_arg_value(x), ptc_arg_int(0));
    return reduce_all(d, PTC_OP_SUM, diagonal);
}

/* channel_shuffle of x [n, c, ...] in `groups`: channel g * (c / groups) + k
 * moves to k * groups + g. */
V ptc_composite_channel_shuffle(dctx *d, V x, int64_t groups)
{
    if (!x)
        return NULL;
    int nd = x->type.ndim;
    int64_t split[PTC_MAX_DIMS + 1] = {0}, joined[PTC_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++)
        joined[i] = x->type.shape[i].value;
    split[0] = joined[0], split[1] = groups, split[2] = joined[1] / groups;
    for (int i = 2; i < nd; i++)
        split[i + 1] = joined[i];
    return reshape_to(d, transpose(d, reshape_to(d, x, split, nd + 1), 1, 2), joined, nd);
}

/* ---- rot90, cross, addmv -------------------------------------------------------------------- */

/* rot90(x, k, dims) with k in 0..3: torch's flips, then the transpose (a
 * view: its strides are eager's). */
V ptc_composite_rot90(dctx *d, V x, int k, const int *dims)
{
    if (k == 0)
        return clone(d, x);
    if (k == 2)
        return ptc_composite_flip(d, x, dims, 2);
    return transpose(d, ptc_composite_flip(d, x, &dims[k == 1 ? 1 : 0], 1), dims[0], dims[1]);
}

/* cross(a, b, dim) of dim 3: a[i+1] b[i+2] - a[i+2] b[i+1] (indices mod 3),
 * the operands broadcast. */
V ptc_composite_cross(dctx *d, V a, V b, int dim)
{
    if (!a || !b)
        return NULL;
    static const double next[3] = {1, 2, 0}, after[3] = {2, 0, 1};
    V i1 = constant(d, next, 3, PTC_I64, a->type.device);
    V i2 = constant(d, after, 3, PTC_I64, a->type.device);
    V left = dp_binary(d, PTC_OP_MUL, index_select(d, a, dim, i1), index_select(d, b, dim, i2));
    V right = dp_binary(d, PTC_OP_MUL, index_select(d, a, dim, i2), index_select(d, b, dim, i1));
    return dp_binary(d, PTC_OP_SUB, left, right);
}

/* addmv: beta input + alpha (mat @ vec); with beta 0 input is not read (its
 * NaNs do not spread), as eager's. */
V ptc_composite_addmv(dctx *d, V input, V mat, V vec, ptc_arg beta, ptc_arg alpha)
{
    V prod = dp_binary(d, PTC_OP_MATMUL, mat, vec);
    bool one_a = alpha.kind == PTC_ARG_INT ? alpha.i.value == 1 : alpha.f == 1.0;
    bool one_b = beta.kind == PTC_ARG_INT ? beta.i.value == 1 : beta.f == 1.0;
    bool zero_b = beta.kind == PTC_ARG_INT ? beta.i.value == 0 : beta.f == 0.0;
    ptc_arg ma[2] = {ptc_arg_value(prod), alpha}, mb[2] = {ptc_arg_value(input), beta};
    V scaled = one_a || !prod ? prod : dp_build(d, PTC_OP_MUL, ma, 2);
    if (zero_b)
        return scaled;
    V base = one_b || !input ? input : dp_build(d, PTC_OP_MUL, mb, 2);
    return dp_binary(d, PTC_OP_ADD, base, scaled);
}

/* ---- kron, cartesian_prod, diag_embed, cov, corrcoef -------------------------------------------
 */

/* kron(a, b) of nd dims each (the fewer padded with leading 1s by the
 * caller's shapes): a's dim i spread over b's, a_i b_i each. */
V ptc_composite_kron(dctx *d, V a, V b, int nd)
{
    if (!a || !b)
        return NULL;
    int64_t sa[PTC_MAX_DIMS] = {0}, sb[PTC_MAX_DIMS] = {0}, out[PTC_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->type.ndim), ib = i - (nd - b->type.ndim);
        int64_t na = ia >= 0 ? a->type.shape[ia].value : 1,
                nb = ib >= 0 ? b->type.shape[ib].value : 1;
        sa[2 * i] = na, sa[2 * i + 1] = 1, sb[2 * i] = 1, sb[2 * i + 1] = nb, out[i] = na * nb;
    }
    V prod = dp_binary(d, PTC_OP_MUL, reshape_to(d, a, sa, 2 * nd), reshape_to(d, b, sb, 2 * nd));
    return reshape_to(d, prod, out, nd);
}

/* cartesian_prod of n 1-D tensors: row r holds the r-th combination, the
 * last tensor varying fastest. */
V ptc_composite_cartesian_prod(dctx *d, V *parts, int n)
{
    ptc_dim grid[PTC_MAX_DIMS];
    for (int i = 0; i < n; i++)
        grid[i] = parts[i] ? parts[i]->type.shape[0] : ptc_dim_c(0);
    V columns[PTC_MAX_DIMS];
    int64_t flat = -1;
    for (int i = 0; i < n; i++) {
        ptc_arg e[2] = {ptc_arg_value(along(d, parts[i], i, n)),
                        ptc_arg_dims(d->g->arena, grid, n)};
        V spread = e[0].v ? dp_build(d, PTC_OP_EXPAND, e, 2) : NULL;
        columns[i] = reshape_to(d, spread, &flat, 1);
        if (!columns[i])
            return NULL;
    }
    ptc_arg s[2] = {ptc_arg_values(d->g->arena, columns, n), ptc_arg_int(1)};
    return dp_build(d, PTC_OP_STACK, s, 2);
}

/* diag_embed(x, offset) into the last two dims: [..., m, m], m = n + |offset|,
 * x's last dim on the diagonal `offset` above the main one (below: negative). */
V ptc_composite_diag_embed(dctx *d, V x, int64_t offset)
{
    if (!x)
        return NULL;
    int nd = x->type.ndim;
    int64_t n = x->type.shape[nd - 1].value, skip = offset < 0 ? -offset : offset, m = n + skip;
    ptc_device dev = x->type.device;
    V rows = unsqueeze(d, arange(d, 0, (double)m, 1, PTC_I64, dev), 1);
    V cols = unsqueeze(d, arange(d, 0, (double)m, 1, PTC_I64, dev), 0);
    V on = int_op(d, PTC_OP_EQ, dp_binary(d, PTC_OP_SUB, cols, rows), offset);
    int64_t pads[2] = {0, skip};
    ptc_arg p[3] = {ptc_arg_value(x), ptc_arg_ints(d->g->arena, pads, 2), ptc_arg_int(0)};
    V padded = dp_build(d, PTC_OP_CONSTANT_PAD_ND, p, 3); /* [..., m] */
    V spread = unsqueeze(d, padded, offset >= 0 ? nd : nd - 1);
    return where(d, on, ptc_arg_value(spread), ptc_arg_int(0));
}

/* cov of x [vars, observations] (1-D: one variable, a 0-dim result):
 * centred products over observations - correction. */
V ptc_composite_cov(dctx *d, V x, int64_t correction, ptc_dtype float_dt)
{
    if (x && !ptc_dtype_is_float(x->type.dtype))
        x = to_dtype(d, x, float_dt);
    if (!x)
        return NULL;
    bool one = x->type.ndim == 1;
    V rows = one ? unsqueeze(d, x, 0) : x;
    int64_t obs = rows ? rows->type.shape[1].value : 0;
    V centred = dp_binary(d, PTC_OP_SUB, rows, reduce(d, PTC_OP_MEAN, rows, 1, true, false));
    V prod = dp_binary(d, PTC_OP_MATMUL, centred, transpose(d, centred, 0, 1));
    V c = scalar_op(d, PTC_OP_DIV, prod, (double)(obs - correction));
    return one ? squeeze(d, squeeze(d, c, 1), 0) : c;
}

/* corrcoef: cov divided by the product of the standard deviations,
 * clamped to [-1, 1] (a 0-dim cov: c / c). */
V ptc_composite_corrcoef(dctx *d, V x, ptc_dtype float_dt)
{
    V c = ptc_composite_cov(d, x, 1, float_dt);
    if (!c || c->type.ndim == 0)
        return dp_binary(d, PTC_OP_DIV, c, c);
    int64_t n = c->type.shape[0].value;
    V eye = dp_binary(d, PTC_OP_EQ,
                      unsqueeze(d, arange(d, 0, (double)n, 1, PTC_I64, c->type.device), 1),
                      unsqueeze(d, arange(d, 0, (double)n, 1, PTC_I64, c->type.device), 0));
    V var = reduce(d, PTC_OP_SUM, where(d, eye, ptc_arg_value(c), ptc_arg_int(0)), 1, false, false);
    V sd = dp_unary(d, PTC_OP_SQRT, var);
    V r = dp_binary(d, PTC_OP_DIV, dp_binary(d, PTC_OP_DIV, c, unsqueeze(d, sd, 1)),
                    unsqueeze(d, sd, 0));
    ptc_arg cl[3] = {ptc_arg_value(r), ptc_arg_int(-1), ptc_arg_int(1)};
    return r ? dp_build(d, PTC_OP_CLAMP, cl, 3) : NULL;
}

/* ---- order statistics ---------------------------------------------------------------------- */

/* The element of x at sorted position k along dim (stable ascending, NaNs
 * last, as torch's sort), for kthvalue (k fixed), median (the lower middle,
 * or the first NaN where the line holds one) and nanmedian (the lower
 * middle of the numbers; the first NaN of an all-NaN line): values and
 * their indices into x. */
void ptc_composite_order_stat(dctx *d, V x, int dim, ptc_order_stat kind, int64_t k, bool keepdim,
                              V *values, V *indices)
{
    *values = *indices = NULL;
    if (!x)
        return;
    ptc_arg sa[4] = {ptc_arg_value(x), ptc_arg_int(dim), ptc_arg_bool(false), ptc_arg_bool(true)};
    ptc_node *sorted = dp_buildn(d, PTC_OP_SORT, sa, 4);
    if (!sorted)
        return;
    int64_t n = x->type.shape[dim].value;
    V at;
    if (kind == PTC_ORDER_KTH || !ptc_dtype_is_float(x->type.dtype)) {
        int64_t pos = kind == PTC_ORDER_KTH ? k : (n - 1) / 2;
        ptc_dim one[PTC_MAX_DIMS];
        memcpy(one, x->type.shape, sizeof *one * (size_t)x->type.ndim);
        one[dim] = ptc_dim_c(1);
        at = spread_value(d, one, x->type.ndim, x->type.device, ptc_arg_int(pos), PTC_I64);
    } else {
        V numbers =
            to_dtype(d, dp_unary(d, PTC_OP_LOGICAL_NOT, dp_unary(d, PTC_OP_ISNAN, x)), PTC_I64);
        V count = reduce(d, PTC_OP_SUM, numbers, dim, true, false);
        if (kind == PTC_ORDER_MEDIAN) { /* the first NaN where there is one */
            at = where(d, int_op(d, PTC_OP_LT, count, n), ptc_arg_value(count),
                       ptc_arg_int((n - 1) / 2));
        } else { /* max((count - 1) // 2, 0) */
            ptc_arg f[3] = {ptc_arg_value(int_op(d, PTC_OP_SUB, count, 1)), ptc_arg_int(2),
                            ptc_arg_str(d->g->arena, "floor")};
            V half = f[0].v ? dp_build(d, PTC_OP_DIV, f, 3) : NULL;
            ptc_arg z[3] = {ptc_arg_value(half), ptc_arg_int(0), ptc_arg_none()};
            at = half ? dp_build(d, PTC_OP_CLAMP, z, 3) : NULL;
        }
    }
    for (int i = 0; i < 2; i++) {
        ptc_arg g[3] = {ptc_arg_value(sorted->outs[i]), ptc_arg_int(dim), ptc_arg_value(at)};
        V picked = at ? dp_build(d, PTC_OP_GATHER, g, 3) : NULL;
        *(i ? indices : values) = keepdim ? picked : squeeze(d, picked, dim);
    }
}

/* ---- searching --------------------------------------------------------------------------------
 */

/* searchsorted / bucketize: the count of boundaries (seq's last dim, 1-D or
 * batched over values' leading dims) below each value (at or below with
 * right); a NaN value is past them all, as torch's. */
V ptc_composite_search_sorted(dctx *d, V seq, V values, bool right, bool out_int32)
{
    if (!seq || !values)
        return NULL;
    int64_t n = seq->type.shape[seq->type.ndim - 1].value, last = -1;
    V bounds = seq->type.ndim > 1 ? unsqueeze(d, seq, -2) : seq;
    V below = dp_binary(d, right ? PTC_OP_LE : PTC_OP_LT, bounds, unsqueeze(d, values, -1));
    ptc_arg s[3] = {ptc_arg_value(below), ptc_arg_ints(d->g->arena, &last, 1), ptc_arg_bool(false)};
    V count = below ? dp_build(d, PTC_OP_SUM, s, 3) : NULL;
    if (ptc_dtype_is_float(values->type.dtype))
        count = where(d, dp_unary(d, PTC_OP_ISNAN, values), ptc_arg_int(n), ptc_arg_value(count));
    return out_int32 ? to_dtype(d, count, PTC_I32) : count;
}

/* isin: whether each element equals one of test's (NaN equals none). */
V ptc_composite_isin(dctx *d, V elements, V test, bool invert)
{
    if (!elements || !test)
        return NULL;
    int64_t flat = -1, last = -1;
    V same = dp_binary(d, PTC_OP_EQ, unsqueeze(d, elements, -1), reshape_to(d, test, &flat, 1));
    ptc_arg s[3] = {ptc_arg_value(same), ptc_arg_ints(d->g->arena, &last, 1), ptc_arg_bool(false)};
    V hits = same ? dp_build(d, PTC_OP_SUM, s, 3) : NULL;
    return int_op(d, invert ? PTC_OP_EQ : PTC_OP_GT, hits, 0);
}

/* ---- embedding_bag -------------------------------------------------------------------------- */

/* The bag of each of n places (1-D input): offsets[1:] start bags 1 and
 * on (offsets[0] must be 0: arange(1)[offsets[0]] reads it through an index
 * check, eager's error otherwise; an offset past n fails the index_add's
 * check). With last, offsets' last entry only ends the last bag. */
static V bag_of_place(dctx *d, V offsets, int64_t n, bool last)
{
    int64_t bags = offsets->type.shape[0].value - (last ? 1 : 0);
    ptc_dim marks_shape[1] = {ptc_dim_c(n + 1)};
    V marks = spread_value(d, marks_shape, 1, offsets->type.device, ptc_arg_int(0), PTC_I64);
    V starts = narrow(d, offsets, 0, 1, bags - 1);
    V ones = ptc_composite_spread(d, starts, ptc_arg_int(1), PTC_I64);
    marks = ptc_composite_index_scatter(d, marks, 0, starts, ones, true, ptc_arg_none());
    ptc_arg c[3] = {ptc_arg_value(narrow(d, marks, 0, 0, n)), ptc_arg_int(0), ptc_arg_none()};
    V bag = c[0].v ? dp_build(d, PTC_OP_CUMSUM, c, 3) : NULL;
    V first = index_select(d, arange(d, 0, 1, 1, PTC_I64, offsets->type.device), 0,
                           narrow(d, offsets, 0, 0, 1));
    return dp_binary(d, PTC_OP_ADD, bag, first);
}

V ptc_composite_embedding_bag(dctx *d, const ptc_embedding_bag *e)
{
    V w = e->weight, in = e->input;
    if (!w || !in)
        return NULL;
    ptc_dtype dt = w->type.dtype;
    ptc_arg ea[5] = {ptc_arg_value(w), ptc_arg_value(in), ptc_arg_int(-1), ptc_arg_bool(false),
                     ptc_arg_bool(false)};
    V rows = dp_build(d, PTC_OP_EMBEDDING, ea, 5);
    V keep = e->padding_idx >= 0 ? to_dtype(d, int_op(d, PTC_OP_NE, in, e->padding_idx), dt)
                                 : ptc_composite_spread(d, in, ptc_arg_int(1), dt);
    V weight = e->per_sample ? dp_binary(d, PTC_OP_MUL, keep, e->per_sample) : keep;
    int lastdim = in->type.ndim; /* rows: input's dims, then the embedding's */
    V kept = dp_binary(d, PTC_OP_MUL, rows, unsqueeze(d, weight, lastdim));
    V sum, count;
    if (in->type.ndim == 2) { /* bags of one size */
        sum = reduce(d, PTC_OP_SUM, kept, 1, false, false);
        count = reduce(d, PTC_OP_SUM, keep, 1, true, false);
        if (e->mode == PTC_BAG_MAX) {
            V masked = where(d, unsqueeze(d, scalar_op(d, PTC_OP_NE, keep, 0), 2),
                             ptc_arg_value(rows), ptc_arg_float(-INFINITY));
            ptc_arg m[3] = {ptc_arg_value(masked), ptc_arg_ints(d->g->arena, (int64_t[]){1}, 1),
                            ptc_arg_bool(false)};
            V most = masked ? dp_build(d, PTC_OP_AMAX, m, 3) : NULL;
            return where(d, scalar_op(d, PTC_OP_GT, count, 0), ptc_arg_value(most),
                         ptc_arg_float(0));
        }
    } else {
        int64_t bags = e->offsets->type.shape[0].value - (e->include_last_offset ? 1 : 0);
        V bag = bag_of_place(d, e->offsets, in->type.shape[0].value, e->include_last_offset);
        ptc_dim out_shape[2] = {ptc_dim_c(bags), w->type.shape[1]};
        V zeros = spread_value(d, out_shape, 2, w->type.device, ptc_arg_int(0), dt);
        sum = ptc_composite_index_scatter(d, zeros, 0, bag, kept, true, ptc_arg_none());
        count = ptc_composite_index_scatter(d, narrow(d, zeros, 1, 0, 1), 0, bag,
                                            unsqueeze(d, keep, 1), true, ptc_arg_none());
    }
    if (e->mode == PTC_BAG_SUM)
        return sum;
    return dp_binary(d, PTC_OP_DIV, sum, clamp_min(d, count, 1));
}
