/* Helpers shared by the meta functions: argument access, message formatting,
 * dim wrapping, broadcasting with messages that name the op and the shapes,
 * and decisions about symbolic sizes.
 *
 * Symbolic sizes are integer expressions over symbols that stand for sizes of
 * at least 2 (a size of 0 or 1 would have been specialised at capture, as
 * torch.compile does). A question such as "is s0 - 5 negative?" is decided by
 * evaluating the expression at many symbol values of that range: when every
 * probe agrees the answer is taken, otherwise the caller reports that the
 * answer depends on the sizes. Equality of two sizes is structural.
 */
#include "ops/meta.h"

#include <stdlib.h>
#include <string.h>

/* ---- args ------------------------------------------------------------------ */

const ptc_ttype *meta_t(const ptc_meta *m, int i)
{
    PTC_ASSERT(i >= 0 && i < m->nargs);
    const ptc_arg *a = &m->args[i];
    return a->kind == PTC_ARG_VALUE && a->v ? &a->v->type : NULL;
}

int meta_argi(const ptc_meta *m, const char *name)
{
    return ptc_param_index(m->op, name);
}

const ptc_arg *meta_arg(const ptc_meta *m, const char *name)
{
    int i = ptc_param_index(m->op, name);
    PTC_ASSERT(i >= 0 && i < m->nargs);
    return &m->args[i];
}

int meta_const(ptc_meta *m, ptc_dim d, const char *what, int64_t *out)
{
    if (d.sym)
        return ptc_meta_fail(m, "%s must be a constant, got %s", what, meta_dstr(m, d));
    *out = d.value;
    return 0;
}

bool meta_is_number(const ptc_arg *a)
{
    return a->kind == PTC_ARG_INT || a->kind == PTC_ARG_FLOAT || a->kind == PTC_ARG_BOOL;
}

double meta_scalar(const ptc_arg *a)
{
    switch (a->kind) {
    case PTC_ARG_INT:
        return (double)a->i.value;
    case PTC_ARG_FLOAT:
        return a->f;
    case PTC_ARG_BOOL:
        return a->b;
    default:
        PTC_ASSERT(!"not a scalar");
    }
    return 0;
}

/* ---- messages ---------------------------------------------------------------- */

static const char *buf_to_arena(ptc_meta *m, ptc_buf *b)
{
    const char *s = ptc_arena_strdup(m->arena, b->data ? b->data : "");
    ptc_buf_free(b);
    return s;
}

const char *meta_tstr(ptc_meta *m, const ptc_ttype *t)
{
    ptc_buf b = {0};
    ptc_ttype_print(&b, t, false);
    return buf_to_arena(m, &b);
}

const char *meta_dstr(ptc_meta *m, ptc_dim d)
{
    ptc_buf b = {0};
    ptc_dim_print(&b, d);
    return buf_to_arena(m, &b);
}

const char *meta_shapestr(ptc_meta *m, const ptc_dim *d, int n)
{
    ptc_buf b = {0};
    ptc_buf_putc(&b, '[');
    for (int i = 0; i < n; i++) {
        if (i)
            ptc_buf_putc(&b, ',');
        ptc_dim_print(&b, d[i]);
    }
    ptc_buf_putc(&b, ']');
    return buf_to_arena(m, &b);
}

/* ---- dims and shapes ------------------------------------------------------- */

int meta_dim(ptc_meta *m, ptc_dim dim, int ndim, const ptc_ttype *t, int *out)
{
    int64_t d;
    if (meta_const(m, dim, "dim", &d))
        return -1;
    int n = ndim > 0 ? ndim : 1;
    if (d < -n || d >= n) {
        if (t)
            return ptc_meta_fail(m, "dim %lld is out of range for %s (expected in [%d, %d])",
                                 (long long)d, meta_tstr(m, t), -n, n - 1);
        return ptc_meta_fail(m, "dim %lld is out of range (expected in [%d, %d])", (long long)d, -n,
                             n - 1);
    }
    *out = (int)(d < 0 ? d + n : d);
    return 0;
}

bool meta_same(ptc_meta *m, ptc_dim x, ptc_dim y)
{
    if (ptc_dim_eq(x, y))
        return true;
    if (!m->env || (!x.sym && !y.sym))
        return false;
    return m->env->same(m->env, x, y, ptc_op_name(m->op)) == 1;
}

int meta_broadcast(ptc_meta *m, const ptc_ttype *a, const ptc_ttype *b, ptc_dim *out, int *nout)
{
    int bad = 0, n = a->ndim > b->ndim ? a->ndim : b->ndim;
    /* Each relation the shape env makes hold rewrites a's and b's shapes in
     * place; at most one per dim. */
    for (int tries = 0; tries <= n; tries++) {
        if (meta_broadcast_dims(a->shape, a->ndim, b->shape, b->ndim, out, nout, &bad) == 0)
            return 0;
        ptc_dim x = a->shape[bad - (n - a->ndim)], y = b->shape[bad - (n - b->ndim)];
        if (!m->env || (!x.sym && !y.sym) || m->env->same(m->env, x, y, ptc_op_name(m->op)) != 1)
            break;
    }
    ptc_dim x = a->shape[bad - (n - a->ndim)], y = b->shape[bad - (n - b->ndim)];
    return ptc_meta_fail(m, "shapes %s and %s cannot broadcast (dim %d: %s vs %s%s)",
                         meta_tstr(m, a), meta_tstr(m, b), bad, meta_dstr(m, x), meta_dstr(m, y),
                         x.sym || y.sym ? "; distinct symbolic sizes are taken to differ" : "");
}

int meta_expandable(ptc_meta *m, const ptc_ttype *from, const ptc_dim *to, int nto,
                    const char *what)
{
    if (from->ndim > nto)
        return ptc_meta_fail(m, "%s %s cannot be broadcast to %s (it has more dims)", what,
                             meta_tstr(m, from), meta_shapestr(m, to, nto));
    for (int i = 0; i < from->ndim; i++) {
        ptc_dim f = from->shape[i], t = to[nto - from->ndim + i];
        if (!meta_is(f, 1) && !meta_same(m, f, t))
            return ptc_meta_fail(m, "%s %s cannot be broadcast to %s (dim %d: %s vs %s)", what,
                                 meta_tstr(m, from), meta_shapestr(m, to, nto),
                                 nto - from->ndim + i, meta_dstr(m, f), meta_dstr(m, t));
    }
    return 0;
}

/* Symbol values tried by meta_sign: small sizes (where most sign changes of
 * size arithmetic happen) and a few large ones. */
static const int64_t probes[] = {2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 16, 17, 32, 61, 100, 128, 1000};
#define NPROBES ((int)(sizeof probes / sizeof *probes))

/* The least and greatest sign of d over the probes; -2 when d cannot be
 * evaluated. */
static int sign_range(ptc_dim d, int *lo, int *hi)
{
    if (!d.sym) {
        *lo = *hi = (d.value > 0) - (d.value < 0);
        return 0;
    }
    const char *names[16];
    int n = ptc_dim_symbols(d, names, 0, 16);
    *lo = 1;
    *hi = -1;
    /* Round r gives symbol k the probe r + k * step, so that symbols take
     * both equal and different values across rounds. */
    for (int step = 0; step < 3; step++) {
        for (int r = 0; r < NPROBES; r++) {
            ptc_bindings b = {0};
            for (int k = 0; k < n; k++)
                ptc_bindings_set(&b, names[k], probes[(r + k * (step * 5 + 1)) % NPROBES]);
            int64_t v;
            if (ptc_dim_eval(d, &b, &v, NULL))
                return -1;
            int s = (v > 0) - (v < 0);
            *lo = s < *lo ? s : *lo;
            *hi = s > *hi ? s : *hi;
        }
        if (n <= 1)
            break;
    }
    return 0;
}

int meta_sign(ptc_dim d)
{
    int lo, hi;
    if (sign_range(d, &lo, &hi))
        return 2;
    return lo == hi ? lo : 2;
}

int meta_le(ptc_arena *a, ptc_dim x, ptc_dim y)
{
    if (ptc_dim_eq(x, y))
        return 1;
    int lo, hi;
    if (sign_range(ptc_dim_sub(a, y, x), &lo, &hi))
        return -1;
    return lo >= 0 ? 1 : hi < 0 ? 0 : -1;
}

int meta_le_env(ptc_meta *m, ptc_dim x, ptc_dim y)
{
    int le = meta_le(m->arena, x, y);
    if (le >= 0 || !m->env)
        return le;
    return m->env->nonneg(m->env, ptc_dim_sub(m->arena, y, x), ptc_op_name(m->op));
}

int meta_sign_env(ptc_meta *m, ptc_dim d)
{
    int sign = meta_sign(d);
    if (sign != 2 || !m->env)
        return sign;
    int pos = meta_le_env(m, ptc_dim_c(1), d);
    if (pos != 0)
        return pos == 1 ? 1 : 2;
    return meta_le_env(m, d, ptc_dim_c(-1)) == 1 ? -1 : 0;
}

int meta_divide(ptc_meta *m, ptc_dim x, ptc_dim y, ptc_dim *q)
{
    if (meta_exact_div(m->arena, x, y, q) == 0)
        return 0;
    ptc_shape_env *env = m->env;
    if (!env || !x.sym || y.sym || y.value < 2 ||
        env->divides(env, x, y.value, ptc_op_name(m->op)) != 1)
        return -1;
    /* x's symbols were rewritten so that y divides it: infer again */
    *q = ptc_dim_floordiv(m->arena, env->rewrite(env, m->arena, x), y);
    return 0;
}

int meta_exact_div(ptc_arena *a, ptc_dim x, ptc_dim y, ptc_dim *q)
{
    if (!y.sym) {
        if (y.value == 0)
            return -1;
        *q = ptc_dim_floordiv(a, x, y);
        return ptc_dim_eq(ptc_dim_mul(a, *q, y), x) ? 0 : -1;
    }
    if (ptc_dim_eq(x, y)) {
        *q = ptc_dim_c(1);
        return 0;
    }
    /* A symbolic divisor: accept a quotient that is the same constant at
     * every probe (x = 2*s0*s1, y = s0*s1). */
    const char *names[16];
    int n = ptc_dim_symbols(x, names, 0, 16);
    n = ptc_dim_symbols(y, names, n, 16);
    int64_t quot = 0;
    for (int r = 0; r < NPROBES; r++) {
        ptc_bindings b = {0};
        for (int k = 0; k < n; k++)
            ptc_bindings_set(&b, names[k], probes[(r + 3 * k) % NPROBES]);
        int64_t vx, vy;
        if (ptc_dim_eval(x, &b, &vx, NULL) || ptc_dim_eval(y, &b, &vy, NULL) || vy == 0 ||
            vx % vy != 0 || (r > 0 && vx / vy != quot))
            return -1;
        quot = vx / vy;
    }
    *q = ptc_dim_c(quot);
    return 0;
}

/* ---- outputs ---------------------------------------------------------------- */

ptc_ttype *meta_out(ptc_meta *m, ptc_dtype dt, const ptc_dim *shape, int n)
{
    PTC_ASSERT(n >= 0 && n <= PTC_MAX_DIMS);
    ptc_ttype *t = ptc_meta_add_output(m);
    t->dtype = dt;
    t->ndim = (int8_t)n;
    for (int i = 0; i < n; i++)
        t->shape[i] = shape[i];
    return t;
}

ptc_ttype *meta_out_like(ptc_meta *m, const ptc_ttype *t)
{
    return meta_out(m, t->dtype, t->shape, t->ndim);
}

/* ---- dtypes ----------------------------------------------------------------- */

ptc_dtype meta_result_type(const ptc_meta *m, const int *idx, int n)
{
    const ptc_arg *args[16];
    int k = 0;
    for (int i = 0; i < n && k < 16; i++)
        if (idx[i] >= 0)
            args[k++] = &m->args[idx[i]];
    return ptc_result_type(args, k);
}

int meta_need_float(ptc_meta *m, const ptc_ttype *t, const char *what)
{
    if (ptc_dtype_is_float(t->dtype))
        return 0;
    return ptc_meta_fail(m, "expected a floating point %s, got %s", what, meta_tstr(m, t));
}
