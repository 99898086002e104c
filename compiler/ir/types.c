/* Dtypes, devices and tensor types.
 *
 * Promotion follows torch.promote_types: bool < integers < floats by category;
 * within integers the wider wins, except u8 with a signed type, which needs the
 * next signed width up; f16 with bf16 meets at f32.
 */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
    int kind;
} dtypes[] = {
#define X(id, name, size, kind) {name, size, kind},
    PTC_DTYPES(X)
#undef X
};
_Static_assert(sizeof dtypes / sizeof *dtypes == PTC_DTYPE_COUNT, "dtype table out of step");

const char *ptc_dtype_name(ptc_dtype t)
{
    if (t == PTC_DTYPE_NONE)
        return "none";
    return (unsigned)t < PTC_DTYPE_COUNT ? dtypes[t].name : "?";
}

int ptc_dtype_from_name(const char *name)
{
    for (int i = 0; i < PTC_DTYPE_COUNT; i++)
        if (strcmp(name, dtypes[i].name) == 0)
            return i;
    /* torch spellings, so users and tools can write either. */
    static const struct { const char *alias; ptc_dtype dt; } aliases[] = {
        {"uint8", PTC_U8},    {"int8", PTC_I8},       {"int16", PTC_I16},  {"short", PTC_I16},
        {"int32", PTC_I32},   {"int", PTC_I32},       {"int64", PTC_I64},  {"long", PTC_I64},
        {"float16", PTC_F16}, {"half", PTC_F16},      {"bfloat16", PTC_BF16},
        {"float32", PTC_F32}, {"float", PTC_F32},     {"float64", PTC_F64},
        {"double", PTC_F64},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (strcmp(name, aliases[i].alias) == 0)
            return aliases[i].dt;
    return -1;
}

size_t ptc_dtype_size(ptc_dtype t)
{
    PTC_ASSERT((unsigned)t < PTC_DTYPE_COUNT);
    return dtypes[t].size;
}

bool ptc_dtype_is_float(ptc_dtype t) { return (unsigned)t < PTC_DTYPE_COUNT && dtypes[t].kind == 3; }
bool ptc_dtype_is_int(ptc_dtype t)
{
    return (unsigned)t < PTC_DTYPE_COUNT && (dtypes[t].kind == 1 || dtypes[t].kind == 2);
}
bool ptc_dtype_is_bool(ptc_dtype t) { return t == PTC_BOOL; }

ptc_dtype ptc_dtype_promote(ptc_dtype a, ptc_dtype b)
{
    PTC_ASSERT((unsigned)a < PTC_DTYPE_COUNT && (unsigned)b < PTC_DTYPE_COUNT);
    if (a == b)
        return a;
    if (a == PTC_BOOL)
        return b;
    if (b == PTC_BOOL)
        return a;
    bool fa = ptc_dtype_is_float(a), fb = ptc_dtype_is_float(b);
    if (fa != fb)
        return fa ? a : b;
    if (fa) {
        if ((a == PTC_F16 && b == PTC_BF16) || (a == PTC_BF16 && b == PTC_F16))
            return PTC_F32;
        return dtypes[a].size >= dtypes[b].size ? a : b;
    }
    /* Both integral. */
    if (a == PTC_U8 || b == PTC_U8) {
        ptc_dtype other = a == PTC_U8 ? b : a; /* signed */
        return other == PTC_I8 ? PTC_I16 : other;
    }
    return dtypes[a].size >= dtypes[b].size ? a : b;
}

/* ---- devices --------------------------------------------------------------- */

bool ptc_device_eq(ptc_device a, ptc_device b)
{
    if (a.kind != b.kind)
        return false;
    return a.kind == PTC_DEV_CPU || a.index == b.index;
}

void ptc_device_str(ptc_device d, char *buf, size_t size)
{
    if (d.kind == PTC_DEV_CPU)
        snprintf(buf, size, "cpu");
    else if (d.index < 0)
        snprintf(buf, size, "cuda");
    else
        snprintf(buf, size, "cuda:%d", d.index);
}

int ptc_device_parse(const char *s, ptc_device *out)
{
    if (strcmp(s, "cpu") == 0) {
        *out = PTC_CPU;
        return 0;
    }
    if (strncmp(s, "cuda", 4) != 0)
        return -1;
    if (s[4] == 0) {
        *out = (ptc_device){PTC_DEV_CUDA, -1};
        return 0;
    }
    if (s[4] != ':' || s[5] < '0' || s[5] > '9')
        return -1;
    char *end;
    long idx = strtol(s + 5, &end, 10);
    if (*end || idx > 1024)
        return -1;
    *out = (ptc_device){PTC_DEV_CUDA, (int16_t)idx};
    return 0;
}

/* ---- tensor types ---------------------------------------------------------- */

ptc_ttype ptc_ttype_make(ptc_dtype dt, int ndim, const int64_t *sizes, ptc_device dev)
{
    PTC_ASSERT(ndim >= 0 && ndim <= PTC_MAX_DIMS);
    ptc_ttype t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = (int8_t)ndim;
    t.device = dev;
    for (int i = 0; i < ndim; i++)
        t.shape[i] = ptc_dim_c(sizes[i]);
    return t;
}

bool ptc_ttype_eq(const ptc_ttype *a, const ptc_ttype *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->layout != b->layout ||
        a->requires_grad != b->requires_grad || !ptc_device_eq(a->device, b->device))
        return false;
    for (int i = 0; i < a->ndim; i++) {
        if (!ptc_dim_eq(a->shape[i], b->shape[i]))
            return false;
        if (a->layout == PTC_LAYOUT_STRIDED && !ptc_dim_eq(a->strides[i], b->strides[i]))
            return false;
    }
    return true;
}

bool ptc_ttype_same_shape(const ptc_ttype *a, const ptc_ttype *b)
{
    bool same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++)
        same = ptc_dim_eq(a->shape[i], b->shape[i]);
    return same;
}

bool ptc_ttype_is_static(const ptc_ttype *t)
{
    for (int i = 0; i < t->ndim; i++)
        if (!ptc_dim_is_static(t->shape[i]) ||
            (t->layout == PTC_LAYOUT_STRIDED && !ptc_dim_is_static(t->strides[i])))
            return false;
    return true;
}

ptc_dim ptc_ttype_numel(ptc_arena *a, const ptc_ttype *t)
{
    ptc_dim n = ptc_dim_c(1);
    for (int i = 0; i < t->ndim; i++)
        n = ptc_dim_mul(a, n, t->shape[i]);
    return n;
}

void ptc_ttype_contiguous_strides(ptc_arena *a, const ptc_ttype *t, ptc_dim *strides)
{
    ptc_dim s = ptc_dim_c(1);
    for (int i = t->ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s = ptc_dim_mul(a, s, t->shape[i]);
    }
}

void ptc_ttype_print(ptc_buf *b, const ptc_ttype *t, bool full)
{
    /* A rank out of range (a broken graph the verifier is describing) prints
     * what fits rather than reading past the arrays. */
    int ndim = t->ndim < 0 ? 0 : t->ndim > PTC_MAX_DIMS ? PTC_MAX_DIMS : t->ndim;
    ptc_buf_puts(b, ptc_dtype_name(t->dtype));
    ptc_buf_putc(b, '[');
    for (int i = 0; i < ndim; i++) {
        if (i)
            ptc_buf_putc(b, ',');
        ptc_dim_print(b, t->shape[i]);
    }
    ptc_buf_putc(b, ']');
    if (t->layout == PTC_LAYOUT_STRIDED) {
        ptc_buf_putc(b, '{');
        for (int i = 0; i < ndim; i++) {
            if (i)
                ptc_buf_putc(b, ',');
            ptc_dim_print(b, t->strides[i]);
        }
        ptc_buf_putc(b, '}');
    }
    if (full) {
        char dev[32];
        ptc_device_str(t->device, dev, sizeof dev);
        ptc_buf_printf(b, " %s", dev);
        if (t->requires_grad)
            ptc_buf_puts(b, " grad");
    }
}
