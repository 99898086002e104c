/* C implementations of the externs, used when no framework runs them
 * (ptc-run, ptminify, tests) and for the scans ptc always runs itself.
 *
 * Products and convolutions go through the blocked GEMM in f32 or f64: f16
 * and bf16 operands are widened to f32 first, integers take a plain int64
 * loop. Convolution is im2col + GEMM per (image, group), images in parallel,
 * with 1x1 stride-1 convolutions reading the input directly; transposed
 * convolution is GEMM + col2im, a weight gradient the GEMM of the output
 * gradient with im2col's columns, transposed. Attention follows the reference's math path
 * row by row (in double, with the same dropout draws), rows in parallel. A
 * sort or topk orders each line as the reference kernel does (ptc_sort_order),
 * and cummax / cummin scan each line with the reference's rule.
 */
#include "runtime/rt.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static int xfail(ptc_error *err, const ptc_node *n, const char *msg)
{
    return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "%s: %s", ptc_op_name(n->op), msg);
}

static const ptc_arg *arg(const ptc_node *n, const char *name)
{
    int i = ptc_param_index(n->op, name);
    return i >= 0 && i < n->nargs ? &n->args[i] : NULL;
}

static double ld(const ptc_tensor *t, int64_t off)
{
    return ptc_load_f64((const char *)t->data + off * (int64_t)ptc_dtype_size(t->dtype), t->dtype);
}

/* t as a contiguous tensor of dtype dt: t itself (not owned, storage NULL)
 * when it already is one, else a copy (released by the caller). */
static int to_contig(const ptc_tensor *t, ptc_dtype dt, ptc_tensor *out, ptc_error *err)
{
    if (t->dtype == dt && ptc_tensor_is_contiguous(t)) {
        *out = *t;
        out->storage = NULL;
        return 0;
    }
    if (ptc_tensor_alloc(out, dt, t->ndim, t->sizes, err))
        return -1;
    return ptc_tensor_copy(out, t, err);
}

static bool needs_copy(const ptc_tensor *t, ptc_dtype dt)
{
    return t->dtype != dt || !ptc_tensor_is_contiguous(t);
}

/* A contiguous tensor of t's sizes and dtype dt in the calling thread's
 * scratch slot (ptc_scratch: borrowed, nothing to release). */
static ptc_tensor scratch_tensor(const ptc_tensor *t, ptc_dtype dt, ptc_scratch_slot slot)
{
    size_t bytes = (size_t)ptc_tensor_numel(t) * ptc_dtype_size(dt);
    return ptc_tensor_borrow(ptc_scratch(slot, bytes ? bytes : 1), dt, t->ndim, t->sizes, NULL);
}

/* to_contig, the copy in a scratch slot. */
static int to_contig_scratch(const ptc_tensor *t, ptc_dtype dt, ptc_scratch_slot slot,
                             ptc_tensor *out, ptc_error *err)
{
    if (!needs_copy(t, dt)) {
        *out = *t;
        out->storage = NULL;
        return 0;
    }
    *out = scratch_tensor(t, dt, slot);
    return ptc_tensor_copy(out, t, err);
}

static void release_copy(ptc_tensor *t)
{
    if (t->storage)
        ptc_tensor_release(t);
}

/* ---- products ----------------------------------------------------------------------- */

/* out[M,N] = a[M,K] @ b[K,N] for 2-d views (any dtype, any strides). */
static int matmul2(const ptc_tensor *a, const ptc_tensor *b, ptc_tensor *out, ptc_error *err)
{
    int64_t M = a->sizes[0], K = a->sizes[1], N = b->sizes[1];
    ptc_dtype dt = out->dtype;
    if (dt == PTC_F32 && a->dtype == PTC_F32 && b->dtype == PTC_F32) {
        ptc_sgemm(M, N, K, a->data, a->strides[0], a->strides[1], b->data, b->strides[0],
                  b->strides[1], out->data, out->strides[0], out->strides[1], false);
        return 0;
    }
    if (dt == PTC_F64) {
        ptc_dgemm(M, N, K, a->data, a->strides[0], a->strides[1], b->data, b->strides[0],
                  b->strides[1], out->data, out->strides[0], out->strides[1], false);
        return 0;
    }
    if (ptc_dtype_is_float(dt)) {
        ptc_tensor af, bf, of;
        int rc = -1;
        if (to_contig(a, PTC_F32, &af, err))
            return -1;
        if (to_contig(b, PTC_F32, &bf, err))
            goto free_a;
        if (ptc_tensor_alloc(&of, PTC_F32, 2, out->sizes, err))
            goto free_b;
        ptc_sgemm(M, N, K, af.data, K, 1, bf.data, N, 1, of.data, N, 1, false);
        rc = ptc_tensor_copy(out, &of, err);
        ptc_tensor_release(&of);
    free_b:
        release_copy(&bf);
    free_a:
        release_copy(&af);
        return rc;
    }
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            uint64_t acc = 0;
            for (int64_t k = 0; k < K; k++) {
                int64_t ia[2] = {i, k}, ib[2] = {k, j};
                acc += (uint64_t)ptc_tensor_get_i64(a, ia) * (uint64_t)ptc_tensor_get_i64(b, ib);
            }
            int64_t io[2] = {i, j};
            ptc_tensor_set_i64(out, io, (int64_t)acc);
        }
    return 0;
}

/* The 2-d slice [i] of a 3-d tensor. */
static ptc_tensor slice3(const ptc_tensor *t, int64_t i)
{
    ptc_tensor s = *t;
    s.storage = NULL;
    s.ndim = 2;
    s.sizes[0] = t->sizes[1], s.sizes[1] = t->sizes[2];
    s.strides[0] = t->strides[1], s.strides[1] = t->strides[2];
    s.data = (char *)t->data + i * t->strides[0] * (int64_t)ptc_dtype_size(t->dtype);
    return s;
}

static int run_bmm(const ptc_tensor *a, const ptc_tensor *b, ptc_tensor *out, ptc_error *err)
{
    for (int64_t i = 0; i < out->sizes[0]; i++) {
        ptc_tensor as = slice3(a, i), bs = slice3(b, i), os = slice3(out, i);
        if (matmul2(&as, &bs, &os, err))
            return -1;
    }
    return 0;
}

/* out = beta * self (broadcast) + alpha * out; out may be strided (a
 * matmul result with padded rows). */
static void add_scaled(ptc_tensor *out, const ptc_tensor *self, double alpha, double beta)
{
    int64_t n = ptc_tensor_numel(out), idx[PTC_MAX_DIMS] = {0};
    for (int64_t o = 0; o < n; o++) {
        int64_t off = 0, at = 0;
        for (int d = 0; d < self->ndim; d++) {
            int od = d + out->ndim - self->ndim;
            off += self->sizes[d] == 1 ? 0 : idx[od] * self->strides[d];
        }
        for (int d = 0; d < out->ndim; d++)
            at += idx[d] * out->strides[d];
        char *dst = (char *)out->data + at * (int64_t)ptc_dtype_size(out->dtype);
        double v = (beta == 0 ? 0 : beta * ld(self, off)) + alpha * ptc_load_f64(dst, out->dtype);
        ptc_store_f64(dst, out->dtype, v);
        for (int d = out->ndim - 1; d >= 0; d--) {
            if (++idx[d] < out->sizes[d])
                break;
            idx[d] = 0;
        }
    }
}

/* out (f32, 2-d, rows possibly padded) = self broadcast over it. */
static void add_scaled_init(ptc_tensor *out, const ptc_tensor *self)
{
    int64_t M = out->sizes[0], N = out->sizes[1], r = out->strides[0], c = out->strides[1];
    float *o = out->data;
    int64_t s0 = self->ndim == 2 && self->sizes[0] != 1 ? self->strides[0] : 0;
    int64_t s1 = self->ndim >= 1 && self->sizes[self->ndim - 1] != 1 ? self->strides[self->ndim - 1] : 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            o[i * r + j * c] = (float)ld(self, i * s0 + j * s1);
}

/* ---- convolution ---------------------------------------------------------------------- */

typedef struct conv {
    int k;                          /* spatial dims */
    int64_t N, C, O, G, Cg, Og;
    int64_t in[3], out[3], ker[3], stride[3], pad[3], dil[3];
    int64_t kprod, iprod, oprod;
    bool transposed;
} conv;

static int conv_ints(const ptc_node *n, const char *name, int k, int64_t *out)
{
    const ptc_arg *a = arg(n, name);
    for (int i = 0; i < k; i++) {
        ptc_dim d = a->is.n == 0 ? ptc_dim_c(0) : a->is.d[a->is.n == 1 ? 0 : i];
        if (!ptc_dim_is_static(d))
            return -1;
        out[i] = d.value;
    }
    return 0;
}

/* Input position of output position `o`, kernel position `kp` along dim d. */
static void unravel(int64_t i, const int64_t *sizes, int k, int64_t *out)
{
    for (int d = k - 1; d >= 0; d--) {
        out[d] = i % sizes[d];
        i /= sizes[d];
    }
}

static bool pointwise_conv(const conv *c)
{
    for (int d = 0; d < c->k; d++)
        if (c->ker[d] != 1 || c->stride[d] != 1 || c->pad[d] != 0)
            return false;
    return !c->transposed;
}

/* The bytes of a task's im2col (col2im) matrix of elements of elem bytes. */
static size_t conv_columns_bytes(const conv *c, size_t elem)
{
    int64_t n = c->transposed ? c->Og * c->kprod * c->iprod : c->Cg * c->kprod * c->oprod;
    return elem * (size_t)(n > 0 ? n : 1);
}

/* The calling thread's im2col (col2im) matrix, of elements of elem bytes. */
static void *conv_columns(const conv *c, size_t elem)
{
    return ptc_scratch(PTC_SCRATCH_COLUMNS, conv_columns_bytes(c, elem));
}

/* Whether a convolution's tasks (images x groups, or groups) split over the
 * team: several of them, worth waking it for. Else they run on the calling
 * thread, and each GEMM splits. */
static bool split_tasks(const conv *c, int64_t tasks)
{
    return tasks > 1 && !omp_in_parallel() &&
           c->N * c->O * c->oprod * c->Cg * c->kprod >= ((int64_t)1 << 23);
}

#define T float
#define FN(name) name##_f32
#define GEMM ptc_sgemm
#include "runtime/cconv.inc"
#undef T
#undef FN
#undef GEMM
#define T double
#define FN(name) name##_f64
#define GEMM ptc_dgemm
#include "runtime/cconv.inc"
#undef T
#undef FN
#undef GEMM

/* The geometry of node n's convolution of x by w whose result has y's
 * sizes (for the weight gradient: the gradient of that result). */
static int conv_geometry(const ptc_node *n, const ptc_tensor *x, const ptc_tensor *w,
                         const ptc_tensor *y, conv *c, ptc_error *err)
{
    memset(c, 0, sizeof *c);
    c->k = w->ndim - 2;
    const ptc_arg *tr = arg(n, "transposed");
    c->transposed = tr && tr->b;
    if (c->k < 1 || c->k > 3 || x->ndim != c->k + 2 || y->ndim != c->k + 2)
        return xfail(err, n, "expected a batched 1-d, 2-d or 3-d convolution");
    const ptc_arg *ga = arg(n, "groups");
    if (!ptc_dim_is_static(ga->i) || conv_ints(n, "stride", c->k, c->stride) ||
        conv_ints(n, "padding", c->k, c->pad) || conv_ints(n, "dilation", c->k, c->dil))
        return xfail(err, n, "symbolic convolution parameters");
    c->G = ga->i.value;
    c->N = x->sizes[0];
    c->C = x->sizes[1];
    c->O = y->sizes[1];
    c->Cg = c->C / c->G;
    c->Og = c->O / c->G;
    c->kprod = c->iprod = c->oprod = 1;
    for (int d = 0; d < c->k; d++) {
        c->in[d] = x->sizes[2 + d];
        c->out[d] = y->sizes[2 + d];
        c->ker[d] = w->sizes[2 + d];
        c->kprod *= c->ker[d];
        c->iprod *= c->in[d];
        c->oprod *= c->out[d];
    }
    return 0;
}

/* The convolution of geometry c of in[0] by in[1] plus the bias in[2]. */
static int run_conv_geom(const conv *c, const ptc_tensor *const *in, ptc_tensor *out,
                         ptc_error *err)
{
    const ptc_tensor *x = in[0], *w = in[1], *bias = in[2];
    /* f64 in f64, everything else in f32 */
    ptc_dtype ct = out->dtype == PTC_F64 ? PTC_F64 : PTC_F32;
    ptc_tensor xf, wf, yf;
    if (to_contig_scratch(x, ct, PTC_SCRATCH_CONV_X, &xf, err))
        return -1;
    if (to_contig(w, ct, &wf, err))
        return -1;
    bool direct_out = !needs_copy(out, ct);
    if (direct_out) {
        yf = *out;
        yf.storage = NULL;
    } else {
        yf = scratch_tensor(out, ct, PTC_SCRATCH_CONV_Y);
    }
    if (ptc_tensor_numel(&yf) > 0 && ct == PTC_F64)
        conv_f64(c, xf.data, wf.data, yf.data);
    else if (ptc_tensor_numel(&yf) > 0)
        conv_f32(c, xf.data, wf.data, yf.data);
    for (int64_t i = 0; bias && i < c->N; i++)
        for (int64_t o = 0; o < c->O; o++) {
            int64_t bi[1] = {o}, base = (i * c->O + o) * c->oprod;
            double bv = ptc_tensor_get_f64(bias, bi);
            for (int64_t p = 0; p < c->oprod; p++) {
                if (ct == PTC_F64)
                    ((double *)yf.data)[base + p] += bv;
                else
                    ((float *)yf.data)[base + p] += (float)bv;
            }
        }
    int rc = direct_out ? 0 : ptc_tensor_copy(out, &yf, err);
    release_copy(&wf);
    return rc;
}

static int run_conv(const ptc_node *n, const ptc_tensor *const *in, ptc_tensor *out, ptc_error *err)
{
    conv c;
    if (conv_geometry(n, in[0], in[1], out, &c, err))
        return -1;
    return run_conv_geom(&c, in, out, err);
}

/* What run_conv_geom asks of the scratch: its copies, and the columns and
 * GEMMs of its tasks on the calling thread or on each team thread. */
static void conv_scratch(const conv *c, const ptc_tensor *x, const ptc_tensor *out,
                         ptc_scratch_need *need)
{
    ptc_dtype ct = out->dtype == PTC_F64 ? PTC_F64 : PTC_F32;
    size_t elem = ptc_dtype_size(ct);
    if (needs_copy(x, ct))
        ptc_scratch_need_at_least(need, false, PTC_SCRATCH_CONV_X,
                                  elem * (size_t)ptc_tensor_numel(x));
    if (needs_copy(out, ct))
        ptc_scratch_need_at_least(need, false, PTC_SCRATCH_CONV_Y,
                                  elem * (size_t)ptc_tensor_numel(out));
    bool team = split_tasks(c, c->N * c->G);
    if (!pointwise_conv(c))
        ptc_scratch_need_at_least(need, team, PTC_SCRATCH_COLUMNS, conv_columns_bytes(c, elem));
    int64_t M = c->transposed ? c->Og * c->kprod : c->Og;
    int64_t N = c->transposed ? c->iprod : c->oprod, K = c->transposed ? c->Cg : c->Cg * c->kprod;
    ptc_gemm_scratch(M, N, K, ct == PTC_F64, team, need);
}

void ptc_cextern_scratch(const ptc_node *node, const ptc_tensor *const *in, const ptc_tensor *outs,
                         ptc_scratch_need *need)
{
    conv c;
    ptc_error err;
    switch (node->op) {
    case PTC_OP_MM:
    case PTC_OP_BMM:
    case PTC_OP_ADDMM: { /* matmul2's GEMM, of each 2-d slice for bmm */
        const ptc_tensor *a = in[node->op == PTC_OP_ADDMM], *b = in[1 + (node->op == PTC_OP_ADDMM)];
        int d = a->ndim - 2;
        if (ptc_dtype_is_float(outs[0].dtype))
            ptc_gemm_scratch(a->sizes[d], b->sizes[d + 1], a->sizes[d + 1],
                             outs[0].dtype == PTC_F64, false, need);
        break;
    }
    case PTC_OP_CONVOLUTION:
        if (conv_geometry(node, in[0], in[1], &outs[0], &c, &err) == 0)
            conv_scratch(&c, in[0], &outs[0], need);
        break;
    default: /* training's convolution gradients: their first calls grow the scratch */
        break;
    }
}

/* The weight gradient in f64 for f64, else in f32, written into out. */
static int run_conv_weight_grad(const ptc_node *n, const ptc_tensor *const *in, ptc_tensor *out,
                                ptc_error *err)
{
    const ptc_tensor *g = in[0], *x = in[1], *w = in[2];
    conv c;
    if (conv_geometry(n, x, w, g, &c, err))
        return -1;
    ptc_dtype ct = out->dtype == PTC_F64 ? PTC_F64 : PTC_F32;
    ptc_tensor xf, gf, dwf;
    int rc = -1;
    if (to_contig(x, ct, &xf, err))
        return -1;
    if (to_contig(g, ct, &gf, err))
        goto free_x;
    bool direct_out = out->dtype == ct && ptc_tensor_is_contiguous(out);
    if (direct_out) {
        dwf = *out;
        dwf.storage = NULL;
    } else if (ptc_tensor_alloc(&dwf, ct, out->ndim, out->sizes, err)) {
        goto free_g;
    }
    if (ct == PTC_F64)
        conv_weight_grad_f64(&c, xf.data, gf.data, dwf.data);
    else
        conv_weight_grad_f32(&c, xf.data, gf.data, dwf.data);
    rc = 0;
    if (!direct_out) {
        rc = ptc_tensor_copy(out, &dwf, err);
        ptc_tensor_release(&dwf);
    }
free_g:
    release_copy(&gf);
free_x:
    release_copy(&xf);
    return rc;
}

/* convolution_backward: the input's gradient, a transposed convolution of
 * g by w in the forward's geometry, then the weight's. */
static int run_conv_backward(const ptc_node *n, const ptc_tensor *const *in, ptc_tensor *outs,
                             ptc_error *err)
{
    const ptc_tensor *g = in[0], *w = in[2];
    conv c;
    if (conv_geometry(n, g, w, &outs[0], &c, err))
        return -1;
    c.transposed = true;
    const ptc_tensor *args[3] = {g, w, NULL};
    if (run_conv_geom(&c, args, &outs[0], err))
        return -1;
    return run_conv_weight_grad(n, in, &outs[1], err);
}

/* ---- attention -------------------------------------------------------------------------- */

typedef struct sdpa {
    const ptc_tensor *q, *k, *v, *mask;
    int nb;
    int64_t batch[PTC_MAX_DIMS];
    int64_t L, S, E, Ev;
    double scale, p;
    bool causal;
    uint64_t key;
    int64_t heads; /* heads_last: the output stored [B, L, H, Ev]; else 1 */
} sdpa;

/* Offset of (batch index b, row r, col c) in t broadcast over the batch dims. */
static int64_t boff(const sdpa *a, const ptc_tensor *t, const int64_t *bidx, int64_t r, int64_t c)
{
    int64_t off = 0;
    int tb = t->ndim - 2;
    for (int d = 0; d < tb; d++) {
        int bd = d + a->nb - tb;
        off += t->sizes[d] == 1 ? 0 : bidx[bd] * t->strides[d];
    }
    off += (t->sizes[tb] == 1 ? 0 : r * t->strides[tb]) + (t->sizes[tb + 1] == 1 ? 0 : c * t->strides[tb + 1]);
    return off;
}

static void attend(const sdpa *a, int64_t bflat, const int64_t *bidx, int64_t l, double *w, ptc_tensor *out)
{
    double m = -INFINITY;
    for (int64_t s = 0; s < a->S; s++) {
        double dot = 0;
        for (int64_t e = 0; e < a->E; e++)
            dot += ld(a->q, boff(a, a->q, bidx, l, e)) * ld(a->k, boff(a, a->k, bidx, s, e));
        double sc = dot * a->scale;
        if (a->causal && s > l)
            sc = -INFINITY;
        if (a->mask) {
            int64_t off = boff(a, a->mask, bidx, l, s);
            if (a->mask->dtype == PTC_BOOL)
                sc = ld(a->mask, off) != 0 ? sc : -INFINITY;
            else
                sc += ld(a->mask, off);
        }
        w[s] = sc;
        m = isnan(sc) || sc > m ? sc : m;
    }
    bool all_masked = true;
    for (int64_t s = 0; s < a->S; s++)
        all_masked &= w[s] == -INFINITY;
    double sum = 0;
    for (int64_t s = 0; s < a->S; s++)
        sum += (w[s] = exp(w[s] - m));
    for (int64_t s = 0; s < a->S; s++) {
        w[s] = all_masked ? 0 : w[s] / sum;
        if (a->p > 0) {
            uint64_t i = (uint64_t)((bflat * a->L + l) * a->S + s);
            bool keep = (double)ptc_rng_uniform(a->key, i) < 1.0 - a->p;
            w[s] = keep ? w[s] / (1.0 - a->p) : 0;
        }
    }
    size_t es = ptc_dtype_size(out->dtype);
    int64_t row = ((bflat / a->heads) * a->L + l) * a->heads + bflat % a->heads;
    char *o = (char *)out->data + (int64_t)es * (row * a->Ev);
    for (int64_t e = 0; e < a->Ev; e++) {
        double acc = 0;
        for (int64_t s = 0; s < a->S; s++)
            acc += w[s] * ld(a->v, boff(a, a->v, bidx, s, e));
        ptc_store_f64(o + (int64_t)es * e, out->dtype, acc);
    }
}

static int run_sdpa(const ptc_node *n, const ptc_tensor *const *in, ptc_tensor *out,
                    uint64_t rng_offset, ptc_error *err)
{
    sdpa a = {.q = in[0], .k = in[1], .v = in[2], .mask = in[3]};
    a.L = a.q->sizes[a.q->ndim - 2];
    a.E = a.q->sizes[a.q->ndim - 1];
    a.S = a.k->sizes[a.k->ndim - 2];
    a.Ev = a.v->sizes[a.v->ndim - 1];
    a.causal = arg(n, "is_causal")->b;
    const ptc_arg *sc = arg(n, "scale");
    a.scale = sc->kind == PTC_ARG_FLOAT ? sc->f : 1 / sqrt((double)a.E);
    a.p = arg(n, "dropout_p")->f;
    const ptc_arg *seed = arg(n, "seed");
    a.key = ptc_rng_key((uint64_t)(seed && ptc_dim_is_static(seed->i) ? seed->i.value : 0), rng_offset);
    a.nb = out->ndim - 2;
    for (int d = 0; d < a.nb; d++)
        a.batch[d] = out->sizes[d];
    a.heads = 1;
    const ptc_arg *heads_last = arg(n, "heads_last");
    if (heads_last && heads_last->b) /* out [B, L, H, Ev]: batch dims [B, H] */
        a.heads = a.batch[1] = out->sizes[2];
    int64_t nbatch = 1;
    for (int d = 0; d < a.nb; d++)
        nbatch *= a.batch[d];
    if (a.causal && a.mask)
        return xfail(err, n, "Explicit attn_mask should not be set when is_causal=True");
    int64_t rows = nbatch * a.L;
    bool par = rows > 1 && !omp_in_parallel() && rows * a.S * (a.E + a.Ev) >= ((int64_t)1 << 20);
#pragma omp parallel if (par)
    {
        double *w = malloc(sizeof(double) * (size_t)(a.S > 0 ? a.S : 1));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            int64_t b = r / (a.L > 0 ? a.L : 1), l = r % (a.L > 0 ? a.L : 1), bidx[PTC_MAX_DIMS];
            unravel(b, a.batch, a.nb, bidx);
            attend(&a, b, bidx, l, w, out);
        }
        free(w);
    }
    return 0;
}

/* ---- scans, sorts and scatters ------------------------------------------------------------ */

/* idx to the first element of the next line along dim: every dim but dim
 * counts, the last fastest. */
static void next_line(const ptc_tensor *x, int dim, int64_t *idx)
{
    for (int d = x->ndim - 1; d >= 0; d--) {
        if (d == dim)
            continue;
        if (++idx[d] < x->sizes[d])
            break;
        idx[d] = 0;
    }
}

/* prims.cumsum and prims.cumprod, a line at a time along dim. */
static int run_scan(const ptc_node *n, const ptc_tensor *x, ptc_tensor *out)
{
    int dim = (int)arg(n, "dim")->i.value;
    if (x->ndim == 0)
        dim = 0;
    int64_t len = x->ndim ? x->sizes[dim] : 1, total = ptc_tensor_numel(out);
    if (total == 0)
        return 0;
    int64_t lines = total / (len ? len : 1), idx[PTC_MAX_DIMS] = {0};
    bool fl = ptc_dtype_is_float(out->dtype), prod = n->op == PTC_OP_PRIMS_CUMPROD;
    for (int64_t ln = 0; ln < lines; ln++) {
        double facc = prod;
        uint64_t iacc = prod;
        for (int64_t i = 0; i < len; i++) {
            if (x->ndim)
                idx[dim] = i;
            if (fl) {
                double v = ptc_tensor_get_f64(x, idx);
                facc = prod ? facc * v : facc + v;
                ptc_tensor_set_f64(out, idx, facc);
            } else {
                uint64_t v = (uint64_t)ptc_tensor_get_i64(x, idx);
                iacc = prod ? iacc * v : iacc + v;
                ptc_tensor_set_i64(out, idx, (int64_t)iacc);
            }
        }
        next_line(x, dim, idx);
    }
    return 0;
}

/* sort and topk along dim, a line at a time: the keys, their stable order
 * (ptc_sort_order, as the reference's), then values and indices (topk's
 * first k). */
static int run_sort(const ptc_node *n, const ptc_tensor *x, ptc_tensor *outs, ptc_error *err)
{
    int dim = (int)arg(n, "dim")->i.value;
    dim = x->ndim == 0 ? 0 : dim < 0 ? dim + x->ndim : dim;
    int64_t len = x->ndim ? x->sizes[dim] : 1, total = ptc_tensor_numel(x);
    int64_t kept = x->ndim ? outs[0].sizes[dim] : 1;
    if (total == 0 || ptc_tensor_numel(&outs[0]) == 0)
        return 0;
    int64_t lines = total / len, idx[PTC_MAX_DIMS] = {0};
    bool fl = ptc_dtype_is_float(x->dtype);
    bool desc = arg(n, n->op == PTC_OP_TOPK ? "largest" : "descending")->b;
    double *f = malloc(sizeof *f * (size_t)len);
    int64_t *iv = malloc(sizeof *iv * (size_t)len), *order = malloc(sizeof *order * (size_t)len);
    int rc = f && iv && order ? 0 : xfail(err, n, "out of memory");
    for (int64_t ln = 0; rc == 0 && ln < lines; ln++) {
        for (int64_t i = 0; i < len; i++) {
            if (x->ndim)
                idx[dim] = i;
            if (fl)
                f[i] = ptc_tensor_get_f64(x, idx);
            else
                iv[i] = ptc_tensor_get_i64(x, idx);
        }
        if (ptc_sort_order(fl ? f : NULL, iv, len, desc, order))
            rc = xfail(err, n, "out of memory");
        for (int64_t i = 0; rc == 0 && i < kept; i++) {
            if (x->ndim)
                idx[dim] = i;
            if (fl)
                ptc_tensor_set_f64(&outs[0], idx, f[order[i]]);
            else
                ptc_tensor_set_i64(&outs[0], idx, iv[order[i]]);
            ptc_tensor_set_i64(&outs[1], idx, order[i]);
        }
        next_line(x, dim, idx);
    }
    free(f);
    free(iv);
    free(order);
    return rc;
}

/* cummax and cummin along dim, a line at a time: the running extreme's
 * index (ptc_cum_extreme_takes, as the reference's), its value and index. */
static int run_cummax(const ptc_node *n, const ptc_tensor *x, ptc_tensor *outs)
{
    int dim = (int)arg(n, "dim")->i.value;
    dim = x->ndim == 0 ? 0 : dim < 0 ? dim + x->ndim : dim;
    int64_t len = x->ndim ? x->sizes[dim] : 1, total = ptc_tensor_numel(x);
    if (total == 0)
        return 0;
    int64_t lines = total / len, idx[PTC_MAX_DIMS] = {0}, at[PTC_MAX_DIMS];
    bool fl = ptc_dtype_is_float(x->dtype), max = n->op == PTC_OP_CUMMAX;
    for (int64_t ln = 0; ln < lines; ln++) {
        int64_t best = 0;
        for (int64_t i = 0; i < len; i++) {
            if (x->ndim)
                idx[dim] = i;
            memcpy(at, idx, sizeof at);
            if (x->ndim)
                at[dim] = best;
            bool take = i == 0;
            if (!take && fl)
                take = ptc_cum_extreme_takes(ptc_tensor_get_f64(x, idx), ptc_tensor_get_f64(x, at),
                                             max);
            else if (!take)
                take = max ? ptc_tensor_get_i64(x, idx) >= ptc_tensor_get_i64(x, at)
                           : ptc_tensor_get_i64(x, idx) <= ptc_tensor_get_i64(x, at);
            best = take ? i : best;
            if (x->ndim)
                at[dim] = best;
            if (fl)
                ptc_tensor_set_f64(&outs[0], idx, ptc_tensor_get_f64(x, at));
            else
                ptc_tensor_set_i64(&outs[0], idx, ptc_tensor_get_i64(x, at));
            ptc_tensor_set_i64(&outs[1], idx, best);
        }
        next_line(x, dim, idx);
    }
    return 0;
}

/* An index outside [0, rows) of a scatter: the check error eager raises
 * ("index 5 is out of bounds for dimension 1 with size 4"; negative ones
 * too: scatter does not count from the end). */
static int scatter_out_of_bounds(int64_t j, int dim, int64_t rows, ptc_error *err)
{
    ptc_check_status st = {ptc_check_code(PTC_CHECK_INDEX, dim), j, rows};
    return ptc_check_fail(&st, err);
}

/* One line of a floating scatter (add: scatter_add): the last dimension of
 * index and src from the element offsets given, out's offset without dim's
 * term; *bad the index outside [0, rows) where there is one. */
#define SCATTER_LINE(T)                                                                            \
    for (int64_t k = 0; k < len; k++) {                                                            \
        int64_t j = ix[k * istride];                                                               \
        if (j < 0 || j >= rows) {                                                                  \
            *bad = j;                                                                              \
            return -1;                                                                             \
        }                                                                                          \
        T *at = (T *)out->data + ooff + k * ostride + j * dstride;                                 \
        T v = ((const T *)src->data)[soff + k * sstride];                                          \
        *at = add ? *at + v : v;                                                                   \
    }

/* scatter(_add) into an f32 or f64 out, a line (the last dimension) at a
 * time with offsets kept as it walks: an embedding's weight gradient adds a
 * few hundred thousand elements per step, and the generic path spent
 * microseconds on each. -1 for an index out of bounds (*bad). */
static int scatter_lines(const ptc_tensor *index, const ptc_tensor *src, ptc_tensor *out, int dim,
                         bool add, int64_t *bad)
{
    int last = index->ndim - 1;
    int64_t len = index->sizes[last], total = ptc_tensor_numel(index);
    int64_t rows = out->sizes[dim], dstride = out->strides[dim];
    int64_t istride = index->strides[last], sstride = src->strides[last];
    int64_t ostride = last == dim ? 0 : out->strides[last];
    int64_t idx[PTC_MAX_DIMS] = {0};
    for (int64_t done = 0; len && done < total; done += len) {
        int64_t ioff = 0, soff = 0, ooff = 0;
        for (int d = 0; d < last; d++) {
            ioff += idx[d] * index->strides[d];
            soff += idx[d] * src->strides[d];
            ooff += d == dim ? 0 : idx[d] * out->strides[d];
        }
        const int64_t *ix = (const int64_t *)index->data + ioff;
        if (out->dtype == PTC_F32) {
            SCATTER_LINE(float)
        } else {
            SCATTER_LINE(double)
        }
        for (int d = last - 1; d >= 0; d--) {
            if (++idx[d] < index->sizes[d])
                break;
            idx[d] = 0;
        }
    }
    return 0;
}
#undef SCATTER_LINE

/* prims.scatter_add (add) and prims.scatter: a copy of a, then src written
 * or added at index's places, in index's order. */
static int run_scatter(const ptc_node *n, const ptc_tensor *const *in, ptc_tensor *out, bool add,
                       ptc_error *err)
{
    const ptc_tensor *a = in[0], *index = in[1], *src = in[2];
    int dim = (int)arg(n, "dim")->i.value;
    dim += dim < 0 ? out->ndim : 0;
    if (ptc_tensor_copy(out, a, err))
        return -1;
    int64_t rows = out->ndim ? out->sizes[dim] : 1, bad = 0;
    if (index->ndim > 0 && (out->dtype == PTC_F32 || out->dtype == PTC_F64))
        return scatter_lines(index, src, out, dim, add, &bad)
                   ? scatter_out_of_bounds(bad, dim, rows, err)
                   : 0;
    int64_t total = ptc_tensor_numel(index), idx[PTC_MAX_DIMS] = {0};
    bool fl = ptc_dtype_is_float(out->dtype);
    for (int64_t i = 0; i < total; i++) {
        int64_t t[PTC_MAX_DIMS];
        memcpy(t, idx, sizeof t);
        int64_t j = ptc_tensor_get_i64(index, idx);
        if (j < 0 || j >= rows)
            return scatter_out_of_bounds(j, dim, rows, err);
        if (out->ndim)
            t[dim] = j;
        if (fl)
            ptc_tensor_set_f64(
                out, t, (add ? ptc_tensor_get_f64(out, t) : 0) + ptc_tensor_get_f64(src, idx));
        else
            ptc_tensor_set_i64(out, t,
                               (int64_t)((add ? (uint64_t)ptc_tensor_get_i64(out, t) : 0) +
                                         (uint64_t)ptc_tensor_get_i64(src, idx)));
        for (int d = index->ndim - 1; d >= 0; d--) {
            if (++idx[d] < index->sizes[d])
                break;
            idx[d] = 0;
        }
    }
    return 0;
}

int ptc_cextern_run(const ptc_node *node, const ptc_tensor *const *in, int nin, ptc_tensor *outs,
                    uint64_t rng_offset, ptc_error *err)
{
    (void)nin;
    switch (node->op) {
    case PTC_OP_MM: return matmul2(in[0], in[1], &outs[0], err);
    case PTC_OP_BMM: return run_bmm(in[0], in[1], &outs[0], err);
    case PTC_OP_ADDMM: {
        const ptc_arg *al = arg(node, "alpha"), *be = arg(node, "beta");
        double alpha = al->kind == PTC_ARG_FLOAT ? al->f : al->kind == PTC_ARG_INT ? (double)al->i.value : al->b;
        double beta = be->kind == PTC_ARG_FLOAT ? be->f : be->kind == PTC_ARG_INT ? (double)be->i.value : be->b;
        const ptc_tensor *a = in[1], *b = in[2], *bias = in[0];
        ptc_tensor *o = &outs[0];
        if (alpha == 1 && beta == 1 && o->dtype == PTC_F32 && a->dtype == PTC_F32 && b->dtype == PTC_F32) {
            /* C = broadcast bias, then C += A B in the GEMM */
            add_scaled_init(o, bias);
            ptc_sgemm(a->sizes[0], b->sizes[1], a->sizes[1], a->data, a->strides[0], a->strides[1], b->data,
                      b->strides[0], b->strides[1], o->data, o->strides[0], o->strides[1], true);
            return 0;
        }
        if (matmul2(a, b, o, err))
            return -1;
        add_scaled(o, bias, alpha, beta);
        return 0;
    }
    case PTC_OP_CONVOLUTION: return run_conv(node, in, &outs[0], err);
    case PTC_OP_CONVOLUTION_BACKWARD_WEIGHT:
        return run_conv_weight_grad(node, in, &outs[0], err);
    case PTC_OP_CONVOLUTION_BACKWARD:
        return run_conv_backward(node, in, outs, err);
    case PTC_OP_SDPA: return run_sdpa(node, in, &outs[0], rng_offset, err);
    case PTC_OP_PRIMS_CUMSUM:
    case PTC_OP_PRIMS_CUMPROD: return run_scan(node, in[0], &outs[0]);
    case PTC_OP_SORT:
    case PTC_OP_TOPK: return run_sort(node, in[0], outs, err);
    case PTC_OP_CUMMAX:
    case PTC_OP_CUMMIN: return run_cummax(node, in[0], outs);
    case PTC_OP_PRIMS_SCATTER_ADD:
        return run_scatter(node, in, &outs[0], true, err);
    case PTC_OP_PRIMS_SCATTER:
        return run_scatter(node, in, &outs[0], false, err);
    default: return xfail(err, node, "no C implementation for this extern");
    }
}
