/* Opcode handlers: operators, subscripts, building and unpacking containers,
 * string formatting and pattern matching.
 *
 * Operators go through the value operations (values.c), which know about
 * symbolic tensors and user-defined dunder methods; containers built here are
 * ordinary Python objects, created while tracing and therefore rebuilt by
 * recipes at run time.
 */
#include "capture/interp/interp.h"

/* The flags pattern matching reads (Include/object.h; not in the limited API,
 * but their values are fixed since 3.10). */
#ifndef Py_TPFLAGS_MAPPING
#define Py_TPFLAGS_SEQUENCE (1UL << 5)
#define Py_TPFLAGS_MAPPING (1UL << 6)
#endif

/* Pops n operands and pushes a result: the common tail of value handlers. */
static int finish(cap_frame *f, int rc, int npop, PyObject *res)
{
    if (rc == CAP_NEXT) {
        cap_popn(f, npop);
        cap_push(f, res);
    } else if (rc == CAP_FRAME) {
        cap_popn(f, npop);
    }
    return rc;
}

/* (a -- +a) 3.11 */
HANDLER(UNARY_POSITIVE)
{
    UNUSED_ARGS;
    PyObject *r = NULL;
    int rc_ = cap_op_unary(I, H_UNARY_POSITIVE, cap_peek(f, 1), &r);
    return finish(f, rc_, 1, r);
}

/* (a -- -a) */
HANDLER(UNARY_NEGATIVE)
{
    UNUSED_ARGS;
    PyObject *r = NULL;
    int rc_ = cap_op_unary(I, H_UNARY_NEGATIVE, cap_peek(f, 1), &r);
    return finish(f, rc_, 1, r);
}

/* (a -- ~a) */
HANDLER(UNARY_INVERT)
{
    UNUSED_ARGS;
    PyObject *r = NULL;
    int rc_ = cap_op_unary(I, H_UNARY_INVERT, cap_peek(f, 1), &r);
    return finish(f, rc_, 1, r);
}

/* (a -- not a) */
HANDLER(UNARY_NOT)
{
    UNUSED_ARGS;
    int t;
    int rc = cap_op_truth(I, cap_peek(f, 1), cap_ret_truth, &t);
    if (rc == CAP_NEXT)
        return finish(f, rc, 1, Py_NewRef(t ? Py_False : Py_True));
    return finish(f, rc, 1, NULL);
}

/* (a, b -- a op b) */
HANDLER(BINARY_OP)
{
    PyObject *r = NULL;
    if (in->arg < 0 || in->arg >= 26) {
        PyErr_SetString(PyExc_SystemError, "ptc: bad BINARY_OP operand");
        return CAP_ERR;
    }
    int rc = cap_op_binary(I, cap_P.nb_ops[in->arg], cap_peek(f, 2), cap_peek(f, 1), &r);
    return finish(f, rc, 2, r);
}

/* (a, b -- a cmp b) */
HANDLER(COMPARE_OP)
{
    PyObject *r = NULL;
    int cmp = in->arg >> cap_P.cmp_shift;
    if (cmp < 0 || cmp > 5) {
        PyErr_SetString(PyExc_SystemError, "ptc: bad COMPARE_OP operand");
        return CAP_ERR;
    }
    int rc_ = cap_op_compare(I, cmp, cap_peek(f, 2), cap_peek(f, 1), &r);
    return finish(f, rc_, 2, r);
}

/* (a, b -- a is b / a is not b) */
HANDLER(IS_OP)
{
    UNUSED_ARGS;
    bool is = cap_peek(f, 2) == cap_peek(f, 1);
    return finish(f, CAP_NEXT, 2, Py_NewRef((is ^ (in->arg != 0)) ? Py_True : Py_False));
}

/* (a, b -- a in b / a not in b) */
HANDLER(CONTAINS_OP)
{
    PyObject *r = NULL;
    int rc = cap_op_contains(I, cap_peek(f, 1), cap_peek(f, 2), &r);
    if (rc == CAP_FRAME)
        I->frame->ret_arg = in->arg; /* `not in` */
    if (rc == CAP_NEXT && in->arg) {
        PyObject *neg = Py_NewRef(r == Py_True ? Py_False : Py_True);
        Py_DECREF(r);
        r = neg;
    }
    return finish(f, rc, 2, r);
}

/* (container, key -- container[key]) */
HANDLER(BINARY_SUBSCR)
{
    UNUSED_ARGS;
    PyObject *r = NULL;
    int rc_ = cap_op_getitem(I, cap_peek(f, 2), cap_peek(f, 1), &r);
    return finish(f, rc_, 2, r);
}

/* (container, start, stop -- container[start:stop]) 3.12 */
HANDLER(BINARY_SLICE)
{
    UNUSED_ARGS;
    PyObject *slice = PySlice_New(cap_peek(f, 2), cap_peek(f, 1), NULL), *r = NULL;
    if (!slice)
        return CAP_ERR;
    int rc = cap_op_getitem(I, cap_peek(f, 3), slice, &r);
    Py_DECREF(slice);
    return finish(f, rc, 3, r);
}

/* (v, container, key -- ) container[key] = v */
HANDLER(STORE_SUBSCR)
{
    UNUSED_ARGS;
    int rc = cap_op_setitem(I, cap_peek(f, 2), cap_peek(f, 1), cap_peek(f, 3));
    if (rc == CAP_NEXT || rc == CAP_FRAME)
        cap_popn(f, 3);
    return rc;
}

/* (v, container, start, stop -- ) container[start:stop] = v  3.12 */
HANDLER(STORE_SLICE)
{
    UNUSED_ARGS;
    PyObject *slice = PySlice_New(cap_peek(f, 2), cap_peek(f, 1), NULL);
    if (!slice)
        return CAP_ERR;
    int rc = cap_op_setitem(I, cap_peek(f, 3), slice, cap_peek(f, 4));
    Py_DECREF(slice);
    if (rc == CAP_NEXT || rc == CAP_FRAME)
        cap_popn(f, 4);
    return rc;
}

/* (container, key -- ) del container[key] */
HANDLER(DELETE_SUBSCR)
{
    UNUSED_ARGS;
    int rc = cap_op_delitem(I, cap_peek(f, 2), cap_peek(f, 1));
    if (rc == CAP_NEXT || rc == CAP_FRAME)
        cap_popn(f, 2);
    return rc;
}

/* ---- building --------------------------------------------------------------- */

/* (x_1 ... x_n -- (x_1, ..., x_n)) */
HANDLER(BUILD_TUPLE)
{
    UNUSED_ARGS;
    PyObject *t = cap_tuple_from_array(&f->stack[f->sp - in->arg], in->arg);
    return finish(f, t ? CAP_NEXT : CAP_ERR, in->arg, t);
}

/* (x_1 ... x_n -- [x_1, ..., x_n]) */
HANDLER(BUILD_LIST)
{
    UNUSED_ARGS;
    PyObject *l = PyList_New(in->arg);
    if (!l)
        return CAP_ERR;
    for (int i = 0; i < in->arg; i++)
        PyList_SetItem(l, i, Py_NewRef(f->stack[f->sp - in->arg + i]));
    return finish(f, CAP_NEXT, in->arg, l);
}

/* (x_1 ... x_n -- {x_1, ..., x_n}) */
HANDLER(BUILD_SET)
{
    UNUSED_ARGS;
    PyObject *s = PySet_New(NULL);
    for (int i = 0; s && i < in->arg; i++)
        if (PySet_Add(s, f->stack[f->sp - in->arg + i]) < 0)
            Py_CLEAR(s);
    return finish(f, s ? CAP_NEXT : CAP_ERR, in->arg, s);
}

/* (k_1, v_1 ... k_n, v_n -- {k_1: v_1, ...}) */
HANDLER(BUILD_MAP)
{
    UNUSED_ARGS;
    PyObject *d = PyDict_New();
    PyObject **base = &f->stack[f->sp - 2 * in->arg];
    for (int i = 0; d && i < in->arg; i++)
        if (PyDict_SetItem(d, base[2 * i], base[2 * i + 1]) < 0)
            Py_CLEAR(d);
    return finish(f, d ? CAP_NEXT : CAP_ERR, 2 * in->arg, d);
}

/* (v_1 ... v_n, keys -- {keys[i]: v_i}) */
HANDLER(BUILD_CONST_KEY_MAP)
{
    UNUSED_ARGS;
    PyObject *keys = cap_peek(f, 1), *d = PyDict_New();
    if (!PyTuple_Check(keys) || PyTuple_Size(keys) != in->arg) {
        Py_XDECREF(d);
        PyErr_SetString(PyExc_SystemError, "bad BUILD_CONST_KEY_MAP keys argument");
        return CAP_ERR;
    }
    PyObject **base = &f->stack[f->sp - 1 - in->arg];
    for (int i = 0; d && i < in->arg; i++)
        if (PyDict_SetItem(d, PyTuple_GetItem(keys, i), base[i]) < 0)
            Py_CLEAR(d);
    return finish(f, d ? CAP_NEXT : CAP_ERR, in->arg + 1, d);
}

/* (s_1 ... s_n -- s_1 + ... + s_n) */
HANDLER(BUILD_STRING)
{
    UNUSED_ARGS;
    PyObject *parts = cap_tuple_from_array(&f->stack[f->sp - in->arg], in->arg);
    PyObject *s = parts ? PyUnicode_Join(cap_P.empty_str, parts) : NULL;
    Py_XDECREF(parts);
    return finish(f, s ? CAP_NEXT : CAP_ERR, in->arg, s);
}

/* (start, stop[, step] -- slice) */
HANDLER(BUILD_SLICE)
{
    UNUSED_ARGS;
    PyObject *s = in->arg == 3 ? PySlice_New(cap_peek(f, 3), cap_peek(f, 2), cap_peek(f, 1))
                               : PySlice_New(cap_peek(f, 2), cap_peek(f, 1), NULL);
    return finish(f, s ? CAP_NEXT : CAP_ERR, in->arg, s);
}

/* A comprehension's container is an outside object when a break inside
 * the comprehension resumed the trace with it (a real list, set or dict of
 * the break's state). Adding to it is then a write to an outside container:
 * logged and replayed after the graph, as l.append(v) and d[k] = v are
 * (trace/effects.c), not done for real with a symbolic value in it. Returns
 * CAP_NONE for a container of the trace (the caller adds for real). */
static int add_to_outside(cap_interp *I, PyObject *container, PyObject *key, PyObject *v)
{
    if (!I->T || cap_hooks.source_of(I->T, container) < 0)
        return CAP_NONE;
    if (PyDict_Check(container))
        return cap_hooks.setitem(I, container, key, v);
    PyObject *none = NULL;
    int rc = PyList_Check(container)
                 ? cap_hooks.outside_mutator(I, container, "append", &v, 1, NULL, &none)
                 : CAP_NONE;
    Py_XDECREF(none);
    if (rc == CAP_NONE)
        return cap_hooks.brk(I->T, CAP_B_MUTATE_OUTSIDE,
                             "a %s comprehension resumed after a break adds to its %s",
                             cap_tpname(Py_TYPE(container)), cap_tpname(Py_TYPE(container)));
    return rc;
}

/* (c, ..., v -- c, ...) add(c, v); c at depth arg after the pop */
static int add_one(cap_interp *I, cap_frame *f, const cap_instr *in,
                   int (*add)(PyObject *, PyObject *))
{
    PyObject *container = cap_peek(f, in->arg + 1), *v = cap_peek(f, 1);
    int rc = add_to_outside(I, container, NULL, v);
    if (rc == CAP_NONE)
        rc = add(container, v) < 0 ? CAP_ERR : CAP_NEXT;
    if (rc == CAP_NEXT)
        cap_popn(f, 1);
    return rc;
}

/* (list, ..., v -- list, ...) list.append(v); list at depth arg after the pop */
HANDLER(LIST_APPEND)
{
    return add_one(I, f, in, PyList_Append);
}

/* (set, ..., v -- set, ...) */
HANDLER(SET_ADD)
{
    return add_one(I, f, in, PySet_Add);
}

/* (dict, ..., k, v -- dict, ...) */
HANDLER(MAP_ADD)
{
    UNUSED_ARGS;
    PyObject *dict = cap_peek(f, in->arg + 2), *k = cap_peek(f, 2), *v = cap_peek(f, 1);
    int rc = add_to_outside(I, dict, k, v);
    if (rc == CAP_NONE)
        rc = PyDict_SetItem(dict, k, v) < 0 ? CAP_ERR : CAP_NEXT;
    if (rc == CAP_NEXT)
        cap_popn(f, 2);
    return rc;
}

/* Iterates `src` through the interpreter's iteration (so outside containers
 * keep their sources) and calls add(item) for each. */
static int for_each(cap_interp *I, PyObject *src, int (*add)(PyObject *, PyObject *),
                    PyObject *dst)
{
    PyObject *it = NULL, *item = NULL;
    int rc = cap_op_iter_now(I, src, &it);
    if (rc != CAP_NEXT)
        return rc;
    while ((rc = cap_op_next_now(I, it, &item)) == CAP_NEXT && item) {
        int r = add(dst, item);
        Py_DECREF(item);
        if (r < 0) {
            rc = CAP_ERR;
            break;
        }
    }
    Py_DECREF(it);
    return rc;
}

static int set_add(PyObject *s, PyObject *v)
{
    return PySet_Add(s, v);
}

/* (list, ..., iterable -- list, ...) list.extend(iterable) */
HANDLER(LIST_EXTEND)
{
    PyObject *src = cap_peek(f, 1);
    int rc = for_each(I, src, PyList_Append, cap_peek(f, in->arg + 1));
    if (rc == CAP_ERR && PyErr_ExceptionMatches(PyExc_TypeError) &&
        !PyObject_HasAttrString((PyObject *)Py_TYPE(src), "__iter__") &&
        !PySequence_Check(src)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "Value after * must be an iterable, not %s",
                     cap_tpname(Py_TYPE(src)));
    }
    if (rc == CAP_NEXT)
        cap_popn(f, 1);
    return rc;
}

/* CPython's set.update of a set copies its table, and presizes for a dict
 * (a set literal {"a", "b", "c"} is a frozenset constant's update): adding
 * item by item could lay the table out otherwise, so that the set iterates,
 * and pops, in another order than eager's. Those run as set.update on the
 * object as the trace sees it (cap_hooks.flow: a written outside set breaks
 * there, its order unknown). */
static int merge_update(cap_interp *I, PyObject *set, PyObject *src)
{
    PyObject *seen = I->T ? cap_hooks.flow(I->T, src) : Py_NewRef(src);
    PyObject *r = seen ? PyObject_CallMethod(set, "update", "O", seen) : NULL;
    Py_XDECREF(seen);
    Py_XDECREF(r);
    return r ? CAP_NEXT : CAP_ERR;
}

/* (set, ..., iterable -- set, ...) */
HANDLER(SET_UPDATE)
{
    PyObject *src = cap_peek(f, 1);
    int rc = PyAnySet_Check(src) || PyDict_CheckExact(src)
                 ? merge_update(I, cap_peek(f, in->arg + 1), src)
                 : for_each(I, src, set_add, cap_peek(f, in->arg + 1));
    if (rc == CAP_NEXT)
        cap_popn(f, 1);
    return rc;
}

/* (dict, ..., mapping -- dict, ...) dict.update(mapping) */
HANDLER(DICT_UPDATE)
{
    UNUSED_ARGS;
    PyObject *d = cap_peek(f, in->arg + 1);
    PyObject *m = I->T ? cap_hooks.flow(I->T, cap_peek(f, 1)) : Py_NewRef(cap_peek(f, 1));
    if (!m)
        return CAP_ERR;
    int r = PyDict_Update(d, m);
    if (r < 0 && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "'%s' object is not a mapping", cap_tpname(Py_TYPE(m)));
    }
    Py_DECREF(m);
    if (r < 0)
        return CAP_ERR;
    cap_popn(f, 1);
    return CAP_NEXT;
}

/* The mapping's keys, with the error CPython gives for non-mappings. */
static PyObject *mapping_keys(PyObject *m)
{
    PyObject *keys = PyMapping_Keys(m);
    if (!keys && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "argument after ** must be a mapping, not %s",
                     cap_tpname(Py_TYPE(m)));
    }
    return keys;
}

/* (callable, ..., dict, mapping -- callable, ..., dict) ** in a call: no duplicates */
HANDLER(DICT_MERGE)
{
    UNUSED_ARGS;
    PyObject *d = cap_peek(f, in->arg + 1);
    PyObject *m = I->T ? cap_hooks.flow(I->T, cap_peek(f, 1)) : Py_NewRef(cap_peek(f, 1));
    PyObject *keys = m ? mapping_keys(m) : NULL;
    if (!keys) {
        Py_XDECREF(m);
        return CAP_ERR;
    }
    Py_ssize_t n = PyList_Size(keys);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GetItem(keys, i);
        if (PyDict_Contains(d, k) == 1) {
            PyObject *fn = f->stack[f->sp - in->arg - 3];
            PyObject *q = fn ? PyObject_GetAttr(fn, cap_P.s_qualname) : NULL;
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%S() got multiple values for keyword argument '%S'",
                         q ? q : (PyObject *)Py_TYPE(fn ? fn : Py_None), k);
            Py_XDECREF(q);
            goto fail;
        }
        PyObject *v = PyObject_GetItem(m, k);
        if (!v || PyDict_SetItem(d, k, v) < 0) {
            Py_XDECREF(v);
            goto fail;
        }
        Py_DECREF(v);
    }
    Py_DECREF(keys);
    Py_DECREF(m);
    cap_popn(f, 1);
    return CAP_NEXT;
fail:
    Py_DECREF(keys);
    Py_DECREF(m);
    return CAP_ERR;
}

/* (list -- tuple(list)) 3.11 */
HANDLER(LIST_TO_TUPLE)
{
    UNUSED_ARGS;
    PyObject *t = cap_op_list_to_tuple(I, cap_peek(f, 1));
    return finish(f, t ? CAP_NEXT : CAP_ERR, 1, t);
}

/* (seq -- x_n ... x_1) */
HANDLER(UNPACK_SEQUENCE)
{
    PyObject *items[256];
    if (in->arg > 256) {
        PyErr_SetString(PyExc_SystemError, "ptc: unpacking more than 256 values");
        return CAP_ERR;
    }
    int rc = cap_op_unpack(I, cap_peek(f, 1), in->arg, 0, false, items);
    if (rc != CAP_NEXT)
        return rc;
    cap_popn(f, 1);
    for (int i = in->arg - 1; i >= 0; i--)
        cap_push(f, items[i]);
    return CAP_NEXT;
}

/* (seq -- after..., [rest], before...) a, *rest, b = seq */
HANDLER(UNPACK_EX)
{
    int before = in->arg & 0xFF, after = in->arg >> 8, n = before + after + 1;
    PyObject *items[512];
    if (n > 512) {
        PyErr_SetString(PyExc_SystemError, "ptc: unpacking too many values");
        return CAP_ERR;
    }
    int rc = cap_op_unpack(I, cap_peek(f, 1), before, after, true, items);
    if (rc != CAP_NEXT)
        return rc;
    cap_popn(f, 1);
    for (int i = n - 1; i >= 0; i--)
        cap_push(f, items[i]);
    return CAP_NEXT;
}

/* (v[, spec] -- format(conv(v), spec)) */
HANDLER(FORMAT_VALUE)
{
    bool has_spec = (in->arg & 4) != 0;
    PyObject *spec = has_spec ? cap_peek(f, 1) : NULL, *r = NULL;
    PyObject *v = cap_peek(f, has_spec ? 2 : 1);
    int rc_ = cap_op_format(I, v, in->arg & 3, spec, &r);
    return finish(f, rc_, has_spec ? 2 : 1, r);
}

/* ---- pattern matching --------------------------------------------------------- */

/* (obj -- obj, len(obj)) */
HANDLER(GET_LEN)
{
    PyObject *args[1] = {cap_peek(f, 1)}, *r = NULL;
    int rc = cap_op_call(I, cap_P.b_len, args, 1, NULL, &r);
    if (rc == CAP_NEXT)
        cap_push(f, r);
    return rc;
}

/* (obj -- obj, bool) */
HANDLER(MATCH_MAPPING)
{
    UNUSED_ARGS;
    bool m = PyType_GetFlags(Py_TYPE(cap_peek(f, 1))) & Py_TPFLAGS_MAPPING;
    cap_push(f, Py_NewRef(m ? Py_True : Py_False));
    return CAP_NEXT;
}

/* (obj -- obj, bool) */
HANDLER(MATCH_SEQUENCE)
{
    UNUSED_ARGS;
    bool m = PyType_GetFlags(Py_TYPE(cap_peek(f, 1))) & Py_TPFLAGS_SEQUENCE;
    cap_push(f, Py_NewRef(m ? Py_True : Py_False));
    return CAP_NEXT;
}

/* (subject, keys -- subject, keys, values or None) */
HANDLER(MATCH_KEYS)
{
    UNUSED_ARGS;
    PyObject *subject = cap_peek(f, 2), *keys = cap_peek(f, 1);
    if (I->T && cap_hooks.source_of(I->T, subject) >= 0) {
        if (!PyDict_CheckExact(subject))
            return cap_hooks.brk(I->T, CAP_B_UNSUPPORTED_CALL, "mapping pattern on an outside %s",
                                 cap_tpname(Py_TYPE(subject)));
        /* An outside dict: each key's presence guarded, values by source. */
        Py_ssize_t nk = PyTuple_Size(keys);
        PyObject *vals = PyTuple_New(nk);
        for (Py_ssize_t i = 0; vals && i < nk; i++) {
            PyObject *v = NULL;
            int rc = cap_hooks.dict_lookup(I, subject, PyTuple_GetItem(keys, i), &v);
            if (rc != CAP_NEXT) {
                Py_DECREF(vals);
                return rc;
            }
            if (!v) {
                Py_DECREF(vals);
                cap_push(f, Py_NewRef(Py_None));
                return CAP_NEXT;
            }
            PyTuple_SetItem(vals, i, v);
        }
        if (!vals)
            return CAP_ERR;
        cap_push(f, vals);
        return CAP_NEXT;
    }
    Py_ssize_t n = PyTuple_Size(keys);
    PyObject *values = PyTuple_New(n);
    if (!values)
        return CAP_ERR;
    PyObject *get = PyObject_GetAttr(subject, cap_P.s_get);
    PyObject *dummy = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    if (!get || !dummy)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyObject_CallFunctionObjArgs(get, PyTuple_GetItem(keys, i), dummy, NULL);
        if (!v)
            goto fail;
        if (v == dummy) {
            Py_DECREF(v);
            Py_DECREF(values);
            Py_DECREF(get);
            Py_DECREF(dummy);
            cap_push(f, Py_NewRef(Py_None));
            return CAP_NEXT;
        }
        PyTuple_SetItem(values, i, v);
    }
    Py_DECREF(get);
    Py_DECREF(dummy);
    cap_push(f, values);
    return CAP_NEXT;
fail:
    Py_XDECREF(get);
    Py_XDECREF(dummy);
    Py_DECREF(values);
    return CAP_ERR;
}

/* One attribute of a class pattern; NULL without error when missing. */
static PyObject *match_attr(PyObject *subject, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(subject, name);
    if (!v && PyErr_ExceptionMatches(PyExc_AttributeError))
        PyErr_Clear();
    return v;
}

/* (subject, cls, names -- attrs or None) case cls(p_1, ..., k=p) */
HANDLER(MATCH_CLASS)
{
    UNUSED_ARGS;
    PyObject *subject = cap_peek(f, 3), *cls = cap_peek(f, 2), *names = cap_peek(f, 1);
    int npos = in->arg;
    if (I->T && (cap_hooks.source_of(I->T, subject) >= 0 || cap_hooks.is_tensor(subject)))
        return cap_hooks.brk(I->T, CAP_B_UNSUPPORTED_CALL, "class pattern on an outside object");
    if (!PyType_Check(cls)) {
        PyErr_Format(PyExc_TypeError, "called match pattern must be a class");
        return CAP_ERR;
    }
    int inst = PyObject_IsInstance(subject, cls);
    if (inst < 0)
        return CAP_ERR;
    if (!inst)
        return finish(f, CAP_NEXT, 3, Py_NewRef(Py_None));
    Py_ssize_t nkw = PyTuple_Size(names);
    PyObject *attrs = PyList_New(0), *match_args = NULL;
    if (!attrs)
        return CAP_ERR;
    if (npos) {
        match_args = PyObject_GetAttr(cls, cap_P.s_match_args);
        if (!match_args) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                goto fail;
            PyErr_Clear();
        }
        unsigned long fl = PyType_GetFlags((PyTypeObject *)cls);
        bool self_match = !match_args && (fl & (Py_TPFLAGS_LONG_SUBCLASS | Py_TPFLAGS_LIST_SUBCLASS |
                                                Py_TPFLAGS_TUPLE_SUBCLASS | Py_TPFLAGS_BYTES_SUBCLASS |
                                                Py_TPFLAGS_UNICODE_SUBCLASS | Py_TPFLAGS_DICT_SUBCLASS));
        self_match = self_match || (!match_args && (cls == (PyObject *)&PyFloat_Type ||
                                                    cls == (PyObject *)&PyBool_Type ||
                                                    cls == (PyObject *)&PySet_Type ||
                                                    cls == (PyObject *)&PyFrozenSet_Type ||
                                                    cls == (PyObject *)&PyByteArray_Type));
        if (self_match) {
            if (npos > 1) {
                PyErr_Format(PyExc_TypeError, "%s() accepts 1 positional sub-pattern (%d given)",
                             cap_tpname((PyTypeObject *)cls), npos);
                goto fail;
            }
            PyList_Append(attrs, subject);
        } else {
            Py_ssize_t nma = match_args ? PyTuple_Size(match_args) : 0;
            if (match_args && !PyTuple_Check(match_args)) {
                PyErr_Format(PyExc_TypeError, "%s.__match_args__ must be a tuple (got %s)",
                             cap_tpname((PyTypeObject *)cls), cap_tpname(Py_TYPE(match_args)));
                goto fail;
            }
            if (npos > nma) {
                PyErr_Format(PyExc_TypeError, "%s() accepts %zd positional sub-pattern%s (%d given)",
                             cap_tpname((PyTypeObject *)cls), nma, nma == 1 ? "" : "s", npos);
                goto fail;
            }
            for (int i = 0; i < npos; i++) {
                PyObject *v = match_attr(subject, PyTuple_GetItem(match_args, i));
                if (!v) {
                    if (PyErr_Occurred())
                        goto fail;
                    Py_DECREF(attrs);
                    Py_XDECREF(match_args);
                    return finish(f, CAP_NEXT, 3, Py_NewRef(Py_None));
                }
                PyList_Append(attrs, v);
                Py_DECREF(v);
            }
        }
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *v = match_attr(subject, PyTuple_GetItem(names, i));
        if (!v) {
            if (PyErr_Occurred())
                goto fail;
            Py_DECREF(attrs);
            Py_XDECREF(match_args);
            return finish(f, CAP_NEXT, 3, Py_NewRef(Py_None));
        }
        PyList_Append(attrs, v);
        Py_DECREF(v);
    }
    Py_XDECREF(match_args);
    PyObject *t = PyList_AsTuple(attrs);
    Py_DECREF(attrs);
    return finish(f, t ? CAP_NEXT : CAP_ERR, 3, t);
fail:
    Py_XDECREF(match_args);
    Py_DECREF(attrs);
    return CAP_ERR;
}
