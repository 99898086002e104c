/* The torch side of capture: the symbolic tensor type, the mapping of torch
 * functions, Tensor methods and operators onto ops.def, and their handlers.
 * The torch objects, conversions and tensor metadata it uses are the trace's
 * (trace.h); the trace and the interpreter reach this layer through their
 * hook tables, which cap_torch_hooks_install fills.
 */
#ifndef PTC_CAP_TORCH_H
#define PTC_CAP_TORCH_H

#include "capture/trace/trace.h"
#include "passes/passes.h"

#include <limits.h>

int cap_types_init(PyObject *module);
/* Imports torch and builds the mapping tables (on the first compile). */
int cap_torch_init(void);
/* A user's torch function mode is active (torch._C._is_torch_function_mode_enabled). */
bool cap_torch_function_mode_active(void);

/* ---- symbolic tensors -------------------------------------------------------------- */

/* Python's view of requires_grad for a traced value. */
bool cap_tensor_requires_grad(cap_trace *T, cap_tensor *t);

/* ---- the torch mapping ----------------------------------------------------------- */

/* Calls a mapped torch function / bound Tensor method (self non-NULL)
 * (torch_call.c); the lookups and the tables' set-up are torch_map.c's. */
int cap_torch_call(cap_trace *T, const cap_tmap *m, PyObject *self, PyObject *const *args,
                   int nargs, PyObject *kwnames, PyObject **out);
/* The same call with no check of its operands: ptc's own calls on the
 * tensors of numpy arrays (torch_ndarray.c). */
int cap_torch_call_traced(cap_trace *T, const cap_tmap *m, PyObject *self, PyObject *const *args,
                          int nargs, PyObject *kwnames, PyObject **out);
const cap_tmap *cap_torch_lookup_fn(PyObject *callable);
const cap_tmap *cap_torch_lookup_method(PyObject *name);
const char *cap_tmap_name(const cap_tmap *m);
/* Parses the rows' signatures and indexes them by callable and by method
 * name; the rows (torch_table.c's) stay in use. */
int cap_torch_tables_init(cap_tmap *rows, int nrows);

/* Operators and protocol on symbolic tensors. */
/* Fills the tensor rows of the interpreter's hook table (cap_hooks) and the
 * trace's table of torch hooks (cap_thooks). */
void cap_torch_hooks_install(void);
int cap_torch_binop(cap_trace *T, int op, PyObject *a, PyObject *b, PyObject **out);
int cap_torch_compare(cap_trace *T, int cmp, PyObject *a, PyObject *b, PyObject **out);
int cap_torch_unary(cap_trace *T, int h, PyObject *a, PyObject **out);
/* Builtin max(a, b, ...) / min(...) of one-element symbolic tensors
 * (torch_builtins.c); CAP_NONE when eager would not compare them so. */
int cap_torch_builtin_minmax(cap_trace *T, bool is_max, PyObject *const *args, int nargs,
                             PyObject **out);
int cap_torch_getattr(cap_trace *T, cap_tensor *t, PyObject *name, PyObject **out);
int cap_torch_getitem(cap_trace *T, cap_tensor *t, PyObject *key, PyObject **out);
int cap_torch_setitem(cap_trace *T, cap_tensor *t, PyObject *key, PyObject *v);
/* Views and mutation through aliases (torch_ops.c): t's value becomes nv,
 * as seen by its base and every live view; key is NULL for views that are
 * not basic indexing (they cannot follow a mutation: a break). */
/* Eager's strides of traced value v of trace T into st (static sizes), or
 * false where ptc does not know them (torch_strides.c); whether st is
 * contiguous in a memory format, as torch's is_contiguous(memory_format)
 * says. */
typedef enum { CAP_ROW_MAJOR, CAP_CHANNELS_LAST, CAP_CHANNELS_LAST_3D } cap_memory_format;
/* torch.preserve_format, to cap_memory_format_of (not a layout). */
#define CAP_PRESERVE_FORMAT 3
/* The cap_memory_format of a memory_format= argument (None: row-major),
 * CAP_PRESERVE_FORMAT, or -1 for another object (torch_ops.c). */
int cap_memory_format_of(PyObject *format);
bool cap_value_strides(cap_trace *T, const ptc_value *v, int64_t *st);
/* The order, outermost dim first, in which a *_like of input lays out its
 * dims (torch's preserve_format: input's own order where it is dense, else
 * infer_dense_strides'); false where that is row-major or ptc does not know
 * input's strides. */
bool cap_like_order(cap_trace *T, const ptc_value *input, int8_t *perm);
/* Notes that node n, a creation op or the permute that lays one out, was
 * built by a *_like call of input: n's layout is then input's, as torch's
 * preserve_format gives it. */
int cap_note_like(cap_trace *T, const ptc_node *n, const ptc_value *input);
/* Did a *_like call make node n (cap_note_like)? */
bool cap_made_like(cap_trace *T, const ptc_node *n);
/* Notes that value nv replaced old as a tensor's value by an in-place op:
 * its strides are old's, as eager's in-place ops keep them. */
int cap_note_in_place(cap_trace *T, const ptc_value *old, const ptc_value *nv);
bool cap_strides_contiguous(const ptc_ttype *t, const int64_t *st, cap_memory_format format);
/* The strides eager gives a pointwise result of shape ot over nops tensor
 * operands (their types and strides, in argument order; 0-dim ones left
 * out), as TensorIterator lays it out: its fast setup where they all share
 * ot's shape and one layout and no scalar is an operand (scalar_operand:
 * cap_has_scalar_operand), else dense in the order their strides give
 * (compute_strides, reorder_dimensions). Static sizes. */
void cap_pointwise_strides(const ptc_ttype *ot, int nops, const ptc_ttype *const *types,
                           const int64_t *const *strides, bool scalar_operand, int64_t *st);
/* Is one of pointwise node n's TensorIterator operands a scalar: a number
 * in a Tensor|Scalar slot (x + 1: torch wraps it as a 0-dim tensor), or a
 * 0-dim tensor beside a result with dims? */
bool cap_has_scalar_operand(const ptc_node *n);
/* Are strides st a dense layout of t (a permutation of row-major)? Puts its
 * dims outermost first in perm. */
bool cap_dense_order(const ptc_ttype *t, const int64_t *st, int8_t *perm);
/* Would eager refuse an in-place op writing value out, whose functional
 * result the graph's nodes from id first on compute, because an operand
 * (a value from before first they read, or result itself when it is one:
 * copy_) shares part of out's memory ("some elements of the input tensor and
 * the written-to tensor refer to a single memory location": x.add_(x[0]),
 * x[1:].addcmul_(x[:-1], y), x[1:].copy_(x[:-1]))? As torch checks: only
 * for ops made of pointwise steps, views and constants (TensorIterator's),
 * where both are dense and ptc knows where each lies (their views'
 * offsets). first < 0: result's own node alone. */
bool cap_inplace_overlaps(cap_trace *T, const ptc_value *out, const ptc_value *result, int first);
int cap_t_add_view(cap_tensor *base, cap_tensor *view, PyObject *key);
/* Does torch return op's results as views of its first argument (or, for
 * reshape, flatten and contiguous, when it can)? */
bool cap_op_returns_view(int op);
int cap_mutate(cap_trace *T, cap_tensor *t, ptc_value *nv);
/* Whether cap_mutate(T, t, nv) may go ahead: CAP_NEXT, or the break it
 * would take (for ops that write several tensors, checked before any). */
int cap_check_mutate(cap_trace *T, cap_tensor *t, ptc_value *nv);
/* Views made by permute, transpose and t, or by view, squeeze, unsqueeze
 * (and reshape, flatten of a row-major argument) (torch_permviews.c): the
 * view keeps its permutation or notes that it is reshaped, so it is
 * recomputed from its base and written back into it like a basic-indexing
 * view. */
int cap_t_note_op_view(cap_tensor *view);
/* A composition (compiler/passes' composites) that builds into T's graph
 * (torch_compose.c). */
ptc_composer *cap_composer(cap_trace *T);
/* view, torch.flip(base, dims) with dims in [0, ndim), made numpy's flip
 * of base: a view of it (torch_ops.c; followed by torch_permviews.c). */
int cap_t_note_flip_view(cap_tensor *base, cap_tensor *view, PyObject *dims);
int cap_t_op_view_refresh(cap_trace *T, cap_tensor *view, cap_tensor *base);
int cap_t_op_view_write_back(cap_trace *T, cap_tensor *view, ptc_value *nv);
static inline bool cap_t_op_view(const cap_tensor *v)
{
    return v->view_perm || v->view_reshape || v->view_flip;
}
/* A view a mutation can follow: basic indexing or one of those ops. */
static inline bool cap_t_view_follows(const cap_tensor *v) { return v->view_key || cap_t_op_view(v); }
int cap_torch_unpack(cap_trace *T, PyObject *t, int before, int after, bool star,
                     PyObject **items);
/* The tensor's items along dim 0 (a list of symbolic tensors). */
PyObject *cap_torch_unbind(cap_trace *T, cap_tensor *t);

/* ---- the mapping table ------------------------------------------------------------------
 *
 * Entries of the mapping table, the bound call handed to special handlers,
 * and argument conversion helpers (torch_map.c, torch_table.c; cap_inplace:
 * torch_ops.c).
 *
 * A table entry names a Python callable (a torch function, an F.* function or
 * a Tensor method) and either an op of ops.def with a signature string the
 * generic binder follows, or a special handler in C. Signature strings list the
 * Python parameters in order: "input:self" binds Python's `input` to the
 * schema's `self`; "*" starts keyword-only parameters; "!inplace" is F.*'s
 * in-place flag; "~name" is accepted and ignored; "^name" must be None/False
 * (otherwise the call runs for real).
 */

#define TM_METHOD 0x1   /* a Tensor method: `self` is bound */
#define TM_INPLACE 0x2  /* the method's in-place form (add_): writes self */
#define TM_UNBOUND 0x4  /* torch.Tensor.add used as a function */
#define TM_NUMPY 0x8    /* takes traced numpy arrays (numpy's functions, torch.from_numpy) */
#define TM_SCALAR_VALUE 0x10 /* in-place, reads its tensor value as a scalar before it writes
                                (fill_): no operand checked for overlap, as eager checks none */

enum { TP_SCHEMA, TP_INPLACE, TP_IGNORE, TP_MUSTNONE };

typedef struct cap_tparam {
    char pyname[32];
    int schema;   /* schema param index (TP_SCHEMA) */
    uint8_t kind;
    bool kwonly;
} cap_tparam;

/* A call being mapped: positional args (self first for methods), keywords. */
typedef struct cap_tcall {
    cap_trace *T;
    const cap_tmap *m;
    PyObject *const *pos;
    int npos;
    PyObject *kwnames;
    PyObject *const *kwv;
    int nkw;
} cap_tcall;

typedef int (*cap_thandler)(cap_tcall *c, PyObject **out);

struct cap_tmap {
    const char *name;  /* "torch.add", "Tensor.add_", "torch.nn.functional.relu" */
    int op;            /* PTC_OP_* or -1 */
    cap_thandler fn;   /* special handler, or NULL for the generic binder */
    const char *sig;
    uint32_t flags;
    int np;
    cap_tparam p[20];
};

extern cap_tmap cap_tmaps[];
extern const int cap_ntmaps;

/* Argument access for handlers: positional index `i` or keyword `name`
 * (NULL when absent). */
PyObject *cap_targ(cap_tcall *c, int i, const char *name);
/* The generic binder: fills args[schema nparams] for op from the call. */
int cap_tbind(cap_tcall *c, int op, ptc_arg *args);
/* Converts one Python value to an arg of the given schema param kind.
 * Returns CAP_NEXT, CAP_BREAK (unsupported value) or CAP_ERR. */
int cap_tconvert(cap_trace *T, PyObject *v, int kind, int list_len, ptc_arg *out,
                 const char *what);
int cap_int_list(cap_trace *T, PyObject *v, ptc_arg *out, const char *what);
/* A Python number as torch wraps one that stands for a tensor argument
 * (torch.mul(2, x), 2 / x): a 0-dim tensor of the dtype torch gives
 * `scalar op other`, on other's device (NULL after a break). */
ptc_value *cap_wrapped_scalar(cap_trace *T, ptc_arg scalar, const ptc_arg *other);
/* The dtype of that 0-dim tensor: what torch gives `scalar op other`. */
ptc_dtype cap_wrapped_dtype(ptc_arg scalar, const ptc_arg *other);
/* Int list from varargs (x.view(2, 3)) or one sequence (x.view((2, 3))). */
int cap_int_varargs(cap_trace *T, PyObject *const *pos, int n, ptc_arg *out, const char *what);

/* The default dtype, and dtype=/device= keywords of factories (torch_shape.c). */
ptc_dtype cap_default_dtype(void);

/* In-place: replaces self's value with `res` (cast to self's dtype), or a
 * break when self belongs to the caller or is a view. */
int cap_inplace(cap_trace *T, cap_tensor *self, PyObject *res, PyObject **out);
/* cap_inplace of a call whose nodes (its functional form) are those from id
 * first on: all are checked for eager's refusal of overlapping operands
 * (none with first CAP_NO_OPERANDS). */
#define CAP_NO_OPERANDS INT_MAX
int cap_inplace_since(cap_trace *T, cap_tensor *self, PyObject *res, int first, PyObject **out);

static inline cap_tensor *cap_as_tensor(PyObject *o) { return cap_is_tensor(o) ? (cap_tensor *)o : NULL; }
static inline ptc_value *cap_val(PyObject *o) { return ((cap_tensor *)o)->v; }

/* torch._foreach_X(...) as X per tensor (torch_foreach.c); CAP_NONE when
 * callable is not a foreach op. */
int cap_torch_foreach_call(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                           PyObject *kwnames, PyObject **out);
/* torch.tensor(t) / torch.as_tensor(t) of symbolic tensor t, the call's
 * first argument or the tensor of its ndarray (of_array) (torch_builtins.c). */
int cap_th_tensor_of_tensor(cap_tcall *c, cap_tensor *t, bool of_array, PyObject **out);
/* t converted to dtype dt (-1: t's) and device dev, a detached clone where
 * copies; warn_as names the call in eager's copy-construct warning (NULL:
 * none). */
int cap_th_tensor_copy(cap_trace *T, cap_tensor *t, int dt, ptc_device dev, const char *warn_as,
                       bool copies, PyObject **out);
/* torch.tensor(a) / torch.as_tensor(a) of an ndarray from outside: of its
 * torch.from_numpy input (torch_numpy.c). */
int cap_th_tensor_of_array(cap_tcall *c, PyObject **out);
/* The symbolic tensor (new reference) standing for ndarray a from outside
 * where torch takes it as a tensor (x + a), or the break (what: the call or
 * operator, for messages). With backwards (numpy's own use of a), an array
 * whose strides run backwards along some dims, which torch.from_numpy
 * refuses, is taken forwards: the tensor is of np.flip(a, those dims), and
 * its source's key names them. */
int cap_ndarray_operand(cap_trace *T, PyObject *a, bool backwards, const char *what, PyObject **out);
/* x OP array (k: CAP_NB_* or CAP_NB_EQ) as eager computes it, numpy's ufunc
 * on x.numpy(): the operands cast to numpy's loop dtypes, built by build(T,
 * k, x', a', out), the result cast to numpy's; a break where eager's numpy
 * raises (x_requires_grad: cap_tensor_requires_grad's answer for x) or ptc
 * does not match it (torch_numpy.c). */
typedef int (*cap_ndarray_build)(cap_trace *T, int k, PyObject *x, PyObject *a, PyObject **out);
#define CAP_NB_EQ 0xfe
int cap_ndarray_operator(cap_trace *T, int k, cap_tensor *x, bool x_requires_grad, PyObject *array,
                         cap_ndarray_build build, PyObject **out);

/* ---- numpy on traced arrays (torch_ndarray.c, torch_npfuncs.c) ------------------------ */

/* numpy's dtype of ptc dtype dt (new reference), or NULL (bfloat16); the
 * ptc dtype of numpy dtype d, or -1 (torch_numpy.c). */
PyObject *cap_numpy_dtype(PyObject *np, ptc_dtype dt);
int cap_dtype_of_numpy(PyObject *d);
PyObject *cap_np_module(void);                /* borrowed; NULL before numpy is imported */
PyObject *cap_np_dtype_of(const cap_tensor *t); /* numpy's dtype of t (new reference) */
int cap_np_mark(PyObject *o, int kind);       /* o becomes numpy's: cap_numpy_kind */
PyObject *cap_np_proxy(cap_trace *T, PyObject *o);
/* numpy's answer for a call: the dtype and kind of its result. */
typedef struct cap_np_result {
    int dtype; /* ptc dtype */
    int kind;  /* cap_numpy_kind */
} cap_np_result;
int cap_np_oracle(cap_trace *T, const char *what, PyObject *fn, PyObject *args, PyObject *kwargs,
                  cap_np_result *r);
/* The dtype a numpy operation's torch op computes in. */
typedef enum { CAP_NP_CAST_OUT, CAP_NP_CAST_COMMON, CAP_NP_CAST_NONE } cap_np_cast_policy;
/* One numpy operation on traced operands, as cap_np_apply builds it. */
typedef struct cap_np_op {
    const char *what;        /* numpy's name, for messages */
    PyObject *fn;            /* numpy's callable, run on proxies for dtype and kind */
    PyObject *args, *kwargs; /* its arguments (kwargs may be NULL) */
    const char *torch;       /* torch's op: "torch.add", "Tensor.reshape" */
    int noperands, skip;     /* torch's leading positional operands; the first skip uncast */
    PyObject *operands[3];
    PyObject *extra;         /* further positional arguments of torch's op, or NULL */
    PyObject *torch_kwargs;  /* or NULL */
    int cast;                /* cap_np_cast_policy */
    bool as_tensor;          /* tensor OP array: the result is a tensor */
} cap_np_op;
int cap_np_apply(cap_trace *T, const cap_np_op *op, PyObject **out);
int cap_np_torch(cap_trace *T, const char *path, PyObject *args, PyObject *kwargs, PyObject **out);
PyObject *cap_np_cast(cap_trace *T, PyObject *v, int dt);
PyObject *cap_np_operand(cap_trace *T, PyObject *v, int dt);
int cap_np_finish(cap_trace *T, PyObject *res, const cap_np_result *r, PyObject **out);
int cap_np_take(cap_trace *T, PyObject *v, const char *what, PyObject **out);
/* Outside array a as a traced array (its methods, items: objects.c). */
int cap_np_take_array(cap_trace *T, PyObject *a, PyObject **out);
bool cap_np_traced_method(PyObject *name);
/* t.numpy() of a traced tensor: a traced array sharing its memory. */
int cap_np_of_tensor(cap_trace *T, cap_tensor *t, PyObject **out);
/* numpy's flip of traced array m along torch dims (a tuple, each in [0,
 * ndim)): torch.flip's copy kept as a view of m (cap_t_note_flip_view). */
int cap_np_flip_view(cap_trace *T, PyObject *m, PyObject *dims, PyObject **out);
/* The rows of the hook tables for symbolic tensors and arrays: numpy's
 * where an operand is a traced array (or an outside one), torch's
 * (cap_torch_binop...) otherwise; cap_torch_hooks_install fills them in. */
int cap_np_hook_binop(cap_trace *T, int op, PyObject *a, PyObject *b, PyObject **out);
int cap_np_hook_compare(cap_trace *T, int cmp, PyObject *a, PyObject *b, PyObject **out);
int cap_np_hook_unary(cap_trace *T, int h, PyObject *a, PyObject **out);
int cap_np_hook_getattr(cap_trace *T, cap_tensor *t, PyObject *name, PyObject **out);
int cap_np_hook_getitem(cap_trace *T, cap_tensor *t, PyObject *key, PyObject **out);
int cap_np_hook_setitem(cap_trace *T, cap_tensor *t, PyObject *key, PyObject *v);
PyObject *cap_np_hook_unbind(cap_trace *T, cap_tensor *t);
/* ndarray.X's row, or NULL where ptc does not trace it (torch_npfuncs.c). */
const cap_tmap *cap_np_method_row(const char *name);

/* Special handlers (torch_ops.c, torch_shape.c, torch_query.c, torch_numpy.c,
 * torch_ndarray.c, torch_npfuncs.c). */
#define CAP_SPECIAL_HANDLERS(X)                                                 \
    X(view) X(reshape) X(permute) X(expand) X(expand_as) X(repeat) X(transpose) \
    X(unflatten) X(split) X(chunk) X(size) X(dim) X(numel) X(stride)            \
    X(is_contiguous) X(is_floating_point) X(is_complex) X(element_size)         \
    X(to) X(type_as) X(cast) X(cpu) X(detach) X(contiguous) X(view_as)          \
    X(new_full) X(like) X(factory) X(full) X(arange) X(random) X(tensor_const)  \
    X(new_tensor) X(fill) X(copy) X(zero) X(movedim) X(squeeze) X(index_put)   \
    X(softmax) X(dropout) X(dropout_nd) X(batch_norm) X(max_pool2d) X(avg_pool2d) \
    X(adaptive_avg_pool2d) X(adaptive_avg_pool1d) X(conv) X(pad) X(embedding)   \
    X(sdpa) X(var) X(var_mean) X(max_min) X(sort) X(floor_divide) X(relu6) X(mish) \
    X(logsigmoid)                                                               \
    X(glu) X(normalize) X(norm) X(outer) X(einsum) X(square) X(float_power)     \
    X(clamp_one)                                                                \
    X(item) X(autograd) X(requires_grad_) X(data_dependent) X(unsupported)      \
    X(interpolate)                                                              \
    X(eye) X(linspace) X(hypot) X(lerp) X(addcop) X(explog) X(xlogy)            \
    X(isinf) X(nan_to_num) X(isclose) X(dot) X(flip) X(repeat_interleave)       \
    X(tile) X(broadcast_to) X(broadcast_tensors) X(diff) X(pointwise_loss)      \
    X(bce) X(nll_loss) X(cross_entropy) X(stack_dims) X(native_mha)            \
    X(pixel_shuffle) X(count_nonzero) X(clone) X(nansum) X(heaviside) X(sinc)   \
    X(scatter) X(scatter_reduce) X(index_scatter) X(index_fill) X(masked_scatter) \
    X(cosine_similarity) X(pairwise_distance) X(kl_div) X(one_hot) X(unfold)    \
    X(triplet_margin) X(embedding_bag) X(aminmax) X(trace) X(channel_shuffle)   \
    X(search_sorted) X(isin) X(rot90) X(cross) X(addmv) X(kron) X(cov)          \
    X(cartesian_prod) X(diag_embed) X(tensor_split) X(atleast) X(meshgrid)      \
    X(cdist) X(matrix_norm) X(block_diag) X(order_stat)                         \
    X(new) X(type) X(from_numpy) X(numpy) X(np_func) X(np_method) X(np_from_numpy)      \
    X(np_tensor_const)

#define X(n) int cap_th_##n(cap_tcall *c, PyObject **out);
CAP_SPECIAL_HANDLERS(X)
#undef X

/* Tensor t in memory format f, as t.contiguous(memory_format=f) lays it out
 * (torch_shape.c): t itself where it is so already, else a value with f's
 * strides. */
int cap_in_memory_format(cap_tcall *c, cap_tensor *t, int f, PyObject **out);

#endif /* PTC_CAP_TORCH_H */
