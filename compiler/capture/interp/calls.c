/* Calls: CALL, CALL_FUNCTION_EX, function creation, imports, with-blocks,
 * attribute and iteration opcodes, and pushing frames for inlined Python
 * functions.
 *
 * A few builtins look at "the current frame" (zero-argument super(), globals(),
 * locals(), vars(), dir(), eval/exec without a namespace). Called from ptc's
 * frames, CPython would find the wrong frame, so they are answered here from
 * the interpreter's own frame. Everything else is called for real, inlined
 * (tracing, or the test mode that interprets every call), or handed to the
 * trace's call dispatcher.
 */
#include "capture/interp/interp.h"

#include <string.h>

/* ( -- None) a generator expression starts: the value "sent" first is None */
HANDLER(RETURN_GENERATOR)
{
    UNUSED_ARGS;
    if (!f->gen) {
        PyErr_SetString(cap_InternalError, "ptc: RETURN_GENERATOR outside a generator expression");
        return CAP_ERR;
    }
    cap_push(f, Py_NewRef(Py_None));
    return CAP_NEXT;
}

/* (v -- None) a generator expression yields v: its frame leaves the stack,
   suspended back into its generator, and the nested run that advanced it
   ends with v; the frame resumes later with None "sent" */
HANDLER(YIELD_VALUE)
{
    if (!f->gen || f == I->base) {
        PyErr_SetString(cap_InternalError, "ptc: YIELD_VALUE outside a generator expression");
        return CAP_ERR;
    }
    PyObject *v = cap_pop(f);
    cap_push(f, Py_NewRef(Py_None));
    f->pc = in->next;
    I->frame = f->parent;
    f->parent = NULL;
    cap_hooks.gen_suspend(f->gen, f);
    Py_XSETREF(I->sync_result, v);
    return CAP_SYNC;
}

/* (receiver, sent -- receiver, item) yield from advances its receiver,
   sending it what the outer generator was sent (None, as ptc's YIELD_VALUE
   resumes, for a plain step); finished, 3.11's SEND leaves (value) instead,
   the receiver's return value, and jumps */
HANDLER(SEND)
{
    if (!I->T) {
        PyErr_SetString(cap_InternalError, "ptc: SEND outside a traced generator");
        return CAP_ERR;
    }
    PyObject *item = NULL, *value = NULL;
    int rc = cap_hooks.yield_from(I, cap_peek(f, 2), cap_peek(f, 1), &item, &value);
    if (rc != CAP_NEXT)
        return rc;
    cap_popn(f, 1);
    if (item) {
        cap_push(f, item);
        return CAP_NEXT;
    }
    if (!cap_P.py312) /* 3.12 keeps the receiver for END_SEND */
        cap_popn(f, 1);
    cap_push(f, value);
    f->pc = in->target;
    return CAP_JUMPED;
}

/* 3.12: (receiver, value -- value) at the end of a yield from. */
HANDLER(END_SEND)
{
    UNUSED_ARGS;
    PyObject *value = cap_pop(f);
    cap_popn(f, 1);
    cap_push(f, value);
    return CAP_NEXT;
}

/* ---- calls that need the current frame ------------------------------------- */

static PyObject *frame_locals(cap_frame *f)
{
    if (f->locals_dict)
        return Py_NewRef(f->locals_dict);
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < f->code->nlp; i++) {
        PyObject *v = f->lp[i];
        if (!v)
            continue;
        if (f->code->lpkind[i] & (CAP_LP_CELL | CAP_LP_FREE)) {
            v = cap_cell_get(v);
            if (!v) {
                PyErr_Clear();
                continue;
            }
        } else {
            Py_INCREF(v);
        }
        if (PyDict_SetItem(d, PyTuple_GetItem(f->code->lpnames, i), v) < 0)
            Py_CLEAR(d);
        Py_DECREF(v);
    }
    return d;
}

/* Zero-argument super(): the first argument and the __class__ cell. */
static PyObject *frame_super(cap_frame *f)
{
    cap_code *c = f->code;
    if (c->argcount == 0) {
        PyErr_SetString(PyExc_RuntimeError, "super(): no arguments");
        return NULL;
    }
    PyObject *first = f->lp[0];
    if (first && (c->lpkind[0] & CAP_LP_CELL))
        first = cap_cell_get(first);
    else
        Py_XINCREF(first);
    if (!first) {
        PyErr_SetString(PyExc_RuntimeError, "super(): arg[0] deleted");
        return NULL;
    }
    PyObject *cls = NULL;
    for (int i = c->nlp - c->nfree; i < c->nlp; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GetItem(c->lpnames, i), "__class__") == 0)
            cls = cap_cell_get(f->lp[i]);
    if (!cls) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "super(): __class__ cell not found");
        Py_DECREF(first);
        return NULL;
    }
    PyObject *r = PyObject_CallFunctionObjArgs(cap_P.b_super, cls, first, NULL);
    Py_DECREF(cls);
    Py_DECREF(first);
    return r;
}

/* Calls answered from the interpreter's frame; 0 when callable is not one. */
int cap_frame_builtin(cap_frame *f, PyObject *callable, PyObject *const *args, int nargs,
                      PyObject *kwnames, PyObject **out)
{
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0;
    if (nkw)
        return 0;
    if (callable == cap_P.b_super && nargs == 0)
        *out = frame_super(f);
    else if (callable == cap_P.b_globals && nargs == 0)
        *out = Py_NewRef(f->globals);
    else if ((callable == cap_P.b_locals || callable == cap_P.b_vars) && nargs == 0)
        *out = frame_locals(f);
    else if (callable == cap_P.b_dir && nargs == 0) {
        PyObject *d = frame_locals(f);
        *out = d ? PyMapping_Keys(d) : NULL;
        if (*out && PyList_Sort(*out) < 0)
            Py_CLEAR(*out);
        Py_XDECREF(d);
    } else if ((callable == cap_P.b_eval || callable == cap_P.b_exec) && nargs == 1) {
        PyObject *loc = frame_locals(f);
        *out = loc ? PyObject_CallFunctionObjArgs(callable, args[0], f->globals, loc, NULL) : NULL;
        Py_XDECREF(loc);
    } else
        return 0;
    return *out ? 1 : -1;
}

/* ---- calling ------------------------------------------------------------------- */

static PyObject *kwdict_from(PyObject *const *args, int nargs, PyObject *kwnames)
{
    int nkw = (int)PyTuple_Size(kwnames);
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < nkw; i++)
        if (PyDict_SetItem(d, PyTuple_GetItem(kwnames, i), args[nargs - nkw + i]) < 0)
            Py_CLEAR(d);
    return d;
}

PyObject *cap_call_real(PyObject *callable, PyObject *const *args, int nargs, PyObject *kwnames)
{
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0;
    PyObject *t = cap_tuple_from_array(args, nargs - nkw), *kw = NULL, *r = NULL;
    if (t && (!nkw || (kw = kwdict_from(args, nargs, kwnames))))
        r = PyObject_Call(callable, t, kw);
    Py_XDECREF(t);
    Py_XDECREF(kw);
    return r;
}

int cap_op_call(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                PyObject *kwnames, PyObject **out)
{
    if (I->T)
        return cap_hooks.call(I, callable, args, nargs, kwnames, out);
    int fb = cap_frame_builtin(I->frame, callable, args, nargs, kwnames, out);
    if (fb)
        return fb > 0 ? CAP_NEXT : CAP_ERR;
    if (I->call_once && (cap_is_function(callable) || cap_is_method(callable))) {
        PyObject *(*call)(void *, PyObject *, PyObject *const *, int, PyObject *) = I->call_once;
        I->call_once = NULL;
        *out = call(I->call_once_ctx, callable, args, nargs, kwnames);
        return *out ? CAP_NEXT : CAP_ERR;
    }
    if (I->inline_all) {
        PyObject *fn = callable;
        PyObject *buf[64];
        if (cap_is_method(callable) && nargs < 63) {
            /* A bound method: self becomes the first argument. */
            fn = PyObject_GetAttr(callable, cap_P.s_func);
            PyObject *self = PyObject_GetAttr(callable, cap_P.s_self);
            if (!fn || !self) {
                Py_XDECREF(fn);
                Py_XDECREF(self);
                return CAP_ERR;
            }
            buf[0] = self;
            memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
            int rc = cap_is_function(fn)
                         ? cap_call_inline(I, fn, buf, nargs + 1, kwnames, cap_ret_push)
                         : CAP_NEXT;
            Py_DECREF(fn);
            Py_DECREF(self);
            if (rc != CAP_NEXT)
                return rc;
        } else if (cap_is_function(fn)) {
            int rc = cap_call_inline(I, fn, args, nargs, kwnames, cap_ret_push);
            if (rc != CAP_NEXT)
                return rc;
        }
    }
    *out = cap_call_real(callable, args, nargs, kwnames);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_op_call_ex(cap_interp *I, PyObject *callable, PyObject *argtuple, PyObject *kwdict,
                   PyObject **out)
{
    Py_ssize_t n = PyTuple_Size(argtuple), nkw = kwdict ? PyDict_Size(kwdict) : 0;
    PyObject **buf = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n + nkw + 1));
    PyObject *kwnames = nkw ? PyTuple_New(nkw) : NULL;
    if (!buf || (nkw && !kwnames)) {
        PyMem_Free(buf);
        Py_XDECREF(kwnames);
        PyErr_NoMemory();
        return CAP_ERR;
    }
    cap_spread_args(argtuple, kwdict, buf, kwnames);
    int rc = cap_op_call(I, callable, buf, (int)(n + nkw), kwnames, out);
    Py_XDECREF(kwnames);
    PyMem_Free(buf);
    return rc;
}

/* ---- CALL and friends -------------------------------------------------------- */

/* (NULL|meth, callable|self, args... -- result) */
HANDLER(CALL)
{
    int n = in->arg;
    PyObject *kwnames = f->kwnames;
    f->kwnames = NULL;
    PyObject *first = f->stack[f->sp - n - 2], *second = f->stack[f->sp - n - 1];
    PyObject *callable = first ? first : second;
    PyObject *const *args = &f->stack[f->sp - n - (first ? 1 : 0)];
    int nargs = n + (first ? 1 : 0);
    PyObject *r = NULL;
    int rc = cap_op_call(I, callable, args, nargs, kwnames, &r);
    if (rc == CAP_NEXT || rc == CAP_FRAME) {
        cap_popn(f, n + 2);
        if (rc == CAP_NEXT)
            cap_push(f, r);
    } else if (rc == CAP_BREAK || rc == CAP_ERR) {
        f->kwnames = kwnames; /* the instruction reruns with its keywords */
    }
    return rc;
}

/* ( -- ) the next CALL's keyword names */
HANDLER(KW_NAMES)
{
    UNUSED_ARGS;
    f->kwnames = PyTuple_GetItem(f->code->consts, in->arg);
    return CAP_NEXT;
}

/* (NULL, func, args[, kwargs] -- result) */
HANDLER(CALL_FUNCTION_EX)
{
    bool has_kw = in->arg & 1;
    PyObject *kw = has_kw ? cap_peek(f, 1) : NULL;
    PyObject *args = cap_peek(f, has_kw ? 2 : 1), *func = cap_peek(f, has_kw ? 3 : 2);
    PyObject *t = NULL, *d = NULL, *r = NULL;
    int rc;
    if (I->T) {
        rc = cap_hooks.expand_call_args(I->T, func, args, kw, &t, &d);
        if (rc != CAP_NEXT)
            return rc;
    } else {
        if (PyTuple_CheckExact(args)) {
            t = Py_NewRef(args);
        } else if (!(t = PySequence_Tuple(args))) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "%S argument after * must be an iterable, not %s",
                             func, cap_tpname(Py_TYPE(args)));
            }
            return CAP_ERR;
        }
        if (kw && !PyDict_CheckExact(kw)) {
            d = PyDict_New();
            if (!d || PyDict_Update(d, kw) < 0) {
                Py_XDECREF(d);
                Py_DECREF(t);
                if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
                    PyErr_Clear();
                    PyErr_Format(PyExc_TypeError, "argument after ** must be a mapping, not %s",
                                 cap_tpname(Py_TYPE(kw)));
                }
                return CAP_ERR;
            }
        } else {
            d = Py_XNewRef(kw);
        }
    }
    /* As CPython does, the tuple and dict take the places of what they were
       made of: an instruction that breaks reruns for real on them, not on a
       generator or iterator the expansion has already drained. */
    if (!PyTuple_CheckExact(args))
        Py_SETREF(f->stack[f->sp - (has_kw ? 2 : 1)], Py_NewRef(t));
    if (kw && !PyDict_CheckExact(kw))
        Py_SETREF(f->stack[f->sp - 1], Py_NewRef(d));
    rc = cap_op_call_ex(I, func, t, d, &r);
    Py_DECREF(t);
    Py_XDECREF(d);
    if (rc == CAP_NEXT || rc == CAP_FRAME) {
        cap_popn(f, has_kw ? 4 : 3);
        if (rc == CAP_NEXT)
            cap_push(f, r);
    }
    return rc;
}

/* (v -- f(v)) 3.12: the intrinsics that can appear in ordinary functions */
HANDLER(CALL_INTRINSIC_1)
{
    UNUSED_ARGS;
    PyObject *v = cap_peek(f, 1), *r = NULL;
    int which = in->arg < 16 ? cap_P.intrinsic1[in->arg] : -1;
    if (which == 0) {
        int rc = cap_op_unary(I, H_UNARY_POSITIVE, v, &r);
        if (rc == CAP_NEXT || rc == CAP_FRAME)
            cap_popn(f, 1);
        if (rc == CAP_NEXT)
            cap_push(f, r);
        return rc;
    }
    if (which == 1) {
        if (!(r = cap_op_list_to_tuple(I, v)))
            return CAP_ERR;
        cap_popn(f, 1);
        cap_push(f, r);
        return CAP_NEXT;
    }
    if (which == 2) {
        /* StopIteration escaping a generator becomes RuntimeError (PEP 479). */
        if (PyErr_GivenExceptionMatches(v, PyExc_StopIteration)) {
            r = PyObject_CallFunction(PyExc_RuntimeError, "s", "generator raised StopIteration");
            if (!r)
                return CAP_ERR;
            PyException_SetCause(r, Py_NewRef(v));
        } else {
            r = Py_NewRef(v);
        }
        cap_popn(f, 1);
        cap_push(f, r);
        return CAP_NEXT;
    }
    PyErr_SetString(PyExc_SystemError, "ptc: unsupported intrinsic");
    return CAP_ERR;
}

/* except* and type parameters: such code is never interpreted */
HANDLER(CALL_INTRINSIC_2)
{
    UNUSED_ARGS;
    PyErr_SetString(PyExc_SystemError, "ptc: unsupported intrinsic");
    return CAP_ERR;
}

/* (defaults?, kwdefaults?, annotations?, closure?, code -- function) */
HANDLER(MAKE_FUNCTION)
{
    UNUSED_ARGS;
    int flags = in->arg, k = 1;
    PyObject *code = cap_peek(f, 1);
    PyObject *closure = (flags & 8) ? cap_peek(f, ++k) : Py_None;
    PyObject *annotations = (flags & 4) ? cap_peek(f, ++k) : NULL;
    PyObject *kwdefaults = (flags & 2) ? cap_peek(f, ++k) : NULL;
    PyObject *defaults = (flags & 1) ? cap_peek(f, ++k) : Py_None;
    PyObject *qualname = PyObject_GetAttrString(code, "co_qualname");
    PyObject *fn = qualname ? PyObject_CallFunctionObjArgs(cap_P.FunctionType, code, f->globals,
                                                           Py_None, defaults, closure, NULL)
                            : NULL;
    if (fn && PyObject_SetAttr(fn, cap_P.s_qualname, qualname) < 0)
        Py_CLEAR(fn);
    if (fn && kwdefaults && PyObject_SetAttr(fn, cap_P.s_kwdefaults, kwdefaults) < 0)
        Py_CLEAR(fn);
    if (fn && annotations) {
        PyObject *ann = annotations;
        if (PyTuple_Check(annotations)) {
            /* 3.11+: a flat tuple (name, value, name, value, ...). */
            ann = PyDict_New();
            for (Py_ssize_t i = 0; ann && i + 1 < PyTuple_Size(annotations); i += 2)
                if (PyDict_SetItem(ann, PyTuple_GetItem(annotations, i),
                                   PyTuple_GetItem(annotations, i + 1)) < 0)
                    Py_CLEAR(ann);
        } else {
            Py_INCREF(ann);
        }
        if (!ann || PyObject_SetAttr(fn, cap_P.s_annotations, ann) < 0)
            Py_CLEAR(fn);
        Py_XDECREF(ann);
    }
    Py_XDECREF(qualname);
    if (fn && I->T && cap_hooks.note_function(I->T, fn) < 0)
        Py_CLEAR(fn);
    if (!fn)
        return CAP_ERR;
    cap_popn(f, k);
    cap_push(f, fn);
    return CAP_NEXT;
}

/* ( -- __build_class__) */
HANDLER(LOAD_BUILD_CLASS)
{
    UNUSED_ARGS;
    PyObject *b = PyDict_Check(f->builtins) ? PyDict_GetItemString(f->builtins, "__build_class__")
                                            : NULL;
    if (!b) {
        PyErr_SetString(PyExc_NameError, "__build_class__ not found");
        return CAP_ERR;
    }
    cap_push(f, Py_NewRef(b)); /* calling it is the break (trace/calls.c) */
    return CAP_NEXT;
}

/* Is the module `name` (imported from globals' package at `level`) already
 * loaded? Then importing it again only reads sys.modules. */
static bool already_imported(PyObject *name, PyObject *globals, PyObject *level)
{
    long lv = PyLong_AsLong(level);
    PyObject *full = NULL;
    if (lv == 0) {
        full = Py_NewRef(name);
    } else {
        PyObject *pkg = PyDict_GetItemString(globals, "__package__");
        if (!pkg || !PyUnicode_Check(pkg))
            return false;
        PyObject *util = PyImport_ImportModule("importlib.util");
        char lead[17];
        int nd = lv < 16 ? (int)lv : 16;
        memset(lead, '.', (size_t)nd);
        lead[nd] = 0; /* no "%.*s" in PyUnicode_FromFormat before 3.12 */
        PyObject *dots = PyUnicode_FromFormat("%s%U", lead, name);
        full = util && dots ? PyObject_CallMethod(util, "resolve_name", "OO", dots, pkg) : NULL;
        Py_XDECREF(util);
        Py_XDECREF(dots);
    }
    PyObject *mods = PyImport_GetModuleDict();
    bool loaded = full && PyDict_GetItemWithError(mods, full) != NULL;
    Py_XDECREF(full);
    PyErr_Clear();
    return loaded;
}

/* (level, fromlist -- module) */
HANDLER(IMPORT_NAME)
{
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg);
    PyObject *fromlist = cap_peek(f, 1), *level = cap_peek(f, 2);
    if (I->T && !already_imported(name, f->globals, level))
        return cap_hooks.brk(I->T, CAP_B_IMPORT, "import %s", PyUnicode_AsUTF8(name));
    PyObject *import = PyDict_Check(f->builtins) ? PyDict_GetItemString(f->builtins, "__import__")
                                                 : NULL;
    if (!import) {
        PyErr_SetString(PyExc_ImportError, "__import__ not found");
        return CAP_ERR;
    }
    PyObject *locals = f->locals_dict ? f->locals_dict : Py_None;
    PyObject *m = PyObject_CallFunctionObjArgs(import, name, f->globals, locals, fromlist, level,
                                               NULL);
    if (!m)
        return CAP_ERR;
    cap_popn(f, 2);
    cap_push(f, m);
    return CAP_NEXT;
}

/* (module -- module, module.name) */
HANDLER(IMPORT_FROM)
{
    UNUSED_ARGS;
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg), *m = cap_peek(f, 1);
    if (I->T) {
        PyObject *r = NULL;
        int rc = cap_op_getattr(I, m, name, &r);
        if (rc == CAP_NEXT)
            cap_push(f, r);
        if (rc != CAP_ERR || !PyErr_ExceptionMatches(PyExc_AttributeError))
            return rc == CAP_FRAME ? CAP_ERR : rc;
        PyErr_Clear();
    }
    PyObject *v = PyObject_GetAttr(m, name);
    if (!v && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        /* A submodule imported but not yet bound: look in sys.modules. */
        PyErr_Clear();
        PyObject *pkg = PyObject_GetAttr(m, cap_P.s_name);
        PyObject *full = pkg ? PyUnicode_FromFormat("%U.%U", pkg, name) : NULL;
        PyObject *mods = PyImport_GetModuleDict();
        v = full ? PyDict_GetItemWithError(mods, full) : NULL;
        Py_XINCREF(v);
        if (!v) {
            PyErr_Clear();
            PyErr_Format(PyExc_ImportError, "cannot import name '%U' from '%S'", name,
                         pkg ? pkg : Py_None);
        }
        Py_XDECREF(pkg);
        Py_XDECREF(full);
    }
    if (!v)
        return CAP_ERR;
    cap_push(f, v);
    return CAP_NEXT;
}

/* (mgr -- exit, enter_result) */
HANDLER(BEFORE_WITH)
{
    PyObject *mgr = cap_peek(f, 1);
    if (I->T)
        return cap_hooks.before_with(I, f, mgr);
    PyObject *enter = cap_lookup_special(mgr, cap_P.s_enter), *exit = NULL, *r = NULL;
    if (!enter) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError,
                         "'%s' object does not support the context manager protocol",
                         cap_tpname(Py_TYPE(mgr)));
        return CAP_ERR;
    }
    exit = cap_lookup_special(mgr, cap_P.s_exit);
    if (!exit) {
        Py_DECREF(enter);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError,
                         "'%s' object does not support the context manager protocol "
                         "(missed __exit__ method)",
                         cap_tpname(Py_TYPE(mgr)));
        return CAP_ERR;
    }
    int rc = cap_op_call(I, enter, NULL, 0, NULL, &r);
    Py_DECREF(enter);
    if (rc == CAP_ERR) {
        Py_DECREF(exit);
        return rc;
    }
    cap_popn(f, 1);
    cap_push(f, exit);
    if (rc == CAP_NEXT)
        cap_push(f, r);
    return rc;
}

/* ---- attributes ---------------------------------------------------------------- */

/* (owner -- attr) or, with the method bit (3.12), (owner -- NULL, attr) */
HANDLER(LOAD_ATTR)
{
    bool method = cap_P.py312 && (in->arg & 1);
    PyObject *name = PyTuple_GetItem(f->code->names, cap_P.py312 ? in->arg >> 1 : in->arg);
    PyObject *r = NULL;
    int rc = cap_op_getattr(I, cap_peek(f, 1), name, &r);
    if (rc == CAP_NEXT || rc == CAP_FRAME) {
        cap_popn(f, 1);
        if (method)
            cap_push(f, NULL);
        if (rc == CAP_NEXT)
            cap_push(f, r);
    }
    return rc;
}

/* (owner -- NULL, attr) 3.11: the method form of an attribute load */
HANDLER(LOAD_METHOD)
{
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg), *r = NULL;
    int rc = cap_op_getattr(I, cap_peek(f, 1), name, &r);
    if (rc == CAP_NEXT || rc == CAP_FRAME) {
        cap_popn(f, 1);
        cap_push(f, NULL);
        if (rc == CAP_NEXT)
            cap_push(f, r);
    }
    return rc;
}

/* (global_super, class, self -- attr) or (-- NULL, attr) 3.12 */
HANDLER(LOAD_SUPER_ATTR)
{
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg >> 2), *r = NULL;
    PyObject *args[2] = {cap_peek(f, 2), cap_peek(f, 1)};
    PyObject *sup = NULL;
    int rc = cap_op_call(I, cap_peek(f, 3), args, 2, NULL, &sup);
    if (rc != CAP_NEXT)
        return rc == CAP_FRAME ? CAP_ERR : rc;
    rc = cap_op_getattr(I, sup, name, &r);
    Py_DECREF(sup);
    if (rc == CAP_NEXT || rc == CAP_FRAME) {
        cap_popn(f, 3);
        if (in->arg & 1)
            cap_push(f, NULL);
        if (rc == CAP_NEXT)
            cap_push(f, r);
    }
    return rc;
}

/* (v, owner -- ) owner.name = v */
HANDLER(STORE_ATTR)
{
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg);
    int rc = cap_op_setattr(I, cap_peek(f, 1), name, cap_peek(f, 2));
    if (rc == CAP_NEXT || rc == CAP_FRAME)
        cap_popn(f, 2);
    return rc;
}

/* (owner -- ) del owner.name */
HANDLER(DELETE_ATTR)
{
    PyObject *name = PyTuple_GetItem(f->code->names, in->arg);
    int rc = cap_op_delattr(I, cap_peek(f, 1), name);
    if (rc == CAP_NEXT || rc == CAP_FRAME)
        cap_popn(f, 1);
    return rc;
}

/* ---- iteration ------------------------------------------------------------------ */

/* (iterable -- iterator) */
HANDLER(GET_ITER)
{
    UNUSED_ARGS;
    PyObject *it = NULL;
    int rc = cap_op_iter(I, cap_peek(f, 1), &it);
    if (rc == CAP_NEXT || rc == CAP_FRAME) {
        cap_popn(f, 1);
        if (rc == CAP_NEXT)
            cap_push(f, it);
    }
    return rc;
}

/* (iterator -- iterator, next) or, exhausted, ( -- ) and jump */
HANDLER(FOR_ITER)
{
    PyObject *v = NULL;
    int rc = cap_op_next(I, cap_peek(f, 1), &v);
    if (rc == CAP_FRAME)
        return rc;
    if (rc != CAP_NEXT)
        return rc;
    if (v) {
        cap_push(f, v);
        return CAP_NEXT;
    }
    cap_popn(f, 1);
    f->pc = in->target;
    return CAP_JUMPED;
}
