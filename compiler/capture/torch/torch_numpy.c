/* torch.from_numpy, and torch.tensor and torch.as_tensor of an ndarray, and
 * tensor operators with one (x + a), in the trace. An array the trace made
 * (t.numpy(), numpy code on it: torch_ndarray.c) is its tensor, shared as
 * from_numpy shares memory. Other arrays a traced function hands torch come
 * from outside the graph: arguments, globals, attributes, or values made
 * before a break. Each is a tensor input of the
 * graph (trace.h's CAP_S_FROM_NUMPY source): torch.from_numpy of the array,
 * made again on every call and guarded like any tensor input (dtype, sizes,
 * strides), so the tensor shares the array's memory as in eager, and in-place
 * writes to it reach the array after the graph.
 *
 * x + a of a tensor and an array is numpy's: Tensor's operators return
 * NotImplemented for an ndarray, numpy's ufunc runs on x.numpy() (which
 * raises for a tensor that requires grad or is not on the CPU) and
 * Tensor.__array_wrap__ makes the result a tensor. So its dtypes are numpy's
 * (a float32 tensor + an int64 array is float64), asked of the ufunc itself
 * (resolve_dtypes) and built as casts around the torch op, whose values
 * numpy's loops give bit for bit (+ - * / // ==; not ** or @, whose numpy
 * kernels round otherwise, nor %, whose zero takes the divisor's sign in
 * numpy and the dividend's in torch: they run for real).
 */
#include "capture/torch/torch.h"

#include <string.h>

/* The graph input torch.from_numpy(a) for ndarray a from outside (what:
 * the call, for messages); with flip_dims (a tuple), torch.from_numpy of
 * np.flip(a, flip_dims), the source's key. */
static int array_input(cap_trace *T, PyObject *a, PyObject *flip_dims, const char *what, PyObject **out)
{
    if (!cap_is_ndarray(a))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s of a %s", what, cap_tpname(Py_TYPE(a)));
    int parent = cap_t_source_of(T, a);
    if (parent < 0)
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH,
                           "%s of an array ptc cannot reach from the call's inputs", what);
    PyObject *real = cap_ndarray_tensor(a, flip_dims);
    if (!real) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_TypeError))
            return CAP_ERR;
        /* eager warns (read-only) or raises (a dtype torch lacks): it runs for real */
        PyObject *type, *val, *tb;
        PyErr_Fetch(&type, &val, &tb);
        PyErr_NormalizeException(&type, &val, &tb);
        PyObject *msg = val ? PyObject_Str(val) : NULL;
        const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
        PyErr_Clear();
        int rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s: %s", what, m ? m : "this array");
        Py_XDECREF(msg);
        Py_XDECREF(type);
        Py_XDECREF(val);
        Py_XDECREF(tb);
        return rc;
    }
    int src = cap_source_add(T, CAP_S_FROM_NUMPY, parent, 0, 0, flip_dims);
    *out = src >= 0 ? cap_t_wrap(T, real, src) : NULL;
    Py_DECREF(real);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_th_from_numpy(cap_tcall *c, PyObject **out)
{
    PyObject *a = cap_targ(c, 0, "ndarray");
    if (!a || c->npos + c->nkw != 1)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "torch.from_numpy takes one array");
    return array_input(c->T, a, NULL, c->m->name, out);
}

/* torch.as_tensor(a) shares a's memory where it needs no conversion, as
 * from_numpy does; torch.tensor(a) copies it. */
int cap_th_tensor_of_array(cap_tcall *c, PyObject **out)
{
    PyObject *t = NULL;
    int rc = cap_ndarray_operand(c->T, c->pos[0], false, c->m->name, &t);
    if (rc != CAP_NEXT)
        return rc;
    rc = cap_th_tensor_of_tensor(c, (cap_tensor *)t, true, out);
    Py_DECREF(t);
    return rc;
}

int cap_ndarray_operand(cap_trace *T, PyObject *a, bool backwards, const char *what, PyObject **out)
{
    PyObject *t = NULL, *dims = backwards && cap_is_ndarray(a) ? cap_ndarray_backward_dims(a) : NULL;
    if (backwards && cap_is_ndarray(a) && !dims)
        return CAP_ERR;
    int rc = array_input(T, a, dims == Py_None ? NULL : dims, what, &t);
    Py_XDECREF(dims);
    if (rc != CAP_NEXT)
        return rc;
    if (!cap_is_tensor(t)) {
        /* an array no graph value can hold (a dtype ptc lacks) */
        rc = cap_t_real_tensor(T, t, what);
        Py_DECREF(t);
        return rc;
    }
    *out = t;
    return CAP_NEXT;
}

/* ---- tensor OP array ------------------------------------------------------------------ */

/* numpy's name for a tensor operator that takes an array (numpy_operator). */
static const char *ufunc_name(int k)
{
    switch (k) {
    case CAP_NB_ADD: return "add";
    case CAP_NB_SUBTRACT: return "subtract";
    case CAP_NB_MULTIPLY: return "multiply";
    case CAP_NB_TRUE_DIVIDE: return "true_divide";
    case CAP_NB_FLOOR_DIVIDE: return "floor_divide";
    case CAP_NB_EQ: return "equal";
    default: return NULL;
    }
}

/* The ptc dtype of numpy dtype d (its name is torch's: float32, bool...), or -1. */
int cap_dtype_of_numpy(PyObject *d)
{
    PyObject *name = PyObject_GetAttrString(d, "name");
    PyObject *td = name ? PyObject_GetAttr(cap_T.torch, name) : NULL;
    int dt = td ? cap_dtype_from_obj(td) : -1;
    Py_XDECREF(name);
    Py_XDECREF(td);
    PyErr_Clear();
    return dt;
}

/* numpy's dtype of the same name as ptc dtype dt's torch.dtype, or NULL
 * (bfloat16). */
PyObject *cap_numpy_dtype(PyObject *np, ptc_dtype dt)
{
    PyObject *td = cap_dtype_obj(dt);
    PyObject *text = td ? PyObject_Str(td) : NULL;
    const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
    PyObject *d =
        s && strncmp(s, "torch.", 6) == 0 ? PyObject_CallMethod(np, "dtype", "s", s + 6) : NULL;
    Py_XDECREF(text);
    return d;
}

/* numpy's loop of ufunc `name` for dtypes (x, a): its input and output
 * dtypes (ufunc.resolve_dtypes), or false where numpy has none ptc holds. */
static bool numpy_loop(const char *name, ptc_dtype x, ptc_dtype a, int loop[3])
{
    PyObject *np = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");
    PyObject *ufunc = np ? PyObject_GetAttrString(np, name) : NULL;
    PyObject *dx = np ? cap_numpy_dtype(np, x) : NULL;
    PyObject *da = np ? cap_numpy_dtype(np, a) : NULL;
    PyObject *in = ufunc && dx && da ? Py_BuildValue("((OOO))", dx, da, Py_None) : NULL;
    PyObject *res = in ? PyObject_CallMethod(ufunc, "resolve_dtypes", "O", in) : NULL;
    bool ok = res && PyTuple_Check(res) && PyTuple_Size(res) == 3;
    for (int i = 0; ok && i < 3; i++)
        ok = (loop[i] = cap_dtype_of_numpy(PyTuple_GetItem(res, i))) >= 0;
    Py_XDECREF(ufunc);
    Py_XDECREF(dx);
    Py_XDECREF(da);
    Py_XDECREF(in);
    Py_XDECREF(res);
    PyErr_Clear();
    return ok;
}

static ptc_value *cast(cap_trace *T, ptc_value *v, int dt)
{
    if (!v || (int)v->type.dtype == dt)
        return v;
    ptc_arg a[3] = {ptc_arg_value(v), ptc_arg_dtype((ptc_dtype)dt), ptc_arg_none()};
    return cap_build1(T, PTC_OP_TO, a, 3);
}

/* The values of the array graph input t stands for: t's own, or where the
 * array's strides run backwards (cap_ndarray_operand), their flip. */
static ptc_value *backwards_read(cap_trace *T, cap_tensor *t)
{
    PyObject *dims = T->src[t->src].key;
    int flip[PTC_MAX_DIMS], n = dims ? (int)PyTuple_Size(dims) : 0;
    for (int i = 0; i < n && i < PTC_MAX_DIMS; i++)
        flip[i] = (int)PyLong_AsLong(PyTuple_GetItem(dims, i));
    return n ? ptc_composite_flip(cap_composer(T), t->v, flip, n) : t->v;
}

int cap_ndarray_operator(cap_trace *T, int k, cap_tensor *x, bool x_requires_grad, PyObject *array,
                         cap_ndarray_build build, PyObject **out)
{
    const char *name = ufunc_name(k);
    if (!name || x_requires_grad || x->v->type.device.kind != PTC_DEV_CPU)
        return cap_t_break(T, CAP_B_TENSOR_DATA,
                           "a tensor operator with an ndarray (numpy's runs on tensor.numpy())");
    PyObject *at = NULL;
    /* numpy's ufunc reads an array with negative strides; x == a converts
       it as torch.as_tensor does, which raises for one (eager's ValueError) */
    int rc = cap_ndarray_operand(T, array, k != CAP_NB_EQ, "tensor operator", &at);
    if (rc != CAP_NEXT)
        return rc;
    int loop[3];
    ptc_value *av = backwards_read(T, (cap_tensor *)at);
    if (!av) {
        Py_DECREF(at);
        return CAP_BREAK;
    }
    if (!numpy_loop(name, x->v->type.dtype, av->type.dtype, loop)) {
        Py_DECREF(at);
        return cap_t_break(T, CAP_B_TENSOR_DATA, "numpy's %s of %s and %s", name,
                           ptc_dtype_name(x->v->type.dtype), ptc_dtype_name(av->type.dtype));
    }
    ptc_value *xv = cast(T, x->v, loop[0]);
    av = cast(T, av, loop[1]);
    Py_DECREF(at);
    PyObject *xt = xv ? cap_tensor_new(T, xv) : NULL, *ct = av ? cap_tensor_new(T, av) : NULL;
    PyObject *res = NULL;
    rc = xt && ct ? build(T, k, xt, ct, &res) : (xv && av ? CAP_ERR : CAP_BREAK);
    Py_XDECREF(xt);
    Py_XDECREF(ct);
    if (rc != CAP_NEXT)
        return rc;
    ptc_value *rv = cast(T, cap_val(res), loop[2]);
    if (rv == cap_val(res)) {
        *out = res;
        return CAP_NEXT;
    }
    Py_DECREF(res);
    return cap_wrap_value(T, rv, out);
}
