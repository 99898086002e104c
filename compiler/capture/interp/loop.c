/* The interpreter loop: runs the handler of each instruction of the
 * innermost frame, and unwinds exceptions through the exception tables of
 * 3.11+ exactly as CPython does.
 *
 * The same loop serves tracing (values may be symbolic; an error becomes a
 * graph break at the instruction that raised it, so the instruction reruns
 * for real) and real execution. It is the interpreter's top file: it knows
 * every handler through the table at its end, and nothing below it knows the
 * loop (a handler that needs a frame run pushes it and returns CAP_FRAME).
 */
#include "capture/interp/interp.h"

/* ---- unwinding ---------------------------------------------------------- */

static bool stop_iteration_pending(void)
{
    return PyErr_ExceptionMatches(PyExc_StopIteration);
}

/* Finds a handler for the pending exception, popping frames that have none,
 * and adds each frame it passes through to its traceback: the failing one
 * unless it re-raised, and every caller at its call, as CPython does.
 * 0: continue at the handler; -1: the exception leaves the outermost frame. */
static int unwind(cap_interp *I, bool reraised)
{
    bool entry = !reraised;
    for (;;) {
        cap_frame *f = I->frame;
        if (entry)
            cap_traceback_here(f);
        entry = true;
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
static int trace_unwind(cap_interp *I, bool reraised)
{
    if (!PyErr_ExceptionMatches(cap_GraphBreak) && !PyErr_ExceptionMatches(cap_InternalError)) {
        for (cap_frame *f = I->frame; f; f = f->parent) {
            if (cap_code_handler(f->code, f->pc))
                return unwind(I, reraised) < 0 ? cap_hooks.error(I) : CAP_NEXT;
            if (f->ret == cap_ret_next_item && f->parent && stop_iteration_pending())
                return unwind(I, reraised) < 0 ? cap_hooks.error(I) : CAP_NEXT;
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
        int rc = I->throw_in ? CAP_ERR : cap_handlers[in->h](I, f, in);
        I->throw_in = false;
        I->steps++;
        switch (rc) {
        case CAP_NEXT:
            f->pc = in->next;
            break;
        case CAP_JUMPED:
        case CAP_FRAME:
            break;
        case CAP_ERR: {
            bool reraised = I->reraised;
            I->reraised = false;
            if (I->mode == CAP_TRACE) {
                int t = trace_unwind(I, reraised);
                if (t != CAP_NEXT)
                    return t;
                break;
            }
            if (unwind(I, reraised) < 0)
                return CAP_ERR;
            break;
        }
        default:
            return rc;
        }
    }
}

/* ---- the handlers, by opcode (opcodes.h) ---------------------------------------- */

const cap_handler_fn cap_handlers[H_COUNT] = {
#define X(h) [H_##h] = cap_h_##h,
    CAP_HANDLERS(X)
#undef X
};
