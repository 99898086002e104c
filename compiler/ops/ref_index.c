/* Reference kernels of the indexing ops: advanced indexing (index),
 * index_select, gather, scatter_add and embedding.
 *
 * Indices are read as int64 whatever their integer dtype and checked one by
 * one, failing with torch's message for the first bad one. Advanced indexing
 * follows numpy: boolean masks become one index per masked dim (their
 * nonzero positions), all index tensors broadcast together, and the
 * broadcast dims replace the indexed dims in place when those are adjacent,
 * else they lead the result.
 */
#include "ops/ref.h"

#include <stdlib.h>
#include <string.h>

/* Wraps index i into [0, size), failing like torch when out of range. */
static int wrap_index(const ptc_kctx *k, int64_t i, int dim, int64_t size, int64_t *out)
{
    if (i < -size || i >= size)
        return ref_fail(k, "index %lld is out of bounds for dimension %d with size %lld",
                        (long long)i, dim, (long long)size);
    *out = i < 0 ? i + size : i;
    return 0;
}

static bool is_mask(const ptc_tensor *t)
{
    return t->dtype == PTC_BOOL || t->dtype == PTC_U8;
}

/* ---- index --------------------------------------------------------------------- */

typedef struct adv {
    int n;                        /* index entries (dims indexed) */
    int dim[PTC_MAX_DIMS];        /* the dim of self each indexes */
    ptc_tensor idx[PTC_MAX_DIMS]; /* integer index tensors */
    bool owned[PTC_MAX_DIMS];     /* allocated here (from a mask) */
} adv;

static void adv_free(adv *a)
{
    for (int i = 0; i < a->n; i++)
        if (a->owned[i])
            ptc_tensor_release(&a->idx[i]);
}

/* A mask over dims [d, d + m) of x becomes m 1-d index tensors of its
 * nonzero positions, in row-major order. */
static int expand_mask(const ptc_kctx *k, const ptc_tensor *x, const ptc_tensor *mask, int d,
                       adv *a)
{
    if (d + mask->ndim > x->ndim)
        return ref_fail(k, "too many indices for tensor of dimension %d", x->ndim);
    for (int j = 0; j < mask->ndim; j++)
        if (mask->sizes[j] != x->sizes[d + j])
            return ref_fail(k,
                            "The shape of the mask [%lld] at index %d does not match the shape "
                            "of the indexed tensor [%lld] at index %d",
                            (long long)mask->sizes[j], j, (long long)x->sizes[d + j], d + j);
    int64_t count = 0, mi[PTC_MAX_DIMS] = {0}, n = ptc_tensor_numel(mask);
    for (int64_t i = 0; i < n; i++, ref_next(mi, mask->sizes, mask->ndim))
        count += ref_ldi(mask, ref_offset(mask, mi)) != 0;
    int first = a->n;
    for (int j = 0; j < mask->ndim; j++) {
        if (ptc_tensor_alloc(&a->idx[a->n], PTC_I64, 1, &count, k->err))
            return -1;
        a->owned[a->n] = true;
        a->dim[a->n++] = d + j;
    }
    memset(mi, 0, sizeof mi);
    for (int64_t i = 0, c = 0; i < n; i++, ref_next(mi, mask->sizes, mask->ndim))
        if (ref_ldi(mask, ref_offset(mask, mi)) != 0) {
            for (int j = 0; j < mask->ndim; j++)
                ref_sti(&a->idx[first + j], c, mi[j]);
            c++;
        }
    return 0;
}

static int collect_indices(const ptc_kctx *k, const ptc_tensor *x, adv *a)
{
    const ptc_arg *list = ref_arg(k, "indices");
    int d = 0;
    for (int i = 0; i < list->vs.n; i++) {
        const ptc_value *v = list->vs.v[i];
        if (!v) { /* None: a full slice */
            d++;
            continue;
        }
        const ptc_tensor *t = &k->env[v->id];
        if (is_mask(t) && t->ndim == 0)
            return ref_fail(k, "indexing with a 0-dim boolean tensor is not supported");
        if (is_mask(t)) {
            if (expand_mask(k, x, t, d, a))
                return -1;
            d += t->ndim;
            continue;
        }
        if (ref_is_float(t->dtype))
            return ref_fail(k, "tensors used as indices must be long, int, byte or bool tensors");
        if (d >= x->ndim)
            return ref_fail(k, "too many indices for tensor of dimension %d", x->ndim);
        a->idx[a->n] = *t;
        a->idx[a->n].storage = NULL;
        a->dim[a->n++] = d++;
    }
    if (d > x->ndim)
        return ref_fail(k, "too many indices for tensor of dimension %d", x->ndim);
    return 0;
}

/* The broadcast shape of the index tensors. */
static int index_shape(const ptc_kctx *k, const adv *a, int64_t *shape, int *nd)
{
    *nd = 0;
    for (int i = 0; i < a->n; i++)
        if (a->idx[i].ndim > *nd)
            *nd = a->idx[i].ndim;
    for (int j = 0; j < *nd; j++)
        shape[j] = 1;
    for (int i = 0; i < a->n; i++) {
        const ptc_tensor *t = &a->idx[i];
        for (int j = 0; j < t->ndim; j++) {
            int64_t s = t->sizes[j], *o = &shape[*nd - t->ndim + j];
            if (s != *o && s != 1 && *o != 1)
                return ref_fail(k, "shape mismatch: indexing tensors could not be broadcast "
                                   "together");
            if (s != 1)
                *o = s;
        }
    }
    return 0;
}

int ptc_ref_index(ptc_kctx *k)
{
    const ptc_tensor *x = ref_tensor(k, "self");
    ptc_tensor *out = &k->out[0];
    adv a = {0};
    int64_t bshape[PTC_MAX_DIMS];
    int nb, rc = -1;
    if (collect_indices(k, x, &a) || index_shape(k, &a, bshape, &nb))
        goto done;
    /* Result dims: the broadcast dims at the first indexed dim when the
     * indexed dims are adjacent, else first; the other dims of x in order. */
    bool indexed[PTC_MAX_DIMS] = {false};
    for (int i = 0; i < a.n; i++)
        indexed[a.dim[i]] = true;
    bool adjacent = true;
    for (int i = 1; i < a.n; i++)
        adjacent &= a.dim[i] == a.dim[i - 1] + 1;
    int at = adjacent && a.n ? a.dim[0] : 0, rest[PTC_MAX_DIMS], nrest = 0;
    for (int d = 0; d < x->ndim; d++)
        if (!indexed[d])
            rest[nrest++] = d;
    int64_t want[PTC_MAX_DIMS];
    int nlead = 0; /* rest dims before the broadcast block */
    for (int r = 0; r < nrest; r++)
        nlead += rest[r] < at;
    if (nrest + nb > PTC_MAX_DIMS) {
        ref_fail(k, "index: the result would have more than %d dims", PTC_MAX_DIMS);
        goto done;
    }
    for (int r = 0; r < nrest; r++)
        want[r < nlead ? r : r + nb] = x->sizes[rest[r]];
    memcpy(want + nlead, bshape, sizeof(int64_t) * (size_t)nb);
    if (ref_out_sizes(k, 0, nrest + nb, want))
        goto done;
    ptc_tensor views[PTC_MAX_DIMS];
    for (int i = 0; i < a.n; i++)
        views[i] = ref_broadcast(&a.idx[i], nb, bshape);
    rc = 0;
    if (ptc_tensor_numel(out) == 0)
        goto done;
    int64_t oi[PTC_MAX_DIMS] = {0}, src[PTC_MAX_DIMS], o = 0;
    do {
        const int64_t *bi = oi + nlead;
        for (int r = 0; r < nrest; r++)
            src[rest[r]] = oi[r < nlead ? r : r + nb];
        for (int i = 0; i < a.n; i++) {
            int64_t raw = ref_ldi(&views[i], ref_offset(&views[i], bi));
            if ((rc = wrap_index(k, raw, a.dim[i], x->sizes[a.dim[i]], &src[a.dim[i]])))
                goto done;
        }
        ref_copy_elem(out, o++, x, ref_offset(x, src));
    } while (ref_next(oi, out->sizes, out->ndim));
done:
    adv_free(&a);
    return rc;
}

/* prims.check_index: advanced indexing's indices, wrapped and checked. */
int ptc_ref_prim_check_index(ptc_kctx *k)
{
    const ptc_tensor *index = ref_tensor(k, "index");
    int64_t size = ref_int(k, "size"), idx[PTC_MAX_DIMS] = {0}, o = 0;
    int dim = (int)ref_int(k, "dim");
    if (ptc_tensor_numel(index) == 0)
        return 0;
    do {
        int64_t w = 0;
        if (wrap_index(k, ref_ldi(index, ref_offset(index, idx)), dim, size, &w))
            return -1;
        ref_sti(&k->out[0], o++, w);
    } while (ref_next(idx, index->sizes, index->ndim));
    return 0;
}

/* ---- index_select, gather, scatter_add, embedding ---------------------------------- */

int ptc_ref_index_select(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0), *index = ref_tensor(k, "index");
    ptc_tensor *out = &k->out[0];
    int d;
    if (ref_dim(k, ref_int(k, "dim"), x->ndim, &d))
        return -1;
    if (index->ndim > 1)
        return ref_fail(k, "index_select(): Index is supposed to be a vector");
    int64_t n = ptc_tensor_numel(index), size = x->ndim ? x->sizes[d] : 1;
    int64_t want[PTC_MAX_DIMS];
    memcpy(want, x->sizes, sizeof want);
    if (x->ndim == 0 && n != 1)
        return ref_fail(k,
                        "index_select(): Index to scalar can have only 1 value, got %lld "
                        "value(s)",
                        (long long)n);
    if (x->ndim)
        want[d] = n;
    if (ref_out_sizes(k, 0, x->ndim, want))
        return -1;
    int64_t *sel = malloc(sizeof *sel * (size_t)(n ? n : 1));
    if (!sel)
        return ref_fail(k, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        sel[i] = ref_ldi(index, index->ndim ? i * index->strides[0] : 0);
        if (sel[i] < 0 || sel[i] >= size) {
            long long bad = (long long)sel[i];
            free(sel);
            if (d == 1 && x->ndim >= 2) /* torch's kernel for dim 1 words it so */
                return ref_fail(k, "INDICES element is out of DATA bounds, id=%lld axis_dim=%lld",
                                bad, (long long)size);
            return ref_fail(k, "index out of range in self");
        }
    }
    if (ptc_tensor_numel(out) > 0) {
        int64_t idx[PTC_MAX_DIMS] = {0}, src[PTC_MAX_DIMS], o = 0;
        do {
            memcpy(src, idx, sizeof src);
            if (x->ndim)
                src[d] = sel[idx[d]];
            ref_copy_elem(out, o++, x, ref_offset(x, src));
        } while (ref_next(idx, out->sizes, out->ndim));
    }
    free(sel);
    return 0;
}

/* gather: out[i] = x[i with dim d replaced by index[i]]; indices are not
 * wrapped (a negative one is out of bounds, as in torch). */
int ptc_ref_gather(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0), *index = ref_tensor(k, "index");
    ptc_tensor *out = &k->out[0];
    int d;
    if (ref_dim(k, ref_int(k, "dim"), x->ndim, &d))
        return -1;
    if (index->ndim != x->ndim && !(index->ndim <= 1 && x->ndim <= 1))
        return ref_fail(k, "Index tensor must have the same number of dimensions as input tensor");
    if (ref_out_like(k, 0, index))
        return -1;
    if (ptc_tensor_numel(index) == 0)
        return 0;
    int64_t size = x->ndim ? x->sizes[d] : 1;
    int64_t idx[PTC_MAX_DIMS] = {0}, src[PTC_MAX_DIMS], o = 0;
    do {
        int64_t i = ref_ldi(index, ref_offset(index, idx));
        if (i < 0 || i >= size)
            return ref_fail(k, "index %lld is out of bounds for dimension %d with size %lld",
                            (long long)i, d, (long long)size);
        memcpy(src, idx, sizeof src);
        src[d] = i;
        for (int j = 0; j < x->ndim; j++)
            if (j != d && src[j] >= x->sizes[j])
                return ref_fail(k,
                                "Size does not match at dimension %d expected index [...] to "
                                "be no larger than self %lld",
                                j, (long long)x->sizes[j]);
        ref_copy_elem(out, o++, x, x->ndim ? ref_offset(x, src) : 0);
    } while (ref_next(idx, index->sizes, index->ndim));
    return 0;
}

/* scatter_add (add) or scatter: a copy of a with src[i] added at, or
 * written to, a[i with dim d replaced by index[i]], in index's order;
 * scatter_add accumulates in double (int64) per element, rounded once. */
static int scatter_into(ptc_kctx *k, bool add)
{
    const ptc_tensor *a = ptc_k_tensor(k, 0), *index = ref_tensor(k, "index");
    const ptc_tensor *src = ref_tensor(k, "src");
    ptc_tensor *out = &k->out[0];
    int d;
    if (ref_dim(k, ref_int(k, "dim"), a->ndim, &d))
        return -1;
    if (index->ndim != a->ndim || src->ndim != a->ndim)
        return ref_fail(k, "Index tensor must have the same number of dimensions as self tensor");
    if (ref_out_like(k, 0, a))
        return -1;
    int64_t n = ptc_tensor_numel(out);
    bool fl = ref_is_float(out->dtype);
    double *facc = malloc(sizeof *facc * (size_t)(n ? n : 1));
    int64_t *iacc = malloc(sizeof *iacc * (size_t)(n ? n : 1));
    int rc = -1;
    if (!facc || !iacc) {
        ref_fail(k, "out of memory");
        goto done;
    }
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    if (n > 0)
        do {
            facc[o] = fl ? ref_ldf(a, ref_offset(a, idx)) : 0;
            iacc[o++] = fl ? 0 : ref_ldi(a, ref_offset(a, idx));
        } while (ref_next(idx, a->sizes, a->ndim));
    memset(idx, 0, sizeof idx);
    if (ptc_tensor_numel(index) > 0)
        do {
            for (int j = 0; j < a->ndim; j++)
                if (idx[j] >= src->sizes[j] || (j != d && idx[j] >= a->sizes[j])) {
                    ref_fail(k,
                             "Expected index [...] to be no larger than self apart from "
                             "dimension %d and to be no larger than src",
                             d);
                    goto done;
                }
            int64_t i = ref_ldi(index, ref_offset(index, idx)), size = a->ndim ? a->sizes[d] : 1;
            if (i < 0 || i >= size) {
                ref_fail(k, "index %lld is out of bounds for dimension %d with size %lld",
                         (long long)i, d, (long long)size);
                goto done;
            }
            int64_t dst[PTC_MAX_DIMS];
            memcpy(dst, idx, sizeof dst);
            if (a->ndim)
                dst[d] = i;
            int64_t t = ref_offset(out, dst), s = ref_offset(src, idx);
            if (fl)
                facc[t] = (add ? facc[t] : 0) + ref_ldf(src, s);
            else
                iacc[t] = (int64_t)((add ? (uint64_t)iacc[t] : 0) + (uint64_t)ref_ldi(src, s));
        } while (ref_next(idx, index->sizes, index->ndim));
    for (int64_t i = 0; i < n; i++) {
        if (fl)
            ref_stf(out, i, facc[i]);
        else
            ref_sti(out, i, iacc[i]);
    }
    rc = 0;
done:
    free(facc);
    free(iacc);
    return rc;
}

int ptc_ref_scatter_add(ptc_kctx *k)
{
    return scatter_into(k, true);
}

int ptc_ref_scatter(ptc_kctx *k)
{
    return scatter_into(k, false);
}

/* embedding: rows of weight picked by indices (any shape); out of range and
 * negative indices fail as in torch. padding_idx only matters to gradients. */
int ptc_ref_embedding(ptc_kctx *k)
{
    const ptc_tensor *w = ref_tensor(k, "weight"), *ind = ref_tensor(k, "indices");
    ptc_tensor *out = &k->out[0];
    if (w->ndim != 2)
        return ref_fail(k, "'weight' must be 2-D");
    int64_t rows = w->sizes[0], dim = w->sizes[1], n = ptc_tensor_numel(ind);
    int64_t want[PTC_MAX_DIMS + 1];
    memcpy(want, ind->sizes, sizeof(int64_t) * (size_t)ind->ndim);
    want[ind->ndim] = dim;
    if (ind->ndim >= PTC_MAX_DIMS)
        return ref_fail(k, "embedding: indices of %d dims are too many", ind->ndim);
    if (ref_out_sizes(k, 0, ind->ndim + 1, want))
        return -1;
    if (n == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    do {
        int64_t r = ref_ldi(ind, ref_offset(ind, idx));
        if (r < 0 || r >= rows)
            return ref_fail(k, "index out of range in self");
        for (int64_t j = 0; j < dim; j++)
            ref_copy_elem(out, o++, w, r * w->strides[0] + j * w->strides[1]);
    } while (ref_next(idx, ind->sizes, ind->ndim));
    return 0;
}
