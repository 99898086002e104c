/* Internal header of compiler/capture: decoded code objects, interpreter
 * frames, the interpreter state and the value operations that opcode handlers
 * call. Tracing (symbolic tensors, sources, guards, graph building) is declared
 * in trace.h, a layer above, and reached only through the hook table
 * cap_hooks; everything here also runs without a trace ("real" mode), which is
 * how break instructions and eager fallbacks execute.
 */
#ifndef PTC_CAP_H
#define PTC_CAP_H

#include "capture/capture.h"
#include "capture/interp/opcodes.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct cap_trace cap_trace;

/* ------------------------------------------------------------------------------
 * Python objects the interpreter needs, looked up once by cap_init.
 * ---------------------------------------------------------------------------- */
typedef struct cap_py {
    PyObject *FunctionType, *MethodType, *CellType, *CodeType, *GeneratorType, *StaticMethodType, *MethodWrapperType;
    PyObject *OrderedDict, *defaultdict;
    PyObject *builtins;          /* the builtins module's dict */
    PyObject *b_super, *b_build_class, *b_globals, *b_locals, *b_vars, *b_dir,
        *b_eval, *b_exec, *b_len, *b_isinstance;
    PyObject *s_enter, *s_exit, *s_dict, *s_closure, *s_code, *s_globals,
        *s_builtins, *s_defaults, *s_kwdefaults, *s_func, *s_self, *s_cell_contents,
        *s_qualname, *s_name, *s_annotations, *s_class, *s_mro, *s_init, *s_new,
        *s_call, *s_getattr, *s_match_args, *s_keys, *s_get, *s_module, *s_getattribute,
        *s_getitem, *s_len;
    PyObject *object_getattribute; /* object.__getattribute__ */
    PyObject *empty_tuple, *empty_str;
    int cmp_shift;               /* COMPARE_OP: oparg >> cmp_shift is the operator */
    bool py312;
    int nb_ops[26];              /* BINARY_OP oparg -> cap_binop index */
    int intrinsic1[16], intrinsic2[8];
} cap_py;
extern cap_py cap_P;

/* Binary operators in dis._nb_ops order (checked at start-up by name). */
#define CAP_NB_OPS(X)                                                           \
    X(ADD, "+") X(AND, "&") X(FLOOR_DIVIDE, "//") X(LSHIFT, "<<")               \
    X(MATRIX_MULTIPLY, "@") X(MULTIPLY, "*") X(REMAINDER, "%") X(OR, "|")       \
    X(POWER, "**") X(RSHIFT, ">>") X(SUBTRACT, "-") X(TRUE_DIVIDE, "/")         \
    X(XOR, "^")
typedef enum {
#define X(id, sym) CAP_NB_##id,
    CAP_NB_OPS(X)
#undef X
    CAP_NB_COUNT
} cap_nb;
/* BINARY_OP's operand: the operator plus whether it is the in-place form. */
#define CAP_NB_INPLACE 0x100

/* Version tags (typever.c), 0 where none is known: while t's stays the
 * same, so does every attribute found on t; while a (held) dict's stays the
 * same, so do its entries. cap_versions_known: this runtime has both. */
bool cap_versions_known(void);
unsigned int cap_type_version(PyTypeObject *t);
uint64_t cap_dict_version(PyObject *d);
/* A dict (strong) with its version then, and the object (strong) whose
 * instance dict it was, or NULL. cap_snap_valid: every dict still has its
 * version and is still its owner's (false where versions are unknown). */
typedef struct cap_snap {
    PyObject *owner, *dict;
    uint64_t ver;
} cap_snap;
bool cap_snap_valid(const cap_snap *s, int n);

/* ------------------------------------------------------------------------------
 * Decoded code objects (code.c)
 * ---------------------------------------------------------------------------- */

typedef struct cap_instr {
    uint8_t h;      /* handler id (H_*) */
    uint8_t raw;    /* opcode number of this Python */
    uint8_t flags;  /* J_FWD / J_BACK / NOTRACE */
    uint8_t ncache; /* inline cache entries after it */
    int32_t arg;    /* EXTENDED_ARG folded in */
    int32_t next;   /* index (code units) of the following instruction */
    int32_t target; /* jump target for relative jumps, else -1 */
} cap_instr;

typedef struct cap_exc_entry {
    int start, end, target, depth; /* code units; end exclusive */
    bool lasti;
} cap_exc_entry;

/* Kinds of localsplus slots. */
#define CAP_LP_LOCAL 0x1
#define CAP_LP_CELL 0x2
#define CAP_LP_FREE 0x4

typedef struct cap_code {
    PyObject *code;                /* the code object (strong) */
    PyObject *consts, *names;      /* tuples (strong) */
    PyObject *lpnames;             /* tuple: localsplus names */
    PyObject *filename, *qualname; /* str (strong) */
    const char *file, *qualname_s; /* UTF-8, owned by the str objects */
    int firstlineno;
    int argcount, posonly, kwonly, flags;
    int nvarnames, nlp, stacksize, nfree;
    uint8_t *lpkind;               /* [nlp] */
    int nunits;
    cap_instr *ins;                /* [nunits], indexed by code unit */
    int nexc;
    cap_exc_entry *exc;
    int32_t *pos;                  /* [4 * nunits]: line, endline, col, endcol (-1) */
    const char *notrace;           /* why this code is never interpreted, or NULL */
    bool genexpr;                  /* a generator expression a trace runs lazily (iter.c) */
    bool genfunc;                  /* a generator function a trace runs lazily (generators.c) */
    int refs;                      /* the cache's, frames', guards' and entries' (GIL-held) */
} cap_code;

/* The decoded form of a code object, cached until cap_reset_all. Borrowed:
 * whatever keeps it past the next Python call takes a reference, because a
 * reset (another thread, or the user's code) may drop the cache's. */
cap_code *cap_code_get(PyObject *code);
cap_code *cap_code_ref(cap_code *c); /* NULL-safe; returns c */
void cap_code_unref(cap_code *c);    /* NULL-safe; frees at zero */
void cap_code_cache_clear(void);
int cap_opcodes_init(void);
const char *cap_opname(int raw);
/* Handler for an exception raised at pc, or NULL. */
const cap_exc_entry *cap_code_handler(const cap_code *c, int pc);
/* Whether an exception raised at pc runs code of c's own (a try or with
 * block's handler), not only 3.12's PEP 479 wrapper of a generator's body
 * and CLEANUP_THROW of a yield from, the exits of the except blocks it is
 * in, or except clauses whose classes
 * (looked up in globals, then builtins) cannot catch GeneratorExit: closing
 * a generator suspended there runs its clean-up. */
bool cap_code_cleanup_at(const cap_code *c, int pc, PyObject *globals, PyObject *builtins);
/* Source position of the instruction at pc (line 0 if unknown). */
void cap_code_pos(const cap_code *c, int pc, int *line, int *col, int *endline, int *endcol);

/* ------------------------------------------------------------------------------
 * Frames (frames.c) and the loop that runs them (loop.c)
 * ---------------------------------------------------------------------------- */

typedef struct cap_frame cap_frame;
typedef struct cap_interp cap_interp;

/* A frame's continuation: how the instruction that pushed it (waiting at `in`
 * in the parent p) finishes once the frame returns v (stolen). arg, a and b
 * are what that instruction left in the child's ret_arg, ret_a, ret_b
 * (borrowed). Returns CAP_NEXT (the parent goes on after `in`), CAP_JUMPED,
 * CAP_ERR or CAP_SYNC. Each lives beside the instruction it finishes; the
 * loop calls it without knowing which it is. */
typedef int (*cap_cont)(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                        PyObject *b, PyObject *v);
/* The interpreter's own (frames.c). */
int cap_ret_push(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                 PyObject *b, PyObject *v); /* push the result (the default) */
int cap_ret_discard(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                    PyObject *b, PyObject *v); /* result dropped (__setitem__) */
int cap_ret_init(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                 PyObject *b, PyObject *v); /* __init__: None, push a (the instance) */
int cap_ret_next_item(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                      PyObject *b, PyObject *v); /* __next__: StopIteration ends the loop */
int cap_ret_sync(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                 PyObject *b, PyObject *v); /* a nested run waits for it: CAP_SYNC */
/* A continuation that failed while tracing: the parent's instruction will
 * rerun for real, and cannot without its operands, so the failure becomes an
 * internal one. Returns CAP_ERR. */
int cap_ret_failed(cap_interp *I);
/* Those of particular instructions (values.c, ops_flow.c). */
int cap_ret_binop(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                  PyObject *b, PyObject *v); /* NotImplemented tries the reflected one */
int cap_ret_truth(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                  PyObject *b, PyObject *v); /* __bool__/__len__ for a jump or UNARY_NOT */
int cap_ret_contains(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                     PyObject *b, PyObject *v); /* bool(result), negated when arg */

struct cap_frame {
    cap_code *code;
    PyObject *func;        /* the function object (strong) */
    PyObject *globals;     /* strong */
    PyObject *builtins;    /* strong */
    PyObject *locals_dict; /* class bodies / exec only (strong), else NULL */
    PyObject **lp;         /* localsplus [code->nlp] (strong or NULL) */
    PyObject **stack;      /* value stack [code->stacksize] (strong; NULL entries allowed) */
    int sp;
    int pc;                /* current instruction; a parent waits at its call */
    PyObject *kwnames;     /* pending KW_NAMES (borrowed from consts) */
    int exc_depth;         /* handlers entered (PUSH_EXC_INFO) and not left */
    int depth;             /* 0 for the outermost frame */
    cap_cont ret;          /* how the parent finishes (cap_ret_push if unset) */
    int ret_arg;           /* for ret: the binary operator, `not in`, ... */
    PyObject *ret_a, *ret_b; /* strong */
    /* Tracing annotations. */
    int *slot_src;         /* [nlp + stacksize]: source id of a value that is still
                              the one of the segment's starting state, else -1 */
    const char *module_path; /* nn.Module path of the forward this frame is in */
    PyObject *gen;         /* a generator's frame: its ptc generator (borrowed) */
    PyObject *frame_object; /* for traceback entries (tracebacks.c; strong), or NULL */
    struct cap_frame *parent;
};

/* Handler results. */
enum {
    CAP_NEXT = 0,   /* continue at in->next */
    CAP_JUMPED = 1, /* the handler set f->pc */
    CAP_FRAME = 2,  /* a frame was pushed or popped: continue in I->frame */
    CAP_ERR = -1,   /* a Python exception is set: unwind */
    CAP_BREAK = 3,  /* tracing cannot continue here (I->T->brk says why) */
    CAP_DONE = 4,   /* the outermost frame returned (I->result) */
    CAP_STOP = 5,   /* stepping reached its stop point */
    CAP_SYNC = 6,   /* a cap_ret_sync frame returned (I->sync_result) */
    CAP_NONE = 7,   /* "not mine": a dispatcher declined the call */
};

typedef enum { CAP_REAL = 0, CAP_TRACE = 1 } cap_mode;

/* Why tracing stopped (CAP_BREAK): a stable code per kind (breaks.def). */
typedef enum {
    CAP_B_NONE = 0,
#define BREAK(id, num, reason, expl, hint) CAP_B_##id = num,
#include "capture/interp/breaks.def"
#undef BREAK
    CAP_B_END
} cap_break_code;

/* The signal exception that code running for real inside a trace (a symbolic
 * tensor's __bool__) raises to say "break here": the loop turns it into a
 * break at the interpreted instruction that started it. */
extern PyObject *cap_GraphBreak;

/* ------------------------------------------------------------------------------
 * The trace's hooks. While I->T is set, the value operations and call handlers
 * hand symbolic work to the trace through this table, so the interpreter
 * includes nothing above it: the trace layer fills the trace's rows and the
 * torch layer the tensor rows at start-up (cap_trace_hooks_install,
 * cap_torch_hooks_install). Each row is documented where it is defined
 * (trace.h, torch.h); the results are the handlers' (CAP_NEXT, CAP_BREAK, ...,
 * CAP_NONE for "not mine").
 * ---------------------------------------------------------------------------- */
typedef struct cap_trace_hooks {
    /* breaks and errors */
    int (*brk)(cap_trace *T, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
    int (*break_again)(cap_trace *T);
    int (*error)(cap_interp *I);
    /* calls and frames */
    int (*call)(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                PyObject *kwnames, PyObject **out);
    int (*expand_call_args)(cap_trace *T, PyObject *func, PyObject *args, PyObject *kw,
                            PyObject **t, PyObject **d);
    int (*enter_frame)(cap_trace *T, cap_frame *f);
    int (*note_function)(cap_trace *T, PyObject *fn);
    int (*before_with)(cap_interp *I, cap_frame *f, PyObject *mgr);
    void (*gen_suspend)(PyObject *gen, cap_frame *f);
    /* the objects a trace reads: outside, written, constant, symbolic */
    int (*source_of)(cap_trace *T, PyObject *obj);
    bool (*is_constant)(PyObject *obj);
    bool (*is_tensor)(PyObject *obj);
    bool (*is_real_tensor)(PyObject *obj);
    /* a numpy array from outside (an argument's, a global's): its
       operators are numpy's, traced on its graph input */
    bool (*is_outside_array)(cap_trace *T, PyObject *obj);
    int (*current)(cap_interp *I, PyObject **obj);
    PyObject *(*flow)(cap_trace *T, PyObject *obj);
    /* the handled exceptions of traced except blocks (a list, borrowed) */
    PyObject *(*handled_stack)(cap_trace *T);
    /* locals, cells and globals */
    int (*load_state)(cap_interp *I, cap_frame *f, int slot);
    void (*closure_cell)(cap_trace *T, cap_frame *f, int i, PyObject *cell);
    int (*load_cell)(cap_trace *T, PyObject *cell, PyObject **v);
    int (*write_cell)(cap_interp *I, PyObject *cell, PyObject *v, bool *done);
    int (*load_global)(cap_trace *T, cap_frame *f, PyObject *name, PyObject *v, bool builtin,
                       PyObject **out);
    int (*global_write)(cap_interp *I, cap_frame *f, PyObject *name, PyObject *v);
    int (*global_written)(cap_interp *I, cap_frame *f, PyObject *name, PyObject **out);
    /* value operations */
    int (*getattr)(cap_interp *I, PyObject *obj, PyObject *name, PyObject **out);
    int (*setattr)(cap_interp *I, PyObject *obj, PyObject *name, PyObject *v);
    int (*getitem)(cap_interp *I, PyObject *obj, PyObject *key, PyObject **out);
    int (*setitem)(cap_interp *I, PyObject *obj, PyObject *key, PyObject *v);
    int (*dict_lookup)(cap_interp *I, PyObject *d, PyObject *key, PyObject **out);
    int (*iter)(cap_interp *I, PyObject *obj, PyObject **out);
    int (*next)(cap_interp *I, PyObject *it, PyObject **out);
    /* iter() and next() run to their result (a Python __iter__ or __next__
       in a nested run): for unpacking, which needs the values at once */
    int (*iter_sync)(cap_interp *I, PyObject *obj, PyObject **out);
    int (*next_sync)(cap_interp *I, PyObject *it, PyObject **out);
    int (*iter_contains)(cap_interp *I, PyObject *it, PyObject *item, PyObject **out);
    /* yield from: the receiver's next item (sent: what the outer generator
       was sent), or NULL and its return value */
    int (*yield_from)(cap_interp *I, PyObject *receiver, PyObject *sent, PyObject **item,
                      PyObject **value);
    int (*outside_mutator)(cap_interp *I, PyObject *self, const char *name, PyObject *const *args,
                           int nargs, PyObject *kwnames, PyObject **out);
    /* list += items where items is one of the trace's lazy iterators:
       list.extend item by item (CAP_NONE for other items) */
    int (*list_iadd)(cap_interp *I, PyObject *list, PyObject *items);
    int (*truth_guard)(cap_trace *T, PyObject *v);
    int (*contains_guard)(cap_trace *T, PyObject *container, PyObject *item);
    /* may replace an operand by what the operator reads of it (borrowed) */
    int (*check_operands)(cap_trace *T, PyObject **a, PyObject **b, bool arithmetic);
    int (*check_format)(cap_trace *T, PyObject *v);
    /* tensors (the torch layer's rows) */
    int (*real_tensor)(cap_trace *T, PyObject *v, const char *what);
    int (*tensor_binary)(cap_trace *T, int op, PyObject *a, PyObject *b, PyObject **out);
    int (*tensor_compare)(cap_trace *T, int cmp, PyObject *a, PyObject *b, PyObject **out);
    int (*tensor_unary)(cap_trace *T, int h, PyObject *a, PyObject **out);
    int (*tensor_unpack)(cap_trace *T, PyObject *t, int before, int after, bool star,
                         PyObject **items);
} cap_trace_hooks;
extern cap_trace_hooks cap_hooks;

struct cap_interp {
    cap_mode mode;
    bool inline_all;      /* test mode: interpret every Python call */
    cap_frame *frame;     /* innermost */
    cap_frame *base;      /* outermost */
    PyObject *result;     /* the outermost frame's return value (strong) */
    PyObject *sync_result; /* a nested run's result (strong) */
    cap_trace *T;         /* tracing state (mode == CAP_TRACE) */
    int max_depth;
    /* Stepping (real mode after a break): stop at the first safe point once
       `min_steps` instructions ran; safe = no handler active, no KW_NAMES. */
    bool stepping;
    long steps, min_steps;
    /* After a break at a call ptc would not inline: that call goes through
       call_once(call_once_ctx, ...), the compiled function's caches (its own
       frame), not plain CPython; whoever runs the interpreter sets it. */
    PyObject *(*call_once)(void *ctx, PyObject *fn, PyObject *const *args, int nargs,
                           PyObject *kwnames);
    void *call_once_ctx;
    /* A retrace (exec.c): break before the instruction run as step
       break_at - 1 (0: none), where the first trace broke inside a nested
       run that instruction started. */
    long break_at;
    long instr_step; /* I->steps when the running instruction began */
    /* The failing instruction re-raised an exception (RERAISE, a bare raise):
       its frame has its traceback entry already. */
    bool reraised;
    /* generator.throw(): the innermost frame (a generator's, just resumed)
       runs no instruction first: the pending exception is raised at its pc,
       the yield it was suspended at, as CPython raises it there. */
    bool throw_in;
    /* The ints of a resume state that are id()s of its objects (dict:
       address -> the int, set by the entry that made the state): new each
       call, so the trace that goes on from it does not specialise on them. */
    PyObject *ids;
};

/* Frames. */
cap_frame *cap_frame_new(cap_code *code, PyObject *func, PyObject *globals, PyObject *builtins);
void cap_frame_free(cap_frame *f);
/* The pc of the yield a suspended generator's frame f stands after. */
int cap_frame_yield_pc(const cap_frame *f);
/* Adds f's entry, at its current instruction, to the pending exception's
 * traceback, as CPython does in each frame an exception passes through
 * (tracebacks.c). */
void cap_traceback_here(cap_frame *f);
/* Binds a call's arguments into f's localsplus the way CPython does. Returns
 * 1 on success, 0 when the call would raise a binding TypeError (the caller
 * lets CPython raise it by calling the function for real), -1 on other errors. */
int cap_bind_args(cap_frame *f, PyObject *const *args, int nargs, PyObject *kwnames,
                  PyObject *const *kwvalues);
/* Pushes a new innermost frame for func(args); fills ret fields. */
void cap_push_frame(cap_interp *I, cap_frame *f);
/* Runs until the outermost frame returns, an exception leaves it, a break, or
 * (when stepping) a stop point (loop.c). */
int cap_run(cap_interp *I);
void cap_interp_clear(cap_interp *I); /* frees every frame */
/* RETURN_VALUE: hands v (stolen) to the parent frame, or ends the run. */
int cap_return(cap_interp *I, cap_frame *f, PyObject *v);

/* Stack helpers. */
static inline void cap_push(cap_frame *f, PyObject *v) { f->stack[f->sp++] = v; }
static inline PyObject *cap_pop(cap_frame *f) { return f->stack[--f->sp]; }
static inline PyObject *cap_peek(cap_frame *f, int n) { return f->stack[f->sp - n]; }
void cap_popn(cap_frame *f, int n); /* drops n (decref) */

/* Handlers (ops_*.c, calls.c): one function per handler id, cap_h_<NAME>,
 * run by the loop through its table (loop.c). */
typedef int (*cap_handler_fn)(cap_interp *I, cap_frame *f, const cap_instr *in);
extern const cap_handler_fn cap_handlers[H_COUNT];
#define X(h) int cap_h_##h(cap_interp *I, cap_frame *f, const cap_instr *in);
CAP_HANDLERS(X)
#undef X
#define HANDLER(name) int cap_h_##name(cap_interp *I, cap_frame *f, const cap_instr *in)
#define UNUSED_ARGS (void)I, (void)f, (void)in

/* ------------------------------------------------------------------------------
 * Value operations used by handlers (values.c, calls.c). In real mode they are
 * CPython's semantics; while tracing they consult the trace (symbolic tensors,
 * guards, breaks). Each returns CAP_NEXT with *out set (new reference), or
 * CAP_FRAME when it pushed a frame that will deliver the result, or
 * CAP_ERR / CAP_BREAK.
 * ---------------------------------------------------------------------------- */
int cap_op_binary(cap_interp *I, int op, PyObject *a, PyObject *b, PyObject **out);
int cap_op_unary(cap_interp *I, int h, PyObject *a, PyObject **out);
int cap_op_compare(cap_interp *I, int cmp, PyObject *a, PyObject *b, PyObject **out);
int cap_op_contains(cap_interp *I, PyObject *container, PyObject *item, PyObject **out);
/* Truth value: *out = 0/1. CAP_FRAME when a Python __bool__/__len__ was
 * pushed, with `finish` (the asking instruction's, e.g. cap_ret_truth) as
 * its continuation. */
int cap_op_truth(cap_interp *I, PyObject *v, cap_cont finish, int *out);
int cap_op_getattr(cap_interp *I, PyObject *obj, PyObject *name, PyObject **out);
int cap_op_setattr(cap_interp *I, PyObject *obj, PyObject *name, PyObject *v);
int cap_op_delattr(cap_interp *I, PyObject *obj, PyObject *name);
int cap_op_getitem(cap_interp *I, PyObject *obj, PyObject *key, PyObject **out);
int cap_op_setitem(cap_interp *I, PyObject *obj, PyObject *key, PyObject *v);
int cap_op_delitem(cap_interp *I, PyObject *obj, PyObject *key);
int cap_op_iter(cap_interp *I, PyObject *obj, PyObject **out);
/* Next item: *out NULL (no error) when exhausted. */
int cap_op_next(cap_interp *I, PyObject *it, PyObject **out);
/* The same run for real (the iterator's own __next__). */
int cap_next_real(PyObject *it, PyObject **out);
int cap_op_format(cap_interp *I, PyObject *v, int conv, PyObject *spec, PyObject **out);
/* A call: callable(args[0..nargs), **kw) where the last len(kwnames) args
 * are keyword values. */
int cap_op_call(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                PyObject *kwnames, PyObject **out);
/* callable(*argtuple, **kwdict) (kwdict may be NULL). */
int cap_op_call_ex(cap_interp *I, PyObject *callable, PyObject *argtuple, PyObject *kwdict,
                   PyObject **out);
int cap_op_load_global(cap_interp *I, cap_frame *f, PyObject *name, PyObject **out);
/* iter() and next() run to their results, for an instruction that needs
 * the items before it ends (unpacking, [*a], {**a}): a Python __iter__ or
 * __next__ runs in a nested run, not as a frame pushed for the loop (its
 * result would land on the stack in place of the items). */
int cap_op_iter_now(cap_interp *I, PyObject *obj, PyObject **out);
int cap_op_next_now(cap_interp *I, PyObject *it, PyObject **out);
int cap_op_unpack(cap_interp *I, PyObject *seq, int before, int after, bool star,
                  PyObject **items);
/* tuple(list) for LIST_TO_TUPLE (and 3.12's intrinsic): the list is the
 * trace's own, except after a break, where it is the real one the resumed
 * frame holds and is read through its source, guarded (new ref or NULL). */
PyObject *cap_op_list_to_tuple(cap_interp *I, PyObject *list);

/* Helpers on Python objects (pyobjects.c). */
PyObject *cap_lookup_special(PyObject *obj, PyObject *name); /* bound, or NULL (no error) */
PyObject *cap_type_lookup(PyTypeObject *t, PyObject *name);  /* borrowed, or NULL */
/* descr bound to obj as attribute lookup binds it (its __get__), new ref. */
PyObject *cap_bind_descr(PyObject *descr, PyObject *obj);
PyObject *cap_cell_get(PyObject *cell);                      /* new ref or NULL (no error) */
int cap_cell_set(PyObject *cell, PyObject *v);               /* v NULL: clears */
PyObject *cap_cell_new(PyObject *v);
bool cap_is_function(PyObject *o);
bool cap_is_method(PyObject *o);
PyObject *cap_tuple_from_array(PyObject *const *items, int n);
PyObject *PyObject_CallOneArg_compat(PyObject *fn, PyObject *arg);
/* f(*args, **kwargs) laid out for a vector call: buf[0..len(args)) the
 * positional values, then the keyword values (all borrowed), their names set
 * into kwnames (a new tuple of len(kwargs), NULL without keywords). buf
 * holds len(args) + len(kwargs). */
void cap_spread_args(PyObject *args, PyObject *kwargs, PyObject **buf, PyObject *kwnames);
/* The object a dotted path names (a module, then attributes), or NULL. */
PyObject *cap_import_path(const char *path);
/* One warning per process that ptc does not act on something (text: a
 * whole sentence), and a line in ptexplain's Notes (ptc._notices). */
void cap_not_acted_on(const char *text);
extern PyObject *cap_InternalError;
/* ptc.PartialRunError: a compiled graph failed after it wrote inputs in
 * place (ptc_error.inputs_written); neither a fallback nor an
 * eager rerun of its segment may follow. */
extern PyObject *cap_PartialRunError;

/* Frames for Python functions (frames.c). */
/* Pushes a frame running func(args) that finishes with `ret`: CAP_FRAME;
 * CAP_NEXT when the call must go to CPython instead (binding error,
 * uninterpretable code). */
int cap_call_inline(cap_interp *I, PyObject *func, PyObject *const *args, int nargs,
                    PyObject *kwnames, cap_cont ret);
/* The frame of generator expression func over the iterator arg, owned by
 * gen (a cap_lazy): YIELD_VALUE suspends it back into gen. NULL with an
 * error, or with none when the call must go to CPython. */
/* The frame of generator gen, a generator expression or function called
 * with the values of tuple args, the last len(kwnames) of them by keyword
 * (kwnames NULL or a tuple); NULL with an error, or with *why set where
 * CPython must make it (the arguments do not bind). */
cap_frame *cap_generator_frame(PyObject *func, PyObject *args, PyObject *kwnames, PyObject *gen,
                               const char **why);
cap_frame *cap_frame_for_call(PyObject *func, PyObject *const *args, int nargs,
                              PyObject *kwnames, const char **why);
/* The builtins a function with these globals sees: their __builtins__ (a
 * module's dict, or the dict itself), else the interpreter's. Borrowed. */
PyObject *cap_func_builtins(PyObject *globals);
/* Calls (calls.c). */
PyObject *cap_call_real(PyObject *callable, PyObject *const *args, int nargs, PyObject *kwnames);
int cap_frame_builtin(cap_frame *f, PyObject *callable, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out);

#endif /* PTC_CAP_H */
