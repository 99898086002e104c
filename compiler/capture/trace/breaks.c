/* Breaks: the table of break codes (interp/breaks.def) and recording one.
 *
 * A break is recorded at the current instruction with the user's source line
 * and the inlined call stack; a Python exception raised while tracing becomes
 * one (the GraphBreak signal carries its code), unless it is internal.
 */
#include "capture/trace/trace.h"

#include <stdarg.h>
#include <string.h>

/* ---- breaks ------------------------------------------------------------------ */

static const cap_break_info break_table[] = {
    {0, "NONE", "", "", ""},
#define BREAK(id, num, reason, expl, hint) {num, #id, reason, expl, hint},
#include "capture/interp/breaks.def"
#undef BREAK
};

const cap_break_info *cap_break_lookup(int code)
{
    for (size_t i = 1; i < sizeof break_table / sizeof *break_table; i++)
        if (break_table[i].code == code)
            return &break_table[i];
    return &break_table[0];
}

PyObject *cap_break_table(void)
{
    PyObject *list = PyList_New(0);
    for (size_t i = 1; list && i < sizeof break_table / sizeof *break_table; i++) {
        const cap_break_info *b = &break_table[i];
        PyObject *d = Py_BuildValue("{s:s,s:s,s:s,s:s,s:s}", "code",
                                    PyUnicode_AsUTF8(PyUnicode_FromFormat("PTC-B%03d", b->code)),
                                    "name", b->name, "reason", b->reason, "explanation",
                                    b->explanation, "hint", b->hint);
        if (!d || PyList_Append(list, d) < 0)
            Py_CLEAR(list);
        Py_XDECREF(d);
    }
    return list;
}

PyObject *cap_signal_break(int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyObject *v = Py_BuildValue("(is)", code, msg);
    if (v) {
        PyErr_SetObject(cap_GraphBreak, v);
        Py_DECREF(v);
    }
    return NULL;
}

/* The source line of the innermost frame's instruction pc (its current one
 * unless the break says otherwise) and the inlined stack. */
static void break_location(cap_trace *T, cap_break *b, int pc)
{
    cap_frame *f = T->I->frame;
    int line, col, endline, endcol;
    cap_code_pos(f->code, pc, &line, &col, &endline, &endcol);
    snprintf(b->file, sizeof b->file, "%s", f->code->file);
    b->line = line;
    b->col = col + 1;
    b->endcol = endline == line ? endcol + 1 : 0;
    cap_source_line(f->code->file, line, b->text, sizeof b->text);
    size_t n = 0;
    cap_frame *chain[64];
    int depth = 0;
    for (cap_frame *g = f; g && depth < 64; g = g->parent)
        chain[depth++] = g;
    for (int i = depth - 1; i >= 0 && n < sizeof b->stack; i--) {
        int l, c, el, ec;
        cap_code_pos(chain[i]->code, i == 0 ? pc : chain[i]->pc, &l, &c, &el, &ec);
        n += (size_t)snprintf(b->stack + n, sizeof b->stack - n, "%s%s (%s:%d)", i == depth - 1 ? "" : " > ",
                              chain[i]->code->qualname_s, chain[i]->code->file, l);
    }
}

int cap_t_break(cap_trace *T, int code, const char *fmt, ...)
{
    cap_break *b = &T->brk;
    memset(b, 0, sizeof *b);
    b->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->detail, sizeof b->detail, fmt, ap);
    va_end(ap);
    break_location(T, b, T->I->frame->pc);
    T->has_break = true;
    return CAP_BREAK;
}

int cap_t_break_again(cap_trace *T)
{
    return cap_t_break(T, T->redo.code, "%s", T->redo.detail);
}

/* The instruction at which an exception passed through frame f, by f's
 * entry in its traceback tb: a raise that breaks at a re-raise the compiler
 * added (an except clause's cleanup, which has no source line) is placed
 * where the exception came from, as eager's traceback places it. */
static int where_raised(cap_frame *f, PyObject *tb)
{
    int line, col, endline, endcol;
    cap_code_pos(f->code, f->pc, &line, &col, &endline, &endcol);
    int pc = f->pc;
    PyObject *t = Py_XNewRef(tb);
    while (line <= 0 && f->frame_object && t && t != Py_None) {
        PyObject *frame = PyObject_GetAttrString(t, "tb_frame");
        PyObject *lasti = frame == f->frame_object ? PyObject_GetAttrString(t, "tb_lasti") : NULL;
        if (lasti && PyLong_AsLong(lasti) >= 0) {
            pc = (int)(PyLong_AsLong(lasti) / 2);
            line = 1; /* found */
        }
        Py_XDECREF(frame);
        Py_XDECREF(lasti);
        PyObject *next = PyObject_GetAttrString(t, "tb_next");
        Py_SETREF(t, next);
    }
    Py_XDECREF(t);
    PyErr_Clear();
    return pc;
}

int cap_trace_error(cap_interp *I)
{
    cap_trace *T = I->T;
    PyObject *type, *val, *tb;
    PyErr_Fetch(&type, &val, &tb);
    PyErr_NormalizeException(&type, &val, &tb);
    int rc;
    if (type && PyErr_GivenExceptionMatches(type, cap_GraphBreak)) {
        PyObject *args = val ? PyObject_GetAttrString(val, "args") : NULL;
        PyObject *inner = args && PyTuple_Size(args) == 1 ? PyTuple_GetItem(args, 0) : args;
        int code = CAP_B_TRACE_ERROR;
        const char *msg = "";
        if (inner && PyTuple_Check(inner) && PyTuple_Size(inner) == 2) {
            code = (int)PyLong_AsLong(PyTuple_GetItem(inner, 0));
            msg = PyUnicode_AsUTF8(PyTuple_GetItem(inner, 1));
        }
        rc = cap_t_break(T, code, "%s", msg ? msg : "");
        Py_XDECREF(args);
    } else if (type && PyErr_GivenExceptionMatches(type, cap_InternalError)) {
        PyErr_Restore(type, val, tb);
        return CAP_ERR;
    } else {
        PyObject *s = val ? PyObject_Str(val) : NULL;
        const char *name = type ? cap_tpname((PyTypeObject *)type) : "error";
        rc = cap_t_break(T, CAP_B_RAISE, "%s: %s", name, s ? PyUnicode_AsUTF8(s) : "");
        if (!s)
            PyErr_Clear();
        break_location(T, &T->brk, where_raised(I->frame, tb));
        Py_XDECREF(s);
    }
    Py_XDECREF(type);
    Py_XDECREF(val);
    Py_XDECREF(tb);
    return rc;
}

/* ---- source lines -------------------------------------------------------------------- */

static PyObject *linecache_getline;

void cap_source_line(const char *file, int line, char *buf, size_t size)
{
    buf[0] = 0;
    if (line <= 0)
        return;
    if (!linecache_getline) {
        PyObject *lc = PyImport_ImportModule("linecache");
        linecache_getline = lc ? PyObject_GetAttrString(lc, "getline") : NULL;
        Py_XDECREF(lc);
    }
    PyObject *s =
        linecache_getline ? PyObject_CallFunction(linecache_getline, "si", file, line) : NULL;
    const char *u = s ? PyUnicode_AsUTF8(s) : NULL;
    if (u) {
        snprintf(buf, size, "%s", u);
        size_t n = strlen(buf);
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            buf[--n] = 0;
    }
    Py_XDECREF(s);
    PyErr_Clear();
}
