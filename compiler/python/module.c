/* ptc._C: the extension module behind the `ptc` package.
 *
 * It exposes the capture front end to Python: CompiledFunction (what
 * ptc.compile returns for a function, and what the module wrapper calls), the
 * global reset, ptc.disable, configuration, the break taxonomy, and the
 * interpreter's test entry. The Python side (python/ptc) builds the user API on
 * these: decorators, the nn.Module wrapper, explain, ptc.Graph.
 */
#include "capture/capture.h"
#include "logs/logs.h"
#include "tools/explain/explain.h"

#include <structmember.h>
#include <string.h>

/* Defined in compiler/capture (not part of capture.h's stable surface). */
int cap_graph_type_init(PyObject *module);
void cap_measure_set(bool on);
PyObject *cap_measured(void);
PyObject *cap_stats_dict(PyObject *capsule);
int cap_measure_scope_begin(void);
PyObject *cap_measure_scope_end(void);
PyObject *cap_compile_ptir(PyObject *text, const char *kernel_dir);
PyObject *cap_run_compiled(PyObject *capsule, PyObject *tensors, PyObject *rng);
PyObject *cap_compiled_draws(PyObject *capsule);
PyObject *cap_runtime_rng_draw(void);
PyObject *cap_autotune_counts(void);
PyObject *cap_cuda_index_counts(void);
PyObject *ptc_py_package_seal(PyObject *mod, PyObject *args); /* export.c */
PyObject *ptc_py_package_verify(PyObject *mod, PyObject *dir);
PyObject *ptc_py_package_kernels(PyObject *mod, PyObject *args);

typedef struct compiled_function {
    PyObject_HEAD
    cap_compiled *c;
    PyObject *target;
    PyObject *dict;
    PyObject *weakrefs;
} compiled_function;

static PyTypeObject *compiled_type;
static PyObject *registry; /* list of weakrefs to every CompiledFunction */

static void cf_dealloc(PyObject *self)
{
    compiled_function *f = (compiled_function *)self;
    if (f->weakrefs)
        PyObject_ClearWeakRefs(self);
    cap_compiled_free(f->c);
    Py_XDECREF(f->target);
    Py_XDECREF(f->dict);
    PyTypeObject *t = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(t, Py_tp_free))(self);
    Py_DECREF(t);
}

static PyObject *cf_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return cap_compiled_call(((compiled_function *)self)->c, args, kwargs);
}

/* A compiled function used as a method binds like a function. */
static PyObject *cf_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (!obj || obj == Py_None)
        return Py_NewRef(self);
    PyObject *types = PyImport_ImportModule("types");
    PyObject *mt = types ? PyObject_GetAttrString(types, "MethodType") : NULL;
    PyObject *r = mt ? PyObject_CallFunctionObjArgs(mt, self, obj, NULL) : NULL;
    Py_XDECREF(types);
    Py_XDECREF(mt);
    return r;
}

static PyObject *cf_reset(PyObject *self, PyObject *unused)
{
    cap_compiled_reset(((compiled_function *)self)->c);
    Py_RETURN_NONE;
}

static PyObject *cf_events(PyObject *self, PyObject *unused)
{
    return cap_compiled_report(((compiled_function *)self)->c);
}

static PyMethodDef cf_methods[] = {
    {"_reset", cf_reset, METH_NOARGS, "Drops this function's compiled entries."},
    {"_events", cf_events, METH_NOARGS, "Compiles, breaks, recompiles and fallbacks so far."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef cf_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(compiled_function, target), READONLY, "the original"},
    {"__dictoffset__", T_PYSSIZET, offsetof(compiled_function, dict), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(compiled_function, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot cf_slots[] = {
    {Py_tp_dealloc, cf_dealloc},
    {Py_tp_call, cf_call},
    {Py_tp_descr_get, cf_get},
    {Py_tp_methods, cf_methods},
    {Py_tp_members, cf_members},
    {Py_tp_doc, "A function compiled by ptc: calls check guards and run captured graphs."},
    {0, NULL},
};

static PyType_Spec cf_spec = {"ptc._C.CompiledFunction", sizeof(compiled_function), 0,
                              Py_TPFLAGS_DEFAULT, cf_slots};

static const char *backend_names[] = {
#define X(id, name) name,
    CAP_BACKENDS(X)
#undef X
};

/* _compile(target, backend, fullgraph, dynamic, mode, symint_results) */
static PyObject *m_compile(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"target", "backend",        "fullgraph", "dynamic",
                         "mode",   "symint_results", NULL};
    PyObject *target, *backend, *dynamic = Py_None;
    int fullgraph = 0, symint_results = 0;
    const char *mode = "default";
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|pOsp", kw, &target, &backend, &fullgraph,
                                     &dynamic, &mode, &symint_results))
        return NULL;
    cap_options o = {.fullgraph = fullgraph != 0,
                     .dynamic = dynamic == Py_None ? -1 : PyObject_IsTrue(dynamic),
                     .symint_results = symint_results != 0};
    snprintf(o.mode, sizeof o.mode, "%s", mode);
    if (PyUnicode_Check(backend)) {
        const char *name = PyUnicode_AsUTF8(backend);
        o.backend = CAP_BACKEND_COUNT;
        for (int i = 0; i < CAP_BACKEND_CALLABLE; i++)
            if (strcmp(name, backend_names[i]) == 0)
                o.backend = (cap_backend)i;
        if (o.backend == CAP_BACKEND_COUNT)
            return PyErr_Format(PyExc_ValueError,
                                "ptc.compile: unknown backend '%s' (expected 'eager', 'reference', "
                                "'ptc' or a callable)",
                                name);
    } else if (PyCallable_Check(backend)) {
        o.backend = CAP_BACKEND_CALLABLE;
        o.backend_fn = backend;
    } else {
        return PyErr_Format(PyExc_TypeError, "ptc.compile: backend must be a name or a callable");
    }
    compiled_function *f = PyObject_New(compiled_function, compiled_type);
    if (!f)
        return NULL;
    f->dict = PyDict_New();
    f->weakrefs = NULL;
    f->target = Py_NewRef(target);
    f->c = cap_compiled_new(target, &o);
    if (!f->c || !f->dict) {
        Py_DECREF(f);
        return NULL;
    }
    PyObject *w = PyWeakref_NewRef((PyObject *)f, NULL);
    if (w) {
        PyList_Append(registry, w);
        Py_DECREF(w);
    }
    return (PyObject *)f;
}

static PyObject *m_reset(PyObject *mod, PyObject *unused)
{
    for (Py_ssize_t i = 0; i < PyList_Size(registry); i++) {
        PyObject *f = PyWeakref_GetObject(PyList_GetItem(registry, i));
        if (f && f != Py_None)
            cap_compiled_reset(((compiled_function *)f)->c);
    }
    /* Drop dead weakrefs. */
    PyObject *live = PyList_New(0);
    for (Py_ssize_t i = 0; live && i < PyList_Size(registry); i++) {
        PyObject *w = PyList_GetItem(registry, i);
        PyObject *f = PyWeakref_GetObject(w);
        if (f && f != Py_None)
            PyList_Append(live, w);
    }
    if (live) {
        PyList_SetSlice(registry, 0, PyList_Size(registry), live);
        Py_DECREF(live);
    }
    cap_reset_all();
    Py_RETURN_NONE;
}

static PyObject *m_set_compile_observer(PyObject *mod, PyObject *fn)
{
    cap_set_compile_observer(fn);
    Py_RETURN_NONE;
}

static PyObject *m_disable(PyObject *mod, PyObject *fn)
{
    if (cap_disable(fn) < 0)
        return NULL;
    return Py_NewRef(fn);
}

static PyObject *m_interpret(PyObject *mod, PyObject *args)
{
    PyObject *fn, *fargs, *fkwargs = Py_None;
    int inline_all = 0;
    if (!PyArg_ParseTuple(args, "OO!|Op", &fn, &PyTuple_Type, &fargs, &fkwargs, &inline_all))
        return NULL;
    return cap_interpret(fn, fargs, fkwargs == Py_None ? NULL : fkwargs, inline_all != 0);
}

static PyObject *m_break_table(PyObject *mod, PyObject *unused)
{
    return cap_break_table();
}

static PyObject *m_get_config(PyObject *mod, PyObject *unused)
{
    static const char *inject[3] = {"", "compile", "backend"};
    return Py_BuildValue("{s:i,s:O,s:i,s:s,s:s,s:O,s:O,s:s}", "recompile_limit", cap_cfg.recompile_limit,
                         "strict", cap_cfg.strict ? Py_True : Py_False, "inline_depth",
                         cap_cfg.inline_depth, "repro_dir", cap_cfg.repro_dir, "inject_failure",
                         inject[cap_cfg.inject_failure], "trust_module_state",
                         cap_cfg.trust_module_state ? Py_True : Py_False, "compiled_autograd",
                         cap_cfg.compiled_autograd ? Py_True : Py_False, "stance",
                         cap_stance_names[cap_cfg.stance]);
}

static PyObject *m_set_config(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
        const char *k = PyUnicode_AsUTF8(key);
        if (strcmp(k, "recompile_limit") == 0) {
            long n = PyLong_AsLong(value);
            if (n < 0 || PyErr_Occurred())
                return PyErr_Format(PyExc_ValueError, "recompile_limit must be a non-negative int");
            cap_cfg.recompile_limit = (int)n;
        } else if (strcmp(k, "strict") == 0) {
            cap_cfg.strict = PyObject_IsTrue(value) == 1;
        } else if (strcmp(k, "compiled_autograd") == 0) {
            cap_cfg.compiled_autograd = PyObject_IsTrue(value) == 1;
        } else if (strcmp(k, "trust_module_state") == 0) {
            cap_cfg.trust_module_state = PyObject_IsTrue(value) == 1;
            cap_module_epoch++;
        } else if (strcmp(k, "inline_depth") == 0) {
            long n = PyLong_AsLong(value);
            if (n < 1 || n > 200 || PyErr_Occurred())
                return PyErr_Format(PyExc_ValueError, "inline_depth must be in 1..200");
            cap_cfg.inline_depth = (int)n;
        } else if (strcmp(k, "repro_dir") == 0) {
            const char *s = value == Py_None ? "" : PyUnicode_AsUTF8(value);
            if (!s)
                return NULL;
            snprintf(cap_cfg.repro_dir, sizeof cap_cfg.repro_dir, "%s", s);
        } else if (strcmp(k, "stance") == 0) {
            const char *s = PyUnicode_AsUTF8(value);
            if (!s)
                return NULL;
            if (cap_stance_of(s) < 0)
                return PyErr_Format(PyExc_ValueError,
                                    "unknown stance '%s' (expected default, force_eager, "
                                    "eager_on_recompile, fail_on_recompile or eager_then_compile)",
                                    s);
            cap_cfg.stance = cap_stance_of(s);
        } else if (strcmp(k, "inject_failure") == 0) {
            const char *s = value == Py_None ? "" : PyUnicode_AsUTF8(value);
            if (!s)
                return NULL;
            if (strcmp(s, "") && strcmp(s, "compile") && strcmp(s, "backend"))
                return PyErr_Format(PyExc_ValueError, "inject_failure must be '', 'compile' or 'backend'");
            cap_cfg.inject_failure = *s == 0 ? 0 : *s == 'c' ? 1 : 2;
        } else {
            return PyErr_Format(PyExc_AttributeError, "ptc.config has no setting '%s'", k);
        }
    }
    Py_RETURN_NONE;
}

static PyObject *m_module_state_changed(PyObject *mod, PyObject *unused)
{
    cap_module_epoch++;
    Py_RETURN_NONE;
}

static PyObject *m_set_logs(PyObject *mod, PyObject *spec)
{
    const char *s = PyUnicode_AsUTF8(spec);
    ptc_error err;
    if (!s)
        return NULL;
    if (ptc_log_configure(s, &err) < 0)
        return PyErr_Format(PyExc_ValueError, "ptc.config.logs: %s", err.msg);
    Py_RETURN_NONE;
}

static PyObject *m_measure(PyObject *mod, PyObject *on)
{
    int v = PyObject_IsTrue(on);
    if (v < 0)
        return NULL;
    cap_measure_set(v == 1);
    Py_RETURN_NONE;
}

static PyObject *m_measured(PyObject *mod, PyObject *unused)
{
    return cap_measured();
}

static PyObject *m_measure_scope(PyObject *mod, PyObject *on)
{
    int v = PyObject_IsTrue(on);
    if (v < 0)
        return NULL;
    if (v == 0)
        return cap_measure_scope_end();
    if (cap_measure_scope_begin() < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ptexplain's text report (tools/explain) from measurements as JSON. */
static PyObject *m_explain_report(PyObject *mod, PyObject *args)
{
    const char *json, *target;
    double wall_ms;
    if (!PyArg_ParseTuple(args, "ssd", &json, &target, &wall_ms))
        return NULL;
    xp_report r = {.target = target, .wall_ms = wall_ms};
    ptc_error err;
    PyObject *text = NULL;
    if (xp_report_build(&r, json, strlen(json), &err) < 0) {
        char buf[1400];
        ptc_error_format(&err, buf, sizeof buf);
        PyErr_Format(PyExc_RuntimeError, "ptc.explain: cannot build the report: %s", buf);
    } else {
        ptc_buf out = {0};
        xp_render_text(&out, &r, false);
        text = PyUnicode_DecodeUTF8(out.data ? out.data : "", (Py_ssize_t)out.len, "replace");
        ptc_buf_free(&out);
    }
    xp_report_free(&r);
    return text;
}

static PyObject *m_entry_stats(PyObject *mod, PyObject *capsule)
{
    return cap_stats_dict(capsule);
}

static PyObject *m_compile_ptir(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *text;
    const char *kernel_dir = NULL;
    if (!PyArg_ParseTuple(args, "U|z", &text, &kernel_dir))
        return NULL;
    return cap_compile_ptir(text, kernel_dir);
}

static PyObject *m_run_compiled(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *capsule, *tensors, *rng = NULL;
    if (!PyArg_ParseTuple(args, "OO!|O", &capsule, &PyTuple_Type, &tensors, &rng))
        return NULL;
    return cap_run_compiled(capsule, tensors, rng == Py_None ? NULL : rng);
}

static PyObject *m_compiled_draws(PyObject *mod, PyObject *capsule)
{
    (void)mod;
    return cap_compiled_draws(capsule);
}

static PyObject *m_rng_draw(PyObject *mod, PyObject *unused)
{
    (void)mod, (void)unused;
    return cap_runtime_rng_draw();
}

static PyObject *m_autotune_counts(PyObject *mod, PyObject *unused)
{
    (void)mod, (void)unused;
    return cap_autotune_counts();
}

static PyObject *m_cuda_index_counts(PyObject *mod, PyObject *unused)
{
    (void)mod, (void)unused;
    return cap_cuda_index_counts();
}

static PyMethodDef module_methods[] = {
    {"_measure", m_measure, METH_O,
     "_measure(on): ptexplain's measurements (times around graphs and breaks, every event)."},
    {"_measure_scope", m_measure_scope, METH_O,
     "_measure_scope(True) starts measuring from nothing (ptc.explain); _measure_scope(False) "
     "returns what it measured and adds it to what was measured before."},
    {"_explain_report", m_explain_report, METH_VARARGS,
     "_explain_report(json, target, wall_ms): ptexplain's text report of the measurements."},
    {"_measured", m_measured, METH_NOARGS,
     "Totals of the measurements and every compiled function's events since _measure(True)."},
    {"_entry_stats", m_entry_stats, METH_O,
     "The measurements of one entry (a compile event's 'stats')."},
    {"_compile", (PyCFunction)(void (*)(void))m_compile, METH_VARARGS | METH_KEYWORDS,
     "_compile(target, backend, fullgraph=False, dynamic=None, mode='default')"},
    {"_compile_ptir", m_compile_ptir, METH_VARARGS,
     "_compile_ptir(text, kernel_dir=None): the first graph of a .ptir text compiled by the ptc "
     "backend (a capsule for _run_compiled); symbolic sizes stay symbolic. With kernel_dir, "
     "compiled as an export package's graph is, its kernels looked up there."},
    {"_run_compiled", m_run_compiled, METH_VARARGS,
     "_run_compiled(compiled, tensors, rng=None): runs it, its symbols bound from the tensors' "
     "shapes; random ops draw with a fresh offset from torch's generator, or with rng: an "
     "offset, or a 0-dim int64 CUDA tensor whose value the kernels read when they run."},
    {"_compiled_draws", m_compiled_draws, METH_O,
     "_compiled_draws(compiled): whether it has random ops (each run takes an RNG offset)."},
    {"_rng_draw", m_rng_draw, METH_NOARGS,
     "_rng_draw(): a run's RNG offset from torch's default generator (a 0-dim int64 tensor)."},
    {"_autotune_counts", m_autotune_counts, METH_NOARGS,
     "max-autotune in this process: kernels tuned, cache hits, searches cut by the budget, "
     "candidates timed, ms spent timing, and the default budget in ms."},
    {"_cuda_index_counts", m_cuda_index_counts, METH_NOARGS,
     "CUDA kernel launches in this process by index width (launches_i32, launches_i64) and the "
     "64-bit variants of symbolic kernels generated for calls past the 32-bit bound."},
    {"_package_seal", ptc_py_package_seal, METH_VARARGS,
     "_package_seal(dir, targets): compiles an export package's kernels, writes its manifest."},
    {"_package_verify", ptc_py_package_verify, METH_O,
     "_package_verify(dir): raises ValueError naming the file when a package is refused."},
    {"_package_kernels", ptc_py_package_kernels, METH_VARARGS,
     "_package_kernels(dir, target): the package's kernel folder for this machine's 'cpu' or "
     "'cuda', or None where it has none (ptc_model_load would compile them)."},
    {"_reset", m_reset, METH_NOARGS, "Drops every compiled entry."},
    {"_disable", m_disable, METH_O, "Marks a function as never traced into."},
    {"_set_compile_observer", m_set_compile_observer, METH_O,
     "Calls fn(event) at each compile and recompile (None: off)."},
    {"_interpret", m_interpret, METH_VARARGS,
     "_interpret(fn, args, kwargs=None, inline_all=False): run fn in ptc's interpreter."},
    {"_break_table", m_break_table, METH_NOARGS, "The graph-break taxonomy."},
    {"_get_config", m_get_config, METH_NOARGS, "The capture settings."},
    {"_set_config", (PyCFunction)(void (*)(void))m_set_config, METH_VARARGS | METH_KEYWORDS,
     "Changes capture settings."},
    {"_set_logs", m_set_logs, METH_O, "Sets the PTC_LOGS components."},
    {"_module_state_changed", m_module_state_changed, METH_NOARGS,
     "Bumps the module epoch (ptc.config.trust_module_state)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "ptc._C", "ptc's C front end (see the ptc package).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

/* Ctrl-C during a long wait (a planted hang, a compile worker's build):
 * Python's handler only sets a flag, so the wait asks here (ir.h), and the
 * interrupt is left pending for the caller's KeyboardInterrupt. Only the main
 * thread sees SIGINT in Python. */
static bool user_interrupted(void)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    bool hit = PyOS_InterruptOccurred() != 0;
    if (hit)
        PyErr_SetInterrupt();
    PyGILState_Release(gil);
    return hit;
}

PyMODINIT_FUNC PyInit__C(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    registry = PyList_New(0);
    compiled_type = (PyTypeObject *)PyType_FromSpec(&cf_spec);
    if (!registry || !compiled_type || PyModule_AddObjectRef(m, "CompiledFunction", (PyObject *)compiled_type) < 0 ||
        cap_init(m) < 0 || cap_graph_type_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    ptc_set_interrupt_check(user_interrupted);
    PyModule_AddStringConstant(m, "PTC_VERSION", PTC_VERSION);
    return m;
}
