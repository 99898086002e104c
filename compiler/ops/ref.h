/* ref.h: internal to compiler/ops: what the reference kernels (ref_*.c) share
 * with each other and with the interpreter (interp.c). Not included from other
 * modules: they reach the kernels through ptc_interp_run.
 *
 * A kernel receives a ptc_kctx whose node's outputs are already allocated
 * (contiguous, zeroed, sized by the node's types under the run's bindings). It
 * reads its arguments through the helpers below, writes the outputs and
 * returns 0, or fails with ref_fail (the interpreter adds the node).
 */
#ifndef PTC_OPS_REF_H
#define PTC_OPS_REF_H

#include "ops/ops.h"

/* Every name of ops.def's ref column, exported with the ptc_ prefix. */
#define OP(id, stage, schema, meta, ref, flags, ...) int ptc_##ref(ptc_kctx *k);
#include "ir/ops.def"
#undef OP

/* Fails the kernel with a RuntimeError message (torch's wording where torch
 * has one). Returns -1. */
int ref_fail(const ptc_kctx *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- arguments, by schema param name ------------------------------------- */

int ref_argi(const ptc_kctx *k, const char *param); /* asserts the param exists */
const ptc_arg *ref_arg(const ptc_kctx *k, const char *param);
bool ref_has(const ptc_kctx *k, const char *param);                 /* present and not None */
const ptc_tensor *ref_tensor(const ptc_kctx *k, const char *param); /* NULL if None */
int64_t ref_int(const ptc_kctx *k, const char *param);
double ref_float(const ptc_kctx *k, const char *param); /* FLOAT/INT/BOOL as double */
bool ref_bool(const ptc_kctx *k, const char *param);
/* An int list evaluated under the bindings; returns its length (<= max). */
int ref_ints(const ptc_kctx *k, const char *param, int64_t *out, int max);
/* A Python number (Scalar or the scalar form of Tensor|Scalar). */
typedef struct ref_scalar {
    bool is_float; /* a Python float (else int or bool) */
    double f;      /* its value as double */
    int64_t i;     /* exact value when !is_float */
} ref_scalar;
ref_scalar ref_scalar_arg(const ptc_kctx *k, int argi);

/* ---- dtypes and conversions ---------------------------------------------- */

/* Compute domains: every kernel computes either in int64 (wrapped to the
 * dtype's width at the store, which is what the dtype's own two's-complement
 * arithmetic gives) or in floating point. */
static inline bool ref_is_float(ptc_dtype dt)
{
    return ptc_dtype_is_float(dt);
}
/* Wraps v to integer dtype dt's width (bool: v != 0). */
int64_t ref_wrap(int64_t v, ptc_dtype dt);
/* Loads element p of dtype src converted to dtype dst, as torch's .to(dst):
 * exact for ints, float -> int truncates, int -> float rounds once. */
double ref_load_as_f(const void *p, ptc_dtype src, ptc_dtype dst);
int64_t ref_load_as_i(const void *p, ptc_dtype src, ptc_dtype dst);
/* A scalar converted to dtype dt like torch converts a Python number. */
double ref_scalar_as_f(ref_scalar s, ptc_dtype dt);
int64_t ref_scalar_as_i(ref_scalar s, ptc_dtype dt);

/* ---- strided access ------------------------------------------------------- */

static inline int64_t ref_offset(const ptc_tensor *t, const int64_t *idx)
{
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++)
        off += idx[i] * t->strides[i];
    return off;
}
static inline void *ref_at(const ptc_tensor *t, int64_t off)
{
    return (char *)t->data + off * (int64_t)ptc_dtype_size(t->dtype);
}
static inline double ref_ldf(const ptc_tensor *t, int64_t off)
{
    return ptc_load_f64(ref_at(t, off), t->dtype);
}
static inline int64_t ref_ldi(const ptc_tensor *t, int64_t off)
{
    return ptc_load_i64(ref_at(t, off), t->dtype);
}
static inline void ref_stf(ptc_tensor *t, int64_t off, double v)
{
    ptc_store_f64(ref_at(t, off), t->dtype, v);
}
static inline void ref_sti(ptc_tensor *t, int64_t off, int64_t v)
{
    ptc_store_i64(ref_at(t, off), t->dtype, v);
}
/* Copies one element between tensors of the same dtype. */
void ref_copy_elem(ptc_tensor *dst, int64_t doff, const ptc_tensor *src, int64_t soff);
/* Copies one element converting src's dtype to dst's (torch's .to()). */
void ref_convert_elem(ptc_tensor *dst, int64_t doff, const ptc_tensor *src, int64_t soff);

/* Advances a row-major multi-index over sizes; false after the last one. */
static inline bool ref_next(int64_t *idx, const int64_t *sizes, int ndim)
{
    for (int i = ndim - 1; i >= 0; i--) {
        if (++idx[i] < sizes[i])
            return true;
        idx[i] = 0;
    }
    return false;
}
static inline int64_t ref_numel(int ndim, const int64_t *sizes)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= sizes[i];
    return n;
}

/* A contiguous f64 copy of t (values exact for floats, and for integers up
 * to 2^53): the heavy kernels convert their operands once and then loop over
 * plain doubles. Release with ptc_tensor_release. */
int ref_as_f64(const ptc_kctx *k, const ptc_tensor *t, ptc_tensor *out);

/* t viewed with numpy broadcasting as a tensor of the given sizes (stride 0 on
 * broadcast dims; t's dims align to the right). Asserts compatibility. */
ptc_tensor ref_broadcast(const ptc_tensor *t, int ndim, const int64_t *sizes);
/* ref_broadcast for tensors that come from the graph: fails (like torch)
 * instead of asserting when t does not broadcast to sizes. */
int ref_broadcast_arg(const ptc_kctx *k, const ptc_tensor *t, int ndim, const int64_t *sizes,
                      ptc_tensor *out);
/* Checks that output i has the given sizes: kernels that walk their input
 * and write the output in step rely on it (the graph's types promised it;
 * this keeps an inconsistent graph from writing out of bounds). */
int ref_out_sizes(const ptc_kctx *k, int i, int ndim, const int64_t *sizes);
static inline int ref_out_like(const ptc_kctx *k, int i, const ptc_tensor *like)
{
    return ref_out_sizes(k, i, like->ndim, like->sizes);
}
/* Wraps dim into [0, ndim) (ndim 0 accepts -1 and 0); -1 if out of range. */
int ref_wrap_dim(int64_t dim, int ndim);
/* Wraps a dim argument, failing the kernel if out of range. */
int ref_dim(const ptc_kctx *k, int64_t dim, int ndim, int *out);

#endif /* PTC_OPS_REF_H */
