/* Traceback entries for ptc's own frames, so that an exception raised inside
 * a compiled function reads as eager's: one entry per frame it passes through
 * (the compiled function's own and those inlined into it), each at the
 * instruction it was raised or called at, as CPython's PyTraceBack_Here adds
 * them while it unwinds.
 *
 * An entry needs a frame object whose code is the user's (the traceback
 * module and CPython's printer take the line, the columns of the caret and
 * the file from the frame's code and the entry's instruction offset). The
 * stable ABI has no way to make one for code that is not running, so this
 * file alone is compiled against the full headers for PyFrame_New, which
 * 3.11 and 3.12 (the versions ptc's one abi3 build loads on) export alike.
 * The frame object is made once per ptc frame, on its first exception.
 */
#undef Py_LIMITED_API
#include <Python.h>
#include <frameobject.h>

#include "capture/interp/interp.h"

static PyObject *frame_object(cap_frame *f)
{
    if (!f->frame_object)
        f->frame_object = (PyObject *)PyFrame_New(PyThreadState_Get(),
                                                  (PyCodeObject *)f->code->code, f->globals, NULL);
    return f->frame_object;
}

void cap_traceback_here(cap_frame *f)
{
    PyObject *type, *val, *tb;
    PyErr_Fetch(&type, &val, &tb);
    int line, col, endline, endcol;
    cap_code_pos(f->code, f->pc, &line, &col, &endline, &endcol);
    PyObject *frame = frame_object(f);
    PyObject *entry =
        frame ? PyObject_CallFunction((PyObject *)&PyTraceBack_Type, "OOii", tb ? tb : Py_None,
                                      frame, 2 * f->pc, line > 0 ? line : -1)
              : NULL;
    if (entry) {
        Py_XDECREF(tb);
        tb = entry;
    } else {
        PyErr_Clear(); /* the entry is lost, not the user's exception */
    }
    PyErr_Restore(type, val, tb);
}
