/* Value operations: what opcode handlers do to their operands.
 *
 * In real mode each is CPython's abstract-object operation. While tracing,
 * symbolic tensors go to the torch mapping (torch_*.c), objects that came from
 * outside the trace go through the trace (sources and guards), and dunder methods
 * written in Python are inlined: the operation pushes a frame whose continuation
 * finishes it (cap_ret_binop tries the reflected method on NotImplemented, exactly
 * in CPython's order).
 */
#include "capture/interp/interp.h"

#include <string.h>

/* ---- binary and comparison operators ------------------------------------------- */

static const char *nb_sym[] = {
#define X(id, sym) sym,
    CAP_NB_OPS(X)
#undef X
};

static PyObject *binop_real(int op, PyObject *a, PyObject *b)
{
    bool ip = op & CAP_NB_INPLACE;
    switch (op & 0xff) {
    case CAP_NB_ADD: return ip ? PyNumber_InPlaceAdd(a, b) : PyNumber_Add(a, b);
    case CAP_NB_AND: return ip ? PyNumber_InPlaceAnd(a, b) : PyNumber_And(a, b);
    case CAP_NB_FLOOR_DIVIDE: return ip ? PyNumber_InPlaceFloorDivide(a, b) : PyNumber_FloorDivide(a, b);
    case CAP_NB_LSHIFT: return ip ? PyNumber_InPlaceLshift(a, b) : PyNumber_Lshift(a, b);
    case CAP_NB_MATRIX_MULTIPLY: return ip ? PyNumber_InPlaceMatrixMultiply(a, b) : PyNumber_MatrixMultiply(a, b);
    case CAP_NB_MULTIPLY: return ip ? PyNumber_InPlaceMultiply(a, b) : PyNumber_Multiply(a, b);
    case CAP_NB_REMAINDER: return ip ? PyNumber_InPlaceRemainder(a, b) : PyNumber_Remainder(a, b);
    case CAP_NB_OR: return ip ? PyNumber_InPlaceOr(a, b) : PyNumber_Or(a, b);
    case CAP_NB_POWER: return ip ? PyNumber_InPlacePower(a, b, Py_None) : PyNumber_Power(a, b, Py_None);
    case CAP_NB_RSHIFT: return ip ? PyNumber_InPlaceRshift(a, b) : PyNumber_Rshift(a, b);
    case CAP_NB_SUBTRACT: return ip ? PyNumber_InPlaceSubtract(a, b) : PyNumber_Subtract(a, b);
    case CAP_NB_TRUE_DIVIDE: return ip ? PyNumber_InPlaceTrueDivide(a, b) : PyNumber_TrueDivide(a, b);
    case CAP_NB_XOR: return ip ? PyNumber_InPlaceXor(a, b) : PyNumber_Xor(a, b);
    }
    PyErr_SetString(PyExc_SystemError, "ptc: bad binary operator");
    return NULL;
}

/* Dunder names per operator: forward, reflected, in-place. */
static const char *nb_names[][3] = {
    [CAP_NB_ADD] = {"__add__", "__radd__", "__iadd__"},
    [CAP_NB_AND] = {"__and__", "__rand__", "__iand__"},
    [CAP_NB_FLOOR_DIVIDE] = {"__floordiv__", "__rfloordiv__", "__ifloordiv__"},
    [CAP_NB_LSHIFT] = {"__lshift__", "__rlshift__", "__ilshift__"},
    [CAP_NB_MATRIX_MULTIPLY] = {"__matmul__", "__rmatmul__", "__imatmul__"},
    [CAP_NB_MULTIPLY] = {"__mul__", "__rmul__", "__imul__"},
    [CAP_NB_REMAINDER] = {"__mod__", "__rmod__", "__imod__"},
    [CAP_NB_OR] = {"__or__", "__ror__", "__ior__"},
    [CAP_NB_POWER] = {"__pow__", "__rpow__", "__ipow__"},
    [CAP_NB_RSHIFT] = {"__rshift__", "__rrshift__", "__irshift__"},
    [CAP_NB_SUBTRACT] = {"__sub__", "__rsub__", "__isub__"},
    [CAP_NB_TRUE_DIVIDE] = {"__truediv__", "__rtruediv__", "__itruediv__"},
    [CAP_NB_XOR] = {"__xor__", "__rxor__", "__ixor__"},
};
static const char *cmp_names[] = {"__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"};
static const int cmp_swap[] = {Py_GT, Py_GE, Py_EQ, Py_NE, Py_LT, Py_LE};
static const char *cmp_sym[] = {"<", "<=", "==", "!=", ">", ">="};

/* Operators are encoded as `op` (binary, with CAP_NB_INPLACE) or CMP_BASE+cmp. */
#define CMP_BASE 0x1000

static PyObject *method_of(PyObject *obj, const char *name)
{
    PyObject *s = PyUnicode_InternFromString(name);
    PyObject *m = s ? cap_type_lookup(Py_TYPE(obj), s) : NULL;
    Py_XDECREF(s);
    return m;
}

/* Does t (or a base other than the builtins) define the dunder in Python? */
static bool python_dunder(PyObject *obj, const char *name)
{
    PyObject *m = method_of(obj, name);
    return m && cap_is_function(m);
}

static bool op_has_python_dunder(int op, PyObject *a, PyObject *b)
{
    if (op >= CMP_BASE) {
        int c = op - CMP_BASE;
        return python_dunder(a, cmp_names[c]) || python_dunder(b, cmp_names[cmp_swap[c]]);
    }
    int k = op & 0xff;
    return python_dunder(a, nb_names[k][0]) || python_dunder(b, nb_names[k][1]) ||
           ((op & CAP_NB_INPLACE) && python_dunder(a, nb_names[k][2]));
}

/* Stages of CPython's binary_op1 / do_richcompare. */
enum { ST_INPLACE = 0, ST_REFLECTED_FIRST, ST_FORWARD, ST_REFLECTED, ST_FAIL };

static int stage_method(int op, int stage, PyObject *a, PyObject *b, PyObject **self,
                        PyObject **other, PyObject **m)
{
    bool cmp = op >= CMP_BASE;
    int k = cmp ? op - CMP_BASE : op & 0xff;
    const char *fwd = cmp ? cmp_names[k] : nb_names[k][0];
    const char *rfl = cmp ? cmp_names[cmp_swap[k]] : nb_names[k][1];
    PyObject *fm = method_of(a, fwd), *rm = Py_TYPE(a) != Py_TYPE(b) || cmp ? method_of(b, rfl) : NULL;
    bool sub = Py_TYPE(a) != Py_TYPE(b) && PyType_IsSubtype(Py_TYPE(b), Py_TYPE(a));
    *m = NULL;
    switch (stage) {
    case ST_INPLACE:
        if (!cmp && (op & CAP_NB_INPLACE))
            *m = method_of(a, nb_names[k][2]), *self = a, *other = b;
        break;
    case ST_REFLECTED_FIRST:
        if (sub && rm && rm != fm)
            *m = rm, *self = b, *other = a;
        break;
    case ST_FORWARD:
        *m = fm, *self = a, *other = b;
        break;
    case ST_REFLECTED:
        if (rm && !(sub && rm != fm))
            *m = rm, *self = b, *other = a;
        break;
    }
    return *m != NULL;
}

static int binop_failed(int op, PyObject *a, PyObject *b)
{
    if (op >= CMP_BASE) {
        int c = op - CMP_BASE;
        if (c == Py_EQ || c == Py_NE)
            return 1; /* identity comparison: the caller handles it */
        PyErr_Format(PyExc_TypeError, "'%s' not supported between instances of '%s' and '%s'",
                     cmp_sym[c], cap_tpname(Py_TYPE(a)), cap_tpname(Py_TYPE(b)));
        return -1;
    }
    PyErr_Format(PyExc_TypeError, "unsupported operand type(s) for %s%s: '%s' and '%s'",
                 nb_sym[op & 0xff], (op & CAP_NB_INPLACE) ? "=" : "", cap_tpname(Py_TYPE(a)),
                 cap_tpname(Py_TYPE(b)));
    return -1;
}

/* Tries the remaining stages; Python methods are inlined (CAP_FRAME). */
static int binop_from(cap_interp *I, int op, PyObject *a, PyObject *b, int stage, PyObject **out)
{
    for (; stage < ST_FAIL; stage++) {
        PyObject *self, *other, *m;
        if (!stage_method(op, stage, a, b, &self, &other, &m))
            continue;
        if (cap_is_function(m)) {
            PyObject *args[2] = {self, other};
            int rc = cap_call_inline(I, m, args, 2, NULL, cap_ret_binop);
            if (rc == CAP_FRAME) {
                cap_frame *child = I->frame;
                child->ret_arg = op | ((stage + 1) << 16);
                child->ret_a = Py_NewRef(a);
                child->ret_b = Py_NewRef(b);
            }
            if (rc != CAP_NEXT)
                return rc;
        }
        PyObject *bound = cap_bind_descr(m, self);
        PyObject *r = bound ? PyObject_CallOneArg_compat(bound, other) : NULL;
        Py_XDECREF(bound);
        if (!r)
            return CAP_ERR;
        if (r != Py_NotImplemented) {
            *out = r;
            return CAP_NEXT;
        }
        Py_DECREF(r);
    }
    int f = binop_failed(op, a, b);
    if (f < 0)
        return CAP_ERR;
    bool same = a == b;
    *out = Py_NewRef((same == (op - CMP_BASE == Py_EQ)) ? Py_True : Py_False);
    return CAP_NEXT;
}

int cap_ret_binop(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                  PyObject *b, PyObject *v)
{
    (void)in;
    if (v != Py_NotImplemented) {
        cap_push(p, v);
        return CAP_NEXT;
    }
    Py_DECREF(v);
    int op = arg & 0xffff, stage = arg >> 16;
    PyObject *r = NULL;
    int rc = binop_from(I, op, a, b, stage, &r);
    if (rc == CAP_NEXT)
        cap_push(p, r);
    if (rc == CAP_ERR && I->T) {
        /* Tracing reruns BINARY_OP for real: give it back its operands. */
        cap_push(p, Py_NewRef(a));
        cap_push(p, Py_NewRef(b));
    }
    return rc;
}

int cap_ret_contains(cap_interp *I, cap_frame *p, const cap_instr *in, int arg, PyObject *a,
                     PyObject *b, PyObject *v)
{
    (void)in, (void)a, (void)b;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (t < 0)
        return cap_ret_failed(I);
    cap_push(p, Py_NewRef((t != 0) != (arg != 0) ? Py_True : Py_False));
    return CAP_NEXT;
}

/* l += items on an outside list is l.extend(items), s |= t, s -= t and
 * s ^= t on an outside set s.update(t), s.difference_update(t) and
 * s.symmetric_difference_update(t), logged
 * (trace/effects.c); other in-place operators on outside containers are
 * breaks. */
static int inplace_outside(cap_interp *I, int op, PyObject *a, PyObject *b, PyObject **out)
{
    bool sets = PySet_CheckExact(a) && PyAnySet_Check(b);
    const char *as = (op & 0xff) == CAP_NB_ADD && PyList_CheckExact(a) ? "extend"
                     : (op & 0xff) == CAP_NB_OR && sets                ? "update"
                     : (op & 0xff) == CAP_NB_SUBTRACT && sets          ? "difference_update"
                     : (op & 0xff) == CAP_NB_XOR && sets ? "symmetric_difference_update"
                                                         : NULL;
    int rc = as ? cap_hooks.outside_mutator(I, a, as, &b, 1, NULL, out) : CAP_NONE;
    if (rc == CAP_NONE)
        return cap_hooks.brk(I->T, CAP_B_MUTATE_OUTSIDE, "in-place %s= on a %s from outside",
                             nb_sym[op & 0xff], cap_tpname(Py_TYPE(a)));
    if (rc == CAP_NEXT)
        Py_SETREF(*out, Py_NewRef(a));
    return rc;
}

/* A set operator's result iterates as its operands' tables do: an outside
 * set the trace wrote, whose order is unknown, is read as a call ptc runs
 * for real would read it (cap_hooks.flow: a break there). */
static int set_operand_order(cap_interp *I, PyObject *x)
{
    if (!PyAnySet_Check(x) || cap_hooks.source_of(I->T, x) < 0)
        return CAP_NEXT;
    PyObject *read = cap_hooks.flow(I->T, x);
    Py_XDECREF(read);
    return read ? CAP_NEXT : CAP_ERR;
}

int cap_op_binary(cap_interp *I, int op, PyObject *a, PyObject *b, PyObject **out)
{
    if (I->T) {
        if (cap_hooks.is_real_tensor(a) || cap_hooks.is_real_tensor(b))
            return cap_hooks.real_tensor(I->T, cap_hooks.is_real_tensor(a) ? a : b, "an operator");
        if (cap_hooks.is_tensor(a) || cap_hooks.is_tensor(b) ||
            cap_hooks.is_outside_array(I->T, a) || cap_hooks.is_outside_array(I->T, b))
            return cap_hooks.tensor_binary(I->T, op, a, b, out);
        if (op_has_python_dunder(op, a, b))
            return binop_from(I, op, a, b, ST_INPLACE, out);
        int rc = (op & CAP_NB_INPLACE) && (op & 0xff) == CAP_NB_ADD && PyList_Check(a)
                     ? cap_hooks.list_iadd(I, a, b)
                     : CAP_NONE;
        if (rc != CAP_NONE) {
            *out = rc == CAP_NEXT ? Py_NewRef(a) : NULL;
            return rc;
        }
        if ((op & CAP_NB_INPLACE) && cap_hooks.source_of(I->T, a) >= 0 && !cap_hooks.is_constant(a))
            return inplace_outside(I, op, a, b, out);
        rc = set_operand_order(I, a);
        if (rc == CAP_NEXT)
            rc = set_operand_order(I, b);
        if (rc == CAP_NEXT)
            rc = cap_hooks.current(I, &a);
        if (rc == CAP_NEXT)
            rc = cap_hooks.current(I, &b);
        if (rc == CAP_NEXT)
            rc = cap_hooks.check_operands(I->T, &a, &b, true);
        if (rc != CAP_NEXT)
            return rc;
    }
    *out = binop_real(op, a, b);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_op_compare(cap_interp *I, int cmp, PyObject *a, PyObject *b, PyObject **out)
{
    if (I->T) {
        if (cap_hooks.is_real_tensor(a) || cap_hooks.is_real_tensor(b))
            return cap_hooks.real_tensor(I->T, cap_hooks.is_real_tensor(a) ? a : b, "a comparison");
        if (cap_hooks.is_tensor(a) || cap_hooks.is_tensor(b) ||
            cap_hooks.is_outside_array(I->T, a) || cap_hooks.is_outside_array(I->T, b))
            return cap_hooks.tensor_compare(I->T, cmp, a, b, out);
        if (op_has_python_dunder(CMP_BASE + cmp, a, b))
            return binop_from(I, CMP_BASE + cmp, a, b, ST_REFLECTED_FIRST, out);
        int rc = cap_hooks.current(I, &a);
        if (rc == CAP_NEXT)
            rc = cap_hooks.current(I, &b);
        if (rc == CAP_NEXT)
            rc = cap_hooks.check_operands(I->T, &a, &b, false);
        if (rc != CAP_NEXT)
            return rc;
    }
    *out = PyObject_RichCompare(a, b, cmp);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_op_unary(cap_interp *I, int h, PyObject *a, PyObject **out)
{
    if (I->T) {
        if (cap_hooks.is_real_tensor(a))
            return cap_hooks.real_tensor(I->T, a, "a unary operator");
        if (cap_hooks.is_tensor(a) || cap_hooks.is_outside_array(I->T, a))
            return cap_hooks.tensor_unary(I->T, h, a, out);
        const char *name = h == H_UNARY_NEGATIVE ? "__neg__"
                           : h == H_UNARY_INVERT ? "__invert__" : "__pos__";
        PyObject *m = method_of(a, name);
        if (m && cap_is_function(m)) {
            PyObject *args[1] = {a};
            return cap_call_inline(I, m, args, 1, NULL, cap_ret_push);
        }
    }
    *out = h == H_UNARY_NEGATIVE ? PyNumber_Negative(a)
           : h == H_UNARY_INVERT ? PyNumber_Invert(a) : PyNumber_Positive(a);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_op_truth(cap_interp *I, PyObject *v, cap_cont finish, int *out)
{
    if (I->T) {
        if (cap_hooks.is_tensor(v))
            return cap_hooks.brk(I->T, CAP_B_TENSOR_BOOL, "bool() of a tensor");
        if (cap_hooks.is_real_tensor(v))
            return cap_hooks.real_tensor(I->T, v, "bool()");
        PyObject *m = method_of(v, "__bool__");
        if (!m)
            m = method_of(v, "__len__");
        if (m && cap_is_function(m)) {
            PyObject *args[1] = {v};
            int rc = cap_call_inline(I, m, args, 1, NULL, finish);
            if (rc != CAP_NEXT)
                return rc;
        }
        int rc = cap_hooks.current(I, &v);
        if (rc == CAP_NEXT)
            rc = cap_hooks.truth_guard(I->T, v);
        if (rc != CAP_NEXT)
            return rc;
    }
    int t = PyObject_IsTrue(v);
    if (t < 0)
        return CAP_ERR;
    *out = t;
    return CAP_NEXT;
}

int cap_op_contains(cap_interp *I, PyObject *container, PyObject *item, PyObject **out)
{
    if (I->T) {
        int rc = cap_hooks.iter_contains(I, container, item, out);
        if (rc != CAP_NONE)
            return rc;
        /* a dict made in the trace finds a symbolic tensor key by identity */
        bool dict_of_trace =
            PyDict_CheckExact(container) && cap_hooks.source_of(I->T, container) < 0;
        if (cap_hooks.is_tensor(container) || (cap_hooks.is_tensor(item) && !dict_of_trace) ||
            cap_hooks.is_real_tensor(container) || cap_hooks.is_real_tensor(item))
            return cap_hooks.brk(I->T, CAP_B_TENSOR_BOOL, "'in' with a tensor");
        PyObject *m = method_of(container, "__contains__");
        if (m && cap_is_function(m)) {
            PyObject *args[2] = {container, item};
            return cap_call_inline(I, m, args, 2, NULL, cap_ret_contains);
        }
        rc = cap_hooks.current(I, &container);
        if (rc == CAP_NEXT)
            rc = cap_hooks.contains_guard(I->T, container, item);
        if (rc != CAP_NEXT)
            return rc;
    }
    int r = PySequence_Contains(container, item);
    if (r < 0)
        return CAP_ERR;
    *out = Py_NewRef(r ? Py_True : Py_False);
    return CAP_NEXT;
}

/* ---- attributes and items ----------------------------------------------------- */

int cap_op_getattr(cap_interp *I, PyObject *obj, PyObject *name, PyObject **out)
{
    if (I->T)
        return cap_hooks.getattr(I, obj, name, out);
    *out = PyObject_GetAttr(obj, name);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_op_setattr(cap_interp *I, PyObject *obj, PyObject *name, PyObject *v)
{
    if (I->T)
        return cap_hooks.setattr(I, obj, name, v);
    return PyObject_SetAttr(obj, name, v) < 0 ? CAP_ERR : CAP_NEXT;
}

int cap_op_delattr(cap_interp *I, PyObject *obj, PyObject *name)
{
    if (I->T)
        return cap_hooks.setattr(I, obj, name, NULL);
    return PyObject_SetAttr(obj, name, NULL) < 0 ? CAP_ERR : CAP_NEXT;
}

int cap_op_getitem(cap_interp *I, PyObject *obj, PyObject *key, PyObject **out)
{
    if (I->T)
        return cap_hooks.getitem(I, obj, key, out);
    *out = PyObject_GetItem(obj, key);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_op_setitem(cap_interp *I, PyObject *obj, PyObject *key, PyObject *v)
{
    if (I->T)
        return cap_hooks.setitem(I, obj, key, v);
    return PyObject_SetItem(obj, key, v) < 0 ? CAP_ERR : CAP_NEXT;
}

int cap_op_delitem(cap_interp *I, PyObject *obj, PyObject *key)
{
    if (I->T)
        return cap_hooks.setitem(I, obj, key, NULL);
    return PyObject_DelItem(obj, key) < 0 ? CAP_ERR : CAP_NEXT;
}

int cap_op_format(cap_interp *I, PyObject *v, int conv, PyObject *spec, PyObject **out)
{
    if (I->T) {
        int rc = cap_hooks.current(I, &v);
        if (rc == CAP_NEXT)
            rc = cap_hooks.check_format(I->T, v);
        if (rc != CAP_NEXT)
            return rc;
    }
    PyObject *c = conv == 1 ? PyObject_Str(v) : conv == 2 ? PyObject_Repr(v)
                  : conv == 3 ? PyObject_ASCII(v) : Py_NewRef(v);
    if (!c)
        return CAP_ERR;
    if (PyUnicode_CheckExact(c) && (!spec || PyUnicode_GetLength(spec) == 0)) {
        *out = c;
        return CAP_NEXT;
    }
    *out = PyObject_Format(c, spec);
    Py_DECREF(c);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* ---- globals ------------------------------------------------------------------ */

int cap_op_load_global(cap_interp *I, cap_frame *f, PyObject *name, PyObject **out)
{
    if (I->T) { /* a global this trace wrote */
        int rc = cap_hooks.global_written(I, f, name, out);
        if (rc != CAP_NONE)
            return rc;
    }
    PyObject *v = PyDict_GetItemWithError(f->globals, name);
    bool builtin = false;
    if (!v) {
        if (PyErr_Occurred())
            return CAP_ERR;
        v = PyDict_Check(f->builtins) ? PyDict_GetItemWithError(f->builtins, name)
                                      : PyObject_GetItem(f->builtins, name);
        if (v && !PyDict_Check(f->builtins))
            Py_DECREF(v); /* borrowed from here on; the builtins keep it */
        if (!v) {
            if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_KeyError))
                return CAP_ERR;
            PyErr_Clear();
            PyErr_Format(PyExc_NameError, "name '%U' is not defined", name);
            return CAP_ERR;
        }
        builtin = true;
    }
    if (I->T)
        return cap_hooks.load_global(I->T, f, name, v, builtin, out);
    *out = Py_NewRef(v);
    return CAP_NEXT;
}

/* ---- iteration and unpacking ------------------------------------------------------ */

int cap_op_iter(cap_interp *I, PyObject *obj, PyObject **out)
{
    if (I->T)
        return cap_hooks.iter(I, obj, out);
    *out = PyObject_GetIter(obj);
    return *out ? CAP_NEXT : CAP_ERR;
}

int cap_op_next(cap_interp *I, PyObject *it, PyObject **out)
{
    if (I->T)
        return cap_hooks.next(I, it, out);
    return cap_next_real(it, out);
}

int cap_next_real(PyObject *it, PyObject **out)
{
    iternextfunc next = (iternextfunc)PyType_GetSlot(Py_TYPE(it), Py_tp_iternext);
    if (!next) {
        PyErr_Format(PyExc_TypeError, "'%s' object is not an iterator", cap_tpname(Py_TYPE(it)));
        return CAP_ERR;
    }
    *out = next(it);
    if (!*out && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_StopIteration))
            return CAP_ERR;
        PyErr_Clear();
    }
    return CAP_NEXT;
}

int cap_op_iter_now(cap_interp *I, PyObject *obj, PyObject **out)
{
    return I->T ? cap_hooks.iter_sync(I, obj, out) : cap_op_iter(I, obj, out);
}

int cap_op_next_now(cap_interp *I, PyObject *it, PyObject **out)
{
    return I->T ? cap_hooks.next_sync(I, it, out) : cap_op_next(I, it, out);
}

PyObject *cap_op_list_to_tuple(cap_interp *I, PyObject *list)
{
    PyObject *items = I->T ? cap_hooks.flow(I->T, list) : Py_NewRef(list);
    PyObject *t = items ? PySequence_Tuple(items) : NULL;
    Py_XDECREF(items);
    return t;
}

int cap_op_unpack(cap_interp *I, PyObject *seq, int before, int after, bool star,
                  PyObject **items)
{
    PyObject *it = NULL, *v = NULL;
    int n = 0, rc;
    if (I->T && cap_hooks.is_tensor(seq))
        return cap_hooks.tensor_unpack(I->T, seq, before, after, star, items);
    if ((rc = cap_op_iter_now(I, seq, &it)) != CAP_NEXT) {
        if (rc == CAP_ERR && PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %s object",
                         cap_tpname(Py_TYPE(seq)));
        }
        return rc;
    }
    while (n < before && (rc = cap_op_next_now(I, it, &v)) == CAP_NEXT && v)
        items[n++] = v;
    if (rc != CAP_NEXT)
        goto fail;
    if (n < before) {
        if (star)
            PyErr_Format(PyExc_ValueError,
                         "not enough values to unpack (expected at least %d, got %d)",
                         before + after, n);
        else
            PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected %d, got %d)",
                         before, n);
        goto fail_err;
    }
    if (!star) {
        if ((rc = cap_op_next_now(I, it, &v)) != CAP_NEXT)
            goto fail;
        if (v) {
            Py_DECREF(v);
            PyErr_Format(PyExc_ValueError, "too many values to unpack (expected %d)", before);
            goto fail_err;
        }
        Py_DECREF(it);
        return CAP_NEXT;
    }
    PyObject *rest = PyList_New(0);
    if (!rest)
        goto fail_err;
    while ((rc = cap_op_next_now(I, it, &v)) == CAP_NEXT && v) {
        PyList_Append(rest, v);
        Py_DECREF(v);
    }
    if (rc != CAP_NEXT) {
        Py_DECREF(rest);
        goto fail;
    }
    Py_ssize_t nrest = PyList_Size(rest);
    if (nrest < after) {
        PyErr_Format(PyExc_ValueError,
                     "not enough values to unpack (expected at least %d, got %zd)",
                     before + after, before + nrest);
        Py_DECREF(rest);
        goto fail_err;
    }
    for (int k = 0; k < after; k++)
        items[before + 1 + k] = Py_NewRef(PyList_GetItem(rest, nrest - after + k));
    PyList_SetSlice(rest, nrest - after, nrest, NULL);
    items[before] = rest;
    Py_DECREF(it);
    return CAP_NEXT;
fail_err:
    rc = CAP_ERR;
fail:
    for (int k = 0; k < n; k++)
        Py_DECREF(items[k]);
    Py_XDECREF(it);
    return rc;
}
