/* Reference kernels of convolution (1-d, 2-d and 3-d; strided, padded,
 * dilated, grouped, transposed with output_padding) and 2-d pooling (max with
 * indices, average, adaptive average), by direct loops.
 *
 * A transposed convolution is written as a gather, not a scatter: output
 * position j takes input position i and kernel tap t when
 * i * stride - padding + t * dilation == j, so each output element is one
 * double accumulation rounded once, like the forward case. Pooling follows
 * torch's CPU kernels index for index: the window clipping, the divisor of
 * avg_pool2d and adaptive pooling's start/end formulas.
 */
#include "ops/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SPATIAL 3

typedef struct conv {
    int nsp; /* spatial dims */
    bool transposed;
    int64_t groups;
    int64_t stride[MAX_SPATIAL], padding[MAX_SPATIAL], dilation[MAX_SPATIAL];
    int64_t N, IC, OC; /* batch, input and output channels */
    int64_t isz[MAX_SPATIAL], osz[MAX_SPATIAL], ksz[MAX_SPATIAL];
    ptc_tensor in, w; /* in viewed as (N, IC, spatial...) */
    const ptc_tensor *bias;
} conv;

/* An int list of the spatial rank (a single value repeats). */
static int spatial_list(const ptc_kctx *k, const char *param, int nsp, int64_t *out)
{
    int64_t v[PTC_MAX_DIMS];
    int n = ref_ints(k, param, v, PTC_MAX_DIMS);
    if (n != 1 && n != nsp)
        return ref_fail(k, "%s: expected %d values, got %d", param, nsp, n);
    for (int i = 0; i < nsp; i++)
        out[i] = v[n == 1 ? 0 : i];
    return 0;
}

/* The convolution of node k (convolution_backward[_weight]: the one whose
 * gradient it is), with output out. */
static int conv_setup(ptc_kctx *k, conv *c, const ptc_tensor *out)
{
    const ptc_tensor *x = ref_tensor(k, "input");
    bool weight_grad = k->node->op == PTC_OP_CONVOLUTION_BACKWARD_WEIGHT ||
                       k->node->op == PTC_OP_CONVOLUTION_BACKWARD;
    memset(c, 0, sizeof *c);
    c->w = *ref_tensor(k, "weight");
    c->bias = weight_grad ? NULL : ref_tensor(k, "bias");
    c->nsp = c->w.ndim - 2;
    if (c->nsp < 1 || c->nsp > MAX_SPATIAL)
        return ref_fail(k, "convolution: weight must have 3 to 5 dims, got %d", c->w.ndim);
    if (x->ndim != c->nsp + 2 && x->ndim != c->nsp + 1)
        return ref_fail(k, "convolution: expected a %d-d or %d-d input, got %d-d", c->nsp + 1,
                        c->nsp + 2, x->ndim);
    c->in = *x;
    if (x->ndim == c->nsp + 1) { /* unbatched: a batch of one */
        memmove(c->in.sizes + 1, x->sizes, sizeof(int64_t) * (size_t)x->ndim);
        memmove(c->in.strides + 1, x->strides, sizeof(int64_t) * (size_t)x->ndim);
        c->in.sizes[0] = 1, c->in.strides[0] = 0, c->in.ndim++;
    }
    c->transposed = k->node->op == PTC_OP_CONV_TRANSPOSE2D ||
                    (k->node->op == PTC_OP_CONVOLUTION && ref_bool(k, "transposed"));
    c->groups = ref_int(k, "groups");
    if (spatial_list(k, "stride", c->nsp, c->stride) ||
        spatial_list(k, "padding", c->nsp, c->padding) ||
        spatial_list(k, "dilation", c->nsp, c->dilation))
        return -1;
    c->N = c->in.sizes[0], c->IC = c->in.sizes[1];
    c->OC = c->transposed ? c->w.sizes[1] * c->groups : c->w.sizes[0];
    int64_t wic = c->transposed ? c->w.sizes[0] : c->w.sizes[1] * c->groups;
    if (c->groups <= 0 || c->IC % c->groups || c->OC % c->groups || wic != c->IC)
        return ref_fail(k, "convolution: %lld input channels, weight of %lld, groups=%lld disagree",
                        (long long)c->IC, (long long)wic, (long long)c->groups);
    int off = out->ndim - c->nsp;
    for (int d = 0; d < c->nsp; d++) {
        c->isz[d] = c->in.sizes[2 + d];
        c->ksz[d] = c->w.sizes[2 + d];
        c->osz[d] = out->sizes[off + d];
        if (c->stride[d] <= 0 || c->dilation[d] <= 0 || c->padding[d] < 0)
            return ref_fail(k, "convolution: stride and dilation must be positive, padding "
                               "non-negative");
    }
    if (ptc_tensor_numel(out) != c->N * c->OC * ref_numel(c->nsp, c->osz))
        return ref_fail(k, "internal: convolution output size disagrees");
    return 0;
}

/* The input position a tap reads for output position o, or -1 when none. */
static int64_t tap_input(const conv *c, int d, int64_t o, int64_t t)
{
    if (!c->transposed) {
        int64_t i = o * c->stride[d] - c->padding[d] + t * c->dilation[d];
        return i >= 0 && i < c->isz[d] ? i : -1;
    }
    int64_t num = o + c->padding[d] - t * c->dilation[d];
    if (num < 0 || num % c->stride[d])
        return -1;
    int64_t i = num / c->stride[d];
    return i < c->isz[d] ? i : -1;
}

/* The taps of one output position that land inside the input: for each,
 * the offset of the input element (channel 0, batch 0) and of the weight
 * element (channel pair 0). Returns their count. */
static int64_t inside_taps(const conv *c, const int64_t *opos, int64_t *xoff, int64_t *woff)
{
    int64_t tap[MAX_SPATIAL] = {0}, n = 0;
    if (ref_numel(c->nsp, c->ksz) == 0)
        return 0;
    do {
        int64_t xo = 0, wo = 0;
        bool inside = true;
        for (int d = 0; d < c->nsp && inside; d++) {
            int64_t i = tap_input(c, d, opos[d], tap[d]);
            inside = i >= 0;
            xo += i * c->in.strides[2 + d];
            wo += tap[d] * c->w.strides[2 + d];
        }
        if (inside)
            xoff[n] = xo, woff[n++] = wo;
    } while (ref_next(tap, c->ksz, c->nsp));
    return n;
}

/* Output channel oc of batch n at one position: bias plus the sum over the
 * group's input channels and the inside taps. in and w hold f64 copies. */
static double conv_point(const conv *c, int64_t n, int64_t oc, const int64_t *xoff,
                         const int64_t *woff, int64_t ntaps)
{
    const double *x = c->in.data, *w = c->w.data;
    int64_t icg = c->IC / c->groups, ocg = c->OC / c->groups, g = oc / ocg;
    double acc = c->bias ? ref_ldf(c->bias, oc * c->bias->strides[0]) : 0;
    for (int64_t ic = 0; ic < icg; ic++) {
        int64_t cin = g * icg + ic;
        const double *xc = x + n * c->in.strides[0] + cin * c->in.strides[1];
        /* weight: (OC, IC/groups, k...) or, transposed, (IC, OC/groups, k...) */
        const double *wc = w + (c->transposed ? cin * c->w.strides[0] + (oc % ocg) * c->w.strides[1]
                                              : oc * c->w.strides[0] + ic * c->w.strides[1]);
        for (int64_t t = 0; t < ntaps; t++)
            acc += xc[xoff[t]] * wc[woff[t]];
    }
    return acc;
}

int ptc_ref_convolution(ptc_kctx *k)
{
    conv c;
    if (conv_setup(k, &c, &k->out[0]))
        return -1;
    int64_t nsp_out = ref_numel(c.nsp, c.osz), ktaps = ref_numel(c.nsp, c.ksz);
    if (c.N * c.OC * nsp_out == 0)
        return 0;
    ptc_tensor xd, wd;
    if (ref_as_f64(k, &c.in, &xd))
        return -1;
    if (ref_as_f64(k, &c.w, &wd)) {
        ptc_tensor_release(&xd);
        return -1;
    }
    c.in = xd, c.w = wd;
    int64_t *xoff = malloc(sizeof *xoff * (size_t)(ktaps ? ktaps : 1));
    int64_t *woff = malloc(sizeof *woff * (size_t)(ktaps ? ktaps : 1));
    int rc = -1;
    if (!xoff || !woff) {
        ref_fail(k, "out of memory");
        goto done;
    }
    int64_t opos[MAX_SPATIAL] = {0}, p = 0;
    do { /* output (n, oc, position) lives at (n * OC + oc) * nsp_out + p */
        int64_t ntaps = inside_taps(&c, opos, xoff, woff);
        for (int64_t n = 0; n < c.N; n++)
            for (int64_t oc = 0; oc < c.OC; oc++)
                ref_stf(&k->out[0], (n * c.OC + oc) * nsp_out + p,
                        conv_point(&c, n, oc, xoff, woff, ntaps));
        p++;
    } while (ref_next(opos, c.osz, c.nsp));
    rc = 0;
done:
    free(xoff);
    free(woff);
    ptc_tensor_release(&xd);
    ptc_tensor_release(&wd);
    return rc;
}

/* dW[oc, ic, taps] = the sum over images n and output positions o of
 * g[n, oc, o] * x[n, group's ic, the input position of o under the tap], and
 * (convolution_backward) dX[n, ic, that position] the sum of g[n, oc, o] *
 * w[oc, ic, tap], both in double over f64 copies; dW has the weight's and
 * dX the input's (contiguous) layout. */
int ptc_ref_conv_backward_weight(ptc_kctx *k)
{
    const ptc_tensor *grad = ref_tensor(k, "grad_output");
    bool input_grad = k->node->op == PTC_OP_CONVOLUTION_BACKWARD;
    conv c;
    if (conv_setup(k, &c, grad))
        return -1;
    int64_t nsp_out = ref_numel(c.nsp, c.osz), ktaps = ref_numel(c.nsp, c.ksz);
    int64_t icg = c.IC / c.groups, ocg = c.OC / c.groups, nw = c.OC * icg * ktaps;
    int64_t nx = ptc_tensor_numel(&c.in);
    ptc_tensor xd, gd, wd;
    if (ref_as_f64(k, &c.in, &xd))
        return -1;
    if (ref_as_f64(k, grad, &gd)) {
        ptc_tensor_release(&xd);
        return -1;
    }
    /* woff from inside_taps indexes a contiguous weight: an f64 copy of it */
    if (ref_as_f64(k, &c.w, &wd)) {
        ptc_tensor_release(&xd);
        ptc_tensor_release(&gd);
        return -1;
    }
    c.in = xd, c.w = wd;
    double *acc = calloc((size_t)(nw ? nw : 1), sizeof *acc);
    double *dx = input_grad ? calloc((size_t)(nx ? nx : 1), sizeof *dx) : NULL;
    int64_t *xoff = malloc(sizeof *xoff * (size_t)(ktaps ? ktaps : 1));
    int64_t *woff = malloc(sizeof *woff * (size_t)(ktaps ? ktaps : 1));
    int rc = -1;
    if (!acc || !xoff || !woff || (input_grad && !dx)) {
        ref_fail(k, "out of memory");
        goto done;
    }
    const double *x = xd.data, *g = gd.data, *w = wd.data;
    int64_t opos[MAX_SPATIAL] = {0}, p = 0;
    if (nsp_out > 0 && c.N > 0)
        do {
            int64_t ntaps = inside_taps(&c, opos, xoff, woff);
            for (int64_t n = 0; n < c.N; n++)
                for (int64_t oc = 0; oc < c.OC; oc++) {
                    double gv = g[(n * c.OC + oc) * nsp_out + p];
                    int64_t cin0 = oc / ocg * icg;
                    for (int64_t ic = 0; ic < icg; ic++) {
                        int64_t xc = n * xd.strides[0] + (cin0 + ic) * xd.strides[1];
                        int64_t wc = oc * wd.strides[0] + ic * wd.strides[1];
                        for (int64_t t = 0; t < ntaps; t++)
                            acc[wc + woff[t]] += gv * x[xc + xoff[t]];
                        for (int64_t t = 0; dx && t < ntaps; t++)
                            dx[xc + xoff[t]] += gv * w[wc + woff[t]];
                    }
                }
            p++;
        } while (ref_next(opos, c.osz, c.nsp));
    for (int64_t i = 0; dx && i < nx; i++)
        ref_stf(&k->out[0], i, dx[i]);
    for (int64_t i = 0; i < nw; i++)
        ref_stf(&k->out[input_grad], i, acc[i]);
    rc = 0;
done:
    free(acc);
    free(dx);
    free(xoff);
    free(woff);
    ptc_tensor_release(&xd);
    ptc_tensor_release(&gd);
    ptc_tensor_release(&wd);
    return rc;
}

/* ---- pooling ------------------------------------------------------------------- */

typedef struct pool {
    const ptc_tensor *x;
    int64_t planes, C, H, W, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
} pool;

/* Shared setup: (C, H, W) or (N, C, H, W) input; stride [] means kernel. */
static int pool_setup(ptc_kctx *k, pool *p, bool has_dilation)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    memset(p, 0, sizeof *p);
    p->x = x;
    if (x->ndim != 3 && x->ndim != 4)
        return ref_fail(k, "pooling: expected a 3-d or 4-d input, got %d-d", x->ndim);
    int64_t ks[2] = {0, 0}, st[2] = {0, 0}, pad[2] = {0, 0}, dil[2] = {1, 1};
    if (spatial_list(k, "kernel_size", 2, ks) || spatial_list(k, "padding", 2, pad) ||
        (has_dilation && spatial_list(k, "dilation", 2, dil)))
        return -1;
    int64_t tmp[PTC_MAX_DIMS];
    if (ref_ints(k, "stride", tmp, PTC_MAX_DIMS) == 0)
        st[0] = ks[0], st[1] = ks[1];
    else if (spatial_list(k, "stride", 2, st))
        return -1;
    p->C = x->sizes[x->ndim - 3];
    p->H = x->sizes[x->ndim - 2], p->W = x->sizes[x->ndim - 1];
    p->planes = x->ndim == 4 ? x->sizes[0] * p->C : p->C;
    const ptc_tensor *out = &k->out[0];
    p->OH = out->sizes[out->ndim - 2], p->OW = out->sizes[out->ndim - 1];
    p->kh = ks[0], p->kw = ks[1], p->sh = st[0], p->sw = st[1];
    p->ph = pad[0], p->pw = pad[1], p->dh = dil[0], p->dw = dil[1];
    if (p->kh <= 0 || p->kw <= 0 || p->sh <= 0 || p->sw <= 0 || p->dh <= 0 || p->dw <= 0)
        return ref_fail(k, "pooling: kernel size, stride and dilation must be positive");
    if (ptc_tensor_numel(out) != p->planes * p->OH * p->OW)
        return ref_fail(k, "internal: pooling output size disagrees");
    return 0;
}

/* Offset of plane `pl` (n * C + c) of the input. */
static int64_t plane_base(const pool *p, int64_t pl)
{
    const ptc_tensor *x = p->x;
    if (x->ndim == 4)
        return (pl / p->C) * x->strides[0] + (pl % p->C) * x->strides[1];
    return pl * x->strides[0];
}

int ptc_ref_max_pool2d(ptc_kctx *k)
{
    pool p;
    if (pool_setup(k, &p, true))
        return -1;
    const ptc_tensor *x = p.x;
    int64_t hs = x->strides[x->ndim - 2], ws = x->strides[x->ndim - 1], o = 0;
    bool fl = ref_is_float(x->dtype);
    for (int64_t pl = 0; pl < p.planes; pl++) {
        int64_t base = plane_base(&p, pl);
        for (int64_t oh = 0; oh < p.OH; oh++)
            for (int64_t ow = 0; ow < p.OW; ow++, o++) {
                /* torch's cpu_max_pool: clip the window, step the start inside */
                int64_t ih0 = oh * p.sh - p.ph, iw0 = ow * p.sw - p.pw;
                int64_t ih1 = ih0 + (p.kh - 1) * p.dh + 1, iw1 = iw0 + (p.kw - 1) * p.dw + 1;
                ih1 = ih1 < p.H ? ih1 : p.H, iw1 = iw1 < p.W ? iw1 : p.W;
                while (ih0 < 0)
                    ih0 += p.dh;
                while (iw0 < 0)
                    iw0 += p.dw;
                int64_t maxindex = ih0 * p.W + iw0;
                double fmax = -INFINITY;
                int64_t imax = INT64_MIN;
                for (int64_t ih = ih0; ih < ih1; ih += p.dh)
                    for (int64_t iw = iw0; iw < iw1; iw += p.dw) {
                        int64_t off = base + ih * hs + iw * ws;
                        if (fl) {
                            double v = ref_ldf(x, off);
                            if (v > fmax || isnan(v))
                                fmax = v, maxindex = ih * p.W + iw;
                        } else {
                            int64_t v = ref_ldi(x, off);
                            if (v > imax)
                                imax = v, maxindex = ih * p.W + iw;
                        }
                    }
                if (fl)
                    ref_stf(&k->out[0], o, fmax);
                else
                    ref_sti(&k->out[0], o, imax);
                if (k->node->nout > 1)
                    ref_sti(&k->out[1], o, maxindex);
            }
    }
    return 0;
}

int ptc_ref_avg_pool2d(ptc_kctx *k)
{
    pool p;
    if (pool_setup(k, &p, false))
        return -1;
    bool include_pad = ref_bool(k, "count_include_pad");
    int64_t divisor = ref_has(k, "divisor_override") ? ref_int(k, "divisor_override") : 0;
    if (ref_has(k, "divisor_override") && divisor == 0)
        return ref_fail(k, "divisor must be not zero");
    const ptc_tensor *x = p.x;
    int64_t hs = x->strides[x->ndim - 2], ws = x->strides[x->ndim - 1], o = 0;
    bool fl = ref_is_float(x->dtype);
    for (int64_t pl = 0; pl < p.planes; pl++) {
        int64_t base = plane_base(&p, pl);
        for (int64_t oh = 0; oh < p.OH; oh++)
            for (int64_t ow = 0; ow < p.OW; ow++, o++) {
                /* torch's cpu_avg_pool: the padded window counts for the divisor */
                int64_t ih0 = oh * p.sh - p.ph, iw0 = ow * p.sw - p.pw;
                int64_t ih1 = ih0 + p.kh, iw1 = iw0 + p.kw;
                ih1 = ih1 < p.H + p.ph ? ih1 : p.H + p.ph;
                iw1 = iw1 < p.W + p.pw ? iw1 : p.W + p.pw;
                int64_t pool_size = (ih1 - ih0) * (iw1 - iw0);
                ih0 = ih0 > 0 ? ih0 : 0, iw0 = iw0 > 0 ? iw0 : 0;
                ih1 = ih1 < p.H ? ih1 : p.H, iw1 = iw1 < p.W ? iw1 : p.W;
                if (ih0 >= ih1 || iw0 >= iw1)
                    continue; /* the zeroed output stays 0 */
                double fsum = 0;
                int64_t isum = 0;
                for (int64_t ih = ih0; ih < ih1; ih++)
                    for (int64_t iw = iw0; iw < iw1; iw++) {
                        int64_t off = base + ih * hs + iw * ws;
                        if (fl)
                            fsum += ref_ldf(x, off);
                        else
                            isum += ref_ldi(x, off);
                    }
                int64_t div = divisor       ? divisor
                              : include_pad ? pool_size
                                            : (ih1 - ih0) * (iw1 - iw0);
                if (fl)
                    ref_stf(&k->out[0], o, fsum / (double)div);
                else
                    ref_sti(&k->out[0], o, isum / div);
            }
    }
    return 0;
}

/* torch's adaptive pooling windows: [floor(o*I/O), ceil((o+1)*I/O)). */
static int64_t start_index(int64_t o, int64_t osize, int64_t isize)
{
    return (o / osize) * isize + ((o % osize) * isize) / osize;
}
static int64_t end_index(int64_t o, int64_t osize, int64_t isize)
{
    return 1 + ((o + 1) * isize - 1) / osize;
}

int ptc_ref_adaptive_avg_pool2d(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    if (x->ndim != 3 && x->ndim != 4)
        return ref_fail(k, "adaptive_avg_pool2d: expected a 3-d or 4-d input, got %d-d", x->ndim);
    pool p = {.x = x};
    p.C = x->sizes[x->ndim - 3];
    p.H = x->sizes[x->ndim - 2], p.W = x->sizes[x->ndim - 1];
    p.planes = x->ndim == 4 ? x->sizes[0] * p.C : p.C;
    const ptc_tensor *out = &k->out[0];
    p.OH = out->sizes[out->ndim - 2], p.OW = out->sizes[out->ndim - 1];
    if (ptc_tensor_numel(out) != p.planes * p.OH * p.OW)
        return ref_fail(k, "internal: pooling output size disagrees");
    int64_t hs = x->strides[x->ndim - 2], ws = x->strides[x->ndim - 1], o = 0;
    for (int64_t pl = 0; pl < p.planes; pl++) {
        int64_t base = plane_base(&p, pl);
        for (int64_t oh = 0; oh < p.OH; oh++)
            for (int64_t ow = 0; ow < p.OW; ow++, o++) {
                int64_t h0 = start_index(oh, p.OH, p.H), h1 = end_index(oh, p.OH, p.H);
                int64_t w0 = start_index(ow, p.OW, p.W), w1 = end_index(ow, p.OW, p.W);
                double sum = 0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++)
                        sum += ref_ldf(x, base + ih * hs + iw * ws);
                ref_stf(&k->out[0], o, sum / (double)((h1 - h0) * (w1 - w0)));
            }
    }
    return 0;
}
