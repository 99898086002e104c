/* Accuracy checking: compiled outputs against the reference interpreter.
 *
 * The comparison is torch.allclose with equal_nan, walked element by element
 * through strides so that any layout compares; it keeps the worst element (by
 * absolute error among those out of tolerance) because that is what a person
 * reading a bug report wants to see first. PTC_ACCURACY=1 turns every new
 * compile's first run into such a check, and a divergence becomes a repro
 * folder for ptminify plus an error naming it.
 */
#include "logs/logs.h"
#include "ops/ops.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void ptc_tolerance_default(ptc_dtype dt, double *rtol, double *atol)
{
    switch (dt) {
    case PTC_F64:
        *rtol = 1e-7, *atol = 1e-7;
        break;
    case PTC_F32:
        *rtol = 1e-4, *atol = 1e-5;
        break;
    case PTC_F16:
        *rtol = 2e-3, *atol = 1e-4;
        break;
    case PTC_BF16:
        *rtol = 1.6e-2, *atol = 1e-3;
        break;
    default:
        *rtol = 0, *atol = 0;
        break;
    }
}

static void sizes_str(const ptc_tensor *t, char *buf, size_t size)
{
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->ndim && k < size; d++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", d ? "," : "", (long long)t->sizes[d]);
    if (k < size)
        snprintf(buf + k, size - k, "]");
}

/* Is the pair (got, want) within tolerance? err receives |got - want|. */
static bool element_close(double got, double want, double rtol, double atol, double *err)
{
    if (isnan(got) || isnan(want)) {
        *err = isnan(got) && isnan(want) ? 0 : INFINITY;
        return isnan(got) && isnan(want);
    }
    if (isinf(got) || isinf(want)) {
        *err = got == want ? 0 : INFINITY;
        return got == want;
    }
    *err = fabs(got - want);
    return *err <= atol + rtol * fabs(want);
}

/* max(1, max finite |want|): atol is relative to it, so that outputs of
 * large magnitude may differ by the rounding of a different summation order. */
static double magnitude(const ptc_tensor *want)
{
    int64_t n = ptc_tensor_numel(want), idx[PTC_MAX_DIMS] = {0};
    double scale = 1;
    for (int64_t k = 0; k < n; k++) {
        double w = fabs(ptc_tensor_get_f64(want, idx));
        if (isfinite(w) && w > scale)
            scale = w;
        for (int d = want->ndim - 1; d >= 0; d--) {
            if (++idx[d] < want->sizes[d])
                break;
            idx[d] = 0;
        }
    }
    return scale;
}

bool ptc_tensor_close(const ptc_tensor *got, const ptc_tensor *want, double rtol, double atol,
                      ptc_mismatch *m)
{
    ptc_mismatch local = {0};
    if (!m)
        m = &local;
    int output = m->output;
    memset(m, 0, sizeof *m);
    m->output = output;
    double drtol, datol;
    ptc_tolerance_default(want->dtype, &drtol, &datol);
    m->rtol = rtol < 0 ? drtol : rtol;
    m->atol = atol < 0 ? datol : atol;
    if (got->dtype != want->dtype) {
        snprintf(m->what, sizeof m->what, "dtype %s vs %s", ptc_dtype_name(got->dtype),
                 ptc_dtype_name(want->dtype));
        return false;
    }
    bool same_shape = got->ndim == want->ndim;
    for (int d = 0; same_shape && d < got->ndim; d++)
        same_shape = got->sizes[d] == want->sizes[d];
    if (!same_shape) {
        char a[64], b[64];
        sizes_str(got, a, sizeof a);
        sizes_str(want, b, sizeof b);
        snprintf(m->what, sizeof m->what, "shape %.64s vs %.64s", a, b);
        return false;
    }
    bool exact = !ptc_dtype_is_float(want->dtype);
    int64_t n = ptc_tensor_numel(want), idx[PTC_MAX_DIMS] = {0};
    m->numel = n;
    m->scale = exact ? 1 : magnitude(want);
    double worst = -1, atol_scaled = m->atol * m->scale;
    for (int64_t k = 0; k < n; k++) {
        double g, w, e;
        if (exact) {
            int64_t gi = ptc_tensor_get_i64(got, idx), wi = ptc_tensor_get_i64(want, idx);
            g = (double)gi, w = (double)wi;
            e = gi == wi ? 0 : fabs(g - w);
            if (gi == wi)
                goto next;
        } else {
            g = ptc_tensor_get_f64(got, idx), w = ptc_tensor_get_f64(want, idx);
            if (element_close(g, w, m->rtol, atol_scaled, &e))
                goto next;
        }
        m->nbad++;
        if (e > worst) {
            worst = e;
            m->index = k, m->got = g, m->want = w, m->abs_err = e;
            m->rel_err = w != 0 ? e / fabs(w) : INFINITY;
        }
    next:
        for (int d = want->ndim - 1; d >= 0; d--) {
            if (++idx[d] < want->sizes[d])
                break;
            idx[d] = 0;
        }
    }
    return m->nbad == 0;
}

void ptc_mismatch_format(const ptc_mismatch *m, char *buf, size_t size)
{
    if (m->what[0]) {
        snprintf(buf, size, "output %d: %s", m->output, m->what);
        return;
    }
    snprintf(buf, size,
             "output %d: %lld of %lld elements differ, worst at [%lld]: got %.9g, want %.9g "
             "(abs %.3g, rel %.3g; rtol %g, atol %g)",
             m->output, (long long)m->nbad, (long long)m->numel, (long long)m->index, m->got,
             m->want, m->abs_err, m->rel_err, m->rtol, m->atol * m->scale);
}

static bool accuracy_on;
static pthread_once_t accuracy_once = PTHREAD_ONCE_INIT;

static void read_accuracy_env(void)
{
    const char *v = getenv("PTC_ACCURACY");
    accuracy_on = v && *v && strcmp(v, "0") != 0;
}

bool ptc_accuracy_enabled(void)
{
    pthread_once(&accuracy_once, read_accuracy_env);
    return accuracy_on;
}

int ptc_accuracy_check(const ptc_graph *g, const ptc_tensor *inputs, int ninputs,
                       const ptc_tensor *outputs, uint64_t rng_offset, const char *backend,
                       ptc_error *err)
{
    ptc_tensor *want = calloc((size_t)g->noutputs + 1, sizeof *want);
    ptc_run_opts ro = {.rng_offset = rng_offset};
    if (ptc_interp_run(g, inputs, ninputs, want, &ro, err)) {
        free(want);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < g->noutputs && rc == 0; i++) {
        ptc_mismatch m = {.output = i};
        if (ptc_tensor_close(&outputs[i], &want[i], -1, -1, &m))
            continue;
        char what[512], dir[1024];
        ptc_mismatch_format(&m, what, sizeof what);
        ptc_repro_info info = {.kind = "accuracy",
                               .stage = "accuracy",
                               .error_class = ptc_errclass_name(PTC_ERR_NONE),
                               .message = what,
                               .backend = backend,
                               .rtol = m.rtol,
                               .atol = m.atol};
        ptc_error werr;
        if (ptc_repro_write(NULL, g, inputs, ninputs, &info, dir, sizeof dir, &werr))
            snprintf(dir, sizeof dir, "(not written: %.900s)", werr.msg);
        rc = ptc_errorf(err, PTC_ERR_RUNTIME, "accuracy",
                        "PTC_ACCURACY: %s backend diverges from the reference interpreter on "
                        "%%%s: %s; repro: %s",
                        backend, g->outputs[i]->name, what, dir);
    }
    for (int i = 0; i < g->noutputs; i++)
        ptc_tensor_release(&want[i]);
    free(want);
    return rc;
}
