/* Start-up of the capture front end: the Python objects the interpreter
 * compares against (function and cell types, interned attribute names, the
 * builtins that read the current frame), opcode numbers from `dis`, the
 * symbolic-tensor types and the torch tables; plus the test entry that runs a
 * function through the interpreter without tracing.
 */
#include "capture/interp/interp.h"
#include "capture/torch/torch.h"
#include "capture/trace/trace.h"

#include <stdlib.h>
#include <string.h>

static int intern(PyObject **slot, const char *s)
{
    *slot = PyUnicode_InternFromString(s);
    return *slot ? 0 : -1;
}

static int builtin(PyObject **slot, const char *name)
{
    *slot = PyDict_GetItemString(cap_P.builtins, name);
    if (!*slot) {
        PyErr_Format(PyExc_ImportError, "ptc: builtins.%s not found", name);
        return -1;
    }
    Py_INCREF(*slot);
    return 0;
}

static int init_types(void)
{
    PyObject *types = PyImport_ImportModule("types");
    if (!types)
        return -1;
    cap_P.FunctionType = PyObject_GetAttrString(types, "FunctionType");
    cap_P.MethodType = PyObject_GetAttrString(types, "MethodType");
    cap_P.CellType = PyObject_GetAttrString(types, "CellType");
    cap_P.CodeType = PyObject_GetAttrString(types, "CodeType");
    cap_P.GeneratorType = PyObject_GetAttrString(types, "GeneratorType");
    Py_DECREF(types);
    PyObject *coll = PyImport_ImportModule("collections");
    cap_P.OrderedDict = coll ? PyObject_GetAttrString(coll, "OrderedDict") : NULL;
    cap_P.defaultdict = coll ? PyObject_GetAttrString(coll, "defaultdict") : NULL;
    Py_XDECREF(coll);
    return cap_P.FunctionType && cap_P.MethodType && cap_P.CellType && cap_P.CodeType &&
                   cap_P.GeneratorType && cap_P.OrderedDict && cap_P.defaultdict
               ? 0
               : -1;
}

static int init_strings(void)
{
    struct {
        PyObject **slot;
        const char *s;
    } names[] = {
        {&cap_P.s_enter, "__enter__"}, {&cap_P.s_exit, "__exit__"},
        {&cap_P.s_dict, "__dict__"}, {&cap_P.s_closure, "__closure__"},
        {&cap_P.s_code, "__code__"}, {&cap_P.s_globals, "__globals__"},
        {&cap_P.s_builtins, "__builtins__"}, {&cap_P.s_defaults, "__defaults__"},
        {&cap_P.s_kwdefaults, "__kwdefaults__"}, {&cap_P.s_func, "__func__"},
        {&cap_P.s_self, "__self__"}, {&cap_P.s_cell_contents, "cell_contents"},
        {&cap_P.s_qualname, "__qualname__"}, {&cap_P.s_name, "__name__"},
        {&cap_P.s_annotations, "__annotations__"}, {&cap_P.s_class, "__class__"},
        {&cap_P.s_mro, "__mro__"}, {&cap_P.s_init, "__init__"}, {&cap_P.s_new, "__new__"},
        {&cap_P.s_call, "__call__"}, {&cap_P.s_getattr, "__getattr__"},
        {&cap_P.s_match_args, "__match_args__"}, {&cap_P.s_keys, "keys"},
        {&cap_P.s_get, "get"}, {&cap_P.s_module, "__module__"},
        {&cap_P.s_getattribute, "__getattribute__"}, {&cap_P.s_getitem, "__getitem__"},
        {&cap_P.s_len, "__len__"},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (intern(names[i].slot, names[i].s) < 0)
            return -1;
    cap_P.object_getattribute = cap_type_lookup(&PyBaseObject_Type, cap_P.s_getattribute);
    Py_XINCREF(cap_P.object_getattribute);
    cap_P.empty_tuple = PyTuple_New(0);
    cap_P.empty_str = PyUnicode_FromString("");
    return cap_P.empty_tuple && cap_P.empty_str ? 0 : -1;
}

static int init_builtins(void)
{
    PyObject *b = PyImport_ImportModule("builtins");
    if (!b)
        return -1;
    cap_P.builtins = PyModule_GetDict(b);
    Py_INCREF(cap_P.builtins);
    cap_P.StaticMethodType = PyObject_GetAttrString(b, "staticmethod");
    PyObject *probe = PyObject_GetAttrString(b, "len");
    PyObject *mw = probe ? PyObject_GetAttrString(probe, "__str__") : NULL;
    cap_P.MethodWrapperType = mw ? Py_NewRef((PyObject *)Py_TYPE(mw)) : NULL;
    Py_XDECREF(mw);
    Py_XDECREF(probe);
    Py_DECREF(b);
    return builtin(&cap_P.b_super, "super") || builtin(&cap_P.b_build_class, "__build_class__") ||
                   builtin(&cap_P.b_globals, "globals") || builtin(&cap_P.b_locals, "locals") ||
                   builtin(&cap_P.b_vars, "vars") || builtin(&cap_P.b_dir, "dir") ||
                   builtin(&cap_P.b_eval, "eval") || builtin(&cap_P.b_exec, "exec") ||
                   builtin(&cap_P.b_len, "len") || builtin(&cap_P.b_isinstance, "isinstance")
               ? -1
               : 0;
}

static void init_config_from_env(void)
{
    const char *s = getenv("PTC_STRICT");
    cap_cfg.strict = s && *s && strcmp(s, "0") != 0;
    s = getenv("PTC_COMPILED_AUTOGRAD"); /* on unless set to 0 */
    cap_cfg.compiled_autograd = !(s && strcmp(s, "0") == 0);
    s = getenv("PTC_REPRO");
    if (s)
        snprintf(cap_cfg.repro_dir, sizeof cap_cfg.repro_dir, "%s", s);
}

int cap_init(PyObject *module)
{
    if (init_types() < 0 || init_strings() < 0 || init_builtins() < 0 || cap_opcodes_init() < 0)
        return -1;
    init_config_from_env();
    if (cap_types_init(module) < 0)
        return -1;
    cap_trace_hooks_install();
    cap_torch_hooks_install();
    return 0;
}

void cap_reset_all(void)
{
    cap_code_cache_clear();
}

/* ---- the interpreter test entry ------------------------------------------------ */

PyObject *cap_interpret(PyObject *fn, PyObject *args, PyObject *kwargs, bool inline_all)
{
    if (!cap_is_function(fn)) {
        PyErr_SetString(PyExc_TypeError, "ptc: _interpret needs a Python function");
        return NULL;
    }
    Py_ssize_t n = PyTuple_Size(args), nkw = kwargs ? PyDict_Size(kwargs) : 0;
    PyObject **buf = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n + nkw + 1));
    PyObject *kwnames = nkw ? PyTuple_New(nkw) : NULL;
    cap_spread_args(args, kwargs, buf, kwnames);
    const char *why;
    cap_frame *f = cap_frame_for_call(fn, buf, (int)(n + nkw), kwnames, &why);
    PyObject *result = NULL;
    if (!f) {
        if (why) /* let CPython run it (binding errors, generators) */
            result = cap_call_real(fn, buf, (int)(n + nkw), kwnames);
        goto done;
    }
    cap_interp I = {.mode = CAP_REAL, .inline_all = inline_all,
                    .max_depth = cap_cfg.inline_depth};
    cap_push_frame(&I, f);
    int rc = cap_run(&I);
    if (rc == CAP_DONE) {
        result = I.result;
        I.result = NULL;
    }
    cap_interp_clear(&I);
done:
    Py_XDECREF(kwnames);
    PyMem_Free(buf);
    return result;
}
