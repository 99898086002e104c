/* Guards: installing them (interned, so a value looked at twice costs one
 * guard), and the guards that the answers of truth tests, membership tests
 * and operators on outside values depend on. Evaluating them on a later call
 * is the entry's (entry/guards.c).
 */
#include "capture/trace/trace.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- guards ---------------------------------------------------------------------- */

int cap_guard_add(cap_trace *T, int kind, int src, PyObject *obj, int64_t n)
{
    PyObject *key = Py_BuildValue("(iinL)", kind, src, (Py_ssize_t)(uintptr_t)obj, (long long)n);
    if (!key)
        return -1;
    if (kind == CAP_G_EQ || kind == CAP_G_KEYS || kind == CAP_G_ORDER || kind == CAP_G_HASATTR ||
        kind == CAP_G_DICT_HAS || kind == CAP_G_SYM || kind == CAP_G_SYMSIZE) {
        /* Value guards: identical values dedupe even when the objects differ
           (unhashable values, a dict or a slice, by identity). */
        Py_DECREF(key);
        key = Py_BuildValue("(iiOL)", kind, src, obj ? obj : Py_None, (long long)n);
        if (key && PyObject_Hash(key) == -1)
            Py_CLEAR(key);
        if (!key) {
            PyErr_Clear();
            key = Py_BuildValue("(iinL)", kind, src, (Py_ssize_t)(uintptr_t)obj, (long long)n);
        }
        if (!key)
            return -1;
    }
    PyObject *hit = PyDict_GetItemWithError(T->guard_index, key);
    if (hit || PyErr_Occurred()) {
        Py_DECREF(key);
        return hit ? 0 : -1; /* a guard is never dropped */
    }
    if (T->nguards == T->capguards) {
        T->capguards = T->capguards ? 2 * T->capguards : 64;
        T->guards = realloc(T->guards, sizeof *T->guards * (size_t)T->capguards);
    }
    cap_guard *g = &T->guards[T->nguards];
    *g = (cap_guard){(uint8_t)kind, src, Py_XNewRef(obj), n, NULL, {0, NULL}, NULL, 0};
    if (kind == CAP_G_TENSOR) {
        g->tm = calloc(1, sizeof *g->tm);
        if (cap_tmeta_read(obj, g->tm) < 0) {
            Py_DECREF(key);
            return -1;
        }
        Py_CLEAR(g->obj);
    }
    if (T->I && T->I->frame) {
        g->code = cap_code_ref(T->I->frame->code); /* outlives the frame (reports) */
        g->pc = T->I->frame->pc;
    }
    T->nguards++;
    PyObject *v = PyLong_FromLong(T->nguards - 1);
    int rc = v ? PyDict_SetItem(T->guard_index, key, v) : -1;
    Py_XDECREF(v);
    Py_DECREF(key);
    return rc;
}
