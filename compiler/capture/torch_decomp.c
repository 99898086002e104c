/* Torch functions with no op of their own in ops.def, written as small graphs
 * of ops that exist: factories (eye, linspace), pointwise helpers (hypot,
 * lerp, addcmul, xlogy, nan_to_num, isclose, ...), shape helpers (flip, tile,
 * repeat_interleave, broadcast_to, diff) and the common losses of
 * torch.nn.functional (mse, l1, smooth l1, huber, binary cross entropy with
 * and without logits, nll, cross entropy). Each follows the formula torch's
 * own kernel or decomposition uses, so results agree to rounding; arguments
 * outside what is written here (legacy size_average/reduce, label smoothing
 * with class weights, ...) stay graph breaks with the reason named.
 */
#include "capture/torch/torch.h"

#include <math.h>
#include <string.h>

#define ARG(i, name) cap_targ(c, i, name)

typedef ptc_value *V;

static V un(cap_trace *T, ptc_op op, V a)
{
    if (!a)
        return NULL;
    ptc_arg x[1] = {ptc_arg_value(a)};
    return cap_build1(T, op, x, 1);
}

static V bin(cap_trace *T, ptc_op op, V a, V b)
{
    if (!a || !b)
        return NULL;
    ptc_arg x[2] = {ptc_arg_value(a), ptc_arg_value(b)};
    return cap_build1(T, op, x, 2);
}

static V bins(cap_trace *T, ptc_op op, V a, double s)
{
    if (!a)
        return NULL;
    ptc_arg x[2] = {ptc_arg_value(a), ptc_arg_float(s)};
    return cap_build1(T, op, x, 2);
}

/* s - a (a scalar on the left). */
static V rsubs(cap_trace *T, double s, V a)
{
    return bins(T, PTC_OP_ADD, un(T, PTC_OP_NEG, a), s);
}

static V where(cap_trace *T, V cond, ptc_arg a, ptc_arg b)
{
    if (!cond || (a.kind == PTC_ARG_VALUE && !a.v) || (b.kind == PTC_ARG_VALUE && !b.v))
        return NULL;
    ptc_arg x[3] = {ptc_arg_value(cond), a, b};
    return cap_build1(T, PTC_OP_WHERE, x, 3);
}

static V to_dtype(cap_trace *T, V a, ptc_dtype dt)
{
    if (!a || a->type.dtype == dt)
        return a;
    ptc_arg x[2] = {ptc_arg_value(a), ptc_arg_dtype(dt)};
    return cap_build1(T, PTC_OP_TO, x, 2);
}

static V reduce(cap_trace *T, ptc_op op, V a, int64_t dim, bool keepdim, bool all)
{
    if (!a)
        return NULL;
    ptc_arg x[3] = {ptc_arg_value(a), all ? ptc_arg_none() : ptc_arg_ints(T->arena, &dim, 1), ptc_arg_bool(keepdim)};
    return cap_build1(T, op, x, 3);
}

static V unsqueeze(cap_trace *T, V a, int64_t dim)
{
    if (!a)
        return NULL;
    ptc_arg x[2] = {ptc_arg_value(a), ptc_arg_int(dim)};
    return cap_build1(T, PTC_OP_UNSQUEEZE, x, 2);
}

static V arange(cap_trace *T, double start, double end, double step, ptc_dtype dt, ptc_device dev)
{
    ptc_arg x[5] = {ptc_arg_float(start), ptc_arg_float(end), ptc_arg_float(step), ptc_arg_dtype(dt),
                    ptc_arg_device(dev)};
    if (!ptc_dtype_is_float(dt))
        x[0] = ptc_arg_int((int64_t)start), x[1] = ptc_arg_int((int64_t)end), x[2] = ptc_arg_int((int64_t)step);
    return cap_build1(T, PTC_OP_ARANGE, x, 5);
}

static cap_tensor *input_of(cap_tcall *c, const char *name)
{
    PyObject *v = ARG(0, name);
    if (!v)
        v = ARG(-1, "self");
    return v && cap_is_tensor(v) ? (cap_tensor *)v : NULL;
}

static int number(cap_tcall *c, PyObject *v, double dflt, double *out)
{
    *out = dflt;
    if (!v || v == Py_None)
        return CAP_NEXT;
    if (!PyLong_Check(v) && !PyFloat_Check(v))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with a non-constant %s argument", c->m->name,
                           cap_tpname(Py_TYPE(v)));
    *out = PyFloat_AsDouble(v);
    return CAP_NEXT;
}

static ptc_dtype dtype_arg(cap_tcall *c, ptc_dtype dflt, int *rc)
{
    PyObject *d = ARG(-1, "dtype");
    *rc = CAP_NEXT;
    if (!d || d == Py_None)
        return dflt;
    int x = cap_dtype_from_obj(d);
    if (x < 0)
        *rc = cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: unsupported dtype", c->m->name);
    return x < 0 ? dflt : (ptc_dtype)x;
}

static ptc_device device_arg(cap_tcall *c, int *rc)
{
    PyObject *d = ARG(-1, "device");
    ptc_device dev = PTC_CPU;
    *rc = CAP_NEXT;
    if (d && d != Py_None && cap_device_from_obj(d, &dev) < 0) {
        PyErr_Clear();
        *rc = cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: bad device", c->m->name);
    }
    return dev;
}

/* ---- factories ------------------------------------------------------------------------ */

/* eye(n, m=None): (arange(n)[:, None] == arange(m)[None, :]) as dtype. */
int cap_th_eye(cap_tcall *c, PyObject **out)
{
    PyObject *n = ARG(0, "n"), *m = ARG(1, "m");
    if (ARG(-1, "out") || ARG(-1, "requires_grad") == Py_True)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "eye(out=/requires_grad=)");
    if (!n || !PyLong_Check(n) || (m && m != Py_None && !PyLong_Check(m)))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "eye with non-constant sizes");
    int rc1, rc2;
    ptc_dtype dt = dtype_arg(c, cap_default_dtype(), &rc1);
    ptc_device dev = device_arg(c, &rc2);
    if (rc1 != CAP_NEXT || rc2 != CAP_NEXT)
        return CAP_BREAK;
    long long rows = PyLong_AsLongLong(n), cols = m && m != Py_None ? PyLong_AsLongLong(m) : rows;
    V r = unsqueeze(c->T, arange(c->T, 0, (double)rows, 1, PTC_I64, dev), 1);
    V k = unsqueeze(c->T, arange(c->T, 0, (double)cols, 1, PTC_I64, dev), 0);
    return cap_wrap_value(c->T, to_dtype(c->T, bin(c->T, PTC_OP_EQ, r, k), dt), out);
}

/* linspace(start, end, steps): torch's two-sided formula (exact endpoints). */
int cap_th_linspace(cap_tcall *c, PyObject **out)
{
    double start, end;
    PyObject *steps = ARG(2, "steps");
    if (ARG(-1, "out") || ARG(-1, "requires_grad") == Py_True)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "linspace(out=/requires_grad=)");
    if (number(c, ARG(0, "start"), 0, &start) != CAP_NEXT || number(c, ARG(1, "end"), 0, &end) != CAP_NEXT)
        return CAP_BREAK;
    if (!steps || !PyLong_Check(steps) || PyLong_AsLongLong(steps) < 1)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "linspace with steps that is not a positive int");
    int rc1, rc2;
    ptc_dtype dt = dtype_arg(c, cap_default_dtype(), &rc1);
    ptc_device dev = device_arg(c, &rc2);
    if (rc1 != CAP_NEXT || rc2 != CAP_NEXT)
        return CAP_BREAK;
    if (!ptc_dtype_is_float(dt))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "linspace with an integer dtype");
    long long n = PyLong_AsLongLong(steps);
    double step = n > 1 ? (end - start) / (double)(n - 1) : 0;
    V i = arange(c->T, 0, (double)n, 1, dt, dev);
    V lo = bins(c->T, PTC_OP_ADD, bins(c->T, PTC_OP_MUL, i, step), start);
    V hi = rsubs(c->T, end, bins(c->T, PTC_OP_MUL, rsubs(c->T, (double)(n - 1), i), step));
    V first = bins(c->T, PTC_OP_LT, i, (double)(n / 2));
    return cap_wrap_value(c->T, where(c->T, first, ptc_arg_value(lo), ptc_arg_value(hi)), out);
}

/* ---- pointwise ------------------------------------------------------------------------ */

int cap_th_hypot(cap_tcall *c, PyObject **out)
{
    cap_tensor *a = input_of(c, "input");
    PyObject *b = ARG(1, "other");
    if (!a || !b || !cap_is_tensor(b))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "hypot needs two tensors");
    V s = bin(c->T, PTC_OP_ADD, bin(c->T, PTC_OP_MUL, a->v, a->v), bin(c->T, PTC_OP_MUL, cap_val(b), cap_val(b)));
    return cap_wrap_value(c->T, un(c->T, PTC_OP_SQRT, s), out);
}

/* lerp(start, end, weight): start + w (end - start) for w < 0.5, else
 * end - (end - start)(1 - w), as torch computes it. */
int cap_th_lerp(cap_tcall *c, PyObject **out)
{
    cap_tensor *s = input_of(c, "input");
    PyObject *e = ARG(1, "end"), *w = ARG(2, "weight");
    if (!s || !e || !cap_is_tensor(e) || !w)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "lerp needs start, end and weight");
    cap_trace *T = c->T;
    V d = bin(T, PTC_OP_SUB, cap_val(e), s->v);
    if (!cap_is_tensor(w)) {
        double wv;
        if (number(c, w, 0, &wv) != CAP_NEXT)
            return CAP_BREAK;
        V r = wv < 0.5 ? bin(T, PTC_OP_ADD, s->v, bins(T, PTC_OP_MUL, d, wv))
                       : bin(T, PTC_OP_SUB, cap_val(e), bins(T, PTC_OP_MUL, d, 1.0 - wv));
        return cap_wrap_value(T, r, out);
    }
    V wt = cap_val(w);
    V lo = bin(T, PTC_OP_ADD, s->v, bin(T, PTC_OP_MUL, wt, d));
    V hi = bin(T, PTC_OP_SUB, cap_val(e), bin(T, PTC_OP_MUL, d, rsubs(T, 1.0, wt)));
    V small = un(T, PTC_OP_ABS, wt) ? bins(T, PTC_OP_LT, un(T, PTC_OP_ABS, wt), 0.5) : NULL;
    return cap_wrap_value(T, where(T, small, ptc_arg_value(lo), ptc_arg_value(hi)), out);
}

/* addcmul / addcdiv: input + value * t1 (* or /) t2; value a number or a
 * 0-dim tensor. */
int cap_th_addcop(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *t1 = ARG(1, "tensor1"), *t2 = ARG(2, "tensor2");
    double value;
    if (!x || !t1 || !t2 || !cap_is_tensor(t1) || !cap_is_tensor(t2))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs three tensors", c->m->name);
    if (ARG(-1, "out"))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s(out=)", c->m->name);
    PyObject *tvalue = ARG(3, "value");
    /* a 0-dim tensor passes as a Scalar (others raise eager's TypeError) */
    bool scalar_tensor = tvalue && cap_is_tensor(tvalue) && cap_val(tvalue)->type.ndim == 0;
    if (!scalar_tensor && number(c, tvalue, 1.0, &value) != CAP_NEXT)
        return CAP_BREAK;
    bool div = strstr(c->m->name, "addcdiv") != NULL;
    V p = bin(c->T, div ? PTC_OP_DIV : PTC_OP_MUL, cap_val(t1), cap_val(t2));
    if (scalar_tensor) /* eager reads it as a Scalar: its value, in p's dtype */
        p = bin(c->T, PTC_OP_MUL, p, to_dtype(c->T, cap_val(tvalue), p->type.dtype));
    else if (value != 1.0)
        p = bins(c->T, PTC_OP_MUL, p, value);
    return cap_wrap_value(c->T, bin(c->T, PTC_OP_ADD, x->v, p), out);
}

/* exp2, log2, log10 and friends as exp/log with constants. */
int cap_th_explog(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    const char *n = strrchr(c->m->name, '.') + 1;
    cap_trace *T = c->T;
    V v = x->v;
    if (!ptc_dtype_is_float(v->type.dtype))
        v = to_dtype(T, v, cap_default_dtype());
    if (strncmp(n, "exp2", 4) == 0) {
        ptc_arg a[2] = {ptc_arg_float(2.0), ptc_arg_value(v)};
        return cap_wrap_value(T, cap_build1(T, PTC_OP_POW, a, 2), out);
    }
    double k = strncmp(n, "log2", 4) == 0 ? 1.0 / log(2.0) : 1.0 / log(10.0);
    return cap_wrap_value(T, bins(T, PTC_OP_MUL, un(T, PTC_OP_LOG, v), k), out);
}

/* xlogy(x, y): 0 where x == 0 (unless y is nan), else x * log(y). */
int cap_th_xlogy(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *y = ARG(1, "other");
    if (!x || !y || !cap_is_tensor(y))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "xlogy needs two tensors");
    cap_trace *T = c->T;
    V xv = x->v, yv = cap_val(y);
    if (!ptc_dtype_is_float(xv->type.dtype))
        xv = to_dtype(T, xv, cap_default_dtype());
    V prod = bin(T, PTC_OP_MUL, xv, un(T, PTC_OP_LOG, yv));
    V zero = where(T, bins(T, PTC_OP_EQ, xv, 0), ptc_arg_float(0), ptc_arg_value(prod));
    return cap_wrap_value(
        T, where(T, un(T, PTC_OP_ISNAN, yv), ptc_arg_float(NAN), ptc_arg_value(zero)), out);
}

static V is_inf(cap_trace *T, V v, int sign)
{
    if (sign > 0)
        return bins(T, PTC_OP_EQ, v, INFINITY);
    if (sign < 0)
        return bins(T, PTC_OP_EQ, v, -INFINITY);
    return bins(T, PTC_OP_EQ, un(T, PTC_OP_ABS, v), INFINITY);
}

static V is_finite(cap_trace *T, V v)
{
    return bin(T, PTC_OP_LOGICAL_AND, bin(T, PTC_OP_EQ, v, v), un(T, PTC_OP_LOGICAL_NOT, is_inf(T, v, 0)));
}

/* isinf, isposinf, isneginf, isfinite. */
int cap_th_isinf(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    const char *n = strrchr(c->m->name, '.') + 1;
    V v = x->v;
    if (!ptc_dtype_is_float(v->type.dtype)) {
        /* Integers are all finite. */
        ptc_arg a[4] = {ptc_arg_dims(c->T->arena, v->type.shape, v->type.ndim),
                        ptc_arg_bool(strcmp(n, "isfinite") == 0), ptc_arg_dtype(PTC_BOOL),
                        ptc_arg_device(v->type.device)};
        return cap_wrap_value(c->T, cap_build1(c->T, PTC_OP_FULL, a, 4), out);
    }
    if (strcmp(n, "isfinite") == 0)
        return cap_wrap_value(c->T, is_finite(c->T, v), out);
    return cap_wrap_value(c->T,
                          is_inf(c->T, v,
                                 strcmp(n, "isposinf") == 0   ? 1
                                 : strcmp(n, "isneginf") == 0 ? -1
                                                              : 0),
                          out);
}

static double finfo(ptc_dtype dt, const char *field)
{
    PyObject *f = PyObject_GetAttrString(cap_T.torch, "finfo");
    PyObject *i = f ? PyObject_CallOneArg_compat(f, cap_dtype_obj(dt)) : NULL;
    PyObject *v = i ? PyObject_GetAttrString(i, field) : NULL;
    double r = v ? PyFloat_AsDouble(v) : 0;
    Py_XDECREF(f);
    Py_XDECREF(i);
    Py_XDECREF(v);
    PyErr_Clear();
    return r;
}

/* nan_to_num(x, nan=0, posinf=max, neginf=lowest). */
int cap_th_nan_to_num(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "nan_to_num needs a tensor");
    cap_trace *T = c->T;
    V v = x->v;
    if (!ptc_dtype_is_float(v->type.dtype)) {
        ptc_arg a[1] = {ptc_arg_value(v)};
        return cap_wrap_value(T, cap_build1(T, PTC_OP_CLONE, a, 1), out);
    }
    double nan, pinf, ninf;
    if (number(c, ARG(1, "nan"), 0.0, &nan) != CAP_NEXT ||
        number(c, ARG(2, "posinf"), finfo(v->type.dtype, "max"), &pinf) != CAP_NEXT ||
        number(c, ARG(3, "neginf"), finfo(v->type.dtype, "min"), &ninf) != CAP_NEXT)
        return CAP_BREAK;
    v = where(T, un(T, PTC_OP_ISNAN, v), ptc_arg_float(nan), ptc_arg_value(v));
    v = where(T, is_inf(T, v, 1), ptc_arg_float(pinf), ptc_arg_value(v));
    v = where(T, is_inf(T, v, -1), ptc_arg_float(ninf), ptc_arg_value(v));
    return cap_wrap_value(T, v, out);
}

/* isclose(a, b, rtol, atol, equal_nan) for floating tensors, as torch:
 * a == b, or |a - b| finite and <= atol + rtol |b|. */
int cap_th_isclose(cap_tcall *c, PyObject **out)
{
    cap_tensor *a = input_of(c, "input");
    PyObject *b = ARG(1, "other");
    double rtol, atol;
    if (!a || !b || !cap_is_tensor(b))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "isclose needs two tensors");
    if (number(c, ARG(2, "rtol"), 1e-5, &rtol) != CAP_NEXT || number(c, ARG(3, "atol"), 1e-8, &atol) != CAP_NEXT)
        return CAP_BREAK;
    cap_trace *T = c->T;
    V av = a->v, bv = cap_val(b);
    if (!ptc_dtype_is_float(av->type.dtype) || !ptc_dtype_is_float(bv->type.dtype))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "isclose on integer tensors");
    V close = bin(T, PTC_OP_EQ, av, bv);
    PyObject *en = ARG(4, "equal_nan");
    if (en && PyObject_IsTrue(en) == 1)
        close = bin(T, PTC_OP_LOGICAL_OR, close,
                    bin(T, PTC_OP_LOGICAL_AND, un(T, PTC_OP_ISNAN, av), un(T, PTC_OP_ISNAN, bv)));
    V diff = un(T, PTC_OP_ABS, bin(T, PTC_OP_SUB, av, bv));
    V allowed = bins(T, PTC_OP_ADD, bins(T, PTC_OP_MUL, un(T, PTC_OP_ABS, bv), rtol), atol);
    V ok = bin(T, PTC_OP_LOGICAL_AND, is_finite(T, diff), bin(T, PTC_OP_LE, diff, allowed));
    return cap_wrap_value(T, bin(T, PTC_OP_LOGICAL_OR, close, ok), out);
}

/* dot(a, b) = sum(a * b) for 1-d tensors. */
int cap_th_dot(cap_tcall *c, PyObject **out)
{
    cap_tensor *a = input_of(c, "input");
    PyObject *b = ARG(1, "tensor") ? ARG(1, "tensor") : ARG(-1, "other");
    if (!a || !b || !cap_is_tensor(b) || a->v->type.ndim != 1 || cap_val(b)->type.ndim != 1)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "dot needs two 1-d tensors");
    if (a->v->type.dtype != cap_val(b)->type.dtype) {
        PyErr_Format(PyExc_RuntimeError, "dot : expected both vectors to have same dtype, but found %s and %s",
                     ptc_dtype_name(a->v->type.dtype), ptc_dtype_name(cap_val(b)->type.dtype));
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "dot with mixed dtypes");
    }
    return cap_wrap_value(
        c->T, reduce(c->T, PTC_OP_SUM, bin(c->T, PTC_OP_MUL, a->v, cap_val(b)), 0, false, true),
        out);
}

/* ---- shapes ----------------------------------------------------------------------------- */

static int norm_dim(int64_t d, int ndim)
{
    return (int)(d < 0 ? d + ndim : d);
}

static V flip_dim(cap_trace *T, V v, int d)
{
    if (!v)
        return NULL;
    ptc_dim n = v->type.shape[d];
    if (n.sym) {
        cap_t_need_static(T, "flip of a dynamic dimension");
        return NULL;
    }
    V idx = arange(T, (double)(n.value - 1), -1, -1, PTC_I64, v->type.device);
    ptc_arg a[3] = {ptc_arg_value(v), ptc_arg_int(d), ptc_arg_value(idx)};
    return idx ? cap_build1(T, PTC_OP_INDEX_SELECT, a, 3) : NULL;
}

/* flip(dims), fliplr, flipud: index_select with reversed aranges. */
int cap_th_flip(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    const char *n = strrchr(c->m->name, '.') + 1;
    int ndim = x->v->type.ndim;
    int64_t dims[PTC_MAX_DIMS];
    int nd = 0;
    if (strcmp(n, "fliplr") == 0 || strcmp(n, "flipud") == 0) {
        if (ndim < (n[4] == 'l' ? 2 : 1)) {
            PyErr_Format(PyExc_RuntimeError, "Input must be >= %d-d.", n[4] == 'l' ? 2 : 1);
            return CAP_ERR;
        }
        dims[nd++] = n[4] == 'l' ? 1 : 0;
    } else {
        ptc_arg da;
        int rc = c->npos > 2 ? cap_int_varargs(c->T, c->pos + 1, c->npos - 1, &da, "flip(dims)")
                             : cap_int_list(c->T, ARG(1, "dims") ? ARG(1, "dims") : Py_None, &da, "flip(dims)");
        if (rc != CAP_NEXT)
            return rc;
        for (int i = 0; i < da.is.n && nd < PTC_MAX_DIMS; i++) {
            if (da.is.d[i].sym)
                return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "flip with symbolic dims");
            dims[nd++] = da.is.d[i].value;
        }
    }
    V v = x->v;
    for (int i = 0; i < nd; i++) {
        int d = norm_dim(dims[i], ndim);
        if (d < 0 || d >= ndim) {
            PyErr_Format(PyExc_IndexError, "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                         -ndim, ndim - 1, (long long)dims[i]);
            return CAP_ERR;
        }
        v = flip_dim(c->T, v, d);
    }
    if (nd == 0 && v) {
        ptc_arg a[1] = {ptc_arg_value(v)};
        v = cap_build1(c->T, PTC_OP_CLONE, a, 1);
    }
    return cap_wrap_value(c->T, v, out);
}

/* repeat_interleave(repeats: int, dim=None): unsqueeze, expand, flatten. */
int cap_th_repeat_interleave(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *r = ARG(1, "repeats"), *dim = ARG(2, "dim");
    if (!x || !r || !PyLong_Check(r))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "repeat_interleave with tensor repeats");
    cap_trace *T = c->T;
    V v = x->v;
    int64_t d = 0;
    if (!dim || dim == Py_None) {
        ptc_arg f[3] = {ptc_arg_value(v), ptc_arg_int(0), ptc_arg_int(-1)};
        v = cap_build1(T, PTC_OP_FLATTEN, f, 3);
    } else if (PyLong_Check(dim)) {
        d = norm_dim(PyLong_AsLongLong(dim), v->type.ndim);
    } else {
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "repeat_interleave with a non-constant dim");
    }
    if (!v || d < 0 || d >= v->type.ndim)
        return v ? cap_t_break(T, CAP_B_TRACE_ERROR, "repeat_interleave: bad dim") : CAP_BREAK;
    ptc_dim shape[PTC_MAX_DIMS + 1];
    int nd = v->type.ndim;
    for (int i = 0, k = 0; i < nd; i++) {
        shape[k++] = v->type.shape[i];
        if (i == d)
            shape[k++] = ptc_dim_c(PyLong_AsLongLong(r));
    }
    V u = unsqueeze(T, v, d + 1);
    ptc_arg e[2] = {ptc_arg_value(u), ptc_arg_dims(T->arena, shape, nd + 1)};
    V ex = u ? cap_build1(T, PTC_OP_EXPAND, e, 2) : NULL;
    ptc_arg f[3] = {ptc_arg_value(ex), ptc_arg_int(d), ptc_arg_int(d + 1)};
    return cap_wrap_value(T, ex ? cap_build1(T, PTC_OP_FLATTEN, f, 3) : NULL, out);
}

/* tile(dims): repeat with dims padded by leading ones. */
int cap_th_tile(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "tile needs a tensor");
    ptc_arg da;
    int rc = c->npos > 2 ? cap_int_varargs(c->T, c->pos + 1, c->npos - 1, &da, "tile(dims)")
                         : cap_int_list(c->T, ARG(1, "dims") ? ARG(1, "dims") : Py_None, &da, "tile(dims)");
    if (rc != CAP_NEXT)
        return rc;
    int ndim = x->v->type.ndim, n = da.is.n > ndim ? da.is.n : ndim;
    ptc_dim reps[PTC_MAX_DIMS];
    if (n > PTC_MAX_DIMS)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "tile to more than %d dims", PTC_MAX_DIMS);
    for (int i = 0; i < n; i++)
        reps[i] = i < n - da.is.n ? ptc_dim_c(1) : da.is.d[i - (n - da.is.n)];
    ptc_arg a[2] = {ptc_arg_value(x->v), ptc_arg_dims(c->T->arena, reps, n)};
    return cap_wrap_value(c->T, cap_build1(c->T, PTC_OP_REPEAT, a, 2), out);
}

/* broadcast_to(x, shape) is expand. */
int cap_th_broadcast_to(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    ptc_arg sz;
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "broadcast_to needs a tensor");
    int rc = cap_int_list(c->T, ARG(1, "size") ? ARG(1, "size") : Py_None, &sz, "broadcast_to(size)");
    if (rc != CAP_NEXT)
        return rc;
    ptc_arg a[2] = {ptc_arg_value(x->v), sz};
    return cap_wrap_value(c->T, cap_build1(c->T, PTC_OP_EXPAND, a, 2), out);
}

/* broadcast_tensors(*tensors): each expanded to the common shape. */
int cap_th_broadcast_tensors(cap_tcall *c, PyObject **out)
{
    cap_trace *T = c->T;
    PyObject *const *ts = c->pos;
    int n = c->npos;
    if (n == 1 && (PyTuple_Check(ts[0]) || PyList_Check(ts[0])))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "broadcast_tensors of a sequence");
    ptc_dim shape[PTC_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < n; i++) {
        if (!cap_is_tensor(ts[i]))
            return cap_t_break(T, CAP_B_TRACE_ERROR, "broadcast_tensors needs tensors");
        const ptc_ttype *t = &cap_val(ts[i])->type;
        if (t->ndim > nd) {
            for (int k = nd - 1; k >= 0; k--)
                shape[k + t->ndim - nd] = shape[k];
            for (int k = 0; k < t->ndim - nd; k++)
                shape[k] = ptc_dim_c(1);
            nd = t->ndim;
        }
        for (int k = 0; k < t->ndim; k++) {
            ptc_dim *s = &shape[nd - t->ndim + k], d = t->shape[k];
            if (s->sym || d.sym) {
                if (!ptc_dim_eq(*s, d) && !(!d.sym && d.value == 1))
                    return cap_t_need_static(T, "broadcast_tensors with dynamic sizes");
                continue;
            }
            if (s->value == 1)
                *s = d;
            else if (d.value != 1 && d.value != s->value) {
                PyErr_Format(PyExc_RuntimeError,
                             "The size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton dimension %d",
                             (long long)s->value, (long long)d.value, k);
                return cap_t_break(T, CAP_B_TRACE_ERROR, "broadcast_tensors: shapes do not broadcast");
            }
        }
    }
    PyObject *r = PyTuple_New(n);
    for (int i = 0; r && i < n; i++) {
        ptc_arg a[2] = {ptc_arg_value(cap_val(ts[i])), ptc_arg_dims(T->arena, shape, nd)};
        V e = cap_build1(T, PTC_OP_EXPAND, a, 2);
        PyObject *t = e ? cap_tensor_new(T, e) : NULL;
        if (!t) {
            Py_DECREF(r);
            return e ? CAP_ERR : CAP_BREAK;
        }
        PyTuple_SetItem(r, i, t);
    }
    *out = r;
    return r ? CAP_NEXT : CAP_ERR;
}

/* diff(x, n=1, dim=-1, prepend=None, append=None). */
int cap_th_diff(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *np = ARG(1, "n"), *dim = ARG(2, "dim"), *pre = ARG(3, "prepend"), *app = ARG(4, "append");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "diff needs a tensor");
    if ((np && !PyLong_Check(np)) || (dim && !PyLong_Check(dim)))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "diff with non-constant n or dim");
    cap_trace *T = c->T;
    V v = x->v;
    int d = norm_dim(dim ? PyLong_AsLongLong(dim) : -1, v->type.ndim);
    if (d < 0 || d >= v->type.ndim)
        return cap_t_break(T, CAP_B_TRACE_ERROR, "diff: bad dim");
    V parts[3];
    int np_ = 0;
    if (pre && pre != Py_None) {
        if (!cap_is_tensor(pre))
            return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "diff with a scalar prepend");
        parts[np_++] = cap_val(pre);
    }
    parts[np_++] = v;
    if (app && app != Py_None) {
        if (!cap_is_tensor(app))
            return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "diff with a scalar append");
        parts[np_++] = cap_val(app);
    }
    if (np_ > 1) {
        ptc_arg a[2] = {ptc_arg_values(T->arena, parts, np_), ptc_arg_int(d)};
        v = cap_build1(T, PTC_OP_CAT, a, 2);
    }
    long long n = np ? PyLong_AsLongLong(np) : 1;
    bool is_bool = v && v->type.dtype == PTC_BOOL;
    for (long long k = 0; k < n && v; k++) {
        ptc_dim len = v->type.shape[d];
        if (!len.sym && len.value == 0)
            break;
        ptc_dim n1 = ptc_dim_sub(T->arena, len, ptc_dim_c(1)); /* a symbolic size is >= 2 */
        ptc_arg hi[4] = {ptc_arg_value(v), ptc_arg_int(d), ptc_arg_int(1), ptc_arg_dim(n1)};
        ptc_arg lo[4] = {ptc_arg_value(v), ptc_arg_int(d), ptc_arg_int(0), ptc_arg_dim(n1)};
        V h = cap_build1(T, PTC_OP_NARROW, hi, 4), l = cap_build1(T, PTC_OP_NARROW, lo, 4);
        v = bin(T, is_bool ? PTC_OP_LOGICAL_XOR : PTC_OP_SUB, h, l);
    }
    return cap_wrap_value(T, v, out);
}

/* ---- resampling ------------------------------------------------------------------------ */

/* A constant tensor made now (indices, weights): a graph constant. */
static V const_tensor(cap_trace *T, PyObject *list, ptc_dtype dt, ptc_device dev)
{
    PyObject *kw = Py_BuildValue("{s:O,s:N}", "dtype", cap_dtype_obj(dt), "device", cap_device_obj(dev));
    PyObject *args = kw ? PyTuple_Pack(1, list) : NULL;
    PyObject *real = args ? PyObject_Call(cap_T.tensor_fn, args, kw) : NULL;
    PyObject *t = real ? cap_tensor_const(T, real) : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(args);
    Py_XDECREF(real);
    V v = t ? cap_val(t) : NULL;
    Py_XDECREF(t); /* the value lives in the graph */
    return v;
}

/* Reshapes a [n] tensor so that it broadcasts along dim d of an ndim tensor. */
static V along(cap_trace *T, V w, int d, int ndim)
{
    int64_t shape[PTC_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        shape[i] = 1;
    shape[d] = -1;
    ptc_arg a[2] = {ptc_arg_value(w), ptc_arg_ints(T->arena, shape, ndim)};
    return w ? cap_build1(T, PTC_OP_RESHAPE, a, 2) : NULL;
}

/* One spatial dim of nearest / nearest-exact / linear resampling, with the
 * index (and weight) arithmetic of torch's CPU kernels (UpSample.h), in
 * float for float inputs and double for double. */
static V resample_dim(cap_trace *T, V x, int d, int64_t in, int64_t outn, double scale_arg, int mode,
                      bool align)
{
    bool dbl = x->type.dtype == PTC_F64;
    PyObject *i0 = PyList_New(outn), *i1 = PyList_New(outn), *w0 = PyList_New(outn), *w1 = PyList_New(outn);
    for (int64_t o = 0; i0 && i1 && w0 && w1 && o < outn; o++) {
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
            PyList_SetItem(i0, o, PyLong_FromLongLong(src));
            continue;
        }
        double sc, pos;
        if (align)
            sc = outn > 1 ? (dbl ? (double)(in - 1) / (double)(outn - 1) : (double)((float)(in - 1) / (float)(outn - 1))) : 0;
        else
            sc = scale_arg > 0 ? (dbl ? 1.0 / scale_arg : (double)(float)(1.0 / scale_arg))
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
        PyList_SetItem(i0, o, PyLong_FromLongLong(idx));
        PyList_SetItem(i1, o, PyLong_FromLongLong(idx + (idx < in - 1 ? 1 : 0)));
        PyList_SetItem(w0, o, PyFloat_FromDouble(dbl ? 1.0 - lam : (double)(1.0f - (float)lam)));
        PyList_SetItem(w1, o, PyFloat_FromDouble(lam));
    }
    V r = NULL;
    if (i0 && i1 && w0 && w1 && !PyErr_Occurred()) {
        ptc_device dev = x->type.device;
        V a = const_tensor(T, i0, PTC_I64, dev);
        ptc_arg s0[3] = {ptc_arg_value(x), ptc_arg_int(d), ptc_arg_value(a)};
        V x0 = a ? cap_build1(T, PTC_OP_INDEX_SELECT, s0, 3) : NULL;
        if (mode != 2) {
            r = x0;
        } else {
            V b = const_tensor(T, i1, PTC_I64, dev);
            ptc_arg s1[3] = {ptc_arg_value(x), ptc_arg_int(d), ptc_arg_value(b)};
            V x1 = b ? cap_build1(T, PTC_OP_INDEX_SELECT, s1, 3) : NULL;
            V l0 = along(T, const_tensor(T, w0, x->type.dtype, dev), d, x->type.ndim);
            V l1 = along(T, const_tensor(T, w1, x->type.dtype, dev), d, x->type.ndim);
            r = bin(T, PTC_OP_ADD, bin(T, PTC_OP_MUL, x0, l0), bin(T, PTC_OP_MUL, x1, l1));
        }
    }
    Py_XDECREF(i0);
    Py_XDECREF(i1);
    Py_XDECREF(w0);
    Py_XDECREF(w1);
    return r;
}

/* F.interpolate / F.upsample: nearest, nearest-exact and (bi/tri)linear as
 * index_select with constant indices (and constant weights), one spatial
 * dim at a time from the last, as torch's kernels nest them. */
int cap_th_interpolate(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    cap_trace *T = c->T;
    if (!x)
        return cap_t_break(T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    PyObject *size = ARG(1, "size"), *sf = ARG(2, "scale_factor"), *mo = ARG(3, "mode"),
             *ac = ARG(4, "align_corners"), *rsf = ARG(5, "recompute_scale_factor"), *aa = ARG(6, "antialias");
    const char *mode = mo && PyUnicode_Check(mo) ? PyUnicode_AsUTF8(mo) : "nearest";
    int m = strcmp(mode, "nearest") == 0 ? 0 : strcmp(mode, "nearest-exact") == 0 ? 1
          : (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0 || strcmp(mode, "trilinear") == 0) ? 2 : -1;
    if (m < 0 || (aa && PyObject_IsTrue(aa) == 1))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "interpolate(mode='%s'%s)", mode,
                           aa && PyObject_IsTrue(aa) == 1 ? ", antialias=True" : "");
    const ptc_ttype *tt = &x->v->type;
    int nsp = tt->ndim - 2;
    if (nsp < 1 || nsp > 3 || (m == 2 && nsp != (mode[0] == 'l' ? 1 : mode[0] == 'b' ? 2 : 3)))
        return cap_t_break(T, CAP_B_TRACE_ERROR, "interpolate: %s on a %d-d input", mode, tt->ndim);
    if (m == 2 && !ptc_dtype_is_float(tt->dtype))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "linear interpolation of an integer tensor");
    for (int d = 0; d < tt->ndim; d++)
        if (tt->shape[d].sym)
            return cap_t_need_static(T, "interpolate with dynamic sizes");
    bool align = ac && PyObject_IsTrue(ac) == 1;
    int64_t outs[3];
    double scales[3] = {-1, -1, -1};
    if (size && size != Py_None) {
        for (int i = 0; i < nsp; i++) {
            PyObject *s = PyLong_Check(size) ? Py_NewRef(size) : PySequence_GetItem(size, i);
            if (!s || !PyLong_Check(s)) {
                Py_XDECREF(s);
                PyErr_Clear();
                return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "interpolate with a non-constant size");
            }
            outs[i] = PyLong_AsLongLong(s);
            Py_DECREF(s);
        }
    } else if (sf && sf != Py_None) {
        for (int i = 0; i < nsp; i++) {
            PyObject *s = PyNumber_Check(sf) && !PySequence_Check(sf) ? Py_NewRef(sf) : PySequence_GetItem(sf, i);
            if (!s || !(PyFloat_Check(s) || PyLong_Check(s))) {
                Py_XDECREF(s);
                PyErr_Clear();
                return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "interpolate with a non-constant scale_factor");
            }
            double f = PyFloat_AsDouble(s);
            Py_DECREF(s);
            outs[i] = (int64_t)floor((double)tt->shape[2 + i].value * f);
            if (!(rsf && PyObject_IsTrue(rsf) == 1))
                scales[i] = f;
        }
    } else {
        PyErr_SetString(PyExc_ValueError, "either size or scale_factor should be defined");
        return CAP_ERR;
    }
    V v = x->v;
    for (int i = nsp - 1; i >= 0 && v; i--)
        v = resample_dim(T, v, 2 + i, tt->shape[2 + i].value, outs[i], scales[i], m, align);
    return cap_wrap_value(T, v, out);
}

/* hstack / vstack: cat after making tensors at least 1-d / 2-d. */
int cap_th_stack_dims(cap_tcall *c, PyObject **out)
{
    PyObject *seq = ARG(0, "tensors");
    cap_trace *T = c->T;
    bool v = strstr(c->m->name, "vstack") != NULL || strstr(c->m->name, "row_stack") != NULL;
    PyObject *items = seq ? PySequence_Tuple(seq) : NULL;
    if (!items) {
        PyErr_Clear();
        return cap_t_break(T, CAP_B_TRACE_ERROR, "%s needs a sequence of tensors", c->m->name);
    }
    Py_ssize_t n = PyTuple_Size(items);
    V parts[64];
    int dim = 0;
    for (Py_ssize_t i = 0; i < n && i < 64; i++) {
        PyObject *t = PyTuple_GetItem(items, i);
        if (!cap_is_tensor(t)) {
            Py_DECREF(items);
            return cap_t_break(T, CAP_B_TRACE_ERROR, "%s needs tensors", c->m->name);
        }
        V p = cap_val(t);
        if (p->type.ndim == 0)
            p = unsqueeze(T, p, 0);
        if (v && p && p->type.ndim == 1)
            p = unsqueeze(T, p, 0);
        parts[i] = p;
        if (!v && i == 0 && p)
            dim = p->type.ndim == 1 ? 0 : 1;
    }
    Py_DECREF(items);
    if (n > 64)
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s of more than 64 tensors", c->m->name);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!parts[i])
            return CAP_BREAK;
    ptc_arg a[2] = {ptc_arg_values(T->arena, parts, (int)n), ptc_arg_int(dim)};
    return cap_wrap_value(T, cap_build1(T, PTC_OP_CAT, a, 2), out);
}

/* ---- the multi-head attention fast path --------------------------------------------- */

static V reshape_to(cap_trace *T, V v, const int64_t *shape, int n)
{
    if (!v)
        return NULL;
    ptc_arg a[2] = {ptc_arg_value(v), ptc_arg_ints(T->arena, shape, n)};
    return cap_build1(T, PTC_OP_RESHAPE, a, 2);
}

static V transpose(cap_trace *T, V v, int d0, int d1)
{
    if (!v)
        return NULL;
    ptc_arg a[3] = {ptc_arg_value(v), ptc_arg_int(d0), ptc_arg_int(d1)};
    return cap_build1(T, PTC_OP_TRANSPOSE, a, 3);
}

static V narrow(cap_trace *T, V v, int dim, int64_t start, int64_t len)
{
    if (!v)
        return NULL;
    ptc_arg a[4] = {ptc_arg_value(v), ptc_arg_int(dim), ptc_arg_int(start), ptc_arg_int(len)};
    return cap_build1(T, PTC_OP_NARROW, a, 4);
}

static V linear(cap_trace *T, V x, V w, V b)
{
    if (!x || !w)
        return NULL;
    ptc_arg a[3] = {ptc_arg_value(x), ptc_arg_value(w), b ? ptc_arg_value(b) : ptc_arg_none()};
    return cap_build1(T, PTC_OP_LINEAR, a, 3);
}

/* [B, N, E] -> [B, H, N, D] */
static V heads(cap_trace *T, V x, int64_t b, int64_t n, int64_t h, int64_t d)
{
    int64_t shape[4] = {b, n, h, d};
    return transpose(T, reshape_to(T, x, shape, 4), 1, 2);
}

/* torch._native_multi_head_attention (nn.MultiheadAttention's inference fast
 * path in torch 1.13+): projections, q scaled by 1/sqrt(head dim), masked
 * softmax of q k^T, weights times v, the output projection; the weights
 * averaged over heads when asked for. As ATen computes it. */
int cap_th_native_mha(cap_tcall *c, PyObject **out)
{
    cap_trace *T = c->T;
    PyObject *q = ARG(0, "query"), *k = ARG(1, "key"), *v = ARG(2, "value"), *nh = ARG(4, "num_head");
    PyObject *w = ARG(5, "qkv_weight"), *bias = ARG(6, "qkv_bias"), *pw = ARG(7, "proj_weight"),
             *pb = ARG(8, "proj_bias"), *mask = ARG(9, "mask"), *need = ARG(10, "need_weights"),
             *avg = ARG(11, "average_attn_weights"), *mtype = ARG(12, "mask_type");
    if (!q || !k || !v || !cap_is_tensor(q) || !cap_is_tensor(k) || !cap_is_tensor(v) || !w || !cap_is_tensor(w) ||
        !pw || !cap_is_tensor(pw) || !nh || !PyLong_Check(nh))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "_native_multi_head_attention with these arguments");
    const ptc_ttype *qt = &cap_val(q)->type, *kt = &cap_val(k)->type;
    if (qt->ndim != 3 || kt->ndim != 3)
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "_native_multi_head_attention on %d-d inputs", qt->ndim);
    for (int i = 0; i < 3; i++)
        if (qt->shape[i].sym || kt->shape[i].sym)
            return cap_t_need_static(T, "_native_multi_head_attention with dynamic sizes");
    const ptc_ttype *vt = &cap_val(v)->type;
    for (int i = 0; i < 3; i++)
        if (qt->shape[i].value != kt->shape[i].value || kt->shape[i].value != vt->shape[i].value)
            return cap_t_break(T, CAP_B_TRACE_ERROR, "_native_multi_head_attention: query/key/value shapes differ");
    int64_t B = qt->shape[0].value, L = qt->shape[1].value, E = qt->shape[2].value, S = kt->shape[1].value;
    int64_t H = PyLong_AsLongLong(nh), D = H > 0 ? E / H : 0;
    if (H <= 0 || D * H != E)
        return cap_t_break(T, CAP_B_TRACE_ERROR, "embed_dim %lld not divisible by num_head %lld", (long long)E,
                           (long long)H);
    V W = cap_val(w), Bv = bias && cap_is_tensor(bias) ? cap_val(bias) : NULL;
    V qp, kp, vp;
    if (q == k && k == v) {
        V qkv = linear(T, cap_val(q), W, Bv);
        qp = narrow(T, qkv, 2, 0, E), kp = narrow(T, qkv, 2, E, E), vp = narrow(T, qkv, 2, 2 * E, E);
    } else {
        qp = linear(T, cap_val(q), narrow(T, W, 0, 0, E), Bv ? narrow(T, Bv, 0, 0, E) : NULL);
        kp = linear(T, cap_val(k), narrow(T, W, 0, E, E), Bv ? narrow(T, Bv, 0, E, E) : NULL);
        vp = linear(T, cap_val(v), narrow(T, W, 0, 2 * E, E), Bv ? narrow(T, Bv, 0, 2 * E, E) : NULL);
    }
    V qh = bins(T, PTC_OP_DIV, heads(T, qp, B, L, H, D), sqrt((double)D));
    V kh = heads(T, kp, B, S, H, D), vh = heads(T, vp, B, S, H, D);
    ptc_arg mm[2] = {ptc_arg_value(qh), ptc_arg_value(transpose(T, kh, 2, 3))};
    V scores = qh && mm[1].v ? cap_build1(T, PTC_OP_MATMUL, mm, 2) : NULL; /* [B, H, L, S] */
    if (mask && mask != Py_None) {
        if (!cap_is_tensor(mask))
            return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "_native_multi_head_attention with a non-tensor mask");
        V m = cap_val(mask);
        long mt = mtype && PyLong_Check(mtype) ? PyLong_AsLong(mtype) : (m->type.ndim == 2 && m->type.shape[0].value == B ? 1 : 0);
        if (mt == 1) { /* key padding [B, S] -> [B, 1, 1, S] */
            int64_t shape[4] = {B, 1, 1, S};
            m = reshape_to(T, m, shape, 4);
        }
        if (m && m->type.dtype != PTC_BOOL)
            return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "_native_multi_head_attention with a float mask");
        ptc_arg mf[3] = {ptc_arg_value(scores), ptc_arg_value(m), ptc_arg_float(-INFINITY)};
        scores = scores && m ? cap_build1(T, PTC_OP_MASKED_FILL, mf, 3) : NULL;
    }
    ptc_arg sm[3] = {ptc_arg_value(scores), ptc_arg_int(-1), ptc_arg_none()};
    V attn = scores ? cap_build1(T, PTC_OP_SOFTMAX, sm, 3) : NULL;
    ptc_arg av[2] = {ptc_arg_value(attn), ptc_arg_value(vh)};
    V ctx = attn && vh ? cap_build1(T, PTC_OP_MATMUL, av, 2) : NULL; /* [B, H, L, D] */
    int64_t merged[3] = {B, L, E};
    V o = linear(T, reshape_to(T, transpose(T, ctx, 1, 2), merged, 3), cap_val(pw),
                 pb && cap_is_tensor(pb) ? cap_val(pb) : NULL);
    if (!o)
        return CAP_BREAK;
    PyObject *weights = NULL;
    if (need && PyObject_IsTrue(need) == 1) {
        V wts = attn;
        if (!avg || PyObject_IsTrue(avg) == 1)
            wts = bins(T, PTC_OP_DIV, reduce(T, PTC_OP_SUM, attn, 1, false, false), (double)H);
        if (cap_wrap_value(T, wts, &weights) != CAP_NEXT)
            return CAP_BREAK;
    }
    PyObject *ot = NULL;
    if (cap_wrap_value(T, o, &ot) != CAP_NEXT) {
        Py_XDECREF(weights);
        return CAP_BREAK;
    }
    *out = PyTuple_Pack(2, ot, weights ? weights : Py_None);
    Py_DECREF(ot);
    Py_XDECREF(weights);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* ---- losses ----------------------------------------------------------------------------- */

/* reduction=: 0 none, 1 mean, 2 sum; legacy size_average/reduce break. */
static int reduction_of(cap_tcall *c, int red_index, int *red)
{
    PyObject *sa = ARG(-1, "size_average"), *rd = ARG(-1, "reduce"), *r = ARG(red_index, "reduction");
    if ((sa && sa != Py_None) || (rd && rd != Py_None))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with legacy size_average/reduce", c->m->name);
    const char *s = r && PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : "mean";
    *red = strcmp(s, "none") == 0 ? 0 : strcmp(s, "mean") == 0 ? 1 : strcmp(s, "sum") == 0 ? 2 : -1;
    if (*red < 0) {
        PyErr_Format(PyExc_ValueError, "%s is not a valid value for reduction", s);
        return CAP_ERR;
    }
    return CAP_NEXT;
}

static int reduced(cap_trace *T, V loss, int red, PyObject **out)
{
    if (red == 1)
        loss = reduce(T, PTC_OP_MEAN, loss, 0, false, true);
    else if (red == 2)
        loss = reduce(T, PTC_OP_SUM, loss, 0, false, true);
    return cap_wrap_value(T, loss, out);
}

/* Two tensors (input, target) of floating dtype. */
static int pair(cap_tcall *c, V *in, V *tg)
{
    PyObject *a = ARG(0, "input"), *b = ARG(1, "target");
    if (!a || !b || !cap_is_tensor(a) || !cap_is_tensor(b))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs input and target tensors", c->m->name);
    *in = cap_val(a);
    *tg = cap_val(b);
    return CAP_NEXT;
}

/* mse_loss, l1_loss, smooth_l1_loss(beta), huber_loss(delta). */
int cap_th_pointwise_loss(cap_tcall *c, PyObject **out)
{
    V in, tg;
    int red, rc;
    const char *n = strrchr(c->m->name, '.') + 1;
    bool smooth = strcmp(n, "smooth_l1_loss") == 0, huber = strcmp(n, "huber_loss") == 0;
    if ((rc = pair(c, &in, &tg)) != CAP_NEXT || (rc = reduction_of(c, huber ? 2 : 4, &red)) != CAP_NEXT)
        return rc;
    PyObject *w = ARG(-1, "weight");
    if (w && w != Py_None)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with weight", c->m->name);
    cap_trace *T = c->T;
    V d = bin(T, PTC_OP_SUB, in, tg), loss;
    if (strcmp(n, "mse_loss") == 0) {
        loss = bin(T, PTC_OP_MUL, d, d);
    } else {
        V a = un(T, PTC_OP_ABS, d);
        double k;
        if (number(c, huber ? ARG(3, "delta") : ARG(5, "beta"), 1.0, &k) != CAP_NEXT)
            return CAP_BREAK;
        if (strcmp(n, "l1_loss") == 0 || (smooth && k == 0)) {
            loss = a;
        } else {
            V sq = bins(T, PTC_OP_MUL, bin(T, PTC_OP_MUL, a, a), smooth ? 0.5 / k : 0.5);
            V lin = smooth ? bins(T, PTC_OP_SUB, a, 0.5 * k) : bins(T, PTC_OP_MUL, bins(T, PTC_OP_SUB, a, 0.5 * k), k);
            loss = where(T, bins(T, PTC_OP_LT, a, k), ptc_arg_value(sq), ptc_arg_value(lin));
        }
    }
    return reduced(T, loss, red, out);
}

/* binary_cross_entropy(_with_logits)(input, target, weight, ..., pos_weight). */
int cap_th_bce(cap_tcall *c, PyObject **out)
{
    V x, y;
    int red, rc;
    bool logits = strstr(c->m->name, "with_logits") != NULL;
    if ((rc = pair(c, &x, &y)) != CAP_NEXT || (rc = reduction_of(c, 5, &red)) != CAP_NEXT)
        return rc;
    cap_trace *T = c->T;
    PyObject *w = ARG(2, "weight"), *pw = logits ? ARG(6, "pos_weight") : NULL;
    V loss;
    if (logits) {
        /* (1 - y) x + lw (log1p(exp(-|x|)) + max(-x, 0)), lw = 1 + (pw - 1) y */
        ptc_arg cl[3] = {ptc_arg_value(un(T, PTC_OP_NEG, x)), ptc_arg_float(0.0), ptc_arg_none()};
        V relu_neg = cl[0].v ? cap_build1(T, PTC_OP_CLAMP, cl, 3) : NULL;
        V sp = bin(T, PTC_OP_ADD, un(T, PTC_OP_LOG1P, un(T, PTC_OP_EXP, un(T, PTC_OP_NEG, un(T, PTC_OP_ABS, x)))),
                   relu_neg);
        if (pw && pw != Py_None) {
            if (!cap_is_tensor(pw))
                return cap_t_break(T, CAP_B_TRACE_ERROR, "pos_weight must be a tensor");
            V lw = bins(T, PTC_OP_ADD, bin(T, PTC_OP_MUL, bins(T, PTC_OP_SUB, cap_val(pw), 1.0), y), 1.0);
            sp = bin(T, PTC_OP_MUL, lw, sp);
        }
        loss = bin(T, PTC_OP_ADD, bin(T, PTC_OP_MUL, rsubs(T, 1.0, y), x), sp);
    } else {
        /* -(y log(x) + (1 - y) log(1 - x)), logs clamped at -100 */
        ptc_arg l1[3] = {ptc_arg_value(un(T, PTC_OP_LOG, x)), ptc_arg_float(-100.0), ptc_arg_none()};
        ptc_arg l2[3] = {ptc_arg_value(un(T, PTC_OP_LOG, rsubs(T, 1.0, x))), ptc_arg_float(-100.0), ptc_arg_none()};
        V lx = l1[0].v ? cap_build1(T, PTC_OP_CLAMP, l1, 3) : NULL,
          l1x = l2[0].v ? cap_build1(T, PTC_OP_CLAMP, l2, 3) : NULL;
        loss = un(T, PTC_OP_NEG, bin(T, PTC_OP_ADD, bin(T, PTC_OP_MUL, y, lx), bin(T, PTC_OP_MUL, rsubs(T, 1.0, y), l1x)));
    }
    if (w && w != Py_None) {
        if (!cap_is_tensor(w))
            return cap_t_break(T, CAP_B_TRACE_ERROR, "weight must be a tensor");
        loss = bin(T, PTC_OP_MUL, loss, cap_val(w));
    }
    return reduced(T, loss, red, out);
}

/* nll_loss on log-probabilities logp [N, C, ...] (or [C]) and class
 * targets: -logp[target] weighted, ignore_index masked; mean divides by the
 * total weight of the targets that count. */
static int nll(cap_trace *T, V logp, V target, V weight, int64_t ignore, int red, PyObject **out)
{
    if (!logp || !target)
        return CAP_BREAK;
    bool flat = logp->type.ndim == 1;
    if (flat) {
        logp = unsqueeze(T, logp, 0);
        target = unsqueeze(T, target, 0);
    }
    if (!logp || !target)
        return CAP_BREAK;
    V keep = bins(T, PTC_OP_NE, target, (double)ignore);
    V safe = where(T, keep, ptc_arg_value(target), ptc_arg_int(0));
    ptc_arg g[3] = {ptc_arg_value(logp), ptc_arg_int(1), ptc_arg_value(unsqueeze(T, safe, 1))};
    V picked = g[2].v ? cap_build1(T, PTC_OP_GATHER, g, 3) : NULL;
    ptc_arg sq[2] = {ptc_arg_value(picked), ptc_arg_ints(T->arena, (int64_t[]){1}, 1)};
    picked = picked ? cap_build1(T, PTC_OP_SQUEEZE, sq, 2) : NULL;
    V w = to_dtype(T, keep, logp->type.dtype);
    if (weight) {
        /* weight[target]: an embedding lookup in a [C, 1] table. */
        V table = unsqueeze(T, weight, 1);
        ptc_arg e[2] = {ptc_arg_value(table), ptc_arg_value(safe)};
        V ws = table && safe ? cap_build1(T, PTC_OP_EMBEDDING, e, 2) : NULL;
        ptc_arg sq1[2] = {ptc_arg_value(ws), ptc_arg_ints(T->arena, (int64_t[]){-1}, 1)};
        ws = ws ? cap_build1(T, PTC_OP_SQUEEZE, sq1, 2) : NULL;
        w = bin(T, PTC_OP_MUL, w, ws);
    }
    V loss = un(T, PTC_OP_NEG, bin(T, PTC_OP_MUL, picked, w));
    if (red == 0 && flat) {
        ptc_arg s0[2] = {ptc_arg_value(loss), ptc_arg_ints(T->arena, (int64_t[]){0}, 1)};
        loss = loss ? cap_build1(T, PTC_OP_SQUEEZE, s0, 2) : NULL;
    }
    if (red == 1)
        loss = bin(T, PTC_OP_DIV, reduce(T, PTC_OP_SUM, loss, 0, false, true), reduce(T, PTC_OP_SUM, w, 0, false, true));
    else if (red == 2)
        loss = reduce(T, PTC_OP_SUM, loss, 0, false, true);
    return cap_wrap_value(T, loss, out);
}

static int class_args(cap_tcall *c, V *weight, int64_t *ignore)
{
    PyObject *w = ARG(2, "weight"), *ig = ARG(4, "ignore_index");
    *weight = NULL;
    *ignore = -100;
    if (w && w != Py_None) {
        if (!cap_is_tensor(w))
            return cap_t_break(c->T, CAP_B_TRACE_ERROR, "weight must be a tensor");
        *weight = cap_val(w);
    }
    if (ig && ig != Py_None) {
        if (!PyLong_Check(ig))
            return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "ignore_index that is not an int");
        *ignore = PyLong_AsLongLong(ig);
    }
    return CAP_NEXT;
}

int cap_th_nll_loss(cap_tcall *c, PyObject **out)
{
    V in = NULL, tg = NULL, w = NULL; /* set by pair() and class_args() when they return CAP_NEXT */
    int64_t ignore;
    int red, rc;
    if ((rc = pair(c, &in, &tg)) != CAP_NEXT || (rc = reduction_of(c, 6, &red)) != CAP_NEXT ||
        (rc = class_args(c, &w, &ignore)) != CAP_NEXT)
        return rc;
    if (ptc_dtype_is_float(tg->type.dtype))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "nll_loss needs integer targets");
    return nll(c->T, in, tg, w, ignore, red, out);
}

/* cross_entropy = nll_loss(log_softmax(input, 1)) for class targets, or
 * -sum(target * log_softmax) over classes for probability targets. */
int cap_th_cross_entropy(cap_tcall *c, PyObject **out)
{
    V in = NULL, tg = NULL, w = NULL; /* set by pair() and class_args() when they return CAP_NEXT */
    int64_t ignore;
    int red, rc;
    double ls;
    if ((rc = pair(c, &in, &tg)) != CAP_NEXT || (rc = reduction_of(c, 6, &red)) != CAP_NEXT ||
        (rc = class_args(c, &w, &ignore)) != CAP_NEXT || number(c, ARG(7, "label_smoothing"), 0.0, &ls) != CAP_NEXT)
        return CAP_BREAK;
    if (ls != 0.0)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "cross_entropy with label_smoothing");
    cap_trace *T = c->T;
    int cdim = in->type.ndim == 1 ? 0 : 1;
    ptc_arg a[3] = {ptc_arg_value(in), ptc_arg_int(cdim), ptc_arg_none()};
    V logp = cap_build1(T, PTC_OP_LOG_SOFTMAX, a, 3);
    if (!ptc_dtype_is_float(tg->type.dtype))
        return nll(T, logp, tg, w, ignore, red, out);
    /* probabilities */
    V prod = bin(T, PTC_OP_MUL, logp, tg);
    if (w) {
        V wb = w;
        for (int d = cdim + 1; d < in->type.ndim && wb; d++)
            wb = unsqueeze(T, wb, -1);
        prod = bin(T, PTC_OP_MUL, prod, wb);
    }
    V loss = un(T, PTC_OP_NEG, reduce(T, PTC_OP_SUM, prod, cdim, false, false));
    if (red == 1) {
        ptc_dim nc = in->type.shape[cdim];
        int64_t n = 1;
        for (int d = 0; d < in->type.ndim; d++) {
            if (in->type.shape[d].sym)
                return cap_t_need_static(T, "cross_entropy mean over dynamic sizes");
            n *= in->type.shape[d].value;
        }
        return cap_wrap_value(T,
                              bins(T, PTC_OP_DIV, reduce(T, PTC_OP_SUM, loss, 0, false, true),
                                   (double)(n / nc.value)),
                              out);
    }
    return reduced(T, loss, red, out);
}
