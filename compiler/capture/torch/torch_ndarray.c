/* numpy arrays of traced tensors, as torch.compile traces them.
 *
 * t.numpy() of a traced CPU tensor that does not require grad is a traced
 * ndarray: a symbolic tensor flagged CAP_NP_ARRAY (trace.h), a view of t
 * followed through writes as detach's is (torch_permviews.c), so in-place
 * work on either reaches the other as eager's shared memory does. numpy
 * code on it is traced as torch ops (torch_npfuncs.c for np.<func>), and
 * an array that leaves the graph (returned, or alive at a break) is rebuilt
 * as tensor.numpy() of its value (entry.c's NUMPY recipe), sharing an
 * argument's memory where eager's array does. An array passed in is a
 * view of its graph input (torch_numpy.c) once numpy code uses it: its
 * operators (interp/values.c asks cap_hooks.is_outside_array), methods and
 * items (trace/objects.c); writes to it are written back after the graph.
 *
 * Dtypes and result kinds are numpy's own: each operation first runs for
 * real on proxies, zero-size-in-memory arrays of the operands' dtypes and
 * shapes (np.broadcast_to of one element), so numpy itself says the result's
 * dtype, whether it is an array or a numpy scalar, and raises where eager
 * would (the trace then breaks and eager's code runs for real). The torch
 * op runs on the operands cast to the dtype numpy computes in, and its
 * result is cast to numpy's. A result without dims is a numpy scalar where
 * numpy's is (CAP_NP_SCALAR), which Python sees as np.float32 and so on.
 * Anything not traced here breaks (PTC-B007) with the numpy name in the
 * message.
 */
#include "capture/torch/torch.h"

#include <string.h>

/* ---- numpy's types, dtypes and proxies ------------------------------------------------- */

PyObject *cap_np_module(void)
{
    return PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");
}

PyObject *cap_np_dtype_of(const cap_tensor *t)
{
    PyObject *np = cap_np_module();
    return np ? cap_numpy_dtype(np, t->v->type.dtype) : NULL;
}

/* Marks symbolic tensor o (new, owned by the caller) as numpy's: an array,
 * or a numpy scalar of its dtype; what type() and isinstance see follows. */
int cap_np_mark(PyObject *o, int kind)
{
    cap_tensor *t = (cap_tensor *)o;
    PyObject *np = cap_np_module(), *type = NULL;
    if (kind == CAP_NP_ARRAY) {
        type = np ? PyObject_GetAttrString(np, "ndarray") : NULL;
    } else {
        PyObject *d = cap_np_dtype_of(t);
        type = d ? PyObject_GetAttrString(d, "type") : NULL;
        Py_XDECREF(d);
    }
    if (!type)
        return -1;
    t->numpy = (uint8_t)kind;
    Py_SETREF(t->fake_type, type);
    return 0;
}

/* What numpy makes of traced value o: an array of its dtype and shape that
 * takes no memory (np.broadcast_to of one element), or a scalar of its
 * dtype; items of lists and tuples likewise; other values as they are. */
PyObject *cap_np_proxy(cap_trace *T, PyObject *o)
{
    if (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t n = PySequence_Size(o);
        PyObject *r = PyList_Check(o) ? PyList_New(n) : PyTuple_New(n);
        for (Py_ssize_t i = 0; r && i < n; i++) {
            PyObject *p = cap_np_proxy(T, PyList_Check(o) ? PyList_GetItem(o, i) : PyTuple_GetItem(o, i));
            if (!p)
                Py_CLEAR(r);
            else if (PyList_Check(r))
                PyList_SetItem(r, i, p);
            else
                PyTuple_SetItem(r, i, p);
        }
        return r;
    }
    if (!o || !cap_is_tensor(o))
        return o ? Py_NewRef(o) : NULL;
    cap_tensor *t = (cap_tensor *)o;
    const ptc_ttype *tt = &t->v->type;
    PyObject *np = cap_np_module(), *d = cap_np_dtype_of(t), *r = NULL;
    PyObject *one = d ? PyObject_CallMethod(d, "type", "i", 1) : NULL;
    if (one && t->numpy == CAP_NP_SCALAR) {
        Py_DECREF(d);
        return one;
    }
    PyObject *shape = one ? PyTuple_New(tt->ndim) : NULL;
    for (int i = 0; shape && i < tt->ndim; i++) {
        /* a symbolic size at this call's value: numpy's dtype and kind do
           not depend on sizes, and the torch op checks them symbolically */
        int64_t size = tt->shape[i].value;
        if (!ptc_dim_is_static(tt->shape[i])) {
            PyObject *d = cap_dim_obj(T, tt->shape[i]);
            size = d && cap_is_symint(d) ? ((cap_symint *)d)->hint : -1;
            Py_XDECREF(d);
        }
        if (size < 0) {
            Py_CLEAR(shape);
            if (!PyErr_Occurred())
                cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "numpy on an array of unknown size");
        } else
            PyTuple_SetItem(shape, i, PyLong_FromLongLong(size));
    }
    if (shape)
        r = PyObject_CallMethod(np, "broadcast_to", "OO", one, shape);
    Py_XDECREF(d);
    Py_XDECREF(one);
    Py_XDECREF(shape);
    return r;
}

/* Runs numpy's fn on the proxies of args and kwargs for real: r's dtype
 * and kind, or the break where numpy raises (eager's error then comes from
 * running the call for real). */
int cap_np_oracle(cap_trace *T, const char *what, PyObject *fn, PyObject *args, PyObject *kwargs,
                  cap_np_result *r)
{
    PyObject *pa = cap_np_proxy(T, args), *pk = NULL, *k, *v;
    if (!pa)
        return PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    if (kwargs) {
        pk = PyDict_New();
        Py_ssize_t pos = 0;
        while (pk && PyDict_Next(kwargs, &pos, &k, &v)) {
            PyObject *p = cap_np_proxy(T, v);
            if (!p || PyDict_SetItem(pk, k, p) < 0)
                Py_CLEAR(pk);
            Py_XDECREF(p);
        }
    }
    PyObject *res = pk || !kwargs ? PyObject_Call(fn, pa, pk) : NULL;
    Py_DECREF(pa);
    Py_XDECREF(pk);
    if (!res) {
        PyErr_Clear();
        return cap_t_break(T, CAP_B_TRACE_ERROR, "numpy's %s raises on these arrays", what);
    }
    PyObject *np = cap_np_module();
    PyObject *ndarray = PyObject_GetAttrString(np, "ndarray");
    PyObject *generic = PyObject_GetAttrString(np, "generic");
    int rc = CAP_NEXT;
    if (ndarray && PyObject_TypeCheck(res, (PyTypeObject *)ndarray))
        r->kind = CAP_NP_ARRAY;
    else if (generic && PyObject_TypeCheck(res, (PyTypeObject *)generic))
        r->kind = CAP_NP_SCALAR;
    else
        rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "numpy's %s gives a %s", what,
                         cap_tpname(Py_TYPE(res)));
    PyObject *d = rc == CAP_NEXT ? PyObject_GetAttrString(res, "dtype") : NULL;
    if (rc == CAP_NEXT && (!d || (r->dtype = cap_dtype_of_numpy(d)) < 0))
        rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "numpy's %s gives a dtype ptc lacks", what);
    Py_XDECREF(d);
    Py_XDECREF(ndarray);
    Py_XDECREF(generic);
    Py_DECREF(res);
    PyErr_Clear();
    return rc;
}

/* ---- building ---------------------------------------------------------------------- */

/* torch's `path` ("torch.sum", "Tensor.reshape") on args and kwargs (NULL:
 * none), recorded in the trace as the user's call would be. */
int cap_np_torch(cap_trace *T, const char *path, PyObject *args, PyObject *kwargs, PyObject **out)
{
    PyObject *fn = strncmp(path, "Tensor.", 7) == 0 ? PyObject_GetAttrString(cap_T.Tensor, path + 7)
                                                    : cap_import_path(path);
    const cap_tmap *m = fn ? cap_torch_lookup_fn(fn) : NULL;
    Py_XDECREF(fn);
    if (!m) {
        PyErr_Clear();
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s (for numpy)", path);
    }
    Py_ssize_t npos = PyTuple_Size(args), nkw = kwargs ? PyDict_Size(kwargs) : 0;
    PyObject *vec[24], *kwnames = nkw ? PyTuple_New(nkw) : NULL, *k, *v;
    if (npos + nkw > 24 || (nkw && !kwnames)) {
        Py_XDECREF(kwnames);
        return PyErr_Occurred() ? CAP_ERR : cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s", path);
    }
    for (Py_ssize_t i = 0; i < npos; i++)
        vec[i] = PyTuple_GetItem(args, i);
    Py_ssize_t pos = 0, i = 0;
    while (kwargs && PyDict_Next(kwargs, &pos, &k, &v)) {
        PyTuple_SetItem(kwnames, i, Py_NewRef(k));
        vec[npos + i++] = v;
    }
    int rc = cap_torch_call_traced(T, m, NULL, vec, (int)(npos + nkw), kwnames, out);
    Py_XDECREF(kwnames);
    return rc;
}

/* v cast to dtype dt (a new reference; v itself when it has it). */
PyObject *cap_np_cast(cap_trace *T, PyObject *v, int dt)
{
    if ((int)cap_val(v)->type.dtype == dt)
        return Py_NewRef(v);
    ptc_arg a[3] = {ptc_arg_value(cap_val(v)), ptc_arg_dtype((ptc_dtype)dt), ptc_arg_none()};
    ptc_value *cv = cap_build1(T, PTC_OP_TO, a, 3);
    return cv ? cap_tensor_new(T, cv) : NULL;
}

/* An operand of a numpy operation as a symbolic tensor of dtype dt (new
 * reference): a traced array or scalar cast, a number or numpy scalar as a
 * tensor without dims; NULL after a break. */
PyObject *cap_np_operand(cap_trace *T, PyObject *v, int dt)
{
    if (cap_is_tensor(v))
        return cap_np_cast(T, v, dt);
    PyObject *number = cap_is_numpy_scalar(v) ? cap_numpy_scalar_number(v) : Py_NewRef(v);
    PyObject *args = number ? Py_BuildValue("(()O)", number) : NULL;
    PyObject *kw = args ? Py_BuildValue("{sO}", "dtype", cap_dtype_obj((ptc_dtype)dt)) : NULL;
    PyObject *out = NULL;
    if (kw && cap_np_torch(T, "torch.full", args, kw, &out) != CAP_NEXT)
        out = NULL;
    Py_XDECREF(number);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return out;
}

/* res (a torch result, stolen) as numpy's: cast to r's dtype and marked as
 * r's kind. A result that is one of the operands (an identity) becomes a
 * new array of its value, as numpy's results are new objects. */
int cap_np_finish(cap_trace *T, PyObject *res, const cap_np_result *r, PyObject **out)
{
    PyObject *c = cap_np_cast(T, res, r->dtype);
    Py_DECREF(res);
    if (c && ((cap_tensor *)c)->numpy != CAP_NP_TENSOR) {
        PyObject *fresh = cap_tensor_new(T, cap_val(c));
        Py_SETREF(c, fresh);
    }
    if (!c)
        return PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    if (cap_np_mark(c, r->kind) < 0) {
        Py_DECREF(c);
        return CAP_ERR;
    }
    *out = c;
    return CAP_NEXT;
}

/* ---- t.numpy(), np.asarray(t) ---------------------------------------------------------- */

/* t's array (what t.numpy() gives): a view of t that Python sees as an
 * ndarray; eager raises for a tensor that requires grad or is not on the
 * CPU, so those run for real (B003). */
int cap_np_of_tensor(cap_trace *T, cap_tensor *t, PyObject **out)
{
    if (cap_tensor_requires_grad(T, t) || t->v->type.device.kind != PTC_DEV_CPU ||
        t->v->type.dtype == PTC_BF16)
        return cap_t_break(T, CAP_B_TENSOR_DATA,
                           ".numpy() of a tensor that requires grad, is not on the CPU or is "
                           "bfloat16 (eager raises)");
    PyObject *args = PyTuple_Pack(1, (PyObject *)t);
    int rc = args ? cap_np_torch(T, "Tensor.detach", args, NULL, out) : CAP_ERR;
    Py_XDECREF(args);
    if (rc == CAP_NEXT && cap_np_mark(*out, CAP_NP_ARRAY) < 0) {
        Py_CLEAR(*out);
        return CAP_ERR;
    }
    return rc;
}

int cap_th_numpy(cap_tcall *c, PyObject **out)
{
    PyObject *force = cap_targ(c, 1, "force");
    if (c->npos + c->nkw > 2 || (force && PyObject_IsTrue(force) != 0))
        return cap_t_break(c->T, CAP_B_TENSOR_DATA, "Tensor.numpy(force=True)");
    return cap_np_of_tensor(c->T, (cap_tensor *)c->pos[0], out);
}

/* torch.from_numpy(a) of traced array a: a tensor sharing its memory. */
static int array_tensor(cap_trace *T, PyObject *a, PyObject **out)
{
    if (((cap_tensor *)a)->numpy != CAP_NP_ARRAY)
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "torch.from_numpy of a numpy scalar");
    PyObject *args = PyTuple_Pack(1, a);
    int rc = args ? cap_np_torch(T, "Tensor.detach", args, NULL, out) : CAP_ERR;
    Py_XDECREF(args);
    return rc;
}

int cap_th_np_from_numpy(cap_tcall *c, PyObject **out)
{
    if (c->npos + c->nkw == 1 && c->npos == 1 && cap_is_traced_numpy(c->pos[0]))
        return array_tensor(c->T, c->pos[0], out);
    return cap_th_from_numpy(c, out);
}

/* torch.tensor(a) copies traced array a; torch.as_tensor(a) shares it where
 * it needs no conversion. */
int cap_th_np_tensor_const(cap_tcall *c, PyObject **out)
{
    if (c->npos < 1 || !cap_is_traced_numpy(c->pos[0]))
        return cap_th_tensor_const(c, out);
    PyObject *t = NULL;
    int rc = array_tensor(c->T, c->pos[0], &t);
    if (rc != CAP_NEXT)
        return rc;
    rc = cap_th_tensor_of_tensor(c, (cap_tensor *)t, true, out);
    Py_DECREF(t);
    return rc;
}

/* ---- one numpy operation -------------------------------------------------------------- */

/* The dtype the torch op computes in (op->cast): numpy's result's (its
 * ufuncs compute in their output dtype), the operands' common one
 * (comparisons), or each operand's own. */
static int compute_dtype(cap_trace *T, const cap_np_op *op, const cap_np_result *r)
{
    if (op->cast == CAP_NP_CAST_OUT)
        return r->dtype;
    if (op->cast == CAP_NP_CAST_NONE)
        return -1;
    PyObject *operands = PyTuple_New(op->noperands - op->skip);
    for (int i = op->skip; operands && i < op->noperands; i++)
        PyTuple_SetItem(operands, i - op->skip, Py_NewRef(op->operands[i]));
    PyObject *proxies = operands ? cap_np_proxy(T, operands) : NULL;
    PyObject *fn = proxies ? PyObject_GetAttrString(cap_np_module(), "result_type") : NULL;
    PyObject *d = fn ? PyObject_Call(fn, proxies, NULL) : NULL;
    int dt = d ? cap_dtype_of_numpy(d) : -1;
    Py_XDECREF(operands);
    Py_XDECREF(proxies);
    Py_XDECREF(fn);
    Py_XDECREF(d);
    PyErr_Clear();
    return dt;
}

int cap_np_apply(cap_trace *T, const cap_np_op *op, PyObject **out)
{
    cap_np_result r;
    int rc = cap_np_oracle(T, op->what, op->fn, op->args, op->kwargs, &r);
    if (rc != CAP_NEXT)
        return rc;
    if (op->as_tensor)
        r.kind = CAP_NP_TENSOR;
    int dt = compute_dtype(T, op, &r);
    if (dt < 0 && op->cast == CAP_NP_CAST_COMMON)
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "numpy's %s: no common dtype", op->what);
    PyObject *targs = PyTuple_New(op->noperands + (op->extra ? PyTuple_Size(op->extra) : 0));
    for (int i = 0; targs && i < op->noperands; i++) {
        PyObject *v = op->operands[i];
        PyObject *o = i < op->skip || dt < 0 ? Py_NewRef(v) : cap_np_operand(T, v, dt);
        if (!o)
            Py_CLEAR(targs);
        else
            PyTuple_SetItem(targs, i, o);
    }
    for (Py_ssize_t i = 0; targs && op->extra && i < PyTuple_Size(op->extra); i++)
        PyTuple_SetItem(targs, op->noperands + i, Py_NewRef(PyTuple_GetItem(op->extra, i)));
    if (!targs)
        return PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    PyObject *res = NULL;
    rc = cap_np_torch(T, op->torch, targs, op->torch_kwargs, &res);
    Py_DECREF(targs);
    if (rc != CAP_NEXT)
        return rc;
    if (r.kind == CAP_NP_TENSOR) { /* tensor OP array: a tensor of numpy's dtype */
        *out = cap_np_cast(T, res, r.dtype);
        Py_DECREF(res);
        return *out ? CAP_NEXT : CAP_BREAK;
    }
    return cap_np_finish(T, res, &r, out);
}

/* ---- operands ------------------------------------------------------------------------ */

/* What a numpy operation takes v as (new reference in *out): a traced
 * array or scalar as itself, an array from outside as its graph input
 * (torch_numpy.c), numbers and numpy scalars as they are; a torch tensor
 * (numpy would convert it, and torch's __array_wrap__ turns results back
 * into tensors) and other objects break. */
int cap_np_take(cap_trace *T, PyObject *v, const char *what, PyObject **out)
{
    if (cap_is_traced_numpy(v) || PyLong_Check(v) || PyFloat_Check(v) || cap_is_numpy_scalar(v)) {
        *out = Py_NewRef(v);
        return CAP_NEXT;
    }
    if (cap_is_ndarray(v)) {
        /* a view of its input, as t.numpy(): the input itself stays the
           tensor torch.from_numpy(v) gives */
        PyObject *input = NULL;
        int rc = cap_ndarray_operand(T, v, true, what, &input);
        PyObject *flipped = rc == CAP_NEXT ? T->src[((cap_tensor *)input)->src].key : NULL;
        if (rc == CAP_NEXT) {
            rc = cap_np_of_tensor(T, (cap_tensor *)input, out);
            Py_DECREF(input);
        }
        if (rc == CAP_NEXT && flipped) { /* v's strides run backwards: the flip of the input */
            PyObject *forwards = *out;
            rc = cap_np_flip_view(T, forwards, flipped, out);
            Py_DECREF(forwards);
        }
        return rc;
    }
    return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "numpy's %s of a %s", what,
                       cap_is_tensor(v) ? "torch.Tensor" : cap_tpname(Py_TYPE(v)));
}

/* ---- operators ------------------------------------------------------------------------ */

static const struct {
    int nb;
    const char *py, *torch; /* the operator module's function, torch's op */
} binops[] = {
    {CAP_NB_ADD, "add", "torch.add"},
    {CAP_NB_SUBTRACT, "sub", "torch.sub"},
    {CAP_NB_MULTIPLY, "mul", "torch.mul"},
    {CAP_NB_TRUE_DIVIDE, "truediv", "torch.div"},
    {CAP_NB_FLOOR_DIVIDE, "floordiv", "torch.floor_divide"},
    {CAP_NB_MATRIX_MULTIPLY, "matmul", "torch.matmul"},
    {CAP_NB_AND, "and_", "torch.bitwise_and"},
    {CAP_NB_OR, "or_", "torch.bitwise_or"},
    {CAP_NB_XOR, "xor", "torch.bitwise_xor"},
};

static PyObject *operator_fn(const char *name)
{
    char path[48];
    snprintf(path, sizeof path, "operator.%s", name);
    return cap_import_path(path);
}

/* a OP b of two operands as cap_np_take gives them: numpy's a OP b, or
 * (tensor_result) numpy's ufunc on a tensor's array, which torch's
 * __array_wrap__ turns into a tensor. */
static int np_operator(cap_trace *T, const char *py, const char *torch, int cast, PyObject *a,
                       PyObject *b, bool tensor_result, PyObject **out)
{
    PyObject *fn = operator_fn(py), *args = fn ? PyTuple_Pack(2, a, b) : NULL;
    int rc = CAP_ERR;
    if (args) {
        cap_np_op op = {.what = py, .fn = fn, .args = args, .torch = torch, .noperands = 2,
                        .operands = {a, b}, .cast = cast, .as_tensor = tensor_result};
        rc = cap_np_apply(T, &op, out);
    }
    Py_XDECREF(fn);
    Py_XDECREF(args);
    return rc;
}

/* Both operands as numpy takes them; *tensor_result where one was a torch
 * tensor (x + a: numpy's operator on x's array, a tensor result). */
static int binary_operands(cap_trace *T, PyObject **a, PyObject **b, bool *tensor_result)
{
    PyObject *in[2] = {*a, *b}, *got[2] = {NULL, NULL};
    *tensor_result = false;
    for (int i = 0; i < 2; i++) {
        int rc;
        if (cap_is_tensor(in[i]) && !cap_is_traced_numpy(in[i])) {
            /* Tensor's operators with a numpy scalar read it as a number,
               and an array's with a tensor on the right defer to Tensor's
               (which raise): only tensor OP array is numpy's */
            if (i == 1 || !cap_is_traced_numpy(in[1]) || ((cap_tensor *)in[1])->numpy != CAP_NP_ARRAY)
                return cap_t_break(T, CAP_B_TENSOR_DATA,
                                   "%s between a tensor and a numpy %s", i == 1 ? "an array operator" : "an operator",
                                   i == 1 ? "array (eager's runs Tensor's)" : "scalar (eager reads it as a number)");
            *tensor_result = true;
            rc = cap_np_of_tensor(T, (cap_tensor *)in[i], &got[i]);
        } else {
            rc = cap_np_take(T, in[i], "operator", &got[i]);
        }
        if (rc != CAP_NEXT) {
            Py_XDECREF(got[0]);
            return rc;
        }
    }
    *a = got[0];
    *b = got[1];
    return CAP_NEXT;
}

/* a ** b where numpy's values and torch's agree bit for bit: an integer
 * array to a power that is a non-negative integer, and a float array
 * squared (numpy's x ** 2 is square(x), x * x). */
static bool exact_power(PyObject *a, PyObject *b)
{
    if (!cap_is_traced_numpy(a) || ((cap_tensor *)a)->numpy != CAP_NP_ARRAY)
        return false;
    PyObject *num = cap_is_numpy_scalar(b)                 ? cap_numpy_scalar_number(b)
                    : PyLong_Check(b) || PyFloat_Check(b) ? Py_NewRef(b)
                                                          : NULL;
    double v = num ? PyFloat_AsDouble(num) : -1;
    bool integer = num && PyLong_Check(num);
    Py_XDECREF(num);
    PyErr_Clear();
    return ptc_dtype_is_float(cap_val(a)->type.dtype) ? v == 2.0 : integer && v >= 0;
}

/* a ** b where exact_power(a, b): x * x for floats, torch.pow for ints. */
static int np_power(cap_trace *T, PyObject *a, PyObject *b, PyObject **out)
{
    bool square = ptc_dtype_is_float(cap_val(a)->type.dtype);
    PyObject *fn = operator_fn("pow"), *args = fn ? PyTuple_Pack(2, a, b) : NULL;
    int rc = CAP_ERR;
    if (args) {
        cap_np_op op = {.what = "**", .fn = fn, .args = args,
                        .torch = square ? "torch.mul" : "torch.pow", .noperands = 2,
                        .operands = {a, square ? a : b}, .cast = CAP_NP_CAST_OUT};
        rc = cap_np_apply(T, &op, out);
    }
    Py_XDECREF(fn);
    Py_XDECREF(args);
    return rc;
}

static int np_binop(cap_trace *T, int op, PyObject *a, PyObject *b, PyObject **out)
{
    int k = op & 0xff, i = 0, n = (int)(sizeof binops / sizeof binops[0]);
    while (i < n && binops[i].nb != k)
        i++;
    bool tensor_result;
    int rc = binary_operands(T, &a, &b, &tensor_result);
    if (rc != CAP_NEXT)
        return rc;
    if (i == n && !(k == CAP_NB_POWER && exact_power(a, b))) {
        Py_DECREF(a);
        Py_DECREF(b);
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH,
                           "numpy's %s on a traced array (numpy's kernels round or sign zeros "
                           "otherwise than torch's; ptc traces + - * / // @ & | ^, and ** of "
                           "integers and ** 2)",
                           k == CAP_NB_POWER ? "**" : k == CAP_NB_REMAINDER ? "%" : "shift");
    }
    PyObject *self = a; /* an outside array is written through its input's view */
    bool inplace = (op & CAP_NB_INPLACE) && cap_is_tensor(self) &&
                   ((cap_tensor *)self)->numpy == CAP_NP_ARRAY;
    if (tensor_result && (op & CAP_NB_INPLACE))
        rc = cap_t_break(T, CAP_B_TENSOR_DATA, "an in-place operator between a tensor and an array");
    else if (i == n)
        rc = np_power(T, a, b, out);
    else
        rc = np_operator(T, binops[i].py, binops[i].torch, CAP_NP_CAST_OUT, a, b, tensor_result,
                         out);
    Py_DECREF(b);
    if (rc != CAP_NEXT || !inplace) {
        Py_DECREF(a);
        return rc;
    }
    /* a OP= b: numpy writes the result into a, cast same_kind */
    PyObject *res = *out;
    *out = NULL;
    PyObject *da = cap_np_dtype_of((cap_tensor *)self), *dr = cap_np_dtype_of((cap_tensor *)res);
    PyObject *ok = da && dr ? PyObject_CallMethod(cap_np_module(), "can_cast", "OOs", dr, da,
                                                  "same_kind")
                            : NULL;
    Py_XDECREF(da);
    Py_XDECREF(dr);
    if (ok != Py_True) {
        Py_XDECREF(ok);
        Py_DECREF(res);
        Py_DECREF(self);
        PyErr_Clear();
        return cap_t_break(T, CAP_B_TRACE_ERROR, "numpy's in-place %s cannot cast its result",
                           i < n ? binops[i].py : "pow");
    }
    Py_DECREF(ok);
    rc = cap_inplace(T, (cap_tensor *)self, res, out);
    Py_DECREF(self);
    return rc;
}

static int np_compare(cap_trace *T, int cmp, PyObject *a, PyObject *b, PyObject **out)
{
    static const char *py[] = {"lt", "le", "eq", "ne", "gt", "ge"};
    char torch[16];
    snprintf(torch, sizeof torch, "torch.%s", py[cmp]);
    bool tensor_result;
    if (cmp != Py_EQ && ((cap_is_tensor(a) && !cap_is_traced_numpy(a)) ||
                         (cap_is_tensor(b) && !cap_is_traced_numpy(b))))
        return cap_t_break(T, CAP_B_TRACE_ERROR,
                           "a comparison between a tensor and a numpy array (eager raises or "
                           "answers by identity)");
    int rc = binary_operands(T, &a, &b, &tensor_result);
    if (rc != CAP_NEXT)
        return rc;
    rc = np_operator(T, py[cmp], torch, CAP_NP_CAST_COMMON, a, b, tensor_result, out);
    Py_DECREF(a);
    Py_DECREF(b);
    return rc;
}

static int np_unary(cap_trace *T, int h, PyObject *operand, PyObject **out)
{
    PyObject *a = NULL;
    int rc = cap_np_take(T, operand, "operator", &a);
    if (rc != CAP_NEXT)
        return rc;
    const char *py = h == H_UNARY_NEGATIVE ? "neg"
                     : h == H_UNARY_POSITIVE ? "pos"
                     : h == H_UNARY_INVERT   ? "invert"
                                             : "abs";
    const char *torch = h == H_UNARY_NEGATIVE ? "torch.neg"
                        : h == H_UNARY_POSITIVE ? "torch.clone"
                        : h == H_UNARY_INVERT   ? "torch.bitwise_not"
                                                : "torch.abs";
    PyObject *fn = operator_fn(py), *args = fn ? PyTuple_Pack(1, a) : NULL;
    rc = CAP_ERR;
    if (args) {
        cap_np_op op = {.what = py, .fn = fn, .args = args, .torch = torch, .noperands = 1,
                        .operands = {a}, .cast = CAP_NP_CAST_OUT};
        rc = cap_np_apply(T, &op, out);
    }
    Py_XDECREF(fn);
    Py_XDECREF(args);
    Py_DECREF(a);
    return rc;
}

/* Element v of an array (stolen) as numpy's scalar: a copy of its value,
 * so that writes to the array after it leave it as eager's scalar. */
static int scalar_copy(cap_trace *T, PyObject *v, PyObject **out)
{
    PyObject *args = PyTuple_Pack(1, v), *copy = NULL;
    int rc = args ? cap_np_torch(T, "torch.clone", args, NULL, &copy) : CAP_ERR;
    Py_XDECREF(args);
    Py_DECREF(v);
    if (rc == CAP_NEXT && cap_np_mark(copy, CAP_NP_SCALAR) < 0) {
        Py_CLEAR(copy);
        rc = CAP_ERR;
    }
    *out = copy;
    return rc;
}

/* The items of a traced array (a tuple, from unbind) as numpy's: rows, or
 * scalars (new objects: a scalar is no view) of a vector. */
static int numpy_items(cap_trace *T, PyObject *items)
{
    for (Py_ssize_t i = 0; i < PyTuple_Size(items); i++) {
        PyObject *it = PyTuple_GetItem(items, i), *scalar = NULL;
        if (cap_val(it)->type.ndim > 0) {
            if (cap_np_mark(it, CAP_NP_ARRAY) < 0)
                return -1;
            continue;
        }
        if (scalar_copy(T, Py_NewRef(it), &scalar) != CAP_NEXT)
            return -1;
        if (PyTuple_SetItem(items, i, scalar) < 0)
            return -1;
    }
    return 0;
}

int cap_np_take_array(cap_trace *T, PyObject *a, PyObject **out)
{
    return cap_np_take(T, a, "ndarray", out);
}


/* ---- indexing ------------------------------------------------------------------------ */

/* A key numpy takes: its traced arrays as they are, arrays from outside as
 * graph inputs; torch tensors in it break (numpy would convert them). */
static int take_key(cap_trace *T, PyObject *key, PyObject **out)
{
    if (PyTuple_Check(key)) {
        Py_ssize_t n = PyTuple_Size(key);
        PyObject *t = PyTuple_New(n);
        for (Py_ssize_t i = 0; t && i < n; i++) {
            PyObject *k = NULL;
            int rc = take_key(T, PyTuple_GetItem(key, i), &k);
            if (rc != CAP_NEXT) {
                Py_DECREF(t);
                return rc;
            }
            PyTuple_SetItem(t, i, k);
        }
        *out = t;
        return t ? CAP_NEXT : CAP_ERR;
    }
    if ((cap_is_tensor(key) && !cap_is_traced_numpy(key)) || cap_is_ndarray(key))
        return cap_np_take(T, key, "indexing", out);
    *out = Py_NewRef(key);
    return CAP_NEXT;
}

/* ---- slices with negative steps -------------------------------------------------------- */

int cap_np_flip_view(cap_trace *T, PyObject *m, PyObject *dims, PyObject **out)
{
    PyObject *args = PyTuple_Pack(2, m, dims);
    int rc = args ? cap_np_torch(T, "torch.flip", args, NULL, out) : CAP_ERR;
    Py_XDECREF(args);
    if (rc == CAP_NEXT && (cap_np_mark(*out, CAP_NP_ARRAY) < 0 ||
                           cap_t_note_flip_view((cap_tensor *)m, (cap_tensor *)*out, dims) < 0)) {
        Py_CLEAR(*out);
        rc = CAP_ERR;
    }
    return rc;
}

/* How many of the array's dims key item k indexes: 1 for an int or a
 * slice, 0 for None, -1 for the Ellipsis (the dims no other item takes),
 * -2 for anything else (arrays and bools: masks, advanced indexing). */
static int dims_indexed(PyObject *k)
{
    if (k == Py_Ellipsis)
        return -1;
    if (k == Py_None)
        return 0;
    return PySlice_Check(k) || (PyIndex_Check(k) && !PyBool_Check(k) && !cap_is_tensor(k)) ? 1 : -2;
}

static bool int_or_none(PyObject *o) { return o == Py_None || PyLong_Check(o); }

/* Slice s along a dim of size n with a negative step, as flip(a, dim)
 * indexes it: its items i0 > i0-k > ... of a are n-1-i0 < n-1-i0+k < ...
 * of the flip (a new slice). NULL (no error) where s is not such a slice
 * of ints over a static size. */
static PyObject *turned_around(PyObject *s, ptc_dim n)
{
    PyObject *start = PyObject_GetAttrString(s, "start"), *stop = PyObject_GetAttrString(s, "stop"),
             *step = PyObject_GetAttrString(s, "step");
    bool mine = start && stop && step && int_or_none(start) && int_or_none(stop) &&
                PyLong_Check(step) && PyLong_AsLong(step) < 0 && ptc_dim_is_static(n);
    Py_XDECREF(start);
    Py_XDECREF(stop);
    Py_XDECREF(step);
    Py_ssize_t i0, end, k;
    if (!mine || PySlice_Unpack(s, &i0, &end, &k) < 0) {
        PyErr_Clear();
        return NULL;
    }
    Py_ssize_t len = PySlice_AdjustIndices((Py_ssize_t)n.value, &i0, &end, k);
    Py_ssize_t first = len ? (Py_ssize_t)n.value - 1 - i0 : 0;
    PyObject *lo = PyLong_FromSsize_t(first), *hi = PyLong_FromSsize_t(len ? first + (len - 1) * -k + 1 : 0);
    PyObject *by = PyLong_FromSsize_t(len ? -k : 1);
    PyObject *turned = lo && hi && by ? PySlice_New(lo, hi, by) : NULL;
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    Py_XDECREF(by);
    return turned;
}

/* numpy's slices with a negative step, which torch has not: a[key] is
 * flip(a, dims)[key'] with each such slice turned around (turned_around)
 * and dims theirs. *base: that flip view of t (cap_np_flip_view), or t
 * where the key has none (or arrays, or such a slice along a symbolic
 * size: torch's path breaks on it); *fwd: the key over *base. */
static int forward_key(cap_trace *T, cap_tensor *t, PyObject *key, PyObject **base, PyObject **fwd)
{
    PyObject *items = PyTuple_Check(key) ? Py_NewRef(key) : PyTuple_Pack(1, key);
    Py_ssize_t n = items ? PyTuple_Size(items) : 0;
    int ndim = t->v->type.ndim, taken = 0, dim = 0;
    bool basic = items != NULL;
    for (Py_ssize_t i = 0; basic && i < n; i++) {
        int d = dims_indexed(PyTuple_GetItem(items, i));
        basic = d != -2;
        taken += d > 0 ? d : 0;
    }
    PyObject *turned = basic ? PyTuple_New(n) : NULL, *dims = basic ? PyList_New(0) : NULL;
    for (Py_ssize_t i = 0; turned && dims && i < n; i++) {
        PyObject *k = PyTuple_GetItem(items, i), *fwd_k = NULL, *d_obj = NULL;
        int d = dims_indexed(k);
        if (PySlice_Check(k) && dim < ndim && (fwd_k = turned_around(k, t->v->type.shape[dim])) &&
            (!(d_obj = PyLong_FromLong(dim)) || PyList_Append(dims, d_obj) < 0))
            Py_CLEAR(dims);
        Py_XDECREF(d_obj);
        PyTuple_SetItem(turned, i, fwd_k ? fwd_k : Py_NewRef(k));
        dim += d == -1 ? ndim - taken : d;
    }
    int rc = items && (!basic || (turned && dims)) && !PyErr_Occurred() ? CAP_NEXT : CAP_ERR;
    PyObject *dims_tuple = rc == CAP_NEXT && dims && PyList_Size(dims) ? PyList_AsTuple(dims) : NULL;
    if (dims_tuple) {
        rc = cap_np_flip_view(T, (PyObject *)t, dims_tuple, base);
        *fwd = rc == CAP_NEXT ? Py_NewRef(turned) : NULL;
    } else if (rc == CAP_NEXT) {
        *base = Py_NewRef((PyObject *)t);
        *fwd = Py_NewRef(key);
    }
    Py_XDECREF(dims_tuple);
    Py_XDECREF(dims);
    Py_XDECREF(turned);
    Py_XDECREF(items);
    return rc;
}

static int np_getitem(cap_trace *T, cap_tensor *t, PyObject *key, PyObject **out)
{
    PyObject *k = NULL, *fn = operator_fn("getitem"), *args = NULL, *res = NULL;
    PyObject *base = NULL, *fwd = NULL;
    int rc = fn ? take_key(T, key, &k) : CAP_ERR;
    cap_np_result r;
    if (rc == CAP_NEXT && !(args = PyTuple_Pack(2, (PyObject *)t, k)))
        rc = CAP_ERR;
    if (rc == CAP_NEXT)
        rc = cap_np_oracle(T, "indexing", fn, args, NULL, &r);
    if (rc == CAP_NEXT)
        rc = forward_key(T, t, k, &base, &fwd);
    if (rc == CAP_NEXT)
        rc = cap_torch_getitem(T, (cap_tensor *)base, fwd, &res);
    Py_XDECREF(base);
    Py_XDECREF(fwd);
    Py_XDECREF(fn);
    Py_XDECREF(args);
    Py_XDECREF(k);
    if (rc != CAP_NEXT)
        return rc;
    if (r.kind == CAP_NP_SCALAR) /* a[i] is a new scalar, not a view: writes to a leave it */
        return scalar_copy(T, res, out);
    return cap_np_finish(T, res, &r, out);
}

/* t[key] = v of traced array t: key and v as numpy takes them (new
 * references). */
static int setitem_operands(cap_trace *T, cap_tensor *t, PyObject **key, PyObject **v)
{
    if (t->numpy == CAP_NP_SCALAR)
        return cap_t_break(T, CAP_B_TRACE_ERROR, "item assignment to a numpy scalar (eager raises)");
    int rc = take_key(T, *key, key);
    if (rc != CAP_NEXT)
        return rc;
    if (!cap_is_traced_numpy(*v) && !cap_is_ndarray(*v) && !PyLong_Check(*v) &&
        !PyFloat_Check(*v) && !cap_is_numpy_scalar(*v)) {
        Py_DECREF(*key);
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "numpy's item assignment of a %s",
                           cap_is_tensor(*v) ? "torch.Tensor" : cap_tpname(Py_TYPE(*v)));
    }
    if ((rc = cap_np_take(T, *v, "item assignment", v)) != CAP_NEXT)
        Py_DECREF(*key);
    return rc;
}

/* ---- the hook rows ------------------------------------------------------------------------ */

static bool numpy_operand(PyObject *o)
{
    return cap_is_traced_numpy(o) || cap_is_ndarray(o);
}

/* A torch tensor (not an array's). */
static bool plain_tensor(PyObject *o)
{
    return cap_is_tensor(o) && !cap_is_traced_numpy(o);
}

int cap_np_hook_binop(cap_trace *T, int op, PyObject *a, PyObject *b, PyObject **out)
{
    /* tensor OP outside array keeps torch_numpy.c's ufunc dtypes */
    bool tensor_array = plain_tensor(a) && cap_is_ndarray(b);
    if (!tensor_array && (numpy_operand(a) || numpy_operand(b)))
        return np_binop(T, op, a, b, out);
    return cap_torch_binop(T, op, a, b, out);
}

int cap_np_hook_compare(cap_trace *T, int cmp, PyObject *a, PyObject *b, PyObject **out)
{
    bool tensor_array = (plain_tensor(a) && cap_is_ndarray(b)) || (cap_is_ndarray(a) && plain_tensor(b));
    if (!tensor_array && (numpy_operand(a) || numpy_operand(b)))
        return np_compare(T, cmp, a, b, out);
    return cap_torch_compare(T, cmp, a, b, out);
}

int cap_np_hook_unary(cap_trace *T, int h, PyObject *a, PyObject **out)
{
    return numpy_operand(a) ? np_unary(T, h, a, out) : cap_torch_unary(T, h, a, out);
}

int cap_np_hook_getitem(cap_trace *T, cap_tensor *t, PyObject *key, PyObject **out)
{
    return t->numpy != CAP_NP_TENSOR ? np_getitem(T, t, key, out)
                                     : cap_torch_getitem(T, t, key, out);
}

int cap_np_hook_setitem(cap_trace *T, cap_tensor *t, PyObject *key, PyObject *v)
{
    if (t->numpy == CAP_NP_TENSOR)
        return cap_torch_setitem(T, t, key, v);
    PyObject *base = NULL, *fwd = NULL;
    int rc = setitem_operands(T, t, &key, &v);
    if (rc != CAP_NEXT)
        return rc;
    rc = forward_key(T, t, key, &base, &fwd);
    if (rc == CAP_NEXT)
        rc = cap_torch_setitem(T, (cap_tensor *)base, fwd, v);
    Py_XDECREF(base);
    Py_XDECREF(fwd);
    Py_DECREF(key);
    Py_DECREF(v);
    return rc;
}

PyObject *cap_np_hook_unbind(cap_trace *T, cap_tensor *t)
{
    PyObject *items = cap_torch_unbind(T, t);
    if (items && t->numpy != CAP_NP_TENSOR && numpy_items(T, items) < 0)
        Py_CLEAR(items);
    return items;
}
