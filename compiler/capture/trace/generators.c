/* Generator functions called while tracing.
 *
 * def g(): ... yield ... called inside the compiled function gives a lazy
 * generator (iter.c's cap_lazy, as a generator expression does): its body
 * runs traced, in a nested run up to its next yield, only when the program
 * advances it (a for-loop, list(), sum(), zip(), next()), so its tensor work
 * joins the caller's graph and its side effects happen in eager's order, as
 * torch.compile inlines generators. The arguments are bound once at the call,
 * so a call CPython rejects raises there; the generator keeps them, to make
 * its frame on the first step and to be rebuilt as fn(*args, **kwargs) while
 * it has not started. yield from (interp's SEND) advances the inner
 * iterator the same way and reads a generator's return value. A generator
 * function with a try or with block stays a break (interp's
 * cap_code.genfunc): closing an unfinished one runs its clean-up, which a
 * trace does not model.
 */
#include "capture/trace/trace.h"

int cap_t_generator_call(cap_interp *I, PyObject *fn, cap_code *c, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out)
{
    const char *why = NULL;
    PyObject *its = cap_tuple_from_array(args, nargs); /* keyword values last */
    cap_frame *f = its ? cap_generator_frame(fn, its, kwnames, Py_None, &why) : NULL;
    if (!f) {
        Py_XDECREF(its);
        if (PyErr_Occurred())
            return CAP_ERR;
        /* CPython raises the TypeError: the call reruns for real */
        return cap_t_break(I->T, CAP_B_RAISE, "arguments do not match %s", c->qualname_s);
    }
    cap_frame_free(f);
    cap_lazy *g = (cap_lazy *)cap_lazy_new(CAP_LAZY_GEN, fn, its, NULL, false);
    Py_DECREF(its);
    if (!g)
        return CAP_ERR;
    g->kwnames = Py_XNewRef(kwnames);
    g->genfunc = true;
    *out = (PyObject *)g;
    return CAP_NEXT;
}

/* The return value of generator it, if it finished at the step just taken
 * (new reference, or NULL): CPython hands it over once, in the
 * StopIteration of that step. */
static PyObject *take_return_value(PyObject *it)
{
    if (Py_TYPE(it) != cap_lazy_type)
        return NULL;
    PyObject *v = ((cap_lazy *)it)->retval;
    ((cap_lazy *)it)->retval = NULL;
    return v;
}

void cap_t_raise_stop_iteration(PyObject *it)
{
    PyObject *v = take_return_value(it);
    PyObject *e = v && v != Py_None ? PyObject_CallOneArg_compat(PyExc_StopIteration, v) : NULL;
    if (e)
        PyErr_SetObject(PyExc_StopIteration, e);
    else if (!PyErr_Occurred())
        PyErr_SetNone(PyExc_StopIteration);
    Py_XDECREF(e);
    Py_XDECREF(v);
}

/* yield from over ptc's own iterators only: a generator's return value is
 * kept when it finishes (iter.c), and the others return None; another
 * iterator's StopIteration may carry a value that the trace's next() drops. */
int cap_t_yield_from(cap_interp *I, PyObject *receiver, PyObject **item, PyObject **value)
{
    *item = *value = NULL;
    if (!cap_is_ptc_iter(receiver))
        return cap_t_break(I->T, CAP_B_GENERATOR, "yield from a %s", cap_tpname(Py_TYPE(receiver)));
    int rc = cap_t_next_sync(I, receiver, item);
    if (rc != CAP_NEXT || *item)
        return rc;
    *value = take_return_value(receiver);
    if (!*value)
        *value = Py_NewRef(Py_None);
    return CAP_NEXT;
}
