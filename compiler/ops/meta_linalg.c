/* Meta functions of matrix products, attention, convolution and pooling.
 *
 * Matrix products need one dtype for all operands (torch does not promote
 * here) and follow torch.matmul's cases: dot for two vectors, a vector is
 * promoted to a matrix and its dim removed afterwards, batch dims broadcast.
 * Additive operands (addmm's self, linear's bias) must broadcast to the
 * product's shape without growing it. Convolution and pooling sizes use
 * torch's formulas; pooling's ceil_mode drops a last window that would start
 * in the right padding.
 */
#include "ops/meta.h"

#include <string.h>

static int same_dtype(ptc_meta *m, const ptc_ttype *a, const ptc_ttype *b)
{
    if (!b || a->dtype == b->dtype)
        return 0;
    return ptc_meta_fail(m, "expected one dtype, got %s and %s", meta_tstr(m, a), meta_tstr(m, b));
}

static int no_bool(ptc_meta *m, const ptc_ttype *a)
{
    if (a->dtype != PTC_BOOL)
        return 0;
    return ptc_meta_fail(m, "not supported for bool tensors (%s)", meta_tstr(m, a));
}

static int inner_match(ptc_meta *m, const ptc_ttype *a, const ptc_ttype *b, ptc_dim k1, ptc_dim k2)
{
    if (meta_same(m, k1, k2))
        return 0;
    return ptc_meta_fail(m, "shapes %s and %s cannot be multiplied (%s vs %s)", meta_tstr(m, a),
                         meta_tstr(m, b), meta_dstr(m, k1), meta_dstr(m, k2));
}

int meta_mm(ptc_meta *m)
{
    const ptc_ttype *a = meta_t(m, 0), *b = meta_t(m, 1);
    if (a->ndim != 2 || b->ndim != 2)
        return ptc_meta_fail(m, "expected 2-D matrices, got %s and %s", meta_tstr(m, a),
                             meta_tstr(m, b));
    if (same_dtype(m, a, b) || no_bool(m, a) || inner_match(m, a, b, a->shape[1], b->shape[0]))
        return -1;
    ptc_dim shape[2] = {a->shape[0], b->shape[1]};
    meta_out(m, a->dtype, shape, 2);
    return 0;
}

/* bmm's shape check, shared with baddbmm. */
static int bmm_shape(ptc_meta *m, const ptc_ttype *a, const ptc_ttype *b, ptc_dim *shape)
{
    if (a->ndim != 3 || b->ndim != 3)
        return ptc_meta_fail(m, "expected 3-D batches of matrices, got %s and %s", meta_tstr(m, a),
                             meta_tstr(m, b));
    if (same_dtype(m, a, b) || no_bool(m, a))
        return -1;
    if (!meta_same(m, a->shape[0], b->shape[0]))
        return ptc_meta_fail(m, "batch sizes of %s and %s differ", meta_tstr(m, a),
                             meta_tstr(m, b));
    if (inner_match(m, a, b, a->shape[2], b->shape[1]))
        return -1;
    shape[0] = a->shape[0];
    shape[1] = a->shape[1];
    shape[2] = b->shape[2];
    return 0;
}

int meta_bmm(ptc_meta *m)
{
    ptc_dim shape[3];
    if (bmm_shape(m, meta_t(m, 0), meta_t(m, 1), shape))
        return -1;
    meta_out(m, meta_t(m, 0)->dtype, shape, 3);
    return 0;
}

/* torch.matmul's shape: every case of operand ranks. */
static int matmul_shape(ptc_meta *m, const ptc_ttype *a, const ptc_ttype *b, ptc_dim *out,
                        int *nout)
{
    int na = a->ndim, nb = b->ndim;
    if (na == 0 || nb == 0)
        return ptc_meta_fail(m, "both arguments need at least 1 dim, got %s and %s",
                             meta_tstr(m, a), meta_tstr(m, b));
    if (same_dtype(m, a, b) || no_bool(m, a))
        return -1;
    /* Contracted dims: a's last, b's first (vector) or second to last. */
    ptc_dim ka = a->shape[na - 1], kb = b->shape[nb == 1 ? 0 : nb - 2];
    if (inner_match(m, a, b, ka, kb))
        return -1;
    /* Batch dims broadcast; a vector operand contributes none. */
    ptc_ttype ba = {0}, bb = {0};
    ba.dtype = a->dtype;
    bb.dtype = b->dtype;
    ba.ndim = (int8_t)(na > 2 ? na - 2 : 0);
    bb.ndim = (int8_t)(nb > 2 ? nb - 2 : 0);
    memcpy(ba.shape, a->shape, sizeof(ptc_dim) * (size_t)ba.ndim);
    memcpy(bb.shape, b->shape, sizeof(ptc_dim) * (size_t)bb.ndim);
    int n;
    if (meta_broadcast_dims(ba.shape, ba.ndim, bb.shape, bb.ndim, out, &n, &(int){0}))
        return ptc_meta_fail(m, "batch dims of %s and %s cannot broadcast", meta_tstr(m, a),
                             meta_tstr(m, b));
    if (na >= 2)
        out[n++] = a->shape[na - 2];
    if (nb >= 2)
        out[n++] = b->shape[nb - 1];
    if (n > PTC_MAX_DIMS)
        return ptc_meta_fail(m, "result has more than %d dims", PTC_MAX_DIMS);
    *nout = n;
    return 0;
}

int meta_matmul(ptc_meta *m)
{
    ptc_dim shape[PTC_MAX_DIMS + 2];
    int n;
    if (matmul_shape(m, meta_t(m, 0), meta_t(m, 1), shape, &n))
        return -1;
    meta_out(m, meta_t(m, 0)->dtype, shape, n);
    return 0;
}

int meta_addmm(ptc_meta *m)
{
    const ptc_ttype *self = meta_t(m, 0), *a = meta_t(m, 1), *b = meta_t(m, 2);
    if (a->ndim != 2 || b->ndim != 2)
        return ptc_meta_fail(m, "expected 2-D matrices, got %s and %s", meta_tstr(m, a),
                             meta_tstr(m, b));
    if (same_dtype(m, a, b) || same_dtype(m, a, self) || no_bool(m, a) ||
        inner_match(m, a, b, a->shape[1], b->shape[0]))
        return -1;
    ptc_dim shape[2] = {a->shape[0], b->shape[1]};
    if (meta_expandable(m, self, shape, 2, "self"))
        return -1;
    meta_out(m, a->dtype, shape, 2);
    return 0;
}

int meta_linear(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0), *w = meta_t(m, 1), *bias = meta_t(m, 2);
    if (x->ndim == 0)
        return ptc_meta_fail(m, "input needs at least 1 dim, got %s", meta_tstr(m, x));
    if (w->ndim != 1 && w->ndim != 2)
        return ptc_meta_fail(m, "weight must be 1-D or 2-D, got %s", meta_tstr(m, w));
    /* torch takes addmm for a 2-D input with bias, which needs a 2-D weight. */
    if (bias && x->ndim == 2 && w->ndim != 2)
        return ptc_meta_fail(m, "a 2-D input with bias needs a 2-D weight, got %s",
                             meta_tstr(m, w));
    if (same_dtype(m, x, w) || same_dtype(m, x, bias) || no_bool(m, x))
        return -1;
    ptc_dim k = w->shape[w->ndim - 1];
    if (!meta_same(m, x->shape[x->ndim - 1], k))
        return ptc_meta_fail(m, "input %s and weight %s cannot be multiplied (%s vs %s)",
                             meta_tstr(m, x), meta_tstr(m, w), meta_dstr(m, x->shape[x->ndim - 1]),
                             meta_dstr(m, k));
    ptc_dim shape[PTC_MAX_DIMS];
    int n = x->ndim - 1;
    memcpy(shape, x->shape, sizeof(ptc_dim) * (size_t)n);
    if (w->ndim == 2)
        shape[n++] = w->shape[0];
    if (bias && meta_expandable(m, bias, shape, n, "bias"))
        return -1;
    meta_out(m, x->dtype, shape, n);
    return 0;
}

int meta_baddbmm(ptc_meta *m)
{
    const ptc_ttype *self = meta_t(m, 0);
    ptc_dim shape[3];
    if (bmm_shape(m, meta_t(m, 1), meta_t(m, 2), shape) || same_dtype(m, meta_t(m, 1), self) ||
        meta_expandable(m, self, shape, 3, "self"))
        return -1;
    meta_out(m, self->dtype, shape, 3);
    return 0;
}

/* scaled_dot_product_attention(q [..., L, E], k [..., S, E], v [..., S, Ev])
 * -> [..., L, Ev], batch dims broadcast; the mask broadcasts to [..., L, S]. */
int meta_sdpa(ptc_meta *m)
{
    const ptc_ttype *q = meta_t(m, 0), *k = meta_t(m, 1), *v = meta_t(m, 2), *mask = meta_t(m, 3);
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
        return ptc_meta_fail(m, "query, key and value need at least 2 dims, got %s, %s and %s",
                             meta_tstr(m, q), meta_tstr(m, k), meta_tstr(m, v));
    if (q->dtype != k->dtype || q->dtype != v->dtype)
        return ptc_meta_fail(m, "query, key and value must have one dtype, got %s, %s and %s",
                             meta_tstr(m, q), meta_tstr(m, k), meta_tstr(m, v));
    if (meta_need_float(m, q, "query"))
        return -1;
    double p = meta_arg(m, "dropout_p")->f;
    if (!(p >= 0 && p <= 1))
        return ptc_meta_fail(m, "dropout probability has to be between 0 and 1, got %g", p);
    if (mask && meta_arg(m, "is_causal")->b)
        return ptc_meta_fail(m, "attn_mask must not be given when is_causal=true");
    ptc_dim scores[PTC_MAX_DIMS + 2], out[PTC_MAX_DIMS + 2];
    int ns, no;
    ptc_ttype kt = *k; /* k transposed: [..., E, S] */
    kt.shape[k->ndim - 2] = k->shape[k->ndim - 1];
    kt.shape[k->ndim - 1] = k->shape[k->ndim - 2];
    if (matmul_shape(m, q, &kt, scores, &ns))
        return -1;
    ptc_ttype st = *q;
    st.ndim = (int8_t)ns;
    memcpy(st.shape, scores, sizeof(ptc_dim) * (size_t)ns);
    if (matmul_shape(m, &st, v, out, &no))
        return -1;
    if (mask) {
        if (mask->dtype != PTC_BOOL && mask->dtype != q->dtype && mask->dtype != PTC_F32)
            return ptc_meta_fail(m, "attn_mask must be bool or of the query's dtype, got %s",
                                 meta_tstr(m, mask));
        if (meta_expandable(m, mask, scores, ns, "attn_mask"))
            return -1;
    }
    if (meta_arg(m, "heads_last")->b) { /* [B, L, H, E]: see the op's decomposition */
        if (no != 4)
            return ptc_meta_fail(m, "heads_last needs 4-d attention, got %d dims", no);
        ptc_dim h = out[1];
        out[1] = out[2], out[2] = h;
    }
    meta_out(m, q->dtype, out, no);
    return 0;
}

/* ---- convolution ------------------------------------------------------------ */

typedef struct conv_args {
    int k; /* spatial dims */
    ptc_dim stride[3], padding[3], dilation[3], output_padding[3];
    bool transposed;
    int64_t groups;
} conv_args;

/* An int list of the convolution: one value for every spatial dim or a
 * single value repeated (as torch's expand_param_if_needed). Stride, padding
 * and dilation may be symbolic (padding = H // 8): the output size is an
 * expression in them and the runtime binds them before the extern runs. */
static int conv_list(ptc_meta *m, const char *name, int k, int64_t dflt, ptc_dim *out)
{
    bool may_be_symbolic = strcmp(name, "output_padding") != 0;
    int i = meta_argi(m, name);
    if (i < 0) {
        for (int j = 0; j < k; j++)
            out[j] = ptc_dim_c(dflt);
        return 0;
    }
    const ptc_arg *a = &m->args[i];
    if (a->is.n != 1 && a->is.n != k)
        return ptc_meta_fail(m, "expected %s to be one int or %d ints, got %s", name, k,
                             meta_shapestr(m, a->is.d, a->is.n));
    for (int j = 0; j < k; j++) {
        out[j] = a->is.d[a->is.n == 1 ? 0 : j];
        if (out[j].sym && !may_be_symbolic)
            return ptc_meta_fail(m, "%s must be constant, got %s", name, meta_dstr(m, out[j]));
    }
    return 0;
}

/* Fails with what unless d >= least (for every size, when d is symbolic). */
static int conv_at_least(ptc_meta *m, ptc_dim d, int64_t least, const char *what)
{
    if (!d.sym)
        return d.value >= least ? 0 : ptc_meta_fail(m, "%s, got %lld", what, (long long)d.value);
    if (meta_sign(ptc_dim_sub(m->arena, d, ptc_dim_c(least - 1))) == 1)
        return 0;
    return ptc_meta_fail(m, "%s, and %s may not be", what, meta_dstr(m, d));
}

static int conv_read(ptc_meta *m, int k, conv_args *c)
{
    c->k = k;
    int ti = meta_argi(m, "transposed");
    c->transposed = m->op == PTC_OP_CONV_TRANSPOSE2D || (ti >= 0 && m->args[ti].b);
    if (conv_list(m, "stride", k, 1, c->stride) || conv_list(m, "padding", k, 0, c->padding) ||
        conv_list(m, "dilation", k, 1, c->dilation) ||
        conv_list(m, "output_padding", k, 0, c->output_padding) ||
        meta_const(m, meta_arg(m, "groups")->i, "groups", &c->groups))
        return -1;
    for (int j = 0; j < k; j++) {
        if (conv_at_least(m, c->stride[j], 1, "stride must be positive") ||
            conv_at_least(m, c->padding[j], 0, "padding must not be negative") ||
            conv_at_least(m, c->dilation[j], 1, "dilation must be positive"))
            return -1;
        if (c->output_padding[j].value < 0)
            return ptc_meta_fail(m, "output_padding must not be negative");
        if (c->transposed && (c->stride[j].sym || c->dilation[j].sym))
            return ptc_meta_fail(m, "a transposed convolution needs constant stride and dilation");
        if (c->transposed && c->output_padding[j].value >= c->stride[j].value &&
            c->output_padding[j].value >= c->dilation[j].value)
            return ptc_meta_fail(m,
                                 "output_padding must be smaller than either stride or dilation, "
                                 "got output_padding %lld, stride %lld, dilation %lld",
                                 (long long)c->output_padding[j].value,
                                 (long long)c->stride[j].value, (long long)c->dilation[j].value);
    }
    if (c->groups <= 0)
        return ptc_meta_fail(m, "groups must be positive, got %lld", (long long)c->groups);
    return 0;
}

/* One output size of a convolution. */
static int conv_size(ptc_meta *m, const conv_args *c, int j, ptc_dim in, ptc_dim ksize,
                     const ptc_ttype *x, const ptc_ttype *w, ptc_dim *out)
{
    ptc_arena *a = m->arena;
    ptc_dim s = c->stride[j], twice_p = ptc_dim_mul(a, ptc_dim_c(2), c->padding[j]);
    ptc_dim eff = ptc_dim_add(
        a, ptc_dim_mul(a, c->dilation[j], ptc_dim_sub(a, ksize, ptc_dim_c(1))), ptc_dim_c(1));
    if (c->transposed) {
        /* (in - 1) * s - 2p + d (k - 1) + output_padding + 1 */
        ptc_dim o = ptc_dim_mul(a, ptc_dim_sub(a, in, ptc_dim_c(1)), s);
        o = ptc_dim_add(a, o, ptc_dim_sub(a, c->output_padding[j], twice_p));
        *out = ptc_dim_add(a, o, eff);
    } else {
        ptc_dim padded = ptc_dim_add(a, in, twice_p);
        int le = meta_le_env(m, eff, padded);
        if (le == 0)
            return ptc_meta_fail(m,
                                 "kernel of %s is larger than the padded input %s (dim %d: %s "
                                 "vs %s)",
                                 meta_tstr(m, w), meta_tstr(m, x), j, meta_dstr(m, eff),
                                 meta_dstr(m, padded));
        if (le < 0)
            return ptc_meta_fail(m, "cannot decide whether the kernel of %s fits the input %s",
                                 meta_tstr(m, w), meta_tstr(m, x));
        *out = ptc_dim_add(a, ptc_dim_floordiv(a, ptc_dim_sub(a, padded, eff), s), ptc_dim_c(1));
    }
    int sign = meta_sign_env(m, *out);
    if (sign != 1)
        return ptc_meta_fail(m,
                             sign == 2 ? "cannot decide whether output size %s of input %s is "
                                         "positive"
                                       : "output size %s of input %s is too small",
                             meta_dstr(m, *out), meta_tstr(m, x));
    return 0;
}

/* convolution_backward_weight: the gradient of a (not transposed) batched
 * convolution's weight, the weight's type; grad_output has the shape of the
 * convolution of input by weight. convolution_backward: the input's gradient
 * (the input's type), then the weight's. */
int meta_conv_backward_weight(ptc_meta *m)
{
    const ptc_ttype *g = meta_t(m, 0), *x = meta_t(m, 1), *w = meta_t(m, 2);
    int k = w->ndim - 2;
    if (k < 1 || k > 3)
        return ptc_meta_fail(m, "weight must have 3 to 5 dims, got %s", meta_tstr(m, w));
    if (x->ndim != k + 2 || g->ndim != k + 2)
        return ptc_meta_fail(
            m, "expected a batched %d-D input and grad_output for weight %s, got %s and %s", k + 2,
            meta_tstr(m, w), meta_tstr(m, x), meta_tstr(m, g));
    conv_args c;
    if (conv_read(m, k, &c) || same_dtype(m, x, w) || same_dtype(m, g, w) || no_bool(m, x))
        return -1;
    ptc_dim wc = ptc_dim_mul(m->arena, w->shape[1], ptc_dim_c(c.groups));
    if (!meta_same(m, x->shape[1], wc) || !meta_same(m, g->shape[1], w->shape[0]) ||
        !meta_same(m, g->shape[0], x->shape[0]) ||
        !meta_is(ptc_dim_mod(m->arena, w->shape[0], ptc_dim_c(c.groups)), 0))
        return ptc_meta_fail(m, "input %s, weight %s, grad_output %s and groups=%lld disagree",
                             meta_tstr(m, x), meta_tstr(m, w), meta_tstr(m, g),
                             (long long)c.groups);
    for (int j = 0; j < k; j++) {
        ptc_dim o;
        if (conv_size(m, &c, j, x->shape[2 + j], w->shape[2 + j], x, w, &o))
            return -1;
        if (!meta_same(m, o, g->shape[2 + j]))
            return ptc_meta_fail(m,
                                 "grad_output %s is not the shape of the convolution of %s by %s",
                                 meta_tstr(m, g), meta_tstr(m, x), meta_tstr(m, w));
    }
    if (m->op == PTC_OP_CONVOLUTION_BACKWARD)
        meta_out_like(m, x);
    meta_out_like(m, w);
    return 0;
}

/* convolution, conv1d/2d/3d, conv_transpose2d. */
int meta_convolution(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0), *w = meta_t(m, 1), *bias = meta_t(m, 2);
    int k = w->ndim - 2;
    if (k < 1 || k > 3)
        return ptc_meta_fail(m, "weight must have 3 to 5 dims, got %s", meta_tstr(m, w));
    int expect = m->op == PTC_OP_CONV1D        ? 1
                 : m->op == PTC_OP_CONV3D      ? 3
                 : m->op == PTC_OP_CONVOLUTION ? k
                                               : 2;
    if (k != expect)
        return ptc_meta_fail(m, "expected a %d-D weight, got %s", expect + 2, meta_tstr(m, w));
    /* The functional forms take unbatched inputs too. */
    bool batched = x->ndim == k + 2;
    if (!batched && !(x->ndim == k + 1 && m->op != PTC_OP_CONVOLUTION))
        return ptc_meta_fail(m, "expected a %d-D input for weight %s, got %s", k + 2,
                             meta_tstr(m, w), meta_tstr(m, x));
    conv_args c;
    if (conv_read(m, k, &c) || same_dtype(m, x, w) || same_dtype(m, x, bias) || no_bool(m, x))
        return -1;
    int cdim = batched ? 1 : 0;
    ptc_dim cin = x->shape[cdim];
    ptc_dim g = ptc_dim_c(c.groups);
    ptc_dim wc =
        ptc_dim_mul(m->arena, w->shape[c.transposed ? 0 : 1], c.transposed ? ptc_dim_c(1) : g);
    ptc_dim cout = c.transposed ? ptc_dim_mul(m->arena, w->shape[1], g) : w->shape[0];
    if (!c.transposed && !meta_is(ptc_dim_mod(m->arena, w->shape[0], g), 0))
        return ptc_meta_fail(m, "weight %s: out channels not divisible by groups=%lld",
                             meta_tstr(m, w), (long long)c.groups);
    if (!meta_same(m, cin, wc))
        return ptc_meta_fail(m, "weight %s with groups=%lld expects input %s to have %s channels",
                             meta_tstr(m, w), (long long)c.groups, meta_tstr(m, x),
                             meta_dstr(m, wc));
    if (c.transposed && !meta_is(ptc_dim_mod(m->arena, cin, g), 0))
        return ptc_meta_fail(m, "input channels of %s not divisible by groups=%lld",
                             meta_tstr(m, x), (long long)c.groups);
    if (bias && (bias->ndim != 1 || !meta_same(m, bias->shape[0], cout)))
        return ptc_meta_fail(m, "bias should be 1-D with %s elements, got %s", meta_dstr(m, cout),
                             meta_tstr(m, bias));
    ptc_dim shape[PTC_MAX_DIMS];
    int n = 0;
    if (batched)
        shape[n++] = x->shape[0];
    shape[n++] = cout;
    for (int j = 0; j < k; j++)
        if (conv_size(m, &c, j, x->shape[cdim + 1 + j], w->shape[2 + j], x, w, &shape[n++]))
            return -1;
    meta_out(m, x->dtype, shape, n);
    return 0;
}

/* ---- pooling ---------------------------------------------------------------- */

/* torch's pooling_output_shape, with the ceil_mode correction decided for
 * symbolic sizes where it can be (it never applies when stride + pad does not
 * exceed the dilated kernel). */
static int pool_size(ptc_meta *m, const ptc_ttype *x, ptc_dim in, int64_t k, int64_t s, int64_t p,
                     int64_t d, bool ceil_mode, ptc_dim *out)
{
    ptc_arena *a = m->arena;
    int64_t eff = d * (k - 1) + 1;
    ptc_dim num = ptc_dim_add(a, in, ptc_dim_c(2 * p - eff + (ceil_mode ? s - 1 : 0)));
    ptc_dim o = ptc_dim_add(a, ptc_dim_floordiv(a, num, ptc_dim_c(s)), ptc_dim_c(1));
    if (ceil_mode) {
        /* The last window must start inside the input or the left padding. */
        ptc_dim start = ptc_dim_mul(a, ptc_dim_sub(a, o, ptc_dim_c(1)), ptc_dim_c(s));
        int ge = meta_le_env(m, ptc_dim_add(a, in, ptc_dim_c(p)), start);
        if (ge < 0)
            return ptc_meta_fail(m, "cannot decide the ceil_mode output size for input %s",
                                 meta_tstr(m, x));
        if (ge)
            o = ptc_dim_sub(a, o, ptc_dim_c(1));
    }
    int sign = meta_sign_env(m, o);
    if (sign != 1)
        return ptc_meta_fail(m,
                             sign == 2 ? "cannot decide whether output size %s of input %s is "
                                         "positive"
                                       : "output size %s of input %s is too small",
                             meta_dstr(m, o), meta_tstr(m, x));
    *out = o;
    return 0;
}

static int pool_input(ptc_meta *m, const ptc_ttype *x)
{
    if (x->ndim != 3 && x->ndim != 4)
        return ptc_meta_fail(m, "expected a 3-D or 4-D input, got %s", meta_tstr(m, x));
    /* Only the batch dim may be empty. */
    for (int i = x->ndim - 3; i < x->ndim; i++)
        if (meta_is(x->shape[i], 0))
            return ptc_meta_fail(m, "expected non-empty dims except the batch dim, got %s",
                                 meta_tstr(m, x));
    return 0;
}

/* max_pool2d, max_pool2d_with_indices, avg_pool2d. */
int meta_pool2d(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    bool avg = m->op == PTC_OP_AVG_POOL2D;
    if (pool_input(m, x) || no_bool(m, x))
        return -1;
    const ptc_arg *ks = meta_arg(m, "kernel_size"), *st = meta_arg(m, "stride"),
                  *pad = meta_arg(m, "padding");
    int di = meta_argi(m, "dilation");
    bool ceil_mode = meta_arg(m, "ceil_mode")->b;
    if (avg) {
        const ptc_arg *div = meta_arg(m, "divisor_override");
        if (div->kind == PTC_ARG_INT && meta_is(div->i, 0))
            return ptc_meta_fail(m, "divisor_override must not be zero");
    }
    ptc_dim shape[4];
    int n = x->ndim - 2;
    memcpy(shape, x->shape, sizeof(ptc_dim) * (size_t)n);
    for (int j = 0; j < 2; j++) {
        int64_t k, s, p, d = 1;
        if (meta_const(m, ks->is.d[j], "kernel_size", &k) ||
            meta_const(m, st->is.n ? st->is.d[j] : ks->is.d[j], "stride", &s) ||
            meta_const(m, pad->is.d[j], "padding", &p) ||
            (di >= 0 && meta_const(m, m->args[di].is.d[j], "dilation", &d)))
            return -1;
        if (k <= 0 || s <= 0 || d <= 0)
            return ptc_meta_fail(m,
                                 "kernel_size, stride and dilation must be positive, got %lld, "
                                 "%lld and %lld",
                                 (long long)k, (long long)s, (long long)d);
        if (p < 0 || p > k / 2)
            return ptc_meta_fail(m,
                                 "padding should be at most half of the kernel size, got "
                                 "padding %lld and kernel_size %lld",
                                 (long long)p, (long long)k);
        if (pool_size(m, x, x->shape[x->ndim - 2 + j], k, s, p, d, ceil_mode, &shape[n + j]))
            return -1;
    }
    meta_out(m, x->dtype, shape, x->ndim);
    if (m->op == PTC_OP_MAX_POOL2D_WITH_INDICES)
        meta_out(m, PTC_I64, shape, x->ndim);
    return 0;
}

int meta_adaptive_avg_pool2d(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *os = meta_arg(m, "output_size");
    if (pool_input(m, x) || meta_need_float(m, x, "input"))
        return -1;
    ptc_dim shape[4];
    int n = x->ndim - 2;
    memcpy(shape, x->shape, sizeof(ptc_dim) * (size_t)n);
    for (int j = 0; j < 2; j++) {
        ptc_dim o = os->is.d[j];
        if (meta_sign(o) < 0)
            return ptc_meta_fail(m, "output_size must not be negative, got %s", meta_dstr(m, o));
        shape[n + j] = o;
    }
    meta_out(m, x->dtype, shape, x->ndim);
    return 0;
}
