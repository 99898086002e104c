/* Internal to compiler/ops: what the meta functions (meta_*.c) share.
 *
 * Every meta function named in ops.def's meta column is declared here by
 * expanding the table, so adding an op with a new meta function only needs the
 * function itself. Helpers prefixed meta_ format types for messages, wrap dims,
 * broadcast with error messages that name the op and the shapes, and decide
 * questions about symbolic sizes.
 */
#ifndef PTC_OPS_META_H
#define PTC_OPS_META_H

#include "ops/ops.h"

#define OP(id, stage, schema, meta, ref, flags, ...) int meta(ptc_meta *m);
#include "ir/ops.def"
#undef OP

/* ---- args ------------------------------------------------------------------ */

/* The tensor type of arg i, or NULL when it is None or a Python number. */
const ptc_ttype *meta_t(const ptc_meta *m, int i);
/* Arg i by schema param name (asserts the op has that param). */
const ptc_arg *meta_arg(const ptc_meta *m, const char *name);
int meta_argi(const ptc_meta *m, const char *name); /* its index, -1 if absent */
/* An int / int list arg that must be a constant (not symbolic). */
int meta_const(ptc_meta *m, ptc_dim d, const char *what, int64_t *out);
/* A Scalar arg as double / the bool of a BOOL arg. */
double meta_scalar(const ptc_arg *a);
bool meta_is_number(const ptc_arg *a); /* INT, FLOAT or BOOL */

/* ---- messages ---------------------------------------------------------------- */

/* Arena strings for messages: "f32[2,3]", "s0", "[2,s0]". */
const char *meta_tstr(ptc_meta *m, const ptc_ttype *t);
const char *meta_dstr(ptc_meta *m, ptc_dim d);
const char *meta_shapestr(ptc_meta *m, const ptc_dim *d, int n);

/* ---- dims and shapes ------------------------------------------------------- */

/* Wraps dim for a tensor of rank ndim (torch's maybe_wrap_dim with scalars
 * treated as rank 1), failing with "op: dim 3 is out of range for f32[2,3]
 * (expected in [-2, 1])". `t` (may be NULL) names the tensor. */
int meta_dim(ptc_meta *m, ptc_dim dim, int ndim, const ptc_ttype *t, int *out);
/* Numpy broadcasting of two shapes (static 1 stretches; other sizes must be
 * equal, symbolic ones structurally). On failure returns -1 with the failing
 * output dim in *bad. */
int meta_broadcast_dims(const ptc_dim *x, int nx, const ptc_dim *y, int ny, ptc_dim *out, int *nout,
                        int *bad);
/* Broadcasts two types' shapes; on failure "op: shapes A and B cannot
 * broadcast (dim i: x vs y)". */
int meta_broadcast(ptc_meta *m, const ptc_ttype *a, const ptc_ttype *b, ptc_dim *out, int *nout);
/* Can `from` be expanded to shape (to, nto) without growing? (torch's
 * expand / in-place broadcasting). Fails naming `what`. */
int meta_expandable(ptc_meta *m, const ptc_ttype *from, const ptc_dim *to, int nto,
                    const char *what);
/* x == y: structurally, or (with a shape env: while capturing) by the sizes
 * of the call being traced, kept as a guard and made structural by rewriting
 * the graph (x and y may then be stale: ptc_build infers again). */
bool meta_same(ptc_meta *m, ptc_dim x, ptc_dim y);
/* meta_le and meta_sign, and where they cannot decide, (while capturing)
 * the traced call's sizes under a guard (a kernel of 7 fits s2 >= 7). */
int meta_le_env(ptc_meta *m, ptc_dim x, ptc_dim y);
int meta_sign_env(ptc_meta *m, ptc_dim d);
/* Sign of a size expression: -1, 0, 1, or 2 when it depends on the values of
 * its symbols (sizes are taken to be >= 2; decided by probing values). */
int meta_sign(ptc_dim d);
/* a <= b / a < b decided, or -1 when undecidable. */
int meta_le(ptc_arena *a, ptc_dim x, ptc_dim y);
/* x / y when it divides exactly (symbolic divisors: when the quotient is a
 * constant); -1 otherwise. */
int meta_exact_div(ptc_arena *a, ptc_dim x, ptc_dim y, ptc_dim *q);
/* meta_exact_div, and where a constant y does not divide x structurally,
 * (while capturing) by the traced call's sizes: guarded, x's symbols split
 * so that it does (s1 := 4*s2), and the node inferred again. */
int meta_divide(ptc_meta *m, ptc_dim x, ptc_dim y, ptc_dim *q);
/* ceil(x / c) for a constant c > 0, as (x + c - 1) // c (prints simply). */
static inline ptc_dim meta_ceildiv(ptc_arena *a, ptc_dim x, int64_t c)
{
    return ptc_dim_floordiv(a, ptc_dim_add(a, x, ptc_dim_c(c - 1)), ptc_dim_c(c));
}
static inline bool meta_is(ptc_dim d, int64_t v)
{
    return !d.sym && d.value == v;
}

/* ---- outputs ---------------------------------------------------------------- */

/* A new output of dtype dt and shape (shape, n). */
ptc_ttype *meta_out(ptc_meta *m, ptc_dtype dt, const ptc_dim *shape, int n);
/* A new output with t's dtype and shape. */
ptc_ttype *meta_out_like(ptc_meta *m, const ptc_ttype *t);

/* ---- dtypes ----------------------------------------------------------------- */

/* torch.result_type over the listed args of m (by index; -1 entries skipped). */
ptc_dtype meta_result_type(const ptc_meta *m, const int *idx, int n);
/* Fails unless t is floating: "op: expected a floating point tensor, got i64[2]". */
int meta_need_float(ptc_meta *m, const ptc_ttype *t, const char *what);
/* Python's dtype of a float scalar with torch's default dtype. */
#define PTC_DEFAULT_FLOAT PTC_F32

#endif /* PTC_OPS_META_H */
