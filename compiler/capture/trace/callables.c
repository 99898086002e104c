/* What the trace knows of a callable before calling it: whether to inline it
 * at all (inlining decisions), and the small tables of callables with fixed
 * answers: functions marked never to be traced (ptc.disable,
 * torch.compiler.disable), functools.partial, C functions known to be pure,
 * and torch functions that report state.
 */
#include "capture/trace/trace.h"

#include <string.h>

/* ---- inlining decisions ------------------------------------------------------------------ */

PyObject *cap_t_call_site(const cap_frame *f)
{
    return Py_BuildValue("(ni)", (Py_ssize_t)(uintptr_t)f->code->code, f->pc);
}

bool cap_t_no_inline(cap_trace *T, cap_frame *f)
{
    if (PySet_Size(T->no_inline) == 0)
        return false;
    PyObject *key = cap_t_call_site(f);
    int r = key ? PySet_Contains(T->no_inline, key) : 0;
    Py_XDECREF(key);
    PyErr_Clear();
    return r == 1;
}

/* An outside function keeps its identity when its __code__, __defaults__ or
 * __kwdefaults__ is replaced (helper.__code__ = other.__code__), so its
 * identity guard alone would keep running what the trace inlined. Code by
 * identity; defaults by value where they are constants (a nested function's
 * are made anew by each call of its maker), else by identity. */
int cap_t_enter_frame(cap_trace *T, cap_frame *f)
{
    int fsrc = f->func ? cap_t_source_of(T, f->func) : -1;
    if (fsrc < 0)
        return 0; /* made in the trace: its code is a constant of the trace */
    PyObject *attrs[3] = {cap_P.s_code, cap_P.s_defaults, cap_P.s_kwdefaults};
    for (int i = 0; i < 3; i++) {
        PyObject *v = PyObject_GetAttr(f->func, attrs[i]);
        int s = v ? cap_source_add(T, CAP_S_ATTR, fsrc, 0, 0, attrs[i]) : -1;
        int kind =
            i > 0 && v && v != Py_None && cap_constant_defaults(v, i == 2) ? CAP_G_EQ : CAP_G_ID;
        int rc = s >= 0 ? cap_guard_add(T, kind, s, v, 0) : -1;
        if (rc == 0 && i > 0 && kind == CAP_G_ID && v != Py_None)
            rc = cap_t_wrap_defaults(T, f, v, s);
        Py_XDECREF(v);
        if (rc < 0)
            return -1;
    }
    return 0;
}

void cap_t_note_skipped(cap_trace *T, PyObject *obj)
{
    PyObject *code = PyObject_GetAttrString(obj, "gi_code");
    PyObject *name = code ? PyObject_GetAttrString(code, "co_qualname") : NULL;
    if (name)
        PyList_Append(T->skipped, name);
    Py_XDECREF(name);
    Py_XDECREF(code);
    PyErr_Clear();
}

/* ---- torch.manual_seed ------------------------------------------------------------------ */

/* Functions (by their outermost code) that seed torch's generator. ptc's
 * random ops draw from its own counter-based generator, whose values are not
 * torch's; after torch.manual_seed eager's values are reproducible, so in
 * such a function random ops run in torch from then on (cap_torch_call). */
static PyObject *seeding; /* dict: id(code) -> code */

static PyObject *root_code_key(cap_trace *T)
{
    return T->I && T->I->base ? PyLong_FromVoidPtr(T->I->base->code->code) : NULL;
}

static int note_seeding(cap_trace *T)
{
    PyObject *key = root_code_key(T);
    if (!key)
        return PyErr_Occurred() ? -1 : 0;
    if (!seeding && !(seeding = PyDict_New())) {
        Py_DECREF(key);
        return -1;
    }
    int rc = PyDict_SetItem(seeding, key, T->I->base->code->code);
    Py_DECREF(key);
    return rc;
}

bool cap_t_seeds_torch(cap_trace *T)
{
    if (!seeding || PyDict_Size(seeding) == 0)
        return false;
    PyObject *key = root_code_key(T);
    bool hit = key && PyDict_GetItem(seeding, key);
    Py_XDECREF(key);
    PyErr_Clear();
    return hit;
}

/* torch.manual_seed and the other calls that set torch's generator. */
static const char *seeding_call(PyObject *callable)
{
    static const char *paths[] = {
        "torch.manual_seed",           "torch.random.manual_seed",   "torch.seed",
        "torch.random.seed",           "torch.set_rng_state",        "torch.random.set_rng_state",
        "torch.cuda.manual_seed",      "torch.cuda.manual_seed_all", "torch.cuda.set_rng_state",
        "torch.cuda.set_rng_state_all"};
    enum { N = sizeof paths / sizeof *paths };
    static PyObject *fns[N];
    static bool init;
    if (!init) {
        init = true;
        for (int i = 0; i < N; i++) {
            fns[i] = cap_import_path(paths[i]);
            PyErr_Clear();
        }
    }
    for (int i = 0; i < N; i++)
        if (fns[i] && callable == fns[i])
            return paths[i];
    return NULL;
}

/* ---- fixed answers ------------------------------------------------------------------------ */

static PyObject *disabled; /* set of id(code) */

int cap_disable(PyObject *fn)
{
    if (!disabled && !(disabled = PySet_New(NULL)))
        return -1;
    PyObject *code = PyObject_GetAttr(fn, cap_P.s_code);
    if (!code) {
        PyErr_SetString(PyExc_TypeError, "ptc.disable needs a Python function");
        return -1;
    }
    PyObject *key = PyLong_FromVoidPtr(code);
    int rc = key ? PySet_Add(disabled, key) : -1;
    Py_XDECREF(key);
    /* The set holds ids: keep the code objects alive with it. */
    static PyObject *keep;
    if (!keep)
        keep = PyList_New(0);
    if (keep)
        PyList_Append(keep, code);
    Py_DECREF(code);
    return rc;
}

/* torch.compiler.disable and torch._dynamo.disable (decorator or call, and
 * recursive=False) return a wrapper that carries _torchdynamo_disable; like
 * torch.compile, ptc calls it as it is, eagerly, instead of tracing the
 * wrapper's own eval-frame switching. */
static bool torch_disabled(PyObject *fn)
{
    static PyObject *name;
    if (!name && !(name = PyUnicode_InternFromString("_torchdynamo_disable")))
        return PyErr_Clear(), false;
    PyObject *v = PyObject_GetAttr(fn, name);
    bool on = v && PyObject_IsTrue(v) == 1;
    Py_XDECREF(v);
    PyErr_Clear();
    return on;
}

const char *cap_disabled_by(PyObject *fn)
{
    if (torch_disabled(fn))
        return "torch.compiler.disable";
    if (!disabled || PySet_Size(disabled) == 0)
        return NULL;
    PyObject *code = PyObject_GetAttr(fn, cap_P.s_code);
    PyObject *key = code ? PyLong_FromVoidPtr(code) : NULL;
    int r = key ? PySet_Contains(disabled, key) : 0;
    Py_XDECREF(code);
    Py_XDECREF(key);
    PyErr_Clear();
    return r == 1 ? "ptc.disable" : NULL;
}

const char *cap_func_name(PyObject *fn)
{
    PyObject *q = PyObject_GetAttr(fn, cap_P.s_qualname);
    const char *s = q && PyUnicode_Check(q) ? PyUnicode_AsUTF8(q) : "function";
    Py_XDECREF(q); /* still owned by the function */
    PyErr_Clear();
    return s;
}

/* functools.partial */
static PyObject *partial_type;

bool cap_is_partial(PyObject *o)
{
    if (!partial_type)
        partial_type = cap_import_path("functools.partial");
    return partial_type && PyObject_TypeCheck(o, (PyTypeObject *)partial_type);
}

bool cap_is_exact_partial(PyObject *o)
{
    return cap_is_partial(o) && (PyObject *)Py_TYPE(o) == partial_type;
}

int cap_partial_unpack(PyObject *p, PyObject **fn, PyObject **args, PyObject **kw)
{
    *fn = PyObject_GetAttrString(p, "func");
    *args = PyObject_GetAttrString(p, "args");
    *kw = PyObject_GetAttrString(p, "keywords");
    if (*fn && *args && *kw)
        return 0;
    Py_CLEAR(*fn);
    Py_CLEAR(*args);
    Py_CLEAR(*kw);
    return -1;
}

int cap_t_call_partial(cap_interp *I, PyObject *fn, PyObject *pargs, PyObject *pkw,
                       PyObject *const *args, int nargs, PyObject *kwnames, PyObject **out)
{
    /* fn(*pargs, *args, **pkw, **kwargs): later keywords override. */
    PyObject *t = PyList_New(0), *d = PyDict_Copy(pkw);
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0, rc = CAP_ERR;
    if (!t || !d)
        goto done;
    for (Py_ssize_t i = 0; i < PyTuple_Size(pargs); i++)
        PyList_Append(t, PyTuple_GetItem(pargs, i));
    for (int i = 0; i < nargs - nkw; i++)
        PyList_Append(t, args[i]);
    for (int i = 0; i < nkw; i++)
        PyDict_SetItem(d, PyTuple_GetItem(kwnames, i), args[nargs - nkw + i]);
    PyObject *tt = PyList_AsTuple(t);
    if (tt) {
        rc = cap_op_call_ex(I, fn, tt, d, out);
        Py_DECREF(tt);
    }
done:
    Py_XDECREF(t);
    Py_XDECREF(d);
    return rc;
}

/* C functions safe to call at trace time with constant arguments. */
static const char *pure_modules[] = {"math", "operator", "_operator", "cmath", "_functools",
                                     "itertools", "string", "_string", "copy", "_collections",
                                     "unicodedata", "_bisect", "_heapq", NULL};
static const char *pure_torch[] = {
    "torch.finfo", "torch.iinfo", "torch.get_default_dtype", "torch.promote_types",
    "torch.result_type", "torch.can_cast", "torch._C._get_cudnn_enabled", "torch.is_storage",
    "torch._C._get_tracing_state", "torch.cuda.is_available", "torch.cuda.device_count",
    "torch.cuda.current_device", "torch.backends.cuda.is_built", "torch._C._get_backcompat_broadcast_warn",
    "torch.is_inference_mode_enabled", "torch._C._log_api_usage_once", "torch._C._is_tracing",
    "torch._C._get_cpu_capability", "torch.backends.cudnn.is_available", "torch.cuda.is_initialized",
    "torch._C._jit_is_script_object", "torch.is_autocast_cache_enabled", "torch._C._get_mkldnn_enabled", "sys.getrecursionlimit",
    "sys.getdefaultencoding", "sys.intern",
    /* False while tracing: a call or segment starting under a user's mode runs eagerly */
    "torch._C._is_torch_function_mode_enabled",
    /* class methods of builtin types: bound afresh on each read, found by equality */
    "builtins.dict.fromkeys", "itertools.chain.from_iterable", NULL,
};

/* The functions of those modules that write their first argument: run at
 * trace time they would write the trace's copy of a container from outside,
 * not the container (cap_pure_fn_writes). */
static const char *writes_first_arg[] = {
    "heappush", "heappop", "heapify", "heapreplace", "heappushpop", "_heappop_max",
    "_heapify_max", "_heapreplace_max", "insort", "insort_left", "insort_right", "setitem",
    "delitem", "iadd", "iand", "iconcat", "ifloordiv", "ilshift", "imod", "imul", "imatmul",
    "ior", "ipow", "irshift", "isub", "itruediv", "ixor", "_count_elements", NULL,
};

bool cap_pure_fn_writes(PyObject *fn)
{
    PyObject *name = PyCFunction_Check(fn) ? PyObject_GetAttr(fn, cap_P.s_name) : NULL;
    const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    bool writes = cap_name_index(n, writes_first_arg) >= 0;
    Py_XDECREF(name);
    PyErr_Clear();
    return writes;
}

bool cap_is_pure_fn(PyObject *fn)
{
    if (!cap_T.pure_fns) {
        cap_T.pure_fns = PyDict_New();
        for (int i = 0; pure_torch[i]; i++) {
            PyObject *o = cap_import_path(pure_torch[i]);
            if (o)
                PyDict_SetItem(cap_T.pure_fns, o, Py_True);
            Py_XDECREF(o);
        }
    }
    PyObject *hit = PyDict_GetItemWithError(cap_T.pure_fns, fn);
    if (hit || PyErr_Occurred()) {
        PyErr_Clear();
        return hit != NULL;
    }
    PyObject *self = PyCFunction_Check(fn) ? PyCFunction_GetSelf(fn) : NULL;
    PyObject *mod = self && PyModule_Check(self) ? PyModule_GetNameObject(self) : NULL;
    if (!mod) {
        PyErr_Clear();
        mod = PyObject_GetAttr(fn, cap_P.s_module);
    }
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    bool pure = cap_name_index(m, pure_modules) >= 0;
    Py_XDECREF(mod);
    PyErr_Clear();
    return pure;
}

/* A module attribute, only if the module is already imported. */
static PyObject *loaded_attr(const char *mod, const char *attr)
{
    PyObject *m = PyDict_GetItemString(PyImport_GetModuleDict(), mod);
    PyObject *a = m ? PyObject_GetAttrString(m, attr) : NULL;
    PyErr_Clear();
    return a;
}

/* torch.compiler.is_compiling() and its aliases say True while ptc traces,
 * as they do under torch.compile: library code takes its compile-friendly
 * path (both paths compute the same thing by contract). */
static bool is_compiling_fn(PyObject *callable)
{
    static PyObject *fns[4];
    static const char *where[4][2] = {{"torch.compiler", "is_compiling"},
                                      {"torch._dynamo", "is_compiling"},
                                      {"torch._dynamo.external_utils", "is_compiling"},
                                      {"torch._utils", "is_compiling"}};
    for (int i = 0; i < 4; i++) {
        if (!fns[i])
            fns[i] = loaded_attr(where[i][0], where[i][1]);
        if (fns[i] && callable == fns[i])
            return true;
    }
    return false;
}

/* torch._C._has_torch_function(args) and its unary and variadic forms
 * (listed: the first takes a sequence). Symbolic tensors are plain tensors,
 * without __torch_function__; the other arguments are asked for real, one
 * by one. */
static int has_torch_function(cap_trace *T, PyObject *has_tf, bool listed, PyObject *const *args,
                              int nargs, PyObject **out)
{
    for (int k = 0; k < nargs; k++) {
        PyObject *items = listed && (PyTuple_Check(args[k]) || PyList_Check(args[k]))
                              ? PySequence_Tuple(args[k])
                              : PyTuple_Pack(1, args[k]);
        for (Py_ssize_t j = 0; items && j < PyTuple_Size(items); j++) {
            PyObject *o = PyTuple_GetItem(items, j);
            if (cap_is_tensor(o) || o == Py_None || cap_is_constant(o))
                continue;
            PyObject *one = PyTuple_Pack(1, o);
            PyObject *r = one ? PyObject_CallOneArg_compat(has_tf, one) : NULL;
            bool t = r == Py_True;
            Py_XDECREF(r);
            Py_XDECREF(one);
            PyErr_Clear();
            if (t) {
                Py_DECREF(items);
                return cap_t_break(T, CAP_B_TENSOR_SUBCLASS, "an argument with __torch_function__");
            }
        }
        Py_XDECREF(items);
    }
    *out = Py_NewRef(Py_False);
    return CAP_NEXT;
}

/* An unmapped C function of torch runs for real between graphs (a break);
 * CAP_NONE for other callables. */
static int unmapped_torch_c(cap_trace *T, PyObject *callable)
{
    if (!PyCFunction_Check(callable) && !PyObject_TypeCheck(callable, &PyMethodDescr_Type))
        return CAP_NONE;
    PyObject *mod = PyObject_GetAttr(callable, cap_P.s_module);
    PyErr_Clear();
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    bool pure = cap_is_pure_fn(callable);
    bool torchy = m && strncmp(m, "torch", 5) == 0 && !pure;
    if (!torchy && !pure && PyCFunction_Check(callable)) {
        PyObject *self = PyCFunction_GetSelf(callable);
        torchy = self && PyModule_Check(self) &&
                 strncmp(PyModule_GetName(self) ? PyModule_GetName(self) : "", "torch", 5) == 0;
        PyErr_Clear();
    }
    if (torchy) {
        PyObject *name = PyObject_GetAttr(callable, cap_P.s_name);
        PyErr_Clear();
        int rc = cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "%s.%s", m ? m : "torch",
                             name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : "?");
        Py_XDECREF(name);
        Py_XDECREF(mod);
        return rc;
    }
    Py_XDECREF(mod);
    return CAP_NONE;
}

/* torch callables that are not ops but report or set state. */
int cap_torch_special_call(cap_interp *I, PyObject *callable, PyObject *const *args, int nargs,
                           PyObject *kwnames, PyObject **out)
{
    cap_trace *T = I->T;
    static PyObject *has_tf[3], *mha_fast, *get_tracing;
    static bool init;
    if (!init) {
        init = true;
        has_tf[0] = cap_import_path("torch._C._has_torch_function");
        has_tf[1] = cap_import_path("torch._C._has_torch_function_unary");
        has_tf[2] = cap_import_path("torch._C._has_torch_function_variadic");
        mha_fast = cap_import_path("torch.backends.mha.get_fastpath_enabled");
        get_tracing = cap_import_path("torch._C._get_tracing_state");
    }
    if (callable == cap_T.is_grad_enabled) {
        *out = Py_NewRef(T->grad_enabled ? Py_True : Py_False);
        return CAP_NEXT;
    }
    if (is_compiling_fn(callable)) {
        *out = Py_NewRef(Py_True);
        return CAP_NEXT;
    }
    const char *seed = seeding_call(callable);
    if (seed) {
        if (note_seeding(T) < 0)
            return CAP_ERR;
        return cap_t_break(T, CAP_B_UNSUPPORTED_CALL,
                           "%s (runs for real; the function's random ops then run in torch)", seed);
    }
    for (int i = 0; i < 3; i++)
        if (callable == has_tf[i] && has_tf[i])
            return has_torch_function(T, has_tf[0], i == 0, args, nargs, out);
    int amp = cap_amp_query(T, callable, args, nargs, out);
    if (amp)
        return amp > 0 ? CAP_NEXT : CAP_ERR;
    if ((callable == mha_fast && mha_fast) || (callable == get_tracing && get_tracing)) {
        /* The attention fast path is a fused op ptc decomposes the long
           way; no TorchScript tracer. */
        *out = Py_NewRef(callable == get_tracing ? Py_None : Py_False);
        return CAP_NEXT;
    }
    if (callable == cap_T.set_grad_enabled && nargs == 1 && !kwnames) {
        int on = PyObject_IsTrue(args[0]);
        if (on < 0)
            return CAP_ERR;
        *out = cap_gradexit_new(CAP_EXIT_GRAD, T->grad_enabled);
        T->grad_enabled = on;
        return *out ? CAP_NEXT : CAP_ERR;
    }
    return unmapped_torch_c(T, callable);
}
