/* In-place writes to the caller's tensors.
 *
 * A tensor input written in place (x.add_(1) on an argument, a default
 * argument, a module's buffer or tensor attribute) keeps its new value in the
 * trace; the graph returns it and the entry copies it into the caller's
 * tensor after the call (cap_entry.writeback), as torch.compile's
 * functionalisation does. That is right only while no other input shares its
 * memory: in f(x, x[0]) the graph would go on reading the old x[0]. So the
 * trace breaks where a written input and another input share memory (their
 * storages' address spans overlap: storage_of), at the write or where the
 * second is read, and the entry is guarded on its written inputs sharing no
 * memory with its other tensor inputs
 * (CAP_G_NOALIAS). f(x, x) is one input (CAP_G_SAME) and needs neither.
 * Module buffers keep their old rules (no storage check), as do parameters,
 * which that guard leaves out for its cost per call.
 */
#include "capture/trace/trace.h"

#include <stdlib.h>

/* The memory t's storage spans, (first address, end) of
 * t.untyped_storage() (new reference, NULL on error). Storages torch made
 * never overlap unless they are one, but torch.from_numpy makes one per
 * array, starting where the array starts, so two arrays over one buffer
 * (a, a[1:]) have storages that overlap without being equal. Run by the
 * NOALIAS guard on every call: the method names are cap_T's interned ones. */
static PyObject *storage_of(PyObject *t)
{
    PyObject *s = PyObject_CallMethodObjArgs(t, cap_T.s_untyped_storage, NULL);
    PyObject *p = s ? PyObject_CallMethodObjArgs(s, cap_T.s_data_ptr, NULL) : NULL;
    PyObject *n = p ? PyObject_CallMethodObjArgs(s, cap_T.s_nbytes, NULL) : NULL;
    PyObject *end = n ? PyNumber_Add(p, n) : NULL;
    PyObject *span = end ? PyTuple_Pack(2, p, end) : NULL;
    Py_XDECREF(s);
    Py_XDECREF(p);
    Py_XDECREF(n);
    Py_XDECREF(end);
    return span;
}

/* Do two storage spans (storage_of) share memory? Empty ones, and ones
 * with no memory (address 0), never do. */
static bool shared(PyObject *a, PyObject *b)
{
    if (!a || !b)
        return false;
    unsigned long long a0 = PyLong_AsUnsignedLongLong(PyTuple_GetItem(a, 0)),
                       a1 = PyLong_AsUnsignedLongLong(PyTuple_GetItem(a, 1)),
                       b0 = PyLong_AsUnsignedLongLong(PyTuple_GetItem(b, 0)),
                       b1 = PyLong_AsUnsignedLongLong(PyTuple_GetItem(b, 1));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    return a0 && b0 && a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1;
}

static bool plain_writable(cap_trace *T, int src)
{
    return src >= 0 && !cap_source_module_tensor(T->src[src].kind);
}

/* The storage of the input reached by src, as noted (borrowed, or NULL). */
static PyObject *noted(cap_trace *T, int src)
{
    PyObject *k = PyLong_FromLong(src);
    PyObject *p = k ? PyDict_GetItemWithError(T->input_storage, k) : NULL;
    Py_XDECREF(k);
    return p;
}

/* The written input that shares storage p, or NULL. */
static cap_tensor *written_sharing(cap_trace *T, PyObject *p, const cap_tensor *besides)
{
    for (Py_ssize_t i = 0; i < PyList_Size(T->written); i++) {
        cap_tensor *w = (cap_tensor *)PyList_GetItem(T->written, i);
        if (w != besides && plain_writable(T, w->src) && shared(noted(T, w->src), p))
            return w;
    }
    return NULL;
}

int cap_t_note_input(cap_trace *T, PyObject *real, int src, const char *name)
{
    if (!plain_writable(T, src))
        return 0; /* parameters and buffers: no storage check (their count) */
    PyObject *p = storage_of(real), *k = PyLong_FromLong(src);
    cap_tensor *w = p && k ? written_sharing(T, p, NULL) : NULL;
    int rc = !p || !k ? -1 : w ? 0 : PyDict_SetItem(T->input_storage, k, p);
    Py_XDECREF(k);
    Py_XDECREF(p);
    if (w) { /* not noted: it is no input */
        cap_signal_break(CAP_B_INPLACE_INPUT, "%s shares memory with %s, written in place before",
                         name, w->input_v->name);
        return -1;
    }
    return rc;
}

int cap_t_check_unshared(cap_trace *T, cap_tensor *t)
{
    if (!plain_writable(T, t->src) || cap_t_is_written(T, t))
        return CAP_NEXT;
    PyObject *mine = noted(T, t->src), *k, *p;
    Py_ssize_t pos = 0;
    while (mine && PyDict_Next(T->input_storage, &pos, &k, &p)) {
        int other = (int)PyLong_AsLong(k);
        if (other != t->src && shared(mine, p)) {
            char name[200];
            cap_source_str(T->src, T->nsrc, other, name, sizeof name);
            return cap_t_break(
                T, CAP_B_INPLACE_INPUT,
                "in-place op on an input that shares memory with another input (%s, %s)",
                t->input_v->name, name);
        }
    }
    return CAP_NEXT;
}

int cap_t_check_writable(cap_trace *T, cap_tensor *t, ptc_value *nv)
{
    const char *name = t->input_v->name;
    /* An argument, a default, a module's buffer or tensor attribute:
       written back after the call (inplace.c); an object assumed constant
       is not the caller's to write. */
    if (t->src < 0 || T->src[t->src].kind == CAP_S_CONST)
        return cap_t_break(T, CAP_B_INPLACE_INPUT, "in-place op on a tensor from outside (%s)",
                           name);
    if (T->src_val[t->src] != (PyObject *)t)
        return cap_t_break(T, CAP_B_INPLACE_INPUT,
                           "in-place op on an alias of a tensor from outside (%s)", name);
    /* Autograd must record the write on the caller's tensor itself (its
       version, its grad_fn): a graph that returns the new value cannot. */
    if (t->input_v->type.requires_grad)
        return cap_t_break(T, CAP_B_INPLACE_INPUT,
                           "in-place op on a tensor from outside that requires grad (%s): "
                           "autograd records it on the tensor itself",
                           name);
    if (nv->type.requires_grad && cap_t_value_grad(T, nv))
        return cap_t_break(
            T, CAP_B_INPLACE_INPUT,
            "in-place op writing a value that requires grad into a tensor from outside (%s)", name);
    return cap_t_check_unshared(T, t);
}

int cap_t_alias_guards(cap_trace *T)
{
    PyObject *written = PyList_New(0), *others = PyList_New(0);
    int n = T->g ? T->g->ninputs : 0, last = -1, rc = -1;
    for (Py_ssize_t i = 0; written && i < PyList_Size(T->written); i++) {
        cap_tensor *w = (cap_tensor *)PyList_GetItem(T->written, i);
        if (w->v == w->input_v || !plain_writable(T, w->src))
            continue;
        PyObject *s = PyLong_FromLong(w->src);
        if (!s || PyList_Append(written, s) < 0)
            Py_CLEAR(written);
        Py_XDECREF(s);
        last = w->src > last ? w->src : last;
    }
    for (int i = 0; written && others && PyList_Size(written) && i < n; i++) {
        int s = T->input_src[i];
        if (!plain_writable(T, s) || T->src[s].kind == CAP_S_CONST)
            continue;
        PyObject *id = PyLong_FromLong(s);
        int has = id ? PySequence_Contains(written, id) : -1;
        if (has < 0 || (!has && PyList_Append(others, id) < 0))
            Py_CLEAR(others);
        Py_XDECREF(id);
        last = s > last ? s : last;
    }
    if (written && others) {
        Py_ssize_t nw = PyList_Size(written);
        PyObject *all = PySequence_Concat(written, others), *t = all ? PyList_AsTuple(all) : NULL;
        rc = !t ? -1 : PyTuple_Size(t) < 2 ? 0 : cap_guard_add(T, CAP_G_NOALIAS, last, t, nw);
        Py_XDECREF(all);
        Py_XDECREF(t);
    }
    Py_XDECREF(written);
    Py_XDECREF(others);
    return rc;
}

bool cap_noalias_guard_ok(const cap_guard *g, PyObject *const *vals)
{
    Py_ssize_t n = PyTuple_Size(g->obj);
    PyObject *stack[16] = {0}, **ptrs = n <= 16 ? stack : calloc((size_t)n, sizeof *ptrs);
    bool ok = ptrs != NULL;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *v = vals[PyLong_AsLong(PyTuple_GetItem(g->obj, i))];
        ok = v && (ptrs[i] = storage_of(v)) != NULL;
    }
    PyErr_Clear();
    for (Py_ssize_t w = 0; ok && w < g->n; w++)
        for (Py_ssize_t j = w + 1; ok && j < n; j++)
            ok = !shared(ptrs[w], ptrs[j]);
    for (Py_ssize_t i = 0; ptrs && i < n; i++)
        Py_XDECREF(ptrs[i]);
    if (ptrs != stack)
        free(ptrs);
    return ok;
}
