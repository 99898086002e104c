/* Views made by ops (permute, transpose, t; view, reshape, flatten,
 * squeeze, unsqueeze; narrow, select, split, chunk, unbind) and mutation.
 *
 * A basic-indexing view follows a mutation through its key (torch_ops.c).
 * A permuted view follows one through its permutation: it is recomputed
 * from its base as base.permute(perm), and a write through it reaches the
 * base as value.permute(inverse of perm). A reshaped view keeps its base's
 * elements in row-major order, which is what torch's view means whatever
 * the strides: it is recomputed as base.reshape(its shape), and a write
 * reaches the base as value.reshape(the base's shape). All are exact for
 * every element, so x.t().add_(1) or x.view(-1)[0] = 1 on an argument is one
 * graph written back after the call, as torch.compile's functionalisation
 * does. Views that take a part of their base along one dim (narrow, select,
 * and the pieces of split, chunk and unbind) are given the basic-indexing
 * key that picks the same part (x.chunk(2)[1] of a 4-row x is x[2:4]), and
 * so follow mutations as indexing does; an expand stays a break (eager
 * rejects most writes through one). The view must come straight from one of these ops (read from
 * the node that made it); reshape and flatten only of an argument whose layout the guards fix as
 * row-major, where eager's result is sure to be a view (of anything else it may be a copy).
 * numpy's flip is a view with negative strides, which torch has not: its
 * result is base.flip(dims), recomputed from the base after a write to it,
 * and a write through it reaches the base flipped back (flip is its own
 * inverse), so that writes either way are seen as through numpy's view.
 * Anything else stays a break.
 */
#include "capture/torch/torch.h"

/* The permutation the node making v applies to its input (perm[i] is the
 * input dim of v's dim i), or false when v is not made by one. */
static bool node_perm(const ptc_value *v, const ptc_value *base, int perm[PTC_MAX_DIMS])
{
    const ptc_node *n = v->def;
    if (!n || n->nargs < 1 || n->args[0].kind != PTC_ARG_VALUE || n->args[0].v != base)
        return false;
    int ndim = n->args[0].v->type.ndim;
    for (int i = 0; i < ndim; i++)
        perm[i] = i;
    if (n->op == PTC_OP_PERMUTE) {
        if (n->args[1].is.n != ndim)
            return false;
        for (int i = 0; i < ndim; i++) {
            ptc_dim d = n->args[1].is.d[i];
            if (!ptc_dim_is_static(d))
                return false;
            perm[i] = (int)(d.value < 0 ? d.value + ndim : d.value);
        }
        return true;
    }
    if (n->op == PTC_OP_TRANSPOSE) {
        ptc_dim d0 = n->args[1].i, d1 = n->args[2].i;
        if (!ptc_dim_is_static(d0) || !ptc_dim_is_static(d1) || ndim == 0)
            return ndim == 0;
        int a = (int)(d0.value < 0 ? d0.value + ndim : d0.value),
            b = (int)(d1.value < 0 ? d1.value + ndim : d1.value);
        perm[a] = b;
        perm[b] = a;
        return true;
    }
    if (n->op == PTC_OP_T) {
        if (ndim == 2) {
            perm[0] = 1;
            perm[1] = 0;
        }
        return true;
    }
    return false;
}

/* Is v made by a reshaping op of base whose result eager is sure to give
 * as a view? */
static bool node_reshape(const ptc_value *v, const cap_tensor *base)
{
    const ptc_node *n = v->def;
    if (!n || n->nargs < 1 || n->args[0].kind != PTC_ARG_VALUE || n->args[0].v != base->v)
        return false;
    switch (n->op) {
    case PTC_OP_VIEW: case PTC_OP_SQUEEZE: case PTC_OP_UNSQUEEZE:
        return true;
    case PTC_OP_RESHAPE: case PTC_OP_FLATTEN:
        return base->input_v && !base->base && base->input_v->type.layout == PTC_LAYOUT_CONTIGUOUS;
    default:
        return false;
    }
}

/* A static int argument of n (false when absent or symbolic). */
static bool static_int(const ptc_node *n, int k, int64_t *out)
{
    if (k >= n->nargs || n->args[k].kind != PTC_ARG_INT || !ptc_dim_is_static(n->args[k].i))
        return false;
    *out = n->args[k].i.value;
    return true;
}

/* Where along its dim the piece of a split, chunk or unbind v starts: where
 * the pieces before it end (false where a size is symbolic). */
static bool piece_start(const ptc_value *v, int64_t dim, int64_t *start)
{
    const ptc_node *n = v->def;
    *start = 0;
    for (int i = 0; i < v->def_index; i++) {
        ptc_dim d = n->op == PTC_OP_UNBIND ? (ptc_dim){.value = 1} : n->outs[i]->type.shape[dim];
        if (!ptc_dim_is_static(d))
            return false;
        *start += d.value;
    }
    return true;
}

/* base[start] (drops the dim) or base[start:start + len] along dim: dim full
 * slices, then that index (a new reference; NULL with an error set). */
static PyObject *key_along(int64_t dim, int64_t start, const int64_t *len)
{
    PyObject *key = PyTuple_New(dim + 1);
    for (int64_t i = 0; key && i < dim; i++)
        if (PyTuple_SetItem(key, i, PySlice_New(NULL, NULL, NULL)) < 0)
            Py_CLEAR(key);
    PyObject *a = PyLong_FromLongLong(start), *b = len ? PyLong_FromLongLong(start + *len) : NULL;
    PyObject *at = !a || (len && !b) ? NULL : len ? PySlice_New(a, b, NULL) : Py_NewRef(a);
    if (key && PyTuple_SetItem(key, dim, at) < 0) /* steals at, also on failure */
        Py_CLEAR(key);
    else if (!key)
        Py_XDECREF(at);
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (key && PyErr_Occurred()) /* a slice that could not be made */
        Py_CLEAR(key);
    return key;
}

/* The basic-indexing key base[key] that picks what v's node takes of base,
 * so that x.narrow(1, 0, 2), x.select(0, 1), x.chunk(2)[1], x.split(1)[0]
 * and x.unbind()[0] follow mutations as x[:, 0:2], x[1], x[2:4], x[0:1] and
 * x[0] do. NULL, with no error set, where a size or argument is symbolic or
 * the node is none of these. */
static PyObject *slicing_key(const ptc_value *v, const ptc_value *base)
{
    const ptc_node *n = v->def;
    bool pieces =
        n->op == PTC_OP_SPLIT || n->op == PTC_OP_SPLIT_WITH_SIZES || n->op == PTC_OP_CHUNK;
    bool selects = n->op == PTC_OP_SELECT || n->op == PTC_OP_UNBIND;
    int64_t dim, start, size, len;
    if (!pieces && !selects && n->op != PTC_OP_NARROW)
        return NULL;
    if (!static_int(n, pieces ? 2 : 1, &dim))
        return NULL;
    dim = dim < 0 ? dim + base->type.ndim : dim;
    if (dim < 0 || dim >= base->type.ndim || !ptc_dim_is_static(base->type.shape[dim]))
        return NULL;
    size = base->type.shape[dim].value;
    if (n->op == PTC_OP_SELECT || n->op == PTC_OP_NARROW) {
        if (!static_int(n, 2, &start))
            return NULL;
        start = start < 0 ? start + size : start;
    } else if (!piece_start(v, dim, &start)) {
        return NULL;
    }
    if (selects)
        return key_along(dim, start, NULL);
    if (!ptc_dim_is_static(v->type.shape[dim]))
        return NULL;
    len = v->type.shape[dim].value;
    return key_along(dim, start, &len);
}

int cap_t_note_op_view(cap_tensor *view)
{
    int perm[PTC_MAX_DIMS];
    if (!view->base || view->view_key)
        return 0;
    if (view->v->def && view->v->def->args[0].kind == PTC_ARG_VALUE &&
        view->v->def->args[0].v == view->base->v &&
        (view->view_key = slicing_key(view->v, view->base->v)))
        return 0;
    if (PyErr_Occurred())
        return -1;
    if (node_reshape(view->v, view->base)) {
        view->view_reshape = true;
        return 0;
    }
    if (!node_perm(view->v, view->base->v, perm))
        return 0;
    int ndim = view->v->type.ndim;
    PyObject *t = PyTuple_New(ndim);
    for (int i = 0; t && i < ndim; i++)
        if (PyTuple_SetItem(t, i, PyLong_FromLong(perm[i])) < 0)
            Py_CLEAR(t);
    if (!t)
        return -1;
    Py_XSETREF(view->view_perm, t);
    return 0;
}

/* v.permute(perm), or v.permute(perm's inverse) (NULL after a break). */
static ptc_value *permuted(cap_trace *T, ptc_value *v, PyObject *perm, bool inverse)
{
    int n = (int)PyTuple_Size(perm);
    int64_t dims[PTC_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int p = (int)PyLong_AsLong(PyTuple_GetItem(perm, i));
        if (inverse)
            dims[p] = i;
        else
            dims[i] = p;
    }
    ptc_arg args[2] = {ptc_arg_value(v), ptc_arg_ints(T->arena, dims, n)};
    return cap_build1(T, PTC_OP_PERMUTE, args, 2);
}

/* v.reshape(as's shape) (NULL after a break). */
static ptc_value *reshaped(cap_trace *T, ptc_value *v, const ptc_value *as)
{
    ptc_arg args[2] = {ptc_arg_value(v), ptc_arg_dims(T->arena, as->type.shape, as->type.ndim)};
    return cap_build1(T, PTC_OP_RESHAPE, args, 2);
}

/* v.flip(dims), dims a tuple of dims in [0, ndim) (NULL after a break). */
static ptc_value *flipped(cap_trace *T, ptc_value *v, PyObject *dims)
{
    int d[PTC_MAX_DIMS], n = (int)PyTuple_Size(dims);
    for (int i = 0; i < n && i < PTC_MAX_DIMS; i++)
        d[i] = (int)PyLong_AsLong(PyTuple_GetItem(dims, i));
    return ptc_composite_flip(cap_composer(T), v, d, n);
}

int cap_t_op_view_refresh(cap_trace *T, cap_tensor *view, cap_tensor *base)
{
    ptc_value *v = view->view_reshape ? reshaped(T, base->v, view->v)
                   : view->view_flip  ? flipped(T, base->v, view->view_flip)
                                      : permuted(T, base->v, view->view_perm, false);
    if (!v)
        return CAP_BREAK;
    view->v = v;
    return CAP_NEXT;
}

int cap_t_op_view_write_back(cap_trace *T, cap_tensor *view, ptc_value *nv)
{
    if (view->view_reshape) {
        ptc_value *v = reshaped(T, nv, view->base->v);
        if (!v)
            return CAP_BREAK;
        view->base->v = v;
        return CAP_NEXT;
    }
    ptc_value *v = view->view_flip ? flipped(T, nv, view->view_flip)
                                   : permuted(T, nv, view->view_perm, true);
    /* A row-major base stays row-major, as eager's tensor written in place
       does: later ops (and the eager backend) lay their results out like it. */
    if (v && view->base->v->type.layout == PTC_LAYOUT_CONTIGUOUS) {
        ptc_arg arg = ptc_arg_value(v);
        v = cap_build1(T, PTC_OP_CONTIGUOUS, &arg, 1);
    }
    if (!v)
        return CAP_BREAK;
    view->base->v = v;
    return CAP_NEXT;
}
