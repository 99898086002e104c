/* Calls whose result the caller needs before it goes on, without a frame of
 * its own: a Python callee traced to its return in a nested run of the
 * interpreter (a key function, the function given to map, a getter). A break
 * inside a nested run becomes a break at the instruction that began it.
 */
#include "capture/trace/trace.h"

/* ---- synchronous nested calls ------------------------------------------------------ */

/* A frame was just pushed above `outer`: runs it to its return (a nested
 * run) and hands back its result. An exception it does not catch comes back
 * as CAP_ERR, still pending, with the nested frames gone; a break inside
 * becomes a break at outer's instruction. */
int cap_t_run_sync(cap_interp *I, cap_frame *outer, PyObject **out)
{
    bool outermost = true;
    for (cap_frame *f = outer; f && outermost; f = f->parent)
        outermost = f->ret != cap_ret_sync;
    long start = I->instr_step; /* of the instruction that runs it */
    I->frame->ret = cap_ret_sync;
    int rc = cap_run(I);
    I->instr_step = start;
    if (rc == CAP_SYNC) {
        *out = I->sync_result;
        I->sync_result = NULL;
        return CAP_NEXT;
    }
    if (outermost) {
        I->T->sync_step = start;
        I->T->sync_exit = I->steps;
    }
    cap_break inner = I->T->brk;
    while (I->frame != outer) {
        cap_frame *p = I->frame->parent;
        cap_frame_free(I->frame);
        I->frame = p;
    }
    if (rc == CAP_BREAK)
        return cap_t_break(I->T, inner.code, "inside a callback: %s", inner.detail);
    return rc;
}

void cap_t_rerun_from_start(cap_interp *I)
{
    for (cap_frame *f = I->frame; f; f = f->parent)
        if (f->ret == cap_ret_sync)
            return; /* inside a nested run: the instruction that began it reruns */
    I->T->sync_step = I->instr_step;
    I->T->sync_exit = I->steps;
}

/* Calls callable(args) and waits for the result, tracing Python callees in a
 * nested run. An exception raised inside becomes a break at the current
 * instruction (it reruns for real). */
int cap_t_call_sync(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                    PyObject *kwnames, PyObject **out)
{
    cap_frame *outer = I->frame;
    return cap_t_settle(I, outer, cap_op_call(I, callable, args, nargs, kwnames, out), out);
}

int cap_t_settle(cap_interp *I, cap_frame *outer, int rc, PyObject **out)
{
    if (rc != CAP_FRAME)
        return rc;
    rc = cap_t_run_sync(I, outer, out);
    if (rc == CAP_ERR && !PyErr_ExceptionMatches(cap_InternalError))
        return cap_trace_error(I);
    return rc;
}
