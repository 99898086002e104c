/* Special handlers for shape calls and conversions: varargs sizes
 * (x.view(2, -1)), overloaded to(), dtype casts, creation functions and the
 * *_like / new_* families.
 */
#include "capture/torch/torch.h"

#include <string.h>

#define ARG(i, name) cap_targ(c, i, name)

static cap_tensor *self_of(cap_tcall *c)
{
    return (cap_tensor *)c->pos[0];
}

static const ptc_ttype *ty(cap_tensor *t)
{
    return &t->v->type;
}

static int mark_view(PyObject *out, cap_tensor *base)
{
    if (out && cap_is_tensor(out) && !((cap_tensor *)out)->base)
        return cap_t_add_view(base, (cap_tensor *)out, NULL);
    return 0;
}

static int view_result(int rc, PyObject **out, cap_tensor *base)
{
    if (rc == CAP_NEXT && mark_view(*out, base) < 0) {
        Py_CLEAR(*out);
        return CAP_ERR;
    }
    return rc;
}

/* Positional args after self (pos[1..]) as an int list, or the named one. */
static int sizes_arg(cap_tcall *c, const char *kw, ptc_arg *out)
{
    if (c->npos > 1)
        return cap_int_varargs(c->T, c->pos + 1, c->npos - 1, out, c->m->name);
    PyObject *v = ARG(-1, kw);
    if (!v)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: missing sizes", c->m->name);
    return cap_int_list(c->T, v, out, c->m->name);
}

int cap_th_view(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    PyObject *a1 = ARG(1, "dtype");
    if (a1 && c->npos == 2 && PyObject_TypeCheck(a1, (PyTypeObject *)cap_T.dtype_type)) {
        int dt = cap_dtype_from_obj(a1);
        if (dt == (int)ty(t)->dtype) {
            *out = Py_NewRef((PyObject *)t);
            return CAP_NEXT;
        }
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "view(dtype) reinterpreting bits");
    }
    ptc_arg a[2] = {ptc_arg_value(t->v)};
    int rc = sizes_arg(c, "size", &a[1]);
    if (rc != CAP_NEXT)
        return rc;
    return view_result(cap_build(c->T, PTC_OP_VIEW, a, 2, out), out, t);
}

int cap_th_reshape(cap_tcall *c, PyObject **out)
{
    bool method = c->m->flags & TM_METHOD;
    cap_tensor *t = (cap_tensor *)ARG(0, "input");
    if (!t || !cap_is_tensor((PyObject *)t))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "reshape needs a tensor");
    ptc_arg a[2] = {ptc_arg_value(t->v)};
    int rc = method ? sizes_arg(c, "shape", &a[1])
                    : cap_int_list(c->T, ARG(1, "shape") ? ARG(1, "shape") : Py_None, &a[1], "reshape");
    if (rc != CAP_NEXT)
        return rc;
    return view_result(cap_build(c->T, PTC_OP_RESHAPE, a, 2, out), out, t);
}

int cap_th_view_as(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    PyObject *o = ARG(1, "other");
    if (!o || !cap_is_tensor(o))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    const ptc_ttype *ot = &cap_val(o)->type;
    ptc_arg a[2] = {ptc_arg_value(t->v), ptc_arg_dims(c->T->arena, ot->shape, ot->ndim)};
    return view_result(cap_build(c->T, PTC_OP_RESHAPE, a, 2, out), out, t);
}

int cap_th_permute(cap_tcall *c, PyObject **out)
{
    bool method = c->m->flags & TM_METHOD;
    cap_tensor *t = (cap_tensor *)ARG(0, "input");
    if (!t || !cap_is_tensor((PyObject *)t))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "permute needs a tensor");
    ptc_arg a[2] = {ptc_arg_value(t->v)};
    int rc = method ? sizes_arg(c, "dims", &a[1]) : cap_int_list(c->T, ARG(1, "dims"), &a[1], "permute");
    if (rc != CAP_NEXT)
        return rc;
    return view_result(cap_build(c->T, PTC_OP_PERMUTE, a, 2, out), out, t);
}

int cap_th_transpose(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)ARG(0, "input");
    PyObject *d0 = ARG(1, "dim0"), *d1 = ARG(2, "dim1");
    if (!t || !cap_is_tensor((PyObject *)t) || !d0 || !d1 || !PyLong_Check(d0) || !PyLong_Check(d1))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "transpose(tensor, int, int) expected");
    ptc_arg a[3] = {ptc_arg_value(t->v), ptc_arg_int(PyLong_AsLongLong(d0)),
                    ptc_arg_int(PyLong_AsLongLong(d1))};
    return view_result(cap_build(c->T, PTC_OP_TRANSPOSE, a, 3, out), out, t);
}

int cap_th_movedim(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)ARG(0, "input");
    PyObject *src = ARG(1, "source"), *dst = ARG(2, "destination");
    if (!t || !cap_is_tensor((PyObject *)t) || !src || !dst)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "movedim(tensor, source, destination)");
    ptc_arg s, d;
    if (cap_int_list(c->T, src, &s, "movedim") != CAP_NEXT || cap_int_list(c->T, dst, &d, "movedim") != CAP_NEXT)
        return CAP_BREAK;
    int nd = ty(t)->ndim;
    if (s.is.n != d.is.n)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "movedim: source and destination differ in length");
    int64_t perm[PTC_MAX_DIMS];
    bool used_src[PTC_MAX_DIMS] = {0}, used_dst[PTC_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++)
        perm[i] = -1;
    for (int i = 0; i < s.is.n; i++) {
        int si = ptc_wrap_dim(s.is.d[i].value, nd), di = ptc_wrap_dim(d.is.d[i].value, nd);
        if (si < 0 || di < 0)
            return cap_t_break(c->T, CAP_B_TRACE_ERROR, "movedim: dim out of range");
        perm[di] = si;
        used_src[si] = used_dst[di] = true;
    }
    int next = 0;
    for (int i = 0; i < nd; i++) {
        if (used_dst[i])
            continue;
        while (used_src[next])
            next++;
        perm[i] = next++;
    }
    ptc_arg a[2] = {ptc_arg_value(t->v), ptc_arg_ints(c->T->arena, perm, nd)};
    return view_result(cap_build(c->T, PTC_OP_PERMUTE, a, 2, out), out, t);
}

int cap_th_expand(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    ptc_arg a[2] = {ptc_arg_value(t->v)};
    int rc = sizes_arg(c, "size", &a[1]);
    if (rc != CAP_NEXT)
        return rc;
    return view_result(cap_build(c->T, PTC_OP_EXPAND, a, 2, out), out, t);
}

int cap_th_expand_as(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    PyObject *o = ARG(1, "other");
    if (!o || !cap_is_tensor(o))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "expand_as needs a tensor");
    const ptc_ttype *ot = &cap_val(o)->type;
    ptc_arg a[2] = {ptc_arg_value(t->v), ptc_arg_dims(c->T->arena, ot->shape, ot->ndim)};
    return view_result(cap_build(c->T, PTC_OP_EXPAND, a, 2, out), out, t);
}

int cap_th_repeat(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    ptc_arg a[2] = {ptc_arg_value(t->v)};
    int rc = sizes_arg(c, "repeats", &a[1]);
    return rc != CAP_NEXT ? rc : cap_build(c->T, PTC_OP_REPEAT, a, 2, out);
}

int cap_th_squeeze(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)ARG(0, "input");
    PyObject *d = ARG(1, "dim");
    if (!t || !cap_is_tensor((PyObject *)t))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "squeeze needs a tensor");
    ptc_arg a[2] = {ptc_arg_value(t->v), ptc_arg_none()};
    if (d && d != Py_None && cap_int_list(c->T, d, &a[1], "squeeze") != CAP_NEXT)
        return CAP_BREAK;
    return view_result(cap_build(c->T, PTC_OP_SQUEEZE, a, 2, out), out, t);
}

int cap_th_unflatten(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)ARG(0, "input");
    PyObject *d = ARG(1, "dim"), *sizes = ARG(2, "sizes");
    if (!t || !cap_is_tensor((PyObject *)t) || !d || !sizes || !PyLong_Check(d))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "unflatten(tensor, dim, sizes)");
    const ptc_ttype *tt = ty(t);
    int w = ptc_wrap_dim(PyLong_AsLongLong(d), tt->ndim);
    ptc_arg s;
    if (w < 0 || cap_int_list(c->T, sizes, &s, "unflatten") != CAP_NEXT)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "unflatten: bad dim or sizes");
    ptc_dim shape[PTC_MAX_DIMS * 2];
    int n = 0;
    for (int i = 0; i < tt->ndim; i++) {
        if (i != w) {
            shape[n++] = tt->shape[i];
            continue;
        }
        for (int k = 0; k < s.is.n; k++)
            shape[n++] = s.is.d[k];
    }
    if (n > PTC_MAX_DIMS)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "unflatten: too many dims");
    ptc_arg a[2] = {ptc_arg_value(t->v), ptc_arg_dims(c->T->arena, shape, n)};
    return view_result(cap_build(c->T, PTC_OP_VIEW, a, 2, out), out, t);
}

static int mark_views_list(int rc, PyObject **out, cap_tensor *base)
{
    if (rc != CAP_NEXT)
        return rc;
    for (Py_ssize_t i = 0; PySequence_Check(*out) && i < PySequence_Size(*out); i++) {
        PyObject *x = PySequence_GetItem(*out, i);
        int r = x ? mark_view(x, base) : -1;
        Py_XDECREF(x);
        if (r < 0) {
            Py_CLEAR(*out);
            return CAP_ERR;
        }
    }
    return rc;
}

int cap_th_split(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)ARG(0, "tensor");
    PyObject *s = ARG(1, "split_size_or_sections"), *d = ARG(2, "dim");
    if (!s)
        s = ARG(-1, "split_size");
    if (!t || !cap_is_tensor((PyObject *)t) || !s)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "split(tensor, sizes, dim)");
    ptc_arg a[3] = {ptc_arg_value(t->v), ptc_arg_none(), ptc_arg_int(0)};
    if (d && PyLong_Check(d))
        a[2] = ptc_arg_int(PyLong_AsLongLong(d));
    ptc_op op = PTC_OP_SPLIT;
    ptc_dim piece;
    if (PyLong_Check(s) || cap_is_symint(s)) { /* one size, perhaps symbolic: x.split(C) */
        if (cap_dim_from_obj(c->T, s, &piece) < 0)
            return CAP_ERR;
        a[1] = ptc_arg_dim(piece);
    } else {
        op = PTC_OP_SPLIT_WITH_SIZES;
        if (cap_int_list(c->T, s, &a[1], "split") != CAP_NEXT)
            return CAP_BREAK;
    }
    int rc = cap_build(c->T, op, a, 3, out);
    if (rc == CAP_NEXT) {
        PyObject *tup = PySequence_Tuple(*out); /* torch returns a tuple */
        Py_SETREF(*out, tup);
        if (!tup)
            return CAP_ERR;
    }
    return mark_views_list(rc, out, t);
}

/* The sizes of the pieces tensor_split cuts a dim of `size` into, from its
 * indices_or_sections argument s: a number of sections (the first size % n
 * one longer), or split points (non-decreasing, within the dim). In the
 * trace's arena, their count in *n; NULL where s is neither (a tensor). */
static int64_t *tensor_split_pieces(cap_tcall *c, PyObject *s, int64_t size, int *n)
{
    ptc_arg points = ptc_arg_none();
    bool by_sections = PyLong_Check(s);
    int64_t sections = by_sections ? PyLong_AsLongLong(s) : 0;
    if (by_sections)
        *n = sections > 0 && sections <= 4096 ? (int)sections : 0;
    else if ((PyList_Check(s) || PyTuple_Check(s)) &&
             cap_int_list(c->T, s, &points, "tensor_split") == CAP_NEXT && points.is.n < 4096)
        *n = points.is.n + 1;
    else
        *n = 0;
    int64_t *sizes = *n ? ptc_arena_alloc(c->T->arena, sizeof *sizes * (size_t)*n) : NULL;
    int64_t at = 0;
    for (int i = 0; sizes && i < *n; i++) {
        if (by_sections) {
            sizes[i] = size / sections + (i < size % sections);
            continue;
        }
        const ptc_dim *p = i < *n - 1 ? &points.is.d[i] : NULL;
        if (p && (p->sym || p->value < at || p->value > size))
            return NULL;
        sizes[i] = (p ? p->value : size) - at;
        at = p ? p->value : size;
    }
    return sizes;
}

/* tensor_split(input, indices_or_sections, dim=0): as split with the sizes
 * of tensor_split_pieces (views, as eager's); a tensor of points, points
 * past the dim or decreasing, or a symbolic dim break. */
int cap_th_tensor_split(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)ARG(0, "input");
    PyObject *s = ARG(1, "indices_or_sections"), *d = ARG(2, "dim");
    if (!s)
        s = ARG(-1, ARG(-1, "sections") ? "sections" : "indices");
    int nd = t && cap_is_tensor((PyObject *)t) ? ty(t)->ndim : 0, n = 0;
    int64_t dim = d && PyLong_Check(d) ? PyLong_AsLongLong(d) : 0;
    bool ok = nd > 0 && s && (!d || PyLong_Check(d)) && dim >= -nd && dim < nd;
    dim += dim < 0 ? nd : 0;
    ok = ok && !ty(t)->shape[dim].sym;
    int64_t *sizes = ok ? tensor_split_pieces(c, s, ty(t)->shape[dim].value, &n) : NULL;
    if (!sizes)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "tensor_split by a tensor, by points past the dim or decreasing, or "
                           "along a symbolic dim");
    ptc_arg a[3] = {ptc_arg_value(t->v), ptc_arg_ints(c->T->arena, sizes, n), ptc_arg_int(dim)};
    int rc = cap_build(c->T, PTC_OP_SPLIT_WITH_SIZES, a, 3, out);
    if (rc == CAP_NEXT)
        Py_SETREF(*out, PySequence_Tuple(*out)); /* torch returns a tuple */
    if (rc == CAP_NEXT && !*out)
        return CAP_ERR;
    return mark_views_list(rc, out, t);
}

/* atleast_1d / 2d / 3d(tensor) of one tensor: the tensor itself where it
 * has the dims, else a view with ones added as torch adds them ([n] ->
 * [1, n] -> [1, n, 1]; [m, n] -> [m, n, 1]). Several tensors break. */
int cap_th_atleast(cap_tcall *c, PyObject **out)
{
    int want = c->m->name[strlen(c->m->name) - 2] - '0';
    PyObject *x = c->npos == 1 && c->nkw == 0 ? c->pos[0] : NULL;
    if (!x || !cap_is_tensor(x))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s of other than one tensor",
                           c->m->name);
    cap_tensor *t = (cap_tensor *)x;
    const ptc_ttype *tt = ty(t);
    if (tt->ndim >= want) {
        *out = Py_NewRef(x);
        return CAP_NEXT;
    }
    ptc_dim shape[3];
    int n = 0;
    if (tt->ndim == 0 || (tt->ndim == 1 && want >= 2))
        shape[n++] = ptc_dim_c(1);
    for (int i = 0; i < tt->ndim; i++)
        shape[n++] = tt->shape[i];
    while (n < want)
        shape[n++] = ptc_dim_c(1);
    ptc_arg a[2] = {ptc_arg_value(t->v), ptc_arg_dims(c->T->arena, shape, n)};
    return view_result(cap_build(c->T, PTC_OP_VIEW, a, 2, out), out, t);
}

/* One result of meshgrid: t (1-D, or 0-d) reshaped to n dims with its
 * elements along dim at, then expanded over the grid; each step a view of
 * the one before, as eager's. */
static PyObject *grid_view(cap_trace *T, cap_tensor *t, int at, const ptc_dim *grid, int n)
{
    ptc_dim shape[PTC_MAX_DIMS];
    for (int i = 0; i < n; i++)
        shape[i] = i == at ? grid[at] : ptc_dim_c(1);
    PyObject *lined = NULL, *spread = NULL;
    ptc_arg va[2] = {ptc_arg_value(t->v), ptc_arg_dims(T->arena, shape, n)};
    if (view_result(cap_build(T, PTC_OP_VIEW, va, 2, &lined), &lined, t) != CAP_NEXT)
        return NULL;
    ptc_arg ea[2] = {ptc_arg_value(cap_val(lined)), ptc_arg_dims(T->arena, grid, n)};
    int rc = view_result(cap_build(T, PTC_OP_EXPAND, ea, 2, &spread), &spread, (cap_tensor *)lined);
    Py_DECREF(lined);
    return rc == CAP_NEXT ? spread : NULL;
}

/* meshgrid(*tensors, indexing): 1-D or 0-d tensors of one dtype and device
 * (as a sequence or as arguments), indexing "ij" or "xy" ("xy" swaps the
 * first two dims of the grid); without indexing eager warns: a break, as
 * are symbolic sizes. */
int cap_th_meshgrid(cap_tcall *c, PyObject **out)
{
    PyObject *indexing = ARG(-1, "indexing");
    bool listed = c->npos == 1 && (PyList_Check(c->pos[0]) || PyTuple_Check(c->pos[0]));
    PyObject *seq = listed ? PySequence_Tuple(c->pos[0]) : NULL;
    int n = listed ? (seq ? (int)PyTuple_Size(seq) : 0) : c->npos;
    const char *ix = indexing && PyUnicode_Check(indexing) ? PyUnicode_AsUTF8(indexing) : "";
    bool ok = n >= 1 && n <= PTC_MAX_DIMS && (strcmp(ix, "xy") == 0 || strcmp(ix, "ij") == 0);
    bool xy = strcmp(ix, "xy") == 0 && n >= 2; /* one tensor: the same either way */
    cap_tensor *ts[PTC_MAX_DIMS];
    ptc_dim grid[PTC_MAX_DIMS];
    for (int i = 0; ok && i < n; i++) {
        PyObject *o = listed ? PyTuple_GetItem(seq, i) : c->pos[i];
        ts[i] = cap_is_tensor(o) ? (cap_tensor *)o : NULL;
        ok = ts[i] && ty(ts[i])->ndim <= 1 && ty(ts[i])->dtype == ty(ts[0])->dtype &&
             ptc_device_eq(ty(ts[i])->device, ty(ts[0])->device) &&
             (ty(ts[i])->ndim == 0 || !ty(ts[i])->shape[0].sym);
        int at = xy && i < 2 ? 1 - i : i;
        grid[at] = ok && ty(ts[i])->ndim ? ty(ts[i])->shape[0] : ptc_dim_c(1);
    }
    PyObject *res = ok ? PyTuple_New(n) : NULL;
    for (int i = 0; res && i < n; i++) {
        PyObject *v = grid_view(c->T, ts[i], xy && i < 2 ? 1 - i : i, grid, n);
        if (!v || PyTuple_SetItem(res, i, v) < 0)
            Py_CLEAR(res);
    }
    Py_XDECREF(seq);
    if (!ok)
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH,
                           "meshgrid without indexing= (eager warns), or of other than 1-D "
                           "tensors of one dtype and device with static sizes");
    *out = res;
    return res ? CAP_NEXT : (PyErr_Occurred() ? CAP_ERR : CAP_BREAK);
}

int cap_th_chunk(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)ARG(0, "input");
    PyObject *n = ARG(1, "chunks"), *d = ARG(2, "dim");
    if (!t || !cap_is_tensor((PyObject *)t) || !n || !PyLong_Check(n))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "chunk(tensor, chunks, dim)");
    ptc_arg a[3] = {ptc_arg_value(t->v), ptc_arg_int(PyLong_AsLongLong(n)),
                    ptc_arg_int(d && PyLong_Check(d) ? PyLong_AsLongLong(d) : 0)};
    int rc = cap_build(c->T, PTC_OP_CHUNK, a, 3, out);
    if (rc == CAP_NEXT) {
        PyObject *tup = PySequence_Tuple(*out);
        Py_SETREF(*out, tup);
        if (!tup)
            return CAP_ERR;
    }
    return mark_views_list(rc, out, t);
}

/* t in memory format f (a cap_memory_format), as contiguous(memory_format=f)
 * lays it out: t itself where its strides already are f's (eager's alias;
 * for row-major only a graph input's layout is known while tracing), else a
 * value whose strides are f's. Row-major: a contiguous() node (free: an
 * alias in the loops), so that the result's strides follow eager's (x.t() + 1
 * is not contiguous). Channels-last: the row-major copy of t's channels-last
 * permutation, permuted back: t's values with channels-last strides. A rank
 * the format does not take breaks (eager raises). */
int cap_in_memory_format(cap_tcall *c, cap_tensor *t, int f, PyObject **out)
{
    static const int64_t to_last[2][5] = {{0, 2, 3, 1}, {0, 2, 3, 4, 1}},
                         back[2][5] = {{0, 3, 1, 2}, {0, 4, 1, 2, 3}};
    const ptc_ttype *tt = ty(t);
    int64_t st[PTC_MAX_DIMS];
    if (f == CAP_ROW_MAJOR && !t->v->def && tt->layout == PTC_LAYOUT_CONTIGUOUS) {
        *out = Py_NewRef((PyObject *)t);
        return CAP_NEXT;
    }
    if (f == CAP_ROW_MAJOR) {
        ptc_arg a[1] = {ptc_arg_value(t->v)};
        return cap_build(c->T, PTC_OP_CONTIGUOUS, a, 1, out);
    }
    int k = f == CAP_CHANNELS_LAST ? 0 : 1;
    if (tt->ndim != 4 + k)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: channels_last%s needs rank %d", c->m->name,
                           k ? "_3d" : "", 4 + k);
    if (cap_value_strides(c->T, t->v, st) && cap_strides_contiguous(tt, st, f)) {
        *out = Py_NewRef((PyObject *)t);
        return CAP_NEXT;
    }
    ptc_arg p1[2] = {ptc_arg_value(t->v), ptc_arg_ints(c->T->arena, to_last[k], 4 + k)};
    ptc_value *v = cap_build1(c->T, PTC_OP_PERMUTE, p1, 2);
    ptc_arg ct[1] = {ptc_arg_value(v)};
    v = v ? cap_build1(c->T, PTC_OP_CONTIGUOUS, ct, 1) : NULL;
    if (!v)
        return CAP_BREAK;
    ptc_arg p2[2] = {ptc_arg_value(v), ptc_arg_ints(c->T->arena, back[k], 4 + k)};
    return cap_build(c->T, PTC_OP_PERMUTE, p2, 2, out);
}

/* The memory_format= keyword of contiguous, clone and to: a
 * cap_memory_format, CAP_PRESERVE_FORMAT where it is absent and preserve
 * is the default (clone, to), or a break (-1) for another object. */
static int format_kw(cap_tcall *c, int pos, int dflt)
{
    PyObject *f = ARG(pos, "memory_format");
    int format = f ? cap_memory_format_of(f) : dflt;
    if (format >= 0 && (format != CAP_PRESERVE_FORMAT || dflt == CAP_PRESERVE_FORMAT))
        return format;
    cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with this memory_format", c->m->name);
    return -1;
}

int cap_th_contiguous(cap_tcall *c, PyObject **out)
{
    int f = format_kw(c, 1, CAP_ROW_MAJOR);
    return f < 0 ? CAP_BREAK : cap_in_memory_format(c, self_of(c), f, out);
}

/* clone(memory_format=preserve_format): a copy, in format f where one is
 * given (contiguous or channels-last strides, as eager's). */
int cap_th_clone(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    int f = format_kw(c, -1, CAP_PRESERVE_FORMAT);
    if (!t || f < 0)
        return t ? CAP_BREAK : cap_t_break(c->T, CAP_B_TRACE_ERROR, "clone needs a tensor");
    PyObject *laid = NULL;
    int rc = f == CAP_PRESERVE_FORMAT ? (laid = Py_NewRef((PyObject *)t), CAP_NEXT)
                                      : cap_in_memory_format(c, t, f, &laid);
    if (rc != CAP_NEXT)
        return rc;
    ptc_arg a[1] = {ptc_arg_value(cap_val(laid))};
    rc = cap_build(c->T, PTC_OP_CLONE, a, 1, out);
    Py_DECREF(laid);
    return rc;
}

int cap_th_detach(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)ARG(0, "input");
    if (!t || !cap_is_tensor((PyObject *)t))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "detach needs a tensor");
    /* eager's detach shares t's storage: the result is a view of t, so an
       in-place op on it writes t (buf.detach().mul_(0.9)). Without grad it
       is t's value, followed through writes as a same-shape reshape is
       (torch_permviews.c); with grad, a write through it breaks, and the
       break remakes it as a real detach of t (backend/eager.c). */
    if (!t->v->type.requires_grad) {
        *out = cap_tensor_new(c->T, t->v);
        int rc = view_result(*out ? CAP_NEXT : CAP_ERR, out, t);
        if (rc == CAP_NEXT && ((cap_tensor *)*out)->base == t)
            ((cap_tensor *)*out)->view_reshape = true;
        return rc;
    }
    /* A value that does not require grad: an identity copy without grad. */
    ptc_arg a[3] = {ptc_arg_value(t->v), ptc_arg_none(), ptc_arg_none()};
    ptc_value *v = cap_build1(c->T, PTC_OP_TO, a, 3);
    if (!v)
        return CAP_BREAK;
    v->type.requires_grad = false;
    *out = cap_tensor_new(c->T, v);
    return view_result(*out ? CAP_NEXT : CAP_ERR, out, t);
}

/* ---- dtypes and devices --------------------------------------------------------------- */

static int to_dtype_device(cap_tcall *c, cap_tensor *t, int dt, ptc_device *dev, PyObject **out)
{
    const ptc_ttype *tt = ty(t);
    bool same_dt = dt < 0 || dt == (int)tt->dtype;
    bool same_dev = !dev || ptc_device_eq(*dev, tt->device) ||
                    (dev->kind == tt->device.kind && dev->index < 0);
    PyObject *copy = ARG(-1, "copy");
    if (same_dt && same_dev && !(copy && PyObject_IsTrue(copy) == 1)) {
        *out = Py_NewRef((PyObject *)t); /* to() returns self when nothing changes */
        return CAP_NEXT;
    }
    ptc_arg a[3] = {ptc_arg_value(t->v), same_dt ? ptc_arg_none() : ptc_arg_dtype((ptc_dtype)dt),
                    same_dev ? ptc_arg_none() : ptc_arg_device(*dev)};
    return cap_build(c->T, PTC_OP_TO, a, 3, out);
}

int cap_th_to(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    int dt = -1;
    ptc_device dev, *devp = NULL;
    for (int i = 1; i < c->npos; i++) {
        PyObject *a = c->pos[i];
        int d = cap_dtype_from_obj(a);
        if (d >= 0 && (PyObject_TypeCheck(a, (PyTypeObject *)cap_T.dtype_type) || i > 1 || c->npos == 2))
            dt = d;
        else if (cap_is_tensor(a)) {
            dt = cap_val(a)->type.dtype;
            dev = cap_val(a)->type.device;
            devp = &dev;
        } else if (cap_device_from_obj(a, &dev) == 0)
            devp = &dev;
        else if (PyBool_Check(a))
            continue; /* non_blocking / copy */
        else
            return cap_t_break(c->T, CAP_B_TRACE_ERROR, "to(): unexpected %s", cap_tpname(Py_TYPE(a)));
    }
    PyObject *kd = ARG(-1, "dtype"), *kdev = ARG(-1, "device");
    if (kd && kd != Py_None && (dt = cap_dtype_from_obj(kd)) < 0)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "to(): unsupported dtype");
    if (kdev && kdev != Py_None) {
        if (cap_device_from_obj(kdev, &dev) < 0)
            return cap_t_break(c->T, CAP_B_TRACE_ERROR, "to(): bad device");
        devp = &dev;
    }
    int f = format_kw(c, -1, CAP_PRESERVE_FORMAT);
    if (f < 0)
        return CAP_BREAK;
    if (f == CAP_PRESERVE_FORMAT)
        return to_dtype_device(c, t, dt, devp, out);
    PyObject *moved = NULL;
    int rc = to_dtype_device(c, t, dt, devp, &moved);
    if (rc == CAP_NEXT)
        rc = cap_in_memory_format(c, (cap_tensor *)moved, f, out);
    Py_XDECREF(moved);
    return rc;
}

int cap_th_type_as(cap_tcall *c, PyObject **out)
{
    PyObject *o = ARG(1, "other");
    if (!o || !cap_is_tensor(o))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "type_as needs a tensor");
    ptc_device dev = cap_val(o)->type.device;
    return to_dtype_device(c, self_of(c), cap_val(o)->type.dtype, &dev, out);
}

int cap_th_cast(cap_tcall *c, PyObject **out)
{
    return to_dtype_device(c, self_of(c), c->m->op, NULL, out);
}

int cap_th_cpu(cap_tcall *c, PyObject **out)
{
    ptc_device dev = c->m->op ? (ptc_device){PTC_DEV_CUDA, -1} : PTC_CPU;
    PyObject *d = ARG(1, "device");
    if (c->m->op && d && d != Py_None && cap_device_from_obj(d, &dev) < 0)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "cuda(): bad device");
    return to_dtype_device(c, self_of(c), -1, &dev, out);
}

/* ---- creation ---------------------------------------------------------------------------- */

/* The memory_format= keyword of a creation call: none, or preserve_format
 * for a *_like (*row_major false), or contiguous_format where the call
 * takes one (true); any other format, or one given to a factory that takes
 * none (eager raises TypeError), is a break: the call runs for real. */
static int creation_format(cap_tcall *c, bool like, bool *row_major)
{
    PyObject *f = ARG(-1, "memory_format");
    *row_major = false;
    if (!f || f == Py_None)
        return CAP_NEXT;
    PyObject *contiguous = PyObject_GetAttrString(cap_T.torch, "contiguous_format"),
             *preserve = PyObject_GetAttrString(cap_T.torch, "preserve_format");
    Py_XDECREF(contiguous); /* torch keeps them */
    Py_XDECREF(preserve);
    PyErr_Clear();
    bool takes_one = like || (c->m->fn == cap_th_factory && c->m->op == PTC_OP_EMPTY);
    if (takes_one && (f == contiguous || (like && f == preserve))) {
        *row_major = f == contiguous;
        return CAP_NEXT;
    }
    PyObject *text = PyObject_Str(f);
    int rc = cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s(memory_format=%s)", c->m->name,
                         text ? PyUnicode_AsUTF8(text) : "?");
    Py_XDECREF(text);
    PyErr_Clear();
    return rc;
}

/* dtype= / device= keywords (with defaults) for creation ops; the
 * memory_format= of those but the *_like family (cap_th_like reads its own). */
static int dtype_device(cap_tcall *c, ptc_arg *dt, ptc_arg *dev, ptc_dtype ddt, ptc_device ddev)
{
    PyObject *d = ARG(-1, "dtype"), *v = ARG(-1, "device"), *rg = ARG(-1, "requires_grad");
    *dt = ptc_arg_dtype(ddt);
    *dev = ptc_arg_device(ddev);
    bool row_major;
    int rc = c->m->fn == cap_th_like ? CAP_NEXT : creation_format(c, false, &row_major);
    if (rc != CAP_NEXT)
        return rc;
    if (rg && PyObject_IsTrue(rg) == 1)
        return cap_t_break(c->T, CAP_B_AUTOGRAD, "%s(requires_grad=True)", c->m->name);
    if (d && d != Py_None) {
        int x = cap_dtype_from_obj(d);
        if (x < 0)
            return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: unsupported dtype", c->m->name);
        *dt = ptc_arg_dtype((ptc_dtype)x);
    }
    if (v && v != Py_None) {
        ptc_device dd;
        if (cap_device_from_obj(v, &dd) < 0)
            return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: bad device", c->m->name);
        *dev = ptc_arg_device(dd);
    }
    return CAP_NEXT;
}

ptc_dtype cap_default_dtype(void)
{
    PyObject *f = PyObject_GetAttrString(cap_T.torch, "get_default_dtype");
    PyObject *d = f ? PyObject_CallNoArgs(f) : NULL;
    int dt = d ? cap_dtype_from_obj(d) : -1;
    Py_XDECREF(f);
    Py_XDECREF(d);
    PyErr_Clear();
    return dt >= 0 ? (ptc_dtype)dt : PTC_F32;
}

int cap_th_factory(cap_tcall *c, PyObject **out)
{
    ptc_arg a[4];
    int rc = c->npos > 0 ? cap_int_varargs(c->T, c->pos, c->npos, &a[0], c->m->name)
                         : cap_int_list(c->T, ARG(-1, "size") ? ARG(-1, "size") : Py_None, &a[0], c->m->name);
    if (rc != CAP_NEXT)
        return rc;
    if ((rc = dtype_device(c, &a[1], &a[2], cap_default_dtype(), PTC_CPU)) != CAP_NEXT)
        return rc;
    return cap_build(c->T, (ptc_op)c->m->op, a, 3, out);
}

int cap_th_full(cap_tcall *c, PyObject **out)
{
    ptc_arg a[4];
    PyObject *size = ARG(0, "size"), *fill = ARG(1, "fill_value");
    if (!size || !fill)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "full(size, fill_value)");
    int rc = cap_int_list(c->T, size, &a[0], "full");
    if (rc == CAP_NEXT)
        rc = cap_tconvert(c->T, fill, PTC_PK_SCALAR, 0, &a[1], "full(fill_value)");
    if (rc != CAP_NEXT)
        return rc;
    /* torch infers the dtype from the fill value when none is given. */
    ptc_dtype dt = a[1].kind == PTC_ARG_FLOAT ? cap_default_dtype()
                   : a[1].kind == PTC_ARG_BOOL ? PTC_BOOL : PTC_I64;
    if ((rc = dtype_device(c, &a[2], &a[3], dt, PTC_CPU)) != CAP_NEXT)
        return rc;
    return cap_build(c->T, PTC_OP_FULL, a, 4, out);
}

/* arange's bounds: a symbolic size stays symbolic (its meta takes them). */
static int arange_arg(cap_trace *T, PyObject *v, ptc_arg *out, const char *what)
{
    ptc_dim d;
    if (cap_is_symint(v)) {
        if (cap_dim_from_obj(T, v, &d) < 0)
            return CAP_ERR;
        *out = ptc_arg_dim(d);
        return CAP_NEXT;
    }
    return cap_tconvert(T, v, PTC_PK_SCALAR, 0, out, what);
}

int cap_th_arange(cap_tcall *c, PyObject **out)
{
    ptc_arg a[5];
    PyObject *v[3] = {NULL, NULL, NULL};
    int n = c->npos;
    for (int i = 0; i < n && i < 3; i++)
        v[i] = c->pos[i];
    if (!v[0])
        v[0] = ARG(-1, "end");
    PyObject *start = n >= 2 ? v[0] : ARG(-1, "start");
    PyObject *end = n >= 2 ? v[1] : v[0] ? v[0] : ARG(-1, "end");
    PyObject *step = n >= 3 ? v[2] : ARG(-1, "step");
    if (!end)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "arange needs an end");
    PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1);
    int rc = arange_arg(c->T, start ? start : zero, &a[0], "arange(start)");
    if (rc == CAP_NEXT)
        rc = arange_arg(c->T, end, &a[1], "arange(end)");
    if (rc == CAP_NEXT)
        rc = arange_arg(c->T, step ? step : one, &a[2], "arange(step)");
    Py_DECREF(zero);
    Py_DECREF(one);
    if (rc != CAP_NEXT)
        return rc;
    bool flt = a[0].kind == PTC_ARG_FLOAT || a[1].kind == PTC_ARG_FLOAT || a[2].kind == PTC_ARG_FLOAT;
    if ((rc = dtype_device(c, &a[3], &a[4], flt ? cap_default_dtype() : PTC_I64, PTC_CPU)) != CAP_NEXT)
        return rc;
    return cap_build(c->T, PTC_OP_ARANGE, a, 5, out);
}

int cap_th_random(cap_tcall *c, PyObject **out)
{
    ptc_arg a[4];
    if (ARG(-1, "generator"))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s with a generator", c->m->name);
    int rc = c->npos > 0 ? cap_int_varargs(c->T, c->pos, c->npos, &a[0], c->m->name)
                         : cap_int_list(c->T, ARG(-1, "size") ? ARG(-1, "size") : Py_None, &a[0], c->m->name);
    if (rc != CAP_NEXT || (rc = dtype_device(c, &a[1], &a[2], cap_default_dtype(), PTC_CPU)) != CAP_NEXT)
        return rc;
    a[3] = ptc_arg_int((int64_t)cap_t_next_seed(c->T));
    return cap_build(c->T, (ptc_op)c->m->op, a, 4, out);
}

/* A *_like of a tensor of type tt laid out in order perm (outermost dim
 * first, not row-major): the creation over tt's dims in that order, permuted
 * back. The graph's result then has eager's strides (a returned one comes
 * back with them), and stride() follows the permute. */
static int build_permuted(cap_tcall *c, const ptc_ttype *tt, const int8_t *perm, ptc_op op,
                          ptc_arg *a, int nargs, PyObject **out)
{
    ptc_dim shape[PTC_MAX_DIMS];
    int64_t back[PTC_MAX_DIMS];
    for (int k = 0; k < tt->ndim; k++) {
        shape[k] = tt->shape[perm[k]];
        back[perm[k]] = k;
    }
    a[0] = ptc_arg_dims(c->T->arena, shape, tt->ndim);
    ptc_value *made = cap_build1(c->T, op, a, nargs);
    if (!made)
        return PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    ptc_arg p[2] = {ptc_arg_value(made), ptc_arg_ints(c->T->arena, back, tt->ndim)};
    return cap_build(c->T, PTC_OP_PERMUTE, p, 2, out);
}

/* A *_like call's creation op: in t's layout (t NULL: row-major,
 * memory_format=torch.contiguous_format), permuted where that is not
 * row-major, and noted as made like t: its strides are t's exactly where t
 * is dense, a size-1 dim's too, which no permutation gives
 * (torch_strides.c). */
static int build_like(cap_tcall *c, cap_tensor *t, ptc_op op, ptc_arg *a, int nargs, PyObject **out)
{
    int8_t perm[PTC_MAX_DIMS];
    int rc = t && cap_like_order(c->T, t->v, perm)
                 ? build_permuted(c, ty(t), perm, op, a, nargs, out)
                 : cap_build(c->T, op, a, nargs, out);
    if (rc != CAP_NEXT || !t || !cap_is_tensor(*out))
        return rc;
    if (cap_note_like(c->T, ((cap_tensor *)*out)->v->def, t->v) < 0) {
        Py_CLEAR(*out);
        return CAP_ERR;
    }
    return CAP_NEXT;
}

/* zeros_like(x, dtype=, device=) and friends. */
int cap_th_like(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = (cap_tensor *)ARG(0, "input");
    if (!t || !cap_is_tensor((PyObject *)t))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s needs a tensor", c->m->name);
    const ptc_ttype *tt = ty(t);
    ptc_arg dt, dev, a[5];
    bool row_major;
    int rc = creation_format(c, true, &row_major);
    if (rc == CAP_NEXT)
        rc = dtype_device(c, &dt, &dev, tt->dtype, tt->device);
    if (rc != CAP_NEXT)
        return rc;
    cap_tensor *layout_of = row_major ? NULL : t;
    a[0] = ptc_arg_dims(c->T->arena, tt->shape, tt->ndim);
    ptc_op op = (ptc_op)c->m->op;
    if (op == PTC_OP_FULL) {
        PyObject *fill = ARG(1, "fill_value");
        if (!fill || cap_tconvert(c->T, fill, PTC_PK_SCALAR, 0, &a[1], "full_like") != CAP_NEXT)
            return CAP_BREAK;
        a[2] = dt, a[3] = dev;
        return build_like(c, layout_of, op, a, 4, out);
    }
    a[1] = dt, a[2] = dev;
    if (op == PTC_OP_RAND || op == PTC_OP_RANDN) {
        a[3] = ptc_arg_int((int64_t)cap_t_next_seed(c->T));
        return build_like(c, layout_of, op, a, 4, out);
    }
    return build_like(c, layout_of, op, a, 3, out);
}

/* x.new_zeros(size, dtype=, device=): creation with x's dtype and device. */
int cap_th_new_full(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    const ptc_ttype *tt = ty(t);
    ptc_op op = (ptc_op)c->m->op;
    ptc_arg a[4];
    int rc;
    if (op == PTC_OP_FULL) {
        PyObject *size = ARG(1, "size"), *fill = ARG(2, "fill_value");
        if (!size || !fill)
            return cap_t_break(c->T, CAP_B_TRACE_ERROR, "new_full(size, fill_value)");
        rc = cap_int_list(c->T, size, &a[0], "new_full");
        if (rc == CAP_NEXT)
            rc = cap_tconvert(c->T, fill, PTC_PK_SCALAR, 0, &a[1], "new_full");
        if (rc == CAP_NEXT)
            rc = dtype_device(c, &a[2], &a[3], tt->dtype, tt->device);
        return rc != CAP_NEXT ? rc : cap_build(c->T, op, a, 4, out);
    }
    rc = c->npos > 1 ? cap_int_varargs(c->T, c->pos + 1, c->npos - 1, &a[0], c->m->name)
                     : cap_int_list(c->T, ARG(-1, "size") ? ARG(-1, "size") : Py_None, &a[0], c->m->name);
    if (rc == CAP_NEXT)
        rc = dtype_device(c, &a[1], &a[2], tt->dtype, tt->device);
    return rc != CAP_NEXT ? rc : cap_build(c->T, op, a, 3, out);
}

/* torch.tensor(data) and friends: evaluated now, a constant of the graph. */
int cap_th_tensor_const(cap_tcall *c, PyObject **out)
{
    bool of_data = strcmp(c->m->name, "torch.tensor") == 0 || strcmp(c->m->name, "torch.as_tensor") == 0;
    if (c->npos >= 1 && cap_is_tensor(c->pos[0]) && of_data)
        return cap_th_tensor_of_tensor(c, (cap_tensor *)c->pos[0], false, out);
    if (c->npos >= 1 && cap_is_ndarray(c->pos[0]) && of_data)
        return cap_th_tensor_of_array(c, out);
    for (int i = 0; i < c->npos + c->nkw; i++) {
        PyObject *v = i < c->npos ? c->pos[i] : c->kwv[i - c->npos];
        if (cap_is_tensor(v))
            return cap_t_break(c->T, CAP_B_TENSOR_DATA, "%s of a traced tensor", c->m->name);
        if (!cap_is_constant(v) && !PyList_Check(v) && !PyTuple_Check(v))
            return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "%s of a %s", c->m->name, cap_tpname(Py_TYPE(v)));
    }
    PyObject *fn = cap_import_path(c->m->name);
    PyObject *real = fn ? cap_call_real(fn, c->pos, c->npos + c->nkw, c->kwnames) : NULL;
    Py_XDECREF(fn);
    if (!real)
        return CAP_ERR;
    *out = cap_tensor_const(c->T, real);
    Py_DECREF(real);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* src cast to t's dtype and broadcast to its shape, a new tensor: the
 * value x.copy_(src) and x.fill_(src) give x (any dtype casts, as eager's
 * copy does, where other in-place ops refuse a float result into an
 * integer tensor). */
static int broadcast_copy(cap_tcall *c, cap_tensor *t, PyObject *src, PyObject **out)
{
    const ptc_ttype *tt = ty(t);
    ptc_value *v = cap_val(src);
    if (v->type.dtype != tt->dtype) {
        ptc_arg to[2] = {ptc_arg_value(v), ptc_arg_dtype(tt->dtype)};
        if (!(v = cap_build1(c->T, PTC_OP_TO, to, 2)))
            return CAP_BREAK;
    }
    ptc_arg a[2] = {ptc_arg_value(v), ptc_arg_dims(c->T->arena, tt->shape, tt->ndim)};
    if (!(v = cap_build1(c->T, PTC_OP_EXPAND, a, 2)))
        return CAP_BREAK;
    ptc_arg cl[1] = {ptc_arg_value(v)};
    return cap_build(c->T, PTC_OP_CLONE, cl, 1, out);
}

/* x.fill_(v), x.zero_(): a full tensor that replaces x's value; v a 0-dim
 * tensor of x's device: it broadcast (another tensor: eager's error, from
 * the op run for real after a break). */
int cap_th_fill(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    PyObject *v = ARG(1, "value");
    const ptc_ttype *tt = ty(t);
    if (v && cap_is_tensor(v)) {
        const ptc_ttype *vt = &cap_val(v)->type;
        bool same_device = ptc_device_eq(vt->device, tt->device);
        if (vt->ndim != 0 || !same_device)
            return cap_t_break(c->T, CAP_B_TENSOR_ITEM, "fill_ with a tensor of %d dims on %s",
                               vt->ndim, same_device ? "its device" : "another device");
        return broadcast_copy(c, t, v, out);
    }
    ptc_arg a[4] = {ptc_arg_dims(c->T->arena, tt->shape, tt->ndim), ptc_arg_int(0),
                    ptc_arg_dtype(tt->dtype), ptc_arg_device(tt->device)};
    if (!v || cap_tconvert(c->T, v, PTC_PK_SCALAR, 0, &a[1], "fill_") != CAP_NEXT)
        return CAP_BREAK;
    return cap_build(c->T, PTC_OP_FULL, a, 4, out);
}

int cap_th_zero(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    const ptc_ttype *tt = ty(t);
    ptc_arg a[3] = {ptc_arg_dims(c->T->arena, tt->shape, tt->ndim), ptc_arg_dtype(tt->dtype),
                    ptc_arg_device(tt->device)};
    return cap_build(c->T, PTC_OP_ZEROS, a, 3, out);
}

/* x.copy_(src): src broadcast to x's shape (cast by cap_inplace). */
int cap_th_copy(cap_tcall *c, PyObject **out)
{
    cap_tensor *t = self_of(c);
    PyObject *src = ARG(1, "src");
    if (!src || !cap_is_tensor(src))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "copy_ needs a tensor");
    return broadcast_copy(c, t, src, out);
}
