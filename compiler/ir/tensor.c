/* Runtime tensors: strided views over reference-counted storage, scalar
 * conversions (f16/bf16 round to nearest even, float -> int like torch's
 * .to()), copies, and the .bin tensor file format.
 *
 * The file format is deliberately dumb: a header per tensor and the elements in
 * row-major order, then a hash of everything, so truncation and corruption are
 * detected rather than loaded (CRC-32, so Python's zlib can write them fast).
 */
#include "ir/ir.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- half precision -------------------------------------------------------- */

float ptc_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t ptc_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 | ((absx >> 13) & 0x3ff) : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* below the smallest normal f16: subnormal or zero */
        if (absx < 0x33000000u) /* < 2^-25: rounds to zero */
            return (uint16_t)sign;
        /* value = mant * 2^(e-150); in units of the f16 subnormal step 2^-24
         * that is mant >> (126 - e), rounded to nearest even. */
        int e = (int)(absx >> 23);
        uint32_t mant = (absx & 0x7fffff) | 0x800000;
        int s = 126 - e;
        uint32_t q = mant >> s, r = mant & ((1u << s) - 1), half = 1u << (s - 1);
        if (r > half || (r == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t e = ((absx >> 23) - 127 + 15), mant = absx & 0x7fffff;
    uint32_t h = (e << 10) | (mant >> 13), r = mant & 0x1fff;
    if (r > 0x1000 || (r == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

float ptc_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t ptc_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* ---- scalar load/store ----------------------------------------------------- */

double ptc_load_f64(const void *p, ptc_dtype dt)
{
    switch (dt) {
    case PTC_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    case PTC_U8: return *(const uint8_t *)p;
    case PTC_I8: return *(const int8_t *)p;
    case PTC_I16: return *(const int16_t *)p;
    case PTC_I32: return *(const int32_t *)p;
    case PTC_I64: return (double)*(const int64_t *)p;
    case PTC_F16: return ptc_f16_to_f32(*(const uint16_t *)p);
    case PTC_BF16: return ptc_bf16_to_f32(*(const uint16_t *)p);
    case PTC_F32: return *(const float *)p;
    case PTC_F64: return *(const double *)p;
    default: PTC_ASSERT(!"bad dtype");
    }
    return 0;
}

int64_t ptc_load_i64(const void *p, ptc_dtype dt)
{
    switch (dt) {
    case PTC_BOOL: return *(const uint8_t *)p != 0;
    case PTC_U8: return *(const uint8_t *)p;
    case PTC_I8: return *(const int8_t *)p;
    case PTC_I16: return *(const int16_t *)p;
    case PTC_I32: return *(const int32_t *)p;
    case PTC_I64: return *(const int64_t *)p;
    default: {
        double v = ptc_load_f64(p, dt);
        if (isnan(v) || v >= 9.2233720368547758e18 || v < -9.2233720368547758e18)
            return INT64_MIN;
        return (int64_t)v;
    }
    }
}

void ptc_store_i64(void *p, ptc_dtype dt, int64_t v)
{
    switch (dt) {
    case PTC_BOOL: *(uint8_t *)p = v != 0; break;
    case PTC_U8: *(uint8_t *)p = (uint8_t)(uint64_t)v; break;
    case PTC_I8: *(int8_t *)p = (int8_t)(uint64_t)v; break;
    case PTC_I16: *(int16_t *)p = (int16_t)(uint64_t)v; break;
    case PTC_I32: *(int32_t *)p = (int32_t)(uint64_t)v; break;
    case PTC_I64: *(int64_t *)p = v; break;
    default: ptc_store_f64(p, dt, (double)v); break;
    }
}

void ptc_store_f64(void *p, ptc_dtype dt, double v)
{
    switch (dt) {
    case PTC_BOOL: *(uint8_t *)p = v != 0; break; /* nan != 0: true, as torch */
    case PTC_F16: *(uint16_t *)p = ptc_f32_to_f16((float)v); break;
    case PTC_BF16: *(uint16_t *)p = ptc_f32_to_bf16((float)v); break;
    case PTC_F32: *(float *)p = (float)v; break;
    case PTC_F64: *(double *)p = v; break;
    default: {
        /* float -> int truncates toward zero; out of range is undefined in C,
         * so saturate through int64 and wrap to the width, as x86 torch does. */
        int64_t i;
        if (isnan(v) || v >= 9.2233720368547758e18 || v < -9.2233720368547758e18)
            i = INT64_MIN;
        else
            i = (int64_t)v;
        ptc_store_i64(p, dt, i);
    }
    }
}

/* ---- tensors --------------------------------------------------------------- */

static int64_t numel_of(int ndim, const int64_t *sizes)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= sizes[i];
    return n;
}

int ptc_tensor_alloc(ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes, ptc_error *err)
{
    memset(t, 0, sizeof *t);
    if (ndim < 0 || ndim > PTC_MAX_DIMS)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "tensor", "rank %d exceeds %d", ndim, PTC_MAX_DIMS);
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (sizes[i] < 0)
            return ptc_errorf(err, PTC_ERR_RUNTIME, "tensor", "negative size %lld",
                              (long long)sizes[i]);
        if (sizes[i] && n > (UINT64_MAX >> 8) / (uint64_t)sizes[i])
            return ptc_errorf(err, PTC_ERR_RUNTIME, "tensor", "tensor too large");
        n *= (uint64_t)sizes[i];
    }
    size_t nbytes = (size_t)n * ptc_dtype_size(dt);
    ptc_storage *s = calloc(1, sizeof *s);
    void *data = calloc(nbytes ? nbytes : 1, 1);
    if (!s || !data) {
        free(s);
        free(data);
        return ptc_errorf(err, PTC_ERR_RUNTIME, "tensor", "out of memory allocating %zu bytes",
                          nbytes);
    }
    s->refs = 1;
    s->data = data;
    s->nbytes = nbytes;
    t->dtype = dt;
    t->ndim = ndim;
    t->device = PTC_CPU;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t->sizes[i] = sizes[i];
        t->strides[i] = stride;
        stride *= sizes[i] > 0 ? sizes[i] : 1;
    }
    t->data = data;
    t->storage = s;
    return 0;
}

ptc_tensor ptc_tensor_borrow(void *data, ptc_dtype dt, int ndim, const int64_t *sizes,
                             const int64_t *strides)
{
    ptc_tensor t;
    memset(&t, 0, sizeof t);
    PTC_ASSERT(ndim >= 0 && ndim <= PTC_MAX_DIMS);
    t.dtype = dt;
    t.ndim = ndim;
    t.device = PTC_CPU;
    t.data = data;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.sizes[i] = sizes[i];
        t.strides[i] = strides ? strides[i] : stride;
        stride *= sizes[i] > 0 ? sizes[i] : 1;
    }
    return t;
}

void ptc_tensor_retain(ptc_tensor *t)
{
    if (t->storage)
        t->storage->refs++;
}

void ptc_tensor_release(ptc_tensor *t)
{
    ptc_storage *s = t->storage;
    if (s && --s->refs == 0) {
        if (s->release) {
            s->release(s);
        } else {
            free(s->data);
            free(s);
        }
    }
    memset(t, 0, sizeof *t);
}

int64_t ptc_tensor_numel(const ptc_tensor *t) { return numel_of(t->ndim, t->sizes); }

bool ptc_tensor_is_contiguous(const ptc_tensor *t)
{
    int64_t stride = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->sizes[i] != 1 && t->strides[i] != stride)
            return false;
        stride *= t->sizes[i];
    }
    return true;
}

bool ptc_tensor_is_dense(const ptc_tensor *t)
{
    /* the dims of size > 1, innermost (smallest stride) first, each must
       step over exactly the ones inside it */
    int order[PTC_MAX_DIMS], n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->sizes[d] == 0)
            return true;
        if (t->sizes[d] == 1)
            continue;
        int at = n++;
        for (; at > 0 && t->strides[order[at - 1]] > t->strides[d]; at--)
            order[at] = order[at - 1];
        order[at] = d;
    }
    int64_t stride = 1;
    for (int k = 0; k < n; k++) {
        if (t->strides[order[k]] != stride)
            return false;
        stride *= t->sizes[order[k]];
    }
    return true;
}

static void *elem_ptr(const ptc_tensor *t, const int64_t *idx)
{
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++)
        off += idx[i] * t->strides[i];
    return (char *)t->data + off * (int64_t)ptc_dtype_size(t->dtype);
}

double ptc_tensor_get_f64(const ptc_tensor *t, const int64_t *idx)
{
    return ptc_load_f64(elem_ptr(t, idx), t->dtype);
}
void ptc_tensor_set_f64(ptc_tensor *t, const int64_t *idx, double v)
{
    ptc_store_f64(elem_ptr(t, idx), t->dtype, v);
}
int64_t ptc_tensor_get_i64(const ptc_tensor *t, const int64_t *idx)
{
    return ptc_load_i64(elem_ptr(t, idx), t->dtype);
}
void ptc_tensor_set_i64(ptc_tensor *t, const int64_t *idx, int64_t v)
{
    ptc_store_i64(elem_ptr(t, idx), t->dtype, v);
}

/* Advances a row-major multi-index; false after the last element. */
static bool next_index(int64_t *idx, const int64_t *sizes, int ndim)
{
    for (int i = ndim - 1; i >= 0; i--) {
        if (++idx[i] < sizes[i])
            return true;
        idx[i] = 0;
    }
    return false;
}

/* A same-dtype copy a line (the last dimension) at a time, the offsets of
 * each line computed once: one memcpy per line where both are contiguous
 * along it. Element by element, with offsets from every index, a 2000x256
 * weight's copy took ~10 ms (a compiled backward's scatter_add starts so). */
static void copy_lines(ptc_tensor *dst, const ptc_tensor *src)
{
    int last = src->ndim - 1;
    int64_t len = src->sizes[last], total = ptc_tensor_numel(src);
    int64_t ds = dst->strides[last], ss = src->strides[last];
    int64_t es = (int64_t)ptc_dtype_size(src->dtype), idx[PTC_MAX_DIMS] = {0};
    for (int64_t done = 0; done < total; done += len) {
        char *d = elem_ptr(dst, idx);
        const char *s = elem_ptr(src, idx);
        if (ds == 1 && ss == 1)
            memcpy(d, s, (size_t)(len * es));
        else
            for (int64_t k = 0; k < len; k++)
                memcpy(d + k * ds * es, s + k * ss * es, (size_t)es);
        next_index(idx, src->sizes, last);
    }
}

int ptc_tensor_copy(ptc_tensor *dst, const ptc_tensor *src, ptc_error *err)
{
    if (dst->ndim != src->ndim)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "tensor", "copy between ranks %d and %d",
                          src->ndim, dst->ndim);
    for (int i = 0; i < src->ndim; i++)
        if (dst->sizes[i] != src->sizes[i])
            return ptc_errorf(err, PTC_ERR_RUNTIME, "tensor", "copy between sizes differing in dim %d",
                              i);
    if (ptc_tensor_numel(src) == 0)
        return 0;
    int64_t idx[PTC_MAX_DIMS] = {0};
    size_t es = ptc_dtype_size(src->dtype);
    bool same = src->dtype == dst->dtype;
    if (same && src->ndim > 0) {
        copy_lines(dst, src);
        return 0;
    }
    bool exact_int = !ptc_dtype_is_float(src->dtype) && !ptc_dtype_is_float(dst->dtype);
    do {
        void *d = elem_ptr(dst, idx);
        const void *s = elem_ptr(src, idx);
        if (same)
            memcpy(d, s, es);
        else if (exact_int)
            ptc_store_i64(d, dst->dtype, ptc_load_i64(s, src->dtype));
        else
            ptc_store_f64(d, dst->dtype, ptc_load_f64(s, src->dtype));
    } while (next_index(idx, src->sizes, src->ndim));
    return 0;
}

int ptc_tensor_alloc_strided(ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                             const int64_t *strides, ptc_error *err)
{
    memset(t, 0, sizeof *t);
    int64_t extent = 1; /* elements the layout spans */
    for (int d = 0; d < ndim; d++) {
        int64_t span;
        if (strides[d] < 0)
            return ptc_errorf(err, PTC_ERR_RUNTIME, "tensor", "negative stride %lld in dim %d",
                              (long long)strides[d], d);
        if (sizes[d] == 0)
            extent = 0;
        if (extent && (__builtin_mul_overflow(sizes[d] - 1, strides[d], &span) ||
                       __builtin_add_overflow(extent, span, &extent)))
            return ptc_errorf(err, PTC_ERR_RUNTIME, "tensor", "tensor too large");
    }
    if (ptc_tensor_alloc(t, dt, 1, &extent, err))
        return -1;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        t->sizes[d] = sizes[d];
        t->strides[d] = strides[d];
    }
    return 0;
}

/* Did the copy into an aliasing layout keep every element of src? */
static bool copy_kept_all(const ptc_tensor *copy, const ptc_tensor *src)
{
    int64_t idx[PTC_MAX_DIMS] = {0};
    size_t es = ptc_dtype_size(src->dtype);
    do
        if (memcmp(elem_ptr(copy, idx), elem_ptr(src, idx), es) != 0)
            return false;
    while (next_index(idx, src->sizes, src->ndim));
    return true;
}

/* Sorted by stride, does each dim start past the span of the smaller ones?
 * (Sufficient, not necessary, for no two indices to share an element.) */
static bool surely_distinct(int ndim, const int64_t *sizes, const int64_t *strides)
{
    int order[PTC_MAX_DIMS], n = 0;
    for (int d = 0; d < ndim; d++)
        if (sizes[d] > 1)
            order[n++] = d;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strides[order[j - 1]] > strides[order[j]]; j--) {
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    int64_t span = 0; /* largest offset of the dims so far */
    for (int i = 0; i < n; i++) {
        int64_t s = strides[order[i]];
        if (s <= span)
            return false;
        span += (sizes[order[i]] - 1) * s; /* bounded: alloc_strided checked the extent */
    }
    return true;
}

int ptc_tensor_conform(const ptc_tensor *t, const int64_t *strides, ptc_tensor *out,
                       const char *what, ptc_error *err)
{
    memset(out, 0, sizeof *out);
    bool same = true;
    for (int d = 0; d < t->ndim; d++)
        same &= t->sizes[d] <= 1 || t->strides[d] == strides[d];
    if (same || ptc_tensor_numel(t) == 0)
        return 0;
    ptc_error why;
    if (ptc_tensor_alloc_strided(out, t->dtype, t->ndim, t->sizes, strides, &why) ||
        ptc_tensor_copy(out, t, &why)) {
        ptc_tensor_release(out);
        return ptc_errorf(err, PTC_ERR_RUNTIME, "inputs", "%s: cannot take its declared layout: %s",
                          what, why.msg);
    }
    if (!surely_distinct(t->ndim, t->sizes, strides) && !copy_kept_all(out, t)) {
        ptc_tensor_release(out);
        return ptc_errorf(err, PTC_ERR_RUNTIME, "inputs",
                          "%s: its declared strides make elements share memory (as an expand "
                          "does), and its values differ where they do: pass a tensor with those "
                          "strides",
                          what);
    }
    return 0;
}

int ptc_tensor_check_type(const ptc_tensor *t, const ptc_ttype *ty, ptc_bindings *b,
                          const char *what, ptc_error *err)
{
    if (t->dtype != ty->dtype)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "inputs", "%s: expected dtype %s, got %s", what,
                          ptc_dtype_name(ty->dtype), ptc_dtype_name(t->dtype));
    if (t->ndim != ty->ndim)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "inputs", "%s: expected %d dims, got %d", what,
                          ty->ndim, t->ndim);
    for (int i = 0; i < t->ndim; i++) {
        ptc_dim d = ty->shape[i];
        const char *name;
        int64_t bound, value;
        if (ptc_dim_binds_given(d, b, &name, t->sizes[i], &value) &&
            !ptc_bindings_get(b, name, &bound)) {
            if (ptc_bindings_set(b, name, value))
                return ptc_errorf(err, PTC_ERR_RUNTIME, "inputs", "too many symbols");
        }
        int64_t want;
        ptc_error tmp;
        if (ptc_dim_eval(d, b, &want, &tmp))
            continue; /* over a symbol a later input binds: the caller's next pass */
        if (want != t->sizes[i]) {
            ptc_buf pb = {0};
            ptc_dim_print(&pb, d);
            ptc_errorf(err, PTC_ERR_RUNTIME, "inputs", "%s: dim %d is %lld, expected %s (= %lld)",
                       what, i, (long long)t->sizes[i], pb.data, (long long)want);
            ptc_buf_free(&pb);
            return -1;
        }
    }
    return 0;
}

void ptc_tensor_fill_random(ptc_tensor *t, uint64_t seed)
{
    int64_t idx[PTC_MAX_DIMS] = {0};
    if (ptc_tensor_numel(t) == 0)
        return;
    uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
    do {
        state += 0x9e3779b97f4a7c15ULL;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        double u = (double)(z >> 11) * (1.0 / 9007199254740992.0); /* [0,1) */
        void *p = elem_ptr(t, idx);
        if (ptc_dtype_is_float(t->dtype))
            ptc_store_f64(p, t->dtype, u * 4.0 - 2.0);
        else if (t->dtype == PTC_BOOL)
            ptc_store_i64(p, t->dtype, u < 0.5);
        else if (t->dtype == PTC_U8)
            ptc_store_i64(p, t->dtype, (int64_t)(u * 8));
        else
            ptc_store_i64(p, t->dtype, (int64_t)(u * 16) - 8);
    } while (next_index(idx, t->sizes, t->ndim));
}

/* ---- tensor files ---------------------------------------------------------- */

/* Strides that lay the elements out densely in some dim order (a transposed
 * or channels-last tensor): the file keeps them so inputs keep their layout. */
static bool dense_layout(int ndim, const int64_t *sizes, const int64_t *strides)
{
    int order[PTC_MAX_DIMS], n = 0;
    for (int d = 0; d < ndim; d++)
        if (sizes[d] != 1)
            order[n++] = d;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strides[order[j - 1]] > strides[order[j]]; j--) {
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    int64_t expect = 1;
    for (int i = 0; i < n; i++) {
        if (strides[order[i]] != expect)
            return false;
        expect *= sizes[order[i]];
    }
    return true;
}

static int restore_layout(ptc_tensor *t, const int64_t *strides, ptc_error *err)
{
    ptc_tensor recorded = ptc_tensor_borrow(NULL, t->dtype, t->ndim, t->sizes, strides);
    if (ptc_tensor_numel(t) <= 1 || !dense_layout(t->ndim, t->sizes, strides) ||
        ptc_tensor_is_contiguous(&recorded)) /* before allocating: most tensors are */
        return 0;
    ptc_tensor dst;
    if (ptc_tensor_alloc(&dst, t->dtype, t->ndim, t->sizes, err))
        return -1;
    for (int d = 0; d < t->ndim; d++)
        dst.strides[d] = strides[d];
    ptc_tensor_copy(&dst, t, err);
    ptc_tensor_release(t);
    *t = dst;
    return 0;
}

static void put_u32(ptc_buf *b, uint32_t v) { ptc_buf_putn(b, (const char *)&v, 4); }
static void put_u64(ptc_buf *b, uint64_t v) { ptc_buf_putn(b, (const char *)&v, 8); }

int ptc_tensorfile_write(const char *path, const ptc_tensor *tensors, const char *const *names,
                         int n, ptc_error *err)
{
    ptc_buf b = {0};
    ptc_buf_putn(&b, "PTCT", 4);
    put_u32(&b, 1);
    put_u32(&b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        const ptc_tensor *t = &tensors[i];
        const char *name = names && names[i] ? names[i] : "";
        put_u32(&b, (uint32_t)strlen(name));
        ptc_buf_puts(&b, name);
        unsigned char hdr[4] = {(unsigned char)t->dtype, (unsigned char)t->ndim, 0, 0};
        ptc_buf_putn(&b, (const char *)hdr, 4);
        for (int d = 0; d < t->ndim; d++)
            put_u64(&b, (uint64_t)t->sizes[d]);
        for (int d = 0; d < t->ndim; d++)
            put_u64(&b, (uint64_t)t->strides[d]);
        size_t es = ptc_dtype_size(t->dtype);
        int64_t numel = ptc_tensor_numel(t);
        put_u64(&b, (uint64_t)numel * es);
        if (numel > 0) {
            int64_t idx[PTC_MAX_DIMS] = {0};
            do
                ptc_buf_putn(&b, elem_ptr(t, idx), es);
            while (next_index(idx, t->sizes, t->ndim));
        }
    }
    put_u32(&b, ptc_crc32(0, b.data, b.len));
    int rc = ptc_write_file(path, b.data, b.len, err);
    ptc_buf_free(&b);
    return rc;
}

typedef struct rd {
    const unsigned char *p, *end;
} rd;

static bool take(rd *r, void *out, size_t n)
{
    if ((size_t)(r->end - r->p) < n)
        return false;
    memcpy(out, r->p, n);
    r->p += n;
    return true;
}

/* Version 2 starts each tensor's bytes at a multiple of this from the file's
 * start, so a mapped file's tensors can be used where they lie. */
enum { TENSORFILE_ALIGN = 64 };

/* Tensor i's bytes at r: borrowed from backing (one more reference on it)
 * when there is one and they are aligned, else copied into a tensor of its
 * own; then given the layout the file recorded. */
static int tensor_at(rd *r, ptc_storage *backing, const unsigned char hdr[4], const int64_t *sizes,
                     const int64_t *strides, uint64_t nbytes, ptc_tensor *t, ptc_error *err)
{
    ptc_dtype dt = (ptc_dtype)hdr[0];
    if (backing && (uintptr_t)r->p % TENSORFILE_ALIGN == 0) {
        *t = ptc_tensor_borrow((void *)r->p, dt, hdr[1], sizes, NULL);
        t->storage = backing;
        backing->refs++;
    } else if (ptc_tensor_alloc(t, dt, hdr[1], sizes, err)) {
        return -1;
    } else {
        memcpy(t->data, r->p, nbytes);
    }
    r->p += nbytes;
    return restore_layout(t, strides, err);
}

/* The bytes a tensor of these sizes holds; 0 with *ok false on overflow. */
static uint64_t tensor_bytes(ptc_dtype dt, int ndim, const int64_t *sizes, bool *ok)
{
    uint64_t n = ptc_dtype_size(dt);
    *ok = true;
    for (int d = 0; d < ndim; d++)
        *ok = *ok && !__builtin_mul_overflow(n, (uint64_t)sizes[d], &n);
    return *ok ? n : 0;
}

/* The tensors of the file's bytes data[len]. Without backing the trailing
 * CRC is checked and every tensor is copied; with it (a mapped file whose
 * bytes the caller has verified) aligned tensors are used in place. */
static int parse_tensors(const char *data, size_t len, ptc_storage *backing, const char *path,
                         ptc_tensorfile *out, ptc_error *err)
{
    memset(out, 0, sizeof *out);
#define BAD(...)                                                                                   \
    do {                                                                                           \
        ptc_errorf(err, PTC_ERR_PARSE, "inputs", __VA_ARGS__);                                     \
        ptc_error_at(err, path, 0, 0);                                                             \
        goto fail;                                                                                 \
    } while (0)
    rd r = {(const unsigned char *)data, (const unsigned char *)data + len};
    char magic[4];
    uint32_t version, count;
    if (len < 16 || !take(&r, magic, 4) || memcmp(magic, "PTCT", 4) != 0)
        BAD("not a ptc tensor file (bad magic)");
    uint32_t stored;
    memcpy(&stored, data + len - 4, 4);
    if (!backing && stored != ptc_crc32(0, data, len - 4))
        BAD("tensor file is truncated or corrupt (checksum mismatch)");
    r.end -= 4;
    if (!take(&r, &version, 4) || (version != 1 && version != 2))
        BAD("unsupported tensor file version");
    if (!take(&r, &count, 4) || count > 100000)
        BAD("bad tensor count");
    out->names = calloc(count + 1, sizeof(char *));
    out->tensors = calloc(count + 1, sizeof(ptc_tensor));
    if (!out->names || !out->tensors)
        BAD("out of memory");
    for (uint32_t i = 0; i < count; i++) {
        uint32_t nlen;
        unsigned char hdr[4];
        if (!take(&r, &nlen, 4) || nlen > 4096 || (size_t)(r.end - r.p) < nlen)
            BAD("tensor %u: bad name", i);
        out->names[i] = malloc(nlen + 1);
        if (!out->names[i])
            BAD("out of memory");
        take(&r, out->names[i], nlen);
        out->names[i][nlen] = 0;
        out->n = (int)i + 1;
        if (!take(&r, hdr, 4) || hdr[0] >= PTC_DTYPE_COUNT || hdr[1] > PTC_MAX_DIMS)
            BAD("tensor %u: bad dtype or rank", i);
        int64_t sizes[PTC_MAX_DIMS], strides[PTC_MAX_DIMS];
        for (int d = 0; d < hdr[1]; d++)
            if (!take(&r, &sizes[d], 8) || sizes[d] < 0 || sizes[d] > ((int64_t)1 << 40))
                BAD("tensor %u: bad size", i);
        for (int d = 0; d < hdr[1]; d++)
            if (!take(&r, &strides[d], 8))
                BAD("tensor %u: bad strides", i);
        uint64_t nbytes;
        if (!take(&r, &nbytes, 8))
            BAD("tensor %u: truncated", i);
        size_t at = (size_t)(r.p - (const unsigned char *)data);
        size_t pad = version == 2 ? -at & (TENSORFILE_ALIGN - 1) : 0;
        bool ok;
        uint64_t want = tensor_bytes((ptc_dtype)hdr[0], hdr[1], sizes, &ok);
        if (!ok || nbytes != want)
            BAD("tensor %u: %llu data bytes, expected %llu", i, (unsigned long long)nbytes,
                (unsigned long long)want);
        if ((uint64_t)(r.end - r.p) < pad + nbytes)
            BAD("tensor %u: truncated", i);
        r.p += pad;
        if (tensor_at(&r, backing, hdr, sizes, strides, nbytes, &out->tensors[i], err))
            goto fail;
    }
    if (r.p != r.end)
        BAD("trailing bytes after %u tensors", count);
    return 0;
fail:
    ptc_tensorfile_free(out);
    return -1;
#undef BAD
}

int ptc_tensorfile_read(const char *path, ptc_tensorfile *out, ptc_error *err)
{
    memset(out, 0, sizeof *out);
    size_t len;
    char *data = ptc_read_file(path, &len, err);
    if (!data)
        return -1;
    int rc = parse_tensors(data, len, NULL, path, out, err);
    free(data);
    return rc;
}

int ptc_tensorfile_parse_mapped(ptc_storage *file, const char *path, ptc_tensorfile *out,
                                ptc_error *err)
{
    return parse_tensors(file->data, file->nbytes, file, path, out, err);
}

void ptc_tensorfile_free(ptc_tensorfile *f)
{
    for (int i = 0; i < f->n; i++) {
        free(f->names[i]);
        ptc_tensor_release(&f->tensors[i]);
    }
    free(f->names);
    free(f->tensors);
    memset(f, 0, sizeof *f);
}
