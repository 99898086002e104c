/* Reference kernels of the shape ops: views (computed as copies: the
 * reference is functional and every output is a fresh contiguous tensor),
 * the shape prims, padding, repeat, roll, cat/stack and the splits.
 *
 * Most of them build a strided view of the input that is the result (a
 * permutation, a slice, a broadcast) and copy it out in row-major order; the
 * ones that only change how row-major elements are grouped (view, reshape,
 * flatten, squeeze, unsqueeze, contiguous, clone) copy elements in order.
 */
#include "ops/ref.h"

#include <string.h>

/* Copies view v into the contiguous out in v's row-major order. */
static int copy_out(const ptc_kctx *k, ptc_tensor *out, const ptc_tensor *v)
{
    int64_t n = ptc_tensor_numel(v);
    if (n != ptc_tensor_numel(out))
        return ref_fail(k, "internal: output holds %lld elements, the view %lld",
                        (long long)ptc_tensor_numel(out), (long long)n);
    if (n == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, o = 0;
    do
        ref_convert_elem(out, o++, v, ref_offset(v, idx));
    while (ref_next(idx, v->sizes, v->ndim));
    return 0;
}

static ptc_tensor permuted(const ptc_tensor *x, const int *perm)
{
    ptc_tensor v = *x;
    v.storage = NULL;
    for (int i = 0; i < x->ndim; i++) {
        v.sizes[i] = x->sizes[perm[i]];
        v.strides[i] = x->strides[perm[i]];
    }
    return v;
}

/* Reads a permutation argument, checking it is one. */
static int read_perm(const ptc_kctx *k, const char *param, int ndim, int *perm)
{
    int64_t dims[PTC_MAX_DIMS + 1];
    const ptc_arg *a = ref_arg(k, param);
    if (a->kind == PTC_ARG_INTS && a->is.n != ndim)
        return ref_fail(k, "permute: number of dims don't match in permute");
    ref_ints(k, param, dims, PTC_MAX_DIMS);
    bool seen[PTC_MAX_DIMS] = {false};
    for (int i = 0; i < ndim; i++) {
        if (ref_dim(k, dims[i], ndim, &perm[i]))
            return -1;
        if (seen[perm[i]])
            return ref_fail(k, "permute: repeated dim %d", perm[i]);
        seen[perm[i]] = true;
    }
    return 0;
}

/* x sliced along d: [start, end) by step, with Python's clamping. */
static int sliced(const ptc_kctx *k, const ptc_tensor *x, int d, int64_t start, int64_t end,
                  int64_t step, ptc_tensor *v)
{
    if (step <= 0)
        return ref_fail(k, "slice step must be positive");
    int64_t size = x->sizes[d];
    if (start < 0)
        start += size;
    if (end < 0)
        end += size;
    start = start < 0 ? 0 : start > size ? size : start;
    end = end < start ? start : end > size ? size : end;
    *v = *x;
    v->storage = NULL;
    v->data = ref_at(x, start * x->strides[d]);
    v->sizes[d] = (end - start + step - 1) / step;
    v->strides[d] = x->strides[d] * step;
    return 0;
}

/* x without dim d, at position i of it. */
static ptc_tensor selected(const ptc_tensor *x, int d, int64_t i)
{
    ptc_tensor v = *x;
    v.storage = NULL;
    v.data = ref_at(x, i * x->strides[d]);
    for (int j = d; j + 1 < x->ndim; j++) {
        v.sizes[j] = x->sizes[j + 1];
        v.strides[j] = x->strides[j + 1];
    }
    v.ndim--;
    return v;
}

static int64_t opt_int(const ptc_kctx *k, const char *param, int64_t dflt)
{
    return ref_has(k, param) ? ref_int(k, param) : dflt;
}

/* The view a torch-level view op makes of x (into *v). */
static int torch_view(ptc_kctx *k, const ptc_tensor *x, ptc_tensor *v)
{
    ptc_op op = k->node->op;
    const ptc_tensor *out = &k->out[0];
    int d, perm[PTC_MAX_DIMS];
    switch (op) {
    case PTC_OP_PERMUTE:
        if (read_perm(k, "dims", x->ndim, perm))
            return -1;
        *v = permuted(x, perm);
        return 0;
    case PTC_OP_TRANSPOSE:
    case PTC_OP_T: {
        int d0 = 0, d1 = x->ndim > 1 ? 1 : 0;
        if (op == PTC_OP_TRANSPOSE && (ref_dim(k, ref_int(k, "dim0"), x->ndim, &d0) ||
                                       ref_dim(k, ref_int(k, "dim1"), x->ndim, &d1)))
            return -1;
        for (int i = 0; i < x->ndim; i++)
            perm[i] = i;
        if (x->ndim > 0)
            perm[d0] = d1, perm[d1] = d0;
        *v = permuted(x, perm);
        return 0;
    }
    case PTC_OP_EXPAND:
        if (out->ndim < x->ndim)
            return ref_fail(k, "expand: the number of sizes provided must be at least %d", x->ndim);
        for (int i = 0; i < x->ndim; i++) {
            int64_t s = x->sizes[i], t = out->sizes[out->ndim - x->ndim + i];
            if (s != t && s != 1)
                return ref_fail(k,
                                "The expanded size of the tensor (%lld) must match the existing "
                                "size (%lld) at non-singleton dimension %d",
                                (long long)t, (long long)s, out->ndim - x->ndim + i);
        }
        *v = ref_broadcast(x, out->ndim, out->sizes);
        return 0;
    case PTC_OP_SLICE:
        if (ref_dim(k, ref_int(k, "dim"), x->ndim, &d))
            return -1;
        if (x->ndim == 0)
            return ref_fail(k, "slice() cannot be applied to a 0-dim tensor.");
        return sliced(k, x, d, opt_int(k, "start", 0), opt_int(k, "end", INT64_MAX),
                      ref_int(k, "step"), v);
    case PTC_OP_NARROW: {
        if (ref_dim(k, ref_int(k, "dim"), x->ndim, &d))
            return -1;
        if (x->ndim == 0)
            return ref_fail(k, "narrow() cannot be applied to a 0-dim tensor.");
        int64_t start = ref_int(k, "start"), len = ref_int(k, "length");
        if (start < 0)
            start += x->sizes[d];
        if (start < 0 || len < 0 || start > x->sizes[d] - len)
            return ref_fail(k, "start (%lld) + length (%lld) exceeds dimension size (%lld).",
                            (long long)ref_int(k, "start"), (long long)len, (long long)x->sizes[d]);
        return sliced(k, x, d, start, start + len, 1, v);
    }
    case PTC_OP_SELECT: {
        if (ref_dim(k, ref_int(k, "dim"), x->ndim, &d))
            return -1;
        if (x->ndim == 0)
            return ref_fail(k, "select() cannot be applied to a 0-dim tensor.");
        int64_t i = ref_int(k, "index"), size = x->sizes[d];
        if (i < -size || i >= size)
            return ref_fail(k,
                            "select(): index %lld out of range for tensor of size %lld at "
                            "dimension %d",
                            (long long)i, (long long)size, d);
        *v = selected(x, d, i < 0 ? i + size : i);
        return 0;
    }
    default: /* view, reshape, flatten, squeeze, unsqueeze, contiguous, clone */
        *v = *x;
        return 0;
    }
}

int ptc_ref_shape(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor v;
    if (torch_view(k, x, &v))
        return -1;
    return copy_out(k, &k->out[0], &v);
}

/* ---- prims: broadcast_in_dim, reshape, permute, slice ---------------------------- */

static int broadcast_in_dim(const ptc_kctx *k, const ptc_tensor *x, const ptc_tensor *out,
                            ptc_tensor *v)
{
    int64_t bd[PTC_MAX_DIMS + 1];
    const ptc_arg *a = ref_arg(k, "broadcast_dimensions");
    if (a->kind != PTC_ARG_INTS || a->is.n != x->ndim)
        return ref_fail(k, "broadcast_in_dim: need one broadcast dimension per input dim");
    ref_ints(k, "broadcast_dimensions", bd, PTC_MAX_DIMS);
    *v = *out;
    v->data = x->data;
    v->dtype = x->dtype;
    for (int j = 0; j < out->ndim; j++)
        v->strides[j] = 0;
    for (int i = 0; i < x->ndim; i++) {
        int j = (int)bd[i];
        if (j < 0 || j >= out->ndim || (i > 0 && bd[i - 1] >= bd[i]))
            return ref_fail(k, "broadcast_in_dim: broadcast_dimensions must increase within the "
                               "output rank");
        if (x->sizes[i] != out->sizes[j] && x->sizes[i] != 1)
            return ref_fail(k, "broadcast_in_dim: input dim %d of size %lld cannot become %lld", i,
                            (long long)x->sizes[i], (long long)out->sizes[j]);
        v->strides[j] = x->sizes[i] == out->sizes[j] ? x->strides[i] : 0;
    }
    v->storage = NULL;
    return 0;
}

static int prim_slice(const ptc_kctx *k, const ptc_tensor *x, ptc_tensor *v)
{
    int64_t start[PTC_MAX_DIMS + 1], limit[PTC_MAX_DIMS + 1], step[PTC_MAX_DIMS + 1];
    int ns = ref_ints(k, "start_indices", start, PTC_MAX_DIMS);
    int nl = ref_ints(k, "limit_indices", limit, PTC_MAX_DIMS);
    int nt = ref_ints(k, "strides", step, PTC_MAX_DIMS);
    if (ns != x->ndim || nl != x->ndim || (nt != 0 && nt != x->ndim))
        return ref_fail(k, "prims.slice: expected %d start, limit and stride values", x->ndim);
    *v = *x;
    v->storage = NULL;
    for (int d = 0; d < x->ndim; d++) {
        int64_t s = nt ? step[d] : 1;
        if (start[d] < 0 || limit[d] < start[d] || limit[d] > x->sizes[d] || s <= 0)
            return ref_fail(k, "prims.slice: bad slice [%lld:%lld:%lld] of dim %d (size %lld)",
                            (long long)start[d], (long long)limit[d], (long long)s, d,
                            (long long)x->sizes[d]);
        v->data = ref_at(v, start[d] * x->strides[d]);
        v->sizes[d] = limit[d] > start[d] ? (limit[d] - start[d] - 1) / s + 1 : 0;
        v->strides[d] = x->strides[d] * s;
    }
    return 0;
}

int ptc_ref_prim_shape(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor *out = &k->out[0];
    ptc_tensor v = *x;
    int perm[PTC_MAX_DIMS];
    switch (k->node->op) {
    case PTC_OP_PRIMS_BROADCAST_IN_DIM:
        if (broadcast_in_dim(k, x, out, &v))
            return -1;
        break;
    case PTC_OP_PRIMS_PERMUTE:
        if (read_perm(k, "dims", x->ndim, perm))
            return -1;
        v = permuted(x, perm);
        break;
    case PTC_OP_PRIMS_SLICE:
        if (prim_slice(k, x, &v))
            return -1;
        break;
    default: /* prims.reshape */
        break;
    }
    return copy_out(k, out, &v);
}

/* ---- padding, repeat, roll --------------------------------------------------------- */

/* Shared by prims.pad and constant_pad_nd: per dim, low padding `lo` and
 * `interior` elements between neighbours; out-of-input positions get the
 * value. Negative low padding crops; the output's size sets the high side. */
static int pad_generic(const ptc_kctx *k, const ptc_tensor *x, const int64_t *lo,
                       const int64_t *interior, ref_scalar value)
{
    ptc_tensor *out = &k->out[0];
    if (out->ndim != x->ndim)
        return ref_fail(k, "internal: padding changes the rank");
    if (ptc_tensor_numel(out) == 0)
        return 0;
    double fv = ref_is_float(out->dtype) ? ref_scalar_as_f(value, out->dtype) : 0;
    int64_t iv = ref_is_float(out->dtype) ? 0 : ref_scalar_as_i(value, out->dtype);
    int64_t idx[PTC_MAX_DIMS] = {0}, src[PTC_MAX_DIMS], o = 0;
    do {
        bool inside = true;
        for (int d = 0; d < x->ndim && inside; d++) {
            int64_t t = idx[d] - lo[d], q = interior[d] + 1;
            inside = t >= 0 && t % q == 0 && t / q < x->sizes[d];
            src[d] = inside ? t / q : 0;
        }
        if (inside)
            ref_copy_elem(out, o, x, ref_offset(x, src));
        else if (ref_is_float(out->dtype))
            ref_stf(out, o, fv);
        else
            ref_sti(out, o, iv);
        o++;
    } while (ref_next(idx, out->sizes, out->ndim));
    return 0;
}

/* prims.pad: padding_config holds (lo, hi, interior) per dim, as
 * torch._prims.pad and XLA: `interior` values between neighbours, negative
 * lo/hi crop. */
int ptc_ref_prim_pad(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    int64_t cfg[3 * PTC_MAX_DIMS + 1], lo[PTC_MAX_DIMS], interior[PTC_MAX_DIMS];
    const ptc_arg *a = ref_arg(k, "padding_config");
    if (a->kind != PTC_ARG_INTS || a->is.n != 3 * x->ndim)
        return ref_fail(k, "prims.pad: padding_config needs (low, high, interior) per dim");
    ref_ints(k, "padding_config", cfg, 3 * PTC_MAX_DIMS);
    for (int d = 0; d < x->ndim; d++) {
        lo[d] = cfg[3 * d];
        interior[d] = cfg[3 * d + 2];
        if (interior[d] < 0)
            return ref_fail(k, "prims.pad: negative interior padding");
    }
    return pad_generic(k, x, lo, interior, ref_scalar_arg(k, ref_argi(k, "padding_value")));
}

int ptc_ref_constant_pad_nd(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    int64_t pad[2 * PTC_MAX_DIMS + 1], lo[PTC_MAX_DIMS] = {0}, interior[PTC_MAX_DIMS] = {0};
    const ptc_arg *a = ref_arg(k, "pad");
    if (a->kind != PTC_ARG_INTS || a->is.n % 2 || a->is.n > 2 * x->ndim)
        return ref_fail(k, "Padding length must be divisible by 2 and at most twice the rank");
    int n = ref_ints(k, "pad", pad, 2 * PTC_MAX_DIMS);
    for (int i = 0; i < n / 2; i++)
        lo[x->ndim - 1 - i] = pad[2 * i]; /* pairs start from the last dim */
    return pad_generic(k, x, lo, interior, ref_scalar_arg(k, ref_argi(k, "value")));
}

int ptc_ref_repeat(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor *out = &k->out[0];
    int shift = out->ndim - x->ndim;
    if (shift < 0)
        return ref_fail(k, "Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor");
    if (ptc_tensor_numel(out) == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, src[PTC_MAX_DIMS], o = 0;
    do {
        for (int d = 0; d < x->ndim; d++)
            src[d] = idx[d + shift] % x->sizes[d];
        ref_copy_elem(out, o++, x, ref_offset(x, src));
    } while (ref_next(idx, out->sizes, out->ndim));
    return 0;
}

static int64_t pymod(int64_t a, int64_t b)
{
    int64_t r = a % b;
    return r < 0 ? r + b : r;
}

/* roll: out[i] = x[i - shift] (mod size) per dim; with no dims, over the
 * flattened tensor. */
int ptc_ref_roll(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    ptc_tensor *out = &k->out[0];
    int64_t shifts[PTC_MAX_DIMS + 1], dims[PTC_MAX_DIMS + 1], dshift[PTC_MAX_DIMS] = {0};
    int ns = ref_ints(k, "shifts", shifts, PTC_MAX_DIMS);
    int nd = ref_ints(k, "dims", dims, PTC_MAX_DIMS);
    int64_t n = ptc_tensor_numel(x);
    if (nd == 0 && ns != 1)
        return ref_fail(k, "roll: shifts and dims must align. shifts: %d, dims: %d", ns, nd);
    if (nd != 0 && ns != nd)
        return ref_fail(k, "shifts and dimensions must align. shifts: %d, dims: %d", ns, nd);
    if (ref_out_like(k, 0, x))
        return -1;
    for (int i = 0; i < nd; i++) {
        int d;
        if (ref_dim(k, dims[i], x->ndim, &d))
            return -1;
        dshift[d] += shifts[i];
    }
    if (n == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0}, src[PTC_MAX_DIMS], o = 0;
    do {
        if (nd == 0) { /* flat: source flat index, decoded row-major */
            int64_t f = pymod(o - shifts[0], n);
            for (int d = x->ndim - 1; d >= 0; d--)
                src[d] = f % x->sizes[d], f /= x->sizes[d];
        } else {
            for (int d = 0; d < x->ndim; d++)
                src[d] = pymod(idx[d] - dshift[d], x->sizes[d]);
        }
        ref_copy_elem(out, o++, x, ref_offset(x, src));
    } while (ref_next(idx, x->sizes, x->ndim));
    return 0;
}

/* ---- cat, stack, split ------------------------------------------------------------- */

/* Copies v into out with v's dim d shifted by `start` (dtype converted). */
static void copy_into(ptc_tensor *out, const ptc_tensor *v, int d, int64_t start)
{
    if (ptc_tensor_numel(v) == 0)
        return;
    int64_t idx[PTC_MAX_DIMS] = {0};
    do {
        int64_t oidx[PTC_MAX_DIMS];
        memcpy(oidx, idx, sizeof oidx);
        oidx[d] += start;
        ref_convert_elem(out, ref_offset(out, oidx), v, ref_offset(v, idx));
    } while (ref_next(idx, v->sizes, v->ndim));
}

int ptc_ref_cat(ptc_kctx *k)
{
    const ptc_arg *a = &k->node->args[0];
    ptc_tensor *out = &k->out[0];
    bool stack = k->node->op == PTC_OP_STACK;
    int d;
    if (ref_dim(k, ref_int(k, "dim"), out->ndim, &d))
        return -1;
    int64_t start = 0;
    for (int i = 0; i < a->vs.n; i++) {
        ptc_tensor v = k->env[a->vs.v[i]->id];
        if (stack) { /* v with a size-1 dim inserted at d */
            memmove(v.sizes + d + 1, v.sizes + d, sizeof(int64_t) * (size_t)(v.ndim - d));
            memmove(v.strides + d + 1, v.strides + d, sizeof(int64_t) * (size_t)(v.ndim - d));
            v.sizes[d] = 1, v.strides[d] = 0, v.ndim++;
        }
        if (v.ndim == 1 && v.sizes[0] == 0 && out->ndim != 1)
            continue; /* torch's legacy rule: 1-d empty tensors are skipped */
        if (v.ndim != out->ndim)
            return ref_fail(k, "Tensors must have same number of dimensions: got %d and %d",
                            out->ndim, v.ndim);
        for (int j = 0; j < v.ndim; j++)
            if (j != d && v.sizes[j] != out->sizes[j])
                return ref_fail(k,
                                "Sizes of tensors must match except in dimension %d. Expected "
                                "size %lld but got size %lld for tensor number %d in the list.",
                                d, (long long)out->sizes[j], (long long)v.sizes[j], i);
        if (start + v.sizes[d] > out->sizes[d])
            return ref_fail(k, "internal: cat output too small");
        copy_into(out, &v, d, start);
        start += v.sizes[d];
    }
    if (start != out->sizes[d])
        return ref_fail(k, "internal: cat output size disagrees");
    return 0;
}

/* split, split_with_sizes, chunk: consecutive pieces sized by the outputs'
 * types; unbind: one piece per index, without the dim. */
int ptc_ref_split(ptc_kctx *k)
{
    const ptc_tensor *x = ptc_k_tensor(k, 0);
    int d;
    if (ref_dim(k, ref_int(k, "dim"), x->ndim, &d))
        return -1;
    if (x->ndim == 0)
        return ref_fail(k, "%s: cannot split a 0-dim tensor", ptc_op_name(k->node->op));
    int64_t start = 0;
    for (int i = 0; i < k->node->nout; i++) {
        ptc_tensor *out = &k->out[i], v;
        if (k->node->op == PTC_OP_UNBIND) {
            v = selected(x, d, i);
        } else {
            if (out->ndim != x->ndim)
                return ref_fail(k, "internal: split output %d has the wrong rank", i);
            if (sliced(k, x, d, start, start + out->sizes[d], 1, &v))
                return -1;
            start += out->sizes[d];
        }
        if (copy_out(k, out, &v))
            return -1;
    }
    if (k->node->op != PTC_OP_UNBIND ? start != x->sizes[d] : k->node->nout != x->sizes[d])
        return ref_fail(k, "internal: split outputs do not cover dim %d", d);
    return 0;
}
