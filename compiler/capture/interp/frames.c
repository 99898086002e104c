/* Frames: making, pushing and freeing them, binding a call's arguments to a
 * new frame, and returning from one.
 *
 * ptc runs user bytecode on its own frames (never CPython's): each frame owns
 * its localsplus array and value stack, and a parent frame waits at the
 * instruction that pushed its child (a CALL, or a LOAD_ATTR that runs a
 * property, ...) until the child returns; the child's continuation (a
 * function pointer set by that instruction, cap_cont) finishes it. The loop
 * that runs frames is loop.c's.
 */
#include "capture/interp/interp.h"

#include <stdlib.h>
#include <string.h>

/* The user's configuration (ptc.config), read by every layer: it lives in
 * the bottom one. */
cap_config cap_cfg = {.recompile_limit = 8, .strict = false, .inline_depth = 48};
/* ptc's internal failure (ptc._C.InternalError, made with the module's other
 * exceptions at start-up): the interpreter raises it too. */
PyObject *cap_InternalError, *cap_PartialRunError, *cap_GraphBreak;
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
    Py_XDECREF(f->frame_object);
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

/* ---- frames for Python functions ------------------------------------------- */

PyObject *cap_func_builtins(PyObject *globals)
{
    PyObject *b = PyDict_GetItemString(globals, "__builtins__");
    if (!b)
        return cap_P.builtins;
    if (PyModule_Check(b))
        return PyModule_GetDict(b);
    return b;
}

/* A frame for func(args) with arguments bound, or NULL with *why set:
 * NULL the call must go to CPython (binding error, uninterpretable code). */
static cap_frame *frame_for_call(PyObject *func, PyObject *const *args, int nargs,
                                 PyObject *kwnames, const char **why, PyObject *gen)
{
    *why = NULL;
    PyObject *code = PyObject_GetAttr(func, cap_P.s_code);
    PyObject *globals = code ? PyObject_GetAttr(func, cap_P.s_globals) : NULL;
    cap_code *c = globals ? cap_code_get(code) : NULL;
    cap_frame *f = NULL;
    if (!c)
        goto done;
    if (c->notrace && !(gen && (c->genexpr || c->genfunc))) {
        *why = c->notrace;
        goto done;
    }
    f = cap_frame_new(c, func, globals, cap_func_builtins(globals));
    if (!f)
        goto done;
    f->gen = gen;
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0;
    int b = cap_bind_args(f, args, nargs - nkw, kwnames, args + nargs - nkw);
    if (b <= 0) {
        cap_frame_free(f);
        f = NULL;
        if (b == 0)
            *why = "argument binding";
    }
done:
    Py_XDECREF(code);
    Py_XDECREF(globals);
    return f;
}

cap_frame *cap_frame_for_call(PyObject *func, PyObject *const *args, int nargs,
                              PyObject *kwnames, const char **why)
{
    return frame_for_call(func, args, nargs, kwnames, why, NULL);
}

cap_frame *cap_generator_frame(PyObject *func, PyObject *args, PyObject *kwnames, PyObject *gen,
                               const char **why)
{
    int n = (int)PyTuple_Size(args);
    PyObject **buf = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n + 1));
    if (!buf) {
        PyErr_NoMemory();
        return NULL;
    }
    for (int i = 0; i < n; i++)
        buf[i] = PyTuple_GetItem(args, i);
    cap_frame *f = frame_for_call(func, buf, n, kwnames, why, gen);
    PyMem_Free(buf);
    return f;
}

int cap_frame_yield_pc(const cap_frame *f)
{
    /* YIELD_VALUE is one code unit with no cache, before the RESUME that
       f->pc stands at (3.11, 3.12) */
    int pc = f->pc - 1;
    return pc >= 0 && f->code->ins[pc].h == H_YIELD_VALUE ? pc : f->pc;
}

/* ptc.config.trust_module_state wraps nn.Module's state-changing methods
 * (python/ptc/_module_state.py). A trace follows the method they wrap: the
 * epoch bump is for real calls, and writes to modules from outside the
 * trace are replayed (or run at a break) through the wrapper. */
static PyObject *unwrap_epoch(PyObject *func)
{
    static PyObject *name;
    if (!cap_is_function(func) || (!name && !(name = PyUnicode_InternFromString("__ptc_wrapped__"))))
        return func;
    PyObject *orig = PyObject_GetAttr(func, name);
    if (!orig) {
        PyErr_Clear();
        return func;
    }
    Py_DECREF(orig); /* the wrapper keeps it */
    return orig;
}

int cap_call_inline(cap_interp *I, PyObject *func, PyObject *const *args, int nargs,
                    PyObject *kwnames, cap_cont ret)
{
    if (I->T)
        func = unwrap_epoch(func);
    int depth = I->frame ? I->frame->depth + 1 : 0;
    if (depth > I->max_depth) {
        if (I->T)
            return cap_hooks.brk(I->T, CAP_B_INLINE_DEPTH, "inlining deeper than %d", I->max_depth);
        return CAP_NEXT;
    }
    const char *why;
    cap_frame *f = frame_for_call(func, args, nargs, kwnames, &why, NULL);
    if (!f)
        return why ? CAP_NEXT : CAP_ERR;
    f->ret = ret;
    if (I->T && cap_hooks.enter_frame(I->T, f) < 0) {
        cap_frame_free(f);
        return CAP_ERR;
    }
    cap_push_frame(I, f);
    return CAP_FRAME;
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
