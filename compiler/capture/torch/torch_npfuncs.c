/* np.<func> and ndarray methods on traced arrays (torch_ndarray.c).
 *
 * Each numpy function ptc traces is a row of the mapping table
 * ("numpy.sum", torch_table.c) whose handler finds its entry here: how its
 * arguments map onto a torch op, and the dtype that op computes in. Dtypes
 * and result kinds are numpy's own (cap_np_oracle). A call with no traced
 * array among its operands is the value of the real call where its
 * arguments are numbers (constants: np.sqrt(2.0); an array of them, such
 * as np.array([1.0, 2.0]), a graph constant), graph ops for the creation
 * functions (zeros, ones, arange, linspace, with numpy's float64 and int64
 * defaults), and otherwise not traced here (CAP_NONE): it runs as any C
 * function does. ndarray methods are rows named "ndarray.X" bound to the
 * array (cap_np_method_row); most are the numpy function of the same name.
 * The attributes of traced arrays are here too, as they hand out those
 * rows.
 */
#include "capture/torch/torch.h"

#include <string.h>

typedef struct npfn npfn;
typedef int (*np_runner)(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out);
struct npfn {
    const char *name; /* numpy's */
    np_runner run;
    const char *torch; /* torch's op */
    int cast;          /* cap_np_cast_policy */
    /* renamed(): numpy's parameters after the array, and torch's names for them */
    const char *np_params[3], *torch_params[3];
};

/* Argument i (or keyword name) of the call, NULL when absent. */
#define ARG(i, name) cap_targ(c, i, name)

/* Does the call pass anything beyond its first npos positional arguments
 * and the keywords named in `names` (NULL-terminated)? */
static bool extra_args(cap_tcall *c, int npos, const char *const *names)
{
    if (c->npos > npos)
        return true;
    for (int k = 0; k < c->nkw; k++) {
        const char *kw = PyUnicode_AsUTF8(PyTuple_GetItem(c->kwnames, k));
        bool known = false;
        for (int i = 0; kw && names && names[i]; i++)
            known = known || strcmp(kw, names[i]) == 0;
        if (!known)
            return true;
    }
    return false;
}

static int unsupported(cap_tcall *c, const char *what)
{
    return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "numpy's %s %s (not traced by ptc)",
                       c->m->name + (strncmp(c->m->name, "numpy.", 6) == 0 ? 6 : 0), what);
}

/* The call's array (*a: its first argument, numpy's `a`, taken as
 * cap_np_take does: an array from outside is a graph input; a new
 * reference) where the call passes no argument but names (the first one
 * positional or named `a`, the rest in order): CAP_NEXT; CAP_NONE where it
 * is no array (not traced here), a break for other arguments. */
static int array_call(cap_tcall *c, const char *const *names, PyObject **a)
{
    int n = 0;
    while (names[n])
        n++;
    PyObject *arg = ARG(0, "a");
    *a = NULL;
    if (!arg || !(cap_is_traced_numpy(arg) || cap_is_ndarray(arg)))
        return CAP_NONE;
    if (extra_args(c, n, names))
        return unsupported(c, "with these arguments");
    return cap_np_take(c->T, arg, c->m->name, a);
}

/* Takes operand v (cap_np_take) into *slot; *traced is set when it is a
 * traced array or scalar. */
static int operand(cap_tcall *c, PyObject *v, PyObject **slot, bool *traced)
{
    if (!v || v == Py_None) {
        *slot = Py_NewRef(Py_None);
        return CAP_NEXT;
    }
    int rc = cap_np_take(c->T, v, c->m->name, slot);
    if (rc == CAP_NEXT && cap_is_traced_numpy(*slot))
        *traced = true;
    return rc;
}

static void release(PyObject **v, int n)
{
    for (int i = 0; i < n; i++)
        Py_XDECREF(v[i]);
}

/* Runs op over operands ops[0..n) (numpy's arguments: nargs, kwargs) when one
 * of them is traced; CAP_NONE otherwise. */
static int apply(cap_tcall *c, cap_np_op *op, PyObject **ops, int n, PyObject *np_kwargs,
                 PyObject **out)
{
    bool traced = false;
    int rc = CAP_NEXT;
    PyObject *taken[3] = {NULL, NULL, NULL};
    for (int i = 0; i < n && rc == CAP_NEXT; i++)
        rc = operand(c, ops[i], &taken[i], &traced);
    if (rc == CAP_NEXT && !traced)
        rc = CAP_NONE;
    PyObject *args = rc == CAP_NEXT ? PyTuple_New(n) : NULL;
    for (int i = 0; args && i < n; i++)
        PyTuple_SetItem(args, i, Py_NewRef(taken[i]));
    if (args) {
        op->args = args;
        op->kwargs = np_kwargs;
        op->noperands = n;
        for (int i = 0; i < n; i++)
            op->operands[i] = taken[i];
        rc = cap_np_apply(c->T, op, out);
    }
    Py_XDECREF(args);
    release(taken, n);
    return rc;
}

static int dtype_arg(PyObject *d);

/* numpy's dtype= (argument pos, or keyword), into np_kw for numpy's oracle.
 * Only where the torch op computes at numpy's result dtype (CAST_OUT) does
 * that dtype decide the arithmetic; elsewhere it is not traced. */
static int dtype_kw(cap_tcall *c, const npfn *f, int pos, PyObject *np_kw)
{
    PyObject *d = ARG(pos, "dtype");
    if (!d || d == Py_None)
        return CAP_NEXT;
    if (f->cast != CAP_NP_CAST_OUT)
        return unsupported(c, "with dtype=");
    if (dtype_arg(d) < 0)
        return unsupported(c, "of a dtype ptc lacks");
    return PyDict_SetItemString(np_kw, "dtype", d) < 0 ? CAP_ERR : CAP_NEXT;
}

/* np_kw for apply(): NULL when empty. */
static PyObject *kw_or_null(PyObject *np_kw)
{
    return np_kw && PyDict_Size(np_kw) ? np_kw : NULL;
}

/* ---- ufuncs ----------------------------------------------------------------------------- */

static int ufunc(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    PyObject *nin = PyObject_GetAttrString(fn, "nin");
    long n = nin ? PyLong_AsLong(nin) : -1;
    Py_XDECREF(nin);
    PyErr_Clear();
    static const char *const names[] = {"dtype", NULL};
    if (n < 1 || n > 2 || c->npos != n)
        return CAP_NONE;
    if (extra_args(c, (int)n, names))
        return unsupported(c, "with keyword arguments other than dtype");
    PyObject *np_kw = PyDict_New();
    int rc = np_kw ? dtype_kw(c, f, -1, np_kw) : CAP_ERR;
    if (rc == CAP_NEXT) {
        cap_np_op op = {.what = f->name, .fn = fn, .torch = f->torch, .cast = f->cast};
        PyObject *ops[2] = {c->pos[0], n == 2 ? c->pos[1] : NULL};
        rc = apply(c, &op, ops, (int)n, kw_or_null(np_kw), out);
    }
    Py_XDECREF(np_kw);
    return rc;
}

/* arctan(a): torch's atan2(a, 1), the same angle (ptc has no atan); the
 * 1 a 0-d constant, which leaves a's dtype as it is. */
static int arctan(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    if (c->npos != 1 || c->nkw)
        return c->npos == 1 ? unsupported(c, "with keyword arguments") : CAP_NONE;
    static PyObject *tensor;
    if (!tensor && !(tensor = cap_import_path("torch.tensor")))
        return CAP_ERR;
    PyObject *real = PyObject_CallFunction(tensor, "d", 1.0);
    PyObject *one = real ? cap_tensor_const(c->T, real) : NULL;
    PyObject *extra = one ? PyTuple_Pack(1, one) : NULL;
    cap_np_op op = {.what = f->name, .fn = fn, .torch = f->torch, .cast = f->cast, .extra = extra};
    PyObject *ops[1] = {c->pos[0]};
    int rc = extra ? apply(c, &op, ops, 1, NULL, out) : PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    Py_XDECREF(real);
    Py_XDECREF(one);
    Py_XDECREF(extra);
    return rc;
}

/* where(cond, x, y): cond as bool, x and y at numpy's result dtype. */
static int where(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    if (c->npos != 3 || c->nkw)
        return c->npos == 1 ? unsupported(c, "of one argument (its shape depends on the data)")
                            : CAP_NONE;
    PyObject *cond = c->pos[0];
    if (!cap_is_traced_numpy(cond))
        return cap_is_ndarray(cond) ? unsupported(c, "of an array from outside as condition")
                                    : CAP_NONE;
    PyObject *b = cap_np_cast(c->T, cond, PTC_BOOL);
    if (!b)
        return PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    cap_np_op op = {.what = f->name, .fn = fn, .torch = f->torch, .cast = f->cast, .skip = 1};
    PyObject *ops[3] = {b, c->pos[1], c->pos[2]};
    int rc = apply(c, &op, ops, 3, NULL, out);
    Py_DECREF(b);
    return rc;
}

static int clip(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    static const char *const names[] = {"a_min", "a_max", NULL};
    if (extra_args(c, 3, names))
        return unsupported(c, "with these arguments");
    cap_np_op op = {.what = f->name, .fn = fn, .torch = f->torch, .cast = f->cast};
    PyObject *ops[3] = {ARG(0, "a"), ARG(1, "a_min"), ARG(2, "a_max")};
    return apply(c, &op, ops, 3, NULL, out);
}

/* f(a, b) of two arrays of rank 1 to max_rank (dot: vectors and matrices,
 * which matmul computes as numpy does; outer: vectors). */
static int of_two_ranked(cap_tcall *c, const npfn *f, PyObject *fn, int max_rank, PyObject **out)
{
    if (c->npos != 2 || c->nkw)
        return unsupported(c, "with these arguments");
    for (int i = 0; i < 2; i++)
        if (cap_is_tensor(c->pos[i]) &&
            (cap_val(c->pos[i])->type.ndim < 1 || cap_val(c->pos[i])->type.ndim > max_rank))
            return unsupported(c, max_rank == 1 ? "of arrays other than vectors"
                                                : "of arrays other than vectors and matrices");
    cap_np_op op = {.what = f->name, .fn = fn, .torch = f->torch, .cast = f->cast};
    PyObject *ops[2] = {c->pos[0], c->pos[1]};
    return apply(c, &op, ops, 2, NULL, out);
}

static int dot(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    return of_two_ranked(c, f, fn, 2, out);
}

static int outer(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    return of_two_ranked(c, f, fn, 1, out);
}

/* ---- reductions --------------------------------------------------------------------------- */

/* sum(a, axis=None, keepdims=False) and the like: torch's dim and keepdim. */
static int reduction(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    static const char *const names[] = {"a", "axis", "keepdims", "dtype", NULL};
    if (extra_args(c, 2, names))
        return unsupported(c, "with arguments other than axis, keepdims and dtype");
    PyObject *axis = ARG(1, "axis"), *keep = ARG(-1, "keepdims");
    PyObject *np_kw = PyDict_New(), *t_kw = PyDict_New();
    int rc = np_kw && t_kw ? CAP_NEXT : CAP_ERR;
    if (rc == CAP_NEXT && axis && axis != Py_None)
        rc = PyDict_SetItemString(np_kw, "axis", axis) < 0 ||
                     PyDict_SetItemString(t_kw, "dim", axis) < 0
                 ? CAP_ERR
                 : CAP_NEXT;
    if (rc == CAP_NEXT && keep)
        rc = PyDict_SetItemString(np_kw, "keepdims", keep) < 0 ||
                     PyDict_SetItemString(t_kw, "keepdim", keep) < 0
                 ? CAP_ERR
                 : CAP_NEXT;
    /* numpy's var and std divide by n (ddof=0), torch's by n - 1 unless told */
    bool ddof0 = strcmp(f->name, "var") == 0 || strcmp(f->name, "std") == 0;
    PyObject *zero = rc == CAP_NEXT && ddof0 ? PyLong_FromLong(0) : NULL;
    if (zero && PyDict_SetItemString(t_kw, "correction", zero) < 0)
        rc = CAP_ERR;
    Py_XDECREF(zero);
    if (rc == CAP_NEXT)
        rc = dtype_kw(c, f, 2, np_kw);
    if (rc == CAP_NEXT) {
        cap_np_op op = {.what = f->name, .fn = fn, .torch = f->torch, .cast = f->cast,
                        .torch_kwargs = t_kw};
        PyObject *ops[1] = {ARG(0, "a")};
        rc = ops[0] ? apply(c, &op, ops, 1, np_kw, out) : CAP_NONE;
    }
    Py_XDECREF(np_kw);
    Py_XDECREF(t_kw);
    return rc;
}

/* The array a function along `axis` works on, and torch's dim for it: a
 * itself along axis, or without an axis a flattened (a new reference in
 * *arr, a new int in *dim). */
static int along_axis(cap_tcall *c, PyObject *a, PyObject *axis, PyObject **arr, PyObject **dim)
{
    bool flat = !axis || axis == Py_None;
    *arr = NULL;
    *dim = flat ? PyLong_FromLong(0) : Py_NewRef(axis);
    PyObject *args = flat ? Py_BuildValue("(O(i))", a, -1) : NULL;
    int rc = !*dim || (flat && !args) ? CAP_ERR : CAP_NEXT;
    if (rc == CAP_NEXT && flat)
        rc = cap_np_torch(c->T, "Tensor.reshape", args, NULL, arr);
    else if (rc == CAP_NEXT)
        *arr = Py_NewRef(a);
    if (rc == CAP_NEXT && flat && cap_np_mark(*arr, CAP_NP_ARRAY) < 0)
        rc = CAP_ERR;
    Py_XDECREF(args);
    return rc;
}

/* numpy's flip axis (None: every one; an int; a sequence) as a tuple of
 * torch's dims in [0, ndim), a new reference (numpy's range checks left to
 * torch.flip). */
static PyObject *flip_dims(PyObject *axis, int ndim)
{
    int n = ndim;
    PyObject *given = !axis || axis == Py_None ? NULL
                      : PyLong_Check(axis)      ? PyTuple_Pack(1, axis)
                                                : PySequence_Tuple(axis);
    if (given)
        n = (int)PyTuple_Size(given);
    PyObject *dims = (given || !axis || axis == Py_None) ? PyTuple_New(n) : NULL;
    for (int i = 0; dims && i < n; i++) {
        long d = given ? PyLong_AsLong(PyTuple_GetItem(given, i)) : i;
        PyTuple_SetItem(dims, i, PyLong_FromLong(d < 0 && d >= -ndim ? d + ndim : d));
    }
    Py_XDECREF(given);
    if (PyErr_Occurred())
        Py_CLEAR(dims);
    return dims;
}

/* flip(m, axis=None) of a traced array or of one from outside (a graph
 * input, cap_np_take): numpy's is a view with negative strides, which torch
 * has not; torch.flip's copy is kept as a view of m (cap_np_flip_view),
 * recomputed after a write to m and written back into m when written, so
 * the program sees what numpy's view shows (and leaves the graph as
 * numpy's flip of m again: entry.c's numpy_recipe). */
static int flip(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    (void)f, (void)fn;
    static const char *const names[] = {"m", "axis", NULL};
    PyObject *given_m = ARG(0, "m"), *axis = ARG(1, "axis"), *m = NULL, *dims = NULL;
    if (!given_m || !(cap_is_traced_numpy(given_m) || cap_is_ndarray(given_m)))
        return CAP_NONE;
    if (extra_args(c, 2, names))
        return unsupported(c, "with these arguments");
    int rc = cap_np_take(c->T, given_m, c->m->name, &m);
    if (rc != CAP_NEXT)
        return rc;
    if (((cap_tensor *)m)->numpy != CAP_NP_ARRAY) {
        Py_DECREF(m);
        return CAP_NONE;
    }
    dims = flip_dims(axis, cap_val(m)->type.ndim);
    rc = dims ? cap_np_flip_view(c->T, m, dims, out) : CAP_ERR;
    Py_XDECREF(dims);
    Py_DECREF(m);
    return rc;
}

/* cumsum, cumprod (a, axis=None): torch's along axis, of the flattened
 * array without one. */
static int cumulative(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    static const char *const names[] = {"a", "axis", "dtype", NULL};
    PyObject *a, *axis = ARG(1, "axis"), *arr, *dim;
    int rc = array_call(c, names, &a);
    if (rc != CAP_NEXT)
        return rc;
    rc = along_axis(c, a, axis, &arr, &dim);
    PyObject *kw = rc == CAP_NEXT ? Py_BuildValue("{sO}", "dim", dim) : NULL;
    if (rc == CAP_NEXT) {
        cap_np_op op = {.what = f->name, .fn = fn, .torch = f->torch, .cast = f->cast,
                        .torch_kwargs = kw};
        PyObject *np_kw = axis ? Py_BuildValue("{sO}", "axis", axis) : PyDict_New();
        rc = kw && np_kw ? dtype_kw(c, f, 2, np_kw) : CAP_ERR;
        if (rc == CAP_NEXT)
            rc = apply(c, &op, &arr, 1, kw_or_null(np_kw), out);
        Py_XDECREF(np_kw);
    }
    Py_XDECREF(arr);
    Py_XDECREF(dim);
    Py_XDECREF(kw);
    Py_DECREF(a);
    return rc;
}

/* sort, argsort (a, axis=-1, kind=None): torch's stable sort along axis
 * (of the flattened array for axis=None), its values or its int64 indices.
 * Every kind sorts stably: numpy's "stable"/"mergesort" must, and its
 * quicksort orders ties so on the short lines it sorts by insertion. */
static int sorting(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    static const char *const names[] = {"a", "axis", "kind", "order", NULL};
    PyObject *a, *order = ARG(3, "order"), *kind = ARG(2, "kind");
    PyObject *axis = ARG(1, "axis"), *arr = NULL, *dim = NULL, *res = NULL;
    if (order && order != Py_None)
        return unsupported(c, "with order= (structured arrays)");
    int rc = array_call(c, names, &a);
    if (rc != CAP_NEXT)
        return rc;
    PyObject *given = axis ? axis : PyLong_FromLong(-1);
    PyObject *np_args = PyTuple_Pack(1, a);
    PyObject *np_kw = Py_BuildValue("{sOsO}", "axis", given, "kind", kind ? kind : Py_None);
    cap_np_result r;
    rc = given && np_args && np_kw ? cap_np_oracle(c->T, f->name, fn, np_args, np_kw, &r) : CAP_ERR;
    if (rc == CAP_NEXT)
        rc = along_axis(c, a, given, &arr, &dim);
    PyObject *t_args = rc == CAP_NEXT ? PyTuple_Pack(1, arr) : NULL;
    PyObject *t_kw = t_args ? Py_BuildValue("{sOsO}", "dim", dim, "stable", Py_True) : NULL;
    if (rc == CAP_NEXT)
        rc = t_kw ? cap_np_torch(c->T, "torch.sort", t_args, t_kw, &res) : CAP_ERR;
    if (rc == CAP_NEXT)
        rc = cap_np_finish(c->T, Py_NewRef(PyTuple_GetItem(res, strcmp(f->name, "argsort") == 0)), &r, out);
    if (!axis)
        Py_XDECREF(given);
    Py_XDECREF(np_args);
    Py_XDECREF(np_kw);
    Py_XDECREF(arr);
    Py_XDECREF(dim);
    Py_XDECREF(t_args);
    Py_XDECREF(t_kw);
    Py_XDECREF(res);
    Py_DECREF(a);
    return rc;
}

/* ---- joining and shaping ---------------------------------------------------------------- */

/* The operands in tuple items taken (cap_np_take) into a new list *taken;
 * CAP_NONE when none of them is traced. */
static int take_all(cap_tcall *c, PyObject *items, PyObject **taken)
{
    bool traced = false;
    Py_ssize_t n = PyTuple_Size(items);
    *taken = PyList_New(n);
    int rc = *taken ? CAP_NEXT : CAP_ERR;
    for (Py_ssize_t i = 0; rc == CAP_NEXT && i < n; i++) {
        PyObject *v = NULL;
        if ((rc = operand(c, PyTuple_GetItem(items, i), &v, &traced)) == CAP_NEXT)
            PyList_SetItem(*taken, i, v);
    }
    if (rc == CAP_NEXT && !traced)
        rc = CAP_NONE;
    if (rc != CAP_NEXT)
        Py_CLEAR(*taken);
    return rc;
}

/* torch's op on the taken operands cast to numpy's result dtype (r):
 * torch_args(cast list) builds its arguments. */
static int on_cast_operands(cap_tcall *c, const npfn *f, PyObject *taken, const cap_np_result *r,
                            PyObject *(*torch_args)(PyObject *cast, PyObject *extra),
                            PyObject *extra, PyObject **out)
{
    Py_ssize_t n = PyList_Size(taken);
    PyObject *cast = PyList_New(n), *targs = NULL, *res = NULL;
    int rc = cast ? CAP_NEXT : CAP_ERR;
    for (Py_ssize_t i = 0; rc == CAP_NEXT && i < n; i++) {
        PyObject *t = cap_np_operand(c->T, PyList_GetItem(taken, i), r->dtype);
        if (!t)
            rc = PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
        else
            PyList_SetItem(cast, i, t);
    }
    if (rc == CAP_NEXT)
        rc = (targs = torch_args(cast, extra)) ? cap_np_torch(c->T, f->torch, targs, NULL, &res)
                                               : CAP_ERR;
    if (rc == CAP_NEXT)
        rc = cap_np_finish(c->T, res, r, out);
    Py_XDECREF(cast);
    Py_XDECREF(targs);
    return rc;
}

/* torch.cat / torch.stack's arguments: (arrays, axis). */
static PyObject *join_args(PyObject *cast, PyObject *axis)
{
    return axis ? Py_BuildValue("(OO)", cast, axis) : Py_BuildValue("(Oi)", cast, 0);
}

/* concatenate(arrays, axis=0) / stack(arrays, axis=0): torch's cat / stack
 * of the arrays cast to numpy's result dtype. */
static int join(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    static const char *const names[] = {"axis", NULL};
    PyObject *seq = ARG(0, "arrays"), *axis = ARG(1, "axis");
    if (!seq || !(PyList_Check(seq) || PyTuple_Check(seq)) || extra_args(c, 2, names))
        return unsupported(c, "with these arguments");
    if (axis == Py_None)
        return unsupported(c, "with axis=None");
    PyObject *items = PySequence_Tuple(seq), *taken = NULL, *args = NULL, *kw = NULL;
    int rc = items ? take_all(c, items, &taken) : CAP_ERR;
    cap_np_result r;
    if (rc == CAP_NEXT) {
        args = Py_BuildValue("(O)", taken);
        kw = args && axis ? Py_BuildValue("{sO}", "axis", axis) : NULL;
        rc = !args || (axis && !kw) ? CAP_ERR : cap_np_oracle(c->T, f->name, fn, args, kw, &r);
    }
    if (rc == CAP_NEXT)
        rc = on_cast_operands(c, f, taken, &r, join_args, axis, out);
    Py_XDECREF(items);
    Py_XDECREF(taken);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return rc;
}

/* torch.einsum's arguments: (subscripts, *operands). */
static PyObject *einsum_args(PyObject *cast, PyObject *subscripts)
{
    PyObject *head = PyTuple_Pack(1, subscripts), *ops = PyList_AsTuple(cast);
    PyObject *args = head && ops ? PySequence_Concat(head, ops) : NULL;
    Py_XDECREF(head);
    Py_XDECREF(ops);
    return args;
}

/* einsum(subscripts, a) of one traced array whose output labels are all of
 * a's, reordered ("ij->ji", "ji"): numpy's result is a view of a, which
 * a.transpose(perm) is too (one ptc follows, torch_permviews.c); *perm is
 * that permutation (a new tuple), NULL where the labels sum some away (a
 * new array in numpy too). A label repeated in a (a diagonal view, "ii->i"),
 * an ellipsis or anything numpy would reject is not traced. */
static int one_array_perm(cap_tcall *c, PyObject **perm)
{
    *perm = NULL;
    const char *s = PyUnicode_AsUTF8(c->pos[0]), *arrow = s ? strstr(s, "->") : NULL;
    char in[64] = "", outl[64] = "";
    int nin = 0, nout = 0;
    for (const char *p = s; p && *p && p != arrow && nin < 63; p++)
        if (*p != ' ')
            in[nin++] = *p;
    for (const char *p = arrow ? arrow + 2 : ""; *p && nout < 63; p++)
        if (*p != ' ')
            outl[nout++] = *p;
    bool ok = s && nin == cap_val(c->pos[1])->type.ndim;
    for (int i = 0; ok && i < nin; i++)
        ok = ((in[i] >= 'a' && in[i] <= 'z') || (in[i] >= 'A' && in[i] <= 'Z')) &&
             !memchr(in, in[i], (size_t)i);
    if (!ok)
        return unsupported(c, "of one array with a repeated label or an ellipsis (a view "
                              "torch has not), or other subscripts");
    if (!arrow) /* implicit output: the labels in alphabetical order */
        for (char l = 'A'; l <= 'z'; l++)
            if (memchr(in, l, (size_t)nin))
                outl[nout++] = l;
    if (nout != nin)
        return CAP_NEXT;
    *perm = PyTuple_New(nout);
    for (int i = 0; *perm && i < nout; i++) {
        const char *at = memchr(in, outl[i], (size_t)nin);
        if (!at || memchr(outl, outl[i], (size_t)i)) {
            Py_CLEAR(*perm);
            return unsupported(c, "with these subscripts");
        }
        PyTuple_SetItem(*perm, i, PyLong_FromLong((long)(at - in)));
    }
    return *perm ? CAP_NEXT : CAP_ERR;
}

/* einsum(subscripts, *operands): torch's einsum of the operands cast to
 * numpy's result dtype; of one array that it reorders, a view of it. */
static int einsum(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    if (c->npos < 2 || c->nkw || !PyUnicode_Check(c->pos[0]))
        return unsupported(c, "with these arguments");
    if (c->npos == 2 && !cap_is_traced_numpy(c->pos[1]))
        return cap_is_ndarray(c->pos[1]) ? unsupported(c, "of one array from outside") : CAP_NONE;
    PyObject *perm = NULL;
    int prc = c->npos == 2 ? one_array_perm(c, &perm) : CAP_NEXT;
    if (prc != CAP_NEXT || perm) {
        PyObject *args = perm ? PyTuple_Pack(2, c->pos[1], perm) : NULL;
        prc = prc != CAP_NEXT ? prc : args ? cap_np_torch(c->T, "Tensor.permute", args, NULL, out)
                                           : CAP_ERR;
        if (prc == CAP_NEXT && cap_np_mark(*out, CAP_NP_ARRAY) < 0) {
            Py_CLEAR(*out);
            prc = CAP_ERR;
        }
        Py_XDECREF(args);
        Py_XDECREF(perm);
        return prc;
    }
    PyObject *items = PyTuple_New(c->npos - 1), *taken = NULL, *args = NULL;
    for (int i = 1; items && i < c->npos; i++)
        PyTuple_SetItem(items, i - 1, Py_NewRef(c->pos[i]));
    int rc = items ? take_all(c, items, &taken) : CAP_ERR;
    cap_np_result r;
    if (rc == CAP_NEXT)
        rc = (args = einsum_args(taken, c->pos[0])) ? cap_np_oracle(c->T, f->name, fn, args, NULL, &r)
                                                    : CAP_ERR;
    if (rc == CAP_NEXT)
        rc = on_cast_operands(c, f, taken, &r, einsum_args, c->pos[0], out);
    Py_XDECREF(items);
    Py_XDECREF(taken);
    Py_XDECREF(args);
    return rc;
}

/* Parameter i of a renamed() call into numpy's keywords and torch's: a
 * torch "dims" as a tuple, a torch "dim" an int; an absent or None one is
 * left to the defaults. */
static int renamed_param(cap_tcall *c, const npfn *f, int i, PyObject *np_kw, PyObject *t_kw)
{
    const char *tname = f->torch_params[i];
    PyObject *v = ARG(i + 1, f->np_params[i]);
    if (!v || v == Py_None)
        return CAP_NEXT;
    if (strcmp(tname, "dim") == 0 && !PyLong_Check(v))
        return unsupported(c, "with a tuple of axes");
    bool dims = strcmp(tname, "dims") == 0 && PyLong_Check(v);
    PyObject *tv = dims ? PyTuple_Pack(1, v) : Py_NewRef(v);
    int rc = !tv || PyDict_SetItemString(np_kw, f->np_params[i], v) < 0 ||
                     PyDict_SetItemString(t_kw, tname, tv) < 0
                 ? CAP_ERR
                 : CAP_NEXT;
    Py_XDECREF(tv);
    return rc;
}

/* f(a, p...) whose parameters after the array are torch's op's under other
 * names (npfn.np_params, .torch_params): squeeze, expand_dims, tile, diff,
 * round. numpy's oracle gives the result's dtype and kind. */
static int renamed(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    const char *names[5] = {"a"};
    int n = 0;
    while (n < 3 && f->np_params[n]) {
        names[n + 1] = f->np_params[n];
        n++;
    }
    names[n + 1] = NULL;
    PyObject *a;
    int rc = array_call(c, names, &a);
    if (rc != CAP_NEXT)
        return rc;
    PyObject *np_kw = PyDict_New(), *t_kw = PyDict_New();
    rc = np_kw && t_kw ? CAP_NEXT : CAP_ERR;
    for (int i = 0; rc == CAP_NEXT && i < n; i++)
        rc = renamed_param(c, f, i, np_kw, t_kw);
    if (rc == CAP_NEXT) {
        cap_np_op op = {.what = f->name, .fn = fn, .torch = f->torch, .cast = f->cast,
                        .torch_kwargs = t_kw};
        PyObject *ops[1] = {a};
        rc = apply(c, &op, ops, 1, kw_or_null(np_kw), out);
    }
    Py_XDECREF(np_kw);
    Py_XDECREF(t_kw);
    Py_DECREF(a);
    return rc;
}

/* count_nonzero(a, axis): torch's sum of a as bools along axis. Without
 * axis numpy's answer is a Python int, a value Python needs: a break, as
 * float() of an array is. */
static int count_nonzero(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    static const char *const names[] = {"a", "axis", NULL};
    PyObject *a, *axis = ARG(1, "axis");
    int rc = array_call(c, names, &a);
    if (rc != CAP_NEXT)
        return rc;
    PyObject *b = axis && axis != Py_None ? cap_np_cast(c->T, a, PTC_BOOL) : NULL;
    Py_DECREF(a);
    if (!axis || axis == Py_None)
        return cap_t_break(c->T, CAP_B_TENSOR_ITEM, "numpy's count_nonzero() without axis (a Python int)");
    if (!b)
        return PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    PyObject *np_kw = Py_BuildValue("{sO}", "axis", axis), *t_kw = Py_BuildValue("{sO}", "dim", axis);
    cap_np_op op = {.what = f->name, .fn = fn, .torch = f->torch, .cast = f->cast, .torch_kwargs = t_kw};
    PyObject *ops[1] = {b};
    rc = np_kw && t_kw ? apply(c, &op, ops, 1, np_kw, out) : CAP_ERR;
    Py_DECREF(b);
    Py_XDECREF(np_kw);
    Py_XDECREF(t_kw);
    return rc;
}

/* reshape(a, shape) / transpose(a, axes=None): torch's view ops, so writes
 * through the result reach a as numpy's views do. */
static int shaping(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    static const char *const names[] = {"a", "newshape", "shape", "axes", NULL};
    PyObject *a = ARG(0, "a");
    PyObject *arg = ARG(1, f->name[0] == 'r' ? "shape" : "axes");
    if (!arg && f->name[0] == 'r')
        arg = ARG(-1, "newshape");
    if (!a || !cap_is_traced_numpy(a))
        return CAP_NONE;
    if (extra_args(c, 2, names) || (f->name[0] == 'r' && !arg))
        return unsupported(c, "with these arguments");
    cap_np_result r;
    PyObject *args = arg ? PyTuple_Pack(2, a, arg) : PyTuple_Pack(1, a);
    int rc = args ? cap_np_oracle(c->T, f->name, fn, args, NULL, &r) : CAP_ERR;
    Py_XDECREF(args);
    if (rc != CAP_NEXT)
        return rc;
    PyObject *dims = arg && arg != Py_None ? Py_NewRef(arg) : NULL;
    if (!dims) { /* transpose(a): the dims reversed */
        int n = cap_val(a)->type.ndim;
        dims = PyTuple_New(n);
        for (int i = 0; dims && i < n; i++)
            PyTuple_SetItem(dims, i, PyLong_FromLong(n - 1 - i));
    }
    PyObject *targs = dims ? PyTuple_Pack(2, a, dims) : NULL, *res = NULL;
    rc = targs ? cap_np_torch(c->T, f->torch, targs, NULL, &res) : CAP_ERR;
    Py_XDECREF(dims);
    Py_XDECREF(targs);
    if (rc == CAP_NEXT && cap_np_mark(res, r.kind) < 0) {
        Py_CLEAR(res);
        rc = CAP_ERR;
    }
    *out = res;
    return rc;
}

/* ---- new arrays ------------------------------------------------------------------------- */

/* The ptc dtype of numpy's dtype argument d (a type, a string, a dtype),
 * or -1. */
static int dtype_arg(PyObject *d)
{
    PyObject *nd = PyObject_CallMethod(cap_np_module(), "dtype", "O", d);
    int dt = nd ? cap_dtype_of_numpy(nd) : -1;
    Py_XDECREF(nd);
    PyErr_Clear();
    return dt;
}

/* A new array made by torch's `path` on args with dtype dt, marked `kind`. */
static int made(cap_tcall *c, const char *path, PyObject *args, int dt, int kind, PyObject **out)
{
    PyObject *kw = Py_BuildValue("{sO}", "dtype", cap_dtype_obj((ptc_dtype)dt)), *res = NULL;
    int rc = kw && args ? cap_np_torch(c->T, path, args, kw, &res) : CAP_ERR;
    Py_XDECREF(kw);
    if (rc == CAP_NEXT) {
        cap_np_result r = {.dtype = dt, .kind = kind};
        rc = cap_np_finish(c->T, res, &r, out);
    }
    return rc;
}

static bool is_number(PyObject *v)
{
    return PyLong_Check(v) || PyFloat_Check(v) || cap_is_numpy_scalar(v);
}

/* zeros(shape, dtype=float) and ones(...): float64 unless told. */
static int filled(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    (void)fn;
    static const char *const names[] = {"shape", "dtype", NULL};
    PyObject *shape = ARG(0, "shape"), *d = ARG(1, "dtype");
    if (!shape || extra_args(c, 2, names))
        return unsupported(c, "with these arguments");
    int dt = d && d != Py_None ? dtype_arg(d) : PTC_F64;
    if (dt < 0)
        return unsupported(c, "of a dtype ptc lacks");
    PyObject *args = PyTuple_Pack(1, shape);
    int rc = made(c, f->torch, args, dt, CAP_NP_ARRAY, out);
    Py_XDECREF(args);
    return rc;
}

/* arange(stop) / arange(start, stop[, step]), linspace(start, stop, num=50):
 * numpy's dtype (int64 of ints, float64 otherwise) unless told. */
static int ranged(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    (void)fn;
    bool lin = f->name[0] == 'l';
    static const char *const arange_kw[] = {"dtype", NULL}, *const lin_kw[] = {"num", "dtype", NULL};
    int npos = lin ? 3 : 3;
    if (extra_args(c, npos, lin ? lin_kw : arange_kw) || c->npos < (lin ? 2 : 1))
        return unsupported(c, "with these arguments");
    bool floats = lin;
    for (int i = 0; i < c->npos; i++) {
        if (!is_number(c->pos[i]))
            return cap_is_traced_numpy(c->pos[i]) ? unsupported(c, "of a traced value") : CAP_NONE;
        floats = floats || !PyLong_Check(c->pos[i]) || PyBool_Check(c->pos[i]);
    }
    PyObject *d = ARG(-1, "dtype");
    int dt = d && d != Py_None ? dtype_arg(d) : floats ? PTC_F64 : PTC_I64;
    if (dt < 0)
        return unsupported(c, "of a dtype ptc lacks");
    PyObject *args = PyTuple_New(c->npos + (lin && c->npos == 2));
    for (int i = 0; args && i < c->npos; i++) {
        PyObject *v = cap_is_numpy_scalar(c->pos[i]) ? cap_numpy_scalar_number(c->pos[i])
                                                     : Py_NewRef(c->pos[i]);
        PyTuple_SetItem(args, i, v);
    }
    if (args && lin && c->npos == 2) {
        PyObject *num = ARG(-1, "num");
        PyTuple_SetItem(args, 2, num ? Py_NewRef(num) : PyLong_FromLong(50));
    }
    int rc = made(c, f->torch, args, dt, CAP_NP_ARRAY, out);
    Py_XDECREF(args);
    return rc;
}

/* zeros_like(a, dtype=None) / ones_like: a's shape, numpy's dtype. */
static int like(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    static const char *const names[] = {"a", "dtype", NULL};
    PyObject *a, *d = ARG(1, "dtype");
    int rc = array_call(c, names, &a);
    if (rc != CAP_NEXT)
        return rc;
    cap_np_result r;
    PyObject *args = PyTuple_Pack(1, a), *kw = d ? Py_BuildValue("{sO}", "dtype", d) : NULL;
    rc = args && (kw || !d) ? cap_np_oracle(c->T, f->name, fn, args, kw, &r) : CAP_ERR;
    if (rc == CAP_NEXT)
        rc = made(c, f->torch, args, r.dtype, r.kind, out);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    Py_DECREF(a);
    return rc;
}

/* A list or tuple of numbers, at any depth (numpy's array of it is a
 * constant). */
static bool numbers_only(PyObject *v)
{
    if (PyList_Check(v) || PyTuple_Check(v)) {
        for (Py_ssize_t i = 0; i < PySequence_Size(v); i++)
            if (!numbers_only(PyList_Check(v) ? PyList_GetItem(v, i) : PyTuple_GetItem(v, i)))
                return false;
        return true;
    }
    return is_number(v) || PyBool_Check(v);
}

/* a as a new array or scalar (kind) of dtype dt (-1: its own): astype's
 * and array()'s copy. */
static int copied(cap_tcall *c, PyObject *a, int dt, int kind, PyObject **out)
{
    cap_np_result r = {.dtype = dt >= 0 ? dt : (int)cap_val(a)->type.dtype, .kind = kind};
    PyObject *args = PyTuple_Pack(1, a), *res = NULL;
    int rc = args ? cap_np_torch(c->T, "torch.clone", args, NULL, &res) : CAP_ERR;
    Py_XDECREF(args);
    return rc == CAP_NEXT ? cap_np_finish(c->T, res, &r, out) : rc;
}

/* numpy's pure function fn of numbers (and lists of them), constants all:
 * its value, a constant too (an array: a graph constant); CAP_NONE for
 * other arguments. */
static int of_constants(cap_tcall *c, PyObject *fn, PyObject **out)
{
    for (int i = 0; i < c->npos + c->nkw; i++)
        if (!numbers_only(c->pos[i]) && !(i >= c->npos && cap_is_constant(c->pos[i])))
            return CAP_NONE;
    PyObject *real = cap_call_real(fn, c->pos, c->npos + c->nkw, c->kwnames);
    if (!real)
        return CAP_ERR;
    if (!cap_is_ndarray(real)) {
        if (cap_is_constant(real)) {
            *out = real;
            return CAP_NEXT;
        }
        Py_DECREF(real);
        return unsupported(c, "of numbers");
    }
    PyObject *t = cap_ndarray_tensor(real, NULL);
    PyObject *k = t ? cap_tensor_const(c->T, t) : NULL;
    Py_DECREF(real);
    Py_XDECREF(t);
    if (!k)
        return PyErr_Occurred() ? CAP_ERR : CAP_BREAK;
    if (!cap_is_tensor(k) || cap_np_mark(k, CAP_NP_ARRAY) < 0) {
        Py_DECREF(k);
        return PyErr_Occurred() ? CAP_ERR : unsupported(c, "of these numbers");
    }
    *out = k;
    return CAP_NEXT;
}

/* asarray(x, dtype=None) shares a traced tensor's memory (x.numpy());
 * array(x, dtype=None) copies. Of a list of numbers: a graph constant
 * (of_constants). */
static int as_array(cap_tcall *c, const npfn *f, PyObject *fn, PyObject **out)
{
    static const char *const names[] = {"dtype", NULL};
    PyObject *x = ARG(0, "a") ? ARG(0, "a") : ARG(0, "object"), *d = ARG(1, "dtype");
    if (!x || extra_args(c, 2, names))
        return CAP_NONE;
    int dt = d && d != Py_None ? dtype_arg(d) : -1;
    if (d && d != Py_None && dt < 0)
        return unsupported(c, "of a dtype ptc lacks");
    if (!cap_is_tensor(x))
        return cap_is_ndarray(x) ? unsupported(c, "of an array from outside") : CAP_NONE;
    PyObject *a = NULL;
    int rc = cap_is_traced_numpy(x) ? (a = Py_NewRef(x), CAP_NEXT)
                                    : cap_np_of_tensor(c->T, (cap_tensor *)x, &a);
    if (rc != CAP_NEXT)
        return rc;
    if (strcmp(f->name, "array") == 0 || ((cap_tensor *)a)->numpy == CAP_NP_SCALAR ||
        (dt >= 0 && dt != (int)cap_val(a)->type.dtype)) {
        rc = copied(c, a, dt, CAP_NP_ARRAY, out);
        Py_DECREF(a);
        return rc;
    }
    *out = a;
    return CAP_NEXT;
}

/* ---- the table ---------------------------------------------------------------------------- */

#define OUT CAP_NP_CAST_OUT
#define NONE CAP_NP_CAST_NONE
static const npfn funcs[] = {
    {"sum", reduction, "torch.sum", OUT},
    {"mean", reduction, "torch.mean", OUT},
    {"max", reduction, "torch.amax", NONE},
    {"amax", reduction, "torch.amax", NONE},
    {"min", reduction, "torch.amin", NONE},
    {"amin", reduction, "torch.amin", NONE},
    {"argmax", reduction, "torch.argmax", NONE},
    {"argmin", reduction, "torch.argmin", NONE},
    {"prod", reduction, "torch.prod", OUT},
    {"any", reduction, "torch.any", NONE},
    {"all", reduction, "torch.all", NONE},
    {"var", reduction, "torch.var", OUT},
    {"std", reduction, "torch.std", OUT},
    {"cumsum", cumulative, "torch.cumsum", OUT},
    {"cumprod", cumulative, "torch.cumprod", OUT},
    {"sort", sorting, "torch.sort", NONE},
    {"argsort", sorting, "torch.sort", NONE},
    {"square", ufunc, "torch.square", OUT},
    {"exp", ufunc, "torch.exp", OUT},
    {"log", ufunc, "torch.log", OUT},
    {"sqrt", ufunc, "torch.sqrt", OUT},
    {"abs", ufunc, "torch.abs", OUT},
    {"absolute", ufunc, "torch.abs", OUT},
    {"negative", ufunc, "torch.neg", OUT},
    {"sin", ufunc, "torch.sin", OUT},
    {"cos", ufunc, "torch.cos", OUT},
    {"tanh", ufunc, "torch.tanh", OUT},
    {"tan", ufunc, "torch.tan", OUT},
    {"arcsin", ufunc, "torch.asin", OUT},
    {"arccos", ufunc, "torch.acos", OUT},
    {"sinh", ufunc, "torch.sinh", OUT},
    {"cosh", ufunc, "torch.cosh", OUT},
    {"floor", ufunc, "torch.floor", OUT},
    {"ceil", ufunc, "torch.ceil", OUT},
    {"log1p", ufunc, "torch.log1p", OUT},
    {"expm1", ufunc, "torch.expm1", OUT},
    {"log2", ufunc, "torch.log2", OUT},
    {"log10", ufunc, "torch.log10", OUT},
    {"exp2", ufunc, "torch.exp2", OUT},
    {"sign", ufunc, "torch.sign", OUT},
    {"reciprocal", ufunc, "torch.reciprocal", OUT},
    {"trunc", ufunc, "torch.trunc", OUT},
    {"isnan", ufunc, "torch.isnan", OUT},
    {"isinf", ufunc, "torch.isinf", OUT},
    {"isfinite", ufunc, "torch.isfinite", OUT},
    {"logical_not", ufunc, "torch.logical_not", OUT},
    {"power", ufunc, "torch.pow", OUT},
    {"remainder", ufunc, "torch.remainder", OUT},
    {"fmod", ufunc, "torch.fmod", OUT},
    {"arctan2", ufunc, "torch.atan2", OUT},
    {"hypot", ufunc, "torch.hypot", OUT},
    {"greater", ufunc, "torch.gt", CAP_NP_CAST_COMMON},
    {"greater_equal", ufunc, "torch.ge", CAP_NP_CAST_COMMON},
    {"less", ufunc, "torch.lt", CAP_NP_CAST_COMMON},
    {"less_equal", ufunc, "torch.le", CAP_NP_CAST_COMMON},
    {"equal", ufunc, "torch.eq", CAP_NP_CAST_COMMON},
    {"not_equal", ufunc, "torch.ne", CAP_NP_CAST_COMMON},
    {"logical_and", ufunc, "torch.logical_and", OUT},
    {"logical_or", ufunc, "torch.logical_or", OUT},
    {"logical_xor", ufunc, "torch.logical_xor", OUT},
    {"add", ufunc, "torch.add", OUT},
    {"subtract", ufunc, "torch.sub", OUT},
    {"multiply", ufunc, "torch.mul", OUT},
    {"divide", ufunc, "torch.div", OUT},
    {"true_divide", ufunc, "torch.div", OUT},
    {"floor_divide", ufunc, "torch.floor_divide", OUT},
    {"maximum", ufunc, "torch.maximum", OUT},
    {"minimum", ufunc, "torch.minimum", OUT},
    {"matmul", ufunc, "torch.matmul", OUT},
    {"dot", dot, "torch.matmul", OUT},
    {"where", where, "torch.where", OUT},
    {"clip", clip, "torch.clamp", OUT},
    {"concatenate", join, "torch.cat", OUT},
    {"stack", join, "torch.stack", OUT},
    {"reshape", shaping, "Tensor.reshape", NONE},
    {"transpose", shaping, "Tensor.permute", NONE},
    {"zeros_like", like, "torch.zeros_like", NONE},
    {"ones_like", like, "torch.ones_like", NONE},
    {"zeros", filled, "torch.zeros", NONE},
    {"ones", filled, "torch.ones", NONE},
    {"arange", ranged, "torch.arange", NONE},
    {"linspace", ranged, "torch.linspace", NONE},
    {"arctan", arctan, "torch.atan2", OUT},
    {"round", renamed, "torch.round", NONE, {"decimals"}, {"decimals"}},
    {"around", renamed, "torch.round", NONE, {"decimals"}, {"decimals"}},
    {"squeeze", renamed, "torch.squeeze", NONE, {"axis"}, {"dim"}},
    {"expand_dims", renamed, "torch.unsqueeze", NONE, {"axis"}, {"dim"}},
    {"tile", renamed, "torch.tile", NONE, {"reps"}, {"dims"}},
    {"diff", renamed, "torch.diff", NONE, {"n", "axis"}, {"n", "dim"}},
    {"outer", outer, "torch.outer", OUT},
    {"einsum", einsum, "torch.einsum", OUT},
    {"flip", flip, "torch.flip", NONE},
    {"count_nonzero", count_nonzero, "torch.sum", OUT},
    {"asarray", as_array, NULL, NONE},
    {"array", as_array, NULL, NONE},
};
#undef OUT
#undef NONE

static const npfn *find(const char *name)
{
    for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++)
        if (strcmp(funcs[i].name, name) == 0)
            return &funcs[i];
    return NULL;
}

/* The handler of the rows "numpy.X" (torch_table.c). */
int cap_th_np_func(cap_tcall *c, PyObject **out)
{
    const npfn *f = find(c->m->name + 6);
    PyObject *fn = f ? PyObject_GetAttrString(cap_np_module(), f->name) : NULL;
    if (!fn) {
        PyErr_Clear();
        return unsupported(c, "");
    }
    int rc = f->run(c, f, fn, out);
    if (rc == CAP_NONE)
        rc = of_constants(c, fn, out);
    Py_DECREF(fn);
    return rc;
}

/* ---- ndarray methods ---------------------------------------------------------------------- */

/* a.reshape(2, 3) and a.transpose(1, 0): their dims as one tuple, as the
 * functions take them. */
static int varargs_shaping(cap_tcall *c, const npfn *f, PyObject **out)
{
    PyObject *dims = PyTuple_New(c->npos - 1);
    for (int i = 1; dims && i < c->npos; i++)
        PyTuple_SetItem(dims, i - 1, Py_NewRef(c->pos[i]));
    PyObject *pos[2] = {c->pos[0], dims};
    cap_tcall call = *c;
    call.pos = pos;
    call.npos = 2;
    PyObject *fn = dims ? PyObject_GetAttrString(cap_np_module(), f->name) : NULL;
    int rc = fn ? shaping(&call, f, fn, out) : CAP_ERR;
    Py_XDECREF(fn);
    Py_XDECREF(dims);
    return rc;
}

/* a.sort(axis=-1, kind=None, order=None): np.sort's values written into a,
 * numpy's in-place sort (through a's views and its tensor or argument), and
 * None, as the method returns. axis=None, which the method refuses where
 * np.sort flattens, runs for real at a break (and raises there). */
static int sort_in_place(cap_tcall *c, PyObject *a, PyObject **out)
{
    PyObject *axis = ARG(1, "axis"), *sorted = NULL, *self = NULL;
    if (axis == Py_None)
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "numpy's ndarray.sort(axis=None) raises");
    PyObject *fn = PyObject_GetAttrString(cap_np_module(), "sort");
    int rc = fn ? sorting(c, find("sort"), fn, &sorted) : CAP_ERR;
    Py_XDECREF(fn);
    if (rc == CAP_NEXT)
        rc = cap_inplace(c->T, (cap_tensor *)a, sorted, &self);
    Py_XDECREF(self);
    if (rc == CAP_NEXT)
        *out = Py_NewRef(Py_None);
    return rc;
}

int cap_th_np_method(cap_tcall *c, PyObject **out)
{
    const char *name = c->m->name + 8; /* "ndarray." */
    PyObject *a = c->pos[0];
    int kind = ((cap_tensor *)a)->numpy;
    if (strcmp(name, "item") == 0 || strcmp(name, "tolist") == 0)
        return cap_t_break(c->T, name[0] == 'i' ? CAP_B_TENSOR_ITEM : CAP_B_TENSOR_DATA,
                           "ndarray.%s()", name);
    if (strcmp(name, "copy") == 0 && c->npos == 1 && !c->nkw)
        return copied(c, a, -1, kind, out);
    if (strcmp(name, "astype") == 0 && c->npos == 2 && !c->nkw) {
        int dt = dtype_arg(c->pos[1]);
        return dt < 0 ? unsupported(c, "to a dtype ptc lacks") : copied(c, a, dt, kind, out);
    }
    if (strcmp(name, "flatten") == 0 && c->npos == 1 && !c->nkw && kind == CAP_NP_ARRAY) {
        PyObject *args = Py_BuildValue("(O(i))", a, -1), *flat = NULL;
        int rc = args ? cap_np_torch(c->T, "Tensor.reshape", args, NULL, &flat) : CAP_ERR;
        Py_XDECREF(args);
        if (rc == CAP_NEXT) {
            rc = copied(c, flat, -1, CAP_NP_ARRAY, out);
            Py_DECREF(flat);
        }
        return rc;
    }
    const npfn *f = find(name);
    if (!f || kind != CAP_NP_ARRAY)
        return unsupported(c, "with these arguments");
    if (f->run == sorting && strcmp(name, "sort") == 0)
        return sort_in_place(c, a, out);
    if (f->run == shaping && c->npos > 2)
        return varargs_shaping(c, f, out);
    PyObject *fn = PyObject_GetAttrString(cap_np_module(), f->name);
    int rc = fn ? f->run(c, f, fn, out) : CAP_ERR;
    Py_XDECREF(fn);
    return rc;
}

#define METHOD(name) {"ndarray." name, -1, cap_th_np_method, "", TM_METHOD | TM_NUMPY, 0, {{{0}}}},
static cap_tmap methods[] = {
    METHOD("sum") METHOD("mean") METHOD("max") METHOD("min") METHOD("argmax") METHOD("argmin")
    METHOD("clip") METHOD("reshape") METHOD("transpose") METHOD("astype") METHOD("copy")
    METHOD("flatten") METHOD("item") METHOD("tolist") METHOD("prod") METHOD("any") METHOD("all")
    METHOD("var") METHOD("std") METHOD("cumsum") METHOD("cumprod") METHOD("argsort") METHOD("round")
    METHOD("squeeze") METHOD("sort")
};
#undef METHOD

const cap_tmap *cap_np_method_row(const char *name)
{
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (strcmp(methods[i].name + 8, name) == 0)
            return &methods[i];
    return NULL;
}

/* ---- attributes ----------------------------------------------------------------------- */

static PyObject *shape_tuple(cap_trace *T, const ptc_ttype *tt)
{
    PyObject *tup = PyTuple_New(tt->ndim);
    for (int i = 0; tup && i < tt->ndim; i++) {
        PyObject *d = cap_dim_obj(T, tt->shape[i]);
        if (!d)
            Py_CLEAR(tup);
        else
            PyTuple_SetItem(tup, i, d);
    }
    return tup;
}

/* a.T: its dims reversed, a view. */
static int transposed(cap_trace *T, PyObject *a, PyObject **out)
{
    int n = cap_val(a)->type.ndim;
    PyObject *perm = PyTuple_New(n);
    for (int i = 0; perm && i < n; i++)
        PyTuple_SetItem(perm, i, PyLong_FromLong(n - 1 - i));
    PyObject *args = perm ? PyTuple_Pack(2, a, perm) : NULL;
    int rc = args ? cap_np_torch(T, "Tensor.permute", args, NULL, out) : CAP_ERR;
    Py_XDECREF(perm);
    Py_XDECREF(args);
    if (rc == CAP_NEXT && cap_np_mark(*out, ((cap_tensor *)a)->numpy) < 0) {
        Py_CLEAR(*out);
        rc = CAP_ERR;
    }
    return rc;
}

static int np_getattr(cap_trace *T, cap_tensor *t, PyObject *name, PyObject **out)
{
    const char *s = PyUnicode_AsUTF8(name);
    const ptc_ttype *tt = &t->v->type;
    if (!s)
        return CAP_ERR;
    int64_t size = 1;
    for (int i = 0; i < tt->ndim; i++)
        size = ptc_dim_is_static(tt->shape[i]) && size >= 0 ? size * tt->shape[i].value : -1;
    if (strcmp(s, "shape") == 0) {
        *out = shape_tuple(T, tt);
    } else if (strcmp(s, "ndim") == 0) {
        *out = PyLong_FromLong(tt->ndim);
    } else if (strcmp(s, "dtype") == 0) {
        *out = cap_np_dtype_of(t);
    } else if (strcmp(s, "__class__") == 0) {
        *out = Py_NewRef(t->fake_type);
    } else if (strcmp(s, "itemsize") == 0) {
        *out = PyLong_FromSize_t(ptc_dtype_size(tt->dtype));
    } else if ((strcmp(s, "size") == 0 || strcmp(s, "nbytes") == 0) && size >= 0) {
        *out = PyLong_FromLongLong(s[0] == 's' ? size : size * (int64_t)ptc_dtype_size(tt->dtype));
    } else if (strcmp(s, "T") == 0) {
        return transposed(T, (PyObject *)t, out);
    } else {
        const cap_tmap *m = cap_np_method_row(s);
        if (!m)
            return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH,
                               "numpy's ndarray.%s (not traced by ptc)", s);
        *out = cap_method_new((PyObject *)t, m);
    }
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_np_hook_getattr(cap_trace *T, cap_tensor *t, PyObject *name, PyObject **out)
{
    return t->numpy != CAP_NP_TENSOR ? np_getattr(T, t, name, out)
                                     : cap_torch_getattr(T, t, name, out);
}


bool cap_np_traced_method(PyObject *name)
{
    const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    PyErr_Clear();
    return s && (strcmp(s, "T") == 0 || cap_np_method_row(s));
}
