/* Reference kernels of the matrix products (mm, bmm, matmul, addmm, linear,
 * baddbmm) and scaled_dot_product_attention.
 *
 * Every product goes through one batched loop: both operands are viewed as
 * stacks of matrices whose batch dims broadcast (a 1-d operand is a row or a
 * column, as in torch.matmul), each dot product accumulates in double (or
 * wrapping int64 for integer dtypes) and is rounded once at the store.
 */
#include "ops/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A tensor of >= 1 dims as a matrix stack: a 1-d tensor becomes (1, k) when it
 * is the left operand and (k, 1) when it is the right one. */
static ptc_tensor as_matrix(const ptc_tensor *t, bool left)
{
    ptc_tensor m = *t;
    m.storage = NULL;
    if (t->ndim == 1) {
        m.ndim = 2;
        int v = left ? 1 : 0, one = left ? 0 : 1;
        m.sizes[v] = t->sizes[0];
        m.strides[v] = t->strides[0];
        m.sizes[one] = 1;
        m.strides[one] = 0;
    }
    return m;
}

/* What one batched product computes: out = beta * c + alpha * (a @ b), with c
 * (optional, broadcast to the output) ignored when beta is 0 as in torch. */
typedef struct gemm {
    ptc_tensor a, b;     /* matrix stacks */
    const ptc_tensor *c; /* NULL: none */
    ref_scalar alpha, beta;
} gemm;

/* The batch dims of a and b (all but their last two) broadcast together. */
static int gemm_batch(const ptc_kctx *k, const ptc_tensor *a, const ptc_tensor *b, int64_t *batch,
                      int *nb)
{
    int ra = a->ndim, rb = b->ndim;
    *nb = (ra > rb ? ra : rb) - 2;
    for (int i = 0; i < *nb; i++) {
        int ia = i - (*nb - (ra - 2)), ib = i - (*nb - (rb - 2));
        int64_t x = ia >= 0 ? a->sizes[ia] : 1, y = ib >= 0 ? b->sizes[ib] : 1;
        if (x != y && x != 1 && y != 1)
            return ref_fail(k, "matmul: batch dims %lld and %lld cannot broadcast", (long long)x,
                            (long long)y);
        batch[i] = x == 1 ? y : x;
    }
    return 0;
}

/* One output element: the dot product of row pa (step sa) and column pb
 * (step sb) over kk terms, scaled and added to c as g says. */
static void gemm_point(const gemm *g, const ptc_tensor *av, const ptc_tensor *bv,
                       const ptc_tensor *cv, bool use_c, int64_t pa, int64_t sa, int64_t pb,
                       int64_t sb, int64_t kk, int64_t pc, ptc_tensor *out, int64_t o)
{
    if (ref_is_float(out->dtype)) { /* av, bv are f64 copies */
        const double *A = av->data, *B = bv->data;
        double acc = 0;
        for (int64_t l = 0; l < kk; l++)
            acc += A[pa + l * sa] * B[pb + l * sb];
        double v = g->alpha.f * acc;
        if (use_c)
            v += g->beta.f * ref_ldf(cv, pc);
        ref_stf(out, o, v);
        return;
    }
    uint64_t acc = 0;
    for (int64_t l = 0; l < kk; l++)
        acc += (uint64_t)ref_ldi(av, pa + l * sa) * (uint64_t)ref_ldi(bv, pb + l * sb);
    uint64_t v = (uint64_t)g->alpha.i * acc;
    if (use_c)
        v += (uint64_t)g->beta.i * (uint64_t)ref_ldi(cv, pc);
    ref_sti(out, o, (int64_t)v);
}

/* Runs g into out (contiguous, batch... x n x m elements in that order). */
static int run_gemm(const ptc_kctx *k, gemm *g, ptc_tensor *out)
{
    ptc_tensor *a = &g->a, *b = &g->b;
    int ra = a->ndim, rb = b->ndim, nb;
    int64_t n = a->sizes[ra - 2], kk = a->sizes[ra - 1], m = b->sizes[rb - 1];
    if (b->sizes[rb - 2] != kk)
        return ref_fail(k, "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                        (long long)n, (long long)kk, (long long)b->sizes[rb - 2], (long long)m);
    int64_t sa[PTC_MAX_DIMS], sb[PTC_MAX_DIMS], batch[PTC_MAX_DIMS], osz[PTC_MAX_DIMS];
    if (gemm_batch(k, a, b, batch, &nb))
        return -1;
    memcpy(sa, batch, sizeof sa), memcpy(sb, batch, sizeof sb), memcpy(osz, batch, sizeof osz);
    sa[nb] = n, sa[nb + 1] = kk, sb[nb] = kk, sb[nb + 1] = m, osz[nb] = n, osz[nb + 1] = m;
    if (ptc_tensor_numel(out) != ref_numel(nb + 2, osz))
        return ref_fail(k, "internal: output holds %lld elements, the product makes %lld",
                        (long long)ptc_tensor_numel(out), (long long)ref_numel(nb + 2, osz));
    ptc_tensor cv = {0}, ad = {0}, bd = {0};
    bool use_c = g->c && (g->beta.is_float ? g->beta.f != 0 : g->beta.i != 0);
    if (use_c && ref_broadcast_arg(k, g->c, nb + 2, osz, &cv))
        return -1;
    bool fl = ref_is_float(out->dtype);
    if (fl && (ref_as_f64(k, a, &ad) || ref_as_f64(k, b, &bd))) {
        ptc_tensor_release(&ad);
        return -1;
    }
    ptc_tensor av = ref_broadcast(fl ? &ad : a, nb + 2, sa);
    ptc_tensor bv = ref_broadcast(fl ? &bd : b, nb + 2, sb);
    int64_t nbatch = ref_numel(nb, batch), bidx[PTC_MAX_DIMS] = {0}, o = 0;
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t idx[PTC_MAX_DIMS];
        memcpy(idx, bidx, sizeof idx);
        idx[nb] = idx[nb + 1] = 0;
        int64_t a0 = ref_offset(&av, idx), b0 = ref_offset(&bv, idx);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++, o++) {
                idx[nb] = i, idx[nb + 1] = j;
                gemm_point(g, &av, &bv, &cv, use_c, a0 + i * av.strides[nb], av.strides[nb + 1],
                           b0 + j * bv.strides[nb + 1], bv.strides[nb], kk,
                           use_c ? ref_offset(&cv, idx) : 0, out, o);
            }
        ref_next(bidx, batch, nb);
    }
    ptc_tensor_release(&ad);
    ptc_tensor_release(&bd);
    return 0;
}

static ref_scalar one(void)
{
    return (ref_scalar){.f = 1, .i = 1};
}

static int plain_product(ptc_kctx *k, const ptc_tensor *x, const ptc_tensor *y)
{
    gemm g = {.a = as_matrix(x, true), .b = as_matrix(y, false), .alpha = one(), .beta = one()};
    return run_gemm(k, &g, &k->out[0]);
}

int ptc_ref_mm(ptc_kctx *k)
{
    const ptc_tensor *a = ptc_k_tensor(k, 0), *b = ptc_k_tensor(k, 1);
    if (a->ndim != 2 || b->ndim != 2)
        return ref_fail(k, "mm: expected 2-d tensors, got %d-d and %d-d", a->ndim, b->ndim);
    return plain_product(k, a, b);
}

int ptc_ref_bmm(ptc_kctx *k)
{
    const ptc_tensor *a = ptc_k_tensor(k, 0), *b = ptc_k_tensor(k, 1);
    if (a->ndim != 3 || b->ndim != 3 || a->sizes[0] != b->sizes[0])
        return ref_fail(k, "bmm: expected 3-d tensors with equal batch sizes");
    return plain_product(k, a, b);
}

int ptc_ref_matmul(ptc_kctx *k)
{
    const ptc_tensor *a = ptc_k_tensor(k, 0), *b = ptc_k_tensor(k, 1);
    if (a->ndim == 0 || b->ndim == 0)
        return ref_fail(k,
                        "both arguments to matmul need to be at least 1D, but they are %dD and "
                        "%dD",
                        a->ndim, b->ndim);
    return plain_product(k, a, b);
}

/* addmm / baddbmm: beta * self + alpha * (mat1 @ mat2). */
static int scaled_product(ptc_kctx *k, const char *p1, const char *p2)
{
    const ptc_tensor *x = ref_tensor(k, p1), *y = ref_tensor(k, p2);
    gemm g = {
        .a = as_matrix(x, true),
        .b = as_matrix(y, false),
        .c = ref_tensor(k, "self"),
        .alpha = ref_scalar_arg(k, ref_argi(k, "alpha")),
        .beta = ref_scalar_arg(k, ref_argi(k, "beta")),
    };
    return run_gemm(k, &g, &k->out[0]);
}

int ptc_ref_addmm(ptc_kctx *k)
{
    return scaled_product(k, "mat1", "mat2");
}
int ptc_ref_baddbmm(ptc_kctx *k)
{
    return scaled_product(k, "batch1", "batch2");
}

/* linear: input @ weight^T + bias; a 1-d weight is a vector (the last dim
 * disappears), as in torch. */
int ptc_ref_linear(ptc_kctx *k)
{
    const ptc_tensor *x = ref_tensor(k, "input"), *w = ref_tensor(k, "weight");
    if (x->ndim == 0 || w->ndim == 0 || w->ndim > 2)
        return ref_fail(k, "linear: expected a >= 1-d input and a 1-d or 2-d weight");
    ptc_tensor wt = *w;
    wt.storage = NULL;
    if (w->ndim == 2) {
        wt.sizes[0] = w->sizes[1], wt.sizes[1] = w->sizes[0];
        wt.strides[0] = w->strides[1], wt.strides[1] = w->strides[0];
    }
    gemm g = {
        .a = as_matrix(x, true),
        .b = as_matrix(&wt, false),
        .c = ref_tensor(k, "bias"),
        .alpha = one(),
        .beta = one(),
    };
    return run_gemm(k, &g, &k->out[0]);
}

/* ---- scaled_dot_product_attention ------------------------------------------------ */

typedef struct attn {
    ptc_tensor q, k, v, mask; /* broadcast to the batch dims (+ their own last two) */
    bool has_mask, causal;
    double scale, dropout_p;
    uint64_t key;
    int nb;
    int64_t L, S, E, Ev;
} attn;

/* One query row: scores, masking, softmax (a fully masked row gives zeros,
 * as torch 2's math path), dropout over flat index (batch, l, s), then the
 * weighted sum of values. */
static void attend_row(const attn *a, int64_t *idx, int64_t bflat, int64_t l, double *w,
                       ptc_tensor *out, int64_t obase)
{
    int nb = a->nb;
    double m = -INFINITY;
    for (int64_t s = 0; s < a->S; s++) {
        double dot = 0;
        for (int64_t e = 0; e < a->E; e++) {
            idx[nb] = l, idx[nb + 1] = e;
            double qv = ref_ldf(&a->q, ref_offset(&a->q, idx));
            idx[nb] = s;
            dot += qv * ref_ldf(&a->k, ref_offset(&a->k, idx));
        }
        double sc = dot * a->scale;
        idx[nb] = l, idx[nb + 1] = s;
        if (a->causal && s > l)
            sc = -INFINITY;
        if (a->has_mask) {
            int64_t off = ref_offset(&a->mask, idx);
            if (a->mask.dtype == PTC_BOOL)
                sc = ref_ldi(&a->mask, off) ? sc : -INFINITY;
            else
                sc += ref_ldf(&a->mask, off);
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
        if (a->dropout_p > 0) {
            uint64_t i = (uint64_t)((bflat * a->L + l) * a->S + s);
            bool keep = (double)ptc_rng_uniform(a->key, i) < 1.0 - a->dropout_p;
            w[s] = keep ? w[s] / (1.0 - a->dropout_p) : 0;
        }
    }
    for (int64_t e = 0; e < a->Ev; e++) {
        double acc = 0;
        for (int64_t s = 0; s < a->S; s++) {
            idx[nb] = s, idx[nb + 1] = e;
            acc += w[s] * ref_ldf(&a->v, ref_offset(&a->v, idx));
        }
        ref_stf(out, obase + e, acc);
    }
}

/* Broadcast batch dims of the listed tensors (all but their last two). */
static int attn_batch(const ptc_kctx *k, const ptc_tensor *const *ts, int n, int64_t *batch,
                      int *nb)
{
    *nb = 0;
    for (int i = 0; i < n; i++)
        if (ts[i] && ts[i]->ndim - 2 > *nb)
            *nb = ts[i]->ndim - 2;
    for (int d = 0; d < *nb; d++) {
        batch[d] = 1;
        for (int i = 0; i < n; i++) {
            if (!ts[i])
                continue;
            int sd = d - (*nb - (ts[i]->ndim - 2));
            int64_t s = sd >= 0 ? ts[i]->sizes[sd] : 1;
            if (s != 1 && batch[d] != 1 && s != batch[d])
                return ref_fail(k, "scaled_dot_product_attention: batch dims do not broadcast");
            if (s != 1)
                batch[d] = s;
        }
    }
    return 0;
}

static ptc_tensor attn_view(const ptc_tensor *t, const int64_t *batch, int nb, int64_t r, int64_t c)
{
    int64_t sizes[PTC_MAX_DIMS];
    memcpy(sizes, batch, sizeof(int64_t) * (size_t)nb);
    sizes[nb] = r, sizes[nb + 1] = c;
    return ref_broadcast(t, nb + 2, sizes);
}

int ptc_ref_sdpa(ptc_kctx *k)
{
    const ptc_tensor *q = ref_tensor(k, "query"), *kt = ref_tensor(k, "key");
    const ptc_tensor *v = ref_tensor(k, "value"), *mask = ref_tensor(k, "attn_mask");
    if (q->ndim < 2 || kt->ndim < 2 || v->ndim < 2 || (mask && mask->ndim > PTC_MAX_DIMS))
        return ref_fail(k, "scaled_dot_product_attention: expected inputs of at least 2 dims");
    attn a = {.has_mask = mask != NULL, .causal = ref_bool(k, "is_causal")};
    a.L = q->sizes[q->ndim - 2], a.E = q->sizes[q->ndim - 1];
    a.S = kt->sizes[kt->ndim - 2], a.Ev = v->sizes[v->ndim - 1];
    if (kt->sizes[kt->ndim - 1] != a.E || v->sizes[v->ndim - 2] != a.S)
        return ref_fail(k, "scaled_dot_product_attention: query, key and value sizes disagree");
    if (a.causal && mask)
        return ref_fail(k, "_scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True");
    a.scale = ref_has(k, "scale") ? ref_float(k, "scale") : 1 / sqrt((double)a.E);
    a.dropout_p = ref_float(k, "dropout_p");
    a.key = ptc_rng_key((uint64_t)ref_int(k, "seed"), k->rng_offset);
    const ptc_tensor *ts[4] = {q, kt, v, mask};
    int64_t batch[PTC_MAX_DIMS];
    if (attn_batch(k, ts, 4, batch, &a.nb))
        return -1;
    a.q = attn_view(q, batch, a.nb, a.L, a.E);
    a.k = attn_view(kt, batch, a.nb, a.S, a.E);
    a.v = attn_view(v, batch, a.nb, a.S, a.Ev);
    if (mask) {
        int64_t msz[PTC_MAX_DIMS];
        memcpy(msz, batch, sizeof(int64_t) * (size_t)a.nb);
        msz[a.nb] = a.L, msz[a.nb + 1] = a.S;
        if (ref_broadcast_arg(k, mask, a.nb + 2, msz, &a.mask))
            return -1;
    }
    int64_t nbatch = ref_numel(a.nb, batch);
    if (ptc_tensor_numel(&k->out[0]) != nbatch * a.L * a.Ev)
        return ref_fail(k, "internal: output size disagrees with the attention's");
    double *w = malloc(sizeof *w * (size_t)(a.S ? a.S : 1));
    if (!w)
        return ref_fail(k, "out of memory");
    /* heads_last: the output is stored [B, L, H, Ev] (batch dims [B, H]) */
    int64_t heads = ref_bool(k, "heads_last") ? batch[a.nb - 1] : 1;
    int64_t bidx[PTC_MAX_DIMS] = {0};
    for (int64_t bi = 0; bi < nbatch; bi++) {
        for (int64_t l = 0; l < a.L; l++) {
            int64_t idx[PTC_MAX_DIMS];
            memcpy(idx, bidx, sizeof idx);
            int64_t row = ((bi / heads) * a.L + l) * heads + bi % heads;
            attend_row(&a, idx, bi, l, w, &k->out[0], row * a.Ev);
        }
        ref_next(bidx, batch, a.nb);
    }
    free(w);
    return 0;
}
