/* Opcode handlers: the stack, locals, cells, globals, constants, jumps,
 * returns and exceptions.
 *
 * One block per handler, headed by its stack effect. Handlers peek at their
 * operands and pop them only once the instruction succeeded: while tracing, a
 * failing instruction becomes a graph break that reruns it for real, so the
 * stack must still hold its operands.
 */
#include "capture/interp/interp.h"

#include <string.h>


static PyObject *lpname(cap_frame *f, int i)
{
    return PyTuple_GetItem(f->code->lpnames, i);
}

/* ( -- ) */
HANDLER(NOP)
{
    UNUSED_ARGS;
    return CAP_NEXT;
}

/* (v -- ) */
HANDLER(POP_TOP)
{
    UNUSED_ARGS;
    Py_XDECREF(cap_pop(f));
    return CAP_NEXT;
}

/* (a, b -- )  3.12: the end of a for loop */
HANDLER(END_FOR)
{
    UNUSED_ARGS;
    cap_popn(f, 2);
    return CAP_NEXT;
}

/* ( -- NULL) */
HANDLER(PUSH_NULL)
{
    UNUSED_ARGS;
    cap_push(f, NULL);
    return CAP_NEXT;
}

/* (x_n ... x_1 -- x_n ... x_1, x_n) */
HANDLER(COPY)
{
    UNUSED_ARGS;
    cap_push(f, Py_XNewRef(cap_peek(f, in->arg)));
    return CAP_NEXT;
}

/* (x_n ... x_1 -- x_1 ... x_n): swaps TOS with the n-th item */
HANDLER(SWAP)
{
    UNUSED_ARGS;
    PyObject *t = f->stack[f->sp - 1];
    f->stack[f->sp - 1] = f->stack[f->sp - in->arg];
    f->stack[f->sp - in->arg] = t;
    int s = f->slot_src[f->code->nlp + f->sp - 1];
    f->slot_src[f->code->nlp + f->sp - 1] = f->slot_src[f->code->nlp + f->sp - in->arg];
    f->slot_src[f->code->nlp + f->sp - in->arg] = s;
    return CAP_NEXT;
}

/* ( -- consts[i]) */
HANDLER(LOAD_CONST)
{
    UNUSED_ARGS;
    cap_push(f, Py_NewRef(PyTuple_GetItem(f->code->consts, in->arg)));
    return CAP_NEXT;
}

/* (v -- ) returns v */
HANDLER(RETURN_VALUE)
{
    UNUSED_ARGS;
    return cap_return(I, f, cap_pop(f));
}

/* ( -- ) returns consts[i] */
HANDLER(RETURN_CONST)
{
    UNUSED_ARGS;
    return cap_return(I, f, Py_NewRef(PyTuple_GetItem(f->code->consts, in->arg)));
}

/* ---- locals -------------------------------------------------------------- */

static int unbound_local(cap_frame *f, int i)
{
    PyErr_Format(PyExc_UnboundLocalError,
                 "cannot access local variable '%U' where it is not associated with a value",
                 lpname(f, i));
    return CAP_ERR;
}

/* ( -- lp[i]) */
HANDLER(LOAD_FAST)
{
    if (!f->lp[in->arg])
        return unbound_local(f, in->arg);
    if (I->T && f->slot_src[in->arg] >= 0) {
        int rc = cap_hooks.load_state(I, f, in->arg);
        if (rc != CAP_NEXT)
            return rc;
    }
    cap_push(f, Py_NewRef(f->lp[in->arg]));
    return CAP_NEXT;
}

/* ( -- lp[i]) and lp[i] = NULL (3.12 inlined comprehensions; may push NULL) */
HANDLER(LOAD_FAST_AND_CLEAR)
{
    UNUSED_ARGS;
    int s = f->slot_src[in->arg];
    f->slot_src[in->arg] = -1;
    f->slot_src[f->code->nlp + f->sp] = s;
    cap_push(f, f->lp[in->arg]);
    f->lp[in->arg] = NULL;
    return CAP_NEXT;
}

/* (v -- ) lp[i] = v */
HANDLER(STORE_FAST)
{
    UNUSED_ARGS;
    int s = f->slot_src[f->code->nlp + f->sp - 1];
    f->slot_src[f->code->nlp + f->sp - 1] = -1;
    Py_XSETREF(f->lp[in->arg], cap_pop(f));
    f->slot_src[in->arg] = s;
    return CAP_NEXT;
}

/* ( -- ) */
HANDLER(DELETE_FAST)
{
    UNUSED_ARGS;
    if (!f->lp[in->arg])
        return unbound_local(f, in->arg);
    Py_CLEAR(f->lp[in->arg]);
    f->slot_src[in->arg] = -1;
    return CAP_NEXT;
}

/* ---- cells --------------------------------------------------------------- */

/* ( -- ) lp[i] = cell(lp[i]) */
HANDLER(MAKE_CELL)
{
    UNUSED_ARGS;
    if (I->T && f->lp[in->arg] && f->slot_src[in->arg] >= 0) {
        /* An argument of the starting state moves into a new cell: wrap it
           (installing its guards) while its source is still known. */
        int rc = cap_hooks.load_state(I, f, in->arg);
        if (rc != CAP_NEXT)
            return rc;
    }
    PyObject *cell = cap_cell_new(f->lp[in->arg]);
    if (!cell)
        return CAP_ERR;
    Py_XSETREF(f->lp[in->arg], cell);
    return CAP_NEXT;
}

/* ( -- ) the last n localsplus slots = the function's closure cells */
HANDLER(COPY_FREE_VARS)
{
    PyObject *closure = PyObject_GetAttr(f->func, cap_P.s_closure);
    if (!closure)
        return CAP_ERR;
    int n = in->arg, base = f->code->nlp - n;
    if (closure == Py_None || PyTuple_Size(closure) < n) {
        Py_DECREF(closure);
        PyErr_SetString(PyExc_SystemError, "ptc: function closure does not match its code");
        return CAP_ERR;
    }
    for (int i = 0; i < n; i++) {
        Py_XSETREF(f->lp[base + i], Py_NewRef(PyTuple_GetItem(closure, i)));
        if (I->T)
            cap_hooks.closure_cell(I->T, f, i, f->lp[base + i]);
    }
    Py_DECREF(closure);
    return CAP_NEXT;
}

/* ( -- cell) */
HANDLER(LOAD_CLOSURE)
{
    UNUSED_ARGS;
    cap_push(f, Py_NewRef(f->lp[in->arg]));
    return CAP_NEXT;
}

static int unbound_deref(cap_frame *f, int i)
{
    if (f->code->lpkind[i] & CAP_LP_FREE)
        PyErr_Format(PyExc_NameError,
                     "cannot access free variable '%U' where it is not associated with a value"
                     " in enclosing scope",
                     lpname(f, i));
    else
        unbound_local(f, i);
    return CAP_ERR;
}

/* ( -- cell_contents(lp[i])) */
HANDLER(LOAD_DEREF)
{
    PyObject *v = cap_cell_get(f->lp[in->arg]);
    if (!v && PyErr_Occurred())
        return CAP_ERR;
    if (I->T) {
        /* A cell from before this trace that it wrote holds the value only
           after the graph: the trace reads its log (the cell may still be
           empty, as a resumed frame's cell is before the write). */
        int rc = cap_hooks.load_cell(I->T, f->lp[in->arg], &v);
        if (rc != CAP_NEXT)
            return rc;
    }
    if (!v)
        return unbound_deref(f, in->arg);
    cap_push(f, v);
    return CAP_NEXT;
}

/* (v -- ) cell_contents(lp[i]) = v */
HANDLER(STORE_DEREF)
{
    bool logged = false;
    if (I->T) {
        int rc = cap_hooks.write_cell(I, f->lp[in->arg], cap_peek(f, 1), &logged);
        if (rc != CAP_NEXT)
            return rc;
    }
    if (!logged && cap_cell_set(f->lp[in->arg], cap_peek(f, 1)) < 0)
        return CAP_ERR;
    cap_popn(f, 1);
    return CAP_NEXT;
}

/* ( -- ) */
HANDLER(DELETE_DEREF)
{
    PyObject *v = cap_cell_get(f->lp[in->arg]);
    if (!v)
        return PyErr_Occurred() ? CAP_ERR : unbound_deref(f, in->arg);
    Py_DECREF(v);
    bool logged = false;
    if (I->T) {
        int rc = cap_hooks.write_cell(I, f->lp[in->arg], NULL, &logged);
        if (rc != CAP_NEXT || logged)
            return rc;
    }
    return cap_cell_set(f->lp[in->arg], NULL) < 0 ? CAP_ERR : CAP_NEXT;
}

/* (mapping -- v): class bodies: the mapping first, then the cell */
HANDLER(LOAD_FROM_DICT_OR_DEREF)
{
    PyObject *name = lpname(f, in->arg);
    PyObject *mapping = cap_P.py312 ? cap_peek(f, 1) : f->locals_dict;
    PyObject *v = NULL;
    if (mapping) {
        v = PyObject_GetItem(mapping, name);
        if (!v && !PyErr_ExceptionMatches(PyExc_KeyError))
            return CAP_ERR;
        PyErr_Clear();
    }
    if (!v && !(v = cap_cell_get(f->lp[in->arg])))
        return PyErr_Occurred() ? CAP_ERR : unbound_deref(f, in->arg);
    if (cap_P.py312)
        cap_popn(f, 1);
    cap_push(f, v);
    return CAP_NEXT;
}

/* ---- globals and names ---------------------------------------------------- */

/* ( -- [NULL], globals[name] or builtins[name]) */
HANDLER(LOAD_GLOBAL)
{
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg >> 1), *v;
    int rc = cap_op_load_global(I, f, name, &v);
    if (rc != CAP_NEXT)
        return rc;
    if (in->arg & 1)
        cap_push(f, NULL);
    cap_push(f, v);
    return CAP_NEXT;
}

/* (v -- ) globals[name] = v */
HANDLER(STORE_GLOBAL)
{
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg);
    if (I->T) {
        int rc = cap_hooks.global_write(I, f, name, cap_peek(f, 1));
        if (rc != CAP_NEXT)
            return rc;
    } else if (PyDict_SetItem(f->globals, name, cap_peek(f, 1)) < 0) {
        return CAP_ERR;
    }
    cap_popn(f, 1);
    return CAP_NEXT;
}

/* ( -- ) del globals[name] */
HANDLER(DELETE_GLOBAL)
{
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg);
    if (I->T)
        return cap_hooks.global_write(I, f, name, NULL);
    if (PyDict_DelItem(f->globals, name) < 0) {
        if (PyErr_ExceptionMatches(PyExc_KeyError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_NameError, "name '%U' is not defined", name);
        }
        return CAP_ERR;
    }
    return CAP_NEXT;
}

static int need_locals(cap_frame *f)
{
    if (f->locals_dict)
        return 0;
    PyErr_SetString(PyExc_SystemError, "no locals found");
    return -1;
}

/* ( -- locals[name] or globals[name] or builtins[name]) */
HANDLER(LOAD_NAME)
{
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg), *v;
    if (need_locals(f) < 0)
        return CAP_ERR;
    v = PyObject_GetItem(f->locals_dict, name);
    if (v) {
        cap_push(f, v);
        return CAP_NEXT;
    }
    if (!PyErr_ExceptionMatches(PyExc_KeyError))
        return CAP_ERR;
    PyErr_Clear();
    int rc = cap_op_load_global(I, f, name, &v);
    if (rc == CAP_NEXT)
        cap_push(f, v);
    return rc;
}

/* (v -- ) locals[name] = v */
HANDLER(STORE_NAME)
{
    UNUSED_ARGS;
    if (need_locals(f) < 0)
        return CAP_ERR;
    if (PyObject_SetItem(f->locals_dict, PyTuple_GetItem(f->code->names, in->arg),
                         cap_peek(f, 1)) < 0)
        return CAP_ERR;
    cap_popn(f, 1);
    return CAP_NEXT;
}

/* ( -- ) del locals[name] */
HANDLER(DELETE_NAME)
{
    UNUSED_ARGS;
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg);
    if (need_locals(f) < 0)
        return CAP_ERR;
    if (PyObject_DelItem(f->locals_dict, name) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_NameError, "name '%U' is not defined", name);
        return CAP_ERR;
    }
    return CAP_NEXT;
}

/* ( -- locals) */
HANDLER(LOAD_LOCALS)
{
    UNUSED_ARGS;
    if (need_locals(f) < 0)
        return CAP_ERR;
    cap_push(f, Py_NewRef(f->locals_dict));
    return CAP_NEXT;
}

/* (mapping -- v): annotation scopes of 3.12 */
HANDLER(LOAD_FROM_DICT_OR_GLOBALS)
{
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg);
    PyObject *v = PyObject_GetItem(cap_peek(f, 1), name);
    if (!v) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError))
            return CAP_ERR;
        PyErr_Clear();
        int rc = cap_op_load_global(I, f, name, &v);
        if (rc != CAP_NEXT)
            return rc;
    }
    cap_popn(f, 1);
    cap_push(f, v);
    return CAP_NEXT;
}

/* ( -- ) class bodies: __annotations__ = {} in locals */
HANDLER(SETUP_ANNOTATIONS)
{
    UNUSED_ARGS;
    if (need_locals(f) < 0)
        return CAP_ERR;
    PyObject *key = PyUnicode_FromString("__annotations__");
    PyObject *v = PyObject_GetItem(f->locals_dict, key);
    int rc = CAP_NEXT;
    if (!v) {
        PyObject *d = PyErr_ExceptionMatches(PyExc_KeyError) ? PyDict_New() : NULL;
        PyErr_Clear();
        if (!d || PyObject_SetItem(f->locals_dict, key, d) < 0)
            rc = CAP_ERR;
        Py_XDECREF(d);
    }
    Py_XDECREF(v);
    Py_DECREF(key);
    return rc;
}

/* ---- jumps ---------------------------------------------------------------- */

/* ( -- ) */
HANDLER(JUMP)
{
    UNUSED_ARGS;
    f->pc = in->target;
    return CAP_JUMPED;
}

/* Truth-driven jumps. `sense`: jump when the truth value equals it. `pop`:
 * the value is popped either way (else only when not jumping). */
static int cond_jump(cap_interp *I, cap_frame *f, const cap_instr *in, bool sense, bool pop)
{
    PyObject *v = cap_peek(f, 1);
    int t;
    if (v == Py_True || v == Py_False || v == Py_None)
        t = v == Py_True;
    else {
        int rc = cap_op_truth(I, v, cap_ret_truth, &t);
        if (rc == CAP_FRAME) {
            if (pop)
                cap_popn(f, 1);
            return CAP_FRAME;
        }
        if (rc != CAP_NEXT)
            return rc;
    }
    if ((bool)t == sense) {
        if (pop)
            cap_popn(f, 1);
        f->pc = in->target;
        return CAP_JUMPED;
    }
    cap_popn(f, 1);
    return CAP_NEXT;
}

/* (v -- ) */
HANDLER(POP_JUMP_IF_FALSE)
{
    return cond_jump(I, f, in, false, true);
}

/* (v -- ) */
HANDLER(POP_JUMP_IF_TRUE)
{
    return cond_jump(I, f, in, true, true);
}

/* (v -- v | ) 3.11: keeps v when jumping */
HANDLER(JUMP_IF_FALSE_OR_POP)
{
    return cond_jump(I, f, in, false, false);
}

/* (v -- v | ) */
HANDLER(JUMP_IF_TRUE_OR_POP)
{
    return cond_jump(I, f, in, true, false);
}

/* (v -- ) */
HANDLER(POP_JUMP_IF_NONE)
{
    UNUSED_ARGS;
    bool none = cap_peek(f, 1) == Py_None;
    cap_popn(f, 1);
    if (!none)
        return CAP_NEXT;
    f->pc = in->target;
    return CAP_JUMPED;
}

/* (v -- ) */
HANDLER(POP_JUMP_IF_NOT_NONE)
{
    UNUSED_ARGS;
    bool none = cap_peek(f, 1) == Py_None;
    cap_popn(f, 1);
    if (none)
        return CAP_NEXT;
    f->pc = in->target;
    return CAP_JUMPED;
}

static int truth_resume(cap_frame *p, const cap_instr *in, PyObject *v)
{
    /* v is what __bool__ (bool) or __len__ (int >= 0) returned. */
    int t;
    if (PyBool_Check(v)) {
        t = v == Py_True;
    } else if (PyLong_Check(v)) {
        long n = PyLong_AsLong(v);
        if (n < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "__len__() should return >= 0");
            Py_DECREF(v);
            return CAP_ERR;
        }
        t = n != 0;
    } else {
        PyErr_Format(PyExc_TypeError, "__bool__ should return bool, returned %s",
                     cap_tpname(Py_TYPE(v)));
        Py_DECREF(v);
        return CAP_ERR;
    }
    Py_DECREF(v);
    switch (in->h) {
    case H_UNARY_NOT:
        cap_push(p, Py_NewRef(t ? Py_False : Py_True));
        return CAP_NEXT;
    case H_POP_JUMP_IF_FALSE:
    case H_POP_JUMP_IF_TRUE:
        if ((bool)t == (in->h == H_POP_JUMP_IF_TRUE)) {
            p->pc = in->target;
            return CAP_JUMPED;
        }
        return CAP_NEXT;
    case H_JUMP_IF_FALSE_OR_POP:
    case H_JUMP_IF_TRUE_OR_POP:
        if ((bool)t == (in->h == H_JUMP_IF_TRUE_OR_POP)) {
            p->pc = in->target;
            return CAP_JUMPED;
        }
        cap_popn(p, 1);
        return CAP_NEXT;
    default:
        cap_push(p, Py_NewRef(t ? Py_True : Py_False));
        return CAP_NEXT;
    }
}

int cap_ret_truth(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                  PyObject *b, PyObject *v)
{
    (void)arg, (void)a, (void)b;
    int rc = truth_resume(p, in, v);
    return rc == CAP_ERR ? cap_ret_failed(I) : rc;
}

/* ---- exceptions ------------------------------------------------------------ */

/* The handled exception: the thread's, or the trace's own while tracing
 * (tracing must not change interpreter state). */
static PyObject *handled_get(cap_interp *I)
{
    if (!I->T)
        return PyErr_GetHandledException();
    Py_ssize_t n = PyList_Size(cap_hooks.handled_stack(I->T));
    return n ? Py_NewRef(PyList_GetItem(cap_hooks.handled_stack(I->T), n - 1)) : NULL;
}

static void handled_push(cap_interp *I, PyObject *exc)
{
    if (!I->T)
        PyErr_SetHandledException(exc == Py_None ? NULL : exc);
    else
        PyList_Append(cap_hooks.handled_stack(I->T), exc);
}

static void handled_pop(cap_interp *I, PyObject *prev)
{
    if (!I->T) {
        PyErr_SetHandledException(prev == Py_None ? NULL : prev);
        return;
    }
    Py_ssize_t n = PyList_Size(cap_hooks.handled_stack(I->T));
    if (n)
        PyList_SetSlice(cap_hooks.handled_stack(I->T), n - 1, n, NULL);
}

/* (exc -- prev_exc, exc) entering a handler */
HANDLER(PUSH_EXC_INFO)
{
    UNUSED_ARGS;
    PyObject *exc = cap_pop(f);
    PyObject *prev = handled_get(I);
    cap_push(f, prev ? prev : Py_NewRef(Py_None));
    cap_push(f, exc);
    handled_push(I, exc);
    f->exc_depth++;
    return CAP_NEXT;
}

/* (prev_exc -- ) leaving a handler */
HANDLER(POP_EXCEPT)
{
    UNUSED_ARGS;
    PyObject *prev = cap_pop(f);
    handled_pop(I, prev);
    Py_XDECREF(prev);
    if (f->exc_depth > 0)
        f->exc_depth--;
    return CAP_NEXT;
}

static int check_catchable(PyObject *t)
{
    if (PyTuple_Check(t)) {
        for (Py_ssize_t i = 0; i < PyTuple_Size(t); i++)
            if (check_catchable(PyTuple_GetItem(t, i)) < 0)
                return -1;
        return 0;
    }
    if (PyType_Check(t) && PyObject_IsSubclass(t, PyExc_BaseException) == 1)
        return 0;
    PyErr_SetString(PyExc_TypeError,
                    "catching classes that do not inherit from BaseException is not allowed");
    return -1;
}

/* (exc, type -- exc, bool) */
HANDLER(CHECK_EXC_MATCH)
{
    UNUSED_ARGS;
    PyObject *type = cap_peek(f, 1), *exc = cap_peek(f, 2);
    if (check_catchable(type) < 0)
        return CAP_ERR;
    int m = PyErr_GivenExceptionMatches(exc, type);
    cap_popn(f, 1);
    cap_push(f, Py_NewRef(m ? Py_True : Py_False));
    return CAP_NEXT;
}

static int reraise(cap_interp *I, PyObject *exc)
{
    /* Restores exc as the pending exception without chaining it again, nor
     * another traceback entry for this frame (its raise made one). */
    I->reraised = true;
    PyObject *tb = PyException_GetTraceback(exc);
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, tb);
    return CAP_ERR;
}

/* (exc -- ) re-raises. The operand stays until unwinding clears the stack:
 * a raising instruction must be re-executable (tracing turns an uncaught
 * exception into a break that reruns it for real). */
HANDLER(RERAISE)
{
    UNUSED_ARGS;
    PyObject *exc = cap_peek(f, 1);
    if (!exc || exc == Py_None) {
        PyErr_SetString(PyExc_RuntimeError, "No active exception to reraise");
        return CAP_ERR;
    }
    return reraise(I, Py_NewRef(exc));
}

/* 3.12, the handler of a yield from's YIELD_VALUE: (receiver, sent, exc --
 * None, value) when a throw() ended the inner iterator with StopIteration,
 * else exc re-raised. */
HANDLER(CLEANUP_THROW)
{
    UNUSED_ARGS;
    PyObject *exc = cap_peek(f, 1);
    if (!PyObject_TypeCheck(exc, (PyTypeObject *)PyExc_StopIteration))
        return reraise(I, Py_NewRef(exc));
    PyObject *value = PyObject_GetAttrString(exc, "value");
    if (!value)
        return CAP_ERR;
    cap_popn(f, 3);
    cap_push(f, Py_NewRef(Py_None));
    cap_push(f, value);
    return CAP_NEXT;
}

static PyObject *make_exception(PyObject *v, const char *what)
{
    if (PyType_Check(v) && PyObject_IsSubclass(v, PyExc_BaseException) == 1) {
        PyObject *e = PyObject_CallNoArgs(v);
        if (e && !PyObject_TypeCheck(e, (PyTypeObject *)PyExc_BaseException)) {
            PyErr_Format(PyExc_TypeError,
                         "calling %R should have returned an instance of BaseException, not %s",
                         v, cap_tpname(Py_TYPE(e)));
            Py_CLEAR(e);
        }
        return e;
    }
    if (PyObject_TypeCheck(v, (PyTypeObject *)PyExc_BaseException))
        return Py_NewRef(v);
    PyErr_SetString(PyExc_TypeError, what);
    return NULL;
}

/* Raises exc with the handled exception as its __context__, as raise does.
 * PyErr_SetObject chains the thread's; while tracing, the handled exception
 * is the trace's own (the thread's only outside every traced handler). */
static void raise_chained(cap_interp *I, PyObject *exc)
{
    if (!I->T) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        return;
    }
    PyObject *ctx = handled_get(I);
    if (!ctx)
        ctx = PyErr_GetHandledException();
    if (ctx && ctx != Py_None && ctx != exc) {
        /* A context chain that leads back to exc is cut there (no cycle). */
        PyObject *o = ctx, *c;
        while ((c = PyException_GetContext(o))) {
            Py_DECREF(c); /* still held by o */
            if (c == exc) {
                PyException_SetContext(o, NULL);
                break;
            }
            o = c;
        }
        PyException_SetContext(exc, ctx); /* steals ctx */
    } else {
        Py_XDECREF(ctx);
    }
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), Py_NewRef(exc),
                  PyException_GetTraceback(exc));
}

/* (exc?, cause? -- ) raise [exc [from cause]] */
HANDLER(RAISE_VARARGS)
{
    if (in->arg == 0) {
        PyObject *cur = handled_get(I);
        if (!cur) {
            PyErr_SetString(PyExc_RuntimeError, "No active exception to reraise");
            return CAP_ERR;
        }
        return reraise(I, cur);
    }
    PyObject *exc = make_exception(cap_peek(f, in->arg),
                                   "exceptions must derive from BaseException");
    if (!exc)
        return CAP_ERR;
    if (in->arg == 2) {
        PyObject *c = cap_peek(f, 1), *cause;
        if (c == Py_None) {
            cause = NULL;
        } else if (!(cause = make_exception(c, "exception causes must derive from BaseException"))) {
            Py_DECREF(exc);
            return CAP_ERR;
        }
        PyException_SetCause(exc, cause); /* also sets __suppress_context__ */
    }
    raise_chained(I, exc);
    Py_DECREF(exc);
    return CAP_ERR;
}

/* ( -- AssertionError) */
HANDLER(LOAD_ASSERTION_ERROR)
{
    UNUSED_ARGS;
    cap_push(f, Py_NewRef(PyExc_AssertionError));
    return CAP_NEXT;
}

/* (exit, lasti, prev_exc, exc -- exit, lasti, prev_exc, exc, res) */
HANDLER(WITH_EXCEPT_START)
{
    PyObject *exit = cap_peek(f, 4), *exc = cap_peek(f, 1);
    PyObject *tb = PyException_GetTraceback(exc);
    PyObject *args[3] = {(PyObject *)Py_TYPE(exc), exc, tb ? tb : Py_None};
    PyObject *res;
    int rc = cap_op_call(I, exit, args, 3, NULL, &res);
    Py_XDECREF(tb);
    if (rc == CAP_NEXT)
        cap_push(f, res);
    return rc;
}

/* Every opcode ptc never runs (generators, coroutines, except*): code that
 * contains one is run by CPython instead, so reaching here is a bug. */
HANDLER(UNSUPPORTED)
{
    UNUSED_ARGS;
    PyErr_Format(PyExc_SystemError, "ptc: opcode %s cannot be interpreted", cap_opname(in->raw));
    return CAP_ERR;
}
