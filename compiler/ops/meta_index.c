/* Meta functions of indexing: advanced indexing (index), index_select,
 * gather, embedding, and the gather/scatter prims.
 *
 * index follows torch's placement rule: the broadcast shape of the index
 * tensors replaces the indexed dims where they are adjacent, and goes first
 * when a none (a full slice) separates them. Boolean masks select a number of
 * elements that depends on their values, which a graph with static or
 * symbolic sizes cannot express: they are rejected with a clear message (the
 * capture turns them into a graph break).
 */
#include "ops/meta.h"

#include <string.h>

static bool int_index(ptc_dtype dt)
{
    return dt == PTC_I64 || dt == PTC_I32;
}

static int check_index_dtype(ptc_meta *m, const ptc_ttype *idx)
{
    if (idx->dtype == PTC_BOOL || idx->dtype == PTC_U8)
        return ptc_meta_fail(m,
                             "boolean mask index %s selects a data-dependent number of "
                             "elements, which is not supported (use where or masked_fill)",
                             meta_tstr(m, idx));
    if (!int_index(idx->dtype))
        return ptc_meta_fail(m, "indices must be i64 or i32 tensors, got %s", meta_tstr(m, idx));
    return 0;
}

int meta_index(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0);
    const ptc_arg *ix = meta_arg(m, "indices");
    int n = ix->vs.n;
    if (n > x->ndim)
        return ptc_meta_fail(m, "too many indices for %s (got %d)", meta_tstr(m, x), n);
    ptc_ttype b = {0}; /* broadcast shape of the index tensors */
    int first = -1, last = -1, count = 0;
    for (int i = 0; i < n; i++) {
        const ptc_value *v = ix->vs.v[i];
        if (!v)
            continue;
        if (check_index_dtype(m, &v->type))
            return -1;
        if (first < 0) {
            b = v->type;
            b.layout = PTC_LAYOUT_CONTIGUOUS;
        } else {
            ptc_dim out[PTC_MAX_DIMS];
            int nout;
            if (meta_broadcast(m, &b, &v->type, out, &nout))
                return -1;
            b.ndim = (int8_t)nout;
            memcpy(b.shape, out, sizeof(ptc_dim) * (size_t)nout);
        }
        if (first < 0)
            first = i;
        last = i;
        count++;
    }
    if (count == 0) {
        meta_out_like(m, x);
        return 0;
    }
    bool adjacent = last - first + 1 == count;
    ptc_dim shape[2 * PTC_MAX_DIMS];
    int k = 0;
    if (adjacent) {
        for (int i = 0; i < first; i++)
            shape[k++] = x->shape[i];
        for (int i = 0; i < b.ndim; i++)
            shape[k++] = b.shape[i];
        for (int i = last + 1; i < x->ndim; i++)
            shape[k++] = x->shape[i];
    } else {
        for (int i = 0; i < b.ndim; i++)
            shape[k++] = b.shape[i];
        for (int i = 0; i < x->ndim; i++)
            if (i >= n || !ix->vs.v[i])
                shape[k++] = x->shape[i];
    }
    if (k > PTC_MAX_DIMS)
        return ptc_meta_fail(m, "result would have %d dims (at most %d)", k, PTC_MAX_DIMS);
    meta_out(m, x->dtype, shape, k);
    return 0;
}

/* index_select and prims.index_select. */
int meta_index_select(ptc_meta *m)
{
    const ptc_ttype *x = meta_t(m, 0), *idx = meta_t(m, 2);
    int d;
    if (meta_dim(m, meta_arg(m, "dim")->i, x->ndim, x, &d))
        return -1;
    if (idx->ndim > 1)
        return ptc_meta_fail(m, "index must be a vector or a scalar, got %s", meta_tstr(m, idx));
    if (!int_index(idx->dtype))
        return ptc_meta_fail(m, "index must be i64 or i32, got %s", meta_tstr(m, idx));
    ptc_dim shape[PTC_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(ptc_dim) * (size_t)x->ndim);
    if (x->ndim > 0)
        shape[d] = idx->ndim ? idx->shape[0] : ptc_dim_c(1);
    meta_out(m, x->dtype, shape, x->ndim);
    return 0;
}

/* index may not be larger than x except in dim `except` (-1: nowhere). */
static int index_fits(ptc_meta *m, const ptc_ttype *idx, const ptc_ttype *x, int except)
{
    for (int i = 0; i < idx->ndim; i++) {
        if (i == except)
            continue;
        int le = meta_le(m->arena, idx->shape[i], x->shape[i]);
        if (le != 1)
            return ptc_meta_fail(m,
                                 "index %s must be no larger than %s apart from dim %d (dim %d: "
                                 "%s vs %s)",
                                 meta_tstr(m, idx), meta_tstr(m, x), except, i,
                                 meta_dstr(m, idx->shape[i]), meta_dstr(m, x->shape[i]));
    }
    return 0;
}

static int gather_common(ptc_meta *m, bool prim)
{
    const ptc_ttype *x = meta_t(m, 0), *idx = meta_t(m, 2);
    int d;
    if (meta_dim(m, meta_arg(m, "dim")->i, x->ndim, x, &d))
        return -1;
    if (prim ? idx->dtype != PTC_I64 : !int_index(idx->dtype))
        return ptc_meta_fail(m, "index must be %s, got %s", prim ? "i64" : "i64 or i32",
                             meta_tstr(m, idx));
    if (idx->ndim != x->ndim && !(idx->ndim <= 1 && x->ndim <= 1))
        return ptc_meta_fail(m, "index %s must have as many dims as %s", meta_tstr(m, idx),
                             meta_tstr(m, x));
    if (idx->ndim == x->ndim && index_fits(m, idx, x, d))
        return -1;
    meta_out(m, x->dtype, idx->shape, idx->ndim);
    return 0;
}

int meta_gather(ptc_meta *m)
{
    return gather_common(m, false);
}
int meta_prim_gather(ptc_meta *m)
{
    return gather_common(m, true);
}

/* prims.check_index: i64 indices into a dim of `size`, negative ones
 * counted from the end (advanced indexing's rule). */
int meta_prim_check_index(ptc_meta *m)
{
    const ptc_ttype *idx = meta_t(m, 0);
    if (idx->dtype != PTC_I64)
        return ptc_meta_fail(m, "index must be i64, got %s", meta_tstr(m, idx));
    meta_out_like(m, idx);
    return 0;
}

/* scatter and scatter_add (index i64 or i32), their prims (i64). */
static int scatter_common(ptc_meta *m, bool prim)
{
    const ptc_ttype *x = meta_t(m, 0), *idx = meta_t(m, 2), *src = meta_t(m, 3);
    int d;
    if (meta_dim(m, meta_arg(m, "dim")->i, x->ndim, x, &d))
        return -1;
    if (prim ? idx->dtype != PTC_I64 : !int_index(idx->dtype))
        return ptc_meta_fail(m, "index must be %s, got %s", prim ? "i64" : "i64 or i32",
                             meta_tstr(m, idx));
    if (src->dtype != x->dtype)
        return ptc_meta_fail(m, "src %s must have the dtype of %s", meta_tstr(m, src),
                             meta_tstr(m, x));
    if (idx->ndim != x->ndim || src->ndim != x->ndim)
        return ptc_meta_fail(m, "index %s, src %s and %s must have as many dims", meta_tstr(m, idx),
                             meta_tstr(m, src), meta_tstr(m, x));
    if (index_fits(m, idx, x, d) || index_fits(m, idx, src, -1))
        return -1;
    meta_out_like(m, x);
    return 0;
}

int meta_scatter(ptc_meta *m)
{
    return scatter_common(m, false);
}

int meta_prim_scatter_add(ptc_meta *m)
{
    return scatter_common(m, true);
}

int meta_embedding(ptc_meta *m)
{
    const ptc_ttype *w = meta_t(m, 0), *idx = meta_t(m, 1);
    if (w->ndim != 2)
        return ptc_meta_fail(m, "weight must be 2-D, got %s", meta_tstr(m, w));
    if (!int_index(idx->dtype))
        return ptc_meta_fail(m, "indices must be i64 or i32, got %s", meta_tstr(m, idx));
    if (idx->ndim + 1 > PTC_MAX_DIMS)
        return ptc_meta_fail(m, "result would have more than %d dims", PTC_MAX_DIMS);
    ptc_dim shape[PTC_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof(ptc_dim) * (size_t)idx->ndim);
    shape[idx->ndim] = w->shape[1];
    meta_out(m, w->dtype, shape, idx->ndim + 1);
    return 0;
}
