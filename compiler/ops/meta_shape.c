/* Meta functions of views and shape manipulation: view/reshape/flatten,
 * permutations, expand, squeeze/unsqueeze, slicing, cat/stack, the split
 * family, copies, padding and repeat, and the shape prims.
 *
 * Sizes are ptc_dims throughout. view's -1 is inferred by cancelling the
 * factors the new shape shares with the old one, then by exact division;
 * slicing clamps start and end as torch does, deciding comparisons with
 * symbolic sizes where the answer does not depend on the symbols' values. The
 * number of outputs of split/chunk/unbind must not depend on a symbol.
 */
#include "ops/meta.h"

#include <string.h>

#define MAX_SPLITS 4096

static ptc_dim numel_of(ptc_meta *m, const ptc_dim *d, int n)
{
    ptc_dim p = ptc_dim_c(1);
    for (int i = 0; i < n; i++)
        p = ptc_dim_mul(m->arena, p, d[i]);
    return p;
}

/* ---- view, reshape, flatten --------------------------------------------------- */

/* The size a -1 stands for: numel of x over the product of `known`. Common
 * factors cancel structurally first so that view(s0, -1) of [s0, 6] is 6. */
static int infer_minus_one(ptc_meta *m, const ptc_ttype *x, const ptc_dim *known, int nknown,
                           ptc_dim *out)
{
    bool used[PTC_MAX_DIMS] = {0};
    ptc_dim rest = ptc_dim_c(1);
    for (int i = 0; i < nknown; i++) {
        int j = 0;
        if (known[i].sym)
            for (; j < x->ndim; j++)
                if (!used[j] && ptc_dim_eq(x->shape[j], known[i]))
                    break;
        if (known[i].sym && j < x->ndim)
            used[j] = true;
        else
            rest = ptc_dim_mul(m->arena, rest, known[i]);
    }
    ptc_dim num = ptc_dim_c(1);
    for (int j = 0; j < x->ndim; j++)
        if (!used[j])
            num = ptc_dim_mul(m->arena, num, x->shape[j]);
    return meta_divide(m, num, rest, out);
}

/* torch's computeStride: can a strided input be viewed with the new shape?
 * Decided for static sizes and strides; symbolic ones are accepted. */
static bool view_compatible(const ptc_ttype *x, const ptc_dim *shape, int n)
{
    if (x->layout != PTC_LAYOUT_STRIDED || x->ndim == 0)
        return true;
    int64_t os[PTC_MAX_DIMS], st[PTC_MAX_DIMS], ns[PTC_MAX_DIMS], numel = 1;
    for (int i = 0; i < x->ndim; i++) {
        if (x->shape[i].sym || x->strides[i].sym)
            return true;
        os[i] = x->shape[i].value;
        st[i] = x->strides[i].value;
        if (os[i] == 0)
            return true;
        if (__builtin_mul_overflow(numel, os[i], &numel))
            return false; /* no tensor has that many elements */
    }
    for (int i = 0; i < n; i++) {
        if (shape[i].sym)
            return true;
        ns[i] = shape[i].value;
    }
    int view_d = n - 1;
    int64_t chunk_base = st[x->ndim - 1], tensor_numel = 1, view_numel = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        tensor_numel *= os[d];
        /* a product past int64 is a stride no dim can have: a chunk ends */
        int64_t contiguous_stride;
        bool beyond = __builtin_mul_overflow(tensor_numel, chunk_base, &contiguous_stride);
        if (d == 0 || (os[d - 1] != 1 && (beyond || st[d - 1] != contiguous_stride))) {
            while (view_d >= 0 && (view_numel < tensor_numel || ns[view_d] == 1))
                if (__builtin_mul_overflow(view_numel, ns[view_d--], &view_numel))
                    return false;
            if (view_numel != tensor_numel)
                return false;
            if (d > 0) {
                chunk_base = st[d - 1];
                tensor_numel = view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

static int flatten(ptc_meta *m, const ptc_ttype *x)
{
    int s, e;
    if (meta_dim(m, meta_arg(m, "start_dim")->i, x->ndim, x, &s) ||
        meta_dim(m, meta_arg(m, "end_dim")->i, x->ndim, x, &e))
        return -1;
    if (s > e)
        return ptc_meta_fail(m, "start_dim %d comes after end_dim %d", s, e);
    if (x->ndim == 0) {
        ptc_dim one = ptc_dim_c(1);
        meta_out(m, x->dtype, &one, 1);
        return 0;
    }
    ptc_dim shape[PTC_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < s; i++)
        shape[n++] = x->shape[i];
    shape[n++] = numel_of(m, x->shape + s, e - s + 1);
    for (int i = e + 1; i < x->ndim; i++)
        shape[n++] = x->shape[i];
    meta_out(m, x->dtype, shape, n);
    return 0;
}

/* view, reshape, flatten. */
int meta_view(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    if (m->op == PTC_OP_FLATTEN)
        return flatten(m, x);
    const ptc_arg *size = &m->args[1];
    int n = size->is.n, infer = -1, nknown = 0;
    if (n > PTC_MAX_DIMS)
        return ptc_meta_fail(m, "shape %s has more than %d dims", meta_shapestr(m, size->is.d, n),
                             PTC_MAX_DIMS);
    ptc_dim shape[PTC_MAX_DIMS], known[PTC_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        ptc_dim d = size->is.d[i];
        shape[i] = d;
        if (meta_is(d, -1)) {
            if (infer >= 0)
                return ptc_meta_fail(m, "only one dimension of %s can be inferred",
                                     meta_shapestr(m, size->is.d, n));
            infer = i;
        } else if (!d.sym && d.value < 0) {
            return ptc_meta_fail(m, "invalid size %lld in shape %s", (long long)d.value,
                                 meta_shapestr(m, size->is.d, n));
        } else {
            known[nknown++] = d;
        }
    }
    ptc_dim numel = numel_of(m, x->shape, x->ndim), prod = numel_of(m, known, nknown);
    if (infer >= 0) {
        if (meta_is(prod, 0) && meta_is(numel, 0))
            return ptc_meta_fail(m, "cannot reshape %s into %s: the -1 is ambiguous",
                                 meta_tstr(m, x), meta_shapestr(m, size->is.d, n));
        if (meta_is(prod, 0) || infer_minus_one(m, x, known, nknown, &shape[infer]))
            return ptc_meta_fail(m, "shape %s is invalid for input %s (numel %s)",
                                 meta_shapestr(m, size->is.d, n), meta_tstr(m, x),
                                 meta_dstr(m, numel));
    } else if (!meta_same(m, prod, numel)) {
        return ptc_meta_fail(m, "shape %s is invalid for input %s (numel %s vs %s)",
                             meta_shapestr(m, size->is.d, n), meta_tstr(m, x), meta_dstr(m, numel),
                             meta_dstr(m, prod));
    }
    if (m->op == PTC_OP_VIEW && !view_compatible(x, shape, n))
        return ptc_meta_fail(m, "shape %s is not compatible with the strides of %s (use reshape)",
                             meta_shapestr(m, shape, n), meta_tstr(m, x));
    meta_out(m, x->dtype, shape, n);
    return 0;
}

/* ---- permute, transpose, t ------------------------------------------------------ */

int meta_permute(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    int n = x->ndim, perm[PTC_MAX_DIMS];
    for (int i = 0; i < n; i++)
        perm[i] = i;
    if (m->op == PTC_OP_PERMUTE) {
        const ptc_arg *dims = meta_arg(m, "dims");
        if (dims->is.n != n)
            return ptc_meta_fail(m, "dims %s must name each of the %d dims of %s once",
                                 meta_shapestr(m, dims->is.d, dims->is.n), n, meta_tstr(m, x));
        bool seen[PTC_MAX_DIMS] = {0};
        for (int i = 0; i < n; i++) {
            if (meta_dim(m, dims->is.d[i], n, x, &perm[i]))
                return -1;
            if (seen[perm[i]])
                return ptc_meta_fail(m, "dims %s repeat dim %d", meta_shapestr(m, dims->is.d, n),
                                     perm[i]);
            seen[perm[i]] = true;
        }
    } else if (m->op == PTC_OP_TRANSPOSE) {
        int a, b;
        if (meta_dim(m, meta_arg(m, "dim0")->i, n, x, &a) ||
            meta_dim(m, meta_arg(m, "dim1")->i, n, x, &b))
            return -1;
        if (n > 0) {
            perm[a] = b;
            perm[b] = a;
        }
    } else {
        if (n > 2)
            return ptc_meta_fail(m, "expects a tensor with at most 2 dims, got %s",
                                 meta_tstr(m, x));
        if (n == 2) {
            perm[0] = 1;
            perm[1] = 0;
        }
    }
    ptc_dim shape[PTC_MAX_DIMS];
    for (int i = 0; i < n; i++)
        shape[i] = x->shape[perm[i]];
    meta_out(m, x->dtype, shape, n);
    return 0;
}

/* ---- expand -------------------------------------------------------------------- */

int meta_expand(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *size = meta_arg(m, "size");
    int n = size->is.n;
    if (n < x->ndim || n > PTC_MAX_DIMS)
        return ptc_meta_fail(m, "size %s must have between %d and %d dims for %s",
                             meta_shapestr(m, size->is.d, n), x->ndim, PTC_MAX_DIMS,
                             meta_tstr(m, x));
    ptc_dim shape[PTC_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int j = i - (n - x->ndim);
        ptc_dim t = size->is.d[i];
        if (j < 0) {
            if (meta_is(t, -1))
                return ptc_meta_fail(m, "size -1 is not allowed in a new leading dim %d (size %s)",
                                     i, meta_shapestr(m, size->is.d, n));
            if (!t.sym && t.value < 0)
                return ptc_meta_fail(m, "invalid size %lld", (long long)t.value);
            shape[i] = t;
        } else if (meta_is(t, -1) || meta_same(m, t, x->shape[j])) {
            shape[i] = x->shape[j];
        } else if (meta_is(x->shape[j], 1) && (t.sym || t.value >= 0)) {
            shape[i] = t;
        } else {
            return ptc_meta_fail(m, "size %s must match %s at non-singleton dim %d (%s vs %s)",
                                 meta_shapestr(m, size->is.d, n), meta_tstr(m, x), i,
                                 meta_dstr(m, t), meta_dstr(m, x->shape[j]));
        }
    }
    meta_out(m, x->dtype, shape, n);
    return 0;
}

/* ---- squeeze, unsqueeze --------------------------------------------------------- */

int meta_squeeze(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    ptc_dim shape[PTC_MAX_DIMS];
    int n = 0;
    if (m->op == PTC_OP_UNSQUEEZE) {
        int d = 0;
        if (x->ndim >= PTC_MAX_DIMS)
            return ptc_meta_fail(m, "%s already has %d dims", meta_tstr(m, x), PTC_MAX_DIMS);
        if (meta_dim(m, meta_arg(m, "dim")->i, x->ndim + 1, x, &d))
            return -1;
        for (int i = 0; i < x->ndim; i++) {
            if (i == d)
                shape[n++] = ptc_dim_c(1);
            shape[n++] = x->shape[i];
        }
        if (d == x->ndim)
            shape[n++] = ptc_dim_c(1);
        meta_out(m, x->dtype, shape, n);
        return 0;
    }
    /* squeeze: only listed dims (all when none) of static size 1 go; a
     * symbolic size is taken to be at least 2 and stays. */
    const ptc_arg *dims = meta_arg(m, "dim");
    bool listed[PTC_MAX_DIMS] = {0};
    if (dims->kind == PTC_ARG_NONE) {
        for (int i = 0; i < x->ndim; i++)
            listed[i] = true;
    } else {
        for (int i = 0; i < dims->is.n; i++) {
            int d;
            if (meta_dim(m, dims->is.d[i], x->ndim, x, &d))
                return -1;
            if (x->ndim > 0 && listed[d])
                return ptc_meta_fail(m, "dim %d appears more than once in %s", d,
                                     meta_shapestr(m, dims->is.d, dims->is.n));
            if (x->ndim > 0)
                listed[d] = true;
        }
    }
    for (int i = 0; i < x->ndim; i++)
        if (!(listed[i] && meta_is(x->shape[i], 1)))
            shape[n++] = x->shape[i];
    meta_out(m, x->dtype, shape, n);
    return 0;
}

/* ---- slice, select, narrow ------------------------------------------------------ */

/* Decides x < 0 for a possibly symbolic x; fails when it depends on symbols. */
static int is_negative(ptc_meta *m, ptc_dim x, const char *what, const ptc_ttype *t, bool *neg)
{
    int s = meta_sign(x);
    if (s == 2)
        return ptc_meta_fail(m, "cannot decide whether %s %s is negative for %s", what,
                             meta_dstr(m, x), meta_tstr(m, t));
    *neg = s < 0;
    return 0;
}

/* min(max(v, lo), hi) with decisions on symbolic values. */
static int clamp_dim(ptc_meta *m, ptc_dim v, ptc_dim lo, ptc_dim hi, const char *what,
                     const ptc_ttype *t, ptc_dim *out)
{
    ptc_arena *a = m->arena;
    if (meta_le(a, v, lo) == 1)
        *out = lo;
    else if (meta_le(a, hi, v) == 1)
        *out = hi;
    else if (meta_le(a, lo, v) == 1 && meta_le(a, v, hi) == 1)
        *out = v;
    else
        return ptc_meta_fail(m, "cannot decide how %s %s clamps to [%s, %s] for %s", what,
                             meta_dstr(m, v), meta_dstr(m, lo), meta_dstr(m, hi), meta_tstr(m, t));
    return 0;
}

static int slice_len(ptc_meta *m, const ptc_ttype *x, int d, ptc_dim *len)
{
    ptc_arena *a = m->arena;
    ptc_dim size = x->shape[d];
    const ptc_arg *sa = meta_arg(m, "start"), *ea = meta_arg(m, "end");
    int64_t step;
    if (meta_const(m, meta_arg(m, "step")->i, "step", &step))
        return -1;
    if (step <= 0)
        return ptc_meta_fail(m, "step must be positive, got %lld", (long long)step);
    /* Python passes INT64_MAX for an open end: anything past the size is. */
    ptc_dim start = sa->kind == PTC_ARG_NONE ? ptc_dim_c(0) : sa->i;
    ptc_dim end = ea->kind == PTC_ARG_NONE ? size : ea->i;
    if (!end.sym && end.value > ((int64_t)1 << 60))
        end = size;
    bool neg = false;
    if (is_negative(m, start, "start", x, &neg))
        return -1;
    if (neg)
        start = ptc_dim_add(a, start, size);
    if (is_negative(m, end, "end", x, &neg))
        return -1;
    if (neg)
        end = ptc_dim_add(a, end, size);
    if (clamp_dim(m, start, ptc_dim_c(0), size, "start", x, &start) ||
        clamp_dim(m, end, start, size, "end", x, &end))
        return -1;
    *len = ptc_dim_floordiv(a, ptc_dim_add(a, ptc_dim_sub(a, end, start), ptc_dim_c(step - 1)),
                            ptc_dim_c(step));
    return 0;
}

/* slice, select, narrow. */
int meta_slice(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    ptc_arena *a = m->arena;
    if (x->ndim == 0)
        return ptc_meta_fail(m, "cannot be applied to a 0-dim tensor (%s)", meta_tstr(m, x));
    int d = 0;
    if (meta_dim(m, meta_arg(m, "dim")->i, x->ndim, x, &d))
        return -1;
    ptc_dim size = x->shape[d], len = size;
    ptc_dim shape[PTC_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(ptc_dim) * (size_t)x->ndim);
    if (m->op == PTC_OP_SLICE) {
        if (slice_len(m, x, d, &len))
            return -1;
        shape[d] = len;
        meta_out(m, x->dtype, shape, x->ndim);
        return 0;
    }
    if (m->op == PTC_OP_SELECT) {
        ptc_dim index = meta_arg(m, "index")->i;
        int lo = meta_le(a, ptc_dim_mul(a, size, ptc_dim_c(-1)), index);
        int hi = meta_le(a, ptc_dim_add(a, index, ptc_dim_c(1)), size);
        if (lo != 1 || hi != 1)
            return ptc_meta_fail(m,
                                 lo < 0 || hi < 0 ? "cannot decide whether index %s is in range "
                                                    "for dim %d of %s"
                                                  : "index %s is out of range for dim %d of %s",
                                 meta_dstr(m, index), d, meta_tstr(m, x));
        memmove(shape + d, shape + d + 1, sizeof(ptc_dim) * (size_t)(x->ndim - d - 1));
        meta_out(m, x->dtype, shape, x->ndim - 1);
        return 0;
    }
    /* narrow: start in [-size, size], length >= 0, start + length <= size. */
    ptc_dim start = meta_arg(m, "start")->i, length = meta_arg(m, "length")->i;
    int lo = meta_le(a, ptc_dim_mul(a, size, ptc_dim_c(-1)), start), hi = meta_le(a, start, size);
    if (lo != 1 || hi != 1)
        return ptc_meta_fail(m, "start %s is out of range for dim %d of %s", meta_dstr(m, start), d,
                             meta_tstr(m, x));
    bool neg = false;
    if (is_negative(m, start, "start", x, &neg))
        return -1;
    if (neg)
        start = ptc_dim_add(a, start, size);
    if (meta_sign(length) < 0 || meta_le(a, ptc_dim_add(a, start, length), size) != 1)
        return ptc_meta_fail(m, "start %s + length %s exceeds dim %d of %s", meta_dstr(m, start),
                             meta_dstr(m, length), d, meta_tstr(m, x));
    shape[d] = length;
    meta_out(m, x->dtype, shape, x->ndim);
    return 0;
}

/* ---- cat, stack ------------------------------------------------------------------ */

static bool legacy_empty(const ptc_ttype *t)
{
    return t->ndim == 1 && meta_is(t->shape[0], 0);
}

static int stack(ptc_meta *m, const ptc_arg *ts, ptc_dtype dt)
{
    const ptc_ttype *t0 = &ts->vs.v[0]->type;
    for (int i = 1; i < ts->vs.n; i++) {
        const ptc_ttype *t = &ts->vs.v[i]->type;
        bool same = t->ndim == t0->ndim;
        for (int j = 0; same && j < t->ndim; j++)
            same = meta_same(m, t->shape[j], t0->shape[j]);
        if (!same)
            return ptc_meta_fail(m,
                                 "expects tensors of one size, got %s at entry 0 and %s at "
                                 "entry %d",
                                 meta_tstr(m, t0), meta_tstr(m, t), i);
    }
    int d = 0;
    if (t0->ndim >= PTC_MAX_DIMS)
        return ptc_meta_fail(m, "result would have more than %d dims", PTC_MAX_DIMS);
    if (meta_dim(m, meta_arg(m, "dim")->i, t0->ndim + 1, t0, &d))
        return -1;
    ptc_dim shape[PTC_MAX_DIMS];
    int n = 0;
    for (int i = 0; i <= t0->ndim; i++) {
        if (i == d)
            shape[n++] = ptc_dim_c(ts->vs.n);
        if (i < t0->ndim)
            shape[n++] = t0->shape[i];
    }
    meta_out(m, dt, shape, n);
    return 0;
}

/* cat, stack: dtypes promote; cat skips 1-D empty tensors (legacy). */
int meta_cat(ptc_meta *m)
{
    const ptc_arg *ts = meta_arg(m, "tensors");
    if (ts->vs.n == 0)
        return ptc_meta_fail(m, "expected a non-empty list of tensors");
    static const int idx[] = {0};
    ptc_dtype dt = meta_result_type(m, idx, 1);
    if (m->op == PTC_OP_STACK)
        return stack(m, ts, dt);
    const ptc_ttype *ref = NULL;
    for (int i = 0; i < ts->vs.n; i++) {
        const ptc_ttype *t = &ts->vs.v[i]->type;
        if (t->ndim == 0)
            return ptc_meta_fail(m, "a 0-dim tensor (%s at position %d) cannot be concatenated",
                                 meta_tstr(m, t), i);
        if (!ref && !legacy_empty(t))
            ref = t;
    }
    if (!ref) { /* only legacy empties */
        ptc_dim zero = ptc_dim_c(0);
        int d = 0;
        if (meta_dim(m, meta_arg(m, "dim")->i, 1, NULL, &d))
            return -1;
        meta_out(m, dt, &zero, 1);
        return 0;
    }
    int d = 0;
    if (meta_dim(m, meta_arg(m, "dim")->i, ref->ndim, ref, &d))
        return -1;
    ptc_dim shape[PTC_MAX_DIMS];
    memcpy(shape, ref->shape, sizeof(ptc_dim) * (size_t)ref->ndim);
    shape[d] = ptc_dim_c(0);
    for (int i = 0; i < ts->vs.n; i++) {
        const ptc_ttype *t = &ts->vs.v[i]->type;
        if (legacy_empty(t))
            continue;
        if (t->ndim != ref->ndim)
            return ptc_meta_fail(m, "tensors must have the same number of dims, got %s and %s",
                                 meta_tstr(m, ref), meta_tstr(m, t));
        for (int j = 0; j < t->ndim; j++)
            if (j != d && !meta_same(m, t->shape[j], ref->shape[j]))
                return ptc_meta_fail(m,
                                     "sizes must match except in dim %d, got %s and %s "
                                     "(tensor %d)",
                                     d, meta_tstr(m, ref), meta_tstr(m, t), i);
        shape[d] = ptc_dim_add(m->arena, shape[d], t->shape[d]);
    }
    meta_out(m, dt, shape, ref->ndim);
    return 0;
}

/* ---- split, split_with_sizes, chunk, unbind --------------------------------------- */

static void split_out(ptc_meta *m, const ptc_ttype *x, int d, ptc_dim size)
{
    ptc_dim shape[PTC_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(ptc_dim) * (size_t)x->ndim);
    shape[d] = size;
    meta_out(m, x->dtype, shape, x->ndim);
}

/* Splits dim d of x into pieces of `piece` (the last one shorter). */
static int split_even(ptc_meta *m, const ptc_ttype *x, int d, ptc_dim piece)
{
    ptc_arena *a = m->arena;
    ptc_dim size = x->shape[d];
    if (meta_is(piece, 0)) {
        if (!meta_is(size, 0))
            return ptc_meta_fail(m,
                                 "split_size can only be 0 if the dim is empty, got dim %d of %s",
                                 d, meta_tstr(m, x));
        split_out(m, x, d, size);
        return 0;
    }
    /* The count: static, or a symbolic size that the piece divides. */
    ptc_dim count;
    if (!size.sym && !piece.sym) {
        count = ptc_dim_c(size.value == 0 ? 1 : (size.value + piece.value - 1) / piece.value);
    } else if (meta_exact_div(a, size, piece, &count) || count.sym) {
        return ptc_meta_fail(m,
                             "the number of pieces of dim %d of %s in pieces of %s depends on "
                             "the symbolic size",
                             d, meta_tstr(m, x), meta_dstr(m, piece));
    }
    if (count.value > MAX_SPLITS)
        return ptc_meta_fail(m, "too many outputs (%lld)", (long long)count.value);
    for (int64_t i = 0; i < count.value; i++) {
        ptc_dim rest = ptc_dim_sub(a, size, ptc_dim_mul(a, piece, ptc_dim_c(i)));
        split_out(m, x, d, meta_le(a, piece, rest) == 1 ? piece : rest);
    }
    return 0;
}

int meta_split(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    ptc_arena *a = m->arena;
    int d = 0;
    if (x->ndim == 0)
        return ptc_meta_fail(m, "cannot split a 0-dim tensor (%s)", meta_tstr(m, x));
    if (meta_dim(m, meta_arg(m, "dim")->i, x->ndim, x, &d))
        return -1;
    ptc_dim size = x->shape[d];
    switch (m->op) {
    case PTC_OP_SPLIT: {
        ptc_dim piece = meta_arg(m, "split_size")->i;
        if (meta_sign(piece) < 0)
            return ptc_meta_fail(m, "split_size must not be negative, got %s", meta_dstr(m, piece));
        return split_even(m, x, d, piece);
    }
    case PTC_OP_SPLIT_WITH_SIZES: {
        const ptc_arg *sizes = meta_arg(m, "split_sizes");
        ptc_dim sum = ptc_dim_c(0);
        for (int i = 0; i < sizes->is.n; i++) {
            if (meta_sign(sizes->is.d[i]) < 0)
                return ptc_meta_fail(m, "split_sizes %s must not be negative",
                                     meta_shapestr(m, sizes->is.d, sizes->is.n));
            sum = ptc_dim_add(a, sum, sizes->is.d[i]);
        }
        if (sizes->is.n == 0 || !meta_same(m, sum, size))
            return ptc_meta_fail(m, "split_sizes %s must sum to dim %d of %s",
                                 meta_shapestr(m, sizes->is.d, sizes->is.n), d, meta_tstr(m, x));
        for (int i = 0; i < sizes->is.n; i++)
            split_out(m, x, d, sizes->is.d[i]);
        return 0;
    }
    case PTC_OP_CHUNK: {
        int64_t chunks;
        if (meta_const(m, meta_arg(m, "chunks")->i, "chunks", &chunks))
            return -1;
        if (chunks <= 0)
            return ptc_meta_fail(m, "chunks must be positive, got %lld", (long long)chunks);
        if (meta_is(size, 0)) { /* chunks empty pieces, as torch */
            if (chunks > MAX_SPLITS)
                return ptc_meta_fail(m, "too many outputs (%lld)", (long long)chunks);
            for (int64_t i = 0; i < chunks; i++)
                split_out(m, x, d, size);
            return 0;
        }
        return split_even(m, x, d, meta_ceildiv(a, size, chunks));
    }
    case PTC_OP_UNBIND: {
        if (size.sym)
            return ptc_meta_fail(m, "the number of outputs depends on the symbolic size %s of %s",
                                 meta_dstr(m, size), meta_tstr(m, x));
        if (size.value == 0 || size.value > MAX_SPLITS)
            return ptc_meta_fail(m, "dim %d of %s gives %lld outputs (a node has 1 to %d)", d,
                                 meta_tstr(m, x), (long long)size.value, MAX_SPLITS);
        ptc_dim shape[PTC_MAX_DIMS];
        int n = 0;
        for (int i = 0; i < x->ndim; i++)
            if (i != d)
                shape[n++] = x->shape[i];
        for (int64_t i = 0; i < size.value; i++)
            meta_out(m, x->dtype, shape, n);
        return 0;
    }
    default:
        PTC_ASSERT(!"meta_split: unexpected op");
    }
    return -1;
}

/* ---- copies, padding, repeat --------------------------------------------------------- */

/* contiguous, clone, roll, triu, tril: the input's type. */
int meta_copy(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    if ((m->op == PTC_OP_TRIU || m->op == PTC_OP_TRIL) && x->ndim < 2)
        return ptc_meta_fail(m, "expects a tensor with at least 2 dims, got %s", meta_tstr(m, x));
    if (m->op == PTC_OP_ROLL) {
        const ptc_arg *shifts = meta_arg(m, "shifts"), *dims = meta_arg(m, "dims");
        if (shifts->is.n == 0 || (dims->is.n == 0 ? shifts->is.n != 1 : shifts->is.n != dims->is.n))
            return ptc_meta_fail(m, "shifts %s and dims %s must align",
                                 meta_shapestr(m, shifts->is.d, shifts->is.n),
                                 meta_shapestr(m, dims->is.d, dims->is.n));
        for (int i = 0; i < dims->is.n; i++) {
            int d;
            if (meta_dim(m, dims->is.d[i], x->ndim, x, &d))
                return -1;
        }
    }
    meta_out_like(m, x);
    return 0;
}

/* Pads (lo, hi) of dim d: size + lo + hi, which must not be negative. */
static int padded(ptc_meta *m, const ptc_ttype *x, int d, ptc_dim lo, ptc_dim hi, ptc_dim *out)
{
    *out = ptc_dim_add(m->arena, x->shape[d], ptc_dim_add(m->arena, lo, hi));
    int s = meta_sign(*out);
    if (s < 0 || s == 2)
        return ptc_meta_fail(m,
                             s < 0 ? "padding %s, %s of dim %d of %s gives a negative size"
                                   : "cannot decide whether padding %s, %s of dim %d of %s gives "
                                     "a negative size",
                             meta_dstr(m, lo), meta_dstr(m, hi), d, meta_tstr(m, x));
    return 0;
}

/* constant_pad_nd: pad pairs apply from the last dim backwards. */
int meta_constant_pad_nd(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *pad = meta_arg(m, "pad");
    int n = pad->is.n;
    if (n % 2 != 0)
        return ptc_meta_fail(m, "the length of pad %s must be even",
                             meta_shapestr(m, pad->is.d, n));
    if (n > 2 * x->ndim)
        return ptc_meta_fail(m, "pad %s has more than two entries per dim of %s",
                             meta_shapestr(m, pad->is.d, n), meta_tstr(m, x));
    ptc_dim shape[PTC_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(ptc_dim) * (size_t)x->ndim);
    for (int i = 0; i < n / 2; i++) {
        int d = x->ndim - 1 - i;
        if (padded(m, x, d, pad->is.d[2 * i], pad->is.d[2 * i + 1], &shape[d]))
            return -1;
    }
    meta_out(m, x->dtype, shape, x->ndim);
    return 0;
}

int meta_repeat(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *rep = meta_arg(m, "repeats");
    int n = rep->is.n;
    if (n < x->ndim || n > PTC_MAX_DIMS)
        return ptc_meta_fail(m, "repeats %s must have between %d and %d entries for %s",
                             meta_shapestr(m, rep->is.d, n), x->ndim, PTC_MAX_DIMS,
                             meta_tstr(m, x));
    ptc_dim shape[PTC_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        ptc_dim r = rep->is.d[i];
        if (meta_sign(r) < 0)
            return ptc_meta_fail(m, "repeats %s must not be negative",
                                 meta_shapestr(m, rep->is.d, n));
        int j = i - (n - x->ndim);
        shape[i] = j < 0 ? r : ptc_dim_mul(m->arena, x->shape[j], r);
    }
    meta_out(m, x->dtype, shape, n);
    return 0;
}

/* ---- prims ---------------------------------------------------------------------------- */

static int nonneg_shape(ptc_meta *m, const ptc_arg *shape)
{
    for (int i = 0; i < shape->is.n; i++)
        if (meta_sign(shape->is.d[i]) < 0)
            return ptc_meta_fail(m, "shape %s has a negative size",
                                 meta_shapestr(m, shape->is.d, shape->is.n));
    if (shape->is.n > PTC_MAX_DIMS)
        return ptc_meta_fail(m, "shape has more than %d dims", PTC_MAX_DIMS);
    return 0;
}

/* A prims dim: in [0, n), never wrapped. */
static int prim_dim(ptc_meta *m, ptc_dim v, int n, const ptc_ttype *x, int *out)
{
    int64_t d;
    if (meta_const(m, v, "dim", &d))
        return -1;
    if (d < 0 || d >= n)
        return ptc_meta_fail(m, "dim %lld is out of range for %s (prims take dims in [0, %d))",
                             (long long)d, meta_tstr(m, x), n);
    *out = (int)d;
    return 0;
}

int meta_prim_broadcast_in_dim(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *shape = meta_arg(m, "shape"), *bd = meta_arg(m, "broadcast_dimensions");
    if (nonneg_shape(m, shape))
        return -1;
    if (bd->is.n != x->ndim)
        return ptc_meta_fail(m, "broadcast_dimensions %s must map each of the %d dims of %s",
                             meta_shapestr(m, bd->is.d, bd->is.n), x->ndim, meta_tstr(m, x));
    int prev = -1;
    for (int i = 0; i < x->ndim; i++) {
        int d = 0;
        if (prim_dim(m, bd->is.d[i], shape->is.n, x, &d))
            return -1;
        if (d <= prev)
            return ptc_meta_fail(m, "broadcast_dimensions %s must be strictly increasing",
                                 meta_shapestr(m, bd->is.d, bd->is.n));
        prev = d;
        if (!meta_same(m, x->shape[i], shape->is.d[d]) && !meta_is(x->shape[i], 1))
            return ptc_meta_fail(m, "dim %d of %s cannot broadcast to size %s (dim %d of %s)", i,
                                 meta_tstr(m, x), meta_dstr(m, shape->is.d[d]), d,
                                 meta_shapestr(m, shape->is.d, shape->is.n));
    }
    meta_out(m, x->dtype, shape->is.d, shape->is.n);
    return 0;
}

int meta_prim_reshape(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *shape = meta_arg(m, "shape");
    if (nonneg_shape(m, shape))
        return -1;
    ptc_dim a = numel_of(m, x->shape, x->ndim), b = numel_of(m, shape->is.d, shape->is.n);
    if (!meta_same(m, a, b))
        return ptc_meta_fail(m, "shape %s has %s elements, %s has %s",
                             meta_shapestr(m, shape->is.d, shape->is.n), meta_dstr(m, b),
                             meta_tstr(m, x), meta_dstr(m, a));
    meta_out(m, x->dtype, shape->is.d, shape->is.n);
    return 0;
}

int meta_prim_permute(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *dims = meta_arg(m, "dims");
    if (dims->is.n != x->ndim)
        return ptc_meta_fail(m, "dims %s must be a permutation of the %d dims of %s",
                             meta_shapestr(m, dims->is.d, dims->is.n), x->ndim, meta_tstr(m, x));
    bool seen[PTC_MAX_DIMS] = {0};
    ptc_dim shape[PTC_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        int d = 0;
        if (prim_dim(m, dims->is.d[i], x->ndim, x, &d))
            return -1;
        if (seen[d])
            return ptc_meta_fail(m, "dims %s repeat dim %d",
                                 meta_shapestr(m, dims->is.d, dims->is.n), d);
        seen[d] = true;
        shape[i] = x->shape[d];
    }
    meta_out(m, x->dtype, shape, x->ndim);
    return 0;
}

/* prims.slice: 0 <= start <= limit <= size per dim; strides [] means 1s. */
int meta_prim_slice(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    ptc_arena *a = m->arena;
    const ptc_arg *start = meta_arg(m, "start_indices"), *limit = meta_arg(m, "limit_indices"),
                  *strides = meta_arg(m, "strides");
    if (start->is.n != x->ndim || limit->is.n != x->ndim ||
        (strides->is.n != 0 && strides->is.n != x->ndim))
        return ptc_meta_fail(m, "start_indices, limit_indices and strides need %d entries for %s",
                             x->ndim, meta_tstr(m, x));
    ptc_dim shape[PTC_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        ptc_dim s = start->is.d[i], l = limit->is.d[i];
        int64_t st = 1;
        if (strides->is.n && meta_const(m, strides->is.d[i], "strides", &st))
            return -1;
        if (st <= 0)
            return ptc_meta_fail(m, "strides must be positive, got %lld", (long long)st);
        if (meta_sign(s) < 0 || meta_sign(s) == 2 || meta_le(a, s, l) != 1 ||
            meta_le(a, l, x->shape[i]) != 1)
            return ptc_meta_fail(m,
                                 "dim %d: start %s and limit %s must satisfy 0 <= start <= "
                                 "limit <= %s",
                                 i, meta_dstr(m, s), meta_dstr(m, l), meta_dstr(m, x->shape[i]));
        shape[i] = ptc_dim_floordiv(a, ptc_dim_add(a, ptc_dim_sub(a, l, s), ptc_dim_c(st - 1)),
                                    ptc_dim_c(st));
    }
    meta_out(m, x->dtype, shape, x->ndim);
    return 0;
}

/* prims.pad: padding_config holds (lo, hi, interior) per dim, in dim order,
 * as torch._prims.pad: negative lo/hi crop, interior >= 0 inserts that many
 * padding elements between neighbours. */
int meta_prim_pad(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    ptc_arena *a = m->arena;
    const ptc_arg *cfg = meta_arg(m, "padding_config");
    if (cfg->is.n != 3 * x->ndim)
        return ptc_meta_fail(m,
                             "padding_config %s needs 3 entries (lo, hi, interior) per dim of %s",
                             meta_shapestr(m, cfg->is.d, cfg->is.n), meta_tstr(m, x));
    ptc_dim shape[PTC_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        ptc_dim n = x->shape[d], interior = cfg->is.d[3 * d + 2];
        if (meta_sign(interior) != 0 && meta_sign(interior) != 1)
            return ptc_meta_fail(m, "interior padding %s of dim %d must not be negative",
                                 meta_dstr(m, interior), d);
        /* n + (n - 1) * interior, for a non-empty dim */
        ptc_dim grown = n;
        if (!meta_is(n, 0) && !meta_is(interior, 0)) {
            if (meta_sign(n) != 1)
                return ptc_meta_fail(m, "cannot decide whether dim %d of %s is empty", d,
                                     meta_tstr(m, x));
            grown = ptc_dim_add(a, n, ptc_dim_mul(a, ptc_dim_sub(a, n, ptc_dim_c(1)), interior));
        }
        ptc_ttype t = *x;
        t.shape[d] = grown;
        if (padded(m, &t, d, cfg->is.d[3 * d], cfg->is.d[3 * d + 1], &shape[d]))
            return -1;
    }
    meta_out(m, x->dtype, shape, x->ndim);
    return 0;
}

int meta_prim_cat(ptc_meta *m)
{
    const ptc_arg *ts = meta_arg(m, "tensors");
    if (ts->vs.n == 0)
        return ptc_meta_fail(m, "expected a non-empty list of tensors");
    const ptc_ttype *t0 = &ts->vs.v[0]->type;
    int d = 0;
    if (prim_dim(m, meta_arg(m, "dim")->i, t0->ndim, t0, &d))
        return -1;
    ptc_dim shape[PTC_MAX_DIMS];
    memcpy(shape, t0->shape, sizeof(ptc_dim) * (size_t)t0->ndim);
    for (int i = 1; i < ts->vs.n; i++) {
        const ptc_ttype *t = &ts->vs.v[i]->type;
        bool ok = t->ndim == t0->ndim && t->dtype == t0->dtype;
        for (int j = 0; ok && j < t->ndim; j++)
            ok = j == d || meta_same(m, t->shape[j], t0->shape[j]);
        if (!ok)
            return ptc_meta_fail(m,
                                 "tensors must have one dtype and equal sizes except in dim %d, "
                                 "got %s and %s (tensor %d)",
                                 d, meta_tstr(m, t0), meta_tstr(m, t), i);
        shape[d] = ptc_dim_add(m->arena, shape[d], t->shape[d]);
    }
    meta_out(m, t0->dtype, shape, t0->ndim);
    return 0;
}
