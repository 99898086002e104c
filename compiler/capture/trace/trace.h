/* Tracing: what the interpreter records while it runs a segment of user code
 * symbolically.
 *
 * Sources say how a value is reached from a segment's starting state (a local
 * of frame 0, an attribute of it, a global, ...); guards check those values on
 * later calls. Values that came from outside the trace are "outside" objects:
 * they have a source, and mutating them is a graph break. Everything else was
 * created while tracing and is rebuilt by a recipe at run time. Tensors are
 * symbolic (cap_tensor): operations on them append nodes to the graph.
 */
#ifndef PTC_CAP_TRACE_H
#define PTC_CAP_TRACE_H

#include "capture/interp/interp.h"
#include "ops/ops.h"

/* ---- breaks (the codes: interp/breaks.def) ----------------------------------- */

typedef struct cap_break_info {
    int code;
    const char *name, *reason, *explanation, *hint;
} cap_break_info;
const cap_break_info *cap_break_lookup(int code);

/* A recorded break: where and why. */
typedef struct cap_break {
    int code;             /* cap_break_code */
    char detail[512];     /* what exactly ("call to os.getpid") */
    char file[512];
    int line, col, endcol;
    char text[512];       /* the source line */
    char stack[1024];     /* inlined call stack, innermost last: "f (file:line) > g ..." */
} cap_break;

/* ---- sources --------------------------------------------------------------- */

#define CAP_SOURCE_KINDS(X)                                                                        \
    X(LOCAL, "L")       /* frame `frame`'s localsplus slot `index` */                              \
    X(STACK, "S")       /* frame `frame`'s stack slot `index` */                                   \
    X(FUNC, "F")        /* frame `frame`'s function */                                             \
    X(RETA, "R")        /* frame `frame`'s pending result (an __init__'s self) */                  \
    X(CONST, "C")       /* `key` itself: an object assumed constant */                             \
    X(ATTR, ".")        /* getattr(parent, key) */                                                 \
    X(INSTDICT, ".")    /* parent.__dict__[key] */                                                 \
    X(MODPARAM, ".")    /* parent._parameters[key] */                                              \
    X(MODBUF, ".")      /* parent._buffers[key] */                                                 \
    X(MODCHILD, ".")    /* parent._modules[key] */                                                 \
    X(ITEM, "[]")       /* parent[key] of a dict */                                                \
    X(INDEX, "[]")      /* parent[index] of a list or tuple */                                     \
    X(CELL, "cell")     /* the contents of cell parent */                                          \
    X(TYPE, "type")     /* type(parent) */                                                         \
    X(ITERSEQ, "seq")   /* the sequence a ptc iterator (cap_iter) walks */                         \
    X(ITERREST, "rest") /* what an outside tuple or range iterator has left                        \
                           (cap_iter_rest), read without advancing it */                           \
    X(FROM_NUMPY, "from_numpy") /* torch.from_numpy(parent), parent an ndarray (cap_ndarray_tensor); \
                                   key: the dims it is flipped along first, or NULL */

typedef enum {
#define X(id, s) CAP_S_##id,
    CAP_SOURCE_KINDS(X)
#undef X
    CAP_S_COUNT
} cap_source_kind;

/* A source that reads a tensor a module holds: a parameter or a buffer. */
static inline bool cap_source_module_tensor(int kind)
{
    return kind == CAP_S_MODPARAM || kind == CAP_S_MODBUF;
}

typedef struct cap_source {
    uint8_t kind;
    int parent;   /* source id, -1 for roots */
    int frame;    /* LOCAL/STACK/FUNC */
    int index;    /* LOCAL/STACK slot, INDEX item */
    PyObject *key;/* name, dict key, or the CONST object (strong) */
} cap_source;

/* ---- guards ---------------------------------------------------------------- */

#define CAP_GUARD_KINDS(X)                                                                                \
    X(ID, "is")               /* value is obj */                                                          \
    X(TYPE, "type is")        /* type(value) is obj */                                                    \
    X(EQ, "==")               /* type(value) is type(obj) and value == obj */                             \
    X(LEN, "len ==")          /* cap_stored_len(value) == n */                                            \
    X(KEYS, "keys ==")        /* cap_stored_keys(value) == obj */                                         \
    X(ORDER, "iterates as")   /* value a set or frozenset whose items, in its                             \
                                 iteration order, are obj's (type and ==) */                              \
    X(TENSOR, "tensor")       /* tensor type, dtype, device, sizes, strides, grad */                      \
    X(HASATTR, "hasattr")     /* hasattr(value, key) == n */                                              \
    X(DICT_HAS, "has key")    /* (key in value) == n */                                                   \
    X(NOHOOKS, "no hooks")    /* module has no forward (pre-)hooks */                                     \
    X(CLASSATTR, "method")    /* obj = (name, f): name not in value's __dict__ and                        \
                                 type(value).name is f (a method, without binding) */                     \
    X(GRAD, "grad mode")      /* torch.is_grad_enabled() == n (no source) */                              \
    X(AUTOCAST, "autocast")   /* autocast state == n (no source) */                                       \
    X(ITERPOS, "iterator at") /* a cap_iter at position n (obj: range or None) */                         \
    X(GLOBAL_HOOKS, "no global module hooks") /* (no source) */                                           \
    X(SAME, "is the object of")               /* value is the object source n reached */                  \
    X(DISTINCT, "distinct")                   /* obj: tuple of source ids (src the largest), all          \
                                                 distinct objects: tensors that were not aliases */       \
    X(NOALIAS, "share no memory")             /* obj: source ids (src the largest), the first n           \
                                                 written in place: they share no storage with the rest */ \
    X(SYM, "size relation") /* expr n 0, n a Py_LT.. relation; obj: expr's text */                        \
    X(SYMSIZE, "size is")   /* value.size(n & 255) == symbol n >> 8 */

/* What an outside list, tuple, dict or set holds in its own storage, which
 * is what its type's C methods read and what INDEX and ITEM sources reach,
 * whatever a subclass's __len__, keys or __iter__ say: the guards and the
 * trace read sizes and keys through these two, and so agree. The keys are
 * in iteration order (an OrderedDict's own). A new tuple, or NULL with an
 * error; the length is -1 with an error. */
Py_ssize_t cap_stored_len(PyObject *o);
PyObject *cap_stored_keys(PyObject *d);
/* The method descriptor of type(self)'s MRO that the builtin method o
 * (bound to self, named name) comes from: list.append for l.append, and for
 * super().append in a subclass that overrides append. New ref or NULL. */
PyObject *cap_builtin_descriptor(PyObject *o, PyObject *self, PyObject *name);

typedef enum {
#define X(id, s) CAP_G_##id,
    CAP_GUARD_KINDS(X)
#undef X
    CAP_G_COUNT
} cap_guard_kind;

typedef struct cap_tmeta {
    PyObject *type;    /* exact tensor type (strong) */
    PyObject *dtype;   /* torch.dtype (strong) */
    ptc_dtype dt;
    ptc_device dev;
    int ndim;
    int64_t sizes[PTC_MAX_DIMS], strides[PTC_MAX_DIMS];
    bool requires_grad;
    uint8_t dyn;       /* dims with symbolic sizes (bit d): not compared; the
                          tensor must then be contiguous, as it was */
} cap_tmeta;

typedef struct cap_guard {
    uint8_t kind;
    int src;          /* -1 for global-state guards */
    PyObject *obj;    /* expected object / value / key (strong) */
    int64_t n;
    cap_tmeta *tm;    /* TENSOR */
    ptc_dim expr;     /* SYM: over the symbols (the trace's, then the entry's arena) */
    cap_code *code;   /* the instruction the trace was at when it made the guard */
    int pc;           /*   (code NULL: made before the first instruction) */
} cap_guard;

/* Autocast state of cpu [0] and cuda [1]: on, and the dtype (a ptc dtype,
 * 255 when torch's has none in ptc). */
typedef struct cap_amp {
    bool on[2];
    uint8_t dt[2];
} cap_amp;

/* ---- symbolic sizes (symint.c) ---------------------------------------------- */

/* Symbols s0, s1, ... name the sizes of graph inputs' dimensions; each is
 * read from the dimension it was first seen in. */
#define CAP_MAX_SYMS 32
typedef struct cap_symtab {
    int n;
    int src[CAP_MAX_SYMS], dim[CAP_MAX_SYMS];
    /* A symbol the trace found equal to an expression over the other symbols
     * (or to a constant) is replaced by it in the graph; guards still read
     * it from its dimension. */
    bool replaced[CAP_MAX_SYMS];
    ptc_dim by[CAP_MAX_SYMS];
    /* > 1: the symbol is its dimension's size divided by this (a guard that
     * the size divides split it out: s1 := 4*s2 for s1 % 4 == 0). */
    int64_t div[CAP_MAX_SYMS];
    /* > 0: the symbol is that, less this (a guard that the size is at
     * least some bound shifted it: s2 := s4 + 5 for s2 >= 7, so that s4 >= 2
     * like every symbol). Value: size // div - off. */
    int64_t off[CAP_MAX_SYMS];
    /* Not 0: added to that, an expression over earlier symbols (a relation
     * over several sizes made s2 - s4 >= 0 structural: s2 := s5 + s4 - 2 for
     * a new s5 read as size - (s4 - 2), at least 2). Value: size // div -
     * off + plus. */
    ptc_dim plus[CAP_MAX_SYMS];
    /* Each symbol's range once guarded (2 or mark_dynamic's min, its max;
     * INT64_MIN / INT64_MAX: unbounded): relations it implies need no guard. */
    int64_t lo[CAP_MAX_SYMS], hi[CAP_MAX_SYMS];
} cap_symtab;
const char *cap_sym_name(int i); /* "s0", "s1", ... (static strings) */

/* A Python int the trace computed from symbolic sizes: arithmetic keeps it
 * symbolic, comparisons guard the relation they answered, and any use that
 * needs a value (__index__, hash, a loop bound) specialises it with a guard. */
typedef struct cap_symint {
    PyObject_HEAD
    cap_trace *T;          /* NULL once the trace ended */
    ptc_dim d;
    int64_t hint;          /* its value in this trace */
} cap_symint;
extern PyTypeObject *cap_symint_type;
static inline bool cap_is_symint(PyObject *o) { return o && Py_TYPE(o) == cap_symint_type; }
int cap_symint_types_init(PyObject *module);

/* The symbolic tensor ... ------------------------------------------------------ */

typedef struct cap_tensor {
    PyObject_HEAD
    cap_trace *T;          /* the trace it belongs to (NULL once finished) */
    ptc_value *v;          /* its current graph value (in-place ops replace it) */
    ptc_value *input_v;    /* the graph input it started as, or NULL */
    int src;               /* source of that input, or -1 */
    PyObject *fake_type;   /* what type() reports: torch.Tensor or nn.Parameter */
    struct cap_tensor *base; /* a view's base (strong), for in-place checks */
    PyObject *view_key;    /* base[view_key] made it (basic indexing), or NULL */
    PyObject *view_perm;   /* base.permute(view_perm) made it (torch_permviews.c), or NULL */
    PyObject *view_flip;   /* numpy's flip: base.flip(view_flip) stands for it, or NULL */
    bool view_reshape;     /* base.reshape(its shape) made it (torch_permviews.c) */
    uint8_t numpy;         /* cap_numpy_kind: what Python sees (torch_ndarray.c) */
    int nviews;            /* views taken of it */
    PyObject *views;       /* list of weakrefs to them (cap_t_add_view) */
    PyObject *weakrefs;
} cap_tensor;

/* What a symbolic tensor is to Python: a torch.Tensor, or numpy's view of
 * one (t.numpy(), numpy code on it): an ndarray, or a numpy scalar (what a
 * reduction or a ufunc gives where its result has no dims). */
typedef enum { CAP_NP_TENSOR, CAP_NP_ARRAY, CAP_NP_SCALAR } cap_numpy_kind;

extern PyTypeObject *cap_tensor_type;
static inline bool cap_is_tensor(PyObject *o) { return o && Py_TYPE(o) == cap_tensor_type; }
/* A symbolic tensor that Python sees as a numpy array or scalar. */
static inline bool cap_is_traced_numpy(PyObject *o)
{
    return cap_is_tensor(o) && ((cap_tensor *)o)->numpy != CAP_NP_TENSOR;
}
/* The index of the first symbolic tensor among args, -1 if none. */
static inline int cap_t_first_tensor(PyObject *const *args, int n)
{
    for (int i = 0; i < n; i++)
        if (cap_is_tensor(args[i]))
            return i;
    return -1;
}

/* ---- torch as the trace sees it (torch_objects.c) ------------------------------ */

typedef struct cap_torch {
    PyObject *torch, *F, *Tensor, *Parameter, *Module, *Size, *dtype_type, *device_type;
    PyObject *dtypes[PTC_DTYPE_COUNT]; /* torch.bool ... torch.float64 */
    PyObject *is_grad_enabled, *set_grad_enabled_c;
    PyObject *no_grad, *enable_grad, *set_grad_enabled, *inference_mode, *autocast_cls,
        *nullcontext;
    PyObject *is_autocast_enabled, *get_autocast_dtype;
    PyObject *tensor_fn, *empty, *empty_strided;
    PyObject *module_call_impl, *module_getattr, *module_wrapped_call;
    PyObject *global_hooks; /* tuple of the global forward hook dicts */
    PyObject *fn_table;     /* dict: callable -> capsule of cap_tmap */
    PyObject *method_table; /* dict: Tensor method name -> capsule of cap_tmap */
    PyObject *pure_fns;     /* dict: C callable -> purity class (calls.c) */
    PyObject *s_shape, *s_dtype, *s_device, *s_stride, *s_requires_grad, *s_data_ptr,
        *s_is_contiguous, *s_parameters, *s_buffers, *s_modules, *s_training, *s_forward, *s_type,
        *s_index, *s_forward_hooks, *s_forward_pre_hooks, *s_backward_hooks, *s_backward_pre_hooks,
        *s_forward_hooks_with_kwargs, *s_storage_offset, *s_setattr, *s_untyped_storage, *s_nbytes, *s_is_cpu,
        *s_is_cuda, *s_get_device;
} cap_torch;
extern cap_torch cap_T;
/* Looks up the torch objects (on the first compile, from cap_torch_init). */
int cap_torch_objects_init(void);

PyObject *cap_dtype_obj(ptc_dtype dt);                 /* borrowed torch.dtype */
int cap_dtype_from_obj(PyObject *o);                   /* ptc dtype or -1 */
PyObject *cap_device_obj(ptc_device d);                /* new torch.device */
int cap_device_from_obj(PyObject *o, ptc_device *out); /* torch.device / str / int */
/* A graph attribute as the Python value torch's op takes (new reference);
 * symbolic sizes take their values from b (NULL: none may be symbolic). */
PyObject *cap_arg_obj(const ptc_arg *a, const ptc_bindings *b);
/* Reads a real tensor's metadata (Python attribute access). */
int cap_tmeta_read(PyObject *t, cap_tmeta *m);
/* Only its dtype, sizes, strides and device (m->type NULL, requires_grad
 * unread): what seeing it as a ptc tensor needs, a read fewer. */
int cap_tmeta_read_layout(PyObject *t, cap_tmeta *m);
/* Does t match m? (*why gets the first difference when not.) */
int cap_tmeta_check(PyObject *t, const cap_tmeta *m, char *why, size_t size);
/* Are m's strides those of a contiguous tensor of its sizes (size-1 dims aside)? */
bool cap_tmeta_dense(const cap_tmeta *m);
/* Size-only change of a tensor guard: the dims whose sizes differ now, when
 * nothing else does (dtype, device, rank, contiguity); 0 otherwise. */
int cap_tmeta_size_change(PyObject *t, const cap_tmeta *m);
void cap_tmeta_str(const cap_tmeta *m, char *buf, size_t size);
void cap_tmeta_type(const cap_tmeta *m, ptc_ttype *t);

/* ---- symbolic tensors (lifecycle.c) and graph nodes (nodes.c) ------------------ */

/* A new symbolic tensor for graph value v. */
PyObject *cap_tensor_new(cap_trace *T, ptc_value *v);
/* A real tensor constant (created while tracing) as a graph input. */
PyObject *cap_tensor_const(cap_trace *T, PyObject *real);
/* The int a constant integer tensor of the trace stands for as an index
 * (torch.tensor(1) made in the function, never written), or NULL. */
PyObject *cap_t_const_index(cap_trace *T, PyObject *key);
/* Builds op(args) in the trace's graph: outputs as symbolic tensors (one, or a
 * tuple/list). Meta errors become a TRACE_ERROR break. */
int cap_build(cap_trace *T, ptc_op op, ptc_arg *args, int nargs, PyObject **out);
ptc_value *cap_build1(cap_trace *T, ptc_op op, ptc_arg *args, int nargs); /* NULL after a break */
/* A built value as a symbolic tensor (*out); CAP_BREAK when v is NULL. */
int cap_wrap_value(cap_trace *T, ptc_value *v, PyObject **out);
/* A torch call met a real tensor in the trace: B023 for subclasses, B026 for
 * tensors no graph value can hold (nodes.c). */
int cap_t_real_tensor(cap_trace *T, PyObject *v, const char *what);

/* ---- autocast (autocast.c) ------------------------------------------------------------ */

int cap_amp_read(cap_amp *a);        /* torch's state now */
int cap_amp_write(const cap_amp *a); /* makes it torch's state */
int64_t cap_amp_pack(const cap_amp *a);
cap_amp cap_amp_unpack(int64_t n);
void cap_amp_str(int64_t n, char *buf, size_t size);
/* The dtype autocast casts v, a tensor argument of op, to in the trace's
 * state, or -1 (nodes.c builds the casts). */
int cap_amp_cast_dtype(const cap_trace *T, ptc_op op, const ptc_value *v);
/* The dtype autocast casts v, a loss's tensor argument, to, or -1. */
int cap_amp_loss_dtype(const cap_trace *T, const ptc_value *v);
/* A loss's tensor arguments (vals[i], NULL for none) cast as autocast casts
 * them, in place (nodes.c): CAP_NEXT or CAP_BREAK. */
int cap_amp_loss_inputs(cap_trace *T, ptc_value **vals, int n);
bool cap_amp_is_manager(PyObject *mgr);
/* Enters an autocast region in the trace; *prev: the state its exit
 * restores (cap_gradexit.amp_prev). */
int cap_amp_enter(cap_trace *T, PyObject *mgr, int64_t *prev);
int cap_amp_query(cap_trace *T, PyObject *callable, PyObject *const *args, int nargs,
                  PyObject **out);

/* nn.Module.parameters() and the other iteration methods (modules.c). */
int cap_module_iter_kind(PyObject *fn);
int cap_module_iter_call(cap_interp *I, int kind, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out);
/* An nn.Module called while tracing: its forward inlined, or torch's
 * _call_impl when it has hooks (modules.c). */
int cap_t_module_call(cap_interp *I, PyObject *mod, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out);

/* ---- the torch layer's hooks ---------------------------------------------------- */

/* The trace hands torch callables and the protocol of symbolic tensors to the
 * torch layer through this table (as the interpreter reaches the trace through
 * cap_hooks), so that it includes nothing above its own layer; the torch layer
 * fills it at start-up (cap_torch_hooks_install). Rows as in torch.h. */
typedef struct cap_tmap cap_tmap; /* an entry of the torch mapping table (torch.h) */
typedef struct cap_torch_hooks {
    const cap_tmap *(*lookup_fn)(PyObject *callable);
    int (*call)(cap_trace *T, const cap_tmap *m, PyObject *self, PyObject *const *args, int nargs,
                PyObject *kwnames, PyObject **out);
    int (*getattr)(cap_trace *T, cap_tensor *t, PyObject *name, PyObject **out);
    int (*getitem)(cap_trace *T, cap_tensor *t, PyObject *key, PyObject **out);
    int (*setitem)(cap_trace *T, cap_tensor *t, PyObject *key, PyObject *v);
    PyObject *(*unbind)(cap_trace *T, cap_tensor *t);
    int (*builtin_minmax)(cap_trace *T, bool is_max, PyObject *const *args, int nargs,
                          PyObject **out);
    int (*foreach_call)(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                        PyObject *kwnames, PyObject **out);
    /* an outside ndarray as a traced array of its graph input */
    int (*take_array)(cap_trace *T, PyObject *array, PyObject **out);
    /* is `name` an ndarray method ptc traces? */
    bool (*traced_array_method)(PyObject *name);
} cap_torch_hooks;
extern cap_torch_hooks cap_thooks;

/* ---- recipes: rebuilding Python values at run time -------------------------- */

#define CAP_RECIPE_KINDS(X)                                                     \
    X(NULLV) X(CONST) X(SOURCE) X(OUTPUT) X(TUPLE) X(LIST) X(DICT) X(SET)       \
    X(CELL) X(SLICE) X(ITER) X(INSTANCE) X(FUNCTION) X(METHOD) X(GRADEXIT)   \
    X(GETATTR) X(PYITER) X(EXCEPTION) X(REDUCE) X(ID) X(BIND) X(NUMPY)

typedef enum {
#define X(id) CAP_R_##id,
    CAP_RECIPE_KINDS(X)
#undef X
} cap_recipe_kind;

typedef struct cap_recipe {
    uint8_t kind;
    int n;          /* number of items */
    int *items;     /* recipe indices (children first in the array) */
    PyObject *obj;  /* CONST value, INSTANCE class, FUNCTION code..., BIND descriptor,
                       True for a SOURCE that is an id() (strong) */
    int index;      /* SOURCE id, OUTPUT index, ITER position, GRADEXIT mode,
                       NUMPY kind (cap_numpy_kind) */
} cap_recipe;

/* A frame of a resume state. */
typedef struct cap_frame_recipe {
    cap_code *code;
    int pc, sp, exc_depth;
    int func;        /* recipe index */
    int *lp;         /* [code->nlp] recipe indices */
    int *stack;      /* [sp] */
    cap_cont ret;    /* the frame's continuation */
    int ret_a;       /* recipe index or -1 */
    const char *module_path;
} cap_frame_recipe;

/* ---- the trace ----------------------------------------------------------------- */

typedef struct cap_entry cap_entry;

struct cap_trace {
    PyObject *module_names;   /* id(module) -> its path, from the compiled function (strong) */
    cap_interp *I;
    ptc_graph *g;
    ptc_arena *arena;         /* the graph's arena */
    /* Sources and guards. */
    cap_source *src;
    int nsrc, capsrc;
    PyObject *src_index;      /* dict: source key tuple -> id */
    PyObject **src_val;       /* [capsrc]: wrapped value per source (strong) */
    cap_guard *guards;
    int nguards, capguards;
    PyObject *guard_index;    /* dict: (kind, src, ...) -> index */
    PyObject *obj_src;        /* dict: id(obj) -> source id, for outside objects */
    PyObject *keep;           /* list: keeps every mapped object alive */
    /* Graph inputs: a source each, or a constant tensor (src -1). */
    int *input_src;
    PyObject *input_const;    /* list aligned with graph inputs (None or tensor) */
    /* Trace-time torch state. */
    bool grad_enabled, grad_at_start;
    cap_amp amp, amp_at_start; /* autocast state (autocast.c) */
    uint8_t *node_grad;       /* per node id: grad mode it ran under */
    int cap_node_grad;
    uint64_t seeds;           /* random ops seen (seed counter) */
    /* The break that ended the trace, if any. */
    cap_break brk;
    bool has_break;
    /* A break out of a nested run (a callback of a builtin) reruns the
       builtin for real from its start, so what the callbacks did before it
       must not have happened: the trace is made again, breaking before that
       instruction (exec.c). sync_step: the step of the instruction that
       began the outermost nested run; sync_exit: I->steps when one left
       with a break or error. */
    long sync_step, sync_exit, redo_step;
    cap_break redo;
    /* Inlining decisions. */
    PyObject *no_inline;      /* set of (id(code), pc) that must not be inlined */
    const char *unfinished_at; /* the break an earlier trace stopped at with a generator
                                  left unfinished (its call's break says it), or "" */
    PyObject *tensors;        /* weakrefs to every symbolic tensor made */
    /* Side effects on outside objects, replayed after the graph
       (effects.c): the attribute values the trace wrote (id(obj) ->
       {name: [value] or () when deleted}), the shadows of written lists,
       dicts and cells (id(obj) -> record), and the log in program order,
       (kind, obj, key, value). */
    PyObject *shadow;
    PyObject *mut;
    PyObject *effects;
    /* Graph inputs written in place (a buffer's add_, BatchNorm's running
       statistics): their symbolic tensors, in the order of first write. The
       graph returns their last values and the caller's tensors get them
       after the call (cap_entry.writeback). */
    PyObject *written;
    PyObject *input_storage;  /* dict: source id -> its tensor input's storage
                                 (inplace.c: a written input must share none) */
    PyObject *exc_stack;      /* handled exceptions of traced except blocks */
    PyObject *strings;
    PyObject *skipped;        /* generators run untouched while tracing */
    PyObject *made_funcs;     /* dict: id(fn) -> fn, the functions MAKE_FUNCTION made */
    PyObject *made_classes;   /* dict: id(cls) -> cls, the classes made while tracing
                                 (classes.c) */
    PyObject *iter_shadows;   /* dict: id(it) -> the ptc iterator over what the outside
                                 iterator it has left (iter_outside.c) */
    bool any_order;           /* a builtin reading a set whatever its order (set,
                                 sorted, min, max: builtins.c) is iterating it */
    PyObject *like_inputs;    /* dict: id of a node a *_like call built -> its input's
                                 ptc_value (a pointer): the result's layout is the
                                 input's (torch_strides.c) */
    PyObject *kept_layouts;   /* dict: id of a node whose value an in-place op gave a
                                 tensor -> the value it replaced (a pointer): the
                                 same strides (torch_strides.c) */
    PyObject *made_ids;       /* dict: an id() the trace took -> its object (ids.c) */
    PyObject *resumed_ids;    /* the resume state's ids (cap_interp.ids, or NULL):
                                 loaded without a guard (ids.c) */
    /* Symbolic sizes (symint.c). */
    int dynamic;              /* the dynamic= option: -1 None, 0 False, 1 True */
    bool symint_results;      /* cap_options.symint_results (ptc.export) */
    PyObject *auto_dyn;       /* dict: source text -> dims made symbolic by a size-only
                                 recompile (dynamic=None; borrowed, or NULL) */
    PyObject *prev_sizes;     /* recompiling: source text -> sizes tuple of the entry
                                 before (-1 for a symbolic dim; borrowed, or NULL) */
    cap_symtab syms;
    ptc_bindings hints;       /* each symbol's size in this trace */
    ptc_shape_env shape_env;  /* decides relations for the meta functions (symint.c) */
    bool static_only;         /* a retrace after symbolic sizes failed */
    char static_why[300];     /*   what made the trace need static sizes ("" none) */
    PyObject *symints;        /* list: every cap_symint made (detached at the end) */
    PyObject *specialised;    /* list of dicts: symbols a use pinned to a value, and where */
    PyObject *changed_sizes;  /* recompiling: dict size -> "L['x'].size(1)", sizes that dims
                                 of the entry before had and changed from (or NULL) */
    PyObject *new_tensors;    /*   list of (source text, sizes): tensors it did not have */
    /* Cuts asked for by ptc._split.graph_cut (trace_split.c): a list of
       (first node id after the cut, reason), or NULL when there is none. */
    PyObject *cuts;
};

/* Fills the trace's rows of the interpreter's hook table (cap_hooks, hooks.c). */
void cap_trace_hooks_install(void);
/* Starts tracing the state held by I (frames with slot sources set). */
cap_trace *cap_trace_new(PyObject *module_names, cap_interp *I);
void cap_trace_free(cap_trace *T);

/* Sources: interned; the key is borrowed (a new reference is kept). */
int cap_source_add(cap_trace *T, int kind, int parent, int frame, int index, PyObject *key);
void cap_source_str(const cap_source *src, int nsrc, int id, char *buf, size_t size);
/* Installs a guard (deduplicated). */
int cap_guard_add(cap_trace *T, int kind, int src, PyObject *obj, int64_t n);
/* Argument identity: tensors reached by two sources that were one object
 * are one graph input under a SAME guard; the others get one DISTINCT guard
 * (added when the trace ends), so that f(a, a) and f(a, b) never share a
 * graph. Parameters and buffers of modules are left out of it (cost). */
int cap_t_identity_guards(cap_trace *T);
bool cap_identity_guard_ok(const cap_guard *g, PyObject *const *vals);
/* In-place writes to inputs (inplace.c). A tensor input read: its storage is
 * noted; one an input written before shares is a GraphBreak (-1, set). */
int cap_t_note_input(cap_trace *T, PyObject *real, int src, const char *name);
/* Before t, an input, is first written: a break when another input shares
 * its storage. CAP_NEXT or CAP_BREAK. */
int cap_t_check_unshared(cap_trace *T, cap_tensor *t);
/* May t, a graph input, take the value nv in place? CAP_NEXT when it may
 * (then cap_t_note_written records it), else a PTC-B012 break: constants,
 * aliases of another input, inputs or values that require gradients. */
int cap_t_check_writable(cap_trace *T, cap_tensor *t, ptc_value *nv);
/* At the end: the NOALIAS guard over the written inputs (0 / -1). */
int cap_t_alias_guards(cap_trace *T);
bool cap_noalias_guard_ok(const cap_guard *g, PyObject *const *vals);
/* The source an outside object was reached by, or -1. */
int cap_t_source_of(cap_trace *T, PyObject *obj);
/* Functions made while tracing (recipes rebuild them; any other function is
 * an existing object, used as itself). */
int cap_t_note_function(cap_trace *T, PyObject *fn);
bool cap_t_made_function(cap_trace *T, PyObject *fn);
/* The objects of a dict id(obj) -> obj: note one, or ask if it is there. */
int cap_t_note_made(PyObject *made, PyObject *obj);
bool cap_t_was_made(PyObject *made, PyObject *obj);
/* Classes made while tracing (classes.c): a class statement, namedtuple or
 * a dataclasses call whose inputs are all known while tracing runs for real
 * as one call (CAP_NEXT, CAP_BREAK, CAP_ERR; the factory call CAP_NONE when
 * fn is no class factory or takes other arguments). */
int cap_t_note_class(cap_trace *T, PyObject *cls);
bool cap_t_made_class(cap_trace *T, PyObject *cls);
int cap_t_build_class(cap_interp *I, PyObject *build_class, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out);
int cap_t_class_factory_call(cap_trace *T, PyObject *fn, PyObject *const *args, int nargs,
                             PyObject *kwnames, PyObject **out);
/* id(obj) while tracing: the value, remembered with its object (ids.c). */
int cap_t_id(cap_trace *T, PyObject *obj, PyObject **out);
/* The object whose id() v is, when the trace took it (borrowed), or NULL. */
PyObject *cap_t_id_object(cap_trace *T, PyObject *v);
/* Is v such an id, or a tuple holding one? */
bool cap_t_holds_id(cap_trace *T, PyObject *v);
/* Is v (this object) an id the resume state the trace starts from holds? */
bool cap_t_resumed_id(cap_trace *T, PyObject *v);
/* An operator or a format on v: a break when v is such an id (CAP_NEXT or
 * CAP_BREAK). */
int cap_t_check_id_use(cap_trace *T, PyObject *v);
/* Records that obj is reached by src (no guard). */
int cap_t_map(cap_trace *T, PyObject *obj, int src);
/* An object reached from outside: installs the guards its type calls for and
 * returns what the interpreter should hold instead (a cap_tensor for tensors).
 * New reference. */
PyObject *cap_t_wrap(cap_trace *T, PyObject *obj, int src);
/* The defaults f's call bound that are not constants (defaults: its
 * function's __defaults__ or __kwdefaults__, reached by defaults_src) become
 * outside objects reached through it: tensors graph inputs (0 / -1). */
int cap_t_wrap_defaults(cap_trace *T, cap_frame *f, PyObject *defaults, int defaults_src);
/* A value read from outside: wrapped with guards when src, its source, is
 * known (>= 0), else itself. CAP_NEXT or CAP_ERR. */
int cap_t_outside_value(cap_trace *T, PyObject *v, int src, PyObject **out);
/* v, read from the outside object at source parent (an attribute, item or
 * index of it: kind, index, key), through its derived source. */
int cap_t_derived(cap_trace *T, PyObject *v, int kind, int parent, int index, PyObject *key,
                  PyObject **out);
/* d[key] as d stores it (dict's own lookup, whatever a subclass overrides),
 * read through d's source; eager's KeyError when missing. */
int cap_t_stored_dict_item(cap_trace *T, PyObject *d, PyObject *key, PyObject **out);

/* type(obj) (one argument), as eager's; of an outside object, reached by
 * type(obj). CAP_NEXT or CAP_ERR. */
int cap_t_type_of(cap_trace *T, PyObject *obj, PyObject **out);

/* Records a break at the current instruction; returns CAP_BREAK. */
int cap_t_break(cap_trace *T, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The break of the trace this one repeats (T->redo), at the current
 * instruction. */
int cap_t_break_again(cap_trace *T);
/* A pending Python exception while tracing becomes a break (GraphBreak
 * exceptions carry their code). Returns CAP_BREAK, or CAP_ERR for internal
 * errors that must not be retried. */
int cap_trace_error(cap_interp *I);
/* Raises the GraphBreak signal exception with a code (for code running for
 * real inside a trace, e.g. a symbolic tensor's __bool__). Returns NULL. */
PyObject *cap_signal_break(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
extern PyObject *cap_GraphBreakError; /* public: fullgraph=True */

/* Interpreter hooks (see ops_flow.c). */
int cap_t_load_state(cap_interp *I, cap_frame *f, int slot);
void cap_t_closure_cell(cap_trace *T, cap_frame *f, int i, PyObject *cell);
int cap_t_load_cell(cap_trace *T, PyObject *cell, PyObject **v);

/* Is obj a value that can be used as a compile-time constant (immutable and
 * made of constants)? */
bool cap_is_constant(PyObject *obj);
/* numpy values (numpy_values.c). A numpy scalar of a bool, integer or
 * floating type is a constant, and as a torch operand the Python number
 * torch reads it as (an int for numpy integers, a float for the rest; new
 * reference). An ndarray (exactly that type) reaches a graph as
 * torch.from_numpy of it: a new tensor sharing its memory, or NULL with an
 * error (a read-only array too: torch warns of writes through it); with
 * flip_dims (a tuple, or NULL or None for none), of np.flip(a, flip_dims),
 * which is how numpy code takes an array whose strides run backwards along
 * those dims (cap_ndarray_backward_dims: a new tuple, or None), since
 * torch has no negative strides. */
bool cap_is_numpy_scalar(PyObject *o);
PyObject *cap_numpy_scalar_number(PyObject *o);
bool cap_is_ndarray(PyObject *o);
/* An ndarray the trace reaches from the call's inputs (objects.c). */
bool cap_t_is_outside_array(cap_trace *T, PyObject *o);
PyObject *cap_ndarray_tensor(PyObject *a, PyObject *flip_dims);
PyObject *cap_ndarray_backward_dims(PyObject *a);
/* An enum member (compared by identity and taken as a constant). */
bool cap_is_enum_member(PyObject *o);
/* __defaults__ (kw false) or __kwdefaults__ (kw true) made of constants only. */
bool cap_constant_defaults(PyObject *d, bool kw);
/* A dict key whose lookups are stable under guards: a constant, a class, a
 * module or a function. */
bool cap_is_key(PyObject *o);
/* Is obj outside (has a source)? */
bool cap_t_outside(cap_trace *T, PyObject *obj);
/* A dict made in this trace: it holds the trace's own objects, so a symbolic
 * tensor key is found by identity (its hash is its id) as eager finds the
 * tensor; an outside dict holds the real tensors, so lookups there break. */
bool cap_t_dict_of_trace(cap_trace *T, PyObject *obj);

/* ---- side effects on outside objects (effects.c) ------------------------------ */

/* The kinds of logged mutation, each replayed after the graph by one
 * routine (entry_run.c): X(id, uses key, uses value). */
#define CAP_EFFECT_KINDS(X)                                                                        \
    X(ATTR_SET, 1, 1)    /* setattr(obj, key, value) */                                            \
    X(ATTR_DEL, 1, 0)    /* delattr(obj, key) */                                                   \
    X(ITEM_SET, 1, 1)    /* obj[key] = value: a list, dict or a module's globals */                \
    X(ITEM_DEL, 1, 0)    /* del obj[key] */                                                        \
    X(APPEND, 0, 1)      /* obj.append(value) */                                                   \
    X(EXTEND, 0, 1)      /* obj.extend(value), value the list of items */                          \
    X(INSERT, 1, 1)      /* obj.insert(key, value) */                                              \
    X(POP, 1, 0)         /* obj.pop(key), key a list index */                                      \
    X(CLEAR, 0, 0)       /* obj.clear(): a list or dict */                                         \
    X(CELL_SET, 0, 1)    /* obj.cell_contents = value */                                           \
    X(CELL_DEL, 0, 0)    /* del obj.cell_contents */                                               \
    X(SET_ADD, 0, 1)     /* obj.add(value): a set */                                               \
    X(SET_DISCARD, 0, 1) /* obj.discard(value): a set */                                           \
    X(ITER_NEXT, 0, 0)   /* next(obj): an outside iterator */

typedef enum {
#define X(id, k, v) CAP_E_##id,
    CAP_EFFECT_KINDS(X)
#undef X
        CAP_E_COUNT
} cap_effect_kind;
bool cap_effect_has_key(int kind);
bool cap_effect_has_value(int kind);

/* Logs a mutation (key, value NULL where the kind has none). */
int cap_t_effect(cap_interp *I, int kind, PyObject *obj, PyObject *key, PyObject *value);
/* What operations on *obj should read: an outside list or dict written in
 * this trace is replaced by its shadow (made on first need: the object's
 * items through their sources, then the writes so far). */
int cap_t_current(cap_interp *I, PyObject **obj);
/* Whether this trace logged a write to the outside list, dict or cell obj. */
bool cap_t_written(cap_trace *T, PyObject *obj);
/* A key of an outside dict as this trace left it: 1 written (*v borrowed),
 * 0 deleted or cleared, -1 not written (read the dict itself). */
int cap_t_dict_written(cap_trace *T, PyObject *d, PyObject *key, PyObject **v);
/* d.get(key) on an outside dict as this trace sees it: the key's presence
 * guarded, *out the value (through its source) or NULL when it is missing. */
int cap_t_dict_lookup(cap_interp *I, PyObject *d, PyObject *key, PyObject **out);
/* obj[key] = v (v NULL: del) on an outside list or dict; CAP_NONE for
 * other objects. */
int cap_t_outside_item_write(cap_interp *I, PyObject *obj, PyObject *key, PyObject *v);
/* list += items for one of ptc's lazy iterators: list.extend consuming it
 * item by item, as CPython's list_extend does (calls.c); CAP_NONE for any
 * other items. */
int cap_t_list_iadd(cap_interp *I, PyObject *list, PyObject *items);
/* A mutating method of an outside list or dict (append, extend, insert,
 * pop, remove, clear; update, pop, setdefault, clear); CAP_NONE for others. */
int cap_t_outside_mutator(cap_interp *I, PyObject *self, const char *name, PyObject *const *args,
                          int nargs, PyObject *kwnames, PyObject **out);
/* STORE_GLOBAL / DELETE_GLOBAL (v NULL) and LOAD_GLOBAL of a written name
 * (CAP_NONE: not written). */
int cap_t_global_write(cap_interp *I, cap_frame *f, PyObject *name, PyObject *v);
int cap_t_global_written(cap_interp *I, cap_frame *f, PyObject *name, PyObject **out);
/* Attribute name of module mod as written in this trace (CAP_NONE: not written). */
int cap_t_module_attr_written(cap_trace *T, PyObject *mod, PyObject *name, PyObject **out);
/* obj.__dict__ read in a trace that wrote obj's attributes (attrs: name ->
 * [value], or () for deleted): reads of the dict then see those writes; and
 * an attribute write after such a read, seen by the dict too. */
int cap_t_instance_dict_read(cap_trace *T, PyObject *obj, PyObject *attrs);
int cap_t_instance_dict_write(cap_trace *T, PyObject *obj, PyObject *name, PyObject *v);
/* STORE_DEREF / DELETE_DEREF (v NULL): *done when the write was logged
 * (the cell is an outside function's) instead of made. */
int cap_t_write_cell(cap_interp *I, PyObject *cell, PyObject *v, bool *done);
/* An object's source kept as a constant (a module's globals dict). */
int cap_t_const_source(cap_trace *T, PyObject *obj);

/* Symbolic sizes while tracing (symint.c). */
/* Which dims of tensor obj (reached by src, metadata m) get symbols: marks
 * (mark_dynamic / mark_static), the dynamic= option and the dims a size-only
 * recompile made automatic. Returns the mask; -1 with an exception. */
int cap_t_dynamic_dims(cap_trace *T, PyObject *obj, int src, const cap_tmeta *m);
/* At the end of a recompile's trace under dynamic=None: marks the dims of
 * tensors new in it whose size a changed dim had before as automatic, and
 * says so in why (appended); true when it marked any (trace again). */
bool cap_t_follow_changed_sizes(cap_trace *T, char *why, size_t size);
/* The symbol for dim `dim` of the tensor at src (size `size`): an existing
 * symbol of the same size (guarded equal), else a new one, guarded >= 2. */
ptc_dim cap_t_input_dim(cap_trace *T, int src, int dim, int64_t size, PyObject *obj);
/* Guards "d rel 0" (rel: Py_LT..Py_GE) unless d is static. 0 / -1. */
int cap_t_sym_guard(cap_trace *T, ptc_dim d, int rel);
/* The value of d in this trace (its symbols' sizes). */
int64_t cap_t_dim_hint(cap_trace *T, ptc_dim d);
/* Hands T->g the shape env that answers the meta functions' size relations
 * from this trace's sizes (s1 == 2*s0 becomes a guard and a rewrite). */
void cap_t_shape_env_init(cap_trace *T);
/* A Python int for d: an int when static, else a cap_symint. New reference. */
PyObject *cap_dim_obj(cap_trace *T, ptc_dim d);
/* An int or a cap_symint as a dim: 1 done, 0 not an int, -1 error. */
int cap_dim_from_obj(cap_trace *T, PyObject *o, ptc_dim *out);
/* The value of a symint, which a use needs: guards d == value and notes
 * where (for ptexplain). 0 / -1. */
int cap_symint_specialise(cap_symint *s, const char *why, int64_t *out);
/* A trace that used symbols met something only static sizes can do: records
 * why (the caller retraces with static sizes) and returns CAP_BREAK. */
int cap_t_need_static(cap_trace *T, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline bool cap_t_symbolic(cap_trace *T) { return T->syms.n > 0; }

/* ---- more of the trace (lifecycle.c, nodes.c, callables.c, objects.c, calls.c, builtins.c,
 *      sync_calls.c) ---- */

void cap_source_line(const char *file, int line, char *buf, size_t size);
void cap_input_name(cap_trace *T, int src, char *buf, size_t size);
int cap_t_add_input(cap_trace *T, int src, PyObject *const_tensor);
void cap_t_track_tensor(cap_trace *T, PyObject *t);
const char *cap_t_intern_str(cap_trace *T, const char *s);
void cap_t_note_node(cap_trace *T, ptc_node *n);
bool cap_t_value_grad(cap_trace *T, ptc_value *v);
int cap_t_note_written(cap_trace *T, cap_tensor *t);
bool cap_t_is_written(cap_trace *T, cap_tensor *t);
uint64_t cap_t_next_seed(cap_trace *T);
/* The traced function seeds torch's generator (torch.manual_seed): its random
 * ops must give torch's values. */
bool cap_t_seeds_torch(cap_trace *T);
const char *cap_module_path(cap_trace *T, PyObject *mod);
/* The key of the call f is making, as no_inline holds it: (id(code), pc). */
PyObject *cap_t_call_site(const cap_frame *f);
bool cap_t_no_inline(cap_trace *T, cap_frame *f);
void cap_t_note_skipped(cap_trace *T, PyObject *obj);
/* What marks fn never to be traced ("ptc.disable", "torch.compiler.disable"), or NULL. */
const char *cap_disabled_by(PyObject *fn);
const char *cap_func_name(PyObject *fn);
/* Why a call to fn ends the graph on ptc's own request (trace_split.c), or NULL. */
const char *cap_graph_split_reason(PyObject *fn, PyObject *const *args, int nargs);
/* A call to ptc._split.graph_cut: the cut is noted in T (not a break) and
 * true returned; false for any other fn. -1 on error. */
int cap_t_graph_cut(cap_trace *T, PyObject *fn, PyObject *const *args, int nargs);
bool cap_is_partial(PyObject *o);
bool cap_is_exact_partial(PyObject *o); /* functools.partial itself, no subclass */
int cap_partial_unpack(PyObject *p, PyObject **fn, PyObject **args, PyObject **kw);
int cap_t_call_partial(cap_interp *I, PyObject *fn, PyObject *pargs, PyObject *pkw,
                       PyObject *const *args, int nargs, PyObject *kwnames, PyObject **out);
bool cap_is_pure_fn(PyObject *fn);
/* One of those that writes its first argument (heapq.heappush, bisect.insort,
 * operator.setitem, _collections._count_elements). */
bool cap_pure_fn_writes(PyObject *fn);
/* A functools.lru_cache / cache wrapper called (lru.c); CAP_NONE for other
 * callables. */
int cap_t_call_lru(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                   PyObject *kwnames, PyObject **out);
/* A call of an operator.itemgetter/attrgetter/methodcaller object, traced
 * as the subscripts, attribute reads or call it stands for; CAP_NONE when
 * callable is none of them (trace_operator.c). */
int cap_t_call_getter(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out);
/* A call of an operator function of an operator (operator.add(a, b), ...)
 * on what is not all constants, traced as the operator it stands for (a +
 * b); CAP_NONE for other calls (trace_operator.c). */
int cap_t_call_operator(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                        PyObject *kwnames, PyObject **out);
int cap_torch_special_call(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                           PyObject *kwnames, PyObject **out);
bool cap_global_hooks(void);
bool cap_frozen_globals(PyObject *globals);
PyObject *cap_break_dict(const cap_break *b);

/* A PTC-B009 break where C code would run one of obj's iteration methods
 * written in Python (__iter__, __getitem__, __contains__, __len__, __next__)
 * for real after this trace wrote outside objects: it would read them before
 * the replay writes them. CAP_NEXT otherwise. */
int cap_t_check_protocol_read(cap_trace *T, PyObject *obj);
/* Whether C code iterating obj (list.extend, set.update) runs a Python
 * __iter__: obj is no list, tuple, set or dict, whose items C code reads
 * directly. */
bool cap_t_iterates_in_python(PyObject *obj);

/* A torch tensor (not a symbolic one) met while tracing (objects.c). */
bool cap_t_is_real_tensor(PyObject *o);
int cap_t_getattr(cap_interp *I, PyObject *obj, PyObject *name, PyObject **out);
int cap_t_setattr(cap_interp *I, PyObject *obj, PyObject *name, PyObject *v);
/* object.__getattribute__ / object.__setattr__ called explicitly (super()). */
int cap_t_getattr_generic(cap_interp *I, PyObject *obj, PyObject *name, PyObject **out);
int cap_t_setattr_generic(cap_interp *I, PyObject *obj, PyObject *name, PyObject *v);
int cap_t_getitem(cap_interp *I, PyObject *obj, PyObject *key, PyObject **out);
int cap_t_setitem(cap_interp *I, PyObject *obj, PyObject *key, PyObject *v);
int cap_t_iter(cap_interp *I, PyObject *obj, PyObject **out);
int cap_t_next(cap_interp *I, PyObject *it, PyObject **out);
PyObject *cap_t_materialize(cap_interp *I, PyObject *obj, int *rc);
int cap_t_load_global(cap_trace *T, cap_frame *f, PyObject *name, PyObject *v, bool builtin,
                      PyObject **out);
int cap_t_truth_guard(cap_trace *T, PyObject *v);
int cap_t_contains_guard(cap_trace *T, PyObject *container, PyObject *item);
/* An operator's operands: an outside list, tuple or dict becomes a plain copy
 * of its items reached through sources (borrowed, kept by the trace), so
 * that d | {...}, l + [x] and l == m read it under guards; an outside set
 * breaks. CAP_NEXT, CAP_BREAK or CAP_ERR. */
int cap_t_check_operands(cap_trace *T, PyObject **a, PyObject **b, bool arithmetic);
int cap_t_check_format(cap_trace *T, PyObject *v);
int cap_t_before_with(cap_interp *I, cap_frame *f, PyObject *mgr);
PyObject *cap_t_flow(cap_trace *T, PyObject *obj);
/* A read of orig, an outside set seen as now, whose answer depends on its
 * order (a copy, a union...): CAP_NEXT, or a break (B009) where the trace
 * wrote it, its order then being the real set's, which no copy keeps. */
int cap_t_written_set_read(cap_trace *T, PyObject *orig, PyObject *now);
/* The items an outside list, tuple or dict holds in its own storage (what
 * its type's C methods read, whatever a subclass overrides) as a plain
 * list, tuple or dict of values reached through sources, under guards;
 * obj itself for other objects and those the trace made. */
PyObject *cap_t_stored_items(cap_trace *T, PyObject *obj);
/* A dict of the items an outside OrderedDict or defaultdict d stores (a
 * plain dict, in d's order), as one of d's type: an OrderedDict, or a
 * defaultdict with d's default_factory (read through d's source, guarded);
 * items itself for d of another type. New ref, or NULL with an error. */
PyObject *cap_t_dict_as_its_type(cap_interp *I, PyObject *d, PyObject *items);
/* The tuple *t and dict *d of f(*args, **kw) (kw may be NULL) (star_args.c). */
int cap_t_expand_call_args(cap_trace *T, PyObject *func, PyObject *args, PyObject *kw,
                           PyObject **t, PyObject **d);
/* copy.copy(x) of a builtin container, traced as x.copy() (x itself for a
 * tuple, a frozenset or a constant); CAP_NONE for any other call (copies.c). */
int cap_t_copy_call(cap_interp *I, PyObject *fn, PyObject *const *args, int nargs,
                    PyObject *kwnames, PyObject **out);
/* A call of a generator function (code c) while tracing: a lazy generator
 * whose body runs traced as the program advances it (generators.c). */
int cap_t_generator_call(cap_interp *I, PyObject *fn, cap_code *c, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out);
/* cap_hooks.yield_from: `yield from receiver`, one of ptc's iterators,
 * advanced (sent: the value sent into the outer generator, None for a
 * plain step): *item, or NULL and *value the receiver's return value. */
int cap_t_yield_from(cap_interp *I, PyObject *receiver, PyObject *sent, PyObject **item,
                     PyObject **value);
/* next(it) found it exhausted: StopIteration, with the return value of a
 * generator that finished at this step (generators.c). */
void cap_t_raise_stop_iteration(PyObject *it);
int cap_t_call(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
               PyObject *kwnames, PyObject **out);
/* A method fn of a torch.optim optimizer (args[0]) called, or the wrapper
 * an LR scheduler puts on an optimizer's step (cap_t_is_lr_scheduler_step):
 * a break that runs it as one call; step, where ptc._optim supports it, as
 * ptc's compiled update (optim_step.c). CAP_BREAK or CAP_ERR. */
int cap_t_optimizer_step(cap_interp *I, PyObject *fn, PyObject *const *args, int nargs,
                         PyObject *kwnames);
bool cap_t_is_lr_scheduler_step(PyObject *fn);
/* Builtins (builtins.c): the id of a builtin answered while tracing (0 for
 * other callables), and its call. */
int cap_t_builtin_of(PyObject *callable);
int cap_t_builtin(cap_interp *I, int id, PyObject *callable, PyObject *const *args, int nargs,
                  PyObject *kwnames, PyObject **out);
/* Calls whose result is needed at once: nested runs (sync_calls.c). */
int cap_t_run_sync(cap_interp *I, cap_frame *outer, PyObject **out);
int cap_t_call_sync(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                    PyObject *kwnames, PyObject **out);
/* rc of an operation begun in frame outer; when it pushed a frame
 * (CAP_FRAME), that frame is run to its result (*out), as cap_t_call_sync. */
int cap_t_settle(cap_interp *I, cap_frame *outer, int rc, PyObject **out);
/* callable(args) run for real, with outside containers among args passed as
 * sourced copies and iterators over traced sequences drained (cap_t_flow;
 * objects.c). */
int cap_t_call_real_flowed(cap_trace *T, PyObject *callable, PyObject *const *args, int nargs,
                           PyObject *kwnames, PyObject **out);
/* An outside function is about to be inlined in frame f (not yet pushed):
 * guards what the trace will run of it. 0 or -1 with an exception. */
int cap_t_enter_frame(cap_trace *T, cap_frame *f);

/* ---- Python types of the interpreter's own values (iter.c, torch_types.c) ----------- */

typedef struct cap_iter {
    PyObject_HEAD
    PyObject *seq;          /* list or tuple; NULL for a range */
    Py_ssize_t i;           /* next index (reversed: the index CPython's would read next) */
    Py_ssize_t n;           /* range length */
    long long start, step;  /* range */
    int src;                /* source of an outside seq (items get index sources), or -1 */
    bool gen;               /* what a module iterator (parameters()...) yields: eager has a generator */
    bool rev;               /* reversed(seq): walks down from len - 1 */
    cap_trace *T;
    PyObject *owner;      /* a dict, dict view or set whose items seq holds (strong), or NULL */
    Py_ssize_t owner_len; /*   its size then: a change raises, as CPython's iterators do */
} cap_iter;
extern PyTypeObject *cap_iter_type;
PyObject *cap_iter_seq(PyObject *seq, int src, cap_trace *T);
/* Outside iterators advanced in the graph (iter_outside.c): whether it is
 * an outside tuple or range iterator; what one has left (a tuple or range,
 * new; NULL, no error, for other objects); next(it) on it, logged; whether this trace
 * advanced it. */
bool cap_t_outside_seq_iter(cap_trace *T, PyObject *it);
PyObject *cap_iter_rest(PyObject *it);
int cap_t_outside_iter_next(cap_interp *I, PyObject *it, PyObject **out);
bool cap_t_outside_iter_advanced(cap_trace *T, PyObject *it);
PyObject *cap_iter_range(long long start, long long step, Py_ssize_t n);
PyObject *cap_iter_next_raw(cap_iter *it);
/* The dict behind a keys/values/items view (its one referent: the limited
 * API has no accessor), borrowed from the view; NULL if not found. */
PyObject *cap_view_dict(PyObject *view);
void cap_iter_set_owner(cap_iter *it, PyObject *owner);
int cap_iter_types_init(PyObject *module);

/* A lazy iterator made while tracing (map, filter, zip, enumerate, the
 * itertools starmap, filterfalse, takewhile, dropwhile and accumulate, or a
 * generator expression): it holds its function and the iterators under it,
 * and advances them only when the program advances it. At a break or a
 * return it is rebuilt as the real builtin over the rebuilt iterators (its
 * __reduce__); a generator expression as a fresh generator over its
 * iterator, which is where a suspended one of a single for-loop stands. */
typedef enum {
    CAP_LAZY_MAP, CAP_LAZY_FILTER, CAP_LAZY_ZIP, CAP_LAZY_ENUMERATE, CAP_LAZY_STARMAP,
    CAP_LAZY_FILTERFALSE, CAP_LAZY_TAKEWHILE, CAP_LAZY_DROPWHILE, CAP_LAZY_ACCUMULATE,
    CAP_LAZY_ISLICE, CAP_LAZY_CHAIN, CAP_LAZY_ZIP_LONGEST, CAP_LAZY_GEN
} cap_lazy_kind;
/* States of a generator expression. */
typedef enum { CAP_GEN_READY, CAP_GEN_SUSPENDED, CAP_GEN_RUNNING, CAP_GEN_DONE, CAP_GEN_LOST } cap_gen_state;
typedef struct cap_lazy {
    PyObject_HEAD
    int kind;               /* cap_lazy_kind */
    PyObject *fn;           /* map, filter, starmap...: the function (filter, filterfalse,
                               accumulate: maybe None); generator: the genexpr or generator
                               function; zip_longest: fillvalue= (or NULL); else NULL */
    PyObject *its;          /* tuple of the iterators under it (zip_longest: None for one
                               exhausted; chain: its iterables, each made an iterator when
                               reached); a generator function's: its arguments, the last
                               len(kwnames) by keyword. Replaced, never changed in place */
    PyObject *kwnames;      /* a generator function's keywords (a tuple), or NULL */
    bool genfunc;           /* a generator function's (else a generator expression's) */
    PyObject *retval;       /* a finished generator's return value (yield from's), or NULL */
    PyObject *count;        /* enumerate: the next index (an int); accumulate: the running
                               total (NULL before the first item); islice: (next index to
                               give, stop or -1, step, items taken) as CPython keeps them;
                               chain: the index of the iterable it takes from */
    bool strict;            /* zip(strict=True) */
    bool from_source;       /* chain.from_iterable: its[0] is the iterator of iterables,
                               the rest those taken from it so far */
    bool switched;          /* takewhile: stopped; dropwhile: dropping done; accumulate:
                               count is initial=, not yielded yet; islice: done (CPython lets
                               go of its iterator); chain: its[count] is an iterator now */
    /* A generator (expression or function): its frame while suspended
       (owned), its state, and how many times it was advanced (cap_iter_mark). */
    cap_frame *frame;
    uint8_t state;          /* cap_gen_state */
    long steps;
    PyObject *site;         /* a generator function's whose body has a try or with
                               block: the call that made it, as a no_inline key, while
                               it lives (generators.c); else NULL */
} cap_lazy;
extern PyTypeObject *cap_lazy_type;
PyObject *cap_lazy_new(int kind, PyObject *fn, PyObject *its, PyObject *count, bool strict);
/* YIELD_VALUE: generator expression gen's frame f is suspended (gen owns it). */
void cap_gen_suspend(PyObject *gen, cap_frame *f);
static inline bool cap_is_ptc_iter(PyObject *o)
{
    return o && (Py_TYPE(o) == cap_iter_type || Py_TYPE(o) == cap_lazy_type);
}
/* The type eager code would see for one of ptc's stand-in values (a
 * symbolic tensor's fake type, list_iterator for a cap_iter over a list,
 * map for a lazy map...); Py_TYPE(o) for anything else. Borrowed. */
PyObject *cap_eager_type(PyObject *o);
/* Whether lazy iterator o stands over a C iterator (itertools.count(), a
 * file), at any depth: one that may not end, and whose advances are not
 * undone at a break, so it is never drained for C code (cap_t_flow). */
bool cap_lazy_over_c_iterator(PyObject *o);
/* The next item of a lazy iterator, traced (callbacks run in nested runs);
 * *out NULL when exhausted. A break inside puts every iterator under it
 * back where it was. */
int cap_t_lazy_next(cap_interp *I, cap_lazy *lz, PyObject **out);
/* Resumes generator g in a nested run, with sent as the value of the yield
 * it stands at (NULL: None) or with exception thrown raised there, up to its
 * next yield (*out) or its end (*out NULL; its return value kept). An
 * exception it raises comes back pending (CAP_ERR); cap_t_gen_error then
 * makes one that no traced handler catches a break. */
int cap_t_gen_run(cap_interp *I, cap_lazy *g, PyObject *sent, PyObject *thrown, PyObject **out);
int cap_t_gen_error(cap_interp *I, int rc);
/* generator.send(v), .throw(exc) and .close() of a generator the trace made
 * (CAP_NONE for another method). */
int cap_t_generator_method(cap_interp *I, cap_lazy *g, const char *name, PyObject *const *args,
                           int nargs, PyObject *kwnames, PyObject **out);
/* Tracks generator g, whose body has clean-up code, while it lives (iter.c);
 * site: the call that made it (cap_t_call_site). 0, or -1 with an error. */
int cap_t_generator_track(cap_lazy *g, PyObject *site);
/* Adds to no_inline the call sites of the generators with clean-up code that
 * this trace dropped or leaves suspended in a try or with block (their
 * clean-up would run when CPython frees them); returns how many it added. */
int cap_t_generators_unfinished(PyObject *no_inline);
/* Forgets the generators of an earlier trace. */
void cap_t_generators_reset(void);
/* next(it) run to its end here: a Python __next__ in a nested run, whose
 * StopIteration is the end (*out NULL). */
int cap_t_next_sync(cap_interp *I, PyObject *it, PyObject **out);
/* The running instruction, which wrote to objects item by item (its writes
 * logged), breaks and reruns for real: the trace is made again, breaking
 * before it, so that none of its writes happened (sync_calls.c). */
void cap_t_rerun_from_start(cap_interp *I);
/* iter(obj) run to its end here: a Python __iter__ in a nested run. */
int cap_t_iter_sync(cap_interp *I, PyObject *obj, PyObject **out);
/* Positions of the ptc iterators reachable from some values, taken before a
 * builtin consumes them and put back when it breaks: the instruction then
 * reruns for real from where eager would start. */
typedef struct cap_iter_marks {
    int n;
    bool overflow;
    struct {
        PyObject *it;
        Py_ssize_t i;
        PyObject *count, *its; /* a lazy iterator's */
        bool switched;
        long steps; /* a generator expression's */
    } m[32];
} cap_iter_marks;
void cap_iter_mark(cap_iter_marks *k, PyObject *const *objs, int n);
/* Puts the positions back when rc is a break or an error nothing in the
 * trace catches (both rerun the instruction for real); drops the marks.
 * Returns rc, or an internal error when some position was not kept. */
int cap_iter_rewind(cap_interp *I, cap_iter_marks *k, int rc);
/* `it in ...`: cap_hooks.iter_contains (iter.c). */
int cap_t_iter_contains(cap_interp *I, PyObject *it, PyObject *item, PyObject **out);
/* Will the current instruction rerun for real after rc (a break, or an
 * error no handler in the trace catches)? */
bool cap_t_reruns(cap_interp *I, int rc);

enum { CAP_EXIT_NONE = 0, CAP_EXIT_GRAD = 1, CAP_EXIT_AMP = 2 };
typedef struct cap_gradexit {
    PyObject_HEAD
    int kind;
    char prev; /* the grad mode restored on exit */
    int64_t amp_prev; /* CAP_EXIT_AMP: the autocast state restored (packed) */
} cap_gradexit;
extern PyTypeObject *cap_gradexit_type;
PyObject *cap_gradexit_new(int kind, bool prev);
int cap_set_grad_enabled(bool on);

typedef struct cap_method {
    PyObject_HEAD
    PyObject *self;         /* the symbolic tensor */
    const struct cap_tmap *map;
} cap_method;
extern PyTypeObject *cap_method_type;
PyObject *cap_method_new(PyObject *self, const struct cap_tmap *map);

#endif /* PTC_CAP_TRACE_H */
