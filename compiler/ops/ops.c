/* The op table's meaning at the graph level: flags, meta inference, the graph
 * builder and the type-checking verifier.
 *
 * Meta functions (meta_*.c, one per family of ops) see their args in schema
 * order with defaults filled and int[N] normalised, and only decide dtypes and
 * shapes. What is the same for every op happens here, around the call:
 * devices (outputs live on the inputs' device; 0-dim CPU tensors may join CUDA
 * ones in pointwise ops, as in torch) and requires_grad (set iff a floating input requires grad
 * and the output is floating). ptc_ops_verify recomputes every node's types
 * from its args, so a .ptir file cannot claim types its ops do not produce.
 */
#include "ops/meta.h"

#include <stdlib.h>
#include <string.h>

static const unsigned op_flags[] = {
#define OP(id, stage, schema, meta, ref, flags, ...) flags,
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof op_flags / sizeof *op_flags == PTC_OP_COUNT, "flag table out of step");

static const ptc_meta_fn meta_fns[] = {
#define OP(id, stage, schema, meta, ref, flags, ...) meta,
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof meta_fns / sizeof *meta_fns == PTC_OP_COUNT, "meta table out of step");

unsigned ptc_op_flags(ptc_op op)
{
    PTC_ASSERT((unsigned)op < PTC_OP_COUNT);
    return op_flags[op];
}

/* ---- promotion, broadcasting, dims ------------------------------------------ */

/* torch's combine_categories: the higher-priority class wins unless the lower
 * one is of a higher category (bool < int < float). */
static ptc_dtype combine(ptc_dtype higher, ptc_dtype lower)
{
    if (higher == PTC_DTYPE_NONE)
        return lower;
    if (lower == PTC_DTYPE_NONE || ptc_dtype_is_float(higher))
        return higher;
    if (higher == PTC_BOOL || ptc_dtype_is_float(lower))
        return ptc_dtype_promote(higher, lower);
    return higher;
}

static ptc_dtype promote_opt(ptc_dtype a, ptc_dtype b)
{
    if (a == PTC_DTYPE_NONE)
        return b;
    return ptc_dtype_promote(a, b);
}

ptc_dtype ptc_result_type(const ptc_arg *const *args, int n)
{
    ptc_dtype dim = PTC_DTYPE_NONE, zero = PTC_DTYPE_NONE, wrapped = PTC_DTYPE_NONE;
    for (int i = 0; i < n; i++) {
        const ptc_arg *a = args[i];
        switch (a->kind) {
        case PTC_ARG_VALUE:
            if (a->v->type.ndim > 0)
                dim = promote_opt(dim, a->v->type.dtype);
            else
                zero = promote_opt(zero, a->v->type.dtype);
            break;
        case PTC_ARG_VALUES:
            for (int j = 0; j < a->vs.n; j++) {
                const ptc_value *v = a->vs.v[j];
                if (!v)
                    continue;
                if (v->type.ndim > 0)
                    dim = promote_opt(dim, v->type.dtype);
                else
                    zero = promote_opt(zero, v->type.dtype);
            }
            break;
        case PTC_ARG_INT:
            wrapped = promote_opt(wrapped, PTC_I64);
            break;
        case PTC_ARG_FLOAT:
            wrapped = promote_opt(wrapped, PTC_DEFAULT_FLOAT);
            break;
        case PTC_ARG_BOOL:
            wrapped = promote_opt(wrapped, PTC_BOOL);
            break;
        default:
            break;
        }
    }
    return combine(dim, combine(zero, wrapped));
}

int meta_broadcast_dims(const ptc_dim *x, int nx, const ptc_dim *y, int ny, ptc_dim *out, int *nout,
                        int *bad)
{
    int n = nx > ny ? nx : ny;
    for (int i = 0; i < n; i++) {
        int ix = i - (n - nx), iy = i - (n - ny);
        if (ix < 0) {
            out[i] = y[iy];
        } else if (iy < 0) {
            out[i] = x[ix];
        } else if (ptc_dim_eq(x[ix], y[iy]) || (!y[iy].sym && y[iy].value == 1)) {
            out[i] = x[ix];
        } else if (!x[ix].sym && x[ix].value == 1) {
            out[i] = y[iy];
        } else {
            *bad = i;
            return -1;
        }
    }
    *nout = n;
    return 0;
}

int ptc_broadcast_shapes(ptc_arena *a, const ptc_dim *x, int nx, const ptc_dim *y, int ny,
                         ptc_dim *out, int *nout, ptc_error *err)
{
    (void)a;
    int bad;
    if (meta_broadcast_dims(x, nx, y, ny, out, nout, &bad) == 0)
        return 0;
    int n = nx > ny ? nx : ny;
    ptc_buf b = {0};
    ptc_buf_puts(&b, "shapes [");
    for (int i = 0; i < nx; i++) {
        ptc_buf_puts(&b, i ? "," : "");
        ptc_dim_print(&b, x[i]);
    }
    ptc_buf_puts(&b, "] and [");
    for (int i = 0; i < ny; i++) {
        ptc_buf_puts(&b, i ? "," : "");
        ptc_dim_print(&b, y[i]);
    }
    ptc_buf_printf(&b, "] cannot broadcast (dim %d: ", bad);
    ptc_dim_print(&b, x[bad - (n - nx)]);
    ptc_buf_puts(&b, " vs ");
    ptc_dim_print(&b, y[bad - (n - ny)]);
    ptc_buf_puts(&b, ")");
    ptc_errorf(err, PTC_ERR_META, "meta", "%s", b.data);
    ptc_buf_free(&b);
    return -1;
}

int ptc_wrap_dim(int64_t dim, int ndim)
{
    if (dim < -(int64_t)ndim || dim >= ndim)
        return -1;
    return (int)(dim < 0 ? dim + ndim : dim);
}

/* ---- meta inference ---------------------------------------------------------- */

/* The device outputs live on: the first CUDA tensor's, else CPU. */
static ptc_device common_device(const ptc_meta *m)
{
    for (int i = 0; i < m->nargs; i++) {
        const ptc_arg *a = &m->args[i];
        if (a->kind == PTC_ARG_VALUE && a->v->type.device.kind == PTC_DEV_CUDA)
            return a->v->type.device;
        if (a->kind == PTC_ARG_VALUES)
            for (int j = 0; j < a->vs.n; j++)
                if (a->vs.v[j] && a->vs.v[j]->type.device.kind == PTC_DEV_CUDA)
                    return a->vs.v[j]->type.device;
    }
    return PTC_CPU;
}

ptc_ttype *ptc_meta_add_output(ptc_meta *m)
{
    if (m->nout == m->cap) {
        int cap = m->cap ? 2 * m->cap : 4;
        ptc_ttype *out = PTC_NEWN(m->arena, ptc_ttype, cap);
        if (m->nout)
            memcpy(out, m->out, sizeof *out * (size_t)m->nout);
        m->out = out;
        m->cap = cap;
    }
    ptc_ttype *t = &m->out[m->nout++];
    memset(t, 0, sizeof *t);
    t->device = common_device(m);
    return t;
}

int ptc_meta_fail(ptc_meta *m, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ptc_errorf(m->err, PTC_ERR_META, "meta", "%s: %s", ptc_op_name(m->op), msg);
}

static const char *devstr(ptc_meta *m, ptc_device d)
{
    char buf[32];
    ptc_device_str(d, buf, sizeof buf);
    return ptc_arena_strdup(m->arena, buf);
}

/* One tensor against the common device `dev`. As in torch (checked on a GPU
 * with torch 2.11): pointwise ops take 0-dim CPU tensors along with CUDA ones
 * (TensorIterator's CPU scalars; clamp's tensor bounds excepted), index lists
 * (Tensor?[]) may stay on the CPU, every other mix is an error. */
static int check_device(ptc_meta *m, const ptc_value *v, ptc_device dev, bool index)
{
    ptc_device d = v->type.device;
    if (ptc_device_eq(d, dev))
        return 0;
    bool cpu_scalar_ok = (ptc_op_flags(m->op) & PTC_F_POINTWISE) && m->op != PTC_OP_CLAMP;
    if (d.kind == PTC_DEV_CPU && (index || (cpu_scalar_ok && v->type.ndim == 0)))
        return 0;
    return ptc_meta_fail(m, "expected all tensors on one device, got %s and %s (%s on %s)",
                         devstr(m, dev), devstr(m, d), meta_tstr(m, &v->type), devstr(m, d));
}

static int check_devices(ptc_meta *m)
{
    const ptc_schema *s = ptc_op_schema(m->op);
    ptc_device dev = common_device(m);
    for (int i = 0; i < m->nargs; i++) {
        const ptc_arg *a = &m->args[i];
        bool index = s->params[i].kind == PTC_PK_TENSOR_OPT_LIST;
        if (a->kind == PTC_ARG_VALUE && check_device(m, a->v, dev, false))
            return -1;
        if (a->kind == PTC_ARG_VALUES)
            for (int j = 0; j < a->vs.n; j++)
                if (a->vs.v[j] && check_device(m, a->vs.v[j], dev, index))
                    return -1;
    }
    return 0;
}

static bool float_input_requires_grad(const ptc_arg *args, int nargs)
{
    for (int i = 0; i < nargs; i++) {
        const ptc_arg *a = &args[i];
        if (a->kind == PTC_ARG_VALUE && a->v->type.requires_grad &&
            ptc_dtype_is_float(a->v->type.dtype))
            return true;
        if (a->kind == PTC_ARG_VALUES)
            for (int j = 0; j < a->vs.n; j++) {
                const ptc_value *v = a->vs.v[j];
                if (v && v->type.requires_grad && ptc_dtype_is_float(v->type.dtype))
                    return true;
            }
    }
    return false;
}

/* Gradients flow to floating outputs of ops with a floating input that
 * requires grad; batch_norm's updated running statistics are buffers. */
static bool output_wants_grad(ptc_op op, const ptc_arg *args, int nargs, int out, ptc_dtype dt)
{
    return float_input_requires_grad(args, nargs) && (op != PTC_OP_BATCH_NORM || out == 0) &&
           ptc_dtype_is_float(dt);
}

bool ptc_op_output_detached(const ptc_node *n, int out)
{
    return !n->outs[out]->type.requires_grad &&
           output_wants_grad(n->op, n->args, n->nargs, out, n->outs[out]->type.dtype);
}

static bool is_word(const ptc_param *p, const char *s)
{
    for (int w = 0; p->words[w]; w++)
        if (strcmp(p->words[w], s) == 0)
            return true;
    return false;
}

/* A str argument must be one of its parameter's words (schema.c lists them). */
static int check_words(ptc_meta *m)
{
    const ptc_schema *s = ptc_op_schema(m->op);
    for (int i = 0; i < s->nparams; i++) {
        const ptc_param *p = &s->params[i];
        if (!p->words || m->args[i].kind != PTC_ARG_STR || is_word(p, m->args[i].s))
            continue;
        ptc_buf b = {0};
        for (int w = 0; p->words[w]; w++)
            ptc_buf_printf(&b, "%s'%s'", w ? ", " : "", p->words[w]);
        ptc_meta_fail(m, "%s must be %sone of %s, got '%s'", p->name,
                      p->kind == PTC_PK_STR_OPT ? "None or " : "", b.data, m->args[i].s);
        ptc_buf_free(&b);
        return -1;
    }
    return 0;
}

static int meta_infer(ptc_arena *a, ptc_op op, const ptc_arg *args, int nargs, ptc_shape_env *env,
                      ptc_ttype **types, int *nout, ptc_error *err)
{
    PTC_ASSERT((unsigned)op < PTC_OP_COUNT);
    const ptc_schema *s = ptc_op_schema(op);
    if (nargs != s->nparams)
        return ptc_errorf(err, PTC_ERR_META, "meta", "%s: expected %d arguments, got %d", s->name,
                          s->nparams, nargs);
    /* Meta functions rely on arg kinds matching the schema, int[N] given as
     * lists and floats as floats: check, and normalise a copy. */
    if (ptc_args_check(op, args, nargs, err))
        return -1;
    ptc_arg *norm = ptc_arena_dup(a, args, sizeof *args * (size_t)(nargs > 0 ? nargs : 1));
    ptc_args_normalize(a, op, norm);
    ptc_meta m = {.arena = a, .op = op, .args = norm, .nargs = nargs, .err = err, .env = env};
    if (check_devices(&m) || check_words(&m) || meta_fns[op](&m))
        return -1;
    PTC_ASSERT(m.nout >= 1 && (s->nreturns < 0 || m.nout == s->nreturns));
    for (int i = 0; i < m.nout; i++)
        m.out[i].requires_grad = output_wants_grad(op, norm, nargs, i, m.out[i].dtype);
    *types = m.out;
    *nout = m.nout;
    return 0;
}

int ptc_meta_infer(ptc_arena *a, ptc_op op, const ptc_arg *args, int nargs, ptc_ttype **types,
                   int *nout, ptc_error *err)
{
    return meta_infer(a, op, args, nargs, NULL, types, nout, err);
}

/* ---- building graphs --------------------------------------------------------- */

/* The int args of a node being built, under the shape env's rewrites. */
static void rewrite_args(ptc_shape_env *env, ptc_arena *a, ptc_arg *args, int nargs)
{
    for (int i = 0; i < nargs; i++) {
        if (args[i].kind == PTC_ARG_INT) {
            args[i].i = env->rewrite(env, a, args[i].i);
        } else if (args[i].kind == PTC_ARG_INTS) {
            ptc_dim *d = PTC_NEWN(a, ptc_dim, args[i].is.n > 0 ? args[i].is.n : 1);
            for (int j = 0; j < args[i].is.n; j++)
                d[j] = env->rewrite(env, a, args[i].is.d[j]);
            args[i].is.d = d;
        }
    }
}

/* Meta over args; where the shape env rewrote the graph to make a relation
 * hold, again over the rewritten args (a rewrite removes a symbol or pins
 * one, so this ends; the bound is a backstop). */
static int infer_with_env(ptc_graph *g, ptc_op op, ptc_arg *full, int nargs, ptc_ttype **types,
                          int *nout, ptc_error *err)
{
    ptc_shape_env *env = g->shape_env;
    int before = env ? env->rewrites : 0;
    if (before > 0) /* args computed from sizes read before a rewrite */
        rewrite_args(env, g->arena, full, nargs);
    int rc = meta_infer(g->arena, op, full, nargs, env, types, nout, err);
    for (int tries = 0; env && env->rewrites != before && tries < PTC_MAX_DIMS * 4; tries++) {
        before = env->rewrites;
        rewrite_args(env, g->arena, full, nargs);
        rc = meta_infer(g->arena, op, full, nargs, env, types, nout, err);
    }
    return rc;
}

ptc_node *ptc_build(ptc_graph *g, ptc_op op, const ptc_arg *args, int nargs, ptc_error *err)
{
    const ptc_schema *s = ptc_op_schema(op);
    if (nargs < 0 || nargs > s->nparams) {
        ptc_errorf(err, PTC_ERR_VERIFY, "verify", "%s: expected at most %d arguments, got %d",
                   s->name, s->nparams, nargs);
        return NULL;
    }
    ptc_arg *full = PTC_NEWN(g->arena, ptc_arg, s->nparams > 0 ? s->nparams : 1);
    ptc_args_defaults(op, full);
    for (int i = 0; i < nargs; i++)
        full[i] = args[i];
    for (int i = nargs; i < s->nparams; i++)
        if (!s->params[i].has_default) {
            ptc_errorf(err, PTC_ERR_VERIFY, "verify", "%s: missing argument '%s'", s->name,
                       s->params[i].name);
            return NULL;
        }
    if (ptc_args_check(op, full, s->nparams, err))
        return NULL;
    ptc_args_normalize(g->arena, op, full);
    ptc_ttype *types;
    int nout;
    if (infer_with_env(g, op, full, s->nparams, &types, &nout, err))
        return NULL;
    return ptc_graph_add_node(g, op, full, s->nparams, nout, types, NULL);
}

ptc_value *ptc_build1(ptc_graph *g, ptc_op op, const ptc_arg *args, int nargs, ptc_error *err)
{
    ptc_node *n = ptc_build(g, op, args, nargs, err);
    if (!n)
        return NULL;
    PTC_ASSERT(n->nout == 1);
    return n->outs[0];
}

/* ---- verification ------------------------------------------------------------ */

/* "%3 = add(%x, %y)": the node without its types and location. */
static void node_head(ptc_buf *b, const ptc_node *n)
{
    ptc_buf line = {0};
    ptc_print_node(&line, n);
    const char *end = strstr(line.data, ") : ");
    size_t len = end ? (size_t)(end - line.data) + 1 : line.len;
    if (len > 160) {
        ptc_buf_putn(b, line.data, 156);
        ptc_buf_puts(b, "...)");
    } else {
        ptc_buf_putn(b, line.data, len);
    }
    ptc_buf_free(&line);
}

__attribute__((format(printf, 4, 5))) static int node_error(ptc_error *err, ptc_errclass cls,
                                                            const ptc_node *n, const char *fmt, ...)
{
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ptc_buf b = {0};
    node_head(&b, n);
    ptc_errorf(err, cls, cls == PTC_ERR_META ? "meta" : "verify", "%s: %s", b.data, msg);
    ptc_buf_free(&b);
    if (err) {
        err->has_node = true;
        err->node_id = n->id;
    }
    return -1;
}

static bool same_shape(const ptc_ttype *x, const ptc_ttype *y)
{
    if (x->ndim != y->ndim)
        return false;
    for (int i = 0; i < x->ndim; i++)
        if (!ptc_dim_eq(x->shape[i], y->shape[i]))
            return false;
    return true;
}

/* The printed type of output i against the inferred one. */
static int check_output(ptc_error *err, const ptc_node *n, int i, const ptc_ttype *got,
                        const ptc_ttype *want)
{
    bool dev_ok =
        ptc_device_eq(got->device, want->device) && got->device.index == want->device.index;
    bool grad_ok = !got->requires_grad || want->requires_grad;
    if (got->dtype == want->dtype && same_shape(got, want) && dev_ok && grad_ok &&
        got->layout == PTC_LAYOUT_CONTIGUOUS)
        return 0;
    ptc_buf g = {0}, w = {0};
    bool full = !dev_ok || !grad_ok;
    ptc_ttype_print(&g, got, full);
    ptc_ttype_print(&w, want, full);
    if (!grad_ok)
        ptc_buf_puts(&w, " (no grad)");
    const char *what = got->layout != PTC_LAYOUT_CONTIGUOUS ? " (node outputs are contiguous)" : "";
    char which[32] = "";
    if (n->nout > 1)
        snprintf(which, sizeof which, " of result %d", i);
    node_error(err, PTC_ERR_VERIFY, n, "printed type%s %s, but %s infers %s%s", which, g.data,
               ptc_op_name(n->op), w.data, what);
    ptc_buf_free(&g);
    ptc_buf_free(&w);
    return -1;
}

static int verify_node(ptc_arena *scratch, const ptc_node *n, ptc_error *err)
{
    ptc_ttype *types;
    int nout;
    ptc_error merr;
    ptc_error_clear(&merr);
    if (ptc_meta_infer(scratch, n->op, n->args, n->nargs, &types, &nout, &merr))
        return node_error(err, merr.cls, n, "%s", merr.msg);
    if (nout != n->nout)
        return node_error(err, PTC_ERR_VERIFY, n, "printed %d results, but %s infers %d", n->nout,
                          ptc_op_name(n->op), nout);
    for (int i = 0; i < nout; i++)
        if (check_output(err, n, i, &n->outs[i]->type, &types[i]))
            return -1;
    return 0;
}

int ptc_ops_verify(const ptc_graph *g, int stage, ptc_error *err)
{
    if (ptc_ir_verify(g, stage, err))
        return -1;
    ptc_arena *scratch = ptc_arena_new();
    int rc = 0;
    for (int i = 0; i < g->nnodes && rc == 0; i++)
        rc = verify_node(scratch, g->nodes[i], err);
    ptc_arena_free(scratch);
    return rc;
}
