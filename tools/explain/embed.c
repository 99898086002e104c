/* ptexplain's embedded CPython.
 *
 * ptexplain links the libpython of the python3 the build was configured with
 * (PTC_PYTHON) and starts it as if it were that interpreter: program_name is
 * its sys.executable, so the prefix, a virtual environment's site-packages
 * and the user's PYTHONPATH are found exactly as `python3 script.py` finds
 * them, and the same torch is imported. sys.argv is the script and its
 * arguments, sys.path[0] the script's folder, followed by the built ptc
 * package (build/python).
 *
 * A small bootstrap module (below, filename "<ptexplain>") turns on ptc's
 * measurements, replaces torch.compile by a function with its signature that
 * calls ptc.compile (torch 1.13 has no torch.compile: it gets one), has the
 * Python processes the script starts measured too (ptc._explain), runs the
 * script as __main__ or imports a file and calls one function with its
 * example_inputs(), and finally serialises ptc._C._measured() as JSON. The
 * script's exception is kept until the report has been printed, then shown
 * with the bootstrap's own frames cut from its traceback.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "embed.h"

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char bootstrap[] =
    "import json, os, sys, traceback\n"
    "\n"
    "_notes = []\n"
    "\n"
    "class UsageError(Exception):\n"
    "    pass\n"
    "\n"
    "def setup(ptc_dir, first):\n"
    "    if first is not None:\n"
    "        sys.path.insert(0, first)\n"
    "    sys.path.insert(1 if first is not None else 0, ptc_dir)\n"
    "    try:\n"
    "        import ptc\n"
    "    except Exception as e:\n"
    "        raise UsageError('cannot import ptc from %s: %s' % (ptc_dir, e))\n"
    "    ptc._C._measure(True)\n"
    "    import ptc._explain\n"
    "    ptc._explain.explain_children()\n"
    "    try:\n"
    "        import torch\n"
    "    except Exception:\n"
    "        return  # the script says so itself if it needs torch\n"
    "    ptc._explain.route_torch_compile(torch, note)\n"
    "\n"
    "def note(text):\n"
    "    if text not in _notes:\n"
    "        _notes.append(text)\n"
    "\n"
    "def run_script(path):\n"
    "    import __main__\n"
    "    with open(path, 'rb') as f:\n"
    "        source = f.read()\n"
    "    code = compile(source, path, 'exec')\n"
    "    d = __main__.__dict__\n"
    "    d['__file__'] = path\n"
    "    d['__cached__'] = None\n"
    "    exec(code, d)\n"
    "\n"
    "def defines(path, names):\n"
    "    # Whether the file's top level binds each name, read without running it;\n"
    "    # None when it cannot tell (a star import, a syntax error).\n"
    "    import ast\n"
    "    try:\n"
    "        with open(path, 'rb') as f:\n"
    "            tree = ast.parse(f.read(), path)\n"
    "    except (SyntaxError, ValueError):\n"
    "        return None\n"
    "    bound = set()\n"
    "    for node in ast.walk(tree):\n"
    "        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):\n"
    "            bound.add(node.name)\n"
    "        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):\n"
    "            bound.add(node.id)\n"
    "        elif isinstance(node, (ast.Import, ast.ImportFrom)):\n"
    "            for a in node.names:\n"
    "                if a.name == '*':\n"
    "                    return None\n"
    "                bound.add(a.asname or a.name.split('.')[0])\n"
    "        elif isinstance(node, ast.Global):\n"
    "            bound.update(node.names)\n"
    "    return [n in bound for n in names]\n"
    "\n"
    "def run_entry(path, name, runs, backend, no_grad):\n"
    "    import contextlib, importlib.util\n"
    "    # Checked before the file runs: its top-level code may be a whole training run.\n"
    "    found = defines(path, [name.split('.')[0], 'example_inputs'])\n"
    "    if found is not None and not found[0]:\n"
    "        raise UsageError('%s has no %s' % (path, name))\n"
    "    if found is not None and not found[1]:\n"
    "        raise UsageError('%s has no example_inputs() to call %s with' % (path, name))\n"
    "    modname = os.path.splitext(os.path.basename(path))[0]\n"
    "    spec = importlib.util.spec_from_file_location(modname, path)\n"
    "    mod = importlib.util.module_from_spec(spec)\n"
    "    sys.modules[modname] = mod\n"
    "    spec.loader.exec_module(mod)\n"
    "    target = mod\n"
    "    for part in name.split('.'):\n"
    "        if not hasattr(target, part):\n"
    "            raise UsageError('%s has no %s' % (path, name))\n"
    "        target = getattr(target, part)\n"
    "    make = getattr(mod, 'example_inputs', None)\n"
    "    if not callable(make):\n"
    "        raise UsageError('%s has no example_inputs() to call %s with' % (path, name))\n"
    "    import ptc, torch\n"
    "    if isinstance(target, type) and issubclass(target, torch.nn.Module):\n"
    "        target = target()\n"
    "    if not callable(target):\n"
    "        raise UsageError('%s in %s is not callable' % (name, path))\n"
    "    inputs = make()\n"
    "    if isinstance(inputs, dict):\n"
    "        args, kwargs = (), inputs\n"
    "    elif isinstance(inputs, (tuple, list)):\n"
    "        args, kwargs = tuple(inputs), {}\n"
    "    else:\n"
    "        args, kwargs = (inputs,), {}\n"
    "    compiled = ptc.compile(target, backend=backend)\n"
    "    with torch.no_grad() if no_grad else contextlib.nullcontext():\n"
    "        for _ in range(runs):\n"
    "            compiled(*args, **kwargs)\n"
    "\n"
    "def collect():\n"
    "    import ptc, ptc._explain\n"
    "    ptc._explain.write_measured(_notes)  # for ptexplain TRACE_DIR\n"
    "    return ptc._explain.measured_json(ptc._C._measured(), _notes)\n"
    "\n"
    "def summary(e):\n"
    "    lines = ''.join(traceback.format_exception_only(type(e), e)).strip().splitlines()\n"
    "    return lines[-1] if lines else type(e).__name__\n"
    "\n"
    "def print_error(e):\n"
    "    tb = e.__traceback__\n"
    "    while tb is not None and tb.tb_frame.f_code.co_filename == '<ptexplain>':\n"
    "        tb = tb.tb_next\n"
    "    traceback.print_exception(type(e), e, tb)\n"
    "\n"
    "def flush():\n"
    "    for f in (sys.stdout, sys.stderr):\n"
    "        try:\n"
    "            f.flush()\n"
    "        except Exception:\n"
    "            pass\n";

static PyObject *boot;     /* the bootstrap's globals */
static PyObject *kept;     /* the script's exception */
static int exit_code = -1; /* SystemExit's status */
static char kept_summary[1024];

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The ptc package this ptexplain belongs to: in a build tree, build/python
 * beside build/tools/explain/ptexplain; installed (cmake --install, pip),
 * <prefix>/lib/python3.X/site-packages beside <prefix>/bin/ptexplain; else
 * the build folder baked in at configure. */
static void ptc_dir(char *out, size_t size)
{
    static const char *const beside_exe[] = {"../../python", "../" PTC_EXPLAIN_PYSITE};
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        const char *bindir = dirname(exe);
        for (size_t i = 0; i < sizeof beside_exe / sizeof *beside_exe; i++) {
            char probe[2 * PATH_MAX];
            snprintf(probe, sizeof probe, "%s/%s/ptc/__init__.py", bindir, beside_exe[i]);
            char real[PATH_MAX];
            if (realpath(probe, real)) {
                snprintf(out, size, "%s", dirname(dirname(real)));
                return;
            }
        }
    }
    snprintf(out, size, "%s", PTC_EXPLAIN_PYDIR);
}

/* "msg" of the pending Python exception (cleared). */
static void error_text(char *msg, size_t size)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    PyObject *s = v ? PyObject_Str(v) : NULL;
    const char *u = s ? PyUnicode_AsUTF8(s) : NULL;
    snprintf(msg, size, "%s", u && *u ? u : "unknown Python error");
    Py_XDECREF(s);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    PyErr_Clear();
}

static PyObject *boot_fn(const char *name)
{
    return PyDict_GetItemString(boot, name);
}

int xp_py_start(const xp_run *run, char *msg, size_t size)
{
    PyConfig cfg;
    PyConfig_InitPythonConfig(&cfg);
    cfg.parse_argv = 0;
    PyStatus st = PyConfig_SetBytesString(&cfg, &cfg.program_name, PTC_EXPLAIN_PYTHON);
    char *entry_argv[1] = {(char *)run->entry_file};
    if (!PyStatus_Exception(st))
        st = run->entry_file ? PyConfig_SetBytesArgv(&cfg, 1, entry_argv)
                             : PyConfig_SetBytesArgv(&cfg, run->argc, run->argv);
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    if (PyStatus_Exception(st)) {
        snprintf(msg, size, "cannot start Python (%s): %s", PTC_EXPLAIN_PYTHON,
                 st.err_msg ? st.err_msg : "error");
        return XP_SETUP;
    }
    PyObject *mod = PyModule_New("__ptexplain__");
    boot = mod ? PyModule_GetDict(mod) : NULL;
    /* Imports made from C while a bootstrap frame is the innermost one
       (PyImport_Import) find __import__ through that frame's globals. */
    if (boot && PyDict_SetItemString(boot, "__builtins__", PyEval_GetBuiltins()) < 0)
        boot = NULL;
    PyObject *code = boot ? Py_CompileString(bootstrap, "<ptexplain>", Py_file_input) : NULL;
    PyObject *r = code ? PyEval_EvalCode(code, boot, boot) : NULL;
    Py_XDECREF(code);
    Py_XDECREF(r);
    if (!r) {
        error_text(msg, size);
        return XP_SETUP;
    }
    char dir[PATH_MAX], first[PATH_MAX];
    ptc_dir(dir, sizeof dir);
    const char *path = run->entry_file ? run->entry_file : run->argv[0];
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", path);
    if (!realpath(dirname(copy), first))
        snprintf(first, sizeof first, ".");
    r = PyObject_CallFunction(boot_fn("setup"), "ss", dir, first);
    if (!r) {
        error_text(msg, size);
        return XP_SETUP;
    }
    Py_DECREF(r);
    return XP_RAN;
}

/* Keeps the pending exception: a SystemExit becomes an exit status. */
static int keep_error(char *msg, size_t size)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb && v)
        PyException_SetTraceback(v, tb);
    int rc = XP_RAISED;
    if (t && PyErr_GivenExceptionMatches(t, PyDict_GetItemString(boot, "UsageError"))) {
        PyObject *s = PyObject_Str(v);
        snprintf(msg, size, "%s", s ? PyUnicode_AsUTF8(s) : "usage error");
        Py_XDECREF(s);
        rc = XP_SETUP;
    } else if (t && PyErr_GivenExceptionMatches(t, PyExc_SystemExit)) {
        PyObject *c = v ? PyObject_GetAttrString(v, "code") : NULL;
        if (!c || c == Py_None) {
            exit_code = 0;
        } else if (PyLong_Check(c)) {
            exit_code = (int)PyLong_AsLong(c);
        } else {
            PyObject *s = PyObject_Str(c);
            fprintf(stderr, "%s\n", s ? PyUnicode_AsUTF8(s) : "");
            Py_XDECREF(s);
            exit_code = 1;
        }
        Py_XDECREF(c);
        PyErr_Clear();
        rc = exit_code == 0 ? XP_RAN : XP_RAISED;
        if (rc == XP_RAISED)
            snprintf(kept_summary, sizeof kept_summary, "SystemExit: %d", exit_code);
    } else {
        kept = v ? Py_NewRef(v) : NULL;
        PyObject *s = kept ? PyObject_CallFunctionObjArgs(boot_fn("summary"), kept, NULL) : NULL;
        const char *u = s ? PyUnicode_AsUTF8(s) : NULL;
        snprintf(kept_summary, sizeof kept_summary, "%s", u ? u : "exception");
        Py_XDECREF(s);
        PyErr_Clear();
    }
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    return rc;
}

int xp_py_exec(const xp_run *run, double *wall_ms, char *msg, size_t size)
{
    double t0 = now_ms();
    PyObject *r;
    if (run->entry_file)
        r = PyObject_CallFunction(boot_fn("run_entry"), "ssisO", run->entry_file, run->entry_fn, run->runs,
                                  run->backend, run->no_grad ? Py_True : Py_False);
    else
        r = PyObject_CallFunction(boot_fn("run_script"), "s", run->argv[0]);
    *wall_ms = now_ms() - t0;
    if (r) {
        Py_DECREF(r);
        return XP_RAN;
    }
    return keep_error(msg, size);
}

char *xp_py_collect(char *msg, size_t size)
{
    PyObject *r = PyObject_CallNoArgs(boot_fn("collect"));
    if (!r) {
        error_text(msg, size);
        return NULL;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(r, &n);
    char *out = s ? malloc((size_t)n + 1) : NULL;
    if (out)
        memcpy(out, s, (size_t)n + 1);
    else
        error_text(msg, size);
    Py_DECREF(r);
    return out;
}

const char *xp_py_error_summary(void)
{
    return kept_summary;
}

void xp_py_print_error(void)
{
    if (!kept)
        return;
    PyObject *r = PyObject_CallFunctionObjArgs(boot_fn("print_error"), kept, NULL);
    if (!r)
        PyErr_Print();
    Py_XDECREF(r);
    xp_py_flush();
}

void xp_py_flush(void)
{
    PyObject *r = boot ? PyObject_CallNoArgs(boot_fn("flush")) : NULL;
    Py_XDECREF(r);
    PyErr_Clear();
}

int xp_py_finish(void)
{
    Py_CLEAR(kept);
    return Py_FinalizeEx();
}
