/* Generator functions called while tracing.
 *
 * def g(): ... yield ... called inside the compiled function gives a lazy
 * generator (iter.c's cap_lazy, as a generator expression does): its body
 * runs traced, in a nested run up to its next yield, only when the program
 * advances it (a for-loop, list(), sum(), zip(), next(), send()), so its
 * tensor work joins the caller's graph and its side effects happen in
 * eager's order, as torch.compile inlines generators. The arguments are
 * bound once at the call, so a call CPython rejects raises there; the
 * generator keeps them, to make its frame on the first step and to be
 * rebuilt as fn(*args, **kwargs) while it has not started. yield from
 * (interp's SEND) advances the inner iterator the same way and reads a
 * generator's return value.
 *
 * send(v), throw(exc) (or throw(type, value)) and close() follow CPython
 * 3.11's generator object:
 * the value sent is what the yield evaluates to, an exception thrown is
 * raised at the yield (interp's throw_in), and close() throws GeneratorExit
 * there, so finally blocks and __exit__ run, traced, in eager's order. At a
 * yield from they go to the inner iterator first, as CPython's do: send
 * through interp's SEND, close and throw here, the outer generator taken
 * past its SEND loop when a throw ends the inner one (leave_yield_from).
 *
 * A finally, with block or except clause catching GeneratorExit that
 * CPython would run when it frees an unfinished generator is the one
 * clean-up a trace cannot place: it happens when the last reference goes
 * (an except clause that cannot catch GeneratorExit runs nothing then, so
 * Sequence.__iter__ left by zip is traced). Such generators are tracked
 * while they live (iter.c, whose dealloc sees them go); one the trace
 * drops, or leaves suspended inside such a block, sends the compile back
 * to trace again with its call not inlined (compile.c): that call runs for
 * real and makes a real generator, CPython's to clean up.
 */
#include "capture/trace/trace.h"

#include <string.h>

/* ---- generators with clean-up code ---------------------------------------------- */

static bool has_cleanup(const cap_frame *f)
{
    const cap_code *c = f->code;
    for (int pc = 0; pc < c->nunits; pc++)
        if (c->ins[pc].h == H_YIELD_VALUE && cap_code_cleanup_at(c, pc, f->globals, f->builtins))
            return true;
    return false;
}

int cap_t_generator_call(cap_interp *I, PyObject *fn, cap_code *c, PyObject *const *args, int nargs,
                         PyObject *kwnames, PyObject **out)
{
    const char *at = I->T->unfinished_at;
    if (cap_t_no_inline(I->T, I->frame))
        return cap_t_break(I->T, CAP_B_GENERATOR,
                           "call to generator function %s runs for real: a generator it made was "
                           "left unfinished in a try or with block, or could not be rebuilt%s%s%s",
                           c->qualname_s, at && at[0] ? " (the trace stopped at: " : "",
                           at && at[0] ? at : "", at && at[0] ? ")" : "");
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
    bool cleanup = has_cleanup(f);
    cap_frame_free(f);
    cap_lazy *g = (cap_lazy *)cap_lazy_new(CAP_LAZY_GEN, fn, its, NULL, false);
    Py_DECREF(its);
    if (!g)
        return CAP_ERR;
    g->kwnames = Py_XNewRef(kwnames);
    g->genfunc = true;
    if (cleanup) {
        PyObject *site = cap_t_call_site(I->frame);
        int rc = site ? cap_t_generator_track(g, site) : -1;
        Py_XDECREF(site);
        if (rc < 0) {
            Py_DECREF(g);
            return CAP_ERR;
        }
    }
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

/* A value other than None sent through a yield from, as CPython's
 * PyIter_Send passes it: into a generator's send(), or a call of the
 * receiver's send method, which ptc's other iterators (list_iterator, map)
 * have not. */
static int send_into(cap_interp *I, PyObject *receiver, PyObject *sent, PyObject **item)
{
    cap_lazy *g = (cap_lazy *)receiver;
    if (Py_TYPE(receiver) != cap_lazy_type || g->kind != CAP_LAZY_GEN) {
        PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute 'send'",
                     cap_tpname((PyTypeObject *)cap_eager_type(receiver)));
        return CAP_ERR;
    }
    if (g->state == CAP_GEN_READY) {
        PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started generator");
        return CAP_ERR;
    }
    return cap_t_gen_error(I, cap_t_gen_run(I, g, sent, NULL, item));
}

/* yield from over ptc's own iterators only: a generator's return value is
 * kept when it finishes (iter.c), and the others return None; another
 * iterator's StopIteration may carry a value that the trace's next() drops. */
int cap_t_yield_from(cap_interp *I, PyObject *receiver, PyObject *sent, PyObject **item,
                     PyObject **value)
{
    *item = *value = NULL;
    if (!cap_is_ptc_iter(receiver))
        return cap_t_break(I->T, CAP_B_GENERATOR, "yield from a %s", cap_tpname(Py_TYPE(receiver)));
    int rc =
        sent == Py_None ? cap_t_next_sync(I, receiver, item) : send_into(I, receiver, sent, item);
    if (rc != CAP_NEXT || *item)
        return rc;
    *value = take_return_value(receiver);
    if (!*value)
        *value = Py_NewRef(Py_None);
    return CAP_NEXT;
}

/* ---- send, throw, close -------------------------------------------------------------- */

/* Whether g stands at a yield from (RESUME 2 after its yield): send, throw
 * and close would go to the inner iterator first. */
static bool in_yield_from(const cap_lazy *g)
{
    const cap_instr *in = &g->frame->code->ins[g->frame->pc];
    return in->arg == 2 && strcmp(cap_opname(in->raw), "RESUME") == 0;
}

/* Resumes g (sent, or thrown raised at its yield) with g's iterators marked,
 * so that a break inside puts them back; closing: close()'s ending. */
static int resume(cap_interp *I, cap_lazy *g, PyObject *sent, PyObject *thrown, bool closing,
                  PyObject **out)
{
    PyObject *self = (PyObject *)g, *item = NULL;
    cap_iter_marks marks;
    cap_iter_mark(&marks, &self, 1);
    int rc = cap_t_gen_run(I, g, sent, thrown, &item);
    if (closing && rc == CAP_NEXT && item) {
        Py_DECREF(item);
        PyErr_SetString(PyExc_RuntimeError, "generator ignored GeneratorExit");
        rc = CAP_ERR;
    } else if (closing &&
               (rc == CAP_NEXT || (rc == CAP_ERR && PyErr_ExceptionMatches(PyExc_GeneratorExit)))) {
        PyErr_Clear();
        Py_CLEAR(g->retval);
        *out = Py_NewRef(Py_None);
        rc = CAP_NEXT;
    } else if (rc == CAP_NEXT && !item) {
        cap_t_raise_stop_iteration(self); /* finished: StopIteration(its value) */
        rc = CAP_ERR;
    } else if (rc == CAP_NEXT) {
        *out = item;
    }
    return cap_iter_rewind(I, &marks, cap_t_gen_error(I, rc));
}

static int gen_send(cap_interp *I, cap_lazy *g, PyObject *v, PyObject **out)
{
    if (g->state == CAP_GEN_READY && v != Py_None) {
        PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started generator");
        return CAP_ERR;
    }
    if (g->state == CAP_GEN_DONE) {
        PyErr_SetNone(PyExc_StopIteration);
        return CAP_ERR;
    }
    return resume(I, g, v, NULL, false, out);
}

/* typ(val) as CPython's PyErr_NormalizeException makes it: val itself when
 * it is an instance of typ, else typ() for None, typ(*val) for a tuple. */
static int normalized_exception(cap_interp *I, PyObject *typ, PyObject *val, PyObject **exc)
{
    if (PyExceptionInstance_Check(val) && PyObject_IsSubclass((PyObject *)Py_TYPE(val), typ) > 0) {
        *exc = Py_NewRef(val);
        return CAP_NEXT;
    }
    int nargs = PyTuple_Check(val) ? (int)PyTuple_Size(val) : val == Py_None ? 0 : 1;
    PyObject **args = PyMem_Malloc(sizeof(PyObject *) * (nargs + 1));
    if (!args)
        return CAP_ERR;
    for (int a = 0; a < nargs; a++)
        args[a] = PyTuple_Check(val) ? PyTuple_GetItem(val, a) : val; /* borrowed */
    int rc = cap_t_call_sync(I, typ, args, nargs, NULL, exc);
    PyMem_Free(args);
    if (rc == CAP_NEXT && !PyExceptionInstance_Check(*exc)) {
        Py_CLEAR(*exc);
        return cap_t_break(I->T, CAP_B_GENERATOR,
                           "generator.throw() of a class that makes no exception");
    }
    return rc;
}

/* The exception throw(typ[, val[, tb]]) raises, checked and normalised as
 * CPython 3.11's _gen_throw does: typ an instance (val None), or a class
 * made into one with val. A traceback given breaks: the trace does not
 * carry one into the generator's frame. */
static int thrown_exception(cap_interp *I, PyObject *const *args, int nargs, PyObject **exc)
{
    PyObject *typ = args[0], *val = nargs > 1 ? args[1] : Py_None;
    PyObject *tb = nargs > 2 ? args[2] : Py_None;
    if (tb != Py_None && !PyTraceBack_Check(tb)) {
        PyErr_SetString(PyExc_TypeError, "throw() third argument must be a traceback object");
        return CAP_ERR;
    }
    if (tb != Py_None)
        return cap_t_break(I->T, CAP_B_GENERATOR, "generator.throw() with a traceback");
    if (PyExceptionClass_Check(typ))
        return normalized_exception(I, typ, val, exc);
    if (!PyExceptionInstance_Check(typ)) {
        PyErr_Format(PyExc_TypeError,
                     "exceptions must be classes or instances deriving from BaseException, not %s",
                     cap_tpname(Py_TYPE(typ)));
        return CAP_ERR;
    }
    if (val != Py_None) {
        PyErr_SetString(PyExc_TypeError, "instance exception may not have a separate value");
        return CAP_ERR;
    }
    *exc = Py_NewRef(typ);
    return CAP_NEXT;
}

static int gen_close(cap_interp *I, cap_lazy *g, PyObject **out);

/* The pending error taken as an exception object (*raised), to be thrown
 * on into the outer generator. */
static int take_error(PyObject **raised)
{
    PyObject *type, *tb;
    PyErr_Fetch(&type, raised, &tb);
    PyErr_NormalizeException(&type, raised, &tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return *raised ? CAP_NEXT : CAP_ERR;
}

/* g's receiver closed first, as CPython's gen_close_iter does before close()
 * or throw(GeneratorExit) reaches a generator at a yield from: an inner
 * generator's close() (traced; g is executing meanwhile), nothing for ptc's
 * other iterators, which have no close method. *raised: the exception the
 * inner close raised, to throw into g in GeneratorExit's place, or NULL. */
static int close_receiver(cap_interp *I, cap_lazy *g, PyObject **raised)
{
    *raised = NULL;
    PyObject *receiver = g->frame->stack[g->frame->sp - 2], *none = NULL;
    cap_lazy *inner = (cap_lazy *)receiver;
    if (Py_TYPE(receiver) != cap_lazy_type || inner->kind != CAP_LAZY_GEN)
        return CAP_NEXT;
    g->state = CAP_GEN_RUNNING;
    int rc = gen_close(I, inner, &none);
    g->state = CAP_GEN_SUSPENDED;
    Py_XDECREF(none);
    if (rc != CAP_ERR || PyErr_ExceptionMatches(cap_InternalError))
        return rc;
    return take_error(raised);
}

/* Takes g out of its yield from as CPython's _gen_throw does when the inner
 * generator ends under a throw: the receiver popped, and g standing past
 * its SEND loop with the inner one's return value pushed, or (value NULL)
 * at the loop's last instruction, where what the inner one raised is
 * thrown (the handlers of the yield from's own place). Steals value. */
static void leave_yield_from(cap_lazy *g, PyObject *value)
{
    cap_frame *f = g->frame;
    const cap_code *c = f->code;
    int loop_back = c->ins[f->pc].next; /* JUMP_BACKWARD_NO_INTERRUPT to SEND */
    int send = c->ins[loop_back].target;
    /* YIELD_VALUE's None, and the receiver but where 3.12's END_SEND pops it */
    cap_popn(f, value && cap_P.py312 ? 1 : 2);
    if (value)
        cap_push(f, value);
    f->pc = value ? c->ins[send].target : loop_back;
}

static int gen_throw(cap_interp *I, cap_lazy *g, PyObject *const *args, int nargs, PyObject **out);

/* How the inner generator's throw ended, for g (CAP_NEXT): *value its
 * return value, or *raised what it raised; other codes pass through. */
static int inner_ending(cap_lazy *inner, int rc, PyObject **value, PyObject **raised)
{
    *value = *raised = NULL;
    if (rc == CAP_NEXT) {
        *value = take_return_value((PyObject *)inner);
        if (!*value)
            *value = Py_NewRef(Py_None);
        return CAP_NEXT;
    }
    if (rc != CAP_ERR || PyErr_ExceptionMatches(cap_InternalError))
        return rc;
    return take_error(raised);
}

/* throw(exc) into g at a yield from a generator: thrown into the inner one
 * first (its error not yet the caller's: g may catch it); while it yields,
 * g stays where it is; when it ends, g resumes past its loop with the inner
 * one's return value, or has what it raised thrown there. A break or an
 * uncaught error puts both generators back. */
static int throw_through(cap_interp *I, cap_lazy *g, cap_lazy *inner, PyObject *exc, PyObject **out)
{
    PyObject *self = (PyObject *)inner, *item = NULL, *value, *raised;
    cap_iter_marks marks;
    cap_iter_mark(&marks, &self, 1);
    g->state = CAP_GEN_RUNNING;
    int rc = inner->state == CAP_GEN_SUSPENDED ? cap_t_gen_run(I, inner, NULL, exc, &item)
                                               : gen_throw(I, inner, &exc, 1, &item);
    g->state = CAP_GEN_SUSPENDED;
    if (rc == CAP_NEXT && item)
        *out = item;
    else if ((rc = inner_ending(inner, rc, &value, &raised)) == CAP_NEXT) {
        if (PyErr_GivenExceptionMatches(raised, PyExc_StopIteration)) {
            value = PyObject_GetAttrString(raised, "value");
            Py_CLEAR(raised);
        }
        if (value || raised) {
            leave_yield_from(g, value);
            rc = resume(I, g, NULL, raised, false, out);
        } else {
            rc = CAP_ERR;
        }
        Py_XDECREF(raised);
    }
    return cap_iter_rewind(I, &marks, cap_t_gen_error(I, rc));
}

static int gen_throw(cap_interp *I, cap_lazy *g, PyObject *const *args, int nargs, PyObject **out)
{
    PyObject *exc = NULL;
    int rc = thrown_exception(I, args, nargs, &exc);
    if (rc != CAP_NEXT)
        return rc;
    bool delegating = g->state == CAP_GEN_SUSPENDED && g->frame && in_yield_from(g);
    PyObject *receiver = delegating ? g->frame->stack[g->frame->sp - 2] : NULL, *raised = NULL;
    if (delegating && PyErr_GivenExceptionMatches(exc, PyExc_GeneratorExit)) {
        if ((rc = close_receiver(I, g, &raised)) == CAP_NEXT)
            rc = resume(I, g, NULL, raised ? raised : exc, false, out);
        Py_XDECREF(raised);
    } else if (delegating && Py_TYPE(receiver) == cap_lazy_type &&
               ((cap_lazy *)receiver)->kind == CAP_LAZY_GEN)
        rc = throw_through(I, g, (cap_lazy *)receiver, exc, out);
    else if (g->state == CAP_GEN_SUSPENDED) /* ptc's other iterators have no throw method */
        rc = resume(I, g, NULL, exc, false, out);
    else if (g->state == CAP_GEN_RUNNING) {
        PyErr_SetString(PyExc_ValueError, "generator already executing");
        rc = CAP_ERR;
    } else { /* not started, or finished: raised with no code of g's run */
        g->state = CAP_GEN_DONE;
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        rc = CAP_ERR;
    }
    Py_DECREF(exc);
    return rc;
}

static int gen_close(cap_interp *I, cap_lazy *g, PyObject **out)
{
    if (g->state == CAP_GEN_RUNNING) {
        PyErr_SetString(PyExc_ValueError, "generator already executing");
        return CAP_ERR;
    }
    if (g->state != CAP_GEN_SUSPENDED) { /* not started, or finished: nothing runs */
        g->state = CAP_GEN_DONE;
        *out = Py_NewRef(Py_None);
        return CAP_NEXT;
    }
    PyObject *exc = NULL;
    int rc = g->frame && in_yield_from(g) ? close_receiver(I, g, &exc) : CAP_NEXT;
    if (rc != CAP_NEXT)
        return rc;
    if (!exc && !(exc = PyObject_CallNoArgs(PyExc_GeneratorExit)))
        return CAP_ERR;
    rc = resume(I, g, NULL, exc, true, out);
    Py_DECREF(exc);
    return rc;
}

static int wrong_arguments(const char *name, int nargs, PyObject *kwnames)
{
    if (kwnames && PyTuple_Size(kwnames) > 0)
        PyErr_Format(PyExc_TypeError, "generator.%s() takes no keyword arguments", name);
    else if (name[0] == 's')
        PyErr_Format(PyExc_TypeError, "generator.send() takes exactly one argument (%d given)",
                     nargs);
    else if (name[0] == 'c')
        PyErr_Format(PyExc_TypeError, "generator.close() takes no arguments (%d given)", nargs);
    else
        PyErr_Format(PyExc_TypeError, "throw expected at %s, got %d",
                     nargs < 1 ? "least 1 argument" : "most 3 arguments", nargs);
    return CAP_ERR;
}

int cap_t_generator_method(cap_interp *I, cap_lazy *g, const char *name, PyObject *const *args,
                           int nargs, PyObject *kwnames, PyObject **out)
{
    bool send = strcmp(name, "send") == 0, thr = strcmp(name, "throw") == 0,
         close = strcmp(name, "close") == 0;
    if (g->kind != CAP_LAZY_GEN || !(send || thr || close))
        return CAP_NONE;
    bool kw = kwnames && PyTuple_Size(kwnames) > 0;
    if (kw || (send && nargs != 1) || (close && nargs != 0) || (thr && (nargs < 1 || nargs > 3)))
        return wrong_arguments(name, nargs, kwnames);
    if (send)
        return gen_send(I, g, args[0], out);
    return thr ? gen_throw(I, g, args, nargs, out) : gen_close(I, g, out);
}
