/* The interpreter loop: frames, argument binding, exception unwinding and
 * returns.
 *
 * ptc runs user bytecode on its own frames (never CPython's): each frame owns
 * its localsplus array and value stack, and a parent frame waits at the
 * instruction that pushed its child (a CALL, or a LOAD_ATTR that runs a
 * property, ...) until the child returns; the child's continuation (a
 * function pointer set by that instruction, cap_cont) finishes it. Exceptions unwind through the exception
 * tables of 3.11+ exactly as CPython does. The same loop serves tracing (values
 * may be symbolic; an error becomes a graph break at the instruction that
 * raised it, so the instruction reruns for real) and real execution.
 */
#include "capture/interp/interp.h"

#include <stdlib.h>
#include <string.h>

/* The user's configuration (ptc.config), read by every layer: it lives in
 * the bottom one. */
cap_config cap_cfg = {.recompile_limit = 8, .strict = false, .inline_depth = 48};
/* ptc's internal failure (ptc._C.InternalError, made with the module's other
 * exceptions at start-up): the interpreter raises it too. */
PyObject *cap_InternalError, *cap_GraphBreak;
cap_trace_hooks cap_hooks;

cap_frame *cap_frame_new(cap_code *code, PyObject *func, PyObject *globals, PyObject *builtins)
{
    size_t nslots = (size_t)code->nlp + (size_t)code->stacksize;
    cap_frame *f = calloc(1, sizeof *f + nslots * (sizeof(PyObject *) + sizeof(int)));
    if (!f) {
        PyErr_NoMemory();
        return NULL;
    }
    f->code = cap_code_ref(code);
    f->func = Py_XNewRef(func);
    f->globals = Py_XNewRef(globals);
    f->builtins = Py_XNewRef(builtins);
    f->lp = (PyObject **)(f + 1);
    f->stack = f->lp + code->nlp;
    f->slot_src = (int *)(f->stack + code->stacksize);
    for (size_t i = 0; i < nslots; i++)
        f->slot_src[i] = -1;
    return f;
}

void cap_frame_free(cap_frame *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->code->nlp; i++)
        Py_XDECREF(f->lp[i]);
    for (int i = 0; i < f->sp; i++)
        Py_XDECREF(f->stack[i]);
    Py_XDECREF(f->func);
    Py_XDECREF(f->globals);
    Py_XDECREF(f->builtins);
    Py_XDECREF(f->locals_dict);
    Py_XDECREF(f->ret_a);
    Py_XDECREF(f->ret_b);
    cap_code_unref(f->code);
    free(f);
}

void cap_popn(cap_frame *f, int n)
{
    while (n-- > 0)
        Py_XDECREF(f->stack[--f->sp]);
}

void cap_push_frame(cap_interp *I, cap_frame *f)
{
    f->parent = I->frame;
    f->depth = I->frame ? I->frame->depth + 1 : 0;
    if (!f->module_path && I->frame)
        f->module_path = I->frame->module_path;
    I->frame = f;
    if (!I->base)
        I->base = f;
}

void cap_interp_clear(cap_interp *I)
{
    while (I->frame) {
        cap_frame *p = I->frame->parent;
        cap_frame_free(I->frame);
        I->frame = p;
    }
    I->base = NULL;
    Py_CLEAR(I->result);
    Py_CLEAR(I->sync_result);
    Py_CLEAR(I->ids);
}

/* ---- argument binding (CPython's initialize_locals) ---------------------- */

static int kw_index(cap_code *c, PyObject *name, int lo, int hi)
{
    for (int i = lo; i < hi; i++)
        if (PyTuple_GetItem(c->lpnames, i) == name)
            return i;
    for (int i = lo; i < hi; i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GetItem(c->lpnames, i), name, Py_EQ);
        if (eq < 0)
            PyErr_Clear();
        if (eq > 0)
            return i;
    }
    return -1;
}

int cap_bind_args(cap_frame *f, PyObject *const *args, int nargs, PyObject *kwnames,
                  PyObject *const *kwvalues)
{
    cap_code *c = f->code;
    PyObject **lp = f->lp;
    int argc = c->argcount, total = c->argcount + c->kwonly;
    bool varargs = c->flags & 0x04, varkw = c->flags & 0x08;
    PyObject *kwdict = NULL, *defaults = NULL, *kwdefaults = NULL;
    int rc = 0;
    if (varkw) {
        if (!(kwdict = PyDict_New()))
            return -1;
        lp[total + varargs] = kwdict;
    }
    int n = nargs < argc ? nargs : argc;
    for (int i = 0; i < n; i++)
        lp[i] = Py_NewRef(args[i]);
    if (varargs) {
        PyObject *rest = cap_tuple_from_array(args + n, nargs - n);
        if (!rest)
            return -1;
        lp[total] = rest;
    } else if (nargs > argc) {
        return 0;
    }
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GetItem(kwnames, k);
        int j = kw_index(c, name, c->posonly, total);
        if (j < 0) {
            if (!varkw)
                return 0;
            if (PyDict_GetItem(kwdict, name))
                return 0;
            if (PyDict_SetItem(kwdict, name, kwvalues[k]) < 0)
                return -1;
            continue;
        }
        if (lp[j])
            return 0;
        lp[j] = Py_NewRef(kwvalues[k]);
    }
    if (nargs < argc || c->kwonly) {
        defaults = PyObject_GetAttr(f->func, cap_P.s_defaults);
        kwdefaults = defaults ? PyObject_GetAttr(f->func, cap_P.s_kwdefaults) : NULL;
        if (!defaults || !kwdefaults) {
            rc = -1;
            goto done;
        }
        Py_ssize_t ndef = defaults == Py_None ? 0 : PyTuple_Size(defaults);
        for (int i = nargs; i < argc; i++) {
            if (lp[i])
                continue;
            Py_ssize_t d = i - (argc - ndef);
            if (d < 0)
                goto done; /* missing positional: CPython raises */
            lp[i] = Py_NewRef(PyTuple_GetItem(defaults, d));
        }
        for (int i = argc; i < total; i++) {
            if (lp[i])
                continue;
            PyObject *v = kwdefaults == Py_None
                              ? NULL
                              : PyDict_GetItem(kwdefaults, PyTuple_GetItem(c->lpnames, i));
            if (!v)
                goto done;
            lp[i] = Py_NewRef(v);
        }
    }
    rc = 1;
done:
    Py_XDECREF(defaults);
    Py_XDECREF(kwdefaults);
    return rc;
}

/* ---- returning ---------------------------------------------------------- */

int cap_ret_push(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                 PyObject *b, PyObject *v)
{
    (void)I, (void)in, (void)arg, (void)a, (void)b;
    cap_push(p, v);
    return CAP_NEXT;
}

/* Pushes like cap_ret_push; unwinding knows it: a StopIteration leaving the
 * frame is FOR_ITER's exhaustion, not an error. */
int cap_ret_next_item(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                      PyObject *b, PyObject *v)
{
    return cap_ret_push(I, p, in, arg, a, b, v);
}

int cap_ret_discard(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                    PyObject *b, PyObject *v)
{
    (void)I, (void)p, (void)in, (void)arg, (void)a, (void)b;
    Py_DECREF(v);
    return CAP_NEXT;
}

int cap_ret_init(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                 PyObject *b, PyObject *v)
{
    (void)in, (void)arg, (void)b;
    if (v != Py_None) {
        PyErr_Format(PyExc_TypeError, "__init__() should return None, not '%s'",
                     cap_tpname(Py_TYPE(v)));
        Py_DECREF(v);
        return cap_ret_failed(I);
    }
    Py_DECREF(v);
    cap_push(p, Py_NewRef(a));
    return CAP_NEXT;
}

/* A nested run (a callback traced from inside a builtin) is done; an
 * __init__ run this way delivers its instance. */
int cap_ret_sync(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                 PyObject *b, PyObject *v)
{
    (void)p, (void)in, (void)arg, (void)b;
    if (a) {
        Py_DECREF(v);
        v = Py_NewRef(a);
    }
    Py_XSETREF(I->sync_result, v);
    return CAP_SYNC;
}

int cap_ret_failed(cap_interp *I)
{
    if (I->T) {
        PyObject *t, *val, *tb;
        PyErr_Fetch(&t, &val, &tb);
        PyErr_Format(cap_InternalError, "ptc: a special method failed while tracing");
        Py_XDECREF(t);
        Py_XDECREF(val);
        Py_XDECREF(tb);
    }
    return CAP_ERR;
}

/* Pops the innermost frame and lets its continuation finish the parent's
 * instruction that pushed it. v is the return value (stolen). */
static int frame_return(cap_interp *I, PyObject *v)
{
    cap_frame *f = I->frame, *p = f->parent;
    cap_cont ret = f->ret ? f->ret : cap_ret_push;
    PyObject *a = f->ret_a, *b = f->ret_b;
    int arg = f->ret_arg;
    f->ret_a = f->ret_b = NULL;
    I->frame = p;
    cap_frame_free(f);
    const cap_instr *in = &p->code->ins[p->pc];
    int rc = ret(I, p, in, arg, a, b, v);
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (rc == CAP_SYNC)
        return rc;
    if (rc == CAP_NEXT)
        p->pc = in->next;
    else if (rc == CAP_JUMPED)
        rc = CAP_NEXT;
    return rc == CAP_NEXT ? CAP_FRAME : rc;
}

int cap_return(cap_interp *I, cap_frame *f, PyObject *v)
{
    if (f == I->base) {
        Py_XSETREF(I->result, v);
        return CAP_DONE;
    }
    return frame_return(I, v);
}

/* ---- unwinding ---------------------------------------------------------- */

static bool stop_iteration_pending(void)
{
    return PyErr_ExceptionMatches(PyExc_StopIteration);
}

/* Finds a handler for the pending exception, popping frames that have none.
 * 0: continue at the handler; -1: the exception leaves the outermost frame. */
static int unwind(cap_interp *I)
{
    for (;;) {
        cap_frame *f = I->frame;
        const cap_exc_entry *h = cap_code_handler(f->code, f->pc);
        if (h) {
            PyObject *type, *val, *tb;
            PyErr_Fetch(&type, &val, &tb);
            PyErr_NormalizeException(&type, &val, &tb);
            if (tb && val)
                PyException_SetTraceback(val, tb);
            Py_XDECREF(type);
            Py_XDECREF(tb);
            if (!val)
                val = Py_NewRef(Py_None);
            cap_popn(f, f->sp - h->depth);
            if (h->lasti)
                cap_push(f, PyLong_FromLong(f->pc));
            cap_push(f, val);
            f->pc = h->target;
            f->kwnames = NULL;
            return 0;
        }
        if (f == I->base)
            return -1;
        cap_frame *p = f->parent;
        bool for_iter = f->ret == cap_ret_next_item;
        I->frame = p;
        cap_frame_free(f);
        if (for_iter && stop_iteration_pending()) {
            /* A Python __next__ ended the loop: FOR_ITER's exhaustion path. */
            PyErr_Clear();
            const cap_instr *in = &p->code->ins[p->pc];
            Py_XDECREF(cap_pop(p));
            p->pc = in->target;
            return 0;
        }
    }
}

/* While tracing, an exception raised by user code or by an operation on
 * concrete values is deterministic under the guards, so a handler inside the
 * traced frames runs traced (try/except KeyError, Mapping.__contains__, ...).
 * One that nothing catches (or that would cross a nested run) becomes a break
 * at the raising instruction, which then raises for real. */
static int trace_unwind(cap_interp *I)
{
    if (!PyErr_ExceptionMatches(cap_GraphBreak) && !PyErr_ExceptionMatches(cap_InternalError)) {
        for (cap_frame *f = I->frame; f; f = f->parent) {
            if (cap_code_handler(f->code, f->pc))
                return unwind(I) < 0 ? cap_hooks.error(I) : CAP_NEXT;
            if (f->ret == cap_ret_next_item && f->parent && stop_iteration_pending())
                return unwind(I) < 0 ? cap_hooks.error(I) : CAP_NEXT;
            if (f->ret == cap_ret_sync)
                return CAP_ERR; /* the nested run's caller decides */
            if (f == I->base)
                break;
        }
    }
    return cap_hooks.error(I);
}

static bool at_safe_point(cap_interp *I)
{
    if (I->frame->kwnames)
        return false;
    for (cap_frame *f = I->frame; f; f = f->parent)
        if (f->exc_depth)
            return false;
    return true;
}

int cap_run(cap_interp *I)
{
    for (;;) {
        cap_frame *f = I->frame;
        if (I->stepping && I->steps >= I->min_steps && at_safe_point(I))
            return CAP_STOP;
        if (I->break_at && I->steps == I->break_at - 1 && I->T)
            return cap_hooks.break_again(I->T);
        const cap_instr *in = &f->code->ins[f->pc];
        I->instr_step = I->steps;
        int rc = cap_handlers[in->h](I, f, in);
        I->steps++;
        switch (rc) {
        case CAP_NEXT:
            f->pc = in->next;
            break;
        case CAP_JUMPED:
        case CAP_FRAME:
            break;
        case CAP_ERR:
            if (I->mode == CAP_TRACE) {
                int t = trace_unwind(I);
                if (t != CAP_NEXT)
                    return t;
                break;
            }
            if (unwind(I) < 0)
                return CAP_ERR;
            break;
        default:
            return rc;
        }
    }
}
