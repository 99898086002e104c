/* Reference kernels of the normalisations: layer_norm, batch_norm (training
 * and eval, with the running statistics returned as extra outputs) and
 * group_norm.
 *
 * Each gathers the offsets of one normalisation group, computes mean and the
 * biased variance in double with two passes, and writes
 * (x - mean) / sqrt(var + eps) * weight + bias, rounding once at the store.
 */
#include "ops/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Mean and biased variance of the n elements of x at offs. */
static void moments(const ptc_tensor *x, const int64_t *offs, int64_t n, double *mean, double *var)
{
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; i++)
        sum += ref_ldf(x, offs[i]);
    *mean = sum / (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = ref_ldf(x, offs[i]) - *mean;
        sq += d * d;
    }
    *var = sq / (double)n;
}

/* Element i of a 1-d (or broadcastable per-channel) parameter, or `dflt`. */
static double param_at(const ptc_tensor *p, int64_t i, double dflt)
{
    if (!p)
        return dflt;
    if (p->ndim == 0)
        return ref_ldf(p, 0);
    return ref_ldf(p, i * p->strides[p->ndim - 1]);
}

/* ---- layer_norm ---------------------------------------------------------------- */

int ptc_ref_layer_norm(ptc_kctx *k)
{
    const ptc_tensor *x = ref_tensor(k, "input");
    const ptc_tensor *w = ref_tensor(k, "weight"), *b = ref_tensor(k, "bias");
    ptc_tensor *out = &k->out[0];
    double eps = ref_float(k, "eps");
    int64_t shape[PTC_MAX_DIMS];
    int nnorm = ref_ints(k, "normalized_shape", shape, PTC_MAX_DIMS);
    if (nnorm > x->ndim)
        return ref_fail(k, "layer_norm: normalized_shape has %d dims, input only %d", nnorm,
                        x->ndim);
    if (ref_out_like(k, 0, x))
        return -1;
    int lead = x->ndim - nnorm;
    int64_t count = 1, nrows = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d >= lead && x->sizes[d] != shape[d - lead])
            return ref_fail(k, "layer_norm: input's trailing sizes do not match normalized_shape");
        *(d >= lead ? &count : &nrows) *= x->sizes[d];
    }
    if (count == 0 || nrows == 0)
        return 0;
    int64_t *offs = malloc(sizeof *offs * (size_t)count);
    if (!offs)
        return ref_fail(k, "out of memory");
    int64_t row[PTC_MAX_DIMS] = {0};
    for (int64_t r = 0; r < nrows; r++) {
        int64_t idx[PTC_MAX_DIMS];
        memcpy(idx, row, sizeof idx);
        for (int64_t i = 0; i < count; i++) {
            offs[i] = ref_offset(x, idx);
            ref_next(idx + lead, x->sizes + lead, nnorm);
        }
        double mean, var;
        moments(x, offs, count, &mean, &var);
        double rstd = 1 / sqrt(var + eps);
        int64_t nidx[PTC_MAX_DIMS] = {0};
        for (int64_t i = 0; i < count; i++) {
            double y = (ref_ldf(x, offs[i]) - mean) * rstd;
            if (w)
                y *= ref_ldf(w, ref_offset(w, nidx));
            if (b)
                y += ref_ldf(b, ref_offset(b, nidx));
            ref_stf(out, r * count + i, y);
            ref_next(nidx, x->sizes + lead, nnorm);
        }
        ref_next(row, x->sizes, lead);
    }
    free(offs);
    return 0;
}

/* ---- batch_norm, group_norm: groups of (batch, channel) planes ----------------------- */

/* Offsets into x and into the contiguous output, and the channel of each
 * element, for batches [n0, n1) and channels [c0, c1) of an (N, C, *) input.
 * Returns the count. */
static int64_t plane_offsets(const ptc_tensor *x, int64_t n0, int64_t n1, int64_t c0, int64_t c1,
                             int64_t *xoffs, int64_t *ooffs, int64_t *chan)
{
    int64_t spatial = ref_numel(x->ndim - 2, x->sizes + 2), cnt = 0;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t c = c0; c < c1; c++) {
            int64_t idx[PTC_MAX_DIMS] = {n, c};
            for (int64_t s = 0; s < spatial; s++) {
                xoffs[cnt] = ref_offset(x, idx);
                ooffs[cnt] = (n * x->sizes[1] + c) * spatial + s;
                chan[cnt++] = c;
                ref_next(idx + 2, x->sizes + 2, x->ndim - 2);
            }
        }
    return cnt;
}

typedef struct planes {
    int64_t *xoffs, *ooffs, *chan;
} planes;

static int planes_alloc(const ptc_kctx *k, planes *p, int64_t n)
{
    size_t sz = sizeof(int64_t) * (size_t)(n > 0 ? n : 1);
    p->xoffs = malloc(sz);
    p->ooffs = malloc(sz);
    p->chan = malloc(sz);
    if (p->xoffs && p->ooffs && p->chan)
        return 0;
    free(p->xoffs);
    free(p->ooffs);
    free(p->chan);
    return ref_fail(k, "out of memory");
}

static void planes_free(planes *p)
{
    free(p->xoffs);
    free(p->ooffs);
    free(p->chan);
}

/* Normalises the cnt elements with the given statistics and per-channel
 * affine parameters. */
static void normalize(ptc_tensor *out, const ptc_tensor *x, const planes *p, int64_t cnt,
                      double mean, double rstd, const ptc_tensor *w, const ptc_tensor *b)
{
    for (int64_t i = 0; i < cnt; i++) {
        double y = (ref_ldf(x, p->xoffs[i]) - mean) * rstd;
        y = y * param_at(w, p->chan[i], 1) + param_at(b, p->chan[i], 0);
        ref_stf(out, p->ooffs[i], y);
    }
}

/* F.batch_norm over (N, C, *). Training normalises with the batch's biased
 * variance and moves the running statistics towards the batch's mean and
 * unbiased variance by `momentum`; eval normalises with the running ones.
 * Outputs beyond the first are the updated running_mean and running_var. */
int ptc_ref_batch_norm(ptc_kctx *k)
{
    const ptc_tensor *x = ref_tensor(k, "input");
    const ptc_tensor *w = ref_tensor(k, "weight"), *b = ref_tensor(k, "bias");
    const ptc_tensor *rm = ref_tensor(k, "running_mean"), *rv = ref_tensor(k, "running_var");
    bool training = ref_bool(k, "training");
    double momentum = ref_float(k, "momentum"), eps = ref_float(k, "eps");
    if (x->ndim < 2)
        return ref_fail(k, "batch_norm: expected an input of at least 2 dims, got %d", x->ndim);
    int64_t N = x->sizes[0], C = x->sizes[1], per = ptc_tensor_numel(x) / (C ? C : 1);
    if (!training && (!rm || !rv))
        return ref_fail(k, "running_mean and running_var must be defined in evaluation mode");
    if (training && per <= 1 && C > 0)
        return ref_fail(k,
                        "Expected more than 1 value per channel when training, got input "
                        "size [%lld, %lld, ...]",
                        (long long)N, (long long)C);
    bool update = k->node->nout >= 3;
    if (update && (!rm || !rv))
        return ref_fail(k, "batch_norm: updated statistics need running_mean and running_var");
    if (ref_out_like(k, 0, x) ||
        (update && (ref_out_sizes(k, 1, 1, &C) || ref_out_sizes(k, 2, 1, &C))))
        return -1;
    planes p;
    if (planes_alloc(k, &p, per))
        return -1;
    for (int64_t c = 0; c < C; c++) {
        int64_t cnt = plane_offsets(x, 0, N, c, c + 1, p.xoffs, p.ooffs, p.chan);
        double mean, var;
        if (training) {
            moments(x, p.xoffs, cnt, &mean, &var);
        } else {
            mean = param_at(rm, c, 0);
            var = param_at(rv, c, 1);
        }
        normalize(&k->out[0], x, &p, cnt, mean, 1 / sqrt(var + eps), w, b);
        if (update) {
            double old_m = param_at(rm, c, 0), old_v = param_at(rv, c, 1);
            double new_m = old_m, new_v = old_v;
            if (training) {
                new_m = (1 - momentum) * old_m + momentum * mean;
                new_v = (1 - momentum) * old_v + momentum * var * (double)cnt / (double)(cnt - 1);
            }
            ref_stf(&k->out[1], c, new_m);
            ref_stf(&k->out[2], c, new_v);
        }
    }
    planes_free(&p);
    return 0;
}

int ptc_ref_group_norm(ptc_kctx *k)
{
    const ptc_tensor *x = ref_tensor(k, "input");
    const ptc_tensor *w = ref_tensor(k, "weight"), *b = ref_tensor(k, "bias");
    int64_t G = ref_int(k, "num_groups");
    double eps = ref_float(k, "eps");
    if (x->ndim < 2)
        return ref_fail(k, "group_norm: expected an input of at least 2 dims, got %d", x->ndim);
    int64_t N = x->sizes[0], C = x->sizes[1];
    if (G <= 0 || C % G != 0)
        return ref_fail(k,
                        "Expected number of channels in input to be divisible by num_groups, "
                        "but got input of shape [%lld, %lld, ...] and num_groups=%lld",
                        (long long)N, (long long)C, (long long)G);
    if (ref_out_like(k, 0, x))
        return -1;
    int64_t cg = C / G, per = cg * ref_numel(x->ndim - 2, x->sizes + 2);
    planes p;
    if (planes_alloc(k, &p, per))
        return -1;
    for (int64_t n = 0; n < N && per > 0; n++)
        for (int64_t g = 0; g < G; g++) {
            int64_t cnt =
                plane_offsets(x, n, n + 1, g * cg, (g + 1) * cg, p.xoffs, p.ooffs, p.chan);
            double mean, var;
            moments(x, p.xoffs, cnt, &mean, &var);
            normalize(&k->out[0], x, &p, cnt, mean, 1 / sqrt(var + eps), w, b);
        }
    planes_free(&p);
    return 0;
}
