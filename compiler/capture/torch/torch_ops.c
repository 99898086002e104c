/* Special torch handlers: operators on symbolic tensors, calls whose Python
 * signature does not line up with one op (overloads, varargs, Python-only
 * options), metadata queries answered as constants, and the calls that need
 * a graph break (values read in Python, autograd, data-dependent shapes).
 *
 * Shapes, dtypes and devices of traced values are known statically, so
 * x.shape, x.size(1), x.dim() and friends are plain Python constants; the
 * guards on the graph's inputs keep them valid.
 */
#include "capture/torch/torch.h"

#include <math.h>
#include <string.h>

#define ARG(i, name) cap_targ(c, i, name)

static cap_tensor *tens(cap_tcall *c, int i, const char *name)
{
    PyObject *v = ARG(i, name);
    return v && cap_is_tensor(v) ? (cap_tensor *)v : NULL;
}

static int need_tensor(cap_tcall *c, cap_tensor *t, const char *what)
{
    if (t)
        return CAP_NEXT;
    return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: expected a tensor %s", c->m->name, what);
}

static const ptc_ttype *ty(cap_tensor *t)
{
    return &t->v->type;
}

static bool static_shape(const ptc_ttype *t)
{
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i].sym)
            return false;
    return true;
}

/* A torch.Size, or with symbolic sizes a tuple holding symints (torch.Size
 * takes ints only; what code does with a shape, a tuple does too). */
static PyObject *shape_obj(cap_trace *T, const ptc_ttype *t)
{
    PyObject *tup = PyTuple_New(t->ndim);
    for (int i = 0; tup && i < t->ndim; i++) {
        PyObject *d = cap_dim_obj(T, t->shape[i]);
        if (!d) {
            Py_CLEAR(tup);
            break;
        }
        PyTuple_SetItem(tup, i, d);
    }
    if (!tup || !static_shape(t))
        return tup;
    PyObject *size = PyObject_CallOneArg_compat(cap_T.Size, tup);
    Py_DECREF(tup);
    return size;
}

static int dim_of(cap_tcall *c, PyObject *v, int ndim, int *out)
{
    if (!v || !PyLong_Check(v))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: expected an int dim", c->m->name);
    long d = PyLong_AsLong(v);
    int w = ptc_wrap_dim(d, ndim ? ndim : 1);
    if (w < 0) {
        PyErr_Format(PyExc_IndexError,
                     "Dimension out of range (expected to be in range of [%d, %d], but got %ld)",
                     -(ndim ? ndim : 1), (ndim ? ndim : 1) - 1, d);
        return CAP_ERR;
    }
    *out = w;
    return CAP_NEXT;
}

/* A scalar as a 0-dim tensor of the dtype torch would give `scalar op t`. */
static ptc_value *scalar_tensor(cap_trace *T, PyObject *scalar, cap_tensor *like)
{
    ptc_arg sa;
    if (cap_tconvert(T, scalar, PTC_PK_SCALAR, 0, &sa, "operand") != CAP_NEXT)
        return NULL;
    return cap_wrapped_scalar(T, sa, &(ptc_arg){.kind = PTC_ARG_VALUE, .v = like->v});
}

/* ---- operators ---------------------------------------------------------------------- */

/* numpy scalars too: scalar() reads them as torch does (cap_numpy_scalar_number) */
static bool is_number(PyObject *o)
{
    return PyLong_Check(o) || PyFloat_Check(o) || cap_is_numpy_scalar(o);
}

/* A symbolic size n as a number in t's arithmetic (t + n), kept symbolic: a
 * 0-d tensor of the result's dtype on t's device holding n (arange(n + 1)'s
 * last element), as cap_wrapped_scalar makes one of a constant, so the
 * result has the dtype the number gives. NULL (its value is used,
 * specialised): n is no symbol of this trace, or the result is a 16-bit
 * float, where eager computes with n unrounded and a bf16 n would round it
 * twice. */
static ptc_value *size_operand(cap_trace *T, cap_tensor *t, PyObject *n)
{
    cap_symint *s = (cap_symint *)n;
    if (s->T != T || !s->d.sym)
        return NULL;
    ptc_arg self = ptc_arg_value(t->v);
    ptc_dtype dt = cap_wrapped_dtype(ptc_arg_int(s->hint), &self);
    if (dt == PTC_BF16 || dt == PTC_F16)
        return NULL;
    ptc_arg a[5] = {ptc_arg_int(0), ptc_arg_dim(ptc_dim_add(T->arena, s->d, ptc_dim_c(1))),
                    ptc_arg_int(1), ptc_arg_dtype(dt),
                    ptc_arg_device(ty(t)->device)};
    ptc_value *upto = cap_build1(T, PTC_OP_ARANGE, a, 5);
    ptc_arg last[3] = {ptc_arg_value(upto), ptc_arg_int(0), ptc_arg_int(-1)};
    return upto ? cap_build1(T, PTC_OP_SELECT, last, 3) : NULL;
}

/* other as the second operand of an op on t: a symbolic size kept
 * symbolic where `symbolic` says the op takes one (size_operand), else a
 * tensor or a number (a size's value, specialised). */
static int operand_of(cap_trace *T, cap_tensor *t, PyObject *other, bool symbolic, ptc_arg *out)
{
    ptc_value *size = symbolic && cap_is_symint(other) ? size_operand(T, t, other) : NULL;
    if (size) {
        *out = ptc_arg_value(size);
        return CAP_NEXT;
    }
    if (PyErr_Occurred())
        return CAP_ERR;
    return cap_tconvert(T, other, PTC_PK_TENSOR_SCALAR, 0, out, "operand");
}

static int binop(cap_trace *T, int op, PyObject *a, PyObject *b, PyObject **out)
{
    bool inplace = (op & CAP_NB_INPLACE) && cap_is_tensor(a);
    int k = op & 0xff;
    PyObject *other = cap_is_tensor(a) ? b : a;
    /* a symbolic size is a number here too: scalar() specialises it, with a note */
    if (!cap_is_tensor(other) && !is_number(other) && !cap_is_symint(other))
        return cap_t_break(T, CAP_B_TRACE_ERROR, "tensor operator with a %s", cap_tpname(Py_TYPE(other)));
    bool swapped = !cap_is_tensor(a);
    cap_tensor *self = (cap_tensor *)(swapped ? b : a);
    ptc_arg o;
    bool additive = k == CAP_NB_ADD || k == CAP_NB_SUBTRACT || k == CAP_NB_MULTIPLY;
    if (operand_of(T, self, other, additive, &o) != CAP_NEXT)
        return CAP_BREAK;
    ptc_arg args[4];
    ptc_op pop;
    int n = 2;
    args[0] = ptc_arg_value(self->v);
    args[1] = o;
    switch (k) {
    case CAP_NB_ADD: pop = PTC_OP_ADD; break;
    case CAP_NB_MULTIPLY: pop = PTC_OP_MUL; break;
    case CAP_NB_AND: pop = PTC_OP_BITWISE_AND; break;
    case CAP_NB_OR: pop = PTC_OP_BITWISE_OR; break;
    case CAP_NB_XOR: pop = PTC_OP_BITWISE_XOR; break;
    case CAP_NB_SUBTRACT: pop = swapped ? PTC_OP_RSUB : PTC_OP_SUB; break;
    case CAP_NB_POWER:
        pop = PTC_OP_POW;
        if (swapped)
            args[0] = o, args[1] = ptc_arg_value(self->v);
        break;
    case CAP_NB_MATRIX_MULTIPLY:
        if (!cap_is_tensor(a) || !cap_is_tensor(b))
            return cap_t_break(T, CAP_B_TRACE_ERROR, "@ with a number");
        pop = PTC_OP_MATMUL;
        args[0] = ptc_arg_value(cap_val(a));
        args[1] = ptc_arg_value(cap_val(b));
        break;
    case CAP_NB_TRUE_DIVIDE:
        if (swapped) {
            /* eager's Tensor.__rtruediv__ is self.reciprocal() * other: two
               roundings, which a division would not match */
            ptc_value *recip = cap_build1(T, PTC_OP_RECIPROCAL, args, 1);
            if (!recip)
                return CAP_BREAK;
            args[0] = ptc_arg_value(recip);
            pop = PTC_OP_MUL;
            break;
        }
        /* fall through */
    case CAP_NB_FLOOR_DIVIDE:
    case CAP_NB_REMAINDER:
        pop = k == CAP_NB_REMAINDER ? PTC_OP_REMAINDER : PTC_OP_DIV;
        if (swapped) {
            ptc_value *st = scalar_tensor(T, other, self);
            if (!st)
                return CAP_BREAK;
            args[0] = ptc_arg_value(st);
            args[1] = ptc_arg_value(self->v);
        }
        if (k == CAP_NB_FLOOR_DIVIDE) {
            args[2] = ptc_arg_str(T->arena, "floor");
            n = 3;
        }
        break;
    default:
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "shift operator on a tensor");
    }
    PyObject *res = NULL;
    int rc = cap_build(T, pop, args, n, &res);
    if (rc != CAP_NEXT)
        return rc;
    if (inplace)
        return cap_inplace(T, self, res, out);
    *out = res;
    return CAP_NEXT;
}

/* The op of x OP a, a an ndarray, at numpy's dtypes (cap_ndarray_operator). */
static int array_op(cap_trace *T, int k, PyObject *x, PyObject *a, PyObject **out)
{
    if (k == CAP_NB_EQ)
        return cap_torch_compare(T, Py_EQ, x, a, out);
    return binop(T, k, x, a, out);
}

/* tensor OP ndarray is numpy's operator (cap_ndarray_operator); its in-place
 * forms too, since torch's return NotImplemented and Python falls back to
 * the operator, rebinding the name (x += a leaves x's tensor as it was). An
 * array on the left is numpy's own operator: it runs for real. */
int cap_torch_binop(cap_trace *T, int op, PyObject *a, PyObject *b, PyObject **out)
{
    if (cap_is_tensor(a) && cap_is_ndarray(b))
        return cap_ndarray_operator(T, op & 0xff, (cap_tensor *)a,
                                    cap_tensor_requires_grad(T, (cap_tensor *)a), b, array_op, out);
    return binop(T, op, a, b, out);
}

int cap_torch_compare(cap_trace *T, int cmp, PyObject *a, PyObject *b, PyObject **out)
{
    /* x == a is numpy's (both ways round); x != a is eager's identity
       answer, True, as both sides return NotImplemented (below) */
    bool with_array = (cap_is_ndarray(a) && cap_is_tensor(b)) || (cap_is_tensor(a) && cap_is_ndarray(b));
    if (cmp == Py_EQ && with_array) {
        cap_tensor *x = (cap_tensor *)(cap_is_tensor(a) ? a : b);
        return cap_ndarray_operator(T, CAP_NB_EQ, x, cap_tensor_requires_grad(T, x),
                                    cap_is_tensor(a) ? b : a, array_op, out);
    }
    static const ptc_op ops[] = {PTC_OP_LT, PTC_OP_LE, PTC_OP_EQ, PTC_OP_NE, PTC_OP_GT, PTC_OP_GE};
    static const int swap[] = {Py_GT, Py_GE, Py_EQ, Py_NE, Py_LT, Py_LE};
    PyObject *other = cap_is_tensor(a) ? b : a;
    if (!cap_is_tensor(other) && !is_number(other) && !cap_is_symint(other)) {
        if (cmp == Py_EQ || cmp == Py_NE) {
            *out = Py_NewRef(cmp == Py_NE ? Py_True : Py_False);
            return CAP_NEXT;
        }
        return cap_t_break(T, CAP_B_TRACE_ERROR, "tensor comparison with a %s", cap_tpname(Py_TYPE(other)));
    }
    if (!cap_is_tensor(a))
        cmp = swap[cmp];
    cap_tensor *self = (cap_tensor *)(cap_is_tensor(a) ? a : b);
    ptc_arg args[2] = {ptc_arg_value(self->v)};
    if (operand_of(T, self, other, true, &args[1]) != CAP_NEXT)
        return CAP_BREAK;
    return cap_build(T, ops[cmp], args, 2, out);
}

int cap_torch_unary(cap_trace *T, int h, PyObject *a, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)a;
    ptc_arg args[1] = {ptc_arg_value(t->v)};
    switch (h) {
    case H_UNARY_POSITIVE:
        *out = Py_NewRef(a);
        return CAP_NEXT;
    case H_UNARY_NEGATIVE:
        return cap_build(T, PTC_OP_NEG, args, 1, out);
    case H_UNARY_INVERT:
        return cap_build(T, ty(t)->dtype == PTC_BOOL ? PTC_OP_LOGICAL_NOT : PTC_OP_BITWISE_NOT,
                         args, 1, out);
    default:
        return cap_build(T, PTC_OP_ABS, args, 1, out);
    }
}

/* ---- attributes ---------------------------------------------------------------------- */

static cap_tmap *unsupported_method(PyObject *name)
{
    cap_tmap *m = PyMem_Calloc(1, sizeof *m);
    char *s = PyMem_Malloc(64);
    snprintf(s, 64, "Tensor.%s", PyUnicode_AsUTF8(name));
    m->name = s;
    m->op = -1;
    m->fn = cap_th_unsupported;
    m->flags = TM_METHOD;
    PyObject *cap = PyCapsule_New(m, "ptc.tmap", NULL);
    PyDict_SetItem(cap_T.method_table, name, cap);
    Py_XDECREF(cap);
    return m;
}

bool cap_tensor_requires_grad(cap_trace *T, cap_tensor *t)
{
    if (t->input_v && t->v == t->input_v)
        return t->v->type.requires_grad;
    return t->v->type.requires_grad && cap_t_value_grad(T, t->v);
}

int cap_torch_getattr(cap_trace *T, cap_tensor *t, PyObject *name, PyObject **out)
{
    const char *s = PyUnicode_AsUTF8(name);
    const ptc_ttype *tt = ty(t);
    if (!s)
        return CAP_ERR;
    if (strcmp(s, "shape") == 0) {
        *out = shape_obj(T, tt);
    } else if (strcmp(s, "dtype") == 0) {
        *out = Py_NewRef(cap_dtype_obj(tt->dtype));
    } else if (strcmp(s, "device") == 0) {
        *out = cap_device_obj(tt->device);
    } else if (strcmp(s, "ndim") == 0) {
        *out = PyLong_FromLong(tt->ndim);
    } else if (strcmp(s, "requires_grad") == 0) {
        *out = Py_NewRef(cap_tensor_requires_grad(T, t) ? Py_True : Py_False);
    } else if (strcmp(s, "is_cuda") == 0 || strcmp(s, "is_cpu") == 0) {
        bool cuda = tt->device.kind == PTC_DEV_CUDA;
        *out = Py_NewRef((cuda == (s[3] == 'c')) ? Py_True : Py_False);
    } else if (strcmp(s, "is_leaf") == 0) {
        *out = Py_NewRef(t->input_v || !cap_tensor_requires_grad(T, t) ? Py_True : Py_False);
    } else if (strcmp(s, "is_sparse") == 0 || strcmp(s, "is_quantized") == 0 ||
               strcmp(s, "is_meta") == 0 || strcmp(s, "is_mkldnn") == 0 ||
               strcmp(s, "is_nested") == 0 || strcmp(s, "is_mps") == 0 || strcmp(s, "is_xpu") == 0) {
        *out = Py_NewRef(Py_False);
    } else if (strcmp(s, "layout") == 0) {
        *out = PyObject_GetAttrString(cap_T.torch, "strided");
    } else if (strcmp(s, "__class__") == 0) {
        *out = Py_NewRef(t->fake_type);
    } else if (strcmp(s, "itemsize") == 0) {
        *out = PyLong_FromSize_t(ptc_dtype_size(tt->dtype));
    } else if (strcmp(s, "T") == 0 || strcmp(s, "mT") == 0 || strcmp(s, "mH") == 0 || strcmp(s, "H") == 0) {
        if (s[0] == 'm' || tt->ndim == 2) {
            ptc_arg a[3] = {ptc_arg_value(t->v), ptc_arg_int(-2), ptc_arg_int(-1)};
            return cap_build(T, PTC_OP_TRANSPOSE, a, 3, out);
        }
        int64_t perm[PTC_MAX_DIMS];
        for (int i = 0; i < tt->ndim; i++)
            perm[i] = tt->ndim - 1 - i;
        ptc_arg a[2] = {ptc_arg_value(t->v), ptc_arg_ints(T->arena, perm, tt->ndim)};
        return cap_build(T, PTC_OP_PERMUTE, a, 2, out);
    } else if (strcmp(s, "data") == 0) {
        PyObject *d = cap_tensor_new(T, t->v);
        if (d) {
            ((cap_tensor *)d)->input_v = t->input_v;
            ((cap_tensor *)d)->src = t->src;
        }
        *out = d;
    } else if (strcmp(s, "grad") == 0 || strcmp(s, "grad_fn") == 0 || strcmp(s, "_version") == 0) {
        return cap_t_break(T, CAP_B_AUTOGRAD, "tensor.%s", s);
    } else if (strcmp(s, "names") == 0) {
        *out = PyTuple_New(tt->ndim);
        for (int i = 0; *out && i < tt->ndim; i++)
            PyTuple_SetItem(*out, i, Py_NewRef(Py_None));
    } else if (strcmp(s, "__torch_function__") == 0 || strcmp(s, "__torch_dispatch__") == 0) {
        /* A plain tensor as far as dispatch goes. */
        PyErr_Format(PyExc_AttributeError, "'Tensor' object has no attribute '%s'", s);
        return CAP_ERR;
    } else {
        const cap_tmap *m = cap_torch_lookup_method(name);
        if (!m) {
            PyObject *attr = PyObject_GetAttr(cap_T.Tensor, name);
            if (!attr)
                return CAP_ERR; /* AttributeError, as for a real tensor */
            bool callable = PyCallable_Check(attr);
            Py_DECREF(attr);
            if (!callable)
                return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "tensor attribute %s", s);
            m = unsupported_method(name);
        }
        *out = cap_method_new((PyObject *)t, m);
    }
    return *out ? CAP_NEXT : CAP_ERR;
}

/* ---- indexing -------------------------------------------------------------------------- */

/* One step of basic indexing applied to dim `dim` of cur. */
/* A slice bound as a dim: None gives `open`; an int or a symint itself
 * (the slice meta decides signs and clamps, symbols being sizes >= 2). */
static int slice_bound(cap_trace *T, PyObject *s, const char *name, ptc_dim open, ptc_dim *out)
{
    PyObject *v = PyObject_GetAttrString(s, name);
    int rc = !v ? -1 : v == Py_None ? 1 : cap_dim_from_obj(T, v, out);
    if (v == Py_None)
        *out = open;
    if (rc == 0)
        PyErr_SetString(PyExc_TypeError, "slice indices must be integers or None");
    Py_XDECREF(v);
    return rc;
}

/* A slice bound made a valid index into [0, size] as Python does it,
 * deciding each step on the trace's sizes under a guard. */
static int guarded_bound(cap_trace *T, ptc_dim b, ptc_dim size, ptc_dim *out)
{
    ptc_arena *a = T->arena;
    if (!b.sym && b.value == INT64_MAX)
        b = size;
    bool neg = cap_t_dim_hint(T, b) < 0;
    if (cap_t_sym_guard(T, b, neg ? Py_LT : Py_GE) < 0)
        return -1;
    if (neg)
        b = ptc_dim_add(a, b, size);
    int64_t lo = cap_t_dim_hint(T, b), hi = cap_t_dim_hint(T, ptc_dim_sub(a, b, size));
    if (cap_t_sym_guard(T, b, lo < 0 ? Py_LT : Py_GE) < 0 ||
        cap_t_sym_guard(T, ptc_dim_sub(a, b, size), hi > 0 ? Py_GT : Py_LE) < 0)
        return -1;
    *out = lo < 0 ? ptc_dim_c(0) : hi > 0 ? size : b;
    return 0;
}

/* cur[start:stop:step] along dim as index_select(cur, dim, arange(...)):
 * a gather whose bounds the guards proved, where the slice's meta cannot. */
static ptc_value *slice_gather(cap_trace *T, ptc_value *cur, int dim, ptc_dim size, ptc_dim start,
                               ptc_dim stop, int64_t step)
{
    if (guarded_bound(T, start, size, &start) < 0 || guarded_bound(T, stop, size, &stop) < 0)
        return NULL;
    ptc_dim len = ptc_dim_sub(T->arena, stop, start);
    if (cap_t_dim_hint(T, len) <= 0) {
        cap_t_need_static(T, "an empty slice of a symbolic size");
        return NULL;
    }
    if (cap_t_sym_guard(T, len, Py_GT) < 0)
        return NULL;
    ptc_arg r[5] = {ptc_arg_dim(start), ptc_arg_dim(stop), ptc_arg_int(step),
                    ptc_arg_dtype(PTC_I64), ptc_arg_device(cur->type.device)};
    ptc_value *idx = cap_build1(T, PTC_OP_ARANGE, r, 5);
    ptc_arg a[3] = {ptc_arg_value(cur), ptc_arg_int(dim), ptc_arg_value(idx)};
    return idx ? cap_build1(T, PTC_OP_INDEX_SELECT, a, 3) : NULL;
}

/* Slicing where the size or a bound is symbolic: the meta computes the
 * length symbolically (or fails, and the trace retraces with static sizes). */
static ptc_value *slice_symbolic(cap_trace *T, ptc_value *cur, int dim, PyObject *s, bool *full)
{
    ptc_dim size = cur->type.shape[dim], start, stop, step;
    if (slice_bound(T, s, "step", ptc_dim_c(1), &step) < 0 ||
        slice_bound(T, s, "start", ptc_dim_c(0), &start) < 0 ||
        slice_bound(T, s, "stop", ptc_dim_c(INT64_MAX), &stop) < 0)
        return NULL;
    if (step.sym) {
        cap_t_need_static(T, "a slice step of symbolic size");
        return NULL;
    }
    if (step.value <= 0) {
        cap_t_break(T, CAP_B_TRACE_ERROR, "slice step must be positive");
        return NULL;
    }
    *full = !start.sym && start.value == 0 && step.value == 1 &&
            ((!stop.sym && stop.value == INT64_MAX) || ptc_dim_eq(stop, size));
    if (*full)
        return cur;
    ptc_arg a[5] = {ptc_arg_value(cur), ptc_arg_int(dim), ptc_arg_dim(start), ptc_arg_dim(stop),
                    ptc_arg_dim(step)};
    cap_break saved = T->brk;
    bool had = T->has_break;
    ptc_value *v = cap_build1(T, PTC_OP_SLICE, a, 5);
    if (v || !T->static_why[0])
        return v;
    /* The slice's meta could not decide a bound against the size (s0 <= 512
       holds only for some s0): decide it here, under guards, and gather. */
    T->static_why[0] = 0;
    T->brk = saved;
    T->has_break = had;
    return slice_gather(T, cur, dim, size, start, stop, step.value);
}

static bool symbolic_bound(PyObject *s, const char *name)
{
    PyObject *v = PyObject_GetAttrString(s, name);
    bool sym = cap_is_symint(v);
    Py_XDECREF(v);
    PyErr_Clear();
    return sym;
}

static ptc_value *slice_dim(cap_trace *T, ptc_value *cur, int dim, PyObject *s, bool *full)
{
    ptc_dim size = cur->type.shape[dim];
    if (size.sym || symbolic_bound(s, "start") || symbolic_bound(s, "stop"))
        return slice_symbolic(T, cur, dim, s, full);
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(s, &start, &stop, &step) < 0)
        return NULL;
    if (step <= 0) {
        cap_t_break(T, CAP_B_TRACE_ERROR, "slice step must be positive");
        return NULL;
    }
    PySlice_AdjustIndices((Py_ssize_t)size.value, &start, &stop, step);
    if (stop < start)
        stop = start;
    *full = start == 0 && stop == size.value && step == 1;
    if (*full)
        return cur;
    ptc_arg a[5] = {ptc_arg_value(cur), ptc_arg_int(dim), ptc_arg_int(start), ptc_arg_int(stop),
                    ptc_arg_int(step)};
    return cap_build1(T, PTC_OP_SLICE, a, 5);
}

/* cur[k] along dim where the size or k is symbolic: a select, or where its
 * meta cannot decide that k is in range, a guarded gather of that row. */
static ptc_value *select_symbolic(cap_trace *T, ptc_value *cur, int dim, PyObject *k)
{
    ptc_dim idx, size = cur->type.shape[dim];
    if (cap_dim_from_obj(T, k, &idx) < 0)
        return NULL;
    ptc_arg a[3] = {ptc_arg_value(cur), ptc_arg_int(dim), ptc_arg_dim(idx)};
    cap_break saved = T->brk;
    bool had = T->has_break;
    ptc_value *v = cap_build1(T, PTC_OP_SELECT, a, 3);
    if (v || !T->static_why[0])
        return v;
    T->static_why[0] = 0;
    T->brk = saved;
    T->has_break = had;
    int64_t h = cap_t_dim_hint(T, idx), n = cap_t_dim_hint(T, size);
    if (h >= n || h < -n) {
        PyErr_Format(PyExc_IndexError,
                     "index %lld is out of bounds for dimension %d with size %lld", (long long)h,
                     dim, (long long)n);
        return NULL;
    }
    ptc_dim stop = ptc_dim_add(T->arena, idx, ptc_dim_c(1));
    if (h == -1)
        stop = ptc_dim_c(INT64_MAX); /* x[-1] is x[-1:] */
    v = slice_gather(T, cur, dim, size, idx, stop, 1);
    ptc_arg sq[2] = {ptc_arg_value(v), ptc_arg_ints(T->arena, (int64_t[]){dim}, 1)};
    return v ? cap_build1(T, PTC_OP_SQUEEZE, sq, 2) : NULL;
}

/* A list of Python ints used as an index: a constant index tensor. */
static ptc_value *index_tensor_const(cap_trace *T, PyObject *list)
{
    PyObject *t = PyObject_CallOneArg_compat(cap_T.tensor_fn, list);
    if (!t)
        return NULL;
    PyObject *w = cap_tensor_const(T, t);
    Py_DECREF(t);
    if (!w)
        return NULL;
    ptc_value *v = cap_val(w);
    Py_DECREF(w);
    return v;
}

static PyObject *index_items(PyObject *key)
{
    if (PyTuple_Check(key))
        return Py_NewRef(key);
    return PyTuple_Pack(1, key);
}

/* The source dims an index tuple addresses (None and ... address none). */
static int dims_addressed(PyObject *items)
{
    int n = 0;
    for (Py_ssize_t i = 0; i < PyTuple_Size(items); i++) {
        PyObject *k = PyTuple_GetItem(items, i);
        if (k != Py_None && k != Py_Ellipsis)
            n++;
    }
    return n;
}

/* cur[..., k] at dim for an integer k, bounds-checked where the size is
 * static. NULL with an IndexError, or after a break. */
static ptc_value *select_index(cap_trace *T, ptc_value *cur, int dim, PyObject *k)
{
    Py_ssize_t idx = PyNumber_AsSsize_t(k, PyExc_IndexError);
    ptc_dim size = cur->type.shape[dim];
    if (!size.sym && (idx >= size.value || idx < -size.value)) {
        PyErr_Format(PyExc_IndexError, "index %zd is out of bounds for dimension %d with size %lld",
                     idx, dim, (long long)size.value);
        return NULL;
    }
    ptc_arg a[3] = {ptc_arg_value(cur), ptc_arg_int(dim), ptc_arg_int(idx)};
    return cap_build1(T, PTC_OP_SELECT, a, 3);
}

static int getitem_result(cap_trace *T, cap_tensor *t, PyObject *key, ptc_value *cur,
                          ptc_value **adv, int nadv, int last_adv, PyObject **out);

int cap_torch_getitem(cap_trace *T, cap_tensor *t, PyObject *key, PyObject **out)
{
    PyObject *items = index_items(key);
    if (!items)
        return CAP_ERR;
    Py_ssize_t n = PyTuple_Size(items);
    int consumed = dims_addressed(items);
    ptc_value *cur = t->v;
    ptc_value *adv[PTC_MAX_DIMS] = {0};
    int nadv = 0, last_adv = -1, dim = 0, rc = CAP_NEXT;
    for (Py_ssize_t i = 0; i < n && rc == CAP_NEXT; i++) {
        PyObject *k = PyTuple_GetItem(items, i);
        if (k == Py_Ellipsis) {
            dim += ty(t)->ndim - consumed;
            continue;
        }
        if (dim > cur->type.ndim || (k != Py_None && dim >= cur->type.ndim)) {
            PyErr_Format(PyExc_IndexError, "too many indices for tensor of dimension %d", ty(t)->ndim);
            rc = CAP_ERR;
            break;
        }
        if (k == Py_None) {
            ptc_arg a[2] = {ptc_arg_value(cur), ptc_arg_int(dim)};
            cur = cap_build1(T, PTC_OP_UNSQUEEZE, a, 2);
            dim++;
        } else if (PyBool_Check(k)) {
            rc = cap_t_break(T, CAP_B_DATA_DEPENDENT_SHAPE, "indexing with a Python bool");
        } else if (cap_is_symint(k) || (cur->type.shape[dim].sym && PyLong_Check(k))) {
            cur = select_symbolic(T, cur, dim, k);
            if (!cur && PyErr_Occurred())
                rc = CAP_ERR;
        } else if (PyLong_Check(k) || (PyIndex_Check(k) && !cap_is_tensor(k))) {
            if (!(cur = select_index(T, cur, dim, k))) {
                rc = PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
                break;
            }
        } else if (PySlice_Check(k)) {
            bool full;
            cur = slice_dim(T, cur, dim, k, &full);
            if (!cur && PyErr_Occurred())
                rc = CAP_ERR;
            dim++;
        } else if (cap_is_tensor(k) || PyList_Check(k)) {
            ptc_value *iv = cap_is_tensor(k) ? cap_val(k) : index_tensor_const(T, k);
            if (!iv) {
                rc = PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
                break;
            }
            if (iv->type.dtype == PTC_BOOL || iv->type.dtype == PTC_U8) {
                rc = cap_t_break(T, CAP_B_DATA_DEPENDENT_SHAPE, "boolean mask indexing");
                break;
            }
            adv[dim] = iv;
            nadv++;
            last_adv = dim;
            dim++;
        } else {
            rc = cap_t_break(T, CAP_B_TRACE_ERROR, "tensor index of type %s", cap_tpname(Py_TYPE(k)));
        }
        if (rc == CAP_NEXT && !cur)
            rc = PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    }
    Py_DECREF(items);
    if (rc != CAP_NEXT)
        return rc;
    return getitem_result(T, t, key, cur, adv, nadv, last_adv, out);
}

/* t[key]'s result from cur, the value after the basic indexing: indexed by
 * the advanced indices adv (nadv of them, up to dim last_adv), and aliasing
 * t when basic indexing made it a view. */
static int getitem_result(cap_trace *T, cap_tensor *t, PyObject *key, ptc_value *cur,
                          ptc_value **adv, int nadv, int last_adv, PyObject **out)
{
    if (nadv) {
        ptc_arg a[2] = {ptc_arg_value(cur), ptc_arg_values(T->arena, adv, last_adv + 1)};
        cur = cap_build1(T, PTC_OP_INDEX, a, 2);
        if (!cur)
            return CAP_BREAK;
    }
    if (cur == t->v) {
        /* x[...] or x[:]: a new tensor object aliasing the same value. */
        PyObject *r = cap_tensor_new(T, cur);
        if (r && cap_t_add_view(t, (cap_tensor *)r, key) < 0)
            Py_CLEAR(r);
        *out = r;
        return r ? CAP_NEXT : CAP_ERR;
    }
    int r = cap_wrap_value(T, cur, out);
    if (r == CAP_NEXT && !nadv && cap_t_add_view(t, (cap_tensor *)*out, key) < 0) {
        /* Basic indexing makes a view: mutations of either are seen by both. */
        Py_CLEAR(*out);
        return CAP_ERR;
    }
    return r;
}

static int setitem_core(cap_trace *T, cap_tensor *t, PyObject *key, PyObject *v);

/* ---- mutation through aliases -------------------------------------------------------- */

bool cap_op_returns_view(int op)
{
    switch (op) {
    case PTC_OP_VIEW: case PTC_OP_RESHAPE: case PTC_OP_PERMUTE: case PTC_OP_TRANSPOSE: case PTC_OP_T:
    case PTC_OP_EXPAND: case PTC_OP_SQUEEZE: case PTC_OP_UNSQUEEZE: case PTC_OP_FLATTEN: case PTC_OP_SLICE:
    case PTC_OP_SELECT: case PTC_OP_NARROW: case PTC_OP_SPLIT: case PTC_OP_SPLIT_WITH_SIZES:
    case PTC_OP_CHUNK: case PTC_OP_UNBIND: case PTC_OP_CONTIGUOUS:
        return true;
    default:
        return false;
    }
}

/* Views are recorded on their base (weak references); a view made by basic
 * indexing also keeps its key, which is how a mutation travels between
 * aliases: writing t makes its base base[key] = t's new value (and so on up
 * to the root), and every other live view of the root is recomputed as
 * root[key...]. Views made by permuting or reshaping ops follow it the same
 * way (torch_permviews.c), as do narrow, select and the pieces of split,
 * chunk and unbind; others (expand, reshape of a tensor that
 * may not be row-major, ...) cannot be recomputed, so a mutation while one
 * is alive is a break, as is one that reaches a tensor from outside. */
int cap_t_add_view(cap_tensor *base, cap_tensor *view, PyObject *key)
{
    if (!base->views && !(base->views = PyList_New(0)))
        return -1;
    PyObject *w = PyWeakref_NewRef((PyObject *)view, NULL);
    if (!w || PyList_Append(base->views, w) < 0) {
        Py_XDECREF(w);
        return -1;
    }
    Py_DECREF(w);
    view->base = (cap_tensor *)Py_NewRef((PyObject *)base);
    view->view_key = Py_XNewRef(key);
    base->nviews++;
    return key ? 0 : cap_t_note_op_view(view);
}

int cap_t_note_flip_view(cap_tensor *base, cap_tensor *view, PyObject *dims)
{
    if (cap_t_add_view(base, view, NULL) < 0)
        return -1;
    Py_XSETREF(view->view_flip, Py_NewRef(dims));
    return 0;
}

/* Is the base still observable through someone other than this view? */
static bool base_alive(const cap_tensor *t)
{
    return t->base && (Py_REFCNT((PyObject *)t->base) > 1 || t->base->nviews > 1);
}

static cap_tensor *live_view(PyObject *weak)
{
    PyObject *o = NULL;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyWeakref_GetRef(weak, &o) <= 0)
        return NULL;
    Py_DECREF(o); /* the base's views list keeps the weakref; the caller holds the base */
#else
    o = PyWeakref_GetObject(weak);
#endif
    return o && o != Py_None && cap_is_tensor(o) ? (cap_tensor *)o : NULL;
}

/* Every live view under t can be recomputed (made by basic indexing). */
static int check_views(cap_trace *T, cap_tensor *t, int depth)
{
    for (Py_ssize_t i = 0; t->views && i < PyList_Size(t->views); i++) {
        cap_tensor *v = live_view(PyList_GetItem(t->views, i));
        if (!v)
            continue;
        if (!cap_t_view_follows(v) || depth > 32)
            return cap_t_break(T, CAP_B_INPLACE_INPUT, "in-place op on a tensor that has views (expand, ...)");
        int rc = check_views(T, v, depth + 1);
        if (rc != CAP_NEXT)
            return rc;
    }
    return CAP_NEXT;
}

/* Recomputes every live view under t from t's (new) value. */
static int refresh_views(cap_trace *T, cap_tensor *t)
{
    PyObject *views = t->views ? PyList_GetSlice(t->views, 0, PY_SSIZE_T_MAX) : NULL;
    int rc = CAP_NEXT;
    for (Py_ssize_t i = 0; views && rc == CAP_NEXT && i < PyList_Size(views); i++) {
        cap_tensor *v = live_view(PyList_GetItem(views, i));
        if (!v)
            continue;
        if (cap_t_op_view(v)) {
            rc = cap_t_op_view_refresh(T, v, t);
            rc = rc == CAP_NEXT ? refresh_views(T, v) : rc;
            continue;
        }
        PyObject *fresh = NULL;
        rc = cap_torch_getitem(T, t, v->view_key, &fresh);
        if (rc == CAP_NEXT) {
            v->v = ((cap_tensor *)fresh)->v;
            Py_DECREF(fresh);
            rc = refresh_views(T, v);
        }
    }
    Py_XDECREF(views);
    return rc;
}

/* The highest ancestor of t that is observable other than through the chain
 * below it (t when none is): a dead temporary in between (x.view(-1)[:3])
 * does not hide a live tensor above it. */
static cap_tensor *alias_root(cap_tensor *t)
{
    cap_tensor *root = t;
    for (cap_tensor *cur = t; cur->base; cur = cur->base)
        if (base_alive(cur))
            root = cur->base;
    return root;
}

/* The graph input t is a basic-indexing or permuted view of (x[0], x[:, 1],
 * x[0][1:], x.t()), or NULL when it is none: a write through it is a write
 * of that input. */
static cap_tensor *viewed_input(cap_tensor *t)
{
    for (cap_tensor *cur = t; cur; cur = cur->base) {
        if (cur->input_v)
            return cur != t && !cur->base && alias_root(t) == cur ? cur : NULL;
        if (!cap_t_view_follows(cur))
            return NULL;
    }
    return NULL;
}

int cap_check_mutate(cap_trace *T, cap_tensor *t, ptc_value *nv)
{
    cap_tensor *input = t->input_v && !t->base ? t : viewed_input(t);
    if (input) { /* a graph input itself: written back after the call */
        int rc = cap_t_check_writable(T, input, nv);
        return rc != CAP_NEXT ? rc : check_views(T, input, 0);
    }
    for (cap_tensor *cur = t; cur; cur = cur->base)
        if (cur->input_v)
            return cap_t_break(T, CAP_B_INPLACE_INPUT,
                               cur == t ? "in-place op on a tensor from outside (%s)"
                                        : "in-place op on a view of a tensor from outside other "
                                          "than basic indexing, permute/transpose, view/reshape "
                                          "or narrow/select/split/chunk/unbind (%s)",
                               cur->input_v->name);
    cap_tensor *root = alias_root(t);
    for (cap_tensor *cur = t; cur != root; cur = cur->base)
        if (!cap_t_view_follows(cur))
            return cap_t_break(T, CAP_B_INPLACE_INPUT, "in-place op on a view other than basic indexing, permute/transpose or view/reshape (expand, ...)");
    return check_views(T, root, 0);
}

/* Up the chain from t to root: each base gets base[key] = its view's new
 * value (nv for t). A step that cannot be traced (a strided slice) puts
 * every value back, so that the break reruns the op on the tensors as they
 * were: it ran once, for real. */
static int write_up_the_chain(cap_trace *T, cap_tensor *t, cap_tensor *root, ptc_value *nv)
{
    int n = 0, rc = CAP_NEXT;
    for (cap_tensor *cur = t; cur != root; cur = cur->base)
        n++;
    ptc_value **old = PyMem_Malloc(sizeof *old * (size_t)(n + 1));
    if (!old) {
        PyErr_NoMemory();
        return CAP_ERR;
    }
    int k = 0;
    for (cap_tensor *cur = t; cur != root; cur = cur->base)
        old[k++] = cur->v;
    old[k] = root->v;
    ptc_value *val = nv;
    for (cap_tensor *cur = t; rc == CAP_NEXT && cur != root; cur = cur->base) {
        PyObject *tmp = cap_tensor_new(T, val);
        if (!tmp) {
            rc = CAP_ERR;
            break;
        }
        cur->v = val;
        rc = cap_t_op_view(cur) ? cap_t_op_view_write_back(T, cur, val)
                                : setitem_core(T, cur->base, cur->view_key, tmp);
        Py_DECREF(tmp);
        val = cur->base->v;
    }
    if (rc != CAP_NEXT) {
        k = 0;
        for (cap_tensor *cur = t; cur != root; cur = cur->base)
            cur->v = old[k++];
        root->v = old[k];
    }
    PyMem_Free(old);
    return rc;
}

/* t's value becomes nv, seen through every alias of t. A graph input keeps
 * the new value in the trace and gets it for real after the call. */
int cap_mutate(cap_trace *T, cap_tensor *t, ptc_value *nv)
{
    int rc = cap_check_mutate(T, t, nv);
    cap_tensor *input = t->input_v && !t->base ? t : viewed_input(t);
    if (rc == CAP_NEXT && input)
        rc = cap_t_note_written(T, input);
    if (rc != CAP_NEXT)
        return rc;
    cap_tensor *root = alias_root(t);
    const ptc_value *root_was = root->v;
    rc = write_up_the_chain(T, t, root, nv);
    if (rc == CAP_NEXT && cap_note_in_place(T, root_was, root == t ? nv : root->v) < 0)
        rc = CAP_ERR;
    if (rc != CAP_NEXT)
        return rc;
    t->v = nv; /* the root itself when t is one */
    /* Down again: every view under the root, t included, is recomputed from
       the root, so a view's value stays a view of its base's (the backends
       return it as a real view when both leave the graph). */
    return refresh_views(T, root);
}

/* Where eager refuses in-place op self.op_(...) whose functional result is
 * nv, computed by the nodes from id first on (-1: nv's own node): a break,
 * after which the op runs for real and raises eager's error. */
static int inplace_refused(cap_trace *T, cap_tensor *self, const ptc_value *nv, int first)
{
    const ptc_ttype *st = &self->v->type, *rt = &nv->type;
    if (!ptc_ttype_same_shape(st, rt))
        return cap_t_break(T, CAP_B_TRACE_ERROR, "in-place result has a different shape");
    if (rt->dtype != st->dtype && ptc_dtype_is_float(rt->dtype) && !ptc_dtype_is_float(st->dtype))
        return cap_t_break(T, CAP_B_TRACE_ERROR, "result type %s can't be cast to %s in place",
                           ptc_dtype_name(rt->dtype), ptc_dtype_name(st->dtype));
    if (cap_inplace_overlaps(T, self->v, nv, first))
        return cap_t_break(T, CAP_B_TRACE_ERROR,
                           "in-place op reading a tensor that shares part of the memory it "
                           "writes (eager refuses it)");
    return CAP_NEXT;
}

/* In-place ops: self takes the result's value. */
int cap_inplace(cap_trace *T, cap_tensor *self, PyObject *res, PyObject **out)
{
    return cap_inplace_since(T, self, res, -1, out);
}

int cap_inplace_since(cap_trace *T, cap_tensor *self, PyObject *res, int first, PyObject **out)
{
    if (!cap_is_tensor(res)) {
        *out = res;
        return CAP_NEXT;
    }
    ptc_value *nv = cap_val(res);
    int rc = inplace_refused(T, self, nv, first);
    if (rc == CAP_NEXT && nv->type.dtype != self->v->type.dtype) {
        ptc_arg a[2] = {ptc_arg_value(nv), ptc_arg_dtype(self->v->type.dtype)};
        nv = cap_build1(T, PTC_OP_TO, a, 2);
        rc = nv ? CAP_NEXT : CAP_BREAK;
    }
    if (rc == CAP_NEXT)
        rc = cap_mutate(T, self, nv);
    Py_DECREF(res);
    if (rc != CAP_NEXT)
        return rc;
    *out = Py_NewRef((PyObject *)self);
    return CAP_NEXT;
}

/* t[key] = v for a tensor created in the graph: the region becomes a mask,
 * the value is padded to t's shape, and t's value becomes where(mask, v, t). */
int cap_torch_setitem(cap_trace *T, cap_tensor *t, PyObject *key, PyObject *v)
{
    if (cap_is_tensor(v) && ((cap_tensor *)v)->base == t && ((cap_tensor *)v)->view_key) {
        /* t[k] = t[k] (x[k] += 1 stores its view back): views are kept in
           sync with their base, so this is a no-op. */
        int same = PyObject_RichCompareBool(key, ((cap_tensor *)v)->view_key, Py_EQ);
        if (same < 0)
            PyErr_Clear();
        if (same > 0)
            return CAP_NEXT;
    }
    /* The new value of t, then the mutation. */
    PyObject *copy = cap_tensor_new(T, t->v);
    if (!copy)
        return CAP_ERR;
    int rc = setitem_core(T, (cap_tensor *)copy, key, v);
    if (rc == CAP_NEXT)
        rc = cap_mutate(T, t, ((cap_tensor *)copy)->v);
    Py_DECREF(copy);
    return rc;
}

/* The region of t (sizes tt) that t[key] = ... writes: its bounds lo..hi per
 * dim, and whether the dim stays in the region's shape (keep: a slice) or
 * is indexed away. Static sizes only. */
static int assigned_region(cap_trace *T, const ptc_ttype *tt, PyObject *key, int64_t *lo,
                           int64_t *hi, bool *keep)
{
    PyObject *items = index_items(key);
    if (!items)
        return CAP_ERR;
    Py_ssize_t n = PyTuple_Size(items);
    int consumed = dims_addressed(items), dim = 0, rc = CAP_NEXT;
    for (int d = 0; d < tt->ndim; d++)
        lo[d] = 0, hi[d] = tt->shape[d].value, keep[d] = true;
    for (Py_ssize_t i = 0; i < n && rc == CAP_NEXT; i++) {
        PyObject *k = PyTuple_GetItem(items, i);
        if (k == Py_Ellipsis) {
            dim += tt->ndim - consumed;
        } else if (dim >= tt->ndim) {
            PyErr_Format(PyExc_IndexError, "too many indices for tensor of dimension %d", tt->ndim);
            rc = CAP_ERR;
        } else if (PyLong_Check(k) && !PyBool_Check(k)) {
            int64_t idx = PyLong_AsLongLong(k), size = tt->shape[dim].value;
            if (idx < 0)
                idx += size;
            if (idx < 0 || idx >= size) {
                PyErr_Format(PyExc_IndexError, "index %lld is out of bounds for dimension %d",
                             (long long)PyLong_AsLongLong(k), dim);
                rc = CAP_ERR;
            }
            lo[dim] = idx, hi[dim] = idx + 1, keep[dim] = false;
            dim++;
        } else if (PySlice_Check(k)) {
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(k, &start, &stop, &step) < 0) {
                rc = CAP_ERR;
                break;
            }
            PySlice_AdjustIndices((Py_ssize_t)tt->shape[dim].value, &start, &stop, step);
            if (step != 1)
                rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "strided slice assignment");
            lo[dim] = start, hi[dim] = stop > start ? stop : start;
            dim++;
        } else {
            rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "item assignment with a %s index",
                             cap_is_tensor(k) ? "tensor" : cap_tpname(Py_TYPE(k)));
        }
    }
    Py_DECREF(items);
    return rc;
}

/* A tensor value assigned to the region: cast to t's dtype, broadcast to the
 * region's kept shape, reshaped to the region and padded to t's shape. NULL
 * after a break. */
static ptc_value *placed_tensor(cap_trace *T, const ptc_ttype *tt, PyObject *v, const int64_t *kept,
                                int nk, const int64_t *region, const int64_t *pads)
{
    ptc_value *val = cap_val(v);
    if (val->type.dtype != tt->dtype) {
        ptc_arg ca[2] = {ptc_arg_value(val), ptc_arg_dtype(tt->dtype)};
        val = cap_build1(T, PTC_OP_TO, ca, 2);
    }
    ptc_arg ea[2] = {ptc_arg_value(val), ptc_arg_ints(T->arena, kept, nk)};
    val = val ? cap_build1(T, PTC_OP_EXPAND, ea, 2) : NULL;
    ptc_arg ra[2] = {ptc_arg_value(val), ptc_arg_ints(T->arena, region, tt->ndim)};
    val = val ? cap_build1(T, PTC_OP_RESHAPE, ra, 2) : NULL;
    ptc_arg pa[3] = {ptc_arg_value(val), ptc_arg_ints(T->arena, pads, 2 * tt->ndim),
                     ptc_arg_int(0)};
    val = val ? cap_build1(T, PTC_OP_CONSTANT_PAD_ND, pa, 3) : NULL;
    return val;
}

/* t's value becomes where(mask, v, t) in t's dtype: v a number, or a tensor
 * (placed: its value as t's shape; NULL after a break). */
static int assign_where(cap_trace *T, cap_tensor *t, ptc_value *mask, PyObject *v, ptc_value *placed)
{
    ptc_arg value = ptc_arg_value(placed);
    if (cap_is_tensor(v) ? !placed
                         : cap_tconvert(T, v, PTC_PK_SCALAR, 0, &value, "assigned value") != CAP_NEXT)
        return CAP_BREAK;
    ptc_arg w[3] = {ptc_arg_value(mask), value, ptc_arg_value(t->v)};
    ptc_value *res = cap_build1(T, PTC_OP_WHERE, w, 3);
    ptc_arg ca[2] = {ptc_arg_value(res), ptc_arg_dtype(ty(t)->dtype)};
    res = res && res->type.dtype != ty(t)->dtype ? cap_build1(T, PTC_OP_TO, ca, 2) : res;
    if (!res)
        return CAP_BREAK;
    t->v = res;
    return CAP_NEXT;
}

/* The dim of key's one 1-D integer tensor among full slices (t[idx] = v,
 * t[:, idx] = v), its tensor in *idx; -1 for any other key. */
static int tensor_index_dim(PyObject *key, int ndim, cap_tensor **idx)
{
    PyObject *items = index_items(key);
    Py_ssize_t n = items ? PyTuple_Size(items) : 0;
    int dim = -1;
    *idx = NULL;
    for (Py_ssize_t i = 0; i < n && n <= ndim; i++) {
        PyObject *k = PyTuple_GetItem(items, i);
        Py_ssize_t start, stop, step;
        bool all = PySlice_Check(k) && PySlice_Unpack(k, &start, &stop, &step) == 0 && start == 0 &&
                   stop == PY_SSIZE_T_MAX && step == 1;
        if (cap_is_tensor(k) && !*idx && cap_val(k)->type.ndim == 1 &&
            ptc_dtype_is_int(cap_val(k)->type.dtype))
            *idx = (cap_tensor *)k, dim = (int)i;
        else if (!all)
            *idx = NULL, i = n;
    }
    Py_XDECREF(items);
    PyErr_Clear();
    return *idx ? dim : -1;
}

static ptc_value *arange_of(cap_trace *T, int64_t n, const ptc_ttype *like)
{
    ptc_arg a[5] = {ptc_arg_int(0), ptc_arg_int(n), ptc_arg_int(1), ptc_arg_dtype(PTC_I64),
                    ptc_arg_device(like->device)};
    return cap_build1(T, PTC_OP_ARANGE, a, 5);
}

/* v reshaped to ndim dims, all of size 1 but `at` (size). */
static ptc_value *along(cap_trace *T, ptc_value *v, int ndim, int at, int64_t size)
{
    int64_t shape[PTC_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        shape[d] = d == at ? size : 1;
    ptc_arg a[2] = {ptc_arg_value(v), ptc_arg_ints(T->arena, shape, ndim)};
    return v ? cap_build1(T, PTC_OP_RESHAPE, a, 2) : NULL;
}

/* For each of the n rows of a dim, the last position p of idx (k of them)
 * that names it (idx[p] counted from the end when negative, and checked as
 * reading t[idx] checks it: arange(n)[idx] raises eager's IndexError), or -1. */
static ptc_value *last_naming(cap_trace *T, cap_tensor *idx, int64_t n, int64_t k,
                              const ptc_ttype *tt)
{
    ptc_value *rows = arange_of(T, n, tt), *picks = arange_of(T, k, tt);
    ptc_value *ix[1] = {idx->v};
    ptc_arg ia[2] = {ptc_arg_value(rows), ptc_arg_values(T->arena, ix, 1)};
    ptc_value *named = rows && picks ? cap_build1(T, PTC_OP_INDEX, ia, 2) : NULL;
    ptc_value *r = along(T, rows, 2, 0, n), *c = along(T, named, 2, 1, k);
    ptc_arg ea[2] = {ptc_arg_value(r), ptc_arg_value(c)};
    ptc_value *hit = r && c ? cap_build1(T, PTC_OP_EQ, ea, 2) : NULL; /* [n, k] */
    ptc_value *p = along(T, picks, 2, 1, k);
    ptc_arg wa[3] = {ptc_arg_value(hit), ptc_arg_value(p), ptc_arg_int(-1)};
    ptc_value *at = hit && p ? cap_build1(T, PTC_OP_WHERE, wa, 3) : NULL;
    int64_t one = 1;
    ptc_arg ma[3] = {ptc_arg_value(at), ptc_arg_ints(T->arena, &one, 1), ptc_arg_bool(false)};
    return at ? cap_build1(T, PTC_OP_AMAX, ma, 3) : NULL;
}

/* t[..., idx, ...] = v (index_put_ without accumulate): row r of dim `dim`
 * takes v's row at the last position of idx naming r, as torch's CPU kernel
 * writes them in order; other rows keep t's. */
static int setitem_by_tensor(cap_trace *T, cap_tensor *t, int dim, cap_tensor *idx, PyObject *v)
{
    const ptc_ttype *tt = ty(t);
    if (idx->v->type.shape[0].sym)
        return cap_t_need_static(T, "item assignment with a dynamic index");
    int64_t n = tt->shape[dim].value, k = idx->v->type.shape[0].value;
    if (k == 0)
        return CAP_NEXT; /* names no row */
    ptc_value *last = last_naming(T, idx, n, k, tt);
    ptc_arg za[3] = {ptc_arg_value(last), ptc_arg_int(0), ptc_arg_none()};
    ptc_value *from = last ? cap_build1(T, PTC_OP_CLAMP, za, 3) : NULL;
    ptc_arg ga[2] = {ptc_arg_value(last), ptc_arg_int(0)};
    ptc_value *mask = along(T, last ? cap_build1(T, PTC_OP_GE, ga, 2) : NULL, tt->ndim, dim, n);
    if (!mask || !from)
        return CAP_BREAK;
    ptc_value *picked = NULL;
    if (cap_is_tensor(v)) { /* v broadcast to t's shape with k rows at dim, the rows picked */
        ptc_dim shape[PTC_MAX_DIMS];
        memcpy(shape, tt->shape, sizeof *shape * (size_t)tt->ndim);
        shape[dim] = ptc_dim_c(k);
        ptc_arg xa[2] = {ptc_arg_value(cap_val(v)), ptc_arg_dims(T->arena, shape, tt->ndim)};
        ptc_value *val = cap_build1(T, PTC_OP_EXPAND, xa, 2);
        ptc_arg sa[3] = {ptc_arg_value(val), ptc_arg_int(dim), ptc_arg_value(from)};
        picked = val ? cap_build1(T, PTC_OP_INDEX_SELECT, sa, 3) : NULL;
    }
    return assign_where(T, t, mask, v, picked);
}

static int setitem_core(cap_trace *T, cap_tensor *t, PyObject *key, PyObject *v)
{
    const ptc_ttype *tt = ty(t);
    if (!static_shape(tt))
        return cap_t_need_static(T, "item assignment with dynamic sizes");
    cap_tensor *idx;
    int dim = tensor_index_dim(key, tt->ndim, &idx);
    if (dim >= 0)
        return setitem_by_tensor(T, t, dim, idx, v);
    int64_t lo[PTC_MAX_DIMS], hi[PTC_MAX_DIMS];
    bool keep[PTC_MAX_DIMS]; /* dim stays in the region's shape (slice) */
    int rc = assigned_region(T, tt, key, lo, hi, keep);
    if (rc != CAP_NEXT)
        return rc;
    /* The region's shape, the padding that places it, and the mask. */
    int64_t region[PTC_MAX_DIMS], kept[PTC_MAX_DIMS], pads[2 * PTC_MAX_DIMS];
    int nk = 0;
    for (int d = 0; d < tt->ndim; d++) {
        region[d] = hi[d] - lo[d];
        if (keep[d])
            kept[nk++] = region[d];
        /* constant_pad_nd pads the last dim first. */
        pads[2 * (tt->ndim - 1 - d)] = lo[d];
        pads[2 * (tt->ndim - 1 - d) + 1] = tt->shape[d].value - hi[d];
    }
    ptc_arg ones[3] = {ptc_arg_ints(T->arena, region, tt->ndim), ptc_arg_dtype(PTC_BOOL),
                       ptc_arg_device(tt->device)};
    ptc_value *mask = cap_build1(T, PTC_OP_ONES, ones, 3);
    if (!mask)
        return CAP_BREAK;
    ptc_arg pm[3] = {ptc_arg_value(mask), ptc_arg_ints(T->arena, pads, 2 * tt->ndim), ptc_arg_bool(false)};
    mask = cap_build1(T, PTC_OP_CONSTANT_PAD_ND, pm, 3);
    if (!mask)
        return CAP_BREAK;
    ptc_value *placed = cap_is_tensor(v) ? placed_tensor(T, tt, v, kept, nk, region, pads) : NULL;
    return assign_where(T, t, mask, v, placed);
}

/* x.index_put_(indices, values) and x.index_put(...) without accumulate:
 * x[tuple(indices)] = values, on x itself or on its copy. indices that are
 * not all tensors, or values of another dtype than x's, raise in eager: a
 * break. */
int cap_th_index_put(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)c->pos[0];
    PyObject *ix = cap_targ(c, 1, "indices"), *v = cap_targ(c, 2, "values");
    PyObject *acc = cap_targ(c, 3, "accumulate");
    PyObject *key = ix && (PyTuple_Check(ix) || PyList_Check(ix)) ? PySequence_Tuple(ix) : NULL;
    bool tensors = key && v && cap_is_tensor(v) && cap_val(v)->type.dtype == ty(t)->dtype;
    for (Py_ssize_t i = 0; tensors && i < PyTuple_Size(key); i++)
        tensors = cap_is_tensor(PyTuple_GetItem(key, i));
    bool in_place = c->m->name[strlen(c->m->name) - 1] == '_';
    PyObject *copy = tensors && !in_place ? cap_tensor_new(c->T, t->v) : NULL;
    int rc = !tensors ? cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s(tensors, values of its dtype)",
                                    c->m->name)
             : acc && PyObject_IsTrue(acc)
                 ? cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with accumulate=True", c->m->name)
             : in_place ? cap_torch_setitem(c->T, t, key, v)
             : copy     ? setitem_core(c->T, (cap_tensor *)copy, key, v)
                        : CAP_ERR;
    Py_XDECREF(key);
    *out = rc == CAP_NEXT ? Py_NewRef(in_place ? (PyObject *)t : copy) : NULL;
    Py_XDECREF(copy);
    return rc;
}

PyObject *cap_torch_unbind(cap_trace *T, cap_tensor *t)
{
    if (ty(t)->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "iteration over a 0-d tensor");
        return NULL;
    }
    if (ty(t)->shape[0].sym) {
        cap_t_need_static(T, "iteration over a dynamic dimension");
        return NULL;
    }
    ptc_arg a[2] = {ptc_arg_value(t->v), ptc_arg_int(0)};
    PyObject *out = NULL;
    if (cap_build(T, PTC_OP_UNBIND, a, 2, &out) != CAP_NEXT)
        return NULL;
    return out;
}

int cap_torch_unpack(cap_trace *T, PyObject *t, int before, int after, bool star, PyObject **items)
{
    PyObject *list = cap_thooks.unbind(T, (cap_tensor *)t); /* numpy's rows for an array */
    if (!list)
        return PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    Py_ssize_t n = PyTuple_Size(list);
    if ((!star && n != before) || (star && n < before + after)) {
        if (!star && n > before)
            PyErr_Format(PyExc_ValueError, "too many values to unpack (expected %d)", before);
        else
            PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected %d, got %zd)",
                         before + after, n);
        Py_DECREF(list);
        return CAP_ERR;
    }
    for (int i = 0; i < before; i++)
        items[i] = Py_NewRef(PyTuple_GetItem(list, i));
    if (star) {
        PyObject *mid = PyTuple_GetSlice(list, before, n - after);
        items[before] = mid ? PySequence_List(mid) : NULL;
        Py_XDECREF(mid);
        for (int k = 0; k < after; k++)
            items[before + 1 + k] = Py_NewRef(PyTuple_GetItem(list, n - after + k));
    }
    Py_DECREF(list);
    return CAP_NEXT;
}

/* ---- metadata ------------------------------------------------------------------------- */

int cap_th_size(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = tens(c, 0, "self");
    PyObject *d = ARG(1, "dim");
    if (!d || d == Py_None) {
        *out = shape_obj(c->T, ty(t));
        return *out ? CAP_NEXT : CAP_ERR;
    }
    int w, rc = dim_of(c, d, ty(t)->ndim, &w);
    if (rc != CAP_NEXT)
        return rc;
    *out = cap_dim_obj(c->T, ty(t)->shape[w]);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_th_dim(cap_tcall *c, PyObject **out)
{
    *out = PyLong_FromLong(ty(tens(c, 0, "self"))->ndim);
    return CAP_NEXT;
}

int cap_th_numel(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = tens(c, 0, "input");
    if (need_tensor(c, t, "input") != CAP_NEXT)
        return CAP_BREAK;
    *out = cap_dim_obj(c->T, ptc_ttype_numel(c->T->arena, ty(t)));
    return *out ? CAP_NEXT : CAP_ERR;
}

/* Strides of a traced value: its layout if explicit, else contiguous. */
static void strides_of(ptc_arena *a, const ptc_ttype *t, ptc_dim *st)
{
    ptc_dim s = ptc_dim_c(1);
    for (int i = t->ndim - 1; i >= 0; i--) {
        st[i] = t->layout == PTC_LAYOUT_STRIDED ? t->strides[i] : s;
        s = ptc_dim_mul(a, s, t->shape[i]);
    }
}

/* A value the graph made: the strides eager gives it, or a break where ptc
 * does not know them (torch_strides.c). */
static int made_strides(cap_tcall *c, cap_tensor *t, int64_t *st)
{
    if (cap_value_strides(c->T, t->v, st))
        return CAP_NEXT;
    return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                       "%s() of a result whose strides ptc does not model", c->m->name);
}

int cap_th_stride(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = tens(c, 0, "self");
    ptc_dim st[PTC_MAX_DIMS];
    int64_t made[PTC_MAX_DIMS];
    if (!t->v->def) {
        strides_of(c->T->arena, ty(t), st);
    } else {
        int rc = made_strides(c, t, made);
        if (rc != CAP_NEXT)
            return rc;
        for (int i = 0; i < ty(t)->ndim; i++)
            st[i] = ptc_dim_c(made[i]);
    }
    PyObject *d = ARG(1, "dim");
    if (d && d != Py_None) {
        int w, rc = dim_of(c, d, ty(t)->ndim, &w);
        if (rc != CAP_NEXT)
            return rc;
        *out = cap_dim_obj(c->T, st[w]);
        return *out ? CAP_NEXT : CAP_ERR;
    }
    *out = PyTuple_New(ty(t)->ndim);
    for (int i = 0; *out && i < ty(t)->ndim; i++) {
        PyObject *x = cap_dim_obj(c->T, st[i]);
        if (!x) {
            Py_CLEAR(*out);
            break;
        }
        PyTuple_SetItem(*out, i, x);
    }
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_memory_format_of(PyObject *format)
{
    static const char *names[] = {"contiguous_format", "channels_last", "channels_last_3d",
                                  "preserve_format"};
    if (!format || format == Py_None)
        return CAP_ROW_MAJOR;
    for (int i = 0; i < 4; i++) {
        PyObject *torch_format = PyObject_GetAttrString(cap_T.torch, names[i]);
        Py_XDECREF(torch_format); /* torch keeps them */
        if (torch_format == format)
            return i < 3 ? i : CAP_PRESERVE_FORMAT;
    }
    PyErr_Clear();
    return -1;
}

int cap_th_is_contiguous(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = tens(c, 0, "self");
    int format = cap_memory_format_of(ARG(1, "memory_format"));
    if (format < 0 || format == CAP_PRESERVE_FORMAT)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "is_contiguous() of an unknown memory format");
    int64_t st[PTC_MAX_DIMS];
    if (t->v->def) {
        int rc = made_strides(c, t, st);
        if (rc != CAP_NEXT)
            return rc;
    } else if (format == CAP_ROW_MAJOR) {
        *out = Py_NewRef(ty(t)->layout == PTC_LAYOUT_CONTIGUOUS ? Py_True : Py_False);
        return CAP_NEXT;
    } else if (!cap_value_strides(c->T, t->v, st)) {
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "is_contiguous(memory_format) of symbolic sizes");
    }
    *out = Py_NewRef(cap_strides_contiguous(ty(t), st, format) ? Py_True : Py_False);
    return CAP_NEXT;
}

int cap_th_is_floating_point(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = tens(c, 0, "input");
    if (need_tensor(c, t, "input") != CAP_NEXT)
        return CAP_BREAK;
    *out = Py_NewRef(ptc_dtype_is_float(ty(t)->dtype) ? Py_True : Py_False);
    return CAP_NEXT;
}

int cap_th_is_complex(cap_tcall *c, PyObject **out)
{
    *out = Py_NewRef(Py_False);
    return CAP_NEXT;
}

int cap_th_element_size(cap_tcall *c, PyObject **out)
{
    *out = PyLong_FromSize_t(ptc_dtype_size(ty(tens(c, 0, "self"))->dtype));
    return CAP_NEXT;
}

/* ---- breaks ------------------------------------------------------------------------------ */

int cap_th_item(cap_tcall *c, PyObject **out)
{
    return cap_t_break(c->T, c->m->op, "%s", c->m->name);
}

int cap_th_autograd(cap_tcall *c, PyObject **out)
{
    return cap_t_break(c->T, CAP_B_AUTOGRAD, "%s", c->m->name);
}

int cap_th_requires_grad_(cap_tcall *c, PyObject **out)
{
    return cap_t_break(c->T, CAP_B_TENSOR_ATTR_WRITE, "%s", c->m->name);
}

int cap_th_data_dependent(cap_tcall *c, PyObject **out)
{
    return cap_t_break(c->T, CAP_B_DATA_DEPENDENT_SHAPE, "%s", c->m->name);
}

int cap_th_unsupported(cap_tcall *c, PyObject **out)
{
    return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s", c->m->name);
}

/* The torch layer's hooks: its rows of the interpreter's table (interp.h),
 * the operators on symbolic tensors and real tensors met while tracing, and
 * the trace's table (trace.h), torch callables and tensor protocol. */
