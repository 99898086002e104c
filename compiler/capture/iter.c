/* Small Python types the interpreter puts on its stack: an iterator whose
 * position ptc can read and rebuild (over a list, tuple or range), and the
 * __exit__ object of a with-block whose grad mode or autocast state is
 * modelled symbolically. Both work as ordinary Python objects too, so a
 * resume state that holds them runs for real after a graph break.
 */
#include "torch.h"

#include <structmember.h>

PyTypeObject *cap_iter_type, *cap_gradexit_type;

/* ---- iterator -------------------------------------------------------------------- */

static void iter_dealloc(PyObject *self)
{
    cap_iter *it = (cap_iter *)self;
    Py_XDECREF(it->seq);
    Py_XDECREF(it->owner);
    PyTypeObject *t = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(t, Py_tp_free))(self);
    Py_DECREF(t);
}

/* A snapshot of a dict's keys or a set's items is walked, so a change of
 * the container's size while walking raises what CPython's own iterator
 * raises (and goes on raising). */
void cap_iter_set_owner(cap_iter *it, PyObject *owner)
{
    Py_XSETREF(it->owner, Py_NewRef(owner));
    it->owner_len = PyObject_Size(owner);
}

static bool owner_changed(cap_iter *it)
{
    if (!it->owner || PyObject_Size(it->owner) == it->owner_len)
        return false;
    PyErr_Clear();
    PyErr_SetString(PyExc_RuntimeError, PyAnySet_Check(it->owner)
                                            ? "Set changed size during iteration"
                                            : "dictionary changed size during iteration");
    it->owner_len = -1;
    return true;
}

PyObject *cap_iter_next_raw(cap_iter *it)
{
    if (owner_changed(it))
        return NULL;
    if (!it->seq) {
        if (it->i >= it->n)
            return NULL;
        return PyLong_FromLongLong(it->start + it->step * (long long)it->i++);
    }
    Py_ssize_t n = PyList_Check(it->seq) ? PyList_Size(it->seq) : PyTuple_Size(it->seq);
    if (it->i >= n)
        return NULL;
    PyObject *v = PyList_Check(it->seq) ? PyList_GetItem(it->seq, it->i) : PyTuple_GetItem(it->seq, it->i);
    it->i++;
    return Py_NewRef(v);
}

static PyObject *iter_next(PyObject *self)
{
    return cap_iter_next_raw((cap_iter *)self);
}

static PyObject *iter_iter(PyObject *self)
{
    return Py_NewRef(self);
}

static PyObject *iter_length_hint(PyObject *self, PyObject *unused)
{
    cap_iter *it = (cap_iter *)self;
    Py_ssize_t n = !it->seq ? it->n : PyList_Check(it->seq) ? PyList_Size(it->seq) : PyTuple_Size(it->seq);
    return PyLong_FromSsize_t(n > it->i ? n - it->i : 0);
}

static PyMethodDef iter_methods[] = {
    {"__length_hint__", iter_length_hint, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef iter_members[] = {
    {"owner", T_OBJECT, offsetof(cap_iter, owner), READONLY, "the container whose size is checked"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot iter_slots[] = {
    {Py_tp_dealloc, iter_dealloc},
    {Py_tp_members, iter_members},
    {Py_tp_iter, iter_iter},
    {Py_tp_iternext, iter_next},
    {Py_tp_methods, iter_methods},
    {Py_tp_doc, "ptc: an iterator over a list, tuple or range whose position ptc tracks"},
    {0, NULL},
};

static PyType_Spec iter_spec = {"ptc._C.Iter", sizeof(cap_iter), 0, Py_TPFLAGS_DEFAULT, iter_slots};

PyObject *cap_iter_seq(PyObject *seq, int src, cap_trace *T)
{
    cap_iter *it = PyObject_New(cap_iter, cap_iter_type);
    if (!it)
        return NULL;
    it->seq = Py_NewRef(seq);
    it->i = 0;
    it->n = -1;
    it->start = it->step = 0;
    it->src = src;
    it->gen = false;
    it->T = T;
    it->owner = NULL;
    it->owner_len = 0;
    return (PyObject *)it;
}

PyObject *cap_iter_range(long long start, long long step, Py_ssize_t n)
{
    cap_iter *it = PyObject_New(cap_iter, cap_iter_type);
    if (!it)
        return NULL;
    it->seq = NULL;
    it->i = 0;
    it->n = n;
    it->start = start;
    it->step = step;
    it->src = -1;
    it->gen = false;
    it->T = NULL;
    it->owner = NULL;
    it->owner_len = 0;
    return (PyObject *)it;
}

/* ---- with-block exits -------------------------------------------------------------- */

static void gradexit_dealloc(PyObject *self)
{
    PyTypeObject *t = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(t, Py_tp_free))(self);
    Py_DECREF(t);
}

int cap_set_grad_enabled(bool on)
{
    PyObject *r = PyObject_CallOneArg_compat(cap_T.set_grad_enabled_c, on ? Py_True : Py_False);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* exit(type, value, traceback): restores the mode saved at __enter__. */
static PyObject *gradexit_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    cap_gradexit *g = (cap_gradexit *)self;
    if (g->kind == CAP_EXIT_GRAD && cap_set_grad_enabled(g->prev) < 0)
        return NULL;
    if (g->kind == CAP_EXIT_AMP) {
        cap_amp a = cap_amp_unpack(g->amp_prev);
        if (cap_amp_write(&a) < 0)
            return NULL;
    }
    Py_RETURN_FALSE;
}

static PyMemberDef gradexit_members[] = {
    {"prev", T_BOOL, offsetof(cap_gradexit, prev), READONLY, "mode restored on exit"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot gradexit_slots[] = {
    {Py_tp_dealloc, gradexit_dealloc},
    {Py_tp_call, gradexit_call},
    {Py_tp_members, gradexit_members},
    {Py_tp_doc, "ptc: the __exit__ of a grad-mode with-block modelled while tracing"},
    {0, NULL},
};

static PyType_Spec gradexit_spec = {"ptc._C.GradModeExit", sizeof(cap_gradexit), 0,
                                    Py_TPFLAGS_DEFAULT, gradexit_slots};

PyObject *cap_gradexit_new(int kind, bool prev)
{
    cap_gradexit *g = PyObject_New(cap_gradexit, cap_gradexit_type);
    if (g) {
        g->kind = kind;
        g->prev = prev;
        g->amp_prev = 0;
    }
    return (PyObject *)g;
}

int cap_iter_types_init(PyObject *module)
{
    cap_iter_type = (PyTypeObject *)PyType_FromSpec(&iter_spec);
    cap_gradexit_type = (PyTypeObject *)PyType_FromSpec(&gradexit_spec);
    if (!cap_iter_type || !cap_gradexit_type)
        return -1;
    if (PyModule_AddObjectRef(module, "Iter", (PyObject *)cap_iter_type) < 0 ||
        PyModule_AddObjectRef(module, "GradModeExit", (PyObject *)cap_gradexit_type) < 0)
        return -1;
    return 0;
}
