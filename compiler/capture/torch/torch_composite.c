/* Torch functions with no op of their own (eye, hypot, lerp, flip, diff,
 * interpolate, the nn.functional losses, ...): their Python arguments read
 * and checked here, their graphs built by the composites of compiler/passes
 * (composite.c), which build into the trace (cap_composer, torch_compose.c).
 * Arguments outside what is written there (legacy size_average/reduce, label
 * smoothing, ...) stay graph breaks with the reason named.
 */
#include "capture/torch/torch.h"

#include <math.h>
#include <string.h>

#define ARG(i, name) cap_targ(c, i, name)

typedef ptc_value *V;

static ptc_composer *composer(cap_tcall *c)
{
    return cap_composer(c->T);
}

/* ---- reading arguments ------------------------------------------------------------------ */

static cap_tensor *input_of(cap_tcall *c, const char *name)
{
    PyObject *v = ARG(0, name);
    if (!v)
        v = ARG(-1, "self");
    return v && cap_is_tensor(v) ? (cap_tensor *)v : NULL;
}

/* The tensor value of an optional argument (NULL for None or absent); a
 * value that is not a tensor breaks with what it must be. */
static int optional_tensor(cap_tcall *c, PyObject *v, const char *what, V *out)
{
    *out = NULL;
    if (!v || v == Py_None)
        return CAP_NEXT;
    if (!cap_is_tensor(v))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s must be a tensor", what);
    *out = cap_val(v);
    return CAP_NEXT;
}

static int number(cap_tcall *c, PyObject *v, double dflt, double *out)
{
    *out = dflt;
    if (!v || v == Py_None)
        return CAP_NEXT;
    if (!PyLong_Check(v) && !PyFloat_Check(v))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with a non-constant %s argument",
                           c->m->name, cap_tpname(Py_TYPE(v)));
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

/* The function's own name: "fliplr" of "torch.fliplr". */
static const char *short_name(cap_tcall *c)
{
    return strrchr(c->m->name, '.') + 1;
}

/* ---- factories ------------------------------------------------------------------------ */

/* eye(n, m=None) */
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
    return cap_wrap_value(c->T, ptc_composite_eye(composer(c), rows, cols, dt, dev), out);
}

/* linspace(start, end, steps) */
int cap_th_linspace(cap_tcall *c, PyObject **out)
{
    double start, end;
    PyObject *steps = ARG(2, "steps");
    if (ARG(-1, "out") || ARG(-1, "requires_grad") == Py_True)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "linspace(out=/requires_grad=)");
    if (number(c, ARG(0, "start"), 0, &start) != CAP_NEXT ||
        number(c, ARG(1, "end"), 0, &end) != CAP_NEXT)
        return CAP_BREAK;
    if (!steps || !PyLong_Check(steps) || PyLong_AsLongLong(steps) < 1)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "linspace with steps that is not a positive int");
    int rc1, rc2;
    ptc_dtype dt = dtype_arg(c, cap_default_dtype(), &rc1);
    ptc_device dev = device_arg(c, &rc2);
    if (rc1 != CAP_NEXT || rc2 != CAP_NEXT)
        return CAP_BREAK;
    if (!ptc_dtype_is_float(dt))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "linspace with an integer dtype");
    V v = ptc_composite_linspace(composer(c), start, end, PyLong_AsLongLong(steps), dt, dev);
    return cap_wrap_value(c->T, v, out);
}

/* ---- pointwise ------------------------------------------------------------------------ */

int cap_th_hypot(cap_tcall *c, PyObject **out)
{
    cap_tensor *a = input_of(c, "input");
    PyObject *b = ARG(1, "other");
    if (!a || !b || !cap_is_tensor(b))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "hypot needs two tensors");
    if (!ptc_dtype_is_float(a->v->type.dtype) || !ptc_dtype_is_float(cap_val(b)->type.dtype))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "hypot of a %s tensor (eager raises)",
                           ptc_dtype_name(ptc_dtype_is_float(a->v->type.dtype)
                                              ? cap_val(b)->type.dtype
                                              : a->v->type.dtype));
    return cap_wrap_value(c->T, ptc_composite_hypot(composer(c), a->v, cap_val(b)), out);
}

/* lerp(start, end, weight): weight a tensor or a number. */
int cap_th_lerp(cap_tcall *c, PyObject **out)
{
    cap_tensor *s = input_of(c, "input");
    PyObject *e = ARG(1, "end"), *w = ARG(2, "weight");
    if (!s || !e || !cap_is_tensor(e) || !w)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "lerp needs start, end and weight");
    ptc_dtype dt = s->v->type.dtype;
    if (!ptc_dtype_is_float(dt) || cap_val(e)->type.dtype != dt ||
        (cap_is_tensor(w) && cap_val(w)->type.dtype != dt))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR,
                           "lerp of %s tensors or of mixed dtypes (eager raises)",
                           ptc_dtype_name(dt));
    if (cap_is_tensor(w))
        return cap_wrap_value(c->T, ptc_composite_lerp(composer(c), s->v, cap_val(e), cap_val(w)),
                              out);
    double wv;
    if (number(c, w, 0, &wv) != CAP_NEXT)
        return CAP_BREAK;
    return cap_wrap_value(c->T, ptc_composite_lerp_scalar(composer(c), s->v, cap_val(e), wv), out);
}

/* addcmul of integer tensors: input + value * t1 * t2 in their dtype, the
 * value cast to an integer as eager casts it (0.5 counts 0). */
static int int_addcmul(cap_tcall *c, ptc_value *x, ptc_value *t1, ptc_value *t2, int64_t value,
                       PyObject **out)
{
    ptc_arg m[2] = {ptc_arg_value(t1), ptc_arg_value(t2)};
    ptc_value *p = cap_build1(c->T, PTC_OP_MUL, m, 2);
    ptc_arg s[2] = {ptc_arg_value(p), ptc_arg_int(value)};
    p = p && value != 1 ? cap_build1(c->T, PTC_OP_MUL, s, 2) : p;
    if (!p)
        return CAP_BREAK;
    ptc_arg sum[2] = {ptc_arg_value(x), ptc_arg_value(p)};
    return cap_build(c->T, PTC_OP_ADD, sum, 2, out);
}

/* addcmul / addcdiv(input, tensor1, tensor2, value): value a number or a
 * 0-dim tensor. */
int cap_th_addcop(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *t1 = ARG(1, "tensor1"), *t2 = ARG(2, "tensor2");
    double value = 1.0;
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
    const ptc_arg a[3] = {ptc_arg_value(x->v), ptc_arg_value(cap_val(t1)), ptc_arg_value(cap_val(t2))};
    const ptc_arg *three[3] = {&a[0], &a[1], &a[2]};
    ptc_dtype dt = ptc_result_type(three, 3);
    if (!ptc_dtype_is_float(dt)) {
        if (div || dt == PTC_BOOL || scalar_tensor)
            return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s of %s tensors", c->m->name,
                               ptc_dtype_name(dt));
        return int_addcmul(c, x->v, cap_val(t1), cap_val(t2), (int64_t)value, out);
    }
    V v = ptc_composite_addcop(composer(c), x->v, cap_val(t1), cap_val(t2), div,
                               scalar_tensor ? cap_val(tvalue) : NULL, value);
    return cap_wrap_value(c->T, v, out);
}

/* exp2, log2, log10 and their in-place forms. */
int cap_th_explog(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    const char *n = short_name(c);
    if (strncmp(n, "exp2", 4) == 0)
        return cap_wrap_value(c->T, ptc_composite_exp2(composer(c), x->v, cap_default_dtype()),
                              out);
    double base = strncmp(n, "log2", 4) == 0 ? 2.0 : 10.0;
    return cap_wrap_value(
        c->T, ptc_composite_log_base(composer(c), x->v, base, cap_default_dtype()), out);
}

int cap_th_xlogy(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *y = ARG(1, "other");
    if (!x || !y || !cap_is_tensor(y))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "xlogy needs two tensors");
    return cap_wrap_value(
        c->T, ptc_composite_xlogy(composer(c), x->v, cap_val(y), cap_default_dtype()), out);
}

/* isinf, isposinf, isneginf, isfinite. */
int cap_th_isinf(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    const char *n = short_name(c);
    int sign = strcmp(n, "isposinf") == 0 ? 1 : strcmp(n, "isneginf") == 0 ? -1 : 0;
    return cap_wrap_value(
        c->T, ptc_composite_isinf(composer(c), x->v, sign, strcmp(n, "isfinite") == 0), out);
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
    ptc_dtype dt = x->v->type.dtype;
    double nan = 0, pinf = 0, ninf = 0;
    if (ptc_dtype_is_float(dt) &&
        (number(c, ARG(1, "nan"), 0.0, &nan) != CAP_NEXT ||
         number(c, ARG(2, "posinf"), finfo(dt, "max"), &pinf) != CAP_NEXT ||
         number(c, ARG(3, "neginf"), finfo(dt, "min"), &ninf) != CAP_NEXT))
        return CAP_BREAK;
    return cap_wrap_value(c->T, ptc_composite_nan_to_num(composer(c), x->v, nan, pinf, ninf), out);
}

/* isclose(a, b, rtol, atol, equal_nan) for floating tensors. */
int cap_th_isclose(cap_tcall *c, PyObject **out)
{
    cap_tensor *a = input_of(c, "input");
    PyObject *b = ARG(1, "other");
    double rtol, atol;
    if (!a || !b || !cap_is_tensor(b))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "isclose needs two tensors");
    if (number(c, ARG(2, "rtol"), 1e-5, &rtol) != CAP_NEXT ||
        number(c, ARG(3, "atol"), 1e-8, &atol) != CAP_NEXT)
        return CAP_BREAK;
    if (!ptc_dtype_is_float(a->v->type.dtype) || !ptc_dtype_is_float(cap_val(b)->type.dtype))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "isclose on integer tensors");
    PyObject *en = ARG(4, "equal_nan");
    bool equal_nan = en && PyObject_IsTrue(en) == 1;
    return cap_wrap_value(
        c->T, ptc_composite_isclose(composer(c), a->v, cap_val(b), rtol, atol, equal_nan), out);
}

/* dot(a, b) for 1-d tensors of one dtype. */
int cap_th_dot(cap_tcall *c, PyObject **out)
{
    cap_tensor *a = input_of(c, "input");
    PyObject *b = ARG(1, "tensor") ? ARG(1, "tensor") : ARG(-1, "other");
    if (!a || !b || !cap_is_tensor(b) || a->v->type.ndim != 1 || cap_val(b)->type.ndim != 1)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "dot needs two 1-d tensors");
    /* torch refuses these: the break runs eager's call, which raises its own
       error (a break leaves no Python error pending) */
    if (a->v->type.dtype != cap_val(b)->type.dtype)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "dot with mixed dtypes");
    if (a->v->type.dtype == PTC_BOOL)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "dot of bool tensors");
    return cap_wrap_value(c->T, ptc_composite_dot(composer(c), a->v, cap_val(b)), out);
}

/* ---- shapes ----------------------------------------------------------------------------- */

static int norm_dim(int64_t d, int ndim)
{
    return (int)(d < 0 ? d + ndim : d);
}

/* The dims argument of flip and tile: ints after the tensor, or one list. */
static int dims_arg(cap_tcall *c, const char *what, ptc_arg *da)
{
    if (c->npos > 2)
        return cap_int_varargs(c->T, c->pos + 1, c->npos - 1, da, what);
    return cap_int_list(c->T, ARG(1, "dims") ? ARG(1, "dims") : Py_None, da, what);
}

/* The dims of flip(dims) / fliplr / flipud, constant. */
static int flip_dims(cap_tcall *c, const char *n, int ndim, int64_t *dims, int *nd)
{
    *nd = 0;
    if (strcmp(n, "fliplr") == 0 || strcmp(n, "flipud") == 0) {
        if (ndim < (n[4] == 'l' ? 2 : 1)) {
            PyErr_Format(PyExc_RuntimeError, "Input must be >= %d-d.", n[4] == 'l' ? 2 : 1);
            return CAP_ERR;
        }
        dims[(*nd)++] = n[4] == 'l' ? 1 : 0;
        return CAP_NEXT;
    }
    ptc_arg da;
    int rc = dims_arg(c, "flip(dims)", &da);
    if (rc != CAP_NEXT)
        return rc;
    for (int i = 0; i < da.is.n && *nd < PTC_MAX_DIMS; i++) {
        if (da.is.d[i].sym)
            return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "flip with symbolic dims");
        dims[(*nd)++] = da.is.d[i].value;
    }
    return CAP_NEXT;
}

/* flip(dims), fliplr, flipud. */
int cap_th_flip(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    const ptc_ttype *t = &x->v->type;
    int64_t dims[PTC_MAX_DIMS];
    int nd, norm[PTC_MAX_DIMS];
    int rc = flip_dims(c, short_name(c), t->ndim, dims, &nd);
    if (rc != CAP_NEXT)
        return rc;
    for (int i = 0; i < nd; i++) {
        norm[i] = norm_dim(dims[i], t->ndim);
        if (norm[i] < 0 || norm[i] >= t->ndim) {
            PyErr_Format(
                PyExc_IndexError,
                "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                -t->ndim, t->ndim - 1, (long long)dims[i]);
            return CAP_ERR;
        }
        if (t->shape[norm[i]].sym)
            return cap_t_need_static(c->T, "flip of a dynamic dimension");
    }
    return cap_wrap_value(c->T, ptc_composite_flip(composer(c), x->v, norm, nd), out);
}

/* pixel_shuffle(input, upscale_factor), pixel_unshuffle(input,
 * downscale_factor): sizes torch refuses break, so that the call raises
 * eager's error; the result of a channels-last input is channels-last, as
 * eager's (torch's suggest_memory_format), and one of unknown strides breaks. */
int cap_th_pixel_shuffle(cap_tcall *c, PyObject **out)
{
    bool un = strcmp(short_name(c), "pixel_unshuffle") == 0;
    cap_tensor *x = input_of(c, "input");
    PyObject *f = ARG(1, un ? "downscale_factor" : "upscale_factor");
    if (!x || !f || !PyLong_Check(f))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor and an int factor",
                           c->m->name);
    const ptc_ttype *t = &x->v->type;
    int64_t r = PyLong_AsLongLong(f), st[PTC_MAX_DIMS];
    int n = t->ndim - 3;
    if (n < 0 || r <= 0)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s of these sizes raises", c->m->name);
    for (int d = n; d < t->ndim; d++)
        if (t->shape[d].sym)
            return cap_t_need_static(c->T, "%s of a dynamic size", c->m->name);
    int64_t ch = t->shape[n].value, h = t->shape[n + 1].value, w = t->shape[n + 2].value;
    if (un ? h % r || w % r : ch % (r * r))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s of these sizes raises", c->m->name);
    if (!cap_value_strides(c->T, x->v, st))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s of an unknown layout", c->m->name);
    bool channels_last = t->ndim == 4 && cap_strides_contiguous(t, st, CAP_CHANNELS_LAST) &&
                         !cap_strides_contiguous(t, st, CAP_ROW_MAJOR);
    PyObject *shuffled = NULL;
    int rc = cap_wrap_value(c->T, ptc_composite_pixel_shuffle(composer(c), x->v, r, un),
                            channels_last ? &shuffled : out);
    if (rc != CAP_NEXT || !channels_last)
        return rc;
    rc = cap_in_memory_format(c, (cap_tensor *)shuffled, CAP_CHANNELS_LAST, out);
    Py_DECREF(shuffled);
    return rc;
}

/* The dims of a reduction's dim= argument (None: n 0, every dim; an int; a
 * list of distinct ints), normalised; a break where eager raises. */
static int reduced_dims(cap_tcall *c, PyObject *dim, int ndim, int64_t *dims, int *n)
{
    *n = 0;
    PyObject *list = !dim || dim == Py_None ? PyTuple_New(0)
                     : PyLong_Check(dim)    ? PyTuple_Pack(1, dim)
                     : PySequence_Check(dim) ? PySequence_Tuple(dim)
                                             : NULL;
    if (!list) {
        PyErr_Clear();
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: dim must be ints", c->m->name);
    }
    bool ok = PyTuple_Size(list) <= ndim;
    for (Py_ssize_t i = 0; ok && i < PyTuple_Size(list); i++) {
        PyObject *v = PyTuple_GetItem(list, i);
        int64_t d = PyLong_Check(v) ? PyLong_AsLongLong(v) : INT64_MAX;
        ok = d >= -ndim && d < (ndim ? ndim : 1);
        dims[*n] = ok ? norm_dim(d, ndim ? ndim : 1) : 0;
        for (int j = 0; ok && j < *n; j++)
            ok = dims[j] != dims[*n];
        (*n)++;
    }
    Py_DECREF(list);
    if (!ok || (ndim == 0 && *n > 0))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s with these dims raises", c->m->name);
    return CAP_NEXT;
}

/* count_nonzero(input, dim=None). */
int cap_th_count_nonzero(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    int64_t dims[PTC_MAX_DIMS];
    int n, rc = reduced_dims(c, ARG(1, "dim"), x->v->type.ndim, dims, &n);
    if (rc != CAP_NEXT)
        return rc;
    return cap_wrap_value(c->T, ptc_composite_count_nonzero(composer(c), x->v, dims, n), out);
}

/* nansum / nanmean(input, dim=None, keepdim=False, *, dtype=None) of a
 * floating input (an integer one, or a dtype=, breaks: nansum of integers is
 * sum, nanmean of them raises). */
int cap_th_nansum(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *keep = ARG(2, "keepdim"), *dt = ARG(-1, "dtype");
    if (!x || !ptc_dtype_is_float(x->v->type.dtype) || (dt && dt != Py_None) ||
        (keep && !PyBool_Check(keep)))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "%s of a non-floating tensor, or with dtype=", c->m->name);
    int64_t dims[PTC_MAX_DIMS];
    int n, rc = reduced_dims(c, ARG(1, "dim"), x->v->type.ndim, dims, &n);
    if (rc != CAP_NEXT)
        return rc;
    bool mean = strcmp(short_name(c), "nanmean") == 0;
    return cap_wrap_value(c->T,
                          ptc_composite_nansum(composer(c), x->v, dims, n, keep == Py_True, mean),
                          out);
}

/* heaviside(input, values): tensors of one dtype (eager raises otherwise). */
int cap_th_heaviside(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *v = ARG(1, "values");
    if (!x || !v || !cap_is_tensor(v) || cap_val(v)->type.dtype != x->v->type.dtype ||
        x->v->type.dtype == PTC_BOOL)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s of these operands raises", c->m->name);
    return cap_wrap_value(c->T, ptc_composite_heaviside(composer(c), x->v, cap_val(v)), out);
}

int cap_th_sinc(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x || x->v->type.dtype == PTC_BOOL)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a number tensor", c->m->name);
    return cap_wrap_value(c->T, ptc_composite_sinc(composer(c), x->v, cap_default_dtype()), out);
}

/* repeat_interleave(repeats: int, dim=None). */
int cap_th_repeat_interleave(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *r = ARG(1, "repeats"), *dim = ARG(2, "dim");
    if (!x || !r || !PyLong_Check(r))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "repeat_interleave with tensor repeats");
    bool flat = !dim || dim == Py_None;
    if (!flat && !PyLong_Check(dim))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "repeat_interleave with a non-constant dim");
    int d = flat ? 0 : norm_dim(PyLong_AsLongLong(dim), x->v->type.ndim);
    if (!flat && (d < 0 || d >= x->v->type.ndim))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "repeat_interleave: bad dim");
    V v = ptc_composite_repeat_interleave(composer(c), x->v, PyLong_AsLongLong(r), flat, d);
    return cap_wrap_value(c->T, v, out);
}

/* tile(dims): repeat with dims padded by leading ones. */
int cap_th_tile(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "tile needs a tensor");
    ptc_arg da;
    int rc = dims_arg(c, "tile(dims)", &da);
    if (rc != CAP_NEXT)
        return rc;
    int ndim = x->v->type.ndim, n = da.is.n > ndim ? da.is.n : ndim;
    ptc_dim reps[PTC_MAX_DIMS];
    if (n > PTC_MAX_DIMS)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "tile to more than %d dims",
                           PTC_MAX_DIMS);
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
    int rc =
        cap_int_list(c->T, ARG(1, "size") ? ARG(1, "size") : Py_None, &sz, "broadcast_to(size)");
    if (rc != CAP_NEXT)
        return rc;
    ptc_arg a[2] = {ptc_arg_value(x->v), sz};
    return cap_wrap_value(c->T, cap_build1(c->T, PTC_OP_EXPAND, a, 2), out);
}

/* The common shape of broadcast_tensors' tensors, into shape[*nd]. */
static int common_shape(cap_trace *T, PyObject *const *ts, int n, ptc_dim *shape, int *nd)
{
    *nd = 0;
    for (int i = 0; i < n; i++) {
        if (!cap_is_tensor(ts[i]))
            return cap_t_break(T, CAP_B_TRACE_ERROR, "broadcast_tensors needs tensors");
        const ptc_ttype *t = &cap_val(ts[i])->type;
        if (t->ndim > *nd) {
            for (int k = *nd - 1; k >= 0; k--)
                shape[k + t->ndim - *nd] = shape[k];
            for (int k = 0; k < t->ndim - *nd; k++)
                shape[k] = ptc_dim_c(1);
            *nd = t->ndim;
        }
        for (int k = 0; k < t->ndim; k++) {
            ptc_dim *s = &shape[*nd - t->ndim + k], d = t->shape[k];
            if (s->sym || d.sym) {
                if (!ptc_dim_eq(*s, d) && !(!d.sym && d.value == 1))
                    return cap_t_need_static(T, "broadcast_tensors with dynamic sizes");
                continue;
            }
            if (s->value == 1)
                *s = d;
            else if (d.value != 1 && d.value != s->value) {
                PyErr_Format(PyExc_RuntimeError,
                             "The size of tensor a (%lld) must match the size of tensor b (%lld) "
                             "at non-singleton dimension %d",
                             (long long)s->value, (long long)d.value, k);
                return cap_t_break(T, CAP_B_TRACE_ERROR,
                                   "broadcast_tensors: shapes do not broadcast");
            }
        }
    }
    return CAP_NEXT;
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
    int nd, rc = common_shape(T, ts, n, shape, &nd);
    if (rc != CAP_NEXT)
        return rc;
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
    PyObject *np = ARG(1, "n"), *dim = ARG(2, "dim"), *pre = ARG(3, "prepend"),
             *app = ARG(4, "append");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "diff needs a tensor");
    if ((np && !PyLong_Check(np)) || (dim && !PyLong_Check(dim)))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "diff with non-constant n or dim");
    int d = norm_dim(dim ? PyLong_AsLongLong(dim) : -1, x->v->type.ndim);
    if (d < 0 || d >= x->v->type.ndim)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "diff: bad dim");
    V parts[3];
    int nparts = 0;
    if (pre && pre != Py_None) {
        if (!cap_is_tensor(pre))
            return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "diff with a scalar prepend");
        parts[nparts++] = cap_val(pre);
    }
    parts[nparts++] = x->v;
    if (app && app != Py_None) {
        if (!cap_is_tensor(app))
            return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "diff with a scalar append");
        parts[nparts++] = cap_val(app);
    }
    V v = ptc_composite_diff(composer(c), parts, nparts, np ? PyLong_AsLongLong(np) : 1, d);
    return cap_wrap_value(c->T, v, out);
}

/* hstack / vstack / row_stack(tensors). */
int cap_th_stack_dims(cap_tcall *c, PyObject **out)
{
    PyObject *seq = ARG(0, "tensors");
    cap_trace *T = c->T;
    bool vertical = strstr(c->m->name, "vstack") != NULL || strstr(c->m->name, "row_stack") != NULL;
    PyObject *items = seq ? PySequence_Tuple(seq) : NULL;
    if (!items) {
        PyErr_Clear();
        return cap_t_break(T, CAP_B_TRACE_ERROR, "%s needs a sequence of tensors", c->m->name);
    }
    Py_ssize_t n = PyTuple_Size(items);
    V parts[64];
    for (Py_ssize_t i = 0; i < n && i < 64; i++) {
        PyObject *t = PyTuple_GetItem(items, i);
        if (!cap_is_tensor(t)) {
            Py_DECREF(items);
            return cap_t_break(T, CAP_B_TRACE_ERROR, "%s needs tensors", c->m->name);
        }
        parts[i] = cap_val(t);
    }
    Py_DECREF(items);
    if (n > 64)
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s of more than 64 tensors", c->m->name);
    return cap_wrap_value(T, ptc_composite_stack_dims(composer(c), parts, (int)n, vertical), out);
}

/* ---- resampling ------------------------------------------------------------------------ */

/* The output sizes (and scale factors) of interpolate's nsp spatial dims. */
static int resample_sizes(cap_tcall *c, const ptc_ttype *tt, int nsp, int64_t *outs, double *scales)
{
    PyObject *size = ARG(1, "size"), *sf = ARG(2, "scale_factor"),
             *rsf = ARG(5, "recompute_scale_factor");
    if (size && size != Py_None) {
        for (int i = 0; i < nsp; i++) {
            PyObject *s = PyLong_Check(size) ? Py_NewRef(size) : PySequence_GetItem(size, i);
            if (!s || !PyLong_Check(s)) {
                Py_XDECREF(s);
                PyErr_Clear();
                return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                                   "interpolate with a non-constant size");
            }
            outs[i] = PyLong_AsLongLong(s);
            Py_DECREF(s);
        }
        return CAP_NEXT;
    }
    if (!sf || sf == Py_None) {
        PyErr_SetString(PyExc_ValueError, "either size or scale_factor should be defined");
        return CAP_ERR;
    }
    for (int i = 0; i < nsp; i++) {
        PyObject *s =
            PyNumber_Check(sf) && !PySequence_Check(sf) ? Py_NewRef(sf) : PySequence_GetItem(sf, i);
        if (!s || !(PyFloat_Check(s) || PyLong_Check(s))) {
            Py_XDECREF(s);
            PyErr_Clear();
            return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                               "interpolate with a non-constant scale_factor");
        }
        double f = PyFloat_AsDouble(s);
        Py_DECREF(s);
        outs[i] = (int64_t)floor((double)tt->shape[2 + i].value * f);
        if (!(rsf && PyObject_IsTrue(rsf) == 1))
            scales[i] = f;
    }
    return CAP_NEXT;
}

/* F.interpolate / F.upsample: nearest, nearest-exact and (bi/tri)linear,
 * one spatial dim at a time from the last, as torch's kernels nest them. */
int cap_th_interpolate(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    cap_trace *T = c->T;
    if (!x)
        return cap_t_break(T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    PyObject *mo = ARG(3, "mode"), *ac = ARG(4, "align_corners"), *aa = ARG(6, "antialias");
    const char *mode = mo && PyUnicode_Check(mo) ? PyUnicode_AsUTF8(mo) : "nearest";
    int m = strcmp(mode, "nearest") == 0         ? 0
            : strcmp(mode, "nearest-exact") == 0 ? 1
            : (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0 ||
               strcmp(mode, "trilinear") == 0)
                ? 2
                : -1;
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
    int64_t outs[3];
    double scales[3] = {-1, -1, -1};
    int rc = resample_sizes(c, tt, nsp, outs, scales);
    if (rc != CAP_NEXT)
        return rc;
    bool align = ac && PyObject_IsTrue(ac) == 1;
    ptc_composer *cp = composer(c);
    V v = x->v;
    for (int i = nsp - 1; i >= 0 && v; i--)
        v = ptc_composite_resample(cp, v, 2 + i, outs[i], scales[i], m, align);
    return cap_wrap_value(T, v, out);
}

/* ---- the multi-head attention fast path --------------------------------------------- */

/* The tensors of torch._native_multi_head_attention's call, checked: 3-d,
 * static and equal shapes, embed_dim divisible by num_head. */
static int mha_operands(cap_tcall *c, ptc_mha *m)
{
    cap_trace *T = c->T;
    PyObject *q = ARG(0, "query"), *k = ARG(1, "key"), *v = ARG(2, "value"),
             *nh = ARG(4, "num_head");
    PyObject *w = ARG(5, "qkv_weight"), *bias = ARG(6, "qkv_bias"), *pw = ARG(7, "proj_weight"),
             *pb = ARG(8, "proj_bias");
    if (!q || !k || !v || !cap_is_tensor(q) || !cap_is_tensor(k) || !cap_is_tensor(v) || !w ||
        !cap_is_tensor(w) || !pw || !cap_is_tensor(pw) || !nh || !PyLong_Check(nh))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH,
                           "_native_multi_head_attention with these arguments");
    const ptc_ttype *qt = &cap_val(q)->type, *kt = &cap_val(k)->type, *vt = &cap_val(v)->type;
    if (qt->ndim != 3 || kt->ndim != 3)
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH,
                           "_native_multi_head_attention on %d-d inputs", qt->ndim);
    for (int i = 0; i < 3; i++)
        if (qt->shape[i].sym || kt->shape[i].sym)
            return cap_t_need_static(T, "_native_multi_head_attention with dynamic sizes");
    for (int i = 0; i < 3; i++)
        if (qt->shape[i].value != kt->shape[i].value || kt->shape[i].value != vt->shape[i].value)
            return cap_t_break(T, CAP_B_TRACE_ERROR,
                               "_native_multi_head_attention: query/key/value shapes differ");
    int64_t E = qt->shape[2].value, H = PyLong_AsLongLong(nh);
    if (H <= 0 || (E / H) * H != E)
        return cap_t_break(T, CAP_B_TRACE_ERROR, "embed_dim %lld not divisible by num_head %lld",
                           (long long)E, (long long)H);
    *m = (ptc_mha){.q = cap_val(q),
                   .k = cap_val(k),
                   .v = cap_val(v),
                   .qkv_weight = cap_val(w),
                   .qkv_bias = bias && cap_is_tensor(bias) ? cap_val(bias) : NULL,
                   .proj_weight = cap_val(pw),
                   .proj_bias = pb && cap_is_tensor(pb) ? cap_val(pb) : NULL,
                   .heads = H};
    return CAP_NEXT;
}

/* Its mask (bool; a [B, S] key padding mask by mask_type or shape) and
 * what it returns. */
static int mha_mask(cap_tcall *c, ptc_mha *m)
{
    PyObject *mask = ARG(9, "mask"), *need = ARG(10, "need_weights"),
             *avg = ARG(11, "average_attn_weights"), *mtype = ARG(12, "mask_type");
    m->need_weights = need && PyObject_IsTrue(need) == 1;
    m->average_weights = !avg || PyObject_IsTrue(avg) == 1;
    if (!mask || mask == Py_None)
        return CAP_NEXT;
    if (!cap_is_tensor(mask))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "_native_multi_head_attention with a non-tensor mask");
    m->mask = cap_val(mask);
    int64_t B = m->q->type.shape[0].value;
    long mt = mtype && PyLong_Check(mtype)
                  ? PyLong_AsLong(mtype)
                  : (m->mask->type.ndim == 2 && m->mask->type.shape[0].value == B ? 1 : 0);
    m->key_padding = mt == 1;
    if (m->mask->type.dtype != PTC_BOOL)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "_native_multi_head_attention with a float mask");
    return CAP_NEXT;
}

/* torch._native_multi_head_attention (nn.MultiheadAttention's inference
 * fast path in torch 1.13+): (output, weights or None). */
int cap_th_native_mha(cap_tcall *c, PyObject **out)
{
    cap_trace *T = c->T;
    ptc_mha m;
    int rc = mha_operands(c, &m);
    if (rc != CAP_NEXT || (rc = mha_mask(c, &m)) != CAP_NEXT)
        return rc;
    V wts = NULL, o = ptc_composite_mha(composer(c), &m, &wts);
    if (!o || (m.need_weights && !wts))
        return CAP_BREAK;
    PyObject *weights = NULL;
    if (wts && cap_wrap_value(T, wts, &weights) != CAP_NEXT)
        return CAP_BREAK;
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

/* reduction=: none, mean, sum; legacy size_average/reduce break. */
static int reduction_of(cap_tcall *c, int red_index, ptc_reduction *red)
{
    PyObject *sa = ARG(-1, "size_average"), *rd = ARG(-1, "reduce"),
             *r = ARG(red_index, "reduction");
    if ((sa && sa != Py_None) || (rd && rd != Py_None))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with legacy size_average/reduce",
                           c->m->name);
    const char *s = r && PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : "mean";
    if (strcmp(s, "none") == 0)
        *red = PTC_REDUCE_NONE;
    else if (strcmp(s, "mean") == 0)
        *red = PTC_REDUCE_MEAN;
    else if (strcmp(s, "sum") == 0)
        *red = PTC_REDUCE_SUM;
    else {
        PyErr_Format(PyExc_ValueError, "%s is not a valid value for reduction", s);
        return CAP_ERR;
    }
    return CAP_NEXT;
}

/* Two tensors (input, target). */
static int pair(cap_tcall *c, V *in, V *tg)
{
    PyObject *a = ARG(0, "input"), *b = ARG(1, "target");
    if (!a || !b || !cap_is_tensor(a) || !cap_is_tensor(b))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs input and target tensors",
                           c->m->name);
    *in = cap_val(a);
    *tg = cap_val(b);
    return CAP_NEXT;
}

/* mse_loss, l1_loss, smooth_l1_loss(beta), huber_loss(delta). */
int cap_th_pointwise_loss(cap_tcall *c, PyObject **out)
{
    V in, tg;
    ptc_reduction red;
    int rc;
    const char *n = short_name(c);
    ptc_pointwise_loss kind = strcmp(n, "mse_loss") == 0     ? PTC_LOSS_MSE
                              : strcmp(n, "huber_loss") == 0 ? PTC_LOSS_HUBER
                              : strcmp(n, "l1_loss") == 0    ? PTC_LOSS_L1
                                                             : PTC_LOSS_SMOOTH_L1;
    bool huber = kind == PTC_LOSS_HUBER;
    if ((rc = pair(c, &in, &tg)) != CAP_NEXT ||
        (rc = reduction_of(c, huber ? 2 : 4, &red)) != CAP_NEXT)
        return rc;
    PyObject *w = ARG(-1, "weight");
    if (w && w != Py_None)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with weight", c->m->name);
    double k = 1.0;
    if (kind != PTC_LOSS_MSE &&
        number(c, huber ? ARG(3, "delta") : ARG(5, "beta"), 1.0, &k) != CAP_NEXT)
        return CAP_BREAK;
    V vals[2] = {in, tg};
    if (cap_amp_loss_inputs(c->T, vals, 2) != CAP_NEXT)
        return CAP_BREAK;
    in = vals[0], tg = vals[1];
    return cap_wrap_value(c->T, ptc_composite_pointwise_loss(composer(c), kind, in, tg, k, red),
                          out);
}

/* kl_div(input, target, ..., reduction="mean", log_target=False), and
 * reduction "batchmean" (static sizes). */
int cap_th_kl_div(cap_tcall *c, PyObject **out)
{
    V in, tg;
    ptc_reduction red = PTC_REDUCE_SUM;
    PyObject *r = ARG(4, "reduction");
    bool batchmean =
        r && PyUnicode_Check(r) && PyUnicode_CompareWithASCIIString(r, "batchmean") == 0;
    int rc = pair(c, &in, &tg);
    if (rc != CAP_NEXT || (!batchmean && (rc = reduction_of(c, 4, &red)) != CAP_NEXT))
        return rc;
    if (!ptc_dtype_is_float(in->type.dtype) || in->type.dtype != tg->type.dtype ||
        (batchmean && in->type.ndim && in->type.shape[0].sym))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "kl_div of mixed or integer dtypes, or batchmean of a symbolic batch");
    PyObject *lt = ARG(5, "log_target");
    return cap_wrap_value(
        c->T, ptc_composite_kl_div(composer(c), in, tg, lt == Py_True, red, batchmean), out);
}

/* triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2,
 * eps=1e-6, swap=False, ..., reduction="mean"): floating tensors of one
 * dtype and rank. */
int cap_th_triplet_margin(cap_tcall *c, PyObject **out)
{
    static const char *const names[3] = {"anchor", "positive", "negative"};
    V abn[3];
    bool ok = true;
    for (int i = 0; i < 3; i++) {
        PyObject *t = ARG(i, names[i]);
        ok = ok && t && cap_is_tensor(t);
        abn[i] = ok ? cap_val(t) : NULL;
        ok = ok && ptc_dtype_is_float(abn[i]->type.dtype) &&
             abn[i]->type.dtype == abn[0]->type.dtype && abn[i]->type.ndim == abn[0]->type.ndim;
    }
    if (!ok || abn[0]->type.ndim == 0)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "%s of other than three floating tensors of one dtype and rank",
                           c->m->name);
    ptc_reduction red;
    double margin, p, eps;
    PyObject *swap = ARG(6, "swap");
    int rc = reduction_of(c, 9, &red);
    if (rc != CAP_NEXT || number(c, ARG(3, "margin"), 1.0, &margin) != CAP_NEXT ||
        number(c, ARG(4, "p"), 2.0, &p) != CAP_NEXT ||
        number(c, ARG(5, "eps"), 1e-6, &eps) != CAP_NEXT)
        return rc != CAP_NEXT ? rc : CAP_BREAK;
    if (p <= 0 || (swap && !PyBool_Check(swap)))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with p <= 0 or a non-bool swap",
                           c->m->name);
    return cap_wrap_value(
        c->T, ptc_composite_triplet_margin(composer(c), abn, margin, p, eps, swap == Py_True, red),
        out);
}

/* The mode= of embedding_bag ("mean" when absent), -1 for another. */
static int bag_mode(PyObject *m)
{
    static const char *const names[3] = {"sum", "mean", "max"};
    const char *s = m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : m ? "" : "mean";
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

/* Whether embedding_bag's operands are ones ptc builds: integer input
 * (2-D without offsets, or 1-D with 1-D offsets of its dtype, not in max
 * mode), a floating 2-D weight, per-sample weights of the weight's dtype
 * and the input's shape (sum mode only), static sizes. */
static bool bag_operands_fit(const ptc_embedding_bag *e)
{
    const ptc_ttype *it = &e->input->type, *wt = &e->weight->type;
    if ((it->dtype != PTC_I64 && it->dtype != PTC_I32) || wt->ndim != 2 ||
        !ptc_dtype_is_float(wt->dtype) || !ptc_ttype_is_static(it) || !ptc_ttype_is_static(wt))
        return false;
    if (e->per_sample && (e->mode != PTC_BAG_SUM || e->per_sample->type.dtype != wt->dtype ||
                          !ptc_ttype_same_shape(&e->per_sample->type, it)))
        return false;
    if (it->ndim == 2)
        return !e->offsets;
    const ptc_ttype *ot = e->offsets ? &e->offsets->type : NULL;
    return it->ndim == 1 && ot && ot->ndim == 1 && ot->dtype == it->dtype &&
           ptc_ttype_is_static(ot) && ot->shape[0].value > e->include_last_offset &&
           e->mode != PTC_BAG_MAX;
}

/* A tensor argument that may be None: *v its value (NULL for None or
 * absent); false for another kind of value. */
static bool tensor_or_none(PyObject *a, V *v)
{
    *v = a && cap_is_tensor(a) ? cap_val(a) : NULL;
    return !a || a == Py_None || *v;
}

/* embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
 * scale_grad_by_freq=False, mode="mean", sparse=False,
 * per_sample_weights=None, include_last_offset=False, padding_idx=None):
 * max_norm (a renormalisation in place), scale_grad_by_freq, sparse
 * gradients, max of 1-D bags and what bag_operands_fit refuses break. */
int cap_th_embedding_bag(cap_tcall *c, PyObject **out)
{
    PyObject *in = ARG(0, "input"), *w = ARG(1, "weight"), *pad = ARG(10, "padding_idx");
    PyObject *max_norm = ARG(3, "max_norm");
    int mode = bag_mode(ARG(6, "mode"));
    ptc_embedding_bag e = {.mode = mode < 0 ? PTC_BAG_MEAN : (ptc_bag_mode)mode,
                           .padding_idx = -1,
                           .include_last_offset = ARG(9, "include_last_offset") == Py_True};
    bool ok = tensor_or_none(in, &e.input) && tensor_or_none(w, &e.weight) && e.input && e.weight &&
              tensor_or_none(ARG(2, "offsets"), &e.offsets) &&
              tensor_or_none(ARG(8, "per_sample_weights"), &e.per_sample) && mode >= 0 &&
              bag_operands_fit(&e) && (!max_norm || max_norm == Py_None) &&
              ARG(5, "scale_grad_by_freq") != Py_True && ARG(7, "sparse") != Py_True;
    if (ok && pad && pad != Py_None) {
        int64_t rows = e.weight->type.shape[0].value;
        int64_t p = PyLong_Check(pad) ? PyLong_AsLongLong(pad) : rows;
        ok = p >= -rows && p < rows;
        e.padding_idx = p < 0 ? p + rows : p;
    }
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "%s with max_norm, scale_grad_by_freq, sparse, max of 1-D bags, "
                           "symbolic sizes or operands eager refuses",
                           c->m->name);
    return cap_wrap_value(c->T, ptc_composite_embedding_bag(composer(c), &e), out);
}

/* trace(input): 2-D, static sizes. */
int cap_th_trace(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x || x->v->type.ndim != 2 || !ptc_ttype_is_static(&x->v->type) ||
        x->v->type.dtype == PTC_BOOL)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "trace of other than a 2-D number tensor of static sizes");
    return cap_wrap_value(c->T, ptc_composite_trace(composer(c), x->v), out);
}

/* channel_shuffle(input, groups): more than 2 dims, static sizes, groups
 * dividing the channels. */
int cap_th_channel_shuffle(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *g = ARG(1, "groups");
    int64_t groups = g && PyLong_Check(g) ? PyLong_AsLongLong(g) : 0;
    const ptc_ttype *t = x ? &x->v->type : NULL;
    if (!t || t->ndim < 3 || !ptc_ttype_is_static(t) || groups <= 0 ||
        t->shape[1].value % groups != 0)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "channel_shuffle with symbolic sizes, or what eager refuses");
    return cap_wrap_value(c->T, ptc_composite_channel_shuffle(composer(c), x->v, groups), out);
}

/* A keyword-only bool argument (absent: false), -1 for another value. */
static int kw_bool(cap_tcall *c, const char *name)
{
    PyObject *v = ARG(-1, name);
    return !v || v == Py_False ? 0 : v == Py_True ? 1 : -1;
}

/* searchsorted(sorted_sequence, input, *, out_int32=False, right=False,
 * side=None, sorter=None) and bucketize(input, boundaries, *, out_int32,
 * right): number tensors, the sequence 1-D or of the input's leading dims
 * (static); a sorter, or what eager refuses, breaks. */
int cap_th_search_sorted(cap_tcall *c, PyObject **out)
{
    bool bucketize = strcmp(short_name(c), "bucketize") == 0;
    PyObject *s = ARG(bucketize ? 1 : 0, bucketize ? "boundaries" : "sorted_sequence");
    PyObject *v = ARG(bucketize ? 0 : 1, "input"), *side = ARG(-1, "side");
    PyObject *sorter = ARG(-1, "sorter");
    int right = kw_bool(c, "right"), int32 = kw_bool(c, "out_int32");
    bool ok = s && v && cap_is_tensor(s) && cap_is_tensor(v) && right >= 0 && int32 >= 0 &&
              (!sorter || sorter == Py_None);
    if (ok && side && side != Py_None) {
        const char *sd = PyUnicode_Check(side) ? PyUnicode_AsUTF8(side) : "";
        ok = strcmp(sd, "right") == 0 || (strcmp(sd, "left") == 0 && !right);
        right = strcmp(sd, "right") == 0;
    }
    const ptc_ttype *st = ok ? &cap_val(s)->type : NULL, *vt = ok ? &cap_val(v)->type : NULL;
    ok = ok && st->ndim >= 1 && st->dtype != PTC_BOOL && vt->dtype != PTC_BOOL &&
         ptc_ttype_is_static(st) && (!bucketize || st->ndim == 1) &&
         (st->ndim == 1 || st->ndim == vt->ndim);
    for (int i = 0; ok && st->ndim > 1 && i < st->ndim - 1; i++)
        ok = ptc_dim_eq(st->shape[i], vt->shape[i]);
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "%s with a sorter, a number, symbolic boundaries or operands eager "
                           "refuses",
                           c->m->name);
    return cap_wrap_value(
        c->T, ptc_composite_search_sorted(composer(c), cap_val(s), cap_val(v), right, int32), out);
}

/* rot90(input, k=1, dims=(0, 1)): two distinct dims of input (static). */
int cap_th_rot90(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *k = ARG(1, "k"), *dims = ARG(2, "dims");
    int nd = x ? x->v->type.ndim : 0, d[2] = {0, 1};
    ptc_arg da;
    bool ok = x && nd >= 2 && (!k || PyLong_Check(k)) && ptc_ttype_is_static(&x->v->type);
    if (ok && dims)
        ok = cap_int_list(c->T, dims, &da, c->m->name) == CAP_NEXT && da.is.n == 2;
    for (int i = 0; ok && dims && i < 2; i++) {
        int64_t v = da.is.d[i].value;
        ok = !da.is.d[i].sym && v >= -nd && v < nd;
        d[i] = norm_dim(v, nd);
    }
    if (!ok || d[0] == d[1])
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "rot90 with symbolic sizes or arguments eager refuses");
    int64_t turns = k ? PyLong_AsLongLong(k) : 1;
    return cap_wrap_value(
        c->T, ptc_composite_rot90(composer(c), x->v, (int)(((turns % 4) + 4) % 4), d), out);
}

/* linalg.cross(input, other, *, dim=-1) and cross(input, other, dim=None)
 * with a dim (without one eager picks the first dim of size 3, with a
 * warning: a break): a dim of size 3 in both, one dtype, same rank. */
int cap_th_cross(cap_tcall *c, PyObject **out)
{
    PyObject *a = ARG(0, "input"), *b = ARG(1, "other");
    bool linalg = strstr(c->m->name, "linalg") != NULL;
    PyObject *dim = linalg ? ARG(-1, "dim") : ARG(2, "dim");
    bool ok = a && b && cap_is_tensor(a) && cap_is_tensor(b) &&
              (linalg || (dim && dim != Py_None)) && (!dim || PyLong_Check(dim));
    const ptc_ttype *at = ok ? &cap_val(a)->type : NULL, *bt = ok ? &cap_val(b)->type : NULL;
    int64_t d = dim ? PyLong_AsLongLong(dim) : -1;
    ok = ok && at->ndim == bt->ndim && at->dtype == bt->dtype && at->ndim > 0 && d >= -at->ndim &&
         d < at->ndim;
    int nd = ok ? norm_dim(d, at->ndim) : 0;
    ok = ok && !at->shape[nd].sym && at->shape[nd].value == 3 && !bt->shape[nd].sym &&
         bt->shape[nd].value == 3;
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "%s without a dim, or of operands eager refuses or promotes",
                           c->m->name);
    return cap_wrap_value(c->T, ptc_composite_cross(composer(c), cap_val(a), cap_val(b), nd), out);
}

/* addmv(input, mat, vec, *, beta=1, alpha=1): floating tensors of one
 * dtype, mat 2-D, vec 1-D. */
int cap_th_addmv(cap_tcall *c, PyObject **out)
{
    PyObject *in = ARG(0, "input"), *m = ARG(1, "mat"), *v = ARG(2, "vec");
    PyObject *beta = ARG(-1, "beta"), *alpha = ARG(-1, "alpha");
    bool ok = in && m && v && cap_is_tensor(in) && cap_is_tensor(m) && cap_is_tensor(v);
    ptc_dtype dt = ok ? cap_val(m)->type.dtype : PTC_F32;
    ok = ok && ptc_dtype_is_float(dt) && cap_val(in)->type.dtype == dt &&
         cap_val(v)->type.dtype == dt && cap_val(m)->type.ndim == 2 && cap_val(v)->type.ndim == 1;
    ptc_arg b = ptc_arg_int(1), a = ptc_arg_int(1);
    if (ok && beta)
        ok = cap_tconvert(c->T, beta, PTC_PK_SCALAR, 0, &b, c->m->name) == CAP_NEXT &&
             b.kind != PTC_ARG_BOOL;
    if (ok && alpha)
        ok = cap_tconvert(c->T, alpha, PTC_PK_SCALAR, 0, &a, c->m->name) == CAP_NEXT &&
             a.kind != PTC_ARG_BOOL;
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "addmv of other than floating tensors of one dtype, a matrix and a "
                           "vector");
    return cap_wrap_value(
        c->T, ptc_composite_addmv(composer(c), cap_val(in), cap_val(m), cap_val(v), b, a), out);
}

/* kron(input, other): static sizes, one dtype, at most half of
 * PTC_MAX_DIMS dims. */
int cap_th_kron(cap_tcall *c, PyObject **out)
{
    PyObject *a = ARG(0, "input"), *b = ARG(1, "other");
    bool ok = a && b && cap_is_tensor(a) && cap_is_tensor(b);
    const ptc_ttype *at = ok ? &cap_val(a)->type : NULL, *bt = ok ? &cap_val(b)->type : NULL;
    int nd = ok ? (at->ndim > bt->ndim ? at->ndim : bt->ndim) : 0;
    if (!ok || at->dtype != bt->dtype || !ptc_ttype_is_static(at) || !ptc_ttype_is_static(bt) ||
        nd == 0 || 2 * nd > PTC_MAX_DIMS)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "kron of mixed dtypes, symbolic sizes, 0-dim or many-dim tensors");
    return cap_wrap_value(c->T, ptc_composite_kron(composer(c), cap_val(a), cap_val(b), nd), out);
}

/* cartesian_prod(*tensors): two or more 1-D tensors of one dtype (one
 * tensor is returned as it is by eager: a break). */
int cap_th_cartesian_prod(cap_tcall *c, PyObject **out)
{
    V parts[PTC_MAX_DIMS];
    int n = c->npos;
    bool ok = n >= 2 && n <= PTC_MAX_DIMS;
    for (int i = 0; ok && i < n; i++) {
        PyObject *t = c->pos[i];
        ok = cap_is_tensor(t) && cap_val(t)->type.ndim == 1 &&
             cap_val(t)->type.dtype == cap_val(c->pos[0])->type.dtype;
        parts[i] = ok ? cap_val(t) : NULL;
    }
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "cartesian_prod of one tensor, or of other than 1-D tensors of one "
                           "dtype");
    return cap_wrap_value(c->T, ptc_composite_cartesian_prod(composer(c), parts, n), out);
}

/* diag_embed(input, offset=0, dim1=-2, dim2=-1): the last two dims only. */
int cap_th_diag_embed(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *o = ARG(1, "offset"), *d1 = ARG(2, "dim1"), *d2 = ARG(3, "dim2");
    int nd = x ? x->v->type.ndim + 1 : 0;
    bool ok = x && nd >= 2 && ptc_ttype_is_static(&x->v->type) && (!o || PyLong_Check(o)) &&
              (!d1 || (PyLong_Check(d1) && norm_dim(PyLong_AsLongLong(d1), nd) == nd - 2)) &&
              (!d2 || (PyLong_Check(d2) && norm_dim(PyLong_AsLongLong(d2), nd) == nd - 1));
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "diag_embed into other than the last two dims, or of symbolic sizes");
    return cap_wrap_value(
        c->T, ptc_composite_diag_embed(composer(c), x->v, o ? PyLong_AsLongLong(o) : 0), out);
}

/* cov(input, *, correction=1, fweights=None, aweights=None) and
 * corrcoef(input): 1-D or 2-D, static, more observations than the
 * correction (eager warns otherwise); weights break. */
int cap_th_cov(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    bool corr = strcmp(short_name(c), "corrcoef") == 0;
    PyObject *corr_arg = ARG(-1, "correction"), *fw = ARG(-1, "fweights"),
             *aw = ARG(-1, "aweights");
    int64_t correction = corr_arg && PyLong_Check(corr_arg) ? PyLong_AsLongLong(corr_arg) : 1;
    const ptc_ttype *t = x ? &x->v->type : NULL;
    bool ok = t && (t->ndim == 1 || t->ndim == 2) && ptc_ttype_is_static(t) &&
              t->dtype != PTC_BOOL && (!corr_arg || PyLong_Check(corr_arg)) &&
              (!fw || fw == Py_None) && (!aw || aw == Py_None) &&
              t->shape[t->ndim - 1].value > (corr ? 1 : correction);
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "%s with weights, symbolic sizes, or too few observations", c->m->name);
    ptc_composer *k = composer(c);
    return cap_wrap_value(c->T,
                          corr ? ptc_composite_corrcoef(k, x->v, cap_default_dtype())
                               : ptc_composite_cov(k, x->v, correction, cap_default_dtype()),
                          out);
}

/* cdist(x1, x2, p=2.0, compute_mode=...): floating tensors of one dtype
 * and rank (at least 2), rows of one length, p > 0. compute_mode picks
 * torch's algorithm for p = 2 (a matrix product or differences): ptc takes
 * the differences, the more precise, whichever is asked (results agree to
 * rounding). */
int cap_th_cdist(cap_tcall *c, PyObject **out)
{
    PyObject *a = ARG(0, "x1"), *b = ARG(1, "x2");
    double p = 2;
    bool ok = a && b && cap_is_tensor(a) && cap_is_tensor(b) &&
              number(c, ARG(2, "p"), 2.0, &p) == CAP_NEXT;
    const ptc_ttype *at = ok ? &cap_val(a)->type : NULL, *bt = ok ? &cap_val(b)->type : NULL;
    ok = ok && p > 0 && ptc_dtype_is_float(at->dtype) && at->dtype == bt->dtype && at->ndim >= 2 &&
         at->ndim == bt->ndim && ptc_dim_eq(at->shape[at->ndim - 1], bt->shape[bt->ndim - 1]);
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "cdist with p <= 0, or of operands eager refuses or promotes");
    return cap_wrap_value(c->T, ptc_composite_cdist(composer(c), cap_val(a), cap_val(b), p), out);
}

/* linalg.matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False): "fro",
 * 1, -1, inf and -inf over the last two dims of a floating tensor; "nuc",
 * 2 and -2 (singular values) and other dims break. */
int cap_th_matrix_norm(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "A");
    PyObject *ord = ARG(1, "ord"), *dim = ARG(2, "dim"), *keep = ARG(3, "keepdim");
    double o = 0;
    bool fro = !ord || (PyUnicode_Check(ord) && PyUnicode_CompareWithASCIIString(ord, "fro") == 0);
    bool ok = x && x->v->type.ndim >= 2 && ptc_dtype_is_float(x->v->type.dtype) &&
              (!dim || dim == Py_None) && (!keep || PyBool_Check(keep)) &&
              (!ARG(-1, "dtype") || ARG(-1, "dtype") == Py_None);
    if (ok && !fro)
        ok = (PyLong_Check(ord) || PyFloat_Check(ord)) &&
             ((o = PyFloat_AsDouble(ord)) == 1 || o == -1 || isinf(o));
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "matrix_norm of order 'nuc', 2 or -2 (singular values), over other "
                           "dims, with dtype=, or of a non-floating tensor");
    int kind = fro ? 0 : o > 0 ? 1 : -1;
    return cap_wrap_value(
        c->T, ptc_composite_matrix_norm(composer(c), x->v, kind, isinf(o), keep == Py_True), out);
}

/* block_diag(*tensors): up to 64 tensors of up to 2 dims, one dtype and
 * device, static sizes; 0-d and 1-D ones are rows ([1, 1], [1, n]). */
int cap_th_block_diag(cap_tcall *c, PyObject **out)
{
    V blocks[64];
    int n = c->npos;
    bool ok = n >= 1 && n <= 64 && c->nkw == 0;
    for (int i = 0; ok && i < n; i++) {
        PyObject *t = c->pos[i];
        const ptc_ttype *tt = cap_is_tensor(t) ? &cap_val(t)->type : NULL;
        ok = tt && tt->ndim <= 2 && ptc_ttype_is_static(tt) &&
             tt->dtype == cap_val(c->pos[0])->type.dtype &&
             ptc_device_eq(tt->device, cap_val(c->pos[0])->type.device);
        if (!ok)
            break;
        int64_t shape[2] = {tt->ndim == 2 ? tt->shape[0].value : 1,
                            tt->ndim == 0 ? 1 : tt->shape[tt->ndim - 1].value};
        ptc_arg v[2] = {ptc_arg_value(cap_val(t)), ptc_arg_ints(c->T->arena, shape, 2)};
        ok = (blocks[i] = cap_build1(c->T, PTC_OP_RESHAPE, v, 2)) != NULL;
    }
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "block_diag of other than tensors of up to 2 dims, of one dtype and "
                           "device, with static sizes");
    return cap_wrap_value(c->T, ptc_composite_block_diag(composer(c), blocks, n), out);
}

/* isin(elements, test_elements, *, assume_unique=False, invert=False) of
 * two tensors. */
int cap_th_isin(cap_tcall *c, PyObject **out)
{
    PyObject *e = ARG(0, "elements"), *t = ARG(1, "test_elements");
    int invert = kw_bool(c, "invert");
    if (!e || !t || !cap_is_tensor(e) || !cap_is_tensor(t) || invert < 0 ||
        !ptc_ttype_is_static(&cap_val(t)->type))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "isin of a number, or of symbolic test elements");
    return cap_wrap_value(c->T, ptc_composite_isin(composer(c), cap_val(e), cap_val(t), invert),
                          out);
}

/* one_hot(tensor, num_classes): int64 classes, num_classes given (-1, the
 * classes' maximum plus one, is a value of the data: a break). */
int cap_th_one_hot(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "tensor");
    PyObject *n = ARG(1, "num_classes");
    int64_t classes = n && PyLong_Check(n) ? PyLong_AsLongLong(n) : -1;
    if (!x || x->v->type.dtype != PTC_I64 || classes < 0)
        return cap_t_break(c->T, CAP_B_DATA_DEPENDENT_SHAPE,
                           "one_hot of a non-int64 tensor, or without num_classes (the data's "
                           "maximum)");
    return cap_wrap_value(c->T, ptc_composite_one_hot(composer(c), x->v, classes), out);
}

/* binary_cross_entropy(_with_logits)(input, target, weight, ..., pos_weight). */
int cap_th_bce(cap_tcall *c, PyObject **out)
{
    V x, y, w, pw = NULL;
    ptc_reduction red;
    int rc;
    bool logits = strstr(c->m->name, "with_logits") != NULL;
    if ((rc = pair(c, &x, &y)) != CAP_NEXT || (rc = reduction_of(c, 5, &red)) != CAP_NEXT)
        return rc;
    if (logits && optional_tensor(c, ARG(6, "pos_weight"), "pos_weight", &pw) != CAP_NEXT)
        return CAP_BREAK;
    if (optional_tensor(c, ARG(2, "weight"), "weight", &w) != CAP_NEXT)
        return CAP_BREAK;
    V vals[4] = {x, y, w, pw};
    if (cap_amp_loss_inputs(c->T, vals, 4) != CAP_NEXT)
        return CAP_BREAK;
    return cap_wrap_value(c->T, ptc_composite_bce(composer(c), vals[0], vals[1], logits, vals[2],
                                                  vals[3], red),
                          out);
}

/* weight= and ignore_index= of nll_loss and cross_entropy. */
static int class_args(cap_tcall *c, V *weight, int64_t *ignore)
{
    PyObject *ig = ARG(4, "ignore_index");
    *ignore = -100;
    if (optional_tensor(c, ARG(2, "weight"), "weight", weight) != CAP_NEXT)
        return CAP_BREAK;
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
    ptc_reduction red;
    int rc;
    if ((rc = pair(c, &in, &tg)) != CAP_NEXT || (rc = reduction_of(c, 6, &red)) != CAP_NEXT ||
        (rc = class_args(c, &w, &ignore)) != CAP_NEXT)
        return rc;
    if (ptc_dtype_is_float(tg->type.dtype))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "nll_loss needs integer targets");
    V vals[2] = {in, w};
    if (cap_amp_loss_inputs(c->T, vals, 2) != CAP_NEXT)
        return CAP_BREAK;
    return cap_wrap_value(c->T, ptc_composite_nll(composer(c), vals[0], tg, vals[1], ignore, red),
                          out);
}

/* cross_entropy for class or probability targets. */
int cap_th_cross_entropy(cap_tcall *c, PyObject **out)
{
    V in = NULL, tg = NULL, w = NULL; /* set by pair() and class_args() when they return CAP_NEXT */
    int64_t ignore;
    ptc_reduction red;
    double ls;
    if (pair(c, &in, &tg) != CAP_NEXT || reduction_of(c, 6, &red) != CAP_NEXT ||
        class_args(c, &w, &ignore) != CAP_NEXT ||
        number(c, ARG(7, "label_smoothing"), 0.0, &ls) != CAP_NEXT)
        return CAP_BREAK;
    if (ls != 0.0)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "cross_entropy with label_smoothing");
    if (ptc_dtype_is_float(tg->type.dtype) && red == PTC_REDUCE_MEAN)
        for (int d = 0; d < in->type.ndim; d++)
            if (in->type.shape[d].sym)
                return cap_t_need_static(c->T, "cross_entropy mean over dynamic sizes");
    V vals[3] = {in, tg, w};
    if (cap_amp_loss_inputs(c->T, vals, 3) != CAP_NEXT)
        return CAP_BREAK;
    return cap_wrap_value(c->T,
                          ptc_composite_cross_entropy(composer(c), vals[0], vals[1], vals[2],
                                                      ignore, red),
                          out);
}

/* ---- scatters --------------------------------------------------------------------------- */

static bool has_elements(const ptc_ttype *t)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d].value == 0)
            return false;
    return true;
}

/* A scatter's operands: input, dim (normalised against it), index and the
 * argument after it named `other` (NULL where absent). The tensors have
 * static sizes and dim names a dim of input; a break otherwise (eager's
 * error for a bad dim comes from eager). */
typedef struct {
    cap_tensor *x;
    int dim;
    PyObject *index, *other;
} scatter_args;

static int scatter_common(cap_tcall *c, const char *other, scatter_args *a)
{
    PyObject *d = ARG(1, "dim");
    a->x = input_of(c, "input");
    a->index = ARG(2, "index");
    a->other = ARG(3, other);
    if (!a->x || !a->index || !cap_is_tensor(a->index) || !d || !PyLong_Check(d))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s(input, dim: int, index: tensor, ...)",
                           c->m->name);
    int nd = a->x->v->type.ndim;
    int64_t dv = PyLong_AsLongLong(d);
    if (nd == 0 || dv < -nd || dv >= nd)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s of a 0-dim tensor or a dim out of range",
                           c->m->name);
    a->dim = norm_dim(dv, nd);
    if (!ptc_ttype_is_static(&a->x->v->type) || !ptc_ttype_is_static(&cap_val(a->index)->type) ||
        (a->other && cap_is_tensor(a->other) && !ptc_ttype_is_static(&cap_val(a->other)->type)))
        return cap_t_need_static(c->T, "%s with dynamic sizes", c->m->name);
    return CAP_NEXT;
}

/* scatter/scatter_add/scatter_reduce's index against x and src (NULL for
 * a value): of x's rank, an integer dtype, no larger than src, nor than x
 * but at dim; src of x's dtype. Where eager raises, a break. */
static int scatter_shapes(cap_tcall *c, cap_tensor *x, V index, V src, int dim)
{
    const ptc_ttype *xt = &x->v->type, *it = &index->type, *st = src ? &src->type : NULL;
    bool ok = it->ndim == xt->ndim && (it->dtype == PTC_I64 || it->dtype == PTC_I32) &&
              (!st || (st->ndim == xt->ndim && st->dtype == xt->dtype &&
                       ptc_device_eq(st->device, xt->device)));
    for (int d = 0; ok && d < it->ndim; d++)
        ok = (d == dim || it->shape[d].value <= xt->shape[d].value) &&
             (!st || it->shape[d].value <= st->shape[d].value);
    if (!ok)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR,
                           "%s with an index or src that eager refuses (rank, size or dtype)",
                           c->m->name);
    return CAP_NEXT;
}

/* scatter(input, dim, index, src | value, *, reduce=None): reduce "add" is
 * scatter_add; "multiply" breaks. */
int cap_th_scatter(cap_tcall *c, PyObject **out)
{
    scatter_args a;
    int rc = scatter_common(c, ARG(-1, "value") ? "value" : "src", &a);
    if (rc != CAP_NEXT)
        return rc;
    cap_tensor *x = a.x;
    PyObject *index = a.index, *src = a.other, *reduce = ARG(-1, "reduce");
    int dim = a.dim;
    bool add =
        reduce && PyUnicode_Check(reduce) && PyUnicode_CompareWithASCIIString(reduce, "add") == 0;
    if (reduce && reduce != Py_None && !add)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with a reduce other than 'add'",
                           c->m->name);
    bool tensor = src && cap_is_tensor(src);
    if ((rc = scatter_shapes(c, x, cap_val(index), tensor ? cap_val(src) : NULL, dim)) != CAP_NEXT)
        return rc;
    V v = tensor ? cap_val(src) : NULL;
    ptc_arg value;
    if (!tensor &&
        (!src || cap_tconvert(c->T, src, PTC_PK_SCALAR, 0, &value, c->m->name) != CAP_NEXT))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs src: a tensor, or a number",
                           c->m->name);
    ptc_composer *k = composer(c);
    if (!tensor)
        v = ptc_composite_spread(k, cap_val(index), value, x->v->type.dtype);
    return cap_wrap_value(c->T, ptc_composite_scatter(k, x->v, dim, cap_val(index), v, add), out);
}

/* scatter_add(input, dim, index, src) and scatter_reduce(input, dim, index,
 * src, reduce, *, include_self=True) with reduce "sum" or "mean" (amax,
 * amin and prod break). */
int cap_th_scatter_reduce(cap_tcall *c, PyObject **out)
{
    scatter_args a;
    int rc = scatter_common(c, "src", &a);
    if (rc != CAP_NEXT)
        return rc;
    cap_tensor *x = a.x;
    PyObject *index = a.index, *src = a.other;
    int dim = a.dim;
    if (!src || !cap_is_tensor(src))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs src: a tensor", c->m->name);
    if ((rc = scatter_shapes(c, x, cap_val(index), cap_val(src), dim)) != CAP_NEXT)
        return rc;
    if (strncmp(short_name(c), "scatter_add", 11) == 0)
        return cap_wrap_value(
            c->T, ptc_composite_scatter(composer(c), x->v, dim, cap_val(index), cap_val(src), true),
            out);
    PyObject *reduce = ARG(4, "reduce"), *self = ARG(-1, "include_self");
    const char *r = reduce && PyUnicode_Check(reduce) ? PyUnicode_AsUTF8(reduce) : "";
    bool mean = strcmp(r, "mean") == 0;
    if ((!mean && strcmp(r, "sum") != 0) || (self && !PyBool_Check(self)) ||
        (mean && x->v->type.dtype == PTC_BOOL))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "%s with reduce '%s' (ptc traces 'sum' and 'mean')", c->m->name, r);
    return cap_wrap_value(c->T,
                          ptc_composite_scatter_reduce(composer(c), x->v, dim, cap_val(index),
                                                       cap_val(src), mean, self != Py_False),
                          out);
}

/* index_add(input, dim, index, source, *, alpha=1) and index_copy(input,
 * dim, index, source): index 1-D (int64 for index_copy, int32 too for
 * index_add), source x's shape but index's length at dim. */
int cap_th_index_scatter(cap_tcall *c, PyObject **out)
{
    scatter_args a;
    int rc = scatter_common(c, "source", &a);
    if (rc != CAP_NEXT)
        return rc;
    cap_tensor *x = a.x;
    PyObject *index = a.index, *src = a.other, *alpha = ARG(-1, "alpha");
    int dim = a.dim;
    bool add = strncmp(short_name(c), "index_add", 9) == 0;
    const ptc_ttype *xt = &x->v->type, *it = &cap_val(index)->type;
    const ptc_ttype *st = src && cap_is_tensor(src) ? &cap_val(src)->type : NULL;
    bool ok = st && it->ndim == 1 && st->ndim == xt->ndim && st->dtype == xt->dtype &&
              ptc_device_eq(st->device, xt->device) &&
              (it->dtype == PTC_I64 || (add && it->dtype == PTC_I32));
    for (int d = 0; ok && d < xt->ndim; d++)
        ok = st->shape[d].value == (d == dim ? it->shape[0].value : xt->shape[d].value);
    ptc_arg times = ptc_arg_none();
    if (ok && alpha && alpha != Py_None)
        ok = (PyLong_Check(alpha) || (PyFloat_Check(alpha) && ptc_dtype_is_float(xt->dtype))) &&
             cap_tconvert(c->T, alpha, PTC_PK_SCALAR, 0, &times, c->m->name) == CAP_NEXT;
    if (!ok)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR,
                           "%s with an index, source or alpha that eager refuses or converts",
                           c->m->name);
    return cap_wrap_value(c->T,
                          ptc_composite_index_scatter(composer(c), x->v, dim, cap_val(index),
                                                      cap_val(src), add, times),
                          out);
}

/* index_fill(input, dim, index, value): index 1-D int64, value a number or
 * a 0-dim tensor on x's device. */
int cap_th_index_fill(cap_tcall *c, PyObject **out)
{
    scatter_args a;
    int rc = scatter_common(c, "value", &a);
    if (rc != CAP_NEXT)
        return rc;
    cap_tensor *x = a.x;
    PyObject *index = a.index, *v = a.other;
    int dim = a.dim;
    const ptc_ttype *it = &cap_val(index)->type;
    ptc_arg value = ptc_arg_none();
    bool ok = it->ndim == 1 && it->dtype == PTC_I64 && v;
    if (ok && cap_is_tensor(v)) {
        const ptc_ttype *vt = &cap_val(v)->type;
        ok = vt->ndim == 0 && ptc_device_eq(vt->device, x->v->type.device);
        value = ptc_arg_value(cap_val(v));
    } else if (ok) {
        ok = cap_tconvert(c->T, v, PTC_PK_SCALAR, 0, &value, c->m->name) == CAP_NEXT;
    }
    if (!ok)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR,
                           "%s with an index or value that eager refuses (or a value on "
                           "another device)",
                           c->m->name);
    return cap_wrap_value(
        c->T, ptc_composite_index_fill(composer(c), x->v, dim, cap_val(index), value), out);
}

/* masked_scatter(input, mask, source): mask bool and broadcast to input's
 * shape (not the other way), source of input's dtype with elements. */
int cap_th_masked_scatter(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *mask = ARG(1, "mask"), *src = ARG(2, "source");
    if (!x || !mask || !src || !cap_is_tensor(mask) || !cap_is_tensor(src))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s(input, mask, source: tensors)", c->m->name);
    const ptc_ttype *xt = &x->v->type, *mt = &cap_val(mask)->type, *st = &cap_val(src)->type;
    if (!ptc_ttype_is_static(xt) || !ptc_ttype_is_static(mt) || !ptc_ttype_is_static(st))
        return cap_t_need_static(c->T, "%s with dynamic sizes", c->m->name);
    bool ok = mt->dtype == PTC_BOOL && mt->ndim <= xt->ndim && st->dtype == xt->dtype &&
              ptc_device_eq(st->device, xt->device) && has_elements(st);
    for (int d = 0; ok && d < mt->ndim; d++) {
        int64_t m = mt->shape[mt->ndim - 1 - d].value, n = xt->shape[xt->ndim - 1 - d].value;
        ok = m == n || m == 1;
    }
    if (!ok)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR,
                           "%s with a mask that is not bool or does not broadcast to the input, "
                           "or an empty source",
                           c->m->name);
    return cap_wrap_value(
        c->T, ptc_composite_masked_scatter(composer(c), x->v, cap_val(mask), cap_val(src)), out);
}
