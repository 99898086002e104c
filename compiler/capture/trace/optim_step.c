/* opt.step() of a torch.optim optimizer met while tracing.
 *
 * The step reads every parameter's .grad (which a backward just wrote, for
 * real, at a break) and writes parameters and state in place, so it is a
 * graph break that runs as one call. For SGD, Adam and AdamW without a
 * closure, hooks or the capturable / differentiable modes, the call the
 * break runs is ptc's compiled update (python/ptc/_optim.py: one ptc
 * program per parameter group and device, hyper-parameters as data) instead
 * of torch's: the callable of the CALL instruction on the frame's stack is
 * replaced by ptc._optim.step before the break, so the resume state calls it
 * with the same arguments. Anything else keeps torch's step, and the break's
 * message says why (ptexplain shows it).
 */
#include "capture/trace/trace.h"

#include <string.h>

/* ptc._optim's function `name` (borrowed, kept for the process), or NULL
 * with an error. */
static PyObject *optim_fn(const char *name)
{
    static PyObject *step, *unsupported;
    PyObject **slot = strcmp(name, "step") == 0 ? &step : &unsupported;
    if (!*slot) {
        char path[64];
        snprintf(path, sizeof path, "ptc._optim.%s", name);
        *slot = cap_import_path(path);
    }
    return *slot;
}

/* Why ptc's update cannot run step(*args) of opt: ptc._optim.unsupported(opt,
 * closure) (a new str, Py_None's reference when it can, NULL with an error). */
static PyObject *why_unsupported(PyObject *opt, PyObject *const *args, int nargs,
                                 PyObject *kwnames)
{
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0, npos = nargs - nkw;
    if (npos > 1)
        return PyUnicode_FromString("arguments besides a closure");
    PyObject *closure = npos == 1 ? args[0] : Py_None;
    for (int i = 0; i < nkw; i++) {
        if (PyUnicode_CompareWithASCIIString(PyTuple_GetItem(kwnames, i), "closure") != 0)
            return PyUnicode_FromString("arguments besides a closure");
        closure = args[npos + i];
    }
    PyObject *f = optim_fn("unsupported");
    return f ? PyObject_CallFunctionObjArgs(f, opt, closure, NULL) : NULL;
}

/* The optimizer whose step fn is when fn is the wrapper an LR scheduler puts
 * on the instance (torch.optim.lr_scheduler's wrap_step: it notes the call
 * and calls the step of the optimizer its closure's opt_ref refers to); a new
 * reference, or NULL (no error) for any other fn. */
static PyObject *lr_scheduler_wrapper_opt(PyObject *fn)
{
    if (!cap_is_function(fn) || PyObject_HasAttrString(fn, "_wrapped_by_lr_sched") != 1)
        return NULL;
    PyObject *code = PyObject_GetAttr(fn, cap_P.s_code);
    PyObject *names = code ? PyObject_GetAttrString(code, "co_freevars") : NULL;
    PyObject *cells = PyObject_GetAttrString(fn, "__closure__"), *opt = NULL;
    for (Py_ssize_t i = 0; names && PyTuple_Check(names) && cells && PyTuple_Check(cells) &&
                           i < PyTuple_Size(names) && i < PyTuple_Size(cells);
         i++) {
        if (PyUnicode_CompareWithASCIIString(PyTuple_GetItem(names, i), "opt_ref") != 0)
            continue;
        PyObject *ref = PyObject_GetAttrString(PyTuple_GetItem(cells, i), "cell_contents");
        opt = ref ? PyObject_CallNoArgs(ref) : NULL;
        Py_XDECREF(ref);
    }
    Py_XDECREF(code);
    Py_XDECREF(names);
    Py_XDECREF(cells);
    PyErr_Clear();
    if (opt == Py_None)
        Py_CLEAR(opt);
    return opt;
}

bool cap_t_is_lr_scheduler_step(PyObject *fn)
{
    PyObject *opt = lr_scheduler_wrapper_opt(fn);
    Py_XDECREF(opt);
    return opt != NULL;
}

/* The stack slot of the current CALL / CALL_FUNCTION_EX that holds the
 * callable: fn itself, or a method of fn bound to opt. -1 if it is neither. */
static int callable_slot(cap_frame *f, PyObject *fn, PyObject *opt)
{
    const cap_instr *in = &f->code->ins[f->pc];
    int slot = -1;
    if (in->h == H_CALL) {
        int first = f->sp - in->arg - 2;
        slot = first >= 0 && f->stack[first] ? first : first + 1;
    } else if (in->h == H_CALL_FUNCTION_EX) {
        slot = f->sp - ((in->arg & 1) ? 3 : 2);
    }
    if (slot < 0 || slot >= f->sp || !f->stack[slot])
        return -1;
    PyObject *v = f->stack[slot];
    if (v == fn)
        return slot;
    if (!cap_is_method(v))
        return -1;
    PyObject *vf = PyObject_GetAttr(v, cap_P.s_func), *vs = PyObject_GetAttr(v, cap_P.s_self);
    bool same = vf == fn && vs == opt;
    Py_XDECREF(vf);
    Py_XDECREF(vs);
    PyErr_Clear();
    return same ? slot : -1;
}

/* Puts ptc._optim.step where the CALL's callable was, bound to opt when the
 * call does not pass opt itself: the break's instruction then calls it. */
static int redirect(cap_frame *f, int slot, PyObject *opt, bool bind)
{
    static PyObject *method_type;
    PyObject *step = optim_fn("step");
    if (!step || (!method_type && !(method_type = cap_import_path("types.MethodType"))))
        return -1;
    PyObject *repl = bind ? PyObject_CallFunctionObjArgs(method_type, step, opt, NULL)
                          : Py_NewRef(step);
    if (!repl)
        return -1;
    Py_SETREF(f->stack[slot], repl);
    if (f->slot_src)
        f->slot_src[f->code->nlp + slot] = -1; /* no longer the starting state's value */
    return 0;
}

int cap_t_optimizer_step(cap_interp *I, PyObject *fn, PyObject *const *args, int nargs,
                         PyObject *kwnames)
{
    cap_trace *T = I->T;
    const char *name = cap_func_name(fn), *dot = strrchr(name, '.');
    PyObject *opt = lr_scheduler_wrapper_opt(fn);
    bool wrapper = opt != NULL;
    if (!wrapper && strcmp(dot ? dot + 1 : name, "step") != 0)
        return cap_t_break(T, CAP_B_AUTOGRAD, "optimizer %s (runs for real as one call)", name);
    if (!wrapper)
        opt = Py_NewRef(args[0]);
    PyObject *why = why_unsupported(opt, args + !wrapper, nargs - !wrapper, kwnames);
    int rc = why ? CAP_BREAK : CAP_ERR, slot = -1;
    if (why && why != Py_None)
        cap_t_break(T, CAP_B_AUTOGRAD,
                    "optimizer step runs torch's own update as one call: ptc's compiled update "
                    "does not support %s",
                    PyUnicode_Check(why) ? PyUnicode_AsUTF8(why) : "it");
    else if (why && (slot = callable_slot(I->frame, fn, opt)) < 0)
        cap_t_break(T, CAP_B_AUTOGRAD,
                    "optimizer step runs torch's own update as one call: called in a form ptc "
                    "cannot redirect to its compiled update");
    else if (why && redirect(I->frame, slot, opt, wrapper || I->frame->stack[slot] != fn) < 0)
        rc = CAP_ERR;
    else if (why)
        cap_t_break(T, CAP_B_AUTOGRAD,
                    "optimizer step runs ptc's compiled update as one call (ptc._optim: one "
                    "program per parameter group and device)");
    Py_XDECREF(why);
    Py_DECREF(opt);
    return rc;
}
