/* Binding torch calls onto ops.def and building graph nodes.
 *
 * At start-up every table entry's signature string is parsed against its op's
 * schema and its callable is looked up (by path), filling two dicts: callable
 * -> entry, and Tensor method name -> entry. A call then binds Python arguments
 * by position and by name into the schema's order, converts each to a ptc_arg
 * by the schema's parameter kind, and the call (torch_call.c) appends the
 * node with ptc_build (meta inference decides output types; a meta error
 * becomes a TRACE_ERROR break so the call reruns for real). Every node records
 * the user's source position, the text of the expression and the nn.Module
 * path.
 */
#include "capture/torch/torch.h"

#include <string.h>

/* ---- table set-up --------------------------------------------------------------- */

static int parse_sig(cap_tmap *m)
{
    const char *s = m->sig;
    const ptc_schema *sch = m->op >= 0 && !m->fn ? ptc_op_schema((ptc_op)m->op) : NULL;
    bool kwonly = false;
    m->np = 0;
    while (s && *s) {
        const char *end = strchr(s, ',');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        char tok[64];
        snprintf(tok, sizeof tok, "%.*s", (int)n, s);
        s = end ? end + 1 : NULL;
        if (strcmp(tok, "*") == 0) {
            kwonly = true;
            continue;
        }
        if (m->np == 20)
            return -1;
        cap_tparam *p = &m->p[m->np++];
        const char *name = tok;
        p->kind = TP_SCHEMA;
        if (*name == '!')
            p->kind = TP_INPLACE, name++;
        else if (*name == '~')
            p->kind = TP_IGNORE, name++;
        else if (*name == '^')
            p->kind = TP_MUSTNONE, name++;
        char *colon = strchr(name, ':');
        snprintf(p->pyname, sizeof p->pyname, "%.*s", colon ? (int)(colon - name) : (int)strlen(name), name);
        const char *sname = colon ? colon + 1 : name;
        p->kwonly = kwonly;
        p->schema = -1;
        if (p->kind == TP_SCHEMA && sch) {
            for (int i = 0; i < sch->nparams; i++)
                if (strcmp(sch->params[i].name, sname) == 0)
                    p->schema = i;
            if (p->schema < 0) {
                PyErr_Format(PyExc_SystemError, "ptc: %s: no parameter '%s' in %s", m->name, sname,
                             sch->text);
                return -1;
            }
        }
    }
    return 0;
}

int cap_torch_tables_init(cap_tmap *rows, int nrows)
{
    cap_T.fn_table = PyDict_New();
    cap_T.method_table = PyDict_New();
    if (!cap_T.fn_table || !cap_T.method_table)
        return -1;
    for (int i = 0; i < nrows; i++) {
        cap_tmap *m = &rows[i];
        if (parse_sig(m) < 0)
            return -1;
        PyObject *cap = PyCapsule_New(m, "ptc.tmap", NULL);
        if (!cap)
            return -1;
        PyObject *obj = NULL;
        if (m->flags & TM_METHOD) {
            const char *name = m->name + 7; /* "Tensor." */
            PyDict_SetItemString(cap_T.method_table, name, cap);
            obj = PyObject_GetAttrString(cap_T.Tensor, name);
        } else {
            obj = cap_import_path(m->name);
        }
        if (obj) {
            if (PyDict_GetItemWithError(cap_T.fn_table, obj) == NULL && !PyErr_Occurred())
                PyDict_SetItem(cap_T.fn_table, obj, cap);
            PyErr_Clear();
            Py_DECREF(obj);
        }
        PyErr_Clear();
        Py_DECREF(cap);
    }
    return 0;
}

const cap_tmap *cap_torch_lookup_fn(PyObject *callable)
{
    PyObject *cap = PyDict_GetItemWithError(cap_T.fn_table, callable);
    if (!cap) {
        PyErr_Clear(); /* unhashable callables are simply not mapped */
        return NULL;
    }
    return PyCapsule_GetPointer(cap, "ptc.tmap");
}

const cap_tmap *cap_torch_lookup_method(PyObject *name)
{
    PyObject *cap = PyDict_GetItem(cap_T.method_table, name);
    return cap ? PyCapsule_GetPointer(cap, "ptc.tmap") : NULL;
}

const char *cap_tmap_name(const cap_tmap *m)
{
    return m->name;
}

/* ---- argument access and conversion ------------------------------------------------- */

PyObject *cap_targ(cap_tcall *c, int i, const char *name)
{
    if (i >= 0 && i < c->npos)
        return c->pos[i];
    for (int k = 0; name && k < c->nkw; k++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GetItem(c->kwnames, k), name) == 0)
            return c->kwv[k];
    return NULL;
}

static int bad_arg(cap_trace *T, const char *what, PyObject *v, const char *expected)
{
    return cap_t_break(T, CAP_B_TRACE_ERROR, "%s: expected %s, got %s", what, expected,
                       cap_tpname(Py_TYPE(v)));
}

static int to_int(cap_trace *T, PyObject *v, int64_t *out, const char *what)
{
    if (cap_is_tensor(v))
        return cap_t_break(T, CAP_B_TENSOR_ITEM, "%s: a tensor used as an int", what);
    if (!PyLong_Check(v)) {
        if (PyIndex_Check(v)) {
            PyObject *i = PyNumber_Index(v);
            if (!i)
                return CAP_ERR;
            *out = PyLong_AsLongLong(i);
            Py_DECREF(i);
            return CAP_NEXT;
        }
        return bad_arg(T, what, v, "an int");
    }
    *out = PyLong_AsLongLong(v);
    return PyErr_Occurred() ? CAP_ERR : CAP_NEXT;
}

/* An int of a size list: symbolic sizes stay symbolic. */
static int to_dim(cap_trace *T, PyObject *v, ptc_dim *out, const char *what)
{
    if (cap_is_symint(v))
        return cap_dim_from_obj(T, v, out) < 0 ? CAP_ERR : CAP_NEXT;
    int64_t i;
    int rc = to_int(T, v, &i, what);
    *out = ptc_dim_c(i);
    return rc;
}

/* A numpy integer where an int or a list of ints goes (x.sum(np.int64(0))):
 * the int it stands for (new reference), or NULL for anything else. */
static PyObject *numpy_int(PyObject *v)
{
    PyObject *number = cap_is_numpy_scalar(v) ? cap_numpy_scalar_number(v) : NULL;
    if (number && !PyLong_Check(number))
        Py_CLEAR(number);
    PyErr_Clear();
    return number;
}

int cap_int_list(cap_trace *T, PyObject *v, ptc_arg *out, const char *what)
{
    PyObject *number = numpy_int(v);
    if (number) {
        int rc = cap_int_list(T, number, out, what);
        Py_DECREF(number);
        return rc;
    }
    if (PyLong_Check(v) || cap_is_symint(v)) {
        ptc_dim d;
        int rc = to_dim(T, v, &d, what);
        *out = ptc_arg_dims(T->arena, &d, 1);
        return rc;
    }
    if (!PyList_Check(v) && !PyTuple_Check(v))
        return cap_is_tensor(v) ? cap_t_break(T, CAP_B_TENSOR_DATA, "%s: a tensor used as sizes", what)
                                : bad_arg(T, what, v, "a list of ints");
    Py_ssize_t n = PySequence_Size(v);
    ptc_dim vals[PTC_MAX_DIMS * 4];
    if (n > (Py_ssize_t)(sizeof vals / sizeof *vals))
        return bad_arg(T, what, v, "a short list of ints");
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_GetItem(v, i);
        int rc = x ? to_dim(T, x, &vals[i], what) : CAP_ERR;
        Py_XDECREF(x);
        if (rc != CAP_NEXT)
            return rc;
    }
    *out = ptc_arg_dims(T->arena, vals, (int)n);
    return CAP_NEXT;
}

int cap_int_varargs(cap_trace *T, PyObject *const *pos, int n, ptc_arg *out, const char *what)
{
    if (n == 1 && (PyList_Check(pos[0]) || PyTuple_Check(pos[0])))
        return cap_int_list(T, pos[0], out, what);
    PyObject *t = cap_tuple_from_array(pos, n);
    if (!t)
        return CAP_ERR;
    int rc = cap_int_list(T, t, out, what);
    Py_DECREF(t);
    return rc;
}

static int scalar(cap_trace *T, PyObject *v, ptc_arg *out, const char *what)
{
    if (cap_is_numpy_scalar(v)) {
        PyObject *number = cap_numpy_scalar_number(v);
        int rc = number ? scalar(T, number, out, what) : CAP_ERR;
        Py_XDECREF(number);
        return rc;
    }
    if (PyBool_Check(v))
        *out = ptc_arg_bool(v == Py_True);
    else if (PyLong_Check(v))
        *out = ptc_arg_int(PyLong_AsLongLong(v));
    else if (PyFloat_Check(v))
        *out = ptc_arg_float(PyFloat_AsDouble(v));
    else if (cap_is_symint(v)) {
        /* A size used as a number in tensor arithmetic: its value. */
        int64_t i;
        if (cap_symint_specialise((cap_symint *)v, "a number in a tensor op", &i) < 0)
            return CAP_ERR;
        *out = ptc_arg_int(i);
    } else if (cap_is_tensor(v))
        return cap_t_break(T, CAP_B_TENSOR_ITEM, "%s: a tensor used as a Python number", what);
    else
        return bad_arg(T, what, v, "a number");
    return PyErr_Occurred() ? CAP_ERR : CAP_NEXT;
}

static int tensor_list(cap_trace *T, PyObject *v, bool opt, ptc_arg *out, const char *what)
{
    if (!PyList_Check(v) && !PyTuple_Check(v))
        return bad_arg(T, what, v, "a list of tensors");
    Py_ssize_t n = PySequence_Size(v);
    ptc_value **vals = PTC_NEWN(T->arena, ptc_value *, n ? n : 1);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_GetItem(v, i);
        if (x && cap_is_tensor(x))
            vals[i] = cap_val(x);
        else if (x && opt && x == Py_None)
            vals[i] = NULL;
        else {
            int rc = x ? bad_arg(T, what, x, "a tensor") : CAP_ERR;
            Py_XDECREF(x);
            return rc;
        }
        Py_DECREF(x);
    }
    out->kind = PTC_ARG_VALUES;
    out->vs.n = (int)n;
    out->vs.v = vals;
    return CAP_NEXT;
}

int cap_tconvert(cap_trace *T, PyObject *v, int kind, int list_len, ptc_arg *out, const char *what)
{
    bool opt = kind == PTC_PK_TENSOR_OPT || kind == PTC_PK_TENSOR_SCALAR_OPT ||
               kind == PTC_PK_SCALAR_OPT || kind == PTC_PK_INT_OPT || kind == PTC_PK_INT_LIST_OPT ||
               kind == PTC_PK_FLOAT_OPT || kind == PTC_PK_STR_OPT || kind == PTC_PK_DTYPE_OPT ||
               kind == PTC_PK_DEVICE_OPT;
    if (v == Py_None && opt) {
        *out = ptc_arg_none();
        return CAP_NEXT;
    }
    int64_t i;
    int rc;
    switch (kind) {
    case PTC_PK_TENSOR:
    case PTC_PK_TENSOR_OPT:
        if (!cap_is_tensor(v)) {
            if (PyObject_TypeCheck(v, (PyTypeObject *)cap_T.Tensor))
                return cap_t_real_tensor(T, v, what);
            return bad_arg(T, what, v, "a tensor");
        }
        *out = ptc_arg_value(cap_val(v));
        return CAP_NEXT;
    case PTC_PK_TENSOR_LIST:
    case PTC_PK_TENSOR_OPT_LIST:
        return tensor_list(T, v, kind == PTC_PK_TENSOR_OPT_LIST, out, what);
    case PTC_PK_TENSOR_SCALAR:
    case PTC_PK_TENSOR_SCALAR_OPT:
        if (cap_is_tensor(v)) {
            *out = ptc_arg_value(cap_val(v));
            return CAP_NEXT;
        }
        return scalar(T, v, out, what);
    case PTC_PK_SCALAR:
    case PTC_PK_SCALAR_OPT:
        return scalar(T, v, out, what);
    case PTC_PK_INT:
    case PTC_PK_INT_OPT:
        if ((rc = to_int(T, v, &i, what)) != CAP_NEXT)
            return rc;
        *out = ptc_arg_int(i);
        return CAP_NEXT;
    case PTC_PK_INT_LIST:
    case PTC_PK_INT_LIST_OPT:
        if ((rc = cap_int_list(T, v, out, what)) != CAP_NEXT)
            return rc;
        if (list_len > 0 && out->is.n == 1 && (PyLong_Check(v) || cap_is_numpy_scalar(v))) {
            int64_t vals[8];
            for (int k = 0; k < list_len && k < 8; k++)
                vals[k] = out->is.d[0].value;
            *out = ptc_arg_ints(T->arena, vals, list_len);
        }
        return CAP_NEXT;
    case PTC_PK_FLOAT:
    case PTC_PK_FLOAT_OPT:
        if (cap_is_tensor(v))
            return cap_t_break(T, CAP_B_TENSOR_ITEM, "%s: a tensor used as a float", what);
        if (!PyFloat_Check(v) && !PyLong_Check(v) && !cap_is_numpy_scalar(v))
            return bad_arg(T, what, v, "a float");
        *out = ptc_arg_float(PyFloat_AsDouble(v));
        return CAP_NEXT;
    case PTC_PK_BOOL:
        if (cap_is_tensor(v))
            return cap_t_break(T, CAP_B_TENSOR_BOOL, "%s: a tensor used as a bool", what);
        if (!PyBool_Check(v) && !PyLong_Check(v))
            return bad_arg(T, what, v, "a bool");
        *out = ptc_arg_bool(PyObject_IsTrue(v) == 1);
        return CAP_NEXT;
    case PTC_PK_STR:
    case PTC_PK_STR_OPT:
        if (!PyUnicode_Check(v))
            return bad_arg(T, what, v, "a str");
        *out = ptc_arg_str(T->arena, PyUnicode_AsUTF8(v));
        return CAP_NEXT;
    case PTC_PK_DTYPE:
    case PTC_PK_DTYPE_OPT: {
        int dt = cap_dtype_from_obj(v);
        if (dt < 0)
            return bad_arg(T, what, v, "a supported torch.dtype");
        *out = ptc_arg_dtype((ptc_dtype)dt);
        return CAP_NEXT;
    }
    case PTC_PK_DEVICE:
    case PTC_PK_DEVICE_OPT: {
        ptc_device d;
        if (cap_device_from_obj(v, &d) < 0)
            return bad_arg(T, what, v, "a device");
        *out = ptc_arg_device(d);
        return CAP_NEXT;
    }
    }
    return bad_arg(T, what, v, "a supported value");
}

ptc_dtype cap_wrapped_dtype(ptc_arg scalar, const ptc_arg *other)
{
    const ptc_arg *pair[2] = {other, &scalar};
    return ptc_result_type(pair, 2);
}

ptc_value *cap_wrapped_scalar(cap_trace *T, ptc_arg scalar, const ptc_arg *other)
{
    ptc_dtype dt = cap_wrapped_dtype(scalar, other);
    ptc_device dev = other->kind == PTC_ARG_VALUE ? other->v->type.device : PTC_CPU;
    ptc_arg a[4] = {ptc_arg_ints(T->arena, NULL, 0), scalar, ptc_arg_dtype(dt),
                    ptc_arg_device(dev)};
    return cap_build1(T, PTC_OP_FULL, a, 4);
}

/* ---- the generic binder ------------------------------------------------------------------ */

/* torch.add(2, x) and the other functions of (input, other) that torch's
 * argument parser lets take a Python number as `input`, wrapped as it wraps
 * one (eq, maximum, atan2 and the Tensor methods raise TypeError instead). */
static bool number_as_input(const cap_tcall *c, int op, const cap_tparam *p, PyObject *v)
{
    if ((c->m->flags & TM_METHOD) || p->schema != 0 ||
        !(PyLong_Check(v) || PyFloat_Check(v) || cap_is_symint(v)))
        return false;
    switch (op) {
    case PTC_OP_SUB: /* of a bool: eager's error, from the call run for real */
        return !PyBool_Check(v);
    case PTC_OP_ADD: case PTC_OP_MUL: case PTC_OP_DIV: case PTC_OP_REMAINDER:
    case PTC_OP_BITWISE_AND: case PTC_OP_BITWISE_OR: case PTC_OP_BITWISE_XOR:
        return true;
    default:
        return false;
    }
}

int cap_tbind(cap_tcall *c, int op, ptc_arg *args)
{
    cap_trace *T = c->T;
    const cap_tmap *m = c->m;
    const ptc_schema *s = ptc_op_schema((ptc_op)op);
    bool given[16] = {0}, wrapped_input = false;
    ptc_args_defaults((ptc_op)op, args);
    if (c->npos > m->np)
        return cap_t_break(T, CAP_B_TRACE_ERROR, "%s: too many positional arguments", m->name);
    for (int i = 0; i < c->npos + c->nkw; i++) {
        const cap_tparam *p = NULL;
        PyObject *v;
        if (i < c->npos) {
            p = &m->p[i];
            if (p->kwonly)
                return cap_t_break(T, CAP_B_TRACE_ERROR, "%s: too many positional arguments", m->name);
            v = c->pos[i];
        } else {
            PyObject *kw = PyTuple_GetItem(c->kwnames, i - c->npos);
            v = c->kwv[i - c->npos];
            for (int k = 0; k < m->np && !p; k++)
                if (PyUnicode_CompareWithASCIIString(kw, m->p[k].pyname) == 0)
                    p = &m->p[k];
            if (!p)
                return cap_t_break(T, CAP_B_TRACE_ERROR, "%s: unexpected keyword '%s'", m->name,
                                   PyUnicode_AsUTF8(kw));
        }
        if (p->kind == TP_IGNORE || p->kind == TP_INPLACE)
            continue;
        if (p->kind == TP_MUSTNONE) {
            if (v != Py_None && v != Py_False)
                return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s with %s=", m->name, p->pyname);
            continue;
        }
        if (given[p->schema])
            return cap_t_break(T, CAP_B_TRACE_ERROR, "%s: multiple values for '%s'", m->name, p->pyname);
        given[p->schema] = true;
        const ptc_param *sp = &s->params[p->schema];
        char what[96];
        snprintf(what, sizeof what, "%s(%s)", m->name, p->pyname);
        bool wrap = sp->kind == PTC_PK_TENSOR && number_as_input(c, op, p, v);
        wrapped_input |= wrap;
        int rc = cap_tconvert(T, v, wrap ? PTC_PK_SCALAR : sp->kind, sp->list_len,
                              &args[p->schema], what);
        if (rc != CAP_NEXT)
            return rc;
    }
    for (int i = 0; i < s->nparams; i++)
        if (!given[i] && !s->params[i].has_default)
            return cap_t_break(T, CAP_B_TRACE_ERROR, "%s: missing argument '%s'", m->name,
                               s->params[i].name);
    if (wrapped_input) { /* its dtype follows `other` (schema 1), converted by now */
        ptc_value *w = cap_wrapped_scalar(T, args[0], &args[1]);
        if (!w)
            return CAP_BREAK;
        args[0] = ptc_arg_value(w);
    }
    return CAP_NEXT;
}
