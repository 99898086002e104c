/* Eager's strides of a traced value, where ptc knows them, for the queries
 * stride() and is_contiguous().
 *
 * Values carry strides only where they enter the graph (an argument or a
 * constant: the guards fix their layout); the compiler lays out everything
 * else itself. So a query follows the value back to where it entered: a
 * view op maps its operand's strides as torch's view does (permute,
 * transpose, expand, unsqueeze, slice, select, narrow, split; view, reshape
 * and squeeze of a row-major operand), and any other op of row-major
 * operands gives a row-major result, as TensorIterator and the library
 * kernels do. A tensor created here by a factory (zeros, empty, full,
 * arange, randn, new_*) is row-major, as torch makes it; one a *_like call
 * made has its input's layout where that is dense (torch's preserve_format;
 * the trace notes which input, cap_note_like). Anything else (an op over a
 * permuted operand, whose layout eager derives from its operands' strides;
 * advanced indexing; a *_like of such a value; symbolic sizes) is unknown,
 * and the caller breaks rather than answer wrongly.
 */
#include "capture/torch/torch.h"
#include "ops/ops.h"

#include <stdbool.h>
#include <string.h>

enum { MAX_CHAIN = 64, MAX_OPERANDS = 8 };

static bool static_dims(const ptc_ttype *t)
{
    for (int i = 0; i < t->ndim; i++)
        if (!ptc_dim_is_static(t->shape[i]) ||
            (t->layout == PTC_LAYOUT_STRIDED && !ptc_dim_is_static(t->strides[i])))
            return false;
    return true;
}

static void row_major(const ptc_ttype *t, int64_t *st)
{
    int64_t step = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        st[d] = step;
        step *= t->shape[d].value > 1 ? t->shape[d].value : 1;
    }
}

/* torch's is_contiguous: size-1 dims' strides do not count. */
static bool is_row_major(const ptc_ttype *t, const int64_t *st)
{
    int64_t step = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t size = t->shape[d].value;
        if (size == 0)
            return true;
        if (size != 1 && st[d] != step)
            return false;
        step *= size;
    }
    return true;
}

static int64_t dim_index(ptc_dim d, int ndim)
{
    return d.value < 0 ? d.value + ndim : d.value;
}

static bool strides_of_value(cap_trace *T, const ptc_value *v, int64_t *st, int depth);

/* The strides of a view op's result v from its operand's (in). */
static bool view_strides(const ptc_node *n, const ptc_value *v, const ptc_ttype *it,
                         const int64_t *in, int64_t *st)
{
    const ptc_ttype *ot = &v->type;
    int ni = it->ndim, no = ot->ndim;
    switch (n->op) {
    case PTC_OP_PERMUTE:
        for (int i = 0; i < no; i++)
            st[i] = in[dim_index(n->args[1].is.d[i], ni)];
        return true;
    case PTC_OP_TRANSPOSE:
    case PTC_OP_T: {
        memcpy(st, in, sizeof(int64_t) * (size_t)ni);
        if (ni < 2)
            return true;
        int64_t a = n->op == PTC_OP_T ? 0 : dim_index(n->args[1].i, ni);
        int64_t b = n->op == PTC_OP_T ? 1 : dim_index(n->args[2].i, ni);
        st[a] = in[b];
        st[b] = in[a];
        return true;
    }
    case PTC_OP_EXPAND:
        for (int i = 0; i < no; i++) {
            int j = i - (no - ni);
            st[i] = j < 0 || (it->shape[j].value == 1 && ot->shape[i].value != 1) ? 0 : in[j];
        }
        return true;
    case PTC_OP_UNSQUEEZE: {
        int64_t d = dim_index(n->args[1].i, no);
        for (int i = 0, j = 0; i < no; i++)
            st[i] = i == d ? (d >= ni ? 1 : it->shape[d].value * in[d]) : in[j++];
        return true;
    }
    case PTC_OP_SLICE:
    case PTC_OP_NARROW:
    case PTC_OP_SPLIT:
    case PTC_OP_SPLIT_WITH_SIZES:
    case PTC_OP_CHUNK:
        memcpy(st, in, sizeof(int64_t) * (size_t)ni);
        if (n->op == PTC_OP_SLICE && n->args[4].kind != PTC_ARG_NONE)
            st[dim_index(n->args[1].i, ni)] *= n->args[4].i.value;
        return true;
    case PTC_OP_SELECT:
    case PTC_OP_UNBIND: {
        int64_t d = n->args[1].kind == PTC_ARG_NONE ? 0 : dim_index(n->args[1].i, ni);
        for (int i = 0, j = 0; j < ni; j++)
            if (j != d)
                st[i++] = in[j];
        return true;
    }
    case PTC_OP_VIEW:
    case PTC_OP_RESHAPE:
    case PTC_OP_FLATTEN:
    case PTC_OP_SQUEEZE:
        if (!is_row_major(it, in))
            return false; /* torch's own stride computation: not modelled */
        row_major(ot, st);
        return true;
    default:
        return false;
    }
}

bool cap_dense_order(const ptc_ttype *t, const int64_t *st, int8_t *perm)
{
    int nd = t->ndim;
    for (int d = 0; d < nd; d++)
        perm[d] = (int8_t)d;
    for (int i = 1; i < nd; i++) /* stable: outermost (largest stride) first */
        for (int j = i; j > 0 && st[perm[j - 1]] < st[perm[j]]; j--) {
            int8_t x = perm[j];
            perm[j] = perm[j - 1];
            perm[j - 1] = x;
        }
    int64_t step = 1;
    for (int k = nd - 1; k >= 0; k--) {
        int64_t size = t->shape[perm[k]].value;
        if (size > 1 && st[perm[k]] != step)
            return false; /* a size-1 dim's stride is never used */
        step *= size > 1 ? size : 1;
    }
    return true;
}

/* Any other op: the matmul family's result is row-major; a pointwise op's
 * is TensorIterator's (cap_pointwise_strides); any other op's is row-major
 * when every tensor operand is, and it has one. */
static bool computed_strides(cap_trace *T, const ptc_node *n, const ptc_value *v, int64_t *st,
                             int depth)
{
    if (n->op == PTC_OP_MATMUL || n->op == PTC_OP_ADDMM || n->op == PTC_OP_LINEAR ||
        n->op == PTC_OP_BADDBMM) {
        row_major(&v->type, st);
        return true;
    }
    if (n->op == PTC_OP_INDEX)
        return false;
    bool all_row_major = true;
    int operands = 0;
    int64_t in[MAX_OPERANDS][PTC_MAX_DIMS];
    const ptc_ttype *types[MAX_OPERANDS];
    const int64_t *strides[MAX_OPERANDS];
    for (int a = 0; a < n->nargs; a++) {
        const ptc_arg *arg = &n->args[a];
        int count = arg->kind == PTC_ARG_VALUE ? 1 : arg->kind == PTC_ARG_VALUES ? arg->vs.n : 0;
        for (int k = 0; k < count; k++) {
            const ptc_value *x = arg->kind == PTC_ARG_VALUE ? arg->v : arg->vs.v[k];
            int64_t *xs = in[operands < MAX_OPERANDS ? operands : MAX_OPERANDS - 1];
            if (!strides_of_value(T, x, xs, depth + 1))
                return false;
            all_row_major = all_row_major && is_row_major(&x->type, xs);
            if (x->type.ndim == 0 || operands == MAX_OPERANDS)
                continue; /* a 0-dim operand broadcasts: it has no say */
            types[operands] = &x->type;
            strides[operands] = xs;
            operands++;
        }
    }
    if (operands && (ptc_op_flags(n->op) & PTC_F_POINTWISE)) {
        cap_pointwise_strides(&v->type, operands, types, strides, cap_has_scalar_operand(n), st);
        return true;
    }
    if (!operands || !all_row_major)
        return false;
    row_major(&v->type, st);
    return true;
}

/* The ops whose result shares its first operand's storage (view_strides). */
static bool is_view(ptc_op op)
{
    switch (op) {
    case PTC_OP_PERMUTE: case PTC_OP_TRANSPOSE: case PTC_OP_T: case PTC_OP_EXPAND:
    case PTC_OP_UNSQUEEZE: case PTC_OP_SLICE: case PTC_OP_NARROW: case PTC_OP_SPLIT:
    case PTC_OP_SPLIT_WITH_SIZES: case PTC_OP_CHUNK: case PTC_OP_SELECT: case PTC_OP_UNBIND:
    case PTC_OP_VIEW: case PTC_OP_RESHAPE: case PTC_OP_FLATTEN: case PTC_OP_SQUEEZE:
        return true;
    default:
        return false;
    }
}

/* to() with nothing to change is detach (torch_shape.c): the same strides. */
static bool is_detach(const ptc_node *n)
{
    return n->op == PTC_OP_TO && n->args[1].kind == PTC_ARG_NONE && n->args[2].kind == PTC_ARG_NONE;
}

/* Node ids a *_like built, as the dict's keys. */
static PyObject *node_key(const ptc_node *n)
{
    return PyLong_FromLong(n->id);
}

static int note(PyObject *notes, const ptc_node *n, const ptc_value *v)
{
    PyObject *k = node_key(n), *p = PyLong_FromVoidPtr((void *)v);
    int rc = k && p ? PyDict_SetItem(notes, k, p) : -1;
    Py_XDECREF(k);
    Py_XDECREF(p);
    return rc;
}

/* The value noted for node n in notes, or NULL. */
static const ptc_value *noted(PyObject *notes, const ptc_node *n)
{
    PyObject *k = node_key(n), *p = k ? PyDict_GetItem(notes, k) : NULL;
    Py_XDECREF(k);
    return p ? PyLong_AsVoidPtr(p) : NULL;
}

bool cap_made_like(cap_trace *T, const ptc_node *n)
{
    return noted(T->like_inputs, n) != NULL;
}

int cap_note_like(cap_trace *T, const ptc_node *n, const ptc_value *input)
{
    return note(T->like_inputs, n, input);
}

int cap_note_in_place(cap_trace *T, const ptc_value *old, const ptc_value *nv)
{
    return nv->def && nv != old ? note(T->kept_layouts, nv->def, old) : 0;
}

/* Dense strides of shape t in the order the operands' strides give (torch's
 * reorder_dimensions and infer_dense_strides, one sort): dims innermost
 * first; two dims compare by the first operand whose strides for them are
 * both nonzero and differ, equal strides putting the smaller size inside; a
 * stride 0 (broadcast) compares with nothing, and where no operand tells,
 * the row-major order stays. ops[o] are aligned with t's dims. */
static void dense_in_operand_order(const ptc_ttype *t, int nops, int64_t (*ops)[PTC_MAX_DIMS],
                                   int64_t *st)
{
    int nd = t->ndim, perm[PTC_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        perm[i] = nd - 1 - i;
    for (int i = 1; i < nd; i++)
        for (int d1 = i, d0 = i - 1; d0 >= 0; d0--) {
            int cmp = 0;
            for (int o = 0; o < nops && !cmp; o++) {
                int64_t s0 = ops[o][perm[d0]], s1 = ops[o][perm[d1]];
                if (s0 == 0 || s1 == 0)
                    continue;
                if (s0 != s1)
                    cmp = s0 < s1 ? -1 : 1;
                else
                    cmp = t->shape[perm[d0]].value > t->shape[perm[d1]].value;
            }
            if (cmp < 0)
                break;
            if (cmp == 0) /* ambiguous: compare with the dims further out */
                continue;
            int x = perm[d0];
            perm[d0] = perm[d1];
            perm[d1] = x;
            d1 = d0;
        }
    int64_t step = 1;
    for (int i = 0; i < nd; i++) {
        st[perm[i]] = step;
        step *= t->shape[perm[i]].value > 1 ? t->shape[perm[i]].value : 1;
    }
}

static void dense_in_order_of(const ptc_ttype *t, const int64_t *in, int64_t *st)
{
    int64_t ops[1][PTC_MAX_DIMS];
    memcpy(ops[0], in, sizeof(int64_t) * (size_t)t->ndim);
    dense_in_operand_order(t, 1, ops, st);
}

/* torch's channels-last strides of a 4-d or 5-d shape. */
static void channels_last(const ptc_ttype *t, int64_t *st)
{
    int64_t step = 1;
    for (int k = 0; k < t->ndim; k++) {
        int d = k == 0 ? 1 : k == t->ndim - 1 ? 0 : t->ndim - k;
        st[d] = step;
        step *= t->shape[d].value > 1 ? t->shape[d].value : 1;
    }
}

/* TensorIterator's fast setup: operands all of the result's shape, all
 * contiguous (row-major), all channels-last, or all one and the same dense
 * layout, give the result that layout exactly (size-1 dims included). */
static bool fast_setup(const ptc_ttype *ot, int nops, const ptc_ttype *const *types,
                       const int64_t *const *strides, int64_t *st)
{
    bool row = true, cl = ot->ndim == 4 || ot->ndim == 5, same = true;
    int8_t perm[PTC_MAX_DIMS];
    for (int o = 0; o < nops; o++) {
        if (!ptc_ttype_same_shape(types[o], ot))
            return false;
        row = row && is_row_major(ot, strides[o]);
        cl = cl && cap_strides_contiguous(ot, strides[o],
                                          ot->ndim == 4 ? CAP_CHANNELS_LAST : CAP_CHANNELS_LAST_3D);
        same = same && cap_dense_order(ot, strides[o], perm) &&
               !memcmp(strides[o], strides[0], sizeof(int64_t) * (size_t)ot->ndim);
    }
    if (row)
        row_major(ot, st);
    else if (cl)
        channels_last(ot, st);
    else if (same)
        memcpy(st, strides[0], sizeof(int64_t) * (size_t)ot->ndim);
    return row || cl || same;
}

bool cap_has_scalar_operand(const ptc_node *n)
{
    const ptc_schema *sc = ptc_op_schema(n->op);
    for (int a = 0; a < n->nargs && a < sc->nparams; a++) {
        int kind = sc->params[a].kind;
        bool number = n->args[a].kind != PTC_ARG_VALUE && n->args[a].kind != PTC_ARG_NONE;
        bool zero_dim = n->args[a].kind == PTC_ARG_VALUE && n->args[a].v->type.ndim == 0;
        if ((kind == PTC_PK_TENSOR_SCALAR || kind == PTC_PK_TENSOR_SCALAR_OPT) && number)
            return true;
        if (zero_dim && n->outs[0]->type.ndim > 0)
            return true;
    }
    return false;
}

void cap_pointwise_strides(const ptc_ttype *ot, int nops, const ptc_ttype *const *types,
                           const int64_t *const *strides, bool scalar_operand, int64_t *st)
{
    if (nops == 0) {
        row_major(ot, st);
        return;
    }
    if (!scalar_operand && nops <= MAX_OPERANDS && fast_setup(ot, nops, types, strides, st))
        return;
    /* compute_strides: a dim an operand broadcasts (absent, or size 1 where
       the result's is not) has stride 0; a size-1 dim of a size-1 result
       keeps its stride, and takes part in the order */
    int64_t ops[MAX_OPERANDS][PTC_MAX_DIMS];
    int n = nops < MAX_OPERANDS ? nops : MAX_OPERANDS;
    for (int o = 0; o < n; o++)
        for (int d = 0; d < ot->ndim; d++) {
            int od = d - (ot->ndim - types[o]->ndim);
            bool broadcast = od < 0 || (types[o]->shape[od].value == 1 && ot->shape[d].value != 1);
            ops[o][d] = broadcast ? 0 : strides[o][od];
        }
    dense_in_operand_order(ot, n, ops, st);
}

/* The strides of v made like value in (torch's preserve_format: a *_like,
 * clone): in's own where in is dense, else dense strides in in's order. */
static bool like_strides(cap_trace *T, const ptc_value *in, const ptc_value *v, int64_t *st,
                         int depth)
{
    int64_t in_st[PTC_MAX_DIMS];
    int8_t perm[PTC_MAX_DIMS];
    if (!strides_of_value(T, in, in_st, depth + 1))
        return false;
    if (cap_dense_order(&in->type, in_st, perm))
        memcpy(st, in_st, sizeof(int64_t) * (size_t)v->type.ndim);
    else
        dense_in_order_of(&v->type, in_st, st);
    return true;
}

/* A creation op's result: row-major from a factory; from a *_like, as
 * like_strides says. */
static bool created_strides(cap_trace *T, const ptc_node *n, const ptc_value *v, int64_t *st,
                            int depth)
{
    const ptc_value *in = noted(T->like_inputs, n);
    if (!in) {
        row_major(&v->type, st);
        return true;
    }
    return like_strides(T, in, v, st, depth);
}

static bool strides_of_value(cap_trace *T, const ptc_value *v, int64_t *st, int depth)
{
    const ptc_ttype *t = &v->type;
    if (depth > MAX_CHAIN || !static_dims(t))
        return false;
    const ptc_node *n = v->def;
    if (!n) { /* entered the graph: its layout is guarded */
        if (t->layout == PTC_LAYOUT_STRIDED)
            for (int i = 0; i < t->ndim; i++)
                st[i] = t->strides[i].value;
        else
            row_major(t, st);
        return true;
    }
    if (n->op == PTC_OP_CONTIGUOUS) {
        row_major(t, st);
        return true;
    }
    const ptc_value *replaced = noted(T->kept_layouts, n);
    if (replaced) /* an in-place op keeps the tensor's strides */
        return strides_of_value(T, replaced, st, depth + 1);
    if (noted(T->like_inputs, n) || (ptc_op_flags(n->op) & PTC_F_CREATION))
        return created_strides(T, n, v, st, depth);
    if (n->op == PTC_OP_CLONE && n->args[0].kind == PTC_ARG_VALUE)
        return like_strides(T, n->args[0].v, v, st, depth);
    if (!is_view(n->op) && !is_detach(n))
        return computed_strides(T, n, v, st, depth);
    const ptc_value *base = n->args[0].kind == PTC_ARG_VALUE ? n->args[0].v : NULL;
    int64_t in[PTC_MAX_DIMS];
    if (!base || !strides_of_value(T, base, in, depth + 1))
        return false;
    if (is_detach(n)) {
        memcpy(st, in, sizeof(int64_t) * (size_t)t->ndim);
        return true;
    }
    return view_strides(n, v, &base->type, in, st);
}

bool cap_value_strides(cap_trace *T, const ptc_value *v, int64_t *st)
{
    return strides_of_value(T, v, st, 0);
}

bool cap_like_order(cap_trace *T, const ptc_value *in, int8_t *perm)
{
    int64_t in_st[PTC_MAX_DIMS], st[PTC_MAX_DIMS];
    if (!strides_of_value(T, in, in_st, 0))
        return false;
    if (!cap_dense_order(&in->type, in_st, perm)) {
        dense_in_order_of(&in->type, in_st, st);
        cap_dense_order(&in->type, st, perm);
    }
    for (int d = 0; d < in->type.ndim; d++)
        if (perm[d] != d)
            return true;
    return false;
}

/* torch's is_contiguous(memory_format): dense with the dims innermost
 * first in the format's order (size-1 dims do not count). */
bool cap_strides_contiguous(const ptc_ttype *t, const int64_t *st, cap_memory_format format)
{
    static const int channels_last[] = {1, 3, 2, 0}, channels_last_3d[] = {1, 4, 3, 2, 0};
    if (format == CAP_ROW_MAJOR)
        return is_row_major(t, st);
    const int *order = format == CAP_CHANNELS_LAST ? channels_last : channels_last_3d;
    if (t->ndim != (format == CAP_CHANNELS_LAST ? 4 : 5))
        return false;
    int64_t step = 1;
    for (int k = 0; k < t->ndim; k++) {
        int64_t size = t->shape[order[k]].value;
        if (size != 1 && st[order[k]] != step)
            return false;
        step *= size;
    }
    return true;
}

/* ---- memory overlap of an in-place op's operands ----------------------------------------- */

/* The offset, in elements, at which view op n's result starts in its
 * operand's memory (operand strides in, sizes it); false where it is not
 * known: split and friends (which result is v), symbolic bounds. */
static bool view_offset(const ptc_node *n, const ptc_ttype *it, const int64_t *in, int64_t *off)
{
    *off = 0;
    if (n->op != PTC_OP_SLICE && n->op != PTC_OP_NARROW && n->op != PTC_OP_SELECT)
        return n->op != PTC_OP_SPLIT && n->op != PTC_OP_SPLIT_WITH_SIZES &&
               n->op != PTC_OP_CHUNK && n->op != PTC_OP_UNBIND;
    int64_t d = dim_index(n->args[1].i, it->ndim), size = it->shape[d].value;
    const ptc_arg *start = &n->args[2];
    if (start->kind == PTC_ARG_NONE) /* slice(x, d, None, ...) */
        return true;
    if (!ptc_dim_is_static(start->i))
        return false;
    int64_t i = start->i.value < 0 ? start->i.value + size : start->i.value;
    i = i < 0 ? 0 : i > size ? size : i;
    *off = i * in[d];
    return true;
}

/* Where v lies in memory: *root, the value its chain of views starts from,
 * and v's offset there in elements and strides st; false where unknown. */
static bool span_of_value(cap_trace *T, const ptc_value *v, const ptc_value **root, int64_t *off,
                          int64_t *st, int depth)
{
    const ptc_node *n = v->def;
    if (depth > MAX_CHAIN || !static_dims(&v->type))
        return false;
    if (!n || (!is_view(n->op) && !is_detach(n))) {
        *root = v;
        *off = 0;
        return strides_of_value(T, v, st, 0);
    }
    const ptc_value *base = n->args[0].kind == PTC_ARG_VALUE ? n->args[0].v : NULL;
    int64_t in[PTC_MAX_DIMS], step;
    if (!base || !span_of_value(T, base, root, off, in, depth + 1))
        return false;
    if (is_detach(n)) {
        memcpy(st, in, sizeof(int64_t) * (size_t)v->type.ndim);
        return true;
    }
    if (!view_offset(n, &base->type, in, &step) || !view_strides(n, v, &base->type, in, st))
        return false;
    *off += step;
    return true;
}

/* The value v's chain of views starts from (v when it is no view). */
static const ptc_value *view_root(const ptc_value *v)
{
    for (int depth = 0; v && v->def && depth <= MAX_CHAIN; depth++) {
        const ptc_node *n = v->def;
        if (!is_view(n->op) && !is_detach(n))
            return v;
        v = n->args[0].kind == PTC_ARG_VALUE ? n->args[0].v : NULL;
    }
    return v;
}

static int64_t numel(const ptc_ttype *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d].value;
    return n;
}

/* torch's get_overlap_status between two values: partial where both are
 * dense, over one memory, and share part of it or all of it with other
 * strides. */
static bool partial_overlap(cap_trace *T, const ptc_value *a, const ptc_value *b)
{
    const ptc_value *ra, *rb;
    int64_t oa, ob, sa[PTC_MAX_DIMS], sb[PTC_MAX_DIMS];
    int8_t perm[PTC_MAX_DIMS];
    if (a == b || a->type.dtype != b->type.dtype || view_root(a) != view_root(b) ||
        !span_of_value(T, a, &ra, &oa, sa, 0) || !span_of_value(T, b, &rb, &ob, sb, 0))
        return false;
    int64_t na = numel(&a->type), nb = numel(&b->type);
    if (na == 0 || nb == 0 || !cap_dense_order(&a->type, sa, perm) ||
        !cap_dense_order(&b->type, sb, perm))
        return false;
    if (oa == ob && na == nb)
        return a->type.ndim != b->type.ndim ||
               memcmp(sa, sb, sizeof(int64_t) * (size_t)a->type.ndim) != 0;
    return oa < ob + nb && ob < oa + na;
}

/* Is node n a step of the kind torch's TensorIterator ops are made of
 * (pointwise, a view, a constant), which check their operands against the
 * tensor they write? */
static bool iterator_step(const ptc_node *n)
{
    return (ptc_op_flags(n->op) & (PTC_F_POINTWISE | PTC_F_VIEW | PTC_F_CREATION)) ||
           is_detach(n);
}

/* Does value v come from before node id first (an operand of the op)? */
static bool from_before(const ptc_value *v, int first)
{
    return !v->def || v->def->id < first;
}

bool cap_inplace_overlaps(cap_trace *T, const ptc_value *out, const ptc_value *result, int first)
{
    const ptc_graph *g = T->g;
    if (first == CAP_NO_OPERANDS)
        return false;
    if (first < 0)
        first = result->def ? result->def->id : g->next_node_id;
    for (int i = g->nnodes - 1; i >= 0 && g->nodes[i] && g->nodes[i]->id >= first; i--)
        if (!iterator_step(g->nodes[i]))
            return false;
    if (from_before(result, first) && partial_overlap(T, out, result))
        return true; /* copy_: the result is the source itself */
    for (int i = g->nnodes - 1; i >= 0 && g->nodes[i] && g->nodes[i]->id >= first; i--) {
        const ptc_node *n = g->nodes[i];
        for (int a = 0; a < n->nargs; a++)
            if (n->args[a].kind == PTC_ARG_VALUE && from_before(n->args[a].v, first) &&
                partial_overlap(T, out, n->args[a].v))
                return true;
    }
    return false;
}
