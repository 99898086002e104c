/* Special handlers for torch.nn.functional and the reductions with
 * overloaded signatures: softmax's legacy dim, dropout in eval and training,
 * batch norm, pooling with stride=None, convolutions with string padding,
 * embedding, attention, var/std's `unbiased`, max/min's three forms, sort,
 * argsort (keyword-only stable=) and topk, and the
 * activations and norms that decompose into ops of ops.def.
 */
#include "capture/torch/torch.h"

#include <math.h>
#include <string.h>

#define ARG(i, name) cap_targ(c, i, name)

static bool functional(cap_tcall *c)
{
    return strncmp(c->m->name, "torch.nn.functional.", 20) == 0;
}

static cap_tensor *input_of(cap_tcall *c, const char *name)
{
    PyObject *v = ARG(0, name);
    if (!v)
        v = ARG(-1, "self");
    return v && cap_is_tensor(v) ? (cap_tensor *)v : NULL;
}

static bool truthy(PyObject *v, bool dflt)
{
    return v ? PyObject_IsTrue(v) == 1 : dflt;
}

static double number(PyObject *v, double dflt)
{
    return v && v != Py_None ? PyFloat_AsDouble(v) : dflt;
}

static int maybe_inplace(cap_tcall *c, cap_tensor *x, PyObject *inplace, int rc, PyObject **out)
{
    if (rc != CAP_NEXT || !truthy(inplace, false))
        return rc;
    PyObject *res = *out;
    *out = NULL;
    return cap_inplace(c->T, x, res, out);
}

/* ---- softmax and reductions ---------------------------------------------------------- */

int cap_th_softmax(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    PyObject *dim = ARG(1, "dim");
    PyObject *dtype = functional(c) ? ARG(3, "dtype") : ARG(2, "dtype");
    int nd = x->v->type.ndim;
    int64_t d;
    if (!dim || dim == Py_None) {
        if (!functional(c))
            return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: missing dim", c->m->name);
        d = nd == 0 || nd == 1 || nd == 3 ? 0 : 1; /* torch's legacy implicit dim */
    } else if (PyLong_Check(dim)) {
        d = PyLong_AsLongLong(dim);
    } else {
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: dim must be an int", c->m->name);
    }
    ptc_arg a[3] = {ptc_arg_value(x->v), ptc_arg_int(d), ptc_arg_none()};
    if (dtype && dtype != Py_None &&
        cap_tconvert(c->T, dtype, PTC_PK_DTYPE, 0, &a[2], c->m->name) != CAP_NEXT)
        return CAP_BREAK;
    return cap_build(c->T, (ptc_op)c->m->op, a, 3, out);
}

/* var/std's arguments (input, dim, unbiased or correction, keepdim) as the
 * op's a[4]: var(x, unbiased), var(x, dim, unbiased, keepdim) and the
 * keyword forms. */
static int var_args(cap_tcall *c, ptc_arg a[4])
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    PyObject *a1 = ARG(1, "dim"), *a2 = ARG(2, "unbiased"), *a3 = ARG(3, "keepdim");
    PyObject *dim = NULL, *unbiased = ARG(-1, "unbiased"), *keepdim = ARG(-1, "keepdim");
    PyObject *corr = ARG(-1, "correction");
    if (a1 && PyBool_Check(a1)) { /* var(x, unbiased) */
        unbiased = a1;
    } else {
        dim = a1;
        if (a2 && PyBool_Check(a2))
            unbiased = a2;
        if (a3)
            keepdim = a3;
    }
    a[0] = ptc_arg_value(x->v);
    a[1] = ptc_arg_none();
    a[2] = ptc_arg_int(1);
    a[3] = ptc_arg_bool(truthy(keepdim, false));
    if (dim && dim != Py_None && cap_int_list(c->T, dim, &a[1], c->m->name) != CAP_NEXT)
        return CAP_BREAK;
    if (corr && corr != Py_None) {
        if (cap_tconvert(c->T, corr, PTC_PK_SCALAR, 0, &a[2], c->m->name) != CAP_NEXT)
            return CAP_BREAK;
    } else if (unbiased) {
        a[2] = ptc_arg_int(truthy(unbiased, true) ? 1 : 0);
    }
    return CAP_NEXT;
}

int cap_th_var(cap_tcall *c, PyObject **out)
{
    ptc_arg a[4];
    int rc = var_args(c, a);
    return rc != CAP_NEXT ? rc : cap_build(c->T, (ptc_op)c->m->op, a, 4, out);
}

/* torch.var_mean / std_mean (op: PTC_OP_VAR or PTC_OP_STD): the tuple
 * (var or std, mean) over the same dims, two reductions of one input that
 * the kernel stage fuses. */
int cap_th_var_mean(cap_tcall *c, PyObject **out)
{
    ptc_arg a[4];
    int rc = var_args(c, a);
    if (rc != CAP_NEXT)
        return rc;
    ptc_value *spread = cap_build1(c->T, (ptc_op)c->m->op, a, 4);
    ptc_arg m[3] = {a[0], a[1], a[3]};
    ptc_value *mean = spread ? cap_build1(c->T, PTC_OP_MEAN, m, 3) : NULL;
    if (!mean)
        return CAP_BREAK;
    *out = Py_BuildValue("(NN)", cap_tensor_new(c->T, spread), cap_tensor_new(c->T, mean));
    return *out ? CAP_NEXT : CAP_ERR;
}

/* The (values, indices) pair (stolen) as the torch.return_types class at path. */
static int values_indices(const char *path, PyObject *pair, PyObject **out)
{
    PyObject *cls = cap_import_path(path);
    *out = cls && pair ? PyObject_CallOneArg_compat(cls, pair) : NULL;
    Py_XDECREF(cls);
    Py_XDECREF(pair);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* aminmax(input, *, dim=None, keepdim=False): (amin, amax) as
 * torch.return_types.aminmax; an empty input (eager raises) and one that
 * requires grad (eager's aminmax has no derivative: its backward raises)
 * break. */
int cap_th_aminmax(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *d = ARG(-1, "dim"), *keep = ARG(-1, "keepdim");
    int64_t dim = d && PyLong_Check(d) ? PyLong_AsLongLong(d) : 0;
    const ptc_ttype *t = x ? &x->v->type : NULL;
    bool empty = false;
    for (int i = 0; t && i < t->ndim; i++)
        empty |= !t->shape[i].sym && t->shape[i].value == 0;
    if (!t || empty || t->dtype == PTC_BOOL || (d && d != Py_None && !PyLong_Check(d)) ||
        (keep && !PyBool_Check(keep)) || (t->requires_grad && c->T->grad_enabled))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "aminmax of an empty or bool tensor, with a dim not an int, or of "
                           "a tensor that requires grad (eager's has no derivative)");
    ptc_arg a[3] = {ptc_arg_value(x->v),
                    d && d != Py_None ? ptc_arg_ints(c->T->arena, &dim, 1)
                                      : ptc_arg_ints(c->T->arena, NULL, 0),
                    ptc_arg_bool(keep == Py_True)};
    ptc_value *lo = cap_build1(c->T, PTC_OP_AMIN, a, 3);
    ptc_value *hi = lo ? cap_build1(c->T, PTC_OP_AMAX, a, 3) : NULL;
    if (!hi)
        return CAP_BREAK;
    return values_indices("torch.return_types.aminmax",
                          Py_BuildValue("(NN)", cap_tensor_new(c->T, lo), cap_tensor_new(c->T, hi)),
                          out);
}

/* kthvalue(input, k, dim=-1, keepdim=False), median(input, dim=-1,
 * keepdim=False) and nanmedian (without dim: over every element, the value
 * only) along a static dim with elements, k within it; as
 * torch.return_types. NaNs sort last, as torch's. */
int cap_th_order_stat(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    const char *name = strrchr(c->m->name, '.') + 1;
    ptc_order_stat kind = strcmp(name, "kthvalue") == 0 ? PTC_ORDER_KTH
                          : strcmp(name, "median") == 0 ? PTC_ORDER_MEDIAN
                                                        : PTC_ORDER_NANMEDIAN;
    bool kth = kind == PTC_ORDER_KTH;
    PyObject *k = kth ? ARG(1, "k") : NULL, *dim = ARG(kth ? 2 : 1, "dim");
    PyObject *keep = ARG(kth ? 3 : 2, "keepdim");
    bool whole = !kth && (!dim || dim == Py_None);
    const ptc_ttype *t = x ? &x->v->type : NULL;
    int nd = t ? t->ndim : 0;
    int64_t d = dim && PyLong_Check(dim) ? PyLong_AsLongLong(dim) : -1;
    bool ok = t && t->dtype != PTC_BOOL && ptc_ttype_is_static(t) &&
              (!kth || (k && PyLong_Check(k))) && (whole || !dim || PyLong_Check(dim)) &&
              (!keep || PyBool_Check(keep)) && (whole || (nd > 0 && d >= -nd && d < nd));
    ptc_value *v = ok ? x->v : NULL;
    if (ok && whole) { /* every element, as one line */
        int64_t flat = -1;
        ptc_arg r[2] = {ptc_arg_value(v), ptc_arg_ints(c->T->arena, &flat, 1)};
        v = cap_build1(c->T, PTC_OP_RESHAPE, r, 2);
        d = 0;
    }
    int dn = v ? (int)(d < 0 ? d + v->type.ndim : d) : 0;
    int64_t n = v ? (v->type.ndim ? v->type.shape[dn].value : 1) : 0;
    int64_t kv = kth ? PyLong_AsLongLong(k) : 0;
    if (!v || v->type.ndim == 0 || n == 0 || (kth && (kv < 1 || kv > n)))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "%s of a 0-dim, empty or bool tensor, with symbolic sizes, or with "
                           "arguments eager refuses",
                           c->m->name);
    ptc_value *values, *indices;
    ptc_composite_order_stat(cap_composer(c->T), v, dn, kind, kv - 1, keep == Py_True, &values,
                             &indices);
    if (!values || !indices)
        return CAP_BREAK;
    if (whole)
        return cap_wrap_value(c->T, values, out);
    char path[48];
    snprintf(path, sizeof path, "torch.return_types.%s", name);
    return values_indices(
        path, Py_BuildValue("(NN)", cap_tensor_new(c->T, values), cap_tensor_new(c->T, indices)),
        out);
}

int cap_th_max_min(cap_tcall *c, PyObject **out)
{
    bool is_max = c->m->op == 1;
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    PyObject *d = ARG(1, "dim"), *other = ARG(-1, "other"), *keepdim = ARG(2, "keepdim");
    if (d && cap_is_tensor(d))
        other = d, d = NULL;
    if (other) {
        ptc_arg a[2] = {ptc_arg_value(x->v), ptc_arg_value(cap_val(other))};
        return cap_build(c->T, is_max ? PTC_OP_MAXIMUM : PTC_OP_MINIMUM, a, 2, out);
    }
    if (!d || d == Py_None) {
        ptc_arg a[2] = {ptc_arg_value(x->v), ptc_arg_ints(c->T->arena, NULL, 0)};
        return cap_build(c->T, is_max ? PTC_OP_AMAX : PTC_OP_AMIN, a, 2, out);
    }
    if (!PyLong_Check(d))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: dim must be an int", c->m->name);
    bool kd = truthy(keepdim, false);
    int64_t dim = PyLong_AsLongLong(d);
    ptc_arg va[3] = {ptc_arg_value(x->v), ptc_arg_ints(c->T->arena, &dim, 1), ptc_arg_bool(kd)};
    ptc_arg ia[3] = {ptc_arg_value(x->v), ptc_arg_int(dim), ptc_arg_bool(kd)};
    ptc_value *v = cap_build1(c->T, is_max ? PTC_OP_AMAX : PTC_OP_AMIN, va, 3);
    ptc_value *i = v ? cap_build1(c->T, is_max ? PTC_OP_ARGMAX : PTC_OP_ARGMIN, ia, 3) : NULL;
    if (!i)
        return CAP_BREAK;
    PyObject *pair = Py_BuildValue("(NN)", cap_tensor_new(c->T, v), cap_tensor_new(c->T, i));
    return values_indices(is_max ? "torch.return_types.max" : "torch.return_types.min", pair, out);
}

/* topk(k, dim=-1, largest=True, sorted=True) as torch.return_types.topk. */
static int topk(cap_tcall *c, cap_tensor *x, PyObject **out)
{
    PyObject *k = ARG(1, "k"), *d = ARG(2, "dim"), *largest = ARG(3, "largest");
    PyObject *sorted = ARG(4, "sorted"), *pair;
    if (!k || !PyLong_Check(k) || (d && d != Py_None && !PyLong_Check(d)))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "topk with a k or dim not an int");
    ptc_arg a[5] = {ptc_arg_value(x->v), ptc_arg_int(PyLong_AsLongLong(k)),
                    ptc_arg_int(d && d != Py_None ? PyLong_AsLongLong(d) : -1),
                    ptc_arg_bool(truthy(largest, true)), ptc_arg_bool(truthy(sorted, true))};
    int rc = cap_build(c->T, PTC_OP_TOPK, a, 5, &pair);
    return rc != CAP_NEXT ? rc : values_indices("torch.return_types.topk", pair, out);
}

/* cummax(dim) (op 3) and cummin (op 4) as torch.return_types.cummax /
 * cummin. */
static int cum_extreme(cap_tcall *c, cap_tensor *x, PyObject **out)
{
    PyObject *d = ARG(1, "dim"), *pair;
    bool max = c->m->op == 3;
    if (!d || !PyLong_Check(d))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with a dim not an int", c->m->name);
    ptc_arg a[2] = {ptc_arg_value(x->v), ptc_arg_int(PyLong_AsLongLong(d))};
    int rc = cap_build(c->T, max ? PTC_OP_CUMMAX : PTC_OP_CUMMIN, a, 2, &pair);
    return rc != CAP_NEXT ? rc
                          : values_indices(max ? "torch.return_types.cummax"
                                               : "torch.return_types.cummin",
                                           pair, out);
}

/* sort(dim, descending, *, stable) and argsort (op 1: the indices only):
 * one sort op; dim and descending by position or keyword, stable by
 * keyword, as torch's signatures take them. topk is op 2, cummax and
 * cummin ops 3 and 4. */
int cap_th_sort(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *into = ARG(-1, "out");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    if (into && into != Py_None)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with out=", c->m->name);
    if (c->m->op == 2)
        return topk(c, x, out);
    if (c->m->op >= 3)
        return cum_extreme(c, x, out);
    PyObject *d = ARG(1, "dim"), *desc = ARG(2, "descending"), *stable = ARG(-1, "stable");
    if (d && d != Py_None && !PyLong_Check(d))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with a named dim", c->m->name);
    ptc_arg a[4] = {ptc_arg_value(x->v), ptc_arg_int(d && d != Py_None ? PyLong_AsLongLong(d) : -1),
                    ptc_arg_bool(truthy(desc, false)), ptc_arg_bool(truthy(stable, false))};
    PyObject *pair;
    int rc = cap_build(c->T, PTC_OP_SORT, a, 4, &pair);
    if (rc != CAP_NEXT)
        return rc;
    if (c->m->op == 1) {
        *out = Py_NewRef(PyTuple_GetItem(pair, 1));
        Py_DECREF(pair);
        return CAP_NEXT;
    }
    return values_indices("torch.return_types.sort", pair, out);
}

int cap_th_floor_divide(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *in = ARG(0, "input"), *o = ARG(1, "other");
    /* torch.floor_divide(5, x) takes a number as input, as torch.div does */
    bool number = !x && in && !(c->m->flags & TM_METHOD) && (PyLong_Check(in) || PyFloat_Check(in));
    if ((!x && !number) || !o)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "floor_divide(tensor, other)");
    ptc_arg a[3] = {x ? ptc_arg_value(x->v) : ptc_arg_none(), ptc_arg_none(),
                    ptc_arg_str(c->T->arena, "floor")};
    if (cap_tconvert(c->T, o, PTC_PK_TENSOR_SCALAR, 0, &a[1], "floor_divide") != CAP_NEXT ||
        (number && cap_tconvert(c->T, in, PTC_PK_SCALAR, 0, &a[0], "floor_divide") != CAP_NEXT))
        return CAP_BREAK;
    if (number) {
        ptc_value *w = cap_wrapped_scalar(c->T, a[0], &a[1]);
        if (!w)
            return CAP_BREAK;
        a[0] = ptc_arg_value(w);
    }
    return cap_build(c->T, PTC_OP_DIV, a, 3, out);
}

/* x to dtype dt (x itself when it has it; NULL after a break). */
static ptc_value *as_dtype(cap_trace *T, ptc_value *x, ptc_dtype dt)
{
    if (x->type.dtype == dt)
        return x;
    ptc_arg a[2] = {ptc_arg_value(x), ptc_arg_dtype(dt)};
    return cap_build1(T, PTC_OP_TO, a, 2);
}

int cap_th_square(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "square needs a tensor");
    /* pow(x, 2): a bool tensor squares to int64 */
    ptc_value *v = x->v->type.dtype == PTC_BOOL ? as_dtype(c->T, x->v, PTC_I64) : x->v;
    if (!v)
        return CAP_BREAK;
    ptc_arg a[2] = {ptc_arg_value(v), ptc_arg_value(v)};
    return cap_build(c->T, PTC_OP_MUL, a, 2, out);
}

/* float_power(input, exponent): pow computed in float64, whatever the
 * operands' dtypes, as torch does (a number as input is wrapped as one). */
int cap_th_float_power(cap_tcall *c, PyObject **out)
{
    PyObject *in = ARG(0, "input") ? ARG(0, "input") : ARG(-1, "self"), *e = ARG(1, "exponent");
    ptc_arg a[2];
    if (!in || !e || (!cap_is_tensor(in) && !cap_is_tensor(e)))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s(tensor, exponent)", c->m->name);
    if (cap_tconvert(c->T, in, PTC_PK_TENSOR_SCALAR, 0, &a[0], c->m->name) != CAP_NEXT ||
        cap_tconvert(c->T, e, PTC_PK_TENSOR_SCALAR, 0, &a[1], c->m->name) != CAP_NEXT)
        return CAP_BREAK;
    for (int i = 0; i < 2; i++)
        if (a[i].kind == PTC_ARG_VALUE && !(a[i].v = as_dtype(c->T, a[i].v, PTC_F64)))
            return CAP_BREAK;
    if (a[0].kind != PTC_ARG_VALUE) {
        ptc_value *w = cap_wrapped_scalar(c->T, a[0], &a[1]);
        if (!w)
            return CAP_BREAK;
        a[0] = ptc_arg_value(w);
    }
    return cap_build(c->T, PTC_OP_POW, a, 2, out);
}

int cap_th_clamp_one(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *v = ARG(1, c->m->op ? "max" : "min");
    if (!x || !v)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s(tensor, bound)", c->m->name);
    ptc_arg a[3] = {ptc_arg_value(x->v), ptc_arg_none(), ptc_arg_none()};
    if (cap_tconvert(c->T, v, PTC_PK_TENSOR_SCALAR_OPT, 0, &a[1 + c->m->op], c->m->name) != CAP_NEXT)
        return CAP_BREAK;
    return cap_build(c->T, PTC_OP_CLAMP, a, 3, out);
}

/* ||x||_p over dims, built into the trace (ptc_composite_pnorm). */
static ptc_value *pnorm(cap_trace *T, ptc_value *x, double p, ptc_arg dims, bool keepdim)
{
    return ptc_composite_pnorm(cap_composer(T), x, p, dims, keepdim);
}

static int norm_p(cap_tcall *c, PyObject *p, double *out)
{
    if (!p || p == Py_None || (PyUnicode_Check(p) && PyUnicode_CompareWithASCIIString(p, "fro") == 0)) {
        *out = 2;
        return CAP_NEXT;
    }
    if (PyFloat_Check(p) || PyLong_Check(p)) {
        *out = PyFloat_AsDouble(p);
        return *out > 0 ? CAP_NEXT : cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with p <= 0", c->m->name);
    }
    return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with p=%s", c->m->name, cap_tpname(Py_TYPE(p)));
}

int cap_th_norm(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        x = (cap_tensor *)(ARG(0, "x") && cap_is_tensor(ARG(0, "x")) ? ARG(0, "x") : NULL);
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    if (!ptc_dtype_is_float(x->v->type.dtype))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s of a %s tensor (eager raises)", c->m->name,
                           ptc_dtype_name(x->v->type.dtype));
    bool linalg = c->m->op == 1;
    PyObject *p = ARG(1, linalg ? "ord" : "p"), *dim = ARG(2, "dim"), *keepdim = ARG(3, "keepdim");
    if (ARG(-1, "dtype") && ARG(-1, "dtype") != Py_None)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with dtype", c->m->name);
    double pv = 2;
    if (norm_p(c, p, &pv) != CAP_NEXT)
        return CAP_BREAK;
    ptc_arg dims = ptc_arg_none();
    if (dim && dim != Py_None && cap_int_list(c->T, dim, &dims, c->m->name) != CAP_NEXT)
        return CAP_BREAK;
    return cap_wrap_value(c->T, pnorm(c->T, x->v, pv, dims, truthy(keepdim, false)), out);
}

/* Two floating tensors of one dtype and rank at positions 0 and 1 (names a
 * and b), into v[2]; a break otherwise (eager's error or promotion). */
static int float_pair(cap_tcall *c, const char *a, const char *b, ptc_value **v)
{
    PyObject *x = ARG(0, a), *y = ARG(1, b);
    bool ok = x && y && cap_is_tensor(x) && cap_is_tensor(y);
    const ptc_ttype *xt = ok ? &cap_val(x)->type : NULL, *yt = ok ? &cap_val(y)->type : NULL;
    if (!ok || !ptc_dtype_is_float(xt->dtype) || xt->dtype != yt->dtype || xt->ndim != yt->ndim ||
        xt->ndim == 0)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "%s of other than two floating tensors of one dtype and rank",
                           c->m->name);
    v[0] = cap_val(x);
    v[1] = cap_val(y);
    return CAP_NEXT;
}

/* cosine_similarity(x1, x2, dim=1, eps=1e-8): each operand divided by its
 * norm along dim (at least eps), the products summed along dim. */
int cap_th_cosine_similarity(cap_tcall *c, PyObject **out)
{
    ptc_value *v[2], *unit[2];
    PyObject *dim = ARG(2, "dim");
    if (float_pair(c, "x1", "x2", v) != CAP_NEXT)
        return CAP_BREAK;
    if (dim && !PyLong_Check(dim))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "cosine_similarity with a dim not an int");
    int64_t d = dim ? PyLong_AsLongLong(dim) : 1;
    ptc_arg dims = ptc_arg_ints(c->T->arena, &d, 1);
    for (int i = 0; i < 2; i++) {
        ptc_value *n = pnorm(c->T, v[i], 2, dims, true);
        ptc_arg cl[3] = {ptc_arg_value(n), ptc_arg_float(number(ARG(3, "eps"), 1e-8)),
                         ptc_arg_none()};
        ptc_value *den = n ? cap_build1(c->T, PTC_OP_CLAMP, cl, 3) : NULL;
        ptc_arg dv[2] = {ptc_arg_value(v[i]), ptc_arg_value(den)};
        if (!(unit[i] = den ? cap_build1(c->T, PTC_OP_DIV, dv, 2) : NULL))
            return CAP_BREAK;
    }
    ptc_arg m[2] = {ptc_arg_value(unit[0]), ptc_arg_value(unit[1])};
    ptc_value *prod = cap_build1(c->T, PTC_OP_MUL, m, 2);
    ptc_arg s[3] = {ptc_arg_value(prod), dims, ptc_arg_bool(false)};
    return cap_wrap_value(c->T, prod ? cap_build1(c->T, PTC_OP_SUM, s, 3) : NULL, out);
}

/* pairwise_distance(x1, x2, p=2, eps=1e-6, keepdim=False): the p-norm of
 * x1 - x2 + eps along the last dim. */
int cap_th_pairwise_distance(cap_tcall *c, PyObject **out)
{
    ptc_value *v[2];
    double p = 2;
    if (float_pair(c, "x1", "x2", v) != CAP_NEXT || norm_p(c, ARG(2, "p"), &p) != CAP_NEXT)
        return CAP_BREAK;
    return cap_wrap_value(c->T,
                          ptc_composite_pairwise_distance(cap_composer(c->T), v[0], v[1], p,
                                                          number(ARG(3, "eps"), 1e-6),
                                                          truthy(ARG(4, "keepdim"), false)),
                          out);
}

/* Two ints from an int or a pair (absent: dflt for both), into v[2]. */
static int int_pair(cap_tcall *c, PyObject *p, int64_t dflt, int64_t *v)
{
    ptc_arg a;
    v[0] = v[1] = dflt;
    if (!p)
        return CAP_NEXT;
    if (cap_tconvert(c->T, p, PTC_PK_INT_LIST, 2, &a, c->m->name) != CAP_NEXT)
        return CAP_BREAK;
    for (int i = 0; i < 2; i++)
        v[i] = a.is.d[a.is.n == 1 ? 0 : i].value;
    return CAP_NEXT;
}

/* unfold(input, kernel_size, dilation=1, padding=0, stride=1) and
 * fold(input, output_size, kernel_size, ...) of static sizes, batched or
 * not; where eager raises (sizes that do not fit) a break. */
int cap_th_unfold(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    bool fold = strcmp(c->m->name + strlen(c->m->name) - 5, ".fold") == 0;
    int at = fold ? 2 : 1; /* kernel_size's position */
    ptc_unfold u;
    if (!x || int_pair(c, ARG(at, "kernel_size"), -1, u.kernel) != CAP_NEXT ||
        int_pair(c, ARG(at + 1, "dilation"), 1, u.dilation) != CAP_NEXT ||
        int_pair(c, ARG(at + 2, "padding"), 0, u.padding) != CAP_NEXT ||
        int_pair(c, ARG(at + 3, "stride"), 1, u.stride) != CAP_NEXT ||
        (fold && int_pair(c, ARG(1, "output_size"), -1, u.size) != CAP_NEXT))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s(input, ...) with int or pair sizes",
                           c->m->name);
    const ptc_ttype *t = &x->v->type;
    int batched = t->ndim == (fold ? 3 : 4), nd = t->ndim;
    bool ok = ptc_ttype_is_static(t) && (batched || nd == (fold ? 2 : 3));
    if (ok && !fold)
        u.size[0] = t->shape[nd - 2].value, u.size[1] = t->shape[nd - 1].value;
    for (int i = 0; ok && i < 2; i++)
        ok = u.kernel[i] > 0 && u.dilation[i] > 0 && u.padding[i] >= 0 && u.stride[i] > 0 &&
             u.size[i] > 0 && ptc_unfold_blocks(&u, i) > 0;
    int64_t places = u.kernel[0] * u.kernel[1];
    if (ok && fold)
        ok = t->shape[nd - 2].value % places == 0 &&
             t->shape[nd - 1].value == ptc_unfold_blocks(&u, 0) * ptc_unfold_blocks(&u, 1);
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "%s with symbolic sizes or sizes that eager refuses", c->m->name);
    ptc_composer *k = cap_composer(c->T);
    ptc_arg one[2] = {ptc_arg_value(x->v), ptc_arg_int(0)};
    ptc_value *v = batched ? x->v : cap_build1(c->T, PTC_OP_UNSQUEEZE, one, 2);
    v = fold ? ptc_composite_fold(k, v, &u) : ptc_composite_unfold(k, v, &u);
    if (batched || !v)
        return cap_wrap_value(c->T, v, out);
    ptc_arg none[2] = {ptc_arg_value(v), ptc_arg_ints(c->T->arena, (int64_t[]){0}, 1)};
    return cap_wrap_value(c->T, cap_build1(c->T, PTC_OP_SQUEEZE, none, 2), out);
}

int cap_th_normalize(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "normalize needs a tensor");
    if (ARG(4, "out") && ARG(4, "out") != Py_None)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "normalize(out=)");
    double p = number(ARG(1, "p"), 2.0), eps = number(ARG(3, "eps"), 1e-12);
    PyObject *dim = ARG(2, "dim");
    int64_t d = dim && PyLong_Check(dim) ? PyLong_AsLongLong(dim) : 1;
    ptc_value *n = pnorm(c->T, x->v, p, ptc_arg_ints(c->T->arena, &d, 1), true);
    ptc_arg cl[3] = {ptc_arg_value(n), ptc_arg_float(eps), ptc_arg_none()};
    ptc_value *den = n ? cap_build1(c->T, PTC_OP_CLAMP, cl, 3) : NULL;
    ptc_arg dv[2] = {ptc_arg_value(x->v), ptc_arg_value(den)};
    return cap_wrap_value(c->T, den ? cap_build1(c->T, PTC_OP_DIV, dv, 2) : NULL, out);
}

/* ---- activations ------------------------------------------------------------------------ */

int cap_th_relu6(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "relu6 needs a tensor");
    ptc_arg a[3] = {ptc_arg_value(x->v), ptc_arg_int(0), ptc_arg_int(6)};
    return maybe_inplace(c, x, ARG(1, "inplace"), cap_build(c->T, PTC_OP_HARDTANH, a, 3, out), out);
}

int cap_th_mish(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "mish needs a tensor");
    ptc_arg a[1] = {ptc_arg_value(x->v)};
    ptc_value *sp = cap_build1(c->T, PTC_OP_SOFTPLUS, a, 1);
    ptc_arg t[1] = {ptc_arg_value(sp)};
    ptc_value *th = sp ? cap_build1(c->T, PTC_OP_TANH, t, 1) : NULL;
    ptc_arg m[2] = {ptc_arg_value(x->v), ptc_arg_value(th)};
    int rc = cap_wrap_value(c->T, th ? cap_build1(c->T, PTC_OP_MUL, m, 2) : NULL, out);
    return maybe_inplace(c, x, ARG(1, "inplace"), rc, out);
}

int cap_th_logsigmoid(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "logsigmoid needs a tensor");
    ptc_arg a[1] = {ptc_arg_value(x->v)};
    ptc_value *n = cap_build1(c->T, PTC_OP_NEG, a, 1);
    ptc_arg s[1] = {ptc_arg_value(n)};
    ptc_value *sp = n ? cap_build1(c->T, PTC_OP_SOFTPLUS, s, 1) : NULL;
    ptc_arg r[1] = {ptc_arg_value(sp)};
    return cap_wrap_value(c->T, sp ? cap_build1(c->T, PTC_OP_NEG, r, 1) : NULL, out);
}

int cap_th_glu(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *dim = ARG(1, "dim");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "glu needs a tensor");
    ptc_arg a[3] = {ptc_arg_value(x->v), ptc_arg_int(2),
                    ptc_arg_int(dim && PyLong_Check(dim) ? PyLong_AsLongLong(dim) : -1)};
    ptc_error err;
    ptc_node *n = ptc_build(c->T->g, PTC_OP_CHUNK, a, 3, &err);
    if (!n)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s", err.msg);
    cap_t_note_node(c->T, n);
    ptc_arg s[1] = {ptc_arg_value(n->outs[1])};
    ptc_value *sg = cap_build1(c->T, PTC_OP_SIGMOID, s, 1);
    ptc_arg m[2] = {ptc_arg_value(n->outs[0]), ptc_arg_value(sg)};
    return cap_wrap_value(c->T, sg ? cap_build1(c->T, PTC_OP_MUL, m, 2) : NULL, out);
}

/* ---- dropout and batch norm ----------------------------------------------------------- */

int cap_th_dropout(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "dropout needs a tensor");
    bool fn = c->m->op == 0;
    double p = number(ARG(1, "p"), 0.5);
    bool training = truthy(ARG(2, fn ? "training" : "train"), fn);
    PyObject *inplace = fn ? ARG(3, "inplace") : NULL;
    if (p < 0 || p > 1) {
        PyErr_Format(PyExc_ValueError, "dropout probability has to be between 0 and 1, but got %g", p);
        return CAP_ERR;
    }
    if (!training || p == 0) {
        *out = Py_NewRef((PyObject *)x);
        return CAP_NEXT;
    }
    ptc_arg a[4] = {ptc_arg_value(x->v), ptc_arg_float(p), ptc_arg_bool(true),
                    ptc_arg_int((int64_t)cap_t_next_seed(c->T))};
    return maybe_inplace(c, x, inplace, cap_build(c->T, PTC_OP_DROPOUT, a, 4, out), out);
}

int cap_th_dropout_nd(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "dropout needs a tensor");
    double p = number(ARG(1, "p"), 0.5);
    if (!truthy(ARG(2, "training"), false) || p == 0) {
        *out = Py_NewRef((PyObject *)x);
        return CAP_NEXT;
    }
    return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s in training", c->m->name);
}

int cap_th_batch_norm(cap_tcall *c, PyObject **out)
{
    bool fn = c->m->op == 0;
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "batch_norm needs a tensor");
    /* F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
       torch.batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn) */
    PyObject *rm = fn ? ARG(1, "running_mean") : ARG(3, "running_mean");
    PyObject *rv = fn ? ARG(2, "running_var") : ARG(4, "running_var");
    PyObject *w = fn ? ARG(3, "weight") : ARG(1, "weight");
    PyObject *b = fn ? ARG(4, "bias") : ARG(2, "bias");
    bool training = truthy(ARG(5, "training"), false);
    double momentum = number(ARG(6, "momentum"), 0.1), eps = number(ARG(7, "eps"), 1e-5);
    bool update = training && rm && rm != Py_None;
    if (update && (!cap_is_tensor(rm) || !cap_is_tensor(rv)))
        return cap_t_break(c->T, CAP_B_INPLACE_INPUT,
                           "batch_norm updating running statistics that are not tensors");
    ptc_arg a[8] = {ptc_arg_value(x->v)};
    PyObject *t[4] = {w, b, rm, rv};
    for (int i = 0; i < 4; i++)
        if (cap_tconvert(c->T, t[i] ? t[i] : Py_None, PTC_PK_TENSOR_OPT, 0, &a[1 + i], "batch_norm") != CAP_NEXT)
            return CAP_BREAK;
    a[5] = ptc_arg_bool(training);
    a[6] = ptc_arg_float(momentum);
    a[7] = ptc_arg_float(eps);
    PyObject *outs = NULL;
    int rc = cap_build(c->T, PTC_OP_BATCH_NORM, a, 8, &outs);
    if (rc != CAP_NEXT)
        return rc;
    if (update) {
        /* the running statistics move in place: functional outputs 1 and 2 */
        cap_tensor *stats[2] = {(cap_tensor *)rm, (cap_tensor *)rv};
        for (int i = 0; i < 2 && rc == CAP_NEXT; i++)
            rc = cap_check_mutate(c->T, stats[i], cap_val(PyTuple_GetItem(outs, 1 + i)));
        for (int i = 0; i < 2 && rc == CAP_NEXT; i++)
            rc = cap_mutate(c->T, stats[i], cap_val(PyTuple_GetItem(outs, 1 + i)));
    }
    if (rc == CAP_NEXT)
        *out = Py_NewRef(PyTuple_GetItem(outs, 0));
    Py_DECREF(outs);
    return rc;
}

/* ---- pooling ------------------------------------------------------------------------------- */

static int ints_or_default(cap_tcall *c, PyObject *v, ptc_arg *out)
{
    if (!v || v == Py_None) {
        *out = ptc_arg_ints(c->T->arena, NULL, 0);
        return CAP_NEXT;
    }
    return cap_int_list(c->T, v, out, c->m->name);
}

int cap_th_max_pool2d(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "max_pool2d needs a tensor");
    bool indices = c->m->op == 1 || truthy(ARG(6, "return_indices"), false);
    PyObject *k = ARG(1, "kernel_size"), *s = ARG(2, "stride"), *p = ARG(3, "padding"),
             *d = ARG(4, "dilation"), *cm = ARG(5, "ceil_mode");
    ptc_arg a[6] = {ptc_arg_value(x->v)};
    if (!k || cap_tconvert(c->T, k, PTC_PK_INT_LIST, 2, &a[1], "max_pool2d") != CAP_NEXT ||
        ints_or_default(c, s, &a[2]) != CAP_NEXT)
        return CAP_BREAK;
    if (a[2].is.n == 1)
        a[2] = ptc_arg_ints(c->T->arena, (int64_t[]){a[2].is.d[0].value, a[2].is.d[0].value}, 2);
    PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1);
    int rc = cap_tconvert(c->T, p ? p : zero, PTC_PK_INT_LIST, 2, &a[3], "max_pool2d");
    if (rc == CAP_NEXT)
        rc = cap_tconvert(c->T, d ? d : one, PTC_PK_INT_LIST, 2, &a[4], "max_pool2d");
    Py_DECREF(zero);
    Py_DECREF(one);
    if (rc != CAP_NEXT)
        return rc;
    a[5] = ptc_arg_bool(truthy(cm, false));
    return cap_build(c->T, indices ? PTC_OP_MAX_POOL2D_WITH_INDICES : PTC_OP_MAX_POOL2D, a, 6, out);
}

int cap_th_avg_pool2d(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    if (!x)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "avg_pool2d needs a tensor");
    PyObject *k = ARG(1, "kernel_size"), *s = ARG(2, "stride"), *p = ARG(3, "padding"),
             *cm = ARG(4, "ceil_mode"), *cip = ARG(5, "count_include_pad"),
             *div = ARG(6, "divisor_override");
    ptc_arg a[7] = {ptc_arg_value(x->v)};
    PyObject *zero = PyLong_FromLong(0);
    int rc = k ? cap_tconvert(c->T, k, PTC_PK_INT_LIST, 2, &a[1], "avg_pool2d") : CAP_BREAK;
    if (rc == CAP_NEXT)
        rc = ints_or_default(c, s, &a[2]);
    if (rc == CAP_NEXT && a[2].is.n == 1)
        a[2] = ptc_arg_ints(c->T->arena, (int64_t[]){a[2].is.d[0].value, a[2].is.d[0].value}, 2);
    if (rc == CAP_NEXT)
        rc = cap_tconvert(c->T, p ? p : zero, PTC_PK_INT_LIST, 2, &a[3], "avg_pool2d");
    Py_DECREF(zero);
    if (rc != CAP_NEXT)
        return rc == CAP_BREAK && !k ? cap_t_break(c->T, CAP_B_TRACE_ERROR, "avg_pool2d needs kernel_size") : rc;
    a[4] = ptc_arg_bool(truthy(cm, false));
    a[5] = ptc_arg_bool(truthy(cip, true));
    a[6] = div && div != Py_None ? ptc_arg_int(PyLong_AsLongLong(div)) : ptc_arg_none();
    return cap_build(c->T, PTC_OP_AVG_POOL2D, a, 7, out);
}

int cap_th_adaptive_avg_pool2d(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *os = ARG(1, "output_size");
    if (!x || !os)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "adaptive_avg_pool2d(tensor, output_size)");
    const ptc_ttype *t = &x->v->type;
    int64_t size[2];
    for (int i = 0; i < 2; i++) {
        PyObject *v = PyLong_Check(os) ? Py_NewRef(os) : PySequence_GetItem(os, i);
        if (!v)
            return CAP_ERR;
        if (v == Py_None)
            size[i] = t->ndim >= 2 ? t->shape[t->ndim - 2 + i].value : 1;
        else
            size[i] = PyLong_AsLongLong(v);
        Py_DECREF(v);
    }
    ptc_arg a[2] = {ptc_arg_value(x->v), ptc_arg_ints(c->T->arena, size, 2)};
    return cap_build(c->T, PTC_OP_ADAPTIVE_AVG_POOL2D, a, 2, out);
}

int cap_th_adaptive_avg_pool1d(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *os = ARG(1, "output_size");
    if (!x || !os)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "adaptive_avg_pool1d(tensor, output_size)");
    PyObject *v = PyLong_Check(os) ? Py_NewRef(os) : PySequence_GetItem(os, 0);
    int64_t n = v ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    ptc_arg u[2] = {ptc_arg_value(x->v), ptc_arg_int(-2)};
    ptc_value *x4 = cap_build1(c->T, PTC_OP_UNSQUEEZE, u, 2);
    ptc_arg p[2] = {ptc_arg_value(x4), ptc_arg_ints(c->T->arena, (int64_t[]){1, n}, 2)};
    ptc_value *pooled = x4 ? cap_build1(c->T, PTC_OP_ADAPTIVE_AVG_POOL2D, p, 2) : NULL;
    int64_t d = -2;
    ptc_arg s[2] = {ptc_arg_value(pooled), ptc_arg_ints(c->T->arena, &d, 1)};
    return cap_wrap_value(c->T, pooled ? cap_build1(c->T, PTC_OP_SQUEEZE, s, 2) : NULL, out);
}

/* ---- convolution, padding, embedding, attention ---------------------------------------------- */

int cap_th_conv(cap_tcall *c, PyObject **out)
{
    ptc_op op = (ptc_op)c->m->op;
    int nsp = op == PTC_OP_CONV1D ? 1 : op == PTC_OP_CONV2D ? 2 : 3;
    cap_tensor *x = input_of(c, "input");
    PyObject *w = ARG(1, "weight"), *b = ARG(2, "bias"), *s = ARG(3, "stride"),
             *p = ARG(4, "padding"), *d = ARG(5, "dilation"), *g = ARG(6, "groups");
    if (!x || !w || !cap_is_tensor(w))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s(input, weight, ...)", c->m->name);
    ptc_arg a[7] = {ptc_arg_value(x->v), ptc_arg_value(cap_val(w)), ptc_arg_none()};
    PyObject *one = PyLong_FromLong(1), *zero = PyLong_FromLong(0);
    int rc = b && b != Py_None ? cap_tconvert(c->T, b, PTC_PK_TENSOR_OPT, 0, &a[2], "bias") : CAP_NEXT;
    if (rc == CAP_NEXT)
        rc = cap_tconvert(c->T, s ? s : one, PTC_PK_INT_LIST, nsp, &a[3], "stride");
    if (rc == CAP_NEXT)
        rc = cap_tconvert(c->T, d ? d : one, PTC_PK_INT_LIST, nsp, &a[5], "dilation");
    ptc_value *in = x->v;
    if (rc == CAP_NEXT && p && PyUnicode_Check(p)) {
        const ptc_ttype *wt = &cap_val(w)->type;
        int64_t lo[3], hi[3], pads[6];
        bool symmetric = true;
        bool same = PyUnicode_CompareWithASCIIString(p, "same") == 0;
        if (!same && PyUnicode_CompareWithASCIIString(p, "valid") != 0)
            rc = cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: padding='%s'", c->m->name, PyUnicode_AsUTF8(p));
        for (int i = 0; rc == CAP_NEXT && i < nsp; i++) {
            int64_t total = same ? a[5].is.d[i].value * (wt->shape[2 + i].value - 1) : 0;
            lo[i] = total / 2;
            hi[i] = total - lo[i];
            symmetric = symmetric && lo[i] == hi[i];
            pads[2 * (nsp - 1 - i)] = lo[i];
            pads[2 * (nsp - 1 - i) + 1] = hi[i];
        }
        if (rc == CAP_NEXT && !symmetric) {
            /* torch pads the extra element on the right: pad explicitly. */
            ptc_arg pa[3] = {ptc_arg_value(in), ptc_arg_ints(c->T->arena, pads, 2 * nsp), ptc_arg_int(0)};
            in = cap_build1(c->T, PTC_OP_CONSTANT_PAD_ND, pa, 3);
            if (!in)
                rc = CAP_BREAK;
            for (int i = 0; i < nsp; i++)
                lo[i] = 0;
        }
        a[4] = ptc_arg_ints(c->T->arena, lo, nsp);
        a[0] = ptc_arg_value(in);
    } else if (rc == CAP_NEXT) {
        rc = cap_tconvert(c->T, p ? p : zero, PTC_PK_INT_LIST, nsp, &a[4], "padding");
    }
    Py_DECREF(one);
    Py_DECREF(zero);
    if (rc != CAP_NEXT)
        return rc;
    a[6] = ptc_arg_int(g && PyLong_Check(g) ? PyLong_AsLongLong(g) : 1);
    return cap_build(c->T, op, a, 7, out);
}

/* pad(x, pad, mode) in reflect (0), replicate (1) or circular (2) mode:
 * where eager pads (1 to 3 dims of an input with one or two dims before
 * them, pads no larger than reflect and circular allow, none negative) the
 * padded dims read through constant indices; a break otherwise. */
static int pad_indexed(cap_tcall *c, cap_tensor *x, PyObject *pad, int mode, PyObject **out)
{
    ptc_arg pa;
    if (cap_int_list(c->T, pad, &pa, "pad") != CAP_NEXT)
        return CAP_BREAK;
    const ptc_ttype *t = &x->v->type;
    int np = pa.kind == PTC_ARG_INTS ? pa.is.n : 0, nd = np / 2;
    bool ok = np % 2 == 0 && nd >= 1 && nd <= 3 && (t->ndim == nd + 1 || t->ndim == nd + 2);
    int64_t pads[6];
    for (int i = 0; ok && i < np; i++) {
        const ptc_dim *size = &t->shape[t->ndim - 1 - i / 2];
        pads[i] = pa.is.d[i].value;
        ok = !pa.is.d[i].sym && !size->sym && pads[i] >= 0 &&
             (mode == 1 || pads[i] < size->value + (mode == 2));
    }
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "pad in mode %s with pads eager refuses, negative or symbolic",
                           mode == 0   ? "reflect"
                           : mode == 1 ? "replicate"
                                       : "circular");
    return cap_wrap_value(c->T, ptc_composite_pad_indexed(cap_composer(c->T), x->v, pads, np, mode),
                          out);
}

int cap_th_pad(cap_tcall *c, PyObject **out)
{
    cap_tensor *x = input_of(c, "input");
    PyObject *pad = ARG(1, "pad"), *mode = ARG(2, "mode"), *value = ARG(3, "value");
    if (!x || !pad)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "pad(input, pad, ...)");
    static const char *const indexed[] = {"reflect", "replicate", "circular"};
    for (int m = 0; mode && PyUnicode_Check(mode) && m < 3; m++)
        if (PyUnicode_CompareWithASCIIString(mode, indexed[m]) == 0)
            return pad_indexed(c, x, pad, m, out);
    if (mode && mode != Py_None && PyUnicode_CompareWithASCIIString(mode, "constant") != 0)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "pad with mode='%s'", PyUnicode_AsUTF8(mode));
    ptc_arg a[3] = {ptc_arg_value(x->v), ptc_arg_none(), ptc_arg_int(0)};
    if (cap_int_list(c->T, pad, &a[1], "pad") != CAP_NEXT)
        return CAP_BREAK;
    if (value && value != Py_None && cap_tconvert(c->T, value, PTC_PK_SCALAR, 0, &a[2], "pad") != CAP_NEXT)
        return CAP_BREAK;
    return cap_build(c->T, PTC_OP_CONSTANT_PAD_ND, a, 3, out);
}

int cap_th_embedding(cap_tcall *c, PyObject **out)
{
    PyObject *idx = ARG(0, "input"), *w = ARG(1, "weight"), *pi = ARG(2, "padding_idx");
    PyObject *maxn = ARG(3, "max_norm");
    if (!idx || !w || !cap_is_tensor(idx) || !cap_is_tensor(w))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "embedding(input, weight)");
    if (maxn && maxn != Py_None)
        return cap_t_break(c->T, CAP_B_INPLACE_INPUT, "embedding with max_norm renormalises the weight in place");
    int64_t pad = -1;
    if (pi && pi != Py_None) {
        pad = PyLong_AsLongLong(pi);
        if (pad < 0)
            pad += cap_val(w)->type.shape[0].value;
    }
    ptc_arg a[5] = {ptc_arg_value(cap_val(w)), ptc_arg_value(cap_val(idx)), ptc_arg_int(pad),
                    ptc_arg_bool(truthy(ARG(5, "scale_grad_by_freq"), false)),
                    ptc_arg_bool(truthy(ARG(6, "sparse"), false))};
    return cap_build(c->T, PTC_OP_EMBEDDING, a, 5, out);
}

int cap_th_sdpa(cap_tcall *c, PyObject **out)
{
    PyObject *q = ARG(0, "query"), *k = ARG(1, "key"), *v = ARG(2, "value");
    PyObject *mask = ARG(3, "attn_mask"), *dp = ARG(4, "dropout_p"), *causal = ARG(5, "is_causal");
    PyObject *scale = ARG(6, "scale"), *gqa = ARG(7, "enable_gqa");
    if (!q || !k || !v || !cap_is_tensor(q) || !cap_is_tensor(k) || !cap_is_tensor(v))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "scaled_dot_product_attention(q, k, v)");
    if (truthy(gqa, false)) {
        const ptc_ttype *qt = &cap_val(q)->type, *kt = &cap_val(k)->type;
        if (qt->ndim < 3 || !ptc_dim_eq(qt->shape[qt->ndim - 3], kt->shape[kt->ndim - 3]))
            return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "attention with grouped query heads");
    }
    ptc_arg a[8] = {ptc_arg_value(cap_val(q)), ptc_arg_value(cap_val(k)), ptc_arg_value(cap_val(v)),
                    ptc_arg_none(), ptc_arg_float(number(dp, 0.0)), ptc_arg_bool(truthy(causal, false)),
                    ptc_arg_none(), ptc_arg_int(0)};
    if (mask && mask != Py_None && cap_tconvert(c->T, mask, PTC_PK_TENSOR_OPT, 0, &a[3], "attn_mask") != CAP_NEXT)
        return CAP_BREAK;
    if (scale && scale != Py_None)
        a[6] = ptc_arg_float(PyFloat_AsDouble(scale));
    if (a[4].f > 0)
        a[7] = ptc_arg_int((int64_t)cap_t_next_seed(c->T));
    return cap_build(c->T, PTC_OP_SDPA, a, 8, out);
}

int cap_th_outer(cap_tcall *c, PyObject **out)
{
    PyObject *a0 = ARG(0, "input"), *b0 = ARG(1, "vec2");
    if (!a0 || !b0 || !cap_is_tensor(a0) || !cap_is_tensor(b0))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "outer(a, b)");
    ptc_arg ua[2] = {ptc_arg_value(cap_val(a0)), ptc_arg_int(1)};
    ptc_arg ub[2] = {ptc_arg_value(cap_val(b0)), ptc_arg_int(0)};
    ptc_value *x = cap_build1(c->T, PTC_OP_UNSQUEEZE, ua, 2),
              *y = x ? cap_build1(c->T, PTC_OP_UNSQUEEZE, ub, 2) : NULL;
    ptc_arg m[2] = {ptc_arg_value(x), ptc_arg_value(y)};
    return cap_wrap_value(c->T, y ? cap_build1(c->T, PTC_OP_MUL, m, 2) : NULL, out);
}
