/* ptc IR: the graph that every stage of the compiler reads and writes.
 *
 * Owns: arenas and errors (the two things every module uses), dtypes, devices,
 * symbolic sizes, tensor types, op schemas (the vocabulary of ops.def), graphs of
 * values and nodes with source locations and provenance, the .ptir printer and
 * parser, the structural verifier, and runtime tensors with their file format.
 * Nothing here knows what an op computes: shapes and kernels live in compiler/ops.
 */
#ifndef PTC_IR_H
#define PTC_IR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PTC_VERSION "0.1.0"

/* ------------------------------------------------------------------------------
 * Invariants and errors
 * ---------------------------------------------------------------------------- */

/* Aborts with file:line on a broken invariant. Never used for bad user input. */
#define PTC_ASSERT(cond)                                                        \
    ((cond) ? (void)0 : ptc_assert_fail(__FILE__, __LINE__, #cond))
_Noreturn void ptc_assert_fail(const char *file, int line, const char *cond);

/* Error classes: stable names, used by ptminify to pin failure signatures. */
#define PTC_ERRCLASSES(X)                                                       \
    X(NONE, "none")                                                             \
    X(PARSE, "ParseError")          /* malformed .ptir / schema / file */       \
    X(VERIFY, "VerifyError")        /* malformed graph */                       \
    X(META, "MetaError")            /* invalid op arguments or shapes */        \
    X(UNSUPPORTED, "Unsupported")   /* valid program we cannot handle yet */    \
    X(RUNTIME, "RuntimeError")      /* failure while running a graph */         \
    X(COMPILE, "CompileError")      /* failure inside a lowering/codegen pass */\
    X(IO, "IOError")                /* file system */                           \
    X(INJECTED, "InjectedError")    /* planted by PTC_INJECT */                 \
    X(INTERNAL, "InternalError")

typedef enum {
#define X(id, name) PTC_ERR_##id,
    PTC_ERRCLASSES(X)
#undef X
    PTC_ERR_COUNT
} ptc_errclass;

/* A user source location: where a captured op came from. All strings are owned
 * by the graph's arena (or static); any may be NULL. line/col are 1-based, 0 if
 * unknown. */
typedef struct ptc_srcloc {
    const char *file;
    int line, col;
    const char *text; /* the source text span of the expression */
} ptc_srcloc;

/* Every fallible function returns 0 / -1 (or a pointer / NULL) and fills one of
 * these. The message is one line; `file`/`line`/`col` locate the problem in an
 * input file (parse errors) or in the user's source (meta errors on captured
 * nodes). */
typedef struct ptc_error {
    ptc_errclass cls;
    char stage[32];    /* "parse", "verify", "meta", "interp", "codegen", ... */
    char msg[1024];
    char file[256];    /* input file or user source file; "" if none */
    int line, col;     /* 0 if unknown */
    char text[256];    /* user source text (for a caret), "" if none */
    bool has_node;     /* the error is about one node of a graph: */
    int node_id;       /*   its ptc_node.id */
    /* A run failed after a kernel had written a graph input in place: the
     * inputs hold part of the new values, so the graph must not be run again
     * from them (a fallback to eager would apply an update twice). */
    bool inputs_written;
} ptc_error;

/* Fills err (if non-NULL) and returns -1. */
int ptc_errorf(ptc_error *err, ptc_errclass cls, const char *stage, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int ptc_verrorf(ptc_error *err, ptc_errclass cls, const char *stage, const char *fmt,
                va_list ap);
/* Attach a location (file may be NULL) to an already-filled error. */
void ptc_error_at(ptc_error *err, const char *file, int line, int col);
const char *ptc_errclass_name(ptc_errclass cls);
/* "file:line:col: stage: ErrorClass: msg" (parts omitted when empty). */
void ptc_error_format(const ptc_error *err, char *buf, size_t size);
void ptc_error_clear(ptc_error *err);

/* Ctrl-C. A host whose SIGINT handler only sets a flag (Python's) says how to
 * ask whether the user interrupted; a wait that can be long (a planted hang,
 * a compile worker's build) asks every few milliseconds and ends as an error,
 * leaving the interrupt pending for the host to act on. Without a hook,
 * ptc_interrupted() is false: SIGINT's default action ends the process. */
void ptc_set_interrupt_check(bool (*interrupted)(void));
bool ptc_interrupted(void);

/* ------------------------------------------------------------------------------
 * Arenas: every IR object of one compile lives in one and dies with it.
 * ---------------------------------------------------------------------------- */

typedef struct ptc_arena ptc_arena;
ptc_arena *ptc_arena_new(void);
void ptc_arena_free(ptc_arena *a);
/* Zeroed, 16-byte aligned. When malloc fails the arena is marked failed and
 * the process's reserve serves the request (an abort only when that is gone
 * too): callers check ptc_arena_failed where they can stop. */
void *ptc_arena_alloc(ptc_arena *a, size_t size);
bool ptc_arena_failed(const ptc_arena *a); /* ran out of memory; sticky */
/* Takes the process's memory reserve (the room a compile that runs out has
 * to fail cleanly) if it is not held; false when only a smaller one could be
 * had (the library goes on with it; a tool that wants every compile to fail
 * cleanly stops at once with one line). */
bool ptc_memory_reserve_full(void);
void *ptc_arena_dup(ptc_arena *a, const void *p, size_t size);
char *ptc_arena_strdup(ptc_arena *a, const char *s);  /* NULL -> NULL */
char *ptc_arena_strndup(ptc_arena *a, const char *s, size_t n);
char *ptc_arena_printf(ptc_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
size_t ptc_arena_bytes(const ptc_arena *a); /* total bytes handed out */
#define PTC_NEW(arena, T) ((T *)ptc_arena_alloc((arena), sizeof(T)))
#define PTC_NEWN(arena, T, n) ((T *)ptc_arena_alloc((arena), sizeof(T) * (size_t)(n)))

/* A growable string, malloc-backed (printers write into one). Running out
 * of memory does not abort: as an arena does, the first growth malloc
 * cannot give releases the reserve and marks the string failed (sticky);
 * where even that is not enough the write and every later one are dropped,
 * so the text is always a prefix of what was written. Whoever uses a
 * string a compile depends on checks ptc_buf_failed. */
typedef struct ptc_buf {
    char *data;
    size_t len, cap;
    bool failed;    /* out of memory once: its user fails */
    bool truncated; /* a write was dropped: later ones are too */
} ptc_buf;
bool ptc_buf_failed(const ptc_buf *b);
void ptc_buf_printf(ptc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ptc_buf_vprintf(ptc_buf *b, const char *fmt, va_list ap);
void ptc_buf_puts(ptc_buf *b, const char *s);
void ptc_buf_putn(ptc_buf *b, const char *s, size_t n);
void ptc_buf_putc(ptc_buf *b, char c);
void ptc_buf_free(ptc_buf *b);
/* Appends a double-quoted C-escaped string. */
void ptc_buf_put_quoted(ptc_buf *b, const char *s);

/* ------------------------------------------------------------------------------
 * Dtypes and devices
 * ---------------------------------------------------------------------------- */

/* X(ID, name, size, kind): kind 0 bool, 1 unsigned int, 2 signed int, 3 float.
 * Order matters: it is the order used by promotion tables. */
#define PTC_DTYPES(X)      \
    X(BOOL, "bool", 1, 0)  \
    X(U8, "u8", 1, 1)      \
    X(I8, "i8", 1, 2)      \
    X(I16, "i16", 2, 2)    \
    X(I32, "i32", 4, 2)    \
    X(I64, "i64", 8, 2)    \
    X(F16, "f16", 2, 3)    \
    X(BF16, "bf16", 2, 3)  \
    X(F32, "f32", 4, 3)    \
    X(F64, "f64", 8, 3)

typedef enum {
    PTC_DTYPE_NONE = -1, /* an absent optional dtype */
#define X(id, name, size, kind) PTC_##id,
    PTC_DTYPES(X)
#undef X
    PTC_DTYPE_COUNT
} ptc_dtype;

const char *ptc_dtype_name(ptc_dtype t);     /* "f32"; "none" for PTC_DTYPE_NONE */
int ptc_dtype_from_name(const char *name);   /* -1 if unknown; accepts "float32" etc. too */
size_t ptc_dtype_size(ptc_dtype t);
bool ptc_dtype_is_float(ptc_dtype t);
bool ptc_dtype_is_int(ptc_dtype t);          /* integral, excluding bool */
bool ptc_dtype_is_bool(ptc_dtype t);
/* torch.promote_types(a, b). */
ptc_dtype ptc_dtype_promote(ptc_dtype a, ptc_dtype b);

typedef enum { PTC_DEV_CPU = 0, PTC_DEV_CUDA = 1 } ptc_devkind;
typedef struct ptc_device {
    uint8_t kind;   /* ptc_devkind */
    int16_t index;  /* -1 = current (cpu is always -1) */
} ptc_device;
#define PTC_CPU ((ptc_device){PTC_DEV_CPU, -1})
bool ptc_device_eq(ptc_device a, ptc_device b);
/* "cpu", "cuda", "cuda:1". */
void ptc_device_str(ptc_device d, char *buf, size_t size);
int ptc_device_parse(const char *s, ptc_device *out); /* 0 / -1 */

/* ------------------------------------------------------------------------------
 * Symbolic sizes
 *
 * A dimension is either a plain integer or an integer expression over named
 * symbols (s0, s1, ...). Expressions are kept in one canonical form, a polynomial
 * with integer coefficients whose atoms are symbols, floor divisions and
 * modulos, so two equal expressions print identically and compare equal
 * structurally. Constructors simplify (constant folding, exact division,
 * x//1, x%1, ...).
 * ---------------------------------------------------------------------------- */

typedef struct ptc_sym ptc_sym; /* canonical polynomial; never a plain constant */

typedef struct ptc_dim {
    int64_t value;        /* the size when sym == NULL */
    const ptc_sym *sym;   /* non-NULL: a symbolic expression */
} ptc_dim;

static inline ptc_dim ptc_dim_c(int64_t v) { return (ptc_dim){v, NULL}; }
static inline bool ptc_dim_is_static(ptc_dim d) { return d.sym == NULL; }
ptc_dim ptc_dim_symbol(ptc_arena *a, const char *name);
ptc_dim ptc_dim_add(ptc_arena *a, ptc_dim x, ptc_dim y);
ptc_dim ptc_dim_sub(ptc_arena *a, ptc_dim x, ptc_dim y);
ptc_dim ptc_dim_mul(ptc_arena *a, ptc_dim x, ptc_dim y);
/* Floor division and Python-style modulo. Division by a static 0 is the
 * caller's bug (asserted); by a symbolic value is assumed non-zero. */
ptc_dim ptc_dim_floordiv(ptc_arena *a, ptc_dim x, ptc_dim y);
ptc_dim ptc_dim_mod(ptc_arena *a, ptc_dim x, ptc_dim y);
ptc_dim ptc_dim_ceildiv(ptc_arena *a, ptc_dim x, ptc_dim y); /* -((-x)//y) */
bool ptc_dim_eq(ptc_dim x, ptc_dim y);       /* structural, after canonicalisation */
/* x / y when y (a non-zero constant or a single monomial such as 4*s0*s1)
 * divides every term of x exactly: true with *quot set; false when that cannot
 * be shown. Used to simplify index arithmetic over symbolic sizes. */
bool ptc_dim_div_exact(ptc_arena *a, ptc_dim x, ptc_dim y, ptc_dim *quot);
/* True when d >= 0 for all non-negative symbol values (sufficient test: no
 * negative constant or coefficient, atoms over non-negative operands). */
bool ptc_dim_nonneg(ptc_dim d);
/* d with symbol `name` replaced by `by` (canonical again). */
ptc_dim ptc_dim_subst(ptc_arena *a, ptc_dim d, const char *name, ptc_dim by);
/* Does a graph input's dim d determine its one symbol (s0, 4*s2, 2*s0+1)?
 * Sets *name; with value, also the symbol's value for which d is size (false
 * when there is none). */
bool ptc_dim_binds(ptc_dim d, const char **name, int64_t size, int64_t *value);
/* Solves d == 0 for symbol `name` when d is linear in it (c*name + rest, name
 * nowhere in rest, c dividing rest): *out = -rest/c. False otherwise. */
bool ptc_dim_solve(ptc_arena *a, ptc_dim d, const char *name, ptc_dim *out);
/* Copies an expression into another arena (for moving types between graphs). */
ptc_dim ptc_dim_copy(ptc_arena *a, ptc_dim d);
/* Canonical text: "16", "s0", "2*s0+1", "(s0+1)//2". */
void ptc_dim_print(ptc_buf *b, ptc_dim d);
/* Symbol names used by d, appended to names[] (deduplicated), up to max. */
int ptc_dim_symbols(ptc_dim d, const char **names, int n, int max);

/* Symbol bindings for evaluation at run time. */
typedef struct ptc_bindings {
    int n;
    const char *names[32];
    int64_t values[32];
} ptc_bindings;
int ptc_bindings_set(ptc_bindings *b, const char *name, int64_t value); /* -1 if full */
bool ptc_bindings_get(const ptc_bindings *b, const char *name, int64_t *value);
/* ptc_dim_binds once the symbols in `known` are bound: d is c*name plus
 * terms over known symbols (s5 + s4 - 2 binds s5 once s4 is known; a
 * relation over two sizes made one of them such a sum: symint.c). known may
 * be NULL. */
bool ptc_dim_binds_given(ptc_dim d, const ptc_bindings *known, const char **name, int64_t size,
                         int64_t *value);
/* The least and greatest values of d when each symbol lies in its range
 * (lo and hi hold the bounds by name; a bound not given is unbounded,
 * reported as INT64_MIN / INT64_MAX). Interval arithmetic: the bounds hold,
 * though they need not be tight. */
void ptc_dim_range(ptc_dim d, const ptc_bindings *lo, const ptc_bindings *hi, int64_t *min,
                   int64_t *max);
/* Evaluates d. Returns -1 (with err) if a symbol is unbound. */
int ptc_dim_eval(ptc_dim d, const ptc_bindings *b, int64_t *out, ptc_error *err);
/* Parses a dim expression ("2*s0+1"). Used by the .ptir parser; on error sets
 * *end to the failing position. */
int ptc_dim_parse(ptc_arena *a, const char *s, const char **end, ptc_dim *out, ptc_error *err);

/* ------------------------------------------------------------------------------
 * Tensor types
 * ---------------------------------------------------------------------------- */

#define PTC_MAX_DIMS 8

typedef enum {
    PTC_LAYOUT_CONTIGUOUS = 0, /* row-major; strides not stored */
    PTC_LAYOUT_STRIDED = 1,    /* explicit strides (in elements) */
} ptc_layout;

typedef struct ptc_ttype {
    ptc_dtype dtype;
    int8_t ndim;
    uint8_t layout;       /* ptc_layout */
    bool requires_grad;
    ptc_device device;
    ptc_dim shape[PTC_MAX_DIMS];
    ptc_dim strides[PTC_MAX_DIMS]; /* valid iff layout == PTC_LAYOUT_STRIDED */
} ptc_ttype;

/* A contiguous type with static sizes (convenience for tests and builders). */
ptc_ttype ptc_ttype_make(ptc_dtype dt, int ndim, const int64_t *sizes, ptc_device dev);
bool ptc_ttype_eq(const ptc_ttype *a, const ptc_ttype *b); /* dtype, shape, layout, device, grad */
bool ptc_ttype_is_static(const ptc_ttype *t);
/* Same rank and sizes (ptc_dim_eq). */
bool ptc_ttype_same_shape(const ptc_ttype *a, const ptc_ttype *b);
ptc_dim ptc_ttype_numel(ptc_arena *a, const ptc_ttype *t);
/* Contiguous strides for t's shape (symbolic when the shape is). */
void ptc_ttype_contiguous_strides(ptc_arena *a, const ptc_ttype *t, ptc_dim *strides);
/* "f32[s0,16]" plus "{1,4}" for explicit strides. With `full`, also the device
 * and " grad" when requires_grad (the graph-input form). */
void ptc_ttype_print(ptc_buf *b, const ptc_ttype *t, bool full);

/* ------------------------------------------------------------------------------
 * Op vocabulary
 *
 * compiler/ir/ops.def is the single table of ops. The IR uses its first three
 * columns (id, stage, schema); compiler/ops expands the rest (meta, reference
 * kernel, flags), later stages add theirs.
 * ---------------------------------------------------------------------------- */

typedef enum {
    PTC_STAGE_TORCH = 1, /* stage 1 ("captured") only */
    PTC_STAGE_PRIM = 2,  /* stage 2 ("prims") only */
    PTC_STAGE_BOTH = 3,  /* valid in both (externs, pools: already explicit) */
} ptc_opstage;

typedef enum {
#define OP(id, stage, schema, meta, ref, flags, ...) PTC_OP_##id,
#include "ir/ops.def"
#undef OP
    PTC_OP_COUNT
} ptc_op;

/* Argument kinds, as written in schema strings ("Tensor", "int[]?", ...). */
typedef enum {
    PTC_PK_TENSOR,        /* Tensor */
    PTC_PK_TENSOR_OPT,    /* Tensor? */
    PTC_PK_TENSOR_LIST,   /* Tensor[] */
    PTC_PK_TENSOR_OPT_LIST, /* Tensor?[] (advanced indexing) */
    PTC_PK_TENSOR_SCALAR, /* Tensor|Scalar: a tensor or a Python number */
    PTC_PK_TENSOR_SCALAR_OPT, /* Tensor|Scalar? */
    PTC_PK_SCALAR,        /* Scalar: int, float or bool */
    PTC_PK_SCALAR_OPT,    /* Scalar? */
    PTC_PK_INT,           /* int (may be symbolic) */
    PTC_PK_INT_OPT,       /* int? */
    PTC_PK_INT_LIST,      /* int[] or int[N] (N > 0: a single int is repeated N times) */
    PTC_PK_INT_LIST_OPT,  /* int[]? */
    PTC_PK_FLOAT,         /* float */
    PTC_PK_FLOAT_OPT,     /* float? */
    PTC_PK_BOOL,          /* bool */
    PTC_PK_STR,           /* str */
    PTC_PK_STR_OPT,       /* str? */
    PTC_PK_DTYPE,         /* ScalarType */
    PTC_PK_DTYPE_OPT,     /* ScalarType? */
    PTC_PK_DEVICE,        /* Device */
    PTC_PK_DEVICE_OPT,    /* Device? */
    PTC_PK_COUNT
} ptc_paramkind;

/* Argument values. */
typedef enum {
    PTC_ARG_NONE = 0,  /* None: an absent optional */
    PTC_ARG_VALUE,     /* a tensor value */
    PTC_ARG_VALUES,    /* a list of tensor values (entries NULL only for Tensor?[]) */
    PTC_ARG_INT,       /* int (ptc_dim: possibly symbolic) */
    PTC_ARG_INTS,      /* int list */
    PTC_ARG_FLOAT,     /* float (a Python float: matters for promotion) */
    PTC_ARG_BOOL,
    PTC_ARG_STR,
    PTC_ARG_DTYPE,
    PTC_ARG_DEVICE,
} ptc_argkind;

struct ptc_value;

typedef struct ptc_arg {
    uint8_t kind; /* ptc_argkind */
    union {
        struct ptc_value *v;
        struct { int n; struct ptc_value **v; } vs;
        ptc_dim i;
        struct { int n; ptc_dim *d; } is;
        double f;
        bool b;
        const char *s;
        ptc_dtype dt;
        ptc_device dev;
    };
} ptc_arg;

typedef struct ptc_param {
    const char *name;
    uint8_t kind;       /* ptc_paramkind */
    int8_t list_len;    /* int[N]: N; else 0 */
    bool kwarg_only;    /* after `*` in the schema */
    bool has_default;
    ptc_arg def;        /* default value when has_default */
    const char *const *words; /* str params: the words it accepts, NULL-terminated */
} ptc_param;

typedef struct ptc_schema {
    const char *name;   /* "add", "prims.add" */
    ptc_opstage stage;
    int nparams;
    ptc_param params[16];
    int npositional;    /* leading tensor-ish params printed positionally */
    int nreturns;       /* -1: variable (Tensor[]) */
    const char *text;   /* the schema string */
} ptc_schema;

const ptc_schema *ptc_op_schema(ptc_op op); /* parsed once, thread-safe */
const char *ptc_op_name(ptc_op op);
int ptc_op_lookup(const char *name);        /* -1 if unknown */
int ptc_param_index(ptc_op op, const char *name); /* -1 if absent */
const char *ptc_paramkind_name(int kind);           /* "Tensor?", "int[]", ... */
/* Fills args[0..nparams) with the schema's defaults (NONE for required ones). */
void ptc_args_defaults(ptc_op op, ptc_arg *args);
/* Checks arg count and each arg's kind against the schema ("add: argument
 * 'alpha' expects Scalar, got a tensor"). Also accepts a bare int for int[N]
 * (callers normalise it with ptc_args_normalize). */
int ptc_args_check(ptc_op op, const ptc_arg *args, int nargs, ptc_error *err);
/* Canonicalises in place: int[N] given as one int becomes a list of N. */
void ptc_args_normalize(ptc_arena *a, ptc_op op, ptc_arg *args);

/* ------------------------------------------------------------------------------
 * Graphs
 * ---------------------------------------------------------------------------- */

struct ptc_node;

typedef struct ptc_value {
    int id;                 /* dense index into graph->values */
    const char *name;       /* printed without the '%': "x", "3" */
    ptc_ttype type;
    struct ptc_node *def;   /* NULL for graph inputs */
    int def_index;          /* which output of def */
    int input_index;        /* position among graph inputs, -1 otherwise */
} ptc_value;

typedef struct ptc_node {
    int id;                 /* unique within the graph, stable across passes */
    ptc_op op;
    int nargs;              /* == schema nparams: args in schema order */
    ptc_arg *args;
    int nout;
    ptc_value **outs;
    ptc_srcloc loc;
    const char *module_path; /* "layer1.0.conv1", NULL if none */
    /* Provenance: names of the stage-1 values (first outputs of captured
     * nodes) this node was derived from. Empty on stage-1 nodes. */
    int nprov;
    const char **prov;
    int text_line, text_col; /* its statement in the .ptir it was parsed from, 0 if built */
} ptc_node;

typedef struct ptc_graph {
    ptc_arena *arena;       /* owns everything reachable from the graph */
    const char *name;       /* "forward" */
    int ninputs;
    ptc_value **inputs;
    int nnodes;
    ptc_node **nodes;       /* in program order */
    int noutputs;
    ptc_value **outputs;    /* may repeat values and include inputs */
    int nvalues;
    ptc_value **values;     /* by id */
    int next_node_id;
    int next_value_name;    /* for auto-named values "%N" */
    /* Capture's oracle for size relations the meta functions cannot decide
     * structurally (ops.h); NULL elsewhere. Not copied with the graph. */
    struct ptc_shape_env *shape_env;
    /* private */
    int cap_inputs, cap_nodes, cap_values;
    bool owns_arena;
    int name_slots;          /* name index: open addressing over values */
    ptc_value **name_index;
} ptc_graph;

/* A .ptir file: one or more graphs sharing an arena. */
typedef struct ptc_module {
    ptc_arena *arena;
    int ngraphs;
    ptc_graph **graphs;
} ptc_module;

/* A graph owning a fresh arena (or using `arena` if non-NULL, not freeing it). */
ptc_graph *ptc_graph_new(ptc_arena *arena, const char *name);
void ptc_graph_free(ptc_graph *g); /* frees the arena only if the graph created it */
ptc_value *ptc_graph_add_input(ptc_graph *g, const char *name, const ptc_ttype *t);
/* Appends a node with args (copied, must match the op's schema) and `nout`
 * outputs of the given types, auto-named "%N" (names may be NULL per output to
 * auto-name, or given). Types are taken as given: compiler/ops' builder infers
 * them (ptc_build); the parser checks them. */
ptc_node *ptc_graph_add_node(ptc_graph *g, ptc_op op, const ptc_arg *args, int nargs,
                             int nout, const ptc_ttype *out_types, const char *const *out_names);
void ptc_graph_set_outputs(ptc_graph *g, ptc_value *const *outs, int n);
/* Removes nodes for which keep[node->id] is false (their outputs must be unused). */
void ptc_graph_remove_nodes(ptc_graph *g, const bool *keep);
ptc_value *ptc_graph_find_value(const ptc_graph *g, const char *name); /* name without '%' */
ptc_node *ptc_graph_find_node(const ptc_graph *g, int id);
/* Users of each value: counts[value id] (caller-sized nvalues). */
void ptc_graph_use_counts(const ptc_graph *g, int *counts);
/* Appends a copy of node n (of another graph) to dst: its args' values
 * through map[old value id], its outputs (names, types), id, location, module
 * path and provenance kept; map gets n's outputs -> the copy's. */
ptc_node *ptc_graph_copy_node(ptc_graph *dst, const ptc_node *n, ptc_value **map);
/* Deep copy into a new graph (own arena); map (optional, size g->nvalues) gets
 * old value id -> new value. */
ptc_graph *ptc_graph_clone(const ptc_graph *g, ptc_value **map);

/* The tensor values an argument reads: 1 for a value, n for a list (an
 * entry may be NULL in a Tensor?[]), 0 otherwise; and the k-th of them. */
int ptc_arg_nvalues(const ptc_arg *a);
ptc_value *ptc_arg_value_at(const ptc_arg *a, int k);

/* Arg constructors. */
ptc_arg ptc_arg_none(void);
ptc_arg ptc_arg_value(ptc_value *v);
ptc_arg ptc_arg_values(ptc_arena *a, ptc_value *const *v, int n);
ptc_arg ptc_arg_int(int64_t i);
ptc_arg ptc_arg_dim(ptc_dim d);
ptc_arg ptc_arg_ints(ptc_arena *a, const int64_t *v, int n);
ptc_arg ptc_arg_dims(ptc_arena *a, const ptc_dim *d, int n);
ptc_arg ptc_arg_float(double f);
ptc_arg ptc_arg_bool(bool b);
ptc_arg ptc_arg_str(ptc_arena *a, const char *s);
ptc_arg ptc_arg_dtype(ptc_dtype dt);
ptc_arg ptc_arg_device(ptc_device d);
bool ptc_arg_eq(const ptc_arg *x, const ptc_arg *y); /* values compared by identity */
/* Convenience accessors on a node's args by param name (assert the kind). */
const ptc_arg *ptc_node_arg(const ptc_node *n, const char *param);

/* ------------------------------------------------------------------------------
 * .ptir text
 *
 *   # ptc ir v1
 *   graph forward(%x: f32[s0,16] cpu, %w: f32[32,16] cpu grad) {
 *     %0 = linear(%x, %w) : f32[s0,32]      @ "model.py":12:9 "self.fc(x)" [fc]
 *     %1, %2 = split(%0, 16, dim=1) : f32[s0,16], f32[s0,16]
 *     %3 = prims.add(%1, %2) : f32[s0,16]   <- %0
 *     return (%3)
 *   }
 * ---------------------------------------------------------------------------- */

/* Prints a whole module / one graph (with the version line). */
void ptc_print_module(ptc_buf *b, const ptc_module *m);
void ptc_print_graph(ptc_buf *b, const ptc_graph *g);
/* One node line without indentation or newline (for logs, tools). */
void ptc_print_node(ptc_buf *b, const ptc_node *n);
void ptc_print_arg(ptc_buf *b, const ptc_arg *a);
/* The device of a node's first tensor argument (cpu if none): its outputs'
 * device unless their printed type names another. */
ptc_device ptc_node_default_device(const ptc_node *n);
/* Parses text (NUL-terminated; `filename` for messages). The module owns a fresh
 * arena. Structural verification (ptc_ir_verify) runs on every parsed graph.
 * Returns NULL with err->file/line/col set on error. Never crashes. */
ptc_module *ptc_parse_module(const char *text, size_t len, const char *filename, ptc_error *err);
ptc_module *ptc_parse_file(const char *path, ptc_error *err);
void ptc_module_free(ptc_module *m);

/* ------------------------------------------------------------------------------
 * Verifier (structural): SSA and naming, arity and arg kinds against the schema,
 * well-formed types, symbols bound by graph inputs, outputs defined. Type
 * inference is checked by ptc_ops_verify in compiler/ops.
 * `stage`: 0 any, or PTC_STAGE_TORCH / PTC_STAGE_PRIM to reject ops of the other.
 * ---------------------------------------------------------------------------- */
int ptc_ir_verify(const ptc_graph *g, int stage, ptc_error *err);

/* ------------------------------------------------------------------------------
 * Runtime tensors: concrete data on a device. Storage is reference counted
 * because tensors outlive compiles (they are inputs, outputs, recorded values).
 * ---------------------------------------------------------------------------- */

typedef struct ptc_storage {
    int refs;
    void *data;
    size_t nbytes;
    void (*release)(struct ptc_storage *s); /* NULL: free(data) and free(s) */
    void *owner;                            /* e.g. a PyObject* the data belongs to */
} ptc_storage;

typedef struct ptc_tensor {
    ptc_dtype dtype;
    int ndim;
    ptc_device device;
    int64_t sizes[PTC_MAX_DIMS];
    int64_t strides[PTC_MAX_DIMS]; /* in elements */
    void *data;                    /* address of element [0,...,0] */
    ptc_storage *storage;          /* NULL for borrowed memory */
} ptc_tensor;

/* A new contiguous, zero-filled CPU tensor holding one reference. */
int ptc_tensor_alloc(ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes, ptc_error *err);
/* A tensor over caller-owned memory (no reference counting). */
ptc_tensor ptc_tensor_borrow(void *data, ptc_dtype dt, int ndim, const int64_t *sizes,
                             const int64_t *strides);
void ptc_tensor_retain(ptc_tensor *t);
void ptc_tensor_release(ptc_tensor *t); /* drops the reference; zeroes *t */
int64_t ptc_tensor_numel(const ptc_tensor *t);
bool ptc_tensor_is_contiguous(const ptc_tensor *t);
/* Non-overlapping and dense in some order of its dims (torch's
 * is_non_overlapping_and_dense: contiguous, channels-last, transposed). */
bool ptc_tensor_is_dense(const ptc_tensor *t);
/* Element access by multi-index through strides; values converted to / from
 * double (f16/bf16 via f32) or int64 (exact for integer dtypes). */
double ptc_tensor_get_f64(const ptc_tensor *t, const int64_t *idx);
void ptc_tensor_set_f64(ptc_tensor *t, const int64_t *idx, double v);
int64_t ptc_tensor_get_i64(const ptc_tensor *t, const int64_t *idx);
void ptc_tensor_set_i64(ptc_tensor *t, const int64_t *idx, int64_t v);
/* Scalar conversions used everywhere. */
float ptc_f16_to_f32(uint16_t h);
uint16_t ptc_f32_to_f16(float f);     /* round to nearest even */
float ptc_bf16_to_f32(uint16_t h);
uint16_t ptc_f32_to_bf16(float f);    /* round to nearest even */
double ptc_load_f64(const void *p, ptc_dtype dt);
void ptc_store_f64(void *p, ptc_dtype dt, double v); /* casts like torch (.to(dtype)) */
int64_t ptc_load_i64(const void *p, ptc_dtype dt);
void ptc_store_i64(void *p, ptc_dtype dt, int64_t v);
/* Copies src into dst (same sizes; any strides; dtype converted). */
int ptc_tensor_copy(ptc_tensor *dst, const ptc_tensor *src, ptc_error *err);
/* A zero-filled CPU tensor with the given strides (in elements, >= 0) over
 * just the storage they span; dims may share elements (a stride 0). */
int ptc_tensor_alloc_strided(ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                             const int64_t *strides, ptc_error *err);
/* t laid out with `strides`: *out is zeroed when t has them already (dims of
 * size 1 aside), else holds a copy. A layout whose dims share elements (a
 * stride 0, overlapping strides) can hold only values that agree wherever it
 * shares: for any other tensor a copy would lose values, so that is an error
 * (naming `what`), as is a negative stride. */
int ptc_tensor_conform(const ptc_tensor *t, const int64_t *strides, ptc_tensor *out,
                       const char *what, ptc_error *err);
/* Does t fit type ty under bindings (dtype, rank, sizes; binds unbound symbols)?
 * A dim over a symbol another input binds (s5 + s4 - 2 before the input of
 * s4) is skipped: callers check their inputs in passes until one binds
 * nothing new. */
int ptc_tensor_check_type(const ptc_tensor *t, const ptc_ttype *ty, ptc_bindings *b,
                          const char *what, ptc_error *err);
/* Fills with deterministic pseudo-random values for the dtype (floats in
 * [-2, 2), ints in [-8, 8) or [0, 8) unsigned, bools 50/50). */
void ptc_tensor_fill_random(ptc_tensor *t, uint64_t seed);

/* Tensor files (.bin): a list of named tensors.
 *   "PTCT" u32 version(1 or 2) u32 count
 *   per tensor: u32 name_len, name bytes, u8 dtype, u8 ndim, u16 pad,
 *               i64 sizes[ndim], i64 strides[ndim], u64 nbytes,
 *               [version 2: zero bytes up to a multiple of 64 from the
 *               file's start, so a mapped file's tensors are aligned]
 *               raw bytes (the elements in row-major order of `sizes`;
 *               strides recorded for the layout the tensor had, applied on load)
 *   u32 CRC-32 (zlib's) of everything before it
 * Loading detects truncation, bad magic/version/dtype and hash mismatches.
 * ptc_tensorfile_write writes version 1; ptc.export's weights are version 2. */
typedef struct ptc_tensorfile {
    int n;
    char **names;
    ptc_tensor *tensors;
} ptc_tensorfile;
int ptc_tensorfile_write(const char *path, const ptc_tensor *tensors, const char *const *names,
                         int n, ptc_error *err);
int ptc_tensorfile_read(const char *path, ptc_tensorfile *out, ptc_error *err);
/* The tensors of a tensor file mapped into memory (file: its bytes, e.g. an
 * mmap whose release unmaps it), which the caller has verified: the CRC is
 * not checked again. Aligned tensors point into the file and hold references
 * on it; others are copies. path is for messages. */
int ptc_tensorfile_parse_mapped(ptc_storage *file, const char *path, ptc_tensorfile *out,
                                ptc_error *err);
void ptc_tensorfile_free(ptc_tensorfile *f);

/* FNV-1a 64 (cache keys, name hashing). */
uint64_t ptc_hash_bytes(uint64_t h, const void *p, size_t n);
#define PTC_HASH_INIT 0xcbf29ce484222325ULL
/* CRC-32 as zlib.crc32 computes it (file integrity); start with crc = 0. */
uint32_t ptc_crc32(uint32_t crc, const void *p, size_t n);

/* Reads a whole file (malloc'd, NUL-terminated). */
char *ptc_read_file(const char *path, size_t *len, ptc_error *err);
int ptc_write_file(const char *path, const void *data, size_t len, ptc_error *err);
/* mkdir -p. */
int ptc_mkdirs(const char *path, ptc_error *err);

/* ------------------------------------------------------------------------------
 * Fault injection: PTC_INJECT=<stage>:<op>:<kind>[@N][,...] plants a bug in a
 * real pipeline so that ptminify and the failure paths can be tested on real
 * graphs (SQLite's faultsim). Each stage asks once for every op it handles;
 * the reference interpreter never asks (it is the oracle).
 *   stage  prims    the decomposition of that (torch-level) op
 *          lower    the loop IR of that op
 *          codegen  the generated kernel containing that op
 *          runtime  each run of the kernel containing that op
 *   op     an ops.def name ("relu", "prims.add") or "*" for any op
 *   kind   crash (SIGSEGV), error (an InjectedError), wrong (the caller makes
 *          the op's result numerically wrong), hang (returns only when
 *          interrupted: ptc_interrupted), abort (codegen only: LLVM's own
 *          fatal-error path, "LLVM ERROR:" and SIGABRT, where LLVM runs)
 *   @N     fire only on the N-th matching query of the process (1-based),
 *          e.g. a failure that needs a graph of at least N such ops
 * ---------------------------------------------------------------------------- */

typedef enum {
    PTC_INJECT_NONE = 0,
    PTC_INJECT_CRASH,
    PTC_INJECT_ERROR,
    PTC_INJECT_WRONG,
    PTC_INJECT_HANG,
    PTC_INJECT_ABORT,
} ptc_inject_kind;

/* Replaces the configuration with spec (NULL or "" clears it); from then on
 * PTC_INJECT is ignored. Errors name the bad entry. Otherwise the environment
 * is read on first use (a bad PTC_INJECT is reported once on stderr and
 * ignored). Not thread-safe against concurrent queries: call it first. */
int ptc_inject_configure(const char *spec, ptc_error *err);
/* The spec in effect, "" when none (repro folders record it so that a
 * planted bug reproduces). */
const char *ptc_inject_spec(void);
/* Asked by `stage` about `op`. crash and hang act here and never return
 * (an interrupted hang returns as error does);
 * error fills err (InjectedError, with the stage) and returns
 * PTC_INJECT_ERROR, and the caller fails with -1; wrong returns
 * PTC_INJECT_WRONG and the caller perturbs that op's result (with
 * ptc_inject_perturb for a tensor); else PTC_INJECT_NONE. Thread-safe. */
ptc_inject_kind ptc_inject_hit(const char *stage, ptc_op op, ptc_error *err);
/* Whether any query can matter: a rule is configured or a stage is tracked
 * (ptc_inject_track). When not, a stage that asks on every run (the
 * runtime, per kernel) skips gathering the ops it would ask about. */
bool ptc_inject_armed(void);
/* With on, this thread's crash and hang rules are returned from
 * ptc_inject_hit (PTC_INJECT_CRASH, PTC_INJECT_HANG) instead of carried out,
 * for a caller that carries them out with ptc_inject_act where the stage's
 * work really happens (codegen: in its forked compile worker). The queries
 * still count in this process, so @N means the same either way. */
void ptc_inject_defer(bool on);
_Noreturn void ptc_inject_act(ptc_inject_kind kind); /* crash or hang */
/* Makes every element of t wrong beyond any tolerance: floats x -> x + 1 +
 * |x|/4, integers x + 1, bools flipped. NaN and inf stay as they are. */
void ptc_inject_perturb(ptc_tensor *t);
/* Failure location for ptminify's children: every query copies its stage name
 * into buf (NUL-terminated, truncated to size), so that a crash can be
 * attributed to a stage. NULL stops it. */
void ptc_inject_track(char *buf, size_t size);

#endif /* PTC_IR_H */
