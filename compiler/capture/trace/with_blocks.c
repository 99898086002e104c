/* with-blocks while tracing: what a `with` statement's manager does on entry
 * (grad modes, inference mode, autocast, nullcontext, and the managers of a
 * user's classes, whose __enter__ is traced), and the exit the block's end
 * calls. The interpreter reaches it through cap_hooks.before_with.
 */
#include "capture/trace/trace.h"

#include <string.h>

/* A context manager of a user's class whose __enter__ and __exit__ are
 * Python functions: __enter__ is traced now, in a nested run (a break in it
 * is a break at the with statement, which then runs for real), and the
 * bound __exit__ is what the block's end calls, traced too, as torch.compile
 * inlines both. Classes of torch and the standard library (whose managers
 * set process state through C calls) are declined: CAP_NONE; but for
 * @contextlib.contextmanager's, which runs the user's generator. */
static int python_manager(cap_interp *I, PyObject *mgr, PyObject **exit, PyObject **enter)
{
    PyTypeObject *t = Py_TYPE(mgr);
    PyObject *fenter = cap_type_lookup(t, cap_P.s_enter), *fexit = cap_type_lookup(t, cap_P.s_exit);
    if (!fenter || !fexit || !cap_is_function(fenter) || !cap_is_function(fexit))
        return CAP_NONE;
    PyObject *module = PyObject_GetAttr((PyObject *)t, cap_P.s_module);
    const char *name = module && PyUnicode_Check(module) ? PyUnicode_AsUTF8(module) : "";
    bool library = !name || strncmp(name, "torch", 5) == 0 ||
                   (strcmp(name, "contextlib") == 0 &&
                    strcmp(cap_tpname(t), "_GeneratorContextManager") != 0);
    Py_XDECREF(module);
    PyErr_Clear();
    if (library)
        return CAP_NONE;
    int rc = cap_t_call_sync(I, fenter, &mgr, 1, NULL, enter);
    if (rc != CAP_NEXT)
        return rc;
    *exit = cap_lookup_special(mgr, cap_P.s_exit);
    if (!*exit && !PyErr_Occurred())
        PyErr_SetString(cap_InternalError, "ptc: a context manager's __exit__ went missing");
    return *exit ? CAP_NEXT : CAP_ERR;
}

int cap_t_before_with(cap_interp *I, cap_frame *f, PyObject *mgr)
{
    cap_trace *T = I->T;
    PyObject *t = (PyObject *)Py_TYPE(mgr), *exit = NULL, *enter = NULL;
    if (t == cap_T.no_grad || t == cap_T.enable_grad ||
        (t == cap_T.inference_mode && PyObject_IsTrue(PyObject_GetAttrString(mgr, "mode")) == 1)) {
        exit = cap_gradexit_new(CAP_EXIT_GRAD, T->grad_enabled);
        T->grad_enabled = t == cap_T.enable_grad;
        enter = Py_NewRef(Py_None);
    } else if (t == cap_T.inference_mode) {
        PyErr_Clear();
        exit = cap_gradexit_new(CAP_EXIT_NONE, false);
        enter = Py_NewRef(Py_None);
    } else if (t == (PyObject *)cap_gradexit_type) {
        exit = Py_NewRef(mgr); /* set_grad_enabled(mode) already applied the mode */
        enter = Py_NewRef(Py_None);
    } else if (cap_amp_is_manager(mgr)) {
        exit = cap_gradexit_new(CAP_EXIT_AMP, false);
        int rc = exit ? cap_amp_enter(T, mgr, &((cap_gradexit *)exit)->amp_prev) : CAP_ERR;
        if (rc != CAP_NEXT) {
            Py_XDECREF(exit);
            return rc;
        }
        enter = Py_NewRef(mgr);
    } else if (t == cap_T.nullcontext) {
        exit = cap_gradexit_new(CAP_EXIT_NONE, false);
        enter = PyObject_GetAttrString(mgr, "enter_result");
    } else {
        int rc = python_manager(I, mgr, &exit, &enter);
        if (rc == CAP_NONE)
            return cap_t_break(T, CAP_B_CONTEXT_MANAGER, "with-block on a %s", cap_tpname(Py_TYPE(mgr)));
        if (rc != CAP_NEXT) {
            Py_XDECREF(enter);
            return rc;
        }
    }
    if (!exit || !enter) {
        Py_XDECREF(exit);
        Py_XDECREF(enter);
        return CAP_ERR;
    }
    cap_popn(f, 1);
    cap_push(f, exit);
    cap_push(f, enter);
    return CAP_NEXT;
}
