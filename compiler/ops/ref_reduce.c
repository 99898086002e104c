/* Reference kernels of the reductions and scans: sum/mean/prod/amax/amin/
 * logsumexp/any/all, var/std/var_mean, argmax/argmin, cumsum, softmax and
 * log_softmax, and the normalisations (layer_norm, batch_norm, group_norm).
 *
 * A reduction splits the input's dims into kept ("outer") and reduced
 * ("inner") ones. The output is contiguous and keepdim only inserts size-1
 * dims, so walking the outer dims in row-major order walks the output in
 * order. Floating results accumulate in double and round once at the store;
 * integer ones accumulate in wrapping uint64 (the store wraps to the width,
 * which is what accumulating in the dtype itself gives).
 */
#include "ops/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct red {
    int nouter, ninner;
    int64_t outer_sizes[PTC_MAX_DIMS], outer_strides[PTC_MAX_DIMS];
    int64_t inner_sizes[PTC_MAX_DIMS], inner_strides[PTC_MAX_DIMS];
    int64_t count; /* elements per reduction */
    int64_t nout;  /* number of reductions */
} red;

static void red_init(red *r, const ptc_tensor *x, const bool *reduced)
{
    memset(r, 0, sizeof *r);
    r->count = r->nout = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (reduced[d]) {
            r->inner_sizes[r->ninner] = x->sizes[d];
            r->inner_strides[r->ninner++] = x->strides[d];
            r->count *= x->sizes[d];
        } else {
            r->outer_sizes[r->nouter] = x->sizes[d];
            r->outer_strides[r->nouter++] = x->strides[d];
            r->nout *= x->sizes[d];
        }
    }
}

/* Offsets (in elements of x) of the r->count elements of reduction o, in
 * row-major order of the reduced dims. */
static void red_offsets(const red *r, int64_t o, int64_t *offs)
{
    int64_t base = 0, rem = o;
    for (int i = r->nouter - 1; i >= 0; i--) {
        base += (rem % r->outer_sizes[i]) * r->outer_strides[i];
        rem /= r->outer_sizes[i];
    }
    if (r->count == 0)
        return;
    int64_t idx[PTC_MAX_DIMS] = {0}, n = 0;
    do {
        int64_t off = base;
        for (int i = 0; i < r->ninner; i++)
            off += idx[i] * r->inner_strides[i];
        offs[n++] = off;
    } while (ref_next(idx, r->inner_sizes, r->ninner));
}

/* The reduced dims of a dims argument: None, or an empty list for the
 * torch-level ops, means all dims (but any/all with [] reduce nothing, as
 * torch's any.dims); prims reduce exactly the dims listed, so [] reduces
 * nothing. A dim listed twice is an error. */
static int reduced_dims(const ptc_kctx *k, const char *param, const ptc_tensor *x, bool *reduced)
{
    ptc_op op = k->node->op;
    for (int d = 0; d < PTC_MAX_DIMS; d++)
        reduced[d] = false;
    const ptc_arg *a = ref_arg(k, param);
    int64_t dims[PTC_MAX_DIMS + 1];
    int n = 0;
    if (a->kind == PTC_ARG_INT) {
        dims[0] = ref_int(k, param);
        n = 1;
    } else if (a->kind == PTC_ARG_INTS) {
        if (a->is.n > PTC_MAX_DIMS)
            return ref_fail(k, "too many reduction dims (%d)", a->is.n);
        n = ref_ints(k, param, dims, PTC_MAX_DIMS);
    }
    bool prim = ptc_op_schema(op)->stage == PTC_STAGE_PRIM;
    bool all = a->kind == PTC_ARG_NONE || (n == 0 && !prim && op != PTC_OP_ANY && op != PTC_OP_ALL);
    for (int d = 0; d < x->ndim; d++)
        reduced[d] = all;
    for (int i = 0; i < n; i++) {
        int d;
        if (ref_dim(k, dims[i], x->ndim, &d))
            return -1;
        if (x->ndim > 0 && reduced[d])
            return ref_fail(k, "dim %d appears multiple times in the list of dims", d);
        if (x->ndim > 0)
            reduced[d] = true;
    }
    return 0;
}

/* Checks that the output type the graph gave agrees with the reduction. */
static int check_nout(const ptc_kctx *k, const red *r, int which)
{
    if (ptc_tensor_numel(&k->out[which]) != r->nout)
        return ref_fail(k, "internal: output %d holds %lld elements, the reduction makes %lld",
                        which, (long long)ptc_tensor_numel(&k->out[which]), (long long)r->nout);
    return 0;
}

/* ---- sum, mean, prod, amax, amin, logsumexp, any, all ---------------------------- */

static bool is_max(ptc_op op)
{
    return op == PTC_OP_AMAX || op == PTC_OP_PRIMS_AMAX;
}
static bool is_extremum(ptc_op op)
{
    return is_max(op) || op == PTC_OP_AMIN || op == PTC_OP_PRIMS_AMIN;
}

/* Max (or min) in double with nan propagation. */
static double extremum_f(const ptc_tensor *x, const int64_t *offs, int64_t n, ptc_dtype dt,
                         bool max)
{
    double m = max ? -INFINITY : INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v = ref_load_as_f(ref_at(x, offs[i]), x->dtype, dt);
        if (isnan(v))
            return v;
        if (max ? v > m : v < m)
            m = v;
    }
    return m;
}

static double reduce_float(ptc_op op, const ptc_tensor *x, const int64_t *offs, int64_t n,
                           ptc_dtype dt)
{
    if (is_extremum(op))
        return extremum_f(x, offs, n, dt, is_max(op));
    if (op == PTC_OP_LOGSUMEXP) {
        double m = extremum_f(x, offs, n, dt, true);
        if (isinf(m))
            m = 0; /* all -inf gives log(0) = -inf; an inf gives inf */
        double sum = 0;
        for (int64_t i = 0; i < n; i++)
            sum += exp(ref_load_as_f(ref_at(x, offs[i]), x->dtype, dt) - m);
        return log(sum) + m;
    }
    bool prod = op == PTC_OP_PROD || op == PTC_OP_PRIMS_PROD;
    double acc = prod ? 1 : 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ref_load_as_f(ref_at(x, offs[i]), x->dtype, dt);
        acc = prod ? acc * v : acc + v;
    }
    return op == PTC_OP_MEAN ? acc / (double)n : acc;
}

static int64_t reduce_int(ptc_op op, const ptc_tensor *x, const int64_t *offs, int64_t n,
                          ptc_dtype dt)
{
    if (is_extremum(op)) {
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = ref_load_as_i(ref_at(x, offs[i]), x->dtype, dt);
            if (i == 0 || (is_max(op) ? v > m : v < m))
                m = v;
        }
        return m;
    }
    bool prod = op == PTC_OP_PROD || op == PTC_OP_PRIMS_PROD;
    uint64_t acc = prod ? 1 : 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t v = (uint64_t)ref_load_as_i(ref_at(x, offs[i]), x->dtype, dt);
        acc = prod ? acc * v : acc + v;
    }
    return (int64_t)acc;
}

static bool reduce_bool(ptc_op op, const ptc_tensor *x, const int64_t *offs, int64_t n)
{
    bool any = op == PTC_OP_ANY;
    for (int64_t i = 0; i < n; i++) {
        const void *p = ref_at(x, offs[i]);
        bool truth = ref_is_float(x->dtype) ? ptc_load_f64(p, x->dtype) != 0
                                            : ptc_load_i64(p, x->dtype) != 0;
        if (truth == any)
            return any;
    }
    return !any;
}

int ptc_ref_reduce(ptc_kctx *k)
{
    ptc_op op = k->node->op;
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor *out = &k->out[0];
    bool reduced[PTC_MAX_DIMS];
    const char *param = ptc_param_index(op, "dim") >= 0 ? "dim" : "dims";
    if (reduced_dims(k, param, x, reduced))
        return -1;
    red r;
    red_init(&r, x, reduced);
    if (check_nout(k, &r, 0))
        return -1;
    if (is_extremum(op) && r.count == 0) {
        for (int d = 0; d < x->ndim; d++)
            if (reduced[d] && x->sizes[d] == 0)
                return ref_fail(k, "%s(): Expected reduction dim %d to have non-zero size.",
                                is_max(op) ? "amax" : "amin", d);
        return ref_fail(k, "%s(): Expected reduction dim to have non-zero size.",
                        is_max(op) ? "amax" : "amin");
    }
    int64_t *offs = malloc(sizeof *offs * (size_t)(r.count ? r.count : 1));
    if (!offs)
        return ref_fail(k, "out of memory");
    ptc_dtype dt = out->dtype;
    for (int64_t o = 0; o < r.nout; o++) {
        red_offsets(&r, o, offs);
        if (op == PTC_OP_ANY || op == PTC_OP_ALL)
            ref_sti(out, o, reduce_bool(op, x, offs, r.count));
        else if (ref_is_float(dt))
            ref_stf(out, o, reduce_float(op, x, offs, r.count, dt));
        else
            ref_sti(out, o, reduce_int(op, x, offs, r.count, dt));
    }
    free(offs);
    return 0;
}

/* ---- var, std, var_mean ---------------------------------------------------------- */

/* Two passes in double: the mean, then the squared deviations, divided by
 * max(0, n - correction) (so too few elements give inf or nan, as torch). */
int ptc_ref_var(ptc_kctx *k)
{
    ptc_op op = k->node->op;
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    bool prim = op == PTC_OP_PRIMS_VAR_MEAN;
    bool reduced[PTC_MAX_DIMS];
    if (reduced_dims(k, prim ? "dims" : "dim", x, reduced))
        return -1;
    double correction = 1;
    if (prim || ref_has(k, "correction"))
        correction = ref_float(k, "correction");
    red r;
    red_init(&r, x, reduced);
    if (check_nout(k, &r, 0) || (prim && check_nout(k, &r, 1)))
        return -1;
    int64_t *offs = malloc(sizeof *offs * (size_t)(r.count ? r.count : 1));
    if (!offs)
        return ref_fail(k, "out of memory");
    ptc_dtype dt = k->out[0].dtype;
    double divisor = (double)r.count - correction;
    if (divisor < 0)
        divisor = 0;
    for (int64_t o = 0; o < r.nout; o++) {
        red_offsets(&r, o, offs);
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < r.count; i++)
            sum += ref_load_as_f(ref_at(x, offs[i]), x->dtype, dt);
        double mean = sum / (double)r.count;
        for (int64_t i = 0; i < r.count; i++) {
            double d = ref_load_as_f(ref_at(x, offs[i]), x->dtype, dt) - mean;
            sq += d * d;
        }
        double var = sq / divisor;
        ref_stf(&k->out[0], o, op == PTC_OP_STD ? sqrt(var) : var);
        if (prim)
            ref_stf(&k->out[1], o, mean);
    }
    free(offs);
    return 0;
}

/* ---- argmax, argmin ------------------------------------------------------------- */

/* The first extreme element wins ties; the first nan beats everything. */
static int64_t arg_extremum(const ptc_tensor *x, const int64_t *offs, int64_t n, bool max)
{
    int64_t best = 0;
    if (ref_is_float(x->dtype)) {
        double m = ref_ldf(x, offs[0]);
        for (int64_t i = 1; i < n && !isnan(m); i++) {
            double v = ref_ldf(x, offs[i]);
            if (isnan(v) || (max ? v > m : v < m))
                m = v, best = i;
        }
    } else {
        int64_t m = ref_ldi(x, offs[0]);
        for (int64_t i = 1; i < n; i++) {
            int64_t v = ref_ldi(x, offs[i]);
            if (max ? v > m : v < m)
                m = v, best = i;
        }
    }
    return best;
}

int ptc_ref_argreduce(ptc_kctx *k)
{
    ptc_op op = k->node->op;
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    bool max = op == PTC_OP_ARGMAX || op == PTC_OP_PRIMS_ARGMAX;
    const char *name = max ? "argmax" : "argmin";
    bool reduced[PTC_MAX_DIMS] = {false};
    if (ref_has(k, "dim")) {
        int d;
        if (ref_dim(k, ref_int(k, "dim"), x->ndim, &d))
            return -1;
        if (x->ndim > 0) {
            reduced[d] = true;
            if (x->sizes[d] == 0)
                return ref_fail(k, "%s(): Expected reduction dim %d to have non-zero size.", name,
                                d);
        }
    } else {
        for (int d = 0; d < x->ndim; d++)
            reduced[d] = true;
        if (ptc_tensor_numel(x) == 0)
            return ref_fail(
                k, "%s(): Expected reduction dim to be specified for input.numel() == 0.", name);
    }
    red r;
    red_init(&r, x, reduced);
    if (check_nout(k, &r, 0))
        return -1;
    int64_t *offs = malloc(sizeof *offs * (size_t)(r.count ? r.count : 1));
    if (!offs)
        return ref_fail(k, "out of memory");
    for (int64_t o = 0; o < r.nout; o++) {
        red_offsets(&r, o, offs);
        ref_sti(&k->out[0], o, arg_extremum(x, offs, r.count, max));
    }
    free(offs);
    return 0;
}

/* ---- cumsum, softmax ------------------------------------------------------------ */

/* The reduction along one dim, for scans and softmax: the same split over x
 * and over the output (same sizes, contiguous), and each line's offsets. */
typedef struct line {
    red rx, rout;
    int64_t *xoffs, *ooffs;
} line;

static int line_init(const ptc_kctx *k, const ptc_tensor *x, const ptc_tensor *out, int64_t dim,
                     line *l)
{
    memset(l, 0, sizeof *l);
    bool reduced[PTC_MAX_DIMS] = {false};
    int d;
    if (ref_dim(k, dim, x->ndim, &d) || ref_out_like(k, 0, x))
        return -1;
    if (x->ndim > 0)
        reduced[d] = true;
    red_init(&l->rx, x, reduced);
    red_init(&l->rout, out, reduced);
    size_t n = (size_t)(l->rx.count ? l->rx.count : 1);
    l->xoffs = malloc(sizeof *l->xoffs * n);
    l->ooffs = malloc(sizeof *l->ooffs * n);
    if (!l->xoffs || !l->ooffs) {
        free(l->xoffs);
        free(l->ooffs);
        return ref_fail(k, "out of memory");
    }
    return 0;
}

static void line_load(line *l, int64_t o)
{
    red_offsets(&l->rx, o, l->xoffs);
    red_offsets(&l->rout, o, l->ooffs);
}

static void line_free(line *l)
{
    free(l->xoffs);
    free(l->ooffs);
}

/* cumsum and cumprod (the torch ops and the prims), accumulating in double
 * or, on integers, in wrapping 64-bit arithmetic. */
int ptc_ref_cumsum(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor *out = &k->out[0];
    ptc_dtype dt = out->dtype;
    bool prod = k->node->op == PTC_OP_CUMPROD || k->node->op == PTC_OP_PRIMS_CUMPROD;
    line l;
    if (line_init(k, x, out, ref_int(k, "dim"), &l))
        return -1;
    for (int64_t o = 0; o < l.rx.nout; o++) {
        line_load(&l, o);
        double facc = prod;
        uint64_t iacc = prod;
        for (int64_t i = 0; i < l.rx.count; i++) {
            const void *p = ref_at(x, l.xoffs[i]);
            if (ref_is_float(dt)) {
                double v = ref_load_as_f(p, x->dtype, dt);
                facc = prod ? facc * v : facc + v;
                ref_stf(out, l.ooffs[i], facc);
            } else {
                uint64_t v = (uint64_t)ref_load_as_i(p, x->dtype, dt);
                iacc = prod ? iacc * v : iacc + v;
                ref_sti(out, l.ooffs[i], (int64_t)iacc);
            }
        }
    }
    line_free(&l);
    return 0;
}

/* ---- sort ------------------------------------------------------------------------- */

/* Whether key i goes before key j in a sort (NaN above every number, as torch). */
static bool sorts_before(const double *f, const int64_t *iv, int64_t i, int64_t j, bool desc)
{
    if (!f)
        return desc ? iv[i] > iv[j] : iv[i] < iv[j];
    bool ni = f[i] != f[i], nj = f[j] != f[j];
    if (ni || nj)
        return desc ? ni && !nj : nj && !ni;
    return desc ? f[i] > f[j] : f[i] < f[j];
}

int ptc_sort_order(const double *fkeys, const int64_t *ikeys, int64_t n, bool descending,
                   int64_t *order)
{
    int64_t *tmp = malloc(sizeof *tmp * (size_t)(n ? n : 1));
    if (!tmp)
        return -1;
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    /* bottom-up merge sort: stable, ties keep their input order */
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t a = lo, b = mid, t = lo;
            while (a < mid || b < hi)
                tmp[t++] = b >= hi || (a < mid && !sorts_before(fkeys, ikeys, order[b], order[a],
                                                                 descending))
                               ? order[a++]
                               : order[b++];
        }
        memcpy(order, tmp, sizeof *tmp * (size_t)n);
    }
    free(tmp);
    return 0;
}

/* x's lines along the node's "dim" arg (rx) and the first output's (ro),
 * for the kernels that work a line at a time (sort, topk, cummax, cummin). */
static int lines_along_dim(ptc_kctx *k, const ptc_tensor *x, red *rx, red *ro)
{
    bool reduced[PTC_MAX_DIMS] = {false};
    int d;
    if (ref_dim(k, ref_int(k, "dim"), x->ndim, &d))
        return -1;
    if (x->ndim > 0)
        reduced[d] = true;
    red_init(rx, x, reduced);
    red_init(ro, &k->out[0], reduced);
    return 0;
}

/* sort and topk: each line's keys in double (or int64), their stable
 * order, then the values and indices in that order (topk's first k, of the
 * largest or the smallest). */
int ptc_ref_sort(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    bool topk = k->node->op == PTC_OP_TOPK, fl = ref_is_float(x->dtype);
    bool desc = ref_bool(k, topk ? "largest" : "descending");
    red rx, ro;
    if (lines_along_dim(k, x, &rx, &ro))
        return -1;
    size_t n = (size_t)(rx.count ? rx.count : 1);
    double *f = fl ? malloc(sizeof *f * n) : NULL;
    int64_t *iv = fl ? NULL : malloc(sizeof *iv * n), *order = malloc(sizeof *order * n);
    int64_t *xoffs = malloc(sizeof *xoffs * n), *ooffs = malloc(sizeof *ooffs * n);
    int rc = (fl ? !f : !iv) || !order || !xoffs || !ooffs ? ref_fail(k, "out of memory") : 0;
    for (int64_t o = 0; rc == 0 && o < rx.nout && ro.count > 0; o++) {
        red_offsets(&rx, o, xoffs);
        red_offsets(&ro, o, ooffs);
        for (int64_t i = 0; i < rx.count; i++) {
            if (fl)
                f[i] = ref_ldf(x, xoffs[i]);
            else
                iv[i] = ref_ldi(x, xoffs[i]);
        }
        if (ptc_sort_order(f, iv, rx.count, desc, order))
            rc = ref_fail(k, "out of memory");
        for (int64_t i = 0; rc == 0 && i < ro.count; i++) {
            int64_t j = order[i];
            memcpy(ref_at(&k->out[0], ooffs[i]), ref_at(x, xoffs[j]), ptc_dtype_size(x->dtype));
            ref_sti(&k->out[1], ooffs[i], j);
        }
    }
    free(f);
    free(iv);
    free(order);
    free(xoffs);
    free(ooffs);
    return rc;
}

/* Does x (at running extreme cur) take over a cummax (max) or cummin: a
 * NaN always, then nothing but a NaN; ties too, so the later index wins, as
 * in torch's kernels. */
bool ptc_cum_extreme_takes(double x, double cur, bool max)
{
    if (isnan(x))
        return true;
    if (isnan(cur))
        return false;
    return max ? x >= cur : x <= cur;
}

/* cummax / cummin along dim: the running extreme and its index, one line at
 * a time (integers compared as integers). */
int ptc_ref_cummax(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    bool fl = ref_is_float(x->dtype), max = k->node->op == PTC_OP_CUMMAX;
    red rx, ro;
    if (lines_along_dim(k, x, &rx, &ro))
        return -1;
    size_t n = (size_t)(rx.count ? rx.count : 1);
    int64_t *xoffs = malloc(sizeof *xoffs * n), *ooffs = malloc(sizeof *ooffs * n);
    int rc = !xoffs || !ooffs ? ref_fail(k, "out of memory") : 0;
    for (int64_t o = 0; rc == 0 && o < rx.nout && rx.count > 0; o++) {
        red_offsets(&rx, o, xoffs);
        red_offsets(&ro, o, ooffs);
        int64_t best = 0;
        for (int64_t i = 0; i < rx.count; i++) {
            bool take = i == 0;
            if (!take && fl)
                take = ptc_cum_extreme_takes(ref_ldf(x, xoffs[i]), ref_ldf(x, xoffs[best]), max);
            else if (!take) {
                int64_t v = ref_ldi(x, xoffs[i]), cur = ref_ldi(x, xoffs[best]);
                take = max ? v >= cur : v <= cur;
            }
            best = take ? i : best;
            memcpy(ref_at(&k->out[0], ooffs[i]), ref_at(x, xoffs[best]), ptc_dtype_size(x->dtype));
            ref_sti(&k->out[1], ooffs[i], best);
        }
    }
    free(xoffs);
    free(ooffs);
    return rc;
}

/* softmax = exp(x - max) / sum, log_softmax = x - max - log(sum), in double
 * on the input converted to the output dtype (torch converts first when a
 * dtype is given). A nan anywhere in a line, or a line of -inf, gives nan. */
int ptc_ref_softmax(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor *out = &k->out[0];
    ptc_dtype dt = out->dtype;
    bool logsm = k->node->op == PTC_OP_LOG_SOFTMAX;
    line l;
    if (line_init(k, x, out, ref_int(k, "dim"), &l))
        return -1;
    for (int64_t o = 0; o < l.rx.nout; o++) {
        line_load(&l, o);
        int64_t n = l.rx.count;
        double m = -INFINITY, sum = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = ref_load_as_f(ref_at(x, l.xoffs[i]), x->dtype, dt);
            m = isnan(v) || v > m ? v : m;
            if (isnan(m))
                break;
        }
        for (int64_t i = 0; i < n; i++)
            sum += exp(ref_load_as_f(ref_at(x, l.xoffs[i]), x->dtype, dt) - m);
        for (int64_t i = 0; i < n; i++) {
            double v = ref_load_as_f(ref_at(x, l.xoffs[i]), x->dtype, dt) - m;
            ref_stf(out, l.ooffs[i], logsm ? v - log(sum) : exp(v) / sum);
        }
    }
    line_free(&l);
    return 0;
}
